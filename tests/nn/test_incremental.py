"""Incremental aggregation (pyg_dynscale.nn.incremental, ReInc §3.2): incremental == recomputed in float64 for sum,
mean, GCN's symmetric normalization and the Chebyshev basis (K <= 3), against PyG computing every snapshot from
scratch; with edge insertions, deletions, weight changes, feature changes, duplicates, self-loops, an empty snapshot,
a snapshot where everything changes, isolated vertices, changing vertex sets and a long sequence."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn.incremental import IncrementalAggregation, incremental_aggregate
from tests.helpers.evolving import evolving

INF = float("inf")


# ---------------------------------------------------------------------- reference: PyG, snapshot by snapshot
def reference(x, ei, ew, node_ptr, edge_ptr, aggr, K=1, improved=False, add_self_loops=True):
    from torch_geometric.nn import ChebConv
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    from torch_geometric.utils import scatter

    outs = []
    cheb = ChebConv(x.shape[1], 1, K, normalization="sym")
    for t in range(len(node_ptr) - 1):
        a, b, e0, e1 = int(node_ptr[t]), int(node_ptr[t + 1]), int(edge_ptr[t]), int(edge_ptr[t + 1])
        xt, et, wt, n = x[a:b], ei[:, e0:e1], None if ew is None else ew[e0:e1], b - a
        if aggr in ("sum", "mean"):
            w = torch.ones(et.shape[1], dtype=x.dtype) if wt is None else wt
            outs.append(scatter(w[:, None] * xt[et[0]], et[1], 0, dim_size=n, reduce=aggr))
        elif aggr == "gcn":
            e2, w2 = gcn_norm(et, wt, n, improved, add_self_loops, "source_to_target", x.dtype)
            outs.append(scatter(w2[:, None] * xt[e2[0]], e2[1], 0, dim_size=n, reduce="sum"))
        else:
            if n == 0:
                outs.append(xt.new_zeros(0, K, xt.shape[1]))
                continue
            e2, norm = cheb.__norm__(et, n, wt, "sym", None, dtype=x.dtype)
            basis = [xt]
            if K > 1:
                basis.append(cheb.propagate(e2, x=xt, norm=norm))
            for _ in range(2, K):
                basis.append(2.0 * cheb.propagate(e2, x=basis[-1], norm=norm) - basis[-2])
            outs.append(torch.stack(basis, 1))
    return torch.cat(outs)


# ---------------------------------------------------------------------- a slowly changing sequence: tests/helpers/evolving.py
CASES = [("sum", 1), ("mean", 1), ("gcn", 1), ("cheb", 2), ("cheb", 3)]


def _check(x, ei, ew, nptr, eptr, aggr, K, node_id=None, V=None, threshold=INF, refresh=None, **kw):
    inc = IncrementalAggregation(aggr, K, threshold=threshold, refresh=refresh, **kw)
    got = inc(x, ei, ew, nptr, eptr, node_id, V)
    torch.testing.assert_close(got, reference(x, ei, ew, nptr, eptr, aggr, K, **kw), rtol=0, atol=1e-9)
    return inc


@pytest.mark.parametrize("order", ["inplace", "compact", "shuffle"])
@pytest.mark.parametrize("aggr,K", CASES)
def test_incremental_equals_recomputed(aggr, K, order):
    """Insertions, deletions, weight changes, feature changes, duplicates, self-loops, isolated vertices, an empty
    snapshot (5) and one where everything changes (8), every snapshot after the first incremental (threshold inf).
    Edges matched by position where the storage edits its list in place, by key where it compacts or reorders it
    (and for the burst); the kept edges do the work (small change ratios)."""
    data = evolving(seed=1, empty_at=(5,), burst_at=(8,), order=order)
    inc = _check(*data, aggr, K)
    assert [m[0] for m in inc.modes] == ["scratch"] + ["incremental"] * 11
    keyed = {t for t in range(1, 12) if t not in (5, 6) and (order != "inplace" or t == 8)}
    assert inc.diffs == [None] + ["key" if t in keyed else "position" for t in range(1, 12)]
    assert max(inc.ratios[t][0] for t in (1, 2, 3, 4, 7, 9, 10, 11)) < 0.9


@pytest.mark.parametrize("aggr,K", CASES)
def test_unweighted_and_gcn_options(aggr, K):
    data = evolving(seed=2, weighted=False)
    _check(*data, aggr, K)
    if aggr == "gcn":
        _check(*evolving(seed=3), "gcn", 1, improved=True)
        _check(*evolving(seed=4), "gcn", 1, add_self_loops=False)


def test_threshold_switches_to_recomputation():
    """Default threshold: a snapshot where everything changes is aggregated from scratch, small changes are
    incremental; threshold 0 recomputes everything; the result is the same either way."""
    x, ei, ew, nptr, eptr = evolving(seed=5, T=10, E=400, V=200, change=0.01, feat_change=0.01, burst_at=(6,))
    inc = _check(x, ei, ew, nptr, eptr, "cheb", 3, threshold=0.3)
    assert [m[0] for m in inc.modes] == ["scratch"] + ["incremental"] * 5 + ["scratch"] + ["incremental"] * 3
    assert inc.ratios[6][0] > 1.0 and max(r[0] for r in inc.ratios[1:6]) < 0.3
    zero = _check(x, ei, ew, nptr, eptr, "cheb", 3, threshold=0.0)
    assert all(m == "scratch" for ms in zero.modes for m in ms)


def test_refresh_recomputes_periodically():
    data = evolving(seed=6, T=10, change=0.02, feat_change=0.02, V=100, E=300)
    inc = _check(*data, "sum", 1, refresh=3)
    assert [m[0] for m in inc.modes] == ["scratch", "incremental", "incremental", "incremental"] * 2 + ["scratch", "incremental"]


@pytest.mark.parametrize("aggr,K", [("gcn", 1), ("cheb", 3), ("mean", 1)])
def test_long_sequence_does_not_drift(aggr, K):
    """200 snapshots, never recomputed (refresh=None, threshold=inf): still 1e-9 from PyG's recomputation."""
    data = evolving(seed=7, T=200, V=60, E=200, change=0.02, feat_change=0.02)
    inc = _check(*data, aggr, K)
    assert sum(m[0] == "incremental" for m in inc.modes) == 199


