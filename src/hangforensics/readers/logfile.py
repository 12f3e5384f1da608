"""Reading evidence files: gzip by magic bytes, CRLF, bounded chunks (envelopes are stripped by ``payload``).

Files are read in byte chunks cut at line boundaries, so memory stays bounded
however large a log is; line numbers are physical (1-based) lines of the
decompressed file, which is what evidence ``file:line`` points at.
"""

from __future__ import annotations

import hashlib
import io
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 4 * 1024 * 1024         # memory: about 35x the chunk at peak while it is parsed
HEAD_BYTES = 64 * 1024
SMALL_BODY = 64 * 1024                # up to this many bytes, ``_decode_column`` splits lines in Python
MAX_LINE_BYTES = 64 * 1024 * 1024     # a longer line keeps its first MAX_LINE_BYTES (and says so)
NUL_SKIP_LIMIT = 256 * 1024 * 1024    # how far past a leading run of NUL bytes the sniffer looks

def is_gzip(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e


class GzipStream(io.RawIOBase):
    """A gzip file read as a stream that keeps what a damaged file holds.

    ``gzip.open`` raises at a truncated or corrupt member and loses the data of that read; this
    stream returns every byte that decompresses, then reports the damage in ``damage`` (a
    half-copied ``server.log.2.gz`` is common evidence).  Concatenated members are read in turn.
    """

    def __init__(self, path: Path) -> None:
        self._raw = path.open("rb")
        self._d = zlib.decompressobj(wbits=31)
        self._buf = b""
        self._pos = 0
        self._done = False
        self.damage: str | None = None

    def readable(self) -> bool:
        return True

    def _fill(self, want: int) -> None:
        while len(self._buf) < want and not self._done:
            # small input steps: a corrupt block loses only the output of its own step
            data = self._d.unconsumed_tail or self._raw.read(16 * 1024)
            if not data:
                if not self._d.eof:
                    self.damage = f"gzip data ends early after {self._pos + len(self._buf)} bytes (truncated copy?)"
                self._done = True
                break
            try:
                out = self._d.decompress(data, max(want - len(self._buf), 64 * 1024))
            except zlib.error as e:
                self.damage = (f"gzip data corrupt after {self._pos + len(self._buf)} bytes ({e}; the lines just "
                               f"before it may be garbled too)")
                self._done = True
                break
            self._buf += out
            if self._d.eof:
                rest = self._d.unused_data
                if rest.lstrip(b"\x00"):                   # another member follows
                    self._d = zlib.decompressobj(wbits=31)
                    self._raw.seek(-len(rest), io.SEEK_CUR)
                else:
                    self._done = True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            chunks = []
            while True:
                block = self.read(CHUNK_BYTES)
                if not block:
                    return b"".join(chunks)
                chunks.append(block)
        self._fill(size)
        out, self._buf = self._buf[:size], self._buf[size:]
        self._pos += len(out)
        return out

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Forward only (decompress and discard): resuming a compressed file from an offset."""
        if whence != io.SEEK_SET or offset < self._pos:
            raise io.UnsupportedOperation("GzipStream seeks forward only")
        while self._pos < offset:
            if not self.read(min(offset - self._pos, CHUNK_BYTES)):
                break
        return self._pos

    def tell(self) -> int:
        return self._pos

    def unread(self, data: bytes) -> None:
        """Put back the tail of the last read (it is read again next)."""
        self._buf = data + self._buf
        self._pos -= len(data)

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_binary(path: Path) -> io.RawIOBase:
    """Open a file for reading bytes, transparently decompressing gzip (damage tolerant)."""
    try:
        if is_gzip(path):
            return GzipStream(path)
        return path.open("rb")  # type: ignore[return-value]
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e


def _skip_leading_nul(f: io.RawIOBase) -> int:
    """Skip a leading run of NUL bytes (a log truncated in place by logrotate's copytruncate while
    its writer kept its offset); return how many were skipped, the stream placed after them."""
    skipped = 0
    while skipped < NUL_SKIP_LIMIT:
        block = f.read(1024 * 1024)
        if not block:
            return skipped
        stripped = block.lstrip(b"\x00")
        if stripped:
            skipped += len(block) - len(stripped)
            if isinstance(f, GzipStream):
                f.unread(stripped)                   # what follows the run is read next
            else:
                f.seek(-len(stripped), io.SEEK_CUR)
            return skipped
        skipped += len(block)
    return skipped


def head_text(path: Path, nbytes: int = HEAD_BYTES) -> str:
    """The first bytes of a file (decompressed), decoded leniently, for content sniffing."""
    with open_binary(path) as f:
        try:
            _skip_leading_nul(f)
            data = f.read(nbytes)
        except OSError as e:
            raise InputError(f"cannot read {path}: {e}") from e
    return decode_head(data)


def decode_head(data: bytes) -> str:
    """A file's first bytes as ``head_text`` gives them: decoded leniently."""
    return data.decode("utf-8", errors="replace")


def head_hash(path: Path, nbytes: int = HEAD_BYTES) -> str:
    """Identity of a file's content start: survives renames and gzip (hash of the decompressed head)."""
    with open_binary(path) as f:
        try:
            data = f.read(min(nbytes, HEAD_BYTES))
        except OSError as e:
            raise InputError(f"cannot read {path}: {e}") from e
    return hash_head(data)


def hash_head(data: bytes) -> str:
    """``head_hash`` of a file whose (decompressed) first bytes are ``data``."""
    return hashlib.sha1(data).hexdigest()


class Chunk:
    """Complete lines of a file, decoded, without line endings (CR stripped): as Python strings, or (read
    with ``column=True``) as one polars String column, so that a large log never holds a Python string
    per line; ``lines`` then materialises them on demand."""

    __slots__ = ("first_line", "end_offset", "eof", "column", "raw", "_lines", "_count")

    def __init__(self, first_line: int, lines: list[str] | None, end_offset: int, eof: bool,
                 column: Any = None, raw: bytes | None = None, count: int | None = None) -> None:
        self.first_line = first_line      # 1-based line number of the first line
        self.end_offset = end_offset      # decompressed byte offset just after the last complete line
        self.eof = eof
        self.column = column              # a polars String Series, or None
        self.raw = raw                    # the lines' bytes (valid UTF-8, NULs removed) when read with
        self._lines = lines               # column="raw" (then column is None)
        self._count = count

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            if self.column is not None:
                self._lines = self.column.to_list()
            else:
                self._lines = _decode_lines(self.raw or b"", self.first_line, ReadNotes())
        return self._lines

    @property
    def count(self) -> int:
        if self._count is None:
            if self._lines is None and self.column is not None:
                self._count = len(self.column)
            elif self._lines is None and self.raw is not None:
                self._count = _line_count(self.raw)
            else:
                self._count = len(self.lines)
        return self._count

    def counted(self, lines: int) -> None:
        """The parser split ``raw`` into this many lines itself (the reader need not count them)."""
        self._count = lines


@dataclass
class ReadNotes:
    """What was odd about a file's bytes, for its ``sources.note``: nothing is dropped silently."""

    nul_bytes: int = 0
    leading_nul_bytes: int = 0
    invalid_utf8_lines: int = 0
    long_lines: int = 0                 # lines over LONG_LINE_BYTES
    longest: tuple[int, int] = (0, 0)   # (bytes, line number)
    cut_bytes: int = 0                  # bytes beyond MAX_LINE_BYTES not kept
    held_back: int = 0                  # bytes of an unfinished last line left for the next read
    damage: str | None = None           # gzip truncation or corruption
    backwards: int = 0                  # records dated well before the record above them
    interleaved: int = 0                # lines cut into by another process's record
    largest_back: tuple[float, int] = (0.0, 0)   # (seconds, line)
    dated_by_previous: int = 0          # access lines without a time, dated by the record before them
    dated_by_envelope: int = 0          # access lines without a time, dated by their envelope's time
    extra: list[str] = field(default_factory=list)   # notes of the file's kind (binary, empty, ...)

    def merge(self, other: ReadNotes) -> None:
        """Add the notes of a later byte range of the same file."""
        for name in ("nul_bytes", "invalid_utf8_lines", "long_lines", "cut_bytes", "backwards", "interleaved",
                     "dated_by_previous", "dated_by_envelope"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.longest = max(self.longest, other.longest)
        self.largest_back = max(self.largest_back, other.largest_back)
        self.held_back = other.held_back
        self.damage = self.damage or other.damage
        self.extra += [x for x in other.extra if x not in self.extra]

    def summary(self) -> list[str]:
        out = list(self.extra)
        if self.damage:
            out.append(f"{self.damage}: kept every line before it")
        if self.leading_nul_bytes:
            out.append(f"starts with {self.leading_nul_bytes} NUL bytes (truncated in place, e.g. copytruncate): "
                       f"skipped")
        if self.nul_bytes:
            out.append(f"{self.nul_bytes} NUL bytes inside lines removed")
        if self.invalid_utf8_lines:
            out.append(f"{self.invalid_utf8_lines} line(s) with invalid UTF-8, decoded with U+FFFD")
        if self.long_lines:
            size, line = self.longest
            out.append(f"{self.long_lines} line(s) over {LONG_LINE_BYTES // 1024 // 1024} MB, longest "
                       f"{size / 1e6:.1f} MB at line {line}")
        if self.cut_bytes:
            out.append(f"{self.cut_bytes} bytes beyond {MAX_LINE_BYTES // 1024 // 1024} MB per line not kept")
        if self.interleaved:
            out.append(f"{self.interleaved} line(s) cut into by another process's record: the complete inner "
                       f"record was parsed, the fragment before it dropped")
        if self.backwards:
            secs, line = self.largest_back
            out.append(f"timestamps go backwards {self.backwards} time(s), by up to {secs:.0f} s (line {line}); "
                       f"lines are kept in file order")
        if self.dated_by_envelope:
            out.append(f"{self.dated_by_envelope} access line(s) without a time of their own: dated by their "
                       f"envelope's time, aligned to the payload clock by the lines that carry both")
        if self.dated_by_previous:
            out.append(f"{self.dated_by_previous} access line(s) without a time of their own: dated by the record "
                       f"before them (an estimate: printed at or after that time)")
        if self.held_back:
            out.append(f"{HELD_BACK_NOTE} (still being written?): its {self.held_back} bytes are left "
                       f"for the next ingest")
        return out


LONG_LINE_BYTES = 1024 * 1024
# How a file's note begins when its unfinished last line was left for the next read (the summaries say so).
HELD_BACK_NOTE = "last line unfinished"


# A line that starts a log record (SGLang prefix, torch glog, vLLM) of a plain log: chunks of a log end just
# before one, so no record is split and every chunk end is a resume point (a log behind an envelope
# uses its stack's pattern, payload.PayloadReader.record_start).
RECORD_START = re.compile(rb"\n(?:\([\w .=-]*pid=\d+[^)]*\)\s*)?(?:\[(?:\d{4}-\d\d-\d\d |rank\d+\]:\[|[IWEF]\d{3,4} )"
                          rb"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d )")


def iter_chunks(path: Path, start_offset: int = 0, start_line: int = 1,
                chunk_bytes: int = CHUNK_BYTES, records: bool = False, end_offset: int | None = None,
                notes: ReadNotes | None = None, hold_partial: bool = False,
                record_start: re.Pattern[bytes] | None = None, column: bool | str = False) -> Iterator[Chunk]:
    """Yield complete lines in bounded chunks, from ``start_offset`` (a line boundary) to ``end_offset``
    (default: the end of the file).

    With ``records`` a chunk ends before the last record start it holds (when one lies in its second
    half; ``record_start`` overrides the pattern, e.g. for a log behind a collector envelope), so
    multi-line records stay whole and ``end_offset`` is a safe place to resume; the last chunk ends at the
    end (a small file is one chunk), but for a last line without its newline, which is a chunk alone.
    Damage is tolerated and counted in ``notes``: NUL bytes are removed (a leading run is skipped), invalid UTF-8 becomes
    U+FFFD, a line longer than MAX_LINE_BYTES keeps its start, a damaged gzip yields what it holds.
    ``hold_partial``: a last line without its newline (a live file mid-write) is not yielded.
    ``column``: each chunk's lines as one polars String column (``Chunk.column``), split in native code;
    ``column="raw"``: only the chunk's bytes (``Chunk.raw``, valid UTF-8; a chunk that is not takes the
    column path), for a parser that splits them itself.
    """
    notes = notes if notes is not None else ReadNotes()
    starts = (record_start or RECORD_START) if records else None
    f = open_binary(path)
    with f:
        try:
            if start_offset:
                f.seek(start_offset)              # gzip: decompresses up to the offset
                offset = start_offset
            else:
                offset = notes.leading_nul_bytes = _skip_leading_nul(f)
            line_no = start_line
            carry = b""
            cut_line = False                      # dropping the rest of an over-long line
            while True:
                want = chunk_bytes if end_offset is None else min(chunk_bytes, end_offset - offset - len(carry))
                block = f.read(want) if want > 0 else b""
                short = 0 < len(block) < want
                if short:                         # the end of the file, unless a second read finds more
                    more = f.read(want - len(block))
                    block, short = block + more, not more
                # the last of the bytes to read: not cut before its last record (a chunk of that record alone
                # would cost a parser call, and lose its neighbours)
                eof = not block or short or (
                    end_offset is not None and offset + len(carry) + len(block) >= end_offset)
                if cut_line and block:
                    nl = block.find(b"\n")
                    dropped = len(block) if nl < 0 else nl
                    notes.cut_bytes += dropped
                    offset += dropped
                    if nl < 0:
                        continue
                    block, cut_line = block[nl:], False
                data = carry + block
                if not eof:
                    cut = _cut(data, starts)
                    if cut < 0:
                        if len(data) > MAX_LINE_BYTES:   # keep the start of a monstrous line, skip the rest
                            notes.cut_bytes += len(data) - MAX_LINE_BYTES
                            offset += len(data) - MAX_LINE_BYTES
                            carry, cut_line = data[:MAX_LINE_BYTES], True
                        else:
                            carry = data
                        continue
                    body, carry = data[: cut + 1], data[cut + 1:]
                else:
                    body, carry = data, b""
                    if hold_partial and body and not body.endswith(b"\n"):
                        keep = body.rfind(b"\n") + 1
                        notes.held_back = len(body) - keep
                        body = body[:keep]
                    elif starts is not None and not body.endswith(b"\n") and b"\n" in body:
                        # a last line without its newline (a paste or a file cut mid-line) is a chunk of its
                        # own, read next: a fragment of no record stays unparsed, not taken as the tail of the
                        # record above it
                        cut = body.rfind(b"\n")
                        body, carry, eof = body[: cut + 1], body[cut + 1:], False
                if body:
                    offset += len(body)
                    raw = _raw_lines(body, line_no, notes) if column == "raw" else None
                    if raw is not None:
                        chunk = Chunk(line_no, None, offset, eof, None, raw)
                    elif column:
                        chunk = Chunk(line_no, None, offset, eof, *_decode_column(body, line_no, notes))
                    else:
                        chunk = Chunk(line_no, _decode_lines(body, line_no, notes), offset, eof)
                    yield chunk
                    line_no += chunk.count
                if eof:
                    if isinstance(f, GzipStream) and f.damage:
                        notes.damage = f.damage
                    return
        except OSError as e:
            raise InputError(f"cannot read {path}: {e}") from e


def _cut(data: bytes, starts: re.Pattern[bytes] | None) -> int:
    """Where a chunk of ``data`` ends: its last newline, or with ``starts`` the newline before the last
    record start in its second half; -1 when it holds no newline yet."""
    cut = data.rfind(b"\n")
    if cut >= 0 and starts is not None:
        # newlines from the end: the last record start is a few lines up (no scan of the whole half)
        half, pos = len(data) // 2, len(data)
        while True:
            nl = data.rfind(b"\n", half, pos)
            if nl < 0:
                break
            if starts.match(data, nl):
                return nl
            pos = nl
    return cut


def _decode_lines(body: bytes, line_no: int, notes: ReadNotes) -> list[str]:
    """Complete lines of ``body`` as text: NUL bytes removed, invalid UTF-8 replaced, CR stripped,
    over-long lines counted (``line_no`` is the file line of the first)."""
    if b"\x00" in body:
        notes.nul_bytes += body.count(b"\x00")
        body = body.replace(b"\x00", b"")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = body.decode("utf-8", errors="replace")
        notes.invalid_utf8_lines += sum(1 for s in text.split("\n") if "\ufffd" in s)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [s[:-1] if s.endswith("\r") else s for s in lines]
    if len(body) > LONG_LINE_BYTES and max(map(len, lines), default=0) > LONG_LINE_BYTES:
        for i, s in enumerate(lines):
            if len(s) > LONG_LINE_BYTES:
                notes.long_lines += 1
                if len(s) > notes.longest[0]:
                    notes.longest = (len(s), line_no + i)
    return lines


def _decode_column(body: bytes, line_no: int, notes: ReadNotes) -> tuple[Any, bytes | None]:
    """``_decode_lines`` as one polars String column, the lines split by polars' native CSV reader (one
    field per line: no separator or quote character can occur): no Python object per line.  Bytes the
    reader would treat otherwise (invalid UTF-8, a byte-order mark, the separator byte) take the Python
    path, and so does any disagreement on the line count.  Also returns the bytes split (None after the
    Python path)."""
    import polars as pl

    if b"\x00" in body:
        notes.nul_bytes += body.count(b"\x00")
        body = body.replace(b"\x00", b"")
    n = _line_count(body)
    col = None
    if n and b"\x01" not in body and not body.startswith(b"\xef\xbb\xbf") and _valid_utf8(body):
        if len(body) <= SMALL_BODY and b"\r" not in body:
            # a few lines: split in Python (the reader's fixed cost is some 0.3 ms), the same lines
            return pl.Series("text", _decode_lines(body, line_no, notes), dtype=pl.String), body
        col = pl.read_csv(body, has_header=False, separator="\x01", quote_char=None, schema={"text": pl.String},
                          infer_schema=False).to_series().fill_null("")
        if len(col) != n:
            col = None
    if col is None:
        return pl.Series("text", _decode_lines(body, line_no, notes), dtype=pl.String), None
    if len(body) > LONG_LINE_BYTES and (col.str.len_bytes().max() or 0) > LONG_LINE_BYTES:
        chars = col.str.len_chars()
        for i in (chars > LONG_LINE_BYTES).arg_true().to_list():
            notes.long_lines += 1
            if chars[i] > notes.longest[0]:
                notes.longest = (chars[i], line_no + i)
    return col, body


def _raw_lines(body: bytes, line_no: int, notes: ReadNotes) -> bytes | None:
    """The chunk's bytes (NULs removed), when they are valid UTF-8 without a byte-order mark (else None: the
    caller decodes them); over-long lines noted as ``_decode_lines`` notes them.  Their lines are counted
    when asked (``Chunk.count``): a parser that splits them counts them on the way (``Chunk.counted``)."""
    import numpy as np

    if b"\x00" in body:
        cleaned = body.replace(b"\x00", b"")
        if body.startswith(b"\xef\xbb\xbf") or not _valid_utf8(cleaned):
            return None                        # (the column path counts the NULs)
        notes.nul_bytes += len(body) - len(cleaned)
        body = cleaned
    elif body.startswith(b"\xef\xbb\xbf") or not _valid_utf8(body):
        return None
    if _may_hold_long_line(body):
        ends = np.r_[np.flatnonzero(np.frombuffer(body, np.uint8) == 10), len(body)][:_line_count(body)]
        starts = np.r_[0, ends[:-1] + 1]
        for i in np.flatnonzero(ends - starts > LONG_LINE_BYTES).tolist():
            text = body[starts[i]:ends[i]].decode()
            size = len(text) - text.endswith("\r")
            if size > LONG_LINE_BYTES:
                notes.long_lines += 1
                if size > notes.longest[0]:
                    notes.longest = (size, line_no + i)
    return body


def _line_count(body: bytes) -> int:
    """The lines of ``body``: a last one without its newline counts."""
    return body.count(b"\n") + (0 if body.endswith(b"\n") or not body else 1)


def _may_hold_long_line(body: bytes) -> bool:
    """Whether a line may be longer than LONG_LINE_BYTES: such a line covers a whole aligned window of
    half that size without a newline (memchr finds one near the start of each window otherwise)."""
    w = LONG_LINE_BYTES // 2
    return any(body.find(b"\n", k, k + w) < 0 for k in range(0, len(body) - w + 1, w))


def _valid_utf8(body: bytes) -> bool:
    if body.isascii():
        return True
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def offset_of_line(path: Path, offset: int, line: int, target: int) -> int:
    """Byte offset (decompressed) where physical line ``target`` starts, counting newlines from ``offset``,
    where line ``line`` starts (a resume point inside what was read)."""
    with open_binary(path) as f:
        try:
            if offset:
                f.seek(offset)
            while line < target:
                block = f.read(1024 * 1024)
                if not block:
                    break
                pos = 0
                while line < target:
                    nl = block.find(b"\n", pos)
                    if nl < 0:
                        break
                    pos, line = nl + 1, line + 1
                offset += pos if line == target else len(block)
        except OSError as e:
            raise InputError(f"cannot read {path}: {e}") from e
    return offset


def read_lines(path: Path, wanted: set[int]) -> dict[int, str]:
    """The text of the physical lines ``wanted`` (1-based, numbered and cleaned as ``iter_chunks`` does:
    NULs removed, invalid UTF-8 replaced, CR stripped, an over-long line cut to MAX_LINE_BYTES), reading the
    file up to the last of them.  Only those lines are decoded: a quote from the end of a large log does not
    turn every line before it into a Python string (newlines are counted, and found by numpy only in a read
    that holds a wanted line)."""
    import numpy as np

    todo = sorted(n for n in wanted if n >= 1)
    found: dict[int, bytes] = {}
    k, line, carry, cut_line = 0, 1, b"", False
    with open_binary(path) as f:
        try:
            _skip_leading_nul(f)
            while k < len(todo):
                block = f.read(CHUNK_BYTES)
                if cut_line and block:              # the rest of an over-long line: skipped
                    nl = block.find(b"\n")
                    if nl < 0:
                        continue
                    block, cut_line = block[nl:], False
                data = carry + block
                if not block:                        # the end: a last line without its newline
                    if data and todo[k] == line:
                        found[line] = data
                    break
                lines_here = data.count(b"\n")
                if todo[k] - line < lines_here:     # (a read holding no wanted line: its newlines counted only)
                    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
                    starts = np.r_[0, ends + 1]
                    while k < len(todo) and todo[k] - line < lines_here:
                        i = todo[k] - line
                        found[todo[k]] = data[starts[i]:ends[i]]
                        k += 1
                line += lines_here
                carry = data[data.rfind(b"\n") + 1:]
                if len(carry) > MAX_LINE_BYTES:     # keep the start of a monstrous line, skip the rest
                    carry, cut_line = carry[:MAX_LINE_BYTES], True
        except OSError as e:
            raise InputError(f"cannot read {path}: {e}") from e
    # cleaned as the reader cleans a chunk's lines (each line its own, so none is lost or merged)
    numbers = sorted(found)
    text = _decode_lines(b"".join(found[n] + b"\n" for n in numbers), 1, ReadNotes())
    return dict(zip(numbers, text, strict=True))
