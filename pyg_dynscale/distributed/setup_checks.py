r"""What a snapshot trainer (:class:`~pyg_dynscale.distributed.DistributedTrainer`)
checks at set-up: the decomposed model's dependency pattern against the
partition's (:func:`check_pattern`), and the summary of what a rank was given
that the ranks compare (:func:`setup_summary`, carried by
:func:`~pyg_dynscale.training.ranks.agree`).

The rank-generic checks (the device, binding it, the agreement, one GPU per
rank) live in :mod:`pyg_dynscale.training.ranks`; they are re-exported here.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Optional, Sequence

import torch

from ..errors import DecompositionMismatchError, ModelInputError, PartitionError
from ..training.ranks import agree, bind, check_gpu_sharing, check_one_gpu_per_rank, resolve_device

__all__ = ["resolve_device", "bind", "check_pattern", "setup_summary", "agree", "check_one_gpu_per_rank",
           "param_digest", "check_gpu_sharing"]


def param_digest(modules: Sequence[Optional[torch.nn.Module]]) -> str:
    """SHA-256 of the parameter and buffer names, shapes and dtypes."""
    h = hashlib.sha256()
    for m in modules:
        if m is None:
            continue
        for name, t in m.state_dict().items():
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
    return h.hexdigest()


def check_pattern(model: Any, partition: Any, dtype: torch.dtype) -> Any:
    """The decomposed model's dependency pattern, checked against the one a
    PGC partition was made for and against the model's blocks."""
    if getattr(model, "window", 1) != 1:
        raise ModelInputError("model.window", f"is {model.window}; the distributed runtime needs window=1 "
                              "(stacked windows put a recurrence inside one snapshot that a partition may split).",
                              "use window=1 (one snapshot per PyGT call).")
    pattern = model.dependency_pattern(bytes_per_element=torch.empty((), dtype=dtype).element_size())
    declared = partition.meta.get("pattern") if isinstance(partition.meta, dict) else None
    if declared:
        theirs = json.loads(declared)["blocks"]
        if theirs != pattern.to_dict()["blocks"]:
            raise PartitionError("partition.meta['pattern']", f"the partition was made for the dependency pattern "
                                 f"{theirs}, but the model declares {pattern.to_dict()['blocks']}.",
                                 "partition with model.dependency_pattern() of this model.")
    kinds = [b.time_kind for b in pattern.blocks]
    if model.num_blocks != len(kinds) or model.time_kind not in kinds:
        raise DecompositionMismatchError(
            f"{type(model).__name__} has {model.num_blocks} block(s) of time kind "
            f"{model.time_kind!r} but its dependency pattern declares {kinds}.")
    return pattern


def setup_summary(signal: Any, partition: Any, modules: Sequence[Optional[torch.nn.Module]], *, loss: str,
                  fusion: str, dtype: torch.dtype, stale: str, device: torch.device, transport: Any) -> dict:
    """What this rank was given, in comparable form."""
    h = hashlib.sha256()
    h.update(partition.owner.numpy().tobytes())
    if partition.time_owner is not None:
        h.update(partition.time_owner.numpy().tobytes())
    return {"signal": signal.fingerprint(), "partition": h.hexdigest(), "scheme": partition.scheme,
            "params": param_digest(modules), "loss": str(loss), "fusion": fusion, "dtype": str(dtype),
            "stale": stale, "device_type": device.type, "transport": transport.name}
