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

**Host and device** (:mod:`~pyg_dynscale.ctdg.host`): the stores, the
node-to-row map and every index list live on the host -- which messages a
node has, which rows they read, which message is a node's last (it depends
on event times only), the new ``last_update`` (a maximum of event times) --
and reach the device in one host-to-device copy per call of
:meth:`MemoryState.updated`; the device runs the message, aggregation and
GRU modules on gathers of host-known shapes, with no read-back.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor
from torch_geometric.nn.models.tgn import LastAggregator
from torch_geometric.utils import scatter

from .host import host_to_device

__all__ = ["MemoryState", "MessageStore", "last_message", "last_message_rows", "write_rows"]


def last_message_rows(index: Tensor, t: Tensor, dim_size: int) -> Tensor:
    r"""Which message :func:`last_message` takes for each output row: ``[dim_size]``, the
    position of the row's message with the largest ``t`` (the first on ties), or ``M`` (the
    number of messages) where the row has none. No boolean mask, no value-dependent shape:
    on the host it is free, on a device it reads nothing back.

    Args:
        index: ``[M]`` output row of each message; t: ``[M]`` their times.
    """
    m = index.numel()
    first = torch.full((dim_size,), m, dtype=torch.long, device=index.device)
    if m == 0:
        return first
    newest = t.new_empty(dim_size).scatter_reduce_(0, index, t, reduce="amax", include_self=False)
    rows = torch.arange(m, device=index.device)
    # messages that are not their row's newest take the sentinel m, which the minimum then ignores
    cand = torch.where(t == newest[index], rows, torch.full_like(rows, m))
    return first.scatter_reduce_(0, index, cand, reduce="amin", include_self=True)


def _take_rows(msg: Tensor, rows: Tensor) -> Tensor:
    """``msg[rows]`` where row ``M`` (``msg.size(0)``) reads zeros: one gather, no mask."""
    return torch.cat([msg, msg.new_zeros((1,) + tuple(msg.shape[1:]))])[rows]


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
    return _take_rows(msg, last_message_rows(index, t, dim_size).to(msg.device))


