"""What the CUDA tests share: the marker, the reference runs on the CPU, and
the float64 comparison (module-level so that spawned ranks import it)."""
from __future__ import annotations

import collections
import os
import traceback
import warnings
from typing import Any, Callable, Optional

import pytest
import torch

from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import blackbox_cases as bcases
from tests.helpers import distributed_cases as cases

#: skips a test (and its module's collection stays cheap) on a machine without a GPU
cuda = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
TOL = 1e-9
EPOCHS = 3
DECOMPOSED = ["tgcn2", "tgcn2_h0", "dysat_mse", "dysat_link", "mpnn_dgc"]
BLACKBOX = ["GConvGRU", "DCRNN"]
ALL = DECOMPOSED + ["user_cell"] + BLACKBOX


def build(name: str, device: str):
    """``(model, head, loss, signal, kwargs)`` of a case on ``device`` (float64)."""
    if name == "user_cell":  # a black-box module that needs no PyGT
        from tests.helpers.cells import UserCell

        torch.manual_seed(0)
        m, head = UserCell(cases.F, 4).double(), torch.nn.Linear(4, 1).double()
        return m.to(device), head.to(device), "mse", cases.signal(), {"path": "blackbox", "depth": 1}
    if name in BLACKBOX:
        from pyg_dynscale._optional import pygt_available

        if not pygt_available():  # PyGT's pure-Python wheel is enough: the package shims torch-sparse's annotation
            pytest.skip("PyGT (torch-geometric-temporal) not installed")
        m, head = bcases.cell(name)
        return m.to(device), head.to(device), "mse", bcases.signal("plain"), {"path": "blackbox"}
    sig = cases.signal()
    m, head, loss = cases.model(name)
    h0 = cases.initial_state(name, sig)
    kw = {"h0": None if h0 is None else h0.to(device)}
    return m.to(device), (head.to(device) if head is not None else None), loss, sig, kw


def optimizer_for(name: str):
    return cases.optimizer_for(name) if name not in BLACKBOX + ["user_cell"] else (lambda p: torch.optim.SGD(p, lr=0.05))


def fused_run(name: str, device: str, **extra) -> dict:
    """Losses, parameters and predictions of ``EPOCHS`` FusedTrainer epochs."""
    m, head, loss, sig, kw = build(name, device)
    params = list(m.parameters()) + (list(head.parameters()) if head is not None else [])
    tr = FusedTrainer(m, sig, head=head, loss=loss, optimizer=optimizer_for(name)(params), **kw, **extra)
    losses = [tr.train_epoch() for _ in range(EPOCHS)]
    return {"losses": losses, "params": [p.detach().cpu().clone() for p in params], "pred": tr.predict().cpu(),
            "trainer": tr}


def assert_close(got: dict, ref: dict, what: str) -> None:
    for e, (a, b) in enumerate(zip(got["losses"], ref["losses"])):
        assert abs(a - b) <= TOL, f"{what}: epoch {e} loss {a} vs {b}"
    for i, (a, b) in enumerate(zip(got["params"], ref["params"])):
        err = float((a - b).abs().max()) if a.numel() else 0.0
        assert err <= TOL, f"{what}: parameter {i} differs by {err:.3g}"
    err = float((got["pred"] - ref["pred"]).abs().max())
    assert err <= TOL, f"{what}: predictions differ by {err:.3g}"


def _package_line(filename: str, lineno: int) -> str:
    """The innermost line of pyg_dynscale on the current stack (else where the warning points)."""
    for frame in reversed(traceback.extract_stack()):
        path = frame.filename.replace(os.sep, "/")
        if "/pyg_dynscale/" in path:
            return f"{path.split('/pyg_dynscale/', 1)[1]}:{frame.lineno}"
    return f"{os.path.basename(filename)}:{lineno}"


def count_host_syncs(fn: Callable[[], Any], device: Any) -> tuple[Any, Optional[str]]:
    """``(fn(), what synchronized)``: on a CUDA device, the host synchronizations ``fn`` caused as
    ``torch.cuda.set_sync_debug_mode("warn")`` reports them (each synchronizing call: a copy to the
    host, ``.item()``, ``nonzero``, a stream synchronize), as ``"N (file:line xK, ...)"`` with the
    four package lines that caused most; ``None`` on another device. For the GPU report: printed and
    recorded, not asserted (tests/helpers/host_syncs.py is the CPU counter the budgets are checked with)."""
    if torch.device(device).type != "cuda":
        return fn(), None
    where: collections.Counter = collections.Counter()

    def seen(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001 - warnings' signature
        if "synchronizing CUDA operation" in str(message):
            where[_package_line(filename, lineno)] += 1

    torch.cuda.synchronize()
    with warnings.catch_warnings():  # restores showwarning and the filters
        warnings.simplefilter("always")
        warnings.showwarning = seen
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    top = ", ".join(f"{k} x{n}" for k, n in where.most_common(4))
    return out, f"{sum(where.values())}" + (f" ({top})" if top else "")


def build_window(name: str, device: str, later: bool) -> tuple:
    """:func:`build`, and with ``later`` its signal split in two halves: ``(model, head, loss, training
    signal, kwargs, later window or None)``; a case with ``h0`` then gets one initial state per
    training sequence."""
    m, head, loss, sig, kw = build(name, device)
    test = None
    if later:
        sig, test = sig.split(0.5)
        if name.endswith("_h0"):
            kw = {**kw, "h0": cases.initial_state(name, sig).to(device)}
    return m, head, loss, sig, kw, test


def two_ranks_on_both_devices(run: Callable, items: list, check: Callable, label: Callable[[Any], str],
                              record_property: Callable, devices: tuple = ("cpu", "cuda:0")) -> None:
    """``run(rank, world, items, devices)`` on 2 gloo ranks sharing the GPU (each item's result per
    device, ``[{device: result}]``; ``devices``: the reference, then the device under test), each
    item's host syncs on the device under test recorded for the report (``label(item)`` names it; its
    ``"syncs"`` entry), then ``check(results, items, devices)``."""
    from pyg_dynscale.distributed import spawn

    results = spawn(run, 2, items, devices, backend="gloo", timeout=90)
    for i, item in enumerate(items):
        syncs = [r[i][devices[1]]["syncs"] for r in results]
        record_property(f"host_syncs:{label(item)} (one epoch, ranks 0 / 1)", " / ".join(map(str, syncs)))
        print(f"host syncs of one CUDA epoch, {label(item)}: {syncs}")
    check(results, items, devices)
