r"""Gradient checkpointing of the distributed decomposed path: windows of snapshots.

SC'21 §3.1 on several ranks. With ``checkpoint_every=B``
:class:`~pyg_dynscale.distributed.DistributedTrainer` runs its share of the
signal in windows of :math:`B` consecutive snapshots, each under
:func:`torch.utils.checkpoint.checkpoint`. Inside a window everything is
what the unwindowed pass does on the sub-signal ``signal[t0:t1]`` -- fused
structure encoder with its halo exchanges, PSS-TS redistribution, recurrent
rounds of the pieces of sequences -- built from the window's own
:class:`~pyg_dynscale.partition.CommunicationPlan` and
:class:`~pyg_dynscale.distributed.local.RankLayout`. A window hands on only
its outputs and, per block, the state each window-sequence ends with.

**Carry.** Window :math:`w`'s sequence of vertex :math:`v` starts from the
state :math:`v` ended its previous appearance :math:`u` with (an earlier
window; zeros, or ``h0`` in block 0, at its first appearance). When the time
owners differ, :math:`\tau(u) \ne \tau(f)` for the window's first node
:math:`f`, that row crosses ranks in a *carry* exchange before the window,
counted as the block's ``temporal`` exchange: the windows' own temporal
rounds plus the carries move exactly the rows of the whole signal's plan,
and the windows' spatial and redistribution exchanges are the whole plan's
split by snapshot. Measured bytes therefore equal the whole plan's
prediction (tested).

**Recomputation sends nothing.** Rows a window received in the forward are
kept (keyed by the window and the call's position in it) and handed back by
the recomputation during the backward; each exchange's backward runs once,
from the original graph. The activations of one window are alive at a time,
plus the inputs and carried states of every window.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from ..errors import ModelInputError
from ..nn.decomposed import FusedGraph
from ..partition.partition import Partition
from ..partition.plan import CommunicationPlan, Exchange
from ..runtime.time_blocks import check_windowable
from .local import ExchangeMap, RankLayout

__all__ = ["RankWindow", "WindowCarry", "build_windows"]


@dataclass
class WindowCarry:
    """The states entering one window's sequences from earlier windows, for
    one rank (the same rows for every block: a block's recurrent rounds
    depend on the time owners only; ``maps`` holds one exchange map per
    block).

    Attributes:
        maps (dict): ``block -> ExchangeMap`` of the rows crossing ranks, or
            empty when no rank sends any (then no collective is issued).
        sources (list): ``(earlier window, positions in its ends)`` in gather
            order; the gathered rows, permuted by ``order``, are
            ``[sent rows..., rows kept on this rank...]``.
        order (Tensor): permutation from gather order to send-then-local order.
        num_send (int): rows this rank sends.
        local_seq (Tensor): window sequence of each row kept on this rank.
        recv_seq (Tensor): window sequence of each received row (arrival order).
    """

    maps: dict
    sources: list
    order: Tensor
    num_send: int
    local_seq: Tensor
    recv_seq: Tensor


@dataclass
class RankWindow:
    """Snapshots ``[t0, t1)`` as one rank runs them.

    Attributes:
        t0, t1 (int): the snapshot range.
        layout (RankLayout): of the sub-signal (window-local gids).
        s_rows (slice): the window's rows in the trainer's structure rows
            ``layout.S`` (they are contiguous: gids are time-major; so are
            its time rows, which is checked).
        end_select (list): per recurrent round, the pieces whose last node
            ends its window-sequence (the same for every block).
        num_sequences (int): sequences of the sub-signal.
        h0_seq (Tensor): ``[num_sequences]`` the whole signal's sequence of each.
        carry (WindowCarry, optional): ``None`` for the first window.
    """

    t0: int
    t1: int
    layout: RankLayout
    s_rows: slice
    end_select: list
    num_sequences: int
    h0_seq: Tensor
    carry: Optional[WindowCarry]


def build_windows(signal: Any, partition: Any, pattern: Any, rank: int, every: int, input_halo: str,
                  full_layout: RankLayout, model: Any) -> list[RankWindow]:
    r"""The non-empty windows of ``every`` snapshots of ``signal`` for rank
    ``rank``, with their layouts and carries.

    Raises:
        ModelInputError: ``every`` is not a positive int.
        NotImplementedError: the model cannot run in windows
            (:func:`~pyg_dynscale.runtime.time_blocks.check_windowable`).
    """
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ModelInputError("checkpoint_every", f"is {every!r}.", "give a number of snapshots >= 1, or None.")
    check_windowable(model)
    sg = signal.supergraph()
    N, T, R = sg.num_nodes, sg.num_snapshots, partition.num_parts
    ptr = signal.node_ptr.tolist()
    own = partition.owner
    town = partition.temporal_owner
    prev = torch.full((N,), -1, dtype=torch.long)  # previous / next appearance of each node (-1: none)
    nxt = torch.full((N,), -1, dtype=torch.long)
    u_all, v_all = sg.temporal_edge_index
    prev[v_all], nxt[u_all] = u_all, v_all
    # where each gid's end state lives on this rank: (window, position in its ends)
    end_win = torch.full((N,), -1, dtype=torch.long)
    end_pos = torch.full((N,), -1, dtype=torch.long)
    S_full, Q_full = full_layout.S, full_layout.Q
    windows: list[RankWindow] = []
    for t0 in range(0, T, every):
        t1 = min(t0 + every, T)
        lo, hi = ptr[t0], ptr[t1]
        if hi == lo:
            continue
        sub = signal[t0:t1]
        part = Partition(partition.scheme, R, own[lo:hi],
                         None if partition.time_owner is None else partition.time_owner[lo:hi])
        plan = CommunicationPlan.build(sub, part, pattern, input_halo=input_halo)
        lay = RankLayout(sub, part, plan, rank, FusedGraph.from_signal(sub))
        s_rows = _contiguous(S_full, lay.S + lo, "structure rows")
        _contiguous(Q_full, lay.Q + lo, "time rows")  # the windows' outputs, concatenated, are in Q order
        sub_sg = sub.supergraph()
        # pieces ending a window-sequence (their vertex does not come back before t1)
        is_end = torch.zeros(N, dtype=torch.bool)
        gids = torch.arange(lo, hi)
        is_end[lo:hi] = (nxt[gids] < 0) | (nxt[gids] >= hi)
        end_select, ends = [], []
        for info in lay.recurrent_rounds(0):
            g = info.graph
            last = info.gids.index_select(0, g.last_index()) + lo if g.num_nodes else info.gids
            keep = is_end[last].nonzero().flatten()
            end_select.append(keep)
            ends.append(last[keep])
        ends_all = torch.cat(ends) if ends else torch.zeros(0, dtype=torch.long)
        end_win[ends_all] = len(windows)
        end_pos[ends_all] = torch.arange(ends_all.numel())
        h0_seq = torch.searchsorted(sg.sequence_vertex, sub_sg.sequence_vertex)
        carry = None
        if windows:
            carry = _carry(sub_sg, lo, prev, town, R, rank, end_win, end_pos, pattern)
        windows.append(RankWindow(t0, t1, lay, s_rows, end_select, sub_sg.sequence_vertex.numel(), h0_seq,
                                  carry))
    return windows


def _contiguous(full: Tensor, part: Tensor, what: str) -> slice:
    """``part`` as a slice of the sorted ``full`` (it must be one)."""
    if part.numel() == 0:
        return slice(0, 0)
    a = int(torch.searchsorted(full, part[:1]))
    b = a + part.numel()
    if b > full.numel() or not torch.equal(full[a:b], part):
        raise AssertionError(f"a window's {what} are not a contiguous run of the whole pass's")  # a layout bug
    return slice(a, b)


def _carry(sub_sg: Any, lo: int, prev: Tensor, town: Tensor, R: int, rank: int, end_win: Tensor, end_pos: Tensor,
           pattern: Any) -> WindowCarry:
    """Rows of the states entering the window's sequences from an earlier window."""
    first = sub_sg.sequence_order.index_select(0, sub_sg.sequence_ptr[:-1]) + lo  # global gid of each sequence start
    seq = torch.arange(first.numel())
    u = prev[first]
    has = u >= 0
    first, seq, u = first[has], seq[has], u[has]
    src, dst = town[u], town[first]
    N = town.numel()
    cross = src != dst
    ex = Exchange.from_rows(0, "temporal", "temporal", pattern.blocks[0].time_width, pattern.bytes_per_element, R,
                            src[cross], dst[cross], u[cross], N, dedup=False)
    base = ExchangeMap.build(ex, rank, None, None)
    # u -> the window sequence it enters (each u has one next appearance)
    seq_of_u = torch.full((N,), -1, dtype=torch.long)
    seq_of_u[u] = seq
    local = (~cross) & (dst == rank)
    local_u = u[local]
    gather = torch.cat([base.send_gid, local_u])
    win, pos = end_win[gather], end_pos[gather]
    if gather.numel() and int(win.min()) < 0:
        raise AssertionError("a carried state is not among this rank's window ends")  # a layout bug
    key = win * (N + 1) + pos
    order_in = torch.argsort(key, stable=True)  # gather order: by window, then position
    sources = []
    ws = win[order_in]
    for w in torch.unique(ws).tolist():
        sources.append((w, pos[order_in][ws == w]))
    order = torch.empty_like(order_in)
    order[order_in] = torch.arange(order_in.numel())  # gathered row i is row order_in[i]: invert
    maps = {b: dataclasses.replace(base, key=(b, "temporal", "temporal"), width=blk.time_width)
            for b, blk in enumerate(pattern.blocks)} if ex.num_rows else {}
    return WindowCarry(maps, sources, order, base.send_gid.numel(), seq_of_u[local_u], seq_of_u[base.recv_gid])
