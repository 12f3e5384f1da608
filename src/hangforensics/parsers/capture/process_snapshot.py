"""A ``top`` or ``ps`` snapshot pasted beside the logs: which processes (or threads) were running,
sleeping or stuck in the kernel, and how much CPU they burnt.

Layouts (procps-ng):

- ``top -b -n1``: a header block (``top - 14:02:11 up 12 days, ...``, ``Tasks:``, ``%Cpu(s):``,
  ``MiB Mem :``, ``MiB Swap:``), a blank line, then ``PID USER PR NI VIRT RES SHR S %CPU %MEM TIME+
  COMMAND`` and one row per process; ``top -H`` says ``Threads:`` and its rows are threads (the PID
  column holds thread ids); ``-c`` prints full command lines instead of the 15-character name;
- ``ps aux`` (``USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND``), ``ps -ef`` / ``ps -eLf``
  (``UID PID PPID [LWP] C [NLWP] STIME TTY TIME CMD``), ``ps -o pid,stat,pcpu,wchan:32,cmd`` and any
  other ``-o`` list: columns are read by their header names, never by position alone;
- rows pasted without their header (``ps aux | grep sglang``, a few lines of ``top``): recognised by
  the default layouts' shapes;
- a ``date`` line printed with the snapshot (``date; top -b -n1``) dates it.

Times are kept as printed: top's header is a time of day with no date, and a snapshot's host clock and
zone need not be the log's (a snapshot from another day is common).  Nothing here aligns them.

Every line is a row, part of a header block, blank, or ``unmatched`` (prompts, prose, a cut row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..stacks.pyspy import rank_from_title

TOP_RE = re.compile(r"^top - (?P<t>\d{1,2}:\d\d:\d\d) (?:up |.*load average)")
TOP_BLOCK_RE = re.compile(r"^(?:(?P<what>Tasks|Threads):|%?Cpu\S*\s*:|[KMGTPE]i?B (?:Mem|Swap)\s*:|(?:Mem|Swap):)")
DATE_RE = re.compile(
    r"^(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d{1,2}) "
    r"(?P<hms>\d\d:\d\d:\d\d)(?: [A-Za-z]{1,6}| [+-]\d{4})? (?P<year>\d{4})"
    r"|(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,]\d+)?(?:Z| ?[A-Z]{2,5}|[+-]\d\d:?\d\d)?)$")
MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                     "Nov", "Dec"), 1)}

# Header names of ps and top columns (ps prints the -o keyword's header: pcpu -> %CPU, wchan -> WCHAN, ...)
PID_COLS = {"PID", "TGID"}
TID_COLS = {"LWP", "TID", "SPID"}
COMMAND_COLS = {"COMMAND", "CMD", "ARGS", "COMM", "CMDLINE"}
STATE_COLS = {"S", "STAT", "STATE"}
CPU_COLS = {"%CPU", "C", "CPU%"}
KNOWN_COLS = PID_COLS | TID_COLS | COMMAND_COLS | STATE_COLS | CPU_COLS | {
    "USER", "UID", "RUSER", "EUSER", "PPID", "PR", "PRI", "NI", "VIRT", "RES", "SHR", "SWAP", "CODE", "DATA",
    "%MEM", "MEM%", "VSZ", "RSS", "TTY", "TT", "START", "STARTED", "STIME", "TIME", "TIME+", "ELAPSED", "NLWP",
    "WCHAN", "PSR", "P", "F", "SZ", "ADDR", "CLS", "RTPRIO", "NWCHAN", "GROUP", "LABEL", "CGROUP", "NAMESPACE",
    "nTH", "NU", "ENVIRON", "SID", "PGID", "PGRP", "TPGID", "UTIME", "STIME+"}

# Rows pasted without their header, in the default layouts (the last group is the command)
ROW_SHAPES = {
    "ps aux": (re.compile(r"^(?P<USER>\S+)\s+(?P<PID>\d+)\s+(?P<pcpu>\d+(?:[.,]\d+)?)\s+(?P<pmem>\d+(?:[.,]\d+)?)\s+\d+\s+\d+"
                          r"\s+\S+\s+(?P<STAT>[RSDZTtWXIKP][<NLsl+]*)\s+\S+\s+\d+:\d\d(?::\d\d)?\s+(?P<COMMAND>\S.*)$")),
    "top": (re.compile(r"^\s*(?P<PID>\d+)\s+(?P<USER>\S+)\s+(?:-?\d+|rt)\s+-?\d+\s+[\d.,]+[kmgtpe]?\s+[\d.,]+[kmgtpe]?"
                       r"\s+[\d.,]+[kmgtpe]?\s+(?P<S>[RSDZTtIX])\s+(?P<pcpu>\d+(?:[.,]\d+)?)\s+(?P<pmem>\d+(?:[.,]\d+)?)"
                       r"\s+\d+:\d\d(?:[.:]\d\d)?\s+(?P<COMMAND>\S.*)$")),
    "ps -ef": (re.compile(r"^(?P<UID>\S+)\s+(?P<PID>\d+)\s+(?P<PPID>\d+)\s+(?P<pcpu>\d+)\s+\S+\s+\S+"
                          r"\s+(?:\d+-)?\d+:\d\d(?::\d\d)?\s+(?P<COMMAND>\S.*)$")),
}

# Process titles and worker names that carry a rank (SGLang's setproctitle, vLLM, Ray actors)
_TITLE_HEAD = re.compile(r"^(?:\S*::\S*|VllmWorker\S*|ray::\S+)")
_WORKER_RANK = re.compile(r"(?:VllmWorker|Worker)[-_ ]?(?:rank=)?(\d+)\b|\brank[=_ -]?(\d+)\b", re.I)


def rank_from_command(command: str) -> str | None:
    """'sglang::scheduler_DP0_TP3' -> 'DP0 TP3'; 'VLLM::Worker_TP1' -> 'TP1'; 'VllmWorker-2' -> 'TP2'.

    Only a process title (the first word of the command) is read: the arguments of a launcher
    ('--tp 8', a model path) name sizes, not ranks.  None when the title names no rank."""
    m = _TITLE_HEAD.match(command)
    if m is None:
        return None
    title = m.group(0)
    if "::" in title and (rank := rank_from_title(title)):
        return rank
    w = _WORKER_RANK.search(command[:80])
    return f"TP{int(w.group(1) or w.group(2))}" if w else None


def activity(state: str | None, cpu: float | None) -> str | None:
    """What state and CPU say together: R at 90 % or more is spinning (a hung rank polling, or a busy one:
    compare with the log), D is an uninterruptible wait (usually a driver: GPU, NFS)."""
    if not state:
        return None
    s = state[0]
    if s == "R":
        return "spinning" if cpu is not None and cpu >= 90 else "running"
    return {"S": "sleeping", "I": "sleeping", "D": "uninterruptible", "T": "stopped", "t": "stopped",
            "Z": "zombie", "X": "zombie"}.get(s)


@dataclass
class Snapshot:
    """Rows of the ``process_samples`` table (without engine and path) and the line accounting."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    consumed: set[int] = field(default_factory=set)
    unmatched: list[int] = field(default_factory=list)


