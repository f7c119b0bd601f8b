"""pyg_dynscale.training.state: the random generators' state (CPU; a CUDA device's own generator, checked on
the CPU with torch.cuda's functions replaced by recorders), the modules + optimizer pair, Checkpointable."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.training import ByteLedger
from pyg_dynscale.training.state import (Checkpointable, device_rng_keys, load_training_state, rng_state,
                                         set_rng_state, training_state)


def test_the_cpu_generator_continues_where_it_was_captured():
    torch.manual_seed(7)
    torch.rand(3)
    state = rng_state("cpu", prefix="rank1/")
    assert sorted(state) == ["rank1/rng"]  # no CUDA key on the CPU
    want = torch.rand(5, dtype=torch.float64)
    torch.rand(11)  # move on
    set_rng_state(state, "cpu", prefix="rank1/")
    assert torch.equal(torch.rand(5, dtype=torch.float64), want)
    assert device_rng_keys("cpu", prefix="rank1/") == [] and device_rng_keys(None) == []


def test_the_earlier_layout_is_read_and_a_missing_key_is_named():
    torch.manual_seed(3)
    legacy = {"cpu": torch.get_rng_state()}
    want = torch.rand(4, dtype=torch.float64)
    set_rng_state(legacy)
    assert torch.equal(torch.rand(4, dtype=torch.float64), want)
    set_rng_state({"epoch": 2, "rng": legacy})  # nested in a snapshot trainer's state, as it was saved
    assert torch.equal(torch.rand(4, dtype=torch.float64), want)
    with pytest.raises(ModelInputError, match="rank0/rng"):
        set_rng_state({"rank1/rng": torch.get_rng_state()}, prefix="rank0/")


class _FakeGenerator:
    def __init__(self) -> None:
        self.seeds: list = []

    def manual_seed(self, seed: int) -> None:
        self.seeds.append(seed)


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's generator functions as recorders: the device each call names."""
    calls: list = []
    gens = (_FakeGenerator(), _FakeGenerator())
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: calls.append(("get", str(device))) or
                        torch.tensor([int(torch.device(device).index)], dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, device: calls.append(("set", str(device), s.tolist())))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "default_generators", gens)
    return calls, gens


def test_a_cuda_trainer_saves_and_restores_its_own_devices_generator(fake_cuda):
    calls, gens = fake_cuda
    state = rng_state("cuda:1", prefix="rank1/")
    assert sorted(state) == ["rank1/cuda_rng", "rank1/rng"] and state["rank1/cuda_rng"].tolist() == [1]
    assert rng_state("cuda")["cuda_rng"].tolist() == [1]  # no index: the current device
    assert device_rng_keys("cuda:0", prefix="rank0/") == ["rank0/cuda_rng"]
    cpu_before = torch.get_rng_state()
    set_rng_state({"rank1/rng": cpu_before, "rank1/cuda_rng": torch.tensor([9], dtype=torch.uint8)}, "cuda:1",
                  prefix="rank1/")
    assert calls[-1] == ("set", "cuda:1", [9])
    # a checkpoint written on the CPU: the device's generator is seeded with the fallback, or it is an error
    set_rng_state({"rng": cpu_before}, "cuda:1", fallback_seed=41)
    assert gens[1].seeds == [41] and gens[0].seeds == []
    with pytest.raises(ModelInputError, match="cuda_rng"):
        set_rng_state({"rng": cpu_before}, "cuda:0")


def test_training_state_round_trip_of_a_module_and_of_named_modules():
    torch.manual_seed(0)
    model, head = torch.nn.Linear(2, 3).double(), torch.nn.Linear(3, 1).double()
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=0.1)
    (head(model(torch.ones(4, 2, dtype=torch.float64))) ** 2).sum().backward()
    opt.step()
    mods = torch.nn.ModuleDict({"model": model, "head": head})
    state = training_state(mods, opt, progress={"epoch": 3})
    assert state["progress"] == {"epoch": 3} and set(state) == {"modules", "optimizer", "progress"}
    saved = {k: v.clone() for k, v in state["modules"].items()}
    opt_saved = opt.state_dict()["state"][0]["exp_avg"].clone()

    torch.manual_seed(1)
    model2, head2 = torch.nn.Linear(2, 3).double(), torch.nn.Linear(3, 1).double()
    opt2 = torch.optim.Adam(list(model2.parameters()) + list(head2.parameters()), lr=0.1)
    load_training_state(state, torch.nn.ModuleDict({"model": model2, "head": head2}), opt2, owner="T",
                        parts=("progress",))
    assert all(torch.equal(v, saved[k]) for k, v in torch.nn.ModuleDict({"model": model2, "head": head2})
               .state_dict().items())
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt_saved)

    named = training_state({"model": model, "head": None}, opt)
    assert named["modules"]["head"] is None
    with pytest.raises(ModelInputError, match="head"):  # saved without a head, loaded into a trainer with one
        load_training_state(named, {"model": model2, "head": head2}, opt2, owner="T")
    with pytest.raises(ModelInputError, match="T.state_dict"):
        load_training_state({"modules": {}, "optimizer": {}}, mods, opt, owner="T", parts=("progress",))


def test_checkpointable_is_what_modules_optimizers_and_ledgers_are():
    lin = torch.nn.Linear(1, 1)
    assert isinstance(lin, Checkpointable)
    assert isinstance(torch.optim.SGD(lin.parameters(), lr=0.1), Checkpointable)
    assert isinstance(ByteLedger(), Checkpointable)
    assert not isinstance(object(), Checkpointable)
