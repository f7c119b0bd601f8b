"""Every partition scheme's output, pinned: a SHA-256 of each partition's arrays on the shared datasets and on
their committed stand-ins, compared with tests/fixtures/partition_fingerprints.json (issue 39: the partitioner is
being restructured -- stages moved, twin kernels removed -- and its partitions must stay bit-identical).

Cases (:data:`CASES`): PSS / PTS / PSS-TS (plain, balanced, PTS with locality), PGC with its main option
combinations (multi-start, DGC's single start, without FM, temporal coarsening, DySAT's weights, effort="fast",
the "vertices" workload, balance="rounds", the torch label-propagation backend, a bare weight pair, another seed
and cap), ``scheme="auto"``, and the event-stream partitioners of :mod:`pyg_dynscale.ctdg.memory_partition` (range,
interval, Re-FlexBiCut) on requests made here from the events (:func:`event_requests`), so that only
the partitioners' code decides their hashes (not ctdg's pre-sampling).

The stand-ins (tests/fixtures/datasets, always present: a clone alone checks something) and the real files of
../shared/datasets (skipped where absent) have separate entries. Each entry also stores the input signal's
fingerprint: a loader that reads a file differently fails with its own message, not as a changed partition.

Regenerate (only when a partition is *meant* to change, and say why in the commit)::

    OMP_NUM_THREADS=1 .venv/bin/python -m tests.partition.test_fingerprints --write
"""
from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest
import torch

from tests.helpers.datasets import SHARED_DATASETS, real_dataset_file, stand_in_file

FINGERPRINTS = Path(__file__).resolve().parents[1] / "fixtures" / "partition_fingerprints.json"

#: the files partitioned and how to read them (edge lists: weekly snapshots). Sized so that every case on every
#: file costs about 30 s of one core (numba kernels warm; the torch backend costs ~2x on the larger files)
DATASETS = {
    "pygt/england_covid.json": {},
    "pygt/chickenpox.json": {},
    "pygt/pedalme_london.json": {},
    "snap/CollegeMsg.txt": {"window": "7d"},
    "pygt/twitter_tennis_rg17.json": {},
    "snap/email-Eu-core-temporal.txt.gz": {"window": "2d"},  # the stand-in's 4 weeks: 14 snapshots for PSS
    "snap/sx-mathoverflow.txt.gz": {"window": "90d", "stand-in window": "7d"},  # the stand-in spans 10 weeks
}
#: the files whose events feed the event-stream partitioners (chronological edge lists)
EVENT_DATASETS = ("snap/CollegeMsg.txt", "snap/email-Eu-core-temporal.txt.gz")
PARTS = 4
#: trainers of the event-stream cases: two, so that the stand-ins' ~50 vertices get interval's default
#: granularity above 1 (min(8, N // 8M))
EVENT_PARTS = 2
IN_CHANNELS, HIDDEN = 4, 32


@functools.lru_cache(maxsize=None)
def patterns() -> dict[str, Any]:
    from pyg_dynscale.partition import DependencyPattern

    return {
        # DGC's T-GCN (three 2-layer GCNs): a spatial edge outweighs a temporal one, no temporal coarsening
        "tgcn2": DependencyPattern.preset("tgcn", IN_CHANNELS, HIDDEN, gcn_layers=2),
        # PyGT's one-layer T-GCN: temporal edges heavier, coarsen="auto" contracts segments
        "tgcn": DependencyPattern.preset("tgcn", IN_CHANNELS, HIDDEN),
        # temporal attention: per-edge temporal weights j + 1
        "dysat": DependencyPattern.preset("dysat", IN_CHANNELS, HIDDEN),
    }


def _pgc(pattern: str = "tgcn2", **opts: Any) -> Callable:
    def run(signal):
        from pyg_dynscale.partition.pgc.pipeline import partition_pgc

        pat = patterns()[pattern] if pattern in patterns() else (1.0, 1.0)
        return partition_pgc(signal, PARTS, pat, **opts)
    return run


def _scheme(name: str, **opts: Any) -> Callable:
    def run(signal):
        from pyg_dynscale.partition import partition

        return partition(signal, name, PARTS, patterns()["tgcn2"], **opts)
    return run


