"""gdb captures: ``thread apply all bt [full]`` (native frames) and ``py-bt`` / ``thread apply all py-bt``.

Grammar: ../shared/formats/README.md ("gdb `thread apply all bt` grammar").  gdb prints a
preamble on attach (``[New LWP n]``, libthread_db lines, the selected thread's frame 0, a
"No such file or directory" source line, the auto-load warning with its help text), then one
block per thread from the highest gdb number down to ``Thread 1``::

    Thread 14 (Thread 0x7f8153fff6c0 (LWP 6114) "pt_gloo_runloop"):
    #0  __futex_abstimed_wait_common64 (private=0, ...) at ./nptl/futex-internal.c:57
    #5  0x00007f81708a741d in std::condition_variable::wait(...) () from /lib/.../libstdc++.so.6

and ``[Inferior 1 (process P) detached]`` when it lets go.  Frame lines are parsed from the
right: an optional `` from <lib>`` or `` at <src>:<line>`` suffix, then the last balanced
``( ... )`` group (the arguments), then the function.  ``py-bt`` prints a
``Traceback (most recent call first):`` block of ``File "...", line n, in name`` frames for the
selected thread (thread 1, whose LWP is the pid) or, with ``thread apply all py-bt``, under each
thread header.

The result is a :class:`pyspy.Dump`: one process (a new block when a thread shows up twice,
e.g. ``thread apply all bt`` followed by ``thread apply all py-bt``), threads named by their
kernel ``comm``, ``thread_id`` = LWP (py-spy's tid), every frame ``native`` with ``library`` =
the basename of the ``from`` path; py-bt frames are Python frames (format ``gdb_pybt``).
"""

from __future__ import annotations

import os
import re

from .pyspy import Dump, Frame, Process, Thread

THREAD_RE = re.compile(
    r'^Thread (?P<n>\d+) \((?:Thread (?P<ptid>0x[0-9a-fA-F]+) \(LWP (?P<lwp>\d+)\)|LWP (?P<lwp2>\d+)'
    r'|process (?P<proc>\d+)|Thread (?P<ptid2>0x[0-9a-fA-F]+))(?: "(?P<comm>.*)")?\):$'
)
# A bare address with nothing after it is a frame line cut off (a dump interrupted mid-write): not a frame.
FRAME_RE = re.compile(r"^#(?P<n>\d+) +(?:(?P<addr>0x[0-9a-fA-F]+) in )?(?!0x[0-9a-fA-F]*$)(?P<rest>\S.*)$")
INFERIOR_RE = re.compile(r"^\[Inferior \d+ \(process (\d+)\) detached\]$")
ATTACH_RE = re.compile(r"^Attaching to (?:process|program: .*, process) (\d+)$")
TRACEBACK_RE = re.compile(r"^Traceback \(most recent call first\):$")
PY_FRAME_RE = re.compile(r'^  File "(?P<file>.*)", line (?P<line>\d+), in (?P<name>\S+)$')
PY_SOURCE_RE = re.compile(r"^    \S.*$|^    $")
PY_BUILTIN_RE = re.compile(r"^  <(?P<what>built-in method|built-in function|method-wrapper|wrapper_descriptor)"
                           r" (?P<name>[^\s>]+)(?: of .*)?>$")
PY_NOTE_RE = re.compile(r"^  (?:Waiting for the GIL|Garbage-collecting|\(unable to read python frame information\))$")
PY_OPTIMIZED_RE = re.compile(r"^  \(frame information optimized out\)$")
BT_FULL_RE = re.compile(r"^(?:No locals\.|No symbol table info available\.)$")

