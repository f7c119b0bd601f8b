"""``data/stats.py``: the empirical CDFs of :class:`SignalStatistics` (README: "statistics"), against a hand-computed
case and, on real stand-ins, against a count made from the raw vertex ids (not the supergraph's sequences)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.data import SignalStatistics, empirical_cdf
from tests.helpers.datasets import stand_in_file


def _signal(node_ids: list[list[int]]) -> DynamicGraphSignal:
    return DynamicGraphSignal([np.zeros((2, 0), dtype=np.int64)] * len(node_ids), None, None, None,
                              node_ids=[np.array(ids) for ids in node_ids])


def test_sequence_length_cdf_hand_computed():
    # vertex 0 in 4 snapshots, 1 in 1, 3 in 2, 4 in 1, 5 in 2; vertex 2 in none (no sequence, not a length 0)
    st = _signal([[0, 1], [0, 3], [0, 3, 4, 5], [0, 5]]).statistics()
    assert st.sequence_lengths.tolist() == [4, 1, 2, 1, 2]
    lengths, cdf = st.sequence_length_cdf()
    assert lengths.dtype == cdf.dtype == torch.float64
    # P(L <= 1) = 2/5 (vertices 1, 4), P(L <= 2) = 4/5 (+ 3, 5), P(L <= 4) = 1; no entry for the absent length 3
    assert lengths.tolist() == [1.0, 2.0, 4.0]
    assert cdf.tolist() == [2 / 5, 4 / 5, 1.0]


def test_sequence_length_cdf_is_not_the_edges_cdf():
    """Two snapshots of different edge counts, every vertex in both: the lengths' CDF is one step at T = 2."""
    edges = [np.array([[0], [1]]), np.array([[0, 1, 2], [1, 2, 0]])]
    st = DynamicGraphSignal(edges, None, None, None, node_ids=[np.array([0, 1, 2])] * 2).statistics()
    assert [t.tolist() for t in st.sequence_length_cdf()] == [[2.0], [1.0]]
    assert [t.tolist() for t in st.edges_cdf()] == [[1.0, 3.0], [0.5, 1.0]]


def test_empirical_cdf_edge_cases():
    values, cdf = empirical_cdf(torch.empty(0, dtype=torch.long))
    assert values.numel() == cdf.numel() == 0 and values.dtype == cdf.dtype == torch.float64
    values, cdf = empirical_cdf(torch.tensor([[3, 3], [3, 3]]))  # one value, any shape
    assert values.tolist() == [3.0] and cdf.tolist() == [1.0]
    empty = SignalStatistics(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                             torch.zeros(0, dtype=torch.long), 0)
    assert [t.numel() for t in empty.sequence_length_cdf()] == [0, 0]


@pytest.mark.parametrize("rel, window", [("snap/CollegeMsg.txt", "7d"), ("pygt/chickenpox.json", None)])
def test_sequence_length_cdf_on_a_stand_in(rel, window):
    """F(v) == the fraction of vertices seen in at most v snapshots, counted from ``node_id`` alone; the CDF's mean
    is the vertex-time nodes per sequence. CollegeMsg's weekly snapshots have vertices of many lengths, chickenpox
    has every vertex in every snapshot (one step at T)."""
    from pyg_dynscale.data.loaders import load

    signal = load(str(stand_in_file(rel)), window=window) if window else load(str(stand_in_file(rel)))
    appearances = torch.bincount(signal.node_id)
    appearances = appearances[appearances > 0]
    lengths, cdf = signal.statistics().sequence_length_cdf()

    assert torch.equal(lengths, torch.unique(appearances).to(torch.float64))
    S = appearances.numel()
    assert cdf.tolist() == [int((appearances <= v).sum()) / S for v in lengths.tolist()]  # exact: k / S each
    assert cdf[-1].item() == 1.0 and bool((cdf[1:] > cdf[:-1]).all())
    assert 1.0 <= lengths[0].item() and lengths[-1].item() <= signal.num_snapshots
    pmf = torch.diff(cdf, prepend=cdf.new_zeros(1))
    assert abs(float((lengths * pmf).sum()) - signal.num_vertex_time_nodes / S) < 1e-12
    if rel == "snap/CollegeMsg.txt":
        assert lengths.numel() >= 3  # a non-uniform stand-in, or the first check would be weak
    else:
        assert lengths.tolist() == [float(signal.num_snapshots)] and cdf.tolist() == [1.0]
