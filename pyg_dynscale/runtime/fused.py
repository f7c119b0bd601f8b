r"""The fused single-device runtime (DGC's decomposed path on one device).

:class:`FusedTrainer` trains a decomposed model over a whole
:class:`~pyg_dynscale.data.DynamicGraphSignal` (or a window ``signal[a:b]``):

1. the structure encoder runs **once** over all snapshots, on the block-diagonal
   graph given by the signal's concatenated storage
   (``signal.supergraph().spatial_edge_index``; GCN normalization computed once
   and cached);
2. the time encoder runs over all vertex sequences at once, concatenated with
   state resets (masked temporal fusion,
   :func:`~pyg_dynscale.nn.temporal_fusion.masked_recurrent_scan`);
3. the loss is PyGT's: per snapshot the mean over its nodes (or labelled
   links), then the mean (default) or sum over snapshots, one backward and one
   optimizer step per epoch.

This computes exactly what PyGT's canonical loop computes (hidden state carried
across snapshots: vertex ``i``'s state at ``t`` is its state at its previous
appearance), with the same loss and gradients to float rounding; tests assert
it for fixed and changing vertex sets.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Union

import torch
from torch import Tensor

from ..errors import ModelInputError, UnsupportedOptionError
from ..nn.decomposed import DecomposedModule, FusedGraph, check_initial_state
from ..nn.snapshot_model import SnapshotModel
from ..partition.halo_plan import StatePlan
from ..training import BaseTrainer, Metrics, TrafficReport, build_optimizer
from ..training.finite import check_batch_losses, signal_graphs
from ..training.options import OptimizerSpec, renamed_keyword
from .evaluation import carry_initial_state, check_positions, joined_window
from .losses import LOSSES, SnapshotMean, Targets, check_loss, link_row_losses, resolve_targets, row_losses
from .metrics import link_metrics, node_metrics
from .paths import as_signal, data_argument, edge_fields_of, prepare_snapshot_model, resolve_model
from .snapshot_runner import SnapshotRunner, initial_states
from .streaming import StreamedRun
from .time_blocks import TimeBlockCheckpoint, check_windowable
from .trainer_state import load_trainer_state, seed_generators, trainer_state

__all__ = ["FusedTrainer", "LOSSES", "snapshot_mean", "resolve_targets", "Targets", "eval_mode"]

def snapshot_mean(values: Tensor, seg: Tensor, num_segments: int, reduction: str = "mean") -> Tensor:
    r"""PyGT's loss reduction: :math:`\frac{1}{T'}\sum_t \frac{1}{n_t}\sum_{k \in t} v_k`
    over the :math:`T'` segments that have rows (``reduction="sum"`` drops the
    :math:`1/T'`); :class:`~pyg_dynscale.runtime.losses.SnapshotMean` built
    for one call (build it once to reuse its normalizers)."""
    return SnapshotMean.whole(seg, num_segments, reduction)(values)


@contextmanager
def eval_mode(*modules: Optional[torch.nn.Module]) -> Iterator[None]:
    """Put ``modules`` (``None`` entries skipped) in eval mode, restoring
    each one's mode afterwards."""
    mods = [m for m in modules if m is not None]
    modes = [m.training for m in mods]
    for m in mods:
        m.eval()
    try:
        yield
    finally:
        for m, mode in zip(mods, modes):
            m.train(mode)


def _device_of(module: torch.nn.Module) -> Optional[torch.device]:
    devs = {p.device for p in module.parameters()}
    if len(devs) > 1:
        raise ModelInputError(
            "model", f"has parameters on several devices {sorted(map(str, devs))}.", "move the whole model with model.to(device)."
        )
    return next(iter(devs)) if devs else None


