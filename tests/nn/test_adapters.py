"""PyGT adapters: shared parameters, equality with PyGT's own loop, errors."""
import copy
import os

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import DecompositionMismatchError, UnsupportedModelError
from pyg_dynscale.nn import FusedGraph, adapt
from pyg_dynscale.nn.adapters import A3TGCNAdapter, MPNNLSTMAdapter, TGCN2Adapter, TGCNAdapter
from tests.helpers.optional_deps import pygt_or_skip_module

pygt = pygt_or_skip_module()

from tests.helpers.signals import make_signal  # noqa: E402  (after the skip: it needs PyGT too)

rec = pygt.nn.recurrent


def england_covid(T=12):
    from pyg_dynscale.data.loaders import load_england_covid

    return load_england_covid()[0:T]


def pygt_loop(model, signal, kind):
    """PyGT's own per-snapshot loop: H carried (fixed vertex set) or by vertex id."""
    outs, H, table = [], None, None
    for d in signal:
        if kind == "mpnn":
            outs.append(model(d.x, d.edge_index, d.edge_attr))
            continue
        if table is None:
            table = d.x.new_zeros(signal.num_vertices, model.out_channels)
        H = table.index_select(0, d.n_id)
        if kind == "tgcn2":
            h = model(d.x[None], d.edge_index, d.edge_attr, H[None])[0]
        else:
            h = model(d.x, d.edge_index, d.edge_attr, H)
        table = table.index_copy(0, d.n_id, h)
        outs.append(h)
    return torch.cat(outs)


def make(kind, F, periods=3):
    return {
        "tgcn": lambda: rec.TGCN(F, 6),
        "tgcn2": lambda: rec.TGCN2(F, 6, batch_size=1),
        "a3tgcn": lambda: rec.A3TGCN(F, 6, periods),
        "mpnn": lambda: rec.MPNNLSTM(F, 6, 129, 1, 0.0),
    }[kind]()


@pytest.mark.parametrize("kind,cls", [("tgcn", TGCNAdapter), ("tgcn2", TGCN2Adapter), ("mpnn", MPNNLSTMAdapter)])
def test_adapter_outputs_and_gradients_equal_pygt_loop_england_covid(kind, cls):
    torch.manual_seed(0)
    sig = england_covid()
    model = make(kind, sig.num_node_features)
    twin = copy.deepcopy(model)
    a = adapt(model)
    assert type(a) is cls and a.module is model
    ref = pygt_loop(twin, sig, kind)
    ref.pow(2).mean().backward()
    out = a.forward_fused(FusedGraph.from_signal(sig))
    out.pow(2).mean().backward()
    assert (out - ref).abs().max() < 1e-5
    gref = dict(twin.named_parameters())
    for name, p in model.named_parameters():
        assert (p.grad - gref[name].grad).abs().max() < 1e-5, name


def test_a3tgcn_adapter_changing_vertex_sets():
    torch.manual_seed(0)
    sig = make_signal(changing=True, periods=3, dtype=torch.float32)
    model = rec.A3TGCN(3, 6, 3)
    twin = copy.deepcopy(model)
    a = adapt(model)
    assert isinstance(a, A3TGCNAdapter)
    ref = pygt_loop(twin, sig, "a3tgcn")
    ref.sum().backward()
    out = a.forward_fused(FusedGraph.from_signal(sig))
    out.sum().backward()
    assert (out - ref).abs().max() < 1e-5
    assert (model._attention.grad - twin._attention.grad).abs().max() < 1e-5


def test_adapter_shares_parameters_optimizer_step_trains_user_object():
    torch.manual_seed(0)
    sig = make_signal(changing=True, dtype=torch.float32)
    model = rec.TGCN(3, 6)
    direct = copy.deepcopy(model)
    a = adapt(model)
    assert {id(p) for p in a.parameters()} == {id(p) for p in model.parameters()}
    opt_a = torch.optim.SGD(a.parameters(), lr=0.5)
    opt_d = torch.optim.SGD(direct.parameters(), lr=0.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    a.forward_fused(FusedGraph.from_signal(sig)).pow(2).sum().backward()
    opt_a.step()
    pygt_loop(direct, sig, "tgcn").pow(2).sum().backward()
    opt_d.step()
    changed = 0
    for k, v in model.state_dict().items():
        assert (v - direct.state_dict()[k]).abs().max() < 1e-5, k
        changed += int(not torch.equal(v, before[k]))
    assert changed > 0  # the user's own object moved


def test_unsupported_pygt_class_points_to_black_box_path():
    m = rec.GConvGRU(3, 4, 2)
    with pytest.raises(UnsupportedModelError, match="black-box") as e:
        adapt(m)
    assert isinstance(e.value, NotImplementedError)
    with pytest.raises(UnsupportedModelError, match="DCRNN"):
        adapt(rec.DCRNN(3, 4, 2))
    with pytest.raises(UnsupportedModelError):
        adapt(torch.nn.Linear(3, 4))


def test_subclass_breaking_the_decomposition_is_caught_at_wrap_time():
    class ConvolvesHidden(rec.TGCN):
        def forward(self, X, edge_index, edge_weight=None, H=None):
            H = super().forward(X, edge_index, edge_weight, H)
            return self.conv_z.propagate(edge_index, x=H, edge_weight=torch.ones(edge_index.shape[1]))

    with pytest.raises(DecompositionMismatchError, match="ConvolvesHidden"):
        adapt(ConvolvesHidden(3, 4))

    class Harmless(rec.TGCN):  # same computation, different code: accepted
        pass

    assert isinstance(adapt(Harmless(3, 4)), TGCNAdapter)


def test_self_check_leaves_user_object_untouched():
    m = rec.MPNNLSTM(3, 4, 5, 1, 0.3)
    before = copy.deepcopy(m.state_dict())
    adapt(m)
    assert m.training
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]), k
