"""CommunicationPlan vs an independent brute-force count (loops in the test only)."""
from __future__ import annotations

import itertools

import pytest
import torch

from tests.helpers.signals import make_dynamic_signal
from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import (
    BlockPattern, CommunicationPlan, DependencyPattern, Partition, partition,
)
from tests.helpers.partition_inputs import PRESETS

KINDS = ("spatial", "temporal", "redistribution", "readout")


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


def sequences(node):
    """{vertex: [gid, ...] in time order}."""
    seqs: dict[int, list[int]] = {}
    for g, (v, t) in enumerate(node):
        seqs.setdefault(v, []).append(g)
    for v in seqs:
        seqs[v].sort(key=lambda g: node[g][1])
    return seqs


def brute_rows(sig, part, pattern, input_halo="load"):
    """{(block, phase): (set of (src rank, dst rank, gid), width, kind, static)} by definition.
    Static: block 0's first spatial layer (raw input features) with ``input_halo="load"``."""
    node, edges = raw_graph(sig)
    own = part.owner.tolist()
    town = part.temporal_owner.tolist()
    seqs = sequences(node)
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
                out[(bi, "redistribution_back")] = ({(town[g], own[g], g) for g in moved}, blk.input_width, "redistribution", False)
            out[(bi, "redistribution")] = ({(own[g], town[g], g) for g in moved}, blk.redistribution_width, "redistribution", False)
        for l, w in enumerate(blk.spatial_widths):
            out[(bi, f"spatial:{l}")] = (spatial, w, "spatial", bi == 0 and l == 0 and input_halo == "load")
        if blk.time_kind != "none":
            out[(bi, "temporal")] = (recurrent if blk.time_kind == "recurrent" else attention, blk.time_width, "temporal", False)
    return out


def brute_depth(sig, town):
    """[N] recurrent round of every node: walking each vertex's sequence in
    time order, the number of time-owner changes before it."""
    node, _ = raw_graph(sig)
    depth = [0] * len(node)
    for gs in sequences(node).values():
        d = 0
        for a, b in zip(gs, gs[1:]):
            d += town[a] != town[b]
            depth[b] = d
    return depth


def rows_of(e):
    return set(zip(e.src.tolist(), e.dst.tolist(), e.gid.tolist()))


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
    for part, pattern, halo in itertools.product(all_partitions(sig, R), PRESETS, ("load", "exchange")):
        plan = (CommunicationPlan.build(sig, part, pattern) if halo == "load"  # the default
                else CommunicationPlan.build(sig, part, pattern, input_halo=halo))
        expect = brute_rows(sig, part, pattern, halo)
        assert {(e.block, e.phase) for e in plan} == set(expect), (part.scheme, pattern.name)
        bpe = pattern.bytes_per_element
        tot = {k: 0 for k in KINDS}
        rows_fwd = {k: 0 for k in KINDS}
        load = 0
        matrix = torch.zeros(R, R, dtype=torch.long)
        for e in plan:
            rows, width, kind, static = expect[(e.block, e.phase)]
            assert rows_of(e) == rows, (part.scheme, pattern.name, e.phase)
            assert e.num_rows == len(rows)  # deduplicated
            assert e.width == width and e.kind == kind and e.static == static
            once = len(rows) * width * bpe
            if static:  # raw features: moved once before training, no gradient
                load += once
                assert (e.forward_bytes, e.backward_bytes, e.load_bytes) == (0, 0, once)
            else:
                tot[kind] += 2 * once
                rows_fwd[kind] += len(rows)
                assert (e.forward_bytes, e.backward_bytes, e.load_bytes) == (once, once, 0)
                for a, c, _ in rows:
                    matrix[a, c] += 2 * width * bpe
        b = plan.bytes_by_kind()
        assert b == {**tot, "total": sum(tot.values())}
        assert b["readout"] == 0  # no link_pairs
        f = plan.bytes_by_kind(forward_only=True)
        assert all(2 * f[k] == b[k] for k in b)
        assert torch.equal(plan.traffic_matrix(), matrix)
        assert int(plan.traffic_matrix().sum()) == b["total"]
        assert plan.rows_by_kind() == rows_fwd
        assert plan.load_bytes() == load
        d = plan.to_dict()
        assert d["bytes"] == b and d["load_bytes"] == load
        assert [x["static"] for x in d["exchanges"]] == [e.static for e in plan]


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
    plan = CommunicationPlan.build(sig, pss, pat)
    assert plan.bytes_by_kind() == {"spatial": 0, "temporal": 2 * 2 * 3 * 4, "redistribution": 0, "readout": 0, "total": 48}
    assert plan.load_bytes() == 0  # no spatial edge is cut
    pts = Partition("x", 2, torch.tensor([0, 1, 0, 1]))
    # the two cut edges 1 -> 0 need vertex 1's raw features on rank 0: 2 rows of 10 floats, loaded once
    plan = CommunicationPlan.build(sig, pts, pat)
    assert plan.bytes_by_kind() == {"spatial": 0, "temporal": 0, "redistribution": 0, "readout": 0, "total": 0}
    assert plan.load_bytes() == 2 * 10 * 4 and plan.rows_by_kind()["spatial"] == 0
    assert plan.traffic_matrix().tolist() == [[0, 0], [0, 0]]
    plan = CommunicationPlan.build(sig, pts, pat, input_halo="exchange")  # every epoch, with gradients
    assert plan.bytes_by_kind()["spatial"] == 2 * 2 * 10 * 4 and plan.bytes_by_kind()["temporal"] == 0
    assert plan.load_bytes() == 0 and plan.traffic_matrix().tolist() == [[0, 0], [160, 0]]  # rank 1 -> rank 0
    # a second spatial layer moves per epoch either way
    pat2 = DependencyPattern((BlockPattern((10, 6), "recurrent", 3),), 4)
    b = CommunicationPlan.build(sig, pts, pat2).bytes_by_kind()
    assert b["spatial"] == 2 * 2 * 6 * 4 == b["total"]


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


