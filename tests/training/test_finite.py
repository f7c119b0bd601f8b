"""A non-finite training loss stops every trainer at the first such batch (pyg_dynscale/training/finite.py):
``NonFiniteLossError`` (a ``DynScaleError`` and a ``FloatingPointError``) naming the epoch and the batch, counted
from 1, and under a process group the ranks whose share was non-finite -- the same error on every rank, none
left waiting in a collective. The NaN is put at a known (epoch, batch) by a head that poisons its output there
(on one rank only in the two-rank cases); DCRNN on a graph with a vertex that has out-edges and no in-edges
says which vertex and what to do."""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import pytest
import torch
import torch.distributed as dist

from pyg_dynscale.errors import DynScaleError, NonFiniteLossError
from pyg_dynscale.training.finite import check_batch_losses, first_nonfinite, in_degree_cause

NAN = float("nan")


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class Poisoned(torch.nn.Module):
    """``inner``'s output, times NaN while training when ``when()`` says so (set once the trainer exists)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.when: Callable[[], bool] = lambda: False

    def forward(self, *args: Any) -> torch.Tensor:
        out = self.inner(*args)
        return out * NAN if self.training and self.when() else out


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _caught(train: Callable[[], Any], epochs: int) -> NonFiniteLossError:
    """Train up to ``epochs`` epochs; the error that stopped them (fails if none did)."""
    with pytest.raises(NonFiniteLossError) as info:
        for _ in range(epochs):
            train()
    return info.value


# ----------------------------------------------------------------------------------------------- the check
def test_the_first_non_finite_batch_is_named() -> None:
    assert first_nonfinite([1.0, 2.0]) is None
    assert first_nonfinite([1.0, math.inf, NAN]) == 1
    check_batch_losses([0.5, 1e300], epoch=0)  # large is not non-finite
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e30)
    with pytest.raises(NonFiniteLossError) as info:
        check_batch_losses([0.5, 0.4, -math.inf, NAN], epoch=4, optimizer=opt)
    e = info.value
    assert (e.epoch, e.batch, e.batches, e.loss, e.ranks, e.reason) == (5, 3, 4, -math.inf, (), "lr")
    assert str(e) == "the training loss is -inf at epoch 5, batch 3 of 4. Fix: lower lr (it is 1e+30), or train in " \
                     "float64."
    assert isinstance(e, DynScaleError) and isinstance(e, FloatingPointError)


def _dcrnn() -> torch.nn.Module:
    from torch_geometric_temporal.nn.recurrent import DCRNN

    torch.manual_seed(0)
    return DCRNN(2, 4, 2)  # float32: its degree vectors are in the default dtype


def test_dcrnn_infinite_on_a_vertex_without_in_edges_is_explained() -> None:
    """PyGT's DConv divides by the in-degree of each edge's source: vertex 0 below (out-edges, no in-edge) makes
    its output infinite; a cycle (every vertex has both) does not, nor does a sink (in-edges only)."""
    model, x = _dcrnn(), torch.randn(3, 2)
    source, sink, cycle = torch.tensor([[0, 1, 2], [1, 2, 1]]), torch.tensor([[0, 1, 1], [1, 0, 2]]), \
        torch.tensor([[0, 1, 2], [1, 2, 0]])
    assert not bool(torch.isfinite(model(x, source, torch.ones(3))).all())
    for ok in (sink, cycle):
        assert bool(torch.isfinite(model(x, ok, torch.ones(3))).all())
    cause = in_degree_cause(model, [(0, cycle, None), (1, sink, None), (2, source, None), (3, source, None)])
    assert cause == ("PyGT's DCRNN divides by the in-degree of each edge's source vertex: vertex 0 has out-edges "
                     "and no in-edges in snapshot 2 (2 of the snapshots have such a vertex).")
    # the vertex ids of the rows, where given (a snapshot holding vertices 7, 8, 9 as rows 0, 1, 2)
    assert "vertex 7 has" in in_degree_cause(model, [(0, source, None, torch.tensor([7, 8, 9]))])
    # a zero-weight in-edge is no in-edge
    assert "vertex 0 " in in_degree_cause(model, [(0, cycle, torch.tensor([1.0, 1.0, 0.0]))])
    assert in_degree_cause(model, [(0, cycle, None), (1, sink, None)]) is None
    assert in_degree_cause(torch.nn.Linear(2, 2), [(0, source, None)]) is None  # the model does not divide
    with pytest.raises(NonFiniteLossError) as info:
        check_batch_losses([NAN], epoch=0, model=model, graphs=lambda: [(0, source, None)])
    assert info.value.reason == "in_degree" and "vertex 0 has out-edges" in str(info.value)
    assert "add_self_loops" in info.value.fix and "another model" in info.value.fix


# ----------------------------------------------------------------------------------------------- one process
def test_signal_graphs_name_vertices_not_rows() -> None:
    from pyg_dynscale.data import DynamicGraphSignal
    from pyg_dynscale.training.finite import signal_graphs

    edges = [torch.tensor([[0, 1], [1, 0]]), torch.tensor([[0, 1, 2], [1, 2, 1]])]
    sig = DynamicGraphSignal(edges, [None, None], [torch.zeros(2, 1), torch.zeros(3, 1)],
                             [torch.zeros(2), torch.zeros(3)], node_ids=[torch.tensor([3, 4]), torch.tensor([5, 3, 4])])
    assert "vertex 5 has out-edges and no in-edges in snapshot 1 (1 of" in in_degree_cause(_dcrnn(), signal_graphs(sig))


def _signal(T: int = 6):
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    return generate_dynamic_graph(12, 48, T, num_features=3, feature_dtype=torch.float64, seed=0)


def _tgcn_head():
    from pyg_dynscale.nn import TGCN

    torch.manual_seed(0)
    return TGCN(3, 4).double(), Poisoned(torch.nn.Linear(4, 1).double())


def test_fused_trainer_stops_at_the_poisoned_epoch() -> None:
    from pyg_dynscale.runtime import FusedTrainer

    model, head = _tgcn_head()
    t = FusedTrainer(model, _signal(), head=head, loss="mse", lr=0.01, seed=0)
    head.when = lambda: t.epoch == 2
    e = _caught(t.train_epoch, 5)
    assert (e.epoch, e.batch, e.batches, e.ranks) == (3, 1, 1, ()) and math.isnan(e.loss)
    assert "lr (it is 0.01)" in str(e)


def _windows(head_rank: Optional[int], at: tuple, blocks: int = 1):
    """A WindowTrainer (GConvGRU, batches of 4 windows in order) whose head is NaN at (epoch, batch index) ``at``
    on rank ``head_rank`` (``None``: every rank)."""
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    from pyg_dynscale.data.synthetic import generate_dynamic_graph
    from pyg_dynscale.windows import WindowTrainer

    sig = generate_dynamic_graph(8, 160, 20, num_features=3, feature_dtype=torch.float64, seed=1)
    torch.manual_seed(0)
    head = Poisoned(torch.nn.Linear(4, 1).double())
    t = WindowTrainer(GConvGRU(3, 4, 1).double(), sig, head=head, loss="mse", lags=3, batch_size=4, shuffle=False,
                      blocks=blocks, seed=0, lr=0.01)
    head.when = lambda: (t.epoch, t.batch_index) == at and head_rank in (None, _rank())
    return t


def test_window_trainer_stops_at_the_poisoned_batch() -> None:
    t = _windows(None, (1, 2))
    e = _caught(t.train_epoch, 4)
    assert (e.epoch, e.batch, e.ranks) == (2, 3, ()) and e.batches == len(t.batches(0)) > 3


def _memory(rank_only: Optional[int], at: tuple, world: int = 1):
    """A MemoryTrainer (TGN) whose link predictor is NaN at (epoch, step) ``at`` on rank ``rank_only``."""
    from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events

    d = synthetic_events(300, 30, msg_dim=3, seed=7, burst_length=15)
    d.msg = d.msg.double()
    torch.manual_seed(0)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.0).double()
    model.link_pred = Poisoned(model.link_pred)
    t = MemoryTrainer(model, d, batch_size=20, lr=0.01, seed=1, mrr_negatives=0, parallelism=(world, 1, 1))
    model.link_pred.when = lambda: (t._ctx is not None and (t.epoch, t._ctx.iteration) == at
                                    and rank_only in (None, _rank()))
    return t


def test_memory_trainer_stops_at_the_poisoned_step() -> None:
    t = _memory(None, (0, 4))
    e = _caught(t.train_epoch, 3)
    assert (e.epoch, e.batch, e.ranks) == (1, 5, ()) and e.batches > 5


# ----------------------------------------------------------------------------------------------- two ranks
def _error_fields(train: Callable[[], Any], epochs: int) -> tuple:
    try:
        for _ in range(epochs):
            train()
    except NonFiniteLossError as e:
        return e.epoch, e.batch, e.batches, e.ranks, str(e)
    return None


def _two_ranks(rank: int, world: int) -> dict:
    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.partition import partition

    out = {}
    t = _windows(1, (0, 1), blocks=2)
    out["windows"] = _error_fields(t.train_epoch, 3)
    t.close()
    m = _memory(0, (1, 2), world=2)
    out["events"] = _error_fields(m.train_epoch, 3)
    m.close()
    model, head = _tgcn_head()
    sig = _signal()
    d = DistributedTrainer(model, sig, partition(sig, "pss", world, model.dependency_pattern()), head=head,
                           loss="mse", lr=0.01, seed=0)
    head.when = lambda: d.epoch == 1 and rank == 1
    out["distributed"] = _error_fields(d.train_epoch, 4)
    d.close()
    return out


def test_a_nan_on_one_rank_stops_every_rank_at_the_same_batch() -> None:
    """Each trainer under 2 gloo ranks, the NaN on one rank only: both ranks raise the same error (no rank
    waits in a collective for the other) naming the batch and that rank."""
    from pyg_dynscale.training.launch import spawn

    r0, r1 = spawn(_two_ranks, 2, timeout=60)
    assert r0 == r1, (r0, r1)
    assert r0["windows"][:2] == (1, 2) and r0["windows"][3] == (1,), r0["windows"]
    assert r0["events"][:2] == (2, 3) and r0["events"][3] == (0,), r0["events"]
    assert r0["distributed"][:4] == (2, 1, 1, (1,)), r0["distributed"]
    assert "(rank 1)" in r0["distributed"][4]
