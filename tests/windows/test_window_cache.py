"""ReInc's two-level cache (pyg_dynscale.windows.cache): the bound in bytes is respected (measured after
every read) and the results are bit for bit the same at every bound; hits / misses / hit rate on known
access patterns; ReInc's priority (Eq. 3) beats LRU and FIFO where it should; expiration; the local level."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import TGCN
from pyg_dynscale.nn.reinc_models import GCRNM1
from pyg_dynscale.windows import WindowTrainer
from pyg_dynscale.windows.cache import GlobalCache, priority
from tests.helpers.windows import chickenpox, covid


def _entry(nbytes: int):
    return lambda k: torch.zeros(nbytes // 8, dtype=torch.float64)


def _run(ticks, sizes, bound, policy):
    """A GlobalCache over a known schedule; returns it after reading every tick in order."""
    c = GlobalCache(lambda k: torch.full((sizes[k] // 8,), float(k), dtype=torch.float64), bound=bound, policy=policy)
    c.plan(ticks)
    for p, keys in enumerate(ticks):
        out = c.read(keys, p)
        assert torch.equal(out, torch.cat([torch.full((sizes[k] // 8,), float(k), dtype=torch.float64) for k in keys]))
        assert c.held_bytes() <= bound
    return c


def test_cyclic_pattern_priority_keeps_the_next_needed_lru_and_fifo_thrash():
    """Keys 0..3 read one per tick, three rounds, room for two: LRU and FIFO always evict the key needed
    next (0 hits); ReInc's F/S - I keeps the two needed soonest (0 and 1) and expires each key after its
    last read: hits at ticks 4, 5, 8, 9 (Belady's optimum here). Expiration alone with FIFO's order gets 2."""
    ticks = [[k] for k in range(4)] * 3
    sizes = {k: 64 for k in range(4)}
    reinc = _run(ticks, sizes, 128, "reinc")
    assert (reinc.accesses, reinc.hits, reinc.misses) == (12, 4, 8)
    assert reinc.stats()["hit_rate"] == pytest.approx(1 - 8 / 12)
    assert reinc.expired == 4 and reinc.entries == {}          # nothing is read after tick 11
    for policy in ("lru", "fifo"):
        c = _run(ticks, sizes, 128, policy)
        assert (c.accesses, c.hits, c.misses) == (12, 0, 12), policy


def test_size_orders_entries_needed_equally_soon():
    """Two small entries (16 B) and a large one (48 B), all read again at the next tick, room for 48 B:
    F/S ranks the small ones first, both are kept (2 hits); ranking the large one first keeps 1."""
    ticks = [[0, 1, 2], [0, 1, 2]]
    sizes = {0: 16, 1: 48, 2: 16}
    c = _run(ticks, sizes, 48, "reinc")
    assert (c.hits, c.misses) == (2, 4)
    assert priority(1, 16, 0) > priority(1, 48, 0) and priority(5, 48, 0) > priority(1, 16, 1)


def test_bound_below_one_entry_and_zero_hold_nothing():
    ticks = [[0, 1], [1, 2], [2, 3]]
    for bound in (0, 63):
        c = _run(ticks, {k: 64 for k in range(4)}, bound, "reinc")
        assert c.hits == 0 and c.peak_bytes == 0 and c.misses == c.accesses == 6


def test_unplanned_reads_are_served_but_not_inserted():
    c = GlobalCache(_entry(64), bound=1000)
    c.plan([[0, 1], [1]])
    c.read([0, 1], 0)
    assert set(c.entries) == {1}                               # 0 expired: never read again
    c.read([1, 5], None)                                       # evaluation: 1 held, 5 computed, not kept
    assert set(c.entries) == {1} and (c.unplanned_accesses, c.unplanned_misses) == (2, 1)
    assert (c.accesses, c.hits, c.misses) == (2, 0, 2)


def test_bad_options_raise():
    with pytest.raises(ModelInputError, match="cache_bytes"):
        GlobalCache(_entry(8), bound=-1)
    with pytest.raises(ModelInputError, match="cache_policy"):
        GlobalCache(_entry(8), bound=8, policy="lfu")
    with pytest.raises(ModelInputError, match="cache_bytes"):
        WindowTrainer(TGCN(4, 3).double(), chickenpox(T=10), lags=3, batch_size=2, reuse=False, cache_bytes=100,
                      optimizer="sgd", lr=0.01)


def _train(model_fn, sig, bound, policy="reinc", shuffle=False, epochs=2, watch=None, lags=3):
    torch.manual_seed(0)
    m = model_fn().double()
    tr = WindowTrainer(m, sig, lags=lags, batch_size=4, lr=0.05, head=torch.nn.Linear(5, 1).double(),
                       cache_bytes=bound, cache_policy=policy, shuffle=shuffle, optimizer="sgd")
    g = tr.cache.global_cache
    held = []
    if watch is not None:
        read = g.read

        def measured(keys, tick=None):
            out = read(keys, tick)
            held.append(sum(int(v.numel()) * v.element_size() for v in g.entries.values()))
            return out
        g.read = measured
    losses = [tr.train_epoch() for _ in range(epochs)] + tr.batch_losses
    ev = tr.evaluate("test")
    return tr, losses, [p.detach().clone() for p in m.parameters()], ev, held


def _gconvgru():
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    return GConvGRU(4, 5, 2)


@pytest.mark.parametrize("model,data", [("TGCN", "static"), ("GCRNM1", "changing"), ("GConvGRU", "changing")])
def test_bound_respected_and_results_identical_at_every_bound(model, data):
    """Bounds 0, below one entry, 1.5 and 3 entries, everything, and None (precomputed): the bytes held
    after every read stay <= the bound, the losses, parameters and metrics are bit for bit those of the
    unbounded run; with room for everything each snapshot read in training is computed once. PyGT's
    GConvGRU has no local level: the global one is read at every step."""
    if model == "GConvGRU":
        pytest.importorskip("torch_geometric_temporal")
    fn = {"TGCN": lambda: TGCN(4, 5), "GCRNM1": lambda: GCRNM1(4, 5), "GConvGRU": _gconvgru}[model]
    sig = chickenpox(T=20) if data == "static" else covid(T=12)
    K = 2 if model == "GConvGRU" else 1
    entry = sig.nodes_per_snapshot.max().item() * K * 4 * 8             # [n, K, F] float64
    base = _train(fn, sig, None)
    for bound in (0, entry - 1, entry * 3 // 2, 3 * entry, 10 ** 9):
        tr, losses, params, ev, held = _train(fn, sig, bound, watch=True)
        assert held and max(held) <= bound
        st = tr.cache_stats()["global"]
        assert st["peak_bytes"] == max(held) <= bound and st["bound_bytes"] == bound
        assert losses == base[1] and ev == base[3]
        assert all(torch.equal(p, q) for p, q in zip(params, base[2]))
        assert st["hits"] + st["misses"] == st["accesses"]
        assert st["hit_rate"] == pytest.approx(1 - st["misses"] / st["accesses"])
        if bound < entry:
            assert st["hits"] == 0 and st["peak_bytes"] == 0
    # room for everything: every snapshot read by a training window is computed once over the two epochs
    read = {s + j for b in tr.batches(0) for s in tr.view.starts[b].tolist() for j in range(3)}
    assert st["misses"] == len(read) and st["hits"] == st["accesses"] - len(read)
    if model == "GConvGRU":                                              # B windows x L steps x 2 epochs
        assert st["accesses"] == 2 * 3 * tr.view.split("train").numel() and tr.cache_stats()["local"] is None
    full = base[0].cache_stats()["global"]
    assert full["misses"] == 0 and full["hits"] == full["accesses"] == st["accesses"]


def test_local_level_counts_one_miss_per_snapshot_and_batch():
    """The local level (first layer's GNN output, per batch): a batch of windows s..s+B-1 reads
    B * L snapshot rows and computes each distinct snapshot once; the global level is read once per
    distinct snapshot and batch."""
    sig = chickenpox(T=20)
    tr, *_ = _train(lambda: GCRNM1(4, 5), sig, None, epochs=1)
    acc = miss = 0
    for b in tr.batches(0):
        st = tr.view.starts[b].tolist()
        acc += 3 * len(st)
        miss += len({s + j for s in st for j in range(3)})
    test_windows = tr.view.split("test").numel()
    st = tr.cache_stats()
    # evaluation batches count too (batch_size windows at a time, in order)
    ev = [tr.view.starts[tr.view.split("test")[a:a + 4]].tolist() for a in range(0, test_windows, 4)]
    acc += sum(3 * len(b) for b in ev)
    miss += sum(len({s + j for s in b for j in range(3)}) for b in ev)
    assert (st["local"]["accesses"], st["local"]["misses"]) == (acc, miss)
    assert st["global"]["accesses"] + st["global"]["unplanned_accesses"] == miss


def test_priority_beats_lru_and_fifo_in_training():
    """Shuffled windows of 4 snapshots, room for four snapshots' aggregations: ReInc's priority hits far
    more often than LRU and FIFO (the same results either way)."""
    g = torch.Generator().manual_seed(0)
    ring = torch.stack([torch.arange(10), (torch.arange(10) + 1) % 10])
    sig = DynamicGraphSignal([ring] * 40, [torch.ones(10)] * 40, [torch.randn(10, 4, generator=g) for _ in range(40)],
                             [torch.randn(10, generator=g) for _ in range(40)], dtype=torch.float64)
    entry = 10 * 4 * 8
    runs = {p: _train(lambda: TGCN(4, 5), sig, 4 * entry, policy=p, shuffle=True, lags=4) for p in ("reinc", "lru", "fifo")}
    hits = {p: r[0].cache_stats()["global"]["hits"] for p, r in runs.items()}
    assert hits["reinc"] > 3 * max(hits["lru"], hits["fifo"], 1)
    assert runs["reinc"][1] == runs["lru"][1] == runs["fifo"][1]
