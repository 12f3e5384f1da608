"""The parser pool's fork server: one process that loads what parsing needs (polars, pyarrow, and for plain
server logs numba and the compiled scanner's code) once, and forks every worker from there.

Spawned workers each loaded it themselves: some 1 s of CPU per worker before the first line was parsed,
on a machine whose cores are the ingest's limit.  Forking from a clean server (not from the parent, which
runs DuckDB's and polars' threads) keeps fork safe.  For a large log the server is started before the
parent imports DuckDB and plans (``started_early``), so that both load at once.  Kept light: this module
imports nothing heavy, as it runs before the rest of the ingest is imported."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# A plain log this large is read in byte ranges by several processes (and by the compiled scanner).  Here, not
# in ``jobs``: an ingest decides from it whether to start this server before it imports anything else.
SPLIT_MIN_BYTES = 128 * 1024 * 1024

SCANNER_PRELOAD = "hangforensics.ingest.preload_scanner"
WORKER_PRELOAD = "hangforensics.ingest.preload_worker"

_running: str | None = None          # the preload of the server this process started and has not stopped


def context(scanner: bool) -> Any:
    """The multiprocessing context whose processes the fork server forks, the server started (or kept,
    when running with the same preload): ``scanner`` for a pool that reads plain server logs.  Spawn where the
    platform has no fork server."""
    global _running
    try:
        ctx = multiprocessing.get_context("forkserver")
    except ValueError:
        return multiprocessing.get_context("spawn")
    from multiprocessing import forkserver

    preload = SCANNER_PRELOAD if scanner else WORKER_PRELOAD
    if _running != preload:
        stop()
        forkserver.set_forkserver_preload([preload])
        _running = preload
    os.environ[PARENT_ENV] = str(os.getpid())   # (the server's parent: see die_with_parent)
    with _deaf_to_ctrl_c():
        forkserver.ensure_running()     # started now: it loads while the caller goes on
    return ctx


@contextlib.contextmanager
def _deaf_to_ctrl_c() -> Iterator[None]:
    """The fork server (and every worker it forks) started with SIGINT ignored, as Python then leaves it: a
    Ctrl-C, sent to the whole process group, is the parent's to handle (it terminates the workers), not a
    traceback from each of them (a blocked signal is not enough: the server unblocks it).  A Ctrl-C pressed
    meanwhile waits, blocked, for the parent's own handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)


# The process that started this one's fork server (set in its environment: a server started by an ingest that
# died at once must not wait for it); in a fork server, its own pid, which its workers' parent must be.
PARENT_ENV = "HANGFORENSICS_FORK_SERVER_PARENT"
_expected_parent: int | None = None


def die_with_parent() -> None:
    """Tie this process's life to its parent's (Linux): it is killed when the parent dies.  Run by the fork
    server (its parent: the ingest) and by every worker (theirs: the server).  An ingest killed outright (an
    OOM kill, a cron job's timeout with SIGKILL) runs no clean-up: its fork server then waited for its
    workers, and the workers for tasks, for ever (measured: three processes and the resource tracker left).
    A parent that died before the tie was made is noticed too: the parent is not the one expected (the
    ingest's pid for the server, the server's for its workers)."""
    global _expected_parent
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    expected = _expected_parent or int(os.environ.get(PARENT_ENV) or 0) or os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != expected:        # the parent died before the tie was made
        os._exit(1)
    _expected_parent = os.getpid()      # (a worker forked from here finds its parent's pid so)


def running() -> bool:
    """Whether this process started a fork server that runs still (``context``, ``start_for``)."""
    return _running is not None


def stop() -> None:
    """Stop the fork server (it would otherwise live as long as this process), at once: one still loading
    (an unchanged file needed no worker) would only notice the request when done loading."""
    global _running
    from multiprocessing import forkserver

    _running = None
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is not None:
        # its children are the pool's workers, joined or terminated by now, but for one whose start a
        # Ctrl-C cut short: forked, yet never handed to the pool, it would wait for a task for ever (and
        # keep the resource tracker's pipe open, so that stopping the tracker would hang)
        for child in _children(pid):
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    halt = getattr(server, "_stop", None)
    if halt is not None:
        with contextlib.suppress(Exception):
            halt()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc; none known elsewhere)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        pass
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
    return found


def start_for(jobs: int) -> None:
    """Start the server of a pool of ``jobs`` processes reading logs (with the scanner) unless it runs: it
    loads (some 0.9 s) while the caller goes on.  Nothing for one process (no pool)."""
    if jobs > 1:
        with one_polars_thread():       # the workers' setting (as parallel's pool sets it), inherited
            context(scanner=True)


@contextlib.contextmanager
def started_early_for(jobs: int, now: bool) -> Iterator[None]:
    """The server started ``now`` (``start_for``), or later by the caller (a fleet scan: once planning finds
    work); stopped at once if no pool uses it (``LocalExecutor``), and at the end whatever happened."""
    if now:
        start_for(jobs)
    try:
        yield
    finally:
        stop()


@contextlib.contextmanager
def started_early(paths: list[Path], jobs: int) -> Iterator[None]:
    """Start the fork server for a large log now, when ``paths`` (files, or folders one or two levels above
    them) hold one that will be read in byte ranges; stopped at the end whatever happened (an unchanged
    file's ingest never uses it)."""
    with started_early_for(jobs, now=jobs > 1 and any(large_plain_log(p) for p in paths)):
        yield


# Compressed files and archives are read whole (no byte ranges): no scanner pool for them.
_WHOLE_SUFFIXES = (".gz", ".zst", ".bz2", ".xz", ".zip", ".tar", ".tgz")


def large_plain_log(path: Path, depth: int = 2, budget: list[int] | None = None) -> bool:
    """A file of at least SPLIT_MIN_BYTES not compressed, at ``path`` or up to ``depth`` folders below it
    (at most 2000 entries looked at: this guess must cost nothing)."""
    budget = budget if budget is not None else [2000]
    try:
        if not path.is_dir():
            return path.stat().st_size >= SPLIT_MIN_BYTES and not path.name.endswith(_WHOLE_SUFFIXES)
        if depth == 0:
            return False
        with os.scandir(path) as entries:
            for entry in entries:
                budget[0] -= 1
                if budget[0] < 0:
                    return False
                if large_plain_log(Path(entry.path), depth - 1, budget):
                    return True
    except OSError:
        return False
    return False


@contextlib.contextmanager
def one_polars_thread() -> Iterator[None]:
    """Workers started meanwhile run polars on one thread (unless POLARS_MAX_THREADS says otherwise): there
    is a worker per core already, and its small frames pay more for a thread pool than they gain (measured
    on a 64 MB range: 10 % less CPU, 15 MB less peak memory per worker)."""
    if "POLARS_MAX_THREADS" in os.environ:
        yield
        return
    os.environ["POLARS_MAX_THREADS"] = "1"          # read by the fork server (or a spawned worker) at its start
    try:
        yield
    finally:
        os.environ.pop("POLARS_MAX_THREADS", None)
