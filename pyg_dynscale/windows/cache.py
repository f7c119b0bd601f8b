r"""ReInc's two-level cache (§3.3) for windowed training with reuse.

**Global level** (:class:`GlobalCache`): the parameter-free input aggregation
of each snapshot (the reuse implementation's ``basis`` rows of snapshot
:math:`t`, e.g. :math:`\hat A_t X_t` or :math:`T_k(\hat L_t) X_t`), kept for
the whole run and read by every window, batch and epoch that contains
:math:`t`. Unbounded (``cache_bytes=None``), every snapshot's entry is
computed once before training (the whole storage at once; on a static graph
from its one snapshot graph, :func:`~pyg_dynscale.nn.reuse.static_basis`,
with no ``T x E`` tensor). With a bound in
bytes, an entry is computed on its first read (each snapshot alone, so the
values do not depend on the bound), and after each batch step the cache keeps
the entries of highest priority that fit, ReInc's Eq. (3):

.. math::
    \text{Priority}(t) = \frac{F(t)}{S(t)} - I(t),

:math:`F` the accesses of :math:`t` still ahead in the planned order (this
epoch's batches, then the next epoch's, as :meth:`WindowTrainer.batches`
gives them), :math:`S` its size in bytes, :math:`I` its imminence: the batch
steps that run before its next access. An entry with :math:`F = 0` expires
at once (ReInc's expiration). :math:`S` in bytes makes :math:`F/S` small next
to the integer :math:`I` (the paper does not give units): the nearest next
use ranks first and :math:`F/S` orders entries needed equally soon (smaller
and more used first). ``policy="lru"`` / ``"fifo"`` keep the most recently
used / inserted entries instead (no expiration), for comparison (ReInc
Fig. 11 compares LRU). A read that is not part of the plan (evaluation, a
batch the plan did not list) is served from what is held and computes what
is not, without inserting it.

**Local level** (:class:`LocalCache`, one batch): what the model computes
from the global entry before any state enters (the first layer's GNN output
of a stacked model, the input side of the first layer's gates of an
integrated one: ``encode`` in :mod:`~pyg_dynscale.nn.reinc_reuse`). It
depends on the parameters, so it lives for one batch (one optimizer step);
within it the :math:`\le L` windows that read :math:`t` at different steps
share one value (autograd sums their gradients). Entries expire after their
last access in the batch. Aggregations of hidden states are reused across
the gates of one step as local variables (ReInc's local cache with
:math:`I = 0`), not metered here. With a local level, the global level is
read once per snapshot and batch (the local misses).

Counts (:meth:`WindowCache.stats`): an *access* is one read of one
snapshot's entry by one step of one batch (``B`` windows read ``B``
snapshots); ``hits`` were held, ``misses`` were computed;
``hit_rate = 1 - misses / accesses``. Bytes *held* are those of the entries
kept between steps (the rows of the running step are needed by that step
anyway, held or not): ``peak_bytes <= bound_bytes`` always.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Callable, Optional

import torch
from torch import Tensor

from ..errors import ModelInputError
from ..nn.reuse import static_basis
from ..nn.snapshot_model import default_dtype
from .batching import block_batch_parts
from .snapshot_store import SnapshotStore

__all__ = ["GlobalCache", "LocalCache", "WindowCache", "POLICIES", "BASIS_CHUNK_BYTES", "priority",
           "build_window_cache", "planned_batches"]

#: eviction policies of :class:`GlobalCache`
POLICIES = ("reinc", "lru", "fifo")
#: target bytes of one chunk of a static graph's basis (:func:`~pyg_dynscale.nn.reuse.static_basis`): its
#: temporaries (the chunk's basis, gathered messages) come on top of the held part at the set-up's peak, so
#: they are kept small next to a rank's part; each snapshot's entries are the same for any chunking
BASIS_CHUNK_BYTES = 4 << 20


def priority(future: int, size: int, imminence: int) -> float:
    r"""ReInc's Eq. (3): :math:`F / S - I` (``size`` in bytes, at least 1)."""
    return future / max(size, 1) - imminence


def _nbytes(t: Tensor) -> int:
    return int(t.numel()) * t.element_size()


