"""``pyg-dynscale train``'s processes: devices per rank, the torchrun launch
(one machine, or ``--nnodes`` machines meeting at torchrun's c10d rendezvous),
the process group of a rank, and the one line that says why a job failed."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

from .job import attempt_note, fail, in_torchrun, report_runtime_failure, restarts_so_far  # noqa: F401 -- re-exported
from .train_options import LAUNCHER_OPTIONS, DEVICES, PROG


# ------------------------------------------------------------------- devices
@dataclass(frozen=True)
class DevicePlan:
    """Where the ranks of one machine train and how their process group moves rows.

    Attributes:
        devices: the device of each local rank (``"cpu"`` or ``"cuda:i"``).
        backend: the process group's backend, ``"gloo"`` or ``"nccl"``.
        staged: whether ranks share a GPU, so rows go through pinned host
            buffers over gloo (the trainer's ``"staged"`` transport).
        gpus: GPUs on the machine (0 on CPU).
    """

    devices: tuple[str, ...]
    backend: str
    staged: bool
    gpus: int = 0

    @property
    def exchange(self) -> str:
        """The trainer's transport: ``"direct"`` or ``"staged"``."""
        return "staged" if self.staged else "direct"

    def device(self, local_rank: int) -> str:
        return self.devices[local_rank % len(self.devices)]

    def describe(self) -> str:
        """``exchange: staged over gloo (3 ranks share 1 GPU)`` and the like."""
        ranks = len(self.devices)
        if self.staged:
            why = f"{ranks} ranks share {self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        elif self.gpus:
            why = "one GPU per rank"
        else:
            why = "CPU ranks"
        return f"exchange: {self.exchange} over {self.backend} ({why})"


def plan_devices(choice: str, cuda_available: bool, device_count: int, local_world_size: int) -> DevicePlan:
    r"""The devices and process-group backend of the ``local_world_size``
    ranks of one machine (pure: the caller passes what torch reports).

    ``cpu`` (or ``auto`` without a GPU): gloo. Otherwise local rank ``i``
    trains on ``cuda:(i % device_count)``: NCCL when every rank has a GPU of
    its own, else gloo with the staged exchange (NCCL refuses two ranks on
    one GPU).

    Raises:
        CommandError: ``choice`` is ``"cuda"`` and there is no usable GPU.
    """
    if choice not in DEVICES:
        raise ValueError(f"device choice {choice!r}: use one of {DEVICES}.")
    if local_world_size < 1:
        raise ValueError(f"local_world_size is {local_world_size}; a machine runs at least one rank.")
    has_gpu = bool(cuda_available) and device_count > 0
    if choice == "cuda" and not has_gpu:
        fail("--device cuda: torch.cuda.is_available() is False (no GPU, or a CPU-only torch build); use "
              "--device cpu, or --device auto (CUDA when there is a GPU).")
    if choice == "cpu" or not has_gpu:
        return DevicePlan(("cpu",) * local_world_size, "gloo", False)
    devices = tuple(f"cuda:{i % device_count}" for i in range(local_world_size))
    if local_world_size <= device_count:
        return DevicePlan(devices, "nccl", False, device_count)
    return DevicePlan(devices, "gloo", True, device_count)


def machine_plan(args: argparse.Namespace, local_world_size: int) -> DevicePlan:
    import torch

    return plan_devices(args.device, torch.cuda.is_available(), torch.cuda.device_count(), local_world_size)


def bind_device(device: str) -> Optional[Any]:
    """Make ``device`` this process's current GPU before the process group
    exists (NCCL and the object collectives use the current device); the
    ``device_id`` for an NCCL group, else ``None``. The package's one
    implementation, :func:`pyg_dynscale.training.ranks.bind_device` (imported
    here when called: the command line starts without torch)."""
    from ..training.ranks import bind_device as bind

    return bind(device)


# ------------------------------------------------------------------ launching
#: The machines of a launch (:func:`launch_workers`): launcher-only too, stripped from the workers' options.
MACHINE_OPTIONS = ("--nnodes", "--rdzv-endpoint", "--rdzv-id")
#: torchrun's ``--shutdown-timeout``: seconds between its ``SIGTERM`` to the workers (after a failure, or the
#: launcher's own signal) and its ``SIGKILL``. torch's default, 30 s, is what a rank that cannot act on
#: ``SIGTERM`` -- a stopped process keeps it pending -- adds to a job's end; our workers act on it at once
#: (:func:`~pyg_dynscale.training.failure.install_stop_report`: a look at the store, one exit).
SHUTDOWN_SECONDS = 3
#: torchrun's ``--monitor-interval``: how often the agent looks at its workers (torch's default: 0.1 s).
MONITOR_SECONDS = 0.2


def worker_argv(argv: list) -> list:
    """``argv`` without the launcher-only options (:data:`LAUNCHER_OPTIONS`, :data:`MACHINE_OPTIONS`)."""
    launcher_only = tuple(LAUNCHER_OPTIONS) + MACHINE_OPTIONS
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in launcher_only:
            skip = True
            continue
        if any(a.startswith(o + "=") for o in launcher_only):
            continue
        out.append(a)
    return out


def _per_node(args: argparse.Namespace) -> int:
    """This machine's processes (``--nproc``; with ``--nnodes``, ``args.nproc`` is the job's after the checks,
    :func:`~pyg_dynscale.commands.job.check_launch_options`)."""
    per_node = getattr(args, "nproc_per_node", None)
    return per_node if per_node is not None else args.nproc


def torchrun_argv(args: argparse.Namespace) -> list:
    """The ``torch.distributed.run`` command line of a launch: ``--standalone`` on one machine; with
    ``--nnodes M``, torchrun's c10d rendezvous at ``--rdzv-endpoint`` (every machine runs the same command;
    the rendezvous numbers the machines, as torchrun's ``--node-rank`` is for its static rendezvous only)."""
    nnodes = getattr(args, "nnodes", None)
    if nnodes is None or getattr(args, "rdzv_endpoint", None) is None:  # one machine (--nnodes 1 alone too)
        where = ["--standalone"]
    else:
        where = ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", args.rdzv_endpoint,
                 "--rdzv-id", args.rdzv_id]
    return where + ["--nproc-per-node", str(_per_node(args)), "--max-restarts", str(args.max_restarts),
                    "--monitor-interval", f"{MONITOR_SECONDS:g}", "--shutdown-timeout", str(SHUTDOWN_SECONDS),
                    "-m", "pyg_dynscale"] + worker_argv(args._argv)


