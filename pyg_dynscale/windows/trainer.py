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
"""
from __future__ import annotations

import gc
import warnings
import weakref
from typing import Any, Callable, Optional, Sequence, Union

import torch
from torch import Tensor

from ..distributed.groups import bind_device
from ..distributed.setup_checks import check_gpu_sharing
from ..errors import ModelInputError, UnsupportedModelError
from ..nn.graph_norm import self_loops
from ..nn.snapshot_model import SnapshotModel, default_dtype
from ..runtime.fused import eval_mode
from ..runtime.losses import LOSSES, check_loss, row_losses
from ..runtime.paths import edge_fields_of
from .batching import block_batch_parts, block_batches
from .placement import Traffic, check_placement, eval_share, held_snapshots, sum_hook
from ..nn.incremental import DEFAULT_THRESHOLD, IncrementalBasis, incremental_reuse
from ..nn.reuse import reuse_for
from .cache import build_window_cache, planned_batches
from .decoder import build_seq2seq
from .view import WindowView
from .node_batches import NodeBatches, check_node_batch_args
from .window_model import WindowModelRunner, check_window_model_args, is_window_model

__all__ = ["WindowTrainer", "OPTIMIZERS"]

OPTIMIZERS = ("sgd", "adam")
_ISSUE = "issue 26"


def _is_sequence_model(model: torch.nn.Module) -> bool:
    """PyGT's ``BatchedDCRNN`` (``forward(X [B, L, N, F], edge_index, edge_weight) -> [B, L, N, out]``)."""
    return any(c.__name__ == "BatchedDCRNN" and (c.__module__ or "").startswith("torch_geometric_temporal")
               for c in type(model).__mro__)


def _rank() -> int:
    import torch.distributed as dist

    return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0


def _process_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _world_size() -> int:
    import torch.distributed as dist

    return int(dist.get_world_size()) if _process_group() else 1


