"""The example notebooks (``examples/*.ipynb``): every one runs top to bottom
without a cell error, and every committed one has its outputs stripped.

Each notebook found by the glob is executed with nbclient in a kernel that is
this interpreter (a throw-away kernelspec whose ``argv[0]`` is
``sys.executable``, found first through ``JUPYTER_PATH``), with
``OMP_NUM_THREADS=1``. A notebook added later (e.g. ``03_distributed.ipynb``)
is picked up automatically; ``NOTEBOOKS`` may give it a working directory, a
time budget and extra assertions on its outputs, all optional.

Strip outputs before committing::

    .venv/bin/python -m tests.docs.test_notebooks --strip            # every examples/*.ipynb
    .venv/bin/python -m tests.docs.test_notebooks --strip FILE ...
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ALL_NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
KERNEL_NAME = "pyg-dynscale-test-venv"
CELL_TIMEOUT_S = 240


# ----------------------------------------------------------------- helpers
def outputs_text(nb: Any, tag: Optional[str] = None) -> str:
    """Text of the stream / text/plain outputs of the code cells (only those
    tagged ``tag`` if given)."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code" or (tag is not None and tag not in cell.metadata.get("tags", [])):
            continue
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                parts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def count_images(nb: Any, tag: str) -> int:
    return sum(
        1
        for cell in nb.cells
        if cell.cell_type == "code" and tag in cell.metadata.get("tags", [])
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    )


def tagged_cells(nb: Any, tag: str) -> list:
    cells = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    assert cells, f"no cell tagged {tag!r} (the assertions find cells by tag)"
    return cells


