"""The PyGT JSON chunked reader (data/ingest/pygt_json.py, json_stream.py): member by member it
gives load_pygt_json's signal exactly, the same errors (a malformed file's position included),
walks the
single-series datasets (chickenpox, pedalme) time step by time step holding a lag window, buffers the
standardized series (wikimaths) and those stored node by node (montevideo_bus, mtm) on disk, and holds one
member at a time."""
from __future__ import annotations

import gzip
import io
import json
import os
import random

import numpy as np
import pytest

from pyg_dynscale.data import DynamicGraphSignal, ingest_pygt_json
from pyg_dynscale.data.ingest import pygt_json as ingest_module, pygt_series
from pyg_dynscale.data.ingest.json_stream import JsonStream
from pyg_dynscale.data.loaders import DatasetFormatError, load_pygt_json
from pyg_dynscale.errors import SignalValidationError, UnsupportedOptionError
from tests.helpers.datasets import dataset_file
from tests.helpers.ingest_files import leftovers, peak_numpy_bytes


@pytest.mark.parametrize("name,opts", [
    ("pygt/twitter_tennis_rg17.json", {}),
    ("pygt/twitter_tennis_rg17.json", dict(N=300, feature_mode=None, target_offset=3)),
    ("pygt/twitter_tennis_rg17.json", dict(feature_mode="diagonal", N=50)),
    ("england_covid", {}),                      # the embedded gzip copy; its days come in no order
    ("england_covid", dict(lags=3)),
])
def test_member_by_member_is_load_pygt_json(tmp_path, name, opts):
    src = name if "/" not in name else dataset_file(name)
    a = load_pygt_json(src, **opts)
    b = ingest_pygt_json(src, tmp_path / "store", read_chars=4099, **opts)  # a snapshot spans several reads
    assert a.equals(b)
    assert a.equals(DynamicGraphSignal.load(str(tmp_path / "store")))


@pytest.mark.parametrize("text", ['{"a": [1,2,}', '{"a": 1 "b": 2}', '{"a": 1} x', '{"a": 12',
                                  '{"abcdefghijklmnop": [1, 2, 3, 4, 5, 6, 7], "b": [1,\n 2,, 3]}', '{"a": 1,}', "{"])
def test_json_stream_reports_malformed_json_as_json_does(text):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(DatasetFormatError) as got:
        list(JsonStream(io.BytesIO(text.encode()), "f.json", read_chars=16).walk(lambda p: True))
    assert f"({expected.value})" in str(got.value)


def test_json_stream_walks_what_json_loads(tmp_path):
    doc = {"0": {"edges": [[0, 1], [1, 2]], "y": [1.5, 2.25e-3], "s": "x"}, "n": 12345678901234, "e": {},
           "edge_mapping": {"edge_index": {"3": [[1, 1]], "1": []}}, "l": [{"a": 1}, None, True]}
    walked = {}
    for path, value in JsonStream(io.BytesIO(json.dumps(doc).encode()), "f", read_chars=16).walk(
            lambda p: len(p) == 1 or (len(p) == 2 and p[0] == "edge_mapping")):
        node = walked
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
    doc.pop("e")  # an empty object has no members to yield
    assert walked == doc


def _tennis(T, V, E, seed=0):
    rng = np.random.default_rng(seed)
    doc = {}
    for t in range(T):
        doc[str(t)] = {"index": t, "edges": rng.integers(0, V, (E, 2)).tolist(), "weights": rng.integers(1, 5, E).tolist(),
                       "y": rng.integers(0, 9, V).tolist(), "X": np.column_stack([rng.integers(0, 40, V), rng.random(V)]).tolist()}
    doc["time_periods"] = T
    doc["node_ids"] = {str(i): i for i in range(V)}
    return doc


