"""DGC's MPNN-LSTM (LSTM across snapshots): fused == a per-snapshot loop with
torch.nn.LSTM cells, the declared pattern, and the time-kind declarations of
the other layers and adapters."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from pyg_dynscale.nn import MPNNLSTM, MPNNLSTMDGC, TGCN, DySAT, FusedGraph, adapt
from pyg_dynscale.partition import DependencyPattern
from tests.helpers.signals import make_dynamic_signal


def _reference(m: MPNNLSTMDGC, sig) -> torch.Tensor:
    """Per snapshot: the GCNs with BatchNorm over that snapshot (one PyG call),
    then each LSTM layer one step from the vertex's state at its previous
    appearance (torch.nn.LSTM on a length-1 sequence)."""
    H, L = m.hidden_size, m.lstm_layers
    table = torch.zeros(sig.num_vertices, 2 * H * L, dtype=torch.float64)
    outs = []
    for d in sig:
        if d.num_nodes == 0:
            continue
        x, w = d.x.double(), d.edge_attr.double()
        h1 = m._batch_norm_1(F.relu(m._convolution_1(x, d.edge_index, w)))
        h2 = m._batch_norm_2(F.relu(m._convolution_2(h1, d.edge_index, w)))
        inp = torch.cat([h1, h2], 1)
        st = table.index_select(0, d.n_id)
        new, out = [], []
        for k, lstm in enumerate(m.lstms):
            h0 = st[:, 2 * H * k:2 * H * k + H].unsqueeze(0)
            c0 = st[:, 2 * H * k + H:2 * H * (k + 1)].unsqueeze(0)
            # torch.nn.LSTM itself (batch_first): n sequences of one step
            o, (hn, cn) = torch.nn.LSTM.forward(lstm, inp.unsqueeze(1), (h0, c0))
            inp = o[:, 0]
            out.append(inp)
            new += [hn[0], cn[0]]
        table = table.index_copy(0, d.n_id, torch.cat(new, 1))
        outs.append(torch.cat(out, 1))
    return torch.cat(outs, 0)


def test_mpnnlstm_dgc_fused_equals_per_snapshot_loop():
    sig = make_dynamic_signal(seed=1, T=6, V=10)  # snapshots of >= 2 rows: BatchNorm is defined
    torch.manual_seed(0)
    m = MPNNLSTMDGC(3, 4).double()
    g = FusedGraph.from_signal(sig)
    fused = m.forward_fused(g, x=g.x.double())
    (fused ** 2).sum().backward()
    gf = {k: p.grad.clone() for k, p in m.named_parameters()}
    m.zero_grad()
    # the reference sees the BatchNorm running stats from scratch too
    torch.manual_seed(0)
    m2 = MPNNLSTMDGC(3, 4).double()
    m2.load_state_dict({k: v for k, v in m.state_dict().items() if "running" not in k and "num_batches" not in k}, strict=False)
    ref = _reference(m2, sig)
    assert torch.allclose(fused, ref, atol=1e-10), float((fused - ref).abs().max())
    (ref ** 2).sum().backward()
    for k, p in m2.named_parameters():
        assert torch.allclose(gf[k], p.grad, atol=1e-9), k
    # the state is carried across snapshots: resetting it changes the outputs
    h0 = torch.ones(g.num_sequences, m.state_width, dtype=torch.float64)
    assert not torch.allclose(m.forward_fused(g, h0=h0, x=g.x.double()), fused)


def test_declared_patterns_match_the_layers():
    assert MPNNLSTMDGC(3, 4).dependency_pattern() == DependencyPattern.preset("mpnnlstm", 3, 4)
    assert MPNNLSTMDGC(3, 4).state_width == DependencyPattern.preset("mpnnlstm", 3, 4).blocks[0].time_width
    p = MPNNLSTM(3, 4, 1, 1, 0.0).dependency_pattern()
    assert p.blocks[0].time_kind == "none" and p.blocks[0].redistribution_width == 2 * 4 + 3
    assert MPNNLSTM(3, 4, 1, 1, 0.0).time_kind == "none"
    assert TGCN(3, 4, num_layers=2).dependency_pattern() == DependencyPattern.preset("tgcn", 3, 4, gcn_layers=2)
    assert DySAT(3, 4, 5, 2, 2, num_blocks=2).dependency_pattern() == DependencyPattern.preset("dysat", 3, 4, num_blocks=2)


def test_pygt_adapters_declare_their_patterns():
    from torch_geometric_temporal.nn.recurrent import A3TGCN, MPNNLSTM as PM, TGCN as PT

    assert adapt(PT(3, 5), check=False).dependency_pattern() == DependencyPattern.preset("tgcn", 3, 5)
    a = adapt(A3TGCN(3, 5, periods=4), check=False).dependency_pattern()
    assert a.blocks[0].spatial_widths == (12,) and a.blocks[0].redistribution_width == 60
    mp = adapt(PM(3, 5, 4, 1, 0.0), check=False)
    assert mp.time_kind == "none" and mp.dependency_pattern().blocks[0].time_kind == "none"


class _Recording:
    """A Halo that records what each aggregation sees and perturbs it."""

    owned = None

    def __init__(self):
        self.calls = []

    def exchange(self, block, layer, x):
        self.calls.append((block, layer, tuple(x.shape)))
        return x + 1.0

    def all_reduce(self, x):
        return x


def test_every_structure_encoder_calls_the_halo_hook_before_each_aggregation():
    from pyg_dynscale.nn.tgcn import tgcn_fused

    sig = make_dynamic_signal(seed=1, T=6, V=10)
    g = FusedGraph.from_signal(sig)
    x = g.x.double()
    cases = [
        (TGCN(3, 4).double(), [(0, 0, (g.num_nodes, 3))]),
        (TGCN(3, 4, num_layers=2).double(), [(0, 0, (g.num_nodes, 3)), (0, 1, (g.num_nodes, 12))]),
        (MPNNLSTMDGC(3, 4).double(), [(0, 0, (g.num_nodes, 3)), (0, 1, (g.num_nodes, 4))]),
        (MPNNLSTM(3, 4, 1, 1, 0.0).double(), [(0, 0, (g.num_nodes, 3)), (0, 1, (g.num_nodes, 4))]),
    ]
    for m, expect in cases:
        h = _Recording()
        z = m.structure_encoder(g, x, block=0, halo=h)
        assert h.calls == expect, type(m).__name__
        assert not torch.allclose(z, m.structure_encoder(g, x))  # the hook's rows are the ones aggregated
    d = DySAT(3, 4, 6, 2, 2, num_blocks=2).double()
    h = _Recording()
    d.structure_encoder(g, torch.zeros(g.num_nodes, 4, dtype=torch.float64), block=1, halo=h)
    assert h.calls == [(1, 0, (g.num_nodes, 4))]
    t = TGCN(3, 4).double()
    h = _Recording()
    out = tgcn_fused(t, g, x, None, halo=h)
    assert h.calls == [(0, 0, (g.num_nodes, 3))] and not torch.allclose(out, tgcn_fused(t, g, x, None))
