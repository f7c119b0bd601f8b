"""Sven's micro-batch pipelining (memory_placement="sven", micro_batches=n or "auto"): the same numbers
as n = 1 in float64 (dropout off) on one process and on 2 gloo ranks, the next micro-batch's dispatch
runs on another thread while the current one computes, one merged write per local batch (aggregation
bytes as n = 1), measured bytes == predicted; the adaptive rule's fit; typed errors."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.ctdg.microbatch import adaptive_micro_batches, fit_line, merge_rows, micro_ranges
from pyg_dynscale.training.launch import spawn
from pyg_dynscale.errors import ModelInputError
from tests.helpers.memory_trainers import micro_batches_run as _run, micro_batches_trainer as _trainer, same_runs as _same


def test_micro_ranges_cover_the_batch():
    assert micro_ranges(10, 20, 3) == [(10, 13), (13, 16), (16, 20)]
    assert micro_ranges(5, 7, 4) == [(5, 5), (5, 6), (6, 6), (6, 7)]  # fewer events than micro-batches
    assert micro_ranges(3, 3, 2) == [(3, 3), (3, 3)]


def test_fit_and_adaptive_rule():
    a, b = fit_line([1, 2, 4], [3 * 1 + 5, 3 * 2 + 5, 3 * 4 + 5])
    assert math.isclose(a, 3.0) and math.isclose(b, 5.0)
    assert fit_line([2, 2], [1.0, 3.0]) == (0.0, 2.0)
    # bytes = 100 * events + 400; seconds = bytes / 1e6 + 1e-3: S = 1e6 * 1e-3 = 1000 bytes
    ev = [50, 25, 12]
    nb = [100 * e + 400 for e in ev]
    sec = [x / 1e6 + 1e-3 for x in nb]
    assert adaptive_micro_batches(ev, nb, sec, batch_size=50, max_micro=8) == 5  # floor(5400 / 1000)
    assert adaptive_micro_batches(ev, nb, sec, batch_size=30, max_micro=8) == 3  # floor(3400 / 1000)
    assert adaptive_micro_batches(ev, nb, sec, batch_size=500, max_micro=8) == 8  # capped
    heavy = [3000 * e for e in ev]  # 12,000 bytes for 4 events: 12 micro-batches by the rule
    assert adaptive_micro_batches(ev, heavy, [x / 1e6 + 1e-3 for x in heavy], batch_size=4, max_micro=8) == 4
    # a compute overhead K = 4e-3 s per micro-batch: S = 1e6 * (1e-3 + 4e-3) = 5000 bytes
    comp = ([50, 25, 12], [4e-3 + 1e-4 * e for e in (50, 25, 12)])
    assert adaptive_micro_batches(ev, nb, sec, batch_size=50, compute=comp) == 1  # floor(5400 / 5000)
    assert adaptive_micro_batches(ev, nb, sec, batch_size=200, compute=comp) == 4  # floor(20400 / 5000)
    assert adaptive_micro_batches(ev, [0, 0, 0], [1e-4] * 3, batch_size=50) == 1  # nothing crosses the network
    assert adaptive_micro_batches(ev, nb, [2e-3] * 3, batch_size=50) == 1  # time does not grow with bytes


def test_merge_rows():
    e1 = (torch.tensor([1, 4]), torch.tensor([[1.0], [4.0]]), torch.tensor([10, 40]))
    e2 = (torch.tensor([2, 4]), torch.tensor([[2.0], [4.0]]), torch.tensor([20, 40]))
    n_id, rows, last = merge_rows([e1, e2])
    assert n_id.tolist() == [1, 2, 4] and rows.view(-1).tolist() == [1.0, 2.0, 4.0] and last.tolist() == [10, 20, 40]


def test_one_process_micro_batches_equal_one_and_overlap():
    one = _run(2, 1)
    three = _run(2, 3, watch=True)
    _same(three, one, "n=3")
    assert three["overlapped"] == [True] * 4  # each next fetch ran while a micro-batch computed
    assert _run(2, "auto")["n"] == 1  # one process: nothing crosses a network, nothing to hide


def test_bad_micro_batches():
    for bad in (0, -1, 1.5, "fast", True):
        with pytest.raises(ModelInputError, match="micro_batches"):
            _trainer(1, bad)
    for placement in ("replicated", "partitioned"):
        with pytest.raises(NotImplementedError, match="micro_batches"):
            _trainer(1, 2, placement=placement)
    with pytest.raises(NotImplementedError, match="prefetch"):
        _trainer(1, 2, prefetch=True)


def _ranks(rank, world):
    torch.set_num_threads(1)
    runs = {micro: _run(world, micro) for micro in (1, 3, "auto")}
    for micro in (1, 3):  # with the delayed all-reduce in flight during the dispatches
        runs[(micro, "delayed")] = _run(world, micro, gradient_sync="delayed")
    return runs


def test_two_ranks_micro_batches_equal_one():
    per_rank = spawn(_ranks, 2, timeout=180)
    for r, runs in enumerate(per_rank):
        one = runs[1]
        for micro in (3, "auto"):
            _same(runs[micro], one, (micro, r))
            t = runs[micro]["traffic"]
            assert t["measured"] == t["predicted"], (micro, r, t)
        t1, t3 = one["traffic"]["measured"], runs[3]["traffic"]["measured"]
        assert t3["aggregation"] == t1["aggregation"] > 0  # one merged write per local batch
        assert t3["dispatch"] > t1["dispatch"] > 0  # a vertex two micro-batches read is fetched twice
        assert t3["counts"] == 2 * t1["counts"] > 0  # per step 3 dispatches + 1 aggregation, not 1 + 1
        _same(runs[(3, "delayed")], runs[(1, "delayed")], ("delayed", r))
    n = [runs["auto"]["n"] for runs in per_rank]
    assert n[0] == n[1] and 1 <= n[0] <= 8  # agreed by the ranks
