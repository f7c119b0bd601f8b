"""bench_owner_map and bench_sven_pipeline run (``--quick``) and their tables say what they must."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quick(name: str, capsys) -> str:
    """``main(["--quick"])`` of benchmark ``name`` in this process (with ranks: from the suite's fork
    server, tests/helpers/fast_spawn.py, not fresh interpreters); its printed table."""
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


def test_bench_sven_quick(capsys):
    """Measured rows on 2 ranks equal their prediction, the one-process projection reproduces them
    byte for byte, Sven moves fewer N&M bytes than DepComm, and every table is there."""
    out = _quick("bench_sven", capsys)
    lines = out.splitlines()
    measured = [ln.split() for ln in lines if " 2 Dep" in ln[:40] or " 2 Sven" in ln[:40]]
    measured = [r for r in measured if r[-1] in ("True", "False")]
    assert [r[-1] for r in measured] == ["True"] * 3, out  # measured == predicted bytes, every placement
    nm = {r[-13]: int(r[-7].replace(",", "")) for r in measured}  # placement -> N&M bytes
    assert 0 < nm["Sven"] < nm["DepComm"], out
    proj = [ln for ln in lines if "projection;" in ln]
    assert len(proj) == 6, out  # M = 2, 4 x three placements
    assert sum("== measured" in ln for ln in proj) == 3 and sum("(not measured)" in ln for ln in proj) == 3, out
    assert "## PROJECTION" in out and "Sven reports 5.26x" in out and "Sven reports -59.2%" in out
    assert sum(ln.startswith("| hub") for ln in lines) == 6, out  # 2 and 4 parts x range / interval / flexbicut
    sweep = [ln.split() for ln in lines[lines.index(next(x for x in lines if x.startswith("## eta1"))) + 2:]][:2]
    assert all(0.0 < float(r[-2]) < 1.0 and 0.0 <= float(r[-1]) < 1.0 for r in sweep), out
