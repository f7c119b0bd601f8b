"""Round trips between DynamicGraphSignal and every non-hetero PyGT signal class."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale._optional import pygt_available
from tests.helpers.signals import make_dynamic_signal

pytestmark = pytest.mark.skipif(not pygt_available(), reason="needs the pygt extra (torch-geometric-temporal)")


def _pygt():
    from pyg_dynscale._optional import import_pygt

    return import_pygt().signal


def assert_same_snapshots(ours, theirs, keys=("x", "edge_index", "edge_attr", "y")):
    theirs_list = [theirs[t] for t in range(theirs.snapshot_count)]
    assert len(ours) == len(theirs_list)
    for a, b in zip(ours, theirs_list):
        for k in keys:
            va, vb = getattr(a, k, None), getattr(b, k, None)
            if vb is None:
                assert va is None, k
                continue
            assert va.dtype == vb.dtype, (k, va.dtype, vb.dtype)
            assert torch.equal(va, vb), k


def random_arrays(T=4, N=6, F=3, seed=0):
    rng = np.random.default_rng(seed)
    edges = [rng.integers(0, N, size=(2, int(rng.integers(1, 10)))) for _ in range(T)]
    weights = [rng.random(e.shape[1]) for e in edges]
    feats = [rng.standard_normal((N, F)) for _ in range(T)]
    targets = [rng.standard_normal(N) for _ in range(T)]
    return edges, weights, feats, targets


def test_static_graph_temporal_signal_round_trip():
    sig = _pygt()
    e, w, x, y = random_arrays()
    p = sig.StaticGraphTemporalSignal(e[0], w[0], x, y, extra=[np.arange(6)] * 4)
    ours = DynamicGraphSignal.from_pygt(p)
    assert_same_snapshots(ours, p, keys=("x", "edge_index", "edge_attr", "y", "extra"))
    back = ours.to_pygt()
    assert type(back).__name__ == "StaticGraphTemporalSignal"
    assert_same_snapshots(ours, back, keys=("x", "edge_index", "edge_attr", "y", "extra"))
    assert DynamicGraphSignal.from_pygt(back).equals(ours)


def test_dynamic_graph_temporal_signal_round_trip():
    sig = _pygt()
    e, w, x, y = random_arrays(seed=1)
    p = sig.DynamicGraphTemporalSignal(e, w, x, y)
    ours = DynamicGraphSignal.from_pygt(p)
    assert_same_snapshots(ours, p)
    back = ours.to_pygt()
    assert type(back).__name__ == "DynamicGraphTemporalSignal"
    assert DynamicGraphSignal.from_pygt(back).equals(ours)


def test_dynamic_graph_static_signal_round_trip():
    sig = _pygt()
    e, w, x, y = random_arrays(seed=2)
    p = sig.DynamicGraphStaticSignal(e, w, x[0], y)
    ours = DynamicGraphSignal.from_pygt(p)
    assert_same_snapshots(ours, p)
    back = ours.to_pygt(kind="DynamicGraphStaticSignal")
    assert type(back).__name__ == "DynamicGraphStaticSignal"
    assert_same_snapshots(ours, back)


@pytest.mark.parametrize("kind", ["StaticGraphTemporalSignalBatch", "DynamicGraphTemporalSignalBatch", "DynamicGraphStaticSignalBatch"])
def test_batch_variants_round_trip(kind):
    sig = _pygt()
    e, w, x, y = random_arrays(seed=3)
    batch = np.array([0, 0, 0, 1, 1, 1])
    if kind == "StaticGraphTemporalSignalBatch":
        p = sig.StaticGraphTemporalSignalBatch(e[0], w[0], x, y, batch)
    elif kind == "DynamicGraphTemporalSignalBatch":
        p = sig.DynamicGraphTemporalSignalBatch(e, w, x, y, [batch] * 4)
    else:
        p = sig.DynamicGraphStaticSignalBatch(e, w, x[0], y, [batch] * 4)
    ours = DynamicGraphSignal.from_pygt(p)
    assert_same_snapshots(ours, p, keys=("x", "edge_index", "edge_attr", "y", "batch"))
    assert type(ours[0]).__name__ in ("Batch", "DataBatch")
    back = ours.to_pygt(kind=kind)
    assert type(back).__name__ == kind
    assert_same_snapshots(ours, back, keys=("x", "edge_index", "edge_attr", "y", "batch"))


def test_changing_vertex_sets_survive_pygt_round_trip():
    ours = make_dynamic_signal(seed=5)
    back = ours.to_pygt()
    assert type(back).__name__ == "DynamicGraphTemporalSignal"
    again = DynamicGraphSignal.from_pygt(back, num_vertices=ours.num_vertices)
    assert again.equals(ours)


def test_pygt_split_and_our_split_agree():
    sig = _pygt()
    from torch_geometric_temporal.signal import temporal_signal_split as pygt_split

    e, w, x, y = random_arrays(T=10, seed=4)
    p = sig.DynamicGraphTemporalSignal(e, w, x, y)
    ours = DynamicGraphSignal.from_pygt(p)
    for ratio in (0.2, 0.5, 0.8):
        a_train, a_test = ours.split(ratio)
        b_train, b_test = pygt_split(p, ratio)
        assert_same_snapshots(a_train, b_train)
        assert_same_snapshots(a_test, b_test)


def test_hetero_signals_are_refused_clearly():
    class FakeHetero:
        snapshot_count = 1
        targets = [None]
        edge_index_dict = {}

    with pytest.raises(NotImplementedError, match="Heterogeneous"):
        DynamicGraphSignal.from_pygt(FakeHetero())
