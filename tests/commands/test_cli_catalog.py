"""``pyg-dynscale train``: the catalog of bad input (issue 24, item 2).

Every case exits with status 2 and exactly one line on stderr (``pyg-dynscale train: error: ...``) that names
the option or the file and says how to fix it: no traceback, nothing on stdout, never torch's advice to load a
file with ``weights_only=False``. Every check runs before any work that could be wasted: the in-process cases
run with ``torch.distributed.init_process_group`` replaced by a failure, i.e. each error comes before the
processes connect, partition or train. A few cases go through the real ``--nproc`` launcher (one line from
the launcher, before any worker starts).

The table in ``docs/cli.md`` ("Bad input: the catalog") is this catalog; ``python -m
tests.commands.test_cli_catalog`` prints it from the real messages.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from pyg_dynscale.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "cli.md"
TRACEBACK_MARKERS = ("Traceback", 'File "', "weights_only")


class Case(NamedTuple):
    name: str
    argv: list  # after ``pyg-dynscale train``; run in the fixture folder (relative file names)
    fragment: str  # part of the one line: names the option or file (and the fix)


def C(name: str, args: str, fragment: str) -> Case:
    return Case(name, args.split(), fragment)


E = "england_covid"
CATALOG = [
    # ---- usage: argparse's errors, one line each (no usage block)
    C("no PATH", "", "the following arguments are required: PATH"),
    C("unknown option", f"{E} --bogus", "unrecognized arguments: --bogus"),
    C("option without its value", f"{E} --epochs", "argument --epochs: expected one argument"),
    C("--epochs not an integer", f"{E} --epochs x", "argument --epochs: invalid int value: 'x'"),
    C("--hidden not an integer", f"{E} --hidden 1.5", "argument --hidden: invalid int value: '1.5'"),
    C("--nproc not an integer", f"{E} --nproc two", "argument --nproc: invalid int value: 'two'"),
    C("--max-restarts not an integer", f"{E} --max-restarts x", "argument --max-restarts: invalid int value"),
    C("--seed not an integer", f"{E} --seed 1.5", "argument --seed: invalid int value: '1.5'"),
    C("--threads not an integer", f"{E} --threads many", "argument --threads: invalid int value"),
    C("--checkpoint-every not an integer", f"{E} --checkpoint-every often", "argument --checkpoint-every: invalid"),
    C("--recompute-every not an integer", f"{E} --recompute-every x", "argument --recompute-every: invalid int"),
    C("--lr not a number", f"{E} --lr abc", "argument --lr: invalid float value: 'abc'"),
    C("--timeout not a number", f"{E} --timeout soon", "argument --timeout: invalid float value: 'soon'"),
    C("--train-ratio not a number", f"{E} --train-ratio half", "argument --train-ratio: invalid float value"),
    C("unknown --model", f"{E} --model gcn", "argument --model: invalid choice: 'gcn'"),
    C("unknown --scheme", f"{E} --scheme metis", "argument --scheme: invalid choice: 'metis'"),
    C("unknown --dtype", f"{E} --dtype int8", "argument --dtype: invalid choice: 'int8'"),
    C("unknown --format", f"{E} --format csv", "argument --format: invalid choice: 'csv'"),
    C("unknown --target", f"{E} --target edge", "argument --target: invalid choice: 'edge'"),
    C("unknown --fusion", f"{E} --fusion partial", "argument --fusion: invalid choice: 'partial'"),
    C("unknown --stale-backward", f"{E} --stale-backward maybe", "argument --stale-backward: invalid choice"),
    C("unknown --stale-scope", f"{E} --stale-scope world", "argument --stale-scope: invalid choice"),
    C("unknown --device", f"{E} --device tpu", "argument --device: invalid choice: 'tpu'"),
    # ---- option values
    C("--epochs 0", f"{E} --epochs 0", "--epochs must be >= 1, got 0"),
    C("--epochs negative", f"{E} --epochs -3", "--epochs must be >= 1, got -3"),
    C("--hidden 0", f"{E} --hidden 0", "--hidden must be >= 1, got 0"),
    C("--threads 0", f"{E} --threads 0", "--threads must be >= 1, got 0"),
    C("--checkpoint-every 0", f"{E} --checkpoint-every 0", "--checkpoint-every must be >= 1, got 0"),
    C("--nproc 0", f"{E} --nproc 0", "--nproc must be >= 1, got 0"),
    C("--max-restarts negative", f"{E} --nproc 2 --max-restarts -1", "--max-restarts must be >= 0, got -1"),
    C("--max-restarts without --nproc", f"{E} --max-restarts 2", "--max-restarts needs --nproc"),
    C("--lr nan", f"{E} --lr nan", "--lr must be a positive number, got nan"),
    C("--lr inf", f"{E} --lr inf", "--lr must be a positive number, got inf"),
    C("--lr 0", f"{E} --lr 0", "--lr must be a positive number, got 0.0"),
    C("--lr negative", f"{E} --lr -0.1", "--lr must be a positive number, got -0.1"),
    C("--timeout 0", f"{E} --timeout 0", "--timeout must be a positive number of seconds"),
    C("--timeout nan", f"{E} --timeout nan", "--timeout must be a positive number of seconds, got nan"),
    C("--train-ratio 0", f"{E} --train-ratio 0", "--train-ratio must lie in (0, 1), got 0.0"),
    C("--train-ratio 1", f"{E} --train-ratio 1", "--train-ratio must lie in (0, 1), got 1.0"),
    C("--train-ratio above 1", f"{E} --train-ratio 1.5", "--train-ratio must lie in (0, 1), got 1.5"),
    C("--train-ratio leaves no training snapshot", f"{E} --train-ratio 0.01", "--train-ratio 0.01: splits 53"),
    C("--dtype float16", f"{E} --dtype float16", "argument --dtype: float16 is not supported"),
    C("--dtype bfloat16", f"{E} --dtype bfloat16", "argument --dtype: bfloat16 is not supported"),
    C("--device cuda without a GPU", f"{E} --device cuda", "--device cuda: torch.cuda.is_available() is False"),
    C("--hidden odd with dysat", f"{E} --model dysat --hidden 3", "--hidden 3 with --model dysat"),
    # ---- the stale cache
    C("unknown --stale policy", f"{E} --stale sometimes", "--stale sometimes: field 'stale.policy'"),
    C("--stale static: not a number", f"{E} --stale static:x", "static:<c>"),
    C("--stale static: negative", f"{E} --stale static:-1", "--stale static:-1: field 'stale.c'"),
    C("--stale-kinds unknown kind", f"{E} --stale intent --stale-kinds halo", "--stale-kinds halo: field "
                                                                           "'stale.kinds'"),
    C("--stale-kinds empty", f"{E} --stale intent --stale-kinds ,", "--stale-kinds ,: field 'stale.kinds'"),
    C("--stale-kind without =", f"{E} --stale intent --stale-kind temporal", "--stale-kind 'temporal': write "
                                                                            "KIND=POLICY"),
    C("--stale-kind unknown kind", f"{E} --stale intent --stale-kind halo=static:0.3",
      "--stale-kind halo=static:0.3: field 'stale.per_kind'"),
    C("--stale-kind unknown policy", f"{E} --stale intent --stale-kind temporal=bogus",
      "--stale-kind temporal=bogus: field 'stale.policy'"),
    # ---- incompatible combinations
    C("--fusion none with a black-box model", f"{E} --model dcrnn --fusion none", "--fusion none with --model dcrnn"),
    C("--locality without pts", f"{E} --locality", "--locality orders the vertices of --scheme pts"),
    C("--recompute-every 0", f"{E} --recompute-every 0", "--recompute-every must be >= 1 snapshot"),
    C("--recompute-every with dysat", f"{E} --model dysat --recompute-every 2", "--recompute-every with --model "
                                                                               "dysat"),
    C("--recompute-every with --fusion none", f"{E} --recompute-every 2 --fusion none", "leave --fusion at full"),
    C("--resume without --checkpoint-dir", f"{E} --resume", "--resume needs --checkpoint-dir DIR"),
    C("--target link without link labels", f"{E} --target link", "--target link needs link labels"),
    C("--target node without node targets", "no-targets.pt", "--target node needs node targets y"),
    # ---- PATH, --format, --window
    C("PATH missing", "no/such/file.json", "no such file: PATH 'no/such/file.json'"),
    C("PATH a misspelt dataset name", "england_covd", "no such file: PATH 'england_covd'"),
    C("PATH a PyGT dataset that is not embedded", "chickenpox", "PATH 'chickenpox' names the PyGT dataset "
                                                                "'chickenpox', which is not embedded"),
    C("PATH a directory", "folder", "PATH 'folder' is a directory"),
    C("PATH malformed JSON", "malformed.json", "malformed.json: JSON: is malformed"),
    C("PATH an empty edge list", "empty.txt --window 10", "empty.txt: content: has no data lines"),
    C("PATH a corrupt gzip", "corrupt.txt.gz --window 10", "PATH 'corrupt.txt.gz': the gzip stream is corrupt"),
    C("PATH an unreadable signal file", "garbage.pt", "PATH 'garbage.pt' is not a readable pyg_dynscale signal"),
    C("PATH a pickle of other objects", "pickled.pt", "PATH 'pickled.pt' is not a readable pyg_dynscale signal"),
    C("edge list with two columns", "two-columns.txt --window 10", "PATH 'two-columns.txt': line 1 has 2 "
                                                                   "columns"),
    C("edge list without --window", "edges.txt", "--window is required to bin the edge list 'edges.txt'"),
    C("--window not a duration", "edges.txt --window abc", "--window: is 'abc'"),
    C("--window 0", "edges.txt --window 0", "--window: is '0'"),
    C("--window negative", "edges.txt --window -5", "--window: is '-5'"),
    C("--window below a microsecond", "edges.txt --window 1e-9", "--window must be a duration of at least a "
                                                                 "microsecond"),
    C("--window longer than the data", "edges.txt --window 1e12", "--window 1e12: puts all events into 1 "
                                                                  "snapshot"),
    C("--window with a PyGT dataset", f"{E} --window 1d", "--window applies to temporal edge lists, and PATH "
                                                          "'england_covid'"),
    C("--window with a saved signal", "signal.pt --window 1d", "--window applies to temporal edge lists, and PATH "
                                                               "'signal.pt' is a saved signal"),
    C("--format edgelist with a dataset name", f"{E} --format edgelist --window 1d",
      "--format edgelist: PATH 'england_covid' is not a file"),
    C("--format dynscale with a dataset name", f"{E} --format dynscale", "--format dynscale: PATH 'england_covid' "
                                                                         "is not a file"),
    C("--format pygt-json with an edge list", "edges.txt --format pygt-json --window 100",
      "--format pygt-json: PATH 'edges.txt' looks like a temporal edge list"),
    C("--format dynscale with an edge list", "edges.txt --format dynscale", "--format dynscale: PATH 'edges.txt' "
                                                                            "looks like a temporal edge list"),
    C("--format edgelist with JSON", "malformed.json --format edgelist --window 1",
      "--format edgelist: PATH 'malformed.json' looks like a PyGT JSON dataset"),
    # ---- --partition, --save-partition, --checkpoint-dir
    C("--partition missing", f"{E} --partition missing.pt", "--partition: no such file 'missing.pt'"),
    C("--partition a directory", f"{E} --partition folder", "--partition 'folder' is a directory"),
    C("--partition unreadable", f"{E} --partition garbage.pt", "--partition 'garbage.pt' is not a readable "
                                                               "pyg_dynscale partition file"),
    C("--partition a pickle of other objects", f"{E} --partition pickled.pt", "--partition 'pickled.pt' is not a "
                                                                              "readable"),
    C("--partition of another part count", f"{E} --partition two-parts.pt", "--partition two-parts.pt has 2 parts "
                                                                            "but 1 processes train"),
    C("--partition of another signal", f"{E} --partition other-signal.pt", "(partitions are made for the training "
                                                                           "split of PATH"),
    C("--save-partition a directory", f"{E} --save-partition folder", "--save-partition 'folder' is a directory"),
    C("--save-partition in a missing folder", f"{E} --save-partition no/such/p.pt", "--save-partition: the folder"),
    C("--checkpoint-dir a file", f"{E} --checkpoint-dir a-file", "--checkpoint-dir 'a-file' is a file, not a "
                                                                 "directory"),
    C("--checkpoint-dir in a missing folder", f"{E} --checkpoint-dir no/such/ck", "--checkpoint-dir: the folder"),
    # ---- --resume
    C("--resume, a shard missing", f"{E} --hidden 4 --checkpoint-dir ck-no-shard --resume",
      "its shard ck-no-shard/epoch-000002/__0_0.distcp is missing"),
    C("--resume, a shard truncated", f"{E} --hidden 4 --checkpoint-dir ck-short-shard --resume",
      "__0_0.distcp is truncated"),
    C("--resume, the record truncated", f"{E} --hidden 4 --checkpoint-dir ck-short-record --resume",
      "its record ck-short-record/epoch-000002/pyg_dynscale.json cannot be read (JSONDecodeError"),
    C("--resume, the DCP metadata truncated", f"{E} --hidden 4 --checkpoint-dir ck-short-metadata --resume",
      "its DCP metadata ck-short-metadata/epoch-000002/.metadata cannot be read"),
    C("--resume, its partition unreadable", f"{E} --hidden 4 --checkpoint-dir ck-bad-partition --resume",
      "--resume: the checkpoints' partition 'ck-bad-partition/partition.pt' is not a readable"),
    C("--resume, another checkpoint format", f"{E} --hidden 4 --checkpoint-dir ck-other-format --resume",
      "--resume: ck-other-format/epoch-000002: checkpoint format 99, this version reads 1"),
    C("--resume with another --model", f"{E} --hidden 4 --model tgcn-deep --checkpoint-dir ck --resume",
      "model: checkpoint 'tgcn', this run 'tgcn-deep' (--model)"),
    C("--resume with another --hidden", f"{E} --hidden 8 --checkpoint-dir ck --resume",
      "hidden: checkpoint 4, this run 8 (--hidden)"),
    C("--resume with another --lr", f"{E} --hidden 4 --lr 0.05 --checkpoint-dir ck --resume",
      "lr: checkpoint 0.01, this run 0.05 (--lr)); resume with --lr 0.01"),
    C("--resume with another --stale", f"{E} --hidden 4 --stale static:0.5 --checkpoint-dir ck --resume",
      "stale: checkpoint 'off', this run"),
    C("--resume with another --train-ratio", f"{E} --hidden 4 --train-ratio 0.7 --checkpoint-dir ck --resume",
      "train_ratio: checkpoint 0.8, this run 0.7 (--train-ratio)"),
    C("--resume with other data", "edges.txt --window 100 --hidden 4 --checkpoint-dir ck --resume", "(PATH)"),
    # ---- your own model: --model PATH.py:Name | package.module:Name, --model-args
    C("--model-args not JSON", f"{E} --model models.py:Net --model-args {{hidden:4}}",
      "--model-args '{hidden:4}' is not valid JSON"),
    C("--model-args not an object", f"{E} --model models.py:Net --model-args [4]",
      "--model-args '[4]' is a JSON list, not an object"),
    C("--model-args unknown keyword", f'{E} --model models.py:Net --model-args {{"hiden":4}}',
      "--model-args: Net() takes no keyword argument 'hiden' (its parameters: node_features, hidden)"),
    C("--model-args with a zoo model", f'{E} --model-args {{"hidden":4}}', "--model-args applies to your own model"),
    C("--hidden with your own model", f"{E} --model models.py:Net --hidden 8", "--hidden 8 sets the width of the "
                                                                               "zoo's models"),
    C("--model without a name", f"{E} --model models.py:", "--model 'models.py:': write PATH.py:ClassName"),
    C("--model name not a Python name", f"{E} --model models.py:1x", "--model models.py:1x: '1x' is not a Python "
                                                                     "name"),
    C("--model file missing", f"{E} --model no-such.py:Net", "--model no-such.py:Net: no such file 'no-such.py'"),
    C("--model file a directory", f"{E} --model folder.py:Net", "--model folder.py:Net: 'folder.py' is a "
                                                                "directory"),
    C("--model file fails to import", f"{E} --model broken.py:Net", "--model broken.py:Net: importing 'broken.py' "
                                                                    "failed: ModuleNotFoundError"),
    C("--model module not found", f"{E} --model no_such_module:Net", "--model no_such_module:Net: no module named "
                                                                     "'no_such_module'"),
    C("--model class not found", f"{E} --model models.py:Nett", "--model models.py:Nett: 'models.py' defines no "
                                                                "'Nett'"),
    C("--model class not a torch.nn.Module", f"{E} --model models.py:NotAModule",
      "NotAModule is a class but not a torch.nn.Module"),
    C("--model a module instance", f"{E} --model models.py:instance", "'instance' is a torch.nn.Module instance; "
                                                                      "name its class"),
    C("--model a required parameter not given", f"{E} --model models.py:NeedsK", "NeedsK() needs 'K', which "
                                                                                 "--model-args does not give"),
    C("--model constructor raises", f"{E} --model models.py:Raises", "Raises(in_channels=8) raised ValueError: "
                                                                     "no way; check --model-args"),
    C("--model function returns no module", f"{E} --model models.py:make_none",
      "make_none(in_channels=8) returned a NoneType, not a torch.nn.Module"),
    C("--fusion none with your own black-box model", f"{E} --model models.py:Net --fusion none",
      "--fusion none with --model models.py:Net: fusion is a decomposed-path option"),
    C("--recompute-every with your own model that has BatchNorm",
      f'{E} --model pyg_dynscale.nn:MPNNLSTMDGC --model-args {{"hidden_size":4}} --recompute-every 2',
      "--recompute-every with --model pyg_dynscale.nn:MPNNLSTMDGC: checkpoint_every is set with MPNNLSTMDGC, which "
      "has BatchNorm"),
    C("--resume with other --model-args", f'{E} --model models.py:Net --model-args {{"hidden":8}} --checkpoint-dir '
                                          "ck-own --resume",
      "model_args: checkpoint {}, this run {'hidden': 8} (--model-args)); resume with no --model-args"),
    C("--resume with another own model", f"{E} --model models.py:Net2 --checkpoint-dir ck-own --resume",
      "model: checkpoint 'models.py:Net', this run 'models.py:Net2' (--model)"),
]

#: Through the real launcher (a subprocess each: start-up costs seconds, so only a few).
LAUNCHER = [
    C("--nproc 2, usage error", f"{E} --nproc 2 --epochs x", "argument --epochs: invalid int value: 'x'"),
    C("--nproc 2, --partition unreadable", f"{E} --nproc 2 --partition garbage.pt", "--partition 'garbage.pt' is "
                                                                                    "not a readable"),
    C("--nproc 2, --resume with another number of processes", f"{E} --nproc 2 --hidden 4 --checkpoint-dir ck --resume",
      "world_size: checkpoint 1, this run 2 (--nproc)"),
    C("--nproc 2, --model class not found", f"{E} --nproc 2 --model models.py:Nett", "--model models.py:Nett: "
                                                                                     "'models.py' defines no 'Nett'"),
]

#: The Python file the --model cases name (a model of one's own and what can be wrong with one).
MODELS_PY = """\
import torch
from pyg_dynscale.nn import TGCN


