r"""Structure encoders run group by group, layer by layer (budgeted fusion of
partial snapshots, DGC §5.1.1).

A rank's structure rows are split into groups of chunk pieces
(:mod:`.fusion_groups`); each group is a graph over the rows it computes plus
every in-neighbour of them (its *halo*: rows of other groups of the rank,
rows of other ranks). Groups of one snapshot share spatial edges, so group
:math:`A`'s layer :math:`l` needs the layer-:math:`l` inputs of rows that
group :math:`B` computes: no group can run all its layers before the others.
:class:`LayerwiseGroups` runs every group's encoder call in lock-step: the
encoder's own code runs unchanged, each call in a worker thread that pauses
at every halo hook (:class:`~pyg_dynscale.nn.Halo`), one group running at a
time, in group order. At the hook of layer :math:`l`:

1. the rows each group computed are written into the rank's layer input
   :math:`X_l` ``[|S_r|, ...]``;
2. one rank-level ``spatial:l`` exchange fills the rows of other ranks (the
   plan's exchange: bytes and collectives are those of ``fusion="full"``);
3. every group *loads* its rows, :math:`X_l[\mathrm{touch}(G)]`, and
   resumes.

So the result equals the fused call's (same edges, same global GCN
weights, same neighbour order), and what grouping changes is what each group
loads: :math:`\sum_G |\mathrm{halo}(G)|` rows per layer
(:attr:`LayerwiseGroups.halo_rows`), gathered in
:attr:`LayerwiseGroups.load_seconds`.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from ..data.tensor_maps import TensorMap
from ..errors import DecompositionMismatchError, UnsupportedOptionError
from ..nn.decomposed import FusedGraph, Halo
from .fusion_groups import FusionUnit, GroupCost, plan_groups
from .local import node_subset_graph

__all__ = ["LayerwiseGroups", "LayeredGroup", "rank_units"]


@dataclass
class LayeredGroup:
    """One group of a rank.

    Attributes:
        rows (Tensor): ``[n]`` rows of the structure set it loads (its own and
            its halo), sorted.
        owned_pos (Tensor): positions in ``rows`` of the rows it computes.
        owned_rows (Tensor): those rows in the structure set.
        graph (FusedGraph): its edges (every edge into its own rows).
    """

    rows: Tensor
    owned_pos: Tensor
    owned_rows: Tensor
    graph: FusedGraph


def rank_units(layout: Any, chunk: Optional[Tensor]) -> list[FusionUnit]:
    """The rank's units: its owned structure rows per (snapshot, chunk), in
    that order; ids are rows of the structure set ``layout.S``."""
    sg = layout.sg
    S, own = layout.S, layout.S_owned
    t = sg.time[S[own]]
    c = chunk[S[own]] if chunk is not None else torch.zeros_like(t)
    key = t * (int(c.max()) + 1 if c.numel() else 1) + c
    order = torch.sort(key, stable=True).indices
    ks, rows = key[order], own[order]
    ei = layout.structure.edge_index
    unit_of = torch.full((S.numel(),), -1, dtype=torch.long)
    first = torch.ones(ks.numel(), dtype=torch.bool)
    if ks.numel():
        first[1:] = ks[1:] != ks[:-1]
    uid = torch.cumsum(first.long(), 0) - 1
    unit_of[rows] = uid
    U = int(first.sum())
    ptr = torch.cat([first.nonzero().flatten(), torch.tensor([ks.numel()])])
    du = unit_of[ei[1]]
    e_order = torch.sort(du, stable=True).indices
    e_ptr = torch.zeros(U + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(du, minlength=U), 0, out=e_ptr[1:])
    src_sorted = ei[0, e_order]
    units = []
    for u in range(U):
        r = torch.sort(rows[ptr[u]:ptr[u + 1]]).values
        src = src_sorted[e_ptr[u]:e_ptr[u + 1]]
        halo = torch.unique(src[unit_of[src] != u])
        units.append(FusionUnit(r, halo, int(e_ptr[u + 1] - e_ptr[u]), int(t[order[ptr[u]]])))
    return units


class _Abort(Exception):
    """Stops a group's worker when another group failed."""


