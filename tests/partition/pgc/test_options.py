"""PGC's options as one object (issue 39 item 4): :class:`PGCOptions` validated once with partition_pgc's own
lines, round-tripped through a dict, JSON and the partition file, keywords overriding an options object, and
unknown names refused by name."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import load_partition, partition, save_partition
from pyg_dynscale.partition.pgc.pipeline import partition_pgc
from pyg_dynscale.partition.pgc.options import PGCOptions
from pyg_dynscale.partition.costs.rounds import RoundWorkload
from pyg_dynscale.partition.costs.workload import LinearWorkload, WorkloadModel
from tests.helpers.partition_inputs import random_signal

PAIR = (1.0, 1.0)

#: partition_pgc's errors for bad keywords as they were before the options were an object (generated at
#: be115c3 with the same calls): the object must raise the same lines
BAD = [
    ('effort', 'slow', "field 'effort': must be one of ['fast', 'thorough', 'auto'], not 'slow'."),
    ('coarsen', 'yes', "field 'coarsen': must be True, False or 'auto', not 'yes'."),
    ('segment_fraction', 0.0, "field 'segment_fraction': must lie in (0, 1], got 0.0. Fix: use e.g. 0.5."),
    ('segment_fraction', 1.5, "field 'segment_fraction': must lie in (0, 1], got 1.5. Fix: use e.g. 0.5."),
    ('threads', 0, "field 'threads': must be a positive int or None, got 0."),
    ('threads', True, "field 'threads': must be a positive int or None, got True."),
    ('starts', 'lp', "field 'starts': must be a tuple from ('lp', 'pss', 'pts') that contains 'lp', got 'lp'. Fix: use e.g. ('lp', 'pss', 'pts'), or ('lp',) for the single-start PGC."),
    ('starts', ('pss',), "field 'starts': must be a tuple from ('lp', 'pss', 'pts') that contains 'lp', got ('pss',). Fix: use e.g. ('lp', 'pss', 'pts'), or ('lp',) for the single-start PGC."),
    ('starts', ('lp', 'metis'), "field 'starts': must be a tuple from ('lp', 'pss', 'pts') that contains 'lp', got ('lp', 'metis'). Fix: use e.g. ('lp', 'pss', 'pts'), or ('lp',) for the single-start PGC."),
    ('max_divergence', 0.5, "field 'max_divergence': must be a number >= 1 or None, got 0.5. Fix: use e.g. 1.15."),
    ('max_divergence', '1.2', "field 'max_divergence': must be a number >= 1 or None, got '1.2'. Fix: use e.g. 1.15."),
    ('start_margin', 0.0, "field 'start_margin': must be a positive number or None, got 0.0. Fix: use e.g. 1.1, or None to refine every start."),
    ('start_margin', float("inf"), "field 'start_margin': must be a positive number or None, got inf. Fix: use e.g. 1.1, or None to refine every start."),
    ('slack', 1.0, "field 'slack': must be a number in [0, 1), got 1.0. Fix: use e.g. 0.03."),
    ('slack', float("nan"), "field 'slack': must be a number in [0, 1), got nan. Fix: use e.g. 0.03."),
    ('tol', -0.1, "field 'tol': must be a number in [0, 1), got -0.1. Fix: use e.g. 0.001."),
    ('gain_tol', True, "field 'gain_tol': must be a number in [0, 1), got True. Fix: use e.g. 0.003."),
    ('refine_tol', 1.0, "field 'refine_tol': must be a number in [0, 1), got 1.0. Fix: use e.g. 0.001."),
    ('chunks_per_part', 0, "field 'chunks_per_part': must be an int >= 1 or None, got 0. Fix: use e.g. 16."),
    ('max_chunks', 2.5, "field 'max_chunks': must be an int >= 1 or None, got 2.5. Fix: use e.g. 16."),
    ('max_rounds', -1, "field 'max_rounds': must be an int >= 0 or None, got -1. Fix: leave it at None for the effort preset."),
    ('coarse_rounds', True, "field 'coarse_rounds': must be an int >= 0 or None, got True. Fix: leave it at None for the effort preset."),
    ('max_levels', 1.0, "field 'max_levels': must be an int >= 0 or None, got 1.0. Fix: leave it at None for the effort preset."),
    ('refine_rounds', -2, "field 'refine_rounds': must be an int >= 0 or None, got -2. Fix: leave it at None for the effort preset."),
    ('fm_tries', -1, "field 'fm_tries': must be an int >= 0 or None, got -1. Fix: leave it at None for the effort preset."),
    ('balance', 'edges', "field 'balance': must be one of ('nodes', 'rounds'), not 'edges'. Fix: use 'nodes' (additive node cost) or 'rounds' (round-aware runtime cost)."),
    ('backend', 'cuda', "field 'backend': must be one of ('auto', 'numba', 'torch'), not 'cuda'."),
]


def arrays(part):
    return part.owner, part.chunk


def same_partition(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(arrays(a), arrays(b)))


def test_defaults_are_partition_pgcs():
    """The fields, their order and defaults: partition_pgc's 25 keyword-only options before issue 39."""
    assert PGCOptions.names() == (
        "seed", "cap", "chunks_per_part", "effort", "max_rounds", "coarse_rounds", "tol", "gain_tol", "max_levels",
        "max_chunks", "slack", "refine_rounds", "refine_tol", "coarsen", "segment_fraction", "workload", "threads",
        "starts", "max_divergence", "start_margin", "backend", "progress", "balance", "round_model", "fm_tries")
    o = PGCOptions()
    assert (o.seed, o.cap, o.chunks_per_part, o.effort, o.tol, o.gain_tol, o.max_chunks, o.slack, o.refine_tol,
            o.coarsen, o.segment_fraction, o.starts, o.start_margin, o.balance) == (
        0, None, 16, "auto", 1e-3, 0.003, 4096, 0.03, 1e-3, "auto", 0.5, ("lp", "pss", "pts"), 1.1, "nodes")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.seed = 1


