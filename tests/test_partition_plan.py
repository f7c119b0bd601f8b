"""CommunicationPlan vs an independent brute-force count (loops in the test only)."""
from __future__ import annotations

import itertools

import pytest
import torch

from tests.conftest import make_dynamic_signal
from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import (
    BlockPattern, CommunicationPlan, DependencyPattern, Partition, partition,
)

PRESETS = [
    DependencyPattern.preset("tgcn", 3, 5),
    DependencyPattern.preset("tgcn", 3, 5, gcn_layers=2, num_blocks=2),
    DependencyPattern.preset("mpnnlstm", 3, 4),
    DependencyPattern.preset("dysat", 3, 6, num_blocks=2, gat_layers=2),
    DependencyPattern.preset("gconvgru", 3, 4, K=3),
    DependencyPattern((BlockPattern((7,), "attention", 2, 9), BlockPattern((), "recurrent", 3)), 2, "mixed"),
]


def raw_graph(sig):
    """(list of (vertex, t) per gid, list of (src gid, dst gid)) straight from the signal's storage."""
    ptr = sig.node_ptr.tolist()
    eptr = sig.edge_ptr.tolist()
    node = [(int(sig.node_id[g]), t) for t in range(len(ptr) - 1) for g in range(ptr[t], ptr[t + 1])]
    edges = []
    for t in range(len(ptr) - 1):
        for e in range(eptr[t], eptr[t + 1]):
            edges.append((ptr[t] + int(sig.edge_index[0, e]), ptr[t] + int(sig.edge_index[1, e])))
    return node, edges


def brute_rows(sig, part, pattern):
    """{(block, phase): set of (src rank, dst rank, gid)} by definition."""
    node, edges = raw_graph(sig)
    own = part.owner.tolist()
    town = part.temporal_owner.tolist()
    seqs: dict[int, list[int]] = {}
    for g, (v, t) in enumerate(node):
        seqs.setdefault(v, []).append(g)
    for v in seqs:
        seqs[v].sort(key=lambda g: node[g][1])
    spatial = {(own[s], own[d], s) for s, d in edges if own[s] != own[d]}
    recurrent = set()
    attention = set()
    for gs in seqs.values():
        for a, b in zip(gs, gs[1:]):
            if town[a] != town[b]:
                recurrent.add((town[a], town[b], a))
        for j, b in enumerate(gs):
            for a in gs[:j]:
                if town[a] != town[b]:
                    attention.add((town[a], town[b], a))
    moved = [g for g in range(len(node)) if own[g] != town[g]]
    out = {}
    for bi, blk in enumerate(pattern.blocks):
        if part.time_owner is not None:
            if bi > 0:
                out[(bi, "redistribution_back")] = ({(town[g], own[g], g) for g in moved}, blk.input_width, "redistribution")
            out[(bi, "redistribution")] = ({(own[g], town[g], g) for g in moved}, blk.redistribution_width, "redistribution")
        for l, w in enumerate(blk.spatial_widths):
            out[(bi, f"spatial:{l}")] = (spatial, w, "spatial")
        out[(bi, "temporal")] = (recurrent if blk.time_kind == "recurrent" else attention, blk.time_width, "temporal")
    return out


def all_partitions(sig, R):
    parts = [partition(sig, s, R, balanced=b) for s in ("pss", "pts", "pss-ts") for b in (False, True)]
    g = torch.Generator().manual_seed(R)
    N = sig.num_vertex_time_nodes
    parts.append(Partition("random", R, torch.randint(0, R, (N,), generator=g)))
    parts.append(Partition("random-ts", R, torch.randint(0, R, (N,), generator=g),
                           time_owner=torch.randint(0, R, (N,), generator=g)))
    return parts


