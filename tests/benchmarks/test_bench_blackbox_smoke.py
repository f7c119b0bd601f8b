"""Smoke test: benchmarks/bench_blackbox.py --quick runs every section, and
its distributed runs measure the bytes their plans predict (asserted inside)."""
from __future__ import annotations

import re

import pytest

from tests.helpers.bench_quick import run_quick


def test_bench_blackbox_quick(capfd):
    pytest.importorskip("torch_geometric_temporal")
    text = run_quick(capfd, "bench_blackbox", "--quick")  # in this process: no interpreter to start
    for header in ("== 1.", "== 2.", "== 3.", "== 4.", "== 5."):
        assert header in text, text
    # one row per dataset x cell in section 1, each with a positive 2-rank epoch time
    rows = [line for line in text.splitlines()
            if re.match(r"^(england_covid|synthetic|road_grid|road_grid_shuffled(\+loc)?)\s+(GConvGRU|DCRNN)\s", line)]
    assert len(rows) == 10, text
    for line in rows:
        assert float(line.split()[6]) > 0
    # locality shrinks the shuffled grid's halo (local/own, the last column)
    loc = {line.split()[0]: float(line.split()[-1]) for line in rows if line.split()[1] == "DCRNN"}
    assert loc["road_grid_shuffled+loc"] < loc["road_grid_shuffled"], text
    # memory: one process and 2 ranks, both paths, each with and without checkpointing
    mem = [line for line in text.splitlines() if re.match(r"^(blackbox|decomposed)\s+\w+\s+[12]\s", line)]
    assert len(mem) == 8, text
    assert text.count("peak off / on") == 4
    # reuse: PyGT's loop, reuse off and on for five cells and RecurrentGCN on two graphs, the same first loss (float32)
    reuse = [line.split() for line in text.splitlines()
             if re.match(r"^(chickenpox|static2000)\s+(GConvGRU|GConvLSTM|DCRNN|GCLSTM|TGCN|RecurrentGCN)\s", line)]
    assert len(reuse) == 12, text
    for r in reuse:
        assert all(float(v) > 0 for v in r[4:7]) and r[7].endswith("x") and r[8].endswith("x"), r
        assert float(r[9]) < 1e-4, r
