"""CUDA: ``FusedTrainer`` paths that never ran on a GPU, on one device == on the CPU (float64): TM-GCN
(the banded M-transform over time, :class:`~pyg_dynscale.nn.TMGCN`), and the continued evaluation of
a later window (``evaluate(test)`` / ``predict(test)``: each vertex's state carried over from the
training window) on the decomposed path (T-GCN with ``h0``) and the black-box path (a user's cell;
PyGT's GConvGRU where PyGT is installed).

Losses, parameters, predictions and evaluation losses to 1e-9 (CUDA's kernels sum in another order
than the CPU's: not bitwise). :func:`run` is a function of the device (checked on the CPU against
itself where there is no GPU). Host synchronizations of one CUDA epoch are recorded in the report,
not asserted. Skipped without a GPU (``make gpu-check`` runs them where there is one)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import cuda_cases as cc

pytestmark = cc.cuda
#: model case -> evaluate a later window
CASES = {"tmgcn": False, "tgcn2_h0": True, "user_cell": True, "GConvGRU": True}


def run(name: str, device: str) -> dict:
    """``cc.EPOCHS`` epochs of ``name`` on ``device`` (the training window only when ``CASES[name]``)."""
    later = CASES[name]
    m, head, loss, sig, kw, test = cc.build_window(name, device, later)
    params = list(m.parameters()) + (list(head.parameters()) if head is not None else [])
    tr = FusedTrainer(m, sig, head=head, loss=loss, optimizer=cc.optimizer_for(name)(params), **kw)
    losses = [tr.train_epoch() for _ in range(cc.EPOCHS - 1)]
    last, syncs = cc.count_host_syncs(tr.train_epoch, device)
    out = {"losses": losses + [last], "params": [p.detach().cpu().clone() for p in params],
           "pred": tr.predict().cpu(), "device": str(tr.device), "syncs": syncs}
    if later:
        out["continued"] = tr.evaluate(test)["loss"]
        out["zero"] = tr.evaluate(test, continue_state=False)["loss"]
        out["later_pred"] = tr.predict(test).cpu()
    return out


def check(got: dict, ref: dict, name: str) -> None:
    cc.assert_close(got, ref, name)
    if CASES[name]:
        assert abs(got["continued"] - ref["continued"]) <= cc.TOL, (name, got["continued"], ref["continued"])
        assert abs(got["zero"] - ref["zero"]) <= cc.TOL, (name, got["zero"], ref["zero"])
        assert abs(got["continued"] - got["zero"]) > 1e-6, f"{name}: the carried state changed nothing"
        err = float((got["later_pred"] - ref["later_pred"]).abs().max())
        assert err <= cc.TOL, f"{name}: later-window predictions differ by {err:.3g}"


@pytest.mark.parametrize("name", list(CASES))
def test_cuda_fused_path_equals_cpu(name, record_property):
    torch.set_default_dtype(torch.float64)  # PyGT's cells build their buffers with the default dtype
    try:
        ref = run(name, "cpu")
        got = run(name, "cuda:0")
    finally:
        torch.set_default_dtype(torch.float32)
    assert got["device"].startswith("cuda")
    record_property(f"host_syncs:FusedTrainer {name} (one epoch)", got["syncs"])
    print(f"host syncs of one CUDA epoch, FusedTrainer {name}: {got['syncs']}")
    check(got, ref, name)
