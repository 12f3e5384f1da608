"""Python faulthandler dumps (``faulthandler.enable()``, ``dump_traceback[_later]``, ``register``).

Shape (CPython 3.8 to 3.14)::

    Fatal Python error: Segmentation fault        # or 'Timeout (0:05:00)!' for dump_traceback_later
    <empty line>
    Thread 0x00007f2e4a7fc700 (most recent call first):
      File "/usr/lib/python3.10/threading.py", line 324 in wait
      <no Python frame>                           # a thread with no Python frame
    <empty line>
    Current thread 0x00007f2e5f2d1740 (most recent call first):
      File "/srv/app.py", line 12 in main
    <empty line>
    Extension modules: numpy.core._multiarray_umath, ... (total: 12)

``Stack (most recent call first):`` heads a dump of the current thread only; 3.14 adds a
``Current thread's C stack trace`` block of ``Binary file "...", at sym+0x.. [0x..]`` lines.

faulthandler writes with many small ``write()`` calls and no lock, so when several threads or
processes dump into one stream at once their text interleaves *mid-line*.  This parser keeps a
frame only when its whole line parses and the line follows its own thread header with no foreign
line in between.  A broken line (fragments of two dumps, a header fused onto a frame) is never
split into guesses: it goes to ``unmatched``, every thread of the file is marked ``garbled``, and
the frames after it are attributed to no thread (they go to ``unmatched`` too) until the next
intact thread header.  A foreign line without dump text (``tch``, the rest of another writer's
line, or program output) also ends the attribution; the file counts as garbled once a frame is
left without a thread that way.  A header that appears complete at the end of a broken line does open its
thread (faulthandler writes a header's tail and its newline in one ``write()``), and a
``Fatal Python error:`` inside a broken line starts the next process's dump.

"Certain" cannot mean more than this: two writers whose output happens to interleave at line
boundaries leave no trace in the text.  ``garbled`` tells the reader that the dump had more
than one writer at once, so its thread attribution is best effort.
"""

from __future__ import annotations

import re

from .pyspy import Dump, Frame, Process, Thread

HEADER = r"(?P<cur>Current thread|Thread) (?P<tid>0x[0-9a-fA-F]+)(?: \[(?P<name>[^\]]*)\])? \(most recent call first\):"
HEADER_RE = re.compile(rf"^{HEADER}$")
HEADER_TAIL_RE = re.compile(rf"{HEADER}$")             # a header completing a broken line
STACK_RE = re.compile(r"^Stack \(most recent call first\):$")
C_STACK_RE = re.compile(r"^Current thread's C stack trace \(most recent call first\):$")
FATAL_RE = re.compile(r"^Fatal Python error: (?P<msg>.*)$")
FATAL_ANY_RE = re.compile(r"Fatal Python error: ")
TIMEOUT_RE = re.compile(r"^Timeout \((?P<t>\d+:\d\d:\d\d(?:\.\d+)?)\)!$")
FRAME_RE = re.compile(r'^  File "(?P<file>[^"]*)", line (?P<line>\d+|\?\?\?) in (?P<name>[\w.<>$-]+)$')
BINARY_RE = re.compile(r'^  Binary file "(?P<lib>[^"]*)"(?:, at (?P<sym>\S+?)(?:\+0x[0-9a-fA-F]+)?)? '
                       r'\[(?P<addr>0x[0-9a-fA-F]+)\]$')
NOTE_RES = [re.compile(p) for p in (
    r"^  <no Python frame>$",
    r"^  \.\.\.$",                                  # more than 100 frames: the rest is cut
    r"^  <truncated rest of calls>$",
    r"^  Garbage-collecting$",
    r"^\.\.\.$",                                    # more than 100 threads
    r"^<Cannot show all threads while the GIL is disabled>$",
    r"^  <tstate is freed>$",
    r"^Python runtime state: .*$",
    r"^Extension modules: .*$",
    r"^Current thread's C stack trace \(most recent call first\):$",
    r"^  <cannot get C stack on this system>$",
)]
START_RES = [FATAL_RE, TIMEOUT_RE, HEADER_RE, STACK_RE]


def looks_like_faulthandler(head: list[str], strong_only: bool = False) -> bool:
    """A faulthandler dump: its first line is one of its headers, or (weaker) such headers with frames."""
    first = [s for s in head if s.strip()][:1]
    if first and any(r.match(first[0]) for r in START_RES):
        return True
    if strong_only:
        return False
    body = [s for s in head if s.strip()]
    headers = sum(1 for s in body if HEADER_RE.match(s) or STACK_RE.match(s))
    frames = sum(1 for s in body if FRAME_RE.match(s))
    return headers >= 1 and frames >= 1 and headers + frames >= 0.2 * len(body)


def _norm_tid(tid: str) -> str:
    return hex(int(tid, 16))                        # '0x00007f2e5f2d1740' -> '0x7f2e5f2d1740' (gdb, py-spy json)


