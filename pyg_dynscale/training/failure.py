r"""Telling every rank *which* rank failed and why, and never outliving the launcher.

When a rank raises, the others learn of it only as a broken collective
(gloo: "Connection closed by peer") or as the launcher's ``SIGTERM``. The
failing rank therefore writes its cause into the process group's key-value
store (:func:`publish_failure`) before it exits; a rank whose collective
broke, or that torchrun stops, reads it back (:func:`failure_of_others`) and
names it. Under torchrun the store is the launcher agent's, so it outlives
the failed worker.

A rank that *stops answering* (stopped, hung, its machine gone) publishes
nothing: its peers only see a collective time out after ``--timeout``. Every
rank therefore counts a heartbeat up in the agent's store from a thread of
its own (:func:`start_heartbeat`); a rank whose collective timed out compares
the counters over a few beats (:func:`diagnose_peers`) and names the rank
whose counter stood still instead of blaming itself. Such a process cannot
act on torchrun's ``SIGTERM`` either (torchrun waits 30 s before ``SIGKILL``),
so a peer on the same machine ends it (:func:`local_pid`).

A worker must not outlive its launcher (a ``SIGKILL`` of the launcher would
leave it training): :func:`die_with_launcher` asks the kernel for ``SIGTERM``
when the parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``).

On several machines (torchrun agents; ``GROUP_WORLD_SIZE > 1``) a rank also
publishes its node (``GROUP_RANK``) with its host, and the lines name a rank
by its machine (:func:`rank_label`); the ranks of one machine that all went
silent are named as that machine (:func:`ranks_label`: a machine, or its
agent, lost). The keys of one attempt live under :func:`job_round`, which is
the same on every machine.
"""
from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Callable, Optional

import torch.distributed as dist

__all__ = ["publish_failure", "failure_of_others", "is_transport_error", "install_stop_report",
           "die_with_launcher", "launcher_pid", "launcher_gone", "report_launcher_gone", "start_heartbeat",
           "stop_heartbeat", "diagnose_peers", "local_pid", "RankNotAnsweringError", "PeerFailedError",
           "LAUNCHER_PID_ENV", "ROUND_ENV", "HEARTBEAT_SECONDS", "job_round", "failure_text", "nodes", "node_of",
           "rank_label", "ranks_label", "launcher_reports"]

#: Set by ``pyg-dynscale train --nproc`` for its workers: the pid of the launcher they must not outlive.
LAUNCHER_PID_ENV = "PYG_DYNSCALE_LAUNCHER_PID"
#: Set by ``pyg-dynscale train --nproc`` (one machine or ``--nnodes``) for its workers: a token every node's
#: workers of one rendezvous round share, and no other round has (:func:`job_round`).
ROUND_ENV = "PYG_DYNSCALE_ROUND"
#: Seconds between two heartbeats of a rank.
HEARTBEAT_SECONDS = 1.0
#: A rank is silent when its counter did not move for this many heartbeats (margin for a loaded machine).
SILENT_BEATS = 3
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def job_round() -> str:
    """The namespace of this attempt's keys in torchrun's store, the same on every rank of the attempt.

    A restarted job must not read the previous attempt's keys (its failures, heartbeats, process-group
    entries). ``TORCHELASTIC_RESTART_COUNT`` counts the restarts of *this machine's* agent: on several
    machines it differs between nodes after a membership change (a node's agent replaced after it died counts
    from 0 again; an agent that restarted for a new node's arrival does not count that restart), and the ranks
    of one attempt would wait for each other in different namespaces. ``pyg-dynscale train --nproc``'s agent
    therefore hands its workers a token drawn once per rendezvous round (:data:`ROUND_ENV`); under a plain
    ``torchrun`` the restart count is used (exact on one machine and when all agents restart together)."""
    token = os.environ.get(ROUND_ENV)
    if token:
        return f"round-{token}"
    return os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")


def _attempt() -> str:
    return job_round()


def _key(rank: int) -> str:
    return f"pyg_dynscale/failure/{_attempt()}/{rank}"


