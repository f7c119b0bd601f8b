r"""Synthetic dynamic graphs with controllable non-uniformity (DGC §7.3.1).

DGC studies how spatial and temporal non-uniformity affect partitioning on
synthetic graphs whose total vertices, edges and snapshots are fixed, whose
edges per snapshot follow a normal distribution of chosen variance and whose
vertices appear in sequences of chosen length spread. :func:`generate_dynamic_graph`
builds such graphs, with power-law degrees, at tens of millions of vertex-time
nodes in seconds: every step is a tensor operation over all snapshots at once
(no Python loop over nodes, edges or snapshots).

The model, step by step (see ``docs/synthetic.md`` for the full derivation):

1. **Vertex weights** (power law). A random permutation gives each vertex
   :math:`i` a rank :math:`r_i \in \{1, \ldots, |V|\}` and the weight
   :math:`w_i = r_i^{-1/(\gamma - 1)}`. Endpoints are drawn proportionally to
   :math:`w` (a Chung-Lu model), so expected degrees are proportional to
   :math:`w` and the degree distribution has the tail
   :math:`P(d) \propto d^{-\gamma}`.
2. **Sequence lengths** (temporal non-uniformity). Vertex :math:`i` appears in
   :math:`L_i \in \{1, \ldots, T\}` snapshots, with
   :math:`L_i \approx \mathrm{clip}(\mathcal{N}(\mu_L, (\sigma_L \mu_L)^2), 1, T)`,
   :math:`\mu_L = pT`, rescaled and rounded so that
   :math:`\sum_i L_i = N = \mathrm{round}(|V| \, T \, p)` exactly.
3. **Placement.** Vertex :math:`i` occupies the cyclic run of snapshots
   :math:`s_i, s_i + 1, \ldots, s_i + L_i - 1 \pmod T` from a uniform start
   :math:`s_i`, so every snapshot expects :math:`N/T` vertices whatever the
   lengths are (the temporal knob does not leak into the node counts).
4. **Edges per snapshot** (spatial non-uniformity).
   :math:`m_t \approx \mathrm{clip}(\mathcal{N}(\mu_E, (\sigma_E \mu_E)^2), 0,
   \cdot)`, :math:`\mu_E = |E| / T`, rescaled and rounded so that
   :math:`\sum_t m_t = |E|` exactly.
5. **Endpoints.** Each of the :math:`m_t` edges picks its source and target
   among the vertices present in snapshot :math:`t` with probability
   :math:`\propto w` (inverse-CDF sampling with :func:`torch.searchsorted` on
   one cumulative weight table of all vertex-time nodes); without self loops
   a target equal to its source is redrawn from the weights with the source
   excluded, which is exactly rejection sampling done in one pass.
"""
from __future__ import annotations

import math
import operator
from typing import Literal

import torch
from torch import Tensor

from ..errors import SignalValidationError
from .fields import ptr_from_counts
from .signal import DynamicGraphSignal

TargetKind = Literal["degree", "none"]
TARGETS: tuple[str, ...] = ("degree", "none")


# --------------------------------------------------------------------- checks
def _check_int(value: object, name: str, minimum: int) -> int:
    """Python, numpy and torch integers pass; floats and bools are refused
    rather than silently truncated."""
    try:
        if isinstance(value, bool):
            raise TypeError
        out = operator.index(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError):
        raise SignalValidationError(name, f"must be an integer but is {value!r}.", f"pass an int >= {minimum}.") from None
    if out < minimum:
        raise SignalValidationError(name, f"must be >= {minimum} but is {out}.", f"pass an int >= {minimum}.")
    return int(out)


def _check_float(value: object, name: str) -> float:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SignalValidationError(name, f"must be a real number but is {value!r}.", "pass a float.") from None
    if math.isnan(out):
        raise SignalValidationError(name, "is NaN.", "pass a real number.")
    return out


