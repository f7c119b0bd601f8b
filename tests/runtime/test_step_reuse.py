"""ReInc's reuse on the black-box path (pyg_dynscale.runtime.step_reuse): FusedTrainer with reuse (the cell
is not called; input basis once, input projections of all snapshots in one product, per step the
state-dependent part) equals FusedTrainer without reuse (PyGT's cell called per snapshot) in float64 --
losses over 3 epochs, parameters, predictions -- for GConvGRU (K=2, 3), GConvLSTM, GCLSTM, TGCN and DCRNN
(K=2, 3), on a static graph, on changing graphs with changing vertex sets and on directed ones, with and
without checkpoint_every; a module around one cell (PyGT's RecurrentGCN) has its cell's calls answered by the reuse;
where reuse does not apply the module is called as it is."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import ModelInputError
from tests.helpers import blackbox_cases as cases
from tests.helpers.step_reuse import EPOCHS, make_cell, train

pytestmark = pytest.mark.skipif(not cases.HAVE_PYGT, reason="needs torch-geometric-temporal")

CELLS = [("GConvGRU", 2), ("GConvGRU", 3), ("GConvLSTM", 2), ("GCLSTM", 2), ("TGCN", None), ("DCRNN", 2),
         ("DCRNN", 3)]


def static_signal() -> DynamicGraphSignal:
    """Every vertex in every snapshot, the edges of one snapshot repeated; features and targets change."""
    base = cases.signal("fixed")
    d0 = base.snapshot(0)
    g = torch.Generator().manual_seed(1)
    T = base.num_snapshots
    return DynamicGraphSignal([d0.edge_index] * T, [d0.edge_attr] * T,
                              [torch.randn(cases.V, cases.F, generator=g, dtype=torch.float64) for _ in range(T)],
                              [torch.randn(cases.V, generator=g, dtype=torch.float64) for _ in range(T)],
                              dtype=torch.float64)


def directed_signal() -> DynamicGraphSignal:
    """The changing signal with every other edge dropped and the weights redrawn: no edge has its reverse
    with the same weight, so no propagation operator is its own transpose."""
    sig = cases.signal("plain")
    g = torch.Generator().manual_seed(2)
    snaps = [sig.snapshot(t) for t in range(sig.num_snapshots)]
    eis = [d.edge_index[:, ::2] for d in snaps]
    return DynamicGraphSignal(eis, [torch.rand(e.shape[1], generator=g, dtype=torch.float64) + 0.5 for e in eis],
                              [d.x for d in snaps], [d.y for d in snaps], node_ids=[d.n_id for d in snaps],
                              num_vertices=sig.num_vertices, dtype=torch.float64)


SIGNALS = {"static": static_signal, "changing": lambda: cases.signal("plain"), "directed": directed_signal}


def assert_same(got: dict, ref: dict, where: str) -> None:
    for a, b in zip(got["losses"], ref["losses"]):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{where}: losses {got['losses']} vs {ref['losses']}"
    for i, (a, b) in enumerate(zip(got["params"], ref["params"])):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12, msg=f"{where}: parameter {i}")
    torch.testing.assert_close(got["pred"], ref["pred"], rtol=1e-9, atol=1e-12, msg=f"{where}: predictions")


@pytest.mark.parametrize("graph", list(SIGNALS))
@pytest.mark.parametrize("name,K", CELLS)
def test_reuse_equals_calling_the_cell(name, K, graph):
    sig = SIGNALS[graph]()
    ref = train(*make_cell(name, K), sig, reuse=False)
    assert ref["reuse"] is None and ref["calls"] > 0
    for every in (None, 2):
        got = train(*make_cell(name, K), sig, reuse=True, every=every)
        assert got["reuse"] is not None and got["calls"] == 0, "the reuse path must not call the cell"
        assert_same(got, ref, f"{name} K={K} {graph} checkpoint_every={every}")
    # the losses move: a trajectory, not one point
    assert abs(ref["losses"][0] - ref["losses"][-1]) > 1e-6


def test_basis_is_computed_once_for_all_snapshots():
    from pyg_dynscale.runtime import FusedTrainer

    sig = cases.signal("plain")
    m, head = make_cell("GConvGRU", 3)
    tr = FusedTrainer(m, sig, head=head, loss="mse", path="blackbox")
    r = tr.runner.reuse
    assert r.basis.shape == (sig.num_vertex_time_nodes, 3, cases.F)
    assert r.sizes == sig.nodes_per_snapshot.tolist() and len(r.graphs) == sig.num_snapshots
    assert not r.basis.requires_grad


class XFirst(torch.nn.Module):
    """A module that transforms the features before its cell: the cell's input is not the snapshot's."""

    def __init__(self) -> None:
        super().__init__()
        from torch_geometric_temporal.nn.recurrent import GConvGRU

        torch.manual_seed(5)
        self.lin, self.recurrent = torch.nn.Linear(cases.F, cases.F), GConvGRU(cases.F, cases.H, 2)
        torch.manual_seed(6)  # the head the test creates next

    def forward(self, x, edge_index, edge_weight, h):  # noqa: ANN001
        h = self.recurrent(self.lin(x), edge_index, edge_weight, h)
        return h, h


class KeywordLSTM(torch.nn.Module):
    """A GConvLSTM called with keyword arguments, returning ``(y, h, c)``."""

    def __init__(self) -> None:
        super().__init__()
        from torch_geometric_temporal.nn.recurrent import GConvLSTM

        torch.manual_seed(7)
        self.cell, self.lin = GConvLSTM(cases.F, cases.H, 2), torch.nn.Linear(cases.H, 1)

    def forward(self, x, edge_index, edge_weight, h, c):  # noqa: ANN001
        h, c = self.cell(x, edge_index, edge_weight=edge_weight, H=h, C=c)
        return self.lin(h), h, c


@pytest.mark.parametrize("cell_name,transform,every", [("GConvGRU", False, None), ("GConvGRU", True, 2),
                                                        ("TGCN", True, None), ("keywords", False, None)])
def test_a_module_around_a_cell_gets_the_reuse(cell_name, transform, every):
    """PyGT's RecurrentGCN (cell, ReLU, Linear; optionally a transformed carried state), and an LSTM cell
    called with keywords: the module runs, its cell's call on the snapshot's own inputs is answered by the
    reuse, and training equals reuse=False."""
    sig = cases.signal("plain")

    def make():
        if cell_name == "keywords":
            return KeywordLSTM().double(), torch.nn.Identity()
        return cases.RecurrentGCN(cell_name, transform).double(), torch.nn.Identity()

    ref = train(*make(), sig, reuse=False)
    got = train(*make(), sig, reuse=True, every=every)
    assert ref["reuse"] is None
    assert got["reuse"] is not None and got["reuse"].inner is not None
    # every snapshot's cell call, in every epoch (and in the recomputation of checkpointed windows)
    assert got["hits"] >= (EPOCHS + 1) * sig.num_snapshots
    assert_same(got, ref, f"RecurrentGCN({cell_name}, transform={transform}) checkpoint_every={every}")


def test_where_reuse_does_not_apply_the_module_is_called():
    from torch_geometric_temporal.nn.recurrent import DCRNN, GConvGRU

    from pyg_dynscale.runtime import FusedTrainer

    sig = cases.signal("plain")
    # features transformed before the cell: the reuse is built but never answers, and the result is the cell's
    ref, got = (train(XFirst().double(), torch.nn.Linear(cases.H, 1).double(), sig, reuse=r) for r in (False, True))
    assert got["reuse"] is not None and got["hits"] == 0
    assert_same(got, ref, "XFirst")

    # a subclass may change forward: called as it is
    class MyGRU(GConvGRU):
        pass

    torch.manual_seed(3)
    sub = train(MyGRU(cases.F, cases.H, 2).double(), torch.nn.Linear(cases.H, 1).double(), sig, reuse=True)
    assert sub["reuse"] is None and sub["calls"] > 0
    # DCRNN on a snapshot with a repeated edge (DConv's dense adjacency merges it): the cell runs
    eis = [sig.snapshot(t).edge_index for t in range(sig.num_snapshots)]
    eis[2] = torch.cat([eis[2], eis[2][:, :1]], 1)
    dup = DynamicGraphSignal(eis, None, [sig.snapshot(t).x for t in range(sig.num_snapshots)],
                             [sig.snapshot(t).y for t in range(sig.num_snapshots)],
                             node_ids=[sig.snapshot(t).n_id for t in range(sig.num_snapshots)],
                             num_vertices=sig.num_vertices, dtype=torch.float64)
    torch.manual_seed(3)
    tr = FusedTrainer(DCRNN(cases.F, cases.H, 2).double(), dup, head=torch.nn.Linear(cases.H, 1).double(),
                      path="blackbox")
    assert tr.runner.reuse is None          # (DConv itself then fails on that snapshot: PyGT's behaviour, kept)


def test_reuse_must_be_a_bool():
    from pyg_dynscale.runtime import FusedTrainer

    m, head = make_cell("GConvGRU", 2)
    with pytest.raises(ModelInputError, match="reuse"):
        FusedTrainer(m, cases.signal("plain"), head=head, path="blackbox", reuse="yes")


@pytest.mark.parametrize("name,K,every", [("GConvGRU", 2, 2), ("GConvLSTM", 2, None), ("DCRNN", 2, None),
                                          ("TGCN", None, 2)])
def test_reuse_step_stays_on_the_device(name, K, every):
    """The reused input side and step graphs move with ``place`` (no host index left behind), and a
    training step reads nothing back to the host (fake device, tests/helpers/fake_device.py)."""
    from torch._subclasses.fake_tensor import FakeTensor

    from pyg_dynscale.runtime import FusedTrainer
    from tests.helpers.fake_device import FAKE, FakeDevice, HostCopies

    torch.set_default_dtype(torch.float64)
    try:
        m, head = make_cell(name, K)
        tr = FusedTrainer(m, cases.signal("plain"), head=head, loss="mse", path="blackbox", checkpoint_every=every)
        assert tr.runner.reuse is not None
        fake = FakeDevice()
        fake.modules(m, head)
        params = list(m.parameters()) + list(head.parameters())
        opt = torch.optim.SGD(params, lr=0.1)
        tr.place(fake.move)
        assert isinstance(tr.runner.reuse.basis, FakeTensor)
        with HostCopies() as rec:
            opt.zero_grad()
            loss = tr.compute_loss()
            loss.backward()
            opt.step()
        assert isinstance(loss, FakeTensor) and loss.device == FAKE
        assert all(isinstance(p.grad, FakeTensor) for p in params)
        assert not rec.copies, rec.copies
    finally:
        torch.set_default_dtype(torch.float32)


class _AroundOwnTGCN(torch.nn.Module):
    """A user's module around pyg_dynscale's own per-snapshot ``TGCN`` (its reuse: nn.reinc_reuse.TGCNLocalReuse)."""

    def __init__(self) -> None:
        super().__init__()
        from pyg_dynscale.nn import TGCN

        torch.manual_seed(4)
        self.recurrent = TGCN(cases.F, cases.H)
        self.linear = torch.nn.Linear(cases.H, 1)

    def forward(self, x, edge_index, edge_weight, h):
        h = self.recurrent(x, edge_index, edge_weight, h)
        return self.linear(torch.relu(h)), h


def test_a_module_around_pyg_dynscale_tgcn_gets_the_reuse():
    """The ReInc layers' reuse classes (batched-projection API, graph returned as is by ``operators``) serve
    the black-box step runner too: equal to reuse=False, every cell call answered."""
    sig = cases.signal("plain")
    ref = train(_AroundOwnTGCN().double(), torch.nn.Identity(), sig, reuse=False)
    got = train(_AroundOwnTGCN().double(), torch.nn.Identity(), sig, reuse=True, every=2)
    assert got["reuse"] is not None and got["reuse"].inner is not None
    assert got["hits"] >= (EPOCHS + 1) * sig.num_snapshots
    assert_same(got, ref, "module around pyg_dynscale.nn.TGCN")
