"""docs/cli.md is checked against the code, both ways (issue 25, item 3).

The page's structure (its introduction says the same to its readers): one section per subcommand, headed
``## `pyg-dynscale NAME` ``, holding

* the synopsis: the first ``text`` block whose first line starts ``pyg-dynscale NAME``; the choices of an
  option are written ``--option a|b|c``;
* the options: every table whose header's first cell is ``option``; a row's first cell names one or more
  options (or positional arguments) in backticks, e.g. ``| `--nproc`, `--max-restarts` | ... |``;
* the ``--json`` report: every table whose header's first cell is ``key``; the first cell names key paths in
  backticks: ``a.b`` (a nested object's key), ``a[].b`` (the key of the objects in a list), ``a.{b,c}``
  (``a.b`` and ``a.c``), ``a.*`` (an object whose keys are data).

The checks:

* every subcommand of :func:`pyg_dynscale.cli.build_parser` has a section and every section a subcommand;
* the synopsis and the options tables each name exactly the options of the subcommand's parser (the argparse
  objects, not ``--help``'s text); the synopsis writes every choice the parser offers, and only values the
  parser's choices accept;
* every choice the parser offers is accepted (``train``: its input checks, ``check_args``; ``partition`` and
  ``inspect``: a real run), each in a context that gives it what it needs (its data, companion options);
* the key tables list exactly the keys the commands print: ``train``, ``partition`` and ``inspect`` run for
  real, in-process, in the modes that add keys (``--stale``, PGC's meta, ``--scheme auto``'s block), and as
  a safety net for keys of modes these runs do not reach, the top-level keys of the dict literals the
  report builders return (``train_job.train``, ``partition.partition_report``) must be documented too.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import inspect as pyinspect
import io
import json
import re
import textwrap
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

from pyg_dynscale.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cli.md"


# ------------------------------------------------------------------ reading the page
def sections(text: str) -> dict[str, str]:
    """Subcommand name -> its section's text (up to the next ``## `` heading)."""
    out, name, lines = {}, None, []
    for line in text.splitlines():
        if line.startswith("## "):
            if name is not None:
                out[name] = "\n".join(lines)
            m = re.fullmatch(r"## `pyg-dynscale ([\w-]+)`\s*", line)
            name, lines = (m.group(1) if m else None), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        out[name] = "\n".join(lines)
    return out


def tables(text: str, first: str) -> list[list[str]]:
    """The first cells of the body rows of every table whose header's first cell is ``first``."""
    out, rows, state = [], None, None
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if state is None:
                state, rows = ("take" if cells and cells[0] == first else "skip"), []
            elif state == "take" and not set(line) <= set("|-: "):  # not the separator row
                rows.append(cells[0])
        else:
            if state == "take":
                out.append(rows)
            state = None
    return out


def spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def synopsis(section: str, name: str) -> Optional[str]:
    for block in re.findall(r"```text\n(.*?)```", section, re.S):
        if block.lstrip().startswith(f"pyg-dynscale {name}"):
            return block
    return None


def expand(path: str) -> list[str]:
    """``a.{b,c}.d`` -> ``a.b.d``, ``a.c.d`` (one level of braces at a time, recursively)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [q for alt in m.group(1).split(",") for q in expand(path[:m.start()] + alt.strip() + path[m.end():])]


KEY_PATH = re.compile(r"[A-Za-z_]\w*(\[\])?(\.(\*|[A-Za-z_]\w*(\[\])?))*")


def documented_keys(section: str) -> tuple[set, list]:
    """The key paths the section's key tables document, and the spans that are not key paths."""
    keys, bad = set(), []
    for rows in tables(section, "key"):
        for cell in rows:
            for span in spans(cell):
                for path in expand(span):
                    (keys.add(path) if KEY_PATH.fullmatch(path) else bad.append(span))
    return keys, bad


# ------------------------------------------------------------------ the code's side
def subparsers() -> dict[str, argparse.ArgumentParser]:
    return dict(build_parser().subcommands)


def _is_help(action: argparse.Action) -> bool:
    return isinstance(action, argparse._HelpAction)


def parser_options(parser: argparse.ArgumentParser) -> set:
    """Every option string (``--nproc``) and positional argument (``PATH``) of ``parser``, ``-h`` aside."""
    out = set()
    for a in parser._actions:
        if _is_help(a):
            continue
        out |= set(a.option_strings) if a.option_strings else {a.metavar or a.dest.upper()}
    return out


def key_paths(obj: Any, prefix: str = "") -> set:
    """Every key path of a JSON value: ``a``, ``a.b``, ``a.list[].key``."""
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            out.add(path)
            out |= key_paths(v, path)
    elif isinstance(obj, list):
        for item in obj:
            out |= key_paths(item, prefix + "[]")
    return out


