r"""The partitioning algorithms' compiled kernels (numba) and the one choice
between them and their torch twins (:mod:`.backend`).

:mod:`.jit` imports numba (the only import of it in ``partition/``) and holds
the kernels' thread count; :mod:`.kernels` (label propagation, chunk
assignment and refinement), :mod:`.csr` (CSR building and cuts) and
:mod:`.schemes` (PSS / PTS loops) are the kernels. Code elsewhere in
``partition/`` never tests for numba: it writes an operation's torch code
and decorates it with :func:`.backend.twin` of the compiled version.
"""
