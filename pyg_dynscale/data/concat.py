r"""Consecutive windows of a signal joined back into one signal.

:func:`concat_signals` is the inverse of slicing: ``concat_signals(s[a:b],
s[b:c])`` equals ``s[a:c]``. The trainers use it to evaluate a later window
(the test split) after the training window with each vertex's state carried
over, as PyGT's loop that runs the training snapshots and then the test
snapshots does (:meth:`~pyg_dynscale.runtime.FusedTrainer.evaluate`).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..errors import SignalValidationError
from .fields import SnapshotField
from .signal import DynamicGraphSignal

__all__ = ["concat_signals"]


def _offset_ptr(ptrs: list[Tensor]) -> Tensor:
    """``[T_1 + ... + T_k + 1]`` pointer of the concatenated storage."""
    out, base = [ptrs[0][:1]], 0
    for p in ptrs:
        out.append(p[1:] - p[0] + base)
        base = base + int(p[-1] - p[0])
    return torch.cat(out)


def concat_signals(*signals: DynamicGraphSignal) -> DynamicGraphSignal:
    r"""The signal made of the snapshots of ``signals``, in order.

    Args:
        *signals: signals over the same vertices (``num_vertices``) with the
            same fields (names and levels), edge weights in all or none.

    Returns:
        DynamicGraphSignal: :math:`T = \sum_k T_k` snapshots; vertex-time
        node ``n`` of signal ``k`` is node ``n + \sum_{j<k} N_j``. Static
        graphs with the same one edge list (slices of one static signal) give
        a static graph sharing it; otherwise the edges are concatenated per
        snapshot (a static input's expansion is built for the result only,
        not kept on the input).

    Raises:
        SignalValidationError: naming what differs between the signals.
    """
    if not signals:
        raise SignalValidationError("signals", "is empty.", "pass at least one signal.")
    first = signals[0]
    for k, s in enumerate(signals[1:], 1):
        if s.num_vertices != first.num_vertices:
            raise SignalValidationError("num_vertices", f"is {s.num_vertices} in signal {k} and {first.num_vertices} "
                                        "in signal 0.", "join windows of the same signal.")
        if s.weighted != first.weighted:
            raise SignalValidationError("edge_weight", f"is present in only some signals (signal {k}).",
                                        "join windows of the same signal.")
        if {n: f.level for n, f in s.fields.items()} != {n: f.level for n, f in first.fields.items()}:
            raise SignalValidationError("fields", f"differ: {sorted(s.fields)} in signal {k}, {sorted(first.fields)} "
                                        "in signal 0.", "join windows of the same signal.")
        if s.device != first.device:
            raise SignalValidationError("device", f"is {s.device} in signal {k} and {first.device} in signal 0.",
                                        "move the signals to one device first.")
    if len(signals) == 1:
        return first
    fields: dict[str, SnapshotField] = {}
    for name, f in first.fields.items():
        parts = [s.fields[name] for s in signals]
        values = torch.cat([p.values for p in parts], f.cat_dim if f.level == "ragged" else 0)
        if f.level == "ragged":
            fields[name] = SnapshotField("ragged", values, _offset_ptr([p.ptr for p in parts]), f.cat_dim)
        else:
            fields[name] = SnapshotField(f.level, values)
    node_ptr = _offset_ptr([s.node_ptr for s in signals])
    # implicit local ids stay implicit; otherwise each signal's ids (built for the result only where implicit)
    node_id = None if all(s.local_ids for s in signals) else torch.cat([s._ids_for_reading() for s in signals])
    if all(_same_static_graph(first, s) for s in signals[1:]):
        return DynamicGraphSignal.from_storage(node_id, node_ptr, first.static_edge_index, None,
                                               first.static_edge_weight, fields, first.num_vertices)
    edges = [s.expand_edges() for s in signals]  # (edge_index, edge_ptr, edge_weight) of each
    return DynamicGraphSignal.from_storage(
        node_id, node_ptr, torch.cat([e[0] for e in edges], 1), _offset_ptr([e[1] for e in edges]),
        None if not first.weighted else torch.cat([e[2] for e in edges]),
        fields, first.num_vertices)


def _same_static_graph(a: DynamicGraphSignal, b: DynamicGraphSignal) -> bool:
    """Whether ``a`` and ``b`` are static graphs with the same one edge list and weights."""
    if not (a.is_static and b.is_static):
        return False
    pairs = [(a.static_edge_index, b.static_edge_index), (a.static_edge_weight, b.static_edge_weight)]
    return all((x is None and y is None) or (x is not None and y is not None and x.dtype == y.dtype
                                             and x.shape == y.shape and bool(torch.equal(x, y))) for x, y in pairs)
