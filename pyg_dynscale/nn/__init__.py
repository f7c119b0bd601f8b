"""Drop-in dynamic-GNN layers, their decomposition (structure encoder per
snapshot, time encoder per vertex sequence), masked temporal encoders and
adapters for PyGT layers."""
from .adapters import (
    A3TGCNAdapter,
    MPNNLSTMAdapter,
    PyGTAdapter,
    SUPPORTED_PYGT_CLASSES,
    TGCN2Adapter,
    TGCNAdapter,
    adapt,
    self_check,
)
from .decomposed import DecomposedModule, FusedGraph, Halo
from .dysat import DySAT, DySATBlock
from .mpnn_lstm import MPNNLSTM, segment_batch_norm
from .mpnn_lstm_dgc import MPNNLSTMDGC
from .packing import SequencePacking, pack_sequences
from .temporal_fusion import MaskedGRU, MaskedLSTM, MaskedTemporalAttention, masked_recurrent_scan
from .tgcn import TGCN
from .tmgcn import TMGCN, m_transform

__all__ = [
    "TGCN",
    "TMGCN",
    "m_transform",
    "MPNNLSTM",
    "MPNNLSTMDGC",
    "Halo",
    "DySAT",
    "DySATBlock",
    "DecomposedModule",
    "FusedGraph",
    "adapt",
    "self_check",
    "PyGTAdapter",
    "TGCNAdapter",
    "TGCN2Adapter",
    "A3TGCNAdapter",
    "MPNNLSTMAdapter",
    "SUPPORTED_PYGT_CLASSES",
    "segment_batch_norm",
    "SequencePacking",
    "pack_sequences",
    "masked_recurrent_scan",
    "MaskedGRU",
    "MaskedLSTM",
    "MaskedTemporalAttention",
]
