r"""Node memory partitioned by vertex owner (Sven's N&M placement) for
:class:`~pyg_dynscale.ctdg.MemoryTrainer` with ``memory_placement="partitioned"``
(DepComm: owners, no deduplication) or ``"sven"`` (owners + Sven's
redundancy-free exchange, Algorithm 2 vectorised).

Rank :math:`r` of :math:`M` stores only the rows of the vertices it owns
(:math:`\lambda_1(v) = r`): ``memory [n_r, d]`` and ``last_update [n_r]``, row
:math:`\lambda_2(v)` (the owner's vertices in increasing global id). The
message index (:class:`~pyg_dynscale.ctdg.store.MessageStore`, O(N) integers
into the replicated event stream) and the neighbour loader stay replicated:
a message is computed at read time from the memory of both endpoints, so the
memory rows are what crosses the network.

* **Dispatch** (:meth:`PartitionedMemory.fetch`, before a local batch's
  computation): the occurrence list :math:`V_o` (every reference the batch's
  computation makes: sources, destinations, negatives, neighbour-edge
  endpoints, the other endpoint of each stored message) is sent to the owners;
  ``"sven"`` first reduces it to its distinct vertices
  (``unique(return_inverse=True)``: :math:`V_u` and :math:`\Psi`), ``"partitioned"``
  sends one request per occurrence. Three ``all_to_all_single`` calls: the
  ``[M]`` counts, the ids, the rows (``memory`` and ``last_update`` bytes
  packed into one ``uint8`` row of :math:`d \cdot s + 8` bytes). Rows the rank
  owns are read from its own store (counted as local). The rows form a compact
  table read through a ``[N]`` position map (:meth:`read`); a vertex missing
  from the table reads NaN, so a missing fetch cannot go unnoticed.
* **Aggregation** (:meth:`PartitionedMemory.aggregate`, the write-back):
  each root node's updated row goes to its owner with its id (``8 + d s + 8``
  bytes). ``"sven"`` sends one row per distinct vertex, the occurrence of its
  latest interaction (:math:`\Phi`: ``scatter_reduce(..., "amax")`` over the
  event positions); ``"partitioned"`` one per event endpoint. The owner applies
  the blocks in source-rank (= trainer = chronological) order, so a vertex
  written by two trainers keeps the later one, as the replicated write-back.
* **Ids, then rows**: each exchange is an id step (:meth:`PartitionedMemory.organise_fetch`,
  :meth:`PartitionedMemory.organise_aggregate`: dedup, owner grouping, local ids, counts; no
  collective, no counter) and a row step (:meth:`PartitionedMemory.send_fetch`,
  :meth:`PartitionedMemory.aggregate`), so Sven's prefetch (``prefetch=True``,
  :mod:`~pyg_dynscale.ctdg.prefetch`) runs the id step of the next local batch on a thread.
* **Counters**: bytes handed to ``all_to_all_single`` by kind (self block
  excluded), the per-owner row counts the id lists imply (the prediction,
  :meth:`predicted`), the occurrences and distinct vertices of every list
  (Sven's redundancy rates :math:`\eta_1, \eta_2`, Eq. 1).
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from ..errors import ModelInputError
from .owner_map import OwnerMap

__all__ = ["PLACEMENTS", "AggregatePlan", "DispatchPlan", "PartitionedMemory", "check_owner", "resolve_partition"]

#: the ``memory_placement`` values of :class:`~pyg_dynscale.ctdg.MemoryTrainer`
PLACEMENTS = ("replicated", "partitioned", "sven")
_METHODS = ("range", "interval", "flexbicut")


def check_owner(owner: object, num_nodes: int, num_parts: int) -> Tensor:
    """``owner`` as a ``[num_nodes]`` int64 tensor with values in ``[0, num_parts)``, or a typed error."""
    if not isinstance(owner, Tensor) or owner.dtype != torch.long:
        what = f"a {owner.dtype} tensor" if isinstance(owner, Tensor) else type(owner).__name__
        raise ModelInputError("partition", f"is {what}.",
                              f"give a [num_nodes] int64 owner tensor or one of {list(_METHODS)}.")
    if owner.dim() != 1 or owner.numel() != num_nodes:
        raise ModelInputError("partition", f"has shape {tuple(owner.shape)} for {num_nodes} nodes.",
                              f"give one owner per vertex: shape [{num_nodes}].")
    if owner.numel() and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
        raise ModelInputError("partition", f"has owners in [{int(owner.min())}, {int(owner.max())}] for "
                              f"{num_parts} ranks.", f"use owners 0 .. {num_parts - 1} (one part per rank).")
    return owner


def resolve_partition(partition, num_nodes: int, num_parts: int, requests: Optional[Tensor] = None) -> Tensor:
    """The owner tensor of ``partition``: a tensor (checked) or a method name of
    :func:`pyg_dynscale.partition.events.partition_vertices`."""
    if isinstance(partition, str):
        if partition not in _METHODS:
            raise ModelInputError("partition", f"is {partition!r}.", f"use one of {list(_METHODS)} or an owner tensor.")
        try:
            from ..partition.events import partition_vertices
        except ImportError as exc:  # the partitioner's module is not there
            raise NotImplementedError(f"partition={partition!r} needs pyg_dynscale.partition.events, which is not "
                                      "built: give an owner tensor.") from exc
        owner = partition_vertices(partition, num_nodes, num_parts, requests=requests)
        return check_owner(owner.to(torch.long), num_nodes, num_parts)
    return check_owner(partition, num_nodes, num_parts)


def _pack(*parts: Tensor) -> Tensor:
    """Rows of several tensors (``[n]`` or ``[n, w]``) as one ``[n, bytes]`` uint8 tensor."""
    n = parts[0].size(0)
    return torch.cat([p.contiguous().view(torch.uint8).view(n, math.prod(p.shape[1:]) * p.element_size())
                      for p in parts], dim=1)


def _unpack(buf: Tensor, like: list) -> list:
    """The inverse of :func:`_pack`: ``like`` = ``[(dtype, width or None), ...]``."""
    out, at, n = [], 0, buf.size(0)
    for dtype, width in like:
        size = torch.empty((), dtype=dtype).element_size() * (width or 1)
        x = buf[:, at:at + size].contiguous().view(dtype)
        out.append(x.view(n, width) if width else x.view(n))
        at += size
    return out


@dataclass(frozen=True)
class DispatchPlan:
    """The id lists of one dispatch (:meth:`PartitionedMemory.organise_fetch`): what depends on
    the ids only, not on the rows."""

    occurrences: int  #: :math:`|V_o|`
    distinct: int  #: :math:`|V_u|`
    owners: Tensor  #: ``[L]`` owner of each listed id (grouped)
    local_ids: Tensor  #: ``[l]`` listed ids this rank owns
    local_rows: Tensor  #: ``[l]`` their rows in this rank's store
    remote_ids: Tensor  #: ``[L - l]`` the ids asked of the other owners, grouped by owner
    send_counts: Tensor  #: ``[M]`` ids asked of each owner (0 for this rank)


@dataclass(frozen=True)
class AggregatePlan:
    """The id lists of one writer's aggregation (:meth:`PartitionedMemory.organise_aggregate`)."""

    occurrences: int  #: event endpoints of the local batch
    distinct: int  #: distinct vertices among them
    ids: Tensor  #: ``[L]`` ids to write, grouped by owner
    rows: Tensor  #: ``[L]`` row of each in the writer's root rows
    owners: Tensor  #: ``[L]`` owner of each
    per_rank: Tensor  #: ``[M]`` rows per owner


