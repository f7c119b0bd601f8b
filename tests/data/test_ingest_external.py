"""Out-of-core pieces of the chunked readers (data/ingest/external.py): the external merge sort
is numpy's stable argsort, the id table is remap_by_first_appearance, over any chunking."""
from __future__ import annotations

import numpy as np
import pytest

from pyg_dynscale.data.ingest.external import IdTable, Scratch, external_argsort
from pyg_dynscale.data.loaders.edgelist import remap_by_first_appearance


@pytest.mark.parametrize("n,chunk", [(1, 7), (350, 7), (1000, 999), (1000, 1000), (3000, 7), (5000, 64)])
@pytest.mark.parametrize("kind", ["ties", "nearly_sorted", "reversed"])
def test_external_argsort_is_numpys_stable_argsort(tmp_path, n, chunk, kind):
    rng = np.random.default_rng(n + chunk)
    if kind == "ties":
        keys = rng.integers(0, 20, n).astype(np.float64)            # many equal keys: stability matters
    elif kind == "nearly_sorted":
        keys = np.sort(rng.random(n))
        keys[::50] = rng.random(keys[::50].shape[0])                 # runs covering disjoint ranges, a few strays
    else:
        keys = np.arange(n, 0, -1) // 3 * 0.5
    scratch = Scratch(str(tmp_path / "x"))
    try:
        order = np.asarray(external_argsort(keys, chunk, scratch)).copy()  # 3000 / 7: 429 runs, three merge passes
    finally:
        scratch.close()
    assert np.array_equal(order, np.argsort(keys, kind="stable"))
    assert list(tmp_path.iterdir()) == []  # the scratch directory is gone


@pytest.mark.parametrize("chunk", [1, 3, 64, 10 ** 6])
def test_id_table_numbers_by_first_appearance_over_chunks(chunk):
    rng = np.random.default_rng(chunk)
    src, dst = rng.choice(10 ** 9, 60)[rng.integers(0, 60, 400)], rng.choice(10 ** 9, 60)[rng.integers(0, 60, 400)]
    u, v, vertex_map, _ = remap_by_first_appearance(src, dst, np.arange(400))
    table = IdTable()
    seq = np.stack([src, dst], axis=1).ravel()
    out = np.concatenate([table.map(seq[s:s + 2 * chunk]) for s in range(0, seq.shape[0], 2 * chunk)])
    assert np.array_equal(out[0::2], u) and np.array_equal(out[1::2], v)
    assert np.array_equal(table.vertex_map(), vertex_map) and len(table) == vertex_map.shape[0]
