"""MemoryTrainer's event_placement (pyg_dynscale/ctdg/options.py): an unknown value is a ModelInputError
naming it; "per_rank" with what it does not run with is an UnsupportedOptionError naming the option and
the way out; on one process "per_rank" is the whole stream (the same numbers)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.ctdg.options import check_event_placement
from pyg_dynscale.errors import ModelInputError, UnsupportedOptionError

OK = dict(memory_placement="sven", partition="interval", prefetch=False, micro_batches=1, overlap_aggregation=False)


def test_event_placement_values():
    with pytest.raises(ModelInputError, match="event_placement.*'rank'"):
        check_event_placement("rank", **OK)
    assert check_event_placement("per_rank", **OK) == "per_rank"
    assert check_event_placement("whole", **{**OK, "memory_placement": "replicated", "prefetch": True}) == "whole"
    assert check_event_placement("auto", **OK) == "whole"  # one process: the whole stream


@pytest.mark.parametrize("change,name", [({"memory_placement": "replicated"}, "event_placement"),
                                         ({"partition": "flexbicut"}, "partition")])
def test_per_rank_refuses_what_it_does_not_run_with(change, name):
    with pytest.raises(UnsupportedOptionError) as err:
        check_event_placement("per_rank", **{**OK, **change})
    assert err.value.option == name and "event_placement" in str(err.value)
    # "auto" takes the whole stream for them instead (under a process group too)
    assert check_event_placement("auto", **{**OK, **change, "world_size": 4}) == "whole"


def test_per_rank_runs_with_the_pipelines():
    for change in ({"prefetch": True}, {"micro_batches": 3}, {"micro_batches": "auto"}, {"overlap_aggregation": True}):
        assert check_event_placement("per_rank", **{**OK, **change}) == "per_rank"
        assert check_event_placement("auto", **{**OK, **change, "world_size": 2}) == "per_rank"


def test_one_process_per_rank_is_the_whole_stream():
    d = synthetic_events(200, 20, msg_dim=2, seed=1)
    d.msg = d.msg.double()
    out = []
    for events in ("whole", "per_rank", "auto"):
        torch.manual_seed(0)
        model = TGN(d.num_nodes, 2, memory_dim=4, time_dim=2, embedding_dim=4).double()
        tr = MemoryTrainer(model, d, batch_size=20, parallelism=(2, 1, 1), memory_placement="sven",
                           partition="interval", event_placement=events, mrr_negatives=3)
        out.append((tr.train_epoch(), tr.evaluate()))
        assert tr.rank_events is None and tr.exchange is None  # one process holds the stream
        assert tr.event_placement == "whole"  # the placement in effect
        tr.state_dict()  # and checkpoints as the whole stream does
    assert out[0] == out[1] == out[2]
