r"""The distributed trainer: one rank of a ``torch.distributed`` job, on any device.

:class:`DistributedTrainer` trains a dynamic GNN on one rank of a process
group whose world size is the partition's number of parts, full batch, as
DGC and :class:`~pyg_dynscale.runtime.FusedTrainer` do. It is thin: the
forward pass of the rank's share is an *engine* --

* :class:`~pyg_dynscale.distributed.decomposed_engine.DecomposedEngine`, the
  decomposed (DGC) path: structure encoder with halo exchanges, time encoder
  in recurrent rounds or attention merges, PSS-TS redistribution, windows
  under gradient checkpointing;
* :class:`~pyg_dynscale.distributed.snapshot_engine.SnapshotEngine`, the
  black-box path: the user's module once per snapshot on a local subgraph;

-- and the trainer adds what both share: the device and the
:mod:`transport <.transport>` to the collectives, the loss with global
normalizers (:mod:`pyg_dynscale.runtime.losses`, as ``FusedTrainer``), the
``readout`` exchange of link-label endpoints owned elsewhere, one backward
(every exchange returns the gradients of the rows it moved, in reverse
order), the sum of the replicated parameters' gradients over ranks and the
optimizer step. With the same initial parameters this computes what
``FusedTrainer`` computes on one process (the tests assert it in float64).

Set-up builds everything it indexes with on the host and moves it to the
device once (:meth:`DistributedTrainer.place`); an epoch then reads one
number back from the device: the loss :meth:`~DistributedTrainer.train_epoch`
returns (:meth:`~DistributedTrainer.train_step` returns it on the device).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
import torch.distributed as dist
from torch import Tensor

from ..data.tensor_maps import TensorMap, map_tensors, to_device
from ..errors import DynScaleError, ModelInputError, PartitionError, ShardError, UnsupportedOptionError
from ..nn.decomposed import FusedGraph, check_initial_state
from ..nn.snapshot_model import SnapshotModel
from ..partition.plan import CommunicationPlan
from ..runtime.fused import eval_mode, resolve_targets
from ..runtime.losses import SnapshotMean, check_loss, link_row_losses, row_losses
from ..runtime.metrics import node_metrics
from ..runtime.paths import as_signal, data_argument, resolve_model
from ..runtime.time_blocks import check_windowable
from ..runtime.trainer_state import load_trainer_state, seed_generators, trainer_state
from ..training import BaseTrainer, ByteLedger, Metrics, TrafficReport, build_optimizer
from ..training.finite import check_batch_losses, signal_graphs
from ..training.gradients import all_reduce_flat
from ..training.options import OptimizerSpec, renamed_keyword
from .decomposed_engine import DecomposedEngine
from .evaluation import (LaterWindow, gathered_link_metrics, later_window_evaluator, summed_metrics,
                         window_link_scores)
from .exchange import Communicator
from .fusion_groups import check_fusion_groups
from .local import ExchangeMap, halo_keys, positions_in
from .plan_traffic import plan_traffic
from .rank_plan_exchange import build_rank_plan
from .setup_checks import agree, bind, check_gpu_sharing, check_pattern, resolve_device, setup_summary
from .blackbox_shards import BlackBoxShard, check_blackbox_shard
from .shard_setup import (check_sequences, check_shard_options, check_shard_path, check_shard_pattern, shard_summary,
                          shard_targets)
from .shards import Shard, agree_on_shard, read_shard
from .snapshot_engine import SnapshotEngine
from .stale import StaleCache, StaleConfig
from .time_windows import RankWindow
from .transport import resolve_transport

__all__ = ["DistributedTrainer", "FUSION_MODES", "RankTargets"]

FUSION_MODES = ("full", "none")


@dataclass
class RankTargets:
    """What this rank's loss is computed against, built on the host and moved
    to the device once.

    Attributes:
        mean (SnapshotMean): the reduction of this rank's per-row losses with
            global normalizers.
        target (Tensor, optional): ``[|Q_r|, ...]`` node targets of the rows
            this rank computes.
        label (Tensor, optional): ``[L_r]`` labels of the pairs whose source
            this rank computes (``bce_link``).
        src_idx, dst_idx (Tensor, optional): rows of the pairs' endpoints in
            the rank's output table (received endpoints after the local rows).
        readout (ExchangeMap, optional): the endpoints owned elsewhere.
        pair_ids (Tensor, optional): ``[L_r]`` the pairs' indices among all
            ``num_pairs`` labelled pairs (``bce_link``; gathers the logits of
            every rank for AUC and AP).
    """

    mean: SnapshotMean
    target: Optional[Tensor] = None
    label: Optional[Tensor] = None
    src_idx: Optional[Tensor] = None
    dst_idx: Optional[Tensor] = None
    readout: Optional[ExchangeMap] = None
    pair_ids: Optional[Tensor] = None
    num_pairs: int = 0


class DistributedTrainer(BaseTrainer):
    r"""Full-batch training of a decomposed dynamic GNN across the ranks of a
    ``torch.distributed`` process group (DGC's runtime).

    Call it on every rank with the same arguments, inside an initialized
    process group whose world size equals ``partition.num_parts``. The
    trainer surface of :mod:`pyg_dynscale.training` (:meth:`train_epoch`,
    :meth:`evaluate` ``-> Metrics``, :meth:`traffic` ``-> TrafficReport``,
    :meth:`state_dict` / :meth:`load_state_dict`, :meth:`close` and ``with``).

    Args:
        model: a :class:`~pyg_dynscale.nn.DecomposedModule` (``TGCN``,
            ``MPNNLSTM``, ``MPNNLSTMDGC``, ``DySAT``), a supported PyGT
            object (wrapped with :func:`~pyg_dynscale.nn.adapt`), or any
            per-snapshot module ``model(x, edge_index, edge_weight[, h[, c]])``
            (PyGT's other cells, a ``RecurrentGCN``) on the black-box path:
            called unchanged on each rank's local subgraph, with one state
            exchange per snapshot (docs/blackbox.md). Its parameters are
            broadcast from rank 0.
        data: the whole training signal (every rank passes the same one),
            a :class:`~pyg_dynscale.data.DynamicGraphSignal` or a PyGT signal.
            ``signal=`` is its deprecated keyword. (:meth:`from_shards` passes
            the rank's :class:`~.shards.Shard` here, with no partition.)
        partition: a :class:`~pyg_dynscale.partition.Partition` of ``signal``.
        head: optional row-wise module applied to every output row.
        loss: ``"mse"``, ``"mae"``, ``"ce"`` or ``"bce_link"`` (as
            :class:`~pyg_dynscale.runtime.FusedTrainer`).
        optimizer: ``"adam"`` (default, as DGC's and PyGT's loops),
            ``"sgd"``, a :class:`torch.optim.Optimizer` subclass or a callable
            ``params -> Optimizer``, built identically on every rank with
            ``lr`` (:func:`~pyg_dynscale.training.build_optimizer`).
        lr: the learning rate (default 0.01).
        seed: seeds the global random generators (CPU and CUDA) of rank
            ``r`` with ``seed + r`` at construction, i.e. what dropout in the
            model or head draws (the ranks compute different rows, so they
            draw independently); the trainer draws nothing else (full batch).
            The initial parameters are rank 0's either way. ``None``
            (default): the generators as they are.
        device: training device (default: the model's): ``"cpu"``, or
            ``"cuda:LOCAL_RANK"`` (one GPU per rank over NCCL, or several
            ranks sharing a GPU through the staged exchange). A GPU becomes
            the process's current device (``torch.cuda.set_device``) at the
            start of set-up, before any collective.
        backend: how rows reach the collectives: ``"auto"`` (direct when the
            group's backend moves tensors of the device -- gloo: CPU, NCCL:
            CUDA --, staged for a CUDA model over gloo), ``"direct"`` or
            ``"staged"`` (device rows through page-locked host buffers over
            gloo: several ranks on one GPU); :mod:`.transport`.
        fusion: ``"full"`` -- all of a rank's chunks as one block-diagonal
            graph (each halo row fetched once per rank and layer); ``"none"``
            -- one structure-encoder call per snapshot with its own halo
            exchange per layer, as the PyGT baselines run; a number -- a
            memory budget in bytes: consecutive snapshots are fused into one
            call while the largest rank's estimated activation memory stays
            within it (:func:`.decomposed_engine.snapshot_groups`; ranges are the same on every
            rank, so halo dependencies line up).
        fusion_groups: what a memory budget groups: ``"snapshots"`` (the
            ranges above); ``"shared-halo"`` -- the rank's chunk pieces
            (partial snapshots), fused greedily by most shared halo rows
            while a group fits the budget (DGC §5.1.1,
            :func:`.fusion_groups.plan_shared_halo`), the structure encoders
            run group by group, layer by layer (:mod:`.layerwise`);
            ``"time-order"`` and ``"per-chunk"`` -- the same execution with
            the baselines' groups (whole snapshots in time order; every
            chunk piece alone), for measurements. Needs ``fusion=<bytes>``;
            models with BatchNorm are refused.
        input_halo: ``"load"`` -- block 0's raw-feature halo moved once at
            set-up; ``"exchange"`` -- every epoch.
        h0: ``[S, state_width]`` initial state per temporal sequence; on
            the black-box path one ``[S, W_c]`` tensor per state component
            of the module (a tensor for one state, a tuple such as
            ``(h, c)`` for several).
        snapshot_reduction: ``"mean"`` or ``"sum"`` over snapshots.
        group: process group (default: the world). Set-up is a collective
            over the group; over the **world** too when the group's backend
            is NCCL and its gloo twin for host values does not exist yet
            (:func:`~pyg_dynscale.distributed.groups.host_group`: made on every
            rank, reused by later trainers and evaluators on the same ranks):
            with subgroups, every rank builds its trainer at the same point.
        check: self-check PyGT adapters at wrap time.
        stale: the stale embedding cache (DGC §5.2) used while training:
            ``None``/``"off"`` (exact), ``"drift"`` / ``"drift:<eps>"`` (the
            recommended error budget), ``"static:<c>"``, ``"printed"``,
            ``"intent"``, ``"ramp"``, ``"rise"``, ``"adaptive"`` (deprecated) or a
            :class:`~pyg_dynscale.distributed.stale.StaleConfig` (kinds,
            backward, scope). Evaluation and prediction stay exact. On the
            black-box path it covers the state exchanges (``"temporal"``,
            ``"spatial"``) and the link ``"readout"`` (docs/stale.md).
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
        reuse: ReInc's reuse on the black-box path for PyGT's ``GConvGRU``,
            ``GConvLSTM``, ``GCLSTM``, ``TGCN`` and ``DCRNN``
            (:mod:`~pyg_dynscale.runtime.step_reuse`): per rank, the input
            basis of every local subgraph once, the input projections of all
            snapshots in one product per epoch, per snapshot only the
            state-dependent part (the state exchanges are unchanged; equal to
            calling the cell up to float rounding). ``False``: call the module
            on every snapshot. No effect on the decomposed path.

    Example::

        # torchrun --nproc-per-node 4 train.py
        dist.init_process_group("nccl")              # or "gloo" for CPU ranks
        model = model.to(f"cuda:{os.environ['LOCAL_RANK']}")  # the trainer binds this GPU before any NCCL call
        part = partition(signal, "pgc", dist.get_world_size(), model.dependency_pattern())
        trainer = DistributedTrainer(model, signal, part, head=torch.nn.Linear(32, 1), loss="mse")
        for epoch in range(100):
            loss = trainer.train_epoch()   # the global loss, the same on every rank
        trainer.traffic()                  # measured vs predicted bytes of the last epoch
    """

    def __init__(
        self,
        model: torch.nn.Module,
        data: Any = None,
        partition: Any = None,
        *,
        head: Optional[torch.nn.Module] = None,
        loss: str = "mse",
        optimizer: OptimizerSpec = "adam",
        lr: float = 0.01,
        seed: Optional[int] = None,
        device: Union[str, torch.device, None] = None,
        fusion: str = "full",
        fusion_groups: str = "snapshots",
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
        backend: str = "auto",
        reuse: bool = True,
        **deprecated: Any,
    ) -> None:
        t_setup = time.perf_counter()
        deprecated = renamed_keyword("DistributedTrainer", deprecated, "signal", "data")
        signal = data_argument("DistributedTrainer", data, deprecated)
        #: this rank's :class:`~.shards.Shard` (:meth:`from_shards`), or ``None`` on the whole-signal path
        self.shard: Optional[Union[Shard, BlackBoxShard]] = (signal if isinstance(signal, (Shard, BlackBoxShard))
                                                              else None)
        if partition is None and self.shard is None:
            raise TypeError("DistributedTrainer() missing 1 required argument: 'partition'")
        # what the evaluator of a later window is built with (evaluate(signal, partition): .evaluation)
        self._options = dict(fusion=fusion, input_halo=input_halo, target=target, link_index=link_index,
                             link_label=link_label, h0=h0, snapshot_reduction=snapshot_reduction, group=group,
                             depth=depth, backend=backend, reuse=reuse)
        self._later: Optional[tuple] = None
        if not isinstance(reuse, bool):  # the same on every rank: raised before any collective
            raise ModelInputError("reuse", f"is {reuse!r}.", "pass True or False.")
        if not dist.is_available() or not dist.is_initialized():
            raise ModelInputError("torch.distributed", "is not initialized.",
                                  "call torch.distributed.init_process_group first (torchrun does it for you), "
                                  "or pyg_dynscale.distributed.spawn in tests.")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        seed_generators(None if seed is None else seed + self.rank)
        #: epochs trained (restored by :meth:`load_state_dict`)
        self.epoch = 0
        if self.shard is None:
            signal = as_signal(signal)
        self.model = resolve_model(model, path, depth, check)
        #: ``"decomposed"`` or ``"blackbox"``
        self.path = "blackbox" if isinstance(self.model, SnapshotModel) else "decomposed"
        if self.shard is not None:  # the same outcome on every rank (the model, the options and meta.json)
            check_shard_path(model, self.path, self.shard, loss, h0)
        self.head = head
        check_loss(loss, snapshot_reduction)
        self.loss_kind, self.snapshot_reduction = loss, snapshot_reduction
        # ---------------- options of one path only
        config = StaleConfig.parse(stale)
        check_fusion_groups(fusion_groups, fusion, self.model)
        budget = None
        if self.path == "blackbox":
            if fusion != "full" or input_halo != "load":
                raise ModelInputError("fusion" if fusion != "full" else "input_halo",
                                      f"is {fusion if fusion != 'full' else input_halo!r}, a decomposed-path option; "
                                      f"{type(model).__name__} runs on the black-box path, which calls it once per "
                                      "snapshot.", "leave fusion and input_halo at their defaults.")
            fusion = "blackbox"
        else:
            if checkpoint_every is not None:
                if fusion != "full":
                    raise ModelInputError("fusion", f"is {fusion!r} with checkpoint_every={checkpoint_every!r}; a "
                                          "checkpointed window runs its snapshots as one fused call.",
                                          "leave fusion='full'.")
                check_windowable(self.model)
            if isinstance(fusion, (int, float)) and not isinstance(fusion, bool):
                if not fusion > 0:
                    raise ModelInputError("fusion", f"is a memory budget of {fusion!r} bytes.",
                                          "give a positive number of bytes.")
                budget, fusion = float(fusion), "budget"
            elif fusion not in FUSION_MODES:
                raise ModelInputError("fusion", f"is {fusion!r}.", f"use one of {FUSION_MODES} or a memory budget in bytes.")
        self.fusion, self.fusion_budget = fusion, budget
        #: the stale cache (``None``: the exact path)
        self.stale: Optional[StaleCache] = StaleCache(config) if config.enabled else None
        # ---------------- checks whose outcome may differ between ranks: agreed on before any other collective
        error: Optional[DynScaleError] = None
        tg = None
        try:
            self.device, self.dtype = resolve_device([self.model, head], device, group)
            # the training GPU is this process's current device before any NCCL collective: NCCL makes its
            # communicators on the current device (an unbound rank r > 0 would use cuda:0)
            bind(self.device)
            #: how rows reach the collectives (:mod:`.transport`)
            self.transport = resolve_transport(backend, self.device, group)
            if isinstance(self.shard, BlackBoxShard):  # the module probed on the shard's recorded snapshot shape
                check_blackbox_shard(self.model, self.shard, self.dtype)
                tg = shard_targets(self.shard, loss, target)
            elif self.shard is not None:  # the shard's world size was checked when it was read
                self.pattern = check_shard_pattern(self.model, self.shard, self.dtype, input_halo)
                tg = shard_targets(self.shard, loss, target)
            else:
                if partition.num_parts != self.world_size:
                    raise PartitionError("partition.num_parts", f"is {partition.num_parts} but the process group "
                                         f"has {self.world_size} ranks.",
                                         "partition into world-size parts (one part per rank).")
                partition.check_signal(signal)
                if signal.device.type != "cpu":
                    signal = signal.to("cpu")  # every rank holds the whole signal on the host and builds its share
                if signal.x is None:
                    raise ModelInputError("signal.x", "is missing.", "give the signal node features.")
                if self.path == "decomposed":
                    self.pattern = check_pattern(self.model, partition, self.dtype)
                tg = resolve_targets(signal, loss, target, link_index, link_label, self.dtype)
        except DynScaleError as exc:
            error = exc
        summary = None
        if error is None:
            options = dict(loss=self.loss_kind, fusion=f"{self.fusion}:{self.fusion_budget}:{fusion_groups}",
                           dtype=self.dtype, stale=self.stale.config.describe() if self.stale is not None else "off",
                           device=self.device, transport=self.transport)
            summary = (shard_summary(self.shard, [self.model, head], **options) if self.shard is not None
                       else setup_summary(signal, partition, [self.model, head], **options))
        # object collectives over the group's host (gloo) twin, made here on every rank of the world when the
        # group is NCCL (groups.host_group): none of them touches NCCL, so two ranks on one GPU get our error
        agree(error, summary, group)
        check_gpu_sharing(self.device, group)
        self.transport.prepare()  # the host group made by the agreement (no new group, no communication)
        # a trainer built from shards holds neither the whole signal nor the partition
        self.signal, self.partition = (None, None) if self.shard is not None else (signal, partition)
        self.comm = Communicator(group, self.device, self.dtype, transport=self.transport)
        if self.stale is not None:
            self.stale.transport = self.transport
        link_pairs = (tg.label_src, tg.label_dst) if loss == "bce_link" else None
        t0 = time.perf_counter()
        if isinstance(self.shard, BlackBoxShard):  # the rank's local subgraphs and its slice of the StatePlan
            self.readout_width = 1
            self.engine = SnapshotEngine(self.model, self.shard.signal, None, self.comm, self.device, self.dtype,
                                         check=False, reuse=reuse, plan=self.shard.plan)
        elif self.shard is not None:
            self.readout_width = self._head_width() if loss == "bce_link" else 0
            if loss == "bce_link" and self.readout_width != self.shard.meta["readout_width"]:
                raise ShardError(f"the shards were written with readout_width={self.shard.meta['readout_width']} "
                                 f"but a row after this head is {self.readout_width} wide. Write them with "
                                 f"readout_width={self.readout_width}.")  # the same on every rank: no hang
            self.plan = self.shard.plan_for(loss)
            if h0 is not None:
                check_sequences(h0, self.shard.meta["num_sequences"], self.model.state_width)
            self.engine = DecomposedEngine(self.model, None, None, self.pattern, self.plan, self.comm, None,
                                           self.dtype, input_halo=input_halo, h0=h0, shard=self.shard)
        elif self.path == "blackbox":
            self.readout_width = 1
            self.engine: Union[DecomposedEngine, SnapshotEngine] = SnapshotEngine(
                self.model, signal, partition, self.comm, self.device, self.dtype, check=check,
                checkpoint_every=checkpoint_every, link_pairs=link_pairs, readout_width=self._blackbox_head_width,
                reuse=reuse, h0=h0, stale=self.stale)
            if loss == "bce_link":
                self.readout_width = self._blackbox_head_width(self.model)
        else:
            self.readout_width = self._head_width() if loss == "bce_link" else 0
            self.global_graph = FusedGraph.from_signal(signal)
            if checkpoint_every is None:  # each rank builds only its own lists (one exchange of request lists)
                self.plan = build_rank_plan(signal, partition, self.pattern, group=group, input_halo=input_halo,
                                            link_pairs=link_pairs, readout_width=self.readout_width or 1)
            else:  # checkpointed windows plan each window over the whole signal
                self.plan = CommunicationPlan.build(signal, partition, self.pattern, input_halo=input_halo,
                                                    link_pairs=link_pairs, readout_width=self.readout_width or 1)
            if h0 is not None:
                check_initial_state(h0.detach().cpu(), self.global_graph, self.model.state_width)
            self.engine = DecomposedEngine(self.model, signal, partition, self.pattern, self.plan, self.comm,
                                           self.global_graph, self.dtype, fusion=fusion, budget=budget,
                                           fusion_groups=fusion_groups,
                                           input_halo=input_halo, h0=h0,
                                           checkpoint_every=checkpoint_every, stale=self.stale)
        if self.path == "blackbox":
            self.plan = self.engine.plan
        self._host_targets = self._rank_targets(tg, loss)
        self.place(to_device(self.device))
        # static input halo: moved once, counted as load bytes
        self.comm.start(requires_grad=False)
        if self.path == "decomposed":
            self.engine.load_inputs(self.device)
        if self.shard is not None:
            self.shard.release_inputs()  # x_S holds them now
        self.load_seconds = time.perf_counter() - t0
        self.load_bytes_measured = int(sum(self.comm.bytes.values()))
        self.comm.reset_counters()
        # ---------------- replicated parameters: rank 0's, and one optimizer per rank
        self.params = list(self.model.parameters()) + (list(head.parameters()) if head is not None else [])
        for m in [self.model] + ([head] if head is not None else []):
            for t in list(m.parameters()) + list(m.buffers()):
                self.transport.broadcast_(t.data, 0)
        self.optimizer = build_optimizer("adam" if optimizer is None else optimizer, self.params, lr)
        #: bytes the gradient all-reduce hands to the collectives (counted there: :func:`.all_reduce_flat`)
        self.gradient_bytes = ByteLedger(("grad_sync",))
        #: wall seconds of each training epoch on this rank, and the part spent in collectives
        self.epoch_seconds: list[float] = []
        self.comm_seconds: list[float] = []
        self.setup_seconds = time.perf_counter() - t_setup

    @classmethod
    def from_shards(cls, model: torch.nn.Module, directory: str, *, head: Optional[torch.nn.Module] = None,
                    loss: str = "mse", lr: float = 0.01, group: Optional[Any] = None,
                    **options: Any) -> "DistributedTrainer":
        r"""A trainer whose rank reads only its own shard of ``directory``
        (written by :func:`~pyg_dynscale.distributed.write_shards`): the
        shard set's ``meta.json`` and ``rank-<r>/shard.pt``. No rank
        materializes the whole signal or plan: a rank's host memory is its
        part plus its halo (:mod:`.shards`). Training, losses, gradients,
        parameters and the traffic report equal the whole-signal trainer's.

        Call it on every rank (a collective). Every rank raises
        :class:`~pyg_dynscale.errors.ShardError` naming the rank and the
        cause when any rank's shard is missing, corrupt, of another write or
        cut for another world size or dependency pattern.

        Args:
            model: a :class:`~pyg_dynscale.nn.DecomposedModule` or a PyGT
                model with an adapter (the decomposed path), or the
                per-snapshot module the shards were cut for (black-box
                shards, :mod:`.blackbox_shards`: ``path="auto"`` then runs
                the black-box path).
            directory: the shard directory.
            head, loss, lr, group: as the constructor.
            **options: the constructor's other keywords. Those that need the
                whole signal raise
                :class:`~pyg_dynscale.errors.UnsupportedOptionError`:
                ``fusion`` other than ``"full"``, ``fusion_groups``,
                ``checkpoint_every``, ``stale``, a path other than the one
                the shards were cut for, and on black-box shards ``h0`` and
                ``loss="bce_link"``. ``loss="bce_link"`` on the decomposed
                path needs shards written with a ``readout_width``.
        """
        check_shard_options(model, loss, options)  # argument checks: the same outcome on every rank
        if not dist.is_available() or not dist.is_initialized():
            raise ModelInputError("torch.distributed", "is not initialized.",
                                  "call torch.distributed.init_process_group first (torchrun does it for you), "
                                  "or pyg_dynscale.distributed.spawn in tests.")
        shard, error = None, None
        try:
            shard = read_shard(directory, dist.get_rank(group), dist.get_world_size(group))
        except ShardError as exc:
            error = exc
        agree_on_shard(error, group)  # every rank stops when one could not read its part
        if isinstance(shard, BlackBoxShard) and options.get("path", "auto") == "auto":
            options["path"] = "blackbox"  # shards cut for a per-snapshot module: its path (PyGT's TGCN has both)
        return cls(model, shard, head=head, loss=loss, lr=lr, group=group, **options)

    # ------------------------------------------------------------------ set-up
    def _head_width(self) -> int:
        H = int(getattr(self.model, "out_channels", 0) or getattr(self.model, "hidden_channels", 0) or 1)
        if self.head is None:
            return H
        with torch.no_grad():
            return int(self.head(torch.zeros(1, H, dtype=self.dtype, device=self.device)).reshape(1, -1).shape[1])

    def _blackbox_head_width(self, model: SnapshotModel) -> int:
        """Elements of one output row after the head (the readout row width)."""
        width = int(math.prod(model.output_shape)) if model.output_shape else 1
        if self.head is None:
            return width
        with torch.no_grad():
            out = self.head(torch.zeros((1,) + tuple(model.output_shape), dtype=self.dtype, device=self.device))
        return int(out.reshape(1, -1).shape[1])

    def _rank_targets(self, tg: Any, loss: str) -> RankTargets:
        """This rank's targets and loss normalizers, on the host."""
        Q = self.engine.Q
        if self.shard is not None:  # the rank's rows and pairs, and the global counts, from the shard
            sh = self.shard
            if loss != "bce_link":
                q_time = sh.q_time if isinstance(sh, BlackBoxShard) else sh.nodes.take("time", Q)
                mean = SnapshotMean(q_time, torch.tensor(sh.meta["nodes_per_snapshot"]),
                                    self.snapshot_reduction)
                return RankTargets(mean=mean, target=tg.target)  # stored in Q's order
            mine, num_pairs = sh.pairs["id"], int(sh.meta["num_pairs"])
            src, dst, label = tg.label_src, tg.label_dst, tg.label  # the shard holds this rank's pairs only
            mean = SnapshotMean(tg.label_time, torch.tensor(sh.meta["pair_counts"]), self.snapshot_reduction)
            local_d = torch.isin(dst, Q)
        else:
            T = self.signal.num_snapshots
            if loss != "bce_link":
                time_all = self.signal.supergraph().time
                mean = SnapshotMean(time_all.index_select(0, Q), torch.bincount(time_all, minlength=T),
                                    self.snapshot_reduction)
                return RankTargets(mean=mean, target=tg.target.index_select(0, Q))
            # the black-box path has one owner per node; the decomposed path computes losses on the time owner
            town = self.partition.owner if self.path == "blackbox" else self.partition.temporal_owner
            mine = (town[tg.label_src] == self.rank).nonzero().flatten()
            src, dst, label, num_pairs = tg.label_src[mine], tg.label_dst[mine], tg.label[mine], int(tg.label.numel())
            mean = SnapshotMean(tg.label_time[mine], torch.bincount(tg.label_time, minlength=T),
                                self.snapshot_reduction)
            local_d = town[dst] == self.rank
        ex = self.plan.exchange(0 if self.path == "blackbox" else self.plan.pattern.num_blocks - 1, "readout")
        readout = ExchangeMap.build(ex, self.rank, Q, None)
        readout.recv_idx = torch.arange(readout.recv_gid.numel())  # received rows in arrival order
        didx = torch.empty_like(dst)
        didx[local_d] = torch.searchsorted(Q, dst[local_d])
        far = (~local_d).nonzero().flatten()
        didx[far] = Q.numel() + positions_in(readout.recv_gid, dst[far])
        return RankTargets(mean=mean, label=label.to(self.dtype), src_idx=torch.searchsorted(Q, src),
                           dst_idx=didx, readout=readout, pair_ids=mine, num_pairs=num_pairs)

    def place(self, fn: TensorMap) -> None:
        """Build the device copies of every host-side structure with ``fn``
        (set-up calls it with :func:`~pyg_dynscale.data.tensor_maps.to_device`):
        the engine's layouts and inputs, the targets and normalizers."""
        self.engine.place(fn)
        self.targets: RankTargets = map_tensors(self._host_targets, fn)
        self._Q_device = fn(self.engine.Q)

    # ------------------------------------------------------------------ what tests and reports read
    @property
    def layout(self) -> Any:
        """The rank's layout (device copy on the decomposed path)."""
        return self.engine.layout

    @property
    def windows(self) -> Optional[list[RankWindow]]:
        """The checkpointed windows of this rank (``checkpoint_every``; decomposed path), else ``None``."""
        return self.engine.windows

    @property
    def groups(self) -> Optional[list]:
        """The snapshot ranges of the structure-encoder calls (``fusion`` ``"none"`` / a budget), else ``None``."""
        return self.engine.groups

    @property
    def runner(self) -> Any:
        """The black-box path's step loop (``None`` on the decomposed path)."""
        return getattr(self.engine, "runner", None)

    # ------------------------------------------------------------------ forward
    def outputs(self) -> Tensor:
        """``[|Q_r|, H]`` model outputs of the rows this rank computes (its
        time-owned nodes, gid order), before the head."""
        self.comm.start(requires_grad=torch.is_grad_enabled())
        return self.engine.outputs()

    def _apply_head(self, out: Tensor) -> Tensor:
        return self.head(out) if self.head is not None else out

    def _link_logits(self, pred: Tensor) -> Tensor:
        """Logits of this rank's labelled pairs (``readout`` exchange of the
        endpoints owned elsewhere, then the model's ``link_logits`` or a dot
        product)."""
        tg = self.targets
        table = pred.flatten(1) if pred.dim() > 1 else pred.unsqueeze(1)
        m = tg.readout
        send = table.index_select(0, m.send_idx)
        if self.engine.stale_active and self.stale is not None and self.stale.applies(m.key[2]):  # training only
            far = self.stale.exchange(self.comm, "readout", m.key, send, m.send_splits, m.recv_splits)
        else:
            far = self.comm.exchange(m.key, send, m.send_splits, m.recv_splits)
        table = torch.cat([table, far.to(table.dtype)], 0)
        fn = getattr(self.model, "link_logits", None)
        if fn is not None:
            return fn(table, tg.src_idx, tg.dst_idx)
        return (table.index_select(0, tg.src_idx) * table.index_select(0, tg.dst_idx)).sum(-1)

    def compute_loss(self) -> Tensor:
        r"""This rank's share :math:`L_r` of the epoch loss (global
        normalizers; :math:`\sum_r L_r` is the single-process loss), with
        autograd, connected to every collective of the pass."""
        pred = self._apply_head(self.outputs())
        tg = self.targets
        if self.loss_kind == "bce_link":
            per = link_row_losses(self._link_logits(pred), tg.label)
        else:
            per = row_losses(self.loss_kind, pred, tg.target)
        return self.comm.seal(tg.mean(per))

    # ------------------------------------------------------------------ epoch
    def _sync_gradients(self) -> None:
        """Sum the gradients of the replicated parameters over ranks (one flat
        all-reduce after the backward; a parameter no rank produced a
        gradient for keeps ``grad=None``, as on one process). The row of
        has-a-gradient flags is reduced on the host (:meth:`.Transport.all_reduce_host`)."""
        if self.world_size == 1:
            return
        t0 = time.perf_counter()
        all_reduce_flat(self.params, self.group, self.gradient_bytes, all_reduce=self.transport.all_reduce,
                        all_reduce_host=self.transport.all_reduce_host, kind="grad_sync")
        self.comm.seconds += time.perf_counter() - t0

    def train_step(self) -> Tensor:
        """One full-batch epoch on every rank; returns this rank's share of
        the loss as a 0-dim device tensor (no host synchronization)."""
        self.comm.reset_counters()
        self.gradient_bytes.mark()
        self.model.train()
        if self.head is not None:
            self.head.train()
        self.optimizer.zero_grad(set_to_none=True)
        if self.stale is not None:
            self.stale.start_epoch()
        self.engine.stale_active = True
        try:
            loss = self.compute_loss()
        finally:
            self.engine.stale_active = False
        loss.backward()
        self.engine.after_backward()
        self._sync_gradients()
        self.optimizer.step()
        self.engine.after_step()
        return loss.detach()

    def train_epoch(self) -> float:
        """One full-batch epoch on every rank; returns the global loss (the
        same float on every rank)."""
        t0 = time.perf_counter()
        loss = self.train_step()
        self.comm_seconds.append(self.comm.seconds)  # before the loss report below: training traffic only
        total = float(self.transport.all_reduce(loss.reshape(1)))
        self.epoch_seconds.append(time.perf_counter() - t0)  # the loss read back waited for the device
        # one batch per epoch: a non-finite loss stops the run on every rank (the same sum)
        sig = self.signal
        check_batch_losses([total], epoch=self.epoch, optimizer=self.optimizer, local=[loss], group=self.group,
                           model=self.model, graphs=None if sig is None else lambda: signal_graphs(sig))
        if self.stale is not None:
            self.stale.end_epoch(total)
        self.epoch += 1
        return total

    def _later_window(self, signal: Any, partition: Any, continue_state: bool) -> LaterWindow:
        """The evaluator of a later window (:mod:`.evaluation`), kept for the
        last (signal, partition) asked for."""
        if self.shard is not None:
            raise UnsupportedOptionError("data", "(a later window) needs the whole training signal to continue "
                                         "the state from; a trainer built from shards holds its own part only.",
                                         "evaluate the later window with a trainer built from the signal, or "
                                         "call evaluate() without data for the training shards.")
        key = (signal, partition, continue_state)
        if self._later is None or any(a is not b for a, b in zip(self._later[0], key)):
            self._later = (key, later_window_evaluator(self, signal, partition, continue_state))
        return self._later[1]

    @torch.no_grad()
    def evaluate(self, data: Any = None, partition: Any = None, *, continue_state: bool = True,
                 **deprecated: Any) -> Metrics:
        r"""Global metrics in eval mode (BatchNorm running statistics), no
        gradients (a collective: call it on every rank): a
        :class:`~pyg_dynscale.training.Metrics` with ``"loss"`` (the training
        loss function, global normalizers) and the loss's own name; for
        ``"mse"``/``"mae"`` both ``"mse"`` and ``"mae"`` (PyGT's per-snapshot
        mean, averaged over snapshots); for ``"bce_link"`` also ``"auc"`` and
        ``"ap"`` of every rank's pairs (each where both classes occur). The
        same on every rank; equal to :meth:`FusedTrainer.evaluate
        <pyg_dynscale.runtime.FusedTrainer.evaluate>` to float rounding.

        Args:
            data: ``None`` -- the training signal; or a later window (the
                test split: the snapshots right after the training signal).
                ``signal=`` is its deprecated keyword.
            partition: ``data``'s partition into the world size (needed
                with ``data``).
            continue_state: with ``data``: ``True`` -- each vertex starts
                ``data`` from the state it reached at the end of the
                training signal (one eval pass over both with the current
                parameters; every rank keeps its training rows and the
                states cross ranks through the runtime's temporal exchange:
                :mod:`.evaluation`); ``False`` -- from a zero state. Equal to
                :meth:`FusedTrainer.evaluate(signal, continue_state=...)
                <pyg_dynscale.runtime.FusedTrainer.evaluate>`.
        """
        if deprecated:
            deprecated = renamed_keyword("DistributedTrainer.evaluate", deprecated, "signal", "data")
            data = data_argument("DistributedTrainer.evaluate", data, deprecated, required=False)
        if data is not None:
            window = self._later_window(data, partition, continue_state)
            return window.trainer._metrics(window.pairs)
        with self.comm.counters_kept():  # traffic() stays the last training epoch's
            return self._metrics(None)

    def _metrics(self, pairs: Optional[Tensor]) -> Metrics:
        """:meth:`evaluate` of this trainer's signal (``pairs``: the
        ``[L_r]`` mask of the pairs a later window's evaluator reports)."""
        tg = self.targets
        with eval_mode(self.model, self.head):
            pred = self._apply_head(self.outputs())
            if self.loss_kind != "bce_link":
                return summed_metrics(node_metrics(self.loss_kind, pred, tg.target, tg.mean), self.transport)
            logits = self._link_logits(pred)
        loss = tg.mean(link_row_losses(logits, tg.label))
        out = summed_metrics({"loss": loss, "bce_link": loss}, self.transport)
        out.update(gathered_link_metrics(logits, tg.label, tg.pair_ids, tg.num_pairs, pairs, self.transport))
        return out

    @torch.no_grad()
    def link_scores(self, data: Any = None, partition: Any = None, *,
                    continue_state: bool = True, **deprecated: Any) -> tuple[Tensor, Tensor]:
        """Eval-mode logits and labels of the labelled pairs whose source this
        rank computes (``loss="bce_link"``): ``([L_r], [L_r])``. Every pair
        is on exactly one rank; gather them for a global metric such as AUC.
        With ``data`` (and its ``partition``), the pairs of that later
        window (``continue_state`` as :meth:`evaluate`)."""
        if deprecated:
            deprecated = renamed_keyword("DistributedTrainer.link_scores", deprecated, "signal", "data")
            data = data_argument("DistributedTrainer.link_scores", data, deprecated, required=False)
        if self.loss_kind != "bce_link":
            raise ModelInputError("loss", f"is {self.loss_kind!r}.", "link_scores needs loss='bce_link'.")
        if data is not None:
            return window_link_scores(self._later_window(data, partition, continue_state))
        with eval_mode(self.model, self.head), self.comm.counters_kept():
            logits = self._link_logits(self._apply_head(self.outputs()))
        return logits, self.targets.label.to(logits.dtype)

    @torch.no_grad()
    def predict(self, data: Any = None, partition: Any = None, *, continue_state: bool = True,
                **deprecated: Any) -> Tensor:
        """Eval-mode outputs (after the head) of *all* vertex-time nodes,
        ``[N, *]`` in vertex-time node order, the same on every rank; with
        ``data`` (and its ``partition``), those of that later window
        (``continue_state`` as :meth:`evaluate`; ``signal=`` is the
        deprecated keyword of ``data``)."""
        if deprecated:
            deprecated = renamed_keyword("DistributedTrainer.predict", deprecated, "signal", "data")
            data = data_argument("DistributedTrainer.predict", data, deprecated, required=False)
        if data is not None:
            window = self._later_window(data, partition, continue_state)
            return window.trainer.predict()[window.first_node:]
        with eval_mode(self.model, self.head), self.comm.counters_kept():
            pred = self._apply_head(self.outputs())
        lay = self.engine.host_layout
        full = pred.new_zeros(((lay.num_nodes if self.path == "blackbox" else lay.sg.num_nodes),) + tuple(pred.shape[1:]))
        full.index_copy_(0, self._Q_device, pred)
        return self.transport.all_reduce(full)  # every row is non-zero on one rank only: exact

    # ---------------------------------------------------------------- traffic
    def traffic(self) -> TrafficReport:
        r"""Bytes of the last training epoch, summed over ranks (a collective:
        call it on every rank), next to the plan's prediction. Evaluation and
        prediction passes of the training signal are not counted.

        Returns:
            TrafficReport: ``measured`` and ``predicted`` (bytes per kind: the plan's
            ``spatial``, ``temporal``, ``redistribution``, ``readout`` and
            their ``total``; measured also has ``stale_meta``, the stale
            cache's masks, included in its ``total``, and ``norm``, the BatchNorm
            statistics, and ``grad_sync``, the gradient all-reduce, which the
            plan does not predict and ``total`` leaves out, so that an exact
            run's measured ``total`` equals the predicted one); ``exchanges`` (one dict per exchange with
            ``block``, ``phase``, ``kind``, ``measured_forward``,
            ``measured_backward``, ``predicted_forward``,
            ``predicted_backward``); ``load`` (``measured`` and ``predicted``
            bytes moved once at set-up); ``temporal_rounds``; ``collectives``
            (issued in the last epoch, all ranks); :func:`.plan_traffic.plan_traffic`.
        """
        return plan_traffic(self.plan, self.comm.bytes, grad_bytes=self.gradient_bytes.since()["grad_sync"],
                            load_bytes=self.load_bytes_measured, calls=self.comm.calls,
                            all_reduce_host=self.transport.all_reduce_host)

    def halo_rows(self) -> dict:
        r"""Halo rows each rank loads per spatial layer, summed over ranks:
        ``fused`` -- once per rank (this runtime); ``per_chunk`` -- once per
        chunk (:math:`\sum_c |\mathrm{halo}(c)|`, in-neighbours outside the
        chunk, same-rank ones included: unfused chunk execution); ``None``
        for partitions without chunks."""
        if self.runner is not None:
            raise ModelInputError("path", "is 'blackbox'.", "halo_rows() describes the decomposed path's fused halo.")
        if self.shard is not None:
            raise UnsupportedOptionError("halo_rows", "needs the whole partition; a trainer built from shards "
                                         "holds its own part only.", "call it on a trainer built from the signal.")
        sg = self.engine.host_layout.sg
        fused = int(halo_keys(self.partition.owner, sg.spatial_edge_index, sg.num_nodes).numel())
        chunk = self.partition.chunk
        per_chunk = None if chunk is None else int(halo_keys(chunk, sg.spatial_edge_index, sg.num_nodes).numel())
        return {"fused": fused, "per_chunk": per_chunk}

    # ---------------------------------------------------------------- state
    def _carried_module(self) -> Optional[torch.nn.Module]:
        """The user's module on the black-box path (whose carried tensors the state saves), else ``None``."""
        return self.model.module if self.path == "blackbox" else None

    def state_dict(self) -> dict:
        r"""This rank's state, for a trainer built on the same rank from the
        same arguments to continue bit for bit
        (:mod:`~pyg_dynscale.runtime.trainer_state`): the model's and head's
        ``state_dict`` (the same on every rank), the optimizer's,
        :attr:`epoch`, this process's random generators, a black-box module's
        carried tensors and, with ``stale``, the stale cache under ``"stale"``
        (:meth:`.StaleCache.state_dict`). Not a collective."""
        state = trainer_state({"model": self.model, "head": self.head}, self.optimizer, self.epoch,
                              self.device, carried=self._carried_module())
        if self.stale is not None:
            state["stale"] = self.stale.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output of the same rank (this also
        sets the process's random generators). Not a collective."""
        if ("stale" in state) != (self.stale is not None):
            raise ModelInputError("state['stale']", "does not match the trainer's stale option.",
                                  "load a state saved by a trainer built with the same stale=.")
        self.epoch = load_trainer_state(state, {"model": self.model, "head": self.head}, self.optimizer,
                                        self.device, carried=self._carried_module(), owner="DistributedTrainer")
        if self.stale is not None:
            self.stale.load_state_dict(state["stale"])

    def _release(self) -> None:
        """Drop the evaluator of a later window (a trainer over the same
        group, closed with this one)."""
        if self._later is not None:
            self._later[1].trainer.close()
            self._later = None
