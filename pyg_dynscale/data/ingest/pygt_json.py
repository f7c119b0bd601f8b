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

**The other datasets** (``chickenpox``, ``pedalme``, ``wikimaths``,
``montevideo_bus``, ``mtm``) are a static graph and one ``[T, V]`` series held
in a single JSON value, which ``load_pygt_json`` reads whole; they raise
:class:`~pyg_dynscale.errors.UnsupportedOptionError` naming the way to a
store: ``save_signal_store(load_pygt_json(path), out)``.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Optional, Union

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from ...errors import SignalValidationError, UnsupportedOptionError
from ..loaders._common import DatasetFormatError, PathLike
from ..loaders.pygt_json import (
    DATASET_OPTIONS,
    DATASETS,
    PygtReader,
    canonical_dataset_name,
    check_lags,
    detect_dataset,
    encode_tennis_features,
    resolve_path,
    standardize,
)
from ..mapped import CHUNK_BYTES, SignalAppender, StoreWriter, load_signal_store
from ..signal import DynamicGraphSignal
from .external import Scratch
from .json_stream import READ_CHARS, JsonStream
from .text import open_text

#: the datasets read member by member
STREAMED = ("twitter_tennis", "england_covid")


class _Leaf:
    """A member's value kept on disk: ``numpy.array(value)`` in a scratch
    column of its dtype (or, when it is not a numeric array, the value itself,
    for the checks to name it)."""

    def __init__(self, value: Any, scratch: Scratch) -> None:
        self.inline: Any = None
        try:
            arr = np.array(value)
        except ValueError:
            self.inline = value  # ragged: the reader's check reports it
            return
        if arr.dtype.kind not in "iufb" or arr.dtype == np.float16:
            self.inline = value
            return
        self.col, self.dtype, self.shape = f"leaf.{arr.dtype.name}", arr.dtype, arr.shape
        self.start = scratch.rows(self.col)
        scratch.append(self.col, arr.reshape(-1))

    def load(self, scratch: Scratch) -> Any:
        if self.inline is not None:
            return self.inline
        n = int(np.prod(self.shape, dtype=np.int64))
        return np.array(scratch.array(self.col)[self.start:self.start + n]).reshape(self.shape)


class _Lazy(Mapping):
    """A JSON object's members as the in-memory loader sees them, values loaded on access."""

    def __init__(self, scratch: Scratch) -> None:
        self.items_: dict[str, Any] = {}
        self.scratch = scratch

    def __getitem__(self, key: str) -> Any:
        v = self.items_[key]
        return v.load(self.scratch) if isinstance(v, _Leaf) else v

    def __iter__(self):
        return iter(self.items_)

    def __len__(self) -> int:
        return len(self.items_)


def _collect(stream: JsonStream, scratch: Scratch) -> _Lazy:
    """Walk the file: objects down to the snapshot level become :class:`_Lazy`
    mappings, arrays their :class:`_Leaf`; small scalars stay as they are."""
    root = _Lazy(scratch)

    def descend(path: tuple[str, ...]) -> bool:
        # twitter tennis: ["t"] -> members; england covid: ["edge_mapping"]["edge_index" | "edge_weight"] -> days
        return len(path) == 1 or (len(path) == 2 and path[0] == "edge_mapping")

    for path, value in stream.walk(descend):
        if not path:
            return value  # not an object: the caller reports it
        node = root
        for key in path[:-1]:
            nxt = node.items_.get(key)
            if not isinstance(nxt, _Lazy):
                nxt = node.items_[key] = _Lazy(scratch)
            node = nxt
        node.items_[path[-1]] = _Leaf(value, scratch) if isinstance(value, list) else value
    return root


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
    # the option checks and per-snapshot code of load_pygt_json's _twitter_tennis, one snapshot at a time
    if event_id not in ("rg17", "uo17"):
        raise SignalValidationError("event_id", f"is {event_id!r}.", "use 'rg17' (Roland-Garros 2017) or 'uo17' (US Open 2017).")
    if feature_mode not in (None, "diagonal", "encoded"):
        raise SignalValidationError("feature_mode", f"is {feature_mode!r}.", "use None, 'diagonal' or 'encoded'.")
    if N is not None and (isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 1):
        raise SignalValidationError("N", f"is {N!r}.", "use None (all nodes) or a positive integer.")
    if isinstance(target_offset, bool) or not isinstance(target_offset, (int, np.integer)) or target_offset < 0:
        raise SignalValidationError("target_offset", f"is {target_offset!r}.", "use a non-negative integer.")
    T = r.time_periods()
    snaps = [r.get(r.data, str(t)) for t in range(T)]  # presence, as the in-memory loader checks first
    for t, s in enumerate(snaps):
        e = r.edges(r.get(s, "edges", f"[{str(t)!r}]"), f"[{str(t)!r}]['edges']")
        w = r.array(r.get(s, "weights", f"[{str(t)!r}]"), f"[{str(t)!r}]['weights']").reshape(-1)
        if w.shape[0] != e.shape[1]:
            raise r.fail(f"[{str(t)!r}]['weights']", f"has {w.shape[0]} entries for {e.shape[1]} edges.")
        if N is not None:
            keep = (e[0] < N) & (e[1] < N)
            e, w = e[:, keep], w[keep]
        X = r.array(r.get(s, "X", f"[{str(t)!r}]"), f"[{str(t)!r}]['X']")
        if N is not None:
            X = X[:N]
        if feature_mode == "diagonal":
            X = np.identity(X.shape[0])
        elif feature_mode == "encoded":
            X = encode_tennis_features(X, r, t)
        r.get(s, "y", f"[{str(t)!r}]")
        raw = r.get(snaps[min(t + int(target_offset), T - 1)], "y", f"[{str(min(t + int(target_offset), T - 1))!r}]")
        y = np.log(1.0 + r.array(raw, f"[{str(t)!r}]['y']"))
        _append(app, ([e], [w], [X], [y[:N] if N is not None else y]), t, allow_nonfinite)


