"""Black-box shards: write_shards(signal, partition, <per-snapshot module>, DIR)
and DistributedTrainer.from_shards on the black-box path.

A rank's shard holds its local subgraphs and its slice of the StatePlan,
equal to what the whole-signal path builds; the trainer from shards equals
the whole-signal black-box trainer bitwise in float64 (losses, parameters,
predictions, evaluation); measured bytes equal the plan's; bad shards and
options that need the whole signal are refused on every rank.
"""
from __future__ import annotations

import os
import re
import shutil

import pytest
import torch

from tests.helpers import blackbox_cases as cases

pytestmark = pytest.mark.skipif(not cases.HAVE_PYGT, reason="needs torch-geometric-temporal")

EPOCHS = 2


def _write(tmp_path, name: str, scheme: str, R: int, **kw) -> tuple:
    from pyg_dynscale.distributed import write_shards

    m, _ = cases.cell(name)
    sig = cases.signal(cases.CELLS[name][0])
    if scheme == "by_time":  # whole snapshots per rank: no halo, each rank's local rows are its owned rows
        from pyg_dynscale.partition import Partition

        part = Partition("manual", R, sig.supergraph().time % R)
    else:
        part = cases.make_partition(sig, scheme, R)
    d = str(tmp_path / f"{name}-{scheme}-{R}")
    write_shards(sig, part, m, d, **kw)
    return sig, part, d


# ---------------------------------------------------------------- one process: contents
def test_blackbox_shard_holds_its_local_subgraphs_and_plan_slice(tmp_path):
    """Each rank's shard == what the whole-signal StatePlan gives that rank:
    the same local steps (edges, owned rows, state routes), its own lists of
    every exchange with the whole plan's bytes, its local rows' features and
    edge weights, its owned rows' targets. Whole snapshots per rank (no halo): the files
    together hold each vertex-time row once."""
    from pyg_dynscale.distributed import read_shard
    from pyg_dynscale.distributed.blackbox_shards import BlackBoxShard
    from pyg_dynscale.nn.snapshot_model import SnapshotModel
    from pyg_dynscale.partition.halo_plan import StatePlan

    for name, scheme in [("GConvLSTM", "random"), ("LRGCN", "pgc"), ("GConvGRU_K3", "by_time")]:
        sig, part, d = _write(tmp_path, name, scheme, 3)
        m, _ = cases.cell(name)
        sm = SnapshotModel(m)
        x0 = sig.x[: int(sig.nodes_per_snapshot[0])]
        ef = {"edge_type": sig.fields["edge_type"].values} if name == "LRGCN" else None
        sm.probe(x0, edge_fields=ef)
        rows = 0
        for r in range(3):
            sh = read_shard(d, r, 3)
            assert isinstance(sh, BlackBoxShard)
            whole = StatePlan(sig, part.owner, 3, sm.depth, sm.state_widths, r, 8)
            assert torch.equal(sh.Q, (part.owner == r).nonzero().flatten()) and torch.equal(sh.Q, whole.owned_gids)
            assert torch.equal(sh.fields["y"], sig.y[sh.Q])
            assert torch.equal(sh.q_time, sig.supergraph().time[sh.Q])
            assert sh.plan.bytes_by_kind() == whole.bytes_by_kind()
            for a, b in zip(sh.plan.exchanges, whole.exchanges, strict=True):
                assert (a.phase, a.kind, a.forward_bytes) == (b.phase, b.kind, b.forward_bytes)
                for own, ref in ((a.send_list(r), b.send_list(r)), (a.recv_list(r), b.recv_list(r))):
                    assert torch.equal(own[0], ref[0]) and own[1] == ref[1], (name, r, a.phase)
            loc = sh.signal
            for i, (s, w) in enumerate(zip(sh.plan.steps, whole.steps, strict=True)):
                assert s.nodes is None and s.edges is None and torch.equal(s.edge_index, w.edge_index)
                assert (s.owned is None and w.owned is None) or torch.equal(s.owned, w.owned)
                g0, g1 = int(sig.node_ptr[i]), int(sig.node_ptr[i + 1])
                e0, e1 = int(sig.edge_ptr[i]), int(sig.edge_ptr[i + 1])
                xs = sig.x[g0:g1] if w.nodes is None else sig.x[g0:g1][w.nodes]
                ws = sig.edge_weight[e0:e1] if w.edges is None else sig.edge_weight[e0:e1][w.edges]
                assert torch.equal(loc.x[int(loc.node_ptr[i]):int(loc.node_ptr[i + 1])], xs)
                assert torch.equal(loc.edge_weight[int(loc.edge_ptr[i]):int(loc.edge_ptr[i + 1])], ws)
                for a, b in zip(s.routes, w.routes, strict=True):
                    assert a.active == b.active and a.send_splits == b.send_splits and a.num_self == b.num_self
                    assert torch.equal(a.self_dst, b.self_dst) and a.identity == b.identity
                    assert all(torch.equal(a.recv_dst[k], b.recv_dst[k]) for k in b.recv_dst)
                    assert [(t, wh) for t, _, wh in a.gather.groups] == [(t, wh) for t, _, wh in b.gather.groups]
                    assert all(torch.equal(x, y) for (_, x, _), (_, y, _) in zip(a.gather.groups, b.gather.groups))
            rows += loc.x.shape[0]
            if scheme == "by_time":
                assert loc.x.shape[0] == sh.Q.numel()
        if scheme == "by_time":
            assert rows == sig.num_vertex_time_nodes


