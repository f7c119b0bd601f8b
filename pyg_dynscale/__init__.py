"""pyg_dynscale: fast and distributed training of dynamic GNNs on snapshot graphs."""
from .data import DynamicGraphSignal, Supergraph, SignalStatistics, temporal_signal_split
from .errors import DynScaleError, MissingDependencyError, SignalFormatError, SignalValidationError

__version__ = "0.1.0"

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
