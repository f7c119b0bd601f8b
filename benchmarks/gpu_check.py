r"""``make gpu-check``: the CUDA tests and the GPU benchmark on this machine, recorded in docs/gpu.md.

Runs with the interpreter it is started with -- the one that holds the
machine's CUDA build of torch and PyG -- and installs nothing: the checkout
is put on ``PYTHONPATH`` (no ``pip install -e .``, which would need build
dependencies from the network and change the user's environment; it only
needs pyg_dynscale's runtime dependencies, numpy, tqdm and numba, present).

Without a CUDA device it prints one line and exits 0. With one it

1. runs the CUDA tests, ``pytest -m cuda tests/`` (pass/fail/skip counts and
   the names of the failures),
2. runs ``benchmarks/bench_gpu.py`` (its JSON next to the report when
   ``--json`` is given),
3. prepends a dated section to docs/gpu.md: date, device, driver, CUDA and
   torch versions, the test counts, every benchmark figure as markdown
   tables and the rows that did not run, with why.

Exit status: 0 when the tests passed and every benchmark row ran or was
skipped for a stated reason; 1 otherwise (the report is written either way);
2 when torch or pyg_dynscale cannot be imported with this interpreter.

    make gpu-check                                 # python3
    make gpu-check PYTHON=/opt/conda/bin/python GPU_CHECK_ARGS=--quick
    python3 benchmarks/gpu_check.py --help
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
NO_GPU_LINE = "no CUDA device: nothing to check"
#: everything above this line of docs/gpu.md is the fixed intro; reports go below it, newest first
REPORTS_MARKER = "<!-- gpu-check: reports below, newest first -->"
PLACEHOLDER_BEGIN = "<!-- gpu-check: placeholder -->"
PLACEHOLDER_END = "<!-- gpu-check: end of placeholder -->"


def child_env() -> dict[str, str]:
    """This environment with the checkout first on ``PYTHONPATH`` (pyg_dynscale without installing it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# ------------------------------------------------------------------ CUDA tests
def run_cuda_tests(timeout: float) -> dict[str, Any]:
    """``pytest -m cuda tests/``: counts, failure names, seconds (``status`` says whether it ran)."""
    try:
        import pytest  # noqa: F401
    except ImportError:
        return {"status": "not run", "reason": f"pytest is not installed for {sys.executable}"}
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "cuda-tests.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "tests", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
        print(f">>> {' '.join(cmd[2:])}", flush=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "reason": f"pytest ran past {timeout:.0f} s", "seconds": timeout}
        res = parse_junit(xml) if xml.is_file() else {}
    res.update(status="ran", returncode=proc.returncode, seconds=time.perf_counter() - t0)
    if proc.returncode == 5:  # pytest: no test collected (no test carries the cuda marker)
        res["reason"] = "no test carries the cuda marker"
    return res


def parse_junit(path: Path) -> dict[str, Any]:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures: list[str] = []
    skips: list[str] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            counts["failed"] += 1
            failures.append(name)
        elif "error" in kinds:
            counts["errors"] += 1
            failures.append(f"{name} (error)")
        elif "skipped" in kinds:
            counts["skipped"] += 1
            why = next((c.get("message", "") for c in case if c.tag == "skipped"), "")
            skips.append(f"{name}: {why}" if why else name)
        else:
            counts["passed"] += 1
    return {**counts, "failures": failures, "skips": skips}


def tests_ok(tests: dict[str, Any]) -> bool:
    return tests.get("status") == "ran" and tests.get("returncode") in (0, 5)


# ------------------------------------------------------------------ benchmark
def run_bench(args: argparse.Namespace, out_json: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--out", str(out_json)]
    cmd += ["--quick"] if args.quick else []
    cmd += args.bench_args.split()
    print(f">>> {' '.join(cmd[1:])}", flush=True)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), timeout=args.bench_timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "reason": f"bench_gpu.py ran past {args.bench_timeout:.0f} s"}
    if not out_json.is_file():
        return {"status": "failed", "reason": f"bench_gpu.py exited {proc.returncode} without writing its JSON"}
    return {"status": "ran", "returncode": proc.returncode, "results": json.loads(out_json.read_text())}


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
    lines += ["", "#### CUDA tests (`pytest -m cuda tests/`)", ""]
    if tests.get("status") == "ran":
        lines.append(f"passed {tests.get('passed', 0)}, failed {tests.get('failed', 0)}, errors {tests.get('errors', 0)}, "
                     f"skipped {tests.get('skipped', 0)} ({tests['seconds']:.0f} s, pytest exit {tests['returncode']}"
                     + (f": {tests['reason']}" if tests.get("reason") else "") + ")")
        if tests.get("failures"):
            lines += ["", "Failures:", ""] + [f"- `{f}`" for f in tests["failures"]]
        if tests.get("skips"):
            lines += ["", "Skipped:", ""] + [f"- `{f}`" for f in tests["skips"]]
    else:
        lines.append(f"{tests.get('status', 'not run')}: {tests.get('reason', '')}")
    lines += ["", "#### Benchmarks (`benchmarks/bench_gpu.py`)", ""]
    if bench.get("status") == "ran":
        res = bench["results"]
        lines.append(f"{res.get('seconds', 0):.0f} s, exit {bench['returncode']}; ratios are measured in this run "
                     f"against the alternative on the same device (goal for a.: >= {res.get('goal_ratio')}x per row).")
        lines += ["", render_markdown(tables(res), level="#####").rstrip(), "", "##### Rows that did not run", ""]
        lines += [f"- {s}" for s in res.get("skipped", [])] or ["- none"]
    else:
        lines.append(f"{bench.get('status')}: {bench.get('reason', '')}")
    return "\n".join(lines).rstrip() + "\n"


