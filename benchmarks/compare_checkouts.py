#!/usr/bin/env python
r"""Two checkouts timed in one run: the first partition and ``bench_pgc_scale --quick``, base against head.

A change that restructures the partitioner (issue 39) must not make it slower. Timings taken on different days
on a shared machine cannot show that; this script times both revisions in the same run, alternating them, and
prints the ratio head / base of the medians:

* **first partition**: a fresh interpreter imports the package, reads a graph and runs its first
  :func:`~pyg_dynscale.partition.partition_pgc` (4 parts, DGC's T-GCN pattern) -- what a user's first
  ``pyg-dynscale partition`` pays. On a stand-in (England COVID, the embedded file) and on a shared dataset
  (email-Eu-core at 1-day snapshots, ~1.1M vertex-time nodes plus edges), each with the torch backend and with
  the numba backend on a warm cache (each side compiles its own kernels once, untimed, into its own
  ``NUMBA_CACHE_DIR``, so neither side reads the other's or the machine's cache);
* **bench_pgc_scale --quick** (200k vertex-time nodes, 8 parts) with the numba backend on that warm cache
  (``PYG_DYNSCALE_LP_BACKEND=numba``: its ``"auto"`` would depend on which kernels each side's cache holds): its
  wall time and its user CPU time (``resource.getrusage(RUSAGE_CHILDREN)``).

Each side runs in its own interpreters with ``PYTHONPATH`` and the working directory set to its tree, and each
measurement asserts that ``pyg_dynscale`` resolved inside that tree (not to an installed copy). The base (and a
head given as a revision) is checked out with ``git worktree add --detach`` into a temporary folder, removed at
the end. Rounds alternate the order (base first, then head first) so that a drift of the machine's load
affects both sides alike; the figures are medians over ``--repeats`` rounds.

Usage::

    .venv/bin/python benchmarks/compare_checkouts.py --base be115c3            # against this working tree
    .venv/bin/python benchmarks/compare_checkouts.py --base be115c3 --head main --repeats 5
    .venv/bin/python benchmarks/compare_checkouts.py --base HEAD --quick       # smoke: stand-in, torch, 20k, 1 round
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]

#: the graphs of the first-partition rows: name -> (file relative to a tree or to the datasets folder, window)
STAND_IN = ("pyg_dynscale/data/embedded/england_covid.json.gz", None)
SHARED = ("snap/email-Eu-core-temporal.txt.gz", "1d")

#: what a fresh interpreter of one side runs for a first-partition row: prints one JSON line
FIRST_PARTITION = r"""
import json, sys, time
t0 = time.perf_counter()
import pyg_dynscale
from pyg_dynscale.data.loaders import load
from pyg_dynscale.partition import DependencyPattern, partition_pgc
t1 = time.perf_counter()
path, window, backend, tree = sys.argv[1:5]
assert pyg_dynscale.__file__.startswith(tree), (pyg_dynscale.__file__, tree)
signal = load(path, window=window) if window != "-" else load(path)
pattern = DependencyPattern.preset("tgcn", 4, 32, gcn_layers=2)  # DGC's T-GCN
t2 = time.perf_counter()
part = partition_pgc(signal, 4, pattern, backend=backend)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "partition_s": t3 - t2, "total_s": t3 - t0,
                  "backend": part.meta.get("backend"), "module": pyg_dynscale.__file__}))
"""

#: runs a benchmark script of one side as ``python benchmarks/x.py`` would, after the same import check
SCRIPT = r"""
import runpy, sys
script, tree = sys.argv[1:3]
import pyg_dynscale
assert pyg_dynscale.__file__.startswith(tree), (pyg_dynscale.__file__, tree)
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def checkout(rev: str, into: Path) -> Path:
    """A detached worktree of ``rev`` at ``into`` (removed by :func:`remove`)."""
    git("worktree", "add", "--detach", "--quiet", str(into), rev)
    return into


def remove(tree: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    shutil.rmtree(tree, ignore_errors=True)


def run_side(tree: Path, cache: Path, argv: list[str], backend: Optional[str] = None) -> tuple[str, float, float]:
    """``python argv`` in ``tree`` (its package first on the path; ``backend``: ``PYG_DYNSCALE_LP_BACKEND``);
    (stdout, wall s, user CPU s of the child)."""
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(cache), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYG_DYNSCALE_LP_BACKEND", None)  # the rows choose their backend themselves
    if backend is not None:
        env["PYG_DYNSCALE_LP_BACKEND"] = backend
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    user = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} in {tree} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout, wall, user


def first_partition(tree: Path, cache: Path, path: Path, window: Optional[str], backend: str) -> dict:
    out, _, _ = run_side(tree, cache, ["-c", FIRST_PARTITION, str(path), window or "-", backend, str(tree)])
    row = json.loads(out.strip().splitlines()[-1])
    assert row["backend"] == backend, row  # the row measured the backend it names
    return row


def scale_run(tree: Path, cache: Path, args: list[str], backend: str) -> dict:
    script = tree / "benchmarks" / "bench_pgc_scale.py"
    _, wall, user = run_side(tree, cache, ["-c", SCRIPT, str(script), str(tree), *args], backend)
    return {"wall_s": wall, "user_s": user}


