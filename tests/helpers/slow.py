"""Which tests are ``slow``: those that start processes, and those that run a whole program.

A test starts processes when its own code, a fixture it uses, or a function or class of the tests (the test
modules, ``tests/helpers``) that these reach, names one of :data:`STARTERS`: ``spawn()``'s ranks (the fork
server's or multiprocessing's), ``subprocess`` (the command line, ``torchrun``, benchmarks, notebook kernels,
fresh interpreters), ``multiprocessing`` itself. Found by reading the code objects' names, transitively, at
collection -- nothing to keep in step by hand: a new multi-process test is ``slow`` by what it calls.

Whole programs: the tests of the command line (``tests/commands/``), of the benchmark scripts
(``tests/benchmarks/``) and of the documentation's code, examples and notebooks (``tests/docs/``), in-process
or not (:data:`SLOW_FOLDERS`).

``make test-fast`` (``pytest -m "not slow"``) runs the others: the edit-test loop's tier. ``make test`` runs all.
A test may also be marked ``slow`` by hand (``@pytest.mark.slow``) where it is long for another reason.
"""
from __future__ import annotations

import functools
import inspect
import sys
import types
from pathlib import Path
from typing import Any, Callable, Iterable

#: names whose use means "starts a process"
STARTERS = frozenset({
    "spawn", "spawn_context", "subprocess", "Popen", "check_output", "multiprocessing", "ProcessPoolExecutor",
    "get_context", "run_cli", "run_quick", "torchrun", "nbclient", "NotebookClient",
})

#: folders of tests/ whose tests run whole programs (the command line, benchmarks, docs, examples, notebooks)
SLOW_FOLDERS = ("commands", "benchmarks", "docs")


def _ours(obj: Any) -> bool:
    """A function, class or module of the test suite (not of the package, torch or the standard library)."""
    mod = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    return isinstance(mod, str) and (mod == "tests" or mod.startswith("tests.") or mod == "conftest")


def _codes(obj: Any) -> Iterable[tuple[types.CodeType, dict]]:
    """The code objects of ``obj`` (a function, or a class's methods) with the globals they resolve names in."""
    obj = inspect.unwrap(obj) if callable(obj) else obj
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        yield obj.__code__, obj.__globals__
    elif isinstance(obj, type):
        for member in vars(obj).values():
            if isinstance(member, (types.FunctionType, staticmethod, classmethod)):
                yield from _codes(member)
    elif isinstance(obj, functools.partial):
        yield from _codes(obj.func)


class ProcessStarters:
    """Answers "does this callable start processes?" for the suite's callables, with a cache across tests."""

    def __init__(self) -> None:
        self._memo: dict[int, bool] = {}

    def reaches(self, obj: Any) -> bool:
        key = id(getattr(obj, "__code__", obj))
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # cycles: assume not while visiting
        found = any(self._code_reaches(code, glb) for code, glb in _codes(obj))
        self._memo[key] = found
        return found

    def _code_reaches(self, code: types.CodeType, glb: dict) -> bool:
        if set(code.co_names) & STARTERS:
            return True
        # nested functions, lambdas, comprehensions
        if any(isinstance(c, types.CodeType) and self._code_reaches(c, glb) for c in code.co_consts):
            return True
        modules = [m for m in glb.values() if isinstance(m, types.ModuleType) and _ours(m)]
        modules += [sys.modules[n] for n in code.co_names if n in sys.modules and _ours(sys.modules[n])]  # imports inside
        for name in code.co_names:
            candidates = [glb.get(name)] + [getattr(m, name, None) for m in modules]
            for c in candidates:
                if c is not None and not isinstance(c, types.ModuleType) and _ours(c) and self.reaches(c):
                    return True
        return False


def starts_processes(item: Any, starters: ProcessStarters) -> bool:
    """Whether a collected test (a ``pytest.Function``) or one of its fixtures starts processes."""
    fn: Callable | None = getattr(item, "obj", None)
    if fn is not None and starters.reaches(fn):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for fixturedef in (info.name2fixturedefs.get(name, ()) if info is not None else ()):
            func = getattr(fixturedef, "func", None)
            if func is not None and _ours(func) and starters.reaches(func):
                return True
    return False


def runs_a_program(item: Any) -> bool:
    """Whether a collected test lives in one of :data:`SLOW_FOLDERS` (its path relative to tests/)."""
    parts = Path(str(getattr(item, "path", getattr(item, "fspath", "")))).parts
    return "tests" in parts and parts[parts.index("tests") + 1:][:1] in [(f,) for f in SLOW_FOLDERS]


def is_slow(item: Any, starters: ProcessStarters) -> bool:
    """The ``slow`` rule: a whole program, or a test that starts processes."""
    return runs_a_program(item) or starts_processes(item, starters)
