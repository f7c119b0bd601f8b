"""TM-GCN (pyg_dynscale.nn.TMGCN): equal to a dense reference in float64 -- the M-transform as an explicit
[T, T] matrix on the zero-padded [T, V, F] tensor, then PyG's GCNConv called on every snapshot -- with changing
vertex sets; the band matters (band=1 is a per-snapshot GCN, a different band gives different outputs); its
dependency pattern's banded rows equal a brute-force enumeration; FusedTrainer trains it."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import ModelInputError, PartitionError
from pyg_dynscale.nn import TMGCN, m_transform
from pyg_dynscale.nn.decomposed import FusedGraph
from pyg_dynscale.partition import BlockPattern, CommunicationPlan, DependencyPattern, Partition
from pyg_dynscale.partition.costs.plan_bytes import plan_bytes
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers.signals import make_dynamic_signal

T, V, F = 7, 9, 3


def _signal(fixed: bool = False) -> DynamicGraphSignal:
    if not fixed:  # vertices appear and disappear, snapshots of every size
        return _as64(make_dynamic_signal(seed=4, T=T, V=V, F=F))
    g = torch.Generator().manual_seed(5)
    eis = [torch.randint(0, V, (2, 14), generator=g) for _ in range(T)]
    ws = [torch.rand(14, generator=g, dtype=torch.float64) for _ in range(T)]
    xs = [torch.randn(V, F, generator=g, dtype=torch.float64) for _ in range(T)]
    ys = [torch.randn(V, generator=g, dtype=torch.float64) for _ in range(T)]
    return DynamicGraphSignal(eis, ws, xs, ys, num_vertices=V, dtype=torch.float64)


def _as64(sig: DynamicGraphSignal) -> DynamicGraphSignal:
    snaps = list(sig)
    return DynamicGraphSignal([d.edge_index for d in snaps], [d.edge_attr for d in snaps], [d.x for d in snaps],
                              [d.y for d in snaps], node_ids=[d.n_id for d in snaps], num_vertices=sig.num_vertices,
                              dtype=torch.float64)


def m_matrix(T: int, band: int) -> torch.Tensor:
    """SC'21 §5.3: M[t, k] = 1 / min(w, t) for max(1, t-w+1) <= k <= t (1-based), else 0."""
    M = torch.zeros(T, T, dtype=torch.float64)
    for t in range(1, T + 1):
        for k in range(max(1, t - band + 1), t + 1):
            M[t - 1, k - 1] = 1.0 / min(band, t)
    return M


def dense_reference(model: TMGCN, sig: DynamicGraphSignal, band: int) -> torch.Tensor:
    """Per layer: pad each snapshot's rows into a [T, V, C] tensor (absent vertices: zeros), multiply by M over
    time, read back the rows that exist, call the layer's GCNConv on every snapshot; node order of the signal."""
    snaps = list(sig)
    M = m_matrix(len(snaps), band)
    hs = [d.x for d in snaps]
    for l, conv in enumerate(model.convs):
        dense = torch.zeros(len(snaps), sig.num_vertices, hs[0].shape[1], dtype=torch.float64)
        for t, d in enumerate(snaps):
            dense[t, d.n_id] = hs[t]
        mixed = torch.einsum("tk,kvc->tvc", M, dense)
        out = []
        for t, d in enumerate(snaps):
            y = conv(mixed[t, d.n_id], d.edge_index, d.edge_attr)
            out.append(torch.relu(y) if l < len(model.convs) - 1 else y)
        hs = out
    return torch.cat(hs, 0)


