"""Gradient checkpointing over blocks of snapshots on the decomposed path
(FusedTrainer, TimeBlockCheckpoint): identical losses, gradients and
parameters to the unblocked forward (float64); models it cannot window are
refused. (The black-box path's checkpointing is in test_blackbox.py.)"""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.errors import UnsupportedOptionError
from pyg_dynscale.nn import DySAT, MPNNLSTM, TGCN
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import distributed_cases as dcases

EPOCHS = 2


def _run(make, every, h0=None):
    m, head = make()
    sig = dcases.signal()
    tr = FusedTrainer(m, sig, head=head, loss="mse", checkpoint_every=every, h0=h0,
                      optimizer=torch.optim.SGD, lr=0.1)
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


def _stacked():
    torch.manual_seed(1)
    return dcases.StackedTGCN(dcases.F, 4).double(), torch.nn.Linear(4, 1).double()


@pytest.mark.parametrize("make", [_tgcn2, _stacked])
def test_checkpointed_decomposed_with_initial_state(make):
    """``h0`` enters the first block; a two-block model carries one state table per block across windows."""
    sig = dcases.signal()
    h0 = torch.randn(sig.supergraph().sequence_ptr.numel() - 1, 4, generator=torch.Generator().manual_seed(2),
                     dtype=torch.float64)
    ref, got = _run(make, None, h0), _run(make, 2, h0)
    for a, b in zip(got[0], ref[0]):
        assert abs(a - b) <= 1e-9 * (1 + abs(b))
    for part in (1, 2):
        for a, b in zip(got[part], ref[part]):
            assert float((a - b).abs().max()) <= 1e-9 * (1 + float(b.abs().max()))


def test_windows_it_cannot_run_are_refused():
    sig = dcases.signal()
    with pytest.raises(UnsupportedOptionError, match="option 'checkpoint_every'.*attention"):
        FusedTrainer(DySAT(dcases.F, 4, dcases.T).double(), sig, checkpoint_every=2)
    with pytest.raises(UnsupportedOptionError, match="option 'checkpoint_every'.*recurrent"):
        FusedTrainer(MPNNLSTM(dcases.F, 4, 1, 1, 0.0).double(), sig, checkpoint_every=2)


def test_zoo_lists_the_models_windows_run():
    """``pyg-dynscale train --recompute-every`` accepts exactly the zoo models gradient checkpointing runs."""
    from pyg_dynscale.nn.zoo import BLACK_BOX_MODELS, MODEL_NAMES, RECOMPUTABLE_MODELS, build_model
    from pyg_dynscale.runtime.time_blocks import check_windowable

    for name in MODEL_NAMES:
        if name in BLACK_BOX_MODELS:  # the black-box runner windows any non-evolving PyGT cell
            assert name in RECOMPUTABLE_MODELS
            continue
        m, _, _ = build_model(name, 3, 4, num_snapshots=5, num_vertices=10)
        try:
            check_windowable(m)
            windowable = True
        except NotImplementedError:
            windowable = False
        assert windowable == (name in RECOMPUTABLE_MODELS), name
