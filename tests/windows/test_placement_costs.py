"""placement_bytes: blocks / replicated / vertex-partition bytes of one epoch of windowed training, against a
brute-force count over the plan's rows and the windows."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.partition import CommunicationPlan, DependencyPattern
from pyg_dynscale.partition.schemes.dispatch import partition
from pyg_dynscale.windows import WindowView
from pyg_dynscale.windows.placement_costs import placement_bytes
from tests.helpers.windows import covid


def _brute(sig, scheme, world, pattern, starts, lags):
    """Forward + backward bytes: every non-static row, once per training window that reads its snapshot(s)."""
    sg = sig.supergraph()
    nxt = {int(u): int(sg.time[v]) for u, v in zip(*sg.temporal_edge_index)}
    plan = CommunicationPlan.build(sig, partition(sig, scheme, world, pattern), pattern)
    total = 0
    for e in plan:
        if e.static:
            continue
        for g in e.gid.tolist():
            a = int(sg.time[g])
            b = nxt.get(g, a) if e.kind == "temporal" else a
            total += 2 * sum(1 for s in starts if s <= a and b <= s + lags - 1) * e.width * e.bytes_per_element
    return total


@pytest.mark.parametrize("world,lags,stride", [(2, 3, 2), (3, 4, 1)])
def test_placement_bytes(world, lags, stride):
    sig = covid(T=12)
    pattern = DependencyPattern.preset("tgcn", 4, 3, gcn_layers=2)
    rows = {r["placement"]: r for r in placement_bytes(sig, lags, 2 * world, world, 1000, pattern, stride=stride,
                                                       schemes=("pss", "pts"), bytes_per_element=8)}
    view = WindowView(sig, lags, stride=stride)
    train = view.split("train")
    starts = view.starts[train].tolist()
    steps = -(-max(int(b.numel()) for b in torch.tensor_split(train, world)) // 2)
    for r in rows.values():
        assert r["steps"] == steps and r["gradient_bytes"] == steps * 2 * (world - 1) * 1000
        assert r["total_bytes"] == r["feature_bytes"] + r["gradient_bytes"]
    assert rows["blocks"]["feature_bytes"] == rows["replicated"]["feature_bytes"] == 0
    assert rows["replicated"]["held_feature_bytes"] == sig.x.numel() * 8
    assert rows["blocks"]["held_feature_bytes"] < rows["replicated"]["held_feature_bytes"]
    for scheme in ("pss", "pts"):
        assert rows[scheme]["feature_bytes"] == _brute(sig, scheme, world, pattern, starts, view.lags) > 0
