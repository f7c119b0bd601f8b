"""memory_placement="partitioned" / "sven" on one process (one owner: nothing crosses the network) ==
"replicated" bit for bit, with one trainer and with the (2, 1, 1) emulation (two writers per step, applied in
trainer order); the deduplication shrinks the rows served; bad inputs are typed errors."""
from __future__ import annotations

import copy

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.ctdg.memory_placement import check_owner
from pyg_dynscale.errors import ModelInputError


def _data():
    d = synthetic_events(300, 25, msg_dim=3, seed=5, burst_length=15)
    d.msg = d.msg.double()
    return d


def _trainer(placement="replicated", par=(1, 1, 1), **kw):
    d = _data()
    torch.manual_seed(2)
    model = TGN(d.num_nodes, 3, memory_dim=5, time_dim=3, embedding_dim=6, dropout=0.1).double()
    return MemoryTrainer(model, d, batch_size=20, lr=1e-2, parallelism=par, seed=3, mrr_negatives=4,
                         memory_placement=placement, **kw)


def _run(placement, par):
    tr = _trainer(placement, par)
    losses = [tr.train_epoch() for _ in range(2)]
    mem = tr.memory_copy()
    params = torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params])
    return {"losses": losses, "memory": mem, "params": params, "val": tr.evaluate("val"),
            "test": tr.evaluate("test"), "after": tr.memory_copy(), "traffic": tr.traffic()}


@pytest.mark.parametrize("par", [(1, 1, 1), (2, 1, 1)])
def test_one_owner_equals_replicated_bitwise(par):
    ref = _run("replicated", par)
    runs = {p: _run(p, par) for p in ("partitioned", "sven")}
    for p, run in runs.items():
        assert run["losses"] == ref["losses"], p
        assert torch.equal(run["params"], ref["params"]), p
        for key in ("memory", "after"):
            assert torch.equal(run[key][0], ref[key][0]) and torch.equal(run[key][1], ref[key][1]), (p, key)
        assert run["val"] == ref["val"] and run["test"] == ref["test"], p
        t = run["traffic"]
        assert t["measured"] == t["predicted"] and t["measured"]["total"] == 0  # one owner: nothing is sent
    sven, comm = runs["sven"]["traffic"], runs["partitioned"]["traffic"]
    for kind in ("dispatch", "aggregation"):  # the same lists, deduplicated: fewer rows served
        assert 0 < sven["local"][kind] < comm["local"][kind], kind
    assert sven["redundancy"] == comm["redundancy"] and 0 < sven["redundancy"]["eta2"] < sven["redundancy"]["eta1"] < 1


def test_bad_inputs_are_typed_errors():
    n = _data().num_nodes
    with pytest.raises(ModelInputError, match="memory_placement"):
        _trainer("sharded")
    for bad, what in ((torch.zeros(n - 1, dtype=torch.long), "shape"), (torch.ones(n, dtype=torch.long), "owners"),
                      (torch.zeros(n), "float"), ([0] * n, "list"), ("metis", "'metis'")):
        with pytest.raises(ModelInputError, match="partition") as err:
            _trainer("sven", partition=bad)
        assert what in str(err.value)
    for given in ("interval", torch.zeros(n, dtype=torch.long)):  # a replicated memory has no owners
        with pytest.raises(ModelInputError, match="partition.*replicated") as err:
            _trainer("replicated", partition=given)
        assert "drop partition=" in str(err.value)
    with pytest.raises(ModelInputError, match="partition"):
        check_owner(torch.tensor([0, 2, 1]), 3, 2)  # a part outside the ranks
    for kw in ({"par": (1, 2, 1)}, {"par": (1, 1, 2)}, {"memory_service": True}):
        with pytest.raises(NotImplementedError, match="partitioned"):
            _trainer("partitioned", **kw)
    with pytest.raises(NotImplementedError, match="sven"):
        _trainer("sven", par=(1, 2, 1))
    tr = _trainer("sven")
    assert tr.memory.memory.numel() == 0  # no full-size copy left in the module
    assert tr.traffic()["measured"]["total"] == 0  # before any epoch


@pytest.mark.parametrize("placement", ["partitioned", "sven"])
def test_state_dict_resumes_bit_for_bit(placement):
    tr = _trainer(placement, (2, 1, 1))
    tr.train_epoch()
    tr.evaluate("val")
    saved = copy.deepcopy(tr.state_dict())  # the modules' and optimizer's tensors are live references
    assert saved["stream"]["copy0/owner0/memory"].shape == (_data().num_nodes, 5)  # one owner: every row
    # the evaluation first: it starts from the restored end-of-training memory (an epoch resets it)
    want = [tr.evaluate("test"), tr.train_epoch(), tr.memory_copy()]
    fresh = _trainer(placement, (2, 1, 1))
    fresh.load_state_dict(saved)
    got = [fresh.evaluate("test"), fresh.train_epoch(), fresh.memory_copy()]
    assert got[:2] == want[:2] and all(torch.equal(x, y) for x, y in zip(got[2], want[2]))
    other = _trainer(placement, (2, 1, 1), partition=torch.zeros(_data().num_nodes, dtype=torch.long))
    saved["stream"]["copy0/owner"] = saved["stream"]["copy0/owner"] + 1  # another partition
    with pytest.raises(ModelInputError, match="partition"):
        other.load_state_dict(saved)
