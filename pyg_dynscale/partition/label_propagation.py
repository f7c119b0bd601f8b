r"""Size-constrained, weighted label propagation on an edge list (DGC §4.1).

The kernel behind chunk generation (:func:`~pyg_dynscale.partition.pgc.partition_pgc`)
and behind its boundary refinement (labels = ranks). Everything is done with
sorts and segment reductions on edge arrays; the only Python loop is over rounds.

Algorithm (one round :math:`r`):

1. *Active nodes*: nodes whose neighbourhood changed since they were last
   evaluated ("dirty") **and** that belong to this round's half. Halves are a
   seeded random Bernoulli(1/2) mask on even rounds and its complement on the
   following odd round, so two consecutive rounds evaluate every dirty node
   once. Updating only half of the nodes per round is the standard fix for the
   oscillation of synchronous label propagation (two neighbours swapping labels
   forever).
2. *Scores* (Eq. 2): for every active node :math:`v` and every label :math:`c`
   among its neighbours, :math:`\mathrm{weight}(c) = \sum_{u \in N(v),\,
   \ell(u) = c} w_{uv}`. Computed by one stable sort of the key
   ``v * L + label[u]`` over the active edge entries, ``unique_consecutive``
   and a segment sum.
3. *Choice*: labels whose size would exceed the cap if :math:`v` joined are
   excluded; :math:`v` takes the remaining label of largest weight, ties broken
   by a seeded random priority of the labels. It moves only if that weight is
   strictly larger than the weight of its current label (so a node never
   leaves a label it is tied with; this makes the process converge).
4. *Cap* (vectorized, deterministic): movers are ranked inside each target
   label by gain (descending), then by a seeded random node priority; a mover
   is accepted while ``size[target] + cumsum(weights of the movers ranked
   before it, itself included) <= cap``. Departures from a label in the same
   round are not credited, so the cap holds after every round. With a
   ``floor``, departures are ranked the same way inside each source label and
   accepted while ``size[source] - cumsum >= floor``. A rejected mover stays
   dirty and retries in a later round.
5. Neighbours of nodes that moved become dirty.

Stops when no node is dirty, when the moves of the last (even, odd) pair of
rounds -- which together evaluate every node that was dirty at the start of
the pair -- are at most ``tol * num_nodes``, or after ``max_rounds``. With
``tol=0`` the result is a fixed point: no node can improve its label (except
movers refused by the cap). Same inputs and seed give bit-identical labels.

With ``tie_moves=True`` a node also moves when the best other label merely
ties with its current one, provided that label has a higher priority. On a
path (a temporal sequence with equal weights) plain label propagation freezes
into fragments that no node can strictly improve; tie moves let the
higher-priority fragment absorb its neighbour. Each tie move raises the
node's label priority, so ties cannot cycle.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from ..errors import PartitionError  # noqa: F401  (re-exported for callers)


@dataclass
class LabelPropagationResult:
    """Output of :func:`label_propagation`.

    Attributes:
        labels (Tensor): ``[n]`` final label of each node (int64, in ``[0, L)``).
        rounds (int): rounds run.
        converged (bool): whether it stopped by the convergence test rather than
            by ``max_rounds``.
        moved (list[int]): nodes that changed label in each round.
    """

    labels: Tensor
    rounds: int
    converged: bool
    moved: list[int] = field(default_factory=list)


def undirected_entries(src: Tensor, dst: Tensor, weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Both directions of each edge, self loops dropped: ``([2E'], [2E'], [2E'])``.

    Label propagation treats the supergraph as undirected: cutting an edge in
    either direction costs its weight.
    """
    keep = src != dst
    src, dst, weight = src[keep], dst[keep], weight[keep]
    return torch.cat([src, dst]), torch.cat([dst, src]), torch.cat([weight, weight])


