"""The on-disk, memory-mappable store (data/mapped.py): chunked writes, memory-mapped reads,
per-chunk checksums verified only where read, damaged stores refused, atomic commit, the
signal and event layouts."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from torch_geometric.data import TemporalData

from pyg_dynscale.data import DynamicGraphSignal
from pyg_dynscale.data.loaders import load_england_covid
from pyg_dynscale.data.mapped import (
    META_FILE,
    MappedStore,
    StoreFormatError,
    StoreWriter,
    load_events_store,
    load_signal_store,
    save_events_store,
    save_signal_store,
)
from pyg_dynscale.errors import SignalValidationError


def mapped_file(t: torch.Tensor) -> str:
    """The file whose memory map holds ``t``'s data ("" if none): /proc/self/maps."""
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps")
    ptr = t.data_ptr()
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= ptr < hi:
                return parts[5] if len(parts) > 5 else ""
    return ""


def _store(path, chunk_bytes=64):
    rng = np.random.default_rng(0)
    a = rng.integers(-5, 5, 100)
    e = rng.integers(0, 9, (2, 50))
    x = rng.normal(size=(100, 3)).astype(np.float32)
    with StoreWriter(path, chunk_bytes=chunk_bytes) as w:
        for s in range(0, 100, 7):  # appended in uneven chunks
            w.append("a", a[s:s + 7])
            w.append("x", x[s:s + 7])
        for s in range(0, 50, 11):
            w.append("e", e[:, s:s + 11], axis=1)
        w.put("empty", np.zeros((0, 4), dtype=np.float64))
        w.attrs["note"] = "hi"
    return a, e, x


def test_chunked_writes_read_back_memory_mapped(tmp_path):
    a, e, x = _store(tmp_path / "s")
    s = MappedStore(tmp_path / "s")
    assert set(s.names) == {"a", "x", "e", "empty"} and s.attrs == {"note": "hi"}
    assert torch.equal(s.tensor("a"), torch.from_numpy(a)) and s.tensor("a").dtype == torch.int64
    assert torch.equal(s.tensor("e"), torch.from_numpy(e)) and s.shape("e") == (2, 50)
    assert torch.equal(s.tensor("x"), torch.from_numpy(x)) and s.tensor("x").dtype == torch.float32
    assert s.tensor("empty").shape == (0, 4)
    assert torch.equal(s.rows("e", 13, 29), torch.from_numpy(e[:, 13:29]))  # rows of an axis-1 tensor are columns
    assert torch.equal(s.rows("x", 90, 100), torch.from_numpy(x[90:]))
    for name, ref, (lo, hi) in (("e", e, (13, 29)), ("x", x, (5, 77)), ("a", a, (0, 100)), ("e", e, (7, 7))):
        got = s.read_rows(name, lo, hi)  # plain file reads: not a map of the file
        want = ref[:, lo:hi] if name == "e" else ref[lo:hi]
        assert torch.equal(got, torch.from_numpy(want))
        assert got.numel() == 0 or not mapped_file(got).startswith(str(tmp_path))
    assert mapped_file(s.tensor("a")) == str(tmp_path / "s" / "a.bin")
    assert mapped_file(s.rows("x", 50, 60)) == str(tmp_path / "s" / "x.bin")
    s.tensor("a")[0] = 99  # copy-on-write: the file is unchanged
    assert int(MappedStore(tmp_path / "s").tensor("a")[0]) == int(a[0])


def _flip_byte(path, offset):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0xFF]))


def test_a_corrupt_chunk_is_refused_where_read_and_only_there(tmp_path):
    _store(tmp_path / "s", chunk_bytes=64)
    _flip_byte(tmp_path / "s" / "a.bin", 64 * 3 + 5)  # chunk 3 of a: rows 24..31 (8 bytes a row)
    s = MappedStore(tmp_path / "s")                  # opening reads no tensor
    assert s.rows("a", 0, 24).shape == (24,)         # chunks 0..2 verify
    assert s.rows("a", 32, 100).shape == (68,)
    with pytest.raises(StoreFormatError, match=r"a\.bin: checksum mismatch in bytes 192 \.\. 255"):
        s.rows("a", 30, 31)
    with pytest.raises(StoreFormatError, match=r"a\.bin: checksum mismatch"):
        s.read_rows("a", 20, 26)
    with pytest.raises(StoreFormatError, match="checksum mismatch"):
        MappedStore(tmp_path / "s").verify()
    MappedStore(tmp_path / "s").verify(["e", "x"])


def test_the_chunks_read_are_the_ones_verified(tmp_path):
    _store(tmp_path / "s", chunk_bytes=64)
    s = MappedStore(tmp_path / "s")
    s.rows("e", 10, 12)  # e is [2, 50] int64: row 0 bytes 80..95 (chunk 1), row 1 bytes 480..495 (chunk 7)
    assert s._verified["e"] == {1, 7}
    s.rows("a", 0, 1)
    assert s._verified["a"] == {0} and s._verified["x"] == set()


