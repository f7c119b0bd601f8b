"""A process's resident memory from ``/proc`` (Linux), and glibc's allocator pinned so that it follows what the
process holds."""
from __future__ import annotations

import ctypes
from typing import Any, Optional

M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # glibc mallopt parameters


def proc_status(key: str) -> int:
    """``key`` (``"VmRSS"``, ``"VmHWM"``) of ``/proc/self/status``, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def reset_peak() -> int:
    """Reset this process's peak RSS (``VmHWM``) to its current RSS; returns that level."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return proc_status("VmRSS")


def peak_rss_measurable() -> bool:
    """Whether this process can reset its peak RSS (``/proc/self/clear_refs``, Linux) and read it back."""
    try:
        reset_peak()
        return proc_status("VmHWM") > 0
    except OSError:
        return False


def glibc() -> Optional[Any]:
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


def pin_allocator() -> None:
    """One arena and a fixed 64 KiB mmap threshold: a freed large buffer goes back to the system at once (glibc's
    adaptive threshold would otherwise rise after the first large free and keep later ones in the heap, so a
    process's RSS would depend on what it ran before). For a process of its own: it stays set."""
    libc = glibc()
    libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
    libc.mallopt(M_ARENA_MAX, 1)
