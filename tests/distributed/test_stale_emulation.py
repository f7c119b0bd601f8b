"""The stale cache over several epochs equals a single-process emulation of
the same policy (DGC §5.2, Eq. 6-7), written here independently of
``pyg_dynscale.distributed.stale``.

T-GCN with two GCN layers under PTS on 2 ranks: the one exchange that moves
rows every epoch is the layer-1 spatial halo. The emulation runs the whole
signal in one process and gives each rank's owned nodes the layer-1 rows
that rank would see: its own rows live; a halo row live when its sender
found it *fresh* -- moved more than :math:`\\theta = f \\cdot D` from the copy it
last transmitted, :math:`D` the largest such distance over the sender's rows
(``scope="local"``) or over all senders (``"global"``), :math:`f` the
policy's factor of the loss progress :math:`(L_1 - L_{e-1}) / L_1` (Eq. 7,
global losses) -- else the receiver's cached copy, a constant (``backward=
"skip"``) or a straight-through value whose gradient reaches the current row
(``"send"``). ``drift:eps`` instead keeps, per sender and receiver, the
rows of smallest distance in the cache while the square root of their summed
squared distances stays within ``eps`` times the Frobenius norm of the rows
it would send. Each configuration below also fails under a plausible bug:
the adaptive factor read as 0, ``D`` summed instead of maxed over ranks, Eq. 7
fed a rank's own share of the loss, ``"send"`` behaving as ``"skip"``.
"""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.distributed.stale import StaleConfig
from pyg_dynscale.nn.decomposed import FusedGraph, Halo
from pyg_dynscale.partition import CommunicationPlan
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import distributed_cases as cases

EPOCHS, R, NAME, SCHEME = 7, 2, "tgcn2", "pts"
#: the policies' factors theta / D as functions of the loss progress (docs/stale.md), written out here
FACTORS = {"static:0.5": lambda n: 0.5, "intent": lambda n: 1 / (1 + math.exp(-n)), "adaptive": lambda n: 0.9,
           "printed": lambda n: 1 / (1 + math.exp(n)), "drift:0.05": 0.05, "drift:0.1": 0.1}
CONFIGS = [("static:0.5", "local", "skip"), ("intent", "global", "skip"), ("adaptive", "local", "skip"),
           ("static:0.5", "global", "send"), ("printed", "local", "send"), ("drift:0.05", "local", "skip"),
           ("drift:0.1", "local", "send")]


def _config(policy: str, scope: str, backward: str) -> StaleConfig:
    cfg = StaleConfig.parse(policy)
    return StaleConfig(cfg.policy, cfg.c, backward=backward, scope=scope)


def _distributed(rank: int, world_size: int) -> list:
    sig = cases.signal()
    out = []
    for policy, scope, backward in CONFIGS:
        m, head, loss = cases.model(NAME)
        part = cases.make_partition(sig, SCHEME, world_size, m.dependency_pattern(8))
        tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cases.optimizer_for(NAME),
                                stale=_config(policy, scope, backward))
        losses = [tr.train_epoch() for _ in range(EPOCHS)]
        fresh = [sum(e["fresh"] for e in h["exchanges"].values()) for h in tr.stale.history]
        planned = [sum(e["planned"] for e in h["exchanges"].values()) for h in tr.stale.history]
        out.append({"losses": losses, "params": [p.detach().clone() for p in tr.params], "fresh": fresh,
                    "planned": planned})
    return out


class _View(Halo):
    """Layer-1 rows as one rank sees them (``None``: record them live)."""

    def __init__(self, make) -> None:  # noqa: ANN001
        self.make, self.seen = make, None

    def exchange(self, block: int, layer: int, x: torch.Tensor) -> torch.Tensor:
        if layer == 0:  # raw features: loaded once, never stale
            return x
        self.seen = x
        return x if self.make is None else self.make(x)


