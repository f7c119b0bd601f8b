"""``benchmarks/bench_rank_memory.py``: the meter measures what a block of code added at its peak in its own
process, the plan facts and the projection compute what they say, and ``--quick`` prints the per-rank table:
every whole-data row measured, a rank that builds from its shard needs clearly less than one that loads the
whole signal, and the goal column follows from the printed numbers."""
from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def brm():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("bench_rank_memory")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_meter_counts_the_block_not_an_earlier_peak(brm):
    big = torch.ones(24 * 2**20)   # 96 MiB resident, then freed: the process's peak is above what follows
    big.add_(1.0)
    del big
    brm._trim()
    with brm.Meter() as m:
        t = torch.ones(8 * 2**20)  # 32 MiB touched inside the block
    assert 30.0 <= m.peak_mib <= 40.0, m.peak_mib
    assert 30.0 <= m.held_mib <= 40.0  # still resident: t is alive
    assert abs(m.maxrss_mib - m.peak_mib) < 2.0  # ru_maxrss follows the reset counter in this process
    del t
    with brm.Meter() as quiet:
        pass
    assert quiet.peak_mib < 4.0


def test_tensor_bytes_counts_each_tensor_once(brm):
    a, b = torch.zeros(10, dtype=torch.int64), torch.zeros(3, 4)

    class Holder:
        def __init__(self):
            self.a, self.again, self.parts = a, a, [b, {"x": b, "n": 3}]

    assert brm.tensor_bytes(Holder()) == 80 + 48


def test_received_rows_are_the_plans_distinct_rows_into_the_rank(brm):
    from pyg_dynscale.partition import CommunicationPlan, partition

    from tests.helpers.signals import make_signal  # noqa: F401 -- the suite's tiny signals

    sig = _tiny_signal()
    pattern = _pattern(brm, sig)
    part = partition(sig, "pts", 2, pattern, seed=0)
    plan = CommunicationPlan.build(sig, part, pattern)
    for r in range(2):
        gids = torch.cat([e.gid[e.dst == r] for e in plan])
        assert brm.received_rows(plan, r) == int(torch.unique(gids).numel()) > 0


def _tiny_signal():
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    return generate_dynamic_graph(60, 400, 5, num_features=2, seed=1)


def _pattern(brm, sig):
    model, _ = brm.snapshot_model(sig.num_node_features)
    return model.dependency_pattern(bytes_per_element=4)


def _measured(mib, setup, halo=0, plan=0):
    return {"status": "measured", "mib": mib, "setup_s": setup, "halo_rows": halo, "plan_bytes": plan}


def test_projection_recovers_the_model_it_is_fitted_on(brm):
    rows = []
    for N in (1e6, 1e7, 1e8):
        for R in (1, 2, 4):
            H = 0 if R == 1 else N / 100
            part = _measured(100 + 3e-4 * N / R + 2e-4 * H, 1.0 + 1e-6 * N / R, H, 8.0 * H)
            whole = _measured(50 + 5e-4 * N, 2.0 + 2e-6 * N, H, 16.0 * N)
            rows.append({"family": "snapshots", "case": f"synth-{N:g}", "N": N, "ranks": R, "whole": whole,
                         "part": part})
    rows.append({"family": "snapshots", "case": "snap", "N": 5e5, "ranks": 2,   # another graph: left out
                 "whole": _measured(1e6, 1e6), "part": _measured(1e6, 1e6)})
    proj = {(p["mode"], p["R"]): p for p in brm.projection(rows, targets=((1e8, 4), (1e9, 64)))
            if p["family"] == "snapshots"}
    H = 1e9 / 100
    assert proj["part", 64]["mib"]["value"] == pytest.approx(100 + 3e-4 * 1e9 / 64 + 2e-4 * H, rel=1e-6)
    assert proj["part", 64]["setup_s"]["value"] == pytest.approx(1.0 + 1e-6 * 1e9 / 64, rel=1e-6)
    assert proj["part", 64]["plan_bytes"]["value"] == pytest.approx(8.0 * H, rel=1e-6)
    assert proj["part", 4]["mib"]["value"] == pytest.approx(100 + 3e-4 * 1e8 / 4 + 2e-4 * 1e6, rel=1e-6)
    assert proj["whole", 64]["mib"]["value"] == pytest.approx(50 + 5e-4 * 1e9, rel=1e-6)
    assert proj["whole", 64]["plan_bytes"]["value"] == pytest.approx(16.0 * 1e9, rel=1e-6)
    events = [p for p in brm.projection(rows) if p["family"] == "events"]
    assert events and all("too few" in p["status"] for p in events)  # nothing measured: no figure invented


