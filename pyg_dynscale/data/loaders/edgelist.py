r"""Temporal edge lists (SNAP, KONECT, CSV) binned into snapshot graphs.

A temporal edge list is a text file with one timestamped event per line,
``source target [...] time``. Events are binned into windows of ``window``
seconds, :math:`b = \lfloor (\tau - \tau_{\min}) / w \rfloor`, and every window
becomes one snapshot :math:`G_t` (DGC §7: "we divide these datasets into
snapshots with different window sizes ... we use the in-degree and out-degree
as the vertex features"). Everything after parsing is a handful of numpy sorts,
``unique`` and ``bincount`` calls; no Python loop touches single edges.
"""
from __future__ import annotations

import os
import re
from functools import partial
from typing import Callable, Optional, Sequence, Union

import numpy as np
import torch

from ...errors import SignalValidationError
from ..fields import SnapshotField
from ..signal import DynamicGraphSignal
from ._common import PathLike, read_bytes
from .edgelist_parse import edge_list_columns, tokenize
from .negative_sampling import sample_negative_pairs

_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_WINDOW_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")
#: Most windows an edge list's time span may be cut into: window indices are
#: computed in float64 and must stay exact integers (a window like 1e-17 s
#: would overflow them and silently merge every event into one snapshot).
MAX_WINDOWS = 2 ** 53

VERTEX_SETS = ("cumulative", "window")
TARGETS = ("link", "degree", None)
DEGREE_TRANSFORMS = (None, "log1p", "normalize")
WEIGHT_AGGS = ("sum", "mean", "max", "min")


def parse_window(window: Union[float, int, str]) -> float:
    """Window length in seconds from a number (seconds) or a string such as
    ``"86400"``, ``"7d"``, ``"12h"``, ``"30min"``, ``"1w"``, ``"3600s"``.

    The command line's ``--window`` options (``inspect``, ``partition``) use it too.

    Raises:
        SignalValidationError: unparsable, non-finite or ``<= 0``.
    """
    if isinstance(window, str):
        m = _WINDOW_RE.match(window)
        unit = m.group(2).lower() if m else ""
        if m is not None and (unit in _UNITS or unit == ""):
            seconds = float(m.group(1)) * _UNITS.get(unit, 1.0)
        else:
            try:  # "inf", "nan", "-5": numbers, rejected below as not positive and finite
                seconds = float(window)
            except ValueError:
                raise SignalValidationError(
                    "window", f"is {window!r}.", "give seconds as a number, or a string like '1d', '12h', '30min', '1w'."
                ) from None
    elif isinstance(window, (int, float, np.integer, np.floating)) and not isinstance(window, bool):
        seconds = float(window)
    else:
        raise SignalValidationError("window", f"is {window!r}.", "give the window length in seconds (e.g. 86400 or '1d').")
    if not np.isfinite(seconds) or seconds <= 0:
        raise SignalValidationError("window", f"is {window!r} ({seconds} s).", "use a positive, finite window length.")
    return seconds


def _check_choice(name: str, value: object, choices: Sequence[object]) -> None:
    if value not in choices:
        raise SignalValidationError(name, f"is {value!r}.", f"use one of {list(choices)}.")


