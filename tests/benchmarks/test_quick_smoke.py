"""Every benchmark runs: the ``--quick`` mode of the five without a smoke test
elsewhere, each checked for what its table must say (the others: bench_schemes,
bench_blackbox, bench_gpu, bench_generator, bench_temporal_fusion,
bench_transfer and bench_pgc_scale are run by the tests of their modules)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _quick(name: str, *extra: str) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--quick", *extra],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    return proc.stdout


def test_bench_distributed_quick():
    out = _quick("bench_distributed")
    rows = [ln.split() for ln in out.splitlines() if re.match(r"\s+(PyGT-\w+(-\w+)?|PGC(\+fusion)?)\s+\d", ln)]
    assert {r[0] for r in rows} == {"PyGT-PSS", "PyGT-PTS", "PyGT-PSS-TS", "PGC", "PGC+fusion"}
    assert all("True" in r for r in rows)  # measured bytes == plan on every configuration
    assert len({r[-1] for r in rows}) == 1  # the same loss: one runtime, exact, whatever the configuration
    assert "speed-up" in out


def test_bench_stale_quick():
    out = _quick("bench_stale")
    exact = next(ln for ln in out.splitlines() if ln.strip().startswith("no stale"))
    assert exact.split()[2] == "0.00"  # the exact path saves no traffic
    adaptive = next(ln for ln in out.splitlines() if ln.strip().startswith("adaptive ") and "%" not in ln)
    assert float(adaptive.split()[1]) > 50  # the cache saves traffic
    assert "Average over rows" in out


def test_bench_fused_vs_pygt_quick():
    pytest.importorskip("torch_geometric_temporal")
    out = _quick("bench_fused_vs_pygt")
    diffs = [float(m) for m in re.findall(r"max \|loss diff\| = ([0-9.e+-]+)", out)]
    assert diffs and max(diffs) < 1e-3  # the fused trainer trains what PyGT's loop trains
    assert len(re.findall(r"speedup [0-9.]+x", out)) == len(diffs)


def test_bench_pgc_vs_metis_quick():
    pytest.importorskip("pymetis")
    out = _quick("bench_pgc_vs_metis", "--graphs", "planted,synthetic:2e4")
    pgc = [ln.split() for ln in out.splitlines() if ln.strip().startswith("pgc ")]
    assert len(pgc) == 2 and all(float(r[1].replace(",", "")) > 0 for r in pgc)
    assert out.count("goal: bytes <= 1.3x METIS") == 2


def test_bench_workload_quick():
    out = _quick("bench_workload")
    mape = {ln.split()[0]: ln.split() for ln in out.splitlines() if re.match(r"\s+(mlp|linear|vertex)\s", ln)}
    assert {"mlp", "linear", "vertex"} <= set(mape)
    assert "lambda measured" in out
