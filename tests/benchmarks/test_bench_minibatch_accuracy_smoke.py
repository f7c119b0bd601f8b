"""bench_minibatch_accuracy runs (``--quick``, in this process: no process starts) and its table holds
what it must: one 1x1x1 row, each 2x1x1 row at the rate its lr_scaling gives, the rates training apart."""
from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_minibatch_accuracy_quick(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        rows = importlib.import_module("bench_minibatch_accuracy").main(["--quick"])
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    out = capsys.readouterr().out
    assert list(rows) == ["1x1x1 none", "2x1x1 none", "2x1x1 linear", "2x1x1 sqrt"], out
    assert [rows[k]["lr"] for k in rows] == [1e-4, 1e-4, 2e-4, 1e-4 * math.sqrt(2)]
    assert all(len(r["ap"]) == 2 and all(0 < a < 1 for a in r["ap"]) for r in rows.values())
    losses = [tuple(r["loss"]) for r in rows.values()]
    assert len(set(losses)) == 4, out  # four different runs (the rate changes the training)
    assert "test AP after each epoch" in out and "test AP minus 1x1x1's" in out and "(any)" in out