# ----------------------------------------------------------------- static input halo
def test_static_input_halo_is_block0_first_spatial_layer_only():
    """``input_halo="load"`` (default) marks exactly block 0's ``spatial:0``
    static: same rows as with ``"exchange"``, but loaded once (``load_bytes``)
    instead of moved forward and backward every epoch. ``"exchange"`` is the
    old definition: every exchange counts ``2 * rows * width * bpe``."""
    sig = make_dynamic_signal(seed=3, T=7, V=14)
    with_rows = 0
    for part, pattern in itertools.product(all_partitions(sig, 3), PRESETS):
        load = CommunicationPlan.build(sig, part, pattern, input_halo="load")
        exch = CommunicationPlan.build(sig, part, pattern, input_halo="exchange")
        bpe = pattern.bytes_per_element
        want = [(0, "spatial:0")] if pattern.blocks[0].spatial_widths else []
        assert [(e.block, e.phase) for e in load if e.static] == want, pattern.name
        assert not any(e.static for e in exch)
        # the same exchanges, rows and widths: the static one still says which rows to load
        assert [(e.block, e.phase, e.kind, e.width) for e in load] == [(e.block, e.phase, e.kind, e.width) for e in exch]
        for a, c in zip(load, exch):
            assert torch.equal(a.src, c.src) and torch.equal(a.dst, c.dst) and torch.equal(a.gid, c.gid)
        eb = exch.bytes_by_kind()
        assert eb["total"] == sum(2 * e.num_rows * e.width * bpe for e in exch)
        for k in KINDS:
            assert eb[k] == sum(2 * e.num_rows * e.width * bpe for e in exch if e.kind == k)
        assert exch.load_bytes() == 0
        lb = load.bytes_by_kind()
        if want:
            e0 = load.exchange(0, "spatial:0")
            once = e0.num_rows * e0.width * bpe
            with_rows += once > 0
            assert load.load_bytes() == e0.load_bytes == e0.row_bytes == once
            assert e0.forward_bytes == e0.backward_bytes == 0
            assert lb == {**eb, "spatial": eb["spatial"] - 2 * once, "total": eb["total"] - 2 * once}
            assert torch.equal(load.traffic_matrix(), exch.traffic_matrix() - 2 * e0.counts() * e0.width * bpe)
            assert load.rows_by_kind() == {**exch.rows_by_kind(), "spatial": exch.rows_by_kind()["spatial"] - e0.num_rows}
        else:  # block 0 has no spatial layer: nothing is loaded, block 1's spatial:0 moves per epoch
            assert load.load_bytes() == 0 and lb == eb
            assert any(e.kind == "spatial" and e.forward_bytes > 0 for e in load) or eb["spatial"] == 0
    assert with_rows >= 20  # the halo is not empty in most cases: load_bytes() == 0 cannot pass
    with pytest.raises(PartitionError, match="input_halo"):
        CommunicationPlan.build(sig, partition(sig, "pts", 2), PRESETS[0], input_halo="once")


# ----------------------------------------------------------------- readout
def brute_readout(town, src, dst):
    """{(time owner of d, time owner of s, d)} over the pairs whose ends have
    different time owners: the loss of (s, d) needs d's final row on s's rank."""
    return {(town[d], town[s], d) for s, d in zip(src, dst) if town[s] != town[d]}