def stop_deadline(timeout: float) -> float:
    r"""Seconds from a rank's stop (``SIGSTOP``, a hang) to the end of its job, at most, with ``--timeout``
    ``timeout``: its peers' collective (or the store, before the process group) waits ``timeout``; they watch
    the heartbeats for :data:`~pyg_dynscale.training.failure.SILENT_BEATS` beats and end it (or, a rank that
    stopped before it published its pid, torchrun's agent does, :data:`SHUTDOWN_SECONDS` after its
    ``SIGTERM``), the agent noticing within :data:`MONITOR_SECONDS`. Busy-machine slack not included."""
    from ..training.failure import HEARTBEAT_SECONDS, SILENT_BEATS

    return timeout + SILENT_BEATS * HEARTBEAT_SECONDS + 2 * MONITOR_SECONDS + SHUTDOWN_SECONDS


def launch_workers(args: argparse.Namespace) -> int:
    """Start ``--nproc`` workers with torchrun's machinery and wait for them.

    Ends with one line on stderr when the job fails, named after the subcommand (``args._prog``): the
    user's input error the ranks refused (as one process would say it, exit status 2), the failing rank
    and its cause (a rank that stopped answering rather than the peer that timed out waiting for it), or
    the signal that stopped the launcher (exit status ``128 + signal``, no traceback). The ranks print
    none of their own (:func:`~pyg_dynscale.training.failure.launcher_reports`)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed import DistStoreError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    from ..training.failure import LAUNCHER_PID_ENV

    prog = getattr(args, "_prog", PROG)
    targs = get_args_parser().parse_args(torchrun_argv(args))
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    # c10d's C++ warnings (a store's "waitForInput ... timed out" when a peer never joined) say again what the
    # launcher's line says; TORCH_CPP_LOG_LEVEL=WARNING (or INFO) in the environment shows them
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # the workers check that their parent is still this process once their parent-death signal is set
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    _quiet_torchrun_logs()
    try:
        with _restarts_reported(prog):
            torchrun(targs)
    except ChildFailedError as exc:
        refused = input_error_line(exc, prog)
        if refused is not None:
            print(refused, file=sys.stderr, flush=True)
            return 2
        rank, exitcode, cause = _job_failure(exc)
        print(f"{prog}: error: {cause}" if rank is None else
              f"{prog}: error: {_rank_here(rank)} failed (exit code {exitcode}): {cause}", file=sys.stderr)
        return 2 if exitcode == 2 else 1
    except SignalException as exc:  # torchrun's handler raises it in this thread; it has stopped the workers
        name = _signal_name(int(exc.sigval))
        print(f"{prog}: error: stopped by {name}: the launcher stopped its {_per_node(args)} worker(s); "
              "with --checkpoint-dir DIR, rerun with --resume to continue from the newest checkpoint.",
              file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    except (RendezvousError, DistStoreError) as exc:
        # the machines never met (a wrong endpoint, a machine missing), or the job ended on another machine while
        # this one waited for the next round
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        where = (f"at {args.rdzv_endpoint} (--rdzv-id {args.rdzv_id})"
                 if getattr(args, "rdzv_endpoint", None) is not None else "of this machine's workers")
        print(f"{prog}: error: the rendezvous {where} failed: {first}", file=sys.stderr, flush=True)
        return 1
    return 0


#: The node (the rendezvous' rank of this machine's agent), the number of nodes and this machine's name, of
#: the latest attempt this process launched (set by :func:`_reporting_agent`'s agent).
_launched: dict = {}


def _rank_here(rank: int) -> str:
    """A rank of this machine in the launcher's lines: ``"rank 2"``, on several machines
    ``"rank 2 (node 1, host h)"``."""
    if _launched.get("nodes", 1) <= 1:
        return f"rank {rank}"
    return f"rank {rank} (node {_launched['node']}, host {_launched['host']})"


class _DropAgentWarnings:
    """A logging filter: torchrun's agent logs every step of a stop as a
    warning ("Received 15 death signal", "Sending process ... closing signal
    SIGTERM") and each failed attempt as an error ("failed (exitcode: -9)
    local_rank: 1 ..."); the launcher prints the one line that says what
    happened (a restart, or the job's failure)."""

    def filter(self, record: Any) -> bool:
        import logging

        if not record.name.startswith("torch.distributed.elastic"):
            return True
        return record.levelno >= logging.ERROR and not str(record.msg).startswith("failed (exitcode")


def _quiet_torchrun_logs() -> None:
    import logging

    for name in ("torch", "torch.distributed"):  # the handlers torch attaches (records propagate to them)
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, _DropAgentWarnings) for f in handler.filters):
                handler.addFilter(_DropAgentWarnings())


