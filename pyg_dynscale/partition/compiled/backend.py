r"""numba or torch: the one choice of the partitioning algorithms' compiled kernels.

Label propagation (:mod:`~pyg_dynscale.partition.pgc.label_propagation`) has two interchangeable
backends that compute **bit-identical** results:

* ``"torch"``: the vectorized reference -- sorts and segment reductions on
  edge arrays, one Python iteration per round. Runs wherever torch runs.
* ``"numba"``: the same semantics compiled. :func:`.lp.lp_rounds` runs every
  round of a label propagation in one call; a node's Eq. 2 scores are
  accumulated in a scratch array indexed by label (a "sparse accumulator",
  :math:`O(\deg v)` per node instead of a sort of all active entries), and on
  big graphs a round's active nodes are split over threads. CSR graphs are
  built by counting sorts (:mod:`.csr`, multi-threaded). Faster per
  call than the torch backend once compiled (docs/pgc.md, "First use").

``"auto"`` (the default) picks, per partitioning call (:func:`backend_for`),
``"numba"`` for graphs above :data:`AUTO_NUMBA_ABOVE` vertex-time nodes plus
edges or when every kernel is already compiled (:func:`compiled_cache_warm`:
numba's on-disk cache holds them, so loading costs a fraction of a second),
and ``"torch"`` otherwise or when numba does not import: compiling the
kernels the first time costs about a minute on two cores, which a small
graph never earns back (docs/pgc.md, "First use"). Choose with
:func:`use_backend` (a context manager), the ``backend=`` argument of
:func:`~pyg_dynscale.partition.pgc.pipeline.partition_pgc`, or the environment
variable ``PYG_DYNSCALE_LP_BACKEND``.

Why both twins stay, measured (issue 39, 2026-11-29, ``benchmarks/bench_first_use.py``;
docs/pgc.md, "First use"; 2-core VM, one thread, fresh interpreters): numba
is a core dependency (pyproject.toml), yet on a cold cache -- a fresh
install, a new numba, or a machine that ran only PGC -- the torch twins are
what ``"auto"`` runs on every graph the project benchmarks and tests but two:
all of them are below the threshold (up to email-Eu-core at 1-day snapshots,
1.1M nodes plus edges; first partition 1.7-2.9 s) except
``bench_pgc_vs_metis``'s mathoverflow at 30 days (2.5M: 53 s, nearly all of it
compiling; England COVID's with ``backend="numba"``: 51 s) and
``bench_pgc_scale`` at full size (39M). A PGC run alone
(England COVID, DGC's T-GCN) compiled 57 of the 63 kernels (not the PTS
owner's two, the temporal segmentation's, three CSR helpers), so after it the
cache does not count as warm and ``"auto"`` still runs torch on small graphs;
once the schemes or the test suite have compiled the rest, it runs the
compiled twins at every size (first partition 0.3-1.5 s, next calls 3-11x
faster than torch's). FM's pass loop (:mod:`~pyg_dynscale.partition.pgc.fm`) has no torch
twin: with numba it is compiled whatever the backend (about 1.3 s of a cold
cache's first partition).

Bit-identity holds because both backends evaluate the same nodes in the same
order, sum each node's edge weights in CSR order in float64, break ties the
same way (largest internal label), and share the cap acceptance, the hashed
half masks (:func:`.lp.half_mask`) and the dirty bookkeeping; parallel kernels
concatenate per-block results in a fixed order, so the thread count does not
change results either (tested in ``tests/partition/compiled/test_kernels.py``).
This module is the only place that reads the choice: an operation with a
compiled twin is written once in torch / numpy and decorated with
:func:`twin` of its compiled version, which runs while ``"numba"`` is in
effect (and may decline inputs it does not take by returning
``NotImplemented``: tensors off the CPU, a case it does not cover); no other
module of ``partition/`` tests for numba. The first call of a kernel compiles it; compiled code is cached on disk
(numba ``cache=True``; numba falls back to a per-user cache directory when
the package's folder is read-only), so later processes start fast.
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Callable, Iterator, Optional

from ...errors import MissingDependencyError, PartitionError
from .jit import HAVE_NUMBA, threads, use_threads

__all__ = ["BACKENDS", "AUTO_NUMBA_ABOVE", "backend", "backend_for", "use_backend", "compiled_cache_warm",
           "dispatchers", "threads", "threads_used", "use_threads", "twin"]

BACKENDS = ("auto", "numba", "torch")
_ENV = "PYG_DYNSCALE_LP_BACKEND"
_override: Optional[str] = None


def _check(name: str, field: str) -> str:
    if name not in BACKENDS:
        raise PartitionError(field, f"must be one of {BACKENDS}, not {name!r}.")
    return name


#: vertex-time nodes + spatial + temporal edges above which ``"auto"`` compiles:
#: below it the torch backend is fast enough that compiling (tens of seconds
#: with a cold cache) never pays off (docs/pgc.md, "First use")
AUTO_NUMBA_ABOVE = 2_000_000


def backend_for(size: int) -> str:
    """The backend for a graph of ``size`` vertex-time nodes plus edges:
    the one in effect, with ``"auto"`` resolved by :data:`AUTO_NUMBA_ABOVE`
    and :func:`compiled_cache_warm`."""
    name = _override if _override is not None else _check(os.environ.get(_ENV, "auto"), _ENV)
    if name == "auto":
        return "numba" if HAVE_NUMBA and (size > AUTO_NUMBA_ABOVE or compiled_cache_warm()) else "torch"
    return backend()


def dispatchers() -> list:
    """Every compiled kernel of the partitioning algorithms (empty without numba)."""
    if not HAVE_NUMBA:
        return []
    from numba.core.registry import CPUDispatcher

    from . import assign, csr, lp, schemes

    mods = (lp, assign, csr, schemes)
    return [v for m in mods for v in vars(m).values() if isinstance(v, CPUDispatcher)]


_warm = False


def compiled_cache_warm() -> bool:
    """Whether every kernel of :func:`dispatchers` is compiled in this process
    or has code in numba's on-disk cache for its current source (a process
    compiled it before): then the compiled backend costs no compiling.
    Reads the cache indexes (a few milliseconds); ``False`` when numba's
    cache layout cannot be read (the torch backend is exact too)."""
    global _warm
    if not _warm and HAVE_NUMBA:
        try:
            _warm = all(d.signatures or d._cache._cache_file._load_index() for d in dispatchers())
        except Exception:  # another numba version's internals: treat the cache as cold
            _warm = False
    return _warm


def backend() -> str:
    """The backend label propagation uses now: ``"numba"`` or ``"torch"``
    (``"auto"`` outside a partitioning call: ``"numba"`` when it imports)."""
    name = _override if _override is not None else _check(os.environ.get(_ENV, "auto"), _ENV)
    if name == "auto":
        return "numba" if HAVE_NUMBA else "torch"
    if name == "numba" and not HAVE_NUMBA:
        raise MissingDependencyError("numba", "the 'numba' label-propagation backend", "pip install numba")
    return name


@contextlib.contextmanager
def use_backend(name: Optional[str]) -> Iterator[str]:
    """Run the block with backend ``name`` (``None`` keeps the current one);
    yields the resolved backend."""
    global _override
    before = _override
    if name is not None:
        _override = _check(name, "backend")
    try:
        yield backend()
    finally:
        _override = before


def threads_used(name: str, kernel_threads: int) -> int:
    """Threads a run on backend ``name`` used: ``kernel_threads`` (the
    compiled kernels') for ``"numba"``, torch's own otherwise."""
    import torch  # torch is imported by every caller already; not at import time of this module

    return int(kernel_threads) if name == "numba" else torch.get_num_threads()


def twin(compiled: Callable) -> Callable[[Callable], Callable]:
    """Decorator of an operation's torch implementation: the operation runs
    ``compiled`` (same arguments) while the numba backend is in effect and
    the torch code otherwise, or when ``compiled`` returns
    ``NotImplemented`` (inputs it does not take: tensors off the CPU, a case
    it does not cover). Both compute bit-identical results
    (``tests/partition/compiled/test_kernels.py``, ``test_fingerprints.py``); this is the
    only reader of the choice besides this module's own context managers."""
    def wrap(reference: Callable) -> Callable:
        @functools.wraps(reference)
        def operation(*args, **kwargs):
            if backend() == "numba":
                out = compiled(*args, **kwargs)
                if out is not NotImplemented:
                    return out
            return reference(*args, **kwargs)

        operation.reference = reference  # the torch twin itself (tests compare the two)
        operation.compiled = compiled
        return operation
    return wrap
