"""``pyg-dynscale partition`` subcommand (loader replaced by a fixed small signal)."""
from __future__ import annotations

import json

import pytest

import pyg_dynscale.data.loaders as loaders
from tests.helpers.signals import make_dynamic_signal
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


def test_locality_is_passed_to_pts_and_refused_elsewhere(data, capsys, tmp_path):
    sig, path, _ = data
    out_file = tmp_path / "p.pt"
    assert main(["partition", path, "--scheme", "pts", "--parts", "3", "--locality", "--json", "--out", str(out_file)]) == 0
    assert json.loads(capsys.readouterr().out)["locality"] is True
    got = load_partition(str(out_file), signal=sig)
    assert got.meta["locality"] is True
    assert got.owner.tolist() == partition(sig, "pts", 3, locality=True).owner.tolist()
    assert got.owner.tolist() != partition(sig, "pts", 3).owner.tolist()  # the flag took effect
    assert main(["partition", path, "--scheme", "pss", "--parts", "3", "--locality"]) == 2
    assert "--locality orders the vertices of --scheme pts" in capsys.readouterr().err


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
    err = capsys.readouterr().err  # the partitioner's field num_parts, named by the option that sets it
    assert f"--parts: {sig.num_vertex_time_nodes + 1} parts but only" in err and "num_parts" not in err
    for bad in (["--scheme", "metis"], ["--model", "gat"]):
        with pytest.raises(SystemExit) as e:
            main(["partition", path, "--parts", "2", *bad])
        assert e.value.code == 2


# ------------------------------------------------------------------ --window and --out
@pytest.mark.parametrize("window, seconds", [("1d", 86400.0), ("12h", 43200.0), ("30min", 1800.0), ("1w", 604800.0),
                                             ("90", 90.0), ("2.5", 2.5), ("1e3", 1000.0)])
def test_window_accepts_durations_like_inspect(data, capsys, window, seconds):
    """``--window`` is parsed as ``inspect --window`` is (``parse_window``): seconds or a duration."""
    from pyg_dynscale.commands.inspect import inspect_path
    from pyg_dynscale.data.loaders import parse_window

    _, path, calls = data
    assert main(["partition", path, "--scheme", "pts", "--parts", "2", "--window", window, "--json"]) == 0
    assert calls == [(path, "auto", seconds)]
    assert json.loads(capsys.readouterr().out)["parts"] == 2
    assert parse_window(window) == seconds
    assert inspect_path(path, window=window)["window"] == seconds


@pytest.mark.parametrize("window", ["0", "0d", "-5", "-1d", "inf", "-inf", "nan", "1e400", "abc", "3 parsecs", ""])
def test_window_rejected_before_loading(data, capsys, window):
    _, path, calls = data
    assert main(["partition", path, "--parts", "2", f"--window={window}"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("pyg-dynscale partition: error: --window: ") and captured.err.count("\n") == 1
    assert captured.out == "" and calls == []


def test_window_too_small_for_the_file(tmp_path, capsys):
    """A window like 1e-17 s would overflow the window index: a clear --window error, no warning, no traceback."""
    import warnings

    f = tmp_path / "events.txt"
    f.write_text("0 1 0\n1 2 100\n2 0 250\n0 2 260\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for window in ("1e-17", "1e-300"):
            assert main(["partition", str(f), "--scheme", "pts", "--parts", "2", "--window", window]) == 2
            err = capsys.readouterr().err
            assert err.startswith("pyg-dynscale partition: error: --window: ") and "too small" in err
    assert main(["partition", str(f), "--scheme", "pts", "--parts", "2", "--window", "100s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vertex_time_nodes"] > 0
    # a window for a PyGT JSON file is named as --window too
    j = tmp_path / "tiny.json"
    j.write_text(json.dumps({"edges": [[0, 1], [1, 2]], "FX": [[float(i)] * 3 for i in range(7)]}))
    assert main(["partition", str(j), "--parts", "1", "--window", "1d"]) == 2
    assert "--window: " in capsys.readouterr().err


def test_out_into_missing_folder_or_a_directory(data, capsys, tmp_path, monkeypatch):
    _, path, calls = data
    target = tmp_path / "no" / "such" / "p.pt"
    assert main(["partition", path, "--parts", "2", "--out", str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("pyg-dynscale partition: error: --out: ")
    assert str(target.parent) in captured.err and "does not exist" in captured.err
    assert calls == [] and not target.parent.exists()  # rejected before loading; nothing created
    assert main(["partition", path, "--parts", "2", "--out", str(tmp_path)]) == 2
    assert "--out: " in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)  # a bare file name: the working directory
    assert main(["partition", path, "--parts", "2", "--out", "p.pt"]) == 0
    assert (tmp_path / "p.pt").is_file()


def test_cli_errors_exit_2_without_traceback(tmp_path, capsys):
    """End to end through the console script's module: one line on stderr, exit status 2 (the first case in a
    subprocess of its own; the others through the same ``main`` in this process, where a warning would be
    recorded instead of printed: none may be)."""
    import os
    import subprocess
    import sys
    import warnings
    from pathlib import Path

    f = tmp_path / "events.txt"
    f.write_text("0 1 0\n1 2 100\n2 0 250\n")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    cases = (["--window", "1e-17"], ["--window", "0"], ["--window", "1d", "--out", str(tmp_path / "x" / "p.pt")])
    for i, extra in enumerate(cases):
        argv = ["partition", str(f), "--parts", "1", *extra]
        if i == 0:
            r = subprocess.run([sys.executable, "-m", "pyg_dynscale", *argv], capture_output=True, text=True, env=env,
                               timeout=120)
            code, err = r.returncode, r.stderr
        else:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                code = main(argv)
            err = capsys.readouterr().err
            assert not caught, [str(w.message) for w in caught]
        assert code == 2, err
        assert "Traceback" not in err and "Warning" not in err and err.count("\n") == 1
        assert ("--out" if "--out" in extra else "--window") in err
