"""A command-line job that several test modules of this folder check, run once per session (a ``--nproc`` job
costs ~10 s of process start-up on 2 cores, whatever it trains)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def two_process_defaults_run() -> dict:
    """``pyg-dynscale train --nproc 2`` with ``--scheme`` and ``--device`` at their defaults (``auto``): its JSON
    report. ``test_cli_auto.py`` checks the scheme it chose and says so, ``test_cli_device.py`` its device keys."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train", "england_covid", "--model", "mpnnlstm-dgc",
                           "--hidden", "8", "--epochs", "1", "--nproc", "2", "--json", "--no-progress"],
                          capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)
