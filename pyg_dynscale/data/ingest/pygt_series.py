r"""Chunked readers of PyGT's standardized single-series JSON files
(``wikimaths``, ``montevideo_bus``) and of MTM (``mtm``): the snapshots of
:func:`~pyg_dynscale.data.loaders.load_pygt_json`, bitwise, without holding
the series.

**Three steps.** (1) One walk over the file writes the series to an on-disk
buffer under the output directory (removed afterwards): WikiMaths time step by
time step (``[T, V]``, its members in any order), Montevideo bus node by node
(``[V * F, T]``, one node's object held at a time), MTM joint by joint and
frame by frame (one ``[L, 3]`` column per joint). (2) The columns are
standardized in blocks of columns with the loader's own
:func:`~pyg_dynscale.data.loaders.pygt_json.standardize` on a block laid out as
the loader's array is (row-major ``[T, b]`` for WikiMaths, the transposed
``[b, T]`` for Montevideo), so each column's mean and deviation are summed in
the same order as on the whole array: a row-major block is at least two
columns wide (numpy sums a one-column block pairwise, a wider one row by row).
(3) The lag windows are emitted in chunks of snapshots from the standardized
buffer, each chunk through ``static_signal`` (the loader's conversion), with
the graph stored once.

**Errors.** WikiMaths' file is checked as the loader checks it (the same
:class:`~pyg_dynscale.data.loaders.DatasetFormatError` messages in the same
order). For Montevideo bus and MTM, any irregularity met while streaming (a
missing key, a ragged or non-numeric series, a short joint, a duplicate key)
hands the file to ``load_pygt_json`` for its error (or, for a file the loader
accepts but the stream does not, such as booleans among the numbers or integers
from 2^53 up, its signal): that path holds the file; a file in PyGT's layout
never takes it. Option errors (``lags``, ``frames``) and NaN/inf
in the standardized windows are raised without it, with the loader's messages.

Memory: a block of ``BLOCK_VALUES`` numbers (at least two columns of ``T``),
a chunk of about ``BLOCK_VALUES`` window values, one member (a node, a
time step's row), the graph, and ``O(T)`` (``O(L)``) counters.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional

import numpy as np

from ...errors import SignalValidationError
from ..loaders._common import DatasetFormatError, read_bytes
from ..normalize import check_series_vary
from ..loaders.pygt_json import (
    BUILDERS,
    PygtReader,
    check_json_object,
    check_lags,
    lag_windows,
    standardize,
    static_signal,
)
from ..mapped import StoreWriter
from .external import Scratch
from .json_members import SeriesCheck, collect_members
from .json_stream import ARRAY, JsonStream
from .text import open_text

#: numbers per column block (standardization) and per chunk of window values
BLOCK_VALUES = 1 << 16
#: MTM frames parsed at a time
FRAME_CHUNK = 1024
_JOINTS = tuple(str(j) for j in range(21))
_EXACT_INT = 2 ** 53  # integers stored as float64 in the buffer come back exactly below this


class Irregular(Exception):
    """The streamed file is not the regular layout: ``load_pygt_json`` gives its error."""


# --------------------------------------------------------------------- shared
class _Static:
    """Append chunks of snapshots of one static graph to the store (graph stored once)."""

    def __init__(self, writer: StoreWriter, edges: np.ndarray, weights: np.ndarray) -> None:
        self.w, self.edges, self.weights = writer, edges, weights
        self.nodes, self.fields = 0, None

    def add(self, snap) -> None:
        if self.fields is None:
            self.w.append("node_ptr", np.zeros(1, dtype=np.int64))
            self.w.put("static_edge_index", np.ascontiguousarray(self.edges, dtype=np.int64), axis=1)
            self.w.put("static_edge_weight", np.ascontiguousarray(self.weights, dtype=np.float32))
            self.fields = [{"name": n, "level": f.level, "cat_dim": int(f.cat_dim)} for n, f in snap.fields.items()]
        self.w.append("node_ptr", snap.node_ptr[1:] + self.nodes)
        self.w.append("node_id", snap.node_id)
        for name, f in snap.fields.items():
            self.w.append(f"field.{name}.values", f.values)
        self.nodes += int(snap.node_ptr[-1])

    def finish(self, V: int) -> None:
        self.w.attrs.update({"num_vertices": int(V), "fields": self.fields or []})


def _nonfinite_rows(a: np.ndarray) -> np.ndarray:
    """NaN/inf per row of ``a`` as the signal sees it (after the float32 cast)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.count_nonzero(~np.isfinite(a.astype(np.float32)), axis=1)


