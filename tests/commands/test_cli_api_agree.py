"""``pyg-dynscale train`` says what the API means (issue 38, item 1): the options left unset are the trainers'
defaults (read from their signatures, not repeated), ``train --lags L`` trains what ``WindowTrainer`` with its
defaults trains (``--blocks`` and ``--feature-lags`` the CLI's stated exceptions), ``--windows`` is ``--lags``, the
loader's feature lags are ``--feature-lags`` (1 with ``--lags``) and the report states the raw steps one input
window covers. In-process runs (``cli.main``): no process starts."""
from __future__ import annotations

import inspect
import json
import math

import pytest
import torch


def _parsed(*argv: str):
    from pyg_dynscale.cli import build_parser
    from pyg_dynscale.commands.train_checks import check_args

    args = build_parser().parse_args(["train", "england_covid", *argv])
    check_args(args)
    return args


def _default(owner, name):
    return inspect.signature(owner).parameters[name].default


def test_unset_options_are_the_api_defaults() -> None:
    from pyg_dynscale.commands.train_options import window_ratio
    from pyg_dynscale.data import DynamicGraphSignal
    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.windows import WindowTrainer

    full = _parsed()
    assert full.lr == _default(DistributedTrainer, "lr") and full.train_ratio == _default(DynamicGraphSignal.split,
                                                                                            "train_ratio")
    assert full.batch_size is None and full.blocks is None and full.val_ratio is None  # windowed training's only
    win = _parsed("--lags", "4")
    assert win.lr == _default(WindowTrainer, "lr") and win.batch_size == _default(WindowTrainer, "batch_size")
    assert (win.horizon, win.stride) == (_default(WindowTrainer, "horizon"), _default(WindowTrainer, "stride"))
    # the split: the API's ratio, the test windows the rest (compared as numbers: 1 - 0.7 - 0.1 is 0.2 + 4e-17)
    assert all(math.isclose(a, b, abs_tol=1e-12) for a, b in zip(window_ratio(win), _default(WindowTrainer, "ratio")))
    assert win.placement == "blocks" and win.blocks == 8 and win.feature_lags is None  # the CLI's own two
    # what the user sets is kept
    given = _parsed("--lags", "4", "--lr", "0.5", "--train-ratio", "0.5", "--val-ratio", "0", "--batch-size", "16",
                    "--blocks", "2")
    assert (given.lr, given.train_ratio, given.val_ratio, given.batch_size, given.blocks) == (0.5, 0.5, 0.0, 16, 2)


def test_windows_is_lags() -> None:
    a, b = _parsed("--windows", "4"), _parsed("--lags", "4")
    assert vars(a) == vars(b) and a.windows == 4


@pytest.fixture(scope="module")
def one_epoch() -> dict:
    """``train england_covid --lags 4`` with nothing else that shapes the training: one process, float64."""
    from pyg_dynscale.cli import main

    torch.set_num_threads(1)
    out = _run(main, ["--lags", "4", "--epochs", "2", "--hidden", "4", "--dtype", "float64", "--json"])
    return json.loads(out)


def _run(main, argv: list) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["train", "england_covid", *argv, "--no-progress"]) == 0
    return buf.getvalue()


def test_the_command_trains_what_the_trainer_trains_by_default(one_epoch) -> None:
    """The same losses (float64, rel 1e-12: one process, the same operations) as WindowTrainer with its defaults,
    given only the CLI's stated choices: blocks=8 and a signal of one feature lag."""
    from pyg_dynscale.data.loaders import load
    from pyg_dynscale.nn.zoo import build_model
    from pyg_dynscale.windows import WindowTrainer

    sig = load("england_covid", format="pygt-json", feature_lags=1)
    torch.manual_seed(0)  # --seed's default
    model, head, _ = build_model("tgcn", sig.num_node_features, 4, num_snapshots=sig.num_snapshots,
                                 num_vertices=sig.num_vertices)
    tr = WindowTrainer(model.double(), sig, lags=4, head=head.double(), blocks=8)
    losses = [tr.train_epoch() for _ in range(2)]
    r = one_epoch
    assert r["optimizer"] == "adam" and r["lr"] == tr.lr and r["loss"] == tr.loss_kind
    w = r["windows"]
    assert (w["train"], w["val"], w["test"]) == tuple(int(tr.view.split(s).numel()) for s in ("train", "val", "test"))
    assert w["batch_size"] == tr.batch_size and w["blocks"] == tr.blocks == 8
    for a, b in zip(r["losses"] + r["batch_losses"], losses + tr.batch_losses):
        assert math.isclose(a, b, rel_tol=1e-12), (a, b)
    test, val = tr.evaluate("test"), tr.evaluate("val")
    assert math.isclose(r["test_metrics"]["mse"], test["mse"], rel_tol=1e-12)
    assert math.isclose(r["val_metrics"]["mse"], val["mse"], rel_tol=1e-12)


def test_one_feature_lag_by_default_and_the_effective_window(one_epoch, capsys) -> None:
    from pyg_dynscale.cli import main
    from pyg_dynscale.data.loaders import load

    w = one_epoch["windows"]
    assert (w["lags"], w["feature_lags"], w["raw_steps"], w["horizon"]) == (4, 1, 4, 1)
    # the features held are one column per vertex-time node (PyGT's default 8 lags would be 8 columns)
    nodes = load("england_covid", format="pygt-json", feature_lags=1).num_vertex_time_nodes
    assert one_epoch["held_feature_bytes"] == [nodes * 1 * 8]
    text = _run(main, ["--lags", "4", "--feature-lags", "3", "--horizon", "2", "--epochs", "1", "--hidden", "4"])
    # snapshot i stacks raw steps i..i+2; a window of 4 snapshots reads 3 + 4 - 1 = 6 raw steps
    assert "each input        6 raw steps (--feature-lags 3 + --lags 4 - 1), predicts the next 2 step(s)" in text
    assert "batch 64 in 8 blocks" in text


def test_feature_lags_reach_the_loader_in_full_batch_training(capsys) -> None:
    from pyg_dynscale.cli import main

    out = json.loads(_run(main, ["--feature-lags", "3", "--epochs", "1", "--hidden", "4", "--json"]))
    # england_covid has 61 days: 61 - 3 snapshots (PyGT's default 8 lags would leave 53)
    assert out["snapshots"]["train"] + out["snapshots"]["test"] == 58


@pytest.mark.parametrize("argv,message", [
    (["--feature-lags", "0"], "--feature-lags must be >= 1, got 0."),
    (["--lags", "4", "--feature-lags", "61"], "--feature-lags 61: is 61 but the file has only 61 time steps"),
])
def test_bad_feature_lags_is_one_line(argv, message, capsys) -> None:
    from pyg_dynscale.cli import main

    assert main(["train", "england_covid", *argv, "--epochs", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0], err


def test_feature_lags_refused_for_data_that_is_not_pygt_json(tmp_path, capsys) -> None:
    from pyg_dynscale.cli import main
    from pyg_dynscale.data.loaders import load

    path = str(tmp_path / "covid.pt")
    load("england_covid", format="pygt-json", feature_lags=2).save(path)
    for argv in (["--lags", "4"], []):
        assert main(["train", path, *argv, "--feature-lags", "2", "--epochs", "1", "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--feature-lags applies to PyGT JSON datasets only: drop it" in err[0], err
