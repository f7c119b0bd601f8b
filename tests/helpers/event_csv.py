"""What the ``train-events`` / ``partition-events`` command tests share: a JODIE CSV of a
synthetic stream and the in-process emulation of a ``train-events`` run."""
from __future__ import annotations

from pathlib import Path

import torch

from pyg_dynscale.cli import build_parser
from pyg_dynscale.ctdg import synthetic_events


def write_events_csv(path: Path, *args, header: bool = False, **kwargs) -> str:
    """``synthetic_events(*args, **kwargs)`` (a bipartite stream) as a JODIE CSV at ``path``: users,
    then items numbered from 0, timestamp, label 0, the message features; ``header``: a first line
    ``user,item,timestamp,state_label,f1,...``."""
    d = synthetic_events(*args, **kwargs)
    umax = int(d.src.max())
    rows = [",".join(["user", "item", "timestamp", "state_label"] + [f"f{i + 1}" for i in range(d.msg.size(1))])]
    rows = rows if header else []
    rows += [f"{s},{t - umax - 1},{ts},0,{','.join(repr(x) for x in m)}"
             for s, t, ts, m in zip(d.src.tolist(), d.dst.tolist(), d.t.tolist(), d.msg.tolist())]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def emulate(events_csv: str, *argv: str, epochs: int = 2) -> tuple:
    """``(trainer, losses, val, test)``: ``train-events events_csv *argv`` built in this process
    (one process, the same schedule), ``epochs`` epochs each followed by the validation metrics,
    then the test metrics."""
    from pyg_dynscale.commands.train_events import build, load_events

    args = build_parser().parse_args(["train-events", events_csv, *argv])
    torch.set_num_threads(1)
    trainer = build(args, load_events(args))
    losses, val = [], []
    for _ in range(epochs):
        losses.append(trainer.train_epoch())
        val.append(trainer.evaluate("val"))
    return trainer, losses, val, trainer.evaluate("test")
