"""A static graph stored once (DynamicGraphSignal.static_edge_index): the signal built from ONE [2, E] edge list is
the same signal as the one given the list once per snapshot -- snapshots, supergraph, fingerprint, slicing, sorting,
joining, moving, pickling -- while holding E edges, not T * E; the concatenated form is built only where a reader
asks for it, and edits of it are honoured."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.data.concat import concat_signals
from pyg_dynscale.errors import SignalValidationError

T, N, F = 6, 5, 3


def _pair(weighted: bool = True, seed: int = 0, extras: bool = False):
    """(static, per-snapshot) signals of the same float64 data: the edges given once, and once per snapshot."""
    rng = np.random.default_rng(seed)
    ei = np.array([[0, 1, 2, 3, 4, 2, 0], [1, 2, 3, 4, 0, 2, 3]])  # a self-loop, unsorted targets
    w = rng.uniform(0.5, 2.0, ei.shape[1]) if weighted else None
    X = [rng.standard_normal((N, F)) for _ in range(T)]
    Y = [rng.standard_normal(N) for _ in range(T)]
    kw = dict(dtype=torch.float64)
    if extras:  # an edge-level extra (per snapshot, E rows each) and a graph-level one
        kw.update(edge_type=[rng.integers(0, 3, ei.shape[1]) for _ in range(T)], label=[np.array([t]) for t in range(T)])
    static = DynamicGraphSignal(ei, w, X, Y, **kw)
    per_snapshot = DynamicGraphSignal([ei] * T, None if w is None else [w] * T, X, Y, **kw)
    return static, per_snapshot


def _same_data(a, b):
    assert set(a.keys()) == set(b.keys())
    for k in a.keys():
        u, v = a[k], b[k]
        if torch.is_tensor(u):
            assert u.dtype == v.dtype and torch.equal(u, v), k
        else:
            assert u == v, k


@pytest.mark.parametrize("weighted", [True, False])
def test_static_storage_holds_one_edge_list(weighted):
    s, d = _pair(weighted)
    assert s.is_static and not d.is_static
    assert s.static_edge_index.shape == (2, 7) and s.num_edges == T * 7
    assert (s.static_edge_weight is not None) == weighted == s.weighted
    assert torch.equal(s.edge_ptr, d.edge_ptr) and torch.equal(s.edges_per_snapshot, d.edges_per_snapshot)
    assert not s.edges_expanded  # nothing above built the T copies
    assert repr(s) == repr(d)


@pytest.mark.parametrize("weighted", [True, False])
def test_snapshots_supergraph_fingerprint_equal_the_per_snapshot_signal(weighted):
    s, d = _pair(weighted)
    assert len(list(s)) == T
    for a, b in zip(s, d):
        _same_data(a, b)
    sg, dg = s.supergraph(), d.supergraph()
    for name in ("node_ptr", "vertex", "time", "spatial_edge_index", "temporal_edge_index", "sequence_order",
                 "sequence_ptr", "sequence_vertex"):
        assert torch.equal(getattr(sg, name), getattr(dg, name)), name
    assert s.fingerprint() == d.fingerprint()
    assert s.equals(d) and d.equals(s)
    assert not s.edges_expanded  # the supergraph shifted the one list straight into its own tensor


def test_concatenated_form_is_built_on_demand_and_equals_the_per_snapshot_one():
    s, d = _pair()
    assert torch.equal(s.edge_index, d.edge_index) and torch.equal(s.edge_weight, d.edge_weight)
    assert s.edges_expanded and s.is_static  # kept beside the one list; the signal stays static
    ei, ptr, w = _pair()[0].expand_edges()  # the same form, not kept
    assert torch.equal(ei, d.edge_index) and torch.equal(ptr, d.edge_ptr) and torch.equal(w, d.edge_weight)


def test_an_edit_of_the_expansion_makes_the_edges_per_snapshot():
    s, d = _pair()
    s.edge_weight[-1] += 1.0  # the last snapshot's last edge only
    assert not s.is_static and not s.has_same_edges()
    assert torch.equal(s[T - 1].edge_weight[:-1], d[T - 1].edge_weight[:-1])
    assert float(s[T - 1].edge_weight[-1]) == float(d[T - 1].edge_weight[-1]) + 1.0
    assert torch.equal(s[0].edge_weight, d[0].edge_weight)
    assert s.fingerprint() == d.fingerprint()  # weights are not structure
    s2, d2 = _pair()
    s2.edge_index[1, -1] = 1  # the last snapshot's last edge rewired
    assert not s2.is_static and s2.fingerprint() != d2.fingerprint()
    assert int(s2[T - 1].edge_index[1, -1]) == 1 and int(s2[0].edge_index[1, -1]) == 3


def test_an_edit_of_the_one_list_drops_a_stale_expansion():
    s, _ = _pair()
    expected = s.edge_index.clone()
    expected[1, 0::7] = 4
    s.static_edge_index[1, 0] = 4  # every snapshot's first edge
    assert s.is_static and not s.edges_expanded  # the stale copy is gone
    assert torch.equal(s.edge_index, expected)  # rebuilt from the edited list
    assert all(int(snap.edge_index[1, 0]) == 4 for snap in s)


def test_assigning_the_concatenated_form_makes_the_edges_per_snapshot():
    s, d = _pair()
    s.edge_index = d.edge_index.clone()
    assert not s.is_static and s.equals(d)


def test_slicing_keeps_a_static_graph_static_and_equal():
    s, d = _pair(extras=True)
    for idx in (slice(1, 4), slice(None, None, 2), [4, 0, 2]):
        a, b = s[idx], d[idx]
        assert a.is_static and a.static_edge_index.data_ptr() == s.static_edge_index.data_ptr()  # shared, no copy
        assert a.equals(b)
        for u, v in zip(a, b):
            _same_data(u, v)
    tr, te = s.split(0.5)
    assert tr.is_static and te.is_static and tr.equals(d.split(0.5)[0]) and te.equals(d.split(0.5)[1])
    assert not s.edges_expanded


def test_sort_edges_of_a_static_graph_stays_static_and_equals_the_per_snapshot_sort():
    s, d = _pair(extras=True)
    a, b = s.sort_edges(), d.sort_edges()
    assert a.is_static and a.equals(b)
    for u, v in zip(a, b):
        _same_data(u, v)


def test_joining_slices_of_a_static_graph_gives_the_static_graph():
    s, d = _pair(extras=True)
    j = concat_signals(s[0:2], s[2:5], s[5:])
    assert j.is_static and j.equals(s) and j.equals(d)
    mixed = concat_signals(s[0:3], d[3:])  # one static, one per snapshot: edges per snapshot
    assert not mixed.is_static and mixed.equals(d)
    assert not s.edges_expanded


def test_to_and_pickle_keep_the_one_list():
    s, d = _pair()
    s.edge_index  # expanded here: a pickle must not carry the T copies
    moved = s.to("cpu")
    assert moved.is_static and moved.equals(d)
    blob = pickle.dumps(s)
    back = pickle.loads(blob)
    assert back.is_static and not back.edges_expanded and back.equals(d)
    assert len(blob) < len(pickle.dumps(d))


def test_static_edges_are_validated_like_per_snapshot_ones():
    X = [np.zeros((3, 1)), np.zeros((2, 1))]  # snapshot 1 has only 2 vertices
    with pytest.raises(SignalValidationError, match=r"edge_indices\[1\].*only 2 vertices"):
        DynamicGraphSignal(np.array([[0, 1], [1, 2]]), None, X, None)
    with pytest.raises(SignalValidationError, match=r"edge_indices\[0\].*negative"):
        DynamicGraphSignal(np.array([[0, -1], [1, 0]]), None, [np.zeros((3, 1))] * 2, None)
    with pytest.raises(SignalValidationError, match=r"edge_weights\[0\]"):
        DynamicGraphSignal(np.array([[0, 1], [1, 2]]), np.ones(3), [np.zeros((3, 1))] * 2, None)
    with pytest.raises(SignalValidationError, match="NaN"):
        DynamicGraphSignal(np.array([[0, 1], [1, 2]]), np.array([1.0, np.nan]), [np.zeros((3, 1))] * 2, None)


def test_from_tensors_without_edge_ptr_is_a_static_graph():
    s, d = _pair()
    t = DynamicGraphSignal.from_tensors(node_ptr=s.node_ptr, edge_index=s.static_edge_index,
                                        edge_weight=s.static_edge_weight, x=s.x, y=s.y)
    assert t.is_static and t.equals(d)
    with pytest.raises(SignalValidationError, match=r"edge_indices\[0\]"):
        DynamicGraphSignal.from_tensors(node_ptr=s.node_ptr, edge_index=s.static_edge_index + N, x=s.x)


def test_per_snapshot_weights_with_one_edge_list_repeat_the_edges():
    ei = np.array([[0, 1], [1, 2]])
    s = DynamicGraphSignal(ei, [np.ones(2), 2 * np.ones(2)], [np.zeros((3, 1))] * 2, None)
    assert not s.is_static and torch.equal(s[1].edge_weight, torch.tensor([2.0, 2.0]))


# ---- implicit local vertex ids (rows 0 .. |V_t|-1): not stored, built where a reader asks
def test_local_ids_are_implicit_and_equal_explicit_ones():
    s, _ = _pair()
    ids = [np.arange(N)] * T
    explicit = DynamicGraphSignal(s.static_edge_index.numpy(), s.static_edge_weight.numpy(),
                                  list(s.x.view(T, N, F).numpy()), list(s.y.view(T, N).numpy()), node_ids=ids,
                                  dtype=torch.float64)
    assert s.local_ids and not explicit.local_ids
    held = s.storage_bytes()
    assert held == explicit.storage_bytes() - T * N * 8  # the [T N] int64 ids are not held
    assert s.equals(explicit) and explicit.equals(s) and s.fingerprint() == explicit.fingerprint()
    for a, b in zip(s, explicit):
        _same_data(a, b)
    assert s.storage_bytes() == held  # iterating built nothing
    assert torch.equal(s.node_id, explicit.node_id) and s.local_ids  # built on demand, kept
    assert s.storage_bytes() == held + T * N * 8


def test_an_edit_of_the_built_local_ids_makes_them_explicit():
    s, _ = _pair()
    s.node_id[N * (T - 1)] = N - 1  # the last snapshot lists vertex N-1 twice now
    assert not s.local_ids
    with pytest.raises(SignalValidationError, match=rf"node_ids\[{T - 1}\].*more than once"):
        s.validate()


def test_local_ids_survive_slicing_moving_pickling_joining_and_files(tmp_path):
    s, d = _pair()
    assert s[1:4].local_ids and s[[3, 1]].local_ids and s.to("cpu").local_ids and s.sort_edges().local_ids
    assert concat_signals(s[:2], s[2:]).local_ids
    back = pickle.loads(pickle.dumps(s))
    assert back.local_ids and back.equals(d)
    s.save(str(tmp_path / "s.pt"))
    loaded = DynamicGraphSignal.load(str(tmp_path / "s.pt"))
    assert loaded.local_ids and loaded.is_static and loaded.equals(d)
    assert torch.load(str(tmp_path / "s.pt"), weights_only=True)["tensors"]["node_id"].numel() == T * N  # in full
    assert s.storage_bytes() == loaded.storage_bytes()


def test_local_ids_must_fit_num_vertices():
    with pytest.raises(SignalValidationError, match="num_vertices.*vertex id 2"):
        DynamicGraphSignal(np.array([[0], [1]]), None, [np.zeros((3, 1))] * 2, None, num_vertices=2)


def test_to_pygt_of_a_static_graph_is_pygts_static_signal_without_expanding():
    pytest.importorskip("torch_geometric_temporal")
    s, d = _pair()
    p = s.to_pygt()
    assert type(p).__name__ == "StaticGraphTemporalSignal" and not s.edges_expanded
    back = DynamicGraphSignal.from_pygt(p, dtype=torch.float64)
    assert back.is_static and back.equals(d)
