"""``pyg_dynscale.commands.job``: what the training subcommands share -- the resume lookup, the epoch loop with
its checkpoint cadence and its stop on a non-finite loss, the slowest rank's epoch time, how a run starts, and
the strict JSON of a report (``commands.output.report_json``)."""
from __future__ import annotations

import argparse
import json
import math
import os

import pytest
import torch

from pyg_dynscale.cli import main
from pyg_dynscale.commands import job as job_mod
from pyg_dynscale.commands.job import Job, NonFiniteLossError, check_finite, resumable_checkpoint, start
from pyg_dynscale.commands.output import json_safe, report_json
from pyg_dynscale.errors import CommandError
from pyg_dynscale.training.checkpoint import save_checkpoint

PROG = "pyg-dynscale test"


def _args(tmp_path, **kw) -> argparse.Namespace:
    base = dict(epochs=5, checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=2, resume=False, no_progress=True,
                nproc=None, max_restarts=0)
    base.update(kw)
    return argparse.Namespace(**base)


class _Trainer:
    """A trainer of one float64 parameter whose epochs return the losses given, in order (then 0.25); each
    epoch adds 1 to the parameter, so a checkpoint says how many epochs ran."""

    def __init__(self, losses=()) -> None:
        self.modules = torch.nn.ModuleDict({"lin": torch.nn.Linear(1, 1, bias=False).double()})
        torch.nn.init.zeros_(self.modules["lin"].weight)
        self.optimizer = torch.optim.SGD(self.modules.parameters(), lr=0.1)
        self.losses = list(losses)
        self.epochs = 0

    def train_epoch(self) -> float:
        with torch.no_grad():
            self.modules["lin"].weight += 1.0
        self.epochs += 1
        return self.losses.pop(0) if self.losses else 0.25


def _progress() -> dict:
    return {"losses": [], "epoch_seconds": []}


# ------------------------------------------------------------------ the loop
def test_checkpoints_every_k_epochs_and_after_the_last(tmp_path) -> None:
    job = Job(_args(tmp_path), 0, PROG)
    job.find_resume({"run": "a"}, str)
    trainer, progress = _Trainer([0.5, 0.4, 0.3]), _progress()
    progress, start_epoch = job.restore(trainer.modules, trainer.optimizer, progress)
    assert start_epoch == 0
    job.epochs(trainer, progress, start_epoch, desc="x")
    ck = str(tmp_path / "ck")
    assert job.checkpoints == [os.path.join(ck, f"epoch-00000{e}") for e in (2, 4, 5)]
    assert progress["losses"] == [0.5, 0.4, 0.3, 0.25, 0.25] and len(progress["epoch_seconds"]) == 5
    fields = job.fields()
    assert fields["checkpoints"] == job.checkpoints and fields["resumed_from"] is None
    assert fields["resumed_from_epoch"] is None and fields["restarts"] == 0


def test_a_resume_continues_from_the_latest_complete_checkpoint(tmp_path, capsys) -> None:
    """Epochs 1-3 written (kept: 2 and 3), a partial 4th left by a crash: the run goes on from epoch 3, with
    its parameters and progress, and rank 0 says so once; ``then`` runs before that line."""
    first = Job(_args(tmp_path, epochs=3, checkpoint_every=1), 0, PROG)
    first.find_resume({"run": "a"}, str)
    trainer = _Trainer([0.5, 0.4, 0.3])
    progress, s = first.restore(trainer.modules, trainer.optimizer, _progress())
    first.epochs(trainer, progress, s, desc="x")
    (tmp_path / "ck" / ".partial-epoch-000004").mkdir()
    capsys.readouterr()

    job = Job(_args(tmp_path, epochs=5, checkpoint_every=1, resume=True), 0, PROG)
    assert job.find_resume({"run": "a"}, str) == (3, str(tmp_path / "ck" / "epoch-000003"))
    fresh, order = _Trainer(), []
    progress, s = job.restore(fresh.modules, fresh.optimizer, _progress(),
                              then=lambda: order.append(capsys.readouterr().err))
    assert s == 3 and progress["losses"] == [0.5, 0.4, 0.3]
    assert order == [""]  # nothing said before ``then``
    assert capsys.readouterr().err == f"{PROG}: resumed from checkpoint epoch 3\n"
    assert fresh.modules["lin"].weight.item() == 3.0  # the checkpoint's parameters, not the fresh zeros
    job.epochs(fresh, progress, s, desc="x")
    assert fresh.epochs == 2 and progress["losses"] == [0.5, 0.4, 0.3, 0.25, 0.25]
    assert job.fields()["resumed_from_epoch"] == 3


