"""PyGT cells, signals, partitions and the reference loop of the black-box
tests (module-level so that spawned ranks can import them).

The reference is PyGT's loop (C) written out independently of the package:
per snapshot, call the module on the whole snapshot with the state rows of its
vertices (a table per state component; zeros for a vertex never seen), write
the new rows back, loss = mean over snapshots of the MSE of ``head(y)``, one
backward and one optimizer step per epoch, and EvolveGCN's weight detached
after the step (PyGT's EvolveGCN examples)."""
from __future__ import annotations

import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.partition import DependencyPattern, Partition, partition  # noqa: F401  (Partition: tests)
from tests.helpers.optional_deps import pygt_installed

HAVE_PYGT = pygt_installed()  # not imported here: a bare CUDA box collects without it
T, V, F, H, P = 5, 12, 3, 4, 2

#: class -> (signal kind, number of state components)
CELLS = {
    "TGCN": ("plain", 1), "TGCN2": ("plain", 1), "A3TGCN": ("periods", 1), "A3TGCN2": ("periods", 1),
    "GConvGRU": ("plain", 1), "GConvGRU_K3": ("plain", 1), "GConvLSTM": ("plain", 2), "GCLSTM": ("plain", 2),
    "DCRNN": ("plain", 1), "LRGCN": ("typed", 2), "DyGrEncoder": ("plain", 2), "EvolveGCNO": ("plain", 0),
    "EvolveGCNH": ("fixed", 0), "MPNNLSTM": ("fixed", 0),
}
#: cells the distributed black-box path must refuse (and why the test expects it)
NOT_SPLITTABLE = ("MPNNLSTM",)


def signal(kind: str = "plain", seed: int = 5) -> DynamicGraphSignal:
    """Float64 signal with node targets. ``plain``: changing vertex sets;
    ``periods``: features ``[n, F, P]``; ``typed``: an ``edge_type`` field;
    ``fixed``: every vertex in every snapshot. Edges are symmetric, unique
    and sorted by (target, source) (PyGT's DCRNN needs that to be local)."""
    g = torch.Generator().manual_seed(seed)
    eis, ws, xs, ys, ids, types = [], [], [], [], [], []
    for t in range(T):
        if kind == "fixed":
            keep = torch.arange(V)
        else:
            keep = torch.randperm(V, generator=g)[: V - (t % 3)].sort().values
        n = keep.numel()
        a = torch.randint(0, n, (2 * n,), generator=g)
        b = torch.randint(0, n, (2 * n,), generator=g)
        ring = torch.arange(n)
        a, b = torch.cat([a, ring]), torch.cat([b, (ring + 1) % n])
        a, b = a[a != b], b[a != b]
        lo, hi = torch.minimum(a, b), torch.maximum(a, b)
        key = torch.unique(lo * n + hi)
        lo, hi = key // n, key % n
        w = torch.rand(key.numel(), generator=g, dtype=torch.float64) + 0.5
        src, dst, ww = torch.cat([lo, hi]), torch.cat([hi, lo]), torch.cat([w, w])
        order = torch.argsort(dst * n + src)
        eis.append(torch.stack([src[order], dst[order]]))
        ws.append(ww[order])
        shape = (n, F, P) if kind == "periods" else (n, F)
        xs.append(torch.randn(*shape, generator=g, dtype=torch.float64))
        ys.append(torch.randn(n, generator=g, dtype=torch.float64))
        ids.append(keep)
        types.append(torch.randint(0, 2, (order.numel(),), generator=g))
    extra = {"edge_type": types} if kind == "typed" else {}
    return DynamicGraphSignal(eis, ws, xs, ys, node_ids=ids, num_vertices=V, dtype=torch.float64, **extra)


