"""pyg_dynscale.distributed.groups: which backends move host tensors, binding a device, helper groups made
once and reused (and forgotten with their default group); and the CPU stand-in for NCCL (tests/helpers/fake_nccl.py)
refuses what NCCL refuses, so that the tests built on it can fail."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from pyg_dynscale.training import ranks as groups
from pyg_dynscale.training.launch import spawn
from tests.helpers import fake_nccl


@pytest.mark.parametrize("backend, names, host, device_type", [
    ("gloo", ("gloo",), True, None),
    ("nccl", ("nccl",), False, "cuda"),
    ("NCCL", ("nccl",), False, "cuda"),
    ("cpu:gloo,cuda:nccl", ("gloo", "nccl"), True, "cuda"),  # host tensors through gloo, device ones through NCCL
    ("mpi", ("mpi",), True, None),
    (fake_nccl.NAME, (fake_nccl.NAME,), False, "cpu"),  # registered by tests/helpers/fake_nccl.py
])
def test_backend_kinds(backend: str, names: tuple, host: bool, device_type) -> None:
    assert groups.backend_names(backend) == names
    assert groups.moves_host_tensors(backend) is host
    assert groups.device_backend_type(backend) == device_type


def test_bind_device(monkeypatch) -> None:
    calls: list = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(str(d)))
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert groups.bind_device("cuda") == torch.device("cuda", 3)  # no index: this rank's local GPU
    assert groups.bind_device(torch.device("cuda", 1)) == torch.device("cuda", 1)
    assert groups.bind_device("cpu") is None and groups.bind_device(None) is None
    assert calls == ["cuda:3", "cuda:1"]


def _made_once(rank: int, world: int) -> dict:
    made: list = []
    new_group = dist.new_group

    def counted(*args, **kwargs):
        made.append(kwargs.get("ranks"))
        return new_group(*args, **kwargs)

    dist.new_group = counted
    out: dict = {}
    a = groups.helper_group(None, "gloo", "exchange")
    out["same"] = groups.helper_group(None, "gloo", "exchange") is a
    out["made"] = list(made)
    x = torch.ones(1)
    dist.all_reduce(x, group=a)
    out["sum"] = float(x)
    # a new default group: the old helper groups died with theirs, new ones are made
    dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    b = groups.helper_group(None, "gloo", "exchange")
    dist.all_reduce(x, group=b)
    out["after"] = (b is not a, list(made), float(x))
    return out


def test_helper_groups_are_made_once_and_forgotten_with_their_world() -> None:
    r = spawn(_made_once, 1, timeout=60)[0]
    assert r["same"] and r["made"] == [[0]] and r["sum"] == 1.0
    assert r["after"] == (True, [[0], [0]], 1.0)


def _stand_in(rank: int, world: int) -> dict:
    out: dict = {}

    def attempt(what: str, fn) -> None:
        try:
            fn()
            out[what] = "ok"
        except dist.DistBackendError as exc:
            out[what] = str(exc)

    unbound, shared = dist.new_group([0, 1]), dist.new_group([0, 1])  # the world's backend: fake_nccl
    attempt("unbound", lambda: dist.all_reduce(torch.ones(1), group=unbound))
    torch.cuda.set_device(0)  # recorded: both ranks on cuda:0
    attempt("shared", lambda: dist.all_reduce(torch.ones(1), group=shared))
    torch.cuda.set_device(rank)
    attempt("bound", lambda: dist.all_reduce(torch.ones(1)))
    attempt("objects", lambda: dist.all_gather_object([None] * world, rank))
    # the package's host group of a device-only world: a gloo group, which object collectives may use
    host = groups.host_group(None)
    everyone: list = [None] * world
    dist.all_gather_object(everyone, rank, group=host)
    out["host"] = (groups.group_backend(host), everyone, groups.helper_group(None, "gloo", "host") is host,
                   groups.world_host_group() is host)
    out["log"] = list(fake_nccl.LOG)
    return out


def test_the_nccl_stand_in_refuses_what_nccl_refuses() -> None:
    for rank, r in enumerate(spawn(_stand_in, 2, backend=fake_nccl.NAME, timeout=60)):
        assert r["unbound"].startswith("Duplicate GPU detected") and "never bound" in r["unbound"], r["unbound"]
        assert r["shared"].startswith("Duplicate GPU detected : rank 0 and rank 1 both on device cuda:0"), r["shared"]
        assert "never bound" not in r["shared"]
        assert r["bound"] == "ok"
        assert r["objects"].startswith("all_gather_object over the device-only group"), r["objects"]
        assert r["host"] == ("gloo", [0, 1], True, True)
        assert ("devices", (0, 1), {0: "cuda:0", 1: "cuda:1"}) in r["log"] and ("all_reduce", (0, 1)) in r["log"]
        assert ("refused", "all_gather_object", (0, 1)) in r["log"]
