r"""Partitions of consecutive windows joined into one partition.

:func:`concat_partitions` gives the partition of
:func:`~pyg_dynscale.data.concat.concat_signals` ``(s_1, ..., s_k)`` whose
nodes keep the ranks the windows' own partitions gave them: the trainers use
it to evaluate the test window after the training window with each rank
keeping the rows it trained (its state at the end of the training window
reaches the rank that owns the vertex's first test node through the
runtime's temporal exchange, as between any two ranks of one window).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..errors import PartitionError
from .partition import Partition

__all__ = ["concat_partitions"]


def concat_partitions(*parts: Partition) -> Partition:
    r"""One partition of the concatenated windows.

    Args:
        *parts: partitions of consecutive windows, all into the same number
            of parts.

    Returns:
        Partition: ``owner`` (and ``time_owner`` when a part has one; the
        others then use their ``owner``) concatenated in gid order; ``chunk``
        concatenated with the ids of part ``k`` shifted past those of the
        parts before it (``None`` unless every part has chunks); the first
        part's ``scheme`` and ``meta`` (its dependency pattern), no
        fingerprint.

    Raises:
        PartitionError: when the numbers of parts differ.
    """
    if not parts:
        raise PartitionError("parts", "is empty.", "pass at least one partition.")
    R = parts[0].num_parts
    for k, p in enumerate(parts):
        if p.num_parts != R:
            raise PartitionError("num_parts", f"is {p.num_parts} in partition {k} and {R} in partition 0.",
                                 "partition every window into the same number of parts.")
    time_owner: Optional[Tensor] = None
    if any(p.time_owner is not None for p in parts):
        time_owner = torch.cat([p.temporal_owner for p in parts])
    chunk: Optional[Tensor] = None
    if all(p.chunk is not None for p in parts):
        pieces, base = [], 0
        for p in parts:
            pieces.append(p.chunk + base)
            base += int(p.chunk.max()) + 1 if p.chunk.numel() else 0
        chunk = torch.cat(pieces)
    first = parts[0]
    return Partition(first.scheme, R, torch.cat([p.owner for p in parts]), time_owner, chunk, "",
                     sum(p.seconds for p in parts), dict(first.meta))
