"""Node mini-batches of WindowTrainer (pyg_dynscale.windows.node_batches), float64.

Exactness: with full neighbourhoods, a node batch's loss and gradients equal those of the
plain per-window loop on whole snapshots with the loss masked to the node batch's target rows
(and one node batch covering every vertex is the full run); the needed sets equal a brute-force
closure over the window's vertex-time dependencies; sampled neighbourhoods are seeded."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import ModelInputError, UnsupportedModelError
from pyg_dynscale.partition.halo_plan import HaloDepth
from pyg_dynscale.windows import WindowTrainer
from pyg_dynscale.windows.node_batches import plan_steps
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.windows import RecurrentGCN, as64, chickenpox, covid

LR = 0.05


def ring(T: int = 9, V: int = 24, F: int = 3, change: bool = False, seed: int = 0,
         symmetric: bool = False) -> DynamicGraphSignal:
    """A ring (large diameter: receptive fields do not cover it), weighted; ``change``: a third
    of its edges dropped at random in every snapshot; ``symmetric``: both directions of an edge
    dropped together and the edges sorted by source (PyGT's DConv is local only so)."""
    rng = np.random.default_rng(seed)
    r = np.arange(V)
    both = np.concatenate([np.stack([r, (r + 1) % V]), np.stack([(r + 1) % V, r])], 1)
    eis, ews, xs, ys = [], [], [], []
    for _ in range(T):
        keep = rng.random(both.shape[1]) > 0.33 if change else np.ones(both.shape[1], dtype=bool)
        if symmetric:
            keep = np.concatenate([keep[:V], keep[:V]])
        ei = both[:, keep]
        if symmetric:
            ei = ei[:, np.lexsort((ei[1], ei[0]))]
        eis.append(ei)
        ews.append(rng.random(ei.shape[1]) + 0.5)
        xs.append(rng.standard_normal((V, F)))
        ys.append(rng.standard_normal(V))
    return as64(DynamicGraphSignal(eis, ews, xs, ys), T)


def _signal(kind: str) -> DynamicGraphSignal:
    if kind == "static":
        return chickenpox(T=11)
    if kind == "changing":
        return covid(T=9)
    if kind == "ring":
        return ring(change=True)
    if kind == "ring_symmetric":
        return ring(change=True, symmetric=True)
    if kind == "vertex_sets":
        return as64(make_dynamic_signal(seed=3, T=10, V=12, F=4), 10)
    raise AssertionError(kind)


def _model(name: str, f: int):
    from torch_geometric_temporal.nn.recurrent import DCRNN, TGCN, GConvGRU

    torch.manual_seed(0)
    if name == "GConvGRU":
        return GConvGRU(f, 6, 2).double(), torch.nn.Linear(6, 1).double()
    if name == "TGCN":
        return TGCN(f, 6).double(), torch.nn.Linear(6, 1).double()
    if name == "DCRNN":
        return DCRNN(f, 6, 2).double(), torch.nn.Linear(6, 1).double()
    if name == "RecurrentGCN":
        return RecurrentGCN(f, 6).double(), None
    raise AssertionError(name)


def _window_loss(model, head, sig, starts, lags, S, horizon=1):
    """The plain loop on whole snapshots: per window, the state carried by vertex id (zeros at
    a vertex's first appearance), the outputs of steps L-H..L-1 against y at e+k, each window's
    mean over its target rows whose vertex is in S, then the mean over windows that have any."""
    V = sig.num_vertices
    S = torch.as_tensor(S)
    per_window = []
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for s in starts:
            store = None
            terms = []
            for j in range(lags):
                snap = sig[s + j]
                if snap.num_nodes == 0:
                    continue
                h_in = None if store is None else store.index_select(0, snap.n_id)
                out = model(snap.x, snap.edge_index, snap.edge_attr, h_in)
                y, h = out if isinstance(out, tuple) else (out, out)
                if store is None:
                    store = h.new_zeros(V, h.shape[1])
                store = store.index_copy(0, snap.n_id, h)
                k = j - (lags - horizon)
                if k >= 0:
                    tgt = sig[s + lags - 1 + k]
                    keep = torch.isin(snap.n_id, S)
                    pred = head(y) if head is not None else y
                    terms.append(((pred.squeeze(-1) - tgt.y) ** 2)[keep])
            rows = torch.cat(terms) if terms else torch.zeros(0, dtype=torch.float64)
            if rows.numel():
                per_window.append(rows.mean())
    finally:
        torch.set_default_dtype(old)
    return torch.stack(per_window).mean() if per_window else None


def _grads(params):
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]