@pytest.mark.parametrize("damage,pattern", [
    ("no_meta", r"meta\.json is missing"),
    ("truncated_meta", r"damaged or truncated"),
    ("edited_meta", r"checksum mismatch, the metadata"),
    ("version", r"version 7 is not supported"),
    ("foreign", r"not a pyg_dynscale store"),
    ("truncated_file", r"x\.bin: has 1196 bytes, expected 1200"),
    ("missing_file", r"e\.bin: is missing"),
])
def test_damaged_stores_are_refused_on_open(tmp_path, damage, pattern):
    _store(tmp_path / "s")
    meta_path = tmp_path / "s" / META_FILE
    meta = json.loads(meta_path.read_text())
    if damage == "no_meta":
        meta_path.unlink()
    elif damage == "truncated_meta":
        meta_path.write_text(meta_path.read_text()[:-40])
    elif damage == "edited_meta":
        meta["tensors"]["a"]["shape"] = [99]
        meta_path.write_text(json.dumps(meta))
    elif damage in ("version", "foreign"):
        meta.update(version=7) if damage == "version" else meta.update(format="something.else")
        from pyg_dynscale.data.mapped import _meta_digest
        meta["meta_sha256"] = _meta_digest(meta)
        meta_path.write_text(json.dumps(meta))
    elif damage == "truncated_file":
        p = tmp_path / "s" / "x.bin"
        p.write_bytes(p.read_bytes()[:-4])
    else:
        (tmp_path / "s" / "e.bin").unlink()
    with pytest.raises(StoreFormatError, match=pattern):
        MappedStore(tmp_path / "s")


def test_commit_is_atomic_and_existing_stores_are_kept(tmp_path):
    with pytest.raises(RuntimeError):
        with StoreWriter(tmp_path / "s") as w:
            w.append("a", np.arange(3))
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []  # neither the store nor its temporary directory
    _store(tmp_path / "s")
    with pytest.raises(SignalValidationError, match="already exists.*overwrite=True"):
        StoreWriter(tmp_path / "s")
    with StoreWriter(tmp_path / "s", overwrite=True) as w:
        w.put("b", np.arange(4))
    assert MappedStore(tmp_path / "s").names == ["b"] and sorted(os.listdir(tmp_path)) == ["s"]


def test_a_signal_round_trips_and_load_opens_a_directory(tmp_path):
    sig = load_england_covid()
    save_signal_store(sig, tmp_path / "sig", chunk_bytes=4096)
    back = DynamicGraphSignal.load(str(tmp_path / "sig"))  # data.io dispatches a directory to the store
    assert back.equals(sig)
    assert mapped_file(back.fields["x"].values) == str(tmp_path / "sig" / "field.x.values.bin")
    assert mapped_file(back.edge_index) == str(tmp_path / "sig" / "edge_index.bin")
    for t in (0, 17, 52):
        a, b = sig[t], back[t]
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)


def test_a_signal_store_with_a_corrupt_chunk_is_refused_by_load(tmp_path):
    sig = load_england_covid()
    save_signal_store(sig, tmp_path / "sig", chunk_bytes=4096)
    _flip_byte(tmp_path / "sig" / "edge_index.bin", 5000)
    with pytest.raises(StoreFormatError, match="edge_index.bin: checksum mismatch"):
        DynamicGraphSignal.load(str(tmp_path / "sig"))
    unverified = load_signal_store(tmp_path / "sig", DynamicGraphSignal, verify=False)  # a rank reading other parts
    assert torch.equal(unverified.fields["y"].values, sig.fields["y"].values)
    with pytest.raises(StoreFormatError, match="is not 'events'|holds 'signal' data"):
        load_events_store(tmp_path / "sig")


def test_events_round_trip_memory_mapped(tmp_path):
    g = torch.Generator().manual_seed(0)
    data = TemporalData(src=torch.randint(0, 9, (40,), generator=g), dst=torch.randint(0, 9, (40,), generator=g),
                        t=torch.arange(40), msg=torch.randn(40, 3, generator=g), y=torch.randint(0, 2, (40,), generator=g))
    save_events_store(data, tmp_path / "ev", chunk_bytes=32)
    back = load_events_store(tmp_path / "ev")
    for key in ("src", "dst", "t", "msg", "y"):
        assert torch.equal(getattr(back, key), getattr(data, key))
    part = back[10:20]  # a TemporalData slice of memory-mapped tensors
    assert torch.equal(part.msg, data.msg[10:20]) and part.num_events == 10


def test_a_static_graph_is_stored_once_and_reopened_static(tmp_path):
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 6, (2, 9))
    sig = DynamicGraphSignal(edges, rng.random(9), [rng.random((6, 2)) for _ in range(40)], [rng.random(6) for _ in range(40)])
    assert sig.is_static
    save_signal_store(sig, tmp_path / "s")
    assert MappedStore(tmp_path / "s").shape("static_edge_index") == (2, 9)  # one list, not 40
    assert "edge_index" not in MappedStore(tmp_path / "s")
    back = DynamicGraphSignal.load(str(tmp_path / "s"))
    assert back.is_static and back.equals(sig)
