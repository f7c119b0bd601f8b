r"""The training schedule of DistTGL's :math:`i \times j \times k` parallelism
as an explicit object: which events form which global batch, which trainer
takes which chronological part of it, which memory copy it reads and writes,
and which negative set it uses.

A distributed run gives every rank its own part of each :class:`Step`; the
single-process emulation (:class:`~pyg_dynscale.ctdg.MemoryTrainer` with
``parallelism=(i, j, k)`` on one process) walks the same steps serially, so
any world size can be compared with one process.

Built so far: ``(i, 1, 1)``, mini-batch parallelism (DistTGL §3.2.1): global
batch :math:`g` is the events :math:`[g \cdot i \cdot b, \min((g + 1) i b, E_{train}))`
(``b`` = ``batch_size``), split chronologically into :math:`i` local batches of
``b`` events (the tail's last local batches may be short or empty); every
trainer reads the memory as it was before the global batch, all write back
after all have read. Epoch parallelism (``j > 1``) and memory parallelism
(``k > 1``) raise :class:`NotImplementedError`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ModelInputError

__all__ = ["EventSchedule", "LocalBatch", "Step", "check_parallelism"]


@dataclass(frozen=True)
class LocalBatch:
    """One trainer's share of a :class:`Step`: events ``[start, end)``.

    Attributes:
        trainer: the trainer's index ``r + i * (jj + j * kk)`` for mini-batch
            index ``r``, epoch index ``jj``, memory copy ``kk``.
        start, end: global event ids (``start == end``: no events this step).
        memory_copy: which of the ``k`` memory copies it reads and writes.
        negative_set: which negative set it draws from (epoch parallelism).
        writes_memory: whether its root nodes' memory is written back.
    """

    trainer: int
    start: int
    end: int
    memory_copy: int = 0
    negative_set: int = 0
    writes_memory: bool = True

    @property
    def num_events(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Step:
    """One optimizer step: the global batch ``[start, end)`` and its local batches."""

    iteration: int
    start: int
    end: int
    local: tuple

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
        if self.j > 1:
            raise NotImplementedError(
                f"epoch parallelism (j = {self.j} > 1 in parallelism={parallelism!r}) is not built yet: "
                "use (i, 1, 1)."
            )
        if self.k > 1:
            raise NotImplementedError(
                f"memory parallelism (k = {self.k} > 1 in parallelism={parallelism!r}) is not built yet: "
                "use (i, 1, 1)."
            )

    @property
    def global_batch_size(self) -> int:
        return self.i * self.batch_size

    def steps(self) -> list[Step]:
        """The epoch's steps, in order."""
        out = []
        gb, b = self.global_batch_size, self.batch_size
        for it, a in enumerate(range(0, self.num_train, gb)):
            e = min(a + gb, self.num_train)
            local = tuple(
                LocalBatch(trainer=r, start=min(a + r * b, e), end=min(a + (r + 1) * b, e)) for r in range(self.i)
            )
            out.append(Step(iteration=it, start=a, end=e, local=local))
        return out

    def eval_batches(self, start: int, end: int) -> list[tuple[int, int]]:
        """Evaluation batches over ``[start, end)``: ``batch_size`` events each
        (the example's ``TemporalDataLoader``; one memory copy, as DistTGL
        evaluates on the first memory process)."""
        return [(a, min(a + self.batch_size, end)) for a in range(start, end, self.batch_size)]
