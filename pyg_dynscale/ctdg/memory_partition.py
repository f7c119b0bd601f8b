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
    "communication_matrix", "residual_matrix", "balance_cost", "rank_costs", "check_requests", "capacity",
    "balance_lower_bound",
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


def balance_lower_bound(requests: Tensor, num_nodes: int, num_parts: int) -> float:
    r"""A lower bound on the balance cost of any owner assignment (capacity ignored):

    .. math::

        \max_r \zeta_r \ \ge\ \frac{1}{M} \sum_r \zeta_r
        = \frac{2}{M} \sum_v \big(d_v - \omega(t_{o(v)}, v)\big)
        \ \ge\ \frac{2}{M} \sum_v \big(d_v - \max_t \omega(t, v)\big),

    :math:`d_v = \sum_t \omega(t, v)` (every off-owner request is fetched once
    and served once). It tells how much any partition could still gain: when
    every trainer requests every vertex about equally, no partition balances
    better than interval's.
    """
    n, m = _check_sizes(num_nodes, num_parts)
    w = _dense_requests(check_requests(requests, n, m), n, m)
    return float(2.0 * (w.sum(1) - w.max(1).values).sum() / m)


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


def _check_slack(slack: object) -> float:
    if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not math.isfinite(slack) or slack < 0:
        raise PartitionError("slack", f"is {slack!r}.", "use a finite number >= 0 (e.g. 0.1: parts may own 10% "
                             "more than N / M vertices).")
    return float(slack)


def capacity(num_nodes: int, num_parts: int, slack: float, start: Tensor) -> int:
    r"""The most vertices a part may own in :func:`flexbicut`:
    :math:`\max(\lceil (1 + \text{slack}) N / M \rceil, \max_q |W_q^{(0)}|)` (the second term only when
    the start's blocks are coarser than the slack)."""
    return max(math.ceil((1.0 + slack) * num_nodes / num_parts), int(torch.bincount(start, minlength=num_parts).max()))


