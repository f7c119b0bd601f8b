"""The round-aware workload model (what the distributed runtime pays per
rank: recurrent rounds, scan steps) and PGC's round-aware balancing."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import DependencyPattern, Partition
from pyg_dynscale.partition.pgc.rebalance import balance_rounds
from pyg_dynscale.partition.costs.rounds import (
    RoundWorkload, predict_round_times, round_features)
from pyg_dynscale.partition.costs.workload import LinearWorkload, WorkloadModelError
from pyg_dynscale.partition.plan import CommunicationPlan
from tests.helpers.signals import make_dynamic_signal


def _ring(T: int = 6, V: int = 4) -> DynamicGraphSignal:
    """V vertices on a directed ring, present in all T snapshots: V chains of length T."""
    rng = np.random.default_rng(1)
    ei = np.array([list(range(V)), [(i + 1) % V for i in range(V)]])
    return DynamicGraphSignal(ei, np.ones(V), [rng.standard_normal((V, 2)) for _ in range(T)],
                              [rng.standard_normal(V) for _ in range(T)])


def _owner_by_snapshot(sig: DynamicGraphSignal, rank_of_t: list[int]) -> torch.Tensor:
    return torch.tensor(rank_of_t, dtype=torch.long)[sig.supergraph().time.long()]


MODEL = RoundWorkload(row=1.0, edge=1.0, halo=0.0, time=1.0, step=5.0, call=3.0)


def test_more_segments_cost_more_only_with_rounds():
    sig = _ring()
    two = _owner_by_snapshot(sig, [0, 0, 0, 1, 1, 1])     # every chain cut into 2 pieces
    six = _owner_by_snapshot(sig, [0, 1, 0, 1, 0, 1])     # every chain cut into 6 pieces
    f2, f6 = round_features(sig, two, None, 2), round_features(sig, six, None, 2)
    assert f2.num_rounds == 2 and f6.num_rounds == 6
    # the same rows and edges on each rank: the additive model sees no difference
    assert torch.equal(f2.structure, f6.structure)
    old = LinearWorkload()
    loads = [torch.zeros(2, dtype=torch.float64).index_add_(0, o, old.node_costs(sig)) for o in (two, six)]
    assert torch.equal(loads[0], loads[1])
    flat = MODEL.ignoring_rounds()
    assert torch.allclose(flat.predict(sig, two).per_rank, flat.predict(sig, six).per_rank)
    # the round-aware model charges the 6 dependent rounds (3 per rank, each a call and a step)
    p2, p6 = MODEL.predict(sig, two), MODEL.predict(sig, six)
    assert float(p6.per_rank.max()) > float(p2.per_rank.max())
    assert p6.epoch > p2.epoch
    # exact values: rank 0 of `six` owns 12 rows / 12 edges / 12 recurrent rows in 3 rounds of 1 step
    assert p6.per_rank.tolist() == [12 + 12 + 12 + 3 * (5 + 3)] * 2
    # rank 1 of `two` scans 3 steps in round 1 only
    assert p2.per_round.tolist() == [[12 + 3 * 5 + 3, 0.0], [0.0, 12 + 3 * 5 + 3]]
    assert p2.epoch == pytest.approx(24 + 2 * 30)


def test_features_count_pieces_and_the_longest_piece():
    sig = _ring(T=6, V=4)
    sg = sig.supergraph()
    # vertex 0 split 0|1 at t=2, others whole on rank 0 / rank 1 by vertex
    owner = torch.where(sg.vertex.long() < 2, 0, 1)
    owner[(sg.vertex == 0) & (sg.time >= 2)] = 1
    f = round_features(sig, owner, None, 2)
    assert f.num_rounds == 2
    # round 0: rank 0 scans vertices 0 (2 steps) and 1 (6): 8 rows, 6 steps; rank 1: vertices 2, 3
    assert f.rounds[0].tolist() == [[8.0, 6.0, 1.0], [12.0, 6.0, 1.0]]
    assert f.rounds[1].tolist() == [[0.0, 0.0, 0.0], [4.0, 4.0, 1.0]]
    # halo rows: distinct in-neighbours owned elsewhere, per rank
    s, d = sg.spatial_edge_index
    for r in range(2):
        m = (owner[d] == r) & (owner[s] != r)
        assert f.structure[r, 2] == torch.unique(s[m]).numel()
    # a Partition's temporal owner is what the rounds follow (PSS-TS: one round)
    part = Partition("pss-ts", 2, owner, time_owner=torch.where(sg.vertex.long() < 2, 0, 1))
    assert round_features(sig, part, None).num_rounds == 1


def test_rounds_agree_with_the_plan():
    sig = _ring(T=8, V=6)
    pat = DependencyPattern.preset("tgcn", in_channels=2, hidden=4)
    owner = _owner_by_snapshot(sig, [0, 0, 1, 1, 2, 2, 0, 1])
    part = Partition("pss", 3, owner)
    plan = CommunicationPlan.build(sig, part, pat)
    f = round_features(sig, part, pat)
    assert f.num_rounds == plan.temporal_rounds()
    assert predict_round_times(sig, part, pat, MODEL).per_round.shape == (plan.temporal_rounds(), 3)


def test_fit_recovers_constants_and_rejects_bad_input():
    sig = make_dynamic_signal(seed=3, T=8, V=16)
    truth = RoundWorkload(row=1.0, edge=0.5, halo=2.0, time=0.7, step=4.0, call=9.0)
    gen = torch.Generator().manual_seed(0)
    feats, secs = [], []
    for _ in range(12):
        # separate time owners (as PSS-TS has) so that owned rows and recurrent rows are not collinear
        owner, town = torch.randint(0, 3, (2, sig.num_vertex_time_nodes), generator=gen)
        f = round_features(sig, Partition("pss-ts", 3, owner, time_owner=town))
        feats.append(f)
        secs.append(truth.predict_features(f).per_rank * 1e-4)  # seconds: 0.1 ms per unit
    fit = RoundWorkload.fit(feats, secs)
    for n in RoundWorkload.NAMES:
        assert getattr(fit, n) == pytest.approx(getattr(truth, n), rel=1e-6)
    assert fit.meta["seconds_per_unit"] == pytest.approx(1e-4)
    assert fit.meta["mape"] < 1e-9
    with pytest.raises(WorkloadModelError):
        RoundWorkload.fit(feats, secs[:-1])
    with pytest.raises(WorkloadModelError):
        RoundWorkload(step=-1.0)


def _staggered(T: int = 32, V: int = 8, every: int = 4) -> DynamicGraphSignal:
    """Vertex ``v`` appears from snapshot ``every * v`` on (a ring over the present
    vertices): chains start at different times, so a snapshot-range partition
    gives the last rank pieces at every depth (one round each)."""
    rng = np.random.default_rng(2)
    ids, edges = [], []
    for t in range(T):
        n = min(V, t // every + 1)
        ids.append(np.arange(n))
        edges.append(np.array([list(range(n)), [(i + 1) % n for i in range(n)]]))
    return DynamicGraphSignal(edges, [np.ones(e.shape[1]) for e in edges], [rng.standard_normal((len(i), 2)) for i in ids],
                              [rng.standard_normal(len(i)) for i in ids], node_ids=ids, num_vertices=V)


def test_balance_rounds_lowers_the_predicted_max_and_keeps_bytes():
    from pyg_dynscale.partition.schemes.snapshot_sequence import partition_pss

    sig = _staggered()
    pat = DependencyPattern.preset("tgcn", in_channels=2, hidden=4)
    start = partition_pss(sig, 4, balanced=True).owner      # balanced rows + edges, snapshot ranges
    model = RoundWorkload(row=1.0, edge=1.0, halo=0.0, time=1.0, step=4.0, call=6.0)
    before = model.predict(sig, start, pat, 4)
    assert before.per_round.shape[0] == 4                    # the last rank scans in all 4 rounds
    new, info = balance_rounds(sig, start, 4, pat, model)
    after = model.predict(sig, new, pat, 4)
    assert float(after.per_rank.max()) < float(before.per_rank.max())
    assert info["lambda_after"] < info["lambda_before"] and info["moves"] > 0
    b0 = CommunicationPlan.build(sig, Partition("pgc", 4, start), pat).bytes_by_kind()["total"]
    b1 = CommunicationPlan.build(sig, Partition("pgc", 4, new), pat).bytes_by_kind()["total"]
    assert b1 <= 1.1 * b0 and info["bytes_after"] == b1
    # the critical path of the rounds is capped: with a cap of 1 it does not grow at all
    capped, _ = balance_rounds(sig, start, 4, pat, model, max_epoch_ratio=1.0)
    assert model.predict(sig, capped, pat, 4).epoch <= before.epoch + 1e-9
    assert after.epoch <= 1.05 * before.epoch + 1e-9
    with pytest.raises(PartitionError, match="max_epoch_ratio"):
        balance_rounds(sig, start, 4, pat, model, max_epoch_ratio=0.5)
    # the same balancer with rounds ignored does worse on what the runtime pays
    flat, _ = balance_rounds(sig, start, 4, pat, model.ignoring_rounds())
    assert float(after.per_rank.max()) < float(model.predict(sig, flat, pat, 4).per_rank.max())


def test_pgc_round_objective_lowers_the_predicted_max():
    from pyg_dynscale.partition.pgc.pipeline import partition_pgc

    sig = _staggered(T=48, V=12)
    pat = DependencyPattern.preset("tgcn", in_channels=2, hidden=4, gcn_layers=2)
    model = RoundWorkload()   # the fitted defaults: scan steps and round calls dominate
    nodes = partition_pgc(sig, 4, pat, seed=0)
    rounds = partition_pgc(sig, 4, pat, seed=0, balance="rounds")
    assert nodes.meta["balance"] == "nodes" and rounds.meta["balance"] == "rounds"
    pn, pr = model.predict(sig, nodes, pat), model.predict(sig, rounds, pat)
    assert float(pr.per_rank.max()) < float(pn.per_rank.max())
    assert pr.divergence < pn.divergence - 0.05
    assert pr.epoch <= 1.05 * pn.epoch      # the critical path of the rounds may not grow past the cap
    info = rounds.meta["round_balance"]
    assert info["lambda_after"] == pytest.approx(pr.divergence) and info["moves"] > 0
    bn = CommunicationPlan.build(sig, nodes, pat).bytes_by_kind()["total"]
    br = CommunicationPlan.build(sig, rounds, pat).bytes_by_kind()["total"]
    assert br <= 1.1 * bn
    # owner is constant inside every chunk
    pairs = torch.unique(torch.stack([rounds.chunk, rounds.owner]), dim=1)
    assert pairs.shape[1] == int(rounds.chunk.max()) + 1
    with pytest.raises(PartitionError, match="balance"):
        partition_pgc(sig, 4, pat, balance="time")
