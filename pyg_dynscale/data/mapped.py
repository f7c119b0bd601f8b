r"""An on-disk, memory-mappable store of tensors written in chunks: the
directory form of pyg_dynscale's versioned files, for data larger than memory.

The signal file of :mod:`pyg_dynscale.data.io` is one ``torch.save`` archive:
it is written from tensors held in memory and its SHA-256 covers the whole
file, so checking it reads everything. A store keeps that format's rules
(a format tag, a version, SHA-256 checksums, typed errors, the same tensor
names) but is a **directory**, because data that is read in chunks is also
written in chunks (the size of a tensor is known only at the end) and read in
parts (a rank reads its rows):

.. code-block:: text

    DIR/meta.json         {"format": "pyg_dynscale.MappedStore", "version": 1, "kind": "signal" | "events",
                           "tensors": {name: {"dtype", "shape", "axis", "file", "chunk_bytes", "sha256": [...]}},
                           "attrs": {...}, "meta_sha256": ...}
    DIR/<name>.bin        the tensor's raw bytes, C order, little-endian, no header

* Every tensor is one raw file, opened with :func:`numpy.memmap` (copy-on-write)
  and exposed as a :class:`torch.Tensor` **without reading it**: slicing rows
  reads only their pages.
* Each file is checksummed per **chunk** of ``chunk_bytes`` bytes (SHA-256 of
  each chunk), so a reader of a part verifies only the chunks it reads
  (:meth:`MappedStore.rows`); :meth:`MappedStore.verify` checks everything. A
  whole-file checksum would force every rank to read the whole file.
* ``meta.json`` carries the format tag, the version and a SHA-256 of its own
  content (``meta_sha256``), and every file's size is checked against its
  dtype and shape on open, so a truncated or edited meta or a truncated file is
  refused at once (:class:`StoreFormatError`); a changed byte is refused by the
  first read of its chunk.
* ``axis`` is the tensor's row axis: 0, or 1 for ``[2, E]`` index tensors
  (``edge_index``, ``edge_label_index``), whose rows are columns.
* A store is committed atomically (as :mod:`pyg_dynscale.training.checkpoint`):
  written into ``.<name>.partial-*`` next to ``DIR``, every file fsynced, then
  renamed into place, so a directory holding ``meta.json`` is complete.

**API.**

.. code-block:: python

    from pyg_dynscale.data.mapped import MappedStore, StoreWriter

    with StoreWriter("store", kind="events") as w:          # chunks of any size
        w.append("src", np.array([0, 1]))
        w.append("src", np.array([2]))
        w.put("t", np.array([1, 2, 3]))
    store = MappedStore("store")
    store.tensor("src")            # memory-mapped int64 [3], nothing read, not verified
    store.rows("src", 1, 3)        # rows 1..2, the chunks holding them verified first (a view of the map)
    store.read_rows("src", 1, 3)   # the same rows verified, copied with plain file reads (no map)
    store.verify()                 # every chunk of every tensor

Signals and event streams on top of it: :func:`save_signal_store` /
:func:`load_signal_store` (``DynamicGraphSignal.load(DIR)`` reads a directory)
and :func:`save_events_store` / :func:`load_events_store` (a PyG
:class:`~torch_geometric.data.TemporalData` whose tensors are memory-mapped);
the chunked readers of :mod:`pyg_dynscale.data.ingest` write them.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from typing import TYPE_CHECKING, Any, Iterable, Optional, Union

import numpy as np
import torch
from torch import Tensor

from ..errors import SignalFormatError, SignalValidationError
from .fields import SnapshotField

if TYPE_CHECKING:  # pragma: no cover
    from torch_geometric.data import TemporalData

    from .signal import DynamicGraphSignal

FORMAT_TAG = "pyg_dynscale.MappedStore"
FORMAT_VERSION = 1
META_FILE = "meta.json"
#: default checksum granularity: a reader of one row reads (and hashes) at most this many bytes more
CHUNK_BYTES = 1 << 22
KINDS = ("signal", "events", "tensors")
_COPY_BYTES = 1 << 18
_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"}


class StoreFormatError(SignalFormatError):
    """A store directory that cannot be read: missing or damaged ``meta.json``,
    a foreign format or version, a truncated file or a chunk whose checksum
    does not match (the message names the file and the fix)."""


def _remedy() -> str:
    return "Re-create the store (ingest the source file again, or save the signal again)."


def _meta_digest(meta: dict) -> str:
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _hash_piecewise(fh: Any, size: int) -> tuple[str, int]:
    """SHA-256 of the next ``size`` bytes of ``fh`` (fewer at the end), read in
    pieces of at most 256 KiB; returns ``(hex digest, bytes read)``."""
    h, got = hashlib.sha256(), 0
    while got < size:
        piece = fh.read(min(size - got, _COPY_BYTES))
        if not piece:
            break
        h.update(piece)
        got += len(piece)
    return h.hexdigest(), got


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ============================================================================ writer
class _Column:
    """One tensor being written: its dtype, trailing shape and part file(s)."""

    def __init__(self, directory: str, name: str, dtype: np.dtype, inner: tuple[int, ...], axis: int) -> None:
        self.name, self.dtype, self.inner, self.axis = name, dtype, inner, axis
        self.rows = 0
        # axis 1 ([K, n]): the K rows grow separately, one part file each, joined at commit
        k = inner[0] if axis == 1 else 1
        self.parts = [os.path.join(directory, f"{name}.bin" + (f".part{i}" if axis == 1 else "")) for i in range(k)]
        self.handles = [open(p, "wb") for p in self.parts]


class StoreWriter:
    r"""Write a store tensor by tensor, each in chunks of any size, and commit
    it atomically.

    Args:
        path: the store directory to create.
        kind: ``"signal"``, ``"events"`` or ``"tensors"`` (what the readers expect).
        overwrite: replace an existing store at ``path`` (else refuse).
        chunk_bytes: checksum granularity (bytes per SHA-256).

    Memory: only the arrays passed to :meth:`append` (the writer holds no
    copy); :meth:`commit` joins the part files of ``axis=1`` tensors and hashes
    every file in pieces of 256 KiB.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], kind: str = "tensors", *, overwrite: bool = False,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        self.path = os.path.abspath(os.fspath(path))
        if kind not in KINDS:
            raise SignalValidationError("kind", f"is {kind!r}.", f"use one of {list(KINDS)}.")
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
            raise SignalValidationError("chunk_bytes", f"is {chunk_bytes!r}.", "use a positive number of bytes.")
        if os.path.exists(self.path) and not overwrite:
            raise SignalValidationError(
                "out", f"{self.path!r} already exists.", "pass overwrite=True to replace it, or choose another directory.")
        parent = os.path.dirname(self.path) or "."
        os.makedirs(parent, exist_ok=True)
        self.kind = kind
        self.chunk_bytes = int(chunk_bytes)
        self.attrs: dict[str, Any] = {}
        self.tmp = os.path.join(parent, f".{os.path.basename(self.path)}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.makedirs(self.tmp)
        self._cols: dict[str, _Column] = {}
        self._done = False

    # ---------------------------------------------------------------- writing
    def append(self, name: str, array: Union[np.ndarray, Tensor], axis: int = 0) -> None:
        """Append ``array``'s rows (along ``axis``, 0 or 1) to tensor ``name``;
        the first call fixes the dtype and the other dimensions."""
        if isinstance(array, Tensor):
            array = array.detach().cpu().numpy()
        array = np.asarray(array)
        if array.dtype.name not in _DTYPES:
            raise TypeError(f"tensor {name!r}: dtype {array.dtype} cannot be stored")
        if array.ndim == 0 or axis not in (0, 1) or (axis == 1 and array.ndim != 2):
            raise ValueError(f"tensor {name!r}: rows along axis {axis} of a {array.ndim}-D array")
        inner = tuple(array.shape[1:]) if axis == 0 else (array.shape[0],)
        col = self._cols.get(name)
        if col is None:
            col = self._cols[name] = _Column(self.tmp, name, array.dtype, inner, axis)
        if col.dtype != array.dtype or col.inner != inner or col.axis != axis:
            raise ValueError(f"tensor {name!r}: appending {array.dtype}{list(array.shape)} (axis {axis}) to "
                             f"{col.dtype} rows of shape {list(col.inner)} (axis {col.axis})")
        a = array.astype(array.dtype.newbyteorder("<"), copy=False)
        if axis == 0:
            col.handles[0].write(np.ascontiguousarray(a).tobytes())
            col.rows += a.shape[0]
        else:
            for h, row in zip(col.handles, a):
                h.write(np.ascontiguousarray(row).tobytes())
            col.rows += a.shape[1]

    def put(self, name: str, array: Union[np.ndarray, Tensor], axis: int = 0) -> None:
        """Write a whole tensor at once (small tensors: offsets, id tables)."""
        if name in self._cols:
            raise ValueError(f"tensor {name!r} is already being written")
        self.append(name, array, axis)

    def rows(self, name: str) -> int:
        """Rows of ``name`` written so far (0 if none)."""
        col = self._cols.get(name)
        return 0 if col is None else col.rows

    # ---------------------------------------------------------------- commit
    def _finish(self, col: _Column) -> dict:
        for h in col.handles:
            h.flush()
            os.fsync(h.fileno())
            h.close()
        final = os.path.join(self.tmp, f"{col.name}.bin")
        if col.axis == 1:  # join the K row files: [K, n] in C order
            with open(final, "wb") as out:
                for p in col.parts:
                    with open(p, "rb") as src:
                        shutil.copyfileobj(src, out, _COPY_BYTES)
                    os.remove(p)
                out.flush()
                os.fsync(out.fileno())
            shape = [col.inner[0], col.rows]
        else:
            shape = [col.rows, *col.inner]
        digests = []
        with open(final, "rb") as fh:
            while True:
                h, got = _hash_piecewise(fh, self.chunk_bytes)
                if not got:
                    break
                digests.append(h)
        return {"dtype": col.dtype.name, "shape": shape, "axis": col.axis, "file": f"{col.name}.bin",
                "chunk_bytes": self.chunk_bytes, "sha256": digests}

    def commit(self) -> str:
        """Finish every tensor, write ``meta.json`` and move the store into
        place atomically. Returns the store's path."""
        if self._done:
            raise RuntimeError("the store was already committed or aborted")
        tensors = {name: self._finish(col) for name, col in self._cols.items()}
        meta = {"format": FORMAT_TAG, "version": FORMAT_VERSION, "kind": self.kind, "tensors": tensors,
                "attrs": json.loads(json.dumps(self.attrs))}
        meta["meta_sha256"] = _meta_digest(meta)
        with open(os.path.join(self.tmp, META_FILE), "w") as fh:
            json.dump(meta, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(self.tmp)
        old = None
        if os.path.exists(self.path):  # overwrite=True: move the old store aside first
            old = self.tmp + ".old"
            os.replace(self.path, old)
        os.replace(self.tmp, self.path)  # atomic: the store appears complete or not at all
        _fsync_dir(os.path.dirname(self.path) or ".")
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self._done = True
        return self.path

    def abort(self) -> None:
        """Drop everything written (the temporary directory)."""
        if self._done:
            return
        for col in self._cols.values():
            for h in col.handles:
                h.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._done = True

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


# ============================================================================ reader
class MappedStore:
    r"""A committed store, opened without reading its tensors.

    Opening checks ``meta.json`` (tag, version, its own SHA-256) and that every
    file has exactly the bytes its dtype and shape need.

    Args:
        path: the store directory.
        kind: the kind expected (``None``: any).

    Raises:
        StoreFormatError: missing/damaged ``meta.json``, foreign tag, unknown
            version, wrong kind, a missing or truncated tensor file.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], kind: Optional[str] = None) -> None:
        self.path = os.fspath(path)
        meta_path = os.path.join(self.path, META_FILE)
        if not os.path.isdir(self.path):
            raise StoreFormatError(f"{self.path}: not a store directory. {_remedy()}")
        try:
            with open(meta_path) as fh:
                meta = json.load(fh)
        except FileNotFoundError:
            raise StoreFormatError(f"{self.path}: {META_FILE} is missing: not a complete pyg_dynscale store "
                                   f"(an interrupted write leaves none). {_remedy()}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise StoreFormatError(f"{meta_path}: damaged or truncated ({exc}). {_remedy()}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_TAG:
            raise StoreFormatError(f"{meta_path}: not a pyg_dynscale store (format tag missing). {_remedy()}")
        if meta.get("version") != FORMAT_VERSION:
            raise StoreFormatError(f"{meta_path}: store format version {meta.get('version')!r} is not supported by this "
                                   f"pyg_dynscale (reads version {FORMAT_VERSION}). {_remedy()}")
        if meta.get("meta_sha256") != _meta_digest(meta):
            raise StoreFormatError(f"{meta_path}: checksum mismatch, the metadata was changed or damaged. {_remedy()}")
        if kind is not None and meta.get("kind") != kind:
            raise StoreFormatError(f"{self.path}: holds {meta.get('kind')!r} data, not {kind!r}. {_remedy()}")
        self.meta = meta
        self.kind: str = meta["kind"]
        self.attrs: dict[str, Any] = meta["attrs"]
        self._info: dict[str, dict] = meta["tensors"]
        self._verified: dict[str, set[int]] = {name: set() for name in self._info}
        self._cache: dict[str, Tensor] = {}
        for name, info in self._info.items():
            file = os.path.join(self.path, info["file"])
            need = int(np.prod(info["shape"], dtype=np.int64)) * np.dtype(info["dtype"]).itemsize
            have = os.path.getsize(file) if os.path.isfile(file) else None
            if have != need:
                what = "is missing" if have is None else f"has {have} bytes, expected {need}"
                raise StoreFormatError(f"{file}: {what} (truncated or damaged). {_remedy()}")

    @property
    def names(self) -> list[str]:
        """Names of the stored tensors."""
        return list(self._info)

    def __contains__(self, name: str) -> bool:
        return name in self._info

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._info[name]["shape"])

    def nbytes(self, name: Optional[str] = None) -> int:
        """Bytes of one tensor, or of all."""
        names = [name] if name is not None else self.names
        return sum(int(np.prod(self._info[n]["shape"], dtype=np.int64)) * np.dtype(self._info[n]["dtype"]).itemsize
                   for n in names)

    def tensor(self, name: str) -> Tensor:
        """The whole tensor, memory-mapped (copy-on-write: writing to it never
        changes the file); nothing is read and nothing verified."""
        if name not in self._info:
            raise KeyError(f"{self.path}: no tensor {name!r} (has {self.names})")
        if name not in self._cache:
            info = self._info[name]
            dtype = np.dtype(info["dtype"]).newbyteorder("<")
            shape = tuple(info["shape"])
            if int(np.prod(shape, dtype=np.int64)) == 0:
                t = torch.from_numpy(np.zeros(shape, dtype=dtype.newbyteorder("=")))
            else:
                arr = np.memmap(os.path.join(self.path, info["file"]), dtype=dtype, mode="c", shape=shape)
                t = torch.from_numpy(arr if dtype.isnative else arr.astype(dtype.newbyteorder("=")))
            self._cache[name] = t
        return self._cache[name]

    # ---------------------------------------------------------------- checks
    def _byte_ranges(self, name: str, start: int, stop: int) -> list[tuple[int, int]]:
        info = self._info[name]
        shape, item = info["shape"], np.dtype(info["dtype"]).itemsize
        if info["axis"] == 0:
            row = int(np.prod(shape[1:], dtype=np.int64)) * item
            return [(start * row, stop * row)]
        K, n = shape
        return [(k * n * item + start * item, k * n * item + stop * item) for k in range(K)]

    def _verify_chunks(self, name: str, chunks: Iterable[int]) -> None:
        info = self._info[name]
        todo = sorted(set(chunks) - self._verified[name])
        if not todo:
            return
        size, file = info["chunk_bytes"], os.path.join(self.path, info["file"])
        with open(file, "rb") as fh:
            for c in todo:
                fh.seek(c * size)
                if c >= len(info["sha256"]) or _hash_piecewise(fh, size)[0] != info["sha256"][c]:
                    raise StoreFormatError(f"{file}: checksum mismatch in bytes {c * size} .. {(c + 1) * size - 1}, "
                                           f"the file is corrupt. {_remedy()}")
                self._verified[name].add(c)

    def _row_count(self, name: str) -> int:
        info = self._info[name]
        return int(info["shape"][info["axis"]])

    def verify_rows(self, name: str, start: int, stop: int) -> None:
        """Verify the chunks holding rows ``start:stop`` of ``name`` (each chunk once per store object)."""
        n = self._row_count(name)
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        size = self._info[name]["chunk_bytes"]
        chunks: set[int] = set()
        for a, b in self._byte_ranges(name, start, stop):
            if b > a:
                chunks.update(range(a // size, (b - 1) // size + 1))
        self._verify_chunks(name, chunks)

    def rows(self, name: str, start: int, stop: int) -> Tensor:
        """Rows ``start:stop`` of ``name`` along its row axis, verified first:
        a view of the memory map (reading it reads only those rows' pages)."""
        self.verify_rows(name, start, stop)
        t = self.tensor(name)
        return t[start:stop] if self._info[name]["axis"] == 0 else t[:, start:stop]

    def read_rows(self, name: str, start: int, stop: int) -> Tensor:
        """Rows ``start:stop`` of ``name``, verified, as a new tensor read with
        plain file reads (``numpy.fromfile`` at an offset): the copy is all the
        process holds of the file, whereas the pages of a memory map -- and
        whatever the kernel maps around them -- count in its resident memory."""
        info = self._info[name]
        n = self._row_count(name)
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        self.verify_rows(name, start, stop)
        dtype = np.dtype(info["dtype"]).newbyteorder("<")
        file = os.path.join(self.path, info["file"])
        parts = []
        for a, b in self._byte_ranges(name, start, stop):
            count = (b - a) // dtype.itemsize
            parts.append(np.fromfile(file, dtype=dtype, count=count, offset=a) if count else np.zeros(0, dtype=dtype))
        shape = info["shape"]
        if info["axis"] == 0:
            out = parts[0].reshape((stop - start,) + tuple(shape[1:]))
        else:
            out = np.stack(parts) if parts else np.zeros((shape[0], 0), dtype=dtype)
        return torch.from_numpy(out.astype(dtype.newbyteorder("="), copy=False))

    def verify(self, names: Optional[Iterable[str]] = None) -> None:
        """Verify every chunk of the given tensors (default all), reading each once."""
        for name in (self.names if names is None else names):
            self._verify_chunks(name, range(len(self._info[name]["sha256"])))

    def __repr__(self) -> str:
        return f"MappedStore({self.path!r}, kind={self.kind!r}, tensors={len(self._info)}, bytes={self.nbytes()})"


# ============================================================================ signals
def write_signal_tensors(writer: StoreWriter, signal: "DynamicGraphSignal") -> None:
    """Put a whole in-memory signal into ``writer`` (the layout of :func:`load_signal_store`)."""
    writer.put("node_id", signal.node_id)
    writer.put("node_ptr", signal.node_ptr)
    if getattr(signal, "is_static", False):  # a static graph's one edge list, never its T-fold expansion
        writer.put("static_edge_index", signal.static_edge_index, axis=1)
        if signal.static_edge_weight is not None:
            writer.put("static_edge_weight", signal.static_edge_weight)
    else:
        writer.put("edge_index", signal.edge_index, axis=1)
        writer.put("edge_ptr", signal.edge_ptr)
        if signal.edge_weight is not None:
            writer.put("edge_weight", signal.edge_weight)
    fields = []  # a list: meta.json's keys are sorted, the fields' order is the signal's
    for name, f in signal.fields.items():
        axis = 1 if (f.level == "ragged" and f.cat_dim == 1) else 0
        writer.put(f"field.{name}.values", f.values, axis=axis)
        if f.ptr is not None:
            writer.put(f"field.{name}.ptr", f.ptr)
        fields.append({"name": name, "level": f.level, "cat_dim": int(f.cat_dim)})
    writer.attrs.update({"num_vertices": int(signal.num_vertices), "fields": fields})


class SignalAppender:
    r"""Append signals one after another (e.g. one snapshot at a time) to a
    signal store being written: offsets are shifted, ``edge_index`` and ragged
    ``*_index`` fields grow along their row axis. Every appended signal must
    have the same fields (names, levels) and all or none edge weights.
    :meth:`finish` records ``num_vertices`` (the largest of the parts') and
    the fields."""

    def __init__(self, writer: StoreWriter) -> None:
        self.w = writer
        self.nodes = self.edges = 0
        self.num_vertices = 0
        self.fields: Optional[list[dict]] = None
        self.offsets: dict[str, int] = {}
        self.weighted: Optional[bool] = None
        writer.append("node_ptr", np.zeros(1, dtype=np.int64))
        writer.append("edge_ptr", np.zeros(1, dtype=np.int64))

    def append(self, signal: "DynamicGraphSignal") -> None:
        fields = [{"name": n, "level": f.level, "cat_dim": int(f.cat_dim)} for n, f in signal.fields.items()]
        weighted = signal.edge_weight is not None
        if self.fields is None:
            self.fields, self.weighted = fields, weighted
            for f in fields:
                if f["level"] == "ragged":
                    self.w.append(f"field.{f['name']}.ptr", np.zeros(1, dtype=np.int64))
                    self.offsets[f["name"]] = 0
        elif fields != self.fields or weighted != self.weighted:
            raise ValueError(f"appended signal has fields {fields} (weighted {weighted}), the store {self.fields} "
                             f"(weighted {self.weighted})")
        self.w.append("node_ptr", signal.node_ptr[1:] + self.nodes)
        self.w.append("edge_ptr", signal.edge_ptr[1:] + self.edges)
        self.w.append("node_id", signal.node_id)
        self.w.append("edge_index", signal.edge_index, axis=1)
        if weighted:
            self.w.append("edge_weight", signal.edge_weight)
        for name, f in signal.fields.items():
            self.w.append(f"field.{name}.values", f.values, axis=1 if (f.level == "ragged" and f.cat_dim == 1) else 0)
            if f.level == "ragged":
                self.w.append(f"field.{name}.ptr", f.ptr[1:] + self.offsets[name])
                self.offsets[name] += int(f.ptr[-1])
        self.nodes += int(signal.node_ptr[-1])
        self.edges += int(signal.edge_ptr[-1])
        self.num_vertices = max(self.num_vertices, int(signal.num_vertices))

    def finish(self) -> None:
        """Record the number of vertices and the fields in the store's attributes."""
        self.w.attrs.update({"num_vertices": self.num_vertices, "fields": self.fields or []})


def save_signal_store(signal: "DynamicGraphSignal", path: Union[str, "os.PathLike[str]"], *,
                      overwrite: bool = False, chunk_bytes: int = CHUNK_BYTES) -> str:
    """Write an in-memory signal as a store directory; its extras
    ``vertex_map`` / ``snapshot_time`` / ``window`` are kept when present."""
    with StoreWriter(path, "signal", overwrite=overwrite, chunk_bytes=chunk_bytes) as w:
        write_signal_tensors(w, signal)
        for extra in ("vertex_map", "snapshot_time"):
            if isinstance(getattr(signal, extra, None), Tensor):
                w.put(f"extra.{extra}", getattr(signal, extra))
        if getattr(signal, "window", None) is not None:
            w.attrs["window"] = float(signal.window)
    return os.path.abspath(os.fspath(path))


def load_signal_store(path: Union[str, "os.PathLike[str]"], cls: type, *,
                      verify: bool = True) -> "DynamicGraphSignal":
    r"""Open a signal store: a :class:`DynamicGraphSignal` whose tensors are
    memory-mapped (``DynamicGraphSignal.load(DIR)`` calls this).

    Args:
        cls: the signal class (:class:`DynamicGraphSignal`; passed in, as to
            :func:`pyg_dynscale.data.io.load_signal`, so that this module
            imports nothing of the signal's).
        verify: check every chunk's SHA-256 first (reads the files once, in
            256 KiB pieces, holding none of them). ``False``: only the metadata and
            file sizes; a rank that reads a part then verifies that part with
            ``MappedStore(path).verify_rows(...)`` / ``rows(...)``.

    The signal is not re-validated element by element (that would bring the
    whole store into memory): the ingesting reader validated it, and the
    checksums guarantee it is what was written; the offsets are checked.
    ``vertex_map``, ``snapshot_time`` (tensors) and ``window`` are set as
    attributes when stored.
    """
    store = MappedStore(path, kind="signal")
    if verify:
        store.verify()
    static = "static_edge_index" in store
    core = ("node_id", "node_ptr") + (("static_edge_index",) if static else ("edge_index", "edge_ptr"))
    missing = [n for n in core if n not in store]
    if missing:
        raise StoreFormatError(f"{store.path}: a signal store needs {missing}. {_remedy()}")
    try:
        fields = {}
        for m in store.attrs["fields"]:
            name = m["name"]
            ptr = store.tensor(f"field.{name}.ptr") if f"field.{name}.ptr" in store else None
            fields[name] = SnapshotField(m["level"], store.tensor(f"field.{name}.values"), ptr, int(m["cat_dim"]))
        num_vertices = int(store.attrs["num_vertices"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreFormatError(f"{store.path}: damaged signal metadata ({type(exc).__name__}: {exc}). {_remedy()}") from None
    node_ptr = store.tensor("node_ptr")
    if static:
        edge_index, edge_ptr = store.tensor("static_edge_index"), None
        edge_weight = store.tensor("static_edge_weight") if "static_edge_weight" in store else None
    else:
        edge_index, edge_ptr = store.tensor("edge_index"), store.tensor("edge_ptr")
        edge_weight = store.tensor("edge_weight") if "edge_weight" in store else None
    if (node_ptr.numel() < 2 or int(node_ptr[-1]) != store.shape("node_id")[0]
            or (edge_ptr is not None and (edge_ptr.shape != node_ptr.shape or int(edge_ptr[-1]) != edge_index.shape[1]))):
        raise StoreFormatError(f"{store.path}: inconsistent offsets (node_ptr / edge_ptr do not match the tensors). {_remedy()}")
    obj = cls.from_storage(store.tensor("node_id"), node_ptr, edge_index, edge_ptr, edge_weight, fields, num_vertices)
    for extra in ("vertex_map", "snapshot_time"):
        if f"extra.{extra}" in store:
            setattr(obj, extra, store.tensor(f"extra.{extra}"))
    if "window" in store.attrs:
        obj.window = float(store.attrs["window"])
    return obj


# ============================================================================ events
_EVENT_KEYS = ("src", "dst", "t", "msg")


def save_events_store(data: "TemporalData", path: Union[str, "os.PathLike[str]"], *, overwrite: bool = False,
                      chunk_bytes: int = CHUNK_BYTES) -> str:
    """Write an in-memory event stream (``src``, ``dst``, ``t``, ``msg``,
    optional ``y`` and ``vertex_map``) as a store directory."""
    with StoreWriter(path, "events", overwrite=overwrite, chunk_bytes=chunk_bytes) as w:
        for key in _EVENT_KEYS + ("y", "vertex_map"):
            value = getattr(data, key, None)
            if isinstance(value, Tensor):
                w.put(key, value)
    return os.path.abspath(os.fspath(path))


def load_events_store(path: Union[str, "os.PathLike[str]"], *, verify: bool = True) -> "TemporalData":
    r"""Open an event store as a PyG :class:`~torch_geometric.data.TemporalData`
    whose ``src``, ``dst``, ``t`` ``[E]``, ``msg`` ``[E, F]`` (and ``y``
    ``[E]``, ``vertex_map`` ``[V]`` when stored) are memory-mapped:
    ``data[a:b]`` reads only events ``a .. b-1``.

    Args:
        verify: check every chunk's SHA-256 first; ``False``: a rank that
            reads events ``a:b`` verifies them with
            ``MappedStore(path, "events").rows(key, a, b)``.
    """
    from torch_geometric.data import TemporalData

    store = MappedStore(path, kind="events")
    if verify:
        store.verify()
    missing = [k for k in _EVENT_KEYS if k not in store]
    if missing:
        raise StoreFormatError(f"{store.path}: an event store needs {missing}. {_remedy()}")
    E = store.shape("src")[0]
    if any(store.shape(k)[0] != E for k in _EVENT_KEYS + ("y",) if k in store):
        raise StoreFormatError(f"{store.path}: src, dst, t, msg (and y) have different lengths. {_remedy()}")
    kw = {k: store.tensor(k) for k in _EVENT_KEYS + ("y",) if k in store}
    data = TemporalData(**kw)
    if "vertex_map" in store:
        data.vertex_map = store.tensor("vertex_map")
    return data
