"""One large log split into byte ranges across worker processes gives exactly the serial result."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

import hangforensics.ingest.pipeline as ingest
from hangforensics.ingest import fork_server, load, parallel
from hangforensics.ingest.jobs import FileJob
from hangforensics.ingest.plan import plan_files
from hangforensics.readers.layout import Workspace
from hangforensics.store import Store

QUERY = ("SELECT (SELECT count(*) FROM batches), (SELECT count(DISTINCT line) FROM batches), "
         "(SELECT sum(line) FROM http_requests), (SELECT max(line) FROM events), "
         "(SELECT lines FROM sources), (SELECT unparsed_lines FROM sources), (SELECT read_bytes FROM sources), "
         "(SELECT release_hint FROM sources)")


def test_split_ranges_start_at_records_with_true_line_numbers(tmp_path: Path):
    log = tmp_path / "big.log"
    subprocess.run([sys.executable, str(Path(__file__).parents[1] / "bench" / "generate.py"), "big", str(log),
                    "--mb", "3"], check=True)
    job = FileJob("e", log, "big.log", "server_log", 0, 1, 0.0)
    parts = parallel.split_job(job, 4)
    data = log.read_bytes()
    assert parts[0].start_offset == 0 and parts[-1].end_offset == len(data)
    for a, b in zip(parts, parts[1:], strict=False):
        assert a.end_offset == b.start_offset
        assert data[b.start_offset:b.start_offset + 1] == b"["               # a record starts there
        assert b.start_line == data[:b.start_offset].count(b"\n") + 1


def test_parallel_split_ingest_equals_serial(tmp_path: Path, monkeypatch):
    log = tmp_path / "eng" / "server.log"
    log.parent.mkdir()
    subprocess.run([sys.executable, str(Path(__file__).parents[1] / "bench" / "generate.py"), "big", str(log),
                    "--mb", "4"], check=True)
    with Store(tmp_path / "serial.duckdb") as st:
        ingest.ingest_paths(st, [log.parent], jobs=1)
        serial = st.con.execute(QUERY).fetchall()
    monkeypatch.setattr(ingest, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 1024)
    monkeypatch.setattr(load, "COMMIT_BYTES", 512 * 1024)                 # partial commits between ranges
    monkeypatch.setattr(parallel, "RANGE_BYTES", 512 * 1024)              # ranges that grow and shrink again
    monkeypatch.setattr(parallel, "FIRST_RANGE_BYTES", 128 * 1024)
    with Store(tmp_path / "parallel.duckdb") as st:
        # (memory_limit is restored from its text, rounded to 0.1 MiB: not compared)
        settings = "SELECT current_setting('threads'), current_setting('checkpoint_threshold'), " \
                   "current_setting('max_vacuum_tasks')"
        before = st.con.execute(settings).fetchall()
        ingest.ingest_paths(st, [log.parent], jobs=2)
        assert st.con.execute(QUERY).fetchall() == serial
        assert st.scalar("SELECT status FROM sources") == "ok"
        assert st.con.execute(settings).fetchall() == before      # the loader's own settings are undone


def test_a_large_logs_ranges_grow_then_shrink_and_cover_it():
    """A large log's ranges: contiguous over its bytes, the first FIRST_RANGE_BYTES then doubling to at most
    RANGE_BYTES, the last ones shrinking as the first grew (the loader's backlog when the workers are done is
    small), at least two per worker; a log too small for the ramp down only grows."""
    mb = 1024 * 1024
    for start, size, jobs in ((0, 445 * mb, 2), (7, 2000 * mb + 3, 4), (0, 130 * mb, 2), (5, 40 * mb, 2), (0, 3 * mb, 2)):
        cuts = [start, *parallel.range_targets(start, size, jobs), start + size]
        sizes = [b - a for a, b in zip(cuts, cuts[1:], strict=False)]
        assert all(n > 0 for n in sizes) and sum(sizes) == size
        assert len(sizes) >= 2 * jobs and max(sizes) <= parallel.RANGE_BYTES
        top = max(sizes)
        assert sizes[0] == min(parallel.FIRST_RANGE_BYTES, top)
        grow = sizes[:sizes.index(top)]
        assert grow == sorted(grow)
        if size >= 4 * parallel.FIRST_RANGE_BYTES + 2 * parallel.RANGE_BYTES:
            assert grow and sizes[-len(grow):] == grow[::-1]                    # the ramp down


def test_row_dicts_become_arrow_with_every_key_any_row_has():
    """Loaded, spilled by a worker or staged for Ray, a batch of row dicts keeps a key its first row lacks."""
    from hangforensics.ingest.jobs import batch_to_arrow

    t = batch_to_arrow([{"line": 1, "text": "a"}, {"line": 2, "text": "b", "thread_name": "MainThread"}])
    assert t.column_names == ["line", "text", "thread_name"]
    assert t.column("thread_name").to_pylist() == [None, "MainThread"]
    assert batch_to_arrow([]) is None


def test_counting_a_ranges_lines_counts_them_and_a_ctrl_c_inside_stays_a_ctrl_c(tmp_path: Path, monkeypatch):
    """The count reads a memory map through a numpy view: interrupted, it must raise the KeyboardInterrupt, not
    the BufferError of closing a map a view still holds (the CLI then said "internal error", not
    "interrupted")."""
    import numpy as np
    import pytest

    log = tmp_path / "a.log"
    log.write_bytes(b"one\ntwo\nthree\nfour")
    piece = FileJob("e", log, "a.log", "sglang", start_offset=4, end_offset=log.stat().st_size)
    assert parallel.count_lines(piece) == 2

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "count_nonzero", interrupted)
    with pytest.raises(KeyboardInterrupt):
        parallel.count_lines(piece)


def test_joining_a_split_logs_ranges_loads_no_polars():
    """The loader (the one DuckDB writer, the ingest's critical path) joins the ranges' outcomes without
    importing polars: it used to, for one small function, 0.2 s of CPU in the middle of the load."""
    code = """
import sys
from hangforensics.ingest import parallel
from hangforensics.ingest.jobs import CHECKPOINT, FileOutcome

def part(lines, release):
    yield CHECKPOINT, FileOutcome(lines, 0, lines * 10)
    return FileOutcome(lines, 0, lines * 10, release=release)

def drain(gen):
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value

done = drain(parallel.join_ranges([part(3, "0.5.2"), part(4, "0.5.10")]))
assert (done.lines, done.release) == (7, "0.5.10"), (done.lines, done.release)
print("polars" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_many_files_go_to_the_workers_a_window_at_a_time(tmp_path: Path, monkeypatch):
    """More whole files than the window (and a log split into ranges beside them): at most the window's
    files are in the workers' hands at once (their results wait in the loader), and every file is loaded
    as one process would load it."""
    import shutil

    fleet = tmp_path / "fleet"
    engines = sorted((Path(__file__).parent / "data" / "variants" / "fleet").iterdir())[:7]
    for e in engines:
        shutil.copytree(e, fleet / e.name)
    big = fleet / "zz-big" / "server.log"
    big.parent.mkdir(parents=True)
    subprocess.run([sys.executable, str(Path(__file__).parents[1] / "bench" / "generate.py"), "big", str(big),
                    "--mb", "2"], check=True)
    tables = "SELECT engine, path, line, ts FROM batches UNION ALL SELECT engine, path, line, ts FROM events"
    with Store(tmp_path / "serial.duckdb") as st:
        ingest.ingest_paths(st, [fleet], mode="fleet", jobs=1)
        serial = sorted(st.con.execute(tables).fetchall(), key=repr)
    monkeypatch.setattr(ingest, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 1024 * 1024)
    monkeypatch.setattr(parallel, "WHOLE_WINDOW", 1)                     # 2 files at a time for 2 workers
    most = []
    fill = parallel._Whole.fill

    def counted(self: parallel._Whole) -> None:
        fill(self)
        most.append(len(self.running))

    monkeypatch.setattr(parallel._Whole, "fill", counted)
    with Store(tmp_path / "parallel.duckdb") as st:
        ingest.ingest_paths(st, [fleet], mode="fleet", jobs=2)
        assert sorted(st.con.execute(tables).fetchall(), key=repr) == serial
        assert st.scalar("SELECT count(*) FROM sources WHERE status <> 'ok'") == 0
    assert len(most) > 3 and max(most) == 2


def test_the_costliest_whole_files_go_to_the_workers_first(tmp_path: Path, monkeypatch):
    """Whole files are handed out largest first (a compressed one counted at several times its bytes), so
    that the last to finish are small ones; they load as they finish, as one process would load them."""
    import gzip
    import random

    line = "[2025-01-01 00:00:{s:02d}] Decode batch. #running-req: 1, #token: 10, token usage: 0.01, #queue-req: 0\n"
    fleet = tmp_path / "fleet"
    sizes = {"a-small": 20, "b-large": 3000, "c-middle": 600}
    for name, n in sizes.items():
        (fleet / name).mkdir(parents=True)
        (fleet / name / "server.log").write_text("".join(line.format(s=k % 60) for k in range(n)))
    (fleet / "d-gz").mkdir()
    rng = random.Random(7)
    gz = fleet / "d-gz" / "server.log.gz"
    with gzip.open(gz, "wt") as f:                  # fewer bytes on disk than c-middle's, more to read
        f.write("".join(line.format(s=k % 60).replace("#token: 10", f"#token: {rng.randrange(10**9)}")
                        for k in range(2000)))
    assert gz.stat().st_size < (fleet / "c-middle" / "server.log").stat().st_size
    monkeypatch.setattr(ingest, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.setattr(parallel, "BATCH_FILE_BYTES", 1024)        # each file a task of its own
    monkeypatch.setattr(parallel, "PLAIN_BATCH_FILE_BYTES", 1024)
    order: list[str] = []
    init = parallel._Whole.__init__

    def seen(self, pool, tmp, todo, window, ranges, early=None):
        order.extend(p.file.engine for p in todo)
        init(self, pool, tmp, todo, window, ranges, early)

    monkeypatch.setattr(parallel._Whole, "__init__", seen)
    with Store(tmp_path / "p.duckdb") as st:
        ingest.ingest_paths(st, [fleet], mode="fleet", jobs=2)
        assert st.scalar("SELECT count(*) FROM batches") == sum(sizes.values()) + 2000
    assert order == ["b-large", "d-gz", "c-middle", "a-small"]


def test_planning_goes_on_while_the_first_worker_waits_for_the_fork_server(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A large file probed while planning is handed to the pool at once (``parallel.EarlyParse``), but the
    pool's first worker starts only once the fork server has loaded: the hand-over happens beside planning,
    which goes on (it waited some 0.14 s for the server on a 202-engine fleet); ``take`` gives the parse's
    future once it is handed over."""
    submitted, loaded = threading.Event(), threading.Event()

    class Pool:                         # a pool whose first worker waits for a fork server still loading
        def submit(self, fn, job, prefix):
            submitted.set()
            assert loaded.wait(20)
            fut: Future = Future()
            fut.set_result((fn.__name__, job.abs_path))
            return fut

    @contextlib.contextmanager
    def pool(jobs: int, scanner: bool = False):
        yield Pool()

    monkeypatch.setattr(parallel, "worker_pool", pool)
    monkeypatch.setattr(fork_server, "running", lambda: True)
    log = tmp_path / "engine" / "server.log"
    log.parent.mkdir()
    log.write_text("[2026-01-01 00:00:00 TP0] Load weight begin.\n" * 40000)     # beyond EARLY_MIN_BYTES
    with Workspace() as ws, Store(tmp_path / "plan.duckdb") as store:
        _, files = ws.resolve(tmp_path / "engine", "auto")
        plan = plan_files(store, files, [])[0]
    with parallel.EarlyParse(jobs=2, limit=8) as early:
        began = time.monotonic()
        early.offer(plan)
        assert time.monotonic() - began < 5         # (handed over beside: the server has not loaded)
        assert submitted.wait(20) and early.pending()
        loaded.set()
        assert early.take(plan.job()).result() == ("parse_to_ipc", log)
