"""``pyg-dynscale train --model PATH.py:Name | package.module:Name --model-args JSON`` (issue 25, item 1).

The user's own model goes through every capability of the command -- the ``--nproc`` launcher, the
partition made for the path it takes, the JSON report, checkpoints, a failure with ``--max-restarts`` and
``--resume`` -- and reaches what the Python API reaches with the same model, data, partition and seed
(``DistributedTrainer`` on spawned ranks) in float64. The bad-input cases are in ``test_cli_catalog.py``.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from pyg_dynscale.cli import main
from tests.helpers.user_models import DYNSCALE_RECURRENT_GCN

ROOT = Path(__file__).resolve().parents[2]
FAULTS = str(ROOT / "tests" / "fault_injection")
BIN = Path(sys.executable).parent
HAVE_PYGT = importlib.util.find_spec("torch_geometric_temporal") is not None
EPOCHS = 4
# float64 and PTS (the halo of the black-box path crosses ranks); the model's file is the only model option
BASE = ["train", "england_covid", "--dtype", "float64", "--scheme", "pts", "--json", "--no-progress"]

DYNSCALE_MODEL = DYNSCALE_RECURRENT_GCN  # black-box path, without PyGT

#: PyGT's example model as its README writes it: GConvGRU(node_features, 32, 1) + Linear(32, 1)
PYGT_MODEL = '''
import torch
import torch.nn.functional as F
from torch_geometric_temporal.nn.recurrent import GConvGRU


class RecurrentGCN(torch.nn.Module):
    def __init__(self, node_features):
        super(RecurrentGCN, self).__init__()
        self.recurrent = GConvGRU(node_features, 32, 1)
        self.linear = torch.nn.Linear(32, 1)

    def forward(self, x, edge_index, edge_weight):
        h = self.recurrent(x, edge_index, edge_weight)
        h = F.relu(h)
        h = self.linear(h)
        return h
'''


def _env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.update(extra)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYG_DYNSCALE_DEBUG", None)
    return env


def _cli(args: list, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyg_dynscale", *args], capture_output=True, text=True,
                          timeout=300, env=_env(**env), cwd=ROOT)


def _report(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _params(checkpoint: Path) -> dict:
    """The model's parameters in a checkpoint (``model.``-prefixed names of the trained ModuleDict)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = str(checkpoint) + ".pt"
    dcp_to_torch_save(str(checkpoint), out)
    state = torch.load(out)["model"]
    return {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("models")
    (d / "rgcn_dynscale.py").write_text(textwrap.dedent(DYNSCALE_MODEL))
    (d / "rgcn_pygt.py").write_text(textwrap.dedent(PYGT_MODEL))
    return d


@pytest.fixture(scope="module")
def uninterrupted(models, tmp_path_factory) -> tuple:
    """The file's model, 4 epochs on 2 processes (``--nproc``), checkpoints every 2 epochs."""
    d = tmp_path_factory.mktemp("ck") / "run"
    r = _report(_cli(BASE + ["--model", f"{models / 'rgcn_dynscale.py'}:RecurrentGCN", "--nproc", "2", "--epochs",
                             str(EPOCHS), "--checkpoint-dir", str(d), "--checkpoint-every", "2"]))
    return r, d


@pytest.fixture(scope="module")
def pygt_run(models, tmp_path_factory) -> tuple:
    if not HAVE_PYGT:
        return None
    d = tmp_path_factory.mktemp("ck-pygt") / "run"
    r = _report(_cli(BASE + ["--model", f"{models / 'rgcn_pygt.py'}:RecurrentGCN", "--nproc", "2", "--epochs", "2",
                             "--checkpoint-dir", str(d)]))
    return r, d


def _api(rank: int, world: int, folder: str, runs: list) -> list:
    """The Python API on each spawned rank, as a user's script writes it: import the model, seed, build, cast,
    train with DistributedTrainer on the command's partition, evaluate on the test split."""
    from pyg_dynscale.data.loaders import load
    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.partition import load_partition, partition

    sys.path.insert(0, folder)
    signal = load("england_covid", format="pygt-json")
    train, test = signal.split(0.8)
    out = []
    for module, part_file, epochs in runs:
        cls = importlib.import_module(module).RecurrentGCN
        torch.manual_seed(0)
        model = cls(signal.num_node_features).double()
        trainer = DistributedTrainer(model, train, load_partition(part_file, train), loss="mse", lr=0.01)
        losses = [trainer.train_epoch() for _ in range(epochs)]
        mse = trainer.evaluate(test, partition(test, "pss", world))["loss"]  # the state continued, as the command
        out.append({"losses": losses, "test_metric": mse, "path": trainer.path,
                    "params": {n: p.detach().clone() for n, p in model.named_parameters()}})
    return out


@pytest.fixture(scope="module")
def api(models, uninterrupted, pygt_run) -> dict:
    from pyg_dynscale.distributed import spawn

    runs = {"rgcn_dynscale": (str(uninterrupted[1] / "partition.pt"), EPOCHS)}
    if pygt_run is not None:
        runs["rgcn_pygt"] = (str(pygt_run[1] / "partition.pt"), 2)
    results = spawn(_api, 2, str(models), [(m, p, e) for m, (p, e) in runs.items()], timeout=240)[0]
    return dict(zip(runs, results))


def _same_as_api(r: dict, checkpoint: Path, ref: dict) -> None:
    assert len(r["losses"]) == len(ref["losses"])
    for a, b in zip(r["losses"], ref["losses"]):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(b)), (r["losses"], ref["losses"])
    assert abs(r["test_metric"] - ref["test_metric"]) <= 1e-9 * max(1.0, abs(ref["test_metric"]))
    params = _params(checkpoint)
    assert params.keys() == ref["params"].keys() and params
    for k, v in ref["params"].items():
        torch.testing.assert_close(params[k], v, rtol=1e-9, atol=1e-9, msg=k)


