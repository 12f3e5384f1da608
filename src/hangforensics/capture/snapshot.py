"""One snapshot round: /proc facts of every process, then py-spy on all of them at the same moment.

Order matters.  The facts are read first, for every process, because while py-spy holds a process
its state reads ``t`` (tracing stop) instead of the wait it is really in.  Then one thread per process
waits at a barrier and starts ``py-spy dump`` the moment all are ready, so every rank is dumped within
milliseconds of the others (hand-run dumps, minutes apart, cannot be compared).  Each dump is bounded
by a timeout; nvidia-smi samples the GPUs while the dumps run.

Nothing here signals the target: py-spy pauses it for the milliseconds it reads the stack, and when a
py-spy run overruns it is py-spy (our child) that is killed.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from . import procfs
from .discover import ProcInfo, redact
from .manifest import DumpRecord, Failure, ProcessFacts
from .tools import PySpy, RunResult, pyspy_argv, run_bounded, sample_gpus

HEADER_RE = re.compile(r"^((?:Parent )?Process \d+: )(.*)$")
# failures a plain dump would meet too: no retry without --native
NO_RETRY_RE = re.compile(r"Permission Denied|Failed to get process executable name|No such process", re.I)
BARRIER_WAIT_S = 10.0


@dataclass
class RoundOutcome:
    index: int
    started: datetime
    finished: datetime | None = None
    dumps: list[DumpRecord] = field(default_factory=list)
    facts: list[ProcessFacts] = field(default_factory=list)
    thread_rows: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    gpu_csv: str | None = None
    gpu_error: str | None = None


def _local(ts: float) -> datetime:
    return datetime.fromtimestamp(ts).astimezone()


def _first_line(data: bytes) -> str:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def explain(p: ProcInfo, r: RunResult, gone: bool, gone_state: str | None, timeout_s: float) -> str:
    """One line: why py-spy produced no dump of ``p``."""
    who = f"pid {p.pid} ({p.label})"
    if gone:
        how = "became a zombie (its parent has not reaped it)" if gone_state == "Z" else "exited"
        return f"process gone: {who} {how} during the capture; no stack"
    if r.timed_out:
        return (f"timeout: py-spy dump of {who} did not finish within {timeout_s:.0f} s and was stopped "
                f"(the process may be in uninterruptible sleep, state D, or too large to read in time)")
    if r.error:
        return f"py-spy could not be started for {who}: {r.error}"
    err = r.stderr.decode("utf-8", "replace")
    first = _first_line(r.stderr) or _first_line(r.stdout) or "no output"
    if re.search(r"Permission Denied|Operation not permitted|os error 1\b|os error 13\b", err, re.I):
        return (f"no permission: py-spy may not attach to {who} ({first}); run as root or with "
                f"CAP_SYS_PTRACE (containers: --cap-add SYS_PTRACE; Yama: kernel.yama.ptrace_scope)")
    if re.search(r"Failed to get process executable name|No such process|os error 3\b|os error 2\b", err):
        return f"process gone: {who} could not be found by py-spy ({first}); no stack"
    if "python version" in err:
        return f"not readable: py-spy found no Python interpreter state in {who} ({first})"
    return f"py-spy dump of {who} failed (exit status {r.exit_code}): {first}"


def _redact_headers(text: str) -> str:
    """py-spy's ``Process N: <cmdline>`` header repeats the command line: secrets masked there too."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = HEADER_RE.match(line)
        if m:
            lines[i] = m.group(1) + redact(m.group(2))
    return "\n".join(lines)


def _write(path: Path, data: bytes, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))         # the member keeps it: ingest dates an undated dump by its mtime


class _Dumper:
    """One process's dump, run from its own thread once the barrier opens."""

    def __init__(self, p: ProcInfo, pyspy: PySpy, native: bool, timeout_s: float, barrier: threading.Barrier):
        self.p, self.pyspy, self.native, self.timeout_s, self.barrier = p, pyspy, native, timeout_s, barrier
        self.result: RunResult | None = None
        self.plain_result: RunResult | None = None

    def run(self) -> None:
        # a slow sibling thread breaks the barrier: dump anyway, the recorded start times say when
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait(BARRIER_WAIT_S)
        self.result = run_bounded(pyspy_argv(self.pyspy, self.p.pid, self.native), self.timeout_s)
        r = self.result
        if self.native and r.exit_code not in (0, None) and not r.timed_out:
            err = r.stderr.decode("utf-8", "replace")
            if not NO_RETRY_RE.search(err):
                # native unwinding can fail where Python frames still read: keep the Python frames
                self.plain_result = run_bounded(pyspy_argv(self.pyspy, self.p.pid, False), self.timeout_s)


