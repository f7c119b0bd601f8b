"""Small random dynamic graph signals the tests of several packages share.

torch and pyg_dynscale are imported where they are used: a pytest session that only imports the helpers
(tests/data/test_dataset_stand_ins.py starts four) does not pay for them."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pyg_dynscale import DynamicGraphSignal


def make_dynamic_signal(seed: int = 0, T: int = 5, V: int = 12, F: int = 3) -> DynamicGraphSignal:
    """A random signal whose vertex set, edges and weights change every snapshot."""
    from pyg_dynscale import DynamicGraphSignal

    rng = np.random.default_rng(seed)
    node_ids, edges, weights, feats, targets = [], [], [], [], []
    for t in range(T):
        n = int(rng.integers(0, V + 1)) if t != 0 else V // 2
        ids = np.sort(rng.choice(V, size=n, replace=False))
        m = int(rng.integers(0, 3 * n + 1)) if n > 0 else 0
        ei = rng.integers(0, max(n, 1), size=(2, m)) if n > 0 else np.zeros((2, 0), dtype=np.int64)
        node_ids.append(ids)
        edges.append(ei)
        weights.append(rng.random(m))
        feats.append(rng.standard_normal((n, F)))
        targets.append(rng.standard_normal(n))
    return DynamicGraphSignal(edges, weights, feats, targets, node_ids=node_ids, num_vertices=V)


def make_signal(T=5, V=7, F=3, changing=True, seed=1, periods=0, dtype=None):
    """A random signal of ``T`` snapshots over ``V`` vertices (a changing vertex set unless ``changing`` is
    false), ``F`` features (``periods``: a trailing time axis), in ``dtype`` (default float64)."""
    import torch

    from pyg_dynscale import DynamicGraphSignal

    dtype = torch.float64 if dtype is None else dtype
    g = torch.Generator().manual_seed(seed)
    eis, ws, xs, ids, ys = [], [], [], [], []
    for t in range(T):
        if changing:
            k = int(torch.randint(2, V + 1, (1,), generator=g))
            keep = torch.randperm(V, generator=g)[:k].sort().values
        else:
            keep = torch.arange(V)
        n = keep.numel()
        E = 3 * n
        eis.append(torch.randint(0, n, (2, E), generator=g))
        ws.append(torch.rand(E, generator=g) + 0.1)
        xs.append(torch.randn(*((n, F, periods) if periods else (n, F)), generator=g))
        ys.append(torch.randn(n, generator=g))
        ids.append(keep)
    return DynamicGraphSignal(eis, ws, xs, ys, node_ids=ids, num_vertices=V, dtype=dtype)
