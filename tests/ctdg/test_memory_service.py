"""The memory service serves reads and writes in the schedule's phases: a write never overtakes a read of
its step, a read never overtakes the writes before it."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from pyg_dynscale.ctdg.service import MemoryService
from pyg_dynscale.errors import ModelInputError


def _service():
    mem = torch.arange(12, dtype=torch.float64).view(6, 2)
    return MemoryService(mem, torch.zeros(6, dtype=torch.long))


def test_a_write_waits_for_a_slow_read_of_its_step():
    svc = _service()
    before = svc.memory.clone()
    svc.plan("R", [0, 1])
    svc.plan("W", [1])
    n_id = torch.tensor([1, 4])
    got = {}

    def slow_reader():  # trainer 0 is late with its read
        time.sleep(0.3)
        got["r0"] = svc.read(0, n_id).result(timeout=10)

    th = threading.Thread(target=slow_reader)
    th.start()
    r1 = svc.read(1, n_id)
    w = svc.write(1, n_id, torch.full((2, 2), -1.0, dtype=torch.float64), torch.tensor([7, 7]))
    th.join()
    w.result(timeout=10)
    torch.testing.assert_close(got["r0"][0], before[n_id])  # the pre-write memory
    torch.testing.assert_close(r1.result()[0], before[n_id])
    assert svc.memory[1].tolist() == [-1.0, -1.0] and svc.last_update.tolist() == [0, 7, 0, 0, 7, 0]
    assert svc.read_bytes == 2 * 2 * (2 * 8 + 8) and svc.write_bytes == 2 * (2 * 8 + 8)
    svc.close()


def test_a_read_of_the_next_step_waits_for_the_writes_and_writes_keep_their_order():
    svc = _service()
    n_id = torch.tensor([2])
    svc.plan("R", [0])
    svc.plan("W", [0, 1])
    svc.plan("R", [0])
    with svc.reading(0):
        svc.count_read(1)
    late = {}

    def next_step():
        with svc.reading(0):
            late["seen"] = svc.memory[2].clone()

    th = threading.Thread(target=next_step)
    th.start()
    time.sleep(0.1)
    assert th.is_alive()  # waiting for both writes
    w1 = svc.write(1, n_id, torch.tensor([[5.0, 5.0]], dtype=torch.float64), torch.tensor([2]))
    time.sleep(0.1)
    assert not w1.done()  # trainer 0 writes first
    w0 = svc.write(0, n_id, torch.tensor([[3.0, 3.0]], dtype=torch.float64), torch.tensor([1]))
    th.join(timeout=10)
    assert w0.done() and w1.done()
    assert late["seen"].tolist() == [5.0, 5.0]  # chronological: trainer 1's row last
    svc.drain()
    svc.close()


def test_shared_memory_and_bad_input():
    svc = _service()
    assert svc.memory.is_shared() and svc.last_update.is_shared()
    with pytest.raises(ModelInputError, match="kind"):
        svc.plan("X", [0])
    svc.close()
    with pytest.raises(ModelInputError, match="memory"):
        MemoryService(torch.zeros(3), torch.zeros(3, dtype=torch.long))


def test_trainer_through_the_service_equals_the_trainer_without():
    from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events

    out = []
    for service in (False, True):
        d = synthetic_events(400, 40, msg_dim=3, seed=7, burst_length=15)
        d.msg = d.msg.double()
        torch.manual_seed(4)
        model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
        tr = MemoryTrainer(model, d, batch_size=25, lr=1e-2, parallelism=(2, 1, 1), memory_service=service)
        losses = [tr.train_epoch() for _ in range(2)]
        stats = tr.stats()  # training only (evaluation reads the memory directly)
        out.append((losses, tr.memory_copy(0), tr.evaluate("val"), stats,
                    torch.cat([p.detach().reshape(-1) for p in model.parameters()])))
    (l0, m0, v0, s0, p0), (l1, m1, v1, s1, p1) = out
    assert l0 == l1 and v0 == v1 and torch.equal(p0, p1)
    assert torch.equal(m0[0], m1[0]) and torch.equal(m0[1], m1[1])
    assert s1["service_write"] == s1["memory_write"] == s0["memory_write"] > 0
    assert s1["service_read"] == s1["memory_read"] > 0 and "service_read" not in s0
    tr.close()
    assert not tr.service
    with pytest.raises(NotImplementedError, match="memory_service"):
        MemoryTrainer(model, d, batch_size=25, parallelism=(1, 2, 1), memory_service=True)
