"""`pyg-dynscale train --stale-backward` and `--stale-scope` reach the runtime:
judged by what moves, not by the report's description of the options."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train", "england_covid", "--model", "tgcn-deep",
                           "--nproc", "2", "--epochs", "4", "--json", "--no-progress", "--device", "cpu",
                           "--stale", "static:0.5", *extra], capture_output=True, text=True, timeout=300, env=env,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_stale_backward_and_scope_change_what_moves():
    skip_local = _run("--stale-backward", "skip", "--stale-scope", "local")
    send_global = _run("--stale-backward", "send", "--stale-scope", "global")
    assert "backward send" in send_global["stale"] and "D global" in send_global["stale"]
    a, b = skip_local["bytes_measured"], send_global["bytes_measured"]
    for e in range(1, 4):
        # send: a gradient row for every planned row goes back, skip: only for the fresh ones; send's forward
        # rows are never more than planned
        assert b["spatial"][e] + b["temporal"][e] > a["spatial"][e] + a["temporal"][e], e
        # global D: one all-reduce of D per exchange besides the masks
        assert b["stale_meta"][e] > a["stale_meta"][e], e