#: snapshot-graph cases: name -> partition of a signal
CASES: dict[str, Callable] = {
    "pss": _scheme("pss"),
    "pss-balanced": _scheme("pss", balanced=True),
    "pts": _scheme("pts"),
    "pts-balanced": _scheme("pts", balanced=True),
    "pts-locality": _scheme("pts", locality=True),
    "pss-ts": _scheme("pss-ts"),
    "pss-ts-balanced": _scheme("pss-ts", balanced=True),
    "pgc": _pgc(),
    "pgc-single-start": _pgc(starts=("lp",)),
    "pgc-no-fm": _pgc(fm_tries=0),
    "pgc-coarsened": _pgc("tgcn"),
    "pgc-dysat": _pgc("dysat"),
    "pgc-fast": _pgc(effort="fast"),
    "pgc-vertices": _pgc(workload="vertices"),
    "pgc-rounds": _pgc(balance="rounds"),
    "pgc-torch": _pgc(backend="torch"),
    "pgc-weight-pair": _pgc("pair"),
    "pgc-seed1-cpp8-slack5": _pgc(seed=1, chunks_per_part=8, slack=0.05),
    "auto": _scheme("auto"),
}

#: event-stream cases: name -> owner from (num_nodes, requests)
EVENT_CASES: dict[str, Callable] = {
    "events-range": lambda n, req: _vertices("range", n, req),
    "events-interval": lambda n, req: _vertices("interval", n, req),
    "events-interval1": lambda n, req: _vertices("interval", n, req, interval=1),
    "events-flexbicut": lambda n, req: _vertices("flexbicut", n, req),
    "events-flexbicut-slack0": lambda n, req: _vertices("flexbicut", n, req, slack=0.0, max_rounds=5),
}


def _vertices(method: str, n: int, requests: torch.Tensor, **opts: Any) -> torch.Tensor:
    from pyg_dynscale.ctdg.memory_partition import partition_vertices

    return partition_vertices(method, n, EVENT_PARTS, requests, **opts)


