"""CUDA: ``WindowTrainer`` on the GPU == on the CPU in float64 (batch losses, parameters,
evaluation) for PyGT's cells with reuse, A3TGCN as a window model, without reuse, with
node batches and with a seq2seq decoder. Skipped without a GPU (``make gpu-check``
runs them where there is one)."""
import pytest
import torch

from pyg_dynscale.windows import WindowTrainer
from tests.helpers import cuda_cases as cc
from tests.helpers.windows import chickenpox, covid

pytestmark = cc.cuda

CASES = {
    "GConvGRU": ({}, "static"),
    "DCRNN": ({}, "changing"),
    "TGCN": ({"reuse": False}, "static"),
    "A3TGCN": ({}, "static"),
    "GConvGRU-node-batches": ({"node_batch_size": 7}, "changing"),
    "TGCN-decoder": ({"horizon": 2, "teacher_forcing": 0.5}, "static"),
}


def _cell(name: str):
    from pyg_dynscale._optional import pygt_available

    if not pygt_available():  # PyGT's pure-Python wheel is enough (the package shims torch-sparse's annotation)
        pytest.skip("PyGT (torch-geometric-temporal) not installed")
    from torch_geometric_temporal.nn.recurrent import A3TGCN, DCRNN, TGCN, GConvGRU

    base = name.split("-")[0]
    return {"GConvGRU": lambda: GConvGRU(4, 6, 2), "DCRNN": lambda: DCRNN(4, 6, 2), "TGCN": lambda: TGCN(4, 6),
            "A3TGCN": lambda: A3TGCN(1, 6, 4)}[base]()


def run(name: str, device: str) -> dict:
    kwargs, graph = CASES[name]
    x_shape = (1, 4) if name == "A3TGCN" else None
    sig = chickenpox(T=13, x_shape=x_shape) if graph == "static" else covid(T=11)
    torch.manual_seed(0)
    model, head = _cell(name).double().to(device), torch.nn.Linear(6, 1).double().to(device)
    if name == "TGCN-decoder":
        from torch_geometric_temporal.nn.recurrent import TGCN

        kwargs = {**kwargs, "decoder": TGCN(1, 6).double().to(device)}  # same kind, reads the 1-wide target
    trainer = WindowTrainer(model, sig, lags=3, batch_size=3, stride=1, loss="mse", lr=0.05, optimizer="sgd",
                            head=head, shuffle=False, seed=0, **{"reuse": True, **kwargs})
    losses = [trainer.train_epoch() for _ in range(2)]
    return {"losses": losses, "batch_losses": list(trainer.batch_losses), "eval": trainer.evaluate("test"),
            "params": torch.cat([p.detach().reshape(-1).cpu() for m in (model, head) for p in m.parameters()]),
            "device": next(model.parameters()).device}


def assert_same(got: dict, ref: dict) -> None:
    assert len(got["batch_losses"]) == len(ref["batch_losses"]) >= 2
    for a, b in zip(got["batch_losses"] + got["losses"], ref["batch_losses"] + ref["losses"]):
        assert abs(a - b) <= 1e-9 * max(1.0, abs(b)), (got["losses"], ref["losses"])
    torch.testing.assert_close(got["params"], ref["params"], rtol=1e-9, atol=1e-12)
    for key, value in ref["eval"].items():
        if isinstance(value, float):
            assert abs(got["eval"][key] - value) <= 1e-9 * max(1.0, abs(value)), (key, got["eval"], ref["eval"])


@pytest.mark.parametrize("name", list(CASES))
def test_cuda_window_trainer_equals_cpu(name):
    ref = run(name, "cpu")
    got = run(name, "cuda")
    assert got["device"].type == "cuda"
    assert_same(got, ref)