@contextlib.contextmanager
def _restarts_reported(prog: str = PROG) -> Any:
    """Within the block, torchrun's launcher starts :func:`_reporting_agent`'s
    agent instead of its ``LocalElasticAgent``.

    ``torch.distributed.launcher.api.launch_agent`` builds the agent itself and
    takes none, and torch's events say that an attempt started, not why the
    previous one failed: so the name it builds is bound to the subclass for the
    launch (a torch without that name runs unchanged, only without the
    restart lines)."""
    import torch.distributed.launcher.api as launcher_api

    original = getattr(launcher_api, "LocalElasticAgent", None)
    if not isinstance(original, type):
        yield
        return
    launcher_api.LocalElasticAgent = _reporting_agent(original, prog)
    try:
        yield
    finally:
        launcher_api.LocalElasticAgent = original


def _reporting_agent(base: type, prog: str = PROG) -> type:
    """``base`` (torchrun's ``LocalElasticAgent``) printing one line when it
    restarts the workers: the rank that failed first, its cause, the attempt
    that follows (:func:`restart_line`, named after ``prog``); its workers are
    stopped for a restart with torchrun's ``--shutdown-timeout`` (as at the
    job's end) instead of torch's fixed 30 s."""
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from ..training.failure import ROUND_ENV, say

    class RestartReportingAgent(base):  # type: ignore[misc, valid-type]
        _failed_attempts = 0

        # the rendezvous of an attempt. torch (2.13) publishes the address of the workers' store (hosted by the
        # agent the rendezvous numbers 0) into the first round's keys only, so an agent that joins a later round
        # for the first time -- a machine's agent started again after it was lost -- waits for them until it
        # times out; node 0's agent publishes them into every round's keys
        def _rendezvous(self, worker_group: Any) -> Any:
            _publish_store_address(worker_group.spec.rdzv_handler)
            return super()._rendezvous(worker_group)

        # the method that starts an attempt's workers, after the rendezvous: their round token first (every
        # machine's agent reads the same one from the round's store, :func:`round_token`), and where they run
        def _start_workers(self, worker_group: Any) -> Any:
            os.environ[ROUND_ENV] = round_token(worker_group.store)
            _launched.update(node=worker_group.group_rank, nodes=worker_group.group_world_size,
                             host=socket.gethostname())
            return super()._start_workers(worker_group)

        # LocalElasticAgent stops an attempt's workers before a restart with torch's default 30 s between its
        # SIGTERM and its SIGKILL (the job's end uses --shutdown-timeout): a stopped rank would hold the restart
        def _stop_workers(self, worker_group: Any) -> None:
            self._shutdown(timeout=getattr(self, "_shutdown_timeout", SHUTDOWN_SECONDS))

        # the method SimpleElasticAgent leaves to its implementations: its result decides a restart (a failed
        # or unhealthy group, while restarts are left) or the end of the job
        def _monitor_workers(self, worker_group: Any) -> Any:
            result = super()._monitor_workers(worker_group)
            if result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY):
                self._failed_attempts += 1
                total = worker_group.spec.max_restarts + 1
                if self._failed_attempts < total:
                    failure = (_job_failure(ChildFailedError(name=PROG, failures=result.failures))
                               if result.failures else None)
                    say(restart_line(failure, self._failed_attempts + 1, total, prog))
            return result

    return RestartReportingAgent