@pytest.mark.parametrize("damage,error,pattern", [
    ("missing_y", DatasetFormatError, r"\['7'\]\['y'\].*is missing"),
    ("missing_snapshot", DatasetFormatError, r"key '9': is missing"),
    ("weights", DatasetFormatError, r"\['4'\]\['weights'\].*entries for"),
    ("ragged_x", DatasetFormatError, r"\['2'\]\['X'\].*not a rectangular"),
    ("edge_out_of_range", SignalValidationError, r"edge_indices\[5\]"),
    ("time_periods", DatasetFormatError, r"time_periods"),
])
def test_bad_files_raise_what_load_pygt_json_raises(tmp_path, damage, error, pattern):
    doc = _tennis(12, 30, 20)
    if damage == "missing_y":
        del doc["7"]["y"]
    elif damage == "missing_snapshot":
        del doc["9"]
    elif damage == "weights":
        doc["4"]["weights"].pop()
    elif damage == "ragged_x":
        doc["2"]["X"][3] = [1.0]
    elif damage == "edge_out_of_range":
        doc["5"]["edges"][0] = [0, 31]
    else:
        doc["time_periods"] = "twelve"
    path = tmp_path / "twitter_tennis_rg17.json"
    path.write_text(json.dumps(doc))
    opts = dict(dataset="twitter_tennis", feature_mode=None)
    with pytest.raises(error, match=pattern) as in_memory:
        load_pygt_json(path, **opts)
    with pytest.raises(error, match=pattern) as chunked:
        ingest_pygt_json(path, tmp_path / "store", read_chars=512, **opts)
    assert str(chunked.value) == str(in_memory.value)
    assert leftovers(tmp_path, keep={path.name}) == []


def test_malformed_json_is_refused_as_load_pygt_json_refuses_it(tmp_path):
    text = json.dumps(_tennis(4, 10, 5))
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress((text[:5000] + "," + text[5000:]).encode()))
    with pytest.raises(DatasetFormatError, match="JSON: is malformed") as in_memory:
        load_pygt_json(path, dataset="twitter_tennis")
    with pytest.raises(DatasetFormatError, match="JSON: is malformed") as chunked:
        ingest_pygt_json(path, tmp_path / "store", dataset="twitter_tennis", read_chars=100)
    assert str(chunked.value) == str(in_memory.value)


@pytest.mark.parametrize("name,opts", [
    ("pygt/chickenpox.json", {}),
    ("pygt/chickenpox.json", dict(lags=1)),
    ("pygt/pedalme_london.json", {}),
    ("pygt/pedalme_london.json", dict(lags=7, dataset="pedalme")),
])
def test_single_series_time_step_by_time_step_is_load_pygt_json(tmp_path, name, opts):
    src = dataset_file(name)
    a = load_pygt_json(src, **opts)
    b = ingest_pygt_json(src, tmp_path / "store", read_chars=257, **opts)  # a time step spans several reads
    assert a.equals(b)
    stored = DynamicGraphSignal.load(str(tmp_path / "store"))
    assert a.equals(stored) and stored.is_static
    assert (tmp_path / "store" / "static_edge_index.bin").exists() and not (tmp_path / "store" / "edge_index.bin").exists()
    for sa, sb in zip(a, stored):
        for k in ("x", "y", "edge_index", "edge_attr"):
            assert getattr(sa, k).dtype == getattr(sb, k).dtype and (getattr(sa, k) == getattr(sb, k)).all()


def _series_doc(T, V, seed=0, key="FX", weighted=False, ints=False):
    rng = np.random.default_rng(seed)
    E = 3 * V
    doc = {"edges": np.column_stack([rng.integers(0, V, E), rng.integers(0, V, E)]).tolist()}
    if weighted:
        doc["weights"] = rng.random(E).tolist()
    doc[key] = (rng.integers(0, 50, (T, V)) if ints else rng.random((T, V)) * 10).tolist()
    return doc


