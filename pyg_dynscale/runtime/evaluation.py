r"""Evaluation of a later window with the state continued from the training window.

A recurrent model trained on snapshots :math:`1..a` and evaluated on the
test snapshots :math:`a+1..T` should start each vertex from the state it
reached at the end of the training window, as PyGT's loop that runs the
training snapshots and then the test snapshots carrying ``h`` does:

.. math::
    \mathbf{h}_{v}^{(a+1)\text{ in}} = \mathbf{h}_{v}^{(t_v)}, \qquad
    t_v = \max\{t \le a : v \in V_t\}

(zeros for a vertex the training window never saw). Both trainers compute it
as one eval-mode pass over the joined signal (:func:`joined_window`: the
training window followed by the evaluated one, with the trained parameters
and the training window's ``h0``), whose loss and outputs count the
evaluated window's snapshots only
(:meth:`~pyg_dynscale.runtime.losses.SnapshotMean.from_snapshot`). Every
model kind continues this way: a recurrent time encoder its state, an
attention time encoder (DySAT) its earlier appearances, a black-box cell its
state rows; across ranks the state crosses from the rank that owns a
vertex's last training node to the one that owns its first evaluated node
through the runtime's own temporal exchange.

The states are recomputed with the current parameters rather than kept from
the last training epoch: that epoch computed them with the parameters
before its optimizer step (and in training mode).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..data.concat import concat_signals
from ..errors import ModelInputError

__all__ = ["joined_window", "carry_initial_state", "check_positions"]


def joined_window(train: Any, later: Any, continue_state: bool) -> tuple[Any, int]:
    """``(signal, first)``: the signal an evaluation of ``later`` runs over and
    the index of its first evaluated snapshot -- ``train`` followed by
    ``later`` and ``train``'s snapshot count with ``continue_state``, else
    ``later`` alone and 0."""
    if not isinstance(continue_state, bool):
        raise ModelInputError("continue_state", f"is {continue_state!r}.", "pass True or False.")
    if not continue_state:
        return later, 0
    if later.device != train.device:
        later = later.to(train.device)
    return concat_signals(train, later), train.num_snapshots


def carry_initial_state(h0: Any, train_sequence_vertex: Tensor, joined_sequence_vertex: Tensor,
                        num_vertices: int) -> Any:
    """The training window's ``h0`` (``[S_train, W]``, row ``s`` for vertex
    ``train_sequence_vertex[s]``; or a tuple of such, one per state
    component) as the ``h0`` of the joined signal's sequences (zeros for
    vertices that first appear after the training window); ``None`` stays
    ``None``."""
    if h0 is None:
        return None
    if isinstance(h0, (tuple, list)):
        return tuple(carry_initial_state(h, train_sequence_vertex, joined_sequence_vertex, num_vertices) for h in h0)
    table = h0.new_zeros(num_vertices, h0.shape[1]).index_copy(0, train_sequence_vertex.to(h0.device), h0)
    return table.index_select(0, joined_sequence_vertex.to(h0.device))


def check_positions(model: Any, joined: Any) -> None:
    """Raise :class:`ModelInputError` when a model with a table of snapshot
    positions (DySAT's ``num_time_steps``) has fewer positions than the
    joined signal has snapshots."""
    steps = getattr(model, "num_time_steps", None)
    if isinstance(steps, int) and joined.num_snapshots > steps:
        raise ModelInputError(
            "signal", f"continues the training window to {joined.num_snapshots} snapshots, but "
            f"{type(model).__name__} has position embeddings for {steps} (num_time_steps).",
            f"build it with num_time_steps >= {joined.num_snapshots}, or pass continue_state=False.")
