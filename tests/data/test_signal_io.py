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
