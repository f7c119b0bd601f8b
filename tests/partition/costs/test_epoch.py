"""The one count of an epoch's critical path (partition.costs.epoch)
that ``auto`` and the round-aware workload model both price: each count
checked against the communication plan the runtime executes, or a count by
hand, on several partitions and patterns."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.partition import BlockPattern, CommunicationPlan, DependencyPattern, Partition
from pyg_dynscale.partition.costs.epoch import epoch_counts
from pyg_dynscale.partition.costs.rounds import round_features
from pyg_dynscale.partition.schemes.snapshot_sequence import partition_pss, partition_pss_ts, partition_pts
from tests.helpers.partition_inputs import random_signal

PRESETS = ("tgcn", "mpnnlstm", "dysat", "gconvgru", "tmgcn")
R = 3


def _pattern(name: str) -> DependencyPattern:
    return DependencyPattern.preset(name, 3, 8)


def _partitions(sig) -> dict[str, Partition]:  # noqa: ANN001
    g = torch.Generator().manual_seed(7)
    N = sig.num_vertex_time_nodes
    own, town = torch.randint(0, R, (2, N), generator=g)
    return {"pss": partition_pss(sig, R), "pts": partition_pts(sig, R), "pss-ts": partition_pss_ts(sig, R),
            "random": Partition("pgc", R, own), "random-split": Partition("pss-ts", R, own, time_owner=town)}


def _by_hand(sig, town: torch.Tensor) -> tuple[dict, dict]:  # noqa: ANN001
    """Rows and longest piece per (round, rank), walking every sequence in Python."""
    sg = sig.supergraph()
    so, sp = sg.sequence_order.tolist(), sg.sequence_ptr.tolist()
    rows: dict = {}
    longest: dict = {}
    for a, b in zip(sp[:-1], sp[1:]):
        owners = [int(town[so[i]]) for i in range(a, b)]
        depth, run = 0, 1
        for i in range(1, len(owners) + 1):
            if i < len(owners) and owners[i] == owners[i - 1]:
                run += 1
                continue
            key = (depth, owners[i - 1])
            rows[key] = rows.get(key, 0) + run
            longest[key] = max(longest.get(key, 0), run)
            depth, run = depth + 1, 1
    return rows, longest


@pytest.mark.parametrize("seed", [0, 1])
def test_counts_are_what_the_plan_moves_and_scans(seed: int) -> None:
    sig = random_signal(seed, T=7, V=30)
    sg = sig.supergraph()
    for pname in PRESETS:
        pat = _pattern(pname)
        recurrent = sum(b.time_kind == "recurrent" for b in pat.blocks)
        for name, part in _partitions(sig).items():
            c = epoch_counts(sig, part, pat)
            plan = CommunicationPlan.build(sig, part, pat)
            own, town = part.owner, part.temporal_owner
            assert c.owned.tolist() == torch.bincount(own, minlength=R).tolist()
            assert c.edges.tolist() == torch.bincount(own[sg.spatial_edge_index[1]], minlength=R).tolist()
            # halo: the rows each rank receives in every spatial exchange of the plan (one row set for all layers)
            spatial = [e for e in plan if e.kind == "spatial"]
            assert spatial, pname
            for e in spatial:
                cnt = e.counts().to(torch.float64)
                assert torch.equal(c.halo, cnt.sum(0) - cnt.diagonal()), (pname, name, e.phase)
            # the time encoder's rows, all rounds together, are the time-owned rows
            assert torch.equal(c.time_rows.sum(0), torch.bincount(town, minlength=R).to(torch.float64))
            assert c.recurrent == recurrent
            if not recurrent:  # attention / window: one round, no dependent steps
                assert c.num_rounds == 1 and c.critical_steps() == 0
                continue
            assert c.num_rounds == plan.temporal_rounds(), (pname, name)
            rows, longest = _by_hand(sig, town)
            for (k, r), n in rows.items():
                assert c.time_rows[k, r] == n and c.longest[k, r] == longest[(k, r)], (pname, name, k, r)
            assert int((c.time_rows > 0).sum()) == len(rows)
            assert c.critical_steps() == sum(max(longest.get((k, r), 0) for r in range(R)) for k in range(c.num_rounds))
            # the round-aware model's features are these counts, times the recurrent blocks
            f = round_features(sig, part, pat)
            assert torch.equal(f.structure, torch.stack([c.owned, c.edges, c.halo], 1))
            assert torch.equal(f.rounds[..., 0], c.time_rows * recurrent)
            assert torch.equal(f.rounds[..., 1], c.longest * recurrent)


def test_a_pattern_without_spatial_layers_aggregates_nothing() -> None:
    """No spatial layer: no edges aggregated, no halo received (the plan has no
    spatial exchange). Every shipped model has a spatial layer, so ``auto``'s
    predictions for them do not depend on this case (before this module, auto
    counted the edges here while the round model did not)."""
    sig = random_signal(2, T=6, V=20)
    rnn = DependencyPattern((BlockPattern((), "recurrent", 8, 24),), 4, "rnn-only")
    part = partition_pss(sig, R)
    c = epoch_counts(sig, part, rnn)
    assert not any(e.kind == "spatial" for e in CommunicationPlan.build(sig, part, rnn))
    assert c.edges.tolist() == [0.0] * R and c.halo.tolist() == [0.0] * R
    assert c.owned.sum() == sig.num_vertex_time_nodes
    for name in PRESETS:
        assert any(b.spatial_widths for b in _pattern(name).blocks), name
