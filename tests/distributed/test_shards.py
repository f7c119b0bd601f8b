"""Shards: write_shards / read_shard / DistributedTrainer.from_shards.

A trainer built from shards equals the whole-signal trainer (bitwise here:
the same index logic, the same GCN normalization bit for bit) and the
FusedTrainer oracle (float64); measured bytes equal the plan's; damaged,
missing and mismatched shards are refused on every rank with the cause.
"""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, RankLayout, read_shard, spawn, write_shards
from pyg_dynscale.distributed.shards import META_FILE, SHARD_FILE, read_meta
from pyg_dynscale.errors import ShardError, UnsupportedOptionError
from pyg_dynscale.nn import adapt
from pyg_dynscale.nn.decomposed import FusedGraph
from pyg_dynscale.partition import CommunicationPlan
from pyg_dynscale.partition.rank_plan import RankPlan
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import distributed_cases as cases
from tests.helpers.process_memory import peak_rss_measurable, proc_status
from tests.helpers.shard_files import corrupt, ring_signal

EPOCHS = 3


def _signal(name: str):
    """The oracle cases' signal; for ``*_ce`` its targets as 3 classes (``loss="ce"``)."""
    sig = cases.signal()
    if not name.endswith("_ce"):
        return sig
    y = torch.bucketize(sig.y, torch.tensor([-0.5, 0.5], dtype=sig.y.dtype))
    return type(sig).from_tensors(node_ptr=sig.node_ptr, edge_index=sig.edge_index, edge_ptr=sig.edge_ptr,
                                  node_id=sig.node_id, edge_weight=sig.edge_weight, x=sig.x, y=y,
                                  num_vertices=sig.num_vertices)


def _model(name: str):
    """(model, head, loss) of the oracle cases; ``*_ce``: a 3-class head and ``loss="ce"``."""
    if not name.endswith("_ce"):
        return cases.model(name)
    m, _, _ = cases.model(name[:-3])
    torch.manual_seed(5)
    return m, torch.nn.Linear(4, 3).double(), "ce"


def _pattern(name: str, bpe: int = 8):
    m, _, _ = _model(name)
    return adapt(m, check=False).dependency_pattern(bytes_per_element=bpe)


def _write(tmp_path, name: str, scheme: str, R: int, bpe: int = 8) -> tuple:
    """Shards of the case; ``*_link`` models and schemes ending ``+pairs`` hold the labelled pairs too."""
    sig = _signal(name)
    pattern = _pattern(name, bpe)
    tag, pairs = scheme, scheme.endswith("+pairs")
    scheme = scheme.split("+")[0]
    if scheme == "same_owners":  # a time owner that coincides with the structure owner: PSS-TS's exchanges, empty
        from pyg_dynscale.partition import Partition

        owner = cases.make_partition(sig, "random", R, pattern).owner
        part = Partition("pss-ts", R, owner, owner.clone())
    elif scheme == "mixed_owners":  # time owners differ on ranks 1 and 2 only: rank 0's two sets coincide
        from pyg_dynscale.partition import Partition

        owner = cases.make_partition(sig, "random", R, pattern).owner
        town = owner.clone()
        ones = (owner == 1).nonzero().flatten()
        town[ones[::2]] = 2
        part = Partition("pss-ts", R, owner, town)
    else:
        part = cases.make_partition(sig, scheme, R, pattern)
    d = str(tmp_path / f"{name}-{tag}-{R}")
    write_shards(sig, part, pattern, d, readout_width=4 if pairs or name.endswith("_link") else None)
    return sig, part, pattern, d