def remap_by_first_appearance(
    src: np.ndarray, dst: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Give vertices ids ``0..V-1`` in the order they first appear in time
    (source before target within an event, ties by file order).

    Returns ``(u, v, raw_id_of_new_id [V], first_event_of_new_id [V])``.
    """
    seq = np.stack([src[order], dst[order]], axis=1).ravel()
    uniq, first_pos = np.unique(seq, return_index=True)
    by_first = np.argsort(first_pos, kind="stable")
    new_of_uniq = np.empty(uniq.shape[0], dtype=np.int64)
    new_of_uniq[by_first] = np.arange(uniq.shape[0], dtype=np.int64)
    u = new_of_uniq[np.searchsorted(uniq, src)]
    v = new_of_uniq[np.searchsorted(uniq, dst)]
    first_event = order[first_pos[by_first] // 2]
    return u, v, uniq[by_first], first_event


def segment_max(values: np.ndarray, seg: np.ndarray, num_segments: int) -> np.ndarray:
    out = torch.zeros((num_segments,) + values.shape[1:], dtype=torch.float64)
    idx = torch.from_numpy(seg).view(-1, *([1] * (values.ndim - 1))).expand(values.shape)
    out.scatter_reduce_(0, idx, torch.from_numpy(values), "amax", include_self=True)
    return out.numpy()


def check_windows(span: float, w_units: float, seconds: float, time_unit: float, target: Optional[str]) -> None:
    r"""Refuse windows that cut the events' time ``span`` (file units) into
    too many (:data:`MAX_WINDOWS`) or, with a ``target``, into one only.

    Raises:
        SignalValidationError: naming ``window``.
    """
    if not span / w_units < MAX_WINDOWS:
        raise SignalValidationError(
            "window", f"is {seconds:g} s, too small for the events' time span of {span * float(time_unit):g} s "
            f"({span / w_units:.3g} windows; at most {MAX_WINDOWS:.3g}).",
            "use a longer window, e.g. '1h' or '1d' (or check time_unit).",
        )
    if target is not None and int(np.floor(span / w_units)) < 1:
        raise SignalValidationError(
            "window", f"puts all events into 1 snapshot, but target={target!r} needs a next snapshot.",
            "use a smaller window or target=None.",
        )


def reverse_events(u: np.ndarray, v: np.ndarray, *columns: np.ndarray) -> tuple[np.ndarray, ...]:
    r"""``(u, v, *columns)`` with the reversed event :math:`(v, u)` of every
    event :math:`u \ne v` appended (its other columns repeated)."""
    rev = u != v
    return (np.concatenate([u, v[rev]]), np.concatenate([v, u[rev]])) + tuple(np.concatenate([c, c[rev]]) for c in columns)


def merge_events(
    snap: np.ndarray, u: np.ndarray, v: np.ndarray, w: np.ndarray, weight_agg: Optional[str],
    ties: Sequence[np.ndarray] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""Merge repeated :math:`(u, v)` events of a snapshot into one edge.

    Args:
        snap, u, v, w: the events' snapshot, endpoints and weight.
        weight_agg: ``None`` (the weight is the number of events) or how the
            events' weights ``w`` merge (``"sum"``, ``"mean"``, ``"max"``, ``"min"``).
        ties: sort keys (least significant first) of the events of one edge;
            by default they keep their order (the float sums their bits).

    Returns:
        ``(snapshot, u, v, weight)`` of the edges, sorted by snapshot, source, target.
    """
    o = np.lexsort(tuple(ties) + (v, u, snap))
    s_s, u_s, v_s, w_s = snap[o], u[o], v[o], w[o]
    new = np.ones(o.shape[0], dtype=bool)
    new[1:] = (s_s[1:] != s_s[:-1]) | (u_s[1:] != u_s[:-1]) | (v_s[1:] != v_s[:-1])
    starts = np.flatnonzero(new)
    mult = np.diff(np.r_[starts, o.shape[0]]).astype(np.float64)
    if weight_agg is None:
        weight = mult
    elif weight_agg == "mean":
        weight = np.add.reduceat(w_s, starts) / mult
    else:
        ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum}[weight_agg]
        weight = ufunc.reduceat(w_s, starts)
    return s_s[starts], u_s[starts], v_s[starts], weight


