r"""PyG's ``TGNMemory`` state machine with a vectorised message store.

``TGNMemory`` keeps, per node, the raw messages of the last batch in which the
node was a source (``msg_s_store``) and a destination (``msg_d_store``) in two
Python dicts, filled by a loop over the batch's nodes and read by a loop over
the requested nodes (``_update_msg_store`` / ``_compute_msg``). That loop is
most of the example's time per batch. :class:`MessageStore` holds the same
content as index ranges into the event arrays:

* ``order [E]``: for every processed batch :math:`[a, b)`, ``order[a:b] = a +
  perm`` with ``perm`` from the very same ``key[a:b].sort()`` call that
  ``TGNMemory`` makes (``sort`` is not stable; calling it on the same tensor
  reproduces its permutation);
* ``lo [N], hi [N]``: node :math:`v`'s stored messages are the events
  ``order[lo[v]:hi[v]]``.

:class:`MemoryState` then runs ``TGNMemory._get_updated_memory`` /
``_update_memory`` / ``update_state`` / the flush of ``train(False)`` with the
module's own submodules (``msg_s_module``, ``msg_d_module``, ``aggr_module``,
``time_enc``, ``gru``) and buffers (``memory``, ``last_update``), feeding them
the messages in exactly the order the dict version concatenates them (nodes
in the order requested, each node's messages in ``perm`` order), so every
result is the module's own, bit for bit. The module's dict store is not used.
PyG's ``LastAggregator`` runs as :func:`last_message`: the same rule with
torch-scatter's arg-max (what PyG computes when torch-scatter is installed),
on every device and without it (PyG's fallback is wrong for nodes with no
message and device-dependent on CUDA).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.nn.models.tgn import LastAggregator
from torch_geometric.utils import scatter

__all__ = ["MemoryState", "MessageStore", "last_message"]


def last_message(msg: Tensor, index: Tensor, t: Tensor, dim_size: int) -> Tensor:
    r"""PyG's ``LastAggregator`` with torch-scatter's arg-max on every device: row :math:`i`
    of the output is the message with the largest ``t`` among those with ``index == i``
    (the first such row on ties), zeros where there is none.

    PyG computes it with ``scatter_argmax``; without torch-scatter its fallback gives
    a row with no message the message at position ``dim_size - 1`` (not zeros), and on
    CUDA ties (and that position, after an unstable sort) depend on the device.

    Args:
        msg: ``[M, F]`` messages; index: ``[M]`` output rows; t: ``[M]`` their times.
    Returns:
        ``[dim_size, F]``.
    """
    out = msg.new_zeros((dim_size, msg.size(-1)))
    if index.numel() == 0:
        return out
    newest = t.new_empty(dim_size).scatter_reduce_(0, index, t, reduce="amax", include_self=False)
    rows = torch.arange(index.numel(), device=index.device)
    cand = t == newest[index]
    first = torch.full((dim_size,), index.numel(), dtype=torch.long, device=index.device)
    first.scatter_reduce_(0, index[cand], rows[cand], reduce="amin", include_self=True)
    has = first < index.numel()
    out[has] = msg[first[has]]
    return out


def _aggregate(module: torch.nn.Module, msg: Tensor, index: Tensor, t: Tensor, dim_size: int) -> Tensor:
    """The memory's ``aggr_module``; PyG's ``LastAggregator`` as :func:`last_message`."""
    if type(module) is LastAggregator:
        return last_message(msg, index, t, dim_size)
    return module(msg, index, t, dim_size)


class MessageStore:
    r"""The messages of one direction (``key`` = event sources or destinations)."""

    def __init__(self, key: Tensor, num_nodes: int) -> None:
        self.key = key
        self.order = torch.zeros_like(key)
        self.lo = torch.zeros(num_nodes, dtype=torch.long, device=key.device)
        self.hi = torch.zeros(num_nodes, dtype=torch.long, device=key.device)

    def reset(self) -> None:
        self.lo.zero_()
        self.hi.zero_()

    def put(self, a: int, b: int) -> None:
        """Store batch ``[a, b)``: each node's entry becomes its events in the batch."""
        nodes, perm = self.key[a:b].sort()
        self.order[a:b] = perm + a
        uniq, counts = nodes.unique_consecutive(return_counts=True)
        ends = counts.cumsum(0) + a
        self.lo[uniq] = ends - counts
        self.hi[uniq] = ends

    def get(self, n_id: Tensor) -> tuple[Tensor, Tensor]:
        """``(node, event)`` of all stored messages of ``n_id``, grouped by node in
        ``n_id`` order, each node's events in its ``perm`` order."""
        lo = self.lo[n_id]
        cnt = self.hi[n_id] - lo
        node = torch.repeat_interleave(n_id, cnt)
        first = torch.repeat_interleave(lo - (cnt.cumsum(0) - cnt), cnt)
        pos = torch.arange(node.numel(), device=n_id.device) + first
        return node, self.order[pos]

    def state(self) -> tuple[Tensor, Tensor, Tensor]:
        return self.order.clone(), self.lo.clone(), self.hi.clone()

    def load(self, state: tuple[Tensor, Tensor, Tensor]) -> None:
        self.order.copy_(state[0])
        self.lo.copy_(state[1])
        self.hi.copy_(state[2])


