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
        node ``n`` of signal ``k`` is node ``n + \sum_{j<k} N_j``.

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
        if (s.edge_weight is None) != (first.edge_weight is None):
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
    return DynamicGraphSignal.from_storage(
        torch.cat([s.node_id for s in signals]), _offset_ptr([s.node_ptr for s in signals]),
        torch.cat([s.edge_index for s in signals], 1), _offset_ptr([s.edge_ptr for s in signals]),
        None if first.edge_weight is None else torch.cat([s.edge_weight for s in signals]),
        fields, first.num_vertices)
