"""PyGT JSON loaders: snapshot-by-snapshot equality with PyGT 0.56.2's own
loader classes on the same file (their download is redirected to the file)."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from pyg_dynscale._optional import import_pygt
from pyg_dynscale.data.loaders import (
    DatasetFormatError,
    DatasetNotFoundError,
    detect_dataset,
    embedded_england_covid_path,
    load,
    load_england_covid,
    load_pygt_json,
)
from pyg_dynscale.errors import MissingDependencyError, SignalValidationError
from tests.helpers.datasets import dataset_file

try:
    import_pygt("the PyGT comparison tests")
    from torch_geometric_temporal import dataset as pygt_dataset

    HAVE_PYGT = True
except MissingDependencyError:  # pragma: no cover - CI installs PyGT
    HAVE_PYGT = False

needs_pygt = pytest.mark.skipif(not HAVE_PYGT, reason="torch_geometric_temporal (PyGT) is not importable: pip install 'pyg-dynscale[pygt]'")

ENGLAND_SHA256 = "497056cc4585b58951fd5cd17554fe0c535f68ea0c907a5b5727ae30e3913450"


def shared(name: str) -> Path:
    """The shared PyGT file, or where it is absent its stand-in in the same format (an excerpt,
    tests/fixtures/datasets; England COVID: the embedded copy): PyGT's loader reads the same file."""
    return dataset_file(f"pygt/{name}")


def pygt_loader(monkeypatch: pytest.MonkeyPatch, name: str, path: Path):
    """PyGT's loader class whose download reads ``path`` instead."""
    cls = getattr(pygt_dataset, name)

    def read_local(self) -> None:
        with open(path) as fh:
            self._dataset = json.load(fh)

    monkeypatch.setattr(cls, "_read_web_data", read_local)
    return cls


def assert_same_snapshots(ours, ref, graph_level=()) -> None:
    """Every PyGT snapshot equals ours exactly: values, dtype, shape."""
    n = 0
    for t, snap in enumerate(ref):
        mine = ours[t]
        for key in ("x", "edge_index", "edge_attr", "y"):
            a, b = getattr(mine, key), getattr(snap, key)
            assert b is not None
            assert a.dtype == b.dtype, (t, key, a.dtype, b.dtype)
            assert a.shape == b.shape, (t, key, a.shape, b.shape)
            assert torch.equal(a, b), (t, key)
        n += 1
    assert n == ours.num_snapshots == ref.snapshot_count


