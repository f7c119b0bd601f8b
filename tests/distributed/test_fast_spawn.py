"""The suite's fork server (tests/helpers/fast_spawn.py) gives a rank what multiprocessing's "spawn" gives it: the
parent's environment, working directory and sys.path at the time of the call, a fresh import of the test
module, pickled arguments -- so the tests that use it protect what they protected under "spawn"."""
from __future__ import annotations

import os
import sys

import pytest

from pyg_dynscale.distributed import SpawnError, spawn

STATE = {"changed_in_the_parent": False}


def _what_the_rank_sees(rank: int, world_size: int, arg: object) -> dict:
    return {"env": os.environ.get("PYG_DYNSCALE_TEST_PROBE"), "cwd": os.getcwd(), "path": list(sys.path),
            "state": dict(STATE), "arg": arg}


def test_a_rank_gets_the_parents_env_cwd_and_path_at_the_call(monkeypatch, tmp_path) -> None:
    from pyg_dynscale.training import launch

    import torch

    if os.environ.get("PYG_DYNSCALE_TEST_START_METHOD") != "spawn" and not torch.cuda.is_available():
        assert hasattr(launch.mp, "_real"), "tests/conftest.py did not install the fork server"
    monkeypatch.setenv("PYG_DYNSCALE_TEST_PROBE", "set after the server started")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "on-the-path"))
    monkeypatch.setitem(STATE, "changed_in_the_parent", True)
    res = spawn(_what_the_rank_sees, 2, {"a": 1}, timeout=60)
    for r in res:
        assert r["env"] == "set after the server started"
        assert r["cwd"] == str(tmp_path)
        assert r["path"][0] == str(tmp_path / "on-the-path")
        assert r["state"] == {"changed_in_the_parent": False}  # the module imported afresh, as under "spawn"
        assert r["arg"] == {"a": 1}


def test_a_rank_does_not_see_later_changes_or_the_test_modules_of_the_parent() -> None:
    res = spawn(_what_the_rank_sees, 2, None, timeout=60)
    assert all(r["env"] is None for r in res)  # the previous test's variable is gone in the parent: here too
    server_modules = spawn(_loaded_test_modules, 2, timeout=60)[0]
    assert "tests.distributed.test_fast_spawn" in server_modules  # fn's own module, imported by the rank to unpickle fn
    # the parent imported every collected test module; the rank only its own
    others = [m for m in server_modules if m.rsplit(".", 1)[-1].startswith("test_") and m != __name__]
    assert not others, server_modules


def _loaded_test_modules(rank: int, world_size: int) -> list:
    return sorted(m for m in sys.modules if m.startswith("tests."))


def test_an_unpicklable_function_fails_as_under_spawn() -> None:
    with pytest.raises(Exception) as info:
        spawn(lambda rank, world_size: rank, 2, timeout=30)
    assert not isinstance(info.value, SpawnError)  # refused in the parent, before any rank ran
    assert "pickle" in f"{type(info.value).__name__}: {info.value}".lower()
