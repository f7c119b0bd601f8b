"""``pyg-dynscale train --windows L``: one 2-process job (``--placement blocks``, float64) against the in-process
:class:`~pyg_dynscale.windows.WindowTrainer` with the same ``blocks`` on one process; and the options it refuses."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--windows", "4", "--batch-size", "8", "--train-ratio", "0.6", "--hidden", "4", "--epochs", "2",
        "--lr", "0.02", "--seed", "3", "--dtype", "float64"]


@pytest.fixture(scope="module")
def job() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train", "england_covid", *ARGS, "--nproc", "2",
                           "--json", "--no-progress"], capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_two_processes_equal_the_trainer_with_the_same_blocks(job) -> None:
    from pyg_dynscale.data.loaders import load
    from pyg_dynscale.nn.zoo import build_model
    from pyg_dynscale.windows import WindowTrainer

    torch.set_num_threads(1)
    sig = load("england_covid", format="pygt-json")
    torch.manual_seed(3)
    model, head, _ = build_model("tgcn", sig.num_node_features, 4, num_snapshots=sig.num_snapshots,
                                 num_vertices=sig.num_vertices)
    tr = WindowTrainer(model.double(), sig, lags=4, batch_size=8, lr=0.02, optimizer="adam", head=head.double(),
                       ratio=(0.6, 0.0, 0.4), seed=3, blocks=2)
    losses = [tr.train_epoch() for _ in range(2)]
    test = tr.evaluate("test")
    assert job["world_size"] == 2 and job["windows"]["blocks"] == 2 and job["windows"]["placement"] == "blocks"
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


@pytest.mark.parametrize("extra,message", [
    (["--placement", "replicated"], "--placement applies to windowed training: add --windows L"),
    (["--windows", "4", "--scheme", "pss"], "--scheme does not apply with --windows"),
    (["--windows", "4", "--stale", "adaptive"], "--stale does not apply with --windows"),
    (["--windows", "4", "--checkpoint-dir", "ck"], "--checkpoint-dir does not apply with --windows"),
    (["--windows", "0"], "--windows must be >= 1"),
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