def test_file_model_on_two_processes_equals_the_python_api(uninterrupted, api, models) -> None:
    r, d = uninterrupted
    assert r["model"] == f"{models / 'rgcn_dynscale.py'}:RecurrentGCN"
    assert r["model_class"] == "pyg_dynscale_user_rgcn_dynscale:RecurrentGCN"
    assert r["model_args"] == {} and r["model_kwargs"] == {"node_features": 8} and r["hidden"] is None
    assert r["runtime_path"] == api["rgcn_dynscale"]["path"] == "blackbox" and r["head"] is None
    assert r["world_size"] == 2 and r["scheme"] == "pts" and r["dtype"] == "float64"
    assert r["bytes_measured"]["total"] == r["bytes_predicted"]["total"] and r["bytes_measured"]["total"][0] > 0
    _same_as_api(r, d / f"epoch-{EPOCHS:06d}", api["rgcn_dynscale"])
    record = json.loads((d / "epoch-000002" / "pyg_dynscale.json").read_text())["run"]
    assert record["model"] == r["model"] and record["model_class"] == r["model_class"]
    assert record["model_args"] == {}


@pytest.mark.skipif(not HAVE_PYGT, reason="needs torch-geometric-temporal")
def test_pygt_recurrent_gcn_from_a_file_equals_the_python_api(pygt_run, api) -> None:
    r, d = pygt_run
    assert r["runtime_path"] == "blackbox" and r["head"] is None and r["model_kwargs"] == {"node_features": 8}
    _same_as_api(r, d / "epoch-000002", api["rgcn_pygt"])


def test_module_form_failure_restart_and_resume_reach_the_uninterrupted_parameters(uninterrupted, models,
                                                                                    tmp_path) -> None:
    """``module:Class`` with the module's folder on PYTHONPATH: the workers import it too, and the same class, data
    and seed train exactly as the file's -- through a failure: rank 1 fails at the start of epoch 3, torchrun
    restarts the workers (``--max-restarts 1``), which import it again, resume from the checkpoint of epoch 2
    and end bit-identical to the file's uninterrupted run. (One job for what two jobs checked before: the module
    form without a failure, and a failure of the file form.)"""
    r_full, d_full = uninterrupted
    d = tmp_path / "ck"
    proc = _cli(BASE + ["--model", "rgcn_dynscale:RecurrentGCN", "--nproc", "2", "--epochs", str(EPOCHS),
                        "--checkpoint-dir", str(d), "--checkpoint-every", "2", "--resume", "--max-restarts", "1"],
                PYTHONPATH=f"{models}{os.pathsep}{FAULTS}{os.pathsep}{ROOT}", PYG_DYNSCALE_TEST_FAULT="1:3")
    r = _report(proc)
    assert "injected fault" in proc.stderr  # the first attempt did fail
    assert r["model"] == "rgcn_dynscale:RecurrentGCN" and r["model_class"] == "rgcn_dynscale:RecurrentGCN"
    assert r["resumed_from_epoch"] == 2 and r["losses"] == r_full["losses"]
    assert r["test_metric"] == r_full["test_metric"]
    a, b = _params(d_full / f"epoch-{EPOCHS:06d}"), _params(d / f"epoch-{EPOCHS:06d}")
    assert a.keys() == b.keys() and a
    for k in a:
        assert torch.equal(a[k], b[k]), k  # bitwise


def _one_error_line(capsys) -> str:
    cap = capsys.readouterr()
    lines = [line for line in cap.err.splitlines() if line.strip()]
    assert cap.out == "" and len(lines) == 1 and "Traceback" not in cap.err, cap.err
    return lines[0]