def test_a_non_finite_loss_stops_at_its_epoch_before_its_checkpoint(tmp_path) -> None:
    job = Job(_args(tmp_path, checkpoint_every=1), 0, PROG)
    job.find_resume({}, str)
    trainer, progress = _Trainer([0.5, float("nan"), 0.3]), _progress()
    progress, s = job.restore(trainer.modules, trainer.optimizer, progress)
    with pytest.raises(NonFiniteLossError, match=r"^the training loss is nan at epoch 2; lower --lr or use "
                                                 r"--dtype float64\.$"):
        job.epochs(trainer, progress, s, desc="x")
    assert trainer.epochs == 2 and progress["losses"] == [0.5]
    assert [os.path.basename(p) for p in job.checkpoints] == ["epoch-000001"]


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), -float("inf")])
def test_check_finite(loss) -> None:
    with pytest.raises(FloatingPointError, match=f"the training loss is {loss} at epoch 7;"):
        check_finite(loss, 7)
    assert issubclass(NonFiniteLossError, CommandError)  # one line and exit status 2, not a traceback
    check_finite(1e300, 7)


def test_a_non_finite_loss_is_one_line_and_exit_2(monkeypatch, capsys) -> None:
    """``pyg-dynscale train``: the first epoch's loss is NaN: the run stops there, one line, status 2."""
    from pyg_dynscale.distributed import DistributedTrainer

    calls = []

    def nan_epoch(self):
        calls.append(1)
        return float("nan")

    monkeypatch.setattr(DistributedTrainer, "train_epoch", nan_epoch)
    assert main(["train", "england_covid", "--hidden", "4", "--epochs", "3", "--no-progress", "--json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and len(calls) == 1
    assert cap.err.strip().splitlines() == ["pyg-dynscale train: error: the training loss is nan at epoch 1; lower "
                                            "--lr or use --dtype float64."], cap.err


# ---------------------------------------------------------------- resuming
def test_resumable_checkpoint(tmp_path) -> None:
    d = str(tmp_path / "ck")
    assert resumable_checkpoint(d, {"a": 1}, str) is None  # no directory: nothing to resume
    trainer = _Trainer()
    for epoch in (1, 2, 3):
        save_checkpoint(d, epoch, trainer.modules, trainer.optimizer, {"a": 1}, {}, keep=3)
    os.makedirs(os.path.join(d, ".partial-epoch-000004"))
    assert resumable_checkpoint(d, {"a": 1}, str) == (3, os.path.join(d, "epoch-000003"))
    # another run: the subcommand's line names the field
    with pytest.raises(CommandError, match=r"^mismatch: a$"):
        resumable_checkpoint(d, {"a": 2}, lambda exc: "mismatch: " + ",".join(f[0] for f in exc.fields))
    assert resumable_checkpoint(d, {"a": 2}, str, ignore=("a",))[0] == 3
    # a file of the newest one missing: refused, never an older one silently
    newest = os.path.join(d, "epoch-000003")
    victim = next(f for f in os.listdir(newest) if f.endswith(".distcp"))
    os.remove(os.path.join(newest, victim))
    with pytest.raises(CommandError, match=r"^--resume: "):
        resumable_checkpoint(d, {"a": 1}, str)


def test_without_resume_nothing_is_looked_up_and_fresh_is_said_once(tmp_path, capsys) -> None:
    job = Job(_args(tmp_path, epochs=4), 0, PROG)
    assert job.find_resume({"a": 1}, str) is None and job.record == {"a": 1}
    assert capsys.readouterr().err == ""
    for rank, said in ((1, ""), (0, f"{PROG}: --resume: no complete checkpoint in '{tmp_path / 'ck'}' yet; "
                                    "starting fresh at epoch 1 of 4.\n")):
        assert Job(_args(tmp_path, epochs=4, resume=True), rank, PROG).find_resume({"a": 1}, str) is None
        assert capsys.readouterr().err == said


# ----------------------------------------------------------- slowest rank
def _epoch_seconds(rank: int, world: int, tmp: str) -> list:
    """Two epochs on each rank, rank ``r``'s clock advancing ``(r + 1) * 10`` s per reading."""
    ticks = [0.0]

    def clock() -> float:
        ticks[0] += (rank + 1) * 10.0
        return ticks[0]

    job = Job(argparse.Namespace(epochs=2, checkpoint_dir=None, checkpoint_every=1, resume=False, no_progress=True),
              rank, PROG, clock)
    job.find_resume({}, str)
    trainer, progress = _Trainer(), _progress()
    progress, s = job.restore(trainer.modules, trainer.optimizer, progress)
    job.epochs(trainer, progress, s, desc="x")
    return progress["epoch_seconds"]


def test_every_rank_records_the_slowest_ranks_epoch_time(tmp_path) -> None:
    from pyg_dynscale.training.launch import spawn

    assert spawn(_epoch_seconds, 3, str(tmp_path)) == [[30.0, 30.0]] * 3
    assert _epoch_seconds(1, 1, str(tmp_path)) == [20.0, 20.0]  # one process: its own


# ---------------------------------------------------------------- starting
def test_start_picks_the_way_the_run_was_started(tmp_path, monkeypatch) -> None:
    for var in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    seen = []
    kw = dict(alone=lambda: seen.append("alone"), worker=lambda *r: seen.append("worker"),
              launch=lambda args: seen.append("launch") or 7)
    assert start(_args(tmp_path), PROG, **kw) == 0
    assert start(_args(tmp_path, nproc=2), PROG, **kw) == 7
    assert seen == ["alone", "launch"]
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    with pytest.raises(CommandError, match=f"already initialized in this process; run `{PROG}` in its own"):
        start(_args(tmp_path), PROG, **kw)


def test_the_options_every_job_checks(tmp_path) -> None:
    with pytest.raises(CommandError, match=r"^--max-restarts needs --nproc"):
        job_mod.check_launch_options(_args(tmp_path, max_restarts=1))
    with pytest.raises(CommandError, match=r"^--nproc must be >= 1, got 0\.$"):
        job_mod.check_launch_options(_args(tmp_path, nproc=0))
    job_mod.check_launch_options(_args(tmp_path, nproc=2, max_restarts=1))
    with pytest.raises(CommandError, match=r"^--resume needs --checkpoint-dir DIR\.$"):
        job_mod.check_checkpoint_options(_args(tmp_path, checkpoint_dir=None, resume=True))
    (tmp_path / "file").write_text("")
    with pytest.raises(CommandError, match="is a file, not a directory"):
        job_mod.check_checkpoint_options(_args(tmp_path, checkpoint_dir=str(tmp_path / "file")))
    with pytest.raises(CommandError, match="does not exist; create it first"):
        job_mod.check_checkpoint_options(_args(tmp_path, checkpoint_dir=str(tmp_path / "no" / "ck")))
    job_mod.check_checkpoint_options(_args(tmp_path))


# ---------------------------------------------------------------- the report
def test_a_report_is_strict_json_with_null_for_non_finite() -> None:
    report = {"a": float("nan"), "b": [1.5, float("inf"), {"c": -float("inf")}], "d": (2, "x"), "e": None,
              "f": 0.1, "g": 3}

    def refuse(name):  # json.loads would otherwise read a bare NaN / Infinity back
        raise AssertionError(f"{name} in the JSON")

    back = json.loads(report_json(report), parse_constant=refuse)
    assert back == {"a": None, "b": [1.5, None, {"c": None}], "d": [2, "x"], "e": None, "f": 0.1, "g": 3}
    assert json_safe(0.1) == 0.1 and json_safe(math.pi) == math.pi
