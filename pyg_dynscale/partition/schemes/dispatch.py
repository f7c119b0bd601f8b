r"""One entry point for every partition scheme, by name."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ...errors import PartitionError
from ..partition import SCHEMES, Partition
from .auto import partition_auto
from ..pgc.pipeline import partition_pgc
from .snapshot_sequence import partition_pss, partition_pss_ts, partition_pts

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal
    from ..pattern import DependencyPattern


def partition(signal: "DynamicGraphSignal", scheme: str, num_parts: int,
              pattern: Optional["DependencyPattern"] = None, seed: Optional[int] = None, **opts: Any) -> Partition:
    """Dispatch to a scheme by name (``"pss"``, ``"pts"``, ``"pss-ts"``,
    ``"pgc"``, or ``"auto"``: the one with the lowest predicted epoch for this
    model, :mod:`.auto`).

    ``pattern`` and ``seed`` are used by PGC (edge weights, tie-breaking) and
    ``auto`` (the model's plan); the other schemes are deterministic and
    ignore them. ``seed=None``: 0, or for PGC the seed of its ``options=``
    (:class:`~pyg_dynscale.partition.pgc.options.PGCOptions`). ``opts`` go to the scheme (``pgc``:
    ``options=`` and its keywords; ``auto``: ``blackbox=``, ``cost=``,
    ``candidates=``).
    """
    key = str(scheme).lower().replace("_", "-")
    if key in ("pssts", "pss+ts"):
        key = "pss-ts"
    if key == "pss":
        return partition_pss(signal, num_parts, **opts)
    if key == "pts":
        return partition_pts(signal, num_parts, **opts)
    if key == "pss-ts":
        return partition_pss_ts(signal, num_parts, **opts)
    if key == "pgc":  # an explicit seed overrides the options' own; none leaves it
        return partition_pgc(signal, num_parts, pattern, **({} if seed is None else {"seed": seed}), **opts)
    if key == "auto":
        return partition_auto(signal, num_parts, pattern, seed=0 if seed is None else seed, **opts)
    raise PartitionError("scheme", f"unknown partition scheme {scheme!r}.", f"Use one of {list(SCHEMES)}.")
