r"""What every training subcommand's job shares (``train``, ``train --windows``,
``train-events``): how a run starts (one process, a ``--nproc`` launch or a
torchrun worker), the checkpoint it resumes from, the epoch loop with its
checkpoints and its stop on a non-finite loss, the one-line failure
(:func:`fail`) and the report fields they give (:meth:`Job.fields`; a
report is printed as JSON by :func:`~pyg_dynscale.commands.output.report_json`).

A subcommand keeps its options, its trainer's construction and its report's
fields; one rank's run of it reads

.. code-block:: python

    job = Job(args, rank, PROG)               # the job's clock starts
    ...                                       # load the data
    job.find_resume(record, mismatch_message) # before the processes connect
    init()
    trainer = ...
    progress, start = job.restore(trainer.modules, trainer.optimizer, progress, extra=...)
    job.epochs(trainer, progress, start, desc="...", state=...)
    return {..., **job.fields()}

An epoch lasts until its slowest rank is done: every rank records the
largest of the ranks' wall times
(:func:`~pyg_dynscale.training.ranks.slowest_rank_seconds`), so the report
is the same on every rank. Checkpoints are written every
``--checkpoint-every`` epochs and after the last
(:func:`~pyg_dynscale.training.checkpoint.save_checkpoint`), with the
trainer's own state (``state``) beside the modules and the optimizer.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import signal
import sys
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, NoReturn, Optional

from ..errors import CommandError

__all__ = ["fail", "NonFiniteLossError", "check_finite", "nonfinite_line", "add_job_options", "check_launch_options",
           "check_checkpoint_options", "resumable_checkpoint", "Job", "start", "run_worker", "group_timeout"]


def fail(message: str) -> NoReturn:
    """Stop the command with ``message``: one line on stderr and exit status 2
    (:func:`pyg_dynscale.cli.main`), or on a torchrun worker the rank's line."""
    raise CommandError(message)


class NonFiniteLossError(CommandError, FloatingPointError):
    """The training loss became NaN or infinite: the run stops at that epoch
    (a :class:`FloatingPointError` too, as it was raised before)."""


def check_finite(loss: float, epoch: int) -> None:
    """Raise :class:`NonFiniteLossError` naming the 1-based ``epoch`` and the fix if ``loss`` is NaN or
    infinite (every rank sees the same all-reduced loss: every rank stops). The package's trainers stop at
    the batch already (:func:`nonfinite_line`); this catches a trainer that returns a non-finite loss."""
    if not math.isfinite(loss):
        raise NonFiniteLossError(f"the training loss is {loss} at epoch {epoch}; lower --lr or use --dtype float64.")


def nonfinite_line(exc: Any, lr: Optional[float] = None) -> NonFiniteLossError:
    """The trainer's :class:`pyg_dynscale.errors.NonFiniteLossError` (epoch, batch, ranks, cause; its fix
    names API arguments) as the command's one line, whose fix names the command's options (``lr``: the
    ``--lr`` given)."""
    where = f"at epoch {exc.epoch}, batch {exc.batch} of {exc.batches}"
    if exc.ranks:
        where += f" ({'rank' if len(exc.ranks) == 1 else 'ranks'} {', '.join(map(str, exc.ranks))})"
    if exc.reason == "in_degree":
        fix = (f"{exc.cause} Give each such vertex an in-edge in the data (a self-loop or the reverse edges) or "
               "use another --model (e.g. gconvgru).")
    else:
        fix = f"lower --lr{f' (it is {lr:g})' if lr is not None else ''} or use --dtype float64."
    return NonFiniteLossError(f"the training loss is {exc.loss} {where}; {fix}")


