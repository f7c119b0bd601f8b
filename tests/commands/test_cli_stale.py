"""`pyg-dynscale train --stale`, `--stale-kind`, `--stale-backward` and `--stale-scope` reach the runtime:
judged by what moves, not by the report's description of the options (two 2-process jobs, each checked by both
tests; the resume test adds one, resuming from a copy of the first job's checkpoints)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EPOCHS = 4


def _run(*extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train", "england_covid", "--model", "tgcn-deep",
                           "--nproc", "2", "--epochs", str(EPOCHS), "--json", "--no-progress", "--device", "cpu",
                           "--stale", "static:0.5", "--stale-kind", "temporal=static:0.9", *extra],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    """Where the first job of ``runs`` checkpoints (every 2 epochs: the last two are kept)."""
    return tmp_path_factory.mktemp("stale") / "ck"


@pytest.fixture(scope="module")
def runs(checkpoints) -> tuple:
    return (_run("--stale-backward", "skip", "--stale-scope", "local", "--checkpoint-dir", str(checkpoints),
                 "--checkpoint-every", "2"),
            _run("--stale-backward", "send", "--stale-scope", "global"))


def test_stale_cache_from_the_command_line(runs):
    """The policy, the per-kind one and the cache's effect (moved here from test_cli_train.py, whose own job for
    it only differed in theta)."""
    r = runs[0]
    assert r["stale"].startswith("static:0.5") and "temporal static:0.9" in r["stale"]
    assert r["stale_factor"] == [0.5] * EPOCHS and len(r["stale_fresh_fraction"]) == EPOCHS
    assert r["stale_fresh_fraction"][0] == 1.0 and min(r["stale_fresh_fraction"][1:]) < 1.0
    m, p = r["bytes_measured"], r["bytes_predicted"]
    assert m["total"][0] == p["total"][0]  # the first epoch sends everything, no masks yet
    assert all(a < b for a, b in zip(m["total"][1:], p["total"][1:])) and m["stale_meta"][1] > 0


def test_stale_backward_and_scope_change_what_moves(runs):
    skip_local, send_global = runs
    assert "backward send" in send_global["stale"] and "D global" in send_global["stale"]
    a, b = skip_local["bytes_measured"], send_global["bytes_measured"]
    for e in range(1, EPOCHS):
        # send: a gradient row for every planned row goes back, skip: only for the fresh ones; send's forward
        # rows are never more than planned
        assert b["spatial"][e] + b["temporal"][e] > a["spatial"][e] + a["temporal"][e], e
        # global D: one all-reduce of D per exchange besides the masks
        assert b["stale_meta"][e] > a["stale_meta"][e], e


def test_resume_continues_with_the_stale_cache(runs, checkpoints, tmp_path):
    """A job stopped after 2 epochs and resumed (--resume) goes on with the cache it checkpointed: epochs 3-4
    send the same share of rows and reach the same losses as the uninterrupted job (runs[0]); with an empty cache
    epoch 3 would send every row. The stopped job is runs[0]'s checkpoint folder without its epoch-4 checkpoint
    (what a job killed during epoch 3 or 4 leaves)."""
    whole = runs[0]
    ck = tmp_path / "ck"
    shutil.copytree(checkpoints, ck)
    shutil.rmtree(ck / f"epoch-{EPOCHS:06d}")
    assert sorted(e for e in os.listdir(ck) if e.startswith("epoch-")) == ["epoch-000002"], os.listdir(ck)
    resumed = _run("--stale-backward", "skip", "--stale-scope", "local", "--checkpoint-dir", str(ck),
                   "--checkpoint-every", "2", "--resume")
    assert resumed["resumed_from_epoch"] == 2
    assert resumed["stale_fresh_fraction"][2:] == whole["stale_fresh_fraction"][2:]
    assert resumed["stale_fresh_fraction"][2] < 1.0
    assert resumed["losses"] == whole["losses"]
