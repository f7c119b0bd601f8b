"""How a command prints its report: one JSON line on stdout (``--json``), or text."""
from __future__ import annotations

import contextlib
import json
import math
import sys
from typing import Any, Callable


def print_report(as_json: bool, make: Callable[[], dict], text: Callable[[dict], str]) -> int:
    """Print ``make()``'s report as one JSON line (``as_json``: whatever ``make`` prints goes to
    stderr, so that stdout stays machine-readable) or as ``text(report)``; returns the exit code 0."""
    if as_json:
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout machine-readable
            report = make()
        print(report_json(report))
    else:
        print(text(make()))
    return 0


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, :math:`\\pm\\infty`) replaced by ``None``, through dicts,
    lists and tuples: JSON has no NaN, and a metric that is undefined (no positive pair in a split) is
    ``null`` in the report."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def report_json(report: dict) -> str:
    """``report`` as one line of strict JSON (non-finite floats as ``null``: :func:`json_safe`)."""
    return json.dumps(json_safe(report), allow_nan=False)
