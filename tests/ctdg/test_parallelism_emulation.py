"""The single-process emulation of DistTGL's epoch parallelism (1, j, 1) and memory parallelism (1, 1, k)
against references built from the (1, 1, 1) trainer's own pieces, the schedule's assignments, and
DistTGL's layout constraints (checked without processes)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.ctdg import TGN, EventSchedule, MemoryTrainer, synthetic_events
from pyg_dynscale.ctdg.parallel import local_world_size
from pyg_dynscale.ctdg.schedule import check_layout
from pyg_dynscale.errors import ModelInputError

TINY = 1e-300  # Adam's steps are ~lr: the weights stay put, so memory and losses can be compared with (1, 1, 1)


def _setup(par, lr=TINY):
    d = synthetic_events(400, 40, msg_dim=3, seed=7, burst_length=15)
    d.msg = d.msg.double()
    torch.manual_seed(4)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.0).double()
    return d, MemoryTrainer(model, d, batch_size=25, lr=lr, parallelism=par, seed=1)


def _walk_one_copy(tr, batches):
    """The (1, 1, 1) trainer's memory before each of ``batches`` global batches and after all: TGNMemory's
    own update (``MemoryState.update`` of the whole batch), nothing from the parallel code path."""
    tr.copies.set_training(True)
    tr.copies.reset()
    before = []
    for a, b in batches:
        before.append(tr.copies.snapshot())
        tr.copies.advance(a, b, True)
    return before, tr.copies.snapshot()


def test_schedule_assignments():
    s = EventSchedule(100, 10, (1, 2, 1))
    steps = s.steps()
    assert len(steps) == 11
    got = [[(lb.batch, lb.negative_set, lb.writes_memory) for lb in st.local] for st in steps]
    assert got[0] == [(0, 0, True), (-1, 0, False)]
    assert got[1] == [(0, 1, False), (1, 0, True)]
    assert got[2] == [(2, 0, True), (1, 1, False)]
    assert got[10] == [(-1, 0, False), (9, 1, False)]
    assert sum(lb.writes_memory for st in steps for lb in st.local) == 10  # one writer per positive set
    s = EventSchedule(100, 10, (1, 1, 2))
    steps = s.steps()
    assert [st.local[1].batch for st in steps] == [5, 6, 7, 8, 9, 0, 1, 2, 3, 4]
    assert [st.local[0].batch for st in steps] == list(range(10))
    assert [st.resets for st in steps] == [(0,), (), (), (), (), (1,), (), (), (), ()]
    s = EventSchedule(95, 10, (2, 1, 2))  # P = 5 global batches of 20, copy 1 from 5 // 2 * 1 = 2
    steps = s.steps()
    assert [(lb.start, lb.end, lb.memory_copy) for lb in steps[0].local] == [(0, 10, 0), (10, 20, 0), (40, 50, 1),
                                                                            (50, 60, 1)]
    assert [(lb.start, lb.end) for lb in steps[4].local[:2]] == [(80, 90), (90, 95)]


def test_memory_parallelism_copies_walk_from_their_offsets_and_reset_at_the_wrap():
    d, tr = _setup((1, 1, 2))
    P = tr.schedule.num_batches
    batches = [(g * 25, min((g + 1) * 25, tr.val_start)) for g in range(P)]
    _, one = _setup((1, 1, 1))
    before, end = _walk_one_copy(one, batches)
    for _ in range(2):
        tr.train_epoch()
        m0, l0 = tr.memory_copy(0)
        torch.testing.assert_close(m0, end["memory"]["memory"], atol=1e-9, rtol=0)  # copy 0: the whole epoch
        assert torch.equal(l0, end["memory"]["last_update"])
        # copy 1 started at P // 2, wrapped to batch 0 (reset) and stops before P // 2
        m1, l1 = tr.memory_copy(1)
        ref = before[P // 2]["memory"]
        torch.testing.assert_close(m1, ref["memory"], atol=1e-9, rtol=0)
        assert torch.equal(l1, ref["last_update"]) and not torch.equal(l1, l0)


def test_epoch_parallelism_one_writer_and_reads_before_the_positive_sets_write():
    j = 2
    d, tr = _setup((1, j, 1))
    P = tr.schedule.num_batches
    batches = [(g * 25, min((g + 1) * 25, tr.val_start)) for g in range(P)]
    rng = torch.get_rng_state()
    tr.train_epoch()
    # the negatives the trainer drew: the DataLoader's seed draw, then j sets per positive set
    torch.set_rng_state(rng)
    torch.empty((), dtype=torch.int64).random_()
    lo, hi = int(d.dst[:tr.val_start].min()), int(d.dst[:tr.val_start].max())
    negs = [torch.randint(lo, hi + 1, (j * (b - a),)).view(j, b - a) for a, b in batches]
    _, one = _setup((1, 1, 1))
    before, end = _walk_one_copy(one, batches)
    torch.testing.assert_close(tr.memory_copy(0)[0], end["memory"]["memory"], atol=1e-9, rtol=0)  # one writer

    def loss(q, n):
        one.copies.restore(before[q])
        a, b = batches[q]
        pos, neg, _ = one.scorer.scores(a, b, negs[q][n], True)
        return float((one.criterion(pos, torch.ones_like(pos)) + one.criterion(neg, torch.zeros_like(neg))).detach())

    ref = [sum(loss(q, s - q) / j for q in range(max(0, s - j + 1), min(s, P - 1) + 1)) for s in range(P + j - 1)]
    torch.testing.assert_close(tr.batch_losses, torch.tensor(ref, dtype=torch.float64), atol=1e-9, rtol=0)


def test_layout_constraints():
    assert check_layout((2, 1, 2), 4, 2) == (2, 1, 2)
    assert check_layout((1, 2, 2), 4) == (1, 2, 2)
    with pytest.raises(ModelInputError, match=r"parallelism.*i\*j\*k = 2 trainers for 3 processes.*\(3, 1, 1\)"):
        check_layout((2, 1, 1), 3)
    with pytest.raises(ModelInputError, match=r"parallelism.*k = 1 memory copies < 2 machines.*k >= 2"):
        check_layout((2, 2, 1), 4, 2)
    with pytest.raises(ModelInputError, match=r"parallelism.*i\*j = 3 trainers would span machines"):
        check_layout((1, 3, 4), 12, 4)
    with pytest.raises(ModelInputError, match="LOCAL_WORLD_SIZE"):
        check_layout((1, 1, 4), 4, 3)
    with pytest.raises(ModelInputError, match="parallelism"):
        check_layout((0, 1, 1), 1)


def test_local_world_size_comes_from_torchrun(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert local_world_size(6) == 6
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert local_world_size(6) == 2