def _england_covid(r: PygtReader, app: SignalAppender, lags: int, allow_nonfinite: bool) -> None:
    # load_pygt_json's _england_covid, one snapshot at a time: its checks in its order (every day's edges,
    # then the series), then the snapshots (each day's edges decoded again rather than kept)
    T = r.time_periods()
    lags = check_lags(lags, T, "lags", r)
    mapping = r.get(r.data, "edge_mapping")
    ei_map = r.get(mapping, "edge_index", "['edge_mapping']")
    ew_map = r.get(mapping, "edge_weight", "['edge_mapping']")

    def day(t: int) -> tuple[np.ndarray, np.ndarray]:
        e = r.edges(r.get(ei_map, str(t), "['edge_mapping']['edge_index']"), f"['edge_mapping']['edge_index'][{str(t)!r}]")
        w = r.array(r.get(ew_map, str(t), "['edge_mapping']['edge_weight']"), f"['edge_mapping']['edge_weight'][{str(t)!r}]")
        if w.reshape(-1).shape[0] != e.shape[1]:
            raise r.fail(f"['edge_mapping']['edge_weight'][{str(t)!r}]", f"has {w.size} entries for {e.shape[1]} edges.")
        return e, w.reshape(-1)

    for t in range(T - lags):
        day(t)
    stacked = r.array(r.get(r.data, "y"), "key 'y'", ndim=2)
    if stacked.shape[0] < T:
        raise r.fail("key 'y'", f"has {stacked.shape[0]} time steps but time_periods is {T}.")
    std = standardize(stacked, 10 ** -10)  # over all rows of 'y', as PyGT
    x = sliding_window_view(std, lags, axis=0)[: T - lags]
    y = std[lags:T]
    for t in range(T - lags):
        e, w = day(t)
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
            ``load_pygt_json``; ``dataset`` must be ``"twitter_tennis"`` or
            ``"england_covid"`` (or detected as one).
        read_chars: bytes read from the file at a time.
        out, overwrite, chunk_bytes: the store directory, whether to replace
            an existing one, its checksum granularity.

    Raises:
        DatasetNotFoundError, DatasetFormatError, SignalValidationError: as ``load_pygt_json``.
        UnsupportedOptionError: a dataset of one static graph and one series
            (read it with ``load_pygt_json`` and ``save_signal_store``).
    """
    if dataset is not None:
        dataset = canonical_dataset_name(dataset)
        _check_streamed(dataset)
    event_id = dataset_options.get("event_id", "rg17")
    if "event_id" not in dataset_options and str(path_or_name).lower().endswith(("uo17", "uo17.json", "uo17.json.gz")):
        event_id = dataset_options["event_id"] = "uo17"
    path, dataset = resolve_path(path_or_name, dataset, cache_dir, event_id)
    if dataset is not None:
        _check_streamed(dataset)
    with open_text(path, "PyGT JSON file") as fh, \
            StoreWriter(out, "signal", overwrite=overwrite, chunk_bytes=chunk_bytes) as writer, \
            Scratch(os.fspath(out)) as scratch:  # committed on success, else dropped
        data = _collect(JsonStream(fh, path, read_chars), scratch)
        if dataset is None:
            dataset = detect_dataset(data)
            if dataset is None:
                keys = list(data)[:8] if isinstance(data, Mapping) else type(data).__name__
                raise DatasetFormatError(path, "top-level keys", f"({keys}) match no PyGT dataset format.",
                                         f"pass dataset=<one of {list(DATASETS)}>.")
            _check_streamed(dataset)
        if not isinstance(data, Mapping):
            raise DatasetFormatError(path, "JSON", f"is a {type(data).__name__}, not an object.", "pass PyGT's dataset JSON.")
        defaults = DATASET_OPTIONS[dataset]
        unknown = sorted(set(dataset_options) - set(defaults))
        if unknown:
            raise SignalValidationError(unknown[0], f"is not an option of the {dataset} dataset.",
                                        f"use {sorted(defaults)} (PyGT's get_dataset/constructor options).")
        opts = {**defaults, **dataset_options}
        if dataset != "twitter_tennis":
            opts.pop("event_id", None)
        app = SignalAppender(writer)
        reader = PygtReader(data, path, dataset)
        if dataset == "twitter_tennis":
            _twitter_tennis(reader, app, **opts, allow_nonfinite=allow_nonfinite)
        else:
            _england_covid(reader, app, **opts, allow_nonfinite=allow_nonfinite)
        app.finish()
    return load_signal_store(out, DynamicGraphSignal, verify=False)


def _check_streamed(dataset: str) -> None:
    if dataset not in STREAMED:
        raise UnsupportedOptionError(
            "dataset", f"is {dataset!r}: its series is one JSON value that is read whole, not member by member.",
            "save_signal_store(load_pygt_json(path), out) (pyg_dynscale.data.mapped); "
            f"ingest_pygt_json reads {list(STREAMED)}.")
