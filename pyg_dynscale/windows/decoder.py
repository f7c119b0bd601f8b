r"""Seq2seq decoding for :class:`~pyg_dynscale.windows.WindowTrainer`
(DCRNN's encoder-decoder, Li et al. ICLR'18; ReInc §1.1, Fig. 3): the
window's module is the *encoder*, a second per-snapshot cell the *decoder*,
which runs :math:`H` steps past the window from the encoder's final state.

For window :math:`w` (input snapshots :math:`s_w \ldots e_w`, targets
:math:`Y_{e_w}, \ldots, Y_{e_w+H-1}`), with :math:`h` the encoder's state
after :math:`X_{e_w}`:

.. math::
    (o_k, h) = \text{dec}(U_k, A_{e_w+k}, h), \qquad
    \hat Y_{e_w+k} = \text{head}(o_k), \qquad k = 0 \ldots H-1,

    U_0 = 0 \;(\text{GO}), \qquad
    U_k = \begin{cases} Z_{e_w+k} & \text{teacher-forced step} \\
                        \hat Y_{e_w+k-1} & \text{free-running step,} \end{cases}

decoder step :math:`k` running on the graph :math:`A_{e_w+k}` of its
target snapshot (the snapshot whose ``y`` it predicts; :math:`A_{e_w}` at
:math:`k = 0`, the encoder's last graph). The ground truth :math:`Z_t` fed
at snapshot :math:`t` depends on ``decoder_input``:

* ``"target"`` (DCRNN's): :math:`Z_t = Y_{t-1}`, the true value of the
  previous target step (the decoder's input width is the target's);
* ``"features"`` (ReInc's): :math:`Z_t = X_t`, the features of the next
  snapshot (the prediction must then have the features' width).

Because :math:`Z_t` sits on :math:`A_t`, the decoder's input-side
aggregation of a teacher-forced step is the input aggregation of snapshot
:math:`t` of the storage :math:`Z`. For ``"features"``, and for
``"target"`` on a signal whose ``y`` is its ``x`` shifted by one snapshot
(:func:`~pyg_dynscale.windows.view.series_signal`, PyGT's index-batching
data, unstandardized: :math:`Y_{t-1} = X_t`), :math:`Z` *is* the encoder's
input storage: the decoder reads the encoder's precomputed input basis
(:mod:`~pyg_dynscale.nn.reuse`, through the trainer's global cache) and
never aggregates an input itself (**reuse between decoder and encoder**).
That needs a decoder of the encoder's reuse class whose basis is the
encoder's (same number of hops and normalization: checked on one snapshot,
bit for bit). Otherwise (``y`` not ``x`` shifted, e.g. standardized
features, or another basis) the decoder's basis of :math:`Z` is computed
once for the whole storage and reused by every window and epoch. The GO step
reads a zero basis (the aggregation of zeros); a free-running step computes
the input basis of the prediction on the step's graph with its gradient (it
depends on the parameters) and runs the reuse's step on it, as a
teacher-forced step does. With a bounded cache (``cache_bytes``) a shared
basis is read through the cache without inserting (held entries are reused,
missing ones computed); a basis of its own is then not built and a
teacher-forced step computes the ground truth's basis on its graph. Without a
reuse object the decoder is called as it is.

**Teacher forcing** (scheduled sampling with a fixed probability
:math:`p`): in :meth:`WindowTrainer.train_epoch`, step :math:`k \ge 1` of
global batch :math:`b` of epoch :math:`\epsilon` is teacher-forced for all
windows of the batch iff draw :math:`k` of :func:`teacher_forcing_mask`
``(seed, epoch, b, H, p)`` is true: deterministic, the same on every rank.
:math:`p = 1`: always the ground truth; :math:`p = 0`: always the
prediction. :meth:`WindowTrainer.evaluate` always runs free.
"""
from __future__ import annotations

import copy
import hashlib
from typing import Any, Optional, Union

import torch
from torch import Tensor

from ..errors import ModelInputError, UnsupportedModelError, UnsupportedOptionError
from ..nn.reuse import reuse_for
from ..nn.snapshot_model import SnapshotModel, default_dtype

__all__ = ["DECODER_INPUTS", "Seq2Seq", "teacher_forcing_mask", "build_seq2seq"]

#: what a teacher-forced decoder step is fed (module docstring)
DECODER_INPUTS = ("target", "features")


