r"""``WindowTrainer``: PyGT's index-batching workflow (windows of ``lags``
snapshots, batched, predicting the next step) for any per-snapshot module.

Per window :math:`w` (:class:`~pyg_dynscale.windows.view.WindowView`:
snapshots :math:`s_w \ldots e_w`), the module starts from a zero state and
runs over the window:

.. math::
    (\hat y_t, h_t) = f(X_t, A_t, h_{t-1}), \quad t = s_w \ldots e_w,
    \qquad h_{s_w - 1} = 0,

its prediction is :math:`\hat Y_w = \hat y_{e_w}` (or ``head``
:math:`(\hat y_{e_w})`), compared with the signal's :math:`Y_{e_w}` (PyGT's
convention: the value after :math:`X_{e_w}`). A batch of windows
:math:`\mathcal{B}` has the loss

.. math::
    \mathcal{L}_{\mathcal{B}} = \frac{1}{|\mathcal{B}'|} \sum_{w \in \mathcal{B}'}
    \frac{1}{n_{e_w}} \sum_{v} \ell(\hat Y_{w,v}, Y_{e_w, v})

(:math:`\mathcal{B}'`: the windows whose target snapshot has rows). With
``horizon`` :math:`H > 1` (:math:`H \le L`, fixed vertex set) the output at
window step :math:`L-H+k` predicts :math:`Y_{e_w+k}`, PyGT ``BatchedDCRNN``'s
alignment (its examples compare the all-steps output ``[B, L, N, F]`` with
the next :math:`L` values), and the window's term is the mean over the
:math:`H` steps and the nodes. With a ``decoder`` (any :math:`H`), a
seq2seq decoder runs on from the window's final state and predicts
:math:`Y_{e_w}, \ldots, Y_{e_w+H-1}` (:mod:`~pyg_dynscale.windows.decoder`). One
optimizer step per global batch (batch order:
:mod:`~pyg_dynscale.windows.batching`). A module that carries no state
(``forward(x, edge_index, edge_weight) -> y``) sees each snapshot alone. With
changing vertex sets, vertex :math:`v`'s state at :math:`t` is its state at
its previous appearance *inside the window* (zeros at its first).

The trainer owns the training: options, the model, head and decoder, the
optimizer and the epoch loop. The held snapshots live in a
:class:`~pyg_dynscale.windows.snapshot_store.SnapshotStore` (``trainer.store``)
that the ReInc cache, the decoder, window models and node batches read.
"""

from __future__ import annotations

import gc
import inspect
import warnings
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor

from ..errors import ModelInputError, UnsupportedModelError, UnsupportedOptionError
from ..nn.incremental import DEFAULT_THRESHOLD, IncrementalBasis, incremental_reuse
from ..nn.reuse import reuse_for
from ..nn.snapshot_model import SnapshotModel, default_dtype
from ..runtime.fused import eval_mode
from ..runtime.losses import check_loss, row_losses
from ..runtime.paths import data_argument, edge_fields_of
from ..training import BaseTrainer, ByteLedger, Metrics, TrafficReport, build_optimizer
from ..training.finite import check_batch_losses
from ..training.gradients import ShareModule, wrap_ddp
from ..training.options import OptimizerSpec, deprecated_positionals, renamed_keyword
from ..training.ranks import agree, bind_device, check_gpu_sharing, host_group
from ..training.state import device_rng_keys, rng_state, set_rng_state
from .batching import block_batch_parts, block_batches
from .block_placement import check_placement, eval_share, held_snapshots
from .cache import build_window_cache, planned_batches
from .decoder import build_seq2seq
from .epoch_bytes import TrafficAccessor, WindowBytes
from .mapped_signal import MappedSignal, is_mapped_source
from .node_batches import NodeBatches, check_node_batch_args
from .rank_view import RankWindowView, combine, gather_facts
from .snapshot_store import SnapshotStore, StoreLayout
from .view import WindowView
from .window_loss import aligned, check_widths, window_mean
from .window_model import WindowModelRunner, check_window_model_args, is_window_model

__all__ = ["WindowTrainer", "OPTIMIZERS"]

#: the optimizers named by a string (:data:`pyg_dynscale.training.OPTIMIZERS`)
OPTIMIZERS = ("sgd", "adam")
#: the options that were positional before 0.2, in their old order (deprecated_positionals)
_POSITIONAL = ("lags", "horizon", "batch_size", "stride", "loss", "lr", "optimizer", "head", "shuffle", "reuse",
               "blocks", "node_batch_size")


def _is_sequence_model(model: torch.nn.Module) -> bool:
    """PyGT's ``BatchedDCRNN`` (``forward(X [B, L, N, F], edge_index, edge_weight) -> [B, L, N, out]``)."""
    return any(c.__name__ == "BatchedDCRNN" and (c.__module__ or "").startswith("torch_geometric_temporal")
               for c in type(model).__mro__)


def _process_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    import torch.distributed as dist

    return int(dist.get_rank()) if _process_group() else 0


def _world_size() -> int:
    import torch.distributed as dist

    return int(dist.get_world_size()) if _process_group() else 1


