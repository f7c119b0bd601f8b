"""``last_message`` (the memory's last-message aggregation) == a per-row loop, and a
``MemoryTrainer`` run does not depend on whether torch-scatter is installed (PyG's
fallback ``scatter_argmax`` gives rows without a message another row's message)."""
import pytest
import torch
import torch_geometric.typing

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.ctdg.store import last_message


def loop_reference(msg, index, t, dim_size):
    out = torch.zeros(dim_size, msg.size(1), dtype=msg.dtype)
    for i in range(dim_size):
        rows = [r for r in range(index.numel()) if int(index[r]) == i]
        if rows:
            best = max(int(t[r]) for r in rows)
            out[i] = msg[next(r for r in rows if int(t[r]) == best)]  # the first row on ties
    return out


@pytest.mark.parametrize("seed", range(4))
def test_last_message_equals_the_loop(seed):
    g = torch.Generator().manual_seed(seed)
    M, n = 40, 12
    index = torch.randint(0, n - 3, (M,), generator=g)     # the last rows get no message
    t = torch.randint(0, 6, (M,), generator=g)              # many ties
    msg = torch.randn(M, 3, generator=g, dtype=torch.float64)
    out = last_message(msg, index, t, n)
    assert torch.equal(out, loop_reference(msg, index, t, n))
    assert torch.equal(out[n - 3:], torch.zeros(3, 3, dtype=torch.float64))
    assert last_message(msg[:0], index[:0], t[:0], n).shape == (n, 3)


def _run(with_torch_scatter: bool, monkeypatch) -> torch.Tensor:
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SCATTER", with_torch_scatter)
    data = synthetic_events(600, 50, bipartite=True, msg_dim=3, seed=2, burst_length=15)
    data.msg = data.msg.double()
    torch.manual_seed(0)
    model = TGN(data.num_nodes, 3, memory_dim=8, time_dim=4, embedding_dim=8, dropout=0.0).double()
    trainer = MemoryTrainer(model, data, batch_size=40, lr=1e-3, num_neighbors=5, seed=1)
    trainer.train_epoch()
    return torch.cat([trainer.batch_losses, model.memory.memory.reshape(-1)])


def test_a_run_does_not_depend_on_torch_scatter(monkeypatch):
    if not torch_geometric.typing.WITH_TORCH_SCATTER:
        pytest.skip("torch-scatter not installed: the two paths cannot be compared")
    with_scatter = _run(True, monkeypatch)
    torch.testing.assert_close(_run(False, monkeypatch), with_scatter, atol=1e-12, rtol=0)