# Lines gdb prints around the backtraces that carry no frame: consumed, not stored.
NOISE_RES = [re.compile(p) for p in (
    r"^\[New LWP \d+\]$",
    r"^\[New Thread 0x[0-9a-fA-F]+ \(LWP \d+\)\]$",
    r"^\[Thread debugging using libthread_db enabled\]$",
    r'^Using host libthread_db library ".*"\.?$',
    r"^\[Detaching after v?fork from (?:child|parent) process \d+\]$",
    r"^\d+\t.*$",                                   # source line, or '57\t./nptl/x.c: No such file or directory.'
    r"^\d+\s+in\s+\S+$",                            # '57\tin ./nptl/futex-internal.c' (older gdb)
    r"^warning: .*$",
    r"^To enable execution of this file add$",
    r"^\tadd-auto-load-safe-path .*$",
    r'^line to your configuration file ".*"\.$',
    r"^To completely disable this security protection add$",
    r"^\tset auto-load safe-path /$",
    r"^For more information about this security protection see the$",
    r'^"Auto-loading safe path" section in the GDB manual\.  E\.g\., run from the shell:$',
    r'^\tinfo "\(gdb\)Auto-loading safe path"$',
    r"^Reading symbols from .*$",
    # debuginfod (gdb 12+, e.g. Ubuntu's), asked and declined in batch mode
    r"^This GDB supports auto-downloading debuginfo from the following URLs:$",
    r"^  <https?://[^>]+>$",
    r"^Enable debuginfod for this session\? \(y or \[n\]\).*$",
    r"^Debuginfod has been disabled\.$",
    r"^To make this setting permanent, add 'set debuginfod enabled off' to \.gdbinit\.$",
    r"^Download failed: .*$",
    r"^Downloading separate debug info for .*$",
    r"^Backtrace stopped: .*$",
    r"^\(More stack frames follow\.\.\.\)$",
    r"^No stack\.$",
    r"^Unable to locate python frame$",
    r"^--Type <RET> for more, q to quit, c to continue without paging--$",
)]
GDB_START_RES = [re.compile(p) for p in (
    r"^This GDB supports auto-downloading debuginfo from the following URLs:$",
    r"^\[New (?:LWP \d+|Thread 0x[0-9a-fA-F]+ \(LWP \d+\))\]$",
    r"^\[Thread debugging using libthread_db enabled\]$",
    r"^Using host libthread_db library ",
    r"^Attaching to (?:process|program: .*, process) \d+$",
    TRACEBACK_RE.pattern,
    THREAD_RE.pattern,
)]


def looks_like_gdb(head: list[str], strong_only: bool = False) -> bool:
    """gdb output: its attach preamble at the top, or (weaker) thread headers with ``#N`` frames."""
    first = [s for s in head if s.strip()][:3]
    if first and any(r.match(first[0]) for r in GDB_START_RES):
        return True
    if strong_only:
        return False
    body = [s for s in head if s.strip()]
    threads = sum(1 for s in body if THREAD_RE.match(s))
    frames = sum(1 for s in body if FRAME_RE.match(s) or PY_FRAME_RE.match(s))
    tracebacks = sum(1 for s in body if TRACEBACK_RE.match(s))
    return (threads + tracebacks) >= 1 and frames >= 1 and frames >= 0.2 * len(body)


def split_args(rest: str) -> tuple[str, str | None, str | None, int | None, str | None]:
    """Parse a frame's text after ``#N  0xADDR in`` from the right.

    Returns (function, args, source file, source line, library path); args is None when the
    line has no balanced argument group (then the whole head is the function).
    """
    src = lib = None
    sline: int | None = None
    head = rest
    m = re.match(r"^(?P<head>.*\)) from (?P<lib>\S.*)$", rest)
    if m:
        head, lib = m.group("head"), m.group("lib")
    else:
        m = re.match(r"^(?P<head>.*\)) at (?P<src>\S.*):(?P<line>\d+)$", rest)
        if m:
            head, src, sline = m.group("head"), m.group("src"), int(m.group("line"))
    start = _last_group_start(head)
    if start is None:
        return head.strip(), None, src, sline, lib
    return head[:start].rstrip(), head[start + 1:-1], src, sline, lib


