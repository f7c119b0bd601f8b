"""partition_for_model: the partition for the path the model takes, with
``auto`` judging candidates by that path's real costs."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.data.loaders import load_england_covid
from pyg_dynscale.nn import TGCN
from pyg_dynscale.runtime.paths import partition_for_model
from tests.helpers.cells import UserCell


def test_decomposed_model_uses_its_pattern():
    sig = load_england_covid()
    p = partition_for_model(TGCN(sig.num_node_features, 8, num_layers=2), sig, 2)
    assert p.meta["auto"]["path"] == "decomposed" and len(p.meta["auto"]["candidates"]) == 5


def test_black_box_module_is_costed_from_its_probe():
    sig = load_england_covid()
    torch.manual_seed(0)
    cell = UserCell(sig.num_node_features, 4)  # aggregates its state over one hop: a halo, per-snapshot exchanges
    p = partition_for_model(cell, sig, 2, depth=1)
    a = p.meta["auto"]
    assert a["path"] == "blackbox" and "pss-ts" not in {c["scheme"] for c in a["candidates"]}
    pts = next(c for c in a["candidates"] if c["scheme"] == "pts")
    assert pts["steps"] == sig.num_snapshots and pts["collectives"] > 1
    q = partition_for_model(cell, sig, 2, "pgc", depth=1)  # PGC weighs edges with the module's equivalent pattern
    assert q.scheme == "pgc" and "auto" not in q.meta


def test_unknown_scheme_is_refused():
    from pyg_dynscale.errors import PartitionError

    with pytest.raises(PartitionError, match="scheme"):
        partition_for_model(TGCN(8, 4), load_england_covid(), 2, "round-robin")
