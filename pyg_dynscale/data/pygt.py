r"""Conversion between :class:`DynamicGraphSignal` and PyTorch Geometric
Temporal's signal classes.

PyGT signals are read duck-typed (``snapshot_count``, ``edge_index`` /
``edge_indices``, ``edge_weight(s)``, ``features`` / ``feature``, ``targets``,
``batches``, ``additional_feature_keys``), so reading needs no PyGT import.
Writing builds PyGT objects and needs the ``pygt`` extra.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from .._optional import import_pygt
from ..errors import SignalValidationError

if TYPE_CHECKING:  # pragma: no cover
    from .signal import DynamicGraphSignal

PYGT_KINDS = (
    "StaticGraphTemporalSignal",
    "DynamicGraphTemporalSignal",
    "DynamicGraphStaticSignal",
    "StaticGraphTemporalSignalBatch",
    "DynamicGraphTemporalSignalBatch",
    "DynamicGraphStaticSignalBatch",
)


def _is_hetero(signal: Any) -> bool:
    return any(hasattr(signal, a) for a in ("edge_index_dict", "edge_index_dicts", "feature_dicts", "feature_dict"))


def from_pygt(signal: Any, cls: type, **kwargs: Any) -> "DynamicGraphSignal":
    """Read any non-hetero PyGT signal into a :class:`DynamicGraphSignal`.

    Args:
        signal: a ``StaticGraphTemporalSignal``, ``DynamicGraphTemporalSignal``,
            ``DynamicGraphStaticSignal`` or one of their ``*Batch`` variants
            (or any object with the same attributes).
        cls: the class to build (:meth:`DynamicGraphSignal.from_pygt`, the
            public entry point, passes itself).
        **kwargs: passed to the :class:`DynamicGraphSignal` constructor
            (e.g. ``dtype=None`` to keep float64).

    An extra named ``n_id`` (written by :func:`to_pygt` for changing vertex
    sets) becomes the node ids again.
    """
    if _is_hetero(signal):
        raise NotImplementedError(
            "Heterogeneous PyGT signals (HeteroData snapshots) are not supported by DynamicGraphSignal; "
            "convert each node/edge type to its own homogeneous signal."
        )
    if not hasattr(signal, "snapshot_count") or not hasattr(signal, "targets"):
        raise SignalValidationError(
            "signal",
            f"{type(signal).__name__} does not look like a PyGT signal (no snapshot_count/targets).",
            "pass a torch_geometric_temporal.signal object.",
        )
    T = int(signal.snapshot_count)
    if hasattr(signal, "edge_indices"):
        edges: Any = list(signal.edge_indices)
        weights: Any = None if signal.edge_weights is None else list(signal.edge_weights)
    else:
        edges = signal.edge_index
        weights = signal.edge_weight
    static_features = hasattr(signal, "feature") and not hasattr(signal, "features")
    features: Any = signal.feature if static_features else signal.features
    if features is not None and not static_features:
        features = list(features)
        if all(f is None for f in features):
            features = None
    targets: Any = None if signal.targets is None else list(signal.targets)
    if targets is not None and all(t is None for t in targets):
        targets = None
    extras: dict[str, Any] = {}
    for key in getattr(signal, "additional_feature_keys", []) or []:
        value = getattr(signal, key)
        extras[key] = None if value is None else list(value)
    if hasattr(signal, "batches"):
        b = signal.batches
        extras["batch"] = [b] * T if isinstance(b, np.ndarray) and not isinstance(signal.batches, list) and b.ndim == 1 and not hasattr(signal, "edge_indices") else list(b)
    node_ids = extras.pop("n_id", None)
    if not isinstance(edges, list) and edges is not None and not isinstance(weights, list):
        # a static graph: its one edge list, stored once (DynamicGraphSignal's class docstring); every snapshot
        # has it, as PyGT's
        edges_l: Any = edges
        weights_l: Any = weights
    else:
        edges_l, weights_l = edges, weights
    if isinstance(edges_l, list) and any(e is None for e in edges_l):
        raise SignalValidationError("edge_indices", "contains None snapshots.", "give every snapshot an edge array (possibly empty).")
    if isinstance(weights_l, list) and all(w is None for w in weights_l):
        weights_l = None
    field_levels = kwargs.pop("field_levels", None) or {}
    if "batch" in extras:
        field_levels = {"batch": "node", **field_levels}
    return cls(
        edges_l, weights_l, features, targets,
        node_ids=node_ids, static_features=static_features, field_levels=field_levels,
        **extras, **kwargs,
    )


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def to_pygt(signal: "DynamicGraphSignal", kind: Optional[str] = None) -> Any:
    """Write ``signal`` as a PyGT signal object.

    Args:
        kind: one of :data:`PYGT_KINDS`. Default: ``StaticGraphTemporalSignal``
            when every snapshot has the same edges, weights and vertex set, else
            ``DynamicGraphTemporalSignal`` (``*Batch`` when a ``batch`` field
            exists).

    Vertex sets that differ from ``0..|V_t|-1`` are kept as an ``n_id`` extra.
    """
    pygt = import_pygt("Converting to a PyGT signal")
    T = signal.num_snapshots
    snaps = [signal.snapshot(t) for t in range(T)]
    edges = [_np(s.edge_index) for s in snaps]
    weights = None if not signal.weighted else [_np(s.edge_attr) for s in snaps]  # (a static graph's stay unexpanded)
    x = signal.fields.get("x")
    features = None if x is None else [_np(s.x) for s in snaps]
    targets = [_np(s.y) for s in snaps] if "y" in signal.fields else [None] * T
    extras = {k: [_np(getattr(s, k)) for s in snaps] for k in signal.extra_keys if k != "batch"}
    batches = [_np(s.batch) for s in snaps] if "batch" in signal.fields else None
    counts = signal.nodes_per_snapshot
    total = signal.num_vertex_time_nodes
    local = torch.arange(total) - torch.repeat_interleave(signal.node_ptr[:-1].cpu(), counts.cpu(), output_size=total)
    if not torch.equal(local, signal.node_id.cpu()):
        extras["n_id"] = [_np(s.n_id) for s in snaps]

    if kind is None:
        same = all(np.array_equal(edges[0], e) for e in edges) and bool((counts == counts[0]).all())
        if weights is not None:
            same = same and all(np.array_equal(weights[0], w) for w in weights)
        same = same and "n_id" not in extras
        if batches is not None:
            kind = "StaticGraphTemporalSignalBatch" if same and all(np.array_equal(batches[0], b) for b in batches) else "DynamicGraphTemporalSignalBatch"
        else:
            kind = "StaticGraphTemporalSignal" if same else "DynamicGraphTemporalSignal"
    if kind not in PYGT_KINDS:
        raise SignalValidationError("kind", f"is {kind!r}.", f"use one of {PYGT_KINDS}.")
    cls = getattr(pygt.signal, kind)
    if kind.startswith("StaticGraph"):
        args: list[Any] = [edges[0], None if weights is None else weights[0], features, targets]
    elif kind.startswith("DynamicGraphStatic"):
        if features is not None and not all(np.array_equal(features[0], f) for f in features):
            raise SignalValidationError("kind", "is DynamicGraphStaticSignal but features change over time.", "use DynamicGraphTemporalSignal.")
        args = [edges, weights if weights is not None else [None] * T, None if features is None else features[0], targets]
    else:
        args = [edges, weights if weights is not None else [None] * T, features if features is not None else [None] * T, targets]
    if kind.endswith("Batch"):
        if batches is None:
            raise SignalValidationError("kind", f"is {kind} but the signal has no 'batch' field.", "add a node-level 'batch' extra.")
        args.append(batches[0] if kind.startswith("StaticGraph") else batches)
    return cls(*args, **extras)
