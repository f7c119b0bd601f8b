r"""The modules of PyG's ``examples/tgn.py``, and :class:`TGN`, which builds them.

``GraphAttentionEmbedding`` and ``LinkPredictor`` are the example's classes
line for line (so a user's copy and these are interchangeable);
:class:`TGN` creates, in the example's order (so one seed gives the same
initial weights), ``TGNMemory(num_nodes, msg_dim, memory_dim, time_dim,
IdentityMessage, LastAggregator)``, the embedding sharing the memory's time
encoder, and the link predictor.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch.nn import Linear
from torch_geometric.nn import TGNMemory, TransformerConv
from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator

__all__ = ["EmptyEntries", "GraphAttentionEmbedding", "LazyStoreMemory", "LinkPredictor", "TGN",
           "time_encoder_warning"]


class GraphAttentionEmbedding(torch.nn.Module):
    r"""One ``TransformerConv`` (2 heads of ``out_channels // 2``) over the
    last-neighbour graph; edge features :math:`[\Phi(t_{last}(j) - t_e) \,\|\, \mathbf{m}_e]`.

    Shapes: ``x [N, in_channels]``, ``last_update [N]``, ``edge_index [2, M]``,
    ``t [M]``, ``msg [M, msg_dim]`` -> ``[N, out_channels]``.
    """

    def __init__(self, in_channels: int, out_channels: int, msg_dim: int, time_enc: torch.nn.Module,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.time_enc = time_enc
        edge_dim = msg_dim + time_enc.out_channels
        self.conv = TransformerConv(in_channels, out_channels // 2, heads=2, dropout=dropout, edge_dim=edge_dim)

    def forward(self, x: Tensor, last_update: Tensor, edge_index: Tensor, t: Tensor, msg: Tensor) -> Tensor:
        rel_t = last_update[edge_index[0]] - t
        rel_t_enc = self.time_enc(rel_t.to(x.dtype))
        edge_attr = torch.cat([rel_t_enc, msg], dim=-1)
        return self.conv(x, edge_index, edge_attr)


class LinkPredictor(torch.nn.Module):
    r""":math:`\mathrm{lin}_{final}(\mathrm{ReLU}(\mathrm{lin}_{src}(z_u) + \mathrm{lin}_{dst}(z_v)))`,
    ``[B, C], [B, C] -> [B, 1]`` logits."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.lin_src = Linear(in_channels, in_channels)
        self.lin_dst = Linear(in_channels, in_channels)
        self.lin_final = Linear(in_channels, 1)

    def forward(self, z_src: Tensor, z_dst: Tensor) -> Tensor:
        h = self.lin_src(z_src) + self.lin_dst(z_dst)
        h = h.relu()
        return self.lin_final(h)


class EmptyEntries(dict):
    """A ``TGNMemory`` message store (node -> ``(src, dst, t, msg)``) in which every node without an
    entry of its own reads the empty entry: what PyG's ``{j: empty for j in range(num_nodes)}``
    returns, without its :math:`N` keys and tuples (about 150 bytes per node and store: 30 MB per
    rank at :math:`10^5` nodes, more than a rank's part of a :math:`10^6`-event stream). PyG's
    ``TGNMemory`` only reads (``store[i]``) and writes (``store[i] = ...``) it.

    Args:
        empty (tuple): the empty entry (``PyG``'s, made when the store is reset).
    """

    def __init__(self, empty: tuple) -> None:
        super().__init__()
        self.empty = empty

    def __missing__(self, key):
        return self.empty

    def __reduce__(self):  # a copy (deepcopy, pickle) keeps the empty entry and the written ones
        return (EmptyEntries, (self.empty,), None, None, iter(self.items()))


class LazyStoreMemory(TGNMemory):
    r"""PyG's :class:`~torch_geometric.nn.TGNMemory` whose message stores hold only the nodes
    that received a message (:class:`EmptyEntries`); every read and write is PyG's, so the module
    computes what ``TGNMemory`` computes, number for number."""

    def _reset_message_store(self) -> None:
        # PyG's empty entry, made as PyG makes it (the memory's dtype and device at reset time)
        i = self.memory.new_empty((0, ), device=self.device, dtype=torch.long)
        msg = self.memory.new_empty((0, self.raw_msg_dim), device=self.device)
        self.msg_s_store = EmptyEntries((i, i, i, msg))
        self.msg_d_store = EmptyEntries((i, i, i, msg))


class TGN(torch.nn.Module):
    r"""The three modules of PyG's TGN example: ``memory`` (:class:`TGNMemory`
    with :class:`IdentityMessage` and :class:`LastAggregator`; its message stores hold only the
    nodes with a message, :class:`LazyStoreMemory`: the same numbers), ``gnn``
    (:class:`GraphAttentionEmbedding`, sharing ``memory.time_enc``) and
    ``link_pred`` (:class:`LinkPredictor`).

    Args:
        num_nodes (int): nodes with a memory row (``data.num_nodes``).
        msg_dim (int): edge-feature width (``data.msg.size(-1)``).
        memory_dim (int): memory width.
        time_dim (int): time-encoding width.
        embedding_dim (int): embedding width (even: two attention heads).
        dropout (float): attention dropout of the ``TransformerConv`` (the example's 0.1).
    """

    def __init__(self, num_nodes: int, msg_dim: int, memory_dim: int = 100, time_dim: int = 100,
                 embedding_dim: int = 100, dropout: float = 0.1) -> None:
        super().__init__()
        self.memory = LazyStoreMemory(
            num_nodes, msg_dim, memory_dim, time_dim,
            message_module=IdentityMessage(msg_dim, memory_dim, time_dim),
            aggregator_module=LastAggregator(),
        )
        self.gnn = GraphAttentionEmbedding(memory_dim, embedding_dim, msg_dim, self.memory.time_enc, dropout=dropout)
        self.link_pred = LinkPredictor(embedding_dim)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            "TGN is a container of PyG's example modules (memory, gnn, link_pred); train it with "
            "pyg_dynscale.ctdg.MemoryTrainer or call the three modules as examples/tgn.py does."
        )


