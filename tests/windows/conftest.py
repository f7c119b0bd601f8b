"""The windowed tests run tiny float64 ops: one intra-op thread keeps them fast on a busy
machine (two threads contending with other processes made them ~100x slower)."""
import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread):  # tests/conftest.py's fixture, for every test of this folder
    yield
