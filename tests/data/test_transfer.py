"""Graph-difference transfer (SC'21 §3.2): exact reconstruction and byte accounting."""
from __future__ import annotations

import os

import pytest
import torch

from pyg_dynscale.data import DynamicGraphSignal, SnapshotField
from pyg_dynscale.data.transfer import (
    GraphDiff,
    canonicalize,
    diff_decode,
    diff_encode,
    signal_nbytes,
    transfer_to_device,
)
from pyg_dynscale.errors import SignalValidationError


def random_signal(seed: int, T: int = 7, V: int = 12, dup: bool = True, empty: bool = True, extras: bool = True):
    """Vertex sets that change (in random row order), empty snapshots, duplicate
    edges, kept edges with changing weights, fields of every level."""
    g = torch.Generator().manual_seed(seed)
    ids, eis, ws, xs, ys, ea, gl, li = [], [], [], [], [], [], [], []
    prev = None
    for t in range(T):
        if empty and t == 2:
            n = 0
        else:
            n = int(torch.randint(1, V + 1, (1,), generator=g))
        vid = torch.randperm(V, generator=g)[:n]
        ids.append(vid)
        e = int(torch.randint(0, 25, (1,), generator=g)) if n else 0
        if empty and t == 4:
            e = 0
        ei = torch.randint(0, max(n, 1), (2, e), generator=g)
        if prev is not None and n and e:  # keep some of the previous snapshot's edges (overlap)
            pv, pei = prev
            src, dst = pv[pei[0]], pv[pei[1]]
            pos = {int(v): i for i, v in enumerate(vid)}
            keep = [(pos[int(a)], pos[int(b)]) for a, b in zip(src, dst) if int(a) in pos and int(b) in pos]
            if keep:
                ei = torch.cat([torch.tensor(keep).t(), ei], 1)
        if dup and ei.shape[1] > 1:
            ei = torch.cat([ei, ei[:, :2]], 1)  # duplicate edges
        ei = ei[:, torch.randperm(ei.shape[1], generator=g)]
        prev = (vid, ei)
        eis.append(ei)
        ws.append(torch.rand(ei.shape[1], generator=g))  # weights change on kept edges too
        xs.append(torch.randn(n, 3, generator=g))
        ys.append(torch.randint(0, 3, (n,), generator=g))
        ea.append(torch.randn(ei.shape[1], 2, generator=g))
        gl.append(torch.randn(4, generator=g))
        k = int(torch.randint(0, 4, (1,), generator=g)) if n else 0
        li.append(torch.randint(0, max(n, 1), (2, k), generator=g))
    kw = dict(edge_feat=ea, graph_feat=gl, edge_label_index=li) if extras else {}
    levels = {"edge_feat": "edge", "graph_feat": "graph"} if extras else {}
    return DynamicGraphSignal(eis, ws, xs, ys, node_ids=ids, num_vertices=V, field_levels=levels, **kw)


def edge_multiset(sig: DynamicGraphSignal):
    """{(t, src id, dst id, weight, attrs)} as a sorted list (order-free comparison)."""
    out = []
    for t in range(sig.num_snapshots):
        d = sig[t]
        for e in range(d.edge_index.shape[1]):
            a, b = d.edge_index[:, e].tolist()
            row = (t, int(d.n_id[a]), int(d.n_id[b]), float(d.edge_weight[e]))
            if "edge_feat" in sig.fields:
                row += tuple(d.edge_feat[e].tolist())
            out.append(row)
    return sorted(out)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("block_size", [None, 1, 3])
def test_exact_roundtrip_preserving_order(seed, block_size):
    sig = random_signal(seed)
    diff = diff_encode(sig, block_size=block_size)
    out = diff_decode(diff, "cpu")
    out.validate()
    assert out.equals(sig)


@pytest.mark.parametrize("seed", range(4))
def test_canonical_roundtrip(seed):
    sig = random_signal(seed)
    can = canonicalize(sig)
    can.validate()
    # same graph: vertex sets, edges with their weights/attributes, node fields follow their vertices
    assert edge_multiset(can) == edge_multiset(sig)
    for t in range(sig.num_snapshots):
        a, b = sig[t], can[t]
        assert torch.equal(torch.sort(a.n_id).values, b.n_id)  # sorted vertex ids
        order = torch.argsort(a.n_id)
        assert torch.equal(a.x[order], b.x) and torch.equal(a.y[order], b.y)
        assert torch.equal(a.graph_feat, b.graph_feat)
        V = sig.num_vertices
        keys = b.n_id[b.edge_index[0]] * V + b.n_id[b.edge_index[1]]
        assert bool((keys[1:] >= keys[:-1]).all())
        # ragged *_index extras hold local rows: they are remapped to the sorted rows
        assert torch.equal(a.n_id[a.edge_label_index], b.n_id[b.edge_label_index])
    d = diff_encode(sig, preserve_order=False)
    assert diff_decode(d).equals(can)
    assert d.nbytes <= diff_encode(sig).nbytes  # no permutations to send
    # an already canonical signal round-trips exactly without permutations
    d2 = diff_encode(can)
    assert d2.node_perm.numel() == 0 and d2.edge_perm.numel() == 0
    assert diff_decode(d2).equals(can)