class _Emulation(FusedTrainer):
    """One process; rank r's owned nodes computed from the layer-1 rows r would see."""

    def __init__(self, *args, owner: torch.Tensor, plan: CommunicationPlan, factor, scope: str, backward: str,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        ex = plan.exchange(0, "spatial:1")
        self.owner, self.factor, self.scope, self.backward = owner, factor, scope, backward
        # per sender: its send buffer (gids grouped by destination) and the destination of each row
        self.send = {}
        for s in range(R):
            gids, splits = ex.send_list(s)
            dest = torch.repeat_interleave(torch.arange(R), torch.tensor(splits, dtype=torch.long))
            self.send[s] = (gids, dest)
        self.sent = {s: None for s in range(R)}  # last transmitted copy of each buffer row
        self.cache = {r: None for r in range(R)}  # [N, w] rows as receiver r holds them
        self.losses: list = []

    def train_epoch(self) -> float:
        loss = super().train_epoch()
        self.losses.append(loss)
        return loss

    def _masks(self, x1: torch.Tensor) -> dict:
        """Per receiver: the halo gids it gets fresh this epoch, and all halo gids it gets."""
        N = x1.shape[0]
        flat = x1.detach().reshape(N, -1)
        first = self.sent[0] is None
        D = {}
        for s, (gids, _) in self.send.items():
            if first or gids.numel() == 0:
                D[s] = 0.0
            else:
                D[s] = float((flat[gids] - self.sent[s]).norm(dim=1).max())
        if self.scope == "global":
            D = {s: max(D.values()) for s in D}
        L = self.losses
        progress = 0.0 if len(L) < 1 or L[0] == 0 else (L[0] - L[-1]) / L[0]
        out = {r: ([], []) for r in range(R)}
        for s, (gids, dest) in self.send.items():
            if first:
                fresh = torch.ones(gids.numel(), dtype=torch.bool)
            elif not callable(self.factor):  # drift: an error budget per sender and receiver
                d = (flat[gids] - self.sent[s]).norm(dim=1)
                fresh = torch.ones(gids.numel(), dtype=torch.bool)
                for r in range(R):
                    rows = (dest == r).nonzero().flatten().tolist()
                    budget = (self.factor * flat[gids[rows]].norm()) ** 2 if rows else 0.0
                    spent = 0.0
                    for i in sorted(rows, key=lambda i: (float(d[i]), i)):  # least drifted first
                        if spent + float(d[i]) ** 2 > budget:
                            break
                        spent += float(d[i]) ** 2
                        fresh[i] = False
            else:
                theta = self.factor(progress) * D[s]
                d = (flat[gids] - self.sent[s]).norm(dim=1)
                fresh = d > theta if theta > 0 else torch.ones(gids.numel(), dtype=torch.bool)
            prev = self.sent[s] if self.sent[s] is not None else flat[gids].clone()
            self.sent[s] = torch.where(fresh.unsqueeze(1), flat[gids], prev)
            for r in range(R):
                sel = dest == r
                out[r][0].append(gids[sel & fresh])
                out[r][1].append(gids[sel])
        return {r: (torch.cat(f), torch.cat(a)) for r, (f, a) in out.items()}

    def outputs(self) -> torch.Tensor:
        g: FusedGraph = self.graph
        x = g.x.to(self._params_dtype())
        rec = _View(None)
        z_live = self.model.structure_encoder(g, x, block=0, halo=rec)
        if not torch.is_grad_enabled():  # evaluation and prediction stay exact
            return self.model.time_encoder(z_live, g, None, block=0)
        masks = self._masks(rec.seen)
        z = None
        for r in range(R):
            fresh, halo = masks[r]
            N = rec.seen.shape[0]
            if self.cache[r] is None:
                self.cache[r] = rec.seen.detach().clone()
            cached = self.cache[r]
            stale = torch.zeros(N, dtype=torch.bool)
            stale[halo] = True
            stale[fresh] = False

            def make(x1, stale=stale, cached=cached):  # noqa: ANN001
                keep = stale.view((-1,) + (1,) * (x1.dim() - 1))
                if self.backward == "skip":  # cached rows are constants
                    return torch.where(keep, cached, x1)
                return torch.where(keep, x1 + (cached - x1).detach(), x1)  # cached values, live gradients

            view = _View(make)
            zr = self.model.structure_encoder(g, x, block=0, halo=view)
            self.cache[r] = torch.where(stale.view((-1,) + (1,) * (cached.dim() - 1)), cached, rec.seen.detach())
            z = zr if z is None else torch.where((self.owner == r).unsqueeze(1), zr, z)
        return self.model.time_encoder(z, g, None, block=0)


def _emulate(policy: str, scope: str, backward: str) -> dict:
    sig = cases.signal()
    m, head, loss = cases.model(NAME)
    part = cases.make_partition(sig, SCHEME, R, m.dependency_pattern(8))
    plan = CommunicationPlan.build(sig, part, m.dependency_pattern(8))
    opt = cases.optimizer_for(NAME)(list(m.parameters()) + list(head.parameters()))
    tr = _Emulation(m, sig, head=head, loss=loss, optimizer=opt, owner=part.owner, plan=plan,
                    factor=FACTORS[policy], scope=scope, backward=backward)
    losses = [tr.train_epoch() for _ in range(EPOCHS)]
    return {"losses": losses, "params": [p.detach() for p in list(m.parameters()) + list(head.parameters())]}


@pytest.fixture(scope="module")
def distributed_runs() -> list:
    return spawn(_distributed, R, timeout=300)


@pytest.mark.parametrize("i", range(len(CONFIGS)), ids=["-".join(c) for c in CONFIGS])
def test_stale_cache_equals_its_single_process_emulation(distributed_runs, i):
    got = distributed_runs[0][i]
    ref = _emulate(*CONFIGS[i])
    torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(ref["losses"]), rtol=1e-10, atol=1e-12)
    for a, b in zip(got["params"], ref["params"]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    # the cache did something: some epoch sent fewer rows than planned
    assert any(f < p for f, p in zip(got["fresh"], got["planned"])), got["fresh"]
    # both ranks report the same global loss
    assert distributed_runs[1][i]["losses"] == got["losses"]
