"""The stale embedding cache (DGC §5.2): policies, cache semantics, exactness
at theta = 0, a single-process emulation at theta = infinity, byte accounting
and agreement between ranks. Spawned gloo ranks, float64."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.distributed.stale import ADAPTIVE, DEFAULT_KINDS, StaleCache, StaleConfig, policy_factor
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import adapt
from pyg_dynscale.nn.decomposed import FusedGraph, Halo
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import distributed_cases as cases

EPOCHS = 5


# ------------------------------------------------------------------ formulas
def test_policy_factors() -> None:
    e = math.e
    assert policy_factor("static", 0.3, 0.9) == 0.3
    assert policy_factor("printed", None, 0.0) == 0.5 and abs(policy_factor("printed", None, 1.0) - 1 / (1 + e)) < 1e-15
    assert abs(policy_factor("intent", None, 1.0) - 1 / (1 + 1 / e)) < 1e-15 and policy_factor("intent", None, 0.0) == 0.5
    assert policy_factor("ramp", None, 0.0) == 0.0 and abs(policy_factor("ramp", None, 1.0) - math.tanh(0.5)) < 1e-15
    assert policy_factor("rise", None, 0.0) == 0.7 and abs(policy_factor("rise", None, 0.1) - 0.8) < 1e-15
    assert abs(policy_factor("rise", None, 0.5) - 0.9) < 1e-15 and policy_factor("rise", None, -0.3) == 0.7
    assert policy_factor("adaptive", None, 0.4) == policy_factor(ADAPTIVE[0], ADAPTIVE[1], 0.4)
    with pytest.warns(FutureWarning, match="deprecated"):
        assert StaleConfig.parse("adaptive").kinds == ADAPTIVE[2] and StaleConfig.parse("intent").kinds == DEFAULT_KINDS
        assert StaleConfig.parse("adaptive", kinds=("spatial",)).kinds == ("spatial",)
    # printed shrinks as the loss falls (norm grows), intent grows: the ambiguity of Eq. 6
    assert policy_factor("printed", None, 0.8) < policy_factor("printed", None, 0.2)
    assert policy_factor("intent", None, 0.8) > policy_factor("intent", None, 0.2)


def test_norm_is_eq7_from_first_and_previous_loss() -> None:
    cache = StaleCache(StaleConfig.parse("intent"))
    assert cache.norm() == 0.0
    cache.end_epoch(2.0)
    cache.end_epoch(1.5)
    assert cache.norm() == 0.25 and abs(cache.factor() - 1 / (1 + math.exp(-0.25))) < 1e-15


@pytest.mark.parametrize("spec, policy, c", [("off", "off", None), ("static:0.5", "static", 0.5), ("printed", "printed", None),
                                             ("intent", "intent", None), ("Adaptive", "adaptive", None),
                                             ("static:inf", "static", math.inf)])
def test_parse(spec: str, policy: str, c) -> None:
    if policy == "adaptive":  # the deprecated name warns
        with pytest.warns(FutureWarning, match="static:0.9"):
            cfg = StaleConfig.parse(spec)
    else:
        cfg = StaleConfig.parse(spec)
    assert cfg.policy == policy and cfg.c == c and cfg.enabled == (policy != "off")


def test_per_kind_policy_overrides_the_main_one() -> None:
    cfg = StaleConfig("intent", kinds=("spatial", "temporal"), per_kind=(("temporal", "static:0.25"),))
    assert cfg.factor(0.0, "temporal") == 0.25 and cfg.factor(0.0, "spatial") == 0.5 and cfg.factor(0.0) == 0.5
    with pytest.raises(ModelInputError, match="not in kinds"):
        StaleConfig("intent", kinds=("spatial",), per_kind=(("temporal", "static:0.25"),))
    with pytest.raises(ModelInputError, match="leave the kind out"):
        StaleConfig("intent", per_kind=(("temporal", "off"),))


@pytest.mark.parametrize("kwargs", [dict(policy="sometimes"), dict(policy="static"), dict(policy="static", c=-1.0),
                                    dict(policy="static", c=float("nan")), dict(policy="intent", kinds=("halo",)),
                                    dict(policy="intent", kinds=()), dict(policy="intent", backward="maybe"),
                                    dict(policy="intent", scope="everywhere")])
def test_bad_config_is_refused(kwargs) -> None:
    with pytest.raises(ModelInputError):
        StaleConfig(**kwargs)
    with pytest.raises(ModelInputError, match="static:<c>"):
        StaleConfig.parse("static:half")


# ---------------------------------------------------------- cache semantics
def _scripted(rank: int, world_size: int) -> dict:
    """Rank 0 sends rows A (drifts 0.09 per epoch) and B (jumps 1.0 per epoch)
    to rank 1 through one stale exchange, static theta = 0.5 D."""
    from pyg_dynscale.distributed.exchange import Communicator

    comm = Communicator(None, torch.device("cpu"), torch.float64)
    cache = StaleCache(StaleConfig.parse("static:0.5"))
    n_send = 2 if rank == 0 else 0
    send_splits = [0, 2] if rank == 0 else [0, 0]
    recv_splits = [0, 0] if rank == 0 else [2, 0]
    got = []
    for epoch in range(1, 14):
        cache.start_epoch()
        comm.start(requires_grad=False)
        rows = torch.tensor([[0.09 * epoch, 0.0], [1.0 * epoch, 0.0]], dtype=torch.float64)[:n_send]
        out = cache.exchange(comm, "slot", (0, "spatial:1", "spatial"), rows, send_splits, recv_splits)
        got.append(out.tolist())
        cache.end_epoch(1.0)
    return {"received": got, "fresh": [h["exchanges"]["0:spatial:1"]["fresh"] for h in cache.history]}


def test_unsent_row_is_compared_with_its_last_transmitted_copy() -> None:
    r0, r1 = spawn(_scripted, 2)
    # B (distance 1.0 = D) goes every epoch; A only when its drift since its LAST TRANSMISSION exceeds 0.5:
    # epochs 1 (first), 7 (0.54 since epoch 1) and 13 (0.54 since epoch 7). Compared with the previous
    # epoch (0.09 < 0.5) it would never go again.
    assert r0["fresh"] == [2, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 2]
    a = [round(rows[0][0], 10) for rows in r1["received"]]
    assert a == [0.09] * 6 + [0.63] * 6 + [1.17]
    assert [round(rows[1][0], 10) for rows in r1["received"]] == [float(e) for e in range(1, 14)]


# ------------------------------------------------------------ exactness: theta = 0
def _run(rank: int, world_size: int, name: str, scheme: str, stale, epochs: int = EPOCHS) -> dict:
    sig = cases.signal()
    m, head, loss = cases.model(name)
    part = cases.make_partition(sig, scheme, world_size, adapt(m).dependency_pattern(8))
    tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cases.optimizer_for(name), stale=stale)
    losses, traffic = [], []
    for _ in range(epochs):
        losses.append(tr.train_epoch())
        traffic.append(tr.traffic())
    params = [p.detach().clone() for p in tr.params]
    maps = {str(k): (m_.width, list(m_.send_splits)) for k, m_ in tr.layout.maps.items()}
    return {"losses": losses, "traffic": traffic, "params": params, "history": tr.stale.history if tr.stale else None,
            "maps": maps}


def _many(rank: int, world_size: int, jobs: list) -> list:
    return [_run(rank, world_size, *job) for job in jobs]


EXACT_JOBS = [("tgcn2", "random", None), ("tgcn2", "random", "static:0"),
              ("dysat_mse", "pss-ts", None), ("dysat_mse", "pss-ts", StaleConfig("static", 0.0, backward="send")),
              ("mpnn_dgc", "random", None), ("mpnn_dgc", "random", StaleConfig("static", 0.0, scope="global"))]


@pytest.fixture(scope="module")
def exact_runs() -> list:
    return spawn(_many, 3, EXACT_JOBS, timeout=300)


def test_theta_zero_reproduces_the_exact_path(exact_runs) -> None:
    r0 = exact_runs[0]
    for i in range(0, len(EXACT_JOBS), 2):
        exact, zero = r0[i], r0[i + 1]
        assert zero["losses"] == exact["losses"], EXACT_JOBS[i]  # every row is sent: bit for bit
        for a, b in zip(exact["params"], zero["params"]):
            assert torch.equal(a, b)
        t = zero["traffic"][-1]
        planned = {k: v for k, v in t["predicted"].items() if k != "total"}
        assert all(t["measured"][k] == planned[k] for k in planned), EXACT_JOBS[i + 1]
        assert t["measured"]["stale_meta"] > 0  # the masks still move (and are counted)
        assert zero["traffic"][0]["measured"]["stale_meta"] == 0  # not in the first epoch


def test_ranks_agree_on_the_schedule(exact_runs) -> None:
    for i, job in enumerate(EXACT_JOBS):
        hists = [r[i]["history"] for r in exact_runs]
        if hists[0] is None:
            continue
        assert all([h["factor"] for h in hist] == [h["factor"] for h in hists[0]] for hist in hists)
        if isinstance(job[2], StaleConfig) and job[2].scope == "global":  # the same theta everywhere
            for e in range(1, EPOCHS):
                thetas = [{k: v["theta"] for k, v in hist[e]["exchanges"].items()} for hist in hists]
                assert all(t == thetas[0] for t in thetas) and thetas[0]


# ------------------------------------------- theta = infinity: frozen remote rows
class _FrozenRemote(Halo):
    """Single process: layer-1 rows owned by ranks other than ``rank`` are the
    first epoch's values (constants)."""

    def __init__(self, owner: torch.Tensor, rank: int, frozen: dict) -> None:
        self.mine, self.frozen = owner == rank, frozen

    def exchange(self, block: int, layer: int, x: torch.Tensor) -> torch.Tensor:
        if layer == 0:  # raw features: loaded once, never stale
            return x
        key = (block, layer)
        return torch.where(self.mine.unsqueeze(1), x, self.frozen[key]) if key in self.frozen else x


