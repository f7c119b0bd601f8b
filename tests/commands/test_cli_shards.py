"""``pyg-dynscale partition ... --shards DIR`` and ``pyg-dynscale train --shards DIR``: the shards the
partition command writes train to the same losses as the whole-signal trainer on the same partition; a
missing, damaged or mismatched shard directory is one line, before or during the launch."""
from __future__ import annotations

import json
import os

import torch

from pyg_dynscale.cli import main
from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.distributed.shards import SHARD_FILE, read_meta
from tests.helpers.cli_jobs import ROOT, report_of, run_cli
from tests.helpers.shard_files import corrupt

DATA = str(ROOT / "tests" / "fixtures" / "datasets" / "pygt" / "chickenpox.json")
EPOCHS = 3


def _whole(rank: int, world_size: int, path: str, part_file: str) -> list:
    """The trainer the train command builds, on the whole signal and the saved partition."""
    from pyg_dynscale.data.loaders import load
    from pyg_dynscale.nn.zoo import build_model
    from pyg_dynscale.partition import load_partition

    sig = load(path)
    torch.manual_seed(0)
    model, head, loss = build_model("tgcn", sig.num_node_features, 8, num_snapshots=sig.num_snapshots,
                                    num_vertices=sig.num_vertices)
    model, head = model.double(), head.double() if head is not None else None
    tr = DistributedTrainer(model, sig, load_partition(part_file, sig), head=head, loss=loss, lr=0.01)
    return [tr.train_epoch() for _ in range(EPOCHS)]


def test_partition_shards_then_train_equals_whole_signal(tmp_path):
    shards, part_file = str(tmp_path / "shards"), str(tmp_path / "part.pt")
    rep = report_of(run_cli(["partition", DATA, "--parts", "2", "--scheme", "pss", "--hidden", "8",
                             "--dtype", "float64", "--out", part_file, "--shards", shards, "--json"]))
    assert rep["shards"] == shards and read_meta(shards)["world_size"] == 2
    assert sorted(os.listdir(shards)) == ["meta.json", "rank-0", "rank-1"]
    run = report_of(run_cli(["train", "--shards", shards, "--nproc", "2", "--epochs", str(EPOCHS), "--hidden", "8",
                             "--dtype", "float64", "--device", "cpu", "--json", "--no-progress"]))
    assert run["mode"] == "shards" and run["world_size"] == 2 and run["test_metric"] is None
    ref = spawn(_whole, 2, DATA, part_file, timeout=240)[0]
    assert max(abs(a - b) for a, b in zip(run["losses"], ref)) <= 1e-12, (run["losses"], ref)
    assert run["bytes_measured"]["total"] == run["bytes_predicted"]["total"]
    assert run["bytes_measured"]["total"][-1] > 0  # PSS cuts the sequences in time: states cross ranks
    assert run["shard_bytes_read"] > 0


def test_train_shards_errors_are_one_line(tmp_path, capsys):
    """Refusals before any rank starts run in this process (train's launcher checks: exit 2, one line); a damaged
    rank file, found only by the rank that reads it, in a 2-process job."""
    shards = str(tmp_path / "shards")
    assert main(["partition", DATA, "--parts", "2", "--scheme", "pts", "--shards", shards, "--json"]) == 0
    cases = {
        "missing": (["--shards", str(tmp_path / "nowhere"), "--nproc", "2"], "no such shard directory"),
        "path and shards": (["england_covid", "--shards", shards], "not both"),
        "windows": (["--shards", shards, "--windows", "4"], "--windows with --shards"),
        "world": (["--shards", shards, "--nproc", "3"], "holds 2 parts but --nproc 3"),
        "black box": (["--shards", shards, "--model", "gconvgru", "--nproc", "2"], "black-box"),
    }
    for name, (args, why) in cases.items():
        capsys.readouterr()
        assert main(["train", *args, "--epochs", "1", "--no-progress"]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and why in err[0] and "Traceback" not in err[0], (name, err)
    bad = str(tmp_path / "bad")
    os.makedirs(bad)
    for name in os.listdir(shards):
        src, dst = os.path.join(shards, name), os.path.join(bad, name)
        if os.path.isdir(src):
            os.makedirs(dst)
            with open(os.path.join(src, SHARD_FILE), "rb") as f, open(os.path.join(dst, SHARD_FILE), "wb") as g:
                g.write(f.read())
        else:
            with open(src) as f, open(dst, "w") as g:
                json.dump(json.load(f), g)
    corrupt(os.path.join(bad, "rank-1", SHARD_FILE))
    proc = run_cli(["train", "--shards", bad, "--nproc", "2", "--device", "cpu", "--epochs", "1", "--no-progress"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "rank 1 could not load its shard" in last and "Traceback" not in proc.stderr, proc.stderr[-2000:]
