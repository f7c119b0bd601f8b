"""Counting host read-backs on the CPU: what would stop a GPU in a hot loop.

On a GPU, reading a value of a device tensor from the host waits until every
kernel queued before it has run: ``.item()`` / ``int(t)`` / ``bool(t)``
(``aten::_local_scalar_dense``), ``.tolist()``, ``.numpy()``, ``.cpu()``,
and the ops whose output shape depends on values (``nonzero``, boolean-mask
indexing, ``masked_select``, ``unique``, ``unique_consecutive``,
``repeat_interleave`` without ``output_size``, ``bincount``). CI has no GPU,
so :class:`HostSyncs` finds them on the CPU: it follows which tensors are
*device-resident* -- the ones it is told about (:meth:`HostSyncs.mark`,
:meth:`HostSyncs.mark_modules`) and, transitively, every output of an op one
of whose inputs is (taint by storage, so views, ``.data`` and in-place
writes follow) -- and counts each of the operations above applied to one.
Host-side planning (index lists computed from host tensors that never touched
a device tensor) is free, as it is on a GPU.

What it cannot see: ``.to("cpu")`` (on the CPU it is the identity and does
not dispatch; the package writes device-to-host copies as ``.cpu()``, which
is counted), and reads of tensors no marked tensor flowed into. On the CPU a
trainer's ``.to(device)`` and ``device=`` factories return host tensors;
:func:`on_the_device` makes those that a given part of the package creates
device-resident, as a GPU run would.

Usage::

    with HostSyncs() as syncs:
        syncs.mark_modules(model)
        trainer.step()
    assert syncs.count <= 1, syncs.events
"""
from __future__ import annotations

import contextlib
import functools
import sys
import traceback
from typing import Any, Callable, Iterable, Iterator, Optional

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["HostSyncs", "SYNC_OPS", "count_host_syncs", "on_the_device"]

#: ops that read a value of their first tensor argument back to the host (or size their output by it)
SYNC_OPS = frozenset({
    "aten._local_scalar_dense", "aten.nonzero", "aten.argwhere", "aten.masked_select", "aten._unique",
    "aten._unique2", "aten.unique_dim", "aten.unique_consecutive", "aten.unique_dim_consecutive", "aten.bincount",
    "aten.equal", "aten.is_nonzero", "aten.histc",
})
_INDEX_OPS = frozenset({"aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl",
                        "aten._index_put_impl_"})
_REPEAT = "aten.repeat_interleave"
#: ops that launch no kernel (besides the views, which ``OpOverload.is_view`` names)
_METADATA_OPS = frozenset({"aten.detach", "aten.lift_fresh", "aten.empty", "aten.empty_strided", "aten.new_empty",
                           "aten.new_empty_strided", "aten.empty_like", "aten.set_", "aten.resize_", "aten.sym_size",
                           "aten.sym_stride", "aten.sym_numel", "aten.is_same_size"})


def _key(t: torch.Tensor) -> Optional[int]:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # sparse / meta-only tensors have no storage to follow
        return None


