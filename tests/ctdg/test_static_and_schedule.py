"""DistTGL's static memory (§3.1) and the (i, 1, 1) schedule's single-process emulation (§3.2.1)."""
import pytest
import torch
from torch_geometric.nn.models.tgn import MeanAggregator

from pyg_dynscale.ctdg import TGN, EventSchedule, MemoryTrainer, pretrain_static_memory, synthetic_events
from pyg_dynscale.errors import ModelInputError

from tests.helpers.event_streams import Stream


def _setup(E=600, nodes=50, dropout=0.1, seed=2):
    d = synthetic_events(E, nodes, msg_dim=3, seed=seed, burst_length=20)
    d.msg = d.msg.double()
    torch.manual_seed(4)
    return d, TGN(d.num_nodes, 3, memory_dim=8, time_dim=4, embedding_dim=8, dropout=dropout).double()


def _params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_static_memory_is_added_to_the_dynamic_memory_before_the_embedding():
    d, model = _setup()
    static = torch.randn(d.num_nodes, 5, dtype=torch.float64)  # d != memory_dim: a trained Linear maps it
    trainer = MemoryTrainer(model, d, batch_size=40, static_memory=static)
    seen = []
    model.gnn.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().clone()))
    trainer.train_epoch()
    # the first batch again, by hand, from an empty memory: x = GRU memory + Linear(static)
    trainer.copies.set_training(True)
    trainer.copies.reset()
    seen.clear()
    n_id = torch.cat([d.src[:40], d.dst[:40]]).unique()
    trainer.scorer.embed(n_id, True)
    mem, _ = trainer.state.read(n_id, True)
    static_part = trainer.static.proj(static[n_id])
    torch.testing.assert_close(seen[0], mem + static_part, atol=1e-12, rtol=0)
    assert static_part.abs().min() > 0 and mem.abs().max() > 0


def test_learnable_static_memory_is_trained_and_contributes():
    d, model = _setup(dropout=0.0)
    trainer = MemoryTrainer(model, d, batch_size=40, lr=1e-2, static_memory="learnable")
    assert torch.equal(trainer.static.weight, torch.zeros_like(trainer.static.weight))  # starts as the plain model
    trainer.train_epoch()
    w = trainer.static.weight.detach().clone()
    assert w.abs().sum() > 0  # trained
    with_static = trainer.evaluate("val")
    with torch.no_grad():
        trainer.static.weight.zero_()
    zeroed = trainer.evaluate("val")
    assert abs(with_static["ap"] - zeroed["ap"]) > 1e-6 or abs(with_static["mrr"] - zeroed["mrr"]) > 1e-6


def test_pretrained_static_memory_uses_training_events_only():
    d = synthetic_events(500, 60, msg_dim=3, seed=5)
    # a node that appears only after the training events
    a = 350
    d.src[a + 10] = 29  # an unused source id below the destinations
    d.src[d.src == 29] = d.src[0]
    d.src[a + 100] = 29
    table = pretrain_static_memory(d, memory_dim=8, time_dim=4, embedding_dim=8, epochs=2, batch_size=50,
                                   lr=1e-2, dtype=torch.float64)
    from pyg_dynscale.ctdg import split_ranges

    v, _, _ = split_ranges(d)
    assert int(29) not in set(d.src[:v].tolist()) and 29 in set(d.src[v:].tolist())
    assert table.shape == (d.num_nodes, 8) and table.abs().sum() > 0
    assert torch.equal(table[29], torch.zeros(8, dtype=torch.float64))
    model = TGN(d.num_nodes, 3, memory_dim=8, time_dim=4, embedding_dim=8).double()
    trainer = MemoryTrainer(model, d, batch_size=50, static_memory=table)
    assert trainer.static.proj is None and not trainer.static.weight.requires_grad
    trainer.train_epoch()
    assert torch.equal(trainer.static.weight, table)  # fixed rows


def test_minibatch_parallelism_emulation_is_one_batch_of_i_times_the_events():
    """(i, 1, 1) with local batch b: the global batch of i*b events split chronologically, every local batch
    read from the memory before the global batch, gradients weighted by events -- without dropout that is
    (1, 1, 1) with batch i*b and the rate the default lr_scaling='linear' gives (i * lr; every node's
    embedding depends only on its own neighbours), to rounding.

    With MeanAggregator: PyG's LastAggregator without torch-scatter gives a node without messages the
    message at row ``len(n_id) - 1`` (scatter_argmax's fill value), which depends on the batch's nodes."""
    for i in (2, 3):
        d, model = _setup(dropout=0.0)
        model.memory.aggr_module = MeanAggregator()
        other = TGN(d.num_nodes, 3, memory_dim=8, time_dim=4, embedding_dim=8, dropout=0.0).double()
        other.memory.aggr_module = MeanAggregator()
        other.load_state_dict(model.state_dict())
        par = MemoryTrainer(model, d, batch_size=30, parallelism=(i, 1, 1))
        one = MemoryTrainer(other, d, batch_size=30 * i, lr=par.lr)  # lr_scaling's i * lr (the default)
        par_rng, one_rng = Stream(0), Stream(0)
        for _ in range(2):
            assert abs(par_rng(par.train_epoch) - one_rng(one.train_epoch)) < 1e-9
            torch.testing.assert_close(par.batch_losses, one.batch_losses, atol=1e-9, rtol=0)
            torch.testing.assert_close(_params(model), _params(other), atol=1e-9, rtol=0)
            torch.testing.assert_close(model.memory.memory, other.memory.memory, atol=1e-9, rtol=0)
    # and it is not (1, 1, 1) with the local batch size
    d, model = _setup(dropout=0.0)
    first = MemoryTrainer(model, d, batch_size=30, parallelism=(2, 1, 1)).train_epoch()
    d, model = _setup(dropout=0.0)
    assert abs(MemoryTrainer(model, d, batch_size=30).train_epoch() - first) > 1e-6


def test_schedule_steps_cover_the_training_events_in_order():
    s = EventSchedule(107, 10, (3, 1, 1))
    steps = s.steps()
    assert [(st.start, st.end) for st in steps] == [(0, 30), (30, 60), (60, 90), (90, 107)]
    assert [(lb.start, lb.end) for lb in steps[-1].local] == [(90, 100), (100, 107), (107, 107)]
    covered = [e for st in steps for lb in st.local for e in range(lb.start, lb.end)]
    assert covered == list(range(107))
    assert s.eval_batches(107, 131) == [(107, 117), (117, 127), (127, 131)]


def test_bad_parallelism_and_static_memory():
    d, model = _setup(E=100)
    for bad in ((1, 1), (1.5, 1, 1), "111", (1, -1, 1)):
        with pytest.raises(ModelInputError, match="parallelism"):
            MemoryTrainer(model, d, parallelism=bad)
    with pytest.raises(ModelInputError, match="static_memory"):
        MemoryTrainer(model, d, static_memory=torch.zeros(3, 8))
    with pytest.raises(ModelInputError, match="static_memory"):
        MemoryTrainer(model, d, static_memory="pretrained")
