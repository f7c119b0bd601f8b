"""``make gpu-check`` on a bare CUDA box, checked on the CPU: with PyGT, torch-scatter, torch-sparse
and pytest-timeout unimportable (a ``sitecustomize`` that hides them, third-party pytest plugins off)
``gpu_check.py --collect-only --quick`` -- ``pytest -m cuda --collect-only tests`` as the run does it --
exits 0 and lists every CUDA test, the ones of the paths that never ran on a GPU in the first steps,
with a quick plan under 8 minutes; and the steps run in order, each in its own process group under
its own timeout, a hanging step killed with everything it started while the next step still runs,
the report rewritten after every step."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402

sys.path.remove(str(ROOT / "benchmarks"))

#: hides the optional packages from every process that starts with this folder on PYTHONPATH, as if
#: they were not installed (find_spec answers None, import raises ModuleNotFoundError)
HIDE = textwrap.dedent('''
    import sys
    HIDDEN = {"torch_geometric_temporal", "torch_scatter", "torch_sparse", "pytest_timeout"}

    class _Hide:
        def __init__(self, inner):
            self.inner = inner

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                return None
            find = getattr(self.inner, "find_spec", None)
            return find(name, path, target) if find else None

        def __getattr__(self, name):
            return getattr(self.inner, name)

    sys.meta_path[:] = [_Hide(f) for f in sys.meta_path]
''')

#: step -> CUDA tests it must list (among others): the never-run paths first
EXPECTED = {
    1: ["tests/ctdg/test_cuda_event_ranks.py::test_cuda_memory_trainer_two_ranks_equal_cpu[replicated]",
        "tests/ctdg/test_cuda_event_ranks.py::test_cuda_memory_trainer_two_ranks_equal_cpu[partitioned]",
        "tests/ctdg/test_cuda_event_ranks.py::test_cuda_memory_trainer_two_ranks_equal_cpu[sven]",
        "tests/ctdg/test_cuda_events.py::test_cuda_memory_trainer_equals_cpu[parallelism0]"],
    2: ["tests/distributed/test_cuda_exchange_paths.py::test_cuda_exchange_paths_equal_cpu",
        "tests/distributed/test_cuda_exchange_paths.py::test_cuda_pygt_exchange_paths_equal_cpu",
        "tests/runtime/test_cuda_tmgcn_evaluation.py::test_cuda_fused_path_equals_cpu[tmgcn]",
        "tests/runtime/test_cuda_tmgcn_evaluation.py::test_cuda_fused_path_equals_cpu[tgcn2_h0]",
        "tests/runtime/test_cuda_tmgcn_evaluation.py::test_cuda_fused_path_equals_cpu[user_cell]"],
    3: ["tests/windows/test_cuda_window_ranks.py::test_cuda_window_trainer_two_ranks_equal_cpu",
        "tests/windows/test_cuda_window_ranks.py::test_cuda_pygt_window_trainer_two_ranks_equal_cpu",
        "tests/windows/test_cuda_windows.py::test_cuda_window_trainer_equals_cpu[GConvGRU]"],
    4: ["tests/distributed/test_cuda_distributed.py::test_cuda_distributed_equals_fused[2-gloo]",
        "tests/runtime/test_cuda_fused.py::test_cuda_fused_equals_cpu_fused[user_cell]",
        "tests/commands/test_cli_device.py::test_cuda_two_processes_on_one_gpu_are_staged_over_gloo",
        "tests/data/test_transfer.py::test_cuda_transfer_pinned"],
}


def test_collects_every_cuda_test_without_pygt_and_plans_the_quick_run(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(HIDE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]), CUDA_VISIBLE_DEVICES="",
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--collect-only", "--quick"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    assert "pytest -m cuda --collect-only tests" in out and "pytest exit 0" in out
    # the stand-in took effect: PyGT is missing there, pytest-timeout too, and the modules that need PyGT skip
    assert "pytest-timeout absent" in out and "needs torch-geometric-temporal" in out, out[-3000:]
    steps, current = {}, None
    for line in out.splitlines():
        head = re.match(r"step (\d+) \((\d+) s\): .*: (\d+) tests$", line)
        if head:
            current = int(head.group(1))
            steps[current] = {"seconds": float(head.group(2)), "count": int(head.group(3)), "ids": []}
        elif line.startswith("  tests/") and current is not None:
            steps[current]["ids"].append(line.strip())
    assert list(steps) == [1, 2, 3, 4]
    for step, ids in EXPECTED.items():
        missing = [t for t in ids if t not in steps[step]["ids"]]
        assert not missing, (step, missing)
    every = [t for s in steps.values() for t in s["ids"]]
    assert len(every) == len(set(every)) == sum(s["count"] for s in steps.values()) >= 40  # each test in one step
    plan = re.search(r"plan: (\d+) CUDA tests in 4 steps, (\d+) s \+ benchmark (\d+) s = (\d+) s", out)
    assert plan and int(plan.group(1)) == len(every)
    assert int(plan.group(4)) == sum(s["seconds"] for s in steps.values()) + int(plan.group(3)) < 8 * 60


# ------------------------------------------------------------------ the steps: order, timeouts, results as they come
TESTS = {
    "pytest.ini": "[pytest]\nmarkers =\n    cuda: needs a CUDA device\n",
    "tests/a/test_a.py": '''
        import pytest

        @pytest.mark.cuda
        def test_passes(record_property):
            record_property("host_syncs:one step", "3 (x.py:1 x3)")

        @pytest.mark.cuda
        def test_fails():
            assert 1 == 2, "one is not two"

        @pytest.mark.cuda
        def test_skips():
            pytest.skip("needs something")

        def test_not_cuda():  # not selected by -m cuda
            raise AssertionError("ran")
    ''',
    "tests/b/test_b.py": '''
        import os, subprocess, sys, threading
        import pytest

        @pytest.mark.cuda
        def test_hangs():
            child = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()"])
            with open(os.environ["HANG_PIDS"], "w") as f:
                f.write(f"{os.getpid()} {child.pid}")
            threading.Event().wait()
    ''',
    "tests/test_c.py": '''
        import pytest

        @pytest.mark.cuda
        def test_rest_passes():
            pass
    ''',
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie no one reaped (an orphan in a container without init) is gone too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_steps_run_in_order_and_a_hanging_step_costs_only_its_time(tmp_path: Path, monkeypatch) -> None:
    for rel, text in TESTS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    monkeypatch.setenv("HANG_PIDS", str(tmp_path / "pids"))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # as on a bare box: no pytest-timeout
    steps = (gpu_check.Step("first", ("tests/a",), 1, 1), gpu_check.Step("hangs", ("tests/b",), 1, 1),
             gpu_check.Step("the rest", (), 1, 1))
    seen = []
    res = gpu_check.run_cuda_tests([120.0, 10.0, 120.0], tmp_path / "logs", seen.append, steps=steps, cwd=tmp_path,
                                   echo=False)
    first, hang, rest = res["steps"]
    assert (first["status"], first["passed"], first["failed"], first["skipped"]) == ("ran", 1, 1, 1), first
    assert first["failures"] == ["tests/a/test_a.py::test_fails: AssertionError: one is not two"]
    assert first["skips"] == ["tests/a/test_a.py::test_skips: needs something"]
    assert first["host_syncs"] == ["tests/a/test_a.py::test_passes: one step = 3 (x.py:1 x3)"]
    assert hang["status"] == "timeout" and hang["running"] == "tests/b/test_b.py::test_hangs", hang
    assert "killed after 10 s in `tests/b/test_b.py::test_hangs`" in hang["reason"]
    assert not any(_alive(int(p)) for p in (tmp_path / "pids").read_text().split())  # the group, grandchild too
    assert (rest["status"], rest["passed"], rest["failed"]) == ("ran", 1, 0), rest  # ran after the hang; a/ b/ not again
    assert not gpu_check.tests_ok(res) and (res["passed"], res["failed"]) == (2, 1)
    # written as they came: after step 1 the others were still pending
    assert [[s["status"] for s in summary["steps"]] for summary in seen] == [
        ["ran", "pending", "pending"], ["ran", "timeout", "pending"], ["ran", "timeout", "ran"]]
    section = gpu_check.render_section({"device_name": "test device"}, seen[0], {"status": "not run yet"})
    assert "| 1. first | 1 | 1 | 0 | 1 |" in section and "| 2. hangs |" in section and "not run yet" in section
    text = gpu_check.render_section({"device_name": "test device"}, res, {"status": "not run", "reason": "--no-bench"})
    assert "timeout: killed after 10 s in `tests/b/test_b.py::test_hangs`" in text
    assert "- `tests/a/test_a.py::test_fails`: AssertionError: one is not two" in text
    assert "- `tests/a/test_a.py::test_passes: one step = 3 (x.py:1 x3)`" in text
    page = gpu_check.page_with("# GPU check\n\nintro\n\n" + gpu_check.REPORTS_MARKER + "\n\n### older\n", text)
    assert page.index("intro") < page.index("timeout: killed") < page.index("### older")


def test_step_of_follows_the_step_paths() -> None:
    steps = gpu_check.STEPS
    assert gpu_check.step_of("tests/ctdg/test_cuda_events.py::test_x[a-b]") == 0
    assert gpu_check.step_of("tests/distributed/test_cuda_exchange_paths.py::test_y") == 1
    assert gpu_check.step_of("tests/distributed/test_cuda_distributed.py::test_z") == len(steps) - 1
    assert gpu_check.step_of("tests/windowsX/test_cuda.py::t") == len(steps) - 1  # a prefix of a name is not a folder
    rest = gpu_check.step_args(len(steps) - 1)
    assert rest[0] == "tests" and {f"--ignore={p}" for s in steps[:-1] for p in s.paths} == set(rest[1:])
    quick = gpu_check.step_timeouts(True, None)
    assert sum(quick) + gpu_check.BENCH_QUICK_S <= gpu_check.QUICK_TOTAL_S < 8 * 60 + 1
    assert sum(gpu_check.step_timeouts(True, 200.0)) == pytest.approx(200.0)
