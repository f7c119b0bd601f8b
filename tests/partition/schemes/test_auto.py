"""``scheme="auto"`` (partition.schemes.auto): the candidate with the
lowest predicted epoch, each part of the prediction computed from the
candidate's own plan, on both paths."""
from __future__ import annotations

import json

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import PartitionError
from pyg_dynscale.nn import TGCN, DySAT
from pyg_dynscale.partition import CommunicationPlan, load_partition, partition, save_partition
from pyg_dynscale.partition.schemes.auto import AUTO_CANDIDATES, BlackBoxSpec, CostModel, predict_cost
from pyg_dynscale.partition.halo_plan import HaloDepth
from tests.helpers.signals import make_dynamic_signal

ONLY_BYTES = CostModel(unit_s=0.0, bandwidth=1.0, latency_s=0.0)
ONLY_COLLECTIVES = CostModel(unit_s=0.0, bandwidth=float("inf"), latency_s=1.0)
ONLY_COMPUTE = CostModel(unit_s=1.0, bandwidth=float("inf"), latency_s=0.0)


def _fresh_vertices(T: int = 8, V: int = 60, seed: int = 0) -> DynamicGraphSignal:
    """Every snapshot has its own vertices (ids shuffled): no temporal edge at all."""
    g = torch.Generator().manual_seed(seed)
    eis, xs, ys, ids = [], [], [], []
    n = V // T
    perm = torch.randperm(V, generator=g)
    for t in range(T):
        eis.append(torch.randint(0, n, (2, 4 * n), generator=g))
        xs.append(torch.randn(n, 3, generator=g))
        ys.append(torch.randn(n, generator=g))
        ids.append(perm[t * n:(t + 1) * n].sort().values)
    return DynamicGraphSignal(eis, None, xs, ys, node_ids=ids, num_vertices=V)


def _candidates(p) -> dict:  # noqa: ANN001
    return {c["scheme"]: c for c in p.meta["auto"]["candidates"]}


@pytest.mark.parametrize("cost", [ONLY_BYTES, ONLY_COLLECTIVES, ONLY_COMPUTE, CostModel.for_device("cpu")])
def test_auto_picks_the_lowest_predicted_epoch(cost):
    sig = make_dynamic_signal(seed=3, T=10, V=40)
    pattern = TGCN(3, 8, num_layers=2).dependency_pattern()
    p = partition(sig, "auto", 3, pattern, cost=cost)
    cands = _candidates(p)
    assert set(cands) == set(AUTO_CANDIDATES)
    best = min(cands.values(), key=lambda c: c["predicted_s"])
    assert p.meta["auto"]["chosen"] == best["scheme"] and p.scheme == best["scheme"].replace("pts-loc", "pts")
    for c in cands.values():
        assert c["predicted_s"] == pytest.approx(c["compute_s"] + c["comm_s"] + c["latency_s"])
    json.dumps(p.meta)  # reports and saved partitions carry it


def test_bytes_come_from_the_candidates_plan():
    sig = _fresh_vertices()
    pattern = TGCN(3, 8, num_layers=2).dependency_pattern()
    p = partition(sig, "auto", 2, pattern, cost=ONLY_BYTES)
    cands = _candidates(p)
    # no temporal edge: PSS (whole snapshots) moves nothing; PTS cuts the snapshots' spatial edges
    assert cands["pss"]["bytes_total"] == 0 and cands["pts"]["bytes_total"] > 0
    assert p.meta["auto"]["chosen"] == "pss"
    for name in ("pss", "pts", "pgc"):
        part = partition(sig, name, 2, pattern, seed=0)
        assert cands[name]["bytes_total"] == CommunicationPlan.build(sig, part, pattern).bytes_by_kind()["total"]


def test_a_model_with_raw_features_only_in_its_first_layer_moves_nothing_under_pts():
    sig = make_dynamic_signal(seed=1, T=8, V=30)
    p = partition(sig, "auto", 2, TGCN(3, 8).dependency_pattern(), cost=ONLY_BYTES)
    assert _candidates(p)["pts"]["bytes_total"] == 0 and p.meta["auto"]["chosen"] in ("pts", "pts-loc", "pgc")


def test_recurrent_rounds_count_as_dependent_steps():
    sig = make_dynamic_signal(seed=2, T=12, V=30)
    p = partition(sig, "auto", 3, TGCN(3, 8).dependency_pattern(), cost=ONLY_COMPUTE)
    cands = _candidates(p)
    assert cands["pss"]["steps"] == 3 and cands["pts"]["steps"] == 1  # PSS: a chain over 3 ranks, 3 rounds
    assert cands["pss"]["compute_s"] > cands["pts"]["compute_s"]


def test_black_box_path_counts_calls_and_snapshot_syncs():
    sig = make_dynamic_signal(seed=4, T=10, V=40)
    stateless = BlackBoxSpec(HaloDepth.uniform(0, 0), (), 3)  # no halo, no state: no exchange at all
    p = partition(sig, "auto", 2, blackbox=stateless, cost=CostModel(0.0, float("inf"), 1.0, call_s=1.0))
    cands = _candidates(p)
    assert "pss-ts" not in cands
    assert all(c["collectives"] == 1 for c in cands.values())  # only the gradient sum
    # no exchange, so no waiting: each rank calls the module once per snapshot it has nodes in
    assert cands["pss"]["compute_s"] < cands["pts"]["compute_s"]
    assert p.meta["auto"]["chosen"] == "pss" and p.meta["auto"]["path"] == "blackbox"
    stateful = BlackBoxSpec(HaloDepth.uniform(1, 1), (8,), 3)
    q = partition(sig, "auto", 2, blackbox=stateful, cost=ONLY_COLLECTIVES)
    assert _candidates(q)["pts"]["collectives"] > _candidates(q)["pss"]["collectives"]


def test_auto_partitions_save_and_load(tmp_path):
    sig = make_dynamic_signal(seed=5, T=6, V=20)
    p = partition(sig, "auto", 2, DySAT(3, 8, 6).dependency_pattern())
    save_partition(p, str(tmp_path / "p.pt"))
    q = load_partition(str(tmp_path / "p.pt"))
    assert torch.equal(q.owner, p.owner) and q.meta["auto"]["chosen"] == p.meta["auto"]["chosen"]


def test_auto_needs_a_pattern_or_a_black_box_spec():
    with pytest.raises(PartitionError, match="auto"):
        partition(make_dynamic_signal(), "auto", 2)
