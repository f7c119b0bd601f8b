r"""The partitioning algorithms' compiled kernels (numba) and the one choice
between them and their torch twins (:mod:`.backend`).

:mod:`.jit` imports numba (the only import of it in ``partition/``) and holds
the kernels' thread count. The kernels: :mod:`.lp` (label propagation),
:mod:`.assign` (Algorithm 1 and chunk refinement), :mod:`.csr` (CSR building
and cuts) and :mod:`.schemes` (PSS / PTS loops); :mod:`.kernels` binds them
when numba imports. Code elsewhere in ``partition/`` never tests for numba:
it writes an operation's torch code and decorates it with
:func:`.backend.twin` of the compiled version.
"""
