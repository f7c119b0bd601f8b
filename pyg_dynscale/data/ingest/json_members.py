r"""The members of a PyGT JSON file as the in-memory loader sees them, kept on disk
(:func:`collect_members`), and the checks of a ``[time, node]`` series walked row by row
(:class:`SeriesCheck`): shared by the member-by-member readers of
:mod:`~pyg_dynscale.data.ingest.pygt_json` and :mod:`~pyg_dynscale.data.ingest.pygt_series`."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import SignalValidationError
from ..loaders.pygt_json import PygtReader
from .external import Scratch
from .json_stream import JsonStream


class Leaf:
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


class LazyObject(Mapping):
    """A JSON object's members as the in-memory loader sees them, values loaded on access."""

    def __init__(self, scratch: Scratch) -> None:
        self.items_: dict[str, Any] = {}
        self.scratch = scratch

    def __getitem__(self, key: str) -> Any:
        v = self.items_[key]
        return v.load(self.scratch) if isinstance(v, Leaf) else v

    def __iter__(self):
        return iter(self.items_)

    def __len__(self) -> int:
        return len(self.items_)


def collect_members(stream: JsonStream, scratch: Scratch) -> LazyObject:
    """Walk the file: objects down to the snapshot level become :class:`LazyObject`
    mappings, arrays their :class:`Leaf`; small scalars stay as they are."""
    root = LazyObject(scratch)

    def descend(path: tuple[str, ...]) -> bool:
        # twitter tennis: ["t"] -> members; england covid: ["edge_mapping"]["edge_index" | "edge_weight"] -> days
        return len(path) == 1 or (len(path) == 2 and path[0] == "edge_mapping")

    for path, value in stream.walk(descend):
        if not path:
            return value  # not an object: the caller reports it
        node = root
        for key in path[:-1]:
            nxt = node.items_.get(key)
            if not isinstance(nxt, LazyObject):
                nxt = node.items_[key] = LazyObject(scratch)
            node = nxt
        node.items_[path[-1]] = Leaf(value, scratch) if isinstance(value, list) else value
    return root


class SeriesCheck:
    """The series' rows as ``numpy.array(series)`` would see them, one row at a
    time: their number, the first irregular row, the common dtype."""

    def __init__(self) -> None:
        self.T, self.first, self.bad, self.width, self.dtypes = 0, None, None, None, set()
        self.nonfinite: list[tuple[int, int]] = []  # (row, NaN/inf count as float32) of the rows holding any

    def row(self, i: int, value: Any) -> None:
        self.T += 1
        if i == 0:
            self.first = value
        if self.bad is not None:
            return
        try:
            arr = np.array(value)
        except ValueError:
            self.bad = (i, value)
            return
        if arr.ndim != 1 or arr.dtype.kind not in "iufb" or (self.width is not None and arr.shape[0] != self.width):
            self.bad = (i, value)
            return
        self.width = arr.shape[0]
        self.dtypes.add(arr.dtype)
        if arr.dtype.kind == "f":
            with np.errstate(over="ignore"):
                n = int(np.count_nonzero(~np.isfinite(arr.astype(np.float32))))
            if n:
                self.nonfinite.append((i, n))

    def check_finite(self, lags: int, dtype: np.dtype) -> None:
        """The whole signal's NaN/inf errors (features, then float targets) from the rows' counts."""
        count = self.T - lags
        for display, target in (("features", False), ("targets", True)):
            if target and dtype.kind not in "f":
                return
            total, first = 0, None
            for t, n in self.nonfinite:
                lo, hi = (t - lags, t - lags) if target else (max(0, t - lags + 1), min(t, count - 1))
                if lo < 0 or hi < lo:
                    continue
                total += n * (hi - lo + 1)
                first = lo if first is None else min(first, lo)
            if total:
                raise SignalValidationError(display, f"contains {total} NaN/inf values (first in snapshot {first}).",
                                            "clean or impute them, or pass allow_nonfinite=True if they are intended.")

    def check(self, r: PygtReader, field: str) -> tuple[int, np.dtype]:
        """``(T, dtype)``, or the in-memory loader's error for the whole series
        (reproduced on a stand-in of the same length that shares the rows)."""
        if self.bad is not None:
            i, value = self.bad
            stand_in = [self.first] * self.T
            stand_in[i] = value
            r.array(stand_in, field, ndim=2)  # raises as on the whole series
            raise r.fail(field, "is not a [time, node] array of numbers.")
        dtype = np.result_type(*self.dtypes) if self.dtypes else np.dtype(np.float64)
        return self.T, dtype
