r"""Communication-balanced vertex partitions of an event stream's node memory
(Sven, TPDS §4 / HPDC §4.2): which trainer owns the memory, last-update time
and mailbox (N&M) of each vertex.

The input is what a pre-sampling pass over one epoch asks of each vertex
(:func:`pyg_dynscale.ctdg.presample.trainer_requests`): ``requests`` is a
``[3, R]`` int64 tensor of rows :math:`(t, v, \omega(t, v))` -- trainer
:math:`t` needed vertex :math:`v` in :math:`\omega(t, v)` steps. Duplicate
``(t, v)`` rows add up. This module takes only tensors (no event stream).

**Cost model.** With owner :math:`o(v)`, trainer :math:`t` fetches (and writes
back) the rows of every vertex it asked for that another rank owns, and the
owner serves them:

.. math::

    C_{tq} = \sum_{v:\, o(v) = q} \omega(t, v) \quad (q \ne t), \qquad C_{tt} = 0,

the rows trainer :math:`t` gets from :math:`q` (:func:`communication_matrix`,
Sven's :math:`M \times M` topology matrix in units of one vertex's N&M). Rank
:math:`r` moves

.. math::

    \zeta_r = \sum_q C_{rq} + \sum_t C_{tr}

rows: its row sum (what it fetches) plus its column sum (what it serves). The
sum rather than the maximum of the two because a step has both phases: in
the dispatch rank :math:`r` receives its row sum and sends its column sum, in
the write-back of the aggregation the reverse, so over a step it sends and
receives about :math:`\zeta_r` rows each way. An all-to-all ends when its most
loaded rank does, so the **balance cost** (Sven's :math:`\zeta(W) = \max_j
\zeta(W_j)`, :func:`balance_cost`) is :math:`\max_r \zeta_r`. The **residual
matrix** (Sven Eq. 2, :func:`residual_matrix`) is
:math:`R = C_{\max} J - C` with :math:`J` all ones and :math:`C_{\max}` the
largest entry of :math:`C`; a large :math:`R` means idle links while the
slowest one finishes. Reported as its largest off-diagonal entry and the
off-diagonal mean (Sven shows :math:`R` as heat maps; it gives no scalar).

**Methods** (:func:`partition_vertices`):

* ``"range"`` -- DGL's: contiguous id blocks of equal size (sizes differ by
  at most one), :math:`o(v) = \lfloor v M / N \rfloor`.
* ``"interval"`` -- Sven HPDC's interval-based partition: id blocks of a
  constant granularity :math:`g` (option ``interval``) dealt round-robin,
  :math:`o(v) = \lfloor v / g \rfloor \bmod M`, so hot and cold id regions
  spread over all parts; ``interval=1`` is modulo. The paper does not give
  :math:`g`; the default is :func:`default_interval`
  (:math:`\min(8, \max(1, \lfloor N / 8M \rfloor))`: blocks of 8 ids once
  every part gets at least 8 blocks, finer for small graphs).
* ``"flexbicut"`` -- Re-FlexBiCut (Sven TPDS Alg. 3), see :func:`flexbicut`.
  Needs ``requests``.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from ..errors import PartitionError

__all__ = [
    "METHODS", "partition_vertices", "range_partition", "interval_partition", "flexbicut", "default_interval",
    "communication_matrix", "residual_matrix", "balance_cost", "rank_costs", "check_requests",
]

#: the methods :func:`partition_vertices` accepts
METHODS = ("range", "interval", "flexbicut")


def _int(name: str, value: object, low: int, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < low:
        raise PartitionError(name, f"is {value!r}.", fix)
    return int(value)


def _check_sizes(num_nodes: int, num_parts: int) -> tuple[int, int]:
    n = _int("num_nodes", num_nodes, 1, "give the number of vertices, an int >= 1.")
    m = _int("num_parts", num_parts, 1, "ask for at least one part (an int >= 1).")
    if m > n:
        raise PartitionError("num_parts", f"is {m} for {n} vertices: some parts would own nothing.",
                             f"use at most {n} parts.")
    return n, m


def check_requests(requests: Tensor, num_nodes: int, num_parts: int) -> Tensor:
    r"""Validate ``requests`` (``[3, R]`` int64 rows :math:`(t, v, \omega)`
    with :math:`0 \le t <` ``num_parts``, :math:`0 \le v <` ``num_nodes``,
    :math:`\omega \ge 0`); returns it on the CPU.

    Raises:
        PartitionError: naming ``requests`` and the fix.
    """
    if not isinstance(requests, Tensor):
        raise PartitionError("requests", f"is a {type(requests).__name__}, not a tensor.",
                             "give a [3, R] int64 tensor of (trainer, vertex, count) rows "
                             "(pyg_dynscale.ctdg.presample.trainer_requests).")
    if requests.dim() != 2 or requests.size(0) != 3:
        raise PartitionError("requests", f"has shape {tuple(requests.shape)}.",
                             "give a [3, R] tensor: rows trainer, vertex, count.")
    if requests.dtype != torch.int64:
        raise PartitionError("requests", f"has dtype {requests.dtype}.", "use torch.int64 (requests.long()).")
    r = requests.cpu()
    if r.size(1):
        checks = (("trainer", r[0], num_parts, f"trainer ids in [0, num_parts = {num_parts})"),
                  ("vertex", r[1], num_nodes, f"vertex ids in [0, num_nodes = {num_nodes})"))
        for what, x, hi, fix in checks:
            lo_, hi_ = int(x.min()), int(x.max())
            if lo_ < 0 or hi_ >= hi:
                raise PartitionError(f"requests[{0 if what == 'trainer' else 1}]",
                                     f"has {what} ids in [{lo_}, {hi_}].", f"use {fix}.")
        if int(r[2].min()) < 0:
            raise PartitionError("requests[2]", f"has a negative count ({int(r[2].min())}).", "use counts >= 0.")
    return r


def _check_owner(owner: Tensor, num_parts: int) -> Tensor:
    if not isinstance(owner, Tensor) or owner.dim() != 1 or owner.dtype != torch.int64:
        raise PartitionError("owner", f"is {type(owner).__name__}"
                             + (f" of shape {tuple(owner.shape)}, dtype {owner.dtype}" if isinstance(owner, Tensor) else "")
                             + ".", "give a [num_nodes] int64 tensor of part ids.")
    if owner.numel() and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
        raise PartitionError("owner", f"has part ids in [{int(owner.min())}, {int(owner.max())}].",
                             f"use part ids in [0, num_parts = {num_parts}).")
    return owner.cpu()


def default_interval(num_nodes: int, num_parts: int) -> int:
    r"""The default granularity of ``"interval"``: :math:`\min(8, \max(1, \lfloor N / 8M \rfloor))`."""
    return min(8, max(1, num_nodes // (8 * num_parts)))


def range_partition(num_nodes: int, num_parts: int) -> Tensor:
    r"""DGL's range partition: :math:`o(v) = \lfloor v M / N \rfloor` (``[N]`` int64)."""
    n, m = _check_sizes(num_nodes, num_parts)
    return torch.arange(n, dtype=torch.long) * m // n


