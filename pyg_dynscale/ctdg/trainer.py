r"""``MemoryTrainer``: PyG's ``examples/tgn.py`` training and evaluation loop
on the user's own ``TGNMemory``, embedding module and link predictor.

One process with ``parallelism=(1, 1, 1)`` reproduces the example loop step
for step (tested in float64 to 1e-9 against a copy of the loop): the same
split (``TemporalData.train_val_test_split(0.15, 0.15)``), the same batches
(``TemporalDataLoader(batch_size)``: consecutive events), the same random
stream (``torch.manual_seed(seed)`` once at construction; per pass the one
``int64`` draw with which a ``DataLoader`` iterator seeds itself; per batch
``torch.randint(min_dst, max_dst + 1, (B,))`` with the bounds of the split
being walked, drawn from the CPU generator and moved to the device so that
one seed gives the same negatives on any device (the example draws them on
the device); the attention dropout), memory and neighbour loader reset at
each epoch, the same loss (``BCEWithLogits`` on positives plus negatives) and
the same epoch loss :math:`\sum_b \ell_b |b| / E_{train}`.

What is faster than the example, without changing a number: the per-node
message store of ``TGNMemory`` is replaced by index ranges
(:mod:`~pyg_dynscale.ctdg.store`), batches are index ranges instead of
``TemporalData`` slices, and the epoch loss is summed on the device. Every
index list of a step (the batch's nodes, their last neighbours, their stored
messages, a partitioned memory's requests and split sizes) is computed on
the host from host copies of the stream (:mod:`~pyg_dynscale.ctdg.host`),
and the device runs gathers and scatters of host-known shapes: a training
step reads nothing back from the device (one read per epoch, the loss).
"""
from __future__ import annotations

import gc
import os
import warnings
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import TemporalData
from torch_geometric.nn.models.tgn import LastNeighborLoader

from ..distributed.transport import resolve_transport
from ..errors import DynScaleError, ModelInputError, UnsupportedOptionError
from ..training.finite import check_batch_losses
from ..training.gradients import DelayedGradients, ShareModule, wrap_ddp
from ..training.options import build_optimizer
from ..training.ranks import agree, bind_device, check_gpu_sharing
from ..training.surface import BaseTrainer, Metrics
from ..training.traffic import TrafficReport
from .evaluation import SplitEvaluator, uniform_negatives
from .event_traffic import EventTraffic
from .events import check_events, split_ranges
from .host import HostStream
from .memory_copies import MemoryCopies
from .memory_placement import Channel, PartitionedMemory
from .models import time_encoder_warning
from .microbatch import MicroBatchPipeline
from .lr_scaling import scaled_lr
from .event_exchange import EventExchange
from .options import check_combinations, check_event_placement, check_modules, check_options, legacy_positionals
from .owned_index import OwnedIndex
from ..data.mapped import load_events_store
from .rank_events import EventHolders, RankEvents, RankHost, StoreEvents
from .rank_state import RankCopies, RankMemoryState
from .parallel import RankGroups, local_world_size, world
from .partitioned_fetch import PartitionedFetch, build_placement
from .prefetch import NeighborPrefetcher, OwnersLookahead
from .schedule import EventSchedule, LocalBatch, Step, check_layout
from .scoring import LinkScorer, module_parameters
from .service import MemoryService
from .static import StaticMemory
from .step_context import StepContext
from .store import MemoryState
from .stream_checkpoint import StreamCheckpoint
from .write_back import WriteBack

__all__ = ["MemoryTrainer"]