# ----------------------------------------------------------- apportionment
def apportion(weights: Tensor, total: int, lower: Tensor, upper: Tensor, field: str) -> Tensor:
    r"""Integers :math:`n_i \in [\ell_i, u_i]` with :math:`\sum_i n_i =` ``total``
    that follow ``weights`` as closely as the bounds allow.

    Finds the scale :math:`c` with :math:`\sum_i \mathrm{clip}(c\, w_i,
    \ell_i, u_i) = \mathrm{total}` by safeguarded Newton iteration (the left
    side is continuous, piecewise linear and non-decreasing in :math:`c`), then rounds with the largest-remainder
    method, so the result is exact and every entry stays in its bounds.
    Entries with :math:`w_i = 0` stay at :math:`\ell_i`. Scaling, rather than
    shifting, keeps the relative spread (coefficient of variation) of the
    weights wherever the bounds do not bind.

    Args:
        weights: ``[K]`` non-negative float64.
        total: the required sum.
        lower, upper: ``[K]`` integer-valued float64 bounds (``upper`` may be
            ``inf``).
        field: parameter named in the error when no solution exists.

    Returns:
        ``[K]`` int64.
    """
    w = weights.to(torch.float64)
    lo = lower.to(torch.float64)
    hi = upper.to(torch.float64)
    reachable_hi = torch.where(w > 0, hi, lo)
    if float(lo.sum()) > total or float(reachable_hi.sum()) < total:
        raise SignalValidationError(
            field,
            f"asks for a total of {total}, but the bounds only allow {int(lo.sum())} .. {float(reachable_hi.sum()):.0f}.",
            "change the sizes so the total is reachable (see docs/synthetic.md).",
        )

    def f(c: float) -> tuple[float, float]:
        """The clipped sum at scale c and its slope (sum of unclipped weights)."""
        wc = w * c
        free = (wc > lo) & (wc < hi)
        return float(torch.clamp(wc, lo, hi).sum()), float(w[free].sum())

    # Safeguarded Newton: f is piecewise linear and non-decreasing, so a Newton
    # step is exact once the set of clipped entries stops changing (usually
    # 2-4 steps); bisection inside the bracket [c_lo, c_hi] guarantees progress.
    pos = float(w.sum())
    c = total / pos if pos > 0 else 1.0
    c_lo, c_hi = 0.0, math.inf
    for _ in range(3000):  # doubling needs at most ~2100 steps in float64
        val, slope = f(c)
        if abs(val - total) < 0.25:
            break
        if val < total:
            c_lo = c
        else:
            c_hi = c
        step = c + (total - val) / slope if slope > 0 else math.nan
        if c_lo < step < c_hi:
            c = step
        elif math.isinf(c_hi):
            c = 2.0 * c if c > 0 else 1.0
        else:
            c = 0.5 * (c_lo + c_hi)
        if c in (c_lo, c_hi):  # bracket exhausted at float precision; rounding fixes the rest
            break
    y = torch.clamp(w * c, lo, hi)
    base = torch.floor(y)
    frac = y - base
    need = total - int(base.sum())
    if need > 0:  # give +1 to the largest remainders that may still grow
        score = torch.where((base < hi) & (w > 0), frac, torch.full_like(frac, -1.0))
        idx = torch.sort(score, descending=True, stable=True).indices[:need]
        if bool((score[idx] < 0).any()):  # pragma: no cover - excluded by the feasibility check
            raise SignalValidationError(field, "could not be apportioned within the bounds.", "change the sizes.")
        base[idx] += 1
    elif need < 0:  # take -1 from the smallest remainders that may still shrink
        score = torch.where(base > lo, frac, torch.full_like(frac, 2.0))
        idx = torch.sort(score, stable=True).indices[:-need]
        if bool((score[idx] > 1).any()):  # pragma: no cover - excluded by the feasibility check
            raise SignalValidationError(field, "could not be apportioned within the bounds.", "change the sizes.")
        base[idx] -= 1
    return base.to(torch.long)


