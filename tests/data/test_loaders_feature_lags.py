"""The PyGT loaders' feature lags are ``feature_lags=`` (issue 38, item 1: a window's ``lags`` is
``WindowTrainer``'s); PyGT's spelling ``lags=`` loads the same signal for one release with a
:class:`DeprecationWarning` naming the new keyword."""
from __future__ import annotations

import warnings

import pytest

from pyg_dynscale.data.loaders import (DATASET_OPTIONS, embedded_england_covid_path, load, load_england_covid,
                                       load_pygt_json)
from pyg_dynscale.errors import SignalValidationError


def test_feature_lags_stack_that_many_raw_steps() -> None:
    three = load_pygt_json(embedded_england_covid_path(), feature_lags=3)
    assert three.num_node_features == 3 and three.num_snapshots == 61 - 3
    assert load_england_covid(feature_lags=3).equals(three)
    assert load("england_covid", feature_lags=3).equals(three)
    assert load_england_covid().num_node_features == DATASET_OPTIONS["england_covid"]["feature_lags"] == 8


@pytest.mark.parametrize("call", [
    lambda: load_pygt_json(embedded_england_covid_path(), lags=3),
    lambda: load_england_covid(lags=3),
    lambda: load("england_covid", lags=3),
])
def test_lags_is_deprecated_and_loads_the_same(call) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        signal = call()
    deprecations = [w for w in seen if issubclass(w.category, DeprecationWarning) and "feature_lags=" in str(w.message)]
    assert len(deprecations) == 1, [str(w.message) for w in seen]
    assert deprecations[0].filename == __file__  # it points at the caller's line
    assert signal.equals(load_england_covid(feature_lags=3))


def test_both_spellings_and_bad_values() -> None:
    with pytest.raises(TypeError, match="pass only feature_lags="):
        load_pygt_json(embedded_england_covid_path(), lags=3, feature_lags=3)
    with pytest.raises(SignalValidationError, match="'feature_lags': is 0"):
        load_pygt_json(embedded_england_covid_path(), feature_lags=0)
    with pytest.raises(TypeError, match="'lag'"):
        load_england_covid(lag=3)