# ------------------------------------------------------------------ nodes
def nodes() -> int:
    """How many machines (torchrun agents) the job runs on: ``GROUP_WORLD_SIZE``, 1 outside torchrun."""
    try:
        return max(1, int(os.environ.get("GROUP_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def node_of(rank: int) -> Optional[tuple[int, str]]:
    """``(node, host)`` of rank ``rank`` as it published them with its heartbeat (:func:`start_heartbeat`):
    its agent's rank in torchrun's rendezvous (``GROUP_RANK``) and its host name; ``None`` if unknown."""
    store = _agent_store()
    if store is None:
        return None
    try:
        host, _pid, node = store.get(_beat_key("where", rank)).decode().split("\n")[:3]
        return int(node), host
    except Exception:
        return None


def rank_label(rank: int) -> str:
    """``"rank 2"``; on several machines ``"rank 2 (node 1, host h)"`` (one machine: no node to name)."""
    where = node_of(rank) if nodes() > 1 else None
    return f"rank {rank}" if where is None else f"rank {rank} (node {where[0]}, host {where[1]})"


def ranks_label(ranks: list[int]) -> str:
    """Who ``ranks`` are, for a line that says they stopped: on several machines, ranks that share a node
    are named by their node (``"node 1 (host h: ranks 2, 3)"``, a machine or its agent gone), else
    ``rank_label(ranks[0])``."""
    if nodes() > 1 and len(ranks) > 1:
        where = [node_of(r) for r in ranks]
        if where[0] is not None and all(w == where[0] for w in where):
            return f"node {where[0][0]} (host {where[0][1]}: ranks {', '.join(map(str, ranks))})"
    return rank_label(ranks[0])


#: Substrings of gloo/c10d errors that mean "a peer is gone", not a cause of their own.
TRANSPORT_ERRORS = ("Connection reset", "Connection closed", "Broken pipe", "Socket Timeout", "Timed out",
                    "timed out", "Connection refused",
                    # c10d's store: a key a peer never wrote (a rank stopped before it joined the process group)
                    "wait timeout after",
                    # NCCL: a peer gone (remote error), or the watchdog's timeout / abort of the communicator
                    "ncclRemoteError", "NCCL communicator was aborted", "Watchdog caught collective operation timeout")


class RankNotAnsweringError(RuntimeError):
    """Rank ``rank`` stopped answering (its heartbeat stood still while a
    peer's collective timed out or lost its connection): the cause of the
    failure, not the peer that noticed it. The launcher recognizes the message
    by its class name. ``who`` names it (default ``"rank <rank>"``; on several
    machines its node, :func:`ranks_label`)."""

    def __init__(self, rank: int, detail: str, who: Optional[str] = None) -> None:
        self.rank = rank
        super().__init__(f"{who or f'rank {rank}'} stopped answering: {detail}")


def failure_text(rank: int, cause: str) -> str:
    """Rank ``rank``'s published failure as a peer says it: ``"rank 2 failed: <cause>"`` (on several
    machines with its node, :func:`rank_label`), or the cause alone when it names who failed itself (a rank or
    node that stopped answering, published for it by the rank that noticed)."""
    if re.match(r"(rank|node) \d+.*? stopped answering: ", cause):
        return cause
    return f"{rank_label(rank)} failed: {cause}"


class PeerFailedError(RuntimeError):
    """Recorded by a rank that stopped because rank ``rank`` on another machine
    published a failure: that machine's launcher names the cause, and this
    one's names the same rank and node instead of the rank that only stopped
    (the launcher recognizes the message by its class name)."""

    def __init__(self, rank: int, cause: str) -> None:
        self.rank = rank
        super().__init__(failure_text(rank, cause))


def say(line: str) -> None:
    """Write ``line`` to stderr in one write: the ranks share the launcher's
    stderr, and ``print`` writes the text and its newline separately
    (interleaved lines under ``python -u``)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _store() -> Optional[Any]:
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:  # no process group, or a store-less backend
        return None


def publish_failure(rank: int, cause: str) -> None:
    """Record ``cause`` as rank ``rank``'s failure (best effort: never raises)."""
    store = _store()
    if store is None:
        return
    try:
        store.set(_key(rank), cause.encode())
    except Exception:
        pass


def failure_of_others(me: int, world_size: int, wait: float = 2.0, clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], None] = time.sleep) -> Optional[tuple[int, str]]:
    """``(rank, cause)`` of another rank that published a failure, waiting up
    to ``wait`` seconds (of ``clock``) for one to appear; ``None`` if none did."""
    return _published_failure(me, world_size, wait, clock, sleep)[0]


def _published_failure(me: int, world_size: int, wait: float, clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> tuple[Optional[tuple[int, str]], bool]:
    """:func:`failure_of_others` and whether the store answered."""
    store = _store()
    if store is None:
        return None, True
    keys = [(r, _key(r)) for r in range(world_size) if r != me]
    deadline = clock() + wait
    while True:
        for r, key in keys:
            try:
                if store.check([key]):
                    return (r, store.get(key).decode(errors="replace")), True
            except Exception:
                return None, False  # the store itself is gone
        if clock() >= deadline:
            return None, True
        sleep(0.05)


def is_transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` reports a lost peer rather than a failure of its own."""
    text = f"{type(exc).__name__}: {exc}"
    return isinstance(exc, (ConnectionError, TimeoutError)) or any(t in text for t in TRANSPORT_ERRORS)


def launcher_reports() -> bool:
    """Whether this worker's failures are told by ``pyg-dynscale``'s ``--nproc`` launcher: its one line
    per job, from the causes the ranks recorded (so a rank says nothing itself). Under a plain torchrun
    nobody else would say it: each rank prints its own line."""
    return launcher_pid() is not None


# ------------------------------------------------------------ launcher death
def launcher_pid() -> Optional[int]:
    """The pid of the ``--nproc`` launcher this worker belongs to, or ``None``."""
    try:
        return int(os.environ[LAUNCHER_PID_ENV])
    except (KeyError, ValueError):
        return None


def _parent_pid() -> int:
    # the parent of the process (of its main thread, which set the parent-death signal), whichever thread asks
    try:
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return os.getppid()


def launcher_gone() -> bool:
    """Whether this worker's ``--nproc`` launcher is gone (its parent changed)."""
    pid = launcher_pid()
    return pid is not None and _parent_pid() != pid


def report_launcher_gone(prefix: str, rank: object) -> None:
    """Print that the launcher is gone and exit with status 143 (``SIGTERM``'s),
    at once: its store died with it, so there is nothing left to ask."""
    say(f"{prefix} (rank {rank}): stopping: the launcher (pid {launcher_pid()}) is gone")
    os._exit(128 + signal.SIGTERM)


def die_with_launcher(prefix: str) -> bool:
    r"""Have the kernel send this process ``SIGTERM`` when its parent dies
    (torchrun's agent: the ``--nproc`` launcher or the ``torchrun`` process).

    A parent-death signal rather than a heartbeat through the rendezvous
    store: the kernel delivers it the moment the parent is gone, whatever this
    process is doing (even blocked in a collective), with no polling thread,
    and it also works before the process group exists. Linux only (a no-op
    elsewhere). The signal fires when the parent's *thread* that started us
    exits: torchrun starts the workers from its main thread.

    A parent that died before the ``prctl`` call would never signal us, so
    right after it the parent is checked to still be the launcher
    (:data:`LAUNCHER_PID_ENV`, set by ``--nproc``; under a plain torchrun the
    expected parent is not known and only the signal is set): if not, print
    one line and exit.

    Returns:
        whether the signal is set.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if ok and launcher_gone():
        report_launcher_gone(prefix, os.environ.get("RANK", "?"))
    return ok


def install_stop_report(rank: int, world_size: int, prefix: str) -> None:
    """On ``SIGTERM`` (torchrun stopping the workers after one failed, or the
    launcher gone), print which rank failed and why, then exit with status 143.

    A Python signal handler would run only when the main thread returns to the
    interpreter, i.e. not while it waits inside a collective for a peer that
    is gone (torchrun then escalates to ``SIGKILL`` after 30 s). So ``SIGTERM``
    is blocked in the calling thread (threads started later inherit the mask)
    and a daemon thread waits for it with :func:`signal.sigwait`.

    Under the ``--nproc`` launcher a stop says nothing and looks nothing up (a
    store call could wait behind the main thread's): the launcher prints the
    job's one line (the failed rank, or its own ``SIGTERM``).
    """
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - non-POSIX
        return

    def wait() -> None:
        signum = signal.sigwait({signal.SIGTERM})
        # the parent-death signal fires when the launcher's thread that started us exits; while the launcher
        # dies we may first be handed to another of its threads (same pid): the parent looks alive for a
        # moment. A short look first spares us the dead store's errors
        deadline = time.monotonic() + (0.2 if launcher_pid() is not None else 0.0)
        while not launcher_gone() and time.monotonic() < deadline:
            time.sleep(0.01)
        if launcher_gone():
            report_launcher_gone(prefix, rank)
        if launcher_reports():  # its one line names the failed rank (or its own signal): nothing to look up
            os._exit(128 + signum)
        # a plain torchrun: a failure is published before its rank exits, i.e. before torchrun stops us, but
        # another machine's agent may stop us first
        other = failure_of_others(rank, world_size, wait=2.0)
        if other is not None:
            say(f"{prefix} (rank {rank}): stopping: {failure_text(*other)}")
        else:
            say(f"{prefix} (rank {rank}): stopping: the launcher stopped the job")
        os._exit(128 + signum)

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=wait, name="pyg_dynscale-sigterm", daemon=True).start()


# --------------------------------------------------------- silent ranks
def _agent_store(timeout: float = 5.0) -> Optional[Any]:
    """A new client of torchrun's agent store (it outlives every worker), or
    ``None`` outside torchrun's agent-store mode. A connection of its own: the
    heartbeat thread never waits behind the main thread's store calls."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    try:
        return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                             timeout=timedelta(seconds=timeout), wait_for_workers=False)
    except Exception:
        return None


def _beat_key(kind: str, rank: int) -> str:
    return f"pyg_dynscale/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{_attempt()}/{kind}/{rank}"


def start_heartbeat(rank: int, interval: float = HEARTBEAT_SECONDS) -> Callable[[], None]:
    """Count rank ``rank``'s heartbeat up every ``interval`` seconds in a
    daemon thread, and publish where it runs (host, pid) for :func:`local_pid`.

    Returns:
        a function that stops the heartbeat (a no-op outside torchrun's
        agent-store mode, where there is no store that outlives the ranks).
    """
    if _heartbeat.get("rank") == rank:  # started already (the process group's set-up starts it)
        return _heartbeat["stop"]
    store = _agent_store()
    if store is None:
        return lambda: None
    stop = threading.Event()
    try:
        store.set(_beat_key("where", rank),
                  f"{socket.gethostname()}\n{os.getpid()}\n{os.environ.get('GROUP_RANK', '0')}")
        store.add(_beat_key("beat", rank), 1)
    except Exception:
        return lambda: None

    def beat() -> None:
        while not stop.wait(interval):
            try:
                store.add(_beat_key("beat", rank), 1)
            except Exception:  # the agent is gone: nothing left to tell
                return

    thread = threading.Thread(target=beat, name="pyg_dynscale-heartbeat", daemon=True)
    thread.start()

    def stop_beating() -> None:
        # joined: a daemon thread still inside a store call when the interpreter exits aborts the process
        # ("terminate called without an active exception", SIGABRT)
        stop.set()
        if thread is not threading.current_thread():
            thread.join(timeout=10)
        _heartbeat.clear()

    _heartbeat.update(rank=rank, stop=stop_beating)
    return stop_beating


def stop_heartbeat() -> None:
    """Stop this process's heartbeat, if it beats (:func:`start_heartbeat`), and wait for its thread."""
    stop = _heartbeat.get("stop")
    if stop is not None:
        stop()


#: this process's heartbeat: ``rank`` and ``stop`` once started (one per process)
_heartbeat: dict = {}


def diagnose_peers(me: int, world_size: int, window: float = SILENT_BEATS * HEARTBEAT_SECONDS,
                   clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                   ) -> tuple[Optional[tuple[int, str]], list[int]]:
    """Why a collective of rank ``me`` broke: ``(failure, silent)``.

    ``failure`` is ``(rank, cause)`` of a rank that published one (returned
    as soon as it appears); otherwise, after ``window`` seconds, ``silent``
    lists the other ranks whose heartbeat did not move meanwhile (stopped,
    hung, or gone without a word). Both empty: every peer is alive, just
    slower than ``--timeout``.
    """
    store = _agent_store()
    others = [r for r in range(world_size) if r != me]

    def counts() -> dict:
        out = {}
        for r in others:
            try:
                out[r] = store.add(_beat_key("beat", r), 0)  # reads the counter (0: never beat)
            except Exception:
                out[r] = None
        return out

    before = counts() if store is not None else {}
    failure = failure_of_others(me, world_size, wait=window if store is not None else 2.0, clock=clock, sleep=sleep)
    if failure is not None or store is None:
        return failure, []
    after = counts()
    return None, [r for r in others if after[r] is not None and after[r] == before[r]]


def local_pid(rank: int) -> Optional[int]:
    """The pid of rank ``rank`` if it runs on this machine (checked through
    ``/proc``: same torchrun run, same rank), else ``None``.

    For ending a rank whose heartbeat stands still: it cannot act on
    ``SIGTERM`` (a stopped process even keeps it pending), and torchrun waits
    30 s before its own ``SIGKILL``."""
    store = _agent_store()
    if store is None:
        return None
    try:
        host, pid_text = store.get(_beat_key("where", rank)).decode().split("\n")[:2]
        pid = int(pid_text)
        if host != socket.gethostname() or pid == os.getpid():
            return None
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
    except Exception:
        return None
    run = os.environ.get("TORCHELASTIC_RUN_ID", "").encode()
    if env.get(b"RANK") != str(rank).encode() or env.get(b"TORCHELASTIC_RUN_ID") != run:
        return None
    return pid
