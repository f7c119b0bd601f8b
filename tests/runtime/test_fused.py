"""FusedTrainer: same losses and gradients as PyGT's canonical loop; errors."""
import copy

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import TGCN, DySAT
from pyg_dynscale.runtime import FusedTrainer, dysat_per_snapshot, snapshot_mean
from tests.helpers.optional_deps import pygt_or_skip_module

rec = pygt_or_skip_module().nn.recurrent

from tests.helpers.signals import make_signal  # noqa: E402  (after the skip: it needs PyGT too)


def pygt_epochs(model, head, sig, epochs, lr, carry=True):
    """PyGT's loop (C): H carried (by vertex id when the set changes), cost averaged
    over snapshots, one backward + Adam step per epoch."""
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=lr)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        cost, table = 0, None
        for t, d in enumerate(sig):
            if carry:
                if table is None:
                    table = d.x.new_zeros(sig.num_vertices, model.out_channels)
                h = model(d.x, d.edge_index, d.edge_attr, table.index_select(0, d.n_id))
                table = table.index_copy(0, d.n_id, h)
            else:
                h = model(d.x, d.edge_index, d.edge_attr)
            cost = cost + torch.mean((head(h).squeeze() - d.y) ** 2)
        cost = cost / (t + 1)
        cost.backward()
        opt.step()
        losses.append(float(cost.detach()))
    return losses


@pytest.mark.parametrize("changing", [False, True])
def test_tgcn_losses_and_parameters_equal_pygt_loop(changing):
    torch.manual_seed(0)
    sig = make_signal(T=6, V=8, changing=changing)
    model = rec.TGCN(3, 5).double()
    head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(5, 1)).double()
    m2, h2 = copy.deepcopy(model), copy.deepcopy(head)
    ref = pygt_epochs(model, head, sig, 3, 0.05)
    tr = FusedTrainer(m2, sig, head=h2, loss="mse", lr=0.05)
    fused = [tr.train_epoch() for _ in range(3)]
    assert max(abs(a - b) for a, b in zip(ref, fused)) < 1e-10
    for (k, p), q in zip(model.named_parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, atol=1e-9, rtol=0)
    pred = tr.predict()
    assert pred.shape == (sig.num_vertex_time_nodes, 1)


def test_tgcn_gradients_float32_within_1e5_and_sum_reduction():
    torch.manual_seed(0)
    sig = make_signal(T=6, V=8, changing=True, dtype=torch.float32)
    model, head = TGCN(3, 5), torch.nn.Linear(5, 1)
    tr = FusedTrainer(copy.deepcopy(model), sig, head=copy.deepcopy(head), snapshot_reduction="sum")
    loss = tr.compute_loss()
    loss.backward()
    ref_cost, table = 0, torch.zeros(sig.num_vertices, 5)
    for d in sig:
        h = model(d.x, d.edge_index, d.edge_attr, table[d.n_id])
        table = table.index_copy(0, d.n_id, h)
        ref_cost = ref_cost + torch.mean((head(h).squeeze() - d.y) ** 2)
    ref_cost.backward()
    assert abs(float(loss.detach()) - float(ref_cost.detach())) < 1e-5
    for p, q in zip(model.parameters(), tr.model.parameters()):
        assert (p.grad - q.grad).abs().max() < 1e-5


def test_mpnnlstm_trainer_equals_pygt_loop_d():
    torch.manual_seed(0)
    sig = make_signal(T=5, V=6, changing=False)
    model = rec.MPNNLSTM(3, 4, 6, 1, 0.0).double()
    head = torch.nn.Linear(2 * 4 + 3, 1).double()
    m2, h2 = copy.deepcopy(model), copy.deepcopy(head)
    ref = pygt_epochs(model, head, sig, 2, 0.05, carry=False)
    tr = FusedTrainer(m2, sig, head=h2, lr=0.05)
    fused = [tr.train_epoch() for _ in range(2)]
    assert max(abs(a - b) for a, b in zip(ref, fused)) < 1e-10
    torch.testing.assert_close(model._batch_norm_1.running_mean, m2._batch_norm_1.running_mean)


