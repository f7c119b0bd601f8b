r"""The one import of numba in the package's partitioning code, the compiled
kernels' thread count and the decorator that compiles a kernel.

:mod:`.backend` chooses between compiled and torch code with
:data:`HAVE_NUMBA`; the kernel modules of this package compile their loops
with :func:`jit` (numba's ``njit(cache=True, nogil=True)``: compiled code is
cached on disk, so later processes start fast).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Optional

try:  # numba is a core dependency; the torch backend covers platforms without it
    import numba

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only without numba
    numba = None
    HAVE_NUMBA = False


def jit(fn: Callable = None, **options) -> Callable:
    """``numba.njit(cache=True, nogil=True, **options)`` of ``fn`` (usable as
    ``@jit`` or ``@jit(parallel=True)``); ``fn`` itself without numba (a
    kernel is then only called by code the torch backend never runs)."""
    def wrap(f: Callable) -> Callable:
        return numba.njit(cache=True, nogil=True, **options)(f) if HAVE_NUMBA else f
    return wrap(fn) if fn is not None else wrap


#: the thread count :func:`use_threads` put in effect, per Python thread (as
#: numba's own setting): read instead of ``numba.get_num_threads()``, which
#: cost ~5 us a call -- and a label propagation asks a few times
_in_effect = threading.local()


def threads() -> int:
    """Threads the compiled kernels may use now (``numba.get_num_threads()``; 1 without numba)."""
    n = getattr(_in_effect, "n", None)
    if n is not None:
        return n
    return int(numba.get_num_threads()) if HAVE_NUMBA else 1


@contextlib.contextmanager
def use_threads(n: Optional[int]) -> Iterator[int]:
    """Run the block with ``n`` kernel threads (``None``: unchanged; capped at
    numba's pool size, ``NUMBA_NUM_THREADS``); yields the count in effect."""
    outer = getattr(_in_effect, "n", None)
    change = HAVE_NUMBA and n is not None
    if change:
        before = numba.get_num_threads()
        numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
    _in_effect.n = int(numba.get_num_threads()) if HAVE_NUMBA else 1
    try:
        yield _in_effect.n
    finally:
        _in_effect.n = outer
        if change:
            numba.set_num_threads(before)
