"""``pyg-dynscale train-events --event-placement auto|per_rank``: on 2 processes from an event store directory
(``pyg_dynscale.ctdg.ingest_jodie_csv`` of the CSV; each process reads its ranges) the default ``auto`` takes
events per rank for ``--memory-placement sven`` and equals the ``--event-placement whole`` job on the CSV exactly
(float64: losses, validation and test metrics), with ``--prefetch`` too; its report says the placement in effect
and has the events / neighbours / mailbox bytes with measured == predicted; its checkpoints (each process's part of
the owners' index) resume bit for bit on 2 processes with ``--event-placement per_rank`` (the same placement) and
are refused with ``whole``; refused combinations are one line naming the options."""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyg_dynscale.cli import main
from tests.helpers.event_csv import write_events_csv

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--epochs", "2", "--batch-size", "20", "--memory-dim", "6", "--time-dim", "4", "--embedding-dim", "6",
        "--dtype", "float64", "--lr", "0.01", "--seed", "3", "--num-neighbors", "4", "--parallelism", "2,1,1",
        "--memory-placement", "sven", "--partition", "interval", "--json", "--no-progress"]


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> tuple[str, str]:
    from pyg_dynscale.ctdg import ingest_jodie_csv

    folder = tmp_path_factory.mktemp("events")
    csv = write_events_csv(folder / "events.csv", 400, 40, msg_dim=2, seed=5, burst_length=20, burst_fraction=0.5)
    ingest_jodie_csv(csv, folder / "store")
    return str(csv), str(folder / "store")


def _job(path: str, *extra) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train-events", path, "--nproc", "2", *ARGS, *extra],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _same(a: dict, b: dict) -> None:
    assert a["losses"] == b["losses"]
    assert a["val_metrics"] == b["val_metrics"] and a["test_metrics"] == b["test_metrics"]


def test_per_rank_from_a_store_equals_whole_and_resumes(events, tmp_path):
    csv, store = events
    whole = _job(csv, "--event-placement", "whole")
    assert whole["event_placement"] == "whole"
    ck = tmp_path / "ck"
    per_rank = _job(store, "--checkpoint-dir", str(ck))  # auto: events per rank for a partitioned memory
    assert per_rank["event_placement"] == "per_rank" and per_rank["events"] == whole["events"]
    _same(per_rank, whole)
    # (the prefetcher and micro-batches with events per rank: tests/ctdg/test_rank_events_pipelines.py, bitwise)
    t = per_rank["traffic"]
    assert t["measured"] == t["predicted"], t
    for kind in ("events", "neighbors", "mailbox"):  # the owners' index is served: bytes that "whole" never moves
        assert t["measured"][kind] > 0 and kind not in whole["traffic"]["measured"], kind
    for kind in ("dispatch", "requests", "aggregation"):  # the memory's exchanges as with the whole stream
        assert t["measured"][kind] == whole["traffic"]["measured"][kind], kind
    # 2 processes resume epoch 2 from epoch 1's checkpoint (each process's rows and index part) bit for bit
    shutil.rmtree(ck / "epoch-000002")
    again = _job(store, "--event-placement", "per_rank", "--checkpoint-dir", str(ck), "--resume")
    assert again["resumed_from_epoch"] == 1
    _same(again, per_rank)
    # a checkpoint of events per rank does not resume as the whole stream (other state): one line naming the option
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train-events", store, "--nproc", "2", *ARGS,
                           "--event-placement", "whole", "--checkpoint-dir", str(ck), "--resume"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "event_placement: checkpoint 'per_rank', this run 'whole' (--event-placement)" in proc.stderr, proc.stderr


def _main(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue()


@pytest.mark.parametrize("argv,needle", [
    (["--event-placement", "scattered"], "argument --event-placement: invalid choice: 'scattered'"),
    (["--event-placement", "per_rank"], "--event-placement per_rank keeps each vertex's neighbours and messages at "
                                        "the owner of its memory row: add --memory-placement partitioned or sven"),
    (["--event-placement", "per_rank", "--memory-placement", "sven", "--partition", "flexbicut"],
     "--partition flexbicut does not combine with --event-placement per_rank (its pre-sampling walks the whole "
     "stream"),
])
def test_refused_combinations_are_one_line_naming_the_options(events, argv, needle, capsys):
    code, out = _main("train-events", events[0], "--epochs", "1", "--no-progress", *argv)
    err = capsys.readouterr().err
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


def test_a_directory_that_is_no_store_is_refused(tmp_path, capsys):
    code, _ = _main("train-events", str(tmp_path), "--epochs", "1", "--no-progress")
    err = capsys.readouterr().err
    assert code == 2 and "is a directory but no event store (no meta.json)" in err, err


def test_one_process_per_rank_is_the_whole_stream_and_resumes_as_it(events, tmp_path, capsys):
    small = ["--epochs", "1", "--batch-size", "50", "--memory-dim", "4", "--time-dim", "2", "--embedding-dim", "4",
             "--no-progress", "--parallelism", "2,1,1", "--memory-placement", "sven",
             "--checkpoint-dir", str(tmp_path / "ck")]
    assert _main("train-events", events[1], *small)[0] == 0  # one process from the store: the whole stream
    capsys.readouterr()
    # per_rank on one process is the whole stream in effect: the checkpoint's placement, it resumes
    code, out = _main("train-events", events[1], *small, "--epochs", "2", "--json", "--resume",
                      "--event-placement", "per_rank")
    assert code == 0, capsys.readouterr().err
    report = json.loads(out)
    assert report["resumed_from_epoch"] == 1 and report["event_placement"] == "whole"