def link_signal(T=5, V=8, seed=3):
    g = torch.Generator().manual_seed(seed)
    base = make_signal(T=T, V=V, changing=True, seed=seed)
    eis, ws, xs, ids, lis, lbs = [], [], [], [], [], []
    for d in base:
        n = d.num_nodes
        li = torch.randint(0, n, (2, 6), generator=g)
        eis.append(d.edge_index); ws.append(d.edge_attr); xs.append(d.x); ids.append(d.n_id)
        lis.append(li); lbs.append(torch.randint(0, 2, (6,), generator=g).double())
    return DynamicGraphSignal(eis, ws, xs, None, node_ids=ids, num_vertices=V, dtype=torch.float64,
                              edge_label_index=lis, edge_label=lbs)


def test_dysat_bce_link_loss_equals_per_snapshot_reference():
    torch.manual_seed(0)
    sig = link_signal()
    model = DySAT(3, 8, num_time_steps=5, structural_heads=2, temporal_heads=2).double()
    ref_model = copy.deepcopy(model)
    tr = FusedTrainer(model, sig, loss="bce_link", lr=0.01)
    loss = tr.compute_loss()
    loss.backward()
    h = dysat_per_snapshot(ref_model, sig)
    ref, off = 0, 0
    for t, d in enumerate(sig):
        s, dd = d.edge_label_index + off
        ref = ref + torch.nn.functional.binary_cross_entropy_with_logits((h[s] * h[dd]).sum(-1), d.edge_label)
        off += d.num_nodes
    ref = ref / sig.num_snapshots
    ref.backward()
    assert abs(float(loss.detach()) - float(ref.detach())) < 1e-10
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-9, rtol=0)
    l0 = tr.train_epoch()
    assert tr.evaluate()["loss"] < l0 + 1.0  # runs in eval mode, finite


def test_snapshot_mean_skips_empty_snapshots():
    v = torch.tensor([1.0, 3.0, 10.0])
    seg = torch.tensor([0, 0, 2])
    assert float(snapshot_mean(v, seg, 3)) == pytest.approx((2.0 + 10.0) / 2)
    assert float(snapshot_mean(v, seg, 3, "sum")) == pytest.approx(12.0)


# ------------------------------------------------------------------ bad input
def test_errors_wrong_initial_state_missing_targets_bad_loss():
    sig = make_signal(dtype=torch.float32)
    with pytest.raises(ModelInputError, match="h0"):
        FusedTrainer(TGCN(3, 5), sig, h0=torch.zeros(2, 5))
    with pytest.raises(ModelInputError, match="edge_label_index"):
        FusedTrainer(TGCN(3, 5), sig, loss="bce_link")
    with pytest.raises(ModelInputError, match="loss"):
        FusedTrainer(TGCN(3, 5), sig, loss="hinge")
    nosig = make_signal(dtype=torch.float32)
    del nosig.fields["y"]
    with pytest.raises(ModelInputError, match="'y'"):
        FusedTrainer(TGCN(3, 5), nosig)


def test_errors_mismatched_devices():
    sig = make_signal(dtype=torch.float32)
    with pytest.raises(ModelInputError, match="model.*meta"):
        FusedTrainer(TGCN(3, 5).to("meta"), sig, device="cpu")
    with pytest.raises(ModelInputError, match="head"):
        FusedTrainer(TGCN(3, 5), sig, head=torch.nn.Linear(5, 1).to("meta"))


def test_signal_on_other_device_goes_through_diff_transfer(monkeypatch):
    import pyg_dynscale.data.transfer as transfer

    calls = []

    def fake(signal, device, method="diff", **kw):
        calls.append((str(device), method))
        return signal, {"method": method}  # stays on cpu -> must be rejected, not silently used

    monkeypatch.setattr(transfer, "transfer_to_device", fake)
    sig = make_signal(dtype=torch.float32)
    with pytest.raises(ModelInputError, match="signal"):
        FusedTrainer(TGCN(3, 5).to("meta"), sig)
    assert calls == [("meta", "diff")]


def test_tune_cpu_allocator_applies_on_glibc():
    import platform
    import sys

    from pyg_dynscale.runtime import tune_cpu_allocator

    expected = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert tune_cpu_allocator() is expected