@pytest.mark.parametrize("name,kind", [("GConvGRU", "static"), ("GConvGRU", "changing"), ("GConvGRU", "ring"),
                                       ("TGCN", "ring"), ("RecurrentGCN", "changing"), ("RecurrentGCN", "ring"),
                                       ("GConvGRU", "vertex_sets"), ("DCRNN", "ring_symmetric"),
                                       ("DCRNN", "static")])
def test_node_batch_loss_and_gradients_equal_masked_full_loop(name, kind):
    """Every node batch (several per window batch) gives the loss and gradients of the whole
    snapshots' loop with the loss masked to its target vertices."""
    sig = _signal(kind)
    model, head = _model(name, sig.x.shape[1])
    trainer = WindowTrainer(model, sig, lags=4, batch_size=3, lr=LR, head=head,
                            node_batch_size=40 if kind == "changing" else 5, optimizer="sgd")
    nb = trainer._node_batches
    params = list(model.parameters()) + (list(head.parameters()) if head is not None else [])
    wins = trainer.batches(0)[0]
    starts = trainer.view.starts[wins].tolist()
    checked = 0
    for S in nb.node_batches():
        for p in params:
            p.grad = None
        got = nb.node_batch_loss(wins, S)
        ref = _window_loss(model, head, sig, starts, 4, S)
        if ref is None:
            assert got is None
            continue
        got.backward()
        g = _grads(params)
        for p in params:
            p.grad = None
        ref.backward()
        assert math.isclose(float(got.detach()), float(ref.detach()), rel_tol=1e-9, abs_tol=1e-12)
        for a, b in zip(g, _grads(params)):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
        checked += 1
    assert checked >= 2
    if kind.startswith("ring"):  # the receptive field does not cover the graph: a field too small shows
        plans = nb.plan(starts, nb.node_batches()[0])
        assert 0 < int(plans[0].need.sum()) < plans[0].need.numel()


@pytest.mark.parametrize("order", ["seq-first", "node-first"])
def test_steps_follow_the_order_and_the_masked_reference(order):
    """One SGD step per (node batch, global batch): seq-first takes each node batch through
    every global batch, node-first each global batch through every node batch."""
    sig = ring(change=True)
    model, head = _model("GConvGRU", 3)
    rm, rh = copy.deepcopy(model), copy.deepcopy(head)
    trainer = WindowTrainer(model, sig, lags=3, batch_size=2, lr=LR, head=head, node_batch_size=9,
                            node_order=order, optimizer="sgd")
    mean = trainer.train_epoch()
    batches = [trainer.view.starts[w].tolist() for w in trainer.batches(0)]
    nodes = [torch.arange(0, 9), torch.arange(9, 18), torch.arange(18, 24)]
    pairs = [(S, b) for S in nodes for b in batches] if order == "seq-first" else \
        [(S, b) for b in batches for S in nodes]
    opt = torch.optim.SGD(list(rm.parameters()) + list(rh.parameters()), lr=LR)
    ref = []
    for S, starts in pairs:
        opt.zero_grad()
        loss = _window_loss(rm, rh, sig, starts, 3, S)
        loss.backward()
        opt.step()
        ref.append(float(loss.detach()))
    assert len(trainer.batch_losses) == len(ref) >= 6
    for a, b in zip(trainer.batch_losses, ref):
        assert math.isclose(a, b, rel_tol=1e-9)
    assert math.isclose(mean, sum(ref) / len(ref), rel_tol=1e-9)
    for p, q in zip(list(model.parameters()) + list(head.parameters()), list(rm.parameters()) + list(rh.parameters())):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name,kind,reuse", [("GConvGRU", "static", True), ("GConvGRU", "changing", False),
                                             ("TGCN", "changing", True), ("RecurrentGCN", "static", False),
                                             ("GConvGRU", "vertex_sets", True)])
