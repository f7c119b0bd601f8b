"""CUDA: the distributed paths that never ran on a GPU, on 2 ranks sharing it (gloo, the staged
exchange) == the same 2 ranks on the CPU (float64): the stale cache on the decomposed path (T-GCN,
DySAT) and on the black-box path (a user's cell; PyGT's GConvGRU where PyGT is installed), budgeted
fusion (``fusion=<bytes>``, ``fusion_groups="shared-halo"``), TM-GCN, and the continued evaluation of
a later window (``evaluate(test, partition)``: each vertex's state carried over from training).

What is compared: losses, parameters, predictions and evaluation losses to 1e-9 (CUDA's kernels sum
in another order than the CPU's: not bitwise); the bytes measured per exchange kind and epoch exactly
(for the stale cache they are its decisions: the fresh rows of every exchange, the masks). Both
devices run in the same spawned ranks (:func:`run_configs`: a function of the device, so the body is
checked on the CPU against itself where there is no GPU). Host synchronizations of one CUDA epoch
are counted (``torch.cuda.set_sync_debug_mode("warn")``) and recorded in the report, not asserted.
Skipped without a GPU (``make gpu-check`` runs them where there is one)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer
from pyg_dynscale.partition import Partition
from tests.helpers import blackbox_cases as bcases
from tests.helpers import cuda_cases as cc
from tests.helpers import distributed_cases as cases

pytestmark = cc.cuda
EPOCHS = 3
#: (label, model case, partition, DistributedTrainer options, evaluate a later window)
CONFIGS = [
    ("stale drift, T-GCN", "tgcn2", "pgc", {"stale": "drift:0.05"}, False),
    ("stale static, DySAT", "dysat_mse", "pss-ts", {"stale": "static:0.5"}, False),
    ("stale drift, black-box user cell", "user_cell", "random", {"stale": "drift:0.05"}, False),
    ("stale drift, black-box GConvGRU", "GConvGRU", "random", {"stale": "drift:0.01"}, False),
    ("budgeted fusion shared-halo, T-GCN", "tgcn2", "chunks", {"fusion": 1600.0, "fusion_groups": "shared-halo"}, False),
    ("budgeted fusion shared-halo, DySAT", "dysat_mse", "pgc", {"fusion": 1200.0, "fusion_groups": "shared-halo"}, False),
    ("TM-GCN", "tmgcn", "pgc", {}, False),
    ("continued evaluation, T-GCN h0", "tgcn2_h0", "pgc", {}, True),
    ("continued evaluation, black-box user cell", "user_cell", "pts", {}, True),
    ("continued evaluation, black-box GConvGRU", "GConvGRU", "pts", {}, True),
]


def _partition(name: str, sig, scheme: str, R: int, model) -> Partition:  # noqa: ANN001
    if name in cc.BLACKBOX or name == "user_cell":  # the black-box path: vertex partitions
        return bcases.make_partition(sig, scheme, R)
    if scheme == "chunks":  # fixed chunks that split every snapshot (tests/distributed/test_fusion_groups.py)
        chunk = sig.supergraph().vertex % 9
        return Partition("manual", R, chunk % R, chunk=chunk)
    from pyg_dynscale.nn import adapt

    return cases.make_partition(sig, scheme, R, adapt(model, check=False).dependency_pattern(8))


def run_config(config: tuple, device: str, R: int) -> dict:
    """One configuration on this rank, on ``device``: what the comparison reads."""
    label, name, scheme, options, later = config
    m, head, loss, sig, kw, test = cc.build_window(name, device, later)
    part = _partition(name, sig, scheme, R, m)
    tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cc.optimizer_for(name), **kw, **options)
    losses, measured = [], []
    for epoch in range(EPOCHS):
        if epoch == EPOCHS - 1:
            loss_value, syncs = cc.count_host_syncs(tr.train_epoch, device)
        else:
            loss_value = tr.train_epoch()
        losses.append(loss_value)
        measured.append(dict(tr.traffic()["measured"]))
    params = list(m.parameters()) + (list(head.parameters()) if head is not None else [])
    out = {"losses": losses, "measured": measured, "params": [p.detach().cpu().clone() for p in params],
           "pred": tr.predict().cpu(), "transport": tr.transport.name, "device": str(tr.device), "syncs": syncs}
    if "fusion_groups" in options:  # the budget splits snapshots into groups (the same on every device)
        out["groups"] = tr.engine.fusion_loads()["groups"]
    if later:
        tpart = _partition(name, test, scheme, R, m)
        out["continued"] = tr.evaluate(test, tpart)["loss"]
        out["zero"] = tr.evaluate(test, tpart, continue_state=False)["loss"]
        out["later_pred"] = tr.predict(test, tpart).cpu()
    return out


def run_configs(rank: int, world_size: int, configs: list, devices: tuple) -> list:
    """Every configuration on every device, in these ranks: ``[{device: result}]``."""
    torch.set_default_dtype(torch.float64)  # PyGT's cells build their buffers with the default dtype
    return [{dev: run_config(c, dev, world_size) for dev in devices} for c in configs]


PYGT_CONFIGS = [c for c in CONFIGS if c[1] in cc.BLACKBOX]
OWN_CONFIGS = [c for c in CONFIGS if c[1] not in cc.BLACKBOX]


def check(results: list, configs: list, devices: tuple) -> None:
    """The device run == the reference run on every rank (1e-9; bytes exactly); replicas agree."""
    ref_dev, dev = devices
    for i, config in enumerate(configs):
        label = config[0]
        for rank, per_rank in enumerate(results):
            got, ref = per_rank[i][dev], per_rank[i][ref_dev]
            what = f"{label}, rank {rank}, {dev} vs {ref_dev}"
            cc.assert_close(got, ref, what)
            assert got["measured"] == ref["measured"], f"{what}: bytes per kind differ"
            if config[4]:
                assert abs(got["continued"] - ref["continued"]) <= cc.TOL, (what, got["continued"], ref["continued"])
                assert abs(got["zero"] - ref["zero"]) <= cc.TOL, (what, got["zero"], ref["zero"])
                assert abs(got["continued"] - got["zero"]) > 1e-6, f"{what}: the carried state changed nothing"
                err = float((got["later_pred"] - ref["later_pred"]).abs().max())
                assert err <= cc.TOL, f"{what}: later-window predictions differ by {err:.3g}"
            if torch.device(dev).type == "cuda":
                assert got["device"].startswith("cuda") and got["transport"] == "staged", (what, got["transport"])
            if rank:
                assert got["losses"] == results[0][i][dev]["losses"], f"{what}: ranks report other losses"
        if "fusion_groups" in config[3]:
            groups = [per_rank[i][dev]["groups"] for per_rank in results]
            assert groups == [per_rank[i][ref_dev]["groups"] for per_rank in results] and sum(groups) > len(results), \
                (label, groups)
        if "stale" in config[3]:  # the cache left rows out: what is compared is a stale run, not the exact one
            last = results[0][i][dev]["measured"][-1]
            assert last.get("stale_meta", 0) > 0, (label, last)


def run_and_check(configs: list, record_property) -> None:  # noqa: ANN001
    cc.two_ranks_on_both_devices(run_configs, configs, check, lambda c: c[0], record_property)


def test_cuda_exchange_paths_equal_cpu(record_property):
    run_and_check(OWN_CONFIGS, record_property)


def test_cuda_pygt_exchange_paths_equal_cpu(record_property):
    """PyGT's GConvGRU on the black-box path: the stale cache and continued evaluation."""
    from pyg_dynscale._optional import pygt_available

    if not pygt_available():  # PyGT's pure-Python wheel is enough (the package shims torch-sparse's annotation)
        pytest.skip("PyGT (torch-geometric-temporal) not installed")
    run_and_check(PYGT_CONFIGS, record_property)
