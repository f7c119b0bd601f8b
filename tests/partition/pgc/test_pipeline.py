"""PGC: label propagation (DGC §4.1), chunk assignment (Algorithm 1) and partition_pgc."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import (
    BlockPattern, CommunicationPlan, DependencyPattern, partition, partition_pss, partition_pts,
)
from pyg_dynscale.partition.pgc.assign import ChunkGraph, assign_chunks, divergence, rank_loads, refine_chunks
from pyg_dynscale.partition.pgc.label_propagation import (
    CSRGraph,
    _accept_by_budget,
    budget_scale,
    compact_labels,
    label_propagation,
    undirected_entries,
)
from pyg_dynscale.partition.pgc import chunks as chunks_mod
from pyg_dynscale.partition.pgc import pipeline as pgc_mod
from pyg_dynscale.partition.pgc import starts as starts_mod
from pyg_dynscale.partition.pgc.pipeline import edge_weights, partition_pgc, weighted_supergraph
from tests.helpers.partition_inputs import community_signal, random_signal
from tests.helpers.partition_reference import contract
from pyg_dynscale.partition.costs.plan_bytes import plan_bytes
from pyg_dynscale.partition.costs.workload import LinearWorkload


def community_of(signal: DynamicGraphSignal, k: int, size: int, interleave: bool) -> torch.Tensor:
    v = signal.supergraph().vertex
    return v % k if interleave else v // size



#: A generic weighted pattern: DGC's MPNN-LSTM (two GCN layers into an LSTM).
#: Its first layer's rows are raw input features, loaded once (the static
#: input halo), so a cut spatial edge costs the second layer's hidden row,
#: 2 * 4 * 16 = 128 B per epoch, and a cut temporal edge the LSTM state,
#: 2 * 4 * 64 = 512 B. (A one-layer pattern such as PyGT's T-GCN,
#: ``preset("tgcn", 2, 16)``, weighs spatial edges 0: useless here.)
PATTERN = DependencyPattern.preset("mpnnlstm", 2, 16)


# ----------------------------------------------------------------- label propagation
def dense_label_weights(n: int, src: torch.Tensor, dst: torch.Tensor, w: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Reference for Eq. 2: ``[n, L]`` summed edge weight from each node to each label."""
    L = int(labels.max()) + 1
    M = torch.zeros(n, L, dtype=torch.float64)
    M.index_put_((src, labels[dst]), w.double(), accumulate=True)
    return M


def test_lp_fixed_point_satisfies_eq2() -> None:
    """With tol=0 and no cap, LP stops at a fixed point of Eq. 2: no node has a
    neighbour label strictly heavier than its own."""
    s = random_signal(1)
    src, dst, w = weighted_supergraph(s, PATTERN)
    ent = undirected_entries(src, dst, w)
    n = s.num_vertex_time_nodes
    res = label_propagation(CSRGraph.from_edges(n, src, dst, w), seed=3, max_rounds=500, tol=0.0)
    assert res.converged
    M = dense_label_weights(n, *ent, res.labels)
    own = M[torch.arange(n), res.labels]
    assert bool((M.max(1).values <= own + 1e-9).all())
    assert res.moved[-1] == 0 and res.moved[-2] == 0


def test_lp_initial_labels_are_unique_gids() -> None:
    """Eq. 1: with no rounds, every vertex-time node keeps its own gid as label."""
    s = random_signal(2)
    src, dst, w = weighted_supergraph(s, PATTERN)
    n = s.num_vertex_time_nodes
    res = label_propagation(CSRGraph.from_edges(n, src, dst, w), max_rounds=0)
    assert torch.equal(res.labels, torch.arange(n))


def test_lp_finds_disconnected_communities() -> None:
    s = community_signal(interleave=True)
    comm = community_of(s, 2, 10, True)
    src, dst, w = weighted_supergraph(s, (1.0, 1.0))
    res = label_propagation(CSRGraph.from_edges(s.num_vertex_time_nodes, src, dst, w), seed=0, tol=0.0, max_rounds=200)
    labels, C = compact_labels(res.labels)
    # no label spans both communities
    per_label = torch.zeros(C, 2, dtype=torch.long).index_put_((labels, comm), torch.ones_like(labels), accumulate=True)
    assert bool(((per_label > 0).sum(1) == 1).all())
    # and propagation did merge: far fewer labels than nodes
    assert C <= s.num_vertex_time_nodes // 4


def test_lp_weights_steer_labels() -> None:
    """A path a - b - c where a-b is spatial and b-c temporal: b joins the side
    with the heavier edge kind."""
    src = torch.tensor([0, 1])
    dst = torch.tensor([1, 2])
    for w_ab, w_bc, partner in ((5.0, 1.0, 0), (1.0, 5.0, 2)):
        w = torch.tensor([w_ab, w_bc], dtype=torch.float64)
        # cap 2: only one pair can form; b must pick the heavier side
        res = label_propagation(CSRGraph.from_edges(3, src, dst, w), cap=2.0, seed=0, tol=0.0, max_rounds=50)
        assert res.labels[1] == res.labels[partner]


def test_lp_cap_respected_and_deterministic() -> None:
    s = random_signal(3, T=10, V=80)
    src, dst, w = weighted_supergraph(s, PATTERN)
    n = s.num_vertex_time_nodes
    G = CSRGraph.from_edges(n, src, dst, w)
    nw = LinearWorkload().node_costs(s)
    free = label_propagation(G, node_weight=nw, seed=7, tol=0.0)
    free_max = float(torch.zeros(n, dtype=torch.float64).index_add_(0, free.labels, nw).max())
    cap = max(free_max / 2, float(nw.max()))
    assert free_max > cap  # without the cap some label grows past it
    runs = [label_propagation(G, node_weight=nw, cap=cap, seed=7, tol=0.0) for _ in range(2)]
    assert torch.equal(runs[0].labels, runs[1].labels)
    size = torch.zeros(n, dtype=torch.float64).index_add_(0, runs[0].labels, nw)
    assert float(size.max()) <= cap + 1e-9
    others = [label_propagation(G, node_weight=nw, cap=cap, seed=sd, tol=0.0).labels for sd in (8, 9, 10)]
    assert any(not torch.equal(o, runs[0].labels) for o in others)


