"""``pyg-dynscale train-events --memory-placement partitioned|sven``: one 2-process job (Sven's memory, the owners
of a ``partition-events --out`` file, float64) equals the in-process emulation of the replicated memory, and its
bytes report has measured == predicted, and it resumes bit for bit on 2 processes; in-process: checkpoints of a
partitioned memory resume bit for bit, a resume with another placement or partition is refused, bad values are one
line naming the option."""
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
import torch

from pyg_dynscale.cli import main
from tests.helpers.event_csv import emulate, write_events_csv
from tests.helpers.event_streams import assert_metrics_close

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--epochs", "2", "--batch-size", "20", "--memory-dim", "6", "--time-dim", "4", "--embedding-dim", "6",
        "--dtype", "float64", "--lr", "0.01", "--seed", "3", "--num-neighbors", "4"]


@pytest.fixture(scope="module")
def events_csv(tmp_path_factory) -> str:
    return write_events_csv(tmp_path_factory.mktemp("events") / "events.csv", 400, 40, msg_dim=2, seed=5,
                            burst_length=20, burst_fraction=0.5)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def _main(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
    return code, out.getvalue()


def _emulation(events_csv: str, *extra) -> tuple[list, list, dict]:
    """Losses, validation metrics and test metrics of the in-process emulation (one process, the same schedule)."""
    return emulate(events_csv, *ARGS, *extra)[1:]


def _sven_job(events_csv: str, owner_file: str, ck: Path, *extra) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train-events", events_csv, "--nproc", "2",
                           "--parallelism", "2,1,1", "--json", "--no-progress", *ARGS, "--memory-placement", "sven",
                           "--partition", owner_file, "--checkpoint-dir", str(ck), *extra],
                          capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_two_processes_sven_with_a_partition_file_equal_replicated(events_csv, tmp_path, capsys):
    owner_file = str(tmp_path / "owner.pt")
    code, _ = _main("partition-events", events_csv, "--parts", "2", "--batch-size", "20", "--num-neighbors", "4",
                    "--out", owner_file)
    owner = torch.load(owner_file)
    assert code == 0 and 0 < int(owner.sum()) < owner.numel()  # two non-empty parts
    r = _sven_job(events_csv, owner_file, tmp_path / "ck")
    assert r["memory_placement"] == "sven" and r["partition"] == owner_file and r["world_size"] == 2
    assert r["owned"] == torch.bincount(owner, minlength=2).tolist() != [20, 20]  # the file's owners, not range's
    assert r["gradient_sync"] == "sync" and r["micro_batches"] == 1 == r["micro_batches_chosen"]
    # Sven's partitioned memory on 2 processes == the replicated memory's one-process emulation (float64)
    losses, val, test = _emulation(events_csv, "--parallelism", "2,1,1")
    assert r["losses"] == pytest.approx(losses, rel=1e-9, abs=0)
    sizes = [r["events"]["val"]] * len(val) + [r["events"]["test"]]
    for got, want, events in zip(r["val_metrics"] + [r["test_metrics"]], val + [test], sizes):
        assert_metrics_close(got, want, events)  # AP / AUC / MRR: never compared exactly across computations
    # the bytes of the last epoch, summed over both processes: measured == what the id lists predict
    t = r["traffic"]
    assert t["measured"] == t["predicted"], t
    assert t["measured"]["dispatch"] > 0 and t["measured"]["aggregation"] > 0 and t["measured"]["gradients"] > 0
    red = t["redundancy"]
    assert 0 < red["eta1"] < 1 and 0 <= red["eta2"] < 1
    assert red["eta1"] == (red["dispatch_occurrences"] - red["dispatch_distinct"]) / red["dispatch_occurrences"]
    dispatch = torch.tensor(t["matrix"]["dispatch"])
    assert dispatch.shape == (2, 2) and int(dispatch.sum()) == red["dispatch_distinct"]
    asked = int(dispatch.sum() - dispatch.trace())  # rows fetched from the other process, by both processes
    assert dispatch[0, 1] > 0 and dispatch[1, 0] > 0 and t["measured"]["requests"] == 8 * asked  # summed
    # a resume with another placement or partition is refused before any work, naming the options
    ck = ["--checkpoint-dir", str(tmp_path / "ck"), "--resume", "--no-progress", *ARGS, "--parallelism", "2,1,1"]
    code, out = _main("train-events", events_csv, *ck)
    assert code == 2 and out == ""
    err = _one_line(capsys)
    assert "memory_placement: checkpoint 'sven', this run 'replicated' (--memory-placement)" in err
    assert "--memory-placement sven" in err and "--nproc 2" in err
    code, out = _main("train-events", events_csv, *ck, "--memory-placement", "sven", "--partition", "interval")
    err = _one_line(capsys)
    assert code == 2 and "partition: checkpoint 'sha256:" in err and "this run 'interval' (--partition)" in err
    assert "--partition FILE holding the owner tensor the checkpoint was written with" in err
    # 2 processes resume epoch 2 from epoch 1's checkpoint (each owner's rows, DCP) bit for bit
    shutil.rmtree(tmp_path / "ck" / "epoch-000002")
    again = _sven_job(events_csv, owner_file, tmp_path / "ck", "--resume")
    assert again["resumed_from_epoch"] == 1 and again["losses"] == r["losses"]
    assert again["val_metrics"] == r["val_metrics"] and again["test_metrics"] == r["test_metrics"]