def cell(name: str) -> tuple:
    """``(module, head)`` with fixed initial parameters, float64."""
    from torch_geometric_temporal.nn import recurrent as rec

    torch.manual_seed(3)
    if name == "TGCN":
        m = rec.TGCN(F, H)
    elif name == "TGCN2":
        m = rec.TGCN2(F, H, 1)
    elif name == "A3TGCN":
        m = rec.A3TGCN(F, H, P)
    elif name == "A3TGCN2":
        m = rec.A3TGCN2(F, H, P, 1)
    elif name == "GConvGRU":
        m = rec.GConvGRU(F, H, 2)
    elif name == "GConvGRU_K3":
        m = rec.GConvGRU(F, H, 3)
    elif name == "GConvLSTM":
        m = rec.GConvLSTM(F, H, 2)
    elif name == "GCLSTM":
        m = rec.GCLSTM(F, H, 2)
    elif name == "DCRNN":
        m = rec.DCRNN(F, H, 2)
    elif name == "LRGCN":
        m = rec.LRGCN(F, H, 2, 1)
    elif name == "DyGrEncoder":
        m = rec.DyGrEncoder(H, 1, "add", H, 1)
    elif name == "EvolveGCNO":
        m = rec.EvolveGCNO(F)
    elif name == "EvolveGCNH":
        m = rec.EvolveGCNH(V, F)
    elif name == "MPNNLSTM":
        m = rec.MPNNLSTM(F, H, V, 1, 0.0)
    else:
        raise KeyError(name)
    for mod in m.modules():  # PyGT's A3TGCN puts its attention on CUDA when it can
        for k, p in list(mod._parameters.items()):
            if p is not None and p.device.type != "cpu":
                mod._parameters[k] = torch.nn.Parameter(p.detach().cpu())
    width = {"EvolveGCNO": F, "EvolveGCNH": F, "MPNNLSTM": 2 * H + F, "DyGrEncoder": H}.get(name, H)
    head = torch.nn.Linear(width, 1)
    return m.double(), head.double()


def call(name: str, m, d, states: list) -> tuple:
    """One snapshot, as a PyGT user writes it: ``(y, [new states])``."""
    x, ei, ew = d.x, d.edge_index, d.edge_attr
    if name in ("TGCN2", "A3TGCN2"):
        h = m(x.unsqueeze(0), ei, ew, states[0].unsqueeze(0))[0]
        return h, [h]
    if name in ("GConvLSTM", "GCLSTM"):
        h, c = m(x, ei, ew, states[0], states[1])
        return h, [h, c]
    if name == "LRGCN":
        h, c = m(x, ei, d.edge_type, states[0], states[1])
        return h, [h, c]
    if name == "DyGrEncoder":
        y, h, c = m(x, ei, ew, states[0], states[1])
        return y, [h, c]
    if name in ("EvolveGCNO", "EvolveGCNH", "MPNNLSTM"):
        return m(x, ei, ew), []
    h = m(x, ei, ew, states[0])
    return h, [h]


def reference_epoch(name: str, m, head, sig: DynamicGraphSignal, widths: tuple):
    """PyGT's loop over one epoch: the loss (with autograd) and the outputs."""
    tables = [torch.zeros(sig.num_vertices, w, dtype=torch.float64) for w in widths]
    per, outs = [], []
    for t in range(sig.num_snapshots):
        d = sig.snapshot(t)
        if d.num_nodes == 0 and name not in ("EvolveGCNO", "EvolveGCNH"):
            continue
        y, new = call(name, m, d, [tab.index_select(0, d.n_id) for tab in tables])
        tables = [tab.index_copy(0, d.n_id, h) for tab, h in zip(tables, new)]
        if d.num_nodes:
            pred = head(y).squeeze(1)
            per.append(((pred - d.y) ** 2).mean())
            outs.append(y)
    return torch.stack(per).mean(), torch.cat(outs)


def detach_evolving(m) -> None:
    """PyGT's EvolveGCN examples: ``model.recurrent.weight = ...weight.detach()``."""
    if getattr(m, "weight", None) is not None and not isinstance(m.weight, torch.nn.Parameter):
        m.weight = m.weight.detach()


