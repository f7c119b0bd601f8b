"""One process == PyG's examples/tgn.py loop (tests/ctdg/reference_tgn.py) in float64."""
import copy

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.runtime.metrics import average_precision, roc_auc

from tests.helpers.event_streams import Stream
from tests.helpers.reference_tgn import ExampleLoop, brute_force_ap, brute_force_auc, split_metrics


def _data(bipartite=True, E=900, nodes=60, msg_dim=3, seed=1):
    d = synthetic_events(E, nodes, bipartite=bipartite, msg_dim=msg_dim, seed=seed, burst_length=20)
    d.msg = d.msg.double()
    top = int(d.dst.max())  # only the first event goes to the top id: val / test negatives have narrower bounds
    d.dst[d.dst == top] = top - 1
    d.dst[0] = top
    return d


def _models(data, dropout=0.1):
    torch.manual_seed(3)
    model = TGN(data.num_nodes, data.msg.size(-1), memory_dim=16, time_dim=8, embedding_dim=12, dropout=dropout).double()
    return model, copy.deepcopy(model)


def _params(*mods):
    return torch.cat([p.detach().reshape(-1) for m in mods for p in m.parameters()])


@pytest.mark.parametrize("bipartite", [True, False])
def test_one_process_equals_the_example_loop(bipartite):
    data = _data(bipartite)
    mine, ref = _models(data)
    loop = ExampleLoop(data, ref.memory, ref.gnn, ref.link_pred, batch_size=50, num_neighbors=5, lr=1e-3)
    ref_rng = Stream(7)  # the example seeded as the trainer seeds itself
    trainer = MemoryTrainer(mine, data, batch_size=50, lr=1e-3, num_neighbors=5, seed=7)
    rng = Stream(7)
    loop.mrr_negatives = trainer.mrr_negatives = 7
    for _ in range(2):
        ref_loss = ref_rng(loop.train)
        loss = rng(trainer.train_epoch)
        assert len(loop.batch_losses) == trainer.batch_losses.numel() >= 10
        torch.testing.assert_close(trainer.batch_losses, torch.tensor(loop.batch_losses, dtype=torch.float64),
                                   atol=1e-9, rtol=0)
        assert abs(loss - ref_loss) < 1e-9
        torch.testing.assert_close(_params(mine), _params(ref), atol=1e-9, rtol=0)
        torch.testing.assert_close(mine.memory.memory, ref.memory.memory, atol=1e-9, rtol=0)
        # the scores to rounding, and the trainer's AP / AUC / MRR == the example's arithmetic on the trainer's
        # own scores: they are step functions of the scores (an ulp can make or break a tie), never compared
        # across two computations
        for split, loader in (("val", loop.val_loader), ("test", loop.test_loader)):
            ref_outs, ref_metrics = _scored(ref.link_pred, lambda: ref_rng(loop.test, loader))
            outs, got = _scored(mine.link_pred, lambda: rng(trainer.evaluate, split))
            assert len(outs) == len(ref_outs) > 0 and len(outs) % 3 == 0  # per batch: pos, neg, MRR pairs
            torch.testing.assert_close(torch.cat(outs), torch.cat(ref_outs), atol=1e-9, rtol=0)
            assert ref_metrics == pytest.approx(split_metrics(ref_outs, 7)[:2], abs=1e-12)  # the loop scores so
            ap, auc, mrr = split_metrics(outs, 7)
            assert abs(got["ap"] - ap) < 1e-12 and abs(got["auc"] - auc) < 1e-12 and abs(got["mrr"] - mrr) < 1e-12
            assert 0 < got["mrr"] < 1
        torch.testing.assert_close(mine.memory.memory, ref.memory.memory, atol=1e-9, rtol=0)
        torch.testing.assert_close(mine.memory.last_update, ref.memory.last_update, atol=0, rtol=0)


def _scored(link_pred, run):
    """``(outputs of link_pred during run(), run())``."""
    outs = []
    hook = link_pred.register_forward_hook(lambda m, args, out: outs.append(out.detach().reshape(-1).clone()))
    try:
        return outs, run()
    finally:
        hook.remove()


def test_evaluate_does_not_depend_on_the_call_order():
    data = _data()
    model, _ = _models(data)
    trainer = MemoryTrainer(model, data, batch_size=50, num_neighbors=5, lr=1e-3)
    trainer.train_epoch()
    test_first = trainer.evaluate("test")
    val = trainer.evaluate("val")
    assert trainer.evaluate("test") == test_first
    assert trainer.evaluate("val") == val


def test_metrics_equal_brute_force():
    g = torch.Generator().manual_seed(0)
    for n in (2, 7, 40):
        s = torch.randint(0, 5, (n,), generator=g).double() / 4  # many ties
        y = torch.zeros(n)
        y[torch.randperm(n, generator=g)[: max(1, n // 3)]] = 1
        if y.sum() == n:
            y[0] = 0
        assert abs(average_precision(s, y) - brute_force_ap(s, y)) < 1e-12
        assert abs(roc_auc(s, y) - brute_force_auc(s, y)) < 1e-12


def test_tgn_builds_the_example_modules_and_the_three_module_form_trains_them():
    from tests.helpers.reference_tgn import build_example_modules

    data = _data(E=300)
    torch.manual_seed(5)
    model = TGN(data.num_nodes, 3, memory_dim=16, time_dim=8, embedding_dim=12)
    torch.manual_seed(5)
    memory, gnn, link_pred = build_example_modules(data, 16, 8, 12)
    for mine, theirs in ((model.memory, memory), (model.gnn, gnn), (model.link_pred, link_pred)):
        a, b = dict(mine.named_parameters()), dict(theirs.named_parameters())
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert gnn.time_enc is memory.time_enc and model.gnn.time_enc is model.memory.time_enc
    model.double(), memory.double(), gnn.double(), link_pred.double()
    one = MemoryTrainer(model, data, batch_size=40).train_epoch()
    other = MemoryTrainer(memory=memory, gnn=gnn, link_pred=link_pred, data=data, batch_size=40).train_epoch()
    assert one == other
    torch.testing.assert_close(_params(model.memory, model.gnn, model.link_pred), _params(memory, gnn, link_pred),
                               atol=0, rtol=0)