# ---------------------------------------------------------------- one process: contents and validation
def test_shard_layout_equals_whole_signal_layout(tmp_path):
    """RankLayout.from_nodes (a shard) == RankLayout (the whole signal): the
    same sets, graphs, exchange maps, rounds and merges; the GCN normalization
    from the halo in-edges equals the global one sliced, bit for bit, for every
    option and dtype, weighted and unweighted."""
    for name, scheme in [("tgcn2", "random"), ("dysat_mse", "pss-ts"), ("stacked_h0", "pss")]:
        sig, part, pattern, d = _write(tmp_path, name, scheme, 3)
        plan = CommunicationPlan.build(sig, part, pattern)
        gg = FusedGraph.from_signal(sig)
        for r in range(3):
            whole = RankLayout(sig, part, plan, r, gg).prepare(pattern)
            sh = read_shard(d, r, 3)
            lay = RankLayout.from_nodes(sh.nodes, sh.plan, r, sh.owned, sh.Q, sh.two_owners, sh.spatial_edges,
                                        sh.edge_weight, sh.halo_in).prepare(pattern)
            for f in ("S", "S_owned", "Q"):
                assert torch.equal(getattr(lay, f), getattr(whole, f)), (name, r, f)
            assert torch.equal(lay.structure.edge_index, whole.structure.edge_index)
            assert torch.equal(lay.time_graph.time, whole.time_graph.time)
            assert torch.equal(lay.time_graph.sequence_order, whole.time_graph.sequence_order)
            for key, m in whole.maps.items():
                for f in ("send_idx", "recv_idx", "recv_gid"):
                    assert torch.equal(getattr(lay.maps[key], f), getattr(m, f)), (name, r, key, f)
            for b, blk in enumerate(pattern.blocks):
                if blk.time_kind == "recurrent":
                    for a, w in zip(lay.recurrent_rounds(b), whole.recurrent_rounds(b)):
                        assert torch.equal(a.q_pos, w.q_pos) and torch.equal(a.graph.time, w.graph.time)
                        for f in ("h0_seq", "h0_recv", "inverse"):
                            x, y = getattr(a, f), getattr(w, f)
                            assert (x is None and y is None) or torch.equal(x, y), (name, r, b, f)
                elif blk.time_kind == "attention":
                    a, w = lay.attention(b), whole.attention(b)
                    assert torch.equal(a.q_in_m, w.q_in_m) and torch.equal(a.graph.time, w.graph.time)
                    assert torch.equal(a.exchange.recv_idx, w.exchange.recv_idx)
            for improved in (False, True):
                for loops in (False, True):
                    for dtype in (torch.float32, torch.float64):
                        ei, ew = lay.structure.gcn_norm(improved, loops, dtype)
                        ei2, ew2 = whole.structure.gcn_norm(improved, loops, dtype)
                        assert torch.equal(ei, ei2) and torch.equal(ew, ew2), (name, r, improved, loops, dtype)
    # unweighted: no weights stored, PyG's unweighted normalization (improved has no effect there) reproduced
    sig = cases.signal()
    unweighted = type(sig)([e for e in _edge_lists(sig)], None, _per_snapshot(sig, sig.x), _per_snapshot(sig, sig.y),
                           node_ids=_node_ids(sig), num_vertices=sig.num_vertices, dtype=torch.float64)
    pattern = _pattern("tgcn2")
    part = cases.make_partition(unweighted, "random", 2, pattern)
    d = str(tmp_path / "unweighted")
    write_shards(unweighted, part, pattern, d)
    plan = CommunicationPlan.build(unweighted, part, pattern)
    for r in range(2):
        whole = RankLayout(unweighted, part, plan, r, FusedGraph.from_signal(unweighted))
        sh = read_shard(d, r)
        assert sh.edge_weight is None and sh.halo_in[2] is None
        lay = RankLayout.from_nodes(sh.nodes, sh.plan, r, sh.owned, sh.Q, sh.two_owners, sh.spatial_edges,
                                    sh.edge_weight, sh.halo_in)
        for improved in (False, True):
            a, b = lay.structure.gcn_norm(improved, True, torch.float64), whole.structure.gcn_norm(improved, True,
                                                                                                torch.float64)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _node_ids(sig):
    sg = sig.supergraph()
    ptr = sg.node_ptr.tolist()
    return [sg.vertex[ptr[t]:ptr[t + 1]] for t in range(sig.num_snapshots)]


def _per_snapshot(sig, values):
    ptr = sig.supergraph().node_ptr.tolist()
    return [values[ptr[t]:ptr[t + 1]] for t in range(sig.num_snapshots)]


def _edge_lists(sig):
    sg = sig.supergraph()
    ptr = sg.node_ptr
    ei = sg.spatial_edge_index
    t_of = sg.time[ei[1]]
    return [ei[:, t_of == t] - ptr[t] for t in range(sig.num_snapshots)]