def prepend_report(path: Path, section: str) -> None:
    """Insert ``section`` right below the intro of ``path`` (newest first); the
    placeholder saying that no run was recorded goes away with the first report."""
    text = path.read_text() if path.is_file() else f"# GPU check\n\n{REPORTS_MARKER}\n"
    if REPORTS_MARKER not in text:
        text = text.rstrip() + f"\n\n{REPORTS_MARKER}\n"
    head, rest = text.split(REPORTS_MARKER, 1)
    if PLACEHOLDER_BEGIN in rest and PLACEHOLDER_END in rest:
        before, after = rest.split(PLACEHOLDER_BEGIN, 1)
        rest = before + after.split(PLACEHOLDER_END, 1)[1]
    rest = rest.strip("\n")
    path.write_text(head + REPORTS_MARKER + "\n\n" + section.rstrip() + "\n" + (f"\n{rest}\n" if rest else ""))


# ------------------------------------------------------------------ main
def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true", help="bench_gpu.py --quick (minutes instead of tens of minutes)")
    ap.add_argument("--report", default=str(ROOT / "docs" / "gpu.md"), help="the page the report is prepended to")
    ap.add_argument("--json", default=None, help="also keep the benchmark's JSON here")
    ap.add_argument("--bench-args", default="", help="more arguments for bench_gpu.py, e.g. '--search-budget 120'")
    ap.add_argument("--no-tests", action="store_true", help="skip the CUDA tests")
    ap.add_argument("--no-bench", action="store_true", help="skip the benchmark")
    ap.add_argument("--tests-timeout", type=float, default=3600.0)
    ap.add_argument("--bench-timeout", type=float, default=3600.0)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError as exc:
        print(f"torch does not import with {sys.executable} ({exc}): run `make gpu-check PYTHON=...` with the "
              "interpreter that holds your CUDA build of torch")
        return 2
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
    tests = {"status": "not run", "reason": "--no-tests"} if args.no_tests else run_cuda_tests(args.tests_timeout)
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(args.json) if args.json else Path(tmp) / "bench_gpu.json"
        bench = {"status": "not run", "reason": "--no-bench"} if args.no_bench else run_bench(args, out_json)
    env = bench["results"]["env"] if bench.get("status") == "ran" else {
        "device": "cuda", "device_name": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "torch_cuda": torch.version.cuda, "pyg": _pyg_version()}
    report = Path(args.report)
    prepend_report(report, render_section(env, tests, bench))
    ok = tests_ok(tests) or args.no_tests
    ok = ok and (args.no_bench or (bench.get("status") == "ran" and bench["returncode"] == 0))
    print(f">>> report prepended to {report}; CUDA tests: {tests.get('status')}"
          + (f" (passed {tests.get('passed', 0)}, failed {tests.get('failed', 0)}, errors {tests.get('errors', 0)}, "
             f"skipped {tests.get('skipped', 0)})" if tests.get("status") == "ran" else "")
          + f"; benchmark: {bench.get('status')}" + ("" if ok else "  -> FAILED"))
    return 0 if ok else 1


def _pyg_version() -> Optional[str]:
    try:
        import torch_geometric

        return torch_geometric.__version__
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
