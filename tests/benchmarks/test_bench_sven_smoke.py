"""bench_owner_map and bench_sven_pipeline run (``--quick``) and their tables say what they must."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quick(name: str, capsys) -> str:
    """``main(["--quick"])`` of benchmark ``name`` in this process (with ranks: from the suite's fork
    server, tests/fast_spawn.py, not fresh interpreters); its printed table."""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # ranks import the benchmark by name, with this path
    try:
        importlib.import_module(name).main(["--quick"])
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return capsys.readouterr().out


def test_bench_owner_map_quick(capsys):
    out = _quick("bench_owner_map", capsys)
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] in (["interval"], ["random"])]
    assert len(rows) == 2 and all(float(r[3]) > 0 and float(r[4]) > 0 for r in rows)
    assert "hash/dense: median" in out and "load average" in out


def test_bench_sven_pipeline_quick(capsys):
    out = _quick("bench_sven_pipeline", capsys)
    rows = {ln[:20].strip(): ln[20:].split() for ln in out.splitlines() if ln[:20].strip().startswith(("replicated", "sven"))}
    assert len(rows) == 7, out
    sync = [r[2] for label, r in rows.items() if "delayed" not in label]
    assert len(set(sync)) == 1, out  # dropout off: every synchronous configuration trains the same numbers
    assert rows["sven n=1 delayed"][2] != rows["sven n=1 sync"][2]  # the delayed rule is another one
    assert len({r[4] for label, r in rows.items() if label.startswith("sven")}) == 1  # aggregation bytes: n-free
    assert float(rows["sven n=4"][3]) > float(rows["sven n=1 sync"][3]) > 0  # more dispatch bytes with n = 4
    assert 1 <= int(rows["sven n=auto"][-1]) <= 8