def _changing_vertex_sets(seed=8, T=14, V=30, F=3):
    """Vertices appear and disappear a few at a time (one snapshot has none); edges between present vertices, stored
    with local rows; the vertex order inside a snapshot is shuffled."""
    rng = np.random.default_rng(seed)
    present = set(range(V // 2))
    edges = {(int(a), int(b)) for a, b in rng.integers(0, V // 2, size=(40, 2))}
    feats = rng.standard_normal((V, F))
    node_ids, eis, ws, xs = [], [], [], []
    for t in range(T):
        if t:
            for v in rng.choice(V, size=3, replace=False):
                present.symmetric_difference_update({int(v)})
            pv = sorted(present)
            edges = {e for e in edges if e[0] in present and e[1] in present and rng.random() > 0.05}
            if len(pv) > 1:
                edges |= {(int(pv[a]), int(pv[b])) for a, b in rng.integers(0, len(pv), size=(3, 2))}
            feats[rng.choice(V, size=2, replace=False)] = rng.standard_normal((2, F))
        ids = np.array(sorted(present) if t != 9 else [], dtype=np.int64)
        ids = ids[rng.permutation(ids.size)]
        loc = {int(v): i for i, v in enumerate(ids)}
        es = sorted(edges) if t != 9 else []
        eis.append(np.array([[loc[a] for a, _ in es], [loc[b] for _, b in es]], dtype=np.int64).reshape(2, -1))
        ws.append(np.array([(a * 7 + b * 3) % 5 + 1.0 for a, b in es]))
        xs.append(feats[ids])
        node_ids.append(ids)
    nptr = torch.tensor(np.concatenate([[0], np.cumsum([i.size for i in node_ids])]))
    eptr = torch.tensor(np.concatenate([[0], np.cumsum([e.shape[1] for e in eis])]))
    return (torch.tensor(np.concatenate(xs)), torch.tensor(np.concatenate(eis, 1)), torch.tensor(np.concatenate(ws)),
            nptr, eptr, torch.tensor(np.concatenate(node_ids)), V)


@pytest.mark.parametrize("aggr,K", CASES)
def test_changing_vertex_sets(aggr, K):
    x, ei, ew, nptr, eptr, node_id, V = _changing_vertex_sets()
    inc = IncrementalAggregation(aggr, K, threshold=INF, refresh=None)
    got = inc(x, ei, ew, nptr, eptr, node_id, V)
    torch.testing.assert_close(got, reference(x, ei, ew, nptr, eptr, aggr, K), rtol=0, atol=1e-9)
    assert sum(m[0] == "incremental" for m in inc.modes) >= 10


def test_trailing_dimensions_and_functional_form():
    x, ei, ew, nptr, eptr = evolving(seed=9, F=6)
    got = incremental_aggregate(x.view(-1, 2, 3), ei, ew, nptr, eptr, aggr="cheb", K=2, threshold=INF)
    assert got.shape == (x.shape[0], 2, 2, 3)
    torch.testing.assert_close(got.reshape(x.shape[0], 2, 6), reference(x, ei, ew, nptr, eptr, "cheb", 2),
                               rtol=0, atol=1e-9)


def test_non_finite_features_do_not_stick():
    """An inf feature makes its rows inf; once it is gone the rows are finite again (recomputed, not inf - inf)."""
    x, ei, ew, nptr, eptr = evolving(seed=10, T=6)
    V = int(nptr[1])
    x = x.clone()
    x[2 * V:3 * V] = x[V:2 * V]
    x[2 * V + int(ei[0, int(eptr[2])])] = float("inf")
    inc = IncrementalAggregation("sum", threshold=INF, refresh=None)
    got = inc(x, ei, ew, nptr, eptr)
    ref = reference(x, ei, ew, nptr, eptr, "sum")
    assert torch.isinf(got[2 * V:3 * V]).any()
    torch.testing.assert_close(got[3 * V:], ref[3 * V:], rtol=0, atol=1e-9)
    assert inc.modes[3] == ["scratch"]


def test_bad_input_raises_typed_errors():
    x, ei, ew, nptr, eptr = evolving(seed=11, T=3)
    with pytest.raises(ModelInputError, match="aggr"):
        IncrementalAggregation("max")
    with pytest.raises(ModelInputError, match="'K'"):
        IncrementalAggregation("sum", K=2)
    with pytest.raises(ModelInputError, match="threshold"):
        IncrementalAggregation("sum", threshold=-1.0)
    with pytest.raises(ModelInputError, match="refresh"):
        IncrementalAggregation("sum", refresh=0)
    with pytest.raises(ModelInputError, match="edge_weight"):
        incremental_aggregate(x, ei, ew[:-1], nptr, eptr)
    with pytest.raises(ModelInputError, match="node_id"):
        incremental_aggregate(x[:-1], ei, ew, torch.tensor([0, 40, 80, int(x.shape[0]) - 1]), eptr)


@pytest.mark.parametrize("aggr,K", [("gcn", 1), ("cheb", 3)])
def test_reordered_edges_change_nothing(aggr, K):
    """The same weighted graph and features stored in a new edge order every snapshot: degrees summed in another
    order differ in the last bits, which must not count as changes (change ratio 0 at every level)."""
    g = torch.Generator().manual_seed(0)
    pairs = torch.cartesian_prod(torch.arange(25), torch.arange(25)).t()
    ei = pairs[:, torch.randperm(625, generator=g)[:400]]            # distinct edges, self-loops among them
    ew = torch.rand(400, generator=g, dtype=torch.float64) + 0.1
    x, nptr = torch.randn(25, 3, generator=g, dtype=torch.float64).repeat(6, 1), torch.arange(7) * 25
    perms = [torch.randperm(400, generator=g) for _ in range(6)]
    ei, ew = torch.cat([ei[:, p] for p in perms], 1), torch.cat([ew[p] for p in perms])
    inc = _check(x, ei, ew, nptr, torch.arange(7) * 400, aggr, K)
    assert inc.diffs[1:] == ["key"] * 5 and all(r == 0.0 for rs in inc.ratios[1:] for r in rs), inc.ratios


@pytest.mark.parametrize("impl_name,K", [("GConvGRUReuse", 3), ("TGCNReuse", 1)])
def test_reuse_input_basis_through_incremental(impl_name, K):
    """nn.reuse's input basis of the storage (block-diagonal edges, global rows) through incremental_reuse equals
    the implementation's own; one snapshot alone (other rows) keeps the implementation's computation."""
    from torch_geometric.nn import ChebConv, GCNConv

    from pyg_dynscale.nn import reuse
    from pyg_dynscale.nn.incremental import IncrementalBasis, incremental_reuse

    cell = torch.nn.Module()
    cell.conv_x_z, cell.conv_h_z = ChebConv(3, 4, K).double(), ChebConv(4, 4, K).double()
    cell.conv_z = GCNConv(3, 4).double()
    x, ei, ew, nptr, eptr = evolving(seed=14, order="inplace", empty_at=(4,))
    off = torch.repeat_interleave(nptr[:-1], eptr[1:] - eptr[:-1])
    impl = getattr(reuse, impl_name)
    basis = IncrementalBasis(nptr, eptr, ei, None, None, threshold=INF)
    fast = incremental_reuse(impl, basis)
    assert fast is not impl and issubclass(fast, impl)
    got, want = fast(cell, x, ei + off, ew).basis, impl(cell, x, ei + off, ew).basis
    assert basis.last is not None and [m[0] for m in basis.last.modes].count("incremental") == 11
    torch.testing.assert_close(got, want, rtol=0, atol=1e-9)
    one = fast(cell, x[:40], ei[:, :int(eptr[1])], ew[:int(eptr[1])])
    assert basis.last is None and one.basis.shape[0] == 40
    assert incremental_reuse(reuse.GCLSTMReuse, basis) is reuse.GCLSTMReuse
    assert incremental_reuse(reuse.DCRNNReuse, basis) is reuse.DCRNNReuse
