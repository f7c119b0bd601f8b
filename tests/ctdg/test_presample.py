"""``trainer_requests`` (Sven's pre-sampling) equals a slow walk of the (M, 1, 1) schedule with Python sets and
lists: the roots of each trainer's local batch, their last neighbours, the other endpoints of their stored
messages, counted once per step."""
from __future__ import annotations

import random

import pytest
import torch

from pyg_dynscale.ctdg import synthetic_events
from pyg_dynscale.ctdg.presample import trainer_requests
from pyg_dynscale.errors import ModelInputError


def reference(src, dst, n, e, b, m, k) -> dict:
    """{(trainer, vertex): count} by a plain walk: global batch g = events [g m b, (g + 1) m b), trainer t its
    t-th b events; neighbours = the other endpoints of a node's last k (event, neighbour) entries; stored
    messages = the node's events of the last global batch where it was a source / a destination."""
    src, dst = src.tolist(), dst.tolist()
    nbrs = {v: [] for v in range(n)}
    last_s, last_d, counts = {}, {}, {}
    for a in range(0, e, m * b):
        z = min(a + m * b, e)
        for t in range(m):
            lo, hi = min(a + t * b, z), min(a + (t + 1) * b, z)
            if lo == hi:
                continue
            roots = set(src[lo:hi]) | set(dst[lo:hi])
            n_id = set(roots)
            for r in roots:
                n_id |= {w for _, w in nbrs[r][-k:]}
            need = set(n_id)
            for v in n_id:
                need |= {dst[x] for x in last_s.get(v, [])} | {src[x] for x in last_d.get(v, [])}
            for v in need:
                counts[(t, v)] = counts.get((t, v), 0) + 1
        bs, bd = {}, {}
        for x in range(a, z):
            bs.setdefault(src[x], []).append(x)
            bd.setdefault(dst[x], []).append(x)
            nbrs[src[x]].append((x, dst[x]))
            nbrs[dst[x]].append((x, src[x]))
        last_s.update(bs)
        last_d.update(bd)
    return counts


def _as_dict(req: torch.Tensor) -> dict:
    assert req.dtype == torch.int64 and req.dim() == 2 and req.size(0) == 3
    assert bool((req[2] > 0).all())
    return {(t, v): c for t, v, c in req.t().tolist()}


def _stream(num_events, n, gb, k, seed):
    """Random events in which no node has more than k neighbour entries inside one global batch (PyG's loader
    keeps an arbitrary k of them when a node has more in one insert, which a plain walk cannot reproduce)."""
    rng = random.Random(seed)
    src, dst = [], []
    for a in range(0, num_events, gb):
        deg = [0] * n
        for _ in range(min(gb, num_events - a)):
            while True:
                u, v = rng.randrange(n), rng.randrange(n)
                if deg[u] + 1 + (u == v) <= k and deg[v] + 1 + (u == v) <= k:
                    break
            deg[u] += 1
            deg[v] += 1
            src.append(u)
            dst.append(v)
    return torch.tensor(src), torch.tensor(dst)


@pytest.mark.parametrize("m,b,k,e", [(2, 4, 3, 50), (3, 3, 2, 61), (1, 5, 4, 40)])
def test_equals_the_reference_walk(m, b, k, e):
    n = 14
    src, dst = _stream(70, n, m * b, k, seed=m * 10 + b)
    got = _as_dict(trainer_requests(src, dst, n, e, b, m, k))
    assert got == reference(src, dst, n, e, b, m, k)
    assert {t for t, _ in got} == set(range(m))


def test_bursty_stream_with_a_loader_larger_than_a_batch():
    d = synthetic_events(300, 40, bipartite=False, seed=1, burst_length=12, burst_fraction=0.5)
    m, b = 2, 6
    k = 2 * m * b  # a node has at most 2 m b entries per global batch: the precondition holds
    req = trainer_requests(d.src, d.dst, 40, 250, b, m, k)
    assert _as_dict(req) == reference(d.src, d.dst, 40, 250, b, m, k)
    # counts matter: some vertex is needed in several steps
    assert int(req[2].max()) > 1
    # rows sorted by trainer then vertex
    key = req[0] * 40 + req[1]
    assert bool((key[1:] > key[:-1]).all())


def test_bad_arguments_are_typed_errors():
    src, dst = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 3])
    cases = [
        (dict(src=src.float()), "src"), (dict(dst=dst[:2]), "dst"), (dict(num_nodes=3), "src/dst"),
        (dict(num_train_events=4), "num_train_events"), (dict(batch_size=0), "batch_size"),
        (dict(num_trainers=0), "num_trainers"), (dict(num_neighbors=0), "num_neighbors"),
        (dict(num_nodes=True), "num_nodes"),
    ]
    base = dict(src=src, dst=dst, num_nodes=4, num_train_events=3, batch_size=1, num_trainers=2, num_neighbors=2)
    for change, field in cases:
        with pytest.raises(ModelInputError) as info:
            trainer_requests(**{**base, **change})
        assert info.value.field == field and "Fix:" in str(info.value)
    assert trainer_requests(**{**base, "num_train_events": 0}).shape == (3, 0)
