"""The test suite's start method for :func:`pyg_dynscale.training.launch.spawn`: a fork server.

``spawn`` starts every rank as a fresh interpreter (``multiprocessing``'s ``"spawn"``), which imports
torch, PyG and pyg_dynscale again: 5-6 s of start-up for 2 ranks and ~17 s for 4 on a 2-core machine,
before a rank does anything -- most of the time of a small distributed test, paid ~60 times per suite.

Under pytest (``tests/conftest.py`` installs it), ``spawn`` asks for its context here instead and gets
``"forkserver"``: one server process imports those modules once per session (:data:`PRELOAD`), and each
rank is forked from it (~0.1 s). What a rank sees is what ``"spawn"`` gives it:

* ``fn`` and its arguments are pickled to the rank the same way (a lambda or an unpicklable argument
  fails the same);
* the rank imports the test module itself (by name, as ``"spawn"`` does) in a process that has not
  imported it (the server imports only :data:`PRELOAD`);
* the environment, working directory and ``sys.path`` are the parent's at the time of the ``spawn``
  call (:class:`ParentStateProcess`), not the server's at its start;
* the library's ``spawn`` itself -- process group, result queue, failure reporting -- is unchanged.

The real ``"spawn"`` start method stays covered: tests marked ``real_spawn`` (``test_pickling.py``'s
``spawn`` of a partitioned signal, ``test_distributed_units.py``'s failing-rank report) use it, and so do
every notebook, doc block, example and benchmark (their own processes, not pytest's). Run the whole
suite with it: ``PYG_DYNSCALE_TEST_START_METHOD=spawn``. Where CUDA is visible (``make gpu-check``) the suite
keeps ``"spawn"``: a rank forked from a process whose imports touched the CUDA driver could not use it.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import sys
from typing import Any

#: imported once by the fork server (a module that fails to import is skipped by multiprocessing)
PRELOAD = ["numpy", "torch", "torch.distributed", "torch.multiprocessing", "torch_geometric",
           "torch_geometric_temporal", "pyg_dynscale", "pyg_dynscale.data.loaders", "pyg_dynscale.distributed",
           "pyg_dynscale.runtime", "pyg_dynscale.nn", "pyg_dynscale.partition"]


class ParentStateProcess(multiprocessing.context.ForkServerProcess):
    """A fork-server process that runs with the environment, working directory and ``sys.path`` its
    parent had when it was created (a forked rank would otherwise have the server's, from its start)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._parent_env = dict(os.environ)
        self._parent_cwd = os.getcwd()
        self._parent_path = list(sys.path)

    def run(self) -> None:
        os.environ.clear()
        os.environ.update(self._parent_env)
        os.chdir(self._parent_cwd)
        sys.path[:] = self._parent_path
        super().run()


class ForkServerContext(multiprocessing.context.ForkServerContext):
    Process = ParentStateProcess


_CONTEXT = ForkServerContext()
_CONTEXT.set_forkserver_preload(PRELOAD)


class Contexts:
    """Stands for ``torch.multiprocessing`` in ``pyg_dynscale.training.launch``: ``get_context("spawn")``
    gives the fork server; anything else is torch.multiprocessing's own."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def get_context(self, method: Any = None) -> Any:
        return _CONTEXT if method == "spawn" else self._real.get_context(method)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def spawn_context() -> Any:
    """The context ``spawn()`` uses in this session (the fork server, or ``"spawn"`` where it is off), for a
    test that starts its ranks with multiprocessing itself."""
    from pyg_dynscale.training import launch

    return launch.mp.get_context("spawn")
