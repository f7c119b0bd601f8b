"""Start-up of the ``pyg-dynscale`` command: ``--help``, ``--version``, every
subcommand's ``--help`` and a missing PATH import neither torch nor
torch_geometric (seconds: issue 38, item 8).

Each case runs the real command in a fresh interpreter with Python's import
profiler on (``PYTHONPROFILEIMPORTTIME=1``, as ``python -X importtime``): its
stderr lists every module the run imported. What is asserted is which modules
load, not how long they take (no wall-clock assert)."""
from __future__ import annotations

import re

import pytest

from tests.helpers.cli_jobs import run_cli

#: what --help must not import: the deep-learning stack (torch: ~2 s, torch_geometric: ~3 s more)
HEAVY = ("torch", "torch_geometric", "torch_geometric_temporal", "scipy")
_IMPORTED = re.compile(r"^import time:\s*\d+ \|\s*\d+ \|\s*(\S+)\s*$")


def _run(argv: list) -> tuple[int, set, list]:
    """Exit status, top-level packages imported, and the stderr lines that are not the profiler's."""
    proc = run_cli(argv, timeout=120, PYTHONPROFILEIMPORTTIME="1")
    imported, other = set(), []
    for line in proc.stderr.splitlines():
        match = _IMPORTED.match(line)
        if match:
            imported.add(match.group(1).split(".")[0])
        elif not line.startswith("import time:"):  # the profiler's header line
            other.append(line)
    assert "pyg_dynscale" in imported, "the import profiler's lines are missing: the check would pass vacuously"
    return proc.returncode, imported, other


def _subcommands() -> list:
    from pyg_dynscale.cli import build_parser

    return sorted(build_parser().subcommands)


@pytest.mark.parametrize("argv", [["--help"], ["--version"]] + [[name, "--help"] for name in _subcommands()],
                         ids=" ".join)
def test_help_and_version_import_no_torch(argv):
    rc, imported, lines = _run(argv)
    assert rc == 0, lines
    assert not imported & set(HEAVY), f"pyg-dynscale {' '.join(argv)} imported {sorted(imported & set(HEAVY))}"


@pytest.mark.parametrize("argv", [
    ["inspect", "{missing}"],
    ["partition", "{missing}", "--parts", "2"],
    ["partition-events", "{missing}", "--parts", "2"],
    ["train", "{missing}"],
    ["train", "{missing}", "--lags", "4"],
    ["train", "{missing}", "--nproc", "2"],
    ["train-events", "{missing}"],
], ids=lambda argv: " ".join(a for a in argv if a != "{missing}"))
def test_a_missing_file_is_reported_before_torch_is_imported(argv, tmp_path):
    missing = str(tmp_path / "no-such-file.json")
    rc, imported, lines = _run([a.replace("{missing}", missing) for a in argv])
    assert rc == 2
    assert len(lines) == 1 and "no such file" in lines[0] and missing in lines[0], lines
    assert not imported & set(HEAVY), f"{argv[0]} imported {sorted(imported & set(HEAVY))} before reporting {lines}"


def test_the_package_root_imports_its_names_on_first_use():
    """``import pyg_dynscale`` is light, and ``from pyg_dynscale import DynamicGraphSignal`` still works."""
    import pyg_dynscale
    from pyg_dynscale.data import DynamicGraphSignal

    assert pyg_dynscale.DynamicGraphSignal is DynamicGraphSignal
    assert set(pyg_dynscale.__all__) <= set(dir(pyg_dynscale))
    with pytest.raises(AttributeError, match="no_such_name"):
        pyg_dynscale.no_such_name  # noqa: B018
