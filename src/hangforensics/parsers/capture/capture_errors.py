"""Failed captures: what py-spy and gdb print when they could not take a stack.

A failed capture is still evidence (the process was gone, not Python, or not attachable), so
it is recorded as kind ``capture_error`` with its text kept and a one-line reason in
``sources.status``.  Shapes (../shared/formats/errors/):

* py-spy (anyhow): ``Error: <message>``, optionally ``Caused by:`` with indented causes and,
  with ``RUST_BACKTRACE=1``, ``Stack backtrace:`` and ``   N: frame`` lines;
* gdb: ``ptrace: No such process.``, ``ptrace: Operation not permitted.``,
  ``Could not attach to process. ...``;
* the exit status a wrapper script saved beside a capture: ``exit status: N``.
"""

from __future__ import annotations

import re

PYSPY_ERROR_RE = re.compile(r"^Error: (?P<msg>.+)$")
EXIT_RE = re.compile(r"^exit status: (?P<rc>-?\d+)$")
GDB_ERROR_RES = [re.compile(p) for p in (
    r"^ptrace: (?P<msg>.+?)\.?$",
    r"^Could not attach to process\.",
    r"^(?:gdb: )?No such process\.?$",
    r"^warning: process \d+ is (?:already traced|a zombie)",
    r"^Permission Denied: ",
)]
# Text that only stack output has: never call such a file a failed capture.
STACK_HINT_RE = re.compile(
    r"^(?:Process \d+: |Thread (?:\d+|0x[0-9a-fA-F]+) \(|#\d+ |frame #\d+: |Traceback \(|Fatal Python error: |"
    r"Current thread 0x|  File \")"
)

# (pattern over the whole text, reason); the first that matches wins.
REASONS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"python version", re.I),
     "capture failed: py-spy could not find a python version in the target (not a Python process, "
     "or a core py-spy cannot read)"),
    (re.compile(r"Failed to get process executable name|No such file or directory \(os error 2\)"),
     "capture failed: py-spy could not find the target process (it had exited or the pid was wrong)"),
    (re.compile(r"Permission Denied|Operation not permitted \(os error 1\)|os error 13", re.I),
     "capture failed: py-spy was not allowed to attach (needs root or CAP_SYS_PTRACE)"),
    (re.compile(r"^ptrace: No such process\.?$|^(?:gdb: )?No such process\.?$", re.M),
     "capture failed: gdb could not attach: no such process (it had exited or the pid was wrong)"),
    (re.compile(r"^ptrace: Operation not permitted\.?$|^Could not attach to process", re.M),
     "capture failed: gdb was not allowed to attach (ptrace_scope, or needs root / CAP_SYS_PTRACE)"),
    (re.compile(r"^warning: process \d+ is already traced", re.M),
     "capture failed: gdb could not attach: the process is already traced by another debugger"),
]


def _first(lines: list[str]) -> str | None:
    for s in lines:
        if s.strip():
            return s.rstrip("\r")
    return None


def looks_like_capture_error(head: list[str]) -> bool:
    """The first line is a py-spy/gdb failure or an exit-status record, and nothing is a stack."""
    first = _first(head)
    if first is None:
        return False
    if not (PYSPY_ERROR_RE.match(first) or EXIT_RE.match(first) or any(r.match(first) for r in GDB_ERROR_RES)):
        return False
    return not any(STACK_HINT_RE.match(s) for s in head)


def capture_error_reason(lines: list[str]) -> str:
    """One line saying why the capture failed (``capture failed: ...``)."""
    text = "\n".join(s.rstrip("\r") for s in lines)
    first = _first(lines) or ""
    m = EXIT_RE.match(first)
    if m:
        rc = int(m.group("rc"))
        if rc == 0:
            return ("capture exit status 0 recorded, no stack in this file (gdb exits 0 even when it "
                    "could not attach: read the capture's own output)")
        return f"capture failed: the capture command exited with status {rc}"
    for pattern, reason in REASONS:
        if pattern.search(text):
            return reason
    m = PYSPY_ERROR_RE.match(first)
    if m:
        return f"capture failed: py-spy: {m.group('msg').strip()}"
    for r in GDB_ERROR_RES:
        if r.match(first):
            return f"capture failed: gdb: {first.strip()}"
    return f"capture failed: {first.strip()}"
