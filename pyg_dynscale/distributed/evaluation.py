r"""The distributed evaluation of a later window, the state continued.

:func:`later_window_evaluator` builds what
:meth:`DistributedTrainer.evaluate(signal, partition) <pyg_dynscale.distributed.DistributedTrainer.evaluate>`
runs: a trainer of the same class, sharing the model and head, over the
training signal followed by the evaluated window
(:func:`~pyg_dynscale.runtime.evaluation.joined_window`), partitioned by the
training partition followed by the window's own
(:func:`~pyg_dynscale.partition.concat.concat_partitions`): every rank keeps
the rows it trained, and the state a vertex ends the training window with
goes to the rank that owns its first evaluated node through the runtime's
temporal exchange (decomposed path) or state exchange (black-box path),
counted and planned like any other. Its loss counts the evaluated window's
snapshots only, with global normalizers, so the result equals
:meth:`FusedTrainer.evaluate(signal) <pyg_dynscale.runtime.FusedTrainer.evaluate>`
(tested in float64). Stale caching is off in it (evaluation is exact). It
makes no process group: its host values go over the training trainer's
host group (:func:`~.groups.host_group` returns the one made at training
set-up), so the ranks of one subgroup can evaluate while the others do not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from ..data.tensor_maps import map_tensors, to_device
from ..errors import ModelInputError
from ..partition.concat import concat_partitions
from ..runtime.evaluation import carry_initial_state, check_positions, joined_window
from ..runtime.metrics import link_metrics
from ..runtime.paths import as_signal
from ..training import Metrics

__all__ = ["LaterWindow", "later_window_evaluator", "window_link_scores", "summed_metrics", "gathered_link_metrics"]


@dataclass
class LaterWindow:
    """A built evaluator of a later window.

    Attributes:
        trainer: the trainer over the joined (or the window's own) signal.
        first_snapshot: index of the window's first snapshot in it.
        first_node: gid of the window's first vertex-time node in it.
        pairs (Tensor, optional): ``[L_r]`` bool on the device, the labelled
            pairs of this rank that lie in the window (``bce_link``).
    """

    trainer: Any
    first_snapshot: int
    first_node: int
    pairs: Optional[Tensor] = None


def later_window_evaluator(trainer: Any, signal: Any, partition: Any, continue_state: bool) -> LaterWindow:
    """Build the evaluator of ``signal`` (partitioned by ``partition``, into
    the trainer's world size) for ``trainer``; a collective: every rank calls
    it with the same arguments."""
    if partition is None:
        raise ModelInputError("partition", "is None: the evaluated window needs its own partition.",
                              "pass partition(signal, scheme, world_size, pattern) of the later window, as for "
                              "training.")
    later = as_signal(signal)
    later = later.to("cpu") if later.device.type != "cpu" else later
    joined, first = joined_window(trainer.signal, later, continue_state)
    opts = dict(trainer._options)
    h0 = opts.pop("h0")
    if first:
        check_positions(trainer.model, joined)
        part = concat_partitions(trainer.partition, partition)
        if h0 is not None:
            host = tuple(h.detach().cpu() for h in h0) if isinstance(h0, (tuple, list)) else h0.detach().cpu()
            h0 = carry_initial_state(host, trainer.signal.supergraph().sequence_vertex,
                                     joined.supergraph().sequence_vertex, joined.num_vertices)
    else:
        part, h0 = partition, None
    ev = type(trainer)(trainer.model, joined, part, head=trainer.head, loss=trainer.loss_kind, device=trainer.device,
                       path=trainer.path, check=False, h0=h0, **opts)
    pairs = None
    if first:
        host = ev._host_targets
        host.mean = host.mean.from_snapshot(first)
        ev.targets = map_tensors(host, to_device(ev.device))
        if trainer.loss_kind == "bce_link":
            pairs = (host.mean.seg >= first).to(ev.device)
    return LaterWindow(ev, first, int(joined.node_ptr[first]), pairs)


@torch.no_grad()
def window_link_scores(window: LaterWindow) -> tuple[Tensor, Tensor]:
    """This rank's logits and labels of the window's labelled pairs."""
    logits, labels = window.trainer.link_scores()
    if window.pairs is None:
        return logits, labels
    return logits[window.pairs], labels[window.pairs]


def summed_metrics(parts: dict[str, Tensor], transport: Any) -> Metrics:
    r"""The metrics whose rank shares sum to the global value (each rank's
    :class:`~pyg_dynscale.runtime.losses.SnapshotMean` has global
    normalizers), summed over ranks in one all-reduce of ``[len(parts)]``
    (a collective)."""
    names = list(parts)
    total = transport.all_reduce(torch.stack([parts[k].detach().reshape(()) for k in names]))
    return Metrics(zip(names, total.tolist()))


def gathered_link_metrics(logits: Tensor, labels: Tensor, pair_ids: Tensor, num_pairs: int,
                          keep: Optional[Tensor], transport: Any) -> dict[str, float]:
    r"""AUC and AP of every rank's labelled pairs (a collective): each rank
    writes its ``[L_r]`` ``logits`` and ``labels`` (the ``keep`` ones, a
    later window's) at its pairs' global indices ``pair_ids`` of a
    ``[3, num_pairs]`` table, zero elsewhere, with a row marking the pairs it
    wrote; one all-reduce sums the tables (each pair is on one rank: exact)
    and the marked pairs are scored on every rank
    (:func:`~pyg_dynscale.runtime.metrics.link_metrics`)."""
    if keep is not None:
        logits, labels, pair_ids = logits[keep], labels[keep], pair_ids[keep]
    table = logits.new_zeros(3, num_pairs)
    table[0].index_copy_(0, pair_ids, logits.detach())
    table[1].index_copy_(0, pair_ids, labels.to(logits.dtype))
    table[2].index_fill_(0, pair_ids, 1.0)
    table = transport.all_reduce(table)
    present = table[2] > 0
    return link_metrics(table[0][present], table[1][present])
