r"""Adaptive stale embedding aggregation (DGC §5.2, Eq. 6-7).

A sender compares every row it would send with the last copy it
*transmitted* of that row (not the previous epoch's value: errors would
accumulate and a slowly drifting row might never be sent) and sends only the
rows whose L2 distance exceeds a threshold :math:`\theta_r`; the receiver
reuses its cached copy of the others. Per exchange and epoch :math:`r`:

.. math::

    d_i = \lVert x_i - \hat x_i \rVert_2, \qquad
    D_r = \max_i d_i, \qquad
    \theta_r = f(\ell) \cdot D_r, \qquad
    \text{send } i \iff d_i > \theta_r

with :math:`\hat x_i` the last transmitted copy and the factor :math:`f` of
the policy (:class:`StaleConfig`), where
:math:`\mathrm{norm}(\ell_{r-1}) = (\ell_1 - \ell_{r-1}) / \ell_1` (Eq. 7) from
the global training losses of the first and the previous epoch:

* ``static:c`` -- :math:`f = c` (DGC's Table 2);
* ``printed`` -- Eq. 6 as printed, :math:`f = 1/(1 + e^{\mathrm{norm}})`:
  it *shrinks* from 0.5 toward 0.27 as the loss falls;
* ``intent`` -- the sign-corrected Eq. 6, :math:`f = 1/(1 + e^{-\mathrm{norm}})`:
  it grows from 0.5 toward 0.73 as the loss falls (the paper's stated intent
  "small early, larger later", and what Table 3's traffic figures fit);
* ``ramp`` -- :math:`f = \tanh(\mathrm{norm}/2)`: literally small early
  (0 at the first loss), growing to 0.46;
* ``rise`` -- :math:`f = 0.7 + 0.2 \min(1, \mathrm{norm} / 0.2)`: a
  loss-driven schedule that does grow in practice (Eq. 6's forms barely move
  when the loss falls by only 5-30%, as link losses do), from 0.7 to 0.9 once
  the loss fell by 20%; measured, it did no better than a constant 0.9;
* ``drift:eps`` -- the recommended policy, an error budget instead of a
  factor of :math:`D_r`: per exchange and destination rank, the sender sends
  the rows of largest drift :math:`d_i` until the copy the receiver holds is
  within :math:`\epsilon` (relative Frobenius norm) of the current rows,

  .. math::

      \sqrt{\textstyle\sum_{i \notin \mathrm{sent}} d_i^2} \le
      \epsilon \, \lVert X \rVert_F ,

  i.e. it caches the rows of smallest drift while their summed squared drift
  fits the budget. The threshold is measured, not scheduled: rows that stop
  changing are not re-sent, and when the embeddings move more rows go
  (``eps = 0`` sends every row: the exact path). Default
  :data:`DRIFT_EPS`, over every kind (:data:`DRIFT_KINDS`);
* ``adaptive`` -- a deprecated alias (it warns) of what that name ran until
  now: the constant :math:`\theta_r = 0.9 D_r` over every kind, i.e.
  ``static:0.9`` with the readout; it does not adapt beyond :math:`D_r`
  itself.

The first epoch has no cache and sends everything. Every rank knows that,
so no mask moves then. Afterwards each exchange first moves a bit mask over
its planned rows (fixed sizes; ``stale_meta`` bytes), then only the fresh
rows (sizes derived from the masks on both sides).

**Host reads.** The distances, :math:`D_r`, :math:`\theta_r`, the mask, its
packing and unpacking (:mod:`.stale_mask`) and the fresh rows' indices stay
on the training device. The host reads one small tensor per exchange after
the first epoch: the fresh rows per peer in both directions -- the row
``all_to_all``'s split sizes, which a collective of variable size takes on
the host -- with :math:`D_r` and :math:`\theta_r` for :attr:`StaleCache.history`.
The first epoch reads nothing.

**Scope of D** (``scope``): ``"local"`` -- the largest distance among the
rows one sending rank has for one exchange (no extra collective);
``"global"`` -- the largest over all ranks (one 8-byte all-reduce per
exchange, counted in ``stale_meta``), so every rank uses the same
:math:`\theta_r` (``drift`` does not use :math:`D_r`: no effect there).

**Backward** (``backward``): ``"skip"`` -- a cached row is a constant on the
receiver: no gradient row goes back for it (the Sancus treatment DGC cites);
``"send"`` -- gradient rows go back for every planned row and are applied to
the sender's *current* activation of it (an approximation: the receiver used
an older value).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from ..errors import ModelInputError
from .stale_mask import MaskLayout, positions

__all__ = ["StaleConfig", "StaleCache", "POLICIES", "ADAPTIVE", "DEFAULT_KINDS", "STALE_KINDS", "DRIFT_EPS",
           "DRIFT_KINDS", "drift_mask"]

POLICIES = ("off", "static", "printed", "intent", "ramp", "rise", "drift", "adaptive")
STALE_KINDS = ("spatial", "temporal", "redistribution", "readout")
#: What the deprecated ``policy="adaptive"`` runs: the constant :math:`\theta_r = 0.9 D_r`
#: over every kind, the link readout included (``static:0.9`` with those kinds;
#: docs/stale.md measures it: 95% less traffic, England COVID MPNN-LSTM's MSE +39.7%).
ADAPTIVE = ("static", 0.9, ("spatial", "temporal", "redistribution", "readout"))
#: ``drift``'s relative error budget :math:`\epsilon` when none is given (docs/stale.md).
DRIFT_EPS = 0.2
#: Kinds ``drift`` covers unless told otherwise: every kind (the readout dominates link traffic).
DRIFT_KINDS = ("spatial", "temporal", "redistribution", "readout")
#: Kinds a policy covers unless told otherwise (``adaptive``: :data:`ADAPTIVE`'s).
DEFAULT_KINDS = ("spatial", "temporal", "redistribution")


def policy_factor(policy: str, c: Optional[float], norm: float) -> float:
    r""":math:`\theta_r / D_r` of ``policy`` at loss progress ``norm``
    (Eq. 7; 0 before any progress)."""
    if policy == "adaptive":
        policy, c = ADAPTIVE[0], ADAPTIVE[1]
    if policy == "static":
        return float(c)
    if policy == "printed":
        return 1.0 / (1.0 + math.exp(norm))
    if policy == "intent":
        return 1.0 / (1.0 + math.exp(-norm))
    if policy == "ramp":
        return math.tanh(norm / 2.0)
    if policy == "rise":
        return 0.7 + 0.2 * min(1.0, max(norm, 0.0) / 0.2)
    if policy == "drift":  # not a factor of D: the error budget (history's "factor" column)
        return float(c)
    raise ValueError(f"unknown stale policy {policy!r}")


@dataclass(frozen=True)
class StaleConfig:
    r"""How the stale cache decides what to send.

    Args:
        policy: one of :data:`POLICIES` (``"off"``: the exact path).
        c: the factor of ``"static"`` (``math.inf``: nothing is re-sent after
            the first epoch); the error budget :math:`\epsilon` of
            ``"drift"`` (``None``: :data:`DRIFT_EPS`).
        kinds: exchange kinds the cache applies to (others stay exact);
            ``None``: :data:`DEFAULT_KINDS` (``drift``: :data:`DRIFT_KINDS`,
            ``adaptive``: :data:`ADAPTIVE`'s).
        backward: ``"skip"`` or ``"send"`` (module doc).
        scope: ``"local"`` or ``"global"`` scope of :math:`D_r`.
        per_kind: ``((kind, spec), ...)`` policies for single kinds that
            override ``policy`` there (``spec`` as in :meth:`parse`, e.g.
            ``(("temporal", "static:0.3"),)``); the kind must be in ``kinds``.
    """

    policy: str = "off"
    c: Optional[float] = None
    kinds: Optional[tuple] = None
    backward: str = "skip"
    scope: str = "local"
    per_kind: tuple = ()

    def __post_init__(self) -> None:
        if self.policy == "adaptive":
            warnings.warn("stale policy 'adaptive' is deprecated: it was never adaptive but the constant theta = 0.9 D "
                          "over every kind, which it still runs; write 'static:0.9' with kinds spatial, temporal, "
                          "redistribution, readout for the same, or 'drift' for the error-budget policy "
                          "(docs/stale.md).", FutureWarning, stacklevel=3)
        if self.kinds is None:
            kinds = {"adaptive": ADAPTIVE[2], "drift": DRIFT_KINDS}.get(self.policy, DEFAULT_KINDS)
            object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "kinds", tuple(self.kinds))
        if self.policy not in POLICIES:
            raise ModelInputError("stale.policy", f"is {self.policy!r}.", f"use one of {POLICIES}.")
        if self.policy == "drift":
            if self.c is None:
                object.__setattr__(self, "c", DRIFT_EPS)
            if not (self.c >= 0) or math.isnan(self.c) or math.isinf(self.c):
                raise ModelInputError("stale.c", f"is {self.c!r} for the drift policy.",
                                      "give a finite relative error budget eps >= 0, e.g. 'drift:0.1'.")
        if self.policy == "static":
            if self.c is None or not (self.c >= 0) or math.isnan(self.c):
                raise ModelInputError("stale.c", f"is {self.c!r} for the static policy.",
                                      "give a factor c >= 0 (theta = c * D), e.g. 'static:0.5'.")
        bad = [k for k in self.kinds if k not in STALE_KINDS]
        if bad or not self.kinds:
            raise ModelInputError("stale.kinds", f"is {self.kinds!r}.", f"choose a non-empty subset of {STALE_KINDS}.")
        if self.backward not in ("skip", "send"):
            raise ModelInputError("stale.backward", f"is {self.backward!r}.", "use 'skip' or 'send'.")
        if self.scope not in ("local", "global"):
            raise ModelInputError("stale.scope", f"is {self.scope!r}.", "use 'local' or 'global'.")
        overrides = {}
        for kind, spec in self.per_kind:
            if kind not in self.kinds:
                raise ModelInputError("stale.per_kind", f"sets a policy for {kind!r}, which is not in kinds {self.kinds}.",
                                      "add the kind to kinds, or drop its override.")
            sub = StaleConfig.parse(spec)
            if not sub.enabled or sub.per_kind:
                raise ModelInputError("stale.per_kind", f"gives {kind!r} the policy {spec!r}.",
                                      "use a policy such as 'static:0.5' (leave the kind out of kinds to keep it exact).")
            overrides[kind] = (sub.policy, sub.c)
        object.__setattr__(self, "_overrides", overrides)  # parsed once: factor() runs for every exchange

    @classmethod
    def parse(cls, spec: "str | StaleConfig | None", **options: Any) -> "StaleConfig":
        """``"off"``, ``"static:0.5"``, ``"printed"``, ``"intent"``, ``"ramp"``,
        ``"rise"``, ``"drift"``, ``"drift:0.05"``, ``"adaptive"`` (deprecated)
        (or a :class:`StaleConfig`, returned as is)."""
        if spec is None:
            return cls("off")
        if isinstance(spec, StaleConfig):
            return spec
        text = str(spec).strip().lower()
        if text.startswith("static"):
            _, _, c = text.partition(":")
            try:
                value = float(c)
            except ValueError:
                raise ModelInputError("stale", f"is {spec!r}.", "write the static factor as 'static:<c>', e.g. 'static:0.5'.") from None
            return cls("static", value, **options)
        if text.startswith("drift:"):
            try:
                value = float(text.partition(":")[2])
            except ValueError:
                raise ModelInputError("stale", f"is {spec!r}.", "write the error budget as 'drift:<eps>', e.g. 'drift:0.1'.") from None
            return cls("drift", value, **options)
        return cls(text, **options)

    @property
    def enabled(self) -> bool:
        return self.policy != "off"

    def factor(self, norm: float, kind: Optional[str] = None) -> float:
        r""":math:`\theta_r / D_r` for an exchange of ``kind`` (default: the
        main policy); ``drift``'s :math:`\epsilon`."""
        policy, c = self.policy_of(kind)
        return policy_factor(policy, c, norm)

    def policy_of(self, kind: Optional[str]) -> tuple:
        """``(policy, c)`` that applies to exchanges of ``kind``."""
        return self._overrides.get(kind, (self.policy, self.c))  # type: ignore[attr-defined]

    def describe(self) -> str:
        p = f"{self.policy}:{self.c:g}" if self.policy in ("static", "drift") else self.policy
        extra = "".join(f", {k} {v}" for k, v in self.per_kind)
        return f"{p} (kinds {','.join(self.kinds)}{extra}, backward {self.backward}, D {self.scope})"


@dataclass
class _State:
    sent: Optional[Tensor] = None   # [n_send, w] last transmitted copy of each planned send row
    recv: Optional[Tensor] = None   # [n_recv, w] cached copy of each planned received row
    key: Optional[tuple] = None     # _key_code of the exchange using it
    masks: Optional[tuple] = None   # (send, receive) MaskLayout of the exchange, built once on the device

    def mask_layouts(self, send_splits: list, recv_splits: list, device: torch.device) -> tuple:
        """The exchange's ``(send, receive)`` :class:`.MaskLayout` (built on the first masked epoch)."""
        m = self.masks
        if m is None or not (m[0].matches(send_splits, device) and m[1].matches(recv_splits, device)):
            self.masks = (MaskLayout(send_splits, device), MaskLayout(recv_splits, device))
        return self.masks


def _key_code(key: tuple) -> tuple:
    """An exchange key's block and the bytes of its phase, as integers (a checkpoint holds tensors only)."""
    return (int(key[0]),) + tuple(str(key[1]).encode())


class _StaleRows(torch.autograd.Function):
    """Move the fresh rows; the others come from the receiver's cache."""

    @staticmethod
    def forward(ctx: Any, comm: Any, key: tuple, send: Tensor, fresh_idx: Tensor, fresh_send: list,  # type: ignore[override]
                fresh_recv: list, recv_fresh_idx: Tensor, cached: Tensor, full: tuple, mode: str,
                token: Tensor) -> tuple[Tensor, Tensor]:
        ctx.comm, ctx.key, ctx.mode, ctx.full = comm, key, mode, full
        ctx.fresh_send, ctx.fresh_recv = fresh_send, fresh_recv
        # index tensors on ctx, not saved: a checkpointed block's recomputation reuses the received rows without
        # calling this again, so it must not expect saved tensors from it
        ctx.fresh_idx, ctx.recv_fresh_idx = fresh_idx, recv_fresh_idx
        ctx.send_shape = send.shape
        got = comm.raw_exchange(send.index_select(0, fresh_idx), fresh_send, fresh_recv, key, "fwd")
        out = cached.to(send.dtype).clone()
        out.index_copy_(0, recv_fresh_idx, got.reshape((got.shape[0],) + tuple(out.shape[1:])))
        return out, token.clone()

    @staticmethod
    def backward(ctx: Any, grad: Optional[Tensor], grad_token: Optional[Tensor]) -> tuple:  # type: ignore[override]
        fresh_idx, recv_fresh_idx = ctx.fresh_idx, ctx.recv_fresh_idx
        comm = ctx.comm
        if ctx.mode == "send":  # a gradient row for every planned row, applied to the current activation
            send_splits, recv_splits = ctx.full
            back = comm.raw_exchange(grad.contiguous(), recv_splits, send_splits, ctx.key, "bwd").view(ctx.send_shape)
        else:  # cached rows were constants: only the fresh rows' gradients go back
            g = grad.index_select(0, recv_fresh_idx).contiguous()
            moved = comm.raw_exchange(g, ctx.fresh_recv, ctx.fresh_send, ctx.key, "bwd")
            back = grad.new_zeros(ctx.send_shape)
            back.index_copy_(0, fresh_idx, moved.reshape((moved.shape[0],) + tuple(ctx.send_shape[1:])))
        return None, None, back, None, None, None, None, None, None, None, grad_token


@dataclass
class StaleCache:
    r"""The caches of one rank and the per-epoch schedule.

    :meth:`exchange` replaces :meth:`Communicator.exchange` for the exchanges
    the config covers while training. ``history`` records, per epoch, the
    factor :math:`\theta_r/D_r` and per exchange :math:`D_r`,
    :math:`\theta_r` and the fresh / planned row counts of this rank.
    """

    config: StaleConfig
    states: dict = field(default_factory=dict)
    first_loss: Optional[float] = None
    last_loss: Optional[float] = None
    epoch: int = 0
    history: list = field(default_factory=list)
    #: the trainer's :class:`~pyg_dynscale.distributed.transport.Transport` (reports reduce through it)
    transport: Any = None
    #: restored caches not yet claimed by an exchange, in first-use order (:meth:`load_state_dict`)
    pending: list = field(default_factory=list)

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        r"""This rank's cache as ``{name: Tensor}`` (for a checkpoint's
        ``extra``, under a per-rank prefix): ``"progress"`` -- ``[epoch,
        first loss, last loss]`` (NaN: none yet) -- and per exchange slot, in
        the order the slots were first used, ``"<i>/sent"`` and
        ``"<i>/recv"`` (``[n_send, w]`` and ``[n_recv, ...]``) and
        ``"<i>/key"`` (the exchange's block and the bytes of its phase,
        checked on restore).
        Slots are numbered by first use because that order is the same in
        every run of one configuration (the engine's call order), while the
        slot objects are not."""
        nan = float("nan")
        out = {"progress": torch.tensor([float(self.epoch), nan if self.first_loss is None else self.first_loss,
                                         nan if self.last_loss is None else self.last_loss], dtype=torch.float64)}
        slots = [(k, st) for k, st in self.states.items() if st.sent is not None] + \
                [(None, st) for st in self.pending]
        for i, (_, st) in enumerate(slots):
            out[f"{i}/sent"] = st.sent.detach().clone()
            out[f"{i}/recv"] = st.recv.detach().clone()
            out[f"{i}/key"] = torch.tensor(st.key, dtype=torch.int64)
        return out

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s ``state``: the next exchanges continue
        with the saved caches (matched to slots in first-use order) and the
        loss history (Eq. 7); an empty ``state`` (a checkpoint written
        without a cache) leaves the cache empty."""
        if "progress" not in state:
            return
        epoch, first, last = (float(v) for v in state["progress"].tolist())
        self.epoch = int(epoch)
        self.first_loss = None if math.isnan(first) else first
        self.last_loss = None if math.isnan(last) else last
        self.states, self.pending, i = {}, [], 0
        while f"{i}/sent" in state:
            key = tuple(int(v) for v in state[f"{i}/key"].tolist())
            self.pending.append(_State(state[f"{i}/sent"].clone(), state[f"{i}/recv"].clone(), key))
            i += 1

    def _state(self, slot: Any, key: tuple) -> "_State":
        st = self.states.get(slot)
        if st is None:
            st = self.pending.pop(0) if self.pending else _State()
            if st.key is not None and st.key != _key_code(key):
                raise ModelInputError("stale cache", f"restored for exchange {st.key} but the run's next exchange is "
                                      f"{_key_code(key)}.", "resume with the configuration that wrote the checkpoint.")
            st.key = _key_code(key)
            self.states[slot] = st
        return st

    def applies(self, kind: str) -> bool:
        return self.config.enabled and kind in self.config.kinds

    def norm(self) -> float:
        """Eq. 7 from the global losses of the first and the previous epoch."""
        if self.first_loss is None or self.last_loss is None or self.first_loss == 0:
            return 0.0
        return (self.first_loss - self.last_loss) / self.first_loss

    def start_epoch(self) -> None:
        self.epoch += 1
        self.history.append({"epoch": self.epoch, "factor": self.factor(), "exchanges": {}})

    def factor(self) -> float:
        return self.config.factor(self.norm()) if self.config.enabled else 0.0

    def fresh_fraction(self, group: Optional[Any] = None) -> float:
        """Share of the planned rows sent in the last epoch, over all ranks (a
        collective: call it on every rank)."""
        ex = self.history[-1]["exchanges"].values() if self.history else []
        t = torch.tensor([sum(e["fresh"] for e in ex), sum(e["planned"] for e in ex)], dtype=torch.float64)
        if self.transport is not None:
            t = self.transport.all_reduce_host(t)
        else:
            dist.all_reduce(t, group=group)
        return float(t[0] / t[1]) if t[1] > 0 else 1.0

    def end_epoch(self, loss: float) -> None:
        if self.first_loss is None:
            self.first_loss = loss
        self.last_loss = loss

    def exchange(self, comm: Any, slot: Any, key: tuple, send: Tensor, send_splits: list, recv_splits: list) -> Tensor:
        """The received rows of exchange ``key`` (``slot`` identifies its row
        lists, e.g. one snapshot group's map), fresh or cached.

        Host reads: none in the first epoch; afterwards one (:meth:`_decide`):
        the fresh rows per peer, which the row ``all_to_all`` needs as split
        sizes."""
        st = self._state(slot, key)
        if st.sent is not None and st.sent.device != send.device:  # restored from a checkpoint on the host
            st.sent, st.recv = st.sent.to(send.device), st.recv.to(send.device)
        send_splits, recv_splits = [int(n) for n in send_splits], [int(n) for n in recv_splits]
        n_send, n_recv = sum(send_splits), sum(recv_splits)
        flat = send.detach().reshape(n_send, math.prod(send.shape[1:]))
        rec = self.history[-1]["exchanges"].setdefault(_name(key), {"D": [], "theta": [], "fresh": 0, "planned": 0})
        if st.sent is None:  # first epoch: everything, and both sides know it (no mask)
            fresh_send, fresh_recv = list(send_splits), list(recv_splits)
            fresh_idx = torch.arange(n_send, device=send.device)
            recv_fresh_idx = torch.arange(n_recv, device=send.device)
            D = theta = None
        else:
            fresh_send, fresh_recv, fresh_idx, recv_fresh_idx, D, theta = self._decide(
                comm, st, key, flat, send_splits, recv_splits)
        cached = st.recv if st.recv is not None else send.new_zeros((n_recv,) + tuple(send.shape[1:]))
        if comm.token is None:
            comm.start(torch.is_grad_enabled() and send.requires_grad)
        out, comm.token = _StaleRows.apply(comm, key, send.contiguous(), fresh_idx, fresh_send, fresh_recv,
                                           recv_fresh_idx, cached, (list(send_splits), list(recv_splits)),
                                           self.config.backward, comm.token)
        # caches: the sender's last transmitted copies, the receiver's copies (equal by construction)
        sent = st.sent if st.sent is not None else flat.new_zeros(flat.shape)
        st.sent = sent.index_copy(0, fresh_idx, flat.index_select(0, fresh_idx))
        st.recv = out.detach().clone()
        rec["D"].append(D)
        rec["theta"].append(None if theta is None or math.isinf(theta) else theta)
        rec["fresh"] += sum(fresh_send)
        rec["planned"] += n_send
        return out

    def _decide(self, comm: Any, st: "_State", key: tuple, flat: Tensor, send_splits: list,
                recv_splits: list) -> tuple:
        r"""Which rows go, decided on the device: the mask, its exchange (bit-packed,
        :mod:`.stale_mask`) and the one host read of the exchange -- the
        fresh rows per peer in both directions (the split sizes of the row
        ``all_to_all``), :math:`D_r` and :math:`\theta_r` for the history, in
        one small tensor.

        Returns:
            ``(fresh_send, fresh_recv, fresh_idx, recv_fresh_idx, D, theta)``:
            fresh rows per destination and per source (host lists), the
            indices of the fresh rows among the sent and the received ones
            (device), :math:`D_r` and :math:`\theta_r` (host floats).
        """
        device = flat.device
        send_mask, recv_mask = st.mask_layouts(send_splits, recv_splits, device)
        n_send = flat.shape[0]
        meta = (key[0], key[1], "stale_meta")
        d = (flat - st.sent).norm(dim=1) if n_send else flat.new_zeros(0)
        # D and theta stay 0-dim float64 device tensors: the same doubles the host floats held, never read here
        D = d.max().to(torch.float64) if n_send else torch.zeros((), dtype=torch.float64, device=device)
        policy, c = self.config.policy_of(key[2])  # the same on every rank: all or none reduce D
        if self.config.scope == "global" and policy != "drift":  # drift's budget does not use D
            D = comm.raw_all_reduce(D.reshape(1), meta, "fwd", op=dist.ReduceOp.MAX).reshape(())
        theta: "Tensor | float"
        if policy == "drift":
            fresh = drift_mask(d, flat.pow(2).sum(dim=1), send_splits, float(c))
            # the largest drift left to the cache (drifts are >= 0: a fresh row's 0 never wins; none kept: 0)
            theta = torch.where(fresh, d.new_zeros(()), d).max().to(torch.float64) if n_send else D.new_zeros(())
        else:
            f = self.config.factor(self.norm(), key[2])
            if math.isinf(f):
                theta = math.inf
                fresh = d > theta
            else:
                theta = D * f
                # theta = 0 (or NaN) sends every row (c = 0 is the exact path plus the masks)
                fresh = (d > theta) | ~(theta > 0)
        got = comm.raw_exchange(send_mask.pack(fresh), send_mask.sizes, recv_mask.sizes, meta, "fwd")
        recv_fresh = recv_mask.unpack(got)
        R, S = len(send_splits), len(recv_splits)
        parts = [send_mask.counts(fresh, torch.float64), recv_mask.counts(recv_fresh, torch.float64),
                 D.reshape(1)] + ([theta.reshape(1)] if isinstance(theta, Tensor) else [])
        # the exchange's one host read: the row all_to_all's split sizes (exact in float64), D and theta
        host = torch.cat(parts).tolist()
        fresh_send, fresh_recv = [int(v) for v in host[:R]], [int(v) for v in host[R:R + S]]
        D_host = host[R + S]
        theta_host = host[-1] if isinstance(theta, Tensor) else theta
        return (fresh_send, fresh_recv, positions(fresh, sum(fresh_send)), positions(recv_fresh, sum(fresh_recv)),
                D_host, theta_host)


def drift_mask(d: Tensor, sq_norms: Tensor, splits: list, eps: float) -> Tensor:
    r"""``drift``'s rows to send: per destination segment of ``splits``, the
    rows of smallest drift are cached while
    :math:`\sqrt{\sum_{\mathrm{cached}} d_i^2} \le \epsilon \lVert X \rVert_F`,
    the others are sent (``eps = 0``: every row).

    Args:
        d: ``[n]`` drift of each row from its last transmitted copy.
        sq_norms: ``[n]`` squared norm of each current row.
        splits: rows per destination rank (sum ``n``).
        eps: the relative error budget.

    Returns:
        ``[n]`` bool, ``True`` for the rows to send.
    """
    fresh = torch.ones(d.shape[0], dtype=torch.bool, device=d.device)
    if eps <= 0:
        return fresh
    o = 0
    for n in splits:  # one segment per destination (host sizes); nothing is read back
        if n:
            seg = d[o:o + n]
            order = torch.argsort(seg, stable=True)
            spent = torch.cumsum(seg.index_select(0, order).pow(2), 0)  # non-decreasing
            # the rows that fit are a prefix of ``order``: cached exactly where spent <= budget (NaN: sent);
            # the budget is the double eps^2 ||X||_F^2 as a 0-dim device tensor
            budget = sq_norms[o:o + n].sum().to(torch.float64) * (eps * eps)
            fresh[o:o + n].scatter_(0, order, ~(spent <= budget))
        o += n
    return fresh


def _name(key: tuple) -> str:
    return f"{key[0]}:{key[1]}"