@dataclass
class CSRGraph:
    r"""Undirected weighted graph in CSR form: the neighbours of node :math:`v`
    are ``dst[ptr[v]:ptr[v+1]]`` with weights ``weight[...]``; every edge is
    stored in both directions, self loops dropped.

    Built once per graph (one stable sort by source) and shared by chunk
    generation and refinement, so that a round touches only the entries of its
    active nodes.
    """

    num_nodes: int
    ptr: Tensor
    dst: Tensor
    weight: Tensor

    @classmethod
    def from_edges(cls, num_nodes: int, src: Tensor, dst: Tensor, weight: Tensor) -> "CSRGraph":
        """From each undirected edge given once (either direction). Repeated
        edges -- and ``(u, v)`` given together with ``(v, u)`` -- are merged
        into one entry per direction with the summed weight, so every
        ``(source, neighbour)`` pair occurs once."""
        n = int(num_nodes)
        s, d, w = undirected_entries(src.to(torch.long), dst.to(torch.long), weight)
        key, order = torch.sort(s * n + d, stable=True)
        del s, d
        ukey, inv = torch.unique_consecutive(key, return_inverse=True)
        del key
        w = torch.zeros(ukey.numel(), dtype=torch.float64, device=ukey.device).index_add_(0, inv, w[order].to(torch.float64))
        del inv, order
        s, d = ukey // n, ukey % n
        del ukey
        deg = torch.bincount(s, minlength=n)
        del s
        ptr = torch.zeros(n + 1, dtype=torch.long, device=deg.device)
        torch.cumsum(deg, 0, out=ptr[1:])
        # integer byte weights are exact in float32: halve the memory traffic
        if w.dtype == torch.float64 and bool((w.float().double() == w).all()):
            w = w.float()
        return cls(int(num_nodes), ptr, d, w)

    @property
    def degree(self) -> Tensor:
        return self.ptr[1:] - self.ptr[:-1]

    def sources(self) -> Tensor:
        """``[2E]`` source node of each entry."""
        return torch.repeat_interleave(torch.arange(self.num_nodes, device=self.ptr.device), self.degree,
                                       output_size=self.dst.numel())

    def contract(self, labels: Tensor, num_labels: int) -> "CSRGraph":
        """The label-level graph (:func:`contract`) as a :class:`CSRGraph`."""
        src = self.sources()
        one = src < self.dst  # each undirected edge once
        a, b, w = contract(labels, num_labels, src[one], self.dst[one], self.weight[one])
        return CSRGraph.from_edges(num_labels, a, b, w)


