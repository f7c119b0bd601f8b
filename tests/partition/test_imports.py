"""A training process needs owner arrays, patterns, the plan and the metrics,
not the partitioning algorithms: those import without numba, and the
algorithms load on first use."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")

SCRIPT = r"""
import sys
sys.modules["numba"] = None  # any import of numba now fails
import torch
from pyg_dynscale.partition import CommunicationPlan, DependencyPattern, Partition, evaluate, load_partition
import pyg_dynscale.distributed
from tests.helpers.signals import make_dynamic_signal

s = make_dynamic_signal(seed=1, T=6, V=12)
p = Partition("custom", 2, torch.arange(s.num_vertex_time_nodes) % 2)
pat = DependencyPattern.preset("tgcn", 3, 4)
assert CommunicationPlan.build(s, p, pat).bytes_by_kind()["total"] == evaluate(s, pat, p).bytes_total > 0
loaded = sorted(k for k in sys.modules if k.startswith("pyg_dynscale.partition."))
print(" ".join(loaded))
"""


def test_plan_and_metrics_import_without_numba_or_the_algorithms():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(out.stdout.split())
    assert {"pyg_dynscale.partition.plan", "pyg_dynscale.partition.metrics"} <= loaded
    algorithms = ("schemes", "pgc", "compiled", "costs.workload", "costs.epoch", "costs.rounds", "costs.plan_bytes",
                  "algorithms")
    assert not [m for m in loaded if m.startswith(tuple(f"pyg_dynscale.partition.{a}" for a in algorithms))]


def test_algorithms_load_on_first_use():
    import pyg_dynscale.partition as part
    from pyg_dynscale.partition.schemes.dispatch import partition as dispatcher

    assert part.partition is dispatcher  # the function, not the submodule of the same name
    assert callable(part.partition_pgc) and "pgc" in part.SCHEMES
    assert {"partition", "partition_pgc", "MLPWorkload"} <= set(dir(part))
