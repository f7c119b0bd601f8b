"""The black-box path: every PyGT recurrent class, called unchanged once per
snapshot, equals PyGT's own loop on one process (FusedTrainer) and across 2
and 3 gloo ranks (DistributedTrainer) under PTS, PGC and a random owner
array, in loss, gradients and parameters (float64); measured bytes equal the
StatePlan's; checkpointed training equals plain training."""
from __future__ import annotations

import pytest
import torch

from tests.helpers import blackbox_cases as cases

pytestmark = pytest.mark.skipif(not cases.HAVE_PYGT, reason="needs torch-geometric-temporal")

EPOCHS = 2
TOL = 1e-9
SPLIT = [c for c in cases.CELLS if c not in cases.NOT_SPLITTABLE]


def _trained(tr, m, head) -> dict:
    losses, grads = [], None
    for e in range(EPOCHS):
        losses.append(tr.train_epoch())
        if e == 0:
            grads = [p.grad.clone() if p.grad is not None else None for p in list(m.parameters()) + list(head.parameters())]
            traffic = tr.traffic() if hasattr(tr, "traffic") else None
    params = [p.detach().clone() for p in list(m.parameters()) + list(head.parameters())]
    return {"losses": losses, "grads": grads, "params": params, "traffic": traffic}


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and float((a - b).abs().max()) <= TOL * (1 + float(b.abs().max()))


def _assert_same(got: dict, ref: dict, where: str) -> None:
    for x, y in zip(got["losses"], ref["losses"]):
        assert abs(x - y) <= TOL * (1 + abs(y)), f"{where}: losses {got['losses']} vs {ref['losses']}"
    for i, (g, r) in enumerate(zip(got["grads"], ref["grads"])):
        assert _close(g, r), f"{where}: gradient {i} differs"
    for i, (p, r) in enumerate(zip(got["params"], ref["params"])):
        assert _close(p, r), f"{where}: parameter {i} differs"


def _fused_run(name: str, checkpoint_every=None) -> dict:
    from pyg_dynscale.runtime import FusedTrainer

    torch.set_default_dtype(torch.float64)
    try:
        m, head = cases.cell(name)
        sig = cases.signal(cases.CELLS[name][0])
        tr = FusedTrainer(m, sig, head=head, loss="mse", path="blackbox", checkpoint_every=checkpoint_every,
                          optimizer=torch.optim.SGD, lr=0.05)
        return _trained(tr, m, head)
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.fixture(scope="module")
def references() -> dict:
    return {name: cases.reference_run(name, EPOCHS) for name in cases.CELLS}


@pytest.mark.parametrize("name", list(cases.CELLS))
def test_one_process_equals_pygt_loop(name, references):
    _assert_same(_fused_run(name), references[name], name)


@pytest.mark.parametrize("name", ["GConvGRU_K3", "GConvLSTM", "DyGrEncoder"])
def test_checkpointed_equals_plain(name, references):
    for every in (1, 2):
        _assert_same(_fused_run(name, checkpoint_every=every), references[name], f"{name} checkpoint_every={every}")


def _ranks(rank: int, world_size: int, configs: list) -> list:
    from pyg_dynscale.distributed import DistributedTrainer

    torch.set_default_dtype(torch.float64)
    out = []
    for name, scheme, every, *path in configs:
        m, head = cases.cell(name)
        sig = cases.signal(cases.CELLS[name][0])
        part = cases.make_partition(sig, scheme, world_size)
        tr = DistributedTrainer(m, sig, part, head=head, loss="mse", path=(path or ["blackbox"])[0],
                                checkpoint_every=every, optimizer=lambda p: torch.optim.SGD(p, lr=0.05))
        res = _trained(tr, m, head)
        res["config"], res["path"] = (name, scheme, every), tr.path
        res["predicted"] = tr.plan.bytes_by_kind()["total"]
        out.append(res)
    return out


