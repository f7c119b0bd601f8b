r"""A rank's slice of the communication plan: its own send and receive lists.

A :class:`~pyg_dynscale.partition.plan.CommunicationPlan` holds every row of
every exchange for all :math:`R` ranks (:math:`O(\text{cut})` memory on every
rank). Rank :math:`r` executes only its part of it: for each exchange, the
gids it sends (grouped by destination, gid-sorted inside a group: the plan's
:meth:`~pyg_dynscale.partition.plan.Exchange.send_list`) and the gids it
receives (by source, then gid: :meth:`~pyg_dynscale.partition.plan.Exchange.recv_list`).
A :class:`RankPlan` is exactly that, plus the few global numbers a rank
reports next to its measured traffic: each exchange's ``[R, R]`` row counts
(hence the whole plan's bytes, :meth:`RankPlan.bytes_by_kind`,
:meth:`RankPlan.load_bytes`, :meth:`RankPlan.traffic_matrix`) and the number
of recurrent rounds :math:`D` (:meth:`RankPlan.temporal_rounds`).

For a recurrent block, :meth:`RankPlan.rounds` splits the temporal exchange
by round as :meth:`CommunicationPlan.rounds` does (round :math:`k` moves the
states the depth-:math:`k` pieces end with; always :math:`D - 1` rounds), and
:meth:`RankPlan.depth_of` gives the round of any node of the rank's time set
:math:`Q_r = \{v : \tau(v) = r\}`.

Get one by slicing a central plan (:meth:`RankPlan.from_plan`), or without
any central plan from the ranks themselves
(:func:`pyg_dynscale.distributed.rank_plan_exchange.build_rank_plan`: one
exchange of request lists). :meth:`RankPlan.to_state` / :meth:`RankPlan.from_state`
turn it into plain types and tensors (``torch.load(..., weights_only=True)``
reads them back), e.g. for a rank's shard.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch
from torch import Tensor

from ..errors import PartitionError, PartitionFormatError
from .pattern import DependencyPattern
from .plan import CommunicationPlan, Exchange, bytes_by_kind, rows_by_kind

__all__ = ["RankExchange", "RankPlan", "STATE_FORMAT", "STATE_VERSION"]

#: tag and version of :meth:`RankPlan.to_state`
STATE_FORMAT = "pyg_dynscale.rank_plan"
STATE_VERSION = 1

_FIELDS = ("block", "phase", "kind", "width", "static", "bpe", "rank", "send_splits", "recv_splits")
_TENSORS = ("send_gid", "recv_gid", "counts_total")


@dataclass(frozen=True, eq=False)
class RankExchange:
    r"""One :class:`~pyg_dynscale.partition.plan.Exchange` as rank ``rank``
    executes it.

    Attributes:
        block (int), phase (str), kind (str), width (int), static (bool): as
            the plan's exchange.
        bpe (int): bytes per element.
        send_gid (Tensor): ``[K_s]`` the gids this rank sends, by destination
            rank, gid-sorted inside each destination.
        send_splits (list[int]): ``[R]`` rows per destination.
        recv_gid (Tensor): ``[K_r]`` the gids this rank receives, by source
            rank, gid-sorted inside each source (``all_to_all_single`` order).
        recv_splits (list[int]): ``[R]`` rows per source.
        rank (int): the rank these lists belong to.
        counts_total (Tensor): ``[R, R]`` the **whole plan's** rows from rank
            ``s`` (row) to rank ``d`` (column): the global totals below.

    ``num_rows``, ``row_bytes``, ``forward_bytes``, ``backward_bytes`` and
    ``load_bytes`` are the whole exchange's (all ranks), as on
    :class:`~pyg_dynscale.partition.plan.Exchange`, so code that predicts
    traffic reads either.
    """

    block: int
    phase: str
    kind: str
    width: int
    static: bool
    bpe: int
    send_gid: Tensor
    send_splits: list[int]
    recv_gid: Tensor
    recv_splits: list[int]
    rank: int
    counts_total: Tensor

    @classmethod
    def from_exchange(cls, ex: Exchange, rank: int, lists: Optional[tuple] = None) -> "RankExchange":
        """Rank ``rank``'s slice of ``ex`` (``lists``: its ``(send_list, recv_list)``
        when already computed, e.g. shared by the blocks of one row set)."""
        (sg, ss), (rg, rs) = lists if lists is not None else (ex.send_list(rank), ex.recv_list(rank))
        return cls(ex.block, ex.phase, ex.kind, ex.width, ex.static, ex.bytes_per_element, sg, ss, rg, rs,
                   int(rank), ex.counts().cpu().clone())

    # ------------------------------------------------------------ own lists
    def _own(self, rank: int) -> None:
        if int(rank) != self.rank:
            raise PartitionError("rank", f"this exchange holds rank {self.rank}'s lists, not rank {rank}'s.",
                                 f"use RankPlan.from_plan(plan, {rank}) (or build_rank_plan on rank {rank}).")

    def send_list(self, rank: int) -> tuple[Tensor, list[int]]:
        """``(send_gid, send_splits)`` -- ``rank`` must be this exchange's rank
        (``== Exchange.send_list(rank)``)."""
        self._own(rank)
        return self.send_gid, list(self.send_splits)

    def recv_list(self, rank: int) -> tuple[Tensor, list[int]]:
        """``(recv_gid, recv_splits)`` -- ``rank`` must be this exchange's rank
        (``== Exchange.recv_list(rank)``)."""
        self._own(rank)
        return self.recv_gid, list(self.recv_splits)

    def send_index(self, src: int, dst: int) -> Tensor:
        """Sorted gids ``src`` sends to ``dst``; one of them must be this rank."""
        if int(src) == self.rank:
            lo = sum(self.send_splits[:dst])
            return self.send_gid[lo:lo + self.send_splits[dst]]
        self._own(dst)
        lo = sum(self.recv_splits[:src])
        return self.recv_gid[lo:lo + self.recv_splits[src]]

    # ------------------------------------------------------------ global totals
    @property
    def num_parts(self) -> int:
        return len(self.send_splits)

    @property
    def bytes_per_element(self) -> int:
        return self.bpe

    def counts(self) -> Tensor:
        """``[R, R]`` the whole exchange's rows per ``(src, dst)``."""
        return self.counts_total

    @property
    def num_rows(self) -> int:
        """Rows of the whole exchange (all ranks)."""
        return int(self.counts_total.sum())

    @property
    def row_bytes(self) -> int:
        return self.num_rows * self.width * self.bpe

    @property
    def forward_bytes_total(self) -> int:
        """The whole exchange's forward bytes per epoch (``0`` when static)."""
        return 0 if self.static else self.row_bytes

    @property
    def forward_bytes(self) -> int:
        return self.forward_bytes_total

    @property
    def backward_bytes(self) -> int:
        return self.forward_bytes_total

    @property
    def load_bytes(self) -> int:
        return self.row_bytes if self.static else 0

    def to_dict(self) -> dict:
        return {"block": self.block, "phase": self.phase, "kind": self.kind, "width": self.width,
                "rows": self.num_rows, "static": self.static, "forward_bytes": self.forward_bytes,
                "backward_bytes": self.backward_bytes, "load_bytes": self.load_bytes,
                "counts": self.counts_total.tolist()}

    # ------------------------------------------------------------ state
    def to_state(self) -> dict:
        return {**{k: getattr(self, k) for k in _FIELDS}, **{k: getattr(self, k) for k in _TENSORS}}

    @classmethod
    def from_state(cls, state: dict) -> "RankExchange":
        try:
            kw = {k: state[k] for k in _FIELDS + _TENSORS}
        except KeyError as exc:
            raise PartitionFormatError(f"a rank plan's exchange lacks the field {exc.args[0]!r}.") from None
        for k in _TENSORS:
            if not isinstance(kw[k], Tensor) or kw[k].dtype != torch.long:
                raise PartitionFormatError(f"a rank plan's exchange field {k!r} is not a long tensor.")
        kw["send_splits"], kw["recv_splits"] = [int(x) for x in kw["send_splits"]], [int(x) for x in kw["recv_splits"]]
        ex = cls(**kw)
        R = len(ex.send_splits)
        if (len(ex.recv_splits) != R or tuple(ex.counts_total.shape) != (R, R)
                or sum(ex.send_splits) != ex.send_gid.numel() or sum(ex.recv_splits) != ex.recv_gid.numel()
                or ex.counts_total[ex.rank].tolist() != ex.send_splits
                or ex.counts_total[:, ex.rank].tolist() != ex.recv_splits):
            raise PartitionFormatError(f"rank plan exchange ({ex.block}, {ex.phase!r}): its lists, splits and "
                                       "counts disagree (a corrupt or edited state).")
        return ex