def test_partitioned_checkpoints_resume_bit_for_bit(events_csv, tmp_path, capsys):
    sven = ["--parallelism", "2,1,1", "--memory-placement", "partitioned", "--partition", "interval", "--json",
            "--no-progress", *ARGS]
    code, out = _main("train-events", events_csv, *sven)
    clean = json.loads(out)
    assert code == 0 and clean["traffic"]["measured"] == clean["traffic"]["predicted"]
    ck = ["--checkpoint-dir", str(tmp_path / "ck")]
    assert _main("train-events", events_csv, *sven, *ck, "--epochs", "1")[0] == 0
    code, out = _main("train-events", events_csv, *sven, *ck, "--resume")
    r = json.loads(out)
    assert code == 0 and r["resumed_from_epoch"] == 1
    assert r["losses"] == clean["losses"] and r["val_metrics"] == clean["val_metrics"]
    assert r["test_metrics"] == clean["test_metrics"]
    capsys.readouterr()
    # a field written only when not the default: the checkpoint's default is named
    assert _main("train-events", events_csv, *sven, *ck, "--resume", "--gradient-sync", "delayed")[0] == 2
    err = _one_line(capsys)
    assert "gradient_sync: checkpoint 'sync', this run 'delayed' (--gradient-sync)" in err
    assert "resume with --gradient-sync sync" in err
    # the text report names the placement and its bytes
    code, out = _main("train-events", events_csv, *[a for a in sven if a != "--json"])
    assert code == 0 and "partitioned memory   partition interval: dispatch" in out and "eta1" in out


@pytest.mark.parametrize("argv,needle", [
    (["--memory-placement", "sharded"], "argument --memory-placement: invalid choice: 'sharded'"),
    (["--gradient-sync", "async"], "argument --gradient-sync: invalid choice: 'async'"),
    (["--micro-batches", "0"], "--micro-batches must be an integer >= 1 or auto, got '0'"),
    (["--micro-batches", "fast"], "--micro-batches must be an integer >= 1 or auto, got 'fast'"),
    (["--micro-batches", "2"], "--micro-batches 2 pipelines Sven's partitioned dispatch: add --memory-placement sven"),
    (["--partition", "interval"], "--partition interval: a replicated memory has no owners"),
    (["--memory-placement", "sven", "--parallelism", "1,2,1"], "--memory-placement sven runs mini-batch parallelism "
                                                               "only: use --parallelism 2,1,1"),
    (["--memory-placement", "sven", "--memory-service"], "--memory-placement sven does not combine with "
                                                         "--memory-service"),
    (["--memory-placement", "sven", "--prefetch", "--micro-batches", "2"], "not built for these options: "
                                                                           "--prefetch is True"),  # MemoryTrainer's
    (["--memory-placement", "sven", "--partition", "/no/such/owner.pt"], "--partition '/no/such/owner.pt' is "
                                                                         "neither a method"),
    (["--memory-placement", "sven", "--partition", "{float}"], "the owner tensor is float32, not an integer tensor"),
    (["--memory-placement", "sven", "--partition", "{matrix}"], "the owner tensor has shape [2, 40]"),
    (["--memory-placement", "sven", "--partition", "{two}"], "the owner tensor has parts 0 .. 1 for 1 process(es)"),
    (["--memory-placement", "sven", "--partition", "{text}"], "not a saved tensor"),
    (["--memory-placement", "sven", "--partition", "{short}"], "the owner tensor has 5 entries for the 40 nodes of "
                                                               "PATH"),
])
def test_bad_values_are_one_line_naming_the_option(events_csv, tmp_path, argv, needle, capsys):
    files = {"float": torch.zeros(40), "matrix": torch.zeros(2, 40, dtype=torch.long),
             "two": torch.arange(40) % 2, "short": torch.zeros(5, dtype=torch.long)}
    paths = {}
    for name, x in files.items():
        paths[name] = str(tmp_path / f"{name}.pt")
        torch.save(x, paths[name])
    paths["text"] = str(tmp_path / "owner.txt")
    Path(paths["text"]).write_text("0 1 0 1\n")
    code, out = _main("train-events", events_csv, "--epochs", "1", "--no-progress", *[a.format(**paths) for a in argv])
    err = _one_line(capsys)
    assert code == 2 and out == "" and needle in err, err
