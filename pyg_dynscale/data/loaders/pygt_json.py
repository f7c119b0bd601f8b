r"""Readers for the JSON files of PyTorch Geometric Temporal's (PyGT 0.56.2)
dataset loaders, reproducing their preprocessing exactly.

Every reader returns the same snapshots (``x``, ``edge_index``, ``edge_attr``,
``y``; float32 / int64 as PyGT converts them) as the PyGT loader class run on
the same file, without importing PyGT and without any download:

=================  ===========================  ==============================
``dataset``        canonical file               PyGT loader
=================  ===========================  ==============================
``chickenpox``     ``chickenpox.json``          ``ChickenpoxDatasetLoader``
``pedalme``        ``pedalme_london.json``      ``PedalMeDatasetLoader``
``wikimaths``      ``wikivital_mathematics.json`` ``WikiMathsDatasetLoader``
``england_covid``  ``england_covid.json``       ``EnglandCovidDatasetLoader``
``montevideo_bus`` ``montevideo_bus.json``      ``MontevideoBusDatasetLoader``
``twitter_tennis`` ``twitter_tennis_rg17.json`` ``TwitterTennisDatasetLoader``
``mtm``            ``mtm_1.json``               ``MTMDatasetLoader``
=================  ===========================  ==============================

The lag windows PyGT builds with a Python list comprehension
(``X[i:i+lags].T`` for each ``i``) are built here as one strided view
(:func:`numpy.lib.stride_tricks.sliding_window_view`); the values are the
same float64 numbers, cast to float32 exactly once, as PyGT's
``torch.FloatTensor`` does.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from ...errors import SignalValidationError
from ..normalize import check_series_vary
from ..fields import SnapshotField
from ..signal import DynamicGraphSignal
from ._common import DatasetFormatError, DatasetNotFoundError, PathLike, embedded_england_covid_path, read_bytes

#: canonical dataset name -> file name in PyGT's ``dataset/`` folder (``{event_id}``
#: is filled in for Twitter tennis).
CANONICAL_FILES: dict[str, str] = {
    "chickenpox": "chickenpox.json",
    "pedalme": "pedalme_london.json",
    "wikimaths": "wikivital_mathematics.json",
    "england_covid": "england_covid.json",
    "montevideo_bus": "montevideo_bus.json",
    "twitter_tennis": "twitter_tennis_{event_id}.json",
    "mtm": "mtm_1.json",
}

_ALIASES = {
    "hungary_chickenpox": "chickenpox",
    "chickenpox_hungary": "chickenpox",
    "pedalme_london": "pedalme",
    "wikimath": "wikimaths",
    "wikivital_mathematics": "wikimaths",
    "encovid": "england_covid",
    "englandcovid": "england_covid",
    "montevideobus": "montevideo_bus",
    "twitter_tennis_rg17": "twitter_tennis",
    "twitter_tennis_uo17": "twitter_tennis",
    "twittertennis": "twitter_tennis",
    "mtm_1": "mtm",
    "mtm1": "mtm",
}

#: options of each dataset with PyGT's defaults. ``feature_lags`` is PyGT's ``get_dataset(lags=...)``: the raw
#: time steps stacked into each snapshot's features (named apart from a window's ``lags``, WindowTrainer's)
#: the loaders' deprecation of PyGT's spelling ``lags=``
LAGS_RENAMED = ("{owner}: 'lags=' is deprecated for the loaders; use 'feature_lags=' (the raw steps stacked into "
                "each snapshot's features; a window's lags are WindowTrainer's lags=).")
DATASET_OPTIONS: dict[str, dict[str, Any]] = {
    "chickenpox": {"feature_lags": 4},
    "pedalme": {"feature_lags": 4},
    "wikimaths": {"feature_lags": 8},
    "england_covid": {"feature_lags": 8},
    "montevideo_bus": {"feature_lags": 4, "target_var": "y", "feature_vars": ("y",)},
    "twitter_tennis": {"event_id": "rg17", "N": None, "feature_mode": "encoded", "target_offset": 1},
    "mtm": {"frames": 16},
}

DATASETS: tuple[str, ...] = tuple(CANONICAL_FILES)


# --------------------------------------------------------------------- names
def canonical_dataset_name(name: str) -> str:
    """Normalize a dataset name (``"PedalMe"``, ``"pedalme_london"``, ...) to one of :data:`DATASETS`.

    Raises:
        SignalValidationError: for an unknown name.
    """
    key = str(name).strip().lower().replace("-", "_").replace(" ", "_")
    for suffix in (".json.gz", ".json"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    key = _ALIASES.get(key, key)
    if key not in CANONICAL_FILES:
        raise SignalValidationError(
            "dataset", f"{name!r} is not a known PyGT JSON dataset.", f"use one of {list(DATASETS)}."
        )
    return key


def canonical_file_name(dataset: str, event_id: str = "rg17") -> str:
    """The file name PyGT's loader downloads for ``dataset``."""
    return CANONICAL_FILES[canonical_dataset_name(dataset)].format(event_id=event_id)