def parse_faulthandler(lines: list[str], first_line: int = 1) -> Dump:
    """Parse faulthandler output; ``first_line`` is the file line number of ``lines[0]``."""
    reader = _Reader(first_line)
    for i, raw in enumerate(lines):
        reader.feed(i, raw.rstrip("\r\n"))
    if reader.garbled:
        for p in reader.processes:
            for t in p.threads:
                t.garbled = True
    return Dump(reader.processes, reader.consumed, reader.unmatched, format="faulthandler")


class _Reader:
    """Line-by-line state of a faulthandler parse: which thread a frame certainly belongs to."""

    def __init__(self, first_line: int) -> None:
        self.first_line = first_line
        self.processes: list[Process] = []
        self.consumed: set[int] = set()
        self.unmatched: list[int] = []
        self.proc: Process | None = None
        self.thread: Thread | None = None       # the thread that certain frames are attributed to
        self.in_dump = False                    # between a dump's first header and its end
        self.garbled = False
        self.c_stack_of: Thread | None = None   # 3.14: the C stack block of the current thread

    def start_process(self, lno: int, title: str = "") -> None:
        self.proc = Process(pid=None, title=title, line=lno)
        self.processes.append(self.proc)

    def open_thread(self, tid: str, current: bool, name: str | None, lno: int) -> None:
        if self.proc is None or any(t.thread_id == tid for t in self.proc.threads):
            self.start_process(lno)              # a repeated thread id: the next dump of the same process
        assert self.proc is not None
        self.thread = Thread(tid, "current" if current else None, name, lno, format="faulthandler")
        self.proc.threads.append(self.thread)
        self.in_dump = True

    def feed(self, i: int, text: str) -> None:
        lno = self.first_line + i
        if not text.strip():
            self.consumed.add(i)
            self.c_stack_of = None
        elif (m := FRAME_RE.match(text)):
            self.frame(i, m)
        elif (m := BINARY_RE.match(text)) and self.c_stack_of is not None:
            lib = m.group("lib")
            self.c_stack_of.frames.append(Frame(m.group("sym") or m.group("addr"), lib, None, True,
                                                lib.rsplit("/", 1)[-1]))
            self.consumed.add(i)
        elif (m := HEADER_RE.match(text)):
            self.open_thread(_norm_tid(m.group("tid")), m.group("cur") == "Current thread", m.group("name"), lno)
            self.consumed.add(i)
        elif STACK_RE.match(text):
            self.open_thread("current", True, None, lno)
            self.consumed.add(i)
        elif FATAL_RE.match(text) or TIMEOUT_RE.match(text):
            self.start_process(lno, text)
            self.thread = None
            self.in_dump = True
            self.consumed.add(i)
        elif C_STACK_RE.match(text):
            self.c_stack(lno)
            self.consumed.add(i)
        elif any(r.match(text) for r in NOTE_RES):
            self.consumed.add(i)
            if text.startswith("Extension modules:"):
                self.in_dump = False                # the last line of a fatal-error dump
                self.thread = None
        else:
            self.unmatched.append(i)
            self.broken(lno, text)

    def frame(self, i: int, m: re.Match[str]) -> None:
        if self.thread is None:
            self.unmatched.append(i)                # a frame whose thread is not certain
            self.garbled = self.garbled or self.in_dump
            return
        ln = m.group("line")
        self.thread.frames.append(Frame(m.group("name"), m.group("file"), int(ln) if ln.isdigit() else None, False))
        self.consumed.add(i)

    def c_stack(self, lno: int) -> None:
        cur = next((t for t in reversed(self.proc.threads) if t.state == "current"), None) if self.proc else None
        if cur is not None and self.proc is not None:
            # its own stack row: a C stack cannot be interleaved with the Python frames' order
            self.c_stack_of = Thread(f"{cur.thread_id}:c", "current", "C stack", lno, format="faulthandler")
            self.proc.threads.append(self.c_stack_of)
        self.thread = None

    def broken(self, lno: int, text: str) -> None:
        """A line outside the grammar: a foreign line, or fragments of dumps written at the same time."""
        if not ('File "' in text or "(most recent call first)" in text or FATAL_ANY_RE.search(text)):
            # A foreign line (another writer's fragment, or program output): the frames after it are
            # no longer certainly this thread's.  The dump counts as garbled once such a frame shows up.
            if self.in_dump:
                self.thread = None
            return
        self.garbled = True
        self.thread = None
        m = FATAL_ANY_RE.search(text)
        if m:
            self.start_process(lno, text[m.start():])       # another process's dump starts mid-line
            self.in_dump = True
        m = HEADER_TAIL_RE.search(text)
        if m:
            # the header itself is intact (it ends the line), so its thread is certain
            self.open_thread(_norm_tid(m.group("tid")), m.group("cur") == "Current thread", m.group("name"), lno)
