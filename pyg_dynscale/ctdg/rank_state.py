r"""The memory state and the memory copy of a rank that holds only its events
(``MemoryTrainer(event_placement="per_rank")``): :class:`~pyg_dynscale.ctdg.store.MemoryState`
and :class:`~pyg_dynscale.ctdg.memory_copies.MemoryCopies` with the whole-stream message
stores and neighbour loader replaced by the owners' index
(:class:`~pyg_dynscale.ctdg.owned_index.OwnedIndex`) and its exchanges
(:class:`~pyg_dynscale.ctdg.event_exchange.EventExchange`). The computation is the
parent's, fed the same lists: the stored messages of a node come from its owner
(:meth:`RankMemoryState.messages`), a batch's events reach the owners' indexes at the
write-back (:meth:`RankMemoryState.update`).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .memory_copies import MemoryCopies
from .store import MemoryState

__all__ = ["RankCopies", "RankMemoryState"]


class RankMemoryState(MemoryState):
    r"""A ``TGNMemory`` driven over the events of the owners' index.

    Args:
        memory: the user's ``TGNMemory``.
        exchange (EventExchange): the rank's events, owned index and exchanges.
        msg (Tensor): ``[0, F]`` on the memory's device (the dtype and device of the messages).
    """

    def __init__(self, memory: torch.nn.Module, exchange, msg: Tensor) -> None:
        # not the parent's __init__: its message stores hold one slot per event of the stream
        self.module = memory
        self.exchange = exchange
        self.msg = msg
        self.assoc = torch.empty(memory.num_nodes, dtype=torch.long)
        self.placement = None

    def messages(self, n_id: Tensor) -> tuple:
        return self.exchange.mail(n_id)

    def others(self, n_id: Tensor) -> Tensor:
        got = self.exchange.mail(n_id)
        return torch.cat([got[1], got[5]])

    def reset(self) -> None:
        """Memory, ``last_update``, mailbox and neighbour index from zero (the memory copy's reset)."""
        with torch.no_grad():
            self.placement.reset()
        self.exchange.reset()

    def update(self, a: int, b: int, training: bool, n_id: Optional[Tensor] = None) -> None:
        """``TGNMemory.update_state`` with events ``[a, b)`` (collectives: every rank calls it)."""
        if training:
            src, dst, _ = self.exchange.keys(a, b)
            self.write(torch.cat([src, dst]).unique() if n_id is None else n_id)
            self.exchange.advance(a, b)
        else:
            src, dst = self.exchange.advance(a, b)
            self.write(torch.cat([src, dst]).unique() if n_id is None else n_id)

    def flush(self) -> None:
        """``TGNMemory.train(False)``'s flush: each owner applies its vertices' stored messages."""
        self.write(torch.arange(self.module.num_nodes))
        self.exchange.index.reset_mailbox()
        self.exchange.view = None

    def state(self) -> dict:
        return {**self.placement.state(), "index": self.exchange.index.state()}

    def load(self, state: dict) -> None:
        with torch.no_grad():
            self.placement.load(state)
        self.exchange.index.load(state["index"])
        self.exchange.view = None


class RankCopies(MemoryCopies):
    """:class:`MemoryCopies` of one memory copy whose neighbour loader is the owners' index
    (part of :meth:`RankMemoryState.state`)."""

    def advance(self, a: int, b: int, training: bool) -> None:
        self.state.update(a, b, training)

    def reset(self) -> None:
        self.state.reset()

    def snapshot(self) -> dict:
        return {"memory": self.state.state(), "training": self.training}

    def restore(self, snap: dict) -> None:
        self.state.load(snap["memory"])
        self.training = snap["training"]