def header_columns(text: str) -> list[str] | None:
    """The column names of a ps/top header line; None when the line is not one."""
    cols = text.split()
    if len(cols) < 3 or any(c not in KNOWN_COLS and c.upper() not in KNOWN_COLS for c in cols):
        return None
    up = [c.upper() for c in cols]
    if not (set(up) & (PID_COLS | TID_COLS)) or not (set(up) & (COMMAND_COLS | STATE_COLS | CPU_COLS)):
        return None
    return up


def looks_like_process_snapshot(head: list[str]) -> bool:
    """A top/ps snapshot: top's first header line or a ps/top column header near the top, followed by a
    row; or mostly rows of the default layouts (``ps aux | grep ...`` pasted without its header)."""
    body = [t.rstrip("\r") for t in head[:80] if t.strip()]
    for i, t in enumerate(body[:30]):
        if TOP_RE.match(t):
            return True
        cols = header_columns(t)
        if cols and i + 1 < len(body) and _row(body[i + 1], cols) is not None:
            return True
    shaped = sum(1 for t in body if any(rx.match(t) for rx in ROW_SHAPES.values()))
    return shaped >= 2 and shaped >= 0.6 * len(body)


def _num(v: str | None) -> float | None:
    if v is None:
        return None
    try:
        return float(v.replace(",", "."))           # top prints a decimal comma in some locales
    except ValueError:
        return None


def _int(v: str | None) -> int | None:
    return int(v) if v is not None and v.isdigit() and len(v) < 19 else None


def _row(text: str, cols: list[str]) -> dict[str, str] | None:
    """A row under ``cols``: split on blanks, the last column (the command) takes the rest of the line."""
    parts = text.split(None, len(cols) - 1)
    if "STARTED" in cols and len(parts) == len(cols):     # ps lstart: 'Thu Sep 25 10:48:46 2026', five words
        k = cols.index("STARTED")
        if re.match(r"^[A-Z][a-z]{2}$", parts[k]):
            parts = text.split(None, len(cols) + 3)
            parts[k:k + 5] = [" ".join(parts[k:k + 5])]
    if len(parts) != len(cols) or (cols[-1] not in COMMAND_COLS and len(text.split()) != len(cols)):
        return None
    got = dict(zip(cols, parts, strict=True))
    ids = [got[c] for c in cols if c in PID_COLS | TID_COLS]
    if not ids or not all(x.isdigit() for x in ids):
        return None
    state = next((got[c] for c in cols if c in STATE_COLS), None)
    if state is not None and not re.match(r"^[RSDZTtWXIKP]", state):
        return None
    cpu = next((got[c] for c in cols if c in CPU_COLS), None)
    if cpu is not None and _num(cpu) is None:
        return None
    return got