def test_accept_by_budget_ranks_by_gain() -> None:
    group = torch.tensor([0, 0, 0, 1, 1])
    amount = torch.tensor([1.0, 1.0, 1.0, 2.0, 2.0], dtype=torch.float64)
    room = torch.tensor([2.0, 3.0], dtype=torch.float64)
    gain = torch.tensor([1.0, 3.0, 2.0, 5.0, 1.0], dtype=torch.float64)
    tie = torch.arange(5)
    acc = _accept_by_budget(group, amount, room, gain, tie, budget_scale(float(amount.sum())))
    # group 0: the two best gains (items 1, 2) fit into room 2; group 1: only item 3
    assert acc.tolist() == [False, True, True, True, False]
    # integer budget units: a running total is exact and ignores the other groups' sums
    scale = budget_scale(1e6)
    assert scale == 2.0 ** (60 - 20) and budget_scale(0.0) == 1.0
    g2 = torch.tensor([0, 1, 1, 1])
    a2 = torch.tensor([1e6 / 3, 0.1, 0.2, 0.3], dtype=torch.float64)
    acc = _accept_by_budget(g2, a2, torch.tensor([1.0, 0.6], dtype=torch.float64), torch.zeros(4), torch.arange(4), scale)
    assert acc.tolist() == [False, True, True, True]  # 0.1 + 0.2 + 0.3 fits 0.6 exactly


def test_floor_is_respected() -> None:
    """Rank-level refinement: departures stop at the floor."""
    s = random_signal(4)
    src, dst, w = weighted_supergraph(s, PATTERN)
    n = s.num_vertex_time_nodes
    init = (torch.arange(n) % 2)
    nw = torch.ones(n, dtype=torch.float64)
    floor = n / 2 - 3
    res = label_propagation(CSRGraph.from_edges(n, src, dst, w), node_weight=nw, init=init, num_labels=2,
                            cap=n / 2 + 3, floor=floor, seed=0, max_rounds=10)
    cnt = torch.bincount(res.labels, minlength=2)
    assert int(cnt.min()) >= floor and int(cnt.max()) <= n / 2 + 3
    assert int((res.labels != init).sum()) > 0


def test_contract_sums_weights() -> None:
    labels = torch.tensor([0, 0, 1, 1, 2])
    src = torch.tensor([0, 1, 2, 3, 1, 4])
    dst = torch.tensor([1, 2, 3, 0, 3, 0])
    w = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=torch.float64)
    a, b, h = contract(labels, 3, src, dst, w)
    got = {(int(x), int(y)): float(z) for x, y, z in zip(a, b, h)}
    assert got == {(0, 1): 11.0, (0, 2): 6.0}


# ----------------------------------------------------------------- assignment
def test_assign_empty_ranks_get_work_and_affinity_groups() -> None:
    """Two cliques of 4 chunks each, equal costs, 2 ranks: Eq. 3 with the
    epsilon affinity puts each clique on its own rank (a literal Eq. 3 would
    score every empty rank 0)."""
    a, b, w = [], [], []
    for base in (0, 4):
        for i in range(4):
            for j in range(i + 1, 4):
                a.append(base + i), b.append(base + j), w.append(10.0)
    g = ChunkGraph.from_pairs(8, np.array(a), np.array(b), np.array(w))
    owner = assign_chunks(g, np.ones(8), 2)
    assert set(owner[:4].tolist()) == {owner[0]} and set(owner[4:].tolist()) == {owner[4]}
    assert owner[0] != owner[4]
    assert g.cut(owner) == 0.0


def test_assign_unconnected_chunks_balance() -> None:
    """No affinities at all: the epsilon term reduces Eq. 3 to 'most remaining
    balance wins' -- every rank gets work and loads are balanced (LPT)."""
    cost = np.array([7.0, 5.0, 4.0, 3.0, 3.0, 2.0, 2.0, 1.0, 1.0])
    g = ChunkGraph.from_pairs(9, np.zeros(0), np.zeros(0), np.zeros(0))
    owner = assign_chunks(g, cost, 4)
    loads = rank_loads(owner, cost, 4)
    assert (loads > 0).all()
    assert loads.max() - loads.min() <= 2.0


def test_refine_chunks_balances_and_reduces_cut() -> None:
    rng = np.random.default_rng(0)
    C, P = 60, 4
    pa, pb = np.triu_indices(C, 1)
    keep = rng.random(pa.size) < 0.15
    g = ChunkGraph.from_pairs(C, pa[keep], pb[keep], rng.integers(1, 10, keep.sum()).astype(float))
    cost = rng.uniform(1, 3, C)
    bad = np.zeros(C, dtype=np.int64)
    bad[:3] = [1, 2, 3]  # very unbalanced start
    out = refine_chunks(g, cost, bad, P, slack=0.05)
    assert divergence(rank_loads(out, cost, P)) <= 1.12
    start = assign_chunks(g, cost, P, slack=0.05)
    ref = refine_chunks(g, cost, start, P, slack=0.05)
    assert g.cut(ref) <= g.cut(start)


# ----------------------------------------------------------------- partition_pgc
@pytest.mark.parametrize("P", [1, 2, 3, 5, 16])
def test_pgc_every_rank_nonempty_and_consistent(P: int) -> None:
    s = random_signal(5, T=8, V=60)
    p = partition_pgc(s, P, PATTERN, seed=0)
    assert p.scheme == "pgc" and p.num_parts == P
    assert torch.bincount(p.owner, minlength=P).min() > 0
    # owner is constant inside each chunk
    C = int(p.chunk.max()) + 1
    lo = torch.full((C,), P).scatter_reduce(0, p.chunk, p.owner, reduce="amin")
    hi = torch.full((C,), -1).scatter_reduce(0, p.chunk, p.owner, reduce="amax")
    assert torch.equal(lo, hi)
    assert p.fingerprint == s.fingerprint()
    assert p.meta["num_chunks"] == C


