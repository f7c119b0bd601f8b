"""``pyg-dynscale partition ... --shards DIR`` and ``train --shards DIR`` with the model options ``train PATH``
takes: a black-box model (the user's ``--model PATH.py:Name``, or a zoo cell) gets black-box shards, and
training them reaches what the Python API reaches on the whole signal with the same model, partition and seed
(float64); a shard set trained with another model, a missing rank directory or another world size is one line
naming the CLI options, before any process starts.

One 2-process job (the suite's time budget); everything else runs in this process.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest
import torch

from pyg_dynscale.cli import build_parser, main
from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.distributed.shards import read_meta
from tests.helpers.cli_jobs import ROOT, report_of, run_cli
from tests.helpers.user_models import DYNSCALE_RECURRENT_GCN

DATA = str(ROOT / "tests" / "fixtures" / "datasets" / "pygt" / "chickenpox.json")
EPOCHS = 3
HAVE_PYGT = importlib.util.find_spec("torch_geometric_temporal") is not None

MODEL = DYNSCALE_RECURRENT_GCN  # black-box path, without PyGT


def _spec(tmp_path) -> str:
    path = tmp_path / "shard_model.py"
    path.write_text(MODEL)
    return f"{path}:RecurrentGCN"


def _partition(capsys, *args: str) -> dict:
    """``pyg-dynscale partition`` in this process (no training: cheap); its JSON report."""
    capsys.readouterr()
    assert main(["partition", DATA, "--parts", "2", "--json", *args]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _whole(rank: int, world_size: int, spec: str, part_file: str) -> dict:
    """What a Python script gets: the user's model built as train builds it, on the whole signal, the saved
    partition, DistributedTrainer (the whole-signal black-box path)."""
    from pyg_dynscale.commands.user_model import build_user_model, load_user_model
    from pyg_dynscale.data.loaders import load
    from pyg_dynscale.partition import load_partition

    sig = load(DATA)
    model, head, _ = build_user_model(load_user_model(spec), sig, seed=0, dtype=torch.float64)
    tr = DistributedTrainer(model, sig, load_partition(part_file, sig), head=head, loss="mse", lr=0.01)
    losses = [tr.train_epoch() for _ in range(EPOCHS)]
    return {"losses": losses, "path": tr.path, "head": head is None, "predicted": tr.traffic()["predicted"]}


def test_user_model_blackbox_shards_train_equal_whole_signal(tmp_path, capsys):
    """partition --model PATH.py:Name --shards writes black-box shards; train --shards with the same options on
    2 processes == DistributedTrainer on the whole signal (float64, bitwise losses), measured bytes == the
    plan's == the whole-signal trainer's prediction, and state rows cross ranks. Red if train built the model
    otherwise (seed, head, dtype), if partition cut decomposed shards, or if a rank read another part."""
    spec, shards, part = _spec(tmp_path), str(tmp_path / "shards"), str(tmp_path / "part.pt")
    rep = _partition(capsys, "--scheme", "pts", "--model", spec, "--dtype", "float64", "--out", part,
                     "--shards", shards)
    assert rep["runtime_path"] == "blackbox" and rep["model_class"].endswith(":RecurrentGCN")
    meta = read_meta(shards)
    assert meta["path"] == "blackbox" and meta["model"] == "RecurrentGCN" and meta["bytes_per_element"] == 8
    run = report_of(run_cli(["train", "--shards", shards, "--model", spec, "--dtype", "float64", "--nproc", "2",
                             "--epochs", str(EPOCHS), "--device", "cpu", "--json", "--no-progress"]))
    ref = spawn(_whole, 2, spec, part, timeout=240)[0]
    assert run["runtime_path"] == ref["path"] == "blackbox" and run["head"] is None and ref["head"]
    assert run["losses"] == ref["losses"], (run["losses"], ref["losses"])
    m, p = run["bytes_measured"], run["bytes_predicted"]
    assert m["total"] == p["total"] and m["spatial"] == p["spatial"] and m["temporal"] == p["temporal"]
    assert p["total"][-1] == ref["predicted"]["total"] and m["spatial"][-1] > 0  # PTS: halo state rows move
    assert all(p[k][-1] == v for k, v in rep["shard_bytes_predicted"].items()), (p, rep["shard_bytes_predicted"])
    assert 0 < run["shard_bytes_read"]


def test_train_shards_wrong_model_or_set_is_one_line(tmp_path, capsys):
    """Shards trained with another model (path, pattern, module signature, dtype), a missing rank
    directory, another world size: exit 2 and one line naming the CLI options, before any process starts
    (in this process: train's launcher checks). Red if a check is dropped (the launcher would start the
    ranks) or its line loses the option."""
    spec = _spec(tmp_path)
    bb, dec = str(tmp_path / "bb"), str(tmp_path / "dec")
    _partition(capsys, "--scheme", "pts", "--model", spec, "--dtype", "float64", "--shards", bb)
    rep = _partition(capsys, "--scheme", "pss", "--model", "tgcn", "--hidden", "8", "--shards", dec)
    assert rep["runtime_path"] == "decomposed" and "path" not in read_meta(dec)  # decomposed sets carry no path tag
    lost = str(tmp_path / "lost")
    shutil.copytree(bb, lost)
    shutil.rmtree(os.path.join(lost, "rank-1"))
    user = ["--model", spec, "--dtype", "float64"]
    cases = {
        "zoo model, black-box shards": (["--shards", bb, "--model", "tgcn"], ["black-box shards", "--model tgcn"]),
        "dtype": (["--shards", bb, "--model", spec], ["bytes_per_element", "--dtype float32"]),
        "model args": (["--shards", bb, *user, "--model-args", '{"hidden": 4}'], ["widths", "--model-args"]),
        "hidden": (["--shards", dec, "--hidden", "16"], ["dependency pattern", "--hidden 16"]),
        "black-box zoo, decomposed shards": (["--shards", dec, "--model", "gconvgru", "--hidden", "8"],
                                             ["decomposed-path shards", "--model gconvgru"]),
        "user model, decomposed shards": (["--shards", dec, *user], ["decomposed-path shards", "--model"]),
        "missing rank": (["--shards", lost, *user], ["rank-1/shard.pt is missing", "--parts 2"]),
        "world": (["--shards", bb, *user, "--nproc", "3"], ["holds 2 parts but --nproc 3"]),
        "hidden with user model": (["--shards", bb, *user, "--hidden", "8"], ["--hidden 8", "--model-args"]),
        "scheme": (["--shards", bb, *user, "--scheme", "pss"], ["--scheme with --shards", "--scheme S"]),
        "train ratio": (["--shards", bb, *user, "--train-ratio", "0.5"], ["--train-ratio with --shards"]),
    }
    for name, (args, words) in cases.items():
        capsys.readouterr()
        assert main(["train", *args, "--epochs", "1", "--no-progress", "--device", "cpu"]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and all(w in err[0] for w in words) and "Traceback" not in err[0], (name, err)
    partition_cases = {
        "model args, zoo": (["--model", "tgcn", "--model-args", "{}", "--shards", str(tmp_path / "x")],
                            "--model-args"),
        "hidden with user model": (["--model", spec, "--hidden", "8", "--shards", str(tmp_path / "x")], "--hidden 8"),
        "preset options with a train model": (["--model", spec, "--blocks", "2"], "--blocks and --gcn-layers"),
    }
    for name, (args, why) in partition_cases.items():
        capsys.readouterr()
        assert main(["partition", DATA, "--parts", "2", *args]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and why in err[0], (name, err)


@pytest.mark.skipif(not HAVE_PYGT, reason="needs torch-geometric-temporal")
def test_zoo_blackbox_model_gets_blackbox_shards(tmp_path, capsys):
    """--model gconvgru --shards: black-box shards of PyGT's cell (its class, state width = --hidden), which
    train's checks accept for the same options and refuse for another --hidden. Red if the zoo's black-box
    models still got decomposed shards."""
    from pyg_dynscale.commands.train_shards import check_shard_args

    d = str(tmp_path / "gru")
    rep = _partition(capsys, "--scheme", "pts", "--model", "gconvgru", "--hidden", "6", "--shards", d)
    meta = read_meta(d)
    assert rep["runtime_path"] == "blackbox" and meta["path"] == "blackbox"
    assert meta["model"] == "GConvGRU" and meta["widths"] == [6]
    args = build_parser().parse_args(["train", "--shards", d, "--model", "gconvgru", "--hidden", "6"])
    check_shard_args(args)  # passes: the model fits
    capsys.readouterr()
    assert main(["train", "--shards", d, "--model", "gconvgru", "--hidden", "7", "--epochs", "1"]) == 2
    assert "widths" in capsys.readouterr().err


def test_user_decomposed_model_shards_build_the_model_of_the_data(tmp_path, capsys):
    """Your own model on the decomposed path (pyg_dynscale.nn:TGCN, 8 outputs) gets decomposed-path shards
    whose pattern is its own; train --shards builds it from meta.json alone with the parameters and head
    (ReLU + Linear(8, 1)) that build_user_model gives on the whole signal, bitwise. Red if the stand-in of the
    data had another feature count or target width (another head), or the seed were not --seed."""
    from pyg_dynscale.commands.train_shards import build_shard_model, check_shard_args
    from pyg_dynscale.commands.user_model import build_user_model, load_user_model
    from pyg_dynscale.data.loaders import load

    d, margs = str(tmp_path / "dec-user"), '{"out_channels": 8}'
    rep = _partition(capsys, "--scheme", "pss", "--model", "pyg_dynscale.nn:TGCN", "--model-args", margs,
                     "--dtype", "float64", "--seed", "3", "--shards", d)
    assert rep["runtime_path"] == "decomposed" and rep["model_class"] == "pyg_dynscale.nn.tgcn:TGCN"
    args = build_parser().parse_args(["train", "--shards", d, "--model", "pyg_dynscale.nn:TGCN", "--model-args",
                                      margs, "--dtype", "float64", "--seed", "3"])
    check_shard_args(args)
    model, head, loss = build_shard_model(args, read_meta(d), 1)
    ref, ref_head, _ = build_user_model(load_user_model("pyg_dynscale.nn:TGCN", margs), load(DATA), seed=3,
                                        dtype=torch.float64)
    assert loss == "mse" and head is not None and head[1].out_features == 1 and head[1].in_features == 8
    mine = list(model.parameters()) + list(head.parameters())
    theirs = list(ref.parameters()) + list(ref_head.parameters())
    assert all(a.dtype == torch.float64 and torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
