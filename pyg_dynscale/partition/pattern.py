r"""Dependency patterns: what one block of a dynamic GNN needs from other nodes.

A model built from ``B`` blocks, each "structure encoder (``L`` spatial
aggregation layers) then time encoder", is described by a
:class:`DependencyPattern` of ``B`` :class:`BlockPattern` s. Together with an
owner array (a :class:`~pyg_dynscale.partition.Partition`) it fixes every row
that has to cross ranks (:class:`~pyg_dynscale.partition.CommunicationPlan`):

* spatial layer :math:`l` of a block: node :math:`(i,t)` aggregates its
  in-neighbours :math:`(j,t)`; a neighbour owned elsewhere sends its layer-:math:`l`
  **input** row, ``spatial_widths[l]`` elements wide;
* time encoder, ``time_kind="recurrent"`` (GRU/LSTM): :math:`(i,t)` needs the
  state of the previous appearance :math:`(i,t')`, ``time_width`` elements;
  ``time_kind="attention"`` (DySAT): :math:`(i,t)` needs the rows of *all*
  earlier appearances of :math:`i`; ``time_kind="window"`` (TM-GCN's banded
  M-transform, band :math:`b` = ``time_band``): the rows of the earlier
  appearances :math:`(i,t')` with :math:`t - t' < b` (at most :math:`b-1`);
  ``time_kind="none"`` (PyGT's MPNN-LSTM, whose LSTM runs inside one
  snapshot): no temporal dependency at all;
* PSS-TS only: the structure-encoder output row (``output_width``) moves from
  the structure owner to the time owner, and for blocks after the first the
  block input row (:attr:`BlockPattern.input_width`) moves back.

Every forward row has a gradient row of the same width going back in the
backward pass, so an epoch moves twice the forward bytes -- except the rows
of block 0's first spatial layer: they are raw input features, loaded once
before training (no per-epoch traffic, no gradient; see
:meth:`DependencyPattern.spatial_edge_weight`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Optional

from ..errors import PartitionError
# the presets' names are defined torch-free there: the command line's parser reads them without importing torch
from ..names import PATTERN_MODELS as MODELS

TIME_KINDS = ("recurrent", "attention", "window", "none")


def _check_width(field: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PartitionError(
            field, f"must be a positive int (a row width in elements), got {value!r}.",
            "Give every exchanged row a width >= 1; a layer that exchanges nothing is left out of spatial_widths.",
        )


@dataclass(frozen=True)
class BlockPattern:
    r"""What one DGNN block exchanges.

    Args:
        spatial_widths (tuple[int, ...]): one entry per structure-encoder layer
            (= spatial hop): width in elements of the rows that layer needs from
            its in-neighbours (the layer's *input* rows). May be empty (a block
            without spatial aggregation).
        time_kind (str): ``"recurrent"`` (needs the previous appearance's state),
            ``"attention"`` (needs every earlier appearance), ``"window"``
            (needs the earlier appearances less than ``time_band`` snapshots
            back) or ``"none"`` (no dependency across snapshots: no temporal
            exchange).
        time_width (int): width of the exchanged time-encoder row (hidden state,
            or the row keys/values are computed from); ``0`` for ``"none"``.
        output_width (int, optional): width of the structure encoder's output
            row, i.e. the time encoder's input; this is what PSS-TS
            redistributes. Defaults to ``time_width``.
        time_band (int): ``"window"`` only: the band :math:`b \ge 1` in
            snapshots (node :math:`(i,t)` reads :math:`(i,t')` for
            :math:`t-b < t' \le t`); ``0`` for the other kinds.
    """

    spatial_widths: tuple[int, ...]
    time_kind: Literal["recurrent", "attention", "window", "none"]
    time_width: int
    output_width: Optional[int] = None
    time_band: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.spatial_widths, tuple):
            object.__setattr__(self, "spatial_widths", tuple(self.spatial_widths))
        for i, w in enumerate(self.spatial_widths):
            _check_width(f"spatial_widths[{i}]", w)
        if self.time_kind not in TIME_KINDS:
            raise PartitionError("time_kind", f"unknown time encoder kind {self.time_kind!r}.",
                                 f"Use one of {list(TIME_KINDS)}.")
        if self.time_kind == "none":
            if self.time_width != 0:
                raise PartitionError("time_width", f"must be 0 for time_kind='none' (nothing crosses snapshots), got {self.time_width!r}.")
            if self.output_width is None:
                raise PartitionError("output_width", "is needed when time_kind='none' (time_width is 0, so it "
                                     "cannot stand in for the structure output PSS-TS moves).",
                                     "give the structure encoder's output width.")
        else:
            _check_width("time_width", self.time_width)
        if self.output_width is not None:
            _check_width("output_width", self.output_width)
        if self.time_kind == "window":
            _check_width("time_band", self.time_band)
        elif self.time_band != 0:
            raise PartitionError("time_band", f"is {self.time_band!r} for time_kind={self.time_kind!r}.",
                                 "give a band only with time_kind='window' (leave it 0 otherwise).")

    @property
    def spatial_hops(self) -> int:
        """Number of structure-encoder aggregation layers."""
        return len(self.spatial_widths)

    @property
    def redistribution_width(self) -> int:
        """Width of the row PSS-TS moves from structure owner to time owner."""
        return self.output_width if self.output_width is not None else self.time_width

    @property
    def input_width(self) -> int:
        """Width of the block's input row (what PSS-TS moves back from the time
        owner of block ``b-1`` to the structure owner of block ``b``): the first
        spatial layer's input, or the output width for a block without spatial
        layers."""
        return self.spatial_widths[0] if self.spatial_widths else self.redistribution_width


@dataclass(frozen=True)
class DependencyPattern:
    r"""The dependency pattern of a whole model: its blocks in order.

    Args:
        blocks (tuple[BlockPattern, ...]): at least one block.
        bytes_per_element (int): 4 for float32, 2 for half precision, 8 for float64.
        name (str): a label for reports.

    Use :meth:`preset` for the built-in models, or declare your own::

        DependencyPattern((BlockPattern((64, 32), "recurrent", 32),), name="mine")
    """

    blocks: tuple[BlockPattern, ...]
    bytes_per_element: int = 4
    name: str = "custom"

    def __post_init__(self) -> None:
        if not isinstance(self.blocks, tuple):
            object.__setattr__(self, "blocks", tuple(self.blocks))
        if len(self.blocks) == 0:
            raise PartitionError("blocks", "a dependency pattern needs at least one block.",
                                 "Pass e.g. (BlockPattern((F,), 'recurrent', H),).")
        for i, b in enumerate(self.blocks):
            if not isinstance(b, BlockPattern):
                raise PartitionError(f"blocks[{i}]", f"expected a BlockPattern, got {type(b).__name__}.")
        _check_width("bytes_per_element", self.bytes_per_element)

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def spatial_edge_weight(self, input_halo: str = "load") -> float:
        r"""Bytes per epoch (forward + backward) that cutting one spatial edge
        costs: :math:`2 \cdot b \cdot \sum_{\text{blocks}} \sum_l w_l`
        (an upper bound: rows shared by several cut edges into the same rank
        are sent once by the plan).

        Args:
            input_halo (str): ``"load"`` (default, what the distributed runtime
                does): block 0's first spatial layer exchanges raw input
                features, which are loaded once before training and carry no
                gradient, so that layer costs nothing per epoch and is left
                out of the sum. ``"exchange"``: count it like every other layer.
        """
        total = sum(sum(b.spatial_widths) for b in self.blocks)
        if input_halo == "load":
            total -= self.static_input_width
        elif input_halo != "exchange":
            raise PartitionError("input_halo", f"is {input_halo!r}.", "use 'load' or 'exchange'.")
        return float(2 * self.bytes_per_element * total)

    @property
    def static_input_width(self) -> int:
        """Width of the rows loaded once (block 0's first spatial layer input:
        raw features), ``0`` when block 0 has no spatial layer."""
        return self.blocks[0].spatial_widths[0] if self.blocks[0].spatial_widths else 0

    def temporal_edge_weight(self, attention_rows: float = 1.0) -> float:
        r"""Bytes per epoch (forward + backward) that cutting one temporal edge
        costs: :math:`2 \cdot b \cdot \sum_{\text{blocks}} k_b\, w_\text{time}`
        with :math:`k_b = 1` for recurrent blocks and ``attention_rows`` for
        attention blocks.

        Args:
            attention_rows (float): rows that cross one cut temporal edge of an
                attention block. Attention needs *every* earlier appearance, so
                a cut after position :math:`j` of a sequence moves up to
                :math:`j` rows; about half the mean sequence length is a fair
                estimate. Default ``1`` (only the row on the edge itself).
                A window block (band :math:`b`) counts
                :math:`\min(\text{attention\_rows}, b-1)` rows.
        """
        if not attention_rows > 0:
            raise PartitionError("attention_rows", f"must be > 0, got {attention_rows!r}.")
        return float(2 * self.bytes_per_element * sum(b.time_width * _rows_per_cut(b, attention_rows)
                                                      for b in self.blocks if b.time_kind != "none"))

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "bytes_per_element": self.bytes_per_element,
            "blocks": [
                {"spatial_widths": list(b.spatial_widths), "time_kind": b.time_kind,
                 "time_width": b.time_width, "output_width": b.output_width,
                 **({"time_band": b.time_band} if b.time_kind == "window" else {})}
                for b in self.blocks
            ],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "DependencyPattern":
        blocks = tuple(
            BlockPattern(tuple(int(w) for w in b["spatial_widths"]), b["time_kind"], int(b["time_width"]),
                         None if b.get("output_width") is None else int(b["output_width"]),
                         int(b.get("time_band", 0)))
            for b in d["blocks"]
        )
        return cls(blocks, int(d.get("bytes_per_element", 4)), str(d.get("name", "custom")))

    @classmethod
    def preset(
        cls,
        model: str,
        in_channels: int,
        hidden: int,
        *,
        num_blocks: int = 1,
        gcn_layers: int = 1,
        lstm_layers: int = 2,
        gat_layers: int = 1,
        K: int = 2,
        band: int = 3,
        bytes_per_element: int = 4,
    ) -> "DependencyPattern":
        r"""The pattern of a built-in model. Blocks after the first take the
        previous block's output (``hidden`` wide, MPNN-LSTM: ``2*hidden``) as input.

        * ``"tgcn"`` -- T-GCN. PyGT's ``TGCN`` (``gcn_layers=1``): three
          ``GCNConv(in, hidden)`` (gates z, r, h) that see only ``X``, then a
          GRU-like update. The three convolutions share their input, so layer 0
          exchanges the ``in_channels`` row once; deeper stacks (DGC's variant,
          ``gcn_layers=2``: three 2-layer GCNs) exchange the three hidden rows,
          ``3*hidden``, per further layer. Time encoder: GRU, state ``hidden``;
          structure output (redistributed by PSS-TS) ``3*hidden``.
        * ``"mpnnlstm"`` -- DGC's MPNN-LSTM (:class:`~pyg_dynscale.nn.MPNNLSTMDGC`):
          two ``GCNConv`` (``in -> hidden -> hidden``, widths ``(in, hidden)``),
          whose outputs are concatenated (``2*hidden``) into a
          ``lstm_layers``-layer LSTM across snapshots; the recurrent state per
          layer is ``(h, c)``, so ``time_width = 2*hidden*lstm_layers``.
        * ``"mpnnlstm-pygt"`` -- PyGT's MPNN-LSTM (:class:`~pyg_dynscale.nn.MPNNLSTM`
          with ``window=1``): the same two GCNs, but its LSTMs run over the
          window *inside* one snapshot, so ``time_kind="none"``; PSS-TS moves
          the structure output ``[H_1 || H_2 || X]`` (``2*hidden + in``).
        * ``"dysat"`` -- DySAT: ``gat_layers`` structural attention layers
          (input rows ``in``, then ``hidden``), then temporal self-attention
          over all earlier appearances (``time_kind="attention"``); keys and
          values are computed by the receiver from the ``hidden`` wide
          structural output rows.
        * ``"gconvgru"`` -- an integrated cell like PyGT's ``GConvGRU(in,
          hidden, K)``: every step applies Chebyshev filters of order ``K``
          (``K-1`` propagation hops) to ``X`` (3 gates, shared input: ``in``), to
          ``H`` (gates z, r: ``hidden``) and to ``H*R`` (candidate: ``hidden``),
          so each hop exchanges ``in + 2*hidden``; the recurrent state is ``H``.
        * ``"tmgcn"`` -- TM-GCN (:class:`~pyg_dynscale.nn.TMGCN` with
          ``num_layers = num_blocks`` GCN layers, all ``hidden`` wide, and
          band ``band``): ``num_blocks + 1`` blocks -- the M-transform of the
          input (no spatial layer, ``time_kind="window"``, rows ``in``), then
          per layer a GCN followed by the next layer's M-transform (rows
          ``hidden``), the last GCN without one (``"none"``).

        Raises:
            PartitionError: unknown ``model`` (the message lists the valid
                names) or non-positive sizes.
        """
        key = str(model).lower().replace("-", "").replace("_", "")
        if key not in MODELS:
            raise PartitionError("model", f"unknown model {model!r}.", f"Use one of {list(MODELS)} or declare a DependencyPattern.")
        for f, v in (("in_channels", in_channels), ("hidden", hidden), ("num_blocks", num_blocks),
                     ("gcn_layers", gcn_layers), ("lstm_layers", lstm_layers), ("gat_layers", gat_layers), ("K", K),
                     ("band", band)):
            _check_width(f, v)
        if key == "tmgcn":
            widths = (in_channels,) + (hidden,) * num_blocks
            tm = [BlockPattern((), "window", in_channels, in_channels, band)]
            tm += [BlockPattern((widths[l - 1],), "window", widths[l], widths[l], band) for l in range(1, num_blocks)]
            tm.append(BlockPattern((widths[-2],), "none", 0, widths[-1]))
            return cls(tuple(tm), bytes_per_element, key)
        blocks = []
        inp = in_channels
        for _ in range(num_blocks):
            if key == "tgcn":
                b = BlockPattern((inp,) + (3 * hidden,) * (gcn_layers - 1), "recurrent", hidden, 3 * hidden)
                nxt = hidden
            elif key == "mpnnlstm":
                b = BlockPattern((inp, hidden), "recurrent", 2 * hidden * lstm_layers, 2 * hidden)
                nxt = 2 * hidden
            elif key == "mpnnlstmpygt":
                b = BlockPattern((inp, hidden), "none", 0, 2 * hidden + inp)
                nxt = 2 * hidden + inp
            elif key == "dysat":
                b = BlockPattern((inp,) + (hidden,) * (gat_layers - 1), "attention", hidden, hidden)
                nxt = hidden
            else:  # gconvgru
                b = BlockPattern((inp + 2 * hidden,) * (K - 1), "recurrent", hidden, hidden)
                nxt = hidden
            blocks.append(b)
            inp = nxt
        return cls(tuple(blocks), bytes_per_element, key)


def _rows_per_cut(block: BlockPattern, attention_rows: float) -> float:
    """Rows that cross one cut temporal edge of ``block`` (see
    :meth:`DependencyPattern.temporal_edge_weight`)."""
    if block.time_kind == "attention":
        return attention_rows
    if block.time_kind == "window":
        return min(attention_rows, float(block.time_band - 1))
    return 1.0


def edge_weights(pattern: Any) -> tuple[float, float]:
    r"""``(spatial, temporal)`` bytes that cutting one edge of each kind costs
    (temporal: one row per attention block, see
    :func:`~pyg_dynscale.partition.pgc.coarsen.temporal_edge_weights` for the per-edge weights).

    ``pattern`` is a :class:`~pyg_dynscale.partition.pattern.DependencyPattern`
    (anything with ``spatial_edge_weight()`` and ``temporal_edge_weight()``), a
    ``(spatial, temporal)`` pair, or ``None`` (both 1).
    """
    if pattern is None:
        return 1.0, 1.0
    if isinstance(pattern, (tuple, list)) and len(pattern) == 2:
        ws, wt = float(pattern[0]), float(pattern[1])
    elif hasattr(pattern, "spatial_edge_weight") and hasattr(pattern, "temporal_edge_weight"):
        ws, wt = float(pattern.spatial_edge_weight()), float(pattern.temporal_edge_weight())
    else:
        raise PartitionError("pattern", f"must be a DependencyPattern, a (spatial, temporal) pair or None, not {type(pattern).__name__}.",
                             "build one with DependencyPattern.preset(model, in_channels, hidden).")
    for name, v in (("spatial", ws), ("temporal", wt)):
        if not math.isfinite(v) or v < 0:
            raise PartitionError("pattern", f"{name} edge weight is {v}.", "edge weights must be finite and >= 0.")
    return ws, wt