def test_pgc_deterministic_by_seed() -> None:
    s = random_signal(6, T=10, V=80)
    a = partition_pgc(s, 4, PATTERN, seed=11)
    b = partition_pgc(s, 4, PATTERN, seed=11)
    assert torch.equal(a.owner, b.owner) and torch.equal(a.chunk, b.chunk)
    others = [partition_pgc(s, 4, PATTERN, seed=sd) for sd in (12, 13, 14)]
    assert any(not torch.equal(o.chunk, a.chunk) for o in others)


def test_pgc_cap_respected() -> None:
    s = random_signal(7, T=10, V=80)
    nw = LinearWorkload().node_costs(s)
    cap = float(nw.sum()) / 30
    p = partition_pgc(s, 3, PATTERN, cap=cap, refine_rounds=0)
    sizes = torch.zeros(int(p.chunk.max()) + 1, dtype=torch.float64).index_add_(0, p.chunk, nw)
    assert float(sizes.max()) <= cap + 1e-9
    assert p.meta["cap"] == cap
    # in vertex-time nodes with the vertex-count workload
    p = partition_pgc(s, 3, PATTERN, cap=12, workload="vertices")
    assert int(torch.bincount(p.chunk).max()) <= 12


@pytest.mark.parametrize("interleave", [False, True])
def test_pgc_separates_persistent_communities(interleave: bool) -> None:
    s = community_signal(T=6, k=2, size=12, interleave=interleave)
    p = partition_pgc(s, 2, PATTERN, seed=0)
    comm = community_of(s, 2, 12, interleave)
    # each community on one rank, nothing crosses: zero bytes in the plan
    assert torch.equal(p.owner, comm) or torch.equal(p.owner, 1 - comm)
    assert CommunicationPlan.build(s, p, PATTERN).bytes_by_kind()["total"] == 0


def test_pgc_bytes_not_above_pss_pts_on_chunked_graph() -> None:
    """Four communities of interleaved vertex ids that persist over time: PSS
    cuts temporal edges, PTS's contiguous vertex ranges cut spatial edges;
    DGC's PGC alone (label propagation + Algorithm 1, no PSS / PTS start to
    fall back on) cuts neither."""
    s = community_signal(T=8, k=4, size=10, interleave=True, seed=1)
    pat = DependencyPattern.preset("tgcn", 2, 16, gcn_layers=2)
    b = {}
    for name, p in (("pgc", partition_pgc(s, 4, pat, seed=0, starts=("lp",))),
                    ("pss", partition_pss(s, 4, balanced=True)), ("pts", partition_pts(s, 4, balanced=True))):
        b[name] = CommunicationPlan.build(s, p, pat).bytes_by_kind()["total"]
    assert b["pgc"] < min(b["pss"], b["pts"])
    assert b["pss"] > 0 and b["pts"] > 0


def test_pgc_balance_on_random_graph() -> None:
    s = random_signal(8, T=12, V=100)
    p = partition_pgc(s, 4, PATTERN, seed=0)
    loads = torch.tensor(p.meta["loads"])
    assert float(loads.max() / loads.min()) <= 1.15


def test_partition_dispatch_reaches_pgc() -> None:
    s = random_signal(9)
    p = partition(s, "pgc", 2, PATTERN, seed=1)
    q = partition_pgc(s, 2, PATTERN, seed=1)
    assert torch.equal(p.owner, q.owner)


def test_pgc_errors() -> None:
    s = random_signal(10)
    N = s.num_vertex_time_nodes
    with pytest.raises(PartitionError, match="num_parts"):
        partition_pgc(s, 0, PATTERN)
    with pytest.raises(PartitionError, match="num_parts"):
        partition_pgc(s, N + 1, PATTERN)
    with pytest.raises(PartitionError, match="cap"):
        partition_pgc(s, 2, PATTERN, cap=0.5)  # a node alone costs >= 1
    with pytest.raises(PartitionError, match="cap"):
        partition_pgc(s, 4, PATTERN, cap=float(LinearWorkload().node_costs(s).sum()))  # one chunk, 4 ranks
    with pytest.raises(PartitionError, match="pattern"):
        partition_pgc(s, 2, "tgcn")
    with pytest.raises(PartitionError, match="pattern"):
        edge_weights((1.0, -2.0))


def test_boundary_only_is_a_pure_speedup() -> None:
    """Refinement from a given labelling: starting with only boundary nodes
    dirty gives the same labels as evaluating every node (interior nodes have
    no other label to move to)."""
    s = random_signal(11)
    src, dst, w = weighted_supergraph(s, PATTERN)
    n = s.num_vertex_time_nodes
    G = CSRGraph.from_edges(n, src, dst, w)
    init = torch.arange(n) * 3 // n
    kw = dict(init=init, num_labels=3, cap=n / 3 + 5, floor=n / 3 - 5, seed=2, max_rounds=100, tol=0.0)
    a = label_propagation(G, boundary_only=True, **kw)
    b = label_propagation(G, boundary_only=False, **kw)
    assert torch.equal(a.labels, b.labels)
    assert int((a.labels != init).sum()) > 0


def test_csr_contract_matches_edge_contract() -> None:
    s = random_signal(12)
    src, dst, w = weighted_supergraph(s, PATTERN)
    n = s.num_vertex_time_nodes
    labels = torch.arange(n) % 9
    G = CSRGraph.from_edges(n, src, dst, w).contract(labels, 9)
    a, b, h = contract(labels, 9, src, dst, w)
    dense = torch.zeros(9, 9, dtype=torch.float64)
    dense.index_put_((a, b), h, accumulate=True)
    dense = dense + dense.T
    got = torch.zeros(9, 9, dtype=torch.float64)
    got.index_put_((G.sources(), G.dst), G.weight.double(), accumulate=True)
    assert torch.equal(got, dense)


