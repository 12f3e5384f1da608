"""No process outlives a command: parser workers and multiprocessing's resource tracker are reaped on
success, on error, on Ctrl-C, and nothing is started when a second scan is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, small_fleet

import hangforensics.ingest.parallel as parallel
import hangforensics.ingest.pipeline as pipeline
from hangforensics import api

# Run the CLI with the parallel thresholds lowered, so a few-MB log goes through the worker pool.
CLI = ("import sys, hangforensics.ingest.pipeline as p, hangforensics.ingest.parallel as q; "
       "p.PARALLEL_MIN_BYTES = q.SPLIT_MIN_BYTES = 1024; from hangforensics.cli import main; "
       "sys.argv = ['hangforensics', *sys.argv[1:]]; main()")


@pytest.fixture(scope="module")
def big_log(tmp_path_factory) -> Path:
    eng = tmp_path_factory.mktemp("lifetime") / "eng"
    eng.mkdir()
    # large enough that the ingest is still running when Ctrl-C lands on a loaded machine (a full test run)
    subprocess.run([sys.executable, str(REPO / "bench" / "generate.py"), "big", str(eng / "server.log"), "--mb", "40"],
                   check=True)
    return eng


def session_processes(sid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error, PermissionError):
            continue
    return out


def sigint_ignored(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return bool(mask & (1 << (signal.SIGINT - 1)))


def _as_from_a_shell() -> None:
    """The command starts as a shell starts it: SIGINT handled and unblocked, whatever this test process's
    other tests left in its own disposition or signal mask (a child inherits both)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(*args: str, interrupt_after_workers: bool = False,
            wrap: tuple[str, ...] = ()) -> tuple[int, str, list[psutil.Process]]:
    proc = subprocess.Popen([*wrap, sys.executable, "-c", CLI, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_as_from_a_shell)
    if interrupt_after_workers:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(psutil.Process(proc.pid).children()) < 2:
            time.sleep(0.05)
        assert psutil.Process(proc.pid).children(), "the worker pool never started"
        # the parent ignores SIGINT while it starts workers (they inherit that): press Ctrl-C after, as a
        # person would, not inside that instant
        while time.monotonic() < deadline and sigint_ignored(proc.pid):
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)        # as a terminal does: the whole process group
    _, err = proc.communicate(timeout=120)
    time.sleep(0.3)                              # orphans would still be there: nothing reaps them for us
    return proc.returncode, err, session_processes(proc.pid)


def test_library_ingest_leaves_no_child_process(big_log: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 1024)
    before = {c.pid for c in psutil.Process().children(recursive=True)}     # other tests' (a browser, Ray, ...)
    results = api.ingest([big_log], tmp_path / "db.duckdb", jobs=2)
    assert results[0].files_read == 1
    assert new_processes(before) == set()


def new_processes(before: set[int]) -> set[int]:
    """Children of this process not there before, except those started meanwhile by a process that was (the
    session's Ray starts workers when it likes)."""
    new = set()
    for c in psutil.Process().children(recursive=True):
        try:
            if c.pid not in before and not any(a.pid in before for a in c.parents()):
                new.add(c.pid)
        except psutil.Error:
            continue
    return new


def test_cli_ingest_leaves_no_process_in_its_session(big_log: Path, tmp_path: Path):
    rc, err, left = run_cli("ingest", str(big_log), "--db", str(tmp_path / "db.duckdb"), "--jobs", "2")
    assert rc == 0, err
    assert left == []
    # its one summary line, not a warning of multiprocessing's (the pool's semaphores outliving the tracker)
    assert len(err.strip().splitlines()) == 1 and "lines (0 unparsed)" in err, err


def test_ctrl_c_stops_the_ingest_and_its_workers(big_log: Path, tmp_path: Path):
    rc, err, left = run_cli("ingest", str(big_log), "--db", str(tmp_path / "db.duckdb"), "--jobs", "2",
                            interrupt_after_workers=True)
    assert rc == 130, (rc, err)
    assert err.strip().splitlines()[-1] == "hangforensics: interrupted"
    assert "Traceback" not in err
    assert left == []


