"""Datasets shipped inside the package, so that the default job runs offline.

Only England COVID (MIT-licensed, PyGT's ``england_covid.json``, ~320 KB
gzipped) is embedded; see ``pyg_dynscale/data/embedded/LICENSE-england_covid.txt``.
"""
from __future__ import annotations

import hashlib

from ..signal import DynamicGraphSignal
from ._common import embedded_england_covid_path, read_bytes
from .pygt_json import load_pygt_json

__all__ = ["ENGLAND_COVID_SHA256", "embedded_england_covid_path", "embedded_england_covid_sha256", "load_england_covid"]

#: SHA-256 of the uncompressed JSON (identical to PyGT's file at commit adefe44).
ENGLAND_COVID_SHA256 = "497056cc4585b58951fd5cd17554fe0c535f68ea0c907a5b5727ae30e3913450"


def embedded_england_covid_sha256() -> str:
    """SHA-256 of the embedded file's uncompressed bytes (for integrity checks)."""
    return hashlib.sha256(read_bytes(embedded_england_covid_path())).hexdigest()


def load_england_covid(lags: int = 8) -> DynamicGraphSignal:
    r"""England COVID from the copy embedded in the package (no download).

    Exactly the snapshots of PyGT's ``EnglandCovidDatasetLoader().get_dataset(lags)``:
    129 regions, ``61 - lags`` daily snapshots with the day's weighted mobility
    edges, :math:`X_t \in \mathbb{R}^{129 \times \mathrm{lags}}` the standardized
    case counts of days :math:`t .. t+\mathrm{lags}-1` and :math:`y_t` those of
    day :math:`t + \mathrm{lags}`.
    """
    return load_pygt_json(embedded_england_covid_path(), "england_covid", lags=lags)
