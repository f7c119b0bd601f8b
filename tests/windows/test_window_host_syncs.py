"""Host read-backs of WindowTrainer (issue 35, item 4: at most one per batch) and its device binding (item 1).

A read-back of a device tensor stops the host until the GPU has run everything queued before it. CI has no GPU,
so tests/helpers/host_syncs.py counts them on the CPU, following which tensors are *device-resident*. Here those are
what a GPU run would hold on the GPU (:func:`on_the_device`): the trainer's parameters and optimizer state, the
storage `_store` copies to the training device (features, targets, edges, weights, node ids) and everything
computed from them, and what the trainer's own code (pyg_dynscale/windows) creates with `device=` or copies with
`.to(device)` -- on the CPU both are no-ops, so they are emulated as fresh marked copies. Host planning (window
starts, offsets, node-batch plans) stays on the host, as on a GPU.

Every configuration that matters trains one epoch of several batches and evaluates under the counter:

* where the package runs every op itself (reuse on: PyGT's GConvGRU / DCRNN / TGCN / A3TGCN on static and
  changing graphs, horizon > 1, the bounded cache, incremental aggregation, the seq2seq decoder, node batches,
  and DDP over 2 gloo ranks with placement "blocks" and "replicated"): one read-back per **epoch** (the batch
  losses, kept on the device and read once at its end) and one per evaluation (its sums);
* where a PyG / PyGT module is called as it is (reuse off, BatchedDCRNN, A3TGCN without reuse), the counts
  that module's own code makes are pinned (PyG's ChebConv and gcn_norm find self-loops with boolean masks;
  DCRNN's DConv reads degrees back; BatchedDCRNN compares its cached edge list with torch.equal), and every
  read-back beyond the epoch's one must come from the call into that module.

Under NCCL's rules (tests/helpers/fake_nccl.py) the trainer binds its device before its first collective (DDP's
broadcast), node batches' host counts go over the gloo twin (no object collective on the device group), and a
run equals one process.
"""
from __future__ import annotations

import collections
import math
from typing import Callable

import pytest
import torch

from pyg_dynscale.training.launch import spawn
from pyg_dynscale.windows import WindowTrainer
from tests.helpers import fake_nccl
from tests.helpers.host_syncs import HostSyncs, on_the_device
from tests.helpers.windows import chickenpox, covid

#: the trainer's own code: its ``device=`` factories and ``.to(device)`` copies put tensors on the training device
SCOPE = "pyg_dynscale/windows/"
#: the one read-back of a training epoch (its batch losses) and of an evaluation (its sums)
EPOCH_READ = "Tensor.tolist at windows/trainer.py"


def count(make: Callable) -> dict:
    """Build the trainer ``make()`` gives (``(constructor, modules)``: data and modules made outside the counter)
    on the emulated device, then count one training epoch and one evaluation."""
    build, modules = make()
    with HostSyncs() as syncs, on_the_device(syncs, SCOPE):
        syncs.mark_modules(*modules)
        tr = build()
        setup = syncs.count
        syncs.reset()
        syncs.mark_modules(*tr.modules.values())
        syncs.mark_optimizer(tr.optimizer)
        tr.train_epoch()
        train = list(syncs.events)
        syncs.reset()
        tr.evaluate("test")
        evaluate = list(syncs.events)
    out = {"setup": setup, "steps": len(tr.batch_losses), "train": train, "evaluate": evaluate,
           "losses": list(tr.batch_losses)}
    tr.close()
    return out


# ------------------------------------------------------------------ configurations
def _cell(kind: str, F: int = 4, H: int = 5) -> torch.nn.Module:
    from torch_geometric_temporal.nn.recurrent import DCRNN, TGCN, GConvGRU

    torch.manual_seed(0)
    return {"GConvGRU": lambda: GConvGRU(F, H, 2), "DCRNN": lambda: DCRNN(F, H, 2),
            "TGCN": lambda: TGCN(F, H)}[kind]().double()


def cell(kind: str = "GConvGRU", data: str = "chickenpox", T: int = 15, batch_size: int = 3, **kw) -> Callable:
    """A PyGT cell + linear head on England COVID (changing graph, self-loops) or Chickenpox (static graph)."""
    def make():
        sig = chickenpox(T=T) if data == "chickenpox" else covid(T=T)
        m, head = _cell(kind), torch.nn.Linear(5, 1).double()
        return (lambda: WindowTrainer(m, sig, lags=3, batch_size=batch_size, lr=0.05, head=head, **kw,
                                      optimizer="sgd")), (m, head)
    return make


def seq2seq(data: str, reuse: bool = True) -> Callable:
    """DCRNN's encoder-decoder: a GConvGRU encoder, its copy as decoder, 4 steps, teacher forcing 0.5."""
    def make():
        from torch_geometric_temporal.nn.recurrent import GConvGRU

        from tests.helpers.windows import series_changing as _series_changing, series_static as _series_static

        sig = _series_changing() if data == "changing" else _series_static()
        torch.manual_seed(0)
        m, head = GConvGRU(1, 5, 2).double(), torch.nn.Linear(5, 1).double()
        return (lambda: WindowTrainer(m, sig, lags=3, horizon=4, batch_size=3, lr=0.05, head=head, decoder="copy",
                                      teacher_forcing=0.5, ratio=(0.6, 0.0, 0.4), reuse=reuse, optimizer="sgd")), (m, head)
    return make


