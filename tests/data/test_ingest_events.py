"""The chunked event readers (data/ingest/events.py): in chunks of 7 lines they give
load_jodie_csv's and load_event_list's TemporalData exactly (memory-mapped), raise the same errors
with the same line numbers, sort unsorted files out of core, and hold memory bounded by the chunk."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from pyg_dynscale.ctdg import ingest_event_list, ingest_jodie_csv, load_event_list, load_events_store, load_jodie_csv
from pyg_dynscale.data.loaders import DatasetFormatError
from pyg_dynscale.data.mapped import StoreFormatError
from pyg_dynscale.errors import SignalValidationError
from tests.helpers.datasets import dataset_file
from tests.helpers.ingest_files import assert_same_tensors, leftovers, peak_numpy_bytes, write_edge_file

JODIE_KEYS = ("src", "dst", "t", "msg", "y")
EVENT_KEYS = ("src", "dst", "t", "msg", "vertex_map")
HEADER = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features\n"


def jodie_text(n=200, *, features=2, sorted_times=True, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 60, n) * 2.5
    t = np.sort(t) if sorted_times else t
    rows = []
    for i in range(n):
        if i % 29 == 3:
            rows.append("% a comment between events\n")
        feats = "".join(f",{rng.normal():.17g}" for _ in range(features))
        rows.append(f"{rng.integers(0, 30)},{rng.integers(0, 12)},{float(t[i])!r},{rng.integers(0, 2)}{feats}\n")
    return "".join(rows)


@pytest.mark.parametrize("header,crlf,gz,features", [(True, False, False, 2), (False, True, False, 0),
                                                     (True, True, True, 3)])
def test_jodie_in_chunks_of_seven_is_load_jodie_csv(tmp_path, header, crlf, gz, features):
    text = ("\ufeff" if header else "") + (HEADER if header else "") + jodie_text(features=features)
    data = text.replace("\n", "\r\n") if crlf else text
    path = tmp_path / "e.csv"
    path.write_bytes(gzip.compress(data.encode()) if gz else data.encode())
    a = load_jodie_csv(path)
    b = ingest_jodie_csv(path, tmp_path / "store", chunk_rows=7)
    assert_same_tensors(a, b, JODIE_KEYS)
    assert_same_tensors(a, load_events_store(tmp_path / "store"), JODIE_KEYS)


def test_jodie_unsorted_with_sort_is_sorted_out_of_core(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text(HEADER + jodie_text(400, sorted_times=False))
    a = load_jodie_csv(path, sort=True)
    b = ingest_jodie_csv(path, tmp_path / "store", sort=True, chunk_rows=7)  # 58 sorted runs, two merge passes
    assert_same_tensors(a, b, JODIE_KEYS)


ROWS = ["0,0,0.0,0,0.5,-1.0\n", "1,0,36.0,0,0.25,2.0\n", "0,2,77.0,1,1.0,0.0\n", "2,1,77.0,0,-3.5,4.0\n"]
FILL = "".join(f"{i % 5},{i % 3},{100.0 + i},0,0.5,1.0\n" for i in range(20))  # lines 2..21 with a header


@pytest.mark.parametrize("text,pattern", [
    (HEADER + FILL + ROWS[0], r"line 22.*earlier than the previous.*sort"),
    (HEADER + ROWS[0] + ROWS[2] + ROWS[1], r"line 4.*earlier than the previous.*sort"),
    (HEADER + FILL + "1,0,136.0,0,0.25\n", r"line 22: has 5 fields but line 2 has 6"),
    (HEADER + FILL + "1,x,136.0,0,0.25,2.0\n", r"line 22, column 1 \(item\).*'x'"),
    (FILL + "-1,0,136.0,0,0.25,2.0\n", r"line 21, column 0 \(user\).*>= 0"),
    ("1,2,3\n" * 9, r"line 1: has 3 fields"),
    ("", r"no data lines"),
    ("% c\n" * 20, r"no data lines"),
    (HEADER, r"content: is a header line and no events"),  # detected, not asked for: no skip_rows named
    (HEADER + FILL + "1000000000000,0,136.0,0,0.25,2.0\n",  # 10^12 ids: ~7 TiB of node memory, named not allocated
     r"line 22, column 0 \(user\): holds node id 1000000000000: JODIE ids are not renumbered.*TiB.*renumber"),
    (HEADER + "0,1000000000000,1.0,0,0.25,2.0\n", r"line 2, column 1 \(item\): holds node id 1000000000000"),
])
def test_jodie_bad_input_raises_what_load_jodie_csv_raises(tmp_path, text, pattern):
    path = tmp_path / "e.csv"
    path.write_text(text)
    with pytest.raises(DatasetFormatError, match=pattern) as in_memory:
        load_jodie_csv(path)
    with pytest.raises(DatasetFormatError, match=pattern) as chunked:
        ingest_jodie_csv(path, tmp_path / "store", chunk_rows=7)
    assert str(chunked.value) == str(in_memory.value)
    assert leftovers(tmp_path, keep={"e.csv"}) == []


def test_the_id_limit_is_this_machines_memory_at_node_bytes(tmp_path):
    """An id is refused when its node memory, ``(id + 1) * node_bytes`` (items after the users), exceeds this
    machine's physical memory: measured, not a constant (node_bytes of a 500th of the memory: ids up to ~500)."""
    from pyg_dynscale.data.loaders._common import physical_memory_bytes

    node_bytes = physical_memory_bytes() // 500
    path = tmp_path / "e.csv"
    path.write_text(HEADER + "0,0,1.0,0,0.5\n3,200,2.0,0,0.5\n")  # 3 users, items to 200: 205 nodes
    assert load_jodie_csv(path, node_bytes=node_bytes).num_nodes == 205
    assert ingest_jodie_csv(path, tmp_path / "ok", node_bytes=node_bytes).num_nodes == 205
    path.write_text(HEADER + "0,0,1.0,0,0.5\n3,600,2.0,0,0.5\n")  # item 600 is node 604: over the memory
    for read in (lambda: load_jodie_csv(path, node_bytes=node_bytes),
                 lambda: ingest_jodie_csv(path, tmp_path / "store", node_bytes=node_bytes, chunk_rows=1)):
        with pytest.raises(DatasetFormatError, match=r"line 3, column 1 \(item\): holds node id 600"):
            read()
    assert load_jodie_csv(path).num_nodes == 605  # the default, 8 bytes a node: far below any memory


