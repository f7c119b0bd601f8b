r"""Graph-difference (GD) host-to-device transfer of snapshot blocks (SC'21 §3.2).

Consecutive snapshots of a dynamic graph overlap heavily. Instead of copying
every snapshot's structure, the first snapshot of each block (a *keyframe*) is
sent whole and every later snapshot :math:`t` as

* the positions (in snapshot :math:`t-1`'s sorted order) of the vertices and
  edges that disappeared, :math:`A_{t-1}^{\mathrm{ext}}`,
* the keys of the vertices and edges that appeared, :math:`A_t^{\mathrm{ext}}`,
* all of its *values*,

and the device rebuilds :math:`A_t = (A_{t-1} \setminus A_{t-1}^{\mathrm{ext}})
\cup A_t^{\mathrm{ext}}` with a sort per snapshot. What counts as *values*
(sent as is, every snapshot): edge weights, and every field (node features and
targets, edge attributes, graph-level and ragged extras) -- features normally
change every snapshot, so diffing them would not pay off. Only the structure
(``node_id`` vertex sets and ``edge_index``) is diffed.

Edges are keyed by global vertex ids, :math:`k = \mathrm{src} \cdot V +
\mathrm{dst}`; duplicate edges (multigraphs) get an occurrence number
:math:`k' = k \cdot D + \mathrm{occ}` so that multisets diff exactly. With
``preserve_order=True`` (default) the per-snapshot row order of vertices and
edges is restored too (a small permutation is sent only for snapshots whose
order is not already sorted), so the result ``equals`` the input bit for bit;
with ``preserve_order=False`` the result is :func:`canonicalize` of the input.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields as dc_fields
from typing import Any, Optional, Union

import torch
from torch import Tensor

from ..errors import SignalValidationError
from .fields import SnapshotField, ptr_from_counts
from .signal import DynamicGraphSignal

__all__ = [
    "GraphDiff",
    "diff_encode",
    "diff_decode",
    "canonicalize",
    "signal_nbytes",
    "transfer_to_device",
]

Device = Union[torch.device, str]


def _nbytes(t: Optional[Tensor]) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def signal_nbytes(signal: DynamicGraphSignal) -> int:
    """Bytes a naive ``signal.to(device)`` moves (every tensor of the signal)."""
    n = sum(_nbytes(t) for t in (signal.node_id, signal.node_ptr, signal.edge_index, signal.edge_ptr, signal.edge_weight))
    for f in signal.fields.values():
        n += _nbytes(f.values) + _nbytes(f.ptr)
    return n


def _small_index_dtype(max_value: int) -> torch.dtype:
    # positions / vertex ids are sent in the narrowest integer type that holds them
    if max_value < 2**15:
        return torch.int16
    if max_value < 2**31:
        return torch.int32
    return torch.long


@dataclass
class GraphDiff:
    r"""The CPU-side payload of a graph-difference transfer.

    Per-snapshot variable-length arrays are concatenated over snapshots with an
    ``[T]`` count array each. Every tensor attribute is part of the payload
    (:attr:`nbytes` counts them all).

    Attributes:
        num_vertices (int), num_snapshots (int), dup_base (int): :math:`V`, :math:`T`, :math:`D`.
        keyframe (Tensor): ``[T]`` bool, snapshot sent whole.
        node_count, edge_count (Tensor): ``[T]`` vertices / edges per snapshot.
        node_full, edge_full (Tensor): sorted vertex ids / edge keys of the keyframes.
        node_removed, edge_removed (Tensor): positions (in the previous snapshot's
            sorted order) of what disappeared.
        node_added, edge_added (Tensor): sorted vertex ids / edge keys that appeared.
        node_perm, edge_perm (Tensor): per non-sorted snapshot, the sorted position of
            each row in the original order (``preserve_order=True`` only).
        *_counts: ``[T]`` segment sizes of the arrays above.
        edge_weight (Tensor | None), fields (dict): the values, in the order of the
            decoded signal.
    """

    num_vertices: int
    num_snapshots: int
    dup_base: int
    preserve_order: bool
    keyframe: Tensor
    node_count: Tensor
    edge_count: Tensor
    node_full: Tensor
    node_full_counts: Tensor
    node_removed: Tensor
    node_removed_counts: Tensor
    node_added: Tensor
    node_added_counts: Tensor
    edge_full: Tensor
    edge_full_counts: Tensor
    edge_removed: Tensor
    edge_removed_counts: Tensor
    edge_added: Tensor
    edge_added_counts: Tensor
    node_perm: Tensor
    node_perm_counts: Tensor
    edge_perm: Tensor
    edge_perm_counts: Tensor
    edge_weight: Optional[Tensor]
    fields: dict[str, SnapshotField] = field(default_factory=dict)

    def tensors(self) -> dict[str, Tensor]:
        """Every payload tensor by name (fields as ``field.<name>[.ptr]``)."""
        out: dict[str, Tensor] = {}
        for f in dc_fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor):
                out[f.name] = v
        for k, sf in self.fields.items():
            out[f"field.{k}"] = sf.values
            if sf.ptr is not None:
                out[f"field.{k}.ptr"] = sf.ptr
        return out

    @property
    def nbytes(self) -> int:
        """Bytes moved by a graph-difference transfer (every payload tensor)."""
        return sum(_nbytes(t) for t in self.tensors().values())

    def nbytes_breakdown(self) -> dict[str, int]:
        """Bytes per part: ``structure`` (vertex/edge diffs, keyframes, permutations, counts) and ``values``."""
        values = _nbytes(self.edge_weight) + sum(_nbytes(f.values) + _nbytes(f.ptr) for f in self.fields.values())
        return {"structure": self.nbytes - values, "values": values}

    def _map(self, fn) -> "GraphDiff":
        kw: dict[str, Any] = {}
        for f in dc_fields(self):
            v = getattr(self, f.name)
            kw[f.name] = fn(v) if isinstance(v, Tensor) else v
        kw["fields"] = {k: SnapshotField(sf.level, fn(sf.values), None if sf.ptr is None else fn(sf.ptr), sf.cat_dim)
                        for k, sf in self.fields.items()}
        return GraphDiff(**kw)

    def pin_memory(self) -> "GraphDiff":
        """A copy in page-locked host memory (needs CUDA), for asynchronous copies."""
        return self._map(lambda t: t.pin_memory())

    def to(self, device: Device, non_blocking: bool = False) -> "GraphDiff":
        """Move the payload (the transfer itself)."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))


