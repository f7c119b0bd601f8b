r"""The distributed runtime of the decomposed (DGC) path.

:class:`DistributedTrainer` trains a decomposed model on one rank of a
``torch.distributed`` process group whose world size is the partition's
number of parts. Every rank holds the whole signal on the host, builds the
same :class:`~pyg_dynscale.partition.CommunicationPlan` and its own
:class:`~pyg_dynscale.distributed.local.RankLayout`, and runs, per epoch
(full batch, as DGC and :class:`~pyg_dynscale.runtime.FusedTrainer`):

for each block :math:`b`:

1. PSS-TS, :math:`b \ge 1`: ``redistribution_back`` (block input rows,
   time owner :math:`\to` structure owner);
2. the structure encoder over the rank's structure set, one halo exchange
   (``spatial:l``) before every spatial aggregation -- block 0's first layer
   aggregates raw features whose halo was loaded once at set-up;
3. PSS-TS: ``redistribution`` (structure output rows to the time owner);
4. the time encoder: recurrent -- in rounds, a piece of a sequence starting
   from the state its predecessor piece ended with on another rank;
   attention -- one exchange of every earlier appearance, merged with the
   local rows in time order; ``none`` -- nothing crosses snapshots;

then the head and the loss on the time owner with global normalizers (plus a
``readout`` exchange of link-label endpoints owned elsewhere), one backward
(every exchange returns the gradients of the rows it moved, in reverse
order), a sum of the replicated parameters' gradients over ranks, and the
optimizer step. With the same initial parameters this computes what
:class:`~pyg_dynscale.runtime.FusedTrainer` computes on one process (the
tests assert it in float64).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from typing import Any, Callable, Optional, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..errors import DecompositionMismatchError, ModelInputError, PartitionError, UnsupportedModelError
from ..nn.decomposed import FusedGraph, Halo, check_initial_state
from ..nn.snapshot_model import SnapshotModel
from ..partition.halo_plan import StatePlan
from ..partition.plan import CommunicationPlan
from ..runtime.fused import LOSSES, eval_mode, resolve_targets, snapshot_mean_part
from ..runtime.paths import as_signal, edge_fields_of, prepare_snapshot_model, resolve_model
from ..runtime.snapshot_runner import SnapshotRunner
from ..runtime.time_blocks import check_windowable
from .exchange import Communicator
from .local import ExchangeMap, RankLayout, halo_keys, node_subset_graph, positions_in
from .stale import StaleCache, StaleConfig
from .time_windows import RankWindow, build_windows

__all__ = ["DistributedTrainer", "FUSION_MODES"]

FUSION_MODES = ("full", "none")


class _RankHalo(Halo):
    """The hook the structure encoders call: halo exchange before each
    spatial aggregation, global sums for BatchNorm statistics."""

    def __init__(self, trainer: "DistributedTrainer", maps: dict, owned: Tensor) -> None:
        self.trainer = trainer
        self.maps = maps
        self.owned = owned

    def exchange(self, block: int, layer: int, x: Tensor) -> Tensor:
        m = self.maps.get((block, f"spatial:{layer}"))
        if m is None:
            raise DecompositionMismatchError(
                f"the structure encoder aggregates at block {block}, layer {layer}, but the model's dependency "
                "pattern declares no such spatial layer; fix the model's dependency_pattern()."
            )
        if m.static:  # raw input features: the halo rows were loaded at set-up
            return x
        return self.trainer._exchange_into(m, x, x)

    def all_reduce(self, x: Tensor) -> Tensor:
        return self.trainer.comm.all_reduce((-1, "batch_norm", "norm"), x)


class _BlackBoxLayout:
    """What the loss and :meth:`DistributedTrainer.predict` read of a layout
    on the black-box path: the owned gids ``Q`` and the supergraph."""

    def __init__(self, Q: Tensor, sg: Any) -> None:
        self.Q, self.sg = Q, sg


def _check_dcrnn_edge_order(signal: Any) -> None:
    """PyGT's DConv pairs its in-degree normalizers (listed in input edge
    order) with the reverse edges of a dense adjacency (in sorted order);
    the pairs line up, and outputs depend on nearby edges only, when every
    snapshot's edges are sorted by (target, source) without duplicates."""
    ei, ptr = signal.edge_index, signal.edge_ptr
    E = ei.shape[1]
    if E < 2:
        return
    t = torch.repeat_interleave(torch.arange(signal.num_snapshots), ptr[1:] - ptr[:-1], output_size=E)
    n = int(signal.nodes_per_snapshot.max()) + 1
    key = (t * n + ei[1]) * n + ei[0]
    if not bool((key[1:] > key[:-1]).all()):
        raise ModelInputError(
            "signal.edge_index", "is not sorted by (target, source) without duplicates in every snapshot; PyGT's DCRNN "
            "pairs degree normalizers with edges by position, so its output then depends on the order of edges "
            "anywhere in the snapshot and cannot be split across ranks.",
            "sort each snapshot's edges with signal.sort_edges() (and merge duplicate edges) before training, or "
            "train on one process.")


def _param_digest(modules: list) -> str:
    h = hashlib.sha256()
    for m in modules:
        for name, t in m.state_dict().items():
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
    return h.hexdigest()


