"""Shard tests' helpers: a damaged shard file."""
from __future__ import annotations


def corrupt(path: str) -> None:
    """Flip a quarter of the file's bytes in its middle (zip padding alone
    would be harmless: the tensors' bytes must change)."""
    data = bytearray(open(path, "rb").read())
    lo, hi = 3 * len(data) // 8, 5 * len(data) // 8
    data[lo:hi] = bytes(b ^ 0xFF for b in data[lo:hi])
    open(path, "wb").write(bytes(data))
