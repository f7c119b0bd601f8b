"""MemoryTrainer on 2 ranks under NCCL's rules, on the CPU (issue 35, items 1 and 3), with the tests'
stand-in for NCCL (``tests/helpers/fake_nccl.py``: gloo underneath, NCCL's refusals on top, every collective of
its groups logged): every placement binds its device before its first collective (NCCL would make an
unbound rank's communicator on cuda:0), runs no object collective over the device group, moves its host
values (the ``[M]`` counts, the requested and aggregated ids, the memory copies' ids) over gloo, so that
a training step hands the device group only rows and gradients; ``overlap_aggregation``'s rows go over
a group of the default backend and its ids over a gloo group, both its own; events per rank's owner-index
exchanges (the default "auto" takes them here) hand the device group rows only. The trainer's bytes stay
measured == predicted."""
from __future__ import annotations

from collections import Counter

import torch

import tests.helpers.fake_nccl as fake_nccl  # registers the backend in the spawned ranks too
from pyg_dynscale.training import ranks as groups
from pyg_dynscale.training.launch import spawn

from tests.helpers.memory_trainers import host_syncs_trainer as _trainer

#: name -> (parallelism, MemoryTrainer options)
CASES = {
    "replicated (2,1,1)": ((2, 1, 1), {}),
    "replicated (1,1,2)": ((1, 1, 2), {}),
    "partitioned": ((2, 1, 1), {"placement": "partitioned", "event_placement": "whole"}),
    # events per rank ("auto"'s choice here): the owners' index adds three row exchanges per step
    "partitioned, events per rank": ((2, 1, 1), {"placement": "partitioned", "event_placement": "per_rank"}),
    "sven overlap": ((2, 1, 1), {"placement": "sven", "overlap_aggregation": True}),
    "sven micro overlap": ((2, 1, 1), {"placement": "sven", "micro_batches": 2, "overlap_aggregation": True}),
}


def _collectives(log: list) -> list:
    return [entry[0] for entry in log if entry[0] not in ("bind", "devices", "refused")]


def _run(world, parallelism, kw):
    fake_nccl.LOG.clear()
    tr = _trainer(world, parallelism, **kw)
    setup = list(fake_nccl.LOG)
    steps, inner = [], tr._train_step

    def logged(step, all_steps):
        fake_nccl.LOG.clear()
        out = inner(step, all_steps)
        steps.append(Counter(_collectives(fake_nccl.LOG)))
        return out

    tr._train_step = logged
    loss = tr.train_epoch()
    traffic = tr.traffic()
    val = tr.evaluate("val")  # its result travels as an object: over gloo
    out = {"setup": setup, "steps": steps, "loss": loss, "val": val, "traffic": traffic,
           "host": groups.group_backend(tr.groups.host)}
    if tr.fetch is not None and tr.fetch.channel is not None:
        ch = tr.fetch.channel
        out["agg"] = {"rows": groups.group_backend(ch.rows.group), "ids": groups.group_backend(ch.host),
                      "own": ch.rows.group is not None and ch.host is not tr.groups.host,
                      "transport": ch.rows.name}
    tr.close()
    return out


def _ranks(rank, world):
    torch.set_num_threads(1)
    return {name: _run(world, par, dict(kw)) for name, (par, kw) in CASES.items()}


def test_two_ranks_follow_nccl_rules():
    per_rank = spawn(_ranks, 2, backend=fake_nccl.NAME, timeout=240)
    for r, runs in enumerate(per_rank):
        for name, run in runs.items():
            setup = run["setup"]
            # item 1: the device is bound before the trainer's first collective
            assert setup and setup[0][0] == "bind", (name, r, setup[:3])
            assert _collectives(setup), (name, r)  # (DDP's broadcast of rank 0's parameters, at least)
            assert run["host"] == "gloo", (name, r)  # host values: the default group's gloo twin
            if "replicated" not in name:
                t = run["traffic"]
                assert t["measured"] == t["predicted"], (name, r, t)
            assert run["val"] == per_rank[0][name]["val"]
            for s, ops in enumerate(run["steps"]):
                # a step hands the device group rows and gradients only: per step one all_to_all of
                # dispatched rows (per micro-batch) and one of aggregated rows (partitioned), one
                # all_gather of the write-back's rows (replicated, memory copies of 2 ranks), DDP's
                # all-reduce; the counts and ids went over gloo (not logged)
                extra = {"broadcast"} if s <= 1 else set()  # DDP rebuilds its buckets at its second forward
                assert set(ops) - extra <= {"all_to_all", "all_gather", "all_reduce"}, (name, r, s, ops)
                if name.startswith("replicated (2"):
                    assert ops["all_gather"] == 1 and "all_to_all" not in ops, (name, r, s, ops)
                elif name.startswith("replicated (1"):
                    assert "all_gather" not in ops and "all_to_all" not in ops, (name, r, s, ops)  # copies of one rank
                else:
                    micro = 2 if "micro" in name else 1
                    # events per rank: per (micro-)batch the neighbours' and the mailbox's messages, per step
                    # the batch's messages to their owners: rows too (their counts and ids go over gloo)
                    events = int(run["traffic"]["event_placement"] == "per_rank")
                    assert ops["all_to_all"] == micro * (1 + 2 * events) + 1 + events, (name, r, s, ops)
            if "overlap" in name:  # item 3: rows on the default backend, ids on gloo, groups of its own
                assert run["agg"] == {"rows": fake_nccl.NAME, "ids": "gloo", "own": True, "transport": "direct"}, \
                    (name, r, run["agg"])
