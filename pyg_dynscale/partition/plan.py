r"""The communication plan: exactly which rows cross which ranks (docs/design.md).

One object answers both "how many bytes would this partition move per epoch"
(for partitioners, metrics and benchmarks) and "which rows does rank ``s``
send to rank ``d`` in this phase" (for an ``all_to_all_single`` runtime), so
prediction and measured traffic are computed by the same code.

For a supergraph with structure owner :math:`o`, time owner :math:`\tau`
(:math:`\tau = o` unless PSS-TS) and a :class:`DependencyPattern`, every block
:math:`b` has these exchanges (phases), in execution order:

* ``"redistribution_back"`` (PSS-TS, :math:`b \ge 1`): every node with
  :math:`o(v) \ne \tau(v)` moves its block input row (``input_width``) from
  :math:`\tau(v)` to :math:`o(v)`.
* ``"spatial:l"`` for each structure-encoder layer :math:`l`: the rows
  :math:`\{(o(v), u) : (u \to v) \in E_\text{spatial},\ o(u) \ne o(v)\}`,
  i.e. each in-neighbour row sent **once per destination rank**, from
  :math:`o(u)` to :math:`o(v)`, ``spatial_widths[l]`` wide.
* ``"redistribution"`` (PSS-TS): every node with :math:`o(v) \ne \tau(v)`
  moves its structure output row (``output_width``) from :math:`o(v)` to
  :math:`\tau(v)`.
* ``"temporal"``: recurrent -- for every temporal edge :math:`(u \to v)` with
  :math:`\tau(u) \ne \tau(v)`, row :math:`u` goes from :math:`\tau(u)` to
  :math:`\tau(v)`; attention -- row :math:`u` goes to every rank
  :math:`r \ne \tau(u)` that owns a *later* appearance of the same vertex
  (deduplicated per destination rank); window (band :math:`b`) -- the same,
  restricted to later appearances :math:`(i,t)` of :math:`u = (i,t')` with
  :math:`t - t' < b`. ``time_width`` wide. Blocks with
  ``time_kind="none"`` have no temporal phase.

After the last block, when link-label pairs are given (``link_pairs``), a
``"readout"`` phase moves the final row of every label destination
:math:`d` from :math:`\tau(d)` to :math:`\tau(s)` when they differ (the loss
of pair :math:`(s, d)` is computed by the time owner of :math:`s`).

Rows of block 0's first spatial layer are raw input features: with
``input_halo="load"`` (the default, what the distributed runtime does) that
exchange is *static* -- moved once before training, no gradient -- so it
counts as :meth:`CommunicationPlan.load_bytes`, not as per-epoch traffic.

A recurrent sequence cut between ranks is a chain: the state sent across cut
:math:`u \to v` depends on every earlier piece of the sequence. The runtime
processes it in *rounds* (:func:`segment_depth`): round :math:`k` scans every
piece that has :math:`k` earlier pieces, then sends the states its pieces end
with. The rows of all rounds together are exactly the ``"temporal"`` rows.

Each exchange stores its rows sorted by ``(src rank, dst rank, gid)``: rank
``s``'s send buffer for ``all_to_all_single`` is its slice, with split sizes
``counts()[s]``; rank ``d`` receives ``counts()[:, d]`` rows from each source,
concatenated in source order, each block gid-sorted (:meth:`Exchange.recv_list`).
The backward pass sends one gradient row back for each forward row, so
backward bytes equal forward bytes per exchange.

Everything is built with sorts and ``unique`` over edge arrays; Python loops
run only over blocks, phases and ranks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Union

import torch
from torch import Tensor

from ..errors import PartitionError
from .partition import Partition
from .pattern import BlockPattern, DependencyPattern

if TYPE_CHECKING:  # pragma: no cover
    from ..data.signal import DynamicGraphSignal
    from ..data.supergraph import Supergraph

KINDS = ("spatial", "temporal", "redistribution", "readout")


def bytes_by_kind(exchanges, forward_only: bool = False) -> dict[str, int]:
    """Bytes per epoch of ``exchanges`` by kind and ``"total"``: the sums of every plan
    (:class:`CommunicationPlan` and a rank's :class:`~pyg_dynscale.partition.rank_plan.RankPlan`)."""
    out = {k: 0 for k in KINDS}
    for e in exchanges:
        out[e.kind] += e.forward_bytes if forward_only else e.forward_bytes + e.backward_bytes
    out["total"] = sum(out[k] for k in KINDS)
    return out


def rows_by_kind(exchanges) -> dict[str, int]:
    """Forward rows per epoch of ``exchanges`` by kind (static rows excluded)."""
    out = {k: 0 for k in KINDS}
    for e in exchanges:
        if not e.static:
            out[e.kind] += e.num_rows
    return out


@dataclass(frozen=True, eq=False)
class Exchange:
    r"""The rows one phase of one block moves between ranks.

    Attributes:
        block (int): block index.
        phase (str): ``"spatial:<l>"``, ``"temporal"``, ``"redistribution"``,
            ``"redistribution_back"`` or ``"readout"``.
        kind (str): ``"spatial"``, ``"temporal"``, ``"redistribution"`` or ``"readout"``.
        width (int): elements per row.
        bytes_per_element (int): element size.
        num_parts (int): :math:`R`.
        src (Tensor): ``[K]`` sending rank of each row.
        dst (Tensor): ``[K]`` receiving rank.
        gid (Tensor): ``[K]`` vertex-time node whose row is sent.
        pair_ptr (Tensor): ``[R*R+1]`` offsets of each ``(src, dst)`` pair's rows
            (rows are sorted by ``(src, dst, gid)``).
        static (bool): rows moved once before training (raw input features:
            no per-epoch traffic, no gradient).
    """

    block: int
    phase: str
    kind: str
    width: int
    bytes_per_element: int
    num_parts: int
    src: Tensor
    dst: Tensor
    gid: Tensor
    pair_ptr: Tensor
    static: bool = False

    @classmethod
    def from_rows(cls, block: int, phase: str, kind: str, width: int, bpe: int, R: int,
                  src: Tensor, dst: Tensor, gid: Tensor, num_nodes: int, dedup: bool = True) -> "Exchange":
        """Sort (and deduplicate) rows by ``(src, dst, gid)``."""
        key = (src * R + dst) * max(num_nodes, 1) + gid
        key = torch.unique(key) if dedup else torch.sort(key).values
        n = max(num_nodes, 1)
        gid = key % n
        pair = key // n
        src, dst = pair // R, pair % R
        counts = torch.bincount(pair, minlength=R * R)
        pair_ptr = torch.zeros(R * R + 1, dtype=torch.long, device=key.device)
        torch.cumsum(counts, 0, out=pair_ptr[1:])
        return cls(block, phase, kind, int(width), int(bpe), R, src, dst, gid, pair_ptr)

    @property
    def num_rows(self) -> int:
        return self.gid.numel()

    @property
    def row_bytes(self) -> int:
        """Bytes of all rows once: ``rows * width * bytes_per_element``."""
        return self.num_rows * self.width * self.bytes_per_element

    @property
    def forward_bytes(self) -> int:
        """Forward bytes per epoch (``0`` for a static exchange)."""
        return 0 if self.static else self.row_bytes

    @property
    def backward_bytes(self) -> int:
        """One gradient row per forward row (none for a static exchange)."""
        return self.forward_bytes

    @property
    def load_bytes(self) -> int:
        """Bytes moved once before training (static exchanges only)."""
        return self.row_bytes if self.static else 0

    def subset(self, keep: Tensor, phase: Optional[str] = None) -> "Exchange":
        """The rows where ``keep`` (``[K]`` bool, in row order) is true, as an
        exchange of their own (e.g. one round of a recurrent exchange)."""
        R = self.num_parts
        pair = (self.src * R + self.dst)[keep]
        pair_ptr = torch.zeros(R * R + 1, dtype=torch.long, device=pair.device)
        torch.cumsum(torch.bincount(pair, minlength=R * R), 0, out=pair_ptr[1:])
        return Exchange(self.block, phase or self.phase, self.kind, self.width, self.bytes_per_element, R,
                        self.src[keep], self.dst[keep], self.gid[keep], pair_ptr, self.static)

    def counts(self) -> Tensor:
        """``[R, R]`` rows sent from rank ``s`` (row) to rank ``d`` (column)."""
        return (self.pair_ptr[1:] - self.pair_ptr[:-1]).view(self.num_parts, self.num_parts)

    def send_index(self, src: int, dst: int) -> Tensor:
        """Sorted gids rank ``src`` sends to rank ``dst``."""
        R = self.num_parts
        p = src * R + dst
        return self.gid[int(self.pair_ptr[p]):int(self.pair_ptr[p + 1])]

    def send_list(self, rank: int) -> tuple[Tensor, list[int]]:
        """Rank ``rank``'s send buffer rows (ordered by destination, then gid)
        and the ``output_split_sizes``-style split per destination."""
        R = self.num_parts
        lo, hi = int(self.pair_ptr[rank * R]), int(self.pair_ptr[(rank + 1) * R])
        return self.gid[lo:hi], self.counts()[rank].tolist()

    def recv_list(self, rank: int) -> tuple[Tensor, list[int]]:
        """The gids arriving at ``rank``, in ``all_to_all_single`` order
        (by source rank, then gid), and the split per source."""
        parts = [self.send_index(s, rank) for s in range(self.num_parts)]
        return torch.cat(parts) if parts else self.gid[:0], [p.numel() for p in parts]

    def to_dict(self) -> dict:
        return {"block": self.block, "phase": self.phase, "kind": self.kind, "width": self.width,
                "rows": self.num_rows, "static": self.static, "forward_bytes": self.forward_bytes,
                "backward_bytes": self.backward_bytes, "load_bytes": self.load_bytes,
                "counts": self.counts().tolist()}


def _attention_rows(seq_order: Tensor, seq_ptr: Tensor, towner: Tensor, R: int) -> tuple[Tensor, Tensor]:
    """(dst rank, gid) for temporal attention: gid goes to every rank other
    than its own that owns a later appearance of the same vertex."""
    N = seq_order.numel()
    dev = seq_order.device
    if N == 0:
        e = torch.zeros(0, dtype=torch.long, device=dev)
        return e, e
    S = seq_ptr.numel() - 1
    seq_id = torch.repeat_interleave(torch.arange(S, device=dev), seq_ptr[1:] - seq_ptr[:-1], output_size=N)
    pos = torch.arange(N, device=dev)  # position in sequence_order: time-ordered inside a sequence
    o = towner[seq_order]
    # last position of each (sequence, rank) pair
    last = torch.full((S * R,), -1, dtype=torch.long, device=dev)
    last.scatter_reduce_(0, seq_id * R + o, pos, reduce="amax")
    last = last.view(S, R)
    dsts, gids = [], []
    for r in range(R):  # loop over ranks only
        need = (last[seq_id, r] > pos) & (o != r)
        g = seq_order[need]
        gids.append(g)
        dsts.append(torch.full_like(g, r))
    return torch.cat(dsts), torch.cat(gids)


def _window_rows(seq_order: Tensor, seq_ptr: Tensor, time: Tensor, towner: Tensor,
                 band: int) -> tuple[Tensor, Tensor]:
    """(dst rank, gid) for a banded temporal window: gid :math:`(i,t')` goes
    to the owner of every later appearance :math:`(i,t)` with
    :math:`t - t' < b` owned by another rank (duplicates are removed by
    :meth:`Exchange.from_rows`). Appearance times strictly increase along a
    sequence, so only the next ``band - 1`` positions can qualify."""
    N = seq_order.numel()
    dev = seq_order.device
    S = seq_ptr.numel() - 1
    seq_id = torch.repeat_interleave(torch.arange(S, device=dev), seq_ptr[1:] - seq_ptr[:-1], output_size=N)
    t = time[seq_order]
    o = towner[seq_order]
    dsts, gids = [], []
    for j in range(1, min(band, N)):  # loop over the band only
        ok = (seq_id[j:] == seq_id[:-j]) & (t[j:] - t[:-j] < band) & (o[j:] != o[:-j])
        gids.append(seq_order[:-j][ok])
        dsts.append(o[j:][ok])
    if not gids:
        e = torch.zeros(0, dtype=torch.long, device=dev)
        return e, e
    return torch.cat(dsts), torch.cat(gids)


def segment_depth(seq_order: Tensor, seq_ptr: Tensor, towner: Tensor) -> Tensor:
    r"""``[N]`` (gid order) the recurrent round of every vertex-time node.

    A temporal sequence whose appearances have different time owners splits
    into *pieces*: maximal runs of consecutive appearances with one owner.
    A node's depth is the number of pieces before its own in its sequence;
    a recurrent time encoder across ranks scans all depth-:math:`k` pieces in
    round :math:`k`, after receiving the states the depth-:math:`k-1` pieces
    ended with (PTS and PSS-TS: depth 0 everywhere; PSS: up to ``R-1``).
    """
    N = seq_order.numel()
    dev = seq_order.device
    depth = torch.zeros(N, dtype=torch.long, device=dev)
    if N == 0:
        return depth
    o = towner[seq_order]
    first = torch.zeros(N, dtype=torch.bool, device=dev)
    first[seq_ptr[:-1]] = True
    new_piece = first.clone()
    new_piece[1:] |= o[1:] != o[:-1]
    piece = torch.cumsum(new_piece.long(), 0)
    S = seq_ptr.numel() - 1
    seq_first_piece = piece[seq_ptr[:-1]]
    seq_of = torch.repeat_interleave(torch.arange(S, device=dev), seq_ptr[1:] - seq_ptr[:-1], output_size=N)
    depth[seq_order] = piece - seq_first_piece[seq_of]
    return depth


def check_plan_inputs(supergraph: Union["Supergraph", "DynamicGraphSignal"], partition: Partition,
                      pattern: DependencyPattern, input_halo: str) -> "Supergraph":
    """Validate a plan's inputs (as :meth:`CommunicationPlan.build` does);
    returns the supergraph (a signal's cached one)."""
    if input_halo not in ("load", "exchange"):
        raise PartitionError("input_halo", f"is {input_halo!r}.", "use 'load' or 'exchange'.")
    partition.check_signal(supergraph)  # node count and fingerprint, for a signal or its supergraph
    if not hasattr(supergraph, "spatial_edge_index"):
        supergraph = supergraph.supergraph()
    if not isinstance(pattern, DependencyPattern):
        raise PartitionError("pattern", f"expected a DependencyPattern, got {type(pattern).__name__}.",
                             "Use DependencyPattern.preset(model, in_channels, hidden).")
    partition.validate(supergraph.num_nodes)
    return supergraph


def check_link_pairs(link_pairs: tuple, readout_width: int, num_nodes: int,
                     device: torch.device) -> tuple[Tensor, Tensor]:
    """``(src_gid, dst_gid)`` as long tensors on ``device``, checked."""
    N = num_nodes
    ls, ld = (torch.as_tensor(t, dtype=torch.long, device=device) for t in link_pairs)
    if ls.shape != ld.shape or ls.dim() != 1 or (ls.numel() and (int(torch.minimum(ls, ld).min()) < 0 or int(torch.maximum(ls, ld).max()) >= N)):
        raise PartitionError("link_pairs", f"must be two [L] gid tensors in [0, {N}).", "pass (src_gid, dst_gid) of the labelled pairs.")
    if int(readout_width) <= 0:
        raise PartitionError("readout_width", f"must be > 0 with link_pairs, got {readout_width!r}.", "pass the head's output width.")
    return ls, ld


def temporal_tag(block: "BlockPattern") -> str:
    """The row set a block's temporal phase moves: ``"recurrent"``,
    ``"attention"`` or ``"window:<band>"`` (blocks with one tag share rows)."""
    return f"window:{block.time_band}" if block.time_kind == "window" else block.time_kind


def phase_specs(pattern: DependencyPattern, redistribution: bool,
                input_halo: str) -> list[tuple[int, str, str, int, str, bool]]:
    r"""Every exchange of the blocks, in execution order, as
    ``(block, phase, kind, width, row set tag, static)``; the tag names the
    rows (``"spatial"``, ``"redis"``, ``"back"``, or :func:`temporal_tag`),
    which every exchange with that tag shares. The ``"readout"`` phase (link
    pairs) comes after these. :meth:`CommunicationPlan.build` and the
    per-rank builder both walk this list, so their exchanges come in one order."""
    out = []
    for b, blk in enumerate(pattern.blocks):
        if redistribution and b > 0:
            out.append((b, "redistribution_back", "redistribution", blk.input_width, "back", False))
        for l, w in enumerate(blk.spatial_widths):
            out.append((b, f"spatial:{l}", "spatial", w, "spatial", b == 0 and l == 0 and input_halo == "load"))
        if redistribution:
            out.append((b, "redistribution", "redistribution", blk.redistribution_width, "redis", False))
        if blk.time_kind != "none":
            out.append((b, "temporal", "temporal", blk.time_width, temporal_tag(blk), False))
    return out


@dataclass(eq=False)
class CommunicationPlan:
    r"""All exchanges of one epoch for a partition and a dependency pattern.

    Build with :meth:`build`; iterate to get the :class:`Exchange` s in
    execution order.
    """

    num_parts: int
    num_nodes: int
    scheme: str
    pattern: DependencyPattern
    exchanges: list[Exchange]
    depth: Optional[Tensor] = None
    #: ``[N]`` the partition's time owner :math:`\tau` (a reference, not a copy; set by :meth:`build`):
    #: :meth:`RankPlan.from_plan <pyg_dynscale.partition.rank_plan.RankPlan.from_plan>` reads a rank's
    #: :math:`Q_r` from it
    temporal_owner: Optional[Tensor] = None

    @classmethod
    def build(
        cls,
        supergraph: Union["Supergraph", "DynamicGraphSignal"],
        partition: Partition,
        pattern: DependencyPattern,
        *,
        input_halo: str = "load",
        link_pairs: Optional[tuple[Tensor, Tensor]] = None,
        readout_width: int = 0,
    ) -> "CommunicationPlan":
        """Compute every exchange.

        Args:
            supergraph: a :class:`~pyg_dynscale.data.Supergraph` or a signal
                (its cached supergraph is used).
            partition: owner arrays over the supergraph's nodes.
            pattern: the model's dependency pattern.
            input_halo: ``"load"`` -- block 0's first spatial exchange moves
                raw features once (static); ``"exchange"`` -- every epoch.
            link_pairs: ``(src_gid [L], dst_gid [L])`` labelled pairs of a link
                loss; adds the ``"readout"`` phase.
            readout_width: width of the readout row (the head's output).
        """
        supergraph = check_plan_inputs(supergraph, partition, pattern, input_halo)
        N = supergraph.num_nodes
        R = partition.num_parts
        dev = supergraph.vertex.device
        own = partition.owner.to(dev)
        town = partition.temporal_owner.to(dev)
        bpe = pattern.bytes_per_element

        # spatial rows: unique (dst rank, src gid) over cut spatial edges
        s, d = supergraph.spatial_edge_index
        cut = own[s] != own[d]
        sp = (own[s[cut]], own[d[cut]], s[cut])
        # temporal rows
        kinds = {b.time_kind for b in pattern.blocks}
        tmp: dict = {}
        if "recurrent" in kinds:
            u, v = supergraph.temporal_edge_index
            c = town[u] != town[v]
            tmp["recurrent"] = (town[u[c]], town[v[c]], u[c])
        if "attention" in kinds:
            dst, g = _attention_rows(supergraph.sequence_order, supergraph.sequence_ptr, town, R)
            tmp["attention"] = (town[g], dst, g)
        for band in sorted({b.time_band for b in pattern.blocks if b.time_kind == "window"}):
            dst, g = _window_rows(supergraph.sequence_order, supergraph.sequence_ptr, supergraph.time, town, band)
            tmp[f"window:{band}"] = (town[g], dst, g)
        # redistribution rows (PSS-TS)
        moved = (own != town).nonzero().flatten()
        has_redis = partition.time_owner is not None

        cache: dict = {}

        def make(block: int, phase: str, kind: str, width: int, rows: tuple, tag: str, static: bool = False) -> Exchange:
            # layers of all blocks share their row sets: sort once, reuse the tensors
            if tag not in cache:
                cache[tag] = Exchange.from_rows(0, "", kind, 1, bpe, R, *rows, N)
            e = cache[tag]
            return Exchange(block, phase, kind, width, bpe, R, e.src, e.dst, e.gid, e.pair_ptr, static)

        rows_of = {"back": lambda: (town[moved], own[moved], moved), "spatial": lambda: sp,
                   "redis": lambda: (own[moved], town[moved], moved)}
        exchanges = [make(b, phase, kind, width, rows_of[tag]() if tag in rows_of else tmp[tag], tag, static)
                     for b, phase, kind, width, tag, static in phase_specs(pattern, has_redis, input_halo)]
        if link_pairs is not None:
            ls, ld = check_link_pairs(link_pairs, readout_width, N, dev)
            c = town[ls] != town[ld]
            exchanges.append(Exchange.from_rows(len(pattern.blocks) - 1, "readout", "readout", readout_width, bpe, R,
                                                town[ld[c]], town[ls[c]], ld[c], N))
        depth = segment_depth(supergraph.sequence_order, supergraph.sequence_ptr, town) if "recurrent" in kinds else None
        return cls(R, N, partition.scheme, pattern, exchanges, depth, town)

    # ------------------------------------------------------------------ access
    def __iter__(self) -> Iterator[Exchange]:
        return iter(self.exchanges)

    def __len__(self) -> int:
        return len(self.exchanges)

    def exchange(self, block: int, phase: str) -> Exchange:
        for e in self.exchanges:
            if e.block == block and e.phase == phase:
                return e
        phases = sorted({e.phase for e in self.exchanges if e.block == block})
        raise PartitionError("phase", f"no exchange ({block}, {phase!r}) in this plan.", f"Block {block} has phases {phases}.")

    def send_index(self, block: int, phase: str, src: int, dst: int) -> Tensor:
        """Sorted gids rank ``src`` sends to rank ``dst`` in ``(block, phase)``."""
        return self.exchange(block, phase).send_index(src, dst)

    def has(self, block: int, phase: str) -> bool:
        return any(e.block == block and e.phase == phase for e in self.exchanges)

    def rounds(self, block: int) -> list[Exchange]:
        """The recurrent ``"temporal"`` exchange of ``block`` split by round:
        entry :math:`k` holds the states the depth-:math:`k` pieces end with
        (:func:`segment_depth`); their rows together are the exchange's rows.
        The list has one entry per round that sends anything (it is empty
        when no sequence is cut)."""
        e = self.exchange(block, "temporal")
        if self.pattern.blocks[block].time_kind != "recurrent":
            raise PartitionError("block", f"block {block} is not recurrent.", "rounds exist for recurrent time encoders only.")
        d = self.depth.to(e.gid.device)[e.gid]
        n = int(d.max()) + 1 if d.numel() else 0
        return [e.subset(d == k, f"temporal:{k}") for k in range(n)]

    def temporal_rounds(self) -> int:
        """Scan rounds of the recurrent time encoder (``1`` when no sequence
        is cut; ``0`` without a recurrent block)."""
        if self.depth is None:
            return 0
        return int(self.depth.max()) + 1 if self.depth.numel() else 1

    def depth_of(self, gids: Tensor) -> Tensor:
        """``[K]`` the recurrent round (:func:`segment_depth`) of the given
        gids (``[K]`` long). :class:`~pyg_dynscale.partition.rank_plan.RankPlan`
        has the same method for its rank's :math:`Q_r`, so a rank's layout can
        take either."""
        if self.depth is None:
            raise PartitionError("depth", "this plan has no recurrent block, so no rounds.",
                                 "ask for depths only when pattern has a time_kind='recurrent' block.")
        return self.depth.index_select(0, gids.to(self.depth.device, torch.long))

    # ------------------------------------------------------------------ totals
    def bytes_by_kind(self, forward_only: bool = False) -> dict[str, int]:
        """Bytes per epoch by kind (forward + backward, or forward only) and
        ``"total"``."""
        return bytes_by_kind(self.exchanges, forward_only)

    def rows_by_kind(self) -> dict[str, int]:
        """Forward rows per epoch by kind (static rows excluded)."""
        return rows_by_kind(self.exchanges)

    def load_bytes(self) -> int:
        """Bytes moved once before training (the static input-feature halo)."""
        return sum(e.load_bytes for e in self.exchanges)

    def traffic_matrix(self, forward_only: bool = False) -> Tensor:
        """``[R, R]`` bytes per epoch sent from rank ``s`` to rank ``d``."""
        m = torch.zeros(self.num_parts, self.num_parts, dtype=torch.long)
        for e in self.exchanges:
            if not e.static:
                m += e.counts().cpu() * e.width * e.bytes_per_element * (1 if forward_only else 2)
        return m

    def to_dict(self) -> dict:
        """A JSON-serializable summary (no index tensors)."""
        fwd = self.bytes_by_kind(forward_only=True)
        return {
            "scheme": self.scheme, "num_parts": self.num_parts, "num_nodes": self.num_nodes,
            "pattern": self.pattern.to_dict(),
            "bytes": self.bytes_by_kind(), "bytes_forward": fwd, "load_bytes": self.load_bytes(),
            "temporal_rounds": self.temporal_rounds(),
            "exchanges": [{k: v for k, v in e.to_dict().items() if k != "counts"} for e in self.exchanges],
        }

    def __repr__(self) -> str:
        b = self.bytes_by_kind()
        return (f"CommunicationPlan(scheme={self.scheme!r}, parts={self.num_parts}, exchanges={len(self)}, "
                f"bytes/epoch={b['total']} (spatial={b['spatial']}, temporal={b['temporal']}, "
                f"redistribution={b['redistribution']}, readout={b['readout']}), load={self.load_bytes()})")