# ---------------------------------------------------------------- ranks
def _trained(tr, m, head) -> dict:
    losses = [tr.train_epoch() for _ in range(EPOCHS)]
    return {"losses": losses, "traffic": tr.traffic(), "pred": tr.predict(), "eval": dict(tr.evaluate()),
            "params": [p.detach().clone() for p in list(m.parameters()) + list(head.parameters())]}


def _round_trip(rank: int, world_size: int, configs: list) -> list:
    from pyg_dynscale.distributed import DistributedTrainer

    torch.set_default_dtype(torch.float64)
    out = []
    for name, part, d in configs:
        sig = cases.signal(cases.CELLS[name][0])
        opt = dict(optimizer=lambda p: torch.optim.SGD(p, lr=0.05))
        m, head = cases.cell(name)
        whole = _trained(DistributedTrainer(m, sig, part, head=head, loss="mse", path="blackbox", **opt), m, head)
        m, head = cases.cell(name)
        tr = DistributedTrainer.from_shards(m, d, head=head, loss="mse", **opt)
        assert tr.path == "blackbox" and tr.signal is None and tr.partition is None
        out.append({"whole": whole, "shard": _trained(tr, m, head), "read": tr.shard.bytes_read})
    return out


def test_from_blackbox_shards_equals_whole_signal(tmp_path):
    """2 gloo ranks, float64: from_shards == the whole-signal black-box
    trainer bitwise (losses, parameters, predictions, evaluation); every
    exchange's measured bytes == the plan's; state rows do cross ranks."""
    from pyg_dynscale.distributed import spawn

    configs = []
    for name, scheme in [("GConvGRU", "random"), ("TGCN", "pgc"), ("GConvLSTM", "pss"), ("LRGCN", "random")]:
        _, part, d = _write(tmp_path, name, scheme, 2)
        configs.append((name, part, d))
    results = spawn(_round_trip, 2, configs, timeout=300)
    moved = 0
    for i, (name, part, _) in enumerate(configs):
        for rank in range(2):
            w, s = results[rank][i]["whole"], results[rank][i]["shard"]
            tag = f"{name}/{part.scheme}/rank {rank}"
            assert s["losses"] == w["losses"], tag
            assert all(torch.equal(a, b) for a, b in zip(s["params"], w["params"], strict=True)), tag
            assert torch.equal(s["pred"], w["pred"]) and s["eval"] == w["eval"], tag
            t = s["traffic"]
            for e in t["exchanges"]:
                assert (e["measured_forward"], e["measured_backward"]) == (e["predicted_forward"],
                                                                           e["predicted_backward"]), (tag, e)
            assert t["exchanges"] == w["traffic"]["exchanges"] and t["predicted"] == w["traffic"]["predicted"], tag
            assert t["measured"] == w["traffic"]["measured"] and t["collectives"] == w["traffic"]["collectives"], tag
            moved += t["measured"]["total"]
    assert moved > 0