class GlobalCache:
    r"""The global level: one entry per key (a snapshot), bounded in bytes.

    Args:
        compute: ``compute(key) -> Tensor``, the entry of ``key`` (the same
            value on every call).
        bound: bytes the cache may hold between reads (``None``: use
            ``full``).
        policy: ``"reinc"`` (Eq. 3 with expiration), ``"lru"`` or ``"fifo"``.
        full: unbounded mode: every entry precomputed in one tensor ...
        gather: ... read with ``gather(full, keys)``.
        full_count: entries in ``full`` (for :meth:`stats`).
    """

    def __init__(self, compute: Optional[Callable[[int], Tensor]] = None, bound: Optional[int] = None,
                 policy: str = "reinc", full: Optional[Tensor] = None,
                 gather: Optional[Callable[[Tensor, list], Tensor]] = None, full_count: int = 0) -> None:
        if policy not in POLICIES:
            raise ModelInputError("cache_policy", f"is {policy!r}.", f"use one of {POLICIES}.")
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 0):
            raise ModelInputError("cache_bytes", f"is {bound!r}.", "give a number of bytes >= 0, or None (unbounded).")
        if bound is None and (full is None or gather is None):
            raise ModelInputError("cache_bytes", "is None but no precomputed entries were given.",
                                  "give full= and gather=, or a bound in bytes.")
        self.compute, self.bound, self.policy = compute, bound, policy
        self.full, self.gather = full, gather
        #: key -> entry (bounded mode)
        self.entries: dict = {}
        self._used: dict = {}
        self._inserted: dict = {}
        self._clock = 0
        self._ticks: dict = {}
        self.accesses = self.hits = self.misses = self.evictions = self.expired = 0
        self.unplanned_accesses = self.unplanned_misses = 0
        self.computed = full_count if full is not None else 0
        self.peak_bytes = self.held_bytes()

    # ------------------------------------------------------------------ plan
    def plan(self, ticks: list) -> None:
        """The access order ahead: ``ticks[p]`` lists the keys read at tick
        ``p`` (a batch step); reads pass their tick to :meth:`read`."""
        self._ticks = {}
        for p, keys in enumerate(ticks):
            for k in keys:
                self._ticks.setdefault(k, []).append(p)

    def future(self, key: int, tick: int) -> tuple:
        """``(F, next tick or None)``: accesses of ``key`` after ``tick``."""
        seq = self._ticks.get(key, ())
        i = bisect_right(seq, tick)
        return len(seq) - i, (seq[i] if i < len(seq) else None)

    def held_bytes(self) -> int:
        """Bytes of the entries held now (the precomputed tensor, unbounded)."""
        if self.full is not None:
            return _nbytes(self.full)
        return sum(_nbytes(v) for v in self.entries.values())

    # ------------------------------------------------------------------ reads
    def read(self, keys: list, tick: Optional[int] = None) -> Tensor:
        """The entries of ``keys`` concatenated along rows; ``tick``: this
        read's position in the plan (``None``: unplanned, nothing inserted)."""
        if self.full is not None:
            if tick is None:
                self.unplanned_accesses += len(keys)
            else:
                self.accesses += len(keys)
                self.hits += len(keys)
            return self.gather(self.full, keys)
        new = {}
        for k in dict.fromkeys(keys):
            if k not in self.entries:
                new[k] = self.compute(k)
        out = torch.cat([self.entries[k] if k in self.entries else new[k] for k in keys], 0)
        if tick is None:
            self.unplanned_accesses += len(keys)
            self.unplanned_misses += len(new)
            return out
        self.accesses += len(keys)
        self.misses += len(new)
        self.hits += len(keys) - len(new)
        self.computed += len(new)
        self._retain(tick, keys, new)
        return out

    def _score(self, k: int, tick: int) -> tuple:
        if self.policy == "lru":
            return (self._used[k],)
        if self.policy == "fifo":
            return (self._inserted[k],)
        f, nxt = self.future(k, tick)
        return (priority(f, _nbytes(self.entries[k]), nxt - tick - 1), -k)

    def _retain(self, tick: int, keys: list, new: dict) -> None:
        for k, v in new.items():
            self.entries[k] = v
            self._inserted[k] = self._clock
            self._clock += 1
        for k in keys:
            self._used[k] = self._clock
            self._clock += 1
        if self.policy == "reinc":
            for k in [k for k in self.entries if self.future(k, tick)[0] == 0]:
                self._drop(k)
                self.expired += 1
        if self.held_bytes() > self.bound:
            total = 0
            for k in sorted(self.entries, key=lambda k: self._score(k, tick), reverse=True):
                b = _nbytes(self.entries[k])
                if total + b <= self.bound:
                    total += b
                else:
                    self._drop(k)
                    self.evictions += 1
        self.peak_bytes = max(self.peak_bytes, self.held_bytes())

    def _drop(self, k: int) -> None:
        del self.entries[k]
        self._used.pop(k, None)
        self._inserted.pop(k, None)

    def stats(self) -> dict:
        return {"bound_bytes": self.bound, "policy": self.policy if self.full is None else None,
                "accesses": self.accesses, "hits": self.hits, "misses": self.misses,
                "hit_rate": 1.0 - self.misses / self.accesses if self.accesses else None,
                "computed": self.computed, "evictions": self.evictions, "expired": self.expired,
                "held_bytes": self.held_bytes(), "peak_bytes": self.peak_bytes, "entries": len(self.entries),
                "unplanned_accesses": self.unplanned_accesses, "unplanned_misses": self.unplanned_misses}


