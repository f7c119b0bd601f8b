"""A non-finite training loss ends ``train``, ``train --windows`` and ``train-events`` with one line naming the
epoch, the batch and the fix in the command's options (``--lr``; for DCRNN on a graph with a vertex that has
out-edges and no in-edges, the vertex and ``--model``), exit status 2, no traceback -- in this process, and
under ``--nproc 2`` (one line for the job, naming the batch every rank stopped at)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from pyg_dynscale.cli import main
from tests.helpers.cli_jobs import run_cli
from tests.helpers.datasets import dataset_file
from tests.helpers.event_csv import write_events_csv

LR_LINE = r"the training loss is (nan|inf|-inf) at epoch (\d+), batch (\d+) of (\d+)(?: \(ranks? [\d, ]+\))?; " \
          r"lower --lr \(it is 1e\+30\) or use --dtype float64\."


@pytest.fixture(scope="module")
def events_csv(tmp_path_factory) -> str:
    return write_events_csv(tmp_path_factory.mktemp("nonfinite") / "events.csv", 300, 30, msg_dim=3, seed=7,
                            burst_length=15)


def _argv(kind: str, events_csv: str) -> list:
    common = ["--lr", "1e30", "--epochs", "3", "--no-progress"]
    return {"train": ["train", "england_covid", "--hidden", "4", *common],
            "windows": ["train", "england_covid", "--windows", "4", "--hidden", "4", *common],
            "events": ["train-events", events_csv, *common]}[kind]


@pytest.mark.parametrize("kind", ["train", "windows", "events"])
def test_lr_1e30_is_one_line_naming_epoch_batch_and_lr(kind, events_csv, capsys) -> None:
    argv = _argv(kind, events_csv)
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "Traceback" not in cap.err
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1, cap.err
    assert re.fullmatch(rf"pyg-dynscale {argv[0]}: error: {LR_LINE}", lines[0]), lines[0]


def test_dcrnn_on_a_vertex_without_in_edges_names_the_vertex_and_the_model_option(tmp_path, capsys) -> None:
    data = str(dataset_file("snap/CollegeMsg.txt"))  # directed messages: some senders receive none
    assert main(["train", data, "--window", "30d", "--model", "dcrnn", "--hidden", "4", "--epochs", "2",
                 "--no-progress"]) == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in cap.err, cap.err
    assert re.fullmatch(r"pyg-dynscale train: error: the training loss is (nan|inf) at epoch 1, batch 1 of 1; "
                        r"PyGT's DCRNN divides by the in-degree of each edge's source vertex: vertex \d+ .*has "
                        r"out-edges and no in-edges in snapshot \d+ .* use another --model \(e\.g\. gconvgru\)\.",
                        lines[0]), lines[0]


@pytest.mark.parametrize("kind", ["train", "windows", "events"])
def test_under_two_processes_one_line_names_the_batch(kind, events_csv) -> None:
    two = ["--nproc", "2"] + (["--parallelism", "2,1,1"] if kind == "events" else [])
    proc = run_cli([*_argv(kind, events_csv), *two], timeout=240)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and proc.stdout == "", proc.stderr[-3000:]
    found = {m.group(2, 3, 4) for m in re.finditer(LR_LINE, proc.stderr)}
    assert len(found) == 1, proc.stderr  # the same epoch and batch on every rank and in the launcher's line
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and re.search(LR_LINE, lines[0]), proc.stderr  # one line per job, not one per rank