@pytest.mark.parametrize("opts", [dict(), dict(msg_columns=(2,), columns=(0, 1, 3)), dict(self_loops=False),
                                  dict(sort=False, sorted_times=True)])
def test_event_list_in_chunks_of_seven_is_load_event_list(tmp_path, opts):
    sorted_times = opts.pop("sorted_times", False)
    path = write_edge_file(tmp_path / "g.txt", 300, sorted_times=sorted_times,
                           weights="msg_columns" in opts or "columns" in opts)
    a = load_event_list(path, **opts)
    b = ingest_event_list(path, tmp_path / "store", chunk_rows=7, **opts)
    assert_same_tensors(a, b, EVENT_KEYS)


@pytest.mark.parametrize("rel", ["snap/CollegeMsg.txt", "snap/sx-mathoverflow.txt.gz"])
def test_shared_event_lists_ingest_as_they_load(tmp_path, rel):
    path = dataset_file(rel)  # sx-mathoverflow is not in time order
    assert_same_tensors(load_event_list(path), ingest_event_list(path, tmp_path / "s", chunk_rows=30011), EVENT_KEYS)


@pytest.mark.parametrize("text,kwargs,error,pattern", [
    ("".join(f"{i} {i + 1} {i}\n" for i in range(20)) + "5 6 3\n", {"sort": False}, DatasetFormatError,
     r"line 21: has timestamp 3, earlier than the previous event's 19"),
    ("".join(f"{i} {i + 1} {i}\n" for i in range(20)) + "5 6\n", {}, DatasetFormatError, r"line 21: has 2 fields but line 1 has 3"),
    ("".join(f"{i} {i} {i}\n" for i in range(20)), {"self_loops": False}, DatasetFormatError, r"removed every event"),
    ("1 2 3\n" * 10, {"columns": (0, 1, 5)}, SignalValidationError, r"columns\[2\] \(time\)"),
])
def test_event_list_bad_input_raises_what_load_event_list_raises(tmp_path, text, kwargs, error, pattern):
    path = tmp_path / "g.txt"
    path.write_text(text)
    with pytest.raises(error, match=pattern) as in_memory:
        load_event_list(path, **kwargs)
    with pytest.raises(error, match=pattern) as chunked:
        ingest_event_list(path, tmp_path / "store", chunk_rows=7, **kwargs)
    assert str(chunked.value) == str(in_memory.value)
    assert leftovers(tmp_path, keep={"g.txt"}) == []


def test_a_corrupt_event_store_is_refused_where_read(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text(jodie_text(300))
    ingest_jodie_csv(path, tmp_path / "store", chunk_bytes=256)
    raw = bytearray((tmp_path / "store" / "t.bin").read_bytes())
    raw[1000] ^= 0xFF  # t is int64: event 125, chunk 3
    (tmp_path / "store" / "t.bin").write_bytes(bytes(raw))
    with pytest.raises(StoreFormatError, match=r"t\.bin: checksum mismatch"):
        load_events_store(tmp_path / "store")
    from pyg_dynscale.data.mapped import MappedStore

    store = MappedStore(tmp_path / "store", "events")
    assert store.rows("t", 0, 96).shape == (96,)  # a rank reading events 0..95 is not stopped
    with pytest.raises(StoreFormatError, match="checksum mismatch"):
        store.rows("t", 100, 130)


def test_jodie_memory_is_bounded_by_the_chunk_not_the_file(tmp_path):
    # 25,000 events with 4 features (~2 MB of text), chunks of 600 lines (40x)
    path = tmp_path / "big.csv"
    rng = np.random.default_rng(0)
    n, chunk = 25_000, 600
    feats = rng.normal(size=(n, 4))
    path.write_text(HEADER + "".join(f"{i % 997},{i % 89},{i},0,{f[0]!r},{f[1]!r},{f[2]!r},{f[3]!r}\n"
                                     for i, f in enumerate(feats.tolist())))
    peak = peak_numpy_bytes(lambda: ingest_jodie_csv(path, tmp_path / "s", chunk_rows=chunk))
    whole = peak_numpy_bytes(lambda: load_jodie_csv(path))
    bound = 600 * chunk + 2 * 2 ** 18  # a chunk's tokens (8 fields) and columns, the store's copy/hash buffers
    assert peak < bound, (peak, bound)
    assert whole > 3 * bound, (whole, bound)
    assert_same_tensors(load_jodie_csv(path), load_events_store(tmp_path / "s"), JODIE_KEYS)
