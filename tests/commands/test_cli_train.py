"""``pyg-dynscale train``: launch styles, exactness, checkpoints, failures, bad input.

Multi-process runs go through the real launchers (``--nproc`` -> torch.distributed.run,
``python -m torch.distributed.run``) in subprocesses; faults are injected with
``tests/fault_injection/sitecustomize.py`` (the package is unchanged).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pyg_dynscale.cli import main
from pyg_dynscale.commands.train import worker_argv
from pyg_dynscale.runtime.metrics import roc_auc
from tests.helpers.cli_jobs import BASE, FAULTS, ROOT, UNINTERRUPTED
from tests.helpers.cli_jobs import cli_env as _env, report_of as _report, run_cli as _cli, worker_pids as _worker_pids

@pytest.fixture(scope="module")
def uninterrupted(cli_uninterrupted_run) -> tuple[dict, str]:
    """:data:`UNINTERRUPTED`'s report and checkpoint folder (run once per session: tests/conftest.py;
    tests/commands/test_cli_restart.py compares a killed and restarted job with it too)."""
    return cli_uninterrupted_run


def test_json_report_keys_and_traffic_equals_plan(uninterrupted) -> None:
    r, _ = uninterrupted
    for key in ("world_size", "scheme", "model", "losses", "test_metric", "epoch_seconds", "bytes_measured",
                "bytes_predicted", "partition_seconds"):
        assert key in r, key
    assert r["world_size"] == 2 and r["scheme"] == "pgc" and r["model"] == "mpnnlstm-dgc"
    assert len(r["losses"]) == len(r["epoch_seconds"]) == 6 and r["losses"][-1] < r["losses"][0]
    assert r["test_metric_name"] == "mse" and r["test_metric"] > 0 and r["test_state"] == "continued"
    for kind in ("spatial", "temporal", "redistribution", "readout", "total"):
        assert r["bytes_measured"][kind] == r["bytes_predicted"][kind], kind
        assert len(r["bytes_measured"][kind]) == 6
    assert r["bytes_measured"]["total"][0] > 0  # the ranks really exchanged rows
    assert r["bytes_measured"]["grad_sync"][0] > 0


def test_two_processes_equal_one_process(uninterrupted, capsys) -> None:
    r2, _ = uninterrupted
    assert main(BASE + ["--epochs", "6"]) == 0
    r1 = json.loads(capsys.readouterr().out)
    assert r1["world_size"] == 1 and r1["bytes_measured"]["total"] == [0] * 6
    torch.testing.assert_close(torch.tensor(r2["losses"]), torch.tensor(r1["losses"]), rtol=1e-10, atol=1e-12)
    assert abs(r2["test_metric"] - r1["test_metric"]) < 1e-9


def test_torchrun_module_and_two_node_rendezvous(uninterrupted) -> None:
    r2, _ = uninterrupted
    args = BASE + ["--epochs", "6"]
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    # `torchrun -m pyg_dynscale` (the module under a torchrun the user starts) is what the two agents below run;
    # a single-node `torchrun --nproc-per-node 2 -m pyg_dynscale train` runs in README.md's block
    # (tests/docs/test_blocks.py), so the --standalone job run here before is left out.
    # two "machines" (two torchrun agents, one process each) meeting at a c10d rendezvous
    from pyg_dynscale.distributed import free_port

    port = free_port()
    nodes = [subprocess.Popen(torchrun + ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                                          "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job",
                                          "-m", "pyg_dynscale", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
             for _ in range(2)]
    outs = [n.communicate(timeout=240) for n in nodes]
    assert all(n.returncode == 0 for n in nodes), [o[1][-2000:] for o in outs]
    reports = [json.loads(o[0]) for o in outs if o[0].strip()]
    assert len(reports) == 1 and reports[0]["world_size"] == 2  # rank 0 reports, on whichever node it is
    assert reports[0]["losses"] == r2["losses"]


# A failure, torchrun's restart (--max-restarts) and --resume reaching this job's parameters bit for bit:
# tests/commands/test_cli_restart.py (this model and job, a rank killed at epoch 3, compared with `uninterrupted`)
# and tests/commands/test_cli_user_model.py (a rank raising at epoch 3: "injected fault", the same checks).


def test_resume_refuses_another_configuration(uninterrupted, capsys) -> None:
    _, d = uninterrupted
    # another model, and the same model on another number of processes (1 instead of 2)
    for extra in (["--model", "tgcn"], []):
        args = [a for a in BASE if a not in ("--model", "mpnnlstm-dgc")] + ["--model", "mpnnlstm-dgc"]
        args = args[:-2] + extra if extra else args
        assert main(args + ["--epochs", "8", "--checkpoint-dir", d, "--resume"]) == 2
        err = capsys.readouterr().err
        assert "written by another run" in err
        assert ("model: checkpoint 'mpnnlstm-dgc', this run 'tgcn'" in err) if extra else \
            ("world_size: checkpoint 2, this run 1" in err)


def test_exception_on_one_rank_stops_every_rank_naming_it(tmp_path) -> None:
    proc = _cli(["train", "england_covid", "--nproc", "3", "--epochs", "2000", "--no-progress"],
                PYTHONPATH=f"{FAULTS}{os.pathsep}{ROOT}", PYG_DYNSCALE_TEST_FAULT="1:3",
                PYG_DYNSCALE_TEST_PROGRESS=str(tmp_path))
    assert proc.returncode == 1
    # every rank stopped at the fault (epoch 3), far from 2000 epochs: counted in epochs, not seconds
    assert [_epochs_done(tmp_path, r) for r in range(3)] != [0, 0, 0], "the progress hook wrote nothing"
    assert all(_epochs_done(tmp_path, r) <= 4 for r in range(3)), [_epochs_done(tmp_path, r) for r in range(3)]
    err = proc.stderr
    # the launcher's one line (after rank 1's traceback: a failure of its own); the ranks that only stopped say
    # nothing (issue 38: one line per job)
    errors = [line for line in err.splitlines() if line.startswith("pyg-dynscale train")]
    assert errors == ["pyg-dynscale train: error: rank 1 failed (exit code 1): RuntimeError: injected fault"], err[-3000:]


def _epochs_done(progress: Path, rank: int) -> int:
    try:
        return int((progress / f"rank{rank}").read_text() or 0)
    except (OSError, ValueError):
        return 0


def test_sigkill_of_one_rank_stops_the_others(tmp_path) -> None:
    cmd = [sys.executable, "-m", "pyg_dynscale", "train", "england_covid", "--nproc", "2", "--epochs", "100000",
           "--no-progress"]
    # each rank writes how many epochs it has finished (tests/fault_injection/sitecustomize.py)
    env = _env(PYTHONPATH=f"{FAULTS}{os.pathsep}{ROOT}", PYG_DYNSCALE_TEST_PROGRESS=str(tmp_path))
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        pids: dict = {}
        while len(pids) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            pids = _worker_pids(launcher.pid)
        assert len(pids) == 2, "workers did not start"
        deadline = time.monotonic() + 60
        while not all(_epochs_done(tmp_path, r) >= 2 for r in range(2)):  # into training (a fixed 8 s sleep before)
            assert time.monotonic() < deadline and launcher.poll() is None, "the ranks did not start training"
            time.sleep(0.1)
        os.kill(pids[1], signal.SIGKILL)
        at_kill = _epochs_done(tmp_path, 0)
        _, err = launcher.communicate(timeout=90)  # a hang guard, not a speed assertion
        assert _epochs_done(tmp_path, 0) <= at_kill + 1  # rank 0 stopped at its next collective
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0
    assert "rank 1 failed (exit code -9): killed by signal SIGKILL" in err, err[-3000:]
    assert not any(Path(f"/proc/{p}").exists() and "zombie" not in Path(f"/proc/{p}/status").read_text().lower()
                   for p in pids.values())


# ------------------------------------------------------------------ bad input
def _edge_list(path: Path, windows: int, seed: int = 0, vertices: int = 30, per_window: int = 60) -> str:
    g = torch.Generator().manual_seed(seed)
    lines = []
    for w in range(windows):
        src = torch.randint(0, vertices, (per_window,), generator=g)
        dst = torch.randint(0, vertices, (per_window,), generator=g)
        lines += [f"{int(s)} {int(d)} {w * 100 + i}" for i, (s, d) in enumerate(zip(src, dst))]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("args, message", [
    (["train", "no/such/file.json"], "no such file: PATH 'no/such/file.json'"),
    (["train", "."], "is a directory"),
    (["train", "england_covid", "--dtype", "float16"], "argument --dtype: float16 is not supported"),  # by the parser
    (["train", "england_covid", "--dtype", "bfloat16"], "argument --dtype: bfloat16 is not supported"),  # by the parser
    pytest.param(["train", "england_covid", "--device", "cuda"], "--device cuda",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="an error only without a GPU")),
    (["train", "england_covid", "--resume"], "--resume needs --checkpoint-dir"),
    (["train", "england_covid", "--save-partition", "no/such/dir/p.pt"], "--save-partition: the folder"),
    (["train", "england_covid", "--partition", "missing.pt"], "--partition: no such file"),
    (["train", "england_covid", "--target", "link"], "--target link needs link labels"),
    (["train", "england_covid", "--window", "1d"], "window"),
    (["train", "england_covid", "--epochs", "0"], "--epochs must be >= 1"),
    (["train", "england_covid", "--max-restarts", "2"], "--max-restarts needs --nproc"),
    (["train", "england_covid", "--lr", "nan"], "--lr must be a positive number"),
    (["train", "england_covid", "--stale", "sometimes"], "--stale sometimes"),
    (["train", "england_covid", "--stale", "static:x"], "static:<c>"),
    (["train", "england_covid", "--stale", "intent", "--stale-kinds", "halo"], "stale.kinds"),
    (["train", "england_covid", "--stale", "intent", "--stale-kind", "temporal"], "write KIND=POLICY"),
    (["train", "england_covid", "--model", "dcrnn", "--fusion", "none"], "--fusion none with --model dcrnn"),
    (["train", "england_covid", "--locality"], "--locality orders the vertices of --scheme pts"),
    (["train", "england_covid", "--recompute-every", "0"], "--recompute-every must be >= 1"),
    (["train", "england_covid", "--model", "dysat", "--recompute-every", "2"], "--recompute-every with --model dysat"),
    (["train", "england_covid", "--recompute-every", "2", "--fusion", "none"], "leave --fusion at full"),
])
def test_bad_input_is_one_clear_line(args: list, message: str, capsys) -> None:
    try:
        code = main(args + ["--no-progress"])
    except SystemExit as exc:  # refused by the parser (argparse): the same one line
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


@pytest.mark.parametrize("args", [["--model", "gcn"], ["--scheme", "metis"], ["--dtype", "int8"]])
def test_unknown_choice_is_a_usage_error(args: list, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["train", "england_covid", *args])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_edge_list_needs_a_window(tmp_path, capsys) -> None:
    path = _edge_list(tmp_path / "g.txt", 5)
    assert main(["train", path, "--no-progress"]) == 2
    assert "--window is required" in capsys.readouterr().err


def test_partition_file_for_another_signal_or_part_count(tmp_path, capsys) -> None:
    from pyg_dynscale.data.loaders import load
    from pyg_dynscale.partition import partition, save_partition

    # 2 parts of the right signal: refused for 1 process
    train, _ = load("england_covid").split(0.8)
    save_partition(partition(train, "pss", 2), str(tmp_path / "two.pt"))
    assert main(BASE + ["--epochs", "1", "--partition", str(tmp_path / "two.pt")]) == 2
    assert "has 2 parts but 1 processes train" in capsys.readouterr().err
    # 1 part of another signal (the whole signal instead of its training split)
    save_partition(partition(load("england_covid"), "pss", 1), str(tmp_path / "other.pt"))
    assert main(BASE + ["--epochs", "1", "--partition", str(tmp_path / "other.pt")]) == 2
    err = capsys.readouterr().err
    assert "--partition" in err and "training split" in err


def test_too_many_processes_same_error_on_every_rank(tmp_path) -> None:
    # 4 windows -> 3 snapshots with degree targets: 2 train, 1 test snapshot of < 3 vertex-time nodes each
    path = tmp_path / "tiny.txt"
    path.write_text("0 1 0\n0 1 100\n0 1 200\n0 1 300\n")
    proc = _cli(["train", str(path), "--window", "100", "--nproc", "3", "--epochs", "1", "--no-progress"])
    assert proc.returncode == 2
    msg = "--nproc 3 is larger than the 2 vertex-time nodes of the test split"
    lines = proc.stderr.strip().splitlines()  # every rank refused it: the launcher's one line, as one process says it
    assert len(lines) == 1 and lines[0].startswith(f"pyg-dynscale train: error: {msg}"), proc.stderr


def test_link_target_reports_auc(tmp_path, capsys) -> None:
    path = _edge_list(tmp_path / "g.txt", 8)
    assert main(["train", path, "--window", "100", "--target", "link", "--model", "dysat", "--hidden", "8",
                 "--epochs", "3", "--json", "--no-progress"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["test_metric_name"] == "auc" and 0.0 <= r["test_metric"] <= 1.0
    assert r["test_state"] == "zero"  # DySAT's position embeddings cover the training snapshots only
    assert r["bytes_measured"]["readout"] == r["bytes_predicted"]["readout"]


# dcrnn on 2 processes: PyGT's cells take the black-box path with its halo and partition whatever the cell, and
# dcrnn adds the edge sorting; gconvgru's own 2-process run (here before) is covered by that and by
# tests/commands/test_cli_user_model.py (PyGT's GConvGRU model on 2 processes == the Python API): one process below
@pytest.mark.parametrize("model", ["dcrnn"])
def test_black_box_models_two_processes_equal_one(model, capsys) -> None:
    pytest.importorskip("torch_geometric_temporal")
    args = ["train", "england_covid", "--model", model, "--scheme", "pts", "--dtype", "float64", "--hidden", "4",
            "--epochs", "2", "--json", "--no-progress"]
    r2 = _report(_cli(args + ["--nproc", "2"]))
    assert main(args) == 0
    r1 = json.loads(capsys.readouterr().out)
    torch.testing.assert_close(torch.tensor(r2["losses"]), torch.tensor(r1["losses"]), rtol=1e-10, atol=1e-12)
    assert abs(r2["test_metric"] - r1["test_metric"]) < 1e-9
    assert r2["bytes_measured"]["total"] == r2["bytes_predicted"]["total"] and r2["bytes_measured"]["total"][0] > 0


def test_gconvgru_from_the_command_line(capsys) -> None:
    pytest.importorskip("torch_geometric_temporal")
    assert main(["train", "england_covid", "--model", "gconvgru", "--scheme", "pts", "--dtype", "float64", "--hidden",
                 "4", "--epochs", "2", "--json", "--no-progress"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["model"] == "gconvgru" and r["runtime_path"] == "blackbox" and r["head"] == "ReLU + Linear(4, 1)"
    assert len(r["losses"]) == 2 and all(0 < loss < 10 for loss in r["losses"]) and 0 < r["test_metric"] < 10


def test_locality_and_recompute_two_processes_equal_one(capsys) -> None:
    """PTS with locality and gradient checkpointing (windows of 3 snapshots) on 2 processes: the losses of
    one process without either; bytes measured == predicted (the recomputation sends nothing)."""
    args = ["train", "england_covid", "--model", "tgcn-deep", "--dtype", "float64", "--hidden", "4", "--epochs", "2",
            "--json", "--no-progress"]
    r2 = _report(_cli(args + ["--nproc", "2", "--scheme", "pts", "--locality", "--recompute-every", "3"]))
    assert r2["locality"] is True and r2["recompute_every"] == 3 and r2["scheme"] == "pts"
    assert main(args) == 0
    r1 = json.loads(capsys.readouterr().out)
    assert r1["locality"] is False and r1["recompute_every"] is None
    torch.testing.assert_close(torch.tensor(r2["losses"]), torch.tensor(r1["losses"]), rtol=1e-10, atol=1e-12)
    assert r2["bytes_measured"]["total"] == r2["bytes_predicted"]["total"] and r2["bytes_measured"]["total"][0] > 0


def test_text_report(capsys) -> None:
    assert main(["train", "england_covid", "--epochs", "2", "--hidden", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "test MSE" in out and "measured / predicted" in out and "epoch time" in out


# ------------------------------------------------------------------ helpers
def test_worker_argv_strips_launcher_options() -> None:
    argv = ["train", "p", "--nproc", "4", "--epochs", "3", "--max-restarts=2", "--json"]
    assert worker_argv(argv) == ["train", "p", "--epochs", "3", "--json"]


def test_roc_auc_matches_pair_counting() -> None:
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 5, (200,), generator=g).double()  # many ties
    labels = (torch.rand(200, generator=g) < 0.4).double()
    pos, neg = scores[labels == 1], scores[labels == 0]
    diff = pos[:, None] - neg[None, :]
    expected = float(((diff > 0).double() + 0.5 * (diff == 0).double()).mean())
    assert abs(roc_auc(scores, labels) - expected) < 1e-12
    assert roc_auc(torch.tensor([0.1, 0.9]), torch.tensor([0.0, 1.0])) == 1.0
    with pytest.raises(ValueError, match="both classes"):
        roc_auc(torch.tensor([0.1, 0.9]), torch.tensor([1.0, 1.0]))


# The stale cache from the command line (--stale static:C, --stale-kind KIND=POLICY, what it saves):
# tests/commands/test_cli_stale.py::test_stale_cache_from_the_command_line, on a 2-process job that test file runs
# anyway for --stale-backward / --stale-scope.
