"""``pyg-dynscale partition-events``: the JSON report is the library's numbers (pre-sampling, partition,
communication / residual matrices, balance cost), ``--out`` saves the owner tensor, refusals are one line naming
the option."""
from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

from pyg_dynscale.cli import main
from pyg_dynscale.ctdg import load_jodie_csv, split_ranges
from pyg_dynscale.ctdg.presample import trainer_requests
from pyg_dynscale.ctdg.memory_partition import balance_cost, communication_matrix, partition_vertices, residual_matrix
from tests.helpers.event_csv import write_events_csv


@pytest.fixture(scope="module")
def events_csv(tmp_path_factory) -> str:
    return write_events_csv(tmp_path_factory.mktemp("events") / "events.csv", 400, 40, msg_dim=2, seed=5,
                            burst_length=20, burst_fraction=0.5)


def _run(*argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["partition-events", *argv])
    return code, out.getvalue()


def test_json_report_is_the_library_numbers(events_csv, tmp_path):
    owner_file = tmp_path / "owner.pt"
    code, out = _run(events_csv, "--parts", "3", "--batch-size", "10", "--num-neighbors", "4", "--json",
                     "--out", str(owner_file))
    assert code == 0
    r = json.loads(out)
    data = load_jodie_csv(events_csv)
    n = data.num_nodes
    train = split_ranges(data)[0]
    req = trainer_requests(data.src, data.dst, n, train, 10, 3, 4)
    owner = torch.load(owner_file)
    assert torch.equal(owner, partition_vertices("flexbicut", n, 3, req))
    assert r["method"] == "flexbicut" and r["slack"] == 0.1 and r["interval"] == 1 and r["parts"] == 3
    assert r["events"] == {"train": train, "total": data.num_events, "nodes": n}
    assert r["requests"] == {"pairs": req.size(1), "rows": int(req[2].sum())}
    assert r["owner_counts"] == torch.bincount(owner, minlength=3).tolist() and sum(r["owner_counts"]) == n
    c = communication_matrix(owner, req, 3)
    assert r["communication_matrix"] == c.tolist() and r["residual_matrix"] == residual_matrix(c).tolist()
    assert r["balance_cost"] == balance_cost(owner, req, 3) == max(r["rank_costs"])
    assert r["baselines"]["interval"] == balance_cost(partition_vertices("interval", n, 3), req, 3)
    assert r["baselines"]["range"] == balance_cost(partition_vertices("range", n, 3), req, 3)
    assert r["balance_cost"] < r["baselines"]["interval"]
    assert r["out"] == str(owner_file) and r["total_seconds"] >= r["seconds"]["presample"] >= 0


def test_methods_and_text_output(events_csv):
    costs = {}
    for method in ("range", "interval"):
        code, out = _run(events_csv, "--parts", "2", "--method", method, "--batch-size", "20", "--json")
        r = json.loads(out)
        assert code == 0 and r["balance_cost"] == r["baselines"][method] and r["slack"] is None
        costs[method] = r["balance_cost"]
    code, out = _run(events_csv, "--parts", "2", "--batch-size", "20", "--interval", "3", "--slack", "0.3")
    assert code == 0 and "balance cost" in out and "communication matrix" in out
    code, out = _run(events_csv, "--parts", "2", "--batch-size", "20", "--interval", "3", "--json")
    assert json.loads(out)["interval"] == 3


@pytest.mark.parametrize("argv,message", [
    (["--parts", "0"], "--parts must be >= 1"),
    (["--parts", "2", "--batch-size", "0"], "--batch-size must be >= 1"),
    (["--parts", "2", "--method", "range", "--slack", "0.2"], "--slack applies to --method flexbicut only"),
    (["--parts", "2", "--method", "range", "--interval", "2"], "--interval applies to"),
    (["--parts", "2", "--slack", "-1"], "--slack must be a finite number >= 0"),
    (["--parts", "2", "--interval", "0"], "--interval must be >= 1"),
    (["--parts", "1000"], "--parts is 1000 for"),
    (["--parts", "2", "--out", "/no/such/folder/o.pt"], "--out: the folder"),
])
def test_refusals_name_the_option(events_csv, argv, message, capsys):
    code, out = _run(events_csv, *argv)
    err = capsys.readouterr().err
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1, err


def test_missing_file(capsys):
    assert _run("/no/such/events.csv", "--parts", "2")[0] == 2
    assert "no such file" in capsys.readouterr().err
