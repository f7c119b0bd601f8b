"""The one compiled-kernel choice (pyg_dynscale/partition/compiled/backend.py):
twin() runs an operation's compiled version exactly while the numba backend is
in effect, and the partitioning code reaches a compiled kernel only through it."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.partition import DependencyPattern, partition
from pyg_dynscale.partition.pgc.pipeline import partition_pgc
from pyg_dynscale.partition.compiled import backend
from pyg_dynscale.partition.compiled.backend import use_backend
from tests.helpers.partition_inputs import random_signal


def _fakes() -> tuple:
    calls: list = []

    def compiled(x: int, *, declined: bool = False):
        calls.append(("compiled", x))
        return NotImplemented if declined else ("compiled", x)

    @backend.twin(compiled)
    def op(x: int, *, declined: bool = False):
        """The reference."""
        calls.append(("reference", x))
        return ("reference", x)

    return op, calls


def test_twin_runs_the_compiled_version_only_under_numba() -> None:
    op, calls = _fakes()
    with use_backend("torch"):
        assert op(1) == ("reference", 1)
    assert calls == [("reference", 1)]  # the compiled version is not even tried
    if backend.HAVE_NUMBA:
        calls.clear()
        with use_backend("numba"):
            assert op(2) == ("compiled", 2)
        assert calls == [("compiled", 2)]
    assert op.__doc__ == "The reference." and op.reference is not None and op.compiled is not None


@pytest.mark.skipif(not backend.HAVE_NUMBA, reason="numba backend not installed")
def test_twin_falls_back_when_the_compiled_version_declines() -> None:
    op, calls = _fakes()
    with use_backend("numba"):
        assert op(3, declined=True) == ("reference", 3)
    assert calls == [("compiled", 3), ("reference", 3)]


def _kernel_modules() -> tuple:
    from pyg_dynscale.partition.compiled import assign, csr, lp, schemes

    return lp, assign, csr, schemes


@pytest.mark.skipif(not backend.HAVE_NUMBA, reason="numba backend not installed")
def test_the_torch_backend_reaches_no_compiled_kernel_and_numba_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every compiled kernel the partitioning code can call (the modules of
    backend.dispatchers(): lp, assign, csr, schemes) replaced by a
    recorder: a partition under the torch backend records none, and the same
    partition under numba records calls and gives the same owners."""
    from numba.core.registry import CPUDispatcher

    signal = random_signal(0)
    pattern = DependencyPattern.preset("tgcn", 4, 32)
    want = partition_pgc(signal, 3, pattern, seed=0, backend="torch").owner
    # compiled before the recorders go in: a kernel compiled later would resolve the kernels it calls
    # (e.g. csr._mapped) to the Python recorders and fail to type (a cold numba cache, or another test order)
    with use_backend("numba"):
        partition_pgc(signal, 3, pattern, seed=0)
    called: list = []
    for mod in _kernel_modules():
        for name, fn in list(vars(mod).items()):
            if isinstance(fn, CPUDispatcher):
                def record(*args, _fn=fn, _name=name, **kwargs):
                    called.append(_name)
                    return _fn(*args, **kwargs)
                monkeypatch.setattr(mod, name, record)
    schemes = ("pss", "pts", "pss-ts", "auto")
    with use_backend("torch"):
        got = partition_pgc(signal, 3, pattern, seed=0).owner
        for scheme in schemes:
            partition(signal, scheme, 3, pattern)
        for scheme in schemes[:3]:
            partition(signal, scheme, 3, pattern, balanced=True)
    assert called == []
    with use_backend("numba"):
        got_numba = partition_pgc(signal, 3, pattern, seed=0).owner
    assert {"contract_csr", "chunk_affinity", "assign_chunks"} <= set(called), sorted(set(called))
    assert torch.equal(got, want) and torch.equal(got_numba, want)
