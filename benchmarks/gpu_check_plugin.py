"""pytest plugin of ``benchmarks/gpu_check.py``: every test's outcome as one JSON line, written the
moment it is known, so that a step killed at its timeout still reports what ran before, and
which test was running.

Loaded with ``-p benchmarks.gpu_check_plugin`` (the checkout is on ``PYTHONPATH``); writes to
the file named by ``$PYG_DYNSCALE_GPU_CHECK_RESULTS`` and does nothing without it. Lines:

* ``{"event": "start", "nodeid": ...}`` when a test starts,
* ``{"event": "result", "nodeid", "outcome": "passed" | "failed" | "error" | "skipped",
  "seconds", "message", "properties"}`` once per test (``properties``: what the test gave
  ``record_property``, e.g. the host syncs it counted on the GPU),
* ``{"event": "result", "nodeid": <module>, "outcome": "error"}`` for a module that failed to
  be collected.
"""
from __future__ import annotations

import json
import os
from typing import Any

import pytest

ENV = "PYG_DYNSCALE_GPU_CHECK_RESULTS"


def _write(record: dict[str, Any]) -> None:
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a") as f:  # one short line per write: appends of lines this size are not interleaved
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()


def _message(report: pytest.BaseReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):  # (file, line, reason)
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    if crash is not None:
        return str(crash.message).splitlines()[0][:300] if crash.message else ""
    text = report.longreprtext.strip().splitlines()
    return text[-1][:300] if text else ""


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _write({"event": "start", "nodeid": nodeid})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # one result per test: the call's; a setup that failed or skipped (no call follows); a teardown error
    if report.when == "call" or (report.when == "setup" and not report.passed) or \
            (report.when == "teardown" and report.failed):
        outcome = report.outcome if report.when == "call" or report.skipped else "error"
        _write({"event": "result", "nodeid": report.nodeid, "outcome": outcome, "when": report.when,
                "seconds": round(report.duration, 3), "message": "" if report.passed else _message(report),
                "properties": [[k, v] for k, v in report.user_properties]})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write({"event": "result", "nodeid": report.nodeid, "outcome": "error", "when": "collect", "seconds": 0.0,
                "message": _message(report), "properties": []})