def test_shard_holds_its_part_only(tmp_path):
    """A rank's file holds its owned / time-owned rows' features and targets
    (and its lists), not the whole signal: over the ranks the stored feature
    rows are each node once (no PSS-TS here), and each file is a fraction of
    the whole."""
    sig, part, pattern, d = _write(tmp_path, "tgcn2", "random", 3)
    plan = CommunicationPlan.build(sig, part, pattern)
    seen = []
    for r in range(3):
        sh = read_shard(d, r, 3)
        owned = (part.owner == r).nonzero().flatten()
        assert torch.equal(sh.owned, owned) and torch.equal(sh.Q, owned) and sh.q_extra.numel() == 0
        halo = plan.exchange(0, "spatial:0").recv_list(r)[0]
        assert halo.numel() > 0 and torch.equal(sh.S, torch.sort(torch.cat([owned, halo])).values)
        mine = torch.isin(sh.S, owned)
        assert torch.equal(sh.x[mine], sig.x[owned]) and not sh.x[~mine].any()  # halo features are not stored
        assert torch.equal(sh.fields["y"], sig.y[owned])
        assert torch.equal(RankPlan.from_plan(plan, r).exchanges[0].recv_gid, sh.plan.exchanges[0].recv_gid)
        seen.append(owned)
    meta = read_meta(d)
    assert meta["world_size"] == 3 and meta["nodes_per_snapshot"] == sig.nodes_per_snapshot.tolist()
    assert meta["signal"] == sig.fingerprint() and meta["pattern"] == pattern.to_dict()
    assert sorted(os.listdir(d)) == [META_FILE, "rank-0", "rank-1", "rank-2"]
    assert not os.path.exists(d + ".partial")


def test_write_is_atomic_and_replaces(tmp_path, monkeypatch):
    """A write that fails half-way leaves the previous shard set intact (and
    no partial directory visible as DIR); a complete one replaces it."""
    sig, part, pattern, d = _write(tmp_path, "tgcn2", "pgc", 2)
    before = read_meta(d)["files"]
    part3 = cases.make_partition(sig, "random", 3, pattern)
    import pyg_dynscale.distributed.shards as shards

    calls = {"n": 0}
    real = shards.RankPlan.from_plan

    def fail_second(plan, r):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("disk full")
        return real(plan, r)

    monkeypatch.setattr(shards.RankPlan, "from_plan", staticmethod(fail_second))
    with pytest.raises(RuntimeError, match="disk full"):
        write_shards(sig, part3, pattern, d)
    assert read_meta(d)["files"] == before and read_meta(d)["world_size"] == 2
    monkeypatch.setattr(shards.RankPlan, "from_plan", staticmethod(real))
    write_shards(sig, part3, pattern, d)
    assert read_meta(d)["world_size"] == 3 and not os.path.exists(d + ".partial")


def test_read_shard_refuses_damaged_missing_and_foreign(tmp_path):
    sig, part, pattern, d = _write(tmp_path, "tgcn2", "pgc", 2)
    read_shard(d, 0, 2)
    with pytest.raises(ShardError, match="process group has 3"):
        read_shard(d, 0, 3)
    with pytest.raises(ShardError, match="no such shard directory"):
        read_shard(str(tmp_path / "nowhere"), 0, 2)
    # a rank file of another write (another partition) next to this meta.json
    _, _, _, other = _write(tmp_path, "tgcn2", "random", 2)
    bad = str(tmp_path / "mixed")
    shutil.copytree(d, bad)
    shutil.copy(os.path.join(other, "rank-1", SHARD_FILE), os.path.join(bad, "rank-1", SHARD_FILE))
    read_shard(bad, 0, 2)
    with pytest.raises(ShardError, match="another shard set"):
        read_shard(bad, 1, 2)
    # corrupt bytes in a rank file, then in meta.json
    corrupt(os.path.join(bad, "rank-0", SHARD_FILE))
    with pytest.raises(ShardError, match="rank-0"):
        read_shard(bad, 0, 2)
    meta = json.load(open(os.path.join(d, META_FILE)))
    meta["header"]["world_size"] = 4
    json.dump(meta, open(os.path.join(bad, META_FILE), "w"))
    with pytest.raises(ShardError, match="checksum mismatch"):
        read_shard(bad, 0, 2)
    meta["version"] = 99
    json.dump(meta, open(os.path.join(bad, META_FILE), "w"))
    with pytest.raises(ShardError, match="version 99"):
        read_meta(bad)
    shutil.copy(os.path.join(d, META_FILE), os.path.join(bad, META_FILE))
    shutil.rmtree(os.path.join(bad, "rank-1"))
    with pytest.raises(ShardError, match="rank-1.*missing"):
        read_shard(bad, 1)
    os.remove(os.path.join(bad, META_FILE))
    with pytest.raises(ShardError, match="meta.json: missing"):
        read_meta(bad)


def test_from_shards_refuses_options_that_need_the_whole_signal(tmp_path):
    """Refused before any collective (the same on every rank), naming the option and what to use instead."""
    m, head, _ = cases.model("tgcn2")
    for kw, option in [({"fusion": "none"}, "fusion"), ({"fusion": 3000.0}, "fusion"),
                       ({"checkpoint_every": 2}, "checkpoint_every"), ({"stale": "static:1"}, "stale")]:
        with pytest.raises(UnsupportedOptionError, match=f"option '{option}'"):
            DistributedTrainer.from_shards(m, str(tmp_path), head=head, **kw)


