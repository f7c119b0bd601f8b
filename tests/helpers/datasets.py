"""The project's shared real datasets (../shared/datasets) and their committed stand-ins, and the cap on the
tests that need a real file (its pytest hooks are installed by tests/conftest.py)."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest


def shared_datasets_dir():
    """The project's shared real data: ``$PYG_DYNSCALE_DATASETS``, else
    ``../shared/datasets`` next to the checkout (where CI puts it)."""
    env = os.environ.get("PYG_DYNSCALE_DATASETS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "datasets"


SHARED_DATASETS = shared_datasets_dir()


# ------------------------------------------------------------ shared datasets and their stand-ins
# A clone of the repository alone has no ../shared: every shared file has a small
# stand-in in the same format (tests/fixtures/datasets, README.md there), so tests
# of formats and code paths run everywhere. Only tests of a real dataset's facts
# need the real file: they call real_dataset_file(), which skips without it, and
# their number is capped (MAX_REAL_DATASET_TESTS, checked at the end of the session).

#: The files of ../shared/datasets (its MANIFEST.tsv), relative to it.
SHARED_DATASET_FILES = (
    "pygt/chickenpox.json", "pygt/england_covid.json", "pygt/pedalme_london.json", "pygt/twitter_tennis_rg17.json",
    "snap/CollegeMsg.txt", "snap/email-Eu-core-temporal.txt.gz", "snap/sx-mathoverflow.txt.gz",
    "snap/soc-sign-bitcoinotc.csv.gz",
)
STAND_INS = Path(__file__).resolve().parents[1] / "fixtures" / "datasets"

#: At most this many tests may need a real shared dataset (today 6: the four SNAP
#: count checks of test_loaders_edgelist.py, the PyGT stand-ins' provenance in
#: test_dataset_stand_ins.py, and tests/partition/test_fingerprints.py's one test of
#: the partitions of the real files: issue 39 pins them bit-identical, a stand-in cannot).
#: One more fails the session, with or without the data: give it a stand-in instead,
#: or raise this with a reason.
MAX_REAL_DATASET_TESTS = 6

_real_dataset_tests: dict[str, set[str]] = {}   # node id -> the datasets it needs (counted even when present)
_dataset_skips: dict[str, str] = {}             # node id -> skip reason naming a shared dataset


def stand_in_source(rel: str) -> Path:
    """The committed text a shared file's stand-in is made from (a ``.gz`` one is gzipped
    when built; England COVID is the package's embedded, byte-identical copy)."""
    if rel == "pygt/england_covid.json":  # found without importing the package (and torch): == its own path,
        import importlib.util                # test_dataset_stand_ins.py checks

        package = Path(importlib.util.find_spec("pyg_dynscale").origin).parent
        return package / "data" / "embedded" / "england_covid.json.gz"
    return STAND_INS / (rel[: -len(".gz")] if rel.endswith(".gz") else rel)


@functools.lru_cache(maxsize=None)
def stand_in_datasets_dir() -> Path:
    """A folder laid out like ../shared/datasets holding every stand-in under the real
    file's name (built once per process, removed at exit), for code that takes a folder
    (benchmarks, doc blocks)."""
    import atexit
    import gzip
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="pyg_dynscale_stand_ins_"))
    atexit.register(shutil.rmtree, root, True)
    for rel in SHARED_DATASET_FILES:
        src, dst = stand_in_source(rel), root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = src.read_bytes()
        if src.suffix == ".gz" and dst.suffix != ".gz":
            data = gzip.decompress(data)
        elif dst.suffix == ".gz" and src.suffix != ".gz":
            data = gzip.compress(data, mtime=0)
        dst.write_bytes(data)
    return root


def stand_in_file(rel: str) -> Path:
    assert rel in SHARED_DATASET_FILES, f"{rel} is not a shared dataset file"
    return stand_in_datasets_dir() / rel


def dataset_file(rel: str) -> Path:
    """The shared file ``rel`` (e.g. ``"snap/CollegeMsg.txt"``) if present, else its stand-in:
    for tests of a format or a code path, not of the real dataset's facts."""
    assert rel in SHARED_DATASET_FILES, f"{rel} is not a shared dataset file"
    p = SHARED_DATASETS / rel
    return p if p.is_file() else stand_in_file(rel)


