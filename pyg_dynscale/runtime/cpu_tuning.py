r"""Process-level CPU allocator tuning for full-batch training.

The fused runtime works on a few large tensors per epoch (``[N, 3H]`` gate
buffers, the head's activations, their gradients) instead of many small ones.
glibc's ``malloc`` serves large blocks with fresh ``mmap`` pages and returns
them on ``free``, so every epoch pays one page fault per 4 KiB touched
(~2 us each on a VM: ~50 ms of a 200 ms T-GCN epoch with 120k vertex-time
nodes). :func:`tune_cpu_allocator` keeps freed memory in the heap instead
(``mallopt(M_MMAP_THRESHOLD)`` / ``mallopt(M_TRIM_THRESHOLD)``), the same
effect as ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` or running
under jemalloc/tcmalloc (which PyTorch's CPU performance guide recommends).

It is opt-in because it is process-wide: the process keeps its peak heap
instead of returning it to the OS.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["tune_cpu_allocator"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_cpu_allocator(mmap_threshold: int = 1 << 30, trim_threshold: int = (1 << 31) - 1) -> bool:
    """Make glibc keep freed large blocks for reuse (see the module docstring).

    Args:
        mmap_threshold: blocks at least this large still get their own ``mmap``.
        trim_threshold: free heap top kept before it is returned to the OS.

    Returns:
        ``True`` if both settings were applied (Linux with glibc), ``False``
        otherwise (other platforms / C libraries: nothing is changed).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    cap = (1 << 31) - 1
    ok = mallopt(_M_TRIM_THRESHOLD, min(int(trim_threshold), cap)) == 1
    ok = mallopt(_M_MMAP_THRESHOLD, min(int(mmap_threshold), cap)) == 1 and ok
    return ok
