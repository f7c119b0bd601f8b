r"""The events one rank holds under ``MemoryTrainer(event_placement="per_rank")``.

With parallelism :math:`(M, 1, 1)` on :math:`M` ranks, trainer :math:`r` trains on its
local batch of every global batch: with local batch size :math:`b`, training event
:math:`e` belongs to rank

.. math::
    h(e) = \lfloor e / b \rfloor \bmod M

(global batch :math:`g` is events :math:`[g M b, (g + 1) M b)`, its local batch :math:`r`
the :math:`r`-th :math:`b` of them). Every rank walks every evaluation batch (the whole
batch is scored on every rank), but each holds only a chronological share of it: the
evaluation batch :math:`[x, y)` of :math:`n = y - x` events gives event :math:`x + o` to rank
:math:`\lfloor o M / n \rfloor`. A batch's index columns reach every rank when it needs them
(:mod:`~pyg_dynscale.ctdg.event_exchange`), and a rank materialises only its own ranges
(:class:`RankEvents`): the index columns (``src``, ``dst``, ``t``) are copied, the
messages kept as views of the source -- a memory-mapped event store
(:func:`~pyg_dynscale.data.mapped.load_events_store`) is then read only where the rank's
ranges lie.
"""
from __future__ import annotations

import bisect
import os
from typing import Optional, Union

import torch
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["EventHolders", "RankEvents", "RankHost", "StoreEvents", "split_sorted"]


