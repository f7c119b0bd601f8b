"""Shard tests' helpers: a damaged shard file."""
from __future__ import annotations


def corrupt(path: str) -> None:
    """Flip a quarter of the file's bytes in its middle (zip padding alone
    would be harmless: the tensors' bytes must change)."""
    data = bytearray(open(path, "rb").read())
    lo, hi = 3 * len(data) // 8, 5 * len(data) // 8
    data[lo:hi] = bytes(b ^ 0xFF for b in data[lo:hi])
    open(path, "wb").write(bytes(data))


def ring_signal(V: int, T: int, F: int):
    """``T`` snapshots of a ring over ``V`` vertices in float64: weights, ``F`` features and a target drawn per
    snapshot (seed 0), for the shard memory tests' large signals."""
    import torch

    from pyg_dynscale import DynamicGraphSignal

    g = torch.Generator().manual_seed(0)
    src = torch.arange(V)
    ring = torch.cat([torch.stack([src, (src + 1) % V]), torch.stack([(src + 1) % V, src])], 1)
    return DynamicGraphSignal([ring] * T, [torch.rand(ring.shape[1], generator=g, dtype=torch.float64) for _ in range(T)],
                              [torch.randn(V, F, generator=g, dtype=torch.float64) for _ in range(T)],
                              [torch.randn(V, generator=g, dtype=torch.float64) for _ in range(T)],
                              num_vertices=V, dtype=torch.float64)