def rows_of(args: argparse.Namespace, datasets: Path) -> list[tuple[str, str, Path | str, Optional[str], str]]:
    """(row name, kind, graph, window, backend) of each measurement; ``graph`` is relative to a tree for the
    stand-in (both sides read the head's copy: the same bytes)."""
    rows = []
    graphs = [("stand-in england_covid", STAND_IN[0], STAND_IN[1])]
    if not args.quick:
        if (datasets / SHARED[0]).is_file():
            graphs.append((f"{Path(SHARED[0]).name.split('.')[0]} @{SHARED[1]}", datasets / SHARED[0], SHARED[1]))
        else:
            print(f"note: {datasets / SHARED[0]} absent: no shared-dataset row", file=sys.stderr)
    for name, graph, window in graphs:
        for backend in ("torch",) if args.quick else ("torch", "numba"):
            rows.append((f"first partition {name} [{backend}{' warm' if backend == 'numba' else ''}]",
                         "first", graph, window, backend))
    scale_backend = "torch" if args.quick else "numba"
    rows.append((f"bench_pgc_scale {' '.join(scale_args(args))} [{scale_backend}] wall", "scale", "", None,
                 scale_backend))
    return rows


def scale_args(args: argparse.Namespace) -> list[str]:
    """bench_pgc_scale's command line: ``--quick`` (200k nodes); 20k nodes for this script's own ``--quick``."""
    return ["--nodes", "2e4"] if args.quick else ["--quick"]


def measure_round(sides: dict, caches: dict, rows: list, order: list[str], head_tree: Path,
                  scale: list[str]) -> dict:
    """One value per (row, side) and, for bench_pgc_scale, its user CPU too."""
    got: dict = {}
    for name, kind, graph, window, backend in rows:
        for side in order:
            tree = sides[side]
            if kind == "first":
                path = head_tree / graph if isinstance(graph, str) else graph
                got[(name, side)] = first_partition(tree, caches[side], path, window, backend)["partition_s"]
            else:
                r = scale_run(tree, caches[side], scale, backend)
                got[(name, side)] = r["wall_s"]
                got[(name.replace(" wall", " user CPU"), side)] = r["user_s"]
    return got


def warm_up(sides: dict, caches: dict, head_tree: Path, scale: list[str]) -> None:
    """Each side compiles PGC's kernels into its own cache once (untimed), on the stand-in and in bench_pgc_scale:
    the numba rows measure a warm cache."""
    for side, tree in sides.items():
        first_partition(tree, caches[side], head_tree / STAND_IN[0], None, "numba")
        scale_run(tree, caches[side], scale, "numba")


def table(medians: dict, names: list[str], repeats: int) -> str:
    lines = [f"{'measurement (median of %d, s)' % repeats:<52} {'base':>9} {'head':>9} {'head/base':>10}"]
    for name in names:
        b, h = medians[(name, "base")], medians[(name, "head")]
        lines.append(f"{name:<52} {b:9.3f} {h:9.3f} {h / b:10.3f}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the revision before (e.g. be115c3)")
    ap.add_argument("--head", default="worktree",
                    help="the revision after, or 'worktree' (default): this checkout as it is, uncommitted edits too")
    ap.add_argument("--repeats", type=int, default=3, help="rounds, alternating which side runs first (default 3)")
    ap.add_argument("--datasets",
                    default=os.environ.get("PYG_DYNSCALE_DATASETS", str(ROOT.parent / "shared" / "datasets")),
                    help="the shared datasets folder (default $PYG_DYNSCALE_DATASETS or ../shared/datasets)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke: one round, the stand-in with the torch backend and bench_pgc_scale at 20k nodes "
                         "only (no numba rows; only FM's loop compiles, as in every first partition on a cold cache)")
    ap.add_argument("--json", default=None, help="write the per-round values, medians and ratios here")
    args = ap.parse_args(argv)
    repeats = 1 if args.quick else max(1, args.repeats)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the worktrees (finally below)
    tmp = Path(tempfile.mkdtemp(prefix="compare_checkouts_"))
    made: list[Path] = []
    try:
        sides = {"base": checkout(args.base, tmp / "base")}
        made.append(sides["base"])
        if args.head == "worktree":
            sides["head"] = ROOT
        else:
            sides["head"] = checkout(args.head, tmp / "head")
            made.append(sides["head"])
        caches = {side: tmp / f"numba-{side}" for side in sides}
        for c in caches.values():
            c.mkdir()
        revs = {side: git("rev-parse", "--short", "HEAD", cwd=tree) for side, tree in sides.items()}
        dirty = args.head == "worktree" and bool(git("status", "--porcelain", "--untracked-files=no"))
        print(f"base {args.base} ({revs['base']}, {sides['base']})\n"
              f"head {args.head} ({revs['head']}{' + uncommitted edits' if dirty else ''}, {sides['head']})")
        rows = rows_of(args, Path(args.datasets))
        if not args.quick:  # --quick's rows run torch: no warm-up
            warm_up(sides, caches, sides["head"], scale_args(args))
        runs: list[dict] = []
        for r in range(repeats):
            order = ["base", "head"] if r % 2 == 0 else ["head", "base"]
            runs.append(measure_round(sides, caches, rows, order, sides["head"], scale_args(args)))
            print(f"round {r + 1}/{repeats} done ({' then '.join(order)})", file=sys.stderr)
        keys = list(runs[0])
        medians = {k: statistics.median(run[k] for run in runs) for k in keys}
        names = list(dict.fromkeys(name for name, _ in keys))
        print(table(medians, names, repeats))
        ratios = {name: medians[(name, "head")] / medians[(name, "base")] for name in names}
        assert all(math.isfinite(x) and x > 0 for x in ratios.values()), ratios
        if args.json:
            Path(args.json).write_text(json.dumps({
                "base": revs["base"], "head": revs["head"], "head_dirty": dirty, "repeats": repeats,
                "runs": [{f"{n}|{s}": v for (n, s), v in run.items()} for run in runs],
                "medians": {f"{n}|{s}": v for (n, s), v in medians.items()}, "ratios": ratios}, indent=1))
    finally:
        for tree in made:
            remove(tree)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
