r"""The options of :class:`~pyg_dynscale.ctdg.MemoryTrainer`, checked before anything is
built: the modules, the scalar options, the combinations it implements, and the options
that were positional before the one trainer surface (one release with a
:class:`DeprecationWarning`).
"""
from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import Tensor

from ..errors import ModelInputError, UnsupportedOptionError
from ..training.options import deprecated_positionals
from .microbatch import check_micro_batches

__all__ = ["LOSSES", "POSITIONAL", "check_combinations", "check_loss", "check_modules", "check_options",
           "legacy_positionals"]

#: what a ``TGNMemory`` has that the trainer uses
MEMORY_PARTS = ("msg_s_module", "msg_d_module", "aggr_module", "time_enc", "gru", "memory", "last_update", "num_nodes")
#: the options that were positional before the one trainer surface, in their old order, with their defaults
POSITIONAL = {"batch_size": 200, "lr": 1e-4, "num_neighbors": 10, "negatives": "uniform", "seed": 0,
              "parallelism": (1, 1, 1), "static_memory": None}
#: the spellings of the one loss implemented: BCE on the link logits (PyG's examples/tgn.py)
LOSSES = ("bce", "bce_with_logits", "binary_cross_entropy")


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelInputError(name, f"is {value!r}.", "use an integer >= 1.")
    return value


def _differs(value: object, default: object) -> bool:
    return value is not default and (isinstance(value, Tensor) or value != default)


def legacy_positionals(args: tuple, **given) -> tuple:
    """The values of :data:`POSITIONAL` with ``args`` (passed positionally, deprecated) in place:
    one :class:`DeprecationWarning`; an option given both ways (by keyword with another value
    than its default) is a :class:`TypeError`, as Python's own."""
    named = {k: v for k, v in given.items() if _differs(v, POSITIONAL[k])}
    given.update(deprecated_positionals("MemoryTrainer", tuple(POSITIONAL), args, named))
    return tuple(given[k] for k in POSITIONAL)


def check_loss(loss: object) -> str:
    """``loss``: the link BCE by one of its names (or ``torch.nn.BCEWithLogitsLoss`` as PyG's example builds it)."""
    if isinstance(loss, str) and loss.lower() in LOSSES:
        return "bce"
    plain = isinstance(loss, torch.nn.BCEWithLogitsLoss) and loss.reduction == "mean" and loss.weight is None \
        and loss.pos_weight is None
    if plain or loss is torch.nn.BCEWithLogitsLoss:
        return "bce"
    raise UnsupportedOptionError("loss", f"is {loss!r}: the event-stream trainer scores links with binary "
                                 "cross-entropy on the positive and negative logits only.", "loss='bce' (the default).")


def check_modules(model, memory, gnn, link_pred, data) -> tuple:
    """``(memory, gnn, link_pred)`` from ``model`` or the keywords, checked (and that ``data`` is given)."""
    if model is not None:
        for part in ("memory", "gnn", "link_pred"):
            if getattr(model, part, None) is None:
                raise ModelInputError(f"model.{part}", "is missing.",
                                      "give a model with memory, gnn and link_pred (e.g. pyg_dynscale.ctdg.TGN).")
        if any(x is not None for x in (memory, gnn, link_pred)):
            raise ModelInputError("model", "is given together with memory/gnn/link_pred.", "give one or the other.")
        memory, gnn, link_pred = model.memory, model.gnn, model.link_pred
    for name, mod in (("memory", memory), ("gnn", gnn), ("link_pred", link_pred)):
        if not isinstance(mod, torch.nn.Module):
            raise ModelInputError(name, f"is {type(mod).__name__}.",
                                  "give MemoryTrainer(model, data) or MemoryTrainer(memory=, gnn=, link_pred=, data=).")
    missing = [p for p in MEMORY_PARTS if not hasattr(memory, p)]
    if missing:
        raise ModelInputError("memory", f"lacks {missing}: it is not a torch_geometric.nn.TGNMemory.",
                              "build the memory as PyG's examples/tgn.py does (TGNMemory).")
    if data is None:
        raise ModelInputError("data", "is missing.", "give the event stream as torch_geometric.data.TemporalData.")
    return memory, gnn, link_pred