def _model(num_layers: int, band: int, hidden=None) -> TMGCN:
    torch.manual_seed(2)
    return TMGCN(F, 4, band=band, num_layers=num_layers, hidden_channels=hidden).double()


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("num_layers,hidden", [(1, None), (2, 5), (3, None)])
def test_tmgcn_equals_the_dense_m_product_reference(fixed, num_layers, hidden):
    sig = _signal(fixed)
    graph = FusedGraph.from_signal(sig)
    for band in (1, 2, 3, T + 2):
        m = _model(num_layers, band, hidden)
        out = m(graph)
        ref = dense_reference(m, sig, band)
        assert out.shape == (sig.num_vertex_time_nodes, 4)
        assert torch.allclose(out, ref, atol=1e-9, rtol=0), (band, float((out - ref).abs().max()))
        # gradients of every parameter as well
        g_out = torch.autograd.grad((out * torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out)).sum(),
                                    list(m.parameters()))
        g_ref = torch.autograd.grad((ref * torch.linspace(-1, 1, ref.numel(), dtype=torch.float64).view_as(ref)).sum(),
                                    list(m.parameters()))
        for a, b in zip(g_out, g_ref):
            assert torch.allclose(a, b, atol=1e-9, rtol=0)


def test_the_band_matters():
    sig = _signal()
    graph = FusedGraph.from_signal(sig)
    # band = 1: a plain GCN on every snapshot
    m1 = _model(2, 1, 5)
    snaps = list(sig)
    plain = torch.cat([m1.convs[1](torch.relu(m1.convs[0](d.x, d.edge_index, d.edge_attr)), d.edge_index, d.edge_attr)
                       for d in snaps], 0)
    assert torch.allclose(m1(graph), plain, atol=1e-9, rtol=0)
    # any other band gives other outputs, and the reference of a wrong band disagrees
    m3 = _model(2, 3, 5)
    out3 = m3(graph)
    assert float((out3 - plain).detach().abs().max()) > 1e-3
    for wrong in (2, 4):
        assert float((out3 - dense_reference(m3, sig, wrong)).detach().abs().max()) > 1e-3, wrong


def test_m_transform_on_a_window_restarts_the_band_and_validates():
    sig = _signal(fixed=True)
    x = sig.x
    whole = m_transform(x, FusedGraph.from_signal(sig), 3)
    dense = torch.einsum("tk,kvc->tvc", m_matrix(T, 3), x.view(T, V, F)).reshape(-1, F)
    assert torch.allclose(whole, dense, atol=1e-12, rtol=0)
    part = sig[2:6]  # a window is a signal of its own: its first snapshot is t = 0 of M
    got = m_transform(part.x, FusedGraph.from_signal(part), 3)
    ref = torch.einsum("tk,kvc->tvc", m_matrix(4, 3), part.x.view(4, V, F)).reshape(-1, F)
    assert torch.allclose(got, ref, atol=1e-12, rtol=0)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ModelInputError, match="band"):
            TMGCN(F, 4, band=bad)
    for field, kw in (("num_layers", {"num_layers": 0}), ("hidden_channels", {"hidden_channels": 0}),
                      ("out_channels", {"out_channels": 0})):
        with pytest.raises(ModelInputError, match=field):
            TMGCN(**{"in_channels": F, "out_channels": 4, **kw})
    with pytest.raises(ModelInputError, match="h0"):
        TMGCN(F, 4).forward_fused(FusedGraph.from_signal(sig), h0=torch.zeros(V, 4))


def _brute_window_rows(sig, town, band):
    """{(dst rank, gid)}: gid (i, t') to the owner of every (i, t), t' < t < t' + band, owned elsewhere."""
    sg = sig.supergraph()
    rows = set()
    vt = list(zip(sg.vertex.tolist(), sg.time.tolist()))
    by_vertex: dict = {}
    for g, (v, t) in enumerate(vt):
        by_vertex.setdefault(v, []).append((t, g))
    for seq in by_vertex.values():
        for t1, g1 in seq:
            for t2, g2 in seq:
                if t1 < t2 < t1 + band and int(town[g1]) != int(town[g2]):
                    rows.add((int(town[g2]), g1))
    return rows


