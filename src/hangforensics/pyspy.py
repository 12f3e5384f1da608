"""py-spy text dumps (plain, --native, --locals, --subprocesses), standalone or embedded in a log.

Grammar: ../shared/formats/README.md ("py-spy text grammar").  A dump is a list
of process blocks; each block has threads; each thread has frames, innermost
first.  ``--locals`` adds indented Arguments/Locals groups under a frame, which
are consumed (they belong to the frame) but not stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PROCESS_RE = re.compile(r"^Process (\d+): (.*)$")
PYTHON_RE = re.compile(r"^Python v(\S+) \((.*)\)$")
PARENT_RE = re.compile(r"^Parent Process (\d+): (.*)$")
THREAD_RE = re.compile(r'^Thread (\d+|0x[0-9A-Fa-f]+) \((idle|active|active\+gil|gil)\)(?:: "(.*)")?$')
FRAME_RE = re.compile(r"^    (?P<name>\S.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
LOCALS_HEAD_RE = re.compile(r"^        (Arguments|Locals):$")
LOCALS_ITEM_RE = re.compile(r"^            \S")
SEPARATOR_RE = re.compile(r"^-{40,}$")
# Rank tags inside a process title: sglang::scheduler_DP0_TP3_EP3
TITLE_RANK_RE = re.compile(r"(?:^|[_\s:])((?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)")
NATIVE_LIB_RE = re.compile(r"\.so(?:\.[\w.]+)?$|^lib|\.dylib$|^python[\d.]*$")

PYSPY_START_RE = re.compile(r"^(Process \d+: |Thread (\d+|0x[0-9A-Fa-f]+) \((idle|active))")


@dataclass
class Frame:
    function: str
    file: str
    line: int | None
    native: bool


@dataclass
class Thread:
    thread_id: str
    state: str
    name: str | None
    line: int                      # line number of the thread header
    frames: list[Frame] = field(default_factory=list)


@dataclass
class Process:
    pid: int | None
    title: str
    python: str | None = None
    parent_pid: int | None = None
    line: int = 0
    threads: list[Thread] = field(default_factory=list)


@dataclass
class Dump:
    processes: list[Process]
    consumed: set[int]             # offsets (into the given lines) that belong to the dump
    unmatched: list[int]           # offsets that looked like neither grammar nor blank


def rank_from_title(title: str) -> str | None:
    """'sglang::scheduler_DP0_TP3_EP3' -> 'DP0 TP3 EP3'; None when the title names no rank."""
    if "scheduler" not in title and not TITLE_RANK_RE.search(title):
        return None
    tags = TITLE_RANK_RE.findall(title.split("::", 1)[-1])
    return " ".join(tags) if tags else None


def _is_native(file: str, line: str | None) -> bool:
    if line is None:
        return True
    # --native frames with debug info look like 'sock_recvmsg (socketmodule.c:4036)'
    return file.endswith((".c", ".cc", ".cpp", ".h", ".hpp", ".c.h"))


def parse_dump(lines: list[str], first_line: int = 1) -> Dump:
    """Parse py-spy text lines; ``first_line`` is the file line number of ``lines[0]``."""
    processes: list[Process] = []
    consumed: set[int] = set()
    unmatched: list[int] = []
    proc: Process | None = None
    thread: Thread | None = None
    for i, raw in enumerate(lines):
        text = raw.rstrip("\r\n")
        if not text.strip() or SEPARATOR_RE.match(text):
            consumed.add(i)
            continue
        m = FRAME_RE.match(text)
        if m and thread is not None:
            ln = m.group("line")
            thread.frames.append(
                Frame(m.group("name"), m.group("file"), int(ln) if ln else None, _is_native(m.group("file"), ln))
            )
            consumed.add(i)
            continue
        if thread is not None and (LOCALS_HEAD_RE.match(text) or LOCALS_ITEM_RE.match(text)):
            consumed.add(i)
            continue
        m = THREAD_RE.match(text)
        if m:
            if proc is None:
                proc = Process(pid=None, title="", line=first_line + i)
                processes.append(proc)
            thread = Thread(m.group(1), m.group(2), m.group(3), first_line + i)
            proc.threads.append(thread)
            consumed.add(i)
            continue
        m = PROCESS_RE.match(text)
        if m:
            proc = Process(pid=int(m.group(1)), title=m.group(2), line=first_line + i)
            processes.append(proc)
            thread = None
            consumed.add(i)
            continue
        m = PYTHON_RE.match(text)
        if m and proc is not None:
            proc.python = m.group(1)
            consumed.add(i)
            continue
        m = PARENT_RE.match(text)
        if m and proc is not None:
            proc.parent_pid = int(m.group(1))
            consumed.add(i)
            continue
        unmatched.append(i)
    return Dump(processes, consumed, unmatched)


def looks_like_pyspy(head: list[str]) -> bool:
    """Content sniffing for standalone files: a Process header or a thread header near the top."""
    for text in head[:20]:
        t = text.strip("\r\n")
        if PROCESS_RE.match(t) or THREAD_RE.match(t):
            return True
    return False