def teacher_forcing_mask(seed: int, epoch: int, batch: int, horizon: int, p: float) -> Tensor:
    r"""``[H]`` bools: which decoder steps of global batch ``batch`` of
    training epoch ``epoch`` are teacher-forced. Entry 0 (the GO step) is
    false; entry :math:`k \ge 1` is :math:`u_k < p` with :math:`u` drawn
    uniformly in :math:`[0, 1)` (float64) by a ``torch.Generator`` seeded
    with the 4-byte BLAKE2b digest of ``"seed,epoch,batch"`` (little-endian;
    torch's CPU generator keeps 32 bits of a seed)."""
    key = hashlib.blake2b(f"{int(seed)},{int(epoch)},{int(batch)}".encode(), digest_size=4).digest()
    g = torch.Generator().manual_seed(int.from_bytes(key, "little"))
    mask = torch.rand(horizon, generator=g, dtype=torch.float64) < float(p)
    mask[0] = False
    return mask


def _check_p(teacher_forcing: Any) -> float:
    if isinstance(teacher_forcing, bool) or not isinstance(teacher_forcing, (int, float)) or not (
            0.0 <= float(teacher_forcing) <= 1.0):
        raise ModelInputError("teacher_forcing", f"is {teacher_forcing!r}.",
                              "give the probability that a decoder step is fed the ground truth, in [0, 1].")
    return float(teacher_forcing)


def build_seq2seq(trainer: Any, decoder: Union[None, str, torch.nn.Module], teacher_forcing: Any,
                  decoder_input: str, target: str) -> Optional["Seq2Seq"]:
    """The trainer's :class:`Seq2Seq` (``None`` without a decoder), arguments checked."""
    p = _check_p(teacher_forcing)
    if decoder_input not in DECODER_INPUTS:
        raise ModelInputError("decoder_input", f"is {decoder_input!r}.", f"use one of {DECODER_INPUTS}.")
    if decoder is None:
        if p != 0.0:
            raise ModelInputError("teacher_forcing", f"is {teacher_forcing!r} without a decoder.",
                                  "pass decoder='copy' or a decoder cell (seq2seq), or teacher_forcing=0.")
        return None
    return Seq2Seq(trainer, decoder, p, decoder_input, target)


