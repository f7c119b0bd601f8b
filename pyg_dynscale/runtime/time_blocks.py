r"""Gradient checkpointing of the decomposed path over blocks of snapshots.

SC'21 §3.1: training over many snapshots keeps every snapshot's activations
for the backward. :class:`TimeBlockCheckpoint` runs a
:class:`~pyg_dynscale.nn.DecomposedModule` over windows of :math:`B`
consecutive snapshots, each under :func:`torch.utils.checkpoint.checkpoint`:
a window is fused as usual (structure encoder over its snapshots, time
encoder over its pieces of sequences), starting each sequence from the state
its vertex ended the previous windows with -- one table of
``[num_vertices, state_width]`` per block of the model -- and hands on only
those states and its outputs. The activations of one window are alive at a
time (recomputed during the backward); the result equals the unblocked
forward (tested in float64).

Models whose every block has a recurrent time encoder (T-GCN, A3TGCN, a
user's module around one) qualify; attention over all earlier appearances
(DySAT) would need every earlier window, and BatchNorm running statistics
(MPNN-LSTM) would be updated twice by the recomputation: both are refused.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..errors import ModelInputError, UnsupportedOptionError
from ..nn.decomposed import DecomposedModule, FusedGraph

__all__ = ["TimeBlockCheckpoint", "check_windowable"]


def check_windowable(model: DecomposedModule) -> None:
    """Raise :class:`~pyg_dynscale.errors.UnsupportedOptionError` (option
    ``checkpoint_every``) unless every block of ``model`` has a recurrent time
    encoder and it has no BatchNorm (see the module doc)."""
    kinds = {b.time_kind for b in model.dependency_pattern().blocks}
    if kinds != {"recurrent"} or not model.state_width:
        why = ("attention reads every earlier appearance, not one window" if "attention" in kinds
               else "TM-GCN's M-transform reads the earlier snapshots of its band, across window boundaries"
               if "window" in kinds else "windows carry a recurrent state from one window to the next")
        raise UnsupportedOptionError(
            "checkpoint_every", f"is set on the decomposed path, which needs a recurrent time encoder in every block; "
            f"{type(model).__name__} has time kinds {sorted(kinds)} ({why}).",
            "path='blackbox', or checkpoint_every=None.")
    if any(isinstance(s, torch.nn.modules.batchnorm._BatchNorm) for s in model.modules()):
        raise UnsupportedOptionError("checkpoint_every", f"is set with {type(model).__name__}, which has BatchNorm: "
                                     "the recomputation would update its running statistics twice.",
                                     "checkpoint_every=None.")


class TimeBlockCheckpoint:
    """Windows of ``every`` snapshots of ``signal`` for ``model``, run with
    checkpointing by :meth:`outputs`."""

    def __init__(self, model: DecomposedModule, signal: Any, every: int) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ModelInputError("checkpoint_every", f"is {every!r}.", "give a number of snapshots >= 1, or None.")
        check_windowable(model)
        self.model = model
        self.num_vertices = signal.num_vertices
        T = signal.num_snapshots
        ptr = signal.node_ptr.tolist()
        self.windows = []
        for a in range(0, T, every):
            b = min(a + every, T)
            g = FusedGraph.from_signal(signal[a:b])
            self.windows.append((ptr[a], ptr[b], g, g.sequence_vertex))

    def outputs(self, x: Tensor, h0: Optional[Tensor] = None, sequence_vertex: Optional[Tensor] = None) -> Tensor:
        """``[N, H]`` outputs for features ``x`` ``[N, ...]`` (vertex-time node
        order); ``h0`` ``[S, W]`` initial state of the whole signal's
        sequences (vertices ``sequence_vertex``) for the first block."""
        m = self.model
        W = m.state_width
        tables = [x.new_zeros(self.num_vertices, W) for _ in range(m.num_blocks)]
        if h0 is not None:
            tables[0] = tables[0].index_copy(0, sequence_vertex, h0.to(x.dtype))
        outs = []
        for lo, hi, g, seq_vertex in self.windows:
            if hi == lo:
                continue
            res = checkpoint(self._window, g, seq_vertex, x[lo:hi], *tables, use_reentrant=False)
            outs.append(res[0])
            tables = [t.index_copy(0, seq_vertex, last) for t, last in zip(tables, res[1:])]
        return torch.cat(outs, 0) if outs else x.new_zeros(0, W)

    def _window(self, g: FusedGraph, seq_vertex: Tensor, x: Tensor, *tables: Tensor) -> tuple:
        h: Optional[Tensor] = x
        finals = []
        for b in range(self.model.num_blocks):
            z = self.model.structure_encoder(g, h, block=b)
            h, last = self.model.time_encoder_with_state(z, g, tables[b].index_select(0, seq_vertex), block=b)
            finals.append(last)
        return (h, *finals)
