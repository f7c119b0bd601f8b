"""Temporal edge-list loader: parsing options, binning, vertex sets, degree
features, link / degree targets, negative sampling, errors, SNAP smoke tests.

A plain-Python reference implementation (dicts and loops, fine for tiny
inputs) defines the expected snapshots."""
from __future__ import annotations

import gzip
import math
import os
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch

from pyg_dynscale.data.loaders import DatasetFormatError, DatasetNotFoundError, load, load_edge_list, parse_window
from pyg_dynscale.errors import SignalValidationError
from tests.helpers.datasets import dataset_file, real_dataset_file, stand_in_file

# source target time (seconds); window 10 s -> bins 0, 0, 0, 1, 1, 3, 3 (bin 2 empty)
TINY = """% KONECT-style header
# SNAP-style comment
10 20 0
20 30 5
10 20 9

   # indented comment
30 10 10
10 20 12
40 10 31
10 40 35
"""


def write(tmp_path: Path, text: str, name: str = "g.txt") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------ reference
def reference(events, window, vertex_set="cumulative", undirected=False, self_loops=True, drop_empty=True):
    """events: list of (src, dst, time). Returns per-snapshot dicts (all T windows)."""
    if not self_loops:
        events = [e for e in events if e[0] != e[1]]
    t0 = min(e[2] for e in events)
    bins = [math.floor((e[2] - t0) / window) for e in events]
    used = sorted(set(bins)) if drop_empty else list(range(max(bins) + 1))
    snap_of_bin = {b: i for i, b in enumerate(used)}
    new_id: dict[int, int] = {}
    for i in sorted(range(len(events)), key=lambda i: events[i][2]):
        for raw in events[i][:2]:
            new_id.setdefault(raw, len(new_id))
    T = len(used)
    edges = [defaultdict(float) for _ in range(T)]
    first = {}
    for (a, b, _), bn in zip(events, bins):
        s, u, v = snap_of_bin[bn], new_id[a], new_id[b]
        edges[s][(u, v)] += 1
        if undirected and u != v:
            edges[s][(v, u)] += 1
        for x in (u, v):
            first[x] = min(first.get(x, T), s)
    out = []
    for s in range(T):
        if vertex_set == "cumulative":
            nodes = sorted(x for x in first if first[x] <= s)
        else:
            nodes = sorted({x for e in edges[s] for x in e})
        row = {x: i for i, x in enumerate(nodes)}
        ed = sorted(edges[s])
        indeg = [0] * len(nodes)
        outdeg = [0] * len(nodes)
        for u, v in ed:
            outdeg[row[u]] += 1
            indeg[row[v]] += 1
        out.append({"nodes": nodes, "row": row, "edges": [(row[u], row[v]) for u, v in ed],
                    "weights": [edges[s][e] for e in ed], "in": indeg, "out": outdeg,
                    "deg": {x: outdeg[row[x]] + (0 if undirected else indeg[row[x]]) for x in nodes}})
    return out, {i: raw for raw, i in new_id.items()}


def assert_matches_reference(sig, ref, target):
    T = len(ref) - (1 if target else 0)
    assert sig.num_snapshots == T
    for t in range(T):
        d = sig[t]
        r = ref[t]
        assert d.n_id.tolist() == r["nodes"]
        assert d.edge_index.t().tolist() == [list(e) for e in r["edges"]]
        assert d.edge_attr.tolist() == r["weights"]
        assert d.x[:, 0].tolist() == r["in"] and d.x[:, 1].tolist() == r["out"]
        if target == "degree":
            nxt = ref[t + 1]["deg"]
            assert d.y.tolist() == [nxt.get(x, 0) for x in r["nodes"]]
        if target == "link":
            P = int(d.edge_label.sum())
            pos = [(r["row"][ref[t + 1]["nodes"][a]], r["row"][ref[t + 1]["nodes"][b]])
                   for a, b in ref[t + 1]["edges"]
                   if ref[t + 1]["nodes"][a] in r["row"] and ref[t + 1]["nodes"][b] in r["row"]]
            assert d.edge_label_index[:, :P].t().tolist() == [list(e) for e in pos]
            assert torch.all(d.edge_label[:P] == 1) and torch.all(d.edge_label[P:] == 0)