def _refused(rank: int, world_size: int, cases_: list) -> list:
    from pyg_dynscale.distributed import DistributedTrainer

    torch.set_default_dtype(torch.float64)
    out = []
    for d, name, kw in cases_:
        m, head = cases.cell(name)
        if kw.pop("float32", False):
            m, head = m.float(), head.float()
        if kw.get("h0") == "zeros":
            kw["h0"] = torch.zeros(cases.signal().supergraph().sequence_vertex.numel(), cases.H)
        try:
            DistributedTrainer.from_shards(m, d, head=head, loss=kw.pop("loss", "mse"), **kw)
            out.append((None, "built"))
        except Exception as exc:  # the test asserts the type on every rank
            out.append((type(exc).__name__, str(exc)))
    return out


def test_bad_blackbox_shards_refused_on_every_rank(tmp_path):
    """A missing rank directory, a corrupt rank file, a rank file of another
    write, shards cut for another module or dtype, a decomposed run of
    black-box shards, and the options that need the whole signal: every rank
    raises the same typed error naming the cause, none hangs; the good set
    builds."""
    from pyg_dynscale.distributed import write_shards
    from pyg_dynscale.distributed.shards import SHARD_FILE
    from pyg_dynscale.nn import adapt

    _, _, good = _write(tmp_path, "GConvGRU", "random", 2)
    _, _, other = _write(tmp_path, "GConvGRU", "pgc", 2)
    expect = [((good, "GConvGRU", {}), None, None)]
    d = str(tmp_path / "missing")
    shutil.copytree(good, d)
    shutil.rmtree(os.path.join(d, "rank-1"))
    expect.append(((d, "GConvGRU", {}), "ShardError", "rank 1 could not load its shard.*missing"))
    d = str(tmp_path / "corrupt")
    shutil.copytree(good, d)
    path = os.path.join(d, "rank-0", SHARD_FILE)
    data = bytearray(open(path, "rb").read())
    lo, hi = 3 * len(data) // 8, 5 * len(data) // 8
    data[lo:hi] = bytes(b ^ 0xFF for b in data[lo:hi])
    open(path, "wb").write(bytes(data))
    expect.append(((d, "GConvGRU", {}), "ShardError", "rank-0"))
    d = str(tmp_path / "mixed")
    shutil.copytree(good, d)
    shutil.copy(os.path.join(other, "rank-1", SHARD_FILE), os.path.join(d, "rank-1", SHARD_FILE))
    expect.append(((d, "GConvGRU", {}), "ShardError", "another shard set"))
    expect.append(((good, "GConvGRU_K3", {}), "ShardError", "another black-box module.*depth"))
    expect.append(((good, "GConvGRU", {"float32": True}), "ShardError", "bytes_per_element: shards 8, model 4"))
    expect.append(((good, "TGCN", {"path": "decomposed"}), "UnsupportedOptionError", "cut for the blackbox path"))
    decomposed = str(tmp_path / "decomposed")  # shards of the decomposed path, a module only the black-box path runs
    sig, part, _ = _write(tmp_path, "TGCN", "pgc", 2)
    write_shards(sig, part, adapt(cases.cell("TGCN")[0], check=False).dependency_pattern(bytes_per_element=8), decomposed)
    expect.append(((decomposed, "GConvGRU", {}), "UnsupportedOptionError", "cut for the decomposed path"))
    expect.append(((good, "GConvGRU", {"loss": "bce_link"}), "UnsupportedOptionError", "option 'loss'"))
    expect.append(((good, "GConvGRU", {"h0": "zeros"}), "UnsupportedOptionError", "option 'h0'"))
    expect.append(((good, "GConvGRU", {"stale": "static:1"}), "UnsupportedOptionError", "option 'stale'"))
    results = spawn_refused([c for c, _, _ in expect])
    for rank in range(2):
        for (c, kind, why), (got, msg) in zip(expect, results[rank], strict=True):
            assert got == kind, (c[0], c[1], rank, got, msg)
            assert why is None or re.search(why, msg), (c[0], c[1], rank, msg)