@pytest.mark.parametrize("world_size", [2, 3])
def test_distributed_equals_pygt_loop(world_size, references):
    from pyg_dynscale.distributed import spawn

    schemes = ["pts", "pgc", "random"]
    configs = [(n, s, None) for n in SPLIT for s in schemes]
    configs += [("GConvGRU_K3", "random", 2), ("GConvLSTM", "pss", 1), ("EvolveGCNO", "empty_rank", None),
                ("EvolveGCNH", "empty_rank", None), ("GConvLSTM", "empty_rank", None), ("DCRNN", "pss", None)]
    results = spawn(_ranks, world_size, configs, timeout=300)
    moved = 0
    for per_rank in zip(*results):
        name, scheme, every = per_rank[0]["config"]
        where = f"{name} {scheme} R={world_size} ckpt={every}"
        for r, res in enumerate(per_rank):
            _assert_same(res, references[name], f"{where} rank {r}")
        t = per_rank[0]["traffic"]
        assert t["measured"]["total"] - t["measured"].get("stale_meta", 0) == t["predicted"]["total"], where
        for ex in t["exchanges"]:
            assert (ex["measured_forward"], ex["measured_backward"]) == (ex["predicted_forward"], ex["predicted_backward"]), where
        moved += t["measured"]["total"]
    assert moved > 0  # the configurations do exchange state rows


def test_mpnnlstm_is_refused_on_split_snapshots_and_auto_takes_the_adapter(references):
    from pyg_dynscale.distributed import spawn
    from pyg_dynscale.training.launch import SpawnError

    with pytest.raises(SpawnError, match="BatchNorm"):
        spawn(_ranks, 2, [("MPNNLSTM", "pts", None)], timeout=120)
    for res in spawn(_ranks, 2, [("MPNNLSTM", "random", None, "auto")], timeout=120):
        r = res[0]
        assert r["path"] == "decomposed"  # the adapter with distributed BatchNorm statistics
        _assert_same(r, references["MPNNLSTM"], "MPNNLSTM auto R=2")


# ---------------------------------------------------------------- the user's own model class
def _recurrent_gcn_fused(cell_name: str, path: str, signal=None, state_transform: bool = False):
    from pyg_dynscale.runtime import FusedTrainer

    torch.set_default_dtype(torch.float64)
    try:
        m = cases.RecurrentGCN(cell_name, state_transform).double()
        sig = cases.signal("plain") if signal is None else signal
        tr = FusedTrainer(m, sig, loss="mse", path=path, optimizer=torch.optim.SGD, lr=0.05)
        res = _trained(tr, m, torch.nn.Sequential())
        res["path"] = tr.path
        return res
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("cell_name,auto_path", [("TGCN", "decomposed"), ("GConvGRU", "blackbox")])
def test_recurrent_gcn_unchanged_on_both_paths(cell_name, auto_path):
    ref = cases.recurrent_gcn_reference(cell_name, EPOCHS)
    got = _recurrent_gcn_fused(cell_name, "auto")
    assert got["path"] == auto_path
    _assert_same(got, ref, f"RecurrentGCN({cell_name}) auto")
    _assert_same(_recurrent_gcn_fused(cell_name, "blackbox"), ref, f"RecurrentGCN({cell_name}) blackbox")


def test_module_whose_state_is_not_the_cells_output_is_not_decomposed():
    from pyg_dynscale.errors import DecompositionMismatchError

    ref = cases.recurrent_gcn_reference("TGCN", EPOCHS, state_transform=True)
    got = _recurrent_gcn_fused("TGCN", "auto", state_transform=True)
    assert got["path"] == "blackbox"  # the self-check sent it to the path that calls it unchanged
    _assert_same(got, ref, "RecurrentGCN(TGCN, tanh state) auto")
    with pytest.raises(DecompositionMismatchError):
        _recurrent_gcn_fused("TGCN", "decomposed", state_transform=True)


def test_pygt_signal_objects_are_accepted():
    from torch_geometric_temporal.signal import StaticGraphTemporalSignal

    g = torch.Generator().manual_seed(2)
    n, steps = 7, 4
    ei = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    ei = torch.cat([ei, ei.flip(0)], 1)
    w = torch.rand(ei.shape[1], generator=g, dtype=torch.float64) + 0.5
    xs = [torch.randn(n, cases.F, generator=g, dtype=torch.float64).numpy() for _ in range(steps)]
    ys = [torch.randn(n, generator=g, dtype=torch.float64).numpy() for _ in range(steps)]
    pygt = StaticGraphTemporalSignal(ei.numpy(), w.numpy(), xs, ys)
    from pyg_dynscale import DynamicGraphSignal

    ours = DynamicGraphSignal.from_pygt(pygt)
    a = _recurrent_gcn_fused("GConvGRU", "auto", signal=pygt)
    b = _recurrent_gcn_fused("GConvGRU", "auto", signal=ours)
    assert a["losses"] == b["losses"]