@pytest.mark.parametrize("damage,error,pattern", [
    ("missing_edges", DatasetFormatError, r"key 'edges'.*is missing"),
    ("missing_series", DatasetFormatError, r"key 'X'.*is missing"),
    ("ragged_row", DatasetFormatError, r"key 'X'.*not a rectangular"),
    ("string", DatasetFormatError, r"key 'X'.*non-numeric"),
    ("one_d", DatasetFormatError, r"key 'X'.*2-D array"),
    ("weights", DatasetFormatError, r"key 'weights'.*entries for"),
    ("edge_out_of_range", SignalValidationError, r"edge"),
    ("lags", SignalValidationError, r"lags"),
    ("nan", SignalValidationError, r"."),
    ("series_first", None, None),
    ("int_rows", None, None),
    ("mixed_rows", None, None),
])
def test_single_series_bad_files_raise_what_load_pygt_json_raises(tmp_path, damage, error, pattern):
    doc = _series_doc(30, 8, key="X", weighted=True, ints=damage in ("int_rows", "mixed_rows"))
    opts = dict(dataset="pedalme")
    if damage == "missing_edges":
        del doc["edges"]
    elif damage == "missing_series":
        del doc["X"]
    elif damage == "ragged_row":
        doc["X"][17] = doc["X"][17][:-1]
    elif damage == "string":
        doc["X"][5][2] = "a"
    elif damage == "one_d":
        doc["X"] = [1.0] * 30
    elif damage == "weights":
        doc["weights"].pop()
    elif damage == "edge_out_of_range":
        doc["edges"][4] = [0, 8]
    elif damage == "lags":
        opts["lags"] = 30
    elif damage == "nan":
        doc["X"][20][3] = float("nan")
    elif damage == "series_first":
        doc = {"X": doc["X"], "weights": doc["weights"], "edges": doc["edges"]}
    elif damage == "mixed_rows":
        doc["X"][9] = [v + 0.5 for v in doc["X"][9]]
    path = tmp_path / "pedalme_london.json"
    path.write_text(json.dumps(doc))
    if error is None:
        a = load_pygt_json(path, **opts)
        assert a.equals(ingest_pygt_json(path, tmp_path / "store", read_chars=64, **opts))
        return
    with pytest.raises(error, match=pattern) as in_memory:
        load_pygt_json(path, **opts)
    with pytest.raises(error, match=pattern) as chunked:
        ingest_pygt_json(path, tmp_path / "store", read_chars=64, **opts)
    assert str(chunked.value) == str(in_memory.value)
    assert leftovers(tmp_path, keep={path.name}) == []


def test_single_series_memory_holds_a_window_not_the_series(tmp_path):
    # 200 time steps of 2,000 nodes (~8 MB of JSON), lags 4: the window is 5 rows, 1/40 of the series
    path = tmp_path / "chickenpox.json"
    path.write_text(json.dumps(_series_doc(200, 2000)))
    peak = peak_numpy_bytes(lambda: ingest_pygt_json(path, tmp_path / "store", read_chars=1 << 16))
    whole = peak_numpy_bytes(lambda: load_pygt_json(path))
    # the graph's 6,000 edges as Python lists, a decoded row (~30 B a number), the window of 5 rows, a snapshot,
    # the read buffers, the hash buffers: ~2.2 MB whatever T (400 steps: the same); the whole series: ~33 MB
    bound = 3_000_000
    assert peak < bound, (peak, bound)
    assert whole > 4 * bound, (whole, bound)
    assert load_pygt_json(path).equals(DynamicGraphSignal.load(str(tmp_path / "store")))


def test_memory_holds_one_snapshot_not_the_file(tmp_path):
    # 150 snapshots of 300 vertices and 400 edges: ~3.5 MB of JSON; one snapshot is ~1/150 of it
    path = tmp_path / "twitter_tennis_rg17.json"
    path.write_text(json.dumps(_tennis(150, 300, 400)))
    opts = dict(feature_mode=None)
    peak = peak_numpy_bytes(lambda: ingest_pygt_json(path, tmp_path / "store", read_chars=1 << 16, **opts))
    whole = peak_numpy_bytes(lambda: load_pygt_json(path, **opts))
    # a snapshot's decoded members (Python lists: ~60 B a number, 2,200 numbers), the read buffers, the copy/hash buffers
    bound = 2_000_000
    assert peak < bound, (peak, bound)
    assert whole > 3 * bound, (whole, bound)
    assert load_pygt_json(path, **opts).equals(DynamicGraphSignal.load(str(tmp_path / "store")))


