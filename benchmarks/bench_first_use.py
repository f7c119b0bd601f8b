#!/usr/bin/env python
r"""Which kernels backend ``"auto"`` runs, and the first partition, on a cold and on a warm numba cache.

The measurement behind :mod:`pyg_dynscale.partition.compiled.backend`'s choice (its docstring keeps the reason;
docs/pgc.md, "First use"): for every graph the benchmarks and tests partition -- the shared datasets as
``tests/partition/test_fingerprints.py`` reads them, their stand-ins, ``bench_pgc_vs_metis``'s mathoverflow @30d
and ``bench_pgc_scale --quick`` -- its vertex-time nodes plus edges, the backend ``"auto"`` picks, and the first
and the next :func:`~pyg_dynscale.partition.partition_pgc` call (4 parts, 8 for the synthetic graph; DGC's T-GCN
pattern) in a fresh interpreter:

* **cold**: an empty ``NUMBA_CACHE_DIR`` (a fresh install), ``backend="auto"``;
* **warm torch** / **warm auto**: a cache holding every kernel (compiled once, untimed, by PGC and every
  scheme under numba), ``backend="torch"`` and ``backend="auto"``.

Each row checks that the three runs give the same owners. ``--compile`` adds ``backend="numba"`` on an empty
cache (the compiling itself, about a minute per run).

Usage::

    .venv/bin/python benchmarks/bench_first_use.py                 # every graph (~15 min on 2 cores)
    .venv/bin/python benchmarks/bench_first_use.py --graphs england_covid,scale-quick --compile
    .venv/bin/python benchmarks/bench_first_use.py --quick         # one stand-in, cold only (smoke test)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
STAND_INS = ROOT / "tests" / "fixtures" / "datasets"

#: name -> (source, file relative to the datasets folder, window, extra loader options); source "stand-in" reads
#: tests/fixtures/datasets (England COVID: the package's embedded copy), "shared" the shared datasets folder
GRAPHS = {
    "stand-in:chickenpox": ("stand-in", "pygt/chickenpox.json", None, {}),
    "stand-in:pedalme": ("stand-in", "pygt/pedalme_london.json", None, {}),
    "stand-in:CollegeMsg@7d": ("stand-in", "snap/CollegeMsg.txt", "7d", {}),
    "stand-in:twitter_tennis": ("stand-in", "pygt/twitter_tennis_rg17.json", None, {}),
    "stand-in:email-Eu@2d": ("stand-in", "snap/email-Eu-core-temporal.txt", "2d", {}),
    "stand-in:mathoverflow@7d": ("stand-in", "snap/sx-mathoverflow.txt", "7d", {}),
    "england_covid": ("shared", "pygt/england_covid.json", None, {}),
    "chickenpox": ("shared", "pygt/chickenpox.json", None, {}),
    "pedalme": ("shared", "pygt/pedalme_london.json", None, {}),
    "CollegeMsg@7d": ("shared", "snap/CollegeMsg.txt", "7d", {}),
    "twitter_tennis": ("shared", "pygt/twitter_tennis_rg17.json", None, {}),
    "email-Eu@2d": ("shared", "snap/email-Eu-core-temporal.txt.gz", "2d", {}),
    "mathoverflow@90d": ("shared", "snap/sx-mathoverflow.txt.gz", "90d", {}),
    "mathoverflow@30d-undirected": ("shared", "snap/sx-mathoverflow.txt.gz", "30d",
                                    {"undirected": True, "self_loops": False}),
    "email-Eu@1d": ("shared", "snap/email-Eu-core-temporal.txt.gz", "1d", {}),
    "scale-quick": ("synthetic", "", None, {}),
}

#: one fresh interpreter's measurement: prints one JSON line
WORKER = r"""
import hashlib, json, sys, time
t0 = time.perf_counter()
spec, mode, tree = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
import pyg_dynscale
assert pyg_dynscale.__file__.startswith(tree), (pyg_dynscale.__file__, tree)
from pyg_dynscale.partition import DependencyPattern, partition, partition_pgc
from pyg_dynscale.partition.compiled import backend
import_s = time.perf_counter() - t0
source, path, window, opts = spec
if source == "synthetic":  # bench_pgc_scale --quick's graph
    from pyg_dynscale.data.synthetic import generate_dynamic_graph
    signal = generate_dynamic_graph(20_000, 400_000, 20, presence=0.5, num_features=1, target="none", seed=0)
    parts, pattern = 8, DependencyPattern.preset("tgcn", 1, 32, gcn_layers=2)
else:
    from pyg_dynscale.data.loaders import load
    signal = load(path, window=window, **opts) if window else load(path, **opts)
    parts, pattern = 4, DependencyPattern.preset("tgcn", 4, 32, gcn_layers=2)
