"""The windows path holds a static graph once: series_signal stores one edge list, and WindowTrainer (the view, the
layout, the SnapshotStore, the reuse basis, training, evaluation) never builds the T-fold concatenation of it, while
its results are bit-identical (float64) to those on the same data given one edge list per snapshot."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.nn import TGCN as OurTGCN
from pyg_dynscale.windows import WindowTrainer, series_signal
from pyg_dynscale.windows.snapshot_store import StoreLayout

F, H, T, N = 2, 4, 15, 7


def _data():
    """A static directed graph with a self-loop (distinct edges, positive weights: DCRNN's reuse applies)."""
    g = torch.Generator().manual_seed(11)
    pairs = torch.randperm(N * N, generator=g)[:18]
    ei = torch.stack([pairs // N, pairs % N])
    ei = torch.cat([ei[:, ei[0] != ei[1]], torch.tensor([[3], [3]])], 1)
    ew = torch.rand(ei.shape[1], generator=g, dtype=torch.float64) + 0.1
    D = torch.randn(T + 1, N, F, generator=g, dtype=torch.float64)
    return D, ei, ew


def _per_snapshot(D, ei, ew):
    """The same windows' signal with the edge list given once per snapshot (the storage before static graphs)."""
    S, E = D.shape[0] - 1, ei.shape[1]
    return DynamicGraphSignal.from_tensors(
        node_ptr=torch.arange(S + 1) * N, edge_ptr=torch.arange(S + 1) * E, edge_index=ei.repeat(1, S),
        edge_weight=ew.repeat(S), x=D[:-1].reshape(S * N, F), y=D[1:].reshape(S * N, F))


def _cell(name):
    import torch_geometric_temporal.nn.recurrent as rec

    torch.manual_seed(0)
    make = {"GConvGRU": lambda: rec.GConvGRU(F, H, 2), "DCRNN": lambda: rec.DCRNN(F, H, 2),
            "TGCN": lambda: OurTGCN(F, H)}
    return make[name]().double()


def _run(sig, name, **kw):
    torch.manual_seed(1)
    tr = WindowTrainer(_cell(name), sig, lags=3, batch_size=4, head=torch.nn.Linear(H, F).double(), optimizer="sgd",
                       lr=0.05, **kw)
    losses = [tr.train_epoch() for _ in range(2)]
    return tr, losses, tr.evaluate("test"), tr.evaluate("val"), [p.detach().clone() for p in tr._params]


def test_series_signal_stores_the_graph_once():
    D, ei, ew = _data()
    s = series_signal(D, ei, ew, dtype=torch.float64)
    assert s.is_static and torch.equal(s.static_edge_index, ei) and torch.equal(s.static_edge_weight, ew)
    assert s.equals(_per_snapshot(D, ei, ew))
    layout = StoreLayout.of(s)
    assert layout == StoreLayout.of(_per_snapshot(D, ei, ew)) and layout.static
    assert not s.edges_expanded  # the layout asked nothing of the edges


CASES = [("GConvGRU", {}), ("GConvGRU", {"reuse": False}), ("DCRNN", {}), ("TGCN", {"incremental": True}),
         ("GConvGRU", {"node_batch_size": 3}), ("GConvGRU", {"cache_bytes": 1 << 12})]


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{'-'.join(k) or 'reuse'}" for n, k in CASES])
def test_window_trainer_on_the_static_graph_is_bit_identical(name, kw):
    D, ei, ew = _data()
    a = _run(series_signal(D, ei, ew, dtype=torch.float64), name, **kw)
    b = _run(_per_snapshot(D, ei, ew), name, **kw)
    assert a[0].store.static_graph is not None and b[0].store.static_graph is None
    assert a[1] == b[1]                       # the epochs' mean losses, exactly
    assert a[2] == b[2] and a[3] == b[3]      # test and validation metrics, exactly
    assert all(torch.equal(p, q) for p, q in zip(a[4], b[4]))


@pytest.mark.parametrize("name,kw", [("GConvGRU", {}), ("GConvGRU", {"reuse": False}), ("DCRNN", {}),
                                     ("GConvGRU", {"cache_bytes": 1 << 12})])
def test_the_windows_path_never_expands_the_edges(name, kw):
    """Set-up, two epochs and evaluation hold the one [2, E] list: neither the signal nor the store has built a
    [2, T E] tensor, and the store's edge tensors are E long."""
    D, ei, ew = _data()
    sig = series_signal(D, ei, ew, dtype=torch.float64)
    torch.manual_seed(1)
    fresh = WindowTrainer(_cell(name), series_signal(D, ei, ew, dtype=torch.float64), lags=3, batch_size=4,
                          head=torch.nn.Linear(H, F).double(), **kw)
    # right after set-up the store holds the series (x and y are views of it) and the one graph: nothing else
    assert fresh.store.nbytes() == D.numel() * 8 + 3 * ei.shape[1] * 8
    tr = _run(sig, name, **kw)[0]
    assert not sig.edges_expanded and not tr.view.signal.edges_expanded
    st = tr.store
    assert not st.edges_expanded
    E = ei.shape[1]
    assert sum(t.numel() for t in st.static_graph) == 3 * E  # [2, E] indices + [E] weights
    assert st.edge_ptr[-1] == st.num_held * E                 # while it stands for every held snapshot's copy
    # bytes: the series (x and y are views of it) + offsets + one graph; no [T N] ids, no [2, T E] edges
    series, ptrs = D.numel() * 8, 2 * (T + 1) * 8
    assert sig.local_ids and sig.storage_bytes() == series + ptrs + 3 * E * 8
    assert st.nbytes() <= series + 3 * E * 8 + 3 * 4 * E * 8  # + the last batch's union edges (B = 4)


def test_store_readers_of_the_concatenated_form_still_get_it():
    """edge_index / edge_weight / loops of a static store: built on demand, equal to the per-snapshot store's."""
    D, ei, ew = _data()
    a = _run(series_signal(D, ei, ew, dtype=torch.float64), "GConvGRU")[0].store
    b = _run(_per_snapshot(D, ei, ew), "GConvGRU")[0].store
    assert torch.equal(a.union_loops([0, 3, 5]), b.union_loops([0, 3, 5]))
    for i, (u, v) in enumerate(zip(a.union([2, 4]), b.union([2, 4]))):
        assert (u is None and v is None) or (not torch.is_tensor(u) and u == v) or torch.equal(u, v), i
    assert not a.edges_expanded
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.edge_weight, b.edge_weight)
    assert torch.equal(a.loops, b.loops) and a.edges_expanded


@pytest.mark.parametrize("name", ["GConvGRU", "DCRNN"])
def test_the_trainers_static_basis_in_small_chunks_is_bitwise_that_of_one_chunk(name, monkeypatch):
    """build_window_cache computes a static graph's basis in BASIS_CHUNK_BYTES chunks (its temporaries stay
    small next to a rank's part): every entry is the one-chunk basis bit for bit (each feature column is
    propagated alone, in the same edge order). A chunk size that changed the values would fail here."""
    import pyg_dynscale.windows.cache as cache
    from pyg_dynscale.nn.reuse import static_basis

    D, ei, ew = _data()
    monkeypatch.setattr(cache, "BASIS_CHUNK_BYTES", 1)                     # one snapshot per chunk
    tr = WindowTrainer(_cell(name), series_signal(D, ei, ew, dtype=torch.float64), lags=3, batch_size=4)
    obj = tr.reuse_impl
    assert tr.store.static and obj is not None
    one = static_basis(obj, tr.store.x, tr.store.num_held, ei, ew, chunk_bytes=1 << 40)
    assert torch.equal(obj.basis, one)
