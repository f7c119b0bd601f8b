"""``pyg-dynscale train-events``: one 2-process job (--nproc 2, epoch parallelism 1,2,1, float64) equals the
in-process MemoryTrainer emulation of the same schedule; refusals are one line naming the option."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyg_dynscale.cli import build_parser, main
from pyg_dynscale.ctdg import synthetic_events

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--epochs", "2", "--batch-size", "20", "--memory-dim", "6", "--time-dim", "4", "--embedding-dim", "6",
        "--dtype", "float64", "--lr", "0.01", "--seed", "3"]


@pytest.fixture(scope="module")
def events_csv(tmp_path_factory) -> str:
    """A JODIE CSV (header, users then items, 3 feature columns) of a synthetic bipartite stream."""
    d = synthetic_events(500, 40, msg_dim=3, seed=3, burst_length=20)
    umax = int(d.src.max())
    path = tmp_path_factory.mktemp("events") / "events.csv"
    rows = ["user,item,timestamp,state_label,f1,f2,f3"]
    rows += [f"{s},{t - umax - 1},{ts},0,{','.join(repr(x) for x in m)}"
             for s, t, ts, m in zip(d.src.tolist(), d.dst.tolist(), d.t.tolist(), d.msg.tolist())]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_two_processes_equal_the_in_process_emulation(events_csv):
    from pyg_dynscale.commands.train_events import build, load_events

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train-events", events_csv, "--nproc", "2",
                           "--parallelism", "1,2,1", "--json", "--no-progress", *ARGS],
                          capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    args = build_parser().parse_args(["train-events", events_csv, "--parallelism", "1,2,1", *ARGS])
    torch.set_num_threads(1)
    trainer = build(args, load_events(args))
    losses, val = [], []
    for _ in range(2):
        losses.append(trainer.train_epoch())
        val.append(trainer.evaluate("val"))
    test = trainer.evaluate("test")
    assert r["world_size"] == 2 and r["parallelism"] == [1, 2, 1] and r["events"]["train"] == trainer.val_start
    assert r["losses"] == pytest.approx(losses, rel=1e-9, abs=0)
    for got, want in zip(r["val_metrics"] + [r["test_metrics"]], val + [test]):
        assert got == pytest.approx(want, rel=0, abs=1e-9)
    assert r["events_per_second"] > 0 and r["bytes"]["gradients"] > 0 and r["bytes"]["gather"] > 0
    assert r["bytes"]["memory_read"] > 0 and r["bytes"]["memory_write"] > 0


@pytest.mark.parametrize("argv,needle", [
    (["--parallelism", "2,1,1", "--nproc", "3"], "--parallelism 2,1,1: i*j*k = 2 trainers for --nproc 3"),
    (["--parallelism", "2,x"], "--parallelism must be I,J,K"),
    (["--resume"], "--checkpoint-dir / --resume are not built"),
    (["--checkpoint-dir", "ck"], "--checkpoint-dir / --resume are not built"),
    (["--parallelism", "1,2,1", "--memory-service"], "--memory-service serves one memory copy"),
    (["--epochs", "0"], "--epochs must be >= 1"),
])
def test_refusals_name_the_option(events_csv, argv, needle, capsys):
    assert main(["train-events", events_csv, *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_one_process_emulates_the_schedule(events_csv, capsys):
    assert main(["train-events", events_csv, "--parallelism", "1,1,2", "--no-progress", *ARGS]) == 0
    out = capsys.readouterr().out
    assert "1 process(es), parallelism 1x1x2" in out and "MRR" in out
    assert isinstance(build_parser().parse_args(["train-events", events_csv]), argparse.Namespace)
