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
* ``adaptive`` -- the policy this project's measurements recommend
  (:data:`ADAPTIVE`: :math:`0.9 D_r` over every kind, the link readout
  included; ``benchmarks/bench_stale.py``, ``docs/stale.md``). :math:`D_r`
  is measured every epoch, so the threshold still follows the embeddings'
  convergence.

The first epoch has no cache and sends everything. Every rank knows that,
so no mask moves then. Afterwards each exchange first moves a bit mask over
its planned rows (fixed sizes; ``stale_meta`` bytes), then only the fresh
rows (sizes derived from the masks on both sides).

**Scope of D** (``scope``): ``"local"`` -- the largest distance among the
rows one sending rank has for one exchange (no extra collective);
``"global"`` -- the largest over all ranks (one 8-byte all-reduce per
exchange, counted in ``stale_meta``), so every rank uses the same
:math:`\theta_r`.

**Backward** (``backward``): ``"skip"`` -- a cached row is a constant on the
receiver: no gradient row goes back for it (the Sancus treatment DGC cites);
``"send"`` -- gradient rows go back for every planned row and are applied to
the sender's *current* activation of it (an approximation: the receiver used
an older value).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["StaleConfig", "StaleCache", "POLICIES", "ADAPTIVE", "DEFAULT_KINDS", "STALE_KINDS"]

POLICIES = ("off", "static", "printed", "intent", "ramp", "rise", "adaptive")
STALE_KINDS = ("spatial", "temporal", "redistribution", "readout")
#: What ``policy="adaptive"`` runs: :math:`\theta_r = 0.9 D_r` over every kind,
#: the link readout included: the only measured policy that saves more than 80%
#: of the traffic (docs/stale.md); the loss-driven schedules (``intent``,
#: ``rise``) saved less without holding the metric better. It is not exact and
#: does not hold every task's metric within 1% (docs/stale.md, repeated seeds).
ADAPTIVE = ("static", 0.9, ("spatial", "temporal", "redistribution", "readout"))
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
    raise ValueError(f"unknown stale policy {policy!r}")


@dataclass(frozen=True)
class StaleConfig:
    r"""How the stale cache decides what to send.

    Args:
        policy: one of :data:`POLICIES` (``"off"``: the exact path).
        c: the factor of ``"static"`` (``math.inf``: nothing is re-sent after
            the first epoch).
        kinds: exchange kinds the cache applies to (others stay exact);
            ``None``: :data:`DEFAULT_KINDS` (``adaptive``: :data:`ADAPTIVE`'s).
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
        if self.kinds is None:
            object.__setattr__(self, "kinds", ADAPTIVE[2] if self.policy == "adaptive" else DEFAULT_KINDS)
        object.__setattr__(self, "kinds", tuple(self.kinds))
        if self.policy not in POLICIES:
            raise ModelInputError("stale.policy", f"is {self.policy!r}.", f"use one of {POLICIES}.")
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
        ``"adaptive"`` (or a :class:`StaleConfig`, returned as is)."""
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
        return cls(text, **options)

    @property
    def enabled(self) -> bool:
        return self.policy != "off"

    def factor(self, norm: float, kind: Optional[str] = None) -> float:
        r""":math:`\theta_r / D_r` for an exchange of ``kind`` (default: the main policy)."""
        policy, c = self._overrides.get(kind, (self.policy, self.c))  # type: ignore[attr-defined]
        return policy_factor(policy, c, norm)

    def describe(self) -> str:
        p = f"static:{self.c:g}" if self.policy == "static" else self.policy
        extra = "".join(f", {k} {v}" for k, v in self.per_kind)
        return f"{p} (kinds {','.join(self.kinds)}{extra}, backward {self.backward}, D {self.scope})"


@dataclass
class _State:
    sent: Optional[Tensor] = None   # [n_send, w] last transmitted copy of each planned send row
    recv: Optional[Tensor] = None   # [n_recv, w] cached copy of each planned received row


