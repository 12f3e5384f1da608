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
processes dump into one stream at once their text interleaves.  Read line by line (the default), this
parser keeps a frame only when its whole line parses and the line follows its own thread header with
no foreign line in between.  A broken line (fragments of two dumps, a header fused onto a frame) is never
split into guesses: it goes to ``unmatched``, every thread of the file is marked ``garbled``, and
the frames after it are attributed to no thread (they go to ``unmatched`` too) until the next
intact thread header.  A foreign line without dump text (``tch``, the rest of another writer's
line, or program output) also ends the attribution; the file counts as garbled once a frame is
left without a thread that way.  A header that appears complete at the end of a broken line does open its
thread (faulthandler writes a header's tail and its newline in one ``write()``), and a
``Fatal Python error:`` inside a broken line starts the next process's dump.

Several writers can also interleave *character by character* (processes crashing at once into one
stderr, each write() a few bytes): fragments of two lines share a line, a header's literal is broken
(``Current thread 0x00007e8c... (most recent cetall first):``), a whole line of one writer can sit
between two lines of another.  A dump showing such fragments anywhere is read strictly, from its
first line: one process is one writer, and a second writer's frames can only follow its preamble and
header, whose newlines leave a sign in the text (a broken line, a blank line inside a thread's
frames, two blank lines, a header with no blank line before it, a second ``Fatal Python error``, a
frame line holding another line's markers).  Frames are attributed only from a dump's start up to the
first such sign (and not at all when the text starts mid-dump: an earlier writer may be going on);
the line just before a sign that starts mid-token is dropped too (its end may be the other writer's).
After the sign, threads are still recorded (an intact header with a full-width id: faulthandler prints
8 or 16 hex digits, a mixed id is longer or shorter; or an intact id before a broken literal), but no
frame is attributed to them.  Before the sign another writer's first characters can only be its
preamble's, so a frame kept may carry a stray character but never belongs to another thread.  In any
dump, a frame after its thread's outermost frame (``_bootstrap`` of threading, ``<module>`` of
``<string>``, ``_run_module_as_main``) with no header between belongs to another writer, and a second
``Current thread`` starts another process's dump (a process has one).

Fragments of another kind: a last line cut mid-token (a paste's end) is kept in ``unmatched`` without
making the dump garbled (its thread is marked ``cut``); frames before any header (a later part of a
dump) go to an unknown thread ``'?'`` marked ``continuation``.

"Certain" cannot mean more than this: two writers whose output happens to interleave at line
boundaries leave no trace in the text, and a frame name cut exactly at another writer's newline reads
as a shorter name.  ``garbled`` tells the reader that the dump had more than one writer at once, so
its thread attribution is best effort.
"""

from __future__ import annotations

import re

from .pyspy import CONTINUATION_TID, Dump, Frame, Process, Thread

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
    if headers >= 1 and frames >= 1 and headers + frames >= 0.2 * len(body):
        return True
    # Character-level interleaving can leave no header intact; its fragments still say what it is (a
    # Python traceback has 'File "' lines too, but under a 'Traceback' header and never these anchors).
    if any(s.startswith("Traceback") for s in body):
        return False
    anchored = any(FATAL_ANY_RE.search(s) or "(most recent call first)" in s or GARBLED_HEADER_RE.match(s)
                   for s in body)
    pieces = sum(1 for s in body if s.startswith('  File "') or _markers(s))
    return anchored and pieces >= 0.6 * len(body)


def _norm_tid(tid: str) -> str:
    return hex(int(tid, 16))                        # '0x00007f2e5f2d1740' -> '0x7f2e5f2d1740' (gdb, py-spy json)


# faulthandler prints a thread id as 0x and sizeof(unsigned long) * 2 hex digits
TID_DIGITS = (8, 16)
GARBLED_HEADER_RE = re.compile(r"^(?P<cur>Current thread|Thread) (?P<tid>0x[0-9a-fA-F]+) \(")
# (file basename, function) of a thread's outermost frame: nothing of that thread comes after it
TERMINAL = {("threading.py", "_bootstrap"), ("<string>", "<module>"), ("runpy.py", "_run_module_as_main")}
NAME_OK_RE = re.compile(r"^(?:<\w+>|[A-Za-z_]\w*)(?:\.(?:<\w+>|[A-Za-z_]\w*))*$")
FILE_OK_RE = re.compile(r"(?:\.py[wx]?|>)$")
MARKERS = ('File "', "most recent", "Fatal Python error", "Thread 0x", "thread 0x")
# Lines after which faulthandler prints a thread header with no blank line first
HEADER_AFTER_RE = re.compile(r"^(?:Timeout \(|Python runtime state: |Fatal Python error: )")
STARTS = ('  File "', "Thread 0x", "Current thread 0x", "Fatal Python error", "Stack (", '  Binary file "',
          "Timeout (", "Extension modules", "Python runtime state", "  <")


def _tid_ok(tid: str) -> bool:
    return len(tid) - 2 in TID_DIGITS


def _markers(text: str) -> int:
    return sum(text.count(m) for m in MARKERS)


def _frame_prefix(text: str) -> bool:
    """``text`` is the start of a frame line '  File "<path>", line <n> in <name>'."""
    rest = text
    for lit, body in (('  File "', r'[^"]*'), ('", line ', r"\d*|\?{0,3}"), (" in ", r"[\w.<>$-]*")):
        if len(rest) <= len(lit):
            return lit.startswith(rest)
        if not rest.startswith(lit):
            return False
        m = re.match(body, rest[len(lit):])
        assert m is not None
        rest = rest[len(lit) + m.end():]
        if not rest:
            return True
    return False


def _header_prefix(text: str) -> bool:
    """``text`` is the start of a thread header 'Thread 0x<id> [<name>] (most recent call first):'."""
    m = re.match(r"(?:Current thread|Thread) 0x[0-9a-fA-F]*", text)
    if m is None:
        return any(h.startswith(text) for h in ("Current thread 0x", "Thread 0x"))
    rest = re.sub(r"^ \[[^\]]*\]", "", text[m.end():])
    return " (most recent call first):".startswith(rest) or (rest.startswith(" [") and "]" not in rest)


def _cut_like(text: str) -> bool:
    """One grammar line that ends early (a paste cut mid-token), not fragments of two lines."""
    return _frame_prefix(text) or _header_prefix(text) or any(
        lit.startswith(text) for lit in ("Fatal Python error: ", "Timeout (", "Stack (most recent call first):",
                                         "  <no Python frame>", '  Binary file "'))


def parse_faulthandler(lines: list[str], first_line: int = 1) -> Dump:
    """Parse faulthandler output; ``first_line`` is the file line number of ``lines[0]``."""
    texts = [raw.rstrip("\r\n") for raw in lines]
    reader = _read(texts, first_line, strict=False)
    if reader.char_level:
        reader = _read(texts, first_line, strict=True)      # several writers at once: strict from line one
    if reader.garbled:
        for p in reader.processes:
            for t in p.threads:
                t.garbled = True
    return Dump(reader.processes, reader.consumed, reader.unmatched, format="faulthandler")


def _read(texts: list[str], first_line: int, strict: bool) -> _Reader:
    reader = _Reader(first_line, strict)
    for i, text in enumerate(texts):
        reader.feed(i, text)
    reader.finish()
    return reader


class _Reader:
    """Line-by-line state of a faulthandler parse: which thread a frame certainly belongs to.

    ``strict``: the text shows several writers at once; frames are attributed only before the first
    sign of a second writer (see the module's docstring)."""

    def __init__(self, first_line: int, strict: bool = False) -> None:
        self.first_line = first_line
        self.processes: list[Process] = []
        self.consumed: set[int] = set()
        self.unmatched: list[int] = []
        self.proc: Process | None = None
        self.thread: Thread | None = None       # the thread that certain frames are attributed to
        self.in_dump = False                    # between a dump's first header and its end
        self.garbled = False
        self.char_level = strict                # a line holds fragments of several lines
        self.stopped = False                    # strict: a second writer showed; nothing is attributed now
        self.done = False                       # the thread's outermost frame was seen
        self.c_stack_of: Thread | None = None   # 3.14: the C stack block of the current thread
        self.last = -1                          # offset of the last non-blank line
        self.blanks = 0                         # blank lines just before this one
        self.prev = ""                          # the last non-blank line
        self.last_frame: tuple[int, Thread] | None = None
        self.cut: tuple[int, Thread | None, bool, bool] | None = None   # a cut-like broken line, and the state before it

    def start_process(self, lno: int, title: str = "") -> None:
        self.proc = Process(pid=None, title=title, line=lno)
        self.processes.append(self.proc)

    def open_thread(self, tid: str, current: bool, name: str | None, lno: int) -> None:
        proc = self.proc
        if proc is None or any(t.thread_id == tid for t in proc.threads) or (
                current and any(t.state == "current" for t in proc.threads)):
            # a repeated thread id: the next dump of the same process; a second current thread: another process
            self.start_process(lno)
        assert self.proc is not None
        self.thread = Thread(tid, "current" if current else None, name, lno, format="faulthandler", line_end=lno)
        self.proc.threads.append(self.thread)
        self.in_dump = True
        self.done = False
        if self.stopped:
            self.thread = None                  # recorded; what follows may be another writer's

    def sign(self, i: int, text: str) -> None:
        """Strict reading: a second writer showed on line ``i``; nothing is attributed from here on."""
        if not self.char_level or self.stopped:
            return
        self.stopped = True
        self.thread = None
        lf = self.last_frame
        if lf is not None and lf[0] == self.last_before(i) and not any(text.startswith(s) for s in STARTS):
            # the line starts mid-token: its head may have ended the previous line (another writer's newline)
            lf[1].frames.pop()
            self.consumed.discard(lf[0])
            self.unmatched.append(lf[0])

    def last_before(self, i: int) -> int:
        return self.last if self.last < i else -1

    def feed(self, i: int, text: str) -> None:
        lno = self.first_line + i
        if not text.strip():
            self.consumed.add(i)
            self.c_stack_of = None
            self.blanks += 1
            return
        if self.char_level:
            self.strict_checks(i, text)
        self.dispatch(i, lno, text)
        self.last, self.prev, self.blanks = i, text, 0

    def strict_checks(self, i: int, text: str) -> None:
        if self.last < 0 and not any(r.match(text) for r in START_RES):
            self.sign(i, text)                  # the text starts mid-dump: an earlier writer may be going on
        elif self.blanks >= 2 or (self.blanks and FRAME_RE.match(text)):
            self.sign(i, text)                  # another writer's newline
        elif HEADER_RE.match(text) and self.last >= 0 and not self.blanks and not HEADER_AFTER_RE.match(self.prev):
            self.sign(i, text)                  # faulthandler prints a blank line before every other header
        elif (FATAL_RE.match(text) or TIMEOUT_RE.match(text)) and self.processes:
            self.sign(i, text)                  # a second dump starts while one is being written
        elif FRAME_RE.match(text) and _markers(text) > 1:
            self.sign(i, text)

    def dispatch(self, i: int, lno: int, text: str) -> None:
        if (m := FRAME_RE.match(text)) and not (self.char_level and not self.plausible(m)):
            self.frame(i, m)
        elif (m := BINARY_RE.match(text)) and self.c_stack_of is not None:
            lib = m.group("lib")
            self.c_stack_of.frames.append(Frame(m.group("sym") or m.group("addr"), lib, None, True,
                                                lib.rsplit("/", 1)[-1], at=lno))
            self.consumed.add(i)
        elif (m := HEADER_RE.match(text)) and (not self.char_level or _tid_ok(m.group("tid"))):
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
            self.sign(i, text)
            self.broken(i, lno, text)

    @staticmethod
    def plausible(m: re.Match[str]) -> bool:
        return bool(NAME_OK_RE.match(m.group("name")) and FILE_OK_RE.search(m.group("file")))

    def frame(self, i: int, m: re.Match[str]) -> None:
        lno = self.first_line + i
        if self.thread is not None and self.done:
            self.sign(i, m.group(0))
            self.thread = None                      # past its outermost frame: another writer's line
            self.garbled = True
        if self.thread is None and not self.processes and not self.char_level:
            # frames before anything else: a later part of a dump, its thread's header in an earlier part
            self.start_process(lno)
            self.open_thread(CONTINUATION_TID, False, None, lno)
            assert self.thread is not None
            self.thread.fragment = "continuation"
        if self.thread is None:
            self.unmatched.append(i)                # a frame whose thread is not certain
            self.garbled = self.garbled or self.in_dump
            return
        ln, file, name = m.group("line"), m.group("file"), m.group("name")
        self.thread.frames.append(Frame(name, file, int(ln) if ln.isdigit() else None, False, at=lno))
        self.thread.line_end = lno
        self.last_frame = (i, self.thread)
        self.done = (file.rsplit("/", 1)[-1], name) in TERMINAL
        self.consumed.add(i)

    def c_stack(self, lno: int) -> None:
        cur = next((t for t in reversed(self.proc.threads) if t.state == "current"), None) if self.proc else None
        if cur is not None and self.proc is not None:
            # its own stack row: a C stack cannot be interleaved with the Python frames' order
            self.c_stack_of = Thread(f"{cur.thread_id}:c", "current", "C stack", lno, format="faulthandler")
            self.proc.threads.append(self.c_stack_of)
        self.thread = None

    def broken(self, i: int, lno: int, text: str) -> None:
        """A line outside the grammar: a foreign line, or fragments of dumps written at the same time."""
        if not _markers(text):
            # A foreign line (another writer's fragment, or program output): the frames after it are
            # no longer certainly this thread's.  The dump counts as garbled once such a frame shows up.
            if self.in_dump:
                self.thread = None
            return
        if _cut_like(text):
            self.cut = (i, self.thread, self.garbled, self.char_level)     # undone if it is the last line
        self.garbled = self.char_level = True
        self.thread = None
        m = FATAL_ANY_RE.search(text)
        if m:
            self.start_process(lno, text[m.start():])       # another process's dump starts mid-line
            self.in_dump = True
        m = HEADER_TAIL_RE.search(text)
        g = GARBLED_HEADER_RE.match(text)
        if m and _tid_ok(m.group("tid")):
            # the header itself is intact (it ends the line): its thread is certain, and in a dump read
            # line by line the frames after it are attributed to it
            self.open_thread(_norm_tid(m.group("tid")), m.group("cur") == "Current thread", m.group("name"), lno)
        elif g and _tid_ok(g.group("tid")):
            # its id is intact, its literal broken by another writer: the thread existed, nothing after it is certain
            self.open_thread(_norm_tid(g.group("tid")), g.group("cur") == "Current thread", None, lno)
            self.thread = None
        else:
            return
        if self.unmatched and self.unmatched[-1] == i:
            # the line gave its thread a row: it is read, not kept in unparsed as well
            self.unmatched.pop()
            self.consumed.add(i)

    def finish(self) -> None:
        """A cut-like last line is a paste's end, not a second writer: the dump is as garbled as before it."""
        if self.cut is None or self.cut[0] != self.last:
            return
        i, thread, self.garbled, self.char_level = self.cut
        lno = self.first_line + i
        if any(t.line == lno for p in self.processes for t in p.threads):
            # a header cut after its id: no row on a line kept in unparsed (a part ending here leaves no
            # thread open)
            for p in self.processes:
                p.threads = [t for t in p.threads if t.line != lno]
            self.processes = [p for p in self.processes if p.threads or p.line != lno]
            if i not in self.unmatched:
                self.consumed.discard(i)
                self.unmatched.append(i)
        elif thread is not None:
            thread.fragment = thread.fragment or "cut"
            thread.line_end = lno
