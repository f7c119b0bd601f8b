"""Every shell and Python block of README.md and docs/*.md runs, and passes.

Convention (fence info string, first word = language, as GitHub and
myst-parser read it):

* ```` ```python ```` (or ``py``, ``python3``): run. The Python blocks of one page run in
  order in ONE namespace (like a doctest session), in a subprocess per page,
  one pytest item per block. A failure names ``page:line`` and the traceback
  points at the markdown lines themselves.
* ```` ```bash ```` (or ``sh``, ``shell``): the block is a script, run with
  ``bash -euo pipefail``. ```` ```console ```` (or ``shell-session``): lines
  starting with ``$ `` are commands (a trailing ``\\`` continues them), every
  other line is output and is not checked.
* Anything else (``text``, ``json``, no language, ``{directive}``) is output
  or illustration and is not run.
* ```` ```bash skip="why" ```` marks a block that cannot run in a test
  (installs from the network, needs SLURM, several machines or a GPU). myst
  ignores what follows the language, so it still renders as bash. The block is
  reported as a pytest skip with that reason (``-ra``); the reason must not be
  empty and :data:`MAX_SKIPPED_BLOCKS` bounds how many blocks may be skipped.
  No other attribute is accepted (a typo fails the suite).

Where the blocks run: a fresh working directory per page that holds symlinks
to the checkout's top-level entries (``examples/``, ``benchmarks/``,
``.venv``, ...) and to the shared datasets under their file names
(``CollegeMsg.txt``, ``email-Eu-core-temporal.txt.gz``, ``chickenpox.json``,
...; ``england_covid.json`` is the embedded copy), so the docs may use bare
dataset file names and checkout-relative paths; what a block writes stays in
the temporary directory. ``PATH`` starts with the test interpreter's bin
directory (``pyg-dynscale``, ``python``, ``torchrun`` resolve to the venv),
``PYTHONPATH`` is the checkout, ``OMP_NUM_THREADS=1``. Python blocks run as
one rank of a one-process ``torchrun`` (``RANK=0``, ``WORLD_SIZE=1``,
``MASTER_ADDR``/``MASTER_PORT`` set), so ``dist.init_process_group("gloo")``
works. A page's blocks share its directory and run in document order (a
Python item run alone first runs the page's earlier Python blocks). The
per-page processes are forked from one server that imported torch & co. once.
Where ../shared is absent (a clone of the repository alone), those names are
the small stand-ins of tests/fixtures/datasets in the same formats, so every
block still runs (a block's output is not checked); a block that needs a
dataset file that has neither is skipped, naming it.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import select
import shlex
import shutil
import signal as _signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from tests.helpers.datasets import SHARED_DATASET_FILES, SHARED_DATASETS, dataset_file, datasets_dir

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PYTHON_LANGS = {"python", "py", "python3"}
SCRIPT_LANGS = {"bash", "sh", "shell"}
CONSOLE_LANGS = {"console", "shell-session"}
ATTRIBUTES = {"skip"}

#: At most this many blocks may be marked ``skip="..."`` (10 today: network
#: installs and ``make`` set-up, several machines, SLURM). Keep it small.
MAX_SKIPPED_BLOCKS = 12
#: The parser must keep finding at least this many runnable blocks.
MIN_RUN_BLOCKS = 30

BLOCK_TIMEOUT_S = 150

EMBEDDED_COVID = ROOT / "pyg_dynscale" / "data" / "embedded" / "england_covid.json.gz"
# Dataset files the docs may name bare; where each one comes from (../shared's, else its stand-in).
DATASET_FILES = {Path(rel).name: dataset_file(rel) for rel in SHARED_DATASET_FILES}
KNOWN_DATASETS = ("CollegeMsg.txt", "email-Eu-core-temporal.txt.gz", "sx-mathoverflow.txt.gz",
                  "soc-sign-bitcoinotc.csv.gz", "chickenpox.json", "pedalme_london.json",
                  "twitter_tennis_rg17.json")


# ----------------------------------------------------------------------------------------------- parsing
class DocsBlockError(ValueError):
    """A fenced block whose info string breaks the convention."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int            # 1-based line of the opening fence
    lang: str
    source: str          # content, dedented by the fence's indentation
    skip: Optional[str] = None

    @property
    def kind(self) -> Optional[str]:
        if self.lang in PYTHON_LANGS:
            return "python"
        if self.lang in SCRIPT_LANGS:
            return "script"
        if self.lang in CONSOLE_LANGS:
            return "console"
        return None

    @property
    def where(self) -> str:
        try:
            rel = self.page.relative_to(ROOT)
        except ValueError:
            rel = self.page
        return f"{rel}:{self.line}"


