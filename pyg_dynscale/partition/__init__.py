r"""Partitioning dynamic graphs over ranks (DGC §4, SC'21 PSS-TS).

A partition is an owner array over vertex-time nodes
(:class:`Partition`); a model's :class:`DependencyPattern` says which rows a
block needs; :class:`CommunicationPlan` turns both into the exact rows that
cross ranks, per block, phase and rank pair. See ``docs/partitioning.md`` and
``docs/design.md``.

Importing the package loads only what a training process needs -- the
owner arrays, patterns, the plan, the metrics and file I/O -- and none of the
compiled partitioning algorithms (numba): :func:`partition`,
:func:`partition_pgc`, the PSS / PTS schemes and the workload models are
imported on first use.
"""
from __future__ import annotations

import importlib
from typing import Any

from .costs.node import default_node_cost
from .io import load_partition, save_partition
from .metrics import PartitionMetrics, compare, evaluate, format_table
from .partition import SCHEMES, Partition
from .pattern import BlockPattern, DependencyPattern
from .plan import CommunicationPlan, Exchange

# ``from .partition import`` bound the submodule ``partition`` here; the
# package's ``partition`` is the dispatcher function (resolved lazily below)
del partition  # noqa: F821

#: public names loaded on first use, and the submodule that defines each
_LAZY = {
    "partition": "schemes.dispatch", "partition_pss": "schemes.snapshot_sequence",
    "partition_pts": "schemes.snapshot_sequence", "partition_pss_ts": "schemes.snapshot_sequence",
    "partition_pgc": "pgc.pipeline", "PGCOptions": "pgc.options",
    "LinearWorkload": "costs.workload", "MLPWorkload": "costs.workload", "profile": "costs.workload",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BlockPattern", "DependencyPattern", "Partition", "CommunicationPlan", "Exchange",
    "SCHEMES", "default_node_cost", "partition", "partition_pss", "partition_pts", "partition_pss_ts",
    "PartitionMetrics", "compare", "evaluate", "format_table", "load_partition", "save_partition",
    "partition_pgc", "PGCOptions", "LinearWorkload", "MLPWorkload", "profile",
]
