"""Lazy imports of optional dependencies, with a clear message when missing."""
from __future__ import annotations

import importlib
import sys
import types
from types import ModuleType

from .errors import MissingDependencyError

PYGT_INSTALL_HINT = (
    "`make setup` in a pyg_dynscale checkout, or: pip install torch-scatter torch-sparse "
    "--no-build-isolation && pip install 'pyg-dynscale[pygt]'"
)


def _install_torch_sparse_shim() -> None:
    # PyGT 0.56.2 imports `torch_sparse.SparseTensor` only as a type annotation
    # (evolvegcno.py); PyG ships an equivalent placeholder, so PyGT can be imported
    # when torch-sparse is not installed.
    if "torch_sparse" in sys.modules:
        return
    try:
        importlib.import_module("torch_sparse")
        return
    except ImportError:
        pass
    import torch_geometric.typing

    shim = types.ModuleType("torch_sparse")
    shim.SparseTensor = torch_geometric.typing.SparseTensor  # type: ignore[attr-defined]
    sys.modules["torch_sparse"] = shim


def import_pygt(feature: str = "This feature") -> ModuleType:
    """Import ``torch_geometric_temporal`` or raise :class:`MissingDependencyError`."""
    try:
        _install_torch_sparse_shim()
        return importlib.import_module("torch_geometric_temporal")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            "torch-geometric-temporal", feature, PYGT_INSTALL_HINT
        ) from exc


def pygt_available() -> bool:
    try:
        import_pygt()
        return True
    except MissingDependencyError:
        return False