def test_readout_phase_equals_brute_force():
    sig = make_dynamic_signal(seed=6, T=7, V=14)
    N = sig.num_vertex_time_nodes
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, N, (60,), generator=g)
    dst = torch.randint(0, N, (60,), generator=g)
    # repeated pairs, and one destination wanted by several sources
    src = torch.cat([src, src[:10], torch.arange(8)])
    dst = torch.cat([dst, dst[:10], torch.full((8,), N - 1)])
    pattern = PRESETS[1]  # two blocks
    bpe = pattern.bytes_per_element
    deduped = 0
    for part in all_partitions(sig, 3):
        town = part.temporal_owner.tolist()
        base = CommunicationPlan.build(sig, part, pattern)
        plan = CommunicationPlan.build(sig, part, pattern, link_pairs=(src, dst), readout_width=5)
        ro = [e for e in plan if e.kind == "readout"]
        assert len(ro) == 1 and plan.exchanges[-1] is ro[0]  # one phase, after the last block
        e = ro[0]
        assert (e.block, e.phase, e.width, e.static) == (pattern.num_blocks - 1, "readout", 5, False)
        assert plan.exchange(pattern.num_blocks - 1, "readout") is e
        rows = brute_readout(town, src.tolist(), dst.tolist())
        assert rows_of(e) == rows and e.num_rows == len(rows)
        deduped += sum(town[s] != town[d] for s, d in zip(src.tolist(), dst.tolist())) - len(rows)
        for a in range(3):
            for c in range(3):
                assert e.send_index(a, c).tolist() == sorted(x for (p, q, x) in rows if (p, q) == (a, c))
        # everything else is the plan without link pairs
        assert [(x.block, x.phase) for x in plan.exchanges[:-1]] == [(x.block, x.phase) for x in base]
        b, b0 = plan.bytes_by_kind(), base.bytes_by_kind()
        assert b0["readout"] == 0 and b["readout"] == 2 * len(rows) * 5 * bpe
        assert {k: v for k, v in b.items() if k not in ("readout", "total")} == {k: v for k, v in b0.items() if k not in ("readout", "total")}
        assert b["total"] == b0["total"] + b["readout"]
        assert plan.rows_by_kind()["readout"] == len(rows)
        assert int(plan.traffic_matrix().sum()) == b["total"]
    assert deduped > 0  # some pairs shared a (source rank, destination rank, row)
    # no pairs: an empty readout phase
    empty = torch.zeros(0, dtype=torch.long)
    plan = CommunicationPlan.build(sig, partition(sig, "pss", 3), pattern, link_pairs=(empty, empty), readout_width=5)
    assert plan.exchange(pattern.num_blocks - 1, "readout").num_rows == 0 and plan.bytes_by_kind()["readout"] == 0


def test_readout_rejects_bad_link_pairs():
    sig = make_dynamic_signal(seed=6, T=7, V=14)
    N = sig.num_vertex_time_nodes
    part = partition(sig, "pss", 3)
    pat = PRESETS[0]
    a = torch.arange(4)
    for bad in ((a, a[:3]), (a.view(2, 2), a.view(2, 2)), (a - 1, a), (a, a + N - 3)):
        with pytest.raises(PartitionError, match="link_pairs"):
            CommunicationPlan.build(sig, part, pat, link_pairs=bad, readout_width=2)
    for w in (0, -3):
        with pytest.raises(PartitionError, match="readout_width"):
            CommunicationPlan.build(sig, part, pat, link_pairs=(a, a + 1), readout_width=w)
    with pytest.raises(PartitionError, match="readout_width"):
        CommunicationPlan.build(sig, part, pat, link_pairs=(a, a + 1))  # the default width 0


