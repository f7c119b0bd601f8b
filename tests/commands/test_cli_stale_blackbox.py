"""`pyg-dynscale train --model gconvgru --stale drift:EPS --nproc 2`: the stale cache on the black-box path from
the command line -- it caches state rows (fewer bytes than the plan, masks counted), and a job stopped after one
epoch and resumed (--resume) goes on with the cache it checkpointed (two 2-process jobs: the uninterrupted job
checkpoints every epoch; the stop after epoch 1 is a copy of its checkpoint folder without the later checkpoint,
what a job killed during epoch 2 leaves)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EPOCHS = 2


def _run(*extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train", "england_covid", "--model", "gconvgru",
                           "--nproc", "2", "--epochs", str(EPOCHS), "--json", "--no-progress", "--device", "cpu",
                           "--stale", "drift:0.05", *extra],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_black_box_stale_cache_and_resume_from_the_command_line(tmp_path) -> None:
    whole_ck, ck = tmp_path / "whole", tmp_path / "ck"
    whole = _run("--checkpoint-dir", str(whole_ck), "--checkpoint-every", "1")
    assert whole["stale"].startswith("drift:0.05")
    assert whole["stale_fresh_fraction"][0] == 1.0 and max(whole["stale_fresh_fraction"][1:]) < 1.0
    m, p = whole["bytes_measured"], whole["bytes_predicted"]
    assert m["total"][0] == p["total"][0] and m["stale_meta"][0] == 0  # the first epoch: everything, no masks
    assert all(a < b for a, b in zip(m["total"][1:], p["total"][1:])) and min(m["stale_meta"][1:]) > 0
    # stopped after epoch 1: the checkpoint of epoch 1 is the newest it wrote
    shutil.copytree(whole_ck, ck)
    shutil.rmtree(ck / f"epoch-{EPOCHS:06d}")
    assert sorted(e for e in os.listdir(ck) if e.startswith("epoch-")) == ["epoch-000001"], os.listdir(ck)
    resumed = _run("--checkpoint-dir", str(ck), "--checkpoint-every", "1", "--resume")
    assert resumed["resumed_from_epoch"] == 1
    # the restored cache: epoch 2 sends what the uninterrupted job sent (an empty cache would send every row)
    assert resumed["stale_fresh_fraction"][1:] == whole["stale_fresh_fraction"][1:]
    assert resumed["losses"] == whole["losses"]
