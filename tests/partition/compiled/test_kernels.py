"""The numba label-propagation backend computes exactly what the vectorized
torch reference computes (CSR building, contraction, every round, PGC end to
end), and backend selection validates its input."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import DependencyPattern, partition
from pyg_dynscale.partition.compiled import backend, jit, kernels
from pyg_dynscale.partition.compiled.backend import use_backend
from pyg_dynscale.partition.pgc.label_propagation import CSRGraph, label_propagation
from pyg_dynscale.partition.pgc.pipeline import partition_pgc
from tests.helpers.partition_inputs import community_signal, random_signal

pytestmark = pytest.mark.skipif(not backend.HAVE_NUMBA, reason="numba backend not installed")


def random_edges(n: int, E: int, seed: int, float_weights: bool = False, hub: bool = True):
    """Random edges with duplicates, reversed duplicates, self loops and (with
    ``hub``) one node of degree > 32 (the long-row paths of the kernels)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (E,), generator=g)
    dst = torch.randint(0, n, (E,), generator=g)
    if hub:
        src = torch.cat([src, torch.zeros(3 * n, dtype=torch.long)])
        dst = torch.cat([dst, torch.randint(0, n, (3 * n,), generator=g)])
    src = torch.cat([src, dst[:20], src[:5]])  # reversed duplicates + self loops
    dst = torch.cat([dst, src[:20], src[:5]])
    w = torch.rand(src.numel(), generator=g, dtype=torch.float64) * 3 if float_weights else \
        torch.randint(1, 5, (src.numel(),), generator=g).double()
    return src, dst, w


def both(fn):
    with use_backend("torch"):
        a = fn()
    with use_backend("numba"):
        b = fn()
    return a, b


def weighted_preset(model: str, in_channels: int = 1, hidden: int = 16) -> DependencyPattern:
    """``model`` in DGC's form, so that both edge kinds weigh something: T-GCN
    with three 2-layer GCNs, DySAT with 2 blocks. (Block 0's first spatial
    layer moves raw features, loaded once: a one-layer T-GCN or a one-block
    DySAT weighs spatial edges 0.)"""
    extra = {"tgcn": {"gcn_layers": 2}, "dysat": {"num_blocks": 2}}[model]
    pat = DependencyPattern.preset(model, in_channels, hidden, **extra)
    assert pat.spatial_edge_weight() > 0 and pat.temporal_edge_weight() > 0
    return pat


def same_csr(a: CSRGraph, b: CSRGraph) -> bool:
    return (a.num_nodes == b.num_nodes and torch.equal(a.ptr, b.ptr) and torch.equal(a.dst, b.dst)
            and a.weight.dtype == b.weight.dtype and torch.equal(a.weight, b.weight))


@pytest.mark.parametrize("float_weights", [False, True])
@pytest.mark.parametrize("hub", [False, True])
def test_csr_from_edges_and_contract_identical(float_weights: bool, hub: bool) -> None:
    n = 300
    src, dst, w = random_edges(n, 1500, seed=1, float_weights=float_weights, hub=hub)
    a, b = both(lambda: CSRGraph.from_edges(n, src, dst, w))
    assert same_csr(a, b)
    assert bool((a.dst[a.ptr[0]:a.ptr[1]].diff() > 0).all())  # rows sorted, merged
    labels = torch.randint(0, 40, (n,), generator=torch.Generator().manual_seed(2))
    ca, cb = both(lambda: a.contract(labels, 40))
    assert same_csr(ca, cb)
    assert ca.weight.sum() == pytest.approx(float(a.weight[labels[a.sources()] != labels[a.dst]].double().sum()))


@pytest.mark.parametrize("num_labels", [40, 3000])
@pytest.mark.parametrize("float_weights", [False, True])
def test_contract_long_rows_identical(num_labels: int, float_weights: bool) -> None:
    """Contracted rows from short to longer than SHELL_MAX (the hub's row
    with 3000 labels): whole-number weights are sorted by the transpose,
    float weights row by row (shell sort, argsort above SHELL_MAX), both
    summed in entry order as the reference."""
    from pyg_dynscale.partition.compiled import csr

    n = 3000
    src, dst, w = random_edges(n, 6000, seed=4, float_weights=float_weights)
    g = CSRGraph.from_edges(n, src, dst, w)
    labels = torch.randperm(n, generator=torch.Generator().manual_seed(1)) % num_labels
    a, b = both(lambda: g.contract(labels, num_labels))
    assert same_csr(a, b)
    longest = int((a.ptr[1:] - a.ptr[:-1]).max())
    assert longest > (csr.SHELL_MAX if num_labels > csr.SHELL_MAX else 32)


