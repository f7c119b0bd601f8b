"""DynamicGraphSignal: construction, iteration, slicing, splitting, devices."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_dynscale import DynamicGraphSignal, SignalValidationError, temporal_signal_split
from tests.helpers.signals import make_dynamic_signal


def test_snapshots_hold_what_was_given():
    ids = [np.array([4, 0, 2]), np.array([2, 9])]
    ei = [np.array([[0, 1], [2, 2]]), np.array([[1], [0]])]
    w = [np.array([0.5, 1.5]), np.array([2.0])]
    x = [np.arange(6.0).reshape(3, 2), np.arange(4.0).reshape(2, 2)]
    y = [np.array([1, 2, 3]), np.array([4, 5])]
    s = DynamicGraphSignal(ei, w, x, y, node_ids=ids)
    assert len(s) == s.snapshot_count == s.num_snapshots == 2
    assert s.num_vertices == 10 and s.num_vertex_time_nodes == 5 and s.num_edges == 3
    d = s[1]
    assert isinstance(d, Data)
    assert torch.equal(d.x, torch.tensor([[0.0, 1.0], [2.0, 3.0]]))
    assert torch.equal(d.edge_index, torch.tensor([[1], [0]]))
    assert torch.equal(d.edge_attr, torch.tensor([2.0])) and torch.equal(d.edge_weight, d.edge_attr)
    assert d.y.dtype == torch.long and torch.equal(d.y, torch.tensor([4, 5]))
    assert torch.equal(d.n_id, torch.tensor([2, 9]))
    assert d.num_nodes == 2
    assert s[-1].num_nodes == 2 and s[0].x.dtype == torch.float32


def test_iteration_is_reentrant(dyn_signal):
    # PyGT shares one cursor between iterators; nested loops must be independent here.
    pairs = [(a.num_nodes, b.num_nodes) for a in dyn_signal for b in dyn_signal]
    counts = dyn_signal.nodes_per_snapshot.tolist()
    assert pairs == [(a, b) for a in counts for b in counts]
    it1, it2 = iter(dyn_signal), iter(dyn_signal)
    next(it1)
    assert next(it2).num_nodes == counts[0]
    assert next(it1).num_nodes == counts[1]


def test_pygt_style_training_loop_runs_unchanged(static_signal):
    from torch_geometric.nn import GCNConv

    conv = GCNConv(2, 1)
    cost = 0
    for time, snapshot in enumerate(static_signal):
        y_hat = conv(snapshot.x, snapshot.edge_index, snapshot.edge_attr)
        cost = cost + torch.mean((y_hat.squeeze() - snapshot.y) ** 2)
    (cost / (time + 1)).backward()
    assert conv.lin.weight.grad is not None


def test_empty_snapshots_and_isolated_vertices_are_valid():
    s = DynamicGraphSignal(
        [np.zeros((2, 0), dtype=np.int64), np.array([[0], [1]])],
        None,
        [np.zeros((0, 3)), np.ones((4, 3))],
        node_ids=[np.array([], dtype=np.int64), np.array([0, 1, 2, 3])],
    )
    assert s[0].num_nodes == 0 and s[0].edge_index.shape == (2, 0)
    assert s[1].num_nodes == 4  # vertices 2 and 3 are isolated
    assert s.supergraph().num_temporal_edges == 0


def test_static_edges_and_static_features():
    ei = np.array([[0, 1], [1, 2]])
    s = DynamicGraphSignal(ei, np.array([1.0, 2.0]), np.ones((3, 2)), [np.zeros(3)] * 4, static_features=True)
    assert len(s) == 4 and all(torch.equal(d.edge_index, torch.tensor(ei)) for d in s)
    assert all(d.x.shape == (3, 2) for d in s)


def test_slicing_select_and_index_lists(dyn_signal):
    sub = dyn_signal[1:4]
    assert isinstance(sub, DynamicGraphSignal) and len(sub) == 3
    for k, t in enumerate(range(1, 4)):
        a, b = sub[k], dyn_signal[t]
        for key in ("x", "edge_index", "edge_attr", "y", "n_id"):
            assert torch.equal(getattr(a, key), getattr(b, key))
    rev = dyn_signal[[4, 0]]
    assert torch.equal(rev[0].n_id, dyn_signal[4].n_id) and torch.equal(rev[1].x, dyn_signal[0].x)
    stepped = dyn_signal[::2]
    assert len(stepped) == 3 and torch.equal(stepped[2].y, dyn_signal[4].y)
    with pytest.raises(IndexError):
        dyn_signal[5]
    with pytest.raises(IndexError):
        dyn_signal[[0, 7]]


def test_temporal_split(dyn_signal):
    train, test = dyn_signal.split(0.6)
    assert (len(train), len(test)) == (3, 2)
    train, val, test = dyn_signal.split(0.4, 0.2)
    assert (len(train), len(val), len(test)) == (2, 1, 2)
    assert torch.equal(val[0].n_id, dyn_signal[2].n_id)
    tr, te = temporal_signal_split(dyn_signal, 0.8)
    assert (len(tr), len(te)) == (4, 1)
    with pytest.raises(SignalValidationError, match="train_ratio"):
        dyn_signal.split(1.0)
    with pytest.raises(SignalValidationError, match="val_ratio"):
        dyn_signal.split(0.5, -0.1)


def test_to_device_copies_everything(dyn_signal):
    moved = dyn_signal.to("cpu")
    assert moved is not dyn_signal and moved.equals(dyn_signal)
    assert moved.device == torch.device("cpu")
    meta = dyn_signal.to("meta")
    assert meta.node_id.device.type == "meta" and meta.fields["x"].values.device.type == "meta"


def test_extras_levels_are_inferred_and_sliced():
    ei = [np.array([[0, 1], [1, 2]]), np.array([[0], [1]])]
    x = [np.ones((3, 2)), np.ones((2, 2))]
    mask = [np.array([True, False, True]), np.array([False, True])]
    label_index = [np.array([[0, 2, 1], [1, 0, 2]]), np.array([[1], [0]])]
    label = [np.array([1.0, 0.0, 1.0]), np.array([0.0])]
    graph_attr = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    s = DynamicGraphSignal(ei, None, x, None, train_mask=mask, edge_label_index=label_index,
                           edge_label=label, date=graph_attr)
    assert s.fields["train_mask"].level == "node" and s.fields["train_mask"].values.dtype == torch.bool
    assert s.fields["edge_label_index"].level == "ragged" and s.fields["edge_label_index"].cat_dim == 1
    assert s.fields["date"].level == "graph"
    d = s[1]
    assert torch.equal(d.edge_label_index, torch.tensor([[1], [0]]))
    assert torch.equal(d.date, torch.tensor([3.0, 4.0]))
    assert torch.equal(s[[1]][0].train_mask, torch.tensor([False, True]))


def test_dtype_option_keeps_float64():
    s = DynamicGraphSignal([np.array([[0], [1]])], [np.array([0.25])], [np.ones((2, 2))], [np.ones(2)], dtype=None)
    assert s[0].x.dtype == torch.float64 and s[0].y.dtype == torch.float64


def test_unsigned_targets_are_kept_not_dropped():
    # PyGT silently turns uint8 targets into y=None; we keep them as int64.
    s = DynamicGraphSignal([np.array([[0], [1]])], None, [np.ones((2, 1))], [np.array([1, 0], dtype=np.uint8)])
    assert s[0].y.dtype == torch.long and s[0].y.tolist() == [1, 0]


def test_from_tensors_matches_list_constructor(dyn_signal):
    s = dyn_signal
    fast = DynamicGraphSignal.from_tensors(
        node_ptr=s.node_ptr, edge_index=s.edge_index, edge_ptr=s.edge_ptr, node_id=s.node_id,
        edge_weight=s.edge_weight, x=s.x, y=s.y, num_vertices=s.num_vertices,
    )
    assert fast.equals(s)


def test_equals_detects_differences(dyn_signal):
    other = make_dynamic_signal(seed=0)
    assert other.equals(dyn_signal)
    other.fields["x"].values[0, 0] += 1
    assert not other.equals(dyn_signal)


def test_sort_edges_orders_each_snapshot_by_target_then_source():
    from pyg_dynscale import DynamicGraphSignal

    g = torch.Generator().manual_seed(0)
    eis = [torch.randint(0, 6, (2, 12), generator=g) for _ in range(3)]
    ws = [torch.rand(12, generator=g) for _ in range(3)]
    kinds = [torch.arange(12) + 100 * t for t in range(3)]
    sig = DynamicGraphSignal(eis, ws, [torch.randn(6, 2) for _ in range(3)], None, edge_kind=kinds)
    out = sig.sort_edges()
    for t in range(3):
        a, b = sig.snapshot(t), out.snapshot(t)
        key = b.edge_index[1] * 6 + b.edge_index[0]
        assert bool((key[1:] >= key[:-1]).all())
        # the same edges, each with its own weight and field value
        before = sorted(zip(a.edge_index.t().tolist(), a.edge_attr.tolist(), a.edge_kind.tolist()))
        after = sorted(zip(b.edge_index.t().tolist(), b.edge_attr.tolist(), b.edge_kind.tolist()))
        assert before == after
        assert torch.equal(a.x, b.x)
