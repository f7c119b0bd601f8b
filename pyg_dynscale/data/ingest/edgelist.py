r"""Chunked reader of temporal edge lists into a signal store: the snapshots of
:func:`~pyg_dynscale.data.loaders.load_edge_list` for files larger than memory.

**Passes.**

1. *Parse* chunks of ``chunk_rows`` lines, validate them (same errors, line
   numbers in the file) and append ``src``, ``dst``, ``time`` (and the weight
   column) to scratch files; the smallest and largest time fix the windows.
2. *Sort* by time when the file is not in time order (a stable external merge
   sort, :func:`~pyg_dynscale.data.ingest.external.external_argsort`).
3. *Bin* the events in time order, chunk by chunk: vertex ids by first
   appearance (:class:`~pyg_dynscale.data.ingest.external.IdTable`), and the
   windows that are complete are turned into snapshots together, with the
   in-memory loader's vectorized code restricted to them; a window is complete
   when an event of a later window was read, and a snapshot with a target also
   waits for the next window (its labels). The snapshots are appended to the
   store, committed atomically at the end.

**Equal to the in-memory loader**: the snapshot structure, ``edge_index``,
``edge_weight`` (repeated events merged in file order, so float sums are the
same bits), ``x``, ``y`` (``target="degree"``), ``vertex_map``,
``snapshot_time``, and for ``target="link"`` the positives and the number of
negatives of every snapshot. **Not equal: the negative pairs' draws.** The
in-memory loader draws every snapshot's negatives from one generator over all
snapshots at once, which needs every positive pair in memory; here snapshot
:math:`t`'s negatives are drawn by the same sampler
(:func:`~pyg_dynscale.data.loaders.negative_sampling.sample_negative_pairs`:
distinct, not positives, no self-loops, uniform) from
``numpy.random.default_rng([seed, t])``, so they do not depend on the chunk
size, only on ``seed`` and ``t``.

**Memory**: ``O(chunk_rows)`` parsed rows, the ``[V]`` id table, and the
events of the windows being binned -- at least the largest window (two with a
target): a single window larger than memory is not supported. The snapshots'
rows are written as they are made; with ``vertex_set="cumulative"`` a window
has up to :math:`V` rows whatever its events, so windows are binned in groups
of at most ``4 * chunk_rows / V`` (at least one).
"""
from __future__ import annotations

import os
from functools import partial
from typing import Optional, Sequence, Union

import numpy as np

from ...errors import SignalValidationError
from ..loaders._common import PathLike
from ..loaders.edgelist import (
    check_edge_list_options,
    check_windows,
    degree_features,
    degree_target,
    find_vertex_rows,
    link_positives,
    merge_events,
    reverse_events,
    vertex_degrees,
    window_vertex_rows,
)
from ..loaders.edgelist_parse import edge_list_columns
from ..loaders.negative_sampling import sample_negative_pairs
from ..mapped import CHUNK_BYTES, StoreWriter, load_signal_store
from ..signal import DynamicGraphSignal
from .external import IdTable, Scratch, external_argsort
from .text import DEFAULT_CHUNK_ROWS, ChunkedTable


_EV = ("b", "u", "v", "w", "row")
# edge_label_index and edge_label have equal offsets (two copies, as load_edge_list's signal)
_LABEL_PTRS = ("field.edge_label_index.ptr", "field.edge_label.ptr")


