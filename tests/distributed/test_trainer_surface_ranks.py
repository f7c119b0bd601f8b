"""DistributedTrainer on the one trainer surface across 2 gloo ranks (float64):

* the state round trip: every rank saves its own ``state_dict()`` after 2
  epochs; trainers rebuilt from the same arguments (other initial weights,
  other global random states) and loaded continue bit for bit -- with Adam,
  with dropout in the head (each rank's generator) and with the stale cache
  (its cached rows and loss history);
* ``evaluate()`` equals ``FusedTrainer.evaluate()`` key by key (mse/mae; for the
  link loss its loss, and every rank's pair scores to 1e-10 with its auc/ap those of
  the ranks' own scores: tie-prone statistics are never compared across computations);
* ``traffic()``: a TrafficReport, measured == predicted, and the gradient
  all-reduce's bytes as counted where it is issued (flat buffer + flags, per
  rank).
"""
from __future__ import annotations

import copy

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.training import Metrics, TrafficReport
from tests.helpers import distributed_cases as cases


def _build(init: int, stale, world_size: int, dropout: float = 0.5):
    from pyg_dynscale.nn import TGCN

    sig = cases.signal()
    torch.manual_seed(init)
    m = TGCN(cases.F, 4).double()
    head = torch.nn.Sequential(torch.nn.Dropout(dropout), torch.nn.Linear(4, 1)).double()
    part = cases.make_partition(sig, "pss", world_size, m.dependency_pattern(8))
    return DistributedTrainer(m, sig, part, head=head, loss="mse", stale=stale)


def _round_trip_worker(rank: int, world_size: int, stale) -> dict:
    a = _build(0, stale, world_size)
    for _ in range(2):
        a.train_epoch()
    state = copy.deepcopy(a.state_dict())
    want = [a.train_epoch() for _ in range(3)]
    want_params = [p.detach().clone() for p in a.params]
    want_eval = a.evaluate()
    a.close()
    torch.manual_seed(100 + rank)  # another global random state on each rank
    with _build(7, stale, world_size) as b:
        b.load_state_dict(state)
        epoch = b.epoch
        got = [b.train_epoch() for _ in range(3)]
        same_params = all(torch.equal(p, q) for p, q in zip(b.params, want_params))
        got_eval = b.evaluate()
        stale_epoch = b.stale.epoch if b.stale is not None else None
    # the mutation: a load followed by other draws (dropout) continues otherwise
    with _build(7, stale, world_size) as c:
        c.load_state_dict(state)
        torch.manual_seed(5)
        other = [c.train_epoch() for _ in range(3)]
    return {"epoch": epoch, "want": want, "got": got, "same_params": same_params, "evals": (want_eval, got_eval),
            "stale_epoch": stale_epoch, "stale_rows": stale is not None and any(k.endswith("/sent") for k in
                                                                                state["stale"]),
            "other": other}


@pytest.mark.parametrize("stale", [None, "static:0.5"])
def test_a_rebuilt_trainer_continues_bit_for_bit(stale):
    for r in spawn(_round_trip_worker, 2, stale, timeout=180):
        assert r["epoch"] == 2
        assert r["got"] == r["want"]
        assert r["same_params"]
        assert r["evals"][0] == r["evals"][1]
        assert r["other"] != r["want"]
        if stale is not None:
            assert r["stale_rows"] and r["stale_epoch"] == 5  # the cache was saved and continued


def _metrics_worker(rank: int, world_size: int, name: str) -> dict:
    sig = cases.signal()
    train, test = sig[:4], sig[4:]
    m, head, loss = cases.model(name)
    pattern = m.dependency_pattern(8)
    part = cases.make_partition(train, "pgc", world_size, pattern)
    tr = DistributedTrainer(m, train, part, head=head, loss=loss, optimizer=cases.optimizer_for(name))
    tr.train_epoch()
    out = {"own": tr.evaluate(), "traffic": tr.traffic(), "params": [(p.numel(), p.element_size()) for p in tr.params]}
    tpart = cases.make_partition(test, "pgc", world_size, pattern)
    out["later"] = tr.evaluate(test, tpart)
    if loss == "bce_link":  # this rank's pairs' logits and labels (each pair on one rank), for the scores
        out["scores"] = {"own": tr.link_scores(), "later": tr.link_scores(test, tpart)}
    return out


