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

from ...errors import SignalValidationError, UnsupportedOptionError
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
    tennis_snapshot,
    tennis_target,
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
    lags = check_lags(lags, T, "lags", r)
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
    path, dataset = resolve_path(path_or_name, dataset, cache_dir, default_event_id(path_or_name, dataset_options))
    if dataset is not None:
        _check_streamed(dataset)
    with open_text(path, "PyGT JSON file") as fh, \
            StoreWriter(out, "signal", overwrite=overwrite, chunk_bytes=chunk_bytes) as writer, \
            Scratch(os.fspath(out)) as scratch:  # committed on success, else dropped
        data = _collect(JsonStream(fh, path, read_chars), scratch)
        if dataset is None:
            dataset = detected_dataset(data, path)
            _check_streamed(dataset)
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


def _check_streamed(dataset: str) -> None:
    if dataset not in STREAMED:
        raise UnsupportedOptionError(
            "dataset", f"is {dataset!r}: its series is one JSON value that is read whole, not member by member.",
            "save_signal_store(load_pygt_json(path), out) (pyg_dynscale.data.mapped); "
            f"ingest_pygt_json reads {list(STREAMED)}.")