class _GroupHalo(Halo):
    """The hook a group's encoder call sees: static layers pass, the others
    pause the worker until the rank has assembled the layer's rows."""

    def __init__(self, runner: "LayerwiseGroups", index: int, owned: Tensor,
                 segment_counts: Optional[tuple[Tensor, list]]) -> None:
        self.runner, self.index, self.owned, self.segment_counts = runner, index, owned, segment_counts
        self.inbox: "queue.Queue" = queue.Queue()
        self.outbox: "queue.Queue" = queue.Queue()

    def exchange(self, block: int, layer: int, x: Tensor) -> Tensor:
        m = self.runner.maps.get((block, f"spatial:{layer}"))
        if m is None:
            raise DecompositionMismatchError(
                f"the structure encoder aggregates at block {block}, layer {layer}, but the model's dependency "
                "pattern declares no such spatial layer; fix the model's dependency_pattern().")
        if m.static:  # raw input features: loaded with the group's input rows
            return x
        self.outbox.put(("hook", (block, layer), x))
        kind, payload = self.inbox.get()
        if kind == "abort":
            raise _Abort()
        return payload

    def all_reduce(self, x: Tensor) -> Tensor:
        raise UnsupportedOptionError("fusion_groups", "runs layer-by-layer groups, in which a node-set reduction "
                                     "(BatchNorm) would update the running statistics once per group.",
                                     "fusion_groups='snapshots'.")


