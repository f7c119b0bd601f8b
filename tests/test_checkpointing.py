"""Gradient checkpointing over blocks of snapshots on the decomposed path
(FusedTrainer, TimeBlockCheckpoint): identical losses, gradients and
parameters to the unblocked forward (float64); models it cannot window are
refused. (The black-box path's checkpointing is in test_blackbox.py.)"""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.nn import DySAT, MPNNLSTM, TGCN
from pyg_dynscale.runtime import FusedTrainer
from tests import distributed_cases as dcases

EPOCHS = 2


def _run(make, every, h0=None):
    m, head = make()
    sig = dcases.signal()
    tr = FusedTrainer(m, sig, head=head, loss="mse", checkpoint_every=every, h0=h0,
                      optimizer=torch.optim.SGD(list(m.parameters()) + list(head.parameters()), lr=0.1))
    losses, grads = [], None
    for e in range(EPOCHS):
        losses.append(tr.train_epoch())
        if e == 0:
            grads = [p.grad.clone() for p in list(m.parameters()) + list(head.parameters())]
    return losses, grads, [p.detach().clone() for p in m.parameters()], tr


def _tgcn2():
    torch.manual_seed(1)
    return TGCN(dcases.F, 4, num_layers=2).double(), torch.nn.Linear(4, 1).double()


def _pygt_tgcn():
    pytest.importorskip("torch_geometric_temporal")
    from torch_geometric_temporal.nn.recurrent import TGCN as PyGTTGCN

    torch.manual_seed(1)
    return PyGTTGCN(dcases.F, 4).double(), torch.nn.Linear(4, 1).double()


@pytest.mark.parametrize("make", [_tgcn2, _pygt_tgcn])
@pytest.mark.parametrize("every", [1, 2, 4])
def test_checkpointed_decomposed_equals_unblocked(make, every):
    ref = _run(make, None)
    got = _run(make, every)
    assert got[3].time_blocks is not None and len(got[3].time_blocks.windows) == -(-dcases.T // every)
    for a, b in zip(got[0], ref[0]):
        assert abs(a - b) <= 1e-9 * (1 + abs(b))
    for part in (1, 2):
        for a, b in zip(got[part], ref[part]):
            assert float((a - b).abs().max()) <= 1e-9 * (1 + float(b.abs().max()))


def test_checkpointed_decomposed_with_initial_state():
    sig = dcases.signal()
    h0 = torch.randn(sig.supergraph().sequence_ptr.numel() - 1, 4, generator=torch.Generator().manual_seed(2),
                     dtype=torch.float64)
    ref, got = _run(_tgcn2, None, h0), _run(_tgcn2, 2, h0)
    for a, b in zip(got[0], ref[0]):
        assert abs(a - b) <= 1e-9 * (1 + abs(b))


def test_windows_it_cannot_run_are_refused():
    sig = dcases.signal()
    with pytest.raises(NotImplementedError, match="attention"):
        FusedTrainer(DySAT(dcases.F, 4, dcases.T).double(), sig, checkpoint_every=2)
    with pytest.raises(NotImplementedError, match="recurrent"):
        FusedTrainer(MPNNLSTM(dcases.F, 4, 1, 1, 0.0).double(), sig, checkpoint_every=2)
