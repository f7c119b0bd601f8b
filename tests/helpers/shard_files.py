"""Shard tests' helpers: a damaged shard file and a process's peak resident memory (``/proc``)."""
from __future__ import annotations


def corrupt(path: str) -> None:
    """Flip a quarter of the file's bytes in its middle (zip padding alone
    would be harmless: the tensors' bytes must change)."""
    data = bytearray(open(path, "rb").read())
    lo, hi = 3 * len(data) // 8, 5 * len(data) // 8
    data[lo:hi] = bytes(b ^ 0xFF for b in data[lo:hi])
    open(path, "wb").write(bytes(data))


def proc_status(key: str) -> int:
    """``key`` (``"VmRSS"``, ``"VmHWM"``) of ``/proc/self/status``, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def peak_rss_measurable() -> bool:
    """Whether this process can reset its peak RSS (``/proc/self/clear_refs``, Linux) and read it back."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return proc_status("VmHWM") > 0
    except OSError:
        return False
