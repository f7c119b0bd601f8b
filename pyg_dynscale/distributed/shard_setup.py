r"""What :meth:`DistributedTrainer.from_shards
<pyg_dynscale.distributed.DistributedTrainer.from_shards>` checks and reads
at set-up in place of the whole signal and partition: the options a rank
holding only its part can run, the model's dependency pattern against the
one the shards were cut for, the targets of its rows, and the summary the
ranks compare (:func:`~pyg_dynscale.training.ranks.agree`).
"""
from __future__ import annotations

import types
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from ..errors import ModelInputError, ShardError, UnsupportedOptionError
from ..runtime.losses import Targets
from .setup_checks import check_pattern, param_digest

__all__ = ["check_shard_options", "check_shard_path", "check_shard_pattern", "shard_targets", "shard_summary", "check_sequences"]

_WHOLE = "build the trainer from the signal and partition (DistributedTrainer(model, signal, partition, ...))"


def check_shard_options(model: Any, loss: str, options: dict) -> None:
    """Refuse the options that need the whole signal (the same outcome on
    every rank: raised before any collective)."""
    fusion = options.get("fusion", "full")
    if not (isinstance(fusion, str) and fusion == "full"):
        raise UnsupportedOptionError("fusion", f"is {fusion!r} with from_shards; snapshot groups and memory "
                                     "budgets are planned over every rank's rows.", f"fusion='full', or {_WHOLE}.")
    if options.get("fusion_groups", "snapshots") != "snapshots":
        raise UnsupportedOptionError("fusion_groups", f"is {options['fusion_groups']!r} with from_shards.",
                                     f"leave fusion_groups at its default, or {_WHOLE}.")
    if options.get("checkpoint_every") is not None:
        raise UnsupportedOptionError("checkpoint_every", f"is {options['checkpoint_every']!r} with from_shards; "
                                     "checkpointed windows plan each window over the whole signal.",
                                     f"checkpoint_every=None, or {_WHOLE}.")
    if options.get("stale") not in (None, "off"):
        raise UnsupportedOptionError("stale", f"is {options['stale']!r} with from_shards.",
                                     f"stale=None (exact), or {_WHOLE}.")


def check_shard_path(model: Any, path: str, shard: Any, loss: str, h0: Any) -> None:
    """The model must run on the path the shards were cut for (decomposed
    shards hold structure and time sets, black-box shards local subgraphs),
    and a black-box shard set runs node losses without ``h0`` (raised on
    every rank alike: the model, the options and ``meta.json`` are the same)."""
    cut = "blackbox" if shard.meta.get("path") == "blackbox" else "decomposed"
    if path != cut:
        how = ("write_shards(signal, partition, model.dependency_pattern(...), DIR)" if path == "decomposed"
               else "write_shards(signal, partition, <the per-snapshot module>, DIR)")
        raise UnsupportedOptionError("path", f"is {path!r} for {type(model).__name__}, but the shards were cut for the "
                                     f"{cut} path.", f"write the shards for this path ({how}), or pass "
                                     f"path={cut!r} if the model runs on it.")
    if cut != "blackbox":
        return
    if loss == "bce_link":
        raise UnsupportedOptionError("loss", "is 'bce_link' with black-box shards; they hold node targets, not the "
                                     "labelled pairs and their readout exchange.", f"a node loss, or {_WHOLE}.")
    if h0 is not None:
        raise UnsupportedOptionError("h0", "is given with black-box shards; the rows of a first appearance are "
                                     "found on the whole signal's temporal sequences.", f"h0=None (zeros), or {_WHOLE}.")


def check_shard_pattern(model: Any, shard: Any, dtype: torch.dtype, input_halo: str) -> Any:
    """The model's dependency pattern (element size of ``dtype``), which
    must be the one the shards were cut for (widths, kinds and element size:
    the plan's rows and bytes depend on all of them)."""
    meta = shard.meta
    pattern = check_pattern(model, types.SimpleNamespace(meta={}), dtype)
    mine = pattern.to_dict()
    if mine != meta["pattern"]:
        raise ShardError(f"the shards were cut for the dependency pattern {meta['pattern']}, but the model "
                         f"({type(model).__name__}, {dtype}) declares {mine}. Write the shards with "
                         "model.dependency_pattern(bytes_per_element=...) of this model and dtype.")
    if input_halo != meta["input_halo"]:
        raise ShardError(f"the shards were cut with input_halo={meta['input_halo']!r} but the trainer was given "
                         f"input_halo={input_halo!r}. Pass input_halo={meta['input_halo']!r}, or re-write the "
                         "shards.")
    return pattern


def shard_targets(shard: Any, loss: str, target: str) -> Targets:
    """The node targets (field ``target``) of the shard's rows, or its
    labelled pairs (``bce_link``)."""
    if loss == "bce_link":
        p = shard.pairs
        if p is None:
            raise ModelInputError("loss", "is 'bce_link' but the shards hold no labelled pairs.",
                                  "write the shards with write_shards(..., readout_width=<the head's output width>).")
        return Targets(label_src=p["src"], label_dst=p["dst"], label_time=p["time"], label=p["label"])
    values: Optional[Tensor] = shard.fields.get(target)
    if values is None:
        raise ModelInputError(target, f"is not a node-level field of the shards (they hold {sorted(shard.fields)}).",
                              f"write the shards from a signal with node targets '{target}' for loss={loss!r}.")
    return Targets(target=values)


def shard_summary(shard: Any, modules: Sequence[Optional[torch.nn.Module]], *, loss: str, fusion: str,
                  dtype: torch.dtype, stale: str, device: torch.device, transport: Any) -> dict:
    """What this rank was given, in comparable form (as
    :func:`.setup_checks.setup_summary`, with the shard set's fingerprints)."""
    meta = shard.meta
    return {"signal": meta["signal"], "partition": meta["partition"], "shards": meta["set"],
            "scheme": meta["scheme"], "params": param_digest(modules), "loss": str(loss), "fusion": fusion,
            "dtype": str(dtype), "stale": stale, "device_type": device.type, "transport": transport.name}


def check_sequences(h0: Tensor, num_sequences: int, width: int) -> None:
    """``h0`` must be ``[S, width]``, one row per temporal sequence of the whole signal."""
    if not isinstance(h0, Tensor) or h0.dim() != 2 or tuple(h0.shape) != (num_sequences, width):
        shape = list(h0.shape) if isinstance(h0, Tensor) else type(h0).__name__
        raise ModelInputError("h0", f"has shape {shape} but the signal has {num_sequences} temporal sequences and "
                              f"the state width is {width}.", f"pass a [{num_sequences}, {width}] tensor or None.")