class RankPlan:
    r"""Rank ``rank``'s share of one epoch's exchanges, in execution order.

    The lists equal the central plan's for this rank; totals (bytes, rows,
    rounds) are the whole plan's.

    Args:
        rank (int): this rank.
        world (int): :math:`R`.
        num_nodes (int): :math:`N`, vertex-time nodes of the signal.
        scheme (str): the partition's scheme.
        pattern (DependencyPattern): the model's dependency pattern.
        exchanges (list[RankExchange]): in the plan's order.
        rounds (dict[int, list[RankExchange]]): per recurrent block, its
            :math:`D - 1` rounds (phase ``"temporal:<k>"``).
        q_gid (Tensor, optional): ``[|Q_r|]`` sorted gids of
            :math:`Q_r` (recurrent patterns only).
        q_depth (Tensor, optional): ``[|Q_r|]`` their rounds (:meth:`depth_of`).
        num_rounds (int): :math:`D` (``0`` without a recurrent block).
    """

    def __init__(self, rank: int, world: int, num_nodes: int, scheme: str, pattern: DependencyPattern,
                 exchanges: list[RankExchange], rounds: dict[int, list[RankExchange]],
                 q_gid: Optional[Tensor], q_depth: Optional[Tensor], num_rounds: int) -> None:
        self.rank, self.world, self.num_nodes, self.scheme = int(rank), int(world), int(num_nodes), scheme
        self.pattern = pattern
        self.exchanges = list(exchanges)
        self._rounds = {int(b): list(v) for b, v in rounds.items()}
        self.q_gid, self.q_depth = q_gid, q_depth
        self._num_rounds = int(num_rounds)

    @property
    def num_parts(self) -> int:
        return self.world

    # ------------------------------------------------------------------ slice
    @classmethod
    def from_plan(cls, plan: CommunicationPlan, rank: int) -> "RankPlan":
        """Rank ``rank``'s slice of the central ``plan`` (built by
        :meth:`CommunicationPlan.build`, which records the time owner)."""
        R = plan.num_parts
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < R:
            raise PartitionError("rank", f"must be an int in [0, {R}), got {rank!r}.", "pass this process's rank.")
        lists: dict = {}  # exchanges sharing a row set (blocks, layers) share their lists

        def cut(ex: Exchange) -> RankExchange:
            key = id(ex.gid)
            if key not in lists:
                lists[key] = (ex.send_list(rank), ex.recv_list(rank))
            return RankExchange.from_exchange(ex, rank, lists[key])

        exchanges = [cut(e) for e in plan]
        rounds: dict = {}
        q_gid = depth = None
        if plan.depth is not None:
            if plan.temporal_owner is None:
                raise PartitionError("plan", "was not made by CommunicationPlan.build (no time owner recorded).",
                                     "build the plan with CommunicationPlan.build(signal, partition, pattern).")
            q_gid = (plan.temporal_owner.to(plan.depth.device) == rank).nonzero().flatten()
            depth = plan.depth.index_select(0, q_gid)
            shared: dict = {}  # every recurrent block has the same rounds (rows), its own width
            for b, blk in enumerate(plan.pattern.blocks):
                if blk.time_kind == "recurrent":
                    key = id(plan.exchange(b, "temporal").gid)
                    if key not in shared:
                        shared[key] = [(x, (x.send_list(rank), x.recv_list(rank))) for x in plan.rounds(b)]
                    w = plan.exchange(b, "temporal").width
                    rounds[b] = [RankExchange.from_exchange(x, rank, ls) for x, ls in shared[key]]
                    rounds[b] = [_with(x, block=b, width=w) for x in rounds[b]]
        return cls(rank, R, plan.num_nodes, plan.scheme, plan.pattern, exchanges, rounds,
                   q_gid, depth, plan.temporal_rounds())

    # ------------------------------------------------------------------ access
    def __iter__(self) -> Iterator[RankExchange]:
        return iter(self.exchanges)

    def __len__(self) -> int:
        return len(self.exchanges)

    def exchange(self, block: int, phase: str) -> RankExchange:
        for e in self.exchanges:
            if e.block == block and e.phase == phase:
                return e
        phases = sorted({e.phase for e in self.exchanges if e.block == block})
        raise PartitionError("phase", f"no exchange ({block}, {phase!r}) in this plan.", f"Block {block} has phases {phases}.")

    def has(self, block: int, phase: str) -> bool:
        return any(e.block == block and e.phase == phase for e in self.exchanges)

    def rounds(self, block: int) -> list[RankExchange]:
        """The recurrent ``"temporal"`` exchange of ``block`` split by round,
        as :meth:`CommunicationPlan.rounds` (:math:`D - 1` entries; this rank's
        lists in one may be empty)."""
        self.exchange(block, "temporal")
        if self.pattern.blocks[block].time_kind != "recurrent":
            raise PartitionError("block", f"block {block} is not recurrent.", "rounds exist for recurrent time encoders only.")
        return list(self._rounds[block])

    def temporal_rounds(self) -> int:
        """Scan rounds :math:`D` of the recurrent time encoder, over all ranks
        (``1`` when no sequence is cut; ``0`` without a recurrent block)."""
        return self._num_rounds

    def depth_of(self, gids: Tensor) -> Tensor:
        """``[K]`` the recurrent round of the given gids, all in :math:`Q_r`."""
        if self.q_depth is None:
            raise PartitionError("depth", "this plan has no recurrent block, so no rounds.",
                                 "ask for depths only when pattern has a time_kind='recurrent' block.")
        gids = gids.to(self.q_gid.device, torch.long)
        pos = torch.searchsorted(self.q_gid, gids)
        ok = pos < self.q_gid.numel()
        ok[ok.clone()] = self.q_gid[pos[ok]] == gids[ok]
        if not bool(ok.all()):
            bad = gids[~ok][:3].tolist()
            raise PartitionError("gids", f"{bad} are not time-owned by rank {self.rank}.",
                                 "ask a rank only for depths of its own time set Q_r.")
        return self.q_depth.index_select(0, pos)

    # ------------------------------------------------------------------ totals
    def bytes_by_kind(self, forward_only: bool = False) -> dict[str, int]:
        """The whole plan's bytes per epoch by kind and ``"total"`` (as
        :meth:`CommunicationPlan.bytes_by_kind`)."""
        return bytes_by_kind(self.exchanges, forward_only)

    def rows_by_kind(self) -> dict[str, int]:
        """The whole plan's forward rows per epoch by kind (static rows excluded)."""
        return rows_by_kind(self.exchanges)

    def load_bytes(self) -> int:
        """The whole plan's bytes moved once before training."""
        return sum(e.load_bytes for e in self.exchanges)

    def traffic_matrix(self, forward_only: bool = False) -> Tensor:
        """``[R, R]`` the whole plan's bytes per epoch from ``s`` to ``d``."""
        m = torch.zeros(self.world, self.world, dtype=torch.long)
        for e in self.exchanges:
            if not e.static:
                m += e.counts_total * e.width * e.bpe * (1 if forward_only else 2)
        return m

    def to_dict(self) -> dict:
        """A JSON-serializable summary (no index tensors), as :meth:`CommunicationPlan.to_dict`."""
        return {
            "scheme": self.scheme, "num_parts": self.world, "num_nodes": self.num_nodes, "rank": self.rank,
            "pattern": self.pattern.to_dict(), "bytes": self.bytes_by_kind(),
            "bytes_forward": self.bytes_by_kind(forward_only=True), "load_bytes": self.load_bytes(),
            "temporal_rounds": self.temporal_rounds(),
            "exchanges": [{k: v for k, v in e.to_dict().items() if k != "counts"} for e in self.exchanges],
        }

    def __repr__(self) -> str:
        b = self.bytes_by_kind()
        return (f"RankPlan(rank={self.rank}/{self.world}, scheme={self.scheme!r}, exchanges={len(self)}, "
                f"plan bytes/epoch={b['total']}, rounds={self.temporal_rounds()})")

    # ------------------------------------------------------------------ state
    def to_state(self) -> dict[str, Any]:
        """Plain types and tensors only (``torch.save`` it; ``torch.load(...,
        weights_only=True)`` reads it back); tensors shared between exchanges
        stay shared, so ``torch.save`` writes them once."""
        return {
            "format": STATE_FORMAT, "version": STATE_VERSION, "rank": self.rank, "world": self.world,
            "num_nodes": self.num_nodes, "scheme": self.scheme, "pattern": self.pattern.to_dict(),
            "exchanges": [e.to_state() for e in self.exchanges],
            "rounds": [[b, [x.to_state() for x in v]] for b, v in sorted(self._rounds.items())],
            "q_gid": self.q_gid, "q_depth": self.q_depth, "temporal_rounds": self._num_rounds,
        }

    @classmethod
    def from_state(cls, state: dict) -> "RankPlan":
        """The inverse of :meth:`to_state`; a state of another format or
        version, or one whose lists disagree, raises
        :class:`~pyg_dynscale.errors.PartitionFormatError`."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise PartitionFormatError(f"not a rank plan state (format tag {state.get('format') if isinstance(state, dict) else type(state).__name__!r}, "
                                       f"expected {STATE_FORMAT!r}).")
        if state.get("version") != STATE_VERSION:
            raise PartitionFormatError(f"rank plan state version {state.get('version')!r}; this pyg_dynscale "
                                       f"reads version {STATE_VERSION}.")
        try:
            pattern = DependencyPattern.from_dict(state["pattern"])
            exchanges = [RankExchange.from_state(e) for e in state["exchanges"]]
            rounds = {int(b): [RankExchange.from_state(x) for x in v] for b, v in state["rounds"]}
            out = cls(state["rank"], state["world"], state["num_nodes"], str(state["scheme"]), pattern,
                      exchanges, rounds, state["q_gid"], state["q_depth"], state["temporal_rounds"])
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, PartitionFormatError):
                raise
            raise PartitionFormatError(f"a rank plan state is malformed ({type(exc).__name__}: {exc}).") from None
        if any(e.rank != out.rank or e.num_parts != out.world for e in exchanges):
            raise PartitionFormatError("a rank plan state mixes exchanges of other ranks or world sizes.")
        q, d = out.q_gid, out.q_depth
        if (q is None) != (d is None) or (q is not None and not (
                isinstance(q, Tensor) and isinstance(d, Tensor) and q.shape == d.shape and q.dim() == 1)):
            raise PartitionFormatError("a rank plan state's time set and its rounds (q_gid, q_depth) disagree.")
        if any(len(v) != max(out.temporal_rounds() - 1, 0) for v in rounds.values()):
            raise PartitionFormatError(f"a rank plan state has rounds other than temporal_rounds - 1 = "
                                       f"{out.temporal_rounds() - 1}.")
        return out


def _with(ex: RankExchange, **kw: Any) -> RankExchange:
    """A copy with fields replaced (tensors shared)."""
    from dataclasses import replace

    return replace(ex, **kw)
