"""The envelope stage of ingest: a file's lines unwrapped into payload lines, every physical line accounted for.

``envelopes`` strips collector and paste envelopes from lines; this module ties it to files: the stack of a
file from its head, a year hint for year-less envelope times, payload batches with their physical line
numbers and collected times, and the accounting rule of ``sources``:

**Accounting is in physical lines.**  ``lines`` counts the file's physical lines.  A physical line is
*unparsed* when an envelope dropped it (a fence, prose between pasted blocks) or when any payload line it
is part of was not taken by a parser; it is then kept in ``unparsed`` once, with the file's own text (the
envelope included).  Every other physical line is *parsed*.  So a CRI ``P,P,F`` record that parses counts
3 parsed lines; one that does not gives 3 unparsed rows, one per physical line.

A plain file (stack ``none``) costs nothing: its lines are the payload, numbered from the chunk's first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .envelopes import NONE, EnvelopeStack, Unwrapped, Unwrapper, detect
from .logfile import RECORD_START, ReadNotes, head_text, iter_chunks, offset_of_line

# Layers whose lines carry a time of the collector's (or viewer's) own.
TIMED_LAYERS = frozenset({"kubectl", "cri", "docker_json", "journald", "syslog", "fluentbit", "vector",
                          "viewer_ts"})
# Layers that put the payload's dates in themselves (the payload's first date is theirs, not the file's).
DATING_LAYERS = frozenset({"time_of_day"})
# Layers of a paste or a terminal capture: nothing more will be appended to such a file, and their state
# (a fence, a wrapped line) cannot be resumed from a byte offset.
STATEFUL_PASTE = frozenset({"markdown", "hard_wrap"})

_DATED = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


# A head of fewer lines than this is sniffed again without its cut last line (``sniff``).
SHORT_HEAD_LINES = 10


def head_lines(text: str) -> list[str]:
    """Lines of a file's head as the chunk reader gives them: split on newlines, CR of CRLF removed."""
    lines = (text.replace("\x00", "") if "\x00" in text else text).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [s[:-1] if s.endswith("\r") else s for s in lines] if "\r" in text else lines


def sniff(lines: list[str], last_cut: bool = False) -> tuple[EnvelopeStack, list[str]]:
    """The envelope of a file's head lines and the payload of that head (the head itself when plain).
    ``last_cut``: the head's last line has no newline (the head's read ended in it, or the file: a paste or a
    live file cut mid-line); when no envelope is found with it, it does not vote (a JSON collector's line cut
    short is no JSON: three whole lines and a cut one fell short of the share a layer needs). Only a short
    head is looked at again: one line of five or more cannot bring a whole share under a layer's 80 %."""
    stack = detect(lines)
    if not stack.layers and last_cut and 1 < len(lines) < SHORT_HEAD_LINES:
        stack = detect(lines[:-1])
    if not stack.layers:
        return stack, lines
    return stack, Unwrapper(stack, year_hint=2000).feed(lines, 1, final=True).payload


def year_hint(payload_head: list[str], mtime: float | None, year_near: float | None = None) -> datetime | None:
    """A moment near the file's lines, for year-less envelope times: its first dated payload line, else
    ``year_near`` (the engine's dated evidence), else the file's modification time (never a fixed default)."""
    for s in payload_head:
        m = _DATED.match(s)
        if m:
            try:
                return datetime.fromisoformat(m.group(1))
            except ValueError:
                continue
    near = year_near if year_near is not None else mtime
    return datetime.fromtimestamp(near) if near is not None else None


@dataclass
class Payload:
    """One batch of payload lines and the physical lines it accounts for."""

    lines: Any                                      # payload text (the envelope stripped): a list of str, or
                                                    # (a plain log read as a column) a polars String Series
    first_line: int                                 # physical line of the batch's first line (plain files)
    line: list[int] | None = None                   # physical first line of each payload line (None: plain,
                                                    # first_line + i)
    collected_ts: Any = None                        # the envelope's time per payload line (None: no time): a
                                                    # list, or (a columnar envelope) a polars Datetime Series
    dropped: list[tuple[int, str]] = field(default_factory=list)   # (physical line, text) the envelope dropped
    physical: int = 0                               # physical lines accounted for by this batch
    unwrapped: Unwrapped | None = None
    source: Unwrapper | None = None
    stack_name: str = "none"                        # the envelope (sources.envelope)
    raw: bytes | None = None                        # a plain column's bytes (logfile.Chunk.raw)

    @property
    def plain(self) -> bool:
        return self.line is None

    def at(self, i: int) -> int:
        """Physical first line of payload line ``i``."""
        return self.first_line + i if self.line is None else self.line[i]

    def unparsed(self, firsts: Iterable[int]) -> list[tuple[int, str]]:
        """(physical line, the file's text) of what is unparsed: the physical lines behind the payload
        lines that start at ``firsts`` (physical first lines), and every dropped line; each line once."""
        if self.line is None:
            base = self.first_line
            return [(p, self.lines[p - base]) for p in sorted(set(firsts))] + self.dropped
        u, src = self.unwrapped, self.source
        assert u is not None and src is not None
        wanted = set(firsts)
        phys: set[int] = set()
        if wanted:
            for i, ln in enumerate(u.line):
                if ln in wanted:
                    phys.update(u.physical(i))
        rows = [(p, src.original(p)) for p in phys]
        rows += self.dropped
        rows.sort()
        return rows

    def unparsed_rows(self, engine: str, path: str, firsts: Iterable[int]) -> list[dict[str, Any]]:
        return [{"engine": engine, "path": path, "line": p, "text": t} for p, t in self.unparsed(firsts)]