# ---------------------------------------------------------------- ranks
def _named(m, head):
    return list(m.named_parameters()) + ([("head." + n, p) for n, p in head.named_parameters()] if head else [])


def _train(tr, m, head) -> dict:
    losses = [tr.train_epoch() for _ in range(EPOCHS)]
    t = tr.traffic()
    return {"losses": losses, "params": {n: p.detach().clone() for n, p in _named(m, head)},
            "pred": tr.predict(), "eval": tr.evaluate()["loss"], "traffic": t}


def _round_trip(rank: int, world_size: int, configs: list) -> list:
    out = []
    for name, part, d in configs:
        sig = _signal(name)
        kw = dict(optimizer=cases.optimizer_for(name), h0=cases.initial_state(name, sig))
        m, head, loss = _model(name)
        whole = _train(DistributedTrainer(m, sig, part, head=head, loss=loss, **kw), m, head)
        m, head, loss = _model(name)
        tr = DistributedTrainer.from_shards(m, d, head=head, loss=loss, **kw)
        assert tr.signal is None and tr.partition is None  # the rank never held them
        out.append({"whole": whole, "shard": _train(tr, m, head)})
    return out


CONFIGS = {2: [("tgcn2", "pgc"), ("dysat_mse", "pss-ts"), ("stacked_h0", "random"), ("mpnn", "pss"),
               ("tgcn2", "same_owners"), ("tgcn1_ce", "random"), ("dysat_link", "pgc"), ("tgcn2", "random+pairs")],
           4: [("tgcn1", "empty_rank"), ("tmgcn", "random"), ("mpnn_dgc", "pss"), ("dysat_mse", "pgc"),
               ("stacked_h0", "mixed_owners")]
           + ([("pygt_tgcn", "pgc")] if cases.HAVE_PYGT else [])}


@pytest.mark.parametrize("R", [2, 4])
def test_from_shards_equals_whole_signal_and_oracle(tmp_path, R):
    """Float64: the trainer from shards == the whole-signal trainer (losses,
    parameters, predictions, bitwise) == FusedTrainer (1e-10 losses, 1e-9
    parameters); every exchange's measured bytes == the plan's, in both
    directions, and the same report as the whole-signal trainer's."""
    configs = []
    for name, scheme in CONFIGS[R]:
        _, part, _, d = _write(tmp_path, name, scheme, R)
        configs.append((name, part, d))
    results = spawn(_round_trip, R, configs, timeout=300)
    for i, (name, part, d) in enumerate(configs):
        sig = _signal(name)
        m, head, loss = _model(name)
        ref = FusedTrainer(m, sig, head=head, loss=loss, optimizer=cases.optimizer_for(name),
                           h0=cases.initial_state(name, sig))
        ref_losses = [ref.train_epoch() for _ in range(EPOCHS)]
        for rank in range(R):
            w, s = results[rank][i]["whole"], results[rank][i]["shard"]
            tag = f"{name}/{part.scheme}/R={R}/rank {rank}"
            assert s["losses"] == w["losses"], tag
            for n, p in w["params"].items():
                assert torch.equal(s["params"][n], p), (tag, n)
            assert torch.equal(s["pred"], w["pred"]) and s["eval"] == w["eval"], tag
            assert max(abs(a - b) for a, b in zip(s["losses"], ref_losses)) <= 1e-10, tag
            for n, p in _named(m, head):
                assert float((s["params"][n] - p.detach()).abs().max()) <= 1e-9, (tag, n)
            t = s["traffic"]
            for e in t["exchanges"]:
                assert e["measured_forward"] == e["predicted_forward"], (tag, e)
                assert e["measured_backward"] == e["predicted_backward"], (tag, e)
            assert t["load"]["measured"] == t["load"]["predicted"], tag
            assert t["exchanges"] == w["traffic"]["exchanges"] and t["measured"] == w["traffic"]["measured"], tag
            assert t["predicted"] == w["traffic"]["predicted"], tag
            assert t["collectives"] == w["traffic"]["collectives"], tag  # the same collectives on every rank
            if part.scheme in ("random", "empty_rank"):
                assert t["measured"]["total"] > 0, tag  # something crossed ranks


def _refused(rank: int, world_size: int, dirs: list, name: str) -> list:
    out = []
    for d in dirs:
        m, head, loss = cases.model(name)
        try:
            DistributedTrainer.from_shards(m, d, head=head, loss=loss)
            out.append((None, "built"))
        except Exception as exc:  # the test asserts the type on every rank
            out.append((type(exc).__name__, str(exc)))
    return out


