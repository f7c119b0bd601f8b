"""pyg_dynscale.training.traffic: the ByteLedger (running totals, epochs by mark/since, its state) and the
TrafficReport every trainer's traffic() returns."""
from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
import torch

from pyg_dynscale.training.traffic import ByteLedger, TrafficReport


def test_the_ledger_counts_by_kind_and_an_epoch_from_its_mark():
    ledger = ByteLedger(("gradients", "dispatch"))
    assert ledger.totals() == {"gradients": 0, "dispatch": 0} and ledger["features"] == 0
    ledger.add("gradients", 10)
    ledger.add_tensor("features", torch.zeros(3, 4, dtype=torch.float64))  # 96 bytes, no device read
    ledger.add("gradients", 5)
    assert ledger.totals() == {"gradients": 15, "dispatch": 0, "features": 96}
    ledger.mark()
    ledger.add("dispatch", 7)
    ledger.add("halo", 2)  # a kind first seen after the mark
    assert ledger.since() == {"gradients": 0, "dispatch": 7, "features": 0, "halo": 2}
    assert ledger.totals()["gradients"] == 15  # marking does not reset the running totals
    assert "gradients" in repr(ledger)


def test_the_ledgers_state_round_trips_totals_and_mark():
    ledger = ByteLedger()
    ledger.add("a", 3)
    ledger.mark()
    ledger.add("a", 4)
    state = json.loads(json.dumps(ledger.state_dict()))  # plain ints: a JSON or checkpoint value
    other = ByteLedger(("b",))
    other.load_state_dict(state)
    assert other.totals() == {"a": 7} and other.since() == {"a": 4}
    other.add("a", 1)
    assert ledger.since() == {"a": 4}  # the state is a copy
    ledger.add("a", 1)
    assert other.since() == ledger.since() == {"a": 5}


def test_a_report_computes_totals_unless_given_and_is_a_read_only_mapping():
    report = TrafficReport({"gradients": 8, "dispatch": 4}, {"gradients": 8, "dispatch": 6}, exchanges=3)
    assert report["measured"] == {"gradients": 8, "dispatch": 4, "total": 12}
    assert report["predicted"]["total"] == 14 and report.predicted is report["predicted"]
    assert report.measured["total"] == 12 and isinstance(report["measured"]["total"], int)
    assert isinstance(report, Mapping) and list(report) == ["measured", "predicted", "exchanges"]
    assert len(report) == 3 and report["exchanges"] == 3 and dict(report) == report.as_dict()
    with pytest.raises(TypeError):
        report["measured"] = {}  # read-only
    given = TrafficReport({"a": 1, "total": 100}, {"a": 2}, predicted_total=50)
    assert given["measured"]["total"] == 100 and given["predicted"]["total"] == 50  # given totals kept
    over = TrafficReport({"a": 1, "total": 100}, {}, measured_total=9)
    assert over["measured"] == {"a": 1, "total": 9} and over["predicted"] == {"total": 0}
    assert json.loads(json.dumps(report.as_dict()))["measured"]["total"] == 12
    assert "12 B" in repr(report)