sg = signal.supergraph()
size = sg.num_nodes + sg.num_spatial_edges + sg.num_temporal_edges
if mode == "warm-up":  # every kernel compiled into this cache: PGC (with temporal coarsening: PyGT's one-layer
    with backend.use_backend("numba"):  # T-GCN; round balance) and every scheme under numba
        partition_pgc(signal, parts, pattern)
        partition_pgc(signal, parts, DependencyPattern.preset("tgcn", 4, 32))
        partition_pgc(signal, parts, pattern, balance="rounds")
        partition(signal, "auto", parts, pattern)
        for scheme in ("pss", "pts", "pss-ts"):
            for balanced in (False, True):
                partition(signal, scheme, parts, pattern, balanced=balanced)
        partition(signal, "pts", parts, pattern, locality=True)
    print(json.dumps({"warm": backend.compiled_cache_warm()}))
    sys.exit()
warm, pick = backend.compiled_cache_warm(), backend.backend_for(size)
times, owners = [], []
for _ in range(2):
    t = time.perf_counter()
    part = partition_pgc(signal, parts, pattern, backend=None if mode == "auto" else mode)
    times.append(time.perf_counter() - t)
    owners.append(hashlib.sha256(part.owner.numpy().tobytes()).hexdigest()[:16])
assert owners[0] == owners[1]
print(json.dumps({"size": size, "cache_warm": warm, "auto_picks": pick, "backend": part.meta["backend"],
                  "import_s": import_s, "first_s": times[0], "next_s": times[1], "owner": owners[0]}))
"""


def spec_of(name: str, datasets: Path) -> Optional[list]:
    """The worker's ``[source, path, window, options]`` of graph ``name``; ``None`` where its file is absent."""
    source, rel, window, opts = GRAPHS[name]
    if source == "synthetic":
        return [source, "", None, opts]
    if source == "stand-in":
        path = ROOT / "pyg_dynscale" / "data" / "embedded" / "england_covid.json.gz" \
            if rel == "pygt/england_covid.json" else STAND_INS / rel
    else:
        path = datasets / rel
    return [source, str(path), window, opts] if path.is_file() else None


def run(spec: list, mode: str, cache: Path) -> dict:
    """One measurement in a fresh interpreter whose numba cache is ``cache``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_CACHE_DIR=str(cache))
    env.pop("PYG_DYNSCALE_LP_BACKEND", None)
    proc = subprocess.run([sys.executable, "-c", WORKER, json.dumps(spec), mode, str(ROOT)], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{spec} {mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: Optional[list[str]] = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", default=",".join(GRAPHS), help=f"comma-separated, of {', '.join(GRAPHS)}")
    ap.add_argument("--datasets",
                    default=os.environ.get("PYG_DYNSCALE_DATASETS", str(ROOT.parent / "shared" / "datasets")))
    ap.add_argument("--compile", action="store_true", help="also backend='numba' on an empty cache (compiles)")
    ap.add_argument("--quick", action="store_true", help="the PedalMe stand-in, cold cache only (nothing warmed)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    names = ["stand-in:pedalme"] if args.quick else [g for g in args.graphs.split(",") if g]
    unknown = sorted(set(names) - set(GRAPHS))
    if unknown:
        ap.error(f"unknown graphs {unknown}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_first_use_"))
    rows: list[dict] = []
    try:
        warm = tmp / "warm"
        warm.mkdir()
        if not args.quick:  # every kernel into one cache, untimed: the stand-ins until the cache counts as warm
            stand_ins = [g for g in GRAPHS if g.startswith("stand-in:")]
            if not any(run(spec_of(g, Path(args.datasets)), "warm-up", warm)["warm"] for g in stand_ins):
                print("note: the schemes on every stand-in left some kernel uncompiled: 'warm auto' may run torch")
        print(f"{'graph':<30} {'nodes+edges':>12} {'auto, cold':>10}  {'cold first/next':>16}  "
              f"{'warm torch first/next':>22}  {'warm auto first/next':>21}  compile first")
        for name in names:
            spec = spec_of(name, Path(args.datasets))
            if spec is None:
                print(f"{name:<30} (file absent)")
                continue
            runs = {}
            modes = [("auto", "cold"), *([] if args.quick else [("torch", "warm torch"), ("auto", "warm auto")]),
                     *([("numba", "compile")] if args.compile else [])]
            for mode, key in modes:
                cache = warm if key.startswith("warm") else tmp / f"cold-{len(rows)}-{key}"
                cache.mkdir(exist_ok=True)
                runs[key] = run(spec, mode, cache)
                if not key.startswith("warm"):
                    shutil.rmtree(cache)
            assert len({r["owner"] for r in runs.values()}) == 1, (name, runs)  # every backend: the same owners
            row = {"graph": name, "size": runs["cold"]["size"], "auto_cold": runs["cold"]["backend"], **runs}
            rows.append(row)
            cell = lambda k: f"{runs[k]['first_s']:7.2f}/{runs[k]['next_s']:.3f}" if k in runs else "-"  # noqa: E731
            print(f"{name:<30} {row['size']:>12,} {row['auto_cold']:>10}  {cell('cold'):>16}  "
                  f"{cell('warm torch'):>22}  "
                  f"{cell('warm auto') + (' ' + runs['warm auto']['backend'] if 'warm auto' in runs else ''):>21}  "
                  f"{cell('compile')}", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


if __name__ == "__main__":
    main()
