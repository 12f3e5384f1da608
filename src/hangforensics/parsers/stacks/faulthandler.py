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

Most often the writers interleave in whole ``write()`` calls (every rank of a torch.distributed job
registered with ``faulthandler.register(SIGUSR1, file=shared, all_threads=True)`` and signalled at
once; a write() to a file or a pipe is atomic): ``Current thread 0xCurrent thread 0x00007f8d..b80
00007fbc..b80 (most recent call first):``, ``  File   File ""/srv/a.py"/srv/a.py", line 3252, line  in
3252all_reduce in``.  Such text (it starts with a dump's first piece, every literal is whole and as
many ``, line `` and `` in `` as ``  File `` are written: no piece was split) is read by its pieces
(``_Pieces``, below): a thread is kept with its frames where no other writer can be in the middle of a
line (counted over the whole text), and it is *whole* (not ``garbled``) when its header, its frames
and their end are intact lines; a thread whose header is intact but whose frames run into mixed lines
keeps the frames before them (``garbled``); of a thread whose header is mixed with other writers'
pieces only its id is kept (each id is one write of 8 or 16 hex digits), and its frames stay in
``unmatched``.  ``Dump.notes`` says how many threads the text holds (the number of header literals,
whatever their ids) and how many of them were kept whole.  faulthandler prints no pid and no rank, so
which process a kept thread was is known only where its dump was written alone.

