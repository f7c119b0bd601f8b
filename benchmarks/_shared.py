"""Where the benchmarks find the project's shared real data.

``$PYG_DYNSCALE_DATASETS`` if set, else ``../shared/datasets`` next to the
checkout (the layout of the team's machines and CI).
"""
from __future__ import annotations

import os
from pathlib import Path

DATASETS = Path(
    os.environ.get("PYG_DYNSCALE_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets")
)
