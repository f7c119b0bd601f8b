r"""Out-of-core pieces of the chunked readers: scratch columns on disk, a
stable external merge sort, and the raw-id table.

* :class:`Scratch`: columns appended chunk by chunk to raw files in a
  temporary directory and read back by copies of rows (:class:`ScratchColumn`;
  the parsed file between the readers' passes; deleted at the end).
* :func:`external_argsort`: the stable ascending order of a float64 column
  larger than memory. Sorted runs of ``chunk_rows`` keys are written first,
  then merged 16 at a time (passes until one run is left) with a buffer of
  ``chunk_rows / 16`` entries per run. Ties are broken by the row number, so every key is distinct and the
  result is exactly ``numpy.argsort(keys, kind="stable")``: a merge round emits
  every buffered entry :math:`\le` the smallest last-buffered entry of the runs
  that still have unread entries, which no unread entry can precede. Memory:
  ``O(chunk_rows)``; I/O: the keys are read twice, the runs once per pass.
* :class:`IdTable`: raw vertex ids to ``0 .. V-1`` in order of first
  appearance over a stream of chunks (sorted ``[V]`` keys, so memory is
  ``O(V)``, not ``O(E)``); the same ids as
  :func:`~pyg_dynscale.data.loaders.edgelist.remap_by_first_appearance` on the
  whole stream.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Optional

import numpy as np


class ScratchColumn:
    """A scratch column read by copies: each read maps the file, copies the
    rows asked for (a slice or an index array) and unmaps it again, so that
    the pages read do not stay mapped into the reader (where they would count
    in its resident memory, ``ru_maxrss``, until the end)."""

    def __init__(self, path: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.path, self.dtype, self.shape = path, np.dtype(dtype), shape

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index) -> np.ndarray:
        if int(np.prod(self.shape, dtype=np.int64)) == 0:
            return np.zeros(self.shape, dtype=self.dtype)[index]
        m = np.memmap(self.path, dtype=self.dtype, mode="r", shape=self.shape)
        try:
            return np.array(m[index])
        finally:
            del m  # the last reference: the mapping is closed

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype)


class Scratch:
    """Temporary on-disk columns next to ``near`` (same filesystem), removed by :meth:`close`."""

    def __init__(self, near: str) -> None:
        parent = os.path.dirname(os.path.abspath(near)) or "."
        self.dir = os.path.join(parent, f".{os.path.basename(near)}.scratch-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.makedirs(self.dir)
        self._fh: dict[str, object] = {}
        self._meta: dict[str, tuple[np.dtype, tuple[int, ...], int]] = {}

    def append(self, name: str, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        if name not in self._fh:
            self._fh[name] = open(os.path.join(self.dir, name), "wb")
            self._meta[name] = (array.dtype, tuple(array.shape[1:]), 0)
        dtype, inner, rows = self._meta[name]
        if array.dtype != dtype or tuple(array.shape[1:]) != inner:
            raise ValueError(f"scratch column {name!r}: {array.dtype}{list(array.shape)} after {dtype}{list(inner)}")
        self._fh[name].write(array.tobytes())  # type: ignore[attr-defined]
        self._meta[name] = (dtype, inner, rows + array.shape[0])

    def rows(self, name: str) -> int:
        return self._meta[name][2] if name in self._meta else 0

    def array(self, name: str) -> "ScratchColumn":
        """The column written so far, to be read by copies of its rows."""
        dtype, inner, rows = self._meta[name]
        self._fh[name].flush()  # type: ignore[attr-defined]
        return ScratchColumn(os.path.join(self.dir, name), dtype, (rows,) + inner)

    def drop(self, name: str) -> None:
        """Delete a column (a merge pass's input, once merged)."""
        self._fh.pop(name).close()  # type: ignore[attr-defined]
        del self._meta[name]
        os.remove(os.path.join(self.dir, name))

    def close(self) -> None:
        for fh in self._fh.values():
            fh.close()  # type: ignore[attr-defined]
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


#: runs merged at once: each gets ``chunk_rows / FAN_IN`` buffered entries, so that a merge round
#: emits many entries (with hundreds of runs of a few entries each, rounds would emit a handful)
FAN_IN = 16


def external_argsort(keys: "np.ndarray | ScratchColumn", chunk_rows: int, scratch: Scratch,
                     prefix: str = "sort") -> ScratchColumn:
    r"""``numpy.argsort(keys, kind="stable")`` for a memory-mapped ``[n]``
    column, holding ``O(chunk_rows)`` entries at a time: sorted runs of
    ``chunk_rows`` keys, then passes that merge :data:`FAN_IN` runs into one
    (:math:`\lceil \log_{16} R \rceil` passes over the data for :math:`R` runs).
    Returns the order as an int64 column of ``scratch``."""
    n = int(keys.shape[0])
    level = 0
    rk, ri = f"{prefix}.key0", f"{prefix}.idx0"
    for s in range(0, n, chunk_rows):
        k = np.asarray(keys[s:s + chunk_rows])
        o = np.argsort(k, kind="stable")
        scratch.append(rk, k[o])
        scratch.append(ri, o.astype(np.int64) + s)
    runs = [(s, min(s + chunk_rows, n)) for s in range(0, n, chunk_rows)]
    while len(runs) > 1:
        src_k, src_i = scratch.array(rk), scratch.array(ri)
        nk, ni = f"{prefix}.key{level + 1}", f"{prefix}.idx{level + 1}"
        merged = []
        for g in range(0, len(runs), FAN_IN):
            group = runs[g:g + FAN_IN]
            first = scratch.rows(nk)
            _merge_runs(src_k, src_i, group, max(1, chunk_rows // len(group)), scratch, nk, ni)
            merged.append((first, first + sum(e - b for b, e in group)))
        scratch.drop(rk)
        scratch.drop(ri)
        rk, ri, runs, level = nk, ni, merged, level + 1
    return scratch.array(ri)


def _merge_runs(run_key: ScratchColumn, run_idx: ScratchColumn, runs: list[tuple[int, int]], per_run: int,
                scratch: Scratch, out_key: str, out_idx: str) -> None:
    """Merge sorted runs (``(start, end)`` ranges of ``run_key``/``run_idx``,
    ordered by ``(key, idx)``) into one, appended to ``out_key``/``out_idx``."""
    R = len(runs)
    pos = [b for b, _ in runs]
    end = [e for _, e in runs]
    buf_k: list[np.ndarray] = [np.zeros(0)] * R
    buf_i: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * R
    while True:
        for r in range(R):  # top up buffers that are half empty
            if buf_k[r].shape[0] < (per_run + 1) // 2 and pos[r] < end[r]:
                stop = min(pos[r] + per_run - buf_k[r].shape[0], end[r])
                buf_k[r] = np.concatenate([buf_k[r], run_key[pos[r]:stop]])
                buf_i[r] = np.concatenate([buf_i[r], run_idx[pos[r]:stop]])
                pos[r] = stop
        active = [r for r in range(R) if buf_k[r].shape[0]]
        if not active:
            return
        limited = [r for r in active if pos[r] < end[r]]
        limit: Optional[tuple[float, int]] = min(((float(buf_k[r][-1]), int(buf_i[r][-1])) for r in limited),
                                                 default=None)
        parts_k, parts_i = [], []
        for r in active:
            k, i = buf_k[r], buf_i[r]
            if limit is None:
                c = k.shape[0]
            elif (float(k[0]), int(i[0])) > limit:
                continue  # nothing of this run yet (runs of nearly sorted input cover disjoint ranges)
            else:  # entries <= limit in (key, row) order: a prefix of the sorted buffer
                lo, hi = np.searchsorted(k, limit[0], "left"), np.searchsorted(k, limit[0], "right")
                c = int(lo + np.searchsorted(i[lo:hi], limit[1], "right"))
            parts_k.append(k[:c])
            parts_i.append(i[:c])
            buf_k[r], buf_i[r] = k[c:], i[c:]
        k, i = np.concatenate(parts_k), np.concatenate(parts_i)
        o = np.lexsort((i, k))
        scratch.append(out_key, k[o])
        scratch.append(out_idx, i[o])


def is_sorted_after(values: np.ndarray, previous: Optional[float]) -> int:
    """Index of the first entry smaller than the one before it (``previous``
    before the first), or -1."""
    if values.shape[0] == 0:
        return -1
    if previous is not None and values[0] < previous:
        return 0
    down = np.flatnonzero(values[1:] < values[:-1])
    return int(down[0]) + 1 if down.shape[0] else -1


class IdTable:
    """Raw ids -> ``0 .. V-1`` in order of first appearance, over chunks."""

    def __init__(self) -> None:
        self.keys = np.zeros(0, dtype=np.int64)   # sorted raw ids
        self.vals = np.zeros(0, dtype=np.int64)   # their new ids
        self._order: list[np.ndarray] = []        # raw ids in new-id order, per chunk

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def map(self, seq: np.ndarray) -> np.ndarray:
        """New ids of ``seq`` (raw ids in stream order); unseen ids get the next
        ids in order of their first position in ``seq``."""
        uniq, first, inv = np.unique(seq, return_index=True, return_inverse=True)
        pos = np.searchsorted(self.keys, uniq)
        known = pos < self.keys.shape[0]
        known[known] = self.keys[pos[known]] == uniq[known]
        ids = np.empty(uniq.shape[0], dtype=np.int64)
        ids[known] = self.vals[pos[known]]
        fresh = np.flatnonzero(~known)
        by_first = fresh[np.argsort(first[fresh], kind="stable")]
        ids[by_first] = len(self) + np.arange(by_first.shape[0], dtype=np.int64)
        if fresh.shape[0]:
            # fresh ids are sorted (np.unique), so one insert keeps keys sorted
            at = np.searchsorted(self.keys, uniq[fresh])
            self.keys = np.insert(self.keys, at, uniq[fresh])
            self.vals = np.insert(self.vals, at, ids[fresh])
            self._order.append(uniq[by_first])
        return ids[inv.reshape(-1)]

    def vertex_map(self) -> np.ndarray:
        """``[V]`` raw id of each new id."""
        return np.concatenate(self._order) if self._order else np.zeros(0, dtype=np.int64)
