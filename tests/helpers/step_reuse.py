"""The black-box cells and the FusedTrainer run that the step-reuse tests compare (with and without
ReInc's reuse) and that the distributed reuse and stale-cache tests build on."""
from __future__ import annotations

import torch

from tests.helpers import blackbox_cases as cases

EPOCHS = 3


def make_cell(name: str, K):
    from torch_geometric_temporal.nn import recurrent as rec

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)  # the same initial values whatever the caller's default
    try:
        torch.manual_seed(3)
        m = rec.TGCN(cases.F, cases.H) if K is None else getattr(rec, name)(cases.F, cases.H, K)
        return m.double(), torch.nn.Linear(cases.H, 1).double()
    finally:
        torch.set_default_dtype(old)


def train(m, head, sig, reuse: bool, every=None) -> dict:
    from pyg_dynscale.runtime import FusedTrainer

    torch.set_default_dtype(torch.float64)  # PyGT's DCRNN builds its degree vectors with the default dtype
    try:
        tr = FusedTrainer(m, sig, head=head, loss="mse", path="blackbox", checkpoint_every=every, reuse=reuse,
                          optimizer=torch.optim.SGD(list(m.parameters()) + list(head.parameters()), lr=0.05))
        calls = []
        hook = m.register_forward_hook(lambda *a: calls.append(1))
        losses = [tr.train_epoch() for _ in range(EPOCHS)]
        pred = tr.predict()
        hook.remove()
        hits = tr.runner.reuse.hits if tr.runner.reuse is not None else 0
    finally:
        torch.set_default_dtype(torch.float32)
    params = [p.detach().clone() for p in list(m.parameters()) + list(head.parameters())]
    return {"losses": losses, "params": params, "pred": pred, "calls": len(calls), "reuse": tr.runner.reuse,
            "hits": hits}