_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def parse_info(info: str, where: str) -> tuple[str, dict[str, str]]:
    """``'bash skip="why"'`` -> ``("bash", {"skip": "why"})``."""
    parts = info.strip().split(maxsplit=1)
    lang = parts[0].lower() if parts else ""
    attrs: dict[str, str] = {}
    if len(parts) > 1 and (lang in PYTHON_LANGS | SCRIPT_LANGS | CONSOLE_LANGS):
        try:
            tokens = shlex.split(parts[1])
        except ValueError as exc:
            raise DocsBlockError(f"{where}: cannot parse the fence info {info!r}: {exc}") from None
        for tok in tokens:
            key, eq, value = tok.partition("=")
            if not eq or key not in ATTRIBUTES:
                raise DocsBlockError(f"{where}: unknown fence attribute {tok!r} in {info!r}; "
                                     f"use one of {sorted(ATTRIBUTES)} as key=\"value\".")
            attrs[key] = value
    return lang, attrs


def parse_blocks(page: Path, text: Optional[str] = None) -> list[Block]:
    """All fenced code blocks of a markdown page (backtick and tilde fences)."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        indent, fence, start = len(m["indent"]), m["fence"], i
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i].lstrip())
            i += 1
        i += 1  # the closing fence (or the end of the page: CommonMark closes it there)
        where = f"{page.name}:{start + 1}"
        lang, attrs = parse_info(m["info"], where)
        blocks.append(Block(page, start + 1, lang, "\n".join(body) + "\n", attrs.get("skip")))
    return blocks


def console_script(source: str) -> str:
    """The commands of a console block, each on its own line of the block
    (output lines become blank lines so that ``$LINENO`` maps to the block)."""
    out: list[str] = []
    continuing = False
    for line in source.splitlines():
        if continuing:
            out.append(line)
            continuing = line.rstrip().endswith("\\")
        elif line.startswith("$ "):
            out.append(line[2:])
            continuing = line.rstrip().endswith("\\")
        else:
            out.append("")
    return "\n".join(out) + "\n"


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in parse_blocks(page)]


RUN_BLOCKS = [b for b in all_blocks() if b.kind is not None]


# ----------------------------------------------------------------------------------------------- running
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def block_env(python: bool) -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1")
    env["PYG_DYNSCALE_DATASETS"] = str(datasets_dir())  # ../shared/datasets, or the stand-ins laid out like it
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    if python:  # one rank of a one-process torchrun
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    return env


def make_workdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name != ".git" and not (path / entry.name).exists():
            (path / entry.name).symlink_to(entry)
    for name, src in DATASET_FILES.items():  # copies, not links: a block that writes a file of that name (its own
        if name != "england_covid.json" and not (path / name).exists():  # small chickenpox.json) wrote into
            shutil.copyfile(src, path / name)                            # ../shared through a link (~9 MB in all)
    with gzip.open(EMBEDDED_COVID, "rb") as f:  # PyGT's file, byte-identical (docs/loaders.md)
        (path / "england_covid.json").write_bytes(f.read())
    return path


def _kill(proc: subprocess.Popen) -> None:
    """End ``proc`` and everything it started (its own session)."""
    try:
        os.killpg(proc.pid, _signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(text: str, n: int = 6000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


# A fork server: one process imports torch & co. once (~4 s) and forks a fresh
# child per page, so every page still gets its own process (own namespace, own
# working directory and environment; a crash or a torch.distributed init stays
# there) without paying the imports ten times.
PRELOAD = ("numpy", "torch", "torch_geometric", "torch_geometric_temporal", "pyg_dynscale",
           "pyg_dynscale.data.loaders", "pyg_dynscale.data.synthetic", "pyg_dynscale.data.transfer",
           "pyg_dynscale.partition", "pyg_dynscale.nn", "pyg_dynscale.runtime", "pyg_dynscale.distributed",
           "torch.distributed")

_ZYGOTE = r"""
import importlib, json, os, socket, sys, time, traceback
ctl = socket.socket(fileno=int(sys.argv[1]))
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except Exception:  # a block that needs it reports the error itself
        traceback.print_exc()

