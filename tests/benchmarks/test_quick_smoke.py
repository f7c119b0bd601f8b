"""Every benchmark runs: the ``--quick`` mode of those without a smoke test
elsewhere, each checked for what its table must say (the others: bench_schemes,
bench_blackbox, bench_gpu, bench_generator, bench_temporal_fusion,
bench_transfer and bench_pgc_scale are run by the tests of their modules;
bench_stale by examples/04_stale_embeddings.ipynb, whose table
tests/docs/test_notebooks.py checks: one run of it, not two).

Each runs in this process (tests/helpers/bench_quick.py), not in a fresh interpreter: one import of torch and PyG
less per benchmark; bench_host_syncs, which counts host read-backs by wrapping torch's functions, keeps its own
interpreter.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.bench_quick import run_quick

ROOT = Path(__file__).resolve().parents[2]


def _quick(capfd, name: str, *extra: str) -> str:
    return run_quick(capfd, name, "--quick", *extra)


def _quick_process(name: str, *extra: str) -> str:
    """The same in a fresh interpreter (a benchmark that patches torch to count calls)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--quick", *extra],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    return proc.stdout


def test_bench_distributed_quick(capfd):
    out = _quick(capfd, "bench_distributed")
    rows = [ln.split() for ln in out.splitlines() if re.match(r"\s+(PyGT-\w+(-\w+)?|PGC(\+fusion)?(\+rounds)?)\s+\d", ln)]
    assert {r[0] for r in rows} == {"PyGT-PSS", "PyGT-PTS", "PyGT-PSS-TS", "PGC", "PGC+fusion", "PGC+fusion+rounds"}
    assert all("True" in r for r in rows)  # measured bytes == plan on every configuration
    assert len({r[-1] for r in rows}) == 1  # the same loss: one runtime, exact, whatever the configuration
    assert "speed-up" in out


def test_bench_fused_vs_pygt_quick(capfd):
    pytest.importorskip("torch_geometric_temporal")
    out = _quick(capfd, "bench_fused_vs_pygt")
    diffs = [float(m) for m in re.findall(r"max \|loss diff\| = ([0-9.e+-]+)", out)]
    assert diffs and max(diffs) < 1e-3  # the fused trainer trains what PyGT's loop trains
    assert len(re.findall(r"speedup [0-9.]+x", out)) == len(diffs)


def test_bench_pgc_vs_metis_quick(capfd):
    pytest.importorskip("pymetis")
    out = _quick(capfd, "bench_pgc_vs_metis", "--graphs", "planted,synthetic:2e4")
    pgc = [ln.split() for ln in out.splitlines() if ln.strip().startswith("pgc ")]
    assert len(pgc) == 2 and all(float(r[1].replace(",", "")) > 0 for r in pgc)
    assert out.count("goal: bytes <= 1.3x METIS") == 2


def test_bench_workload_quick(capfd):
    out = _quick(capfd, "bench_workload")
    mape = {ln.split()[0]: ln.split() for ln in out.splitlines() if re.match(r"\s+(mlp|linear|vertex)\s", ln)}
    assert {"mlp", "linear", "vertex"} <= set(mape)
    assert "lambda measured" in out


def _windows_features() -> dict:
    """Which of bench_windows' optional sections can run: {"not built yet" line start: missing?}."""
    import importlib.util
    import inspect

    from pyg_dynscale.windows import WindowTrainer

    kw = inspect.signature(WindowTrainer.__init__).parameters
    has = lambda m: importlib.util.find_spec(m) is not None  # noqa: E731
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        bench_run = has("bench_incremental") and hasattr(importlib.import_module("bench_incremental"), "run")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return {
        "incremental aggregation (": not has("pyg_dynscale.nn.incremental"),
        "incremental aggregation's benchmark function": has("pyg_dynscale.nn.incremental") and not bench_run,
        "WindowTrainer(incremental=": "incremental" not in kw,
        "the two-level cache": not (has("pyg_dynscale.windows.cache") and "cache_bytes" in kw),
        "WindowTrainer(placement=": "placement" not in kw,
        "bytes of vertex partitions": "placement" in kw and not has("pyg_dynscale.windows.placement_costs"),
    }