class MemoryTrainer(BaseTrainer):
    r"""Train a memory-based temporal GNN (PyG's TGN modules) on an event stream.

    .. code-block:: python

        data = load_jodie_csv("wikipedia.csv")
        model = TGN(data.num_nodes, data.msg.size(-1), memory_dim=100, time_dim=100, embedding_dim=100)
        with MemoryTrainer(model, data, batch_size=200, lr=1e-4, num_neighbors=10) as trainer:
            for epoch in range(50):
                loss = trainer.train_epoch()
                val = trainer.evaluate("val")  # {"loss": ..., "ap": ..., "auc": ..., "mrr": ...}
            test = trainer.evaluate()          # the test split

    **Per batch** (events :math:`[a, b)`, negatives :math:`n_e`): the last
    ``num_neighbors`` neighbours of the batch's nodes (PyG's
    ``LastNeighborLoader``), their memory (updated with the stored messages in
    training, as ``TGNMemory.forward``), plus the static memory if any, then
    ``z = gnn(x, last_update, edge_index, t[e_id], msg[e_id])``, logits
    ``link_pred(z[src], z[dst])`` and ``link_pred(z[src], z[neg])``, loss
    :math:`\mathrm{BCE}(\text{pos}, 1) + \mathrm{BCE}(\text{neg}, 0)`; then
    memory and neighbour loader take the batch's events, backward, Adam step.

    **Evaluation** (:meth:`evaluate`) is the example's ``test()`` plus the
    loss and the MRR (:mod:`~pyg_dynscale.ctdg.evaluation`).

    **Parallelism** ``(i, j, k)`` (DistTGL §3.2) follows the steps of
    :class:`~pyg_dynscale.ctdg.schedule.EventSchedule` (mini-batch, epoch and
    memory parallelism: which trainer takes which events from which memory
    copy, with which negative set). Under a ``torch.distributed`` process group
    of :math:`i \cdot j \cdot k` processes each rank is one trainer
    (:mod:`~pyg_dynscale.ctdg.parallel`: DDP sums the gradients, the ranks of a
    memory copy all-gather their written rows); on one process every trainer
    runs serially (the emulation), with the same numbers. Per step, trainer
    :math:`t` contributes :math:`\ell_t |b_t| / (|B_g| \, j k)` to the loss
    (:math:`b_t` its local batch, :math:`B_g` its global batch), so the
    gradient of ``(i, 1, 1)`` is :math:`\sum_r (|b_r| / |B|) \nabla \ell_r`;
    every trainer reads its memory copy before any write of the step (the
    write-back barrier), writers' root nodes are written in trainer
    (chronological) order, then the copy takes the global batch's messages
    and neighbours. With :math:`i j k > 1` the attention dropout of trainer
    :math:`t` in step :math:`s` draws from ``torch.manual_seed(f(seed, epoch,
    s, t))`` inside ``torch.random.fork_rng`` (every process then draws what
    the emulation draws); negatives come from the global stream, ``j`` sets per
    global batch, drawn by every process. ``train_epoch`` returns
    :math:`\sum_t \ell_t |b_t| / \sum_t |b_t|`; :meth:`evaluate` uses memory
    copy 0 (rank 0's result on every rank).

    Args:
        model: an object with ``memory``, ``gnn``, ``link_pred`` (e.g.
            :class:`~pyg_dynscale.ctdg.TGN`), or ``None`` with the three given.
        data (TemporalData): the whole stream (split by time inside), or the path of an event
            store directory (:func:`~pyg_dynscale.data.mapped.save_events_store`; with
            ``event_placement="per_rank"`` under a process group each rank reads only its ranges
            from it, :class:`~pyg_dynscale.ctdg.rank_events.StoreEvents`).
        batch_size (int): events per (local) batch.
        lr (float): the learning rate (PyG's example: ``1e-4``).
        num_neighbors (int): ``LastNeighborLoader`` size.
        negatives (str): ``"uniform"`` (the example's draw; the only one implemented).
        seed (int, optional): ``torch.manual_seed(seed)`` once, after everything
            is built (the negatives and the dropout draw from the global stream
            then), and the base of the per-trainer dropout seeds; ``None``: the
            global stream as it is (per-trainer seeds from 0).
        parallelism (tuple): ``(i, j, k)``.
        static_memory: ``None``, ``"learnable"`` or a ``[num_nodes, d]``
            tensor (pre-trained, e.g. :func:`~pyg_dynscale.ctdg.pretrain_static_memory`);
            see :class:`~pyg_dynscale.ctdg.static.StaticMemory`.
        loss (str): ``"bce"`` (binary cross-entropy on the link logits of the
            positives and the negatives, the example's; the only one implemented).
        optimizer: ``"adam"`` (the example's, the default), ``"sgd"``, a
            :class:`torch.optim.Optimizer` subclass or a callable
            ``params -> Optimizer`` (:func:`~pyg_dynscale.training.build_optimizer`).
        device: where the modules train (``None``: where their parameters are;
            given, the modules are moved there).
        memory, gnn, link_pred: the three modules, when ``model`` is ``None``. The embedding
            encodes times with ``memory.time_enc`` in PyG's example and :class:`~pyg_dynscale.ctdg.TGN`
            (one module); an embedding holding a time encoder of its own (e.g. each module copied
            one by one) trains a second encoder apart from the memory's, a model that differs from
            PyG's from the first optimizer step: a :class:`UserWarning` says so
            (:func:`~pyg_dynscale.ctdg.models.time_encoder_warning`).
        val_ratio, test_ratio (float): the split.
        eval_seed (int): seed of every evaluation pass (the example's 12345).
        mrr_negatives (int): negatives per positive in the MRR (0: no MRR, ``nan``).
        memory_service (bool): serve the memory's reads and writes through a
            :class:`~pyg_dynscale.ctdg.service.MemoryService` thread (DistTGL
            §3.3): reads in the schedule's read phase, the write-back applied
            while the optimizer steps; the same numbers. One memory copy per
            process, ``j = 1``.
        prefetch (bool): look up the next step's neighbours on a thread
            (:class:`~pyg_dynscale.ctdg.prefetch.NeighborPrefetcher`) while
            this one finishes the step; the next step's negatives are then
            drawn before the optimizer step, so the attention dropout draws
            from per-trainer seeds as with ``i * j * k > 1`` (the same numbers
            as ``prefetch=False`` whenever ``i * j * k > 1``). ``j = 1``, one
            memory copy per process. With a partitioned placement the thread
            also organises the next step's dispatch and aggregation id lists
            (:meth:`~pyg_dynscale.ctdg.memory_placement.PartitionedMemory.organise_fetch`,
            :meth:`~pyg_dynscale.ctdg.memory_placement.PartitionedMemory.organise_aggregate`);
            not with ``micro_batches != 1``.
        dynamic_memory (bool): ``False`` feeds the embedding the static memory
            only (the pre-training of :func:`~pyg_dynscale.ctdg.pretrain_static_memory`).
        memory_placement (str): where the node memory lives (Sven's N&M
            placement, :mod:`~pyg_dynscale.ctdg.memory_placement`): ``"replicated"``
            (every rank a whole copy: DistTGL, DepCache; the default),
            ``"partitioned"`` (each rank stores the rows of the vertices it
            owns; a local batch fetches the rows it reads from their owners
            and sends its root nodes' updated rows back to them, one row per
            occurrence: DepComm) or ``"sven"`` (the same, each distinct vertex
            once per exchange: Sven's redundancy-free organisation). Training
            gives the same numbers bit for bit; evaluation the same to
            rounding (each owner applies the flush to its own rows).
            Parallelism ``(i, 1, 1)``, one trainer per rank, without the
            memory service; checkpoints hold each owner's rows
            (:meth:`state_dict`). :meth:`traffic` has the bytes.
        partition: the owner of every vertex for a partitioned placement:
            ``"range"``, ``"interval"``, ``"flexbicut"``
            (:func:`~pyg_dynscale.ctdg.memory_partition.partition_vertices`;
            flexbicut balances the requests of
            :func:`~pyg_dynscale.ctdg.presample.trainer_requests`) or a
            ``[num_nodes]`` int64 tensor of ranks; ``None`` (the default):
            ``"range"``. Given with ``memory_placement="replicated"`` it is a
            :class:`~pyg_dynscale.errors.ModelInputError` (a replicated memory
            has no owners).
        gradient_sync (str): ``"sync"`` (the default: each step applies its
            own summed gradient) or ``"delayed"`` (Sven's asynchronous
            all-reduce, Pipe-SGD of width two: step :math:`s` applies step
            :math:`s - 1`'s summed gradient, :math:`\omega_{s+1} = \omega_s -
            \alpha \nabla f(\omega_{s-1})`, while its own all-reduce runs;
            step 0 applies nothing and the epoch ends with one more optimizer
            step applying the last gradient; **not exact** w.r.t. ``"sync"``;
            see :class:`~pyg_dynscale.training.gradients.DelayedGradients`). The
            one-process emulation applies the same delayed rule.
        micro_batches: ``memory_placement="sven"`` only: split each local
            batch into this many micro-batches whose dispatch runs on a
            thread while the previous one computes (Sven §7.3; the same
            numbers as 1 with dropout off), or ``"auto"`` (Sven's
            :math:`n = \lfloor (A \cdot bs + B)/S \rfloor` fitted on the first
            steps); see :mod:`~pyg_dynscale.ctdg.microbatch`.
        overlap_aggregation (bool): a partitioned placement under a process
            group: Sven §7.3's second pipeline level. A rank's root rows are
            computed right after its dispatch (with micro-batches: after the
            last micro-batch's forward), and the aggregation all-to-all that
            writes them to their owners runs on a thread over groups of its
            own (the rows on the default group's backend -- NCCL on GPUs --,
            the ids and counts on a gloo group) while this thread runs the
            temporal GNN layer, the loss and the backward (DDP's all-reduce
            on the default group); the write-back joins it. The same numbers
            bit for bit. One
            process: accepted, nothing changes (the emulated trainers'
            writes wait for every trainer's reads).
        event_placement (str): ``"auto"`` (the default), ``"whole"`` or ``"per_rank"``.
            ``"whole"``: every rank holds the whole stream, its neighbour loader and message
            index. ``"per_rank"`` (a partitioned placement under a process group): each rank holds
            the events of its trainer slices and its share of each evaluation batch,
            :mod:`~pyg_dynscale.ctdg.rank_events`, and the neighbour index and mailbox of the
            vertices it owns, :mod:`~pyg_dynscale.ctdg.owned_index`; the neighbourhoods and stored
            messages of other owners' vertices are fetched before each batch's memory dispatch,
            :mod:`~pyg_dynscale.ctdg.event_exchange`; the same numbers, with ``prefetch`` (the
            lookahead runs on the training thread,
            :class:`~pyg_dynscale.ctdg.prefetch.OwnersLookahead`), ``micro_batches`` and
            ``overlap_aggregation`` too. ``"auto"``: ``"per_rank"`` where it runs, else ``"whole"``
            (one process, a replicated memory, ``partition="flexbicut"``); an explicit
            ``"per_rank"`` with a replicated memory or flexbicut is an
            :class:`~pyg_dynscale.errors.UnsupportedOptionError`. :attr:`event_placement` and
            :meth:`traffic`'s ``"event_placement"`` name the placement in effect;
            :meth:`state_dict` holds each owner's part of the index, per rank.
        lr_scaling (str): the learning rate under mini-batch parallelism :math:`(i, j, k)`
            (DistTGL's remedy, :mod:`~pyg_dynscale.ctdg.lr_scaling`): ``"linear"`` (the default)
            trains with ``lr * i``, ``"sqrt"`` with ``lr * sqrt(i)``, ``"none"`` with ``lr``;
            :attr:`lr` is the rate in effect. ``i = 1``: ``lr``, bit for bit.

    Raises:
        ModelInputError: missing modules, a memory that is not a ``TGNMemory``,
            events that fail :func:`~pyg_dynscale.ctdg.events.check_events`,
            a message width other than the memory's, bad options.
        UnsupportedOptionError: a partitioned placement with ``j > 1``, ``k > 1``
            or the memory service; ``prefetch=True`` with ``micro_batches != 1``;
            a loss other than ``"bce"``; other negatives than ``"uniform"``.

    Under a process group, a bad set-up raises the same error on every rank.
    The options after ``data`` are keyword-only (passing ``batch_size`` ..
    ``static_memory`` positionally still works, with a :class:`DeprecationWarning`).
    """

    def __init__(
        self,
        model=None,
        data: Optional[TemporalData] = None,
        *args,
        batch_size: int = 200,
        lr: float = 1e-4,
        num_neighbors: int = 10,
        negatives: str = "uniform",
        seed: Optional[int] = 0,
        parallelism=(1, 1, 1),
        static_memory: Union[None, str, Tensor] = None,
        loss="bce",
        optimizer="adam",
        device=None,
        memory: Optional[torch.nn.Module] = None,
        gnn: Optional[torch.nn.Module] = None,
        link_pred: Optional[torch.nn.Module] = None,
        val_ratio: float = 0.15,
        test_ratio: float = 0.15,
        eval_seed: int = 12345,
        mrr_negatives: int = 49,
        dynamic_memory: bool = True,
        memory_service: bool = False,
        prefetch: bool = False,
        memory_placement: str = "replicated",
        partition: Union[None, str, Tensor] = None,
        gradient_sync: str = "sync",
        micro_batches: Union[int, str] = 1,
        overlap_aggregation: bool = False,
        event_placement: str = "auto",
        lr_scaling: str = "linear",
    ) -> None:
        if args:  # the old positional options, for one release
            batch_size, lr, num_neighbors, negatives, seed, parallelism, static_memory = legacy_positionals(
                args, batch_size=batch_size, lr=lr, num_neighbors=num_neighbors, negatives=negatives, seed=seed,
                parallelism=parallelism, static_memory=static_memory)
        self.rank, self.world_size = world()
        # ---------------- checks whose outcome may differ between ranks: agreed on before any collective
        error: Optional[DynScaleError] = None
        try:
            memory, gnn, link_pred = check_modules(model, memory, gnn, link_pred, data)
            self._configure(memory, gnn, link_pred, data, batch_size=batch_size, lr=lr, num_neighbors=num_neighbors,
                            negatives=negatives, seed=seed, parallelism=parallelism, static_memory=static_memory,
                            loss=loss, optimizer=optimizer, device=device, val_ratio=val_ratio,
                            test_ratio=test_ratio, eval_seed=eval_seed, mrr_negatives=mrr_negatives,
                            dynamic_memory=dynamic_memory, memory_service=memory_service, prefetch=prefetch,
                            memory_placement=memory_placement, partition=partition, gradient_sync=gradient_sync,
                            micro_batches=micro_batches, overlap_aggregation=overlap_aggregation,
                            event_placement=event_placement, lr_scaling=lr_scaling)
        except DynScaleError as exc:
            if self.world_size == 1:
                raise
            error = exc
        if self.world_size > 1:
            summary = None if error is not None else {
                "parallelism": repr(self.parallelism), "memory_placement": self.memory_placement,
                "batch_size": self.batch_size, "num_events": self.num_events, "num_nodes": self.memory.num_nodes,
                "dtype": str(self.msg.dtype), "device_type": self.device.type, "gradient_sync": gradient_sync,
                "event_placement": self.event_placement}
            agree(error, summary)  # over the host (gloo) group: no NCCL collective yet
            check_gpu_sharing(self.device)  # two ranks on one GPU over NCCL: our message, before NCCL's
            self._connect(overlap_aggregation)
        if memory_service:  # threads: only once nothing can fail any more
            self.service = self.write_back.service = MemoryService(self.memory.memory, self.memory.last_update)
        if prefetch:
            self.prefetcher = self.write_back.prefetcher = (
                OwnersLookahead(self.exchange) if self.exchange is not None else
                NeighborPrefetcher(self.memory.num_nodes, self.num_neighbors, "cpu"))
        if seed is not None:
            torch.manual_seed(seed)

    def _configure(self, memory, gnn, link_pred, data, *, batch_size, lr, num_neighbors, negatives, seed, parallelism,
                   static_memory, loss, optimizer, device, val_ratio, test_ratio, eval_seed, mrr_negatives,
                   dynamic_memory, memory_service, prefetch, memory_placement, partition, gradient_sync,
                   micro_batches, overlap_aggregation, event_placement="auto", lr_scaling) -> None:
        """Check the options and build everything this process holds (no collective)."""
        self.loss = check_options(negatives=negatives, loss=loss, batch_size=batch_size, num_neighbors=num_neighbors,
                                  mrr_negatives=mrr_negatives, lr=lr, seed=seed, gradient_sync=gradient_sync,
                                  overlap_aggregation=overlap_aggregation)
        self.batch_size, self.num_neighbors = batch_size, num_neighbors
        placed = check_event_placement(
            event_placement, memory_placement=memory_placement, partition=partition, prefetch=prefetch,
            micro_batches=micro_batches, overlap_aggregation=overlap_aggregation, world_size=self.world_size)
        per_rank = placed == "per_rank" and self.world_size > 1
        #: the event placement in effect (``"auto"`` resolved; one process holds the whole stream):
        #: ``"per_rank"`` -- this rank holds its events and its owned vertices' index -- or ``"whole"``
        self.event_placement = "per_rank" if per_rank else "whole"
        if isinstance(data, (str, os.PathLike)):  # an event store directory
            data = StoreEvents(data) if per_rank else load_events_store(data)
        if not per_rank:
            check_events(data, memory.num_nodes)
        msg_dim = data.msg_dim if isinstance(data, StoreEvents) else data.msg.size(-1)
        if msg_dim != getattr(memory, "raw_msg_dim", msg_dim):
            raise ModelInputError("data.msg", f"has {msg_dim} columns but the memory was built for "
                                  f"{memory.raw_msg_dim}.", "build TGNMemory / TGN with msg_dim=data.msg.size(-1).")
        if device is not None:
            for mod in (memory, gnn, link_pred):
                mod.to(device)
        self.memory, self.gnn, self.link_pred = memory, gnn, link_pred
        unshared = time_encoder_warning(memory, gnn)
        if unshared is not None and self.rank == 0:  # once per job, not once per rank
            warnings.warn(unshared, UserWarning, stacklevel=3)
        self.seed = seed
        self.dynamic_memory = bool(dynamic_memory)
        dev, dtype = memory.memory.device, memory.memory.dtype
        self.device = dev
        if self.world_size > 1:  # the training GPU is the current device before any collective (no communication)
            bind_device(dev)
        self.val_start, self.test_start, self.num_events = (
            data.split(val_ratio, test_ratio) if isinstance(data, StoreEvents) else split_ranges(data, val_ratio, test_ratio))
        if self.val_start == 0:
            raise ModelInputError("data", "leaves no training events after the split.", "give more events or smaller ratios.")
        if per_rank:
            # the owners' store takes the place of the module's [N, d] buffers (build_placement empties them,
            # their values unread): emptied before the events are read, so a rank's peak never holds both
            memory.memory = memory.memory.new_empty((0, memory.memory_dim))
            memory.last_update = memory.last_update.new_empty((0,))
        #: per rank: the events this rank holds (None: the whole stream)
        self.rank_events: Optional[RankEvents] = None
        if per_rank:
            holders = EventHolders(self.world_size, batch_size, (self.val_start, self.test_start, self.num_events))
            self.rank_events = RankEvents(data, holders.ranges(self.rank))
            self.rank_events.check(memory.num_nodes)
            self.msg = torch.zeros(0, msg_dim, dtype=dtype, device=dev)  # messages come from the owners' index
            self.host = RankHost(self.rank_events)
        else:
            #: ``[E, F]`` the raw messages, on the device (the only column of the stream the device reads whole)
            self.msg = data.msg.to(dev, dtype)
            #: the stream's index columns on the host: every index list of a step is made from them
            self.host = HostStream.of(data.src, data.dst, data.t)
        self.schedule = EventSchedule(self.val_start, self.batch_size, parallelism)
        self.parallelism = i, j, k = (self.schedule.i, self.schedule.j, self.schedule.k)
        if self.world_size > 1:
            check_layout(self.parallelism, self.world_size, local_world_size(self.world_size))
        self.static: Optional[StaticMemory] = None
        if static_memory is not None:
            self.static = StaticMemory(memory.num_nodes, memory.memory_dim, static_memory).to(dev, dtype)
        elif not self.dynamic_memory:
            raise ModelInputError("dynamic_memory", "is False without a static memory.", "give static_memory too.")
        self._row_bytes = memory.memory_dim * memory.memory.element_size() + memory.last_update.element_size()
        #: the bytes this rank moves (:class:`~pyg_dynscale.ctdg.event_traffic.EventTraffic`)
        self.bytes = EventTraffic()
        #: per rank: the owners' index and its exchanges (None: the whole stream's loader and stores)
        self.exchange: Optional[EventExchange] = None
        if per_rank:
            self.neighbors = None  # set with the placement below
        else:
            self.state = MemoryState(memory, self.host.src, self.host.dst, self.host.t, self.msg)
            # on the host: which neighbours a batch sees depends on the events only (and the CPU's
            # sort / topk ties are the reference loop's on the CPU)
            self.neighbors = LastNeighborLoader(memory.num_nodes, size=self.num_neighbors, device="cpu")
        self.optimizer_params = module_parameters((memory, gnn, link_pred, self.static))
        #: the learning rate the optimizer takes (``lr`` scaled for mini-batch parallelism, :mod:`.lr_scaling`)
        self.lr = scaled_lr(lr, lr_scaling, self.parallelism)
        self.optimizer = build_optimizer(optimizer, self.optimizer_params, self.lr)
        #: ``gradient_sync="delayed"``: the previous step's gradients (None: each step applies its own)
        self._delayed = DelayedGradients(self.optimizer_params) if gradient_sync == "delayed" else None
        self.criterion = torch.nn.BCEWithLogitsLoss()
        self.memory_placement = memory_placement
        #: a partitioned memory's owners' store (None: replicated)
        self.placement: Optional[PartitionedMemory] = build_placement(
            memory_placement, partition, memory=memory, parallelism=self.parallelism, rank=self.rank,
            world_size=self.world_size, memory_service=memory_service, host=self.host, val_start=self.val_start,
            batch_size=self.batch_size, num_neighbors=self.num_neighbors, ledger=self.bytes.collectives)
        if per_rank:
            p = self.placement
            index = OwnedIndex(p.owned, p.owner, self.rank, self.num_neighbors, msg_dim, dtype, dev)
            self.exchange = EventExchange(self.rank_events, self.host, holders, index, p, self.bytes.collectives)
            self.state = RankMemoryState(memory, self.exchange, self.msg)
            self.neighbors = self.exchange
        self.state.placement = self.placement
        self.scorer = LinkScorer(gnn, link_pred, self.static, self.dynamic_memory, self.state, self.neighbors,
                                 self.host, self.msg, self.bytes.local, self._row_bytes,
                                 edges=None if self.exchange is None else self.exchange.edge_columns)
        #: dispatch and aggregation of a partitioned memory (None: replicated)
        self.fetch = None if self.placement is None else PartitionedFetch(self.placement, self.host, self.neighbors,
                                                                          self.state, self.exchange)
        micro_batches = check_combinations(self.parallelism, self.world_size, memory_placement=memory_placement,
                                           micro_batches=micro_batches, prefetch=prefetch,
                                           memory_service=memory_service, overlap_aggregation=overlap_aggregation)
        #: Sven's micro-batch pipeline (``micro_batches != 1``), else None
        self._micro = MicroBatchPipeline(self.placement, micro_batches) if micro_batches != 1 else None
        #: trainers of the schedule this process runs (all of them on one process: the emulation)
        self.trainers = list(range(i * j * k)) if self.world_size == 1 else [self.rank]
        held = list(range(k)) if self.world_size == 1 else [self.rank // (i * j)]
        #: every memory copy this process holds, the live one in the module's buffers
        self.copies = (MemoryCopies if self.exchange is None else RankCopies)(
            self.state, self.neighbors, self.host, [memory, gnn, link_pred, self.static], held, self.placement)
        self.evaluator = SplitEvaluator(self.copies, self.scorer, self.fetch, self.schedule, self.host,
                                        (self.val_start, self.test_start, self.num_events), eval_seed, mrr_negatives,
                                        self.criterion)
        self.stream_checkpoint = StreamCheckpoint(self.copies, self.bytes, self.placement, self.rank, dev,
                                                  lambda epoch: self._rng_seed(-1, -1, epoch))
        #: the memory service's and the prefetcher's threads (started once the set-up is agreed)
        self.service: Optional[MemoryService] = None
        self.prefetcher: Optional[NeighborPrefetcher] = None
        #: the end of each step for a memory copy (its rows, messages and neighbours)
        self.write_back = WriteBack(self.copies, self.host, i * j, self.bytes.local, self.bytes.collectives,
                                    self._row_bytes, self.fetch, self.exchange)
        #: the process groups of this rank (None: one process)
        self.groups: Optional[RankGroups] = None
        self._ddp = None
        self._ctx: Optional[StepContext] = None  # the current epoch's step context
        self.epoch = 0
        #: ``[steps]`` float64: each step's loss in the last epoch (stays on the device)
        self.batch_losses: Optional[Tensor] = None

    def _connect(self, overlap_aggregation: bool) -> None:
        """The process groups, the placement's channels and DDP (every rank, in the same order)."""
        self.groups = RankGroups.connect(self.parallelism, self.rank, self.world_size, self.device, overlap_aggregation)
        self.write_back.groups = self.groups
        if self.placement is not None:
            self.placement.connect(Channel(self.groups.host, resolve_transport("auto", self.device)))
            self.fetch.channel = self.groups.aggregation
        if self.exchange is not None:  # the negatives' ranges, from every rank's share of each split
            self.exchange.agree_bounds([(0, self.val_start), (self.val_start, self.test_start),
                                        (self.test_start, self.num_events)])
        share = ShareModule(self._share, memory=self.memory, gnn=self.gnn, link_pred=self.link_pred, static=self.static)
        self._ddp = wrap_ddp(share, self.bytes.collectives, delayed=self._delayed,
                             setup_params=[p for p in self.optimizer_params if p.requires_grad])

    @property
    def micro_batches_chosen(self) -> Optional[int]:
        """The micro-batches per step Sven's pipeline uses; 1 without the pipeline; with
        ``micro_batches="auto"`` the number chosen at the first step (``None`` before it)."""
        return self._micro.n if self._micro is not None else 1

    @property
    def _host_group(self):
        """The group host values go over (``None``: one process)."""
        return None if self.groups is None else self.groups.host

    # ------------------------------------------------------------------ pieces
    @property
    def modules(self) -> torch.nn.ModuleDict:
        """The trained modules in one container (``memory``, ``gnn``, ``link_pred``, ``static``
        if any): their FQNs name the optimizer's state in :meth:`state_dict` and in a checkpoint."""
        mods = {"memory": self.memory, "gnn": self.gnn, "link_pred": self.link_pred}
        if self.static is not None:
            mods["static"] = self.static
        return torch.nn.ModuleDict(mods)

    @property
    def mrr_negatives(self) -> int:
        """Negatives per positive in evaluation's MRR (settable)."""
        return self.evaluator.mrr_negatives

    @mrr_negatives.setter
    def mrr_negatives(self, value: int) -> None:
        self.evaluator.mrr_negatives = value

    @property
    def eval_seed(self) -> int:
        """The seed of every evaluation pass (settable)."""
        return self.evaluator.eval_seed

    @eval_seed.setter
    def eval_seed(self, value: int) -> None:
        self.evaluator.eval_seed = value

    @property
    def prefetched(self) -> dict:
        """Partitioned placement with the prefetcher: local batches whose ``dispatch`` /
        ``aggregation`` id lists came from the prefetch thread."""
        return self.fetch.prefetched if self.fetch is not None else {"dispatch": 0, "aggregation": 0}

    def _rng_seed(self, iteration: int, trainer: int, epoch: Optional[int] = None) -> int:
        """The dropout seed of one trainer's local batch (``i * j * k > 1``): a function of
        (seed, epoch, iteration, trainer), so every process draws what the emulation draws."""
        x = self.seed or 0
        for v in (self.epoch if epoch is None else epoch, iteration, trainer):
            x = (x * 1_000_003 + v) % (1 << 62)
        return x

    # ------------------------------------------------------------------ training
    def _share(self, lb: LocalBatch) -> Tensor:
        r"""Trainer ``lb.trainer``'s share of the step loss,
        :math:`\ell_t \, |b_t| / (|B_g| \, j k)` (``lb.batch_start``..``batch_end`` = :math:`B_g`),
        read from its memory copy as the schedule says; queues its root nodes'
        updated memory for the write-back when ``lb.writes_memory``. Under a
        process group it also adds :math:`0 \cdot \sum p` (every parameter in the
        graph on every rank, for DDP)."""
        ctx = self._ctx
        zero = None
        if self._ddp is not None:
            zero = sum(p.sum() for p in self.optimizer_params if p.requires_grad) * 0.0
        if self._micro is not None:  # the micro-batch pipeline around the dispatch and the compute below
            out = self._micro.share(lb, ctx, self.fetch, self._share_compute, self.state, self.batch_size,
                                    self.world_size, self.device)
            if self.fetch.channel is not None and lb.writes_memory and lb.num_events:  # the merged rows are final
                self.fetch.post(lb.memory_copy, ctx)
            return out if zero is None else out + zero
        if self.fetch is not None:
            self.fetch.dispatch(lb, ctx)
        if lb.num_events == 0:
            return zero if zero is not None else torch.zeros((), dtype=torch.float64, device=self.device)
        self.copies.activate(lb.memory_copy)
        live = None
        if lb.negative_set > 0:  # epoch parallelism: the memory as it was before this positive set's write
            live = self.copies.snapshot()
            self.copies.restore(ctx.snapshots[(lb.memory_copy, lb.position)])
        neg = ctx.negatives_of(lb)
        if self.service is not None:  # the forward reads the memory: inside this trainer's read phase
            read_before = self.bytes.local["memory_read"]
            with self.service.reading(lb.trainer):
                out = self._share_compute(lb, neg, ctx)
                self.service.count_read((self.bytes.local["memory_read"] - read_before) // self._row_bytes)
        else:
            out = self._share_compute(lb, neg, ctx)
        if live is not None:
            self.copies.restore(live)
        return out if zero is None else out + zero

    def _share_compute(self, lb: LocalBatch, neg: Tensor, ctx: StepContext) -> Tensor:
        """:meth:`_share`'s reads and compute: the weighted loss, the queued write rows."""
        lookup = ctx.lookups.pop(lb.trainer, None)
        early = self.fetch is not None and self.fetch.channel is not None and lb.writes_memory
        if early:  # the memory update's output is final now: post the aggregation before the GNN layer
            self.write_back.queue(lb, ctx)
            if self._micro is None:
                self.fetch.post(lb.memory_copy, ctx)
        if ctx.fork:
            dev = [self.device] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=dev):
                torch.manual_seed(self._rng_seed(ctx.iteration, lb.trainer))
                pos_out, neg_out, _ = self.scorer.scores(lb.start, lb.end, neg, True, lookup)
        else:
            pos_out, neg_out, _ = self.scorer.scores(lb.start, lb.end, neg, True, lookup)
        loss = self.criterion(pos_out, torch.ones_like(pos_out))
        loss = loss + self.criterion(neg_out, torch.zeros_like(neg_out))
        ctx.loss_sum.add_(loss.detach().to(torch.float64) * lb.num_events)
        weight = lb.num_events / ((lb.batch_end - lb.batch_start) * self.parallelism[1] * self.parallelism[2])
        if weight != 1.0:
            loss = loss * weight
        if lb.writes_memory and not early:
            self.write_back.queue(lb, ctx)
        return loss

    def _draw_negatives(self, step: Step) -> None:
        """Every copy's negatives of ``step``: ``j`` sets per global batch from the global stream."""
        j = self.parallelism[1]
        lo, hi = self._ctx.bounds
        for c, q, _, a, b in step.fresh:  # every process draws every copy's negatives: one stream
            self._ctx.negatives[(c, q)] = uniform_negatives(lo, hi, j * (b - a)).view(j, b - a)

    def _prefetch(self, step: Step) -> None:
        """Queue the neighbour lookups of ``step``'s local batches (its negatives drawn, the events
        before it inserted): they run while this thread finishes the step before."""
        ctx = self._ctx
        for c in step.resets:
            if c in self.copies.copies:
                self.prefetcher.reset()
        for t in self.trainers:
            lb = step.local[t]
            if lb.num_events == 0:
                if self.exchange is not None:  # the owners' lookups are collectives: an empty batch takes part
                    ctx.next_lookups[t] = self.prefetcher.lookup(self.host.src[:0])
                continue
            neg = ctx.negatives_of(lb)
            n_id = torch.cat([self.host.src[lb.start:lb.end], self.host.dst[lb.start:lb.end], neg]).unique()
            # partitioned: the id lists too, from the mailbox this step's write-back left (queued after
            # it; the mailbox changes next at the next write-back, after the dispatch took the lists)
            then = None if self.fetch is None else self.fetch.then(bool(step.resets), lb.start, lb.end, neg)
            ctx.next_lookups[t] = self.prefetcher.lookup(n_id, then)

    def _train_step(self, step: Step, steps: list) -> Tensor:
        """One optimizer step of the schedule (``steps[step.iteration]``): every trainer's share
        forward and backward, the write-back, the optimizer step. Returns the step loss (a
        ``float64`` device scalar: nothing is read back)."""
        j = self.parallelism[1]
        self.optimizer.zero_grad()
        self._ctx = ctx = self._ctx.next_step(step.iteration)
        if self.prefetcher is None or step.iteration == 0:
            self._draw_negatives(step)
        if self.service is not None:
            if step.resets:
                self.service.drain()
            self.service.plan("R", [t for t in self.trainers if step.local[t].num_events])
            if step.fresh:
                self.service.plan("W", [-1])
        for c in step.resets:
            if c in self.copies.copies:
                self.copies.activate(c)
                self.copies.reset()
        if self.prefetcher is not None and step.iteration == 0 and self.exchange is None:  # the mirror starts as the loader
            nb = self.neighbors
            self.prefetcher.load(nb.neighbors, nb.e_id, nb.cur_e_id)
        if j > 1:
            for c, q, _, _, _ in step.fresh:
                if c in self.copies.copies:
                    self.copies.activate(c)
                    ctx.snapshots[(c, q)] = self.copies.snapshot()
            old = step.iteration - j + 1
            for key in [key for key in ctx.snapshots if key[1] < old]:
                del ctx.snapshots[key], ctx.negatives[key]
        step_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        for t in self.trainers:
            lb = step.local[t]
            if self._ddp is None and lb.num_events == 0:
                continue
            share = self._ddp(lb) if self._ddp is not None else self._share(lb)
            share.backward()
            step_loss = step_loss + share.detach().to(torch.float64)
        for c, _, _, a, b in step.fresh:  # after every read of the step: the barrier before write-back
            if c in self.copies.copies:
                self.write_back.apply(c, a, b, self._ctx)
        if self.prefetcher is not None and step.iteration + 1 < len(steps):
            nxt = steps[step.iteration + 1]
            self._draw_negatives(nxt)
            self._prefetch(nxt)
        if self._delayed is None:
            self.optimizer.step()
        else:
            self._delayed.step(self.optimizer)
        return step_loss

    def train_epoch(self) -> float:
        r"""One epoch of the schedule over the training events; returns
        :math:`\sum_t \ell_t |b_t| / \sum_t |b_t|` over every trainer's local
        batches (with ``(1, 1, 1)``: the example's ``train()``), the same
        float on every rank."""
        self._check_open()
        i, j, k = self.parallelism
        self.copies.begin_epoch()
        torch.empty((), dtype=torch.int64).random_()  # the DataLoader iterator's seed draw
        lo, hi = self.host.destination_bounds(0, self.val_start)
        self.bytes.begin_epoch()
        if self.placement is not None:
            self.placement.begin_epoch()
        if self.exchange is not None:
            self.exchange.begin_epoch()
        dev = self.device
        # with the prefetcher the next step's negatives are drawn before this step's optimizer step: the
        # dropout must not draw from the global stream in between (per-trainer seeds, as for i*j*k > 1)
        self._ctx = StepContext.start((lo, hi), i * j * k > 1 or self.prefetcher is not None, dev)
        steps = self.schedule.steps()
        losses = [self._train_step(step, steps) for step in steps]
        events = sum(lb.num_events for step in steps for lb in (step.local[t] for t in self.trainers))
        ctx = self._ctx
        if self._delayed is not None:  # the last all-reduce waited for, its gradient applied
            self._delayed.flush(self.optimizer)
        if self.service is not None:
            self.service.drain()
        self.batch_losses = torch.stack(losses)
        total = torch.stack([ctx.loss_sum, torch.tensor(float(events), dtype=torch.float64, device=dev)])
        if self._ddp is not None:
            import torch.distributed as dist

            dist.all_reduce(self.batch_losses)
            dist.all_reduce(total)
        # a non-finite step loss stops the run, on every rank alike (the same sums): training/finite.py
        check_batch_losses(self.batch_losses.tolist(), epoch=self.epoch, optimizer=self.optimizer,
                           local=losses if self._ddp is not None else None)
        self.bytes.end_epoch(ctx.roots, len(steps))
        self._ctx = None
        self.epoch += 1
        self.copies.end_epoch()
        return float(total[0] / total[1])

    def memory_copy(self, copy: int = 0) -> tuple[Tensor, Tensor]:
        """``(memory [N, d], last_update [N])`` of memory copy ``copy`` (clones), one this process holds.
        Partitioned: assembled from every owner's rows (a collective under a process group)."""
        return self.copies.copy(copy)

    def _check_open(self) -> None:
        if self.closed:
            raise ModelInputError("trainer", "is closed.", "build a new MemoryTrainer.")

    def _release(self) -> None:
        """Stop the memory service's and the prefetcher's threads (if any) and release the
        ``DistributedDataParallel`` wrapper while the process group exists (not at a later
        garbage collection, possibly during interpreter shutdown)."""
        if self._delayed is not None:  # no all-reduce left in flight
            self._delayed.wait()
        self._ddp = None
        gc.collect()
        if self.service is not None:
            self.service.close()
            self.service = self.write_back.service = None
        if self.prefetcher is not None:
            self.prefetcher.close()
            self.prefetcher = self.write_back.prefetcher = None

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, split: str = "test") -> Metrics:
        r"""Metrics of ``"test"`` (the default) or ``"val"``: ``loss`` (the training loss, BCE on
        the positive and negative logits, :math:`\sum_b \ell_b |b| / E_{split}`), ``ap``, ``auc``
        (means over batches) and ``mrr`` (:mod:`~pyg_dynscale.ctdg.evaluation`: the memory state
        each split starts from). Under a process group: memory copy 0's result on every rank."""
        self._check_open()
        out = self.evaluator.evaluate(split)
        if self._ddp is not None:  # memory copy 0's result (DistTGL evaluates the first memory process)
            import torch.distributed as dist

            box = [out]
            dist.broadcast_object_list(box, src=0, group=self._host_group)  # objects: never over NCCL
            out = box[0]
        return Metrics(out)

    # ------------------------------------------------------------------ bytes
    def traffic(self) -> TrafficReport:
        r"""Bytes of the last training epoch over every rank, measured at the collectives and
        predicted from the id lists (a collective under a process group: call it on every rank).

        Returns:
            TrafficReport: ``measured`` -- bytes handed to the collectives, by kind: ``dispatch``
            (memory + ``last_update`` rows served to other ranks' batches), ``requests`` (the ids
            asked of other owners), ``aggregation`` (id + row of each written root sent to its
            owner), ``counts`` (the ``[M]`` count vectors before each exchange), ``gather`` (the
            replicated write-back's all-gathers, the aggregation of ``"replicated"``), ``gradients``
            (DDP's all-reduce buffers) and ``total``; ``predicted`` -- the same kinds computed from
            the id lists (the ``[M, M]`` matrices of rows each trainer asks of / sends to each
            owner, gathered from every rank), the gradient buffers once per step; ``rank`` -- this
            rank's own ``measured`` / ``predicted`` (/ ``local``); partitioned: ``local`` (bytes of
            rows served from each rank's own store, not sent), ``redundancy`` (occurrences and
            distinct vertices of the dispatch and aggregation lists over all ranks and Sven's
            :math:`\eta_1`, :math:`\eta_2`: duplicated / all occurrences) and ``matrix`` (the
            ``[M, M]`` dispatch and aggregation row counts); ``event_placement``: the event
            placement in effect.
        """
        grad = sum(p.numel() * p.element_size() for p in self.optimizer_params if p.requires_grad)
        return self.bytes.report(placement=self.placement, gradient_bytes=grad, distributed=self._ddp is not None,
                                 parallelism=self.parallelism, rank=self.rank, world_size=self.world_size,
                                 group=self._host_group, exchange=self.exchange,
                                 row_width=self.memory.memory_dim * self.memory.memory.element_size() + 16,
                                 event_placement=self.event_placement)

    def stats(self) -> dict:
        """Bytes this process moved so far (memory rows read / written, all-gathers, gradients, DDP's
        set-up; the memory service's; a partitioned memory's exchanges, evaluation's as ``eval_*``).
        The last training epoch's bytes next to their prediction: :meth:`traffic`."""
        return self.bytes.stats(self.service, self.placement)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Everything a resumed run needs at an epoch boundary: ``{"modules": ..., "optimizer": ...,
        "stream": ...}`` (the stream part:
        :meth:`~pyg_dynscale.ctdg.stream_checkpoint.StreamCheckpoint.state_dict`, a flat
        ``{key: Tensor}``: every memory copy, the epoch, the random generators, the byte counters)."""
        return {"modules": self.modules.state_dict(), "optimizer": self.optimizer.state_dict(),
                "stream": self.stream_checkpoint.state_dict(self.epoch)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (of a trainer built with the same modules, data, parallelism
        and world size): the next :meth:`train_epoch` then draws and computes what the saved
        trainer's next epoch would have, bit for bit."""
        for key in ("modules", "optimizer", "stream"):
            if key not in state:
                raise ModelInputError("state", f"lacks {key!r}.", "give what MemoryTrainer.state_dict() returned.")
        self.modules.load_state_dict(state["modules"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch = self.stream_checkpoint.load_state_dict(state["stream"])

    def device_rng_keys(self) -> list:
        """The keys of ``state_dict()["stream"]`` that only a run on this kind of device writes."""
        return self.stream_checkpoint.device_rng_keys()

    def stream_state(self) -> dict:
        """Deprecated: ``state_dict()["stream"]``."""
        warnings.warn("MemoryTrainer.stream_state() is deprecated: use state_dict()['stream'] "
                      "(or state_dict() / load_state_dict() for the whole state).", DeprecationWarning, stacklevel=2)
        return self.stream_checkpoint.state_dict(self.epoch)

    def load_stream_state(self, state: dict) -> None:
        """Deprecated: ``load_state_dict({"modules": ..., "optimizer": ..., "stream": state})``."""
        warnings.warn("MemoryTrainer.load_stream_state() is deprecated: use load_state_dict() with the "
                      "state_dict() form {'modules', 'optimizer', 'stream'}.", DeprecationWarning, stacklevel=2)
        self.epoch = self.stream_checkpoint.load_state_dict(state)
