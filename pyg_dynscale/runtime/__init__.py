"""Runtimes: the fused single-device trainer and the per-snapshot reference loops."""
from .cpu_tuning import tune_cpu_allocator
from .fused import LOSSES, FusedTrainer, snapshot_mean
from ..nn.reference import dysat_per_snapshot, per_snapshot_outputs

__all__ = ["FusedTrainer", "LOSSES", "snapshot_mean", "per_snapshot_outputs", "dysat_per_snapshot", "tune_cpu_allocator"]
