"""Versioned save/load of :class:`DynamicGraphSignal` without arbitrary unpickling.

The file is a ``torch.save`` archive of a dict holding only tensors, strings and
ints, read back with ``torch.load(weights_only=True)``, which refuses any other
object. A format tag, a version and a SHA-256 checksum of the tensors are
checked on load.
"""
from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Optional, Union

import torch

from .._archive import read_archive
from ..errors import SignalFormatError
from .fields import SnapshotField

if TYPE_CHECKING:  # pragma: no cover
    from .signal import DynamicGraphSignal

FORMAT_TAG = "pyg_dynscale.DynamicGraphSignal"
FORMAT_VERSION = 1


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
    tensors: dict[str, Optional[torch.Tensor]] = {
        "node_id": signal.node_id, "node_ptr": signal.node_ptr,
        "edge_index": signal.edge_index, "edge_ptr": signal.edge_ptr,
        "edge_weight": signal.edge_weight,
    }
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


def load_signal(path: str, cls: type, map_location: Union[str, torch.device, None] = "cpu") -> "DynamicGraphSignal":
    """Read a file written by :func:`save_signal` into a ``cls``
    (:meth:`DynamicGraphSignal.load` is the public entry point)."""
    payload = read_archive(
        path, tag=FORMAT_TAG, version=FORMAT_VERSION, what="signal", error=SignalFormatError,
        remedy="Re-create it with DynamicGraphSignal.save().", map_location=map_location,
    )
    tensors = payload["tensors"]
    if tensor_checksum(tensors) != payload.get("checksum"):
        raise SignalFormatError(f"{path}: checksum mismatch, the file is corrupt. Re-create it with DynamicGraphSignal.save().")
    fields = {}
    for name, meta in payload["fields"].items():
        fields[name] = SnapshotField(meta["level"], tensors[f"field.{name}.values"], tensors.get(f"field.{name}.ptr"), int(meta["cat_dim"]))
    obj = cls.from_storage(
        tensors["node_id"], tensors["node_ptr"], tensors["edge_index"], tensors["edge_ptr"],
        tensors["edge_weight"], fields, int(payload["num_vertices"]),
    )
    obj.validate(allow_nonfinite=True)
    return obj
