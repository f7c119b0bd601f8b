r"""Incremental aggregation over a snapshot sequence (ReInc §3.2).

The parameter-free input aggregation of snapshot :math:`t` is derived from
that of :math:`t-1` by touching only what changed (ReInc's Eq. 2)

.. math::
    \text{Agg}_t = \text{Agg}_{t-1} - F_{t-1} \star G^-_t + F_t \star G^+_t,

instead of being computed from scratch, :math:`\text{Agg}_t = F_t \star G_t`.
Every aggregation here is written as a weighted sum over the in-edges of each
row, applied to a per-source value :math:`y` and followed by a per-row map:

.. math::
    S_t[v] = \sum_{(u \to v) \in G_t} w_{uv}\, y_t[u], \qquad
    \text{out}_t = \phi_t(S_t, y_t),

================  ====================================  ==================================================
``aggr``          source value :math:`y_t`              row map :math:`\phi_t`
================  ====================================  ==================================================
``"sum"``         :math:`X_t`                           :math:`S_t`
``"mean"``        :math:`X_t`                           :math:`S_t[v] / \max(1, \text{in-edges}_t(v))`
``"gcn"``         :math:`D_t^{-1/2} X_t`                :math:`D_t^{-1/2} (S_t + \ell_t \odot y_t)`
``"cheb"``        :math:`\tilde D_t^{-1/2} T_{k-1}`      :math:`\hat L_t T_{k-1} = -\tilde D_t^{-1/2} S_t`
================  ====================================  ==================================================

* ``"gcn"`` is PyG's ``gcn_norm`` (``GCNConv``, PyGT's ``TGCN``): the
  remaining self-loops :math:`\ell` (an existing self-loop keeps its weight,
  others get ``fill_value`` = 1, or 2 with ``improved``), :math:`D` the
  weighted in-degree including them, coefficient
  :math:`d_u^{-1/2} w_{uv} d_v^{-1/2}`;
* ``"cheb"`` is ``ChebConv``'s :math:`\hat L = 2L/\lambda_{max} - I` with
  ``normalization="sym"`` and :math:`\lambda_{max} = 2`, i.e.
  :math:`\hat L = -\tilde D^{-1/2} A \tilde D^{-1/2}` (self-loops removed,
  :math:`\tilde D` the weighted *out*-degree, as ``get_laplacian`` sums it
  over ``edge_index[0]``). PyG's default ``lambda_max=None`` gives the same
  operator whenever the weights are non-negative. The result holds the
  Chebyshev basis :math:`T_0 = X`, :math:`T_1 = \hat L X`,
  :math:`T_k = 2 \hat L T_{k-1} - T_{k-2}`, each :math:`T_k` (``k >= 2``) an
  incremental aggregation of :math:`T_{k-1}`.

**Normalization.** An edge change alters the degree of an endpoint, hence the
coefficients of *every* edge at that endpoint. Factoring the coefficient
into a source part (inside :math:`y`) and a row part (inside :math:`\phi`)
makes this exact: a degree change at the source :math:`u` changes
:math:`y[u]`, so every kept out-edge of :math:`u` contributes
:math:`w (y_t[u] - y_{t-1}[u])` (the same rule as a feature change), and a
degree change at the row :math:`v` is applied by :math:`\phi_t`, which is
evaluated for every row.

**Delta.** The edge instances of :math:`t` are matched with those of
:math:`t-1`: position by position in the stored lists (:math:`O(E)`, no
sorting; storage that edits its lists in place or appends), and, where that
leaves more than ``min(threshold, 1)`` unmatched, by key ``(src, dst)`` (reordered
or shifted lists; sorting; the k-th instance of a key pairs with the k-th,
so duplicate edges need no coalescing). Unmatched instances of :math:`t-1`
are :math:`G^-_t`, unmatched ones of :math:`t` are :math:`G^+_t`, and

.. math::
    S_t = S_{t-1} - \sum_{G^-_t} w^{t-1}_{uv} y_{t-1}[u]
        + \sum_{G^+_t} w^{t}_{uv} y_t[u]
        + \sum_{\text{kept, changed}} \big(w^{t}_{uv} y_t[u] - w^{t-1}_{uv} y_{t-1}[u]\big),

"changed" meaning a changed weight or a changed source row :math:`y[u]`
(found by comparing the rows: a feature change, a degree change, or for
:math:`k \ge 2` a changed :math:`T_{k-1}` row). Its cost is
:math:`O(\rho |E_t| F)` against :math:`O(|E_t| F)` from scratch, with the
**change ratio**

.. math::
    \rho_t = \frac{|G^-_t| + |G^+_t| + |\{\text{kept, changed}\}|}{|E_t|}

(edge instances that aggregate). A snapshot (per Chebyshev order) is aggregated from
scratch when :math:`\rho_t >` ``threshold`` (default
:data:`DEFAULT_THRESHOLD`, the measured crossover), when it is the first,
when the previous state or the new values are not finite (``inf - inf``
cannot be undone), and after ``refresh`` consecutive incremental snapshots.

**Exactness and drift.** Rows that nothing touches are copied bit for bit;
the others receive one rounded addition per update. The difference to a
from-scratch aggregation therefore grows at most linearly with the number of
incremental updates since the last from-scratch snapshot, about
:math:`2u \cdot \text{refresh} \cdot \max|S|` (:math:`u = 1.1 \cdot
10^{-16}` in float64): ``refresh`` (default :data:`DEFAULT_REFRESH`) bounds
it. The degrees are summed from scratch every snapshot; summed in another
order (edges stored in another order) they may differ in the last bits, so a
source row that moved by at most :data:`ULPS` units in the last place counts
as unchanged and keeps the value the sums were built with: the sums are
always those of the kept values, which are within
:math:`16\,\epsilon |y|` of the current ones (``16 * 2.2e-16`` relative in
float64; this adds no drift either, the comparison being with the kept
value).

**Vertex sets.** Rows are aligned by vertex: with ``node_id`` the work
happens on :math:`V` vertex rows (an absent vertex has no edges; its last
features are kept so that it does not count as changed) and the rows of the
vertices present are returned in the snapshot's order, so changing vertex
sets (and empty snapshots) are handled, not recomputed.

Shapes: ``x`` :math:`[N_{all}, *]` (rows of all snapshots, trailing
dimensions flattened for the aggregation), ``edge_index``
:math:`[2, E_{all}]` local per snapshot, ``node_ptr`` :math:`[T+1]`,
``edge_ptr`` :math:`[T+1]`; the result is :math:`[N_{all}, *]`, or
:math:`[N_{all}, K, *]` for ``"cheb"``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch
from torch import Tensor

from ..errors import ModelInputError
from .reuse import ChebReuse, GCLSTMReuse, TGCNReuse

__all__ = ["AGGREGATIONS", "DEFAULT_THRESHOLD", "DEFAULT_REFRESH", "ULPS", "IncrementalAggregation", "IncrementalBasis",
           "incremental_aggregate", "incremental_reuse"]

AGGREGATIONS = ("sum", "mean", "gcn", "cheb")

#: change ratio above which a snapshot is aggregated from scratch: the crossovers measured by
#: ``benchmarks/bench_incremental.py`` (20k vertices, 200k edges, F=32, one CPU thread) were 0.05 (sum), 0.14 (gcn)
#: and 0.21 (cheb); table and machine in docs/windows.md, "Incremental aggregation"
DEFAULT_THRESHOLD = 0.1
#: at most this many consecutive incremental snapshots before one from scratch (bounds rounding drift)
DEFAULT_REFRESH = 64
#: a source row that moved by at most this many units in the last place counts as unchanged (module docstring)
ULPS = 16


class _Graph:
    """One snapshot's edge instances in vertex ids, in storage order."""

    def __init__(self, src: Tensor, dst: Tensor, w: Tensor, V: int, active: Optional[Tensor], loop: Optional[Tensor],
                 norm: Optional[Tensor], cnt: Optional[Tensor]) -> None:
        self.src, self.dst, self.w, self.V = src, dst, w, V
        self.active = active       # [E] bool: instances that aggregate (None: all; self-loops are not for gcn / cheb)
        self.loop = loop           # [V] remaining self-loop weights ("gcn")
        self.norm = norm           # [V] D^{-1/2} ("gcn", "cheb")
        self.cnt = cnt             # [V] in-edge counts ("mean")
        self._sorted: Optional[tuple] = None

    @property
    def E(self) -> int:
        return int(self.src.numel())

    def sorted(self) -> tuple:
        """``(keys sorted, permutation)``, ``key = src * V + dst`` (computed once)."""
        if self._sorted is None:
            key = self.src * self.V + self.dst
            self._sorted = torch.sort(key, stable=True)
        return self._sorted

    def edges(self) -> tuple:
        """``(src, dst, w)`` of the instances that aggregate."""
        if self.active is None:
            return self.src, self.dst, self.w
        return self.src[self.active], self.dst[self.active], self.w[self.active]