class StoreEvents:
    r"""An event store directory (:func:`~pyg_dynscale.data.mapped.save_events_store`) read by
    ranges with plain file reads: a rank's copy of its rows is all it holds of the file (a
    memory map would count the pages the kernel maps around each read -- whole large folios,
    megabytes, on recent Linux -- as the process's own). Each range's chunks are verified
    against their SHA-256 first (:meth:`~pyg_dynscale.data.mapped.MappedStore.verify_rows`).

    Args:
        path: the store directory.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"]) -> None:
        from ..data.mapped import MappedStore

        self.store = MappedStore(path, kind="events")
        missing = [k for k in ("src", "dst", "t", "msg") if k not in self.store]
        if missing:
            raise ModelInputError("data", f"is the event store {self.store.path!r}, which lacks {missing}.",
                                  "write it with pyg_dynscale.data.mapped.save_events_store.")
        self.num_events = self.store.shape("src")[0]
        shape = self.store.shape("msg")
        self.msg_dim = shape[1] if len(shape) > 1 else 0
        info = self.store.meta["tensors"]["msg"]
        import numpy as np

        self.msg_dtype = torch.from_numpy(np.zeros(0, dtype=np.dtype(info["dtype"]))).dtype
        #: bytes read from the store's files so far (the rows handed out, not the chunks verified)
        self.bytes_read = 0

    def read(self, name: str, a: int, b: int) -> Tensor:
        """Rows ``[a, b)`` of column ``name`` (verified, read from the file: a new tensor)."""
        import numpy as np

        info = self.store.meta["tensors"][name]
        self.store.verify_rows(name, a, b)
        dtype = np.dtype(info["dtype"]).newbyteorder("<")
        inner = int(np.prod(info["shape"][1:], dtype=np.int64)) if len(info["shape"]) > 1 else 1
        arr = np.fromfile(os.path.join(self.store.path, info["file"]), dtype=dtype, count=(b - a) * inner,
                          offset=a * inner * dtype.itemsize)
        self.bytes_read += arr.nbytes
        out = torch.from_numpy(arr.astype(dtype.newbyteorder("="), copy=False))
        return out.view(b - a, *info["shape"][1:]) if len(info["shape"]) > 1 else out

    def num_nodes(self, chunk: int = 1 << 20) -> int:
        r""":math:`\max(\text{src}, \text{dst}) + 1` (``TemporalData.num_nodes``) from ``chunk``
        events at a time: a rank learns the node count without holding the columns."""
        top = -1
        for a in range(0, self.num_events, chunk):
            b = min(a + chunk, self.num_events)
            for name in ("src", "dst"):
                top = max(top, int(self.read(name, a, b).max()))
        return top + 1

    def column(self, name: str) -> Tensor:
        """The whole column ``name``."""
        return self.read(name, 0, self.num_events)

    def split(self, val_ratio: float, test_ratio: float) -> tuple[int, int, int]:
        """:func:`~pyg_dynscale.ctdg.events.split_ranges` from :math:`O(\\log E)` reads of ``t``."""
        return split_sorted(lambda i: int(self.read("t", i, i + 1)[0]), self.num_events, val_ratio, test_ratio)


def _rows(data, name: str, a: int, b: int) -> Tensor:
    """Rows ``[a, b)`` of ``name``: read from a store, or a slice (a view) of a tensor."""
    return data.read(name, a, b) if isinstance(data, StoreEvents) else getattr(data, name)[a:b]


class EventHolders:
    r"""Which rank holds each event (:math:`h(e)` above).

    Args:
        world_size (int): :math:`M`.
        batch_size (int): the local batch size :math:`b`.
        splits (tuple): ``(val_start, test_start, num_events)``.
    """

    def __init__(self, world_size: int, batch_size: int, splits: tuple) -> None:
        self.world_size, self.batch_size = world_size, batch_size
        self.val_start, self.test_start, self.num_events = splits

    def _region(self, e: Tensor) -> tuple[Tensor, Tensor]:
        """Start and end of the evaluation split of each (evaluation) event."""
        val = e < self.test_start
        start = torch.where(val, torch.full_like(e, self.val_start), torch.full_like(e, self.test_start))
        end = torch.where(val, torch.full_like(e, self.test_start), torch.full_like(e, self.num_events))
        return start, end

    def of(self, a: int, b: int) -> Tensor:
        """``[b - a]``: the holder of each event of ``[a, b)``."""
        e = torch.arange(a, b)
        bs, m = self.batch_size, self.world_size
        train = (e // bs) % m
        start, end = self._region(e)
        x = start + (e - start) // bs * bs
        n = torch.minimum(x + bs, end) - x
        held = ((e - x) * m) // n.clamp(min=1)
        return torch.where(e < self.val_start, train, held)

    def shares(self, a: int, b: int) -> list[tuple[int, int]]:
        """Every rank's share of ``[a, b)``: contiguous and chronological in rank order (the
        all-gather of the shares in rank order is the batch in event order)."""
        h = self.of(a, b)
        counts = torch.bincount(h, minlength=self.world_size).tolist()
        out, at = [], a
        for c in counts:
            out.append((at, at + c))
            at += c
        if at != b or (h.numel() and not bool((h[1:] >= h[:-1]).all())):
            raise AssertionError(f"the holders of [{a}, {b}) are not chronological by rank")
        return out

    def ranges(self, rank: int) -> list[tuple[int, int]]:
        """The ranges of events ``rank`` holds (merged where contiguous)."""
        bs, m = self.batch_size, self.world_size
        out: list = []
        for a in range(rank * bs, self.val_start, m * bs):
            out.append((a, min(a + bs, self.val_start)))
        for lo, hi in ((self.val_start, self.test_start), (self.test_start, self.num_events)):
            for x in range(lo, hi, bs):
                y = min(x + bs, hi)
                n = y - x
                s, e = x - (-(rank * n) // m), x - (-((rank + 1) * n) // m)
                if s < e:
                    out.append((s, e))
        merged: list = []
        for s, e in out:
            if merged and merged[-1][1] == s:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        return merged


class RankEvents:
    r"""The event ranges one rank holds: ``src``, ``dst``, ``t`` copied (host), ``msg`` as views
    of the source's rows.

    Args:
        data: the event stream (``src``, ``dst``, ``t`` ``[E]``, ``msg`` ``[E, F]``), or a
            :class:`StoreEvents` (each range read from the file).
        ranges (list): the ``(start, end)`` ranges, sorted and disjoint.
    """

    def __init__(self, data, ranges: list) -> None:
        self.ranges = list(ranges)
        self.starts = [a for a, _ in self.ranges]
        offsets = [0]
        for a, b in self.ranges:
            offsets.append(offsets[-1] + b - a)
        self.offsets = offsets
        for name in ("src", "dst", "t"):  # filled range by range: no second copy of the column at any time
            col = torch.empty(offsets[-1], dtype=torch.long)
            for (a, b), o in zip(self.ranges, offsets):
                col[o:o + b - a] = _rows(data, name, a, b)
            setattr(self, name, col)
        # the messages: views of an in-memory stream (nothing copied), the rows read from a store
        self.msg_parts = [_rows(data, "msg", a, b) for a, b in self.ranges]
        if isinstance(data, StoreEvents):
            self.msg_dim, self.msg_dtype, self.num_events = data.msg_dim, data.msg_dtype, data.num_events
        else:
            self.msg_dim, self.msg_dtype, self.num_events = data.msg.size(-1), data.msg.dtype, int(data.src.numel())

    @property
    def held(self) -> int:
        """Events this rank holds."""
        return self.offsets[-1]

    def locate(self, a: int, b: int) -> tuple[int, int]:
        """``(range index, local start)`` of ``[a, b)``, which lies in one held range (``a < b``)."""
        i = bisect.bisect_right(self.starts, a) - 1
        if i < 0 or b > self.ranges[i][1]:
            raise ModelInputError("events", f"[{a}, {b}) is not held by this rank (event_placement='per_rank').",
                                  "read only the events of this rank's trainer slices.")
        return i, self.offsets[i] + a - self.ranges[i][0]

    def column(self, name: str, a: int, b: int) -> Tensor:
        """Events ``[a, b)`` of the host column ``name``."""
        if b <= a:
            return getattr(self, name)[:0]
        _, at = self.locate(a, b)
        return getattr(self, name)[at:at + b - a]

    def messages(self, a: int, b: int) -> Tensor:
        """``[b - a, F]`` the raw messages of ``[a, b)`` (a view of the source)."""
        if b <= a:
            return self.msg_parts[0][:0] if self.msg_parts else torch.zeros(0, self.msg_dim, dtype=self.msg_dtype)
        i, _ = self.locate(a, b)
        s = self.ranges[i][0]
        return self.msg_parts[i][a - s:b - s]

    def nbytes(self) -> int:
        """Bytes of the rank's copies of the index columns and of its messages."""
        return (self.src.numel() + self.dst.numel() + self.t.numel()) * 8 + \
            sum(p.numel() * p.element_size() for p in self.msg_parts)

    def check(self, num_nodes: int) -> None:
        """:func:`~pyg_dynscale.ctdg.events.check_events` on the held ranges: ids in
        ``0 .. num_nodes - 1``, ``t`` non-decreasing within each range (a rank checks its own
        events; :meth:`RankHost` checks the boundaries)."""
        for name in ("src", "dst"):
            x = getattr(self, name)
            if x.numel() and (int(x.min()) < 0 or int(x.max()) >= num_nodes):
                raise ModelInputError(f"data.{name}", f"has ids in [{int(x.min())}, {int(x.max())}] for "
                                      f"{num_nodes} nodes.", "give ids 0 .. num_nodes - 1.")
        for k, (a, b) in enumerate(self.ranges):
            t = self.t[self.offsets[k]:self.offsets[k + 1]]
            down = torch.nonzero(t[1:] < t[:-1])
            if down.numel():
                i = a + int(down[0]) + 1
                raise ModelInputError("data.t", f"decreases at event {i}.",
                                      "sort the events by time (stable), e.g. data = data[data.t.argsort(stable=True)].")


