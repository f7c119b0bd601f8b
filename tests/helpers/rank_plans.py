"""What the rank-plan tests share: patterns of every time kind, partitions of every kind, and the
comparisons of a RankPlan with the central CommunicationPlan (tests/partition/test_rank_plan.py,
tests/distributed/test_rank_plan_exchange.py)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import BlockPattern, CommunicationPlan, DependencyPattern, Partition, partition
from pyg_dynscale.partition.rank_plan import RankPlan

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
    """Random labelled pairs, some repeated."""
    N = sig.num_vertex_time_nodes
    g = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, N, (50,), generator=g), torch.randint(0, N, (50,), generator=g)
    return torch.cat([src, src[:5]]), torch.cat([dst, dst[:5]])


def assert_slice_equals_plan(rp: RankPlan, plan: CommunicationPlan, r: int) -> None:
    """Lists, order, metadata, totals and rounds of rank r's plan == the central plan's."""
    assert (rp.rank, rp.world, rp.num_nodes, rp.scheme) == (r, plan.num_parts, plan.num_nodes, plan.scheme)
    assert rp.pattern == plan.pattern
    assert len(rp) == len(plan)
    for a, e in zip(rp, plan):
        assert (a.block, a.phase, a.kind, a.width, a.static, a.bpe) == (e.block, e.phase, e.kind, e.width, e.static,
                                                                         e.bytes_per_element)
        assert rp.exchange(e.block, e.phase) is a and rp.has(e.block, e.phase)
        sg, ss = a.send_list(r)
        eg, es = e.send_list(r)
        assert torch.equal(sg, eg) and ss == es, (e.block, e.phase)
        rg, rs = a.recv_list(r)
        eg, es = e.recv_list(r)
        assert torch.equal(rg, eg) and rs == es, (e.block, e.phase)
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
            assert (a.block, a.phase, a.width, a.kind, a.static) == (e.block, e.phase, e.width, e.kind, e.static)
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


def assert_same_state(a, b, where="state") -> None:
    """Two ``to_state()`` values equal exactly: same keys, values, tensors (dtype and elements)."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same_state(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    else:
        assert a == b, where