def _last_group_start(head: str) -> int | None:
    """Index of the '(' that opens the final balanced group ending at ``head[-1]``, quote-aware."""
    if not head.endswith(")"):
        return None
    depth = 0
    start: int | None = None
    quote: str | None = None
    i = 0
    while i < len(head):
        c = head[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c == '"' and depth > 0:
            quote = c
        elif c == "(":
            if depth == 0:
                start = i
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return None
        i += 1
    if depth != 0 or quote or start is None or start == 0:
        return None
    return start


def gdb_frame(addr: str | None, rest: str) -> Frame:
    """A native frame from a gdb backtrace line (the part after ``#N``)."""
    func, _args, src, sline, lib = split_args(rest)
    if func in ("??", "") and addr:
        func = addr                                 # unresolved: named by its address, as py-spy does
    if lib is not None:
        return Frame(func or "??", lib, None, True, os.path.basename(lib))
    return Frame(func or "??", src, sline, True, None)


def is_frame_body(text: str) -> bool:
    """A gdb frame without its ``#N`` (the selected thread's frame 0 echoed on attach)."""
    m = re.match(r"^(?:0x[0-9a-fA-F]+ in )?(?P<rest>\S.*)$", text)
    if not m:
        return False
    func, args, _src, _sline, _lib = split_args(m.group("rest"))
    return args is not None and bool(func) and " " not in func.split("(")[0].strip()


def parse_gdb(lines: list[str], first_line: int = 1) -> Dump:
    """Parse gdb ``thread apply all bt`` / ``py-bt`` output; ``first_line`` numbers ``lines[0]``."""
    reader = _Reader(first_line)
    for i, raw in enumerate(lines):
        if reader.feed(i, raw.rstrip("\r\n")):
            reader.consumed.add(i)
        else:
            reader.unmatched.append(i)
    for p in reader.processes:
        p.pid = reader.pid
    for t in reader.unnamed:               # the selected thread: thread 1 after attach, whose LWP is the pid
        t.thread_id = str(reader.pid) if reader.pid is not None else "selected"
    threads = [t for p in reader.processes for t in p.threads]
    fmt = "gdb_pybt" if threads and all(t.format == "gdb_pybt" for t in threads) else "gdb"
    return Dump(reader.processes, reader.consumed, reader.unmatched, format=fmt)


class _Reader:
    """Line-by-line state of a gdb parse: the current process and thread, inside a py-bt or not."""

    def __init__(self, first_line: int) -> None:
        self.first_line = first_line
        self.processes: list[Process] = []
        self.consumed: set[int] = set()
        self.unmatched: list[int] = []
        self.proc: Process | None = None
        self.thread: Thread | None = None
        self.pid: int | None = None
        self.pybt = False                  # inside a Traceback block
        self.last_py_frame = False         # the previous line was a py-bt File line (its source may follow)
        self.seen_stack = False            # the preamble ends at the first thread header, frame or traceback
        self.unnamed: list[Thread] = []    # bt / py-bt of the selected thread, printed without a header

    def new_process(self, lno: int) -> Process:
        self.proc = Process(pid=None, title="", line=lno)
        self.processes.append(self.proc)
        return self.proc

    def selected_thread(self, lno: int, fmt: str) -> Thread:
        proc = self.proc if self.proc is not None and not self.proc.threads else self.new_process(lno)
        t = Thread("", None, None, lno, format=fmt)
        proc.threads.append(t)
        self.unnamed.append(t)
        return t

    def feed(self, i: int, text: str) -> bool:
        """Take one line; True when it belongs to the dump grammar."""
        lno = self.first_line + i
        if not text.strip():
            self.last_py_frame = False
            return True
        if (m := THREAD_RE.match(text)):
            self.thread_header(m, lno)
            return True
        if (m := FRAME_RE.match(text)):
            if self.thread is None or self.pybt or self.thread.format == "gdb_pybt":
                self.thread = self.selected_thread(lno, "gdb")
            self.pybt = False
            self.thread.frames.append(gdb_frame(m.group("addr"), m.group("rest")))
            self.seen_stack = True
            return True
        if TRACEBACK_RE.match(text):
            t = self.thread
            if t is not None and t not in self.unnamed and not t.frames and t.format == "gdb":
                t.format = "gdb_pybt"              # 'thread apply all py-bt': the header came first
            else:
                self.thread = self.selected_thread(lno, "gdb_pybt")
            self.pybt = self.seen_stack = True
            return True
        if self.pybt and self.thread is not None and self.py_line(text):
            return True
        self.last_py_frame = False
        return self.other(text)

    def thread_header(self, m: re.Match[str], lno: int) -> None:
        lwp = m.group("lwp") or m.group("lwp2") or m.group("proc")
        tid = lwp or m.group("ptid") or m.group("ptid2")
        proc = self.proc
        if proc is None or any(t.thread_id == tid or t in self.unnamed for t in proc.threads):
            proc = self.new_process(lno)
        self.thread = Thread(tid, None, m.group("comm"), lno, format="gdb")
        proc.threads.append(self.thread)
        if m.group("n") == "1" and lwp and self.pid is None:
            self.pid = int(lwp)
        self.pybt = self.last_py_frame = False
        self.seen_stack = True

    def py_line(self, text: str) -> bool:
        """A line inside a py-bt traceback: a File line, its source, a builtin or an optimized-out frame."""
        assert self.thread is not None
        if (m := PY_FRAME_RE.match(text)):
            self.thread.frames.append(Frame(m.group("name"), m.group("file"), int(m.group("line")), False))
            self.last_py_frame = True
            return True
        if self.last_py_frame and PY_SOURCE_RE.match(text):
            self.last_py_frame = False
            return True
        if (m := PY_BUILTIN_RE.match(text)):
            self.thread.frames.append(Frame(m.group("name"), None, None, True))
            self.last_py_frame = False
            return True
        if PY_OPTIMIZED_RE.match(text):
            self.thread.frames.append(Frame("<optimized out>", None, None, False))
            self.last_py_frame = False
            return True
        return bool(PY_NOTE_RE.match(text))

    def other(self, text: str) -> bool:
        """Lines around the stacks: 'bt full' locals, the inferior / attach lines, gdb's noise."""
        if self.thread is not None and self.thread.frames and not self.pybt \
                and (text.startswith("        ") or BT_FULL_RE.match(text)):
            return True                     # 'bt full': a frame's locals (and their continuation lines)
        if (m := INFERIOR_RE.match(text) or ATTACH_RE.match(text)):
            self.pid = int(m.group(1))
            self.pybt = False
            return True
        if any(r.match(text) for r in NOISE_RES):
            return True
        # frame 0 of the selected thread, echoed on attach
        return not self.seen_stack and is_frame_body(text)
