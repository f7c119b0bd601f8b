"""Tests of the synthetic dynamic-graph generator (DGC §7.3.1)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyg_dynscale.data.synthetic import apportion, generate_dynamic_graph
from pyg_dynscale.errors import SignalValidationError


def _local_to_gid(signal) -> torch.Tensor:
    """Edge endpoints as global vertex-time node ids ``[2, E]``."""
    offset = torch.repeat_interleave(signal.node_ptr[:-1], signal.edges_per_snapshot)
    return signal.edge_index + offset


# ------------------------------------------------------------- exact sizes
@pytest.mark.parametrize(
    "V,E,T,p,seq_std,edge_std",
    [(500, 3000, 10, 1.0, 0.0, 0.0), (777, 12345, 13, 0.37, 0.4, 0.8), (50, 999, 1, 1.0, 0.0, 0.5), (300, 0, 7, 0.5, 0.2, 0.3)],
)
def test_exact_totals(V, E, T, p, seq_std, edge_std):
    s = generate_dynamic_graph(V, E, T, presence=p, sequence_length_std=seq_std, edge_std=edge_std, seed=3)
    assert s.num_snapshots == T
    assert s.num_edges == E and int(s.edges_per_snapshot.sum()) == E
    assert s.num_vertex_time_nodes == round(V * T * p)
    assert s.num_vertices == V
    assert torch.unique(s.node_id).numel() == V  # every vertex appears at least once
    assert s.x.shape == (s.num_vertex_time_nodes, 8) and s.x.dtype == torch.float32
    s.validate()


def test_valid_signal_local_rows_unique_ids_no_self_loops():
    s = generate_dynamic_graph(400, 20000, 12, presence=0.4, sequence_length_std=0.5, edge_std=0.5, power_law_exponent=1.8, seed=1)
    counts = s.nodes_per_snapshot
    limit = torch.repeat_interleave(counts, s.edges_per_snapshot)
    assert bool((s.edge_index >= 0).all()) and bool((s.edge_index < limit).all())
    assert bool((s.edge_index[0] != s.edge_index[1]).all())
    for t in range(s.num_snapshots):  # per snapshot: sorted unique ids (loop over T only)
        ids = s.node_id[s.node_ptr[t]:s.node_ptr[t + 1]]
        assert bool((ids[1:] > ids[:-1]).all())
    s.validate()


def test_self_loops_allowed_when_asked():
    s = generate_dynamic_graph(30, 20000, 3, self_loops=True, seed=0)
    assert bool((s.edge_index[0] == s.edge_index[1]).any())
    s2 = generate_dynamic_graph(30, 20000, 3, self_loops=False, seed=0)
    assert not bool((s2.edge_index[0] == s2.edge_index[1]).any())


def test_degree_target_matches_edges():
    s = generate_dynamic_graph(300, 5000, 6, presence=0.5, seed=2, feature_dtype=torch.float64)
    gid = _local_to_gid(s)
    deg = torch.bincount(gid.flatten(), minlength=s.num_vertex_time_nodes).to(torch.float64)
    assert s.y.dtype == torch.float64 and s.x.dtype == torch.float64
    assert torch.equal(s.y, deg)


def test_optional_outputs():
    s = generate_dynamic_graph(100, 500, 4, num_features=0, target="none", edge_weights=True, seed=0)
    assert s.x is None and s.y is None
    assert s.edge_weight.shape == (500,) and bool((s.edge_weight > 0).all()) and bool((s.edge_weight <= 1).all())
    assert generate_dynamic_graph(100, 500, 4, seed=0).edge_weight is None


def test_empty_graphs():
    s = generate_dynamic_graph(0, 0, 5)
    assert s.num_snapshots == 5 and s.num_vertex_time_nodes == 0 and s.num_edges == 0
    s = generate_dynamic_graph(10, 0, 2, presence=0.5)
    assert s.num_edges == 0 and s.num_vertex_time_nodes == 10


# ------------------------------------------------------------- determinism
def test_same_seed_identical_different_seed_different():
    kw = dict(presence=0.6, sequence_length_std=0.3, edge_std=0.4, edge_weights=True)
    a = generate_dynamic_graph(300, 4000, 8, seed=11, **kw)
    b = generate_dynamic_graph(300, 4000, 8, seed=11, **kw)
    c = generate_dynamic_graph(300, 4000, 8, seed=12, **kw)
    assert a.equals(b) and a.fingerprint() == b.fingerprint()
    assert not a.equals(c)
    assert not torch.equal(a.edges_per_snapshot, c.edges_per_snapshot)
    assert not torch.equal(a.node_id, c.node_id)


def test_deterministic_across_thread_counts():
    threads = torch.get_num_threads()
    kw = dict(presence=0.5, sequence_length_std=0.3, edge_std=0.3, seed=3)
    try:
        torch.set_num_threads(1)
        a = generate_dynamic_graph(40_000, 200_000, 5, **kw)
        torch.set_num_threads(max(2, threads))
        b = generate_dynamic_graph(40_000, 200_000, 5, **kw)
    finally:
        torch.set_num_threads(threads)
    assert a.equals(b)


def test_integer_like_sizes_accepted():
    a = generate_dynamic_graph(np.int64(50), torch.tensor(300), 4, seed=np.int32(2))
    b = generate_dynamic_graph(50, 300, 4, seed=2)
    assert a.equals(b)


# ---------------------------------------------------- spatial non-uniformity
def test_edge_std_zero_is_uniform():
    s = generate_dynamic_graph(200, 10007, 50, edge_std=0.0, seed=0)
    m = s.edges_per_snapshot
    assert int(m.max()) - int(m.min()) <= 1
    assert s.statistics().cv_edges < 0.01


def test_edge_std_controls_cv_edges():
    cvs = [generate_dynamic_graph(300, 200_000, 400, edge_std=sd, seed=5).statistics().cv_edges for sd in (0.1, 0.3, 0.6)]
    assert cvs[0] < cvs[1] < cvs[2]
    # below ~0.3 the clip at 0 is rare, so the CV is the relative std
    assert cvs[0] == pytest.approx(0.1, abs=0.02)
    assert cvs[1] == pytest.approx(0.3, abs=0.05)


# --------------------------------------------------- temporal non-uniformity
def test_sequence_lengths_equal_without_std():
    s = generate_dynamic_graph(500, 1000, 20, presence=0.5, seed=0)
    st = s.statistics()
    assert st.sequence_lengths.numel() == 500
    assert bool((st.sequence_lengths == 10).all())
    assert st.cv_sequence_lengths == 0.0
    # full presence: every vertex in every snapshot
    s = generate_dynamic_graph(100, 1000, 7, seed=0)
    assert bool((s.statistics().sequence_lengths == 7).all())


def test_sequence_length_std_controls_cv():
    stats = [
        generate_dynamic_graph(4000, 1000, 40, presence=0.5, sequence_length_std=sd, seed=4).statistics()
        for sd in (0.1, 0.25, 0.6)
    ]
    cvs = [st.cv_sequence_lengths for st in stats]
    assert cvs[0] < cvs[1] < cvs[2]
    assert cvs[0] == pytest.approx(0.1, abs=0.02)
    assert cvs[1] == pytest.approx(0.25, abs=0.03)
    for st in stats:  # mean length stays presence * T; lengths stay in [1, T]
        assert float(st.sequence_lengths.double().mean()) == pytest.approx(20.0, abs=1e-9)
        assert int(st.sequence_lengths.min()) >= 1 and int(st.sequence_lengths.max()) <= 40
        # cyclic placement keeps the vertices per snapshot near-uniform
        assert st.cv_nodes < 0.05


# ------------------------------------------------------------- power law
def _tail_slope(degrees: torch.Tensor, lo: int, hi: int) -> float:
    """Slope of log(degree) against log(rank) over ranks lo..hi (Zipf plot)."""
    d = torch.sort(degrees.double(), descending=True).values[lo - 1:hi]
    r = torch.arange(lo, hi + 1, dtype=torch.float64)
    return float(np.polyfit(np.log(r.numpy()), np.log(d.numpy()), 1)[0])


@pytest.mark.parametrize("gamma", [2.5, 3.5])
def test_power_law_degrees(gamma):
    V = 4000
    s = generate_dynamic_graph(V, 400_000, 4, power_law_exponent=gamma, seed=0)
    deg = torch.bincount(s.node_id, weights=s.y.double(), minlength=V)  # per-vertex degree over time
    assert float(deg.max()) > 10 * float(deg.mean())  # heavy tail
    # expected degree of rank r is proportional to r^(-1/(gamma-1))
    assert _tail_slope(deg, 5, 1000) == pytest.approx(-1.0 / (gamma - 1.0), abs=0.02)


def test_uniform_endpoints_with_infinite_exponent():
    s = generate_dynamic_graph(1000, 200_000, 2, power_law_exponent=math.inf, seed=0)
    deg = torch.bincount(s.node_id, weights=s.y.double(), minlength=1000)
    assert float(deg.max()) < 1.5 * float(deg.mean())


def test_endpoint_frequencies_match_weights_exactly():
    """Sources follow w; targets follow w with the source excluded (strong hub,
    so collisions are frequent and the exclusion step matters)."""
    V, E, gamma = 12, 300_000, 1.6
    s = generate_dynamic_graph(V, E, 1, power_law_exponent=gamma, seed=7)
    w = torch.arange(1, V + 1, dtype=torch.float64).pow(-1.0 / (gamma - 1.0))
    p = w / w.sum()  # sorted descending by rank
    src = torch.bincount(s.edge_index[0], minlength=V).double()
    dst = torch.bincount(s.edge_index[1], minlength=V).double()
    order = torch.argsort(src, descending=True)  # hub ranks from the sources
    q = p * ((p / (1 - p)).sum() - p / (1 - p))  # P(dst=j) = sum_{i != j} p_i p_j / (1 - p_i)
    for observed, expected in ((src[order], p), (dst[order], q)):
        z = (observed - E * expected) / torch.sqrt(E * expected * (1 - expected))
        assert float(z.abs().max()) < 5.0
    # without the exclusion the hub's target count would be far higher
    assert float(dst[order][0]) < 0.8 * E * float(p[0])


# ------------------------------------------------------------- apportion
def test_apportion_exact_bounded_and_proportional():
    g = torch.Generator().manual_seed(0)
    w = torch.rand(1000, generator=g, dtype=torch.float64) * 10
    w[::7] = 0.0
    lo = torch.zeros(1000, dtype=torch.float64)
    hi = torch.full((1000,), 9.0, dtype=torch.float64)
    n = apportion(w, 4321, lo, hi, "x")
    assert int(n.sum()) == 4321 and bool((n >= 0).all()) and bool((n <= 9).all())
    assert bool((n[::7] == 0).all())
    n = apportion(w + 1, 100_000, lo, torch.full_like(lo, math.inf), "x")
    assert int(n.sum()) == 100_000
    ideal = (w + 1) / (w + 1).sum() * 100_000
    assert float((n - ideal).abs().max()) < 1.0  # largest remainder: off by < 1 each
    with pytest.raises(SignalValidationError, match="'x'"):
        apportion(w, 10_000, lo, hi, "x")


# ------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "args,kwargs,field",
    [
        ((-1, 10, 5), {}, "num_vertices"),
        ((10, -1, 5), {}, "num_edges"),
        ((10, 10, 0), {}, "num_snapshots"),
        ((10.5, 10, 5), {}, "num_vertices"),
        ((True, 10, 5), {}, "num_vertices"),
        ((torch.tensor(10.0), 10, 5), {}, "num_vertices"),
        ((0, 10, 5), {}, "num_edges"),
        ((1, 10, 5), {}, "num_edges"),  # one vertex and no self loops
        ((10, 10, 5), {"edge_std": -0.1}, "edge_std"),
        ((10, 10, 5), {"edge_std": float("nan")}, "edge_std"),
        ((10, 10, 5), {"sequence_length_std": -1.0, "presence": 0.5}, "sequence_length_std"),
        ((10, 10, 5), {"sequence_length_std": 0.3}, "sequence_length_std"),  # presence=1: nothing to vary
        ((10, 10, 5), {"presence": 0.0}, "presence"),
        ((10, 10, 5), {"presence": 1.5}, "presence"),
        ((10, 10, 5), {"presence": 0.1}, "presence"),  # below 1/T
        ((10, 10, 5), {"power_law_exponent": 1.0}, "power_law_exponent"),
        ((10, 10, 5), {"num_features": -2}, "num_features"),
        ((10, 10, 5), {"feature_dtype": torch.int64}, "feature_dtype"),
        ((10, 10, 5), {"target": "label"}, "target"),
        ((10, 10, 5), {"seed": -1}, "seed"),
        ((3, 10, 100), {"presence": 0.01}, "num_edges"),  # every snapshot has < 2 vertices (seed 0)
    ],
)
def test_bad_parameters_name_the_field(args, kwargs, field):
    with pytest.raises(SignalValidationError) as info:
        generate_dynamic_graph(*args, **kwargs)
    assert info.value.field == field


# ------------------------------------------------------------- benchmark
def test_benchmark_quick_smoke():
    """The benchmark runs end to end in --quick mode and reports what it promises."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_generator.py"
    out = subprocess.run([sys.executable, str(script), "--quick", "--json"], capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(out.stdout)
    assert result["stats"]["vertex_time_nodes"] == 200_000 and result["stats"]["edges"] == 400_000
    assert result["seconds"] > 0 and result["peak_rss_gib"] > 0
    assert result["comparison"]["numpy_loop_s"] > 0 and result["comparison"]["networkx_s"] > 0
