r"""``pyg-dynscale inspect PATH``: size and non-uniformity of a dynamic graph.

Loads ``PATH`` with :func:`pyg_dynscale.data.loaders.load` and prints the
number of snapshots, vertex-time nodes, spatial and temporal edges (the
supergraph's, see :class:`~pyg_dynscale.data.Supergraph`) and the
non-uniformity figures of :class:`~pyg_dynscale.data.SignalStatistics`
(DGC §2.2.1): spread of edges per snapshot (spatial) and of temporal sequence
lengths (temporal).

With ``--json`` the output is a single JSON object on stdout (schema version
:data:`SCHEMA_VERSION`, documented in ``docs/cli.md``); nothing else is
written to stdout.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import CommandError
from .output import print_report

SCHEMA_VERSION = 1
FORMATS = ("auto", "pygt-json", "edgelist", "dynscale")
_SUMMARY_KEYS = ("min", "p50", "mean", "max", "std", "cv")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "inspect",
        help="print size and non-uniformity statistics of a dynamic graph file",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
    )
    p.add_argument(
        "path", metavar="PATH",
        help="dataset file: PyGT JSON, a temporal edge list (.gz ok) or a saved signal (.pt)",
    )
    p.add_argument(
        "--format", choices=FORMATS, default="auto",
        help="file format (default: auto, from the file name and content)",
    )
    p.add_argument(
        "--window", default=None, metavar="SECONDS",
        help="snapshot length when reading a temporal edge list: seconds, or a duration like 1d, 12h, 30min",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (stable schema) instead of text")
    return p


def _check_path(path: str) -> None:

    if not os.path.exists(path):
        raise CommandError(f"no such file: '{path}'.")
    if os.path.isdir(path):
        raise CommandError(f"'{path}' is a directory; give a dataset file.")
    if not os.access(path, os.R_OK):
        raise CommandError(f"cannot read '{path}' (permission denied).")


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def inspect_path(path: str, format: str = "auto", window: float | str | None = None) -> dict[str, Any]:
    """The report that ``inspect --json`` prints, as a dict (see ``docs/cli.md``).

    Args:
        path: the dataset file.
        format: one of :data:`FORMATS`; ``"auto"`` is resolved from the file
            name and content (:func:`pyg_dynscale.data.loaders.detect_format`).
        window: snapshot length for edge lists, seconds or a duration string
            (``"1d"``); reported in seconds.
    """
    _check_path(path)  # before the data package imports torch: a missing file is reported at once
    from ..data.loaders import detect_format, load, parse_window

    seconds = None
    if window is not None:
        try:
            seconds = parse_window(window if isinstance(window, str) and not _is_number(window) else float(window))
        except ValueError as exc:
            raise CommandError(f"--window: {exc}") from None
    resolved = detect_format(path) if format == "auto" else format
    if resolved == "edgelist":  # its columns named for the command line, before the loader's columns= error
        from .train_checks import check_edge_list_columns

        check_edge_list_columns(path, "inspect")
    signal = load(path, format=resolved, window=seconds)
    stats = signal.statistics().to_dict()
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "path": path,
        "format": resolved,
        "window": seconds,
        "num_vertices": int(signal.num_vertices),
        "num_node_features": int(signal.num_node_features),
        "weighted": signal.edge_weight is not None,
        "fields": {name: f.level for name, f in signal.fields.items()},
    }
    report.update(stats)
    return report


def _format_text(r: dict[str, Any]) -> str:
    rows = [
        ("snapshots", r["snapshots"]),
        ("vertices", r["num_vertices"]),
        ("vertex-time nodes", r["vertex_time_nodes"]),
        ("spatial edges", r["spatial_edges"]),
        ("temporal edges", r["temporal_edges"]),
        ("temporal sequences", r["sequences"]),
        ("node features", r["num_node_features"]),
        ("edge weights", "yes" if r["weighted"] else "no"),
    ]
    fields = ", ".join(f"{k} ({v})" for k, v in r["fields"].items()) or "none"
    lines = [f"{r['path']}  (format: {r['format']}" + (f", window: {r['window']:g} s" if r["window"] else "") + ")"]
    lines += [f"  {name:<20}{value:>12,}" if isinstance(value, int) else f"  {name:<20}{value:>12}" for name, value in rows]
    lines.append(f"  {'fields':<20}{fields}")
    lines.append("")
    lines.append("  non-uniformity      " + "".join(f"{k:>11}" for k in _SUMMARY_KEYS))
    for label, key in (
        ("edges / snapshot", "edges_per_snapshot"),
        ("nodes / snapshot", "nodes_per_snapshot"),
        ("sequence length", "sequence_length"),
    ):
        lines.append(f"  {label:<20}" + "".join(f"{r[key][k]:>11.4g}" for k in _SUMMARY_KEYS))
    lines.append("")
    lines.append(
        f"  spatial non-uniformity  (CV of edges per snapshot):   {r['edges_per_snapshot']['cv']:.4f}"
    )
    lines.append(
        f"  temporal non-uniformity (CV of sequence lengths):     {r['sequence_length']['cv']:.4f}"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    return print_report(args.json, lambda: inspect_path(args.path, format=args.format, window=args.window),
                        _format_text)