def check_finite(xrows: np.ndarray, yrows: Optional[np.ndarray], lags: int, x_level: str = "node") -> None:
    """The whole signal's NaN/inf errors (features, then targets) from the
    counts per row of the (standardized) series: row ``t`` is in the features
    of snapshots ``t - lags + 1 .. t`` and is the target of snapshot ``t - lags``.
    A graph-level field's message names no snapshot (as the signal's check)."""
    count = xrows.shape[0] - lags
    for display, rows, target in (("features", xrows, False), ("targets", yrows, True)):
        if rows is None:
            continue
        total, first = 0, None
        for t in np.flatnonzero(rows):
            t = int(t)
            lo, hi = (t - lags, t - lags) if target else (max(0, t - lags + 1), min(t, count - 1))
            if lo < 0 or hi < lo:
                continue
            total += int(rows[t]) * (hi - lo + 1)
            first = lo if first is None else min(first, lo)
        if total:
            where = f" (first in snapshot {first})" if target or x_level == "node" else ""
            raise SignalValidationError(display, f"contains {total} NaN/inf values{where}.",
                                        "clean or impute them, or pass allow_nonfinite=True if they are intended.")


def _blocks(C: int, T: int):
    """Column ranges of about BLOCK_VALUES numbers, none one column wide unless ``C == 1``
    (numpy sums a one-column block pairwise, wider ones row by row as the whole array)."""
    width = max(2, BLOCK_VALUES // max(T, 1))
    c0 = 0
    while c0 < C:
        c1 = min(C, c0 + width)
        if C - c1 == 1:
            c1 = C
        yield c0, c1
        c0 = c1


def _empty_map(path: str, shape: tuple[int, int]) -> None:
    with open(path, "wb") as fh:
        fh.truncate(int(np.prod(shape)) * 8)


def _write_cols(path: str, shape: tuple[int, int], c0: int, c1: int, values: np.ndarray) -> None:
    # mapped per block and closed again: the written pages do not stay mapped into the reader
    m = np.memmap(path, dtype=np.float64, mode="r+", shape=shape)
    m[:, c0:c1] = values
    m.flush()
    del m


def _read_rows(path: str, shape: tuple[int, int], r0: int, r1: int) -> np.ndarray:
    m = np.memmap(path, dtype=np.float64, mode="r", shape=shape)
    try:
        return np.array(m[r0:r1])
    finally:
        del m


def _windows(app: _Static, xpath: str, xshape: tuple[int, int], ypath: str, yshape: tuple[int, int], lags: int,
             edges: np.ndarray, weights: np.ndarray, V: int, x_level: str) -> None:
    """Snapshots ``i < T - lags`` (``x = Z[i:i+lags].T``, ``y = Y[i+lags]``) in chunks, as the loader builds them."""
    T, C = xshape
    count = T - lags
    k = max(1, BLOCK_VALUES // max(1, C * lags))
    for i0 in range(0, count, k):
        i1 = min(count, i0 + k)
        rows = _read_rows(xpath, xshape, i0, i1 + lags)
        x = lag_windows(rows, lags)  # [i1 - i0, C, lags]
        y = _read_rows(ypath, yshape, i0 + lags, i1 + lags) if ypath != xpath else rows[lags:]
        app.add(static_signal(edges, weights, x, y, V, x_level=x_level, allow_nonfinite=True))


# --------------------------------------------------------------------- wikimaths
def wikimaths(path: str, writer: StoreWriter, scratch: Scratch, read_chars: int, lags: Any,
              allow_nonfinite: bool) -> None:
    """load_pygt_json's _wikimaths: its checks in its order, then standardized lag windows."""
    with open_text(path, "PyGT JSON file") as fh:
        data = collect_members(JsonStream(fh, path, read_chars), scratch)
    check_json_object(data, path)
    r = PygtReader(data, path, "wikimaths")
    edges = r.edges(r.get(data, "edges"), "key 'edges'")
    weights = r.array(r.get(data, "weights"), "key 'weights'", ndim=1)
    if weights.shape[0] != edges.shape[1]:
        raise r.fail("key 'weights'", f"has {weights.shape[0]} entries for {edges.shape[1]} edges.")
    T = r.time_periods()
    lags = check_lags(lags, T, "feature_lags", r)
    seen = SeriesCheck()
    for t in range(T):  # presence first, as the loader's list of rows; a row's shape is judged with all of them
        seen.row(t, r.get(r.get(data, str(t)), "y", f"[{str(t)!r}]"))
    _, dtype = seen.check(r, "key '<t>'['y']")
    V = seen.width
    for t in range(T):  # the rows in time order, in the array's common dtype
        scratch.append("raw", np.asarray(data[str(t)]["y"]).astype(dtype)[None])
    raw = scratch.array("raw")
    std_path = os.path.join(scratch.dir, "std")
    _empty_map(std_path, (T, V))
    xrows = np.zeros(T, dtype=np.int64)
    for c0, c1 in _blocks(V, T):
        if not allow_nonfinite:  # the loader's check of a constant series, block by block (the first is named)
            check_series_vary(raw[:, c0:c1], "y", lambda s: f"node {s}", first=c0)
        s = standardize(np.ascontiguousarray(raw[:, c0:c1]))  # laid out as the loader's [T, V] array
        xrows += _nonfinite_rows(s)
        _write_cols(std_path, (T, V), c0, c1, s)
    # the whole signal's checks in its order: the graph (on a stand-in snapshot), then NaN/inf in x, y
    static_signal(edges, weights, np.zeros((1, V, lags), dtype=np.float32), np.zeros((1, V)), V, allow_nonfinite=True)
    if not allow_nonfinite:
        check_finite(xrows, xrows, lags)
    app = _Static(writer, edges, weights)
    _windows(app, std_path, (T, V), std_path, (T, V), lags, edges, weights, V, "node")
    app.finish(V)


# --------------------------------------------------------------------- montevideo bus
def _series_row(value: Any, T: Optional[int]) -> tuple[np.ndarray, np.dtype]:
    """A node's series as float64 (exact) with its own dtype, or Irregular."""
    if not isinstance(value, list):
        raise Irregular
    try:
        a = np.array(value)
    except ValueError:
        raise Irregular from None
    if a.ndim != 1 or a.dtype.kind not in "if" or (T is not None and a.shape[0] != T) or a.shape[0] == 0:
        raise Irregular
    if a.dtype.kind == "i" and a.size and int(np.abs(a).max()) > _EXACT_INT:
        raise Irregular
    return a.astype(np.float64), a.dtype


def montevideo_bus(path: str, writer: StoreWriter, scratch: Scratch, read_chars: int, lags: Any, target_var: Any,
                   feature_vars: Any, allow_nonfinite: bool) -> None:
    """load_pygt_json's _montevideo_bus: nodes walked one at a time into a node-major buffer."""
    if isinstance(feature_vars, str):
        feature_vars = [feature_vars]
    feature_vars = list(feature_vars)
    if not feature_vars:
        raise Irregular  # the loader's option error comes after its JSON checks
    F = len(feature_vars)
    ids: list[Any] = []
    src: list[Any] = []
    dst: list[Any] = []
    wts: list[Any] = []
    seen_keys: set = set()
    T = None
    fdtypes, ydtypes = set(), set()
    with open_text(path, "PyGT JSON file") as fh:
        for p, value in JsonStream(fh, path, read_chars).walk(lambda p: False, lambda p: p in (("nodes",), ("links",))):
            if not p:
                raise Irregular  # not an object
            if len(p) == 1:
                if p[0] in ("nodes", "links") and (p[0] in seen_keys or value is not ARRAY):
                    raise Irregular  # a repeated key (json.loads keeps the last) or not a list
                seen_keys.add(p[0])
                continue
            if p[0] == "nodes":
                if not (isinstance(value, dict) and "bus_stop" in value and isinstance(value.get("X"), dict)
                        and target_var in value and all(v in value["X"] for v in feature_vars)):
                    raise Irregular
                ids.append(value["bus_stop"])
                for v in feature_vars:
                    row, dt = _series_row(value["X"][v], T)
                    T = row.shape[0]
                    fdtypes.add(dt)
                    scratch.append("feat", row[None])
                row, dt = _series_row(value[target_var], T)
                ydtypes.add(dt)
                scratch.append("targ", row[None])
            else:
                if not (isinstance(value, dict) and all(k in value for k in ("source", "target", "weight"))):
                    raise Irregular
                src.append(value["source"])
                dst.append(value["target"])
                wts.append(value["weight"])
    if seen_keys != {"nodes", "links"} or not ids:
        raise Irregular
    r = PygtReader({}, path, "montevideo_bus")
    node_ids = np.array(ids)
    weights = np.array(wts).T
    uniq, first = np.unique(node_ids, return_index=True)
    if uniq.shape[0] != node_ids.shape[0]:
        raise Irregular
    cols = []
    for ends in (np.array(src), np.array(dst)):
        if ends.size == 0:
            cols.append(np.zeros(0, dtype=np.int64))
            continue
        pos = np.clip(np.searchsorted(uniq, ends), 0, uniq.shape[0] - 1)
        if (uniq[pos] != ends).any():
            raise Irregular
        cols.append(first[pos].astype(np.int64))
    edges = np.stack(cols) if len(src) else np.zeros((2, 0), dtype=np.int64)
    V = len(ids)
    lags = check_lags(lags, T, "feature_lags", r)
    fdtype, ydtype = np.result_type(*fdtypes), np.result_type(*ydtypes)
    shapes = {"feat": (T, V * F), "targ": (T, V)}
    paths = {}
    xrows = np.zeros(T, dtype=np.int64)
    yrows = np.zeros(T, dtype=np.int64)
    series_names = {"feat": ("X", lambda s: f"bus stop {str(node_ids[s // F])!r}, variable {feature_vars[s % F]!r}"),
                    "targ": (target_var, lambda s: f"bus stop {str(node_ids[s])!r}")}
    for name, dtype, counts in (("feat", fdtype, xrows), ("targ", ydtype, yrows)):
        col = scratch.array(name)
        paths[name] = os.path.join(scratch.dir, f"std.{name}")
        _empty_map(paths[name], shapes[name])
        for c0, c1 in _blocks(shapes[name][1], T):
            # [b, T] node-major rows, transposed: the loader's feats.reshape(V*F, T).T layout
            block = np.ascontiguousarray(col[c0:c1].astype(dtype)).T
            if not allow_nonfinite:  # the loader's check of a constant series (the first is named)
                check_series_vary(block, *series_names[name], first=c0)
            s = standardize(block)
            counts += _nonfinite_rows(s)
            _write_cols(paths[name], shapes[name], c0, c1, s)
    x_level = "node" if F == 1 else "graph"
    stand_in = np.zeros((1, V * F, lags)) if F > 1 else np.zeros((1, V, lags))
    static_signal(edges, weights, stand_in, np.zeros((1, V)), V, x_level=x_level, allow_nonfinite=True)
    if not allow_nonfinite:
        check_finite(xrows, yrows, lags, x_level)
    app = _Static(writer, edges, weights)
    _windows(app, paths["feat"], shapes["feat"], paths["targ"], shapes["targ"], lags, edges, weights, V, x_level)
    app.finish(V)


# --------------------------------------------------------------------- mtm
def _parse_frames(strings: list[Any]) -> np.ndarray:
    """``[n, 3]`` coordinates of n ``'(x, y, z)'`` strings, parsed as the loader parses a joint."""
    if not all(isinstance(s, str) for s in strings):
        raise Irregular
    text = ",".join(strings).replace("(", "").replace(")", "")
    try:
        xyz = np.array(text.split(","), dtype=np.float64)
    except ValueError:
        raise Irregular from None
    if xyz.shape[0] != 3 * len(strings):
        raise Irregular
    return xyz.reshape(len(strings), 3)


def mtm(path: str, writer: StoreWriter, scratch: Scratch, read_chars: int, frames: Any, allow_nonfinite: bool) -> None:
    """load_pygt_json's _mtm: joints walked frame by frame into one column per joint."""
    counts: dict[str, int] = {}
    edges_value: Any = None
    nlabels, lmin, lmax = 0, None, None
    pending: list[Any] = []
    current: Optional[str] = None
    top: set = set()

    def flush() -> None:
        if pending:
            scratch.append(f"joint.{current}", _parse_frames(pending))
            pending.clear()

    labels: list[Any] = []

    def flush_labels() -> None:
        nonlocal nlabels, lmin, lmax
        if labels:
            a = np.array(labels)
            if a.dtype.kind != "i" or a.ndim != 1:
                raise Irregular
            scratch.append("label", a.astype(np.int64))
            nlabels += a.shape[0]
            lmin = int(a.min()) if lmin is None else min(lmin, int(a.min()))
            lmax = int(a.max()) if lmax is None else max(lmax, int(a.max()))
            labels.clear()

    descend = lambda p: len(p) == 1 and (p[0] in _JOINTS or p[0] == "LABEL")  # noqa: E731
    with open_text(path, "PyGT JSON file") as fh:
        for p, value in JsonStream(fh, path, read_chars).walk(descend):
            if not p:
                raise Irregular
            key = p[0]
            if len(p) == 1:
                if key in top or key in _JOINTS or key == "LABEL":
                    raise Irregular  # repeated, or a joint / LABEL that is not an object
                top.add(key)
                if key == "edges":
                    edges_value = value
                continue
            if key == "LABEL":
                if current is not None:
                    flush()
                    current = None
                top.add(key)
                labels.append(value)
                if len(labels) >= FRAME_CHUNK:
                    flush_labels()
                continue
            if key != current:
                flush()
                flush_labels()
                if key in counts:
                    raise Irregular  # a repeated joint
                current = key
                top.add(key)
            counts[key] = counts.get(key, 0) + 1
            pending.append(value)
            if len(pending) >= FRAME_CHUNK:
                flush()
        flush()
        flush_labels()
    if edges_value is None or set(counts) != set(_JOINTS) or len(set(counts.values())) != 1 or "LABEL" not in top:
        raise Irregular
    L = counts["0"]
    if nlabels != L or lmin < 0:
        raise Irregular
    r = PygtReader({"edges": edges_value}, path, "mtm")
    try:
        edges = r.edges(edges_value, "key 'edges'")
    except DatasetFormatError:
        raise Irregular from None
    # the loader's option checks, reached on a regular file
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1:
        raise SignalValidationError("frames", f"is {frames!r}.", "use a positive integer (PyGT's default is 16).")
    if frames >= L:
        raise SignalValidationError("frames", f"is {frames} but the file has only {L} frames.", f"use frames < {L}.")
    frames = int(frames)
    joints = [scratch.array(f"joint.{j}") for j in _JOINTS]
    label_col = scratch.array("label")
    eye = np.eye(lmax + 1)
    weights = np.ones(edges.shape[1], dtype=np.int64)
    static_signal(edges, weights, np.zeros((1, 3, 21, frames)), np.zeros((1, frames, lmax + 1)), 21,
                  x_level="graph", y_level="graph", allow_nonfinite=True)
    count = L - frames
    k = max(1, BLOCK_VALUES // (63 * frames))
    if not allow_nonfinite:  # features NaN/inf from the parsed coordinates (targets are one-hot)
        xrows = np.zeros(L, dtype=np.int64)
        for f0 in range(0, L, k):
            block = np.stack([j[f0:f0 + k] for j in joints], axis=1).reshape(-1, 63)
            xrows[f0:f0 + block.shape[0]] = _nonfinite_rows(block)
        check_finite(xrows, None, frames, "graph")
    app = _Static(writer, edges, weights)
    for i0 in range(0, count, k):
        i1 = min(count, i0 + k)
        feats = np.stack([j[i0:i1 + frames] for j in joints], axis=1)  # [n, 21, 3] as the loader's features rows
        ohe = eye[label_col[i0:i1 + frames]]
        # PyGT: x[i] = features[i:i+frames].T -> [3, 21, frames]; y[i] = ohe[i:i+frames] -> [frames, C]
        x = np.lib.stride_tricks.sliding_window_view(feats, frames, axis=0)[: i1 - i0].transpose(0, 2, 1, 3)
        y = np.lib.stride_tricks.sliding_window_view(ohe, frames, axis=0)[: i1 - i0].transpose(0, 2, 1)
        app.add(static_signal(edges, weights, x, y, 21, x_level="graph", y_level="graph", allow_nonfinite=True))
    app.finish(21)


def in_memory(path: str, dataset: str, opts: dict[str, Any], allow_nonfinite: bool):
    """The loader on the whole file: its error (or, for a file the stream found
    irregular but the loader accepts, its signal)."""
    raw = read_bytes(path, "PyGT JSON file")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetFormatError(path, "JSON", f"is malformed ({exc}).", "re-download the file; it must be PyGT's JSON.") from None
    check_json_object(data, path)
    return BUILDERS[dataset](PygtReader(data, path, dataset), **opts, allow_nonfinite=allow_nonfinite)


STREAMED_SERIES = {"wikimaths": wikimaths, "montevideo_bus": montevideo_bus, "mtm": mtm}
