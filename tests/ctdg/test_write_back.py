"""The write-back order under mini-batch parallelism (issue 38, item 4b): when two trainers of one step write
the same vertex, the later trainer (the later events) wins, for the replicated memory (ctdg/write_back.py: the
writers' rows in trainer order, all-gathered in group-rank order under a process group) and the partitioned
ones (ctdg/memory_placement.py: the owners apply the blocks in source-rank order).

In TGN the two trainers compute the vertex's row from the same memory and mailbox, so the rows agree up to
rounding and a reversed order went unseen. Here the memory updater adds the mean of its batch's rows (an
updater whose output depends on the batch, as any normalisation over the batch does), so each trainer writes
a row of its own. Every step's queued rows are recorded as each trainer queues them; after the step's
write-back the whole memory must hold, for every written vertex, the row of the last trainer that wrote it:
bit for bit, on one process (the emulation, 3 trainers) and on 2 gloo ranks."""
from __future__ import annotations

import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.launch import spawn

BATCH = 24
TRAIN = 168  #: training events of the 240 (0.15 / 0.15 split)


class BatchDependentCell(torch.nn.GRUCell):
    """A GRU cell plus half the mean of its batch's outputs: a vertex's row depends on who else is updated."""

    def forward(self, x, h=None):
        out = super().forward(x, h)
        return out + 0.5 * out.mean(0, keepdim=True)


def _data():
    d = synthetic_events(240, 12, msg_dim=3, seed=5, burst_length=10)
    d.msg = d.msg.double()
    return d


def _trainer(placement: str, i: int) -> MemoryTrainer:
    d = _data()
    torch.manual_seed(3)
    model = TGN(d.num_nodes, 3, memory_dim=5, time_dim=3, embedding_dim=4, dropout=0.0).double()
    model.memory.gru = BatchDependentCell(model.memory.gru.input_size, 5).double()
    extra = {} if placement == "replicated" else {"partition": "interval"}
    return MemoryTrainer(model, d, batch_size=BATCH, lr=1e-2, parallelism=(i, 1, 1), seed=1, mrr_negatives=0,
                         memory_placement=placement, **extra)


def _record(placement: str, i: int) -> list:
    """One training epoch; per step: each trainer's queued ``(trainer, ids, rows)`` and the whole memory
    after the step's write-back."""
    tr = _trainer(placement, i)
    steps, queued = [], []
    queue, apply = tr.write_back.queue, tr.write_back.apply

    def spy_queue(lb, ctx):
        queue(lb, ctx)
        n_id, rows, _ = ctx.pending[lb.memory_copy][-1]
        queued.append((lb.trainer, n_id.clone(), rows.detach().clone()))

    def spy_apply(copy, a, b, ctx):
        apply(copy, a, b, ctx)
        steps.append((list(queued), tr.memory_copy(copy)[0]))
        queued.clear()

    tr.write_back.queue, tr.write_back.apply = spy_queue, spy_apply
    tr.train_epoch()
    tr.close()
    return steps


def _later_trainer_wins(steps: list, placement: str) -> int:
    """Checks every step; returns the vertices that two trainers of a step wrote with rows more than 1e-6
    apart (the first step's rows differ by rounding only: the memory is still zero)."""
    contested = 0
    for queued, after in steps:
        want, first = {}, {}
        for trainer, n_id, rows in sorted(queued, key=lambda q: q[0]):  # trainer = chronological order
            for v, row in zip(n_id.tolist(), rows):
                first.setdefault(v, row)
                want[v] = row
        for v, row in want.items():
            assert torch.equal(after[v], row), (placement, v, (after[v] - row).abs().max())
            contested += int((first[v] - row).abs().max() > 1e-6)
    return contested


def test_one_process_the_later_trainer_wins():
    for placement in ("replicated", "partitioned", "sven"):
        steps = _record(placement, 3)
        assert len(steps) == -(-TRAIN // (3 * BATCH))  # global batches of i local batches
        assert _later_trainer_wins(steps, placement) >= 10, placement  # the order decides many rows, not a lucky few


def _ranks(rank, world):
    torch.set_num_threads(1)
    return {p: _record(p, world) for p in ("replicated", "partitioned", "sven")}


def test_two_ranks_the_later_trainer_wins():
    per_rank = spawn(_ranks, 2, timeout=180)
    for placement in ("replicated", "partitioned", "sven"):
        runs = [r[placement] for r in per_rank]
        assert len(runs[0]) == len(runs[1]) == -(-TRAIN // (2 * BATCH))
        merged = []
        for (q0, after0), (q1, after1) in zip(*runs):
            assert torch.equal(after0, after1), placement  # every rank sees the same memory
            merged.append((q0 + q1, after0))
        assert _later_trainer_wins(merged, placement) >= 10, placement
