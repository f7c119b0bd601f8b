"""Small user modules the device and transport tests share."""
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