# ----------------------------------------------------------------- wikimaths, montevideo_bus, mtm
def _wiki_doc(T, V, seed=0, ints=True):
    """WikiMaths' layout: one member per time step (written in shuffled order), page visits as integers."""
    rng = np.random.default_rng(seed)
    E = 3 * V
    doc = {"edges": np.column_stack([rng.integers(0, V, E), rng.integers(0, V, E)]).tolist(), "weights": rng.random(E).tolist()}
    Z = rng.integers(0, 5000, (T, V)) if ints else rng.random((T, V)) * 100
    order = list(range(T))
    random.Random(seed).shuffle(order)
    for t in order:
        doc[str(t)] = {"index": t, "y": Z[t].tolist()}
    doc["time_periods"] = T
    return doc


def _bus_doc(T, V, variables=("y",), seed=0):
    """Montevideo bus' layout: the nodes (bus stops with sparse ids) each with its whole series per variable."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(10 ** 6, V, replace=False).tolist()
    nodes = [{"bus_stop": ids[v], "X": {k: (rng.integers(0, 30, T).tolist() if k == "y" else (rng.random(T) * 20).tolist())
                                        for k in variables}, "y": rng.integers(0, 30, T).tolist()} for v in range(V)]
    links = [{"source": ids[rng.integers(V)], "target": ids[rng.integers(V)], "weight": float(rng.random())} for _ in range(2 * V)]
    return {"nodes": nodes, "links": links}


def _mtm_doc(L, seed=0):
    """MTM's layout: 21 joints each mapping every frame to an '(x, y, z)' string, then the labels."""
    rng = np.random.default_rng(seed)
    doc = {"edges": rng.integers(0, 21, (30, 2)).tolist()}
    for j in range(21):
        doc[str(j)] = {str(f): "(%r, %r, %r)" % tuple(rng.normal(size=3).tolist()) for f in range(L)}
    doc["LABEL"] = {str(f): int(rng.integers(0, 6)) for f in range(L)}
    return doc


@pytest.fixture
def streamed_only(monkeypatch):
    """Small column blocks and chunks (many of each), and no way round the stream: a valid file that
    fell back to the in-memory loader would fail here instead of passing as equal."""
    monkeypatch.setattr(pygt_series, "BLOCK_VALUES", 64)
    monkeypatch.setattr(pygt_series, "FRAME_CHUNK", 7)

    def refuse(*args, **kwargs):
        raise AssertionError("a valid file fell back to the whole-file loader")
    monkeypatch.setattr(ingest_module, "in_memory", refuse)


@pytest.mark.parametrize("name,doc,opts", [
    ("wikivital_mathematics.json", lambda: _wiki_doc(40, 9), {}),                            # detected, lags 8
    ("w.json", lambda: _wiki_doc(40, 9, ints=False), dict(dataset="wikimaths", lags=3)),
    ("w.json", lambda: _wiki_doc(30, 1), dict(dataset="wikimaths", lags=2)),              # one column: summed pairwise
    ("montevideo_bus.json", lambda: _bus_doc(30, 7), {}),
    ("m.json", lambda: _bus_doc(30, 7, ("y", "x1")), dict(dataset="montevideo_bus", feature_vars=["y", "x1"], lags=3)),
    ("m.json", lambda: _bus_doc(25, 1), dict(dataset="montevideo_bus", lags=2)),
    ("mtm_1.json", lambda: _mtm_doc(50), {}),                                                 # detected, frames 16
    ("t.json", lambda: _mtm_doc(30), dict(dataset="mtm", frames=5)),
])
def test_standardized_and_node_by_node_series_are_load_pygt_json(tmp_path, streamed_only, name, doc, opts):
    path = tmp_path / name
    path.write_text(json.dumps(doc()))
    a = load_pygt_json(path, **opts)
    b = ingest_pygt_json(path, tmp_path / "store", read_chars=97, **opts)
    assert a.equals(b) and b.is_static
    for sa, sb in zip(a, b):
        for k in ("x", "y", "edge_index", "edge_attr"):
            assert getattr(sa, k).dtype == getattr(sb, k).dtype and (getattr(sa, k) == getattr(sb, k)).all()
    assert leftovers(tmp_path, keep={path.name, "store"}) == []  # the series buffers are gone