def _md_rows(out: str, first: str) -> list:
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in out.splitlines() if re.match(first, ln)]


def test_bench_windows_quick(capfd):
    """Every row of PyGT's index-batching loops and ours, a ratio on each, the same first
    loss where the same computation runs, the reuse table, the sections of the features that
    exist, and "not built yet" exactly for the features the package lacks."""
    pytest.importorskip("torch_geometric_temporal")
    features = _windows_features()
    out = _quick(capfd, "bench_windows")
    rows = _md_rows(out, r"\| (Chickenpox|road) \| (DCRNN|TGCN|A3TGCN) \|")
    loops = {
        "DCRNN": ["PyGT loop, BatchedDCRNN(K=3)", "WindowTrainer, BatchedDCRNN as is",
                  "WindowTrainer, DCRNN(K=3), reuse=True", "WindowTrainer, DCRNN(K=3), reuse=False"],
        "TGCN": ["PyGT loop, TGCN2 + Linear", "WindowTrainer, TGCN + Linear, reuse=True",
                 "WindowTrainer, TGCN + Linear, reuse=False"],
        "A3TGCN": ["PyGT loop, A3TGCN2 + Linear", "WindowTrainer, A3TGCN + Linear, reuse=True",
                   "WindowTrainer, A3TGCN + Linear, reuse=False"],
    }
    for ds in ("Chickenpox", "road"):
        for fam, labels in loops.items():
            got = [r for r in rows if r[0] == ds and r[1] == fam]
            assert [r[2] for r in got] == labels, (ds, fam)
            assert got[0][4] == "1.00x" and all(re.fullmatch(r"\d+\.\d\dx", r[4]) for r in got)
            assert all(float(r[3].split()[0]) > 0 and "extrapolated from 1 of" in r[3] for r in got)
            # the ratio is PyGT's time / the row's, both printed to 1 ms: within what that rounding allows
            t0 = float(got[0][3].split()[0])
            for r in got:
                t, ratio = float(r[3].split()[0]), float(r[4][:-1])
                lo, hi = (t0 - 5e-4) / (t + 5e-4), (t0 + 5e-4) / max(t - 5e-4, 1e-9)
                assert lo * 0.99 - 0.01 <= ratio <= hi * 1.01 + 0.01, (ds, fam, r)
            first = [float(r[8]) for r in got]
            # ours starts from PyGT's weights and computes the same losses (float32 rounding)
            assert all(abs(f - first[0]) <= 1e-3 * abs(first[0]) for f in first), (ds, fam, first)
    assert "target: PyGT / ours >= 3x on every row" in out
    reuse = [ln for ln in out.splitlines() if re.match(r"\| (Chickenpox|road) \| (DCRNN|TGCN|A3TGCN)", ln) and ln.count("|") == 7]
    assert len(reuse) == 6 and all(re.search(r"\| \d+\.\d\dx \|", ln) for ln in reuse)
    for what, missing in features.items():
        assert (f"not built yet: {what}" in out) == missing, what
    assert out.count("not built yet") == sum(features.values())
    if not features["incremental aggregation ("] and not features["incremental aggregation's benchmark function"]:
        inc = _md_rows(out, r"\| 0\.\d+ \| gcn \|")
        assert len(inc) == 3 and "crossover gcn" in out
    if not features["WindowTrainer(incremental="]:
        inc = _md_rows(out, r"\| TGCN \+ Linear \| incremental=")
        assert [r[1] for r in inc] == ["incremental=False", "incremental=True"] and inc[0][-1] == inc[1][-1]
    if not features["the two-level cache"]:
        cache = _md_rows(out, r"\| (unbounded|\d[\d,]* B) ")
        assert [r[0].split(",")[-1].strip() for r in cache] == ["unbounded", "reinc", "lru", "reinc", "lru"]
        assert len({r[-1] for r in cache}) == 1           # the same loss at every bound
        assert cache[0][1] == "1.000" and cache[-1][1] == "0.000"  # unbounded: every read a hit; bound 0: none
        assert all(int(r[4].replace(",", "")) <= int(r[0].split()[0].replace(",", "")) for r in cache[1:])
    if not features["WindowTrainer(placement="]:
        placed = _md_rows(out, r"\| 2 \| (blocks|replicated) \| \d+\.\d{3} \|")   # measured, not computed
        assert [r[1] for r in placed] == ["blocks", "replicated"] and all(r[3] == "0" for r in placed)
        assert placed[0][6] == placed[1][6]                 # both placements train the same
        assert int(placed[0][5].replace(",", "")) < int(placed[1][5].replace(",", ""))  # blocks hold less
        if not features["bytes of vertex partitions"]:
            assert len(_md_rows(out, r"\| 8 \(projection\) \|")) >= 2


