"""A clone of the repository alone (no ../shared) runs the suite: every shared
dataset file has a small stand-in (tests/fixtures/datasets), the stand-ins are
what their provenance says, and the tests that need a real dataset are capped
(MAX_REAL_DATASET_TESTS in tests/helpers/datasets.py) with or without the data."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.datasets import (
    SHARED_DATASET_FILES,
    SHARED_DATASETS,
    STAND_INS,
    datasets_dir,
    real_dataset_file,
    stand_in_datasets_dir,
    stand_in_file,
    stand_in_source,
)
from tests.fixtures import make_datasets

ROOT = Path(__file__).resolve().parents[2]


def test_every_shared_file_has_a_small_committed_stand_in():
    manifest = SHARED_DATASETS / "MANIFEST.tsv"
    if manifest.is_file():  # the list above is ../shared's (CI, dev machines)
        listed = {line.split("\t")[0] for line in manifest.read_text().splitlines()[1:] if line.strip()}
        assert listed == set(SHARED_DATASET_FILES)
    for rel in SHARED_DATASET_FILES:
        src = stand_in_source(rel)
        if rel == "pygt/england_covid.json":
            from pyg_dynscale.data.loaders import embedded_england_covid_path

            assert src == Path(embedded_england_covid_path()) and src.is_file()  # the package's copy
            continue
        assert src.is_relative_to(STAND_INS) and src.is_file(), rel
        assert src.stat().st_size < 8 * 1024, f"{src}: stand-ins stay a few KB"
        src.read_text(encoding="ascii")  # committed as plain text
    committed = {p.relative_to(STAND_INS).as_posix() for p in STAND_INS.rglob("*") if p.is_file()}
    assert committed == {stand_in_source(r).relative_to(STAND_INS).as_posix() for r in SHARED_DATASET_FILES
                         if r != "pygt/england_covid.json"}, "a stand-in no shared file uses"


def test_stand_ins_folder_mirrors_shared_layout():
    root = stand_in_datasets_dir()
    assert datasets_dir() in (SHARED_DATASETS, root)
    for rel in SHARED_DATASET_FILES:
        p = stand_in_file(rel)
        assert p == root / rel and p.is_file()
        if rel.endswith(".gz"):  # gzipped from the committed text, byte for byte
            assert gzip.decompress(p.read_bytes()) == stand_in_source(rel).read_bytes()
    assert gzip.decompress(Path(stand_in_source("pygt/england_covid.json")).read_bytes()) == \
        stand_in_file("pygt/england_covid.json").read_bytes()


def test_snap_stand_ins_are_what_the_generator_writes():
    # synthetic (SNAP's data come with no licence to redistribute excerpts): reproducible from the seed
    for rel, text in make_datasets.snap_stand_ins().items():
        assert (STAND_INS / rel).read_text() == text, f"{rel}: rerun python -m tests.fixtures.make_datasets"


def test_pygt_stand_ins_are_excerpts_of_the_shared_files():
    # provenance needs the real files: checked where ../shared is (CI), skipped in a clone
    for rel in ("pygt/chickenpox.json", "pygt/pedalme_london.json", "pygt/twitter_tennis_rg17.json"):
        real_dataset_file(rel)
    for rel, text in make_datasets.pygt_stand_ins(SHARED_DATASETS).items():
        assert (STAND_INS / rel).read_text() == text, f"{rel}: rerun python -m tests.fixtures.make_datasets"


def test_shared_folder_is_complete_where_present():
    """Where ../shared exists (CI), it holds every file, so no real-dataset test skips there."""
    if SHARED_DATASETS.is_dir():
        missing = [r for r in SHARED_DATASET_FILES if not (SHARED_DATASETS / r).is_file()]
        assert not missing, f"{SHARED_DATASETS} lacks {missing}"
        assert datasets_dir() == SHARED_DATASETS


# ------------------------------------------------------------------ the cap
CAP_CONFTEST = """
import tests.helpers.datasets as c
from tests.helpers.datasets import (  # the cap's hooks
    pytest_runtest_logreport, pytest_runtest_makereport, pytest_sessionfinish, pytest_terminal_summary,
)

