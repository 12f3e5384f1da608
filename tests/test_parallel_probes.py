"""Planning's probes of new files (kind, envelope, head hash, gzip) read by the parser workers beside this
process (``parallel.EarlyParse.probes``), and the loader's DuckDB threads widened once the workers are done."""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
import time
from pathlib import Path

import pytest

from hangforensics.ingest import fork_server, parallel
from hangforensics.ingest.jobs import FileOutcome, with_result
from hangforensics.ingest.pipeline import ingest_files
from hangforensics.ingest.plan import PARALLEL_PROBE_MIN, plan_files
from hangforensics.readers.kinds import probe_content
from hangforensics.readers.layout import Workspace
from hangforensics.store import Store

DATA = Path(__file__).parent / "data"
LOG = "".join(f"[2026-03-01 00:00:{s:02d} TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.01, "
              f"gen throughput (token/s): 80.00, #queue-req: 0\n" for s in range(40))


def _evidence(root: Path, engines: int) -> None:
    """Engines of several kinds of evidence: plain and kubectl-wrapped logs, a gzip log, a py-spy dump, a
    JSON line, an empty file, a binary one, and an engine whose two files hold the same content."""
    dump = DATA / "stack_variants" / "fleet" / "ams7-qwen25-72b-symm-12" / "captures" / "misc" / "pyspy-1.txt"
    for i in range(engines):
        e = root / f"engine-{i:03d}"
        e.mkdir(parents=True)
        lines = LOG.replace("TP0", f"TP{i % 4}")
        if i % 5 == 1:
            lines = "".join(f"2026-03-01T00:00:00.{k:06d}Z {line}\n" for k, line in enumerate(lines.splitlines()))
        (e / "server.log").write_text(lines)
        if i % 7 == 2:
            (e / "server.log.1.gz").write_bytes(gzip.compress(lines.encode()))
        if i % 6 == 3:
            shutil.copy(dump, e / "stacks.txt")
        if i % 11 == 4:
            (e / "notes.json").write_text(json.dumps({"engine": i}) + "\n")
            (e / "empty.txt").write_text("")
            (e / "core.bin").write_bytes(bytes(range(256)) * 8)
        if i % 13 == 5:
            (e / "copy.log").write_text(lines)        # the same content twice: a duplicate


@contextlib.contextmanager
def _early_pool():
    """An ``EarlyParse`` whose pool of two real workers (forked by the fork server) is up."""
    fork_server.start_for(2)
    try:
        with parallel.EarlyParse(jobs=2, limit=8) as early:
            assert early._start_pool()
            assert early.pool.submit(int).result(timeout=60) == 0     # (the workers forked and ready)
            yield early
    finally:
        fork_server.stop()


@pytest.fixture()
def early_pool():
    with _early_pool() as early:
        yield early


def _counting(monkeypatch: pytest.MonkeyPatch, pause_s: float = 0.0) -> list[Path]:
    """The paths this process probes (not the workers': they are forked from the fork server), each after
    ``pause_s``."""
    calls: list[Path] = []

    def counted(path: Path):
        calls.append(path)
        time.sleep(pause_s)
        return probe_content(path)

    monkeypatch.setattr(parallel, "probe_content", counted)
    return calls


def test_the_workers_probes_are_this_processs_in_file_order(tmp_path: Path, early_pool, monkeypatch):
    _evidence(tmp_path, 160)
    paths = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert len(paths) > 12 * parallel.PROBE_CHUNK      # (more than the workers probe before this process begins)
    here = [probe_content(p) for p in paths]
    assert len({kind for kind, *_ in here}) >= 5            # (several kinds, envelopes and a gzip among them)
    calls = _counting(monkeypatch)
    assert list(early_pool.probes(paths)) == here
    # the workers probed some of the chunks, this process the others (each once)
    assert 0 < len(calls) < len(paths)
    assert len(set(calls)) == len(calls)


