r"""Pictures of partitions (matplotlib, imported lazily; Agg unless a backend is already chosen).

* :func:`plot_owner_heatmap`: vertices (rows) x snapshots (columns), each cell
  coloured by the rank owning vertex-time node :math:`(i, t)` (white: vertex
  absent). Rows are ordered by dominant owner (then dominant chunk), then first
  appearance, so snapshot ranges (PSS), sequence blocks (PTS) and chunks (PGC)
  show as blocks. Large graphs are subsampled to at most ``max_vertices`` rows
  and ``max_snapshots`` columns (evenly spaced).
* :func:`plot_traffic`: stacked bars of bytes per epoch by kind per scheme.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

import torch
from torch import Tensor

from ..errors import PartitionError
from .partition import Partition

if TYPE_CHECKING:  # pragma: no cover
    from ..data.signal import DynamicGraphSignal


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        from ..errors import MissingDependencyError
        raise MissingDependencyError("matplotlib", "Partition plots", "pip install matplotlib") from None
    import os
    import sys
    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        # headless default for scripts; never override a backend already chosen (Jupyter's inline one)
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    return plt


def owner_grid(signal: "DynamicGraphSignal", partition: Partition, *, time: bool = False, by_chunk: bool = False,
               max_vertices: int = 400, max_snapshots: int = 400) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The heatmap matrix: ``([V', T'] owner or -1, row vertex ids [V'], column snapshots [T'])``."""
    partition.check_signal(signal)
    sg = signal.supergraph()
    own = (partition.temporal_owner if time else partition.owner).cpu()
    key = partition.chunk.cpu() if (by_chunk and partition.chunk is not None) else own
    vert, t = sg.vertex.cpu(), sg.time.cpu()
    present = torch.unique(vert)
    vidx = torch.searchsorted(present, vert)
    V, T = present.numel(), sg.num_snapshots
    def dominant(k: Tensor) -> Tensor:  # the mode of each vertex's keys (sparse: unique (vertex, key) pairs)
        K = int(k.max()) + 1 if k.numel() else 1
        pair, cnt = torch.unique(vidx * K + k, return_counts=True)
        best = torch.zeros(V, dtype=torch.long).scatter_reduce_(0, pair // K, cnt, reduce="amax")
        win = cnt == best[pair // K]
        dom = torch.full((V,), K, dtype=torch.long).scatter_reduce_(0, pair[win] // K, pair[win] % K, reduce="amin")
        return dom

    first = torch.full((V,), T, dtype=torch.long).scatter_reduce_(0, vidx, t, reduce="amin")
    # rows: by dominant rank, then (PGC) dominant chunk, then first appearance
    sort_key = first
    if by_chunk and partition.chunk is not None:
        sort_key = dominant(key) * (T + 1) + first
    order = torch.argsort(sort_key, stable=True)
    order = order[torch.argsort(dominant(own)[order], stable=True)]
    rows = order[torch.linspace(0, V - 1, min(V, max_vertices)).round().long()] if V > max_vertices else order
    cols = torch.linspace(0, T - 1, min(T, max_snapshots)).round().long() if T > max_snapshots else torch.arange(T)
    grid = torch.full((V, T), -1, dtype=torch.long)
    grid[vidx, t] = own
    return grid[rows][:, cols], present[rows], cols


def plot_owner_heatmap(signal: "DynamicGraphSignal", partition: Partition, path: Optional[str] = None, *,
                       time: bool = False, by_chunk: bool = False, max_vertices: int = 400,
                       max_snapshots: int = 400, title: Optional[str] = None):
    """Draw the owner heatmap; save it to ``path`` (PNG, ...) if given. Returns the figure.

    Args:
        time: colour by ``time_owner`` (PSS-TS's time encoder) instead of ``owner``.
        by_chunk: order rows by dominant chunk (PGC) instead of dominant owner.
    """
    plt = _pyplot()
    from matplotlib.colors import ListedColormap

    grid, _, cols = owner_grid(signal, partition, time=time, by_chunk=by_chunk,
                               max_vertices=max_vertices, max_snapshots=max_snapshots)
    R = partition.num_parts
    base = plt.get_cmap("tab20" if R > 10 else "tab10")
    colors = ["white"] + [base(i % base.N) for i in range(R)]
    fig, ax = plt.subplots(figsize=(8, 6))
    im = ax.imshow((grid + 1).numpy(), aspect="auto", interpolation="nearest",
                   cmap=ListedColormap(colors), vmin=-0.5, vmax=R + 0.5)
    ax.set_xlabel("snapshot" + (" (subsampled)" if cols.numel() < signal.num_snapshots else ""))
    ax.set_ylabel("vertex (by dominant rank, " + ("chunk, " if by_chunk else "") + "first appearance)")
    ax.set_title(title or f"{partition.scheme}: {'time ' if time else ''}owner of each vertex-time node, {R} ranks")
    cb = fig.colorbar(im, ax=ax, ticks=range(R + 1))
    cb.ax.set_yticklabels(["absent"] + [f"rank {r}" for r in range(R)])
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
        plt.close(fig)
    return fig


def plot_traffic(rows: Sequence[dict], path: Optional[str] = None, *, title: str = "Communication per epoch"):
    """Stacked bars of ``bytes_spatial``/``bytes_temporal``/``bytes_redistribution``
    (MiB) per row of :func:`~pyg_dynscale.partition.metrics.compare`, labelled
    by scheme, with ``lambda`` above each bar."""
    if not rows:
        raise PartitionError("rows", "nothing to plot.", "Pass the rows of metrics.compare(...).")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(rows) + 2), 4))
    labels = [str(r.get("scheme", i)) for i, r in enumerate(rows)]
    bottom = [0.0] * len(rows)
    for kind in ("spatial", "temporal", "redistribution"):
        vals = [r.get(f"bytes_{kind}", 0) / 2**20 for r in rows]
        ax.bar(labels, vals, bottom=bottom, label=kind)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in enumerate(rows):
        if "lambda" in r:
            ax.text(i, bottom[i], f"λ={r['lambda']:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("MiB per epoch (forward + backward)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
        plt.close(fig)
    return fig
