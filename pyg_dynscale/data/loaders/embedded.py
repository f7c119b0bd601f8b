"""Datasets shipped inside the package, so that the default job runs offline.

Only England COVID (MIT-licensed, PyGT's ``england_covid.json``, ~320 KB
gzipped) is embedded; see ``pyg_dynscale/data/embedded/LICENSE-england_covid.txt``.
"""
from __future__ import annotations

import hashlib
import warnings
from typing import Any

from ..signal import DynamicGraphSignal
from ._common import embedded_england_covid_path, read_bytes
from .pygt_json import LAGS_RENAMED, load_pygt_json

__all__ = ["ENGLAND_COVID_SHA256", "embedded_england_covid_path", "embedded_england_covid_sha256", "load_england_covid"]

#: SHA-256 of the uncompressed JSON (identical to PyGT's file at commit adefe44).
ENGLAND_COVID_SHA256 = "497056cc4585b58951fd5cd17554fe0c535f68ea0c907a5b5727ae30e3913450"


def embedded_england_covid_sha256() -> str:
    """SHA-256 of the embedded file's uncompressed bytes (for integrity checks)."""
    return hashlib.sha256(read_bytes(embedded_england_covid_path())).hexdigest()


def load_england_covid(feature_lags: int = 8, **deprecated: Any) -> DynamicGraphSignal:
    r"""England COVID from the copy embedded in the package (no download).

    Exactly the snapshots of PyGT's ``EnglandCovidDatasetLoader().get_dataset(lags)``
    with :math:`F` = ``feature_lags`` (PyGT's ``lags``; ``lags=`` works for one
    release with a :class:`DeprecationWarning`): 129 regions, ``61 - F`` daily
    snapshots with the day's weighted mobility edges,
    :math:`X_t \in \mathbb{R}^{129 \times F}` the standardized case counts of
    days :math:`t .. t+F-1` and :math:`y_t` those of day :math:`t + F`.
    """
    if deprecated and set(deprecated) != {"lags"}:
        raise TypeError(f"load_england_covid() got an unexpected keyword argument {sorted(set(deprecated) - {'lags'})[0]!r}")
    if "lags" in deprecated:  # PyGT's spelling: one release with a warning
        warnings.warn(LAGS_RENAMED.format(owner="load_england_covid"), DeprecationWarning, stacklevel=2)
        feature_lags = deprecated["lags"]
    return load_pygt_json(embedded_england_covid_path(), "england_covid", feature_lags=feature_lags)
