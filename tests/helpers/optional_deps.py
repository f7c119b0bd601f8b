"""Optional packages of the test suite, looked up without importing them while pytest collects.

A bare CUDA box (``make gpu-check``) has torch, PyG, numba and pytest only: no PyGT, no
torch-scatter / torch-sparse, no pytest-timeout. Every test module must still be collected
there: a module that needs PyGT at import skips (:func:`pygt_or_skip_module`, pytest's
``importorskip`` rule), and the shared helpers (``blackbox_cases``, ``distributed_cases``,
``cuda_cases``, ``windows/helpers``) import no PyGT at module level.

PyGT's pure-Python wheel is enough for every PyGT test: it imports torch-sparse only for one
type annotation, for which :mod:`pyg_dynscale._optional` puts in a stand-in.
:func:`pygt_installed` puts it in too, so a test's own ``from torch_geometric_temporal ...``
works in this process (a spawned rank imports the helpers, hence calls it) as after
:func:`pyg_dynscale._optional.import_pygt`.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

__all__ = ["installed", "pygt_installed", "pygt_or_skip_module"]


def installed(name: str) -> bool:
    """Whether ``import name`` would find a module, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except ValueError:  # in sys.modules without a spec: a stand-in such as the torch-sparse shim
        return name in sys.modules
    except ImportError:  # a parent package that fails to import
        return False


def pygt_installed() -> bool:
    """Whether PyGT is installed (not imported); where torch-sparse is not, the package's
    stand-in for the annotation PyGT imports from it is put in place first."""
    if not installed("torch_geometric_temporal"):
        return False
    if not installed("torch_sparse"):
        from pyg_dynscale._optional import _install_torch_sparse_shim

        _install_torch_sparse_shim()
    return True


def pygt_or_skip_module() -> ModuleType:
    """``torch_geometric_temporal`` for a test module that needs it at import; without it the
    whole module is skipped (``pytest.importorskip``'s rule, not a collection error)."""
    from pyg_dynscale._optional import import_pygt
    from pyg_dynscale.errors import MissingDependencyError

    try:
        return import_pygt("this test module")
    except MissingDependencyError as exc:
        pytest.skip(f"needs torch-geometric-temporal (PyGT): {exc.__cause__ or exc}", allow_module_level=True)