def array_digest(**arrays: Optional[torch.Tensor]) -> str:
    """SHA-256 of named int64 arrays (name, length, little-endian bytes; ``None`` hashed as absent)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = arrays[name]
        h.update(name.encode())
        if a is None:
            h.update(b"-")
            continue
        x = np.ascontiguousarray(a.detach().cpu().numpy().astype("<i8", copy=False))
        h.update(str(x.size).encode())
        h.update(x.tobytes())
    return h.hexdigest()


def partition_digest(part: Any) -> str:
    """Every array of a :class:`~pyg_dynscale.partition.Partition` (owner, time_owner, chunk) and its part count."""
    return array_digest(owner=part.owner, time_owner=part.time_owner, chunk=part.chunk,
                        num_parts=torch.tensor([part.num_parts]))


@functools.lru_cache(maxsize=None)
def load_signal(path: str, window: Optional[str]):
    from pyg_dynscale.data.loaders import load

    return load(path, window=window) if window else load(path)


def event_requests(src: torch.Tensor, dst: torch.Tensor, num_nodes: int, batch: int = 50) -> torch.Tensor:
    """``[3, R]`` (trainer, vertex, count) rows of an epoch in which trainer ``t`` takes the ``t``-th of every
    ``EVENT_PARTS`` chronological batches of ``batch`` events and asks for both endpoints of each of its events (a
    stand-in for ctdg.presample's requests that depends on nothing outside this file)."""
    trainer = (torch.arange(src.numel()) // batch) % EVENT_PARTS
    key = torch.cat([trainer * num_nodes + src, trainer * num_nodes + dst])
    pairs, counts = torch.unique(key, return_counts=True)
    return torch.stack([pairs // num_nodes, pairs % num_nodes, counts])


@functools.lru_cache(maxsize=None)
def load_events(path: str) -> tuple[int, torch.Tensor]:
    """``(num_nodes, requests)`` of a whitespace-separated ``SRC DST TIME`` edge list read as events (read
    here, not by the package's loaders: only partition/ code may decide these digests), sorted by time
    (stable), ids compacted in sorted order."""
    import gzip

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = np.loadtxt(f, dtype=np.int64, usecols=(0, 1, 2), ndmin=2, comments=("#", "%"))
    rows = rows[np.argsort(rows[:, 2], kind="stable")]
    ids, inverse = np.unique(rows[:, :2], return_inverse=True)
    inverse = torch.from_numpy(inverse.reshape(-1, 2).astype(np.int64))
    return int(ids.size), event_requests(inverse[:, 0].contiguous(), inverse[:, 1].contiguous(), int(ids.size))


def signal_digest(signal: Any) -> str:
    return signal.fingerprint()


def compute(source: str, rel: str, path: Path, only: Optional[str] = None) -> dict[str, str]:
    """``{case: digest}`` of one file (``"input"``: the signal's or the events' own digest)."""
    out: dict[str, str] = {}
    if rel in DATASETS:
        opts = DATASETS[rel]
        signal = load_signal(str(path), opts.get(f"{source} window", opts.get("window")))
        out["input"] = signal_digest(signal)
        for name, run in CASES.items():
            if only is None or name == only:
                out[name] = partition_digest(run(signal))
    if rel in EVENT_DATASETS:
        n, req = load_events(str(path))
        out["events-input"] = array_digest(requests=req)
        for name, run in EVENT_CASES.items():
            if only is None or name == only:
                out[name] = array_digest(owner=run(n, req))
    return out


def files() -> list[str]:
    return list(dict.fromkeys([*DATASETS, *EVENT_DATASETS]))


def stored() -> dict[str, dict[str, str]]:
    return json.loads(FINGERPRINTS.read_text())["fingerprints"]


def _compare(key: str, got: dict[str, str]) -> None:
    want = stored()[key]
    assert set(got) == set(want), f"{key}: cases {sorted(set(got) ^ set(want))} added or missing in the stored JSON"
    assert got.get("input") == want.get("input") and got.get("events-input") == want.get("events-input"), (
        f"{key}: the INPUT changed (a loader reads the file differently), not necessarily a partition")
    changed = sorted(name for name in want if got[name] != want[name])
    assert not changed, f"{key}: partitions changed for {changed} (issue 39: partitions must stay bit-identical)"


@pytest.mark.parametrize("rel", files())
@pytest.mark.parametrize("kernels", ["torch", "numba"])
def test_stand_in_partitions_unchanged(rel, kernels):
    """Every case on the committed stand-in of ``rel``: runs in a clone without ../shared. Under each backend
    against the same stored digests (bit-identity): ``"auto"`` would pick torch for these small graphs on a cold
    numba cache and numba on a warm one, so the default alone covers one of the two, depending on the machine."""
    from pyg_dynscale.partition.compiled.backend import HAVE_NUMBA, use_backend

    if kernels == "numba" and not HAVE_NUMBA:
        pytest.skip("numba not installed")
    with use_backend(kernels):
        _compare(f"stand-in:{rel}", compute("stand-in", rel, stand_in_file(rel)))


def test_shared_dataset_partitions_unchanged():
    """Every case on the real shared files present (one test: the real files' count is capped,
    tests/helpers/datasets.py); skips only when none is there."""
    present = [rel for rel in files() if (SHARED_DATASETS / rel).is_file()]
    if not present:
        real_dataset_file(files()[0])  # skips, naming the dataset
    for rel in present:
        _compare(f"shared:{rel}", compute("shared", rel, real_dataset_file(rel)))


def test_a_changed_owner_changes_the_digest():
    """The digest sees one vertex-time node moved to another rank, and a changed chunk id."""
    from pyg_dynscale.partition import Partition

    owner = torch.tensor([0, 0, 1, 1, 2, 3], dtype=torch.long)
    chunk = torch.tensor([0, 0, 1, 1, 2, 3], dtype=torch.long)
    base = partition_digest(Partition("pgc", 4, owner.clone(), chunk=chunk.clone()))
    moved = owner.clone()
    moved[2] = 0
    assert partition_digest(Partition("pgc", 4, moved, chunk=chunk.clone())) != base
    rechunked = chunk.clone()
    rechunked[5] = 2
    assert partition_digest(Partition("pgc", 4, owner.clone(), chunk=rechunked)) != base
    assert partition_digest(Partition("pgc", 4, owner.clone(), chunk=chunk.clone())) == base


def write(keys: Optional[list[str]] = None) -> None:
    """Recompute and store the fingerprints (all files, stand-ins and the shared files present)."""
    import time

    data = {"fingerprints": {}}
    if FINGERPRINTS.is_file():
        data = json.loads(FINGERPRINTS.read_text())
    for rel in files():
        for source, path in (("stand-in", stand_in_file(rel)), ("shared", SHARED_DATASETS / rel)):
            key = f"{source}:{rel}"
            if keys and key not in keys or not path.is_file():
                continue
            t0 = time.process_time()
            data["fingerprints"][key] = compute(source, rel, path)
            print(f"{key}: {len(data['fingerprints'][key])} digests, {time.process_time() - t0:.1f} s CPU",
                  file=sys.stderr)
    data["note"] = ("sha256 of each partition's owner / time_owner / chunk arrays (tests/partition/"
                    "test_fingerprints.py); generated from partition/ at commit be115c3 (issue 39's start)")
    FINGERPRINTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if "--write" in sys.argv:
        write([a for a in sys.argv[1:] if a != "--write"] or None)
    else:
        print(__doc__)