class _Reader:
    """Snapshot by snapshot: the current column layout, tool and printed time."""

    def __init__(self, first_line: int) -> None:
        self.first_line = first_line
        self.out = Snapshot()
        self.snapshot = -1
        self.rows_in_snapshot = 0
        self.cols: list[str] | None = None
        self.tool: str | None = None
        self.threads = False                # top -H: rows are threads
        self.ts_printed: str | None = None
        self.ts: datetime | None = None
        self.clock = "none"

    def new_snapshot(self) -> None:
        self.snapshot += 1
        self.rows_in_snapshot = 0
        self.cols, self.tool, self.threads = None, None, False
        self.ts_printed, self.ts, self.clock = None, None, "none"

    def feed(self, i: int, text: str) -> None:
        if not text.strip():
            self.out.consumed.add(i)
            return
        if (m := TOP_RE.match(text)):
            if self.snapshot < 0 or self.rows_in_snapshot or self.tool is not None:
                self.new_snapshot()          # (a date line just before it dates this snapshot)
            self.tool = "top"
            if self.clock != "dated":
                self.ts_printed, self.clock = m.group("t"), "time_of_day"
        elif (m := DATE_RE.match(text.strip())):
            self.date_line(text.strip(), m)
        elif (m := TOP_BLOCK_RE.match(text)):
            if self.snapshot < 0 or self.rows_in_snapshot:
                self.new_snapshot()          # top's summary without its first line
                self.tool = "top"
            self.threads = self.threads or m.group("what") == "Threads"
        elif (cols := header_columns(text)):
            self.header(cols)
        elif not self.data_row(i, text):
            self.out.unmatched.append(i)
            return
        self.out.consumed.add(i)

    def date_line(self, text: str, m: re.Match[str]) -> None:
        if self.snapshot < 0 or self.rows_in_snapshot:
            self.new_snapshot()              # `date; ps aux`: the date starts the next snapshot
        try:
            if m.group("iso"):
                ts = datetime.fromisoformat(m.group("iso").replace(" ", "T"))
            else:
                h, mi, se = (int(x) for x in m.group("hms").split(":"))
                ts = datetime(int(m.group("year")), MONTHS[m.group("mon")], int(m.group("day")), h, mi, se)
        except ValueError:
            return
        self.ts_printed, self.ts, self.clock = text, ts, "dated"

    def header(self, cols: list[str]) -> None:
        if self.snapshot < 0 or self.rows_in_snapshot:
            self.new_snapshot()
            self.tool = None
        top = bool({"PR", "VIRT", "RES", "SHR", "TIME+"} & set(cols))
        if self.tool is None:
            self.tool = "top" if top else self.ps_tool(cols)
        if self.tool == "top" and self.threads:
            self.tool = "top -H"
        self.cols = cols

    @staticmethod
    def ps_tool(cols: list[str]) -> str:
        if cols[:4] == ["USER", "PID", "%CPU", "%MEM"]:
            return "ps aux"
        if cols[:3] == ["UID", "PID", "PPID"]:
            return "ps -eLf" if "LWP" in cols else "ps -ef"
        return "ps -o"

    def data_row(self, i: int, text: str) -> bool:
        got = _row(text, self.cols) if self.cols else None
        if got is None:
            for tool, rx in ROW_SHAPES.items():
                if (m := rx.match(text)):
                    got = {k: v for k, v in m.groupdict().items() if v is not None}
                    got["%CPU"], got["%MEM"] = got.pop("pcpu", None), got.pop("pmem", None)
                    if self.snapshot < 0:
                        self.new_snapshot()
                    self.tool = self.tool or tool
                    break
        if got is None:
            return False
        self.add(i, got)
        return True

    def add(self, i: int, got: dict[str, str | None]) -> None:
        thread_rows = self.tool == "top -H"
        pid = next((_int(got.get(c)) for c in ("PID", "TGID") if got.get(c)), None)
        tid = next((_int(got.get(c)) for c in ("LWP", "TID", "SPID") if got.get(c)), None)
        if thread_rows:
            pid, tid = None, pid
        state = next((got[c] for c in ("STAT", "S", "STATE") if got.get(c)), None)
        cpu = _num(next((got[c] for c in ("%CPU", "CPU%", "C") if got.get(c)), None))
        command = next((got[c] for c in ("COMMAND", "CMD", "ARGS", "COMM", "CMDLINE") if got.get(c)), None)
        self.out.rows.append({
            "line": self.first_line + i, "snapshot": max(self.snapshot, 0), "tool": self.tool,
            "ts_printed": self.ts_printed, "ts": self.ts, "clock": self.clock, "pid": pid, "tid": tid,
            "ppid": _int(got.get("PPID")), "user": got.get("USER") or got.get("UID") or got.get("RUSER"),
            "state": state[0] if state else None, "cpu_pct": cpu,
            "mem_pct": _num(got.get("%MEM") or got.get("MEM%")), "wchan": got.get("WCHAN"),
            "command": command, "rank": rank_from_command(command) if command else None,
            "activity": activity(state, cpu),
        })
        self.rows_in_snapshot += 1


def parse_snapshot(lines: list[str], first_line: int = 1) -> Snapshot:
    """Parse top/ps output; ``first_line`` is the file line number of ``lines[0]``."""
    r = _Reader(first_line)
    for i, raw in enumerate(lines):
        r.feed(i, raw.rstrip("\r\n"))
    return r.out