def _damaged(kind, damage):
    if kind == "wikimaths":
        doc, opts = _wiki_doc(20, 6), dict(dataset="wikimaths", lags=3)
        if damage == "missing_row":
            del doc["11"]
        elif damage == "missing_y":
            del doc["4"]["y"]
        elif damage == "ragged_row":
            doc["13"]["y"].pop()
        elif damage == "string":
            doc["6"]["y"][2] = "a"
        elif damage == "weights":
            doc["weights"].pop()
        elif damage == "time_periods":
            doc["time_periods"] = 0
        elif damage == "lags":
            opts["lags"] = 20
        elif damage == "constant_column":  # std 0: NaN, as PyGT gives
            for t in range(20):
                doc[str(t)]["y"][3] = 7
        elif damage == "edge_out_of_range":
            doc["edges"][2] = [0, 6]
    elif kind == "montevideo_bus":
        doc, opts = _bus_doc(20, 5), dict(dataset="montevideo_bus", lags=3)
        if damage == "missing_y":
            del doc["nodes"][3]["y"]
        elif damage == "ragged_row":
            doc["nodes"][2]["X"]["y"].pop()
        elif damage == "string":
            doc["nodes"][1]["X"]["y"][0] = "a"
        elif damage == "duplicate_stop":
            doc["nodes"][4]["bus_stop"] = doc["nodes"][0]["bus_stop"]
        elif damage == "unknown_stop":
            doc["links"][3]["target"] = -5
        elif damage == "lags":
            opts["lags"] = 20
        elif damage == "constant_column":
            doc["nodes"][2]["y"] = [3] * 20
        elif damage == "constant_feature_of_two":  # x is graph-level: the message names no snapshot
            doc = _bus_doc(20, 5, ("y", "x1"))
            doc["nodes"][1]["X"]["x1"] = [2.5] * 20
            opts["feature_vars"] = ["y", "x1"]
        elif damage == "empty_feature_vars":
            opts["feature_vars"] = []
        elif damage == "malformed":
            return '{"nodes": [1, 2}', opts
    else:
        doc, opts = _mtm_doc(30), dict(dataset="mtm", frames=5)
        if damage == "coordinate":
            doc["7"]["12"] = "(1.0, abc, 2.0)"
        elif damage == "short_joint":
            del doc["20"]["3"]
        elif damage == "two_coordinates":
            doc["3"]["0"] = "(1.0, 2.0)"
        elif damage == "label":
            doc["LABEL"]["5"] = -1
        elif damage == "frames":
            opts["frames"] = 30
        elif damage == "frames_type":
            opts["frames"] = 2.5
        elif damage == "nan":
            doc["9"]["20"] = "(nan, 1.0, 2.0)"
        elif damage == "missing_edges":
            del doc["edges"]
    return json.dumps(doc), opts


@pytest.mark.parametrize("kind,damage", [
    ("wikimaths", d) for d in ("missing_row", "missing_y", "ragged_row", "string", "weights", "time_periods", "lags",
                               "constant_column", "edge_out_of_range")] + [
    ("montevideo_bus", d) for d in ("missing_y", "ragged_row", "string", "duplicate_stop", "unknown_stop", "lags",
                                    "constant_column", "constant_feature_of_two", "empty_feature_vars", "malformed")] + [
    ("mtm", d) for d in ("coordinate", "short_joint", "two_coordinates", "label", "frames", "frames_type", "nan",
                         "missing_edges")])
