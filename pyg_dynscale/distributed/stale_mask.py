r"""The stale cache's fresh-row mask on the training device: its wire format,
its counts per peer and the positions of its rows, with nothing read back to
the host.

One side of an exchange (the rows sent, grouped by destination rank, or the
rows received, grouped by source rank) has ``splits`` rows per peer. The mask
of one peer's segment travels bit-packed, :math:`\lceil n_p / 8 \rceil`
bytes, the first row in the most significant bit (``numpy.packbits``'s
order), so the wire bytes are those the cache has always counted as
``stale_meta``. A :class:`MaskLayout` is built once per exchange slot from
the host-known ``splits`` with device factory calls only (``arange``,
``full``): on a GPU nothing is copied from the host per exchange either.

With :math:`p(i)` the peer of row :math:`i`, :math:`o(i)` its offset in its
segment and :math:`B_p = \sum_{q < p} \lceil n_q / 8 \rceil` the bytes before
peer :math:`p`'s segment, row :math:`i`'s bit is bit :math:`8 B_{p(i)} + o(i)`
of the packed stream.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

__all__ = ["MaskLayout", "positions"]


class MaskLayout:
    r"""Where each row's bit lives in the packed mask of one exchange side.

    Args:
        splits: rows per peer (host integers; their sum ``n``).
        device: the training device.

    Attributes:
        sizes: packed bytes per peer, :math:`\lceil n_p / 8 \rceil` (the
            split sizes of the mask's ``all_to_all``).
    """

    def __init__(self, splits: Sequence[int], device: torch.device) -> None:
        self.splits = tuple(int(n) for n in splits)
        self.sizes = [(n + 7) // 8 for n in self.splits]
        self.device = torch.device(device)
        bit_pos, peer, byte = [], [], 0
        for p, (n, size) in enumerate(zip(self.splits, self.sizes)):
            bit_pos.append(torch.arange(8 * byte, 8 * byte + n, dtype=torch.long, device=self.device))
            peer.append(torch.full((n,), p, dtype=torch.long, device=self.device))
            byte += size
        #: ``[n]`` bit of each row in the packed stream
        self.bit_pos = torch.cat(bit_pos) if bit_pos else torch.zeros(0, dtype=torch.long, device=self.device)
        #: ``[n]`` peer (segment) of each row
        self.peer = torch.cat(peer) if peer else torch.zeros(0, dtype=torch.long, device=self.device)
        self.nbytes = byte
        # bit j of a byte is its (7 - j)-th binary digit: the first row in the most significant bit
        self._shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=self.device)

    def matches(self, splits: Sequence[int], device: torch.device) -> bool:
        return tuple(int(n) for n in splits) == self.splits and torch.device(device) == self.device

    def pack(self, mask: Tensor) -> Tensor:
        """``[n]`` bool -> ``[nbytes, 1]`` uint8, segment by segment (pad bits 0)."""
        bits = torch.zeros(8 * self.nbytes, dtype=torch.uint8, device=self.device)
        bits.index_copy_(0, self.bit_pos, mask.to(torch.uint8))
        return (bits.view(-1, 8) << self._shifts).sum(1).to(torch.uint8).view(-1, 1)

    def unpack(self, packed: Tensor) -> Tensor:
        """``[nbytes, ...]`` uint8 (what :meth:`pack` made on the other side) -> ``[n]`` bool."""
        bits = (packed.reshape(-1, 1) >> self._shifts) & 1
        return bits.reshape(-1).index_select(0, self.bit_pos).bool()

    def counts(self, mask: Tensor, dtype: torch.dtype = torch.long) -> Tensor:
        """``[len(splits)]`` (a device tensor): the ``True`` rows per peer
        (integers, exact in float64 below :math:`2^{53}` whatever the
        summation order)."""
        out = torch.zeros(len(self.splits), dtype=dtype, device=self.device)
        return out.index_add_(0, self.peer, mask.to(dtype))


def positions(mask: Tensor, k: int) -> Tensor:
    """The indices of ``mask``'s ``True`` entries in increasing order (what
    ``mask.nonzero().flatten()`` gives), given their number ``k`` (host):
    output shape known, so nothing is read back. Entry ``i`` of the mask
    lands at its rank among the ``True`` entries; the others go to a slot
    past the end that is dropped."""
    n = mask.shape[0]
    slot = torch.where(mask, torch.cumsum(mask, 0) - 1, k)
    out = torch.empty(k + 1, dtype=torch.long, device=mask.device)
    out.scatter_(0, slot, torch.arange(n, dtype=torch.long, device=mask.device))
    return out[:k]
