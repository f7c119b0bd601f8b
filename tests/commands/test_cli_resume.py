"""``pyg-dynscale train --resume``: honest about what it resumes (issue 24, item 3).

A resumed run restores the optimizer's state, learning rate included, so a changed hyperparameter would be
silently ignored while the report showed the new value. The run record of a checkpoint holds the
hyperparameters (lr, optimizer, loss, stale policy): a resume with another value is refused, naming the option
and the checkpoint's value; a checkpoint whose record predates them is checked against the restored optimizer.
``--resume`` with nothing to resume says that it starts fresh; the JSON report states what the run used.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pyg_dynscale.cli import main

SMALL = ["train", "england_covid", "--hidden", "4", "--no-progress"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """2 epochs at --lr 0.01 (the default), one process, checkpoints after each epoch."""
    d = tmp_path_factory.mktemp("resume") / "ck"
    assert main(SMALL + ["--epochs", "2", "--checkpoint-dir", str(d), "--checkpoint-every", "1", "--json"]) == 0
    return d


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _one_error_line(capsys) -> str:
    cap = capsys.readouterr()
    lines = [line for line in cap.err.splitlines() if line.strip()]
    assert cap.out == "" and len(lines) == 1 and "Traceback" not in cap.err, cap.err
    return lines[0]


def test_the_record_holds_the_hyperparameters(checkpoint) -> None:
    record = json.loads((checkpoint / "epoch-000002" / "pyg_dynscale.json").read_text())
    assert record["run"]["lr"] == 0.01 and record["run"]["optimizer"] == "adam"
    assert record["run"]["loss"] == "mse" and record["run"]["stale"] == "off"


def test_another_lr_is_refused_naming_the_option_and_the_checkpoint_value(checkpoint, tmp_path, capsys) -> None:
    d = _copy(checkpoint, tmp_path / "ck")
    assert main(SMALL + ["--epochs", "4", "--lr", "0.05", "--checkpoint-dir", str(d), "--resume"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("pyg-dynscale train: error: --resume: ")
    assert "lr: checkpoint 0.01, this run 0.05 (--lr)" in line and "resume with --lr 0.01" in line
    assert sorted(p.name for p in d.iterdir()) == ["epoch-000001", "epoch-000002", "partition.pt"]  # nothing ran


def test_a_record_without_the_lr_is_checked_against_the_restored_optimizer(checkpoint, tmp_path, capsys) -> None:
    """A checkpoint written before the record held the hyperparameters: the learning rate restored with the
    optimizer state is compared instead (before this, the run went on at 0.01 and reported 0.05)."""
    d = _copy(checkpoint, tmp_path / "ck")
    for epoch in ("epoch-000001", "epoch-000002"):
        meta = d / epoch / "pyg_dynscale.json"
        record = json.loads(meta.read_text())
        for key in ("lr", "optimizer", "loss", "stale"):
            del record["run"][key]
        meta.write_text(json.dumps(record))
    assert main(SMALL + ["--epochs", "3", "--lr", "0.05", "--checkpoint-dir", str(d), "--resume"]) == 2
    line = _one_error_line(capsys)
    assert "trained with lr 0.01 (restored with its optimizer state)" in line and "resume with --lr 0.01" in line
    # the same learning rate resumes
    assert main(SMALL + ["--epochs", "3", "--checkpoint-dir", str(d), "--resume", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["resumed_from_epoch"] == 2 and r["lr"] == 0.01


def test_the_report_states_what_the_resumed_run_used(checkpoint, tmp_path, capsys) -> None:
    d = _copy(checkpoint, tmp_path / "ck")
    assert main(SMALL + ["--epochs", "3", "--checkpoint-dir", str(d), "--resume", "--json"]) == 0
    cap = capsys.readouterr()
    r = json.loads(cap.out)
    assert r["resumed_from_epoch"] == 2 and r["resumed_from"] == str(d / "epoch-000002")
    assert r["lr"] == 0.01 and r["optimizer"] == "adam" and r["loss"] == "mse"
    assert len(r["losses"]) == 3  # the checkpoint's 2 epochs and this run's one
    assert "starting fresh" not in cap.err
    # the text report says it too
    assert main(SMALL + ["--epochs", "4", "--checkpoint-dir", str(d), "--resume"]) == 0
    assert f"resumed from      epoch 3 ({d / 'epoch-000003'}), lr 0.01" in capsys.readouterr().out


@pytest.mark.parametrize("state", ["missing", "empty", "partial only"])
def test_nothing_to_resume_says_it_starts_fresh(state, tmp_path, capsys) -> None:
    d = tmp_path / "ck"
    if state != "missing":
        d.mkdir()
    if state == "partial only":  # a crash while writing the first checkpoint leaves only this
        (d / ".partial-epoch-000001").mkdir()
    assert main(SMALL + ["--epochs", "1", "--checkpoint-dir", str(d), "--resume", "--json"]) == 0
    cap = capsys.readouterr()
    lines = [line for line in cap.err.splitlines() if line.strip()]
    assert lines == [f"pyg-dynscale train: --resume: no complete checkpoint in '{d}' yet; starting fresh at epoch 1 "
                     "of 1."], cap.err
    r = json.loads(cap.out)
    assert r["resumed_from_epoch"] is None and r["resumed_from"] is None and r["lr"] == 0.01
    assert os.path.isdir(d / "epoch-000001")


def test_without_resume_nothing_is_said(tmp_path, capsys) -> None:
    assert main(SMALL + ["--epochs", "1", "--checkpoint-dir", str(tmp_path / "ck"), "--json"]) == 0
    cap = capsys.readouterr()
    assert cap.err.strip() == "" and json.loads(cap.out)["resumed_from_epoch"] is None