class Net(torch.nn.Module):
    def __init__(self, node_features, hidden=4):
        super().__init__()
        self.recurrent = TGCN(node_features, hidden)
        self.linear = torch.nn.Linear(hidden, 1)

    def forward(self, x, edge_index, edge_weight, h):
        h = self.recurrent(x, edge_index, edge_weight, h)
        return self.linear(torch.relu(h)), h


class Net2(Net):
    pass


class NeedsK(torch.nn.Module):
    def __init__(self, in_channels, K):
        super().__init__()


class Raises(torch.nn.Module):
    def __init__(self, in_channels):
        raise ValueError("no way")


class NotAModule:
    pass


def make_none(in_channels):
    return None


instance = torch.nn.Linear(2, 2)
"""


def _small_signal(with_targets: bool):
    from pyg_dynscale import DynamicGraphSignal

    g = torch.Generator().manual_seed(0)
    edges = [torch.randint(0, 10, (2, 30), generator=g) for _ in range(8)]
    feats = [torch.randn(10, 3, generator=g) for _ in range(8)]
    targets = [torch.randn(10, generator=g) for _ in range(8)] if with_targets else None
    return DynamicGraphSignal(edges, None, feats, targets, num_vertices=10)


def _damage(src: Path, dst: Path, how: str) -> None:
    shutil.copytree(src, dst)
    newest = dst / "epoch-000002"
    if how == "no-shard":
        (newest / "__0_0.distcp").unlink()
    elif how == "short-shard":
        data = (newest / "__0_0.distcp").read_bytes()
        (newest / "__0_0.distcp").write_bytes(data[: len(data) // 3])
    elif how == "short-record":
        text = (newest / "pyg_dynscale.json").read_text()
        (newest / "pyg_dynscale.json").write_text(text[:50])
    elif how == "short-metadata":
        data = (newest / ".metadata").read_bytes()
        (newest / ".metadata").write_bytes(data[:100])
    elif how == "bad-partition":
        (dst / "partition.pt").write_bytes(b"not a partition" * 10)
    elif how == "other-format":  # written by a future version
        record = json.loads((newest / "pyg_dynscale.json").read_text())
        (newest / "pyg_dynscale.json").write_text(json.dumps(dict(record, format=99)))


def make_files(d: Path) -> Path:
    """The files the cases name, in one folder (the cases run with it as the working directory)."""
    from pyg_dynscale.data.loaders import load
    from pyg_dynscale.partition import partition, save_partition

    (d / "folder").mkdir()
    (d / "a-file").write_text("not a directory\n")
    g = torch.Generator().manual_seed(0)
    lines = []
    for w in range(8):
        src, dst = torch.randint(0, 30, (60,), generator=g), torch.randint(0, 30, (60,), generator=g)
        lines += [f"{int(s)} {int(t)} {w * 100 + i}" for i, (s, t) in enumerate(zip(src, dst))]
    (d / "edges.txt").write_text("\n".join(lines) + "\n")
    (d / "two-columns.txt").write_text("".join(f"{i % 7} {(3 * i) % 7}\n" for i in range(50)))
    (d / "empty.txt").write_text("% only a comment\n\n")
    (d / "malformed.json").write_text("{not json")
    (d / "corrupt.txt.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)
    (d / "garbage.pt").write_bytes(b"not a zip archive " * 12)
    torch.save({"module": torch.nn.Linear(2, 2)}, d / "pickled.pt")  # an object pickle: never unpickled
    _small_signal(True).save(str(d / "signal.pt"))
    _small_signal(False).save(str(d / "no-targets.pt"))
    train, _ = load("england_covid").split(0.8)
    save_partition(partition(train, "pss", 2), str(d / "two-parts.pt"))
    save_partition(partition(load("england_covid"), "pss", 1), str(d / "other-signal.pt"))
    # a good checkpoint (1 process, tgcn, --hidden 4, lr 0.01, epochs 1 and 2) and damaged copies of it
    assert main(["train", "england_covid", "--hidden", "4", "--epochs", "2", "--checkpoint-dir", str(d / "ck"),
                 "--checkpoint-every", "1", "--json", "--no-progress"]) == 0
    for how in ("no-shard", "short-shard", "short-record", "short-metadata", "bad-partition", "other-format"):
        _damage(d / "ck", d / f"ck-{how}", how)
    (d / "models.py").write_text(MODELS_PY)
    (d / "broken.py").write_text("import no_such_package_xyz\n")
    (d / "folder.py").mkdir()
    cwd = os.getcwd()
    os.chdir(d)  # the checkpoint of `--model models.py:Net` (as the cases write it)
    try:
        assert main(["train", "england_covid", "--model", "models.py:Net", "--epochs", "2", "--checkpoint-dir",
                     "ck-own", "--checkpoint-every", "1", "--json", "--no-progress"]) == 0
    finally:
        os.chdir(cwd)
    return d


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    return make_files(tmp_path_factory.mktemp("catalog"))


def _check_one_line(code: object, out: str, err: str, fragment: str) -> str:
    assert code == 2, (code, err)
    assert out == "", out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("pyg-dynscale train: error: "), line
    assert fragment in line, (fragment, line)
    assert not any(m in err for m in TRACEBACK_MARKERS), err  # no traceback, never the weights_only advice
    return line


def _run_in_process(case: Case, files: Path, monkeypatch, capsys) -> str:
    import torch.distributed as dist

    def no_work(*args, **kwargs):  # every error must come before the processes connect (and partition, train)
        raise AssertionError(f"{case.name}: the run reached init_process_group before its error")

    monkeypatch.setattr(dist, "init_process_group", no_work)
    monkeypatch.chdir(files)
    monkeypatch.delenv("PYG_DYNSCALE_DEBUG", raising=False)
    try:
        code = main(["train", *case.argv, "--no-progress"] if case.argv else ["train"])
    except SystemExit as exc:  # argparse
        code = exc.code
    cap = capsys.readouterr()
    return _check_one_line(code, cap.out, cap.err, case.fragment)


@pytest.mark.parametrize("case", CATALOG, ids=[c.name for c in CATALOG])
def test_bad_input_is_one_line(case: Case, files, monkeypatch, capsys) -> None:
    if case.name == "--device cuda without a GPU" and torch.cuda.is_available():
        pytest.skip("an error only without a GPU")
    _run_in_process(case, files, monkeypatch, capsys)


#: the launcher cases run as a process of their own (the others: the launcher's code in this process, where
#: reaching the launch of the workers fails the case; the same refusal before any worker, without 5 s of start-up)
LAUNCHER_PROCESSES = {"--nproc 2, usage error", "--nproc 2, --model class not found"}


@pytest.mark.parametrize("case", LAUNCHER, ids=[c.name for c in LAUNCHER])
def test_bad_input_through_the_launcher_is_one_line(case: Case, files, monkeypatch, capsys) -> None:
    if case.name not in LAUNCHER_PROCESSES:
        from pyg_dynscale.commands import train as train_cmd

        def no_launch(*args, **kwargs):
            raise AssertionError(f"{case.name}: the launcher started the workers before its error")

        monkeypatch.setattr(train_cmd, "launch_workers", no_launch)
        _run_in_process(case, files, monkeypatch, capsys)
        return
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("PYG_DYNSCALE_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train", *case.argv, "--no-progress"],
                          capture_output=True, text=True, timeout=180, env=env, cwd=files)
    _check_one_line(proc.returncode, proc.stdout, proc.stderr, case.fragment)


def test_catalog_size_and_docs_table() -> None:
    """At least 70 cases, each a row of the table in docs/cli.md (its name and its message's fragment)."""
    assert len(CATALOG) + len(LAUNCHER) >= 70
    names = [c.name for c in CATALOG + LAUNCHER]
    assert len(set(names)) == len(names)
    docs = DOCS.read_text()
    rows = {line.split("|")[1].strip(): line for line in docs.splitlines() if line.startswith("| ")}
    for case in CATALOG + LAUNCHER:
        row = rows.get(case.name.replace("|", "\\|"))
        assert row is not None, f"docs/cli.md has no row for {case.name!r}"
        assert case.fragment.replace("|", "\\|") in row, (case.name, row)


def _table_row(case: Case, message: str) -> str:
    cmd = " ".join(["pyg-dynscale train", *case.argv])
    return f"| {case.name} | `{cmd}` | 2 | {message.replace('|', chr(92) + '|')} |"


def _render() -> str:  # pragma: no cover - a documentation helper: python -m tests.commands.test_cli_catalog
    """The docs table from the real messages (the fixture's folder stripped from paths)."""
    import contextlib
    import io
    import tempfile

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        d = make_files(Path(tempfile.mkdtemp(prefix="catalog")))
    rows = ["| case | command | exit | message |", "|---|---|---|---|"]
    old = os.getcwd()
    os.chdir(d)
    try:
        for case in CATALOG + LAUNCHER:
            if case in LAUNCHER:
                proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", "train", *case.argv, "--no-progress"],
                                      capture_output=True, text=True, timeout=180, cwd=d,
                                      env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT)))
                err = proc.stderr
            else:
                buf = io.StringIO()
                with contextlib.redirect_stderr(buf), contextlib.redirect_stdout(io.StringIO()):
                    try:
                        main(["train", *case.argv, "--no-progress"] if case.argv else ["train"])
                    except SystemExit:
                        pass
                err = buf.getvalue()
            line = err.strip().splitlines()[-1] if err.strip() else "(none)"
            rows.append(_table_row(case, line.replace(str(d) + os.sep, "").replace(str(d), ".")))
    finally:
        os.chdir(old)
    return "\n".join(rows)


if __name__ == "__main__":  # pragma: no cover
    print(_render())