# ------------------------------------------------------------ the options
def add_job_options(p: argparse.ArgumentParser, *, epochs: int, checkpoint_every: int, checkpoint: str) -> None:
    """The options of every training subcommand: the launch (``--nproc``, ``--max-restarts``), the epochs,
    the checkpoints (``checkpoint``: what one holds), threads, the collective timeout and the output."""
    p.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="start N local processes through torch.distributed.run (omit under torchrun)")
    p.add_argument("--max-restarts", type=int, default=0, metavar="K",
                   help="with --nproc: restart the workers up to K times after a failure (torchrun's policy, "
                        "default: 0; add --checkpoint-dir DIR --resume to continue from the newest checkpoint)")
    p.add_argument("--nnodes", type=int, default=None, metavar="M",
                   help="with --nproc: the job spans M machines, each running this command (--nproc processes "
                        "each), meeting at --rdzv-endpoint (torchrun's c10d rendezvous)")
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                   help="with --nnodes: the rendezvous address, one machine of the job (the same on every machine)")
    p.add_argument("--rdzv-id", default="pyg-dynscale", metavar="ID",
                   help="with --nnodes: the job's id at the rendezvous, the same on every machine "
                        "(default: pyg-dynscale)")
    p.add_argument("--epochs", type=int, default=epochs, help=f"training epochs in total (default: {epochs})")
    p.add_argument("--checkpoint-dir", default=None, metavar="DIR", help=f"write checkpoints here ({checkpoint})")
    p.add_argument("--checkpoint-every", type=int, default=checkpoint_every, metavar="K",
                   help=f"checkpoint every K epochs and after the last (default: {checkpoint_every})")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest complete checkpoint in --checkpoint-dir (none: start fresh)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per process (default: 1; more threads than free cores make small ops spin)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="collective timeout: a rank that stops answering fails the others after this long "
                        "(default: 120)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (rank 0) instead of text")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def check_launch_options(args: argparse.Namespace) -> None:
    """``--nproc``, ``--max-restarts`` and the machines (``--nnodes``, ``--rdzv-endpoint``, ``--rdzv-id``); no
    data needed: the launcher and every rank.

    ``--nproc N`` counts the processes of one machine (torchrun's ``--nproc-per-node``): with ``--nnodes M``
    the job has ``M * N``. From here on ``args.nproc`` is the job's processes (what every later check and the
    run record compare: the same job on one machine with ``--nproc M*N`` is the same run, resumable from the
    same checkpoints) and ``args.nproc_per_node`` this machine's.
    """
    if getattr(args, "nproc_per_node", None) is not None:  # checked already (args.nproc is the job's now)
        return
    if args.nproc is not None and args.nproc < 1:
        fail(f"--nproc must be >= 1, got {args.nproc}.")
    if args.max_restarts < 0:
        fail(f"--max-restarts must be >= 0, got {args.max_restarts}.")
    if args.max_restarts and args.nproc is None:
        fail("--max-restarts needs --nproc (under torchrun, pass --max-restarts to torchrun).")
    nnodes, endpoint = getattr(args, "nnodes", None), getattr(args, "rdzv_endpoint", None)
    if nnodes is None:
        if endpoint is not None:
            fail(f"--rdzv-endpoint {endpoint} needs --nnodes M (the machines of the job).")
        return
    if nnodes < 1:
        fail(f"--nnodes must be >= 1, got {nnodes}.")
    if args.nproc is None:
        fail(f"--nnodes {nnodes} needs --nproc N (processes per machine; under torchrun, pass --nnodes to "
             "torchrun).")
    if nnodes > 1 and endpoint is None:
        fail(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT: one machine of the job, the same on every one.")
    if endpoint is not None:
        host, colon, port = endpoint.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            fail(f"--rdzv-endpoint {endpoint}: give HOST:PORT, e.g. node001:29500 (a port from 1 to 65535).")
    if not str(getattr(args, "rdzv_id", "x") or ""):
        fail("--rdzv-id is empty; give the job an id (the same on every machine).")
    args.nproc_per_node, args.nproc = args.nproc, args.nproc * nnodes


def check_checkpoint_options(args: argparse.Namespace) -> None:
    """``--checkpoint-every``, ``--resume`` and ``--checkpoint-dir`` (a directory, or one to create, that
    can be written into); no data needed."""
    if args.checkpoint_every < 1:
        fail(f"--checkpoint-every must be >= 1, got {args.checkpoint_every}.")
    if args.resume and not args.checkpoint_dir:
        fail("--resume needs --checkpoint-dir DIR.")
    if args.checkpoint_dir is None:
        return
    path = args.checkpoint_dir
    if os.path.exists(path) and not os.path.isdir(path):
        fail(f"--checkpoint-dir '{path}' is a file, not a directory; give a directory (it is created if missing), "
             "or move the file away.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        fail(f"--checkpoint-dir: the folder '{parent}' does not exist; create it first.")
    if not os.access(path if os.path.exists(path) else parent, os.W_OK):
        fail(f"--checkpoint-dir: cannot write into '{path}' (permission denied); choose a writable directory.")


# ---------------------------------------------------------------- resuming
def resumable_checkpoint(directory: str, record: dict, mismatch: Callable[[Any], str], *,
                         ignore: tuple = ()) -> Optional[tuple[int, str]]:
    """``(epoch, path)`` of the newest complete checkpoint in ``directory`` (``None``: none yet), checked
    against the run ``record`` (but the fields in ``ignore``) and for missing files; a checkpoint of another
    run fails with ``mismatch(error)``'s line, a damaged one with ``--resume: <what is wrong>``."""
    from ..training.checkpoint import (CheckpointDamagedError, CheckpointMismatchError, check_run,
                                       latest_checkpoint, verify_checkpoint)

    found = latest_checkpoint(directory)
    if found is None:
        return None
    try:
        check_run(found[1], record, ignore=ignore)
        verify_checkpoint(found[1])
    except CheckpointMismatchError as exc:
        fail(mismatch(exc))
    except CheckpointDamagedError as exc:
        fail(f"--resume: {exc}")
    return found


class Job:
    r"""One rank's run of a training subcommand: where it resumes from, its
    epochs and checkpoints, and the report fields they give.

    Args:
        args: the subcommand's options (``epochs``, ``checkpoint_dir``,
            ``checkpoint_every``, ``resume``, ``no_progress``).
        rank: this rank (rank 0 says where the run starts).
        prog: the command's name, the prefix of its lines on stderr.
        clock: the clock the epochs are timed with (the subcommand's
            ``time.perf_counter``).
    """

    def __init__(self, args: argparse.Namespace, rank: int, prog: str,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.args, self.rank, self.prog = args, rank, prog
        #: the run record a checkpoint must match to be resumed (:meth:`find_resume`), written into every one
        self.record: dict = {}
        self.clock = clock
        self.started = clock()
        #: ``(epoch, path)`` of the checkpoint this run continues, or ``None``
        self.resume_from: Optional[tuple[int, str]] = None
        #: the checkpoints this run wrote, in order
        self.checkpoints: list[str] = []
        self._modules: Any = None
        self._optimizer: Any = None

    def _say(self, line: str) -> None:
        if self.rank == 0:  # said once, where the report is printed
            print(f"{self.prog}: {line}", file=sys.stderr, flush=True)

    def find_resume(self, record: dict, mismatch: Callable[[Any], str]) -> Optional[tuple[int, str]]:
        """Take the run ``record``; with ``--resume``, the checkpoint to continue
        (:func:`resumable_checkpoint`: called before the processes connect, so every rank fails alike); with
        none yet, rank 0 says that the run starts fresh."""
        self.record = record
        if not self.args.resume:
            return None
        self.resume_from = resumable_checkpoint(self.args.checkpoint_dir, self.record, mismatch)
        if self.resume_from is None:
            self._say(f"--resume: no complete checkpoint in '{self.args.checkpoint_dir}' yet; starting fresh at "
                      f"epoch 1 of {self.args.epochs}{attempt_note()}.")
        return self.resume_from

    def saved(self, prefix: str) -> dict:
        """Empty tensors shaped as the continued checkpoint's ``extra`` keys under ``prefix``
        (:func:`~pyg_dynscale.training.checkpoint.saved_extra`: what only the checkpoint knows the shapes
        of), ``{}`` without a checkpoint to continue."""
        if self.resume_from is None:
            return {}
        from ..training.checkpoint import CheckpointDamagedError, saved_extra

        try:
            return saved_extra(self.resume_from[1], prefix)
        except CheckpointDamagedError as exc:
            fail(f"--resume: {exc}")

    def restore(self, modules: Any, optimizer: Any, progress: dict, extra: Optional[dict] = None,
                then: Optional[Callable[[], None]] = None) -> tuple[dict, int]:
        """``(progress, first epoch)``: ``(progress, 0)`` without a checkpoint to continue; else
        ``modules``, ``optimizer`` and the tensors of ``extra`` (this rank's keys: filled in place) loaded
        from it, and its progress and epoch. ``then()`` runs after the load and before rank 0 says where
        training goes on (it restores the trainer's state from ``extra``, and may still refuse the run).
        ``modules`` and ``optimizer`` are what :meth:`epochs` checkpoints."""
        self._modules, self._optimizer = modules, optimizer
        if self.resume_from is None:
            return progress, 0
        from ..training.checkpoint import CheckpointDamagedError, load_checkpoint
        # DCP loads into the state dict's existing tensors, on the model's device: a checkpoint written on
        # another device (CPU <-> CUDA) resumes here too
        try:
            progress = load_checkpoint(self.resume_from[1], modules, optimizer, self.record, extra=extra)["progress"]
        except CheckpointDamagedError as exc:
            fail(f"--resume: {exc}")
        if then is not None:
            then()
        # after a restart too: the launcher said why it restarted, this says where training goes on
        self._say(f"resumed from checkpoint epoch {self.resume_from[0]}{attempt_note()}")
        return progress, self.resume_from[0]

    def epochs(self, trainer: Any, progress: dict, start: int, *, desc: str,
               after: Optional[Callable[[float], dict]] = None,
               state: Callable[[], Optional[dict]] = lambda: None) -> None:
        r"""Train epochs ``start + 1`` to ``--epochs``: each one's loss and slowest-rank time appended to
        ``progress["losses"]`` and ``progress["epoch_seconds"]``, a non-finite loss stopping the run
        (:func:`check_finite`), then ``after(loss)`` (the subcommand's own progress; it returns more fields
        for the progress bar), then a checkpoint every ``--checkpoint-every`` epochs and after the last with
        ``progress`` and ``state()`` (the trainer's own tensors, keys per rank) -- so a resumed run continues
        from what the next epoch would have started from."""
        from tqdm.auto import tqdm

        from ..errors import NonFiniteLossError as TrainingLossError
        from ..training.checkpoint import save_checkpoint
        from ..training.ranks import slowest_rank_seconds

        args = self.args
        bar = tqdm(range(start, args.epochs), initial=start, total=args.epochs, desc=desc, unit="epoch",
                   disable=self.rank != 0 or args.no_progress, file=sys.stderr, mininterval=0.5)
        for epoch in bar:
            t0 = self.clock()
            try:
                loss = trainer.train_epoch()  # stops at a non-finite batch loss, on every rank alike
            except TrainingLossError as exc:  # its fix names the API's lr=: the line names --lr
                raise nonfinite_line(exc, getattr(args, "lr", None)) from None
            took = slowest_rank_seconds(self.clock() - t0)  # on every rank, before a rank may stop
            check_finite(loss, epoch + 1)
            progress["losses"].append(loss)
            progress["epoch_seconds"].append(took)
            shown = after(loss) if after is not None else {}
            bar.set_postfix(loss=f"{loss:.4f}", **shown, refresh=False)
            done = epoch + 1
            if args.checkpoint_dir and (done % args.checkpoint_every == 0 or done == args.epochs):
                self.checkpoints.append(save_checkpoint(args.checkpoint_dir, done, self._modules, self._optimizer,
                                                        self.record, progress, extra=state()))
        bar.close()

    def fields(self) -> dict:
        """The report fields every subcommand has: the checkpoints written, where the run resumed from,
        torchrun's restarts, the seconds since the job started."""
        return {"checkpoints": self.checkpoints, "resumed_from": self.resume_from[1] if self.resume_from else None,
                "resumed_from_epoch": self.resume_from[0] if self.resume_from else None,
                "restarts": restarts_so_far(), "total_seconds": self.clock() - self.started}


# ------------------------------------------------------------- torchrun
def in_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MASTER_ADDR" in os.environ)


def restarts_so_far() -> int:
    """How many times torchrun restarted this worker's job after a failure
    (``TORCHELASTIC_RESTART_COUNT``; 0 outside torchrun)."""
    try:
        return max(0, int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    except ValueError:
        return 0


def attempt_note() -> str:
    """``" (attempt 2 of 3)"`` in a job torchrun restarted (``of``: 1 +
    ``TORCHELASTIC_MAX_RESTARTS``), ``""`` in a first attempt."""
    done = restarts_so_far()
    if not done:
        return ""
    try:
        attempts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) + 1
    except ValueError:
        attempts = 0
    return f" (attempt {done + 1} of {max(attempts, done + 1)})"


# --------------------------------------------------------------- launching
def start(args: argparse.Namespace, prog: str, *, alone: Callable[[], None],
          worker: Callable[[int, int, int], None], launch: Callable[[argparse.Namespace], int]) -> int:
    """Run the subcommand the way it was started: as a torchrun worker (:func:`run_worker` with
    ``worker``), as the launcher of ``--nproc`` workers (``launch(args)``), or alone in this process
    (``alone()``, refused where a process group exists already). Returns the exit status."""
    if in_torchrun():
        return run_worker(args, prog, worker)
    if args.nproc is not None:
        args._prog = prog  # the launcher's lines name this subcommand
        return launch(args)
    import torch.distributed as dist

    if dist.is_initialized():
        fail("a torch.distributed process group is already initialized in this process; run "
             f"`{prog}` in its own process (or under torchrun).")
    alone()
    return 0


def run_worker(args: argparse.Namespace, prog: str, body: Callable[[int, int, int], None]) -> int:
    """One rank under torchrun: ``body(rank, world, local_rank)`` trains (and prints the report on rank 0);
    on failure the rank records which rank failed and why (publishing the cause for the others) and exits
    non-zero: 2 for the user's input, 1 otherwise. Under ``pyg-dynscale``'s ``--nproc`` launcher the
    launcher prints the job's one line from what the ranks recorded; under a plain torchrun each rank
    says it. ``body`` may set ``args._stop_heartbeat`` (called at the end). The process group is destroyed
    on the way out."""
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    from ..errors import DynScaleError
    from ..training.failure import (install_stop_report, is_transport_error, launcher_reports, publish_failure, say,
                                       start_heartbeat, stop_heartbeat)
    from .hints import for_cli

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    args._rank_label = f" (rank {rank})"
    install_stop_report(rank, world, prog)
    # beating from the start, not from the process group's set-up: a rank stopped while loading its data is
    # told from a slow one (and ended by a peer) when the others time out connecting to it
    start_heartbeat(rank)
    args._stop_heartbeat = lambda: None
    try:
        if args.nproc is not None and args.nproc != world:
            fail(f"--nproc {args.nproc} differs from torchrun's world size {world}; drop --nproc under torchrun.")
        body(rank, world, int(os.environ.get("LOCAL_RANK", rank)))
        return 0
    except (DynScaleError, OSError, ValueError) as exc:
        if dist.is_initialized() and is_transport_error(exc):
            return report_runtime_failure(rank, world, exc, args.timeout, prog)
        line = for_cli(exc, getattr(args, "command", prog.rsplit(" ", 1)[-1]))  # in the options' words
        publish_failure(rank, f"{type(exc).__name__}: {line}")
        ErrorHandler().record_exception(CommandError(line))  # the launcher's line (every rank's, the same)
        if not launcher_reports():
            say(f"{prog}: error (rank {rank}): {line}")
        return 2
    except Exception as exc:
        return report_runtime_failure(rank, world, exc, args.timeout, prog)
    finally:
        args._stop_heartbeat()
        stop_heartbeat()  # the one the process group's set-up started (every subcommand's)
        if dist.is_initialized():
            gc.collect()  # objects holding collectives' threads (DDP's reducer) go while the group exists
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def group_timeout(args: argparse.Namespace) -> timedelta:
    """``--timeout`` as the process group's timeout."""
    return timedelta(seconds=args.timeout)


def report_runtime_failure(rank: int, world: int, exc: BaseException, timeout: Optional[float] = None,
                           prog: str = "pyg-dynscale train") -> int:
    """A failure during training: when ``exc`` only says that a peer is gone
    or timed out, name the rank that published a failure, or the rank that
    stopped answering (and end it if it runs here: it cannot act on
    torchrun's ``SIGTERM``); else publish and report ours."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    from ..training.failure import (HEARTBEAT_SECONDS, SILENT_BEATS, PeerFailedError, RankNotAnsweringError,
                                       diagnose_peers, failure_text, is_transport_error, launcher_gone,
                                       launcher_reports, local_pid, nodes, publish_failure, ranks_label,
                                       report_launcher_gone, say)

    quiet = launcher_reports()  # the --nproc launcher prints the job's one line from what the ranks recorded

    if launcher_gone():  # a peer ended on the parent-death signal first; the store died with the launcher
        report_launcher_gone(prog, rank)
    if is_transport_error(exc):
        other, silent = diagnose_peers(rank, world)
        if other is not None:
            if not quiet:
                say(f"{prog} (rank {rank}): stopping: {failure_text(*other)}")
            if nodes() > 1:  # this machine's launcher names the rank and node that failed, not this one
                ErrorHandler().record_exception(PeerFailedError(other[0], other[1]))
            return 1
        if silent:
            if nodes() > 1 and not _timed_out(exc):  # another machine's ranks closed their connections
                waited = "lost its connection to it"
            else:
                waited = "waited " + (f"--timeout {timeout:g} s" if timeout is not None else "the collective timeout")
                waited += " for it"
            detail = (f"no heartbeat for {SILENT_BEATS * HEARTBEAT_SECONDS:g} s after rank {rank} {waited} "
                      "(stopped, hung, or its machine is gone)")
            here = {r: pid for r in silent if (pid := local_pid(r)) is not None}
            if here:
                detail += f"; ending it with SIGKILL (pid {', '.join(map(str, here.values()))})"
            who = ranks_label(silent)
            # published, recorded and printed before the kill: torchrun stops this rank as soon as it sees the
            # silent one die, and the others must read the cause by then
            for r in silent:
                publish_failure(r, str(RankNotAnsweringError(r, detail, who)))
            err = RankNotAnsweringError(silent[0], detail, who)
            ErrorHandler().record_exception(err)
            if not quiet:
                say(f"{prog} (rank {rank}): stopping: {err}")
            for pid in here.values():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            # no teardown: destroying a process group whose peer is stopped mid-collective can wait on it (and
            # costs ~1 s on a busy machine); the cause is recorded and printed, nothing else is left to flush
            sys.stdout.flush()
            os._exit(1)
    cause = f"{type(exc).__name__}: {exc}"
    publish_failure(rank, cause)
    ErrorHandler().record_exception(exc)
    traceback.print_exc()  # a failure of its own: a bug's traceback, then (without the launcher) its line
    if not quiet:
        say(f"{prog}: error (rank {rank}): {cause}")
    return 1


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective that waited out its timeout (rather than a connection that closed)."""
    text = f"{type(exc).__name__}: {exc}"
    return isinstance(exc, TimeoutError) or any(t in text for t in ("Timed out", "timed out", "Socket Timeout",
                                                                       "Watchdog caught collective",
                                                                       "wait timeout after"))  # c10d's store
