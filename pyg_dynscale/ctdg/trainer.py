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

import functools
import gc
import math
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import TemporalData
from torch_geometric.nn.models.tgn import LastNeighborLoader

from ..distributed.groups import bind_device, group_backend, helper_group, host_group, moves_host_tensors
from ..distributed.setup_checks import check_gpu_sharing
from ..distributed.transport import resolve_transport
from ..errors import ModelInputError
from ..runtime.metrics import average_precision, roc_auc
from .events import check_events, split_ranges
from .host import HostStream, host_to_device
from .parallel import DelayedGradients, Traffic, gather_rows, memory_groups, wrap_ddp, world
from .schedule import EventSchedule, LocalBatch, Step
from .prefetch import NeighborPrefetcher
from .placement import Channel, PartitionedMemory
from .microbatch import BackgroundCall, MicroBatchPipeline, check_micro_batches
from .service import MemoryService
from .static import StaticMemory
from .store import MemoryState, write_rows
from .trainer_placement import PlacementHooks
from .trainer_state import StreamState
from .trainer_traffic import TrafficReport

__all__ = ["MemoryTrainer"]

_MEMORY_PARTS = ("msg_s_module", "msg_d_module", "aggr_module", "time_enc", "gru", "memory", "last_update", "num_nodes")


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelInputError(name, f"is {value!r}.", "use an integer >= 1.")
    return value


def _unorganised(found: tuple) -> tuple:
    """A prefetched lookup without id lists (:meth:`~pyg_dynscale.ctdg.trainer_placement.PlacementHooks._dispatch`
    organises them)."""
    return found, None, None


def _negatives(lo: int, hi: int, size: int) -> Tensor:
    """``size`` destinations uniform in ``[lo, hi]``, drawn from the CPU generator (the same
    numbers on every device, so a CUDA run can be checked against a CPU one); they stay on the
    host, where the index lists are made."""
    return torch.randint(lo, hi + 1, (size,), dtype=torch.long)


