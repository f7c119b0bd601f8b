"""Workload models (DGC §4.2, §6, §7.4): counting baseline, MLP predictors, profile."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import SignalFormatError
from pyg_dynscale.partition.schemes.snapshot_sequence import partition_pss
from pyg_dynscale.partition.costs.node import resolve_node_cost
from pyg_dynscale.partition.pgc.pipeline import partition_pgc
from pyg_dynscale.partition.costs.workload import (
    LinearWorkload,
    MLPWorkload,
    TimingSet,
    WorkloadModelError,
    chunk_statistics,
    mape,
    profile,
    resolve_workload,
    train_predictor,
)
from tests.helpers.partition_inputs import small_signal, synthetic_timings


def test_mlp_training_converges_on_synthetic_law() -> None:
    ts = synthetic_timings(128)
    model, losses = train_predictor(ts.subset("structure"), "structure", epochs=60, seed=0)
    assert len(losses) == 60
    assert losses[-1] < 0.5 * losses[0]
    assert losses[-1] < 0.15
    # the architecture is DGC's: 3 hidden layers of 256 with ReLU
    lin = [m for m in model.net if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in lin] == [256, 256, 256, 1]
    assert sum(isinstance(m, torch.nn.ReLU) for m in model.net) == 3


def test_mlp_train_reports_heldout_mape_and_roundtrips(tmp_path) -> None:
    ts = synthetic_timings(160, seed=1)
    m = MLPWorkload.train(ts, epochs=60, seed=0, hidden=16, layers=2)
    for kind in ("structure", "time"):
        assert 0 <= m.meta[f"{kind}_heldout_mape"] < 0.5
        assert m.meta[f"{kind}_heldout"] == 16
    path = tmp_path / "wl.pt"
    m.save(str(path))
    m2 = MLPWorkload.load(str(path))
    s = small_signal()
    chunk = torch.arange(s.num_vertex_time_nodes) % 7
    a, b = m.chunk_costs(s, chunk, 7), m2.chunk_costs(s, chunk, 7)
    assert torch.equal(a, b)
    assert (a > 0).all()
    assert m2.hidden == 16 and m2.feature_dim is None
    assert resolve_workload(str(path)).chunk_costs(s, chunk, 7).equal(a)


def test_mlp_load_rejects_bad_files(tmp_path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a torch file")
    with pytest.raises(SignalFormatError):
        MLPWorkload.load(str(bad))
    other = tmp_path / "other.pt"
    torch.save({"format": "something-else"}, str(other))
    with pytest.raises(SignalFormatError, match="not a pyg_dynscale"):
        MLPWorkload.load(str(other))
    m = MLPWorkload.train(synthetic_timings(40), epochs=2)
    p = tmp_path / "v.pt"
    m.save(str(p))
    blob = torch.load(str(p), weights_only=True)
    blob["version"] = 999
    torch.save(blob, str(p))
    with pytest.raises(SignalFormatError, match="version"):
        MLPWorkload.load(str(p))


def test_profile_tiny_runs_real_layers() -> None:
    ts = profile(4, max_vertices=64, min_vertices=16, repeats=1, seed=0, device="cpu")
    assert len(ts) == 8
    assert ts.kind.tolist() == [0] * 4 + [1] * 4
    assert bool((ts.seconds > 0).all())
    assert bool((ts.vertices >= 1).all())
    # time-encoder rows: temporal edges = vertex-time nodes - segments < vertices
    t = ts.subset("time")
    assert bool((t.edges < t.vertices).all())
    m = MLPWorkload.train(ts, epochs=3, holdout=0.25)
    assert math.isfinite(m.meta["structure_heldout_mape"])


def test_linear_fit_recovers_coefficients() -> None:
    V = torch.tensor([10.0, 100.0, 50.0, 400.0, 7.0])
    E = torch.tensor([30.0, 80.0, 500.0, 100.0, 2.0])
    t = 2.0 * V + 0.5 * E
    lin = LinearWorkload.fit(V, E, t)
    assert lin.alpha == pytest.approx(2.0) and lin.beta == pytest.approx(0.5)
    with pytest.raises(WorkloadModelError):
        LinearWorkload.fit(V[:1], E[:1], t[:1])


def test_chunk_statistics_and_linear_costs_add_up() -> None:
    s = small_signal(1)
    N = s.num_vertex_time_nodes
    chunk = torch.arange(N) % 5
    st = chunk_statistics(s, chunk, 5)
    sg = s.supergraph()
    assert st[:, 0].sum() == N
    assert st[:, 1].sum() == sg.num_spatial_edges
    te = sg.temporal_edge_index
    assert st[:, 2].sum() == int((chunk[te[0]] == chunk[te[1]]).sum())
    lin = LinearWorkload(2.0, 3.0)
    assert torch.allclose(lin.chunk_costs(s, chunk, 5), 2.0 * st[:, 0] + 3.0 * st[:, 1])
    assert torch.equal(resolve_node_cost(s, lin), lin.node_costs(s))  # the balancers' view: node_costs


def test_mlp_workload_drives_pgc() -> None:
    s = small_signal(2)
    m = MLPWorkload.train(synthetic_timings(100), epochs=5)
    p = partition_pgc(s, 3, (1.0, 1.0), workload=m)
    assert p.meta["workload"] == "MLPWorkload"
    assert torch.bincount(p.owner, minlength=3).min() > 0
    lin = m.linearized(s)
    assert lin.alpha >= 0 and lin.beta >= 0 and lin.alpha + lin.beta > 0


def test_mape() -> None:
    assert mape(torch.tensor([1.1, 1.8]), torch.tensor([1.0, 2.0])) == pytest.approx(0.1)


def test_errors() -> None:
    empty = synthetic_timings(10).subset(torch.zeros(10, dtype=torch.bool))
    with pytest.raises(WorkloadModelError, match="empty"):
        train_predictor(empty)
    bad = synthetic_timings(10)
    bad.seconds[0] = 0.0
    with pytest.raises(WorkloadModelError, match="positive"):
        train_predictor(bad)
    with pytest.raises(WorkloadModelError):
        resolve_workload(3.5)
    s = small_signal()
    with pytest.raises(WorkloadModelError, match="entries"):
        chunk_statistics(s, torch.zeros(3, dtype=torch.long))


def test_one_workload_interface_through_one_resolver() -> None:
    """``node_costs`` is the one method: a user's WorkloadModel subclass that
    overrides it (docs/pgc.md) drives the PSS balancer, the metrics' view and
    PGC alike; the forms docs/partitioning.md promises the balancers (a ``[N]``
    tensor, an object with ``node_cost``) resolve to the same costs."""
    s = small_signal(1)
    N = s.num_vertex_time_nodes
    heavy = torch.ones(N, dtype=torch.float64)
    heavy[: N // 4] = 50.0

    class Heavy(LinearWorkload):
        def node_costs(self, signal):  # type: ignore[override]
            return heavy

    class Legacy:
        def node_cost(self, signal):
            return heavy

    assert not hasattr(Heavy(), "node_cost")  # no alias left to override by mistake
    for w in (Heavy(), Legacy(), heavy, heavy.numpy()):
        assert torch.equal(resolve_workload(w).node_costs(s), heavy)
        assert torch.equal(resolve_node_cost(s, w), heavy)
    by_model = partition_pss(s, 3, balanced=True, workload=Heavy())
    assert torch.equal(by_model.owner, partition_pss(s, 3, balanced=True, workload=heavy).owner)
    assert not torch.equal(by_model.owner, partition_pss(s, 3, balanced=True).owner)  # the override is what ran
    # PGC reads the same method through the same resolver: its chunk costs are the override's sums
    chunk = torch.arange(N) % 4
    assert torch.equal(resolve_workload(Heavy()).chunk_costs(s, chunk, 4),
                       torch.zeros(4, dtype=torch.float64).index_add_(0, chunk, heavy))
    # None is the default cost, without loading the algorithms, and equal to LinearWorkload(1, 1)'s
    assert torch.equal(resolve_node_cost(s, None), resolve_workload(None).node_costs(s))
    assert torch.equal(resolve_node_cost(s, "vertices"), torch.ones(N, dtype=torch.float64))