def _recurrent_gcn_ranks(rank: int, world_size: int, configs: list) -> list:
    from pyg_dynscale.distributed import DistributedTrainer

    torch.set_default_dtype(torch.float64)
    out = []
    for cell_name, path, scheme in configs:
        m = cases.RecurrentGCN(cell_name).double()
        sig = cases.signal("plain")
        tr = DistributedTrainer(m, sig, cases.make_partition(sig, scheme, world_size), loss="mse", path=path,
                                optimizer=lambda p: torch.optim.SGD(p, lr=0.05))
        res = _trained(tr, m, torch.nn.Sequential())
        res["config"], res["path"], res["pred"] = (cell_name, path, scheme), tr.path, tr.predict()
        out.append(res)
    return out


def test_recurrent_gcn_distributed_on_both_paths():
    from pyg_dynscale.distributed import spawn

    configs = [("TGCN", "auto", "pgc"), ("TGCN", "blackbox", "random"), ("GConvGRU", "auto", "pts"),
               ("GConvGRU", "auto", "random")]
    refs = {c: cases.recurrent_gcn_reference(c, EPOCHS) for c in ("TGCN", "GConvGRU")}
    preds = {}
    for c in refs:  # one process, same training: what predict() must return on every rank
        from pyg_dynscale.runtime import FusedTrainer

        torch.set_default_dtype(torch.float64)
        try:
            m = cases.RecurrentGCN(c).double()
            tr = FusedTrainer(m, cases.signal("plain"), loss="mse", optimizer=torch.optim.SGD, lr=0.05)
            for _ in range(EPOCHS):
                tr.train_epoch()
            preds[c] = tr.predict()
        finally:
            torch.set_default_dtype(torch.float32)
    for per_rank in zip(*spawn(_recurrent_gcn_ranks, 2, configs, timeout=300)):
        cell_name, path, scheme = per_rank[0]["config"]
        assert per_rank[0]["path"] == ("decomposed" if (cell_name, path) == ("TGCN", "auto") else "blackbox")
        for res in per_rank:
            _assert_same(res, refs[cell_name], f"RecurrentGCN({cell_name}) {path} {scheme}")
            assert _close(res["pred"], preds[cell_name]), f"RecurrentGCN({cell_name}) {path} {scheme}: predict()"


# ---------------------------------------------------------------- the depth check
def test_halo_check_catches_an_under_declared_depth():
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    from pyg_dynscale.nn.halo_check import HaloCheckError, check_halo
    from pyg_dynscale.nn.snapshot_model import SnapshotModel

    x = torch.randn(10, cases.F)
    m = SnapshotModel(GConvGRU(cases.F, cases.H, 3), depth=1)
    m.probe(x)
    with pytest.raises(HaloCheckError, match="smallest uniform depth that passes is 4"):
        check_halo(m, x)
    good = SnapshotModel(GConvGRU(cases.F, cases.H, 3))
    good.probe(x)
    assert good.depth.hops == 4 and check_halo(good, x) <= 1e-9


