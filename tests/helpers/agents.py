"""Several "machines" on one: torchrun agents (``pyg-dynscale ... --nnodes`` or ``torchrun --nnodes``) started as
separate processes on localhost, meeting at a c10d rendezvous on a free port (tests/commands/test_multinode.py,
tests/docs/test_many_machines.py).

The first agent hosts the rendezvous store (the first to bind the endpoint's port; on a real cluster the machine
named by the endpoint): :func:`start_agents` starts it, waits until that port accepts connections, then starts the
others -- an order by condition, not by a guessed sleep. Each agent's stdout and stderr go to files (a worker's
traceback cannot fill a pipe and stall it).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence

START_TIMEOUT = 180.0  # imports and the rendezvous, on a busy 2-core machine


class Agent:
    """One machine's agent process: its command, its output files, its exit status."""

    def __init__(self, cmd: Sequence[str], logs: Path, name: str, env: dict, cwd: Path) -> None:
        self.name = name
        self.out_path, self.err_path = logs / f"{name}.out", logs / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            # its own session: a test that fails mid-way ends the agent and its workers together
            self.proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                         cwd=cwd, start_new_session=True)

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise AssertionError(f"{self.name} did not finish within {timeout:.0f} s:\n{self.stderr[-3000:]}")

    def kill_all(self) -> None:
        """SIGKILL the agent and its workers (its session)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_agents(cmds: Sequence[Sequence[str]], port: int, logs: Path, env: dict, cwd: Path,
                 envs: Optional[Sequence[dict]] = None) -> list[Agent]:
    """Start one agent per command (``envs[i]`` added to agent ``i``'s environment): the first, then, once
    it listens on the rendezvous ``port``, the others."""
    logs.mkdir(parents=True, exist_ok=True)
    envs = list(envs) if envs is not None else [{} for _ in cmds]
    agents = [Agent(cmds[0], logs, "node0", {**env, **envs[0]}, cwd)]
    deadline = time.monotonic() + START_TIMEOUT
    while not listening(port):
        if agents[0].proc.poll() is not None or time.monotonic() > deadline:
            agents[0].kill_all()
            raise AssertionError(f"the first agent never listened on {port}:\n{agents[0].stderr[-3000:]}")
        time.sleep(0.1)  # polling a condition
    agents += [Agent(c, logs, f"node{i}", {**env, **e}, cwd) for i, (c, e) in enumerate(zip(cmds[1:], envs[1:]), 1)]
    return agents


def worker_envs(agent_pid: int) -> dict[int, dict[str, str]]:
    """``{pid: environment}`` of the workers an agent started (its children that have a ``RANK``)."""
    out = subprocess.run(["pgrep", "-P", str(agent_pid)], capture_output=True, text=True).stdout.split()
    found = {}
    for pid in out:
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        env = dict(e.decode(errors="replace").split("=", 1) for e in raw if b"=" in e)
        if "RANK" in env:
            found[int(pid)] = env
    return found


def wait_for(path: Path, agents: Sequence[Agent], timeout: float = START_TIMEOUT) -> None:
    """Wait until ``path`` exists (a checkpoint written), failing if an agent exits first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        ended = [a for a in agents if a.proc.poll() is not None]
        if ended or time.monotonic() > deadline:
            for a in agents:
                a.kill_all()
            raise AssertionError(f"{path} never appeared; " + "; ".join(
                f"{a.name} (exit {a.proc.returncode}):\n{a.stderr[-2000:]}" for a in agents))
        time.sleep(0.1)  # polling a condition
