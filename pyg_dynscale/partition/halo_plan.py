r"""The black-box path's plan: per snapshot, each rank's local subgraph and the
state rows it must receive (docs/design.md, "Two runtime paths").

On the black-box path a rank calls the user's module once per snapshot
:math:`t` on a *local subgraph* of :math:`G_t`, and keeps the outputs of the
vertex-time nodes it owns (``owner[gid] == rank``). With a
:class:`HaloDepth` of :math:`h` hops (the largest distance, in undirected
hops of :math:`G_t`, from which an input row can reach an owned output):

* the local node set is every node within :math:`h + 1` hops of an owned
  node, and its edges are all edges of :math:`G_t` between them (local ids
  keep the snapshot's order). Every node within :math:`h` hops then has all
  its incident edges, so any degree a cell computes (GCN's in-degree,
  Chebyshev's Laplacian, DCRNN's in- and out-degrees) is the global one
  wherever it can reach an owned output;
* state component :math:`c` (``H``, or ``H`` and ``C``) is needed for the
  nodes within ``state[c]`` hops: vertex :math:`v`'s state at :math:`t` is
  its state at its previous appearance :math:`p = \mathrm{prev}(v, t)`, kept
  by ``owner[p]``; zeros beyond the halo or without a previous appearance.

Rows whose keeper is another rank move in two exchanges per snapshot and
component: ``"temporal"`` -- the receiver owns :math:`v` at :math:`t` (the
sequence changed owner, as under PSS) -- and ``"spatial"`` -- :math:`v` is in
the receiver's halo. Each is an :class:`~pyg_dynscale.partition.plan.Exchange`
(rows sorted by ``(src, dst, gid)`` of :math:`p`), so the bytes the runtime
measures are the bytes :meth:`StatePlan.bytes_by_kind` predicts; backward
sends one gradient row per forward row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import torch
from torch import Tensor

from ..errors import PartitionError
from .plan import KINDS, Exchange

if TYPE_CHECKING:  # pragma: no cover
    from ..data.signal import DynamicGraphSignal

__all__ = ["HaloDepth", "hop_distance", "local_subgraph", "Gather", "LocalStep", "StatePlan", "state_phase"]

#: exchanges of one snapshot and state component, in execution order
STATE_KINDS = ("temporal", "spatial")


@dataclass(frozen=True)
class HaloDepth:
    r"""How far inputs reach an output of a per-snapshot module, in undirected hops.

    Attributes:
        x (int or None): hops of node features (``None``: the whole snapshot).
        state (tuple): hops of each carried state component (``H``, or
            ``(H, C)``); ``None`` entries: the whole snapshot.
        full_nodes (bool): the module reads *every* node's features even
            where edges do not reach (e.g. EvolveGCN-H's top-k pooling); the
            local node set is then the whole snapshot (edges stay local).
    """

    x: Optional[int] = 1
    state: tuple = ()
    full_nodes: bool = False

    def __post_init__(self) -> None:
        for name, v in [("x", self.x)] + [(f"state[{i}]", s) for i, s in enumerate(self.state)]:
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise PartitionError(f"depth.{name}", f"is {v!r}.", "give a number of hops >= 0, or None for the whole snapshot.")

    @classmethod
    def uniform(cls, hops: Optional[int], num_states: int, full_nodes: bool = False) -> "HaloDepth":
        """The same depth for features and every state component."""
        return cls(hops, (hops,) * num_states, full_nodes)

    @property
    def hops(self) -> Optional[int]:
        """The largest depth (``None``: global)."""
        vals = (self.x,) + tuple(self.state)
        return None if any(v is None for v in vals) else max(vals)

    @property
    def is_global(self) -> bool:
        return self.hops is None

    def describe(self) -> str:
        def f(v: Optional[int]) -> str:
            return "all" if v is None else str(v)

        st = ", ".join(f(s) for s in self.state)
        return f"x={f(self.x)}, state=({st})" + (", full_nodes" if self.full_nodes else "")


def local_subgraph(edge_index: Tensor, local: Tensor, full_nodes: bool = False) -> tuple:
    r"""The subgraph induced on the nodes where ``local`` (``[n]`` bool) holds.

    Returns:
        ``(nodes, position, edges, edge_index)``: ``[n_loc]`` kept nodes in
        order (``None``: all, also with ``full_nodes``), ``[n]`` each node's
        local id (``-1``: dropped), ``[e_loc]`` kept edges in order (``None``:
        all) and ``[2, e_loc]`` their local ids.
    """
    n = local.numel()
    everything = bool(local.all())
    if everything or full_nodes:
        nodes, position = None, torch.arange(n)
    else:
        nodes = local.nonzero().flatten()
        position = torch.full((n,), -1, dtype=torch.long)
        position[nodes] = torch.arange(nodes.numel())
    if everything:
        return nodes, position, None, edge_index
    edges = (local[edge_index[0]] & local[edge_index[1]]).nonzero().flatten()
    return nodes, position, edges, position[edge_index[:, edges]]


def hop_distance(edge_index: Tensor, num_nodes: int, seeds: Tensor, max_hops: int) -> Tensor:
    r"""Undirected hop distance of every node from each row's seed set.

    Args:
        edge_index: ``[2, E]`` edges of one graph (direction ignored).
        num_nodes: :math:`n`.
        seeds: ``[R, n]`` bool, the seed nodes of each of :math:`R` sets.
        max_hops: stop after this many hops.

    Returns:
        ``[R, n]`` long: the distance, ``max_hops + 1`` for nodes farther away
        or unreachable.
    """
    R = seeds.shape[0]
    dist = torch.full((R, num_nodes), max_hops + 1, dtype=torch.long)
    dist[seeds] = 0
    if edge_index.numel() == 0 or max_hops <= 0:
        return dist
    src = torch.cat([edge_index[0], edge_index[1]])
    dst = torch.cat([edge_index[1], edge_index[0]])
    reached = seeds.clone()
    for k in range(1, max_hops + 1):
        hits = torch.zeros(R, num_nodes, dtype=torch.int32).index_add_(1, dst, reached[:, src].to(torch.int32)) > 0
        new = hits & ~reached
        if not bool(new.any()):
            break
        dist[new] = k
        reached |= new
    return dist


@dataclass
class Gather:
    """Rows of earlier steps' kept states: ``cat(history(t)[rows] for t, rows,
    whole in groups)[order]`` (``whole``: the rows are all of step ``t``'s, in
    order, taken without a copy; ``order=None``: already in order)."""

    groups: list
    order: Optional[Tensor]
    size: int

    @classmethod
    def build(cls, gids: Tensor, time: Tensor, position: Tensor, kept_per_step: Tensor) -> "Gather":
        if gids.numel() == 0:
            return cls([], None, 0)
        tg = time[gids]
        sort = torch.sort(tg, stable=True)
        ts, idx = sort.values, sort.indices
        uniq, counts = torch.unique_consecutive(ts, return_counts=True)
        pos = position[gids[idx]]
        groups = []
        for t, p in zip(uniq.tolist(), torch.split(pos, counts.tolist())):
            groups.append((t, p, p.numel() == int(kept_per_step[t]) and _is_arange(p)))
        identity = bool((idx == torch.arange(idx.numel())).all())
        order = None if identity else torch.argsort(idx)
        return cls(groups, order, int(gids.numel()))

    def __call__(self, history: Callable[[int], Tensor], like: Tensor) -> Tensor:
        if not self.groups:
            return like.new_zeros((0,) + tuple(like.shape[1:]))
        parts = [history(t) if whole else history(t).index_select(0, rows) for t, rows, whole in self.groups]
        out = parts[0] if len(parts) == 1 else torch.cat(parts, 0)
        return out if self.order is None else out.index_select(0, self.order)


def _is_arange(rows: Tensor) -> bool:
    return rows.numel() == 0 or (int(rows[0]) == 0 and int(rows[-1]) == rows.numel() - 1
                                 and bool((rows[1:] - rows[:-1] == 1).all()))


@dataclass
class StateRoute:
    """How one rank assembles one state component's input rows at one snapshot."""

    gather: Gather                 # self-kept rows, then rows to send (by kind, destination)
    num_self: int
    self_dst: Tensor               # local positions of the self-kept rows
    send_splits: dict = field(default_factory=dict)   # kind -> per-destination counts
    recv_dst: dict = field(default_factory=dict)      # kind -> local positions, arrival order
    recv_splits: dict = field(default_factory=dict)   # kind -> per-source counts
    active: tuple = ()             # kinds with rows on some rank (collectives to issue)
    identity: bool = False         # the input is exactly the gathered self rows (no zeros, no reorder)