class _StaleRows(torch.autograd.Function):
    """Move the fresh rows; the others come from the receiver's cache."""

    @staticmethod
    def forward(ctx: Any, comm: Any, key: tuple, send: Tensor, fresh_idx: Tensor, fresh_send: list,  # type: ignore[override]
                fresh_recv: list, recv_fresh_idx: Tensor, cached: Tensor, full: tuple, mode: str,
                token: Tensor) -> tuple[Tensor, Tensor]:
        ctx.comm, ctx.key, ctx.mode, ctx.full = comm, key, mode, full
        ctx.fresh_send, ctx.fresh_recv = fresh_send, fresh_recv
        ctx.save_for_backward(fresh_idx, recv_fresh_idx)
        ctx.send_shape = send.shape
        got = comm.raw_exchange(send.index_select(0, fresh_idx), fresh_send, fresh_recv, key, "fwd")
        out = cached.to(send.dtype).clone()
        out.index_copy_(0, recv_fresh_idx, got.reshape((got.shape[0],) + tuple(out.shape[1:])))
        return out, token.clone()

    @staticmethod
    def backward(ctx: Any, grad: Optional[Tensor], grad_token: Optional[Tensor]) -> tuple:  # type: ignore[override]
        fresh_idx, recv_fresh_idx = ctx.saved_tensors
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


def _pack(mask: np.ndarray, splits: list) -> tuple[np.ndarray, list]:
    """Bit-pack ``mask`` per destination segment: ``(bytes, bytes per segment)``."""
    parts, sizes, o = [], [], 0
    for n in splits:
        p = np.packbits(mask[o:o + n])
        parts.append(p)
        sizes.append(int(p.shape[0]))
        o += n
    return (np.concatenate(parts) if parts else np.zeros(0, np.uint8)), sizes


def _unpack(packed: np.ndarray, sizes: list, counts: list) -> np.ndarray:
    out, o = [], 0
    for nbytes, n in zip(sizes, counts):
        out.append(np.unpackbits(packed[o:o + nbytes])[:n])
        o += nbytes
    return np.concatenate(out).astype(bool) if out else np.zeros(0, bool)


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
        lists, e.g. one snapshot group's map), fresh or cached."""
        st = self.states.setdefault(slot, _State())
        n_send, n_recv = int(sum(send_splits)), int(sum(recv_splits))
        flat = send.detach().reshape(n_send, math.prod(send.shape[1:]))
        rec = self.history[-1]["exchanges"].setdefault(_name(key), {"D": [], "theta": [], "fresh": 0, "planned": 0})
        if st.sent is None:  # first epoch: everything, and both sides know it (no mask)
            fresh = torch.ones(n_send, dtype=torch.bool, device=send.device)
            recv_fresh = np.ones(n_recv, dtype=bool)
            D = theta = None
        else:
            d = (flat - st.sent).norm(dim=1) if n_send else flat.new_zeros(0)
            D = float(d.max()) if n_send else 0.0
            if self.config.scope == "global":
                D = float(comm.raw_all_reduce(torch.tensor([D], dtype=torch.float64), (key[0], key[1], "stale_meta"),
                                           "fwd", op=dist.ReduceOp.MAX))
            f = self.config.factor(self.norm(), key[2])
            theta = math.inf if math.isinf(f) else f * D
            # theta = 0 sends every row (c = 0 is the exact path plus the masks)
            fresh = d > theta if theta > 0 else torch.ones(n_send, dtype=torch.bool, device=send.device)
            mask = fresh.cpu().numpy().astype(np.uint8)
            packed, sizes = _pack(mask, send_splits)
            recv_sizes = [(n + 7) // 8 for n in recv_splits]
            got = comm.raw_exchange(torch.from_numpy(packed).view(-1, 1).to(comm.device), sizes, recv_sizes,
                                    (key[0], key[1], "stale_meta"), "fwd")
            recv_fresh = _unpack(got.view(-1).cpu().numpy(), recv_sizes, recv_splits)
        fresh_idx = fresh.nonzero().flatten()
        fresh_send = _segment_sums(fresh.cpu().numpy(), send_splits)
        fresh_recv = _segment_sums(recv_fresh, recv_splits)
        recv_fresh_idx = torch.from_numpy(np.flatnonzero(recv_fresh)).to(send.device)
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
        rec["fresh"] += int(fresh_idx.numel())
        rec["planned"] += n_send
        return out


def _segment_sums(mask: np.ndarray, splits: list) -> list:
    bounds = np.concatenate([[0], np.cumsum(splits)]).astype(np.int64)
    c = np.concatenate([[0], np.cumsum(mask.astype(np.int64))])
    return [int(c[bounds[i + 1]] - c[bounds[i]]) for i in range(len(splits))]


def _name(key: tuple) -> str:
    return f"{key[0]}:{key[1]}"
