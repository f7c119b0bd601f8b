r"""An incremental reader of one JSON document: objects are walked member by
member, every other value is decoded whole with :mod:`json`, so memory holds
one member value at a time, not the document.

PyGT's dataset files are single-line JSON objects whose size grows with the
snapshots (``{"0": {...}, "1": {...}, ...}``, ``{"edge_mapping": {"edge_index":
{"0": [...], ...}}}``); :meth:`JsonStream.walk` yields ``(path, value)`` for
each member whose value is not an object to descend into. No dependency: the
text is decoded incrementally (UTF-8) and each value is decoded by
:meth:`json.JSONDecoder.raw_decode` from a buffer that grows (doubling) until
the value is complete, so a value costs amortized linear time. A number is
accepted only when a character follows it (a buffer ending in ``12`` may hold
the first digits of ``123``).
"""
from __future__ import annotations

import codecs
import json
from typing import Any, BinaryIO, Callable, Iterator, Optional

from ..loaders._common import DatasetFormatError

_WS = " \t\n\r"

#: the value :meth:`JsonStream.walk` yields for a member whose array it walks element by element
#: (then each element follows as ``(path + (i,), element)``)
ARRAY = object()
#: characters decoded per read
READ_CHARS = 1 << 20


class JsonStream:
    """Walk the JSON document in ``fh`` (binary) without holding it.

    Args:
        fh: the file, opened for binary reading (gzip or plain).
        source: the file name for errors.
        read_chars: bytes read (and decoded) at a time.

    Raises (while walking):
        DatasetFormatError: malformed JSON, with the position in the document
            (``line L column C (char N)`` as :mod:`json` gives it).
    """

    def __init__(self, fh: BinaryIO, source: str, read_chars: int = READ_CHARS) -> None:
        self.fh, self.source, self.read_chars = fh, source, max(int(read_chars), 16)
        self._dec = codecs.getincrementaldecoder("utf-8")()
        self._json = json.JSONDecoder()
        self.buf, self.pos, self.eof = "", 0, False
        self._dropped = 0          # characters dropped before buf
        self._lines = 0            # newlines among them
        self._last_nl = -1         # absolute position of the last dropped newline

    # ---------------------------------------------------------------- buffer
    def _fill(self, at_least: int = 0) -> bool:
        """Read more text (at least ``at_least`` bytes); ``False`` at the end of the file."""
        if self.eof:
            return False
        try:
            raw = self.fh.read(max(self.read_chars, at_least))
        except (OSError, EOFError) as exc:
            raise DatasetFormatError(self.source, "gzip stream", f"is corrupt or truncated ({exc}).", "re-download the file.") from None
        if not raw:  # positions in buf stay valid: nothing is dropped
            self.eof = True
            return False
        if self.pos > 0:  # drop what was consumed, remembering its newlines for positions
            gone = self.buf[:self.pos]
            n = gone.count("\n")
            if n:
                self._lines += n
                self._last_nl = self._dropped + gone.rindex("\n")
            self._dropped += self.pos
            self.buf, self.pos = self.buf[self.pos:], 0
        try:
            self.buf += self._dec.decode(raw)
        except UnicodeDecodeError as exc:
            raise self._malformed(f"invalid UTF-8 ({exc.reason})", self.pos) from None
        return True

    def _malformed(self, msg: str, pos: int) -> DatasetFormatError:
        a = self._dropped + pos
        head = self.buf[:pos]
        lines = self._lines + head.count("\n")
        last_nl = self._dropped + head.rindex("\n") if "\n" in head else self._last_nl
        return DatasetFormatError(self.source, "JSON", f"is malformed ({msg}: line {lines + 1} column {a - last_nl} (char {a})).",
                                  "re-download the file; it must be PyGT's JSON.")

    def _peek(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def _expect(self, ch: str, what: str) -> None:
        if self._peek() != ch:
            raise self._malformed(f"Expecting {what}", self.pos)
        self.pos += 1

    def value(self) -> Any:
        """Decode the value at the current position, reading as much as it needs."""
        self._peek()
        while True:
            try:
                obj, end = self._json.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self._fill(len(self.buf) - self.pos):  # incomplete: read as much again, retry
                    continue
                raise self._malformed(exc.msg, exc.pos) from None
            if end == len(self.buf) and not self.eof and self._fill(len(self.buf) - self.pos):
                continue  # a number may go on in the next piece
            self.pos = end
            return obj

    # ---------------------------------------------------------------- walking
    def walk(self, descend: Callable[[tuple[str, ...]], bool],
             elements: Optional[Callable[[tuple[str, ...]], bool]] = None) -> Iterator[tuple[tuple[str, ...], Any]]:
        """``(path, value)`` of the top-level object's members, descending into
        a member whose value is an object when ``descend(path)``; then checks
        that nothing but whitespace follows. A top-level value that is not an
        object is yielded as ``((), value)``. A member whose value is an array
        and ``elements(path)`` is walked element by element: ``(path,``
        :data:`ARRAY` ``)``, then ``(path + (i,), element)`` for each element
        (decoded whole), so the array is never held."""
        if self._peek() != "{":
            yield (), self.value()
        else:
            yield from self._object((), descend, elements)
        if self._peek() != "":
            raise self._malformed("Extra data", self.pos)

    def _array(self, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
        self._expect("[", "'['")
        yield path, ARRAY
        if self._peek() == "]":
            self.pos += 1
            return
        i = 0
        while True:
            yield path + (i,), self.value()
            i += 1
            c = self._peek()
            if c == ",":
                self.pos += 1
            elif c == "]":
                self.pos += 1
                return
            else:
                raise self._malformed("Expecting ',' delimiter", self.pos)

    def _object(self, path: tuple[str, ...], descend: Callable[[tuple[str, ...]], bool],
                elements: Optional[Callable[[tuple[str, ...]], bool]] = None) -> Iterator[tuple[tuple[str, ...], Any]]:
        self._expect("{", "'{'")
        if self._peek() == "}":
            self.pos += 1
            return
        while True:
            if self._peek() != '"':
                raise self._malformed("Expecting property name enclosed in double quotes", self.pos)
            key = self.value()
            self._expect(":", "':' delimiter")
            sub = path + (key,)
            c = self._peek()
            if c == "{" and descend(sub):
                yield from self._object(sub, descend, elements)
            elif c == "[" and elements is not None and elements(sub):
                yield from self._array(sub)
            else:
                yield sub, self.value()
            c = self._peek()
            if c == ",":
                self.pos += 1
            elif c == "}":
                self.pos += 1
                return
            else:
                raise self._malformed("Expecting ',' delimiter", self.pos)