def interval_partition(num_nodes: int, num_parts: int, interval: Optional[int] = None) -> Tensor:
    r"""Sven HPDC's interval partition: :math:`o(v) = \lfloor v / g \rfloor \bmod M`
    (``[N]`` int64), :math:`g` = ``interval`` (default :func:`default_interval`)."""
    n, m = _check_sizes(num_nodes, num_parts)
    g = default_interval(n, m) if interval is None else _int(
        "interval", interval, 1, "use a block size >= 1 (1: modulo), or leave it out for the default.")
    return torch.arange(n, dtype=torch.long) // g % m


def _dense_requests(requests: Tensor, num_nodes: int, num_parts: int) -> Tensor:
    """``W [N, M]`` float64 with ``W[v, t]`` = :math:`\\omega(t, v)` (duplicate rows summed)."""
    w = torch.zeros(num_nodes * num_parts, dtype=torch.float64)
    w.index_add_(0, requests[1] * num_parts + requests[0], requests[2].to(torch.float64))
    return w.view(num_nodes, num_parts)


def communication_matrix(owner: Tensor, requests: Tensor, num_parts: int) -> Tensor:
    r""":math:`C [M, M]` (float64): :math:`C_{tq} = \sum_{v: o(v) = q} \omega(t, v)`
    for :math:`q \ne t`, zero diagonal -- the N&M rows trainer :math:`t` fetches
    from part :math:`q` over the pre-sampled epoch.

    Args:
        owner: ``[N]`` int64 part of each vertex.
        requests: ``[3, R]`` int64 rows (trainer, vertex, count).
        num_parts: :math:`M`.
    """
    m = _int("num_parts", num_parts, 1, "ask for at least one part (an int >= 1).")
    owner = _check_owner(owner, m)
    r = check_requests(requests, owner.numel(), m)
    c = torch.zeros(m * m, dtype=torch.float64)
    c.index_add_(0, r[0] * m + owner[r[1]], r[2].to(torch.float64))
    c = c.view(m, m)
    c.fill_diagonal_(0.0)
    return c