def test_probes_without_a_pool_are_read_here(tmp_path: Path, monkeypatch):
    _evidence(tmp_path, 5)
    paths = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    monkeypatch.setattr(fork_server, "running", lambda: False)
    with parallel.EarlyParse(jobs=2, limit=8) as early:
        assert list(early.probes(paths)) == [probe_content(p) for p in paths]
        assert early.pool is None


def _plans(store: Store, root: Path, probes=None) -> list[tuple]:
    with Workspace() as ws:
        _, files = ws.resolve(root, "fleet")
        known = {r[0] for r in store.con.execute("SELECT DISTINCT engine FROM sources").fetchall()}
        plans = plan_files(store, files, sorted({f.engine for f in files} | known), probes=probes)
    return [(p.file.rel_path, p.action, p.kind, p.head_hash, p.compressed, p.duplicate_of,
             p.envelope.name if p.envelope is not None else None, (p.prev or {}).get("source_id")) for p in plans]


def test_a_fleet_planned_with_the_workers_probing_is_planned_as_here(tmp_path: Path, monkeypatch):
    root = tmp_path / "fleet"
    _evidence(root, 90)
    db = tmp_path / "fleet.duckdb"
    with Store(db) as store:
        ingest_files(store, root, Workspace().resolve(root, "fleet")[1], jobs=1)
    # since the last scan: logs grew, one was rotated, engines are new, one is gone
    for i in range(0, 90, 9):
        with (root / f"engine-{i:03d}" / "server.log").open("a") as f:
            f.write(LOG)
    (root / "engine-010" / "server.log").rename(root / "engine-010" / "server.log.1")
    shutil.rmtree(root / "engine-011")
    _evidence(tmp_path / "more", 40)
    for e in (tmp_path / "more").iterdir():
        e.rename(root / f"new-{e.name}")
    with Store(db) as store:
        here = _plans(store, root)
        assert sum(1 for p in here if p[1] not in ("skip", "vanished")) >= PARALLEL_PROBE_MIN
        assert {"skip", "read", "resume", "rename", "duplicate", "vanished"} <= {p[1] for p in here}
        calls = _counting(monkeypatch)
        with _early_pool() as early:
            assert _plans(store, root, probes=early.probes) == here
        assert 0 < len(calls) < sum(1 for p in here if p[1] not in ("skip", "vanished"))


def test_an_ingest_that_probes_in_the_workers_finds_what_one_process_finds(tmp_path: Path, monkeypatch):
    root = tmp_path / "fleet"
    _evidence(root, 80)
    found = []
    calls: list[Path] = []
    for jobs in (1, 2):
        if jobs == 2:       # (this process slower than the fork server's loading: the workers probe too)
            calls = _counting(monkeypatch, pause_s=0.03)
        with Store(tmp_path / f"{jobs}.duckdb") as store, fork_server.started_early_for(jobs, now=True):
            ingest_files(store, root, Workspace().resolve(root, "fleet")[1], jobs=jobs)
            found.append(store.query(
                "SELECT path, kind, lines, unparsed_lines, head_hash, compressed, status, envelope, release_hint "
                "FROM sources ORDER BY path"))
    assert found[0] == found[1] and len(found[0]) > PARALLEL_PROBE_MIN
    assert 0 < len(calls) < len(found[0])


class _Pool:
    def __init__(self) -> None:
        self.done = False

    def finished(self) -> bool:
        return self.done


def test_the_loader_appends_on_every_core_once_the_workers_are_done():
    pool = _Pool()
    with Store() as store:
        store.con.execute("SET threads = 1")
        cores = parallel._CoresWhenParsed(store, pool, 2)  # type: ignore[arg-type]

        def batches():
            for k in range(4):
                yield "batches", k
            return FileOutcome(lines=7)

        threads = []
        result: list[FileOutcome] = []
        for _, k in with_result(cores.watching(batches()), result):
            threads.append(store.scalar("SELECT current_setting('threads')"))
            pool.done = k == 1                      # the workers are done after the second batch
        assert threads == [1, 1, 2, 2]
        assert result[0].lines == 7                 # the batches' outcome passes through


