"""PSS / PTS / PSS-TS schemes, the dispatcher and their error messages."""
from __future__ import annotations

import itertools

import numpy as np

import pytest
import torch

from tests.helpers.signals import make_dynamic_signal
from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import (
    DependencyPattern, Partition, default_node_cost, partition, partition_pss, partition_pss_ts, partition_pts,
)
from pyg_dynscale.partition.compiled import kernels
from pyg_dynscale.partition.schemes import snapshot_sequence as schemes_mod
from pyg_dynscale.partition.metrics import evaluate


@pytest.fixture
def sig():
    return make_dynamic_signal(seed=3, T=9, V=20)


def test_pss_baseline_equal_snapshot_counts_and_contiguous(sig):
    p = partition_pss(sig, 3)
    sg = sig.supergraph()
    nonempty = (sig.nodes_per_snapshot > 0).nonzero().flatten()
    snap_rank = [int(p.owner[sig.node_ptr[t]]) for t in nonempty.tolist()]
    assert snap_rank == sorted(snap_rank)  # contiguous ranges in time order
    counts = torch.bincount(torch.tensor(snap_rank), minlength=3)
    assert int(counts.max() - counts.min()) <= 1
    # owner is constant inside each snapshot: no spatial edge is cut
    s, d = sg.spatial_edge_index
    assert bool((p.owner[s] == p.owner[d]).all())
    assert p.fingerprint == sig.fingerprint() and p.scheme == "pss"


def test_pss_balanced_is_optimal_bottleneck(sig):
    R = 3
    cost = default_node_cost(sig)
    p = partition_pss(sig, R, balanced=True)
    load = torch.zeros(R, dtype=torch.float64).index_add_(0, p.owner, cost)
    # brute force over all contiguous splits of the non-empty snapshots
    T = sig.num_snapshots
    snap = torch.repeat_interleave(torch.arange(T), sig.nodes_per_snapshot)
    per = torch.zeros(T, dtype=torch.float64).index_add_(0, snap, cost)
    per = per[sig.nodes_per_snapshot > 0].tolist()
    best = min(max(sum(per[a:b]) for a, b in zip((0,) + c, c + (len(per),)))
               for c in itertools.combinations(range(1, len(per)), R - 1))
    assert float(load.max()) == pytest.approx(best)
    assert float(load.min()) > 0


def test_pss_custom_workload_moves_boundaries(sig):
    N = sig.num_vertex_time_nodes
    w = torch.zeros(N, dtype=torch.float64)
    w[: int(sig.node_ptr[2])] = 100.0  # first two snapshots dominate
    w[int(sig.node_ptr[2]):] = 1.0
    p = partition_pss(sig, 2, balanced=True, workload=w)
    assert p.meta["snapshot_ranges"][0][1] <= 2

    class Model:
        def node_cost(self, signal):
            return w

    q = partition_pss(sig, 2, balanced=True, workload=Model())
    assert torch.equal(p.owner, q.owner)


def test_pts_keeps_sequences_whole(sig):
    sg = sig.supergraph()
    u, v = sg.temporal_edge_index
    for bal in (False, True):
        p = partition_pts(sig, 4, balanced=bal)
        assert bool((p.owner[u] == p.owner[v]).all())
        # every vertex's appearances on one rank
        per_vertex = {}
        for vert, o in zip(sg.vertex.tolist(), p.owner.tolist()):
            per_vertex.setdefault(vert, set()).add(o)
        assert all(len(s) == 1 for s in per_vertex.values())
    base = partition_pts(sig, 4)
    nseq = torch.bincount(base.owner[sg.sequence_order[sg.sequence_ptr[:-1]]], minlength=4)
    assert int(nseq.max() - nseq.min()) <= 1