def _normal_weights(count: int, mean: float, rel_std: float, lower: float, upper: float, gen: torch.Generator) -> Tensor:
    r""":math:`\mathrm{clip}(\mathcal{N}(\mu, (\sigma\mu)^2), \ell, u)` as float64 ``[count]``."""
    x = torch.full((count,), mean, dtype=torch.float64)
    if rel_std > 0 and count > 0:
        x += torch.randn(count, generator=gen, dtype=torch.float64) * (rel_std * mean)
    return x.clamp_(lower, upper)


# ------------------------------------------------------------------ sampling
def _sorted_uniforms(counts: Tensor, segment: Tensor, gen: torch.Generator) -> Tensor:
    r"""For every segment :math:`t`, ``counts[t]`` sorted :math:`U(0, 1)` draws,
    concatenated (``[E]`` float64, ascending inside each segment).

    Uses the exponential-spacings construction: with i.i.d.
    :math:`e_1, \ldots, e_{m+1} \sim \mathrm{Exp}(1)` and :math:`S_k =
    \sum_{j \le k} e_j`, the vector :math:`(S_1, \ldots, S_m) / S_{m+1}` has
    the law of the order statistics of :math:`m` uniforms; one global cumulative
    sum serves all segments. ``segment`` (``[E]``) is the segment of each draw.
    """
    T = counts.numel()
    E = segment.numel()
    gaps = torch.empty(E + T, dtype=torch.float64).exponential_(generator=gen)
    cum = torch.cumsum(gaps, 0)
    del gaps
    seg_ptr = ptr_from_counts(counts + 1)
    seg_end = cum[seg_ptr[1:] - 1]  # S_{m+1} (absolute) of each segment
    seg_base = torch.zeros_like(seg_end)
    seg_base[1:] = seg_end[:-1]
    keep = torch.ones(E + T, dtype=torch.bool)
    keep[seg_ptr[1:] - 1] = False  # the last spacing of a segment is only the normaliser
    u = cum[keep]
    del cum, keep
    scale = (seg_end - seg_base).reciprocal_()
    u.sub_(seg_base[segment]).mul_(scale[segment])
    return u


def _sample_rows(cum_excl: Tensor, base: Tensor, span: Tensor, lo: Tensor, hi: Tensor, gen: torch.Generator) -> Tensor:
    r"""Inverse-CDF draw: position :math:`k` with ``cum_excl[k] <= u < cum_excl[k+1]``
    for :math:`u = \mathrm{base} + U(0,1) \cdot \mathrm{span}`, clamped to
    ``[lo, hi]`` against float rounding at the range ends."""
    u = torch.rand(base.numel(), generator=gen, dtype=torch.float64)
    u.mul_(span).add_(base)
    pos = torch.searchsorted(cum_excl[1:], u, right=True)
    return torch.minimum(torch.maximum(pos, lo), hi)