class _Binner:
    """Turns time-ordered events (window ``b``, ids ``u``, ``v``, weight ``w``,
    file row ``row``) into snapshots appended to ``writer``; owns the running
    offsets between blocks."""

    def __init__(self, writer: StoreWriter, *, t0: float, w_units: float, features: Optional[str],
                 target: Optional[str], negative_ratio: float, vertex_set: str, seed: int, weighted: bool,
                 weight_agg: str, degree_transform: Optional[str], undirected: bool, drop_empty: bool) -> None:
        self.w = writer
        self.t0, self.w_units = t0, w_units
        self.features, self.target, self.ratio = features, target, float(negative_ratio)
        self.vertex_set, self.seed, self.weighted, self.agg = vertex_set, int(seed), weighted, weight_agg
        self.transform, self.undirected, self.drop_empty = degree_transform, undirected, drop_empty
        self.next_b = 0          # first window not emitted yet
        self.snap = 0            # global index of the next snapshot
        self.nodes = 0           # vertex-time nodes written
        self.edges = 0
        self.labels = 0
        self.known = 0           # cumulative: vertices that exist by the last emitted snapshot
        for name in ("node_ptr", "edge_ptr") + (_LABEL_PTRS if target == "link" else ()):
            writer.append(name, np.zeros(1, dtype=np.int64))

    def emit(self, ev: dict, cut_b: int, look_b: Optional[int]) -> None:
        """Write the snapshots of windows ``next_b .. cut_b - 1`` (their events
        are the ``ev`` rows with ``b < cut_b``); ``look_b``: the window of the
        next snapshot, whose events (all of them) are the rows with ``b == look_b``."""
        b = ev["b"]
        if self.drop_empty:
            wins = np.unique(b[b < cut_b])
            S = int(wins.shape[0])
            all_wins = wins if look_b is None else np.append(wins, look_b)
            s = np.searchsorted(all_wins, b)
        else:
            S = cut_b - self.next_b
            wins = self.next_b + np.arange(S, dtype=np.int64)
            s = b - self.next_b
        if S <= 0:
            return
        T = S + (1 if look_b is not None else 0)
        u, v, row, snap = ev["u"], ev["v"], ev["row"], s
        ew = ev["w"] if self.weighted else np.ones(u.shape[0])
        n = u.shape[0]
        if self.undirected:
            u, v, snap, ew, row = reverse_events(u, v, snap, ew, row)
        rev_flag = np.arange(u.shape[0]) >= n  # the reversed events, after the forward ones
        # ties in file order (forward events, then reversed ones), as the in-memory stable lexsort
        es, eu, ev_, weight = merge_events(snap, u, v, ew, self.agg if self.weighted else None, ties=(row, rev_flag))
        edge_counts = np.bincount(es, minlength=T)

        if self.vertex_set == "cumulative":
            top = np.full(T, -1, dtype=np.int64)
            np.maximum.at(top, s, np.maximum(ev["u"], ev["v"]))
            node_counts = np.maximum.accumulate(np.maximum(top + 1, self.known))
            node_ptr = np.zeros(T + 1, dtype=np.int64)
            np.cumsum(node_counts, out=node_ptr[1:])
            node_id, node_keys, lu, lv = None, None, eu, ev_
            Vm = 1
        else:
            Vm = int(max(eu.max(), ev_.max())) + 1 if eu.shape[0] else 1
            node_keys, node_counts, node_ptr, node_id, lu, lv = window_vertex_rows(es, eu, ev_, Vm, T)
        in_deg, out_deg = vertex_degrees(node_ptr, es, lu, lv)
        node_in = partial(find_vertex_rows, node_counts, node_ptr, node_keys, Vm)

        N_out, E_out = int(node_ptr[S]), int(edge_counts[:S].sum())
        snap_of_node = np.repeat(np.arange(T, dtype=np.int64), node_counts)
        w = self.w
        w.append("node_ptr", self.nodes + node_ptr[1:S + 1])
        w.append("edge_ptr", self.edges + np.cumsum(edge_counts[:S]))
        if node_id is None:
            node_id = np.arange(N_out, dtype=np.int64) - np.repeat(node_ptr[:S], node_counts[:S])
        w.append("node_id", node_id[:N_out].astype(np.int64))
        w.append("edge_index", np.stack([lu[:E_out], lv[:E_out]]).astype(np.int64), axis=1)
        w.append("edge_weight", weight[:E_out].astype(np.float32))
        w.append("extra.snapshot_time", self.t0 + wins.astype(np.float64) * self.w_units)

        if self.features == "degree":
            x = degree_features(in_deg, out_deg, self.transform, snap_of_node, T)
            w.append("field.x.values", x[:N_out].astype(np.float32))
        if self.target == "degree":
            y = degree_target(in_deg, out_deg, self.undirected, snap_of_node, node_id[:N_out], node_ptr, node_in)
            w.append("field.y.values", y.astype(np.float32))
        elif self.target == "link":
            self._links(es, eu, ev_, node_in, node_counts, S)

        self.nodes += N_out
        self.edges += E_out
        self.snap += S
        self.next_b = int(wins[-1]) + 1 if self.drop_empty else cut_b
        if self.vertex_set == "cumulative":
            self.known = int(node_counts[S - 1])

    def _links(self, es, eu, ev_, node_in, node_counts, S: int) -> None:
        pt, ru, rv, k = link_positives(es, eu, ev_, self.ratio, S, node_in)
        bounds = np.searchsorted(pt, np.arange(S + 1))  # pt is sorted (es is)
        nt, nu, nv = [], [], []
        for t in np.flatnonzero(k > 0).tolist():  # one generator per snapshot: draws independent of the chunking
            a, b = bounds[t], bounds[t + 1]
            rng = np.random.default_rng([self.seed, self.snap + t])
            _, su, sv = sample_negative_pairs(node_counts[t:t + 1], k[t:t + 1], np.zeros(b - a, dtype=np.int64),
                                              ru[a:b], rv[a:b], rng)
            nt.append(np.full(su.shape[0], t, dtype=np.int64))
            nu.append(su)
            nv.append(sv)
        z = [np.zeros(0, dtype=np.int64)]
        lt = np.concatenate([pt] + (nt or z))
        li = np.stack([np.concatenate([ru] + (nu or z)), np.concatenate([rv] + (nv or z))])
        lab = np.concatenate([np.ones(pt.shape[0]), np.zeros(lt.shape[0] - pt.shape[0])])
        lo = np.argsort(lt, kind="stable")
        self.w.append("field.edge_label_index.values", np.ascontiguousarray(li[:, lo]).astype(np.int64), axis=1)
        self.w.append("field.edge_label.values", lab[lo].astype(np.float32))
        for name in _LABEL_PTRS:
            self.w.append(name, self.labels + np.cumsum(np.bincount(lt, minlength=S)))
        self.labels += int(lt.shape[0])


