"""Everything a user hands to other processes pickles at any point of its
life: signals before and after partitioning (their cached supergraph holds a
weak reference back to the signal), supergraphs, partitions, plans and
dependency patterns -- and spawn() takes a partitioned signal."""
from __future__ import annotations

import pickle

import pytest
import torch

from pyg_dynscale.data.loaders import load_england_covid
from pyg_dynscale.distributed import spawn
from pyg_dynscale.nn import TGCN
from pyg_dynscale.partition import CommunicationPlan, partition


def _roundtrip(obj):  # noqa: ANN001, ANN202
    return pickle.loads(pickle.dumps(obj))


def test_signals_supergraphs_partitions_plans_and_patterns_pickle():
    sig = load_england_covid()
    assert _roundtrip(sig).equals(sig)  # fresh
    sig.supergraph()
    pattern = TGCN(sig.num_node_features, 8, num_layers=2).dependency_pattern()
    part = partition(sig, "pgc", 2, pattern, seed=0)  # caches the supergraph and the fingerprint
    plan = CommunicationPlan.build(sig, part, pattern)
    copy = _roundtrip(sig)
    assert copy.equals(sig) and copy.fingerprint() == sig.fingerprint()
    part.check_signal(copy)  # the copy is the same signal to a partition
    assert torch.equal(copy.supergraph().spatial_edge_index, sig.supergraph().spatial_edge_index)
    sg = _roundtrip(sig.supergraph())
    assert torch.equal(sg.sequence_order, sig.supergraph().sequence_order) and sg.fingerprint() == ""
    assert torch.equal(_roundtrip(part).owner, part.owner)
    assert _roundtrip(plan).bytes_by_kind() == plan.bytes_by_kind()
    assert _roundtrip(pattern).to_dict() == pattern.to_dict()


def _uses(rank: int, world_size: int, sig, part) -> int:  # noqa: ANN001
    part.check_signal(sig)
    return sig.num_vertex_time_nodes


@pytest.mark.real_spawn  # a fresh interpreter per rank, as users get (the suite's others: tests/helpers/fast_spawn.py)
def test_spawn_takes_a_partitioned_signal():
    sig = load_england_covid()
    part = partition(sig, "pts", 2)
    assert spawn(_uses, 2, sig, part, timeout=60) == [sig.num_vertex_time_nodes] * 2