@pytest.mark.parametrize("seed,R", [(0, 2), (1, 3), (2, 4)])
def test_plan_equals_brute_force(seed, R):
    sig = make_dynamic_signal(seed=seed, T=7, V=14)
    for part, pattern in itertools.product(all_partitions(sig, R), PRESETS):
        plan = CommunicationPlan.build(sig, part, pattern)
        expect = brute_rows(sig, part, pattern)
        assert {(e.block, e.phase) for e in plan} == set(expect), (part.scheme, pattern.name)
        tot = {"spatial": 0, "temporal": 0, "redistribution": 0}
        for e in plan:
            rows, width, kind = expect[(e.block, e.phase)]
            got = set(zip(e.src.tolist(), e.dst.tolist(), e.gid.tolist()))
            assert got == rows, (part.scheme, pattern.name, e.phase)
            assert e.num_rows == len(rows)  # deduplicated
            assert e.width == width and e.kind == kind
            tot[kind] += 2 * len(rows) * width * pattern.bytes_per_element
        b = plan.bytes_by_kind()
        assert b == {**tot, "total": sum(tot.values())}
        f = plan.bytes_by_kind(forward_only=True)
        assert all(2 * f[k] == b[k] for k in b)
        assert int(plan.traffic_matrix().sum()) == b["total"]


def test_send_recv_lists_simulate_all_to_all():
    sig = make_dynamic_signal(seed=5, T=6, V=15)
    R = 3
    pattern = DependencyPattern.preset("dysat", 2, 3, num_blocks=2)
    for part in all_partitions(sig, R):
        plan = CommunicationPlan.build(sig, part, pattern)
        expect = brute_rows(sig, part, pattern)
        for e in plan:
            rows = expect[(e.block, e.phase)][0]
            sends = [e.send_list(s) for s in range(R)]
            for s, (gids, splits) in enumerate(sends):
                assert sum(splits) == gids.numel()
                chunks = torch.split(gids, splits)
                for d in range(R):
                    assert torch.equal(chunks[d], e.send_index(s, d))
                    assert bool((chunks[d][1:] > chunks[d][:-1]).all())  # sorted, unique
                    # the sender owns what it sends
                    assert set(chunks[d].tolist()) == {g for (a, b, g) in rows if a == s and b == d}
            for d in range(R):
                gids, splits = e.recv_list(d)
                # all_to_all_single: rank d receives source chunks in source order
                expected = torch.cat([torch.split(sends[s][0], sends[s][1])[d] for s in range(R)])
                assert torch.equal(gids, expected)
                assert splits == [int(e.counts()[s, d]) for s in range(R)]


def test_plan_specific_values():
    # 2 snapshots, vertices {0,1} then {0,1}; edges 1->0 in both; PSS puts t=0 on rank 0, t=1 on rank 1.
    from pyg_dynscale import DynamicGraphSignal
    sig = DynamicGraphSignal.from_tensors(node_ptr=torch.tensor([0, 2, 4]), edge_index=torch.tensor([[1, 1], [0, 0]]),
                                          edge_ptr=torch.tensor([0, 1, 2]), node_id=torch.tensor([0, 1, 0, 1]))
    pat = DependencyPattern((BlockPattern((10,), "recurrent", 3),), 4)
    pss = partition(sig, "pss", 2)
    assert pss.owner.tolist() == [0, 0, 1, 1]
    b = CommunicationPlan.build(sig, pss, pat).bytes_by_kind()
    assert b == {"spatial": 0, "temporal": 2 * 2 * 3 * 4, "redistribution": 0, "total": 48}
    pts = Partition("x", 2, torch.tensor([0, 1, 0, 1]))
    b = CommunicationPlan.build(sig, pts, pat).bytes_by_kind()
    assert b["spatial"] == 2 * 2 * 10 * 4 and b["temporal"] == 0


def test_plan_rejects_bad_inputs():
    sig = make_dynamic_signal(seed=0)
    part = Partition("x", 2, torch.zeros(3, dtype=torch.long))
    with pytest.raises(PartitionError, match="owner"):
        CommunicationPlan.build(sig, part, PRESETS[0])
    good = partition(sig, "pts", 2)
    with pytest.raises(PartitionError, match="pattern"):
        CommunicationPlan.build(sig, good, "tgcn")
    plan = CommunicationPlan.build(sig, good, PRESETS[0])
    with pytest.raises(PartitionError, match="phase"):
        plan.exchange(0, "spatial:7")
    d = plan.to_dict()
    assert d["bytes"]["total"] == plan.bytes_by_kind()["total"]
