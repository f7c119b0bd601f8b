"""PyGT's DCRNN pairs degree normalizers with edges by position, so split
across ranks it is exact only on edges sorted by (target, source): unsorted
edges are refused on several ranks (with the fix), and the refusal is not
decoration -- without it the split run would differ from one process."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.partition import Partition
from tests.helpers import blackbox_cases as bcases

pytestmark = pytest.mark.skipif(not bcases.HAVE_PYGT, reason="needs the pygt extra")


def _ring_signal(shuffle: bool):  # noqa: ANN001
    """Rings of 60 vertices (symmetric, unique edges), large enough that a
    rank's local subgraph is a small part of a snapshot; edges sorted by
    (target, source), or in a random order."""
    from pyg_dynscale import DynamicGraphSignal

    g = torch.Generator().manual_seed(0)
    V, T = 60, 3
    eis, ws, xs, ys = [], [], [], []
    for _ in range(T):
        a = torch.arange(V)
        src = torch.cat([a, (a + 1) % V])
        dst = torch.cat([(a + 1) % V, a])
        w = torch.rand(V, generator=g, dtype=torch.float64) + 0.5
        w = torch.cat([w, w])
        order = torch.randperm(src.numel(), generator=g) if shuffle else torch.argsort(dst * V + src)
        eis.append(torch.stack([src[order], dst[order]]))
        ws.append(w[order])
        xs.append(torch.randn(V, bcases.F, generator=g, dtype=torch.float64))
        ys.append(torch.randn(V, generator=g, dtype=torch.float64))
    return DynamicGraphSignal(eis, ws, xs, ys, num_vertices=V, dtype=torch.float64)


def _worker(rank: int, world_size: int, check: bool, shuffle: bool = True) -> object:
    import pyg_dynscale.distributed.snapshot_engine as se

    sig = _ring_signal(shuffle)
    m, head = bcases.cell("DCRNN")
    part = Partition("contiguous", world_size, sig.node_id * world_size // sig.num_vertices)
    if not check:  # the refusal removed: what would the split run compute?
        se.check_dcrnn_edge_order = lambda signal: None
    try:
        tr = DistributedTrainer(m, sig, part, head=head, loss="mse", path="blackbox",
                                optimizer=lambda p: torch.optim.SGD(p, lr=0.05))
    except ModelInputError as exc:
        return str(exc)
    return tr.predict()


def test_unsorted_dcrnn_edges_are_refused_on_several_ranks():
    for msg in spawn(_worker, 2, True, True, timeout=120):
        assert isinstance(msg, str) and "sort_edges" in msg and "signal.edge_index" in msg


def test_without_the_refusal_the_split_run_would_be_wrong():
    from pyg_dynscale.runtime import FusedTrainer

    def one_process(shuffle: bool):  # noqa: ANN202
        m, head = bcases.cell("DCRNN")
        return FusedTrainer(m, _ring_signal(shuffle), head=head, loss="mse", path="blackbox").predict()

    sorted_split = spawn(_worker, 2, True, False, timeout=120)[0]  # sorted edges: accepted, and exact
    assert float((sorted_split - one_process(False)).abs().max()) < 1e-10
    unsorted_split = spawn(_worker, 2, False, True, timeout=120)[0]
    assert float((unsorted_split - one_process(True)).abs().max()) > 1e-6
