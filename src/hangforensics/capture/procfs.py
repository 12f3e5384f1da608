"""What /proc says about one process at one moment: state, CPU time, kernel wait, threads.

Read-only and cheap (a few small files per thread).  ``wchan`` names the kernel function a sleeping
thread waits in: ``unix_stream_read_generic`` for a ``recvmsg`` on a Unix socket (the symmetric-memory
registration deadlock), ``futex_wait_queue`` for a lock or condition variable, ``do_sys_poll`` /
``ep_poll`` for an event loop, ``hrtimer_nanosleep`` for ``time.sleep``.  Two rounds with the same
wchan and the same CPU time mean the thread did not move in between.
"""

from __future__ import annotations

import os
import platform
from collections import Counter
from datetime import datetime
from typing import Any

from .manifest import ProcessFacts

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MAX_THREADS = 1024                 # per process: a summary, not a census (bounded time on huge trees)
STATE_NAMES = {"R": "running", "S": "sleeping", "D": "disk sleep (uninterruptible)", "Z": "zombie",
               "T": "stopped", "t": "tracing stop", "X": "dead", "I": "idle", "P": "parked", "W": "waking"}
# x86_64 numbers of the syscalls a hung rank sits in (/proc/PID/syscall prints the number only).
X86_64_SYSCALLS = {
    0: "read", 1: "write", 7: "poll", 16: "ioctl", 23: "select", 24: "sched_yield", 34: "pause",
    35: "nanosleep", 42: "connect", 43: "accept", 44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg",
    61: "wait4", 65: "semop", 70: "msgrcv", 73: "flock", 128: "rt_sigtimedwait", 130: "rt_sigsuspend",
    202: "futex", 208: "io_getevents", 220: "semtimedop", 230: "clock_nanosleep", 232: "epoll_wait",
    247: "waitid", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 288: "accept4", 426: "io_uring_enter",
    441: "epoll_pwait2", 449: "futex_waitv",
}
_X86_64 = platform.machine() in ("x86_64", "AMD64")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def parse_stat(text: str) -> dict[str, Any]:
    """Fields of /proc/PID/stat; the command name may hold spaces and parentheses: split at the last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); utime/stime are fields 14/15, num_threads 20, starttime 22
    return {"state": rest[0], "ppid": int(rest[1]), "utime": int(rest[11]) / CLOCK_TICKS,
            "stime": int(rest[12]) / CLOCK_TICKS, "threads": int(rest[17]), "starttime": int(rest[19])}


def wchan(pid: int, tid: int | None = None) -> str | None:
    """The kernel wait of a thread; None while it runs ('0') or when it cannot be read."""
    w = _read(f"/proc/{pid}/task/{tid}/wchan" if tid else f"/proc/{pid}/wchan")
    return w.strip() if w and w.strip() not in ("0", "") else None


def syscall(pid: int) -> str | None:
    """The main thread's syscall: 'recvmsg' (x86_64) or its number, 'running', or None."""
    s = _read(f"/proc/{pid}/syscall")
    if not s or not s.split():
        return None
    first = s.split()[0]
    if not first.lstrip("-").isdigit():
        return first                       # 'running'
    n = int(first)
    if n < 0:
        return None                        # -1: blocked but not in a syscall (a page fault, a stop)
    return X86_64_SYSCALLS.get(n, f"syscall {n}") if _X86_64 else f"syscall {n}"


def threads_of(pid: int) -> list[dict[str, Any]]:
    """Every thread (up to MAX_THREADS): tid, kernel name, state letter, wchan, CPU seconds."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except OSError:
        return []
    out = []
    for tid in tids[:MAX_THREADS]:
        st = _read(f"/proc/{pid}/task/{tid}/stat")
        if not st:
            continue                       # the thread ended while we listed
        comm = st[st.index("(") + 1: st.rindex(")")]
        rest = st[st.rindex(")") + 2:].split()
        # per thread: a rank's helper threads (NCCL watchdog, pollers) burn CPU while its main thread waits
        cpu = round((int(rest[11]) + int(rest[12])) / CLOCK_TICKS, 2) if len(rest) > 12 else None
        out.append({"tid": tid, "comm": comm, "state": rest[0], "wchan": wchan(pid, tid), "cpu_s": cpu})
    return out


def read_facts(pid: int, create_time: float | None,
               with_threads: bool = True) -> tuple[ProcessFacts, list[dict]]:
    """(facts, per-thread rows) of ``pid`` now.  ``gone`` when it exited or its pid now belongs to another
    process (its start time differs from ``create_time``); a zombie is gone too, with state ``Z``."""
    taken = datetime.now().astimezone()
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return ProcessFacts(pid, taken, gone=True), []
    try:
        st = parse_stat(text)
    except (ValueError, IndexError):
        return ProcessFacts(pid, taken, gone=True), []
    if create_time is not None and not _same_process(st["starttime"], create_time):
        return ProcessFacts(pid, taken, gone=True), []
    if st["state"] in ("Z", "X"):
        return ProcessFacts(pid, taken, gone=True, state=st["state"], cpu_user_s=st["utime"],
                            cpu_system_s=st["stime"], threads=st["threads"]), []
    rows = threads_of(pid) if with_threads else []
    main_cpu = next((r["cpu_s"] for r in rows if r["tid"] == pid), None)
    return ProcessFacts(
        pid, taken, state=st["state"], cpu_user_s=round(st["utime"], 2), cpu_system_s=round(st["stime"], 2),
        wchan=wchan(pid), syscall=syscall(pid), threads=st["threads"], main_cpu_s=main_cpu,
        thread_states=dict(Counter(r["state"] for r in rows)),
        thread_wchans=dict(Counter(r["wchan"] or "-" for r in rows)),
    ), rows


def _boot_time() -> float | None:
    stat = _read("/proc/stat") or ""
    for line in stat.splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


_BOOT = _boot_time()


def _same_process(starttime_ticks: int, create_time: float) -> bool:
    """The pid still names the process discovered (psutil's create_time is boot time + starttime)."""
    if _BOOT is None:
        return True
    return abs(_BOOT + starttime_ticks / CLOCK_TICKS - create_time) < 1.0


def is_gone(pid: int, create_time: float | None) -> tuple[bool, str | None]:
    """(gone, state): has the process exited (or become a zombie) since it was discovered?"""
    facts, _ = read_facts(pid, create_time, with_threads=False)
    return facts.gone, facts.state
