r"""The training schedule of DistTGL's :math:`i \times j \times k` parallelism
as an explicit object: which events form which global batch, which trainer
takes which chronological part of it, which memory copy it reads and writes,
which negative set it uses and which memory state it reads.

A distributed run gives every rank (trainer) its own part of each
:class:`Step`; the single-process emulation
(:class:`~pyg_dynscale.ctdg.MemoryTrainer` with ``parallelism=(i, j, k)`` on one
process) walks the same steps serially, so any world size can be compared with
one process.

Trainer :math:`t = r + i (j_t + j \cdot k_t)`: mini-batch index :math:`r < i`,
epoch-parallel sub-group :math:`j_t < j`, memory copy :math:`k_t < k` (DistTGL's
``global_rank`` layout: the :math:`i \cdot j` trainers of one memory copy are
consecutive ranks).

* **Global batches.** :math:`P = \lceil E_{train} / (i b) \rceil` positive sets;
  global batch :math:`g` is the events :math:`[g i b, \min((g + 1) i b, E_{train}))`
  (``b`` = ``batch_size``), split chronologically into :math:`i` local batches of
  ``b`` events (the tail's last local batches may be short or empty).
* **Mini-batch parallelism** :math:`(i, 1, 1)` (DistTGL §3.2.1): the :math:`i`
  trainers of a global batch all read the memory as it was before the global
  batch; all write back (their root nodes) after all have read.
* **Memory parallelism** :math:`(1, 1, k)` (§3.2.3, the code's ``train.py``):
  memory copy :math:`k_t` walks all :math:`P` global batches in order from
  offset :math:`o_{k_t} = ((k - k_t) \bmod k) \lfloor P / k \rfloor`, wrapping
  around, and is reset to zero (memory, messages, neighbours) whenever it wraps
  to global batch 0; the copies persist across epochs, so after the first epoch
  every copy walks whole passes that start at different time segments. Copy 0
  starts at batch 0 (it is the one evaluated).
* **Epoch parallelism** :math:`(1, j, 1)` (§3.2.2, the code's reordered
  schedule): within a memory copy, walk position :math:`q` (its :math:`q`-th
  global batch) is trained by sub-group :math:`q \bmod j` in the :math:`j`
  iterations :math:`s = q, \dots, q + j - 1`, with negative set :math:`s - q`;
  every iteration reads the memory as it was before position :math:`q`'s write
  (DistTGL reads it once and keeps it for the :math:`j` iterations), and only
  the first (:math:`s = q`, negative set 0) writes back: one writer per
  iteration. An epoch has :math:`P + j - 1` iterations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..errors import ModelInputError

__all__ = ["EventSchedule", "LocalBatch", "Step", "check_layout", "check_parallelism"]


@dataclass(frozen=True)
class LocalBatch:
    """One trainer's share of a :class:`Step`: events ``[start, end)``.

    Attributes:
        trainer: the trainer's index ``r + i * (jj + j * kk)``.
        start, end: global event ids (``start == end``: no events this step).
        memory_copy: which of the ``k`` memory copies it reads (and writes).
        negative_set: which of the ``j`` negative sets of its global batch it uses.
        writes_memory: whether its root nodes' memory is written back (negative set 0).
        batch: the global batch (positive set) index, ``-1`` when idle.
        position: the walk position of that batch in its memory copy (``-1`` when idle).
        batch_start, batch_end: the events of the whole global batch.
    """

    trainer: int
    start: int
    end: int
    memory_copy: int = 0
    negative_set: int = 0
    writes_memory: bool = True
    batch: int = 0
    position: int = 0
    batch_start: int = 0
    batch_end: int = 0

    @property
    def num_events(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Step:
    """One optimizer step: every trainer's local batch (``local``, in trainer order).

    Attributes:
        iteration: the step's index in the epoch.
        start, end: the global batch that memory copy 0 takes (reads fresh and
            writes) in this step; ``start == end`` if none (the tail of epoch parallelism).
        local: ``i * j * k`` :class:`LocalBatch`, trainer ``t`` at index ``t``.
        fresh: ``(memory_copy, position, batch, batch_start, batch_end)`` of every
            global batch read fresh (and written) in this step, by copy.
        resets: memory copies reset to zero before this step (the wrap to batch 0).
    """

    iteration: int
    start: int
    end: int
    local: tuple
    fresh: tuple = ()
    resets: tuple = ()

    @property
    def num_events(self) -> int:
        return self.end - self.start


def check_parallelism(parallelism) -> tuple[int, int, int]:
    """``(i, j, k)`` as three positive ints, or :class:`ModelInputError`."""
    try:
        i, j, k = (int(x) for x in parallelism)
        ok = all(int(x) == x and not isinstance(x, bool) for x in parallelism)
    except (TypeError, ValueError):
        ok = False
    if not ok or min(i, j, k) < 1:
        raise ModelInputError("parallelism", f"is {parallelism!r}.", "give (i, j, k): three integers >= 1 (mini-batch, epoch, memory).")
    return i, j, k


def check_layout(parallelism, world_size: int, local_world_size: Optional[int] = None) -> tuple[int, int, int]:
    r"""DistTGL's constraints on :math:`(i, j, k)` for ``world_size`` processes,
    ``local_world_size`` of them per machine (torchrun's ``LOCAL_WORLD_SIZE``;
    ``None``: one machine):

    * :math:`i \cdot j \cdot k` = ``world_size`` (one trainer per process);
    * :math:`k \ge` the number of machines (only memory copies may span machines);
    * the :math:`i \cdot j` trainers sharing a memory copy are on one machine
      (consecutive ranks: :math:`i \cdot j` divides ``local_world_size``).

    Raises:
        ModelInputError: naming ``parallelism`` and a layout that fits.
    """
    i, j, k = check_parallelism(parallelism)
    world = int(world_size)
    local = world if local_world_size is None else int(local_world_size)
    if i * j * k != world:
        raise ModelInputError("parallelism", f"is ({i}, {j}, {k}): i*j*k = {i * j * k} trainers for {world} processes.",
                              f"choose i*j*k = {world} (e.g. ({world}, 1, 1) or (1, 1, {world})), or run "
                              f"{i * j * k} processes.")
    if local < 1 or world % local:
        raise ModelInputError("LOCAL_WORLD_SIZE", f"is {local} for {world} processes.",
                              "run the same number of processes on every machine (torchrun --nproc-per-node).")
    machines = world // local
    if k < machines:
        raise ModelInputError("parallelism", f"is ({i}, {j}, {k}) on {machines} machines: k = {k} memory copies "
                              f"< {machines} machines (a memory copy cannot span machines).",
                              f"use k >= {machines}, e.g. ({max(1, local // max(1, j))}, 1, {machines}) "
                              f"if it divides, or (1, 1, {world}).")
    if local % (i * j):
        raise ModelInputError("parallelism", f"is ({i}, {j}, {k}) with {local} processes per machine: a memory copy's "
                              f"i*j = {i * j} trainers would span machines.",
                              f"choose i*j dividing {local} (one memory copy per machine-local group).")
    return i, j, k


class EventSchedule:
    r"""The steps of one training epoch over events ``[0, num_train)``.

    Args:
        num_train (int): training events (they come first in the stream).
        batch_size (int): events per local batch (``b``).
        parallelism (tuple): ``(i, j, k)``.
    """

    def __init__(self, num_train: int, batch_size: int, parallelism=(1, 1, 1)) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ModelInputError("batch_size", f"is {batch_size!r}.", "use an integer >= 1.")
        self.num_train = int(num_train)
        self.batch_size = batch_size
        self.i, self.j, self.k = check_parallelism(parallelism)

    @property
    def global_batch_size(self) -> int:
        return self.i * self.batch_size

    @property
    def num_batches(self) -> int:
        """:math:`P`, the global batches (positive sets) of an epoch."""
        return -(-self.num_train // self.global_batch_size)

    @property
    def world_size(self) -> int:
        return self.i * self.j * self.k

    def offset(self, copy: int) -> int:
        """Where memory copy ``copy`` starts its walk: :math:`((k - c) \\bmod k) \\lfloor P / k \\rfloor`."""
        return ((self.k - copy) % self.k) * (self.num_batches // self.k)

    def batch_of(self, copy: int, position: int) -> int:
        """The global batch at walk ``position`` of memory copy ``copy``."""
        return (self.offset(copy) + position) % self.num_batches

    def trainer(self, r: int, jj: int, kk: int) -> int:
        return r + self.i * (jj + self.j * kk)

    def steps(self) -> list[Step]:
        """The epoch's steps, in order."""
        out = []
        P, gb, b, i, j, k = self.num_batches, self.global_batch_size, self.batch_size, self.i, self.j, self.k
        for s in range(P + j - 1):
            local = [None] * (i * j * k)
            fresh, resets = [], []
            for kk in range(k):
                if s < P:
                    g = self.batch_of(kk, s)
                    if g == 0:
                        resets.append(kk)
                    a = g * gb
                    fresh.append((kk, s, g, a, min(a + gb, self.num_train)))
                for jj in range(j):
                    q = s - ((s - jj) % j)  # the newest walk position <= s of sub-group jj
                    for r in range(i):
                        t = self.trainer(r, jj, kk)
                        if q < 0 or q >= P:
                            local[t] = LocalBatch(trainer=t, start=0, end=0, memory_copy=kk, negative_set=0,
                                                  writes_memory=False, batch=-1, position=-1)
                            continue
                        g = self.batch_of(kk, q)
                        a = g * gb
                        e = min(a + gb, self.num_train)
                        local[t] = LocalBatch(trainer=t, start=min(a + r * b, e), end=min(a + (r + 1) * b, e),
                                              memory_copy=kk, negative_set=s - q, writes_memory=s == q, batch=g,
                                              position=q, batch_start=a, batch_end=e)
            start, end = (fresh[0][3], fresh[0][4]) if fresh else (0, 0)
            out.append(Step(iteration=s, start=start, end=end, local=tuple(local), fresh=tuple(fresh),
                            resets=tuple(resets)))
        return out

    def eval_batches(self, start: int, end: int) -> list[tuple[int, int]]:
        """Evaluation batches over ``[start, end)``: ``batch_size`` events each
        (the example's ``TemporalDataLoader``; one memory copy, copy 0, as DistTGL
        evaluates on the first memory process)."""
        return [(a, min(a + self.batch_size, end)) for a in range(start, end, self.batch_size)]