def test_series_bad_files_and_options_raise_what_load_pygt_json_raises(tmp_path, monkeypatch, kind, damage):
    monkeypatch.setattr(pygt_series, "BLOCK_VALUES", 64)
    text, opts = _damaged(kind, damage)
    path = tmp_path / "series.json"
    path.write_text(text)
    with pytest.raises(Exception) as in_memory:
        load_pygt_json(path, **opts)
    with pytest.raises(type(in_memory.value)) as chunked:
        ingest_pygt_json(path, tmp_path / "store", read_chars=64, **opts)
    assert str(chunked.value) == str(in_memory.value)
    assert isinstance(in_memory.value, (DatasetFormatError, SignalValidationError)), in_memory.value
    assert leftovers(tmp_path, keep={path.name}) == []


@pytest.mark.parametrize("damage,node,needle", [
    ("constant_column", 2, "field 'y': the series of bus stop '{stop}' is constant (3 at all 20 time steps)"),
    ("constant_feature_of_two", 1, "field 'X': the series of bus stop '{stop}', variable 'x1' is constant (2.5 at all 20"),
])
def test_a_constant_bus_series_is_named(tmp_path, monkeypatch, damage, node, needle):
    """Montevideo: the constant target or feature series is named by bus stop (and variable), in memory and
    streamed (blocks of 64 values: the series is not in the first block)."""
    monkeypatch.setattr(pygt_series, "BLOCK_VALUES", 64)
    text, opts = _damaged("montevideo_bus", damage)
    path = tmp_path / "bus.json"
    path.write_text(text)
    needle = needle.format(stop=json.loads(text)["nodes"][node]["bus_stop"])
    for read in (lambda: load_pygt_json(path, **opts),
                 lambda: ingest_pygt_json(path, tmp_path / "store", read_chars=64, **opts)):
        with pytest.raises(SignalValidationError) as err:
            read()
        assert needle in str(err.value), str(err.value)


def test_constant_column_with_allow_nonfinite_gives_the_loaders_nan(tmp_path, streamed_only):
    text, opts = _damaged("wikimaths", "constant_column")
    path = tmp_path / "w.json"
    path.write_text(text)
    a = load_pygt_json(path, allow_nonfinite=True, **opts)
    b = ingest_pygt_json(path, tmp_path / "store", allow_nonfinite=True, **opts)
    for sa, sb in zip(a, b):
        for k in ("x", "y"):
            va, vb = getattr(sa, k).numpy(), getattr(sb, k).numpy()
            assert np.isnan(va).any() and (va.view(np.int32) == vb.view(np.int32)).all()


@pytest.mark.parametrize("kind", ["wikimaths", "montevideo_bus", "mtm"])
def test_series_memory_holds_a_block_not_the_series(tmp_path, kind):
    # ~40 column blocks / window chunks in each file: the reader's peak is a block, a member (a time step's
    # row, a node, a chunk of frames), the graph and O(T) counters; the whole-file loader's is the file
    # a column block of BLOCK_VALUES (65,536) float64 numbers, 0.5 MB (~1/40 of the file), with the
    # standardization's temporaries: ~2.4 MB at most whatever T and V; MTM (no standardization): a chunk of
    # FRAME_CHUNK frames' strings and ~65 windows, ~1 MB; the whole-file loader: the file
    if kind == "wikimaths":
        doc, name, opts, bound = _wiki_doc(400, 2000, ints=False), "wikivital_mathematics.json", dict(lags=8), 3_000_000
    elif kind == "montevideo_bus":
        doc, name, opts, bound = _bus_doc(4000, 500), "montevideo_bus.json", {}, 3_000_000
    else:
        doc, name, opts, bound = _mtm_doc(6000), "mtm_1.json", {}, 1_500_000
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    del doc
    size = os.path.getsize(path)
    peak = peak_numpy_bytes(lambda: ingest_pygt_json(path, tmp_path / "store", read_chars=1 << 16, **opts))
    loaded = []
    whole = peak_numpy_bytes(lambda: loaded.append(load_pygt_json(path, **opts)))
    assert size > 4 * bound, size
    assert peak < bound, (peak, bound)
    assert whole > 4 * bound, (whole, bound)
    assert loaded[0].equals(DynamicGraphSignal.load(str(tmp_path / "store")))


