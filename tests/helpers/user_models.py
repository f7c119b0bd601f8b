"""Model files a user would write for ``--model PATH.py:Name`` (the CLI tests write them into a folder)."""
from __future__ import annotations

#: PyGT's classic RecurrentGCN on pyg_dynscale's own T-GCN cell (runs without PyGT): a module around a cell,
#: so it runs on the black-box path (it is called as a whole per snapshot)
DYNSCALE_RECURRENT_GCN = '''
import torch
from pyg_dynscale.nn import TGCN


class RecurrentGCN(torch.nn.Module):
    def __init__(self, node_features, hidden=8):
        super().__init__()
        self.recurrent = TGCN(node_features, hidden)
        self.linear = torch.nn.Linear(hidden, 1)

    def forward(self, x, edge_index, edge_weight, h):
        h = self.recurrent(x, edge_index, edge_weight, h)
        return self.linear(torch.relu(h)), h
'''
