"""WindowTrainer(placement="blocks") on a signal on disk: each rank reads only its snapshots
(windows/rank_view.py, windows/mapped_signal.py) and computes what the whole-signal trainer computes
-- the same losses, parameters, metrics of every split and bytes (measured == predicted) on 2 and 4
gloo ranks, static and changing graphs, lags > 1 (the overlap), horizon > 1 and a stride that leaves
snapshots no window reads; bit for bit without standardization, to 1e-12 with it (its statistics
combine the ranks' sums). A rank's peak resident memory stays below a bound proportional to its
part, and the same measurement of a rank that reads everything exceeds it."""
from __future__ import annotations

import gc
import math
import os

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.data.mapped import save_signal_store
from pyg_dynscale.training.launch import spawn
from pyg_dynscale.windows import WindowTrainer, series_signal
from pyg_dynscale.windows.mapped_signal import MappedSignal
from pyg_dynscale.windows.rank_view import RankFacts, combine
from pyg_dynscale.windows.view import Standardizer
from tests.helpers.windows import chickenpox, covid

# (data, T, lags, horizon, stride, standardize, file kind, options)
TWO = [("chickenpox", 30, 3, 1, 1, False, "pt", {}),
       ("covid", 20, 4, 1, 1, True, "store", {}),
       ("chickenpox", 40, 2, 2, 4, True, "pt", {}),   # stride 4 > lags + horizon - 1: snapshots no window reads
       ("chickenpox", 30, 3, 4, 1, False, "store", {"decoder": True}),         # seq2seq past the window
       ("covid", 16, 3, 1, 1, False, "pt", {"node_batch_size": 40}),         # node mini-batches
       ("chickenpox-once", 30, 3, 2, 1, False, "store", {}),                  # a static graph stored once
       ("series", 30, 3, 1, 1, False, "pt", {"series": True}),   # x and y one series in the file: held once
       ("series", 40, 2, 2, 4, True, "pt", {"series": True}),    # ... standardized, snapshots no window reads
       ("series", 30, 3, 4, 1, False, "pt", {"series": True, "decoder": True})]  # ... seq2seq: y read as inputs
FOUR = [("chickenpox", 40, 3, 2, 1, False, "store", {}),
        ("covid", 24, 3, 1, 1, True, "pt", {})]


def _signal(data: str, T: int) -> DynamicGraphSignal:
    if data == "series":  # series_signal's X_t = D_t, Y_t = D_{t+1}: one storage in the file, y a shift of x
        d = chickenpox(T=T + 1)
        ei, ew = d.snapshot_edges(0)
        sig = series_signal(d.x.view(T + 1, -1, 4), ei, ew, dtype=torch.float64)
        assert sig.is_static and sig.y.untyped_storage().data_ptr() == sig.x.untyped_storage().data_ptr()
        return sig
    if data == "chickenpox-once":  # the same static graph given as one edge list: stored once
        sig = chickenpox(T=T)
        ei, ew = sig.snapshot_edges(0)
        once = DynamicGraphSignal(ei, ew, sig.x.view(T, -1, 4), sig.y.view(T, -1), dtype=torch.float64)
        assert once.is_static
        return once
    return chickenpox(T=T) if data == "chickenpox" else covid(T=T)


def _files(cases: list, tmp_path) -> list:
    """Each case's file (``torch.save`` archive or store directory), written once in the parent."""
    out = []
    for i, (data, T, *_, kind, _) in enumerate(cases):
        sig = _signal(data, T)
        path = str(tmp_path / f"case{i}.pt")
        if kind == "pt":
            sig.save(path)
        else:
            path = save_signal_store(sig, str(tmp_path / f"case{i}.store"))
        out.append(path)
    return out


def _train(data, lags, horizon, stride, standardize, options) -> tuple:
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    torch.manual_seed(0)
    options = dict(options)
    width = 4 if options.pop("series", False) else 1  # a series' targets are its next features
    cell, head = GConvGRU(4, 5, 2).double(), torch.nn.Linear(5, width).double()
    if options.pop("decoder", False):  # fed the previous target, from the encoder's final state
        options.update(decoder=GConvGRU(width, 5, 2).double(), teacher_forcing=0.5)
    tr = WindowTrainer(cell, data, lags=lags, horizon=horizon, stride=stride, batch_size=4, lr=0.05, head=head,
                       standardize=standardize, optimizer="adam", **options)
    losses = [tr.train_epoch() for _ in range(2)]
    report = tr.traffic()
    metrics = {split: dict(tr.evaluate(split)) for split in ("train", "val", "test") if tr.view.split(split).numel()}
    held = None if tr.view.held is None else tr.view.held.clone()
    out = (losses, list(tr.batch_losses), [p.detach().clone() for p in tr.modules.parameters()], metrics,
           {k: dict(report[k]) for k in ("measured", "predicted")}, held, type(tr.view).__name__,
           getattr(tr.view, "source", "no source"), int(tr.store.x.shape[0]),
           tr.store.x.untyped_storage().data_ptr() == tr.store.y.untyped_storage().data_ptr(),
           tr.store.x.untyped_storage().nbytes())
    tr.close()
    return out