def run_blocks(cmd_fd, res_fd):
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    cmd, res = os.fdopen(cmd_fd, "r"), os.fdopen(res_fd, "w")
    for raw in cmd:
        req = json.loads(raw)
        print(f"\n----- {req['where']} -----", flush=True)
        t0 = time.perf_counter()
        try:
            # pad with newlines: tracebacks show the markdown page's own line numbers
            exec(compile("\n" * req["line"] + req["source"], req["path"], "exec"), ns)
            out = {"ok": True}
        except BaseException as exc:
            tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
            out = {"ok": False, "error": "".join(traceback.format_exception(type(exc), exc, tb))}
        sys.stdout.flush(); sys.stderr.flush()
        out["seconds"] = time.perf_counter() - t0
        res.write(json.dumps(out) + "\n"); res.flush()

while True:
    msg, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 3)
    if not msg:
        break
    req = json.loads(msg)
    if req["op"] == "fork":
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                os.setsid()
                ctl.close()
                os.dup2(fds[2], 1); os.dup2(fds[2], 2)
                os.chdir(req["cwd"])
                os.environ.clear(); os.environ.update(req["env"])
                sys.argv = [""]
                run_blocks(fds[0], fds[1])
            except BaseException:
                traceback.print_exc()
                status = 1
            finally:
                sys.stdout.flush(); sys.stderr.flush()
                os._exit(status)
        for fd in fds:
            os.close(fd)
        ctl.send(json.dumps({"pid": pid}).encode())
    elif req["op"] == "wait":
        _, status = os.waitpid(req["pid"], 0)
        ctl.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
"""


class ForkServer:
    def __init__(self, log: Path, preload: tuple[str, ...] = PRELOAD) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _ZYGOTE, str(theirs.fileno()), *preload], pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, env=block_env(python=False),
                start_new_session=True)
        theirs.close()

    def _ask(self, msg: dict, fds: tuple[int, ...] = (), timeout: float = 120) -> dict:
        socket.send_fds(self.sock, [json.dumps(msg).encode()], list(fds))
        self.sock.settimeout(timeout)
        data = self.sock.recv(65536)
        if not data:
            raise RuntimeError(f"the docs fork server exited (status {self.proc.poll()})")
        return json.loads(data)

    def fork(self, cwd: Path, env: dict[str, str], cmd_r: int, res_w: int, log_fd: int) -> int:
        return self._ask({"op": "fork", "cwd": str(cwd), "env": env}, (cmd_r, res_w, log_fd))["pid"]

    def wait(self, pid: int, timeout: float) -> int:
        """Exit status of a forked child; kills its session after ``timeout`` s."""
        try:
            return self._ask({"op": "wait", "pid": pid}, timeout=timeout)["status"]
        except (TimeoutError, socket.timeout):
            _killpg(pid)
            self.sock.settimeout(60)
            return json.loads(self.sock.recv(65536))["status"]

    def close(self) -> None:
        self.sock.close()  # EOF: its loop ends
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill(self.proc)


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, _signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class BlockResult:
    ok: bool
    message: str = ""
    seconds: float = 0.0


class PythonSession:
    """One forked process per page; executes that page's Python blocks in order in one namespace."""

    def __init__(self, blocks: list[Block], workdir: Path, log: Path, server: ForkServer,
                 timeout: float = BLOCK_TIMEOUT_S) -> None:
        self.blocks = blocks
        self.results: dict[int, BlockResult] = {}
        self.timeout = timeout
        self.server = server
        self.log_path = log
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        with open(log, "wb") as f:
            self.pid = server.fork(workdir, block_env(python=True), cmd_r, res_w, f.fileno())
        os.close(cmd_r)
        os.close(res_w)
        self._buf = b""
        self.status: Optional[int] = None
        self.dead: Optional[str] = None

    def _output_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def _read_result(self, deadline: float) -> Optional[dict]:
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._res_r], [], [], left)
            if ready:
                chunk = os.read(self._res_r, 65536)
                if not chunk:
                    return {"eof": True}
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _wait(self, timeout: float = 30) -> int:
        if self.status is None:
            self.status = self.server.wait(self.pid, timeout)
        return self.status

    def _execute(self, index: int) -> BlockResult:
        b = self.blocks[index]
        if self.dead is not None:
            return BlockResult(False, f"{b.where}: not run: {self.dead}")
        offset = os.path.getsize(self.log_path)
        req = {"where": b.where, "path": str(b.page), "line": b.line, "source": b.source}
        try:
            os.write(self._cmd_w, (json.dumps(req) + "\n").encode())
        except BrokenPipeError:
            self.dead = f"the page's Python process had exited (status {self._wait()})"
            return BlockResult(False, f"{b.where}: not run: {self.dead}")
        t0 = time.monotonic()
        r = self._read_result(t0 + self.timeout)
        if r is None:
            _killpg(self.pid)
            self._wait()
            self.dead = f"the block at {b.where} timed out"
            return BlockResult(False, f"{b.where}: timed out after {self.timeout:.0f} s\n"
                                      f"output:\n{_tail(self._output_since(offset))}", self.timeout)
        if r.get("eof"):
            self.dead = f"the page's Python process died in the block at {b.where}"
            return BlockResult(False, f"{b.where}: the Python process died (exit status {self._wait()})\n"
                                      f"output:\n{_tail(self._output_since(offset))}", time.monotonic() - t0)
        if r["ok"]:
            return BlockResult(True, seconds=r["seconds"])
        return BlockResult(False, f"{b.where}: python block failed\n{r['error']}\n"
                                  f"output:\n{_tail(self._output_since(offset))}", r["seconds"])

    def run_through(self, index: int) -> BlockResult:
        """Run every block up to ``index`` (those not run yet) and return block ``index``'s result."""
        for i in range(index + 1):
            if i not in self.results:
                self.results[i] = self._execute(i)
        res = self.results[index]
        failed_before = [self.blocks[i].where for i in range(index) if not self.results[i].ok]
        if not res.ok and failed_before:
            res = BlockResult(False, f"(earlier blocks of this page failed too: {', '.join(failed_before)})\n"
                                     + res.message, res.seconds)
        if len(self.results) == len(self.blocks):
            self.close()
        return res

    def close(self) -> None:
        for fd in (self._cmd_w, self._res_r):  # EOF on its commands: its loop ends
            try:
                os.close(fd)
            except OSError:
                pass
        self._wait()