# ------------------------------------------------------------------ encoding
def _sorted_order(t_of: Tensor, key: Tensor) -> Tensor:
    """Stable lexicographic order by (t, key, original position)."""
    o = torch.sort(key, stable=True).indices
    return o[torch.sort(t_of[o], stable=True).indices]


def _diff_sorted(t_of: Tensor, code: Tensor, keyframe: Tensor, T: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    r"""Set differences between consecutive snapshots, all snapshots at once.

    ``code`` are dense non-negative codes, unique within a snapshot and sorted
    within it; ``t_of`` the (non-decreasing) snapshot of each element.

    Returns (removed_mask over elements of t-1 [for t = t_of+1], added_mask,
    full_mask, local position, comp).
    """
    U = int(code.max()) + 1 if code.numel() else 1
    comp = t_of * U + code                   # globally sorted
    shifted = (t_of + 1) * U + code          # element of t-1 seen from t
    def member(q: Tensor, ref: Tensor) -> Tensor:
        if ref.numel() == 0:
            return torch.zeros_like(q, dtype=torch.bool)
        p = torch.searchsorted(ref, q).clamp(max=ref.numel() - 1)
        return ref[p] == q
    kf = keyframe[t_of] if t_of.numel() else torch.zeros(0, dtype=torch.bool)
    nxt = (t_of + 1).clamp(max=T - 1)
    removed = (t_of + 1 < T) & ~keyframe[nxt] & ~member(shifted, comp) if t_of.numel() else kf
    added = ~kf & ~member(comp, shifted)
    return removed, added, kf, comp, shifted


def _encode_part(t_of: Tensor, key: Tensor, counts: Tensor, keyframe: Tensor, T: int, preserve: bool):
    """Encode one structure part (vertex ids or edge keys) of all snapshots."""
    n = key.numel()
    ptr = ptr_from_counts(counts)
    order = _sorted_order(t_of, key)
    skey = key[order]
    # dense codes of the sorted keys (unique within a snapshot)
    uniq, code = torch.unique(skey, return_inverse=True)
    removed, added, full, _, _ = _diff_sorted(t_of, code, keyframe, T)  # t_of is already sorted (t-major)
    local = torch.arange(n) - ptr[:-1][t_of]
    pos_dtype = _small_index_dtype(int(counts.max()) if counts.numel() else 0)
    rem_t = t_of[removed] + 1
    removed_pos = local[removed].to(pos_dtype)
    removed_counts = torch.bincount(rem_t, minlength=T)
    added_vals = skey[added]
    added_counts = torch.bincount(t_of[added], minlength=T)
    full_vals = skey[full]
    full_counts = torch.bincount(t_of[full], minlength=T)
    # permutation restoring the original row order: sorted position of each original row
    inv = torch.empty(n, dtype=torch.long)
    inv[order] = torch.arange(n)
    inv_local = inv - ptr[:-1][t_of]
    not_id = inv_local != local
    if preserve:
        bad_t = torch.bincount(t_of[not_id], minlength=T) > 0
        sel = bad_t[t_of]
        perm = inv_local[sel].to(pos_dtype)
        perm_counts = torch.where(bad_t, counts, torch.zeros_like(counts))
    else:
        perm = torch.empty(0, dtype=pos_dtype)
        perm_counts = torch.zeros(T, dtype=torch.long)
    return order, skey, (full_vals, full_counts, removed_pos, removed_counts, added_vals, added_counts, perm, perm_counts)


def diff_encode(signal: DynamicGraphSignal, *, block_size: Optional[int] = None,
                preserve_order: bool = True) -> GraphDiff:
    r"""Encode a signal for graph-difference transfer (runs on the signal's device, normally the CPU).

    Args:
        signal: the snapshots to send (a whole signal or a window ``signal[a:b]``).
        block_size: send snapshots ``0, block_size, 2*block_size, ...`` whole
            (SC'21: the first snapshot of each checkpoint block); default: only
            snapshot 0.
        preserve_order: restore the exact per-snapshot row order of vertices and
            edges (else the decoded signal is :func:`canonicalize` of the input).
    """
    if not isinstance(signal, DynamicGraphSignal):
        raise SignalValidationError("signal", f"is a {type(signal).__name__}.", "pass a DynamicGraphSignal (convert PyGT signals with DynamicGraphSignal.from_pygt).")
    if block_size is not None and int(block_size) < 1:
        raise SignalValidationError("block_size", f"is {block_size}.", "use a positive block size or None.")
    T, V = signal.num_snapshots, max(signal.num_vertices, 1)
    N, E = signal.num_vertex_time_nodes, signal.num_edges
    node_count = signal.nodes_per_snapshot.cpu()
    edge_count = signal.edges_per_snapshot.cpu()
    keyframe = torch.zeros(T, dtype=torch.bool)
    keyframe[:: (int(block_size) if block_size else max(T, 1))] = True
    keyframe[0] = True
    node_id = signal.node_id.cpu()
    t_node = torch.repeat_interleave(torch.arange(T), node_count, output_size=N)
    n_order, n_sorted, n_parts = _encode_part(t_node, node_id, node_count, keyframe, T, preserve_order)

    # edges: global keys src*V + dst, plus an occurrence number for duplicates
    t_edge = torch.repeat_interleave(torch.arange(T), edge_count, output_size=E)
    ei = signal.edge_index.cpu()
    base = signal.node_ptr.cpu()[:-1][t_edge]
    key = node_id[ei[0] + base] * V + node_id[ei[1] + base]
    o = _sorted_order(t_edge, key)
    sk, st = key[o], t_edge[o]
    start = torch.ones(E, dtype=torch.bool)
    if E > 1:
        start[1:] = (sk[1:] != sk[:-1]) | (st[1:] != st[:-1])
    run = torch.cumsum(start.long(), 0) - 1
    first = start.nonzero().flatten()
    occ_sorted = torch.arange(E) - first[run] if E else torch.zeros(0, dtype=torch.long)
    dup_base = int(occ_sorted.max()) + 1 if E else 1
    if V * V * dup_base >= 2**63:
        raise SignalValidationError("num_vertices", f"is {V} with up to {dup_base} copies of an edge: edge keys overflow int64.",
                                    "remap vertex ids to a smaller range (e.g. only the vertices that occur).")
    occ = torch.empty(E, dtype=torch.long)
    occ[o] = occ_sorted
    ckey = key * dup_base + occ
    e_order, e_sorted, e_parts = _encode_part(t_edge, ckey, edge_count, keyframe, T, preserve_order)

    vid_dtype = _small_index_dtype(V)
    nf, nfc, nr, nrc, na, nac, npm, npc = n_parts
    ef, efc, er, erc, ea, eac, epm, epc = e_parts

    # values: in the decoded order (original if preserve_order, else sorted)
    def reorder(values: Tensor, order: Tensor) -> Tensor:
        return values if preserve_order else values[order.to(values.device)]
    weight = None if signal.edge_weight is None else reorder(signal.edge_weight.cpu(), e_order)
    n_rank = torch.empty(N, dtype=torch.long)
    n_rank[n_order] = torch.arange(N)  # sorted row of every original vertex-time node
    out_fields: dict[str, SnapshotField] = {}
    for name, f in signal.fields.items():
        v = f.values.cpu()
        if f.level == "node":
            v = reorder(v, n_order)
        elif f.level == "edge":
            v = reorder(v, e_order)
        elif f.level == "ragged" and f.cat_dim == 1 and not preserve_order and v.numel():
            # *_index extras hold local rows: map them to the sorted rows
            assert f.ptr is not None
            ptr_f = f.ptr.cpu()
            t_col = torch.repeat_interleave(torch.arange(T), ptr_f[1:] - ptr_f[:-1], output_size=v.shape[1])
            nbase = signal.node_ptr.cpu()[:-1][t_col]
            v = n_rank[v + nbase] - nbase
        out_fields[name] = SnapshotField(f.level, v, None if f.ptr is None else f.ptr.cpu(), f.cat_dim)
    c32 = lambda c: c.to(torch.int32)  # noqa: E731  (counts are small)
    return GraphDiff(
        num_vertices=signal.num_vertices, num_snapshots=T, dup_base=dup_base, preserve_order=preserve_order,
        keyframe=keyframe, node_count=c32(node_count), edge_count=c32(edge_count),
        node_full=nf.to(vid_dtype), node_full_counts=c32(nfc), node_removed=nr, node_removed_counts=c32(nrc),
        node_added=na.to(vid_dtype), node_added_counts=c32(nac),
        edge_full=ef, edge_full_counts=c32(efc), edge_removed=er, edge_removed_counts=c32(erc),
        edge_added=ea, edge_added_counts=c32(eac),
        node_perm=npm, node_perm_counts=c32(npc), edge_perm=epm, edge_perm_counts=c32(epc),
        edge_weight=weight, fields=out_fields,
    )


# ------------------------------------------------------------------ decoding
def _rebuild(full: Tensor, full_c: list[int], removed: Tensor, removed_c: list[int], added: Tensor, added_c: list[int],
             keyframe: list[bool], dev: torch.device) -> Tensor:
    """Sorted key arrays of every snapshot, concatenated (a loop over snapshots)."""
    full_parts = torch.split(full.long(), full_c)
    rem_parts = torch.split(removed.long(), removed_c)
    add_parts = torch.split(added.long(), added_c)
    out: list[Tensor] = []
    prev = torch.empty(0, dtype=torch.long, device=dev)
    for t, kf in enumerate(keyframe):
        if kf:
            cur = full_parts[t]
        else:
            keep = torch.ones(prev.numel(), dtype=torch.bool, device=dev)
            keep[rem_parts[t]] = False
            # the number kept is known on the host: no read-back of the mask (a boolean index would sync)
            kept = torch.nonzero_static(keep, size=prev.numel() - removed_c[t]).flatten()
            cur = torch.cat([prev.index_select(0, kept), add_parts[t]])
            if add_parts[t].numel():
                cur = torch.sort(cur).values
        out.append(cur)
        prev = cur
    return torch.cat(out) if out else torch.empty(0, dtype=torch.long, device=dev)


def _perm_full(perm: Tensor, perm_c: Tensor, counts: Tensor, ptr: Tensor, dev: torch.device, n: int) -> Tensor:
    """Global sorted position of every original row (identity where no permutation was sent);
    ``n``: the number of rows (known on the host)."""
    t_of = torch.repeat_interleave(torch.arange(counts.numel(), device=dev), counts, output_size=n)
    local = torch.arange(n, device=dev) - ptr[:-1][t_of]
    has = (perm_c > 0)[t_of]
    if perm.numel():
        local = local.masked_scatter(has, perm.long())  # rows of the permuted snapshots, in order
    return local + ptr[:-1][t_of]


def diff_decode(diff: GraphDiff, device: Device = "cpu", non_blocking: bool = False,
                _moved: Optional[GraphDiff] = None) -> DynamicGraphSignal:
    r"""Move a :class:`GraphDiff` to ``device`` and rebuild the signal there.

    The rebuild is a loop over snapshots (each a mask + sort of that snapshot's
    keys); everything else is vectorized.
    """
    d = _moved if _moved is not None else diff.to(device, non_blocking=non_blocking)
    dev = d.keyframe.device
    T, V, D = diff.num_snapshots, max(diff.num_vertices, 1), diff.dup_base
    # small per-snapshot metadata on the host: read it from the CPU-side copy (no device sync)
    kf = diff.keyframe.tolist()
    lst = lambda c: c.tolist()  # noqa: E731
    node_sorted = _rebuild(d.node_full, lst(diff.node_full_counts), d.node_removed, lst(diff.node_removed_counts),
                           d.node_added, lst(diff.node_added_counts), kf, dev)
    edge_sorted = _rebuild(d.edge_full, lst(diff.edge_full_counts), d.edge_removed, lst(diff.edge_removed_counts),
                           d.edge_added, lst(diff.edge_added_counts), kf, dev)
    node_count, edge_count = d.node_count.long(), d.edge_count.long()
    node_ptr, edge_ptr = ptr_from_counts(node_count), ptr_from_counts(edge_count)
    N, E = node_sorted.numel(), edge_sorted.numel()
    t_node = torch.repeat_interleave(torch.arange(T, device=dev), node_count, output_size=N)
    t_edge = torch.repeat_interleave(torch.arange(T, device=dev), edge_count, output_size=E)
    # sorted vertex-time keys t*V + vid are globally sorted: one searchsorted maps endpoints to sorted rows
    nkey = t_node * V + node_sorted
    key = edge_sorted // D
    src_row = torch.searchsorted(nkey, t_edge * V + key // V)
    dst_row = torch.searchsorted(nkey, t_edge * V + key % V)
    if diff.preserve_order:
        n_pos = _perm_full(d.node_perm, d.node_perm_counts, node_count, node_ptr, dev, N)
        e_pos = _perm_full(d.edge_perm, d.edge_perm_counts, edge_count, edge_ptr, dev, E)
        node_id = node_sorted[n_pos]
        orig_row = torch.empty_like(n_pos)
        orig_row[n_pos] = torch.arange(N, device=dev)
        src_row, dst_row = orig_row[src_row[e_pos]], orig_row[dst_row[e_pos]]
    else:
        node_id = node_sorted
    base = node_ptr[:-1][t_edge]
    edge_index = torch.stack([src_row - base, dst_row - base]) if E else torch.empty(2, 0, dtype=torch.long, device=dev)
    return DynamicGraphSignal.from_storage(node_id, node_ptr, edge_index, edge_ptr, d.edge_weight, dict(d.fields),
                                           diff.num_vertices)


def canonicalize(signal: DynamicGraphSignal) -> DynamicGraphSignal:
    """The signal with each snapshot's vertices sorted by id and edges sorted by
    (src id, dst id) (stable for duplicates); what ``preserve_order=False`` decodes to."""
    return diff_decode(diff_encode(signal, preserve_order=False), signal.device)


def transfer_to_device(signal: DynamicGraphSignal, device: Device, method: str = "diff", *,
                       block_size: Optional[int] = None, preserve_order: bool = True,
                       pin_memory: Optional[bool] = None) -> tuple[DynamicGraphSignal, dict[str, Any]]:
    r"""Move a block of snapshots to ``device``.

    Args:
        method: ``"diff"`` (graph-difference) or ``"naive"`` (``signal.to``).
        block_size, preserve_order: see :func:`diff_encode`.
        pin_memory: stage the payload in page-locked memory and copy with
            ``non_blocking=True`` (default: when ``device`` is CUDA and available).

    Returns:
        ``(signal_on_device, stats)`` with ``bytes_moved``, ``bytes_naive``,
        ``ratio`` (naive / moved), ``encode_s``, ``pin_s``, ``transfer_s``
        (copy, synchronized), ``decode_s`` and, for ``diff``, ``structure_bytes``
        and ``value_bytes``.
    """
    if method not in ("diff", "naive"):
        raise SignalValidationError("method", f"is {method!r}.", "use 'diff' or 'naive'.")
    device = torch.device(device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SignalValidationError("device", f"is {device} but CUDA is not available.", "pass a device that exists, e.g. 'cpu'.")
    pin = (cuda if pin_memory is None else bool(pin_memory)) and torch.cuda.is_available()
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)  # noqa: E731
    naive = signal_nbytes(signal)
    stats: dict[str, Any] = {"method": method, "bytes_naive": naive, "num_snapshots": signal.num_snapshots}
    t0 = time.perf_counter()
    if method == "naive":
        src = signal
        if pin:
            src = signal.to("cpu")
            for name in ("node_id", "node_ptr", "edge_index", "edge_ptr", "edge_weight"):
                v = getattr(src, name)
                if v is not None:
                    setattr(src, name, v.pin_memory())
            src.fields = {k: SnapshotField(f.level, f.values.pin_memory(), None if f.ptr is None else f.ptr.pin_memory(), f.cat_dim)
                          for k, f in src.fields.items()}
        t1 = time.perf_counter()
        out = src.to(device, non_blocking=pin)
        sync()
        t2 = time.perf_counter()
        stats.update(bytes_moved=naive, encode_s=0.0, pin_s=t1 - t0, transfer_s=t2 - t1, decode_s=0.0)
    else:
        diff = diff_encode(signal, block_size=block_size, preserve_order=preserve_order)
        t1 = time.perf_counter()
        if pin:
            diff = diff.pin_memory()
        t2 = time.perf_counter()
        moved = diff.to(device, non_blocking=pin)
        sync()
        t3 = time.perf_counter()
        out = diff_decode(diff, device, _moved=moved)
        sync()
        t4 = time.perf_counter()
        br = diff.nbytes_breakdown()
        stats.update(bytes_moved=diff.nbytes, encode_s=t1 - t0, pin_s=t2 - t1, transfer_s=t3 - t2, decode_s=t4 - t3,
                     structure_bytes=br["structure"], value_bytes=br["values"],
                     keyframes=int(diff.keyframe.sum()))
    stats["ratio"] = naive / max(stats["bytes_moved"], 1)
    return out, stats
