r"""Bytes of one epoch of windowed training under three placements (ReInc
Table 1's comparison), computed from the window arithmetic and, for the
vertex partition, from the package's
:class:`~pyg_dynscale.partition.CommunicationPlan` (nothing is run).

For the training windows of a :class:`~pyg_dynscale.windows.WindowView` on
:math:`R` ranks:

* ``"blocks"`` (ReInc): rank :math:`r` holds the snapshots its windows read
  (:func:`~pyg_dynscale.windows.block_placement.held_snapshots`); no feature row
  is sent.
* ``"replicated"`` (PyGT's Dask + DDP): every rank holds every snapshot; no
  feature row is sent.
* a vertex partition (DGC / ESDG-style, e.g. ``"pts"``, ``"pss"``,
  ``"pgc"``): rank :math:`r` holds the vertex-time rows it owns plus the
  input halo rows loaded once; every time a window reads snapshot
  :math:`t`, the plan's non-static rows of :math:`t` cross the group forward
  and their gradients backward, so a row of snapshot :math:`t` costs
  :math:`2 c_t` sends with :math:`c_t` the training windows that read
  :math:`t` (a temporal row from :math:`t_u` to :math:`t_v`: the windows
  that read both).

Every placement all-reduces the same gradients: ``steps`` global batches
times the parameter bytes :math:`P` per rank, a ring all-reduce sending
:math:`2(R-1)P` bytes per step over all ranks.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from .batching import block_batch_parts
from .block_placement import eval_share, held_snapshots
from .view import WindowView

__all__ = ["placement_bytes", "windows_reading"]


def windows_reading(starts: Tensor, lags: int, first: Tensor, last: Tensor) -> Tensor:
    r"""For each pair, how many windows (sorted ``starts``, :math:`L` snapshots
    each) read snapshots ``first .. last``: :math:`\#\{s : last - L + 1 \le s
    \le first\}`."""
    lo = torch.searchsorted(starts, last - lags + 1, right=False)
    hi = torch.searchsorted(starts, first, right=True)
    return (hi - lo).clamp_min(0)


def placement_bytes(signal: Any, lags: int, batch_size: int, world: int, param_bytes: int, pattern: Any = None, *,
                    horizon: int = 1, stride: int = 1, ratio: Sequence[float] = (0.7, 0.1, 0.2),
                    schemes: Sequence[str] = ("pts", "pgc"), seed: int = 0, bytes_per_element: int = 4) -> list:
    r"""One row per placement (``"blocks"``, ``"replicated"``, then each
    vertex-partition scheme): a dict with

    * ``placement``, ``ranks``, ``steps`` (optimizer steps per epoch);
    * ``feature_bytes``: feature / hidden rows sent per epoch, all ranks,
      forward + backward (0 for ``blocks`` and ``replicated``);
    * ``load_bytes``: rows moved once before training (the vertex
      partition's input halo);
    * ``gradient_bytes``: :math:`\text{steps} \cdot 2(R-1) P` (ring
      all-reduce, all ranks);
    * ``held_feature_bytes``: the largest rank's input feature bytes;
    * ``total_bytes``: feature + gradient bytes per epoch.

    Args:
        signal: the signal (every snapshot; ``ratio`` splits its windows).
        lags, batch_size, horizon, stride, ratio: as ``WindowTrainer``
            (``blocks`` = ``world``).
        world: ranks :math:`R`.
        param_bytes: bytes of the model's parameters :math:`P`.
        pattern: the model's :class:`~pyg_dynscale.partition.DependencyPattern`
            for the vertex partitions (``None``: no vertex-partition rows).
        schemes: partition schemes of the vertex-partition rows.
        bytes_per_element: feature element size (the pattern's for its rows).
    """
    from ..partition import CommunicationPlan
    from ..partition.schemes.dispatch import partition
    from ..runtime.paths import as_signal

    sig = as_signal(signal)
    view = WindowView(sig, lags, horizon, stride, ratio=ratio)
    train = view.split("train")
    starts = view.starts.index_select(0, train)
    steps = len(block_batch_parts(train, batch_size, world))
    grad = steps * 2 * (world - 1) * int(param_bytes)
    F = sig.x.shape[1:].numel()
    row_bytes = F * bytes_per_element
    counts = sig.nodes_per_snapshot
    blocks = torch.tensor_split(train, world)
    held = []
    for r in range(world):
        mine = [blocks[r]] + [eval_share(view.split(s), world, r) for s in ("val", "test")]
        held.append(int(counts[held_snapshots(view.starts, mine, view.lags, view.horizon)].sum()) * row_bytes)
    base = {"ranks": world, "steps": steps, "gradient_bytes": grad, "feature_bytes": 0, "load_bytes": 0}
    rows = [dict(base, placement="blocks", held_feature_bytes=max(held), total_bytes=grad),
            dict(base, placement="replicated", held_feature_bytes=int(counts.sum()) * row_bytes, total_bytes=grad)]
    if pattern is None:
        return rows
    sg = sig.supergraph()
    nxt = torch.full((sg.num_nodes,), -1, dtype=torch.long)
    u, v = sg.temporal_edge_index
    nxt[u] = sg.time[v]
    for scheme in schemes:
        part = partition(sig, scheme, world, pattern, seed=seed)
        plan = CommunicationPlan.build(sig, part, pattern)
        sent, load = 0, 0
        loaded = torch.zeros(world, dtype=torch.long)
        for e in plan:
            if e.static:
                load += e.row_bytes
                loaded += torch.bincount(e.dst, minlength=world)
                continue
            t = sg.time[e.gid]
            last = torch.where(nxt[e.gid] >= 0, nxt[e.gid], t) if e.kind == "temporal" else t
            c = windows_reading(starts, view.lags, t, last)
            sent += 2 * int(c.sum()) * e.width * e.bytes_per_element
        owned = torch.bincount(part.owner, minlength=world)
        rows.append(dict(base, placement=scheme, feature_bytes=sent, load_bytes=load,
                         held_feature_bytes=int((owned + loaded).max()) * row_bytes, total_bytes=sent + grad))
    return rows
