"""``pyg-dynscale train``'s processes: devices per rank, the torchrun launch,
the process group of a rank, and the one line that says why a job failed."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
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
def worker_argv(argv: list) -> list:
    """``argv`` without the launcher-only options (:data:`LAUNCHER_OPTIONS`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in LAUNCHER_OPTIONS:
            skip = True
            continue
        if any(a.startswith(o + "=") for o in LAUNCHER_OPTIONS):
            continue
        out.append(a)
    return out


def launch_workers(args: argparse.Namespace) -> int:
    """Start ``--nproc`` workers with torchrun's machinery and wait for them.

    Ends with one line on stderr when the job fails: the failing rank and its
    cause (a rank that stopped answering rather than the peer that timed out
    waiting for it), or the signal that stopped the launcher (exit status
    ``128 + signal``, no traceback)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    from ..training.failure import LAUNCHER_PID_ENV

    targs = get_args_parser().parse_args(
        ["--standalone", "--nproc-per-node", str(args.nproc), "--max-restarts", str(args.max_restarts),
         "--monitor-interval", "0.2", "-m", "pyg_dynscale"] + worker_argv(args._argv))
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    # the workers check that their parent is still this process once their parent-death signal is set
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    _quiet_torchrun_logs()
    try:
        with _restarts_reported():
            torchrun(targs)
    except ChildFailedError as exc:
        rank, exitcode, cause = _job_failure(exc)
        print(f"{PROG}: error: {cause}" if rank is None else
              f"{PROG}: error: rank {rank} failed (exit code {exitcode}): {cause}", file=sys.stderr)
        return 2 if exitcode == 2 else 1
    except SignalException as exc:  # torchrun's handler raises it in this thread; it has stopped the workers
        name = _signal_name(int(exc.sigval))
        print(f"{PROG}: error: stopped by {name}: the launcher stopped its {args.nproc} worker(s); "
              "with --checkpoint-dir DIR, rerun with --resume to continue from the newest checkpoint.",
              file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    return 0


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
def _restarts_reported() -> Any:
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
    launcher_api.LocalElasticAgent = _reporting_agent(original)
    try:
        yield
    finally:
        launcher_api.LocalElasticAgent = original


def _reporting_agent(base: type) -> type:
    """``base`` (torchrun's ``LocalElasticAgent``) printing one line when it
    restarts the workers: the rank that failed first, its cause, the attempt
    that follows (:func:`restart_line`)."""
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from ..training.failure import say

    class RestartReportingAgent(base):  # type: ignore[misc, valid-type]
        _failed_attempts = 0

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
                    say(restart_line(failure, self._failed_attempts + 1, total))
            return result

    return RestartReportingAgent


def restart_line(failure: Optional[tuple[Optional[int], int, str]], attempt: int, attempts: int) -> str:
    """The launcher's line for a restart: ``failure`` is :func:`_job_failure`'s
    ``(rank, exit code, cause)`` of the failed attempt (``None``: torchrun
    found the workers unhealthy without a failure), ``attempt`` the one that
    starts now, of ``attempts`` (1 + ``--max-restarts``)."""
    then = f"restarting, attempt {attempt} of {attempts}"
    if failure is None:
        return f"{PROG}: the workers became unhealthy; {then}"
    rank, exitcode, cause = failure
    if rank is None:
        return f"{PROG}: {cause}; {then}"
    if exitcode < 0:
        return f"{PROG}: rank {rank} died ({_signal_name(-exitcode)}); {then}"
    return f"{PROG}: rank {rank} failed (exit code {exitcode}): {cause}; {then}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _job_failure(exc: Any) -> tuple[Optional[int], int, str]:
    """``(rank, exit code, cause)`` of a failed job: torchrun's first failure,
    unless a rank reported that another one stopped answering (the first
    failure is then the rank that timed out waiting, or the silent rank its
    peer killed; the cause is the silent rank: ``rank`` is ``None`` and
    ``cause`` names it)."""
    import re

    first_rank, first = exc.get_first_failure()
    for rank, failure in sorted(exc.failures.items()):
        m = re.search(r"RankNotAnsweringError: (rank (\d+) stopped answering.*)", _failure_cause(failure))
        if m:
            return None, failure.exitcode, f"{m.group(1)} (noticed by rank {rank})"
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

    device_id = bind_device(device)
    extra = {"device_id": device_id} if backend == "nccl" else {}
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group(backend, timeout=timeout, **extra)
        return
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                         timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.PrefixStore(f"pyg_dynscale/attempt_{attempt}", base)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout, **extra)
