"""Smoke test: benchmarks/bench_schemes.py --quick runs and its rows are consistent."""
from __future__ import annotations

import importlib.util
import json
import os

from tests.helpers.datasets import datasets_dir

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_bench_schemes_quick(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_schemes", os.path.join(ROOT, "benchmarks", "bench_schemes.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # --quick reads pygt/pedalme_london.json: ../shared's, else its stand-in
    mod.DATA = str(datasets_dir("pygt/pedalme_london.json"))
    out = tmp_path / "rows.json"
    assert mod.main(["--quick", "--models", "dysat", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert not [r for r in rows if "error" in r]
    schemes = {r["scheme"] for r in rows}
    assert {"pss", "pss-bal", "pts", "pts-bal", "pss-ts", "pgc", "pgc-dgc"} <= schemes
    for r in rows:
        assert r["bytes_total"] == r["bytes_spatial"] + r["bytes_temporal"] + r["bytes_redistribution"]
        if r["scheme"] == "pss":
            assert r["bytes_spatial"] == 0 and r["cut_spatial_edges"] == 0
        if r["scheme"].startswith("pts"):
            assert r["bytes_temporal"] == 0
        if r["scheme"] == "pgc-dgc":  # DGC's own PGC: label propagation + Algorithm 1, nothing else
            assert r["start"] == "lp"
        if r["scheme"] == "pgc":
            assert r["start"] in ("lp", "pss", "pts")
            twin = next(d for d in rows if d["scheme"] == "pgc-dgc" and (d["dataset"], d["model"], d["num_parts"])
                        == (r["dataset"], r["model"], r["num_parts"]))
            # the multi-start keeps DGC's start unless another one moves fewer bytes
            assert r["bytes_total"] <= twin["bytes_total"]
            assert (r["start"] == "lp") == (r["bytes_total"] == twin["bytes_total"])
            # a flag is set exactly when PGC moves more bytes than the best baseline or is unbalanced
            assert bool(r["flag"]) == (r["bytes_vs_best_baseline"] > 1 or r["lambda"] > mod.LAMBDA_LIMIT)
    out = capsys.readouterr().out
    assert "flagged PGC rows" in out and "PGC multi-start winners:" in out
