"""Reading evidence files: gzip by magic bytes, CRLF, docker-compose prefixes, bounded chunks.

Files are read in byte chunks cut at line boundaries, so memory stays bounded
however large a log is; line numbers are physical (1-based) lines of the
decompressed file, which is what evidence ``file:line`` points at.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 4 * 1024 * 1024         # memory: about 35x the chunk at peak while it is parsed
HEAD_BYTES = 64 * 1024

# docker compose logs: 'sglang-1  | [2026-...] ...'
COMPOSE_RE = re.compile(r"^[\w.-]+(?:[-_]\d+)?\s*\| ?")


def is_gzip(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e


def open_binary(path: Path) -> io.BufferedIOBase:
    """Open a file for reading bytes, transparently decompressing gzip."""
    try:
        if is_gzip(path):
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return path.open("rb")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e


def head_text(path: Path, nbytes: int = HEAD_BYTES) -> str:
    """The first bytes of a file (decompressed), decoded leniently, for content sniffing."""
    with open_binary(path) as f:
        try:
            data = f.read(nbytes)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise InputError(f"cannot read {path}: {e}") from e
    return data.decode("utf-8", errors="replace")


def head_hash(path: Path, nbytes: int = HEAD_BYTES) -> str:
    """Identity of a file's content start: survives renames and gzip (hash of the decompressed head)."""
    with open_binary(path) as f:
        data = f.read(min(nbytes, HEAD_BYTES))
    return hashlib.sha1(data).hexdigest()


def detect_compose(sample_lines: list[str]) -> bool:
    """True when most non-empty lines carry a docker-compose 'service-1  | ' prefix."""
    lines = [s for s in sample_lines if s.strip()][:200]
    if not lines:
        return False
    hits = sum(1 for s in lines if COMPOSE_RE.match(s) and "|" in s[:60])
    return hits >= 0.8 * len(lines)


@dataclass
class Chunk:
    first_line: int        # 1-based line number of lines[0]
    lines: list[str]       # decoded, without line endings (CR stripped)
    end_offset: int        # decompressed byte offset just after the last complete line
    eof: bool


# A line that starts a log record (SGLang prefix, torch glog), optionally behind a compose prefix:
# chunks of a log end just before one, so no record is split and every chunk end is a resume point.
RECORD_START = re.compile(rb"\n(?:[\w.-]+(?:[-_]\d+)?\s*\| ?)?(?:\(\w+ pid=\d+[^)]*\)\s*)?"
                          rb"\[(?:\d{4}-\d\d-\d\d |rank\d+\]:\[|[IWEF]\d{3,4} )")


def iter_chunks(path: Path, start_offset: int = 0, start_line: int = 1,
                chunk_bytes: int = CHUNK_BYTES, records: bool = False, end_offset: int | None = None) -> Iterator[Chunk]:
    """Yield complete lines in bounded chunks, from ``start_offset`` (a line boundary).

    With ``records`` a chunk ends before the last record start it holds (when one lies in its second
    half), so multi-line records stay whole and ``end_offset`` is a safe place to resume.
    """
    f = open_binary(path)
    with f:
        try:
            if start_offset:
                f.seek(start_offset)              # gzip: decompresses up to the offset
            offset = start_offset
            line_no = start_line
            carry = b""
            while True:
                want = chunk_bytes if end_offset is None else min(chunk_bytes, end_offset - offset - len(carry))
                block = f.read(want) if want > 0 else b""
                eof = not block
                data = carry + block
                if not eof:
                    cut = data.rfind(b"\n")
                    if cut < 0:
                        carry = data
                        continue
                    if records:
                        last = None
                        for m in RECORD_START.finditer(data, len(data) // 2):
                            last = m
                        if last is not None:
                            cut = last.start()
                    body, carry = data[: cut + 1], data[cut + 1:]
                else:
                    body, carry = data, b""
                if body:
                    text = body.decode("utf-8", errors="replace")
                    lines = text.split("\n")
                    if lines and lines[-1] == "":
                        lines.pop()
                    if "\r" in text:
                        lines = [s[:-1] if s.endswith("\r") else s for s in lines]
                    offset += len(body)
                    yield Chunk(line_no, lines, offset, eof)
                    line_no += len(lines)
                if eof:
                    return
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise InputError(f"cannot read {path}: {e}") from e