@dataclass
class _Level:
    """What one aggregation level keeps of the previous snapshot."""

    y: Tensor
    S: Tensor
    since: int                 # incremental snapshots since the last from-scratch one


@dataclass
class _Delta:
    added: Tensor              # instances of the current graph
    removed: Tensor            # instances of the previous graph
    kept_c: Tensor             # kept instances: in the current graph ...
    kept_p: Tensor             # ... and the same instance in the previous one
    w_changed: Tensor          # [kept] bool
    keyed: bool                # matched by key (False: position by position)


class IncrementalAggregation:
    r"""The parameter-free aggregation of every snapshot of a sequence,
    computed incrementally where that is cheaper (module docstring).

    Args:
        aggr: ``"sum"``, ``"mean"``, ``"gcn"`` or ``"cheb"``.
        K: ``"cheb"`` only: the number of basis terms :math:`T_0 \ldots T_{K-1}`.
        threshold: change ratio above which a snapshot is aggregated from
            scratch (``0``: always; ``float("inf")``: whenever possible).
        refresh: at most this many consecutive incremental snapshots (``None``:
            no limit).
        improved: ``"gcn"``: self-loop weight 2 (``GCNConv(improved=True)``).
        add_self_loops: ``"gcn"``: add the remaining self-loops.

    After a call, :attr:`modes` holds, per snapshot and level, ``"scratch"``
    or ``"incremental"``, :attr:`ratios` the change ratios (``nan`` where
    there was no previous snapshot) and :attr:`diffs` how each snapshot's
    edges were matched with the previous ones (``"position"``, ``"key"``,
    ``None`` for the first).
    """

    def __init__(self, aggr: str = "sum", K: int = 1, *, threshold: float = DEFAULT_THRESHOLD,
                 refresh: Optional[int] = DEFAULT_REFRESH, improved: bool = False, add_self_loops: bool = True) -> None:
        if aggr not in AGGREGATIONS:
            raise ModelInputError("aggr", f"is {aggr!r}.", f"use one of {AGGREGATIONS}.")
        if isinstance(K, bool) or not isinstance(K, int) or K < 1 or (aggr != "cheb" and K != 1):
            raise ModelInputError("K", f"is {K!r} (aggr={aggr!r}).", "give K >= 1 basis terms for 'cheb', K=1 otherwise.")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold >= 0:
            raise ModelInputError("threshold", f"is {threshold!r}.", "give a change ratio >= 0 (0: always from scratch).")
        if refresh is not None and (isinstance(refresh, bool) or not isinstance(refresh, int) or refresh < 1):
            raise ModelInputError("refresh", f"is {refresh!r}.", "give a number of snapshots >= 1, or None.")
        self.aggr, self.K, self.threshold, self.refresh = aggr, K, float(threshold), refresh
        self.fill = 2.0 if improved else 1.0
        self.add_self_loops = bool(add_self_loops)
        self.levels = K - 1 if aggr == "cheb" else 1
        #: per snapshot, per level: ``"scratch"`` or ``"incremental"``
        self.modes: List[List[str]] = []
        #: per snapshot, per level: the change ratio (``nan``: no previous snapshot)
        self.ratios: List[List[float]] = []
        #: per snapshot: ``"position"``, ``"key"`` or ``None`` (module docstring, "Delta")
        self.diffs: List[Optional[str]] = []

    # ------------------------------------------------------------------ public
    @torch.no_grad()
    def __call__(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], node_ptr: Tensor,
                 edge_ptr: Tensor, node_id: Optional[Tensor] = None, num_vertices: Optional[int] = None) -> Tensor:
        """The aggregation of every snapshot, rows as ``x`` (module docstring: shapes)."""
        nptr, eptr = self._check(x, edge_index, edge_weight, node_ptr, edge_ptr, node_id)
        T = len(nptr) - 1
        trail = tuple(x.shape[1:])
        xf = x.reshape(x.shape[0], -1)
        F = xf.shape[1]
        counts = [nptr[t + 1] - nptr[t] for t in range(T)]
        if node_id is None:
            V = counts[0] if T else 0
            if any(c != V for c in counts):
                raise ModelInputError("node_id", "is None but the snapshots have different numbers of rows.",
                                      "pass the signal's node_id (rows are aligned by vertex id).")
            ids = None
        else:
            V = int(num_vertices) if num_vertices is not None else (int(node_id.max()) + 1 if node_id.numel() else 0)
            if node_id.numel() and (int(node_id.min()) < 0 or int(node_id.max()) >= V):
                raise ModelInputError("node_id", f"has ids outside [0, {V}).", "pass num_vertices > every vertex id.")
            # aligned already (a fixed vertex set in row order): no scatter to vertex rows needed
            aligned = T > 0 and V > 0 and all(c == V for c in counts)
            aligned = aligned and bool((node_id.view(T, V) == torch.arange(V, device=node_id.device)).all())
            ids = None if aligned else node_id
        width = self.K if self.aggr == "cheb" else 1
        out = xf.new_empty(xf.shape[0], width, F)
        self.modes, self.ratios, self.diffs = [], [], []
        ew = None if edge_weight is None else edge_weight.to(xf.dtype)
        edge_index = edge_index.to(xf.device)
        prev_g: Optional[_Graph] = None
        state: List[Optional[_Level]] = [None] * self.levels
        xv = xf.new_zeros(V, F) if ids is not None else None
        for t in range(T):
            a, b, e0, e1 = nptr[t], nptr[t + 1], eptr[t], eptr[t + 1]
            if ids is not None:
                xv = xv.clone()
                xv[ids[a:b]] = xf[a:b]
                x_t = xv
            else:
                x_t = xf[a:b]
            g = self._graph(edge_index[:, e0:e1], None if ew is None else ew[e0:e1],
                            None if ids is None else ids[a:b], V, xf)
            delta = self._diff(prev_g, g) if prev_g is not None and self.threshold > 0 else None
            self.diffs.append(None if delta is None else ("key" if delta.keyed else "position"))
            res = self._levels(x_t, g, delta, prev_g, state)
            rows = ids[a:b] if ids is not None else slice(None)
            for k, r in enumerate(res):
                out[a:b, k] = r[rows]
            prev_g = g
        out = out.reshape(xf.shape[0], width, *trail)
        return out if self.aggr == "cheb" else out[:, 0]

    # ------------------------------------------------------------------ steps
    def _graph(self, ei: Tensor, w: Optional[Tensor], ids: Optional[Tensor], V: int, like: Tensor) -> _Graph:
        """Snapshot ``ei`` (local rows) in vertex ids; its degrees / counts from scratch."""
        src, dst = (ids[ei[0]], ids[ei[1]]) if ids is not None else (ei[0], ei[1])
        weighted = w is not None
        if w is None:
            w = like.new_ones(src.numel())
        active, loop, norm, cnt = None, None, None, None
        if self.aggr == "cheb" or (self.aggr == "gcn" and self.add_self_loops):
            active = src != dst        # gcn: the remaining self-loops replace them; cheb: get_laplacian drops them
            if bool(active.all()):
                active = None
        if self.aggr == "gcn" and self.add_self_loops:
            # add_remaining_self_loops: an existing self-loop keeps its weight when weights are given
            # (assigned in edge order, as PyG does); unweighted, every vertex gets fill_value
            loop = like.new_full((V,), self.fill)
            if weighted and active is not None:
                loop[src[~active]] = w[~active]
        if self.aggr in ("gcn", "cheb"):
            wa = w if active is None else w * active   # inactive instances weigh nothing in the degree
            deg = like.new_zeros(V).index_add_(0, dst if self.aggr == "gcn" else src, wa)
            if loop is not None:
                deg = deg + loop
            norm = deg.pow(-0.5)
            norm.masked_fill_(norm == float("inf"), 0.0)
        if self.aggr == "mean":
            cnt = like.new_zeros(V).index_add_(0, dst, like.new_ones(dst.numel()))
        return _Graph(src, dst, w, V, active, loop, norm, cnt)

    def _diff(self, p: _Graph, c: _Graph) -> _Delta:
        r""":math:`G^-`, :math:`G^+` and the kept edge instances: position by
        position first (``O(E)``, no sort: storage that edits its edge lists in
        place or appends), by key ``(src, dst)`` where that leaves more than
        ``min(threshold, 1)`` of them unmatched (reordered or shifted lists;
        the k-th instance of a key matched with the k-th, so duplicates are
        fine)."""
        dev = c.src.device
        n = min(p.E, c.E)
        same = (p.src[:n] == c.src[:n]) & (p.dst[:n] == c.dst[:n])
        kept = same.nonzero().flatten()
        unmatched = (n - int(kept.numel())) * 2 + (p.E - n) + (c.E - n)
        keyed = unmatched > min(self.threshold, 1.0) * max(c.E, 1) and n > 0
        if keyed:
            kp, pp = p.sorted()
            kc, pc = c.sorted()
            rank = torch.arange(c.E, device=dev) - torch.searchsorted(kc, kc)
            j = torch.searchsorted(kp, kc) + rank
            ok = j < p.E
            ok[ok.clone()] = kp[j[ok]] == kc[ok]
            kept_c, kept_p = pc[ok], pp[j[ok]]
            added = pc[~ok]
            gone = torch.ones(p.E, dtype=torch.bool, device=dev)
            gone[kept_p] = False
            removed = gone.nonzero().flatten()
        else:
            diff = (~same).nonzero().flatten()
            kept_c = kept_p = kept
            added = torch.cat([diff, torch.arange(n, c.E, device=dev)])
            removed = torch.cat([diff, torch.arange(n, p.E, device=dev)])
        if c.active is not None:     # a kept instance has the same (src, dst) in both: active in both or in neither
            added, m = added[c.active[added]], c.active[kept_c]
            kept_c, kept_p = kept_c[m], kept_p[m]
        if p.active is not None:
            removed = removed[p.active[removed]]
        return _Delta(added, removed, kept_c, kept_p, c.w[kept_c] != p.w[kept_p], keyed)

    def _source(self, x_t: Tensor, g: _Graph) -> Tensor:
        return x_t * g.norm[:, None] if g.norm is not None else x_t

    def _levels(self, x_t: Tensor, g: _Graph, delta: Optional[_Delta], p: Optional[_Graph],
                state: List[Optional[_Level]]) -> list:
        """The outputs of snapshot ``g`` (``[V or n, F]`` each), updating ``state``."""
        modes, ratios = [], []
        if self.aggr == "cheb":
            outs = [x_t]
            prev2 = x_t
            for k in range(self.levels):
                S = self._sum(k, self._source(outs[-1], g), g, delta, p, state, modes, ratios)
                P = S * (-g.norm[:, None])
                outs.append(P if k == 0 else 2.0 * P - prev2)
                prev2 = outs[-2]
        else:
            y = self._source(x_t, g)
            S = self._sum(0, y, g, delta, p, state, modes, ratios)
            if self.aggr == "sum":
                outs = [S]
            elif self.aggr == "mean":
                outs = [S / g.cnt.clamp(min=1)[:, None]]
            else:
                outs = [(S + g.loop[:, None] * y) * g.norm[:, None] if g.loop is not None else S * g.norm[:, None]]
        self.modes.append(modes)
        self.ratios.append(ratios)
        return outs

    def _sum(self, k: int, y: Tensor, g: _Graph, delta: Optional[_Delta], p: Optional[_Graph],
             state: List[Optional[_Level]], modes: list, ratios: list) -> Tensor:
        r""":math:`S_t = \sum_{u \to v} w_{uv} y[u]` of level ``k``, incrementally or from scratch."""
        prev = state[k]
        E = max(g.E if g.active is None else int(g.active.sum()), 1)
        scratch, ratio = True, float("nan")
        finite = bool(torch.isfinite(y).all())
        if delta is not None and prev is not None and finite:
            # a changed feature, degree (gcn, cheb) or T_{k-1} row; within ULPS ulps the previous value is kept
            # (degrees summed in another order differ in the last bits), so S is always built from state.y
            eps = ULPS * torch.finfo(y.dtype).eps
            moved = ((y - prev.y).abs() > eps * torch.maximum(y.abs(), prev.y.abs())).any(1)
            y = torch.where(moved[:, None], y, prev.y)
            sel = delta.w_changed | moved[g.src[delta.kept_c]]
            ratio = (int(delta.added.numel()) + int(delta.removed.numel()) + int(sel.sum())) / E
            due = self.refresh is not None and prev.since >= self.refresh
            scratch = due or ratio > self.threshold
        if scratch:
            src, dst, w = g.edges()
            S = y.new_zeros(y.shape).index_add_(0, dst, y.index_select(0, src) * w[:, None])
            since = 0
        else:
            kc, kp = delta.kept_c[sel], delta.kept_p[sel]
            idx = torch.cat([g.dst[delta.added], p.dst[delta.removed], g.dst[kc]])
            val = torch.cat([g.w[delta.added, None] * y[g.src[delta.added]],
                             -(p.w[delta.removed, None] * prev.y[p.src[delta.removed]]),
                             g.w[kc, None] * y[g.src[kc]] - p.w[kp, None] * prev.y[p.src[kp]]])
            S = prev.S.clone().index_add_(0, idx, val)
            since = prev.since + 1
        # a non-finite sum cannot be corrected by later deltas: the next snapshot starts from scratch
        state[k] = _Level(y, S, since) if finite and bool(torch.isfinite(S).all()) else None
        modes.append("scratch" if scratch else "incremental")
        ratios.append(ratio)
        return S

    # ------------------------------------------------------------------ checks
    def _check(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], node_ptr: Tensor,
               edge_ptr: Tensor, node_id: Optional[Tensor]) -> tuple:
        if not torch.is_tensor(x) or not x.is_floating_point() or x.dim() < 2:
            raise ModelInputError("x", "must be a floating [N_all, F, ...] tensor.", "pass the signal's features.")
        nptr, eptr = [int(v) for v in node_ptr.tolist()], [int(v) for v in edge_ptr.tolist()]
        if len(nptr) != len(eptr) or not nptr or nptr[0] != 0 or eptr[0] != 0:
            raise ModelInputError("node_ptr", f"has {len(nptr)} entries and edge_ptr {len(eptr)}.",
                                  "pass the signal's node_ptr and edge_ptr ([T + 1] each, starting at 0).")
        if nptr[-1] != x.shape[0] or (node_id is not None and node_id.numel() != x.shape[0]):
            raise ModelInputError("x", f"has {x.shape[0]} rows but node_ptr ends at {nptr[-1]}.",
                                  "pass x, node_ptr and node_id of the same signal.")
        if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.shape[1] != eptr[-1]:
            raise ModelInputError("edge_index", f"has shape {list(edge_index.shape)}, edge_ptr ends at {eptr[-1]}.",
                                  "pass [2, E_all] edges (local rows per snapshot) and the matching edge_ptr.")
        if edge_weight is not None and edge_weight.numel() != eptr[-1]:
            raise ModelInputError("edge_weight", f"has {edge_weight.numel()} entries for {eptr[-1]} edges.",
                                  "pass one weight per edge, or None.")
        return nptr, eptr


