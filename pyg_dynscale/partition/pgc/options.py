r"""PGC's options as one object: :class:`PGCOptions`.

:func:`~pyg_dynscale.partition.pgc.pipeline.partition_pgc` takes these 25
options; the dataclass validates them once, when it is made (the errors are
the one-line :class:`~pyg_dynscale.errors.PartitionError` s that
``partition_pgc`` raised before the options were an object), and turns them
into a JSON-safe dict and back (:meth:`PGCOptions.to_dict`,
:meth:`PGCOptions.from_dict`): a PGC partition records the options it was
made with in ``meta["pgc_options"]``, which
:func:`~pyg_dynscale.partition.save_partition` writes into the partition
file, so a saved partition can be remade::

    from pyg_dynscale.partition import load_partition
    from pyg_dynscale.partition.pgc.pipeline import partition_pgc
    from pyg_dynscale.partition.pgc.options import PGCOptions

    part = load_partition("part.pt")
    again = partition_pgc(signal, part.num_parts, pattern, PGCOptions.from_dict(part.meta["pgc_options"]))

The keywords of ``partition_pgc`` still work (``partition_pgc(signal, 4,
pattern, seed=1, fm_tries=0)``); given together with ``options`` they
override its fields (:meth:`PGCOptions.replace`).
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from ...errors import PartitionError
from ..compiled.backend import BACKENDS
from .rebalance import BALANCE_OBJECTIVES
from ..costs.rounds import RoundWorkload
from ..costs.workload import LinearWorkload, WorkloadModel

__all__ = ["PGCOptions", "EFFORT", "STARTS", "START_MARGIN"]

#: ``effort="auto"`` picks "fast" above this many level-0 CSR entries
FAST_ABOVE = 8_000_000
#: round budgets of the ``effort`` settings. "fast" is for big graphs without
#: much structure, where every round is a pass over tens of millions of
#: entries and mostly churns (docs/pgc.md, "Speed and quality")
EFFORT = {
    "thorough": {"max_rounds": 8, "coarse_rounds": 15, "max_levels": 6, "refine_rounds": 30},
    "fast": {"max_rounds": 4, "coarse_rounds": 2, "max_levels": 3, "refine_rounds": 6},
}
#: starting assignments of the multi-start (:mod:`.starts`, step 7)
STARTS = ("lp", "pss", "pts")
#: a non-LP start is refined only when its unrefined cut is at most this
#: factor above the LP candidate's cut: winning starts already cut less than
#: LP before refinement, and refining one costs a full rank-level label
#: propagation on the level-0 graph (docs/pgc.md, step 7)
START_MARGIN = 1.1

#: fraction bounds and integer minimums of the tuning knobs (``None`` = the effort preset)
_FRACTIONS = {"slack": (0.0, 1.0), "tol": (0.0, 1.0), "gain_tol": (0.0, 1.0), "refine_tol": (0.0, 1.0)}
_COUNTS = {"chunks_per_part": 1, "max_chunks": 1, "max_rounds": 0, "coarse_rounds": 0, "max_levels": 0, "refine_rounds": 0,
           "fm_tries": 0}
_DEFAULT_FRACTION = {"slack": 0.03, "tol": 1e-3, "gain_tol": 0.003, "refine_tol": 1e-3}


def _check_numbers(**values: Any) -> None:
    """Refuse NaN, negative or out-of-range tuning knobs at the boundary,
    naming the argument (a NaN tolerance would silently never stop a loop)."""
    for name, value in values.items():
        if name in _FRACTIONS:
            lo, hi = _FRACTIONS[name]
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and lo <= float(value) < hi
            if not ok:
                raise PartitionError(name, f"must be a number in [{lo:g}, {hi:g}), got {value!r}.",
                                     f"use e.g. {_DEFAULT_FRACTION[name]}.")
        elif value is not None:
            lo = _COUNTS[name]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < lo:
                raise PartitionError(name, f"must be an int >= {lo} or None, got {value!r}.",
                                     "leave it at None for the effort preset." if lo == 0 else "use e.g. 16.")


@dataclass(frozen=True)
class PGCOptions:
    r"""The options of :func:`~pyg_dynscale.partition.pgc.pipeline.partition_pgc`
    (each described there), validated when made.

    Args:
        seed (int): tie-breaks and halves (the result is deterministic per seed).
        cap (float, optional): largest chunk in workload units (default
            ``total / (num_parts * chunks_per_part)``).
        chunks_per_part (int): sets the default cap (``>= 1``).
        effort (str): ``"thorough"``, ``"fast"`` or ``"auto"``.
        max_rounds, coarse_rounds, max_levels, refine_rounds (int, optional):
            round budgets (``>= 0``; ``None``: the ``effort`` preset, :data:`EFFORT`).
        tol, gain_tol, refine_tol (float): stopping fractions in ``[0, 1)``.
        max_chunks (int): chunks handed to Algorithm 1 at most (``>= 1``).
        slack (float): load band around the mean, in ``[0, 1)``.
        coarsen (bool or "auto"): temporal coarsening.
        segment_fraction (float): segment size over the cap, in ``(0, 1]``.
        workload: ``None`` / ``"linear"``, ``"vertices"``, a saved
            :class:`~pyg_dynscale.partition.costs.workload.MLPWorkload`
            path, or a :class:`~pyg_dynscale.partition.costs.workload.WorkloadModel`.
        threads (int, optional): threads of the kernels and torch (``>= 1``).
        starts (tuple of str): multi-start candidates from :data:`STARTS`,
            containing ``"lp"`` (duplicates dropped, order kept).
        max_divergence (float, optional): largest :math:`\lambda` a non-LP
            start may have to win (``>= 1``).
        start_margin (float, optional): cut margin of the non-LP starts (``> 0``).
        backend (str, optional): ``"numba"``, ``"torch"`` or ``"auto"``
            (``None``: the one in effect).
        progress (bool): print per-round progress.
        balance (str): ``"nodes"`` or ``"rounds"``.
        round_model (RoundWorkload, optional): constants of ``balance="rounds"``.
        fm_tries (int, optional): multilevel FM runs (``None``: 8; ``0``: no FM step).

    Raises:
        PartitionError: a bad value, naming the option (the same lines as
            ``partition_pgc``'s keywords).
    """

    seed: int = 0
    cap: Optional[float] = None
    chunks_per_part: int = 16
    effort: str = "auto"
    max_rounds: Optional[int] = None
    coarse_rounds: Optional[int] = None
    tol: float = 1e-3
    gain_tol: float = 0.003
    max_levels: Optional[int] = None
    max_chunks: int = 4096
    slack: float = 0.03
    refine_rounds: Optional[int] = None
    refine_tol: float = 1e-3
    coarsen: Union[bool, str] = "auto"
    segment_fraction: float = 0.5
    workload: Optional[Union[WorkloadModel, str]] = None
    threads: Optional[int] = None
    starts: tuple[str, ...] = STARTS
    max_divergence: Optional[float] = None
    start_margin: Optional[float] = START_MARGIN
    backend: Optional[str] = None
    progress: bool = False
    balance: str = "nodes"
    round_model: Any = None
    fm_tries: Optional[int] = None

    def __post_init__(self) -> None:
        # the order of partition_pgc's checks before the options were an object: the same input, the same line
        if self.effort not in EFFORT and self.effort != "auto":
            raise PartitionError("effort", f"must be one of {sorted(EFFORT) + ['auto']}, not {self.effort!r}.")
        if self.coarsen not in (True, False, "auto"):
            raise PartitionError("coarsen", f"must be True, False or 'auto', not {self.coarsen!r}.")
        if not (0.0 < float(self.segment_fraction) <= 1.0):
            raise PartitionError("segment_fraction", f"must lie in (0, 1], got {self.segment_fraction!r}.",
                                 "use e.g. 0.5.")
        threads = self.threads
        if threads is not None and (isinstance(threads, bool) or int(threads) < 1):
            raise PartitionError("threads", f"must be a positive int or None, got {threads!r}.")
        starts = self.starts
        if isinstance(starts, str) or "lp" not in starts or any(st not in STARTS for st in starts):
            raise PartitionError("starts", f"must be a tuple from {STARTS} that contains 'lp', got {starts!r}.",
                                 "use e.g. ('lp', 'pss', 'pts'), or ('lp',) for the single-start PGC.")
        md = self.max_divergence
        if md is not None and not (isinstance(md, (int, float)) and md >= 1.0):
            raise PartitionError("max_divergence", f"must be a number >= 1 or None, got {md!r}.", "use e.g. 1.15.")
        sm = self.start_margin
        if sm is not None and not (isinstance(sm, (int, float)) and sm > 0 and math.isfinite(sm)):
            raise PartitionError("start_margin", f"must be a positive number or None, got {sm!r}.",
                                 f"use e.g. {START_MARGIN}, or None to refine every start.")
        _check_numbers(slack=self.slack, tol=self.tol, gain_tol=self.gain_tol, refine_tol=self.refine_tol,
                       chunks_per_part=self.chunks_per_part, max_chunks=self.max_chunks, max_rounds=self.max_rounds,
                       coarse_rounds=self.coarse_rounds, max_levels=self.max_levels,
                       refine_rounds=self.refine_rounds, fm_tries=self.fm_tries)
        if self.balance not in BALANCE_OBJECTIVES:
            raise PartitionError("balance", f"must be one of {BALANCE_OBJECTIVES}, not {self.balance!r}.",
                                 "use 'nodes' (additive node cost) or 'rounds' (round-aware runtime cost).")
        if self.backend is not None and self.backend not in BACKENDS:
            raise PartitionError("backend", f"must be one of {BACKENDS}, not {self.backend!r}.")
        # normal forms (frozen: set through object.__setattr__): the starts once each, in order
        object.__setattr__(self, "starts", tuple(dict.fromkeys(starts)))

    # ------------------------------------------------------------------ building
    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in :func:`partition_pgc`'s order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def _check_names(cls, given: dict) -> None:
        for key in given:
            if key not in cls.names():
                close = difflib.get_close_matches(key, cls.names(), n=1)
                raise PartitionError(key, "is not an option of partition_pgc.",
                                     f"did you mean {close[0]!r}?" if close else
                                     f"use the options of PGCOptions: {', '.join(cls.names())}.")

    @classmethod
    def of(cls, options: Optional["PGCOptions"] = None, **overrides: Any) -> "PGCOptions":
        """``options`` (default: all defaults) with ``overrides`` replacing its fields."""
        if options is not None and not isinstance(options, PGCOptions):
            raise PartitionError("options", f"must be a PGCOptions or None, got {type(options).__name__}.",
                                 "use PGCOptions(...), PGCOptions.from_dict(meta['pgc_options']), or keywords.")
        cls._check_names(overrides)
        if options is None:
            return cls(**overrides)
        return options.replace(**overrides) if overrides else options

    def replace(self, **overrides: Any) -> "PGCOptions":
        """A copy with ``overrides`` (validated again); an unknown name is refused, naming it."""
        self._check_names(overrides)
        return dataclasses.replace(self, **overrides)

    # ------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        """Every option as JSON-safe values (the partition file's metadata).

        A ``workload`` or ``round_model`` object is written as
        ``{"class": ..., <its constants>}``; an
        :class:`~pyg_dynscale.partition.costs.workload.MLPWorkload` (or
        another model) only as ``{"class": name}``: its weights are not
        metadata, so :meth:`from_dict` asks for it back."""
        out: dict[str, Any] = {}
        for name in self.names():
            value = getattr(self, name)
            if name == "workload":
                value = _workload_to_json(value)
            elif name == "round_model":
                value = None if value is None else {"class": type(value).__name__, **_round_model_json(value)}
            elif name == "starts":
                value = list(value)
            out[name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], **overrides: Any) -> "PGCOptions":
        """The options :meth:`to_dict` wrote (missing names take their defaults; ``overrides`` win);
        an unknown name is refused, naming it."""
        if not isinstance(data, dict):
            raise PartitionError("options", f"must be a dict (PGCOptions.to_dict()), got {type(data).__name__}.",
                                 "pass partition.meta['pgc_options'].")
        cls._check_names(data)
        cls._check_names(overrides)
        values = dict(data)
        if "workload" not in overrides and "workload" in values:
            values["workload"] = _workload_from_json(values["workload"])
        if "round_model" not in overrides and values.get("round_model") is not None:
            values["round_model"] = _round_model_from_json(values["round_model"])
        if "starts" in values and isinstance(values["starts"], list):
            values["starts"] = tuple(values["starts"])
        values.update(overrides)
        return cls(**values)


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers (JSON has no int64)."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _workload_to_json(workload: Any) -> Any:
    if workload is None or isinstance(workload, str):
        return workload
    if type(workload) is LinearWorkload:
        return {"class": "LinearWorkload", "alpha": float(workload.alpha), "beta": float(workload.beta)}
    return {"class": type(workload).__name__}


def _workload_from_json(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and value.get("class") == "LinearWorkload":
        return LinearWorkload(float(value["alpha"]), float(value["beta"]))
    name = value.get("class", "?") if isinstance(value, dict) else type(value).__name__
    raise PartitionError("workload", f"the options record a {name} model, whose weights are not stored with them.",
                         "pass the model (or its saved file's path) again: from_dict(data, workload=...).")


def _round_model_json(model: Any) -> dict[str, Any]:
    """A :class:`RoundWorkload`'s constants and its (JSON-safe) ``meta``; another object by class name only."""
    if type(model) is not RoundWorkload:
        return {}
    out: dict[str, Any] = {name: float(getattr(model, name)) for name in RoundWorkload.NAMES}
    try:  # how the constants were fitted: kept when it is plain data
        out["meta"] = json.loads(json.dumps(model.meta))
    except (TypeError, ValueError):
        pass
    return out


def _round_model_from_json(value: Any) -> RoundWorkload:
    if not isinstance(value, dict) or value.get("class") != "RoundWorkload" or any(
            name not in value for name in RoundWorkload.NAMES):
        name = value.get("class", "?") if isinstance(value, dict) else type(value).__name__
        raise PartitionError("round_model", f"the options record a {name} object, not RoundWorkload constants.",
                             "pass the model again: from_dict(data, round_model=...).")
    return RoundWorkload(**{name: float(value[name]) for name in RoundWorkload.NAMES}, meta=dict(value.get("meta", {})))
