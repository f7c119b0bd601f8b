"""Sven §7.3's second pipeline level (MemoryTrainer(overlap_aggregation=True)): the aggregation all-to-all
runs on a thread over a group of its own while the GNN layer, the loss and the backward run; the same
numbers bit for bit in float64 (losses, parameters, gathered memory) and measured == predicted bytes on 2
gloo ranks, with and without micro-batches, with the prefetcher and with DepComm; one process: no change;
typed errors."""
from __future__ import annotations

import threading

import pytest

from pyg_dynscale.training.launch import spawn
from pyg_dynscale.errors import ModelInputError

from tests.helpers.memory_trainers import micro_batches_run as _run, micro_batches_trainer as _trainer, same_runs as _same


def test_one_process_overlap_changes_nothing():
    _same(_run(2, 1, overlap_aggregation=True), _run(2, 1), "one process")
    tr = _trainer(1, 1, overlap_aggregation=True)
    assert tr.fetch.channel is None  # one process: the emulated trainers' writes wait for every read
    tr.close()


def test_bad_overlap_aggregation():
    with pytest.raises(ModelInputError, match="overlap_aggregation"):
        _trainer(1, 1, overlap_aggregation="yes")
    with pytest.raises(ModelInputError, match="overlap_aggregation"):
        _trainer(1, 1, placement="replicated", overlap_aggregation=True)


def _spied(world, micro, **kw):
    """A run that records, per aggregation, the thread it ran on, its group, and whether the GNN
    layer of the same step started while it was still in flight."""
    from pyg_dynscale.ctdg.memory_placement import PartitionedMemory
    from pyg_dynscale.ctdg.partitioned_fetch import PartitionedFetch
    from pyg_dynscale.ctdg.scoring import LinkScorer

    seen = []
    aggregate, scores = PartitionedFetch.post, LinkScorer.scores

    inner = PartitionedMemory.aggregate
    gate = threading.Event()

    def spy_aggregate(self, batches, plans=None, group=None):
        seen.append({"thread": threading.current_thread() is not threading.main_thread(), "group": group is not None})
        if micro == 1 and seen[-1]["thread"] and len(seen) <= 3:  # hold the exchange until the GNN layer has started
            seen[-1]["overlapped"] = gate.wait(timeout=5.0)
        return inner(self, batches, plans, group)

    def spy_post(self, copy, ctx):
        gate.clear()
        return aggregate(self, copy, ctx)

    def spy_scores(self, *a, **k):
        gate.set()
        return scores(self, *a, **k)

    PartitionedMemory.aggregate, PartitionedFetch.post = spy_aggregate, spy_post
    LinkScorer.scores = spy_scores
    try:
        out = _run(world, micro, overlap_aggregation=True, **kw)
    finally:
        PartitionedMemory.aggregate, PartitionedFetch.post = inner, aggregate
        LinkScorer.scores = scores
    out["seen"] = seen
    return out


def _ranks(rank, world):
    import torch

    torch.set_num_threads(1)
    runs = {}
    for name, micro, kw in (("sven", 1, {}), ("micro", 3, {}), ("prefetch", 1, {"prefetch": True}),
                            ("depcomm", 1, {"placement": "partitioned"})):
        # both on the whole stream (events per rank with the overlap: test_rank_events_pipelines.py)
        runs[name] = (_run(world, micro, event_placement="whole", **kw),
                      _spied(world, micro, event_placement="whole", **kw))
    return runs


def test_two_ranks_overlap_equals_inline():
    per_rank = spawn(_ranks, 2, timeout=240)
    for r, runs in enumerate(per_rank):
        for name, (inline, overlap) in runs.items():
            _same(overlap, inline, (name, r))
            assert overlap["traffic"]["event_placement"] == "whole", (name, r)  # reported
            t = overlap["traffic"]
            assert t["measured"] == t["predicted"], (name, r, t)
            assert t["measured"] == inline["traffic"]["measured"], (name, r)
            seen = overlap["seen"]
            assert seen and all(s["group"] for s in seen), name  # the aggregation group
            threaded = [s for s in seen if s["thread"]]
            assert len(threaded) >= len(seen) - 2, (name, len(threaded), len(seen))  # empty batches: inline
            if name != "micro":  # the GNN layer ran while the exchange was held in flight
                assert [s["overlapped"] for s in threaded[:3]] == [True] * 3, name
