"""MappedSignal: a signal file (version 1, ``torch.save``) or store directory (version 2,
``data.mapped``) opened memory-mapped; ``read(snapshots)`` equals ``signal.select(snapshots)``
bit for bit, counts exactly the bytes it copies, hands back the pages of the map it touched (a
rank's resident memory grows by its copy only), verifies a store's chunks of the rows it reads,
and refuses damaged or foreign files with the cause."""
from __future__ import annotations

import os

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.distributed import spawn
from pyg_dynscale.data.mapped import StoreFormatError, save_signal_store
from pyg_dynscale.errors import ModelInputError, SignalFormatError
from pyg_dynscale.windows.mapped_signal import CHUNK_BYTES, MappedSignal, is_mapped_source
from pyg_dynscale.windows import series_signal
from tests.helpers.process_memory import glibc, peak_rss_measurable, pin_allocator, proc_status, reset_peak
from tests.helpers.windows import chickenpox, covid


def _files(sig: DynamicGraphSignal, tmp_path, name: str) -> list:
    path = str(tmp_path / f"{name}.pt")
    sig.save(path)
    store = save_signal_store(sig, str(tmp_path / f"{name}.store"))
    return [path, store]


def _row_bytes(sig: DynamicGraphSignal, idx: torch.Tensor) -> int:
    part = sig.select(idx)
    edges = [part.static_edge_index, part.static_edge_weight] if part.is_static else [part.edge_index, part.edge_weight]
    tensors = [part.node_id, *edges, *(f.values for f in part.fields.values())]
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _series():
    """A static graph stored once (format version 2 writes its one edge list)."""
    g = torch.Generator().manual_seed(0)
    edges = torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 0]])
    return series_signal(torch.randn(31, 5, 2, generator=g, dtype=torch.float64), edges,
                         torch.rand(6, generator=g, dtype=torch.float64), dtype=torch.float64)


@pytest.mark.parametrize("make", [lambda: chickenpox(T=30), _series, lambda: covid(T=14)],
                         ids=["static", "stored-once", "changing"])
def test_read_equals_select_and_counts_the_bytes_it_copies(tmp_path, make):
    sig = make()
    idx = torch.tensor([0, 1, 2, 5, 6, 9, 10, 11])
    for path in _files(sig, tmp_path, "s"):
        src = MappedSignal(path)
        assert src.static == sig.is_static
        assert is_mapped_source(src) and is_mapped_source(path) and not is_mapped_source(sig)
        assert src.num_snapshots == sig.num_snapshots and src.bytes_read == 0  # opening reads no rows
        part = src.read(idx)
        assert part.equals(sig.select(idx))
        assert src.bytes_read == _row_bytes(sig, idx)
        assert src.load().equals(sig)
        src.verify()


def test_read_refuses_unsorted_or_out_of_range_snapshots(tmp_path):
    src = MappedSignal(_files(chickenpox(T=10), tmp_path, "s")[0])
    for bad in ([2, 1], [0, 0], [10], []):
        with pytest.raises(ModelInputError, match="sorted distinct"):
            src.read(torch.tensor(bad, dtype=torch.long))