def test_pts_balanced_beats_baseline_and_lpt_fill(sig, monkeypatch):
    pat = DependencyPattern.preset("tgcn", 2, 2)
    lam_b = evaluate(sig, pat, partition_pts(sig, 3, balanced=True)).lambda_
    lam_u = evaluate(sig, pat, partition_pts(sig, 3)).lambda_
    assert lam_b <= lam_u
    # vectorized fill path: exact LPT on only 3 items, the rest filled
    cost = torch.rand(5000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    monkeypatch.setattr(schemes_mod, "LPT_EXACT_ITEMS", 3)
    a = schemes_mod._lpt(cost, 7)
    load = torch.zeros(7, dtype=torch.float64).index_add_(0, a, cost)
    assert float(load.max() - load.min()) <= 2 * float(cost.max())
    assert a.min() >= 0 and a.max() < 7


@pytest.mark.parametrize("ints", [False, True])
def test_compiled_lpt_and_linear_partition_match_python(ints: bool):
    """The numba loops of the balanced schemes (compiled.schemes) give the
    reference's bins and bounds, ties included (integer costs tie often).
    (``_linear_partition`` has no compiled twin of its own -- under numba the
    balanced PSS runs whole in ``pss_balanced`` -- so its bounds are compared
    with the compiled bisection ``linear_bounds`` directly.)"""
    pytest.importorskip("numba")
    from pyg_dynscale.partition.compiled.backend import use_backend

    g = torch.Generator().manual_seed(int(ints))
    for T, R in ((1, 1), (9, 3), (40, 7), (300, 16), (12, 12)):
        cost = torch.randint(0, 5, (T,), generator=g).double() if ints else torch.rand(T, generator=g, dtype=torch.float64)
        cost[0] += 1.0  # at least one positive cost
        res = {}
        for be in ("numba", "torch"):
            with use_backend(be):
                res[be] = schemes_mod._lpt(cost, R)
        assert torch.equal(res["numba"], res["torch"]), (T, R)
        pre = np.concatenate([np.zeros(1), np.cumsum(cost.numpy())])  # as _linear_partition makes them
        lo, hi = float(cost.max()), float(pre[-1])
        bounds = schemes_mod._bottleneck_bounds(pre, R, lo, hi)  # no twin: the one implementation
        assert kernels.schemes.linear_bounds(pre, R, lo, hi).tolist() == bounds, (T, R)


@pytest.mark.parametrize("scheme", ["pss", "pts"])
@pytest.mark.parametrize("balanced", [False, True])
@pytest.mark.parametrize("ints", [False, True])
def test_schemes_identical_across_backends(scheme: str, balanced: bool, ints: bool):
    """The compiled per-snapshot / per-sequence passes of PSS and PTS
    (balanced: one compiled call each) give the torch steps' owners, for
    fractional costs (same summation order) and integer ones (ties)."""
    pytest.importorskip("numba")
    from pyg_dynscale.partition.compiled.backend import use_backend

    s = make_dynamic_signal(seed=7, T=14, V=60)
    g = torch.Generator().manual_seed(2)
    N = s.num_vertex_time_nodes
    cost = torch.randint(0, 3, (N,), generator=g).double() if ints else torch.rand(N, generator=g, dtype=torch.float64) * 3
    owners = {}
    for be in ("numba", "torch"):
        with use_backend(be):
            owners[be] = partition(s, scheme, 4, balanced=balanced, workload=cost).owner
    assert torch.equal(owners["numba"], owners["torch"])
    assert set(owners["numba"].tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize("ints", [False, True])
def test_compiled_pss_ranks_match_the_torch_steps(ints: bool):
    """compiled.schemes.pss_balanced (the numba path of pss_snapshot_ranks)
    returns the torch steps' ranks, non-empty snapshots, bounds and loads --
    with empty snapshots, with as many ranks as non-empty snapshots, and
    with a heavy snapshot that leaves the bisection fewer ranges than ranks
    (the extra splits)."""
    pytest.importorskip("numba")
    from pyg_dynscale.partition.compiled.backend import use_backend

    s = make_dynamic_signal(seed=10, T=16, V=30)  # 13 of 16 snapshots non-empty
    N = s.num_vertex_time_nodes
    g = torch.Generator().manual_seed(int(ints))
    nonempty = int(((s.node_ptr[1:] - s.node_ptr[:-1]) > 0).sum())
    assert nonempty < s.num_snapshots
    heavy = torch.zeros(N, dtype=torch.float64)
    heavy[: int(s.node_ptr[1])] = 1000.0  # snapshot 0 outweighs the rest: the bisection leaves ranges unused
    costs = [torch.randint(0, 4, (N,), generator=g).double() if ints else torch.rand(N, generator=g, dtype=torch.float64),
             heavy + 1.0]
    for cost, R in itertools.product(costs, (1, 3, 7, nonempty)):
        res = {}
        for be in ("numba", "torch"):
            with use_backend(be):
                res[be] = schemes_mod.pss_snapshot_ranks(s, R, True, None, cost=cost)
        for a, b in zip(res["numba"], res["torch"]):
            assert torch.equal(a, b), (R, a, b)
        assert res["numba"][2].numel() == R + 1 and float(res["numba"][3].sum()) == pytest.approx(float(cost.sum()))
    with use_backend("numba"), pytest.raises(PartitionError, match="non-empty"):
        schemes_mod.pss_snapshot_ranks(s, nonempty + 1, True, None, cost=costs[0])


def test_pss_ts_owners(sig):
    p = partition_pss_ts(sig, 3, balanced=True)
    assert torch.equal(p.owner, partition_pss(sig, 3, balanced=True).owner)
    assert torch.equal(p.time_owner, partition_pts(sig, 3, balanced=True).owner)
    # DGC's T-GCN (2-layer GCNs): its second layer would move per-epoch spatial rows
    # across a cut (a one-layer T-GCN moves only raw features, loaded once: 0 bytes anyway)
    pat = DependencyPattern.preset("tgcn", 2, 2, gcn_layers=2)
    m = evaluate(sig, pat, p)
    assert m.cut_spatial_edges == 0 and m.cut_temporal_edges == 0
    assert m.bytes_spatial == 0 and m.bytes_temporal == 0 and m.bytes_redistribution > 0
    assert evaluate(sig, pat, partition_pts(sig, 3, balanced=True)).bytes_spatial > 0  # the zero above is not trivial


def test_dispatcher_and_errors(sig):
    N = sig.num_vertex_time_nodes
    assert partition(sig, "PSS_TS", 2).scheme == "pss-ts"
    with pytest.raises(PartitionError, match="scheme.*pss"):
        partition(sig, "metis", 2)
    for bad in (0, -1):
        with pytest.raises(PartitionError, match="num_parts.*>= 1"):
            partition(sig, "pts", bad)
    with pytest.raises(PartitionError, match="num_parts.*vertex-time nodes"):
        partition(sig, "pts", N + 1)
    with pytest.raises(PartitionError, match="num_parts.*snapshots"):
        partition(sig, "pss", 30)
    with pytest.raises(PartitionError, match="num_parts.*sequences"):
        partition(sig, "pts", 21)
    with pytest.raises(PartitionError, match="workload"):
        partition(sig, "pss", 2, balanced=True, workload=torch.ones(3))
    with pytest.raises(PartitionError, match="workload"):
        partition(sig, "pts", 2, balanced=True, workload=-torch.ones(N))
    with pytest.raises(PartitionError, match="signal"):
        partition([1, 2], "pss", 2)


def test_pgc_dispatch_reaches_pgc_module(sig, monkeypatch):
    from pyg_dynscale.partition.schemes import dispatch

    calls = {}

    def partition_pgc(signal, num_parts, pattern, seed=0, **opts):
        calls.update(num_parts=num_parts, pattern=pattern, seed=seed, opts=opts)
        return Partition("pgc", num_parts, torch.zeros(signal.num_vertex_time_nodes, dtype=torch.long))

    monkeypatch.setattr(dispatch, "partition_pgc", partition_pgc)
    pat = DependencyPattern.preset("dysat", 2, 2)
    p = partition(sig, "pgc", 2, pat, seed=7, cap=3)
    assert p.scheme == "pgc" and calls == {"num_parts": 2, "pattern": pat, "seed": 7, "opts": {"cap": 3}}


def test_partition_validation():
    with pytest.raises(PartitionError, match="owner.*ranks"):
        Partition("x", 2, torch.tensor([0, 2]))
    with pytest.raises(PartitionError, match="time_owner.*shape"):
        Partition("x", 2, torch.tensor([0, 1]), time_owner=torch.tensor([0]))
    with pytest.raises(PartitionError, match="num_parts"):
        Partition("x", 0, torch.tensor([0]))
    p = Partition("x", 2, torch.tensor([0, 1, 1]))
    assert p.counts().tolist() == [1, 2]
    sig = make_dynamic_signal(seed=0)
    with pytest.raises(PartitionError, match="owner"):
        p.check_signal(sig)
    q = partition(sig, "pts", 2)
    q.fingerprint = "0" * 64
    with pytest.raises(PartitionError, match="fingerprint"):
        q.check_signal(sig)