def generate_dynamic_graph(
    num_vertices: int,
    num_edges: int,
    num_snapshots: int,
    *,
    edge_std: float = 0.0,
    sequence_length_std: float = 0.0,
    presence: float = 1.0,
    power_law_exponent: float = 2.5,
    num_features: int = 8,
    feature_dtype: torch.dtype = torch.float32,
    target: TargetKind = "degree",
    self_loops: bool = False,
    edge_weights: bool = False,
    seed: int = 0,
) -> DynamicGraphSignal:
    r"""Generate a synthetic dynamic graph as in DGC §7.3.1.

    Sizes are exact: the signal has ``num_snapshots`` snapshots, exactly
    ``num_edges`` edges in total, ``num_vertices`` distinct vertices (each
    appears at least once) and :math:`N = \mathrm{round}(|V| \cdot T \cdot p)`
    vertex-time nodes, :math:`p` = ``presence``. The model (Chung-Lu endpoints
    on vertices present in each snapshot) is described in the module docstring
    and in ``docs/synthetic.md``.

    Args:
        num_vertices (int): :math:`|V|`, distinct vertices.
        num_edges (int): :math:`|E| = \sum_t m_t`, spatial edges of all snapshots.
        num_snapshots (int): :math:`T \ge 1`.
        edge_std (float): spatial non-uniformity :math:`\sigma_E \ge 0`, the
            *relative* standard deviation of the edges per snapshot:
            :math:`m_t \sim \mathcal{N}(\mu_E, (\sigma_E \mu_E)^2)`,
            :math:`\mu_E = |E|/T`, clipped at 0 and rescaled to the exact
            total. The coefficient of variation of :math:`m_t` is
            :math:`\approx \sigma_E` while clipping is rare
            (:math:`\sigma_E \lesssim 0.3`) and grows more slowly beyond.
            ``0`` gives every snapshot :math:`\lfloor\mu_E\rfloor` or
            :math:`\lceil\mu_E\rceil` edges.
        sequence_length_std (float): temporal non-uniformity
            :math:`\sigma_L \ge 0`, the relative standard deviation of the
            sequence lengths (snapshots a vertex appears in):
            :math:`L_i \sim \mathcal{N}(pT, (\sigma_L pT)^2)` clipped to
            :math:`[1, T]` and rescaled to the exact total. Needs
            ``presence < 1`` to have room to vary; its coefficient of
            variation is :math:`\approx \sigma_L` while the clip at
            :math:`[1, T]` is rare.
        presence (float): :math:`p \in [1/T, 1]`, mean fraction of the
            snapshots a vertex appears in. ``1`` means every vertex is in
            every snapshot.
        power_law_exponent (float): :math:`\gamma > 1` of the degree tail
            :math:`P(d) \propto d^{-\gamma}` (vertex weights
            :math:`r^{-1/(\gamma-1)}` by rank :math:`r`); ``math.inf`` gives
            uniform endpoints (Erdős–Rényi-like multigraphs).
        num_features (int): :math:`F`; ``x`` is standard normal
            ``[N, F]`` (``None`` when ``F = 0``).
        feature_dtype (torch.dtype): floating dtype of ``x`` (and ``y``).
        target (str): ``"degree"``: ``y[n]`` is the degree (in + out) of
            vertex-time node ``n`` in its snapshot, a node-regression target;
            ``"none"``: no ``y``.
        self_loops (bool): allow edges :math:`(i, i)`. If ``False`` (default)
            snapshots with fewer than 2 vertices get no edges.
        edge_weights (bool): attach ``edge_weight`` drawn from
            :math:`U(0, 1]` (float32); otherwise ``None``.
        seed (int): the same seed gives an identical signal; different seeds
            give different ones.

    Returns:
        :class:`DynamicGraphSignal` with ``node_id [N]`` (ascending within each
        snapshot), ``edge_index [2, |E|]`` of local rows, ``x``, ``y``.

    Note:
        Endpoints are drawn with replacement, so a snapshot may hold the same
        edge more than once (a multigraph, as in the Chung-Lu model); at the
        default sizes of DGC (20K edges over 50K vertices per snapshot) this is
        rare, but for dense snapshots with strong power laws it is not.

    Raises:
        SignalValidationError: naming the offending parameter.
    """
    V = _check_int(num_vertices, "num_vertices", 0)
    E = _check_int(num_edges, "num_edges", 0)
    T = _check_int(num_snapshots, "num_snapshots", 1)
    F = _check_int(num_features, "num_features", 0)
    seed = _check_int(seed, "seed", 0)
    edge_std = _check_float(edge_std, "edge_std")
    seq_std = _check_float(sequence_length_std, "sequence_length_std")
    p = _check_float(presence, "presence")
    gamma = _check_float(power_law_exponent, "power_law_exponent")
    if edge_std < 0 or math.isinf(edge_std):
        raise SignalValidationError("edge_std", f"must be a finite value >= 0 but is {edge_std}.", "pass e.g. 0.0 (uniform) .. 1.0.")
    if seq_std < 0 or math.isinf(seq_std):
        raise SignalValidationError(
            "sequence_length_std", f"must be a finite value >= 0 but is {seq_std}.", "pass e.g. 0.0 (equal lengths) .. 1.0."
        )
    if not (0.0 < p <= 1.0):
        raise SignalValidationError("presence", f"must be in (0, 1] but is {p}.", "pass the mean fraction of snapshots a vertex appears in.")
    if V > 0 and p * T < 1.0 - 1e-12:
        raise SignalValidationError(
            "presence", f"is {p}, below 1/num_snapshots = {1.0 / T:.4g}, but every vertex appears at least once.",
            f"pass presence >= {1.0 / T:.4g} or fewer vertices.",
        )
    if seq_std > 0 and p >= 1.0:
        raise SignalValidationError(
            "sequence_length_std", f"is {seq_std} but presence=1 puts every vertex in every snapshot, so lengths cannot vary.",
            "pass presence < 1 (e.g. 0.5) together with sequence_length_std > 0.",
        )
    if not gamma > 1.0:
        raise SignalValidationError(
            "power_law_exponent", f"must be > 1 but is {gamma}.", "pass e.g. 2.5 (typical social graphs) or math.inf (uniform)."
        )
    if not (isinstance(feature_dtype, torch.dtype) and feature_dtype.is_floating_point):
        raise SignalValidationError("feature_dtype", f"must be a floating torch.dtype but is {feature_dtype!r}.", "pass e.g. torch.float32.")
    if target not in TARGETS:
        raise SignalValidationError("target", f"is {target!r}, not one of {TARGETS}.", "pass 'degree' or 'none'.")
    if E > 0 and V < (1 if self_loops else 2):
        raise SignalValidationError(
            "num_edges", f"is {E} but {V} vertices cannot hold an edge{'' if self_loops else ' without self loops'}.",
            "pass num_edges=0 or more vertices.",
        )

    gen = torch.Generator().manual_seed(seed)
    N = int(round(V * T * p)) if V > 0 else 0
    N = min(max(N, V), V * T)

    # 1. power-law vertex weights by a random rank (hubs are random vertex ids)
    if math.isinf(gamma):
        weight = torch.ones(V, dtype=torch.float64)
    else:
        rank = torch.randperm(V, generator=gen).to(torch.float64).add_(1.0)
        weight = rank.pow_(-1.0 / (gamma - 1.0))

    # 2. sequence lengths in [1, T] with the exact total N
    if V > 0:
        lengths = apportion(
            _normal_weights(V, p * T, seq_std, 1.0, float(T), gen), N,
            torch.ones(V, dtype=torch.float64), torch.full((V,), float(T), dtype=torch.float64), "presence",
        )
        start = torch.randint(0, T, (V,), generator=gen)
    else:
        lengths = torch.zeros(0, dtype=torch.long)
        start = torch.zeros(0, dtype=torch.long)

    # 3. cyclic runs of snapshots, then time-major order (stable: ids ascend in a snapshot)
    vertex = torch.repeat_interleave(torch.arange(V), lengths, output_size=N)
    within = torch.arange(N) - torch.repeat_interleave(ptr_from_counts(lengths)[:-1], lengths, output_size=N)
    time = (start[vertex] + within).remainder_(T)
    del within
    time_key = time.to(torch.int32) if T < 2**31 else time  # int32 sorts ~1.5x faster
    order = torch.sort(time_key, stable=True).indices
    del time_key
    node_id = vertex[order]
    del vertex, order
    node_counts = torch.bincount(time, minlength=T)
    del time
    node_ptr = ptr_from_counts(node_counts)

    # 4. edges per snapshot: Normal(mu, (edge_std*mu)^2), clipped, exact total
    capacity = torch.where(node_counts >= (1 if self_loops else 2), math.inf, 0.0).to(torch.float64)
    if E > 0:
        m_weights = _normal_weights(T, E / T, edge_std, 0.0, math.inf, gen)
        m_weights = torch.where(capacity > 0, m_weights, torch.zeros_like(m_weights))
        if float(m_weights.sum()) == 0.0:  # every drawn weight was clipped or unreachable: fall back to uniform
            m_weights = (capacity > 0).to(torch.float64)
        edge_counts = apportion(m_weights, E, torch.zeros(T, dtype=torch.float64), capacity, "num_edges")
    else:
        edge_counts = torch.zeros(T, dtype=torch.long)
    edge_ptr = ptr_from_counts(edge_counts)

    # 5. endpoints: inverse CDF on the cumulative weight of all vertex-time nodes
    edge_index, degree = _sample_endpoints(weight, node_id, node_ptr, edge_counts, E, self_loops, gen)

    x = torch.randn(N, F, generator=gen, dtype=torch.float32).to(feature_dtype) if F > 0 else None
    y = degree.to(feature_dtype) if target == "degree" else None
    ew = (1.0 - torch.rand(E, generator=gen, dtype=torch.float32)) if edge_weights else None
    return DynamicGraphSignal.from_tensors(
        node_ptr=node_ptr, edge_index=edge_index, edge_ptr=edge_ptr, node_id=node_id,
        edge_weight=ew, x=x, y=y, num_vertices=V,
    )