def _parent(path: str) -> Optional[str]:
    if "." not in path:
        return None
    parent = path.rsplit(".", 1)[0]
    return parent[:-2] if parent.endswith("[]") else parent


def compare_keys(produced: set, documented: set) -> tuple[list, list]:
    """(produced but not documented, documented but never produced). ``a.*`` documents ``a`` and everything
    under it; a documented path documents its parents (``snapshots.train``: ``snapshots``)."""
    wild = {d[:-2] for d in documented if d.endswith(".*")}
    plain = {d for d in documented if not d.endswith(".*")}
    closure = set()
    for d in plain | wild:
        while d is not None:
            closure.add(d)
            d = _parent(d)

    def covered(p: str) -> bool:
        return p in closure or any(p == w or p.startswith(w + ".") or p.startswith(w + "[]") for w in wild)

    undocumented = sorted(p for p in produced if not covered(p))
    unproduced = sorted(d for d in plain | wild if d not in produced)
    return undocumented, unproduced


def compare_options(doc: set, code: set) -> tuple[list, list]:
    """(in the parser but not the doc, in the doc but not the parser)."""
    return sorted(code - doc), sorted(doc - code)


def literal_keys(module: Any, function: str) -> set:
    """String keys of the dict literals ``function`` returns (``**f(...)`` of a function of the same module
    included): the keys a report builder writes, whatever mode a run takes."""
    tree = ast.parse(textwrap.dedent(pyinspect.getsource(module)))
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    keys: set = set()

    def visit(name: str) -> None:
        for node in ast.walk(funcs[name]):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
                for k, v in zip(node.value.keys, node.value.values):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        keys.add(k.value)
                    elif k is None and isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in funcs:
                        visit(v.func.id)

    visit(function)
    return keys


# ------------------------------------------------------------------ subcommands and options
@pytest.fixture(scope="module")
def page() -> dict[str, str]:
    return sections(DOC.read_text(encoding="utf-8"))


def test_every_subcommand_has_a_section(page) -> None:
    assert set(page) == set(subparsers()), (sorted(page), sorted(subparsers()))


def test_top_level_options_are_documented() -> None:
    intro = DOC.read_text(encoding="utf-8").split("\n## ", 1)[0]
    top = build_parser()
    missing = [o for a in top._actions if a.option_strings and not _is_help(a) for o in a.option_strings
               if o not in intro]
    assert not missing, f"docs/cli.md's introduction does not mention {missing}"


@pytest.mark.parametrize("name", sorted(subparsers()))
def test_options_table_lists_exactly_the_parser_options(name: str, page) -> None:
    rows = [cell for t in tables(page[name], "option") for cell in t]
    assert rows, f"docs/cli.md: the {name} section has no table headed | option | meaning |"
    doc = {s.split()[0] for cell in rows for s in spans(cell)}
    doc = {s for s in doc if s.startswith("-") or re.fullmatch(r"[A-Z][A-Z0-9_]*", s)}
    missing, unknown = compare_options(doc, parser_options(subparsers()[name]))
    assert not missing, f"{name}: options of the parser missing from docs/cli.md's options table: {missing}"
    assert not unknown, f"{name}: docs/cli.md's options table names options the parser lacks: {unknown}"


