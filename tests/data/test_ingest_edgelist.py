"""The chunked edge-list reader (data/ingest/edgelist.py): in chunks of 7 lines it gives
load_edge_list's signal exactly (but the negative link labels' draws, which are per snapshot and
checked for validity and chunk independence), the same errors with the same line numbers, a
store that DynamicGraphSignal.load reopens, and memory bounded by the chunk, not the file."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from pyg_dynscale.data import DynamicGraphSignal, ingest_edge_list
from pyg_dynscale.data.loaders import DatasetFormatError, DatasetNotFoundError, load_edge_list
from pyg_dynscale.errors import SignalValidationError
from tests.helpers.datasets import dataset_file
from tests.helpers.ingest_files import leftovers, peak_numpy_bytes, write_edge_file

CORE = ("node_ptr", "edge_ptr", "node_id", "edge_index", "edge_weight", "vertex_map", "snapshot_time")


def assert_same_signal(a: DynamicGraphSignal, b: DynamicGraphSignal, link: bool) -> None:
    """Bitwise equal, dtypes included; for link targets the positives and the label offsets
    (negatives are drawn per snapshot, see test_negative_labels_...)."""
    assert a.num_vertices == b.num_vertices and a.window == b.window
    for key in CORE:
        x, y = getattr(a, key), getattr(b, key)
        assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), key
    assert list(a.fields) == list(b.fields)
    for name, f in a.fields.items():
        g = b.fields[name]
        assert (f.level, f.cat_dim) == (g.level, g.cat_dim), name
        if link and name.startswith("edge_label"):
            assert torch.equal(f.ptr, g.ptr), name
            continue
        assert f.values.dtype == g.values.dtype and torch.equal(f.values, g.values), name
    if link:
        pa, pb = a.fields["edge_label"].values == 1, b.fields["edge_label"].values == 1
        assert torch.equal(pa, pb)
        assert torch.equal(a.fields["edge_label_index"].values[:, pa], b.fields["edge_label_index"].values[:, pb])


OPTIONS = [
    dict(),
    dict(target="degree"),
    dict(target=None, vertex_set="window"),
    dict(target="degree", vertex_set="window", undirected=True, degree_transform="normalize"),
    dict(target=None, drop_empty=False, degree_transform="log1p", self_loops=False),
    dict(target="link", vertex_set="window", drop_empty=False, negative_ratio=2.0),
    dict(columns=(0, 1, 3), weight_column=2, weight_agg="sum", target="degree", undirected=True),
    dict(columns=(0, 1, 3), weight_column=2, weight_agg="mean", target=None),
    dict(columns=(0, 1, 3), weight_column=2, weight_agg="min", features=None),
]


@pytest.mark.parametrize("sorted_times", [False, True])
@pytest.mark.parametrize("opts", OPTIONS)
def test_chunks_of_seven_lines_give_load_edge_list_s_signal(tmp_path, opts, sorted_times):
    path = write_edge_file(tmp_path / "g.txt", 300, sorted_times=sorted_times)
    a = load_edge_list(path, window=20, **opts)
    b = ingest_edge_list(path, tmp_path / "store", window=20, chunk_rows=7, **opts)
    assert_same_signal(a, b, opts.get("target", "link") == "link")
    assert_same_signal(a, DynamicGraphSignal.load(str(tmp_path / "store")), opts.get("target", "link") == "link")


@pytest.mark.parametrize("rel,window,opts", [
    ("snap/CollegeMsg.txt", "1d", dict(target="degree")),
    ("snap/email-Eu-core-temporal.txt.gz", "7d", dict(vertex_set="window")),
    ("snap/soc-sign-bitcoinotc.csv.gz", "30d", dict(columns=(0, 1, 3), weight_column=2, weight_agg="mean", target=None)),
    ("snap/sx-mathoverflow.txt.gz", "30d", dict(target="degree", undirected=True)),
])
def test_the_shared_datasets_ingest_as_they_load(tmp_path, rel, window, opts):
    path = dataset_file(rel)  # sx-mathoverflow and email-Eu-core are not in time order: the external sort runs
    a = load_edge_list(path, window=window, **opts)
    b = ingest_edge_list(path, tmp_path / "store", window=window, chunk_rows=65536, **opts)  # several sorted runs
    assert_same_signal(a, b, opts.get("target", "link") == "link")


def test_negative_labels_are_valid_and_independent_of_the_chunk_size(tmp_path):
    path = write_edge_file(tmp_path / "g.txt", 300)
    a = load_edge_list(path, window=20)
    b = ingest_edge_list(path, tmp_path / "s7", window=20, chunk_rows=7)
    c = ingest_edge_list(path, tmp_path / "s1m", window=20, chunk_rows=2 ** 20)
    for key in ("edge_label_index", "edge_label"):
        assert torch.equal(b.fields[key].values, c.fields[key].values)  # per-snapshot generators
    ptr = b.fields["edge_label"].ptr
    assert torch.equal(ptr, a.fields["edge_label"].ptr)  # as many negatives as load_edge_list draws
    for t in range(len(b)):
        idx = b.fields["edge_label_index"].values[:, ptr[t]:ptr[t + 1]]
        lab = b.fields["edge_label"].values[ptr[t]:ptr[t + 1]]
        pos = {tuple(p) for p in idx[:, lab == 1].T.tolist()}
        neg = [tuple(p) for p in idx[:, lab == 0].T.tolist()]
        n_t = int(b.node_ptr[t + 1] - b.node_ptr[t])
        assert len(set(neg)) == len(neg) and not (set(neg) & pos)
        assert all(u != v and 0 <= u < n_t and 0 <= v < n_t for u, v in neg)


def test_gzip_and_delimiters_and_header(tmp_path):
    path = write_edge_file(tmp_path / "g.csv", 120, sep=";", comments=False)
    text = "src;dst;w;time\n" + path.read_text()
    gz = tmp_path / "g.csv.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    a = load_edge_list(gz, window=50, delimiter=";", skip_rows=1, target="degree")
    b = ingest_edge_list(gz, tmp_path / "s", window=50, delimiter=";", skip_rows=1, target="degree", chunk_rows=7)
    assert_same_signal(a, b, False)


def _lines(n, bad_at=None, bad="", start="1 2 1.0 10\n"):
    rows = [f"{i % 7} {(i * 3) % 5} 1.0 {i * 10}\n" for i in range(n)]
    if bad_at is not None:
        rows[bad_at - 1] = bad
    return "".join(rows)


@pytest.mark.parametrize("text,kwargs,error,pattern", [
    (_lines(40, 33, "1 2 3\n"), {}, DatasetFormatError, r"line 33: has 3 fields but line 1 has 4"),
    (_lines(40, 29, "1 x 1.0 5\n"), {}, DatasetFormatError, r"line 29, column 1 \(target\).*'x'"),
    (_lines(40, 18, "1 2 1.0 nan\n"), {}, DatasetFormatError, r"line 18, column 3 \(time\).*not finite"),
    (_lines(40, 12, "1.5 2 1.0 5\n"), {}, DatasetFormatError, r"line 12, column 0 \(source\).*'1.5'"),
    ("% only\n\n# comments\n" * 5, {}, DatasetFormatError, r"no data lines"),
    ("", {}, DatasetFormatError, r"no data lines"),
    ("% c\n1 2 1.0 3\n", {"skip_rows": 3}, DatasetFormatError, r"skips 3 lines but there are only 1"),
    (_lines(20), {"columns": (0, 1, 9)}, SignalValidationError, r"columns\[2\] \(time\).*4 columns"),
    (_lines(20), {"columns": (0, 0, 3)}, SignalValidationError, r"name the same column twice"),
    ("3 3 1 10\n" * 20, {"self_loops": False}, SignalValidationError, r"removed every event"),
    (_lines(20), {"window": 1e-300}, SignalValidationError, r"too small for the events' time span"),
    (_lines(20), {"window": 10 ** 6}, SignalValidationError, r"all events into 1 snapshot"),
    (_lines(20), {"window": 0}, SignalValidationError, r"window"),
    (_lines(20), {"vertex_set": "all"}, SignalValidationError, r"vertex_set"),
])
def test_bad_input_raises_what_load_edge_list_raises(tmp_path, text, kwargs, error, pattern):
    path = tmp_path / "g.txt"
    path.write_text(text)
    kwargs = {"window": 30, **kwargs}
    with pytest.raises(error, match=pattern) as in_memory:
        load_edge_list(path, **kwargs)
    with pytest.raises(error, match=pattern) as chunked:
        ingest_edge_list(path, tmp_path / "store", chunk_rows=7, **kwargs)
    assert str(chunked.value) == str(in_memory.value)
    assert leftovers(tmp_path, keep={"g.txt"}) == []  # no store, no partial store, no scratch


def test_a_missing_file_and_an_existing_store(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="never downloads"):
        ingest_edge_list(tmp_path / "nope.txt", tmp_path / "s", window=10)
    path = write_edge_file(tmp_path / "g.txt", 50)
    ingest_edge_list(path, tmp_path / "s", window=100)
    with pytest.raises(SignalValidationError, match="already exists"):
        ingest_edge_list(path, tmp_path / "s", window=100)
    ingest_edge_list(path, tmp_path / "s", window=50, overwrite=True)
    assert DynamicGraphSignal.load(str(tmp_path / "s")).window == 50


def test_memory_is_bounded_by_the_chunk_not_the_file(tmp_path):
    # 40,000 events (~1 MB of text, 40x the chunk), times sorted in 3,000 windows of ~13 events
    rng = np.random.default_rng(1)
    n, chunk = 40_000, 1_000
    src, dst = rng.integers(0, 5_000, n), rng.integers(0, 5_000, n)
    t = np.sort(rng.integers(0, 3_000_000, n))
    path = tmp_path / "big.txt"
    path.write_text("".join(f"{a} {b} {c}\n" for a, b, c in zip(src.tolist(), dst.tolist(), t.tolist())))
    opts = dict(window=1000, target="degree", vertex_set="window")  # rows per snapshot ~ its events
    peak = peak_numpy_bytes(lambda: ingest_edge_list(path, tmp_path / "s", chunk_rows=chunk, **opts))
    whole = peak_numpy_bytes(lambda: load_edge_list(path, **opts))
    # a chunk's parsing and binning temporaries (~300 B a line), the [V] id table, the store's 256 KiB copy and
    # hash buffers; reading the whole file at once needs ~40x the first
    bound = 300 * chunk + 64 * 5_000 + 2 * 2 ** 18
    assert peak < bound, (peak, bound)
    assert whole > 3 * bound, (whole, bound)  # the bound tells chunked from whole-file reading apart
    assert_same_signal(load_edge_list(path, **opts), DynamicGraphSignal.load(str(tmp_path / "s")), False)
