r"""DistTGL's memory service (§3.3): the reads and writes of one memory copy
served in the order the schedule requires, from a thread, so that writes
overlap the trainers' compute.

The order is a queue of **phases** (:meth:`MemoryService.plan`): a read phase
names the trainers that read (in any order), a write phase the trainers that
write (in this order: chronological). A phase starts when the one before it has
been served completely, which gives DistTGL's serialised sequence
``(R0 R1)(W0 W1)(R0 R1)(W0 W1)...``: no write overtakes a read of its step
(write-after-read) and no read of the next step runs before the writes
(read-after-write).

Requests:

* :meth:`~MemoryService.read` / :meth:`~MemoryService.write`: queued, served
  by the service thread when their phase comes; they return a
  :class:`concurrent.futures.Future`.
* :meth:`~MemoryService.reading`: a context manager for a read done by the
  caller itself (a model's forward that indexes the memory as it goes): it
  waits for the caller's read phase and closes the caller's part of it on exit.

The tensors are moved to shared memory (``Tensor.share_memory_()``, a no-op
on CUDA): a process that attaches to them sees the same storage. Bytes read
and written are counted.
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Iterable, Optional

import torch
from torch import Tensor

from ..errors import ModelInputError
from .host import host_to_device
from .store import write_rows

__all__ = ["MemoryService"]


class _Phase:
    def __init__(self, kind: str, trainers: Iterable[int]) -> None:
        self.kind = kind
        self.left = list(trainers)


class MemoryService:
    r"""Serves one memory copy.

    Args:
        memory (Tensor): ``[N, d]`` node memory (moved to shared memory).
        last_update (Tensor): ``[N]`` last update times (moved to shared memory).

    Attributes:
        read_bytes, write_bytes (int): memory + ``last_update`` row bytes
            read and written through the service (``reading`` blocks report
            theirs with :meth:`count_read`).
    """

    def __init__(self, memory: Tensor, last_update: Tensor) -> None:
        if memory.dim() != 2 or last_update.shape != memory.shape[:1]:
            raise ModelInputError("memory", f"has shape {tuple(memory.shape)} with last_update "
                                  f"{tuple(last_update.shape)}.", "give [N, d] and [N].")
        self.memory = memory.share_memory_() if not memory.is_cuda else memory
        self.last_update = last_update.share_memory_() if not last_update.is_cuda else last_update
        self._row = memory.size(1) * memory.element_size() + last_update.element_size()
        self._phases: deque = deque()
        self._queue: list = []
        self._cv = threading.Condition()
        self._closed = False
        self._error: Optional[BaseException] = None
        self.read_bytes = 0
        self.write_bytes = 0
        self._thread = threading.Thread(target=self._serve, name="pyg-dynscale-memory-service", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the order
    def plan(self, kind: str, trainers: Iterable[int]) -> None:
        """Append a phase: ``kind`` ``"R"`` (any order) or ``"W"`` (in the order given)."""
        if kind not in ("R", "W"):
            raise ModelInputError("kind", f"is {kind!r}.", "use 'R' or 'W'.")
        trainers = list(trainers)
        if not trainers:
            return
        with self._cv:
            self._phases.append(_Phase(kind, trainers))
            self._cv.notify_all()

    def _ready(self, kind: str, trainer: int) -> bool:
        if not self._phases:
            return False
        ph = self._phases[0]
        if ph.kind != kind or trainer not in ph.left:
            return False
        return kind == "R" or ph.left[0] == trainer

    def _done(self, trainer: int) -> None:
        ph = self._phases[0]
        ph.left.remove(trainer)
        if not ph.left:
            self._phases.popleft()
        self._cv.notify_all()

    # ------------------------------------------------------------------ requests
    def read(self, trainer: int, n_id: Tensor) -> Future:
        """Queue a read of rows ``n_id``; the future gives ``(memory [m, d], last_update [m])`` (copies)."""
        return self._submit("R", trainer, n_id, None, None)

    def write(self, trainer: int, n_id, rows: Optional[Tensor] = None, last: Optional[Tensor] = None) -> Future:
        """Queue a write of rows ``n_id``; the future completes when it is applied. ``n_id`` may
        also be a list of ``(n_id, rows, last)`` parts, applied in that order (a later part wins)."""
        return self._submit("W", trainer, n_id, rows, last)

    def _submit(self, kind, trainer, n_id, rows, last) -> Future:
        fut: Future = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("the memory service is closed")
            self._queue.append((kind, trainer, n_id, rows, last, fut))
            self._cv.notify_all()
        return fut

    @contextmanager
    def reading(self, trainer: int, timeout: Optional[float] = 600.0):
        """Run the block as ``trainer``'s read: it starts when the trainer's read phase has come."""
        with self._cv:
            if not self._cv.wait_for(lambda: self._error is not None or self._ready("R", trainer), timeout):
                raise RuntimeError(f"memory service: trainer {trainer}'s read phase did not come in {timeout} s "
                                   "(a read or write planned before it was never requested)")
            if self._error is not None:
                raise RuntimeError("memory service failed") from self._error
        try:
            yield self
        finally:
            with self._cv:
                self._done(trainer)

    def count_read(self, rows: int) -> None:
        """Count ``rows`` memory rows read inside a :meth:`reading` block."""
        self.read_bytes += rows * self._row

    def drain(self, timeout: Optional[float] = 600.0) -> None:
        """Wait until every planned phase has been served."""
        with self._cv:
            if not self._cv.wait_for(lambda: self._error is not None or not self._phases, timeout):
                raise RuntimeError(f"memory service: planned phases not served in {timeout} s")
            if self._error is not None:
                raise RuntimeError("memory service failed") from self._error

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()

    # ------------------------------------------------------------------ the thread
    def _next(self):
        for pos, req in enumerate(self._queue):
            if self._ready(req[0], req[1]):
                return self._queue.pop(pos)
        return None

    def _serve(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._closed or self._next_ready())
                if self._closed and not self._next_ready():
                    return
                kind, trainer, n_id, rows, last, fut = self._next()
            try:
                out = self._apply(kind, n_id, rows, last)
            except BaseException as exc:  # reported to the waiter and to every later request
                fut.set_exception(exc)
                with self._cv:
                    self._error = exc
                    self._cv.notify_all()
                return
            with self._cv:
                self._done(trainer)
            fut.set_result(out)

    def _next_ready(self) -> bool:
        return any(self._ready(r[0], r[1]) for r in self._queue)

    def _apply(self, kind: str, n_id: Tensor, rows: Optional[Tensor], last: Optional[Tensor]):
        if kind == "R":
            self.read_bytes += n_id.numel() * self._row
            at = host_to_device(n_id, self.memory.device)
            return self.memory[at].clone(), self.last_update[at].clone()
        parts = n_id if isinstance(n_id, (list, tuple)) else [(n_id, rows, last)]
        with torch.no_grad():  # in order, a later part wins: one scatter per buffer
            write_rows(self.memory, self.last_update, [(ids, r.to(self.memory.device), t.to(self.memory.device))
                                                       for ids, r, t in parts])
        self.write_bytes += sum(ids.numel() for ids, _, _ in parts) * self._row
        return None
