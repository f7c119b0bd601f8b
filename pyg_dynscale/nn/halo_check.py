r"""Numerical check of a snapshot model's declared halo depth.

The black-box path is exact only if a module's outputs at owned nodes depend
on nothing beyond the declared :class:`~pyg_dynscale.partition.halo_plan.HaloDepth`.
:func:`check_halo` tests that directly, on a copy of the module (float64,
eval mode): on a random connected test graph it compares the owned rows of
one call on the whole graph against one call on the local subgraph the
runtime would build (nodes within ``hops + 1``, state rows within each
component's depth, zeros beyond), with random features and states. Rows just
outside the halo therefore differ between the two calls (present vs. absent
or zero); if any owned output moves, the depth is under-declared and the
check reports the smallest depth that passes, or that the module depends on
the whole snapshot (global pooling or normalization).
"""
from __future__ import annotations

import copy
from typing import Optional

import torch
from torch import Tensor

from ..errors import ModelInputError
from ..partition.halo_plan import HaloDepth, hop_distance, local_subgraph
from .snapshot_model import default_dtype

__all__ = ["check_halo", "HaloCheckError", "random_test_graph"]


class HaloCheckError(ModelInputError):
    """The module's outputs depend on inputs outside its declared halo."""


def random_test_graph(n: int, seed: int, dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """A connected graph with long paths: a ring of ``n`` nodes plus ``n // 8``
    chords, both directions, no duplicates, sorted by (target, source);
    weights in ``[0.5, 1.5)``, symmetric."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.arange(n)
    chords = torch.randint(0, n, (2, max(1, n // 8)), generator=gen)
    und = torch.cat([torch.stack([a, (a + 1) % n]), chords], 1)
    und = und[:, und[0] != und[1]]
    lo, hi = torch.minimum(und[0], und[1]), torch.maximum(und[0], und[1])
    key = torch.unique(lo * n + hi)
    lo, hi = key // n, key % n
    w = torch.rand(key.numel(), generator=gen, dtype=dtype) + 0.5
    src, dst, ww = torch.cat([lo, hi]), torch.cat([hi, lo]), torch.cat([w, w])
    order = torch.argsort(dst * n + src)
    return torch.stack([src[order], dst[order]]), ww[order]


def _call(model, x, ei, ew, states, ef):
    twin = copy.deepcopy(model)  # evolving modules change between calls: each call starts from the same state
    with torch.no_grad():
        y, st = twin.step(x, ei, ew, states, ef)
    return y, st


def _local_call(model, depth: HaloDepth, x, ei, ew, states, ef, owned: Tensor):
    n = x.shape[0]
    hops = depth.hops
    if hops is None:
        return _call(model, x, ei, ew, states, ef)
    dist = hop_distance(ei, n, owned.unsqueeze(0), hops + 1)[0]
    nodes, pos, edges, ei_loc = local_subgraph(ei, dist <= hops + 1, depth.full_nodes)
    sel = (lambda t: t) if nodes is None else (lambda t: t.index_select(0, nodes))
    ew_loc = None if ew is None else (ew if edges is None else ew[edges])
    ef_loc = {k: (v if edges is None else v[edges]) for k, v in ef.items()}
    st_loc = []
    for c, s in enumerate(states):
        reach = depth.state[c]
        keep = (dist <= (reach if reach is not None else n + 1)).unsqueeze(1)
        st_loc.append(sel(torch.where(keep, s, torch.zeros_like(s))))
    y, st = _call(model, sel(x), ei_loc, ew_loc, tuple(st_loc), ef_loc)
    return y, st, pos


def _mismatch(model, depth: HaloDepth, x, ei, ew, states, ef, owned: Tensor, ref) -> float:
    y_ref, st_ref = ref
    out = _local_call(model, depth, x, ei, ew, states, ef, owned)
    if len(out) == 2:
        return 0.0
    y, st, pos = out
    rows = owned.nonzero().flatten()
    loc = pos[rows]
    worst = 0.0
    for a, b in [(y_ref, y)] + list(zip(st_ref, st)):
        ra, rb = a.index_select(0, rows), b.index_select(0, loc)
        if ra.shape != rb.shape:
            return float("inf")
        scale = 1.0 + float(ra.abs().max()) if ra.numel() else 1.0
        d = float((ra - rb).abs().max()) / scale if ra.numel() else 0.0
        worst = max(worst, d if d == d else float("inf"))
    return worst


def check_halo(model, x_like: Tensor, edge_weight: bool = True, edge_fields: Optional[dict] = None,
               n: int = 40, seeds: tuple = (0, 1), tol: float = 1e-9, max_hops: int = 12) -> float:
    r"""Check that ``model`` (a :class:`~pyg_dynscale.nn.snapshot_model.SnapshotModel`
    with :attr:`state_widths` set) depends on nothing outside its declared
    depth.

    Args:
        model: the snapshot model.
        x_like: ``[*, ...]`` a feature tensor of the signal (for the row shape).
        edge_weight: pass edge weights.
        edge_fields: edge-level fields the module reads (e.g. LRGCN's
            ``edge_type``), values as in the signal.
        n: nodes of the random test graphs; a module that fails on them
            (one that needs a fixed node count, as EvolveGCN-H or MPNN-LSTM)
            is checked on graphs of ``x_like.shape[0]`` nodes.
        seeds: one test graph (and owned set) per seed.
        tol: largest relative difference accepted.

    Returns:
        The largest relative difference seen.

    Raises:
        HaloCheckError: an owned output moved; the message gives the
        smallest depth that passes, or says that the module reads the whole
        snapshot.
    """
    twin = copy.deepcopy(model).double().eval().cpu()  # a structural check: on the host, whatever the training device
    with default_dtype(torch.float64):
        try:
            return _check(twin, model, x_like, edge_weight, edge_fields, n, seeds, tol, max_hops)
        except HaloCheckError:
            raise
        except Exception:
            if n == x_like.shape[0]:
                raise
            return _check(twin, model, x_like, edge_weight, edge_fields, int(x_like.shape[0]), seeds, tol, max_hops)


def _check(twin, model, x_like, edge_weight, edge_fields, n, seeds, tol, max_hops) -> float:
    depth = twin.depth
    worst = 0.0
    for seed in seeds:
        gen = torch.Generator().manual_seed(1000 + seed)
        ei, ew = random_test_graph(n, seed)
        x = torch.randn((n,) + tuple(x_like.shape[1:]), generator=gen, dtype=torch.float64)
        states = tuple(torch.randn(n, w, generator=gen, dtype=torch.float64) for w in twin.state_widths)
        ef = {}
        for k, v in (edge_fields or {}).items():
            if v.is_floating_point():
                ef[k] = torch.rand((ei.shape[1],) + tuple(v.shape[1:]), generator=gen, dtype=torch.float64)
            else:
                ef[k] = torch.randint(0, int(v.max()) + 1 if v.numel() else 1, (ei.shape[1],) + tuple(v.shape[1:]), generator=gen)
        owned = torch.zeros(n, dtype=torch.bool)
        owned[torch.randperm(n, generator=gen)[:2]] = True
        ref = _call(twin, x, ei, None if not edge_weight else ew, states, ef)
        d = _mismatch(twin, depth, x, ei, ew if edge_weight else None, states, ef, owned, ref)
        if d > tol:
            found = None
            far = hop_distance(ei, n, owned.unsqueeze(0), n)[0]
            for k in range((depth.hops or 0) + 1, min(n // 2, max_hops) + 1):
                if bool((far <= k + 1).all()):  # the local set is the whole test graph: no halo depth suffices
                    break
                trial = HaloDepth(k, (k,) * len(depth.state), depth.full_nodes)
                if _mismatch(twin, trial, x, ei, ew if edge_weight else None, states, ef, owned, ref) <= tol:
                    found = k
                    break
            name = type(model.module).__name__
            if found is None:
                raise HaloCheckError(
                    "depth", f"of {name} is declared ({depth.describe()}), but its outputs at a node move when nodes "
                    f"far outside that halo change (relative difference {d:.3g}): it reads the whole snapshot "
                    "(global pooling or normalization, e.g. BatchNorm, top-k pooling or a softmax over all nodes).",
                    "declare depth=None (the whole snapshot: exact, but every rank then computes every node), "
                    "or full_nodes=True in a HaloDepth if only node features are pooled.")
            raise HaloCheckError(
                "depth", f"of {name} is declared ({depth.describe()}), but its outputs at a node move when inputs "
                f"just outside that halo change (relative difference {d:.3g}); the smallest uniform depth that "
                f"passes is {found} hops.", f"declare depth={found} (or a HaloDepth with at least these hops).")
        worst = max(worst, d)
    return worst
