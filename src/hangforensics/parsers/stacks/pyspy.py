"""py-spy dumps: text (plain, --native, --locals, --subprocesses) and ``--json``.

Grammar: ../shared/formats/README.md ("py-spy text grammar", "--json").  A dump
is a list of process blocks; each block has threads; each thread has frames,
innermost first.  ``--locals`` adds indented Arguments/Locals groups under a
frame (JSON: a ``locals`` array), which are consumed (they belong to the frame)
but not stored.

The :class:`Dump` structure defined here is shared by every stack-dump parser
(gdb, faulthandler, numbered native traces): each returns processes -> threads
-> frames plus the offsets of the lines it consumed and of those it could not
place.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from dataclasses import dataclass, field

from ..vllm.vllm_patterns import rank_from_title as vllm_rank_from_title

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



@dataclass
class Frame:
    function: str
    file: str | None
    line: int | None
    native: bool
    library: str | None = None     # shared object of a native frame, when printed
    at: int | None = None          # file line of the frame's own line, where the parser knows it


@dataclass
class Thread:
    thread_id: str
    state: str | None
    name: str | None
    line: int                      # line number of the thread header
    frames: list[Frame] = field(default_factory=list)
    garbled: bool = False          # interleaved output: only the frames parsed with certainty are kept
    format: str | None = None      # overrides Dump.format (gdb files mixing bt and py-bt)
    # Pieces of a dump (sglang-formats.md §12 "Fragments"): None when the thread's section is whole as
    # far as the text shows; 'cut' (its section ends at a line cut mid-token: later frames missing),
    # 'continuation' (headerless frames at the start of a later part: thread_id '?', header elsewhere),
    # 'joined' (its frames continue after a cut or foreign line: two parts spliced in one file).
    fragment: str | None = None
    line_end: int | None = None    # last line of the thread's section (frames, locals, a cut line)


@dataclass
class Process:
    pid: int | None
    title: str
    python: str | None = None
    parent_pid: int | None = None
    line: int = 0
    threads: list[Thread] = field(default_factory=list)
    rank: str | None = None        # a rank the dump states outside the title (torch's '[rank3]:' prefix)


@dataclass
class Dump:
    processes: list[Process]
    consumed: set[int]             # offsets (into the given lines) that belong to the dump
    unmatched: list[int]           # offsets that looked like neither grammar nor blank
    format: str = "pyspy_text"     # stacks.format: pyspy_text, pyspy_json, gdb, gdb_pybt, faulthandler, trace
    notes: list[str] = field(default_factory=list)   # facts about the file its rows cannot hold

    @property
    def threads(self) -> list[Thread]:
        return [t for p in self.processes for t in p.threads]


def rank_from_title(title: str) -> str | None:
    """'sglang::scheduler_DP0_TP3_EP3' -> 'DP0 TP3 EP3'; vLLM's 'VLLM::Worker_TP1' -> 'TP1' and
    'VLLM::EngineCore_DP0' -> 'EngineCore_DP0' (vllm_patterns); None when the title names no rank."""
    vllm = vllm_rank_from_title(title)
    if vllm is not None:
        return vllm
    if "scheduler" not in title and not TITLE_RANK_RE.search(title):
        return None
    tags = TITLE_RANK_RE.findall(title.split("::", 1)[-1])
    return " ".join(tags) if tags else None


NAME_RANK_RE = re.compile(r"(?<![A-Za-z])(rank|dp|pp|tp|ep)[-_]?(\d+)(?!\d)", re.I)


def rank_from_name(name: str) -> str | None:
    """A rank spelled in a file or folder name: 'rank3' / 'tp3' -> 'TP3', 'dp1_tp3' -> 'DP1 TP3'.

    A bare global rank ('rank3', torch's '[rank3]:') is read as the TP rank, which it is unless
    the engine runs pipeline stages; None when the name spells no rank.
    """
    tags: list[str] = []
    for kind, num in NAME_RANK_RE.findall(name):
        tag = ("TP" if kind.lower() == "rank" else kind.upper()) + str(int(num))
        if tag[:2] not in {t[:2] for t in tags}:
            tags.append(tag)
    return " ".join(tags) if tags else None


def _is_native(file: str, line: str | None) -> bool:
    if line is None:
        return True
    # --native frames with debug info look like 'sock_recvmsg (socketmodule.c:4036)'
    return file.endswith((".c", ".cc", ".cpp", ".h", ".hpp", ".c.h"))


# A native frame's "file" is a library or executable name (a dot or a slash in it), '<string>' or
# '[vdso]'.  A C++ name cut right after one of its own parenthesised parts ('bool (*)', '(long)') leaves
# a "file" like '*' or 'long': that is a cut line, not a frame.
LIBRARY_RE = re.compile(r"^(?:<[^<>]*>|\[[^\[\]]*\]|\S*[./]\S*|python[\d.]*)$")
# The unknown thread that headerless frames (a dump's later part) are attributed to
CONTINUATION_TID = "?"


def frame_of(text: str) -> Frame | None:
    """A py-spy frame line as a Frame; None when the line is not one (also a frame line cut mid-token)."""
    m = FRAME_RE.match(text)
    if m is None:
        return None
    ln, file = m.group("line"), m.group("file")
    if ln is None and not LIBRARY_RE.match(file):
        return None
    native = _is_native(file, ln)
    return Frame(m.group("name"), file, int(ln) if ln else None, native, file if native and ln is None else None)


def _cut_like(text: str) -> bool:
    """A line that begins like py-spy's grammar but does not parse: a frame, locals, thread or process line
    cut mid-token (a paste's last line), as opposed to a foreign line."""
    if text.startswith("    "):
        return True
    head = text[:8]
    return any(w.startswith(head) or head.startswith(w) for w in ("Thread ", "Process "))


class _TextReader:
    """Line-by-line state of a py-spy text parse, with the fragments of a dump cut into parts: frames
    before any thread header go to an unknown thread marked as a continuation; a line outside the
    grammar inside a thread does not end it (a paste spliced there), and a cut last line is kept out."""

    def __init__(self, first_line: int) -> None:
        self.first_line = first_line
        self.processes: list[Process] = []
        self.consumed: set[int] = set()
        self.unmatched: list[int] = []
        self.frame_lines: list[int] = []
        self.proc: Process | None = None
        self.thread: Thread | None = None
        self.gap: str | None = None             # a line outside the grammar since the thread's last line: cut/foreign
        self.gap_at = 0
        self.unknown_after_cut = False          # a thread header was cut: the next frames are an unknown thread's

    def close_thread(self) -> None:
        th = self.thread
        if th is not None and self.gap == "cut":
            th.fragment = th.fragment or "cut"
            th.line_end = max(th.line_end or 0, self.first_line + self.gap_at)
        self.thread, self.gap = None, None

    def keep(self, i: int) -> None:
        self.consumed.add(i)
        if self.thread is not None:
            self.thread.line_end = self.first_line + i

    def frame(self, i: int, fr: Frame) -> None:
        if self.thread is None:
            if self.proc is None:
                self.proc = Process(pid=None, title="", line=self.first_line + i)
                self.processes.append(self.proc)
            if self.unknown_after_cut or self.proc.threads:
                # after a cut header: that thread's frames, its id unknown (a paste spliced here)
                self.thread = Thread(f"{CONTINUATION_TID}{self.first_line + i}", None, None, self.first_line + i,
                                     fragment="joined")
            else:
                # frames before any thread header: a later part of a dump (its header is in an earlier part)
                self.thread = Thread(CONTINUATION_TID, None, None, self.first_line + i, fragment="continuation")
            self.unknown_after_cut = False
            self.proc.threads.append(self.thread)
        elif self.gap is not None and self.thread.fragment is None:
            self.thread.fragment = "joined"     # the frames go on after a cut or foreign line
        self.gap = None
        fr.at = self.first_line + i
        self.thread.frames.append(fr)
        self.frame_lines.append(i)
        self.keep(i)

    def feed(self, i: int, text: str) -> None:
        if not text.strip() or SEPARATOR_RE.match(text):
            self.consumed.add(i)                # blank and prefix-only lines do not end a thread
            return
        fr = frame_of(text)
        if fr is not None:
            self.frame(i, fr)
            return
        if self.thread is not None and (LOCALS_HEAD_RE.match(text) or LOCALS_ITEM_RE.match(text)):
            self.keep(i)
            return
        if (m := THREAD_RE.match(text)):
            self.close_thread()
            if self.proc is None:
                self.proc = Process(pid=None, title="", line=self.first_line + i)
                self.processes.append(self.proc)
            self.thread = Thread(m.group(1), m.group(2), m.group(3), self.first_line + i, line_end=self.first_line + i)
            self.proc.threads.append(self.thread)
            self.consumed.add(i)
        elif (m := PROCESS_RE.match(text)):
            self.close_thread()
            self.proc = Process(pid=int(m.group(1)), title=m.group(2), line=self.first_line + i)
            self.processes.append(self.proc)
            self.consumed.add(i)
        elif (m := PYTHON_RE.match(text)) and self.proc is not None:
            self.proc.python = m.group(1)
            self.consumed.add(i)
        elif (m := PARENT_RE.match(text)) and self.proc is not None:
            self.proc.parent_pid = int(m.group(1))
            self.consumed.add(i)
        else:
            self.unmatched.append(i)
            if text.startswith(("T", "P")) and _cut_like(text):
                self.cut_header()
            elif self.thread is not None and self.gap != "cut":
                self.gap, self.gap_at = ("cut" if _cut_like(text) else "foreign"), i

    def cut_header(self) -> None:
        """A thread (or process) header cut mid-token: the thread above it is complete (its rows end before the cut
        line, which stays unmatched: a part that ends here leaves no thread open); frames after it are
        the cut thread's, whose id is not certain."""
        self.close_thread()
        self.unknown_after_cut = True


def parse_dump(lines: list[str], first_line: int = 1) -> Dump:
    """Parse py-spy text lines; ``first_line`` is the file line number of ``lines[0]``.

    Fragments: a part without its ``Process`` header is parsed headerless; its frames before the first
    thread header belong to a thread whose header is in an earlier part (thread_id '?', fragment
    'continuation': ``ingest.fragments`` joins it to that part when the engine's evidence holds it).
    A last line cut mid-token is kept in ``unmatched``, never read as a frame (its thread: 'cut').
    """
    r = _TextReader(first_line)
    for i, raw in enumerate(lines):
        r.feed(i, raw.rstrip("\r\n"))
    r.close_thread()
    unmatched = r.unmatched
    if any(not p.threads for p in r.processes[:-1]):
        # Two processes dumped into one file at once, line by line: a process header with no thread
        # before the next header.  No frame can be attributed with certainty: the threads are kept
        # (marked garbled), their frame lines go to unparsed.
        for p in r.processes:
            # an unknown thread stands only on its frames: with them uncertain, nothing of it is left
            p.threads = [t for t in p.threads if not t.thread_id.startswith(CONTINUATION_TID)]
            for th in p.threads:
                th.frames.clear()
                th.garbled = True
        r.consumed.difference_update(r.frame_lines)
        unmatched = sorted(unmatched + r.frame_lines)
    return Dump(r.processes, r.consumed, unmatched)


def looks_like_pyspy(head: list[str]) -> bool:
    """Content sniffing for standalone files: a Process header or a thread header near the top."""
    for text in head[:20]:
        t = text.strip("\r\n")
        if PROCESS_RE.match(t) or THREAD_RE.match(t):
            return True
    return False


def looks_like_pyspy_part(head: list[str]) -> bool:
    """A later part of a py-spy dump, without its headers: most of the head is frame lines (a deep stack
    pasted in two pieces can run for dozens of frames before the next thread header)."""
    body = [t.rstrip("\r") for t in head[:60] if t.strip()]
    frames = sum(1 for t in body if frame_of(t) is not None)
    grammar = frames + sum(1 for t in body if THREAD_RE.match(t) or LOCALS_HEAD_RE.match(t)
                           or LOCALS_ITEM_RE.match(t))
    return frames >= 3 and grammar >= 0.8 * len(body)


# -- --json -------------------------------------------------------------------------------------------

JSON_START_RE = re.compile(r"^\s*\[\s*(?:\{|\]|$)")


def looks_like_json(head: str) -> bool:
    """A py-spy ``--json`` dump: a JSON array whose objects carry py-spy's thread keys."""
    return bool(JSON_START_RE.match(head)) and '"frames"' in head and (
        '"os_thread_id"' in head or '"thread_id"' in head)


def _json_state(t: dict) -> str | None:
    if "active" not in t:
        return None
    if not t.get("active"):
        return "idle"
    return "active+gil" if t.get("owns_gil") else "active"


def _json_frame(f: dict) -> Frame:
    module = f.get("module")
    native = module is not None
    line = f.get("line")
    if not isinstance(line, int) or (native and line == 0):
        line = None
    file = f.get("short_filename") or f.get("filename")
    return Frame(str(f.get("name", "")), file, line, native, os.path.basename(module) if native else None)


def _json_thread(t: object) -> Thread | None:
    if not isinstance(t, dict) or not isinstance(t.get("frames"), list):
        return None
    tid = t.get("os_thread_id")
    if tid is None:
        tid = hex(t["thread_id"]) if isinstance(t.get("thread_id"), int) else t.get("thread_id")
    if tid is None:
        return None
    frames = [_json_frame(f) for f in t["frames"] if isinstance(f, dict)]
    name = t.get("thread_name")
    return Thread(str(tid), _json_state(t), str(name) if name is not None else None, 0, frames)


def parse_json(lines: list[str], first_line: int = 1) -> Dump:
    """Parse ``py-spy dump --json`` output (one or more top-level arrays of thread objects).

    JSON lists threads newest first; they are put back in the text order (MainThread first, then
    by creation), so a text dump and its JSON twin line up.  Threads are grouped into processes by
    ``pid`` (one process block per pid and array).  A truncated file keeps every complete thread
    object; the lines after the last complete one are reported as unmatched.
    """
    text = "\n".join(lines)
    starts = [0]
    for s in lines[:-1]:
        starts.append(starts[-1] + len(s) + 1)

    def line_of(pos: int) -> int:                 # offset into ``lines`` of text position ``pos``
        return bisect.bisect_right(starts, pos) - 1

    dec = json.JSONDecoder()
    ws = re.compile(r"\s*")
    processes: list[Process] = []
    spans: list[tuple[int, int]] = []            # text ranges that were parsed with certainty
    foreign: list[tuple[int, int]] = []          # array elements that are not thread objects
    pos = ws.match(text, 0).end()
    while pos < len(text) and text[pos] == "[":
        arr_start = pos
        pos = ws.match(text, pos + 1).end()
        items: list[tuple[int, dict, Thread]] = []
        closed = False
        last_end = arr_start + 1
        while pos < len(text):
            if text[pos] == "]":
                pos += 1
                closed = True
                break
            try:
                obj, end = dec.raw_decode(text, pos)
            except (json.JSONDecodeError, RecursionError):   # nesting deeper than any dump: not py-spy's JSON
                break
            th = _json_thread(obj)
            if th is not None:
                items.append((pos, obj, th))
            else:
                foreign.append((pos, end))        # valid JSON, but no thread object: kept as unparsed
            last_end = end
            pos = ws.match(text, end).end()
            if pos < len(text) and text[pos] == ",":
                last_end = pos + 1
                pos = ws.match(text, pos + 1).end()
            elif pos < len(text) and text[pos] != "]":
                break
        spans.append((arr_start, pos if closed else last_end))
        by_pid: dict[object, Process] = {}
        for start, obj, th in reversed(items):
            th.line = first_line + line_of(start)
            pid = obj.get("pid")
            if pid not in by_pid:
                by_pid[pid] = Process(pid=pid if isinstance(pid, int) else None, title="",
                                      line=first_line + line_of(arr_start))
                processes.append(by_pid[pid])
            by_pid[pid].threads.append(th)
        if not closed:
            break
        pos = ws.match(text, pos).end()
    tail = spans[-1][1] if spans else 0
    consumed: set[int] = set()
    for a, b in spans:
        consumed.update(range(line_of(a), line_of(max(b - 1, a)) + 1))
    if text[tail:].strip():
        # a truncated or foreign tail: a line that holds both the end of a parsed item and the
        # start of the broken rest is not certain either
        consumed.difference_update(range(line_of(ws.match(text, tail).end()), len(lines)))
    for a, b in foreign:
        consumed.difference_update(range(line_of(a), line_of(b - 1) + 1))
    consumed.update(i for i, s in enumerate(lines) if not s.strip())
    unmatched = [i for i in range(len(lines)) if i not in consumed]
    return Dump(processes, consumed, unmatched, format="pyspy_json")