def run_shell(block: Block, workdir: Path, timeout: float = BLOCK_TIMEOUT_S) -> BlockResult:
    script = console_script(block.source) if block.kind == "console" else block.source
    if not script.strip():
        return BlockResult(False, f"{block.where}: the {block.lang} block has no command to run")
    where = block.where.rsplit(":", 1)[0]
    trap = (f"trap 'echo \"docs block failed: exit status $? at {where}:$((LINENO + {block.line - 1})): "
            f"$BASH_COMMAND\" >&2' ERR\n")
    # the trap is the script's line 1, so the block's line k (page line block.line + k) is LINENO k + 1
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", trap + script], cwd=workdir,
                            env=block_env(python=False), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    t0 = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        out = proc.stdout.read() if proc.stdout else b""
        return BlockResult(False, f"{block.where}: timed out after {timeout:.0f} s\n"
                                  f"output:\n{_tail(out.decode('utf-8', 'replace'))}", timeout)
    text = out.decode("utf-8", "replace")
    if proc.returncode != 0:
        return BlockResult(False, f"{block.where}: {block.lang} block failed (exit status {proc.returncode})\n"
                                  f"output:\n{_tail(text)}", time.monotonic() - t0)
    return BlockResult(True, seconds=time.monotonic() - t0)


class Runner:
    """Working directories and Python sessions, one per page."""

    def __init__(self, base: Path, preload: tuple[str, ...] = PRELOAD) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.preload = preload
        self.server: Optional[ForkServer] = None
        self.workdirs: dict[Path, Path] = {}
        self.sessions: dict[Path, PythonSession] = {}

    def workdir(self, page: Path) -> Path:
        if page not in self.workdirs:
            slug = re.sub(r"[^A-Za-z0-9]+", "_", str(page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name))
            self.workdirs[page] = make_workdir(self.base / slug)
        return self.workdirs[page]

    def python(self, block: Block) -> BlockResult:
        page_blocks = [b for b in parse_blocks(block.page) if b.kind == "python" and b.skip is None]
        if block.page not in self.sessions:
            if self.server is None:
                self.server = ForkServer(self.base / "fork-server.log", self.preload)
            wd = self.workdir(block.page)
            self.sessions[block.page] = PythonSession(page_blocks, wd, self.base / (wd.name + ".log"), self.server)
        return self.sessions[block.page].run_through(page_blocks.index(block))

    def run(self, block: Block) -> BlockResult:
        if block.kind == "python":
            return self.python(block)
        return run_shell(block, self.workdir(block.page))

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()
        if self.server is not None:
            self.server.close()


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    r = Runner(tmp_path_factory.mktemp("docs_blocks"))
    yield r
    r.close()


def _missing_datasets(block: Block) -> list[str]:
    """Shared dataset files the block needs that are absent; for a Python block,
    those its page's earlier Python blocks need too (they share a namespace)."""
    if block.kind == "python":
        sources = [b.source for b in parse_blocks(block.page) if b.kind == "python" and b.line <= block.line]
    else:
        sources = [block.source]
    return [name for name in KNOWN_DATASETS if any(name in s for s in sources) and name not in DATASET_FILES]


