"""build_rank_plan: each rank builds only its own lists (one exchange of request lists), == the central plan."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.data.synthetic import generate_dynamic_graph
from pyg_dynscale.distributed import spawn
from pyg_dynscale.distributed import rank_plan_exchange
from pyg_dynscale.distributed.rank_plan_exchange import build_rank_plan
from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import CommunicationPlan, Partition, partition
from pyg_dynscale.partition import plan as plan_module
from pyg_dynscale.partition.rank_plan import RankPlan
from tests.helpers import fake_nccl  # registers the CPU stand-in for NCCL in the spawned ranks
from tests.helpers.rank_plans import PATTERNS, assert_same_state, assert_slice_equals_plan, link_pairs, partitions
from tests.helpers.signals import make_dynamic_signal


def _signals():
    """A signal whose vertex set changes every snapshot, and a synthetic one with uneven sequences."""
    return [make_dynamic_signal(seed=5, T=8, V=16),
            generate_dynamic_graph(40, 300, 7, presence=0.6, sequence_length_std=0.5, edge_std=0.3,
                                   num_features=2, seed=3)]


def _cases(R):
    """Every signal x partition x pattern, with the default, an exchanged input halo or readout pairs in
    turn (3 and the 5 patterns are coprime: each option meets every pattern and partition kind)."""
    i = 0
    for s, sig in enumerate(_signals()):
        pairs = link_pairs(sig, s)
        options = ({}, {"input_halo": "exchange"}, {"link_pairs": pairs, "readout_width": 3})
        for part in partitions(sig, R):
            for pattern in PATTERNS:
                yield sig, part, pattern, options[i % 3]
                i += 1


def _no_central_plan(*args, **kwargs):
    raise AssertionError("the central plan was computed on a rank")


def _equal_worker(rank: int, world: int) -> dict:
    cases = list(_cases(world))
    expect = [CommunicationPlan.build(sig, part, pattern, **kw) for sig, part, pattern, kw in cases]
    # from here on no rank may compute the central plan (or any of its whole-signal row sets)
    CommunicationPlan.build = classmethod(_no_central_plan)
    for name in ("segment_depth", "_attention_rows", "_window_rows"):
        setattr(plan_module, name, _no_central_plan)
    plan_module.Exchange.from_rows = classmethod(_no_central_plan)
    rounds = 0
    for i, ((sig, part, pattern, kw), plan) in enumerate(zip(cases, expect)):
        # scans of 7 entries at a time (sequences and edge lists cross chunk ends) or of the default size
        rank_plan_exchange.CHUNK = 7 if i % 2 else 1 << 18
        rp = build_rank_plan(sig, part, pattern, **kw)
        assert_slice_equals_plan(rp, plan, rank)
        ref = RankPlan.from_plan(plan, rank)
        assert_same_state(rp.to_state(), ref.to_state())
        rounds = max(rounds, rp.temporal_rounds())
    try:
        CommunicationPlan.build(cases[0][0], cases[0][1], cases[0][2])
        patched = False
    except AssertionError:
        patched = True
    return {"cases": len(cases), "rounds": rounds, "patched": patched}


@pytest.mark.parametrize("world", [2, 4])
def test_parallel_plan_equals_central_plan(world):
    """Every rank's lists, rounds, depths and totals == its slice of the central plan, for every
    time kind, PSS / PTS / PSS-TS / random partitions, static or exchanged input halo, readout pairs;
    with CommunicationPlan.build (and its row-set helpers) made to raise inside the ranks."""
    out = spawn(_equal_worker, world)
    assert all(o["patched"] for o in out)
    assert all(o["cases"] == 2 * 5 * len(PATTERNS) for o in out)
    assert all(o["rounds"] >= 2 for o in out)  # some sequence crossed several ranks: rounds exercised


def _mismatch_worker(rank: int, world: int, case: str) -> str:
    sig = make_dynamic_signal(seed=2, T=6, V=12)
    part = partition(sig, "pss", world)
    kw: dict = {}
    if case == "partition" and rank == 1:  # rank 1 passes another partition
        part = partition(sig, "pts", world)
    if case == "bad_pairs" and rank == 0:  # rank 0 passes pairs out of range
        N = sig.num_vertex_time_nodes
        kw = {"link_pairs": (torch.tensor([0]), torch.tensor([N])), "readout_width": 2}
    elif case == "bad_pairs":
        kw = {"link_pairs": (torch.tensor([0]), torch.tensor([1])), "readout_width": 2}
    if case == "parts":
        part = Partition("random", world + 1, torch.arange(sig.num_vertex_time_nodes) % (world + 1))
    try:
        build_rank_plan(sig, part, PATTERNS[0], **kw)
    except Exception as exc:  # every rank must stop, with the cause
        return f"{type(exc).__name__}: {exc}"
    return "built"


@pytest.mark.parametrize("case,cause", [("partition", "partition"), ("bad_pairs", "link_pairs"),
                                        ("parts", "3 parts for 2 ranks")])
def test_a_set_up_error_on_one_rank_stops_every_rank(case, cause):
    out = spawn(_mismatch_worker, 2, case, timeout=60)
    assert all(o != "built" and cause in o for o in out), out


def _nccl_worker(rank: int, world: int) -> dict:
    sig = make_dynamic_signal(seed=7, T=7, V=14)
    part = partition(sig, "pss", world)
    pattern = PATTERNS[0]
    plan = CommunicationPlan.build(sig, part, pattern, link_pairs=link_pairs(sig), readout_width=2)
    rp = build_rank_plan(sig, part, pattern, link_pairs=link_pairs(sig), readout_width=2)
    assert_same_state(rp.to_state(), RankPlan.from_plan(plan, rank).to_state())
    return {"log": list(fake_nccl.LOG), "rounds": rp.temporal_rounds()}


def test_under_nccl_the_lists_go_over_the_gloo_twin():
    """A device-only (NCCL) group: every collective of the build (agreement, request lists, counts)
    runs on its gloo twin; the device-only group sees none (the stand-in records each)."""
    for out in spawn(_nccl_worker, 2, backend=fake_nccl.NAME, timeout=60):
        assert out["rounds"] >= 2
        on_device = [e for e in out["log"] if e[0] not in ("bind", "devices")]
        assert on_device == [], on_device


def test_one_process_without_a_group():
    """No process group: a one-part partition is built alone, == the central plan."""
    sig = make_dynamic_signal(seed=4, T=6, V=12)
    part = Partition("one", 1, torch.zeros(sig.num_vertex_time_nodes, dtype=torch.long))
    for pattern in PATTERNS:
        plan = CommunicationPlan.build(sig, part, pattern)
        rp = build_rank_plan(sig, part, pattern)
        assert_slice_equals_plan(rp, plan, 0)
        assert_same_state(rp.to_state(), RankPlan.from_plan(plan, 0).to_state())
    with pytest.raises(PartitionError, match="2 parts for 1 ranks"):
        build_rank_plan(sig, partition(sig, "pss", 2), PATTERNS[0])