def test_foreign_missing_and_damaged_files_are_refused_with_the_cause(tmp_path):
    sig = chickenpox(T=10)
    path, store = _files(sig, tmp_path, "s")
    with pytest.raises(FileNotFoundError):
        MappedSignal(str(tmp_path / "nope.pt"))
    torch.save({"format": "something else", "version": 1}, str(tmp_path / "foreign.pt"))
    with pytest.raises(SignalFormatError, match="format tag missing"):
        MappedSignal(str(tmp_path / "foreign.pt"))
    (tmp_path / "text.pt").write_text("not an archive")
    with pytest.raises(SignalFormatError, match="not a memory-mappable"):
        MappedSignal(str(tmp_path / "text.pt"))
    # pointers that do not split the rows: refused at opening (reading trusts them)
    payload = torch.load(path, weights_only=True)
    payload["tensors"]["node_ptr"] = payload["tensors"]["node_ptr"].clone()
    payload["tensors"]["node_ptr"][-1] += 1
    torch.save(payload, str(tmp_path / "ptr.pt"))
    with pytest.raises(SignalFormatError, match="node_ptr does not split"):
        MappedSignal(str(tmp_path / "ptr.pt"))
    # a changed feature: not seen by a rank's partial read of a version-1 file, found by verify()
    payload = torch.load(path, weights_only=True)
    payload["tensors"]["field.x.values"] = payload["tensors"]["field.x.values"] + 1
    torch.save(payload, str(tmp_path / "x.pt"))
    with pytest.raises(SignalFormatError, match="checksum mismatch"):
        MappedSignal(str(tmp_path / "x.pt")).verify()
    # a store: the changed chunk is refused by the first read of its rows, other rows read fine
    xfile = os.path.join(store, MappedSignal(store).store._info["field.x.values"]["file"])
    with open(xfile, "r+b") as fh:
        fh.seek(os.path.getsize(xfile) - 8)
        fh.write(b"\x00" * 8)
    src = MappedSignal(store)
    with pytest.raises(StoreFormatError, match="checksum mismatch"):
        src.read(torch.tensor([9]))


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="peak RSS reset needs Linux /proc")
def test_the_pages_of_the_map_are_handed_back_so_resident_memory_grows_by_the_copy(tmp_path):
    T, N, F = 400, 100, 128  # x: 41 MB of float64, ten chunks
    sig = DynamicGraphSignal.from_tensors(
        node_ptr=torch.arange(T + 1) * N, edge_ptr=torch.zeros(T + 1, dtype=torch.long),
        edge_index=torch.zeros(2, 0, dtype=torch.long), x=torch.randn(T * N, F, dtype=torch.float64),
        y=torch.zeros(T * N, dtype=torch.float64))
    path = str(tmp_path / "big.pt")
    sig.save(path)
    del sig
    src = MappedSignal(path)
    assert src.releases
    x = src.read(torch.arange(T // 2, T)).x  # half: 20.5 MB
    del x
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the peak (VmHWM) restarts from the current resident size
    base = proc_status("VmRSS")
    copied = src.bytes_read
    x = src.read(torch.arange(T // 2)).x  # the other half, never touched before
    grown = proc_status("VmHWM") - base
    read = src.bytes_read - copied
    assert read >= 20_000_000 and torch.equal(x[:1], DynamicGraphSignal.load(path).x[:1])
    # the copy plus at most one chunk of the map and the allocator's slack; keeping the pages of the
    # map (no release) would be twice the copy
    assert grown <= read + CHUNK_BYTES + (4 << 20), (grown, read)


# ------------------------------------------------------------------ x and y one series in the file
@pytest.mark.parametrize("idx", [[0, 1, 2, 5, 6, 9, 10, 11], [3, 4, 6], list(range(30)), [29], [7]])
def test_read_series_holds_x_and_y_once_and_equals_select_on_the_snapshots_asked(tmp_path, idx):
    """series_signal's X_t = D_t, Y_t = D_{t+1} share one storage in the file: the part copies D once
    (x and y views of one buffer), each run's next snapshot added as the slot between runs; every
    asked snapshot equals select() bit for bit, an added one's x and graph too (its y is the next run's)."""
    sig = _series()
    path, store = _files(sig, tmp_path, "s")
    src = MappedSignal(path)
    assert src.series_pair() == ("x", "y")
    idx = torch.tensor(idx)
    part, held = src.read_series(idx)
    runs = torch.nonzero(idx[1:] != idx[:-1] + 1).flatten()
    added = idx[runs] + 1
    assert torch.equal(held, torch.cat([idx, added]).sort().values)
    assert part.y.untyped_storage().data_ptr() == part.x.untyped_storage().data_ptr()
    assert part.y.data_ptr() - part.x.data_ptr() == 5 * 2 * 8                    # one snapshot (5 rows x 2) later
    ref = sig.select(held)
    assert torch.equal(part.x, ref.x) and part.is_static and torch.equal(part.static_edge_index, ref.static_edge_index)
    pos = {int(t): i for i, t in enumerate(held)}
    for t in idx.tolist():                                                      # the asked snapshots: the file's
        i = pos[t]
        assert torch.equal(part.y[i * 5:(i + 1) * 5], sig.y[t * 5:(t + 1) * 5])
    # bytes copied: D once (x's rows plus one snapshot per run), not x and y; the graph; the ids compared
    assert src.bytes_read == (held.numel() + 1) * 5 * 2 * 8 + (sig.static_edge_index.numel() + 6) * 8 \
        + held.numel() * 5 * 8
    # a store directory maps each tensor from its own file: no pair, read() as before
    s2 = MappedSignal(store)
    assert s2.series_pair() is None
    p2, h2 = s2.read_series(idx)
    assert torch.equal(h2, idx) and p2.equals(sig.select(idx))


def test_no_series_pair_where_x_and_y_do_not_share_a_storage(tmp_path):
    for sig in (chickenpox(T=12), covid(T=8)):
        path = str(tmp_path / "c.pt")
        sig.save(path)
        src = MappedSignal(path)
        assert src.series_pair() is None
        part, held = src.read_series(torch.tensor([1, 2, 7]))
        assert torch.equal(held, torch.tensor([1, 2, 7])) and part.equals(sig.select(held))


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="peak RSS reset needs Linux /proc")
def _series_peaks(rank: int, world_size: int, path: str, T: int) -> dict:
    """In a process of its own, the allocator pinned (a freed buffer leaves the RSS at once, whatever ran
    before): the peak RSS growth of ``read_series`` and of ``read`` on the same two runs of snapshots."""
    pin_allocator()
    src = MappedSignal(path)
    warm, _ = src.read_series(torch.arange(10))  # first-use allocations are not the part's
    del warm
    half = torch.cat([torch.arange(0, T // 4), torch.arange(T // 2, 3 * T // 4)])  # two runs: 25.6 MB of D
    base = reset_peak()
    part, held = src.read_series(half)
    grown = proc_status("VmHWM") - base
    facts = {"held": held.numel(), "half": half.numel(), "rows": part.x.shape[0]}
    del part
    base = reset_peak()
    part = src.read(half)
    return {**facts, "grown": grown, "twice": proc_status("VmHWM") - base}


@pytest.mark.skipif(not peak_rss_measurable() or glibc() is None, reason="needs Linux /proc and glibc's mallopt")
def test_read_series_resident_memory_grows_by_one_copy_of_the_part(tmp_path):
    T, N, F = 2000, 100, 32  # D: 51 MB of float64; half of it per part
    g = torch.Generator().manual_seed(0)
    sig = series_signal(torch.randn(T + 1, N, F, generator=g, dtype=torch.float64), torch.tensor([[0, 1], [1, 0]]),
                        dtype=torch.float64)
    path = str(tmp_path / "series.pt")
    sig.save(path)
    del sig
    out = spawn(_series_peaks, 1, path, T, timeout=240)[0]
    assert out["held"] == out["half"] + 1 and out["rows"] == out["held"] * N
    once = out["half"] * N * F * 8
    bound = 1.2 * once + CHUNK_BYTES + (4 << 20)
    assert out["grown"] <= bound, (out["grown"] / 2**20, bound / 2**20)
    # read() copies x and y apart: twice the part, far above the bound (the meter sees a second copy)
    assert out["twice"] > bound + 0.5 * once, (out["twice"] / 2**20, bound / 2**20)