def random_events(rng, n=80, V=15, span=100.0):
    src = rng.integers(0, V, n) * 7 + 3
    dst = rng.integers(0, V, n) * 7 + 3
    tt = np.round(rng.random(n) * span, 3)
    return [(int(a), int(b), float(c)) for a, b, c in zip(src, dst, tt)]


def events_file(tmp_path, events, name="r.txt"):
    return write(tmp_path, "".join(f"{a} {b} {c!r}\n" for a, b, c in events), name)


# ------------------------------------------------------------------ hand-checked example
def test_tiny_cumulative_by_hand(tmp_path):
    s = load_edge_list(write(tmp_path, TINY), window=10, target=None)
    # ids by first appearance: 10->0, 20->1, 30->2, 40->3; bins 0,1,3 -> 3 snapshots
    assert s.vertex_map.tolist() == [10, 20, 30, 40]
    assert s.num_snapshots == 3 and s.window == 10.0
    assert s.snapshot_time.tolist() == [0.0, 10.0, 30.0]
    assert s.nodes_per_snapshot.tolist() == [3, 3, 4]
    assert s[0].edge_index.tolist() == [[0, 1], [1, 2]] and s[0].edge_attr.tolist() == [2.0, 1.0]
    assert s[1].edge_index.tolist() == [[0, 2], [1, 0]]
    assert s[2].edge_index.tolist() == [[0, 3], [3, 0]]
    assert s[0].x.tolist() == [[0, 1], [1, 1], [1, 0]]  # (in, out)
    assert s[2].x.tolist() == [[1, 1], [0, 0], [0, 0], [1, 1]]
    assert s.x.dtype == torch.float32 and s.edge_weight.dtype == torch.float32


def test_tiny_window_vertex_set_and_empty_windows(tmp_path):
    s = load_edge_list(write(tmp_path, TINY), window=10, target=None, vertex_set="window", drop_empty=False)
    assert s.num_snapshots == 4 and s.nodes_per_snapshot.tolist() == [3, 3, 0, 2]
    assert s[3].n_id.tolist() == [0, 3] and s[3].edge_index.tolist() == [[0, 1], [1, 0]]
    assert s[2].edge_index.shape == (2, 0)


def test_tiny_targets_by_hand(tmp_path):
    s = load_edge_list(write(tmp_path, TINY), window=10, target="degree")
    assert s.num_snapshots == 2
    assert s[0].y.tolist() == [2.0, 1.0, 1.0]  # degrees in snapshot 1: 10:(in1,out1) 20:(in1) 30:(out1)
    assert s[1].y.tolist() == [2.0, 0.0, 0.0]  # 10 <-> 40 in the last snapshot; 40 not in V_1
    s = load_edge_list(write(tmp_path, TINY), window=10, target="link", negative_ratio=0)
    assert s[0].edge_label_index.tolist() == [[0, 2], [1, 0]] and s[0].edge_label.tolist() == [1.0, 1.0]
    assert s[1].edge_label_index.shape == (2, 0)  # both positives of t+1 touch vertex 40, new at t+1


# ------------------------------------------------------------------ reference comparison
@pytest.mark.parametrize("vertex_set", ["cumulative", "window"])
@pytest.mark.parametrize("target", [None, "degree", "link"])
@pytest.mark.parametrize("variant", [{}, {"undirected": True}, {"self_loops": False}, {"drop_empty": False}])
def test_random_matches_reference(tmp_path, vertex_set, target, variant):
    events = random_events(np.random.default_rng(5), span=100.0)
    ref, id_map = reference(events, 7.0, vertex_set=vertex_set, **variant)
    s = load_edge_list(events_file(tmp_path, events), window=7, vertex_set=vertex_set, target=target, **variant)
    assert s.vertex_map.tolist() == [id_map[i] for i in range(len(id_map))]
    assert_matches_reference(s, ref, target)


def test_signal_validates_and_supergraph_works(tmp_path):
    events = random_events(np.random.default_rng(1))
    s = load_edge_list(events_file(tmp_path, events), window=9, vertex_set="window")
    s.validate()
    sg = s.supergraph()
    assert sg.vertex.numel() == s.num_vertex_time_nodes