class WindowTrainer(BaseTrainer):
    r"""Windowed (index-batching) training of a per-snapshot module.

    The trainer surface of :mod:`pyg_dynscale.training`: ``WindowTrainer(model,
    data, *, ...)``, :meth:`train_epoch`, :meth:`evaluate` ``-> Metrics`` (the
    test split by default), :meth:`traffic`, :meth:`state_dict` /
    :meth:`load_state_dict`, :meth:`close` and ``with``. The options after
    ``data`` are keyword-only (passing ``lags`` ... ``node_batch_size``
    positionally, in the order listed, works for one release with a
    :class:`DeprecationWarning`).

    Args:
        model: a PyGT recurrent cell (``GConvGRU``, ``DCRNN``, ``TGCN``,
            ``A3TGCN``, ...), or a module with PyGT's signature
            ``forward(x, edge_index, edge_weight[, h]) -> h | (y, h)``, or a
            :class:`~pyg_dynscale.nn.snapshot_model.SnapshotModel`. Its own
            parameters are trained. PyGT's ``A3TGCN`` / ``A3TGCN2`` on a
            signal of ``[n, F]`` features is a *window model*
            (:mod:`~pyg_dynscale.windows.window_model`): its call on each
            window's ``X [N, F, L]`` (``periods == lags``, static graph, ``horizon=1``);
            on ``[n, F, periods]`` features it is called per snapshot.
        data: a :class:`~pyg_dynscale.data.DynamicGraphSignal` or a PyGT
            signal object (``signal=`` is its deprecated keyword), or a
            signal on disk: the path of a ``DynamicGraphSignal.save`` file or
            of a :mod:`~pyg_dynscale.data.mapped` store directory, or a
            :class:`~pyg_dynscale.windows.mapped_signal.MappedSignal`. On disk
            under a process group with ``placement="blocks"``, each rank reads
            only the snapshots it holds (:mod:`~pyg_dynscale.windows.rank_view`);
            otherwise it is loaded whole.
        lags: snapshots per window :math:`L`.
        horizon: predicted steps :math:`H`. Without ``decoder``,
            :math:`H \le L` (PyGT ``BatchedDCRNN``'s alignment: the output at
            window step :math:`L-H+k` predicts the target at snapshot
            :math:`e_w+k`); with one, any :math:`H`. Fixed vertex sets only
            for :math:`H > 1`.
        batch_size: windows per global batch.
        stride: distance between window starts.
        loss: ``"mse"``, ``"mae"`` or ``"ce"``.
        lr: learning rate (default ``1e-3``, PyGT's index-batching examples').
        optimizer: ``"adam"`` (default, as PyGT's index-batching examples),
            ``"sgd"``, a :class:`torch.optim.Optimizer` subclass or a callable
            ``params -> Optimizer`` (called with ``lr=`` when it takes it),
            over the model's, head's and decoder's parameters
            (:func:`~pyg_dynscale.training.build_optimizer`).
        head: optional module applied to the prediction at the last snapshot.
        shuffle: permute the windows inside each block every epoch.
        reuse: ReInc's reuse (:mod:`~pyg_dynscale.nn.reuse`) where the
            model has one (PyGT's ``GConvGRU``, ``GConvLSTM``, ``GCLSTM``, ``TGCN``, ``DCRNN``): the
            input aggregation of every snapshot computed once, the hidden
            basis once per step for all gates; for ``A3TGCN`` /
            ``A3TGCN2`` as window models, each distinct snapshot's per-period
            output once per batch; other models are called as they are.
            ``True`` computes what ``False`` computes (float rounding).
        blocks: consecutive window blocks (default: the world size, 1
            without a process group). Under a process group of :math:`R`
            ranks, rank :math:`r` computes blocks
            :math:`r P/R \ldots (r+1) P/R - 1` of every global batch, the
            model and head are wrapped in ``DistributedDataParallel`` whose
            comm hook sums the ranks' gradients (each rank's loss is its share
            of the global batch loss; a rank without windows in a batch
            backpropagates a zero connected to every parameter, so a
            parameter the forward does not use gets a zero gradient, not
            ``None``): the result equals one process with the same ``blocks``.
        node_batch_size: node mini-batches of this many vertices
            (:mod:`~pyg_dynscale.windows.node_batches`): each step computes
            the loss of one node batch on its receptive field only, one
            optimizer step per (node batch, global batch); with full
            neighbourhoods the outputs are the full batch's exactly.
            ``None``: whole snapshots.
        ratio: ``(train, val, test)`` fractions of the windows.
        standardize: z-score the features with statistics of the training
            snapshots (:class:`~pyg_dynscale.windows.view.Standardizer`).
        seed: seeds the trainer's own draws: the per-epoch shuffle
            (``seed + epoch``), teacher forcing and sampled neighbourhoods
            (``None``: 0). The model's dropout draws from torch's global
            generator, which :meth:`state_dict` carries.
        device: where to train (``None``: where the model's parameters are);
            given, the model, head and a decoder module are moved there.
        cache_bytes: bound in bytes of ReInc's global cache of input
            aggregations (:mod:`~pyg_dynscale.windows.cache`; ``None``:
            unbounded, every snapshot's computed once before training);
            applies with ``reuse`` where the model has a reuse implementation
            (:meth:`cache_stats`).
        cache_policy: its eviction order: ``"reinc"`` (ReInc's Eq. 3),
            ``"lru"`` or ``"fifo"`` (for comparison).
        incremental: ReInc's incremental aggregation
            (:mod:`~pyg_dynscale.nn.incremental`) of the reuse's input basis
            (``GConvGRU``, ``GConvLSTM``: Chebyshev; ``TGCN``: GCN): each
            snapshot derived from the previous one where its change ratio is
            at most the threshold (``True``: the measured default
            :data:`~pyg_dynscale.nn.incremental.DEFAULT_THRESHOLD`; a float:
            that threshold), else from scratch. Computes what ``False``
            computes (float rounding). Not with ``cache_bytes`` (its entries
            are computed one snapshot at a time).
        target: node-level signal field holding the targets.
        num_neighbors: with ``node_batch_size``: in-edges to sample per hop
            with PyG's ``NeighborSampler`` instead of full neighbourhoods
            (approximate, seeded by ``seed``; needs pyg-lib or torch-sparse).
        node_order: with ``node_batch_size``: ``"seq-first"`` (ReInc §3.4.3:
            each node batch through every global batch of the epoch) or
            ``"node-first"`` (each global batch through every node batch).
        placement: under a process group, ``"blocks"`` (default: ReInc's
            overlapped snapshot placement; rank :math:`r` keeps only the
            snapshots its training blocks and its share of the validation
            and test windows read, no feature row crosses the group) or
            ``"replicated"`` (PyGT's: the whole signal on every rank, the
            window indices split the same way);
            :mod:`~pyg_dynscale.windows.block_placement`. Without a process group
            the one process holds everything.
        decoder: seq2seq (DCRNN's encoder-decoder,
            :mod:`~pyg_dynscale.windows.decoder`): ``"copy"`` (a deep copy of
            ``model``, its own parameters) or a per-snapshot cell whose state
            has the model's widths, reading the decoder input's width. It
            runs :math:`H` steps from the model's final state, step :math:`k`
            on the graph of target snapshot :math:`e_w+k`, fed GO (zeros),
            then the previous prediction (``head`` applied) or, under teacher
            forcing, the ground truth; its predictions are the window's.
            Its parameters are trained with the model's.
        teacher_forcing: probability :math:`p \in [0, 1]` that a decoder step
            :math:`k \ge 1` of a training batch is fed the ground truth (one
            seeded draw per global batch and step, from ``seed`` and the
            epoch); :meth:`evaluate` always runs free.
        decoder_input: the ground truth a teacher-forced step is fed:
            ``"target"`` (:math:`Y` of the previous target snapshot, DCRNN's)
            or ``"features"`` (:math:`X` of the step's snapshot, ReInc's).
            With reuse, a teacher-forced step reads the encoder's input
            aggregation where that ground truth is an encoder input (a
            series signal: :math:`Y_{t-1} = X_t`), else the decoder's own,
            computed once.

    Attributes:
        store (SnapshotStore): the held snapshots
            (:mod:`~pyg_dynscale.windows.snapshot_store`).
        view (WindowView): the windows and their splits.
        optimizer (torch.optim.Optimizer): built from ``optimizer`` and ``lr``.
        batch_losses (list): the step losses of the last :meth:`train_epoch`.

    Shapes: a batch step calls the module once on the disjoint union of its
    :math:`B` windows' snapshots, ``x`` :math:`[\sum_b n_{t_b}, F]`.
    """

    def __init__(self, model: torch.nn.Module, data: Any = None, *args: Any, lags: int = 12, horizon: int = 1,
                 batch_size: int = 64, stride: int = 1, loss: str = "mse", lr: float = 1e-3,
                 optimizer: OptimizerSpec = "adam", head: Optional[torch.nn.Module] = None, shuffle: bool = False,
                 reuse: bool = True, blocks: Optional[int] = None, node_batch_size: Optional[int] = None,
                 ratio: Sequence[float] = (0.7, 0.1, 0.2), standardize: bool = False, seed: Optional[int] = 0,
                 device: Union[str, torch.device, None] = None, target: str = "y", placement: Optional[str] = None,
                 cache_bytes: Optional[int] = None, cache_policy: str = "reinc",
                 incremental: Union[bool, float] = False,
                 decoder: Union[None, str, torch.nn.Module] = None, teacher_forcing: float = 0.0,
                 decoder_input: str = "target", num_neighbors: Optional[Sequence[int]] = None,
                 node_order: str = "seq-first", **deprecated: Any) -> None:
        signal = data_argument("WindowTrainer", data, renamed_keyword("WindowTrainer", deprecated, "signal", "data"))
        options = dict(lags=lags, horizon=horizon, batch_size=batch_size, stride=stride, loss=loss, lr=lr,
                       optimizer=optimizer, head=head, shuffle=shuffle, reuse=reuse, blocks=blocks,
                       node_batch_size=node_batch_size)
        if args:  # an option given both ways (by keyword, not left at its default) is Python's TypeError
            named = {k: v for k, v in options.items() if v is not _DEFAULTS[k]}
            options.update(deprecated_positionals("WindowTrainer", _POSITIONAL, args, named))
        options.update(ratio=ratio, standardize=standardize, seed=0 if seed is None else seed, target=target,
                       placement=placement, cache_bytes=cache_bytes, cache_policy=cache_policy,
                       incremental=incremental, decoder=decoder, teacher_forcing=teacher_forcing,
                       decoder_input=decoder_input, num_neighbors=num_neighbors, node_order=node_order)
        self.world_size, self.rank = _world_size(), _rank()
        self._ddp: Any = None
        #: bytes handed to collectives (:mod:`~pyg_dynscale.windows.epoch_bytes`)
        self._bytes = WindowBytes()
        self.device = _place(model, options["head"], options["decoder"], device, signal)
        if not _process_group():
            self._setup(model, signal, **options)
            self._build()
            return
        # before the first collective (the agreement, DDP's broadcast, a helper group): NCCL makes a group's
        # communicator on the current device, cuda:0 on a rank that has not bound its own
        bind_device(self.device)
        error: Optional[BaseException] = None
        try:
            self._setup(model, signal, **options)
            if not isinstance(self.view, RankWindowView):
                self._build()
        except Exception as exc:  # noqa: BLE001 - any rank-local failure: every rank raises (agree)
            error = exc
        per_rank = error is None and isinstance(self.view, RankWindowView)
        # where each rank read its part, the whole signal's layout and statistics come from every rank's facts
        # (windows/rank_view.py), gathered after an agreement on errors and on the path: no rank waits alone
        agree(error, {"data": "each rank reads its part of a signal file" if per_rank else "the whole signal"})
        if per_rank:
            everyone = gather_facts(self._facts)
            try:
                self._build(everyone)
            except Exception as exc:  # noqa: BLE001 - as above
                error = exc
        # the same error on every rank: a rank whose set-up failed tells the others before any collective they
        # would wait in; set-ups that differ between ranks are refused
        agree(error, None if error is not None else self._summary())
        check_gpu_sharing(self.device)  # two ranks on one GPU over NCCL: our message, before NCCL's
        if self.world_size == 1:
            return
        # model, head and decoder as one module whose forward is the rank's share of a global batch loss (one
        # forward, one backward per step); DDP broadcasts rank 0's parameters, its hook sums the gradients
        self._ddp = wrap_ddp(ShareModule(self._share, model=self.model, head=self.head, decoder=self.decoder),
                             self._bytes.ledger, setup_params=self._params)
        if self._node_batches is not None:
            self._node_batches.host_group = host_group(None)

    # ------------------------------------------------------------------ setup
    def _setup(self, model: torch.nn.Module, signal: Any, *, lags: int, horizon: int, batch_size: int, stride: int,
               loss: str, lr: float, optimizer: OptimizerSpec, head: Optional[torch.nn.Module], shuffle: bool,
               reuse: bool, blocks: Optional[int], node_batch_size: Optional[int], ratio: Sequence[float],
               standardize: bool, seed: int, target: str, placement: Optional[str], cache_bytes: Optional[int],
               cache_policy: str, incremental: Union[bool, float], decoder: Any, teacher_forcing: float,
               decoder_input: str, num_neighbors: Optional[Sequence[int]], node_order: str) -> None:
        """Everything this rank builds without a collective (checks first: a bad option fails here)."""
        world, rank = self.world_size, self.rank
        check_node_batch_args(node_batch_size, num_neighbors, node_order)
        #: ``"blocks"`` or ``"replicated"`` (:mod:`~pyg_dynscale.windows.block_placement`); one process holds everything
        self.placement = check_placement(placement)
        if not isinstance(reuse, bool):
            raise ModelInputError("reuse", f"is {reuse!r}.", "pass True or False.")
        check_loss(loss, "mean")
        if loss == "bce_link":
            raise ModelInputError("loss", "is 'bce_link'.", "windowed training predicts node targets: use 'mse', 'mae' or 'ce'.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ModelInputError("batch_size", f"is {batch_size!r}.", "give the number of windows per batch, >= 1.")
        blocks = world if blocks is None else blocks
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
            raise ModelInputError("blocks", f"is {blocks!r}.", "give the number of window blocks, >= 1 (or None).")
        if batch_size % blocks:
            raise ModelInputError("batch_size", f"is {batch_size}, not a multiple of blocks={blocks}.",
                                  "every block gives batch_size / blocks windows to each global batch.")
        if blocks % world:
            raise ModelInputError("blocks", f"is {blocks}, not a multiple of the world size {world}.",
                                  "give every rank the same number of consecutive blocks (default: blocks = world size).")
        #: the blocks this rank computes (consecutive)
        self.my_blocks = range(rank * (blocks // world), (rank + 1) * (blocks // world))
        if is_mapped_source(signal):  # a signal on disk: each rank reads its part, or one process all of it
            source = signal if isinstance(signal, MappedSignal) else MappedSignal(signal)
            if world > 1 and self.placement == "blocks":
                self.view = RankWindowView(source, lags, horizon, stride, ratio=ratio, standardize=standardize)
            else:
                signal = source.load()
        if not is_mapped_source(signal):
            self.view = WindowView(signal, lags, horizon, stride, ratio=ratio, standardize=standardize)
        sig = self.view.signal
        if self.view.horizon > self.view.lags and decoder is None:
            raise ModelInputError(
                "decoder", f"is None but horizon={horizon} > lags={lags}: without a decoder the window's own outputs "
                "predict the targets (PyGT BatchedDCRNN's alignment, horizon <= lags).",
                "pass decoder='copy' (the encoder's architecture, its own parameters) or a decoder cell (seq2seq, "
                "DCRNN's encoder-decoder), or use horizon <= lags.")
        if int(self.view.split("train").numel()) < blocks:
            raise ModelInputError("blocks", f"is {blocks} but there are {int(self.view.split('train').numel())} "
                                  "training windows.", "use fewer blocks or more windows.")
        f = sig.fields.get(target)
        if f is None or f.level != "node":
            raise ModelInputError(target, "is not a node-level field of the signal.", f"give the signal node targets '{target}'.")
        #: PyGT's BatchedDCRNN: called once per batch on ``[B, L, N, F]`` (a sequence model, not a cell)
        self.sequence_model = _is_sequence_model(model)
        #: PyGT's A3TGCN / A3TGCN2 on [n, F] features: called per window on X [N, F, L] (windows/window_model.py)
        self.window_model = is_window_model(model, sig.x)
        if self.window_model:
            check_window_model_args(model, self.view.lags, self.view.horizon, decoder, node_batch_size, cache_bytes,
                                    incremental)
        if self.sequence_model or self.window_model:
            self.model = model
        else:
            self.model = model if isinstance(model, SnapshotModel) else SnapshotModel(model, depth=None)
            spec = self.model.spec
            if spec.evolving:
                raise UnsupportedModelError(f"{spec.name} evolves its weight from call to call, so windows are not "
                                            "independent; train it with FusedTrainer (one sequence).")
            if spec.global_reason:
                raise UnsupportedModelError(f"{spec.name}: {spec.global_reason} Batched windows would share those "
                                            "statistics.")
        self.head = head
        self.loss_kind, self.lr, self.shuffle, self.reuse = loss, float(lr), bool(shuffle), reuse
        self.batch_size, self.blocks, self.seed, self.epoch = batch_size, blocks, int(seed), 0
        #: the global batch being trained (its teacher-forcing draws, windows/decoder.py)
        self.batch_index = 0
        params = [p for m in (self.model, head) if m is not None for p in m.parameters()]
        fl = [p for p in params if p.is_floating_point()]
        self.dtype = fl[0].dtype if fl else sig.x.dtype
        edge_fields = () if (self.sequence_model or self.window_model) else edge_fields_of(self.model, sig)
        #: global ``[T+1]`` vertex-time offsets (metadata: which windows of a batch have target rows)
        self._gptr = sig.node_ptr.tolist()
        counts = sig.nodes_per_snapshot
        # the whole signal's layout, the same on every rank whatever it holds (a rank that reads its part of a
        # file: from every rank's facts, in _build)
        layout = None if isinstance(self.view, RankWindowView) else StoreLayout.of(sig, edge_fields)
        first = int((counts > 0).nonzero().flatten()[0]) if bool((counts > 0).any()) else None
        if first is None:
            raise ModelInputError("data", "has no nodes.", "pass a signal with at least one node.")
        if not (self.sequence_model or self.window_model):
            ea, eb = int(sig.edge_ptr[first]), int(sig.edge_ptr[first + 1])
            self.model.probe(self.view.x_at(first), edge_weight=sig.weighted,
                             edge_fields={k: sig.fields[k].values[ea:eb].to(self.device) for k in edge_fields})
        if decoder is not None and node_batch_size is not None:
            raise UnsupportedOptionError(
                "node_batch_size", f"is {node_batch_size!r} with decoder={decoder!r}: node mini-batches do not run "
                "a decoder.", "node_batch_size=None (whole snapshots) for seq2seq, or decoder=None.")
        #: this rank's windows of each split for :meth:`evaluate` (all of them without a process group)
        train_parts = torch.tensor_split(self.view.split("train"), blocks)
        self._eval = {"train": torch.cat([train_parts[b] for b in self.my_blocks]),
                      **{name: eval_share(self.view.split(name), world, rank) for name in ("val", "test")}}
        if world > 1 and self.placement == "blocks":
            self.view.hold(held_snapshots(self.view.starts, list(self._eval.values()), self.view.lags,
                                          self.view.horizon))
        #: this rank's contribution to the whole signal's facts (a part read from a file; windows/rank_view.py)
        self._facts = (self.view.facts(blocks, self.my_blocks, edge_fields)
                       if isinstance(self.view, RankWindowView) else None)
        # what _build needs (after the ranks' facts are gathered, where each rank read its part)
        self._pending = dict(model=model, edge_fields=edge_fields, layout=layout, target=target, reuse=reuse,
                             params=params, decoder=decoder, teacher_forcing=teacher_forcing,
                             decoder_input=decoder_input, cache_bytes=cache_bytes, cache_policy=cache_policy,
                             incremental=incremental, optimizer=optimizer, node_batch_size=node_batch_size,
                             num_neighbors=num_neighbors, node_order=node_order)

    def _build(self, everyone: Optional[list] = None) -> None:
        """The rest of the set-up, on the held snapshots: the layout checks, the
        store, seq2seq, reuse and its cache, the optimizer, node batches.
        ``everyone``: every rank's :class:`~pyg_dynscale.windows.rank_view.RankFacts`
        where each rank read its part of a file (their layout and
        standardization are combined here)."""
        p = self._pending
        del self._pending
        model, edge_fields, layout, target, reuse = p["model"], p["edge_fields"], p["layout"], p["target"], p["reuse"]
        params, decoder, cache_bytes, node_batch_size = p["params"], p["decoder"], p["cache_bytes"], p["node_batch_size"]
        incremental = p["incremental"]
        if everyone is not None:
            layout, standardizer = combine(everyone, torch.tensor(self._gptr), self.view.signal.num_vertices,
                                           self.view.signal.x.dtype, self.view.standardize)
            if standardizer is not None:
                self.view.standardize_with(standardizer)
            self.view.close_source()  # the rank keeps its snapshots only
        if self.view.horizon > 1 and not layout.fixed:
            raise UnsupportedOptionError(
                "horizon", f"is {self.view.horizon} on a signal whose vertex set changes: the output rows of step "
                "L-H+k and the target rows of snapshot e+k would be different vertices.", "horizon=1.")
        if self.sequence_model and not (layout.fixed and layout.static):
            raise ModelInputError("model", f"{type(model).__name__} takes [B, L, N, F] windows of one static graph "
                                  "with a fixed vertex set; this signal's graph or vertex set changes.",
                                  "use its per-snapshot sibling (DCRNN) on a changing graph.")
        #: the held snapshots every reader shares (:mod:`~pyg_dynscale.windows.snapshot_store`)
        self.store = SnapshotStore(self.view, target, edge_fields, layout, self.device, self.dtype)
        # seq2seq (windows/decoder.py): the decoder's parameters are trained with the model's
        self._seq2seq = build_seq2seq(self, decoder, p["teacher_forcing"], p["decoder_input"], target)
        #: the decoder (a SnapshotModel; ``None``: no seq2seq)
        self.decoder = None if self._seq2seq is None else self._seq2seq.decoder
        if self.decoder is not None:
            params += list(self.decoder.parameters())
        #: ReInc's reuse object (:mod:`~pyg_dynscale.nn.reuse`) when ``reuse`` and the model has one
        self.reuse_impl = None
        self._reuse_graph_cache: dict = {}
        if cache_bytes is not None and not reuse:
            raise ModelInputError("cache_bytes", f"is {cache_bytes!r} but reuse=False.", "pass reuse=True, or cache_bytes=None.")
        #: ReInc's two-level cache (:mod:`~pyg_dynscale.windows.cache`) that serves :attr:`reuse_impl`
        self.cache = None
        impl = None if (not reuse or self.sequence_model or self.window_model) else reuse_for(self.model.module)
        #: the window model's outputs (:mod:`~pyg_dynscale.windows.window_model`; ``None``: not one)
        self.window_runner = WindowModelRunner(self, reuse) if self.window_model else None
        #: the storage's layout for incremental aggregation (``None``: off), its last run in ``.last``
        self.incremental = self._incremental_basis(incremental, cache_bytes)
        if impl is not None and self.incremental is not None:
            impl = incremental_reuse(impl, self.incremental)
        if impl is not None and not self.store.edge_fields:  # on a static graph from its one graph (no T x E tensor)
            with default_dtype(self.dtype):
                self.reuse_impl, self.cache = build_window_cache(self.store, self.model.module, self.view, impl,
                                                                 cache_bytes, p["cache_policy"])
        if self._seq2seq is not None:
            self._seq2seq.setup_reuse(self)
        self._params = params
        #: built over the model's, head's and decoder's parameters (DDP's broadcast later writes them in place)
        self.optimizer = build_optimizer(p["optimizer"], params, self.lr)
        #: the batch losses of the last :meth:`train_epoch`
        self.batch_losses: list = []
        #: node mini-batches (``node_batch_size``; ``None``: whole snapshots)
        self._node_batches = (None if node_batch_size is None
                              else NodeBatches(self, node_batch_size, p["num_neighbors"], p["node_order"],
                                               declared=isinstance(model, SnapshotModel)))

    def _summary(self) -> dict:
        """What every rank must agree on (:func:`~pyg_dynscale.training.ranks.agree`)."""
        v = self.view
        return {"lags": v.lags, "horizon": v.horizon, "stride": v.stride, "windows": v.num_windows,
                "snapshots": v.num_snapshots_total, "batch_size": self.batch_size, "blocks": self.blocks,
                "placement": self.placement, "loss": self.loss_kind, "dtype": str(self.dtype),
                "device_type": self.device.type, "parameters": sum(p.numel() for p in self._params),
                "node_batches": self._node_batches is not None, "decoder": self.decoder is not None}

    def _incremental_basis(self, incremental: Union[bool, float],
                           cache_bytes: Optional[int]) -> Optional[IncrementalBasis]:
        """``incremental`` checked; the storage's :class:`~pyg_dynscale.nn.incremental.IncrementalBasis`."""
        if isinstance(incremental, bool):
            threshold = DEFAULT_THRESHOLD if incremental else None
        elif isinstance(incremental, (int, float)) and incremental >= 0:
            threshold = float(incremental)
        else:
            raise ModelInputError("incremental", f"is {incremental!r}.",
                                  "pass True, False, or a change-ratio threshold >= 0.")
        if threshold is None:
            return None
        if cache_bytes is not None:
            raise UnsupportedOptionError(
                "incremental", f"is {incremental!r} with cache_bytes={cache_bytes!r}: the bounded cache computes each "
                "snapshot's entry alone, on demand, not by incremental aggregation.",
                "cache_bytes=None (the basis of every snapshot computed once), or incremental=False.")
        st, sig = self.store, self.view.signal
        return IncrementalBasis(sig.node_ptr.to(self.device), sig.edge_ptr.to(self.device), st.edge_index, st.node_id,
                                st.num_vertices, threshold=threshold)

    # ------------------------------------------------------------------ batches
    def batches(self, epoch: Optional[int] = None) -> list:
        """The global batches (``[B_k]`` window indices) of training epoch
        ``epoch`` (default: the next one)."""
        e = self.epoch if epoch is None else epoch
        g = torch.Generator().manual_seed(self.seed + e) if self.shuffle else None
        return block_batches(self.view.split("train"), self.batch_size, self.blocks, self.shuffle, g)

    def _reuse_graph(self, B: int, ts: list, ei: Tensor, n: int, ew: Optional[Tensor]) -> tuple:
        """The normalized batch-step graph (snapshots ``ts``) for reuse: once per
        batch size on a static graph, once per step otherwise; no value is read
        back (the union's self-loops are known on the host)."""
        if self.store.static:
            key = ("reuse", B)
            if self._reuse_graph_cache.get("key") != key:
                graph = self.reuse_impl.normalize(ei, n, ew, self.dtype, self.store.union_loops(ts))
                self._reuse_graph_cache = {"key": key, "graph": graph}
            return self._reuse_graph_cache["graph"]
        return self.reuse_impl.normalize(ei, n, ew, self.dtype, self.store.union_loops(ts))

    def _sequence_outputs(self, starts: list) -> Tensor:
        """PyGT's ``BatchedDCRNN`` on the batch: ``X [B, L, N, F]`` gathered from
        the storage (one copy per batch, as PyGT's ``IndexDataset`` batch),
        output steps ``L-H .. L-1`` as rows ordered (step, window, node)."""
        st = self.store
        L, H, n = self.view.lags, self.view.horizon, st.snapshot_rows
        idx = torch.tensor(st.positions([s + j for s in starts for j in range(L)]), device=self.device)
        feat = st.x.view(-1, n, *st.x.shape[1:]).index_select(0, idx)
        X = feat.reshape(len(starts), L, n, -1)
        ei, ew = st.first_graph()
        ew = ew if ew is not None else X.new_ones(ei.shape[1])
        with default_dtype(X.dtype):
            out = self.model(X, ei, ew)
        return out[:, L - H:].transpose(0, 1).reshape(H * len(starts) * n, *out.shape[3:])

    def _predict(self, wins: Tensor) -> tuple:
        """``(prediction rows, target rows, [n] window of each row, [B] rows per window)``."""
        starts = self.view.starts.index_select(0, wins).tolist()
        B, L = len(starts), self.view.lags
        if self.sequence_model:
            return self.finish(starts, self._sequence_outputs(starts))
        if self.window_runner is not None:
            return self.finish(starts, self.window_runner.outputs(starts))
        widths = self.model.state_widths
        if self.cache is not None:
            self.cache.begin_batch(starts)
        st = self.store
        states: Optional[tuple] = None
        held: Optional[tuple] = None
        H = self.view.horizon
        y = None
        outs: list = []
        for j in range(L):
            ts = [s + j for s in starts]
            x, ei, ew, ef, rows = st.union(ts)
            n = x.shape[0]
            if st.fixed:
                state = states if states is not None else tuple(x.new_zeros(n, w) for w in widths)
            else:
                if held is None:
                    held = tuple(x.new_zeros(B * st.num_vertices, w) for w in widths)
                state = tuple(s.index_select(0, rows) for s in held)
            if n == 0:
                y = x.new_zeros((0,) + tuple(self.model.output_shape))
            else:
                if self.reuse_impl is not None:
                    y, new = self.cache.step(j, ts, self._reuse_graph(B, ts, ei, n, ew), state)
                else:
                    y, new = self.model.step(x, ei, ew, state, ef)
                if st.fixed:
                    states = tuple(new)
                else:
                    held = tuple(s.index_copy(0, rows, h) for s, h in zip(held, new))
            if j >= L - H:
                outs.append(y)
        # target step k (snapshot e_w + k) is predicted by the output at window step L - H + k
        if self._seq2seq is not None:  # the decoder runs on from the encoder's final state
            return self.finish(starts, self._seq2seq.decode(self, starts, states), head=False)
        return self.finish(starts, torch.cat(outs) if H > 1 else outs[0])

    def finish(self, starts: list, y: Tensor, head: bool = True) -> tuple:
        """``(prediction rows, target rows, [n] window of each row, [B] rows per
        window)`` of output rows ``y`` ordered (horizon step, window, node) of
        the windows starting at ``starts``: the head applied (``head``), the
        rows per window a host tensor (the row counts are host data, so
        nothing sized by them waits for the device)."""
        st = self.store
        B, L, H = len(starts), self.view.lags, self.view.horizon
        pred = self.head(y) if head and self.head is not None else y
        check_widths(pred, st.y, self.loss_kind)
        flat = [t for k in range(H) for t in st.positions([s + L - 1 + k for s in starts])]
        # rows of each (horizon step, window): from the host offsets
        rows = [st.node_ptr[t + 1] - st.node_ptr[t] for t in flat]
        if st.uniform:
            nn_ = st.snapshot_rows
            idx = torch.tensor(flat, device=self.device)
            tgt = st.y.view(-1, nn_, *st.y.shape[1:]).index_select(0, idx).reshape(-1, *st.y.shape[1:])
        else:
            tgt = torch.cat([st.y[st.node_ptr[t]:st.node_ptr[t + 1]] for t in flat])
        win = torch.arange(B, device=self.device).repeat(H)
        if st.uniform:
            seg = win.repeat_interleave(st.snapshot_rows)
        else:
            seg = win.repeat_interleave(torch.tensor(rows, device=self.device), output_size=sum(rows))
        counts = torch.tensor(rows, dtype=torch.long).view(H, B).sum(0)
        return pred, tgt.to(self.device), seg, counts

    def batch_loss(self, wins: Tensor) -> Tensor:
        r""":math:`\mathcal{L}_{\mathcal{B}}` of the windows ``wins`` (differentiable)."""
        pred, tgt, seg, counts = self._predict(wins)
        per = row_losses(self.loss_kind, aligned(pred, tgt, self.loss_kind), tgt)
        means, _ = window_mean(per, seg, counts)
        return means.mean() if means.numel() else per.sum() * 0.0

    # ------------------------------------------------------------------ steps under a process group
    def windows_with_rows(self, wins: Tensor) -> int:
        """How many of ``wins`` have target rows (known on every rank: the data is there)."""
        L, H = self.view.lags, self.view.horizon
        n = 0
        for s in self.view.starts.index_select(0, wins).tolist():
            e = s + L - 1
            n += int(self._gptr[e + H] - self._gptr[e] > 0)
        return n

    def _share(self, wins: Optional[Tensor], total: int, nodes: Optional[Tensor] = None) -> Tensor:
        r"""This rank's share :math:`\sum_{w \in \text{mine}} \ell_w / |\mathcal{B}'|`
        of a global batch loss (``wins``: this rank's windows, ``None`` if it
        has none; ``total``: :math:`|\mathcal{B}'|` over all ranks; ``nodes``:
        a node batch, :math:`\ell_w` over its target rows). Plus
        :math:`0 \cdot \sum p`: every parameter is in the graph on every rank,
        so DDP's backward runs everywhere, for a rank without windows too."""
        zero = sum(p.sum() for p in self._params if p.requires_grad) * 0.0
        if wins is None or not total:
            return zero
        if nodes is not None:
            return self._node_batches.window_terms(wins, nodes).sum() / total + zero
        pred, tgt, seg, counts = self._predict(wins)
        means, _ = window_mean(row_losses(self.loss_kind, aligned(pred, tgt, self.loss_kind), tgt), seg, counts)
        return means.sum() / total + zero

    def distributed_step(self, parts: list, nodes: Optional[Tensor] = None, total: Optional[int] = None) -> Tensor:
        r"""One global batch under a process group: this rank's blocks' windows,
        its share of the batch loss through ``DistributedDataParallel`` (whose
        comm hook sums the gradients) (``nodes``, ``total``: a node batch and
        its windows with target rows). Returns the share, ``[1]`` float64 on
        the device: :meth:`read_losses` sums the shares of an epoch's steps
        over the ranks with one all-reduce."""
        mine = [parts[b] for b in self.my_blocks if parts[b].numel()]
        total = self.windows_with_rows(torch.cat(parts)) if total is None else total
        self.optimizer.zero_grad()
        share = self._ddp(torch.cat(mine) if mine else None, total, nodes)
        share.backward()
        self.optimizer.step()
        self._bytes.steps += 1
        return share.detach().reshape(1).to(torch.float64)

    def read_losses(self, values: list) -> list:
        """The batch losses of an epoch as floats, from its steps' losses kept on
        the device (one ``[]`` tensor per step; under a process group the
        ``[1]`` float64 shares of :meth:`distributed_step`, summed over the
        ranks by one all-reduce of the user's group: the same floats on every
        rank). The one host read-back of the epoch: a step never waits for
        the device to report its loss. A NaN or infinite one raises
        :class:`~pyg_dynscale.errors.NonFiniteLossError` naming the epoch and
        the first such batch (:func:`~pyg_dynscale.training.finite.check_batch_losses`)."""
        if not values:
            return []
        if self.world_size > 1:
            import torch.distributed as dist

            buf = torch.cat(values)
            self._bytes.ledger.add_tensor("loss", buf)
            dist.all_reduce(buf)
            out = buf.tolist()
        else:
            out = torch.stack(values).tolist()
        # a non-finite batch loss stops the run here, on every rank (the same sums): training/finite.py
        st = self.store
        check_batch_losses(out, epoch=self.epoch, optimizer=self.optimizer,
                           local=values if self.world_size > 1 else None, model=self.model,
                           graphs=lambda: ((p, *st._edges_at(p), st.node_id[st.node_ptr[p]:st.node_ptr[p + 1]])
                                           for p in range(st.num_held)))
        return out

    # ------------------------------------------------------------------ the surface
    def _check_open(self) -> None:
        if self.closed:
            raise ModelInputError("trainer", "is closed.", "build a new WindowTrainer.")

    def train_epoch(self) -> float:
        """One epoch over the training windows: one optimizer step per global
        batch. Returns the mean batch loss (the same float on every rank).
        With ``node_batch_size``: one step per (node batch, global batch),
        :meth:`NodeBatches.train_epoch <pyg_dynscale.windows.node_batches.NodeBatches.train_epoch>`."""
        self._check_open()
        self._bytes.begin_epoch()
        if self._node_batches is not None:
            loss = self._node_batches.train_epoch()
            plan = self._node_batches.last_plan
            self._bytes.end_epoch(plan["steps"], plan["pairs"] if self.world_size > 1 else 0)
            return loss
        self.model.train()
        if self.head is not None:
            self.head.train()
        if self.decoder is not None:
            self.decoder.train()
        nb = 0
        values: list = []
        e = self.epoch
        if self.cache is not None:
            self.cache.plan_epoch(planned_batches(self, e), planned_batches(self, e + 1))
        g = torch.Generator().manual_seed(self.seed + e) if self.shuffle else None
        for parts in block_batch_parts(self.view.split("train"), self.batch_size, self.blocks, self.shuffle, g):
            self.batch_index = nb  # the global batch's teacher-forcing draws (windows/decoder.py)
            if self.world_size > 1:
                values.append(self.distributed_step(parts))
            else:
                self.optimizer.zero_grad()
                loss = self.batch_loss(torch.cat(parts))
                loss.backward()
                self.optimizer.step()
                values.append(loss.detach())  # read once, at the epoch's end
            nb += 1
        self.batch_losses = self.read_losses(values)
        self.epoch += 1
        self._bytes.end_epoch(nb)
        total = 0.0
        for value in self.batch_losses:
            total += value
        return total / max(nb, 1)

    @torch.no_grad()
    def evaluate(self, split: str = "test") -> Metrics:
        r"""Metrics of the windows of ``split`` (``"train"``, ``"val"`` or
        ``"test"``; in order, ``batch_size`` at a time), each the mean over
        windows of the mean over the window's target rows: ``{"loss", "mse",
        "mae", "rmse"}`` with :math:`\text{rmse} = \sqrt{\text{mse}}` and
        ``loss`` the training loss function's value (``loss="mae"``: the
        MAE); ``loss="ce"``: ``{"loss", "ce", "accuracy"}``. Under a process
        group each rank computes its part of the split (its blocks for
        ``"train"``, a consecutive :math:`1/R` of ``"val"`` / ``"test"``: the
        windows whose snapshots it holds) and one all-reduce sums the sums:
        the same numbers on every rank (a collective: call it on every rank)."""
        self._check_open()
        wins = self.view.split(split)
        if wins.numel() == 0:
            raise ModelInputError("split", f"'{split}' has no windows.", "use another split or change ratio.")
        wins = self._eval[split]
        kinds = ("ce", "accuracy") if self.loss_kind == "ce" else ("mse", "mae")
        # float64 sums on the device (the Python floats they replace were float64 too): read once at the end
        sums = {kind: torch.zeros((), dtype=torch.float64, device=self.device) for kind in kinds}
        k = 0
        predict = self._predict if self._node_batches is None else self._node_batches.predictor()
        with eval_mode(self.model, self.head, self.decoder):
            for a in range(0, int(wins.numel()), self.batch_size):
                pred, tgt, seg, counts = predict(wins[a:a + self.batch_size])
                pred = aligned(pred, tgt, self.loss_kind)
                for kind in kinds:
                    if kind == "accuracy":
                        per = (pred.argmax(-1) == tgt.long()).to(pred.dtype)
                    else:
                        per = row_losses(kind, pred, tgt)
                    m, has = window_mean(per, seg, counts)
                    sums[kind] = sums[kind] + m.sum().to(torch.float64)
                k += int(has.sum())  # a host mask
        buf = torch.stack([*sums.values(), torch.tensor(float(k), dtype=torch.float64, device=self.device)])
        if self.world_size > 1:
            import torch.distributed as dist

            self._bytes.ledger.add_tensor("metrics", buf)
            dist.all_reduce(buf)
        values = buf.tolist()
        sums, k = dict(zip(kinds, values[:-1])), int(values[-1])
        out = {kind: v / max(k, 1) for kind, v in sums.items()}
        if "mse" in out:
            out["rmse"] = out["mse"] ** 0.5
        return Metrics(loss=out[self.loss_kind], **out)

    def _traffic_report(self) -> TrafficReport:
        """:meth:`traffic`'s report (module :mod:`~pyg_dynscale.windows.epoch_bytes`)."""
        all_reduce = None
        if self.world_size > 1:
            import torch.distributed as dist

            group = host_group(None)
            all_reduce = lambda t: dist.all_reduce(t, group=group)  # noqa: E731 - host integers over gloo
        param_bytes = sum(p.numel() * p.element_size() for p in self._params if p.requires_grad)
        return self._bytes.report(param_bytes, self.world_size, all_reduce)

    @property
    def ledger(self) -> ByteLedger:
        """This rank's bytes handed to collectives, by kind, counted where each is issued (:meth:`traffic`)."""
        return self._bytes.ledger

    @property
    def traffic(self) -> TrafficAccessor:
        r"""``trainer.traffic()``: the last training epoch's bytes over all ranks
        (a :class:`~pyg_dynscale.training.TrafficReport`; under a process
        group a collective over the host group: call it on every rank).
        ``report["measured"]`` -- the bytes each rank handed to the
        collectives, counted where they are issued (DDP's comm hook, the loss
        and count all-reduces), summed over the ranks, by kind
        (``features``, ``gradients``, ``loss``, ``metrics``, ``setup``) with
        ``total``; ``report["predicted"]`` -- what the window arithmetic
        predicts for the epoch: the planned optimizer steps :math:`K` times
        the trained parameters' bytes :math:`P` per rank for ``gradients``
        (DDP's buckets hold each gradient once), :math:`8K` per rank for
        ``loss`` (plus 8 per node-batch pair), 0 for ``features`` (every
        window is computed where its snapshots are:
        :func:`~pyg_dynscale.windows.placement_costs.placement_bytes`'s figure
        for the blocks and replicated placements); ``steps`` (:math:`K`),
        ``ranks`` and ``totals`` (this rank's running totals since
        construction, ``setup`` and ``metrics`` included). One process: every
        figure is 0. Reading the old attributes (``trainer.traffic.gradients``,
        ``.as_dict()``) is deprecated."""
        return TrafficAccessor(self._traffic_report, self._bytes.counts)

    def cache_stats(self) -> Optional[dict]:
        """ReInc's two-level cache counts (:mod:`~pyg_dynscale.windows.cache`):
        ``{"global": {accesses, hits, misses, hit_rate, computed, evictions,
        expired, held_bytes, peak_bytes, bound_bytes, ...}, "local": {accesses,
        hits, misses, hit_rate, peak_bytes} or None}``, cumulative since
        construction; ``None`` without reuse."""
        return None if self.cache is None else self.cache.stats()

    # ------------------------------------------------------------------ state
    @property
    def modules(self) -> torch.nn.ModuleDict:
        """The trained modules in one container (``model``, ``head`` and ``decoder`` if any): their FQNs
        name the optimizer's state in :meth:`state_dict` and in a checkpoint."""
        mods = {"model": self.model}
        if self.head is not None:
            mods["head"] = self.head
        if self.decoder is not None:
            mods["decoder"] = self.decoder
        return torch.nn.ModuleDict(mods)

    def _progress(self) -> dict:
        r = self.rank
        return {f"rank{r}/epoch": torch.tensor(self.epoch, dtype=torch.long), f"rank{r}/traffic": self._bytes.state(),
                **rng_state(self.device, prefix=f"rank{r}/")}

    def _load_progress(self, state: dict) -> None:
        r = self.rank
        keys = [f"rank{r}/epoch", f"rank{r}/rng", f"rank{r}/traffic", *device_rng_keys(self.device, prefix=f"rank{r}/")]
        for key in keys:
            if key not in state:
                raise ModelInputError("state", f"lacks {key!r}.", "give what WindowTrainer.state_dict() returned "
                                      "on a trainer with the same world size and device type.")
        self.epoch = int(state[f"rank{r}/epoch"])
        set_rng_state(state, self.device, prefix=f"rank{r}/")
        self._bytes.load_state(state[f"rank{r}/traffic"])

    def progress_state(self) -> dict:
        """Deprecated: ``state_dict()["progress"]``."""
        warnings.warn("WindowTrainer.progress_state() is deprecated: use state_dict()['progress'] (and "
                      "load_state_dict()).", DeprecationWarning, stacklevel=2)
        return self._progress()

    def load_progress_state(self, state: dict) -> None:
        """Deprecated: :meth:`load_state_dict`."""
        warnings.warn("WindowTrainer.load_progress_state() is deprecated: use load_state_dict().",
                      DeprecationWarning, stacklevel=2)
        self._load_progress(state)

    def state_dict(self) -> dict:
        r"""``{"modules", "optimizer", "progress"}``: what :meth:`load_state_dict`
        needs to go on at an epoch boundary bit for bit (references, as
        torch's). ``progress`` holds ``{key: Tensor}`` with this rank's keys
        ``rank<r>/...``: the epoch counter (the shuffle and the
        teacher-forcing draws are seeded from ``seed`` and it), torch's global
        random state (a model's dropout draws from it; ``cuda_rng`` on a GPU)
        and the byte counters. The ReInc cache holds parameter-free values,
        the same whether computed or held: it is not part of the state."""
        return {"modules": self.modules.state_dict(), "optimizer": self.optimizer.state_dict(),
                "progress": self._progress()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (of a trainer built with the same model, data and settings)."""
        for key in ("modules", "optimizer", "progress"):
            if key not in state:
                raise ModelInputError("state", f"lacks {key!r}.", "give what WindowTrainer.state_dict() returned.")
        self.modules.load_state_dict(state["modules"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._load_progress(state["progress"])

    def _release(self) -> None:
        """Release the ``DistributedDataParallel`` wrapper (its reducer and the
        threads it holds) now, while the process group exists; the trainer has
        reference cycles, so without this the wrapper would go at a later garbage
        collection, possibly after ``destroy_process_group`` or during interpreter
        shutdown (a C++ abort at exit)."""
        self._ddp = None
        gc.collect()

    def __repr__(self) -> str:
        name = type(self.model).__name__ if (self.sequence_model or self.window_model) else self.model.spec.name
        return (f"WindowTrainer(model={name}, {self.view!r}, batch_size={self.batch_size}, "
                f"blocks={self.blocks}, loss={self.loss_kind!r}, reuse={self.reuse})")


def _place(model: torch.nn.Module, head: Optional[torch.nn.Module], decoder: Any, device: Any,
           signal: Any) -> torch.device:
    """The trainer's device: ``device`` (the modules moved there) or where the model's parameters are."""
    if device is not None:
        device = torch.device(device)
        for m in (model, head, decoder):
            if isinstance(m, torch.nn.Module):
                m.to(device)
        return device
    fl = [p for m in (model, head) if m is not None for p in m.parameters() if p.is_floating_point()]
    if fl:
        return fl[0].device
    x = getattr(signal, "x", None)
    return x.device if isinstance(x, Tensor) else torch.device("cpu")


#: the defaults of the options that were positional (an option given positionally and by keyword is a TypeError)
_DEFAULTS = {k: p.default for k, p in inspect.signature(WindowTrainer.__init__).parameters.items() if k in _POSITIONAL}