def check_options(*, negatives, loss, batch_size, num_neighbors, mrr_negatives, lr, seed, gradient_sync,
                  overlap_aggregation) -> str:
    """The scalar options, each on its own; returns the loss's name."""
    if negatives != "uniform":
        raise UnsupportedOptionError("negatives", f"is {negatives!r}: only uniform negatives are implemented.",
                                     "negatives='uniform' (PyG's example's draw).")
    name = check_loss(loss)
    _positive_int("batch_size", batch_size)
    _positive_int("num_neighbors", num_neighbors)
    if isinstance(mrr_negatives, bool) or not isinstance(mrr_negatives, int) or mrr_negatives < 0:
        raise ModelInputError("mrr_negatives", f"is {mrr_negatives!r}.", "use an integer >= 0.")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ModelInputError("lr", f"is {lr!r}.", "use a positive learning rate.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ModelInputError("seed", f"is {seed!r}.", "use an integer, or None.")
    if gradient_sync not in ("sync", "delayed"):
        raise ModelInputError("gradient_sync", f"is {gradient_sync!r}.", "use 'sync' or 'delayed'.")
    if not isinstance(overlap_aggregation, bool):
        raise ModelInputError("overlap_aggregation", f"is {overlap_aggregation!r}.", "use True or False.")
    return name


def check_combinations(parallelism: tuple, world_size: int, *, memory_placement: str, micro_batches,
                       prefetch: bool, memory_service: bool, overlap_aggregation: bool) -> Union[int, str]:
    """The combinations the trainer implements (the placement's own: :func:`~.partitioned_fetch.build_placement`);
    returns ``micro_batches`` checked."""
    _, j, k = parallelism
    micro_batches = check_micro_batches(micro_batches)
    if prefetch and micro_batches != 1:
        raise UnsupportedOptionError("prefetch", f"is True with micro_batches={micro_batches!r}: the "
                                     "prefetcher organises whole local batches' dispatches.",
                                     "prefetch=True with micro_batches=1, or prefetch=False.")
    if micro_batches != 1 and memory_placement != "sven":
        raise UnsupportedOptionError("micro_batches", f"is {micro_batches!r} with memory_placement="
                                     f"{memory_placement!r}: micro-batches overlap the partitioned dispatch.",
                                     "memory_placement='sven', or micro_batches=1.")
    if overlap_aggregation and memory_placement == "replicated":
        raise ModelInputError("overlap_aggregation", f"is True with memory_placement={memory_placement!r}, "
                              "which has no aggregation.", "use memory_placement='sven' or 'partitioned'.")
    one_copy = j == 1 and (k == 1 or world_size > 1)  # one memory copy per process, no epoch parallelism
    if memory_service and not one_copy:
        raise UnsupportedOptionError(
            "memory_service", f"is True with parallelism={parallelism!r}: the service serves one memory copy per "
            "process without epoch parallelism's snapshots.",
            "j = 1, and k > 1 only across processes; or memory_service=False.")
    if prefetch and not one_copy:
        raise UnsupportedOptionError(
            "prefetch", f"is True with parallelism={parallelism!r}: the prefetcher mirrors one memory copy's "
            "neighbour loader per process without epoch parallelism.",
            "j = 1, and k > 1 only across processes; or prefetch=False.")
    return micro_batches


#: the ``event_placement`` values of :class:`~pyg_dynscale.ctdg.MemoryTrainer`
EVENT_PLACEMENTS = ("auto", "whole", "per_rank")


def _per_rank_blocker(memory_placement: str, partition) -> Optional[tuple]:
    """``(option, message, fix)`` of the first option ``"per_rank"`` does not run with, or ``None``."""
    if memory_placement == "replicated":
        return ("event_placement", "is 'per_rank' with memory_placement='replicated': the neighbour index and the "
                "mailbox are held by the owners of a partitioned memory.",
                "memory_placement='partitioned' or 'sven', or event_placement='whole'.")
    if isinstance(partition, str) and partition == "flexbicut":
        return ("partition", "is 'flexbicut' with event_placement='per_rank': its pre-sampling walks the whole "
                "stream on every rank.", "give the owner tensor it computes (pyg-dynscale partition-events --out "
                "FILE), or 'range' / 'interval'; or event_placement='whole' (or 'auto', which picks it).")
    return None


def check_event_placement(event_placement: str, *, memory_placement: str, partition, prefetch: bool = False,
                          micro_batches=1, overlap_aggregation: bool = False, world_size: int = 1) -> str:
    """``event_placement`` checked and resolved: ``"auto"`` is ``"per_rank"`` for a partitioned
    memory (``"partitioned"`` / ``"sven"``) under a process group (``world_size > 1``) unless
    ``partition="flexbicut"``, else ``"whole"``; an explicit ``"per_rank"`` with a replicated memory
    or flexbicut is an :class:`~pyg_dynscale.errors.UnsupportedOptionError` naming the option.
    ``prefetch``, ``micro_batches`` and ``overlap_aggregation`` run with both (see
    :mod:`~pyg_dynscale.ctdg.rank_events`): the aggregation thread's collectives run on groups of
    their own, and the owners' index exchanges run on this thread before its dispatch and after it
    joins the aggregation."""
    if not isinstance(event_placement, str) or event_placement not in EVENT_PLACEMENTS:
        raise ModelInputError("event_placement", f"is {event_placement!r}.", f"use one of {list(EVENT_PLACEMENTS)}.")
    blocker = _per_rank_blocker(memory_placement, partition)
    if event_placement == "auto":
        return "per_rank" if blocker is None and world_size > 1 else "whole"
    if event_placement == "per_rank" and blocker is not None:
        raise UnsupportedOptionError(*blocker)
    return event_placement
