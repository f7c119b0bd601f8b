"""WindowTrainer's placements under gloo (ReInc §3.4): ``"blocks"`` (rank r holds only the snapshots of its
windows) and ``"replicated"`` (the whole signal everywhere), gradients summed by DistributedDataParallel.

One spawned job per world size (2 and 3 ranks) runs every case under both placements and reports, per rank:
the losses, the parameters after every optimizer step, the metrics, what the rank holds, the trainer's byte
counts, and every byte the rank handed to a ``torch.distributed`` collective (counted here, independently of
the trainer). The parent compares with one process with the same ``blocks`` (float64)."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.training.launch import spawn
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.windows import WindowTrainer
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.windows import as64, covid

#: (signal, T, lags, blocks, batch_size): covid T=12 lags=3 -> 7 training windows; blocks 3 -> 3 + 2 + 2, one
#: window per block and batch: the last batch has windows of block 0 only (ranks 1 and 2 of 3 idle); with 2
#: ranks and blocks 2 (4 + 3, 2 per block) rank 1 is idle in the last batch. The changing signal has
#: snapshots without rows (windows without targets) and a changing vertex set.
CASES = {
    2: [("covid", 12, 3, 2, 4), ("changing", 16, 2, 4, 4)],
    3: [("covid", 12, 3, 3, 3), ("changing", 16, 2, 3, 6)],
}
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_object", "gather",
               "scatter", "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
               "send", "recv", "isend", "irecv", "broadcast_object_list", "gather_object", "scatter_object_list")


def _signal(name, T):
    if name == "covid":
        return covid(T=T)
    return as64(make_dynamic_signal(seed=3, T=T, V=10, F=4), T)


def _build(name, T, lags, blocks, batch_size, placement=None):
    from pyg_dynscale.nn import TGCN

    torch.manual_seed(0)
    model, head = TGCN(4, 5).double(), torch.nn.Linear(5, 1).double()
    return WindowTrainer(model, _signal(name, T), lags=lags, batch_size=batch_size, lr=0.05, optimizer="adam",
                         head=head, blocks=blocks, placement=placement)


class _Counter:
    """Bytes of every tensor handed to a ``torch.distributed`` collective, by function (object collectives
    counted by call)."""

    def __init__(self):
        import torch.distributed as dist

        self.bytes, self.calls = {}, {}
        self._saved = {}
        for name in COLLECTIVES:
            fn = getattr(dist, name, None)
            if fn is None:
                continue
            self._saved[name] = fn
            setattr(dist, name, self._wrap(name, fn))

    def _wrap(self, name, fn):
        def counted(*args, **kwargs):
            n = 0
            for a in list(args) + list(kwargs.values()):
                for t in (a if isinstance(a, (list, tuple)) else [a]):
                    if isinstance(t, torch.Tensor):
                        n += t.numel() * t.element_size()
            self.bytes[name] = self.bytes.get(name, 0) + n
            self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return counted

    def close(self):
        import torch.distributed as dist

        for name, fn in self._saved.items():
            setattr(dist, name, fn)


def _run(case, placement):
    tr = _build(*case, placement=placement)
    steps = []
    tr.optimizer.register_step_post_hook(lambda *a: steps.append([p.detach().clone() for p in tr._params]))
    counter = _Counter() if tr.world_size > 1 else None
    try:
        losses = [tr.train_epoch() for _ in range(2)]
        metrics = tr.evaluate("test"), tr.evaluate("val"), tr.evaluate("train")
    finally:
        if counter is not None:
            counter.close()
    held = None if tr.view.held is None else tr.view.held.tolist()
    if held is not None:
        missing = next(t for t in range(tr.view.num_snapshots_total) if t not in held)
        with pytest.raises(ModelInputError, match="not held"):
            tr.view.x_at(missing)
    return {"losses": losses, "batch_losses": tr.batch_losses, "steps": steps, "metrics": metrics,
            "held": held, "x_storage": tr.store.x.untyped_storage().nbytes(),
            "signal_storage": tr.view.signal.x.untyped_storage().nbytes(),
            "report": tr.traffic().as_dict(), "counted": counter and (counter.bytes, counter.calls),
            "param_bytes": sum(p.numel() * p.element_size() for p in tr._params),
            "eval_windows": {k: v.tolist() for k, v in tr._eval.items()}}


def _ranks(rank, world, cases):
    torch.set_num_threads(1)
    return [{p: _run(c, p) for p in ("blocks", "replicated")} for c in cases]


def _expected_held(case, rank, world):
    """The snapshots rank ``rank``'s windows read, from the window arithmetic alone."""
    name, T, lags, blocks, batch_size = case
    W = T - lags + 1
    n_train, n_test = round(W * 0.7), round(W * 0.2)
    train = list(range(n_train))
    test, val = list(range(W - n_test, W)), list(range(n_train, W - n_test))
    per = blocks // world
    sizes = [len(b) for b in torch.tensor_split(torch.tensor(train), blocks)]
    a = sum(sizes[:rank * per])
    mine = train[a:a + sum(sizes[rank * per:(rank + 1) * per])]
    for split in (val, test):
        mine += torch.tensor_split(torch.tensor(split, dtype=torch.long), world)[rank].tolist()
    return sorted({s + j for s in mine for j in range(lags)})


