"""``scheme="auto"`` picks each of its five candidates for some input, under
the default constants (``CostModel.for_device("cpu")``).

For every candidate there is one small signal and one model built so that
this scheme has the lowest predicted epoch for a *structural* reason (fewer
collectives, fewer module calls, no cut, a smaller halo, a balanced load).
Each test checks that

* ``partition(sig, "auto", R, ...)`` chooses it (five tests, five different
  winners: a constant choice fails four of them), twice on the same input
  (a round-robin fails every one);
* the choice is the argmin of :func:`predict_cost` recomputed here for every
  candidate, each partition built on its own through the public
  :func:`partition` (and the chosen partition is that candidate's);
* its predicted cost is strictly lower than every other candidate's, by the
  margin the test names, and the facts that make the margin (bytes,
  collectives, rounds, halo rows, calls) hold on the plans.

The constants may be re-fitted by ``benchmarks/bench_auto.py --calibrate``;
each docstring says which terms a case's margins rest on. Where a margin is
only a halo (compute on a few rows, microseconds at these sizes) the test
checks the halo itself, so a refit cannot make it a coincidence.
"""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.nn import TGCN, DySAT, MPNNLSTMDGC
from pyg_dynscale.partition import CommunicationPlan, partition
from pyg_dynscale.partition.schemes.auto import AUTO_CANDIDATES, BlackBoxSpec, CostModel, predict_cost
from pyg_dynscale.partition.halo_plan import HaloDepth

CPU = CostModel.for_device("cpu")


