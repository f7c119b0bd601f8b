"""The modules that moved from pyg_dynscale.distributed to pyg_dynscale.training: their old import paths give the
moved module itself (not a copy) with a DeprecationWarning naming the new place; the package's re-exports of the
launch and checkpoint functions stay as they were, without a warning."""
from __future__ import annotations

import importlib
import sys
import warnings

import pytest

MOVES = [("checkpoint", "pyg_dynscale.training.checkpoint"), ("launch", "pyg_dynscale.training.launch"),
         ("failure", "pyg_dynscale.training.failure"), ("groups", "pyg_dynscale.training.ranks")]


@pytest.mark.parametrize("old, new", MOVES)
def test_the_old_path_imports_the_moved_module_with_a_warning(monkeypatch, old, new):
    import pyg_dynscale.distributed as package

    monkeypatch.delitem(sys.modules, f"pyg_dynscale.distributed.{old}", raising=False)  # as in a fresh process
    monkeypatch.delattr(package, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"moved to {new}"):
        module = importlib.import_module(f"pyg_dynscale.distributed.{old}")
    moved = importlib.import_module(new)
    assert module is moved and module.__spec__.name == new  # the moved module keeps its own spec
    monkeypatch.delitem(sys.modules, f"pyg_dynscale.distributed.{old}")
    monkeypatch.delattr(package, old)
    with pytest.warns(DeprecationWarning, match=f"moved to {new}"):
        exec(f"from pyg_dynscale.distributed import {old} as again", {})  # the attribute spelling warns too


def test_the_reexported_functions_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from pyg_dynscale.distributed import (CheckpointMismatchError, SpawnError, free_port, latest_checkpoint,
                                              load_checkpoint, save_checkpoint, spawn)
    from pyg_dynscale.training import checkpoint, launch

    assert spawn is launch.spawn and SpawnError is launch.SpawnError and free_port is launch.free_port
    assert (save_checkpoint, load_checkpoint, latest_checkpoint, CheckpointMismatchError) == (
        checkpoint.save_checkpoint, checkpoint.load_checkpoint, checkpoint.latest_checkpoint,
        checkpoint.CheckpointMismatchError)