# ------------------------------------------------------------------ parsing options
def test_csv_header_delimiters_columns_gzip(tmp_path):
    events = random_events(np.random.default_rng(2), n=40)
    base = load_edge_list(events_file(tmp_path, events), window=11, target=None)
    # CSV with a header, columns time,rating,dst,src; ';' delimiter variant; gzip
    csv = "time,rating,dst,src\n" + "".join(f"{c},{(a + b) % 5 - 2},{b},{a}\n" for a, b, c in events)
    p = write(tmp_path, csv, "g.csv")
    s = load_edge_list(p, window=11, target=None, columns=(3, 2, 0), skip_rows=1)
    assert s.fingerprint() == base.fingerprint() and torch.equal(s.x, base.x)
    p2 = write(tmp_path, csv.replace(",", ";"), "g2.csv")
    s2 = load_edge_list(p2, window=11, target=None, columns=(-1, -2, 0), skip_rows=1, delimiter=";")
    assert s2.fingerprint() == base.fingerprint()
    gz = tmp_path / "g.txt.gz"
    gz.write_bytes(gzip.compress(events_file(tmp_path, events).read_bytes()))
    assert load_edge_list(gz, window=11, target=None).fingerprint() == base.fingerprint()
    # tabs, CRLF line ends and a byte-order mark parse the same
    text = "\ufeff" + "".join(f"{a}\t{b}\t{c!r}\r\n" for a, b, c in events)
    p3 = tmp_path / "g3.tsv"
    p3.write_bytes(text.encode("utf-8"))
    assert load_edge_list(p3, window=11, target=None).fingerprint() == base.fingerprint()


def test_weight_column_aggregation(tmp_path):
    text = "1,2,5,100.5\n1,2,-1,101.25\n2,3,4,102\n1,2,3,200\n"
    p = write(tmp_path, text, "w.csv")
    for agg, first in (("sum", 4.0), ("mean", 2.0), ("max", 5.0), ("min", -1.0)):
        s = load_edge_list(p, window=50, target=None, weight_column=2, weight_agg=agg)
        assert s[0].edge_attr.tolist() == [first, 4.0]
        assert s[1].edge_attr.tolist() == [3.0]
    counts = load_edge_list(p, window=50, target=None)
    assert counts[0].edge_attr.tolist() == [2.0, 1.0]


def test_time_unit_and_window_strings(tmp_path):
    # timestamps in milliseconds, windows of one day
    ms = "".join(f"{i % 4} {(i + 1) % 4} {i * 6 * 3600 * 1000}\n" for i in range(12))  # every 6 h, 3 days
    p = write(tmp_path, ms)
    s = load_edge_list(p, window="1d", time_unit=1e-3, target=None)
    assert s.num_snapshots == 3 and s.edges_per_snapshot.tolist() == [4, 4, 4]
    assert s.window == 86400 * 1000
    assert parse_window("7d") == 7 * 86400 and parse_window("12h") == 43200 and parse_window("30min") == 1800
    assert parse_window("1w") == parse_window(604800) and parse_window("2.5s") == 2.5


def test_degree_transforms(tmp_path):
    events = random_events(np.random.default_rng(3))
    p = events_file(tmp_path, events)
    raw = load_edge_list(p, window=10, target=None)
    log = load_edge_list(p, window=10, target=None, degree_transform="log1p")
    assert torch.allclose(log.x, torch.log1p(raw.x))
    nrm = load_edge_list(p, window=10, target=None, degree_transform="normalize")
    for t in range(raw.num_snapshots):
        m = raw[t].x.max(dim=0).values.clamp(min=1)
        assert torch.allclose(nrm[t].x, raw[t].x / m)
    none = load_edge_list(p, window=10, target=None, features=None)
    assert "x" not in none.fields


