"""`pyg-dynscale inspect`: JSON schema (keys and types), human output, errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pyg_dynscale.cli import COMMANDS, build_parser, main
from pyg_dynscale.commands.inspect import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]

SUMMARY_KEYS = {"min", "max", "mean", "std", "cv", "p50", "p90", "p99"}
# The documented schema (docs/cli.md): key -> type.
SCHEMA: dict[str, Any] = {
    "schema_version": int,
    "path": str,
    "format": str,
    "window": (float, type(None)),
    "num_vertices": int,
    "num_node_features": int,
    "weighted": bool,
    "fields": dict,
    "snapshots": int,
    "vertex_time_nodes": int,
    "spatial_edges": int,
    "temporal_edges": int,
    "sequences": int,
    "edges_per_snapshot": dict,
    "nodes_per_snapshot": dict,
    "sequence_length": dict,
}

# Chickenpox-style PyGT JSON: 3 vertices, a static graph with 4 edges, a
# series of 7 steps; PyGT's lags=4 gives 7 - 4 = 3 snapshots.
FX = np.arange(21, dtype=float).reshape(7, 3).tolist()
PYGT_EDGES = [[0, 1], [1, 2], [2, 0], [1, 0]]

# A temporal edge list "src dst seconds". With --window 10 the windows are
# [0,10): 0-1, 1-2 | [10,20): 2-3 | [20,30): 0-1, 3-0. The edge-list loader's
# defaults (see docs/loaders.md) predict links of the next window, so the last
# window only supplies labels: 2 snapshots, vertices exist from their first
# event on (V_0 = {0,1,2}, V_1 = {0,1,2,3}).
EDGELIST = "0 1 0\n1 2 5\n2 3 12\n0 1 21\n3 0 29\n"


@pytest.fixture
def pygt_json(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_chickenpox.json"
    path.write_text(json.dumps({"edges": PYGT_EDGES, "node_ids": {"a": 0, "b": 1, "c": 2}, "FX": FX}))
    return path


@pytest.fixture
def edgelist(tmp_path: Path) -> Path:
    path = tmp_path / "events.txt"
    path.write_text(EDGELIST)
    return path


def _inspect_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["inspect", *argv, "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)  # the whole of stdout is one JSON object
    assert isinstance(report, dict)
    return report


def _check_schema(r: dict[str, Any]) -> None:
    assert set(r) == set(SCHEMA), f"keys differ: {set(r) ^ set(SCHEMA)}"
    for key, typ in SCHEMA.items():
        assert isinstance(r[key], typ), f"{key}: {type(r[key]).__name__}"
        if typ is int:
            assert not isinstance(r[key], bool), key
    assert r["schema_version"] == SCHEMA_VERSION == 1
    for key in ("edges_per_snapshot", "nodes_per_snapshot", "sequence_length"):
        assert set(r[key]) == SUMMARY_KEYS, key
        assert all(isinstance(v, float) for v in r[key].values()), key
    assert all(isinstance(k, str) and v in {"node", "edge", "graph", "ragged"} for k, v in r["fields"].items())


def test_json_schema_pygt(pygt_json: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = _inspect_json(capsys, str(pygt_json))
    _check_schema(r)
    assert r["path"] == str(pygt_json) and r["format"] == "pygt-json" and r["window"] is None
    assert r["snapshots"] == 3
    assert r["num_vertices"] == 3
    assert r["vertex_time_nodes"] == 9
    assert r["spatial_edges"] == 3 * len(PYGT_EDGES)
    assert r["temporal_edges"] == 3 * (3 - 1)  # each vertex in 3 consecutive snapshots
    assert r["sequences"] == 3
    assert r["num_node_features"] == 4  # the lags
    assert r["weighted"] is True
    assert r["fields"] == {"x": "node", "y": "node"}
    assert r["edges_per_snapshot"]["cv"] == 0.0 and r["edges_per_snapshot"]["mean"] == 4.0
    assert r["sequence_length"] == {k: (0.0 if k in ("std", "cv") else 3.0) for k in SUMMARY_KEYS}


def test_json_schema_edgelist(edgelist: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = _inspect_json(capsys, str(edgelist), "--format", "edgelist", "--window", "10")
    _check_schema(r)
    assert r["format"] == "edgelist" and r["window"] == 10.0
    assert r["snapshots"] == 2
    assert r["spatial_edges"] == 3
    assert r["vertex_time_nodes"] == 3 + 4
    assert r["num_vertices"] == 4
    assert r["temporal_edges"] == 3  # vertices 0, 1, 2 appear in both snapshots
    assert r["sequences"] == 4
    assert (r["edges_per_snapshot"]["min"], r["edges_per_snapshot"]["max"]) == (1.0, 2.0)
    assert r["nodes_per_snapshot"]["mean"] == 3.5
    assert r["sequence_length"]["mean"] == 1.75
    assert r["weighted"] is True  # event counts
    # the same numbers as the loader's own statistics
    from pyg_dynscale.data.loaders import load

    stats = load(str(edgelist), format="edgelist", window=10.0).statistics().to_dict()
    assert {k: r[k] for k in stats} == stats


def test_window_duration_string(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    daily = tmp_path / "daily.txt"
    daily.write_text("0 1 0\n1 2 86400\n2 0 172800\n")  # one event per day
    r = _inspect_json(capsys, str(daily), "--window", "1d")
    assert (r["window"], r["snapshots"]) == (86400.0, 2)
    r = _inspect_json(capsys, str(daily), "--window", "12h")
    assert (r["window"], r["snapshots"]) == (43200.0, 2)  # empty windows are dropped
    assert _inspect_json(capsys, str(daily), "--window", "3600")["window"] == 3600.0


def test_auto_format_matches_explicit(pygt_json: Path, edgelist: Path, capsys: pytest.CaptureFixture[str]) -> None:
    auto = _inspect_json(capsys, str(pygt_json))
    explicit = _inspect_json(capsys, str(pygt_json), "--format", "pygt-json")
    assert auto == explicit
    auto = _inspect_json(capsys, str(edgelist), "--window", "10")
    explicit = _inspect_json(capsys, str(edgelist), "--window", "10", "--format", "edgelist")
    assert auto == explicit


def test_embedded_england_covid_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    from pyg_dynscale.data.loaders.embedded import embedded_england_covid_path

    r = _inspect_json(capsys, embedded_england_covid_path())
    _check_schema(r)
    # PyGT's EnglandCovidDatasetLoader(lags=8): 61 - 8 = 53 daily snapshots of 129 regions.
    assert (r["snapshots"], r["num_vertices"], r["vertex_time_nodes"]) == (53, 129, 53 * 129)
    assert r["temporal_edges"] == 129 * 52
    assert r["edges_per_snapshot"]["cv"] > 0  # mobility edges change every day


def _row(out: str, label: str) -> str:
    """The value column of the text row starting with ``label``."""
    rows = [ln.split()[-1] for ln in out.splitlines() if ln.strip().startswith(label + "  ")]
    assert len(rows) == 1, (label, out)
    return rows[0]


def test_human_output(pygt_json: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(pygt_json)]) == 0
    out = capsys.readouterr().out
    expected = {
        "snapshots": "3", "vertices": "3", "vertex-time nodes": "9", "spatial edges": "12",
        "temporal edges": "6", "temporal sequences": "3", "node features": "4", "edge weights": "yes",
    }
    for label, value in expected.items():
        assert _row(out, label) == value, label
    assert "pygt-json" in out
    assert "edges / snapshot" in out and "sequence length" in out
    assert "spatial non-uniformity" in out and "temporal non-uniformity" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["inspect", "{missing}"], "no such file"),
        (["inspect", "{dir}"], "directory"),
        (["inspect", "{garbage}", "--format", "pygt-json"], "error"),
        (["inspect", "{garbage}", "--format", "edgelist"], "error"),
        (["inspect", "{edges}", "--window", "0"], "--window"),
        (["inspect", "{edges}", "--window", "-5"], "--window"),
        (["inspect", "{edges}", "--window", "soon"], "--window"),
        (["inspect", "{edges}"], "window"),  # an edge list needs a window
    ],
)
def test_bad_input_exit_2(
    argv: list[str], needle: str, tmp_path: Path, edgelist: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{ this is not json")
    subs = {"{missing}": str(tmp_path / "nope.json"), "{dir}": str(tmp_path), "{garbage}": str(garbage), "{edges}": str(edgelist)}
    assert main([subs.get(a, a) for a in argv]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.startswith("pyg-dynscale inspect: error:") and needle in cap.err
    assert "Traceback" not in cap.err


def test_bad_usage_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["inspect"], ["inspect", "x", "--format", "csv"], ["no-such-command"], []):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    capsys.readouterr()


def test_console_entry_point_missing_file(tmp_path: Path) -> None:
    """The real command: exit status 2, one message on stderr, no traceback."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYG_DYNSCALE_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pyg_dynscale", "inspect", str(tmp_path / "missing.json"), "--json"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_subcommand_registry() -> None:
    """Each registered module exposes add_parser/run; inspect is registered."""
    import importlib

    assert "pyg_dynscale.commands.inspect" in COMMANDS
    for name in COMMANDS:
        mod = importlib.import_module(name)
        assert callable(mod.add_parser) and callable(mod.run)
    parser = build_parser()
    args = parser.parse_args(["inspect", "f.txt", "--window", "60", "--json"])
    assert (args.command, args.path, args.window, args.json, args.format) == ("inspect", "f.txt", "60", True, "auto")


def test_saved_signal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file written by DynamicGraphSignal.save is inspected as format 'dynscale'."""
    from pyg_dynscale import DynamicGraphSignal

    sig = DynamicGraphSignal(
        [np.array([[0, 1], [1, 0]]), np.array([[0], [1]])], None,
        [np.ones((2, 3)), np.zeros((2, 3))], None, node_ids=[np.array([0, 4]), np.array([4, 7])],
    )
    path = tmp_path / "signal.pt"
    sig.save(str(path))
    r = _inspect_json(capsys, str(path))
    _check_schema(r)
    assert r["format"] == "dynscale" and r["weighted"] is False
    assert (r["snapshots"], r["num_vertices"], r["vertex_time_nodes"]) == (2, 8, 4)
    assert (r["spatial_edges"], r["temporal_edges"], r["sequences"]) == (3, 1, 3)
    assert r["fields"] == {"x": "node"}