def test_an_ingest_killed_outright_takes_its_workers_with_it(big_log: Path, tmp_path: Path):
    """An ingest killed with SIGKILL (an OOM kill, a cron job's timeout) runs no clean-up of its own: its fork
    server and workers die with it (they waited for each other, and for tasks, for ever)."""
    proc = subprocess.Popen([sys.executable, "-c", CLI, "ingest", str(big_log), "--db", str(tmp_path / "db.duckdb"),
                             "--jobs", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=_as_from_a_shell)
    deadline = time.monotonic() + 60
    # the resource tracker, the fork server and its two workers
    while time.monotonic() < deadline and len(psutil.Process(proc.pid).children(recursive=True)) < 4:
        time.sleep(0.02)
    assert len(psutil.Process(proc.pid).children(recursive=True)) >= 4, "the worker pool never started"
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and session_processes(proc.pid):
        time.sleep(0.1)
    assert session_processes(proc.pid) == []


def test_a_refused_second_scan_starts_nothing_and_leaves_nothing(tmp_path: Path):
    from hangforensics.fleet.scan import ScanLock

    fleet = small_fleet(tmp_path)
    db = tmp_path / "fleet.duckdb"
    with ScanLock(db):                           # a first scan holds the database
        rc, err, left = run_cli("scan", str(fleet), "--db", str(db))
    assert rc == 2 and "another scan is running" in err and len(err.strip().splitlines()) == 1
    assert left == []


def test_a_ray_scan_stops_the_ray_it_started_and_talks_to_loopback_only(tmp_path: Path):
    """No --ray-address: the scan starts a single-node Ray for itself and shuts every process of it down; and
    none of its processes connects anywhere but loopback (Ray's usage-stats process would ask cloud metadata
    addresses which cloud it is on)."""
    import glob
    import re
    import shutil
    import tempfile

    assert shutil.which("strace"), "strace is needed (.ci/run installs it)"
    trace = tmp_path / "connect.trace"
    ray_dirs = set(glob.glob(f"{tempfile.gettempdir()}/hf-ray-*"))
    rc, err, left = run_cli("scan", str(small_fleet(tmp_path)), "--db", str(tmp_path / "db.duckdb"),
                            "--executor", "ray", "--jobs", "2",
                            wrap=("strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace)))
    assert rc == 0 and "2 file(s) read" in err, err
    assert left == []
    assert set(glob.glob(f"{tempfile.gettempdir()}/hf-ray-*")) == ray_dirs      # its temporary folder too
    calls = trace.read_text()
    v4 = set(re.findall(r'inet_addr\("([0-9.]+)"\)', calls))
    v6 = set(re.findall(r'inet_pton\(AF_INET6, "([^"]+)"', calls))
    assert "127.0.0.1" in v4                                     # Ray's own processes, on loopback
    assert {a for a in v4 if not a.startswith("127.")} == set()
    assert {a for a in v6 if a not in ("::1", "::ffff:127.0.0.1")} == set()


def test_a_large_log_starts_the_fork_server_first_and_nothing_outlives_it(tmp_path: Path):
    """A log large enough to be read in byte ranges starts the parsers' fork server before anything else
    loads (``fork_server.started_early``): found as a file or up to two folders below the path given, never
    for a compressed file or one parser process; the server is gone when the ingest is, used or not."""
    from multiprocessing import forkserver

    from hangforensics.ingest import fork_server
    from hangforensics.ingest.jobs import SPLIT_MIN_BYTES

    fleet = tmp_path / "fleet"
    (fleet / "eng").mkdir(parents=True)
    big = fleet / "eng" / "server.log"
    with big.open("wb") as f:                   # sparse: the size counts, not the disk
        f.truncate(SPLIT_MIN_BYTES)
    small = tmp_path / "small.log"
    small.write_text("x\n")
    packed = tmp_path / "server.log.gz"
    with packed.open("wb") as f:
        f.truncate(SPLIT_MIN_BYTES * 2)
    assert fork_server.large_plain_log(big) and fork_server.large_plain_log(fleet)
    assert not fork_server.large_plain_log(small) and not fork_server.large_plain_log(packed)
    assert not fork_server.large_plain_log(tmp_path, depth=1)      # two folders up: too far for depth 1

    with fork_server.started_early([small, packed], jobs=2):
        assert forkserver._forkserver._forkserver_pid is None
    with fork_server.started_early([fleet], jobs=1):
        assert forkserver._forkserver._forkserver_pid is None
    with fork_server.started_early([fleet], jobs=2):
        pid = forkserver._forkserver._forkserver_pid
        assert pid is not None and psutil.pid_exists(pid)
        assert sigint_ignored(pid)              # a Ctrl-C is the parent's to handle, not the server's
    assert forkserver._forkserver._forkserver_pid is None
    assert not psutil.pid_exists(pid)           # stopped while still loading (no worker was ever asked for)


def test_the_command_starts_the_fork_server_before_the_cli_loads_for_a_large_log_only(tmp_path: Path):
    """The console entry (``launch``) starts the parsers' fork server from the arguments alone, before typer and
    the commands load: for an ingest (or report) naming a large plain log, and a scan of a database not made
    yet, with a local pool of parser processes; never for a database given as ``--db`` however large, one
    process, ``--help`` or another command."""
    from multiprocessing import forkserver

    from hangforensics import launch
    from hangforensics.ingest import fork_server
    from hangforensics.ingest.jobs import SPLIT_MIN_BYTES

    big = tmp_path / "server.log"
    with big.open("wb") as f:
        f.truncate(SPLIT_MIN_BYTES)
    db = tmp_path / "evidence.duckdb"
    with db.open("wb") as f:
        f.truncate(SPLIT_MIN_BYTES)
    small = tmp_path / "small.log"
    small.write_text("x\n")
    try:
        for args in (["ingest", str(small), "--db", str(db), "--jobs", "2"], ["ingest", str(big), "--jobs=1"],
                     ["ingest", "--jobs", "1", str(big)], ["ingest", str(big), "--jobs", "2", "--help"],
                     ["analyze", "--db", str(db)], ["sql", str(big)], []):
            launch._start_parsers_early(args)
            assert forkserver._forkserver._forkserver_pid is None, args
        launch._start_parsers_early(["ingest", "--db", str(db), "--jobs", "2", str(big)])
        pid = forkserver._forkserver._forkserver_pid
        assert pid is not None and psutil.pid_exists(pid)
        with fork_server.started_early([big], jobs=2):      # the ingest's own start keeps it
            assert forkserver._forkserver._forkserver_pid == pid
        assert forkserver._forkserver._forkserver_pid is None
        # a scan: for a database not made yet (every file is new), with a local pool of parsers
        for args in (["scan", str(tmp_path), "--db", str(db), "--jobs", "2"],
                     ["scan", str(tmp_path), "--db", str(tmp_path / "new.duckdb"), "--jobs=1"],
                     ["scan", str(tmp_path), "--db", str(tmp_path / "new.duckdb"), "--jobs", "2", "--executor", "ray"]):
            launch._start_parsers_early(args)
            assert forkserver._forkserver._forkserver_pid is None, args
        launch._start_parsers_early(["scan", str(tmp_path), "--out", str(db), "--jobs", "2",
                                     "--db", str(tmp_path / "new.duckdb")])
        assert forkserver._forkserver._forkserver_pid is not None
    finally:
        fork_server.stop()
    assert forkserver._forkserver._forkserver_pid is None


def test_the_entry_point_knows_every_option_that_takes_a_value():
    """The entry point reads the arguments before the CLI does: every option of the commands it looks at that
    takes a value must be one it skips with its value (else the value would be taken for a path to read)."""
    import typer.main

    from hangforensics import launch
    from hangforensics.cli import app

    group = typer.main.get_command(app)
    for name in ("ingest", "report", "scan"):
        options = [p for p in group.commands[name].params if p.param_type_name == "option"]
        valued = {o for p in options if not p.is_flag for o in p.opts}
        assert "--db" in valued and valued <= set(launch._VALUED), (name, valued - set(launch._VALUED))


def test_a_scan_starts_the_fork_server_first_and_stops_it_when_no_pool_needs_it(tmp_path: Path, monkeypatch):
    """A fleet scan with parser processes starts their fork server before it imports DuckDB and plans (it
    loads meanwhile); a scan whose files are too few for a pool stops it as soon as it knows, before parsing
    here; nothing is left either way."""
    from multiprocessing import forkserver

    from hangforensics.fleet.scan import scan
    from hangforensics.ingest import fork_server

    seen: list[tuple[str, int | None]] = []
    plan, run = pipeline.plan_files, pipeline.parsed_whole
    monkeypatch.setattr(pipeline, "plan_files", lambda *a, **k: (
        seen.append(("plan", forkserver._forkserver._forkserver_pid)), plan(*a, **k))[1])
    monkeypatch.setattr(pipeline, "parsed_whole", lambda p: (
        seen.append(("parse", forkserver._forkserver._forkserver_pid)), run(p))[1])
    fleet = small_fleet(tmp_path)
    scan(fleet, tmp_path / "fleet.duckdb", jobs=2)
    assert seen[0][0] == "plan" and seen[0][1] is not None            # started before planning
    server = seen[0][1]
    assert [pid for step, pid in seen if step == "parse"] and all(pid is None for step, pid in seen if step == "parse")
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == "zombie"
    assert fork_server._running is None
    started: list[int] = []
    start_for = fork_server.start_for
    monkeypatch.setattr(fork_server, "start_for", lambda jobs: (started.append(jobs), start_for(jobs))[1])
    seen.clear()
    scan(fleet, tmp_path / "fleet.duckdb", jobs=2)                    # nothing changed: never started
    assert started == [] and all(pid is None for _, pid in seen)
    log = sorted(fleet.glob("*/*.log"))[0]
    log.write_text(log.read_text() + log.read_text().splitlines()[-1] + "\n")
    scan(fleet, tmp_path / "fleet.duckdb", jobs=2)                    # a log grew: started as planning finds it
    assert started == [2]
    seen.clear()
    scan(fleet, tmp_path / "one.duckdb", jobs=1)                      # one process: no server at all
    assert seen[0] == ("plan", None)


def test_stopping_the_fork_server_takes_a_worker_the_pool_never_got(tmp_path: Path):
    """A worker the server forked but the pool never recorded (a Ctrl-C between the fork and the pool's
    bookkeeping) goes with the server: left alone it would wait for a task for ever, and hold the resource
    tracker's pipe open so that stopping the tracker hung (seen: 2 Ctrl-C runs in 12)."""
    import time as _time

    from hangforensics.ingest import fork_server, parallel

    ctx = fork_server.context(scanner=False)
    stray = ctx.Process(target=_time.sleep, args=(600,), daemon=True)
    stray.start()
    pid = stray.pid
    assert psutil.pid_exists(pid)
    fork_server.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie":
        time.sleep(0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    parallel.stop_resource_tracker()            # returns: nothing holds its pipe any more


_BROKEN_POOL = """
import os, signal, sys, time
import psutil
from hangforensics.ingest import fork_server, parallel

with parallel.worker_pool(2, scanner=False) as pool:
    for f in [pool.submit(time.sleep, 0.5) for _ in range(2)]:     # (both workers forked: one task each)
        f.result(timeout=60)
    procs, _ = pool.workers()
    assert len(procs) == 2
    stuck, lost = procs[0], procs[1]
    os.kill(stuck.pid, signal.SIGSTOP)          # a worker that cannot act on the SIGTERM the pool sends it
    os.kill(lost.pid, signal.SIGKILL)           # the OOM killer's choice: the pool is broken
    lost.join(10)
    pids = [stuck.pid, lost.pid]
print("left", [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE])
"""


def test_a_pool_whose_worker_was_killed_ends_and_kills_the_workers_left(tmp_path: Path):
    """A worker killed outright breaks the pool, and the others may wait for ever on a queue lock it held: the
    pool's end must not wait for them (CPython's manager thread joins a worker its SIGTERM may not reach; here
    one stopped, so that the SIGTERM waits). The pool ends, and kills every worker left."""
    try:
        out = subprocess.run([sys.executable, "-c", _BROKEN_POOL], capture_output=True, text=True, timeout=60,
                             cwd=tmp_path)
    except subprocess.TimeoutExpired as e:     # (its workers die with it: fork_server.die_with_parent)
        raise AssertionError("the broken pool's end waited for a worker that will never exit") from e
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "left []"
