"""Shared fixtures: small dynamic graphs with changing vertex sets."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal


def make_dynamic_signal(seed: int = 0, T: int = 5, V: int = 12, F: int = 3) -> DynamicGraphSignal:
    """A random signal whose vertex set, edges and weights change every snapshot."""
    rng = np.random.default_rng(seed)
    node_ids, edges, weights, feats, targets = [], [], [], [], []
    for t in range(T):
        n = int(rng.integers(0, V + 1)) if t != 0 else V // 2
        ids = np.sort(rng.choice(V, size=n, replace=False))
        m = int(rng.integers(0, 3 * n + 1)) if n > 0 else 0
        ei = rng.integers(0, max(n, 1), size=(2, m)) if n > 0 else np.zeros((2, 0), dtype=np.int64)
        node_ids.append(ids)
        edges.append(ei)
        weights.append(rng.random(m))
        feats.append(rng.standard_normal((n, F)))
        targets.append(rng.standard_normal(n))
    return DynamicGraphSignal(edges, weights, feats, targets, node_ids=node_ids, num_vertices=V)


@pytest.fixture
def dyn_signal() -> DynamicGraphSignal:
    return make_dynamic_signal()


@pytest.fixture
def static_signal() -> DynamicGraphSignal:
    rng = np.random.default_rng(1)
    ei = np.array([[0, 1, 2, 3], [1, 2, 3, 0]])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    feats = [rng.standard_normal((4, 2)) for _ in range(6)]
    targets = [rng.standard_normal(4) for _ in range(6)]
    return DynamicGraphSignal(ei, w, feats, targets)


def pytest_configure(config: pytest.Config) -> None:
    torch.manual_seed(0)


def shared_datasets_dir():
    """The project's shared real data: ``$PYG_DYNSCALE_DATASETS``, else
    ``../shared/datasets`` next to the checkout (where CI puts it)."""
    import os
    from pathlib import Path

    env = os.environ.get("PYG_DYNSCALE_DATASETS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "datasets"


SHARED_DATASETS = shared_datasets_dir()


@pytest.fixture(autouse=True)
def _default_dtype_unchanged():
    """A test that leaves torch's default dtype changed breaks the ones after it: fail it instead."""
    before = torch.get_default_dtype()
    yield
    after = torch.get_default_dtype()
    torch.set_default_dtype(before)
    assert after == before, f"the test left torch's default dtype at {after} (was {before})"
