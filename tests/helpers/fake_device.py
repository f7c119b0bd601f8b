"""A stand-in accelerator for checking device placement without a GPU.

:class:`FakeDevice` re-homes tensors onto a *fake* device: PyTorch's
``FakeTensor`` objects that carry shapes, dtypes and a device but no data.
The fake device is ``meta``: a CPU-only build cannot run composite kernels on
a fake ``cuda`` device, and for what these checks need ``meta`` behaves like
any accelerator -- an op that mixes it with a (non-scalar) host tensor raises
``FakeTensorDeviceMismatchError``, and reading a value back (``.item()``,
``bool()``, ``.tolist()``, ``nonzero``) raises because there is no value:
exactly the two mistakes a hot loop must not make on a GPU (a host index
left behind, a host synchronization). :class:`HostCopies` additionally
records every copy of a host tensor to the device made while it is active (a
per-epoch host-to-device transfer that placement should have done once).

Collectives have nothing to move either: :class:`FakeTransport` answers
``all_to_all`` with an empty buffer of the right shape on the fake device
(checking that what it was given lives there), and reduces host values over
the real process group (they are host tensors on a GPU run too).
"""
from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from pyg_dynscale.distributed.transport import Transport

FAKE = torch.device("meta")


class FakeDevice:
    """Moves real tensors onto the fake device (``move`` is a tensor map)."""

    def __init__(self) -> None:
        self.mode = FakeTensorMode(allow_non_fake_inputs=True)

    def move(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, FakeTensor):
            return t
        meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        return FakeTensor(self.mode, meta, FAKE)

    def modules(self, *modules: Any) -> None:
        for m in modules:
            if m is not None:
                m._apply(self.move)


class HostCopies(TorchDispatchMode):
    """Records host -> device copies (``_to_copy`` / ``copy_`` of a real,
    non-scalar CPU tensor onto another device) while active."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = str(func)
        if name.startswith(("aten._to_copy", "aten.copy_")):
            src = args[1] if name.startswith("aten.copy_") else args[0]
            dst_dev = args[0].device if name.startswith("aten.copy_") else kwargs.get("device")
            if (isinstance(src, torch.Tensor) and not isinstance(src, FakeTensor) and src.device.type == "cpu"
                    and src.dim() > 0 and dst_dev is not None and torch.device(dst_dev).type != "cpu"):
                self.copies.append(f"{name} of a host tensor {tuple(src.shape)}")
        return func(*args, **kwargs)


class FakeTransport(Transport):
    """Collectives for fake tensors: shapes only; host values over the real group."""

    name = "direct"

    def __init__(self, real: Transport) -> None:
        self.group, self.device, self.backend = real.group, FAKE, "fake"
        self.host_group = real.host_group if real.host_group is not None else real.group
        self.sent: list[tuple] = []

    def _check(self, x: torch.Tensor, what: str) -> None:
        if x.device != FAKE:
            raise AssertionError(f"{what} was handed a tensor on {x.device}, not on the training device")

    def all_to_all(self, send, send_splits, recv_splits):  # noqa: ANN001
        self._check(send, "all_to_all")
        self.sent.append((tuple(send.shape), list(send_splits)))
        return send.new_empty((sum(recv_splits),) + tuple(send.shape[1:]))

    def all_reduce(self, x, op=torch.distributed.ReduceOp.SUM):  # noqa: ANN001
        if x.device.type == "cpu":
            return self.all_reduce_host(x, op)
        self._check(x, "all_reduce")
        return x.detach().clone()

    def broadcast_(self, x, src=0):  # noqa: ANN001
        pass


def rehome_distributed(tr: Any) -> tuple[FakeDevice, FakeTransport]:
    """Move a :class:`DistributedTrainer` built on the CPU onto the fake
    device: its parameters, every structure :meth:`place` moves, a fresh SGD
    optimizer over the moved parameters, and a fake transport."""
    fake = FakeDevice()
    fake.modules(tr.model, tr.head)
    tr.params = list(tr.model.parameters()) + (list(tr.head.parameters()) if tr.head is not None else [])
    tr.optimizer = torch.optim.SGD(tr.params, lr=0.1)
    transport = FakeTransport(tr.transport)
    tr.device = tr.comm.device = FAKE
    tr.transport = tr.comm.transport = transport
    tr.place(fake.move)
    return fake, transport