class _Column:
    """A host index column read by global event ranges: the held ranges, or the batch whose
    columns the rank gathered (:attr:`RankHost.window`)."""

    def __init__(self, host: "RankHost", name: str) -> None:
        self.host, self.name = host, name

    def __getitem__(self, key: slice) -> Tensor:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("a per-rank event column is read by ranges [a:b]")
        a, b = key.start or 0, key.stop
        w = self.host.window
        if w is not None and w[0] <= a and b <= w[1]:
            return w[2][self.name][a - w[0]:b - w[0]]
        return self.host.events.column(self.name, a, b)


class RankHost:
    r"""The :class:`~pyg_dynscale.ctdg.host.HostStream` of a rank that holds only its events:
    ``src[a:b]``, ``dst[a:b]``, ``t[a:b]`` read the rank's ranges, or the last batch gathered
    from every rank (:attr:`window`).

    Attributes:
        window (tuple or None): ``(a, b, {"src", "dst", "t"})``: the gathered batch ``[a, b)``.
        bounds (dict): ``(a, b) -> (min, max)`` destination of each split (agreed over the ranks).
    """

    def __init__(self, events: RankEvents) -> None:
        self.events = events
        self.src, self.dst, self.t = _Column(self, "src"), _Column(self, "dst"), _Column(self, "t")
        self.window: Optional[tuple] = None
        self.bounds: dict = {}

    def local_bounds(self, a: int, b: int) -> tuple[int, int]:
        """``(min, max)`` destination over this rank's events in ``[a, b)`` (``(2**62, -1)`` if none)."""
        lo, hi = 1 << 62, -1
        for (s, e), o in zip(self.events.ranges, self.events.offsets):
            s2, e2 = max(s, a), min(e, b)
            if s2 < e2:
                d = self.events.dst[o + s2 - s:o + e2 - s]
                lo, hi = min(lo, int(d.min())), max(hi, int(d.max()))
        return lo, hi

    def destination_bounds(self, a: int, b: int) -> tuple[int, int]:
        """``(min, max)`` destination of the split ``[a, b)`` (agreed at set-up)."""
        return self.bounds[(a, b)]


