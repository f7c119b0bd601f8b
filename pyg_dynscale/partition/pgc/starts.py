r"""PGC's multi-start (docs/pgc.md, step 7): balanced PSS and PTS partitions
refined like the label-propagation result, and the cheapest candidate within
the balance tolerance kept.

Label propagation grows chunks from single nodes and can miss the
partition a simple scheme gives (all of a snapshot on one rank, all of a
sequence on one rank). :func:`multi_start` refines the balanced PSS / PTS
starts (:class:`_Start`) on the level-0 graph and ranks the candidates by
the bytes the communication plan moves (:func:`~pyg_dynscale.partition.costs.plan_bytes.plan_bytes`)
when a dependency pattern is given, by cut weight otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Union

import numpy as np
import torch
from torch import Tensor

from ...errors import PartitionError
from ..compiled import backend, kernels
from ..costs.plan_bytes import plan_bytes
from ..metrics import load_imbalance as divergence
from ..pattern import DependencyPattern
from ..schemes.snapshot_sequence import pss_snapshot_ranks, pts_sequence_ranks
from .chunks import Level, largest_chunk, refine_levels
from .coarsen import supergraph_csr, supergraph_cut, unit_cut
from .label_propagation import CSRGraph, compact_labels
from .options import FAST_ABOVE, PGCOptions
from .stages import Assignment, Level0, NodeCosts

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal

#: the extra (non-LP) starts are skipped when the level-0 graph has more CSR
#: entries than this: each costs a supergraph pass, which on graphs that big
#: outweighs what it can win (docs/pgc.md, Pipeline step 7)
MULTI_START_MAX_ENTRIES = FAST_ABOVE
#: ... and, with a ``DependencyPattern``, only when its unrefined plan bytes
#: are at most this factor above the LP candidate's: refinement lowers a
#: start's bytes by a bounded factor, so a start far above LP cannot win
#: (measurements in docs/pgc.md, step 7)
START_BYTES_MARGIN = 1.3


@dataclass
class _Start:
    r"""A balanced PSS or PTS start of the multi-start (module doc, step 7)
    as ranks of its units: ``rank [T]`` per snapshot (PSS, ``unit`` = each
    node's snapshot) or ``rank [V]`` per vertex (PTS, ``unit`` = each node's
    vertex). Its cut needs only the edges between units -- temporal edges
    for PSS, spatial edges for PTS; the other kind stays inside a unit -- and
    the ``[N]`` owner is built only for a start that is refined.

    ``loads`` (``[P]``, PSS only) gives the start's :math:`\lambda`. A PSS
    start whose whole-snapshot ranges miss the balance tolerance (few
    snapshots per rank) and pass the cut test is *split*
    (:meth:`split_snapshots`): the ranks take contiguous runs of vertex-time
    nodes in gid (time-major) order, so a rank boundary may fall inside a
    snapshot; then ``unit`` is ``None`` and ``rank`` is the ``[N]`` owner."""

    name: str
    unit: Optional[Tensor]
    rank: Tensor
    loads: Optional[Tensor] = None

    @classmethod
    def make(cls, name: str, signal: "DynamicGraphSignal", P: int, node_w: Tensor) -> Optional["_Start"]:
        """``None`` if the start does not exist for this graph (e.g. fewer
        non-empty snapshots than ranks); ``node_w`` is already validated."""
        sg = signal.supergraph()
        try:
            if name == "pss":
                snap_rank, _, _, loads = pss_snapshot_ranks(signal, P, True, None, cost=node_w)
                return cls(name, sg.time, snap_rank, loads)
            seq_rank = pts_sequence_ranks(signal, P, True, None, cost=node_w)
        except PartitionError:
            return None
        vertex_rank = torch.zeros(sg.num_vertices, dtype=torch.long)
        vertex_rank[sg.sequence_vertex] = seq_rank
        return cls(name, sg.vertex, vertex_rank)

    def divergence(self) -> float:
        r""":math:`\lambda` of a PSS start (1 for a PTS start: it is not split)."""
        return 1.0 if self.loads is None else divergence(self.loads.numpy())

    def split_snapshots(self, node_w: Tensor, P: int) -> "_Start":
        """The split PSS start (:func:`_split_snapshot_owner`)."""
        return _Start(self.name, None, _split_snapshot_owner(node_w, P))

    def cut(self, sg: Any, ws: float, tw: Union[Tensor, float]) -> float:
        """Cut weight on the weighted supergraph (as :func:`.coarsen.supergraph_cut` of :meth:`owner`)."""
        if self.unit is None:  # a split start cuts both kinds of edges
            return supergraph_cut(sg, self.rank, ws, tw)
        if self.name == "pss":
            return unit_cut(self.unit, self.rank, sg.temporal_edge_index, tw)
        return unit_cut(self.unit, self.rank, sg.spatial_edge_index, ws)

    def owner(self) -> Tensor:
        """``[N]`` rank of every vertex-time node."""
        return self.rank if self.unit is None else self.rank.index_select(0, self.unit)


def _split_snapshot_owner_compiled(node_w: Tensor, P: int) -> Tensor:
    """:func:`_split_snapshot_owner` in one compiled pass (the same numbers)."""
    return torch.from_numpy(kernels.schemes.split_ranks(node_w.numpy(), int(P)))


@backend.twin(_split_snapshot_owner_compiled)
def _split_snapshot_owner(node_w: Tensor, P: int) -> Tensor:
    r"""The split PSS start (:class:`_Start`): node :math:`v` goes to rank
    :math:`\lfloor P (c_v - w_v / 2) / W \rfloor` with :math:`c_v` the
    running cost in gid (time-major) order and :math:`W` the total, so every
    rank is within one node's cost of the mean."""
    w = node_w.numpy()
    csum = np.cumsum(w)  # sequential, as the compiled running sum
    total = float(csum[-1]) if csum.size else 0.0
    if total <= 0:  # no costs to balance: equal node counts
        return (torch.arange(w.size) * P) // max(1, w.size)
    return torch.from_numpy(np.clip(np.floor((csum - 0.5 * w) * (P / total)), 0, P - 1).astype(np.int64))


