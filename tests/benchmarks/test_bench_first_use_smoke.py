"""benchmarks/bench_first_use.py --quick: a fresh interpreter on an empty numba cache runs the torch twins of a
small graph (the reason compiled/backend.py's "auto" rule gives), and measures both partition calls."""
from __future__ import annotations

import json

from tests.helpers.bench_quick import run_quick


def test_bench_first_use_quick(capfd, tmp_path):
    out = run_quick(capfd, "bench_first_use", "--quick", "--json", str(tmp_path / "rows.json"))
    (row,) = json.loads((tmp_path / "rows.json").read_text())
    cold = row["cold"]
    assert row["graph"] == "stand-in:pedalme" and cold["size"] == 632  # 64 nodes + 512 spatial + 56 temporal
    assert cold["cache_warm"] is False and cold["auto_picks"] == cold["backend"] == "torch"
    assert cold["first_s"] > 0 and cold["next_s"] > 0
    assert f"{cold['first_s']:7.2f}/{cold['next_s']:.3f}".strip() in out