def test_one_node_batch_covering_every_vertex_is_the_full_run(name, kind, reuse):
    """node_batch_size >= V: the same step losses, parameters and evaluation as node_batch_size=None."""
    sig = _signal(kind)
    model, head = _model(name, sig.x.shape[1])
    m2, h2 = copy.deepcopy(model), copy.deepcopy(head)
    full = WindowTrainer(model, sig, lags=3, batch_size=2, lr=LR, head=head, reuse=reuse, optimizer="sgd")
    nb = WindowTrainer(m2, sig, lags=3, batch_size=2, lr=LR, head=h2, reuse=reuse, node_batch_size=sig.num_vertices + 5,
                       optimizer="sgd")
    assert len(nb._node_batches.node_batches()) == 1
    for _ in range(2):
        a, b = full.train_epoch(), nb.train_epoch()
        assert math.isclose(a, b, rel_tol=1e-9)
        for x, y in zip(full.batch_losses, nb.batch_losses):
            assert math.isclose(x, y, rel_tol=1e-9)
    for p, q in zip(model.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)
    ea, eb = full.evaluate("test"), nb.evaluate("test")
    for k in ea:
        assert math.isclose(ea[k], eb[k], rel_tol=1e-9)


def test_evaluate_from_several_node_batches_and_horizon():
    """evaluate() assembles the predictions of every node batch: the full evaluation exactly,
    also with horizon 2 (the outputs of the last two steps)."""
    sig = ring(change=True)
    for horizon in (1, 2):
        model, head = _model("GConvGRU", 3)
        m2, h2 = copy.deepcopy(model), copy.deepcopy(head)
        full = WindowTrainer(model, sig, lags=3, horizon=horizon, batch_size=2, lr=LR, head=head, optimizer="sgd")
        nb = WindowTrainer(m2, sig, lags=3, horizon=horizon, batch_size=2, lr=LR, head=h2, node_batch_size=7,
                           optimizer="sgd")
        ea, eb = full.evaluate("train"), nb.evaluate("train")
        for k in ea:
            assert math.isclose(ea[k], eb[k], rel_tol=1e-9)
        wins = nb.batches(0)[0]
        S = nb._node_batches.node_batches()[1]
        got = nb._node_batches.node_batch_loss(wins, S)
        ref = _window_loss(m2, h2, sig, nb.view.starts[wins].tolist(), 3, S, horizon=horizon)
        assert math.isclose(float(got.detach()), float(ref.detach()), rel_tol=1e-9)


def test_shuffle_draws_a_seeded_vertex_permutation_per_epoch():
    """shuffle=True: each epoch's node batches are a permutation of the vertices drawn by the
    generator seeded with seed + epoch, after it permuted the windows (each batch sorted)."""
    from pyg_dynscale.windows.batching import block_batch_parts

    sig = ring(change=True)
    used = []
    for _ in range(2):
        model, head = _model("GConvGRU", 3)
        tr = WindowTrainer(model, sig, lags=3, batch_size=2, lr=LR, head=head, node_batch_size=7, shuffle=True,
                           seed=5, optimizer="sgd")
        nb = tr._node_batches
        run = []
        loss = nb.node_batch_loss
        nb.node_batch_loss = lambda wins, S: (run.append((tr.epoch, S.tolist(), wins.tolist())), loss(wins, S))[1]
        tr.train_epoch()
        tr.train_epoch()
        used.append(run)
    assert used[0] == used[1]                                      # the same seed: the same batches
    for e in (0, 1):
        g = torch.Generator().manual_seed(5 + e)
        batches = [torch.cat(p).tolist() for p in block_batch_parts(tr.view.split("train"), 2, 1, True, g)]
        perm = torch.randperm(24, generator=g)
        nodes = [c.sort().values.tolist() for c in torch.split(perm, 7)]
        assert [(S, w) for ep, S, w in used[0] if ep == e] == [(S, w) for S in nodes for w in batches]
    first = [S for ep, S, _ in used[0] if ep == 0]
    assert first[0] != list(range(7)) and sorted(v for S in dict.fromkeys(map(tuple, first)) for v in S) == list(range(24))


# ------------------------------------------------------------------ needed sets
def _brute_needed(sig, starts_at, L, S, depth, H=1):
    """Vertices whose outputs at step j reach a target output, by closing over the window's
    vertex-time dependencies: output (v, j) reads the state of every u within d hops of v in
    G_j, which u last produced at its previous appearance inside the window."""
    snaps = [sig[starts_at + j] for j in range(L)]
    ids = [s.n_id.tolist() for s in snaps]
    adj = []
    for s, vid in zip(snaps, ids):
        a = {v: set() for v in vid}
        for u, v in s.edge_index.t().tolist():
            a[vid[u]].add(vid[v])
            a[vid[v]].add(vid[u])
        adj.append(a)

    def ball(j, seeds, r):
        seen, frontier = set(seeds), set(seeds)
        for _ in range(r):
            frontier = {w for v in frontier for w in adj[j][v]} - seen
            seen |= frontier
        return seen

    d = max(depth.state) if depth.state else None
    todo = [(v, j) for j in range(L - H, L) for v in S if v in adj[j]]
    reached = set(todo)
    while todo:
        v, j = todo.pop()
        if d is None:
            continue
        for u in ball(j, {v}, d):
            p = next((q for q in range(j - 1, -1, -1) if u in adj[q]), None)
            if p is not None and (u, p) not in reached:
                reached.add((u, p))
                todo.append((u, p))
    need = [{v for v, q in reached if q == j} for j in range(L)]
    hops = depth.hops
    local = [ball(j, need[j], hops + 1) if need[j] else set() for j in range(L)]
    return need, local