def datasets_dir(*rels: str) -> Path:
    """../shared/datasets if it holds ``rels`` (default: all files), else the stand-ins' folder."""
    rels = rels or SHARED_DATASET_FILES
    return SHARED_DATASETS if all((SHARED_DATASETS / r).is_file() for r in rels) else stand_in_datasets_dir()


def real_dataset_file(rel: str) -> Path:
    """The real shared file ``rel``, for a test of that dataset's facts (counts, statistics);
    skips, naming the dataset, where it is absent. Every caller counts towards
    MAX_REAL_DATASET_TESTS whether or not the file is there, so CI (which has it) fails a
    new such test too."""
    assert rel in SHARED_DATASET_FILES, f"{rel} is not a shared dataset file"
    node = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    _real_dataset_tests.setdefault(node, set()).add(rel)
    p = SHARED_DATASETS / rel
    if not p.is_file():
        pytest.skip(f"needs the real shared dataset {rel} (the test checks the real file; a stand-in would not do), "
                    f"not found in {SHARED_DATASETS} (set PYG_DYNSCALE_DATASETS)")
    return p


def _names_a_shared_dataset(text: str) -> bool:
    return any(Path(rel).name.split(".")[0] in text for rel in SHARED_DATASET_FILES)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """The datasets a test asked for travel with its reports (under xdist the session that checks the cap is not
    the process that ran the test)."""
    yield
    rels = _real_dataset_tests.get(item.nodeid)
    if rels and ("real_datasets", tuple(sorted(rels))) not in item.user_properties:
        item.user_properties.append(("real_datasets", tuple(sorted(rels))))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in getattr(report, "user_properties", ()):
        if name == "real_datasets":
            _real_dataset_tests.setdefault(report.nodeid, set()).update(value)
    # skips that name a shared dataset, however they were raised (a doc block, an ad-hoc skip)
    if report.skipped and isinstance(report.longrepr, tuple) and _names_a_shared_dataset(str(report.longrepr[2])):
        _dataset_skips[report.nodeid] = str(report.longrepr[2])


_cap_report: list[tuple[str, bool]] = []


def _shared_stamps() -> dict[str, tuple[int, int]]:
    """``{file: (size, mtime_ns)}`` of the shared files present (a test's job must never write them)."""
    stamps = {}
    for rel in SHARED_DATASET_FILES:
        try:
            st = (SHARED_DATASETS / rel).stat()
        except OSError:
            continue
        stamps[rel] = (st.st_size, st.st_mtime_ns)
    return stamps


#: the shared files as the session found them: twice a doc block's small ``chickenpox.json`` was written
#: through a link into ../shared, and every later session read the damage as data
_SHARED_AT_START = _shared_stamps()


def pytest_sessionfinish(session: pytest.Session) -> None:
    written = sorted(rel for rel, stamp in _shared_stamps().items() if _SHARED_AT_START.get(rel, stamp) != stamp)
    if written and not os.environ.get("PYTEST_XDIST_WORKER"):
        _cap_report.append((f"the session wrote into the shared datasets: {', '.join(written)} in {SHARED_DATASETS} "
                            "changed (size or time): restore them from MANIFEST.tsv's sources, and find the test "
                            "that writes there", True))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    needing = sorted(set(_real_dataset_tests) | set(_dataset_skips))
    if needing:
        _cap_report.append((f"{len(needing)} test(s) need them (at most {MAX_REAL_DATASET_TESTS}), "
                            f"{len(_dataset_skips)} skipped here for lack of them", False))
    if len(needing) > MAX_REAL_DATASET_TESTS:
        _cap_report.append((f"{len(needing)} tests need a real shared dataset, more than MAX_REAL_DATASET_TESTS = "
                            f"{MAX_REAL_DATASET_TESTS} (tests/helpers/datasets.py); give the new ones a stand-in "
                            "(tests/fixtures/datasets, dataset_file()) so that a clone without ../shared runs them:\n  "
                            + "\n  ".join(needing), True))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if _cap_report:
        terminalreporter.write_sep("-", "real shared datasets")
    for line, bad in _cap_report:
        terminalreporter.write_line(line, red=bad, bold=bad)
