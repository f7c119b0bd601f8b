"""``benchmarks/bench_event_partition.py --quick`` runs and its table says what it must: every stream has a row per
(parts, method), flexbicut's balance cost is never above interval's and never below the lower bound."""
from __future__ import annotations

from tests.helpers.bench_quick import run_quick


def test_bench_event_partition_quick(capfd):
    out = run_quick(capfd, "bench_event_partition", "--quick")  # in this process: no interpreter to start
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in out.splitlines()
            if ln.startswith("| ") and ln.split("|")[2].strip() in ("range", "interval", "flexbicut")]
    assert len(rows) == 2 * 2 * 3  # two streams, 2 and 4 parts, three methods
    for k in range(0, len(rows), 3):
        cost = {r[1]: float(r[2].replace(",", "")) for r in rows[k:k + 3]}
        assert cost["flexbicut"] <= cost["interval"], rows[k:k + 3]
        assert all(float(r[5].rstrip("%")) >= 0 for r in rows[k:k + 3])  # above the lower bound
        assert rows[k + 2][3].startswith("-") or cost["flexbicut"] == cost["range"]
