"""Measured bytes are the bytes handed to the collectives, not the prediction recomputed.

One process plays rank 0 of 2 against a fake ``torch.distributed`` (every collective recorded with the bytes
of the buffer it was handed, less the block a rank sends itself; the peer mirrors rank 0: it asks as many
rows of rank 0 as rank 0 asks of it). The :class:`~pyg_dynscale.training.ByteLedger` the exchanges write,
and the trainer's report built from it (:class:`~pyg_dynscale.ctdg.event_traffic.EventTraffic`), must equal
what the fake collectives received, kind by kind; and when the buffers grow without the id lists changing
(a padded row format: what a transport bug would send), measured grows with them while the prediction does
not -- a report whose ``measured`` were its ``predicted`` fails here.
"""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.ctdg import memory_placement
from pyg_dynscale.ctdg.event_traffic import EventTraffic
from pyg_dynscale.ctdg.memory_placement import PartitionedMemory
from pyg_dynscale.ctdg.parallel import gather_rows
from pyg_dynscale.training.traffic import ByteLedger

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
