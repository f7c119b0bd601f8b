"""CUDA: FusedTrainer on the GPU == on the CPU (float64, 1e-9), streamed ==
in-memory on the GPU, and streaming bounds the GPU's peak memory. Skipped
without a GPU (``make gpu-check`` runs them where there is one)."""
from __future__ import annotations

import pytest
import torch

from tests.helpers import cuda_cases as cc

pytestmark = cc.cuda


@pytest.mark.parametrize("name", cc.ALL)
def test_cuda_fused_equals_cpu_fused(name):
    torch.set_default_dtype(torch.float64)
    try:
        ref = cc.fused_run(name, "cpu")
        got = cc.fused_run(name, "cuda")
        assert got["trainer"].device.type == "cuda"
        cc.assert_close(got, ref, f"FusedTrainer {name} cuda vs cpu")
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("name", ["tgcn2_h0", "stacked_h0"])
def test_cuda_streamed_equals_in_memory(name):
    torch.set_default_dtype(torch.float64)
    try:
        ref = cc.fused_run(name, "cuda")
        got = cc.fused_run(name, "cuda", checkpoint_every=2, stream=True)
        cc.assert_close(got, ref, f"streamed {name}")
        s = got["trainer"].stream_stats
        assert s.transfers == s.windows and s.max_resident <= 2  # predict(): one copy per window
    finally:
        torch.set_default_dtype(torch.float32)


def test_cuda_streaming_bounds_peak_memory():
    """Peak GPU memory of an epoch: streamed windows of 8 snapshots vs the
    whole signal resident (and its activations kept)."""
    from pyg_dynscale import DynamicGraphSignal
    from pyg_dynscale.nn import TGCN
    from pyg_dynscale.runtime import FusedTrainer

    g = torch.Generator().manual_seed(0)
    V, T = 20_000, 64
    ei = torch.randint(0, V, (2, 8 * V), generator=g)
    sig = DynamicGraphSignal([ei] * T, None, [torch.randn(V, 16, generator=g) for _ in range(T)],
                             [torch.randn(V, generator=g) for _ in range(T)])
    peaks, losses = {}, {}
    for stream in (False, True):
        torch.manual_seed(0)
        m, head = TGCN(16, 32).cuda(), torch.nn.Linear(32, 1).cuda()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        tr = FusedTrainer(m, sig, head=head, loss="mse", checkpoint_every=8 if stream else None, stream=stream)
        losses[stream] = tr.train_epoch()
        torch.cuda.synchronize()
        peaks[stream] = torch.cuda.max_memory_allocated()
        del tr
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)  # float32, summed in another order
    assert peaks[True] < 0.5 * peaks[False], peaks


def test_a_cuda_pygt_model_keeps_the_decomposed_path():
    """Adapters self-check on a CPU copy: a PyGT T-GCN on the GPU is adapted,
    not sent to the black-box path by a device mismatch in the check."""
    from pyg_dynscale._optional import pygt_available

    if not pygt_available():
        pytest.skip("PyGT not installed")
    from torch_geometric_temporal.nn.recurrent import TGCN as PyGTTGCN

    from pyg_dynscale.runtime import FusedTrainer

    torch.manual_seed(0)
    sig = cc.cases.signal()
    m = PyGTTGCN(cc.cases.F, 4).double().cuda()
    tr = FusedTrainer(m, sig, head=torch.nn.Linear(4, 1).double().cuda(), loss="mse")
    assert tr.path == "decomposed"
