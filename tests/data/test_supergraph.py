"""The supergraph view: DGC Eq. 1 ids, spatial and temporal edges, sequences."""
from __future__ import annotations

import numpy as np
import torch

from pyg_dynscale import DynamicGraphSignal
from tests.helpers.signals import make_dynamic_signal


def brute_force(signal: DynamicGraphSignal):
    gid = {}
    k = 0
    for t, d in enumerate(signal):
        for row, v in enumerate(d.n_id.tolist()):
            gid[(v, t)] = k
            k += 1
    spatial = []
    for t, d in enumerate(signal):
        for s, r in d.edge_index.t().tolist():
            spatial.append((gid[(d.n_id[s].item(), t)], gid[(d.n_id[r].item(), t)]))
    temporal = []
    last = {}
    for t, d in enumerate(signal):
        for v in d.n_id.tolist():
            if v in last:
                temporal.append((gid[(v, last[v])], gid[(v, t)]))
            last[v] = t
    return gid, spatial, temporal


def test_supergraph_matches_brute_force():
    for seed in range(5):
        s = make_dynamic_signal(seed=seed, T=6, V=15)
        sg = s.supergraph()
        gid, spatial, temporal = brute_force(s)
        assert sg.num_nodes == len(gid)
        assert [tuple(e) for e in sg.spatial_edge_index.t().tolist()] == spatial
        assert sorted(tuple(e) for e in sg.temporal_edge_index.t().tolist()) == sorted(temporal)
        verts = torch.tensor([v for v, _ in gid]); times = torch.tensor([t for _, t in gid])
        assert sg.gid(verts, times).tolist() == list(gid.values())
        assert torch.equal(sg.vertex[sg.gid(verts, times)], verts)
        assert torch.equal(sg.time[sg.gid(verts, times)], times)


def test_gid_is_offset_plus_local_index():
    s = DynamicGraphSignal([np.zeros((2, 0), dtype=np.int64)] * 3, None, None, None,
                           node_ids=[np.array([3, 1]), np.array([1]), np.array([0, 1, 3])])
    sg = s.supergraph()
    assert sg.node_ptr.tolist() == [0, 2, 3, 6]
    assert sg.gid(torch.tensor([3, 1, 1, 3, 2]), torch.tensor([0, 0, 1, 2, 1])).tolist() == [0, 1, 2, 5, -1]
    # vertex 3 skips snapshot 1: its temporal edge links t=0 to t=2
    assert sorted(map(tuple, sg.temporal_edge_index.t().tolist())) == [(0, 5), (1, 2), (2, 4)]
    assert sg.sequence_vertex.tolist() == [0, 1, 3]
    assert sg.sequence_lengths.tolist() == [1, 3, 2]
    assert sg.sequence_order[sg.sequence_ptr[1]:sg.sequence_ptr[2]].tolist() == [1, 2, 4]


def test_statistics_non_uniformity():
    edges = [np.zeros((2, m), dtype=np.int64) for m in (1, 1, 10)]
    s = DynamicGraphSignal(edges, None, None, None, node_ids=[np.array([0, 1]), np.array([0]), np.array([0, 2])])
    st = s.statistics()
    assert st.edges_per_snapshot.tolist() == [1, 1, 10]
    assert st.sequence_lengths.tolist() == [3, 1, 1]
    e = torch.tensor([1.0, 1.0, 10.0], dtype=torch.float64)
    assert abs(st.cv_edges - float(e.std(unbiased=False) / e.mean())) < 1e-12
    vals, cdf = st.edges_cdf()
    assert vals.tolist() == [1.0, 10.0] and cdf.tolist() == [2 / 3, 1.0]
    d = st.to_dict()
    assert d["snapshots"] == 3 and d["temporal_edges"] == 2 and d["spatial_edges"] == 12
    assert d["vertex_time_nodes"] == 5 and abs(d["edges_per_snapshot"]["cv"] - st.cv_edges) < 1e-12
