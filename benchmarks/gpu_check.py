r"""``make gpu-check``: the CUDA tests and the GPU benchmark on this machine, recorded in docs/gpu.md.

Runs with the interpreter it is started with -- the one that holds the
machine's CUDA build of torch and PyG -- and installs nothing: the checkout
is put on ``PYTHONPATH`` (no ``pip install -e .``, which would need build
dependencies from the network and change the user's environment; it only
needs pyg_dynscale's runtime dependencies, numpy, tqdm and numba, present).
A bare CUDA box is enough: without PyGT, torch-scatter / torch-sparse or
pytest-timeout the tests that need them skip, the others run.

Without a CUDA device it prints one line and exits 0. With one it runs, in
order of risk -- the paths that never ran on a GPU first, the benchmark last
-- each step in its own process group with its own timeout (a step that
fails or hangs is killed and recorded, and the next one runs):

1. the CUDA tests (``pytest -m cuda``) in :data:`STEPS`: event streams on
   every placement; the stale cache, budgeted fusion, TM-GCN and continued
   evaluation; windowed training; then every other CUDA test (pass / fail /
   skip counts, the names of failures with their first line, skip reasons,
   the host synchronizations the tests counted on the GPU, and the test that
   was running when a step timed out),
2. ``benchmarks/bench_gpu.py`` (its JSON next to the report when ``--json``
   is given),

and after each step it writes the dated report section, so a run cut short
still leaves what it measured: date, device, driver, CUDA and torch
versions, the tests step by step, every benchmark figure as markdown tables
and the rows that did not run, with why. The section is prepended to
``--report`` (docs/gpu.md by default; created if missing); each step's full
output goes to ``--logs`` (a temporary folder by default).

``--quick``: tests and benchmark in under 8 minutes on one GPU (the steps'
timeouts and the benchmark's sum to :data:`QUICK_TOTAL_S`; ``bench_gpu.py
--quick``: small graphs, a 20 s CUDA-only search). ``--collect-only``: no
GPU needed; collects the CUDA tests as the run would (``pytest -m cuda
--collect-only -q tests``), prints them step by step with the plan's
timeouts, exits 1 when a test module fails to be collected.

Exit status: 0 when the tests passed and every benchmark row ran or was
skipped for a stated reason; 1 otherwise (the report is written either way);
2 when torch or pyg_dynscale cannot be imported with this interpreter.

    make gpu-check                                 # python3
    make gpu-check PYTHON=/opt/conda/bin/python GPU_CHECK_ARGS=--quick
    python3 benchmarks/gpu_check.py --quick --report /tmp/gpu.md --logs /tmp/gpu-logs
    python3 benchmarks/gpu_check.py --collect-only --quick
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
NO_GPU_LINE = "no CUDA device: nothing to check"
#: everything above this line of docs/gpu.md is the fixed intro; reports go below it, newest first
REPORTS_MARKER = "<!-- gpu-check: reports below, newest first -->"
PLACEHOLDER_BEGIN = "<!-- gpu-check: placeholder -->"
PLACEHOLDER_END = "<!-- gpu-check: end of placeholder -->"
#: the pytest plugin that writes each test's outcome as it comes (benchmarks/gpu_check_plugin.py)
PLUGIN = "benchmarks.gpu_check_plugin"
RESULTS_ENV = "PYG_DYNSCALE_GPU_CHECK_RESULTS"
#: pytest-timeout absent: pyproject's ``timeout`` key is unknown to pytest (a warning, not an error); silenced
PYTEST_FLAGS = ("-q", "-p", "no:cacheprovider", "-p", PLUGIN, "-W", "ignore:Unknown config option::pytest.PytestConfigWarning")


@dataclass(frozen=True)
class Step:
    """A group of CUDA tests run by one pytest process: ``paths`` relative to the checkout
    (``()``: every CUDA test no earlier step holds); seconds allowed with and without ``--quick``."""

    label: str
    paths: tuple[str, ...]
    quick_s: float
    full_s: float


#: in order of risk: what never ran on a GPU first
STEPS: tuple[Step, ...] = (
    Step("event streams on every placement", ("tests/ctdg",), 110, 1200),
    Step("stale cache, budgeted fusion, TM-GCN, continued evaluation",
         ("tests/distributed/test_cuda_exchange_paths.py", "tests/runtime/test_cuda_tmgcn_evaluation.py"), 80, 1200),
    Step("windowed training", ("tests/windows",), 60, 900),
    Step("the CUDA tests that ran on a GPU before", (), 140, 2400),
)
#: bench_gpu.py's seconds with and without --quick
BENCH_QUICK_S, BENCH_FULL_S = 80.0, 3600.0
#: --quick: tests and benchmark under 8 minutes on one GPU
QUICK_TOTAL_S = 480.0


def child_env() -> dict[str, str]:
    """This environment with the checkout first on ``PYTHONPATH`` (pyg_dynscale without installing it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def installed(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# ------------------------------------------------------------------ processes
def _pump(src: IO[bytes], sinks: Sequence[IO[str]]) -> None:
    for raw in iter(src.readline, b""):
        line = raw.decode(errors="replace")
        for sink in sinks:
            sink.write(line)
            sink.flush()


def _kill_group(proc: subprocess.Popen) -> None:
    """The child and everything it started (spawned ranks, their helpers): TERM, then KILL what is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    try:  # the leader may be gone while ranks it spawned are not
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_logged(cmd: list[str], timeout: float, log: Path, cwd: Path = ROOT,
               env: Optional[dict[str, str]] = None, echo: bool = True) -> tuple[Optional[int], float]:
    """``(exit status or None on timeout, seconds)`` of ``cmd`` in a new process group, its output
    to ``log`` (and to stdout when ``echo``); past ``timeout`` the whole group is killed."""
    t0 = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env or child_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        pump = threading.Thread(target=_pump, args=(proc.stdout, [out] + ([sys.stdout] if echo else [])),
                                daemon=True)
        pump.start()
        try:
            rc: Optional[int] = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = None
        pump.join(timeout=10)  # a grandchild that left the group may hold the pipe: do not wait for it
    return rc, time.perf_counter() - t0


# ------------------------------------------------------------------ CUDA tests
def step_of(nodeid: str, steps: Sequence[Step] = STEPS) -> int:
    """The index of the step that runs the test ``nodeid`` (``tests/x/test_y.py::test_z[...]``)."""
    path = nodeid.split("::", 1)[0]
    for i, step in enumerate(steps):
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in step.paths):
            return i
    rest = [i for i, s in enumerate(steps) if not s.paths]
    return rest[0] if rest else -1


def step_args(i: int, steps: Sequence[Step] = STEPS) -> list[str]:
    """pytest's arguments of step ``i``: its paths, or ``tests`` without every earlier step's."""
    if steps[i].paths:
        return list(steps[i].paths)
    return ["tests"] + [f"--ignore={p}" for s in steps[:i] for p in s.paths]


def step_timeouts(quick: bool, tests_timeout: Optional[float], steps: Sequence[Step] = STEPS) -> list[float]:
    """Seconds per step: ``--quick``'s or the full run's, scaled to sum to ``tests_timeout`` when given."""
    base = [s.quick_s if quick else s.full_s for s in steps]
    if tests_timeout is None:
        return base
    return [b * tests_timeout / sum(base) for b in base]


def pytest_command(args: list[str], per_test: Optional[float]) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", *args, *PYTEST_FLAGS]
    if per_test is not None and installed("pytest_timeout"):  # one hanging test leaves the step time for the others
        cmd += ["-o", f"timeout={max(int(per_test), 1)}"]
    return cmd


def read_results(path: Path) -> tuple[dict[str, dict[str, Any]], Optional[str]]:
    """``({nodeid: result}, the test that started last without a result)`` from the plugin's lines."""
    results: dict[str, dict[str, Any]] = {}
    running = None
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    if not path.is_file():
        return results, None
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:  # a line cut by the kill
            continue
        if rec.get("event") == "start":
            running = rec["nodeid"]
        elif rec.get("event") == "result":
            old = results.get(rec["nodeid"])
            if old is None or rank.get(rec["outcome"], 3) >= rank.get(old["outcome"], 3):  # a teardown error wins
                results[rec["nodeid"]] = rec
            if rec["nodeid"] == running:
                running = None
    return results, running


def run_test_step(i: int, timeout: float, logs: Path, steps: Sequence[Step] = STEPS, cwd: Path = ROOT,
                  echo: bool = True) -> dict[str, Any]:
    """Step ``i``: its pytest process under ``timeout``; counts, failures, skips, host syncs."""
    step = steps[i]
    out = logs / f"step{i + 1}.jsonl"
    out.unlink(missing_ok=True)
    cmd = pytest_command(step_args(i, steps), per_test=0.6 * timeout)
    print(f">>> step {i + 1}/{len(steps)}: {step.label} ({timeout:.0f} s): {' '.join(cmd[2:])}", flush=True)
    env = child_env()
    env[RESULTS_ENV] = str(out)
    try:
        rc, seconds = run_logged(cmd, timeout, logs / f"step{i + 1}.log", cwd=cwd, env=env, echo=echo)
    except OSError as exc:
        return {"label": step.label, "status": "failed to start", "reason": str(exc), "seconds": 0.0,
                "timeout": timeout, **summarize({})}
    results, running = read_results(out)
    res = {"label": step.label, "paths": list(step.paths), "timeout": timeout, "seconds": seconds,
           "returncode": rc, **summarize(results)}
    if rc is None:
        res.update(status="timeout", reason=f"killed after {timeout:.0f} s" + (f" in `{running}`" if running else ""),
                   running=running)
    else:
        res["status"] = "ran"
        if rc == 5:  # pytest: no test collected
            res["reason"] = "no CUDA test here"
    return res


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures, skips, syncs = [], [], []
    for nodeid, r in results.items():
        kind = {"passed": "passed", "failed": "failed", "error": "errors", "skipped": "skipped"}.get(r["outcome"], "errors")
        counts[kind] += 1
        msg = r.get("message") or ""
        if kind in ("failed", "errors"):
            failures.append(f"{nodeid}" + (" (error)" if kind == "errors" else "") + (f": {msg}" if msg else ""))
        elif kind == "skipped":
            skips.append(f"{nodeid}: {msg}" if msg else nodeid)
        for key, value in r.get("properties") or []:
            if str(key).startswith("host_syncs"):
                syncs.append(f"{nodeid}: {key.split(':', 1)[1] if ':' in key else key} = {value}")
    return {**counts, "failures": failures, "skips": skips, "host_syncs": syncs}


def combine_steps(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The tests' summary over the steps (what :func:`render_section` shows first)."""
    done = [s for s in steps if s.get("status") not in (None, "pending")]
    out: dict[str, Any] = {"status": "ran" if done else "not run", "steps": list(steps),
                           "seconds": sum(s.get("seconds", 0.0) for s in done)}
    for key in ("passed", "failed", "errors", "skipped"):
        out[key] = sum(s.get(key, 0) for s in done)
    for key in ("failures", "skips", "host_syncs"):
        out[key] = [x for s in done for x in s.get(key, [])]
    bad = [s for s in done if s["status"] != "ran" or s.get("returncode") not in (0, 5)]
    out["returncode"] = 0 if not bad else 1
    if not done:
        out["reason"] = "no step ran"
    return out


def tests_ok(tests: dict[str, Any]) -> bool:
    if "steps" in tests:
        return all(s.get("status") == "ran" and s.get("returncode") in (0, 5) for s in tests["steps"])
    return tests.get("status") == "ran" and tests.get("returncode") in (0, 5)


def run_cuda_tests(timeouts: Sequence[float], logs: Path, on_step: Callable[[dict[str, Any]], None],
                   steps: Sequence[Step] = STEPS, cwd: Path = ROOT, echo: bool = True) -> dict[str, Any]:
    """Every step in order, each under its timeout; ``on_step(summary)`` after each (the report written)."""
    try:
        import pytest  # noqa: F401
    except ImportError:
        return {"status": "not run", "reason": f"pytest is not installed for {sys.executable}"}
    done: list[dict[str, Any]] = [{"label": s.label, "status": "pending", "timeout": t} for s, t in zip(steps, timeouts)]
    for i in range(len(steps)):
        done[i] = run_test_step(i, timeouts[i], logs, steps, cwd=cwd, echo=echo)
        on_step(combine_steps(done))
    return combine_steps(done)


# ------------------------------------------------------------------ collection only (no GPU needed)
def collect_only(args: argparse.Namespace) -> int:
    """``pytest -m cuda --collect-only -q tests`` as the run does it; the tests step by step."""
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "--collect-only", "tests", *PYTEST_FLAGS]
    print(f">>> {' '.join(cmd[2:])}", flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=args.tests_timeout or 600)
    ids = [ln.strip() for ln in proc.stdout.splitlines() if re.match(r"^tests/\S+::\S", ln.strip())]
    problems = [ln for ln in proc.stdout.splitlines() if ln.startswith(("ERROR ", "E   "))]
    timeouts = step_timeouts(args.quick, args.tests_timeout)
    for i, step in enumerate(STEPS):
        mine = [t for t in ids if step_of(t) == i]
        where = ", ".join(step.paths) or "tests (the rest)"
        print(f"step {i + 1} ({timeouts[i]:.0f} s): {step.label} [{where}]: {len(mine)} tests")
        for t in mine:
            print(f"  {t}")
    bench_s = bench_timeout(args)
    total = sum(timeouts) + bench_s
    print(f"benchmark ({bench_s:.0f} s): benchmarks/bench_gpu.py" + (" --quick" if args.quick else "")
          + (f" {args.bench_args}" if args.bench_args else ""))
    print(f"plan: {len(ids)} CUDA tests in {len(STEPS)} steps, {sum(timeouts):.0f} s + benchmark {bench_s:.0f} s = "
          f"{total:.0f} s" + (f" (--quick: under {QUICK_TOTAL_S:.0f} s)" if args.quick else ""))
    skipped = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED")]
    if skipped:  # modules that skip as a whole (pytest.importorskip's rule): a missing optional package
        print("skipped at collection:\n" + "\n".join(f"  {ln}" for ln in skipped))
    print(f"pytest exit {proc.returncode}; pytest-timeout {'installed' if installed('pytest_timeout') else 'absent'}")
    if proc.returncode not in (0, 5):
        print("\n".join(problems[-40:]) or proc.stdout[-3000:] + proc.stderr[-3000:])
        return 1
    return 0


# ------------------------------------------------------------------ benchmark
def bench_timeout(args: argparse.Namespace) -> float:
    if args.bench_timeout is not None:
        return args.bench_timeout
    return BENCH_QUICK_S if args.quick else BENCH_FULL_S


def run_bench(args: argparse.Namespace, out_json: Path, logs: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--out", str(out_json)]
    cmd += ["--quick"] if args.quick else []
    cmd += args.bench_args.split()
    timeout = bench_timeout(args)
    print(f">>> benchmark ({timeout:.0f} s): {' '.join(cmd[1:])}", flush=True)
    log = logs / "bench_gpu.log"
    rc, seconds = run_logged(cmd, timeout, log)
    tail = log.read_text().splitlines()[-25:] if log.is_file() else []
    if rc is None:
        return {"status": "timeout", "reason": f"bench_gpu.py killed after {timeout:.0f} s", "log_tail": tail}
    if not out_json.is_file():
        return {"status": "failed", "reason": f"bench_gpu.py exited {rc} without writing its JSON", "log_tail": tail}
    return {"status": "ran", "returncode": rc, "results": json.loads(out_json.read_text())}


# ------------------------------------------------------------------ docs/gpu.md
def git_revision() -> Optional[str]:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _render_tests(tests: dict[str, Any]) -> list[str]:
    lines = []
    if tests.get("status") != "ran":
        return [f"{tests.get('status', 'not run')}: {tests.get('reason', '')}"]
    lines.append(f"passed {tests.get('passed', 0)}, failed {tests.get('failed', 0)}, errors {tests.get('errors', 0)}, "
                 f"skipped {tests.get('skipped', 0)} ({tests['seconds']:.0f} s"
                 + (f", pytest exit {tests['returncode']}" if "steps" not in tests else "")
                 + (f": {tests['reason']}" if tests.get("reason") else "") + ")")
    if tests.get("steps"):
        lines += ["", "| step | passed | failed | errors | skipped | seconds | timeout s | result |",
                  "|---|---|---|---|---|---|---|---|"]
        for i, s in enumerate(tests["steps"]):
            if s.get("status") == "pending":
                result, counts, secs = "not run yet", ["", "", "", ""], ""
            else:
                result = ("ok" if s.get("returncode") in (0, 5) else f"pytest exit {s.get('returncode')}") \
                    if s.get("status") == "ran" else s.get("status", "")
                if s.get("reason"):
                    result += f": {s['reason']}"
                counts = [str(s.get(k, 0)) for k in ("passed", "failed", "errors", "skipped")]
                secs = f"{s.get('seconds', 0.0):.0f}"
            lines.append(f"| {i + 1}. {s['label']} | " + " | ".join(counts) + f" | {secs} | {s.get('timeout', 0):.0f} | "
                         + result.replace("|", "/") + " |")
    if tests.get("failures"):
        lines += ["", "Failures:", ""] + [f"- `{f}`" if ": " not in f else f"- `{f.split(': ', 1)[0]}`: "
                                          f"{f.split(': ', 1)[1]}" for f in tests["failures"]]
    if tests.get("skips"):
        lines += ["", "Skipped:", ""] + [f"- `{f}`" for f in tests["skips"]]
    if tests.get("host_syncs"):
        lines += ["", "Host synchronizations the tests counted on the GPU (`torch.cuda.set_sync_debug_mode(\"warn\")` "
                  "around one step; recorded, not asserted):", ""] + [f"- `{f}`" for f in tests["host_syncs"]]
    return lines


def render_section(env: dict[str, Any], tests: dict[str, Any], bench: dict[str, Any]) -> str:
    """One dated report section (markdown)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_gpu import render_markdown, tables

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"### {date}: {env.get('device_name') or env.get('device')}", "",
             "| | |", "|---|---|"]
    mem = env.get("device_memory_bytes")
    for key, value in (("device", f"{env.get('device_name')}" + (f" ({mem / 2**30:.0f} GiB)" if mem else "")),
                       ("driver", env.get("driver") or "n/a"), ("nvidia-smi", env.get("nvidia_smi") or "n/a"),
                       ("CUDA (torch build)", env.get("torch_cuda")), ("torch", env.get("torch")),
                       ("PyG", env.get("pyg")), ("PyGT", env.get("pygt") or "not installed"),
                       ("torch-scatter / torch-sparse", f"{env.get('torch_scatter') or 'not installed'} / "
                                                        f"{env.get('torch_sparse') or 'not installed'}"),
                       ("Python", env.get("python")), ("checkout", git_revision() or "n/a"),
                       ("command", "make gpu-check " + " ".join(sys.argv[1:]))):
        lines.append(f"| {key} | {str(value).replace('|', '/')} |")
    lines += ["", "#### CUDA tests (`pytest -m cuda tests/`" + (", in order of risk" if tests.get("steps") else "")
              + ")", ""]
    lines += _render_tests(tests)
    lines += ["", "#### Benchmarks (`benchmarks/bench_gpu.py`)", ""]
    if bench.get("status") == "ran":
        res = bench["results"]
        lines.append(f"{res.get('seconds', 0):.0f} s, exit {bench['returncode']}; ratios are measured in this run "
                     f"against the alternative on the same device (goal for a.: >= {res.get('goal_ratio')}x per row).")
        lines += ["", render_markdown(tables(res), level="#####").rstrip(), "", "##### Rows that did not run", ""]
        lines += [f"- {s}" for s in res.get("skipped", [])] or ["- none"]
    else:
        lines.append(f"{bench.get('status')}: {bench.get('reason', '')}")
        if bench.get("log_tail"):
            lines += ["", "Its last lines:", "", "```text", *bench["log_tail"], "```"]
    return "\n".join(lines).rstrip() + "\n"


def page_with(text: str, section: str) -> str:
    """``text`` (a report page) with ``section`` right below its intro (newest first); the
    placeholder saying that no run was recorded goes away with the first report."""
    if REPORTS_MARKER not in text:
        text = text.rstrip() + f"\n\n{REPORTS_MARKER}\n"
    head, rest = text.split(REPORTS_MARKER, 1)
    if PLACEHOLDER_BEGIN in rest and PLACEHOLDER_END in rest:
        before, after = rest.split(PLACEHOLDER_BEGIN, 1)
        rest = before + after.split(PLACEHOLDER_END, 1)[1]
    rest = rest.strip("\n")
    return head + REPORTS_MARKER + "\n\n" + section.rstrip() + "\n" + (f"\n{rest}\n" if rest else "")


def prepend_report(path: Path, section: str) -> None:
    """Insert ``section`` right below the intro of ``path`` (newest first; the page is created if missing)."""
    text = path.read_text() if path.is_file() else f"# GPU check\n\n{REPORTS_MARKER}\n"
    path.write_text(page_with(text, section))


# ------------------------------------------------------------------ main
def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true",
                    help=f"tests and benchmark in under {QUICK_TOTAL_S / 60:.0f} minutes: the steps' quick timeouts, "
                         "bench_gpu.py --quick")
    ap.add_argument("--report", default=str(ROOT / "docs" / "gpu.md"),
                    help="the page the report is prepended to (created if missing), rewritten after every step")
    ap.add_argument("--logs", default=None, help="each step's full output here (default: a temporary folder)")
    ap.add_argument("--json", default=None, help="also keep the benchmark's JSON here")
    ap.add_argument("--bench-args", default="", help="more arguments for bench_gpu.py, e.g. '--search-budget 120'")
    ap.add_argument("--no-tests", action="store_true", help="skip the CUDA tests")
    ap.add_argument("--no-bench", action="store_true", help="skip the benchmark")
    ap.add_argument("--tests-timeout", type=float, default=None,
                    help="seconds for all test steps together, shared in the plan's proportions (default: the sum of "
                         "the steps' own)")
    ap.add_argument("--bench-timeout", type=float, default=None,
                    help=f"seconds for the benchmark (default {BENCH_FULL_S:.0f}, --quick {BENCH_QUICK_S:.0f})")
    ap.add_argument("--collect-only", action="store_true",
                    help="no GPU needed: list the CUDA tests step by step as the run would collect them, and the plan")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError as exc:
        print(f"torch does not import with {sys.executable} ({exc}): run `make gpu-check PYTHON=...` with the "
              "interpreter that holds your CUDA build of torch")
        return 2
    if args.collect_only:
        return collect_only(args)
    if not torch.cuda.is_available():
        print(NO_GPU_LINE)
        return 0
    sys.path.insert(0, str(ROOT))
    try:
        import pyg_dynscale  # noqa: F401  (from the checkout: nothing is installed)
    except ImportError as exc:
        print(f"pyg_dynscale does not import from {ROOT} with {sys.executable}: {exc}\n"
              "its runtime dependencies (torch-geometric, numpy, tqdm, numba) must be installed for this interpreter")
        return 2
    print(f">>> gpu-check with {sys.executable}: torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    env = _environment(args)
    report = Path(args.report)
    page = report.read_text() if report.is_file() else f"# GPU check\n\n{REPORTS_MARKER}\n"
    tmp = tempfile.TemporaryDirectory()
    logs = Path(args.logs) if args.logs else Path(tmp.name)
    timeouts = step_timeouts(args.quick, args.tests_timeout)
    pending_tests = {"status": "running", "reason": "the CUDA tests have not finished"}
    pending_bench = {"status": "not run yet", "reason": "runs after the tests"}
    state = {"tests": pending_tests, "bench": pending_bench}

    def write() -> None:  # after every step: a run cut short keeps what it measured
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(page_with(page, render_section(env, state["tests"], state["bench"])))

    write()
    if args.no_tests:
        state["tests"] = {"status": "not run", "reason": "--no-tests"}
    else:
        state["tests"] = run_cuda_tests(timeouts, logs, lambda t: (state.update(tests=t), write()))
    write()
    out_json = Path(args.json) if args.json else logs / "bench_gpu.json"
    state["bench"] = {"status": "not run", "reason": "--no-bench"} if args.no_bench else run_bench(args, out_json, logs)
    if state["bench"].get("status") == "ran":
        env = state["bench"]["results"]["env"]
    write()
    tests, bench = state["tests"], state["bench"]
    ok = tests_ok(tests) or args.no_tests
    ok = ok and (args.no_bench or (bench.get("status") == "ran" and bench["returncode"] == 0))
    print(f">>> report prepended to {report}" + (f", logs in {logs}" if args.logs else "") + f"; CUDA tests: "
          f"{tests.get('status')}" + (f" (passed {tests.get('passed', 0)}, failed {tests.get('failed', 0)}, errors "
                                      f"{tests.get('errors', 0)}, skipped {tests.get('skipped', 0)})"
                                      if tests.get("status") == "ran" else "")
          + f"; benchmark: {bench.get('status')}" + ("" if ok else "  -> FAILED"))
    tmp.cleanup()
    return 0 if ok else 1


def _environment(args: argparse.Namespace) -> dict[str, Any]:
    """bench_gpu.py's record of the machine (device, driver, versions), taken before the first step."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_gpu import environment

        return environment(torch.device("cuda", 0), argparse.Namespace(quick=args.quick))
    except Exception as exc:  # noqa: BLE001 - the report still says what it can
        return {"device": "cuda", "device_name": torch.cuda.get_device_name(0), "torch": torch.__version__,
                "torch_cuda": torch.version.cuda, "pyg": _pyg_version(), "note": f"environment: {exc}"}


def _pyg_version() -> Optional[str]:
    try:
        import torch_geometric

        return torch_geometric.__version__
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