# ------------------------------------------------------------------ link prediction negatives
def test_negative_sampling_properties_and_determinism(tmp_path):
    events = random_events(np.random.default_rng(4), n=300, V=12)
    p = events_file(tmp_path, events)
    for vs in ("cumulative", "window"):
        for ratio in (1.0, 2.5):
            a = load_edge_list(p, window=10, target="link", negative_ratio=ratio, vertex_set=vs, seed=3)
            b = load_edge_list(p, window=10, target="link", negative_ratio=ratio, vertex_set=vs, seed=3)
            c = load_edge_list(p, window=10, target="link", negative_ratio=ratio, vertex_set=vs, seed=4)
            assert torch.equal(a.fields["edge_label_index"].values, b.fields["edge_label_index"].values)
            assert not torch.equal(a.fields["edge_label_index"].values, c.fields["edge_label_index"].values)
            for t in range(a.num_snapshots):
                d = a[t]
                n = d.num_nodes
                P = int(d.edge_label.sum())
                pos = {tuple(e) for e in d.edge_label_index[:, :P].t().tolist()}
                neg = [tuple(e) for e in d.edge_label_index[:, P:].t().tolist()]
                cap = n * (n - 1) - sum(1 for u, v in pos if u != v)
                assert len(neg) == min(math.floor(ratio * P + 0.5), cap)
                assert len(set(neg)) == len(neg)  # distinct
                assert not (set(neg) & pos)  # never a positive
                assert all(u != v and 0 <= u < n and 0 <= v < n for u, v in neg)


def test_dense_snapshot_negatives_capped(tmp_path):
    # 3 vertices, all 6 directed pairs positive in snapshot 1 except (2, 0): only 1 negative exists
    text = "0 1 0\n1 2 0\n2 0 0\n" + "".join(f"{a} {b} 10\n" for a, b in [(0, 1), (1, 0), (0, 2), (1, 2), (2, 1)])
    s = load_edge_list(write(tmp_path, text), window=10, target="link", negative_ratio=3.0)
    d = s[0]
    assert d.edge_label.tolist() == [1, 1, 1, 1, 1, 0]
    assert d.edge_label_index[:, -1].tolist() == [2, 0]


@pytest.mark.parametrize("seed", [0, 1])
def test_sampler_rejection_and_enumeration_paths(seed):
    from pyg_dynscale.data.loaders.negative_sampling import sample_negative_pairs

    rng = np.random.default_rng(100)
    n = np.array([500, 6, 0, 40])  # sparse (rejection), tiny (enumerated), empty, medium
    pos = [(0, rng.integers(0, 500, 300), rng.integers(0, 500, 300)), (1, np.array([0, 1, 2]), np.array([1, 2, 0])),
           (3, rng.integers(0, 40, 50), rng.integers(0, 40, 50))]
    keys = {(t, int(u), int(v)) for t, us, vs in pos for u, v in zip(us, vs)}
    keys_arr = np.array(sorted(keys))
    k = np.array([400, 100, 0, 60])
    out = sample_negative_pairs(n, k, keys_arr[:, 0], keys_arr[:, 1], keys_arr[:, 2], np.random.default_rng(seed))
    again = sample_negative_pairs(n, k, keys_arr[:, 0], keys_arr[:, 1], keys_arr[:, 2], np.random.default_rng(seed))
    assert all(np.array_equal(a, b) for a, b in zip(out, again))
    t, u, v = out
    assert np.all(np.diff(t) >= 0)
    caps = [n[i] * (n[i] - 1) - sum(1 for (tt, a, b) in keys if tt == i and a != b) for i in range(4)]
    assert np.bincount(t, minlength=4).tolist() == [min(int(k[i]), caps[i]) for i in range(4)]
    triples = list(zip(t.tolist(), u.tolist(), v.tolist()))
    assert len(set(triples)) == len(triples) and not (set(triples) & keys)
    assert np.all(u != v) and np.all(u < n[t]) and np.all(v < n[t])


def test_nearly_complete_snapshot_negatives_are_the_missing_pairs(tmp_path):
    # 30 vertices; snapshot 1 has every ordered pair except three: the three are the negatives.
    n = 30
    missing = {(0, 1), (5, 2), (29, 28)}
    ring = "".join(f"{i} {(i + 1) % n} 0\n" for i in range(n))
    full = "".join(f"{u} {v} 10\n" for u in range(n) for v in range(n) if u != v and (u, v) not in missing)
    s = load_edge_list(write(tmp_path, ring + full), window=10, target="link", negative_ratio=1.0)
    d = s[0]
    P = int(d.edge_label.sum())
    assert P == n * (n - 1) - 3
    assert {tuple(e) for e in d.edge_label_index[:, P:].t().tolist()} == missing


