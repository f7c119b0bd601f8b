"""Turn user input (numpy arrays, tensors, lists, per-snapshot sequences) into
concatenated tensors, checking shapes and dtypes as it goes.

Only loops over *snapshots* happen here (T is small); everything per node or per
edge is a tensor operation.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import Tensor

from ..errors import SignalValidationError


def is_per_snapshot_sequence(value: Any) -> bool:
    """Lists and tuples are per-snapshot sequences; arrays and tensors are not."""
    return isinstance(value, (list, tuple))


def as_tensor(value: Any, field: str) -> Tensor:
    """Convert an array-like to a tensor without copying when possible."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object or value.dtype.kind in "USOV":
            raise SignalValidationError(
                field,
                f"has numpy dtype {value.dtype}, which is not numeric.",
                "pass a numeric (float or integer) array.",
            )
        if value.dtype.byteorder not in ("=", "|") or not value.flags.writeable:
            value = np.array(value, dtype=value.dtype.newbyteorder("="))
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, (list, tuple, int, float)):
        try:
            arr = np.asarray(value)
        except ValueError as exc:
            raise SignalValidationError(
                field, f"is a ragged nested list ({exc}).", "pass one rectangular array."
            ) from None
        return as_tensor(arr, field)
    raise SignalValidationError(
        field,
        f"has unsupported type {type(value).__name__}.",
        "pass a numpy array or a torch tensor.",
    )


def _kind(t: Tensor) -> str:
    if t.dtype == torch.bool:
        return "b"
    if t.is_complex():
        return "c"
    if t.is_floating_point():
        return "f"
    return "i"


def to_index(t: Tensor, field: str) -> Tensor:
    """Integer tensor -> int64; anything else is an error."""
    if _kind(t) != "i":
        raise SignalValidationError(
            field,
            f"must hold integer ids but has dtype {t.dtype}.",
            "convert it with `.astype(np.int64)` / `.long()` after checking the values are whole numbers.",
        )
    return t.to(torch.long)


def to_float(t: Tensor, field: str, dtype: Optional[torch.dtype]) -> Tensor:
    """Real numbers -> floating tensor of ``dtype`` (``None`` keeps a float dtype)."""
    kind = _kind(t)
    if kind == "c":
        raise SignalValidationError(
            field, f"has complex dtype {t.dtype}.", "pass real-valued data (e.g. `.real` or `.abs()`)."
        )
    if kind == "f":
        return t if dtype is None else t.to(dtype)
    return t.to(dtype or torch.get_default_dtype())


def to_value(t: Tensor, field: str, dtype: Optional[torch.dtype]) -> Tensor:
    """Targets and extras: integers -> int64 (PyGT's rule, but unsigned types
    are kept instead of silently dropped), bool stays bool, floats -> ``dtype``."""
    kind = _kind(t)
    if kind == "c":
        raise SignalValidationError(
            field, f"has complex dtype {t.dtype}.", "pass real-valued data."
        )
    if kind == "b":
        return t
    if kind == "i":
        return t.to(torch.long)
    return t if dtype is None else t.to(dtype)


