"""One entry point that picks the right loader for a file."""
from __future__ import annotations

import os
from typing import Any, Optional, Union

from ...errors import SignalValidationError
from ..signal import DynamicGraphSignal
from ._common import DatasetNotFoundError, PathLike, read_bytes
from .edgelist import load_edge_list
from .pygt_json import DATASETS, canonical_dataset_name, load_pygt_json

FORMATS = ("auto", "pygt-json", "edgelist", "dynscale")
_EDGELIST_EXT = (".txt", ".csv", ".tsv", ".edges", ".edgelist", ".el", ".dat")
_GZIP_MAGIC = b"\x1f\x8b"


def detect_format(path: PathLike) -> str:
    """``"pygt-json"``, ``"edgelist"`` or ``"dynscale"`` (a file written by
    :meth:`DynamicGraphSignal.save`), from the file name, else the content."""
    p = os.fspath(path)
    name = p.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".json"):
        return "pygt-json"
    if name.endswith(_EDGELIST_EXT) or name.startswith("out.") or os.path.basename(name).startswith("out."):
        return "edgelist"
    if name.endswith((".pt", ".pth", ".dynscale")):
        return "dynscale"
    if not os.path.isfile(p):
        raise DatasetNotFoundError(f"file {p!r} does not exist (pyg_dynscale never downloads data).")
    with open(p, "rb") as fh:
        head = fh.read(4)
    if head[:2] == b"PK":  # torch.save zip archive
        return "dynscale"
    text = read_bytes(p)[:4096] if head[:2] == _GZIP_MAGIC else open(p, "rb").read(4096)
    return "pygt-json" if text.lstrip()[:1] in (b"{", b"[") else "edgelist"


def load(
    path: Union[PathLike, str],
    *,
    format: str = "auto",
    window: Optional[Union[float, str]] = None,
    **options: Any,
) -> DynamicGraphSignal:
    """Load a dynamic graph from a file, detecting its format.

    Args:
        path: a PyGT JSON file (``.json[.gz]``), a temporal edge list
            (``.txt``, ``.csv``, ``.tsv``, KONECT ``out.*``, gzipped or not), a
            signal saved with :meth:`DynamicGraphSignal.save`, or a PyGT dataset
            name (``"england_covid"`` needs no file: it is embedded).
        format: ``"auto"`` (by extension, else by content: ``{`` starts JSON),
            ``"pygt-json"``, ``"edgelist"`` or ``"dynscale"``.
        window: snapshot window (seconds or ``"7d"``); required for edge lists.
        **options: passed to :func:`load_pygt_json` or :func:`load_edge_list`.
    """
    if format not in FORMATS:
        raise SignalValidationError("format", f"is {format!r}.", f"use one of {list(FORMATS)}.")
    p = os.fspath(path)
    if format == "auto":
        if not os.path.exists(p):
            try:
                canonical_dataset_name(p)
                format = "pygt-json"
            except SignalValidationError:
                raise DatasetNotFoundError(
                    f"{p!r} is neither an existing file nor a PyGT dataset name ({list(DATASETS)}); "
                    "pyg_dynscale never downloads data."
                ) from None
        else:
            format = detect_format(p)
    if format == "pygt-json":
        if window is not None:
            raise SignalValidationError("window", "was given for a PyGT JSON dataset.", "drop it: PyGT datasets are already snapshots.")
        return load_pygt_json(p, **options)
    if format == "dynscale":
        if window is not None or options:
            raise SignalValidationError("options", "were given for a saved signal.", "DynamicGraphSignal.load takes no options.")
        return DynamicGraphSignal.load(p)
    if window is None:
        raise SignalValidationError("window", f"is required to bin the edge list {p!r} into snapshots.",
                                    "pass window=<seconds> or a string like '1d'.")
    return load_edge_list(p, window=window, **options)