def test_goal_bound_uses_the_whole_data_set_in_one_process(brm):
    one = {"label": "c", "ranks": 1, "N": 1000, "whole": _measured(1000, 1), "part": _measured(1000, 1)}
    two = {"label": "c", "ranks": 2, "N": 1000, "whole": _measured(900, 1), "part": _measured(740, 1, halo=100)}
    bound, met, ref = brm.goal([one, two], two)
    assert ref == "1-rank whole" and bound == pytest.approx(1.3 * 1000 / 2 + 100 * 1000 / 1000) and met
    two["part"]["mib"] = 760
    assert brm.goal([one, two], two)[1] is False
    # without the 1-rank row: the whole-data peak at the row's rank count, said so
    assert brm.goal([two], two)[2] == "whole at 2 ranks"
    absent = dict(two, part={"status": "not available: x"})
    assert brm.goal([one, absent], absent)[:2] == (None, None)


def _table(out: str) -> list:
    """The measured table's rows (a case, then its family)."""
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in out.splitlines()
            if re.match(r"\| (synthetic|road|events) [^|]*\| (snapshots|windows|events) \|", ln)]


def test_bench_rank_memory_quick(tmp_path, brm, capsys):
    """``main(["--quick"])`` in this process (its ranks and preparation steps from the suite's fork server,
    tests/helpers/fast_spawn.py), 1 and 2 ranks of each family."""
    out_json = tmp_path / "rows.json"
    brm.main(["--quick", "--placements", "sven", "--workdir", str(tmp_path / "work"), "--json", str(out_json)])
    out = capsys.readouterr().out
    table = _table(out)
    assert [(r[0].split(" ")[0], r[3]) for r in table] == [(c, R) for c in ("synthetic", "road", "events")
                                                          for R in ("1", "2")]
    rows = json.loads(out_json.read_text())["rows"]
    assert not (tmp_path / "work" / "synth-quick").exists()   # the data is deleted after each case
    available = {"snapshots": brm.shards_available(), "windows": brm.windows_part_available(),
                 "events": brm.events_part_available()}
    for row, printed in zip(rows, table):
        assert row["whole"]["status"] == "measured", row["whole"]
        assert printed[4] == f"{row['whole']['mib']:,.0f}"
        # every rank's own figure, the largest printed
        assert row["whole"]["mib"] == max(r["peak_mib"] for r in row["whole"]["per_rank"])
        assert len(row["whole"]["per_rank"]) == row["ranks"]
        if available[row["family"]] is None:
            assert row["part"]["status"] == "measured", row["part"]
            bound, met, _ = brm.goal(rows, row)
            assert printed[6] == f"{bound:,.0f}" and printed[7] == ("yes" if met else "no")
            assert float(printed[10]) == pytest.approx(row["part"]["mib"] / row["whole"]["mib"], abs=0.006)
        else:
            assert printed[5] == "not available" and available[row["family"]] in printed[-1]
    synth = {r["ranks"]: r for r in rows if r["family"] == "snapshots"}
    info = synth[1]["info"]
    signal_mib = info["signal_bytes"] / 2**20
    for R in (1, 2):  # every whole-data rank holds at least the signal it loaded
        assert min(r["peak_mib"] for r in synth[R]["whole"]["per_rank"]) >= 0.9 * signal_mib
    if available["snapshots"] is None:
        # a rank of 2 that builds from its shard holds about half the rows: clearly below a rank that loads
        # everything (1.0 if it did), and every rank of the 2 is
        whole2, part2 = synth[2]["whole"], synth[2]["part"]
        assert max(r["peak_mib"] for r in part2["per_rank"]) < 0.8 * min(r["peak_mib"] for r in whole2["per_rank"])
        assert part2["halo_rows"] > 0 and synth[1]["part"]["halo_rows"] == 0
    assert "## PROJECTION (not measured)" in out and "64 (projection)" in out
