"""Models, signals and partitions of the distributed oracle tests (imported by
the spawned ranks and by the test process; module-level so they pickle)."""
from __future__ import annotations

import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.nn import DySAT, MPNNLSTM, MPNNLSTMDGC, TGCN, TMGCN
from pyg_dynscale.nn.decomposed import DecomposedModule
from pyg_dynscale.partition import BlockPattern, DependencyPattern, Partition, partition
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.optional_deps import pygt_installed

#: PyGT's pure wheel is enough (torch-sparse: the package's stand-in for its one annotation)
HAVE_PYGT = pygt_installed()
T, V, F = 6, 10, 3


def signal() -> DynamicGraphSignal:
    """Changing vertex sets, an empty snapshot (t=3), node targets and link labels."""
    base = make_dynamic_signal(seed=6, T=T, V=V, F=F)
    g = torch.Generator().manual_seed(6)
    eis, ws, xs, ys, ids, lis, lbs = [], [], [], [], [], [], []
    for d in base:
        n = d.num_nodes
        eis.append(d.edge_index)
        ws.append(d.edge_attr)
        xs.append(d.x)
        ys.append(d.y)
        ids.append(d.n_id)
        k = 5 if n else 0
        lis.append(torch.randint(0, max(n, 1), (2, k), generator=g))
        lbs.append(torch.randint(0, 2, (k,), generator=g).double())
    return DynamicGraphSignal(eis, ws, xs, ys, node_ids=ids, num_vertices=V, dtype=torch.float64,
                              edge_label_index=lis, edge_label=lbs)


class StackedTGCN(DecomposedModule):
    """Two T-GCN blocks, the second on the first's outputs: a multi-block
    recurrent model (each block carries its own state; ``h0`` enters the first)."""

    time_kind = "recurrent"

    def __init__(self, in_channels: int, hidden: int) -> None:
        super().__init__()
        self.cells = torch.nn.ModuleList([TGCN(in_channels, hidden), TGCN(hidden, hidden)])
        self.in_channels, self.out_channels, self.state_width = in_channels, hidden, hidden

    @property
    def num_blocks(self) -> int:
        return 2

    def structure_encoder(self, graph, x=None, block=0, halo=None):
        return self.cells[block].structure_encoder(graph, graph.x if x is None else x, block=block, halo=halo)

    def time_encoder(self, z, graph, h0=None, block=0):
        return self.cells[block].time_encoder(z, graph, h0)

    def dependency_pattern(self, bytes_per_element: int = 4):
        H = self.out_channels
        return DependencyPattern((BlockPattern((self.in_channels,), "recurrent", H, 3 * H),
                                  BlockPattern((H,), "recurrent", H, 3 * H)), bytes_per_element, "stacked_tgcn")


def model(name: str):
    """(model, head, loss) with fixed initial parameters (float64)."""
    torch.manual_seed(11)
    H = 4
    if name == "tgcn1":
        m, head, loss = TGCN(F, H), torch.nn.Linear(H, 1), "mse"
    elif name in ("tgcn2", "tgcn2_h0"):  # h0 enters the first block only
        m, head, loss = TGCN(F, H, num_layers=2), torch.nn.Linear(H, 1), "mse"
    elif name in ("stacked", "stacked_h0"):
        m, head, loss = StackedTGCN(F, H), torch.nn.Linear(H, 1), "mse"
    elif name == "pygt_tgcn":
        from torch_geometric_temporal.nn.recurrent import TGCN as PyGTTGCN

        m, head, loss = PyGTTGCN(F, H), torch.nn.Linear(H, 1), "mse"
    elif name == "dysat_mse":
        m, head, loss = DySAT(F, H, T, structural_heads=2, temporal_heads=2, num_blocks=2), torch.nn.Linear(H, 1), "mse"
    elif name == "dysat_link":
        m, head, loss = DySAT(F, H, T, structural_heads=2, temporal_heads=2, num_blocks=2), None, "bce_link"
    elif name == "mpnn":
        m, head, loss = MPNNLSTM(F, H, 1, 1, 0.0), torch.nn.Linear(2 * H + F, 1), "mse"
    elif name == "tmgcn":  # banded M-transform windows (band 3 of T = 6) in three of its four blocks
        m, head, loss = TMGCN(F, H, band=3, num_layers=2), torch.nn.Linear(H, 1), "mse"
    elif name == "mpnn_dgc":
        m, head, loss = MPNNLSTMDGC(F, H), torch.nn.Linear(2 * H, 1), "mae"
    else:
        raise KeyError(name)
    m = m.double()
    if head is not None:
        head = head.double()
    return m, head, loss


def initial_state(name: str, sig: DynamicGraphSignal):
    """``h0`` per temporal sequence for the ``*_h0`` cases (else ``None``)."""
    if not name.endswith("_h0"):
        return None
    S = sig.supergraph().sequence_ptr.numel() - 1
    return torch.randn(S, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


MODELS = ["tgcn1", "tgcn2", "tgcn2_h0", "stacked_h0", "dysat_mse", "dysat_link", "mpnn", "mpnn_dgc", "tmgcn"] + (["pygt_tgcn"] if HAVE_PYGT else [])
SCHEMES = ["pss", "pts", "pss-ts", "pgc", "random", "empty_rank"]


def make_partition(sig: DynamicGraphSignal, scheme: str, R: int, pattern) -> Partition:
    N = sig.num_vertex_time_nodes
    if scheme == "random":
        return Partition("random", R, torch.randint(0, R, (N,), generator=torch.Generator().manual_seed(R)))
    if scheme == "empty_rank":  # the last rank owns nothing
        return Partition("manual", R, torch.randint(0, max(R - 1, 1), (N,), generator=torch.Generator().manual_seed(7)))
    return partition(sig, scheme, R, pattern, seed=0)


def optimizer_for(name: str):
    # SGD keeps the parameter comparison strict; Adam is covered on two models
    if name in ("tgcn2", "dysat_link"):
        return lambda p: torch.optim.Adam(p, lr=0.01)
    return lambda p: torch.optim.SGD(p, lr=0.1)
