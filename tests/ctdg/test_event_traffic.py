"""Measured bytes are the bytes handed to the collectives, not the prediction recomputed.

One process plays rank 0 of 2 against a fake ``torch.distributed`` (every collective recorded with the bytes
of the buffer it was handed, less the block a rank sends itself; the peer mirrors rank 0: it asks as many
rows of rank 0 as rank 0 asks of it). The :class:`~pyg_dynscale.training.ByteLedger` the exchanges write,
and the trainer's report built from it (:class:`~pyg_dynscale.ctdg.event_traffic.EventTraffic`), must equal
what the fake collectives received, kind by kind; and when the buffers grow without the id lists changing
(a padded row format: what a transport bug would send), measured grows with them while the prediction does
not -- a report whose ``measured`` were its ``predicted`` fails here.

The same through ``MemoryTrainer.traffic()`` on 2 gloo ranks (issue 38, item 4a): every byte a rank hands to
a collective in the last epoch, counted by the test's own wrappers around ``torch.distributed``
(:class:`~tests.helpers.collective_bytes.HandedBytes`), is the report's ``measured`` for its kind, for the
replicated memory (the write-back's all-gathers, DDP's gradients) and Sven's (dispatch, requests,
aggregation, counts, events, neighbours, mailbox); with padded rows ``measured`` follows the collectives and
leaves ``predicted`` -- a ``traffic()`` whose ``measured`` were its ``predicted`` fails here.
"""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, memory_placement, parallel, synthetic_events
from pyg_dynscale.ctdg.event_traffic import EventTraffic
from pyg_dynscale.ctdg.memory_placement import PartitionedMemory
from pyg_dynscale.ctdg.parallel import gather_rows
from pyg_dynscale.training.launch import spawn
from pyg_dynscale.training.traffic import ByteLedger
from tests.helpers.collective_bytes import HandedBytes

N, D = 12, 3