def test_column_blocks_sum_in_the_loaders_order(tmp_path, monkeypatch):
    # the standardized float64 buffer == the loader's standardize on the whole array, bit for bit (the signal's
    # float32 hides last-bit differences). numpy sums a one-column block of a long integer series pairwise
    # (buffered cast), a wider row-major block row by row as the loader's [T, V] array: a one-column block
    # differs in the last bits (a split into single columns turns this red); Montevideo's node-major blocks are
    # the loader's transposed layout, summed pairwise either way
    from pyg_dynscale.data.loaders.pygt_json import standardize
    monkeypatch.setattr(pygt_series, "BLOCK_VALUES", 40_000)  # 2 columns of T = 20,000 per block
    assert list(pygt_series._blocks(5, 20_000)) == [(0, 2), (2, 5)]
    assert list(pygt_series._blocks(1, 20_000)) == [(0, 1)]
    written = []
    write = pygt_series._write_cols

    def record(path, shape, c0, c1, values):
        written.append((os.path.basename(path), c0, c1, values.copy()))
        write(path, shape, c0, c1, values)
    monkeypatch.setattr(pygt_series, "_write_cols", record)

    def buffer(name, shape):
        out = np.full(shape, np.nan)
        for n, c0, c1, v in written:
            if n == name:
                out[:, c0:c1] = v
        return out

    def same_bits(a, b):
        return a.shape == b.shape and (a.view(np.int64) == b.view(np.int64)).all()

    wiki = _wiki_doc(20_000, 5)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(wiki))
    ingest_pygt_json(path, tmp_path / "w.store", dataset="wikimaths", feature_lags=2)
    Z = np.array([wiki[str(t)]["y"] for t in range(20_000)])
    assert same_bits(buffer("std", Z.shape), standardize(Z))
    written.clear()
    bus = _bus_doc(20_000, 3, ("y", "x1"))
    path = tmp_path / "m.json"
    path.write_text(json.dumps(bus))
    ingest_pygt_json(path, tmp_path / "m.store", dataset="montevideo_bus", feature_vars=["y", "x1"], feature_lags=2)
    feats = np.array([[n["X"][v] for v in ("y", "x1")] for n in bus["nodes"]])
    assert same_bits(buffer("std.feat", (20_000, 6)), standardize(feats.reshape(6, 20_000).T))
    targ = np.array([n["y"] for n in bus["nodes"]])
    assert same_bits(buffer("std.targ", (20_000, 3)), standardize(targ.T))


@pytest.mark.parametrize("damage", ["bool_series", "huge_int"])
def test_a_file_the_stream_declines_is_read_whole_to_the_same_signal(tmp_path, damage):
    # accepted by the loader but not by the stream (a float64 buffer would not hold 2**60 exactly; a boolean
    # series changes the array's dtype rules): read whole, the loader's signal (no error, no leftovers)
    doc = _bus_doc(20, 5)
    if damage == "bool_series":
        doc["nodes"][2]["X"]["y"] = [bool(t % 2) for t in range(20)]
    else:
        doc["nodes"][1]["y"][4] = 2 ** 60
    path = tmp_path / "montevideo_bus.json"
    path.write_text(json.dumps(doc))
    a = load_pygt_json(path, feature_lags=3)
    assert a.equals(ingest_pygt_json(path, tmp_path / "store", feature_lags=3))
    assert leftovers(tmp_path, keep={path.name, "store"}) == []