@pytest.mark.parametrize("name", sorted(subparsers()))
def test_synopsis_lists_exactly_the_parser_options_and_choices(name: str, page) -> None:
    text = synopsis(page[name], name)
    assert text is not None, f"docs/cli.md: the {name} section has no ```text block starting 'pyg-dynscale {name}'"
    parser = subparsers()[name]
    code = {o for o in parser_options(parser) if o.startswith("-")}
    missing, unknown = compare_options(set(re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", text)), code)
    assert not missing, f"{name}: options missing from the synopsis: {missing}"
    assert not unknown, f"{name}: the synopsis names options the parser lacks: {unknown}"
    written = {opt: set(alts.split("|")) for opt, alts in re.findall(r"(--[\w-]+) ([\w.:=-]+(?:\|[\w.:=-]+)+)", text)}
    for a in parser._actions:
        if a.choices is None or _is_help(a):
            continue
        opt = max(a.option_strings, key=len)
        alts = written.get(opt, set())
        # every offered choice is written; every written one is accepted by the choices (a container may accept
        # a form it cannot list: train --model's PATH.py:Name)
        assert {str(c) for c in a.choices} <= alts and all(w in a.choices for w in alts), (
            f"{name} {opt}: the synopsis writes {sorted(alts)}, the parser offers {list(a.choices)}")


# ------------------------------------------------------------------ offered choices are accepted
def _edges(path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    lines = []
    for w in range(8):
        src, dst = torch.randint(0, 30, (60,), generator=g), torch.randint(0, 30, (60,), generator=g)
        lines += [f"{int(s)} {int(t)} {w * 100 + i}" for i, (s, t) in enumerate(zip(src, dst))]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    from pyg_dynscale import DynamicGraphSignal
    from pyg_dynscale.data.loaders import embedded_england_covid_path

    d = tmp_path_factory.mktemp("choices")
    _edges(d / "edges.txt")
    g = torch.Generator().manual_seed(0)
    DynamicGraphSignal([torch.randint(0, 10, (2, 30), generator=g) for _ in range(8)], None,
                       [torch.randn(10, 3, generator=g) for _ in range(8)],
                       [torch.randn(10, generator=g) for _ in range(8)], num_vertices=10).save(str(d / "signal.pt"))
    from pyg_dynscale.ctdg import synthetic_events

    ev = synthetic_events(300, 30, msg_dim=2, seed=1)
    umax = int(ev.src.max())
    (d / "events.csv").write_text("".join(f"{s},{t - umax - 1},{ts},0,{m[0]},{m[1]}\n" for s, t, ts, m in
                                          zip(ev.src.tolist(), ev.dst.tolist(), ev.t.tolist(), ev.msg.tolist())))
    return {"edges": str(d / "edges.txt"), "signal": str(d / "signal.pt"), "json": embedded_england_covid_path(),
            "events": str(d / "events.csv"), "owner": str(d / "owner.pt")}


#: subcommand -> the command line a choice is tried with when CONTEXT names none (then ``OPTION CHOICE``)
BASE = {
    "train": ["england_covid"],
    "partition": ["{edges}", "--window", "100", "--parts", "2"],
    "inspect": ["{edges}", "--window", "100"],
    "train-events": ["{events}"],
    "partition-events": ["{events}", "--parts", "2"],
}
#: (subcommand, option, choice) -> the command line the choice needs: its data, its companion options
CONTEXT = {
    ("train", "--format", "pygt-json"): ["{json}"],
    ("train", "--format", "edgelist"): ["{edges}", "--window", "100"],
    ("train", "--format", "dynscale"): ["{signal}"],
    ("train", "--target", "link"): ["{edges}", "--window", "100"],
    ("train", "--stale-backward", "send"): ["england_covid", "--stale", "intent"],
    ("train", "--stale-scope", "global"): ["england_covid", "--stale", "intent"],
    ("train", "--placement", "blocks"): ["england_covid", "--windows", "4"],
    ("train", "--placement", "replicated"): ["england_covid", "--windows", "4"],
    ("partition", "--format", "pygt-json"): ["{json}", "--parts", "2", "--scheme", "pss"],
    ("partition", "--pgc-starts", "dgc"): ["{edges}", "--window", "100", "--parts", "2", "--scheme", "pgc"],
    ("inspect", "--format", "pygt-json"): ["{json}"],
    ("inspect", "--format", "dynscale"): ["{signal}"],
    ("train-events", "--format", "edgelist"): ["{edges}"],
    ("train-events", "--event-placement", "per_rank"): ["{events}", "--memory-placement", "sven"],
    ("partition-events", "--format", "edgelist"): ["{edges}", "--parts", "2"],
}


def choice_cases() -> list[tuple[str, str, str]]:
    return [(name, max(a.option_strings, key=len), str(c)) for name, p in sorted(subparsers().items())
            for a in p._actions if a.choices is not None and not _is_help(a) for c in a.choices]


def refusal(name: str, argv: list, capsys) -> Optional[str]:
    """Why ``pyg-dynscale NAME ARGV`` is refused (``None``: accepted). ``train``: parsed by the real parser
    and checked by ``check_args`` (what it refuses before any work); the others run for real."""
    from pyg_dynscale.commands import train_events
    from pyg_dynscale.commands.train_checks import check_args

    try:
        if name in ("train", "train-events"):  # their input checks (train-events: without loading PATH)
            (check_args if name == "train" else train_events.check_args)(build_parser().parse_args([name, *argv]))
            return None
        with contextlib.redirect_stdout(io.StringIO()):
            code = main([name, *argv])
        return None if code == 0 else f"exit status {code}: {capsys.readouterr().err.strip()}"
    except SystemExit as exc:  # argparse
        return f"usage error {exc.code}: {capsys.readouterr().err.strip()}"
    except Exception as exc:  # noqa: BLE001 - CommandError and its kin: the refusal
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("name,option,choice", choice_cases(), ids=["-".join(c) for c in choice_cases()])
def test_every_offered_choice_is_accepted(name: str, option: str, choice: str, files, monkeypatch, capsys) -> None:
    if (name, option, choice) in (("train", "--device", "cuda"), ("train-events", "--device", "cuda")):  # with a GPU
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    argv = [a.format(**files) for a in CONTEXT.get((name, option, choice), BASE[name])] + [option, choice]
    why = refusal(name, argv, capsys)
    assert why is None, f"pyg-dynscale {name} offers {option} {choice} and refuses it: {why}"


def test_context_names_offered_choices_only() -> None:
    assert set(CONTEXT) <= set(choice_cases()), set(CONTEXT) - set(choice_cases())


def test_the_choice_check_can_fail(capsys) -> None:
    """A refused value is seen as refused (``--dtype float16`` was offered once and refused)."""
    assert "float16 is not supported" in refusal("train", ["england_covid", "--dtype", "float16"], capsys)
    assert "--epochs must be >= 1" in refusal("train", ["england_covid", "--epochs", "0"], capsys)


# ------------------------------------------------------------------ JSON reports
def _report(argv: list) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0, argv
    return json.loads(out.getvalue())


#: subcommand -> the runs whose reports together hold every key (each mode that adds keys)
RUNS = {
    "train": [
        ["england_covid", "--scheme", "auto"],                    # auto's block
        ["england_covid", "--scheme", "pgc", "--stale", "drift"],  # PGC's meta, the stale cache's keys
        ["england_covid", "--windows", "4"],                          # --windows' report
    ],
    "partition": [
        ["{json}", "--parts", "2", "--scheme", "auto"],
        ["{json}", "--parts", "2", "--scheme", "pgc"],
        ["{json}", "--parts", "2", "--scheme", "pts", "--locality"],
    ],
    "inspect": [["{json}"], ["{edges}", "--window", "100"]],
    "train-events": [["{events}", "--memory-service", "--prefetch"],
                     ["{events}", "--memory-placement", "sven", "--parallelism", "2,1,1"]],  # traffic's partitioned keys
    "partition-events": [["{events}", "--parts", "2", "--out", "{owner}"]],
}
EXTRA = {"train": ["--epochs", "1", "--hidden", "4", "--json", "--no-progress"], "partition": ["--json"],
         "inspect": ["--json"], "partition-events": ["--json", "--batch-size", "20"],
         "train-events": ["--epochs", "1", "--batch-size", "50", "--memory-dim", "4", "--time-dim", "2",
                          "--embedding-dim", "4", "--json", "--no-progress"]}


@pytest.fixture(scope="module")
def produced(files) -> dict[str, set]:
    out = {}
    for name, runs in RUNS.items():
        out[name] = set()
        for argv in runs:
            out[name] |= key_paths(_report([name, *[a.format(**files) for a in argv], *EXTRA[name]]))
    return out


@pytest.mark.parametrize("name", sorted(RUNS))
def test_json_key_table_lists_exactly_the_report_keys(name: str, page, produced) -> None:
    documented, bad = documented_keys(page[name])
    assert documented, f"docs/cli.md: the {name} section has no table headed | key | ... |"
    assert not bad, f"{name}: not key paths in the key table's first column: {bad}"
    undocumented, unproduced = compare_keys(produced[name], documented)
    assert not undocumented, f"{name} --json prints keys docs/cli.md's key table lacks: {undocumented}"
    assert not unproduced, f"docs/cli.md documents {name} --json keys no run printed: {unproduced}"


def test_every_subcommand_with_json_is_checked(page) -> None:
    with_json = {n for n, p in subparsers().items() if "--json" in parser_options(p)}
    assert with_json == set(RUNS), (with_json, set(RUNS))


@pytest.mark.parametrize("name,module,function", [("train", "pyg_dynscale.commands.train_job", "train"),
                                                  ("partition", "pyg_dynscale.commands.partition",
                                                   "partition_report")])
def test_report_builders_keys_are_documented(name: str, module: str, function: str, page) -> None:
    import importlib

    keys = literal_keys(importlib.import_module(module), function)
    assert len(keys) > 10, f"{module}.{function} no longer returns a dict literal: update this test"
    top = {d.split(".")[0].split("[")[0] for d in documented_keys(page[name])[0]}
    assert not keys - top, f"{name}: report keys missing from docs/cli.md: {sorted(keys - top)}"


def test_the_key_check_can_fail() -> None:
    produced = key_paths({"a": 1, "s": {"train": 1, "test": 2}, "c": [{"x": 1}], "f": {"anything": 1}})
    assert produced == {"a", "s", "s.train", "s.test", "c", "c[].x", "f", "f.anything"}
    assert compare_keys(produced, {"a", "s.train", "s.test", "c[].x", "f.*"}) == ([], [])
    assert compare_keys(produced, {"a", "s.train", "c[].x", "f.*", "gone"}) == (["s.test"], ["gone"])
    assert expand("b.{x,y}.{p,q}") == ["b.x.p", "b.x.q", "b.y.p", "b.y.q"]
    assert compare_options({"--a", "PATH"}, {"--a", "--b", "PATH"}) == (["--b"], [])
