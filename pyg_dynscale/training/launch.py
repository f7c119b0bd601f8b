r"""Spawning ``N`` gloo processes on one machine (tests, notebooks, examples).

Production runs start their processes with ``torchrun`` (its rendezvous
sets ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``); :func:`spawn`
does the same for ``N`` local processes with :mod:`torch.multiprocessing`,
initializes the process group in each, runs ``fn(rank, world_size, *args)``
and returns every rank's result. An exception on any rank is re-raised in
the caller, naming the rank, after every process has stopped.
"""
from __future__ import annotations

import os
import pickle
import socket
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .ranks import bind_device

__all__ = ["spawn", "SpawnError", "free_port"]


class SpawnError(RuntimeError):
    """An exception raised on one of the spawned ranks (its traceback is in
    the message; ``rank`` and ``cause`` say which and what)."""

    def __init__(self, rank: int, cause: str, tb: str) -> None:
        self.rank = rank
        self.cause = cause
        super().__init__(f"rank {rank} failed: {cause}\n{tb}")


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world_size: int, port: int, backend: str, timeout: float, threads: int,
           fn: Callable, args: tuple, q: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(threads)
    try:
        if backend == "nccl" and torch.cuda.is_available():  # one GPU per rank (NCCL refuses two on one)
            # no device_id to init_process_group: NCCL would connect eagerly there, and ranks sharing a GPU
            # would fail inside it with NCCL's error before a trainer's own check could name the shared GPU
            bind_device(torch.device("cuda", rank % torch.cuda.device_count()))
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout))
        try:
            # plain pickle: tensors travel by value (a shared-memory handle dies with this process)
            q.put((rank, True, pickle.dumps(fn(rank, world_size, *args))))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:  # reported to the parent, which stops the others
        q.put((rank, False, (f"{type(exc).__name__}: {exc}", traceback.format_exc())))


def spawn(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "gloo", timeout: float = 120.0,
          threads: int = 1) -> list:
    r"""Run ``fn(rank, world_size, *args)`` in ``world_size`` new processes,
    each inside an initialized process group, and return their results in
    rank order.

    Args:
        fn: a picklable (module-level) function; its return value must be
            picklable too.
        world_size: number of processes.
        backend: ``"gloo"`` (CPU ranks, or several ranks sharing a GPU
            through the staged exchange), ``"nccl"`` (rank ``r`` on GPU
            ``r mod device_count``, bound before the group is made), or a
            backend registered with ``Backend.register_backend`` in the
            module ``fn`` lives in (the tests' CPU stand-in for NCCL).
        timeout: seconds a collective may wait (a rank that died makes the
            others fail after this long instead of hanging).
        threads: ``torch.set_num_threads`` in each process (1 by default:
            more threads than free cores make small ops spin-wait).

    Raises:
        SpawnError: the first rank that raised, with its traceback.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world_size, port, backend, timeout, threads, fn, args, q))
             for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict = {}
    failures: list = []
    try:
        for _ in range(world_size):
            # after a failure the others stop soon (their collectives break): wait briefly for their reports
            rank, ok, value = q.get(timeout=(timeout + 60) if not failures else 15)
            if ok:
                results[rank] = pickle.loads(value)
            else:
                failures.append(SpawnError(rank, value[0], value[1]))
    except Exception as exc:  # queue timeout: a rank hung or died without reporting
        if not failures:
            dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            failures.append(SpawnError(dead[0] if dead else -1, f"no result within {timeout + 60:.0f} s ({type(exc).__name__})", ""))
    finally:
        for p in procs:
            p.join(timeout=5 if failures else timeout)
            if p.is_alive():
                p.terminate()
                p.join(5)
    # the cause is the rank whose error is not a broken connection to a rank that failed first
    transport = ("Connection reset", "Connection closed", "Broken pipe", "Socket Timeout", "Timed out")
    causes = [f for f in failures if not any(t in f.cause for t in transport)]
    failure = (causes or failures or [None])[0]
    if failure is not None:
        raise failure
    return [results[r] for r in range(world_size)]
