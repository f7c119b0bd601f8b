"""Vertex partitions of an event stream's node memory (``pyg_dynscale.ctdg.memory_partition``): range / interval
layouts, the communication matrix against a double loop, Re-FlexBiCut never above interval (and strictly below it
on skewed requests), bounded by a brute-force optimum on tiny graphs, and the typed errors."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from pyg_dynscale.errors import PartitionError
from pyg_dynscale.ctdg.memory_partition import (
    balance_cost, balance_lower_bound, communication_matrix, default_interval, partition_vertices, rank_costs, residual_matrix,
)


def random_requests(n, m, r, seed, skew=False):
    """(trainer, vertex, count) rows; ``skew``: a few hot vertices take most requests (bursty high-degree)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, m, (r,), generator=g)
    v = (torch.rand(r, generator=g) ** 3 * n).long() if skew else torch.randint(0, n, (r,), generator=g)
    c = torch.randint(1, 6, (r,), generator=g)
    if skew:  # hot vertices requested by every trainer, many times
        hot = torch.randperm(n, generator=g)[:max(1, n // 10)]
        t = torch.cat([t, torch.arange(m).repeat(hot.numel())])
        v = torch.cat([v, hot.repeat_interleave(m)])
        c = torch.cat([c, torch.randint(10, 40, (hot.numel() * m,), generator=g)])
    return torch.stack([t, v, c])


def slow_matrix(owner, req, m):
    c = [[0.0] * m for _ in range(m)]
    for t in range(m):
        for q in range(m):
            if t != q:
                for tt, v, w in req.t().tolist():
                    if tt == t and int(owner[v]) == q:
                        c[t][q] += w
    return torch.tensor(c, dtype=torch.float64)


def brute_force_optimum(n, m, req, cap):
    """The smallest balance cost over every owner assignment with at most ``cap`` vertices per part."""
    owners = torch.tensor(list(itertools.product(range(m), repeat=n)))
    owners = owners[torch.nn.functional.one_hot(owners, m).sum(1).max(1).values <= cap]
    w = torch.zeros(n, m, dtype=torch.float64)
    w.index_put_((req[1], req[0]), req[2].double(), accumulate=True)
    onehot = torch.nn.functional.one_hot(owners, m).double()               # [A, N, M]
    c = torch.einsum("vt,avq->atq", w, onehot) * (1 - torch.eye(m, dtype=torch.float64))
    zeta = c.sum(2) + c.sum(1)
    return float(zeta.max(1).values.min())


def test_range_and_interval_layouts():
    assert partition_vertices("range", 10, 3).tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert partition_vertices("range", 6, 6).tolist() == list(range(6))
    assert partition_vertices("interval", 10, 3, interval=2).tolist() == [0, 0, 1, 1, 2, 2, 0, 0, 1, 1]
    assert partition_vertices("interval", 7, 3, interval=1).tolist() == [0, 1, 2, 0, 1, 2, 0]
    for n, m in ((1000, 4), (100, 3), (10, 3)):
        g = default_interval(n, m)
        o = partition_vertices("interval", n, m)
        assert o.dtype == torch.int64 and o.tolist() == [(v // g) % m for v in range(n)]
        assert bincount_spread(partition_vertices("range", n, m), m) <= 1
    assert default_interval(1000, 4) == 8 and default_interval(100, 3) == 4 and default_interval(10, 3) == 1


def bincount_spread(o, m):
    b = torch.bincount(o, minlength=m)
    return int(b.max() - b.min())


@pytest.mark.parametrize("seed", range(3))
def test_communication_matrix_equals_a_double_loop(seed):
    n, m = 12, 3
    req = random_requests(n, m, 30, seed)
    req = torch.cat([req, req[:, :5]], 1)  # duplicate (t, v) rows add up
    for method in ("range", "interval"):
        o = partition_vertices(method, n, m, req, **({"interval": 1} if method == "interval" else {}))
        c = communication_matrix(o, req, m)
        torch.testing.assert_close(c, slow_matrix(o, req, m), atol=1e-9, rtol=0)
        zeta = rank_costs(c)
        torch.testing.assert_close(zeta, c.sum(0) + c.sum(1), atol=1e-9, rtol=0)
        assert balance_cost(o, req, m) == pytest.approx(float(zeta.max()), abs=1e-9)
        r = residual_matrix(c)
        torch.testing.assert_close(r, torch.full((m, m), float(c.max()), dtype=torch.float64) - c, atol=1e-9, rtol=0)
        assert float(r.min()) == 0.0


@pytest.mark.parametrize("n,m", [(60, 2), (200, 4), (300, 8)])
def test_flexbicut_never_above_interval(n, m):
    strictly = 0
    for seed in range(4):
        for skew in (False, True):
            req = random_requests(n, m, 6 * n, seed, skew)
            o = partition_vertices("flexbicut", n, m, req)
            assert o.dtype == torch.int64 and o.shape == (n,) and int(o.min()) >= 0 and int(o.max()) < m
            assert int(torch.bincount(o, minlength=m).max()) <= math.ceil(1.1 * n / m)
            f = balance_cost(o, req, m)
            i = balance_cost(partition_vertices("interval", n, m), req, m)
            assert f <= i + 1e-9
            strictly += skew and f < i - 1e-9
    assert strictly == 4  # every skewed case improves on interval


def test_flexbicut_capacity_and_slack():
    n, m = 40, 4
    req = random_requests(n, m, 200, 0, skew=True)
    for slack, cap in ((0.0, 10), (0.5, 15)):
        o = partition_vertices("flexbicut", n, m, req, slack=slack, interval=1)
        assert int(torch.bincount(o, minlength=m).max()) <= cap
    assert balance_cost(partition_vertices("flexbicut", n, m, req, slack=0.5, interval=1), req, m) <= \
        balance_cost(partition_vertices("interval", n, m, interval=1), req, m)


def test_reassignment_moves_hot_shared_vertices():
    """Hot vertices 0 and 3 (interval=1: both on part 0) are requested 10 times by trainers 1 and 2 and never by
    trainer 0: no trainer asks for them in majority, so only the flexible reassignment moves them; the optimum
    (balance cost 20, not interval's 40) is reached."""
    req = torch.tensor([[1, 2, 1, 2], [0, 0, 3, 3], [10, 10, 10, 10]])
    o = partition_vertices("flexbicut", 6, 3, req, interval=1)
    assert balance_cost(partition_vertices("interval", 6, 3, interval=1), req, 3) == 40.0
    assert balance_cost(o, req, 3) == 20.0 == brute_force_optimum(6, 3, req, 3)


def test_a_majority_requester_gets_the_vertex():
    req = torch.tensor([[1, 0, 0], [0, 1, 2], [5, 3, 3]])  # trainer 1 asks for vertex 0 (owned by part 0)
    o = partition_vertices("flexbicut", 4, 2, req, interval=1)
    assert int(o[0]) == 1 and balance_cost(o, req, 2) == 0.0


@pytest.mark.parametrize("seed,n,best", [(9, 7, 75.0), (18, 8, 43.0), (26, 8, 53.0)])
def test_ties_on_the_pair_maximum_break_on_the_pair_sum(seed, n, best):
    """Skewed tiny cases where accepting only moves that lower the pair's maximum stalls above the optimum
    (79, 53, 55); breaking ties on the pair's sum reaches it."""
    req = random_requests(n, 3, 14, seed, skew=True)
    assert brute_force_optimum(n, 3, req, math.ceil(1.1 * n / 3)) == best
    assert balance_cost(partition_vertices("flexbicut", n, 3, req, interval=1), req, 3) == best


@pytest.mark.parametrize("seed,m,n,best", [(53, 3, 7, 8.0), (71, 2, 8, 10.0), (113, 2, 8, 12.0)])
def test_the_bicut_stage_reaches_the_optimum(seed, m, n, best):
    """Tiny uniform cases where the reassignment stage alone stalls above the optimum (11, 11, 14): the BiCut
    stage's majority moves come first and reach it. (On 1,800 tiny random cases the BiCut stage helps in 13
    and hurts in 2; on larger ones the two orders end within 1% of each other.)"""
    req = random_requests(n, m, 14, seed)
    assert brute_force_optimum(n, m, req, math.ceil(1.1 * n / m)) == best
    assert balance_cost(partition_vertices("flexbicut", n, m, req, interval=1), req, m) == best


def test_the_bicut_stage_fills_a_part_up_to_its_capacity():
    """Trainer 0 asks for every vertex (in majority): the cut would put them all on part 0; the capacity stops
    it at ceil(1.1 * 20 / 2) = 11 vertices."""
    n = 20
    req = torch.stack([torch.zeros(n, dtype=torch.long), torch.arange(n), torch.full((n,), 3)])
    o = partition_vertices("flexbicut", n, 2, req, interval=1)
    assert torch.bincount(o, minlength=2).tolist() == [11, 9]
    assert balance_cost(o, req, 2) == 27.0  # the 9 vertices left on part 1, 3 requests each


def test_brute_force_optimum_bounds_flexbicut():
    ratios = []
    for seed in range(12):
        for m, n in ((2, 8), (3, 7)):
            req = random_requests(n, m, 14, seed, skew=seed % 2 == 1)
            cap = math.ceil(1.1 * n / m)
            f = balance_cost(partition_vertices("flexbicut", n, m, req, interval=1), req, m)
            i = balance_cost(partition_vertices("interval", n, m, interval=1), req, m)
            best = brute_force_optimum(n, m, req, cap)
            assert balance_lower_bound(req, n, m) <= best + 1e-9
            assert best <= f + 1e-9 and f <= i + 1e-9
            ratios.append(f / best if best else 1.0)
    print(f"flexbicut / optimum on {len(ratios)} tiny cases: max {max(ratios):.3f}, "
          f"optimal in {sum(r == 1.0 for r in ratios)}")
    assert max(ratios) <= 2.0
    assert sum(r == 1.0 for r in ratios) >= len(ratios) // 2


def test_bad_inputs_are_typed_errors():
    req = torch.tensor([[0, 1], [0, 3], [1, 2]])
    cases = [
        (lambda: partition_vertices("metis", 4, 2), "method"),
        (lambda: partition_vertices("range", 4, 0), "num_parts"),
        (lambda: partition_vertices("range", 4, 5), "num_parts"),
        (lambda: partition_vertices("range", 0, 1), "num_nodes"),
        (lambda: partition_vertices("flexbicut", 4, 2), "requests"),
        (lambda: partition_vertices("flexbicut", 4, 2, req[:2]), "requests"),
        (lambda: partition_vertices("flexbicut", 4, 2, req.int()), "requests"),
        (lambda: partition_vertices("flexbicut", 4, 2, req.tolist()), "requests"),
        (lambda: partition_vertices("flexbicut", 3, 2, req), "requests[1]"),
        (lambda: partition_vertices("flexbicut", 4, 1, req), "requests[0]"),
        (lambda: partition_vertices("flexbicut", 4, 2, torch.tensor([[0], [0], [-1]])), "requests[2]"),
        (lambda: partition_vertices("flexbicut", 4, 2, req, slack=-0.1), "slack"),
        (lambda: partition_vertices("flexbicut", 4, 2, req, slack=float("nan")), "slack"),
        (lambda: partition_vertices("flexbicut", 4, 2, req, max_rounds=0), "max_rounds"),
        (lambda: partition_vertices("interval", 4, 2, interval=0), "interval"),
        (lambda: partition_vertices("range", 4, 2, interval=2), "interval"),
        (lambda: communication_matrix(torch.tensor([0, 2, 0, 0]), req, 2), "owner"),
        (lambda: communication_matrix(torch.tensor([0.0, 1.0, 0.0, 0.0]), req, 2), "owner"),
        (lambda: residual_matrix(torch.zeros(2, 3)), "C"),
    ]
    for call, field in cases:
        with pytest.raises(PartitionError) as info:
            call()
        assert info.value.field == field and "Fix:" in str(info.value), (field, str(info.value))


def test_lower_bound_is_reached_when_every_vertex_has_one_requester():
    """Each vertex asked for by one trainer only: the bound is 0 and flexbicut (room permitting) reaches it."""
    req = torch.tensor([[0, 0, 1, 1, 2, 2], [1, 2, 0, 4, 3, 5], [4, 1, 2, 3, 5, 1]])
    assert balance_lower_bound(req, 6, 3) == 0.0
    assert balance_cost(partition_vertices("flexbicut", 6, 3, req, interval=1), req, 3) == 0.0
    # two trainers asking 3 and 1 times: the vertex costs 2 * (4 - 3) = 2 rows wherever it goes, over 2 ranks
    assert balance_lower_bound(torch.tensor([[0, 1], [0, 0], [3, 1]]), 2, 2) == 1.0