class Seq2Seq:
    r"""The decoder of a :class:`~pyg_dynscale.windows.WindowTrainer`
    (module docstring).

    Args:
        trainer: the trainer (its encoder ``model`` wrapped and probed, its
            storage not built yet).
        decoder: ``"copy"`` (a deep copy of the encoder's module: the same
            architecture and initial values, its own parameters) or a
            per-snapshot module with PyGT's signature whose state has the
            encoder's widths.
        teacher_forcing: :math:`p \in [0, 1]`.
        decoder_input: ``"target"`` or ``"features"``.
        target: the signal's target field.

    Attributes:
        decoder: the decoder as a :class:`~pyg_dynscale.nn.snapshot_model.SnapshotModel`.
        shared: whether teacher-forced steps read the encoder's input basis
            (set by :meth:`setup_reuse`).
    """

    def __init__(self, trainer: Any, decoder: Union[str, torch.nn.Module], p: float, decoder_input: str,
                 target: str) -> None:
        if trainer.sequence_model:
            raise ModelInputError("decoder", "is given for PyGT's BatchedDCRNN, a whole sequence model.",
                                  "pass its per-snapshot sibling (DCRNN) as the model, or decoder=None.")
        if trainer.loss_kind == "ce":
            raise ModelInputError("loss", "is 'ce' with a decoder: the decoder is fed its own predictions.",
                                  "use a regression loss ('mse', 'mae') for seq2seq.")
        if not trainer.store.fixed:
            raise UnsupportedOptionError(
                "decoder", "is given on a signal whose vertex set changes: the decoder carries the encoder's state "
                "row by row onto the target snapshots.", "a signal with a fixed vertex set, or decoder=None.")
        self.p, self.input, self.view = p, decoder_input, trainer.view
        sig = trainer.view.signal
        y = sig.fields[target].values
        if y.dim() > 2:
            raise ModelInputError(target, f"rows have shape {list(y.shape[1:])}.",
                                  "a decoder is fed target rows: give [N] or [N, F_y] targets.")
        F = int(trainer.view.x.shape[1]) if trainer.view.x.dim() == 2 else None
        #: width of the decoder's input rows (GO, ground truth, fed-back prediction)
        self.width = (1 if y.dim() == 1 else int(y.shape[1])) if decoder_input == "target" else F
        enc = trainer.model
        if isinstance(decoder, str):
            if decoder != "copy":
                raise ModelInputError("decoder", f"is {decoder!r}.", "pass 'copy' or a decoder module.")
            if F != self.width:
                raise ModelInputError(
                    "decoder", f"is 'copy', but the encoder reads F={F} features and the decoder's input (the "
                    f"{decoder_input}) is {self.width} wide.",
                    f"pass a decoder cell of the same kind with in_channels={self.width}.")
            module = copy.deepcopy(enc.module)
        elif isinstance(decoder, torch.nn.Module):
            module = decoder.module if isinstance(decoder, SnapshotModel) else decoder
        else:
            raise ModelInputError("decoder", f"is {type(decoder).__name__}.", "pass 'copy' or a decoder module.")
        if module is enc.module:
            raise ModelInputError("decoder", "is the encoder module itself.",
                                  "pass decoder='copy' (its own parameters) or another module.")
        self.decoder = SnapshotModel(module, depth=None)
        spec = self.decoder.spec
        if spec.evolving or spec.global_reason:
            raise UnsupportedModelError(f"decoder {spec.name} cannot run per window (it evolves its weights or "
                                        "normalizes over the whole batch).")
        n0 = int(sig.nodes_per_snapshot[0])
        try:
            self.decoder.probe(trainer.view.x.new_zeros(n0, self.width), edge_weight=sig.weighted)
        except ModelInputError as exc:
            raise ModelInputError("decoder", f"failed on {self.width}-wide input rows ({exc.problem})",
                                  f"pass a decoder whose input width is {self.width} (decoder_input="
                                  f"{decoder_input!r}).") from exc
        if not enc.state_widths or self.decoder.state_widths != enc.state_widths:
            raise ModelInputError(
                "decoder", f"carries states of widths {list(self.decoder.state_widths)}, the encoder "
                f"{list(enc.state_widths)}.", "give the decoder the encoder's hidden size (it starts from the "
                "encoder's final state).")
        self.impl: Any = None
        self.shared = False
        self._basis: Optional[Tensor] = None
        self._zero_k = 0
        self._graph_cache: dict = {}

    # ------------------------------------------------------------------ setup
    def setup_reuse(self, trainer: Any) -> None:
        """After the trainer built its reuse: the decoder's reuse object, and
        whether its teacher-forced input basis is the encoder's (:attr:`shared`)
        or its own (computed here once), or none."""
        if trainer.reuse_impl is None or trainer.cache is None:
            return
        cls = reuse_for(self.decoder.module)
        if cls is None:
            return
        t0 = self._first_snapshot(trainer)
        x0, ei0, ew0, _, _ = trainer.store.union([t0])
        applies = getattr(cls, "applies", None)
        if applies is not None and not applies(ei0, x0.shape[0], ew0):
            return
        with default_dtype(trainer.dtype):
            self.impl = cls(self.decoder.module, x0.new_zeros(x0.shape[0], self.width), ei0, ew0)
            self._zero_k = int(self.impl.basis.shape[1])
            self.impl.basis = None
            if cls is reuse_for(trainer.model.module) and self._truth_is_x(trainer):
                mine = cls(self.decoder.module, x0, ei0, ew0).basis
                theirs = cls(trainer.model.module, x0, ei0, ew0).basis
                self.shared = mine.shape == theirs.shape and bool(torch.equal(mine, theirs))
            if not self.shared and trainer.cache.global_cache.full is not None:
                counts = torch.tensor([b - a for a, b in zip(trainer.store.edge_ptr, trainer.store.edge_ptr[1:])],
                                      device=trainer.device)
                off = torch.repeat_interleave(torch.tensor(trainer.store.node_ptr[:-1], device=trainer.device), counts,
                                              output_size=trainer.store.edge_index.shape[1])
                self._basis = cls(self.decoder.module, self._truth_storage(trainer), trainer.store.edge_index + off,
                                  trainer.store.edge_weight).basis

    def _first_snapshot(self, trainer: Any) -> int:
        held = trainer.view.held
        return 0 if held is None else int(held[0])

    def _pairs(self, trainer: Any) -> Tensor:
        """``[P]`` storage positions ``i`` of the held snapshots :math:`t` whose
        :math:`t - 1` is held too (at ``i - 1``): those a teacher-forced step can read."""
        T = trainer.store.num_held
        held = trainer.view.held
        if held is None:
            return torch.arange(1, T)
        return (torch.nonzero(held[1:] - held[:-1] == 1).flatten() + 1) if T > 1 else torch.zeros(0, dtype=torch.long)

    def _by_snapshot(self, trainer: Any, rows: Tensor) -> Tensor:
        """``[T_held, n, w]`` view of the storage rows ``rows`` (a fixed vertex set)."""
        return trainer.store.by_snapshot(rows)

    def _truth_is_x(self, trainer: Any) -> bool:
        """Whether :math:`Z_t = X_t` on every held snapshot a teacher-forced step can read."""
        if self.input == "features":
            return True
        x = trainer.store.x
        if x.dim() != 2 or int(x.shape[1]) != self.width:
            return False
        i = self._pairs(trainer).to(trainer.device)
        xs = self._by_snapshot(trainer, x).index_select(0, i)
        ys = self._by_snapshot(trainer, trainer.store.y).index_select(0, i - 1)
        return bool(torch.equal(xs, ys.to(xs.dtype))) and ys.dtype == xs.dtype

    def _truth_storage(self, trainer: Any) -> Tensor:
        """``[N_held, width]``: :math:`Z_t` at the rows of every held snapshot (zeros where :math:`Y_{t-1}` is not held)."""
        if self.input == "features":
            return trainer.store.x
        i = self._pairs(trainer).to(trainer.device)
        ys = self._by_snapshot(trainer, trainer.store.y).to(trainer.dtype)
        z = ys.new_zeros(ys.shape)
        z[i] = ys[i - 1]
        return z.reshape(-1, self.width)

    def _truth(self, trainer: Any, ts: list) -> Tensor:
        r"""``[n, width]``: the ground truth :math:`Z_t` of snapshots ``ts`` (rows concatenated)."""
        if self.input == "features":
            return trainer.store.gather(trainer.store.x, ts)
        y = trainer.store.gather(trainer.store.y, [t - 1 for t in ts])
        return y.reshape(y.shape[0], -1).to(trainer.device, trainer.dtype)

    def _graph(self, trainer: Any, ts: list, ei: Tensor, n: int, ew: Optional[Tensor]) -> Any:
        """The decoder's normalized batch graph of snapshots ``ts``: once per batch
        size on a static graph; no value read back (the self-loops are host data)."""
        if not trainer.store.static:
            return self.impl.normalize(ei, n, ew, trainer.dtype, trainer.store.union_loops(ts))
        B = len(ts)
        if B not in self._graph_cache:
            self._graph_cache = {B: self.impl.normalize(ei, n, ew, trainer.dtype, trainer.store.union_loops(ts))}
        return self._graph_cache[B]

    # ------------------------------------------------------------------ decoding
    def decode(self, trainer: Any, starts: list, states: tuple) -> Tensor:
        r"""Predictions ``[H B n, ...]`` (rows ordered step, window, node; the
        head applied) from the encoder's final ``states`` of the windows
        starting at ``starts``."""
        B, L, H = len(starts), self.view.lags, self.view.horizon
        head = trainer.head
        if self.decoder.training and self.p > 0.0:
            b = trainer.batch_index
            forced = teacher_forcing_mask(trainer.seed, trainer.epoch, b, H, self.p).tolist()
        else:
            forced = [False] * H
        preds: list = []
        prev: Optional[Tensor] = None
        for k in range(H):
            ts = [s + L - 1 + k for s in starts]
            x, ei, ew, ef, _ = trainer.store.union(ts)
            n = x.shape[0]
            if self.impl is not None:
                with default_dtype(trainer.dtype):
                    if k == 0:  # GO: the basis of zeros
                        basis = x.new_zeros(n, self._zero_k, self.width)
                    elif forced[k] and self.shared:
                        basis = trainer.cache.global_cache.read(ts)
                    elif forced[k] and self._basis is not None:
                        basis = trainer.store.gather(self._basis, ts)
                    else:  # the ground truth's basis, or the prediction's with its gradient (it depends on the parameters)
                        u = self._truth(trainer, ts) if forced[k] else prev
                        basis = self.impl.input_basis(u, ei, ew, trainer.store.union_loops(ts), grad=not forced[k])
                    y, states = self.impl.step(basis, self._graph(trainer, ts, ei, n, ew), states)
            else:
                u = x.new_zeros(n, self.width) if k == 0 else (self._truth(trainer, ts) if forced[k] else prev)
                y, states = self.decoder.step(u, ei, ew, states, ef)
            pred = head(y) if head is not None else y
            if k == 0 and pred.reshape(n, -1).shape[1] != self.width:
                raise ModelInputError(
                    "head", f"the decoder's predictions have shape {list(pred.shape[1:])} but it is fed "
                    f"{self.width}-wide rows (decoder_input={self.input!r}).",
                    f"pass head=torch.nn.Linear(<the decoder's output width>, {self.width}).")
            preds.append(pred)
            prev = pred.reshape(n, -1)
        return torch.cat(preds)
