r"""Budgeted spatial chunk fusion (DGC §5.1.1): which of a rank's chunk
pieces run as one structure-encoder group.

A *unit* is the rows a rank computes for one chunk in one snapshot (a whole
snapshot's rows for partitions without chunks). Its *touch set* is
:math:`\mathrm{touch}(u) = \mathrm{rows}(u) \cup \mathrm{halo}(u)`, the halo
being the in-neighbours of its rows outside it (same rank or not). A group
:math:`G` of units loads :math:`\mathrm{touch}(G) = \bigcup_{u \in G}
\mathrm{touch}(u)` once per spatial layer, so its halo rows loaded are
:math:`|\mathrm{touch}(G)| - |\mathrm{rows}(G)|`, and fusing two disjoint
groups saves exactly

.. math::
    \mathrm{load}(A) + \mathrm{load}(B) - \mathrm{load}(A \cup B)
    = |\mathrm{touch}(A) \cap \mathrm{touch}(B)|

(halo rows both load, plus the rows of one the other loads as halo). A group
costs :math:`c(G) = |\mathrm{touch}(G)|\, b_\text{row} + e(G)\, b_\text{edge}`
bytes of activations (:math:`e`: edges into its rows).

:func:`plan_shared_halo` is DGC's rule: "iteratively fuse two chunks with
the maximum data transmission", while the fused group stays within the
budget; then groups that share nothing are packed in time order up to the
budget (fewer calls; no load changes). :func:`plan_time_order` is the
baseline: whole snapshots in time order, an over-budget snapshot split in
chunk order. :func:`plan_shared_halo` never returns groups that load more
halo rows than :func:`plan_time_order` (it returns those when the greedy's
would). A unit over the budget on its own runs alone.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor

from ..errors import ModelInputError, UnsupportedOptionError

__all__ = ["FusionUnit", "GroupCost", "plan_shared_halo", "plan_time_order", "plan_per_unit", "halo_rows_loaded",
           "POLICIES", "plan_groups", "activation_row_width", "check_fusion_groups"]

#: layer-by-layer grouping policies (``DistributedTrainer(fusion=<bytes>, fusion_groups=...)``)
POLICIES = ("shared-halo", "time-order", "per-chunk")


@dataclass(frozen=True)
class FusionUnit:
    """Rows one chunk piece computes and the halo rows it loads.

    Attributes:
        rows (Tensor): ``[n]`` ids of the rows it computes.
        halo (Tensor): ``[h]`` ids of the in-neighbours of ``rows`` outside ``rows``.
        edges (int): spatial edges into ``rows``.
        snapshot (int): its snapshot (units are given in time order).
    """

    rows: Tensor
    halo: Tensor
    edges: int
    snapshot: int = 0


@dataclass(frozen=True)
class GroupCost:
    r"""Activation bytes of a group: :math:`|\mathrm{touch}|\, b_\text{row} + e\, b_\text{edge}`."""

    row_bytes: float
    edge_bytes: float

    def __call__(self, touch: int, edges: int) -> float:
        return touch * self.row_bytes + edges * self.edge_bytes


def activation_row_width(pattern) -> int:
    """Elements per row a structure call keeps (input, every spatial layer,
    output), the largest over the pattern's blocks."""
    return max(sum(b.spatial_widths) + b.redistribution_width + (b.spatial_widths[0] if b.spatial_widths else 0)
               for b in pattern.blocks)


def _touch(u: FusionUnit) -> set:
    return set(u.rows.tolist()) | set(u.halo.tolist())


def halo_rows_loaded(units: Sequence[FusionUnit], groups: Sequence[Sequence[int]]) -> int:
    r""":math:`\sum_G |\mathrm{touch}(G)| - |\mathrm{rows}(G)|`: halo rows the groups load per spatial layer."""
    total = 0
    for g in groups:
        touch: set = set()
        rows = 0
        for i in g:
            touch |= _touch(units[i])
            rows += units[i].rows.numel()
        total += len(touch) - rows
    return total


def plan_per_unit(units: Sequence[FusionUnit], budget: float = float("inf"),
                  cost: GroupCost = GroupCost(0.0, 0.0)) -> list[list[int]]:
    """No fusion (DGC's default scheme): every unit alone."""
    return [[i] for i in range(len(units))]


def plan_time_order(units: Sequence[FusionUnit], budget: float, cost: GroupCost) -> list[list[int]]:
    """Whole snapshots in time order while the group fits the budget; a
    snapshot over the budget alone is split into consecutive units (chunk
    order). Equals snapshot-range grouping when every snapshot fits."""
    groups: list[list[int]] = []
    cur: list[int] = []
    cur_touch: set = set()
    cur_edges = 0
    i, n = 0, len(units)
    while i < n:
        j = i
        while j < n and units[j].snapshot == units[i].snapshot:
            j += 1
        piece = list(range(i, j))
        p_touch: set = set().union(*(_touch(units[k]) for k in piece))
        p_edges = sum(units[k].edges for k in piece)
        if cost(len(cur_touch | p_touch), cur_edges + p_edges) <= budget:
            cur, cur_touch, cur_edges = cur + piece, cur_touch | p_touch, cur_edges + p_edges
        else:
            if cur:
                groups.append(cur)
            if cost(len(p_touch), p_edges) <= budget:
                cur, cur_touch, cur_edges = piece, p_touch, p_edges
            else:  # split the snapshot in chunk order
                cur, cur_touch, cur_edges = [], set(), 0
                for k in piece:
                    t = _touch(units[k])
                    if cur and cost(len(cur_touch | t), cur_edges + units[k].edges) > budget:
                        groups.append(cur)
                        cur, cur_touch, cur_edges = [], set(), 0
                    cur, cur_touch, cur_edges = cur + [k], cur_touch | t, cur_edges + units[k].edges
                groups.append(cur)
                cur, cur_touch, cur_edges = [], set(), 0
        i = j
    if cur:
        groups.append(cur)
    return groups