def _equal_runs(rank, world, cases, paths):
    torch.set_num_threads(1)
    out = []
    for (data, T, lags, horizon, stride, std, _, options), path in zip(cases, paths):
        whole = _train(DynamicGraphSignal.load(path), lags, horizon, stride, std, options)  # every rank loads all
        part = _train(path, lags, horizon, stride, std, options)                            # each rank its part
        out.append((whole, part))
    return out


def _check(per_rank: list, cases: list) -> None:
    for i, (data, T, lags, horizon, stride, std, *_) in enumerate(cases):
        for r, ranks in enumerate(per_rank):
            whole, part = ranks[i]
            assert part[6] == "RankWindowView" and whole[6] == "WindowView"
            assert part[7] is None                                   # the map is closed after set-up
            if data == "series":  # x and y views of one buffer; each run's next snapshot held (its slot)
                runs = torch.nonzero(whole[5][1:] != whole[5][:-1] + 1).flatten()
                assert torch.equal(part[5], torch.cat([whole[5], whole[5][runs] + 1]).sort().values)
                n, row = part[8] // part[5].numel(), 4 * 8                # float64 rows of 4 values
                if not std:  # the store holds the series once: x's rows plus one snapshot per run, not x and y
                    assert part[9] and not whole[9]
                    assert part[10] == (part[5].numel() + 1) * n * row < 2 * whole[8] * row
            else:
                assert torch.equal(part[5], whole[5])                # the same snapshots held
                assert part[8] == whole[8]
            assert part[8] < _signal(data, T).num_vertex_time_nodes  # rows held: a part
            assert part[4] == whole[4]                               # bytes: measured and predicted equal today's
            assert part[4]["measured"]["total"] == part[4]["predicted"]["total"] > 0
            if not std:                                              # bit for bit
                assert part[0] == whole[0] and part[1] == whole[1] and part[3] == whole[3]
                assert all(torch.equal(a, b) for a, b in zip(part[2], whole[2]))
            else:                                                    # the statistics combine the ranks' sums
                for a, b in zip(part[0] + part[1], whole[0] + whole[1]):
                    assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
                for a, b in zip(part[2], whole[2]):
                    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
                for split, m in whole[3].items():
                    for k, v in m.items():
                        assert math.isclose(part[3][split][k], v, rel_tol=1e-12, abs_tol=1e-12)
            assert part[0] == per_rank[0][i][1][0]                   # the same floats on every rank


def test_one_process_loads_a_path_whole_and_trains_as_the_signal(tmp_path):
    paths = _files(TWO[:2], tmp_path)
    for case, path in zip(TWO[:2], paths):
        data, T, lags, horizon, stride, std, _, options = case
        whole = _train(_signal(data, T), lags, horizon, stride, std, options)
        part = _train(path, lags, horizon, stride, std, options)
        assert part[6] == whole[6] == "WindowView" and part[5] is None
        assert part[0] == whole[0] and part[3] == whole[3]
        assert all(torch.equal(a, b) for a, b in zip(part[2], whole[2]))


def test_two_ranks_read_their_part_and_train_as_the_whole_signal(tmp_path):
    paths = _files(TWO, tmp_path)
    _check(spawn(_equal_runs, 2, TWO, paths, timeout=300), TWO)


# ------------------------------------------------------------------ memory, 4 ranks
T_MEM, N_MEM, E_MEM, F_MEM, LAGS_MEM = 2000, 100, 400, 32, 4   # a 70 MB file, x 51 MB


class _Linear(torch.nn.Module):
    """A stateless module without a reuse implementation: the set-up's memory is the data's."""

    def __init__(self, f: int):
        super().__init__()
        self.lin = torch.nn.Linear(f, 1)

    def forward(self, x, edge_index, edge_weight):
        return self.lin(x)


def _status() -> dict:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmHWM", "VmRSS")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out