def reference_run(name: str, epochs: int, lr: float = 0.05) -> dict:
    torch.set_default_dtype(torch.float64)  # PyGT's DCRNN builds its degree vectors with the default dtype
    try:
        m, head = cell(name)
        sig = signal(CELLS[name][0])
        widths = (H,) * CELLS[name][1] if name != "DyGrEncoder" else (H, H)
        opt = torch.optim.SGD(list(m.parameters()) + list(head.parameters()), lr=lr)
        losses, grads = [], None
        for e in range(epochs):
            opt.zero_grad()
            loss, _ = reference_epoch(name, m, head, sig, widths)
            loss.backward()
            if e == 0:
                grads = [p.grad.clone() if p.grad is not None else None for p in list(m.parameters()) + list(head.parameters())]
            opt.step()
            detach_evolving(m)
            losses.append(float(loss.detach()))
        return {"losses": losses, "grads": grads, "params": [p.detach().clone() for p in list(m.parameters()) + list(head.parameters())]}
    finally:
        torch.set_default_dtype(torch.float32)


def make_partition(sig: DynamicGraphSignal, scheme: str, R: int) -> Partition:
    N = sig.num_vertex_time_nodes
    if scheme == "random":
        return Partition("random", R, torch.randint(0, R, (N,), generator=torch.Generator().manual_seed(R + 1)))
    if scheme == "empty_rank":  # the last rank owns nothing (it still calls evolving modules every snapshot)
        return Partition("manual", R, torch.randint(0, R - 1, (N,), generator=torch.Generator().manual_seed(7)))
    return partition(sig, scheme, R, DependencyPattern.preset("tgcn", F, H), seed=0)


class RecurrentGCN(torch.nn.Module):
    """PyGT's example model (examples/recurrent/*_example.py): a cell, ReLU,
    a Linear head; ``forward(x, edge_index, edge_weight, h) -> (y, h)``."""

    def __init__(self, cell_name: str, state_transform: bool = False) -> None:
        super().__init__()
        from torch_geometric_temporal.nn import recurrent as rec

        torch.manual_seed(4)
        self.recurrent = rec.TGCN(F, H) if cell_name == "TGCN" else rec.GConvGRU(F, H, 2)
        self.linear = torch.nn.Linear(H, 1)
        self.state_transform = state_transform

    def forward(self, x, edge_index, edge_weight, prev_hidden_state):
        h = self.recurrent(x, edge_index, edge_weight, prev_hidden_state)
        y = self.linear(torch.relu(h))
        return y, (torch.tanh(h) if self.state_transform else h)


def recurrent_gcn_reference(cell_name: str, epochs: int, lr: float = 0.05, state_transform: bool = False) -> dict:
    """PyGT's loop (C) for :class:`RecurrentGCN`: ``y_hat, h = model(..., h)``,
    cost = mean over snapshots of ``mean((y_hat.squeeze() - y)**2)``."""
    torch.set_default_dtype(torch.float64)
    try:
        m = RecurrentGCN(cell_name, state_transform).double()
        sig = signal("plain")
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        losses, grads = [], None
        for e in range(epochs):
            opt.zero_grad()
            table = torch.zeros(sig.num_vertices, H)
            per = []
            for t in range(sig.num_snapshots):
                d = sig.snapshot(t)
                y_hat, h = m(d.x, d.edge_index, d.edge_attr, table.index_select(0, d.n_id))
                table = table.index_copy(0, d.n_id, h)
                per.append(torch.mean((y_hat.squeeze(1) - d.y) ** 2))
            loss = torch.stack(per).mean()
            loss.backward()
            if e == 0:
                grads = [p.grad.clone() for p in m.parameters()]
            opt.step()
            losses.append(float(loss.detach()))
        return {"losses": losses, "grads": grads, "params": [p.detach().clone() for p in m.parameters()]}
    finally:
        torch.set_default_dtype(torch.float32)