# ----------------------------------------------------------------- time_kind="none"
def test_time_kind_none_has_no_temporal_phase():
    """PyGT's MPNN-LSTM (``time_kind="none"``): nothing crosses snapshots,
    even where the recurrent form (DGC's MPNN-LSTM) moves states."""
    sig = make_dynamic_signal(seed=1, T=7, V=14)
    sg = sig.supergraph()
    u, v = sg.temporal_edge_index
    pygt = DependencyPattern.preset("mpnnlstm-pygt", 3, 4)
    dgc = DependencyPattern.preset("mpnnlstm", 3, 4)
    assert pygt.blocks[0].time_kind == "none" and pygt.temporal_edge_weight() == 0
    mixed = DependencyPattern((BlockPattern((3,), "none", 0, 5), BlockPattern((5,), "recurrent", 4)), 4, "none-then-gru")
    cut_cases = 0
    for part in all_partitions(sig, 3):
        town = part.temporal_owner
        cut = bool((town[u] != town[v]).any())
        cut_cases += cut
        plan = CommunicationPlan.build(sig, part, pygt)
        redis = [(0, "redistribution")] if part.time_owner is not None else []
        assert [(e.block, e.phase) for e in plan] == [(0, "spatial:0"), (0, "spatial:1")] + redis
        assert not plan.has(0, "temporal") and not any(e.kind == "temporal" for e in plan)
        assert plan.bytes_by_kind()["temporal"] == 0 and plan.rows_by_kind()["temporal"] == 0
        assert plan.depth is None and plan.temporal_rounds() == 0
        with pytest.raises(PartitionError, match="phase"):
            plan.rounds(0)
        if part.time_owner is not None:  # PSS-TS moves [H_1 || H_2 || X]
            assert plan.exchange(0, "redistribution").width == 2 * 4 + 3
        d = CommunicationPlan.build(sig, part, dgc)
        assert d.has(0, "temporal") and (d.bytes_by_kind()["temporal"] > 0) == cut
        m = CommunicationPlan.build(sig, part, mixed)
        assert not m.has(0, "temporal") and m.has(1, "temporal")
        assert rows_of(m.exchange(1, "temporal")) == brute_rows(sig, part, mixed)[(1, "temporal")][0]
    assert cut_cases >= 4


# ----------------------------------------------------------------- recurrent rounds
def test_recurrent_rounds_split_the_temporal_exchange_by_depth():
    """PSS on 3 ranks: a sequence crossing all three ranks is scanned in 3
    rounds; round k sends the states the depth-k pieces end with."""
    sig = make_dynamic_signal(seed=0, T=7, V=14)
    pattern = DependencyPattern.preset("tgcn", 3, 5, num_blocks=2)  # two recurrent blocks
    node, _ = raw_graph(sig)
    seqs = sequences(node)
    g = torch.Generator().manual_seed(4)
    N = sig.num_vertex_time_nodes
    rnd = Partition("random", 3, torch.randint(0, 3, (N,), generator=g))
    for part in (partition(sig, "pss", 3), partition(sig, "pss", 3, balanced=True), rnd):
        plan = CommunicationPlan.build(sig, part, pattern)
        town = part.temporal_owner.tolist()
        depth = brute_depth(sig, town)
        assert plan.depth.tolist() == depth
        assert plan.temporal_rounds() == max(depth) + 1
        if part.scheme == "pss":
            assert max(depth) == 2  # some vertex lives on all 3 ranks (PSS: at most R - 1)
        # by definition: round k sends u -> v for consecutive appearances u, v
        # with different time owners, u at depth k
        by_round: dict[int, set] = {}
        for gs in seqs.values():
            for a, b in zip(gs, gs[1:]):
                if town[a] != town[b]:
                    by_round.setdefault(depth[a], set()).add((town[a], town[b], a))
        for blk in range(pattern.num_blocks):
            temporal = plan.exchange(blk, "temporal")
            rounds = plan.rounds(blk)
            assert len(rounds) == len(by_round) == (max(by_round) + 1 if by_round else 0)
            union: set = set()
            total = torch.zeros(3, 3, dtype=torch.long)
            for k, r in enumerate(rounds):
                rows = rows_of(r)
                assert rows == by_round[k] and r.num_rows == len(rows) > 0
                assert all(depth[x] == k for x in r.gid.tolist())
                assert (r.block, r.phase, r.kind, r.width, r.static) == (blk, f"temporal:{k}", "temporal", temporal.width, False)
                assert rows.isdisjoint(union)
                union |= rows
                for a in range(3):
                    assert r.send_list(a)[0].tolist() == [x for (p, q, x) in sorted(rows) if p == a]
                    for c in range(3):
                        assert r.send_index(a, c).tolist() == sorted(x for (p, q, x) in rows if (p, q) == (a, c))
                total += r.counts()
            assert union == rows_of(temporal)
            assert torch.equal(total, temporal.counts())
    # whole sequences on one time owner: one round, nothing to send
    for part in (partition(sig, "pts", 3), partition(sig, "pss-ts", 3)):
        plan = CommunicationPlan.build(sig, part, pattern)
        assert plan.temporal_rounds() == 1 and int(plan.depth.max()) == 0
        assert plan.rounds(0) == [] and plan.exchange(0, "temporal").num_rows == 0
    # attention blocks have no rounds
    att = CommunicationPlan.build(sig, partition(sig, "pss", 3), PRESETS[3])
    assert att.temporal_rounds() == 0
    with pytest.raises(PartitionError, match="recurrent"):
        att.rounds(0)
