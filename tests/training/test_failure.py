"""``pyg_dynscale.training.failure`` without processes: the deadline logic that names a silent rank, on an
injected clock (no wall-clock asserts), over a real in-process c10d store (issue 38, item 6)."""
from __future__ import annotations

import pytest
import torch.distributed as dist

from pyg_dynscale.training import failure


class Clock:
    """A clock that moves only when slept on; ``on_sleep(now)`` runs after each sleep (a peer's beat, a
    failure published at a given time)."""

    def __init__(self, on_sleep=lambda now: None) -> None:
        self.now, self.on_sleep = 100.0, on_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.on_sleep(self.now)


@pytest.fixture
def store(monkeypatch):
    """One HashStore as both torchrun's agent store and the process group's (the keys are namespaced alike)."""
    s = dist.HashStore()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    monkeypatch.setenv(failure.ROUND_ENV, "r1")
    monkeypatch.setattr(failure, "_agent_store", lambda timeout=5.0: s)
    monkeypatch.setattr(failure, "_store", lambda: s)
    return s


def _beat(store, rank: int) -> None:
    store.add(failure._beat_key("beat", rank), 1)


def test_a_rank_whose_heartbeat_stands_still_is_named_after_the_window(store) -> None:
    for r in (1, 2):
        _beat(store, r)
    clock = Clock(lambda now: _beat(store, 1))  # rank 1 beats on, rank 2 stopped
    t0 = clock()
    found, silent = failure.diagnose_peers(0, 3, window=3.0, clock=clock, sleep=clock.sleep)
    assert found is None and silent == [2]
    assert 3.0 <= clock() - t0 < 3.0 + 0.06  # the window, one poll at most past it: not more, not less


def test_a_published_failure_ends_the_wait_when_it_appears(store) -> None:
    def on_sleep(now: float) -> None:
        _beat(store, 1)
        if now >= 101.0:
            failure.publish_failure(1, "RuntimeError: boom")

    clock = Clock(on_sleep)
    found, silent = failure.diagnose_peers(0, 2, window=3.0, clock=clock, sleep=clock.sleep)
    assert found == (1, "RuntimeError: boom") and silent == []
    assert 101.0 <= clock() < 101.0 + 0.06  # at once, not at the window's end


def test_every_peer_alive_is_nobody_silent(store) -> None:
    clock = Clock(lambda now: [_beat(store, r) for r in (1, 2)])
    assert failure.diagnose_peers(0, 3, window=3.0, clock=clock, sleep=clock.sleep) == (None, [])


def test_failure_of_others_waits_its_wait_on_the_clock(store) -> None:
    clock = Clock()
    assert failure.failure_of_others(0, 2, wait=0.5, clock=clock, sleep=clock.sleep) is None
    assert 100.5 <= clock() < 100.56


def test_a_store_that_never_saw_a_peer_is_a_lost_peer() -> None:
    """A rank stopped before it joined the process group: its peers' store wait times out (no collective ran)."""
    exc = dist.DistStoreError("wait timeout after 10000ms, keys: /pyg_dynscale/attempt_r/0//cpu//0/1")
    assert failure.is_transport_error(exc)
    assert not failure.is_transport_error(ValueError("--lr must be > 0"))


def test_the_launcher_reports_when_its_pid_is_set(monkeypatch) -> None:
    monkeypatch.delenv(failure.LAUNCHER_PID_ENV, raising=False)
    assert not failure.launcher_reports()  # a plain torchrun: each rank says its own line
    monkeypatch.setenv(failure.LAUNCHER_PID_ENV, "1234")
    assert failure.launcher_reports()
