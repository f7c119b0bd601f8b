r"""What every rank checks at set-up, and how the ranks agree on it.

A distributed set-up fails cleanly only if every rank fails: a rank that
raises while the others enter a collective leaves them waiting until the
timeout. :func:`agree` is the one ``all_gather`` of a trainer's set-up: it
carries each rank's local error (then every rank raises: its own error, or
"failed on rank r") and a summary of what the rank was given (then every rank
raises if the summaries differ: another signal, partition, model, loss,
fusion, dtype, stale policy, device type or exchange).

The agreement and :func:`check_one_gpu_per_rank` are object collectives: they
run over the group's host (gloo) twin (:func:`~.groups.host_group`), never
over NCCL -- an object collective over NCCL stages its bytes on
``torch.cuda.current_device()`` (``cuda:0`` on a rank that has not bound its
GPU yet: two ranks on one GPU, which NCCL refuses with its own error instead
of ours) and reads them back. :func:`bind` makes the training GPU current
before the first NCCL collective.
"""
from __future__ import annotations

import hashlib
import json
import socket
from typing import Any, Optional, Sequence, Union

import torch
import torch.distributed as dist

from ..errors import DecompositionMismatchError, DynScaleError, ModelInputError, PartitionError
from .groups import bind_device, device_backend_type, group_backend, host_group

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


def resolve_device(modules: Sequence[Optional[torch.nn.Module]], device: Union[str, torch.device, None],
                   group: Optional[Any] = None) -> tuple[torch.device, torch.dtype]:
    """The training device (default: the parameters') and dtype; the modules
    must already be there, and a CUDA device must exist."""
    params = [p for m in modules if m is not None for p in m.parameters()]
    devs = {p.device for p in params}
    if len(devs) > 1:
        raise ModelInputError("model", f"has parameters on several devices {sorted(map(str, devs))}.",
                              "move the model and the head to one device.")
    dev = torch.device(device) if device is not None else (next(iter(devs)) if devs else torch.device("cpu"))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelInputError("device", f"is {dev} but torch.cuda.is_available() is False (no GPU, or a "
                                  f"CPU-only torch build); this process group uses {dist.get_backend(group)}.",
                                  "train on the CPU (device='cpu') or on a machine with a GPU.")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    if devs and next(iter(devs)) != dev:
        raise ModelInputError("model", f"is on {next(iter(devs))} but training runs on {dev}.",
                              f"call model.to({str(dev)!r}) (and the head) first.")
    return dev, (params[0].dtype if params else torch.float32)


def bind(device: torch.device) -> None:
    """Make the training device this process's current device
    (:func:`~.groups.bind_device`: ``torch.cuda.set_device`` for a GPU) before
    any NCCL collective; a device that cannot be bound is a
    :class:`ModelInputError` (raised before the set-up agreement, which
    carries it to the other ranks)."""
    try:
        bind_device(device)
    except (RuntimeError, ValueError, AssertionError) as exc:  # torch's errors for a device it cannot select
        raise ModelInputError("device", f"is {device}, which this process cannot make its current device "
                              f"({type(exc).__name__}: {exc}).",
                              "give each rank an existing GPU, cuda:LOCAL_RANK (see torch.cuda.device_count()).") \
            from exc


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


def agree(error: Optional[DynScaleError], summary: Optional[dict], group: Optional[Any] = None) -> None:
    """One ``all_gather`` over ``group``'s host group (:func:`~.groups.host_group`:
    a world collective when it makes the gloo twin of an NCCL group): raise on
    every rank if any rank's set-up failed (``error``: this rank's; then
    ``summary`` is ``None``) or if the ranks' summaries differ."""
    mine = {"error": None if error is None else f"{type(error).__name__}: {error}", "summary": summary}
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=host_group(group))
    if error is not None:
        raise error
    failed = [(r, e["error"]) for r, e in enumerate(everyone) if e["error"] is not None]
    if failed:
        r, msg = failed[0]
        raise ModelInputError("set-up", f"failed on rank {r}: {msg}", "fix that rank's arguments; every rank stops.")
    for key in summary:
        vals = [e["summary"][key] for e in everyone]
        if len(set(vals)) > 1:
            bad = [r for r, v in enumerate(vals) if v != vals[0]]
            fix = ("put every rank's model on the same kind of device ('cuda:LOCAL_RANK' everywhere, or 'cpu')"
                   if key in ("device_type", "transport") else
                   "pass the same signal, partition, model, loss, fusion and dtype on every rank.")
            raise ModelInputError(key, f"differs between ranks (ranks {bad} disagree with rank 0: "
                                  f"{vals[bad[0]]!r} vs {vals[0]!r}).", fix)


def check_one_gpu_per_rank(device: torch.device, group: Optional[Any] = None) -> None:
    """NCCL refuses two ranks on one GPU: name the shared GPU on every rank
    (an ``all_gather`` over ``group``'s host group, before any NCCL
    collective: NCCL's own error would come first otherwise)."""
    gpus: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gpus, f"{socket.gethostname()}:{device}", group=host_group(group))
    if len(set(gpus)) < len(gpus):
        shared = sorted({g for g in gpus if gpus.count(g) > 1})
        raise ModelInputError("device", f"{shared[0]} is used by ranks "
                              f"{[r for r, g in enumerate(gpus) if g == shared[0]]}; NCCL needs one GPU per rank.",
                              "give each rank cuda:LOCAL_RANK, or share the GPU through a gloo group "
                              "(backend='staged', chosen automatically over gloo).")


def check_gpu_sharing(device: torch.device, group: Optional[Any] = None) -> None:
    """:func:`check_one_gpu_per_rank` where it matters: a GPU device on a
    backend that runs its collectives on that GPU (NCCL). Every trainer calls it
    after binding the device and before its first device collective, so two
    ranks on one GPU get this message on every rank, not NCCL's own error from
    inside the first collective. (Over gloo several ranks may share a GPU: the
    staged exchange.)"""
    if device.type != "cpu" and device_backend_type(group_backend(group)) == device.type:
        check_one_gpu_per_rank(device, group)