class FusedTrainer(BaseTrainer):
    r"""Full-batch training of a decomposed dynamic GNN over a snapshot signal.

    The trainer surface of :mod:`pyg_dynscale.training` (:meth:`train_epoch`,
    :meth:`evaluate` ``-> Metrics``, :meth:`traffic`, :meth:`state_dict` /
    :meth:`load_state_dict`, :meth:`close` and ``with``).

    Args:
        model: a :class:`~pyg_dynscale.nn.DecomposedModule` (``TGCN``,
            ``MPNNLSTM``, ``DySAT``), a PyGT ``TGCN``/``TGCN2``/``A3TGCN``/
            ``MPNNLSTM`` instance (wrapped with :func:`~pyg_dynscale.nn.adapt`,
            sharing its parameters), or any module called per snapshot as
            ``model(x, edge_index, edge_weight[, h[, c]])`` returning ``h``,
            ``(y, h)``, ``(h, c)`` or ``(y, h, c)`` -- PyGT's other recurrent
            cells, or a PyGT example's ``RecurrentGCN`` -- run on the
            black-box path (docs/blackbox.md). The loss is computed on ``y``.
        data: the training signal (a window ``signal[a:b]`` works too), a
            :class:`~pyg_dynscale.data.DynamicGraphSignal` or a PyGT signal.
            ``signal=`` is its deprecated keyword.
        head: optional row-wise module applied to every vertex-time node's
            output (e.g. ``Sequential(ReLU(), Linear(32, 1))``); its
            parameters are trained as well.
        loss: ``"mse"``/``"mae"`` (node regression vs. ``target``),
            ``"ce"`` (node classification), ``"bce_link"`` (link prediction:
            logits of the ``link_index`` pairs vs. ``link_label``), or a
            callable ``(trainer, outputs) -> loss``.
        optimizer: ``"adam"`` (default, as PyGT's and DGC's loops),
            ``"sgd"``, a :class:`torch.optim.Optimizer` subclass or a callable
            ``params -> Optimizer``, built over the model's and the head's
            parameters with ``lr`` (:func:`~pyg_dynscale.training.build_optimizer`);
            a built optimizer still works (deprecated).
        lr: the learning rate (default 0.01).
        seed: seeds the global random generators (CPU and CUDA) at
            construction, i.e. what the model's and head's dropout draw;
            the trainer draws nothing else (full batch, no shuffling, no
            negatives). ``None`` (default): the generators as they are.
        device: where to train (default: the model's device). A signal on
            another device is moved with
            :func:`~pyg_dynscale.data.transfer.transfer_to_device`
            (``method=transfer``, graph-difference transfer by default).
        h0: ``[S, state_width]`` initial state per temporal sequence (e.g.
            carried from a previous window), default zeros; on the black-box
            path one ``[S, W_c]`` tensor per state component of the module (a
            tensor for one state, a tuple such as ``(h, c)`` for several;
            :func:`~pyg_dynscale.runtime.snapshot_runner.initial_states`).
        snapshot_reduction: ``"mean"`` (PyGT's ``cost / (time + 1)``) or ``"sum"``.
        check: self-check PyGT adapters at wrap time.
        path: ``"auto"`` (decomposed when an adapter exists, else black-box),
            ``"decomposed"`` or ``"blackbox"``.
        depth: a black-box model's halo depth (``"auto"``, hops, ``None`` or a
            :class:`~pyg_dynscale.partition.halo_plan.HaloDepth`); one
            process computes whole snapshots, so it is only recorded.
        checkpoint_every: recompute activations in blocks of this many
            snapshots during the backward (gradient checkpointing, both
            paths; :class:`~pyg_dynscale.runtime.time_blocks.TimeBlockCheckpoint`
            on the decomposed path; ``None``: keep all).
        stream: keep the signal in host memory and move one window of
            ``checkpoint_every`` snapshots at a time to ``device`` by graph
            difference, the next window's copy overlapping the current
            window's compute (:mod:`~pyg_dynscale.runtime.streaming`: signals
            larger than the GPU's memory; decomposed path, recurrent time
            encoders, built-in losses). :meth:`predict` then returns its rows
            on the host; :attr:`stream_stats` reports the bytes moved.
        reuse: ReInc's reuse on the black-box path for PyGT's ``GConvGRU``,
            ``GConvLSTM``, ``GCLSTM``, ``TGCN`` and ``DCRNN``
            (:mod:`~pyg_dynscale.runtime.step_reuse`): the input basis of
            every snapshot once, the input projections of all snapshots in
            one product per epoch, per snapshot only the state-dependent part
            (equal to calling the cell up to float rounding). ``False``: call
            the module on every snapshot. No effect elsewhere (the decomposed
            path fuses the input side already).

    Example::

        trainer = FusedTrainer(TGCN(8, 32), signal, head=torch.nn.Linear(32, 1), loss="mse", lr=0.01)
        for epoch in range(50):
            loss = trainer.train_epoch()
        y_hat = trainer.predict()      # [N, 1], vertex-time node order
        trainer.evaluate(test)["mse"]  # the later window, each vertex's state continued
    """

    #: epochs trained (restored by :meth:`load_state_dict`)
    epoch: int = 0

    def __init__(
        self,
        model: torch.nn.Module,
        data: Any = None,
        *,
        head: Optional[torch.nn.Module] = None,
        loss: Union[str, Callable[["FusedTrainer", Tensor], Tensor]] = "mse",
        optimizer: OptimizerSpec = "adam",
        lr: float = 0.01,
        seed: Optional[int] = None,
        device: Union[str, torch.device, None] = None,
        target: str = "y",
        link_index: str = "edge_label_index",
        link_label: str = "edge_label",
        h0: Optional[Tensor] = None,
        snapshot_reduction: str = "mean",
        transfer: str = "diff",
        check: bool = True,
        path: str = "auto",
        depth: Any = "auto",
        checkpoint_every: Optional[int] = None,
        stream: bool = False,
        reuse: bool = True,
        **deprecated: Any,
    ) -> None:
        deprecated = renamed_keyword("FusedTrainer", deprecated, "signal", "data")
        signal = data_argument("FusedTrainer", data, deprecated)
        if not isinstance(reuse, bool):
            raise ModelInputError("reuse", f"is {reuse!r}.", "pass True or False.")
        seed_generators(seed)
        signal = as_signal(signal)
        self.model: Union[DecomposedModule, SnapshotModel] = resolve_model(model, path, depth, check)
        #: ``"decomposed"`` or ``"blackbox"``
        self.path = "blackbox" if isinstance(self.model, SnapshotModel) else "decomposed"
        self.head = head
        check_loss(loss, snapshot_reduction, allow_callable=True)
        self.loss_kind = loss
        self.snapshot_reduction = snapshot_reduction
        model_dev = _device_of(self.model)
        head_dev = _device_of(head) if head is not None else None
        device = torch.device(device) if device is not None else (model_dev or signal.device)
        if device.type == "cuda" and device.index is None and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
        for name, d in (("model", model_dev), ("head", head_dev)):
            if d is not None and d != device:
                raise ModelInputError(
                    name, f"is on {d} but training runs on {device}.", f"call {name}.to({str(device)!r}) first, or pass device={str(d)!r}."
                )
        self.device = device
        self.transfer_stats: Any = None
        # what an evaluator of a later window is built with (evaluate(signal))
        self._options = dict(target=target, link_index=link_index, link_label=link_label, transfer=transfer,
                             snapshot_reduction=snapshot_reduction, depth=depth, checkpoint_every=checkpoint_every,
                             reuse=reuse)
        self._evaluators: dict = {}
        #: the streamed windows (``stream=True``), else ``None``
        self.streamed: Optional[StreamedRun] = None
        if stream:
            self._init_streamed(signal, checkpoint_every, h0, target, link_index, link_label, optimizer, lr)
            return
        host_signal = signal if signal.device.type == "cpu" else signal.to("cpu")
        if signal.device != device:
            from ..data.transfer import transfer_to_device

            signal, self.transfer_stats = transfer_to_device(signal, device, method=transfer)
        if signal.device != device:
            raise ModelInputError(
                "signal", f"is on {signal.device} after the transfer, expected {device}.", "pass a signal on the training device."
            )
        self.signal = signal
        self.graph = FusedGraph.from_signal(signal)
        if self.graph.x is None:
            raise ModelInputError("signal.x", "is missing.", "give the signal node features.")
        self.runner: Optional[SnapshotRunner] = None
        if self.path == "blackbox":
            # the step plan and inputs are built on the host and moved once (SnapshotRunner.place)
            fields = edge_fields_of(self.model, host_signal)
            prepare_snapshot_model(self.model, host_signal, False, fields)  # one process: no halo to check
            h0 = initial_states(h0, self.graph.num_sequences, self.model.state_widths)
            plan = StatePlan(host_signal, torch.zeros(host_signal.num_vertex_time_nodes, dtype=torch.long), 1,
                             self.model.depth, self.model.state_widths)
            self.runner = SnapshotRunner(self.model, host_signal, plan, checkpoint_every=checkpoint_every,
                                         dtype=self._params_dtype(), device=device, edge_fields=fields, reuse=reuse,
                                         h0=h0)
        elif h0 is not None:
            check_initial_state(h0, self.graph, self.model.state_width)
        self.h0 = h0
        self.time_blocks: Optional[TimeBlockCheckpoint] = None
        if checkpoint_every is not None and self.runner is None:
            self.time_blocks = TimeBlockCheckpoint(self.model, signal, checkpoint_every)
        self._prepare_targets(target, link_index, link_label)
        params = list(self.model.parameters()) + (list(head.parameters()) if head is not None else [])
        self.optimizer = build_optimizer("adam" if optimizer is None else optimizer, params, lr)

    def _init_streamed(self, signal: Any, every: Optional[int], h0: Optional[Tensor], target: str, link_index: str,
                       link_label: str, optimizer: OptimizerSpec, lr: float) -> None:
        if self.path != "decomposed":
            raise UnsupportedOptionError("stream", "is True on the black-box path, which keeps its per-step inputs "
                                         "on the device.", "stream=False with checkpoint_every=B (gradient "
                                         "checkpointing in windows of B snapshots).")
        if every is None:
            raise ModelInputError("checkpoint_every", "is None with stream=True; streaming moves windows of snapshots.",
                                  "give checkpoint_every=B, the snapshots resident on the device at a time.")
        if callable(self.loss_kind):
            raise ModelInputError("loss", "is a callable with stream=True; a streamed epoch computes the loss window "
                                  "by window.", f"use one of {LOSSES}.")
        check_windowable(self.model)
        signal = signal.to("cpu") if signal.device.type != "cpu" else signal
        if signal.x is None:
            raise ModelInputError("signal.x", "is missing.", "give the signal node features.")
        self.signal = signal
        #: the whole signal's graph, on the host (the windows are built from it)
        self.graph = FusedGraph.from_signal(signal)
        if h0 is not None:
            check_initial_state(h0.detach().cpu(), self.graph, self.model.state_width)
        self.h0, self.runner, self.time_blocks = h0, None, None
        self.streamed = StreamedRun(self.model, signal, every, self.device, self._params_dtype(), self.head,
                                    self.loss_kind, self.snapshot_reduction, target, link_index, link_label, h0)
        params = list(self.model.parameters()) + (list(self.head.parameters()) if self.head is not None else [])
        self.optimizer = build_optimizer("adam" if optimizer is None else optimizer, params, lr)

    @property
    def stream_stats(self) -> Any:
        """:class:`~pyg_dynscale.runtime.streaming.StreamStats` of the last
        streamed pass (``stream=True``), else ``None``."""
        return None if self.streamed is None else self.streamed.stats

    def place(self, fn: Any) -> None:
        """Map every device-resident structure of the trainer with ``fn``
        (the graph, targets, normalizers, initial state, checkpoint windows,
        the black-box step inputs); the model and optimizer are the caller's.
        Used to check, without a GPU, that the hot loop touches no host tensor."""
        if self.streamed is not None:
            raise UnsupportedOptionError("stream", "is True: a streamed trainer's windows are moved per use, so "
                                         "place() has nothing resident to map.", "place() on a trainer with "
                                         "stream=False.")
        self.graph = self.graph.apply_tensors(fn)
        for name in ("target", "label_src", "label_dst", "label_time", "label", "h0"):
            v = getattr(self, name)
            if v is not None:
                setattr(self, name, tuple(fn(h) for h in v) if isinstance(v, tuple) else fn(v))
        if self.mean is not None:
            self.mean = self.mean.apply_tensors(fn)
        if self.time_blocks is not None:
            self.time_blocks.windows = [(lo, hi, g.apply_tensors(fn), fn(sv)) for lo, hi, g, sv in self.time_blocks.windows]
        if self.runner is not None:
            self.runner.place(fn)

    # ------------------------------------------------------------ targets
    def _prepare_targets(self, target: str, link_index: str, link_label: str) -> None:
        x = self.graph.x
        t = resolve_targets(self.signal, self.loss_kind, target, link_index, link_label,
                            x.dtype if x.is_floating_point() else torch.float32)
        self.target, self.label_src, self.label_dst, self.label_time, self.label = (
            t.target, t.label_src, t.label_dst, t.label_time, t.label)
        T = self.graph.num_snapshots
        #: the loss reduction with its normalizers, computed once
        self.mean: Optional[SnapshotMean] = None
        if self.loss_kind == "bce_link":
            self.mean = SnapshotMean.whole(self.label_time, T, self.snapshot_reduction)
        elif not callable(self.loss_kind):
            self.mean = SnapshotMean.whole(self.graph.time, T, self.snapshot_reduction)

    # ------------------------------------------------------------ compute
    def _params_dtype(self) -> torch.dtype:
        p = next(self.model.parameters(), None)
        return p.dtype if p is not None else self.graph.x.dtype

    def outputs(self) -> Tensor:
        """``[N, H]`` model outputs (before the head) of all vertex-time nodes."""
        if self.streamed is not None:
            raise UnsupportedOptionError("stream", "is True: outputs() would hold the outputs of all snapshots on "
                                         "the device.", "predict() (rows on the host) or compute_loss().")
        if self.runner is not None:
            return self.runner.outputs()
        x = self.graph.x.to(self._params_dtype())
        if self.time_blocks is not None and torch.is_grad_enabled():
            out = self.time_blocks.outputs(x, self.h0, self.graph.sequence_vertex)
        else:
            out = self.model.forward_fused(self.graph, self.h0, x=x)
        readout = getattr(self.model, "readout", None)  # a user's module around the cell: its per-node part
        return readout(out, x) if readout is not None else out

    def _apply_head(self, out: Tensor) -> Tensor:
        return self.head(out) if self.head is not None else out

    def link_logits(self, out: Tensor) -> Tensor:
        """Logits of the labelled pairs: the model's ``link_logits(h, src, dst)``
        if it has one, else the dot product of the (head-transformed) embeddings."""
        h = self._apply_head(out)
        fn = getattr(self.model, "link_logits", None)
        if fn is not None:
            return fn(h, self.label_src, self.label_dst)
        return (h.index_select(0, self.label_src) * h.index_select(0, self.label_dst)).sum(-1)

    def compute_loss(self) -> Tensor:
        """The epoch loss with autograd (no optimizer step)."""
        if self.streamed is not None:
            return self.streamed.loss()
        out = self.outputs()
        kind = self.loss_kind
        if callable(kind):
            return kind(self, out)
        if kind == "bce_link":
            return self.mean(link_row_losses(self.link_logits(out), self.label))
        return self.mean(row_losses(kind, self._node_predictions(out), self.target))

    def _node_predictions(self, out: Tensor) -> Tensor:
        """The head's rows of ``out``, one per vertex-time node (checked)."""
        pred = self._apply_head(out)
        if pred.shape[0] != self.graph.num_nodes:
            raise ModelInputError(
                "model", f"returned {pred.shape[0]} rows for {self.graph.num_nodes} vertex-time nodes.",
                "node losses need one output row per node (MPNN-LSTM: use window=1 on the signal).",
            )
        return pred

    def train_epoch(self) -> float:
        """One full-batch epoch: forward over all snapshots, one backward, one step."""
        self.model.train()
        if self.head is not None:
            self.head.train()
        self.optimizer.zero_grad()
        loss = self.compute_loss()
        loss.backward()
        self.optimizer.step()
        if self.runner is not None:
            self.model.detach_carried()
        value = float(loss.detach())
        sig = self.signal  # one batch per epoch: a non-finite loss stops the run (training/finite.py)
        check_batch_losses([value], epoch=self.epoch, optimizer=self.optimizer, model=self.model,
                           graphs=lambda: signal_graphs(sig))
        self.epoch += 1
        return value

    @torch.no_grad()
    def evaluate(self, data: Any = None, *, continue_state: bool = True, **deprecated: Any) -> Metrics:
        r"""Metrics in eval mode, without gradients: a
        :class:`~pyg_dynscale.training.Metrics` ``{name: float}`` with
        ``"loss"`` (the training loss function, same targets and reduction)
        and the loss's own name (``"mse"``, ``"mae"``,
        ``"ce"``, ``"bce_link"``); for ``"mse"``/``"mae"`` both ``"mse"`` and
        ``"mae"`` (PyGT's per-snapshot mean, averaged over snapshots); for
        ``"bce_link"`` also ``"auc"`` and ``"ap"`` of the pairs' logits (each
        where both classes occur). A streamed trainer or a callable loss
        reports ``"loss"`` (and a streamed loss's name with
        ``snapshot_reduction="mean"``).

        Args:
            data: ``None`` -- the training signal (from ``h0``); or a later
                window (the test split: the snapshots right after the
                training signal, a :class:`~pyg_dynscale.data.DynamicGraphSignal`
                or a PyGT signal) -- its metrics with the same loss, targets
                and reduction. ``signal=`` is its deprecated keyword.
            continue_state: with ``data``: ``True`` -- each vertex starts
                ``data`` from the state it reached at the end of the
                training signal, recomputed with the current parameters
                (PyGT's loop running the training then the test snapshots
                carrying ``h``; :mod:`~pyg_dynscale.runtime.evaluation`);
                ``False`` -- from a zero state.
        """
        if deprecated:
            deprecated = renamed_keyword("FusedTrainer.evaluate", deprecated, "signal", "data")
            data = data_argument("FusedTrainer.evaluate", data, deprecated, required=False)
        if data is None:
            with eval_mode(self.model, self.head):
                return self._metrics()
        ev, _, _ = self._evaluator(data, continue_state)
        return ev.evaluate()

    def _metrics(self) -> Metrics:
        """:meth:`evaluate`'s metrics of the trainer's own signal (the caller sets eval mode and no-grad)."""
        kind = self.loss_kind
        if self.streamed is not None or callable(kind):
            loss = float(self.compute_loss())
            named = {kind: loss} if isinstance(kind, str) and self.snapshot_reduction == "mean" else {}
            return Metrics(loss=loss, **named)
        out = self.outputs()
        if kind != "bce_link":
            return Metrics({k: float(v) for k, v in node_metrics(kind, self._node_predictions(out), self.target,
                                                                  self.mean).items()})
        logits = self.link_logits(out)
        loss = float(self.mean(link_row_losses(logits, self.label)))
        labels = self.label
        if self._first_snapshot:  # a later window's evaluator: the window's pairs only
            keep = self.label_time >= self._first_snapshot
            logits, labels = logits[keep], labels[keep]
        return Metrics(loss=loss, bce_link=loss, **link_metrics(logits, labels))

    @torch.no_grad()
    def predict(self, data: Any = None, *, continue_state: bool = True, **deprecated: Any) -> Tensor:
        """Eval-mode outputs (after the head) of all vertex-time nodes, ``[N, *]``
        in vertex-time node order (``signal.node_ptr`` splits them by snapshot);
        with ``data``, those of that later window (``continue_state`` as
        :meth:`evaluate`)."""
        if deprecated:
            deprecated = renamed_keyword("FusedTrainer.predict", deprecated, "signal", "data")
            data = data_argument("FusedTrainer.predict", data, deprecated, required=False)
        signal = data
        if signal is not None:
            ev, _, first_node = self._evaluator(signal, continue_state)
            return ev.predict()[first_node:]
        with eval_mode(self.model, self.head):
            if self.streamed is not None:
                return self.streamed.predict()
            return self._apply_head(self.outputs())

    def _evaluator(self, signal: Any, continue_state: bool) -> tuple["FusedTrainer", int, int]:
        """``(trainer, first snapshot, first node)``: a trainer sharing the
        model and head over the joined signal of a continued evaluation (or
        over ``signal`` alone), whose loss counts ``signal``'s snapshots only;
        kept for the last signal asked for."""
        key = (id(signal), continue_state)
        hit = self._evaluators.get(key)
        if hit is not None and hit[0] is signal:
            return hit[1]
        if self.streamed is not None:
            raise UnsupportedOptionError("stream", "is True: evaluate(data) / predict(data) of a later window runs "
                                         "the joined training and later snapshots on the device.",
                                         "a FusedTrainer over the later window (FusedTrainer(model, later, "
                                         "stream=True).evaluate()), or stream=False.")
        if continue_state and callable(self.loss_kind):
            raise ModelInputError("loss", "is a callable: it would see the rows of the training window too.",
                                  "use one of the built-in losses, or continue_state=False.")
        later = as_signal(signal)
        train = self.signal.to("cpu") if self.signal.device.type != "cpu" else self.signal
        joined, first = joined_window(train, later.to("cpu") if later.device.type != "cpu" else later,
                                      continue_state)
        h0 = None
        if first and self.h0 is not None:
            h0 = carry_initial_state(self.h0, self.graph.sequence_vertex, joined.supergraph().sequence_vertex,
                                     joined.num_vertices)
        if first:
            check_positions(self.model, joined)
        opts = dict(self._options, checkpoint_every=None)  # no gradients: nothing to recompute
        ev = FusedTrainer(self.model, joined, head=self.head, loss=self.loss_kind, device=self.device, h0=h0,
                          path=self.path, check=False, **opts)
        if first and ev.mean is not None:
            ev.mean = ev.mean.from_snapshot(first)
        ev._first_snapshot = first
        out = (ev, first, int(joined.node_ptr[first]))
        self._evaluators = {key: (signal, out)}
        return out

    # ------------------------------------------------------------ the trainer surface
    #: the first snapshot whose rows a later window's evaluator reports (0: all)
    _first_snapshot: int = 0

    def traffic(self) -> TrafficReport:
        r"""One process: no collective bytes (``measured`` and ``predicted``
        totals 0). ``report["host_to_device"]``: ``{"load": bytes the signal's
        transfer to the device moved at set-up (0 when it was there),
        "epoch": bytes the last epoch's streamed windows moved (stream=True,
        else 0)}``."""
        load = int(self.transfer_stats["bytes_moved"]) if self.transfer_stats else 0
        epoch = int(self.streamed.stats.bytes_moved) if self.streamed is not None else 0
        return TrafficReport({}, {}, host_to_device={"load": load, "epoch": epoch})

    def _carried_module(self) -> Optional[torch.nn.Module]:
        """The user's module on the black-box path (whose carried tensors the state saves), else ``None``."""
        return self.model.module if self.path == "blackbox" else None

    def state_dict(self) -> dict:
        r"""What a trainer built from the same arguments needs to continue bit
        for bit (:mod:`~pyg_dynscale.runtime.trainer_state`): the model's and
        head's ``state_dict``, the optimizer's, :attr:`epoch`, the global
        random generators (CPU, CUDA) and a black-box module's carried
        tensors."""
        return trainer_state({"model": self.model, "head": self.head}, self.optimizer, self.epoch,
                             self.device, carried=self._carried_module())

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output (this also sets the global random generators)."""
        self.epoch = load_trainer_state(state, {"model": self.model, "head": self.head}, self.optimizer,
                                        self.device, carried=self._carried_module(), owner="FusedTrainer")

    def _release(self) -> None:
        self._evaluators = {}
