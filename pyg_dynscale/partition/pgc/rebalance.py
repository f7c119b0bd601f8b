r"""Round-aware rebalancing: move work off the rank the runtime waits for.

PGC's label propagation, Algorithm 1 and its refinement balance an
*additive* node cost (:mod:`~pyg_dynscale.partition.costs.workload`). What a rank of the decomposed
runtime pays also has a non-additive part: the recurrent rounds of the time
encoder (:mod:`~pyg_dynscale.partition.costs.rounds`) -- a rank whose sequence pieces sit deep in
their chains scans in many rounds, each as many steps as its longest piece.
:func:`balance_rounds` takes a finished owner array and moves *blocks* --
the vertex-time nodes that one rank owns in one snapshot -- from the rank
with the largest predicted compute :math:`t_r` (:class:`~pyg_dynscale.partition.costs.rounds.RoundWorkload`) to
ranks below the mean, as long as

* the largest :math:`t_r` decreases (the prediction is recomputed exactly for
  every candidate: the round terms are not additive), and
* the plan bytes stay within ``max_bytes_ratio`` of the starting
  partition's (computed exactly, :func:`~pyg_dynscale.partition.costs.plan_bytes.plan_bytes`).

Blocks follow the partition's grain: in a snapshot-range partition (PGC's
refined PSS start) a block is a whole snapshot, so moving the first or last
snapshot of a range to the neighbouring rank cuts no spatial edge and moves
a boundary of temporal cuts; in a chunk partition a block is a chunk's
slice of one snapshot. Moving a whole block never creates a new piece of a
sequence inside that snapshot, so the number of rounds does not grow from
a block that joins the rank of its temporal neighbours.

For the slowest rank (then the next), the blocks that add the fewest
bytes (edge-weight affinity; a block goes to the faster rank it is most
attached to) are tried, each as a span of 1, 2, 4, ... of the rank's blocks
running away from the target rank. Among the moves that lower the squared
coefficient of variation of the predicted per-rank compute without raising
its maximum or the predicted critical path, and keep the bytes within budget, the one that gains the most
per byte added is applied; the search stops when none is left, at
``target`` or after ``max_evaluations`` predictions.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import Tensor

from ...errors import PartitionError
from ..pattern import DependencyPattern
from ..costs.rounds import RoundWorkload, round_features

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal

__all__ = ["balance_rounds", "BALANCE_OBJECTIVES"]

#: PGC's ``balance=`` option: ``"nodes"`` (default): the additive node cost
#: only (vertex-time nodes + edges, or the workload model's); ``"rounds"``:
#: then :func:`balance_rounds` on the round-aware model.
BALANCE_OBJECTIVES = ("nodes", "rounds")


def _edge_weights(pattern: Any) -> tuple[float, float]:
    from .coarsen import attention_split

    if isinstance(pattern, DependencyPattern):
        ws = float(pattern.spatial_edge_weight())
        w_rec, w_att = attention_split(pattern)
        return ws, float(w_rec + w_att)
    if pattern is None:
        return 1.0, 1.0
    return float(pattern[0]), float(pattern[1])


def _bytes(sg: Any, owner: Tensor, P: int, pattern: Any, ws: float, wt: float) -> float:
    """Plan bytes with a pattern (exact), else the cut weight."""
    if isinstance(pattern, DependencyPattern):
        from ..costs.plan_bytes import plan_bytes

        return float(plan_bytes(sg, owner, P, pattern))
    s, d = sg.spatial_edge_index
    u, v = sg.temporal_edge_index
    return ws * float((owner[s] != owner[d]).sum()) + wt * float((owner[u] != owner[v]).sum())


def balance_rounds(
    signal: "DynamicGraphSignal",
    owner: Tensor,
    num_parts: int,
    pattern: Any = None,
    model: Optional[RoundWorkload] = None,
    *,
    max_bytes_ratio: float = 1.1,
    max_epoch_ratio: float = 1.05,
    target: float = 1.02,
    max_evaluations: int = 2000,
    candidates: int = 4,
) -> tuple[Tensor, dict]:
    r"""Rebalance ``owner`` for the round-aware model (module doc).

    Args:
        signal: the dynamic graph (:math:`N` vertex-time nodes, :math:`T` snapshots).
        owner (Tensor): ``[N]`` rank of every vertex-time node (structure and
            time owner alike, as PGC's partitions have).
        num_parts (int): :math:`P`.
        pattern: the dependency pattern (edge byte weights, recurrent blocks).
        model (RoundWorkload, optional): the cost constants (default
            :class:`RoundWorkload` ``()``: :data:`~pyg_dynscale.partition.costs.rounds.DEFAULT_CONSTANTS`).
        max_bytes_ratio (float): plan bytes may grow to this factor of the
            starting partition's (the issue's budget: 10%).
        max_epoch_ratio (float): the predicted critical path
            (:attr:`~pyg_dynscale.partition.costs.rounds.RoundPrediction.epoch`: ranks wait for each other in
            every round) may grow to this factor of the start's; ``1``: a
            move that balances the ranks by adding rounds to the epoch is refused.
        target (float): stop once the predicted :math:`\lambda` of the per-rank
            compute is at most this.
        max_evaluations (int): exact predictions tried at most (each is
            :math:`O(N + E)`).
        candidates (int): blocks tried per step (the cheapest in bytes).

    Returns:
        ``(owner [N], info)`` with ``info`` = predicted per-rank compute and
        :math:`\lambda` before / after, critical path before / after, bytes
        before / after, moves and evaluations.
    """
    if not (isinstance(max_bytes_ratio, (int, float)) and max_bytes_ratio >= 1.0 and math.isfinite(max_bytes_ratio)):
        raise PartitionError("max_bytes_ratio", f"must be a finite number >= 1, got {max_bytes_ratio!r}.", "use e.g. 1.1.")
    if not (isinstance(max_epoch_ratio, (int, float)) and max_epoch_ratio >= 1.0):
        raise PartitionError("max_epoch_ratio", f"must be a number >= 1, got {max_epoch_ratio!r}.", "use e.g. 1.0.")
    if not (isinstance(target, (int, float)) and target >= 1.0):
        raise PartitionError("target", f"must be a number >= 1, got {target!r}.", "use e.g. 1.02.")
    model = model or RoundWorkload()
    P = int(num_parts)
    sg = signal.supergraph()
    owner = owner.to(torch.long).clone()
    N = owner.numel()
    ws, wt = _edge_weights(pattern)

    def predict(o: Tensor):
        return model.predict_features(round_features(signal, o, pattern, P))

    pred0 = predict(owner)
    bytes0 = _bytes(sg, owner, P, pattern, ws, wt)
    budget = bytes0 * float(max_bytes_ratio)
    epoch_cap = pred0.epoch * float(max_epoch_ratio) * (1 + 1e-12)
    info = {"lambda_before": pred0.divergence, "per_rank_before": pred0.per_rank.tolist(),
            "epoch_before": pred0.epoch, "bytes_before": bytes0}
    if P == 1 or N == 0:
        info.update(lambda_after=pred0.divergence, per_rank_after=pred0.per_rank.tolist(), epoch_after=pred0.epoch,
                    bytes_after=bytes0, moves=0, evaluations=0)
        return owner, info

    s_src, s_dst = sg.spatial_edge_index
    t_src, t_dst = sg.temporal_edge_index
    # undirected incidence (node, neighbour, weight) over both edge kinds
    nb_a = torch.cat([s_src, s_dst, t_src, t_dst])
    nb_b = torch.cat([s_dst, s_src, t_dst, t_src])
    nb_w = torch.cat([torch.full((2 * s_src.numel(),), ws, dtype=torch.float64),
                      torch.full((2 * t_src.numel(),), wt, dtype=torch.float64)])
    time = sg.time.to(torch.long)

    cur, cur_bytes, moves, evals = pred0, bytes0, 0, 0
    T = int(time.max()) + 1

    def key(pr) -> float:
        # squared coefficient of variation of the per-rank compute: lower when the slow ranks get
        # faster or the fast ones slower (a tie at the top does not stall it, unlike the max)
        t = pr.per_rank
        return float(t.var(unbiased=False) / t.mean().square().clamp(min=1e-300))

    while evals < max_evaluations and cur.divergence > target:
        t_r = cur.per_rank
        cur_key = key(cur)
        cnt = torch.zeros(T * P, dtype=torch.long).index_add_(0, time * P + owner, torch.ones_like(owner)).view(T, P)
        best = None
        improving: list = []  # (key, trial owner, prediction, blocks moved): bytes checked best first
        for h in torch.argsort(t_r, descending=True).tolist()[:-1]:
            on_h = owner == h
            blk = torch.where(on_h, time, torch.full_like(time, -1))
            # affinity (edge weight) of each block of h to each rank
            a_blk = blk[nb_a]
            keep = a_blk >= 0
            aff = torch.zeros(T * P, dtype=torch.float64).index_add_(
                0, a_blk[keep] * P + owner[nb_b[keep]], nb_w[keep]).view(T, P)
            # a block may go to a faster rank it is attached to
            a_q = aff.clone()
            a_q[:, t_r >= t_r[h]] = 0.0
            q = a_q.argmax(1)
            has = (a_q.gather(1, q[:, None]).squeeze(1) > 0) & (cnt[:, h] > 0)
            if not bool(has.any()):
                continue
            cand = torch.nonzero(has).flatten()
            # bytes added: edges to h that become cut minus edges to q that become internal
            cost = aff[cand, h] - aff[cand, q[cand]]
            cand = cand[torch.argsort(cost, stable=True)].tolist()
            h_blocks = torch.nonzero(cnt[:, h] > 0).flatten()
            for b in cand[:candidates]:
                qb = int(q[b])
                before_q = int(cnt[:b, qb].sum())
                after_q = int(cnt[b + 1:, qb].sum())
                # spans of h's blocks from b running away from q (q's nodes lie before b: forwards), 1, 2, 4, ...
                side = h_blocks[h_blocks >= b] if before_q >= after_q else h_blocks[h_blocks <= b].flip(0)
                m = 1
                while m <= side.numel() and evals < max_evaluations:
                    trial = owner.clone()
                    trial[on_h & torch.isin(time, side[:m])] = qb
                    pr = predict(trial)
                    evals += 1
                    k = key(pr)
                    if k < cur_key * (1 - 1e-12) and float(pr.per_rank.max()) <= float(t_r.max()) \
                            and pr.epoch <= epoch_cap:
                        improving.append((k, trial, pr, m))
                    m *= 2
            # the budget is spent where it buys the most: balance gained per byte added
            scored = []
            for k, trial, pr, m in improving:
                nb = _bytes(sg, trial, P, pattern, ws, wt)
                if nb <= budget:
                    scored.append(((cur_key - k) / max(nb - cur_bytes, 1.0), k, trial, pr, nb, m))
            if scored:
                _, k, trial, pr, nb, m = max(scored, key=lambda c: c[0])
                best = (k, trial, pr, nb, m)
            improving.clear()
            if best is not None:
                break
        if best is None:
            break
        _, owner, cur, cur_bytes, m = best
        moves += m
    info.update(lambda_after=cur.divergence, per_rank_after=cur.per_rank.tolist(), epoch_after=cur.epoch,
                bytes_after=cur_bytes, moves=moves, evaluations=evals)
    return owner, info


def rebalance_partition(signal: "DynamicGraphSignal", part: Any, pattern: Any = None,
                        model: Optional[RoundWorkload] = None, **kwargs: Any) -> Any:
    r"""``part`` (a PGC :class:`~pyg_dynscale.partition.partition.Partition`)
    after :func:`balance_rounds`: the new owner, chunk ids remade from
    ``(chunk, owner)`` pairs (a chunk whose nodes moved in part is split, so
    ``owner`` stays constant inside a chunk), and ``meta["round_balance"]``
    with the predictions and bytes before / after. ``kwargs`` go to
    :func:`balance_rounds`."""
    import time as _time

    t0 = _time.perf_counter()
    owner, info = balance_rounds(signal, part.owner, part.num_parts, pattern, model, **kwargs)
    chunk = part.chunk if part.chunk is not None else torch.zeros_like(owner)
    _, chunk = torch.unique(chunk.to(torch.long) * part.num_parts + owner, return_inverse=True)
    info["seconds"] = _time.perf_counter() - t0
    part.owner = owner
    part.chunk = chunk.to(torch.long)
    part.meta["round_balance"] = info
    part.meta["num_chunks"] = int(chunk.max()) + 1 if chunk.numel() else 0
    part.seconds = float(part.seconds or 0.0) + info["seconds"]
    return part
