"""Shared fixtures: small dynamic graphs with changing vertex sets."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from pyg_dynscale import DynamicGraphSignal

# Each pytest-xdist worker, with the processes it starts, keeps numba's compiled kernels in a cache directory of
# its own (NUMBA_CACHE_DIR, read when numba is imported): two workers writing one kernel's cache at once were
# seen to leave an index that numba then loaded into a segmentation fault (docs/partitioning.md's first block
# and notebook 02, reproducible until the cache was cleared). One writer per directory, as in a serial run.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _XDIST_WORKER and "NUMBA_CACHE_DIR" not in os.environ:
    os.environ["NUMBA_CACHE_DIR"] = str(Path(__file__).resolve().parents[1] / ".numba-cache" / _XDIST_WORKER)

from tests.helpers.datasets import (  # noqa: F401  (the cap on real-dataset tests: its hooks)
    pytest_runtest_logreport, pytest_runtest_makereport, pytest_sessionfinish, pytest_terminal_summary,
)
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.slow import ProcessStarters, runs_a_program, starts_processes

# torch and pyg_dynscale are imported where they are used: a pytest session that only imports the helpers
# (tests/data/test_dataset_stand_ins.py starts four) does not pay for them


@pytest.fixture
def dyn_signal() -> DynamicGraphSignal:
    return make_dynamic_signal()


@pytest.fixture
def static_signal() -> DynamicGraphSignal:
    from pyg_dynscale import DynamicGraphSignal

    rng = np.random.default_rng(1)
    ei = np.array([[0, 1, 2, 3], [1, 2, 3, 0]])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    feats = [rng.standard_normal((4, 2)) for _ in range(6)]
    targets = [rng.standard_normal(4) for _ in range(6)]
    return DynamicGraphSignal(ei, w, feats, targets)


def pytest_configure(config: pytest.Config) -> None:
    import torch

    torch.manual_seed(0)
    # the bytecode of the package, the tests and the benchmarks, written once (a no-op when it is current): under
    # PYTHONDONTWRITEBYTECODE=1 each process the suite starts (CLI jobs and their ranks, benchmarks, notebook
    # kernels; ~150 of them) would compile them from source again, ~0.6 s each
    import compileall

    root = Path(__file__).resolve().parents[1]
    for folder in ("pyg_dynscale", "tests", "benchmarks"):
        compileall.compile_dir(str(root / folder), quiet=2)
    if config.getoption("dist", "no") == "loadgroup" and not os.environ.get("PYTEST_XDIST_WORKER"):
        from tests.helpers.lanes import make_folder

        make_folder()  # before the workers start: they inherit where to write their lanes
    config.addinivalue_line("markers", "real_spawn: spawn() starts its ranks with multiprocessing's real 'spawn' "
                                       "start method, not the suite's fork server (tests/helpers/fast_spawn.py)")
    # not where CUDA is visible: a rank forked from a server whose imports touched the CUDA driver could not use it
    if os.environ.get("PYG_DYNSCALE_TEST_START_METHOD", "forkserver") != "spawn" and not torch.cuda.is_available():
        from pyg_dynscale.training import launch
        from tests.helpers.fast_spawn import Contexts

        launch.mp = Contexts(launch.mp)  # spawn()'s ranks forked from a server that imported torch & co. once


@pytest.hookimpl(tryfirst=True)  # before -m selects by markers
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """``slow``: every test that starts processes or runs a whole program (tests/helpers/slow.py); in an xdist
    worker of ``make test`` (``-n 2 --dist loadgroup``), each test's lane for the controller (tests/helpers/lanes.py)."""
    starters = ProcessStarters()
    in_lanes = bool(os.environ.get("PYTEST_XDIST_WORKER")) and getattr(config.option, "loadgroup", False)
    lanes = {}
    for item in items:
        starts = starts_processes(item, starters)
        if item.get_closest_marker("slow") is None and (starts or runs_a_program(item)):
            item.add_marker(pytest.mark.slow)
        if in_lanes:
            from tests.helpers.lanes import lane

            lanes[item.nodeid] = lane(item, starts)
    if in_lanes:
        from tests.helpers.lanes import write

        write(lanes)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup``: the suite's lanes (tests/helpers/lanes.py)."""
    from tests.helpers.lanes import ENV, LaneScheduling

    if config.getoption("dist", "no") == "loadgroup" and os.environ.get(ENV):
        return LaneScheduling(config, log)
    return None


@pytest.fixture
def one_thread():
    """One intra-op thread for tests of tiny ops: more threads than free cores on a busy machine make
    every op spin-wait (~100x slower); the count is restored after the test."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _real_spawn(request: pytest.FixtureRequest):
    """Tests marked ``real_spawn``: spawn() with multiprocessing's own 'spawn' start method."""
    from pyg_dynscale.training import launch

    if request.node.get_closest_marker("real_spawn") is None or not hasattr(launch.mp, "_real"):
        yield
        return
    fast = launch.mp
    launch.mp = fast._real
    try:
        yield
    finally:
        launch.mp = fast


@pytest.fixture(scope="session")
def cli_uninterrupted_run(tmp_path_factory):
    """tests/commands/test_cli_train.py's uninterrupted ``--nproc 2`` job (its report and checkpoint folder), run once for the
    tests of that module and for tests/commands/test_cli_restart.py, which resumes the same job after a kill."""
    from tests.helpers.cli_jobs import uninterrupted_run

    return uninterrupted_run(tmp_path_factory)


@pytest.fixture(autouse=True)
def _default_dtype_unchanged():
    """A test that leaves torch's default dtype changed breaks the ones after it: fail it instead."""
    import torch

    before = torch.get_default_dtype()
    yield
    after = torch.get_default_dtype()
    torch.set_default_dtype(before)
    assert after == before, f"the test left torch's default dtype at {after} (was {before})"


