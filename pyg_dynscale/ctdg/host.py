r"""What the event-stream trainer plans on the host, and how it reaches the device.

On a GPU, every value the host reads from a device tensor waits for every
kernel queued before it (``.item()``, ``.tolist()``, ``nonzero``, boolean-mask
indexing, ``unique``, ``repeat_interleave`` without ``output_size``...). A
step of :class:`~pyg_dynscale.ctdg.MemoryTrainer` needs many index lists whose
*lengths* depend on values: the batch's distinct nodes, their last neighbours,
their stored messages, the owners' request lists of a partitioned memory.
None of them depends on a learned value: they are functions of the event
stream ``(src, dst, t)``, known in advance, of the negatives (drawn from the
CPU generator) and of the schedule. So they are computed on the **host**, on
CPU copies of the stream's index columns (:class:`HostStream`), and reach the
device as index tensors (:func:`host_to_device`: a host-to-device copy, which the
host does not wait for); the device then runs gathers and scatters of shapes
the host already knows. The CPU gives the same permutations as the reference
loop on the CPU (``sort`` ties, ``unique``), so a CUDA run takes exactly the
CPU run's index lists.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch
from torch import Tensor

__all__ = ["HostStream", "host_copy", "host_to_device"]


def host_copy(x: Tensor) -> Tensor:
    """``x`` on the CPU (a CPU ``x`` itself: nothing on the device computes with the index
    columns, so sharing the user's storage costs nothing and copies nothing)."""
    return x.detach().cpu()


def host_to_device(x: Tensor, device: Union[str, torch.device]) -> Tensor:
    """The host tensor ``x`` on ``device``: on CUDA a copy from page-locked memory that the host
    does not wait for (the caching host allocator keeps the staging buffer until the copy has
    run, so ``x`` may change afterwards); on the CPU ``x`` itself."""
    device = torch.device(device)
    if device.type == "cpu" or x.device == device:
        return x
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)


@dataclass(frozen=True)
class HostStream:
    """The event stream's index columns on the host (``[E]`` each, dtypes as given).

    Attributes:
        src, dst: the endpoints of every event.
        t: the timestamps.
    """

    src: Tensor
    dst: Tensor
    t: Tensor

    @classmethod
    def of(cls, src: Tensor, dst: Tensor, t: Tensor) -> "HostStream":
        return cls(host_copy(src), host_copy(dst), host_copy(t))

    def destination_bounds(self, a: int, b: int) -> tuple[int, int]:
        """``(min, max)`` destination of events ``[a, b)``: the range of that split's negatives."""
        d = self.dst[a:b]
        return int(d.min()), int(d.max())