def test_probes_survive_a_worker_killed(tmp_path: Path, early_pool):
    """A worker killed (an OOM killer's choice): the chunks it had, and those no pool can take any more, are
    probed here; the probes are the same."""
    import os
    import signal

    _evidence(tmp_path, 60)
    paths = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    procs, _ = early_pool.pool.workers()
    os.kill(procs[0].pid, signal.SIGKILL)
    procs[0].join(10)
    assert list(early_pool.probes(paths)) == [probe_content(p) for p in paths]


def test_a_chunk_the_pool_lost_is_probed_here(tmp_path: Path, monkeypatch):
    """The pool took chunks and lost them (a worker died with them): their futures fail, and the chunks are
    probed here instead."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    _evidence(tmp_path, 30)
    paths = sorted(p for p in tmp_path.rglob("*") if p.is_file())

    class LosingPool:
        def submit(self, fn, *args):
            fut: Future = Future()
            fut.set_running_or_notify_cancel()          # (begun: this process cannot take it back)
            fut.set_exception(BrokenProcessPool("a child process terminated abruptly"))
            return fut

    calls = _counting(monkeypatch)
    monkeypatch.setattr(fork_server, "running", lambda: True)
    monkeypatch.setattr(parallel, "worker_pool", lambda jobs, scanner=False: contextlib.nullcontext(LosingPool()))
    with parallel.EarlyParse(jobs=2, limit=8) as early:
        assert list(early.probes(paths)) == [probe_content(p) for p in paths]
    assert len(calls) == len(paths)


def test_the_workers_probe_every_corpus_file_as_this_process(early_pool):
    """The test corpora (real pastes, py-spy / gdb / faulthandler captures of hung torch jobs, Flight Recorder
    dumps, collectors' envelopes, archives, binary files): every probe the same through the pool."""
    paths = sorted(p for p in DATA.rglob("*") if p.is_file())
    here = [probe_content(p) for p in paths]
    assert len({probe.kind for probe in here}) >= 10
    assert list(early_pool.probes(paths)) == here


def _probed_by_each_read(path: Path) -> tuple:
    """A file's probe as each of its parts reads the file on its own (its decompressed head, its hash, gzip's
    magic, the Flight Recorder test of its first bytes): what one read of a plain file's head must give."""
    from hangforensics.readers.kinds import sniff_kind
    from hangforensics.readers.logfile import head_hash, head_text, is_gzip

    try:
        head = head_text(path)
    except Exception:       # noqa: BLE001
        return ("unreadable", None, "", False)
    kind, stack = sniff_kind(path, head)
    if kind == "unreadable":
        return (kind, stack, "", False)
    return (kind, stack, head_hash(path), is_gzip(path))


def test_a_probe_reads_a_plain_files_head_once_and_finds_what_each_read_finds(tmp_path: Path, monkeypatch):
    """Probing a plain file opens it once (its head gives the text, the hash and the Flight Recorder test); a
    gzip file, one starting with a run of NUL bytes, an empty one and a pickle are probed as each read finds
    them, over every corpus file too."""
    nul = tmp_path / "copytruncated.log"
    nul.write_bytes(b"\x00" * 5000 + LOG.encode())
    gz = tmp_path / "server.log.1.gz"
    gz.write_bytes(gzip.compress(LOG.encode()))
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    plain = tmp_path / "server.log"
    plain.write_text(LOG * 500)                 # beyond the head: its tail dates it
    paths = [nul, gz, empty, plain, *sorted(p for p in DATA.rglob("*") if p.is_file())]
    for p in paths:
        probe = probe_content(p)
        assert (probe.kind, probe.envelope, probe.hhash, probe.compressed) == _probed_by_each_read(p), p
    opened: list[str] = []
    real_open = Path.open

    def counting(self: Path, *a, **k):
        opened.append(self.name)
        return real_open(self, *a, **k)

    monkeypatch.setattr(Path, "open", counting)
    probe_content(plain)
    assert opened.count("server.log") == 2          # its head, and its tail for the latest date
    opened.clear()
    probe_content(gz)
    assert opened.count("server.log.1.gz") > 2      # (decompressed: each part reads it on its own)
