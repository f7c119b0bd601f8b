"""Shared pieces of the dataset loaders: typed errors and file reading.

Loaders never download: they read a local file (plain or gzip-compressed).
"""
from __future__ import annotations

import gzip
import os
import zlib
from importlib import resources
from typing import Optional, Union

from ...errors import DynScaleError, SignalFormatError

PathLike = Union[str, "os.PathLike[str]"]

_GZIP_MAGIC = b"\x1f\x8b"
_ENGLAND_COVID_FILE = "england_covid.json.gz"


def embedded_england_covid_path() -> str:
    """Filesystem path of the embedded, gzip-compressed ``england_covid.json``
    (:mod:`.embedded`; here so that the JSON loader can resolve the name)."""
    return str(resources.files("pyg_dynscale.data").joinpath("embedded").joinpath(_ENGLAND_COVID_FILE))


class DatasetNotFoundError(DynScaleError, FileNotFoundError):
    """Raised when a dataset file does not exist (loaders never download)."""


class DatasetFormatError(SignalFormatError):
    r"""Raised when a dataset file cannot be parsed.

    Args:
        source (str): the file (or dataset) being read.
        field (str): the offending key, column or line, e.g. ``"key 'FX'"``.
        problem (str): what is wrong.
        fix (str): how to fix it.
    """

    def __init__(self, source: str, field: str, problem: str, fix: str = "") -> None:
        self.source = source
        self.field = field
        self.problem = problem
        self.fix = fix
        msg = f"{source}: {field}: {problem}"
        if fix:
            msg += f" Fix: {fix}"
        super().__init__(msg)


def existing_file(path: PathLike, what: str = "dataset file") -> str:
    """Return ``path`` as a string if it names an existing file.

    Raises:
        DatasetNotFoundError: ``path`` does not exist or is a directory
            (``what`` names the file in the message).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DatasetNotFoundError(
            f"{what} {path!r} does not exist. pyg_dynscale never downloads data: "
            "download the file yourself and pass its local path."
        )
    if os.path.isdir(path):
        raise DatasetNotFoundError(f"{what} {path!r} is a directory, not a file.")
    return path


def read_bytes(path: PathLike, what: str = "dataset file") -> bytes:
    """Read a whole file, decompressing gzip transparently (detected by its
    magic bytes, not its name)."""
    path = existing_file(path, what)
    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DatasetFormatError(path, "gzip stream", f"is corrupt or truncated ({exc}).", "re-download the file.") from None
    return raw


def physical_memory_bytes() -> Optional[int]:
    """This machine's physical memory in bytes (``None`` where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None