def _quantile_sorted(read, n: int, q: list) -> list:
    r"""``numpy.quantile(t, q)`` (the default, linear method) of a non-decreasing ``t`` of ``n``
    values, reading only the two values around each quantile (``read(i)``): numpy's own steps --
    virtual index :math:`(n - 1) q`, its floor and the next index (clipped), :math:`\gamma` the
    difference, ``_lerp`` -- on those values."""
    import numpy as np

    virtual = (n - 1) * np.asarray(q, dtype=np.float64)
    prev = np.floor(virtual)
    nxt = np.minimum(prev + 1, n - 1)
    prev = prev.astype(np.intp)
    a = np.array([read(int(i)) for i in prev], dtype=np.int64)
    b = np.array([read(int(i)) for i in nxt.astype(np.intp)], dtype=np.int64)
    gamma = virtual - prev
    diff = np.subtract(b, a)
    out = np.asanyarray(np.add(a, diff * gamma))
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe", dtype=out.dtype)
    return list(out)  # numpy scalars, as unpacking numpy.quantile gives


def split_sorted(read, n: int, val_ratio: float = 0.15, test_ratio: float = 0.15) -> tuple[int, int, int]:
    r""":func:`~pyg_dynscale.ctdg.events.split_ranges` of a stream whose ``t`` (non-decreasing,
    ``n`` events) is read element by element (``read(i) -> int``): :math:`O(\log n)` reads instead
    of the whole column. The counts ``(t <= q).sum()`` are binary searches with the same torch
    comparison (an ``int64`` tensor against a Python float: monotone in ``t``)."""
    for name, r in (("val_ratio", val_ratio), ("test_ratio", test_ratio)):
        if not (0.0 <= float(r) < 1.0):
            raise ModelInputError(name, f"is {r!r}.", "use a fraction in [0, 1).")
    if val_ratio + test_ratio >= 1.0:
        raise ModelInputError("val_ratio + test_ratio", f"is {val_ratio + test_ratio}.",
                              "leave some events for training (< 1).")
    val_time, test_time = _quantile_sorted(read, n, [1.0 - val_ratio - test_ratio, 1.0 - test_ratio])

    def count(q: float) -> int:  # the first event with not (t <= q)
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if bool(torch.tensor([read(mid)], dtype=torch.long) <= q):
                lo = mid + 1
            else:
                hi = mid
        return lo

    return count(val_time), count(test_time), n
