"""benchmarks/compare_checkouts.py: both sides measured in one run, the table's ratios computed from the medians.

``--base HEAD --quick``: the base is this checkout's commit in a temporary worktree, the head this working tree; one
round of the stand-in's first partition (torch backend) and bench_pgc_scale at 20k nodes (no numba rows: each side
compiles only FM's loop, into a cache of its own).
"""
from __future__ import annotations

import json
import math
import re
import subprocess

import pytest

from tests.helpers.bench_quick import ROOT, run_quick

ROWS = ("first partition stand-in england_covid [torch]", "bench_pgc_scale --nodes 2e4 [torch] wall",
        "bench_pgc_scale --nodes 2e4 [torch] user CPU")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_compare_checkouts_quick(capfd, tmp_path):
    if _git("rev-parse", "HEAD").returncode != 0:
        pytest.skip("not a git checkout: compare_checkouts needs `git worktree`")
    out = run_quick(capfd, "compare_checkouts", "--base", "HEAD", "--quick", "--json", str(tmp_path / "c.json"))
    data = json.loads((tmp_path / "c.json").read_text())
    assert set(data["ratios"]) == set(ROWS)
    for name in ROWS:
        base, head = data["medians"][f"{name}|base"], data["medians"][f"{name}|head"]
        assert all(math.isfinite(x) and x > 0 for x in (base, head))
        # measured, not a constant: the one round's values, and the ratio of the two medians
        assert (base, head) == (data["runs"][0][f"{name}|base"], data["runs"][0][f"{name}|head"])
        assert data["ratios"][name] == pytest.approx(head / base, rel=1e-12)
        line = next(ln for ln in out.splitlines() if ln.startswith(name))
        b, h, r = (float(x) for x in re.findall(r"[0-9]+\.[0-9]+", line[len(name):]))
        assert (b, h, r) == (round(base, 3), round(head, 3), round(head / base, 3))
    base_tree = re.search(r"^base HEAD \(\w+, (\S+)\)", out, re.M).group(1)
    assert base_tree != str(ROOT) and base_tree not in _git("worktree", "list").stdout  # checked out, then removed
