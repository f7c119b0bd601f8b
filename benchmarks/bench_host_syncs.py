r"""Host read-backs and device operations per training step, ours vs the loop users run today, in one run.

On a GPU every value the host reads back from a device tensor (``.item()``,
``.tolist()``, ``nonzero``, boolean masks, ``unique``...) waits for every kernel
queued before it, and every small op is a kernel launch: the per-step floor of
a loop on small graphs. Both are counted here on the CPU with
``tests/helpers/host_syncs.py`` (a dispatch-mode counter that follows which tensors a
GPU run keeps on the device), so the figures are exact and the same on any
machine, busy or not -- no GPU needed, no timing:

1. **Event streams**: PyG's ``examples/tgn.py`` training loop (its code, its
   ``TGNMemory`` / ``LastNeighborLoader``, data on the device as the example
   puts it) vs :class:`~pyg_dynscale.ctdg.MemoryTrainer` with the replicated,
   partitioned and Sven memory (one process), same modules and stream, per
   training step (a batch of 200 events).
2. **Windows**: PyGT's index-batching examples (``examples/indexBatching``:
   ``BatchedDCRNN``, ``TGCN2`` + Linear, ``A3TGCN2`` + Linear; their loops, from
   ``benchmarks/bench_windows.py``) vs :class:`~pyg_dynscale.windows.WindowTrainer`
   on the same windows and weights (reuse on and off), per batch, on Chickenpox.

"device ops" counts the operations run on device-resident tensors, views
excluded: a proxy for kernel launches. Ratios are theirs / ours.

    python benchmarks/bench_host_syncs.py            # both sections
    python benchmarks/bench_host_syncs.py --quick    # smaller stream, one family (smoke test)
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Callable, Optional

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events  # noqa: E402
from tests.helpers.host_syncs import HostSyncs, on_the_device  # noqa: E402


def _ratio(theirs: float, ours: float) -> str:
    if ours == 0:
        return "none left" if theirs else "="
    return f"{theirs / ours:.1f}x"


def _row(label: str, syncs: float, worst: Optional[int], ops: float, ref: Optional[tuple] = None) -> None:
    """One line: read-backs per step (mean, and the worst step where steps are counted one by one),
    device ops per step, and the ratios theirs / ours against ``ref`` = (syncs, ops)."""
    tail = f" {_ratio(ref[0], syncs):>9} {_ratio(ref[1], ops):>8}" if ref else f" {'':>9} {'':>8}"
    print(f"  {label:<46} {syncs:>9.2f} {'-' if worst is None else worst:>6} {ops:>10.0f}{tail}", flush=True)


def _header(what: str) -> None:
    print(f"  {what:<46} {'syncs/st':>9} {'worst':>6} {'dev ops/st':>10} {'syncs':>9} {'ops':>8}")


# ------------------------------------------------------------------ 1. event streams
def _stream(quick: bool):
    d = synthetic_events(2_000 if quick else 12_000, 300 if quick else 1_000, msg_dim=16, seed=0)
    return d


def _model(d, seed: int = 0) -> TGN:
    torch.manual_seed(seed)
    return TGN(d.num_nodes, d.msg.size(-1), memory_dim=32, time_dim=16, embedding_dim=32)


def example_steps(d, epochs: int) -> tuple[list, float]:
    """PyG's ``examples/tgn.py`` ``train()`` (``bench_ctdg.example_epoch``), each batch counted, with
    the data, the memory, the neighbour loader's state and ``assoc`` on the device, as the example
    puts them."""
    from bench_ctdg import example_epoch, example_setup

    model = _model(d)
    train_data, loader, nl, opt, assoc = example_setup(d, model)
    per_step, ops = [], [0]

    @contextlib.contextmanager
    def counted(batch):
        with HostSyncs() as s:
            s.mark_modules(model.memory, model.gnn, model.link_pred).mark_optimizer(opt)
            s.mark(d.src, d.dst, d.t, d.msg, train_data.src, assoc, nl.neighbors, nl.e_id, nl._assoc)
            s.mark(batch.src, batch.dst, batch.t, batch.msg, batch.neg_dst, batch.n_id)
            yield
        per_step.append(s.count)
        ops[0] += s.device_ops

    for _ in range(epochs):
        example_epoch(d, train_data, model, loader, nl, opt, assoc, around=counted)
    return per_step, ops[0] / len(per_step)


def _device_state(tr: MemoryTrainer) -> list:
    """What a GPU run of the trainer keeps on the device when a step starts."""
    out = [tr.msg, None if tr._ctx is None else tr._ctx.loss_sum]
    if tr.placement is not None:
        out += [tr.placement.memory, tr.placement.last_update, *tr.placement.table()]
    return [x for x in out if x is not None]


def trainer_steps(d, epochs: int, **kw: Any) -> tuple[list, float]:
    """Every training step of ``MemoryTrainer(**kw)`` counted (its ``_train_step``)."""
    tr = MemoryTrainer(_model(d), d, batch_size=200, lr=1e-4, num_neighbors=10, seed=0, **kw)
    per_step, ops, step = [], [0], tr._train_step

    def counted(s, steps):
        with HostSyncs() as syncs:
            syncs.mark_modules(tr.memory, tr.gnn, tr.link_pred).mark_optimizer(tr.optimizer)
            syncs.mark(*_device_state(tr))
            out = step(s, steps)
        per_step.append(syncs.count)
        ops[0] += syncs.device_ops
        return out

    tr._train_step = counted
    for _ in range(epochs):
        tr.train_epoch()
    tr.close()
    return per_step, ops[0] / len(per_step)


def section_events(quick: bool) -> dict:
    d = _stream(quick)
    print(f"1. Event streams: a synthetic stream of {d.num_events:,} events, {d.num_nodes:,} nodes, batches of 200, "
          "TGN 32/16/32, 2 epochs, per training step", flush=True)
    _header("loop")
    ref_steps, ref_ops = example_steps(d, 2)
    out = {"example": (sum(ref_steps) / len(ref_steps), ref_ops)}
    _row("PyG examples/tgn.py train()", out["example"][0], max(ref_steps), ref_ops)
    for placement in ("replicated", "partitioned", "sven"):
        steps, ops = trainer_steps(d, 2, memory_placement=placement)
        out[placement] = (sum(steps) / len(steps), ops)
        _row(f"MemoryTrainer, memory_placement={placement!r}", out[placement][0], max(steps), ops, out["example"])
    return out


# ------------------------------------------------------------------ 2. windows
def _count_row(row: Any, run: Callable[[], Any], modules: list, optimizer: torch.optim.Optimizer,
               scope: tuple) -> tuple[int, int]:
    with HostSyncs() as s, on_the_device(s, scope):
        s.mark_modules(*modules).mark_optimizer(optimizer)
        run()
    return s.count, s.device_ops


def section_windows(quick: bool) -> dict:
    import bench_windows as bw

    args = argparse.Namespace(batch_size=32, epochs=1, quick=quick, max_batches=None)
    data = bw.load_chickenpox(args.batch_size, 4, None)
    print(f"\n2. Windows: Chickenpox ({data.N} nodes, {data.T} weeks, lags 4, horizon 4), batches of "
          f"{args.batch_size}, one epoch, per batch", flush=True)
    _header("loop")
    out: dict = {}
    for family in (("DCRNN",) if quick else ("DCRNN", "TGCN", "A3TGCN")):
        rows = bw.family_rows(family, data, args, torch.device("cpu"), torch.float32, skip_reuse_off=quick)
        ref = None
        for r in rows:
            if r.kind == "pygt":
                n = r.n_batches
                syncs, ops = _count_row(r, lambda r=r: r.run(None), [r.model], r.opt, ("benchmarks/bench_windows",))
            else:
                tr = r.trainer
                mods = [m for m in (tr.model, tr.head, tr.decoder) if m is not None]
                n = r.n_batches
                syncs, ops = _count_row(r, tr.train_epoch, mods, tr.optimizer, ("pyg_dynscale/windows/",))
            _row(r.label, syncs / n, None, ops / n, ref)  # counted over the epoch: the mean per batch
            if r.kind == "pygt":
                ref = (syncs / n, ops / n)
            out[r.label] = (syncs / n, ops / n)
            r.release()
    return out


def main(argv: Optional[list] = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smaller stream and one window family (smoke test)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print("Host read-backs (syncs) and device ops per step, counted on the CPU (tests/helpers/host_syncs.py); "
          "ratios: theirs / ours\n")
    return {"events": section_events(args.quick), "windows": section_windows(args.quick)}


if __name__ == "__main__":
    main()