def _param(b: Block):
    marks = [pytest.mark.skip(reason=f"{b.where}: {b.skip}")] if b.skip is not None else []
    return pytest.param(b, id=b.where, marks=marks)


# ----------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("block", [_param(b) for b in RUN_BLOCKS])
def test_doc_block(block: Block, runner: Runner) -> None:
    missing = _missing_datasets(block)
    if missing:
        pytest.skip(f"{block.where}: needs the shared dataset(s) {missing}, not found in {SHARED_DATASETS} "
                    "(set PYG_DYNSCALE_DATASETS)")
    res = runner.run(block)
    if not res.ok:
        pytest.fail(res.message, pytrace=False)


def test_skips_are_explained_and_few() -> None:
    skipped = [b for b in RUN_BLOCKS if b.skip is not None]
    for b in skipped:
        assert b.skip.strip(), f"{b.where}: skip=\"...\" needs a reason"
    assert len(skipped) <= MAX_SKIPPED_BLOCKS, (
        f"{len(skipped)} doc blocks are marked skip (at most {MAX_SKIPPED_BLOCKS}): "
        + ", ".join(b.where for b in skipped))
    assert len(RUN_BLOCKS) - len(skipped) >= MIN_RUN_BLOCKS


def test_every_page_is_parsed() -> None:
    assert {p.name for p in PAGES} >= {"README.md", "quickstart.md", "loaders.md", "cli.md"}
    assert all(p.is_file() for p in PAGES)


# ----------------------------------------------------------------------------------------------- the harness itself
SAMPLE = textwrap.dedent('''\
    # sample

    ```python
    x = 1
    ```

    ```text
    not run
    ```

    ```python
    assert x == 2, "x is one"
    ```

    ```bash skip="needs the network"
    pip install something
    ```

    ```console
    $ echo hello
    hello
    $ false
    ```

    ~~~sh
    true
    ~~~
    ''')


def test_harness_parses_and_fails_loudly(tmp_path: Path) -> None:
    page = tmp_path / "sample.md"
    page.write_text(SAMPLE)
    blocks = parse_blocks(page)
    assert [(b.line, b.lang, b.kind) for b in blocks] == [
        (3, "python", "python"), (7, "text", None), (11, "python", "python"), (15, "bash", "script"),
        (19, "console", "console"), (25, "sh", "script")]
    assert blocks[3].skip == "needs the network" and blocks[0].skip is None
    assert console_script(blocks[4].source) == "echo hello\n\nfalse\n"

    runner = Runner(tmp_path / "work", preload=())
    try:
        assert runner.run(blocks[0]).ok
        res = runner.run(blocks[2])
        assert not res.ok
        assert "sample.md:11" in res.message and "x is one" in res.message
        assert 'sample.md", line 12' in res.message  # the traceback names the markdown line
        res = runner.run(blocks[4])
        assert not res.ok and "sample.md:22" in res.message and "hello" in res.message
        assert runner.run(blocks[5]).ok
    finally:
        runner.close()

    with pytest.raises(DocsBlockError, match="unknown fence attribute"):
        parse_blocks(page, "```bash skipp=\"x\"\nls\n```\n")
    with pytest.raises(DocsBlockError, match="unknown fence attribute"):
        parse_blocks(page, "```python skip\nx = 1\n```\n")
    assert parse_blocks(page, "```bash skip=\"\"\nls\n```\n")[0].skip == ""  # test_skips... rejects it


def test_harness_timeout_and_crash(tmp_path: Path) -> None:
    page = tmp_path / "crash.md"
    page.write_text("```python\nimport os\nos._exit(3)\n```\n\n```python\nx = 1\n```\n")
    blocks = parse_blocks(page)
    wd = make_workdir(tmp_path / "wd")
    server = ForkServer(tmp_path / "server.log", preload=())
    try:
        s = PythonSession(blocks, wd, tmp_path / "log", server)
        r = s.run_through(0)
        assert not r.ok and "died (exit status 3)" in r.message and "crash.md:1" in r.message
        r = s.run_through(1)
        assert not r.ok and "not run" in r.message
        page.write_text("```python\nimport time\nprint('started')\ntime.sleep(30)\n```\n")
        s = PythonSession(parse_blocks(page), wd, tmp_path / "log2", server, timeout=1)
        r = s.run_through(0)
        assert not r.ok and "timed out" in r.message and "started" in r.message
        s.close()
    finally:
        server.close()
    page.write_text("```bash\nsleep 30\n```\n")
    r = run_shell(parse_blocks(page)[0], wd, timeout=1)
    assert not r.ok and "timed out" in r.message
