"""A benchmark script's ``main()`` run in the test process, as ``python benchmarks/<name>.py ARGS`` would run it.

The benchmark smoke tests (tests/benchmarks/) used to start a fresh interpreter per benchmark: an import of torch
and PyG each (~4 CPU s), more than most ``--quick`` runs themselves. Here ``main()`` runs with ``sys.argv`` as the
command line gives it, its ranks come from the suite's fork server (tests/helpers/fast_spawn.py), and what it sets
for the whole process (default dtype, threads, RNG states, ``sys.argv``, ``sys.path``, the working directory) is
put back after it. A benchmark that must not share the process (one that patches torch's functions, or hides CUDA
through the environment) keeps its subprocess.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """Whatever a benchmark's ``main()`` sets for the whole process, restored for the tests after it."""
    argv, path, cwd = list(sys.argv), list(sys.path), os.getcwd()
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    rng, np_rng = torch.random.get_rng_state(), np.random.get_state()
    try:
        yield
    finally:
        sys.argv[:], sys.path[:] = argv, path
        os.chdir(cwd)
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
        torch.random.set_rng_state(rng)
        np.random.set_state(np_rng)


def run_quick(capfd: Any, name: str, *args: str) -> str:
    """``python benchmarks/<name>.py ARGS`` in this process; what it printed on stdout (its ranks' too: ``capfd``
    captures at the file descriptor). Fails with the benchmark's output when it exits with a non-zero status."""
    capfd.readouterr()
    with process_state_kept():
        sys.argv[:] = [str(BENCHMARKS / f"{name}.py"), *args]
        sys.path.insert(0, str(BENCHMARKS))  # as `python benchmarks/x.py` has it; its ranks import it by name
        os.chdir(ROOT)
        try:
            status = importlib.import_module(name).main()  # None, 0, or the rows it printed
        except SystemExit as exc:  # argparse, or a script that exits with its status
            status = exc.code
    out, err = capfd.readouterr()
    failed = status is not None and isinstance(status, (int, str)) and status != 0
    assert not failed, (status, out[-2000:], err[-3000:])
    return out
