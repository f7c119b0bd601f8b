"""DistributedTrainer in a one-process gloo world (fast; the 2-rank round
trip is tests/distributed/test_trainer_surface_ranks.py): a black-box
module's carried tensor continues bit for bit, a state that does not fit the
trainer (another stale option, a head where there was none) is refused
naming what differs, and ``signal=`` is the deprecated keyword of ``data``
in evaluate / predict / link_scores."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist

from pyg_dynscale.distributed import DistributedTrainer
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.partition import Partition
from tests.helpers import distributed_cases as cases
from tests.helpers.cells import CarryingCell


@pytest.fixture
def world():
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    if created:
        dist.destroy_process_group()


def _blackbox(init: int) -> DistributedTrainer:
    sig = cases.signal()
    torch.manual_seed(init)
    m = CarryingCell(cases.F, 4).double()
    head = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(4, 1)).double()
    part = Partition("one", 1, torch.zeros(sig.num_vertex_time_nodes, dtype=torch.long))
    return DistributedTrainer(m, sig, part, head=head, path="blackbox", depth=0, check=False)


def test_a_blackbox_module_s_carried_tensor_continues(world):
    a = _blackbox(0)
    assert a.path == "blackbox"
    a.train_epoch()
    state = copy.deepcopy(a.state_dict())
    want = [a.train_epoch() for _ in range(2)]
    torch.manual_seed(3)
    b = _blackbox(7)
    b.load_state_dict(state)
    assert [b.train_epoch() for _ in range(2)] == want and b.epoch == 3
    assert torch.equal(b.model.module.carried, a.model.module.carried)
    c = _blackbox(7)
    c.load_state_dict({**state, "carried": {}})  # without it, the module starts its carry again
    assert [c.train_epoch() for _ in range(2)] != want


def test_a_state_that_does_not_fit_is_refused(world):
    from pyg_dynscale.nn import TGCN

    sig = cases.signal()
    part = Partition("one", 1, torch.zeros(sig.num_vertex_time_nodes, dtype=torch.long))

    def build(stale=None, head=True):
        torch.manual_seed(0)
        return DistributedTrainer(TGCN(cases.F, 4).double(), sig, part, loss="mse", stale=stale,
                                  head=torch.nn.Linear(4, 1).double() if head else None)

    cached = build("static:0.5")
    cached.train_epoch()
    with pytest.raises(ModelInputError, match="stale"):
        build().load_state_dict(cached.state_dict())
    with pytest.raises(ModelInputError, match="stale"):
        build("static:0.5").load_state_dict(build().state_dict())
    with pytest.raises(ModelInputError, match="head"):
        build(head=False).load_state_dict(build().state_dict())
    with pytest.raises(ModelInputError, match="epoch"):
        build().load_state_dict({k: v for k, v in build().state_dict().items() if k != "epoch"})


def test_signal_is_the_deprecated_keyword_of_the_evaluated_data(world):
    from pyg_dynscale.nn import TGCN

    sig = cases.signal()
    train, test = sig[:4], sig[4:]
    torch.manual_seed(0)
    tr = DistributedTrainer(TGCN(cases.F, 4).double(), train,
                            Partition("one", 1, torch.zeros(train.num_vertex_time_nodes, dtype=torch.long)),
                            loss="bce_link")
    tr.train_epoch()
    tpart = Partition("one", 1, torch.zeros(test.num_vertex_time_nodes, dtype=torch.long))
    want = (tr.evaluate(test, tpart), tr.predict(test, tpart), tr.link_scores(test, tpart))
    with pytest.warns(DeprecationWarning, match="data="):
        assert tr.evaluate(signal=test, partition=tpart) == want[0]
    with pytest.warns(DeprecationWarning, match="data="):
        assert torch.equal(tr.predict(signal=test, partition=tpart), want[1])
    with pytest.warns(DeprecationWarning, match="data="):
        got = tr.link_scores(signal=test, partition=tpart)
    assert all(torch.equal(a, b) for a, b in zip(got, want[2]))
    with pytest.raises(TypeError, match="unexpected keyword argument 'sigal'"):
        tr.predict(sigal=test)