def _take(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` for a 1-D index; ``index_select`` is about twice as fast
    as advanced indexing on CPU."""
    return x.index_select(0, index)


def _rank_within_groups(group: Tensor, gain: Tensor, tiebreak: Tensor) -> Tensor:
    """Permutation sorting items by (group asc, gain desc, tiebreak asc)."""
    order = torch.sort(tiebreak, stable=True).indices
    order = order[torch.sort(-gain[order], stable=True).indices]
    return order[torch.sort(group[order], stable=True).indices]


def _accept_by_budget(group: Tensor, amount: Tensor, room: Tensor, gain: Tensor, tiebreak: Tensor) -> Tensor:
    r"""Boolean mask: accept items in rank order while the running total of
    ``amount`` inside their group stays ``<= room[group]``."""
    acc = torch.zeros(group.numel(), dtype=torch.bool, device=group.device)
    if group.numel() == 0:
        return acc
    order = _rank_within_groups(group, gain, tiebreak)
    g, a = group[order], amount[order]
    csum = torch.cumsum(a, 0)
    starts = torch.ones_like(g, dtype=torch.bool)
    starts[1:] = g[1:] != g[:-1]
    # running total inside the group = global cumsum minus cumsum before the group
    before = torch.where(starts, csum - a, torch.zeros_like(csum))
    before = torch.cummax(before, 0).values  # broadcast each group's offset forward
    acc[order] = (csum - before) <= room[g] + 1e-9 * room[g].abs().clamp(min=1.0)
    return acc


def label_propagation(
    graph: CSRGraph,
    *,
    node_weight: Optional[Tensor] = None,
    init: Optional[Tensor] = None,
    num_labels: Optional[int] = None,
    cap: Optional[float] = None,
    floor: Optional[float] = None,
    seed: int = 0,
    max_rounds: int = 30,
    tol: float = 0.0,
    progress: bool = False,
    boundary_only: bool = False,
    tie_moves: bool = False,
) -> LabelPropagationResult:
    r"""Weighted, size-constrained label propagation (DGC §4.1, Eq. 1-2).

    Args:
        graph (CSRGraph): :math:`n` nodes, undirected weighted edges (weight =
            bytes that cutting the edge costs).
        node_weight (Tensor, optional): ``[n]`` workload of each node (default 1).
        init (Tensor, optional): ``[n]`` initial labels in ``[0, num_labels)``;
            default the unique labels ``0..n-1`` of Eq. 1 (node ids are DGC's
            vertex-time gids).
        num_labels (int, optional): label space size :math:`L` (default ``n``).
        cap (float, optional): a label's total node weight may not grow beyond it.
        floor (float, optional): a label's total node weight may not shrink below
            it (used by the rank-level refinement).
        seed (int): seeds the half masks and the tie-break priorities.
        max_rounds (int): round limit.
        tol (float): stop when an (even, odd) pair of rounds moved at most ``tol * n`` nodes.
        progress (bool): print one line per round.
        boundary_only (bool): start with only the nodes that have a neighbour
            of another label marked dirty (refinement of a given labelling:
            interior nodes cannot move).
        tie_moves (bool): also move on ties towards a higher-priority label
            (see the module doc).

    Returns:
        :class:`LabelPropagationResult`.
    """
    ptr, dst, weight = graph.ptr, graph.dst, graph.weight
    dev = ptr.device
    n = int(graph.num_nodes)
    L = n if num_labels is None else int(num_labels)
    nw = torch.ones(n, dtype=torch.float64, device=dev) if node_weight is None else node_weight.to(torch.float64)
    labels = torch.arange(n, device=dev) if init is None else init.to(torch.long).clone()
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    label_pri = torch.randperm(L, generator=gen).to(dev)
    node_pri = torch.randperm(n, generator=gen).to(dev)
    cap_t = float("inf") if cap is None else float(cap)
    has_cap = cap is not None
    deg = graph.degree
    dirty = deg > 0
    if boundary_only:
        srcs = graph.sources()
        dirty = torch.zeros(n, dtype=torch.bool, device=dev)
        dirty[srcs[labels[srcs] != labels[dst]]] = True
        del srcs
    moved_hist: list[int] = []
    unique_labels = init is None  # Eq. 1 labels, until the first move
    half = torch.zeros(n, dtype=torch.bool, device=dev)
    converged = False
    r = 0
    for r in range(max_rounds):
        if not bool(dirty.any()):
            converged = True
            break
        if r % 2 == 0:
            half = (torch.rand(n, generator=gen) < 0.5).to(dev)
        else:
            half = ~half
        act = (dirty & half).nonzero().flatten()
        size = torch.zeros(L, dtype=torch.float64, device=dev).index_add_(0, labels, nw)
        moved = 0
        if act.numel():
            idx, counts = _ranges(ptr, act)
            A = act.numel()
            s_loc = torch.repeat_interleave(torch.arange(A, device=dev), counts, output_size=idx.numel())
            lab = _take(labels, _take(dst, idx))
            if unique_labels:
                # Eq. 1 labels are all distinct and (source, neighbour) pairs are
                # unique in a CSRGraph: every entry is its own (node, label) segment
                seg_loc, seg_lab, score = s_loc, lab, _take(weight, idx).to(torch.float64)
            elif A * L <= max(4 * idx.numel(), 1 << 16):
                # few labels (rank-level refinement): dense [A, L] sums, no sort
                dense = torch.zeros(A * L, dtype=torch.float64, device=dev).index_add_(
                    0, s_loc * L + lab, _take(weight, idx).to(torch.float64))
                nz = (dense != 0).nonzero().flatten()
                seg_loc, seg_lab, score = nz // L, nz % L, _take(dense, nz)
                del dense, nz
            else:
                key, perm = torch.sort(s_loc * L + lab, stable=True)
                w = _take(weight, _take(idx, perm)).to(torch.float64)
                del perm
                ukey, inv = torch.unique_consecutive(key, return_inverse=True)
                del key
                score = torch.zeros(ukey.numel(), dtype=torch.float64, device=dev).index_add_(0, inv, w)
                del inv, w
                seg_loc, seg_lab = ukey // L, ukey % L
                del ukey
            del s_loc, idx, lab
            seg_node = _take(act, seg_loc)
            is_cur = seg_lab == _take(labels, seg_node)
            cur = torch.zeros(A, dtype=torch.float64, device=dev).index_add_(0, seg_loc[is_cur], score[is_cur])
            allowed = ~is_cur
            if has_cap:
                allowed &= _take(size, seg_lab) + _take(nw, seg_node) <= cap_t
            masked = torch.where(allowed, score, torch.full_like(score, -torch.inf))
            best = torch.full((A,), -torch.inf, dtype=torch.float64, device=dev).scatter_reduce(
                0, seg_loc, masked, reduce="amax")
            at_best = allowed & (masked == _take(best, seg_loc))
            pri = torch.where(at_best, _take(label_pri, seg_lab), torch.full_like(seg_lab, -1))
            best_pri = torch.full((A,), -1, dtype=torch.long, device=dev).scatter_reduce(0, seg_loc, pri, reduce="amax")
            chosen = (at_best & (pri == _take(best_pri, seg_loc))).nonzero().flatten()
            m_loc, m_to = seg_loc[chosen], seg_lab[chosen]
            gain = best[m_loc] - cur[m_loc]
            go = gain > 0
            if tie_moves:
                # a tie moves towards the label of higher priority, which lets
                # fragments of a path (a temporal sequence) merge instead of
                # freezing; priorities strictly increase, so it cannot cycle
                go |= (gain == 0) & (best[m_loc] > 0) & (_take(label_pri, m_to) > _take(label_pri, _take(labels, _take(act, m_loc))))
            m_node, m_to, gain = act[m_loc[go]], m_to[go], gain[go]
            del seg_loc, seg_lab, seg_node, score, is_cur, allowed, masked, at_best, pri, chosen
            acc = torch.ones(m_node.numel(), dtype=torch.bool, device=dev)
            if has_cap and m_node.numel():
                incoming = torch.zeros(L, dtype=torch.float64, device=dev).index_add_(0, m_to, nw[m_node])
                if bool((size + incoming > cap_t).any()):
                    acc &= _accept_by_budget(m_to, nw[m_node], cap_t - size, gain, node_pri[m_node])
            if floor is not None and m_node.numel():
                m_from = labels[m_node]
                acc &= _accept_by_budget(m_from, nw[m_node], size - float(floor), gain, node_pri[m_node])
            # evaluated nodes are clean unless their move was rejected (they retry)
            dirty[act] = False
            dirty[m_node[~acc]] = True
            mv = m_node[acc]  # ascending: act is sorted and seg order follows it
            labels[mv] = m_to[acc]
            moved = int(mv.numel())
            unique_labels = unique_labels and moved == 0
            if moved:
                nidx, _ = _ranges(ptr, mv)
                dirty[_take(dst, nidx)] = True
        moved_hist.append(moved)
        if progress:
            print(f"[label_propagation] round {r}: active={int(act.numel())} moved={moved}")
        # an (even, odd) pair of rounds evaluates every node dirty at its start
        # (mask, then complement), so the test is made at the end of a pair
        if r % 2 == 1 and moved_hist[-1] + moved_hist[-2] <= tol * n:
            converged = True
            r += 1
            break
    else:
        r = max_rounds
    return LabelPropagationResult(labels=labels, rounds=r, converged=converged, moved=moved_hist)


def _ranges(ptr: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """Entry indices of the CSR rows ``nodes`` (concatenated) and the row lengths."""
    starts = _take(ptr, nodes)
    counts = _take(ptr, nodes + 1) - starts
    total = int(counts.sum())
    offs = torch.cumsum(counts, 0) - counts
    idx = torch.arange(total, device=ptr.device) - torch.repeat_interleave(offs - starts, counts, output_size=total)
    return idx, counts


def compact_labels(labels: Tensor) -> tuple[Tensor, int]:
    """Relabel to ``0..C-1`` (in increasing order of the old label): ``(labels, C)``."""
    uniq, inv = torch.unique(labels, return_inverse=True)
    return inv, int(uniq.numel())


def contract(
    labels: Tensor, num_labels: int, src: Tensor, dst: Tensor, weight: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    r"""The label-level graph: each undirected pair ``a < b`` of distinct labels
    once, with the summed weight of the edges between them.

    Args:
        labels: ``[n]`` compact labels. src, dst, weight: ``[E]`` edges, each
            undirected edge given once (either direction).

    Returns:
        ``(a [P], b [P], w [P])`` with ``a < b``.
    """
    la, lb = labels[src], labels[dst]
    keep = la != lb
    la, lb, w = la[keep], lb[keep], weight[keep].to(torch.float64)
    lo, hi = torch.minimum(la, lb), torch.maximum(la, lb)
    key, perm = torch.sort(lo * num_labels + hi, stable=True)
    ukey, inv = torch.unique_consecutive(key, return_inverse=True)
    wsum = torch.zeros(ukey.numel(), dtype=torch.float64, device=labels.device).index_add_(0, inv, w[perm])
    return ukey // num_labels, ukey % num_labels, wsum