def test_uncoarsening_refinement_does_not_increase_cut() -> None:
    s = random_signal(13, T=12, V=100)
    p = partition_pgc(s, 4, PATTERN, seed=0)
    p0 = partition_pgc(s, 4, PATTERN, seed=0, refine_rounds=0)
    assert p.meta["cut_weight"] <= p0.meta["cut_weight"]
    assert p0.meta["cut_weight"] == p0.meta["greedy_cut"] or p0.meta["cut_weight"] <= p0.meta["greedy_cut"]
    # cut_weight is the byte weight of the edges between ranks
    src, dst, w = weighted_supergraph(s, PATTERN)
    assert p.meta["cut_weight"] == float(w[(p.owner[src] != p.owner[dst]) & (src != dst)].sum())


def test_coarsest_level_that_barely_shrank_is_not_refined() -> None:
    """Coarsening stops at a level whose label propagation merged < 10% of its
    nodes; that level (nearly the chunk graph, refined by refine_chunks) is
    skipped on the way down, every other level is refined."""
    s = random_signal(13, T=12, V=100)
    p = partition_pgc(s, 4, PATTERN, seed=0)
    m = p.meta
    chunks = m["level_chunks"]
    assert len(chunks) >= 2 and m["num_levels"] == len(chunks)
    stopped = (chunks[-2] - chunks[-1]) / chunks[-2] < chunks_mod.STOP_SHRINK
    assert stopped  # this graph stops by the shrink test (not by max_levels)
    assert len(m["refine_rounds"]) == m["num_levels"] - 1  # all but the coarsest
    levels = chunks_mod.generate_chunks(*_level0(s), seed=0)[2]
    assert [lvl.near_chunks for lvl in levels] == [False] * (len(levels) - 1) + [True]


def _level0(s: DynamicGraphSignal) -> tuple:
    """``generate_chunks`` inputs: the weighted supergraph of ``PATTERN`` (no
    temporal coarsening), unit node costs and a cap of 1/64 of their total."""
    sg = s.supergraph()
    ws, _ = edge_weights(PATTERN)
    graph = pgc_mod.supergraph_csr(sg, ws, pgc_mod.temporal_weights(sg, PATTERN))
    w = torch.ones(graph.num_nodes, dtype=torch.float64)
    return graph, w, float(w.sum()) / 64


def test_thread_setting_is_restored() -> None:
    before = torch.get_num_threads()
    partition_pgc(random_signal(14), 2, PATTERN, threads=1)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tie_moves_merge_path_fragments(seed: int) -> None:
    """A temporal sequence is a path with equal weights: plain LP freezes into
    fragments (a fixed point of Eq. 2), tie moves merge it into one label."""
    n = 40
    src = torch.arange(n - 1)
    G = CSRGraph.from_edges(n, src, src + 1, torch.ones(n - 1, dtype=torch.float64))
    plain = label_propagation(G, seed=seed, tol=0.0, max_rounds=1000)
    ties = label_propagation(G, seed=seed, tol=0.0, max_rounds=1000, tie_moves=True)
    assert plain.converged and ties.converged
    assert plain.labels.unique().numel() > 1
    assert ties.labels.unique().numel() == 1


# ----------------------------------------------------------------- fast path: coarsening, packing, effort
def test_packed_argmax_matches_float_path() -> None:
    """Integral weights use the packed (score << bits | label) argmax; scaling
    every weight by 1.5 forces the float path: same argmax, same labels."""
    s = random_signal(15, T=10, V=80)
    src, dst, w = weighted_supergraph(s, (1.0, 3.0))
    n = s.num_vertex_time_nodes
    Gi = CSRGraph.from_edges(n, src, dst, w)
    Gf = CSRGraph.from_edges(n, src, dst, w * 1.5)
    assert Gi.integral() and not Gf.integral()
    nw = LinearWorkload().node_costs(s)
    for kw in (dict(), dict(cap=30.0, tie_moves=True)):
        a = label_propagation(Gi, node_weight=nw, seed=4, tol=0.0, **kw)
        b = label_propagation(Gf, node_weight=nw, seed=4, tol=0.0, **kw)
        assert torch.equal(a.labels, b.labels)


def test_temporal_coarsening_preserves_cut_weights() -> None:
    """Any labelling of segments cuts exactly the byte weight, on the quotient
    graph, that its expansion cuts on the supergraph; segments stay below
    segment_cap + the heaviest node and are contiguous runs of one sequence."""
    from pyg_dynscale.partition.pgc.coarsen import temporal_edge_weights
    from tests.helpers.partition_reference import coarsen_temporal

    s = random_signal(16, T=12, V=50)
    sg = s.supergraph()
    nw = LinearWorkload().node_costs(s).double()
    tw = temporal_edge_weights(sg, PATTERN)
    tc = coarsen_temporal(sg, nw, PATTERN.spatial_edge_weight(), tw, segment_cap=12.0)
    assert tc.num_segments > s.supergraph().sequence_ptr.numel() - 1  # some sequences were split
    assert float(tc.node_w.max()) < 12.0 + float(nw.max())
    assert torch.equal(tc.node_w, torch.zeros(tc.num_segments, dtype=torch.float64).index_add_(0, tc.seg, nw))
    # a segment holds one vertex only, and its appearances are consecutive in the sequence
    v_of_seg = torch.full((tc.num_segments,), -1).scatter_reduce(0, tc.seg, sg.vertex, reduce="amax")
    assert torch.equal(v_of_seg[tc.seg], sg.vertex)
    lengths = sg.sequence_ptr[1:] - sg.sequence_ptr[:-1]
    pos = torch.empty_like(sg.sequence_order)  # position of each node in its vertex's sequence
    pos[sg.sequence_order] = torch.arange(sg.num_nodes) - torch.repeat_interleave(sg.sequence_ptr[:-1], lengths)
    first = torch.full((tc.num_segments,), sg.num_nodes).scatter_reduce(0, tc.seg, pos, reduce="amin")
    last = torch.full((tc.num_segments,), -1).scatter_reduce(0, tc.seg, pos, reduce="amax")
    assert torch.equal(last - first + 1, torch.bincount(tc.seg, minlength=tc.num_segments))  # no gaps
    G = CSRGraph.from_edges(tc.num_segments, tc.src, tc.dst, tc.weight)
    src, dst, w = weighted_supergraph(s, PATTERN)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        lab = torch.randint(0, 4, (tc.num_segments,), generator=g)
        srcs = G.sources()
        q_cut = float(G.weight[lab[srcs] != lab[G.dst]].double().sum()) / 2
        own = lab[tc.seg]
        assert q_cut == float(w[own[src] != own[dst]].sum())