class PartitionedMemory:
    r"""The vertices one rank owns, and the exchanges that read and write the others.

    Args:
        owner (Tensor): ``[N]`` int64 owner rank per vertex (:math:`\lambda_1`).
        rank, world_size (int): this process and the number of owners.
        dim (int): memory width :math:`d`; dtype, device: of the memory.
        dedup (bool): Sven's redundancy-free lists (``True``) or one row per occurrence (DepComm).
    """

    def __init__(self, owner: Tensor, rank: int, world_size: int, dim: int, dtype: torch.dtype,
                 device: torch.device, dedup: bool) -> None:
        self.map = OwnerMap(owner.to(device), world_size)  # lambda_1, lambda_2 (dense)
        self.owner = self.map.owner
        self.rank, self.world_size, self.dim, self.dedup = rank, world_size, dim, dedup
        self.owned = self.map.owned(rank)  # sorted global ids: row r holds owned[r]
        n = self.owned.numel()
        self.memory = torch.zeros(n, dim, dtype=dtype, device=device)
        self.last_update = torch.zeros(n, dtype=torch.long, device=device)
        elt = torch.empty((), dtype=dtype).element_size()
        #: bytes of one dispatched row (memory + last_update) and of one aggregated row (id + row)
        self.row_bytes = dim * elt + 8
        self.agg_bytes = self.row_bytes + 8
        self.pos = torch.full((owner.numel(),), -1, dtype=torch.long, device=device)  # table row of a vertex
        self._table: tuple = (self.memory.new_full((1, dim), float("nan")),
                              torch.full((1,), torch.iinfo(torch.long).min, dtype=torch.long, device=device))
        self._held = self.owned[:0]
        self.phase = "train"
        self.totals: dict = {}
        #: guards the counters (shared with :func:`~pyg_dynscale.ctdg.microbatch.table_view` views)
        self.lock = threading.Lock()
        self.begin_epoch()

    # ------------------------------------------------------------------ counters
    def begin_epoch(self) -> None:
        """Zero the per-epoch counters (training phase)."""
        m = self.world_size
        self.epoch = {"sent": {k: 0 for k in ("dispatch", "requests", "aggregation", "counts")},
                      "local": {"dispatch": 0, "aggregation": 0},
                      "plan": {k: torch.zeros(m, dtype=torch.long) for k in ("dispatch", "aggregation")},
                      "calls": 0,
                      "occurrences": {k: [0, 0] for k in ("dispatch", "aggregation")}}

    def _count(self, kind: str, nbytes: int) -> None:
        with self.lock:  # the aggregation may run on a thread (overlap_aggregation)
            if self.phase == "train":
                self.epoch["sent"][kind] += nbytes
            key = kind if self.phase == "train" else f"eval_{kind}"
            self.totals[key] = self.totals.get(key, 0) + nbytes

    def _plan(self, kind: str, owners: Tensor, occurrences: int, distinct: int) -> None:
        """The id lists' prediction (rows per owner) and Eq. 1's counts, kept apart from the transport."""
        if self.phase != "train":
            return
        per_owner = torch.bincount(owners, minlength=self.world_size).cpu()
        with self.lock:
            e = self.epoch
            e["plan"][kind] += per_owner
            e["occurrences"][kind][0] += occurrences
            e["occurrences"][kind][1] += distinct

    def _call(self) -> None:
        """One dispatch or aggregation: one ``[M]`` counts exchange under a process group."""
        if self.phase == "train" and self.world_size > 1:
            with self.lock:
                self.epoch["calls"] += 1

    # ------------------------------------------------------------------ store
    def reset(self) -> None:
        self.memory.zero_()
        self.last_update.zero_()

    def state(self) -> dict:
        return {"memory": self.memory.clone(), "last_update": self.last_update.clone()}

    def load(self, state: dict) -> None:
        self.memory.copy_(state["memory"])
        self.last_update.copy_(state["last_update"])

    def write_owned(self, ids: Tensor, rows: Tensor, last: Tensor) -> None:
        """Write the rows of the ids this rank owns (the others are their owners' business)."""
        mine = self.owner[ids] == self.rank
        loc = self.map.local_of(ids[mine])
        self.memory[loc] = rows[mine].to(self.memory.dtype)
        self.last_update[loc] = last[mine].to(torch.long)

    def read(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(memory [n, d], last_update [n])`` of ``ids`` from the last fetched table."""
        p = self.pos[ids]
        return self._table[0][p], self._table[1][p]

    def gather_full(self) -> tuple[Tensor, Tensor]:
        """The whole memory ``([N, d], [N])`` assembled from every owner (a collective under a process group)."""
        n = self.owner.numel()
        full = self.memory.new_zeros(n, self.dim)
        last = self.last_update.new_zeros(n)
        if self.world_size == 1:
            full[self.owned], last[self.owned] = self.memory, self.last_update
            return full, last
        import torch.distributed as dist

        buf = _pack(self.memory, self.last_update)
        sizes = [self.map.num_owned(q) for q in range(self.world_size)]
        padded = buf.new_zeros(max(sizes), buf.size(1))  # all_gather takes equal shapes
        padded[:buf.size(0)] = buf
        out = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(out, padded)
        for q in range(self.world_size):
            ids = self.map.owned(q)
            full[ids], last[ids] = _unpack(out[q][:sizes[q]], [(full.dtype, self.dim), (torch.long, None)])
        return full, last

    # ------------------------------------------------------------------ transport
    def _all_to_all(self, send: Tensor, send_counts: list, recv_counts: list, kind: str, group=None) -> Tensor:
        """``all_to_all_single`` of ``send`` (rows grouped by destination rank) over ``group``
        (``None``: the default group); counts the bytes handed to the collective outside the self
        block (which is always empty here)."""
        import torch.distributed as dist

        width = math.prod(send.shape[1:])
        out = send.new_empty((sum(recv_counts),) + tuple(send.shape[1:]))
        dist.all_to_all_single(out, send.contiguous(), recv_counts, send_counts, group=group)
        self._count(kind, (sum(send_counts) - send_counts[self.rank]) * width * send.element_size())
        return out

    def _exchange_counts(self, send_counts: Tensor, group=None) -> list:
        import torch.distributed as dist

        recv = torch.empty_like(send_counts)
        dist.all_to_all_single(recv, send_counts, group=group)
        self._count("counts", (self.world_size - 1) * send_counts.element_size())
        return recv.tolist()

    def _by_owner(self, ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``ids`` grouped by owner rank (stable): ``(perm, owner of each, rows per rank)``."""
        own = self.owner[ids]
        perm = torch.argsort(own, stable=True)
        return perm, own[perm], torch.bincount(own, minlength=self.world_size)

    # ------------------------------------------------------------------ dispatch
    def organise_fetch(self, occurrences: Tensor) -> "DispatchPlan":
        r"""The id side of a dispatch (no collective, no counter, no row read: it may run on the
        prefetch thread): :math:`V_u` (``"sven"``) or :math:`V_o` grouped by owner, the owned ids'
        local rows and the ``[M]`` request counts.

        Args:
            occurrences: ``[n]`` global ids, one per reference of the computation (:math:`V_o`).
        """
        occ = occurrences.to(self.owner.device)
        uniq = torch.unique(occ)
        ids = uniq if self.dedup else occ  # Sven's V_u (inverse Psi = pos) or DepComm's V_o
        perm, own, per_rank = self._by_owner(ids)
        ids = ids[perm]
        mine = own == self.rank
        send_counts = per_rank.clone()
        send_counts[self.rank] = 0
        local_ids = ids[mine]
        return DispatchPlan(occ.numel(), uniq.numel(), own, local_ids, self.map.local_of(local_ids), ids[~mine],
                            send_counts)

    def fetch(self, occurrences: Tensor) -> None:
        r"""Dispatch: make :meth:`read` serve every vertex of ``occurrences`` (a collective under a
        process group: every rank calls it, possibly with an empty list). :meth:`organise_fetch`
        then :meth:`send_fetch`.

        Args:
            occurrences: ``[n]`` global ids, one per reference of the computation (:math:`V_o`).
        """
        self.send_fetch(self.organise_fetch(occurrences))

    def send_fetch(self, plan: "DispatchPlan") -> None:
        """The row side of a dispatch: the prepared lists to the owners, their rows back (as they
        are now), the table :meth:`read` serves."""
        dev = self.owner.device
        self._call()
        self._plan("dispatch", plan.owners, plan.occurrences, plan.distinct)
        local_ids, remote_ids = plan.local_ids, plan.remote_ids
        local_rows = (self.memory[plan.local_rows], self.last_update[plan.local_rows])
        self._count_local("dispatch", local_ids.numel() * self.row_bytes)
        if self.world_size > 1:
            recv_counts = self._exchange_counts(plan.send_counts)
            sc = plan.send_counts.tolist()
            asked = self._all_to_all(remote_ids, sc, recv_counts, "requests")  # ids others want from me
            loc = self.map.local_of(asked)
            reply = _pack(self.memory[loc], self.last_update[loc])
            got = self._all_to_all(reply, recv_counts, sc, "dispatch")
            remote_mem, remote_last = _unpack(got, [(self.memory.dtype, self.dim), (torch.long, None)])
        else:
            remote_mem, remote_last = self.memory[:0], self.last_update[:0]
        nan = self.memory.new_full((1, self.dim), float("nan"))
        sentinel = torch.full((1,), torch.iinfo(torch.long).min, dtype=torch.long, device=dev)
        self._table = (torch.cat([local_rows[0], remote_mem, nan]), torch.cat([local_rows[1], remote_last, sentinel]))
        self.pos[self._held] = -1  # the previous batch's rows are gone (read: the NaN sentinel)
        held = torch.cat([local_ids, remote_ids])
        self.pos[held] = torch.arange(held.numel(), device=dev)  # duplicates (DepComm) carry equal rows
        self._held = held

    def _count_local(self, kind: str, nbytes: int) -> None:
        if self.phase == "train":
            with self.lock:
                self.epoch["local"][kind] += nbytes

    # ------------------------------------------------------------------ aggregation
    def organise_aggregate(self, src: Tensor, dst: Tensor, n_id: Tensor) -> "AggregatePlan":
        r"""The id side of one writer's aggregation (no collective, no counter: it may run on the
        prefetch thread): the ids to send grouped by owner (``"sven"``: each distinct vertex once,
        at its latest interaction :math:`\Phi`), the row of each in the writer's root rows
        (``n_id`` sorted unique), the ``[M]`` counts.

        Args:
            src, dst: ``[B]`` the local batch's events; n_id: ``[m]`` its root nodes, sorted unique.
        """
        dev = self.owner.device
        occ = torch.cat([src, dst]).to(dev)  # interaction level: one occurrence per event endpoint
        b = src.numel()
        uniq, inv = torch.unique(occ, return_inverse=True)
        if self.dedup:
            # Phi: each distinct vertex's latest interaction (key 2 * event + side breaks the self-loop tie)
            key = torch.cat([2 * torch.arange(b, device=dev), 2 * torch.arange(b, device=dev) + 1])
            latest = torch.full((uniq.numel(),), -1, dtype=torch.long, device=dev)
            latest.scatter_reduce_(0, inv, key, reduce="amax")
            kept = (latest % 2) * b + latest // 2  # the occurrence index of that interaction
            ids = occ[kept]
        else:
            ids = occ
        at = torch.searchsorted(n_id.to(dev), ids)  # the vertex's updated row (every occurrence's row is the same)
        perm, own, per_rank = self._by_owner(ids)
        return AggregatePlan(occ.numel(), uniq.numel(), ids[perm], at[perm], own, per_rank)

    def aggregate(self, batches: list, plans: Optional[list] = None, group=None) -> None:
        r"""Aggregation: every written root row to its owner, applied in trainer order (a
        collective under a process group).

        Args:
            batches: this process's writers in trainer order, each ``(src [B], dst [B], n_id [m],
                rows [m, d], last [m])`` -- the local batch's events and its root nodes' updated
                memory (``n_id`` sorted unique).
            plans: the writers' :meth:`organise_aggregate` results, prepared ahead (``None``:
                organised here).
            group: the process group of the exchange (``None``: the default group;
                ``MemoryTrainer(overlap_aggregation=True)`` runs it on a thread over a group of its own).
        """
        dev = self.owner.device
        self._call()
        blocks = []  # per writer: (ids, rows, last) to send, grouped by owner
        for w, (src, dst, n_id, rows, last) in enumerate(batches):
            plan = self.organise_aggregate(src, dst, n_id) if plans is None else plans[w]
            self._plan("aggregation", plan.owners, plan.occurrences, plan.distinct)
            blocks.append((plan.ids, rows[plan.rows], last[plan.rows], plan.owners, plan.per_rank))
        if self.world_size == 1:
            for ids, rows, last, _, _ in blocks:  # one writer after the other: the later one wins
                self._count_local("aggregation", ids.numel() * self.agg_bytes)
                self.write_owned(ids, rows, last)
            return
        if len(blocks) > 1:
            raise NotImplementedError("a partitioned memory under a process group takes one trainer per rank.")
        if blocks:
            ids, rows, last, own, per_rank = blocks[0]
        else:
            ids = torch.zeros(0, dtype=torch.long, device=dev)
            rows, last = self.memory.new_zeros(0, self.dim), ids
            own, per_rank = ids, torch.zeros(self.world_size, dtype=torch.long, device=dev)
        mine = own == self.rank
        self._count_local("aggregation", int(mine.sum()) * self.agg_bytes)
        send_counts = per_rank.clone()
        send_counts[self.rank] = 0
        recv_counts = self._exchange_counts(send_counts, group)
        send = _pack(ids[~mine], rows[~mine], last[~mine])
        got = self._all_to_all(send, send_counts.tolist(), recv_counts, "aggregation", group)
        r_ids, r_rows, r_last = _unpack(got, [(torch.long, None), (self.memory.dtype, self.dim), (torch.long, None)])
        start = 0
        for q in range(self.world_size):  # source rank = trainer = chronological order
            if q == self.rank:
                self.write_owned(ids[mine], rows[mine], last[mine])
                continue
            end = start + recv_counts[q]
            self.write_owned(r_ids[start:end], r_rows[start:end], r_last[start:end])
            start = end

    # ------------------------------------------------------------------ reporting
    def predicted(self, plans: dict) -> dict:
        r"""Bytes this rank hands to ``all_to_all_single`` in an epoch, from the id lists alone:
        ``plans[kind]`` is the ``[M, M]`` matrix of rows trainer :math:`q` asks of (sends to) owner
        :math:`o` (every rank's ``epoch["plan"]``, gathered)."""
        r, m = self.rank, self.world_size
        off = 1 - torch.eye(m, dtype=torch.long)
        disp, agg = plans["dispatch"] * off, plans["aggregation"] * off
        return {"dispatch": int(disp[:, r].sum()) * self.row_bytes, "requests": int(disp[r].sum()) * 8,
                "aggregation": int(agg[r].sum()) * self.agg_bytes,
                "counts": self.epoch["calls"] * (m - 1) * 8}
