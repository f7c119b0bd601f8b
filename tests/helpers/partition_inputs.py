"""Inputs the partitioning tests share: signals with known structure, synthetic workload timings and
dependency-pattern presets."""
from __future__ import annotations

import math

import numpy as np
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.partition import BlockPattern, DependencyPattern
from pyg_dynscale.partition.costs.workload import TimingSet


def community_signal(T: int = 6, k: int = 2, size: int = 10, p_in: float = 0.5, interleave: bool = False,
                     seed: int = 0) -> DynamicGraphSignal:
    """``k`` disconnected communities of ``size`` vertices that persist over ``T``
    snapshots. With ``interleave`` vertex ``i`` belongs to community ``i % k``
    (so contiguous id ranges mix communities)."""
    rng = np.random.default_rng(seed)
    members = [np.arange(c, k * size, k) if interleave else np.arange(c * size, (c + 1) * size) for c in range(k)]
    edges, feats, targets = [], [], []
    for _ in range(T):
        es = []
        for c in range(k):
            a = rng.random((size, size)) < p_in
            i, j = np.nonzero(a)
            m = i != j
            es.append(np.stack([members[c][i[m]], members[c][j[m]]]))
        edges.append(np.concatenate(es, 1))
        feats.append(rng.standard_normal((k * size, 2)))
        targets.append(rng.standard_normal(k * size))
    return DynamicGraphSignal(edges, None, feats, targets)


def random_signal(seed: int = 0, T: int = 8, V: int = 60, deg: int = 3) -> DynamicGraphSignal:
    rng = np.random.default_rng(seed)
    node_ids, edges = [], []
    for _ in range(T):
        ids = np.sort(rng.choice(V, size=int(rng.integers(V // 2, V + 1)), replace=False))
        n = ids.size
        edges.append(rng.integers(0, n, size=(2, deg * n)))
        node_ids.append(ids)
    feats = [rng.standard_normal((ids.size, 2)) for ids in node_ids]
    return DynamicGraphSignal(edges, None, feats, None, node_ids=node_ids, num_vertices=V)


def small_signal(seed: int = 0, T: int = 6, V: int = 40) -> DynamicGraphSignal:
    rng = np.random.default_rng(seed)
    node_ids = [np.sort(rng.choice(V, size=int(rng.integers(V // 2, V + 1)), replace=False)) for _ in range(T)]
    edges = [rng.integers(0, ids.size, size=(2, 3 * ids.size)) for ids in node_ids]
    feats = [rng.standard_normal((ids.size, 4)) for ids in node_ids]
    return DynamicGraphSignal(edges, None, feats, None, node_ids=node_ids, num_vertices=V)


def synthetic_timings(n: int = 200, seed: int = 0) -> TimingSet:
    """Deterministic 'timings' with a known non-linear law (no machine noise)."""
    g = torch.Generator().manual_seed(seed)
    V = torch.exp(torch.rand(n, generator=g, dtype=torch.float64) * math.log(4000) + math.log(30)).round()
    E = (V * torch.exp(torch.rand(n, generator=g, dtype=torch.float64) * math.log(16))).round()
    F = torch.tensor([8.0, 32.0, 64.0], dtype=torch.float64)[torch.randint(3, (n,), generator=g)]
    H = torch.tensor([16.0, 64.0], dtype=torch.float64)[torch.randint(2, (n,), generator=g)]
    K = torch.tensor([1.0, 2.0], dtype=torch.float64)[torch.randint(2, (n,), generator=g)]
    kinds = torch.cat([torch.zeros(n // 2, dtype=torch.long), torch.ones(n - n // 2, dtype=torch.long)])
    Et = (V * 0.5).round()
    edges = torch.where(kinds == 0, E, Et)
    t = 1e-4 + 1e-7 * (V * F + edges * H) * K
    return TimingSet(kinds, V, edges, F, H, K, t)


# (tests/partition/costs/test_plan_bytes.py uses PRESETS[0], PRESETS[3] and PRESETS[-1] ("mixed") by index: keep them there)
PRESETS = [
    DependencyPattern.preset("tgcn", 3, 5),
    DependencyPattern.preset("tgcn", 3, 5, gcn_layers=2, num_blocks=2),
    DependencyPattern.preset("mpnnlstm", 3, 4),
    DependencyPattern.preset("dysat", 3, 6, num_blocks=2, gat_layers=2),
    DependencyPattern.preset("gconvgru", 3, 4, K=3),
    DependencyPattern.preset("mpnnlstm", 3, 4, num_blocks=2),
    DependencyPattern.preset("mpnnlstm-pygt", 3, 4, num_blocks=2),
    # block 0 without spatial layers: nothing is static, block 1's spatial:0 is per-epoch traffic
    DependencyPattern((BlockPattern((), "recurrent", 3), BlockPattern((5, 2), "none", 0, 6)), 2, "late-spatial"),
    DependencyPattern((BlockPattern((7,), "attention", 2, 9), BlockPattern((), "recurrent", 3)), 2, "mixed"),
]
