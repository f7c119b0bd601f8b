"""Drop-in layers (TGCN, MPNNLSTM, DySAT): PyGT equivalence and the decomposition."""
import copy

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import MPNNLSTM, TGCN, DySAT, FusedGraph
from pyg_dynscale.runtime import dysat_per_snapshot, per_snapshot_outputs
from tests.helpers.optional_deps import pygt_or_skip_module
from tests.helpers.signals import make_signal

pygt = pygt_or_skip_module()
rec = pygt.nn.recurrent


def grads(module):
    return {k: p.grad.clone() for k, p in module.named_parameters() if p.grad is not None}


def assert_fused_matches_reference(m, ref, sig, grad_atol: float) -> torch.Tensor:
    """``m.forward_fused`` equals the per-snapshot reference output ``ref``,
    and so do the gradients of ``sum(out ** 2)``; returns the fused output."""
    ref.pow(2).sum().backward()
    g_ref = grads(m)
    m.zero_grad()
    out = m.forward_fused(FusedGraph.from_signal(sig))
    out.pow(2).sum().backward()
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    for k, v in grads(m).items():
        torch.testing.assert_close(v, g_ref[k], atol=grad_atol, rtol=0)
    return out


# ---------------------------------------------------------------- TGCN
def test_tgcn_matches_pygt_state_dict_and_forward():
    torch.manual_seed(0)
    ours, theirs = TGCN(4, 6), rec.TGCN(4, 6)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    ours.load_state_dict(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())  # both directions
    x, ei, w = torch.randn(9, 4), torch.randint(0, 9, (2, 20)), torch.rand(20)
    H = torch.randn(9, 6)
    assert torch.equal(ours(x, ei, w, H), theirs(x, ei, w, H))
    assert torch.equal(ours(x, ei), theirs(x, ei))
    ours.reset_parameters()
    assert not torch.equal(ours(x, ei, w, H), theirs(x, ei, w, H))


@pytest.mark.parametrize("changing", [False, True])
@pytest.mark.parametrize("num_layers", [1, 3])
def test_tgcn_fused_equals_per_snapshot_loop(changing, num_layers):
    torch.manual_seed(0)
    sig = make_signal(changing=changing)
    m = TGCN(3, 5, num_layers=num_layers).double()
    assert_fused_matches_reference(m, per_snapshot_outputs(m, sig, 5), sig, grad_atol=1e-10)


def test_tgcn_deep_variant_has_more_layers_and_differs():
    m1, m3 = TGCN(3, 5), TGCN(3, 5, num_layers=3)
    assert len(list(m3.parameters())) == len(list(m1.parameters())) + 3 * 2 * 2
    assert m3.dependency_pattern().blocks[0].spatial_hops == 3


def test_tgcn_initial_state_per_sequence():
    sig = make_signal()
    G = FusedGraph.from_signal(sig)
    m = TGCN(3, 5).double()
    h0 = torch.randn(G.num_sequences, 5, dtype=torch.float64)
    table = torch.zeros(sig.num_vertices, 5, dtype=torch.float64)
    table[G.sequence_vertex] = h0
    ref = per_snapshot_outputs(m, sig, 5, h0_table=table)
    torch.testing.assert_close(m.forward_fused(G, h0), ref, atol=1e-10, rtol=0)
    with pytest.raises(ModelInputError, match="h0"):
        m.forward_fused(G, h0[:-1])
    with pytest.raises(ModelInputError, match="h0"):
        m.forward_fused(G, torch.zeros(G.num_sequences, 4, dtype=torch.float64))


@pytest.mark.parametrize("changing", [False, True])
@pytest.mark.parametrize("F_in,H", [(3, 5), (20, 3)])  # F <= 3H: propagate first; F > 3H: project first
def test_tgcn_fused_scan_equals_autograd_scan_with_h0_and_x_grads(changing, F_in, H):
    """The hand-written T-GCN BPTT (fast path with the folded projection, and the
    time encoder alone) equals the autograd masked scan: outputs and gradients of
    every parameter, the initial states and the input features (float64)."""
    from pyg_dynscale.nn.temporal_fusion import masked_recurrent_scan
    from pyg_dynscale.nn.tgcn import tgcn_cell, tgcn_input_projection

    torch.manual_seed(0)
    sig = make_signal(T=6, V=7, F=F_in, changing=changing)
    G = FusedGraph.from_signal(sig)
    m = TGCN(F_in, H).double()
    h0 = torch.randn(G.num_sequences, H, dtype=torch.float64)

    def run(kind):
        m.zero_grad()
        x = sig.x.clone().requires_grad_(True)
        h = h0.clone().requires_grad_(True)
        if kind == "autograd":
            u = tgcn_input_projection(m, m.structure_encoder(G, x))
            out = G.from_sequences(masked_recurrent_scan(tgcn_cell(m), G.to_sequences(u), G.packing, h))
        elif kind == "fused":
            out = m.forward_fused(G, h, x=x)
        else:  # the time encoder on its own (projection outside the scan)
            out = m.time_encoder(m.structure_encoder(G, x), G, h)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        return out.detach(), grads(m), h.grad, x.grad

    ref = run("autograd")
    for kind in ("fused", "time_encoder"):
        got = run(kind)
        torch.testing.assert_close(got[0], ref[0], atol=1e-10, rtol=0)
        assert got[1].keys() == ref[1].keys()
        for k in ref[1]:
            torch.testing.assert_close(got[1][k], ref[1][k], atol=1e-10, rtol=0)
        torch.testing.assert_close(got[2], ref[2], atol=1e-10, rtol=0)
        torch.testing.assert_close(got[3], ref[3], atol=1e-10, rtol=0)


