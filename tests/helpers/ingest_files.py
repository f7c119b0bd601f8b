"""What the chunked readers' tests share (tests/data/test_ingest_*.py): synthetic text files with
the features that make chunking hard (unsorted times with ties, comments and blank lines between
chunks, self-loops, fractional weights), exact comparisons with the in-memory loaders, and the
peak of numpy's allocations during a call."""
from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np
import torch


def write_edge_file(path: Path, n: int = 300, *, seed: int = 0, sorted_times: bool = False, sep: str = " ",
                    weights: bool = True, comments: bool = True) -> Path:
    """``n`` events ``src dst weight time`` over ~40 raw ids (sparse, large), times in [0, 1000) with
    ties, unsorted unless ``sorted_times``; ``%``/``#`` comments and blank lines sprinkled in."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(10 ** 6, size=40, replace=False)
    src, dst = ids[rng.integers(0, 40, n)], ids[rng.integers(0, 40, n)]
    dst[::17] = src[::17]  # self-loops
    t = rng.integers(0, 200, n) * 5.0 + rng.choice([0.0, 0.25], n)
    if sorted_times:
        t = np.sort(t)
    w = np.round(rng.normal(size=n), 3)
    lines = ["% header comment", "# another"] if comments else []
    for i in range(n):
        if comments and i % 23 == 5:
            lines.append("   # indented comment")
        if comments and i % 31 == 9:
            lines.append("")
        lines.append(sep.join([str(src[i]), str(dst[i])] + ([repr(float(w[i]))] if weights else []) + [repr(float(t[i]))]))
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_same_tensors(a, b, keys) -> None:
    for key in keys:
        x, y = getattr(a, key), getattr(b, key)
        assert x.dtype == y.dtype and x.shape == y.shape, (key, x.dtype, y.dtype, x.shape, y.shape)
        assert torch.equal(x, y), key


def peak_numpy_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes traced by tracemalloc (numpy's array allocations are traced) while ``fn`` runs."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def leftovers(directory: Path, keep=()) -> list[str]:
    """Entries of ``directory`` other than ``keep`` (a failed ingestion must leave no store,
    temporary or scratch directory)."""
    return sorted(e for e in os.listdir(directory) if e not in keep)