def residual_matrix(C: Tensor) -> Tensor:
    r"""Sven's Eq. 2: :math:`R = C_{\max} J - C` (``[M, M]``, :math:`J` all ones,
    :math:`C_{\max}` the largest entry of :math:`C`)."""
    if not isinstance(C, Tensor) or C.dim() != 2 or C.size(0) != C.size(1) or C.numel() == 0:
        raise PartitionError("C", f"is not a square matrix ({tuple(C.shape) if isinstance(C, Tensor) else type(C).__name__}).",
                             "give the [M, M] communication_matrix(owner, requests, M).")
    return C.max() - C


def rank_costs(C: Tensor) -> Tensor:
    r""":math:`\zeta_r` = row sum + column sum of :math:`C` (``[M]``): the rows rank
    :math:`r` fetches plus the rows it serves."""
    return C.sum(1) + C.sum(0)


def balance_cost(owner: Tensor, requests: Tensor, num_parts: int) -> float:
    r"""Sven's balance cost :math:`\max_r \zeta_r` (see the module docstring)."""
    return float(rank_costs(communication_matrix(owner, requests, num_parts)).max())


def partition_vertices(method: str, num_nodes: int, num_parts: int, requests: Optional[Tensor] = None,
                       **options) -> Tensor:
    r"""The owner of every vertex, ``[num_nodes]`` int64 in ``[0, num_parts)``.

    Args:
        method: ``"range"``, ``"interval"`` or ``"flexbicut"``.
        num_nodes, num_parts: :math:`N`, :math:`M` (:math:`1 \le M \le N`).
        requests: ``[3, R]`` int64 (trainer, vertex, count) rows, trainer ids
            in ``[0, num_parts)``: needed by ``"flexbicut"``, ignored (but
            validated when given) by the others.
        **options: ``interval`` (``"interval"``, and ``"flexbicut"``'s start);
            ``slack``, ``max_rounds`` (``"flexbicut"``).

    Raises:
        PartitionError: an unknown method or option, bad sizes, malformed
            ``requests``, ``"flexbicut"`` without ``requests``.
    """
    if method not in METHODS:
        raise PartitionError("method", f"is {method!r}.", f"use one of {', '.join(METHODS)}.")
    n, m = _check_sizes(num_nodes, num_parts)
    allowed = {"range": (), "interval": ("interval",), "flexbicut": ("interval", "slack", "max_rounds")}[method]
    for key in options:
        if key not in allowed:
            raise PartitionError(key, f"is not an option of method {method!r}.",
                                 f"use {', '.join(allowed)}." if allowed else "give no options.")
    if requests is not None:
        requests = check_requests(requests, n, m)
    if method == "range":
        return range_partition(n, m)
    if method == "interval":
        return interval_partition(n, m, options.get("interval"))
    if requests is None:
        raise PartitionError("requests", "is None: flexbicut balances the requests of a pre-sampled epoch.",
                             "pass requests = pyg_dynscale.ctdg.presample.trainer_requests(...), or use "
                             "method='interval' / 'range'.")
    return flexbicut(n, m, requests, **options)


def flexbicut(num_nodes: int, num_parts: int, requests: Tensor, interval: Optional[int] = None,
              slack: float = 0.1, max_rounds: int = 20) -> Tensor:
    raise NotImplementedError("flexbicut: Re-FlexBiCut is not built yet; use method='interval' or 'range'.")