def detect_dataset(data: Mapping[str, Any]) -> Optional[str]:
    """Guess the dataset format of a parsed PyGT JSON file from its keys."""
    if not isinstance(data, Mapping):
        return None
    keys = set(data)
    if "edge_mapping" in keys:
        return "england_covid"
    if "LABEL" in keys:
        return "mtm"
    if {"nodes", "links"} <= keys:
        return "montevideo_bus"
    if "FX" in keys:
        return "chickenpox"
    if {"X", "edges", "weights"} <= keys:
        return "pedalme"
    if "time_periods" in keys:
        first = data.get("0")
        if "edges" in keys and "weights" in keys:
            return "wikimaths"
        if isinstance(first, Mapping) and "edges" in first and "X" in first:
            return "twitter_tennis"
    return None


# --------------------------------------------------------------------- access
class PygtReader:
    """Key access into the parsed JSON with errors naming the missing key."""

    def __init__(self, data: Any, source: str, dataset: str) -> None:
        self.data = data
        self.source = source
        self.dataset = dataset

    def fail(self, field: str, problem: str, fix: str = "") -> DatasetFormatError:
        fix = fix or f"check that the file really is PyGT's {CANONICAL_FILES[self.dataset].format(event_id='rg17')}."
        return DatasetFormatError(self.source, field, problem, fix)

    def get(self, obj: Any, key: str, where: str = "") -> Any:
        if not isinstance(obj, Mapping) or key not in obj:
            loc = f"{where}[{key!r}]" if where else f"key {key!r}"
            raise self.fail(loc, f"is missing (the {self.dataset} format needs it).")
        return obj[key]

    def array(self, value: Any, field: str, ndim: Optional[int] = None) -> np.ndarray:
        # np.array(list) exactly as PyGT builds it (dtype follows the JSON numbers)
        try:
            arr = np.array(value)
        except ValueError as exc:
            raise self.fail(field, f"is not a rectangular array ({exc}).") from None
        if arr.dtype.kind not in "iufb":
            raise self.fail(field, f"holds non-numeric values (numpy dtype {arr.dtype}).", "")
        if ndim is not None and arr.ndim != ndim and arr.size > 0:
            raise self.fail(field, f"must be a {ndim}-D array but has shape {list(arr.shape)}.")
        return arr

    def edges(self, value: Any, field: str) -> np.ndarray:
        """A JSON ``[[src, dst], ...]`` list as a ``[2, E]`` int64 array (PyGT: ``np.array(...).T``)."""
        arr = self.array(value, field)
        if arr.size == 0:
            return np.zeros((2, 0), dtype=np.int64)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise self.fail(field, f"must be a list of [source, target] pairs but has shape {list(arr.shape)}.")
        if arr.dtype.kind not in "iu":
            raise self.fail(field, f"holds non-integer node indices (dtype {arr.dtype}).")
        return np.ascontiguousarray(arr.T.astype(np.int64))

    def time_periods(self) -> int:
        T = self.get(self.data, "time_periods")
        if not isinstance(T, int) or isinstance(T, bool) or T < 1:
            raise self.fail("key 'time_periods'", f"is {T!r}; it must be a positive integer.")
        return T


# --------------------------------------------------------------------- helpers
def check_lags(lags: Any, T: int, name: str, reader: PygtReader) -> int:
    if isinstance(lags, bool) or not isinstance(lags, (int, np.integer)) or lags < 1:
        raise SignalValidationError(name, f"is {lags!r}.", f"use a positive integer (PyGT's default for {reader.dataset}).")
    if lags >= T:
        raise SignalValidationError(
            name, f"is {lags} but the file has only {T} time steps, which leaves no snapshot.",
            f"use {name} < {T}.",
        )
    return int(lags)


def lag_windows(stacked: np.ndarray, lags: int) -> np.ndarray:
    r"""``out[i] = stacked[i:i+lags, :].T`` for ``i < T - lags``: ``[T-lags, V, lags]``."""
    return sliding_window_view(stacked, lags, axis=0)[: stacked.shape[0] - lags]


def standardize(a: np.ndarray, eps: float = 0.0) -> np.ndarray:
    # The exact expression of PyGT's loaders (np.std is the population std);
    # a constant series gives NaN there too -- the signal's validation reports it.
    with np.errstate(invalid="ignore", divide="ignore"):
        return _standardize_raw(a, eps)