def time_encoder_warning(memory: torch.nn.Module, gnn: torch.nn.Module) -> Optional[str]:
    r"""Why ``gnn`` does not encode times with ``memory.time_enc``, or ``None`` when it does (or holds no
    module of that class: an embedding without a time encoding, or one of another class, is not judged).

    PyG's ``examples/tgn.py`` and :class:`TGN` give the embedding the memory's encoder (one module, one
    set of parameters, trained by both). A TGN assembled module by module (``copy.deepcopy`` of each, or
    a ``GraphAttentionEmbedding`` built with a ``TimeEncoder`` of its own) gives the embedding a second
    encoder: a legitimate model, but not the example's (the batch losses part from the shared model's
    after the first steps), so it is said rather than refused.

    Args:
        memory (TGNMemory): the memory (its ``time_enc``).
        gnn (torch.nn.Module): the embedding module.
    """
    enc = getattr(memory, "time_enc", None)
    if not isinstance(enc, torch.nn.Module):
        return None
    # identity, not equality: a copy holds equal values until the first step, then trains apart
    own = [(name, mod) for name, mod in gnn.named_modules() if type(mod) is type(enc)]
    if not own or any(mod is enc for _, mod in own):
        return None
    name, mod = own[0]
    where = f"gnn.{name}" if name else "gnn"
    mine, theirs = list(mod.parameters()), list(enc.parameters())
    copy = len(mine) == len(theirs) and all(p.shape == q.shape and torch.equal(p, q) for p, q in zip(mine, theirs))
    what = "is a copy of memory.time_enc (equal values, a module of its own)" if copy else \
        "is a time encoder of its own, not memory.time_enc"
    return (f"{where} {what}: it trains apart from the memory's, so results differ from PyG's TGN, which "
            f"shares one encoder; give the embedding time_enc=memory.time_enc (as pyg_dynscale.ctdg.TGN does), "
            f"or ignore this warning if the second encoder is meant.")