def write_rows(memory: Tensor, last_update: Tensor, parts: list) -> None:
    r"""Write ``parts`` -- ``(ids [m] on the host, rows [m, d], last [m])`` on the device, in
    order -- into ``memory [N, d]`` / ``last_update [N]`` as consecutive ``memory[ids] = rows``
    would (a later part wins), in one scatter per buffer: the host keeps the last occurrence
    of each id (a scatter with repeated indices picks an arbitrary one on CUDA). Values are
    copied, so the result is bitwise the one of the writes in order."""
    parts = [p for p in parts if p[0].numel()]
    if not parts:
        return
    ids = torch.cat([p[0] for p in parts])
    rows = torch.cat([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    last = torch.cat([p[2] for p in parts]) if len(parts) > 1 else parts[0][2]
    uniq, inv = torch.unique(ids, return_inverse=True)
    if uniq.numel() == ids.numel():
        keep = torch.arange(ids.numel())
    else:
        keep = torch.full((uniq.numel(),), -1, dtype=torch.long)
        keep.scatter_reduce_(0, inv, torch.arange(ids.numel()), reduce="amax", include_self=True)
    at = host_to_device(torch.cat([ids[keep], keep]), memory.device)
    n = keep.numel()
    where, keep_d = at[:n], at[n:]
    memory[where] = rows[keep_d].to(memory.dtype)
    last_update[where] = last[keep_d].to(last_update.dtype)


def _aggregate(module: torch.nn.Module, msg: Tensor, index: Tensor, t: Tensor, dim_size: int) -> Tensor:
    """The memory's ``aggr_module``; PyG's ``LastAggregator`` as :func:`last_message`."""
    if type(module) is LastAggregator:
        return last_message(msg, index, t, dim_size)
    return module(msg, index, t, dim_size)


class MessageStore:
    r"""The messages of one direction (``key`` = event sources or destinations), on the
    device of ``key`` (the trainer keeps it on the host)."""

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
        src, dst, t: the stream's index columns **on the host** (``[E]`` each;
            :class:`~pyg_dynscale.ctdg.host.HostStream`): the stores and every
            index list are computed from them.
        msg: ``[E, F]`` the raw messages, on the memory's device.
    """

    def __init__(self, memory: torch.nn.Module, src: Tensor, dst: Tensor, t: Tensor, msg: Tensor) -> None:
        self.module = memory
        self.src, self.dst, self.t, self.msg = src, dst, t, msg
        n = memory.num_nodes
        self.store_s = MessageStore(src, n)  # TGNMemory.msg_s_store: messages src -> dst
        self.store_d = MessageStore(dst, n)  # msg_d_store: dst -> src
        self.assoc = torch.empty(n, dtype=torch.long, device=src.device)
        #: a :class:`~pyg_dynscale.ctdg.memory_placement.PartitionedMemory` (owned rows + the fetched table)
        #: in place of the module's ``memory`` / ``last_update`` buffers; ``None``: the buffers
        self.placement = None

    @property
    def device(self) -> torch.device:
        return self.msg.device

    def _tables(self) -> tuple[Tensor, Tensor]:
        """The device ``(memory [R, d], last_update [R])`` the rows are read from: the module's
        buffers, or a partitioned placement's fetched table."""
        if self.placement is None:
            return self.module.memory, self.module.last_update
        return self.placement.table()

    def _rows(self, ids: Tensor) -> Tensor:
        """The host row index of ``ids`` in :meth:`_tables` (the ids themselves, or the
        placement's table positions)."""
        return ids if self.placement is None else self.placement.rows_of(ids)

    def messages(self, n_id: Tensor) -> tuple:
        """The stored messages of the host ids ``n_id`` as :meth:`updated` reads them: ``(node_s,
        other_s, ev_s, t_s, node_d, other_d, ev_d, t_d, table)`` -- per direction each message's
        node (grouped by ``n_id`` order), other endpoint, row of ``table`` (the raw messages
        ``[*, F]`` on the device) and time, all host tensors but ``table``."""
        node_s, ev_s = self.store_s.get(n_id)
        node_d, ev_d = self.store_d.get(n_id)
        return node_s, self.dst[ev_s], ev_s, self.t[ev_s], node_d, self.src[ev_d], ev_d, self.t[ev_d], self.msg

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

    def updated(self, n_id: Tensor) -> tuple[Tensor, Tensor]:
        """``TGNMemory._get_updated_memory(n_id)`` for the host ids ``n_id``:
        ``([len, memory_dim], [len])`` on the device.

        The host lists every stored message of ``n_id`` (node, other endpoint, event, time),
        the output row of each, the message :func:`last_message` keeps per row and the new
        ``last_update`` (the newest message time, 0 without one, as PyG's ``scatter(...,
        "max")``); one copy takes them to the device, which computes the messages with the
        module's ``msg_s_module`` / ``msg_d_module`` / ``time_enc`` in PyG's order, the
        aggregation and the GRU."""
        m = self.module
        n = n_id.numel()
        self.assoc[n_id] = torch.arange(n, device=n_id.device)
        node_s, other_s, ev_s, t_s, node_d, other_d, ev_d, t_d, table = self.messages(n_id)
        t = torch.cat([t_s, t_d])
        index = self.assoc[torch.cat([node_s, node_d])]
        last_update = scatter(t, index, 0, n, reduce="max")  # == scatter(t, node, 0, N, "max")[n_id]
        last_aggr = type(m.aggr_module) is LastAggregator
        parts = [self._rows(n_id), self._rows(node_s), self._rows(other_s), ev_s, t_s,
                 self._rows(node_d), self._rows(other_d), ev_d, t_d, last_update,
                 last_message_rows(index, t, n) if last_aggr else index]
        sizes = [p.numel() for p in parts]
        at = torch.split(host_to_device(torch.cat(parts), self.device), sizes)
        rows, (node_s, other_s, ev_s, t_s), (node_d, other_d, ev_d, t_d), last_update, aggr_at = (
            at[0], at[1:5], at[5:9], at[9], at[10])
        mem, last = self._tables()

        def messages(module, node, other, ev, t_ev):
            raw = table[ev]
            t_enc = m.time_enc((t_ev - last[node]).to(raw.dtype))
            return module(mem[node], mem[other], raw, t_enc)

        msg = torch.cat([messages(m.msg_s_module, node_s, other_s, ev_s, t_s),
                         messages(m.msg_d_module, node_d, other_d, ev_d, t_d)], dim=0)
        if last_aggr:
            aggr = _take_rows(msg, aggr_at)
        else:
            aggr = m.aggr_module(msg, aggr_at, torch.cat([t_s, t_d]), n)
        return m.gru(aggr, mem[rows]), last_update

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
            write_rows(self.module.memory, self.module.last_update, [(n_id, memory, last_update)])

    def read(self, n_id: Tensor, training: bool) -> tuple[Tensor, Tensor]:
        """``TGNMemory.forward(n_id)`` (host ids): updated memory in training, stored memory in
        evaluation (device tensors)."""
        if training:
            return self.updated(n_id)
        rows = host_to_device(self._rows(n_id), self.device)
        mem, last = self._tables()
        return mem[rows], last[rows]

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