def batched_dcrnn() -> Callable:
    def make():
        from torch_geometric_temporal.nn.recurrent import BatchedDCRNN

        from tests.helpers.windows import series_static as _series_static

        sig = _series_static()
        torch.manual_seed(0)
        m = BatchedDCRNN(1, 1, K=2).double()
        return (lambda: WindowTrainer(m, sig, lags=3, horizon=3, batch_size=3, lr=0.05, optimizer="sgd")), (m,)
    return make


def a3tgcn(reuse: bool) -> Callable:
    def make():
        from torch_geometric_temporal.nn.recurrent import A3TGCN

        sig = chickenpox(T=15)
        torch.manual_seed(0)
        m, head = A3TGCN(4, 5, 3).double(), torch.nn.Linear(5, 1).double()
        return (lambda: WindowTrainer(m, sig, lags=3, batch_size=3, lr=0.05, head=head, reuse=reuse,
                                      optimizer="sgd")), (m, head)
    return make


#: the package runs every op: one read-back per epoch
EXACT = {
    "GConvGRU static": cell(),
    "GConvGRU changing": cell(data="covid", T=12),
    "DCRNN static": cell("DCRNN"),
    "DCRNN changing": cell("DCRNN", data="covid", T=12),
    "TGCN static": cell("TGCN"),
    "TGCN changing": cell("TGCN", data="covid", T=12),
    "A3TGCN (window model)": a3tgcn(True),
    "horizon 2": cell(horizon=2),
    "bounded cache, static": cell(cache_bytes=2000),
    "bounded cache, changing": cell(data="covid", T=12, cache_bytes=20000),
    "bounded cache, TGCN changing": cell("TGCN", data="covid", T=12, cache_bytes=20000),
    "incremental, changing": cell(data="covid", T=12, incremental=True),
    "seq2seq, changing": seq2seq("changing"),
    "seq2seq, static": seq2seq("static"),
    "node batches, static": cell(node_batch_size=7),
    "node batches, changing": cell(data="covid", T=12, node_batch_size=50),
}

#: a PyG / PyGT module called as it is: (configuration, read-backs per epoch reached, the op those read-backs are
#: made by, the package file whose line calls into that module)
PINNED = {
    # ChebConv.__norm__: remove_self_loops (2 boolean-mask reads), its loop mask (2), in each of GConvGRU's
    # 6 convolutions, 3 steps per batch, 3 batches
    "GConvGRU, reuse off": (cell(reuse=False), 1 + 3 * 3 * 6 * 4, "with a boolean mask", "nn/snapshot_model.py"),
    "GConvGRU changing, reuse off": (cell(data="covid", T=12, reuse=False), 1 + 3 * 3 * 6 * 4, "with a boolean mask",
                                     "nn/snapshot_model.py"),
    # DConv: degrees read back (.item) and nonzero, per convolution
    "DCRNN, reuse off": (cell("DCRNN", reuse=False), 109, "aten.", "nn/snapshot_model.py"),
    # GCNConv's gcn_norm: add_remaining_self_loops' masks, in each of TGCN's 3 convolutions
    "TGCN changing, reuse off": (cell("TGCN", data="covid", T=12, reuse=False), 109, "with a boolean mask",
                                 "nn/snapshot_model.py"),
    "A3TGCN, reuse off": (a3tgcn(False), 109, "with a boolean mask", "windows/window_model.py"),
    # its forward compares its cached edge_index and edge_weight with torch.equal (after the first batch)
    "BatchedDCRNN": (batched_dcrnn(), 5, "aten.equal", "windows/trainer.py"),
    "node batches, reuse off": (cell(node_batch_size=7, reuse=False), 649, "with a boolean mask",
                                "nn/snapshot_model.py"),
}