# ------------------------------------------------------------------ errors
def test_errors(tmp_path):
    with pytest.raises(DatasetNotFoundError):
        load_edge_list(tmp_path / "missing.txt", window=1)
    p = write(tmp_path, "1 2 3\n4 5\n6 7 8\n")
    with pytest.raises(DatasetFormatError, match="line 2.*2 fields"):
        load_edge_list(p, window=1)
    p = write(tmp_path, "% c\n1 2 3\n4 x 5\n")
    with pytest.raises(DatasetFormatError, match=r"line 3, column 1.*'x'"):
        load_edge_list(p, window=1)
    p = write(tmp_path, "1 2 3\n4.5 2 5\n")
    with pytest.raises(DatasetFormatError, match="line 2, column 0.*integer"):
        load_edge_list(p, window=1)
    p = write(tmp_path, "1 2 3\n4 2 abc\n")
    with pytest.raises(DatasetFormatError, match="line 2, column 2.*not a number"):
        load_edge_list(p, window=1)
    p = write(tmp_path, "1 2 3\n4 2 nan\n")
    with pytest.raises(DatasetFormatError, match="not finite"):
        load_edge_list(p, window=1)
    p = write(tmp_path, "% only comments\n\n")
    with pytest.raises(DatasetFormatError, match="no data lines"):
        load_edge_list(p, window=1)
    good = write(tmp_path, "1 2 3\n2 3 40\n")
    for w in (0, -5, "0d", float("nan"), "3 parsecs", None):
        with pytest.raises(SignalValidationError, match="window"):
            load_edge_list(good, window=w)
    with pytest.raises(SignalValidationError, match="columns"):
        load_edge_list(good, window=1, columns=(0, 1, 5))
    with pytest.raises(SignalValidationError, match="columns"):
        load_edge_list(good, window=1, columns=(0, 1, 1))
    with pytest.raises(SignalValidationError, match="vertex_set"):
        load_edge_list(good, window=1, vertex_set="all")
    with pytest.raises(SignalValidationError, match="target"):
        load_edge_list(good, window=1, target="edges")
    with pytest.raises(SignalValidationError, match="negative_ratio"):
        load_edge_list(good, window=1, negative_ratio=-1)
    with pytest.raises(SignalValidationError, match="window"):
        load_edge_list(good, window=1000, target="link")  # one snapshot: no next snapshot
    with pytest.raises(SignalValidationError, match="window"):
        load(good)  # edge list without a window