class PayloadReader:
    """One file's envelope stage: feed it the chunks of the file in order, get payload batches back."""

    def __init__(self, stack: EnvelopeStack, hint: datetime | None = None) -> None:
        self.stack = stack
        self.unwrapper = Unwrapper(stack, hint) if stack.layers else None
        self.timed = bool(TIMED_LAYERS & set(stack.layers))
        self.highest = 0                # highest physical line handed on so far

    @classmethod
    def for_file(cls, path: Path, mtime: float | None, stack: EnvelopeStack | None = None,
                 resumed: bool = False, year_near: float | None = None) -> PayloadReader:
        """The reader of ``path``: its envelope from its head (unless known), dated near its first dated
        payload line, else near ``year_near`` (the engine's dated evidence), else its modification time (a
        resumed read: near ``year_near`` or its modification time)."""
        if stack is not None and not stack.layers:
            return cls(NONE)
        text = head_text(path) if stack is None or not resumed else ""
        head = head_lines(text)
        if stack is None:
            stack, payload = sniff(head, last_cut=not text.endswith("\n"))
            if not stack.layers:
                return cls(NONE)
        else:
            payload = Unwrapper(stack, year_hint=2000).feed(head, 1, final=True).payload if head else []
        # (a payload whose dates the envelope put in is dated near the file's modification time itself)
        return cls(stack, year_hint([] if resumed or DATING_LAYERS & set(stack.layers) else payload, mtime,
                                    year_near))

    def columnar(self) -> bool:
        """Whether ``feed`` unwraps a polars column of lines at once (no Python object per line)."""
        return self.unwrapper is not None and self.unwrapper.columnar is not None

    def record_start(self) -> re.Pattern[bytes]:
        """Where a log's chunks may be cut: before a payload record head behind this envelope."""
        return RECORD_START if self.unwrapper is None else self.stack.record_start()

    def feed(self, lines: Any, first_line: int, final: bool = False) -> Payload:
        """The payload of the next lines of the file (``lines``: a list of str, or a polars String Series: a
        plain file's is handed on as it is, and behind a ``columnar`` envelope the payload and its times are
        columns too)."""
        if self.unwrapper is None:
            return Payload(lines, first_line, physical=len(lines))
        u = self.unwrapper.feed(lines, first_line, final)
        physical = sum(u.span) + len(u.dropped)
        tops = [u.line[-1] + max(u.span[-1], 1) - 1] if u.line else []
        tops += [max(v) for v in u.joined.values()] + [p for p, _ in u.dropped[-1:]]
        self.highest = max(self.highest, *tops) if tops else self.highest
        return Payload(u.payload, first_line, u.line, u.collected_ts if self.timed else None, u.dropped, physical,
                       u, self.unwrapper, self.stack.name)

    def carried_from(self) -> int | None:
        return None if self.unwrapper is None else self.unwrapper.carried_from()

    def passed(self, last_line: int) -> None:
        """The lines up to ``last_line`` were read past this reader (cut from the file's bytes as its column
        would unwrap them: ``sglang_fast.ScanGroup.add_cut``), none held back."""
        self.highest = max(self.highest, last_line)

    def can_hold(self) -> bool:
        """Whether what is held back at the end of a live file can wait for the next read: the held lines
        are the file's last (nothing after them was handed on) and no paste state would be lost."""
        p = self.carried_from()
        return p is not None and not (STATEFUL_PASTE & set(self.stack.layers)) and self.highest < p


def read_payload(path: Path, notes: ReadNotes, stack: EnvelopeStack | None, mtime: float | None,
                 year_near: float | None = None) -> tuple[Payload, int]:
    """A whole (small) file as one payload batch, and the bytes read (``year_near``: ``PayloadReader.for_file``)."""
    reader = PayloadReader.for_file(path, mtime, stack, year_near=year_near)
    lines: list[str] = []
    end = 0
    for chunk in iter_chunks(path, notes=notes):
        lines.extend(chunk.lines)
        end = chunk.end_offset
    return reader.feed(lines, 1, final=True), end


def hold_point(path: Path, reader: PayloadReader, chunk_starts: list[tuple[int, int]]) -> int | None:
    """Byte offset where the lines ``reader`` holds back begin (a resume point), or None when unknown.
    ``chunk_starts``: (first line, byte offset) of the chunks read, in order."""
    p = reader.carried_from()
    if p is None:
        return None
    start = next(((ln, off) for ln, off in reversed(chunk_starts) if ln <= p), None)
    if start is None:
        return None
    return offset_of_line(path, start[1], start[0], p)