def incremental_aggregate(x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], node_ptr: Tensor,
                          edge_ptr: Tensor, node_id: Optional[Tensor] = None, num_vertices: Optional[int] = None, *,
                          aggr: str = "sum", K: int = 1, threshold: float = DEFAULT_THRESHOLD,
                          refresh: Optional[int] = DEFAULT_REFRESH, improved: bool = False,
                          add_self_loops: bool = True) -> Tensor:
    """Functional form of :class:`IncrementalAggregation` (same arguments)."""
    return IncrementalAggregation(aggr, K, threshold=threshold, refresh=refresh, improved=improved,
                                  add_self_loops=add_self_loops)(x, edge_index, edge_weight, node_ptr, edge_ptr,
                                                                 node_id, num_vertices)


class IncrementalBasis:
    r"""A snapshot storage's layout for :mod:`~pyg_dynscale.nn.reuse`: its
    implementations compute their input basis through this object (``x`` of
    the whole storage) instead of over the block-diagonal graph at once.

    Args:
        node_ptr, edge_ptr, edge_index, node_id, num_vertices: the storage
            (``edge_index`` with local rows per snapshot, as
            :class:`~pyg_dynscale.data.DynamicGraphSignal` keeps it).
        threshold, refresh: as :class:`IncrementalAggregation`.

    After a call, :attr:`last` is the :class:`IncrementalAggregation` that ran
    (its ``modes`` and ``ratios``).
    """

    def __init__(self, node_ptr: Tensor, edge_ptr: Tensor, edge_index: Tensor, node_id: Optional[Tensor] = None,
                 num_vertices: Optional[int] = None, *, threshold: float = DEFAULT_THRESHOLD,
                 refresh: Optional[int] = DEFAULT_REFRESH) -> None:
        self.node_ptr, self.edge_ptr, self.edge_index = node_ptr, edge_ptr, edge_index
        self.node_id, self.num_vertices = node_id, num_vertices
        self.threshold, self.refresh = threshold, refresh
        self.last: Optional[IncrementalAggregation] = None

    def __call__(self, x: Tensor, edge_weight: Optional[Tensor], aggr: str, K: int = 1, *, improved: bool = False,
                 add_self_loops: bool = True) -> Optional[Tensor]:
        r"""The aggregation of the storage ``x``, or ``None`` where it does not
        apply: ``x`` is not the storage (other rows), or ``"cheb"`` with a
        negative weight (PyG's :math:`\lambda_{max} = 2 \max_e \hat L_e`
        is then not 2)."""
        self.last = None
        if x.shape[0] != int(self.node_ptr[-1]) or int(self.edge_index.shape[1]) != int(self.edge_ptr[-1]):
            return None
        if aggr == "cheb" and edge_weight is not None and bool((edge_weight < 0).any()):
            return None
        self.last = IncrementalAggregation(aggr, K, threshold=self.threshold, refresh=self.refresh, improved=improved,
                                           add_self_loops=add_self_loops)
        return self.last(x, self.edge_index, edge_weight, self.node_ptr, self.edge_ptr, self.node_id, self.num_vertices)


