"""MemoryTrainer on the one trainer surface: keyword-only options (the old positionals warn and give the same
numbers), ``loss`` / ``optimizer`` / ``device``, ``evaluate()`` = the test split with the BCE loss of that split
(checked against PyG's example loop's own logits), ``traffic()`` a TrafficReport, the deprecated state names,
``close()`` and the context manager."""
from __future__ import annotations

import copy

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.errors import ModelInputError, UnsupportedOptionError
from pyg_dynscale.training import BaseTrainer, Metrics, TrafficReport

from tests.helpers.event_streams import Stream
from tests.helpers.reference_tgn import ExampleLoop


def _data(E=300):
    d = synthetic_events(E, 30, msg_dim=3, seed=7, burst_length=15)
    d.msg = d.msg.double()
    return d


def _model(d, seed=4):
    torch.manual_seed(seed)
    return TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6).double()


def _params(tr):
    return torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params])


def test_old_positionals_warn_and_train_the_same():
    d = _data()
    with pytest.warns(DeprecationWarning, match=r"batch_size, lr, num_neighbors.*batch_size=\.\.\."):
        old = MemoryTrainer(_model(d), d, 20, 0.01, 5, "uniform", 3)
    new = MemoryTrainer(_model(d), d, batch_size=20, lr=0.01, num_neighbors=5, seed=3)
    torch.manual_seed(0)
    a = old.train_epoch()
    torch.manual_seed(0)
    b = new.train_epoch()
    assert a == b and torch.equal(_params(old), _params(new)) and old.batch_size == 20 and old.seed == 3
    with pytest.raises(TypeError, match="multiple values for argument 'batch_size'"):
        MemoryTrainer(_model(d), d, 20, batch_size=30)


def test_loss_optimizer_device():
    d = _data()
    for same in ("bce", "BCE_with_logits", torch.nn.BCEWithLogitsLoss(), torch.nn.BCEWithLogitsLoss):
        assert MemoryTrainer(_model(d), d, loss=same).loss == "bce"
    for other in ("mse", torch.nn.MSELoss(), torch.nn.BCEWithLogitsLoss(pos_weight=torch.ones(1))):
        with pytest.raises(UnsupportedOptionError, match="option 'loss'") as err:
            MemoryTrainer(_model(d), d, loss=other)
        assert isinstance(err.value, NotImplementedError) and "issue" not in str(err.value)
    with pytest.raises(UnsupportedOptionError, match="option 'negatives' is 'historical'"):
        MemoryTrainer(_model(d), d, negatives="historical")
    tr = MemoryTrainer(_model(d), d)
    assert type(tr.optimizer) is torch.optim.Adam and tr.optimizer.defaults["lr"] == 1e-4  # PyG's example
    tr = MemoryTrainer(_model(d), d, optimizer="sgd", lr=0.5)
    assert type(tr.optimizer) is torch.optim.SGD and tr.optimizer.defaults["lr"] == 0.5
    tr = MemoryTrainer(_model(d), d, optimizer=lambda p: torch.optim.SGD(p, lr=0.25, momentum=0.5))
    assert tr.optimizer.defaults["momentum"] == 0.5
    held = {id(p) for g in tr.optimizer.param_groups for p in g["params"]}
    assert held == {id(p) for p in tr.optimizer_params}
    tr = MemoryTrainer(_model(d), d, device="cpu")
    assert tr.device == torch.device("cpu") and tr.msg.device == tr.device
    with pytest.raises(ModelInputError, match="seed"):
        MemoryTrainer(_model(d), d, seed=1.5)


def test_evaluate_defaults_to_test_and_reports_the_loss_of_the_example_logits():
    """``loss`` = sum_b (BCE(pos_b, 1) + BCE(neg_b, 0)) |b| / E_split over the logits PyG's example loop's
    own ``test()`` computes (recorded from its link predictor), to 1e-9 in float64."""
    d = _data(600)
    mine = _model(d, 3)
    ref = copy.deepcopy(mine)
    loop = ExampleLoop(d, ref.memory, ref.gnn, ref.link_pred, batch_size=40, num_neighbors=5, lr=1e-3)
    loop.mrr_negatives = 0  # two link_pred calls per batch: positives, negatives
    tr = MemoryTrainer(mine, d, batch_size=40, lr=1e-3, num_neighbors=5, seed=7)
    ref_rng, rng = Stream(7), Stream(7)
    ref_rng(loop.train)
    rng(tr.train_epoch)
    outs = []
    hook = ref.link_pred.register_forward_hook(lambda m, args, out: outs.append(out.detach().clone()))
    ref_rng(loop.test, loop.val_loader)
    val_outs, outs[:] = list(outs), []
    ref_rng(loop.test, loop.test_loader)
    hook.remove()
    bce = torch.nn.BCEWithLogitsLoss()

    def expected(logits):
        pairs = list(zip(logits[0::2], logits[1::2]))
        total = sum(float(bce(p, torch.ones_like(p)) + bce(n, torch.zeros_like(n))) * p.size(0) for p, n in pairs)
        return total / sum(p.size(0) for p, _ in pairs)

    val = rng(tr.evaluate, "val")
    test = rng(tr.evaluate)  # no argument: the test split
    assert isinstance(test, Metrics) and set(test) == {"loss", "ap", "auc", "mrr"}
    assert abs(val["loss"] - expected(val_outs)) < 1e-9 and abs(test["loss"] - expected(outs)) < 1e-9
    assert val["loss"] != test["loss"] and test == tr.evaluate("test")


def test_traffic_is_a_report_and_the_state_has_one_api():
    d = _data()
    tr = MemoryTrainer(_model(d), d, batch_size=20, lr=0.01, parallelism=(1, 1, 2))
    report = tr.traffic()
    assert isinstance(report, TrafficReport) and report["measured"]["total"] == 0
    tr.train_epoch()
    report = tr.traffic()
    assert type(report["measured"]["total"]) is int and type(report["predicted"]["total"]) is int
    assert report["measured"] == report["predicted"] == report["rank"]["measured"]  # one process: nothing sent
    assert tr.stats()["memory_read"] > 0 and tr.stats()["memory_write"] > 0
    state = copy.deepcopy(tr.state_dict())
    with pytest.warns(DeprecationWarning, match=r"state_dict\(\)\['stream'\]"):
        stream = tr.stream_state()
    assert stream.keys() == state["stream"].keys()
    assert all(torch.equal(stream[k], state["stream"][k]) for k in stream)
    want = tr.train_epoch(), tr.memory_copy(1)[0]  # first: the random stream is the process's global one
    other = MemoryTrainer(_model(d, 9), d, batch_size=20, lr=0.01, parallelism=(1, 1, 2))
    other.modules.load_state_dict(state["modules"])
    other.optimizer.load_state_dict(state["optimizer"])
    with pytest.warns(DeprecationWarning, match="load_state_dict"):
        other.load_stream_state(state["stream"])
    assert other.epoch == 1
    assert other.train_epoch() == want[0] and torch.equal(other.memory_copy(1)[0], want[1])


def test_close_and_the_context_manager():
    d = _data()
    with MemoryTrainer(_model(d), d, batch_size=20, memory_service=True, prefetch=True) as tr:
        assert isinstance(tr, BaseTrainer) and not tr.closed
        tr.train_epoch()
        service = tr.service
    assert tr.closed and tr.service is None and tr.prefetcher is None and not service._thread.is_alive()
    tr.close()  # idempotent
    with pytest.raises(ModelInputError, match="closed"):
        tr.train_epoch()
    with pytest.raises(ModelInputError, match="closed"):
        tr.evaluate()