def flexbicut(num_nodes: int, num_parts: int, requests: Tensor, interval: Optional[int] = None,
              slack: float = 0.1, max_rounds: int = 20) -> Tensor:
    r"""Re-FlexBiCut (Sven TPDS Alg. 3): recursive bisection of the trainer--vertex
    request graph with flexible vertex reassignment, minimising the balance cost
    :math:`\max_r \zeta_r` (module docstring) under a capacity: no part owns more
    than :func:`capacity` vertices (option ``slack``, default 0.1), otherwise one
    part owning everything would be optimal.

    The request graph is bipartite: trainers :math:`t_1..t_M` and vertices, an
    edge :math:`(t, v)` of weight :math:`\omega(t, v)`. With :math:`d_v =
    \sum_t \omega(t, v)`, moving :math:`v` from part :math:`p` to :math:`q`
    changes only two ranks' costs,

    .. math::

        \zeta_q \mathrel{+}= d_v - 2\omega(t_q, v), \qquad \zeta_p \mathrel{+}= 2\omega(t_p, v) - d_v,

    and a move is **accepted** only when it lowers the pair's key
    :math:`(\max(\zeta_p, \zeta_q), \zeta_p + \zeta_q)` lexicographically and
    :math:`q` has room: the largest cost never rises, and the descending-sorted
    cost vector strictly decreases, so the search ends. It starts from the
    ``"interval"`` partition (option ``interval``), hence its balance cost is
    never above interval's. Each round takes every trainer :math:`t_i` in turn
    (Alg. 3, line 4) through two stages:

    1. **Partition stage (BiCut).** :math:`G'`: :math:`t_i` the source, the other
       trainers contracted into the sink. Every vertex has one edge to each
       side (weights :math:`\omega(t_i, v)` and :math:`d_v - \omega(t_i, v)`), so
       the minimum :math:`s`--:math:`t` cut is exact and per vertex: the source
       side is :math:`\{v : 2\omega(t_i, v) > d_v\}`. Its vertices owned
       elsewhere join :math:`W_i`, largest :math:`\omega(t_i, v) - \omega(t_{o(v)}, v)`
       first, while :math:`W_i` has room (such a move lowers both
       :math:`\zeta_i` and the old owner's cost). The paper calls the
       Feige--Krauthgamer bisection approximation here instead; its balance
       constraint is the capacity and the accept rule here, and on this
       bipartite graph the unconstrained cut needs no approximation.
    2. **Flexible reassignment.** For every :math:`j \ne i`,
       :math:`Y_j` = the vertices of :math:`W_i` that :math:`t_j` also requests
       (shared between :math:`W_i` and :math:`t_j`), largest
       :math:`\omega(t_j, v) - \omega(t_i, v)` first: resign all of
       :math:`Y_j` to :math:`W_j` at once if accepted (Alg. 3, lines 9--11),
       otherwise one vertex at a time, each if accepted. This stage is what
       moves vertices that no trainer requests in majority (hot vertices
       shared by many trainers, the ones range and interval partitions pile
       onto one rank).

    Rounds repeat until one moves nothing, at most ``max_rounds`` times.
    Cost: :math:`O(R + NM)` per round plus the sorts.

    Args:
        num_nodes, num_parts: :math:`N`, :math:`M`.
        requests: ``[3, R]`` int64 (trainer, vertex, count) rows.
        interval: the start's block size (default :func:`default_interval`).
        slack: capacity slack (>= 0).
        max_rounds: at most this many rounds (>= 1).

    Returns:
        ``[N]`` int64 owners.
    """
    n, m = _check_sizes(num_nodes, num_parts)
    slack = _check_slack(slack)
    rounds = _int("max_rounds", max_rounds, 1, "use an int >= 1.")
    req = check_requests(requests, n, m)
    start = interval_partition(n, m, interval)
    cap = capacity(n, m, slack, start)
    if m == 1:
        return start
    W = _dense_requests(req, n, m).numpy()  # W[v, t] = omega(t, v)
    d = W.sum(1)
    own = start.numpy().copy()
    size = np.bincount(own, minlength=m).tolist()
    cost = rank_costs(communication_matrix(start, req, m)).tolist()

    def better(p: int, q: int, dp: float, dq: float) -> bool:
        a, b = cost[p] + dp, cost[q] + dq
        new, old = max(a, b), max(cost[p], cost[q])
        return new < old or (new == old and a + b < cost[p] + cost[q])

    def move(vs, p: int, q: int, dp: float, dq: float, k: int = 1) -> None:
        own[vs] = q
        cost[p] += dp
        cost[q] += dq
        size[p] -= k
        size[q] += k

    def ordered(vs: np.ndarray, key: np.ndarray) -> np.ndarray:
        return vs[np.argsort(key, kind="stable")]

    for _ in range(rounds):
        moved = 0
        for i in range(m):
            # 1. BiCut of G'_i: the source side's vertices owned elsewhere, largest gain first
            cand = np.nonzero((2.0 * W[:, i] > d) & (own != i))[0]
            cand = ordered(cand, W[cand, own[cand]] - W[cand, i])
            for v, p in zip(cand.tolist(), own[cand].tolist()):
                if size[i] >= cap:
                    break
                dp, dq = 2.0 * W[v, p] - d[v], d[v] - 2.0 * W[v, i]
                if better(p, i, dp, dq):
                    move(v, p, i, dp, dq)
                    moved += 1
            # 2. flexible reassignment: W_i's vertices shared with t_j go to W_j when accepted
            mine = np.nonzero(own == i)[0]
            for j in range(m):
                if j == i:
                    continue
                ys = mine[(W[mine, j] > 0) & (own[mine] == i)]
                if not ys.size:
                    continue
                ys = ordered(ys, W[ys, i] - W[ys, j])
                gp, gq = 2.0 * W[ys, i] - d[ys], d[ys] - 2.0 * W[ys, j]
                dp, dq = float(gp.sum()), float(gq.sum())
                if size[j] + ys.size <= cap and better(i, j, dp, dq):
                    move(ys, i, j, dp, dq, ys.size)
                    moved += ys.size
                    continue
                for v, dp, dq in zip(ys.tolist(), gp.tolist(), gq.tolist()):
                    if size[j] >= cap:
                        break
                    if better(i, j, dp, dq):
                        move(v, i, j, dp, dq)
                        moved += 1
        if not moved:
            break
    return torch.from_numpy(own).to(torch.long)
