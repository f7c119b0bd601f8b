"""How a command prints its report: one JSON line on stdout (``--json``), or text."""
from __future__ import annotations

import contextlib
import json
import sys
from typing import Callable


def print_report(as_json: bool, make: Callable[[], dict], text: Callable[[dict], str]) -> int:
    """Print ``make()``'s report as one JSON line (``as_json``: whatever ``make`` prints goes to
    stderr, so that stdout stays machine-readable) or as ``text(report)``; returns the exit code 0."""
    if as_json:
        with contextlib.redirect_stdout(sys.stderr):  # keep stdout machine-readable
            report = make()
        print(json.dumps(report, allow_nan=False))
    else:
        print(text(make()))
    return 0