@pytest.mark.parametrize("name,value,line", BAD, ids=[f"{n}={v!r}" for n, v, _ in BAD])
def test_a_bad_option_is_refused_with_the_old_line(name, value, line):
    """The object refuses it when made (no signal needed), and partition_pgc's keyword with the same line."""
    with pytest.raises(PartitionError) as made:
        PGCOptions(**{name: value})
    assert str(made.value) == line and made.value.field == name
    with pytest.raises(PartitionError) as called:
        partition_pgc(random_signal(14), 2, PAIR, **{name: value})
    assert str(called.value) == line
    with pytest.raises(PartitionError) as replaced:  # replace() validates again
        PGCOptions().replace(**{name: value})
    assert str(replaced.value) == line


def test_starts_are_kept_once_each_in_order():
    assert PGCOptions(starts=["lp", "pts", "lp", "pts"]).starts == ("lp", "pts")


@pytest.mark.parametrize("call", ["keyword", "replace", "from_dict", "dispatch"])
def test_an_unknown_name_is_refused_naming_it(call):
    s = random_signal(14)
    run = {"keyword": lambda: partition_pgc(s, 2, PAIR, fm_trys=0),
           "replace": lambda: PGCOptions().replace(fm_trys=0),
           "from_dict": lambda: PGCOptions.from_dict({**PGCOptions().to_dict(), "fm_trys": 0}),
           "dispatch": lambda: partition(s, "pgc", 2, PAIR, fm_trys=0)}[call]
    with pytest.raises(PartitionError) as err:
        run()
    assert err.value.field == "fm_trys" and "'fm_tries'" in str(err.value)
    assert "\n" not in str(err.value)


def test_options_must_be_an_options_object():
    with pytest.raises(PartitionError) as err:
        partition_pgc(random_signal(14), 2, PAIR, {"seed": 1})
    assert err.value.field == "options" and "from_dict" in str(err.value)


