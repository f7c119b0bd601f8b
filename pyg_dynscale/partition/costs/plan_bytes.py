r"""Bytes of a communication plan, counted without building it.

:meth:`~pyg_dynscale.partition.plan.CommunicationPlan.build` materializes every row (sorts and
``unique`` over edge arrays) so that a runtime can execute it. Partitioners
that only *rank* candidate owner arrays (PGC's multi-start, step 7) need the
total alone; :func:`plan_bytes` counts the same rows in one compiled pass
over the edges, with a per-node bitmask of destination ranks instead of a
sort:

* spatial rows: :math:`|\{(o(v), u) : (u \to v) \in E_\text{spatial},\ o(u) \ne o(v)\}|`
  -- bit :math:`o(v)` of ``mask[u]``, summed popcounts;
* recurrent rows: the same over temporal edges;
* attention rows: per sequence, walking back in time, a node sends to every
  rank other than its own that owns a later appearance -- the popcount of the
  ranks seen so far, minus its own.

Then, with :math:`w` the row widths of each block :math:`b` and ``bpe`` the
bytes per element,

.. math::
    \text{bytes} = 2 \cdot \text{bpe} \sum_b \Big(\sum_l w^{(b)}_l \, n_\text{spatial}
    + w^{(b)}_\text{time} \, n_{\text{kind}(b)}\Big)

(forward plus one gradient row back; block 0's first spatial layer is left
out: its raw-feature rows are loaded once, not moved per epoch), exactly
``CommunicationPlan.build(...).bytes_by_kind()["total"]`` for a partition
without a separate time owner (tested). Counted with the numba backend for
up to :data:`MAX_PARTS` ranks (one ``uint64`` mask per node); otherwise the
plan is built.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ...errors import PartitionError
from ..compiled import backend
from ..compiled.jit import jit
from ..pgc.label_propagation import as_numpy
from ..partition import Partition
from ..pattern import DependencyPattern
from ..plan import CommunicationPlan

if TYPE_CHECKING:  # pragma: no cover
    from ...data.supergraph import Supergraph

#: ranks the bitmask counter handles (one bit per rank in a uint64)
MAX_PARTS = 64


@jit
def _popcount(x):  # pragma: no cover
    """Set bits of a uint64 (SWAR)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@jit
def _edge_rows(owner, src, dst, mask):  # pragma: no cover
    """Distinct ``(owner[dst], src)`` pairs over the edges that cross ranks."""
    mask[:] = 0
    for i in range(src.shape[0]):
        u = src[i]
        b = owner[dst[i]]
        if owner[u] != b:
            mask[u] |= np.uint64(1) << np.uint64(b)
    rows = 0
    for u in range(mask.shape[0]):
        if mask[u]:
            rows += _popcount(mask[u])
    return rows


@jit
def _count_attention_rows(owner, seq_order, seq_ptr):  # pragma: no cover
    """Rows of attention time encoders: each node to every other rank
    that owns a later appearance of its vertex."""
    rows = 0
    for s in range(seq_ptr.shape[0] - 1):
        later = np.uint64(0)
        for p in range(seq_ptr[s + 1] - 1, seq_ptr[s] - 1, -1):
            bit = np.uint64(1) << np.uint64(owner[seq_order[p]])
            rows += _popcount(later & ~bit)
            later |= bit
    return rows


def plan_row_counts(supergraph: "Supergraph", owner: Tensor, kinds: set[str]) -> dict[str, int]:
    """Forward rows of the plan of ``owner`` (``[N]``, one owner for both
    encoders) by phase kind: ``"spatial"`` (per structure-encoder layer),
    ``"recurrent"`` and/or ``"attention"`` (the time kinds in ``kinds``).
    Needs the numba backend and ``owner.max() < MAX_PARTS``."""

    own = as_numpy(owner, torch.long)
    se, te = supergraph.spatial_edge_index, supergraph.temporal_edge_index
    mask = np.empty(own.shape[0], np.uint64)
    out = {"spatial": int(_edge_rows(own, as_numpy(se[0], torch.long), as_numpy(se[1], torch.long), mask))}
    if "recurrent" in kinds:
        out["recurrent"] = int(_edge_rows(own, as_numpy(te[0], torch.long), as_numpy(te[1], torch.long), mask))
    if "attention" in kinds:
        out["attention"] = int(_count_attention_rows(own, as_numpy(supergraph.sequence_order, torch.long),
                                               as_numpy(supergraph.sequence_ptr, torch.long)))
    return out


def plan_bytes(supergraph: Any, owner: Tensor, num_parts: int, pattern: DependencyPattern) -> int:
    r"""Bytes per epoch (forward + backward) of the communication plan of
    the owner array ``owner`` (``[N]``, no separate time owner) -- equal to
    ``CommunicationPlan.build(supergraph, Partition(..., owner), pattern)
    .bytes_by_kind()["total"]``, counted (module doc) when the numba backend
    is active, ``num_parts <= MAX_PARTS`` and no block is a banded window
    (TM-GCN), else from the built plan.

    Args:
        supergraph: a :class:`~pyg_dynscale.data.Supergraph` (or a signal).
        owner (Tensor): ``[N]`` rank of every vertex-time node.
        num_parts (int): :math:`P`.
        pattern (DependencyPattern): the model's dependency pattern.
    """
    if not hasattr(supergraph, "spatial_edge_index"):
        supergraph = supergraph.supergraph()
    if owner.dim() != 1 or owner.numel() != supergraph.num_nodes:
        raise PartitionError("owner", f"must have shape [{supergraph.num_nodes}], got {list(owner.shape)}.")
    if owner.numel() and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
        raise PartitionError("owner", f"values must lie in [0, {num_parts}).")
    return _count_plan_bytes(supergraph, owner, num_parts, pattern)


def _count_plan_bytes_compiled(supergraph: "Supergraph", owner: Tensor, num_parts: int, pattern: DependencyPattern) -> int:
    """:func:`_count_plan_bytes` by the compiled row counters (module doc): up
    to :data:`MAX_PARTS` ranks, host tensors, no windowed block (banded rows
    are counted by the plan itself)."""
    windowed = any(b.time_kind == "window" for b in pattern.blocks)
    if num_parts > MAX_PARTS or owner.device.type != "cpu" or windowed:
        return NotImplemented
    kinds = {b.time_kind for b in pattern.blocks} - {"none"}
    rows = plan_row_counts(supergraph, owner, kinds)
    # block 0's first spatial layer moves raw features once (static), not per epoch
    spatial_w = sum(sum(b.spatial_widths) for b in pattern.blocks) - pattern.static_input_width
    elements = spatial_w * rows["spatial"] + sum(b.time_width * rows[b.time_kind] for b in pattern.blocks
                                                 if b.time_kind != "none")
    return 2 * pattern.bytes_per_element * int(elements)


@backend.twin(_count_plan_bytes_compiled)
def _count_plan_bytes(supergraph: "Supergraph", owner: Tensor, num_parts: int, pattern: DependencyPattern) -> int:
    """Bytes of the plan of ``owner``, built (:func:`plan_bytes`)."""
    part = Partition("pgc", num_parts, owner)
    return int(CommunicationPlan.build(supergraph, part, pattern).bytes_by_kind()["total"])
