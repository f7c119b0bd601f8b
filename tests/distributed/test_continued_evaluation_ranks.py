"""DistributedTrainer.evaluate(test, partition) continues each vertex's state
from the training window exactly as FusedTrainer.evaluate(test) does (float64,
2-3 gloo ranks, PTS and PGC, decomposed and black-box paths, h0 on both, link scores);
a zero state at evaluation is another number; the evaluation pass moves what
the joined plan predicts."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import adapt
from pyg_dynscale.partition import DependencyPattern
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import blackbox_cases as bc
from tests.helpers import distributed_cases as cases

pytestmark = pytest.mark.skipif(not bc.HAVE_PYGT, reason="needs torch_geometric_temporal")

#: (model case, scheme): decomposed cases from distributed_cases, "gconvgru" on the black-box path
CONFIGS = [("tgcn1", "pts"), ("tgcn2_h0", "pgc"), ("dysat_link", "pgc"), ("gconvgru", "pts"), ("gconvgru", "pgc"),
           ("gconvlstm_h0", "pts")]


def _case(name: str):
    """(signal, model, head, loss, h0, pattern)."""
    if name in ("gconvgru", "gconvlstm_h0"):
        sig = bc.signal("plain", seed=9)
        m, head = bc.cell("GConvGRU" if name == "gconvgru" else "GConvLSTM")
        h0 = None
        if name.endswith("_h0"):  # (h, c) of every training sequence
            S = sig.split(0.5)[0].supergraph().sequence_ptr.numel() - 1
            g = torch.Generator().manual_seed(4)
            h0 = tuple(torch.randn(S, bc.H, generator=g, dtype=torch.float64) for _ in range(2))
        return sig, m, head, "mse", h0, DependencyPattern.preset("tgcn", bc.F, bc.H)
    sig = cases.signal()
    m, head, loss = cases.model(name)
    train = sig.split(0.5)[0]
    return sig, m, head, loss, cases.initial_state(name, train), adapt(m, check=False).dependency_pattern(8)


def _run(rank: int, world: int) -> list:
    from pyg_dynscale.partition import partition

    out = []
    for name, scheme in CONFIGS:
        sig, m, head, loss, h0, pattern = _case(name)
        train, test = sig.split(0.5)
        part = partition(train, scheme, world, pattern, seed=0)
        tpart = partition(test, scheme, world, pattern, seed=0)
        tr = DistributedTrainer(m, train, part, head=head, loss=loss, h0=h0, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
        for _ in range(2):
            tr.train_epoch()
        res = {"cont": tr.evaluate(test, tpart)["loss"]}
        t = tr._later_window(test, tpart, True).trainer.traffic()  # of the evaluation pass just run
        res["fwd"] = [(e["measured_forward"], e["predicted_forward"]) for e in t["exchanges"]]
        res["temporal"] = t["measured"]["temporal"]
        res["zero"] = tr.evaluate(test, tpart, continue_state=False)["loss"]
        res["pred"] = tr.predict(test, tpart)
        if loss == "bce_link":
            logits, labels = tr.link_scores(test, tpart)
            everyone = [None] * world
            torch.distributed.all_gather_object(everyone, (logits.tolist(), labels.tolist()))
            res["scores"] = sorted(sum((e[0] for e in everyone), []))
        # the single-process reference, with the parameters this rank trained
        ref = FusedTrainer(m, train, head=head, loss=loss, h0=h0)
        res["ref"] = ref.evaluate(test)["loss"]
        res["own"], res["ref_own"] = tr.evaluate()["loss"], ref.evaluate()["loss"]  # the training window, from h0
        res["ref_zero"] = ref.evaluate(test, continue_state=False)["loss"]
        res["ref_pred"] = ref.predict(test)
        if loss == "bce_link":
            fe, first, _ = ref._evaluator(test, True)
            with torch.no_grad():
                lg = fe.link_logits(fe.outputs())
            res["ref_scores"] = sorted(lg[fe.label_time >= first].tolist())
            res["num_test_pairs"] = int(test.fields["edge_label"].values.numel())
        out.append(res)
    try:  # every rank refuses a later window without its partition, before any collective
        tr.evaluate(test)
        refused = None
    except ModelInputError as exc:
        refused = str(exc)
    return out, refused


@pytest.mark.parametrize("R", [2, 3])
def test_distributed_continued_evaluation_equals_fused(R):
    results, refused = zip(*spawn(_run, R, timeout=240))
    assert all(r is not None and "partition" in r for r in refused), refused
    for i, (name, scheme) in enumerate(CONFIGS):
        tag = f"{name}/{scheme}/R={R}"
        r = results[0][i]
        for other in results[1:]:
            assert other[i]["cont"] == r["cont"], tag
        assert abs(r["cont"] - r["ref"]) <= 1e-9, (tag, r["cont"], r["ref"])
        assert abs(r["own"] - r["ref_own"]) <= 1e-9, (tag, r["own"], r["ref_own"])
        assert abs(r["zero"] - r["ref_zero"]) <= 1e-9, (tag, r["zero"], r["ref_zero"])
        assert abs(r["cont"] - r["zero"]) > 1e-6, f"{tag}: the continued state changed nothing"
        assert float((r["pred"] - r["ref_pred"]).abs().max()) <= 1e-9, tag
        assert all(a == b for a, b in r["fwd"]), (tag, r["fwd"])
        if "scores" in r:
            assert len(r["scores"]) == r["num_test_pairs"], tag
            assert max(abs(a - b) for a, b in zip(r["scores"], r["ref_scores"])) <= 1e-9, tag
