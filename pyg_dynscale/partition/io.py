"""Versioned save/load of a :class:`Partition` without arbitrary unpickling.

Same scheme as :mod:`pyg_dynscale.data.io`: a ``torch.save`` archive of a dict
holding only tensors, strings, numbers, lists and dicts, read back with
``torch.load(weights_only=True)``; a format tag, a version, a SHA-256 checksum
over the tensors and metadata, and the fingerprint of the signal the partition
was made for are checked on load.
"""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Optional

import torch

from .._archive import read_archive
from ..data.io import tensor_checksum
from ..errors import PartitionError, PartitionFormatError
from .partition import Partition

if TYPE_CHECKING:  # pragma: no cover
    from ..data.signal import DynamicGraphSignal

FORMAT_TAG = "pyg_dynscale.Partition"
FORMAT_VERSION = 1


def _checksum(tensors: dict, header: dict) -> str:
    h = hashlib.sha256()
    h.update(tensor_checksum(tensors).encode())
    h.update(json.dumps(header, sort_keys=True, default=str).encode())
    return h.hexdigest()


def _jsonable(meta: dict) -> dict:
    try:  # meta must survive a weights_only load: plain JSON types only
        return json.loads(json.dumps(meta))
    except (TypeError, ValueError) as exc:
        raise PartitionError("meta", f"holds a value that is not JSON-serializable ({exc}).",
                             "Keep Partition.meta to str/int/float/bool/list/dict values.") from None


def save_partition(partition: Partition, path: str) -> None:
    """Write ``partition`` to ``path`` (``torch.save`` of plain types only)."""
    partition.validate()
    tensors = {"owner": partition.owner.detach().cpu(),
               "time_owner": None if partition.time_owner is None else partition.time_owner.detach().cpu(),
               "chunk": None if partition.chunk is None else partition.chunk.detach().cpu()}
    header = {"scheme": partition.scheme, "num_parts": int(partition.num_parts),
              "fingerprint": partition.fingerprint, "seconds": float(partition.seconds),
              "meta": _jsonable(partition.meta)}
    payload = {"format": FORMAT_TAG, "version": FORMAT_VERSION, "header": header, "tensors": tensors,
               "checksum": _checksum(tensors, header)}
    torch.save(payload, path)


def load_partition(path: str, signal: Optional["DynamicGraphSignal"] = None) -> Partition:
    """Read a partition written by :func:`save_partition`.

    Args:
        signal: if given, the partition must have been made for it (same
            fingerprint and node count).

    Raises:
        PartitionFormatError: not a partition file, unknown version, or a
            corrupt/truncated file (checksum mismatch).
        PartitionError: made for another signal.
    """
    payload: Any = read_archive(path, tag=FORMAT_TAG, version=FORMAT_VERSION, what="partition",
                                error=PartitionFormatError, remedy="Re-create it with save_partition().")
    try:
        header, tensors = payload["header"], payload["tensors"]
        ok = payload["checksum"] == _checksum(tensors, header)
    except Exception as exc:
        raise PartitionFormatError(f"{path}: damaged partition file ({type(exc).__name__}: {exc}).") from None
    if not ok:
        raise PartitionFormatError(f"{path}: checksum mismatch, the file is corrupt. Re-create it with save_partition().")
    try:
        p = Partition(header["scheme"], int(header["num_parts"]), tensors["owner"], tensors.get("time_owner"),
                      tensors.get("chunk"), header["fingerprint"], float(header["seconds"]), dict(header["meta"]))
    except PartitionError as exc:
        raise PartitionFormatError(f"{path}: inconsistent partition file: {exc}") from None
    if signal is not None:
        p.check_signal(signal)
    return p
