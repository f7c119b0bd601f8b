"""bench_sven_prefetch runs (``--quick``) and its table says what it must."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_sven_prefetch_quick(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))  # ranks import the benchmark by name, with this path
    try:
        importlib.import_module("bench_sven_prefetch").main(["--quick"])
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    out = capsys.readouterr().out
    rows = {tuple(ln.split()[:2]): ln.split()[2:] for ln in out.splitlines() if ln.split()[:1] in (["partitioned"], ["sven"])}
    assert len(rows) == 4, out
    for p in ("partitioned", "sven"):
        off, on = rows[(p, "False")], rows[(p, "True")]
        assert off[2:4] == on[2:4], out  # dropout off: the same loss and bytes with and without the prefetch
        assert int(off[4]) == 0 < int(on[4]), out  # the lists came from the thread
    assert "load average" in out