def _peak_since_reset(fn) -> tuple:
    """``(peak resident bytes above the level before, fn's result)``: VmHWM restarted at the call."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = _status()["VmRSS"]
    out = fn()
    return _status()["VmHWM"] - base, out


def _memory(rank, world, path, small):
    torch.set_num_threads(1)
    # warm-up on a small file: first-use imports and allocations are not the data's
    WindowTrainer(_Linear(F_MEM).double(), small, lags=LAGS_MEM, batch_size=8).close()

    def build():
        src = MappedSignal(path)
        torch.manual_seed(0)
        tr = WindowTrainer(_Linear(F_MEM).double(), src, lags=LAGS_MEM, batch_size=8)
        held = tr.view.held.clone()
        tr.close()
        return src.bytes_read, held

    part, (read, held) = _peak_since_reset(build)

    def everything():
        src = MappedSignal(path)
        src.read(torch.arange(src.num_snapshots))
        return src.bytes_read

    whole_peak, whole_read = _peak_since_reset(everything)
    return part, read, held, whole_peak, whole_read


def _equal_and_memory(rank, world, cases, paths, path, small):
    mem = _memory(rank, world, path, small)  # first: a fresh process's allocator
    return mem, _equal_runs(rank, world, cases, paths)


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="peak RSS reset needs Linux /proc")
def test_four_ranks_read_their_part_train_as_the_whole_signal_and_hold_memory_in_proportion(tmp_path):
    paths = _files(FOUR, tmp_path)
    g = torch.Generator().manual_seed(0)
    T, N, E, F = T_MEM, N_MEM, E_MEM, F_MEM
    sig = DynamicGraphSignal.from_tensors(
        node_ptr=torch.arange(T + 1) * N, edge_ptr=torch.arange(T + 1) * E,
        edge_index=torch.randint(0, N, (2, E), generator=g).repeat(1, T),
        edge_weight=torch.rand(E, generator=g, dtype=torch.float64).repeat(T),
        x=torch.randn(T * N, F, generator=g, dtype=torch.float64), y=torch.randn(T * N, generator=g, dtype=torch.float64))
    path, small = str(tmp_path / "mem.pt"), str(tmp_path / "small.pt")
    sig.save(path)
    sig[0:100].save(small)
    whole = os.path.getsize(path)
    per_snapshot = whole / T
    del sig
    out = spawn(_equal_and_memory, 4, FOUR, paths, path, small, timeout=600)
    _check([o[1] for o in out], FOUR)
    for rank, ((part, read, held, whole_peak, whole_read), _) in enumerate(out):
        # the part: every training block, val and test share (lags - 1 overlap and the horizon per range)
        overlap = 3 * (LAGS_MEM - 1) * per_snapshot
        slack = 8 << 20
        bound = 1.3 * whole / 4 + overlap + slack
        assert whole >= 4 * slack
        assert read <= 1.3 * whole / 4 + overlap, (rank, read, whole)       # bytes read from the map
        assert held.numel() <= T_MEM / 4 + 3 * LAGS_MEM                      # snapshots held
        assert part <= bound, (rank, part / 2**20, bound / 2**20)            # peak resident memory
        # the same measurement of a rank that reads everything is far above the bound
        assert whole_read >= 0.95 * whole and whole_peak > bound, (rank, whole_peak / 2**20, bound / 2**20)


# ------------------------------------------------------------------ the combination, one process
def test_combined_statistics_equal_the_whole_training_range_and_layout_facts_are_anded():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(600, 3, generator=g, dtype=torch.float64) * 5 + 2
    ptr = torch.arange(61) * 10
    ref = Standardizer.fit(x, ptr, range(0, 60))

    def facts(a, b):  # a rank's sums over snapshots a .. b-1
        rows = x[a * 10:b * 10]
        mean = rows.mean(0)
        return RankFacts(fixed=True, static=True, graph="g", count=rows.shape[0], mean=mean,
                         m2=((rows - mean) ** 2).sum(0))

    parts = [facts(0, 13), facts(13, 31), facts(31, 32), facts(32, 60)]
    layout, st = combine(parts, ptr, 10, torch.float64, True)
    torch.testing.assert_close(st.mean, ref.mean, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(st.std, ref.std, rtol=1e-13, atol=1e-13)
    assert (layout.uniform, layout.fixed, layout.static, layout.num_vertices) == (True, True, True, 10)
    other = RankFacts(fixed=True, static=True, graph="h")
    assert not combine(parts + [other], ptr, 10, torch.float64, False)[0].static    # another rank's graph
    loose = RankFacts(fixed=False, static=True, graph="g")
    assert not combine(parts + [loose], ptr, 10, torch.float64, False)[0].fixed
    ragged = torch.cat([ptr[:-1], ptr[-1:] + 1])
    assert not combine(parts, ragged, 10, torch.float64, False)[0].uniform           # the global pointer's


def _bad_file(rank, world, good, missing):
    torch.set_num_threads(1)
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    try:
        WindowTrainer(GConvGRU(4, 5, 2).double(), missing if rank == 1 else good, lags=3, batch_size=4,
                      head=torch.nn.Linear(5, 1).double()).close()
    except Exception as exc:  # noqa: BLE001 - recorded for the parent
        return type(exc).__name__, getattr(exc, "field", None), str(exc)
    return None


def test_a_rank_whose_file_is_missing_stops_every_rank_with_the_cause(tmp_path):
    good = str(tmp_path / "good.pt")
    chickenpox(T=20).save(good)
    r0, r1 = spawn(_bad_file, 2, good, str(tmp_path / "missing.pt"), timeout=120)
    assert r1[0] == "FileNotFoundError" and "missing.pt" in r1[2]
    assert r0[:2] == ("ModelInputError", "set-up") and "failed on rank 1" in r0[2] and "missing.pt" in r0[2]