# ----------------------------------------------------------------- helpers
def _static_signal(edges: torch.Tensor, V: int, T: int, F: int = 3, seed: int = 0) -> DynamicGraphSignal:
    """Every vertex in every snapshot, the same undirected edges (both directions) throughout."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.cat([edges, edges.flip(0)], 1)
    return DynamicGraphSignal(ei, None, [torch.randn(V, F, generator=g) for _ in range(T)],
                              [torch.randn(V, generator=g) for _ in range(T)], num_vertices=V)


def _grid(H: int, W: int) -> torch.Tensor:
    """``[2, E]`` the undirected edges of an ``H x W`` grid numbered row by row."""
    v = torch.arange(H * W).view(H, W)
    right = torch.stack([v[:, :-1].flatten(), v[:, 1:].flatten()])
    down = torch.stack([v[:-1, :].flatten(), v[1:, :].flatten()])
    return torch.cat([right, down], 1)


def _build(sig: DynamicGraphSignal, name: str, R: int, pgc_pattern, seed: int = 0):  # noqa: ANN001, ANN202
    """Candidate ``name`` built on its own, through the public dispatcher."""
    if name == "pts-loc":
        return partition(sig, "pts", R, locality=True)
    if name == "pgc":
        return partition(sig, "pgc", R, pgc_pattern, seed=seed)
    return partition(sig, name, R)


def _independent_costs(sig: DynamicGraphSignal, R: int, pattern=None, blackbox=None,  # noqa: ANN001
                       cost: CostModel = CPU) -> tuple[dict, dict]:
    """``({name: CandidateCost}, {name: Partition})`` for every candidate of
    the path (no PSS-TS on the black-box path), recomputed here."""
    names = [n for n in AUTO_CANDIDATES if not (blackbox is not None and n == "pss-ts")]
    pgc_pattern = pattern if blackbox is None else blackbox.pattern()
    parts = {n: _build(sig, n, R, pgc_pattern) for n in names}
    costs = {n: predict_cost(sig, parts[n], None if blackbox is not None else pattern, blackbox, cost, n)
             for n in names}
    return costs, parts


def _assert_auto_picks(winner: str, sig: DynamicGraphSignal, R: int, *, pattern=None, blackbox=None,  # noqa: ANN001
                       margins: dict, cost: CostModel = CPU) -> dict:
    """The common checks (module doc); ``margins``: for every other
    candidate, the least amount (seconds) by which ``winner`` must be
    cheaper. Returns the independently computed costs and partitions."""
    costs, parts = _independent_costs(sig, R, pattern, blackbox, cost)
    assert set(margins) == set(costs) - {winner}, "name a margin for every other candidate"
    argmin = min(costs.values(), key=lambda c: (c.predicted_s, AUTO_CANDIDATES.index(c.scheme))).scheme
    chosen = []
    for _ in range(2):  # the same input twice: the same answer (a round-robin would move on)
        p = partition(sig, "auto", R, pattern, blackbox=blackbox, cost=cost)
        chosen.append(p.meta["auto"]["chosen"])
    assert chosen == [winner, winner], f"auto chose {chosen}, expected {winner}; costs {_table(costs)}"
    assert argmin == winner, f"independent argmin is {argmin}: {_table(costs)}"
    # what auto reported is what predict_cost gives on each candidate built separately
    reported = {c["scheme"]: c for c in p.meta["auto"]["candidates"]}
    assert set(reported) == set(costs)
    for name, c in costs.items():
        assert reported[name]["predicted_s"] == pytest.approx(c.predicted_s, rel=1e-9, abs=1e-12), name
        assert reported[name]["bytes_total"] == c.bytes_total and reported[name]["collectives"] == c.collectives
    # the partition returned is the winner's
    assert p.scheme == winner.replace("pts-loc", "pts")
    assert torch.equal(p.owner, parts[winner].owner)
    assert torch.equal(p.temporal_owner, parts[winner].temporal_owner)
    # strictly cheaper than every other candidate, by the named margin
    best = costs[winner].predicted_s
    for name, need in margins.items():
        got = costs[name].predicted_s - best
        assert got > 0 and got >= need, (f"{winner} beats {name} by {got * 1e3:.4f} ms, "
                                         f"need {need * 1e3:.4f} ms: {_table(costs)}")
    return costs, parts


def _table(costs: dict) -> str:
    return "; ".join(f"{n} {c.predicted_s * 1e3:.4f} ms ({c.compute_s * 1e3:.4f} + {c.comm_s * 1e3:.4f} + "
                     f"{c.latency_s * 1e3:.2f}, {c.collectives} coll, {c.bytes_max_rank} B)"
                     for n, c in sorted(costs.items(), key=lambda kv: kv[1].predicted_s))


def _halo_rows(sig: DynamicGraphSignal, part, pattern) -> int:  # noqa: ANN001
    """Most spatial halo rows any rank receives per layer (static input rows included)."""
    plan = CommunicationPlan.build(sig, part, pattern)
    e = next(e for e in plan if e.kind == "spatial")
    c = e.counts()
    return int((c.sum(0) - c.diagonal()).max())


def _snapshots_per_rank(sig: DynamicGraphSignal, part) -> list:  # noqa: ANN001
    """Snapshots in which each rank owns a node (= calls of the module on the black-box path)."""
    sg = sig.supergraph()
    R, T = part.num_parts, sig.num_snapshots
    hit = torch.zeros(T, R, dtype=torch.bool)
    hit[sg.time, part.owner] = True
    return hit.sum(0).tolist()


# ----------------------------------------------------------------- PSS
def test_pss_wins_for_a_stateless_per_snapshot_module_on_the_black_box_path():
    """PSS: a black-box module without state (a GCN applied to each snapshot
    on its own: ``HaloDepth(x=1)``, no state), on a static 8 x 6 grid, 12
    snapshots, 2 ranks.

    Nothing crosses snapshots and the one-hop halo is recomputed from input
    features, so no candidate exchanges anything (one collective: the
    gradient sum) and no rank ever waits for another. What is left is the
    fixed cost of a call: a rank calls the module once per snapshot it holds
    nodes in. PSS gives each rank 6 whole snapshots -- 6 calls; every
    vertex split (PTS, PTS-loc, PGC) puts nodes of every snapshot on both
    ranks -- 12 calls each, plus a halo. Margin: 6 calls x ``call_s`` (~1.8
    ms of ~3.3 ms), robust to any refit with ``call_s > 0``.

    Why the black-box path: on the decomposed path PSS's only advantage is
    a cut of zero bytes (no temporal edge, or a model without a time
    dependency), which the vertex splits match on such inputs (PTS-loc lays
    out one snapshot's fresh vertices together, PGC finds the zero cut), so
    PSS wins there by ties broken in its favour at best, never strictly.
    """
    T, R = 12, 2
    sig = _static_signal(_grid(8, 6), 48, T)
    spec = BlackBoxSpec(HaloDepth(1, ()), (), 3)
    saved_calls = (T - T // R) * CPU.call_s
    costs, parts = _assert_auto_picks("pss", sig, R, blackbox=spec,
                                      margins={n: 0.9 * saved_calls for n in ("pts", "pts-loc", "pgc")})
    assert "pss-ts" not in costs  # no structure / time split on the black-box path
    assert all(c.collectives == 1 and c.bytes_total == 0 for c in costs.values())
    assert _snapshots_per_rank(sig, parts["pss"]) == [T // R] * R
    for name in ("pts", "pts-loc", "pgc"):
        assert _snapshots_per_rank(sig, parts[name]) == [T] * R, name


# ----------------------------------------------------------------- PTS
def _corridor(T: int = 8, F: int = 32) -> DynamicGraphSignal:
    """A static 16 x 8 grid numbered row by row (a corridor of sensors), whose
    middle vertex keeps one of its four links (a dead end)."""
    H, W = 16, 8
    e = _grid(H, W)
    mid = (H // 2) * W + W // 2
    at_mid = ((e[0] == mid) | (e[1] == mid)).nonzero().flatten()
    keep = torch.ones(e.shape[1], dtype=torch.bool)
    keep[at_mid[1:]] = False
    return _static_signal(e[:, keep], H * W, T, F)


def test_pts_wins_for_a_recurrent_model_reading_raw_features_on_a_static_graph():
    """PTS: T-GCN with one GCN layer (``TGCN(32, 8)``: the layer reads raw
    features only), on a static corridor (16 x 8 grid numbered row by row),
    8 snapshots, 2 ranks.

    * against PSS and PSS-TS (collectives): PTS keeps every sequence whole
      and its only spatial exchange is the raw-feature halo, loaded once --
      no per-epoch bytes, one collective (the gradient sum). PSS cuts every
      chain into 2 rounds (the state crosses once: 2 more collectives);
      PSS-TS redistributes the structure output (2 more collectives).
      Margin: 2 x ``latency_s`` (~2.8 ms of ~4.6 ms).
    * against PTS-loc and PGC (halo): same collectives, no bytes, only the
      raw-feature halo a rank transforms differs. Vertex-id order cuts the
      corridor once (a row of 8). Cuthill-McKee starts from the lowest
      degree vertex -- the dead end in the middle -- so its first half is a
      middle band and its halves meet along two rows; PGC does not see the
      halo (raw features cost no bytes per epoch) and cuts anywhere. The
      margin is the extra halo rows x 32 x ``unit_s`` (~0.05 ms against
      PTS-loc: 16 rows a snapshot instead of 7); the test checks the halo
      sizes themselves.
    """
    sig = _corridor()
    pattern = TGCN(32, 8).dependency_pattern()
    two_collectives = 2 * CPU.latency_s
    costs, parts = _assert_auto_picks("pts", sig, 2, pattern=pattern,
                                      margins={"pss": 0.9 * two_collectives, "pss-ts": 0.9 * two_collectives,
                                               "pts-loc": 2e-5, "pgc": 2e-5})
    assert costs["pts"].bytes_total == 0 and costs["pts"].collectives == 1 and costs["pts"].steps == 1
    assert costs["pss"].steps == 2 and costs["pss"].collectives == 3  # a chain in two rounds
    assert costs["pss-ts"].collectives == 3  # the redistribution, forward and backward
    halo = {n: _halo_rows(sig, parts[n], pattern) for n in ("pts", "pts-loc", "pgc")}
    # per snapshot: ids cut between rows 7 and 8 (8 links, less the dead end's); Cuthill-McKee's
    # middle band meets both ends along two rows of 8
    assert halo["pts"] == 8 * 7 and halo["pts-loc"] == 8 * 16 and halo["pgc"] > halo["pts"], halo


# ----------------------------------------------------------------- PTS with locality
def _scrambled_ring(V: int = 32, T: int = 16, seed: int = 0) -> DynamicGraphSignal:
    """A static ring whose vertex ids are shuffled."""
    perm = torch.randperm(V, generator=torch.Generator().manual_seed(seed))
    ring = torch.stack([torch.arange(V), (torch.arange(V) + 1) % V])
    return _static_signal(perm[ring], V, T)


def test_pts_with_locality_wins_when_the_ids_are_scrambled_and_the_model_exchanges_halos():
    """PTS-loc: T-GCN with two GCN layers (``TGCN(3, 32, num_layers=2)``: the
    second layer's input rows, 96 wide, cross ranks every epoch), on a
    static ring of 32 vertices with shuffled ids, 16 snapshots, 2 ranks.

    * against PTS (halo): PTS's id ranges are random halves of the ring,
      whose boundaries are everywhere (~10 halo rows per snapshot);
      Cuthill-McKee orders the ring along itself, so the halves are two arcs
      with 2 boundary vertices -- 5x fewer bytes and halo rows. Margin: those
      rows' bytes and compute (~0.17 ms of ~9.9 ms), > 0 for any refit with
      ``unit_s`` or ``1 / bandwidth`` > 0; the test checks the byte ratio.
    * against PSS and PGC (rounds): PSS cuts all 32 chains into 2 rounds (2
      more collectives). PGC minimizes bytes, and cutting each of the 32
      short histories once (a state row of 32) moves fewer bytes than two
      96-wide halo rows in each of 16 snapshots, so it returns the snapshot
      split too. Margin: 2 x ``latency_s`` (~2.8 ms).
    * against PSS-TS: the redistribution, 2 more collectives (~2.8 ms).
    """
    sig = _scrambled_ring()
    pattern = TGCN(3, 32, num_layers=2).dependency_pattern()
    two_collectives = 2 * CPU.latency_s
    costs, _ = _assert_auto_picks("pts-loc", sig, 2, pattern=pattern,
                                  margins={"pts": 1e-4, "pss": 0.9 * two_collectives,
                                           "pss-ts": 0.9 * two_collectives, "pgc": 0.9 * two_collectives})
    assert costs["pts"].collectives == costs["pts-loc"].collectives == 3
    # two arcs: 2 boundary rows per snapshot and rank, 96 wide, forward and backward
    assert costs["pts-loc"].bytes_max_rank == 2 * 16 * 96 * 4 * 2
    assert costs["pts"].bytes_max_rank >= 4 * costs["pts-loc"].bytes_max_rank
    assert costs["pss"].steps == costs["pgc"].steps == 2


# ----------------------------------------------------------------- PSS-TS
def _random_graph(V: int = 128, T: int = 24, out_degree: int = 2, F: int = 512, seed: int = 0) -> DynamicGraphSignal:
    """A static random graph (no locality for any vertex order to find)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.arange(V).repeat_interleave(out_degree)
    dst = torch.randint(0, V, (src.numel(),), generator=g)
    keep = src != dst
    return _static_signal(torch.stack([src[keep], dst[keep]]), V, T, F, seed)


def test_pss_ts_wins_for_a_heavy_structure_encoder_and_long_attention_histories():
    """PSS-TS: DySAT with a wide structural layer (``DySAT(4096, 1024, 24)``:
    4096 input features, 1024-wide attention), on a static random graph of 128
    vertices (each with ~4 neighbours), 24 snapshots, 8 ranks.

    PSS-TS pays 2 more collectives than PSS and PTS (the structure output
    goes from the snapshot owner to the sequence owner, and its gradient
    back) and moves each row it redistributes once (7/8 of a rank's 384
    rows, 1024 wide). In exchange:

    * against PSS (bytes): attention needs every earlier appearance, so PSS
      sends each row of a rank's snapshot range to every later rank -- rank
      0 sends its 384 rows to 7 ranks, 8x the rows PSS-TS moves.
    * against PTS, PTS-loc and PGC (halo compute): a vertex split of a
      random graph has no short boundary, so each rank's structure encoder
      (4096 wide) also transforms a halo of ~3x its own rows in every
      snapshot; PSS-TS runs the structure encoder by snapshot, without halo.
      PGC does not see that halo (raw features move no bytes per epoch) and
      keeps the sequences whole like PTS.

    Both margins trade bytes or compute against 2 collectives; the choice
    holds with each of ``unit_s``, ``bandwidth`` and ``latency_s`` scaled by
    0.25-4 around the cpu defaults (checked when the case was last tuned,
    after the constants were re-fitted).
    """
    T, R, F, H = 24, 8, 4096, 1024
    sig = _random_graph(T=T, F=F)
    with torch.device("meta"):  # the pattern needs the widths only, not the 88M parameters
        pattern = DySAT(F, H, T).dependency_pattern()
    assert [(b.spatial_widths, b.time_kind, b.time_width) for b in pattern.blocks] == [((F,), "attention", H)]
    costs, parts = _assert_auto_picks("pss-ts", sig, R, pattern=pattern,
                                      margins={"pss": 5e-3, "pts": 5e-3, "pts-loc": 5e-3, "pgc": 5e-3})
    assert costs["pss-ts"].collectives == costs["pss"].collectives + 2 == costs["pts"].collectives + 2
    own = 128 * T // R  # rows per rank
    row = H * 4 * 2  # forward and backward
    assert costs["pss"].bytes_max_rank == own * (R - 1) * row  # rank 0's rows, to each later rank
    assert costs["pss-ts"].bytes_max_rank == own * (R - 1) // R * row  # each row once, where it is not local
    assert costs["pts"].bytes_total == 0  # raw-feature halo only: loaded once
    for name in ("pts", "pts-loc", "pgc"):
        assert _halo_rows(sig, parts[name], pattern) > 2 * own, name


# ----------------------------------------------------------------- PGC
def _communities(n: int = 32, T: int = 12, degree: int = 3, seed: int = 0) -> DynamicGraphSignal:
    """Three communities of ``n`` vertices each, no edge between them: A
    (ids ``[0, n)``) active in the first half of the snapshots, B (``[n,
    2n)``) in the second half, C (``[2n, 3n)``) all along. ``degree``
    random in-community edges per vertex and snapshot."""
    g = torch.Generator().manual_seed(seed)
    active = ((0, T // 2), (T // 2, T), (0, T))
    eis, xs, ys, ids = [], [], [], []
    for t in range(T):
        comms = [c for c, (a, b) in enumerate(active) if a <= t < b]
        es = []
        for k, c in enumerate(comms):  # community c's vertices are local rows [k n, (k+1) n)
            src = torch.arange(n).repeat_interleave(degree) + k * n
            dst = torch.randint(0, n, (n * degree,), generator=g) + k * n
            es.append(torch.stack([src, dst])[:, src != dst])
        eis.append(torch.cat(es, 1))
        ids.append(torch.cat([torch.arange(c * n, (c + 1) * n) for c in comms]))
        xs.append(torch.randn(len(comms) * n, 3, generator=g))
        ys.append(torch.randn(len(comms) * n, generator=g))
    return DynamicGraphSignal(eis, None, xs, ys, node_ids=ids, num_vertices=3 * n)


def test_pgc_wins_when_communities_are_active_in_different_periods():
    """PGC: DGC's MPNN-LSTM (``MPNNLSTMDGC(3, 64)``: two GCN layers, a
    2-layer LSTM whose state is 256 wide), on three communities of 32
    vertices -- A active in the first 6 of 12 snapshots, B in the last 6, C
    in all 12 -- with no edge between communities, 2 ranks.

    * against PSS and PSS-TS (collectives): the snapshot split cuts C's 32
      chains into 2 rounds (2 more collectives, and the second half of C
      waits for the first); PSS-TS redistributes the structure output (2
      more collectives). Margin: 2 x ``latency_s`` (~2.8 ms of ~9.8 ms).
    * against PTS and PTS-loc (balance): the sequences have different
      lengths (6, 6 and 12), so equal numbers of them per rank are unequal
      work: ids in order give one rank A and half of B (3/4 of the mean),
      the other half of B and C (5/4), and cut B's edges. Cuthill-McKee lays
      out the communities in id order too, so PTS-loc does the same. PGC
      balances the work and follows the communities: A and B on one rank, C
      on the other -- no cut, equal loads. Margin: a quarter of the mean
      load x (LSTM state 256 + structure rows) x ``unit_s`` plus B's halo
      (~0.5 ms), > 0 for any refit with ``unit_s > 0``.
    """
    n, T = 32, 12
    sig = _communities(n, T)
    pattern = MPNNLSTMDGC(3, 64).dependency_pattern()
    two_collectives = 2 * CPU.latency_s
    costs, parts = _assert_auto_picks("pgc", sig, 2, pattern=pattern,
                                      margins={"pts": 2e-4, "pts-loc": 2e-4, "pss": 0.9 * two_collectives,
                                               "pss-ts": 0.9 * two_collectives})
    assert costs["pgc"].bytes_total == 0 and costs["pgc"].steps == 1
    assert costs["pss"].steps == 2 and costs["pts"].bytes_total > 0 and costs["pts-loc"].bytes_total > 0
    sg = sig.supergraph()
    pgc, pts = parts["pgc"].owner, parts["pts"].owner
    community = sg.vertex // n
    for c in range(3):  # PGC: every community whole, A and B together
        assert pgc[community == c].unique().numel() == 1
    assert int(pgc[community == 0][0]) == int(pgc[community == 1][0]) != int(pgc[community == 2][0])
    assert torch.bincount(pgc, minlength=2).tolist() == [n * T, n * T]
    assert sorted(torch.bincount(pts, minlength=2).tolist()) == [3 * n * T // 4, 5 * n * T // 4]
