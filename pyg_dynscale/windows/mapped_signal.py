r"""A signal file opened memory-mapped, from which a rank reads only the
snapshots it holds (``WindowTrainer(model, "signal.pt", placement="blocks")``
under a process group: each rank loads its part).

:class:`MappedSignal` opens a file written by
:meth:`DynamicGraphSignal.save <pyg_dynscale.data.DynamicGraphSignal.save>`
with ``torch.load(path, mmap=True, weights_only=True)``, or a store directory
of :mod:`pyg_dynscale.data.mapped` (one map per tensor file): no tensor is read
when it is opened, only its pointers ``node_ptr`` / ``edge_ptr``
(:math:`[T+1]` each) when they are used. :meth:`MappedSignal.read` then
copies the rows of a sorted set of snapshots :math:`\mathcal{S}`,

.. math::
    \text{rows}(\mathcal{S}) = \bigcup_{t \in \mathcal{S}}
    [\text{node\_ptr}_t, \text{node\_ptr}_{t+1}) \quad (\text{edges: } \text{edge\_ptr}),

run of consecutive snapshots by run, in chunks of at most
:data:`CHUNK_BYTES`; after each chunk the pages of the map it touched are
handed back to the kernel (``madvise(MADV_DONTNEED)`` on the read-only,
private file map: they are re-read from the file if touched again), so a
rank's resident memory grows by the copy of its rows, not by the pages of
the map as well. :attr:`MappedSignal.bytes_read` counts the bytes copied.

**Validation.** Opening checks the format tag and version (as
:meth:`DynamicGraphSignal.load <pyg_dynscale.data.DynamicGraphSignal.load>`)
and the structure that reading trusts: pointers of :math:`T+1` non-decreasing
entries from 0 that end at the row counts of the tensors they split;
:meth:`MappedSignal.read` validates the part it returns
(:meth:`~pyg_dynscale.data.DynamicGraphSignal.validate`, :data:`VALIDATE_ROWS` rows at a
time). The file's
SHA-256 covers every tensor at once, so checking it reads the whole file:
:meth:`MappedSignal.verify` does that on demand (once, before a run, on one
process), a rank reading its part does not.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Optional, Union

import torch
from torch import Tensor

from ..errors import ModelInputError, SignalFormatError
from ..data.fields import SnapshotField, ptr_from_counts

__all__ = ["MappedSignal", "CHUNK_BYTES", "is_mapped_source"]

#: bytes copied from the map before its pages are handed back
CHUNK_BYTES = 4 << 20
#: vertex-time rows validated at a time (the checks' temporaries: ~50 bytes a row, ~3 MiB; a larger piece
#: leaves its freed temporaries in the allocator, on top of the part at the set-up's peak)
VALIDATE_ROWS = 1 << 16
_MADV_DONTNEED = 4  # Linux
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_REMEDY = "Re-create it with DynamicGraphSignal.save()."


def is_mapped_source(data: Any) -> bool:
    """Whether a trainer's ``data`` is a signal on disk: a path (``str`` /
    ``os.PathLike``) or a :class:`MappedSignal`."""
    return isinstance(data, (str, os.PathLike, MappedSignal))


def _libc_madvise() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):  # not a POSIX libc: pages stay until the map is closed
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _libc_madvise()


def _file_map(path: str, lo: int, hi: int) -> bool:
    """Whether addresses ``[lo, hi)`` lie in one private map of file ``path``
    or of a file in directory ``path`` (``/proc/self/maps``): only there is
    ``MADV_DONTNEED`` a hint and not a loss of data."""
    try:
        real = os.path.realpath(path)
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                a, b = (int(v, 16) for v in parts[0].split("-"))
                if a <= lo and hi <= b:
                    if len(parts) != 6 or parts[1][3] != "p":
                        return False
                    mapped = os.path.realpath(parts[5].strip())
                    return mapped == real or os.path.dirname(mapped) == real
    except (OSError, ValueError, IndexError):
        pass
    return False


class MappedSignal:
    r"""A :class:`~pyg_dynscale.data.DynamicGraphSignal` file opened
    memory-mapped (module docstring).

    Args:
        path (str): a file written by ``DynamicGraphSignal.save`` (format
            version 1 or 2) or a store directory of
            :mod:`pyg_dynscale.data.mapped` (its tensors mapped one file each).

    Attributes:
        path (str): the file or directory.
        signal (DynamicGraphSignal): the whole signal over the mapped tensors
            (reading a row reads its pages; nothing is read at opening).
        bytes_read (int): bytes copied out of the map by :meth:`read`.
        releases (bool): whether the pages of read chunks are handed back
            (a private file map on Linux; elsewhere they stay mapped until
            the object is dropped).
    """

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        from ..data.signal import DynamicGraphSignal

        self.path = os.fspath(path)
        #: the directory store (:mod:`pyg_dynscale.data.mapped`), ``None`` for a ``torch.save`` file
        self.store: Any = None
        if os.path.isdir(self.path):
            t, fields, num_vertices = self._open_store()
        elif os.path.isfile(self.path):
            t, fields, num_vertices = self._open_archive()
        else:
            raise FileNotFoundError(f"{self.path}: no such signal file or store directory.")
        #: the tensors by their name in the file (``node_id``, ``edge_index``, ``field.x.values``, ...)
        self._tensors = t
        # a static graph stored once (format version 2) names its one list ``static_edge_index`` / ``_weight``
        one = "static_edge_index" in t
        #: the file's names of the edge list and weights
        self._edges = ("static_edge_index", "static_edge_weight") if one else ("edge_index", "edge_weight")
        if self._edges[0] not in t or not (one or "edge_ptr" in t):
            raise self._bad("it holds no edge tensors")
        self.signal = DynamicGraphSignal.from_storage(t["node_id"], t["node_ptr"], t[self._edges[0]], t.get("edge_ptr"),
                                                      t.get(self._edges[1]), fields, num_vertices)
        self._check_structure()
        self.bytes_read = 0
        #: storage address -> whether its pages may be handed back (a private map of a file of ``path``)
        self._maps: dict = {}
        self.releases = _MADVISE is not None

    def _open_archive(self) -> tuple:
        """A version-1 file (:mod:`pyg_dynscale.data.io`) through ``torch.load(mmap=True)``."""
        from ..data.io import FORMAT_TAG, READ_VERSIONS

        try:
            payload = torch.load(self.path, mmap=True, weights_only=True)
        except Exception as exc:  # a zip archive torch cannot map (or an old pickle file): say which
            why = ("it holds Python objects other than tensors, which are not unpickled" if "weights_only" in str(exc)
                   else f"{type(exc).__name__}: {str(exc)[:200]}")
            raise SignalFormatError(f"{self.path}: not a memory-mappable pyg_dynscale signal file ({why}). "
                                    f"{_REMEDY}") from None
        if not isinstance(payload, dict) or payload.get("format") != FORMAT_TAG:
            raise SignalFormatError(f"{self.path}: not a pyg_dynscale signal file (format tag missing). {_REMEDY}")
        if payload.get("version") not in READ_VERSIONS:
            raise SignalFormatError(f"{self.path}: signal format version {payload.get('version')!r} is not supported "
                                    f"by this pyg_dynscale (reads versions {READ_VERSIONS}). {_REMEDY}")
        t = {k: v for k, v in payload["tensors"].items() if v is not None}
        fields = {name: SnapshotField(m["level"], t[f"field.{name}.values"], t.get(f"field.{name}.ptr"),
                                      int(m["cat_dim"])) for name, m in payload["fields"].items()}
        #: the file's SHA-256 of its tensors (:meth:`verify`; a version-1 file)
        self.checksum = str(payload.get("checksum"))
        self._payload_tensors = payload["tensors"]
        return t, fields, int(payload["num_vertices"])

    def _open_store(self) -> tuple:
        """A version-2 directory (:class:`~pyg_dynscale.data.mapped.MappedStore`): per-chunk SHA-256, the chunks
        of every row read verified first (:meth:`read`); the pointers verified whole at opening."""
        from ..data.mapped import MappedStore

        self.store = store = MappedStore(self.path, kind="signal")
        missing = [n for n in ("node_id", "node_ptr") if n not in store]
        if missing:
            raise SignalFormatError(f"{self.path}: a signal store needs {missing}; the store is incomplete. {_REMEDY}")
        store.verify([n for n in store.names if n.endswith("_ptr") or n.endswith(".ptr")])
        t = {n: store.tensor(n) for n in store.names}
        meta = store.attrs.get("fields", [])
        meta = [{"name": k, **v} for k, v in meta.items()] if isinstance(meta, dict) else meta
        try:
            fields = {m["name"]: SnapshotField(m["level"], t[f"field.{m['name']}.values"],
                                               t.get(f"field.{m['name']}.ptr"), int(m["cat_dim"])) for m in meta}
        except (KeyError, TypeError, ValueError) as exc:
            raise self._bad(f"its field metadata is damaged ({type(exc).__name__}: {exc})") from None
        self.checksum = None
        return t, fields, int(store.attrs["num_vertices"])

    # ------------------------------------------------------------------ checks
    def _bad(self, what: str) -> SignalFormatError:
        return SignalFormatError(f"{self.path}: {what}; the file is corrupt. {_REMEDY}")

    def _check_ptr(self, name: str, ptr: Tensor, rows: int, T: Optional[int]) -> None:
        if ptr.dim() != 1 or ptr.dtype != torch.long or (T is not None and ptr.numel() != T + 1) or ptr.numel() < 1:
            raise self._bad(f"{name} is not a [T+1] int64 pointer")
        if int(ptr[0]) != 0 or int(ptr[-1]) != rows or bool((ptr[1:] < ptr[:-1]).any()):
            raise self._bad(f"{name} does not split {rows} rows (it must run from 0 to {rows}, non-decreasing)")

    @property
    def static(self) -> bool:
        """Whether the file stores one edge list for every snapshot (a static graph stored once)."""
        return "edge_ptr" not in self._tensors

    def _check_structure(self) -> None:
        s, t = self.signal, self._tensors
        T = int(s.node_ptr.numel()) - 1
        self._check_ptr("node_ptr", s.node_ptr, int(s.node_id.shape[0]), T)
        ei = t[self._edges[0]]
        if ei.dim() != 2 or ei.shape[0] != 2:
            raise self._bad("edge_index is not [2, E]")
        E = int(ei.shape[1])
        if not self.static:
            self._check_ptr("edge_ptr", t["edge_ptr"], E, T)
        if t.get(self._edges[1]) is not None and t[self._edges[1]].shape[:1] != (E,):
            raise self._bad("edge_weight does not have one entry per edge")
        for name, f in s.fields.items():
            if f.level == "node" and f.values.shape[0] != s.node_id.shape[0]:
                raise self._bad(f"field {name!r} does not have one row per vertex-time node")
            if f.level == "edge" and f.values.shape[0] != E and not self.static:
                raise self._bad(f"field {name!r} does not have one row per edge")
            if f.level == "graph" and f.values.shape[0] != T:
                raise self._bad(f"field {name!r} does not have one row per snapshot")
            if f.level == "ragged":
                if f.ptr is None:
                    raise self._bad(f"ragged field {name!r} has no pointer")
                self._check_ptr(f"field {name!r}'s ptr", f.ptr, int(f.values.shape[f.cat_dim]), T)

    # ------------------------------------------------------------------ access
    @property
    def num_snapshots(self) -> int:
        return self.signal.num_snapshots

    def fingerprint(self) -> str:
        """The file's content digest, nothing read: a version-1/2 file's
        SHA-256 over its tensors, a store's metadata SHA-256 (which covers
        every chunk's). A run record compares it to refuse resuming on other data."""
        if self.store is not None:
            return f"store:{self.store.meta.get('meta_sha256')}"
        return f"file:{self.checksum}"

    def verify(self) -> None:
        """Check every checksum (reads the whole file): a version-1 file's
        SHA-256 over every tensor, or every chunk of a store."""
        from ..data.io import tensor_checksum

        if self.store is not None:
            self.store.verify()
            return
        if tensor_checksum(self._payload_tensors) != self.checksum:
            raise SignalFormatError(f"{self.path}: checksum mismatch, the file is corrupt. {_REMEDY}")

    def load(self) -> Any:
        """The whole signal, checksums verified: a version-1 file in memory
        (:meth:`DynamicGraphSignal.load <pyg_dynscale.data.DynamicGraphSignal.load>`),
        a store over its mapped tensors (:func:`~pyg_dynscale.data.mapped.load_signal_store`)."""
        from ..data.signal import DynamicGraphSignal

        return DynamicGraphSignal.load(self.path)  # a directory: data.mapped.load_signal_store, verified

    def read(self, snapshots: Tensor, skip: tuple = ()) -> Any:
        r"""The signal of ``snapshots`` (``[S]`` sorted distinct global
        indices), in memory: its rows copied out of the map run by run, in
        chunks (module docstring), and validated. ``skip``: node-level
        fields left out of the copy (:meth:`read_series` puts them in), the
        part then validated without them."""
        s = self.signal
        idx = torch.as_tensor(snapshots, dtype=torch.long).reshape(-1)
        T = s.num_snapshots
        if idx.numel() == 0 or int(idx.min()) < 0 or int(idx.max()) >= T or bool((idx[1:] <= idx[:-1]).any()):
            raise ModelInputError("snapshots", f"are not sorted distinct indices in 0..{T - 1}.",
                                  "give the held snapshots in increasing order.")
        # runs of consecutive snapshots [a, b): one contiguous row range of every per-row tensor each
        cut = torch.nonzero(idx[1:] != idx[:-1] + 1).flatten() + 1
        first = torch.cat([idx[:1], idx[cut]]).tolist()
        last = torch.cat([idx[cut - 1], idx[-1:]]).tolist()
        runs = [(a, b + 1) for a, b in zip(first, last)]

        def ranges(ptr: Tensor) -> list:
            p = ptr.tolist() if ptr.numel() < 1 << 20 else None
            return [(p[a], p[b]) if p is not None else (int(ptr[a]), int(ptr[b])) for a, b in runs]

        t, static = self._tensors, self.static
        nodes = ranges(t["node_ptr"])
        # a static graph stored once: its one edge list (and edge rows) whole, every snapshot's
        edges = [(0, int(t[self._edges[0]].shape[1]))] if static else ranges(t["edge_ptr"])
        fields: dict = {}
        for name, f in s.fields.items():
            key = f"field.{name}.values"
            if f.level == "node":
                if name in skip:  # [S, 0] placeholder rows: the caller puts the values in
                    fields[name] = SnapshotField("node", f.values.new_empty((int(sum(b - a for a, b in nodes)), 0)))
                    continue
                fields[name] = SnapshotField("node", self._rows(key, nodes, 0))
            elif f.level == "edge":
                fields[name] = SnapshotField("edge", self._rows(key, edges, 0))
            elif f.level == "graph":
                self._verify(key, [(int(i), int(i) + 1) for i in idx.tolist()])
                fields[name] = SnapshotField("graph", f.values.index_select(0, idx).clone())
            else:
                counts = (f.ptr[1:] - f.ptr[:-1]).index_select(0, idx)
                fields[name] = SnapshotField("ragged", self._rows(key, ranges(f.ptr), f.cat_dim),
                                             ptr_from_counts(counts), f.cat_dim)
        node_counts = (t["node_ptr"][1:] - t["node_ptr"][:-1]).index_select(0, idx)
        edge_ptr = None if static else ptr_from_counts((t["edge_ptr"][1:] - t["edge_ptr"][:-1]).index_select(0, idx))
        out = type(s).from_storage(
            None if self._local_ids(runs) else self._rows("node_id", nodes, 0), ptr_from_counts(node_counts),
            self._rows(self._edges[0], edges, 1),
            edge_ptr, self._rows(self._edges[1], edges, 0) if self._edges[1] in t else None, fields, s.num_vertices)
        try:  # in pieces of at most VALIDATE_ROWS rows: the checks' temporaries (sort keys) stay small
            p = out.node_ptr
            lo, S = 0, out.num_snapshots
            while lo < S:
                hi = min(max(int(torch.searchsorted(p, p[lo] + VALIDATE_ROWS, right=True)) - 1, lo + 1), S)
                (out if (lo, hi) == (0, S) else out.select(torch.arange(lo, hi))).validate(allow_nonfinite=True)
                lo = hi
        except Exception as exc:  # noqa: BLE001 - the file's rows are inconsistent: a format error naming the file
            raise self._bad(f"its snapshots {runs[0][0]}..{runs[-1][1] - 1} do not form a valid signal ({exc})") from None
        return out

    def series_pair(self) -> Optional[tuple]:
        r"""``(first, second)``: the names of two node-level fields that the
        file stores as one series :math:`D` (one storage, ``second`` starting
        one snapshot after ``first``: :math:`\text{first}_t = D_t`,
        :math:`\text{second}_t = D_{t+1}`, as
        :func:`~pyg_dynscale.windows.series_signal` writes :math:`X_t` and
        :math:`Y_t`), on snapshots of :math:`n` rows each; ``None`` where no
        two fields are laid out so (a store directory maps every tensor from
        its own file: never). Nothing is read but ``node_ptr``."""
        p = self._tensors["node_ptr"]
        T = int(p.numel()) - 1
        n = int(p[1]) if T > 0 else 0
        if n == 0 or not torch.equal(p, torch.arange(T + 1) * n):
            return None
        node = [(k, f.values) for k, f in self.signal.fields.items() if f.level == "node"]
        for a, va in node:
            for b, vb in node:
                if (a != b and va.dtype == vb.dtype and va.shape == vb.shape and va.is_contiguous()
                        and vb.is_contiguous() and va.untyped_storage().data_ptr() == vb.untyped_storage().data_ptr()
                        and vb.storage_offset() - va.storage_offset() == n * va[:1].numel()):
                    return a, b
        return None

    def read_series(self, snapshots: Tensor) -> tuple:
        r"""``(signal, held)``: :meth:`read` of ``snapshots`` where the file
        stores a :meth:`series_pair` ``(first, second)``, both fields copied
        once: one buffer holds :math:`D_{a_k} \ldots D_{b_k}` for every run
        :math:`[a_k, b_k)` of consecutive snapshots, ``first`` is the buffer
        without its last snapshot and ``second`` the buffer from its second
        snapshot (views; a part's ``second`` is a shift of its ``first``
        within a run, so holding both copies would hold the same rows twice).
        ``held`` is ``snapshots`` plus each run's next snapshot :math:`b_k`
        but the last run's: the buffer's slot between two runs, whose
        ``first`` rows (and every other field) are snapshot :math:`b_k`'s but
        whose ``second`` rows are :math:`D_{a_{k+1}}`, snapshot :math:`b_k`'s
        own only where :math:`a_{k+1} = b_k + 1`. A reader of ``snapshots``
        and of ``first`` anywhere gets the file's values; ``second`` of an
        added snapshot is not its own. Without a pair: ``(read(snapshots), snapshots)``."""
        pair = self.series_pair()
        idx = torch.as_tensor(snapshots, dtype=torch.long).reshape(-1)
        if pair is None:
            return self.read(idx), idx
        first, second = pair
        T = self.signal.num_snapshots
        if idx.numel() == 0 or int(idx.min()) < 0 or int(idx.max()) >= T or bool((idx[1:] <= idx[:-1]).any()):
            return self.read(idx), idx  # read's typed refusal
        cut = torch.nonzero(idx[1:] != idx[:-1] + 1).flatten() + 1
        ends = idx[cut - 1] + 1  # b_k of every run but the last: < a_{k+1} <= T - 1
        held = torch.cat([idx, ends]).sort().values
        n = int(self._tensors["node_ptr"][1])
        a = self.signal.fields[first].values
        # D: the series' T + 1 snapshots, a view of the one storage from ``first``'s start (``second`` ends
        # there). A version-1 archive: a store directory never has a pair, so there are no chunks to verify
        D = a.new_empty(0).set_(a.untyped_storage(), a.storage_offset(), ((T + 1) * n, *a.shape[1:]))
        starts = torch.cat([idx[:1], idx[cut]]).tolist()
        stops = torch.cat([idx[cut - 1], idx[-1:]]).add(1).tolist()
        buf = self._copy(D, [(s * n, (b + 1) * n) for s, b in zip(starts, stops)], 0)  # D_{a_k} .. D_{b_k}
        out = self.read(held, skip=pair)
        out.fields[first] = SnapshotField("node", buf[:-n])
        out.fields[second] = SnapshotField("node", buf[n:])
        return out, held

    def node_rows(self, name: str, first: int, stop: int) -> Tensor:
        """The rows of node-level field ``name`` of snapshots ``first .. stop-1``, copied out of the map."""
        f = self.signal.fields.get(name)
        if f is None or f.level != "node":
            raise ModelInputError(name, "is not a node-level field of the signal.", f"give the signal node rows '{name}'.")
        p = self._tensors["node_ptr"]
        return self._rows(f"field.{name}.values", [(int(p[first]), int(p[stop]))], 0)

    # ------------------------------------------------------------------ reading rows
    def _local_ids(self, runs: list) -> bool:
        """Whether the ids of the snapshots in ``runs`` are each snapshot's
        rows ``0 .. |V_t|-1`` (checked a chunk at a time, the pages handed
        back): the part then holds them implicitly, as ``DynamicGraphSignal.load``
        does (``from_storage(node_id=None)``), instead of a copy."""
        if not hasattr(type(self.signal), "local_ids"):  # a signal class without implicit ids
            return False
        ptr, ids = self._tensors["node_ptr"], self._tensors["node_id"]
        if not ids.is_contiguous():
            return False
        # the check builds ~4 int64 temporaries per row: a chunk of them stays near CHUNK_BYTES
        step = max(1, CHUNK_BYTES // (4 * max(8, ids.element_size())))
        for a, b in runs:
            lo = a
            while lo < b:  # snapshots lo .. hi-1: at most ``step`` rows (or one snapshot)
                hi = min(max(int(torch.searchsorted(ptr, ptr[lo] + step, right=True)) - 1, lo + 1), b)
                p0, p1 = int(ptr[lo]), int(ptr[hi])
                self._verify("node_id", [(p0, p1)])
                got = ids[p0:p1]
                want = torch.arange(p0, p1) - torch.repeat_interleave(ptr[lo:hi], ptr[lo + 1:hi + 1] - ptr[lo:hi],
                                                                       output_size=p1 - p0)
                same = torch.equal(got, want)
                self.bytes_read += got.numel() * got.element_size()
                self._release(got)
                if not same:
                    return False
                lo = hi
        return True

    def _verify(self, name: str, spans: list) -> None:
        """A store's chunks under rows ``spans`` of tensor ``name``, verified (each chunk once)."""
        if self.store is not None:
            for a, b in spans:
                self.store.verify_rows(name, a, b)

    def _rows(self, name: str, spans: list, dim: int) -> Tensor:
        """The rows ``spans`` (``[(a, b), ...]`` along ``dim``) of mapped tensor ``name``, verified (a store),
        concatenated, as a new tensor."""
        self._verify(name, spans)
        return self._copy(self._tensors[name], spans, dim)

    def _copy(self, t: Tensor, spans: list, dim: int, out: Optional[Tensor] = None) -> Tensor:
        total = sum(b - a for a, b in spans)
        if dim == 1 and t.dim() == 2 and t.is_contiguous():  # [k, R] (edge_index): each row a run of the file
            out = t.new_empty((t.shape[0], total))
            for i in range(t.shape[0]):
                self._copy(t[i], spans, 0, out[i])
            return out
        if dim != 0 or not t.is_contiguous():  # not laid out by rows: read by indexing (pages kept until closed)
            pos = torch.cat([torch.arange(a, b) for a, b in spans]) if spans else torch.zeros(0, dtype=torch.long)
            out = t.index_select(dim, pos)
            self.bytes_read += out.numel() * out.element_size()
            return out
        out = t.new_empty((total, *t.shape[1:])) if out is None else out
        row = max(1, t[:1].numel() * t.element_size())
        step = max(1, CHUNK_BYTES // row)
        o = 0
        for a, b in spans:
            for c in range(a, b, step):
                d = min(b, c + step)
                src = t[c:d]
                out[o:o + d - c] = src
                o += d - c
                self.bytes_read += src.numel() * src.element_size()
                self._release(src)
        return out

    def _release(self, view: Tensor) -> None:
        """Hand the pages under ``view`` back to the kernel where its storage
        is a private map of a file of :attr:`path` (re-read from the file if
        touched again; anywhere else nothing is released)."""
        if not self.releases or view.numel() == 0:
            return
        st = view.untyped_storage()
        a, b = st.data_ptr(), st.data_ptr() + st.nbytes()
        if a not in self._maps:
            self._maps[a] = _file_map(self.path, a, b)
        if not self._maps[a]:
            return
        lo = view.data_ptr() // _PAGE * _PAGE
        hi = -(-(view.data_ptr() + view.numel() * view.element_size()) // _PAGE) * _PAGE
        # the map starts on a page and spans whole pages: rounding outwards stays inside it
        lo, hi = max(lo, a // _PAGE * _PAGE), min(hi, -(-b // _PAGE) * _PAGE)
        if hi > lo:
            _MADVISE(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_DONTNEED)

    def __repr__(self) -> str:
        s = self.signal
        return (f"MappedSignal({self.path!r}, snapshots={s.num_snapshots}, rows={int(s.node_ptr[-1])}, "
                f"edges={int(s.edge_ptr[-1])}, bytes_read={self.bytes_read})")