class FakeDist:
    """The collectives of rank ``0`` of 2, recorded by the dtype of the buffer handed over."""

    def __init__(self, owned_id: int) -> None:
        self.owned_id, self.rank, self.world = owned_id, 0, 2
        self.sent: list = []  # (collective, dtype, bytes that leave the rank)

    def all_to_all_single(self, out, inp, output_split_sizes=None, input_split_sizes=None, group=None):
        row = math.prod(inp.shape[1:])
        own = (input_split_sizes[self.rank] if input_split_sizes is not None else inp.size(0) // self.world) * row
        self.sent.append(("all_to_all", inp.dtype, (inp.numel() - own) * inp.element_size()))
        if output_split_sizes is None:  # the [M] counts: the peer sends this rank what this rank sends it
            out.copy_(inp)
        elif inp.dtype == torch.long:  # ids the peer asks of this rank: one it owns
            out.fill_(self.owned_id)
        else:  # rows: any values
            out.zero_()

    def all_gather(self, outs, x, group=None):
        self.sent.append(("all_gather", x.dtype, x.numel() * x.element_size()))
        outs[0].copy_(x)
        # the peer's view of an [M] per-owner vector is this rank's reversed (the mirror)
        outs[1].copy_(x.flip(0) if x.numel() == self.world else x)

    def all_reduce(self, x, op=None, group=None, async_op=False):
        self.sent.append(("all_reduce", x.dtype, 0))  # the report's sum over ranks: not traffic
        x.mul_(2)  # the peer holds the same figures

    def bytes(self, collective=None) -> int:
        return sum(b for c, _, b in self.sent if collective in (None, c))


@pytest.fixture
def fake(monkeypatch):
    owner = torch.arange(N) % 2  # rank 0 owns the even vertices
    f = FakeDist(owned_id=0)
    for name in ("all_to_all_single", "all_gather", "all_reduce"):
        monkeypatch.setattr(torch.distributed, name, getattr(f, name))
    return f, owner


def _exchanges(owner, dedup: bool, ledger: ByteLedger) -> PartitionedMemory:
    """Two dispatches and one aggregation of rank 0 (one writer) with the fake peer."""
    p = PartitionedMemory(owner, 0, 2, D, torch.float64, torch.device("cpu"), dedup=dedup, ledger=ledger)
    p.fetch(torch.tensor([1, 3, 3, 4, 5, 5, 5, 0]))
    p.fetch(torch.tensor([7, 9, 2, 11, 11]))
    src, dst = torch.tensor([1, 2, 3, 1]), torch.tensor([4, 5, 4, 7])
    n_id = torch.cat([src, dst]).unique()
    rows = torch.randn(n_id.numel(), D, dtype=torch.float64)
    p.aggregate([(src, dst, n_id, rows, torch.arange(n_id.numel()))])
    return p


def _report(p: PartitionedMemory, traffic: EventTraffic):
    traffic.end_epoch([], 0)
    return traffic.report(placement=p, gradient_bytes=0, distributed=False, parallelism=(2, 1, 1), rank=0,
                          world_size=2, group=None, row_width=D * 8 + 16)


@pytest.mark.parametrize("dedup", [False, True])
def test_the_ledger_holds_what_the_collectives_were_handed(fake, dedup):
    f, owner = fake
    traffic = EventTraffic()
    traffic.begin_epoch()
    p = _exchanges(owner, dedup, traffic.collectives)
    exchanged = f.bytes("all_to_all")
    ledger = {k: traffic.collectives[k] for k in ("dispatch", "requests", "aggregation", "counts")}
    assert exchanged > 0 and sum(ledger.values()) == exchanged
    # by kind: the [M] counts (int64, one per exchange), the ids (int64), the rows (packed uint8)
    counts = [b for c, t, b in f.sent if c == "all_to_all" and t == torch.long][0::2]
    assert ledger["counts"] == sum(counts) == 3 * 8  # 3 exchanges, one int64 to the peer each
    rows = sum(b for c, t, b in f.sent if t == torch.uint8)
    assert ledger["dispatch"] + ledger["aggregation"] - (ledger["aggregation"] // p.agg_bytes) * 8 == rows
    report = _report(p, traffic)
    assert report["rank"]["measured"] == {**ledger, "gather": 0, "gradients": 0, "total": exchanged}
    assert report["measured"]["total"] == 2 * exchanged  # both ranks (the peer mirrors this one)
    assert report["measured"] == report["predicted"]  # an honest transport sends what the id lists say


def test_measured_follows_the_buffers_not_the_id_lists(fake, monkeypatch):
    f, owner = fake
    pack = memory_placement._pack
    monkeypatch.setattr(memory_placement, "_pack", lambda *parts: torch.nn.functional.pad(pack(*parts), (0, 4)))
    traffic = EventTraffic()
    traffic.begin_epoch()
    p = _exchanges(owner, True, traffic.collectives)
    report = _report(p, traffic)
    padded_rows = sum(b for c, t, b in f.sent if t == torch.uint8)
    assert padded_rows > 0
    assert report["rank"]["measured"]["total"] == f.bytes("all_to_all")
    grown = padded_rows // (D * 8 + 8 + 4) * 4  # 4 more bytes per row handed over
    assert report["rank"]["measured"]["total"] == report["rank"]["predicted"]["total"] + grown
    assert report["measured"]["dispatch"] > report["predicted"]["dispatch"]


def test_the_write_back_all_gather_counts_its_buffers(fake):
    f, _ = fake
    ledger = ByteLedger()
    n_id = torch.tensor([2, 5, 7])
    rows = torch.randn(3, D, dtype=torch.float64)
    got = gather_rows(object(), 2, n_id, rows, torch.arange(3), D, ledger, rows)
    handed = [b for c, t, b in f.sent if c == "all_gather"]
    assert len(handed) == 3  # counts (not traffic: a size), ids, packed rows
    assert ledger["gather"] == handed[1] + handed[2] == 3 * 8 + 3 * (D * 8 + 8)
    assert torch.equal(got[0][0], n_id) and torch.equal(got[0][1], rows)


#: the modules that issue a MemoryTrainer's exchanges -> the report's kinds of their bytes
ISSUERS = {"pyg_dynscale.ctdg.memory_placement": ("dispatch", "requests", "aggregation", "counts"),
           "pyg_dynscale.ctdg.event_exchange": ("events", "neighbors", "mailbox"),
           "pyg_dynscale.ctdg.parallel": ("gather",),
           "pyg_dynscale.training.gradients": ("gradients",)}
PAD = 8  #: bytes a padded row format adds to every packed row (a multiple of 8: the rows stay aligned)


def _padded(pad: bool):
    """Pad every packed row (the dispatch's, the aggregation's, the replicated write-back's) by ``PAD``
    zero bytes (unpacking reads the leading columns: the numbers stay); returns the undo."""
    saved = memory_placement._pack, parallel.pack_rows
    if pad:
        grow = lambda fn: lambda *parts: torch.nn.functional.pad(fn(*parts), (0, PAD))  # noqa: E731
        memory_placement._pack, parallel.pack_rows = grow(saved[0]), grow(saved[1])

    def undo():
        memory_placement._pack, parallel.pack_rows = saved
    return undo


def _trainer_traffic(placement: str, pad: bool) -> dict:
    d = synthetic_events(240, 20, msg_dim=3, seed=5, burst_length=10)
    d.msg = d.msg.double()
    torch.manual_seed(3)
    model = TGN(d.num_nodes, 3, memory_dim=5, time_dim=3, embedding_dim=4, dropout=0.0).double()
    extra = {} if placement == "replicated" else {"partition": "interval"}
    tr = MemoryTrainer(model, d, batch_size=20, lr=1e-2, parallelism=(2, 1, 1), seed=1, mrr_negatives=0,
                       memory_placement=placement, **extra)
    undo = _padded(pad)
    try:
        tr.train_epoch()
        spy = HandedBytes(ISSUERS)  # the last epoch only: what traffic() reports
        try:
            tr.train_epoch()
        finally:
            spy.close()
        report = tr.traffic()
    finally:
        undo()
    tr.close()
    gathers = spy.calls["pyg_dynscale.ctdg.parallel"]
    return {"report": report, "spied": {m: spy.bytes(m) for m in ISSUERS},
            "sizes": sum(b for _, b in gathers[0::3]),  # gather_rows: counts, ids, rows per write-back
            "steps": len(tr.batch_losses), "event_placement": tr.event_placement}


def _traffic_ranks(rank, world):
    torch.set_num_threads(1)
    return {(p, pad): _trainer_traffic(p, pad) for p in ("replicated", "sven") for pad in (False, True)}


def test_trainer_traffic_is_what_the_collectives_were_handed_on_two_ranks():
    per_rank = spawn(_traffic_ranks, 2, timeout=180)
    for r, runs in enumerate(per_rank):
        for (placement, pad), run in runs.items():
            key = (placement, pad, r)
            mine, spied = run["report"]["rank"], dict(run["spied"])
            measured, predicted = mine["measured"], mine["predicted"]
            # the write-back's [1] row counts are sizes, not traffic (in no kind, measured or predicted)
            spied["pyg_dynscale.ctdg.parallel"] -= run["sizes"]
            assert run["sizes"] == (8 * run["steps"] if placement == "replicated" else 0), key
            # replicated: "aggregation" names the write-back's all-gathers once more ("gather"), not bytes of its own
            alias = {"aggregation"} if placement == "replicated" else set()
            for module, kinds in ISSUERS.items():
                got = sum(measured.get(k, 0) for k in kinds if k not in alias)
                assert got == spied[module], (key, module, measured, spied)
            assert measured["total"] == sum(spied.values()) > 0, key
            assert spied["pyg_dynscale.training.gradients"] > 0, key
            if placement == "replicated":
                assert spied["pyg_dynscale.ctdg.parallel"] > 0 and measured["aggregation"] == measured["gather"]
            else:
                assert run["event_placement"] == "per_rank" and spied["pyg_dynscale.ctdg.event_exchange"] > 0, key
                assert spied["pyg_dynscale.ctdg.memory_placement"] > 0, key
            if not pad:  # an honest transport sends what the id lists say
                assert measured == predicted, key
                continue
            # padded rows: measured follows the buffers handed over, the prediction stays the unpadded one
            honest = runs[(placement, False)]["report"]["rank"]
            assert predicted == honest["predicted"], key
            grown = {k: measured[k] - honest["measured"][k] for k in measured}
            rows = "gather" if placement == "replicated" else "dispatch"
            assert grown[rows] > 0 and grown[rows] % PAD == 0, (key, grown)
            assert measured["total"] > predicted["total"], key