class _Recorder(Halo):
    def __init__(self, frozen: dict) -> None:
        self.frozen = frozen

    def exchange(self, block: int, layer: int, x: torch.Tensor) -> torch.Tensor:
        if layer > 0:
            self.frozen[(block, layer)] = x.detach().clone()
        return x


class _FrozenTrainer(FusedTrainer):
    """FusedTrainer whose structure encoder sees, for the nodes of each rank,
    live rows of that rank and the first epoch's rows of the others."""

    def __init__(self, *args, owner: torch.Tensor, world_size: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.owner, self.R, self.frozen, self.epoch = owner, world_size, {}, 0

    def outputs(self) -> torch.Tensor:
        g: FusedGraph = self.graph
        x = g.x.to(self._params_dtype())
        if self.epoch == 0:
            z = self.model.structure_encoder(g, x, block=0, halo=_Recorder(self.frozen))
        else:
            z = torch.zeros(0)
            for r in range(self.R):
                zr = self.model.structure_encoder(g, x, block=0, halo=_FrozenRemote(self.owner, r, self.frozen))
                z = zr if r == 0 else torch.where((self.owner == r).unsqueeze(1), zr, z)
        self.epoch += 1
        return self.model.time_encoder(z, g, None, block=0)


def test_theta_infinity_equals_frozen_remote_rows_emulation() -> None:
    # PTS: every sequence on one rank, so the only per-epoch exchange is the layer-1 spatial halo
    name, R = "tgcn2", 2
    dist_run = spawn(_run, R, name, "pts", "static:inf", 6)[0]
    sig = cases.signal()
    m, head, loss = cases.model(name)
    part = cases.make_partition(sig, "pts", R, m.dependency_pattern(8))
    opt = cases.optimizer_for(name)(list(m.parameters()) + list(head.parameters()))
    ref = _FrozenTrainer(m, sig, head=head, loss=loss, optimizer=opt, owner=part.owner, world_size=R)
    losses = [ref.train_epoch() for _ in range(6)]
    torch.testing.assert_close(torch.tensor(dist_run["losses"]), torch.tensor(losses), rtol=1e-10, atol=1e-12)
    params = list(m.parameters()) + list(head.parameters())
    for a, b in zip(dist_run["params"], params):
        torch.testing.assert_close(a, b.detach(), rtol=1e-9, atol=1e-10)
    # and it is not the exact run: frozen rows change the result
    exact = spawn(_run, R, name, "pts", None, 6)[0]
    assert abs(exact["losses"][-1] - dist_run["losses"][-1]) > 1e-6
    # nothing but masks moves after the first epoch
    for t in dist_run["traffic"][1:]:
        assert t["measured"]["spatial"] == 0 and t["measured"]["stale_meta"] > 0


# ----------------------------------------------------------- byte accounting
def test_measured_bytes_equal_what_the_masks_imply() -> None:
    runs = spawn(_run, 2, "tgcn2", "pts", "static:0.5", 6)
    bpe = 8
    for e in range(1, 6):
        spatial = meta = 0
        for r in runs:
            rec = r["history"][e]["exchanges"]["0:spatial:1"]
            width, splits = r["maps"][str((0, "spatial:1"))]
            spatial += 2 * rec["fresh"] * width * bpe  # fresh rows forward, their gradients backward (skip)
            meta += sum((n + 7) // 8 for n in splits)  # one bit per planned row, bytes per destination
        t = runs[0]["traffic"][e]
        assert t["measured"]["spatial"] == spatial and t["measured"]["stale_meta"] == meta
        assert t["measured"]["total"] == spatial + meta + t["measured"]["temporal"]
    fresh = sum(r["history"][5]["exchanges"]["0:spatial:1"]["fresh"] for r in runs)
    planned = sum(r["history"][5]["exchanges"]["0:spatial:1"]["planned"] for r in runs)
    assert 0 < fresh < planned  # some rows were cached, some sent: the mask is doing something


def test_per_kind_policy_applies_to_its_exchanges_only() -> None:
    cfg = StaleConfig("static", 0.0, kinds=("spatial", "temporal"), per_kind=(("temporal", "static:inf"),))
    run = spawn(_run, 2, "tgcn2", "random", cfg, 3)[0]
    for t in run["traffic"][1:]:
        assert t["measured"]["temporal"] == 0 < t["predicted"]["temporal"]  # frozen after the first epoch
        assert t["measured"]["spatial"] == t["predicted"]["spatial"] > 0  # theta = 0: every row


# ------------------------------------------------- every model and scheme
ALL_KINDS = ("spatial", "temporal", "redistribution", "readout")
MATRIX = [(name, scheme) for name in cases.MODELS for scheme in cases.SCHEMES]


def _matrix(rank: int, world_size: int) -> list:
    out = []
    for name, scheme in MATRIX:
        exact = _run(rank, world_size, name, scheme, None, 2)
        zero = _run(rank, world_size, name, scheme, StaleConfig("static", 0.0, kinds=ALL_KINDS), 2)
        half = _run(rank, world_size, name, scheme, StaleConfig("static", 0.5, kinds=ALL_KINDS), 2)
        out.append((exact["losses"], zero["losses"], half["traffic"][-1], exact["traffic"][-1]))
    return out


def test_every_model_and_scheme_runs_with_the_cache() -> None:
    results = spawn(_matrix, 3, timeout=600)[0]
    for (name, scheme), (exact, zero, half, full) in zip(MATRIX, results):
        assert zero == exact, (name, scheme)  # theta = 0 over every kind is the exact path
        planned = full["measured"]["total"]
        assert half["measured"]["total"] - half["measured"]["stale_meta"] <= planned, (name, scheme)
