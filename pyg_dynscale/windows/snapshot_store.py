r"""The snapshots a :class:`~pyg_dynscale.windows.WindowTrainer`'s batches read:
one :class:`SnapshotStore` that owns them (features, targets, edges, the
global-to-storage snapshot map) and answers the questions every reader asks
-- the rows of a set of snapshots, the disjoint union of a batch step's
snapshots, where that union's self-loops are. The trainer, its ReInc cache
(:mod:`~pyg_dynscale.windows.cache`), its decoder
(:mod:`~pyg_dynscale.windows.decoder`), window models
(:mod:`~pyg_dynscale.windows.window_model`) and node batches
(:mod:`~pyg_dynscale.windows.node_batches`) share one store.

**Storage.** The held snapshots :math:`t_0 < \ldots < t_{S-1}` (every
snapshot without a process group or under ``placement="replicated"``; a
rank's own under ``"blocks"``, :mod:`~pyg_dynscale.windows.block_placement`)
are concatenated as in :class:`~pyg_dynscale.data.DynamicGraphSignal`:
``x`` :math:`[\sum_i n_{t_i}, F]`, ``edge_index`` :math:`[2, \sum_i
E_{t_i}]` (local rows per snapshot), offsets ``node_ptr`` / ``edge_ptr``
:math:`[S+1]` (host lists). Readers pass *global* snapshot indices;
:meth:`SnapshotStore.positions` maps them to storage positions.

**Layout facts** (:class:`StoreLayout`) are those of the *whole* signal, the
same on every rank whatever it holds: ``uniform`` (every snapshot has the
same :math:`n > 0` rows), ``fixed`` (and they are vertices :math:`0 \ldots
V-1` in order: states are handed on row by row), ``static`` (and the same
edges and weights, no edge fields: one graph).

**A static graph is held once.** Where the signal stores one edge list for
every snapshot (:attr:`~pyg_dynscale.data.DynamicGraphSignal.static_edge_index`,
e.g. :func:`~pyg_dynscale.windows.series_signal`'s), the store holds that
``[2, E]`` list (and ``[E]`` weights) on the device, and every reader of the
batches -- :meth:`SnapshotStore.first_graph`, :meth:`~SnapshotStore.union`,
:meth:`~SnapshotStore.union_loops`, :meth:`~SnapshotStore.storage_graph` --
works from it. :attr:`SnapshotStore.edge_index` / ``edge_weight`` /
``loops`` (the concatenated form) are then built at their first access only,
for readers that need every held snapshot's copy (e.g. incremental
aggregation, node batches); :attr:`SnapshotStore.edges_expanded` says
whether that happened. The road graph's 52,116 snapshots thus hold 2,600
edges, not :math:`52{,}116 \times 2{,}600`.

**Disjoint union** of snapshots :math:`t_1 \ldots t_B` (one step of a batch
of :math:`B` windows): rows concatenated, snapshot :math:`b`'s edges offset by
:math:`\sum_{b' < b} n_{t_{b'}}`; on a static graph the union's edges are
built once per :math:`B`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from ..nn.graph_norm import self_loops

__all__ = ["SnapshotStore", "StoreLayout"]


@dataclass(frozen=True)
class StoreLayout:
    r"""Facts of the whole signal (module docstring), the same on every rank.

    Attributes:
        uniform (bool): every snapshot has the same :math:`n > 0` rows.
        fixed (bool): uniform, and the rows are vertices :math:`0 \ldots V-1` in order.
        static (bool): uniform with the same edges and weights in every snapshot, and no edge fields.
        num_vertices (int): :math:`V`.
    """

    uniform: bool
    fixed: bool
    static: bool
    num_vertices: int

    @classmethod
    def of(cls, signal: Any, edge_fields: tuple = ()) -> "StoreLayout":
        """The layout of ``signal`` (edge fields read by the model make a graph
        non-static). A signal that stores its edges once is static without a
        look at them; otherwise the snapshots' edges are compared a chunk at a
        time (no :math:`T \times E` temporary)."""
        counts = signal.nodes_per_snapshot
        n0 = int(counts[0])
        uniform = bool((counts == n0).all()) and n0 > 0
        # implicit local ids are rows 0 .. n-1 in order by definition (nothing to compare, nothing built)
        fixed = uniform and n0 == signal.num_vertices and (getattr(signal, "local_ids", False) or bool(
            (signal.node_id.view(-1, n0) == torch.arange(n0)).all()))
        return cls(uniform, fixed, uniform and not edge_fields and _same_edges(signal), int(signal.num_vertices))


def _same_edges(signal: Any) -> bool:
    """Whether every snapshot has the same edges and weights (snapshots of
    equal size): :meth:`~pyg_dynscale.data.DynamicGraphSignal.has_same_edges`."""
    return bool(signal.has_same_edges())


class SnapshotStore:
    r"""The held snapshots on the trainer's device and dtype (the signal's
    own tensors where they agree: no copy).

    Args:
        view (WindowView): the windows (after :meth:`~pyg_dynscale.windows.WindowView.hold`
            where a rank keeps its own snapshots); its ``x`` (standardized) and
            signal are stored.
        target (str): the node-level field holding the targets.
        edge_fields (tuple): the edge fields the model reads.
        layout (StoreLayout): the whole signal's layout.
        device (torch.device): where the batches are computed.
        dtype (torch.dtype): the features' floating dtype.

    Attributes:
        x (Tensor): ``[N_held, F...]`` features.
        y (Tensor): ``[N_held, ...]`` targets.
        edge_index (Tensor): ``[2, E_held]``, local rows per snapshot (a
            static graph's: built at the first access, module docstring).
        edge_weight (Tensor, optional): ``[E_held]`` (likewise).
        static_graph (tuple, optional): ``(edge_index [2, E], edge_weight [E]
            or None)``, a static graph's one list (``None``: edges per snapshot).
        edge_fields (dict): name -> ``[E_held, ...]``.
        node_id (Tensor): ``[N_held]`` vertex of each row (a signal's implicit
            local ids: built at the first access).
        node_ptr (list): ``[S+1]`` row offsets (host).
        edge_ptr (list): ``[S+1]`` edge offsets (host).
        loops (Tensor): host positions of the self-loops in ``edge_index``
            (a static graph's: built at the first access).
        layout (StoreLayout): the whole signal's facts; ``uniform``, ``fixed``,
            ``static``, ``num_vertices`` read through.
    """

    def __init__(self, view: Any, target: str, edge_fields: tuple, layout: StoreLayout, device: torch.device,
                 dtype: torch.dtype) -> None:
        sig = view.signal
        self.layout, self.device, self.dtype = layout, device, dtype
        self.x = view.x.to(device, dtype)
        self.y = sig.fields[target].values.to(device)
        self.static_graph: Optional[tuple] = None
        self._edge_index: Optional[Tensor] = None
        self._edge_weight: Optional[Tensor] = None
        self._loops: Optional[Tensor] = None
        #: a static graph's loops: the first snapshot's (made at the first use)
        self._first_loops: Optional[Tensor] = None
        if sig.is_static:  # the one list, never the T copies (module docstring)
            ei, ew = sig.static_edge_index, sig.static_edge_weight
            self.static_graph = (ei.to(device), None if ew is None else ew.to(device, dtype))
            self._first_loops = self_loops(ei.cpu())
        else:
            self._edge_weight = None if sig.edge_weight is None else sig.edge_weight.to(device, dtype)
            self._edge_index = sig.edge_index.to(device)
            #: host positions of the storage's self-loops (the batch graphs are normalized without a read-back)
            self._loops = self_loops(sig.edge_index.cpu())
        self.weighted = bool(sig.weighted)
        self.edge_fields = {k: sig.fields[k].values.to(device) for k in edge_fields}
        self.node_ptr, self.edge_ptr = sig.node_ptr.tolist(), sig.edge_ptr.tolist()
        #: the vertex of each held row (``None``: the signal's implicit local ids, built on demand)
        self._node_id: Optional[Tensor] = None if sig.local_ids else sig.node_id.to(device)
        #: host ``[S+1]`` edge offsets, and per snapshot its range of ``loops`` (made at the first use)
        self._eptr = torch.tensor(self.edge_ptr)
        self._loop_ptr: Optional[Tensor] = None
        #: global snapshot -> storage position (``None``: the identity, every snapshot held)
        self._pos = view.local_positions()
        #: the static union's edges of the last batch size: ``{B: (edge_index, edge_weight)}``
        self._union_edges: dict = {}

    # ------------------------------------------------------------------ edges
    @property
    def edge_index(self) -> Tensor:
        """``[2, E_held]`` local rows, held snapshots concatenated (a static
        graph's one list tiled, built here at the first access and kept)."""
        if self._edge_index is None:
            assert self.static_graph is not None
            self._edge_index = self.static_graph[0].repeat(1, self.num_held)
        return self._edge_index

    @property
    def edge_weight(self) -> Optional[Tensor]:
        """``[E_held]`` weights or ``None`` (a static graph's: as :attr:`edge_index`)."""
        if self._edge_weight is None and self.static_graph is not None and self.static_graph[1] is not None:
            self._edge_weight = self.static_graph[1].repeat(self.num_held)
        return self._edge_weight

    @property
    def loops(self) -> Tensor:
        """Host positions of the self-loops in :attr:`edge_index` (a static
        graph's: its one list's, shifted to every held snapshot, at the first
        access)."""
        if self._loops is None:
            assert self._first_loops is not None
            E = self.edge_ptr[1]
            self._loops = (torch.arange(self.num_held).unsqueeze(1) * E + self._first_loops.unsqueeze(0)).flatten()
        return self._loops

    @property
    def node_id(self) -> Tensor:
        """``[N_held]`` vertex of each held row (implicit local ids ``0 ..
        n_t-1``: built at the first access, for readers of changing vertex
        sets; a fixed vertex set never asks)."""
        if self._node_id is None:
            ptr = torch.tensor(self.node_ptr, device=self.device)
            counts = ptr.diff()
            total = int(ptr[-1])
            self._node_id = torch.arange(total, device=self.device) - torch.repeat_interleave(
                ptr[:-1], counts, output_size=total)
        return self._node_id

    @property
    def edges_expanded(self) -> bool:
        """Whether a static graph's concatenated edges (or their loops) were
        built; always ``False`` for edges per snapshot."""
        return self.static_graph is not None and (
            self._edge_index is not None or self._edge_weight is not None or self._loops is not None)

    def nbytes(self) -> int:
        """Bytes of the distinct tensor storages the store holds (features,
        targets, edges -- one list or per snapshot, any expansion built --,
        vertex ids if built, edge fields, the last union's edges)."""
        seen: dict[int, int] = {}
        tensors = [self.x, self.y, self._edge_index, self._edge_weight, self._node_id, self._loops,
                   *(self.static_graph or ()), *self.edge_fields.values()]
        for pair in self._union_edges.values():
            tensors += list(pair)
        for t in tensors:
            if t is not None:
                st = t.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())

    def _edges_at(self, p: int) -> tuple:
        """``(edge_index, edge_weight)`` of storage position ``p``: views."""
        if self.static_graph is not None:
            return self.static_graph
        a, b = self.edge_ptr[p], self.edge_ptr[p + 1]
        ew = self._edge_weight
        return self._edge_index[:, a:b], None if ew is None else ew[a:b]  # type: ignore[index]

    # ------------------------------------------------------------------ layout
    @property
    def uniform(self) -> bool:
        return self.layout.uniform

    @property
    def fixed(self) -> bool:
        return self.layout.fixed

    @property
    def static(self) -> bool:
        return self.layout.static

    @property
    def num_vertices(self) -> int:
        return self.layout.num_vertices

    @property
    def num_held(self) -> int:
        """:math:`S`, the snapshots held."""
        return len(self.node_ptr) - 1

    @property
    def snapshot_rows(self) -> int:
        """:math:`n`, the rows of every snapshot (a uniform layout)."""
        return self.node_ptr[1]

    # ------------------------------------------------------------------ snapshots
    def positions(self, ts: list) -> list:
        """Storage positions of global snapshots ``ts``."""
        return list(ts) if self._pos is None else [self._pos[t] for t in ts]

    def rows_of(self, t: int) -> int:
        """:math:`n_t`, the rows of global snapshot ``t``."""
        p = t if self._pos is None else self._pos[t]
        return self.node_ptr[p + 1] - self.node_ptr[p]

    def gather(self, rows: Tensor, ts: list) -> Tensor:
        """The rows of global snapshots ``ts`` of a per-row tensor of the storage (``x``, ``y``, a basis),
        concatenated."""
        ts = self.positions(ts)
        if self.uniform:
            n = self.node_ptr[1]
            idx = torch.tensor(ts, device=self.device)
            return rows.view(-1, n, *rows.shape[1:]).index_select(0, idx).reshape(len(ts) * n, *rows.shape[1:])
        return torch.cat([rows[self.node_ptr[t]:self.node_ptr[t + 1]] for t in ts])

    def first_graph(self) -> tuple:
        """``(edge_index [2, E], edge_weight [E] or None)``: a static graph's one graph."""
        return self._edges_at(0)

    def union(self, ts: list) -> tuple:
        """``x, edge_index, edge_weight, edge_fields, rows`` of the disjoint
        union of global snapshots ``ts`` (``rows``: each row's state row
        :math:`b V + v`, changing vertex sets only)."""
        B = len(ts)
        x = self.gather(self.x, ts)
        ts = self.positions(ts)
        if self.static:
            if B not in self._union_edges:
                E, n = self.edge_ptr[1], self.node_ptr[1]
                off = (torch.arange(B, device=self.device) * n).repeat_interleave(E)
                ei0, ew0 = self.first_graph()
                ei = ei0.repeat(1, B) + off
                ew = None if ew0 is None else ew0.repeat(B)
                self._union_edges = {B: (ei, ew)}
            ei, ew = self._union_edges[B]
            ef: dict = {}
        else:
            eis, ews, off = [], [], 0
            efs: dict = {k: [] for k in self.edge_fields}
            for t in ts:
                a, b = self.edge_ptr[t], self.edge_ptr[t + 1]
                ei_t, ew_t = self._edges_at(t)
                eis.append(ei_t + off)
                if ew_t is not None:
                    ews.append(ew_t)
                for k, v in self.edge_fields.items():
                    efs[k].append(v[a:b])
                off += self.node_ptr[t + 1] - self.node_ptr[t]
            ei = torch.cat(eis, 1)
            ew = torch.cat(ews) if self.weighted else None
            ef = {k: torch.cat(v) for k, v in efs.items()}
        rows = None
        if not self.fixed:
            V = self.num_vertices
            rows = torch.cat([self.node_id[self.node_ptr[t]:self.node_ptr[t + 1]] + b * V for b, t in enumerate(ts)])
        return x, ei, ew, ef, rows

    def union_loops(self, ts: list) -> Tensor:
        """Host ``[L]`` positions of the self-loops in the edge list of
        :meth:`union` of global snapshots ``ts`` (host data: a normalization of
        the union that is told where they are reads nothing back,
        :mod:`~pyg_dynscale.nn.graph_norm`)."""
        if self.static_graph is not None:  # every snapshot holds the one list: B copies of its loops
            fl = self._first_loops
            assert fl is not None
            if fl.numel() == 0:
                return fl
            E = self.edge_ptr[1]
            return (torch.arange(len(ts)).unsqueeze(1) * E + fl.unsqueeze(0)).flatten()
        loops = self.loops
        if loops.numel() == 0:
            return loops
        ts = self.positions(ts)
        if self.static:  # B copies of the first snapshot's edges
            E = self.edge_ptr[1]
            if self._first_loops is None:  # once: the storage holds every snapshot's copy of them
                self._first_loops = loops[loops < E]
            return (torch.arange(len(ts)).unsqueeze(1) * E + self._first_loops.unsqueeze(0)).flatten()
        if self._loop_ptr is None:  # per storage snapshot, its range of ``loops`` (sorted positions)
            self._loop_ptr = torch.searchsorted(loops, self._eptr)
        t = torch.tensor(ts, dtype=torch.long)
        eptr = self._eptr
        ec = eptr[t + 1] - eptr[t]
        lo, cnt = self._loop_ptr[t], self._loop_ptr[t + 1] - self._loop_ptr[t]
        total = int(cnt.sum())
        first = torch.cumsum(cnt, 0) - cnt
        # snapshot b's loops at lo_b .. lo_b + cnt_b - 1, moved from its storage edges to its union edges
        at = torch.repeat_interleave(lo - first, cnt, output_size=total) + torch.arange(total)
        shift = torch.cumsum(ec, 0) - ec - eptr[t]
        return loops[at] + torch.repeat_interleave(shift, cnt, output_size=total)

    def storage_graph(self) -> tuple:
        r"""``(edge_index, edge_weight, n)``: the graph a reuse's input basis of
        the whole storage is computed on. A static graph: its one snapshot
        graph (``[2, E]``, local rows, ``n`` vertices;
        :func:`~pyg_dynscale.nn.reuse.static_basis` lays the snapshots side by
        side as feature columns); otherwise the block-diagonal union of all
        held snapshots (``[2, E_held]``, storage rows, ``n = N_held``)."""
        if self.static:
            ei, ew = self.first_graph()
            return ei, ew, self.node_ptr[1]
        if self.static_graph is not None:  # one list, snapshots of different sizes: shifted into one new tensor
            ei0, ew0 = self.static_graph
            starts = torch.as_tensor(self.node_ptr[:-1], device=ei0.device)
            ei = (ei0.unsqueeze(1) + starts.view(1, -1, 1)).reshape(2, -1)
            return ei, None if ew0 is None else ew0.repeat(self.num_held), self.x.shape[0]
        ei = self.edge_index
        counts_e = torch.as_tensor(self.edge_ptr, device=ei.device).diff()
        starts = torch.as_tensor(self.node_ptr[:-1], device=ei.device)
        off = torch.repeat_interleave(starts, counts_e, output_size=ei.shape[1])
        return ei + off, self.edge_weight, self.x.shape[0]

    def by_snapshot(self, rows: Tensor) -> Tensor:
        """``[S, n, w]`` view of per-row storage values ``rows`` (a uniform layout)."""
        return rows.reshape(self.num_held, self.node_ptr[1], -1)

    def __repr__(self) -> str:
        return (f"SnapshotStore(snapshots={self.num_held}, rows={self.x.shape[0]}, "
                f"edges={self.edge_ptr[-1]}, uniform={self.uniform}, fixed={self.fixed}, "
                f"static={self.static}, device={self.device})")