def test_round_trip_through_a_dict_and_json():
    o = PGCOptions(seed=3, cap=40.0, chunks_per_part=np.int64(8), effort="fast", max_rounds=5, coarse_rounds=3,
                   tol=0.01, gain_tol=0.0, max_levels=2, max_chunks=64, slack=0.05, refine_rounds=4, refine_tol=0.01,
                   coarsen=False, segment_fraction=0.25, workload=LinearWorkload(2.0, 0.5), threads=1,
                   starts=("lp", "pts"), max_divergence=1.2, start_margin=None, backend="torch", progress=False,
                   balance="rounds", round_model=RoundWorkload(step=0.25, call=2.0, meta={"fit": [1, 2]}), fm_tries=2)
    d = json.loads(json.dumps(o.to_dict()))  # JSON-safe: numpy ints, tuples and models written as plain values
    assert d["chunks_per_part"] == 8 and d["starts"] == ["lp", "pts"]
    assert d["workload"] == {"class": "LinearWorkload", "alpha": 2.0, "beta": 0.5}
    back = PGCOptions.from_dict(d)
    assert back == o
    assert PGCOptions.from_dict({}) == PGCOptions()  # missing names: the defaults
    for workload in (None, "linear", "vertices", "/some/mlp.pt"):
        assert PGCOptions.from_dict(PGCOptions(workload=workload).to_dict()).workload == workload


def test_a_model_without_constants_is_named_and_asked_back():
    class Counting(WorkloadModel):
        def node_costs(self, signal):
            return torch.ones(signal.num_vertex_time_nodes, dtype=torch.float64)

    model = Counting()
    d = json.loads(json.dumps(PGCOptions(workload=model).to_dict()))
    assert d["workload"] == {"class": "Counting"}
    with pytest.raises(PartitionError) as err:
        PGCOptions.from_dict(d)
    assert err.value.field == "workload" and "Counting" in str(err.value) and "workload=" in str(err.value)
    assert PGCOptions.from_dict(d, workload=model).workload is model


def test_the_partition_records_its_options_and_the_file_remakes_it(tmp_path):
    """meta["pgc_options"] survives save_partition / load_partition; partitioning again with the loaded
    options gives the same arrays."""
    s = random_signal(14)
    part = partition_pgc(s, 3, PAIR, seed=5, fm_tries=0, starts=("lp", "pss"), workload="vertices")
    assert part.meta["pgc_options"] == PGCOptions(seed=5, fm_tries=0, starts=("lp", "pss"),
                                                  workload="vertices").to_dict()
    save_partition(part, tmp_path / "p.pt")
    loaded = load_partition(tmp_path / "p.pt")
    again = partition_pgc(s, 3, PAIR, PGCOptions.from_dict(loaded.meta["pgc_options"]))
    assert same_partition(again, part)
    assert not same_partition(partition_pgc(s, 3, PAIR, seed=6, fm_tries=0, starts=("lp", "pss"),
                                            workload="vertices"), part)  # the seed matters on this graph


def test_keywords_override_the_options_object():
    s = random_signal(14)
    base = PGCOptions(seed=1, fm_tries=0, starts=("lp",))
    by_keywords = partition_pgc(s, 3, PAIR, seed=2, fm_tries=0, starts=("lp",))
    mixed = partition_pgc(s, 3, PAIR, base, seed=2)
    assert same_partition(mixed, by_keywords)
    assert mixed.meta["pgc_options"]["seed"] == 2 and mixed.meta["pgc_options"]["fm_tries"] == 0
    assert not same_partition(partition_pgc(s, 3, PAIR, base), by_keywords)  # seed 1 differs: the override counted
    assert same_partition(partition_pgc(s, 3, PAIR, base), partition_pgc(s, 3, PAIR, seed=1, fm_tries=0,
                                                                          starts=("lp",)))
    assert base.replace(seed=2) == PGCOptions(seed=2, fm_tries=0, starts=("lp",)) and base.seed == 1


def test_dispatch_passes_the_options_and_an_explicit_seed_wins():
    s = random_signal(14)
    o = PGCOptions(seed=1, fm_tries=0)
    assert partition(s, "pgc", 3, PAIR, options=o).meta["pgc_options"]["seed"] == 1
    assert partition(s, "pgc", 3, PAIR, seed=4, options=o).meta["pgc_options"]["seed"] == 4
    assert partition(s, "pgc", 3, PAIR).meta["pgc_options"]["seed"] == 0


def test_public_name():
    import pyg_dynscale.partition as part

    assert part.PGCOptions is PGCOptions and "PGCOptions" in part.__all__