def window_vertex_rows(
    es: np.ndarray, eu: np.ndarray, ev: np.ndarray, V: int, T: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""The vertex sets of ``vertex_set="window"``: every vertex with an edge
    in a snapshot, rows sorted by vertex id (ids ``< V``).

    Returns:
        ``(keys, counts [T], ptr [T + 1], node_id, lu, lv)``: the sorted
        :math:`t \cdot V + \mathrm{vertex}` of every row, the rows per
        snapshot and their offsets, the vertex id of every row, and the edges'
        local rows.
    """
    keys = np.unique(np.concatenate([es * V + eu, es * V + ev]))
    counts = np.bincount(keys // V, minlength=T).astype(np.int64)
    ptr = np.zeros(T + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    lu = np.searchsorted(keys, es * V + eu) - ptr[es]
    lv = np.searchsorted(keys, es * V + ev) - ptr[es]
    return keys, counts, ptr, keys % V, lu, lv


def vertex_degrees(
    node_ptr: np.ndarray, es: np.ndarray, lu: np.ndarray, lv: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(in-degree, out-degree)`` ``[N]`` float64 of every row (snapshot
    offsets ``node_ptr``) over the distinct edges (snapshot ``es``, local rows ``lu``, ``lv``)."""
    N = int(node_ptr[-1])
    gu, gv = node_ptr[es] + lu, node_ptr[es] + lv
    return np.bincount(gv, minlength=N).astype(np.float64), np.bincount(gu, minlength=N).astype(np.float64)


def find_vertex_rows(
    counts: np.ndarray, ptr: np.ndarray, keys: Optional[np.ndarray], V: int, t: np.ndarray, vid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(exists, local row)`` of vertex ``vid`` in snapshot ``t``; ``keys``
    as :func:`window_vertex_rows`, or ``None`` (cumulative vertex sets: the
    row is the id, the first ``counts[t]`` exist)."""
    if keys is None:
        return vid < counts[t], vid
    k = t * V + vid
    pos = np.minimum(np.searchsorted(keys, k), max(keys.shape[0] - 1, 0))
    return keys[pos] == k, pos - ptr[t]


def degree_features(
    in_deg: np.ndarray, out_deg: np.ndarray, degree_transform: Optional[str], snap_of_node: np.ndarray, T: int
) -> np.ndarray:
    """``x = [in-degree, out-degree]`` of every row, ``[N, 2]`` float64, after ``degree_transform``."""
    x = np.stack([in_deg, out_deg], axis=1)
    if degree_transform == "log1p":
        x = np.log1p(x)
    elif degree_transform == "normalize":
        x = x / np.maximum(segment_max(x, snap_of_node, T), 1.0)[snap_of_node]
    return x


def degree_target(
    in_deg: np.ndarray, out_deg: np.ndarray, undirected: bool, snap_of_node: np.ndarray, vid: np.ndarray,
    ptr: np.ndarray, node_in: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> np.ndarray:
    """``y``: the degree of each of the first ``len(vid)`` rows' vertex (ids
    ``vid``) in the next snapshot, 0 where it has no row there; ``node_in``
    as :func:`find_vertex_rows`."""
    N_out = vid.shape[0]
    total = out_deg if undirected else in_deg + out_deg
    t_next = snap_of_node[:N_out] + 1
    found, row = node_in(t_next, vid)
    return np.where(found, total[np.where(found, ptr[t_next] + row, 0)], 0.0) if N_out else np.zeros(0)


def link_positives(
    es: np.ndarray, eu: np.ndarray, ev: np.ndarray, negative_ratio: float, T_out: int,
    node_in: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r"""The positive link labels: every edge of snapshot :math:`t + 1` whose
    endpoints both exist in snapshot :math:`t`.

    Returns:
        ``(t, row_u, row_v, k)``: the positives' snapshot and local rows, and
        the negatives to draw per snapshot, :math:`\mathrm{round}(r \cdot P_t)` ``[T_out]``.
    """
    nxt = es >= 1
    pt, pu, pv = es[nxt] - 1, eu[nxt], ev[nxt]
    ok_u, ru = node_in(pt, pu)
    ok_v, rv = node_in(pt, pv)
    ok = ok_u & ok_v
    pt, ru, rv = pt[ok], ru[ok], rv[ok]
    pos_counts = np.bincount(pt, minlength=T_out)
    return pt, ru, rv, np.floor(float(negative_ratio) * pos_counts + 0.5).astype(np.int64)


def check_edge_list_options(
    window: Union[float, int, str], vertex_set: str, target: Optional[str], features: Optional[str],
    degree_transform: Optional[str], weight_agg: str, time_unit: float, negative_ratio: float, columns: Sequence[int],
) -> tuple[float, Optional[str], Optional[str], tuple[int, ...], float]:
    """Validate :func:`load_edge_list`'s options (shared with the chunked
    reader); returns ``(window seconds, target, features, columns, window in file units)``."""
    seconds = parse_window(window)
    _check_choice("vertex_set", vertex_set, VERTEX_SETS)
    _check_choice("target", None if target == "none" else target, TARGETS)
    target = None if target == "none" else target
    _check_choice("features", None if features == "none" else features, ("degree", None))
    features = None if features == "none" else features
    _check_choice("degree_transform", degree_transform, DEGREE_TRANSFORMS)
    _check_choice("weight_agg", weight_agg, WEIGHT_AGGS)
    if isinstance(time_unit, bool) or not isinstance(time_unit, (int, float, np.number)) or not (np.isfinite(time_unit) and time_unit > 0):
        raise SignalValidationError("time_unit", f"is {time_unit!r}.", "give the seconds per unit of the time column as a positive number.")
    if isinstance(negative_ratio, bool) or not isinstance(negative_ratio, (int, float, np.number)) or not (np.isfinite(negative_ratio) and negative_ratio >= 0):
        raise SignalValidationError("negative_ratio", f"is {negative_ratio!r}.", "use a number >= 0.")
    columns = tuple(columns)
    if len(columns) != 3:
        raise SignalValidationError("columns", f"has {len(columns)} entries.", "give (source, target, time) column indices.")
    w_units = seconds / float(time_unit)

    return seconds, target, features, columns, w_units


def load_edge_list(
    path: PathLike,
    *,
    window: Union[float, int, str],
    columns: Sequence[int] = (0, 1, -1),
    delimiter: Optional[str] = None,
    features: Optional[str] = "degree",
    target: Optional[str] = "link",
    negative_ratio: float = 1.0,
    vertex_set: str = "cumulative",
    time_unit: float = 1.0,
    seed: int = 0,
    weight_column: Optional[int] = None,
    weight_agg: str = "sum",
    degree_transform: Optional[str] = None,
    undirected: bool = False,
    self_loops: bool = True,
    drop_empty: bool = True,
    skip_rows: int = 0,
) -> DynamicGraphSignal:
    r"""Read a temporal edge list and bin it into snapshot graphs.

    **Parsing.** Fields are separated by whitespace and/or commas (plus
    ``delimiter`` if given); lines starting with ``%`` or ``#`` are comments;
    ``.gz`` files are decompressed transparently. ``columns`` picks
    ``(source, target, time)`` by index (negative counts from the end; default
    the first two and the last column). Vertex ids must be integers; times may
    be fractional.

    **Snapshots.** With :math:`w` = ``window`` / ``time_unit`` (seconds per
    unit of the time column), event :math:`(u, v, \tau)` falls into window
    :math:`\lfloor (\tau - \tau_{\min}) / w \rfloor`. With ``drop_empty=True``
    windows without events are skipped (snapshot :math:`t` is the :math:`t`-th
    non-empty window), else they become empty snapshots.

    **Edges.** Inside a snapshot repeated :math:`(u, v)` events are merged into
    one edge (sorted by source, then target) whose weight is the number of
    events, or the ``weight_agg`` of column ``weight_column``. So
    :math:`\sum` edge weights (count weights) equals the number of events kept.
    ``undirected=True`` adds :math:`(v, u)` for every :math:`(u, v)`;
    ``self_loops=False`` drops events with :math:`u = v` before anything else.

    **Vertices.** Raw ids are remapped to ``0..V-1`` in order of first
    appearance in time; ``signal.vertex_map[i]`` is the raw id of vertex ``i``.
    ``vertex_set="cumulative"``: a vertex exists from its first event on
    (:math:`V_t = \{0..n_t-1\}`, local row = vertex id); ``"window"``: only
    vertices with an edge in the window (rows sorted by vertex id).

    **Features** (``features="degree"``): :math:`x_{i,t} = (\deg^{in}_t(i),
    \deg^{out}_t(i))` over the snapshot's distinct edges, ``[N, 2]`` float32,
    optionally :math:`\log(1 + \cdot)` (``degree_transform="log1p"``) or divided
    by the snapshot's largest value per column (``"normalize"``).

    **Targets** (the signal then has :math:`T-1` snapshots, the last window
    only supplies labels):

    * ``"link"``: ragged extras ``edge_label_index`` ``[2, L_t]`` (local rows
      of snapshot :math:`t`) and ``edge_label`` ``[L_t]`` (float 1/0): first
      the positives, every edge of snapshot :math:`t+1` whose endpoints both
      exist in :math:`V_t`; then :math:`\mathrm{round}(r \cdot P_t)`
      negatives (``negative_ratio`` :math:`r`), distinct pairs :math:`u \ne v`
      of :math:`V_t` that are not positives, drawn uniformly with
      ``numpy.random.default_rng(seed)`` (capped at the number of such pairs).
    * ``"degree"``: ``y`` ``[N]`` float32, the degree of the vertex in snapshot
      :math:`t+1` (:math:`\deg^{in} + \deg^{out}`; the number of neighbours
      when ``undirected``; 0 if the vertex has no edge there).
    * ``None``: no target; all :math:`T` snapshots are kept.

    Args:
        path: the edge-list file (plain or gzip).
        window: snapshot length in seconds, or a string like ``"1d"``, ``"7d"``.
        columns: ``(source, target, time)`` column indices.
        delimiter: an extra separator character (whitespace and commas always separate).
        features: ``"degree"`` or ``None``.
        target: ``"link"``, ``"degree"`` or ``None``.
        negative_ratio: negatives per positive for ``target="link"`` (``>= 0``).
        vertex_set: ``"cumulative"`` or ``"window"``.
        time_unit: seconds per unit of the time column (``1e-3`` for milliseconds).
        seed: seed of the negative sampler.
        weight_column: column holding an edge weight (e.g. a rating), or ``None``.
        weight_agg: how repeated events' weights merge: ``"sum"``, ``"mean"``, ``"max"``, ``"min"``.
        degree_transform: ``None``, ``"log1p"`` or ``"normalize"``.
        undirected: store every edge in both directions.
        self_loops: keep :math:`u = v` events.
        drop_empty: skip windows without events.
        skip_rows: data lines to skip at the top (a CSV header).

    Returns:
        A :class:`~pyg_dynscale.data.DynamicGraphSignal` with the extra
        attributes ``vertex_map`` (``[V]`` int64 raw ids), ``snapshot_time``
        (``[T]`` float64 window start, in the file's time unit) and ``window``
        (in the file's time unit). These attributes are not carried over by
        ``select``/``to``/``save``.

    Raises:
        DatasetNotFoundError: missing file.
        DatasetFormatError: wrong number of fields on a line, non-numeric or
            non-integer values (the line is named).
        SignalValidationError: an invalid option (``window <= 0``, ...).
    """
    seconds, target, features, columns, w_units = check_edge_list_options(
        window, vertex_set, target, features, degree_transform, weight_agg, time_unit, negative_ratio, columns)

    source = os.path.basename(os.fspath(path))
    table = tokenize(read_bytes(path, "edge-list file"), source, delimiter=delimiter, skip_rows=skip_rows)
    src, dst, tau, wcol, _ = edge_list_columns(table, columns, weight_column, self_loops)
    if src.shape[0] == 0:
        raise SignalValidationError("self_loops", "removed every event of the file.", "keep self-loops or check the file.")

    # ---- windows -> snapshots
    t0 = float(tau.min())
    check_windows(float(tau.max()) - t0, w_units, seconds, time_unit, target)
    b = np.floor((tau - t0) / w_units).astype(np.int64)
    if drop_empty:
        used, snap = np.unique(b, return_inverse=True)
        snap = snap.reshape(-1).astype(np.int64)
    else:
        used = np.arange(int(b.max()) + 1, dtype=np.int64)
        snap = b
    T = int(used.shape[0])
    snapshot_time = t0 + used.astype(np.float64) * w_units

    # ---- vertex ids by first appearance in time
    order = np.argsort(tau, kind="stable")
    u, v, vertex_map, first_event = remap_by_first_appearance(src, dst, order)
    V = int(vertex_map.shape[0])

    # ---- merge repeated events per snapshot (+ reverse edges if undirected)
    ew = np.ones(u.shape[0]) if wcol is None else wcol
    if undirected:
        u, v, snap, ew = reverse_events(u, v, snap, ew)
    es, eu, ev, weight = merge_events(snap, u, v, ew, None if wcol is None else weight_agg)
    edge_counts = np.bincount(es, minlength=T)

    # ---- vertex sets and local rows
    if vertex_set == "cumulative":
        first_snap = snap[first_event]  # non-decreasing: ids follow first appearance in time
        node_counts = np.searchsorted(first_snap, np.arange(T), side="right").astype(np.int64)
        node_id = None
        node_ptr = np.zeros(T + 1, dtype=np.int64)
        np.cumsum(node_counts, out=node_ptr[1:])
        lu, lv = eu, ev
        node_keys = None
    else:
        node_keys, node_counts, node_ptr, node_id, lu, lv = window_vertex_rows(es, eu, ev, V, T)
    in_deg, out_deg = vertex_degrees(node_ptr, es, lu, lv)
    node_in = partial(find_vertex_rows, node_counts, node_ptr, node_keys, V)

    fields: dict[str, SnapshotField] = {}
    T_out = T - 1 if target is not None else T
    N_out = int(node_ptr[T_out])
    E_out = int(edge_counts[:T_out].sum())
    snap_of_node = np.repeat(np.arange(T, dtype=np.int64), node_counts)

    if features == "degree":
        x = degree_features(in_deg, out_deg, degree_transform, snap_of_node, T)
        fields["x"] = SnapshotField("node", torch.from_numpy(x[:N_out].astype(np.float32)))

    if target == "degree":
        vid = np.arange(N_out, dtype=np.int64) - node_ptr[snap_of_node[:N_out]] if node_id is None else node_id[:N_out]
        y = degree_target(in_deg, out_deg, undirected, snap_of_node, vid, node_ptr, node_in)
        fields["y"] = SnapshotField("node", torch.from_numpy(y.astype(np.float32)))
    elif target == "link":
        pt, ru, rv, k = link_positives(es, eu, ev, negative_ratio, T_out, node_in)
        rng = np.random.default_rng(seed)
        nt, nu, nv = sample_negative_pairs(node_counts[:T_out], k, pt, ru, rv, rng)
        lt = np.concatenate([pt, nt])
        li = np.stack([np.concatenate([ru, nu]), np.concatenate([rv, nv])])
        lab = np.concatenate([np.ones(pt.shape[0]), np.zeros(nt.shape[0])])
        lo = np.argsort(lt, kind="stable")
        lptr = torch.zeros(T_out + 1, dtype=torch.long)
        torch.cumsum(torch.from_numpy(np.bincount(lt, minlength=T_out)), 0, out=lptr[1:])
        fields["edge_label_index"] = SnapshotField("ragged", torch.from_numpy(np.ascontiguousarray(li[:, lo])), lptr, 1)
        fields["edge_label"] = SnapshotField("ragged", torch.from_numpy(lab[lo].astype(np.float32)), lptr.clone(), 0)

    edge_ptr = np.zeros(T_out + 1, dtype=np.int64)
    np.cumsum(edge_counts[:T_out], out=edge_ptr[1:])
    signal = DynamicGraphSignal.from_tensors(
        node_ptr=torch.from_numpy(node_ptr[: T_out + 1].copy()),
        edge_index=torch.from_numpy(np.stack([lu[:E_out], lv[:E_out]])),
        edge_ptr=torch.from_numpy(edge_ptr),
        node_id=None if node_id is None else torch.from_numpy(node_id[:N_out].copy()),
        edge_weight=torch.from_numpy(weight[:E_out].astype(np.float32)),
        fields=fields,
        num_vertices=V,
    )
    signal.vertex_map = torch.from_numpy(vertex_map.astype(np.int64))
    signal.snapshot_time = torch.from_numpy(snapshot_time[:T_out].copy())
    signal.window = w_units
    return signal
