"""The suite's tiers and workers: the ``slow`` tier (tests/helpers/slow.py) -- a test is ``slow`` when it runs a
whole program (the command line, benchmarks, docs) or its code, the suite's functions it reaches or its fixtures
start processes; the rest is ``make test-fast`` -- and each xdist worker's own numba cache (tests/conftest.py)."""
from __future__ import annotations

import os
import subprocess
import types
from pathlib import Path

import pytest
import torch

from pyg_dynscale.training.launch import spawn
from tests.helpers.slow import ProcessStarters, is_slow, runs_a_program, starts_processes


def _rank(rank: int, world_size: int) -> int:
    return rank


def _two_ranks() -> list:  # never called here: read, not run
    return spawn(_rank, 2)


def _through_a_helper() -> list:
    return _two_ranks()


def _in_a_lambda() -> object:
    return lambda: subprocess.run(["true"], check=True)


def _import_inside() -> object:
    from tests.helpers.cli_jobs import run_cli

    return run_cli


class _Runner:
    def go(self) -> list:
        return _through_a_helper()


def _uses_the_runner() -> list:
    return _Runner().go()


def _tensor_math() -> float:
    return float(torch.ones(3).sum())


def _recursive(n: int) -> int:
    return 0 if n == 0 else _recursive(n - 1)


@pytest.mark.parametrize("fn", [_two_ranks, _through_a_helper, _in_a_lambda, _import_inside, _uses_the_runner])
def test_what_starts_processes_is_found(fn) -> None:
    assert ProcessStarters().reaches(fn)


@pytest.mark.parametrize("fn", [_tensor_math, _recursive, _rank])
def test_what_does_not_is_left_alone(fn) -> None:
    assert not ProcessStarters().reaches(fn)


def _item(obj, **fixtures) -> object:
    defs = {name: [types.SimpleNamespace(func=f)] for name, f in fixtures.items()}
    return types.SimpleNamespace(obj=obj, fixturenames=list(fixtures),
                                 _fixtureinfo=types.SimpleNamespace(name2fixturedefs=defs))


#: (a dict: the rule follows the suite's functions a test names, not the values of its data)
FIXTURES = {"job": _through_a_helper, "data": _recursive}


def test_a_fixture_that_starts_processes_makes_its_tests_slow() -> None:
    starters = ProcessStarters()
    assert starts_processes(_item(_tensor_math, job=FIXTURES["job"]), starters)
    assert not starts_processes(_item(_tensor_math, data=FIXTURES["data"]), starters)
    assert not starts_processes(_item(_tensor_math), starters)
    assert starts_processes(_item(FIXTURES["job"]), starters)  # the test's own code


def test_the_collected_suite_is_marked(request) -> None:
    # this test starts nothing: not slow; the session's own marking of a spawn-based test is checked by
    # running the rule on its function as collected
    assert request.node.get_closest_marker("slow") is None
    from tests.distributed import test_fast_spawn

    assert ProcessStarters().reaches(test_fast_spawn.test_an_unpicklable_function_fails_as_under_spawn)


def test_whole_programs_are_slow_by_their_folder(tmp_path) -> None:
    starters = ProcessStarters()
    for folder, slow in (("commands", True), ("benchmarks", True), ("docs", True), ("partition", False),
                         ("core", False)):
        item = _item(_tensor_math)
        item.path = tmp_path / "repo" / "tests" / folder / "test_x.py"
        assert runs_a_program(item) is slow and is_slow(item, starters) is slow, folder
    item = _item(FIXTURES["job"])
    item.path = tmp_path / "repo" / "tests" / "core" / "test_x.py"
    assert is_slow(item, starters)


def test_lanes_of_the_tests() -> None:
    pytest.importorskip("xdist")
    from tests.helpers.lanes import lane

    def item(path: str) -> object:
        it = _item(_tensor_math)
        it.path = Path("/repo") / path
        it.nodeid = path + "::test_x"
        return it

    assert lane(item("tests/distributed/test_a.py"), True) == "processes"
    assert lane(item("tests/commands/test_a.py"), True) == "processes"  # the command line's timeouts: one at a time
    assert lane(item("tests/docs/test_a.py"), True) == "programs"
    assert lane(item("tests/benchmarks/test_a.py"), True) == "programs"
    assert lane(item("tests/docs/test_a.py"), False) == "tests/docs/test_a.py"  # in-process: with its module


LANE_MODULE = '''
import os, subprocess, sys
from pathlib import Path

def _record(name):
    Path(os.environ["LANES_OUT"], name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))

def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    _record(__name__ + ".process")

def test_in_process():
    _record(__name__ + ".plain")
'''


def test_under_two_workers_the_process_tests_share_one_lane(tmp_path) -> None:
    """``-n 2 --dist loadgroup`` with the suite's hook (tests/conftest.py): the tests that start processes of
    four modules all run on one worker (spread by module they would share it by chance 1 in 8)."""
    pytest.importorskip("xdist")
    import os
    import sys

    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "conftest.py").write_text("from tests.conftest import (  # noqa: F401  (the lanes)\n"
                                       "    pytest_collection_modifyitems, pytest_configure, pytest_xdist_make_scheduler,\n)\n")
    for m in "abcd":
        (suite / f"test_lane_{m}.py").write_text(LANE_MODULE)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), LANES_OUT=str(out))
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadgroup", str(suite)], capture_output=True, text=True, cwd=suite, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {f.name: f.read_text() for f in out.iterdir()}
    assert len(workers) == 8 and set(workers.values()) <= {"gw0", "gw1"}, workers
    assert len({w for name, w in workers.items() if name.endswith(".process")}) == 1, workers


def test_each_xdist_worker_compiles_numba_kernels_into_a_cache_of_its_own():
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        pytest.skip("a serial run: numba's default cache beside the sources, one writer")
    cache = Path(os.environ["NUMBA_CACHE_DIR"])
    assert cache.name == worker and cache.parent.name == ".numba-cache"
    import numba

    assert Path(numba.config.CACHE_DIR) == cache  # set before numba read it
