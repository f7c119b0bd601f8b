"""pyg_dynscale.nn.graph_norm: PyG's ChebConv and GCN normalizations from host-known self-loop positions are PyG's
own results bit for bit (every normalization and option, weights or none, self-loops or none, isolated nodes,
float32 and float64), and they read nothing back to the host where PyG's read several values."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.nn.graph_norm import cheb_norm, gcn_norm, self_loops
from tests.helpers.host_syncs import HostSyncs


def _graph(loops: bool, weighted: bool, dtype: torch.dtype, n: int = 9, e: int = 30, seed: int = 0) -> tuple:
    """A random directed multigraph on ``n`` nodes (the last one isolated), with self-loops (one node has two)."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n - 1, (2, e), generator=g)
    ei[1] = torch.where(ei[0] == ei[1], (ei[1] + 1) % (n - 1), ei[1])  # no loop by chance
    if loops:
        extra = torch.tensor([[2, 5, 2, 0], [2, 5, 2, 0]])
        ei = torch.cat([ei[:, :7], extra[:, :2], ei[:, 7:], extra[:, 2:]], 1)
    w = torch.rand(ei.shape[1], generator=g, dtype=dtype) + 0.25 if weighted else None
    return ei, w, n


def _same(a: tuple, b: tuple) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x, y)


@pytest.mark.parametrize("normalization", ["sym", "rw", None])
@pytest.mark.parametrize("loops", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cheb_norm_is_chebconvs_bit_for_bit(normalization, loops, weighted, dtype):
    from torch_geometric.nn import ChebConv

    conv = ChebConv(3, 4, K=2, normalization=normalization)
    ei, w, n = _graph(loops, weighted, dtype)
    ref = conv.__norm__(ei, n, w, normalization, None, dtype=dtype, batch=None)
    _same(cheb_norm(conv, ei, n, w, dtype, self_loops(ei)), ref)
    _same(cheb_norm(conv, ei, n, w, dtype), ref)  # loops unknown: PyG's own


@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("add_self_loops", [True, False])
@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
@pytest.mark.parametrize("loops", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gcn_norm_is_pygs_bit_for_bit(improved, add_self_loops, flow, loops, weighted, dtype):
    from torch_geometric.nn import GCNConv
    from torch_geometric.nn.conv.gcn_conv import gcn_norm as pyg_gcn_norm

    conv = GCNConv(3, 4, improved=improved, add_self_loops=add_self_loops, flow=flow)
    ei, w, n = _graph(loops, weighted, dtype, seed=1)
    ref = pyg_gcn_norm(ei, w, n, improved, add_self_loops, flow, dtype)
    _same(gcn_norm(conv, ei, n, w, dtype, self_loops(ei)), ref)
    _same(gcn_norm(conv, ei, n, w, dtype), ref)


def test_known_loops_read_nothing_back_where_pyg_reads_values():
    """With the graph on the "device" (marked), PyG's normalizations read values back (boolean masks); given the
    self-loop positions (host data), ours read none."""
    from torch_geometric.nn import ChebConv, GCNConv

    cheb, gcn = ChebConv(3, 4, K=2), GCNConv(3, 4)
    ei, w, n = _graph(True, True, torch.float64)
    loops = self_loops(ei)  # computed from a host copy before the step
    counts = {}
    for name, fn in (("cheb pyg", lambda: cheb_norm(cheb, ei, n, w, torch.float64)),
                     ("cheb known", lambda: cheb_norm(cheb, ei, n, w, torch.float64, loops)),
                     ("gcn pyg", lambda: gcn_norm(gcn, ei, n, w, torch.float64)),
                     ("gcn known", lambda: gcn_norm(gcn, ei, n, w, torch.float64, loops))):
        with HostSyncs() as syncs:
            syncs.mark(ei, w)
            fn()
        counts[name] = syncs.count
    assert counts["cheb known"] == 0 and counts["gcn known"] == 0, counts
    assert counts["cheb pyg"] >= 4 and counts["gcn pyg"] >= 3, counts  # the counter sees PyG's masks
