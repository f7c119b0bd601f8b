"""RankPlan: every rank's slice of the central CommunicationPlan, and its state round trip."""
from __future__ import annotations

import io

import pytest
import torch

from pyg_dynscale.errors import PartitionError, PartitionFormatError
from pyg_dynscale.partition import BlockPattern, CommunicationPlan, DependencyPattern, Partition, partition
from pyg_dynscale.partition.rank_plan import RankPlan
from tests.helpers.signals import make_dynamic_signal

#: recurrent (TGCN, two blocks), attention (DySAT), window band (TM-GCN), none, and a mix
PATTERNS = [
    DependencyPattern.preset("tgcn", 3, 5, gcn_layers=2, num_blocks=2),
    DependencyPattern.preset("dysat", 3, 6, num_blocks=2, gat_layers=2),
    DependencyPattern.preset("tmgcn", 3, 4, num_blocks=2, band=3),
    DependencyPattern.preset("mpnnlstm", 3, 4),
    DependencyPattern((BlockPattern((7,), "attention", 2, 9), BlockPattern((), "recurrent", 3)), 2, "mixed"),
]


def partitions(sig, R):
    """PSS (cuts sequences: several rounds), PTS, PSS-TS (a time owner), and random ones."""
    g = torch.Generator().manual_seed(10 + R)
    N = sig.num_vertex_time_nodes
    return [partition(sig, "pss", R), partition(sig, "pts", R), partition(sig, "pss-ts", R),
            Partition("random", R, torch.randint(0, R, (N,), generator=g)),
            Partition("random-ts", R, torch.randint(0, R, (N,), generator=g),
                      time_owner=torch.randint(0, R, (N,), generator=g))]


def link_pairs(sig, seed=0):
    N = sig.num_vertex_time_nodes
    g = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, N, (50,), generator=g), torch.randint(0, N, (50,), generator=g)
    return torch.cat([src, src[:5]]), torch.cat([dst, dst[:5]])  # repeated pairs


def assert_slice_equals_plan(rp: RankPlan, plan: CommunicationPlan, r: int) -> None:
    """Lists, order, metadata, totals and rounds of rank r's slice == the central plan's."""
    assert (rp.rank, rp.world, rp.num_nodes, rp.scheme) == (r, plan.num_parts, plan.num_nodes, plan.scheme)
    assert rp.pattern == plan.pattern
    assert len(rp) == len(plan)
    for a, e in zip(rp, plan):
        assert (a.block, a.phase, a.kind, a.width, a.static, a.bpe) == (e.block, e.phase, e.kind, e.width, e.static,
                                                                         e.bytes_per_element)
        assert rp.exchange(e.block, e.phase) is a and rp.has(e.block, e.phase)
        sg, ss = a.send_list(r)
        eg, es = e.send_list(r)
        assert torch.equal(sg, eg) and ss == es
        rg, rs = a.recv_list(r)
        eg, es = e.recv_list(r)
        assert torch.equal(rg, eg) and rs == es
        for o in range(plan.num_parts):
            assert torch.equal(a.send_index(r, o), e.send_index(r, o))
            assert torch.equal(a.send_index(o, r), e.send_index(o, r))
        assert torch.equal(a.counts(), e.counts())
        assert (a.num_rows, a.row_bytes, a.forward_bytes, a.backward_bytes, a.load_bytes, a.forward_bytes_total) == \
            (e.num_rows, e.row_bytes, e.forward_bytes, e.backward_bytes, e.load_bytes, e.forward_bytes)
        assert a.to_dict() == e.to_dict()
    assert rp.bytes_by_kind() == plan.bytes_by_kind()
    assert rp.bytes_by_kind(forward_only=True) == plan.bytes_by_kind(forward_only=True)
    assert rp.rows_by_kind() == plan.rows_by_kind()
    assert rp.load_bytes() == plan.load_bytes()
    assert torch.equal(rp.traffic_matrix(), plan.traffic_matrix())
    assert rp.temporal_rounds() == plan.temporal_rounds()
    assert {k: v for k, v in rp.to_dict().items() if k != "rank"} == plan.to_dict()
    Q = (plan.temporal_owner == r).nonzero().flatten()
    for b, blk in enumerate(plan.pattern.blocks):
        if blk.time_kind != "recurrent":
            continue
        mine, whole = rp.rounds(b), plan.rounds(b)
        assert len(mine) == len(whole) == plan.temporal_rounds() - 1
        for a, e in zip(mine, whole):
            assert (a.block, a.phase, a.width, a.kind) == (e.block, e.phase, e.width, e.kind)
            assert torch.equal(a.send_list(r)[0], e.send_list(r)[0]) and a.send_list(r)[1] == e.send_list(r)[1]
            assert torch.equal(a.recv_list(r)[0], e.recv_list(r)[0]) and a.recv_list(r)[1] == e.recv_list(r)[1]
            assert torch.equal(a.counts(), e.counts())
    if plan.depth is not None:
        assert torch.equal(rp.depth_of(Q), plan.depth_of(Q))
        assert torch.equal(plan.depth_of(Q), plan.depth[Q])
        perm = torch.randperm(Q.numel(), generator=torch.Generator().manual_seed(r))
        assert torch.equal(rp.depth_of(Q[perm]), plan.depth[Q[perm]])  # any order
    else:
        with pytest.raises(PartitionError, match="no recurrent block"):
            rp.depth_of(Q)


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
                    assert_slice_equals_plan(round_trip(rp), plan, r)
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
    with pytest.raises(PartitionFormatError, match="malformed"):
        RankPlan.from_state({k: v for k, v in state.items() if k != "depth"})
