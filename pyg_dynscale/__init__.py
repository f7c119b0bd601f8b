"""pyg_dynscale: fast and distributed training of dynamic GNNs on snapshot graphs.

The names below are imported on first use (PEP 562), not with the package:
``import pyg_dynscale`` (and so ``pyg-dynscale --help``) does not import torch
or torch_geometric, which take seconds.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import DynScaleError, MissingDependencyError, SignalFormatError, SignalValidationError

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports them
    from .data import DynamicGraphSignal, SignalStatistics, Supergraph, temporal_signal_split

__version__ = "0.1.0"

#: Public name -> the module that defines it, imported when the name is first read.
_LAZY = {
    "DynamicGraphSignal": "pyg_dynscale.data",
    "Supergraph": "pyg_dynscale.data",
    "SignalStatistics": "pyg_dynscale.data",
    "temporal_signal_split": "pyg_dynscale.data",
}

__all__ = [
    "DynamicGraphSignal",
    "Supergraph",
    "SignalStatistics",
    "temporal_signal_split",
    "DynScaleError",
    "MissingDependencyError",
    "SignalFormatError",
    "SignalValidationError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # once: later reads do not come back here
        return value
    raise AttributeError(f"module 'pyg_dynscale' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
