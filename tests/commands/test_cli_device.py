"""``pyg-dynscale train --device``: which device and process-group backend each rank gets, the report's
device keys, and (with a GPU) NCCL / staged runs that reach the CPU losses.

The decision (:func:`plan_devices`) is pure, so its table runs everywhere; the wiring to
``init_process_group`` is checked with torch's entry points replaced; real CUDA runs are skipped without a GPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

from pyg_dynscale.cli import build_parser, main
from pyg_dynscale.commands import train as train_cmd
from pyg_dynscale.commands.train import DevicePlan, plan_devices
from pyg_dynscale.errors import CommandError

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HAS_CUDA = torch.cuda.is_available()
# small and quick: the device keys, not the model, are under test here
SMALL = ["train", "england_covid", "--hidden", "4", "--epochs", "2", "--json", "--no-progress"]
# float64, MPNN-LSTM (DGC): spatial halos, recurrent rounds, BatchNorm statistics and the readout cross ranks
EXACT = ["train", "england_covid", "--model", "mpnnlstm-dgc", "--dtype", "float64", "--hidden", "8",
         "--json", "--no-progress"]
EPOCHS = 3
DEVICE_KEYS = ("device", "backend", "exchange", "cuda_peak_memory_bytes")
cuda_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def _env(**extra: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.update(extra)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _cli(args: list, timeout: float = 240, **env: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(**env), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _in_process(args: list, capsys) -> dict:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _this_machine(choice: str, local_world_size: int) -> DevicePlan:
    return plan_devices(choice, torch.cuda.is_available(), torch.cuda.device_count(), local_world_size)


def _check_device_keys(r: dict, plan: DevicePlan) -> None:
    assert r["device"] == plan.device(0)  # rank 0's
    assert r["backend"] == plan.backend and r["exchange"] == plan.exchange
    peaks = r["cuda_peak_memory_bytes"]
    assert isinstance(peaks, list) and len(peaks) == r["world_size"]
    if plan.devices[0] == "cpu":
        assert peaks == [None] * r["world_size"]
    else:
        assert all(isinstance(b, int) and b > 0 for b in peaks), peaks


# ------------------------------------------------------------------ the decision
@pytest.mark.parametrize("choice, available, count, local, devices, backend, staged", [
    ("cpu", False, 0, 1, ("cpu",), "gloo", False),
    ("auto", False, 0, 2, ("cpu", "cpu"), "gloo", False),
    ("auto", True, 0, 1, ("cpu",), "gloo", False),  # CUDA built in but no device visible
    ("cpu", True, 2, 2, ("cpu", "cpu"), "gloo", False),  # an explicit cpu wins over the GPUs
    ("auto", True, 1, 1, ("cuda:0",), "nccl", False),
    ("cuda", True, 1, 1, ("cuda:0",), "nccl", False),
    ("cuda", True, 2, 2, ("cuda:0", "cuda:1"), "nccl", False),
    ("auto", True, 4, 2, ("cuda:0", "cuda:1"), "nccl", False),  # fewer ranks than GPUs
    ("cuda", True, 1, 3, ("cuda:0", "cuda:0", "cuda:0"), "gloo", True),
    ("auto", True, 2, 3, ("cuda:0", "cuda:1", "cuda:0"), "gloo", True),
])
def test_plan_devices_table(choice: str, available: bool, count: int, local: int, devices: tuple, backend: str,
                            staged: bool) -> None:
    plan = plan_devices(choice, available, count, local)
    assert plan.devices == devices and plan.backend == backend and plan.staged is staged
    assert plan.exchange == ("staged" if staged else "direct")
    assert [plan.device(i) for i in range(local)] == list(devices)


@pytest.mark.parametrize("plan, text", [
    (plan_devices("cuda", True, 1, 3), "exchange: staged over gloo (3 ranks share 1 GPU)"),
    (plan_devices("cuda", True, 2, 3), "exchange: staged over gloo (3 ranks share 2 GPUs)"),
    (plan_devices("cuda", True, 2, 2), "exchange: direct over nccl (one GPU per rank)"),
    (plan_devices("auto", False, 0, 2), "exchange: direct over gloo (CPU ranks)"),
])
def test_plan_describes_the_exchange(plan: DevicePlan, text: str) -> None:
    assert plan.describe() == text


@pytest.mark.parametrize("available, count", [(False, 0), (True, 0)])
def test_plan_refuses_cuda_without_a_gpu(available: bool, count: int) -> None:
    with pytest.raises(CommandError) as exc:
        plan_devices("cuda", available, count, 1)
    msg = str(exc.value)
    assert "--device cuda" in msg and "--device cpu" in msg and "\n" not in msg


@pytest.mark.parametrize("choice, local", [("gpu", 1), ("auto", 0)])
def test_plan_refuses_nonsense(choice: str, local: int) -> None:
    with pytest.raises(ValueError):
        plan_devices(choice, True, 1, local)


# ------------------------------------------------------------------ the wiring, without a GPU
class _Recorder:
    """Stands in for torch.cuda.set_device and dist.init_process_group."""

    def __init__(self) -> None:
        self.calls: list = []

    def set_device(self, dev: Any) -> None:
        self.calls.append(("set_device", str(torch.device(dev))))

    def init_process_group(self, backend: str, **kw: Any) -> None:
        dev: Optional[Any] = kw.get("device_id")
        self.calls.append(("init", backend, None if dev is None else str(dev)))


def _fake_gpus(monkeypatch, count: int) -> _Recorder:
    rec = _Recorder()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", rec.set_device)
    monkeypatch.setattr(torch.distributed, "init_process_group", rec.init_process_group)
    return rec


@pytest.mark.parametrize("count, local_rank, local_world, expected", [
    (2, 1, 2, [("set_device", "cuda:1"), ("init", "nccl", "cuda:1")]),
    (2, 2, 3, [("set_device", "cuda:0"), ("init", "gloo", None)]),  # 3 ranks on 2 GPUs: staged over gloo
    (0, 1, 2, [("init", "gloo", None)]),
])
def test_torchrun_rank_binds_its_gpu_before_the_group(monkeypatch, count: int, local_rank: int, local_world: int,
                                                      expected: list) -> None:
    rec = _fake_gpus(monkeypatch, count)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    args = build_parser().parse_args(["train", "england_covid"])
    plan = train_cmd.machine_plan(args, local_world)
    train_cmd.init_torchrun_group(local_rank, local_world, timedelta(seconds=5), plan.backend,
                                   plan.device(local_rank))
    assert rec.calls == expected


def test_single_process_run_passes_the_device_and_plan(monkeypatch) -> None:
    """``run()`` (no torchrun): one rank on cuda:0 over NCCL when there is a GPU; the plan reaches the report."""
    rec = _fake_gpus(monkeypatch, 1)
    seen: dict = {}

    def fake_train(args: Any, rank: int, world: int, init: Any, device: str = "cpu") -> dict:
        init()
        seen.update(device=device, rank=rank, world=world)
        return {}

    monkeypatch.setattr(train_cmd, "train", fake_train)
    monkeypatch.setattr(train_cmd, "print_report", lambda args, r, plan=None: seen.update(plan=plan))
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    for var in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    assert main(["train", "england_covid", "--no-progress"]) == 0
    assert seen["device"] == "cuda:0" and (seen["rank"], seen["world"]) == (0, 1)
    assert seen["plan"] == plan_devices("auto", True, 1, 1)
    assert rec.calls == [("set_device", "cuda:0"), ("init", "nccl", "cuda:0")]


# ------------------------------------------------------------------ real runs on this machine
@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("extra", [[], ["--nproc", "2"]])
def test_device_cuda_without_a_gpu_is_one_line(extra: list, capsys) -> None:
    assert main(["train", "england_covid", "--device", "cuda", "--no-progress", *extra]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "--device cuda" in err and "--device cpu" in err


def test_device_auto_one_process_reports_its_device(capsys) -> None:
    r = _in_process(SMALL + ["--device", "auto"], capsys)
    assert r["world_size"] == 1 and len(r["losses"]) == 2
    _check_device_keys(r, _this_machine("auto", 1))
    if not HAS_CUDA:
        assert (r["device"], r["backend"], r["exchange"]) == ("cpu", "gloo", "direct")
    # every key of the report before --device existed is still there
    for key in ("schema_version", "losses", "test_metric", "epoch_seconds", "bytes_measured", "bytes_predicted",
                "load_bytes", "setup_seconds", "total_seconds", "checkpoints"):
        assert key in r, key


def test_device_cpu_text_report_names_device_and_exchange(capsys) -> None:
    assert main(["train", "england_covid", "--hidden", "4", "--epochs", "1", "--no-progress", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("device"))
    assert "cpu (rank 0)" in line and "exchange: direct over gloo (CPU ranks)" in line
    assert "CUDA peak memory" not in out


def test_two_processes_report_the_device_keys(two_process_defaults_run) -> None:
    # a --nproc 2 run with --device at its default (tests/commands/conftest.py: test_cli_auto.py checks it too)
    r = two_process_defaults_run
    assert r["world_size"] == 2
    for key in DEVICE_KEYS:
        assert key in r, key
    _check_device_keys(r, _this_machine("auto", 2))


# ------------------------------------------------------------------ CUDA (skipped without a GPU)
@pytest.fixture(scope="module")
def cpu_reference() -> dict:
    """The float64 CPU run every CUDA run must reach."""
    return _cli(EXACT + ["--epochs", str(EPOCHS), "--device", "cpu"])


def _same_losses(r: dict, ref: dict) -> None:
    torch.testing.assert_close(torch.tensor(r["losses"], dtype=torch.float64),
                               torch.tensor(ref["losses"], dtype=torch.float64), rtol=1e-6, atol=1e-6)
    assert abs(r["test_metric"] - ref["test_metric"]) < 1e-6


@pytest.mark.cuda
@cuda_only
def test_cuda_one_process_nccl_direct(cpu_reference: dict) -> None:
    r = _cli(EXACT + ["--epochs", str(EPOCHS), "--device", "cuda"])
    assert (r["device"], r["backend"], r["exchange"]) == ("cuda:0", "nccl", "direct")
    _check_device_keys(r, _this_machine("cuda", 1))
    _same_losses(r, cpu_reference)


@pytest.mark.cuda
@cuda_only
def test_cuda_two_processes_on_one_gpu_are_staged_over_gloo(cpu_reference: dict) -> None:
    # CUDA_VISIBLE_DEVICES=0: a 1-GPU machine whatever this one has
    r = _cli(EXACT + ["--epochs", str(EPOCHS), "--device", "cuda", "--nproc", "2"], CUDA_VISIBLE_DEVICES="0")
    assert (r["device"], r["backend"], r["exchange"]) == ("cuda:0", "gloo", "staged")
    assert len(r["cuda_peak_memory_bytes"]) == 2 and all(b > 0 for b in r["cuda_peak_memory_bytes"])
    assert r["bytes_measured"]["total"] == r["bytes_predicted"]["total"] and r["bytes_measured"]["total"][0] > 0
    _same_losses(r, cpu_reference)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_cuda_two_processes_on_two_gpus_use_nccl(cpu_reference: dict) -> None:
    r = _cli(EXACT + ["--epochs", str(EPOCHS), "--device", "cuda", "--nproc", "2"])
    assert (r["device"], r["backend"], r["exchange"]) == ("cuda:0", "nccl", "direct")
    _same_losses(r, cpu_reference)


@pytest.mark.cuda
@cuda_only
def test_cuda_resumes_a_cpu_checkpoint(cpu_reference: dict, tmp_path) -> None:
    """A checkpoint written on CPU loads onto the GPU (DCP fills the device tensors) and continues the run."""
    d = str(tmp_path / "ck")
    _cli(EXACT + ["--epochs", str(EPOCHS - 1), "--device", "cpu", "--checkpoint-dir", d, "--checkpoint-every", "1"])
    r = _cli(EXACT + ["--epochs", str(EPOCHS), "--device", "cuda", "--checkpoint-dir", d, "--resume"])
    assert r["resumed_from_epoch"] == EPOCHS - 1 and r["device"] == "cuda:0"
    _same_losses(r, cpu_reference)
