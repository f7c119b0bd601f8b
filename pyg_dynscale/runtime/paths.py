r"""Choosing a runtime path for a user's model, and accepting PyGT signals.

* ``path="decomposed"``: the model is (or is adapted to) a
  :class:`~pyg_dynscale.nn.DecomposedModule` -- spatial chunk fusion and
  masked temporal fusion, the fast path;
* ``path="blackbox"``: the model is called unchanged once per snapshot
  (:class:`~pyg_dynscale.nn.snapshot_model.SnapshotModel`);
* ``path="auto"``: decomposed when an adapter exists for the model (or the
  one cell it wraps, :class:`~pyg_dynscale.nn.adapters.ModuleAdapter`) and
  passes its self-check, black-box otherwise.
"""
from __future__ import annotations

from typing import Any, Union

import torch

from ..errors import DecompositionMismatchError, ModelInputError, UnsupportedModelError
from ..nn.adapters import adapt
from ..nn.decomposed import DecomposedModule
from ..nn.halo_check import check_halo
from ..nn.snapshot_model import SnapshotModel

__all__ = ["PATHS", "resolve_model", "as_signal", "data_argument", "prepare_snapshot_model", "edge_fields_of", "model_pattern",
           "partition_for_model"]

PATHS = ("auto", "decomposed", "blackbox")


def as_signal(signal: Any) -> Any:
    """A :class:`~pyg_dynscale.data.DynamicGraphSignal`, converting a PyGT
    signal object (``StaticGraphTemporalSignal``, ...) with
    :func:`~pyg_dynscale.data.pygt.from_pygt`."""
    from ..data.signal import DynamicGraphSignal

    if isinstance(signal, DynamicGraphSignal):
        return signal
    if hasattr(signal, "snapshot_count") and hasattr(signal, "targets"):
        return DynamicGraphSignal.from_pygt(signal)
    raise ModelInputError("signal", f"is a {type(signal).__name__}.",
                          "pass a DynamicGraphSignal or a PyGT signal (StaticGraphTemporalSignal, DynamicGraphTemporalSignal, ...).")


def data_argument(owner: str, data: Any, extra: dict, required: bool = True) -> Any:
    """The trainer's data from its ``data`` argument and ``extra``, the other
    keywords it was given after :func:`~pyg_dynscale.training.options.renamed_keyword`
    moved ``signal=`` to ``data=`` (an unknown keyword is a :class:`TypeError`,
    as Python's own)."""
    extra = dict(extra)
    if "data" in extra:
        if data is not None:
            raise TypeError(f"{owner}() got multiple values for argument 'data'")
        data = extra.pop("data")
    if extra:
        raise TypeError(f"{owner}() got an unexpected keyword argument {next(iter(extra))!r}")
    if data is None and required:
        raise TypeError(f"{owner}() missing 1 required argument: 'data'")
    return data


def resolve_model(model: torch.nn.Module, path: str = "auto", depth: Any = "auto",
                  check: bool = True) -> Union[DecomposedModule, SnapshotModel]:
    """The module a trainer runs: a :class:`DecomposedModule` or a
    :class:`SnapshotModel` (not yet probed)."""
    if path not in PATHS:
        raise ModelInputError("path", f"is {path!r}.", f"use one of {PATHS}.")
    if isinstance(model, SnapshotModel):
        if path == "decomposed":
            raise ModelInputError("path", "is 'decomposed' but the model is a SnapshotModel.", "pass the inner module.")
        return model
    if path == "blackbox":
        if isinstance(model, DecomposedModule) and not hasattr(model, "module"):
            raise ModelInputError("path", f"is 'blackbox' but {type(model).__name__} is written for the decomposed path.",
                                  "use path='decomposed' (or 'auto').")
        inner = model.module if isinstance(model, DecomposedModule) else model
        return SnapshotModel(inner, depth=depth)
    try:
        return adapt(model, check=check)
    except (UnsupportedModelError, DecompositionMismatchError):
        # no decomposition, or one its own forward does not follow: the black-box path calls it unchanged
        if path == "decomposed":
            raise
        return SnapshotModel(model, depth=depth)


