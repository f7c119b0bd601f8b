"""``pyg-dynscale train --nproc N --max-restarts K``: a recovery says so (issue 25, item 4).

A rank killed mid-run, torchrun restarting the workers, ``--resume`` continuing from the newest checkpoint: the
launcher says in one line which rank died, why, and which attempt starts (torchrun's own ``failed (exitcode:
-9)`` log lines are not printed); rank 0 says where training goes on; the JSON report counts the restarts.
Before, the log held torchrun's error lines and never said that the job restarted or where it resumed.

One real job is killed (``tests/fault_injection/sitecustomize.py``: rank 1 ends itself with ``SIGKILL`` at the
start of epoch 3 of torchrun's first attempt) and compared with an uninterrupted one; the launcher's agent and
its lines are also checked without processes (a scripted monitor), the job that exhausts its restarts included.
"""
from __future__ import annotations

import logging
import os
import re
from types import SimpleNamespace

import pytest
import torch

from pyg_dynscale.commands.launch import _DropAgentWarnings, _reporting_agent, attempt_note, restart_line
from tests.helpers.cli_jobs import FAULTS, ROOT, UNINTERRUPTED
from tests.helpers.cli_jobs import checkpoint_params as _params, report_of as _report, run_cli as _cli

#: test_cli_train.py's uninterrupted job (6 epochs, checkpoints every 2): this job is that one, killed and resumed
ARGS = UNINTERRUPTED


def test_a_killed_rank_is_restarted_said_in_one_line_and_resumes_exactly(tmp_path, cli_uninterrupted_run) -> None:
    killed = str(tmp_path / "killed")
    proc = _cli(ARGS + ["--checkpoint-dir", killed, "--resume", "--max-restarts", "1"],
                PYTHONPATH=f"{FAULTS}{os.pathsep}{ROOT}", PYG_DYNSCALE_TEST_FAULT="1:3:kill")
    r = _report(proc)
    err = proc.stderr
    restarts = [line for line in err.splitlines() if "restarting" in line]
    assert restarts == ["pyg-dynscale train: rank 1 died (SIGKILL); restarting, attempt 2 of 2"], err[-3000:]
    # rank 0: where training goes on (the checkpoint of epoch 2 is complete before epoch 3 starts on any rank)
    assert "pyg-dynscale train: resumed from checkpoint epoch 2 (attempt 2 of 2)" in err.splitlines(), err[-3000:]
    # nothing else: no traceback, no torchrun log line ("E1125 ... failed (exitcode: -9) local_rank: 1 ...")
    assert "Traceback" not in err and "exitcode" not in err, err[-3000:]
    assert all(line.startswith("pyg-dynscale train") for line in err.splitlines() if line.strip()), err[-3000:]
    assert r["restarts"] == 1 and r["resumed_from_epoch"] == 2
    assert r["resumed_from"] == os.path.join(killed, "epoch-000002")

    # and it ends where the uninterrupted job ends, bit for bit (float64; tests/conftest.py runs it once)
    r_clean, clean = cli_uninterrupted_run
    assert r_clean["restarts"] == 0 and r_clean["resumed_from_epoch"] is None
    assert r["losses"] == r_clean["losses"] and r["test_metric"] == r_clean["test_metric"]
    a, b = _params(os.path.join(clean, "epoch-000006")), _params(os.path.join(killed, "epoch-000006"))
    assert a.keys() == b.keys() and len(a) > 10
    for k in a:
        assert (torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k]), k


# ------------------------------------------------------- without processes
def test_restart_lines() -> None:
    assert restart_line((1, -9, "killed by signal SIGKILL"), 2, 3) == \
        "pyg-dynscale train: rank 1 died (SIGKILL); restarting, attempt 2 of 3"
    assert restart_line((0, 1, "RuntimeError: injected fault"), 3, 3) == \
        "pyg-dynscale train: rank 0 failed (exit code 1): RuntimeError: injected fault; restarting, attempt 3 of 3"
    assert restart_line((None, 1, "rank 2 stopped answering: no heartbeat (noticed by rank 0)"), 2, 2) == \
        "pyg-dynscale train: rank 2 stopped answering: no heartbeat (noticed by rank 0); restarting, attempt 2 of 2"
    assert restart_line(None, 2, 2) == "pyg-dynscale train: the workers became unhealthy; restarting, attempt 2 of 2"


def test_the_agent_says_each_restart_once_and_nothing_when_restarts_are_exhausted(capsys) -> None:
    """Three failed attempts with ``--max-restarts 2``: a line before attempts 2 and 3, none after the third
    (the launcher's final line, unchanged, says why the job failed); healthy polls say nothing."""
    from torch.distributed.elastic.agent.server.api import RunResult, WorkerState
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    def failed(rank: int, exitcode: int) -> RunResult:
        f = ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=exitcode, error_file="/nonexistent")
        return RunResult(state=WorkerState.FAILED, failures={rank: f})

    healthy = RunResult(state=WorkerState.HEALTHY)
    script = [healthy, failed(1, -9), healthy, failed(0, 3), healthy, failed(1, -15)]

    class Scripted:
        def _monitor_workers(self, worker_group):  # stands for torchrun's LocalElasticAgent
            return script.pop(0)

    agent = _reporting_agent(Scripted)()
    group = SimpleNamespace(spec=SimpleNamespace(max_restarts=2))
    said = []
    for _ in range(6):
        agent._monitor_workers(group)
        said.append(capsys.readouterr().err)
    assert said[0] == said[2] == said[4] == said[5] == ""  # healthy polls; the last failure: restarts exhausted
    assert said[1] == "pyg-dynscale train: rank 1 died (SIGKILL); restarting, attempt 2 of 3\n"
    assert re.fullmatch(r"pyg-dynscale train: rank 0 failed \(exit code 3\): .+; restarting, attempt 3 of 3\n",
                        said[3]), said[3]


def test_torchruns_failed_attempt_lines_are_dropped_other_errors_kept() -> None:
    def record(name: str, level: int, msg: str) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, msg, (), None)

    keep = _DropAgentWarnings().filter
    assert not keep(record("torch.distributed.elastic.multiprocessing.api", logging.ERROR,
                           "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s"))
    assert not keep(record("torch.distributed.elastic.agent.server.api", logging.WARNING, "Received %s death signal"))
    assert keep(record("torch.distributed.elastic.agent.server.api", logging.ERROR, "worker pids do not match"))
    assert keep(record("torch.distributed.other", logging.WARNING, "failed (exitcode: 1)"))


@pytest.mark.parametrize("count, most, note", [(None, None, ""), ("0", "3", ""), ("1", "2", " (attempt 2 of 3)"),
                                               ("2", "2", " (attempt 3 of 3)")])
def test_attempt_note(monkeypatch, count, most, note) -> None:
    for key, value in (("TORCHELASTIC_RESTART_COUNT", count), ("TORCHELASTIC_MAX_RESTARTS", most)):
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    assert attempt_note() == note
