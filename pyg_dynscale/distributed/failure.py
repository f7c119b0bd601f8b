r"""Telling every rank *which* rank failed and why.

When a rank raises, the others learn of it only as a broken collective
(gloo: "Connection closed by peer") or as the launcher's ``SIGTERM``. The
failing rank therefore writes its cause into the process group's key-value
store (:func:`publish_failure`) before it exits; a rank whose collective
broke, or that torchrun stops, reads it back (:func:`failure_of_others`) and
names it. Under torchrun the store is the launcher agent's, so it outlives
the failed worker.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, Optional

import torch.distributed as dist

__all__ = ["publish_failure", "failure_of_others", "is_transport_error", "install_stop_report"]

def _key(rank: int) -> str:
    # per torchrun attempt: a restarted job must not read the previous attempt's failure
    return f"pyg_dynscale/failure/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{rank}"
#: Substrings of gloo/c10d errors that mean "a peer is gone", not a cause of their own.
TRANSPORT_ERRORS = ("Connection reset", "Connection closed", "Broken pipe", "Socket Timeout", "Timed out",
                    "timed out", "Connection refused",
                    # NCCL: a peer gone (remote error), or the watchdog's timeout / abort of the communicator
                    "ncclRemoteError", "NCCL communicator was aborted", "Watchdog caught collective operation timeout")


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


def failure_of_others(me: int, world_size: int, wait: float = 2.0) -> Optional[tuple[int, str]]:
    """``(rank, cause)`` of another rank that published a failure, waiting up
    to ``wait`` seconds for one to appear; ``None`` if none did."""
    store = _store()
    if store is None:
        return None
    keys = [(r, _key(r)) for r in range(world_size) if r != me]
    deadline = time.monotonic() + wait
    while True:
        for r, key in keys:
            try:
                if store.check([key]):
                    return r, store.get(key).decode(errors="replace")
            except Exception:
                return None  # the store itself is gone
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def is_transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` reports a lost peer rather than a failure of its own."""
    text = f"{type(exc).__name__}: {exc}"
    return isinstance(exc, (ConnectionError, TimeoutError)) or any(t in text for t in TRANSPORT_ERRORS)


def install_stop_report(rank: int, world_size: int, prefix: str) -> None:
    """On ``SIGTERM`` (torchrun stopping the workers after one failed), print
    which rank failed and why, then exit with status 143.

    A Python signal handler would run only when the main thread returns to the
    interpreter, i.e. not while it waits inside a collective for a peer that
    is gone (torchrun then escalates to ``SIGKILL`` after 30 s). So ``SIGTERM``
    is blocked in the calling thread (threads started later inherit the mask)
    and a daemon thread waits for it with :func:`signal.sigwait`.
    """
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - non-POSIX
        return

    def wait() -> None:
        signum = signal.sigwait({signal.SIGTERM})
        other = failure_of_others(rank, world_size, wait=2.0)  # torchrun waits 30 s before SIGKILL
        why = f"rank {other[0]} failed: {other[1]}" if other else "the launcher stopped the job"
        print(f"{prefix} (rank {rank}): stopping: {why}", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=wait, name="pyg_dynscale-sigterm", daemon=True).start()