def _overlaps(touches: list) -> dict:
    """``{(a, b): |touch(a) ∩ touch(b)|}`` for every pair with a shared row (a < b)."""
    index: dict = {}
    for u, t in enumerate(touches):
        for r in t:
            index.setdefault(r, []).append(u)
    pairs: dict = {}
    for us in index.values():  # the units touching one row (ascending)
        for i, a in enumerate(us):
            for b in us[i + 1:]:
                pairs[(a, b)] = pairs.get((a, b), 0) + 1
    return pairs


def plan_shared_halo(units: Sequence[FusionUnit], budget: float, cost: GroupCost) -> list[list[int]]:
    """DGC §5.1.1's greedy (module doc): repeatedly fuse the two groups with
    the most shared rows whose union fits ``budget``; then pack groups that
    share nothing in time order; never more halo rows loaded than
    :func:`plan_time_order`. Groups are lists of unit indices, sorted, in
    order of their first unit."""
    U = len(units)
    touch = [_touch(u) for u in units]
    edges = [u.edges for u in units]
    members = [[i] for i in range(U)]
    alive = [True] * U
    nbr: list[set] = [set() for _ in range(U)]
    heap = []
    for (a, b), c in _overlaps(touch).items():
        nbr[a].add(b)
        nbr[b].add(a)
        heap.append((-c, a, b))
    heapq.heapify(heap)
    while heap:
        _, a, b = heapq.heappop(heap)
        if not (alive[a] and alive[b]):
            continue
        t = touch[a] | touch[b]
        if cost(len(t), edges[a] + edges[b]) > budget:
            continue  # groups only grow, so this pair never fits again
        c = len(touch)  # the merged group gets a new id: entries of a and b go stale
        alive[a] = alive[b] = False
        touch.append(t)
        edges.append(edges[a] + edges[b])
        members.append(sorted(members[a] + members[b]))
        alive.append(True)
        near = {x for x in (nbr[a] | nbr[b]) if alive[x]}
        nbr.append(near)
        for x in near:
            nbr[x].discard(a)
            nbr[x].discard(b)
            nbr[x].add(c)
            heapq.heappush(heap, (-len(t & touch[x]), min(x, c), max(x, c)))
    groups = sorted((i for i in range(len(members)) if alive[i]), key=lambda i: members[i][0])
    # pack what shares nothing (or no longer fits together by overlap) in time order
    packed: list[list[int]] = []
    cur, cur_t, cur_e = None, set(), 0
    for g in groups:
        if cur is not None and cost(len(cur_t | touch[g]), cur_e + edges[g]) <= budget:
            cur, cur_t, cur_e = cur + members[g], cur_t | touch[g], cur_e + edges[g]
            continue
        if cur is not None:
            packed.append(sorted(cur))
        cur, cur_t, cur_e = list(members[g]), touch[g], edges[g]
    if cur is not None:
        packed.append(sorted(cur))
    base = plan_time_order(units, budget, cost)
    return base if halo_rows_loaded(units, base) < halo_rows_loaded(units, packed) else packed


_PLANNERS: dict[str, Callable] = {"shared-halo": plan_shared_halo, "time-order": plan_time_order,
                                  "per-chunk": plan_per_unit}


def plan_groups(policy: str, units: Sequence[FusionUnit], budget: float, cost: GroupCost) -> list[list[int]]:
    """The groups of ``policy`` (one of :data:`POLICIES`)."""
    if policy not in _PLANNERS:
        raise ModelInputError("fusion_groups", f"is {policy!r}.", f"use one of {POLICIES}.")
    return _PLANNERS[policy](units, budget, cost)


def check_fusion_groups(policy: str, fusion: object, model: torch.nn.Module) -> None:
    """Raise unless ``policy`` is ``"snapshots"`` or a policy of
    :data:`POLICIES` with a memory budget (``fusion`` a positive number) on a
    model without BatchNorm."""
    if policy == "snapshots":
        return
    if policy not in POLICIES:
        raise ModelInputError("fusion_groups", f"is {policy!r}.", f"use 'snapshots' or one of {POLICIES}.")
    if isinstance(fusion, bool) or not isinstance(fusion, (int, float)):
        raise ModelInputError("fusion_groups",
                              f"is {policy!r} with fusion={fusion!r}: it groups under a memory budget.",
                              "pass fusion=<bytes of activations per group>.")
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        raise UnsupportedOptionError("fusion_groups", f"is {policy!r} with {type(model).__name__}, which has "
                                     "BatchNorm: each layer-by-layer group would update its running statistics.",
                                     "fusion_groups='snapshots'.")