class HostSyncs(TorchDispatchMode):
    """A dispatch mode counting host read-backs of device-resident tensors.

    Attributes:
        count: the number of read-backs seen.
        events: one line per read-back: the operation and the package frame
            that made it (``file:line``), for a useful assertion message.
        device_ops: operations run on device-resident tensors, views and
            metadata-only ops excluded -- a proxy for kernel launches (a fused
            or composite kernel may launch more than one, a tiny op exactly one).
    """

    def __init__(self, trace_prefix: str = "pyg_dynscale") -> None:
        super().__init__()
        self._device: dict[int, StorageWeakRef] = {}
        self.events: list[str] = []
        self._prefix = trace_prefix
        self._saved: dict[str, Any] = {}
        self._paused = 0
        self.device_ops = 0

    # ------------------------------------------------------------------ marking
    def mark(self, *tensors: Any) -> "HostSyncs":
        """Declare tensors (nested lists / dicts / tuples of them) device-resident."""
        leaves, _ = tree_flatten(list(tensors))
        for t in leaves:
            if isinstance(t, torch.Tensor):
                k = _key(t)
                if k is not None:
                    self._device[k] = StorageWeakRef(t.untyped_storage())
        return self

    def mark_modules(self, *modules: Optional[torch.nn.Module]) -> "HostSyncs":
        """Declare the parameters, their gradients and the buffers of ``modules`` device-resident."""
        for m in modules:
            if m is None:
                continue
            for p in m.parameters():
                self.mark(p)
                if p.grad is not None:
                    self.mark(p.grad)
            for b in m.buffers():
                self.mark(b)
        return self

    def mark_optimizer(self, optimizer: torch.optim.Optimizer) -> "HostSyncs":
        """Declare an optimizer's parameters and their floating-point state device-resident
        (PyTorch keeps Adam's ``step`` counters on the host unless ``capturable``: not marked)."""
        for group in optimizer.param_groups:
            self.mark(*group["params"])
        for state in optimizer.state.values():
            for name, v in state.items():
                if isinstance(v, torch.Tensor) and name != "step":
                    self.mark(v)
        return self

    def is_device(self, t: Any) -> bool:
        if not isinstance(t, torch.Tensor):
            return False
        k = _key(t)
        if k is None:
            return False
        ref = self._device.get(k)
        if ref is None:
            return False
        if ref.expired():
            del self._device[k]
            return False
        return True

    # ------------------------------------------------------------------ counting
    @property
    def count(self) -> int:
        return len(self.events)

    def _record(self, what: str) -> None:
        where = "?"
        for frame in reversed(traceback.extract_stack()[:-2]):
            if self._prefix in frame.filename.replace("\\", "/") and "host_syncs" not in frame.filename:
                where = f"{frame.filename.split(self._prefix, 1)[-1].lstrip('/')}:{frame.lineno}"
                break
        self.events.append(f"{what} at {where}")

    def reset(self) -> None:
        """Forget the counted read-backs and operations (the marks stay)."""
        self.events.clear()
        self.device_ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
        name = name if name.startswith("aten.") else f"aten.{name}"
        leaves, _ = tree_flatten((args, kwargs))
        dev_in = any(self.is_device(t) for t in leaves)
        if dev_in and not self._paused:
            first = args[0] if args else None
            if name in SYNC_OPS and any(self.is_device(a) for a in args[:2]):
                self._record(name)
            elif name in _INDEX_OPS and len(args) > 1:
                masks = [i for i in (args[1] or []) if isinstance(i, torch.Tensor)
                         and i.dtype in (torch.bool, torch.uint8) and self.is_device(i)]
                if masks:
                    self._record(f"{name} with a boolean mask")
            elif name == _REPEAT and kwargs.get("output_size") is None:
                reps = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else first
                if isinstance(reps, torch.Tensor) and self.is_device(reps):
                    self._record(f"{name} without output_size")
        out = func(*args, **kwargs)
        if dev_in:
            if not self._paused and not getattr(func, "is_view", False) and name not in _METADATA_OPS:
                self.device_ops += 1
            self.mark(out)
            if name.endswith("_") and args and isinstance(args[0], torch.Tensor):
                self.mark(args[0])  # written in place with device values
            if "out" in kwargs:
                self.mark(kwargs["out"])
        return out

    # ------------------------------------------------------------------ methods that do not dispatch
    def _wrap(self, method: str, what: str) -> Any:
        original = getattr(torch.Tensor, method)
        mode = self

        @functools.wraps(original)
        def wrapped(t: torch.Tensor, *a: Any, **k: Any) -> Any:
            if mode.is_device(t) and not mode._paused:
                mode._record(what)
            mode._paused += 1  # what the method dispatches inside is the same read-back
            try:
                return original(t, *a, **k)
            finally:
                mode._paused -= 1

        self._saved[method] = original
        return wrapped

    def __enter__(self) -> "HostSyncs":
        for method, what in (("tolist", "Tensor.tolist"), ("numpy", "Tensor.numpy"), ("cpu", "Tensor.cpu"),
                             ("__array__", "Tensor.__array__")):
            setattr(torch.Tensor, method, self._wrap(method, what))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            for method, original in self._saved.items():
                setattr(torch.Tensor, method, original)
            self._saved.clear()


def count_host_syncs(fn: Any, *, modules: Iterable[Optional[torch.nn.Module]] = (), tensors: Iterable[Any] = (),
                     optimizer: Optional[torch.optim.Optimizer] = None) -> HostSyncs:
    """Run ``fn()`` under a :class:`HostSyncs` with ``modules`` / ``tensors`` / ``optimizer`` marked."""
    with HostSyncs() as syncs:
        syncs.mark_modules(*modules)
        syncs.mark(*tensors)
        if optimizer is not None:
            syncs.mark_optimizer(optimizer)
        fn()
    return syncs


#: the factories :func:`on_the_device` follows (called with ``device=``)
_FACTORIES = ("tensor", "as_tensor", "arange", "zeros", "ones", "full", "empty")


def _names_a_device(args: tuple, kwargs: dict) -> bool:
    for a in (*args, kwargs.get("device")):
        if isinstance(a, torch.device):
            return True
        if isinstance(a, str):
            try:
                torch.device(a)
                return True
            except RuntimeError:
                pass
    return False


@contextlib.contextmanager
def on_the_device(syncs: HostSyncs, scope: "str | tuple[str, ...]") -> Iterator[None]:
    """Emulate the training device for ``syncs`` while active: a ``.to(<device>)`` of a host
    tensor and a factory called with ``device=``, made by code whose file path contains
    ``scope`` (e.g. ``"pyg_dynscale/windows/"``), return device-resident tensors (a copy where
    ``.to`` would return the host tensor itself, as a host-to-device copy does). Host planning
    in that code (tensors made without naming a device) stays on the host."""
    to = torch.Tensor.to
    scopes = (scope,) if isinstance(scope, str) else tuple(scope)

    def in_scope() -> bool:  # frames: this, the wrapper, its caller
        path = sys._getframe(2).f_code.co_filename.replace("\\", "/")
        return any(s in path for s in scopes)

    @functools.wraps(to)
    def to_device(t: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        out = to(t, *args, **kwargs)
        if _names_a_device(args, kwargs) and not syncs.is_device(t) and in_scope():
            if out.untyped_storage()._cdata == t.untyped_storage()._cdata:
                out = out.clone()
            syncs.mark(out)
        return out

    def factory(f: Callable) -> Callable:
        @functools.wraps(f)
        def made(*args: Any, **kwargs: Any) -> Any:
            out = f(*args, **kwargs)
            if kwargs.get("device") is not None and in_scope():
                syncs.mark(out)
            return out
        return made

    saved = {name: getattr(torch, name) for name in _FACTORIES}
    torch.Tensor.to = to_device
    for name, f in saved.items():
        setattr(torch, name, factory(f))
    try:
        yield
    finally:
        torch.Tensor.to = to
        for name, f in saved.items():
            setattr(torch, name, f)
