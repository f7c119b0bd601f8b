"""The lanes of ``make test`` on two pytest-xdist workers (``-n 2 --dist loadgroup``).

Every test that starts processes runs in one lane, one after another on one worker as without xdist
("processes"; those of the docs and the benchmarks, which check no timing, in a lane of their own, "programs"):
no spawned job shares the two cores with another spawned job, so their timeouts mean what they meant. Every
other test runs with the tests of its module (its module's fixtures are built once) on whichever worker is free.

The workers collect the tests, so they know each test's lane (tests/helpers/slow.py reads its code); the
controller schedules, knowing only node ids. The workers write ``{node id: lane}`` into a folder the controller
made (:data:`ENV` names it), and the controller's scheduler (:class:`LaneScheduling`, xdist's scope scheduling
with these lanes as scopes, largest first) reads it once every worker has collected. (xdist's own
``xdist_group`` marks would do the same through a node id suffix that pytest 9 no longer lets a plugin set.)
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from xdist.scheduler import LoadScopeScheduling

#: the environment variable naming the folder the workers write their lanes into
ENV = "PYG_DYNSCALE_TEST_LANES"


def lane(item: Any, starts: bool) -> str:
    """A test's lane: "processes" or "programs" for a test that starts processes, else its module's path."""
    from tests.helpers.slow import runs_a_program

    if starts:
        return "programs" if runs_a_program(item) and Path(str(item.path)).parent.name in ("docs", "benchmarks") \
            else "processes"
    return item.nodeid.split("::")[0]


def make_folder() -> str:
    """The controller's folder for the workers' lanes (set in :data:`ENV` before the workers start)."""
    folder = tempfile.mkdtemp(prefix="pyg_dynscale_lanes_")
    os.environ[ENV] = folder
    return folder


def write(lanes: dict[str, str]) -> None:
    """A worker's ``{node id: lane}``, written whole (renamed into place) for the controller."""
    folder, worker = os.environ.get(ENV), os.environ.get("PYTEST_XDIST_WORKER")
    if not folder or not worker:
        return
    tmp = Path(folder) / f".{worker}.json"
    tmp.write_text(json.dumps(lanes))
    tmp.replace(Path(folder) / f"{worker}.json")


class LaneScheduling(LoadScopeScheduling):
    """xdist's scope scheduling (a scope runs whole on one worker; the scopes with the most tests first) with
    the lanes as scopes."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._lanes: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._lanes is None:
            self._lanes = {}
            for f in sorted(Path(os.environ.get(ENV, "/nonexistent")).glob("gw*.json")):
                self._lanes.update(json.loads(f.read_text()))
        return self._lanes.get(nodeid) or nodeid.split("::")[0]