class LocalCache:
    """The local level: entries of one batch, dropped after their last access in it."""

    def __init__(self) -> None:
        self.entries: dict = {}
        self._last: dict = {}
        self.accesses = self.hits = self.misses = self.peak_bytes = 0

    def begin(self, steps: list) -> None:
        """A new batch (new parameters): ``steps[j]`` = the keys read at step ``j``."""
        self.entries = {}
        self._last = {k: j for j, keys in enumerate(steps) for k in keys}

    def read(self, j: int, keys: list, counts: list, compute: Callable[[list], Tensor]) -> Tensor:
        """Rows of ``keys`` (``counts[i]`` rows each) at step ``j``; the
        missing ones come from ``compute(missing keys)`` (rows concatenated)."""
        missing = [k for k in dict.fromkeys(keys) if k not in self.entries]
        if missing:
            rows = dict(zip(keys, counts))
            self.entries.update(zip(missing, compute(missing).split([rows[k] for k in missing], 0)))
        self.accesses += len(keys)
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        out = torch.cat([self.entries[k] for k in keys], 0)
        self.peak_bytes = max(self.peak_bytes, sum(_nbytes(v) for v in self.entries.values()))
        for k in [k for k in self.entries if self._last.get(k, -1) <= j]:
            del self.entries[k]
        return out

    def stats(self) -> dict:
        return {"accesses": self.accesses, "hits": self.hits, "misses": self.misses,
                "hit_rate": 1.0 - self.misses / self.accesses if self.accesses else None,
                "peak_bytes": self.peak_bytes}


class WindowCache:
    r"""Both levels as :class:`~pyg_dynscale.windows.WindowTrainer` uses them.

    Args:
        impl: the reuse object (``step``; ``encode`` / ``step_encoded`` give a local level).
        global_cache: its :class:`GlobalCache`.
        lags: steps per batch (window length :math:`L`).
        rows: ``rows(t)`` = vertices of snapshot ``t``.
    """

    def __init__(self, impl: object, global_cache: GlobalCache, lags: int, rows: Callable[[int], int]) -> None:
        self.impl, self.global_cache, self.lags, self.rows = impl, global_cache, lags, rows
        self.local = LocalCache() if hasattr(impl, "encode") else None
        self._plan: list = []
        self._cursor = 0
        self._base: Optional[int] = None

    def ticks_of(self, starts: list) -> list:
        """The global keys read at each step of a batch of windows ``starts``."""
        steps = [[s + j for s in starts] for j in range(self.lags)]
        if self.local is None:
            return steps
        seen: set = set()
        out = []
        for keys in steps:
            out.append([k for k in dict.fromkeys(keys) if k not in seen])
            seen.update(keys)
        return out

    def plan_epoch(self, batches: list, following: list) -> None:
        """The training batches (window starts) of this epoch, in order, and
        of the next one (looked ahead to, not marked as planned)."""
        self._plan, self._cursor = [list(b) for b in batches], 0
        self.global_cache.plan([tk for b in list(batches) + list(following) for tk in self.ticks_of(b)])

    def begin_batch(self, starts: list) -> None:
        """A batch of windows ``starts``: planned if it is the next batch of the plan."""
        if self._cursor < len(self._plan) and self._plan[self._cursor] == list(starts):
            self._base = self._cursor * self.lags
            self._cursor += 1
        else:
            self._base = None
        if self.local is not None:
            self.local.begin([[s + j for s in starts] for j in range(self.lags)])

    def step(self, j: int, ts: list, graph: object, states: tuple) -> tuple:
        """Step ``j`` of the batch (snapshots ``ts``): ``(y, states)``."""
        tick = None if self._base is None else self._base + j
        if self.local is None:
            return self.impl.step(self.global_cache.read(ts, tick), graph, states)
        z = self.local.read(j, ts, [self.rows(t) for t in ts],
                            lambda keys: self.impl.encode(self.global_cache.read(keys, tick)))
        return self.impl.step_encoded(z, graph, states)

    def stats(self) -> dict:
        """``{"global": ..., "local": ... or None}`` (module docstring: what the counts mean)."""
        return {"global": self.global_cache.stats(), "local": None if self.local is None else self.local.stats()}


