r"""Windows of one rank over a signal on disk: ``WindowTrainer(model, path,
placement="blocks")`` under a process group of :math:`R` ranks, where each
rank reads only the snapshots its windows read
(:mod:`~pyg_dynscale.windows.block_placement`'s :math:`\mathcal{S}_r`: its
training blocks with the ``lags - 1`` overlap before them, its share of the
validation and test windows, and every window's ``horizon`` targets) from a
:class:`~pyg_dynscale.windows.mapped_signal.MappedSignal`.

What the whole-signal trainer computes from every snapshot is computed here
from each rank's part, and combined with one ``all_gather`` of a few numbers
per rank (:func:`combine`), so the result is the same on every rank:

* **Layout facts** (:class:`~pyg_dynscale.windows.snapshot_store.StoreLayout`):
  ``uniform`` from the global ``node_ptr`` (:math:`[T+1]`, read whole);
  ``fixed`` and ``static`` checked by each rank over its held snapshots, then
  AND-ed, and for ``static`` the ranks' graphs compared by a SHA-256 of each
  rank's first held graph. They are facts of the snapshots the ranks hold
  (a snapshot no window reads is never opened).
* **Standardization** (:class:`~pyg_dynscale.windows.view.Standardizer`):
  the training snapshot range :math:`[s_0, e_{\text{last}}]` is cut at the
  first window start of each rank's first block, :math:`o_r`; rank :math:`r`
  sums its range :math:`[o_r, o_{r+1})` (rows it holds; snapshots between
  windows with ``stride > lags + horizon - 1``, which it does not hold, are
  streamed from the map for the statistics only) into a count
  :math:`n_r`, mean :math:`\mu_r` and centred sum of squares :math:`M_r`
  (float64), combined as Chan et al.'s parallel variance:

  .. math::
      n = \sum_r n_r, \quad \mu = \frac{1}{n} \sum_r n_r \mu_r, \quad
      \sigma^2 = \frac{1}{n} \sum_r \left(M_r + n_r (\mu_r - \mu)^2\right).

  The statistics then agree with the whole-signal ones to rounding
  (:math:`\sim 10^{-16}` relative in float64; they are rounded to the
  features' dtype, where the whole-signal trainer sums a float32 signal in
  float32), not bit for bit; everything else is the whole-signal blocks
  placement's computation bit for bit.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from ..errors import ModelInputError
from .mapped_signal import MappedSignal
from .snapshot_store import StoreLayout
from .view import Standardizer, WindowView

__all__ = ["RankWindowView", "RankFacts", "combine", "gather_facts"]


@dataclass(frozen=True)
class RankFacts:
    r"""What one rank contributes to the whole signal's facts.

    Attributes:
        fixed (bool): its held snapshots have the rows :math:`0 \ldots V-1` in order.
        static (bool): its held snapshots share one graph and there are no edge fields.
        graph (str): SHA-256 of its first held snapshot's edges and weights.
        count (int): :math:`n_r`, training rows it summed (0: none, or no standardization).
        mean (Tensor, optional): :math:`\mu_r` ``[F...]`` float64.
        m2 (Tensor, optional): :math:`M_r` ``[F...]`` float64.
    """

    fixed: bool
    static: bool
    graph: str
    count: int = 0
    mean: Optional[Tensor] = None
    m2: Optional[Tensor] = None


class RankWindowView(WindowView):
    r"""A :class:`~pyg_dynscale.windows.view.WindowView` over a signal on
    disk whose :meth:`hold` reads the held snapshots from the map (the window
    arithmetic and splits are the whole signal's: they need only ``node_ptr``).

    Args:
        source (MappedSignal): the signal file.
        lags, horizon, stride, ratio: as :class:`WindowView`.
        standardize (bool): z-score the features with the statistics
            :func:`combine` returns (applied by :meth:`standardize_with`).
    """

    def __init__(self, source: MappedSignal, lags: int, horizon: int = 1, stride: int = 1,
                 ratio: Sequence[float] = (0.7, 0.1, 0.2), standardize: bool = False) -> None:
        super().__init__(source.signal, lags, horizon, stride, ratio=ratio, standardize=False)
        #: the file (dropped by :meth:`close_source` once the rank has read what it needs)
        self.source: Optional[MappedSignal] = source
        #: whether :meth:`standardize_with` is to be called
        self.standardize = bool(standardize)

    def hold(self, snapshots: Tensor) -> None:
        r"""Keep only ``snapshots`` (sorted global indices), read from the map:
        the signal becomes those snapshots in memory, as :meth:`WindowView.hold`.

        Where the file stores the features and targets as one series (a
        static graph stored once whose ``x`` and ``y`` share one storage,
        :meth:`MappedSignal.read_series <pyg_dynscale.windows.mapped_signal.MappedSignal.read_series>`:
        :func:`~pyg_dynscale.windows.series_signal`'s :math:`X_t = D_t`,
        :math:`Y_t = D_{t+1}`), the part holds the series once: ``x`` and
        ``y`` are views of one buffer, and :attr:`held` adds, after every run
        of consecutive snapshots but the last, its next snapshot :math:`b`
        (the buffer's slot between the runs: its ``x`` is :math:`X_b`, its
        ``y`` is the next run's first :math:`X`, which no window reads).
        Every value a window reads is the file's; the static graph's basis of
        each snapshot does not depend on its neighbours in the storage, so
        the results are those of :meth:`WindowView.hold` bit for bit."""
        if self.source is None:
            raise ModelInputError("view", "has closed its signal file.", "hold before close_source().")
        idx = torch.as_tensor(snapshots, dtype=torch.long).reshape(-1)
        if self.source.static:
            # a static graph only: an added snapshot changes which snapshots are neighbours in the storage, which
            # an incremental aggregation over changing graphs would chain through (a static one never does)
            self.signal, idx = self.source.read_series(idx)
        else:
            self.signal = self.source.read(idx)
        local = torch.full((self.num_snapshots_total,), -1, dtype=torch.long)
        local[idx] = torch.arange(idx.numel())
        self.x = self.signal.x
        self.held, self._local = idx, local

    def standardize_with(self, standardizer: Standardizer) -> None:
        """Apply ``standardizer`` to the held features (once, one tensor the size of the held ``x``)."""
        self.standardizer = standardizer
        self.x = standardizer(self.signal.x)

    def close_source(self) -> None:
        """Drop the map: the rank keeps its held snapshots only."""
        self.source = None

    # ------------------------------------------------------------------ this rank's facts
    def facts(self, blocks: int, my_blocks: range, edge_fields: tuple) -> RankFacts:
        r"""This rank's :class:`RankFacts` after :meth:`hold` (``blocks``: the
        training blocks; ``my_blocks``: this rank's, consecutive)."""
        sig = self.signal
        held = StoreLayout.of(sig, edge_fields)
        ei0, ew0 = sig.snapshot_edges(0)  # views; a static signal's one list (never expanded)
        h = hashlib.sha256(ei0.contiguous().numpy().tobytes())
        if ew0 is not None:
            h.update(ew0.contiguous().numpy().tobytes())
        facts = dict(fixed=held.fixed, static=held.static, graph=h.hexdigest())
        if self.standardize:
            facts.update(self._moments(*self._owned_training_range(blocks, my_blocks)))
        return RankFacts(**facts)

    def _owned_training_range(self, blocks: int, my_blocks: range) -> tuple:
        r""":math:`[o_r, o_{r+1})`: the training snapshots whose rows this rank sums."""
        train = self.split("train")
        parts = torch.tensor_split(train, blocks)
        lo = int(self.starts[parts[my_blocks.start][0]])
        if my_blocks.stop < blocks:
            hi = int(self.starts[parts[my_blocks.stop][0]])
        else:
            hi = int(self.starts[train[-1]]) + self.lags
        return lo, hi

    def _moments(self, lo: int, hi: int) -> dict:
        """``count``, ``mean``, ``m2`` of the raw feature rows of snapshots ``lo .. hi-1`` (float64)."""
        pos = self._local[lo:hi]
        if bool((pos >= 0).all()) and bool((pos[1:] == pos[:-1] + 1).all()):  # held, consecutive: a view
            p = self.signal.node_ptr
            rows = self.signal.x[int(p[int(pos[0])]):int(p[int(pos[-1]) + 1])]
        else:  # snapshots between windows (stride > lags + horizon - 1): streamed for the statistics only
            if self.source is None:
                raise ModelInputError("view", "has closed its signal file.", "compute facts before close_source().")
            rows = self.source.node_rows("x", lo, hi)
        rows = rows.to(torch.float64)
        if rows.shape[0] == 0:
            return {"count": 0}
        mean = rows.mean(0)
        return {"count": int(rows.shape[0]), "mean": mean, "m2": ((rows - mean) ** 2).sum(0)}


def gather_facts(facts: RankFacts) -> list:
    """Every rank's :class:`RankFacts`, in rank order (one ``all_gather_object``
    over the host group: a collective, called on every rank after the set-up
    agreement)."""
    from ..training.ranks import host_all_gather_object

    return host_all_gather_object(facts)


def combine(everyone: list, node_ptr: Tensor, num_vertices: int, dtype: torch.dtype,
            standardize: bool) -> tuple:
    r"""``(StoreLayout, Standardizer or None)`` of the whole signal from the
    ranks' :class:`RankFacts` (module docstring); ``node_ptr``: the global
    ``[T+1]`` offsets; ``dtype``: the features' dtype."""
    counts = node_ptr[1:] - node_ptr[:-1]
    n0 = int(counts[0])
    uniform = bool((counts == n0).all()) and n0 > 0
    fixed = uniform and all(f.fixed for f in everyone)
    static = uniform and all(f.static for f in everyone) and len({f.graph for f in everyone}) == 1
    layout = StoreLayout(uniform, fixed, static, int(num_vertices))
    if not standardize:
        return layout, None
    parts = [f for f in everyone if f.count]
    n = sum(f.count for f in parts)
    if n == 0:
        raise ModelInputError("standardize", "the training snapshots hold no rows.",
                              "use standardize=False, or a larger training ratio.")
    mean = sum(f.count * f.mean for f in parts) / n
    m2 = sum(f.m2 + f.count * (f.mean - mean) ** 2 for f in parts)
    std = (m2 / n).sqrt()
    std = torch.where(std > 0, std, torch.ones_like(std))
    return layout, Standardizer(mean.to(dtype), std.to(dtype))
