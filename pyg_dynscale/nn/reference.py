r"""The per-snapshot reference loop (PyGT's canonical loop, generalised to
vertex sets that change over time).

PyGT's loop (C) carries ``H`` from one snapshot to the next; row ``i`` of ``H``
is vertex ``i`` because the vertex set is fixed. With changing vertex sets the
same semantics is: vertex ``i``'s state at ``t`` is its state at its previous
appearance (zeros at its first). :func:`per_snapshot_outputs` keeps one state
row per vertex id (a table) and calls the model once per snapshot, which is
exactly PyGT's loop when the vertex set is fixed. It is the oracle of the
fused runtime's tests and the baseline of its benchmark.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

__all__ = ["per_snapshot_outputs"]

Step = Callable[[Tensor, Tensor, Optional[Tensor], Optional[Tensor]], Tensor]


def per_snapshot_outputs(step: Step, signal: Any, state_width: int = 0, h0_table: Optional[Tensor] = None,
                         y_only: bool = False) -> Tensor:
    r"""Run ``step(x_t, edge_index_t, edge_weight_t, H_t)`` once per snapshot.

    Args:
        step: one snapshot's forward (e.g. a PyGT ``TGCN`` instance).
        signal: a :class:`~pyg_dynscale.data.DynamicGraphSignal`.
        state_width: width of the carried state; ``0`` = no state (``H=None``
            every call, outputs concatenated as returned).
        h0_table: ``[num_vertices, state_width]`` initial state per vertex
            (default zeros, = PyGT's ``H=None``).
        y_only: the step returns ``(y, h)`` (PyGT's example ``RecurrentGCN``):
            carry ``h``, return the ``y`` rows.

    Returns:
        ``[N, *]`` the outputs of all snapshots, concatenated in vertex-time
        node order (for a stateful step the output is the new state).
    """
    outs = []
    table = h0_table
    for t in range(signal.num_snapshots):
        d = signal.snapshot(t)
        if state_width:
            if table is None:
                table = d.x.new_zeros(signal.num_vertices, state_width)
            h = step(d.x, d.edge_index, d.edge_attr, table.index_select(0, d.n_id))
            y, h = h if y_only else (h, h)
            table = table.index_copy(0, d.n_id, h)  # out of place: autograd keeps every step
            h = y
        else:
            h = step(d.x, d.edge_index, d.edge_attr, None)
        outs.append(h)
    return torch.cat(outs, 0)


def dysat_per_snapshot(model: Any, signal: Any) -> Tensor:
    r"""DySAT computed one snapshot at a time (the reference of the fused path).

    At snapshot :math:`t` each block runs its GAT on :math:`G_t` alone, then
    every vertex present at :math:`t` attends over its own earlier rows of that
    block (kept in a history, passed as ``past``) and its current row.

    Returns:
        ``[N, hidden]`` final embeddings in vertex-time node order.
    """
    B = len(model.blocks)
    hist_x: list[list[Tensor]] = [[] for _ in range(B)]
    hist_v: list[Tensor] = []
    hist_t: list[Tensor] = []
    outs = []
    for t in range(signal.num_snapshots):
        d = signal.snapshot(t)
        vid = d.n_id
        n = vid.numel()
        dev = vid.device
        if hist_v:
            pv, pt = torch.cat(hist_v), torch.cat(hist_t)
            # rank of each previous row's vertex among the vertices present now (-1: absent)
            lookup = torch.full((signal.num_vertices,), -1, dtype=torch.long, device=dev)
            lookup[vid] = torch.arange(n, device=dev)
            r = lookup[pv]
            keep = (r >= 0).nonzero().flatten()
            order = keep[torch.argsort(r[keep] * (t + 1) + pt[keep])]  # by vertex, then time
            past_ptr = torch.zeros(n + 1, dtype=torch.long, device=dev)
            past_ptr[1:] = torch.cumsum(torch.bincount(r[keep], minlength=n), 0)
            past_pos = pt[order]
        else:
            order = torch.zeros(0, dtype=torch.long, device=dev)
            past_ptr = torch.zeros(n + 1, dtype=torch.long, device=dev)
            past_pos = order
        h = d.x
        seq_ptr = torch.arange(n + 1, device=dev)
        pos = torch.full((n,), t, dtype=torch.long, device=dev)
        for b, block in enumerate(model.blocks):
            z = block.structure(h, d.edge_index)
            px = torch.cat(hist_x[b]).index_select(0, order) if hist_x[b] else z.new_zeros(0, z.shape[1])
            h_new = block.time(z, seq_ptr, pos, past=(px, past_ptr, past_pos))
            hist_x[b].append(z)
            h = h_new
        hist_v.append(vid)
        hist_t.append(torch.full((n,), t, dtype=torch.long, device=dev))
        outs.append(h)
    return torch.cat(outs, 0)