def _flush(binner: _Binner, pending: dict, cut: int, look: Optional[int], num_vertices: int, chunk_rows: int) -> None:
    """Emit the windows ``binner.next_b .. cut - 1`` of ``pending`` (``look``:
    the window after them, for targets), in groups small enough that a group's
    cumulative vertex sets (up to ``num_vertices`` rows per snapshot, empty
    windows included) stay within ``4 * chunk_rows`` rows."""
    b = pending["b"]
    if binner.vertex_set == "cumulative":
        per_group = max(1, (4 * chunk_rows) // max(num_vertices, 1))
    else:
        per_group = 1 << 62  # a window's rows are its events' endpoints: bounded by the events
    if binner.drop_empty:
        wins = np.unique(b[b < cut])
        cuts = [int(c) for c in wins[per_group::per_group]] + [cut]
    else:
        cuts = list(range(binner.next_b + per_group, cut, per_group)) + [cut]
    lo = 0
    for g, c in enumerate(cuts):
        lk = (c if g < len(cuts) - 1 else look) if look is not None else None
        hi = int(np.searchsorted(b, lk, "right")) if lk is not None else int(np.searchsorted(b, c, "left"))
        binner.emit({k: pending[k][lo:hi] for k in _EV}, c, lk)
        lo = int(np.searchsorted(b, c, "left"))


def ingest_edge_list(
    path: PathLike,
    out: PathLike,
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
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    overwrite: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
) -> "DynamicGraphSignal":
    r"""Read a temporal edge list in chunks into the signal store ``out``
    (snapshot graphs, as :func:`~pyg_dynscale.data.loaders.load_edge_list`)
    and open it memory-mapped (``DynamicGraphSignal.load(out)`` opens it again).

    Every option means what it means for ``load_edge_list``; the result equals
    its result except for the draws of the negative link labels (see the
    module docstring: per snapshot from ``default_rng([seed, t])``).

    Args:
        chunk_rows: lines parsed (and events binned) at a time.
        out, overwrite, chunk_bytes: the store directory, whether to replace an
            existing one, its checksum granularity.

    Returns:
        The signal over the store, with ``vertex_map``, ``snapshot_time``
        (memory-mapped) and ``window`` attributes, as ``load_edge_list``.

    Raises:
        DatasetNotFoundError, DatasetFormatError, SignalValidationError: as ``load_edge_list``.
    """
    seconds, target, features, columns, w_units = check_edge_list_options(
        window, vertex_set, target, features, degree_transform, weight_agg, time_unit, negative_ratio, columns)
    table_chunks = ChunkedTable(path, "edge-list file", chunk_rows=chunk_rows, delimiter=delimiter, skip_rows=skip_rows)
    chunk_rows = table_chunks.chunk_rows
    with StoreWriter(out, "signal", overwrite=overwrite, chunk_bytes=chunk_bytes) as writer, \
            Scratch(os.fspath(out)) as scratch:  # committed on success, else dropped
        lo, hi, ordered, prev = np.inf, -np.inf, True, None
        for table in table_chunks:
            src, dst, tau, wcol, line_no = edge_list_columns(table, columns, weight_column, self_loops)
            row = line_no.astype(np.int64)  # file order
            if tau.shape[0]:
                lo, hi = min(lo, float(tau.min())), max(hi, float(tau.max()))
                ordered = ordered and (prev is None or tau[0] >= prev) and bool((tau[1:] >= tau[:-1]).all())
                prev = tau[-1]
            scratch.append("src", src)
            scratch.append("dst", dst)
            scratch.append("tau", tau)
            scratch.append("row", row)
            if wcol is not None:
                scratch.append("w", wcol)
        table_chunks.finish()
        n = scratch.rows("src")
        if n == 0:
            raise SignalValidationError("self_loops", "removed every event of the file.", "keep self-loops or check the file.")
        t0 = lo
        check_windows(hi - lo, w_units, seconds, time_unit, target)
        tau_all = scratch.array("tau")
        order = None if ordered else external_argsort(tau_all, chunk_rows, scratch)
        cols = {k: scratch.array(k) for k in ("src", "dst", "row") + (("w",) if weight_column is not None else ())}
        binner = _Binner(writer, t0=t0, w_units=w_units, features=features, target=target,
                         negative_ratio=negative_ratio, vertex_set=vertex_set, seed=seed,
                         weighted=weight_column is not None, weight_agg=weight_agg,
                         degree_transform=degree_transform, undirected=undirected, drop_empty=drop_empty)
        ids = IdTable()
        pending = {k: np.zeros(0, dtype=np.float64 if k == "w" else np.int64) for k in _EV}
        keep_windows = 2 if target is not None else 1
        for s in range(0, n, chunk_rows):
            idx = slice(s, min(s + chunk_rows, n)) if order is None else np.asarray(order[s:s + chunk_rows])
            uv = ids.map(np.stack([np.asarray(cols["src"][idx]), np.asarray(cols["dst"][idx])], axis=1).ravel())
            tau = np.asarray(tau_all[idx])
            chunk = {"b": np.floor((tau - t0) / w_units).astype(np.int64), "u": uv[0::2], "v": uv[1::2],
                     "w": np.asarray(cols["w"][idx]) if "w" in cols else np.zeros(tau.shape[0]),
                     "row": np.asarray(cols["row"][idx])}
            pending = {k: np.concatenate([pending[k], chunk[k]]) for k in _EV}
            wins = np.unique(pending["b"])
            if wins.shape[0] <= keep_windows:
                continue  # no window is complete (and followed by a complete one) yet
            cut = int(wins[-keep_windows])
            _flush(binner, pending, cut, cut if target is not None else None, len(ids), chunk_rows)
            rest = np.searchsorted(pending["b"], cut, "left")
            pending = {k: pending[k][rest:] for k in _EV}
        # the end: every window is complete
        last = int(pending["b"][-1])
        _flush(binner, pending, last if target is not None else last + 1, last if target is not None else None,
               len(ids), chunk_rows)
        writer.put("extra.vertex_map", ids.vertex_map().astype(np.int64))
        fields = []  # load_edge_list's order
        if features == "degree":
            fields.append({"name": "x", "level": "node", "cat_dim": 0})
        if target == "degree":
            fields.append({"name": "y", "level": "node", "cat_dim": 0})
        elif target == "link":
            fields.append({"name": "edge_label_index", "level": "ragged", "cat_dim": 1})
            fields.append({"name": "edge_label", "level": "ragged", "cat_dim": 0})
        writer.attrs.update({"num_vertices": len(ids), "fields": fields, "window": w_units})
    return load_signal_store(out, DynamicGraphSignal, verify=False)

