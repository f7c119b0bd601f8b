"""Shared pieces of the event-stream tests."""
import torch


class Stream:
    """Runs calls on a random stream of its own: two loops that both draw from torch's global
    generator (negatives, dropout) each get the state they would have alone."""

    def __init__(self, seed):
        torch.manual_seed(seed)
        self.state = torch.get_rng_state()

    def __call__(self, fn, *args):
        torch.set_rng_state(self.state)
        out = fn(*args)
        self.state = torch.get_rng_state()
        return out


def evaluation_scores(trainer, splits=("val", "test")):
    """``({split: metrics}, scores)``: ``trainer.evaluate(split)`` of each split, and every score its link
    predictor made there (``[S]``, on the host) -- AP, AUC and MRR are step functions of the scores, so a
    comparison to rounding compares the scores (a score moved by an ulp can tie with another, or stop
    tying, and move AUC by a pair's weight)."""
    scores, forward = [], trainer.link_pred.forward

    def recorded(*args):
        z = forward(*args)
        scores.append(z.detach().reshape(-1).cpu().clone())
        return z

    trainer.link_pred.forward = recorded
    try:
        metrics = {split: trainer.evaluate(split) for split in splits}
    finally:
        trainer.link_pred.forward = forward
    return metrics, torch.cat(scores)


def assert_metrics_close(got: dict, want: dict, events: int, atol: float = 1e-9) -> None:
    """The evaluation metrics of one split of ``events`` events from two computations whose scores agree
    to rounding only (ranks vs. their emulation): ``loss``, a smooth function of every score, to ``atol``;
    AP, AUC and MRR, step functions of the scores (a score moved by an ulp can make or break a tie), to one
    event's weight ``1 / events`` -- a tie made or broken moves none of them more (AUC by half a pair of a
    batch, AP by one precision term of a batch, MRR by one event's rank). Where the scores can be read,
    compare them instead (:func:`evaluation_scores`)."""
    assert got.keys() == want.keys(), (got, want)
    assert abs(got["loss"] - want["loss"]) <= atol, (got, want)
    for key in got.keys() - {"loss"}:
        if got[key] != got[key] and want[key] != want[key]:  # nan: no MRR negatives
            continue
        assert abs(got[key] - want[key]) <= 1.0 / events, (key, got, want)
