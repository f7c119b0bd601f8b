"""Metrics, comparison table and plots."""
from __future__ import annotations

import math

import pytest
import torch

from tests.helpers.signals import make_dynamic_signal
from pyg_dynscale.partition import DependencyPattern, Partition, compare, evaluate, format_table, partition
from pyg_dynscale.partition.metrics import load_imbalance
from pyg_dynscale.partition.plots import owner_grid, plot_owner_heatmap, plot_traffic


@pytest.fixture
def sig():
    return make_dynamic_signal(seed=4, T=8, V=16)


def test_evaluate_counts(sig):
    pat = DependencyPattern.preset("mpnnlstm", 3, 4)
    p = partition(sig, "pts", 3)
    m = evaluate(sig, pat, p)
    sg = sig.supergraph()
    s, d = sg.spatial_edge_index
    cost = 1 + torch.bincount(d, minlength=sg.num_nodes)
    load = torch.zeros(3, dtype=torch.long).index_add_(0, p.owner, cost)
    assert m.lambda_ == pytest.approx(float(load.max()) / float(load.min()))
    assert m.cut_spatial_edges == int((p.owner[s] != p.owner[d]).sum()) and m.cut_temporal_edges == 0
    assert m.nodes_per_rank == torch.bincount(p.owner, minlength=3).tolist()
    assert sum(m.edges_per_rank) == sg.num_spatial_edges
    assert m.bytes_total == m.bytes_spatial + m.bytes_temporal + m.bytes_redistribution == 2 * m.bytes_forward
    w = torch.ones(sg.num_nodes)
    m2 = evaluate(sig, pat, p, workload=w)
    assert m2.lambda_ == pytest.approx(max(m.nodes_per_rank) / min(m.nodes_per_rank))
    assert load_imbalance(torch.tensor([0.0, 3.0])) == math.inf
    assert load_imbalance(torch.tensor([2.0, 3.0])) == 1.5


def test_compare_and_table(sig):
    pat = DependencyPattern.preset("tgcn", 3, 4, gcn_layers=2)  # spatial rows beyond the raw features
    parts = [partition(sig, s, 2) for s in ("pss", "pts", "pss-ts")]
    rows = compare(sig, pat, parts)
    assert [r["scheme"] for r in rows] == ["pss", "pts", "pss-ts"]
    assert min(r["bytes_vs_best"] for r in rows) == 1.0
    assert all(r["bytes_total"] > 0 for r in rows) and rows[1]["bytes_spatial"] > 0
    best = min(r["bytes_total"] for r in rows)
    assert [r["bytes_vs_best"] for r in rows] == [r["bytes_total"] / best for r in rows]
    text = format_table(rows)
    lines = text.splitlines()
    assert "bytes_total" in lines[0] and "lambda" in lines[0] and len(lines) == 2 + 3
    assert "pss-ts" in text


def test_heatmap_grid_and_png(sig, tmp_path):
    p = partition(sig, "pss", 2)
    grid, verts, cols = owner_grid(sig, p)
    sg = sig.supergraph()
    # every present cell shows its owner, absent cells -1
    for r, v in enumerate(verts.tolist()):
        for c, t in enumerate(cols.tolist()):
            g = int(sg.gid(torch.tensor([v]), torch.tensor([t]))[0])
            assert int(grid[r, c]) == (-1 if g < 0 else int(p.owner[g]))
    small, _, scols = owner_grid(sig, p, max_vertices=5, max_snapshots=3)
    assert small.shape == (5, 3) and scols.tolist() == [0, 4, 7]
    f = tmp_path / "h.png"
    plot_owner_heatmap(sig, partition(sig, "pss-ts", 3), str(f), time=True)
    assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pc = Partition("pgc", 2, p.owner, chunk=torch.arange(p.num_nodes) % 4)
    plot_owner_heatmap(sig, pc, str(tmp_path / "c.png"), by_chunk=True)
    assert (tmp_path / "c.png").stat().st_size > 0


def test_traffic_png(sig, tmp_path):
    rows = compare(sig, DependencyPattern.preset("dysat", 3, 4, num_blocks=2), [partition(sig, s, 2) for s in ("pss", "pts")])
    assert rows[1]["bytes_spatial"] > 0
    f = tmp_path / "t.png"
    plot_traffic(rows, str(f))
    assert f.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(Exception, match="nothing to plot"):
        plot_traffic([], str(f))
