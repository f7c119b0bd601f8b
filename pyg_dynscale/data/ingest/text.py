r"""Reading a text file (plain or gzip) as token tables of at most ``chunk_rows``
lines each, with the in-memory tokenizer's rules and line numbers.

The file is read in pieces of ``64 * chunk_rows`` bytes (at least 4 KiB),
cut at line ends into blocks of at most ``chunk_rows`` lines; every block is
tokenized by :func:`~pyg_dynscale.data.loaders.edgelist_parse.tokenize` with
the block's first line number and the number of fields of the file's first
data line, so a malformed line is named by its line number in the file, as
the in-memory loaders name it. Memory: one piece, one block and its tokens.
"""
from __future__ import annotations

import gzip
import os
import zlib
from typing import BinaryIO, Iterator, Optional

import numpy as np

from ...errors import SignalValidationError
from ..loaders._common import DatasetFormatError, PathLike, existing_file
from ..loaders.edgelist_parse import TokenTable, first_data_line, has_header, header_only_error, tokenize

#: default lines per chunk of the chunked readers: 2^18, i.e. about 250 MB of
#: parsing temporaries for a 6-field JODIE line (the tokenizer's ``bytes.split``
#: makes one Python object a field, ~150 B), 120 MB for a 3-field SNAP line
DEFAULT_CHUNK_ROWS = 1 << 18
_MIN_READ = 1 << 12


def check_chunk_rows(chunk_rows: object) -> int:
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1:
        raise SignalValidationError("chunk_rows", f"is {chunk_rows!r}.", "use a positive number of rows, e.g. 2**18.")
    return int(chunk_rows)


def open_text(path: PathLike, what: str) -> BinaryIO:
    """Open ``path`` for reading, gzip detected by its magic bytes (as
    :func:`~pyg_dynscale.data.loaders._common.read_bytes`)."""
    path = existing_file(path, what)
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def line_blocks(fh: BinaryIO, chunk_rows: int, source: str) -> Iterator[tuple[bytes, int]]:
    """``(block, first line number)`` of at most ``chunk_rows`` complete lines each."""
    read_size = max(64 * chunk_rows, _MIN_READ)
    carry, line = b"", 1
    while True:
        try:
            piece = fh.read(read_size)
        except (OSError, EOFError, zlib.error) as exc:
            raise DatasetFormatError(source, "gzip stream", f"is corrupt or truncated ({exc}).", "re-download the file.") from None
        if not piece:
            if carry:
                yield carry, line
            return
        buf = carry + piece
        nl = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)
        if nl.shape[0] == 0:
            carry = buf
            continue
        ends = nl[chunk_rows - 1::chunk_rows] + 1
        if ends.shape[0] == 0 or ends[-1] != nl[-1] + 1:
            ends = np.append(ends, nl[-1] + 1)
        start, lines_before = 0, 0
        for end in ends.tolist():
            n_lines = int(np.searchsorted(nl, end - 1)) + 1  # newlines up to and including this block's last
            yield buf[start:end], line + lines_before
            lines_before = n_lines
            start = end
        line += nl.shape[0]
        carry = buf[start:]


class ChunkedTable:
    r"""The data lines of a text file as a sequence of :class:`TokenTable`
    chunks of at most ``chunk_rows`` lines.

    Args:
        path: the file (plain or gzip).
        what: the kind of file for "does not exist" messages.
        chunk_rows: lines per chunk.
        delimiter, skip_rows: as :func:`tokenize`.
        detect_header: skip the first data line if its first field is not a
            number (JODIE CSV).

    After iterating, :attr:`rows` is the number of data rows; :meth:`finish`
    raises the in-memory tokenizer's errors for a file without data rows.
    """

    def __init__(self, path: PathLike, what: str, *, chunk_rows: int, delimiter: Optional[str] = None,
                 skip_rows: int = 0, detect_header: bool = False) -> None:
        if isinstance(skip_rows, bool) or not isinstance(skip_rows, (int, np.integer)) or skip_rows < 0:
            raise SignalValidationError("skip_rows", f"is {skip_rows!r}.", "use a non-negative integer.")
        self.path = os.fspath(path)
        self.source = os.path.basename(self.path)
        self.what = what
        self.chunk_rows = check_chunk_rows(chunk_rows)
        self.delimiter = delimiter
        self.skip_rows = int(skip_rows)
        self.detect_header = detect_header
        self.rows = 0
        self.num_cols: Optional[int] = None
        self._skipped = 0

    def __iter__(self) -> Iterator[TokenTable]:
        fh = open_text(self.path, self.what)
        to_skip = self.skip_rows
        expect: Optional[tuple[int, int]] = None
        detect = self.detect_header
        try:
            for block, first_line in line_blocks(fh, self.chunk_rows, self.source):
                if detect:
                    if not first_data_line(block.lstrip(b"\xef\xbb\xbf")):
                        continue  # comments only: the header, if any, is in a later block
                    detect = False
                    to_skip = 1 if has_header(block) else 0
                    self.skip_rows = to_skip
                table = tokenize(block, self.source, delimiter=self.delimiter, skip_rows=to_skip,
                                 first_line=first_line, expect=expect, allow_empty=True)
                self._skipped += table.skipped
                to_skip -= table.skipped
                if table.num_rows == 0:
                    continue
                if expect is None:
                    expect = (table.num_cols, int(table.line_no[0]))
                    self.num_cols = table.num_cols
                self.rows += table.num_rows
                yield table
        finally:
            fh.close()

    def finish(self) -> None:
        """Raise what the in-memory tokenizer raises for a file without data rows."""
        if self.rows:
            return
        if self.skip_rows and self.detect_header:  # the header was detected, not asked for: say so
            raise header_only_error(self.source)
        if self.skip_rows:
            raise DatasetFormatError(self.source, "skip_rows", f"skips {self.skip_rows} lines but there are only "
                                     f"{self._skipped} data lines.", "lower skip_rows.")
        raise DatasetFormatError(self.source, "content", "has no data lines (only comments or blank lines).", "check the file.")