def _publish_store_address(handler: Any) -> None:
    """Wrap ``handler.next_rendezvous`` (once) so that the agent numbered 0 writes the workers' store
    address (``RendezvousStoreInfo``'s keys) into every round's store, as torch does in the first round."""
    if getattr(handler, "_pyg_dynscale_publishes", False):
        return
    from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo

    inner = handler.next_rendezvous

    def next_rendezvous() -> Any:
        info = inner()
        boot = getattr(info, "bootstrap_store_info", None)
        if info.rank == 0 and boot is not None:
            info.store.set(RendezvousStoreInfo.MASTER_ADDR_KEY, boot.master_addr.encode())
            info.store.set(RendezvousStoreInfo.MASTER_PORT_KEY, str(boot.master_port).encode())
        return info

    handler.next_rendezvous = next_rendezvous
    handler._pyg_dynscale_publishes = True


def round_token(store: Any) -> str:
    """A token drawn once per rendezvous round: the first agent of the round to ask sets it in the round's
    store (torchrun's agents share one store per round; its keys are the round's own), the others read
    that one. The workers name their keys by it (:func:`~pyg_dynscale.training.failure.job_round`)."""
    import uuid

    value = store.compare_set("pyg_dynscale/round", "", uuid.uuid4().hex)
    return value.decode() if isinstance(value, bytes) else str(value)