class _RefinedStart(NamedTuple):
    """A refined non-LP start: cut weight, load divergence, ``owner [N]``,
    ``chunk [N]`` and the number of chunks."""

    cut: float
    divergence: float
    owner: Tensor
    chunk: Tensor
    num_chunks: int


def _refined_start(start_owner: Tensor, P: int, sg: Any, node_w: Tensor, ws: float, tw: Union[Tensor, float],
                   seg: Optional[Tensor], graph: CSRGraph, slack: float, total: float, rounds: int, tol: float,
                   gain_tol: float, seed: int, progress: bool) -> _RefinedStart:
    r"""Refine one non-LP starting assignment (module doc, step 7).

    The start (``start_owner [N]``, balanced PSS or PTS) is cut into
    *pieces* -- the level-0 nodes (segments) split where the start's owner
    changes, so a piece never straddles ranks and stays contiguous in time --
    and the pieces are refined by the same rank-level label propagation as
    step 6 (boundary nodes, loads kept inside ``[min(floor, (1 - slack)
    mean), max(cap, (1 + slack) mean)]``).

    Returns:
        :class:`_RefinedStart`, with the cut weight on the weighted
        supergraph and ``chunk`` = the pair (start rank, final rank), so
        ``owner`` is constant inside a chunk.
    """
    if seg is None:
        piece, n, g = torch.arange(start_owner.numel()), start_owner.numel(), graph
    else:
        piece, n = compact_labels(seg * P + start_owner)
        # the start never splits a segment (PTS): same graph; else the
        # supergraph's quotient on the pieces (cut weights preserved, as in .coarsen)
        g = graph if n == graph.num_nodes else supergraph_csr(sg, ws, tw, piece, n)
    pw = torch.zeros(n, dtype=torch.float64).index_add_(0, piece, node_w)
    own = torch.zeros(n, dtype=torch.long).scatter_(0, piece, start_owner)
    lvl = Level(g, pw, torch.arange(n))
    own, _ = refine_levels([lvl], own.numpy(), P, total, slack, rounds, tol, gain_tol, seed, progress)
    cut = g.cut(own)
    loads = torch.zeros(P, dtype=torch.float64).index_add_(0, own, pw)
    owner = own.index_select(0, piece)
    chunk, C = compact_labels(start_owner * P + owner)
    return _RefinedStart(cut, divergence(loads.numpy()), owner, chunk, C)


@dataclass
class StartChoice:
    """Step 7: the candidates of the multi-start and the one that won."""

    winner: str
    best: Optional[_RefinedStart]   # the winning refined start; None: LP won
    candidates: dict
    divergence: dict
    raw_cuts: dict
    raw_bytes: dict
    bytes: dict
    skipped: list
    tolerance: float
    pss_split: bool
    over_cap: list
    lp_cut_before_fm: float = 0.0
    lp_bytes_before_fm: Optional[int] = None


