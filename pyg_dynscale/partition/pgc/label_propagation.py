r"""Size-constrained, weighted label propagation on an edge list (DGC §4.1).

The kernel behind chunk generation (:func:`~pyg_dynscale.partition.pgc.pipeline.partition_pgc`)
and behind its boundary refinement (labels = ranks). The torch reference does
everything with sorts and segment reductions on edge arrays, with one Python
iteration per round; the numba backend runs all rounds in one compiled call
(:func:`~pyg_dynscale.partition.compiled.kernels.lp.lp_rounds`) with bit-identical results.

Algorithm (one round :math:`r`):

1. *Active nodes*: nodes whose neighbourhood changed since they were last
   evaluated ("dirty") **and** that belong to this round's half. Halves are a
   seeded hash bit per node (:func:`half_bits`, fresh for every pair of
   rounds) on even rounds and its complement on the following odd round, so two consecutive rounds evaluate every dirty node
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
   by a priority of the labels (seeded random, or ordered by a given key such
   as the weighted degree, ``priority=``). Internally labels are renumbered
   by priority, so with integral weights the choice is one ``amax`` over the
   packed key ``score << bits | label`` (float weights: two ``amax`` passes,
   same result). It moves only if that weight is
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
the pair -- are at most ``tol * num_nodes``, when their summed gain is at most
``gain_tol`` times the total edge weight (``gain_tol > 0``; checked from
``min_rounds`` on), or after ``max_rounds``. With
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

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from ...errors import PartitionError  # noqa: F401  (re-exported for callers)
from ..compiled import backend, kernels


@dataclass
class LabelPropagationResult:
    """Output of :func:`label_propagation`.

    Attributes:
        labels (Tensor): ``[n]`` final label of each node (int64, in ``[0, L)``).
        rounds (int): rounds run.
        converged (bool): whether it stopped by the convergence test rather than
            by ``max_rounds``.
        moved (list[int]): nodes that changed label in each round.
        gains (list[float]): summed Eq. 2 gain of the accepted moves in each
            round (their weight to the new label minus to the old one).
        dense (bool): whether the compiled driver kept a dense
            ``[n, L]`` label-weight table (few labels, integral weights; see
            :func:`~pyg_dynscale.partition.compiled.kernels.lp.lp_rounds`). Results are the same either way.
    """

    labels: Tensor
    rounds: int
    converged: bool
    moved: list[int] = field(default_factory=list)
    gains: list[float] = field(default_factory=list)
    dense: bool = False


def undirected_entries(src: Tensor, dst: Tensor, weight: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r"""Both directions of each edge, self loops dropped: ``([2E'], [2E'], [2E'])``.

    Label propagation treats the supergraph as undirected: cutting an edge in
    either direction costs its weight.
    """
    keep = src != dst
    src, dst, weight = src[keep], dst[keep], weight[keep]
    return torch.cat([src, dst]), torch.cat([dst, src]), torch.cat([weight, weight])


# the compiled twins of CSRGraph's operations (:func:`~pyg_dynscale.partition.compiled.backend.twin`): host tensors only
def _on_host(x: Tensor) -> bool:
    return x.device.type == "cpu"


def _is_integral_compiled(w: Tensor) -> bool:
    return bool(kernels.lp.is_integral(as_numpy(w))) if _on_host(w) else NotImplemented


@backend.twin(_is_integral_compiled)
def _is_integral(w: Tensor) -> bool:
    """Whether every weight is a whole number."""
    return bool((w == torch.round(w)).all()) if w.numel() else True


def _from_edges_compiled(cls: type, num_nodes: int, src: Tensor, dst: Tensor, weight: Tensor) -> "CSRGraph":
    if not _on_host(src):
        return NotImplemented
    n = int(num_nodes)
    ptr, d, w = kernels.lp.csr_from_edges(n, as_numpy(src, torch.long), as_numpy(dst, torch.long), as_numpy(weight, torch.float64))
    return cls.from_csr(n, torch.from_numpy(ptr), torch.from_numpy(d), torch.from_numpy(w))


def _weighted_degree_compiled(graph: "CSRGraph") -> Tensor:
    if not _on_host(graph.ptr):
        return NotImplemented
    return torch.from_numpy(kernels.csr.weighted_degree(as_numpy(graph.ptr, torch.long), as_numpy(graph.weight)))


def _cut_compiled(graph: "CSRGraph", labels: Tensor) -> float:
    if not _on_host(graph.ptr):
        return NotImplemented
    return float(kernels.csr.csr_cut(as_numpy(graph.ptr, torch.long), as_numpy(graph.dst, torch.long),
                                              as_numpy(graph.weight), as_numpy(labels, torch.long)))


def _contract_compiled(graph: "CSRGraph", labels: Tensor, num_labels: int) -> "CSRGraph":
    if not _on_host(graph.ptr):
        return NotImplemented
    C = int(num_labels)
    ptr, d, wsum = (torch.from_numpy(a) for a in kernels.lp.contract_csr(
        as_numpy(graph.ptr, torch.long), as_numpy(graph.dst, torch.long), as_numpy(graph.weight), as_numpy(labels, torch.long), C,
        graph.symmetric))
    return graph._contracted(C, ptr, d, wsum)


@dataclass
class CSRGraph:
    r"""Undirected weighted graph in CSR form: the neighbours of node :math:`v`
    are ``dst[ptr[v]:ptr[v+1]]`` with weights ``weight[...]``; every edge is
    stored in both directions, self loops dropped.

    Built once per graph (one stable sort by source) and shared by chunk
    generation and refinement, so that a round touches only the entries of its
    active nodes.

    ``symmetric`` marks a graph made by the library's builders
    (:meth:`from_edges`, :func:`.coarsen.supergraph_csr`, :meth:`contract`
    of a marked graph), which store every edge in both directions with the
    same weight; contraction then sorts its rows by transposition
    (:func:`~pyg_dynscale.partition.compiled.csr.contract_csr`). A graph built by hand is not marked
    (the general path, correct for any CSR).
    """

    num_nodes: int
    ptr: Tensor
    dst: Tensor
    weight: Tensor
    symmetric: bool = field(default=False, compare=False)
    _integral: Optional[bool] = field(default=None, repr=False, compare=False)
    _total: Optional[float] = field(default=None, repr=False, compare=False)
    #: a bound on the summed |weight| of the entries, when a builder knows
    #: one without a scan (non-negative weights: twice the total); inherited
    #: by contraction, whose entries sum disjoint sets of these entries
    _abs_bound: Optional[float] = field(default=None, repr=False, compare=False)

    def total_weight(self) -> float:
        """Summed edge weight, each undirected edge once (cached; both backends use it)."""
        if self._total is None:
            self._total = float(self.weight.sum(dtype=torch.float64)) / 2.0
        return self._total

    def integral(self) -> bool:
        """Whether every weight is a whole number (cached): then Eq. 2 sums are
        exact integers and label propagation packs them with the label."""
        if self._integral is None:
            self._integral = _is_integral(self.weight)
        return self._integral

    @classmethod
    @backend.twin(_from_edges_compiled)
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
        return cls.from_csr(n, ptr, d, w)

    @classmethod
    def from_csr(cls, n: int, ptr: Tensor, d: Tensor, w: Tensor) -> "CSRGraph":
        """A graph from a symmetric builder (both directions of every edge)."""
        # integer byte weights are exact in float32: halve the memory traffic
        if w.dtype == torch.float64 and _exact_in_float32(w):
            w = w.float()
        return cls(n, ptr, d, w, symmetric=True)

    @property
    def degree(self) -> Tensor:
        return self.ptr[1:] - self.ptr[:-1]

    @backend.twin(_weighted_degree_compiled)
    def weighted_degree(self) -> Tensor:
        """``[n]`` summed weight of each node's edges (float64)."""
        cs = torch.zeros(self.dst.numel() + 1, dtype=torch.float64, device=self.ptr.device)
        torch.cumsum(self.weight.to(torch.float64), 0, out=cs[1:])
        return _take(cs, self.ptr[1:]) - _take(cs, self.ptr[:-1])

    @backend.twin(_cut_compiled)
    def cut(self, labels: Tensor) -> float:
        """Summed weight of the edges whose endpoints have different ``labels`` (``[n]``)."""
        srcs = self.sources()
        return float(self.weight[_take(labels, srcs) != _take(labels, self.dst)].double().sum()) / 2.0

    def sources(self) -> Tensor:
        """``[2E]`` source node of each entry."""
        return torch.repeat_interleave(torch.arange(self.num_nodes, device=self.ptr.device), self.degree,
                                       output_size=self.dst.numel())

    @backend.twin(_contract_compiled)
    def contract(self, labels: Tensor, num_labels: int) -> "CSRGraph":
        """The label-level graph: labels as nodes, the summed weight of the
        edges between two labels as their edge, as a :class:`CSRGraph`.

        Every edge is stored in both directions already, so one sort of the
        key ``(label[u], label[v])`` over the entries yields the contracted
        CSR directly (no second pass through :meth:`from_edges`)."""
        C = int(num_labels)
        lu = torch.repeat_interleave(labels, self.degree, output_size=self.dst.numel())
        lv = _take(labels, self.dst)
        keep = lu != lv
        key = lu[keep] * C + lv[keep]
        del lu, lv
        w = self.weight[keep]
        key, perm = torch.sort(key, stable=True)
        ukey, inv = torch.unique_consecutive(key, return_inverse=True)
        del key
        wsum = torch.zeros(ukey.numel(), dtype=torch.float64, device=ukey.device).index_add_(
            0, inv, _take(w, perm).to(torch.float64))
        del inv, perm, w
        s, d = ukey // C, ukey % C
        ptr = torch.zeros(C + 1, dtype=torch.long, device=ukey.device)
        torch.cumsum(torch.bincount(s, minlength=C), 0, out=ptr[1:])
        return self._contracted(C, ptr, d, wsum)

    def _contracted(self, C: int, ptr: Tensor, d: Tensor, wsum: Tensor) -> "CSRGraph":
        """The contracted graph from its float64 sums ``wsum``: float32 again
        when this graph's weights were and the sums stay exact. Sums of
        whole numbers are whole (float64 rounds large ones to whole numbers
        too), so an integral graph contracts to an integral one; when their
        summed magnitude is also below :math:`2^{24}` (``_abs_bound``) every
        sum is exact in float32: no scan of the weights per level."""
        whole = self._integral is True
        small_whole = whole and self._abs_bound is not None and self._abs_bound < 2.0 ** 24
        if self.weight.dtype == torch.float32 and (small_whole or _exact_in_float32(wsum)):
            wsum = wsum.float()
        return CSRGraph(C, ptr, d, wsum, self.symmetric, _integral=True if whole else None,
                        _abs_bound=self._abs_bound)


def _exact_in_float32_compiled(w: Tensor) -> bool:
    return bool(kernels.csr.exact_in_float32(as_numpy(w))) if _on_host(w) else NotImplemented


@backend.twin(_exact_in_float32_compiled)
def _exact_in_float32(w: Tensor) -> bool:
    """Whether a float64 tensor is unchanged by a float32 round trip."""
    return bool((w.float().double() == w).all())


def as_numpy(x: Tensor, dtype: Optional[torch.dtype] = None) -> np.ndarray:
    """Contiguous CPU numpy view (a copy only when a dtype change needs one)."""
    if dtype is not None and x.dtype != dtype:
        x = x.to(dtype)
    return x.contiguous().numpy()


def _take(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` for a 1-D index; ``index_select`` is about twice as fast
    as advanced indexing on CPU."""
    return x.index_select(0, index)


def _rank_within_groups(group: Tensor, gain: Tensor, tiebreak: Tensor) -> Tensor:
    """Permutation sorting items by (group asc, gain desc, tiebreak asc)."""
    order = torch.sort(tiebreak, stable=True).indices
    order = order[torch.sort(-gain[order], stable=True).indices]
    return order[torch.sort(group[order], stable=True).indices]


def budget_scale(total: float) -> float:
    r"""Budget units of step 4: node weights are counted in units of
    :math:`2^{e - 60}` with :math:`2^{e-1} \le W < 2^e` (``W`` = ``total``,
    the summed node weight), i.e. multiplied by the returned power of two,
    so every running total is an exact int64 below :math:`2^{61}` and does
    not depend on the order in which other labels were summed."""
    if not math.isfinite(total) or total <= 0:
        return 1.0
    return math.ldexp(1.0, 60 - math.frexp(total)[1])


def _accept_by_budget(group: Tensor, amount: Tensor, room: Tensor, gain: Tensor, tiebreak: Tensor,
                      scale: float) -> Tensor:
    r"""Boolean mask: accept items in rank order while the running total of
    ``amount`` inside their group stays ``<= room[group]`` -- in integer
    budget units (:func:`budget_scale`): amounts rounded up, rooms (with a
    relative tolerance of 1e-9) rounded down."""
    acc = torch.zeros(group.numel(), dtype=torch.bool, device=group.device)
    if group.numel() == 0:
        return acc
    order = _rank_within_groups(group, gain, tiebreak)
    g = group[order]
    a = torch.ceil(amount[order] * scale).to(torch.long)
    rq = torch.floor((room + 1e-9 * room.abs().clamp(min=1.0)) * scale).clamp(-2.0 ** 62, 2.0 ** 62).to(torch.long)
    csum = torch.cumsum(a, 0)
    starts = torch.ones_like(g, dtype=torch.bool)
    starts[1:] = g[1:] != g[:-1]
    # running total inside the group = global cumsum minus cumsum before the group (exact in int64)
    before = torch.where(starts, csum - a, torch.zeros_like(csum))
    before = torch.cummax(before, 0).values  # broadcast each group's offset forward
    acc[order] = (csum - before) <= rq[g]
    return acc


def _accept_over(group: Tensor, over: Tensor, amount: Tensor, room: Tensor, gain: Tensor, tiebreak: Tensor,
                 scale: float) -> Tensor:
    """Step 4 for one side: movers into a group flagged ``over`` (``[L]``:
    its bound would be crossed) are accepted by :func:`_accept_by_budget`,
    every other mover is accepted."""
    acc = torch.ones(group.numel(), dtype=torch.bool, device=group.device)
    sub = _take(over, group).nonzero().flatten()
    if sub.numel():
        acc[sub] = _accept_by_budget(_take(group, sub), _take(amount, sub), room, _take(gain, sub),
                                     _take(tiebreak, sub), scale)
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
    priority: Optional[Tensor] = None,
    gain_tol: float = 0.0,
    min_rounds: int = 0,
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
        gain_tol (float): also stop when the accepted moves of an (even, odd)
            pair of rounds gained at most ``gain_tol`` times the total edge
            weight (churn on graphs without structure: many moves, tiny gains).
        min_rounds (int): the ``tol`` / ``gain_tol`` tests start after this
            many rounds.
        priority (Tensor, optional): ``[L]`` key that orders the label
            priorities (ties keep the seeded random order); e.g. the weighted
            degree, so that ties go to hubs and labels grow fast. Default: a
            seeded random priority.

    Returns:
        :class:`LabelPropagationResult`.
    """
    dev = graph.ptr.device
    n = int(graph.num_nodes)
    L = n if num_labels is None else int(num_labels)
    nw = torch.ones(n, dtype=torch.float64, device=dev) if node_weight is None else node_weight.to(torch.float64)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    label_pri = torch.randperm(L, generator=gen).to(dev)
    node_pri = torch.randperm(n, generator=gen).to(dev)
    return _label_propagation_run(graph, nw, label_pri, node_pri, init, priority, L, cap, floor, seed, max_rounds, tol,
                                  progress, boundary_only, tie_moves, gain_tol, min_rounds)


def _label_propagation_compiled(graph: CSRGraph, nw: Tensor, label_pri: Tensor, node_pri: Tensor,
                                init: Optional[Tensor], priority: Optional[Tensor], L: int, cap: Optional[float],
                                floor: Optional[float], seed: int, max_rounds: int, tol: float, progress: bool,
                                boundary_only: bool, tie_moves: bool, gain_tol: float,
                                min_rounds: int) -> LabelPropagationResult:
    """:func:`label_propagation` on the numba backend: set-up, rounds and the
    mapping back in one compiled call (:func:`~pyg_dynscale.partition.compiled.kernels.lp.lp_run`); same values
    as the torch steps. Host tensors only."""
    if graph.ptr.device.type != "cpu":
        return NotImplemented
    n = int(graph.num_nodes)
    dst_np = as_numpy(graph.dst, torch.long)
    dense = (L <= kernels.lp.DENSE_MAX_LABELS and n * L <= kernels.lp.DENSE_MAX_FILL * int(dst_np.shape[0])
             and graph.integral())
    total_w = graph.total_weight() if (gain_tol > 0 or dense) else 0.0
    # dense label weights are exact while every sum is an integer below 2^53
    dense = dense and 2.0 * total_w < 2.0 ** 53
    scale = budget_scale(float(nw.sum())) if (cap is not None or floor is not None) else 1.0
    job = kernels.lp.LabelPropagationJob(
        ptr=as_numpy(graph.ptr, torch.long), dst=dst_np, weight=as_numpy(graph.weight), node_weight=as_numpy(nw),
        label_pri=as_numpy(label_pri, torch.long), node_pri=as_numpy(node_pri, torch.long),
        key=as_numpy(priority, torch.float64) if priority is not None else kernels.lp.EMPTY_FLOAT,
        init=as_numpy(init, torch.long) if init is not None else kernels.lp.EMPTY_INT, num_labels=L,
        cap=None if cap is None else float(cap), floor=None if floor is None else float(floor), scale=scale,
        max_rounds=int(max_rounds), min_rounds=int(min_rounds), tol=float(tol), gain_tol=float(gain_tol),
        total_weight=total_w if gain_tol > 0 else 0.0, boundary_only=bool(boundary_only), tie_moves=bool(tie_moves),
        seed=int(seed), dense=dense, threads=backend.threads())
    labels, r, converged, moved_hist, gain_hist = kernels.lp.lp_run(job)
    if progress:
        for i, (m, g_) in enumerate(zip(moved_hist, gain_hist)):
            print(f"[label_propagation] round {i}: moved={m} gain={g_:.4g}")
    return LabelPropagationResult(labels=torch.from_numpy(labels), rounds=r, converged=converged, moved=moved_hist,
                                  gains=gain_hist, dense=dense)


@backend.twin(_label_propagation_compiled)
def _label_propagation_run(graph: CSRGraph, nw: Tensor, label_pri: Tensor, node_pri: Tensor,
                           init: Optional[Tensor], priority: Optional[Tensor], L: int, cap: Optional[float],
                           floor: Optional[float], seed: int, max_rounds: int, tol: float, progress: bool,
                           boundary_only: bool, tie_moves: bool, gain_tol: float,
                           min_rounds: int) -> LabelPropagationResult:
    """:func:`label_propagation` after its seeded set-up: torch rounds, one
    Python iteration each."""
    dst = graph.dst
    dev = dst.device
    n = int(graph.num_nodes)
    if priority is not None:
        # rank by (priority, random): stable sort of the random order by the key
        by_rand = torch.empty_like(label_pri)
        by_rand[label_pri] = torch.arange(L, device=dev)  # labels in random-priority order
        idx = torch.sort(_take(priority.to(dev), by_rand), stable=True).indices
        order = _take(by_rand, idx)
        label_pri = torch.empty_like(label_pri)
        label_pri[order] = torch.arange(L, device=dev)
    # work in "priority space": internal label = priority of the label, so the
    # tie-break "largest priority" is "largest internal label" and needs no gather
    labels = label_pri.clone() if init is None else _take(label_pri, init.to(torch.long))
    cap_t = float("inf") if cap is None else float(cap)
    dirty = graph.degree > 0
    if boundary_only:
        srcs = graph.sources()
        dirty = torch.zeros(n, dtype=torch.bool, device=dev)
        dirty[srcs[_take(labels, srcs) != _take(labels, dst)]] = True
        del srcs
    total_w = graph.total_weight() if gain_tol > 0 else 0.0
    scale = budget_scale(float(nw.sum())) if (cap is not None or floor is not None) else 1.0
    r, converged, moved_hist, gain_hist = _rounds_torch(
        graph, labels, nw, node_pri, dirty, L, cap_t, cap is not None, floor, max_rounds, tol, gain_tol, total_w,
        min_rounds, tie_moves, init is None, seed, progress, scale)
    out = torch.empty(L, dtype=torch.long, device=dev)
    out[label_pri] = torch.arange(L, device=dev)  # priority -> label
    return LabelPropagationResult(labels=_take(out, labels), rounds=r, converged=converged, moved=moved_hist,
                                  gains=gain_hist)


def half_bits(seed: int, pair: int, n: int) -> Tensor:
    r"""``[n]`` bool: the half of the nodes evaluated in the even round of
    pair ``pair`` (its complement in the odd round). A counter-based hash of
    ``(seed, pair, node)`` (32-bit mixing, every product below :math:`2^{63}`)
    so the compiled driver (:func:`~pyg_dynscale.partition.compiled.kernels.lp.half_mask`) draws the same bits
    without sharing a random-number generator."""
    s = (int(seed) & 0xFFFFFFFF) * 0x27D4EB2F + int(pair) * 0x165667B1
    x = (torch.arange(n, dtype=torch.long) + s) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 16
    return (x & 1) == 1


def _rounds_torch(graph: CSRGraph, labels: Tensor, nw: Tensor, node_pri: Tensor, dirty: Tensor, L: int, cap_t: float,
                  has_cap: bool, floor: Optional[float], max_rounds: int, tol: float, gain_tol: float, total_w: float,
                  min_rounds: int, tie_moves: bool, unique_labels: bool, seed: int,
                  progress: bool, scale: float = 1.0) -> tuple[int, bool, list[int], list[float]]:
    """The rounds of :func:`label_propagation`, vectorized (the reference the
    compiled :func:`~pyg_dynscale.partition.compiled.kernels.lp.lp_rounds` matches bit for bit); ``labels`` and
    ``dirty`` are updated in place. Returns ``(rounds, converged, moved, gains)``."""
    ptr, dst, weight = graph.ptr, graph.dst, graph.weight
    dev = ptr.device
    n = int(graph.num_nodes)
    bits = max(1, (L - 1).bit_length())
    # integral weights: pack (score, label) into one int64 and take one amax
    packed = (graph.dst.numel() > 0 and graph.integral()
              and float(graph.weight.max()) * float(graph.degree.max()) < 2.0 ** (62 - bits))
    nw_max = float(nw.max()) if n else 0.0
    moved_hist: list[int] = []
    gain_hist: list[float] = []
    half = torch.zeros(n, dtype=torch.bool, device=dev)
    for r in range(max_rounds):
        if not bool(dirty.any()):
            return r, True, moved_hist, gain_hist
        half = half_bits(seed, r // 2, n).to(dev) if r % 2 == 0 else ~half
        act = (dirty & half).nonzero().flatten()
        moved = 0
        gained = 0.0
        if act.numel():
            size = torch.zeros(L, dtype=torch.float64, device=dev).index_add_(0, labels, nw)
            m_node, m_to, gain = _round_candidates(ptr, dst, weight, labels, act, nw, size, L, cap_t,
                                                   has_cap and float(size.max()) + nw_max > cap_t,
                                                   unique_labels, packed, bits, tie_moves)
            acc = torch.ones(m_node.numel(), dtype=torch.bool, device=dev)
            m_w = _take(nw, m_node)
            if has_cap and m_node.numel():
                incoming = torch.zeros(L, dtype=torch.float64, device=dev).index_add_(0, m_to, m_w)
                acc &= _accept_over(m_to, size + incoming > cap_t, m_w, cap_t - size, gain, _take(node_pri, m_node),
                                    scale)
            m_from = _take(labels, m_node)
            if floor is not None and m_node.numel():
                outgoing = torch.zeros(L, dtype=torch.float64, device=dev).index_add_(0, m_from, m_w)
                acc &= _accept_over(m_from, size - outgoing < float(floor), m_w, size - float(floor), gain,
                                    _take(node_pri, m_node), scale)
            # evaluated nodes are clean unless their move was rejected (they retry)
            dirty[act] = False
            dirty[m_node[~acc]] = True
            mv = m_node[acc]  # ascending: act is sorted and seg order follows it
            labels[mv] = m_to[acc]
            moved = int(mv.numel())
            if moved:  # summed in order, as the compiled driver does
                gained = float(torch.cumsum(gain[acc], 0)[-1])
                unique_labels = False
                nidx, _ = _ranges(ptr, mv)
                dirty[_take(dst, nidx)] = True
        moved_hist.append(moved)
        gain_hist.append(gained)
        if progress:
            print(f"[label_propagation] round {r}: active={int(act.numel())} moved={moved} gain={gained:.4g}")
        # an (even, odd) pair of rounds evaluates every node dirty at its start
        # (mask, then complement), so the test is made at the end of a pair
        if r % 2 == 1 and r + 1 >= min_rounds and (moved_hist[-1] + moved_hist[-2] <= tol * n
                           or (gain_tol > 0 and gain_hist[-1] + gain_hist[-2] <= gain_tol * total_w)):
            return r + 1, True, moved_hist, gain_hist
    return max_rounds, False, moved_hist, gain_hist


def _round_candidates(ptr: Tensor, dst: Tensor, weight: Tensor, labels: Tensor, act: Tensor, nw: Tensor, size: Tensor,
                      L: int, cap: float, check_cap: bool, unique_labels: bool, packed: bool, bits: int,
                      tie_moves: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Steps 2-3 of the module doc, vectorized: ``(node, to, gain)`` of the
    active nodes that want to move (``act`` order). The numba backend's
    :func:`~pyg_dynscale.partition.compiled.kernels.lp.round_candidates` computes the same."""
    dev = ptr.device
    A = act.numel()
    seg_loc, seg_lab, score = _label_scores(ptr, dst, weight, labels, act, L, unique_labels)
    cur_act = _take(labels, act)
    is_cur = seg_lab == _take(cur_act, seg_loc)
    cur = torch.zeros(A, dtype=score.dtype, device=dev).index_add_(
        0, seg_loc, torch.where(is_cur, score, torch.zeros_like(score)))
    allowed = ~is_cur
    # the cap check gathers label sizes; skipped while no label is near the cap
    if check_cap:
        allowed &= _take(size, seg_lab) + _take(_take(nw, act), seg_loc) <= cap
    if packed:
        m_loc, m_to, best = _choose_packed(seg_loc, seg_lab, score, allowed, A, bits)
    else:
        m_loc, m_to, best = _choose_float(seg_loc, seg_lab, score, allowed, A)
    del seg_loc, seg_lab, score, is_cur, allowed
    gain = best - _take(cur, m_loc)
    go = gain > 0
    if tie_moves:
        # a tie moves towards the label of higher priority, which lets
        # fragments of a path (a temporal sequence) merge instead of
        # freezing; priorities strictly increase, so it cannot cycle
        go |= (gain == 0) & (best > 0) & (m_to > _take(cur_act, m_loc))
    return _take(act, m_loc[go]), m_to[go], gain[go].to(torch.float64)


def _label_scores(ptr: Tensor, dst: Tensor, weight: Tensor, labels: Tensor, act: Tensor, L: int,
                  unique_labels: bool) -> tuple[Tensor, Tensor, Tensor]:
    r"""Eq. 2 for the active nodes: one segment per (active node, neighbour
    label) pair, ``(seg_loc, seg_lab, score)`` with ``seg_loc`` the index into
    ``act`` (ascending) and ``score`` the summed edge weight (float64)."""
    dev = ptr.device
    idx, counts = _ranges(ptr, act)
    A = act.numel()
    s_loc = torch.repeat_interleave(torch.arange(A, device=dev), counts, output_size=idx.numel())
    lab = _take(labels, _take(dst, idx))
    w = _take(weight, idx)  # rows are contiguous: a near-sequential read
    del idx
    if unique_labels:
        # Eq. 1 labels are all distinct and (source, neighbour) pairs are
        # unique in a CSRGraph: every entry is its own (node, label) segment
        return s_loc, lab, w.to(torch.float64)
    if A * L <= max(4 * lab.numel(), 1 << 16):
        # few labels (rank-level refinement): dense [A, L] sums, no sort
        dense = torch.zeros(A * L, dtype=torch.float64, device=dev).index_add_(0, s_loc * L + lab, w.to(torch.float64))
        nz = (dense != 0).nonzero().flatten()
        return nz // L, nz % L, _take(dense, nz)
    key = s_loc * L + lab
    del s_loc, lab
    if A * L < 2**31:  # a 32-bit key halves the sort's memory traffic
        key = key.to(torch.int32)
    key, perm = torch.sort(key, stable=True)
    w = _take(w, perm)
    del perm
    ukey, inv = torch.unique_consecutive(key, return_inverse=True)
    del key
    score = torch.zeros(ukey.numel(), dtype=torch.float64, device=dev).index_add_(0, inv, w.to(torch.float64))
    ukey = ukey.to(torch.long)
    return ukey // L, ukey % L, score


def _choose_packed(seg_loc: Tensor, seg_lab: Tensor, score: Tensor, allowed: Tensor, A: int,
                   bits: int) -> tuple[Tensor, Tensor, Tensor]:
    """Best allowed label per active node, ties to the larger label, with one
    ``amax`` over ``score << bits | label`` (integral scores only):
    ``(m_loc, m_to, best_score)`` for the nodes that have an allowed label."""
    key = (score.to(torch.long) << bits) | seg_lab
    key = torch.where(allowed, key, torch.full_like(key, -1))
    best = torch.full((A,), -1, dtype=torch.long, device=key.device).scatter_reduce(0, seg_loc, key, reduce="amax")
    m_loc = (best >= 0).nonzero().flatten()
    b = _take(best, m_loc)
    return m_loc, b & ((1 << bits) - 1), (b >> bits).to(torch.float64)


def _choose_float(seg_loc: Tensor, seg_lab: Tensor, score: Tensor, allowed: Tensor,
                  A: int) -> tuple[Tensor, Tensor, Tensor]:
    """As :func:`_choose_packed` for arbitrary float scores (two ``amax``)."""
    dev = score.device
    masked = torch.where(allowed, score, torch.full_like(score, -torch.inf))
    best = torch.full((A,), -torch.inf, dtype=torch.float64, device=dev).scatter_reduce(0, seg_loc, masked, reduce="amax")
    at_best = allowed & (masked == _take(best, seg_loc))
    lab = torch.where(at_best, seg_lab, torch.full_like(seg_lab, -1))
    best_lab = torch.full((A,), -1, dtype=torch.long, device=dev).scatter_reduce(0, seg_loc, lab, reduce="amax")
    m_loc = (best_lab >= 0).nonzero().flatten()
    return m_loc, _take(best_lab, m_loc), _take(best, m_loc)


def _ranges(ptr: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """Entry indices of the CSR rows ``nodes`` (concatenated) and the row lengths."""
    starts = _take(ptr, nodes)
    counts = _take(ptr, nodes + 1) - starts
    total = int(counts.sum())
    offs = torch.cumsum(counts, 0) - counts
    idx = torch.arange(total, device=ptr.device) - torch.repeat_interleave(offs - starts, counts, output_size=total)
    return idx, counts


def _compact_labels_compiled(labels: Tensor) -> tuple[Tensor, int]:
    """:func:`compact_labels` by a presence array, no sort (same result), for
    non-negative labels below ``4 n + 1024`` on the host."""
    n = labels.numel()
    if not _on_host(labels) or not n:
        return NotImplemented
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= 4 * n + 1024:
        return NotImplemented
    inv, C = kernels.lp.compact(as_numpy(labels, torch.long), hi + 1)
    return torch.from_numpy(inv), int(C)


@backend.twin(_compact_labels_compiled)
def compact_labels(labels: Tensor) -> tuple[Tensor, int]:
    """Relabel to ``0..C-1`` (in increasing order of the old label): ``(labels, C)``."""
    uniq, inv = torch.unique(labels, return_inverse=True)
    return inv, int(uniq.numel())