def test_fused_graph_time_major_permutation():
    for changing in (False, True):
        G = FusedGraph.from_signal(make_signal(changing=changing))
        z = torch.randn(G.num_nodes, 4, dtype=torch.float64, requires_grad=True)
        tm = G.to_time_major(z)
        # time-major row i is the i-th row of the packing's layout of the sequence-order rows
        torch.testing.assert_close(tm, G.to_sequences(z).index_select(0, G.packing.time_major), atol=0, rtol=0)
        torch.testing.assert_close(G.from_time_major(tm), z, atol=0, rtol=0)
        G.from_time_major(tm).sum().backward()
        assert torch.equal(z.grad, torch.ones_like(z))
        # a fixed vertex set listed in vertex order needs no permutation at all
        assert (G.to_time_major(z) is z) == (not changing)


# ---------------------------------------------------------------- MPNNLSTM
@pytest.mark.parametrize("window", [1, 2])
def test_mpnnlstm_matches_pygt(window):
    torch.manual_seed(0)
    n, F = 5, 3
    ours, theirs = MPNNLSTM(F, 4, n, window, 0.0), rec.MPNNLSTM(F, 4, n, window, 0.0)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    ours.load_state_dict(theirs.state_dict())
    B = 2
    x = torch.randn(B * window * n, F)
    ei = torch.randint(0, x.shape[0], (2, 30))
    w = torch.rand(30)
    out = ours(x, ei, w)
    assert out.shape == (B * n, 2 * 4 + F + window - 1) and ours.out_channels == out.shape[1]
    torch.testing.assert_close(out, theirs(x, ei, w), atol=1e-6, rtol=0)
    # BatchNorm running statistics updated identically
    torch.testing.assert_close(ours._batch_norm_2.running_var, theirs._batch_norm_2.running_var)


@pytest.mark.parametrize("train", [True, False])
def test_mpnnlstm_fused_equals_loop_with_batchnorm_per_snapshot(train):
    torch.manual_seed(0)
    sig = make_signal(changing=True)  # window=1 accepts changing vertex sets
    a = MPNNLSTM(3, 4, 7, 1, 0.0).double().train(train)
    b = copy.deepcopy(a)
    ref = per_snapshot_outputs(lambda x, ei, w, H: a(x, ei, w), sig)
    out = b.forward_fused(FusedGraph.from_signal(sig))
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(b._batch_norm_1, name), getattr(a._batch_norm_1, name))
    if train:  # batch statistics per snapshot differ from statistics over all snapshots
        assert not torch.allclose(a._batch_norm_1.running_mean, torch.zeros(4, dtype=torch.float64))


def test_mpnnlstm_window_layout_error():
    sig = make_signal(changing=False, V=7)
    m = MPNNLSTM(3, 4, 3, 2, 0.0).double()  # 7 rows per snapshot is not a multiple of 2*3
    with pytest.raises(ModelInputError, match="window"):
        m.forward_fused(FusedGraph.from_signal(sig))


# ---------------------------------------------------------------- DySAT
def naive_dysat_block(block, sig):
    """Structural GAT per snapshot, then MHA per vertex over its own rows (python loops; tiny graphs)."""
    zs = [block.structure(d.x, d.edge_index) for d in sig]
    z = torch.cat(zs)
    sg = sig.supergraph()
    att = block.temporal
    out = torch.empty_like(z)
    for s in range(sg.sequence_ptr.numel() - 1):
        rows = sg.sequence_order[sg.sequence_ptr[s]:sg.sequence_ptr[s + 1]]
        xs = z[rows] + att.position_embedding(sg.time[rows])
        L = rows.numel()
        mask = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)  # True = blocked (causal)
        a, _ = att.attn(xs[None], xs[None], xs[None], attn_mask=mask, need_weights=False)
        a = a[0]
        h = a + torch.relu(block.feedforward(a))
        out[rows] = h + z[rows]
    return out


def test_dysat_fused_equals_naive_and_per_snapshot_reference():
    torch.manual_seed(0)
    sig = make_signal(T=6, changing=True)
    m = DySAT(3, 8, num_time_steps=6, structural_heads=2, temporal_heads=2).double().eval()
    G = FusedGraph.from_signal(sig)
    out = m.forward_fused(G)
    torch.testing.assert_close(out, naive_dysat_block(m.blocks[0], sig), atol=1e-10, rtol=0)
    torch.testing.assert_close(out, dysat_per_snapshot(m, sig), atol=1e-10, rtol=0)


def test_dysat_two_blocks_gradients_and_link_logits():
    torch.manual_seed(0)
    sig = make_signal(T=5, changing=True)
    m = DySAT(3, 8, num_time_steps=5, structural_heads=2, temporal_heads=4, num_blocks=2).double()
    out = assert_fused_matches_reference(m, dysat_per_snapshot(m, sig), sig, grad_atol=1e-9)
    src, dst = torch.tensor([0, 1]), torch.tensor([2, 3])
    torch.testing.assert_close(m.link_logits(out, src, dst), (out[src] * out[dst]).sum(-1))
    assert m.dependency_pattern().num_blocks == 2


def test_dysat_too_few_positions():
    sig = make_signal(T=5)
    m = DySAT(3, 8, num_time_steps=3, structural_heads=2, temporal_heads=2).double()
    with pytest.raises(ValueError, match="num_time_steps"):
        m.forward_fused(FusedGraph.from_signal(sig))