def _fused_scores(ref, test) -> dict:
    """FusedTrainer ``ref``'s eval-mode logits and labels of the training window's pairs and of ``test``'s (the
    state continued, the joined signal's training pairs left out), as its evaluate() scores them."""
    from pyg_dynscale.runtime.fused import eval_mode

    ev, first, _ = ref._evaluator(test, True)
    with torch.no_grad(), eval_mode(ref.model, ref.head):
        own = ref.link_logits(ref.outputs())
    with torch.no_grad(), eval_mode(ev.model, ev.head):
        later = ev.link_logits(ev.outputs())
    keep = ev.label_time >= first
    return {"own": (own, ref.label), "later": (later[keep], ev.label[keep])}


def _by_label(logits, labels) -> tuple:
    """The positives' and the negatives' logits, each sorted: two computations of the same pairs compare
    value by value whatever order their ranks hold the pairs in."""
    labels = labels.to(logits.dtype)
    return tuple(torch.sort(logits[labels == y]).values for y in (1.0, 0.0))


@pytest.mark.parametrize("name", ["tgcn2", "dysat_link"])
def test_evaluate_and_traffic_on_two_ranks(name):
    """evaluate() of the training signal and of a later window (the state
    continued; for the link loss, auc/ap of the window's pairs over both
    ranks) equals FusedTrainer's, key by key."""
    from pyg_dynscale.runtime import FusedTrainer

    results = spawn(_metrics_worker, 2, name, timeout=180)
    sig = cases.signal()
    train, test = sig[:4], sig[4:]
    m, head, loss = cases.model(name)
    ref = FusedTrainer(m, train, head=head, loss=loss, optimizer=cases.optimizer_for(name))
    ref.train_epoch()
    want = {"own": ref.evaluate(), "later": ref.evaluate(test)}
    assert set(want["own"]) == ({"loss", "bce_link", "auc", "ap"} if loss == "bce_link" else {"loss", "mse", "mae"})
    assert want["own"] != want["later"]
    tied = {"auc", "ap"}  # step functions of the scores (an ulp can make or break a tie): scored once, below
    if loss == "bce_link":
        from pyg_dynscale.runtime.metrics import average_precision, roc_auc

        ref_scores = _fused_scores(ref, test)
        for which in ("own", "later"):
            logits, labels = (torch.cat([r["scores"][which][i] for r in results]) for i in (0, 1))
            for a, b in zip(_by_label(logits, labels), _by_label(*ref_scores[which])):
                assert a.numel() > 0
                torch.testing.assert_close(a, b, atol=1e-10, rtol=0)  # the same scores to rounding
            # the ranks' auc / ap are those of their own scores, the reference's those of its own
            got = results[0][which]
            assert got["auc"] == pytest.approx(roc_auc(logits, labels), abs=1e-12), which
            assert got["ap"] == pytest.approx(average_precision(logits, labels), abs=1e-12), which
            assert want[which]["auc"] == pytest.approx(roc_auc(*ref_scores[which]), abs=1e-12), which
    for r in results:
        for which in ("own", "later"):
            got = r[which]
            assert isinstance(got, Metrics) and got.keys() == want[which].keys(), which
            for k in got.keys() - tied:
                assert got[k] == pytest.approx(want[which][k], abs=1e-10), (which, k)
            assert got == results[0][which]  # the same on every rank
        t = r["traffic"]
        assert isinstance(t, TrafficReport)
        assert t["measured"]["total"] == t["predicted"]["total"] > 0
        # the flat all-reduce of the gradients: sum |p| elements of the dtype plus one int32 flag per parameter, per rank
        per_rank = sum(n * size + 4 for n, size in r["params"])
        assert t["measured"]["grad_sync"] == 2 * per_rank