def test_bad_shards_refused_on_every_rank(tmp_path):
    """Missing rank directory, corrupt rank file, shards of another world
    size, another dependency pattern (float32 shards, a float64 model), a rank
    file of another write: every rank raises ShardError naming the cause,
    none hangs; the good set builds."""
    _, _, _, good = _write(tmp_path, "tgcn2", "pgc", 2)
    _, _, _, other = _write(tmp_path, "tgcn2", "random", 2)
    _, _, _, three = _write(tmp_path, "tgcn2", "pgc", 3)
    _, _, _, f32 = _write(tmp_path, "tgcn2", "pts", 2, bpe=4)
    expect = {good: None}
    d = str(tmp_path / "missing")
    shutil.copytree(good, d)
    shutil.rmtree(os.path.join(d, "rank-1"))
    expect[d] = "rank 1 could not load its shard.*missing"
    d = str(tmp_path / "corrupt")
    shutil.copytree(good, d)
    corrupt(os.path.join(d, "rank-0", SHARD_FILE))
    expect[d] = "rank-0"
    d = str(tmp_path / "mixed")
    shutil.copytree(good, d)
    shutil.copy(os.path.join(other, "rank-0", SHARD_FILE), os.path.join(d, "rank-0", SHARD_FILE))
    expect[d] = "another shard set"
    expect[three] = "cut for 3 ranks but the process group has 2"
    expect[f32] = "dependency pattern"
    dirs = list(expect)
    results = spawn(_refused, 2, dirs, "tgcn2", timeout=180)
    for rank in range(2):
        for d, (kind, msg) in zip(dirs, results[rank]):
            why = expect[d]
            if why is None:
                assert kind is None, (d, rank, msg)
                continue
            assert kind == "ShardError", (d, rank, kind, msg)
            assert re.search(why, msg), (d, rank, msg)


# ---------------------------------------------------------------- memory: a rank holds its part


def _rank_memory(rank: int, world_size: int, d: str, F: int) -> dict:
    from pyg_dynscale.nn import TGCN

    torch.manual_seed(0)
    m, head = TGCN(F, 4).double(), torch.nn.Linear(4, 1).double()
    with open("/proc/self/clear_refs", "w") as f:  # resets this process's peak RSS (VmHWM) to its current RSS
        f.write("5")
    base = proc_status("VmRSS")
    tr = DistributedTrainer.from_shards(m, d, head=head, loss="mse")
    setup = proc_status("VmHWM") - base
    loss = tr.train_epoch()
    return {"setup": setup, "epoch": proc_status("VmHWM") - base, "read": tr.shard.bytes_read,
            "halo": int(tr.layout.S.numel() - tr.layout.S_owned.numel()), "loss": loss}


@pytest.mark.skipif(not peak_rss_measurable(), reason="needs Linux /proc peak-RSS reset (clear_refs)")
def test_rank_memory_is_its_part(tmp_path):
    r"""4 ranks, a 200 MB signal (float64 features, 256 wide): each rank's
    peak host memory while building its trainer from shards (read, layout,
    plan slice, input rows, halo exchange) stays below
    1.3 x whole / 4 + its halo rows + 40 MB slack (imports are in the
    baseline; the slack covers the allocator and gloo), which is about half
    the whole signal: a rank that loaded the whole signal (or every shard)
    would exceed it by the whole signal's size."""
    from pyg_dynscale.nn import TGCN
    from pyg_dynscale.partition import Partition

    V, T, F, R = 20000, 5, 256, 4
    sig = ring_signal(V, T, F)
    whole = sum(t.numel() * t.element_size() for t in (sig.x, sig.y, sig.edge_index, sig.edge_weight))
    part = Partition("manual", R, sig.supergraph().vertex * R // V)  # vertex ranges: a small halo
    d = str(tmp_path / "big")
    write_shards(sig, part, TGCN(F, 4).dependency_pattern(bytes_per_element=8), d)
    del sig
    slack = 40 * 2**20
    assert whole >= 4 * slack
    for r, got in enumerate(spawn(_rank_memory, R, d, F, timeout=600)):
        bound = 1.3 * whole / R + got["halo"] * F * 8 + slack
        assert got["read"] <= 1.3 * whole / R, (r, got)  # what the rank's file holds
        assert got["setup"] <= bound, f"rank {r}: peak {got['setup'] / 2**20:.0f} MiB > bound {bound / 2**20:.0f} MiB"
        assert bound < 0.6 * whole  # loading the whole signal could not fit the bound
