"""pyg_dynscale.data.normalize: the constant-series check made where series are standardized."""
from __future__ import annotations

import numpy as np
import pytest

from pyg_dynscale.data.normalize import check_series_vary
from pyg_dynscale.errors import SignalValidationError


def test_a_constant_series_is_named_with_its_value_and_block_offset():
    a = np.array([[1.0, 4.0, 0.5], [2.0, 4.0, 0.5], [3.0, 4.0, 0.25]])
    with pytest.raises(SignalValidationError, match=r"field 'y': the series of node 11 is constant \(4 at all 3 "
                       r"time steps\).*Fix: drop that series") as err:
        check_series_vary(a, "y", lambda s: f"node {s}", first=10)  # column 1 of a block starting at series 10
    assert err.value.field == "y"


def test_varying_series_nan_and_empty_input_pass():
    check_series_vary(np.array([[1.0, 0.0], [1.0 + 1e-12, 2.0]]), "y", str)  # any difference varies
    check_series_vary(np.array([[np.nan, 1.0], [np.nan, 2.0]]), "y", str)  # NaN in the file: its own message
    check_series_vary(np.zeros((0, 3)), "y", str)