Fragments of another kind: a last line cut mid-token (a paste's end) is kept in ``unmatched`` without
making the dump garbled (its thread is marked ``cut``); frames before any header (a later part of a
dump) go to an unknown thread ``'?'`` marked ``continuation``.

"Certain" cannot mean more than this: two writers whose output happens to interleave at line
boundaries leave no trace in the text, and a frame name cut exactly at another writer's newline reads
as a shorter name.  ``garbled`` tells the reader that the dump had more than one writer at once, so
its thread attribution is best effort.
"""

from __future__ import annotations

import itertools
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
    body = [s for s in head if s.strip()]
    # Several processes' dumps written at once, interleaved in whole write()s: the first line is headers'
    # pieces ('Current thread 0xCurrent thread 0x00007f8d..'), and most lines hold some of the grammar's
    if first and FIRST_PIECES_RE.match(first[0]) and sum(1 for s in body if SOME_PIECES_RE.search(s)) >= 0.6 * len(body):
        return True
    if strong_only:
        return False
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
    pieces = sum(1 for s in body if s.startswith('  File "') or _markers(s) or SOME_PIECES_RE.search(s))
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
    if reader.char_level or _pieces_outside(reader, texts):
        pieces = _Pieces(texts, first_line)
        if pieces.applies():                    # several writers, interleaved in whole write()s
            pieces.run()
            return Dump(pieces.processes, pieces.consumed, pieces.unmatched, format="faulthandler",
                        notes=pieces.notes)
        reader = _read(texts, first_line, strict=True)      # several writers at once: strict from line one
    if reader.garbled:
        for p in reader.processes:
            for t in p.threads:
                t.garbled = True
    return Dump(reader.processes, reader.consumed, reader.unmatched, format="faulthandler")


def _pieces_outside(reader: _Reader, texts: list[str]) -> bool:
    """A line has the first piece of a frame or header in its middle (even one that reads as a frame: the
    file name of '  File "/srv/job.py  File ", line 75 in f'): another writer's line began before this one
    ended (a last line cut mid-token aside)."""
    cut = reader.cut[0] if reader.cut is not None and reader.cut[0] == reader.last else -1
    return any(LINE_START_RE.search(text, 1) for i, text in enumerate(texts) if i != cut)


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


# -- several processes at once, interleaved at write() boundaries -------------------------------------
#
# faulthandler writes each line in several write() calls (CPython Python/traceback.c): a header is
# 'Current thread 0x' | 'Thread 0x', the id (one write of 2 * sizeof(long) hex digits), then
# ' (most recent call first):\n' (write_thread_id); a frame is '  File ', '"', the file name, '"', ', line ',
# the number, ' in ', the function's name, '\n' (dump_frame; a string of printable ASCII is one write); a
# note ('  <no Python frame>\n', '  ...\n') is one write; the threads of a process are separated by a lone
# '\n' (_Py_DumpTracebackThreads).  Processes writing one file at once interleave these pieces without
# splitting one, so where every '  File ' so far has been followed by its function's name and every header
# literal by its tail, no writer is in the middle of a line's content: a line that starts there and reads
# as one whole grammar line holds one writer's pieces only (another writer's piece in it would continue a
# line begun earlier).  The literals are counted as they are; the names in mixed lines by reading their
# free text ('3252all_reduce', 'waitwait', '/srv/job.pyget') as the names and file names of the file's
# intact frames, line numbers and ids (``_Splitter``), and that reading is checked against the whole text.
# What stays uncertain (a name glued to one the file never shows whole) leaves the rest of the text
# unsettled, so fewer threads are kept, never a frame glued from two writers' pieces.

FRAME_LITERALS = ("  File ", ", line ", " in ")
HEADER_LITERALS = ("Current thread 0x", "Thread 0x")
TAIL = " (most recent call first):"
FIRST_PIECES_RE = re.compile(r"^(?:Current thread 0x|Thread 0x)(?:[0-9a-f]{8,16})?(?:Current thread 0x|Thread 0x|  File )")
# A line that holds some of a frame's or a header's pieces
SOME_PIECES_RE = re.compile(r"  File |, line |Current thread 0x|Thread 0x| \(most recent call first\):")
LINE_START_RE = re.compile(r"  File |Current thread 0x|Thread 0x")
PIECES_RE = re.compile(r"  File |, line | in |Current thread 0x|Thread 0x| \(most recent call first\):")
# Literals whose fragments (a piece split in two) mean the text was not written in whole pieces
SPLITTABLE = ("  File ", ", line ", " in ", "Current thread 0x", "Thread 0x", TAIL)
# Parts of the grammar the piece reading does not model: in a broken line they send the text to the strict reading
PIECE_BLOCKERS = ("Fatal", "Extension", "runtime state", "Binary file", "C stack", "Stack (", "Timeout (",
                  "Traceback", "most recent call last")
EPILOGUE_RE = re.compile(r"^(?:Extension modules|Python runtime state): ")
# A function name as faulthandler prints it (co_name: an identifier, or one of the compiler's own names)
PIECE_NAME = r"(?:<(?:module|lambda|listcomp|dictcomp|setcomp|genexpr)>|[A-Za-z_][A-Za-z0-9_]*)"
PIECE_NAME_RE = re.compile(rf"^{PIECE_NAME}$")
HEX_NAME_RE = re.compile(r"^(?:[0-9a-f]{8}|[0-9a-f]{16})$")       # could be an id's digits, not a name
FRAME_NOTES = ("  <no Python frame>", "  ...", "  <truncated rest of calls>", "  Garbage-collecting",
               "  <tstate is freed>")
START_LITERALS = (*HEADER_LITERALS, "Fatal Python error: ", "Timeout (", "Stack (most recent call first):")


def _tails(text: str) -> int:
    return text.count(TAIL) - (1 if STACK_RE.match(text) else 0)


def _headers(text: str) -> int:
    return sum(text.count(h) for h in HEADER_LITERALS)


class _Pieces:
    """Piece-level reading of faulthandler output several processes wrote at once."""

    def __init__(self, texts: list[str], first_line: int) -> None:
        self.texts = texts
        self.first_line = first_line
        self.processes: list[Process] = []
        self.consumed: set[int] = set()
        self.unmatched: list[int] = []
        self.notes: list[str] = []
        # an id's digits: 2 * sizeof(long), as the intact headers show (16 on a 64-bit system)
        self.width = next((len(m.group("tid")) - 2 for t in texts if (m := HEADER_RE.match(t))
                           and len(m.group("tid")) - 2 in TID_DIGITS), 16)
        self.clean = [self.is_clean(t) for t in texts]
        frames = [m for t, ok in zip(texts, self.clean, strict=True) if ok and (m := FRAME_RE.match(t))]
        self.split = _Splitter({m.group("name") for m in frames}, {m.group("file") for m in frames}, self.width)

    # -- which text this reading applies to -----------------------------------------------------------

    def is_clean(self, text: str) -> bool:
        """One whole grammar line (as far as its text shows)."""
        if not text.strip():
            return True
        if m := HEADER_RE.match(text):
            return len(m.group("tid")) - 2 in TID_DIGITS
        if m := FRAME_RE.match(text):
            name = m.group("name")
            file = m.group("file")
            # no other writer's literal in it; a file name as faulthandler prints it (not glued to a name)
            return bool(PIECE_NAME_RE.match(name) and not HEX_NAME_RE.match(name) and FILE_OK_RE.search(file)
                        and _Splitter.PATH_START_RE.match(file) and len(LITERAL_SPLIT_RE.findall(text)) == 5)
        return bool(STACK_RE.match(text) or TIMEOUT_RE.match(text) or FATAL_RE.match(text)
                    or any(r.match(text) for r in NOTE_RES))

    def applies(self) -> bool:
        """The text is whole pieces of faulthandler's grammar, interleaved (not characters of them)."""
        body = [t for t in self.texts if t.strip()]
        if not body or not body[0].startswith(START_LITERALS):
            return False                        # starts mid-dump: another writer may be mid-line already
        broken = [t for t, ok in zip(self.texts, self.clean, strict=True) if not ok]
        if not broken or not any(PIECES_RE.search(t) for t in broken) or max(map(len, broken)) > 16384:
            return False                        # (a line of a few writers' pieces is a few KiB at most)
        if any(b in t for t in broken for b in PIECE_BLOCKERS):
            return False
        files, lines, ins = (sum(t.count(lit) for t in broken) for lit in FRAME_LITERALS)
        if not files == lines == ins or sum(map(_headers, broken)) != sum(map(_tails, broken)):
            return False                        # a piece split (or a text cut mid-line): not whole pieces
        if any(_split_literal(t) for t in broken):
            return False
        # every piece of text between the literals reads as names, file names, numbers and ids (a writer
        # split mid-piece leaves text that does not: '(most re', 'l Python error', '/usr/lib/pyth')
        return all(self.split.names(run) is not None for t in broken for run in _free_runs(t))

    # -- reading --------------------------------------------------------------------------------------

    def settled_points(self) -> list[bool]:
        """settled[i]: where line i starts (i == len: the end), no writer is in the middle of a line's content.

        A writer is mid-line from its '  File ' to its function's name, and from its header literal to the
        header's tail: so where every '  File ' so far has its name and every literal its tail, none is.
        Literals are counted as they are; names are counted in the broken lines by splitting their free
        text into the names and file names of the file's intact frames (and numbers, ids): a name glued to
        another (two writers at the same frame at once: 'waitwait') is two.  That split is checked against
        the whole file, where every frame has its name: if the names found do not add up to the frames, the
        split missed (or invented) one somewhere, and no point after the first broken line is settled."""
        texts, clean, split = self.texts, self.clean, self.split
        out: list[bool] = []
        files = found = heads = tails = 0
        first_broken = len(texts)
        consistent = True
        for i, text in enumerate(texts):
            consistent = consistent and found <= files
            out.append(files == found and heads == tails)
            if not clean[i]:
                first_broken = min(first_broken, i)
                found += sum(split.names(run) or 0 for run in _free_runs(text))
            elif FRAME_RE.match(text):
                found += 1
            elif (FATAL_RE.match(text) or EPILOGUE_RE.match(text)) and not out[-1]:
                first_broken = min(first_broken, i)     # its free text may hold another writer's name
                consistent = False
            files += text.count("  File ")
            heads += _headers(text)
            tails += _tails(text)
        out.append(files == found and heads == tails)
        if not (out[-1] and consistent):        # the names found do not add up: only the text before the first
            out = [i <= first_broken for i in range(len(out))]     # broken line is certain
        return out

    def run(self) -> None:
        texts, n = self.texts, len(self.texts)
        settled = self.settled_points()
        heads = sum(map(_headers, texts))
        # ids in broken lines: whole runs of digits; more of them than headers means some were not ids
        found = {i: _ids(t, self.width) for i, t in enumerate(texts) if not self.clean[i]}
        if sum(map(len, found.values())) + sum(1 for i, t in enumerate(texts) if self.clean[i] and HEADER_RE.match(t)) \
                > heads:
            found = {}
        current = all(t.count("Thread 0x") == 0 for t in texts)    # every header says 'Current thread'
        join_at = -1                            # a header on this line belongs to the last process
        i = 0
        while i < n:
            text, lno = texts[i], self.first_line + i
            if not text.strip():
                self.consumed.add(i)
                join_at = i + 1 if join_at == i else join_at
                i += 1
                continue
            start = self.block_start(i, settled, current)
            if start is not None:
                i = self.block(i, start, join_at, found.get(i, []), settled)
                join_at = i if i < n and not texts[i].strip() and not self.processes[-1].threads[-1].garbled else -1
                continue
            join_at = -1
            if self.clean[i] and (FATAL_RE.match(text) or TIMEOUT_RE.match(text)):
                self.processes.append(Process(pid=None, title=text, line=lno))
                join_at = i + 1
            elif self.clean[i] and (m := HEADER_RE.match(text)):
                # an intact header where a writer may be mid-line: its id is certain, what follows is not
                self.lone_thread(_norm_tid(m.group("tid")), m.group("cur") == "Current thread", m.group("name"), lno)
            elif self.clean[i] and (FRAME_RE.match(text) or text in FRAME_NOTES):
                self.unmatched.append(i)        # a frame whose thread is not certain
                i += 1
                continue
            elif not self.clean[i]:
                for tid in found.get(i, []):
                    self.lone_thread(tid, current, None, lno)
                if not (found.get(i) and _only_header_pieces(text)):
                    self.unmatched.append(i)
                    i += 1
                    continue
            self.consumed.add(i)                # (also 'Extension modules: ...', '...': more than 100 threads)
            i += 1
        threads = self.all_threads()
        whole = sum(1 for t in threads if not t.garbled)
        kept = sum(1 for t in threads if t.garbled and t.frames)
        self.notes.append(
            f"interleaved faulthandler output (several processes writing at once) of {heads} thread(s): "
            f"{whole} kept whole, {kept} with only their certain frames, {len(threads) - whole - kept} with "
            f"their id only, {heads - len(threads)} unidentified")

    def block_start(self, i: int, settled: list[bool], current: bool) -> tuple[str, bool, str | None, bool] | None:
        """(id, current, name, intact) when line ``i`` completes a thread header where no writer is mid-line."""
        text = self.texts[i]
        if not settled[i + 1]:
            return None
        if self.clean[i] and settled[i] and (m := HEADER_RE.match(text)):
            return _norm_tid(m.group("tid")), m.group("cur") == "Current thread", m.group("name"), True
        if self.clean[i] and settled[i] and STACK_RE.match(text):
            return "current", True, None, True
        if not self.clean[i] and (tid := _tail_id(text, self.width)):
            # the header's tail ends the line (its newline is the tail's own): with no header left open,
            # the digits just before it are the same writer's
            return tid, current, None, False
        return None

    def block(self, i: int, start: tuple[str, bool, str | None, bool], join_at: int, ids: list[str],
              settled: list[bool]) -> int:
        """A thread whose header completes on line ``i``: its frames, as far as they are certain; the next line."""
        tid, current, name, intact = start
        texts, lno = self.texts, self.first_line + i
        proc = self.processes[-1] if self.processes else None
        if proc is None or join_at != i or any(t.thread_id == tid for t in proc.threads) or (
                current and any(t.state == "current" for t in proc.threads)):
            proc = Process(pid=None, title="", line=lno)
            self.processes.append(proc)
        thread = Thread(tid, "current" if current else None, name, lno, format="faulthandler", line_end=lno)
        proc.threads.append(thread)
        if not intact:
            others = list(ids)
            if tid in others:
                others.remove(tid)
            for other in others:                # other headers' ids on the same broken line
                self.lone_thread(other, current, None, lno)
        if intact or _only_header_pieces(texts[i]):
            self.consumed.add(i)
        else:
            self.unmatched.append(i)
        j, done = i + 1, False
        while j < len(texts) and settled[j] and self.clean[j] and not done and (
                (f := FRAME_RE.match(texts[j])) or texts[j] in FRAME_NOTES):
            if f:
                file, fn, ln = f.group("file"), f.group("name"), f.group("line")
                thread.frames.append(Frame(fn, file, int(ln) if ln.isdigit() else None, False, at=self.first_line + j))
                done = (file.rsplit("/", 1)[-1], fn) in TERMINAL
            thread.line_end = self.first_line + j
            self.consumed.add(j)
            j += 1
        # whole: its lines are intact and end as faulthandler ends a thread, or with its outermost frame (a
        # thread prints at least one line: a header right after a header is another writer's)
        foreign = j < len(texts) and self.clean[j] and FRAME_RE.match(texts[j]) is not None
        thread.garbled = not (intact and j > i + 1 and (self.ends_whole(j) or done and not foreign))
        return j

    def lone_thread(self, tid: str, current: bool, name: str | None, lno: int) -> None:
        """A thread known by its id only: a process of its own (which process it was is not certain)."""
        proc = Process(pid=None, title="", line=lno)
        proc.threads.append(Thread(tid, "current" if current else None, name, lno, format="faulthandler",
                                   line_end=lno, garbled=True))
        self.processes.append(proc)

    def all_threads(self) -> list[Thread]:
        return [t for p in self.processes for t in p.threads]

    def ends_whole(self, j: int) -> bool:
        """The thread's frames ended at line ``j`` as faulthandler ends them: blank line(s), then another
        dump's or thread's first line, or the end."""
        texts = self.texts
        while j < len(texts) and not texts[j].strip():
            j += 1
        if j == len(texts):
            return True
        text = texts[j]
        return self.clean[j] and not FRAME_RE.match(text) and text not in FRAME_NOTES


LITERAL_SPLIT_RE = re.compile(r'  File |"|, line | in |Current thread 0x|Thread 0x| \(most recent call first\):')


def _free_runs(text: str) -> list[str]:
    """The text between faulthandler's literals on a line: file names, numbers, names, ids, glued."""
    return [r for r in LITERAL_SPLIT_RE.split(text) if r]


IDENT_RUN_RE = re.compile(r"[A-Za-z0-9_]+")


class _Splitter:
    """Reads a broken line's free text (the pieces of several writers glued: '3252all_reduce',
    'waitwait', '/srv/job.pyget') as the file's known pieces (the names and file names of its intact
    frames), numbers and ids, with as little text as possible left to unknown names and file names."""

    NAME_RE = re.compile(PIECE_NAME)
    PATH_START_RE = re.compile(r"(?:[A-Za-z]:)?[/\\]|<(?!(?:module|lambda|listcomp|dictcomp|setcomp|genexpr)>)")
    PATH_END_RE = re.compile(r"\.py[cdwx]?|\.so|>")
    NUMBER_RE = re.compile(r"\d{1,10}|\?\?\?")          # (a line number has at most 10 digits)

    def __init__(self, names: set[str], paths: set[str], width: int) -> None:
        self.known: dict[str, list[tuple[str, int]]] = {}      # by first character: (piece, names in it)
        for piece, k in sorted({(n, 1) for n in names} | {(p, 0) for p in paths if p not in names}):
            self.known.setdefault(piece[0], []).append((piece, k))
        self.id = re.compile(rf"[0-9a-f]{{{width}}}")

    def names(self, run: str) -> int | None:
        """How many function names the best reading of ``run`` holds (None when nothing reads it).

        The best reading leaves the fewest characters to pieces the file does not show whole, then has the
        fewest names.  A name the file does not show is read as all the rest of its identifier, and not
        after a name in the same identifier ('broadcastwait' is one name unless both halves are known: it
        may be one function's; '_bootstrap' + '_inner' is never two, '3252all_reduce' is a line number and a
        name)."""
        n = len(run)
        ident_end = list(range(1, n + 1))       # where the identifier run holding each character ends
        for m in IDENT_RUN_RE.finditer(run):
            for k in range(m.start(), m.end()):
                ident_end[k] = m.end()
        # best[(i, named)]: (unknown characters, names) of the best reading of run[:i]; named: a name was read
        # in the identifier that goes on at i
        best: dict[tuple[int, bool], tuple[int, int]] = {(0, False): (0, 0)}
        for i in range(n):
            for named in (False, True):
                b = best.get((i, named))
                if b is None:
                    continue
                named = named and i > 0 and IDENT_RUN_RE.match(run, i - 1) is not None
                steps = [(i + len(p), 0, k, k > 0) for p, k in self.known.get(run[i], ())
                         if run.startswith(p, i)]
                if m := self.NUMBER_RE.match(run, i):
                    steps += [(j, 0, 0, named) for j in range(i + 1, m.end() + 1)]
                if m := self.id.match(run, i):
                    steps.append((m.end(), 0, 0, named))
                if not named and (m := self.NAME_RE.match(run, i)):     # an unknown name
                    end = m.end() if run[i] == "<" else ident_end[i]
                    if self.NAME_RE.fullmatch(run, i, end):
                        steps.append((end, end - i, 1, True))
                if self.PATH_START_RE.match(run, i):   # an unknown file name: up to any of its possible ends
                    stop = run.find('"', i)             # (faulthandler cuts a string at 500 characters)
                    ends = self.PATH_END_RE.finditer(run, i + 1, min(n if stop < 0 else stop, i + 504))
                    steps += [(e.end(), e.end() - i, 0, False) for e in itertools.islice(ends, 8)]
                for j, unknown, k, after in steps:
                    cand, key = (b[0] + unknown, b[1] + k), (j, after)
                    if key not in best or cand < best[key]:
                        best[key] = cand
        ends = [best[k] for k in ((n, False), (n, True)) if k in best]
        return min(ends)[1] if ends else None


def _only_header_pieces(text: str) -> bool:
    """A broken line made of header pieces only (literals, ids, tails): read whole."""
    rest = text
    for lit in (TAIL, *HEADER_LITERALS):
        rest = rest.replace(lit, " ")
    return not re.sub(r"[0-9a-f]+", lambda m: "" if len(m.group(0)) % 8 == 0 else m.group(0), rest).strip()


def _split_literal(text: str) -> bool:
    """A fragment of one of faulthandler's literals (a piece split in two) is left in ``text``."""
    rest = text
    for lit in (TAIL, *SPLITTABLE):
        rest = rest.replace(lit, "\0")
    return any(lit[:k] in rest or lit[-k:] in rest for lit in SPLITTABLE for k in range(3, len(lit)))


HEX_RUN_RE = re.compile(r"(?<![0-9a-f./\\-])[0-9a-f]+(?![0-9a-f./\\-])")


def _ids(text: str, width: int) -> list[str]:
    """Thread ids in a broken line: runs of hex digits as long as one id or several (another writer's id
    may follow one directly); a run glued to a line number or a name of hex letters is no id for sure."""
    out = []
    for run in _free_runs(text):
        for m in HEX_RUN_RE.finditer(run):
            if len(m.group(0)) % width == 0:
                out += [_norm_tid(m.group(0)[k:k + width]) for k in range(0, len(m.group(0)), width)]
    return out


def _tail_id(text: str, width: int) -> str | None:
    """The id of a header whose tail ends ``text`` right after its digits (where no header is left open,
    those digits are the tail's writer's)."""
    m = re.search(rf"(?<![0-9a-f])([0-9a-f]{{{width}}}){re.escape(TAIL)}$", text)
    return _norm_tid(m.group(1)) if m else None
