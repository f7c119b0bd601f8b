"""``pyg-dynscale train-events``: one 2-process job (--nproc 2, epoch parallelism 1,2,1, float64) equals the
in-process MemoryTrainer emulation of the same schedule; the same job with rank 1 killed at the start of epoch 2
(``tests/fault_injection``) and ``--max-restarts 1 --checkpoint-dir --resume`` equals it bit for bit; refusals
are one line naming the option."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyg_dynscale.cli import build_parser, main
from tests.helpers.event_csv import emulate, write_events_csv
from tests.helpers.event_streams import assert_metrics_close

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--epochs", "2", "--batch-size", "20", "--memory-dim", "6", "--time-dim", "4", "--embedding-dim", "6",
        "--dtype", "float64", "--lr", "0.01", "--seed", "3"]


@pytest.fixture(scope="module")
def events_csv(tmp_path_factory) -> str:
    """A JODIE CSV (header, users then items, 3 feature columns) of a synthetic bipartite stream."""
    return write_events_csv(tmp_path_factory.mktemp("events") / "events.csv", 500, 40, msg_dim=3, seed=3,
                            burst_length=20, header=True)


def _two_processes(events_csv, *extra, **env_extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **env_extra}
    return subprocess.run([sys.executable, "-m", "pyg_dynscale", "train-events", events_csv, "--nproc", "2",
                           "--parallelism", "1,2,1", "--json", "--no-progress", *ARGS, *extra],
                          capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def two_process_run(events_csv) -> dict:
    proc = _two_processes(events_csv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_two_processes_equal_the_in_process_emulation(events_csv, two_process_run):
    r = two_process_run
    trainer, losses, val, test = emulate(events_csv, "--parallelism", "1,2,1", *ARGS)
    assert r["world_size"] == 2 and r["parallelism"] == [1, 2, 1] and r["events"]["train"] == trainer.val_start
    assert r["losses"] == pytest.approx(losses, rel=1e-9, abs=0)
    sizes = [r["events"]["val"]] * len(val) + [r["events"]["test"]]
    for got, want, events in zip(r["val_metrics"] + [r["test_metrics"]], val + [test], sizes):
        assert_metrics_close(got, want, events)  # AP / AUC / MRR: never compared exactly across computations
    assert r["events_per_second"] > 0 and r["bytes"]["gradients"] > 0 and r["bytes"]["gather"] > 0
    assert r["bytes"]["memory_read"] > 0 and r["bytes"]["memory_write"] > 0


def test_a_killed_rank_restarts_and_resumes_bit_for_bit(events_csv, two_process_run, tmp_path):
    ck = str(tmp_path / "ck")
    proc = _two_processes(events_csv, "--checkpoint-dir", ck, "--resume", "--max-restarts", "1",
                          PYTHONPATH=f"{ROOT / 'tests' / 'fault_injection'}{os.pathsep}{ROOT}",
                          PYG_DYNSCALE_TEST_FAULT="1:2:kill")
    assert proc.returncode == 0, proc.stderr[-3000:]
    r, clean = json.loads(proc.stdout), two_process_run
    err = proc.stderr.splitlines()
    assert "pyg-dynscale train-events: resumed from checkpoint epoch 1 (attempt 2 of 2)" in err, proc.stderr[-3000:]
    assert r["restarts"] == 1 and r["resumed_from_epoch"] == 1 and clean["resumed_from"] is None
    assert r["resumed_from"] == os.path.join(ck, "epoch-000001")
    assert r["checkpoints"] == [os.path.join(ck, "epoch-000002")]
    # bit for bit: losses, validation and test metrics, the byte counters (restored from the checkpoint)
    assert r["losses"] == clean["losses"] and r["val_metrics"] == clean["val_metrics"]
    assert r["test_metrics"] == clean["test_metrics"] and r["bytes"] == clean["bytes"]


def test_a_resume_with_other_settings_is_refused(events_csv, tmp_path, capsys):
    ck = str(tmp_path / "ck")
    one = ["--epochs", "1", "--batch-size", "40", "--memory-dim", "4", "--time-dim", "2", "--embedding-dim", "4",
           "--no-progress", "--checkpoint-dir", ck]
    assert main(["train-events", events_csv, *one]) == 0
    assert os.path.isdir(os.path.join(ck, "epoch-000001"))
    capsys.readouterr()
    assert main(["train-events", events_csv, *one, "--resume", "--parallelism", "1,1,2"]) == 2
    err = capsys.readouterr().err
    assert "parallelism: checkpoint [1, 1, 1], this run [1, 1, 2] (--parallelism)" in err, err
    assert "resume with --parallelism 1,1,1" in err and err.count("\n") == 1, err
    assert main(["train-events", events_csv, *one, "--resume", "--lr", "0.5"]) == 2
    assert "lr: checkpoint 0.0001, this run 0.5 (--lr)" in capsys.readouterr().err
    assert main(["train-events", events_csv, *one, "--resume", "--prefetch", "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert "prefetch: checkpoint False, this run True (--prefetch)" in err and "seed: checkpoint 0, this run 2" in err
    assert "resume with no --prefetch, --seed 0, or use a new --checkpoint-dir" in err, err
    # the same settings resume (nothing left to train: the report of the checkpoint's epoch)
    assert main(["train-events", events_csv, *one, "--resume"]) == 0
    assert "resumed from checkpoint epoch 1" in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["--parallelism", "2,1,1", "--nproc", "3"], "--parallelism 2,1,1: i*j*k = 2 trainers for --nproc 3"),
    (["--parallelism", "2,x"], "--parallelism must be I,J,K"),
    (["--resume"], "--resume needs --checkpoint-dir DIR."),
    (["--checkpoint-dir", "ck", "--checkpoint-every", "0"], "--checkpoint-every must be >= 1"),
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


def test_a_killed_rank_with_sven_memory_restarts_bit_for_bit(events_csv, tmp_path):
    """A rank killed mid-run with Sven's partitioned memory: no hang, the restart resumes each owner's rows."""
    sven = ("--parallelism", "2,1,1", "--memory-placement", "sven")
    clean = _two_processes(events_csv, *sven)
    assert clean.returncode == 0, clean.stderr[-3000:]
    proc = _two_processes(events_csv, *sven, "--checkpoint-dir", str(tmp_path / "ck"), "--resume",
                          "--max-restarts", "1", PYTHONPATH=f"{ROOT / 'tests' / 'fault_injection'}{os.pathsep}{ROOT}",
                          PYG_DYNSCALE_TEST_FAULT="1:2:kill")
    assert proc.returncode == 0, proc.stderr[-3000:]
    r, c = json.loads(proc.stdout), json.loads(clean.stdout)
    assert r["restarts"] == 1 and r["resumed_from_epoch"] == 1
    assert r["losses"] == c["losses"] and r["val_metrics"] == c["val_metrics"]
    assert r["test_metrics"] == c["test_metrics"]
