"""Reading pyg_dynscale's versioned files without arbitrary unpickling.

Signals, partitions and workload models are ``torch.save`` archives of a dict
with a ``format`` tag and a ``version``, holding only tensors and plain types;
they are read back with ``torch.load(weights_only=True)``, which refuses any
other object.
"""
from __future__ import annotations

from typing import Any, Union

import torch


def read_archive(
    path: str,
    *,
    tag: str,
    version: Union[int, tuple[int, ...]],
    what: str,
    remedy: str,
    error: type[Exception],
    map_location: Union[str, torch.device, None] = "cpu",
) -> dict[str, Any]:
    """Load ``path`` and check its format tag and version.

    Args:
        tag, version: the expected ``format`` and ``version`` entries (a
            tuple: the versions this reader accepts).
        what: the kind of file, for messages (e.g. ``"partition"``).
        remedy: how to re-create the file, appended to every message.
        error: the exception class raised for unreadable or foreign files.

    Raises:
        FileNotFoundError: no such file.
        error: corrupt/truncated archive, a pickle with arbitrary objects, a
            missing tag or an unsupported version.
    """
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # corrupt archive, or a pickle with arbitrary objects
        # torch's text for the latter advises loading with weights_only=False, i.e. unpickling an untrusted file:
        # never pass that on
        why = ("it holds Python objects other than tensors, which are not unpickled" if "weights_only" in str(exc)
               else f"{type(exc).__name__}: {str(exc)[:200]}")
        raise error(f"{path}: not a readable pyg_dynscale {what} file ({why}). {remedy}") from None
    if not isinstance(payload, dict) or payload.get("format") != tag:
        raise error(f"{path}: not a pyg_dynscale {what} file (format tag missing). {remedy}")
    accepted = version if isinstance(version, tuple) else (version,)
    if payload.get("version") not in accepted:
        reads = f"version {accepted[0]}" if len(accepted) == 1 else "versions " + ", ".join(map(str, accepted))
        raise error(
            f"{path}: {what} format version {payload.get('version')!r} is not supported by this "
            f"pyg_dynscale (reads {reads}). {remedy}"
        )
    return payload
