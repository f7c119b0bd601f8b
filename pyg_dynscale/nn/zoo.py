r"""The models ``pyg-dynscale train --model`` builds, by name.

Each entry is a decomposed model (docs/design.md, "Two runtime paths") in the form
DGC evaluates or PyGT ships, with the head and loss its task needs:

=================  ==============================================  =====================
name               model                                           state / output width
=================  ==============================================  =====================
``tgcn``           :class:`TGCN` (PyGT's T-GCN: one GCN per gate)  :math:`H` / :math:`H`
``tgcn-deep``      :class:`TGCN` with ``num_layers=2`` (DGC)       :math:`H` / :math:`H`
``dysat``          :class:`DySAT`, 2 blocks, 2+2 heads (DGC)       -- / :math:`H`
``mpnnlstm``       :class:`MPNNLSTM` (PyGT's MPNN-LSTM)            -- / :math:`2H+F`
``mpnnlstm-dgc``   :class:`MPNNLSTMDGC` (DGC's MPNN-LSTM)          :math:`4H` / :math:`2H`
``tmgcn``          :class:`TMGCN`, 2 layers, band 3 (SC'21)        -- / :math:`H`
``gconvgru``       PyGT's ``GConvGRU(F, H, K=2)``, black-box path  :math:`H` / :math:`H`
``gclstm``         PyGT's ``GCLSTM(F, H, K=2)``, black-box path    :math:`(H, H)` / :math:`H`
``dcrnn``          PyGT's ``DCRNN(F, H, K=2)``, black-box path     :math:`H` / :math:`H`
=================  ==============================================  =====================

The last three are PyGT classes without a structure/time decomposition
(they need ``torch-geometric-temporal``, the ``pygt`` extra); the trainers
run them on the black-box path (docs/blackbox.md), and
:func:`partition_pattern` gives the pattern their partition is made for.

Node targets (``target="node"``): a ``ReLU`` and a ``Linear(out, 1)`` head,
mean squared error. Link targets (``target="link"``): no head; the logit of a
pair is the dot product of its endpoints' outputs (``bce_link``), as DGC's
link prediction. Dropout is 0, so an epoch is a deterministic function of the
parameters (checkpoint/resume is exact).
"""
from __future__ import annotations

from typing import Optional

import torch

# the models' names are defined torch-free there: the command line's parser reads them without importing torch
from ..names import BLACK_BOX_MODELS, MODEL_NAMES, RECOMPUTABLE_MODELS, TARGETS
from .dysat import DySAT
from .mpnn_lstm import MPNNLSTM
from .mpnn_lstm_dgc import MPNNLSTMDGC
from .tgcn import TGCN
from .tmgcn import TMGCN

__all__ = ["MODEL_NAMES", "BLACK_BOX_MODELS", "RECOMPUTABLE_MODELS", "TARGETS", "build_model", "partition_pattern"]


def build_model(
    name: str, in_channels: int, hidden: int, *, num_snapshots: int, num_vertices: int, target: str = "node",
) -> tuple[torch.nn.Module, Optional[torch.nn.Module], str]:
    r"""Build model ``name`` for a signal with ``in_channels`` features.

    Args:
        name: one of :data:`MODEL_NAMES`.
        in_channels: node features :math:`F`.
        hidden: hidden width :math:`H` (``dysat``: divisible by 2).
        num_snapshots: snapshots the model sees at most (DySAT's position
            embeddings).
        num_vertices: vertices of the signal (PyGT's MPNN-LSTM keeps per-vertex
            state tables of this size).
        target: ``"node"`` (regression) or ``"link"`` (link prediction).

    Returns:
        ``(model, head, loss)``: the decomposed model, the row-wise head
        (``None`` for links) and the loss name for the trainers.
    """
    if name not in MODEL_NAMES:
        raise ValueError(f"model is {name!r}; use one of {MODEL_NAMES}.")
    if target not in TARGETS:
        raise ValueError(f"target is {target!r}; use one of {TARGETS}.")
    if name in BLACK_BOX_MODELS:
        from .._optional import import_pygt

        rec = import_pygt(f"--model {name}").nn.recurrent
        cls = {"gconvgru": rec.GConvGRU, "gclstm": rec.GCLSTM, "dcrnn": rec.DCRNN}[name]
        model: torch.nn.Module = cls(in_channels, hidden, 2)
        width = hidden
    elif name == "tgcn":
        model = TGCN(in_channels, hidden)
        width = hidden
    elif name == "tgcn-deep":
        model, width = TGCN(in_channels, hidden, num_layers=2), hidden
    elif name == "dysat":
        if hidden % 2:
            raise ValueError(f"hidden is {hidden}; dysat needs an even hidden width (2 attention heads).")
        model = DySAT(in_channels, hidden, num_snapshots, structural_heads=2, temporal_heads=2, num_blocks=2)
        width = hidden
    elif name == "tmgcn":
        model, width = TMGCN(in_channels, hidden, band=3, num_layers=2), hidden
    elif name == "mpnnlstm":
        model = MPNNLSTM(in_channels, hidden, num_vertices, 1, 0.0)
        width = int(model.out_channels)
    else:
        model = MPNNLSTMDGC(in_channels, hidden)
        width = int(model.out_channels)
    if target == "link":
        return model, None, "bce_link"
    return model, torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(width, 1)), "mse"


def partition_pattern(model: torch.nn.Module, name: str, in_channels: int, hidden: int, bytes_per_element: int):
    """The dependency pattern a partition of ``model`` is made for: its own,
    or for the black-box models the white-box preset of their cell (PGC's
    edge weights; the black-box runtime itself moves state rows of its halo,
    docs/blackbox.md)."""
    from ..partition.pattern import DependencyPattern

    if name in BLACK_BOX_MODELS:
        return DependencyPattern.preset("gconvgru", in_channels, hidden, K=2, bytes_per_element=bytes_per_element)
    return model.dependency_pattern(bytes_per_element=bytes_per_element)
