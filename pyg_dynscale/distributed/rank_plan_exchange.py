r"""Each rank builds only its own part of the communication plan.

:meth:`CommunicationPlan.build <pyg_dynscale.partition.plan.CommunicationPlan.build>`
computes every row of every exchange for all :math:`R` ranks; a rank that
runs it holds the whole plan only to keep its own lists
(:meth:`RankPlan.from_plan <pyg_dynscale.partition.rank_plan.RankPlan.from_plan>`).
:func:`build_rank_plan` gets the same :class:`~pyg_dynscale.partition.rank_plan.RankPlan`
without the central plan.

**What a rank receives is local knowledge.** Given the signal's supergraph
and the partition (structure owner :math:`o`, time owner :math:`\tau`), rank
:math:`r` lists the rows it needs, each with the rank that holds it:

* ``spatial``: the in-neighbours :math:`u` of its nodes (:math:`o(v) = r`)
  with :math:`o(u) \ne r`, once each, from :math:`o(u)`;
* ``recurrent``: the previous appearance :math:`u` of each :math:`v \in Q_r`
  with :math:`\tau(u) \ne r`, from :math:`\tau(u)`;
* ``attention``: every appearance before the last :math:`Q_r` appearance of
  a vertex, owned elsewhere; ``window:b``: those less than :math:`b`
  snapshots before one of its appearances;
* ``redis`` / ``back`` (PSS-TS): its time-owned nodes structured elsewhere,
  and back;
* ``readout``: the destinations :math:`d` of the label pairs whose source it
  time-owns, :math:`\tau(d) \ne r`.

**What it sends is learned from one exchange of request lists.** Every rank
sends each other rank the gids it needs from it, all row sets concatenated
(row set tag, then gid order): one ``all_to_all_single`` of the ``[R, tags]``
counts, one of the gids. What rank :math:`s` asks from :math:`r` is
exactly :math:`r`'s send list to :math:`s` in the central plan (its rows
with destination :math:`s`, gid-sorted).

**Recurrent rounds stay per rank.** A node's round (depth,
:func:`~pyg_dynscale.partition.plan.segment_depth`) is the number of
time-owner changes before it in its vertex's sequence. It depends on pieces
of the sequence on other ranks, but only through their *owners*: with the
partition's time-owner array (which every rank holds), rank :math:`r` counts
owner changes along ``sequence_order`` in one chunked scan and keeps the
count only at the nodes of :math:`Q_r` (the rows it sends in the recurrent
exchange) and at the appearance just before each (the rows it receives), so
both ends of a row agree on its round without communication. The ranks'
largest depths ride along in the counts exchange, so every rank knows
:math:`D` = :meth:`~pyg_dynscale.partition.rank_plan.RankPlan.temporal_rounds`
before the last step.

**Global totals** (each exchange's ``[R, R]`` row counts, hence the whole
plan's bytes) come from one ``all_reduce`` in which rank :math:`r` fills
column :math:`r` with what it receives. Set-up errors (bad arguments,
ranks passing different data) stop every rank with the cause
(:func:`~pyg_dynscale.training.ranks.agree`). All collectives run over the
group's host (gloo) twin: the lists are host tensors, also under NCCL.

Cost on rank :math:`r`: chunked scans over the edge, sequence and owner
arrays it holds (:data:`CHUNK` entries at a time), memory for its own rows
and :math:`O(S)` per-sequence values; no other rank's lists.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Optional, Union

import torch
import torch.distributed as dist
from torch import Tensor

from ..errors import DynScaleError, PartitionError
from ..partition.partition import Partition
from ..partition.pattern import DependencyPattern
from ..partition.plan import check_link_pairs, check_plan_inputs, phase_specs
from ..partition.rank_plan import RankExchange, RankPlan
from ..training.ranks import agree, host_group

__all__ = ["build_rank_plan", "local_requests"]


#: positions (or edges) one step of a scan reads: a scan's transient memory is :math:`O(\text{CHUNK})`,
#: not :math:`O(N)` (what it keeps is the rank's own rows and :math:`O(S)` per-sequence values)
CHUNK = 1 << 18


def _chunks(n: int) -> list[tuple[int, int]]:
    step = max(int(CHUNK), 1)
    return [(a, min(a + step, n)) for a in range(0, n, step)]


def _cat(parts: list[Tensor]) -> Tensor:
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)


def _sorted_unique(x: Tensor) -> Tensor:
    """``torch.unique`` (sorted), by one sort: faster on the host."""
    return torch.unique_consecutive(torch.sort(x).values)


def _fingerprint(part: Partition) -> str:
    """A digest of the owner arrays (read in place): ranks that partition differently disagree here."""
    h = hashlib.blake2b(digest_size=16)
    for t in (part.owner, part.time_owner):
        if t is not None:
            h.update(t.cpu().contiguous().numpy().data)
    return h.hexdigest()


def _edge_requests(edge_index: Tensor, owner: Tensor, r: int, N: int) -> Tensor:
    """Sorted unique ``owner[u] * N + u`` over the edges ``u -> v`` with
    ``owner[v] = r != owner[u]``: the rows rank ``r`` receives for them."""
    keys = []
    for a, b in _chunks(edge_index.shape[1]):
        u, v = edge_index[0, a:b], edge_index[1, a:b]
        m = (owner[v] == r) & (owner[u] != r)
        keys.append(owner[u[m]] * max(N, 1) + u[m])
    return _sorted_unique(_cat(keys))


def _moved_requests(have: Tensor, src: Tensor, r: int, N: int) -> Tensor:
    """Sorted ``src[v] * N + v`` over the nodes with ``have[v] = r != src[v]``."""
    keys = []
    for a, b in _chunks(have.numel()):
        v = ((have[a:b] == r) & (src[a:b] != r)).nonzero().flatten() + a
        keys.append(src[v] * max(N, 1) + v)
    return torch.sort(_cat(keys)).values


def _chunk_sequences(starts: Tensor, a: int, b: int) -> tuple[Tensor, Tensor, int, int]:
    """For positions ``[a, b)`` of ``sequence_order``: whether each starts a
    sequence, the sequence of each, and the range ``[lo, hi)`` of the
    sequences starting there (``starts``: ``sequence_ptr[:-1]``)."""
    lo, hi = int(torch.searchsorted(starts, a)), int(torch.searchsorted(starts, b))
    first = torch.zeros(b - a, dtype=torch.bool)
    first[starts[lo:hi] - a] = True
    return first, torch.cumsum(first.long(), 0) + (lo - 1), lo, hi


class _Sequences:
    r"""Rank :math:`r`'s view of the temporal sequences, from chunked scans
    of ``sequence_order`` (positions :math:`p`; a node's sequence holds its
    vertex's appearances in time order).

    Attributes:
        mine (Tensor): positions of the nodes of :math:`Q_r`, ascending.
        seq_of_mine (Tensor): their sequence.
        last (Tensor): ``[S]`` the last :math:`Q_r` position of each
            sequence (``-1``: none).

    With ``depth`` (a recurrent block), the rounds: with :math:`C(p)` the
    running count of time-owner changes between consecutive positions, the
    round of :math:`p` is :math:`C(p) - C(\text{its sequence's start})`
    (owners only, which every rank holds). Kept: ``q_gid`` / ``q_depth``,
    :math:`Q_r` sorted by gid and their rounds, and ``recurrent_keys`` /
    ``recurrent_depth``, the rows the rank receives in the recurrent
    exchange (each previous appearance of a :math:`Q_r` node owned
    elsewhere, as sorted ``src * N + gid``) and their rounds.
    """

    def __init__(self, sg: Any, town: Tensor, r: int, depth: bool) -> None:
        order, ptr = sg.sequence_order, sg.sequence_ptr
        N, S = order.numel(), ptr.numel() - 1
        n = max(N, 1)
        self.order, self.ptr = order, ptr
        starts = ptr[:-1]
        mine, seq, c_mine, c_prev, has_prev = [], [], [], [], []
        c_start = torch.zeros(S, dtype=torch.long)
        carry, o_before = 0, None
        for a, b in _chunks(N):
            o = town[order[a:b]]
            first, sid, lo, hi = _chunk_sequences(starts, a, b)
            m = (o == r).nonzero().flatten()
            mine.append(m + a)
            seq.append(sid[m])
            if depth:
                before = torch.cat([o_before if o_before is not None else o[:1], o[:-1]])  # owner at p - 1
                c = torch.cumsum((o != before).long(), 0) + carry  # C(p); a change into a start cancels below
                c_start[lo:hi] = c[starts[lo:hi] - a]
                c_mine.append(c[m])
                c_prev.append(torch.cat([torch.tensor([carry]), c[:-1]])[m])  # C(p - 1)
                has_prev.append(~first[m])
                carry, o_before = int(c[-1]), o[-1:]
        self.mine, self.seq_of_mine = _cat(mine), _cat(seq)
        self.last = torch.full((S,), -1, dtype=torch.long)
        self.last.scatter_reduce_(0, self.seq_of_mine, self.mine, reduce="amax")
        if not depth:
            return
        base = c_start[self.seq_of_mine]
        d_mine = _cat(c_mine) - base
        hp = torch.cat(has_prev) if has_prev else torch.zeros(0, dtype=torch.bool)
        d_prev = (_cat(c_prev) - base)[hp]
        srt = torch.sort(order[self.mine])
        self.q_gid, self.q_depth = srt.values, d_mine[srt.indices]
        u = order[self.mine[hp] - 1]  # the previous appearance of each Q_r node that has one
        far = town[u] != r
        keys = torch.sort(town[u[far]] * n + u[far])  # one next appearance each: no duplicates
        self.recurrent_keys, self.recurrent_depth = keys.values, d_prev[far][keys.indices]

    def depth_of_own(self, gids: Tensor) -> Tensor:
        """Rounds of nodes of :math:`Q_r`."""
        return self.q_depth[torch.searchsorted(self.q_gid, gids)]


def local_requests(sg: Any, partition: Partition, pattern: DependencyPattern, rank: int, *,
                   link_pairs: Optional[tuple[Tensor, Tensor]] = None) -> tuple[dict[str, Tensor], _Sequences]:
    r"""Rank ``rank``'s receive lists, by row set tag, from local knowledge.

    Returns:
        ``({tag: keys})`` with ``keys = src_rank * N + gid`` sorted (the
        central plan's ``recv_list`` order), for the tags ``pattern`` (and
        ``link_pairs``) use; and the rank's view of the sequences (its
        :math:`Q_r` and, with a recurrent block, their rounds).
    """
    N = sg.num_nodes
    n = max(N, 1)
    r = rank
    own, town = partition.owner.cpu(), partition.temporal_owner.cpu()
    tags = {spec[4] for spec in phase_specs(pattern, partition.time_owner is not None, "load")}
    out: dict[str, Tensor] = {}
    if "spatial" in tags:
        out["spatial"] = _edge_requests(sg.spatial_edge_index, own, r, N)
    if "redis" in tags:  # structure output rows: o(v) -> tau(v)
        out["redis"] = _moved_requests(town, own, r, N)
    if "back" in tags:  # block input rows: tau(v) -> o(v)
        out["back"] = _moved_requests(own, town, r, N)
    seqs = _Sequences(sg, town, r, depth="recurrent" in tags)
    order, ptr, time = seqs.order, seqs.ptr, sg.time
    if "recurrent" in tags:
        out["recurrent"] = seqs.recurrent_keys
    if "attention" in tags:
        # every appearance before the sequence's last Q_r appearance, owned elsewhere
        got = []
        for a, b in _chunks(order.numel()):
            g = order[a:b]
            _, sid, _, _ = _chunk_sequences(ptr[:-1], a, b)
            got.append(g[(seqs.last[sid] > torch.arange(a, b)) & (town[g] != r)])
        g = _cat(got)
        out["attention"] = torch.sort(town[g] * n + g).values
    for tag in sorted(t for t in tags if t.startswith("window:")):
        band = int(tag.split(":")[1])
        mine = seqs.mine
        start = ptr[seqs.seq_of_mine]
        t_mine = time[order[mine]]
        got = []
        for j in range(1, band):  # loop over the band only
            q = mine - j
            ok = q >= start
            g = order[q[ok]]
            got.append(g[(t_mine[ok] - time[g] < band) & (town[g] != r)])
        g = _cat(got)
        out[tag] = _sorted_unique(town[g] * n + g)
    if link_pairs is not None:
        ls, ld = link_pairs
        m = (town[ls] == r) & (town[ld] != r)
        out["readout"] = _sorted_unique(town[ld[m]] * n + ld[m])
    return out, seqs


def _splits(keys: Tensor, N: int, R: int) -> tuple[Tensor, list[int]]:
    """(gids, rows per source rank) of sorted ``src * N + gid`` keys."""
    n = max(N, 1)
    return keys % n, torch.bincount(keys // n, minlength=R).tolist()


def build_rank_plan(
    supergraph: Any,
    partition: Partition,
    pattern: DependencyPattern,
    *,
    group: Optional[Any] = None,
    input_halo: str = "load",
    link_pairs: Optional[tuple[Tensor, Tensor]] = None,
    readout_width: int = 0,
) -> RankPlan:
    r"""This rank's :class:`~pyg_dynscale.partition.rank_plan.RankPlan`,
    built by the ranks together (a collective: every rank of ``group``
    calls it with the same arguments).

    Equal to ``RankPlan.from_plan(CommunicationPlan.build(supergraph,
    partition, pattern, input_halo=..., link_pairs=..., readout_width=...),
    rank)``: the same lists, order, totals and rounds, without any rank
    building the central plan.

    Args:
        supergraph: a :class:`~pyg_dynscale.data.DynamicGraphSignal` or its
            :class:`~pyg_dynscale.data.Supergraph` (on the host).
        partition: owner arrays with ``num_parts`` = the group's size; part
            :math:`r` is the group's rank :math:`r`.
        pattern: the model's dependency pattern.
        group: the process group (``None``: the world; an NCCL group's
            collectives run on its gloo twin). Without an initialized
            process group, a one-part partition runs alone.
        input_halo, link_pairs, readout_width: as
            :meth:`~pyg_dynscale.partition.plan.CommunicationPlan.build`.

    Collectives: one ``all_gather_object`` (set-up agreement), two
    ``all_to_all_single`` (request counts, request gids), one
    ``all_reduce`` (global row counts).
    """
    alone = not (dist.is_available() and dist.is_initialized())
    rank = 0 if alone else dist.get_rank(group)
    world = 1 if alone else dist.get_world_size(group)
    hg = None if alone else host_group(group)
    error: Optional[DynScaleError] = None
    summary: Optional[dict] = None
    sg: Any = None
    pairs = None
    try:
        sg = check_plan_inputs(supergraph, partition, pattern, input_halo)
        if partition.num_parts != world:
            raise PartitionError("partition", f"has {partition.num_parts} parts for {world} ranks.",
                                 "partition into as many parts as the group has ranks.")
        if link_pairs is not None:
            pairs = tuple(t.cpu() for t in check_link_pairs(link_pairs, readout_width, sg.num_nodes, torch.device("cpu")))
        summary = {"num_nodes": sg.num_nodes, "partition": _fingerprint(partition), "scheme": partition.scheme,
                   "pattern": json.dumps(pattern.to_dict(), sort_keys=True), "input_halo": input_halo,
                   "readout": None if pairs is None else
                   (int(readout_width), hashlib.blake2b(torch.stack(pairs).numpy().tobytes(), digest_size=16).hexdigest())}
    except DynScaleError as exc:
        error = exc
    if alone:
        if error is not None:
            raise error
    else:
        agree(error, summary, group)
    N, R = sg.num_nodes, world
    has_redis = partition.time_owner is not None
    specs = phase_specs(pattern, has_redis, input_halo)
    recv, seqs = local_requests(sg, partition, pattern, rank, link_pairs=pairs)
    tags = sorted(recv)
    T = len(tags)
    lists = {t: _splits(recv[t], N, R) for t in tags}
    my_max = int(seqs.q_depth.max()) if "recurrent" in tags and seqs.q_depth.numel() else 0

    # ---- one exchange of request lists: counts (and each rank's deepest round), then the gids
    want = torch.zeros(R, T + 1, dtype=torch.long)  # [dst, tag]: gids this rank asks from dst
    for i, t in enumerate(tags):
        want[:, i] = torch.tensor(lists[t][1], dtype=torch.long)
    want[:, T] = my_max
    asked = _all_to_all(want.flatten(), [T + 1] * R, [T + 1] * R, hg, alone).view(R, T + 1)
    D = int(asked[:, T].max()) + 1 if "recurrent" in tags else 0
    # request buffer: by destination rank, then tag, then gid
    if T:
        src = torch.cat([recv[t] // max(N, 1) for t in tags])
        tag_of = torch.repeat_interleave(torch.arange(T), torch.tensor([recv[t].numel() for t in tags]))
        gids = torch.cat([lists[t][0] for t in tags])
        order = torch.argsort((src * T + tag_of) * max(N, 1) + gids)
        request = gids[order]
    else:
        request = torch.zeros(0, dtype=torch.long)
    got = _all_to_all(request, want[:, :T].sum(1).tolist(), asked[:, :T].sum(1).tolist(), hg, alone)
    tag_in = torch.repeat_interleave(torch.arange(T).repeat(R), asked[:, :T].flatten(), output_size=got.numel())
    send = {t: (got[tag_in == i], asked[:, i].tolist()) for i, t in enumerate(tags)}

    # ---- the senders hold what they are asked for (a disagreement would be a bug: flagged, raised on all ranks)
    own, town = partition.owner.cpu(), partition.temporal_owner.cpu()
    holder = {"spatial": own, "redis": own, "back": town}
    bad = any(bool((holder.get(t, town)[send[t][0]] != rank).any()) for t in tags)

    # ---- rounds of the recurrent exchange, on both sides from the local depths
    round_lists: list = []
    if "recurrent" in tags:
        sg_, ss = send["recurrent"]
        rg, rs = lists["recurrent"]
        sd, rd = seqs.depth_of_own(sg_), seqs.recurrent_depth
        s_dst = torch.repeat_interleave(torch.arange(R), torch.tensor(ss), output_size=sg_.numel())
        r_src = torch.repeat_interleave(torch.arange(R), torch.tensor(rs), output_size=rg.numel())
        for k in range(D - 1):
            a, b = sd == k, rd == k
            round_lists.append((sg_[a], torch.bincount(s_dst[a], minlength=R).tolist(),
                                rg[b], torch.bincount(r_src[b], minlength=R).tolist()))

    # ---- global row counts: rank r fills column r (what it receives); one all_reduce
    counts = torch.zeros(T + len(round_lists) + 1, R, R, dtype=torch.long)
    for i, t in enumerate(tags):
        counts[i, :, rank] = torch.tensor(lists[t][1], dtype=torch.long)
    for k, (_, _, _, rsplit) in enumerate(round_lists):
        counts[T + k, :, rank] = torch.tensor(rsplit, dtype=torch.long)
    counts[-1, 0, 0] = int(bad)
    if not alone:
        dist.all_reduce(counts, group=hg)
    if int(counts[-1, 0, 0]):
        raise PartitionError("partition", "a rank was asked for rows it does not own (the ranks' owner arrays "
                             "or signals differ).", "pass the same signal and partition on every rank.")

    bpe = pattern.bytes_per_element
    total = {t: counts[i] for i, t in enumerate(tags)}

    def rank_exchange(block: int, phase: str, kind: str, width: int, tag: str, static: bool) -> RankExchange:
        (sgid, ssplit), (rgid, rsplit) = send[tag], lists[tag]
        return RankExchange(block, phase, kind, int(width), static, bpe, sgid, ssplit, rgid, rsplit, rank, total[tag])

    exchanges = [rank_exchange(*s) for s in specs]
    if pairs is not None:
        exchanges.append(rank_exchange(pattern.num_blocks - 1, "readout", "readout", readout_width, "readout", False))
    rounds: dict = {}
    for b, blk in enumerate(pattern.blocks):
        if blk.time_kind == "recurrent":
            rounds[b] = [RankExchange(b, f"temporal:{k}", "temporal", blk.time_width, False, bpe, sgid, ssplit,
                                      rgid, rsplit, rank, counts[T + k])
                         for k, (sgid, ssplit, rgid, rsplit) in enumerate(round_lists)]
    rec = "recurrent" in tags
    return RankPlan(rank, R, N, partition.scheme, pattern, exchanges, rounds, seqs.q_gid if rec else None,
                    seqs.q_depth if rec else None, D)


def _all_to_all(x: Tensor, in_splits: list[int], out_splits: list[int], group: Any, alone: bool) -> Tensor:
    """``all_to_all_single`` of a host long tensor over the host group."""
    if alone:
        return x.clone()
    out = torch.empty(sum(out_splits), dtype=x.dtype)
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out
