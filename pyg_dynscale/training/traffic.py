r"""Bytes handed to collectives: one :class:`ByteLedger` that the code issuing
a collective writes to, and one :class:`TrafficReport` that every trainer's
``traffic()`` returns.

Counting happens **at the collective** (the buffer a rank hands to
``all_reduce`` / ``all_to_all`` / ``all_gather``), never recomputed from the
id lists that also give the prediction: a report whose ``measured`` equals its
``predicted`` then says something.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator, Optional

from torch import Tensor

__all__ = ["ByteLedger", "TrafficReport"]


class ByteLedger:
    r"""Bytes by kind, counted where the collective is issued.

    Kinds are free strings (``"gradients"``, ``"dispatch"``, ``"features"``,
    ...); :meth:`mark` / :meth:`since` give an epoch's bytes without resetting
    the running totals.

    Args:
        kinds (Sequence[str], optional): kinds reported even while 0.
    """

    def __init__(self, kinds: tuple = ()) -> None:
        self._bytes: dict[str, int] = dict.fromkeys(kinds, 0)
        self._mark: dict[str, int] = dict(self._bytes)

    def add(self, kind: str, nbytes: int) -> None:
        """Count ``nbytes`` (an ``int``, host-side) under ``kind``."""
        self._bytes[kind] = self._bytes.get(kind, 0) + int(nbytes)

    def add_tensor(self, kind: str, tensor: Tensor) -> None:
        """Count the bytes of ``tensor`` (``numel * element_size``; no device read) under ``kind``."""
        self.add(kind, tensor.numel() * tensor.element_size())

    def __getitem__(self, kind: str) -> int:
        return self._bytes.get(kind, 0)

    def totals(self) -> dict[str, int]:
        """Bytes by kind since construction."""
        return dict(self._bytes)

    def mark(self) -> None:
        """Start a new period (an epoch): :meth:`since` counts from here."""
        self._mark = dict(self._bytes)

    def since(self) -> dict[str, int]:
        """Bytes by kind since the last :meth:`mark`."""
        return {k: v - self._mark.get(k, 0) for k, v in self._bytes.items()}

    def state_dict(self) -> dict:
        return {"bytes": dict(self._bytes), "mark": dict(self._mark)}

    def load_state_dict(self, state: dict) -> None:
        self._bytes = {k: int(v) for k, v in state["bytes"].items()}
        self._mark = {k: int(v) for k, v in state["mark"].items()}

    def __repr__(self) -> str:
        return f"ByteLedger({self._bytes})"


def _with_total(kinds: Mapping, total: Optional[int]) -> dict:
    out = {k: int(v) for k, v in kinds.items() if k != "total"}
    out["total"] = int(total) if total is not None else (int(kinds["total"]) if "total" in kinds
                                                         else sum(out.values()))
    return out


class TrafficReport(Mapping):
    r"""What every trainer's ``traffic()`` returns: the last epoch's bytes over
    all ranks, measured at the collectives and predicted (the plan's figure
    where the family has a plan), by kind.

    A read-only mapping: ``report["measured"]["total"]`` and
    ``report["predicted"]["total"]`` are ``int`` bytes; ``report["measured"][kind]``
    per kind; family-specific entries (``"exchanges"``, ``"redundancy"``, ...)
    under their own keys.

    Args:
        measured (Mapping[str, int]): bytes by kind, measured; ``"total"`` is
            the sum of the kinds unless given.
        predicted (Mapping[str, int]): bytes by kind, predicted.
        **extra: further entries of the report.
    """

    def __init__(self, measured: Mapping, predicted: Mapping, *, measured_total: Optional[int] = None,
                 predicted_total: Optional[int] = None, **extra: Any) -> None:
        self._data = {"measured": _with_total(measured, measured_total),
                      "predicted": _with_total(predicted, predicted_total), **extra}

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    @property
    def measured(self) -> dict:
        """Bytes by kind, measured at the collectives (with ``"total"``)."""
        return self._data["measured"]

    @property
    def predicted(self) -> dict:
        """Bytes by kind, predicted (with ``"total"``)."""
        return self._data["predicted"]

    def as_dict(self) -> dict:
        """A plain ``dict`` (e.g. for a JSON report)."""
        return dict(self._data)

    def __repr__(self) -> str:
        return (f"TrafficReport(measured={self.measured['total']} B, predicted={self.predicted['total']} B, "
                f"kinds={[k for k in self.measured if k != 'total']})")
