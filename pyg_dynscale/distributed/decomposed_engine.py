r"""One rank's forward pass on the decomposed (DGC) path.

:class:`DecomposedEngine` executes a partition's
:class:`~pyg_dynscale.partition.CommunicationPlan` for a
:class:`~pyg_dynscale.nn.DecomposedModule` on one rank. Per block :math:`b`:

1. PSS-TS, :math:`b \ge 1`: ``redistribution_back`` (block input rows,
   time owner :math:`\to` structure owner);
2. the structure encoder over the rank's structure set, one halo exchange
   (``spatial:l``) before every spatial aggregation -- block 0's first layer
   aggregates raw features whose halo was loaded once at set-up;
3. PSS-TS: ``redistribution`` (structure output rows to the time owner);
4. the time encoder: recurrent -- in rounds, a piece of a sequence starting
   from the state its predecessor piece ended with on another rank;
   attention -- one exchange of every earlier appearance, merged with the
   local rows in time order; window (TM-GCN) -- the same with the earlier
   appearances inside the band only; ``none`` -- nothing crosses snapshots.

Everything it indexes with is built once on the host
(:class:`~pyg_dynscale.distributed.local.RankLayout`, the windows of
:mod:`.time_windows`, the per-snapshot groups of ``fusion="none"``) and
moved to the training device by :meth:`DecomposedEngine.place`; row counts
of every exchange are host lists from the plan, so the forward and backward
never wait on the device.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..data.tensor_maps import TensorMap, map_tensors
from ..errors import DecompositionMismatchError
from ..nn.decomposed import FusedGraph, Halo
from .exchange import Communicator
from .fusion_groups import GroupCost, activation_row_width, halo_rows_loaded, plan_per_unit, plan_time_order
from .layerwise import LayerwiseGroups
from .local import ExchangeMap, RankLayout, halo_keys, node_subset_graph
from .stale import StaleCache
from .time_windows import RankWindow, build_windows

__all__ = ["DecomposedEngine", "snapshot_groups"]


class RankHalo(Halo):
    """The hook the structure encoders call: halo exchange before each
    spatial aggregation, global sums for BatchNorm statistics."""

    def __init__(self, engine: "DecomposedEngine", maps: dict, owned: Tensor,
                 segment_counts: Optional[tuple[Tensor, list]] = None) -> None:
        self.engine = engine
        self.maps = maps
        self.owned = owned
        self.segment_counts = segment_counts

    def exchange(self, block: int, layer: int, x: Tensor) -> Tensor:
        m = self.maps.get((block, f"spatial:{layer}"))
        if m is None:
            raise DecompositionMismatchError(
                f"the structure encoder aggregates at block {block}, layer {layer}, but the model's dependency "
                "pattern declares no such spatial layer; fix the model's dependency_pattern()."
            )
        if m.static:  # raw input features: the halo rows were loaded at set-up
            return x
        return self.engine.exchange_into(m, x, x)

    def all_reduce(self, x: Tensor) -> Tensor:
        return self.engine.comm.all_reduce((-1, "batch_norm", "norm"), x)


@dataclasses.dataclass
class SnapshotGroup:
    """Snapshots run as one structure-encoder call (``fusion`` ``"none"`` or a
    memory budget): rows ``[lo, hi)`` of the structure set, their graph and
    halo maps, and the owned rows among them."""

    lo: int
    hi: int
    graph: FusedGraph
    maps: dict
    owned: Tensor


def snapshot_groups(signal: Any, partition: Any, pattern: Any, world_size: int, dtype: torch.dtype,
                    budget: Optional[float]) -> list[tuple[int, int]]:
    r"""Consecutive snapshot ranges ``[(t0, t1), ...]``, the same on every
    rank, each run as one structure-encoder call. ``budget=None``: one
    snapshot per call (``fusion="none"``). Otherwise ranges grow while the
    largest rank's estimated activation memory for the range,
    :math:`b \cdot (n_r (F + \sum_l w_l + w_\text{out}) + 2 e_r)` for its
    :math:`n_r` structure rows and :math:`e_r` edges in the range, stays
    within the budget (a single snapshot over budget runs alone)."""
    sg = signal.supergraph()
    T = sg.num_snapshots
    if budget is None:
        return [(t, t + 1) for t in range(T)]
    own = partition.owner
    R = world_size
    d = sg.spatial_edge_index[1]
    # rows per (rank, snapshot): owned nodes + their halo (in-neighbours owned elsewhere), edges into owned nodes
    key_n = own * T + sg.time
    halo = halo_keys(own, sg.spatial_edge_index, sg.num_nodes)
    hr, hg = halo // sg.num_nodes, halo % sg.num_nodes
    rows = torch.bincount(key_n, minlength=R * T) + torch.bincount(hr * T + sg.time[hg], minlength=R * T)
    edges = torch.bincount(own[d] * T + sg.time[d], minlength=R * T)
    bpe = torch.empty((), dtype=dtype).element_size()
    width = activation_row_width(pattern)
    cost = (rows.view(R, T).double() * width + 2 * edges.view(R, T).double()) * bpe  # [R, T]
    groups, t0 = [], 0
    acc = torch.zeros(R, dtype=torch.float64)
    for t in range(T):
        if t > t0 and float((acc + cost[:, t]).max()) > budget:
            groups.append((t0, t))
            t0, acc = t, torch.zeros(R, dtype=torch.float64)
        acc += cost[:, t]
    groups.append((t0, T))
    return groups


class DecomposedEngine:
    r"""The decomposed forward of one rank (see the module doc).

    Args:
        model: the :class:`~pyg_dynscale.nn.DecomposedModule`.
        signal: the whole signal, on the host.
        partition: its partition.
        pattern: the model's dependency pattern.
        plan: the :class:`~pyg_dynscale.partition.CommunicationPlan`.
        comm: this rank's :class:`~pyg_dynscale.distributed.exchange.Communicator`.
        global_graph: the signal's :class:`FusedGraph` (GCN normalizations are
            sliced from it).
        dtype: the floating dtype of the rows.
        fusion: ``"full"``, ``"none"`` or ``"budget"`` (with ``budget`` bytes).
        fusion_groups: under a budget, ``"snapshots"`` (snapshot ranges, one
            call each) or a layer-by-layer policy of
            :data:`~.fusion_groups.POLICIES` (:mod:`.layerwise`).
        input_halo: ``"load"`` or ``"exchange"``.
        h0: ``[S, W]`` initial state per sequence (host or device; moved by
            :meth:`place`, which keeps its autograd history), or ``None``.
        checkpoint_every: windows of snapshots under gradient checkpointing.
        stale: the stale embedding cache, or ``None``.
    """

    path = "decomposed"

    def __init__(self, model: Any, signal: Any, partition: Any, pattern: Any, plan: Any, comm: Communicator,
                 global_graph: FusedGraph, dtype: torch.dtype, *, fusion: str = "full",
                 budget: Optional[float] = None, fusion_groups: str = "snapshots", input_halo: str = "load",
                 h0: Optional[Tensor] = None,
                 checkpoint_every: Optional[int] = None, stale: Optional[StaleCache] = None,
                 shard: Any = None) -> None:
        self.model, self.signal, self.partition, self.pattern, self.plan = model, signal, partition, pattern, plan
        #: the rank's :class:`~.shards.Shard` when it holds only its part (``signal`` and ``partition`` are ``None``)
        self.shard = shard
        self.comm = comm
        self.rank, self.world_size = comm.rank, comm.world_size
        self.dtype = dtype
        self.fusion = fusion
        self.stale = stale
        #: set by the trainer while a training pass runs (the stale cache applies then only)
        self.stale_active = False
        self._recv_store: dict = {}  # checkpointed window -> {call position: rows received in its first pass}
        self._recv_cache: Optional[dict] = None  # the current window's entry of the store
        self._recv_calls = 0
        # ---------------- host structures, built once
        #: this rank's layout on the host (set-up code reads it); :attr:`layout` is its device copy
        if shard is not None:  # fusion="full" without windows (the trainer refuses the rest)
            self.host_layout = RankLayout.from_nodes(shard.nodes, plan, self.rank, shard.owned, shard.Q,
                                                     shard.two_owners, shard.spatial_edges, shard.edge_weight,
                                                     shard.halo_in).prepare(pattern)
        else:
            self.host_layout = RankLayout(signal, partition, plan, self.rank, global_graph).prepare(pattern)
        self._host_windows: Optional[list[RankWindow]] = None
        if checkpoint_every is not None:
            self._host_windows = build_windows(signal, partition, pattern, self.rank, checkpoint_every, input_halo,
                                               self.host_layout, model)
            for w in self._host_windows:
                w.layout.prepare(pattern)
        #: the snapshot ranges each structure-encoder call covers (``None``: one call for everything)
        self.groups: Optional[list] = None
        self._host_groups: Optional[list[SnapshotGroup]] = None
        #: budgeted layer-by-layer groups of chunk pieces (host), or ``None``
        self.layered: Optional[LayerwiseGroups] = None
        if fusion == "budget" and fusion_groups != "snapshots":
            self._cost = GroupCost(activation_row_width(pattern) * torch.empty((), dtype=dtype).element_size(),
                                   2.0 * torch.empty((), dtype=dtype).element_size())
            self._budget = float(budget)
            self.layered = LayerwiseGroups(self.host_layout, partition.chunk, fusion_groups, self._budget, self._cost)
        elif fusion != "full":
            self.groups = snapshot_groups(signal, partition, pattern, self.world_size, dtype, budget)
            self._host_groups = self._build_groups(self.groups)
        self._host_h0 = h0
        readout = getattr(model, "readout", None)
        self._host_x_Q = None if readout is None else self._input_rows(self.host_layout.Q)
        self.x_S: Optional[Tensor] = None

    # ------------------------------------------------------------------ device
    def place(self, fn: TensorMap) -> None:
        """(Re)build the device copies of every host structure with ``fn``
        (:func:`~pyg_dynscale.data.tensor_maps.to_device`), and map the rows
        already computed on the device (the input rows)."""
        counts = (torch.tensor(self.shard.meta["nodes_per_snapshot"], dtype=torch.long) if self.shard is not None
                  else self.signal.nodes_per_snapshot.long())

        def seg_counts(t0: int, t1: int) -> tuple[Tensor, list]:
            # a graph's snapshots t0..t1-1: their rows over all ranks are fixed, so BatchNorm reads nothing back
            c = counts[t0:t1]
            return fn(c), (c > 0).nonzero().flatten().tolist()

        T = counts.numel()
        self.layout: RankLayout = self.host_layout.apply_tensors(fn)
        self.halo = RankHalo(self, self.layout.maps, self.layout.S_owned, seg_counts(0, T))
        self.windows: Optional[list[RankWindow]] = None
        self._window_halos: list[RankHalo] = []
        if self._host_windows is not None:
            self.windows = [map_tensors(w, fn) for w in self._host_windows]
            self._window_halos = [RankHalo(self, w.layout.maps, w.layout.S_owned, seg_counts(w.t0, w.t1))
                                  for w in self.windows]
        self._snap: list[tuple[int, int, FusedGraph, RankHalo]] = []
        self._layered = None if self.layered is None else self.layered.apply_tensors(fn, self.layout.maps)
        if self._host_groups is not None:
            for grp, (t0, t1) in zip(self._host_groups, self.groups):
                g = grp.graph.apply_tensors(fn)
                halo = RankHalo(self, map_tensors(grp.maps, fn), fn(grp.owned), seg_counts(t0, t1))
                self._snap.append((grp.lo, grp.hi, g, halo))
        self.h0 = None if self._host_h0 is None else fn(self._host_h0.to(self.dtype))
        self.x_Q = None if self._host_x_Q is None else fn(self._host_x_Q.to(self.dtype))
        if self.x_S is not None:
            self.x_S = fn(self.x_S)

    def _input_rows(self, gids: Tensor) -> Tensor:
        """Input features of the nodes ``gids`` (owned or time-owned by this
        rank): from the whole signal, or from the rank's shard."""
        if self.shard is not None:
            return self.shard.input_rows(gids)
        return self.signal.x.index_select(0, gids)

    def load_inputs(self, device: torch.device) -> None:
        """The structure set's input rows on the device; block 0's
        first-layer halo rows are raw features, moved once here (load bytes)
        unless ``input_halo="exchange"``. Only owned rows are read where a
        halo exists (the exchange brings the others)."""
        lay = self.host_layout
        m0 = self.layout.maps.get((0, "spatial:0"))
        if self.shard is not None:  # the shard's input table is S's rows, halo rows zero: used as loaded
            xs = self.shard.x.to(self.dtype).to(device)
            if m0 is not None and m0.static:  # no autograd at load: the halo rows are written in place
                xs.index_copy_(0, m0.recv_idx, self.rows(m0, xs.index_select(0, m0.send_idx)).to(xs.dtype))
            self.x_S = xs
            return
        if m0 is None:  # no first-layer exchange (e.g. TM-GCN's block 0 has no encoder)
            xs = self._input_rows(lay.S).to(self.dtype).to(device)
        else:
            local = self.layout.S_owned
            own = self._input_rows(lay.S.index_select(0, lay.S_owned)).to(self.dtype).to(device)
            xs = own.new_zeros((lay.S.numel(),) + tuple(own.shape[1:])).index_copy(0, local, own)
            if m0.static:
                xs = self.exchange_into(m0, xs, xs)
        self.x_S = xs

    @property
    def Q(self) -> Tensor:
        """Host gids of the rows whose outputs this rank computes (its time set, gid order)."""
        return self.host_layout.Q

    def fusion_loads(self) -> dict:
        r"""This rank's budgeted layer-by-layer fusion (``fusion_groups``):
        ``groups``, ``halo_rows`` its groups load per spatial layer, the same
        for ``per_chunk`` (every chunk piece alone: no fusion) and
        ``time_order`` (whole snapshots in time order under the same budget),
        and ``load_seconds`` spent gathering group rows so far."""
        lw = self.layered
        if lw is None:
            raise ValueError("fusion_loads() needs fusion=<bytes> and a layer-by-layer fusion_groups policy.")
        return {"groups": len(lw.groups), "halo_rows": lw.halo_rows,
                "per_chunk": halo_rows_loaded(lw.units, plan_per_unit(lw.units)),
                "time_order": halo_rows_loaded(lw.units, plan_time_order(lw.units, self._budget, self._cost)),
                "load_seconds": self._layered.load_seconds}

    def after_backward(self) -> None:
        self._recv_store = {}  # every checkpointed window has been recomputed

    def after_step(self) -> None:
        pass

    # ------------------------------------------------------------- set-up
    def _build_groups(self, groups: list) -> list[SnapshotGroup]:
        """Structure graphs and halo maps of each snapshot range (``fusion``
        ``"none"`` or a memory budget), on the host."""
        lay = self.host_layout
        S = lay.S
        sg = self.signal.supergraph()
        T = sg.num_snapshots
        tS = sg.time[S]
        ptr = torch.zeros(T + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(tS, minlength=T), 0, out=ptr[1:])
        ei_all = lay.structure.edge_index
        et = tS[ei_all[1]] if ei_all.numel() else ei_all[0]
        ew_all = lay.structure.edge_weight
        own_local = torch.zeros(S.numel(), dtype=torch.bool)
        own_local[lay.S_owned] = True
        R = self.world_size
        out = []
        for t0, t1 in groups:
            lo, hi = int(ptr[t0]), int(ptr[t1])
            sel = ((et >= t0) & (et < t1)).nonzero().flatten()
            ei = ei_all[:, sel] - lo
            ew = ew_all[sel] if ew_all is not None else None
            g = node_subset_graph(sg, S[lo:hi], None, edges=(ei, ew))
            # BatchNorm segments of this call: its snapshots, in order (a PyGT call is one snapshot)
            g = FusedGraph(x=None, edge_weight=g.edge_weight,
                           supergraph=dataclasses.replace(g.supergraph, time=tS[lo:hi] - t0, node_ptr=ptr[t0:t1 + 1] - lo))
            g.gcn_norm = self._snapshot_norm(lo, hi)  # type: ignore[method-assign]
            maps = {}
            for key, m in lay.maps.items():
                if not key[1].startswith("spatial"):
                    continue
                ks = ((tS[m.send_idx] >= t0) & (tS[m.send_idx] < t1)) if m.send_idx.numel() else m.send_idx.bool()
                kr = ((tS[m.recv_idx] >= t0) & (tS[m.recv_idx] < t1)) if m.recv_idx.numel() else m.recv_idx.bool()
                src_rank = torch.repeat_interleave(torch.arange(R), torch.tensor(m.recv_splits, dtype=torch.long))
                dst_rank = torch.repeat_interleave(torch.arange(R), torch.tensor(m.send_splits, dtype=torch.long))
                maps[key] = ExchangeMap(m.key, m.width, m.static, m.send_idx[ks] - lo,
                                        torch.bincount(dst_rank[ks], minlength=R).tolist(),
                                        m.recv_idx[kr] - lo, torch.bincount(src_rank[kr], minlength=R).tolist(),
                                        m.recv_gid[kr], m.send_gid[ks])
            out.append(SnapshotGroup(lo, hi, g, maps, own_local[lo:hi].nonzero().flatten()))
        return out

    def _snapshot_norm(self, lo: int, hi: int) -> Callable:
        lay = self.host_layout

        def norm(improved: bool, add_self_loops: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
            ei, ew = lay.structure.gcn_norm(improved, add_self_loops, dtype)
            keep = (ei[1] >= lo) & (ei[1] < hi)
            return (ei[:, keep] - lo).contiguous(), ew[keep].contiguous()

        return norm

    # --------------------------------------------------------------- exchange
    def exchange_into(self, m: ExchangeMap, src: Tensor, dst: Tensor) -> Tensor:
        """Send ``src``'s rows ``m.send_idx``; write the received rows into
        ``dst`` at ``m.recv_idx`` (out of place)."""
        send = src.index_select(0, m.send_idx)
        w = math.prod(src.shape[1:])
        if w != m.width:
            raise DecompositionMismatchError(
                f"exchange {m.key}: the model moves rows of {w} elements but its dependency pattern declares "
                f"{m.width}; the pattern (model.dependency_pattern()) must describe what the model computes.")
        recv = self.rows(m, send)
        return dst.index_copy(0, m.recv_idx, recv.to(dst.dtype))

    def rows(self, m: ExchangeMap, send: Tensor) -> Tensor:
        """Exchange ``send`` along ``m``: exactly, or through the stale cache
        while training when it covers ``m``'s kind. Inside a checkpointed
        window the received rows are kept, and its recomputation gets them
        back without a collective."""
        cache = self._recv_cache
        if cache is not None:
            key = self._recv_calls
            self._recv_calls += 1
            if key in cache:
                rows, grad = cache[key]
                return rows.detach().requires_grad_(grad)  # as in the first pass, so the same tensors are saved
        if self.stale_active and self.stale is not None and self.stale.applies(m.key[2]):
            recv = self.stale.exchange(self.comm, id(m), m.key, send, m.send_splits, m.recv_splits)
        else:
            recv = self.comm.exchange(m.key, send, m.send_splits, m.recv_splits)
        if cache is not None:
            cache[key] = (recv.detach(), recv.requires_grad)
        return recv

    def _redistribute(self, key: tuple, src: Tensor, n_dst: int, src_local: Tensor, dst_local: Tensor,
                      lay: RankLayout) -> Tensor:
        """PSS-TS: rows of ``src`` to the other owner's ``n_dst`` rows; rows
        whose two owners are this rank are copied, the others exchanged."""
        dst = src.new_zeros((n_dst,) + tuple(src.shape[1:])).index_copy(0, dst_local, src.index_select(0, src_local))
        return self.exchange_into(lay.maps[key], src, dst)

    # ---------------------------------------------------------------- forward
    def outputs(self) -> Tensor:
        """``[|Q_r|, H]`` model outputs of this rank's time-owned nodes
        (gid order), before the head."""
        if self.windows is not None and torch.is_grad_enabled():
            h_Q = self._windowed_outputs()
        else:
            inits = [self.h0] + [None] * (self.model.num_blocks - 1)  # h0 enters the first block, as forward_fused
            h_Q, _ = self._blocks(self.x_S, inits)
        readout = getattr(self.model, "readout", None)  # a user's module around the cell: its per-node part
        if readout is not None:
            h_Q = readout(h_Q, self.x_Q.to(dtype=h_Q.dtype))
        return h_Q

    def _windowed_outputs(self) -> Tensor:
        """The outputs of :meth:`outputs` computed window by window under
        :func:`torch.utils.checkpoint.checkpoint` (:mod:`.time_windows`)."""
        B, W = self.model.num_blocks, self.model.state_width
        ends: list[list[Tensor]] = []  # per window, per block: the states its window-sequences end with
        outs = []
        self._recv_store = {}  # kept until the backward has recomputed every window
        for i, win in enumerate(self.windows):
            inits = []
            for b in range(B):
                init = (self.h0.index_select(0, win.h0_seq) if self.h0 is not None and b == 0
                        else self.x_S.new_zeros(win.num_sequences, W))
                c = win.carry
                if c is not None:
                    parts = [ends[w][b].index_select(0, pos) for w, pos in c.sources]
                    rows = torch.cat(parts, 0).index_select(0, c.order) if parts else init.new_zeros(0, W)
                    init = init.index_copy(0, c.local_seq, rows[c.num_send:])
                    if b in c.maps:  # some rank sends: every rank takes part
                        init = init.index_copy(0, c.recv_seq, self.rows(c.maps[b], rows[:c.num_send]))
                inits.append(init)
            res = checkpoint(self._window, i, *inits, use_reentrant=False, preserve_rng_state=True)
            outs.append(res[0])
            ends.append(list(res[1:]))
        return torch.cat(outs, 0) if outs else self.x_S.new_zeros(0, getattr(self.model, "out_channels", W))

    def _window(self, i: int, *inits: Tensor) -> tuple:
        """Window ``i``: ``(outputs of its time rows, *per-block states its
        window-sequences end with)``; received rows come from the store on
        recomputation."""
        win = self.windows[i]
        self._recv_cache = self._recv_store.setdefault(i, {})
        self._recv_calls = 0
        try:
            h_Q, lasts = self._blocks(self.x_S[win.s_rows], list(inits), win.layout, self._window_halos[i])
        finally:
            self._recv_cache = None
        ends = []
        for b in range(self.model.num_blocks):
            sel = [last.index_select(0, keep) for last, keep in zip(lasts[b], win.end_select)]
            ends.append(torch.cat(sel, 0) if sel else h_Q.new_zeros(0, self.model.state_width))
        return (h_Q, *ends)

    def _blocks(self, x_S: Tensor, inits: list, lay: Optional[RankLayout] = None,
                halo: Optional[Halo] = None) -> tuple[Tensor, list]:
        """Every block over ``lay``'s rows (default: the rank's whole share):
        ``(time-encoder outputs of the time rows, [per block: final states
        of each recurrent round's pieces])``."""
        window = lay is not None
        lay = self.layout if lay is None else lay
        h_S = x_S
        h_Q: Optional[Tensor] = None
        lasts = []
        for b in range(self.model.num_blocks):
            if b > 0:
                if lay.two_owners:
                    sl, ql = lay.local_S_to_Q
                    h_S = self._redistribute((b, "redistribution_back"), h_Q, lay.S.numel(), ql, sl, lay)
                else:  # halo rows stay zero until the block's first halo exchange fills them
                    h_S = h_Q.new_zeros((lay.S.numel(),) + tuple(h_Q.shape[1:])).index_copy(0, lay.S_owned, h_Q)
            z_S = self._structure(b, h_S, lay, halo) if window else self._structure(b, h_S)
            if lay.two_owners:
                sl, ql = lay.local_S_to_Q
                z_Q = self._redistribute((b, "redistribution"), z_S, lay.Q.numel(), sl, ql, lay)
            else:
                z_Q = z_S.index_select(0, lay.S_owned)
            h_Q, last = self._time(b, z_Q, lay, inits[b])
            lasts.append(last)
        return h_Q, lasts

    def _structure(self, b: int, h_S: Tensor, lay: Optional[RankLayout] = None, halo: Optional[Halo] = None) -> Tensor:
        if lay is not None:  # a checkpointed window: one fused call
            return self.model.structure_encoder(lay.structure, h_S, block=b, halo=halo)
        if self._layered is not None:
            return self._layered.run(lambda g, x, hk: self.model.structure_encoder(g, x, block=b, halo=hk), h_S,
                                     lambda m, X: self.exchange_into(m, X, X), self.halo.segment_counts)
        if self._host_groups is None:
            return self.model.structure_encoder(self.layout.structure, h_S, block=b, halo=self.halo)
        outs = [self.model.structure_encoder(g, h_S[lo:hi], block=b, halo=halo) for lo, hi, g, halo in self._snap]
        return torch.cat(outs, 0) if outs else h_S[:0]

    def _time(self, b: int, z_Q: Tensor, lay: RankLayout, init: Optional[Tensor]) -> tuple[Tensor, list]:
        """Block ``b``'s time encoder over ``lay``'s time rows: ``(outputs,
        [final states of each recurrent round's pieces]``); ``init``: the
        initial state ``[S, W]`` of ``lay``'s sequences (``None``: zeros)."""
        kind = self.pattern.blocks[b].time_kind
        if kind == "none":
            return self.model.time_encoder(z_Q, lay.time_graph, None, block=b), []
        if kind in ("attention", "window"):
            info = lay.attention(b)
            zM = z_Q.new_zeros((info.graph.num_nodes,) + tuple(z_Q.shape[1:])).index_copy(0, info.q_in_m, z_Q)
            zM = self.exchange_into(info.exchange, z_Q, zM)
            hM = self.model.time_encoder(zM, info.graph, None, block=b)
            return hM.index_select(0, info.q_in_m), []
        # recurrent: rounds of pieces
        outs, lasts = [], []
        recv: Optional[Tensor] = None
        W = self.model.state_width
        rounds = lay.recurrent_rounds(b)
        for k, info in enumerate(rounds):
            g = info.graph
            last = z_Q.new_zeros(0, W)
            if g.num_nodes:
                if k == 0:
                    h0 = init.index_select(0, info.h0_seq) if init is not None else None
                else:
                    h0 = recv.index_select(0, info.h0_recv)
                out, last = self.model.time_encoder_with_state(z_Q.index_select(0, info.q_pos), g, h0, block=b)
                outs.append(out)
            lasts.append(last)
            m = info.exchange
            if m is not None:
                send = last.index_select(0, m.send_idx)
                if send.shape[1] != m.width:
                    raise DecompositionMismatchError(
                        f"the recurrent state is {send.shape[1]} wide but the dependency pattern declares "
                        f"time_width={m.width}.")
                recv = self.rows(m, send)
        if not outs:
            return z_Q.new_zeros(0, getattr(self.model, "out_channels", W)), lasts
        return torch.cat(outs, 0).index_select(0, rounds[0].inverse), lasts
