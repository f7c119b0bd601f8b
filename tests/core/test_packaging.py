"""Packaging: the core works without the PyGT extra, layout and metadata."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip vendors the same parser
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]

# Packages that only the extras bring (pygt: PyGT, torch-scatter, torch-sparse
# and its scipy; bench: matplotlib, pymetis, kahip).
NOT_CORE = ("torch_geometric_temporal", "torch_scatter", "torch_sparse", "scipy", "matplotlib", "pymetis", "kahip")

# Runs in a fresh interpreter where none of NOT_CORE can be imported (a None
# entry in sys.modules makes `import` raise ImportError), i.e. an installation
# of the core alone.
NO_PYGT_SCRIPT = textwrap.dedent(
    r"""
    import sys
    for name in NOT_CORE:
        sys.modules[name] = None

    import importlib, pkgutil, tempfile, os
    import numpy as np
    import torch
    import pyg_dynscale
    from pyg_dynscale import DynamicGraphSignal, MissingDependencyError

    # Every module of the package imports without the extras (they are imported lazily).
    failed = []
    for info in pkgutil.walk_packages(pyg_dynscale.__path__, "pyg_dynscale."):
        if info.name == "pyg_dynscale.__main__":
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
    assert not failed, "modules that fail to import without the extras:\n" + "\n".join(failed)

    # Core use: build, iterate, split, supergraph, statistics, save/load.
    rng = np.random.default_rng(0)
    sig = DynamicGraphSignal(
        [np.array([[0, 1], [1, 0]]), np.array([[0, 1, 2], [1, 2, 0]])],
        [np.ones(2), np.ones(3)],
        [rng.standard_normal((2, 3)), rng.standard_normal((3, 3))],
        [rng.standard_normal(2), rng.standard_normal(3)],
        node_ids=[np.array([0, 4]), np.array([4, 7, 9])],
    )
    shapes = [tuple(d.x.shape) for d in sig]
    assert shapes == [(2, 3), (3, 3)], shapes
    sg = sig.supergraph()
    assert sg.num_nodes == 5 and sg.temporal_edge_index.shape == (2, 1), sg
    stats = sig.statistics().to_dict()
    assert stats["spatial_edges"] == 5 and stats["temporal_edges"] == 1, stats
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "s.pt")
        sig.save(p)
        assert DynamicGraphSignal.load(p).equals(sig)

    # The embedded default dataset loads without PyGT.
    from pyg_dynscale.data.loaders import load_england_covid
    covid = load_england_covid()
    assert covid.num_snapshots == 53 and covid.num_vertices == 129, covid

    # PyGT-dependent functions raise MissingDependencyError with the install hint.
    from pyg_dynscale._optional import PYGT_INSTALL_HINT, import_pygt, pygt_available
    assert not pygt_available()
    for call in (lambda: sig.to_pygt(), lambda: import_pygt("x")):
        try:
            call()
        except MissingDependencyError as exc:
            msg = str(exc)
            assert "torch-geometric-temporal" in msg and PYGT_INSTALL_HINT in msg, msg
            assert isinstance(exc, ImportError)
        else:
            raise AssertionError("expected MissingDependencyError")
    print("NO-PYGT-OK")
    """
).replace("NOT_CORE", repr(NOT_CORE))


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )


def test_core_works_without_extras() -> None:
    proc = _run(NO_PYGT_SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NO-PYGT-OK" in proc.stdout


def test_cli_inspect_works_without_pygt(tmp_path: Path) -> None:
    edges = tmp_path / "events.txt"
    edges.write_text("0 1 0\n1 2 5\n2 0 15\n0 2 25\n")  # 3 windows -> 2 snapshots
    code = (
        "import sys\n"
        f"for n in {NOT_CORE!r}: sys.modules[n] = None\n"
        "from pyg_dynscale.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = _run(code, "inspect", str(edges), "--window", "10", "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"snapshots": 2' in proc.stdout


def test_top_level_layout() -> None:
    required = {"pyproject.toml", "README.md", "CHANGELOG.md", "pyg_dynscale", "examples", "tests", "docs"}
    allowed = required | {"benchmarks", "Makefile"}
    ignored_suffixes = (".egg-info",)  # build artefacts (.gitignore)
    ignored = {"build", "dist", "__pycache__"}
    entries = {
        p.name for p in ROOT.iterdir()
        if not p.name.startswith(".") and p.name not in ignored and not p.name.endswith(ignored_suffixes)
    }
    assert required <= entries, f"missing: {sorted(required - entries)}"
    assert entries <= allowed, f"unexpected top-level entries: {sorted(entries - allowed)}"
    ci = ROOT / ".ci" / "run"
    assert ci.is_file() and os.access(ci, os.X_OK), ".ci/run must be an executable file"
    assert ci.read_text().startswith("#!/usr/bin/env bash")


def test_pyproject_metadata() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["name"] == "pyg-dynscale"
    assert project["requires-python"] == ">=3.10"
    core = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]}
    assert core == {"torch", "torch-geometric", "numpy", "tqdm", "numba"}
    extras = project["optional-dependencies"]
    names = lambda reqs: {r.split(">")[0].split("=")[0].split("<")[0].strip() for r in reqs}  # noqa: E731
    assert {"torch-geometric-temporal", "torch-scatter", "torch-sparse"} <= names(extras["pygt"])
    assert {"pytest", "pytest-timeout"} <= names(extras["test"])
    assert {"matplotlib"} <= names(extras["bench"])
    assert {"sphinx", "myst-parser"} <= names(extras["docs"])
    assert project["scripts"]["pyg-dynscale"] == "pyg_dynscale.cli:main"
    import pyg_dynscale

    assert pyg_dynscale.__version__ == project["version"]


def test_ci_run_propagates_failure(tmp_path: Path) -> None:
    """.ci/run exits with make's status: a failing `make test` fails CI."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "make").write_text("#!/usr/bin/env bash\necho fake make \"$@\"\nexit 3\n")
    (fake / "make").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "fake make test" in proc.stdout


@pytest.mark.parametrize("target", ["demo", "test", "docs", "setup"])
def test_makefile_targets_exist(target: str) -> None:
    proc = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60,
        env=dict(os.environ, VENV=str(ROOT / ".venv")),
    )
    assert proc.returncode == 0, proc.stderr