def multi_start(signal: "DynamicGraphSignal", P: int, pattern: Any, lvl: Level0, costs: NodeCosts,
                 asg: Assignment, s: PGCOptions) -> StartChoice:
    """Step 7: refine the balanced PSS / PTS partitions and keep the cheapest
    candidate within the balance tolerance."""
    sg = signal.supergraph()
    graph, seg, ws, tw, node_w = lvl.graph, lvl.seg, lvl.spatial_weight, lvl.temporal_weight, costs.node_w
    owner, cut = asg.owner, asg.cut
    lp_loads = torch.zeros(P, dtype=torch.float64).index_add_(0, owner, lvl.node_w)
    lp_div = divergence(lp_loads.numpy())
    candidates: dict[str, Optional[float]] = {"lp": cut}
    cand_div: dict[str, Optional[float]] = {"lp": lp_div}
    cand_raw: dict[str, Optional[float]] = {}
    # margins relative to the LP result without the FM step, where it differs (docs/pgc.md, step 7)
    cut_before_fm = cut if asg.owner_before_fm is None else max(cut, graph.cut(asg.owner_before_fm))
    prune_above = math.inf if s.start_margin is None else float(s.start_margin) * cut_before_fm
    skipped = [st for st in s.starts if st != "lp"] if graph.dst.numel() > MULTI_START_MAX_ENTRIES else []
    tolerance = max((1 + s.slack) / (1 - s.slack), lp_div) if s.max_divergence is None else float(s.max_divergence)
    winner, best = "lp", None
    pss_split = False
    eligible: dict[str, _RefinedStart] = {}  # refined starts within the balance tolerance
    over_cap: list[str] = []  # refined starts whose chunks exceed an explicit cap
    # the plan sends each (row, destination rank) once, so the cut weight
    # over-counts nodes with many edges into one rank: with a pattern the
    # candidates are ranked (and far starts pruned) by the bytes the
    # communication plan actually moves
    by_bytes = isinstance(pattern, DependencyPattern)
    cand_bytes: dict[str, int] = {}
    raw_bytes: dict[str, int] = {}

    def lp_bytes() -> int:
        if "lp" not in cand_bytes:
            cand_bytes["lp"] = plan_bytes(sg, owner if seg is None else owner.index_select(0, seg), P, pattern)
        return cand_bytes["lp"]

    before_fm_bytes: list[int] = []

    def prune_bytes() -> int:
        """LP's plan bytes the bytes margin is relative to (without FM where it differs)."""
        if asg.owner_before_fm is None:
            return lp_bytes()
        if not before_fm_bytes:
            o = asg.owner_before_fm
            before_fm_bytes.append(plan_bytes(sg, o if seg is None else o.index_select(0, seg), P, pattern))
        return max(lp_bytes(), before_fm_bytes[0])

    for st in s.starts:
        if st == "lp" or st in skipped or P == 1:
            continue
        start = _Start.make(st, signal, P, node_w)
        if start is None:  # e.g. fewer non-empty snapshots than ranks
            candidates[st] = cand_div[st] = cand_raw[st] = None
            continue
        candidates[st] = cand_div[st] = None  # until refined
        cand_raw[st] = start.cut(sg, ws, tw)
        if cand_raw[st] > prune_above:  # pruned: its unrefined cut is far above the LP cut
            continue
        if start.divergence() > tolerance * (1 + 1e-12):  # too few snapshots per rank to balance: split
            start = start.split_snapshots(node_w, P)
            pss_split = True
            cand_raw[st] = start.cut(sg, ws, tw)
            if cand_raw[st] > prune_above:
                continue
        start_owner = start.owner()
        if by_bytes and s.start_margin is not None:
            raw_bytes[st] = plan_bytes(sg, start_owner, P, pattern)
            if raw_bytes[st] > START_BYTES_MARGIN * prune_bytes():  # refining cannot close that gap
                continue
        res = _refined_start(start_owner, P, sg, node_w, ws, tw, seg, graph, s.slack, costs.total, s.refine_rounds,
                             s.refine_tol, s.gain_tol, s.seed, s.progress)
        candidates[st], cand_div[st] = res.cut, res.divergence
        if s.cap is not None and largest_chunk(res.chunk, res.num_chunks, node_w) > costs.cap * (1 + 1e-9):
            over_cap.append(st)  # an explicit cap is honoured: this start's chunks are larger
        elif res.divergence <= tolerance * (1 + 1e-12):
            eligible[st] = res
    lvl.temporal_weight = None  # not needed any more
    if eligible and by_bytes:
        lp_bytes()
        for st, res in eligible.items():
            cand_bytes[st] = plan_bytes(sg, res.owner, P, pattern)
        key = {st: (cand_bytes[st], candidates[st]) for st in cand_bytes}
        winner = min(key, key=lambda st: key[st])
        best = eligible.get(winner)
    else:
        for st, res in eligible.items():
            if res.cut < min(cut, best.cut if best else math.inf) - 1e-9:
                winner, best = st, res
    return StartChoice(winner, best, candidates, cand_div, cand_raw, raw_bytes, cand_bytes, skipped, tolerance,
                        pss_split, over_cap, cut_before_fm, before_fm_bytes[0] if before_fm_bytes else None)
