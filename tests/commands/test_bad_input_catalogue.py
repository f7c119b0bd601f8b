"""Bad input a command-line user can act on (issue 38, item 2): a catalogue over ``train``, ``train --lags``,
``train-events``, ``partition-events``, ``partition`` and ``inspect``.

Every case exits with status 2 and exactly one line on stderr, ``pyg-dynscale SUBCOMMAND: error: ...``, with
no traceback; the line names what the user typed (the option and its value, or the file and its line) and a
fix in the command line's words: never an API keyword the command line has no option for (``sort=True``,
``skip_rows``, ``allow_nonfinite``, ``decoder=``, ``val_ratio``: :mod:`pyg_dynscale.commands.hints`).

The cases run in this process (``cli.main``). Those marked ``before`` must be refused before that point of the
run: ``"connect"``, before any process group (``torch.distributed.init_process_group`` fails the case) or the
trainer is built (``train-events``' ``build`` fails it); ``"launch"``, by the ``--nproc`` launcher before any
worker starts. Three ``--nproc 2`` cases run the real command in a process of its own.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from pyg_dynscale.cli import main
from tests.helpers.event_csv import write_events_csv

ROOT = Path(__file__).resolve().parents[2]
#: API words a command-line hint must not name (the command line has no such option)
API_WORDS = re.compile(r"\b\w+=(True|False|None)\b|skip_rows|allow_nonfinite|decoder=|\bval_ratio|\btest_ratio|"
                       r"\bfield 'val'|\bfield 'test'|pass sort")


class Case(NamedTuple):
    name: str
    argv: str  # the command line after ``pyg-dynscale``, run in the fixture's folder
    fragments: tuple  # parts of the one line: what the user typed and the fix
    before: str = ""  # "connect" / "launch": the refusal comes before that


CASES = [
    # ---- train-events: the split, refused before any work (was: after the first epoch / after training)
    Case("train-events --val-ratio 0", "train-events events.csv --val-ratio 0",
         ("--val-ratio 0 leaves no val events", "give --val-ratio a share above 0"), "connect"),
    Case("train-events --test-ratio 0", "train-events events.csv --test-ratio 0",
         ("--test-ratio 0 leaves no test events", "give --test-ratio a share above 0"), "connect"),
    Case("train-events: a stream too short for the split", "train-events three.csv",
         ("the time split of the 3 events of PATH 'three.csv' leaves no validation events", "a larger --val-ratio"),
         "connect"),
    # ---- train-events / partition-events: the event file
    Case("train-events: a node id of 10^12", "train-events huge-id.csv",
         ("line 3, column 1 (item): holds node id 1000000000000", "renumber the users and the items"), "connect"),
    Case("partition-events: a node id of 10^12", "partition-events huge-id.csv --parts 2",
         ("line 3, column 1 (item): holds node id 1000000000000", "renumber")),
    Case("train-events: events out of time order", "train-events unsorted.csv",
         ("line 3: has timestamp 2, earlier than the previous event's 9",
          "sort the file by time, keeping the order of lines with equal times"), "connect"),
    Case("partition-events: events out of time order", "partition-events unsorted.csv --parts 2",
         ("line 3: has timestamp 2", "keeping the order of lines with equal times")),
    Case("train-events: a header and no events", "train-events header-only.csv",
         ("header-only.csv: content: is a header line and no events", "add the events"), "connect"),
    Case("train-events: an id that is not an integer", "train-events float-id.csv",
         ("line 2, column 0 (user): holds '1.5'", "a header line and comment lines must start with"), "connect"),
    Case("train-events --prefetch with --micro-batches", "train-events events.csv --prefetch --memory-placement sven "
         "--micro-batches 2 --parallelism 2,1,1", ("--prefetch is True with --micro-batches 2",
                                                   "Use instead: --prefetch with --micro-batches 1, or no --prefetch"),
         "connect"),
    Case("partition-events --val-ratio 2", "partition-events events.csv --parts 2 --val-ratio 2",
         ("--val-ratio: is 2.0", "use a fraction in [0, 1)")),
    # ---- resuming another command's checkpoint: one line naming it (was ~2,000 characters of options)
    Case("train-events --resume, a train --lags checkpoint", "train-events events.csv --checkpoint-dir ck-windows "
         "--resume", ("ck-windows/epoch-000001 was written by pyg-dynscale train --lags, not by pyg-dynscale "
                      "train-events", "new --checkpoint-dir"), "connect"),
    Case("train --lags --resume, a train-events checkpoint", "train england_covid --lags 4 --checkpoint-dir "
         "ck-events --resume", ("ck-events/epoch-000001 was written by pyg-dynscale train-events, not by "
                                "pyg-dynscale train --lags",), "connect"),
    Case("train --resume, a train --lags checkpoint", "train england_covid --checkpoint-dir ck-windows --resume",
         ("was written by pyg-dynscale train --lags, not by pyg-dynscale train (full-batch",), "connect"),
    # ---- train --lags: the options, before any process starts
    Case("train --lags --batch-size 3 --nproc 2", "train england_covid --lags 4 --batch-size 3 --nproc 2",
         ("--batch-size 3 is not a multiple of --blocks 8",), "launch"),
    Case("train --lags --horizon above --lags", "train england_covid --lags 4 --horizon 5",
         ("--horizon 5 > --lags 4", "use --horizon 4 or less"), "connect"),
    Case("train --lags longer than the data", "train england_covid --lags 100",
         ("--lags 100 and --horizon 1 need 100 snapshots", "use --lags + --horizon - 1 <=")),
    # ---- constant series, named where they are standardized (train, train --lags, inspect, partition)
    Case("train: a constant series", "train constant.json",
         ("field 'y': the series of node 1 is constant (5 at all 12 time steps)", "drop that series"), "connect"),
    Case("train --lags: a constant series", "train constant.json --lags 2",
         ("the series of node 1 is constant",), "connect"),
    Case("inspect: a constant series", "inspect constant.json", ("the series of node 1 is constant",)),
    Case("partition: a constant series", "partition constant.json --parts 2", ("the series of node 1 is constant",)),
    # ---- edge lists with a header line: no skip_rows on the command line
    Case("train: an edge list with a header", "train header.txt --window 1",
         ("line 1, column 0 (source): holds 'src'", "a header line and comment lines must start with '%' or '#'"),
         "connect"),
    Case("inspect: an edge list with a header", "inspect header.txt --window 1",
         ("holds 'src'", "a header line and comment lines must start with")),
    # ---- edge lists of two columns: 'source target ... time' named, not the loader's columns= argument
    Case("inspect: an edge list of two columns", "inspect two-columns.txt --window 1",
         ("PATH 'two-columns.txt': line 1 has 2 columns", "add a time column", "inspect reads")),
    Case("partition: an edge list of two columns", "partition two-columns.txt --window 1 --parts 2",
         ("line 1 has 2 columns", "partition reads")),
    Case("train-events: an edge list of two columns", "train-events two-columns.txt",
         ("line 1 has 2 columns", "train-events reads"), "connect"),  # was: read with the target as the time
    Case("partition-events: an edge list of two columns", "partition-events two-columns.txt --parts 2",
         ("line 1 has 2 columns", "partition-events reads")),
]


def _make_files(d: Path) -> Path:
    write_events_csv(d / "events.csv", 400, 40, msg_dim=2, seed=0)
    (d / "three.csv").write_text("0,0,1,0,0.5\n1,0,1,0,0.5\n0,1,1,0,0.5\n")  # one timestamp: one part only
    (d / "huge-id.csv").write_text("0,0,1,0,0.5\n1,1,2,0,0.5\n0,1000000000000,3,0,0.5\n")
    (d / "unsorted.csv").write_text("0,0,1,0,0.5\n1,1,9,0,0.5\n0,1,2,0,0.5\n")
    (d / "header-only.csv").write_text("user,item,timestamp,state_label,f1\n")
    (d / "float-id.csv").write_text("0,0,1,0,0.5\n1.5,1,2,0,0.5\n")
    (d / "two-columns.txt").write_text("".join(f"{i % 7} {(3 * i) % 7}\n" for i in range(50)))
    (d / "header.txt").write_text("src dst time\n" + "".join(f"{i % 5} {(i * 3) % 5} {i}\n" for i in range(30)))
    series = {"edges": [[0, 1], [1, 2]], "weights": [1.0, 1.0], "time_periods": 12}
    for t in range(12):  # node 1 constant: standardized, 0 / 0
        series[str(t)] = {"y": [float(t % 3), 5.0, float(t * t % 5)]}
    (d / "constant.json").write_text(json.dumps(series))
    # the checkpoints of the two commands (one epoch each)
    assert main(["train", "england_covid", "--lags", "4", "--hidden", "4", "--epochs", "1", "--checkpoint-dir",
                 str(d / "ck-windows"), "--json", "--no-progress"]) == 0
    assert main(["train-events", str(d / "events.csv"), "--memory-dim", "8", "--time-dim", "8", "--embedding-dim",
                 "8", "--epochs", "1", "--checkpoint-dir", str(d / "ck-events"), "--json", "--no-progress"]) == 0
    return d


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    import torch

    torch.set_num_threads(1)
    return _make_files(tmp_path_factory.mktemp("bad_input"))


def check_one_line(code: object, out: str, err: str, command: str, fragments: tuple) -> str:
    """Exit status 2, nothing on stdout, one line on stderr naming ``command``, each fragment, and no API word."""
    assert code == 2, (code, err)
    assert out == "", out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"pyg-dynscale {command}: error: "), line
    assert "Traceback" not in err and 'File "' not in err, err
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    assert not API_WORDS.search(line), (API_WORDS.search(line).group(0), line)
    return line


def _forbid(monkeypatch, case: Case) -> None:
    """Make reaching the point the case must be refused before fail the case."""
    import torch.distributed as dist

    from pyg_dynscale.commands import train as train_cmd
    from pyg_dynscale.commands import train_events

    def reached(what: str):
        def stop(*args, **kwargs):
            raise AssertionError(f"{case.name}: {what} before its error")
        return stop

    if case.before in ("connect", "launch"):
        monkeypatch.setattr(dist, "init_process_group", reached("the run reached init_process_group"))
        monkeypatch.setattr(train_events, "build", reached("train-events built its trainer"))
    if case.before == "launch":
        monkeypatch.setattr(train_cmd, "launch_workers", reached("the launcher started the workers"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_a_cli_user_can_act_on(case: Case, files, monkeypatch, capsys) -> None:
    _forbid(monkeypatch, case)
    monkeypatch.chdir(files)
    monkeypatch.delenv("PYG_DYNSCALE_DEBUG", raising=False)
    argv = case.argv.split()
    try:
        code = main(argv + (["--no-progress"] if argv[0].startswith("train") else []))
    except SystemExit as exc:  # argparse
        code = exc.code
    cap = capsys.readouterr()
    check_one_line(code, cap.out, cap.err, argv[0], case.fragments)


#: through the real launcher, in a process of their own: the launcher's one line, named after the subcommand
NPROC_CASES = [
    Case("train-events --test-ratio 0 --nproc 2", "train-events events.csv --test-ratio 0 --nproc 2",
         ("--test-ratio 0 leaves no test events",)),
    Case("train --lags --batch-size 3 --nproc 2", "train england_covid --lags 4 --batch-size 3 --nproc 2",
         ("--batch-size 3 is not a multiple of --blocks 8",)),
    # found by the workers (the file is read there): still one line, in the command line's words
    Case("train-events: a node id of 10^12, --nproc 2", "train-events huge-id.csv --parallelism 2,1,1 --nproc 2",
         ("line 3, column 1 (item): holds node id 1000000000000", "renumber the users and the items")),
]


@pytest.mark.parametrize("case", NPROC_CASES, ids=[c.name for c in NPROC_CASES])
def test_bad_input_under_nproc_is_one_line_of_the_launcher(case: Case, files) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("PYG_DYNSCALE_DEBUG", None)
    argv = case.argv.split()
    proc = subprocess.run([sys.executable, "-m", "pyg_dynscale", *argv, "--no-progress"], capture_output=True,
                          text=True, timeout=180, env=env, cwd=files)
    check_one_line(proc.returncode, proc.stdout, proc.stderr, argv[0], case.fragments)