@pytest.mark.parametrize("band", [1, 2, 3, 5])
def test_window_plan_rows_equal_brute_force(band):
    sig = _signal()
    N = sig.num_vertex_time_nodes
    R = 3
    own = torch.randint(0, R, (N,), generator=torch.Generator().manual_seed(band))
    m = TMGCN(F, 4, band=band, num_layers=2)
    pattern = m.dependency_pattern(bytes_per_element=8)
    assert pattern == DependencyPattern.preset("tmgcn", F, 4, num_blocks=2, band=band, bytes_per_element=8)
    assert DependencyPattern.from_dict(pattern.to_dict()) == pattern
    plan = CommunicationPlan.build(sig, Partition("manual", R, own), pattern)
    want = _brute_window_rows(sig, own, band)
    for b in (0, 1):  # the two M-transforms; block 2 (the last GCN) has none
        e = plan.exchange(b, "temporal")
        got = set(zip(e.dst.tolist(), e.gid.tolist()))
        assert got == want and e.num_rows == len(want)
        assert all(int(own[g]) == s for s, g in zip(e.src.tolist(), e.gid.tolist()))
    assert not plan.has(2, "temporal")
    if band == 1:
        assert plan.bytes_by_kind()["temporal"] == 0
    else:
        assert plan.bytes_by_kind()["temporal"] > 0
    assert plan_bytes(sig, own, R, pattern) == plan.bytes_by_kind()["total"]


def test_window_pattern_validation_and_edge_weight():
    with pytest.raises(PartitionError, match="time_band"):
        BlockPattern((3,), "window", 4, 4)  # a window needs its band
    with pytest.raises(PartitionError, match="time_band"):
        BlockPattern((3,), "recurrent", 4, 4, 3)  # a band only for windows
    p = DependencyPattern.preset("tmgcn", 3, 4, num_blocks=2, band=3, bytes_per_element=4)
    # per cut temporal edge: min(rows, band - 1) rows of each window block (widths 3 and 4)
    assert p.temporal_edge_weight(1.0) == 2 * 4 * (3 + 4)
    assert p.temporal_edge_weight(5.0) == 2 * 4 * 2 * (3 + 4)
    assert DependencyPattern.preset("tmgcn", 3, 4, band=1).temporal_edge_weight(5.0) == 0.0


def test_fused_trainer_trains_tmgcn_and_the_zoo_builds_it():
    from pyg_dynscale.nn.zoo import MODEL_NAMES, build_model

    assert "tmgcn" in MODEL_NAMES
    sig = _signal()
    torch.manual_seed(0)
    model, head, loss = build_model("tmgcn", F, 8, num_snapshots=T, num_vertices=V)
    assert isinstance(model, TMGCN)
    model, head = model.double(), head.double()
    tr = FusedTrainer(model, sig, head=head, loss=loss, lr=0.02)
    losses = [tr.train_epoch() for _ in range(15)]
    assert losses[-1] < losses[0]


def test_checkpointing_over_windows_is_refused_with_the_reason():
    sig = _signal()
    m = _model(2, 3, 5)
    with pytest.raises(NotImplementedError, match="band"):
        FusedTrainer(m, sig, head=torch.nn.Linear(4, 1).double(), loss="mse", checkpoint_every=2)


def test_pgc_temporal_edge_weights_stop_at_the_band():
    from pyg_dynscale.partition.pgc.coarsen import sequence_positions, temporal_edge_weights

    sig = _signal(fixed=True)  # every sequence as long as the signal: edges leave positions 0 .. T-2
    sg = sig.supergraph()
    p = DependencyPattern.preset("tmgcn", F, 4, num_blocks=2, band=3, bytes_per_element=4)
    w = temporal_edge_weights(sg, p)
    _, pos_in_seq = sequence_positions(sg)  # entries of sequence_order
    pos = torch.empty_like(pos_in_seq).index_copy_(0, sg.sequence_order, pos_in_seq)  # node order
    src_pos = pos[sg.temporal_edge_index[0]]
    want = torch.tensor([p.temporal_edge_weight(float(min(j + 1, 2))) for j in src_pos.tolist()], dtype=torch.float64)
    assert torch.equal(w, want) and float(w.max()) == p.temporal_edge_weight(2.0)  # band 3: at most 2 rows per cut