@pytest.mark.parametrize("kind,depth,H", [("ring", HaloDepth(2, (2,)), 1), ("ring", HaloDepth(1, (0,)), 1),
                                          ("ring", HaloDepth(1, (1, 0)), 2), ("ring", HaloDepth(0, (1,)), 1),
                                          ("vertex_sets", HaloDepth(2, (2,)), 1), ("vertex_sets", HaloDepth(1, ()), 1)])
def test_needed_sets_equal_brute_force(kind, depth, H):
    sig = _signal(kind)
    L, V = 5, sig.num_vertices
    for start in (0, 3):
        for S in ([0, 1], [5], list(range(V // 2, V // 2 + 3))):
            graphs, keys = [], []
            for j in range(L):
                snap = sig[start + j]
                graphs.append((snap.edge_index, snap.num_nodes))
                keys.append(snap.n_id)
            plans = plan_steps(graphs, keys, torch.tensor(sorted(S)), depth, horizon=H)
            need, local = _brute_needed(sig, start, L, S, depth, H)
            for j, p in enumerate(plans):
                assert set(keys[j][p.need].tolist()) == need[j], (start, S, j)
                assert set(keys[j][p.nodes].tolist()) == local[j], (start, S, j)
    if kind == "ring" and depth.state and max(depth.state) > 0:   # the field grows backwards in time
        assert len(need[0]) > len(need[L - 2]) > len(need[L - 1])


# ------------------------------------------------------------------ sampling
def test_sampled_neighbourhoods_are_seeded_and_reproducible():
    import torch_geometric.typing as tgt

    if not (tgt.WITH_PYG_LIB or tgt.WITH_TORCH_SPARSE):
        pytest.skip("PyG's NeighborSampler needs pyg-lib or torch-sparse")
    sig = covid(T=9)

    def run(seed, num_neighbors):
        model, head = _model("GConvGRU", 4)
        tr = WindowTrainer(model, sig, lags=3, batch_size=2, lr=LR, head=head, node_batch_size=40,
                           num_neighbors=num_neighbors, seed=seed, optimizer="sgd")
        before = torch.get_rng_state()
        losses = [tr.train_epoch() for _ in range(2)]
        assert torch.equal(before, torch.get_rng_state())   # the caller's generator is left alone
        return losses, tr.batch_losses, tr.evaluate("test")

    a, b = run(0, [2, 2]), run(0, [2, 2])
    assert a == b                                           # the same seed: the same run
    assert run(1, [2, 2])[1] != a[1]                        # another seed: other samples
    exact = run(0, None)
    assert exact[1] != a[1]                                  # sampling does leave edges out
    wide = run(0, [-1, -1, -1])
    assert all(math.isfinite(v) for v in wide[1]) and wide[1] != exact[1]   # sampled degrees are the sample's


# ------------------------------------------------------------------ bad input
def test_bad_input():
    sig = chickenpox(T=11)
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    def make(**kw):
        return WindowTrainer(GConvGRU(4, 6, 2).double(), sig, lags=3, batch_size=2, head=torch.nn.Linear(6, 1).double(), **kw,
                             optimizer="sgd", lr=0.01)

    for bad in (0, -3, True, 2.5, "4"):
        with pytest.raises(ModelInputError, match="node_batch_size"):
            make(node_batch_size=bad)
    with pytest.raises(ModelInputError, match="num_neighbors.*without node_batch_size"):
        make(num_neighbors=[5, 5])
    for bad in ([], [0], [2, -2], "5", [True]):
        with pytest.raises(ModelInputError, match="num_neighbors"):
            make(node_batch_size=4, num_neighbors=bad)
    with pytest.raises(ModelInputError, match="node_order"):
        make(node_batch_size=4, node_order="nodes-first")

    class NoGraph(torch.nn.Module):   # no layer to infer its hops from
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x, edge_index, edge_weight):
            return self.lin(x)

    with pytest.raises(ModelInputError, match="SnapshotModel"):
        WindowTrainer(NoGraph().double(), sig, lags=3, batch_size=2, node_batch_size=4, optimizer="sgd", lr=0.01)
    from torch_geometric_temporal.nn.recurrent import DCRNN

    with pytest.raises(NotImplementedError, match="decoder"):
        make(node_batch_size=4, decoder="copy", decoder_input="features")
    with pytest.raises(UnsupportedModelError, match="DConv"):   # its normalizers are paired by edge position
        WindowTrainer(DCRNN(3, 6, 2).double(), ring(), lags=3, batch_size=2, node_batch_size=4,
                      optimizer="sgd", lr=0.01)
    WindowTrainer(DCRNN(3, 6, 2).double(), ring(symmetric=True), lags=3, batch_size=2, node_batch_size=4,
                  optimizer="sgd", lr=0.01)


# ------------------------------------------------------------------ benchmark
def test_bench_node_batches_quick(capsys):
    """benchmarks/bench_node_batches.py --quick: a node batch in id order computes a part of the
    rows, holds fewer activation bytes than a whole-snapshot step, and one batch is the full run."""
    import importlib.util
    from pathlib import Path

    pytest.importorskip("torch_geometric_temporal")
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_node_batches.py"
    spec = importlib.util.spec_from_file_location("bench_node_batches", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    threads = torch.get_num_threads()
    try:
        bench.main(["--quick"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] in (["TGCN"], ["GConvGRU(K=2)"])]
    assert rows and all(float(r[-1]) <= float(r[-2]) <= 1.0 for r in rows)          # exact rows <= computed <= all
    assert all(float(r[-2]) < 1.0 for r in rows if r[3] == "id")                    # a strip is a part of the grid
    assert "one node batch == full epoch loss: True" in out
    assert float(out.rsplit("node batch / full: ", 1)[1].split()[0]) < 1.0


# ------------------------------------------------------------------ process group
RANK_CASES = [("ring", 2, 4, "seq-first", "sgd", "blocks"), ("vertex_sets", 2, 2, "node-first", "adam", "replicated")]


def _rank_run(kind, blocks, batch_size, order, optimizer, placement):
    model, head = _model("GConvGRU", _signal(kind).x.shape[1])
    tr = WindowTrainer(model, _signal(kind), lags=3, batch_size=batch_size, lr=LR, optimizer=optimizer, head=head,
                       blocks=blocks, node_batch_size=5, node_order=order, placement=placement)
    losses = [tr.train_epoch() for _ in range(2)]
    return losses, tr.batch_losses, [p.detach().clone() for p in list(model.parameters()) + list(head.parameters())], \
        tr.evaluate("test"), tr.traffic().as_dict()


def _ranks(rank, world, cases):
    torch.set_num_threads(1)
    return [_rank_run(*c) for c in cases]


def test_two_ranks_equal_one_process_with_the_same_blocks():
    """Under a gloo group each rank computes its blocks' windows of every (node batch, global
    batch) step, DDP sums the gradients: one process with the same blocks, float64."""
    from pyg_dynscale.training.launch import spawn

    single = [_rank_run(*c[:5], None) for c in RANK_CASES]
    per_rank = spawn(_ranks, 2, RANK_CASES, timeout=120)
    for i, ref in enumerate(single):
        r0, r1 = per_rank[0][i], per_rank[1][i]
        assert r0[0] == r1[0] and r0[1] == r1[1]
        for a, b in zip(r0[2], r1[2]):
            assert torch.equal(a, b)
        assert len(r0[1]) == len(ref[1]) >= 6
        for a, b in zip(r0[0] + r0[1], ref[0] + ref[1]):
            assert math.isclose(a, b, rel_tol=1e-9)
        for a, b in zip(r0[2], ref[2]):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
        assert all(math.isclose(r0[3][k], ref[3][k], rel_tol=1e-9) for k in ref[3])
        # the last epoch's bytes, all ranks: counted at the collectives = predicted from the epoch's plan (DDP's
        # buckets once per step; 8 bytes per step loss and per (node batch, global batch) pair of window counts)
        report, steps = r0[4], len(r0[1])
        assert report == r1[4] and report["steps"] == steps and ref[4]["measured"]["total"] == 0
        measured, predicted = report["measured"], report["predicted"]
        assert measured == predicted and measured["features"] == 0 and measured["gradients"] > 0
        assert measured["loss"] > 2 * 8 * steps                       # the pairs' counts too
