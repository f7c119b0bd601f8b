"""A ``train-events`` checkpoint resumes on another device (issue 35, item 3): only a CUDA run writes its
CUDA generator's state (``rank<r>/cuda_rng``), and DCP refuses to load a key a checkpoint lacks, so the
loader asks a checkpoint for the device-dependent keys only where it holds them
(:func:`pyg_dynscale.commands.events_checkpoint.stream_template`, what ``train-events --resume`` loads
through). On the CPU a CUDA trainer is simulated by a trainer whose device-generator hooks report and
restore a 16-byte state (the layout of ``torch.cuda.get_rng_state``); a CUDA checkpoint by the key a CUDA
trainer adds. Both directions continue bit for bit (float64, dropout on: the CPU generator is restored)."""
from __future__ import annotations

import torch

from pyg_dynscale.commands.events_checkpoint import stream_template
from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.checkpoint import load_checkpoint, save_checkpoint

RUN = {"parallelism": [1, 1, 1], "world_size": 1}
KEY = "rank0/cuda_rng"


def _trainer(seed: int) -> MemoryTrainer:
    d = synthetic_events(240, 25, msg_dim=3, seed=7, burst_length=15)
    d.msg = d.msg.double()
    torch.manual_seed(4 + seed)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
    return MemoryTrainer(model, d, batch_size=20, lr=0.01, seed=1, mrr_negatives=4)


def _as_cuda(tr: MemoryTrainer, state: torch.Tensor) -> list:
    """Make ``tr`` report a CUDA generator in ``state`` and record what it is restored from (the hooks of
    the object that owns the trainer's stream state)."""
    restored = []
    tr.stream_checkpoint._device_rng = lambda: {KEY: state.clone()}
    tr.stream_checkpoint._set_device_rng = lambda saved, epoch: restored.append(saved)
    return restored


def _saved(tmp_path, cuda_state=None):
    """A checkpoint after one epoch and its validation (a CUDA run's when ``cuda_state`` is given), and what
    the uninterrupted run does next: the test metrics, an epoch, every batch loss, the memory."""
    tr = _trainer(1)
    if cuda_state is not None:
        _as_cuda(tr, cuda_state)
    tr.train_epoch()
    tr.evaluate("val")
    stream = tr.state_dict()["stream"]
    assert (KEY in stream) == (cuda_state is not None)
    path = save_checkpoint(str(tmp_path), 1, tr.modules, tr.optimizer, RUN, {}, extra=stream)
    want = _next(tr)
    tr.close()
    return path, want


def _next(tr):
    test = tr.evaluate("test")
    loss = tr.train_epoch()
    return test, loss, tr.batch_losses.clone(), tr.memory_copy()


def _resume(path, fresh):
    torch.manual_seed(123)  # another random stream: the checkpoint's must come back
    stream = stream_template(fresh, path)
    load_checkpoint(path, fresh.modules, fresh.optimizer, RUN, extra=stream)
    fresh.load_state_dict({**fresh.state_dict(), "stream": stream})
    return stream, _next(fresh)


def _same(got, want):
    (tg, lg, bg, mg), (tw, lw, bw, mw) = got, want
    assert tg == tw and lg == lw and torch.equal(bg, bw)
    assert torch.equal(mg[0], mw[0]) and torch.equal(mg[1], mw[1])


def test_a_cuda_checkpoint_resumes_on_the_cpu(tmp_path):
    saved = torch.arange(16, dtype=torch.uint8)
    path, want = _saved(tmp_path, saved)
    stream, got = _resume(path, _trainer(9))
    assert KEY not in stream  # a CPU run draws from the CPU generator only
    _same(got, want)


def test_a_cpu_checkpoint_resumes_on_cuda(tmp_path):
    """The simulated CUDA trainer asks a CPU checkpoint for no CUDA state (DCP would refuse the missing
    key) and seeds its CUDA generator itself (``None`` to its restore hook)."""
    path, want = _saved(tmp_path)
    fresh = _trainer(9)
    restored = _as_cuda(fresh, torch.full((16,), 7, dtype=torch.uint8))
    stream, got = _resume(path, fresh)
    assert KEY not in stream and restored == [None]
    _same(got, want)  # the CPU generator is what a CPU-device run draws from


def test_a_cuda_checkpoint_restores_the_cuda_generator_on_cuda(tmp_path):
    saved = torch.arange(16, dtype=torch.uint8) * 3
    path, want = _saved(tmp_path, saved)
    fresh = _trainer(9)
    restored = _as_cuda(fresh, torch.zeros(16, dtype=torch.uint8))
    stream, got = _resume(path, fresh)
    assert len(restored) == 1 and torch.equal(restored[0], saved)
    _same(got, want)


def test_the_template_is_the_stream_state_elsewhere(tmp_path):
    """Keys other than the device generator's are the trainer's own (DCP fills them in place)."""
    path, _ = _saved(tmp_path)
    fresh = _trainer(9)
    assert sorted(stream_template(fresh, path)) == sorted(fresh.state_dict()["stream"])