def test_resume_refuses_another_model_or_other_args(uninterrupted, models, tmp_path, capsys, monkeypatch) -> None:
    _, d_full = uninterrupted
    d = tmp_path / "ck"
    shutil.copytree(d_full, d)
    spec = f"{models / 'rgcn_dynscale.py'}:RecurrentGCN"
    common = BASE + ["--nproc", "2", "--epochs", "6", "--checkpoint-dir", str(d), "--resume"]
    # other --model-args
    assert main(common + ["--model", spec, "--model-args", '{"hidden": 4}']) == 2
    line = _one_error_line(capsys)
    assert "model_args: checkpoint {}, this run {'hidden': 4} (--model-args)" in line, line
    assert "resume with no --model-args" in line and "model:" not in line
    # another model: the same class through another module (its resolved class differs too)
    monkeypatch.syspath_prepend(str(models))
    assert main(common + ["--model", "rgcn_dynscale:RecurrentGCN"]) == 2
    line = _one_error_line(capsys)
    assert f"model: checkpoint '{spec}', this run 'rgcn_dynscale:RecurrentGCN' (--model)" in line, line
    assert f"resume with --model {spec}" in line
    # a zoo model
    assert main(common + ["--model", "tgcn"]) == 2
    line = _one_error_line(capsys)
    assert f"model: checkpoint '{spec}', this run 'tgcn' (--model)" in line and "(--model-args)" in line, line
    assert sorted(p.name for p in d.iterdir() if p.is_dir()) == ["epoch-000002", "epoch-000004"]  # nothing ran


def test_package_model_with_args_gets_the_zoo_head_and_equals_the_python_api(capsys) -> None:
    """``pyg_dynscale.nn:TGCN`` (decomposed path) with ``--model-args``: ``in_channels`` comes from the data,
    the output (4 wide) gets ReLU + Linear(4, 1), seeded right after the model: the same losses as
    ``FusedTrainer`` on a model and head built that way."""
    from pyg_dynscale.data.loaders import load
    from pyg_dynscale.nn import TGCN
    from pyg_dynscale.runtime import FusedTrainer

    assert main(BASE + ["--model", "pyg_dynscale.nn:TGCN", "--model-args", '{"out_channels": 4}', "--epochs",
                        "3"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["model_class"] == "pyg_dynscale.nn.tgcn:TGCN" and r["model_args"] == {"out_channels": 4}
    assert r["model_kwargs"] == {"out_channels": 4, "in_channels": 8}
    assert r["runtime_path"] == "decomposed" and r["head"] == "ReLU + Linear(4, 1)"
    train, test = load("england_covid", format="pygt-json").split(0.8)
    torch.manual_seed(0)
    model = TGCN(in_channels=8, out_channels=4)
    head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(4, 1))
    model, head = model.double(), head.double()
    trainer = FusedTrainer(model, train, head=head, loss="mse", lr=0.01)
    losses = [trainer.train_epoch() for _ in range(3)]
    torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(losses), rtol=1e-9, atol=1e-12)
    mse = trainer.evaluate(test)["loss"]  # each vertex's state continued from the training snapshots
    assert r["test_state"] == "continued" and abs(r["test_metric"] - mse) < 1e-9
    assert abs(FusedTrainer(model, test, head=head, loss="mse").evaluate()["loss"] - mse) > 1e-6  # not a zero state


def test_recompute_and_stale_where_they_apply(models, capsys, monkeypatch) -> None:
    """One process: ``--recompute-every`` on the black-box file model gives its losses without it; the stale
    cache runs on a decomposed model; the text report names the model, its path and head."""
    monkeypatch.chdir(models)  # a relative PATH.py resolves against the current directory
    args = BASE[:-2] + ["--no-progress", "--model", "rgcn_dynscale.py:RecurrentGCN", "--epochs", "2"]
    assert main(args + ["--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(args + ["--json", "--recompute-every", "3"]) == 0
    windows = json.loads(capsys.readouterr().out)
    assert windows["recompute_every"] == 3
    torch.testing.assert_close(torch.tensor(windows["losses"]), torch.tensor(plain["losses"]), rtol=1e-10, atol=1e-12)
    assert main(BASE + ["--model", "pyg_dynscale.nn:TGCN", "--model-args", '{"out_channels": 4}', "--epochs", "2",
                        "--stale", "static:0.5"]) == 0
    assert json.loads(capsys.readouterr().out)["stale"].startswith("static:0.5")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("rgcn_dynscale.py:RecurrentGCN on england_covid")
    assert ("  model             pyg_dynscale_user_rgcn_dynscale:RecurrentGCN(node_features=8), blackbox path, "
            "head: none") in out


def test_help_documents_the_forms_and_the_input_sizes(capsys) -> None:
    from pyg_dynscale.commands.user_model import INPUT_SIZE_KEYWORDS

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "PATH.py:Name" in text and "package.module:Name" in text and "--model-args JSON" in text
    assert all(k in text for k in INPUT_SIZE_KEYWORDS)
    docs = (ROOT / "docs" / "cli.md").read_text()
    assert all(f"`{k}`" in docs for k in INPUT_SIZE_KEYWORDS)