def test_window_too_small_for_the_time_span(tmp_path):
    # 1e-17 s over a span of 37 s: 3.7e18 windows would overflow the int64 window
    # index (numpy only warns) and silently merge all events into one snapshot
    good = write(tmp_path, "1 2 3\n2 3 40\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for w in (1e-17, "1e-17", 1e-300):
            with pytest.raises(SignalValidationError, match=r"window.*too small for the events' time span of 37 s"):
                load_edge_list(good, window=w, target=None)
        with pytest.raises(SignalValidationError, match="too small"):  # milliseconds: 37e-3 s span
            load_edge_list(good, window=1e-18, time_unit=1e-3, target=None)
        assert load_edge_list(good, window=1e-9, target=None).num_snapshots == 2  # 3.7e10 windows: fine
    assert parse_window("86400") == parse_window("1d") == parse_window(86400) == 86400.0
    for w in ("inf", "nan", "-3", "1e400", "-1d"):
        with pytest.raises(SignalValidationError, match="window"):
            parse_window(w)


def test_load_auto_detects_edge_lists(tmp_path):
    events = random_events(np.random.default_rng(6))
    p = events_file(tmp_path, events, "noext")
    a = load(p, window=10, target="degree")
    b = load_edge_list(p, window=10, target="degree")
    assert a.fingerprint() == b.fingerprint() and torch.equal(a.y, b.y)
    a.save(str(tmp_path / "sig.pt"))
    assert load(tmp_path / "sig.pt").fingerprint() == a.fingerprint()


# ------------------------------------------------------------------ SNAP files
# The counts of the real files: these need ../shared (skipped, and capped, without it).
@pytest.mark.parametrize(
    "name, window, lines, vertices, kwargs",
    [
        ("CollegeMsg.txt", "1d", 59835, 1899, {}),
        ("email-Eu-core-temporal.txt.gz", "7d", 332334, 986, {}),
        ("soc-sign-bitcoinotc.csv.gz", "7d", 35592, 5881, {}),
        ("sx-mathoverflow.txt.gz", "7d", 506550, 24818, {"vertex_set": "window"}),
    ],
)
def test_snap_files_smoke(name, window, lines, vertices, kwargs):
    s = load_edge_list(real_dataset_file(f"snap/{name}"), window=window, target=None, **kwargs)
    assert s.num_vertices == vertices
    assert int(s.edge_weight.sum()) == lines  # count weights: every event is in exactly one edge
    assert s.x.shape == (s.num_vertex_time_nodes, 2)
    assert int(s.x[:, 0].sum()) == int(s.x[:, 1].sum()) == s.num_edges


def python_parse(path: Path) -> list[list[str]]:
    """Fields per line of a SNAP file, plain Python (whitespace or commas, maybe gzipped)."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [line.replace(",", " ").split() for line in text.splitlines() if line.strip()]


# The stand-ins (tests/fixtures/datasets) in each SNAP file's format, in every environment:
# counted against a plain-Python parse of the same bytes.
@pytest.mark.parametrize("name, window, kwargs", [
    ("CollegeMsg.txt", "1d", {}),                                      # whitespace
    ("email-Eu-core-temporal.txt.gz", "7d", {}),                       # gzip, times from 0
    ("soc-sign-bitcoinotc.csv.gz", "7d", {"columns": (0, 1, 3)}),      # gzip CSV, fractional times
    ("sx-mathoverflow.txt.gz", "7d", {"vertex_set": "window"}),
])
def test_snap_format_stand_ins(name, window, kwargs):
    path = stand_in_file(f"snap/{name}")
    rows = python_parse(path)
    s = load_edge_list(path, window=window, target=None, **kwargs)
    assert len(rows) >= 100 and s.num_snapshots >= 4  # enough for the doc blocks and benchmarks run on it
    assert s.num_vertices == len({r[0] for r in rows} | {r[1] for r in rows})
    assert int(s.edge_weight.sum()) == len(rows)
    assert int(s.x[:, 0].sum()) == int(s.x[:, 1].sum()) == s.num_edges


def test_collegemsg_against_python_parse():
    path = dataset_file("snap/CollegeMsg.txt")  # the real file, or its stand-in in the same format
    rows = [tuple(int(x) for x in line.split()) for line in path.read_text().splitlines() if line.strip()]
    t0 = min(r[2] for r in rows)
    distinct = {((r[2] - t0) // 86400, r[0], r[1]) for r in rows}
    s = load_edge_list(path, window="1d", target="link", vertex_set="window", negative_ratio=1.0)
    full = load_edge_list(path, window="1d", target=None, vertex_set="window")
    assert full.num_edges == len(distinct)
    assert full.num_snapshots == len({d[0] for d in distinct})
    assert s.num_snapshots == full.num_snapshots - 1
    # labels per snapshot: the next day's edges between today's vertices, then as many
    # non-edges (capped at the free pairs u != v: only tiny days, e.g. the stand-in's, hit it)
    days = sorted({d[0] for d in distinct})
    edges = {day: {(u, v) for d, u, v in distinct if d == day} for day in days}
    capped = 0
    for t, (day, nxt) in enumerate(zip(days, days[1:])):
        verts = {x for e in edges[day] for x in e}
        pos = {(u, v) for u, v in edges[nxt] if u in verts and v in verts}
        free = len(verts) * (len(verts) - 1) - sum(u != v for u, v in pos)
        lab = s[t].edge_label
        assert int((lab == 1).sum()) == len(pos) and int((lab == 0).sum()) == min(len(pos), free), t
        capped += free < len(pos)
    assert capped < s.num_snapshots / 4


def test_bitcoin_fractional_times_and_ratings():
    path = dataset_file("snap/soc-sign-bitcoinotc.csv.gz")
    rows = python_parse(path)
    s = load_edge_list(path, window="30d", target="degree", weight_column=2, weight_agg="mean")
    w = s.edge_weight
    assert float(w.min()) >= -10 and float(w.max()) <= 10
    assert float(w.min()) < 0 < float(w.max())  # signed ratings kept, not counted
    # the first window starts at the earliest event, fractional seconds kept in float64
    assert s.snapshot_time.dtype == torch.float64 and s.snapshot_time[0] == min(float(r[3]) for r in rows)
    assert s.snapshot_time[0] != int(s.snapshot_time[0])
