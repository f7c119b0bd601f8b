"""``--scheme auto``, the default of ``pyg-dynscale train`` and ``partition``:
the choice is the candidate with the lowest predicted epoch, and both the text
and the JSON reports say what was chosen and what every candidate cost."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from pyg_dynscale.cli import main
from pyg_dynscale.commands.train_report import print_report

ROOT = Path(__file__).resolve().parents[2]


def _check_auto_block(auto: dict, scheme: str, path: str) -> None:
    cands = {c["scheme"]: c for c in auto["candidates"]}
    assert auto["path"] == path
    best = min(cands.values(), key=lambda c: c["predicted_s"])
    assert auto["chosen"] == best["scheme"]
    assert scheme == auto["chosen"].replace("pts-loc", "pts")
    assert {"pss", "pts", "pts-loc", "pgc"} <= set(cands)
    for c in cands.values():
        assert c["predicted_s"] > 0 and c["collectives"] >= 1


def test_train_defaults_to_auto_and_reports_it(two_process_defaults_run, capsys) -> None:
    # mpnnlstm-dgc on 2 processes, no --scheme (tests/commands/conftest.py: the run test_cli_device.py checks too)
    r = two_process_defaults_run
    assert r["model"] == "mpnnlstm-dgc" and r["world_size"] == 2
    _check_auto_block(r["auto"], r["scheme"], "decomposed")
    assert "pss-ts" in {c["scheme"] for c in r["auto"]["candidates"]}
    assert r["locality"] == (r["auto"]["chosen"] == "pts-loc")
    print_report(argparse.Namespace(json=False), r)
    text = capsys.readouterr().out
    assert f"auto chose {r['auto']['chosen']} (decomposed path)" in text
    for c in r["auto"]["candidates"]:
        assert f" {c['scheme']} " in text


def test_partition_defaults_to_auto_and_reports_it(capsys) -> None:
    path = str(ROOT / "pyg_dynscale" / "data" / "embedded" / "england_covid.json.gz")
    assert main(["partition", path, "--parts", "2", "--gcn-layers", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    _check_auto_block(r["auto"], r["scheme"], "decomposed")
    assert main(["partition", path, "--parts", "2", "--gcn-layers", "2"]) == 0
    assert f"auto chose {r['auto']['chosen']}" in capsys.readouterr().out
    assert main(["partition", path, "--parts", "2", "--scheme", "pss", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["auto"] is None


def test_auto_refuses_options_of_one_scheme(capsys) -> None:
    assert main(["train", "england_covid", "--locality", "--epochs", "1"]) == 2
    assert "add --scheme pts" in capsys.readouterr().err
