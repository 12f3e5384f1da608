"""The last N lines of a log, read from its end in blocks: bounded memory and time whatever the file's size.

A tail starts at a line boundary (never inside a line) and ends at the file's size when the tail was
taken, so a log that keeps growing during the capture (the main process still logging /health 200s)
gives a consistent cut.  Compressed rotations (``server.log.2.gz``) cannot be tailed from the end:
they are copied whole, up to ``max_bytes``.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

BLOCK = 64 * 1024
MAX_BYTES = 256 * 1024**2        # a tail of very long lines stops here, at a line boundary
GZIP_MAGIC = b"\x1f\x8b"
SAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._+-]+")


@dataclass(frozen=True, slots=True)
class Tail:
    source: Path
    offset: int                   # first byte copied
    end: int                      # one past the last byte copied (the size when the tail was taken)
    lines: int | None             # None for a compressed file copied whole
    complete: bool                # the whole file
    mtime: float


def safe_name(name: str) -> str:
    """A member name that cannot escape its folder or hide: 'server log.1' -> 'server_log.1'."""
    cleaned = SAFE_NAME_RE.sub("_", name).lstrip(".-") or "log"
    return cleaned[:200]


def plan_tail(path: Path, max_lines: int, max_bytes: int = MAX_BYTES) -> Tail:
    """Where the last ``max_lines`` lines of ``path`` start, scanning backwards block by block."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        size = st.st_size
        if fh.read(2) == GZIP_MAGIC:
            end = min(size, max_bytes)
            return Tail(path, 0, end, None, end == size, st.st_mtime)
        if size == 0 or max_lines <= 0:
            return Tail(path, size, size, 0, size == 0, st.st_mtime)
        pos = size
        fh.seek(size - 1)
        # a last line without its newline is a line too
        newlines_needed = max_lines + (1 if fh.read(1) == b"\n" else 0)
        found = 0
        start = 0
        while pos > 0:
            step = min(BLOCK, pos)
            pos -= step
            fh.seek(pos)
            block = fh.read(step)
            idx = len(block)
            while True:
                idx = block.rfind(b"\n", 0, idx)
                if idx < 0:
                    break
                found += 1
                if found == newlines_needed:
                    start = pos + idx + 1
                    break
            if found == newlines_needed:
                break
            if size - pos >= max_bytes:
                # the byte cap: start after the first newline inside the allowed window
                fh.seek(size - max_bytes)
                window = fh.read(BLOCK)
                nl = window.find(b"\n")
                start = size - max_bytes + nl + 1 if nl >= 0 else size
                break
        lines = _count_lines(fh, start, size)
        return Tail(path, start, size, lines, start == 0, st.st_mtime)


def _count_lines(fh, start: int, end: int) -> int:
    fh.seek(start)
    n, left, last = 0, end - start, b""
    while left > 0:
        chunk = fh.read(min(BLOCK, left))
        if not chunk:
            break
        n += chunk.count(b"\n")
        left -= len(chunk)
        last = chunk
    return n + (1 if last and not last.endswith(b"\n") else 0)


def copy_tail(tail: Tail, dest: Path) -> int:
    """Copy the planned byte range into ``dest`` (streamed); return the bytes written.  A file truncated
    meanwhile (copytruncate rotation) gives fewer bytes, never an error."""
    written = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(tail.source, "rb") as src, open(dest, "wb") as out:
        src.seek(tail.offset)
        left = tail.end - tail.offset
        while left > 0:
            chunk = src.read(min(BLOCK, left))
            if not chunk:
                break
            out.write(chunk)
            written += len(chunk)
            left -= len(chunk)
    os.utime(dest, (tail.mtime, tail.mtime))
    return written


def stdout_logs(pids: list[int]) -> list[tuple[Path, str, str]]:
    """(readable path, shown path, where seen) of the regular files the engine's stdout/stderr go to
    (``nohup ... > server.log``): the server log, found without being told.  Read through /proc/PID/fd, so
    a log deleted while the engine still writes it is read too.  Terminals, pipes and sockets are skipped."""
    seen: set[tuple[int, int]] = set()
    out: list[tuple[Path, str, str]] = []
    for pid in pids:
        for fd, name in ((1, "stdout"), (2, "stderr")):
            link = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(link)
                st = os.stat(link)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            out.append((Path(link), target, f"{name} of pid {pid}"))
    return out


def unique_member(name: str, taken: set[str]) -> str:
    """``logs/<name>``, numbered when two logs share a name (their rotation suffix stays last)."""
    base = safe_name(name)
    cand, k = base, 2
    while cand in taken:
        cand = f"{k}-{base}"
        k += 1
    taken.add(cand)
    return cand