def restart_line(failure: Optional[tuple[Optional[int], int, str]], attempt: int, attempts: int,
                 prog: str = PROG) -> str:
    """The launcher's line for a restart: ``failure`` is :func:`_job_failure`'s
    ``(rank, exit code, cause)`` of the failed attempt (``None``: torchrun
    found the workers unhealthy without a failure), ``attempt`` the one that
    starts now, of ``attempts`` (1 + ``--max-restarts``)."""
    then = f"restarting, attempt {attempt} of {attempts}"
    if failure is None:
        return f"{prog}: the workers became unhealthy; {then}"
    rank, exitcode, cause = failure
    if rank is None:
        return f"{prog}: {cause}; {then}"
    if exitcode < 0:
        return f"{prog}: {_rank_here(rank)} died ({_signal_name(-exitcode)}); {then}"
    return f"{prog}: {_rank_here(rank)} failed (exit code {exitcode}): {cause}; {then}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def input_error_line(exc: Any, prog: str = PROG) -> Optional[str]:
    """The launcher's line when ranks refused the user's input (exit status 2, the line each recorded,
    :func:`~pyg_dynscale.commands.job.run_worker`), else ``None``: ``"<prog>: error: <line>"`` as one
    process says it when every such rank recorded the same line (the usual case: the same options and data
    on every rank), else the first rank's with its rank (``"<prog>: error (rank 1): <line>"``)."""
    refused = {rank: _failure_cause(f) for rank, f in sorted(exc.failures.items()) if f.exitcode == 2}
    if not refused:
        return None
    lines = {rank: text.split(": ", 1)[1] if text.startswith("CommandError: ") else text
             for rank, text in refused.items()}
    first = min(lines)
    if len(set(lines.values())) == 1:
        return f"{prog}: error: {lines[first]}"
    return f"{prog}: error ({_rank_here(first)}): {lines[first]}"


def _job_failure(exc: Any) -> tuple[Optional[int], int, str]:
    """``(rank, exit code, cause)`` of a failed job: torchrun's first failure,
    unless a rank reported that another one stopped answering (the first
    failure is then the rank that timed out waiting, or the silent rank its
    peer killed; the cause is the silent rank: ``rank`` is ``None`` and
    ``cause`` names it)."""
    import re

    first_rank, first = exc.get_first_failure()
    for rank, failure in sorted(exc.failures.items()):
        m = re.search(r"RankNotAnsweringError: ((?:rank|node) \d+.*? stopped answering.*)", _failure_cause(failure))
        if m:
            return None, failure.exitcode, f"{m.group(1)} (noticed by {_rank_here(rank)})"
    # a rank of another machine failed (it published its cause; the ranks here only stopped): name it
    peers = {rank: re.search(r"PeerFailedError: (.*)", _failure_cause(f)) for rank, f in exc.failures.items()}
    own = {rank: f for rank, f in exc.failures.items() if peers[rank] is None}
    if own:
        first_rank = min(own, key=lambda r: own[r].timestamp)
        first = own[first_rank]
    else:
        rank = min(peers)
        return None, exc.failures[rank].exitcode, f"{peers[rank].group(1)} (noticed by {_rank_here(rank)})"
    return first_rank, first.exitcode, _failure_cause(first)


def _failure_cause(failure: Any) -> str:
    msg = failure.message
    if isinstance(msg, dict):
        msg = msg.get("message", json.dumps(msg))
    text = str(msg).strip()
    if failure.exitcode < 0:
        return f"killed by signal {_signal_name(-failure.exitcode)}"
    if not text or text.startswith("To enable traceback"):
        return "no error recorded (see the rank's output above)"
    return text.splitlines()[0]




def init_torchrun_group(rank: int, world: int, timeout: timedelta, backend: str = "gloo",
                         device: str = "cpu") -> None:
    """``init_process_group`` (``backend``, this rank on ``device``) under
    torchrun, in a store namespace of its own per restart attempt: with
    torchrun's shared agent store (the default) the keys of a failed attempt
    survive, and gloo (or NCCL's id exchange) would meet the dead workers'
    entries published there."""
    import torch.distributed as dist

    from ..training.failure import job_round, start_heartbeat

    device_id = bind_device(device)
    extra = {"device_id": device_id} if backend == "nccl" else {}
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group(backend, timeout=timeout, **extra)
        return
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                         timeout=timeout)
    # the attempt's namespace is the same on every machine (a node's agent replaced after a failure counts its
    # restarts from 0 again: job_round, not TORCHELASTIC_RESTART_COUNT)
    store = dist.PrefixStore(f"pyg_dynscale/attempt_{job_round()}", base)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout, **extra)
    # from here on a rank that stops answering can be told from one that is only slow (every subcommand)
    start_heartbeat(rank)