class _Centered(torch.nn.Module):
    """Subtracts the snapshot mean: every output reads every node."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(cases.F, cases.H)

    def forward(self, x, edge_index, edge_weight):
        return self.lin(x - x.mean(0))


def test_halo_check_names_a_whole_snapshot_dependency_and_inference_needs_a_declaration():
    from pyg_dynscale.errors import ModelInputError
    from pyg_dynscale.nn.halo_check import HaloCheckError, check_halo
    from pyg_dynscale.nn.snapshot_model import SnapshotModel

    with pytest.raises(ModelInputError, match="cannot be inferred"):
        SnapshotModel(_Centered())
    m = SnapshotModel(_Centered(), depth=2)
    x = torch.randn(10, cases.F)
    m.probe(x)
    with pytest.raises(HaloCheckError, match="whole snapshot"):
        check_halo(m, x)
    exact = SnapshotModel(_Centered(), depth=None)
    exact.probe(x)
    assert check_halo(exact, x) == 0.0


def _bad_blackbox_options(rank: int, world_size: int) -> list:
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.errors import ModelInputError

    sig = cases.signal("plain")
    part = cases.make_partition(sig, "random", world_size)
    seen = []
    for kwargs in ({"fusion": "none"}, {"input_halo": "exchange"}, {"h0": torch.zeros(1, 4)}):
        try:
            DistributedTrainer(GConvGRU(cases.F, cases.H, 2).double(), sig, part, path="blackbox", **kwargs)
        except (ModelInputError, NotImplementedError) as exc:
            seen.append(str(exc))
    return seen


def test_decomposed_only_options_are_refused_on_the_black_box_path():
    from pyg_dynscale.distributed import spawn

    seen = spawn(_bad_blackbox_options, 2)[0]
    assert len(seen) == 3  # (the stale cache works on this path: tests/distributed/test_stale_blackbox.py)
    assert "decomposed-path option" in seen[0] and "decomposed-path option" in seen[1]
    assert "h0" in seen[2]


def _under_declared(rank: int, world_size: int) -> list:
    from pyg_dynscale.distributed import DistributedTrainer

    torch.set_default_dtype(torch.float64)
    m, head = cases.cell("GConvGRU_K3")
    sig = cases.signal("plain")
    tr = DistributedTrainer(m, sig, cases.make_partition(sig, "random", world_size), head=head, loss="mse",
                            path="blackbox", depth=1, check=False, optimizer=lambda p: torch.optim.SGD(p, lr=0.05))
    return [tr.train_epoch() for _ in range(EPOCHS)]


def test_an_unchecked_under_declared_depth_trains_a_different_model(references):
    """The oracle can fail: with the check off, depth 1 for GConvGRU(K=3) (needs 4) changes the loss."""
    from pyg_dynscale.distributed import spawn

    losses = spawn(_under_declared, 2)[0]
    assert abs(losses[0] - references["GConvGRU_K3"]["losses"][0]) > 1e-6


# ---------------------------------------------------------------- refusals
def test_refusals_name_the_reason():
    from torch_geometric_temporal.nn.recurrent import AGCRN, EvolveGCNO, GConvGRU

    from pyg_dynscale.errors import ModelInputError, UnsupportedModelError
    from pyg_dynscale.runtime import FusedTrainer

    sig = cases.signal("plain")
    with pytest.raises(UnsupportedModelError, match="node embeddings"):
        FusedTrainer(AGCRN(cases.V, cases.F, cases.H, 2, 3), sig)
    with pytest.raises(ModelInputError, match="evolving weight"):
        FusedTrainer(EvolveGCNO(cases.F).double(), sig, checkpoint_every=2)
    with pytest.raises(ModelInputError, match="checkpoint_every"):
        FusedTrainer(GConvGRU(cases.F, cases.H, 2).double(), sig, checkpoint_every=0)
    with pytest.raises(ModelInputError, match="path"):
        FusedTrainer(GConvGRU(cases.F, cases.H, 2).double(), sig, path="fast")


# ---------------------------------------------------------------- link prediction
def _link_run(rank: int, world_size: int) -> dict:
    from pyg_dynscale.nn.snapshot_model import default_dtype

    with default_dtype(torch.float64):  # also called in the test process: restore the default after
        return _link_run_float64(world_size)


def _link_run_float64(world_size: int) -> dict:
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.runtime import FusedTrainer
    from tests.helpers import distributed_cases as dcases

    sig = dcases.signal()  # changing vertex sets, an empty snapshot, labelled pairs
    torch.manual_seed(5)
    m = GConvGRU(dcases.F, 4, 2).double()
    if world_size == 1:
        tr = FusedTrainer(m, sig, loss="bce_link", optimizer=torch.optim.SGD, lr=0.1)
    else:
        part = cases.Partition("random", world_size, torch.randint(0, world_size, (sig.num_vertex_time_nodes,),
                                                                   generator=torch.Generator().manual_seed(9)))
        tr = DistributedTrainer(m, sig, part, loss="bce_link", optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    res = _trained(tr, m, torch.nn.Sequential())
    res["path"] = tr.path
    return res


def test_link_prediction_distributed_equals_one_process():
    from pyg_dynscale.distributed import spawn

    ref = _link_run(0, 1)
    assert ref["path"] == "blackbox"
    for r, res in enumerate(spawn(_link_run, 2)):
        _assert_same(res, ref, f"GConvGRU bce_link rank {r}")
        t = res["traffic"]
        assert t["measured"]["readout"] == t["predicted"]["readout"] > 0
        assert t["measured"]["total"] == t["predicted"]["total"]
