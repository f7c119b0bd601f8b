r"""The layer under the three trainer families (snapshots, windows, events):
one trainer surface (:mod:`.surface`), the options spelled the same everywhere
(:mod:`.options`), byte accounting (:mod:`.traffic`), and the distributed
plumbing every family shares: ranks, groups, devices and the set-up agreement
(:mod:`.ranks`), summing gradients (:mod:`.gradients`), what a trainer saves
(:mod:`.state`), checkpoints (:mod:`.checkpoint`), launching local ranks
(:mod:`.launch`) and naming the rank that failed (:mod:`.failure`).
"""
from .options import OPTIMIZERS, build_optimizer
from .ranks import agree, slowest_rank_seconds
from .state import Checkpointable
from .surface import METRIC_NAMES, BaseTrainer, Metrics
from .traffic import ByteLedger, TrafficReport

__all__ = ["BaseTrainer", "Metrics", "METRIC_NAMES", "OPTIMIZERS", "build_optimizer", "ByteLedger", "TrafficReport",
           "Checkpointable", "agree", "slowest_rank_seconds"]