def test_bench_incremental_quick(capfd):
    out = _quick(capfd, "bench_incremental")
    rows = [ln.split() for ln in out.splitlines() if re.match(r"\s+0\.\d+\s+(sum|gcn|cheb)", ln)]
    assert {r[1] for r in rows} == {"sum", "gcn", "cheb"} and len(rows) == 9
    for r in rows:  # the incremental/scratch column is the ratio of the two time columns (printed to 1 ms)
        scratch, inc, ratio = float(r[-5]), float(r[-4]), float(r[-2])
        if scratch > 0.001:
            assert (inc - 5e-4) / (scratch + 5e-4) - 0.01 <= ratio <= (inc + 5e-4) / (scratch - 5e-4) + 0.01
    assert sum(ln.startswith("crossover") for ln in out.splitlines()) == 3


def test_bench_node_batches_quick(capfd):
    out = _quick(capfd, "bench_node_batches")
    assert "one node batch == full epoch loss: True" in out  # the exactness the table relies on
    rows = [ln.split() for ln in out.splitlines() if re.match(r"(TGCN|GConv\w+\(K=2\))\s+\d", ln)]
    assert rows and all(float(r[-2]) >= float(r[-1]) > 0 for r in rows)  # computed rows >= the exact need


def test_bench_ctdg_quick(capfd):
    out = _quick(capfd, "bench_ctdg", "--epochs", "1")
    rows = [ln.split() for ln in out.splitlines() if re.match(r"(CollegeMsg|synthetic)\b", ln)]
    assert len(rows) == 2
    for r in rows:
        ex, mine, ratio, ex_loss, loss = float(r[-7]), float(r[-6]), float(r[-5].rstrip("x")), r[-4], r[-3]
        assert abs(mine / ex - ratio) <= 0.011 * ratio + 0.01
        assert ex_loss == loss  # the trainer reproduces the example's loss


def test_bench_host_syncs_quick():
    pytest.importorskip("torch_geometric_temporal")
    out = _quick_process("bench_host_syncs")
    rows = {ln[:48].strip(): ln[48:].split() for ln in out.splitlines() if ln.startswith("  ") and "syncs/st" not in ln}
    example = rows["PyG examples/tgn.py train()"]
    assert float(example[0]) >= 1  # the example reads back every step (its float(loss) at least)
    for placement in ("replicated", "partitioned", "sven"):  # the trainer's steps read nothing back (counted)
        r = rows[f"MemoryTrainer, memory_placement='{placement}'"]
        assert float(r[0]) == 0 and r[1] == "0" and r[3] == "none" and float(r[2]) > 0, r
    pygt = rows["PyGT loop, BatchedDCRNN(K=3)"]
    ours = rows["WindowTrainer, DCRNN(K=3), reuse=True"]
    assert float(ours[0]) < 1 <= float(pygt[0])  # one read-back per epoch vs several per batch