def strip_outputs(path: Path) -> bool:
    """Clear outputs, execution counts and execution timing of ``path`` in
    place; returns whether the file changed."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    before = nbformat.writes(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    after = nbformat.writes(nb)
    if after != before:
        path.write_text(after, encoding="utf-8")
    return after != before


# ------------------------------------------------- per-notebook assertions
def check_quickstart(nb: Any) -> None:
    text = outputs_text(nb, "conversion")
    m = re.search(r"PyGT snapshot_count = (\d+), DynamicGraphSignal snapshots = (\d+)", text)
    assert m, text
    assert int(m.group(1)) == int(m.group(2)) == 53  # PyGT's EnglandCovidDatasetLoader, lags=8
    assert "all 53 snapshots identical" in text

    text = outputs_text(nb, "comparison")
    m = re.search(r"epoch time \(median\)\s+([\d.]+) ms\s+([\d.]+) ms", text)
    assert m, text
    assert float(m.group(1)) > 0 and float(m.group(2)) > 0
    m = re.search(r"test MSE\s+([\d.]+)\s+([\d.]+)", text)
    assert m, text
    pygt_mse, fused_mse = float(m.group(1)), float(m.group(2))
    assert math.isfinite(pygt_mse) and 0 < pygt_mse < 10
    assert fused_mse == pytest.approx(pygt_mse, rel=1e-3, abs=1e-3)  # same model, same init, same loss
    m = re.search(r"largest difference between the two training curves: (\S+)", text)
    assert m and float(m.group(1)) < 1e-4, text


def check_partitioning(nb: Any) -> None:
    from tests.helpers.datasets import SHARED_DATASETS

    expected = "CollegeMsg" if (SHARED_DATASETS / "snap" / "CollegeMsg.txt").is_file() else "england_covid"
    assert f"dataset: {expected}" in outputs_text(nb, "dataset")

    lines = outputs_text(nb, "partition-table").splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["scheme", "num_parts"])
    cols = lines[header].split()
    rows = []
    for line in lines[header + 2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(cols):
            break
        rows.append(dict(zip(cols, cells)))
    got = {(r["scheme"], int(r["num_parts"])) for r in rows}
    assert got == {(s, p) for s in ("pss", "pts", "pss-ts", "pgc") for p in (2, 4)}, got
    for r in rows:
        for c in ("bytes_total", "bytes_spatial", "bytes_temporal", "bytes_redistribution"):
            assert re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB|TiB)", r[c]), (c, r[c])
        assert math.isfinite(float(r["lambda"])) and float(r["lambda"]) >= 1.0
        # what each scheme cuts by construction
        if r["scheme"] == "pss":
            assert r["cut_spatial_edges"] == "0"
        if r["scheme"] == "pts":
            assert r["cut_temporal_edges"] == "0"
        if r["scheme"] == "pss-ts":
            assert r["cut_spatial_edges"] == r["cut_temporal_edges"] == "0"
    assert count_images(nb, "heatmaps") >= 4  # one per scheme (PSS-TS: structure and time owner)
    assert count_images(nb, "traffic") == 2   # 2 and 4 ranks


def check_event_streams(nb: Any) -> None:
    text = outputs_text(nb, "oracle")
    for what in ("batch-loss", "parameter"):
        m = re.search(rf"largest {what} difference: (\S+)", text)
        assert m and float(m.group(1)) < 1e-9, text  # PyG's example loop == MemoryTrainer
    text = outputs_text(nb, "two-processes")
    diffs = re.findall(r"largest loss difference to the one-process emulation: (\S+);", text)
    assert len(diffs) == 2 and all(float(d) < 1e-9 for d in diffs), text
    assert text.count("2 processes") == 2


def check_stale_embeddings(nb: Any) -> None:
    """The table ``bench_stale.py --quick`` prints (the notebook runs it: the suite's only run of it, so its smoke
    test's checks are here)."""
    lines = outputs_text(nb).splitlines()
    exact = next(ln for ln in lines if ln.strip().startswith("no stale"))
    assert exact.split()[2] == "0.00"  # the exact path saves no traffic
    drift = next(ln for ln in lines if ln.strip().startswith("drift ") and "%" not in ln)
    assert float(drift.split()[1]) > 50  # the cache saves traffic
    assert "Average over rows" in "\n".join(lines)


# name -> options, all optional: "check" (callable on the executed notebook),
# "cwd" ("notebook": the examples folder, as Jupyter does; "tmp": an empty
# temporary folder). No time budget: a busy machine must not fail a notebook.
NOTEBOOKS: dict[str, dict[str, Any]] = {
    "01_quickstart.ipynb": {"check": check_quickstart},
    "04_stale_embeddings.ipynb": {"check": check_stale_embeddings},
    "07_event_streams.ipynb": {"check": check_event_streams},
    # run from an empty folder: the notebook must find the shared data (or fall back) on its own
    "02_partitioning.ipynb": {"check": check_partitioning, "cwd": "tmp"},
}


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=[p.name for p in ALL_NOTEBOOKS])
def test_committed_notebook_has_no_outputs(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb.get("nbformat") == 4
    dirty = [
        i for i, cell in enumerate(nb["cells"])
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    dirty += [i for i, cell in enumerate(nb["cells"]) if "execution" in cell.get("metadata", {})]
    assert not dirty, f"{path.name}: cells {sorted(set(dirty))} keep outputs or execution counts; run `python -m tests.docs.test_notebooks --strip`"


def test_notebooks_are_found() -> None:
    names = {p.name for p in ALL_NOTEBOOKS}
    assert {"01_quickstart.ipynb", "02_partitioning.ipynb"} <= names
    assert set(NOTEBOOKS) <= names, "NOTEBOOKS names a notebook that does not exist"


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kernelspec running this interpreter (the venv's), first on JUPYTER_PATH."""
    pytest.importorskip("nbclient")
    pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    base = tmp_path_factory.mktemp("jupyter")
    spec_dir = base / "share" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    pythonpath = os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pyg_dynscale tests (this interpreter)",
        "language": "python",
        "env": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": pythonpath},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(base / "share"))
        mp.setenv("IPYTHONDIR", str(base / "ipython"))            # no user profile / startup files
        mp.setenv("JUPYTER_RUNTIME_DIR", str(base / "runtime"))   # connection files
        mp.setenv("OMP_NUM_THREADS", "1")
        yield KERNEL_NAME


def _needs_pygt(nb: Any) -> bool:
    return any("torch_geometric_temporal" in c.source for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=[p.name for p in ALL_NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_name: str, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    from pyg_dynscale._optional import pygt_available

    opts = NOTEBOOKS.get(path.name, {})
    nb = nbformat.read(path, as_version=4)
    if _needs_pygt(nb) and not pygt_available():
        pytest.skip("the notebook imports torch_geometric_temporal (pip install 'pyg-dynscale[pygt]')")
    # first, a probe: which interpreter and thread settings the kernel really has
    probe = nbformat.v4.new_code_cell(
        "import os, sys\nprint(repr(sys.executable), repr(sys.prefix), os.environ.get('OMP_NUM_THREADS'))"
    )
    nb.cells.insert(0, probe)
    cwd = tmp_path if opts.get("cwd") == "tmp" else path.parent
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name=kernel_name, allow_errors=False,
        resources={"metadata": {"path": str(cwd)}},
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError on the first failing cell
    seconds = time.perf_counter() - start
    print(f"{path.name}: executed in {seconds:.1f} s (cwd {cwd})")

    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    assert probe.outputs[0].text.strip() == f"{sys.executable!r} {sys.prefix!r} 1"
    nb.cells.pop(0)
    check: Optional[Callable[[Any], None]] = opts.get("check")
    if check is not None:
        check(nb)


if __name__ == "__main__":  # pragma: no cover - maintenance helper
    import argparse

    ap = argparse.ArgumentParser(description="Strip outputs and execution counts from notebooks.")
    ap.add_argument("--strip", action="store_true", required=True)
    ap.add_argument("files", nargs="*", type=Path, help="notebooks (default: examples/*.ipynb)")
    args = ap.parse_args()
    for f in args.files or ALL_NOTEBOOKS:
        print(("stripped " if strip_outputs(f) else "clean    ") + str(f))