class WindowTrainer:
    r"""Windowed (index-batching) training of a per-snapshot module.

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
        signal: a :class:`~pyg_dynscale.data.DynamicGraphSignal` or a PyGT
            signal object.
        lags: snapshots per window :math:`L`.
        horizon: predicted steps :math:`H`. Without ``decoder``,
            :math:`H \le L` (PyGT ``BatchedDCRNN``'s alignment: the output at
            window step :math:`L-H+k` predicts the target at snapshot
            :math:`e_w+k`); with one, any :math:`H`. Fixed vertex sets only
            for :math:`H > 1`.
        batch_size: windows per global batch.
        stride: distance between window starts.
        loss: ``"mse"``, ``"mae"`` or ``"ce"``.
        lr: learning rate.
        optimizer: ``"sgd"``, ``"adam"`` or a factory ``f(params, lr=...)``.
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
        seed: seed of the per-epoch shuffle.
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
            :mod:`~pyg_dynscale.windows.placement`. Without a process group
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
        traffic: :class:`~pyg_dynscale.windows.placement.Traffic`, the bytes
            this rank handed to collectives by kind (``features`` stays 0).

    Shapes: a batch step calls the module once on the disjoint union of its
    :math:`B` windows' snapshots, ``x`` :math:`[\sum_b n_{t_b}, F]`.
    """

    def __init__(self, model: torch.nn.Module, signal: Any, lags: int = 12, horizon: int = 1, batch_size: int = 64,
                 stride: int = 1, loss: str = "mse", lr: float = 0.01, optimizer: Union[str, Callable] = "sgd",
                 head: Optional[torch.nn.Module] = None, shuffle: bool = False, reuse: bool = True,
                 blocks: Optional[int] = None, node_batch_size: Optional[int] = None, *,
                 ratio: Sequence[float] = (0.7, 0.1, 0.2), standardize: bool = False, seed: int = 0,
                 target: str = "y", placement: Optional[str] = None, cache_bytes: Optional[int] = None,
                 cache_policy: str = "reinc", incremental: Union[bool, float] = False,
                 decoder: Union[None, str, torch.nn.Module] = None, teacher_forcing: float = 0.0,
                 decoder_input: str = "target", num_neighbors: Optional[Sequence[int]] = None,
                 node_order: str = "seq-first") -> None:
        check_node_batch_args(node_batch_size, num_neighbors, node_order)
        world, rank = _world_size(), _rank()
        #: ``"blocks"`` or ``"replicated"`` (:mod:`~pyg_dynscale.windows.placement`); one process holds everything
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
        self.world_size, self.rank = world, rank
        #: the blocks this rank computes (consecutive)
        self.my_blocks = range(rank * (blocks // world), (rank + 1) * (blocks // world))
        self.view = WindowView(signal, lags, horizon, stride, ratio=ratio, standardize=standardize)
        sig = self.view.signal
        if self.view.horizon > self.view.lags and decoder is None:
            raise ModelInputError(
                "decoder", f"is None but horizon={horizon} > lags={lags}: without a decoder the window's own outputs "
                "predict the targets (PyGT BatchedDCRNN's alignment, horizon <= lags).",
                "pass decoder='copy' (the encoder's architecture, its own parameters) or a decoder cell (seq2seq, "
                "DCRNN's encoder-decoder; windows/decoder.py), or use horizon <= lags.")
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
        params = [p for m in (self.model, head) if m is not None for p in m.parameters()]
        fl = [p for p in params if p.is_floating_point()]
        self.dtype = fl[0].dtype if fl else sig.x.dtype
        self.device = fl[0].device if fl else sig.x.device
        if _process_group():
            # before the first collective (DDP's broadcast below, a helper group): NCCL makes a group's
            # communicator on the current device, cuda:0 on a rank that has not bound its own
            bind_device(self.device)
            check_gpu_sharing(self.device)  # two ranks on one GPU over NCCL: our message, before NCCL's
        self._edge_fields = () if (self.sequence_model or self.window_model) else edge_fields_of(self.model, sig)
        #: global ``[T+1]`` vertex-time offsets (metadata: which windows of a batch have target rows)
        self._gptr = sig.node_ptr.tolist()
        counts = sig.nodes_per_snapshot
        n0 = int(counts[0])
        self._uniform = bool((counts == n0).all()) and n0 > 0
        # fixed vertex set in row order: states are handed on row by row
        self._fixed = self._uniform and n0 == sig.num_vertices and bool(
            (sig.node_id.view(-1, n0) == torch.arange(n0)).all())
        self._V = sig.num_vertices
        if self.view.horizon > 1 and not self._fixed:
            raise NotImplementedError(
                f"horizon={horizon} on a signal whose vertex set changes: the output rows of step L-H+k and the "
                f"target rows of snapshot e+k would be different vertices ({_ISSUE}, item 2); use horizon=1.")
        self._static = self._static_edges(sig)
        self._union_cache: dict = {}
        first = int((counts > 0).nonzero().flatten()[0]) if bool((counts > 0).any()) else None
        if first is None:
            raise ModelInputError("signal", "has no nodes.", "pass a signal with at least one node.")
        if self.sequence_model:
            if not (self._fixed and self._static):
                raise ModelInputError("model", f"{type(model).__name__} takes [B, L, N, F] windows of one static graph "
                                      "with a fixed vertex set; this signal's graph or vertex set changes.",
                                      "use its per-snapshot sibling (DCRNN) on a changing graph.")
        elif not self.window_model:
            ea, eb = int(sig.edge_ptr[first]), int(sig.edge_ptr[first + 1])
            self.model.probe(self.view.x_at(first), edge_weight=sig.edge_weight is not None,
                             edge_fields={k: sig.fields[k].values[ea:eb].to(self.device) for k in self._edge_fields})
        # seq2seq (windows/decoder.py): the decoder's parameters are trained with the model's
        self._seq2seq = build_seq2seq(self, decoder, teacher_forcing, decoder_input, target)
        if self._seq2seq is not None and node_batch_size is not None:
            raise NotImplementedError(
                f"decoder={decoder!r} with node_batch_size={node_batch_size!r}: node mini-batches do not run a "
                f"decoder ({_ISSUE}, item 2); pass node_batch_size=None (whole snapshots) for seq2seq.")
        #: the decoder (a SnapshotModel; ``None``: no seq2seq)
        self.decoder = None if self._seq2seq is None else self._seq2seq.decoder
        if self.decoder is not None:
            params += list(self.decoder.parameters())
        #: this rank's windows of each split for :meth:`evaluate` (all of them without a process group)
        train_parts = torch.tensor_split(self.view.split("train"), blocks)
        self._eval = {"train": torch.cat([train_parts[b] for b in self.my_blocks]),
                      **{name: eval_share(self.view.split(name), world, rank) for name in ("val", "test")}}
        if world > 1 and self.placement == "blocks":
            self.view.hold(held_snapshots(self.view.starts, list(self._eval.values()), self.view.lags,
                                          self.view.horizon))
            sig = self.view.signal
        self._store(sig, target)
        #: ReInc's reuse (:mod:`~pyg_dynscale.nn.reuse`) when ``reuse`` and the model has one
        self._reuse = None
        self._reuse_cache: dict = {}
        if cache_bytes is not None and not reuse:
            raise ModelInputError("cache_bytes", f"is {cache_bytes!r} but reuse=False.", "pass reuse=True, or cache_bytes=None.")
        #: ReInc's two-level cache (:mod:`~pyg_dynscale.windows.cache`) that serves ``self._reuse``
        self._cache = None
        impl = None if (not reuse or self.sequence_model or self.window_model) else reuse_for(self.model.module)
        #: the window model's outputs (:mod:`~pyg_dynscale.windows.window_model`; ``None``: not one)
        self._window_runner = WindowModelRunner(self, reuse) if self.window_model else None
        #: the storage's layout for incremental aggregation (``None``: off), its last run in ``.last``
        self._incremental = self._incremental_basis(incremental, cache_bytes, sig)
        if impl is not None and self._incremental is not None:
            impl = incremental_reuse(impl, self._incremental)
        if impl is not None and not self._ef:  # on a static graph from its one snapshot graph (no T x E tensor)
            with default_dtype(self.dtype):
                self._reuse, self._cache = build_window_cache(self, impl, cache_bytes, cache_policy)
        if self._seq2seq is not None:
            self._seq2seq.setup_reuse(self)
        self._params = params
        #: bytes this rank handed to collectives, by kind (:class:`~pyg_dynscale.windows.placement.Traffic`)
        self.traffic = Traffic()
        self._ddp = self._wrap_ddp() if world > 1 else None
        self.optimizer = self._make_optimizer(optimizer, params)
        #: the batch losses of the last :meth:`train_epoch`
        self.batch_losses: list = []
        #: node mini-batches (``node_batch_size``; ``None``: whole snapshots)
        self._node_batches = (None if node_batch_size is None
                              else NodeBatches(self, node_batch_size, num_neighbors, node_order,
                                               declared=isinstance(model, SnapshotModel)))

    # ------------------------------------------------------------------ setup
    def _incremental_basis(self, incremental: Union[bool, float], cache_bytes: Optional[int],
                           sig: Any) -> Optional[IncrementalBasis]:
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
            raise NotImplementedError(
                f"incremental={incremental!r} with cache_bytes={cache_bytes!r}: the bounded cache computes each "
                f"snapshot's entry alone, on demand; incremental aggregation of those entries ({_ISSUE}, item 4) "
                "is not built. Pass cache_bytes=None (the basis of every snapshot computed once) or incremental=False.")
        return IncrementalBasis(sig.node_ptr.to(self.device), sig.edge_ptr.to(self.device), self._ei, self._node_id,
                                self._V, threshold=threshold)

    def _store(self, sig: Any, target: str) -> None:
        """The storage the batches read: the held snapshots' tensors on the
        trainer's device and dtype (the signal's own tensors when they agree),
        local offsets, and the global-to-local snapshot map."""
        self._x = self.view.x.to(self.device, self.dtype)
        self._y = sig.fields[target].values.to(self.device)
        self._ew = None if sig.edge_weight is None else sig.edge_weight.to(self.device, self.dtype)
        self._ei = sig.edge_index.to(self.device)
        self._ef = {k: sig.fields[k].values.to(self.device) for k in self._edge_fields}
        self._node_ptr, self._edge_ptr = sig.node_ptr.tolist(), sig.edge_ptr.tolist()
        self._node_id = sig.node_id.to(self.device)
        #: host positions of the storage's self-loops (the batch graphs are normalized without a read-back)
        self._loops = self_loops(sig.edge_index.cpu())
        #: host ``[T+1]`` edge offsets, and per snapshot its range of ``_loops`` (made at the first use)
        self._eptr = torch.tensor(self._edge_ptr)
        self._loop_ptr: Optional[Tensor] = None
        #: a static graph's loops: the first snapshot's (made at the first use)
        self._first_loops: Optional[Tensor] = None
        #: global snapshot -> position in the storage (``None``: the identity, every snapshot held)
        self._pos = None if self.view.held is None else self.view._local.tolist()

    def _loc(self, ts: list) -> list:
        """Storage positions of global snapshots ``ts``."""
        return list(ts) if self._pos is None else [self._pos[t] for t in ts]

    def _wrap_ddp(self) -> Any:
        """``DistributedDataParallel`` around model + head (it broadcasts rank
        0's parameters) with :func:`~pyg_dynscale.windows.placement.sum_hook`."""
        from torch.nn.parallel import DistributedDataParallel

        self.traffic.setup += sum(p.numel() * p.element_size() for p in self._params)
        with warnings.catch_warnings():  # torch >= 2.12 renames it; False keeps buffers rank-local on every version
            warnings.filterwarnings("ignore", "`broadcast_buffers` is deprecated", FutureWarning)
            ddp = DistributedDataParallel(_RankShare(self), broadcast_buffers=False)
        ddp.register_comm_hook(self.traffic, sum_hook)
        return ddp

    def _make_optimizer(self, optimizer: Union[str, Callable], params: list) -> torch.optim.Optimizer:
        if callable(optimizer):
            return optimizer(params, lr=self.lr)
        if optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.lr)
        if optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr)
        raise ModelInputError("optimizer", f"is {optimizer!r}.", f"use one of {OPTIMIZERS} or a factory f(params, lr=...).")

    def _static_edges(self, sig: Any) -> bool:
        """Whether every snapshot has the same edges and weights (a static graph)."""
        if not self._uniform:
            return False
        ec = sig.edges_per_snapshot
        if not bool((ec == ec[0]).all()):
            return False
        E, T = int(ec[0]), sig.num_snapshots
        ei, ew = sig.edge_index.view(2, T, E), None if sig.edge_weight is None else sig.edge_weight.view(T, E)
        c = max(1, (1 << 22) // max(1, E))  # snapshots per comparison: no T x E temporary
        for t in range(0, T, c):
            if not bool((ei[:, t:t + c] == ei[:, :1]).all()):
                return False
            if ew is not None and not bool((ew[t:t + c] == ew[:1]).all()):
                return False
        return not self._edge_fields

    # ------------------------------------------------------------------ batches
    def batches(self, epoch: Optional[int] = None) -> list:
        """The global batches (``[B_k]`` window indices) of training epoch
        ``epoch`` (default: the next one)."""
        e = self.epoch if epoch is None else epoch
        g = torch.Generator().manual_seed(self.seed + e) if self.shuffle else None
        return block_batches(self.view.split("train"), self.batch_size, self.blocks, self.shuffle, g)

    def _gather(self, rows: Tensor, ts: list) -> Tensor:
        """The rows of snapshots ``ts`` of a per-vertex-time-node tensor, concatenated."""
        ts = self._loc(ts)
        if self._uniform:
            n = self._node_ptr[1]
            idx = torch.tensor(ts, device=self.device)
            return rows.view(-1, n, *rows.shape[1:]).index_select(0, idx).reshape(len(ts) * n, *rows.shape[1:])
        return torch.cat([rows[self._node_ptr[t]:self._node_ptr[t + 1]] for t in ts])

    def _union(self, ts: list) -> tuple:
        """``x, edge_index, edge_weight, edge_fields, rows`` of the disjoint
        union of snapshots ``ts`` (``rows``: the state rows, changing vertex
        sets only)."""
        B = len(ts)
        x = self._gather(self._x, ts)
        ts = self._loc(ts)
        if self._static:
            key = B
            if key not in self._union_cache:
                E, n = self._edge_ptr[1], self._node_ptr[1]
                off = (torch.arange(B, device=self.device) * n).repeat_interleave(E)
                ei = self._ei[:, :E].repeat(1, B) + off
                ew = None if self._ew is None else self._ew[:E].repeat(B)
                self._union_cache = {key: (ei, ew)}
            ei, ew = self._union_cache[key]
            ef: dict = {}
        else:
            eis, ews, off = [], [], 0
            efs: dict = {k: [] for k in self._ef}
            for t in ts:
                a, b = self._edge_ptr[t], self._edge_ptr[t + 1]
                eis.append(self._ei[:, a:b] + off)
                if self._ew is not None:
                    ews.append(self._ew[a:b])
                for k, v in self._ef.items():
                    efs[k].append(v[a:b])
                off += self._node_ptr[t + 1] - self._node_ptr[t]
            ei = torch.cat(eis, 1)
            ew = torch.cat(ews) if self._ew is not None else None
            ef = {k: torch.cat(v) for k, v in efs.items()}
        rows = None
        if not self._fixed:
            rows = torch.cat([self._node_id[self._node_ptr[t]:self._node_ptr[t + 1]] + b * self._V
                              for b, t in enumerate(ts)])
        return x, ei, ew, ef, rows

    def _union_loops(self, ts: list) -> Tensor:
        """Host ``[L]`` positions of the self-loops in the edge list of
        :meth:`_union` of snapshots ``ts`` (host data: a normalization of the
        union that is told where they are reads nothing back,
        :mod:`~pyg_dynscale.nn.graph_norm`)."""
        loops = self._loops
        if loops.numel() == 0:
            return loops
        ts = self._loc(ts)
        if self._static:  # B copies of the first snapshot's edges
            E = self._edge_ptr[1]
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

    def _reuse_graph(self, B: int, ts: list, ei: Tensor, n: int, ew: Optional[Tensor]) -> tuple:
        """The normalized batch-step graph (snapshots ``ts``) for reuse: once per
        batch size on a static graph, once per step otherwise; no value is read
        back (the union's self-loops are known on the host)."""
        if self._static:
            key = ("reuse", B)
            if self._reuse_cache.get("key") != key:
                graph = self._reuse.normalize(ei, n, ew, self.dtype, self._union_loops(ts))
                self._reuse_cache = {"key": key, "graph": graph}
            return self._reuse_cache["graph"]
        return self._reuse.normalize(ei, n, ew, self.dtype, self._union_loops(ts))

    def _sequence_outputs(self, starts: list) -> Tensor:
        """PyGT's ``BatchedDCRNN`` on the batch: ``X [B, L, N, F]`` gathered from
        the storage (one copy per batch, as PyGT's ``IndexDataset`` batch),
        output steps ``L-H .. L-1`` as rows ordered (step, window, node)."""
        L, H, n = self.view.lags, self.view.horizon, self._node_ptr[1]
        idx = torch.tensor(self._loc([s + j for s in starts for j in range(L)]), device=self.device)
        feat = self._x.view(-1, n, *self._x.shape[1:]).index_select(0, idx)
        X = feat.reshape(len(starts), L, n, -1)
        E = self._edge_ptr[1]
        ew = self._ew[:E] if self._ew is not None else X.new_ones(E)
        with default_dtype(X.dtype):
            out = self.model(X, self._ei[:, :E], ew)
        return out[:, L - H:].transpose(0, 1).reshape(H * len(starts) * n, *out.shape[3:])

    def _predict(self, wins: Tensor) -> tuple:
        """``(prediction rows, target rows, [n] window of each row, [B] rows per window)``."""
        starts = self.view.starts.index_select(0, wins).tolist()
        B, L = len(starts), self.view.lags
        if self.sequence_model:
            return self._finish(starts, self._sequence_outputs(starts))
        if self._window_runner is not None:
            return self._finish(starts, self._window_runner.outputs(starts))
        widths = self.model.state_widths
        if self._cache is not None:
            self._cache.begin_batch(starts)
        states: Optional[tuple] = None
        store: Optional[tuple] = None
        H = self.view.horizon
        y = None
        outs: list = []
        for j in range(L):
            ts = [s + j for s in starts]
            x, ei, ew, ef, rows = self._union(ts)
            n = x.shape[0]
            if self._fixed:
                st = states if states is not None else tuple(x.new_zeros(n, w) for w in widths)
            else:
                if store is None:
                    store = tuple(x.new_zeros(B * self._V, w) for w in widths)
                st = tuple(s.index_select(0, rows) for s in store)
            if n == 0:
                y = x.new_zeros((0,) + tuple(self.model.output_shape))
            else:
                if self._reuse is not None:
                    y, new = self._cache.step(j, ts, self._reuse_graph(B, ts, ei, n, ew), st)
                else:
                    y, new = self.model.step(x, ei, ew, st, ef)
                if self._fixed:
                    states = tuple(new)
                else:
                    store = tuple(s.index_copy(0, rows, h) for s, h in zip(store, new))
            if j >= L - H:
                outs.append(y)
        # target step k (snapshot e_w + k) is predicted by the output at window step L - H + k
        if self._seq2seq is not None:  # the decoder runs on from the encoder's final state
            return self._finish(starts, self._seq2seq.decode(self, starts, states), head=False)
        return self._finish(starts, torch.cat(outs) if H > 1 else outs[0])

    def _finish(self, starts: list, y: Tensor, head: bool = True) -> tuple:
        """Head, target rows, window of each row (on the device) and rows per
        window (``[B]``, a host tensor: the row counts are host data, so
        nothing sized by them waits for the device) of output rows ``y``
        ordered (horizon step, window, node)."""
        B, L, H = len(starts), self.view.lags, self.view.horizon
        pred = self.head(y) if head and self.head is not None else y
        self._check_widths(pred)
        targets = [[s + L - 1 + k for s in starts] for k in range(H)]
        targets = [self._loc(tk) for tk in targets]
        flat = [t for tk in targets for t in tk]
        # rows of each (horizon step, window): from the host offsets
        rows = [self._node_ptr[t + 1] - self._node_ptr[t] for t in flat]
        if self._uniform:
            nn_ = self._node_ptr[1]
            idx = torch.tensor(flat, device=self.device)
            tgt = self._y.view(-1, nn_, *self._y.shape[1:]).index_select(0, idx).reshape(-1, *self._y.shape[1:])
        else:
            tgt = torch.cat([self._y[self._node_ptr[t]:self._node_ptr[t + 1]] for t in flat])
        win = torch.arange(B, device=self.device).repeat(H)
        if self._uniform:
            seg = win.repeat_interleave(self._node_ptr[1])
        else:
            seg = win.repeat_interleave(torch.tensor(rows, device=self.device), output_size=sum(rows))
        counts = torch.tensor(rows, dtype=torch.long).view(H, B).sum(0)
        return pred, tgt.to(self.device), seg, counts

    def _check_widths(self, pred: Tensor) -> None:
        """A prediction row must have the target's width (``ce``: one score per class)."""
        y = self._y
        if self.loss_kind == "ce":
            ok = pred.dim() == 2 and y.dim() == 1
        else:
            p = pred.shape[1:]
            if len(p) == 1 and p[0] == 1 and y.dim() == 1:
                p = torch.Size([])
            ok = p == y.shape[1:]
        if not ok:
            raise ModelInputError(
                "head", f"the prediction rows have shape {list(pred.shape[1:])} but the target rows "
                f"{list(y.shape[1:])} (loss={self.loss_kind!r}).",
                "pass head=torch.nn.Linear(<the model's output width>, <the target's width>) (ce: the number of classes).")

    @staticmethod
    def _window_mean(per: Tensor, seg: Tensor, counts: Tensor) -> tuple:
        """Per-window mean of row values (``seg``: window of each row;
        ``counts``: rows per window, a host tensor) over the windows with rows,
        and their mask (host). The windows kept are chosen on the host: no
        boolean mask of a device tensor (whose size the host would wait for)."""
        sums = per.new_zeros(counts.numel()).index_add_(0, seg, per)
        has = counts > 0
        if bool(has.all()):
            return sums / counts.to(per.device, per.dtype), has
        keep = has.nonzero().flatten()
        return sums.index_select(0, keep.to(per.device)) / counts[keep].to(per.device, per.dtype), has

    def batch_loss(self, wins: Tensor) -> Tensor:
        r""":math:`\mathcal{L}_{\mathcal{B}}` of the windows ``wins`` (differentiable)."""
        pred, tgt, seg, counts = self._predict(wins)
        if pred.dim() == 2 and pred.shape[1] == 1 and tgt.dim() == 1 and self.loss_kind != "ce":
            pred = pred.squeeze(1)
        per = row_losses(self.loss_kind, pred, tgt)
        means, _ = self._window_mean(per, seg, counts)
        return means.mean() if means.numel() else per.sum() * 0.0

    # ------------------------------------------------------------------ public
    def _windows_with_rows(self, wins: Tensor) -> int:
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
        if pred.dim() == 2 and pred.shape[1] == 1 and tgt.dim() == 1 and self.loss_kind != "ce":
            pred = pred.squeeze(1)
        means, _ = self._window_mean(row_losses(self.loss_kind, pred, tgt), seg, counts)
        return means.sum() / total + zero

    def _step_distributed(self, parts: list, nodes: Optional[Tensor] = None, total: Optional[int] = None) -> Tensor:
        r"""One global batch under a process group: this rank's blocks' windows,
        its share of the batch loss through ``DistributedDataParallel`` (whose
        comm hook sums the gradients) (``nodes``, ``total``: a node batch and
        its windows with target rows). Returns the share, ``[1]`` float64 on
        the device: :meth:`_read_losses` sums the shares of an epoch's steps
        over the ranks with one all-reduce."""
        mine = [parts[b] for b in self.my_blocks if parts[b].numel()]
        total = self._windows_with_rows(torch.cat(parts)) if total is None else total
        self.optimizer.zero_grad()
        share = self._ddp(torch.cat(mine) if mine else None, total, nodes)
        share.backward()
        self.optimizer.step()
        value = share.detach().reshape(1).to(torch.float64)
        self.traffic.loss += value.numel() * value.element_size()
        self.traffic.steps += 1
        return value

    def _read_losses(self, values: list) -> list:
        """The batch losses of an epoch as floats, from its steps' losses kept on
        the device (one ``[]`` tensor per step; under a process group the
        ``[1]`` float64 shares of :meth:`_step_distributed`, summed over the
        ranks by one all-reduce of the user's group: the same floats on every
        rank). The one host read-back of the epoch: a step never waits for
        the device to report its loss."""
        if not values:
            return []
        if self.world_size > 1:
            import torch.distributed as dist

            buf = torch.cat(values)
            dist.all_reduce(buf)
            return buf.tolist()
        return torch.stack(values).tolist()

    def train_epoch(self) -> float:
        """One epoch over the training windows: one optimizer step per global
        batch. Returns the mean batch loss (the same float on every rank).
        With ``node_batch_size``: one step per (node batch, global batch),
        :meth:`NodeBatches.train_epoch <pyg_dynscale.windows.node_batches.NodeBatches.train_epoch>`."""
        if self._node_batches is not None:
            return self._node_batches.train_epoch()
        self.model.train()
        if self.head is not None:
            self.head.train()
        if self.decoder is not None:
            self.decoder.train()
        nb = 0
        values: list = []
        e = self.epoch
        if self._cache is not None:
            self._cache.plan_epoch(planned_batches(self, e), planned_batches(self, e + 1))
        g = torch.Generator().manual_seed(self.seed + e) if self.shuffle else None
        for parts in block_batch_parts(self.view.split("train"), self.batch_size, self.blocks, self.shuffle, g):
            self._batch_index = nb  # the global batch's teacher-forcing draws (windows/decoder.py)
            if self.world_size > 1:
                values.append(self._step_distributed(parts))
            else:
                self.optimizer.zero_grad()
                loss = self.batch_loss(torch.cat(parts))
                loss.backward()
                self.optimizer.step()
                values.append(loss.detach())  # read once, at the epoch's end
            nb += 1
        self.batch_losses = self._read_losses(values)
        self.epoch += 1
        total = 0.0
        for value in self.batch_losses:
            total += value
        return total / max(nb, 1)

    # ---- checkpoints (pyg-dynscale train --windows --checkpoint-dir / --resume)
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

    def progress_state(self) -> dict:
        """What a resumed run needs besides modules and optimizer, at an epoch boundary, as
        ``{key: Tensor}`` (this rank's keys ``rank<r>/...``): the epoch counter (the shuffle and the
        teacher-forcing draws are seeded from ``seed`` and it), the global random state (a model's
        dropout draws from it) and the byte counters."""
        t = self.traffic
        return {f"rank{self.rank}/epoch": torch.tensor(self.epoch, dtype=torch.long),
                f"rank{self.rank}/rng": torch.get_rng_state(),
                f"rank{self.rank}/traffic": torch.tensor([t.features, t.gradients, t.loss, t.metrics, t.setup,
                                                          t.steps], dtype=torch.long)}

    def load_progress_state(self, state: dict) -> None:
        """Restore :meth:`progress_state` (modules and optimizer are restored separately)."""
        r = self.rank
        for key in (f"rank{r}/epoch", f"rank{r}/rng", f"rank{r}/traffic"):
            if key not in state:
                raise ModelInputError("state", f"lacks {key!r}.", "give what WindowTrainer.progress_state() "
                                      "returned on a trainer with the same world size.")
        self.epoch = int(state[f"rank{r}/epoch"])
        torch.set_rng_state(state[f"rank{r}/rng"].cpu())
        t = self.traffic
        t.features, t.gradients, t.loss, t.metrics, t.setup, t.steps = (int(v) for v in state[f"rank{r}/traffic"])

    def state_dict(self) -> dict:
        """``{"modules", "optimizer", "progress"}``: what :meth:`load_state_dict` needs to go on
        at an epoch boundary bit for bit (references, as torch's)."""
        return {"modules": self.modules.state_dict(), "optimizer": self.optimizer.state_dict(),
                "progress": self.progress_state()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (of a trainer built with the same model, data and settings)."""
        for key in ("modules", "optimizer", "progress"):
            if key not in state:
                raise ModelInputError("state", f"lacks {key!r}.", "give what WindowTrainer.state_dict() returned.")
        self.modules.load_state_dict(state["modules"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.load_progress_state(state["progress"])
    # ---- end of checkpoints

    @torch.no_grad()
    def evaluate(self, split: str = "test") -> dict:
        r"""Metrics of the windows of ``split`` (in order, ``batch_size`` at a
        time), each the mean over windows of the mean over the window's
        target rows: ``{"mse", "mae", "rmse"}`` with
        :math:`\text{rmse} = \sqrt{\text{mse}}` (``loss="ce"``:
        ``{"ce", "accuracy"}``). Under a process group each rank computes its
        part of the split (its blocks for ``"train"``, a consecutive
        :math:`1/R` of ``"val"`` / ``"test"``: the windows whose snapshots it
        holds) and one all-reduce sums the sums: the same numbers on every
        rank."""
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
                if self.loss_kind != "ce" and pred.dim() == 2 and pred.shape[1] == 1 and tgt.dim() == 1:
                    pred = pred.squeeze(1)
                for kind in kinds:
                    if kind == "accuracy":
                        per = (pred.argmax(-1) == tgt.long()).to(pred.dtype)
                    else:
                        per = row_losses(kind, pred, tgt)
                    m, has = self._window_mean(per, seg, counts)
                    sums[kind] = sums[kind] + m.sum().to(torch.float64)
                k += int(has.sum())  # a host mask
        buf = torch.stack([*sums.values(), torch.tensor(float(k), dtype=torch.float64, device=self.device)])
        if self.world_size > 1:
            import torch.distributed as dist

            self.traffic.metrics += buf.numel() * buf.element_size()
            dist.all_reduce(buf)
        values = buf.tolist()
        sums, k = dict(zip(kinds, values[:-1])), int(values[-1])
        out = {kind: v / max(k, 1) for kind, v in sums.items()}
        if "mse" in out:
            out["rmse"] = out["mse"] ** 0.5
        return out

    def cache_stats(self) -> Optional[dict]:
        """ReInc's two-level cache counts (:mod:`~pyg_dynscale.windows.cache`):
        ``{"global": {accesses, hits, misses, hit_rate, computed, evictions,
        expired, held_bytes, peak_bytes, bound_bytes, ...}, "local": {accesses,
        hits, misses, hit_rate, peak_bytes} or None}``, cumulative since
        construction; ``None`` without reuse."""
        return None if self._cache is None else self._cache.stats()

    def close(self) -> None:
        """Release the ``DistributedDataParallel`` wrapper (its reducer and the
        threads it holds) now, while the process group exists; the trainer has
        reference cycles, so without this the wrapper would go at a later garbage
        collection, possibly after ``destroy_process_group`` or during interpreter
        shutdown (a C++ abort at exit). The trainer cannot train afterwards."""
        self._ddp = None
        gc.collect()

    def __repr__(self) -> str:
        name = type(self.model).__name__ if (self.sequence_model or self.window_model) else self.model.spec.name
        return (f"WindowTrainer(model={name}, {self.view!r}, batch_size={self.batch_size}, "
                f"blocks={self.blocks}, loss={self.loss_kind!r}, reuse={self.reuse})")


class _RankShare(torch.nn.Module):
    """Model and head as one module whose forward is the rank's share of a
    global batch loss (:meth:`WindowTrainer._share`): what
    ``DistributedDataParallel`` wraps (one forward, one backward per step)."""

    def __init__(self, trainer: WindowTrainer) -> None:
        super().__init__()
        self.model = trainer.model
        self.head = trainer.head
        self.decoder = trainer.decoder
        # a weak reference: no trainer <-> DDP cycle, so the DDP reducer goes with its trainer (before the process
        # group is destroyed), not at a later garbage collection
        self._share = weakref.WeakMethod(trainer._share)

    def forward(self, wins: Optional[Tensor], total: int, nodes: Optional[Tensor] = None) -> Tensor:
        return self._share()(wins, total, nodes)