@dataclass
class LocalStep:
    """One rank's share of snapshot ``t``.

    Attributes:
        t: snapshot index.
        nodes: ``[n_loc]`` snapshot-local positions of the local node set
            (``None``: all nodes, in order).
        edges: ``[e_loc]`` positions in the snapshot's edge list (``None``: all).
        edge_index: ``[2, e_loc]`` edges in local ids.
        owned: ``[n_own]`` local positions of the owned nodes (``None``: all).
        num_local: :math:`n_{loc}`.
        routes: one :class:`StateRoute` per state component.
    """

    t: int
    nodes: Optional[Tensor]
    edges: Optional[Tensor]
    edge_index: Tensor
    owned: Optional[Tensor]
    num_local: int
    num_owned: int
    routes: list


def state_phase(t: int, component: int, kind: str) -> str:
    """Phase name of a state exchange (``"state:<t>:<c>:<kind>"``)."""
    return f"state:{t}:{component}:{kind}"


class StatePlan:
    r"""Local subgraphs and state exchanges of the black-box path for one
    owner array (every rank builds the same exchanges; :attr:`steps` are
    ``rank``'s).

    Args:
        signal: the :class:`~pyg_dynscale.data.DynamicGraphSignal`.
        owner: ``[N]`` rank of every vertex-time node.
        num_parts: :math:`R`.
        depth: the module's :class:`HaloDepth`.
        widths: width of each state component (``len(widths) ==
            len(depth.state)``).
        rank: whose :attr:`steps` to build.
        bytes_per_element: element size of the exchanged rows.
        link_pairs: ``(src, dst)`` gids of labelled pairs (link prediction):
            a final ``"readout"`` exchange moves the output row of every
            ``dst`` owned elsewhere to the owner of ``src``, who computes the
            pair's loss (``readout_width`` wide).
    """

    def __init__(self, signal: "DynamicGraphSignal", owner: Tensor, num_parts: int, depth: HaloDepth,
                 widths: tuple, rank: int = 0, bytes_per_element: int = 4, link_pairs: Optional[tuple] = None,
                 readout_width: int = 1) -> None:
        if len(widths) != len(depth.state):
            raise PartitionError("widths", f"has {len(widths)} entries for {len(depth.state)} state components.",
                                 "give one width per state component.")
        sg = signal.supergraph()
        N, T, R = sg.num_nodes, sg.num_snapshots, int(num_parts)
        owner = owner.to("cpu", torch.long)
        if owner.shape != (N,):
            raise PartitionError("owner", f"has shape {list(owner.shape)} for {N} vertex-time nodes.", "give one rank per node.")
        self.num_parts, self.num_nodes, self.rank, self.depth = R, N, int(rank), depth
        self.widths = tuple(int(w) for w in widths)
        self.bytes_per_element = int(bytes_per_element)
        prev = torch.full((N,), -1, dtype=torch.long)
        nxt = torch.full((N,), -1, dtype=torch.long)
        te = sg.temporal_edge_index.cpu()
        prev[te[1]] = te[0]
        nxt[te[0]] = te[1]
        time = sg.time.cpu()
        mine = owner == self.rank
        # position of each of my nodes among my nodes of its snapshot (the rows of history[t])
        my_gids = mine.nonzero().flatten()
        my_ptr = torch.zeros(T + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(time[my_gids], minlength=T), 0, out=my_ptr[1:])
        position = torch.full((N,), -1, dtype=torch.long)
        position[my_gids] = torch.arange(my_gids.numel()) - my_ptr[time[my_gids]]
        kept = my_ptr[1:] - my_ptr[:-1]  # rows of history[t]
        #: ``[|Q|]`` the vertex-time nodes this rank owns, in gid order (= output order)
        self.owned_gids = my_gids
        node_ptr, edge_ptr = signal.node_ptr.cpu(), signal.edge_ptr.cpu()
        edge_index = signal.edge_index.cpu()
        hops = depth.hops
        self.exchanges: list[Exchange] = []
        self.steps: list[LocalStep] = []
        ranks = torch.arange(R)
        for t in range(T):
            g0, g1 = int(node_ptr[t]), int(node_ptr[t + 1])
            e0, e1 = int(edge_ptr[t]), int(edge_ptr[t + 1])
            n = g1 - g0
            ei = edge_index[:, e0:e1]
            own_t = owner[g0:g1]
            prev_t = prev[g0:g1]
            if R == 1 or hops is None:  # everything is local
                local = torch.ones(R, n, dtype=torch.bool)
                dist = torch.zeros(R, n, dtype=torch.long)
            else:
                dist = hop_distance(ei, n, own_t.unsqueeze(0) == ranks.unsqueeze(1), hops + 1)
                local = dist <= hops + 1
            lm = local[self.rank]
            nodes_idx, local_pos, edges_idx, ei_loc = local_subgraph(ei, lm, depth.full_nodes)
            all_local = nodes_idx is None
            owned_mask = own_t == self.rank
            n_loc = n if all_local else int(nodes_idx.numel())
            owned = None if bool(owned_mask.all()) and all_local else local_pos[owned_mask.nonzero().flatten()]
            routes = []
            for c, s in enumerate(depth.state):
                reach = s if s is not None else n + 1
                need = (dist <= reach) & local & (prev_t >= 0).unsqueeze(0)  # [R, n]
                rr, ii = need.nonzero(as_tuple=True)
                p = prev_t[ii]
                src = owner[p]
                remote = src != rr
                kind_of = torch.where(own_t[ii] == rr, 0, 1)  # 0: temporal (receiver owns v at t), 1: spatial (halo)
                route_send_gids, route = [], StateRoute(Gather([], None, 0), 0, torch.zeros(0, dtype=torch.long))
                selfm = (rr == self.rank) & ~remote
                self_dst = local_pos[ii[selfm]]
                self_gid = p[selfm]
                active = []
                for k, kind in enumerate(STATE_KINDS if R > 1 else ()):
                    sel = remote & (kind_of == k)
                    ex = Exchange.from_rows(0, state_phase(t, c, kind), kind, self.widths[c], self.bytes_per_element, R,
                                            src[sel], rr[sel], p[sel], N)
                    if ex.num_rows == 0:
                        continue
                    self.exchanges.append(ex)
                    active.append(kind)
                    sgids, ssplits = ex.send_list(self.rank)
                    rgids, rsplits = ex.recv_list(self.rank)
                    route_send_gids.append(sgids)
                    route.send_splits[kind] = ssplits
                    route.recv_splits[kind] = rsplits
                    route.recv_dst[kind] = local_pos[nxt[rgids] - g0]
                gids = torch.cat([self_gid] + route_send_gids)
                route.gather = Gather.build(gids, time, position, kept)
                route.num_self = int(self_gid.numel())
                route.self_dst = self_dst
                route.active = tuple(active)
                route.identity = (not active and route.num_self == n_loc and len(route.gather.groups) == 1
                                  and route.gather.order is None and _is_arange(self_dst))
                routes.append(route)
            self.steps.append(LocalStep(t, nodes_idx, edges_idx, ei_loc, owned, n_loc, int(owned_mask.sum()), routes))
        if link_pairs is not None:
            ls, ld = (p.to("cpu", torch.long) for p in link_pairs)
            cross = owner[ls] != owner[ld]
            self.exchanges.append(Exchange.from_rows(0, "readout", "readout", readout_width, self.bytes_per_element, R,
                                                     owner[ld[cross]], owner[ls[cross]], ld[cross], N))

    # ------------------------------------------------------------------ plan interface
    def __iter__(self) -> Iterator[Exchange]:
        return iter(self.exchanges)

    def __len__(self) -> int:
        return len(self.exchanges)

    def exchange(self, block: int, phase: str) -> Exchange:
        for e in self.exchanges:
            if e.block == block and e.phase == phase:
                return e
        raise PartitionError("phase", f"no exchange ({block}, {phase!r}) in this plan.", "see StatePlan.exchanges.")

    def bytes_by_kind(self, forward_only: bool = False) -> dict[str, int]:
        """Bytes per epoch by kind (forward + backward, or forward only) and ``"total"``."""
        out = {k: 0 for k in KINDS}
        for e in self.exchanges:
            out[e.kind] += e.forward_bytes if forward_only else e.forward_bytes + e.backward_bytes
        out["total"] = sum(out[k] for k in KINDS)
        return out

    def load_bytes(self) -> int:
        """Nothing is moved at set-up: every rank holds the signal's features."""
        return 0

    def temporal_rounds(self) -> int:
        """Snapshots run one after another: one round per snapshot."""
        return len(self.steps)

    def local_sizes(self) -> Tensor:
        """``[T, 2]`` local nodes and owned nodes of this rank per snapshot."""
        return torch.tensor([[s.num_local, s.num_owned] for s in self.steps], dtype=torch.long).reshape(-1, 2)

    def __repr__(self) -> str:
        b = self.bytes_by_kind()
        return (f"StatePlan(parts={self.num_parts}, depth=({self.depth.describe()}), snapshots={len(self.steps)}, "
                f"exchanges={len(self)}, bytes/epoch={b['total']} (spatial={b['spatial']}, temporal={b['temporal']}))")

    # ------------------------------------------------------------------ one rank's slice (shards)
    def rank_state(self, rank: int) -> dict:
        r"""Rank ``rank``'s slice of the plan in plain types (tensors, ints,
        lists, dicts; ``weights_only``-loadable), for a black-box shard: its
        :attr:`steps` (``rank`` must be the plan's own), its owned gids and
        each exchange cut to its own lists
        (:meth:`~pyg_dynscale.partition.rank_plan.RankExchange.from_exchange`,
        with the whole exchange's row counts for the predicted traffic). The
        steps are stored *local*: ``nodes``/``edges`` are dropped because the
        shard's per-step rows are exactly the local subgraph's
        (:meth:`from_rank_state` sets them to ``None``)."""
        from .rank_plan import RankExchange

        if int(rank) != self.rank:
            raise PartitionError("rank", f"is {rank} but this StatePlan's steps are rank {self.rank}'s.",
                                 f"build StatePlan(..., rank={rank}).")

        def route(r: StateRoute) -> dict:
            g = r.gather
            return {"groups": [[int(t), rows, bool(whole)] for t, rows, whole in g.groups], "order": g.order,
                    "size": g.size, "num_self": r.num_self, "self_dst": r.self_dst,
                    "send_splits": {k: list(v) for k, v in r.send_splits.items()}, "recv_dst": dict(r.recv_dst),
                    "recv_splits": {k: list(v) for k, v in r.recv_splits.items()}, "active": list(r.active),
                    "identity": r.identity}

        steps = [{"t": s.t, "edge_index": s.edge_index, "owned": s.owned, "num_local": s.num_local,
                  "num_owned": s.num_owned, "routes": [route(r) for r in s.routes]} for s in self.steps]
        return {"num_parts": self.num_parts, "num_nodes": self.num_nodes, "rank": self.rank,
                "depth": {"x": self.depth.x, "state": list(self.depth.state), "full_nodes": self.depth.full_nodes},
                "widths": list(self.widths), "bytes_per_element": self.bytes_per_element,
                "owned_gids": self.owned_gids, "steps": steps,
                "exchanges": [RankExchange.from_exchange(e, rank).to_state() for e in self.exchanges]}

    @classmethod
    def from_rank_state(cls, state: dict) -> "StatePlan":
        """The plan :meth:`rank_state` stored, for a rank whose per-step
        inputs are its local subgraphs (``nodes = edges = None``); its
        exchanges are :class:`~pyg_dynscale.partition.rank_plan.RankExchange`
        (own lists, whole-plan totals), so :meth:`bytes_by_kind` and the
        traffic report predict the whole plan's bytes."""
        from .rank_plan import RankExchange

        plan = cls.__new__(cls)
        d = state["depth"]
        plan.num_parts, plan.num_nodes, plan.rank = int(state["num_parts"]), int(state["num_nodes"]), int(state["rank"])
        plan.depth = HaloDepth(d["x"], tuple(d["state"]), bool(d["full_nodes"]))
        plan.widths = tuple(int(w) for w in state["widths"])
        plan.bytes_per_element = int(state["bytes_per_element"])
        plan.owned_gids = state["owned_gids"]
        plan.exchanges = [RankExchange.from_state(e) for e in state["exchanges"]]
        plan.steps = []
        for s in state["steps"]:
            routes = []
            for r in s["routes"]:
                gather = Gather([(t, rows, whole) for t, rows, whole in r["groups"]], r["order"], int(r["size"]))
                routes.append(StateRoute(gather, int(r["num_self"]), r["self_dst"], dict(r["send_splits"]),
                                         dict(r["recv_dst"]), dict(r["recv_splits"]), tuple(r["active"]),
                                         bool(r["identity"])))
            plan.steps.append(LocalStep(int(s["t"]), None, None, s["edge_index"], s["owned"], int(s["num_local"]),
                                        int(s["num_owned"]), routes))
        return plan