def test_attention_temporal_weights_count_earlier_rows() -> None:
    """DySAT: cutting after position j of a sequence moves j + 1 rows; the
    per-edge weights reproduce the plan's temporal bytes for a single cut."""
    from pyg_dynscale.partition import Partition
    from pyg_dynscale.partition.pgc.coarsen import temporal_edge_weights

    # one vertex present in 6 snapshots, no spatial edges
    s = DynamicGraphSignal([np.zeros((2, 0), dtype=np.int64)] * 6, None, [np.ones((1, 2))] * 6, None)
    pat = DependencyPattern.preset("dysat", 2, 8)
    tw = temporal_edge_weights(s.supergraph(), pat)
    row = pat.temporal_edge_weight(1.0)
    assert tw.tolist() == [row * (j + 1) for j in range(5)]
    assert torch.equal(temporal_edge_weights(s.supergraph(), PATTERN), torch.full((5,), PATTERN.temporal_edge_weight()))
    for j in range(5):  # cut between positions j and j+1
        owner = (torch.arange(6) > j).long()
        plan = CommunicationPlan.build(s, Partition("x", 2, owner), pat).bytes_by_kind()
        assert plan["temporal"] == tw[j]


@pytest.mark.parametrize("coarsen", [True, False])
def test_pgc_coarsen_option(coarsen: bool) -> None:
    s = community_signal(T=6, k=2, size=12, interleave=True)
    p = partition_pgc(s, 2, PATTERN, seed=0, coarsen=coarsen)
    assert p.meta["coarsened"] is coarsen
    N = s.num_vertex_time_nodes
    if coarsen:  # segments: at least one per vertex, fewer than the vertex-time nodes
        assert 24 <= p.meta["level0_nodes"] < N
    else:
        assert p.meta["level0_nodes"] == N
    comm = community_of(s, 2, 12, True)
    assert torch.equal(p.owner, comm) or torch.equal(p.owner, 1 - comm)
    # auto: temporal edges (512 B) outweigh spatial ones (128 B) -> coarsened
    assert edge_weights(PATTERN) == (128.0, 512.0)
    assert partition_pgc(s, 2, PATTERN).meta["coarsened"]
    assert not partition_pgc(s, 2, (10.0, 1.0)).meta["coarsened"]


def test_pgc_effort_presets_and_gain_tol() -> None:
    s = random_signal(17, T=10, V=80)
    fast = partition_pgc(s, 4, PATTERN, effort="fast")
    thorough = partition_pgc(s, 4, PATTERN, effort="thorough")
    assert fast.meta["effort"] == "fast" and thorough.meta["effort"] == "thorough"
    assert partition_pgc(s, 4, PATTERN).meta["effort"] == "thorough"  # small graph: auto -> thorough
    assert max(fast.meta["level_rounds"][:1]) <= 4 and fast.meta["num_levels"] <= 4
    for p in (fast, thorough):
        assert torch.bincount(p.owner, minlength=4).min() > 0
        assert float(torch.tensor(p.meta["loads"]).max() / torch.tensor(p.meta["loads"]).min()) <= 1.15
    # gain_tol stops a churning run early; a huge tolerance stops after the first pair
    G = CSRGraph.from_edges(s.num_vertex_time_nodes, *weighted_supergraph(s, PATTERN))
    r = label_propagation(G, seed=0, max_rounds=50, tol=0.0, gain_tol=10.0)
    assert r.rounds == 2 and r.converged and len(r.gains) == 2 and r.gains[0] > 0


def test_hub_priority_breaks_ties_towards_heavier_labels() -> None:
    """Path a - b - c with equal weights: b's two neighbour labels tie, and b
    joins the one whose priority key is larger."""
    src, dst = torch.tensor([0, 1]), torch.tensor([1, 2])
    G = CSRGraph.from_edges(3, src, dst, torch.ones(2, dtype=torch.float64))
    for key, partner in ((torch.tensor([5.0, 0.0, 1.0]), 0), (torch.tensor([1.0, 0.0, 5.0]), 2)):
        b_moved = 0
        for seed in range(8):
            r = label_propagation(G, cap=2.0, seed=seed, max_rounds=1, priority=key)
            # round 0 moves a random half; whenever b moved, it took the higher-key label
            if r.labels[1] != 1:
                b_moved += 1
                assert r.labels[1] == partner
        assert b_moved > 0


def test_pgc_new_option_errors() -> None:
    s = random_signal(18)
    with pytest.raises(PartitionError, match="coarsen"):
        partition_pgc(s, 2, PATTERN, coarsen="yes")
    with pytest.raises(PartitionError, match="segment_fraction"):
        partition_pgc(s, 2, PATTERN, segment_fraction=0.0)
    with pytest.raises(PartitionError, match="threads"):
        partition_pgc(s, 2, PATTERN, threads=0)
    with pytest.raises(PartitionError, match="effort"):
        partition_pgc(s, 2, PATTERN, effort="quick")


