"""``pyg-dynscale partition`` subcommand (loader replaced by a fixed small signal)."""
from __future__ import annotations

import json

import pytest

import pyg_dynscale.data.loaders as loaders
from tests.conftest import make_dynamic_signal
from pyg_dynscale.cli import main
from pyg_dynscale.partition import DependencyPattern, evaluate, load_partition, partition


@pytest.fixture
def data(tmp_path, monkeypatch):
    sig = make_dynamic_signal(seed=6, T=8, V=16)
    calls = []

    def fake_load(path, format="auto", window=None):
        calls.append((path, format, window))
        return sig

    monkeypatch.setattr(loaders, "load", fake_load, raising=False)
    f = tmp_path / "g.txt"
    f.write_text("0 1 0\n")
    return sig, str(f), calls


def test_json_report(data, capsys):
    sig, path, calls = data
    rc = main(["partition", path, "--scheme", "pts", "--parts", "3", "--model", "dysat", "--hidden", "4", "--blocks", "2",
               "--balanced", "--window", "60", "--format", "edgelist", "--json"])
    assert rc == 0
    out = capsys.readouterr().out
    r = json.loads(out)
    assert calls == [(path, "edgelist", 60.0)]
    # two blocks: block 1's spatial rows cost per-epoch bytes (block 0's are raw features, loaded once)
    m = evaluate(sig, DependencyPattern.preset("dysat", sig.num_node_features, 4, num_blocks=2),
                 partition(sig, "pts", 3, balanced=True))
    assert m.bytes_spatial > 0
    for k in ("bytes_total", "bytes_spatial", "bytes_temporal", "bytes_redistribution",
              "cut_spatial_edges", "cut_temporal_edges"):
        assert r[k] == getattr(m, k)
    assert r["lambda"] == pytest.approx(m.lambda_)
    assert r["scheme"] == "pts" and r["parts"] == 3 and r["model"] == "dysat" and r["seconds"] >= 0


def test_text_and_out(data, capsys, tmp_path):
    sig, path, _ = data
    out_file = tmp_path / "p.pt"
    assert main(["partition", path, "--scheme", "pss-ts", "--parts", "2", "--out", str(out_file)]) == 0
    text = capsys.readouterr().out
    assert "bytes / epoch" in text and "redistribution" in text and "saved to" in text
    p = load_partition(str(out_file), signal=sig)
    assert p.scheme == "pss-ts" and p.time_owner is not None


def test_errors(data, capsys):
    sig, path, _ = data
    assert main(["partition", path, "--scheme", "pss", "--parts", "0"]) == 2
    assert "--parts" in capsys.readouterr().err
    assert main(["partition", path + ".missing", "--parts", "2"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["partition", path, "--scheme", "pts", "--parts", str(sig.num_vertex_time_nodes + 1)]) == 2
    assert "num_parts" in capsys.readouterr().err
    for bad in (["--scheme", "metis"], ["--model", "gat"]):
        with pytest.raises(SystemExit) as e:
            main(["partition", path, "--parts", "2", *bad])
        assert e.value.code == 2
