"""Data: the snapshot-graph container, its supergraph view, statistics, I/O."""
from .fields import SnapshotField
from .ingest import ingest_edge_list, ingest_event_list, ingest_jodie_csv, ingest_pygt_json
from .mapped import MappedStore, StoreFormatError, StoreWriter, load_events_store, save_events_store, save_signal_store
from .signal import DynamicGraphSignal, temporal_signal_split
from .stats import SignalStatistics, coefficient_of_variation, empirical_cdf
from .supergraph import Supergraph

__all__ = [
    "DynamicGraphSignal",
    "MappedStore",
    "StoreFormatError",
    "StoreWriter",
    "ingest_edge_list",
    "ingest_event_list",
    "ingest_jodie_csv",
    "ingest_pygt_json",
    "load_events_store",
    "save_events_store",
    "save_signal_store",
    "SnapshotField",
    "SignalStatistics",
    "Supergraph",
    "coefficient_of_variation",
    "empirical_cdf",
    "temporal_signal_split",
]