c.MAX_REAL_DATASET_TESTS = {cap}
"""
CAP_TESTS = """
import pytest
from tests.helpers.datasets import dataset_file, real_dataset_file

@pytest.mark.parametrize("i", range(2))
def test_real(i):
    assert real_dataset_file("snap/CollegeMsg.txt").is_file()

def test_ad_hoc_skip():
    pytest.skip("needs chickenpox.json")

def test_stand_in_is_free():
    assert dataset_file("pygt/pedalme_london.json").is_file()
"""


def _run_cap_session(tmp_path: Path, cap: int, datasets: Path, *args: str) -> subprocess.CompletedProcess:
    suite = tmp_path / f"suite_{cap}_{datasets.name}{len(args)}"
    suite.mkdir()
    (suite / "conftest.py").write_text(textwrap.dedent(CAP_CONFTEST.format(cap=cap)))
    (suite / "test_needs_data.py").write_text(textwrap.dedent(CAP_TESTS))
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYG_DYNSCALE_DATASETS=str(datasets))
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args, str(suite)],
                          capture_output=True, text=True, cwd=suite, env=env, timeout=120)


@pytest.mark.parametrize("present", [False, True], ids=["clone_alone", "with_shared"])
def test_cap_on_tests_needing_real_datasets(tmp_path, present):
    if present:  # a folder with the file: the tests run, and count all the same (CI catches a new one)
        data = tmp_path / "shared"
        (data / "snap").mkdir(parents=True)
        (data / "snap" / "CollegeMsg.txt").write_bytes(stand_in_file("snap/CollegeMsg.txt").read_bytes())
    else:
        data = tmp_path / "nowhere"
    over = _run_cap_session(tmp_path, 2, data)
    at = _run_cap_session(tmp_path, 3, data)  # test_real[0], test_real[1], test_ad_hoc_skip
    out = over.stdout + over.stderr
    assert over.returncode == 1, out
    assert "3 tests need a real shared dataset, more than MAX_REAL_DATASET_TESTS = 2" in out, out
    assert "test_needs_data.py::test_real[0]" in out and "test_needs_data.py::test_ad_hoc_skip" in out, out
    assert "test_stand_in_is_free" not in out.split("MAX_REAL_DATASET_TESTS")[-1], out
    assert at.returncode == 0, at.stdout + at.stderr
    if present:
        assert "3 passed" in at.stdout and "1 skipped" in at.stdout, at.stdout
        assert "3 test(s) need them (at most 3), 1 skipped here" in at.stdout, at.stdout
    else:  # skipped, naming the dataset
        assert "1 passed" in at.stdout and "3 skipped" in at.stdout, at.stdout
        assert "needs the real shared dataset snap/CollegeMsg.txt" in at.stdout, at.stdout
        assert "3 test(s) need them (at most 3), 3 skipped here" in at.stdout, at.stdout


def test_cap_counts_the_tests_of_every_xdist_worker(tmp_path):
    """Under ``make test`` (``-n 2``) the tests run in workers and the cap is checked by the controller: the
    datasets each test asked for travel with its reports."""
    pytest.importorskip("xdist")
    data = tmp_path / "shared"
    (data / "snap").mkdir(parents=True)
    (data / "snap" / "CollegeMsg.txt").write_bytes(stand_in_file("snap/CollegeMsg.txt").read_bytes())
    over = _run_cap_session(tmp_path, 2, data, "-n", "2")  # test_real[0], test_real[1] pass, test_ad_hoc_skip
    out = over.stdout + over.stderr
    assert over.returncode == 1, out
    assert "3 tests need a real shared dataset, more than MAX_REAL_DATASET_TESTS = 2" in out, out
    assert "test_needs_data.py::test_real[1]" in out, out