def incremental_reuse(impl: type, basis: IncrementalBasis) -> type:
    r"""``impl`` (a :mod:`~pyg_dynscale.nn.reuse` implementation) whose
    ``input_basis`` of the storage goes through ``basis``: ``"cheb"`` for the
    Chebyshev cells whose input is convolved (``GConvGRU``, ``GConvLSTM``),
    ``"gcn"`` for ``TGCN`` (its ``GCNConv`` options; ``flow`` source to
    target). Other implementations (``GCLSTM``: no input aggregation;
    ``DCRNN``: ``DConv`` pairs its normalizers by edge order, not by edge)
    and other inputs (one snapshot, a negative Chebyshev weight) keep their
    own computation; :attr:`IncrementalBasis.last` is ``None`` then."""
    if issubclass(impl, ChebReuse) and not issubclass(impl, GCLSTMReuse) and impl.input_conv:
        def spec(obj: object) -> Optional[tuple]:
            return "cheb", obj.K, {}
    elif issubclass(impl, TGCNReuse):
        def spec(obj: object) -> Optional[tuple]:
            conv = obj.cell.conv_z
            if conv.flow != "source_to_target":
                return None
            return "gcn", 1, dict(improved=bool(conv.improved), add_self_loops=bool(conv.add_self_loops))
    else:
        return impl

    def input_basis(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor],
                    loops: Optional[Tensor] = None) -> Tensor:
        s = spec(self)
        out = None if s is None else basis(x, edge_weight, s[0], s[1], **s[2])
        if out is None:
            return impl.input_basis(self, x, edge_index, edge_weight, loops)
        return out if s[0] == "cheb" else out.unsqueeze(1)

    return type(f"Incremental{impl.__name__}", (impl,), {"input_basis": input_basis, "__doc__": impl.__doc__,
                                                       "__module__": __name__})
