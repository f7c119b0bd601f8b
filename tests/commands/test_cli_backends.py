"""The commands under NCCL's rules, on the CPU: the device bound (through the package's one ``bind_device``)
before any collective, host values and objects over gloo on every backend.

``train``, ``train --windows`` and ``train-events`` jobs run on 2 spawned ranks of
``tests/helpers/fake_nccl.py``'s device-only backend, each rank's job as the command runs it (its ``init``
binds the device; the process group exists already). The slowest rank's epoch time is what every rank
reports: rank 1's clock is made to run 10^6 s per reading, so the reported times are >= 10^6 s on both
ranks exactly when they were reduced.
"""
from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from pyg_dynscale.cli import build_parser, main
from pyg_dynscale.commands import launch
from pyg_dynscale.distributed import spawn
from tests.helpers import fake_nccl
from tests.helpers.event_csv import write_events_csv

SLOW = 1e6  # seconds that rank 1's clock advances per reading


class _Recorder:
    def __init__(self) -> None:
        self.calls: list = []

    def set_device(self, dev: Any) -> None:
        self.calls.append(str(torch.device("cuda", dev) if isinstance(dev, int) else torch.device(dev)))


def test_the_commands_bind_through_the_package(monkeypatch) -> None:
    """One implementation: an index-less "cuda" binds cuda:LOCAL_RANK, as the trainers' binding does."""
    rec = _Recorder()
    monkeypatch.setattr(torch.cuda, "set_device", rec.set_device)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert launch.bind_device("cuda") == torch.device("cuda", 1)
    assert launch.bind_device("cuda:0") == torch.device("cuda", 0)
    assert launch.bind_device("cpu") is None
    assert rec.calls == ["cuda:1", "cuda:0"]


def test_one_process_train_events_binds_its_gpu(monkeypatch) -> None:
    """``train-events --device cuda`` without torchrun trains on cuda:0 with no process group: bound first."""
    from pyg_dynscale.commands import train_events as cmd

    rec = _Recorder()
    seen: dict = {}
    monkeypatch.setattr(torch.cuda, "set_device", rec.set_device)

    def job(args: Any, rank: int, world: int, init: Any, device: str) -> dict:
        init()
        seen.update(device=device, bound=list(rec.calls))
        return {}

    monkeypatch.setattr(cmd, "train_events", job)
    monkeypatch.setattr(cmd, "print_report", lambda args, r: None)
    monkeypatch.setattr(cmd, "check_args", lambda args: None)
    for var in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    assert main(["train-events", "no-such.csv", "--device", "cuda"]) == 0
    assert seen == {"device": "cuda:0", "bound": ["cuda:0"]}


def _slow_clock(rank: int) -> Any:
    """``time`` for a command module: rank 1's ``perf_counter`` advances :data:`SLOW` per reading."""
    import time

    if rank == 0:
        return time
    ticks = [0]

    def perf_counter() -> float:
        ticks[0] += 1
        return time.perf_counter() + SLOW * ticks[0]

    return types.SimpleNamespace(perf_counter=perf_counter, time=time.time, sleep=time.sleep)


def _jobs(rank: int, world: int, events_csv: str, edges: str) -> dict:
    from pyg_dynscale.commands import train_events, train_job, train_windows
    from pyg_dynscale.commands.train_checks import check_args

    torch.set_num_threads(1)
    out: dict = {}
    init = lambda: launch.bind_device("cpu")  # noqa: E731 -- the commands' init minus init_process_group
    train_events.time = _slow_clock(rank)
    args = build_parser().parse_args(["train-events", events_csv, "--epochs", "2", "--batch-size", "20",
                                      "--memory-dim", "4", "--time-dim", "2", "--embedding-dim", "4",
                                      "--dtype", "float64", "--parallelism", "2,1,1", "--no-progress"])
    r = train_events.train_events(args, rank, world, init, "cpu")
    out["events"] = {"epoch_seconds": r["epoch_seconds"], "traffic": r["traffic"]["measured"]}
    # full-batch train, links (the test AUC gathers every rank's scores as objects)
    args = build_parser().parse_args(["train", edges, "--window", "100", "--target", "link", "--hidden", "4",
                                      "--epochs", "2", "--no-progress", "--device", "cpu"])
    check_args(args)
    r = train_job.train(args, rank, world, init, "cpu")
    out["train"] = {"epoch_seconds": r["epoch_seconds"], "test_metric": r["test_metric"]}
    train_windows.time = _slow_clock(rank)
    args = build_parser().parse_args(["train", "england_covid", "--windows", "4", "--hidden", "4", "--epochs", "2",
                                      "--batch-size", "8", "--no-progress", "--device", "cpu"])
    check_args(args)
    r = train_windows.train_windows(args, rank, world, init, "cpu")
    out["windows"] = {"epoch_seconds": r["epoch_seconds"], "held": r["held_vertex_time_nodes"]}
    out["log"] = list(fake_nccl.LOG)
    return out


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple:
    """A JODIE CSV (train-events) and a temporal edge list of 6 windows of 100 time units (links)."""
    d = tmp_path_factory.mktemp("inputs")
    g = torch.Generator().manual_seed(0)
    pairs = torch.randint(0, 20, (6 * 40, 2), generator=g).tolist()
    (d / "edges.txt").write_text("".join(f"{s} {t} {i // 40 * 100 + i % 40}\n" for i, (s, t) in enumerate(pairs)))
    return write_events_csv(d / "events.csv", 200, 20, msg_dim=2, seed=3), str(d / "edges.txt")


def test_jobs_under_nccl_rules_report_the_slowest_rank(inputs) -> None:
    res = spawn(_jobs, 2, *inputs, backend=fake_nccl.NAME, timeout=180)
    for job in ("events", "windows"):
        a, b = res[0][job]["epoch_seconds"], res[1][job]["epoch_seconds"]
        assert a == b and len(a) == 2 and all(s >= SLOW for s in a), (job, a, b)
    assert res[0]["events"]["traffic"] == res[1]["events"]["traffic"]
    assert res[0]["train"] == res[1]["train"]
    assert res[0]["windows"]["held"] == res[1]["windows"]["held"] and len(res[0]["windows"]["held"]) == 2
    for r in res:
        assert r["log"][0][0] == "bind" and not [e for e in r["log"] if e[0] == "refused"], r["log"][:3]
