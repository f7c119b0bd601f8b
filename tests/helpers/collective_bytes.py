"""The bytes a rank hands to ``torch.distributed`` collectives, counted here from the calls' own arguments
(independently of the package's ledgers), attributed to the package module that issued each call.

A trainer's ``traffic()["measured"]`` must be what its collectives were handed: a test compares it with
:class:`HandedBytes` (the tests of events per rank, tests/ctdg/test_event_exchange.py, and of
``MemoryTrainer.traffic()``, tests/ctdg/test_event_traffic.py). The convention is the package's: an
``all_to_all_single`` hands its input less the block the rank sends itself, an ``all_gather`` /
``all_reduce`` its one input tensor.
"""
from __future__ import annotations

import math
import sys
from typing import Iterable

import torch

#: the collectives counted (the package's exchanges use no other)
COLLECTIVES = ("all_to_all_single", "all_gather", "all_reduce")


class HandedBytes:
    """Wraps :data:`COLLECTIVES` of ``torch.distributed`` until :meth:`close`.

    Args:
        modules: package modules (``"pyg_dynscale.ctdg.memory_placement"``, ...); a call is attributed to
            the innermost frame of one of them on its stack (a transport's call to the module that asked
            for it), else to ``"other"``.
        collectives: the ones to count (default :data:`COLLECTIVES`).

    Attributes:
        calls (dict): per module, ``[(collective, bytes handed), ...]`` in call order.
    """

    def __init__(self, modules: Iterable[str], collectives: Iterable[str] = COLLECTIVES) -> None:
        import torch.distributed as dist

        self.dist, self.modules = dist, tuple(modules)
        self.calls: dict = {m: [] for m in self.modules + ("other",)}
        self._saved = {name: getattr(dist, name) for name in collectives}
        for name, fn in self._saved.items():
            setattr(dist, name, self._wrap(name, fn))

    def _issuer(self) -> str:
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_globals.get("__name__")
            if name in self.modules:
                return name
            frame = frame.f_back
        return "other"

    def _wrap(self, name: str, fn):
        def counted(*args, **kwargs):
            self.calls[self._issuer()].append((name, self._handed(name, *args, **kwargs)))
            return fn(*args, **kwargs)
        return counted

    def _handed(self, name: str, *args, **kwargs) -> int:
        if name == "all_to_all_single":
            inp = args[1] if len(args) > 1 else kwargs["input"]
            splits = args[3] if len(args) > 3 else kwargs.get("input_split_sizes")
            rows = inp.size(0) if inp.dim() else 1
            width = math.prod(inp.shape[1:])
            own = splits[self.dist.get_rank()] if splits is not None else rows // self.dist.get_world_size()
            return (inp.numel() - own * width) * inp.element_size()
        x = (args[1] if len(args) > 1 else kwargs["tensor"]) if name == "all_gather" else \
            (args[0] if args else kwargs["tensor"])
        return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0

    def bytes(self, module: str) -> int:
        """Bytes the calls issued from ``module`` handed over."""
        return sum(b for _, b in self.calls[module])

    def close(self) -> None:
        for name, fn in self._saved.items():
            setattr(self.dist, name, fn)
