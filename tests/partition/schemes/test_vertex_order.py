"""Cuthill-McKee vertex order and PTS with locality (small halos on the
black-box path whatever the vertex ids)."""
from __future__ import annotations

import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.partition import partition
from pyg_dynscale.partition.schemes.vertex_order import cuthill_mckee_order, union_graph
from pyg_dynscale.partition.halo_plan import HaloDepth, StatePlan


def _undirected(pairs: torch.Tensor) -> torch.Tensor:
    return torch.cat([pairs, pairs.flip(0)], 1)


def test_order_is_a_permutation_that_follows_a_shuffled_path():
    n = 30
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    path = torch.stack([perm[:-1], perm[1:]])  # vertex perm[i] -- perm[i+1]
    order = cuthill_mckee_order(_undirected(path), n)
    assert sorted(order.tolist()) == list(range(n))
    pos = torch.empty(n, dtype=torch.long)
    pos[order] = torch.arange(n)
    assert int((pos[path[0]] - pos[path[1]]).abs().max()) == 1  # bandwidth 1: neighbours are adjacent


def test_components_are_contiguous_and_isolated_vertices_kept():
    # two triangles {0, 5, 9} and {2, 4, 7}, the rest isolated
    tri = torch.tensor([[0, 5, 9, 2, 4, 7], [5, 9, 0, 4, 7, 2]])
    order = cuthill_mckee_order(_undirected(tri), 10).tolist()
    assert sorted(order) == list(range(10))
    a = [order.index(v) for v in (0, 5, 9)]
    b = [order.index(v) for v in (2, 4, 7)]
    assert max(a) - min(a) == 2 and max(b) - min(b) == 2


def _grid_signal(rows: int, cols: int, T: int, shuffle: bool) -> DynamicGraphSignal:
    g = torch.Generator().manual_seed(0)
    V = rows * cols
    r, c = torch.arange(V) // cols, torch.arange(V) % cols
    right = (c < cols - 1).nonzero().flatten()
    down = (r < rows - 1).nonzero().flatten()
    und = torch.cat([torch.stack([right, right + 1]), torch.stack([down, down + cols])], 1)
    ids = torch.randperm(V, generator=g) if shuffle else torch.arange(V)
    eis = [_undirected(und[:, torch.rand(und.shape[1], generator=g) < 0.9]) for _ in range(T)]
    return DynamicGraphSignal(eis, None, [torch.randn(V, 2, generator=g) for _ in range(T)], None,
                              node_ids=[ids] * T, num_vertices=V)


def _local_per_owned(sig: DynamicGraphSignal, part, R: int) -> float:
    local = owned = 0
    for r in range(R):
        sizes = StatePlan(sig, part.owner, R, HaloDepth(2, (2,)), (8,), r).local_sizes().sum(0)
        local, owned = local + int(sizes[0]), owned + int(sizes[1])
    return local / owned


def test_pts_with_locality_keeps_sequences_whole_and_halos_small():
    sig = _grid_signal(30, 40, 3, shuffle=True)
    sg = sig.supergraph()
    for balanced in (False, True):
        plain = partition(sig, "pts", 4, balanced=balanced)
        local = partition(sig, "pts", 4, balanced=balanced, locality=True)
        assert local.meta["locality"] is True
        # every vertex's appearances on one rank: no temporal edge is cut
        te = sg.temporal_edge_index
        assert bool((local.owner[te[0]] == local.owner[te[1]]).all())
        loads = torch.bincount(local.owner, minlength=4).double()
        assert float(loads.max() / loads.min()) < 1.1
        assert _local_per_owned(sig, local, 4) < 1.6 < 3.0 < _local_per_owned(sig, plain, 4)


def test_union_graph_merges_snapshots_and_drops_self_loops():
    ei = torch.tensor([[0, 1, 2, 3], [1, 0, 2, 0]])
    vertex = torch.tensor([4, 5, 6, 4])  # gid 3 is vertex 4 again
    pairs = union_graph(ei, vertex, 7)
    assert sorted(map(tuple, pairs.t().tolist())) == [(4, 5), (5, 4)]