@pytest.mark.parametrize("weights", ["integral", "float"])
def test_contract_of_a_directed_csr_identical(weights: str) -> None:
    """A CSR that is not symmetric (built by hand, so not marked symmetric)
    contracts like the torch reference: rows are sorted one by one, not by
    the transpose shortcut that only symmetric builders' graphs take."""
    n = 200
    g = torch.Generator().manual_seed(11)
    src = torch.randint(0, n, (1500,), generator=g)
    dst = torch.randint(0, n, (1500,), generator=g)
    key = torch.unique(src * n + dst)
    src, dst = key // n, key % n  # one direction only, rows sorted
    w = torch.randint(1, 9, (src.numel(),), generator=g).double()
    if weights == "float":
        w = w / 7
    ptr = torch.zeros(n + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(torch.bincount(src, minlength=n), 0)
    directed = CSRGraph(n, ptr, dst, w)
    labels = torch.randint(0, 30, (n,), generator=g)
    a, b = both(lambda: directed.contract(labels, 30))
    assert same_csr(a, b) and not directed.symmetric and not b.symmetric
    undirected = CSRGraph.from_edges(n, src, dst, w)  # builders mark their graphs
    assert undirected.symmetric and undirected.contract(labels, 30).symmetric


def test_contract_of_a_directed_cycle_identical() -> None:
    """Every row of a directed cycle keeps its length under transposition,
    yet the transpose is another graph: a hand-built CSR never takes the
    transpose shortcut."""
    n = 12
    src = torch.arange(n)
    dst = (src + 1) % n
    ptr = torch.arange(n + 1)
    cycle = CSRGraph(n, ptr, dst, torch.full((n,), 3.0))
    labels = torch.arange(n) // 2 % 5  # pairs of nodes, 5 labels
    a, b = both(lambda: cycle.contract(labels, 5))
    assert same_csr(a, b)


def test_csr_without_edges() -> None:
    e = torch.zeros(0, dtype=torch.long)
    a, b = both(lambda: CSRGraph.from_edges(5, e, e, torch.zeros(0, dtype=torch.float64)))
    assert same_csr(a, b) and a.dst.numel() == 0


@pytest.mark.parametrize("case", ["plain", "cap", "cap_ties", "float", "refine_floor", "priority", "float_nodes",
                                  "float_floor", "refine_zero_edges", "refine_float_edges"])
def test_label_propagation_identical(case: str) -> None:
    n = 400
    src, dst, w = random_edges(n, 2000, seed=3, float_weights=case in ("float", "refine_float_edges"))
    if case == "refine_zero_edges":  # labels of weight 0 are candidates that never win a move
        w[::3] = 0.0
    g = CSRGraph.from_edges(n, src, dst, w)
    nw = torch.randint(1, 4, (n,), generator=torch.Generator().manual_seed(4)).double()
    if case.startswith("float_"):  # non-integral node weights: budgets in integer units (budget_scale)
        nw = nw * 0.7 + torch.rand(n, generator=torch.Generator().manual_seed(5), dtype=torch.float64) / 3
    kw: dict = {"node_weight": nw, "seed": 5, "max_rounds": 25}
    if case == "float_nodes":
        kw.update(cap=float(nw.sum()) / 40, tie_moves=True)
    if case in ("cap", "cap_ties", "float"):
        kw["cap"] = 30.0
    if case == "cap_ties":
        kw["tie_moves"] = True
    if case == "priority":
        kw.update(priority=g.weighted_degree(), tie_moves=True, cap=60.0, gain_tol=1e-3, min_rounds=4)
    if case.startswith("refine") or case == "float_floor":
        P = 4
        kw.update(init=torch.arange(n) % P, num_labels=P, cap=float(nw.sum()) / P * 1.05,
                  floor=float(nw.sum()) / P * 0.95, boundary_only=True)
    a, b = both(lambda: label_propagation(g, **kw))
    assert torch.equal(a.labels, b.labels)
    assert (a.rounds, a.converged, a.moved, a.gains) == (b.rounds, b.converged, b.moved, b.gains)
    assert sum(a.moved) > 0  # the comparison exercised real moves
    # few labels and integral edge weights: the compiled driver's dense label-weight table
    assert b.dense == (case in ("refine_floor", "float_floor", "refine_zero_edges")) and not a.dense


@pytest.mark.parametrize("key", ["nan", "int"])
def test_label_priorities_identical_for_odd_keys(key: str) -> None:
    """The compiled set-up ranks labels by (key, random) as torch's stable
    sort does, also for NaN keys (last) and integer keys."""
    n = 300
    src, dst, w = random_edges(n, 1500, seed=6)
    g = CSRGraph.from_edges(n, src, dst, w)
    pri = g.weighted_degree()
    if key == "nan":
        pri[::7] = float("nan")
    else:
        pri = (pri // 3).to(torch.long)  # many ties: the random order decides
    a, b = both(lambda: label_propagation(g, seed=2, max_rounds=10, cap=25.0, tie_moves=True, priority=pri))
    assert torch.equal(a.labels, b.labels) and a.moved == b.moved and sum(a.moved) > 0


@pytest.mark.parametrize("n,m", [(500, 4000), (2500, 12000)])
def test_dense_label_table_matches_row_scan(monkeypatch: pytest.MonkeyPatch, n: int, m: int) -> None:
    """The dense [n, L] table and the row scan of the compiled driver give the
    same rounds (rank-level refinement of a PGC-like start); the larger graph
    is above PARALLEL_MIN_ENTRIES, where the table is built in parallel."""
    P = 6
    src, dst, w = random_edges(n, m, seed=8)
    g = CSRGraph.from_edges(n, src, dst, w * 64)
    nw = torch.randint(1, 9, (n,), generator=torch.Generator().manual_seed(9)).double()
    kw = dict(node_weight=nw, init=torch.randperm(n, generator=torch.Generator().manual_seed(1)) % P, num_labels=P,
              cap=float(nw.sum()) / P * 1.04, floor=float(nw.sum()) / P * 0.96, boundary_only=True, seed=3,
              max_rounds=30, tie_moves=True)
    with use_backend("numba"):
        dense = label_propagation(g, **kw)
        monkeypatch.setattr(kernels.lp, "DENSE_MAX_LABELS", 0)
        rows = label_propagation(g, **kw)
    assert dense.dense and not rows.dense and sum(dense.moved) > 50
    assert torch.equal(dense.labels, rows.labels)
    assert (dense.rounds, dense.moved, dense.gains) == (rows.rounds, rows.moved, rows.gains)


@pytest.mark.parametrize("coarsen", [True, False])
@pytest.mark.parametrize("model", ["tgcn", "dysat"])
def test_pgc_identical_across_backends(coarsen: bool, model: str) -> None:
    s = random_signal(7, T=8, V=120, deg=4)
    pat = weighted_preset(model)
    a = partition_pgc(s, 4, pat, seed=1, coarsen=coarsen, backend="torch")
    b = partition_pgc(s, 4, pat, seed=1, coarsen=coarsen, backend="numba")
    assert a.meta["backend"] == "torch" and b.meta["backend"] == "numba"
    assert torch.equal(a.owner, b.owner) and torch.equal(a.chunk, b.chunk)
    assert a.meta["candidates"] == b.meta["candidates"] and a.meta["level_rounds"] == b.meta["level_rounds"]


def test_pgc_identical_on_communities() -> None:
    s = community_signal(T=6, k=4, size=15)
    a = partition_pgc(s, 4, None, seed=0, backend="torch", start_margin=None)
    b = partition_pgc(s, 4, None, seed=0, backend="numba", start_margin=None)
    assert torch.equal(a.owner, b.owner) and torch.equal(a.chunk, b.chunk)


def test_backend_selection_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYG_DYNSCALE_LP_BACKEND", raising=False)
    assert backend.backend() == "numba"  # auto, numba installed
    with use_backend("torch") as used:
        assert used == "torch" and backend.backend() == "torch"
        with use_backend(None) as inner:
            assert inner == "torch"
    assert backend.backend() == "numba"
    monkeypatch.setenv("PYG_DYNSCALE_LP_BACKEND", "torch")
    assert backend.backend() == "torch"
    monkeypatch.setenv("PYG_DYNSCALE_LP_BACKEND", "cuda")
    with pytest.raises(PartitionError, match="PYG_DYNSCALE_LP_BACKEND"):
        backend.backend()
    monkeypatch.delenv("PYG_DYNSCALE_LP_BACKEND")
    with pytest.raises(PartitionError, match="backend"):
        partition_pgc(random_signal(0), 2, None, backend="gpu")
    assert backend.backend() == "numba"  # the failed call restored the setting


def test_missing_numba_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "HAVE_NUMBA", False)
    from pyg_dynscale.errors import MissingDependencyError

    with pytest.raises(MissingDependencyError, match="numba"):
        with use_backend("numba"):
            pass
    with use_backend("auto") as used:  # auto falls back to the torch reference
        assert used == "torch"


def random_chunk_graph(rng, C: int, draws: int, max_weight: int):
    """A chunk graph on ``C`` chunks from ``draws`` random pairs (deduplicated)
    with integer byte weights in ``[1, max_weight)``."""
    import numpy as np

    from pyg_dynscale.partition.pgc.assign import ChunkGraph

    a, b = rng.integers(0, C, draws), rng.integers(0, C, draws)
    keep = a < b
    pairs = np.unique(np.stack([a[keep], b[keep]], 1), axis=0)
    return ChunkGraph.from_pairs(C, pairs[:, 0], pairs[:, 1], rng.integers(1, max_weight, len(pairs)).astype(float))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("P", [2, 5])
def test_refine_chunks_identical(seed: int, P: int) -> None:
    """Balance + cut phases (single moves and swaps) of the chunk refinement."""
    import numpy as np

    from pyg_dynscale.partition.pgc.assign import refine_chunks

    rng = np.random.default_rng(seed)
    C = 60
    g = random_chunk_graph(rng, C, 300, 50)
    cost = rng.integers(1, 20, C).astype(float)
    cost[:3] = 60.0  # chunks too large to move alone: only swaps move them
    owner = np.zeros(C, dtype=np.int64)  # everything on rank 0: the balance phase must act
    owner[C // 2:] = rng.integers(0, P, C - C // 2)
    with use_backend("torch"):
        ref = refine_chunks(g, cost, owner, P, slack=0.05)
    with use_backend("numba"):
        got = refine_chunks(g, cost, owner, P, slack=0.05)
    assert np.array_equal(ref, got) and not np.array_equal(ref, owner)
    assert np.array_equal(owner[: C // 2], np.zeros(C // 2))  # the input was not modified
    g.w = g.w * 0.37  # float affinities: the compiled sums keep numpy's add.at order
    aff = {}
    for be in ("torch", "numba"):
        with use_backend(be):
            aff[be] = g.affinity(got, P)
    assert np.array_equal(aff["torch"], aff["numba"]) and aff["numba"].sum() > 0


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("P", [3, 8])
def test_assign_chunks_identical(seed: int, P: int) -> None:
    """Algorithm 1 compiled: same ranks as the numpy loop, including chunks
    that fit nowhere and chunks without affinity (empty ranks, Eq. 3's epsilon)."""
    import numpy as np

    from pyg_dynscale.partition.pgc.assign import assign_chunks

    rng = np.random.default_rng(seed)
    C = 80
    g = random_chunk_graph(rng, C, 200, 9)
    cost = rng.integers(1, 6, C).astype(float)
    cost[:2] = 3 * cost.sum() / P  # too big for any rank's band
    with use_backend("torch"):
        ref = assign_chunks(g, cost, P, slack=0.03)
    with use_backend("numba"):
        got = assign_chunks(g, cost, P, slack=0.03)
    assert np.array_equal(ref, got) and set(ref.tolist()) == set(range(P))


def symmetric_signal(seed: int = 0, T: int = 6, V: int = 50, deg: int = 3):
    """An undirected signal: every snapshot stores both directions of each edge."""
    import numpy as np

    from pyg_dynscale import DynamicGraphSignal

    rng = np.random.default_rng(seed)
    node_ids, edges = [], []
    for _ in range(T):
        ids = np.sort(rng.choice(V, size=int(rng.integers(V // 2, V + 1)), replace=False))
        e = rng.integers(0, ids.size, size=(2, deg * ids.size))
        edges.append(np.concatenate([e, e[::-1]], 1))
        node_ids.append(ids)
    feats = [np.ones((ids.size, 1)) for ids in node_ids]
    return DynamicGraphSignal(edges, None, feats, None, node_ids=node_ids, num_vertices=V)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("segments", ["none", "short", "whole"])
@pytest.mark.parametrize("weights", ["tgcn", "dysat", "float"])
def test_supergraph_csr_matches_reference(symmetric: bool, segments: str, weights: str) -> None:
    """The level-0 builder (segment map applied on the fly, symmetric fast
    path, entries pre-merged before the transpose when segments collapse
    many edges: "whole" sequences of 12 vertices over 20 snapshots) equals
    CSRGraph.from_edges over the explicit edge lists."""
    from pyg_dynscale.partition.compiled import csr
    from pyg_dynscale.partition.pgc.coarsen import (
        segment_sequences, supergraph_csr, supergraph_cut, temporal_edge_weights, temporal_weights,
    )
    from pyg_dynscale.partition.pgc.pipeline import edge_weights

    V, T = (12, 20) if segments == "whole" else (50, 6)
    s = symmetric_signal(3, T=T, V=V) if symmetric else random_signal(3, T=T, V=V)
    sg = s.supergraph()
    pat = (0.1, 0.3) if weights == "float" else weighted_preset(weights)
    ws, tw = edge_weights(pat)[0], temporal_edge_weights(sg, pat)
    seg, S = None, None
    if segments != "none":
        seg, S = segment_sequences(sg, torch.ones(sg.num_nodes, dtype=torch.float64),
                                   2.5 if segments == "short" else float("inf"))
    got = supergraph_csr(sg, ws, tw, seg, S)
    if weights in ("tgcn", "float"):  # recurrent: the constant temporal weight builds the same graph
        const = temporal_weights(sg, pat)
        assert isinstance(const, float) and torch.equal(tw, torch.full_like(tw, const))
        for be in ("numba", "torch"):
            with use_backend(be):
                assert same_csr(supergraph_csr(sg, ws, const, seg, S), got)
                owner = torch.arange(sg.num_nodes) % 3
                assert supergraph_cut(sg, owner, ws, const) == pytest.approx(supergraph_cut(sg, owner, ws, tw), rel=1e-12)
    else:
        assert isinstance(temporal_weights(sg, pat), torch.Tensor)  # attention: per-edge weights
    m = (lambda x: x) if seg is None else (lambda x: seg[x])
    src = torch.cat([m(sg.spatial_edge_index[0]), m(sg.temporal_edge_index[0])])
    dst = torch.cat([m(sg.spatial_edge_index[1]), m(sg.temporal_edge_index[1])])
    w = torch.cat([torch.full((sg.num_spatial_edges,), ws, dtype=torch.float64), tw])
    with use_backend("torch"):
        ref = CSRGraph.from_edges(sg.num_nodes if seg is None else S, src, dst, w)
        ref_torch_path = supergraph_csr(sg, ws, tw, seg, S)
    assert same_csr(got, ref) and same_csr(ref_torch_path, ref)
    if segments == "whole":  # the pre-merge branch ran: rows keep few distinct neighbours
        assert got.dst.numel() < 0.5 * csr.PREMERGE_MAX_KEPT * src.numel()


@pytest.mark.parametrize("cap", [0.35, 2.5, 7.0, float("inf")])
def test_segment_sequences_identical(cap: float) -> None:
    """The one-pass compiled segmentation equals the torch steps (same
    float prefix arithmetic) for fractional node costs and any cap."""
    from pyg_dynscale.partition.pgc.coarsen import segment_sequences

    sg = random_signal(5, T=12, V=40).supergraph()
    cost = torch.rand(sg.num_nodes, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 1.7 + 0.01
    a, b = both(lambda: segment_sequences(sg, cost, cap))
    assert a[1] == b[1] and torch.equal(a[0], b[0])
    assert (a[1] == sg.sequence_ptr.numel() - 1) == (cap == float("inf")) and a[1] > 1


def test_placement_types_narrow_only_when_exact() -> None:
    """Entries are placed as int32 / float32 only when nothing is lost:
    float32 weights need the constant and every weight array to survive a
    float32 round trip."""
    import numpy as np

    from pyg_dynscale.partition.compiled import csr

    ints = np.array([8.0, 256.0, 3.0 * 2 ** 20])
    ids, ws = csr.placement_types(1000, 16.0, ints)
    assert ids.dtype == np.int32 and ws.dtype == np.float32
    assert csr.placement_types(1000, 0.1, ints)[1].dtype == np.float64  # 0.1 is not a float32
    assert csr.placement_types(1000, 8.0, np.array([1.0, 1e-10]))[1].dtype == np.float64
    assert csr.placement_types(1000, 8.0, np.zeros(0))[1].dtype == np.float32
    assert csr.placement_types(2 ** 31, 8.0)[0].dtype == np.int64


def test_supergraph_csr_with_a_fractional_spatial_weight() -> None:
    """A spatial weight that is not a float32 (0.1) next to whole temporal
    weights keeps float64 placement: the CSR equals the reference."""
    from pyg_dynscale.partition.pgc.coarsen import segment_sequences, supergraph_csr

    s = random_signal(4, T=6, V=50)
    sg = s.supergraph()
    tw = torch.full((sg.num_temporal_edges,), 2.0, dtype=torch.float64)
    seg, S = segment_sequences(sg, torch.ones(sg.num_nodes, dtype=torch.float64), 2.5)
    for m, n in ((None, None), (seg, S)):
        got = supergraph_csr(sg, 0.1, tw, m, n)
        with use_backend("torch"):
            ref = supergraph_csr(sg, 0.1, tw, m, n)
        assert same_csr(got, ref)


@pytest.mark.parametrize("start", ["pss", "pts"])
@pytest.mark.parametrize("model", ["tgcn", "dysat"])
def test_start_cut_by_units_equals_the_supergraph_cut(start: str, model: str) -> None:
    """A multi-start candidate's unrefined cut counted between its units
    (snapshots: temporal edges; vertices: spatial edges) equals the cut of
    its expanded owner over all supergraph edges, on both backends."""
    from pyg_dynscale.partition.pgc.coarsen import supergraph_cut, temporal_edge_weights
    from pyg_dynscale.partition.pgc.starts import _Start
    from pyg_dynscale.partition.costs.workload import LinearWorkload

    s = random_signal(9, T=10, V=70)
    sg = s.supergraph()
    pat = weighted_preset(model)
    ws, tw = pat.spatial_edge_weight(), temporal_edge_weights(sg, pat)
    node_w = LinearWorkload().node_costs(s).double()
    for be in ("torch", "numba"):
        with use_backend(be):
            st = _Start.make(start, s, 4, node_w)
            owner = st.owner()
            assert torch.equal(owner, partition(s, start, 4, balanced=True).owner)
            full = supergraph_cut(sg, owner, ws, tw)
            assert st.cut(sg, ws, tw) == pytest.approx(full, rel=1e-12) and full > 0


def test_premerge_rows_sums_in_entry_order() -> None:
    """_premerge_rows keeps each value's first position and sums its weights
    in entry order: after a per-row sort it equals a sequential sort-and-merge."""
    import numpy as np

    from pyg_dynscale.partition.compiled import csr

    rng = np.random.default_rng(0)
    n = 30
    deg = rng.integers(0, 40, n)
    ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    b = rng.integers(0, n, ptr[-1]).astype(np.int64)
    w = rng.random(ptr[-1]) * 10
    p2, b2, w2 = csr._premerge_rows(ptr, b.copy(), w.copy(), 2)
    for v in range(n):
        sums: dict[int, float] = {}
        for x, y in zip(b[ptr[v]:ptr[v + 1]].tolist(), w[ptr[v]:ptr[v + 1]].tolist()):
            sums[x] = sums.get(x, 0.0) + y  # in entry order
        row = b2[p2[v]:p2[v + 1]].tolist()
        assert row == list(sums)  # first-occurrence order, no duplicates
        assert w2[p2[v]:p2[v + 1]].tolist() == list(sums.values())  # bit-equal sums


def test_symmetry_tests() -> None:
    import numpy as np

    from pyg_dynscale.partition.compiled import csr

    src, dst, w = random_edges(40, 200, seed=5, hub=False)
    g = CSRGraph.from_edges(40, src, dst, w)  # undirected: symmetric
    ptr, d, wt = g.ptr.numpy(), g.dst.numpy(), g.weight.double().numpy()
    assert csr.is_symmetric(ptr, d, wt, 2)
    bad = wt.copy()
    bad[7] += 1.0  # one direction heavier
    assert not csr.is_symmetric(ptr, d, bad, 2)
    one_way = CSRGraph(40, torch.tensor([0, 1] + [1] * 39), torch.tensor([1]), torch.tensor([1.0]))
    assert not csr.is_symmetric(one_way.ptr.numpy(), one_way.dst.numpy(), one_way.weight.numpy(), 1)
    s, t = np.array([0, 1, 2, 1]), np.array([1, 0, 1, 2])
    assert csr.maybe_symmetric(3, s, t)
    assert not csr.maybe_symmetric(3, s[:3], t[:3])  # 2 -> 1 has no 1 -> 2
    assert not csr.maybe_symmetric(4, np.array([0, 1, 2]), np.array([1, 2, 0]))  # a cycle: degrees agree


def test_stable_argsort_is_torch_stable_sort() -> None:
    """The radix sort behind label priorities: the same permutation as a
    stable torch sort (ties in input order, -0.0 == 0.0, both digit widths)."""
    for n in (0, 1, 7, 3000, 140_000):
        g = torch.Generator().manual_seed(n)
        for keys in (torch.randint(0, 9, (n,), generator=g).double() * 2.5 - 7.0,
                     torch.randn(n, generator=g, dtype=torch.float64) * 1e300):
            if n > 3:
                keys[:3] = torch.tensor([-0.0, 0.0, -0.0])
            assert torch.equal(torch.from_numpy(kernels.lp.stable_argsort(keys.numpy())), torch.sort(keys, stable=True).indices)


def test_compact_labels_identical() -> None:
    """compact_labels: the presence-array kernel == torch.unique (and its
    fallback for sparse label ranges)."""
    from pyg_dynscale.partition.pgc.label_propagation import compact_labels

    g = torch.Generator().manual_seed(0)
    for labels in (torch.randint(0, 50, (300,), generator=g), torch.randint(0, 5, (7,), generator=g) * 1000,
                   torch.tensor([3]), torch.randint(0, 2 ** 40, (20,), generator=g)):
        uniq, inv = torch.unique(labels, return_inverse=True)
        for be in ("numba", "torch"):
            with use_backend(be):
                got, C = compact_labels(labels)
            assert torch.equal(got, inv) and C == uniq.numel()


def test_half_masks_identical_and_balanced() -> None:
    import numpy as np

    from pyg_dynscale.partition.pgc.label_propagation import half_bits

    for seed, pair in ((0, 0), (7, 3), (2**40 + 5, 11)):
        ref = half_bits(seed, pair, 5000)
        out = np.zeros(5000, np.bool_)
        kernels.lp.half_mask(seed, pair, 5000, out)
        assert np.array_equal(ref.numpy(), out) and 0.45 < float(ref.double().mean()) < 0.55
    assert not torch.equal(half_bits(0, 0, 5000), half_bits(0, 1, 5000))  # fresh halves every pair of rounds


def test_cut_and_degree_kernels_match_torch() -> None:
    from pyg_dynscale.partition.pgc.coarsen import supergraph_cut, temporal_edge_weights

    src, dst, w = random_edges(300, 1500, seed=8, float_weights=False)
    g = CSRGraph.from_edges(300, src, dst, w)
    labels = torch.randint(0, 7, (300,), generator=torch.Generator().manual_seed(1))
    a, b = both(lambda: (g.cut(labels), g.weighted_degree()))
    assert a[0] == b[0] > 0 and torch.equal(a[1], b[1])
    s = random_signal(2)
    sg = s.supergraph()
    pat = weighted_preset("dysat", 2)
    own = torch.randint(0, 3, (sg.num_nodes,), generator=torch.Generator().manual_seed(2))
    ca, cb = both(lambda: supergraph_cut(sg, own, pat.spatial_edge_weight(), temporal_edge_weights(sg, pat)))
    assert ca == cb > 0


@pytest.mark.skipif(backend.HAVE_NUMBA and jit.numba.config.NUMBA_NUM_THREADS < 2,
                    reason="needs two numba threads (one core)")
def test_results_do_not_depend_on_thread_count() -> None:
    """Above PARALLEL_MIN_ENTRIES a round is split over threads and the CSR
    builders split edges and rows: one thread and two give the same bits."""
    n = 3000
    src, dst, w = random_edges(n, 40000, seed=9, float_weights=True)
    runs = []
    for th in (1, 2):
        with backend.use_threads(th) as used:
            assert used == th
            g = CSRGraph.from_edges(n, src, dst, w)
            assert g.dst.numel() > kernels.lp.PARALLEL_MIN_ENTRIES
            lp = label_propagation(g, node_weight=torch.ones(n, dtype=torch.float64), cap=40.0, seed=3,
                                   max_rounds=8, tie_moves=True, priority=g.weighted_degree())
            runs.append((g, lp, g.contract(lp.labels, n)))
    (g1, l1, c1), (g2, l2, c2) = runs
    assert same_csr(g1, g2) and same_csr(c1, c2)
    assert torch.equal(l1.labels, l2.labels) and l1.moved == l2.moved and sum(l1.moved) > 0
    s = symmetric_signal(4, T=8, V=400, deg=4)
    pat = weighted_preset("tgcn")
    a, b = (partition_pgc(s, 4, pat, seed=0, threads=th) for th in (1, 2))
    assert a.meta["threads"] == 1 and b.meta["threads"] == 2
    assert torch.equal(a.owner, b.owner) and torch.equal(a.chunk, b.chunk)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_contraction_of_small_whole_weights_skips_the_scans(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """The byte-weight supergraph (whole, non-negative weights summing below
    2^24) contracts to float32 sums marked integral without scanning them;
    the result equals the scanned contraction of the same graph unmarked."""
    from pyg_dynscale.partition.pgc.coarsen import supergraph_csr

    s = random_signal(5, T=6, V=80, deg=3)
    with use_backend("numba"):
        marked = supergraph_csr(s.supergraph(), 16.0, 256.0)
    n = marked.num_nodes
    labels = torch.randint(0, 40, (n,), generator=torch.Generator().manual_seed(2))
    with use_backend(backend):
        plain = CSRGraph(n, marked.ptr, marked.dst, marked.weight, symmetric=True)
        assert marked.weight.dtype == torch.float32 and marked._abs_bound == 2 * marked.total_weight() < 2 ** 24
        ref = plain.contract(labels, 40)
        assert ref._integral is None  # unknown: a later integral() scans

        def no_scan(*_: object) -> bool:
            raise AssertionError("scanned the contracted weights")

        with monkeypatch.context() as mp:
            mp.setattr(kernels.csr, "exact_in_float32", no_scan)
            mp.setattr(kernels.lp, "is_integral", no_scan)
            mp.setattr("pyg_dynscale.partition.pgc.label_propagation._exact_in_float32", no_scan)
            got = marked.contract(labels, 40)
            assert got._integral is True and got.integral() and got.weight.dtype == torch.float32
            assert got._abs_bound == marked._abs_bound  # inherited: the next level skips its scans too
        assert same_csr(got, ref)


def test_whole_weights_of_either_sign_are_scanned_when_contracted() -> None:
    """Whole weights whose total is small but whose sums are not (negative
    weights cancel in the total): without a known bound the contraction
    checks the float32 round trip -- sums of 2^24 + 1 stay float64."""
    n = 6
    src, dst = torch.tensor([0, 1, 2, 3]), torch.tensor([4, 4, 5, 5])
    w = torch.tensor([2.0 ** 24, 1.0, -(2.0 ** 24), -1.0])
    g = CSRGraph.from_edges(n, src, dst, w)
    assert g.integral() and g._abs_bound is None and abs(g.total_weight()) < 1
    c = g.contract(torch.tensor([0, 0, 1, 1, 2, 3]), 4)
    assert c.weight.dtype == torch.float64 and sorted(c.weight.tolist()) == sorted([2.0 ** 24 + 1] * 2 + [-(2.0 ** 24) - 1] * 2)


def test_supergraph_csr_marks_whole_weights_integral() -> None:
    """The weighted supergraph of byte weights is known integral when built
    (label propagation and contraction then skip their scans)."""
    from pyg_dynscale.partition.pgc.coarsen import supergraph_csr

    s = random_signal(3, T=6, V=80, deg=3)
    sg = s.supergraph()
    with use_backend("numba"):
        assert supergraph_csr(sg, 16.0, 256.0)._integral is True
        assert supergraph_csr(sg, 0.5, 256.0)._integral is None  # a fraction: left to integral()


@pytest.mark.skipif(not backend.HAVE_NUMBA, reason="numba's thread setting")
def test_threads_reads_the_count_in_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside use_threads, threads() is the count put in effect (nested blocks
    restore the outer one) without asking numba each time."""
    outside = backend.threads()
    with backend.use_threads(1) as one:
        monkeypatch.setattr(jit.numba, "get_num_threads", lambda: 99)  # not consulted inside the block
        assert one == 1 and backend.threads() == 1
        monkeypatch.undo()
        with backend.use_threads(None) as same:
            assert same == 1 and backend.threads() == 1
        assert backend.threads() == 1
    assert backend.threads() == outside
