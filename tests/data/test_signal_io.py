"""Versioned save/load without arbitrary unpickling; fingerprints."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal, SignalFormatError
from tests.helpers.signals import make_dynamic_signal


def test_round_trip_keeps_everything(tmp_path, dyn_signal):
    s = DynamicGraphSignal(
        [np.array([[0, 1], [1, 0]]), np.array([[0], [1]])], None, [np.ones((2, 2)), np.zeros((2, 2))], None,
        edge_label_index=[np.array([[0], [1]]), np.zeros((2, 0), dtype=np.int64)], mask=[np.array([True, False])] * 2,
    )
    for sig in (dyn_signal, s):
        path = tmp_path / "s.pt"
        sig.save(str(path))
        back = DynamicGraphSignal.load(str(path))
        assert back.equals(sig)
        assert back.fingerprint() == sig.fingerprint()


def test_rejects_corrupt_files(tmp_path, dyn_signal):
    path = tmp_path / "s.pt"
    dyn_signal.save(str(path))
    raw = bytearray(path.read_bytes())
    path.write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(SignalFormatError, match="not a readable"):
        DynamicGraphSignal.load(str(path))


def test_rejects_tampered_tensors(tmp_path, dyn_signal):
    path = tmp_path / "s.pt"
    dyn_signal.save(str(path))
    payload = torch.load(str(path), weights_only=True)
    payload["tensors"]["edge_index"] = payload["tensors"]["edge_index"].clone()
    payload["tensors"]["edge_index"][0, 0] += 1
    torch.save(payload, str(path))
    with pytest.raises(SignalFormatError, match="checksum"):
        DynamicGraphSignal.load(str(path))


def test_rejects_other_versions_and_foreign_files(tmp_path, dyn_signal):
    path = tmp_path / "s.pt"
    dyn_signal.save(str(path))
    payload = torch.load(str(path), weights_only=True)
    payload["version"] = 99
    torch.save(payload, str(path))
    with pytest.raises(SignalFormatError, match="version 99"):
        DynamicGraphSignal.load(str(path))
    torch.save({"weights": torch.ones(2)}, str(path))
    with pytest.raises(SignalFormatError, match="format tag"):
        DynamicGraphSignal.load(str(path))


class Evil:
    def __reduce__(self):
        return (print, ("arbitrary code ran",))


def test_never_unpickles_arbitrary_objects(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as fh:
        pickle.dump({"format": "pyg_dynscale.DynamicGraphSignal", "x": Evil()}, fh)
    with pytest.raises(SignalFormatError):
        DynamicGraphSignal.load(str(path))
    assert "arbitrary code ran" not in capsys.readouterr().out


def test_fingerprint_tracks_structure_not_features():
    a = make_dynamic_signal(seed=3)
    b = make_dynamic_signal(seed=3)
    b.fields["x"].values.mul_(2)
    assert a.fingerprint() == b.fingerprint()
    c = make_dynamic_signal(seed=4)
    assert a.fingerprint() != c.fingerprint()


def test_fingerprint_cache_follows_in_place_and_replaced_structure():
    a = make_dynamic_signal(seed=3)
    first = a.fingerprint()
    assert a.fingerprint() == first  # cached
    a.edge_index[0, 0] = (a.edge_index[0, 0] + 1) % a.num_vertices  # in-place edit bumps the version
    edited = a.fingerprint()
    assert edited != first
    a.edge_index = a.edge_index.clone()  # same content, new tensor: same fingerprint
    assert a.fingerprint() == edited


# ---- format version 2: a static graph saved as its one edge list; version-1 files still load
def _static_and_per_snapshot():
    rng = np.random.default_rng(5)
    ei, w = np.array([[0, 1, 2, 2], [1, 2, 0, 2]]), rng.uniform(0.5, 2, 4)
    X, Y = [rng.standard_normal((3, 2)) for _ in range(7)], [rng.standard_normal(3) for _ in range(7)]
    return (DynamicGraphSignal(ei, w, X, Y, dtype=torch.float64),
            DynamicGraphSignal([ei] * 7, [w] * 7, X, Y, dtype=torch.float64))


def test_a_static_graph_is_saved_and_loaded_as_its_one_edge_list(tmp_path):
    from pyg_dynscale.data.io import FORMAT_VERSION

    s, d = _static_and_per_snapshot()
    s.save(str(tmp_path / "s.pt"))
    d.save(str(tmp_path / "d.pt"))
    assert not s.edges_expanded  # saving never built the T copies
    payload = torch.load(str(tmp_path / "s.pt"), weights_only=True)
    assert payload["version"] == FORMAT_VERSION == 2
    tensors = payload["tensors"]
    assert tensors["static_edge_index"].shape == (2, 4) and tensors["static_edge_weight"].shape == (4,)
    assert not {"edge_index", "edge_ptr", "edge_weight"} & set(tensors)
    back = DynamicGraphSignal.load(str(tmp_path / "s.pt"))
    assert back.is_static and not back.edges_expanded
    assert back.equals(s) and back.equals(d) and back.fingerprint() == d.fingerprint()
    for a, b in zip(back, d):
        assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.edge_weight, b.edge_weight)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    per = DynamicGraphSignal.load(str(tmp_path / "d.pt"))  # version 2, edges per snapshot: as before
    assert not per.is_static and per.equals(d)


def test_a_version_1_file_still_loads(tmp_path):
    """Version 1 (written before static graphs were stored once): the edges per snapshot, no other entry."""
    from pyg_dynscale.data.io import FORMAT_TAG, tensor_checksum

    _, d = _static_and_per_snapshot()
    tensors = {"node_id": d.node_id, "node_ptr": d.node_ptr, "edge_index": d.edge_index, "edge_ptr": d.edge_ptr,
               "edge_weight": d.edge_weight}
    meta = {}
    for name, f in d.fields.items():
        tensors[f"field.{name}.values"] = f.values
        meta[name] = {"level": f.level, "cat_dim": f.cat_dim}
    torch.save({"format": FORMAT_TAG, "version": 1, "num_vertices": d.num_vertices, "fields": meta,
                "tensors": tensors, "checksum": tensor_checksum(tensors)}, str(tmp_path / "v1.pt"))
    back = DynamicGraphSignal.load(str(tmp_path / "v1.pt"))
    assert back.equals(d) and back.fingerprint() == d.fingerprint()


def test_a_static_file_relabelled_as_edges_per_snapshot_is_refused(tmp_path):
    s, _ = _static_and_per_snapshot()
    s.save(str(tmp_path / "s.pt"))
    payload = torch.load(str(tmp_path / "s.pt"), weights_only=True)
    t = payload["tensors"]
    t["edge_index"], t["edge_weight"] = t.pop("static_edge_index"), t.pop("static_edge_weight")
    t["edge_ptr"] = torch.arange(8) * 4
    torch.save(payload, str(tmp_path / "s.pt"))
    with pytest.raises(SignalFormatError, match="checksum"):
        DynamicGraphSignal.load(str(tmp_path / "s.pt"))