def take_round(index: int, procs: list[ProcInfo], pyspy: PySpy, native: bool, timeout_s: float, staging: Path,
               gpu_path: str | None, already_gone: set[int]) -> RoundOutcome:
    """Facts, then parallel dumps, of ``procs``; dumps and py-spy errors are written under ``staging``.

    ``already_gone`` (updated) holds the pids reported gone in earlier rounds, so each exit is said once.
    """
    out = RoundOutcome(index, datetime.now().astimezone())
    live: list[ProcInfo] = []
    for p in procs:
        facts, rows = procfs.read_facts(p.pid, p.create_time)
        out.facts.append(facts)
        out.thread_rows[p.pid] = rows
        if facts.gone:
            if p.pid not in already_gone:
                how = "is a zombie (exited, not reaped)" if facts.state == "Z" else "had exited"
                out.failures.append(Failure("process", f"process gone: pid {p.pid} ({p.label}) {how} at "
                                                       f"round {index}; no stack", p.pid, index))
                already_gone.add(p.pid)
        elif p.python:
            live.append(p)
    dumpers: list[_Dumper] = []
    if pyspy.path and live:
        barrier = threading.Barrier(len(live))
        dumpers = [_Dumper(p, pyspy, native, timeout_s, barrier) for p in live]
        threads = [threading.Thread(target=d.run, name=f"py-spy {d.p.pid}", daemon=True) for d in dumpers]
        for t in threads:
            t.start()
    else:
        threads = []
    if gpu_path:
        # while the dumps run: the GPUs are not touched by py-spy, and the round stays short
        g = sample_gpus(gpu_path, min(timeout_s, 15.0))
        if g.exit_code == 0:
            out.gpu_csv = g.stdout.decode("utf-8", "replace")
        else:
            why = "timed out" if g.timed_out else (g.error or _first_line(g.stderr)
                                                   or f"exit status {g.exit_code}")
            out.gpu_error = f"nvidia-smi failed at round {index}: {why}"
    for t in threads:
        t.join(BARRIER_WAIT_S + 2 * timeout_s + 10)
    for d in dumpers:
        rec, fail = _record(index, d, native, timeout_s, staging)
        out.dumps.append(rec)
        if fail:
            out.failures.append(fail)
            if fail.reason.startswith("process gone"):
                already_gone.add(d.p.pid)
    out.finished = datetime.now().astimezone()
    return out


def _record(index: int, d: _Dumper, native: bool, timeout_s: float,
            staging: Path) -> tuple[DumpRecord, Failure | None]:
    p, r = d.p, d.result
    base = f"pyspy/round{index}/{p.label}-{p.pid}"
    if r is None:                           # the thread never ended (cannot happen with bounded runs)
        reason = f"timeout: the py-spy thread for pid {p.pid} ({p.label}) did not finish"
        return (DumpRecord(index, p.pid, p.label, p.rank, p.role, False, None, None, None, None, native,
                           reason=reason), Failure("pyspy", reason, p.pid, index))
    note = None
    used, used_native = r, native
    if d.plain_result is not None:
        first = _first_line(r.stderr) or f"exit status {r.exit_code}"
        if d.plain_result.exit_code == 0 and d.plain_result.stdout.strip():
            used, used_native = d.plain_result, False
            note = f"--native failed ({first}); plain dump taken instead"
        else:
            note = f"--native failed ({first}); the plain retry failed too"
    start, end = _local(used.start), _local(used.end)
    if used.exit_code == 0 and used.stdout.strip():
        rel = f"{base}.txt"
        text = _redact_headers(used.stdout.decode("utf-8", "replace"))
        _write(staging / rel, text.encode("utf-8"), used.end)
        return DumpRecord(index, p.pid, p.label, p.rank, p.role, True, rel, None, start, end, used_native,
                          exit_code=0, note=note), None
    gone, state = procfs.is_gone(p.pid, p.create_time)
    reason = explain(p, r, gone, state, timeout_s) if r.exit_code != 0 or r.timed_out else \
        f"py-spy dump of pid {p.pid} ({p.label}) printed nothing"
    err_rel = None
    if r.stderr.strip():
        # py-spy's own words: ingest recognises the file as a failed capture (kind capture_error)
        err_rel = f"{base}.error.txt"
        _write(staging / err_rel, r.stderr, r.end)
    return (DumpRecord(index, p.pid, p.label, p.rank, p.role, False, None, err_rel, _local(r.start),
                       _local(r.end), native, exit_code=r.exit_code, reason=reason, note=note),
            Failure("pyspy", reason, p.pid, index, err_rel))
