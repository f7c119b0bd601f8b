"""What the benchmarks share: where they find the project's real data, DGC's model
forms, and the command line and epoch timing of the Sven benchmarks on 2 gloo processes.

The data: ``$PYG_DYNSCALE_DATASETS`` if set, else ``../shared/datasets`` next to the
checkout (the layout of the team's machines and CI).
"""
from __future__ import annotations

import os
from pathlib import Path

DATASETS = Path(
    os.environ.get("PYG_DYNSCALE_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets")
)

#: The model forms DGC evaluates (§7.1), which the partitioning benchmarks use
#: by default: T-GCN with ``gcn_layers=2`` ("three 2-layer GCNs"), DySAT with
#: ``num_blocks=2``, MPNN-LSTM as the ``"mpnnlstm"`` preset (DGC's form
#: already). PyGT's one-layer T-GCN and a one-block DySAT exchange only raw
#: input features spatially; the distributed runtime loads those once before
#: training, so their spatial edges cost nothing per epoch (weight 0) and a
#: partitioner comparison on them says nothing about spatial cuts.
DGC_FORMS = {"tgcn": {"gcn_layers": 2}, "dysat": {"num_blocks": 2}, "mpnnlstm": {}}


def dgc_pattern(model: str, in_channels: int, hidden: int, **kwargs):
    """``DependencyPattern.preset(model, in_channels, hidden)`` in DGC's model
    form (:data:`DGC_FORMS`; other presets unchanged). ``kwargs`` override."""
    from pyg_dynscale.partition import DependencyPattern

    key = str(model).lower().replace("-", "").replace("_", "")
    return DependencyPattern.preset(model, in_channels, hidden, **{**DGC_FORMS.get(key, {}), **kwargs})


def sven_args(doc: str, argv=None):
    """The command line of the Sven benchmarks on a synthetic stream (``--events``, ``--nodes``,
    ``--dim``, ``--batch-size``, ``--epochs``; ``--quick``: a tiny stream for the smoke tests)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=2_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tiny stream (smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.events, args.nodes, args.dim, args.batch_size, args.epochs = 1_200, 150, 8, 100, 1
    return args


def spawn_two(rank_fn, args) -> list:
    """``rank_fn(rank, world, args)`` on 2 gloo processes (every rank's result); prints the setup
    with the load average at the start and the end (other processes distort the figures)."""
    from pyg_dynscale.training.launch import spawn

    load0 = os.getloadavg()[0]
    runs = spawn(rank_fn, 2, args, timeout=3600)
    print(f"2 gloo processes, 1 thread each, {os.cpu_count()} cores; load average {load0:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at the end; {args.events} events, {args.nodes} nodes, dim {args.dim}, "
          f"local batch {args.batch_size}, float32")
    return runs


def timed_epochs(trainer, epochs: int) -> tuple:
    """``(seconds of each epoch, last epoch loss)`` of ``epochs`` calls of ``trainer.train_epoch()``."""
    import time

    secs, loss = [], None
    for _ in range(epochs):
        t0 = time.perf_counter()
        loss = trainer.train_epoch()
        secs.append(time.perf_counter() - t0)
    return secs, loss


def steady_seconds(per_rank: list, epochs: int) -> float:
    """The slowest rank's mean seconds per epoch over the epochs after the first (the first
    alone with one epoch); ``per_rank``: every rank's ``{"secs": [...]}``."""
    later = [max(p["secs"][e] for p in per_rank) for e in range(1, epochs)] or [max(p["secs"][0] for p in per_rank)]
    return sum(later) / len(later)
