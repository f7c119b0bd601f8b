"""Versioned save/load of :class:`DynamicGraphSignal` without arbitrary unpickling.

The file is a ``torch.save`` archive of a dict holding only tensors, strings and
ints, read back with ``torch.load(weights_only=True)``, which refuses any other
object. A format tag, a version and a SHA-256 checksum of the tensors are
checked on load.

Versions (:data:`READ_VERSIONS` are read, :data:`FORMAT_VERSION` written):

* **1**: tensors ``node_id``, ``node_ptr``, ``edge_index`` ``[2, sum_t E_t]``,
  ``edge_ptr``, ``edge_weight`` and ``field.<name>.values`` / ``.ptr``.
* **2**: the tensors of version 1 for edges stored per snapshot; for a
  static graph stored once, ``static_edge_index`` ``[2, E]`` and
  ``static_edge_weight`` ``[E]`` (the one list every snapshot shares,
  :attr:`DynamicGraphSignal.static_edge_index`) in place of ``edge_index``,
  ``edge_ptr`` and ``edge_weight``. The names are covered by the checksum, so
  the layout cannot be changed without the file being refused. Saving a
  static graph never builds its :math:`T`-fold expansion. ``node_id`` is
  written in full in both versions; ids that are ``0 .. |V_t|-1`` in every
  snapshot are made implicit again on load
  (:attr:`DynamicGraphSignal.local_ids`).
"""
from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Any, Optional, Union

import torch

from .._archive import read_archive
from ..errors import SignalFormatError
from .fields import SnapshotField

if TYPE_CHECKING:  # pragma: no cover
    from .signal import DynamicGraphSignal

FORMAT_TAG = "pyg_dynscale.DynamicGraphSignal"
#: the version :func:`save_signal` writes
FORMAT_VERSION = 2
#: the versions :func:`load_signal` reads
READ_VERSIONS = (1, 2)


def tensor_checksum(tensors: dict[str, Optional[torch.Tensor]]) -> str:
    """SHA-256 over names, dtypes, shapes and bytes of the given tensors."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        h.update(name.encode())
        if t is None:
            h.update(b"<none>")
            continue
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}{list(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def save_signal(signal: "DynamicGraphSignal", path: str) -> None:
    """Write ``signal`` to ``path`` in format :data:`FORMAT_VERSION` (a static
    graph as its one edge list)."""
    static = signal.is_static
    # implicit local ids are written out (readers of the raw payload find node_id in every file) without being
    # kept on the signal; load_signal makes them implicit again
    tensors: dict[str, Optional[torch.Tensor]] = {"node_id": signal._ids_for_reading(), "node_ptr": signal.node_ptr}
    if static:
        tensors.update(static_edge_index=signal.static_edge_index, static_edge_weight=signal.static_edge_weight)
    else:
        tensors.update(edge_index=signal.edge_index, edge_ptr=signal.edge_ptr, edge_weight=signal.edge_weight)
    meta: dict[str, Any] = {}
    for name, f in signal.fields.items():
        tensors[f"field.{name}.values"] = f.values
        if f.ptr is not None:
            tensors[f"field.{name}.ptr"] = f.ptr
        meta[name] = {"level": f.level, "cat_dim": f.cat_dim}
    payload = {
        "format": FORMAT_TAG,
        "version": FORMAT_VERSION,
        "num_vertices": int(signal.num_vertices),
        "fields": meta,
        "tensors": {k: (v.detach().cpu() if v is not None else None) for k, v in tensors.items()},
        "checksum": tensor_checksum(tensors),
    }
    torch.save(payload, path)


def edge_storage(tensors: dict[str, Any]) -> Optional[tuple]:
    """``(edge_index, edge_ptr, edge_weight)`` of a file's ``tensors`` for
    :meth:`DynamicGraphSignal.from_storage`, either version: a static graph's
    one list with ``edge_ptr=None`` (version 2), or the edges per snapshot;
    ``None`` when the file holds neither (for readers of the raw payload, e.g.
    a memory-mapped one)."""
    if "static_edge_index" in tensors:  # version 2, a static graph: its one list
        return tensors["static_edge_index"], None, tensors.get("static_edge_weight")
    if "edge_index" in tensors and "edge_ptr" in tensors:  # edges per snapshot (versions 1 and 2)
        return tensors["edge_index"], tensors["edge_ptr"], tensors.get("edge_weight")
    return None


def load_signal(path: str, cls: type, map_location: Union[str, torch.device, None] = "cpu") -> "DynamicGraphSignal":
    """Read a file written by :func:`save_signal` into a ``cls``
    (:meth:`DynamicGraphSignal.load` is the public entry point)."""
    if os.path.isdir(path):  # a store directory written in chunks (data/mapped.py, part B)
        from .mapped import load_signal_store
        return load_signal_store(path, cls)
    payload = read_archive(
        path, tag=FORMAT_TAG, version=READ_VERSIONS, what="signal", error=SignalFormatError,
        remedy="Re-create it with DynamicGraphSignal.save().", map_location=map_location,
    )
    tensors = payload["tensors"]
    if tensor_checksum(tensors) != payload.get("checksum"):
        raise SignalFormatError(f"{path}: checksum mismatch, the file is corrupt. Re-create it with DynamicGraphSignal.save().")
    fields = {}
    for name, meta in payload["fields"].items():
        fields[name] = SnapshotField(meta["level"], tensors[f"field.{name}.values"], tensors.get(f"field.{name}.ptr"), int(meta["cat_dim"]))
    edges = edge_storage(tensors)
    if edges is None:
        raise SignalFormatError(f"{path}: no edge tensors, the file is corrupt. Re-create it with DynamicGraphSignal.save().")
    obj = cls.from_storage(tensors["node_id"], tensors["node_ptr"], *edges, fields, int(payload["num_vertices"]))
    obj._detect_local_ids()  # ids 0 .. |V_t|-1 in every snapshot: implicit, as the signal that was saved
    obj.validate(allow_nonfinite=True)
    return obj
