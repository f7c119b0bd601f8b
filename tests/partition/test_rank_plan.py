"""RankPlan: every rank's slice of the central CommunicationPlan, and its state round trip."""
from __future__ import annotations

import io

import pytest
import torch

from pyg_dynscale.errors import PartitionError, PartitionFormatError
from pyg_dynscale.partition import CommunicationPlan, partition
from pyg_dynscale.partition.rank_plan import RankPlan
from tests.helpers.rank_plans import PATTERNS, assert_same_state, assert_slice_equals_plan, link_pairs, partitions
from tests.helpers.signals import make_dynamic_signal


def round_trip(rp: RankPlan) -> RankPlan:
    buf = io.BytesIO()
    torch.save(rp.to_state(), buf)
    buf.seek(0)
    return RankPlan.from_state(torch.load(buf, weights_only=True))


@pytest.mark.parametrize("seed,R", [(0, 2), (1, 3), (2, 4)])
def test_every_rank_slice_equals_central_plan(seed, R):
    sig = make_dynamic_signal(seed=seed, T=8, V=16)
    pairs = link_pairs(sig, seed)
    rounds_seen = 0
    for part in partitions(sig, R):
        for pattern in PATTERNS:
            for kw in ({}, {"input_halo": "exchange"}, {"link_pairs": pairs, "readout_width": 3}):
                plan = CommunicationPlan.build(sig, part, pattern, **kw)
                rounds_seen = max(rounds_seen, plan.temporal_rounds())
                for r in range(R):
                    rp = RankPlan.from_plan(plan, r)
                    assert_slice_equals_plan(rp, plan, r)
                    back = round_trip(rp)
                    assert_slice_equals_plan(back, plan, r)
                    assert_same_state(back.to_state(), rp.to_state())
    assert rounds_seen >= 2  # PSS cut some sequence: rounds really exercised


def test_slices_partition_the_plan_rows():
    """Together the ranks' send lists are the plan's rows, and every row sent is received once."""
    sig = make_dynamic_signal(seed=3, T=8, V=16)
    R = 3
    part = partitions(sig, R)[4]  # random with a time owner: every phase present
    plan = CommunicationPlan.build(sig, part, PATTERNS[0], link_pairs=link_pairs(sig), readout_width=2)
    slices = [RankPlan.from_plan(plan, r) for r in range(R)]
    for i, e in enumerate(plan):
        sent = {(r, d, int(g)) for r, rp in enumerate(slices) for d in range(R)
                for g in rp.exchanges[i].send_index(r, d)}
        recv = {(s, r, int(g)) for r, rp in enumerate(slices) for s in range(R)
                for g in rp.exchanges[i].send_index(s, r)}
        rows = set(zip(e.src.tolist(), e.dst.tolist(), e.gid.tolist()))
        assert sent == recv == rows and e.num_rows > 0


def test_slice_refuses_other_ranks_and_bad_input():
    sig = make_dynamic_signal(seed=0, T=6, V=12)
    plan = CommunicationPlan.build(sig, partition(sig, "pss", 2), PATTERNS[0])
    rp = RankPlan.from_plan(plan, 1)
    with pytest.raises(PartitionError, match="rank 1's lists, not rank 0's"):
        rp.exchanges[0].send_list(0)
    with pytest.raises(PartitionError, match="rank 1's lists"):
        rp.exchanges[0].recv_list(0)
    for bad in (2, -1, True, 0.0):
        with pytest.raises(PartitionError, match="rank"):
            RankPlan.from_plan(plan, bad)
    with pytest.raises(PartitionError, match="not time-owned by rank 1"):
        rp.depth_of((plan.temporal_owner == 0).nonzero().flatten())
    with pytest.raises(PartitionError, match="no exchange"):
        rp.exchange(0, "readout")
    att = RankPlan.from_plan(CommunicationPlan.build(sig, partition(sig, "pss", 2), PATTERNS[1]), 0)
    with pytest.raises(PartitionError, match="not recurrent"):
        att.rounds(0)
    with pytest.raises(PartitionError, match="no recurrent block"):
        CommunicationPlan.build(sig, partition(sig, "pss", 2), PATTERNS[1]).depth_of(torch.arange(3))


def test_state_is_plain_and_refuses_corruption():
    sig = make_dynamic_signal(seed=1, T=6, V=12)
    plan = CommunicationPlan.build(sig, partition(sig, "pss", 3), PATTERNS[0])
    state = RankPlan.from_plan(plan, 2).to_state()

    def plain(x):
        if isinstance(x, dict):
            return all(isinstance(k, str) and plain(v) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return all(plain(v) for v in x)
        return x is None or isinstance(x, (bool, int, float, str, torch.Tensor))

    assert plain(state)
    with pytest.raises(PartitionFormatError, match="not a rank plan state"):
        RankPlan.from_state({**state, "format": "x"})
    with pytest.raises(PartitionFormatError, match="version"):
        RankPlan.from_state({**state, "version": 99})
    ex = dict(state["exchanges"][-1])
    ex["send_gid"] = ex["send_gid"][:-1] if ex["send_gid"].numel() else torch.zeros(1, dtype=torch.long)
    with pytest.raises(PartitionFormatError, match="disagree"):
        RankPlan.from_state({**state, "exchanges": state["exchanges"][:-1] + [ex]})
    with pytest.raises(PartitionFormatError, match="lacks the field 'recv_gid'"):
        RankPlan.from_state({**state, "exchanges": [{k: v for k, v in state["exchanges"][0].items() if k != "recv_gid"}]})
    with pytest.raises(PartitionFormatError, match="q_gid, q_depth"):
        RankPlan.from_state({**state, "q_depth": state["q_depth"][:-1]})
    with pytest.raises(PartitionFormatError, match="rounds other than"):
        RankPlan.from_state({**state, "temporal_rounds": state["temporal_rounds"] + 1})
    with pytest.raises(PartitionFormatError, match="malformed"):
        RankPlan.from_state({k: v for k, v in state.items() if k != "q_depth"})
