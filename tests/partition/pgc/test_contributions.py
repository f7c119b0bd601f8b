"""What each part of PGC contributes, pinned so that replacing it with a
trivial version fails a test: Algorithm 1 (affinity-driven greedy
assignment), the chunk cap, and the MLP workload model's predictions.

Mutations checked by hand (docs/pgc.md, "Tests"): Algorithm 1 replaced by a
round-robin assignment, the MLP's predictions replaced by a constant, the
cap replaced by infinity -- each fails at least one test here."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dynscale.data.synthetic import generate_dynamic_graph
from pyg_dynscale.partition import DependencyPattern, partition_pgc
from pyg_dynscale.partition.pgc.assign import ChunkGraph, assign_chunks, rank_loads
from pyg_dynscale.partition.costs.workload import MLPWorkload, chunk_statistics, mape
from tests.helpers.partition_inputs import small_signal, synthetic_timings


def _law(V: torch.Tensor, edges: torch.Tensor, F: float, H: float, K: float) -> torch.Tensor:
    """The timing law of ``synthetic_timings``."""
    return 1e-4 + 1e-7 * (V * F + edges * H) * K


# ------------------------------------------------------------- Algorithm 1
@pytest.mark.parametrize("backend", ["torch", "numba"])
def test_algorithm1_follows_affinity_not_chunk_order(backend):
    """Chunk pairs (0, 3) and (1, 2) are tied strongly, 1 and 3 weakly; equal
    costs, 2 ranks. Eq. 3 puts each pair on one rank; a round-robin (or
    chunk-order) assignment splits both pairs."""
    from pyg_dynscale.partition.compiled import backend as kernels

    if backend == "numba" and not kernels.HAVE_NUMBA:
        pytest.skip("numba is not installed")
    g = ChunkGraph.from_pairs(4, np.array([0, 1, 1]), np.array([3, 2, 3]), np.array([10.0, 10.0, 1.0]))
    with kernels.use_backend(backend):
        owner = assign_chunks(g, np.ones(4), 2)
    assert owner[0] == owner[3] and owner[1] == owner[2] and owner[0] != owner[1]
    assert g.cut(owner) == 1.0  # only the weak edge is cut
    assert g.cut(np.arange(4) % 2) == 20.0 and g.cut(np.array([0, 0, 1, 1])) == 21.0


def test_algorithm1_fills_the_emptiest_rank_within_slack():
    """Costs 4, 3, 3, 2 on 2 ranks, no affinities: heaviest first, each to the
    rank with most room, so both ranks end at 6 (round-robin gives 7 / 5)."""
    g = ChunkGraph.from_pairs(4, np.zeros(0), np.zeros(0), np.zeros(0))
    cost = np.array([4.0, 3.0, 3.0, 2.0])
    owner = assign_chunks(g, cost, 2, slack=0.0)
    assert rank_loads(owner, cost, 2).tolist() == [6.0, 6.0]
    assert rank_loads(np.arange(4) % 2, cost, 2).tolist() == [7.0, 5.0]


# --------------------------------------------------------------------- cap
@pytest.fixture(scope="module")
def planted():
    sig = generate_dynamic_graph(600, 6000, 8, seed=3)
    return sig, DependencyPattern.preset("tgcn", sig.num_node_features, 16, gcn_layers=2)


def test_cap_bounds_every_chunk_and_sets_their_number(planted):
    sig, pattern = planted
    counts = []
    for per_part in (4, 16, 64):
        p = partition_pgc(sig, 4, pattern, chunks_per_part=per_part, starts=("lp",), refine_rounds=0, threads=1)
        meta = p.meta
        cost = 1.0 + torch.bincount(sig.supergraph().spatial_edge_index[1], minlength=sig.num_vertex_time_nodes).double()
        chunk_cost = torch.zeros(meta["num_chunks"], dtype=torch.float64).index_add_(0, p.chunk, cost)
        assert float(chunk_cost.max()) <= meta["cap"] * (1 + 1e-9)
        assert meta["num_chunks"] >= float(cost.sum()) / meta["cap"]
        counts.append(meta["num_chunks"])
    assert counts[0] < counts[1] < counts[2]  # a smaller cap makes more, smaller chunks


# ---------------------------------------------------------- workload model
@pytest.fixture(scope="module")
def mlp():
    return MLPWorkload.train(synthetic_timings(160, seed=1), epochs=60, seed=0, hidden=16, layers=2)


def test_mlp_predictions_follow_the_measured_law(mlp):
    V = torch.tensor([50.0, 200.0, 800.0, 3000.0], dtype=torch.float64)
    E, Et = 4 * V, (V * 0.5).round()
    pred = mlp.predict(V, E, Et, (32.0, 16.0, 2.0))
    truth = _law(V, E, 32.0, 16.0, 2.0) + _law(V, Et, 32.0, 16.0, 2.0)
    assert mape(pred, truth) < 0.25
    assert bool((pred[1:] > pred[:-1]).all())  # bigger chunks cost more


def test_pgc_balances_the_mlps_predicted_load(mlp):
    """PGC with the MLP balances what the MLP predicts, and those predictions
    track the law on the chunks PGC made."""
    s = small_signal(2, T=8, V=60)
    p = partition_pgc(s, 3, (1.0, 1.0), workload=mlp, threads=1)
    C = p.meta["num_chunks"]
    stats = chunk_statistics(s, p.chunk, C)
    F = float(max(1, s.num_node_features))
    truth = _law(stats[:, 0], stats[:, 1], F, 16.0, 2.0) + _law(stats[:, 0], stats[:, 2], F, 16.0, 2.0)
    truth = torch.where(stats[:, 0] > 0, truth, torch.zeros_like(truth))
    chunk_owner = torch.zeros(C, dtype=torch.long).scatter_(0, p.chunk, p.owner)
    true_loads = torch.zeros(3, dtype=torch.float64).index_add_(0, chunk_owner, truth)
    assert mape(torch.tensor(p.meta["loads"], dtype=torch.float64), true_loads) < 0.25
