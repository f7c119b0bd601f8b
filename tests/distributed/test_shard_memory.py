"""A rank built from its shard holds its part, not the whole signal.

Two properties, each able to fail on its own:

* a rank's peak host memory does not grow with the global node count: the
  same part of a graph 4x larger (4x the vertices, so 4x N and 4x the
  sequences) gives rank 0 the same set-up peak (one dense ``[N]`` int64
  map, e.g. a gid -> row table, would add 8 B x 3 x N_small);
* the host :class:`~pyg_dynscale.distributed.RankLayout` holds a bounded
  number of bytes per row (its graphs, rounds and maps; the shard's own
  arrays are counted once, where they live).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.distributed import DistributedTrainer, RankLayout, read_shard, spawn, write_shards
from pyg_dynscale.nn import TGCN
from pyg_dynscale.nn.decomposed import FusedGraph
from pyg_dynscale.partition import Partition
from tests.helpers.process_memory import glibc, peak_rss_measurable, pin_allocator, proc_status, reset_peak

F = 4
T = 20
K = 2500  # rank 0 owns vertices [0, K) of every snapshot: 50,000 vertex-time nodes


def _peak_measurable() -> bool:
    return peak_rss_measurable() and glibc() is not None


def _ring_signal(V: int) -> DynamicGraphSignal:
    """``T`` snapshots of a ring over ``V`` vertices (weighted, float64 features and targets)."""
    g = torch.Generator().manual_seed(0)
    src = torch.arange(V)
    ring = torch.cat([torch.stack([src, (src + 1) % V]), torch.stack([(src + 1) % V, src])], 1)
    return DynamicGraphSignal([ring] * T, [torch.rand(ring.shape[1], generator=g, dtype=torch.float64)] * T,
                              [torch.randn(V, F, generator=g, dtype=torch.float64) for _ in range(T)],
                              [torch.randn(V, generator=g, dtype=torch.float64) for _ in range(T)],
                              num_vertices=V, dtype=torch.float64)


def _write(tmp_path, V: int) -> str:
    """Shards of the ring over ``V`` vertices: rank 0 owns vertices ``[0, K)``, rank 1 the rest."""
    sig = _ring_signal(V)
    part = Partition("manual", 2, (sig.supergraph().vertex >= K).long())
    d = str(tmp_path / f"ring-{V}")
    torch.manual_seed(0)
    write_shards(sig, part, TGCN(F, 4).dependency_pattern(bytes_per_element=8), d)
    return d


def _setup_peak(rank: int, world_size: int, d: str) -> dict:
    """This rank's peak RSS over ``from_shards`` above its level before.

    Allocations above 64 KiB are their own memory maps and one malloc arena
    serves every thread, so freed tensors leave the RSS at once and the peak
    is that of the live bytes: the same for the same work whatever the
    machine's load or thread timing (with glibc's defaults, freed heap
    chunks stay resident in whichever arena a thread happened to use)."""
    pin_allocator()
    torch.manual_seed(0)
    m, head = TGCN(F, 4).double(), torch.nn.Linear(4, 1).double()
    base = reset_peak()
    tr = DistributedTrainer.from_shards(m, d, head=head, loss="mse")
    return {"peak": proc_status("VmHWM") - base, "owned": int(tr.shard.owned.numel()),
            "N": int(tr.shard.meta["num_nodes"])}


@pytest.mark.skipif(not _peak_measurable(), reason="needs Linux /proc peak-RSS reset and glibc's mallopt")
def test_rank_peak_does_not_grow_with_global_nodes(tmp_path):
    r"""Rank 0 owns the same 50,000 rows of a graph of N = 200,000 and of
    one of N = 800,000 (4x the vertices): its set-up peak from shards
    differs by less than a quarter of what one dense ``[N]`` int64 array
    would add (8 B x 600,000 = 4.6 MiB). A rank that held any whole-signal
    array (a node table or owner map over N, the global sequences) fails."""
    small, big = _write(tmp_path, 4 * K), _write(tmp_path, 16 * K)
    a = spawn(_setup_peak, 2, small, timeout=300)[0]
    b = spawn(_setup_peak, 2, big, timeout=300)[0]
    assert a["owned"] == b["owned"] == K * T and (a["N"], b["N"]) == (4 * K * T, 16 * K * T)
    dense = 8 * (b["N"] - a["N"])  # one [N] int64 map more in the bigger graph
    grown = b["peak"] - a["peak"]
    assert grown <= dense / 4, (f"rank 0's set-up peak grew by {grown / 2**20:.2f} MiB with 4x the global nodes "
                                f"({a['peak'] / 2**20:.1f} -> {b['peak'] / 2**20:.1f} MiB) for the same part; "
                                f"one [N] int64 array is {dense / 2**20:.2f} MiB")
    assert a["peak"] > 0


def _storages(obj, seen: set, out: list, depth: int = 0) -> None:
    """Bytes of every tensor storage reachable from ``obj`` (once each), not crossing into ``seen``."""
    if depth > 12:
        return
    if isinstance(obj, torch.Tensor):
        st = obj.untyped_storage()
        if st.data_ptr() not in seen and st.nbytes():
            seen.add(st.data_ptr())
            out.append(st.nbytes())
        return
    if id(obj) in seen or isinstance(obj, (type, torch.nn.Module, str, int, float, bool)) or obj is None:
        return
    seen.add(id(obj))
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        items = vars(obj).values()
    else:
        return
    for v in items:
        _storages(v, seen, out, depth + 1)


def test_layout_bytes_per_row(tmp_path):
    r"""The host layout of a rank with a recurrent block (T-GCN), built from
    its shard, holds at most 220 B per row of :math:`S_r \cup Q_r` beyond the
    shard's own arrays (measured: 189 B; it was 395 B when every
    layout also built the time graph of :math:`Q_r` -- a copy of its round's
    graph -- and the structure graph's sequence packing, which structure
    encoders never read). The time graph is built for a ``time_kind="none"``
    block only, or shared with a round that holds all of :math:`Q_r`."""
    d = _write(tmp_path, 4 * K)
    pattern = TGCN(F, 4).dependency_pattern(bytes_per_element=8)
    for r in range(2):
        sh = read_shard(d, r, 2)
        lay = RankLayout.from_nodes(sh.nodes, sh.plan, r, sh.owned, sh.Q, sh.two_owners, sh.spatial_edges,
                                    sh.edge_weight, sh.halo_in).prepare(pattern)
        dev = lay.apply_tensors(lambda t: t)  # the trainer's (CPU) device copy: shares the host storages
        seen: set = set()
        _storages(sh, seen, [])  # the shard's arrays: counted where they live, not here
        held: list = []
        _storages((lay, dev), seen, held)
        rows = int(torch.unique(torch.cat([lay.S, lay.Q])).numel())
        assert sum(held) <= 220 * rows, f"rank {r}: the layout holds {sum(held) / rows:.0f} B per row"
        # a vertex partition cuts no sequence: one round, holding all of Q_r, whose graph is the time graph
        rounds = lay.recurrent_rounds(0)
        whole = [x for x in rounds if x.gids.numel() == lay.Q.numel()]
        assert len(whole) == 1 and lay.time_graph is whole[0].graph
        # the structure graph's sequence structures, skipped by its device copy, come when asked: the same values
        full = FusedGraph(x=None, edge_weight=None, supergraph=lay.structure.supergraph)
        assert "packing" not in lay.structure._cache and "packing" not in dev.structure._cache
        for f in ("gather", "reset", "time_major", "time_major_inv", "slot"):
            assert torch.equal(getattr(dev.structure.packing, f), getattr(full.packing, f)), f
        assert torch.equal(dev.structure.sequence_position, full.sequence_position)
        assert dev.structure.to_time_major(lay.S.double()).equal(full.to_time_major(lay.S.double()))
