"""pyg_dynscale.training.surface: BaseTrainer's close (once, idempotent, also when the with-block raises) and
Metrics' deprecated float()."""
from __future__ import annotations

import pytest

from pyg_dynscale.training.surface import METRIC_NAMES, BaseTrainer, Metrics


class _Holder(BaseTrainer):
    def __init__(self) -> None:
        self.released = 0

    def _release(self) -> None:
        self.released += 1


def test_close_releases_once_and_is_idempotent():
    t = _Holder()
    assert not t.closed
    t.close()
    t.close()
    assert t.closed and t.released == 1
    BaseTrainer().close()  # nothing to release by default


def test_the_context_manager_closes_also_when_the_block_raises():
    with _Holder() as t:
        assert isinstance(t, _Holder) and not t.closed
    assert t.closed and t.released == 1
    with pytest.raises(ValueError, match="inside"):
        with _Holder() as u:
            raise ValueError("inside")  # not swallowed
    assert u.closed and u.released == 1


def test_float_of_metrics_warns_and_is_the_loss():
    m = Metrics(loss=0.25, mae=3.0)
    assert isinstance(m, dict) and m["mae"] == 3.0
    with pytest.warns(DeprecationWarning, match=r"evaluate\(\)\['loss'\]"):
        assert float(m) == 0.25
    assert METRIC_NAMES == ("loss", "mse", "mae", "auc", "ap", "mrr")


def test_a_numeric_format_of_metrics_warns_and_formats_the_loss():
    m = Metrics(loss=0.123456, mae=3.0)
    with pytest.warns(DeprecationWarning, match=r"'\.4f' is deprecated"):
        assert f"{m:.4f}" == "0.1235"
    assert f"{m}" == str({"loss": 0.123456, "mae": 3.0})  # no spec: the dict, no warning
