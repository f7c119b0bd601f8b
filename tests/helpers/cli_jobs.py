"""The ``pyg-dynscale train`` jobs the command tests run in subprocesses: their environment, the run, the JSON
report, a checkpoint's parameters, and the uninterrupted ``--nproc 2`` job that several modules compare with
(tests/commands/test_cli_train.py, test_cli_restart.py, test_cli_faults.py; run once per session by the
``cli_uninterrupted_run`` fixture of tests/conftest.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch


ROOT = Path(__file__).resolve().parents[2]
FAULTS = str(ROOT / "tests" / "fault_injection")
BIN = Path(sys.executable).parent
# float64, MPNN-LSTM (DGC): spatial halos, recurrent rounds and BatchNorm statistics all cross ranks
BASE = ["train", "england_covid", "--model", "mpnnlstm-dgc", "--scheme", "pgc", "--dtype", "float64", "--hidden", "8",
        "--json", "--no-progress"]


def cli_env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.update(extra)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_cli(args: list, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyg_dynscale", *args], capture_output=True, text=True,
                          timeout=timeout, env=cli_env(**env), cwd=ROOT)


def report_of(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def checkpoint_params(checkpoint: str) -> dict:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = checkpoint + ".pt"
    dcp_to_torch_save(checkpoint, out)
    flat = {}

    def walk(d: dict, prefix: str) -> None:
        for k, v in d.items():
            (walk(v, prefix + k + ".") if isinstance(v, dict) else flat.__setitem__(prefix + k, v))

    walk(torch.load(out), "")
    return flat


#: the uninterrupted job: 6 epochs on 2 processes (``--nproc``), checkpoints every 2 epochs
UNINTERRUPTED = BASE + ["--nproc", "2", "--epochs", "6", "--checkpoint-every", "2"]


def uninterrupted_run(tmp_path_factory) -> tuple[dict, str]:
    d = str(tmp_path_factory.mktemp("ckpt") / "run")
    return report_of(run_cli(UNINTERRUPTED + ["--checkpoint-dir", d])), d


def worker_pids(launcher: int) -> dict:
    out = subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True).stdout.split()
    pids = {}
    for pid in out:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for e in env:
            if e.startswith(b"RANK="):
                pids[int(e[5:])] = int(pid)
    return pids