class DistributedTrainer:
    r"""Full-batch training of a decomposed dynamic GNN across the ranks of a
    ``torch.distributed`` process group (DGC's runtime).

    Call it on every rank with the same arguments, inside an initialized
    process group whose world size equals ``partition.num_parts``.

    Args:
        model: a :class:`~pyg_dynscale.nn.DecomposedModule` (``TGCN``,
            ``MPNNLSTM``, ``MPNNLSTMDGC``, ``DySAT``), a supported PyGT
            object (wrapped with :func:`~pyg_dynscale.nn.adapt`), or any
            per-snapshot module ``model(x, edge_index, edge_weight[, h[, c]])``
            (PyGT's other cells, a ``RecurrentGCN``) on the black-box path:
            called unchanged on each rank's local subgraph, with one state
            exchange per snapshot (docs/blackbox.md). Its parameters are
            broadcast from rank 0.
        signal: the whole training signal (every rank passes the same one),
            a :class:`~pyg_dynscale.data.DynamicGraphSignal` or a PyGT signal.
        partition: a :class:`~pyg_dynscale.partition.Partition` of ``signal``.
        head: optional row-wise module applied to every output row.
        loss: ``"mse"``, ``"mae"``, ``"ce"`` or ``"bce_link"`` (as
            :class:`~pyg_dynscale.runtime.FusedTrainer`).
        optimizer: a callable ``params -> torch.optim.Optimizer`` (built
            identically on every rank), default Adam with ``lr``.
        lr: learning rate of the default optimizer.
        device: training device (default: the model's).
        fusion: ``"full"`` -- all of a rank's chunks as one block-diagonal
            graph (each halo row fetched once per rank and layer); ``"none"``
            -- one structure-encoder call per snapshot with its own halo
            exchange per layer, as the PyGT baselines run; a number -- a
            memory budget in bytes: consecutive snapshots are fused into one
            call while the largest rank's estimated activation memory stays
            within it (:meth:`_snapshot_groups`; ranges are the same on every
            rank, so halo dependencies line up).
        input_halo: ``"load"`` -- block 0's raw-feature halo moved once at
            set-up; ``"exchange"`` -- every epoch.
        h0: ``[S, state_width]`` initial state per temporal sequence.
        snapshot_reduction: ``"mean"`` or ``"sum"`` over snapshots.
        group: process group (default: the world).
        check: self-check PyGT adapters at wrap time.
        stale: the stale embedding cache (DGC §5.2) used while training:
            ``None``/``"off"`` (exact), ``"static:<c>"``, ``"printed"``,
            ``"intent"``, ``"ramp"``, ``"adaptive"`` or a
            :class:`~pyg_dynscale.distributed.stale.StaleConfig` (kinds,
            backward, scope). Evaluation and prediction stay exact.
            Decomposed path only.
        path: ``"auto"`` (decomposed when an adapter exists, else black-box),
            ``"decomposed"`` or ``"blackbox"``.
        depth: a black-box model's halo depth (``"auto"``: its preset or the
            sum over the PyGT cells it contains; hops; ``None``; or a
            :class:`~pyg_dynscale.partition.halo_plan.HaloDepth`), verified by
            :func:`~pyg_dynscale.nn.halo_check.check_halo` when ``check``.
        checkpoint_every: gradient checkpointing over windows of this many
            snapshots (``None``: off), both paths; on the decomposed path
            each window runs its own plan (:mod:`.time_windows`), and needs
            recurrent time encoders, no BatchNorm and ``fusion="full"``.

    Example::

        # torchrun --nproc-per-node 4 train.py
        dist.init_process_group("gloo")
        part = partition(signal, "pgc", dist.get_world_size(), model.dependency_pattern())
        trainer = DistributedTrainer(model, signal, part, head=torch.nn.Linear(32, 1), loss="mse")
        for epoch in range(100):
            loss = trainer.train_epoch()   # the global loss, the same on every rank
        trainer.traffic()                  # measured vs predicted bytes of the last epoch
    """

    def __init__(
        self,
        model: torch.nn.Module,
        signal: Any,
        partition: Any,
        *,
        head: Optional[torch.nn.Module] = None,
        loss: str = "mse",
        optimizer: Optional[Callable[[list], torch.optim.Optimizer]] = None,
        lr: float = 0.01,
        device: Union[str, torch.device, None] = None,
        fusion: str = "full",
        input_halo: str = "load",
        target: str = "y",
        link_index: str = "edge_label_index",
        link_label: str = "edge_label",
        h0: Optional[Tensor] = None,
        snapshot_reduction: str = "mean",
        group: Optional[Any] = None,
        check: bool = True,
        stale: Union[str, StaleConfig, None] = None,
        path: str = "auto",
        depth: Any = "auto",
        checkpoint_every: Optional[int] = None,
    ) -> None:
        t_setup = time.perf_counter()
        if not dist.is_available() or not dist.is_initialized():
            raise ModelInputError("torch.distributed", "is not initialized.",
                                  "call torch.distributed.init_process_group first (torchrun does it for you), "
                                  "or pyg_dynscale.distributed.spawn in tests.")
        self.group = group
        self._recv_store: dict = {}  # checkpointed window -> {call position: rows received in its first pass}
        self._recv_cache: Optional[dict] = None  # the current window's entry of the store
        self._recv_calls = 0
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        signal = as_signal(signal)
        self.model = resolve_model(model, path, depth, check)
        #: ``"decomposed"`` or ``"blackbox"``
        self.path = "blackbox" if isinstance(self.model, SnapshotModel) else "decomposed"
        self.runner: Optional[SnapshotRunner] = None
        if self.path == "blackbox":
            if fusion != "full" or input_halo != "load":
                raise ModelInputError("fusion" if fusion != "full" else "input_halo",
                                      f"is {fusion if fusion != 'full' else input_halo!r}, a decomposed-path option; "
                                      f"{type(model).__name__} runs on the black-box path, which calls it once per "
                                      "snapshot.", "leave fusion and input_halo at their defaults.")
            self._init_blackbox(signal, partition, head, loss, optimizer, lr, device, target, link_index, link_label, h0,
                                snapshot_reduction, check, stale, checkpoint_every, t_setup)
            return
        if checkpoint_every is not None:
            if fusion != "full":
                raise ModelInputError("fusion", f"is {fusion!r} with checkpoint_every={checkpoint_every!r}; a "
                                      "checkpointed window runs its snapshots as one fused call.", "leave fusion='full'.")
            check_windowable(self.model)
        self.head = head
        if callable(loss) or loss not in LOSSES:
            raise ModelInputError("loss", f"is {loss!r}.", f"use one of {LOSSES} (callables are not distributed).")
        if snapshot_reduction not in ("mean", "sum"):
            raise ModelInputError("snapshot_reduction", f"is {snapshot_reduction!r}.", "use 'mean' or 'sum'.")
        budget = None
        if isinstance(fusion, (int, float)) and not isinstance(fusion, bool):
            if not fusion > 0:
                raise ModelInputError("fusion", f"is a memory budget of {fusion!r} bytes.", "give a positive number of bytes.")
            budget, fusion = float(fusion), "budget"
        elif fusion not in FUSION_MODES:
            raise ModelInputError("fusion", f"is {fusion!r}.", f"use one of {FUSION_MODES} or a memory budget in bytes.")
        self.loss_kind = loss
        self.snapshot_reduction = snapshot_reduction
        config = StaleConfig.parse(stale)
        #: the stale cache (``None``: the exact path)
        self.stale: Optional[StaleCache] = StaleCache(config) if config.enabled else None
        self._stale_on = False
        self.fusion = fusion
        self.fusion_budget = budget
        # ---------------- devices and dtypes
        params = list(self.model.parameters())
        devs = {p.device for p in params} | ({p.device for p in head.parameters()} if head is not None else set())
        if len(devs) > 1:
            raise ModelInputError("model", f"has parameters on several devices {sorted(map(str, devs))}.",
                                  "move the model and the head to one device.")
        device = torch.device(device) if device is not None else (next(iter(devs)) if devs else torch.device("cpu"))
        if device.type == "cuda" and dist.get_backend(group) == "gloo":
            raise ModelInputError("device", "is CUDA but the process group uses gloo, which cannot move CUDA tensors "
                                  "in all_to_all.", "init the process group with backend='nccl' (one GPU per rank), "
                                  "or train on the CPU.")
        if devs and next(iter(devs)) != device:
            raise ModelInputError("model", f"is on {next(iter(devs))} but training runs on {device}.",
                                  f"call model.to({str(device)!r}) first.")
        if device.type != "cpu":
            raise NotImplementedError("the distributed runtime runs on CPU ranks (gloo) in this release; "
                                      "CUDA ranks (NCCL, one GPU per rank) are not built yet.")
        self.device = device
        self.dtype = params[0].dtype if params else torch.float32
        bpe = torch.empty((), dtype=self.dtype).element_size()
        # ---------------- partition and pattern
        if partition.num_parts != self.world_size:
            raise PartitionError("partition.num_parts", f"is {partition.num_parts} but the process group has "
                                 f"{self.world_size} ranks.", "partition into world-size parts (one part per rank).")
        partition.check_signal(signal)
        if signal.device.type != "cpu":
            signal = signal.to("cpu")
        self.signal = signal
        self.partition = partition
        if getattr(self.model, "window", 1) != 1:
            raise ModelInputError("model.window", f"is {self.model.window}; the distributed runtime needs window=1 "
                                  "(stacked windows put a recurrence inside one snapshot that a partition may split).",
                                  "use window=1 (one snapshot per PyGT call).")
        self.pattern = self.model.dependency_pattern(bytes_per_element=bpe)
        declared = partition.meta.get("pattern") if isinstance(partition.meta, dict) else None
        if declared:
            theirs = json.loads(declared)["blocks"]
            if theirs != self.pattern.to_dict()["blocks"]:
                raise PartitionError("partition.meta['pattern']", f"the partition was made for the dependency pattern "
                                     f"{theirs}, but the model declares {self.pattern.to_dict()['blocks']}.",
                                     "partition with model.dependency_pattern() of this model.")
        kinds = [b.time_kind for b in self.pattern.blocks]
        if self.model.num_blocks != len(kinds) or self.model.time_kind not in kinds:
            raise DecompositionMismatchError(
                f"{type(self.model).__name__} has {self.model.num_blocks} block(s) of time kind "
                f"{self.model.time_kind!r} but its dependency pattern declares {kinds}.")
        # ---------------- targets (global gids, then this rank's share)
        x = signal.x
        if x is None:
            raise ModelInputError("signal.x", "is missing.", "give the signal node features.")
        tg = resolve_targets(signal, loss, target, link_index, link_label, self.dtype)
        link_pairs = (tg.label_src, tg.label_dst) if loss == "bce_link" else None
        self.readout_width = self._head_width(x) if loss == "bce_link" else 0
        # ---------------- same inputs everywhere, or a clear error everywhere
        self._check_same_everywhere(signal, partition)
        # ---------------- plan and layout
        self.global_graph = FusedGraph.from_signal(signal)
        self.plan = CommunicationPlan.build(signal, partition, self.pattern, input_halo=input_halo,
                                            link_pairs=link_pairs, readout_width=self.readout_width or 1)
        t0 = time.perf_counter()
        self.layout = RankLayout(signal, partition, self.plan, self.rank, self.global_graph)
        self.comm = Communicator(group, device, self.dtype)
        self.halo = _RankHalo(self, self.layout.maps, self.layout.S_owned.to(device))
        self._prepare_rank_targets(tg, loss)
        if h0 is not None:
            check_initial_state(h0, self.global_graph, self.model.state_width)
            h0 = h0.to(device=device, dtype=self.dtype)
        self.h0 = h0
        # static input halo: moved once, counted as load bytes
        self.comm.start(requires_grad=False)
        xs = x.to(self.dtype).index_select(0, self.layout.S)
        m0 = self.layout.maps.get((0, "spatial:0"))
        xs = xs.to(device)
        if m0 is not None:
            local = self.layout.S_owned
            xs = torch.zeros_like(xs).index_copy(0, local, xs.index_select(0, local))  # only owned rows are known
            if m0.static:
                xs = self._exchange_into(m0, xs, xs)
        self.x_S = xs
        self.load_seconds = time.perf_counter() - t0
        self.load_bytes_measured = self._sum_counter(lambda k: True)
        self.comm.reset_counters()
        #: gradient checkpointing: this rank's windows of snapshots (``None``: off)
        self.windows: Optional[list[RankWindow]] = None
        if checkpoint_every is not None:
            self.windows = build_windows(signal, partition, self.pattern, self.rank, checkpoint_every, input_halo,
                                         self.layout, self.model)
            self._window_halos = [_RankHalo(self, w.layout.maps, w.layout.S_owned.to(device)) for w in self.windows]
        #: the snapshot ranges each structure-encoder call covers (``None``: one call for everything)
        self.groups: Optional[list] = None
        if fusion != "full":
            self.groups = self._snapshot_groups(budget)
            self._build_unfused(self.groups)
        # ---------------- replicated parameters: rank 0's, and one optimizer per rank
        self.params = list(self.model.parameters()) + (list(head.parameters()) if head is not None else [])
        modules = [self.model] + ([head] if head is not None else [])
        for m in modules:
            for t in list(m.parameters()) + list(m.buffers()):
                dist.broadcast(t.data, 0, group=group)
        self.optimizer = optimizer(self.params) if optimizer is not None else torch.optim.Adam(self.params, lr=lr)
        #: wall seconds of each training epoch on this rank, and the part spent in collectives
        self.epoch_seconds: list[float] = []
        self.comm_seconds: list[float] = []
        self.setup_seconds = time.perf_counter() - t_setup

    # ------------------------------------------------------------------ black-box path
    def _init_blackbox(self, signal: Any, partition: Any, head: Optional[torch.nn.Module], loss: str,
                       optimizer: Optional[Callable], lr: float, device: Any, target: str, link_index: str,
                       link_label: str, h0: Optional[Tensor], snapshot_reduction: str, check: bool, stale: Any,
                       checkpoint_every: Optional[int], t_setup: float) -> None:
        """Set-up of the black-box path: probe and check the module, build
        this rank's :class:`StatePlan` from the partition's owner array and
        the step runner whose exchanges go through the :class:`Communicator`."""
        model: SnapshotModel = self.model  # type: ignore[assignment]
        self.head = head
        if callable(loss) or loss not in LOSSES:
            raise ModelInputError("loss", f"is {loss!r}.", f"use one of {LOSSES} (callables are not distributed).")
        if snapshot_reduction not in ("mean", "sum"):
            raise ModelInputError("snapshot_reduction", f"is {snapshot_reduction!r}.", "use 'mean' or 'sum'.")
        if StaleConfig.parse(stale).enabled:
            raise NotImplementedError("the stale cache works on the decomposed path only; pass stale=None.")
        if h0 is not None:
            raise NotImplementedError("h0 on the black-box path is not built yet: states start at zero.")
        if model.spec.global_reason and self.world_size > 1:
            raise UnsupportedModelError(f"{model.spec.name} cannot be split across ranks on the black-box path: "
                                        f"{model.spec.global_reason}")
        self.loss_kind, self.snapshot_reduction = loss, snapshot_reduction
        self.stale, self._stale_on = None, False
        self.fusion, self.fusion_budget, self.groups = "blackbox", None, None
        params = list(model.parameters()) + (list(head.parameters()) if head is not None else [])
        devs = {p.device for p in params}
        if len(devs) > 1:
            raise ModelInputError("model", f"has parameters on several devices {sorted(map(str, devs))}.",
                                  "move the model and the head to one device.")
        device = torch.device(device) if device is not None else (next(iter(devs)) if devs else torch.device("cpu"))
        if device.type != "cpu":
            raise NotImplementedError("the distributed runtime runs on CPU ranks (gloo) in this release; "
                                      "CUDA ranks (NCCL, one GPU per rank) are not built yet.")
        self.device = device
        self.dtype = params[0].dtype if params else torch.float32
        bpe = torch.empty((), dtype=self.dtype).element_size()
        if partition.num_parts != self.world_size:
            raise PartitionError("partition.num_parts", f"is {partition.num_parts} but the process group has "
                                 f"{self.world_size} ranks.", "partition into world-size parts (one part per rank).")
        partition.check_signal(signal)
        if signal.device.type != "cpu":
            signal = signal.to("cpu")
        if signal.x is None:
            raise ModelInputError("signal.x", "is missing.", "give the signal node features.")
        self.signal, self.partition = signal, partition
        fields = edge_fields_of(model, signal)
        prepare_snapshot_model(model, signal, check and self.world_size > 1, fields)
        if self.world_size > 1 and model.spec.name == "DCRNN":
            _check_dcrnn_edge_order(signal)
        tg = resolve_targets(signal, loss, target, link_index, link_label, self.dtype)
        self._check_same_everywhere(signal, partition)
        t0 = time.perf_counter()
        link_pairs = (tg.label_src, tg.label_dst) if loss == "bce_link" else None
        if loss == "bce_link":
            self.readout_width = self._blackbox_head_width(model)
        self.plan = StatePlan(signal, partition.owner, self.world_size, model.depth, model.state_widths, self.rank, bpe,
                              link_pairs=link_pairs, readout_width=getattr(self, "readout_width", 1))
        self.comm = Communicator(self.group, device, self.dtype)
        self.runner = SnapshotRunner(model, signal, self.plan, exchange=self.comm.exchange,
                                     checkpoint_every=checkpoint_every, dtype=self.dtype, device=device,
                                     edge_fields=fields)
        self.layout = _BlackBoxLayout(self.plan.owned_gids, signal.supergraph())
        self._prepare_rank_targets(tg, loss)
        self.h0 = None
        self.load_seconds = time.perf_counter() - t0
        self.load_bytes_measured = 0
        self.params = params
        for m in [model] + ([head] if head is not None else []):
            for t in list(m.parameters()) + list(m.buffers()):
                dist.broadcast(t.data, 0, group=self.group)
        self.optimizer = optimizer(self.params) if optimizer is not None else torch.optim.Adam(self.params, lr=lr)
        self.epoch_seconds: list[float] = []
        self.comm_seconds: list[float] = []
        self.setup_seconds = time.perf_counter() - t_setup

    def _blackbox_head_width(self, model: SnapshotModel) -> int:
        """Elements of one output row after the head (the readout row width)."""
        width = int(math.prod(model.output_shape)) if model.output_shape else 1
        if self.head is None:
            return width
        with torch.no_grad():
            p = next(self.head.parameters(), None)
            dev = p.device if p is not None else torch.device("cpu")
            out = self.head(torch.zeros((1,) + tuple(model.output_shape), dtype=self.dtype, device=dev))
        return int(out.reshape(1, -1).shape[1])

    # ------------------------------------------------------------------ setup
    def _head_width(self, x: Tensor) -> int:
        if self.head is None:
            return int(getattr(self.model, "out_channels", 0) or getattr(self.model, "hidden_channels", 0) or 1)
        H = int(getattr(self.model, "out_channels", 0) or getattr(self.model, "hidden_channels"))
        with torch.no_grad():
            p = next(self.head.parameters(), None)
            dev = p.device if p is not None else torch.device("cpu")
            return int(self.head(torch.zeros(1, H, dtype=self.dtype, device=dev)).reshape(1, -1).shape[1])

    def _check_same_everywhere(self, signal: Any, partition: Any) -> None:
        """All-gather (signal fingerprint, partition digest, parameter shapes,
        loss) and raise the same error on every rank when they differ."""
        h = hashlib.sha256()
        h.update(partition.owner.numpy().tobytes())
        if partition.time_owner is not None:
            h.update(partition.time_owner.numpy().tobytes())
        mine = {"signal": signal.fingerprint(), "partition": h.hexdigest(), "scheme": partition.scheme,
                "params": _param_digest([self.model] + ([self.head] if self.head is not None else [])),
                "loss": str(self.loss_kind), "fusion": f"{self.fusion}:{self.fusion_budget}", "dtype": str(self.dtype),
                "stale": self.stale.config.describe() if self.stale is not None else "off"}
        everyone: list = [None] * self.world_size
        dist.all_gather_object(everyone, mine, group=self.group)
        for key in mine:
            vals = [e[key] for e in everyone]
            if len(set(vals)) > 1:
                bad = [r for r, v in enumerate(vals) if v != vals[0]]
                raise ModelInputError(key, f"differs between ranks (ranks {bad} disagree with rank 0).",
                                      "pass the same signal, partition, model, loss, fusion and dtype on every rank.")

    def _prepare_rank_targets(self, tg: Any, loss: str) -> None:
        lay, dev = self.layout, self.device
        T = self.signal.num_snapshots
        if loss == "bce_link":
            # the black-box path has one owner per node; the decomposed path computes losses on the time owner
            town = self.partition.owner if self.runner is not None else self.partition.temporal_owner
            mine = (town[tg.label_src] == self.rank).nonzero().flatten()
            src, dst = tg.label_src[mine], tg.label_dst[mine]
            self.label = tg.label[mine].to(dev)
            self.label_time = tg.label_time[mine].to(dev)
            self.label_counts = torch.bincount(tg.label_time, minlength=T).to(dev)
            ex = self.plan.exchange(0 if self.runner is not None else self.plan.pattern.num_blocks - 1, "readout")
            self.readout = ExchangeMap.build(ex, self.rank, lay.Q, None)
            self.readout.recv_idx = torch.arange(self.readout.recv_gid.numel())  # received rows in arrival order
            local_d = town[dst] == self.rank
            didx = torch.empty_like(dst)
            didx[local_d] = torch.searchsorted(lay.Q, dst[local_d])
            far = (~local_d).nonzero().flatten()
            didx[far] = lay.Q.numel() + positions_in(self.readout.recv_gid, dst[far])
            self.label_src_idx = torch.searchsorted(lay.Q, src).to(dev)
            self.label_dst_idx = didx.to(dev)
        else:
            self.target_Q = tg.target.index_select(0, lay.Q).to(dev)
            self.time_Q = self.signal.supergraph().time.index_select(0, lay.Q).to(dev)
            self.node_counts = torch.bincount(self.signal.supergraph().time, minlength=T).to(dev)

    def _snapshot_groups(self, budget: Optional[float]) -> list:
        r"""Consecutive snapshot ranges ``[(t0, t1), ...]``, the same on every
        rank, each run as one structure-encoder call. ``budget=None``: one
        snapshot per call (``fusion="none"``). Otherwise ranges grow while the
        largest rank's estimated activation memory for the range,
        :math:`b \cdot (n_r (F + \sum_l w_l + w_	ext{out}) + 2 e_r)` for its
        :math:`n_r` structure rows and :math:`e_r` edges in the range, stays
        within the budget (a single snapshot over budget runs alone)."""
        sg = self.signal.supergraph()
        T = sg.num_snapshots
        if budget is None:
            return [(t, t + 1) for t in range(T)]
        own = self.partition.owner
        R = self.world_size
        d = sg.spatial_edge_index[1]
        # rows per (rank, snapshot): owned nodes + their halo (in-neighbours owned elsewhere), edges into owned nodes
        key_n = own * T + sg.time
        halo = halo_keys(own, sg.spatial_edge_index, sg.num_nodes)
        hr, hg = halo // sg.num_nodes, halo % sg.num_nodes
        rows = torch.bincount(key_n, minlength=R * T) + torch.bincount(hr * T + sg.time[hg], minlength=R * T)
        edges = torch.bincount(own[d] * T + sg.time[d], minlength=R * T)
        bpe = torch.empty((), dtype=self.dtype).element_size()
        blk = self.pattern.blocks
        width = max(sum(b.spatial_widths) + b.redistribution_width + (b.spatial_widths[0] if b.spatial_widths else 0)
                    for b in blk)
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

    def _build_unfused(self, groups: list) -> None:
        """Structure graphs and halo maps of each snapshot range (``fusion``
        ``"none"`` or a memory budget)."""
        lay = self.layout
        S = lay.S
        sg = self.signal.supergraph()
        T = sg.num_snapshots
        tS = sg.time[S]
        ptr = torch.zeros(T + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(tS, minlength=T), 0, out=ptr[1:])
        ei_all = lay.structure.edge_index
        et = tS[ei_all[1]] if ei_all.numel() else ei_all[0]
        ew_all = lay.structure.edge_weight
        self._snap = []
        own_local = torch.zeros(S.numel(), dtype=torch.bool)
        own_local[lay.S_owned] = True
        for t0, t1 in groups:
            lo, hi = int(ptr[t0]), int(ptr[t1])
            sel = ((et >= t0) & (et < t1)).nonzero().flatten()
            ei = ei_all[:, sel] - lo
            ew = ew_all[sel] if ew_all is not None else None
            gids = S[lo:hi]
            g = node_subset_graph(sg, gids, None, edges=(ei, ew))
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
                src_rank = torch.repeat_interleave(torch.arange(self.world_size), torch.tensor(m.recv_splits, dtype=torch.long))
                dst_rank = torch.repeat_interleave(torch.arange(self.world_size), torch.tensor(m.send_splits, dtype=torch.long))
                maps[key] = ExchangeMap(m.key, m.width, m.static, m.send_idx[ks] - lo,
                                        torch.bincount(dst_rank[ks], minlength=self.world_size).tolist(),
                                        m.recv_idx[kr] - lo, torch.bincount(src_rank[kr], minlength=self.world_size).tolist(),
                                        m.recv_gid[kr], m.send_gid[ks])
            owned = (own_local[lo:hi]).nonzero().flatten()
            self._snap.append((lo, hi, g, _RankHalo(self, maps, owned)))

    def _snapshot_norm(self, lo: int, hi: int) -> Callable:
        lay = self.layout

        def norm(improved: bool, add_self_loops: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
            ei, ew = lay.structure.gcn_norm(improved, add_self_loops, dtype)
            keep = (ei[1] >= lo) & (ei[1] < hi)
            return (ei[:, keep] - lo).contiguous(), ew[keep].contiguous()

        return norm

    # --------------------------------------------------------------- exchange
    def _exchange_into(self, m: ExchangeMap, src: Tensor, dst: Tensor) -> Tensor:
        """Send ``src``'s rows ``m.send_idx``; write the received rows into
        ``dst`` at ``m.recv_idx`` (out of place)."""
        send = src.index_select(0, m.send_idx)
        w = math.prod(src.shape[1:])
        if w != m.width:
            raise DecompositionMismatchError(
                f"exchange {m.key}: the model moves rows of {w} elements but its dependency pattern declares "
                f"{m.width}; the pattern (model.dependency_pattern()) must describe what the model computes.")
        recv = self._rows(m, send)
        return dst.index_copy(0, m.recv_idx, recv.to(dst.dtype))

    def _rows(self, m: ExchangeMap, send: Tensor) -> Tensor:
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
        if self._stale_on and self.stale is not None and self.stale.applies(m.key[2]):
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
        return self._exchange_into(lay.maps[key], src, dst)

    # ---------------------------------------------------------------- forward
    def _structure(self, b: int, h_S: Tensor, lay: Optional[RankLayout] = None, halo: Optional[Halo] = None) -> Tensor:
        if lay is not None:  # a checkpointed window: one fused call
            return self.model.structure_encoder(lay.structure, h_S, block=b, halo=halo)
        if self.groups is None:
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
        if kind == "attention":
            info = lay.attention(b)
            zM = z_Q.new_zeros((info["graph"].num_nodes,) + tuple(z_Q.shape[1:])).index_copy(0, info["q_in_m"], z_Q)
            zM = self._exchange_into(info["exchange"], z_Q, zM)
            hM = self.model.time_encoder(zM, info["graph"], None, block=b)
            return hM.index_select(0, info["q_in_m"]), []
        # recurrent: rounds of pieces
        outs, lasts = [], []
        recv: Optional[Tensor] = None
        W = self.model.state_width
        rounds = lay.recurrent_rounds(b)
        for k, info in enumerate(rounds):
            g = info["graph"]
            last = z_Q.new_zeros(0, W)
            if g.num_nodes:
                if k == 0:
                    h0 = init.index_select(0, info["h0_seq"]) if init is not None else None
                else:
                    h0 = recv.index_select(0, info["h0_recv"])
                out, last = self.model.time_encoder_with_state(z_Q.index_select(0, info["q_pos"]), g, h0, block=b)
                outs.append(out)
            lasts.append(last)
            m = info["exchange"]
            if m is not None:
                send = last.index_select(0, m.send_idx)
                if send.shape[1] != m.width:
                    raise DecompositionMismatchError(
                        f"the recurrent state is {send.shape[1]} wide but the dependency pattern declares "
                        f"time_width={m.width}.")
                recv = self._rows(m, send)
        if not outs:
            return z_Q.new_zeros(0, getattr(self.model, "out_channels", W)), lasts
        return torch.cat(outs, 0).index_select(0, rounds[0]["inverse"]), lasts

    def outputs(self) -> Tensor:
        """``[|Q_r|, H]`` model outputs of this rank's time-owned nodes
        (``layout.Q``, gid order), before the head."""
        self.comm.start(requires_grad=torch.is_grad_enabled())
        if self.runner is not None:
            return self.runner.outputs()
        if self.windows is not None and torch.is_grad_enabled():
            h_Q = self._windowed_outputs()
        else:
            inits = [self.h0] + [None] * (self.model.num_blocks - 1)  # h0 enters the first block, as forward_fused
            h_Q, _ = self._blocks(self.x_S, inits)
        readout = getattr(self.model, "readout", None)  # a user's module around the cell: its per-node part
        if readout is not None:
            h_Q = readout(h_Q, self.signal.x.index_select(0, self.layout.Q).to(device=h_Q.device, dtype=h_Q.dtype))
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
                        init = init.index_copy(0, c.recv_seq, self._rows(c.maps[b], rows[:c.num_send]))
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

    def _apply_head(self, out: Tensor) -> Tensor:
        return self.head(out) if self.head is not None else out

    def _link_logits(self, pred: Tensor) -> Tensor:
        """Logits of this rank's labelled pairs (``readout`` exchange of the
        endpoints owned elsewhere, then the model's ``link_logits`` or a dot
        product)."""
        table = pred.flatten(1) if pred.dim() > 1 else pred.unsqueeze(1)
        far = table.new_zeros(sum(self.readout.recv_splits), table.shape[1])
        table = torch.cat([table, self._exchange_into(self.readout, table, far)], 0)
        fn = getattr(self.model, "link_logits", None)
        if fn is not None:
            return fn(table, self.label_src_idx, self.label_dst_idx)
        return (table.index_select(0, self.label_src_idx) * table.index_select(0, self.label_dst_idx)).sum(-1)

    def compute_loss(self) -> Tensor:
        """This rank's share :math:`L_r` of the epoch loss (global
        normalizers; :math:`\\sum_r L_r` is the single-process loss), with
        autograd, connected to every collective of the pass."""
        out = self.outputs()
        kind = self.loss_kind
        pred = self._apply_head(out)
        if kind == "bce_link":
            logits = self._link_logits(pred)
            per = F.binary_cross_entropy_with_logits(logits, self.label.to(logits.dtype), reduction="none")
            loss = snapshot_mean_part(per, self.label_time, self.label_counts, self.snapshot_reduction)
        else:
            y = self.target_Q
            if kind == "ce":
                per = F.cross_entropy(pred, y.long(), reduction="none")
            else:
                if pred.dim() == 2 and pred.shape[1] == 1 and y.dim() == 1:
                    pred = pred.squeeze(1)
                diff = pred - y.to(pred.dtype)
                per = diff * diff if kind == "mse" else diff.abs()
                if per.dim() > 1:
                    per = per.reshape(per.shape[0], -1).mean(1)
            loss = snapshot_mean_part(per, self.time_Q, self.node_counts, self.snapshot_reduction)
        return self.comm.seal(loss)

    # ------------------------------------------------------------------ epoch
    def _sync_gradients(self) -> None:
        """Sum the gradients of the replicated parameters over ranks (one flat
        all-reduce after the backward; a parameter no rank produced a
        gradient for keeps ``grad=None``, as on one process)."""
        if self.world_size == 1:
            return
        ps = self.params
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in ps]
                         + [torch.tensor([float(p.grad is not None) for p in ps], dtype=self.dtype, device=self.device)])
        t0 = time.perf_counter()
        dist.all_reduce(flat, group=self.group)
        self.comm.seconds += time.perf_counter() - t0
        self.comm.bytes[(-1, "grad_sync", "grad_sync", "fwd")] += flat.numel() * flat.element_size()
        o = 0
        for i, p in enumerate(ps):
            n = p.numel()
            has = bool(flat[flat.numel() - len(ps) + i] > 0)
            p.grad = flat[o:o + n].view_as(p).clone() if has else None
            o += n

    def train_epoch(self) -> float:
        """One full-batch epoch on every rank; returns the global loss (the
        same float on every rank)."""
        t0 = time.perf_counter()
        self.comm.reset_counters()
        self.model.train()
        if self.head is not None:
            self.head.train()
        self.optimizer.zero_grad(set_to_none=True)
        if self.stale is not None:
            self.stale.start_epoch()
        self._stale_on = True
        try:
            loss = self.compute_loss()
        finally:
            self._stale_on = False
        loss.backward()
        self._recv_store = {}
        self._sync_gradients()
        self.optimizer.step()
        if self.runner is not None:
            self.model.detach_carried()
        self.comm_seconds.append(self.comm.seconds)  # before the loss report below: training traffic only
        self.epoch_seconds.append(time.perf_counter() - t0)
        total = loss.detach().reshape(1).clone()
        dist.all_reduce(total, group=self.group)
        if self.stale is not None:
            self.stale.end_epoch(float(total))
        return float(total)

    @torch.no_grad()
    def evaluate(self) -> float:
        """The global loss in eval mode (BatchNorm running statistics), no
        gradients."""
        with eval_mode(self.model, self.head):
            loss = self.compute_loss().detach().reshape(1).clone()
        dist.all_reduce(loss, group=self.group)
        return float(loss)

    @torch.no_grad()
    def link_scores(self) -> tuple[Tensor, Tensor]:
        """Eval-mode logits and labels of the labelled pairs whose source this
        rank time-owns (``loss="bce_link"``): ``([L_r], [L_r])``. Every pair
        is on exactly one rank; gather them for a global metric such as AUC."""
        if self.loss_kind != "bce_link":
            raise ModelInputError("loss", f"is {self.loss_kind!r}.", "link_scores needs loss='bce_link'.")
        with eval_mode(self.model, self.head):
            logits = self._link_logits(self._apply_head(self.outputs()))
        return logits, self.label.to(logits.dtype)

    @torch.no_grad()
    def predict(self) -> Tensor:
        """Eval-mode outputs (after the head) of *all* vertex-time nodes,
        ``[N, *]`` in vertex-time node order, the same on every rank."""
        with eval_mode(self.model, self.head):
            pred = self._apply_head(self.outputs())
        full = pred.new_zeros((self.layout.sg.num_nodes,) + tuple(pred.shape[1:]))
        full.index_copy_(0, self.layout.Q.to(pred.device), pred)
        dist.all_reduce(full, group=self.group)  # every row is non-zero on one rank only: exact
        return full

    # ---------------------------------------------------------------- traffic
    def _sum_counter(self, pred: Callable[[tuple], bool]) -> int:
        return int(sum(v for k, v in self.comm.bytes.items() if pred(k)))

    def traffic(self) -> dict:
        r"""Bytes of the last epoch, summed over ranks (a collective: call it on
        every rank), next to the plan's prediction.

        Returns:
            dict: ``measured`` and ``predicted`` (bytes per kind: the plan's
            ``spatial``, ``temporal``, ``redistribution``, ``readout`` and
            their ``total``; measured also has ``stale_meta``, the stale
            cache's masks, included in its ``total``, and ``norm``, the BatchNorm
            statistics, and ``grad_sync``, the gradient all-reduce, which the
            plan does not predict); ``exchanges`` (one dict per exchange with
            ``block``, ``phase``, ``kind``, ``measured_forward``,
            ``measured_backward``, ``predicted_forward``,
            ``predicted_backward``); ``load`` (``measured`` and ``predicted``
            bytes moved once at set-up); ``temporal_rounds``; ``collectives``
            (issued in the last epoch, all ranks).
        """
        rows = [(e.block, e.phase, e.kind) for e in self.plan if not e.static]
        vals = []
        for key in rows:
            vals += [self.comm.bytes.get(key + ("fwd",), 0), self.comm.bytes.get(key + ("bwd",), 0)]
        extra = [self._sum_counter(lambda k: k[2] == "norm"), self._sum_counter(lambda k: k[2] == "grad_sync"),
                 self.load_bytes_measured, self.comm.calls, self._sum_counter(lambda k: k[2] == "stale_meta")]
        t = torch.tensor(vals + extra, dtype=torch.float64)
        dist.all_reduce(t, group=self.group)
        t = t.long().tolist()
        measured = {k: 0 for k in ("spatial", "temporal", "redistribution", "readout")}
        predicted = dict(measured)
        exchanges = []
        for i, key in enumerate(rows):
            e = self.plan.exchange(key[0], key[1])
            mf, mb = t[2 * i], t[2 * i + 1]
            measured[key[2]] += mf + mb
            predicted[key[2]] += e.forward_bytes + e.backward_bytes
            exchanges.append({"block": key[0], "phase": key[1], "kind": key[2], "measured_forward": mf,
                              "measured_backward": mb, "predicted_forward": e.forward_bytes,
                              "predicted_backward": e.backward_bytes})
        n = len(vals)
        measured["stale_meta"] = t[n + 4]  # the stale cache's masks (and global-D all-reduces); 0 when exact
        measured["total"] = sum(measured.values())
        predicted["total"] = sum(predicted.values())
        measured["norm"], measured["grad_sync"] = t[n], t[n + 1]
        return {"measured": measured, "predicted": predicted, "exchanges": exchanges,
                "load": {"measured": t[n + 2], "predicted": self.plan.load_bytes()},
                "temporal_rounds": self.plan.temporal_rounds(), "collectives": t[n + 3]}

    def halo_rows(self) -> dict:
        r"""Halo rows each rank loads per spatial layer, summed over ranks:
        ``fused`` -- once per rank (this runtime); ``per_chunk`` -- once per
        chunk (:math:`\sum_c |\mathrm{halo}(c)|`, in-neighbours outside the
        chunk, same-rank ones included: unfused chunk execution); ``None``
        for partitions without chunks."""
        if self.runner is not None:
            raise ModelInputError("path", "is 'blackbox'.", "halo_rows() describes the decomposed path's fused halo.")
        sg = self.layout.sg
        fused = int(halo_keys(self.partition.owner, sg.spatial_edge_index, sg.num_nodes).numel())
        chunk = self.partition.chunk
        per_chunk = None if chunk is None else int(halo_keys(chunk, sg.spatial_edge_index, sg.num_nodes).numel())
        return {"fused": fused, "per_chunk": per_chunk}