@pytest.mark.parametrize("world", [2, 3])
def test_placements_equal_one_process_and_send_no_features(world):
    torch.set_num_threads(1)
    cases = CASES[world]
    single = [_run(c, None) for c in cases]
    per_rank = spawn(_ranks, world, cases, timeout=120)
    for i, (case, ref) in enumerate(zip(cases, single)):
        sig = _signal(case[0], case[1])
        for placement in ("blocks", "replicated"):
            runs = [per_rank[r][i][placement] for r in range(world)]
            r0 = runs[0]
            assert len(r0["steps"]) == len(ref["steps"]) > 0
            for r in runs[1:]:
                assert r["losses"] == r0["losses"] and r["batch_losses"] == r0["batch_losses"]  # same floats
                assert r["metrics"] == r0["metrics"]
                for a, b in zip(r["steps"], r0["steps"]):                                       # replicas identical
                    assert all(torch.equal(p, q) for p, q in zip(a, b))                       # after every step
            for a, b in zip(r0["losses"] + r0["batch_losses"], ref["losses"] + ref["batch_losses"]):
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
            for a, b in zip(r0["steps"], ref["steps"]):
                for p, q in zip(a, b):
                    torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)
            for m, mref in zip(r0["metrics"], ref["metrics"]):
                assert m.keys() == mref.keys() and all(math.isclose(m[k], mref[k], rel_tol=1e-9) for k in m)
            row_bytes = sig.x.shape[1] * sig.x.element_size()
            for rank, r in enumerate(runs):
                report = r["report"]
                t = report["totals"]                                     # this rank's bytes since construction
                steps = len(r["steps"])
                # every byte the rank gave a collective: DDP's summed gradients (the parameters once per step),
                # the loss (8 bytes per step), evaluate's sums; nothing else, so no feature row
                assert t["features"] == 0 and t["steps"] == steps
                assert t["gradients"] == steps * r["param_bytes"] and t["loss"] == 8 * steps
                assert t["metrics"] == 3 * 8 * 3                                   # 3 evaluations of (mse, mae, k)
                # the last epoch (half of the steps), all ranks: counted at the collectives = the window arithmetic
                measured, predicted = report["measured"], report["predicted"]
                assert report["steps"] == steps // 2 and report["ranks"] == world
                assert measured["gradients"] == predicted["gradients"] == world * (steps // 2) * r["param_bytes"]
                assert measured["loss"] == predicted["loss"] == world * 8 * (steps // 2)
                assert measured["features"] == measured["metrics"] == measured["setup"] == 0
                assert measured["total"] == predicted["total"] == measured["gradients"] + measured["loss"]
                counted_bytes, calls = r["counted"]
                assert counted_bytes == {"all_reduce": t["gradients"] + t["loss"] + t["metrics"]}, calls
                if placement == "replicated":
                    assert r["held"] is None and r["x_storage"] == sig.x.numel() * sig.x.element_size()
                else:
                    expected = _expected_held(case, rank, world)
                    assert r["held"] == expected
                    rows = sum(int(sig.node_ptr[s + 1] - sig.node_ptr[s]) for s in expected)
                    # the rank's rows only, in storage of their own (not views of the whole signal's)
                    assert r["x_storage"] == r["signal_storage"] == rows * row_bytes
                    assert rows < sig.num_vertex_time_nodes
            if placement == "blocks":
                evals = [r["eval_windows"] for r in runs]
                for split in ("train", "val", "test"):   # the ranks' evaluation windows are the split, once
                    assert sum((e[split] for e in evals), []) == ref["eval_windows"][split]


def test_bad_placement():
    with pytest.raises(ModelInputError, match="placement"):
        _build("covid", 12, 3, 1, 4, placement="nodes")
