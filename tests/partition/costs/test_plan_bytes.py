"""plan_bytes (compiled row counts) == the built CommunicationPlan's total."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import CommunicationPlan, Partition, partition
from pyg_dynscale.partition.compiled.backend import use_backend
from pyg_dynscale.partition.costs.plan_bytes import MAX_PARTS, plan_bytes, plan_row_counts
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.partition_inputs import PRESETS

pytest.importorskip("numba")


def built(sig, owner, R, pattern) -> int:
    return int(CommunicationPlan.build(sig, Partition("x", R, owner), pattern).bytes_by_kind()["total"])


def test_presets_cover_the_new_pattern_kinds() -> None:
    """The preset list the tests below loop over holds PyGT's MPNN-LSTM
    (time kind "none"), DGC's multi-block MPNN-LSTM and a pattern whose
    block 0 has no spatial layer (nothing static)."""
    names = [p.name for p in PRESETS]
    assert "mpnnlstmpygt" in names and "late-spatial" in names
    assert any(b.time_kind == "none" for p in PRESETS for b in p.blocks)
    assert any(p.name == "mpnnlstm" and p.num_blocks == 2 for p in PRESETS)
    assert any(p.static_input_width == 0 for p in PRESETS)


@pytest.mark.parametrize("seed,R", [(0, 2), (1, 3), (2, 5), (3, 64)])
def test_counted_bytes_equal_the_plan(seed: int, R: int) -> None:
    sig = make_dynamic_signal(seed=seed, T=8, V=30)
    N = sig.num_vertex_time_nodes
    g = torch.Generator().manual_seed(seed)
    owners = [torch.randint(0, R, (N,), generator=g), torch.full((N,), R - 1),
              torch.randint(0, min(R, 2), (N,), generator=g)]
    if R <= N and R <= sig.num_snapshots:
        owners.append(partition(sig, "pss", R).owner)
    for owner in owners:
        for pattern in PRESETS:
            with use_backend("numba"):
                counted = plan_bytes(sig, owner, R, pattern)
            assert counted == built(sig, owner, R, pattern), (R, pattern.name)


@pytest.mark.parametrize("R", [2, 5])
def test_counted_bytes_leave_the_static_input_halo_out(R: int) -> None:
    """plan_bytes counts block 0's first spatial layer (raw features, loaded
    once) as nothing: the "exchange" total minus twice the load bytes."""
    sig = make_dynamic_signal(seed=9, T=8, V=30)
    owner = torch.randint(0, R, (sig.num_vertex_time_nodes,), generator=torch.Generator().manual_seed(R))
    loaded = 0
    for pattern in PRESETS:
        with use_backend("numba"):
            counted = plan_bytes(sig, owner, R, pattern)
        load = CommunicationPlan.build(sig, Partition("x", R, owner), pattern)
        exch = CommunicationPlan.build(sig, Partition("x", R, owner), pattern, input_halo="exchange")
        assert counted == load.bytes_by_kind()["total"] == exch.bytes_by_kind()["total"] - 2 * load.load_bytes(), pattern.name
        loaded += load.load_bytes() > 0
        if all(b.time_kind == "none" for b in pattern.blocks):  # spatial rows only
            rows = load.exchange(0, "spatial:0").num_rows
            w = sum(sum(b.spatial_widths) for b in pattern.blocks) - pattern.static_input_width
            assert counted == 2 * pattern.bytes_per_element * w * rows > 0
    assert loaded == sum(p.static_input_width > 0 for p in PRESETS)


def test_row_counts_by_kind() -> None:
    sig = make_dynamic_signal(seed=7, T=6, V=20)
    R = 4
    owner = torch.randint(0, R, (sig.num_vertex_time_nodes,), generator=torch.Generator().manual_seed(1))
    plan = CommunicationPlan.build(sig, Partition("x", R, owner), PRESETS[-1])  # attention + recurrent blocks
    rows = {e.phase if e.kind != "temporal" else ("attention" if e.block == 0 else "recurrent"): e.num_rows
            for e in plan}
    with use_backend("numba"):
        got = plan_row_counts(sig.supergraph(), owner, {"recurrent", "attention"})
    assert got == {"spatial": rows["spatial:0"], "recurrent": rows["recurrent"], "attention": rows["attention"]}


def test_fallbacks_build_the_plan() -> None:
    sig = make_dynamic_signal(seed=4, T=6, V=40)
    N = sig.num_vertex_time_nodes
    R = MAX_PARTS + 6  # beyond the bitmask
    owner = torch.randint(0, R, (N,), generator=torch.Generator().manual_seed(0))
    assert plan_bytes(sig, owner, R, PRESETS[0]) == built(sig, owner, R, PRESETS[0])
    with use_backend("torch"):
        assert plan_bytes(sig, owner % 3, 3, PRESETS[3]) == built(sig, owner % 3, 3, PRESETS[3])


def test_bad_owner_is_a_clear_error() -> None:
    sig = make_dynamic_signal(seed=4, T=4, V=10)
    N = sig.num_vertex_time_nodes
    with pytest.raises(PartitionError, match="owner"):
        plan_bytes(sig, torch.zeros(N + 1, dtype=torch.long), 2, PRESETS[0])
    with pytest.raises(PartitionError, match=r"\[0, 2\)"):
        plan_bytes(sig, torch.full((N,), 2), 2, PRESETS[0])