class MemoryState:
    r"""A ``TGNMemory`` driven over one event stream.

    Args:
        memory: the user's :class:`~torch_geometric.nn.TGNMemory` (its
            parameters and ``memory`` / ``last_update`` buffers are used).
        src, dst, t, msg: the whole stream (``[E]``, ``[E]``, ``[E]``, ``[E, F]``).
    """

    def __init__(self, memory: torch.nn.Module, src: Tensor, dst: Tensor, t: Tensor, msg: Tensor) -> None:
        self.module = memory
        self.src, self.dst, self.t, self.msg = src, dst, t, msg
        n = memory.num_nodes
        self.store_s = MessageStore(src, n)  # TGNMemory.msg_s_store: messages src -> dst
        self.store_d = MessageStore(dst, n)  # msg_d_store: dst -> src
        self.assoc = torch.empty(n, dtype=torch.long, device=src.device)
        #: a :class:`~pyg_dynscale.ctdg.placement.PartitionedMemory` (owned rows + the fetched table)
        #: in place of the module's ``memory`` / ``last_update`` buffers; ``None``: the buffers
        self.placement = None

    def _mem(self, ids: Tensor) -> Tensor:
        return self.module.memory[ids] if self.placement is None else self.placement.read(ids)[0]

    def _last(self, ids: Tensor) -> Tensor:
        return self.module.last_update[ids] if self.placement is None else self.placement.read(ids)[1]

    def others(self, n_id: Tensor) -> Tensor:
        """The other endpoint of every stored message of ``n_id`` (whose memory the messages read)."""
        return torch.cat([self.dst[self.store_s.get(n_id)[1]], self.src[self.store_d.get(n_id)[1]]])

    def reset(self) -> None:
        """``TGNMemory.reset_state``: zero memory and ``last_update``, empty stores."""
        with torch.no_grad():
            if self.placement is not None:
                self.placement.reset()
            else:
                self.module.memory.zero_()
                self.module.last_update.zero_()
        self.store_s.reset()
        self.store_d.reset()

    def _messages(self, n_id: Tensor, store: MessageStore, other: Tensor, msg_module: torch.nn.Module):
        m = self.module
        node, ev = store.get(n_id)
        t = self.t[ev]
        raw = self.msg[ev]
        t_enc = m.time_enc((t - self._last(node)).to(raw.dtype))
        return msg_module(self._mem(node), self._mem(other[ev]), raw, t_enc), t, node

    def updated(self, n_id: Tensor) -> tuple[Tensor, Tensor]:
        """``TGNMemory._get_updated_memory(n_id)``: ``([len, memory_dim], [len])``."""
        m = self.module
        self.assoc[n_id] = torch.arange(n_id.size(0), device=n_id.device)
        msg_s, t_s, src_s = self._messages(n_id, self.store_s, self.dst, m.msg_s_module)
        msg_d, t_d, src_d = self._messages(n_id, self.store_d, self.src, m.msg_d_module)
        idx = torch.cat([src_s, src_d], dim=0)
        msg = torch.cat([msg_s, msg_d], dim=0)
        t = torch.cat([t_s, t_d], dim=0)
        aggr = _aggregate(m.aggr_module, msg, self.assoc[idx], t, n_id.size(0))
        memory = m.gru(aggr, self._mem(n_id))
        last_update = scatter(t, idx, 0, m.num_nodes, reduce="max")[n_id]
        return memory, last_update

    def write(self, n_id: Tensor) -> None:
        """``TGNMemory._update_memory(n_id)`` (values only: no autograd history). Partitioned: a
        collective; each owner fetches what its vertices of ``n_id`` read and writes them."""
        with torch.no_grad():
            if self.placement is not None:  # each owner its own rows, after fetching what they read
                p = self.placement
                n_id = n_id[p.owner[n_id] == p.rank]
                p.fetch(torch.cat([n_id, self.others(n_id)]))
                memory, last_update = self.updated(n_id)
                p.write_owned(n_id, memory, last_update)
                return
            memory, last_update = self.updated(n_id)
            self.module.memory[n_id] = memory
            self.module.last_update[n_id] = last_update

    def read(self, n_id: Tensor, training: bool) -> tuple[Tensor, Tensor]:
        """``TGNMemory.forward(n_id)``: updated memory in training, stored memory in evaluation."""
        if training:
            return self.updated(n_id)
        return self._mem(n_id), self._last(n_id)

    def update(self, a: int, b: int, training: bool, n_id: Optional[Tensor] = None) -> None:
        """``TGNMemory.update_state`` with the events ``[a, b)``."""
        if n_id is None:
            n_id = torch.cat([self.src[a:b], self.dst[a:b]]).unique()
        if training:
            self.write(n_id)
            self.store_s.put(a, b)
            self.store_d.put(a, b)
        else:
            self.store_s.put(a, b)
            self.store_d.put(a, b)
            self.write(n_id)

    def flush(self) -> None:
        """What ``TGNMemory.train(False)`` does when leaving training: apply the
        stored messages to every node, then empty the stores (partitioned: every owner its own)."""
        self.write(torch.arange(self.module.num_nodes, device=self.src.device))
        self.store_s.reset()
        self.store_d.reset()

    def state(self) -> dict:
        rows = (self.placement.state() if self.placement is not None else
                {"memory": self.module.memory.detach().clone(), "last_update": self.module.last_update.clone()})
        return {**rows, "s": self.store_s.state(), "d": self.store_d.state()}

    def load(self, state: dict) -> None:
        with torch.no_grad():
            if self.placement is not None:
                self.placement.load(state)
            else:
                self.module.memory.copy_(state["memory"])
                self.module.last_update.copy_(state["last_update"])
        self.store_s.load(state["s"])
        self.store_d.load(state["d"])
