"""DistributedTrainer under NCCL's rules, on the CPU (tests/helpers/fake_nccl.py: a device-only backend over gloo).

* Two 2-rank subgroups of a 4-rank world train side by side, each == the one-process FusedTrainer in
  float64 (losses, parameters, the later window evaluated with the state continued on one subgroup only):
  the gloo twins for host values are made on every rank, once, at set-up (3 groups: the world's host
  group and one twin per subgroup), and the later-window evaluator makes none.
* Set-up binds the device before its first collective on the device-only group, runs its object
  collectives (the agreement, the one-GPU-per-rank check) over gloo, and two ranks on one GPU get the
  package's error, not NCCL's.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.training.ranks import bind, check_one_gpu_per_rank
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import adapt
from pyg_dynscale.partition import partition
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import distributed_cases as cases
from tests.helpers import fake_nccl

EPOCHS = 3
#: (model case, scheme) of subgroup 0 (ranks 0, 1) and subgroup 1 (ranks 2, 3): different models, so rows
#: that crossed between the subgroups could not go unnoticed
CASES = [("tgcn2", "pgc"), ("mpnn_dgc", "pts")]


def _split():
    return cases.signal().split(0.5)


def _params(m, head) -> list:
    return [p.detach().clone() for p in list(m.parameters()) + (list(head.parameters()) if head is not None else [])]


def _subgroups(rank: int, world: int) -> dict:
    subs = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank makes both, in order (the world's backend)
    mine = rank // 2
    made: list = []
    new_group = dist.new_group

    def counted(*args, **kwargs):  # every group the package makes from here on
        made.append(kwargs.get("ranks", args[0] if args else None))
        return new_group(*args, **kwargs)

    dist.new_group = counted
    name, scheme = CASES[mine]
    train, test = _split()
    m, head, loss = cases.model(name)
    pattern = adapt(m, check=False).dependency_pattern(8)
    part = partition(train, scheme, 2, pattern, seed=0)
    tr = DistributedTrainer(m, train, part, head=head, loss=loss, optimizer=cases.optimizer_for(name),
                            group=subs[mine])
    at_setup = list(made)
    losses = [tr.train_epoch() for _ in range(EPOCHS)]
    out = {"case": mine, "losses": losses, "params": _params(m, head), "made_at_setup": at_setup,
           "backend": tr.transport.backend, "transport": tr.transport.name}
    # one subgroup evaluates a later window while the other does not: the evaluator needs no world collective
    out["later"] = tr.evaluate(test, partition(test, scheme, 2, pattern, seed=0))["loss"] if mine == 0 else None
    out["own"] = tr.evaluate()["loss"]
    out["made_after_setup"] = made[len(at_setup):]
    out["log"] = list(fake_nccl.LOG)
    return out


def _reference(name: str) -> dict:
    train, test = _split()
    m, head, loss = cases.model(name)
    ref = FusedTrainer(m, train, head=head, loss=loss, optimizer=cases.optimizer_for(name))
    losses = [ref.train_epoch() for _ in range(EPOCHS)]
    return {"losses": losses, "params": _params(m, head), "later": ref.evaluate(test)["loss"], "own": ref.evaluate()["loss"]}


def test_two_subgroups_train_side_by_side_under_nccl_rules():
    res = spawn(_subgroups, 4, backend=fake_nccl.NAME, timeout=90)
    refs = [_reference(name) for name, _ in CASES]
    for rank, r in enumerate(res):
        sub = (0, 1) if rank < 2 else (2, 3)
        ref = refs[r["case"]]
        assert (r["backend"], r["transport"]) == (fake_nccl.NAME, "direct")
        assert max(abs(a - b) for a, b in zip(r["losses"], ref["losses"])) <= 1e-10, (rank, r["losses"], ref["losses"])
        for a, b in zip(r["params"], ref["params"]):
            assert float((a - b).abs().max()) <= 1e-9, rank
        assert abs(r["own"] - ref["own"]) <= 1e-10, rank
        if r["case"] == 0:
            assert abs(r["later"] - ref["later"]) <= 1e-10, (rank, r["later"], ref["later"])
        # made collectively: every rank entered new_group for the world's host group and both twins, in one order
        assert r["made_at_setup"] == [None, [0, 1], [2, 3]], (rank, r["made_at_setup"])
        assert r["made_after_setup"] == [], rank  # training and the later-window evaluator reuse them
        # device tensors went over the rank's own subgroup only, after the device was bound; host values and
        # objects never touched a device-only group
        ops = [e for e in r["log"] if e[0] not in ("bind", "devices")]
        assert ops and {e[1] for e in ops} == {sub}, (rank, {e[1] for e in ops})
        assert not [e for e in r["log"] if e[0] == "refused"], rank
        assert r["log"][0][0] == "bind", (rank, r["log"][:2])
        checks = [e for e in r["log"] if e[0] == "devices"]
        assert [c[1] for c in checks] == [sub] and None not in checks[0][2].values(), (rank, checks)
    assert res[0]["losses"] == res[1]["losses"] and res[2]["losses"] == res[3]["losses"]


def _set_up(rank: int, world: int) -> dict:
    out: dict = {}
    for what, device in (("one GPU each", f"cuda:{rank}"), ("one GPU for both", "cuda:0")):
        bind(torch.device(device))  # what DistributedTrainer does first with a CUDA device (recorded here)
        try:
            check_one_gpu_per_rank(torch.device(device))  # over the default (device-only) group's gloo twin
            out[what] = "ok"
        except ModelInputError as exc:
            out[what] = f"{exc.field}: {exc}"
        except dist.DistBackendError as exc:
            out[what] = f"NCCL: {exc}"
    out["bound"] = fake_nccl.bound_device()
    # a set-up error on one rank only (rank 1 asks for the staged exchange, which needs gloo) reaches the other
    # through the agreement over gloo; nothing touches the device-only group
    sig = cases.signal()
    m, head, loss = cases.model("tgcn1")
    try:
        DistributedTrainer(m, sig, partition(sig, "pts", world), head=head, loss=loss,
                           backend="staged" if rank == 1 else "auto")
        out["mixed"] = "ok"
    except ModelInputError as exc:
        out["mixed"] = f"{exc.field}: {exc}"
    out["log"] = list(fake_nccl.LOG)
    return out


def test_set_up_binds_first_and_agrees_over_gloo():
    res = spawn(_set_up, 2, backend=fake_nccl.NAME, timeout=60)
    for rank, r in enumerate(res):
        assert r["one GPU each"] == "ok", r
        assert r["one GPU for both"].startswith("device: ") and "NCCL needs one GPU per rank" in \
            r["one GPU for both"] and "ranks [0, 1]" in r["one GPU for both"], r["one GPU for both"]
        assert r["bound"] == "cuda:0", r["bound"]
        assert ("bind", f"cuda:{rank}") in r["log"], r["log"]
    assert res[1]["mixed"].startswith("backend: ") and "staged" in res[1]["mixed"], res[1]["mixed"]
    assert res[0]["mixed"].startswith("set-up: ") and "failed on rank 1" in res[0]["mixed"], res[0]["mixed"]
    for r in res:  # not one collective (let alone an object collective) on the device-only group
        assert [e for e in r["log"] if e[0] != "bind"] == [], r["log"]
