r"""Event streams as PyG :class:`~torch_geometric.data.TemporalData`: readers
for JODIE CSV files and temporal edge lists (SNAP, KONECT), the chronological
split, checks, and a synthetic stream generator.

An event stream is :math:`E` time-ordered interactions
:math:`(u_e, v_e, t_e, \mathbf{m}_e)`: ``src [E]``, ``dst [E]`` (int64 node
ids), ``t [E]`` (int64, non-decreasing), ``msg [E, F]`` (float32 edge
features, ``F`` may be 0) and, where the file has one, ``y [E]`` (int64 state
label). Parsing reuses the package's vectorised tokenizer
(:mod:`pyg_dynscale.data.loaders.edgelist_parse`), so a bad line is named by
its line number.

Files larger than memory: :func:`ingest_jodie_csv` and :func:`ingest_event_list`
(from :mod:`pyg_dynscale.data.ingest`) read them in chunks into an event store
on disk and return the same ``TemporalData`` with memory-mapped tensors;
:func:`load_events_store` opens a store again, :func:`save_events_store`
writes an in-memory stream as one.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import torch
from torch_geometric.data import TemporalData

from ..data.ingest import ingest_event_list, ingest_jodie_csv
from ..data.loaders import DatasetFormatError
from ..data.loaders._common import PathLike, read_bytes
from ..data.loaders.edgelist import remap_by_first_appearance
from ..data.loaders.edgelist_parse import (event_list_columns, has_header, header_only_error, jodie_columns, tokenize,
                                           unsorted_error)
from ..data.mapped import load_events_store, save_events_store
from ..errors import ModelInputError

__all__ = [
    "check_events",
    "chronological_split",
    "ingest_event_list",
    "ingest_jodie_csv",
    "load_event_list",
    "load_events_store",
    "load_jodie_csv",
    "save_events_store",
    "split_ranges",
    "synthetic_events",
]


def _check_sorted(t: np.ndarray, line_no: np.ndarray, source: str) -> None:
    down = np.flatnonzero(t[1:] < t[:-1])
    if down.shape[0]:
        r = int(down[0]) + 1
        raise unsorted_error(source, int(line_no[r]), float(t[r]), float(t[r - 1]))


def load_jodie_csv(path: PathLike, *, sort: bool = False, node_bytes: int = 8) -> TemporalData:
    r"""Read a JODIE-format CSV file (``user,item,timestamp,state_label,f_1,...,f_F``)
    into :class:`~torch_geometric.data.TemporalData` exactly as PyG's
    :class:`~torch_geometric.datasets.JODIEDataset` builds it.

    **Format.** One event per line; commas and/or whitespace separate fields;
    ``\r\n`` line ends, a UTF-8 byte-order mark, gzip compression, ``%``/``#``
    comment lines and blank lines are accepted. A header line is detected (its
    first field is not a number) and skipped. Feature columns are optional
    (``msg`` is then ``[E, 0]``; note that PyG's ``TGNMemory`` itself cannot
    take zero-width messages, :class:`~pyg_dynscale.ctdg.MemoryTrainer` can).

    **Ids** (as ``JODIEDataset``): users keep their ids, items are shifted
    past the largest user id, :math:`\mathrm{dst} = \mathrm{item} +
    \max(\mathrm{user}) + 1`, so users and items share one node-id space
    ``0 .. num_nodes - 1`` with users first (ids are not compacted).
    ``t`` is int64 (``JODIEDataset`` casts with ``.to(torch.long)``, i.e.
    truncates); ``y`` is the int64 state label; ``msg`` float32.

    Args:
        path: the CSV file (plain or gzip).
        sort: stable-sort the events by time instead of refusing unsorted input.
        node_bytes: the bytes a model keeps per node (default 8: a memory's
            last-update time). Ids are not renumbered, so an id needs a node
            memory of ``(id + 1) * node_bytes`` bytes at least: an id for which
            that exceeds this machine's physical memory is refused, naming the
            line (e.g. ``10**12``: not an attempt to allocate terabytes).

    Raises:
        DatasetNotFoundError: missing file.
        DatasetFormatError: an empty file (or a header alone), fewer than 4
            fields, rows of different widths (feature width mismatch), a
            non-numeric or non-integer field, a negative id, an id beyond any
            node memory (above), or (``sort=False``) a timestamp earlier than
            the one before it; the line is named.
    """
    source = os.path.basename(os.fspath(path))
    raw = read_bytes(path, "JODIE CSV file")
    header = has_header(raw)
    try:
        table = tokenize(raw, source, skip_rows=1 if header else 0)
    except DatasetFormatError as exc:
        if header and exc.field == "skip_rows":  # the header was detected, not asked for: say so
            raise header_only_error(source) from None
        raise
    user, item, ts, label, feats = jodie_columns(table, node_bytes)
    if sort:
        order = np.argsort(ts, kind="stable")
        user, item, ts, label, feats = user[order], item[order], ts[order], label[order], feats[order]
    else:
        _check_sorted(ts, table.line_no, source)
    src = torch.from_numpy(user)
    dst = torch.from_numpy(item) + int(user.max()) + 1
    return TemporalData(
        src=src, dst=dst, t=torch.from_numpy(ts).to(torch.long), msg=torch.from_numpy(feats).to(torch.float),
        y=torch.from_numpy(label).to(torch.long),
    )


def load_event_list(
    path: PathLike,
    *,
    columns: Sequence[int] = (0, 1, -1),
    msg_columns: Sequence[int] = (),
    delimiter: Optional[str] = None,
    skip_rows: int = 0,
    self_loops: bool = True,
    sort: bool = True,
) -> TemporalData:
    r"""Read a temporal edge list (SNAP ``src dst unixtime``, KONECT
    ``src dst weight time``, CSV) as an event stream, one event per line.

    Parsing is the package's edge-list parser (see
    :func:`~pyg_dynscale.data.loaders.load_edge_list`: whitespace/commas,
    ``%``/``#`` comments, gzip); ``columns`` picks ``(source, target, time)``.
    Raw vertex ids are remapped to ``0 .. V-1`` in order of first appearance in
    time (as ``load_edge_list`` does; ``data.vertex_map[i]`` is the raw id of
    node ``i``); source and target share one id space (not bipartite). Times
    become int64 (fractional times are floored). ``msg`` is ``[E, len(msg_columns)]``
    float32 (``[E, 0]`` by default; PyG's ``TGNMemory`` needs at least one column,
    e.g. ``data.msg = torch.ones(E, 1)``).

    Args:
        path: the edge-list file (plain or gzip).
        columns: ``(source, target, time)`` column indices.
        msg_columns: columns read as edge features (e.g. a KONECT weight or a rating).
        delimiter: an extra separator character.
        skip_rows: data lines to skip at the top (a header).
        self_loops: keep events with ``src == dst``.
        sort: stable-sort by time (SNAP files are not guaranteed sorted); with
            ``False`` unsorted input raises.

    Raises:
        DatasetNotFoundError, DatasetFormatError: as ``load_edge_list``, plus
        unsorted times with ``sort=False``.
    """
    source = os.path.basename(os.fspath(path))
    table = tokenize(read_bytes(path, "edge-list file"), source, delimiter=delimiter, skip_rows=skip_rows)
    src, dst, tau, feats, line_no = event_list_columns(table, columns, msg_columns, self_loops)
    if not self_loops and src.shape[0] == 0:
        raise DatasetFormatError(source, "self_loops", "removed every event of the file.", "keep self-loops.")
    if sort:
        order = np.argsort(tau, kind="stable")
    else:
        _check_sorted(tau, line_no, source)
        order = np.arange(tau.shape[0])
    u, v, vertex_map, _ = remap_by_first_appearance(src, dst, order)
    data = TemporalData(
        src=torch.from_numpy(u[order]), dst=torch.from_numpy(v[order]),
        t=torch.from_numpy(np.floor(tau[order]).astype(np.int64)),
        msg=torch.from_numpy(feats[order]).to(torch.float),
    )
    data.vertex_map = torch.from_numpy(vertex_map.astype(np.int64))
    return data


def check_events(data: TemporalData, num_nodes: Optional[int] = None, name: str = "data") -> None:
    r"""Refuse an event stream that the memory models cannot train on.

    Checks: ``src``, ``dst``, ``t`` are 1-D int64 of one length ``E >= 1``,
    ``msg`` is ``[E, F]`` floating, ``t`` is non-decreasing, ids are in
    ``0 .. num_nodes - 1``.

    Raises:
        ModelInputError: naming the field and the fix.
    """
    for key in ("src", "dst", "t", "msg"):
        if getattr(data, key, None) is None:
            raise ModelInputError(f"{name}.{key}", "is missing.", "give TemporalData(src=, dst=, t=, msg=).")
    E = data.src.numel()
    if E == 0:
        raise ModelInputError(f"{name}.src", "is empty: the stream has no events.", "give at least one event.")
    for key in ("src", "dst", "t"):
        x = getattr(data, key)
        if x.dim() != 1 or x.numel() != E or x.dtype != torch.long:
            raise ModelInputError(f"{name}.{key}", f"is {x.dtype} of shape {list(x.shape)}.", f"use int64 of shape [{E}].")
    if data.msg.dim() != 2 or data.msg.size(0) != E or not data.msg.is_floating_point():
        raise ModelInputError(f"{name}.msg", f"is {data.msg.dtype} of shape {list(data.msg.shape)}.",
                              f"use a float tensor of shape [{E}, F] (F may be 0).")
    down = torch.nonzero(data.t[1:] < data.t[:-1])
    if down.numel():
        i = int(down[0]) + 1
        raise ModelInputError(f"{name}.t", f"decreases at event {i} ({int(data.t[i - 1])} -> {int(data.t[i])}).",
                              "sort the events by time (stable), e.g. data = data[data.t.argsort(stable=True)].")
    for key in ("src", "dst"):
        x = getattr(data, key)
        lo, hi = int(x.min()), int(x.max())
        if lo < 0 or (num_nodes is not None and hi >= num_nodes):
            bad = int(torch.nonzero((x < 0) | (x >= (num_nodes if num_nodes is not None else hi + 1)))[0])
            raise ModelInputError(
                f"{name}.{key}", f"holds id {int(x[bad])} at event {bad}, outside 0 .. {num_nodes - 1 if num_nodes is not None else 'inf'}.",
                "ids must be in 0 .. num_nodes - 1 of the model's memory (build the model with data.num_nodes).",
            )


def split_ranges(data: TemporalData, val_ratio: float = 0.15, test_ratio: float = 0.15) -> tuple[int, int, int]:
    r"""Event boundaries ``(val_start, test_start, E)`` of the chronological
    split by time fraction, identical to PyG's
    :meth:`TemporalData.train_val_test_split`: with
    :math:`q_v, q_t` the ``1 - val - test`` and ``1 - test`` quantiles of ``t``
    (numpy's linear interpolation), train is every event with
    :math:`t \le q_v`, validation :math:`q_v < t \le q_t`, test the rest, so
    events with one timestamp never straddle two parts.
    """
    for name, r in (("val_ratio", val_ratio), ("test_ratio", test_ratio)):
        if not (0.0 <= float(r) < 1.0):
            raise ModelInputError(name, f"is {r!r}.", "use a fraction in [0, 1).")
    if val_ratio + test_ratio >= 1.0:
        raise ModelInputError("val_ratio + test_ratio", f"is {val_ratio + test_ratio}.", "leave some events for training (< 1).")
    val_time, test_time = np.quantile(data.t.cpu().numpy(), [1.0 - val_ratio - test_ratio, 1.0 - test_ratio])
    return int((data.t <= val_time).sum()), int((data.t <= test_time).sum()), int(data.t.numel())


def chronological_split(data: TemporalData, val_ratio: float = 0.15, test_ratio: float = 0.15):
    """``(train, val, test)`` :class:`TemporalData` slices at :func:`split_ranges`
    (= ``data.train_val_test_split(val_ratio, test_ratio)``)."""
    a, b, _ = split_ranges(data, val_ratio, test_ratio)
    return data[:a], data[a:b], data[b:]


def synthetic_events(
    num_events: int,
    num_nodes: int = 1000,
    *,
    bipartite: bool = True,
    num_src: Optional[int] = None,
    msg_dim: int = 4,
    burst_fraction: float = 0.3,
    burst_length: int = 50,
    num_communities: int = 8,
    mean_gap: float = 10.0,
    seed: int = 0,
) -> TemporalData:
    r"""A seeded synthetic event stream with learnable structure and bursts.

    * **Nodes.** ``bipartite=True``: sources ``0 .. S-1`` (``S = num_src``,
      default ``num_nodes // 2``) and destinations ``S .. num_nodes-1``, like
      :func:`load_jodie_csv`'s id layout; otherwise any node on either side.
    * **Who meets whom.** Nodes belong to ``num_communities`` communities; a
      source has Zipf-like activity (:math:`p \propto 1/(r+1)`) and picks a
      destination of its own community with probability 0.8, any other with
      0.2, so link prediction has signal.
    * **Bursts.** A fraction ``burst_fraction`` of the events belongs to bursts:
      runs of ``burst_length`` consecutive events that all share one source (a
      "bursty node", DistTGL §3.1's case for static memory).
    * **Time.** Integer times, gaps drawn geometric with mean ``mean_gap``
      (ties occur), gaps inside a burst are 0 or 1.
    * **Features.** ``msg [E, msg_dim]`` float32: the destination's community
      one-hot projected by a fixed random matrix plus N(0, 0.5) noise.

    Everything is drawn from ``numpy.random.default_rng(seed)``.
    """
    if num_events < 1 or num_nodes < 2:
        raise ModelInputError("num_events / num_nodes", f"are {num_events} / {num_nodes}.", "use >= 1 events and >= 2 nodes.")
    if not 0.0 <= burst_fraction <= 1.0 or burst_length < 1:
        raise ModelInputError("burst_fraction / burst_length", f"are {burst_fraction} / {burst_length}.",
                              "use a fraction in [0, 1] and a length >= 1.")
    rng = np.random.default_rng(seed)
    S = num_src if num_src is not None else (num_nodes // 2 if bipartite else num_nodes)
    if bipartite and not 1 <= S < num_nodes:
        raise ModelInputError("num_src", f"is {S} of {num_nodes} nodes.", "leave at least one node on each side.")
    dst_lo, dst_hi = (S, num_nodes) if bipartite else (0, num_nodes)
    comm = rng.integers(0, num_communities, num_nodes)
    act = 1.0 / (rng.permutation(S) + 1.0)
    src = rng.choice(S, size=num_events, p=act / act.sum())
    # bursts: runs of one source
    n_bursts = int(round(burst_fraction * num_events / burst_length))
    starts = rng.integers(0, max(num_events - burst_length, 1), n_bursts) if n_bursts else np.zeros(0, np.int64)
    in_burst = np.zeros(num_events, dtype=bool)
    for s, node in zip(starts, rng.choice(S, size=n_bursts)):  # n_bursts is small: E * fraction / length
        src[s:s + burst_length] = node
        in_burst[s:s + burst_length] = True
    # destinations: mostly the source's community
    cand = np.arange(dst_lo, dst_hi)
    by_comm = [cand[comm[cand] == c] for c in range(num_communities)]
    own = rng.random(num_events) < 0.8
    dst = rng.integers(dst_lo, dst_hi, num_events)
    for c in range(num_communities):
        pick = own & (comm[src] == c)
        if by_comm[c].shape[0] and pick.any():
            dst[pick] = by_comm[c][rng.integers(0, by_comm[c].shape[0], int(pick.sum()))]
    gaps = rng.geometric(1.0 / max(mean_gap, 1.0), num_events) - 1
    gaps[in_burst] = rng.integers(0, 2, int(in_burst.sum()))
    t = np.cumsum(gaps)
    proj = rng.normal(size=(num_communities, msg_dim))
    msg = proj[comm[dst]] + rng.normal(scale=0.5, size=(num_events, msg_dim))
    return TemporalData(
        src=torch.from_numpy(src.astype(np.int64)), dst=torch.from_numpy(dst.astype(np.int64)),
        t=torch.from_numpy(t.astype(np.int64)), msg=torch.from_numpy(msg).to(torch.float),
    )