def test_bench_pgc_scale_quick_smoke() -> None:
    """benchmarks/bench_pgc_scale.py --quick runs end to end (200k nodes, seconds).
    Its default pattern is DGC's T-GCN (three 2-layer GCNs): a spatial edge
    (768 B) outweighs a temporal one (256 B), so PGC runs on the vertex-time
    nodes; with MPNN-LSTM (temporal 1024 B > spatial 256 B) it contracts
    temporal segments first."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    runs = {}
    with tempfile.TemporaryDirectory() as d:
        for model in (None, "mpnnlstm"):
            out = os.path.join(d, f"{model}.json")
            subprocess.run([sys.executable, os.path.join(root, "benchmarks", "bench_pgc_scale.py"), "--quick", "--json", out]
                           + ([] if model is None else ["--model", model]), check=True, capture_output=True, timeout=120)
            runs[model] = json.load(open(out))
    tgcn, mpnn = runs[None], runs["mpnnlstm"]
    assert tgcn["N"] == mpnn["N"] == 200_000
    assert tgcn["meta"]["edge_weights"] == [768.0, 256.0] and mpnn["meta"]["edge_weights"] == [256.0, 1024.0]
    assert not tgcn["meta"]["coarsened"] and tgcn["meta"]["level0_nodes"] == 200_000
    assert mpnn["meta"]["coarsened"] and mpnn["meta"]["level0_nodes"] < 200_000
    assert tgcn["meta"]["divergence"] <= 1.15 and mpnn["meta"]["divergence"] <= 1.15


def test_refine_chunks_swaps_when_single_moves_are_blocked() -> None:
    """Two pairs of tightly bound chunks split across two ranks, zero slack:
    no single move keeps the balance, one swap removes the heavy cut."""
    g = ChunkGraph.from_pairs(4, np.array([0, 2, 0, 1]), np.array([1, 3, 2, 3]), np.array([10.0, 10.0, 1.0, 1.0]))
    cost = np.ones(4)
    bad = np.array([0, 1, 0, 1])
    assert g.cut(bad) == 20.0
    assert refine_chunks(g, cost, bad, 2, slack=0.0, swaps=0).tolist() == bad.tolist()  # blocked
    out = refine_chunks(g, cost, bad, 2, slack=0.0)
    assert out[0] == out[1] and out[2] == out[3] and out[0] != out[2]
    assert g.cut(out) == 2.0
    assert rank_loads(out, cost, 2).tolist() == [2.0, 2.0]


def test_pgc_on_chunk_bigger_than_slack_communities() -> None:
    """Communities that are bigger than a chunk but whose chunks exceed the
    balance slack (the case swaps fix): PGC still keeps each community on one
    rank, so nothing crosses."""
    for graph_seed in range(6):  # without swaps 4 of these 18 runs split a community
        s = community_signal(T=8, k=4, size=10, interleave=True, seed=graph_seed)
        comm = community_of(s, 4, 10, True)
        for seed in range(3):
            p = partition_pgc(s, 2, PATTERN, seed=seed, chunks_per_part=8)
            per = torch.zeros(4, 2, dtype=torch.long).index_put_((comm, p.owner), torch.ones_like(comm), accumulate=True)
            assert bool(((per > 0).sum(1) == 1).all())  # every community lies on one rank


# ----------------------------------------------------------------- multi-start (step 7)
def static_ring_signal(V: int = 12, T: int = 60, seed: int = 0) -> DynamicGraphSignal:
    """Chickenpox-like: the same small graph (a ring with chords) in every one
    of many snapshots; the optimum is a contiguous snapshot range per rank."""
    rng = np.random.default_rng(seed)
    i = np.arange(V)
    e = np.concatenate([np.stack([i, (i + 1) % V]), np.stack([i, (i + 3) % V])], 1)
    e = np.concatenate([e, e[::-1]], 1)
    return DynamicGraphSignal([e] * T, None, [rng.standard_normal((V, 1)) for _ in range(T)], None)


#: A recurrent pattern whose per-epoch spatial rows are narrow (1 element:
#: 8 B per cut spatial edge) next to a 16-wide state (128 B per cut temporal
#: edge). Splitting a few snapshots then costs little, the case
#: test_max_divergence_lets_a_less_balanced_start_win is about. Layer 0's
#: rows are the raw features, loaded once; layer 1 is what crosses per epoch.
NARROW_SPATIAL = DependencyPattern((BlockPattern((1, 1), "recurrent", 16, 48),), name="narrow-spatial")


def sparse_long_sequences_signal(V: int = 40, T: int = 30, seed: int = 0) -> DynamicGraphSignal:
    """Every vertex in every snapshot, only a few spatial edges in a few
    snapshots: whole sequences per rank (PTS) cut almost nothing."""
    rng = np.random.default_rng(seed)
    edges = []
    for t in range(T):
        k = 2 if t % 5 == 0 else 0
        edges.append(rng.integers(0, V, size=(2, k)))
    return DynamicGraphSignal(edges, None, [rng.standard_normal((V, 2)) for _ in range(T)], None)


def _bytes(s: DynamicGraphSignal, p, pat) -> float:
    return CommunicationPlan.build(s, p, pat).bytes_by_kind()["total"]


def _chunk_owner_constant(p) -> bool:
    C = int(p.chunk.max()) + 1
    lo = torch.full((C,), p.num_parts).scatter_reduce(0, p.chunk, p.owner, reduce="amin")
    hi = torch.full((C,), -1).scatter_reduce(0, p.chunk, p.owner, reduce="amax")
    return bool(torch.equal(lo, hi)) and p.meta["num_chunks"] == C


# T-GCN in DGC's form (three 2-layer GCNs): a one-layer T-GCN exchanges only
# raw features spatially (loaded once), so its spatial edges weigh 0 and PTS
# cuts nothing. At 3 ranks DGC's T-GCN lets label propagation alone find the
# snapshot ranges, so that case runs on MPNN-LSTM.
@pytest.mark.parametrize("model,P", [("tgcn", 4), ("mpnnlstm", 4), ("mpnnlstm", 3)])
def test_multistart_not_above_balanced_pss_pts_on_static_graph(model: str, P: int) -> None:
    s = static_ring_signal()
    pat = DependencyPattern.preset(model, 1, 16, gcn_layers=2)
    assert pat.spatial_edge_weight() > 0 and pat.temporal_edge_weight() > 0
    p = partition_pgc(s, P, pat, seed=0)
    single = partition_pgc(s, P, pat, seed=0, starts=("lp",))
    b_pss = _bytes(s, partition_pss(s, P, balanced=True), pat)
    b_pts = _bytes(s, partition_pts(s, P, balanced=True), pat)
    b = _bytes(s, p, pat)
    assert b <= min(b_pss, b_pts)
    assert b < _bytes(s, single, pat)  # label propagation alone does not find the snapshot ranges
    assert p.meta["start"] == "pss"
    assert set(p.meta["candidates"]) == {"lp", "pss", "pts"}
    assert p.meta["cut_weight"] == min(c for c in p.meta["candidates"].values() if c is not None)
    assert p.meta["candidates"]["lp"] == single.meta["cut_weight"]
    # the winner stays within PGC's balance tolerance
    assert p.meta["divergence"] <= max((1.03 / 0.97), p.meta["candidate_divergence"]["lp"]) + 1e-9
    assert _chunk_owner_constant(p)


def test_multistart_not_above_balanced_pts_when_sequences_are_optimal() -> None:
    s = sparse_long_sequences_signal()
    pat = DependencyPattern.preset("dysat", 2, 16)
    p = partition_pgc(s, 4, pat, seed=0)
    b_pss = _bytes(s, partition_pss(s, 4, balanced=True), pat)
    b_pts = _bytes(s, partition_pts(s, 4, balanced=True), pat)
    assert _bytes(s, p, pat) <= min(b_pss, b_pts)
    assert b_pts < b_pss
    assert _chunk_owner_constant(p)
    full = partition_pgc(s, 4, pat, seed=0, start_margin=None)  # every start refined
    assert full.meta["candidates"]["pts"] is not None and full.meta["candidates"]["pts"] <= full.meta["candidates"]["pss"]
    assert _bytes(s, full, pat) <= min(b_pss, b_pts) and _chunk_owner_constant(full)


def test_start_margin_prunes_starts_far_above_the_lp_cut() -> None:
    """A start is refined only when its unrefined cut is within
    ``start_margin`` of the LP cut (of the LP result without the FM step,
    ``meta["lp_cut_before_fm"]``, where that is higher); pruned starts keep
    their raw cut in ``candidates_raw`` and cannot win."""
    s = static_ring_signal()
    pat = DependencyPattern.preset("tgcn", 1, 16, gcn_layers=2)
    full = partition_pgc(s, 4, pat, seed=0, start_margin=None)
    raw, lp = full.meta["candidates_raw"], full.meta["lp_cut_before_fm"]
    assert lp >= full.meta["candidates"]["lp"]
    assert raw["pss"] is not None and raw["pts"] is not None
    # refinement never raises a start's cut
    assert all(full.meta["candidates"][st] <= raw[st] + 1e-9 for st in ("pss", "pts"))
    # a margin below every start's raw / lp ratio prunes both: the LP result stands
    tight = min(raw["pss"], raw["pts"]) / lp * 0.99
    pruned = partition_pgc(s, 4, pat, seed=0, start_margin=tight)
    assert pruned.meta["candidates"]["pss"] is None and pruned.meta["candidates"]["pts"] is None
    assert pruned.meta["candidates_raw"] == raw and pruned.meta["start"] == "lp"
    single = partition_pgc(s, 4, pat, seed=0, starts=("lp",))
    assert torch.equal(pruned.owner, single.owner)
    # a cut margin above both ratios leaves the bytes test: a start whose raw
    # plan bytes exceed START_BYTES_MARGIN x LP's is pruned, the other refined
    loose_margin = max(raw["pss"], raw["pts"]) / lp * 1.01
    loose = partition_pgc(s, 4, pat, seed=0, start_margin=loose_margin)
    lp_bytes = max(loose.meta["candidate_bytes"]["lp"], loose.meta["lp_bytes_before_fm"] or 0)
    raw_bytes = loose.meta["candidates_raw_bytes"]
    assert set(raw_bytes) == {"pss", "pts"}
    for st in ("pss", "pts"):
        assert raw_bytes[st] == plan_bytes(s.supergraph(), partition(s, st, 4, balanced=True).owner, 4, pat)
        far = raw_bytes[st] > starts_mod.START_BYTES_MARGIN * lp_bytes
        assert loose.meta["candidates"][st] == (None if far else full.meta["candidates"][st])
    assert any(raw_bytes[st] > starts_mod.START_BYTES_MARGIN * lp_bytes for st in raw_bytes)  # the test bites
    # ... and with the bytes test out of the way both are refined, as start_margin=None does
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(starts_mod, "START_BYTES_MARGIN", math.inf)
        loose = partition_pgc(s, 4, pat, seed=0, start_margin=loose_margin)
    assert loose.meta["candidates"] == full.meta["candidates"] and torch.equal(loose.owner, full.owner)
    for bad in (0, -1.0, float("inf"), "1.1"):
        with pytest.raises(PartitionError, match="start_margin"):
            partition_pgc(s, 4, pat, start_margin=bad)


def test_single_start_is_the_label_propagation_result() -> None:
    s = random_signal(12, T=10, V=80)
    one = partition_pgc(s, 4, PATTERN, seed=3, starts=("lp",))
    assert one.meta["candidates"] == {"lp": one.meta["cut_weight"]} and one.meta["start"] == "lp"
    multi = partition_pgc(s, 4, PATTERN, seed=3)
    assert multi.meta["candidates"]["lp"] == one.meta["cut_weight"]
    assert multi.meta["cut_weight"] <= one.meta["cut_weight"]
    if multi.meta["start"] == "lp":
        assert torch.equal(multi.owner, one.owner) and torch.equal(multi.chunk, one.chunk)
    # only the PTS start: PSS never computed
    two = partition_pgc(s, 4, PATTERN, seed=3, starts=("lp", "pts"))
    assert set(two.meta["candidates"]) == {"lp", "pts"}


def test_multistart_infeasible_start_is_recorded_and_bad_starts_raise() -> None:
    s = static_ring_signal(V=12, T=3)  # 3 snapshots: PSS cannot make 4 ranks
    p = partition_pgc(s, 4, PATTERN, seed=0)
    assert p.meta["candidates"]["pss"] is None and p.meta["start"] in ("lp", "pts")
    for bad in (("pss",), "lp", ("lp", "metis"), ()):
        with pytest.raises(PartitionError, match="starts"):
            partition_pgc(s, 2, PATTERN, starts=bad)


def test_max_divergence_lets_a_less_balanced_start_win() -> None:
    """62 snapshots of a static graph on 4 ranks: balanced PSS ranges are
    16/16/16/14 snapshots (lambda 1.14), outside PGC's band (1.03 / 0.97).
    By default the PSS start therefore splits the boundary snapshots (lambda
    about 1) and still wins over label propagation; with
    ``max_divergence=1.15`` the whole-snapshot ranges are allowed and win,
    cutting only temporal edges."""
    s = static_ring_signal(V=12, T=62)
    pat = NARROW_SPATIAL
    assert edge_weights(pat) == (8.0, 128.0)
    pss_bytes = _bytes(s, partition_pss(s, 4, balanced=True), pat)
    d = partition_pgc(s, 4, pat, seed=0)
    c = d.meta["candidates"]
    assert d.meta["start"] == "pss" and c["pss"] < c["lp"] and d.meta["pss_split"]
    assert d.meta["divergence"] <= 1.01 and d.meta["candidate_divergence"]["pss"] <= d.meta["start_tolerance"]
    assert _bytes(s, d, pat) <= 1.05 * pss_bytes  # the price of balance: a few rows of the split snapshots
    w = partition_pgc(s, 4, pat, seed=0, max_divergence=1.15)
    assert w.meta["start_tolerance"] == 1.15 and w.meta["start"] == "pss" and not w.meta["pss_split"]
    assert w.meta["cut_weight"] == w.meta["candidates"]["pss"] < d.meta["cut_weight"]
    assert 1.1 < w.meta["divergence"] <= 1.15 and _bytes(s, w, pat) <= pss_bytes
    with pytest.raises(PartitionError, match="max_divergence"):
        partition_pgc(s, 4, pat, max_divergence=0.5)


def test_pss_start_splits_snapshots_when_ranges_miss_the_tolerance() -> None:
    """A whole-snapshot PSS start knows its lambda; split, the ranks take
    contiguous runs of nodes in gid order: each within one node's cost of
    the mean, the unrefined cut counted over both edge kinds."""
    from pyg_dynscale.partition.pgc.coarsen import supergraph_cut, temporal_edge_weights
    from pyg_dynscale.partition.pgc.starts import _Start

    s = static_ring_signal(V=12, T=62)
    sg = s.supergraph()
    pat = DependencyPattern.preset("tgcn", 1, 16, gcn_layers=2)
    ws, tw = pat.spatial_edge_weight(), temporal_edge_weights(sg, pat)
    node_w = LinearWorkload().node_costs(s).double()
    whole = _Start.make("pss", s, 4, node_w)
    assert whole.unit is not None and torch.equal(whole.owner(), partition_pss(s, 4, balanced=True).owner)
    assert whole.divergence() == pytest.approx(16 / 14)
    split = whole.split_snapshots(node_w, 4)
    owner = split.owner()
    assert split.unit is None and bool((owner[1:] >= owner[:-1]).all())  # contiguous in gid order
    loads = torch.zeros(4, dtype=torch.float64).index_add_(0, owner, node_w)
    assert float(loads.max() - loads.min()) <= 2 * float(node_w.max())
    assert split.cut(sg, ws, tw) == pytest.approx(supergraph_cut(sg, owner, ws, tw), rel=1e-12)
    assert split.cut(sg, ws, tw) > whole.cut(sg, ws, tw)  # the split snapshots cut spatial edges too


def test_multistart_ranks_candidates_by_plan_bytes() -> None:
    """With a DependencyPattern the multi-start keeps the candidate whose
    communication plan moves the fewest bytes (the cut weight over-counts a
    node with several edges into one rank); with a bare weight pair it can
    only rank by cut weight. On this graph the two rankings disagree (with
    the LP candidate of Algorithm 1 alone: the FM step makes LP's cut the
    lowest too)."""
    s = random_signal(1, T=8, V=40, deg=3)
    pat = DependencyPattern.preset("tgcn", 1, 16, gcn_layers=2)
    by_bytes = partition_pgc(s, 4, pat, seed=0, start_margin=None, fm_tries=0)
    by_cut = partition_pgc(s, 4, edge_weights(pat), seed=0, start_margin=None, fm_tries=0)
    cb = by_bytes.meta["candidate_bytes"]
    assert by_cut.meta["candidate_bytes"] == {} and by_cut.meta["candidates"] == by_bytes.meta["candidates"]
    assert by_cut.meta["start"] == min((c, st) for st, c in by_cut.meta["candidates"].items() if c is not None)[1]
    assert by_bytes.meta["start"] == min(cb, key=cb.get) != by_cut.meta["start"]
    assert _bytes(s, by_bytes, pat) == cb[by_bytes.meta["start"]] < _bytes(s, by_cut, pat)
    assert _chunk_owner_constant(by_bytes)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_bad_node_costs_are_a_clear_error(bad: float) -> None:
    """A workload model whose node costs are NaN, infinite or negative is
    rejected before partitioning (the check reuses the cost sum and minimum)."""

    class Broken(LinearWorkload):
        def node_costs(self, signal):  # type: ignore[override]
            c = super().node_costs(signal).clone()
            c[3] = bad
            return c

    s = random_signal(1)
    with pytest.raises(PartitionError, match="node costs must be finite and >= 0"):
        partition_pgc(s, 2, PATTERN, workload=Broken())


@pytest.mark.parametrize("costs", ["random", "zero"])
def test_split_snapshot_owner_is_the_same_on_both_backends(costs: str) -> None:
    from pyg_dynscale.partition.compiled import backend as kernels
    from pyg_dynscale.partition.pgc.starts import _split_snapshot_owner

    rng = np.random.default_rng(1)
    w = torch.from_numpy(rng.random(997) * 3) if costs == "random" else torch.zeros(997, dtype=torch.float64)
    owners = []
    for be in ("torch", "numba"):
        with kernels.use_backend(be):
            owners.append(_split_snapshot_owner(w, 5))
    assert torch.equal(owners[0], owners[1])
    assert torch.equal(torch.bincount(owners[0], minlength=5) > 0, torch.ones(5, dtype=torch.bool))
    loads = torch.zeros(5, dtype=torch.float64).index_add_(0, owners[0], w)
    assert float(loads.max() - loads.min()) <= 2 * float(w.max()) + 1e-12 and bool((owners[0][1:] >= owners[0][:-1]).all())
