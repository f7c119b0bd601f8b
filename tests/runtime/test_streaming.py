"""FusedTrainer(stream=True): a host-resident signal trained one window at a
time (SC'21 §3) equals the in-memory run, moves what graph difference says,
keeps at most two windows resident, and prefetches the next window before
computing the current one -- on the CPU with host-to-host copies (the CUDA
run is in tests/runtime/test_cuda_fused.py)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.data.transfer import diff_encode
from pyg_dynscale.errors import ModelInputError, UnsupportedOptionError
from pyg_dynscale.nn import TGCN
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import distributed_cases as cases

TOL = dict(rtol=0, atol=1e-10)


def _trainer(name: str, sig, stream: bool, every: int, loss_kind: str = "mse"):  # noqa: ANN001
    if name == "tgcn_link":
        torch.manual_seed(11)
        m, head = TGCN(cases.F, 4).double(), None
    else:
        m, head, loss_kind = cases.model(name)
    params = list(m.parameters()) + (list(head.parameters()) if head is not None else [])
    return FusedTrainer(m, sig, head=head, loss=loss_kind, optimizer=torch.optim.SGD, lr=0.1,
                        h0=cases.initial_state(name, sig), checkpoint_every=every if stream else None,
                        stream=stream), params


@pytest.mark.parametrize("name,loss_kind", [("tgcn1", "mse"), ("tgcn2_h0", "mse"), ("stacked_h0", "mse"),
                                            ("tgcn_link", "bce_link")])
@pytest.mark.parametrize("every", [1, 2, 4])
def test_streamed_equals_in_memory(name, loss_kind, every):
    torch.set_default_dtype(torch.float64)
    try:
        sig = cases.signal()
        ref, p_ref = _trainer(name, sig, False, every, loss_kind)
        st, p_st = _trainer(name, sig, True, every, loss_kind)
        for _ in range(3):
            assert st.train_epoch() == pytest.approx(ref.train_epoch(), abs=1e-12)
        for a, b in zip(p_st, p_ref):
            torch.testing.assert_close(a, b, **TOL)
        assert st.evaluate()["loss"] == pytest.approx(ref.evaluate()["loss"], abs=1e-12)
        pred = st.predict()
        assert pred.device.type == "cpu"
        torch.testing.assert_close(pred, ref.predict(), **TOL)
    finally:
        torch.set_default_dtype(torch.float32)


def _window_payload_bytes(sig, every: int) -> list:  # noqa: ANN001
    out = []
    ptr = sig.node_ptr.tolist()
    for t0 in range(0, sig.num_snapshots, every):
        t1 = min(t0 + every, sig.num_snapshots)
        if ptr[t1] > ptr[t0]:
            sub = sig[t0:t1]
            sv = sub.supergraph().sequence_vertex
            out.append(diff_encode(sub).nbytes + sv.numel() * sv.element_size())
    return out


def test_stream_moves_each_window_twice_per_epoch_and_keeps_two_resident():
    torch.set_default_dtype(torch.float64)
    try:
        sig = cases.signal()
        st, _ = _trainer("tgcn2", sig, True, 2)
        st.train_epoch()
        s = st.stream_stats
        payload = _window_payload_bytes(sig, 2)
        # forward, then the recomputation in the backward: every window crosses twice
        assert s.windows == len(payload) and s.transfers == 2 * len(payload)
        assert s.bytes_moved == 2 * sum(payload)
        assert s.max_resident <= 2
        log = st.streamed.windows.log
        W = len(payload)
        fwd = log[: 3 * W]
        # the next window's copy is issued while the current one computes (between its start and its end)
        for i in range(W - 1):
            assert fwd.index(("compute", i)) < fwd.index(("copy", i + 1)) < fwd.index(("done", i))
        bwd = log[3 * W:]
        assert [e for e in bwd if e[0] == "compute"] == [("compute", i) for i in reversed(range(W))]
        for i in range(W - 1, 0, -1):  # the backward prefetches the previous window the same way
            start, end = bwd.index(("compute", i)), bwd.index(("done", i))
            assert start < bwd.index(("copy", i - 1)) < end
        st.predict()
        assert st.stream_stats.transfers == W  # no backward: one copy per window
    finally:
        torch.set_default_dtype(torch.float32)


def test_graph_difference_moves_less_than_whole_windows_on_a_static_graph():
    """A static road-like graph with a temporal signal (PyGT's usual case):
    each window's structure crosses once, not once per snapshot."""
    from pyg_dynscale import DynamicGraphSignal

    g = torch.Generator().manual_seed(0)
    V, T = 400, 24
    ei = torch.randint(0, V, (2, 6 * V), generator=g)
    sig = DynamicGraphSignal([ei] * T, [torch.ones(ei.shape[1])] * T, [torch.randn(V, 4, generator=g) for _ in range(T)],
                             [torch.randn(V, generator=g) for _ in range(T)])
    torch.manual_seed(0)
    m = TGCN(sig.num_node_features, 8)
    tr = FusedTrainer(m, sig, head=torch.nn.Linear(8, 1), loss="mse", checkpoint_every=8, stream=True)
    tr.train_epoch()
    s = tr.stream_stats
    assert 0 < s.bytes_moved < s.bytes_naive
    # traffic(): one process, no collective bytes; the epoch's host -> device copies as their own entry
    report = tr.traffic()
    assert report["measured"]["total"] == report["predicted"]["total"] == 0
    assert report["host_to_device"] == {"load": 0, "epoch": s.bytes_moved}


def test_stream_refusals():
    from pyg_dynscale.nn import DySAT

    sig = cases.signal()
    m, head, _ = cases.model("tgcn1")
    with pytest.raises(ModelInputError, match="checkpoint_every"):
        FusedTrainer(m, sig, head=head, stream=True)
    with pytest.raises(ModelInputError, match="callable"):
        FusedTrainer(m, sig, head=head, loss=lambda tr, out: out.sum(), checkpoint_every=2, stream=True)
    with pytest.raises(UnsupportedOptionError, match="option 'checkpoint_every'.*recurrent time encoder"):
        FusedTrainer(DySAT(cases.F, 4, cases.T).double(), sig, loss="bce_link", checkpoint_every=2, stream=True)
    tr = FusedTrainer(m, sig, head=head, checkpoint_every=2, stream=True)
    with pytest.raises(UnsupportedOptionError, match="option 'stream'.*predict"):
        tr.outputs()
    with pytest.raises(UnsupportedOptionError, match="option 'stream'") as err:
        tr.place(lambda t: t)
    assert err.value.option == "stream"
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    with pytest.raises(UnsupportedOptionError, match="option 'stream'.*black-box") as err:
        FusedTrainer(GConvGRU(cases.F, 4, 2).double(), sig, checkpoint_every=2, stream=True)
    assert "checkpoint_every" in err.value.instead