# ------------------------------------------------------------------ synthetic files
def write_json(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def synth_wikimaths(rng: np.random.Generator, T: int = 20, V: int = 9) -> dict:
    edges = [[int(a), int(b)] for a, b in rng.integers(0, V, size=(25, 2))]
    data = {"edges": edges, "weights": rng.integers(1, 5, size=25).tolist(), "time_periods": T}
    for t in range(T):
        data[str(t)] = {"y": rng.integers(0, 1000, size=V).tolist(), "index": t}
    return data


def synth_montevideo(rng: np.random.Generator, T: int = 15, V: int = 7, str_ids: bool = False) -> dict:
    ids = rng.permutation(np.arange(100, 100 + 3 * V, 3))[:V]
    ids = [f"stop{i}" for i in ids] if str_ids else [int(i) for i in ids]
    nodes = [
        {"bus_stop": i, "X": {"y": rng.integers(0, 50, T).tolist(), "z": rng.random(T).tolist()},
         "y": rng.integers(0, 50, T).tolist(), "z": rng.random(T).tolist()}
        for i in ids
    ]
    links = [{"source": ids[a], "target": ids[b], "weight": float(rng.random() * 3)}
             for a, b in rng.integers(0, V, size=(12, 2))]
    return {"nodes": nodes, "links": links}


def synth_mtm(rng: np.random.Generator, L: int = 30) -> dict:
    data: dict = {"edges": [[j, j + 1] for j in range(20)] + [[0, 5], [0, 9]]}
    for j in range(21):
        data[str(j)] = {str(f): "({}, {}, {})".format(*map(repr, rng.standard_normal(3).tolist())) for f in range(L)}
    data["LABEL"] = {str(f): int(rng.integers(0, 6)) for f in range(L)}
    return data


def synth_tennis(rng: np.random.Generator, T: int = 6, V: int = 12) -> dict:
    data: dict = {"time_periods": T}
    for t in range(T):
        E = int(rng.integers(3, 20))
        X = np.stack([rng.integers(0, 200, V).astype(float), np.floor(rng.random(V) * 100) / 100], axis=1)
        data[str(t)] = {"index": t, "edges": rng.integers(0, V, size=(E, 2)).tolist(),
                        "weights": rng.integers(1, 4, E).tolist(), "X": X.tolist(),
                        "y": rng.integers(0, 30, V).tolist()}
    return data


# ------------------------------------------------------------------ real files (or stand-ins) vs PyGT
@needs_pygt
@pytest.mark.parametrize("lags", [1, 4, 9])
def test_chickenpox_matches_pygt(monkeypatch, lags):
    path = shared("chickenpox.json")
    ref = pygt_loader(monkeypatch, "ChickenpoxDatasetLoader", path)().get_dataset(lags=lags)
    assert_same_snapshots(load_pygt_json(path, feature_lags=lags), ref)


@needs_pygt
@pytest.mark.parametrize("lags", [2, 4])
def test_pedalme_matches_pygt(monkeypatch, lags):
    path = shared("pedalme_london.json")
    ref = pygt_loader(monkeypatch, "PedalMeDatasetLoader", path)().get_dataset(lags=lags)
    assert_same_snapshots(load_pygt_json(path, "pedalme", feature_lags=lags), ref)


@needs_pygt
@pytest.mark.parametrize("lags", [8, 3])
def test_england_covid_file_and_embedded_match_pygt(monkeypatch, lags):
    path = shared("england_covid.json")
    ref = pygt_loader(monkeypatch, "EnglandCovidDatasetLoader", path)().get_dataset(lags=lags)
    assert_same_snapshots(load_pygt_json(path, feature_lags=lags), ref)
    ref = pygt_loader(monkeypatch, "EnglandCovidDatasetLoader", path)().get_dataset(lags=lags)
    assert_same_snapshots(load_england_covid(feature_lags=lags), ref)


@needs_pygt
def test_embedded_england_covid_matches_pygt_without_shared_data(monkeypatch, tmp_path):
    # The embedded copy is what PyGT downloads (checked by hash) -> compare on it.
    raw = gzip.decompress(Path(embedded_england_covid_path()).read_bytes())
    assert hashlib.sha256(raw).hexdigest() == ENGLAND_SHA256
    plain = tmp_path / "england_covid.json"
    plain.write_bytes(raw)
    ref = pygt_loader(monkeypatch, "EnglandCovidDatasetLoader", plain)().get_dataset()
    ours = load_england_covid()
    assert ours.num_snapshots == 53 and ours.num_vertices == 129
    assert_same_snapshots(ours, ref)
    # the name resolves to the embedded copy when no cache_dir is given
    assert ours.fingerprint() == load_pygt_json("england_covid").fingerprint() == load("england_covid").fingerprint()


@needs_pygt
@pytest.mark.parametrize(
    "options", [{}, {"N": 300, "feature_mode": None, "target_offset": 3}, {"N": 50, "feature_mode": "diagonal", "target_offset": 0}]
)
def test_twitter_tennis_matches_pygt(monkeypatch, options):
    path = shared("twitter_tennis_rg17.json")
    ref = pygt_loader(monkeypatch, "TwitterTennisDatasetLoader", path)(**options).get_dataset()
    assert_same_snapshots(load_pygt_json(path, **options), ref)


# ------------------------------------------------------------------ synthetic files vs PyGT
@needs_pygt
@pytest.mark.parametrize("lags", [1, 8])
def test_wikimaths_synthetic_matches_pygt(monkeypatch, tmp_path, lags):
    path = write_json(tmp_path / "wikivital_mathematics.json", synth_wikimaths(np.random.default_rng(lags)))
    ref = pygt_loader(monkeypatch, "WikiMathsDatasetLoader", path)().get_dataset(lags=lags)
    assert_same_snapshots(load_pygt_json(path, feature_lags=lags), ref)


@needs_pygt
@pytest.mark.parametrize("str_ids", [False, True])
@pytest.mark.parametrize("options", [{}, {"lags": 2, "target_var": "z"}, {"lags": 3, "feature_vars": ["z"]}])
def test_montevideo_synthetic_matches_pygt(monkeypatch, tmp_path, options, str_ids):
    path = write_json(tmp_path / "montevideo_bus.json", synth_montevideo(np.random.default_rng(7), str_ids=str_ids))
    ref = pygt_loader(monkeypatch, "MontevideoBusDatasetLoader", path)().get_dataset(**options)
    ours = load_pygt_json(path, **options)
    assert ours.fields["x"].level == "node"
    assert_same_snapshots(ours, ref)


@needs_pygt
def test_montevideo_several_feature_vars_keeps_pygt_layout(monkeypatch, tmp_path):
    path = write_json(tmp_path / "montevideo_bus.json", synth_montevideo(np.random.default_rng(3)))
    ref = pygt_loader(monkeypatch, "MontevideoBusDatasetLoader", path)().get_dataset(lags=2, feature_vars=["y", "z"])
    ours = load_pygt_json(path, feature_lags=2, feature_vars=["y", "z"])
    assert ours.fields["x"].level == "graph" and ours[0].x.shape == (14, 2)
    assert_same_snapshots(ours, ref)


@needs_pygt
@pytest.mark.parametrize("frames", [1, 4, 16])
def test_mtm_synthetic_matches_pygt(monkeypatch, tmp_path, frames):
    path = write_json(tmp_path / "mtm_1.json", synth_mtm(np.random.default_rng(frames)))
    ref = pygt_loader(monkeypatch, "MTMDatasetLoader", path)().get_dataset(frames=frames)
    ours = load_pygt_json(path, frames=frames)
    assert ours.fields["x"].level == "graph" and ours.fields["y"].level == "graph"
    assert ours[0].x.shape == (3, 21, frames) and ours[0].num_nodes == 21
    assert_same_snapshots(ours, ref)


@needs_pygt
@pytest.mark.parametrize("N", [None, 7])
@pytest.mark.parametrize("feature_mode", ["encoded", None, "diagonal"])
@pytest.mark.parametrize("target_offset", [0, 2, 10])
def test_twitter_tennis_synthetic_matches_pygt(monkeypatch, tmp_path, N, feature_mode, target_offset):
    path = write_json(tmp_path / "twitter_tennis_rg17.json", synth_tennis(np.random.default_rng(11)))
    opts = {"N": N, "feature_mode": feature_mode, "target_offset": target_offset}
    ref = pygt_loader(monkeypatch, "TwitterTennisDatasetLoader", path)(**opts).get_dataset()
    assert_same_snapshots(load_pygt_json(path, **opts), ref)


# ------------------------------------------------------------------ detection, lookup, gzip
def test_detects_every_format(tmp_path):
    rng = np.random.default_rng(0)
    cases = {
        "wikimaths": synth_wikimaths(rng), "montevideo_bus": synth_montevideo(rng),
        "mtm": synth_mtm(rng), "twitter_tennis": synth_tennis(rng),
        "chickenpox": {"edges": [[0, 1]], "node_ids": {}, "FX": [[1.0, 2.0]] * 6},
        "pedalme": {"edges": [[0, 1]], "weights": [1.0], "X": [[1.0, 2.0]] * 6},
        "england_covid": {"edge_mapping": {}, "time_periods": 1, "y": []},
    }
    for name, data in cases.items():
        assert detect_dataset(data) == name
    assert detect_dataset({"foo": 1}) is None


def test_gzip_and_cache_dir_lookup(tmp_path):
    rng = np.random.default_rng(2)
    data = synth_wikimaths(rng)
    plain = write_json(tmp_path / "plain.json", data)
    cache = tmp_path / "cache"
    cache.mkdir()
    with gzip.open(cache / "wikivital_mathematics.json.gz", "wb") as fh:
        fh.write(json.dumps(data).encode())
    a = load_pygt_json(plain, feature_lags=3)
    b = load_pygt_json("wikimaths", cache_dir=cache, feature_lags=3)
    c = load_pygt_json(cache, "WikiMath", feature_lags=3)  # a folder + a name (alias, any case)
    d = load(cache / "wikivital_mathematics.json.gz", lags=3)
    assert a.fingerprint() == b.fingerprint() == c.fingerprint() == d.fingerprint()
    assert torch.equal(a.x, b.x) and torch.equal(a.y, d.y)


def test_lag_windows_by_hand(tmp_path):
    # Chickenpox layout: x_i = FX[i:i+lags].T, y_i = FX[i+lags]; no standardization.
    fx = np.arange(12, dtype=float).reshape(6, 2)
    path = write_json(tmp_path / "c.json", {"edges": [[0, 1], [1, 0]], "node_ids": {"a": 0, "b": 1}, "FX": fx.tolist()})
    s = load_pygt_json(path, feature_lags=2)
    assert s.num_snapshots == 4
    assert torch.equal(s[1].x, torch.tensor([[2.0, 4.0], [3.0, 5.0]]))
    assert torch.equal(s[1].y, torch.tensor([6.0, 7.0]))
    assert torch.equal(s[3].edge_attr, torch.ones(2))


# ------------------------------------------------------------------ errors
def test_missing_file_and_names(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="never downloads"):
        load_pygt_json(tmp_path / "nope.json")
    with pytest.raises(DatasetNotFoundError, match="chickenpox.json"):
        load_pygt_json("chickenpox")  # not embedded, no cache_dir
    with pytest.raises(DatasetNotFoundError, match="pedalme_london.json"):
        load_pygt_json("pedalme", cache_dir=tmp_path)
    with pytest.raises(SignalValidationError, match="dataset"):
        load_pygt_json("metr_la_typo")
    with pytest.raises(SignalValidationError, match="dataset"):
        load_pygt_json(embedded_england_covid_path(), "not-a-dataset")


def test_malformed_json_and_missing_keys(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"edges": [[0, 1]], "FX": [[1, 2]')
    with pytest.raises(DatasetFormatError, match="malformed"):
        load_pygt_json(bad)
    nofx = write_json(tmp_path / "nofx.json", {"edges": [[0, 1]], "node_ids": {}})
    with pytest.raises(DatasetFormatError, match="'FX'"):
        load_pygt_json(nofx, "chickenpox")
    data = synth_wikimaths(np.random.default_rng(0))
    del data["5"]["y"]
    with pytest.raises(DatasetFormatError, match=r"\['5'\].*'y'"):
        load_pygt_json(write_json(tmp_path / "w.json", data), "wikimaths")
    data = {"edge_mapping": {"edge_index": {}}, "time_periods": 10, "y": [[1, 2]] * 10}
    with pytest.raises(DatasetFormatError, match="'edge_weight'"):
        load_pygt_json(write_json(tmp_path / "e.json", data))
    with pytest.raises(DatasetFormatError, match="match no PyGT dataset"):
        load_pygt_json(write_json(tmp_path / "x.json", {"foo": 1}))
    data = synth_montevideo(np.random.default_rng(0))
    data["links"][3]["source"] = 99999
    with pytest.raises(DatasetFormatError, match="not in 'nodes'"):
        load_pygt_json(write_json(tmp_path / "m.json", data))


def test_bad_options(tmp_path):
    path = embedded_england_covid_path()
    with pytest.raises(SignalValidationError, match="frames"):
        load_pygt_json(path, frames=3)  # an MTM option on England COVID
    with pytest.raises(SignalValidationError, match="lags"):
        load_pygt_json(path, feature_lags=61)
    with pytest.raises(SignalValidationError, match="lags"):
        load_pygt_json(path, feature_lags=0)
    tennis = write_json(tmp_path / "t.json", synth_tennis(np.random.default_rng(0)))
    with pytest.raises(SignalValidationError, match="feature_mode"):
        load_pygt_json(tennis, feature_mode="onehot")
    with pytest.raises(SignalValidationError, match="target_offset"):
        load_pygt_json(tennis, target_offset=-1)


def test_constant_series_is_named_where_it_is_standardized_unless_allowed(tmp_path):
    # PyGT's WikiMaths standardization divides by std without epsilon: a constant series is NaN in every
    # snapshot, refused where it is made, naming the series (not "NaN values in the features" of the file)
    data = synth_wikimaths(np.random.default_rng(0))
    for t in range(data["time_periods"]):
        data[str(t)]["y"][2] = 5
    path = write_json(tmp_path / "w.json", data)
    with pytest.raises(SignalValidationError, match=r"field 'y': the series of node 2 is constant \(5 at all "
                       rf"{data['time_periods']} time steps\).*standard deviation of 0.*Fix: drop that series") as err:
        load_pygt_json(path)
    assert err.value.field == "y" and "features" not in str(err.value)
    s = load_pygt_json(path, allow_nonfinite=True)
    assert torch.isnan(s[0].x[2]).all()


def test_embedded_license_is_shipped():
    folder = Path(embedded_england_covid_path()).parent
    text = (folder / "LICENSE-england_covid.txt").read_text()
    assert "MIT License" in text and "Benedek Rozemberczki" in text
