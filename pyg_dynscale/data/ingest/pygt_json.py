r"""Chunked reader of PyGT JSON files whose edges change every snapshot
(``twitter_tennis``, ``england_covid``) into a signal store: the snapshots of
:func:`~pyg_dynscale.data.loaders.load_pygt_json`, without holding the file.

**Streaming.** The file is walked member by member
(:class:`~pyg_dynscale.data.ingest.json_stream.JsonStream`, no dependency):
each snapshot's arrays (Twitter tennis ``["t"]["edges" | "weights" | "X" |
"y"]``, England COVID ``["edge_mapping"]["edge_index" | "edge_weight"]["t"]``)
are decoded one at a time, converted with ``numpy.array`` exactly as the
in-memory loader converts them, and appended to scratch files; the members may
come in any order (England COVID's days do not come in order). Then the
snapshots are assembled in time order, each with the in-memory loader's code
and checks (the same :class:`~pyg_dynscale.data.loaders.pygt_json.PygtReader`
messages) into a one-snapshot signal, and appended to the store.

**Equal to the in-memory loader**, snapshot for snapshot, with the same errors
(a malformed file's position included). Memory: one member value (a
snapshot's arrays) and, for England COVID, the ``[T, V]`` case series ``y``
(it is standardized over all days).

**The single-series datasets** ``chickenpox`` (``edges``, ``FX``) and
``pedalme`` (``edges``, ``weights``, ``X``) are one static graph and one
``[T, V]`` series held in a single JSON value, which is walked element by
element (one time step's list at a time), in two passes over the file: the
first reads the graph and checks the series (its length, its rows' lengths
and dtypes: the in-memory loader's checks and messages, in its order), the
second builds the lag windows (snapshot ``i``: ``x = Z[i:i+lags].T``,
``y = Z[i+lags]``) from the last ``lags + 1`` rows only. The graph is stored
once (``static_edge_index``). Memory: ``lags + 1`` rows and the graph.

**The standardized and node-by-node series** ``wikimaths`` (one member per
time step), ``montevideo_bus`` (node by node) and ``mtm`` (joint by joint):
:mod:`~pyg_dynscale.data.ingest.pygt_series` writes the series to an on-disk
buffer under the output directory, standardizes it block of columns by block
(the loader's arithmetic, the same sums in the same order) and emits the lag
windows from it; the buffer is removed afterwards.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np
import torch

from ...errors import SignalValidationError
from ..loaders._common import PathLike
from ..loaders.pygt_json import (
    PygtReader,
    canonical_dataset_name,
    check_json_object,
    check_lags,
    check_tennis_options,
    covid_day,
    covid_series,
    dataset_options_of,
    default_event_id,
    detected_dataset,
    resolve_path,
    static_signal,
    tennis_snapshot,
    tennis_target,
)
from ..mapped import CHUNK_BYTES, SignalAppender, StoreWriter, load_signal_store, save_signal_store
from ..signal import DynamicGraphSignal
from .external import Scratch
from .json_members import SeriesCheck, collect_members
from .json_stream import ARRAY, READ_CHARS, JsonStream
from .pygt_series import STREAMED_SERIES, Irregular, in_memory
from .text import open_text

#: the datasets read member by member
STREAMED = ("twitter_tennis", "england_covid")
#: the single-series datasets whose series is walked time step by time step -> the series key
SERIES_KEYS = {"chickenpox": "FX", "pedalme": "X"}


def _append(app: SignalAppender, sig_args: tuple, t: int, allow_nonfinite: bool) -> None:
    """One snapshot through the list constructor (its conversions and checks),
    the error naming snapshot ``t`` as the whole-signal constructor would."""
    try:
        sig = DynamicGraphSignal(*sig_args, dtype=torch.float32, allow_nonfinite=allow_nonfinite)
    except SignalValidationError as exc:
        raise SignalValidationError(exc.field.replace("[0]", f"[{t}]"), exc.problem.replace("snapshot 0 ", f"snapshot {t} "),
                                    exc.fix) from None
    app.append(sig)


def _twitter_tennis(r: PygtReader, app: SignalAppender, event_id: str, N: Optional[int], feature_mode: Optional[str],
                    target_offset: int, allow_nonfinite: bool) -> None:
    # load_pygt_json's _twitter_tennis, one snapshot at a time
    check_tennis_options(event_id, N, feature_mode, target_offset)
    T = r.time_periods()
    snaps = [r.get(r.data, str(t)) for t in range(T)]  # presence, as the in-memory loader checks first
    for t, s in enumerate(snaps):
        e, w, X = tennis_snapshot(r, s, t, N, feature_mode)
        r.get(s, "y", f"[{str(t)!r}]")
        raw = r.get(snaps[min(t + int(target_offset), T - 1)], "y", f"[{str(min(t + int(target_offset), T - 1))!r}]")
        _append(app, ([e], [w], [X], [tennis_target(r, raw, t, N)]), t, allow_nonfinite)


def _england_covid(r: PygtReader, app: SignalAppender, lags: int, allow_nonfinite: bool) -> None:
    # load_pygt_json's _england_covid, one snapshot at a time: its checks in its order (every day's edges,
    # then the series), then the snapshots (each day's edges decoded again rather than kept)
    T = r.time_periods()
    lags = check_lags(lags, T, "feature_lags", r)
    for t in range(T - lags):
        covid_day(r, t)
    x, y = covid_series(r, T, lags)
    for t in range(T - lags):
        e, w = covid_day(r, t)
        _append(app, ([e], [w], np.ascontiguousarray(x[t:t + 1], dtype=np.float32), [y[t].astype(np.float32)]),
                t, allow_nonfinite)


def ingest_pygt_json(
    path_or_name: Union[PathLike, str],
    out: PathLike,
    dataset: Optional[str] = None,
    *,
    cache_dir: Optional[PathLike] = None,
    allow_nonfinite: bool = False,
    read_chars: int = READ_CHARS,
    overwrite: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    **dataset_options: Any,
) -> DynamicGraphSignal:
    r"""Read a PyGT JSON file member by member into the signal store ``out``
    and open it memory-mapped; equal to
    :func:`~pyg_dynscale.data.loaders.load_pygt_json` with the same arguments.

    Args:
        path_or_name, dataset, cache_dir, allow_nonfinite, dataset_options: as
            ``load_pygt_json``; every dataset of ``load_pygt_json`` (detection
            walks the file once more).
        read_chars: bytes read from the file at a time.
        out, overwrite, chunk_bytes: the store directory, whether to replace
            an existing one, its checksum granularity.

    Raises:
        DatasetNotFoundError, DatasetFormatError, SignalValidationError: as
            ``load_pygt_json``, with its messages (for an irregular Montevideo
            bus or MTM file, found by ``load_pygt_json`` on the whole file).
    """
    if dataset is not None:
        dataset = canonical_dataset_name(dataset)
    path, dataset = resolve_path(path_or_name, dataset, cache_dir, default_event_id(path_or_name, dataset_options))
    if dataset is None:
        with open_text(path, "PyGT JSON file") as fh:
            dataset = _detect(JsonStream(fh, path, read_chars), path)
    if dataset in SERIES_KEYS:
        opts = dataset_options_of(dataset, dataset_options)
        with StoreWriter(out, "signal", overwrite=overwrite, chunk_bytes=chunk_bytes) as writer:
            _series(path, dataset, writer, read_chars, **opts, allow_nonfinite=allow_nonfinite)
        return load_signal_store(out, DynamicGraphSignal, verify=False)
    if dataset in STREAMED_SERIES:
        opts = dataset_options_of(dataset, dataset_options)
        try:
            with StoreWriter(out, "signal", overwrite=overwrite, chunk_bytes=chunk_bytes) as writer, \
                    Scratch(os.fspath(out)) as scratch:  # the on-disk series buffers, removed on exit
                STREAMED_SERIES[dataset](path, writer, scratch, read_chars, **opts, allow_nonfinite=allow_nonfinite)
        except Irregular:
            # an irregular file (Montevideo bus, MTM): the loader's error, found on the whole file
            save_signal_store(in_memory(path, dataset, opts, allow_nonfinite), out, overwrite=overwrite,
                              chunk_bytes=chunk_bytes)
        return load_signal_store(out, DynamicGraphSignal, verify=False)
    with open_text(path, "PyGT JSON file") as fh, \
            StoreWriter(out, "signal", overwrite=overwrite, chunk_bytes=chunk_bytes) as writer, \
            Scratch(os.fspath(out)) as scratch:  # committed on success, else dropped
        data = collect_members(JsonStream(fh, path, read_chars), scratch)
        check_json_object(data, path)
        opts = dataset_options_of(dataset, dataset_options)
        app = SignalAppender(writer)
        reader = PygtReader(data, path, dataset)
        if dataset == "twitter_tennis":
            _twitter_tennis(reader, app, **opts, allow_nonfinite=allow_nonfinite)
        else:
            _england_covid(reader, app, **opts, allow_nonfinite=allow_nonfinite)
        app.finish()
    return load_signal_store(out, DynamicGraphSignal, verify=False)


def _descend(path: tuple[str, ...]) -> bool:
    return len(path) == 1 or (len(path) == 2 and path[0] == "edge_mapping")


def _detect(stream: JsonStream, path: str) -> str:
    """The dataset of the file by its keys (``detect_dataset``), walking it
    without holding it: top-level arrays element by element."""
    keys: dict[str, Any] = {}
    top = None
    for p, value in stream.walk(_descend, lambda p: len(p) == 1):
        if not p:
            top = value
            continue
        # detect_dataset looks at the top-level keys and at member "0"'s "edges" / "X" only: recording
        # every member's keys would hold MTM's frames (21 joints x every frame)
        if p[0] not in keys:
            keys[p[0]] = {} if len(p) > 1 and not isinstance(p[1], int) else None
        if len(p) > 1 and p[0] == "0" and p[1] in ("edges", "X") and isinstance(keys[p[0]], dict):
            keys[p[0]][p[1]] = None
    if top is not None:
        check_json_object(top, path)
    return detected_dataset(keys, path)


def _series(path: str, dataset: str, writer: StoreWriter, read_chars: int, lags: int, allow_nonfinite: bool) -> None:
    """load_pygt_json's _chickenpox / _pedalme in two passes over the file:
    the graph and the series' checks, then the lag windows from the last
    ``lags + 1`` rows, appended to the store with the graph stored once."""
    key = SERIES_KEYS[dataset]
    is_series = lambda p: p == (key,)  # noqa: E731
    data: dict[str, Any] = {}
    seen = SeriesCheck()
    with open_text(path, "PyGT JSON file") as fh:
        for p, value in JsonStream(fh, path, read_chars).walk(lambda p: False, is_series):
            if not p:
                check_json_object(value, path)
            elif p == (key,):
                data[key] = value
                seen = SeriesCheck() if value is ARRAY else None  # a repeated key: the last counts, as json.loads
            elif len(p) == 2:
                seen.row(p[1], value)
            else:
                data[p[0]] = value
    r = PygtReader(data, path, dataset)
    # the in-memory loader's checks, in its order
    edges = r.edges(r.get(data, "edges"), "key 'edges'")
    if dataset == "pedalme":
        weights = r.array(r.get(data, "weights"), "key 'weights'", ndim=1)
        if weights.shape[0] != edges.shape[1]:
            raise r.fail("key 'weights'", f"has {weights.shape[0]} entries for {edges.shape[1]} edges.")
    else:
        weights = np.ones(edges.shape[1])
    r.get(data, key)
    if seen is None:  # not an array: the in-memory loader's error
        r.array(data[key], f"key {key!r}", ndim=2)
        raise r.fail(f"key {key!r}", "is not a [time, node] array of numbers.")
    T, dtype = seen.check(r, f"key {key!r}")
    lags = check_lags(lags, T, "feature_lags", r)
    V = seen.width
    # the whole signal's checks in its order: the graph (on a stand-in snapshot), then NaN/inf in x, y
    static_signal(edges, weights, np.zeros((1, V, lags), dtype=np.float32), np.zeros((1, V), dtype=dtype), V,
                   allow_nonfinite=True)
    if not allow_nonfinite:
        seen.check_finite(lags, dtype)
    window: list[np.ndarray] = []
    nodes = 0
    static = False
    with open_text(path, "PyGT JSON file") as fh:
        for p, value in JsonStream(fh, path, read_chars).walk(lambda p: False, is_series):
            if len(p) != 2 or p[0] != key:
                if p == (key,):
                    window = []
                continue
            window.append(np.array(value).astype(dtype, copy=False))
            if len(window) <= lags:
                continue
            i = p[1] - lags
            stacked = np.stack(window)  # rows i .. i + lags
            window.pop(0)
            snap = _one_snapshot(edges, weights, stacked, lags, V, allow_nonfinite, i, T - lags)
            if not static:
                writer.append("node_ptr", np.zeros(1, dtype=np.int64))
                writer.put("static_edge_index", np.ascontiguousarray(edges, dtype=np.int64), axis=1)
                writer.put("static_edge_weight", np.ascontiguousarray(weights, dtype=np.float32))
                static = True
            writer.append("node_ptr", snap.node_ptr[1:] + nodes)
            writer.append("node_id", snap.node_id)
            for name, f in snap.fields.items():
                writer.append(f"field.{name}.values", f.values)
            nodes += int(snap.node_ptr[-1])
    writer.attrs.update({"num_vertices": int(V), "fields": [{"name": n, "level": "node", "cat_dim": 0} for n in ("x", "y")]})


def _one_snapshot(edges: np.ndarray, weights: np.ndarray, stacked: np.ndarray, lags: int, V: int,
                  allow_nonfinite: bool, i: int, count: int) -> DynamicGraphSignal:
    """Snapshot ``i`` (of ``count``) from rows ``i .. i + lags`` of the series,
    with the in-memory loader's code and checks (errors naming snapshot ``i``)."""
    x = stacked[None, :lags].transpose(0, 2, 1)  # [1, V, lags] = Z[i:i+lags].T
    try:
        return static_signal(edges, weights, x, stacked[None, lags], V, allow_nonfinite=allow_nonfinite)
    except SignalValidationError as exc:
        if i == 0:
            raise
        raise SignalValidationError(exc.field, exc.problem.replace("snapshot 0", f"snapshot {i}"), exc.fix) from None
