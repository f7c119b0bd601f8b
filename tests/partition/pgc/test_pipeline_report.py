"""PGC says what it returned: the winning start, an honoured explicit cap,
a truthful ``coarsened``, DGC's own PGC selectable (API and CLI), and
bad tuning knobs refused at the boundary."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.cli import main
from pyg_dynscale.data import loaders
from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition import CommunicationPlan, DependencyPattern, partition, partition_pgc
from tests.helpers.signals import make_dynamic_signal

P = 4


@pytest.fixture(scope="module")
def england():
    sig = loaders.load_england_covid()
    # DGC's T-GCN (2 GCN layers per gate): spatial rows cost bytes, so a snapshot start can beat LP chunks
    return sig, DependencyPattern.preset("tgcn", sig.num_node_features, 32, gcn_layers=2)


@pytest.fixture(scope="module")
def runs(england):
    sig, pattern = england
    return {"dgc": partition_pgc(sig, P, pattern, starts=("lp",), threads=1),
            "multi": partition_pgc(sig, P, pattern, threads=1)}


def test_dgc_start_alone_reports_lp(runs):
    meta = runs["dgc"].meta
    assert meta["start"] == "lp"
    assert set(meta["candidates"]) == {"lp"}
    assert meta["max_chunk_cost"] <= meta["cap"] * (1 + 1e-9)  # LP chunks respect the cap


def test_multi_start_reports_the_refined_pss_winner(england, runs):
    sig, pattern = england
    multi, dgc = runs["multi"], runs["dgc"]
    assert multi.meta["start"] == "pss"
    bytes_multi = CommunicationPlan.build(sig, multi, pattern).bytes_by_kind()["total"]
    bytes_dgc = CommunicationPlan.build(sig, dgc, pattern).bytes_by_kind()["total"]
    assert multi.meta["candidate_bytes"] == {"lp": bytes_dgc, "pss": bytes_multi}
    assert bytes_multi < bytes_dgc
    # the snapshot-range chunks are larger than the default cap, and the meta says so
    assert multi.meta["max_chunk_cost"] > multi.meta["cap"] and not multi.meta["cap_explicit"]


def test_explicit_cap_is_honoured(england, runs):
    sig, pattern = england
    cap = runs["dgc"].meta["cap"]
    part = partition_pgc(sig, P, pattern, cap=cap, threads=1)
    assert part.meta["cap_explicit"] and part.meta["cap"] == cap
    assert part.meta["start"] == "lp"  # the PSS start would have won without the cap
    assert "pss" in part.meta["starts_over_cap"]
    assert part.meta["max_chunk_cost"] <= cap * (1 + 1e-9)
    assert part.owner.equal(runs["dgc"].owner)


@pytest.mark.parametrize("coarsen", [True, False])
def test_coarsened_is_truthful_whichever_start_wins(england, coarsen):
    sig, pattern = england
    part = partition_pgc(sig, P, pattern, coarsen=coarsen, threads=1)
    assert part.meta["coarsened"] is coarsen
    assert part.meta["start"] in ("lp", "pss", "pts")


@pytest.mark.parametrize("field,value", [
    ("slack", -1.0), ("slack", math.nan), ("slack", 1.0), ("tol", math.nan), ("gain_tol", -0.1),
    ("refine_tol", math.inf), ("chunks_per_part", 0), ("chunks_per_part", 2.5), ("max_chunks", 0),
    ("max_rounds", -1), ("coarse_rounds", -2), ("refine_rounds", -1), ("max_levels", True),
])
def test_bad_tuning_knobs_are_refused(field, value):
    sig = make_dynamic_signal(seed=1, T=6, V=12)
    with pytest.raises(PartitionError) as err:
        partition_pgc(sig, 2, **{field: value})
    assert err.value.field == field


def _path_signal(reverse: bool) -> DynamicGraphSignal:
    """Three snapshots of the path 0-1-2-3-4-5; ``reverse`` flips snapshot 1's edges."""
    path = np.array([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    edges = [path, path[::-1].copy() if reverse else path, path]
    return DynamicGraphSignal(edges, [np.ones(5)] * 3, [np.ones((6, 2))] * 3, None,
                              node_ids=[np.arange(6)] * 3, num_vertices=6)


def test_plan_refuses_another_signals_supergraph_of_equal_size():
    a, b = _path_signal(False), _path_signal(True)
    assert a.num_vertex_time_nodes == b.num_vertex_time_nodes and a.fingerprint() != b.fingerprint()
    pattern = DependencyPattern.preset("tgcn", 2, 4)
    part = partition(a, "pts", 2)
    CommunicationPlan.build(a.supergraph(), part, pattern)  # its own supergraph: fine
    with pytest.raises(PartitionError, match="fingerprint"):
        CommunicationPlan.build(b.supergraph(), part, pattern)


def _england_path() -> str:
    import pyg_dynscale.data as data

    return os.path.join(os.path.dirname(data.__file__), "embedded", "england_covid.json.gz")


def _cli(args, capsys):
    rc = main(["partition", _england_path(), "--parts", str(P), "--gcn-layers", "2", "--scheme", "pgc", *args])
    return rc, capsys.readouterr()


def test_cli_reports_the_winning_start(capsys):
    rc, out = _cli(["--json"], capsys)
    assert rc == 0
    r = json.loads(out.out)
    assert r["pgc_start"] == "pss" and r["pgc_candidate_bytes"]["pss"] == r["bytes_total"]
    rc, out = _cli(["--json", "--pgc-starts", "dgc"], capsys)
    r_dgc = json.loads(out.out)
    assert r_dgc["pgc_start"] == "lp" and r_dgc["bytes_total"] > r["bytes_total"]
    rc, out = _cli(["--pgc-starts", "dgc"], capsys)
    assert "pgc start                       lp" in out.out


@pytest.mark.parametrize("args,message", [
    (["--balanced"], "--balanced applies to pss, pts and pss-ts"),
    (["--scheme", "pss", "--pgc-starts", "dgc"], "apply to --scheme pgc only"),
    (["--workload", "no-such-model.pt"], "--workload"),
])
def test_cli_refuses_options_that_would_be_ignored(args, message, capsys):
    rc, out = _cli(args, capsys)
    assert rc == 2 and message in out.err


def test_default_is_one_thread_so_a_busy_machine_does_not_collapse_it():
    """numba's parallel kernels spin-wait: with another process on a core a
    parallel PGC ran 10-80x slower, so the default uses one thread."""
    sig = make_dynamic_signal(seed=1, T=6, V=12)
    assert partition_pgc(sig, 2).meta["threads"] == 1
    import torch

    before = torch.get_num_threads()
    partition_pgc(sig, 2)
    assert torch.get_num_threads() == before  # restored


def test_auto_backend_compiles_only_large_graphs(monkeypatch):
    """A first partition must not wait a minute for numba: below
    AUTO_NUMBA_ABOVE the bit-identical torch backend runs, above it the
    compiled one (whose compile cost a large graph earns back)."""
    from pyg_dynscale.partition.compiled import backend as kernels

    if not kernels.HAVE_NUMBA:
        pytest.skip("numba is not installed")
    monkeypatch.delenv("PYG_DYNSCALE_LP_BACKEND", raising=False)
    monkeypatch.setattr(kernels, "compiled_cache_warm", lambda: False)  # a fresh install
    sig = make_dynamic_signal(seed=3, T=8, V=20)
    small = partition_pgc(sig, 2)
    assert small.meta["backend"] == "torch"
    monkeypatch.setattr(kernels, "AUTO_NUMBA_ABOVE", 0)
    large = partition_pgc(sig, 2)
    assert large.meta["backend"] == "numba"
    assert small.owner.equal(large.owner) and small.chunk.equal(large.chunk)
    assert kernels.backend_for(10**9) == "numba" and kernels.backend_for(1) == "numba"
    monkeypatch.setattr(kernels, "AUTO_NUMBA_ABOVE", 10**6)
    assert kernels.backend_for(10**6) == "torch" and kernels.backend_for(10**6 + 1) == "numba"
    with kernels.use_backend("numba"):  # an explicit choice wins over the size rule
        assert kernels.backend_for(0) == "numba"


def test_auto_backend_uses_compiled_kernels_once_they_are_cached(monkeypatch, tmp_path):
    """``compiled_cache_warm`` reads numba's on-disk cache: false for a kernel
    never compiled, true once a process compiled it (another process then
    loads it instead of compiling); with a warm cache "auto" picks the
    compiled kernels at any size."""
    import importlib.util
    import subprocess
    import sys

    from pyg_dynscale.partition.compiled import backend as kernels

    if not kernels.HAVE_NUMBA:
        pytest.skip("numba is not installed")
    mod = tmp_path / "tiny_kernel.py"
    mod.write_text("import numba\n\n@numba.njit(cache=True)\ndef plus_one(x):\n    return x + 1\n")

    def load():
        spec = importlib.util.spec_from_file_location(f"tiny_kernel_{len(sys.modules)}", mod)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        return m

    monkeypatch.setattr(kernels, "_warm", False)
    monkeypatch.setattr(kernels, "dispatchers", lambda: [load().plus_one])
    assert kernels.compiled_cache_warm() is False
    subprocess.run([sys.executable, "-c", "import importlib.util as u, sys; s = u.spec_from_file_location('k', sys.argv[1]); "
                    "m = u.module_from_spec(s); s.loader.exec_module(m); m.plus_one(1)", str(mod)], check=True)
    assert kernels.compiled_cache_warm() is True  # a fresh dispatcher finds the other process's code
    monkeypatch.delenv("PYG_DYNSCALE_LP_BACKEND", raising=False)
    monkeypatch.setattr(kernels, "AUTO_NUMBA_ABOVE", 10**9)
    assert kernels.backend_for(1) == "numba"
