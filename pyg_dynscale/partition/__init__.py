r"""Partitioning dynamic graphs over ranks (DGC §4, SC'21 PSS-TS).

A partition is an owner array over vertex-time nodes
(:class:`Partition`); a model's :class:`DependencyPattern` says which rows a
block needs; :class:`CommunicationPlan` turns both into the exact rows that
cross ranks, per block, phase and rank pair. See ``docs/partitioning.md``.
"""
from .pattern import BlockPattern, DependencyPattern
from .partition import Partition
from .plan import CommunicationPlan, Exchange
from .schemes import (
    SCHEMES,
    default_node_cost,
    partition,
    partition_pss,
    partition_pss_ts,
    partition_pts,
)
from .metrics import PartitionMetrics, compare, evaluate, format_table
from .io import load_partition, save_partition
from .pgc import partition_pgc
from .workload import LinearWorkload, MLPWorkload, profile

__all__ = [
    "BlockPattern", "DependencyPattern", "Partition", "CommunicationPlan", "Exchange",
    "SCHEMES", "default_node_cost", "partition", "partition_pss", "partition_pts", "partition_pss_ts",
    "PartitionMetrics", "compare", "evaluate", "format_table", "load_partition", "save_partition",
    "partition_pgc", "LinearWorkload", "MLPWorkload", "profile",
]
