"""Numbered native stack traces outside a gdb thread dump.

Shapes:

* torch C++ exception traces (``c10::Error``, the NCCL watchdog's ``DistBackendError``)::

      terminate called after throwing an instance of 'c10::DistBackendError'
        what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated ...
      Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 (most recent call first):
      frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f8e1b5b3897 in /usr/lib/.../libc10.so)
      frame #4: <unknown function> + 0xdc253 (0x7f8e68cb0253 in /lib/x86_64-linux-gnu/libstdc++.so.6)

* torch ``CapturedTraceback`` / symbolized traces: ``#4 c10d::ProcessGroupNCCL::watchdogHandler() from ??:0``;
* a single gdb ``bt`` (no ``Thread N (...)`` headers): ``#0  0x00007f.. in poll () from /lib/.../libc.so.6``;
* glibc ``backtrace_symbols`` bodies inside ``frame #N:`` lines: ``/lib/libc.so.6(+0x8f1ca) [0x7f..]``.

Each trace (a run of frames whose numbers increase, or the frames after a trace header) becomes
one thread, ``thread_id`` = its ordinal (``1``, ``2``, ...), since these traces name no thread.
A ``[rankN]:`` prefix (torch's per-rank log prefix) is stripped and kept as ``Process.rank``.
"""

from __future__ import annotations

import os
import re

from .gdb import FRAME_RE as GDB_FRAME_RE
from .gdb import gdb_frame
from .pyspy import Dump, Frame, Process, Thread, rank_from_name

RANK_PREFIX_RE = re.compile(r"^\[rank(?P<rank>\d+)\]:")
TORCH_FRAME_RE = re.compile(r"^frame #(?P<n>\d+): (?P<rest>.*)$")
TORCH_BODY_RE = re.compile(
    r"^(?P<sym>.*?)(?: \+ (?P<off>0x[0-9a-fA-F]+))? \((?P<addr>0x[0-9a-fA-F]+) in (?P<lib>[^()]*)\)$")
BTSYM_BODY_RE = re.compile(
    r"^(?P<lib>[^\s()]+)\((?P<sym>[^()]*?)(?:\+(?P<off>0x[0-9a-fA-F]+))?\) \[(?P<addr>0x[0-9a-fA-F]+)\]$")
FROM_LINE_RE = re.compile(r"^#(?P<n>\d+) (?!0x[0-9a-fA-F]+ in )(?P<func>\S.*) from (?P<file>\S+):(?P<line>\d+)$")
HEADER_RES = [re.compile(p) for p in (
    r"^C\+\+ CapturedTraceback:$",
    r"^Exception raised from .* \(most recent call first\):$",
    r"^terminate called after throwing an instance of '.*'$",
    r"^terminate called recursively$",
    r"^  what\(\):  .*$",
    r"^(?:Stack trace|Backtrace|Native stack trace)(?: \(most recent call (?:first|last)\))?:$",
)]
START_RES = [TORCH_FRAME_RE, FROM_LINE_RE, GDB_FRAME_RE, *HEADER_RES]


def looks_like_trace(head: list[str], strong_only: bool = False) -> bool:
    """Numbered frames (``frame #N:`` or ``#N ...``) at the top, or (weaker) at least two of them anywhere."""
    body = [RANK_PREFIX_RE.sub("", s) for s in head if s.strip()]
    if body and any(r.match(body[0]) for r in START_RES):
        return True
    if strong_only:
        return False
    frames = sum(1 for s in body if TORCH_FRAME_RE.match(s) or FROM_LINE_RE.match(s) or GDB_FRAME_RE.match(s))
    return frames >= 2 and frames >= 0.3 * len(body)     # a document quoting two frames is not a trace


def _torch_frame(rest: str) -> Frame:
    m = TORCH_BODY_RE.match(rest)
    if m:
        sym, lib = m.group("sym"), m.group("lib").strip()
        if sym in ("<unknown function>", "", "??"):
            sym = m.group("addr")
        return Frame(sym, lib, None, True, os.path.basename(lib))
    m = BTSYM_BODY_RE.match(rest)
    if m:
        lib = m.group("lib")
        return Frame(m.group("sym") or m.group("addr"), lib, None, True, os.path.basename(lib))
    return Frame(rest.strip(), None, None, True)   # the 'frame #N:' prefix is certain; keep its text


def _from_line_frame(func: str, file: str, line: str) -> Frame:
    known = file not in ("??", "")
    native = not file.endswith(".py")
    return Frame(func, file if known else None, int(line) if known and line != "0" else None, native)


def parse_trace(lines: list[str], first_line: int = 1) -> Dump:
    """Parse numbered native traces; ``first_line`` is the file line number of ``lines[0]``."""
    consumed: set[int] = set()
    unmatched: list[int] = []
    proc = Process(pid=None, title="", line=first_line)
    thread: Thread | None = None
    last_n = -1
    header_line: int | None = None     # the trace header the next trace starts under
    ranks: set[str] = set()

    def frame_for(n: int, lno: int) -> Thread:
        nonlocal thread, last_n, header_line
        if thread is None or n <= last_n:
            thread = Thread(str(len(proc.threads) + 1), None, None, header_line or lno, format="trace")
            proc.threads.append(thread)
            header_line = None
        last_n = n
        return thread

    for i, raw in enumerate(lines):
        text = raw.rstrip("\r\n")
        lno = first_line + i
        m = RANK_PREFIX_RE.match(text)
        if m:
            ranks.add(m.group("rank"))
            text = text[m.end():]
        if not text.strip():
            consumed.add(i)
            continue
        m = TORCH_FRAME_RE.match(text)
        if m:
            frame_for(int(m.group("n")), lno).frames.append(_torch_frame(m.group("rest")))
            consumed.add(i)
            continue
        m = FROM_LINE_RE.match(text)
        if m:
            frame_for(int(m.group("n")), lno).frames.append(
                _from_line_frame(m.group("func"), m.group("file"), m.group("line")))
            consumed.add(i)
            continue
        m = GDB_FRAME_RE.match(text)
        if m:
            frame_for(int(m.group("n")), lno).frames.append(gdb_frame(m.group("addr"), m.group("rest")))
            consumed.add(i)
            continue
        if any(r.match(text) for r in HEADER_RES):
            thread = None                           # the next frame starts a new trace
            if header_line is None:
                header_line = lno
            consumed.add(i)
            continue
        unmatched.append(i)
    if len(ranks) == 1:
        proc.rank = rank_from_name(f"rank{ranks.pop()}")
    return Dump([proc] if proc.threads else [], consumed, unmatched, format="trace")
