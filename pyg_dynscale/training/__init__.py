r"""The layer under the three trainer families (snapshots, windows, events):
one trainer surface (:mod:`.surface`), the options spelled the same everywhere
(:mod:`.options`), byte accounting (:mod:`.traffic`), and the distributed
plumbing every family shares (ranks, gradients, state, checkpoints, launch,
failure reporting).
"""
from .options import OPTIMIZERS, build_optimizer
from .surface import METRIC_NAMES, BaseTrainer, Metrics
from .traffic import ByteLedger, TrafficReport

__all__ = ["BaseTrainer", "Metrics", "METRIC_NAMES", "OPTIMIZERS", "build_optimizer", "ByteLedger", "TrafficReport"]
