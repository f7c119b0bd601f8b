"""The event-stream tests run tiny float64 ops: one intra-op thread keeps them fast on a busy machine."""
import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread):  # tests/conftest.py's fixture, for every test of this folder
    yield
