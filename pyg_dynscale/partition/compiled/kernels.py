r"""The compiled kernels of the partitioning algorithms, bound when numba imports.

:mod:`.lp` (label propagation), :mod:`.assign` (Algorithm 1 and chunk
refinement), :mod:`.csr` (CSR building and cuts) and :mod:`.schemes` (the
PSS / PTS loops) import numba; the compiled twins (:func:`.backend.twin`)
reach them as ``kernels.lp.lp_run``, ... -- attributes that exist only when
numba imported and that run only while the ``"numba"`` backend is in effect,
so that the algorithms import (and run on torch) without numba.
"""
from .jit import HAVE_NUMBA

if HAVE_NUMBA:
    from . import assign, csr, lp, schemes  # noqa: F401