class MemoryTrainer(PlacementHooks, StreamState, TrafficReport):
    r"""Train a memory-based temporal GNN (PyG's TGN modules) on an event stream.

    .. code-block:: python

        data = load_jodie_csv("wikipedia.csv")
        model = TGN(data.num_nodes, data.msg.size(-1), memory_dim=100, time_dim=100, embedding_dim=100)
        trainer = MemoryTrainer(model, data, batch_size=200, lr=1e-4, num_neighbors=10)
        for epoch in range(50):
            loss = trainer.train_epoch()
            val = trainer.evaluate("val")     # {"ap": ..., "auc": ..., "mrr": ...}
            test = trainer.evaluate("test")

    **Per batch** (events :math:`[a, b)`, negatives :math:`n_e`): the last
    ``num_neighbors`` neighbours of the batch's nodes (PyG's
    ``LastNeighborLoader``), their memory (updated with the stored messages in
    training, as ``TGNMemory.forward``), plus the static memory if any, then
    ``z = gnn(x, last_update, edge_index, t[e_id], msg[e_id])``, logits
    ``link_pred(z[src], z[dst])`` and ``link_pred(z[src], z[neg])``, loss
    :math:`\mathrm{BCE}(\text{pos}, 1) + \mathrm{BCE}(\text{neg}, 0)`; then
    memory and neighbour loader take the batch's events, backward, Adam step.

    **Evaluation** (:meth:`evaluate`) is the example's ``test()``:
    ``torch.manual_seed(eval_seed)`` (the example's 12345), batches of
    ``batch_size``, one uniform negative per event; AP and AUC are computed per
    batch on the sigmoid scores and averaged over batches (the example's
    ``average_precision_score`` / ``roc_auc_score``, here
    :func:`~pyg_dynscale.runtime.metrics.average_precision` /
    :func:`~pyg_dynscale.runtime.metrics.roc_auc`). **MRR** (not in the
    example): each positive :math:`(u, v)` is ranked against ``mrr_negatives``
    negatives of its own batch (DistTGL's 49; negative :math:`(i + s) \bmod B`
    for event :math:`i`, :math:`s = 0 .. S-1`, no extra random draws), rank
    :math:`= 1 + \#\{\text{neg} > \text{pos}\} + \tfrac12 \#\{\text{neg} = \text{pos}\}`,
    MRR the mean of :math:`1/\text{rank}` over all events of the split.
    ``evaluate("val")`` starts from the memory at the end of the last
    training epoch and ``evaluate("test")`` from the memory after the
    validation events, as the example's ``test(val_loader); test(test_loader)``;
    called in another order, the trainer restores the end-of-training state
    and replays the validation events (no scoring) so that the result does not
    depend on the order of the calls.

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
        data (TemporalData): the whole stream (split by time inside).
        batch_size (int): events per (local) batch.
        lr (float): Adam's learning rate.
        num_neighbors (int): ``LastNeighborLoader`` size.
        negatives (str): ``"uniform"`` (the example's draw; the only one built).
        seed (int): ``torch.manual_seed(seed)`` once, after everything is built.
        parallelism (tuple): ``(i, j, k)``.
        static_memory: ``None``, ``"learnable"`` or a ``[num_nodes, d]``
            tensor (pre-trained, e.g. :func:`~pyg_dynscale.ctdg.pretrain_static_memory`);
            see :class:`~pyg_dynscale.ctdg.static.StaticMemory`.
        memory, gnn, link_pred: the three modules, when ``model`` is ``None``.
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
            (:meth:`~pyg_dynscale.ctdg.placement.PartitionedMemory.organise_fetch`,
            :meth:`~pyg_dynscale.ctdg.placement.PartitionedMemory.organise_aggregate`);
            not with ``micro_batches != 1``.
        dynamic_memory (bool): ``False`` feeds the embedding the static memory
            only (the pre-training of :func:`~pyg_dynscale.ctdg.pretrain_static_memory`).
        memory_placement (str): where the node memory lives (Sven's N&M
            placement, :mod:`~pyg_dynscale.ctdg.placement`): ``"replicated"``
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
            (:meth:`stream_state`). :meth:`traffic` has the bytes.
        partition: the owner of every vertex for a partitioned placement:
            ``"range"``, ``"interval"``, ``"flexbicut"``
            (:func:`~pyg_dynscale.partition.events.partition_vertices`;
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
            see :class:`~pyg_dynscale.ctdg.parallel.DelayedGradients`). The
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

    Raises:
        ModelInputError: missing modules, a memory that is not a ``TGNMemory``,
            events that fail :func:`~pyg_dynscale.ctdg.events.check_events`,
            a message width other than the memory's, bad options.
        NotImplementedError: a partitioned placement with ``j > 1``, ``k > 1``
            or the memory service; ``prefetch=True`` with ``micro_batches != 1``.
    """

    def __init__(
        self,
        model=None,
        data: Optional[TemporalData] = None,
        batch_size: int = 200,
        lr: float = 1e-4,
        num_neighbors: int = 10,
        negatives: str = "uniform",
        seed: int = 0,
        parallelism=(1, 1, 1),
        static_memory: Union[None, str, Tensor] = None,
        *,
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
    ) -> None:
        if model is not None:
            for part in ("memory", "gnn", "link_pred"):
                if getattr(model, part, None) is None:
                    raise ModelInputError(f"model.{part}", "is missing.",
                                          "give a model with memory, gnn and link_pred (e.g. pyg_dynscale.ctdg.TGN).")
            if any(x is not None for x in (memory, gnn, link_pred)):
                raise ModelInputError("model", "is given together with memory/gnn/link_pred.", "give one or the other.")
            memory, gnn, link_pred = model.memory, model.gnn, model.link_pred
        for name, mod in (("memory", memory), ("gnn", gnn), ("link_pred", link_pred)):
            if not isinstance(mod, torch.nn.Module):
                raise ModelInputError(name, f"is {type(mod).__name__}.",
                                      "give MemoryTrainer(model, data) or MemoryTrainer(memory=, gnn=, link_pred=, data=).")
        missing = [p for p in _MEMORY_PARTS if not hasattr(memory, p)]
        if missing:
            raise ModelInputError("memory", f"lacks {missing}: it is not a torch_geometric.nn.TGNMemory.",
                                  "build the memory as PyG's examples/tgn.py does (TGNMemory).")
        if data is None:
            raise ModelInputError("data", "is missing.", "give the event stream as torch_geometric.data.TemporalData.")
        if negatives != "uniform":
            raise NotImplementedError(f"negatives={negatives!r} is not built: only 'uniform' (the PyG example's draw).")
        self.batch_size = _positive_int("batch_size", batch_size)
        self.num_neighbors = _positive_int("num_neighbors", num_neighbors)
        if isinstance(mrr_negatives, bool) or not isinstance(mrr_negatives, int) or mrr_negatives < 0:
            raise ModelInputError("mrr_negatives", f"is {mrr_negatives!r}.", "use an integer >= 0.")
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise ModelInputError("lr", f"is {lr!r}.", "use a positive learning rate.")
        check_events(data, memory.num_nodes)
        if data.msg.size(-1) != getattr(memory, "raw_msg_dim", data.msg.size(-1)):
            raise ModelInputError("data.msg", f"has {data.msg.size(-1)} columns but the memory was built for "
                                  f"{memory.raw_msg_dim}.", "build TGNMemory / TGN with msg_dim=data.msg.size(-1).")
        self.memory, self.gnn, self.link_pred = memory, gnn, link_pred
        self.seed, self.eval_seed, self.mrr_negatives = seed, eval_seed, mrr_negatives
        self.dynamic_memory = bool(dynamic_memory)

        dev, dtype = memory.memory.device, memory.memory.dtype
        self.device = dev
        #: ``[E, F]`` the raw messages, on the device (the only column of the stream the device reads whole)
        self.msg = data.msg.to(dev, dtype)
        #: the stream's index columns on the host: every index list of a step is made from them (the
        #: device gets the slices a step needs, e.g. the neighbour edges' times, with that step's copy)
        self.host = HostStream.of(data.src, data.dst, data.t)
        self.val_start, self.test_start, self.num_events = split_ranges(data, val_ratio, test_ratio)
        if self.val_start == 0:
            raise ModelInputError("data", "leaves no training events after the split.", "give more events or smaller ratios.")
        self.schedule = EventSchedule(self.val_start, self.batch_size, parallelism)
        self.parallelism = (self.schedule.i, self.schedule.j, self.schedule.k)

        self.static: Optional[StaticMemory] = None
        if static_memory is not None:
            self.static = StaticMemory(memory.num_nodes, memory.memory_dim, static_memory).to(dev, dtype)
        elif not self.dynamic_memory:
            raise ModelInputError("dynamic_memory", "is False without a static memory.", "give static_memory too.")

        self.state = MemoryState(memory, self.host.src, self.host.dst, self.host.t, self.msg)
        self.placement: Optional[PartitionedMemory] = None
        self._row_bytes = memory.memory_dim * memory.memory.element_size() + memory.last_update.element_size()
        # on the host: which neighbours a batch sees depends on the events only (and the CPU's
        # sort / topk ties are the reference loop's on the CPU)
        self.neighbors = LastNeighborLoader(memory.num_nodes, size=self.num_neighbors, device="cpu")
        self.assoc = torch.empty(memory.num_nodes, dtype=torch.long)  # host: node -> row of the batch
        params, seen = [], set()
        for mod in (memory, gnn, link_pred, self.static):
            for p in (mod.parameters() if mod is not None else ()):
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        self.optimizer_params = params
        self.optimizer = torch.optim.Adam(params, lr=lr)
        if gradient_sync not in ("sync", "delayed"):
            raise ModelInputError("gradient_sync", f"is {gradient_sync!r}.", "use 'sync' or 'delayed'.")
        #: ``gradient_sync="delayed"``: the previous step's gradients (None: each step applies its own)
        self._delayed = DelayedGradients(params) if gradient_sync == "delayed" else None
        self.criterion = torch.nn.BCEWithLogitsLoss()
        #: bytes this process moved (memory rows read / written, write-back all-gathers, gradients)
        self._traffic = Traffic()
        self.rank, self.world_size = world()
        if self.world_size > 1:  # before the first collective (NCCL and the object collectives use it)
            bind_device(dev)
            check_gpu_sharing(dev)  # two ranks on one GPU over NCCL: our message, before NCCL's
        self._setup_placement(memory_placement, partition, memory_service, prefetch)
        micro_batches = check_micro_batches(micro_batches)
        if prefetch and micro_batches != 1:
            raise NotImplementedError(f"prefetch=True with micro_batches={micro_batches!r} is not built: the "
                                      "prefetcher organises whole local batches' dispatches; use one of the two.")
        if micro_batches != 1 and self.memory_placement != "sven":
            raise NotImplementedError(f"micro_batches={micro_batches!r} with memory_placement="
                                      f"{self.memory_placement!r} is not built: micro-batch pipelining overlaps "
                                      "the partitioned dispatch, use memory_placement='sven'.")
        #: Sven's micro-batch pipeline (``micro_batches != 1``), else None
        self._micro = MicroBatchPipeline(self.placement, micro_batches) if micro_batches != 1 else None
        if not isinstance(overlap_aggregation, bool):
            raise ModelInputError("overlap_aggregation", f"is {overlap_aggregation!r}.", "use True or False.")
        if overlap_aggregation and self.placement is None:
            raise ModelInputError("overlap_aggregation", f"is True with memory_placement={self.memory_placement!r}, "
                                  "which has no aggregation.", "use memory_placement='sven' or 'partitioned'.")
        self._groups, self._ddp = None, None
        #: ``overlap_aggregation`` under a process group: the aggregation's own channel (None: inline)
        self._agg_channel: Optional[Channel] = None
        #: the group host values go over (the memory copies' ids and counts, the traffic report)
        self._host_group = None
        i, j, k = self.parallelism
        if self.world_size > 1:
            _, self._groups = memory_groups(self.parallelism, self.world_size)
            # every rank, same order (each call a world collective where a group is made)
            self._host_group = host_group(None)
            copy_group = self._groups[self.rank // (i * j)]  # each rank asks for its own copy's twin
            self._copy_host = None if copy_group is None else host_group(copy_group)
            if self.placement is not None:
                self.placement.connect(Channel(self._host_group, resolve_transport("auto", dev)))
            if overlap_aggregation:  # its own groups: it runs on a thread next to this one's collectives
                rows = helper_group(None, purpose="aggregation")  # the default group's backend (NCCL on GPUs)
                ids = rows if moves_host_tensors(group_backend(rows)) else helper_group(
                    None, backend="gloo", purpose="aggregation")
                self._agg_channel = Channel(ids, resolve_transport("auto", dev, rows))
            self._ddp = wrap_ddp(self, self._traffic, self._delayed)
        #: trainers of the schedule this process runs (all of them on one process: the emulation)
        self.trainers = list(range(i * j * k)) if self.world_size == 1 else [self.rank]
        self._live = self.rank // (i * j) if self.world_size > 1 else 0  # the memory copy in the module's buffers
        self._copies: Optional[dict] = None  # memory copy -> snapshot (None: the live one)
        self._ctx: dict = {}  # the current step's negatives and snapshots, for _share
        self.service: Optional[MemoryService] = None
        if memory_service:
            if j > 1 or (k > 1 and self.world_size == 1):
                raise NotImplementedError(
                    f"memory_service=True with parallelism={self.parallelism!r} is not built: the service serves one "
                    "memory copy per process without epoch parallelism's snapshots (use j = 1, and k > 1 only "
                    "across processes).")
            self.service = MemoryService(memory.memory, memory.last_update)
        self.prefetcher: Optional[NeighborPrefetcher] = None
        if prefetch:
            if j > 1 or (k > 1 and self.world_size == 1):
                raise NotImplementedError(
                    f"prefetch=True with parallelism={self.parallelism!r} is not built: the prefetcher mirrors one "
                    "memory copy's neighbour loader per process without epoch parallelism (use j = 1, and k > 1 "
                    "only across processes).")
            self.prefetcher = NeighborPrefetcher(memory.num_nodes, self.num_neighbors, "cpu")
        #: partitioned placement with the prefetcher: local batches whose dispatch / aggregation
        #: id lists came from the prefetch thread
        self.prefetched = {"dispatch": 0, "aggregation": 0}
        self._epoch_traffic: Optional[dict] = None
        self.epoch = 0
        #: ``[steps]`` float64: each step's loss in the last epoch (stays on the device)
        self.batch_losses: Optional[Tensor] = None
        self._position: Optional[str] = None  # "train" / "val" / "test": events walked so far end there
        self._train_end = None  # memory + neighbour state at the end of the last training epoch
        self._training = True  # whether the memory is in training mode (the flush on leaving it)
        torch.manual_seed(seed)

    # ------------------------------------------------------------------ pieces
    def _split_bounds(self, a: int, b: int) -> tuple[int, int]:
        d = self.host.dst[a:b]
        return int(d.min()), int(d.max())

    def _set_training(self, mode: bool) -> None:
        if self._training and not mode:
            self.state.flush()  # TGNMemory.train(False)
        # torch.nn.Module.train, not TGNMemory.train: its flush would read the module's own (unused) store
        torch.nn.Module.train(self.memory, mode)
        for mod in (self.gnn, self.link_pred, self.static):
            if mod is not None:
                mod.train(mode)
        self._training = mode

    def _embed(self, n_id: Tensor, training: bool, lookup=None) -> Tensor:
        """``z`` of the batch nodes ``n_id`` (host, sorted unique) and their last neighbours;
        ``lookup``: the prefetched ``self.neighbors(n_id)`` (a future). The lookup, the node rows
        (:attr:`assoc`) and the neighbour edges are host lists; one copy takes the edges, their
        times and event ids to the device."""
        n_id, edge_index, e_id = self.neighbors(n_id) if lookup is None else lookup.result()
        self.assoc[n_id] = torch.arange(n_id.size(0))
        self._traffic.memory_read += n_id.numel() * self._row_bytes
        z, last_update = self.state.read(n_id, training)
        m = e_id.numel()
        parts = [edge_index.reshape(-1), self.host.t[e_id], e_id] + ([n_id] if self.static is not None else [])
        at = host_to_device(torch.cat(parts), self.device)
        edges, t_e, e_dev = at[:2 * m].view(2, m), at[2 * m:3 * m], at[3 * m:4 * m]
        if self.static is not None:
            n_dev = at[4 * m:]
            z = z + self.static(n_dev) if self.dynamic_memory else self.static(n_dev)
        return self.gnn(z, last_update, edges, t_e, self.msg[e_dev])

    def _scores(self, a: int, b: int, neg: Tensor, training: bool, lookup=None) -> tuple[Tensor, Tensor, Tensor]:
        """The logits of events ``[a, b)`` against their host negatives ``neg``: ``(pos_out, neg_out,
        z)`` (:attr:`assoc` keeps the rows of ``z``)."""
        src, dst = self.host.src[a:b], self.host.dst[a:b]
        z = self._embed(torch.cat([src, dst, neg]).unique(), training, lookup)
        rows = host_to_device(self.assoc[torch.cat([src, dst, neg])], self.device)
        s, d, n = rows[:b - a], rows[b - a:2 * (b - a)], rows[2 * (b - a):]
        # z[src] gathered twice, as the example does: one shared gather would sum the two
        # gradients before the scatter, which rounds differently (last-bit differences)
        pos_out = self.link_pred(z[s], z[d])
        return pos_out, self.link_pred(z[s], z[n]), z

    def _advance(self, a: int, b: int, training: bool) -> None:
        """Memory and neighbour loader take the events ``[a, b)``."""
        self.state.update(a, b, training)
        self.neighbors.insert(self.host.src[a:b], self.host.dst[a:b])

    def _reset(self) -> None:
        self.state.reset()
        self.neighbors.reset_state()

    def _snapshot(self) -> dict:
        nb = self.neighbors
        return {"memory": self.state.state(), "neighbors": nb.neighbors.clone(), "e_id": nb.e_id.clone(),
                "cur_e_id": nb.cur_e_id, "training": self._training}

    def _restore(self, snap: dict) -> None:
        self.state.load(snap["memory"])
        nb = self.neighbors
        nb.neighbors.copy_(snap["neighbors"])
        nb.e_id.copy_(snap["e_id"])
        nb.cur_e_id = snap["cur_e_id"]
        self._training = snap["training"]

    # ------------------------------------------------------------------ training
    def _activate(self, copy: int) -> None:
        """Make memory copy ``copy`` the one in the module's buffers (the emulation of ``k > 1``)."""
        if self._live == copy:
            return
        self._copies[self._live] = self._snapshot()
        self._restore(self._copies[copy])
        self._copies[copy] = None
        self._live = copy

    def _rng_seed(self, iteration: int, trainer: int) -> int:
        """The dropout seed of one trainer's local batch (``i * j * k > 1``): a function of
        (seed, epoch, iteration, trainer), so every process draws what the emulation draws."""
        x = self.seed
        for v in (self.epoch, iteration, trainer):
            x = (x * 1_000_003 + v) % (1 << 62)
        return x

    def _share(self, lb: LocalBatch) -> Tensor:
        r"""Trainer ``lb.trainer``'s share of the step loss,
        :math:`\ell_t \, |b_t| / (|B_g| \, j k)` (``lb.batch_start``..``batch_end`` = :math:`B_g`),
        read from its memory copy as the schedule says; queues its root nodes'
        updated memory for the write-back when ``lb.writes_memory``. Under a
        process group it also adds :math:`0 \cdot \sum p` (every parameter in the
        graph on every rank, for DDP)."""
        zero = None
        if self._ddp is not None:
            zero = sum(p.sum() for p in self.optimizer_params if p.requires_grad) * 0.0
        if self._micro is not None:  # the micro-batch pipeline around the dispatch and the compute below
            out = self._micro.share(self, lb)
            if self._agg_channel is not None and lb.writes_memory and lb.num_events:  # the merged rows are final
                self._post_aggregation(lb.memory_copy)
            return out if zero is None else out + zero
        if self.placement is not None:
            self._dispatch(lb)
        if lb.num_events == 0:
            return zero if zero is not None else torch.zeros((), dtype=torch.float64, device=self.device)
        ctx = self._ctx
        self._activate(lb.memory_copy)
        live = None
        if lb.negative_set > 0:  # epoch parallelism: the memory as it was before this positive set's write
            live = self._snapshot()
            self._restore(ctx["snaps"][(lb.memory_copy, lb.position)])
        o = lb.start - lb.batch_start
        neg = ctx["negs"][(lb.memory_copy, lb.position)][lb.negative_set, o:o + lb.num_events]
        if self.service is not None:  # the forward reads the memory: inside this trainer's read phase
            read_before = self._traffic.memory_read
            with self.service.reading(lb.trainer):
                out = self._share_compute(lb, neg, ctx)
                self.service.count_read((self._traffic.memory_read - read_before) // self._row_bytes)
        else:
            out = self._share_compute(lb, neg, ctx)
        if live is not None:
            self._restore(live)
        return out if zero is None else out + zero

    def _share_compute(self, lb: LocalBatch, neg: Tensor, ctx: dict) -> Tensor:
        """:meth:`_share`'s reads and compute: the weighted loss, the queued write rows."""
        lookup = ctx["lookups"].pop(lb.trainer, None)
        early = self._agg_channel is not None and lb.writes_memory
        if early:  # the memory update's output is final now: post the aggregation before the GNN layer
            self._queue_roots(lb, ctx)
            if self._micro is None:
                self._post_aggregation(lb.memory_copy)
        if ctx["fork"]:
            dev = [self.device] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=dev):
                torch.manual_seed(self._rng_seed(ctx["iteration"], lb.trainer))
                pos_out, neg_out, _ = self._scores(lb.start, lb.end, neg, True, lookup)
        else:
            pos_out, neg_out, _ = self._scores(lb.start, lb.end, neg, True, lookup)
        loss = self.criterion(pos_out, torch.ones_like(pos_out))
        loss = loss + self.criterion(neg_out, torch.zeros_like(neg_out))
        ctx["sum"] += loss.detach().to(torch.float64) * lb.num_events
        weight = lb.num_events / ((lb.batch_end - lb.batch_start) * self.parallelism[1] * self.parallelism[2])
        if weight != 1.0:
            loss = loss * weight
        if lb.writes_memory and not early:
            self._queue_roots(lb, ctx)
        return loss

    def _queue_roots(self, lb: LocalBatch, ctx: dict) -> None:
        """Queue local batch ``lb``'s root nodes' updated memory for the write-back (no gradient,
        no random draw: the same values before or after the GNN layer)."""
        n_id = torch.cat([self.host.src[lb.start:lb.end], self.host.dst[lb.start:lb.end]]).unique()
        with torch.no_grad():
            rows, last = self.state.updated(n_id)
        ctx["pending"].setdefault(lb.memory_copy, []).append((n_id, rows, last))
        ctx["spans"].setdefault(lb.memory_copy, []).append((lb.start, lb.end))

    def _aggregate(self, copy: int) -> tuple:
        """The partitioned aggregation of memory copy ``copy``'s queued rows: the arguments
        of :meth:`~pyg_dynscale.ctdg.placement.PartitionedMemory.aggregate` and the root count."""
        mine = self._ctx["pending"].pop(copy, [])
        spans = self._ctx["spans"].pop(copy, [])
        prepared = self._ctx["agg_plans"]
        plans = [prepared.pop(x) for x in spans] if all(x in prepared for x in spans) else None
        self.prefetched["aggregation"] += len(plans or [])
        batches = [(self.host.src[x:y], self.host.dst[x:y]) + tuple(w) for (x, y), w in zip(spans, mine)]
        return (batches, plans, self._agg_channel), sum(x[0].numel() for x in mine)

    def _post_aggregation(self, copy: int) -> None:
        """``overlap_aggregation``: start the aggregation of this rank's final root rows on a
        thread over the aggregation groups (this rank's dispatch of the step is done: every rank's
        dispatch all-to-all has completed before any rank's aggregation reaches it)."""
        args, roots = self._aggregate(copy)
        job = BackgroundCall(self.placement.aggregate, *args)
        job.start()
        self._ctx["posted"][copy] = (job, roots)

    def _write_back(self, copy: int, a: int, b: int) -> None:
        """Memory copy ``copy`` takes global batch ``[a, b)``: its writers' root-node rows
        in trainer (= chronological) order, then the batch's messages and neighbours."""
        if self.placement is not None:  # the owners apply every trainer's rows, in trainer order
            posted = self._ctx["posted"].pop(copy, None)
            if posted is not None:  # overlap_aggregation: the thread's exchange, joined (its error re-raised)
                posted[0].result()
                self._ctx["roots"].append(posted[1])
            else:
                args, roots = self._aggregate(copy)
                self._ctx["roots"].append(roots)
                self.placement.aggregate(*args)
            mine = []
        else:
            mine = self._ctx["pending"].pop(copy, [])
            self._ctx["spans"].pop(copy, None)
            self._ctx["roots"].append(sum(x[0].numel() for x in mine))
            if self._ddp is not None:
                i, j, _ = self.parallelism
                n_id, rows, last = (torch.cat([x[k] for x in mine]) for k in range(3)) if mine else (None, None, None)
                mine = gather_rows(self._groups[copy], i * j, n_id, rows, last, self.memory.memory_dim,
                                   self._traffic, self.memory.memory, self._copy_host)
        self._activate(copy)
        m = self.memory
        if self.service is not None:  # applied by the service thread while this one steps the optimizer
            self.service.write(-1, list(mine))
            self._traffic.memory_write += sum(x[0].numel() for x in mine) * self._row_bytes
            mine = []
        with torch.no_grad():
            write_rows(m.memory, m.last_update, mine)  # in trainer order: a later writer wins
        self._traffic.memory_write += sum(x[0].numel() for x in mine) * self._row_bytes
        src, dst = self.host.src[a:b], self.host.dst[a:b]
        self.state.store_s.put(a, b)
        self.state.store_d.put(a, b)
        self.neighbors.insert(src, dst)
        if self.prefetcher is not None:
            self.prefetcher.insert(src, dst)

    def _draw_negatives(self, step, lo: int, hi: int) -> None:
        """Every copy's negatives of ``step``: ``j`` sets per global batch from the global stream."""
        j = self.parallelism[1]
        for c, q, _, a, b in step.fresh:  # every process draws every copy's negatives: one stream
            self._ctx["negs"][(c, q)] = _negatives(lo, hi, j * (b - a)).view(j, b - a)

    def _prefetch(self, step) -> None:
        """Queue the neighbour lookups of ``step``'s local batches (its negatives drawn, the events
        before it inserted): they run while this thread finishes the step before."""
        for c in step.resets:
            if c in self._copies:
                self.prefetcher.reset()
        for t in self.trainers:
            lb = step.local[t]
            if lb.num_events == 0:
                continue
            o = lb.start - lb.batch_start
            neg = self._ctx["negs"][(lb.memory_copy, lb.position)][lb.negative_set, o:o + lb.num_events]
            n_id = torch.cat([self.host.src[lb.start:lb.end], self.host.dst[lb.start:lb.end], neg]).unique()
            # partitioned: the id lists too, from the mailbox this step's write-back left (queued after
            # it; the mailbox changes next at the next write-back, after the dispatch took the lists)
            then = None
            if self.placement is not None:  # after a reset the dispatch organises for itself (a fresh mailbox)
                then = _unorganised if step.resets else functools.partial(self._organise, lb.start, lb.end, neg)
            self._ctx["next_lookups"][t] = self.prefetcher.lookup(n_id, then)

    def _train_step(self, step: Step, steps: list) -> Tensor:
        """One optimizer step of the schedule (``steps[step.iteration]``): every trainer's share
        forward and backward, the write-back, the optimizer step. Returns the step loss (a
        ``float64`` device scalar: nothing is read back)."""
        j = self.parallelism[1]
        ctx = self._ctx
        lo, hi = ctx["bounds"]
        self.optimizer.zero_grad()
        ctx["iteration"] = step.iteration
        if self.prefetcher is None or step.iteration == 0:
            self._draw_negatives(step, lo, hi)
        ctx["lookups"], ctx["next_lookups"] = ctx["next_lookups"], {}
        if self.service is not None:
            if step.resets:
                self.service.drain()
            self.service.plan("R", [t for t in self.trainers if step.local[t].num_events])
            if step.fresh:
                self.service.plan("W", [-1])
        for c in step.resets:
            if c in self._copies:
                self._activate(c)
                self._reset()
        if self.prefetcher is not None and step.iteration == 0:  # the mirror starts as the loader
            nb = self.neighbors
            self.prefetcher.load(nb.neighbors, nb.e_id, nb.cur_e_id)
        if j > 1:
            for c, q, _, _, _ in step.fresh:
                if c in self._copies:
                    self._activate(c)
                    ctx["snaps"][(c, q)] = self._snapshot()
            old = step.iteration - j + 1
            for key in [key for key in ctx["snaps"] if key[1] < old]:
                del ctx["snaps"][key], ctx["negs"][key]
        step_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        for t in self.trainers:
            lb = step.local[t]
            if self._ddp is None and lb.num_events == 0:
                continue
            share = self._ddp(lb) if self._ddp is not None else self._share(lb)
            share.backward()
            step_loss = step_loss + share.detach().to(torch.float64)
        for c, _, _, a, b in step.fresh:  # after every read of the step: the barrier before write-back
            if c in self._copies:
                self._write_back(c, a, b)
        if self.prefetcher is not None and step.iteration + 1 < len(steps):
            nxt = steps[step.iteration + 1]
            self._draw_negatives(nxt, lo, hi)
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
        sched = self.schedule
        i, j, k = self.parallelism
        if self._copies is None:  # every memory copy starts empty
            self._set_training(True)
            self._reset()
            zero = self._snapshot()
            mine = range(k) if self.world_size == 1 else [self._live]
            self._copies = {c: (None if c == self._live else zero) for c in mine}
        elif self._position != "train":  # evaluation walked the live copy on: back to the end of training
            self._restore(self._train_end)
        self._set_training(True)
        torch.empty((), dtype=torch.int64).random_()  # the DataLoader iterator's seed draw
        lo, hi = self._split_bounds(0, self.val_start)
        before = (self._traffic.gradients, self._traffic.gather)
        if self.placement is not None:
            self.placement.begin_epoch()
        dev = self.device
        # with the prefetcher the next step's negatives are drawn before this step's optimizer step: the
        # dropout must not draw from the global stream in between (per-trainer seeds, as for i*j*k > 1)
        self._ctx = {"negs": {}, "snaps": {}, "pending": {}, "fork": i * j * k > 1 or self.prefetcher is not None,
                     "spans": {}, "roots": [], "sum": torch.zeros((), dtype=torch.float64, device=dev),
                     "lookups": {}, "next_lookups": {}, "agg_plans": {}, "posted": {}, "bounds": (lo, hi)}
        steps = sched.steps()
        losses = [self._train_step(step, steps) for step in steps]
        events = sum(lb.num_events for step in steps for lb in (step.local[t] for t in self.trainers))
        ctx = self._ctx
        if self._delayed is not None:  # the last all-reduce waited for, its gradient applied
            self._delayed.flush(self.optimizer)
        if self.service is not None:
            self.service.drain()
        self._activate(0 if self.world_size == 1 else self._live)
        self.batch_losses = torch.stack(losses)
        total = torch.stack([ctx["sum"], torch.tensor(float(events), dtype=torch.float64, device=dev)])
        if self._ddp is not None:
            import torch.distributed as dist

            dist.all_reduce(self.batch_losses)
            dist.all_reduce(total)
        self._epoch_traffic = {"gradients": self._traffic.gradients - before[0],
                               "gather": self._traffic.gather - before[1], "roots": ctx["roots"], "steps": len(steps)}
        self._ctx = {}
        self.epoch += 1
        self._train_end = self._snapshot()
        self._position = "train"
        return float(total[0] / total[1])

    def memory_copy(self, copy: int = 0) -> tuple[Tensor, Tensor]:
        """``(memory [N, d], last_update [N])`` of memory copy ``copy`` (clones), one this process holds.
        Partitioned: assembled from every owner's rows (a collective under a process group)."""
        if self.placement is not None:
            return self.placement.gather_full()
        if self._copies is None or copy == self._live:
            return self.memory.memory.detach().clone(), self.memory.last_update.clone()
        if copy not in self._copies:
            raise ModelInputError("copy", f"is {copy}: this process holds memory copy {self._live}.",
                                  f"ask for one of {sorted(self._copies)}.")
        snap = self._copies[copy]["memory"]
        return snap["memory"].clone(), snap["last_update"].clone()

    def close(self) -> None:
        """Stop the memory service's and the prefetcher's threads (if any) and
        release the ``DistributedDataParallel`` wrapper while the process group
        exists (not at a later garbage collection, possibly during interpreter
        shutdown). The trainer cannot train afterwards."""
        if self._delayed is not None:  # no all-reduce left in flight
            self._delayed.wait()
        self._ddp = None
        gc.collect()
        if self.service is not None:
            self.service.close()
            self.service = None
        if self.prefetcher is not None:
            self.prefetcher.close()
            self.prefetcher = None

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def _walk(self, a: int, b: int, score: bool) -> dict:
        if self.placement is not None:  # its exchanges count apart from the training epoch's
            self.placement.phase = "eval"
            try:
                return self._walk_batches(a, b, score)
            finally:
                self.placement.phase = "train"
        return self._walk_batches(a, b, score)

    def _walk_batches(self, a: int, b: int, score: bool) -> dict:
        self._set_training(False)
        torch.manual_seed(self.eval_seed)
        torch.empty((), dtype=torch.int64).random_()  # the DataLoader iterator's seed draw
        lo, hi = self._split_bounds(a, b)
        aps, aucs, rr_sum, n = [], [], 0.0, 0
        for x, y in self.schedule.eval_batches(a, b):
            if score:
                neg = _negatives(lo, hi, y - x)
                # partitioned: every rank walks every batch, fetching what it does not own
                lookup = self._fetch_batch(x, y, neg, False) if self.placement is not None else None
                pos_out, neg_out, z = self._scores(x, y, neg, False, lookup)
                y_pred = torch.cat([pos_out, neg_out], dim=0).sigmoid().view(-1)
                y_true = torch.cat([torch.ones(pos_out.size(0)), torch.zeros(neg_out.size(0))]).to(y_pred.device)
                aps.append(average_precision(y_pred, y_true))
                aucs.append(roc_auc(y_pred, y_true))
                if self.mrr_negatives:
                    rr_sum += float(self._reciprocal_ranks(x, y, neg, pos_out, z).sum())
                    n += y - x
            self._advance(x, y, False)
        return {"ap": sum(aps) / len(aps) if aps else math.nan, "auc": sum(aucs) / len(aucs) if aucs else math.nan,
                "mrr": rr_sum / n if n else math.nan}

    def _reciprocal_ranks(self, a: int, b: int, neg: Tensor, pos_out: Tensor, z: Tensor) -> Tensor:
        """``[B]`` :math:`1/\\text{rank}` of each positive among ``mrr_negatives`` of the batch's negatives."""
        B = b - a
        S = min(self.mrr_negatives, B)
        cand = neg[(torch.arange(B).view(-1, 1) + torch.arange(S)) % B]  # [B, S] on the host
        rows = host_to_device(torch.cat([self.assoc[self.host.src[a:b]], self.assoc[cand.reshape(-1)]]), self.device)
        zs = z[rows[:B]].repeat_interleave(S, dim=0)
        neg_scores = self.link_pred(zs, z[rows[B:]]).view(B, S)
        p = pos_out.view(B, 1)
        rank = 1.0 + (neg_scores > p).sum(1).to(p.dtype) + 0.5 * (neg_scores == p).sum(1).to(p.dtype)
        return 1.0 / rank

    def evaluate(self, split: str = "val") -> dict:
        """AP, AUC (means over batches) and MRR on ``"val"`` or ``"test"``
        (see the class docstring for the memory state each one starts from)."""
        if split not in ("val", "test"):
            raise ModelInputError("split", f"is {split!r}.", "use 'val' or 'test'.")
        a, b = (self.val_start, self.test_start) if split == "val" else (self.test_start, self.num_events)
        if a == b:
            raise ModelInputError(split, "has no events.", "use a larger val_ratio / test_ratio.")
        if self._train_end is None:
            # no epoch trained yet: the memory walks the training events without learning
            self._reset()
            self._training = False  # nothing stored yet: no flush
            self._walk(0, self.val_start, score=False)
            self._train_end, self._position = self._snapshot(), "train"
        want = "train" if split == "val" else "val"
        if self._position != want:
            self._restore(self._train_end)
            if split == "test":
                self._walk(self.val_start, self.test_start, score=False)
        out = self._walk(a, b, score=True)
        self._position = split
        if self._ddp is not None:  # memory copy 0's result (DistTGL evaluates the first memory process)
            import torch.distributed as dist

            box = [out]
            dist.broadcast_object_list(box, src=0, group=self._host_group)  # objects: never over NCCL
            out = box[0]
        return out