@pytest.mark.parametrize("data", ["chickenpox", "covid"])
def test_the_self_loops_planned_on_the_host_are_the_unions(data):
    """The batch graphs are normalized from self-loop positions the trainer computes from host offsets: they are
    exactly the self-loops of the union it builds (static graph: B copies of one snapshot; changing: each
    snapshot's own), for any list of snapshots."""
    from pyg_dynscale.nn.graph_norm import self_loops

    build, _ = cell(data=data, T=12)()
    tr = build()
    g = torch.Generator().manual_seed(0)
    for _ in range(12):
        ts = torch.randint(0, 12, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist()
        _, ei, _, _, _ = tr.store.union(ts)
        loops = tr.store.union_loops(ts)
        assert loops.numel() > 0 and torch.equal(loops, self_loops(ei)), ts


def _only_the_epoch_read(events: list) -> bool:
    return len(events) == 1 and events[0].startswith(EPOCH_READ)


@pytest.mark.parametrize("name", list(EXACT))
def test_one_read_back_per_epoch(name):
    r = count(EXACT[name])
    assert r["steps"] >= 2
    assert _only_the_epoch_read(r["train"]), (name, collections.Counter(r["train"]))
    assert _only_the_epoch_read(r["evaluate"]), (name, collections.Counter(r["evaluate"]))


@pytest.mark.parametrize("name", list(PINNED))
def test_a_module_called_as_it_is_keeps_its_own_read_backs_only(name):
    make, reached, op, where = PINNED[name]
    r = count(make)
    assert len(r["train"]) <= reached, (name, len(r["train"]), collections.Counter(r["train"]))
    ours = [e for e in r["train"] if e.startswith(EPOCH_READ)]
    theirs = [e for e in r["train"] if not e.startswith(EPOCH_READ)]
    assert len(ours) == 1 and theirs, collections.Counter(r["train"])
    assert all(op in e and f" at {where}:" in e for e in theirs), collections.Counter(theirs)


# ------------------------------------------------------------------ under a process group
RANKED = {  # 2 ranks, batch_size a multiple of blocks = 2
    "blocks": cell(batch_size=4),
    "replicated": cell(batch_size=4, placement="replicated"),
    "node batches": cell(batch_size=4, node_batch_size=7),
}


def _ranked(rank: int, world: int, names: list) -> dict:
    torch.set_num_threads(1)
    return {name: count(RANKED[name]) for name in names}


def test_two_gloo_ranks_read_back_once_per_epoch():
    per_rank = spawn(_ranked, 2, list(RANKED), timeout=120)
    for name in RANKED:
        r0, r1 = per_rank[0][name], per_rank[1][name]
        assert r0["losses"] == r1["losses"] and len(r0["losses"]) >= 2
        for r in (r0, r1):
            assert _only_the_epoch_read(r["train"]), (name, collections.Counter(r["train"]))
            assert _only_the_epoch_read(r["evaluate"]), (name, collections.Counter(r["evaluate"]))


#: under NCCL's rules: a plain DDP run and node batches (their host counts over the gloo twin)
NCCL_CASES = {"blocks": dict(batch_size=4), "node batches": dict(batch_size=4, node_batch_size=7)}


def _run(make: Callable) -> dict:
    build, _ = make()
    tr = build()
    out = {"losses": [tr.train_epoch() for _ in range(2)], "batch_losses": list(tr.batch_losses),
           "test": tr.evaluate("test")}
    tr.close()
    return out


def _nccl_rules(rank: int, world: int) -> dict:
    import torch.distributed as dist

    from pyg_dynscale.training.ranks import group_backend

    torch.set_num_threads(1)
    reduced: list = []
    all_reduce = dist.all_reduce

    def recorded(tensor, *args, **kwargs):  # (backend of the group, dtype) of every all-reduce
        group = kwargs.get("group", args[1] if len(args) > 1 else None)
        reduced.append((group_backend(group), str(tensor.dtype)))
        return all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = recorded
    out = {}
    for name, kw in NCCL_CASES.items():
        fake_nccl.LOG.clear()
        reduced.clear()
        out[name] = _run(cell(**kw))
        out[name]["log"] = list(fake_nccl.LOG)
        out[name]["reduced"] = sorted(set(reduced))
    return out


def test_under_nccl_rules_the_device_is_bound_before_the_first_collective():
    """fake_nccl fails a group's first collective on a rank that has not bound a device (NCCL would make the
    communicator on cuda:0) and refuses object collectives on the device group: WindowTrainer's construction
    (DDP's broadcast; node batches' gloo twin) and training pass, binding first; device values are reduced
    over the user's group, node batches' host counts over its gloo twin; the run equals one process."""
    per_rank = spawn(_nccl_rules, 2, backend=fake_nccl.NAME, timeout=120)
    for name, kw in NCCL_CASES.items():
        ref = _run(cell(blocks=2, **kw))  # one process, the same blocks
        for r in per_rank:
            got = r[name]
            first_collective = next(i for i, e in enumerate(got["log"]) if e[0] != "bind")
            binds = [i for i, e in enumerate(got["log"]) if e[0] == "bind"]
            assert binds and binds[0] < first_collective, got["log"]
            assert not [e for e in got["log"] if e[0] == "refused"], got["log"]
            # device values (gradients, losses, metrics) over the user's group; host counts over its gloo twin
            host = [("gloo", "torch.int64")] if name == "node batches" else []
            assert got["reduced"] == [(fake_nccl.NAME, "torch.float64")] + host, got["reduced"]
            for a, b in zip(got["losses"] + got["batch_losses"], ref["losses"] + ref["batch_losses"]):
                assert math.isclose(a, b, rel_tol=1e-9)
            assert all(math.isclose(got["test"][k], ref["test"][k], rel_tol=1e-9) for k in ref["test"])
