"""A slowly changing snapshot sequence (fixed vertex set, a few edges, weights and feature rows changed per
snapshot): what the incremental-aggregation tests of nn/ and windows/ run on."""
from __future__ import annotations

import numpy as np
import torch


def evolving(seed=0, T=12, V=40, E=120, change=0.05, feat_change=0.05, F=3, isolated=3, empty_at=(), burst_at=(),
             duplicates=True, weighted=True, order="shuffle"):
    """Fixed vertex set; every snapshot deletes and inserts ~change*E edges, re-weights ~change*E kept edges and
    changes ~feat_change*V feature rows. The last ``isolated`` vertices never get an edge; duplicate edges and
    self-loops occur; ``empty_at`` snapshots have no edges; ``burst_at`` snapshots change every edge and row.
    ``order``: how the stored edge list changes: ``"inplace"`` (an inserted edge takes a deleted one's position,
    one more is appended), ``"compact"`` (deleted ones leave, inserted ones are appended), ``"shuffle"`` (a new
    order every snapshot)."""
    rng = np.random.default_rng(seed)
    U = V - isolated

    def rand_edges(m):
        return rng.integers(0, U, size=(2, m))

    ei = rand_edges(E)
    if duplicates:
        ei[:, :4] = ei[:, 4:8]                      # duplicate pairs
        ei[1, 8:11] = ei[0, 8:11]                   # self-loops
    w = rng.random(E) + 0.1
    x = rng.standard_normal((V, F))
    eis, ws, xs = [], [], []
    for t in range(T):
        if t:
            m = max(1, int(change * ei.shape[1]))
            if order == "inplace":
                pos = rng.choice(ei.shape[1], size=m, replace=False)
                ei, w = ei.copy(), w.copy()
                ei[:, pos], w[pos] = rand_edges(m), rng.random(m) + 0.1
                ei, w = np.concatenate([ei, rand_edges(1)], 1), np.concatenate([w, rng.random(1) + 0.1])
            else:
                keep = np.sort(rng.permutation(ei.shape[1])[m:])
                ei, w = ei[:, keep], w[keep]
                ei, w = np.concatenate([ei, rand_edges(m)], 1), np.concatenate([w, rng.random(m) + 0.1])
            r = rng.choice(ei.shape[1], size=m, replace=False)
            w = w.copy()
            w[r] = rng.random(m) + 0.1
            rows = rng.choice(V, size=max(1, int(feat_change * V)), replace=False)
            x = x.copy()
            x[rows] = rng.standard_normal((rows.size, F))
            if t in burst_at:
                ei, w, x = rand_edges(ei.shape[1]), rng.random(ei.shape[1]) + 0.1, rng.standard_normal((V, F))
        cur_e, cur_w = (np.zeros((2, 0), dtype=np.int64), np.zeros(0)) if t in empty_at else (ei, w)
        perm = rng.permutation(cur_e.shape[1]) if order == "shuffle" else np.arange(cur_e.shape[1])
        eis.append(cur_e[:, perm])
        ws.append(cur_w[perm])
        xs.append(x)
    x_all = torch.tensor(np.concatenate(xs), dtype=torch.float64)
    ei_all = torch.tensor(np.concatenate(eis, 1), dtype=torch.long)
    ew = torch.tensor(np.concatenate(ws), dtype=torch.float64) if weighted else None
    node_ptr = torch.arange(T + 1) * V
    edge_ptr = torch.tensor(np.concatenate([[0], np.cumsum([e.shape[1] for e in eis])]))
    return x_all, ei_all, ew, node_ptr, edge_ptr
