"""Smoke tests of the GPU benchmark and of `make gpu-check` on a machine without
a GPU (the same on a GPU machine: the benchmark runs with ``--device cpu``, gpu_check.py
with CUDA hidden): the CPU rows of benchmarks/bench_gpu.py run and are recorded, the
CUDA-only rows are marked pending, the report renders, and gpu_check.py says there is
nothing to check.

The benchmark's ``main()`` runs in this process (tests/helpers/bench_quick.py: no fresh
interpreter importing torch, PyG and PyGT, and section c's two ranks come from the suite's
fork server), which is most of its CPU time: its rows themselves take a few seconds."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers.bench_quick import run_quick

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _env() -> dict[str, str]:
    # one thread per process: 2 cores shared with the test's own spawned ranks
    path = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join(path))


def _pygt_runs() -> bool:
    return all(importlib.util.find_spec(m) is not None
               for m in ("torch_geometric_temporal", "torch_scatter", "torch_sparse"))


def test_bench_gpu_quick_cpu_rows(tmp_path: Path, capfd) -> None:
    out = tmp_path / "gpu.json"
    # exit status 0 (1: a row ended in an error), as `python benchmarks/bench_gpu.py --quick --device cpu` would
    stdout = run_quick(capfd, "bench_gpu", "--quick", "--device", "cpu", "--threads", "1", "--out", str(out))
    assert "GPU rows pending: no CUDA device" in stdout
    res = json.loads(out.read_text())
    assert res["env"]["device"] == "cpu" and res["env"]["torch"] and res["env"]["date"]

    # a. every model x dataset is a row: measured, or SKIPPED with its reason -- never missing
    rows = {(r["model"], r["dataset"]): r for r in res["pygt_vs_fused"]}
    assert set(rows) == {(m, d) for m in ("tgcn", "gconvgru", "mpnnlstm", "dcrnn", "a3tgcn")
                         for d in ("chickenpox", "england_covid", "synthetic")}
    for r in rows.values():
        assert r["status"] in ("ok", "skipped"), r
        if r["status"] == "skipped":
            assert r["reason"] and any(r["reason"] in s for s in res["skipped"]), r
            assert "SKIPPED" in stdout
        else:
            assert r["pygt_s"] > 0 and r["fused_s"] > 0 and r["ratio"] > 0
            assert r["pygt_peak_bytes"] is None and r["fused_peak_bytes"] is None  # CPU: n/a
            assert r["max_loss_diff"] < 1e-3  # both loops train the same model the same way
    if _pygt_runs():
        assert all(rows[m, d]["status"] == "ok" for m, d in rows if d != "chickenpox")

    # b. streamed == in-memory; the CUDA search is pending
    cmp_ = res["streaming"]["compare"]
    assert cmp_["status"] == "ok" and cmp_["losses_equal"] is True, cmp_
    assert cmp_["in_memory"]["epoch_s"] > 0 and cmp_["streamed"]["epoch_s"] > 0
    assert 0 < cmp_["bytes_moved"] < cmp_["bytes_naive"]  # graph difference moves less than whole windows
    assert res["streaming"]["search"]["status"] == "pending"

    # c. 1 vs 2 gloo ranks, staged and direct, on both graphs
    dist = {(r["dataset"], r["backend"]): r for r in res["distributed"]}
    assert set(dist) == {(d, b) for d in ("england_covid", "synthetic") for b in ("staged", "direct")}
    for (_, backend), r in dist.items():
        assert r["status"] == "ok" and r["transport"] == backend, r
        assert r["one_rank_s"] > 0 and r["two_ranks_s"] > 0 and r["max_loss_diff"] < 1e-3

    assert {p["section"] for p in res["pending"]} == {"a", "b", "c"}
    assert all(p["reason"] == "no CUDA device" for p in res["pending"])

    # the report gpu_check.py writes from it: newest first, below the intro, placeholder gone
    sys.path.insert(0, str(BENCH))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(BENCH))
    page = tmp_path / "gpu.md"
    shutil.copy(ROOT / "docs" / "gpu.md", page)
    tests = {"status": "ran", "returncode": 1, "seconds": 1.0, "passed": 2, "failed": 1, "errors": 0, "skipped": 0,
             "failures": ["tests.test_x::test_y"]}
    gpu_check.prepend_report(page, gpu_check.render_section(res["env"], tests, {"status": "ran", "returncode": 0,
                                                                                 "results": res}))
    text = page.read_text()
    assert "No GPU run recorded yet" not in text and text.index("## How to produce") < text.index("passed 2, failed 1")
    assert "`tests.test_x::test_y`" in text
    assert ("| T-GCN | england_covid |" if _pygt_runs() else "| SKIPPED |") in text
    assert "2 ranks" in text and "streamed" in text and "pending: no CUDA device" in text


def test_gpu_check_without_cuda_says_so_and_exits_0(tmp_path: Path) -> None:
    page = tmp_path / "gpu.md"
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--report", str(page)],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "no CUDA device: nothing to check"
    assert not page.exists()  # nothing measured, nothing recorded (no test run, no benchmark: the one line above)