def planned_batches(trainer: object, epoch: int) -> list:
    """The window starts of each batch this rank computes in training epoch
    ``epoch``, in order (the order of ``WindowTrainer.train_epoch``)."""
    g = torch.Generator().manual_seed(trainer.seed + epoch) if trainer.shuffle else None
    out = []
    for parts in block_batch_parts(trainer.view.split("train"), trainer.batch_size, trainer.blocks, trainer.shuffle, g):
        if trainer.world_size > 1:
            mine = [parts[b] for b in trainer.my_blocks if parts[b].numel()]
            if not mine or not trainer.windows_with_rows(torch.cat(parts)):
                continue
            wins = torch.cat(mine)
        else:
            wins = torch.cat(parts)
        out.append(trainer.view.starts.index_select(0, wins).tolist())
    return out


def build_window_cache(store: SnapshotStore, cell: torch.nn.Module, view: object, impl: type, bound: Optional[int],
                       policy: str = "reinc") -> tuple:
    r"""``(reuse object, WindowCache)`` for the module ``cell`` over the
    snapshots of ``store`` (``(None, None)`` where ``impl.applies`` rejects
    its graph): unbounded, the reuse object's ``basis`` of the whole storage
    (computed here, once: on a static graph by
    :func:`~pyg_dynscale.nn.reuse.static_basis` on the one graph, no ``T x
    E`` tensor; otherwise on the block-diagonal graph of all snapshots,
    :meth:`~pyg_dynscale.windows.snapshot_store.SnapshotStore.storage_graph`);
    bounded, a reuse object built on one snapshot (its parameters, its
    methods; its basis dropped) and entries computed per snapshot on demand
    (on a static graph from the one graph). ``view``: the windows (``lags``,
    the training windows: the first snapshot a bounded cache builds on)."""
    ei_all, ew_all, n_all = store.storage_graph()
    applies = getattr(impl, "applies", None)
    if applies is not None and not applies(ei_all, n_all, ew_all):
        return None, None
    if bound is None:
        if store.static:
            obj = impl(cell, store.x[:n_all], ei_all, ew_all)
            obj.basis = static_basis(obj, store.x, store.num_held, ei_all, ew_all, chunk_bytes=BASIS_CHUNK_BYTES)
        else:
            obj = impl(cell, store.x, ei_all, ew_all)
        g = GlobalCache(full=obj.basis, gather=store.gather, full_count=store.num_held, policy=policy)
        return obj, WindowCache(obj, g, view.lags, store.rows_of)

    def snapshot(t: int) -> tuple:
        if store.static:
            return store.gather(store.x, [t]), ei_all, ew_all
        x, ei, ew, _, _ = store.union([t])
        return x, ei, ew

    def compute(t: int) -> Tensor:
        # the snapshot's self-loops are host data: its normalization reads nothing back
        x, ei, ew = snapshot(t)
        with default_dtype(store.dtype):
            return obj.input_basis(x, ei, ew, store.union_loops([t]))

    L, starts = view.lags, view.starts.index_select(0, view.split("train")).tolist()
    first = next(s + j for s in starts for j in range(L) if store.rows_of(s + j) > 0)
    obj = impl(cell, *snapshot(first))
    obj.basis = None
    g = GlobalCache(compute, bound=bound, policy=policy)
    return obj, WindowCache(obj, g, view.lags, store.rows_of)
