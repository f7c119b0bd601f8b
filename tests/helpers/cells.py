"""Small user modules the tests share."""
from __future__ import annotations

import torch


class UserCell(torch.nn.Module):
    """A user's recurrent cell that aggregates its state over one hop (black-box
    path), written with ops that read nothing back (PyG's GCNConv rebuilds its
    self loops with a boolean mask at every call: a host synchronization of
    the user's module, not of the runner)."""

    def __init__(self, F: int, H: int) -> None:
        super().__init__()
        self.lx, self.lh, self.H = torch.nn.Linear(F, H), torch.nn.Linear(H, H), H

    def forward(self, x, edge_index, edge_weight=None, h=None):  # noqa: ANN001
        if h is None:
            h = x.new_zeros(x.shape[0], self.H)
        msg = self.lh(h).index_select(0, edge_index[0])
        if edge_weight is not None:
            msg = msg * edge_weight.unsqueeze(1)
        return torch.tanh(self.lx(x) + torch.zeros_like(h).index_add(0, edge_index[1], msg))


class CarryingCell(torch.nn.Module):
    """A per-snapshot cell that carries a tensor from call to call outside its
    parameters and buffers (as PyGT's EvolveGCN carries its evolved weight):
    ``state_dict`` misses it; a trainer's state must not."""

    def __init__(self, F: int, H: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(F, H)
        self.carried = None

    def forward(self, x, edge_index, edge_weight=None, h=None):  # noqa: ANN001
        w = 1.0 * self.lin.weight if self.carried is None else 0.5 * (self.lin.weight + self.carried)
        self.carried = w
        out = torch.tanh(x @ w.t() + self.lin.bias)
        return out if h is None else out + 0.5 * h