def _standardize_raw(a: np.ndarray, eps: float) -> np.ndarray:
    if eps:
        return (a - np.mean(a, axis=0)) / (np.std(a, axis=0) + eps)
    return (a - np.mean(a, axis=0)) / np.std(a, axis=0)


def _pygt_value(a: np.ndarray) -> torch.Tensor:
    """PyGT's target rule: integer -> int64, float -> float32."""
    if a.dtype.kind in "iu":
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def _float32(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def static_signal(
    edge_index: np.ndarray,
    edge_weight: Optional[np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    num_nodes: int,
    *,
    x_level: str = "node",
    y_level: str = "node",
    allow_nonfinite: bool = False,
) -> DynamicGraphSignal:
    """A static graph repeated over ``T = len(x)`` snapshots (what PyGT's
    ``StaticGraphTemporalSignal`` yields), built without per-snapshot lists."""
    T, V, E = x.shape[0], int(num_nodes), edge_index.shape[1]
    node_ptr = torch.arange(T + 1, dtype=torch.long) * V
    edge_ptr = torch.arange(T + 1, dtype=torch.long) * E
    ei = torch.from_numpy(edge_index).repeat(1, T)
    w = None if edge_weight is None else _float32(edge_weight).repeat(T)
    fields: dict[str, SnapshotField] = {}
    xt = _float32(x)
    fields["x"] = SnapshotField("node", xt.reshape((T * V,) + tuple(x.shape[2:]))) if x_level == "node" else SnapshotField("graph", xt)
    yt = _pygt_value(y)
    fields["y"] = SnapshotField("node", yt.reshape((T * V,) + tuple(y.shape[2:]))) if y_level == "node" else SnapshotField("graph", yt)
    return DynamicGraphSignal.from_tensors(
        node_ptr=node_ptr, edge_index=ei, edge_ptr=edge_ptr, edge_weight=w,
        fields=fields, num_vertices=V, allow_nonfinite=allow_nonfinite,
    )


def _dynamic_signal(
    edges: list[np.ndarray], weights: list[np.ndarray], features: Any, targets: Any, allow_nonfinite: bool
) -> DynamicGraphSignal:
    """What PyGT's ``DynamicGraphTemporalSignal`` yields (T is small: lists are fine)."""
    return DynamicGraphSignal(
        edges, weights, features, targets, dtype=torch.float32, allow_nonfinite=allow_nonfinite
    )


# --------------------------------------------------------------------- formats
def _chickenpox(r: PygtReader, lags: int, allow_nonfinite: bool) -> DynamicGraphSignal:
    edges = r.edges(r.get(r.data, "edges"), "key 'edges'")
    stacked = r.array(r.get(r.data, "FX"), "key 'FX'", ndim=2)
    lags = check_lags(lags, stacked.shape[0], "feature_lags", r)
    x = lag_windows(stacked, lags)
    y = stacked[lags:]
    return static_signal(edges, np.ones(edges.shape[1]), x, y, stacked.shape[1], allow_nonfinite=allow_nonfinite)


def _pedalme(r: PygtReader, lags: int, allow_nonfinite: bool) -> DynamicGraphSignal:
    edges = r.edges(r.get(r.data, "edges"), "key 'edges'")
    weights = r.array(r.get(r.data, "weights"), "key 'weights'", ndim=1)
    if weights.shape[0] != edges.shape[1]:
        raise r.fail("key 'weights'", f"has {weights.shape[0]} entries for {edges.shape[1]} edges.")
    stacked = r.array(r.get(r.data, "X"), "key 'X'", ndim=2)
    lags = check_lags(lags, stacked.shape[0], "feature_lags", r)
    return static_signal(edges, weights, lag_windows(stacked, lags), stacked[lags:], stacked.shape[1],
                          allow_nonfinite=allow_nonfinite)


def _wikimaths(r: PygtReader, lags: int, allow_nonfinite: bool) -> DynamicGraphSignal:
    edges = r.edges(r.get(r.data, "edges"), "key 'edges'")
    weights = r.array(r.get(r.data, "weights"), "key 'weights'", ndim=1)
    if weights.shape[0] != edges.shape[1]:
        raise r.fail("key 'weights'", f"has {weights.shape[0]} entries for {edges.shape[1]} edges.")
    T = r.time_periods()
    lags = check_lags(lags, T, "feature_lags", r)
    rows = [r.get(r.get(r.data, str(t)), "y", f"[{str(t)!r}]") for t in range(T)]  # loop over time steps
    stacked = r.array(rows, "key '<t>'['y']", ndim=2)
    if not allow_nonfinite:  # a constant series is NaN after standardize: named here, not as NaN in the file
        check_series_vary(stacked, "y", lambda s: f"node {s}")
    std = standardize(stacked)
    return static_signal(edges, weights, lag_windows(std, lags), std[lags:], stacked.shape[1],
                          allow_nonfinite=allow_nonfinite)


def covid_day(r: PygtReader, t: int) -> tuple[np.ndarray, np.ndarray]:
    """England COVID's edges ``[2, E]`` and weights ``[E]`` of day ``t``,
    checked (the ``edge_mapping`` keys first)."""
    mapping = r.get(r.data, "edge_mapping")
    ei_map = r.get(mapping, "edge_index", "['edge_mapping']")
    ew_map = r.get(mapping, "edge_weight", "['edge_mapping']")
    e = r.edges(r.get(ei_map, str(t), "['edge_mapping']['edge_index']"), f"['edge_mapping']['edge_index'][{str(t)!r}]")
    w = r.array(r.get(ew_map, str(t), "['edge_mapping']['edge_weight']"), f"['edge_mapping']['edge_weight'][{str(t)!r}]")
    if w.reshape(-1).shape[0] != e.shape[1]:
        raise r.fail(f"['edge_mapping']['edge_weight'][{str(t)!r}]", f"has {w.size} entries for {e.shape[1]} edges.")
    return e, w.reshape(-1)


def covid_series(r: PygtReader, T: int, lags: int) -> tuple[np.ndarray, np.ndarray]:
    """England COVID's lagged features ``[T - lags, V, lags]`` and targets
    ``[T - lags, V]`` from the case series ``y``, standardized over all its rows."""
    stacked = r.array(r.get(r.data, "y"), "key 'y'", ndim=2)
    if stacked.shape[0] < T:
        raise r.fail("key 'y'", f"has {stacked.shape[0]} time steps but time_periods is {T}.")
    std = standardize(stacked, 10 ** -10)  # over all rows of 'y', as PyGT
    return sliding_window_view(std, lags, axis=0)[: T - lags], std[lags:T]


def _england_covid(r: PygtReader, lags: int, allow_nonfinite: bool) -> DynamicGraphSignal:
    T = r.time_periods()
    lags = check_lags(lags, T, "feature_lags", r)
    # PyGT pairs snapshot t (t < T - lags) with the edges of day t, not of day t + lags.
    edges, weights = [], []
    for t in range(T - lags):  # check_lags: at least one day
        e, w = covid_day(r, t)
        edges.append(e)
        weights.append(w)
    x, y = covid_series(r, T, lags)
    return _dynamic_signal(edges, weights, np.ascontiguousarray(x, dtype=np.float32), list(y.astype(np.float32)), allow_nonfinite)


def _montevideo_bus(
    r: PygtReader, lags: int, target_var: str, feature_vars: Any, allow_nonfinite: bool
) -> DynamicGraphSignal:
    if isinstance(feature_vars, str):
        feature_vars = [feature_vars]
    feature_vars = list(feature_vars)
    if not feature_vars:
        raise SignalValidationError("feature_vars", "is empty.", "name at least one variable, e.g. ['y'].")
    nodes = r.get(r.data, "nodes")
    links = r.get(r.data, "links")
    if not isinstance(nodes, list) or not isinstance(links, list):
        raise r.fail("keys 'nodes'/'links'", "must be JSON lists.")
    # JSON objects: reading their fields is necessarily one Python access each.
    node_ids = np.array([r.get(n, "bus_stop", "['nodes'][i]") for n in nodes])
    src = np.array([r.get(d, "source", "['links'][i]") for d in links])
    dst = np.array([r.get(d, "target", "['links'][i]") for d in links])
    weights = np.array([r.get(d, "weight", "['links'][i]") for d in links]).T
    # vectorized id -> row map (PyGT: a dict over bus_stop)
    uniq, first = np.unique(node_ids, return_index=True)
    if uniq.shape[0] != node_ids.shape[0]:
        raise r.fail("['nodes'][i]['bus_stop']", "contains duplicate bus stops.", "give every node a unique bus_stop.")
    rows = first  # row of uniq[k] in `nodes`
    edge_cols = []
    for name, ends in (("source", src), ("target", dst)):
        if ends.size == 0:
            edge_cols.append(np.zeros(0, dtype=np.int64))
            continue
        pos = np.clip(np.searchsorted(uniq, ends), 0, uniq.shape[0] - 1)
        bad = uniq[pos] != ends
        if bad.any():
            raise r.fail(f"['links'][{int(np.flatnonzero(bad)[0])}][{name!r}]",
                         f"names bus stop {ends[bad][0]!r}, which is not in 'nodes'.")
        edge_cols.append(rows[pos].astype(np.int64))
    edges = np.stack(edge_cols) if src.size else np.zeros((2, 0), dtype=np.int64)

    def series(node: Any, key: str, container: Optional[str]) -> Any:
        obj = r.get(node, container, "['nodes'][i]") if container else node
        where = f"['nodes'][i][{container!r}]" if container else "['nodes'][i]"
        return r.get(obj, key, where)

    feats = r.array([[series(n, v, "X") for v in feature_vars] for n in nodes], "['nodes'][i]['X'][var]", ndim=3)
    V, F, T = feats.shape
    lags = check_lags(lags, T, "feature_lags", r)
    # PyGT: one column per (node, variable), node-major -> [T, V*F]
    stacked_f = feats.reshape(V * F, T).T
    if not allow_nonfinite:  # a constant series is NaN after standardize: named here, not as NaN in the file
        check_series_vary(stacked_f, "X", lambda s: f"bus stop {str(node_ids[s // F])!r}, variable {feature_vars[s % F]!r}")
    std_f = standardize(stacked_f)
    x = lag_windows(std_f, lags)  # [T-lags, V*F, lags]
    targ = r.array([series(n, target_var, None) for n in nodes], f"['nodes'][i][{target_var!r}]", ndim=2)
    if targ.shape[1] != T:
        raise r.fail(f"['nodes'][i][{target_var!r}]", f"has {targ.shape[1]} time steps but the features have {T}.")
    if not allow_nonfinite:
        check_series_vary(targ.T, target_var, lambda s: f"bus stop {str(node_ids[s])!r}")
    std_y = standardize(targ.T)
    y = std_y[lags:]
    if F == 1:
        return static_signal(edges, weights, x, y, V, allow_nonfinite=allow_nonfinite)
    # PyGT stacks several variables as V*F rows of x (not V rows with F*lags
    # columns): reproduce that as a graph-level x of shape [V*F, lags] per snapshot.
    return static_signal(edges, weights, x, y, V, x_level="graph", allow_nonfinite=allow_nonfinite)


def encode_tennis_features(X: np.ndarray, r: PygtReader, t: int, log_degree_cutoff: int = 4) -> np.ndarray:
    """Vectorized ``encode_features`` of PyGT's Twitter tennis loader: one-hot of
    ``min(ceil(log(deg+1)), 4)`` (5 classes) and ``floor(10 * transitivity)`` (11 classes)."""
    if X.ndim != 2 or X.shape[1] < 2:
        raise r.fail(f"[{str(t)!r}]['X']", f"must be [num_nodes, >=2] but has shape {list(X.shape)}.")
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.minimum(np.ceil(np.log(X[:, 0] + 1.0)), log_degree_cutoff)
        b = np.floor(X[:, 1] * 10)
    A = a[:, None] == np.arange(log_degree_cutoff + 1)[None, :]
    B = b[:, None] == np.arange(11)[None, :]
    for name, onehot in (("degree", A), ("transitivity", B)):
        missing = ~onehot.any(axis=1)
        if missing.any():
            raise r.fail(f"[{str(t)!r}]['X'][{int(np.flatnonzero(missing)[0])}]",
                         f"has a {name} value outside PyGT's encoding range.",
                         "use feature_mode=None for raw features.")
    return np.concatenate((A.astype(np.float64), B.astype(np.float64)), axis=1)


def check_tennis_options(event_id: str, N: Optional[int], feature_mode: Optional[str], target_offset: int) -> None:
    """Validate the Twitter tennis options.

    Raises:
        SignalValidationError: naming the option.
    """
    if event_id not in ("rg17", "uo17"):
        raise SignalValidationError("event_id", f"is {event_id!r}.", "use 'rg17' (Roland-Garros 2017) or 'uo17' (US Open 2017).")
    if feature_mode not in (None, "diagonal", "encoded"):
        raise SignalValidationError("feature_mode", f"is {feature_mode!r}.", "use None, 'diagonal' or 'encoded'.")
    if N is not None and (isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 1):
        raise SignalValidationError("N", f"is {N!r}.", "use None (all nodes) or a positive integer.")
    if isinstance(target_offset, bool) or not isinstance(target_offset, (int, np.integer)) or target_offset < 0:
        raise SignalValidationError("target_offset", f"is {target_offset!r}.", "use a non-negative integer.")


def tennis_snapshot(
    r: PygtReader, s: Any, t: int, N: Optional[int], feature_mode: Optional[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Twitter tennis snapshot ``t`` (the member ``s``): its edges ``[2, E]``,
    weights ``[E]`` and features, checked, cut to the first ``N`` nodes and
    encoded as ``feature_mode`` says."""
    e = r.edges(r.get(s, "edges", f"[{str(t)!r}]"), f"[{str(t)!r}]['edges']")
    w = r.array(r.get(s, "weights", f"[{str(t)!r}]"), f"[{str(t)!r}]['weights']").reshape(-1)
    if w.shape[0] != e.shape[1]:
        raise r.fail(f"[{str(t)!r}]['weights']", f"has {w.shape[0]} entries for {e.shape[1]} edges.")
    if N is not None:
        keep = (e[0] < N) & (e[1] < N)
        e, w = e[:, keep], w[keep]
    X = r.array(r.get(s, "X", f"[{str(t)!r}]"), f"[{str(t)!r}]['X']")
    if N is not None:
        X = X[:N]
    if feature_mode == "diagonal":
        X = np.identity(X.shape[0])
    elif feature_mode == "encoded":
        X = encode_tennis_features(X, r, t)
    return e, w, X


def tennis_target(r: PygtReader, raw_y: Any, t: int, N: Optional[int]) -> np.ndarray:
    """Snapshot ``t``'s target :math:`\\log(1 + y)` from the raw ``y`` member
    ``raw_y`` (of snapshot ``t + target_offset``), cut to the first ``N`` nodes."""
    y = np.log(1.0 + r.array(raw_y, f"[{str(t)!r}]['y']"))
    return y[:N] if N is not None else y


def _twitter_tennis(
    r: PygtReader, event_id: str, N: Optional[int], feature_mode: Optional[str], target_offset: int, allow_nonfinite: bool
) -> DynamicGraphSignal:
    check_tennis_options(event_id, N, feature_mode, target_offset)
    T = r.time_periods()
    snaps = [r.get(r.data, str(t)) for t in range(T)]
    edges, weights, features, raw_y = [], [], [], []
    for t, s in enumerate(snaps):  # loop over snapshots
        e, w, X = tennis_snapshot(r, s, t, N, feature_mode)
        edges.append(e)
        weights.append(w)
        features.append(X)
        raw_y.append(r.get(s, "y", f"[{str(t)!r}]"))
    targets = [tennis_target(r, raw_y[min(t + int(target_offset), T - 1)], t, N) for t in range(T)]
    return _dynamic_signal(edges, weights, features, targets, allow_nonfinite)


def _mtm(r: PygtReader, frames: int, allow_nonfinite: bool) -> DynamicGraphSignal:
    edges = r.edges(r.get(r.data, "edges"), "key 'edges'")
    num_joints = 21
    first = r.get(r.data, "0")
    if not isinstance(first, Mapping):
        raise r.fail("key '0'", "must map frame -> '(x, y, z)' strings.")
    L = len(first)
    features = np.zeros((L, num_joints, 3))
    for j in range(num_joints):  # 21 joints; the frames are parsed in one go
        joint = r.get(r.data, str(j))
        if not isinstance(joint, Mapping) or len(joint) != L:
            raise r.fail(f"key {str(j)!r}", f"must map {L} frames to '(x, y, z)' strings like joint '0'.")
        text = ",".join(joint.values()).replace("(", "").replace(")", "")
        try:
            xyz = np.array(text.split(","), dtype=np.float64) if L else np.zeros(0)
        except ValueError as exc:
            raise r.fail(f"key {str(j)!r}", f"holds a coordinate that is not a number ({exc}).") from None
        if xyz.shape[0] != 3 * L:
            raise r.fail(f"key {str(j)!r}", "must hold exactly three coordinates '(x, y, z)' per frame.")
        features[:, j, :] = xyz.reshape(L, 3)
    labels = r.array(list(r.get(r.data, "LABEL").values()), "key 'LABEL'", ndim=1)
    if labels.dtype.kind not in "iu" or (labels.size and labels.min() < 0):
        raise r.fail("key 'LABEL'", "must hold non-negative integer class labels.")
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1:
        raise SignalValidationError("frames", f"is {frames!r}.", "use a positive integer (PyGT's default is 16).")
    if labels.shape[0] != L:
        raise r.fail("key 'LABEL'", f"has {labels.shape[0]} frames but the joints have {L}.")
    if frames >= L:
        raise SignalValidationError("frames", f"is {frames} but the file has only {L} frames.", f"use frames < {L}.")
    ohe = np.eye(int(labels.max()) + 1)[labels]
    # PyGT: x[i] = features[i:i+frames].T -> [3, 21, frames]; y[i] = ohe[i:i+frames] -> [frames, C]
    x = sliding_window_view(features, frames, axis=0)[: L - frames].transpose(0, 2, 1, 3)
    y = sliding_window_view(ohe, frames, axis=0)[: L - frames].transpose(0, 2, 1)
    weights = np.ones(edges.shape[1], dtype=np.int64)
    return static_signal(edges, weights, x, y, num_joints, x_level="graph", y_level="graph",
                          allow_nonfinite=allow_nonfinite)


BUILDERS: dict[str, Callable[..., DynamicGraphSignal]] = {
    "chickenpox": _chickenpox,
    "pedalme": _pedalme,
    "wikimaths": _wikimaths,
    "england_covid": _england_covid,
    "montevideo_bus": _montevideo_bus,
    "twitter_tennis": _twitter_tennis,
    "mtm": _mtm,
}


# --------------------------------------------------------------------- entry
def resolve_path(path_or_name: Union[PathLike, str], dataset: Optional[str], cache_dir: Optional[PathLike],
                  event_id: str) -> tuple[str, Optional[str]]:
    """Return ``(file path, dataset or None)``; never downloads."""
    p = os.fspath(path_or_name)
    if os.path.isfile(p):
        return p, dataset
    if os.path.isdir(p):
        if dataset is None:
            raise SignalValidationError("dataset", f"is None but {p!r} is a directory.",
                                        "pass dataset='<name>' to pick the canonical file in it, or a file path.")
        cache_dir, name = p, dataset
    else:
        if os.sep in p or (os.altsep and os.altsep in p) or p.endswith((".json", ".gz")):
            raise DatasetNotFoundError(f"PyGT JSON file {p!r} does not exist. pyg_dynscale never downloads data: "
                                       "download it and pass the local path (or a dataset name with cache_dir=...).")
        name = p
        if dataset is not None and canonical_dataset_name(dataset) != canonical_dataset_name(name):
            raise SignalValidationError("dataset", f"is {dataset!r} but path_or_name names {name!r}.",
                                        "give the dataset name once.")
    canonical = canonical_dataset_name(name)
    if cache_dir is None:
        if canonical == "england_covid":
            return embedded_england_covid_path(), canonical
        raise DatasetNotFoundError(
            f"dataset {canonical!r} needs its file {canonical_file_name(canonical, event_id)!r}: pyg_dynscale never "
            "downloads. Download it from https://github.com/benedekrozemberczki/pytorch_geometric_temporal/tree/master/dataset "
            "(Twitter tennis: ferencberes/pytorch_geometric_temporal, branch developer) and pass its path, or cache_dir=<folder>."
        )
    fname = canonical_file_name(canonical, event_id)
    candidates = [os.path.join(os.fspath(cache_dir), f) for f in (fname, fname + ".gz")]
    for c in candidates:
        if os.path.isfile(c):
            return c, canonical
    raise DatasetNotFoundError(
        f"dataset {canonical!r}: none of {candidates} exists. pyg_dynscale never downloads: put PyGT's "
        f"{fname} (optionally gzipped) into {os.fspath(cache_dir)!r}."
    )


def load_pygt_json(
    path_or_name: Union[PathLike, str],
    dataset: Optional[str] = None,
    *,
    cache_dir: Optional[PathLike] = None,
    allow_nonfinite: bool = False,
    **dataset_options: Any,
) -> DynamicGraphSignal:
    r"""Read one of PyGT 0.56.2's dataset JSON files into a
    :class:`~pyg_dynscale.data.DynamicGraphSignal`, with exactly the
    preprocessing of PyGT's loader class.

    For the lagged datasets (Chickenpox, PedalMe, WikiMaths, England COVID,
    Montevideo bus) with :math:`Z \in \mathbb{R}^{T \times V}` the (for
    WikiMaths / England COVID / Montevideo: column-standardized,
    :math:`(Z - \mu) / \sigma`, England COVID with :math:`\sigma + 10^{-10}`)
    series and :math:`F` = ``feature_lags``, snapshot :math:`i < T - F` has

    .. math::
        X_i = Z_{i:i+F}^\top \in \mathbb{R}^{V \times F},
        \qquad y_i = Z_{i+F} \in \mathbb{R}^{V}.

    Args:
        path_or_name: a local ``.json`` / ``.json.gz`` file, a folder (with
            ``dataset``), or a dataset name (looked up in ``cache_dir``;
            ``"england_covid"`` without ``cache_dir`` reads the copy embedded
            in the package).
        dataset: one of ``"chickenpox"``, ``"pedalme"``, ``"wikimaths"``,
            ``"england_covid"``, ``"montevideo_bus"``, ``"twitter_tennis"``,
            ``"mtm"``. Default: detected from the file's keys.
        cache_dir: folder holding PyGT's files under their canonical names
            (:data:`CANONICAL_FILES`, optionally with ``.gz``). Never downloads.
        allow_nonfinite: accept NaN/inf (PyGT's unguarded standardization
            gives NaN on a constant series; by default that is an error).
        **dataset_options: the options of the PyGT loader (defaults as PyGT):
            ``feature_lags`` (PyGT's ``get_dataset(lags=...)``: raw steps per
            snapshot's features; Chickenpox, PedalMe 4; WikiMaths, England
            COVID 8; Montevideo 4; ``lags=`` works for one release with a
            :class:`DeprecationWarning`: a window's ``lags`` is
            :class:`~pyg_dynscale.windows.WindowTrainer`'s), ``target_var="y"`` and ``feature_vars=["y"]``
            (Montevideo), ``event_id="rg17"``, ``N=None``,
            ``feature_mode="encoded"`` and ``target_offset=1`` (Twitter tennis),
            ``frames=16`` (MTM).

    Returns:
        A signal with ``x``, ``y`` and ``edge_weight`` (``edge_attr`` in the
        snapshots) as PyGT: float32, integer targets as int64. MTM's ``x``
        (``[3, 21, frames]``) and ``y`` (``[frames, 6]``) are graph-level
        fields; Montevideo with several ``feature_vars`` keeps PyGT's
        ``[V * F, feature_lags]`` layout of ``x`` as a graph-level field.

    Raises:
        DatasetNotFoundError: the file does not exist (nothing is downloaded).
        DatasetFormatError: the file is not valid JSON or lacks a key (named).
        SignalValidationError: unknown dataset name or option.
    """
    if dataset is not None:
        dataset = canonical_dataset_name(dataset)
    path, dataset = resolve_path(path_or_name, dataset, cache_dir, default_event_id(path_or_name, dataset_options))
    raw = read_bytes(path, "PyGT JSON file")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetFormatError(path, "JSON", f"is malformed ({exc}).", "re-download the file; it must be PyGT's JSON.") from None
    if dataset is None:
        dataset = detected_dataset(data, path)
    check_json_object(data, path)
    opts = dataset_options_of(dataset, dataset_options)
    return BUILDERS[dataset](PygtReader(data, path, dataset), **opts, allow_nonfinite=allow_nonfinite)


def default_event_id(path_or_name: Union[PathLike, str], dataset_options: dict[str, Any]) -> str:
    """The Twitter tennis ``event_id``: the option, else ``"uo17"`` for a
    path or name ending in ``uo17`` (then also set in ``dataset_options``),
    else ``"rg17"``."""
    event_id = dataset_options.get("event_id", "rg17")
    if "event_id" not in dataset_options and str(path_or_name).lower().endswith(("uo17", "uo17.json", "uo17.json.gz")):
        event_id = dataset_options["event_id"] = "uo17"
    return event_id


def detected_dataset(data: Any, path: str) -> str:
    """The dataset whose format the decoded JSON ``data`` has.

    Raises:
        DatasetFormatError: it matches none.
    """
    dataset = detect_dataset(data)
    if dataset is None:
        keys = list(data)[:8] if isinstance(data, Mapping) else type(data).__name__
        raise DatasetFormatError(path, "top-level keys", f"({keys}) match no PyGT dataset format.",
                                 f"pass dataset=<one of {list(DATASETS)}>.")
    return dataset


def check_json_object(data: Any, path: str) -> None:
    """Refuse a decoded JSON value that is not an object (a mapping)."""
    if not isinstance(data, Mapping):
        raise DatasetFormatError(path, "JSON", f"is a {type(data).__name__}, not an object.", "pass PyGT's dataset JSON.")


def _outside_package() -> int:
    """The ``stacklevel`` of the first caller outside ``pyg_dynscale/data`` (``load``, ``load_pygt_json``,
    ``ingest_pygt_json`` reach the options at different depths): a warning points at the user's line."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def dataset_options_of(dataset: str, dataset_options: dict[str, Any]) -> dict[str, Any]:
    """``dataset``'s options: its defaults (:data:`DATASET_OPTIONS`) updated
    by ``dataset_options``; ``event_id`` only for Twitter tennis.

    Raises:
        SignalValidationError: an option the dataset does not have.
    """
    defaults = DATASET_OPTIONS[dataset]
    if "lags" in dataset_options and "feature_lags" in defaults:  # PyGT's spelling: one release with a warning
        if "feature_lags" in dataset_options:
            raise TypeError("got both 'lags' (deprecated) and 'feature_lags'; pass only feature_lags=")
        warnings.warn(LAGS_RENAMED.format(owner=dataset), DeprecationWarning, stacklevel=_outside_package())
        dataset_options = {**dataset_options, "feature_lags": dataset_options["lags"]}
        del dataset_options["lags"]
    unknown = sorted(set(dataset_options) - set(defaults))
    if unknown:
        raise SignalValidationError(unknown[0], f"is not an option of the {dataset} dataset.",
                                    f"use {sorted(defaults)} (PyGT's get_dataset/constructor options).")
    opts = {**defaults, **dataset_options}
    if dataset != "twitter_tennis":
        opts.pop("event_id", None)
    if "feature_lags" in opts:  # the builders keep PyGT's parameter name
        opts["lags"] = opts.pop("feature_lags")
    return opts
