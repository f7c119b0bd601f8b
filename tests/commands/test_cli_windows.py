"""``pyg-dynscale train --windows L``: one 2-process job (``--placement blocks``, float64) against the in-process
:class:`~pyg_dynscale.windows.WindowTrainer` with the same ``blocks`` on one process, and against the same command
in one process (``--blocks``' fixed default: ``--nproc 1`` == ``--nproc 2``); the same job with rank 1
killed at the start of epoch 2 (``tests/fault_injection``) and ``--max-restarts 1 --checkpoint-dir --resume``
equals it bit for bit; and the options it refuses."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--windows", "4", "--batch-size", "8", "--train-ratio", "0.6", "--hidden", "4", "--epochs", "2",
        "--lr", "0.02", "--seed", "3", "--dtype", "float64"]


def _two_processes(*extra, **env_extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **env_extra}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([sys.executable, "-m", "pyg_dynscale", "train", "england_covid", *ARGS, "--nproc", "2",
                           "--json", "--no-progress", *extra], capture_output=True, text=True, timeout=240, env=env,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def job() -> dict:
    proc = _two_processes()
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_killed_rank_restarts_and_resumes_bit_for_bit(job, tmp_path) -> None:
    from pyg_dynscale.cli import build_parser
    from pyg_dynscale.commands.train_checks import check_args
    from pyg_dynscale.errors import CommandError

    ck = str(tmp_path / "ck")
    proc = _two_processes("--checkpoint-dir", ck, "--checkpoint-every", "1", "--resume", "--max-restarts", "1",
                          PYTHONPATH=f"{ROOT / 'tests' / 'fault_injection'}{os.pathsep}{ROOT}",
                          PYG_DYNSCALE_TEST_FAULT="1:2:kill")
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert "pyg-dynscale train: resumed from checkpoint epoch 1 (attempt 2 of 2)" in proc.stderr.splitlines(), \
        proc.stderr[-3000:]
    assert r["restarts"] == 1 and r["resumed_from_epoch"] == 1 and job["resumed_from"] is None
    assert r["checkpoints"] == [os.path.join(ck, "epoch-000002")]
    # bit for bit: losses, the last epoch's batch losses, test metrics, the byte counters (restored)
    assert r["losses"] == job["losses"] and r["batch_losses"] == job["batch_losses"]
    assert r["test_metrics"] == job["test_metrics"] and r["traffic"] == job["traffic"]
    # a resume with other settings is refused before anything loads, naming the option
    base = ["train", "england_covid", *ARGS, "--nproc", "2", "--checkpoint-dir", ck, "--resume"]
    for extra, needle in ((["--stride", "2"], "stride: checkpoint 1, this run 2 (--stride)); resume with --stride 1"),
                          (["--hidden", "8"], "hidden: checkpoint 4, this run 8 (--hidden)")):
        with pytest.raises(CommandError, match=re.escape(needle)):
            check_args(build_parser().parse_args(base + extra))
    with pytest.raises(CommandError, match=re.escape("world_size: checkpoint 2, this run 1")):
        check_args(build_parser().parse_args(["train", "england_covid", *ARGS, "--checkpoint-dir", ck, "--resume"]))


def test_two_processes_equal_the_trainer_with_the_same_blocks(job) -> None:
    from pyg_dynscale.data.loaders import load
    from pyg_dynscale.nn.zoo import build_model
    from pyg_dynscale.windows import WindowTrainer

    torch.set_num_threads(1)
    sig = load("england_covid", format="pygt-json", feature_lags=1)  # --lags' default: one raw step a snapshot
    torch.manual_seed(3)
    model, head, _ = build_model("tgcn", sig.num_node_features, 4, num_snapshots=sig.num_snapshots,
                                 num_vertices=sig.num_vertices)
    tr = WindowTrainer(model.double(), sig, lags=4, batch_size=8, lr=0.02, optimizer="adam", head=head.double(),
                       ratio=(0.6, 0.1, 0.3), seed=3, blocks=8)  # --val-ratio's default 0.1, --blocks' 8
    losses = [tr.train_epoch() for _ in range(2)]
    test = tr.evaluate("test")
    assert job["world_size"] == 2 and job["windows"]["blocks"] == 8 and job["windows"]["placement"] == "blocks"
    assert job["windows"]["train"] == int(tr.view.split("train").numel()) and job["windows"]["test"] > 0
    for a, b in zip(job["losses"] + job["batch_losses"], losses + tr.batch_losses):
        assert math.isclose(a, b, rel_tol=1e-9)
    assert all(math.isclose(job["test_metrics"][k], test[k], rel_tol=1e-9) for k in ("mse", "mae", "rmse"))
    assert job["test_metric"] == job["test_metrics"]["mse"]
    t = job["traffic"]
    params = sum(p.numel() * p.element_size() for p in list(model.parameters()) + list(head.parameters()))
    assert t["features"] == 0 and t["gradients"] == t["steps"] * params and t["steps"] == 2 * len(tr.batch_losses)
    held = job["held_vertex_time_nodes"]
    assert len(held) == 2 and all(0 < h < sig.num_vertex_time_nodes for h in held)
    assert job["held_feature_bytes"] == [h * sig.num_node_features * 8 for h in held]


def test_one_process_equals_two_by_default(job, capsys) -> None:
    """``--blocks`` defaults to a fixed 8, not to the processes: the command in one process trains the batches of
    the 2-process job (before: blocks = processes, 1 vs 2, other batches). float64, rel 1e-9 (the two ranks' gradient
    sums are added in another order)."""
    from pyg_dynscale.cli import main

    torch.set_num_threads(1)
    assert main(["train", "england_covid", *ARGS, "--json", "--no-progress"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["world_size"] == 1 and one["windows"] == job["windows"]
    assert len(one["batch_losses"]) == len(job["batch_losses"]) > 1
    for a, b in zip(one["losses"] + one["batch_losses"], job["losses"] + job["batch_losses"]):
        assert math.isclose(a, b, rel_tol=1e-9), (a, b)
    assert all(math.isclose(one["test_metrics"][k], job["test_metrics"][k], rel_tol=1e-9) for k in ("mse", "mae"))


@pytest.mark.parametrize("extra,message", [
    (["--placement", "replicated"], "--placement applies to windowed training: add --lags L"),
    (["--windows", "4", "--scheme", "pss"], "--scheme does not apply with --windows"),
    (["--windows", "4", "--stale", "adaptive"], "--stale does not apply with --windows"),
    (["--windows", "0"], "--lags must be >= 1"),
    (["--lags", "4", "--nproc", "3"], "--blocks 8 cannot be shared by 3 processes: use --nproc 1, 2, 4, 8"),
    (["--lags", "4", "--batch-size", "12"], "--batch-size 12 is not a multiple of --blocks 8"),
    (["--lags", "4", "--blocks", "0"], "--blocks must be >= 1"),
    (["--lags", "4", "--train-ratio", "0.9", "--val-ratio", "0.1"], "leave no test windows"),
    (["--blocks", "4"], "--blocks applies to windowed training: add --lags L"),
    (["--val-ratio", "0.2"], "--val-ratio applies to windowed training"),
])
def test_bad_window_options(extra, message) -> None:
    from pyg_dynscale.cli import build_parser
    from pyg_dynscale.commands.train_checks import check_args
    from pyg_dynscale.errors import CommandError

    with pytest.raises(CommandError, match=message):
        check_args(build_parser().parse_args(["train", "england_covid", *extra]))


def test_bad_placement_is_a_usage_error(capsys) -> None:
    from pyg_dynscale.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "england_covid", "--windows", "4", "--placement", "nodes"])
    assert "invalid choice: 'nodes'" in capsys.readouterr().err


def test_from_a_signal_file_each_rank_reads_its_part_and_trains_as_the_whole_signal(job, tmp_path) -> None:
    from pyg_dynscale.data.loaders import load

    path = str(tmp_path / "covid.pt")
    load("england_covid", format="pygt-json", feature_lags=1).save(path)  # the signal the job's --lags loaded
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train", path, *ARGS, "--nproc", "2", "--json",
                           "--no-progress"], capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout)
    assert r["per_rank_read"] and not job["per_rank_read"] and job["bytes_read"] == [None, None]
    # each rank read a part of the file (its blocks and half of the test windows, with the lag overlap)
    size = os.path.getsize(path)
    assert all(0 < b < 0.7 * size for b in r["bytes_read"]), (r["bytes_read"], size)
    # bit for bit the run in which every rank loaded the whole dataset
    for key in ("losses", "batch_losses", "test_metrics", "traffic", "held_vertex_time_nodes"):
        assert r[key] == job[key], key