def _sample_endpoints(
    weight: Tensor, node_id: Tensor, node_ptr: Tensor, edge_counts: Tensor, E: int, self_loops: bool, gen: torch.Generator
) -> tuple[Tensor, Tensor]:
    r"""Draw ``[2, E]`` local endpoint rows proportional to the vertex weights.

    ``cum_excl`` (``[N+1]``) is the exclusive prefix sum of the weights of all
    vertex-time nodes in time-major order; snapshot :math:`t` owns the range
    ``cum_excl[node_ptr[t]] .. cum_excl[node_ptr[t+1]]``, so one
    :func:`torch.searchsorted` over all edges samples every snapshot at once,
    and since the queries come snapshot by snapshot the search stays in a
    cache-sized part of the table.

    Returns:
        ``(edge_index [2, E] local rows, degree [N] float64)``.
    """
    N = node_id.numel()
    T = edge_counts.numel()
    if E == 0:
        return torch.zeros(2, 0, dtype=torch.long), torch.zeros(N, dtype=torch.float64)
    w_node = weight[node_id]
    cum_excl = torch.zeros(N + 1, dtype=torch.float64)
    torch.cumsum(w_node, 0, out=cum_excl[1:])
    snap_of_edge = torch.repeat_interleave(torch.arange(T), edge_counts, output_size=E)
    first = node_ptr[:-1][snap_of_edge]  # first gid of the edge's snapshot
    last = node_ptr[1:][snap_of_edge] - 1
    base = cum_excl[first]
    span = cum_excl[last + 1] - base
    # Sources come from sorted uniforms, so their searchsorted queries ascend and
    # walk the table once (3x faster than random queries); edges of a snapshot
    # are then ordered by source. Targets use independent random queries.
    u = _sorted_uniforms(edge_counts, snap_of_edge, gen)
    u.mul_(span).add_(base)
    src = torch.searchsorted(cum_excl[1:], u, right=True)
    del u
    src = torch.minimum(torch.maximum(src, first), last)
    del snap_of_edge
    dst = _sample_rows(cum_excl, base, span, first, last, gen)
    if not self_loops:
        hit = (dst == src).nonzero().flatten()
        if hit.numel() > 0:
            # Redraw the colliding targets from the weights with the source cut out:
            # draw u in a range shortened by w_src and skip over the source's slot.
            s = src[hit]
            w_s = w_node[s]
            u = torch.rand(hit.numel(), generator=gen, dtype=torch.float64)
            u.mul_(span[hit] - w_s).add_(base[hit])
            u += w_s * (u >= cum_excl[s])
            d = torch.searchsorted(cum_excl[1:], u, right=True)
            d = torch.minimum(torch.maximum(d, first[hit]), last[hit])
            # float rounding can still land on the source's boundary: step to the next row (cyclically)
            same = d == s
            d = torch.where(same, torch.where(s == last[hit], first[hit], s + 1), d)
            dst[hit] = d
    del base, span, last
    degree = torch.bincount(src, minlength=N).add_(torch.bincount(dst, minlength=N)).to(torch.float64)
    src.sub_(first)
    dst.sub_(first)
    return torch.stack([src, dst]), degree
