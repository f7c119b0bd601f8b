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
* **Host and device** (:mod:`~pyg_dynscale.ctdg.host`): the owner map, the
  id lists, the counts and the table's position map are host tensors; only
  the rows (``memory``, ``last_update``, the fetched table) are on the
  device. Under a process group a :class:`Channel` carries each exchange:
  the ``[M]`` counts and the ids (requests; the aggregation's ids) as host
  tensors over a group that moves them (gloo: the default group itself, or
  a gloo twin of an NCCL one), the rows over the default group's backend
  (:mod:`~pyg_dynscale.distributed.transport`: directly over NCCL / gloo on
  the CPU, staged through the host for several ranks sharing a GPU over
  gloo). The split sizes of every ``all_to_all_single`` are host lists, so
  an exchange reads nothing back from the device. The aggregation's bytes
  per row are the same as one packed row (id ``8`` on the host group,
  memory and ``last_update`` ``d s + 8`` on the device), counted as
  ``aggregation``.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from ..errors import ModelInputError, UnsupportedOptionError
from ..training.traffic import ByteLedger
from .host import host_copy, host_to_device
from .memory_partition import METHODS as _METHODS, partition_vertices  # the owner methods `partition=` names
from .owner_map import OwnerMap
from .store import write_rows

__all__ = ["PLACEMENTS", "AggregatePlan", "Channel", "DispatchPlan", "ExchangeCounters", "PartitionedMemory", "check_owner",
           "pack_rows", "resolve_partition", "unpack_rows"]

#: the ``memory_placement`` values of :class:`~pyg_dynscale.ctdg.MemoryTrainer`
PLACEMENTS = ("replicated", "partitioned", "sven")
#: the kinds of bytes the exchanges hand to ``all_to_all_single``
_SENT = ("dispatch", "requests", "aggregation", "counts")


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
    :func:`pyg_dynscale.ctdg.memory_partition.partition_vertices`."""
    if isinstance(partition, str):
        if partition not in _METHODS:
            raise ModelInputError("partition", f"is {partition!r}.", f"use one of {list(_METHODS)} or an owner tensor.")
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


def pack_rows(rows: Tensor, last: Tensor) -> Tensor:
    """Memory rows ``[n, d]`` and their ``last_update [n]`` as one ``[n, d s + 8]`` ``uint8``
    tensor: one collective moves both (integers kept exact)."""
    return _pack(rows, last)


def unpack_rows(buf: Tensor, dtype: torch.dtype, width: int) -> tuple[Tensor, Tensor]:
    """The inverse of :func:`pack_rows`: ``(rows [n, width] of dtype, last_update [n] int64)``."""
    rows, last = _unpack(buf, [(dtype, width), (torch.long, None)])
    return rows, last


@dataclass(frozen=True)
class Channel:
    """Where the values of one rank's exchanges travel under a process group.

    Attributes:
        host: the group the ``[M]`` counts and the ids go over, as host tensors
            (``None``: the default group, when it moves host tensors).
        rows: a :class:`~pyg_dynscale.distributed.transport.Transport` for the device
            rows (``None``: ``all_to_all_single`` over the default group).
    """

    host: object = None
    rows: object = None


@dataclass(frozen=True)
class DispatchPlan:
    """The id lists of one dispatch (:meth:`PartitionedMemory.organise_fetch`): what depends on
    the ids only, not on the rows."""

    occurrences: int  #: :math:`|V_o|`
    distinct: int  #: :math:`|V_u|`
    owners: Tensor  #: ``[L]`` owner of each listed id (grouped; host)
    local_ids: Tensor  #: ``[l]`` listed ids this rank owns (host)
    local_rows: Tensor  #: ``[l]`` their rows in this rank's store (host)
    remote_ids: Tensor  #: ``[L - l]`` the ids asked of the other owners, grouped by owner (host)
    send_counts: Tensor  #: ``[M]`` ids asked of each owner (0 for this rank; host)


@dataclass(frozen=True)
class AggregatePlan:
    """The id lists of one writer's aggregation (:meth:`PartitionedMemory.organise_aggregate`)."""

    occurrences: int  #: event endpoints of the local batch
    distinct: int  #: distinct vertices among them
    ids: Tensor  #: ``[L]`` ids to write, grouped by owner (host)
    rows: Tensor  #: ``[L]`` row of each in the writer's root rows (host)
    owners: Tensor  #: ``[L]`` owner of each (host)
    per_rank: Tensor  #: ``[M]`` rows per owner (host)


def _handed(send: Tensor, self_elements: int) -> int:
    """Bytes of the buffer ``send`` handed to an ``all_to_all_single``, less its block for this rank
    itself (``self_elements`` elements: what does not cross the network)."""
    return (send.numel() - self_elements) * send.element_size()


class ExchangeCounters:
    r"""What a :class:`PartitionedMemory`'s exchanges count, shared by its table views
    (:func:`~pyg_dynscale.ctdg.microbatch.table_view`) and guarded by one lock (the aggregation
    may run on a thread, ``overlap_aggregation``).

    * **Measured**: the bytes of every buffer handed to ``all_to_all_single`` (less the
      rank's own block), written into a :class:`~pyg_dynscale.training.ByteLedger` where the
      collective is issued; evaluation's exchanges under ``eval_<kind>``.
    * **Predicted** (:attr:`epoch` ``["plan"]``): the ``[M]`` rows per owner the id lists imply,
      and Eq. 1's occurrences and distinct vertices, counted apart from the transport.

    Args:
        world_size (int): the owners :math:`M`.
        ledger (ByteLedger, optional): the ledger to write (``None``: one of its own).
    """

    def __init__(self, world_size: int, ledger: Optional[ByteLedger] = None) -> None:
        self.world_size = world_size
        self.ledger = ByteLedger() if ledger is None else ledger
        self.phase = "train"
        self.lock = threading.Lock()
        self.begin_epoch()

    def begin_epoch(self) -> None:
        """Zero the per-epoch counters (training phase); the ledger's running totals stay."""
        m = self.world_size
        with self.lock:
            self.epoch = {"local": {"dispatch": 0, "aggregation": 0},
                          "plan": {k: torch.zeros(m, dtype=torch.long) for k in ("dispatch", "aggregation")},
                          "calls": 0, "occurrences": {k: [0, 0] for k in ("dispatch", "aggregation")}}

    def count(self, kind: str, nbytes: int) -> None:
        """``nbytes`` handed to a collective of ``kind`` (``eval_<kind>`` while evaluating)."""
        with self.lock:
            self.ledger.add(kind if self.phase == "train" else f"eval_{kind}", nbytes)

    def local(self, kind: str, nbytes: int) -> None:
        """Rows served from the rank's own store (not sent)."""
        if self.phase == "train":
            with self.lock:
                self.epoch["local"][kind] += nbytes

    def plan(self, kind: str, owners: Tensor, occurrences: int, distinct: int) -> None:
        """The id lists' prediction (rows per owner) and Eq. 1's counts, kept apart from the transport."""
        if self.phase != "train":
            return
        per_owner = torch.bincount(owners, minlength=self.world_size)
        with self.lock:
            e = self.epoch
            e["plan"][kind] += per_owner
            e["occurrences"][kind][0] += occurrences
            e["occurrences"][kind][1] += distinct

    def call(self) -> None:
        """One dispatch or aggregation: one ``[M]`` counts exchange under a process group."""
        if self.phase == "train" and self.world_size > 1:
            with self.lock:
                self.epoch["calls"] += 1

    def totals(self) -> dict:
        """Bytes handed to the exchanges so far, training and evaluation (``eval_<kind>``)."""
        return {k: v for k, v in self.ledger.totals().items() if k.split("_", 1)[-1] in _SENT}


class PartitionedMemory:
    r"""The vertices one rank owns, and the exchanges that read and write the others.

    Args:
        owner (Tensor): ``[N]`` int64 owner rank per vertex (:math:`\lambda_1`).
        rank, world_size (int): this process and the number of owners.
        dim (int): memory width :math:`d`; dtype, device: of the memory.
        dedup (bool): Sven's redundancy-free lists (``True``) or one row per occurrence (DepComm).
        ledger (ByteLedger, optional): where the exchanges count the bytes they hand to
            ``all_to_all_single`` (the trainer's; ``None``: a ledger of its own).

    Attributes:
        owner, pos: ``[N]`` host tensors: the owner of every vertex, the fetched table's row of
            every vertex (``-1``: not fetched).
        memory, last_update: ``[n_r, d]``, ``[n_r]`` this rank's rows, on ``device``.
        channel (Channel): set by :meth:`connect` under a process group.
    """

    def __init__(self, owner: Tensor, rank: int, world_size: int, dim: int, dtype: torch.dtype,
                 device: torch.device, dedup: bool, ledger: Optional[ByteLedger] = None) -> None:
        self.map = OwnerMap(host_copy(owner), world_size)  # lambda_1, lambda_2 (dense), on the host
        self.owner = self.map.owner
        self.rank, self.world_size, self.dim, self.dedup = rank, world_size, dim, dedup
        self.device = torch.device(device)
        self.owned = self.map.owned(rank)  # sorted global ids: row r holds owned[r]
        n = self.owned.numel()
        self.memory = torch.zeros(n, dim, dtype=dtype, device=device)
        self.last_update = torch.zeros(n, dtype=torch.long, device=device)
        elt = torch.empty((), dtype=dtype).element_size()
        #: bytes of one dispatched row (memory + last_update) and of one aggregated row (id + row)
        self.row_bytes = dim * elt + 8
        self.agg_bytes = self.row_bytes + 8
        self.pos = torch.full((owner.numel(),), -1, dtype=torch.long)  # table row of a vertex (host)
        self._table: tuple = (self.memory.new_full((1, dim), float("nan")),
                              torch.full((1,), torch.iinfo(torch.long).min, dtype=torch.long, device=device))
        self._held = self.owned[:0]
        self.channel = Channel()
        #: the exchanges' counters (shared with :func:`~pyg_dynscale.ctdg.microbatch.table_view` views)
        self.counters = ExchangeCounters(world_size, ledger)

    def connect(self, channel: Channel) -> None:
        """The groups / transport of this rank's exchanges under a process group."""
        self.channel = channel

    # ------------------------------------------------------------------ counters
    @property
    def phase(self) -> str:
        """``"train"`` or ``"eval"``: the counters the exchanges write (shared with the table views)."""
        return self.counters.phase

    @phase.setter
    def phase(self, value: str) -> None:
        self.counters.phase = value

    @property
    def epoch(self) -> dict:
        """This training epoch's counters (:attr:`ExchangeCounters.epoch`)."""
        return self.counters.epoch

    def begin_epoch(self) -> None:
        """Zero the per-epoch counters (training phase)."""
        self.counters.begin_epoch()

    def _count(self, kind: str, nbytes: int) -> None:
        self.counters.count(kind, nbytes)

    def _plan(self, kind: str, owners: Tensor, occurrences: int, distinct: int) -> None:
        self.counters.plan(kind, owners, occurrences, distinct)

    def _call(self) -> None:
        self.counters.call()

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
        """Write the rows of the host ids ``ids`` this rank owns (the others are their owners'
        business); a later occurrence of an id wins."""
        self.write_parts([(ids, rows, last)])

    def write_parts(self, parts: list) -> None:
        """:meth:`write_owned` of several ``(ids, rows, last)`` in order (a later part wins), as
        one scatter (:func:`~pyg_dynscale.ctdg.store.write_rows`)."""
        local = []
        for ids, rows, last in parts:
            sel = torch.nonzero(self.owner[ids] == self.rank).view(-1)  # host
            if sel.numel() == ids.numel():
                local.append((self.map.local_of(ids), rows, last))
            elif sel.numel():
                at = host_to_device(sel, self.device)
                local.append((self.map.local_of(ids[sel]), rows[at], last[at]))
        write_rows(self.memory, self.last_update, local)

    def table(self) -> tuple[Tensor, Tensor]:
        """The fetched table ``(memory [R, d], last_update [R])`` (device); its last row is the
        NaN / ``int64`` minimum sentinel that a vertex missing from the last fetch reads."""
        return self._table

    def rows_of(self, ids: Tensor) -> Tensor:
        """The host row of each of the host ids ``ids`` in :meth:`table` (a vertex not fetched
        reads the sentinel row)."""
        return self.pos[ids]

    def read(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(memory [n, d], last_update [n])`` of the host ids ``ids`` from the last fetched table."""
        p = host_to_device(self.rows_of(ids), self.device)
        return self._table[0][p], self._table[1][p]

    def gather_full(self) -> tuple[Tensor, Tensor]:
        """The whole memory ``([N, d], [N])`` assembled from every owner (a collective under a process group)."""
        n = self.owner.numel()
        full = self.memory.new_zeros(n, self.dim)
        last = self.last_update.new_zeros(n)
        if self.world_size == 1:
            at = host_to_device(self.owned, self.device)
            full[at], last[at] = self.memory, self.last_update
            return full, last
        import torch.distributed as dist

        buf = _pack(self.memory, self.last_update)
        sizes = [self.map.num_owned(q) for q in range(self.world_size)]
        padded = buf.new_zeros(max(sizes), buf.size(1))  # all_gather takes equal shapes
        padded[:buf.size(0)] = buf
        out = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(out, padded)
        for q in range(self.world_size):
            at = host_to_device(self.map.owned(q), self.device)
            full[at], last[at] = _unpack(out[q][:sizes[q]], [(full.dtype, self.dim), (torch.long, None)])
        return full, last

    # ------------------------------------------------------------------ transport
    def _rows_all_to_all(self, send: Tensor, send_counts: list, recv_counts: list, kind: str,
                         channel: Channel) -> Tensor:
        """The device rows ``send`` (grouped by destination rank) through ``channel``'s transport,
        split sizes given as host lists; counts the bytes handed over outside the self block
        (which is always empty here)."""
        width = math.prod(send.shape[1:])
        if channel.rows is not None:
            out = channel.rows.all_to_all(send.contiguous(), send_counts, recv_counts)
        else:
            import torch.distributed as dist

            out = send.new_empty((sum(recv_counts),) + tuple(send.shape[1:]))
            dist.all_to_all_single(out, send.contiguous(), recv_counts, send_counts)
        self._count(kind, _handed(send, send_counts[self.rank] * width))
        return out

    def _host_all_to_all(self, send: Tensor, send_counts: list, recv_counts: list, kind: Optional[str],
                         channel: Channel) -> Tensor:
        """``all_to_all_single`` of the host tensor ``send`` over ``channel``'s host group; counts its
        bytes as ``kind`` (``None``: not counted here)."""
        import torch.distributed as dist

        width = math.prod(send.shape[1:])
        out = send.new_empty((sum(recv_counts),) + tuple(send.shape[1:]))
        dist.all_to_all_single(out, send.contiguous(), recv_counts, send_counts, group=channel.host)
        if kind is not None:
            self._count(kind, _handed(send, send_counts[self.rank] * width))
        return out

    def _exchange_counts(self, send_counts: Tensor, channel: Channel) -> list:
        """The ``[M]`` host counts over the host group: what every rank sends this one."""
        import torch.distributed as dist

        recv = torch.empty_like(send_counts)
        dist.all_to_all_single(recv, send_counts, group=channel.host)
        self._count("counts", _handed(send_counts, 1))
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
        local rows and the ``[M]`` request counts, all on the host.

        Args:
            occurrences: ``[n]`` global ids (host), one per reference of the computation (:math:`V_o`).
        """
        occ = occurrences
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
            occurrences: ``[n]`` global ids (host), one per reference of the computation (:math:`V_o`).
        """
        self.send_fetch(self.organise_fetch(occurrences))

    def send_fetch(self, plan: "DispatchPlan") -> None:
        """The row side of a dispatch: the prepared lists to the owners (host group), their rows
        back (as they are now; the device group), the table :meth:`read` serves."""
        dev = self.device
        self._call()
        self._plan("dispatch", plan.owners, plan.occurrences, plan.distinct)
        local_ids, remote_ids = plan.local_ids, plan.remote_ids
        at = host_to_device(plan.local_rows, dev)
        local_rows = (self.memory[at], self.last_update[at])
        self._count_local("dispatch", local_ids.numel() * self.row_bytes)
        if self.world_size > 1:
            ch = self.channel
            recv_counts = self._exchange_counts(plan.send_counts, ch)
            sc = plan.send_counts.tolist()
            asked = self._host_all_to_all(remote_ids, sc, recv_counts, "requests", ch)  # ids others want from me
            loc = host_to_device(self.map.local_of(asked), dev)
            reply = _pack(self.memory[loc], self.last_update[loc])
            got = self._rows_all_to_all(reply, recv_counts, sc, "dispatch", ch)
            remote_mem, remote_last = _unpack(got, [(self.memory.dtype, self.dim), (torch.long, None)])
        else:
            remote_mem, remote_last = self.memory[:0], self.last_update[:0]
        nan = self.memory.new_full((1, self.dim), float("nan"))
        sentinel = torch.full((1,), torch.iinfo(torch.long).min, dtype=torch.long, device=dev)
        self._table = (torch.cat([local_rows[0], remote_mem, nan]), torch.cat([local_rows[1], remote_last, sentinel]))
        self.pos[self._held] = -1  # the previous batch's rows are gone (read: the NaN sentinel)
        held = torch.cat([local_ids, remote_ids])
        self.pos[held] = torch.arange(held.numel())  # duplicates (DepComm) carry equal rows
        self._held = held

    def _count_local(self, kind: str, nbytes: int) -> None:
        self.counters.local(kind, nbytes)

    # ------------------------------------------------------------------ aggregation
    def organise_aggregate(self, src: Tensor, dst: Tensor, n_id: Tensor) -> "AggregatePlan":
        r"""The id side of one writer's aggregation (no collective, no counter: it may run on the
        prefetch thread): the ids to send grouped by owner (``"sven"``: each distinct vertex once,
        at its latest interaction :math:`\Phi`), the row of each in the writer's root rows
        (``n_id`` sorted unique), the ``[M]`` counts; all on the host.

        Args:
            src, dst: ``[B]`` the local batch's events; n_id: ``[m]`` its root nodes, sorted unique (host).
        """
        occ = torch.cat([src, dst])  # interaction level: one occurrence per event endpoint
        b = src.numel()
        uniq, inv = torch.unique(occ, return_inverse=True)
        if self.dedup:
            # Phi: each distinct vertex's latest interaction (key 2 * event + side breaks the self-loop tie)
            key = torch.cat([2 * torch.arange(b), 2 * torch.arange(b) + 1])
            latest = torch.full((uniq.numel(),), -1, dtype=torch.long)
            latest.scatter_reduce_(0, inv, key, reduce="amax")
            kept = (latest % 2) * b + latest // 2  # the occurrence index of that interaction
            ids = occ[kept]
        else:
            ids = occ
        at = torch.searchsorted(n_id, ids)  # the vertex's updated row (every occurrence's row is the same)
        perm, own, per_rank = self._by_owner(ids)
        return AggregatePlan(occ.numel(), uniq.numel(), ids[perm], at[perm], own, per_rank)

    def aggregate(self, batches: list, plans: Optional[list] = None, channel: Optional[Channel] = None) -> None:
        r"""Aggregation: every written root row to its owner, applied in trainer order (a
        collective under a process group).

        Args:
            batches: this process's writers in trainer order, each ``(src [B], dst [B], n_id [m],
                rows [m, d], last [m])`` -- the local batch's events and root nodes (host) and its
                root nodes' updated memory (device; ``n_id`` sorted unique).
            plans: the writers' :meth:`organise_aggregate` results, prepared ahead (``None``:
                organised here).
            channel: the groups of the exchange (``None``: :attr:`channel`;
                ``MemoryTrainer(overlap_aggregation=True)`` runs it on a thread over groups of its own).
        """
        dev = self.device
        ch = self.channel if channel is None else channel
        self._call()
        blocks = []  # per writer: (ids, rows, last) to send, grouped by owner
        for w, (src, dst, n_id, rows, last) in enumerate(batches):
            plan = self.organise_aggregate(src, dst, n_id) if plans is None else plans[w]
            self._plan("aggregation", plan.owners, plan.occurrences, plan.distinct)
            at = host_to_device(plan.rows, dev)
            blocks.append((plan.ids, rows[at], last[at], plan.owners, plan.per_rank))
        if self.world_size == 1:
            for ids, _, _, _, _ in blocks:
                self._count_local("aggregation", ids.numel() * self.agg_bytes)
            self.write_parts([(ids, rows, last) for ids, rows, last, _, _ in blocks])  # the later writer wins
            return
        if len(blocks) > 1:
            raise UnsupportedOptionError("parallelism", "gives a rank several writers of a partitioned memory.",
                                         "one trainer per rank: parallelism=(world_size, 1, 1).")
        if blocks:
            ids, rows, last, own, per_rank = blocks[0]
        else:
            ids = torch.zeros(0, dtype=torch.long)
            rows, last = self.memory.new_zeros(0, self.dim), self.last_update.new_zeros(0)
            own, per_rank = ids, torch.zeros(self.world_size, dtype=torch.long)
        mine = own == self.rank  # host
        self._count_local("aggregation", int(mine.sum()) * self.agg_bytes)
        send_counts = per_rank.clone()
        send_counts[self.rank] = 0
        recv_counts = self._exchange_counts(send_counts, ch)
        sc = send_counts.tolist()
        keep, away = torch.nonzero(mine).view(-1), torch.nonzero(~mine).view(-1)
        r_ids = self._host_all_to_all(ids[away], sc, recv_counts, "aggregation", ch)  # 8 bytes per row
        away_d = host_to_device(away, dev)
        got = self._rows_all_to_all(_pack(rows[away_d], last[away_d]), sc, recv_counts, "aggregation", ch)
        r_rows, r_last = _unpack(got, [(self.memory.dtype, self.dim), (torch.long, None)])
        parts, start = [], 0
        for q in range(self.world_size):  # source rank = trainer = chronological order
            if q == self.rank:
                keep_d = host_to_device(keep, dev)
                parts.append((ids[keep], rows[keep_d], last[keep_d]))
                continue
            end = start + recv_counts[q]
            parts.append((r_ids[start:end], r_rows[start:end], r_last[start:end]))
            start = end
        self.write_parts(parts)

    # ------------------------------------------------------------------ reporting
    def predicted(self, plans: dict) -> dict:
        r"""Bytes this rank hands to ``all_to_all_single`` in an epoch, from the id lists alone:
        ``plans[kind]`` is the ``[M, M]`` matrix of rows trainer :math:`q` asks of (sends to) owner
        :math:`o` (every rank's ``epoch["plan"]``, gathered). An aggregated row's id (on the host
        group) and its memory row (on the device group) count together, as one packed row."""
        r, m = self.rank, self.world_size
        off = 1 - torch.eye(m, dtype=torch.long)
        disp, agg = plans["dispatch"] * off, plans["aggregation"] * off
        return {"dispatch": int(disp[:, r].sum()) * self.row_bytes, "requests": int(disp[r].sum()) * 8,
                "aggregation": int(agg[r].sum()) * self.agg_bytes,
                "counts": self.epoch["calls"] * (m - 1) * 8}
