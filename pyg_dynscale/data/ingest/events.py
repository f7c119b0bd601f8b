r"""Chunked readers of event streams (JODIE CSV, temporal edge lists) into an
event store (:mod:`pyg_dynscale.data.mapped`), for files larger than memory.

Both readers give, event for event and bit for bit, what the in-memory readers
:func:`~pyg_dynscale.ctdg.load_jodie_csv` and
:func:`~pyg_dynscale.ctdg.load_event_list` give, with the same validation and
the same errors (the offending line named by its number in the file), but hold
only ``O(chunk_rows)`` parsed rows (plus the ``[V]`` id table of
:func:`ingest_event_list`):

1. **Parse** the file in chunks of ``chunk_rows`` lines
   (:class:`~pyg_dynscale.data.ingest.text.ChunkedTable`), validate each chunk
   and append its columns to scratch files on disk.
2. **Sort** (``sort=True`` and the file is not already in time order): a
   stable external merge sort of the timestamps
   (:func:`~pyg_dynscale.data.ingest.external.external_argsort`), the same
   order as ``numpy.argsort(t, kind="stable")``.
3. **Write** the events in that order, chunk by chunk, into the store
   (JODIE: items shifted by the largest user id, known after step 1; edge
   lists: ids remapped by first appearance, :class:`IdTable`), committed
   atomically.

A difference in what is reported first: the in-memory tokenizer checks every
line's field count before converting any value, a chunked reader checks each
chunk in turn, so of two different errors in one file it may name the other
one (each is named with its line).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch

from ..loaders._common import DatasetFormatError, PathLike
from ..loaders.edgelist_parse import event_list_columns, jodie_columns, unsorted_error
from ..mapped import CHUNK_BYTES, StoreWriter, load_events_store
from .external import IdTable, Scratch, external_argsort, is_sorted_after
from .text import DEFAULT_CHUNK_ROWS, ChunkedTable

if TYPE_CHECKING:  # pragma: no cover
    from torch_geometric.data import TemporalData


class _TimeOrder:
    """Checks (``sort=False``) or records (``sort=True``) that times never decrease, across chunks."""

    def __init__(self, source: str, sort: bool) -> None:
        self.source, self.sort = source, sort
        self.previous: Optional[float] = None
        self.sorted = True

    def feed(self, t: np.ndarray, line_no: np.ndarray) -> None:
        r = is_sorted_after(t, self.previous)
        if r >= 0:
            if not self.sort:
                prev = self.previous if r == 0 else float(t[r - 1])
                raise unsorted_error(self.source, int(line_no[r]), float(t[r]), float(prev))  # type: ignore[arg-type]
            self.sorted = False
        if t.shape[0]:
            self.previous = float(t[-1])


def _chunks(n: int, order: Optional[np.ndarray], chunk_rows: int):
    """Row indices (or a slice) of each output chunk, in ``order``."""
    for s in range(0, n, chunk_rows):
        yield slice(s, min(s + chunk_rows, n)) if order is None else np.asarray(order[s:s + chunk_rows])


def ingest_jodie_csv(path: PathLike, out: PathLike, *, sort: bool = False, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                     overwrite: bool = False, chunk_bytes: int = CHUNK_BYTES, node_bytes: int = 8) -> "TemporalData":
    r"""Read a JODIE CSV file in chunks into the event store ``out`` and open it.

    The result equals :func:`~pyg_dynscale.ctdg.load_jodie_csv` on the same
    file (``src``, ``dst``, ``t``, ``msg``, ``y``, bit for bit) but its tensors
    are memory-mapped from ``out`` (:func:`~pyg_dynscale.data.mapped.load_events_store`
    opens it again later). Header detection, ids, validation and errors as
    ``load_jodie_csv``.

    Args:
        path: the CSV file (plain or gzip).
        out: the store directory to create.
        sort: stable-sort by time (an external merge sort when the file is not
            in time order) instead of refusing unsorted input.
        chunk_rows: lines parsed at a time (memory is proportional to it).
        overwrite: replace an existing store at ``out``.
        chunk_bytes: checksum granularity of the store.
        node_bytes: as ``load_jodie_csv``: an id whose node memory would
            exceed this machine's memory is refused, naming its line.

    Raises:
        DatasetNotFoundError, DatasetFormatError: as ``load_jodie_csv``.
    """
    table_chunks = ChunkedTable(path, "JODIE CSV file", chunk_rows=chunk_rows, detect_header=True)
    source = table_chunks.source
    order_check = _TimeOrder(source, sort)
    with StoreWriter(out, "events", overwrite=overwrite, chunk_bytes=chunk_bytes) as writer, \
            Scratch(os.fspath(out)) as scratch:  # committed on success, else dropped
        max_user = -1
        for table in table_chunks:
            user, item, ts, label, feats = jodie_columns(table, node_bytes, first_item=max_user + 1)
            order_check.feed(ts, table.line_no)
            max_user = max(max_user, int(user.max()))
            scratch.append("user", user)
            scratch.append("item", item)
            scratch.append("ts", ts)
            scratch.append("y", torch.from_numpy(label).to(torch.long).numpy())
            scratch.append("msg", torch.from_numpy(feats).to(torch.float).numpy())
        table_chunks.finish()
        n = scratch.rows("user")
        ts_all = scratch.array("ts")
        order = None if order_check.sorted else external_argsort(ts_all, table_chunks.chunk_rows, scratch)
        cols = {k: scratch.array(k) for k in ("user", "item", "y", "msg")}
        for idx in _chunks(n, order, table_chunks.chunk_rows):
            writer.append("src", cols["user"][idx])
            writer.append("dst", cols["item"][idx] + (max_user + 1))
            writer.append("t", torch.from_numpy(np.array(ts_all[idx])).to(torch.long).numpy())
            writer.append("msg", cols["msg"][idx])
            writer.append("y", cols["y"][idx])
    return load_events_store(out, verify=False)


def ingest_event_list(
    path: PathLike,
    out: PathLike,
    *,
    columns: Sequence[int] = (0, 1, -1),
    msg_columns: Sequence[int] = (),
    delimiter: Optional[str] = None,
    skip_rows: int = 0,
    self_loops: bool = True,
    sort: bool = True,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    overwrite: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
) -> "TemporalData":
    r"""Read a temporal edge list in chunks into the event store ``out`` and open it.

    The result equals :func:`~pyg_dynscale.ctdg.load_event_list` on the same
    file and options (``src``, ``dst``, ``t``, ``msg``, ``vertex_map``, bit for
    bit), memory-mapped from ``out``. Ids are remapped by first appearance in
    time with an :class:`~pyg_dynscale.data.ingest.external.IdTable`, so the
    ``[V]`` id table is held in memory besides ``O(chunk_rows)`` rows.

    Args:
        path, columns, msg_columns, delimiter, skip_rows, self_loops, sort: as
            ``load_event_list`` (``sort=True``: an external merge sort when the
            file is not in time order).
        out, chunk_rows, overwrite, chunk_bytes: as :func:`ingest_jodie_csv`.

    Raises:
        DatasetNotFoundError, DatasetFormatError, SignalValidationError: as ``load_event_list``.
    """
    table_chunks = ChunkedTable(path, "edge-list file", chunk_rows=chunk_rows, delimiter=delimiter, skip_rows=skip_rows)
    source = table_chunks.source
    order_check = _TimeOrder(source, sort)
    with StoreWriter(out, "events", overwrite=overwrite, chunk_bytes=chunk_bytes) as writer, \
            Scratch(os.fspath(out)) as scratch:  # committed on success, else dropped
        for table in table_chunks:
            src, dst, tau, feats, line_no = event_list_columns(table, columns, msg_columns, self_loops)
            order_check.feed(tau, line_no)
            scratch.append("src", src)
            scratch.append("dst", dst)
            scratch.append("tau", tau)
            scratch.append("msg", torch.from_numpy(feats).to(torch.float).numpy())
        table_chunks.finish()
        n = scratch.rows("src")
        if n == 0:
            raise DatasetFormatError(source, "self_loops", "removed every event of the file.", "keep self-loops.")
        tau_all = scratch.array("tau")
        order = None if order_check.sorted else external_argsort(tau_all, table_chunks.chunk_rows, scratch)
        cols = {k: scratch.array(k) for k in ("src", "dst", "msg")}
        ids = IdTable()
        for idx in _chunks(n, order, table_chunks.chunk_rows):
            uv = ids.map(np.stack([np.asarray(cols["src"][idx]), np.asarray(cols["dst"][idx])], axis=1).ravel())
            writer.append("src", uv[0::2])
            writer.append("dst", uv[1::2])
            writer.append("t", np.floor(np.asarray(tau_all[idx])).astype(np.int64))
            writer.append("msg", cols["msg"][idx])
        writer.put("vertex_map", ids.vertex_map().astype(np.int64))
    return load_events_store(out, verify=False)
