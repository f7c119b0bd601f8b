"""The modules that moved from pyg_dynscale.partition.algorithms into the stage folders (issue 39): each old import
path gives the moved module itself (not a copy: patching it patches what the package uses) with a
DeprecationWarning naming the new place, and nothing in the package or its tests still imports the old path."""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

import pyg_dynscale.partition as package

ROOT = Path(__file__).resolve().parents[2]
OLD = "pyg_dynscale.partition.algorithms"


def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a fresh process: the old package and its submodule entries not imported yet."""
    for name in [m for m in sys.modules if m == OLD or m.startswith(OLD + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(package, "algorithms", raising=False)


def test_the_old_paths_are_the_moved_modules_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh(monkeypatch)
    with pytest.warns(DeprecationWarning, match=r"pgc -> pgc\.pipeline"):
        old = importlib.import_module(f"{OLD}.pgc")
    moved = importlib.import_module("pyg_dynscale.partition.pgc.pipeline")
    assert old is moved and old.__spec__.name == "pyg_dynscale.partition.pgc.pipeline"
    from pyg_dynscale.partition.algorithms import MOVED

    for name, new in MOVED.items():
        module = importlib.import_module(f"{OLD}.{name}")
        assert module is importlib.import_module(f"pyg_dynscale.partition.{new}"), name
    # the attribute spelling gives the same module
    exec(f"from {OLD} import workload as w; import pyg_dynscale.partition.costs.workload as c; assert w is c", {})


def test_every_moved_name_still_resolves_from_the_old_module(monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh(monkeypatch)
    with pytest.warns(DeprecationWarning):
        from pyg_dynscale.partition.algorithms.pgc import partition_pgc
        from pyg_dynscale.partition.algorithms.workload import LinearWorkload
    assert partition_pgc is package.partition_pgc and LinearWorkload is package.LinearWorkload


def test_nothing_in_the_repository_imports_the_old_paths() -> None:
    pattern = re.compile(r"partition\.algorithms\b|from \.+algorithms\b")
    allowed = {ROOT / "pyg_dynscale/partition/algorithms/__init__.py", Path(__file__).resolve()}
    offenders = [str(p.relative_to(ROOT)) for folder in ("pyg_dynscale", "tests", "benchmarks", "examples")
                 for p in sorted((ROOT / folder).rglob("*.py*")) if p.suffix in (".py", ".ipynb")
                 and p.resolve() not in allowed and pattern.search(p.read_text(errors="replace"))]
    assert offenders == []
