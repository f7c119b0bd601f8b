"""Data: the snapshot-graph container, its supergraph view, statistics, I/O."""
from .fields import SnapshotField
from .signal import DynamicGraphSignal, temporal_signal_split
from .stats import SignalStatistics, coefficient_of_variation, empirical_cdf
from .supergraph import Supergraph

__all__ = [
    "DynamicGraphSignal",
    "SnapshotField",
    "SignalStatistics",
    "Supergraph",
    "coefficient_of_variation",
    "empirical_cdf",
    "temporal_signal_split",
]