class LayerwiseGroups:
    r"""A rank's groups and their lock-step execution (module doc).

    Args:
        layout: the rank's :class:`~pyg_dynscale.distributed.local.RankLayout` (host).
        chunk: the partition's chunk per gid, or ``None``.
        policy: a grouping policy of :data:`~.fusion_groups.POLICIES`.
        budget: bytes of activations per group.
        cost: the cost model of a group.
    """

    def __init__(self, layout: Any, chunk: Optional[Tensor], policy: str, budget: float, cost: GroupCost) -> None:
        self.units = rank_units(layout, chunk)
        self.plan = plan_groups(policy, self.units, budget, cost)
        S = layout.S
        sg = layout.sg
        ei_all, ew_all = layout.structure.edge_index, layout.structure.edge_weight
        self.groups: list[LayeredGroup] = []
        unit_groups = self.plan if self.plan else [[]]  # a rank with no rows still takes part in every exchange
        for members in unit_groups:
            own = torch.sort(torch.cat([self.units[u].rows for u in members] + [S[:0]])).values
            mine = torch.zeros(S.numel(), dtype=torch.bool)
            mine[own] = True
            sel = mine[ei_all[1]].nonzero().flatten()
            ei = ei_all[:, sel]
            rows = torch.unique(torch.cat([own, ei[0]]))
            g = node_subset_graph(sg, S[rows], None, edges=(torch.searchsorted(rows, ei),
                                                            ew_all[sel] if ew_all is not None else None))
            g.gcn_norm = self._norm(layout, mine, rows)  # type: ignore[method-assign]
            self.groups.append(LayeredGroup(rows, torch.searchsorted(rows, own), own, g))
        #: halo rows all groups load per spatial layer
        self.halo_rows = sum(int(g.rows.numel() - g.owned_rows.numel()) for g in self.groups)
        #: seconds spent gathering the groups' rows (cumulative)
        self.load_seconds = 0.0
        self.maps: dict = {}

    @staticmethod
    def _norm(layout: Any, mine: Tensor, rows: Tensor) -> Callable:
        def norm(improved: bool, add_self_loops: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
            ei, ew = layout.structure.gcn_norm(improved, add_self_loops, dtype)  # the global weights, sliced
            keep = mine[ei[1]]
            return torch.searchsorted(rows, ei[:, keep]).contiguous(), ew[keep].contiguous()

        return norm

    def apply_tensors(self, fn: TensorMap, maps: dict) -> "LayerwiseGroups":
        """A copy on the training device; ``maps``: the rank's exchange maps there."""
        out = object.__new__(LayerwiseGroups)
        out.__dict__.update(self.__dict__)
        out.groups = [LayeredGroup(fn(g.rows), fn(g.owned_pos), fn(g.owned_rows), g.graph.apply_tensors(fn))
                      for g in self.groups]
        out.maps = {k: m for k, m in maps.items() if k[1].startswith("spatial")}
        out._all_owned = torch.cat([g.owned_rows for g in out.groups])
        return out

    def _load(self, X: Tensor) -> list[Tensor]:
        t = time.perf_counter()
        out = [X.index_select(0, g.rows) for g in self.groups]
        self.load_seconds += time.perf_counter() - t
        return out

    def run(self, encoder: Callable[[FusedGraph, Tensor, Halo], Tensor], h_S: Tensor,
            exchange: Callable[[Any, Tensor], Tensor], segment_counts: Optional[tuple[Tensor, list]]) -> Tensor:
        r"""``[|S_r|, ...]``: ``encoder(graph, x, halo)`` of every group, in
        lock-step; rows of the structure set no group computes stay zero.
        ``exchange(map, X)`` fills :math:`X`'s rows of other ranks."""
        inputs = self._load(h_S)
        halos = [_GroupHalo(self, i, g.owned_pos, segment_counts) for i, g in enumerate(self.groups)]
        results: list = [None] * len(self.groups)
        grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        # the CUDA device and stream are per thread: the workers queue their kernels where the caller does
        stream = torch.cuda.current_stream(h_S.device) if h_S.is_cuda else None

        def work(i: int) -> None:
            halo = halos[i]
            kind, _ = halo.inbox.get()
            if kind == "abort":
                return
            try:
                with contextlib.ExitStack() as ctx:
                    ctx.enter_context(torch.inference_mode(inference))
                    ctx.enter_context(torch.set_grad_enabled(grad))
                    if stream is not None:
                        ctx.enter_context(torch.cuda.device(h_S.device))
                        ctx.enter_context(torch.cuda.stream(stream))
                    halo.outbox.put(("done", None, encoder(self.groups[i].graph, inputs[i], halo)))
            except _Abort:
                pass
            except BaseException as exc:  # handed to the rank's thread, which raises it
                halo.outbox.put(("error", None, exc))

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(self.groups))]
        for th in threads:
            th.start()
        waiting = list(range(len(self.groups)))  # groups paused at a hook (or not started)
        payloads: list = [None] * len(self.groups)
        try:
            while waiting:
                posts = []
                for i in waiting:  # one group runs at a time, in group order: deterministic
                    halos[i].inbox.put(("go", payloads[i]))
                    posts.append(halos[i].outbox.get())
                    if posts[-1][0] == "error":
                        raise posts[-1][2]
                kinds = {(k, key) for k, key, _ in posts}
                if len(kinds) != 1:
                    raise DecompositionMismatchError(
                        f"layer-by-layer groups of one rank reached different points of the structure encoder "
                        f"({sorted(map(str, kinds))}): an encoder must call its halo hook the same way on every "
                        "graph; use fusion_groups='snapshots'.")
                kind, key = next(iter(kinds))
                if kind == "done":
                    for i, (_, _, out) in zip(waiting, posts):
                        results[i] = out
                    waiting = []
                    break
                xs = [x for _, _, x in posts]
                m = self.maps[(key[0], f"spatial:{key[1]}")]
                own = torch.cat([x.index_select(0, g.owned_pos) for x, g in zip(xs, self.groups)])
                X = own.new_zeros((h_S.shape[0],) + tuple(own.shape[1:])).index_copy(0, self._all_owned, own)
                X = exchange(m, X)
                for i, x in zip(waiting, self._load(X)):
                    payloads[i] = x
        finally:
            for i in waiting:  # paused workers unwind; then every thread has ended
                halos[i].inbox.put(("abort", None))
            for th in threads:
                th.join()
        ref = results[0]
        own = torch.cat([r.index_select(0, g.owned_pos) for r, g in zip(results, self.groups)])
        return ref.new_zeros((h_S.shape[0],) + tuple(ref.shape[1:])).index_copy(0, self._all_owned, own)
