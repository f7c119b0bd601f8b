"""examples/train_tgcn.py, the job `make demo` runs."""
from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale._optional import pygt_available

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_tgcn.py"

pytestmark = pytest.mark.skipif(not pygt_available(), reason="needs the pygt extra (torch-geometric-temporal)")


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_tgcn", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_runs_two_epochs() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "2"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"^test MSE: (\S+)$", proc.stdout, re.M)
    assert m, proc.stdout
    assert math.isfinite(float(m.group(1)))
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("T-GCN on england_covid: 53 snapshots (42 train / 11 test), 129 vertices, epochs=2")
    assert "T-GCN" in proc.stderr and "2/2" in proc.stderr  # the tqdm progress bar


def test_training_learns_and_is_deterministic() -> None:
    ex = _load_example()
    argv = ["--epochs", "8", "--hidden", "16", "--seed", "3", "--no-progress"]
    a = ex.main(argv)
    b = ex.main(argv)
    assert a["train_losses"] == b["train_losses"] and a["test_mse"] == b["test_mse"]
    losses = a["train_losses"]
    assert len(losses) == 8 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.9 * losses[0]  # it learns
    # Standardized targets: a trained model beats predicting 0 (MSE ~ var(y)) on train.
    assert a["train_mse"] < 1.0
    c = ex.main(["--epochs", "8", "--hidden", "16", "--seed", "4", "--no-progress"])
    assert c["train_losses"][0] != a["train_losses"][0]  # the seed matters


def test_state_table_matches_plain_recurrence() -> None:
    """With a fixed vertex set, keeping H in a [num_vertices, hidden] table
    indexed by n_id equals carrying H from snapshot to snapshot (PyGT loop)."""
    ex = _load_example()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    V, T, F = 6, 4, 3
    perm = [rng.permutation(V) for _ in range(T)]  # rows in a different vertex order each time
    sig = DynamicGraphSignal(
        [rng.integers(0, V, size=(2, 10)) for _ in range(T)], [rng.random(10) for _ in range(T)],
        [rng.standard_normal((V, F)) for _ in range(T)], [rng.standard_normal(V) for _ in range(T)],
        node_ids=perm, dtype=torch.float64,
    )
    model = ex.RecurrentTGCN(F, 5).double()
    loss, state = ex.run_sequence(model, sig, torch.zeros(V, 5, dtype=torch.float64))

    h_by_vertex = torch.zeros(V, 5, dtype=torch.float64)
    cost = torch.zeros((), dtype=torch.float64)
    for t in range(T):
        d = sig[t]
        order = torch.as_tensor(perm[t])
        y_hat, h = model(d.x, d.edge_index, d.edge_attr, h_by_vertex[order])
        cost = cost + torch.mean((y_hat - d.y) ** 2)
        h_by_vertex = h_by_vertex.clone()
        h_by_vertex[order] = h
    torch.testing.assert_close(loss, cost / T, rtol=0, atol=1e-12)
    torch.testing.assert_close(state, h_by_vertex, rtol=0, atol=1e-12)


def test_bad_arguments_exit_2() -> None:
    ex = _load_example()
    for argv in (["--epochs", "0"], ["--lr", "-1"], ["--hidden", "0"], ["--threads", "0"]):
        with pytest.raises(SystemExit) as exc:
            ex.parse_args(argv)
        assert exc.value.code == 2