def test_ragged_index_fields_are_values_in_original_rows():
    # ragged *_index extras index local rows; with preserve_order the rows are
    # the original ones, so the extra is sent unchanged and stays valid.
    sig = random_signal(11)
    out = diff_decode(diff_encode(sig))
    assert torch.equal(out.fields["edge_label_index"].values, sig.fields["edge_label_index"].values)


def static_structure_signal(T=5, V=30, E=80, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, V, (2, E), generator=g)
    return DynamicGraphSignal([ei] * T, [torch.rand(E, generator=g) for _ in range(T)],
                              [torch.randn(V, 4, generator=g) for _ in range(T)])


def test_static_structure_sends_structure_once():
    sig = static_structure_signal()
    d = diff_encode(sig)
    assert d.edge_added.numel() == 0 and d.edge_removed.numel() == 0
    assert d.node_added.numel() == 0 and d.node_removed.numel() == 0
    assert int(d.edge_full_counts.sum()) == 80 and int(d.node_full_counts.sum()) == 30
    assert diff_decode(d).equals(sig)
    naive = signal_nbytes(sig)
    assert naive == sum(t.numel() * t.element_size() for t in (sig.node_id, sig.node_ptr, sig.edge_index, sig.edge_ptr,
                                                                sig.edge_weight, sig.x))
    br = d.nbytes_breakdown()
    assert br["values"] == sig.edge_weight.numel() * 4 + sig.x.numel() * 4  # values sent as is
    assert d.nbytes == br["values"] + br["structure"]
    # structure: one keyframe (80 int64 keys + 30 int16 ids) + counts/perms; naive structure: 5 x (80*16 + 30*8)
    naive_structure = naive - br["values"]
    assert br["structure"] < naive_structure / 3
    # with a keyframe every snapshot nothing is saved on structure
    assert diff_encode(sig, block_size=1).nbytes_breakdown()["structure"] > br["structure"]


def test_one_edge_changes_per_snapshot():
    T, V = 6, 10
    base = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    eis = []
    for t in range(T):
        eis.append(torch.cat([base, torch.tensor([[5], [(6 + t) % V]])], 1))
    sig = DynamicGraphSignal(eis, None, [torch.randn(V, 2) for _ in range(T)])
    d = diff_encode(sig)
    assert d.edge_added_counts.tolist() == [0] + [1] * (T - 1)
    assert d.edge_removed_counts.tolist() == [0] + [1] * (T - 1)
    assert diff_decode(d).equals(sig)


def test_transfer_to_device_stats_and_methods():
    sig = random_signal(3)
    out, st = transfer_to_device(sig, "cpu")
    assert out.equals(sig)
    assert st["method"] == "diff" and st["bytes_moved"] == diff_encode(sig).nbytes
    assert st["bytes_naive"] == signal_nbytes(sig)
    assert st["ratio"] == pytest.approx(st["bytes_naive"] / st["bytes_moved"])
    assert st["structure_bytes"] + st["value_bytes"] == st["bytes_moved"]
    out2, st2 = transfer_to_device(sig, "cpu", method="naive")
    assert out2.equals(sig) and st2["bytes_moved"] == st2["bytes_naive"] and st2["ratio"] == 1.0
    win = sig[2:6]
    out3, _ = transfer_to_device(win, "cpu", block_size=2)
    assert out3.equals(win)


def test_transfer_errors():
    sig = random_signal(4)
    with pytest.raises(SignalValidationError, match="method"):
        transfer_to_device(sig, "cpu", method="zip")
    with pytest.raises(SignalValidationError, match="block_size"):
        diff_encode(sig, block_size=0)
    with pytest.raises(SignalValidationError, match="signal"):
        diff_encode([1, 2])  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(SignalValidationError, match="CUDA"):
            transfer_to_device(sig, "cuda")


def test_single_snapshot_and_all_empty():
    one = random_signal(5, T=1)
    assert diff_decode(diff_encode(one)).equals(one)
    empty = DynamicGraphSignal([torch.zeros(2, 0, dtype=torch.long)] * 3, None,
                               node_ids=[torch.zeros(0, dtype=torch.long)] * 3, num_vertices=4)
    assert diff_decode(diff_encode(empty)).equals(empty)


def test_real_dataset_roundtrip_and_saving():
    from pyg_dynscale.data.loaders import load_england_covid

    sig = load_england_covid()
    d = diff_encode(sig)
    assert diff_decode(d).equals(sig)
    assert d.nbytes < signal_nbytes(sig)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (pinned memory + non_blocking copies)")
def test_cuda_transfer_pinned():
    sig = random_signal(6)
    out, st = transfer_to_device(sig, "cuda")
    assert out.device.type == "cuda" and out.equals(sig)
    out2, _ = transfer_to_device(sig, "cuda", method="naive")
    assert out2.equals(sig)


def test_benchmark_quick_runs():
    import subprocess
    import sys
    from pathlib import Path

    from tests.helpers.datasets import datasets_dir

    root = Path(__file__).resolve().parents[2]
    # --quick reads pygt/england_covid.json and snap/CollegeMsg.txt: ../shared's, else the stand-ins
    env = dict(os.environ, PYG_DYNSCALE_DATASETS=str(datasets_dir("pygt/england_covid.json", "snap/CollegeMsg.txt")))
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_transfer.py"), "--quick"],
                       capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert r.returncode == 0, r.stderr
    assert "england_covid" in r.stdout and "CollegeMsg" in r.stdout