def spawn_refused(configs: list) -> list:
    from pyg_dynscale.distributed import spawn

    return spawn(_refused, 2, configs, timeout=240)


# ---------------------------------------------------------------- memory: a rank holds its part
def _rank_memory(rank: int, world_size: int, d: str, F: int) -> dict:
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    from pyg_dynscale.distributed import DistributedTrainer
    from tests.helpers.process_memory import proc_status as _status

    torch.manual_seed(0)
    m, head = GConvGRU(F, 4, K=2).double(), torch.nn.Linear(4, 1).double()
    with open("/proc/self/clear_refs", "w") as f:  # resets this process's peak RSS (VmHWM) to its current RSS
        f.write("5")
    base = _status("VmRSS")
    tr = DistributedTrainer.from_shards(m, d, head=head, loss="mse", reuse=False)
    setup = _status("VmHWM") - base
    halo = int(tr.shard.signal.x.shape[0] - tr.shard.Q.numel())
    return {"setup": setup, "read": tr.shard.bytes_read, "halo": halo, "loss": tr.train_epoch()}


def test_blackbox_rank_memory_is_its_part(tmp_path):
    r"""4 ranks, a 200 MB signal (float64 features, 256 wide, a ring per
    snapshot, vertex ranges): each rank's peak host memory while building its
    black-box trainer from shards (read, probe, runner inputs) stays below
    1.3 x whole / 4 + its halo rows + 40 MB slack, about half the whole
    signal: a rank that loaded the whole signal (or every shard) would
    exceed it by the whole signal's size. ``reuse=False``: ReInc's input
    basis (a multiple of the rank's rows) is left out of the bound."""
    from tests.helpers.process_memory import peak_rss_measurable as _peak_rss_measurable

    if not _peak_rss_measurable():
        pytest.skip("needs Linux /proc peak-RSS reset (clear_refs)")
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    from pyg_dynscale.distributed import spawn, write_shards
    from pyg_dynscale.partition import Partition
    from tests.helpers.shard_files import ring_signal

    V, T, F, R = 20000, 5, 256, 4
    sig = ring_signal(V, T, F)
    whole = sum(t.numel() * t.element_size() for t in (sig.x, sig.y, sig.edge_index, sig.edge_weight))
    part = Partition("manual", R, sig.supergraph().vertex * R // V)  # vertex ranges: a small halo
    d = str(tmp_path / "big")
    write_shards(sig, part, GConvGRU(F, 4, K=2).double(), d, check=False)
    del sig
    slack = 40 * 2**20
    assert whole >= 4 * slack
    for r, got in enumerate(spawn(_rank_memory, R, d, F, timeout=600)):
        bound = 1.3 * whole / R + got["halo"] * F * 8 + slack
        assert got["read"] <= 1.3 * whole / R, (r, got)  # what the rank's file holds
        assert got["setup"] <= bound, f"rank {r}: peak {got['setup'] / 2**20:.0f} MiB > bound {bound / 2**20:.0f} MiB"
        assert bound < 0.6 * whole  # loading the whole signal could not fit the bound