def check_finite(t: Tensor, field: str, ptr: Optional[Tensor], allow: bool) -> None:
    """Reject NaN/inf unless explicitly allowed. Checked a bounded block of
    rows at a time: ``isfinite`` of a whole tensor holds temporaries of
    about twice its size."""
    if allow or not t.is_floating_point() or t.numel() == 0:
        return
    if t.dim() > 0 and t.shape[0] > 1:
        step = max(1, (1 << 22) // max(1, t[0].numel()))
        for a in range(0, t.shape[0], step):
            if not bool(torch.isfinite(t[a:a + step]).all()):
                break
        else:
            return
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        row = int(bad.reshape(bad.shape[0], -1).any(dim=1).nonzero()[0]) if t.dim() > 0 else 0
        where = ""
        if ptr is not None:
            snap = int(torch.searchsorted(ptr, torch.tensor(row), right=True)) - 1
            where = f" (first in snapshot {snap})"
        raise SignalValidationError(
            field,
            f"contains {int(bad.sum())} NaN/inf values{where}.",
            "clean or impute them, or pass allow_nonfinite=True if they are intended.",
        )


def per_snapshot(value: Any, field: str, num_snapshots: Optional[int]) -> list[Any]:
    """Split ``value`` into a list with one entry per snapshot.

    Lists/tuples are taken as they are; arrays and tensors are split along dim 0.
    """
    if is_per_snapshot_sequence(value):
        return list(value)
    t = as_tensor(value, field)
    if t.dim() == 0:
        raise SignalValidationError(
            field, "is a scalar.", "pass one array per snapshot (a list, or an array with time on dim 0)."
        )
    return list(t.unbind(0))


def stack_edge_indices(
    edge_indices: Sequence[Any], field: str
) -> tuple[list[Tensor], Tensor]:
    """Validate per-snapshot ``[2, E_t]`` arrays; return them as int64 plus counts."""
    out: list[Tensor] = []
    for t, ei in enumerate(edge_indices):
        name = f"{field}[{t}]"
        if ei is None:
            raise SignalValidationError(
                name, "is None.", "pass an empty array of shape [2, 0] for a snapshot without edges."
            )
        e = as_tensor(ei, name)
        if e.numel() == 0:
            e = e.reshape(2, 0)
        if e.dim() != 2 or e.shape[0] != 2:
            fix = "transpose it (`.T`)." if e.dim() == 2 and e.shape[1] == 2 else "pass a [2, num_edges] array."
            raise SignalValidationError(
                name, f"must have shape [2, num_edges] but has shape {list(e.shape)}.", fix
            )
        out.append(to_index(e, name))
    counts = torch.tensor([e.shape[1] for e in out], dtype=torch.long)
    return out, counts


def concat_rows(
    parts: Sequence[Any], field: str, expected_rows: Optional[Tensor], what: str
) -> Tensor:
    """Concatenate per-snapshot arrays along dim 0, checking their row counts
    against ``expected_rows`` (``[T]``) and their trailing shapes against each other."""
    tensors: list[Tensor] = []
    trailing: Optional[tuple[int, ...]] = None
    for t, p in enumerate(parts):
        name = f"{field}[{t}]"
        if p is None:
            raise SignalValidationError(
                name, "is None while other snapshots have a value.", f"give every snapshot a {what} or none."
            )
        x = as_tensor(p, name)
        if x.dim() == 0:
            x = x.reshape(1)
        if expected_rows is not None and x.shape[0] != int(expected_rows[t]):
            raise SignalValidationError(
                name,
                f"has {x.shape[0]} rows but snapshot {t} has {int(expected_rows[t])} {what}.",
                f"give exactly one row per {'vertex' if what == 'vertices' else 'edge'}, in the snapshot's order.",
            )
        if trailing is None:
            trailing = tuple(x.shape[1:])
        elif tuple(x.shape[1:]) != trailing and x.shape[0] > 0:
            raise SignalValidationError(
                name,
                f"has trailing shape {list(x.shape[1:])} but earlier snapshots have {list(trailing)}.",
                "use the same number of feature columns in every snapshot.",
            )
        tensors.append(x)
    if trailing is not None:
        tensors = [x if x.shape[0] > 0 else x.reshape((0,) + trailing) for x in tensors]
    return torch.cat(tensors, dim=0)


def check_series_vary(a: Any, field: str, series: Callable[[int], str], first: int = 0) -> None:
    r"""Refuse a constant series about to be standardized: column :math:`s` of the
    ``[T, S]`` array ``a`` becomes :math:`(z - \mu_s) / \sigma_s` with
    :math:`\sigma_s = 0`, i.e. NaN in every snapshot (PyGT's loaders give that
    NaN, which the signal's check would report as if the file held NaN).

    Args:
        a: the raw series, time steps on dim 0 (column ``c`` is series ``first + c``).
        field: the file's key that holds them, for the message.
        series: the name of series ``s`` (e.g. ``"node 3"``).
        first: the index of ``a``'s first column (a block of a larger array).

    Raises:
        SignalValidationError: naming the first constant series, its value and the fix.
    """
    a = np.asarray(a)
    if a.ndim != 2 or a.shape[0] == 0:
        return
    with np.errstate(invalid="ignore"):
        const = a.max(axis=0) == a.min(axis=0)  # a series with NaN is not constant: the file's NaN is reported as such
    if const.any():
        c = int(np.flatnonzero(const)[0])
        raise SignalValidationError(
            field,
            f"the series of {series(first + c)} is constant ({a[0, c]:g} at all {a.shape[0]} time steps): "
            "standardizing it divides by a standard deviation of 0, which makes it NaN in every snapshot.",
            "drop that series from the file (or give it varying values), or pass allow_nonfinite=True to keep "
            "PyGT's NaN.",
        )
