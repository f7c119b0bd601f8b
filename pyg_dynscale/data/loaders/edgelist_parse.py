r"""Fast, vectorized parsing of numeric edge-list text (SNAP, KONECT, CSV).

The whole file is handled as one ``bytes`` object: comment lines are blanked
with one regular expression, separators are mapped to spaces with
``bytes.translate``, the number of tokens on every line is counted with numpy
on the raw bytes (so a malformed line is found and named without a Python loop
over lines), and the tokens are converted column by column with numpy's
``astype`` from a byte-string array. sx-mathoverflow (506k lines) parses in
about a second.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ...errors import SignalValidationError
from ._common import DatasetFormatError

_COMMENT = re.compile(rb"(?m)^[ \t]*[%#][^\n]*")
_WS = b"\t\r\v\f"


@dataclass
class TokenTable:
    """The data lines of an edge-list file as a ``[rows, cols]`` byte-string array.

    Attributes:
        tokens: ``[R, C]`` numpy ``S`` array.
        line_no: ``[R]`` 1-based line number of each row in the original file.
        source: the file name, for error messages.
    """

    tokens: np.ndarray
    line_no: np.ndarray
    source: str
    #: data lines dropped by ``skip_rows`` (a chunk of a streamed file may hold fewer than asked)
    skipped: int = 0

    @property
    def num_rows(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def num_cols(self) -> int:
        return int(self.tokens.shape[1])

    def column_index(self, col: int, name: str) -> int:
        """Resolve a (possibly negative) column index, or raise naming ``name``."""
        C = self.num_cols
        if isinstance(col, bool) or not isinstance(col, (int, np.integer)) or not -C <= col < C:
            raise SignalValidationError(
                name, f"is {col!r} but the file {self.source!r} has {C} columns.",
                f"use a column index in {-C} .. {C - 1} (negative counts from the end).",
            )
        return int(col) % C

    def _bad_value(self, col: int, kind: str, name: str, exc: Exception) -> DatasetFormatError:
        # Error path only: find the first token that does not convert.
        conv = int if kind == "int" else float
        column = self.tokens[:, col]
        for r in range(column.shape[0]):
            try:
                conv(column[r].decode())
            except ValueError:
                tok = column[r].decode(errors="replace")
                what = "an integer vertex id" if kind == "int" else "a number"
                return DatasetFormatError(
                    self.source, f"line {int(self.line_no[r])}, column {col} ({name})",
                    f"holds {tok!r}, which is not {what}.",
                    "fix or remove the line; a header row can be skipped with skip_rows=1, "
                    "comment lines must start with '%' or '#'.",
                )
        return DatasetFormatError(self.source, f"column {col} ({name})", f"cannot be converted ({exc}).")

    def ints(self, col: int, name: str) -> np.ndarray:
        """Column ``col`` as int64 (vertex ids)."""
        try:
            return self.tokens[:, col].astype(np.int64)
        except (ValueError, OverflowError) as exc:
            raise self._bad_value(col, "int", name, exc) from None

    def floats(self, col: int, name: str) -> np.ndarray:
        """Column ``col`` as float64 (timestamps, weights); must be finite."""
        try:
            out = self.tokens[:, col].astype(np.float64)
        except ValueError as exc:
            raise self._bad_value(col, "float", name, exc) from None
        bad = ~np.isfinite(out)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise DatasetFormatError(
                self.source, f"line {int(self.line_no[r])}, column {col} ({name})",
                f"holds {self.tokens[r, col].decode(errors='replace')!r}, which is not finite.", "fix or remove the line.",
            )
        return out


def _separator_table(delimiter: Optional[str]) -> bytes:
    seps = _WS + b","
    if delimiter is not None:
        d = delimiter.encode() if isinstance(delimiter, str) else bytes(delimiter)
        if len(d) != 1 or d in (b"\n", b"%", b"#", b"-", b"+", b".") or d.isdigit() or d.isalpha():
            raise SignalValidationError(
                "delimiter", f"is {delimiter!r}.", "use a single separator character such as ',', ';', '\\t' or ' ', or None."
            )
        seps += d
    return bytes.maketrans(seps, b" " * len(seps))


def tokenize(
    data: bytes,
    source: str,
    *,
    delimiter: Optional[str] = None,
    skip_rows: int = 0,
    first_line: int = 1,
    expect: Optional[tuple[int, int]] = None,
    allow_empty: bool = False,
) -> TokenTable:
    """Split edge-list text into a rectangular token table.

    Lines whose first non-blank character is ``%`` or ``#`` are comments;
    blank lines are ignored. Whitespace and commas always separate fields;
    ``delimiter`` adds one more separator character (e.g. ``';'``).

    Args:
        data: the file's bytes (already decompressed).
        source: name for error messages.
        delimiter: an extra separator, or ``None``.
        skip_rows: number of leading data lines to skip (e.g. a CSV header).
        first_line: line number of ``data``'s first line (a chunk of a streamed file).
        expect: ``(fields, line)``: every data line must have ``fields`` fields, as
            line ``line`` (an earlier chunk's first data line) has.
        allow_empty: return an empty table for text without data lines (a chunk
            of comments), with ``skipped`` the data lines ``skip_rows`` dropped.

    Raises:
        DatasetFormatError: when lines have different numbers of fields (the
            first offending line is named) or the file has no data lines.
    """
    if isinstance(skip_rows, bool) or not isinstance(skip_rows, (int, np.integer)) or skip_rows < 0:
        raise SignalValidationError("skip_rows", f"is {skip_rows!r}.", "use a non-negative integer.")
    if data.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte-order mark
        data = data[3:]
    text = _COMMENT.sub(b"", data).translate(_separator_table(delimiter))
    buf = np.frombuffer(text, dtype=np.uint8)
    newline = np.flatnonzero(buf == 10)
    is_tok = (buf != 32) & (buf != 10)
    starts = is_tok.copy()
    starts[1:] &= ~is_tok[:-1]
    start_pos = np.flatnonzero(starts)
    line_of_token = np.searchsorted(newline, start_pos)  # 0-based line of each token
    n_lines = newline.shape[0] + 1
    per_line = np.bincount(line_of_token, minlength=n_lines)
    data_lines = np.flatnonzero(per_line)
    skipped = 0
    if skip_rows:
        if skip_rows >= data_lines.shape[0]:
            if allow_empty:
                return TokenTable(np.zeros((0, 0), dtype="S1"), np.zeros(0, dtype=np.int64), source,
                                  int(data_lines.shape[0]))
            raise DatasetFormatError(source, "skip_rows", f"skips {skip_rows} lines but there are only {data_lines.shape[0]} data lines.", "lower skip_rows.")
        cut_line = int(data_lines[skip_rows - 1])  # last skipped line
        cut = int(newline[cut_line]) + 1
        text = text[cut:]
        data_lines = data_lines[skip_rows:]
        skipped = int(skip_rows)
    if data_lines.shape[0] == 0:
        if allow_empty:
            return TokenTable(np.zeros((0, 0), dtype="S1"), np.zeros(0, dtype=np.int64), source, skipped)
        raise DatasetFormatError(source, "content", "has no data lines (only comments or blank lines).", "check the file.")
    counts = per_line[data_lines]
    C, first = (int(counts[0]), int(data_lines[0]) + first_line) if expect is None else expect
    wrong = np.flatnonzero(counts != C)
    if wrong.shape[0]:
        ln = int(data_lines[wrong[0]])
        raise DatasetFormatError(
            source, f"line {ln + first_line}",
            f"has {int(counts[wrong[0]])} fields but line {first} has {C}.",
            "every data line needs the same number of fields; comment lines must start with '%' or '#'.",
        )
    tokens = np.array(text.split())
    return TokenTable(tokens.reshape(-1, C), data_lines + first_line, source, skipped)


def first_data_line(data: bytes) -> bytes:
    """The first line of ``data`` that is neither blank nor a ``%``/``#`` comment (``b""`` if none)."""
    for line in data.splitlines():
        s = line.strip()
        if s and not s.startswith((b"%", b"#")):
            return s
    return b""


def has_header(data: bytes) -> bool:
    """A header is a first data line whose first field is not a number."""
    first = first_data_line(data.lstrip(b"\xef\xbb\xbf")).replace(b",", b" ").split()
    if not first:
        return False
    try:
        float(first[0])
    except ValueError:
        return True
    return False


def unsorted_error(source: str, line: int, t: float, previous: float) -> DatasetFormatError:
    """The error for an event earlier than the one before it (event readers, ``sort=False``)."""
    return DatasetFormatError(
        source, f"line {line}",
        f"has timestamp {t:g}, earlier than the previous event's {previous:g}: events must be in time order.",
        "sort the file by time, or pass sort=True (stable: ties keep file order).",
    )


def check_node_ids(ids: np.ndarray, table: TokenTable, col: int, name: str) -> None:
    """Refuse a negative node id in column ``col`` (``name``) of ``table``.

    Raises:
        DatasetFormatError: naming the first line that holds one.
    """
    neg = np.flatnonzero(ids < 0)
    if neg.shape[0]:
        r = int(neg[0])
        raise DatasetFormatError(
            table.source, f"line {int(table.line_no[r])}, column {col} ({name})",
            f"holds {int(ids[r])}: node ids must be >= 0.", "fix the line.",
        )


def header_only_error(source: str) -> DatasetFormatError:
    """The error for a file whose only data line is its (detected) header."""
    return DatasetFormatError(source, "content", "is a header line and no events.",
                              "add the events, one per line, below the header.")


def node_id_limit(node_bytes: int) -> Optional[tuple[int, int]]:
    """``(limit, memory)``: the node count whose state of ``node_bytes`` bytes a node fills this
    machine's physical memory (``memory`` bytes); ``None`` where the platform does not say."""
    from ._common import physical_memory_bytes

    memory = physical_memory_bytes()
    return None if memory is None else (memory // max(1, int(node_bytes)), memory)


def check_id_space(ids: np.ndarray, table: TokenTable, col: int, name: str, first_id: int, node_bytes: int) -> None:
    """Refuse a node id whose node memory cannot exist: ids are rows of the memory (JODIE files are
    not renumbered), so id ``i`` of column ``col`` (``name``, node ``first_id + i``) needs
    ``(first_id + i + 1) * node_bytes`` bytes; more than this machine's memory is refused, naming the
    line and the id (instead of an allocation of terabytes later).

    Raises:
        DatasetFormatError: naming the first line that holds such an id.
    """
    limit = node_id_limit(node_bytes)
    if limit is None or ids.shape[0] == 0:
        return
    over = np.flatnonzero(ids >= limit[0] - first_id)
    if over.shape[0]:
        r = int(over[0])
        need = (first_id + int(ids[r]) + 1) * int(node_bytes)
        raise DatasetFormatError(
            table.source, f"line {int(table.line_no[r])}, column {col} ({name})",
            f"holds node id {int(ids[r])}: JODIE ids are not renumbered (as PyG's JODIEDataset), so the node memory "
            f"needs a row for every id up to it, {need / 2 ** 40:.3g} TiB at {node_bytes} bytes a node, more than "
            f"this machine's {limit[1] / 2 ** 30:.3g} GiB.",
            "renumber the users and the items from 0 (each in order of first appearance, say).",
        )


def jodie_columns(table: TokenTable, node_bytes: int = 8, first_item: int = 0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The columns of a JODIE CSV table (``user,item,timestamp,state_label[,features...]``),
    validated: ``(user, item, timestamp, state_label, features [R, C - 4])``.

    ``node_bytes``: the node state a model keeps per id (default: one int64, a memory's last-update
    time): a user id, or an item id past ``first_item`` (the users known so far), whose memory of
    ``node_bytes`` per id up to it exceeds this machine's memory is refused (:func:`check_id_space`).

    Raises:
        DatasetFormatError: fewer than 4 fields, a non-numeric or non-integer
            value, a negative id, or an id beyond what a node memory can hold
            (the line is named).
    """
    if table.num_cols < 4:
        raise DatasetFormatError(
            table.source, f"line {int(table.line_no[0])}", f"has {table.num_cols} fields.",
            "a JODIE line is user,item,timestamp,state_label[,features...].",
        )
    user, item = table.ints(0, "user"), table.ints(1, "item")
    check_node_ids(user, table, 0, "user")
    check_node_ids(item, table, 1, "item")
    check_id_space(user, table, 0, "user", 0, node_bytes)
    check_id_space(item, table, 1, "item", max(int(first_item), int(user.max()) + 1), node_bytes)
    ts = table.floats(2, "timestamp")
    label = table.floats(3, "state_label")
    feats = np.stack([table.floats(c, f"feature {c - 4}") for c in range(4, table.num_cols)], axis=1) \
        if table.num_cols > 4 else np.zeros((table.num_rows, 0))
    return user, item, ts, label, feats


def event_columns(
    table: TokenTable, columns: Sequence[int], distinct: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``(source, target, time)`` columns that ``columns`` picks (by
    index, negative from the end) as int64, int64, float64.

    Raises:
        DatasetFormatError: an index out of range, or a non-numeric (ids:
            non-integer) value (the line is named).
        SignalValidationError: ``distinct`` and two indices name the same column.
    """
    cs = table.column_index(columns[0], "columns[0] (source)")
    cd = table.column_index(columns[1], "columns[1] (target)")
    ct = table.column_index(columns[2], "columns[2] (time)")
    if distinct and len({cs, cd, ct}) != 3:
        raise SignalValidationError("columns", f"{columns} name the same column twice.", "pick three different columns.")
    return table.ints(cs, "source"), table.ints(cd, "target"), table.floats(ct, "time")


def event_list_columns(
    table: TokenTable, columns: Sequence[int], msg_columns: Sequence[int], self_loops: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An event list's ``(src, dst, time, features [R, len(msg_columns)], line_no)``
    (see :func:`event_columns`), without the ``src == dst`` events unless ``self_loops``."""
    src, dst, tau = event_columns(table, columns)
    feats = np.stack([table.floats(table.column_index(c, "msg_columns"), "feature") for c in msg_columns], axis=1) \
        if len(msg_columns) else np.zeros((table.num_rows, 0))
    line_no = table.line_no
    if not self_loops:
        keep = src != dst
        src, dst, tau, feats, line_no = src[keep], dst[keep], tau[keep], feats[keep], line_no[keep]
    return src, dst, tau, feats, line_no


def edge_list_columns(
    table: TokenTable, columns: Sequence[int], weight_column: Optional[int], self_loops: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray], np.ndarray]:
    """An edge list's ``(src, dst, time, weight or None, line_no)`` (see
    :func:`event_columns`, three different columns), without the
    ``src == dst`` events unless ``self_loops``."""
    src, dst, tau = event_columns(table, columns, distinct=True)
    wcol = table.floats(table.column_index(weight_column, "weight_column"), "weight") if weight_column is not None else None
    line_no = table.line_no
    if not self_loops:
        keep = src != dst
        src, dst, tau, line_no = src[keep], dst[keep], tau[keep], line_no[keep]
        wcol = None if wcol is None else wcol[keep]
    return src, dst, tau, wcol, line_no