def prepare_snapshot_model(model: SnapshotModel, signal: Any, check: bool, edge_fields: tuple = ()) -> None:
    """Probe the state widths on the first non-empty snapshot and, with
    ``check``, verify the declared halo depth (:func:`check_halo`)."""
    counts = signal.nodes_per_snapshot
    nonempty = (counts > 0).nonzero().flatten()
    if nonempty.numel() == 0:
        raise ModelInputError("signal", "has no nodes.", "pass a signal with at least one node.")
    t = int(nonempty[0])
    a, b = int(signal.node_ptr[t]), int(signal.node_ptr[t + 1])
    x = signal.x[a:b]
    e0, e1 = int(signal.edge_ptr[t]), int(signal.edge_ptr[t + 1])
    fields = {k: signal.fields[k].values[e0:e1] for k in edge_fields}
    model.probe(x, edge_weight=signal.edge_weight is not None, edge_fields=fields)
    if check:
        check_halo(model, x, edge_weight=signal.edge_weight is not None, edge_fields=fields)


def edge_fields_of(model: SnapshotModel, signal: Any) -> tuple:
    """The edge-level signal fields the model's call reads (PyGT's LRGCN:
    ``edge_type``; a user's module gets the edge weight as its third argument)."""
    if model.spec.name == "LRGCN":
        f = signal.fields.get("edge_type")
        if f is None or f.level != "edge":
            raise ModelInputError("edge_type", "is not an edge-level field of the signal; LRGCN takes relation ids per edge.",
                                  "give the signal edge_type=[E_t] (integers) per snapshot.")
        return ("edge_type",)
    return ()


def partition_for_model(model: torch.nn.Module, signal: Any, num_parts: int, scheme: str = "auto", *,
                        path: str = "auto", depth: Any = "auto", seed: int = 0, bytes_per_element: int = 4,
                        **opts: Any) -> Any:
    r"""A partition of ``signal`` into ``num_parts`` for the path ``model``
    takes (:func:`resolve_model`). ``scheme="auto"`` compares the candidates
    on that path's real costs: the decomposed model's dependency pattern, or
    on the black-box path the halo depth and state widths the module's probe
    finds (:class:`~pyg_dynscale.partition.schemes.auto.BlackBoxSpec`).
    Other schemes get the pattern PGC weighs edges with (the black-box
    module's equivalent one). ``opts`` go to the scheme (``auto``: ``cost=``,
    ``candidates=``)."""
    # the partitioning algorithms load on first use (a training process that is handed a partition never needs them)
    from ..partition import partition

    signal = as_signal(signal)
    pattern, spec = model_pattern(model, signal, path=path, depth=depth, bytes_per_element=bytes_per_element)
    if spec is not None and scheme == "auto":
        return partition(signal, "auto", num_parts, None, seed=seed, blackbox=spec, **opts)
    return partition(signal, scheme, num_parts, pattern, seed=seed, **opts)


def model_pattern(model: torch.nn.Module, signal: Any, *, path: str = "auto", depth: Any = "auto",
                  bytes_per_element: int = 4, check: bool = False) -> tuple:
    r"""The dependency pattern a partition of ``signal`` for ``model`` is
    made for, on the path the model takes (:func:`resolve_model`; ``check``:
    run the decomposition's self-check, as the trainers do).

    Returns:
        ``(pattern, spec)``: on the decomposed path the model's own
        :meth:`~pyg_dynscale.nn.DecomposedModule.dependency_pattern` and
        ``spec=None``; on the black-box path the
        :class:`~pyg_dynscale.partition.schemes.auto.BlackBoxSpec` its
        probe finds (halo depth, state widths) and the pattern with its bytes
        per cut edge (PGC's edge weights).
    """
    from ..partition.schemes.auto import BlackBoxSpec

    signal = as_signal(signal)
    resolved = resolve_model(model, path, depth, check=check)
    if isinstance(resolved, SnapshotModel):
        prepare_snapshot_model(resolved, signal, False, edge_fields_of(resolved, signal))
        spec = BlackBoxSpec(resolved.depth, tuple(resolved.state_widths), int(signal.num_node_features),
                            bytes_per_element)
        return spec.pattern(), spec
    return resolved.dependency_pattern(bytes_per_element=bytes_per_element), None
