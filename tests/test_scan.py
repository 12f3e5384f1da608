"""The nightly scan: incremental ingest (unchanged, appended, rotated, compressed, deleted), killed and
concurrent scans, the database while a scan writes, and the fleet index."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES, REPO, LogWriter, requires_shared, small_fleet

from hangforensics.errors import DatabaseBusyError
from hangforensics.fleet.scan import ScanLock, scan
from hangforensics.store import Store

COUNTS = ("SELECT (SELECT count(*) FROM batches) AS batches, (SELECT count(*) FROM http_requests) AS http, "
          "(SELECT count(*) FROM events) AS events, (SELECT count(*) FROM stacks) AS stacks, "
          "(SELECT count(*) FROM leak_reports) AS leaks, (SELECT count(*) FROM unparsed) AS unparsed, "
          "(SELECT count(*) FROM findings) AS findings, (SELECT count(*) FROM incidents) AS incidents")


def counts(db: Path) -> dict:
    with Store(db) as st:
        return st.query(COUNTS)[0]


def hf(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangforensics", *args], capture_output=True, text=True,
                          timeout=600, **kw)


@requires_shared()
def test_scan_of_the_sample_fleet_scores_and_indexes_every_incident(tmp_path: Path):
    out, js, db = tmp_path / "out", tmp_path / "scan.json", tmp_path / "fleet.duckdb"
    p = hf("scan", str(EXAMPLES / "fleet"), "--db", str(db), "--out", str(out), "--json", str(js))
    assert p.returncode == 0, p.stderr
    score = subprocess.run([sys.executable, str(EXAMPLES / "score.py"), str(EXAMPLES / "truth.json"), str(js)],
                           capture_output=True, text=True)
    assert score.returncode == 0, score.stdout
    doc = json.loads(js.read_text())
    index = (out / "index.html").read_text()
    assert doc["incidents"]
    for inc in doc["incidents"]:
        assert (out / inc["report"]).is_file()
        assert f'href="{inc["report"]}"' in index
        assert inc["new"] is True
    before = counts(db)
    again = hf("scan", str(EXAMPLES / "fleet"), "--db", str(db), "--out", str(out), "--json", str(js))
    assert again.returncode == 0 and "0 file(s) read" in again.stderr and "0 engine(s) re-analyzed" in again.stderr
    assert counts(db) == before
    assert all(i["new"] is False for i in json.loads(js.read_text())["incidents"])


def test_incremental_append_rotate_compress_delete(tmp_path: Path):
    fleet = small_fleet(tmp_path)
    db = tmp_path / "h.duckdb"
    log = fleet / "gpu2-healthy" / "server.log"
    first = scan(fleet, db)
    assert first.ingest.files_read == 2 and first.new_incidents
    base = counts(db)

    # unchanged: nothing read, nothing re-analyzed
    res = scan(fleet, db)
    assert (res.ingest.files_read, res.analyzed) == (0, []) and counts(db) == base

    # appended: only the new lines are read
    extra = "".join(f"[2026-05-01 11:06:{s:02d} TP0] Decode batch, #running-req: 2, #token: 90, token usage: 0.00, "
                    f"cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0\n" for s in range(5))
    with log.open("a") as f:
        f.write(extra)
    res = scan(fleet, db)
    assert res.ingest.files_read == 1 and res.ingest.bytes_read == len(extra.encode())
    assert res.analyzed == ["gpu2-healthy"]
    assert counts(db)["batches"] == base["batches"] + 5

    # rotated by rename: server.log -> server.log.1, a new server.log starts
    log.rename(log.with_name("server.log.1"))
    LogWriter(start="2026-05-01 12:00:00").traffic(0, 9).write(log.parent)
    res = scan(fleet, db)
    c = counts(db)
    assert res.ingest.files_renamed == 1
    assert c["batches"] == base["batches"] + 5 + 10                      # nothing read twice
    with Store(db) as st:
        paths = {r["path"] for r in st.query("SELECT DISTINCT path FROM batches WHERE engine = 'gpu2-healthy'")}
        assert paths == {"gpu2-healthy/server.log", "gpu2-healthy/server.log.1"}   # evidence follows the rename
        last_batch = max(i for i, t in enumerate(log.read_text().splitlines(), 1) if "batch" in t)
        assert st.scalar("SELECT max(line) FROM batches WHERE path = 'gpu2-healthy/server.log'") == last_batch

    # a gzip copy replaces the rotated file: known content, not read again
    old = log.with_name("server.log.1")
    with gzip.open(log.with_name("server.log.1.gz"), "wb") as z:
        z.write(old.read_bytes())
    old.unlink()
    res = scan(fleet, db)
    assert counts(db)["batches"] == c["batches"]
    with Store(db) as st:
        assert st.scalar("SELECT count(*) FROM batches WHERE path = 'gpu2-healthy/server.log.1.gz'") > 0
        assert st.scalar("SELECT count(*) FROM batches WHERE path = 'gpu2-healthy/server.log.1'") == 0

    # deleted: noted as vanished, its data kept
    log.with_name("server.log.1.gz").unlink()
    res = scan(fleet, db)
    assert res.ingest.files_vanished == 1
    with Store(db) as st:
        assert st.scalar("SELECT status FROM sources WHERE path = 'gpu2-healthy/server.log.1.gz'") == "vanished"
        assert st.scalar("SELECT count(*) FROM batches WHERE path = 'gpu2-healthy/server.log.1.gz'") > 0
    assert counts(db)["batches"] == c["batches"]


def test_a_removed_engine_folder_is_noted_as_vanished(tmp_path: Path):
    import shutil

    fleet = small_fleet(tmp_path)
    db = tmp_path / "h.duckdb"
    scan(fleet, db)
    shutil.rmtree(fleet / "gpu2-healthy")
    res = scan(fleet, db)
    assert res.ingest.files_vanished == 1
    with Store(db) as st:
        assert st.scalar("SELECT status FROM sources WHERE engine = 'gpu2-healthy'") == "vanished"
        assert st.scalar("SELECT count(*) FROM batches WHERE engine = 'gpu2-healthy'") > 0


def test_a_killed_scan_is_completed_by_the_next_without_duplicates(tmp_path: Path):
    fleet = tmp_path / "fleet"
    subprocess.run([sys.executable, str(REPO / "bench" / "generate.py"), "fleet", str(fleet), "--engines", "30",
                    "--mb-per-engine", "1.5"], check=True)
    clean_db = tmp_path / "clean.duckdb"
    scan(fleet, clean_db, jobs=1)
    clean = counts(clean_db)
    db = tmp_path / "killed.duckdb"
    proc = subprocess.Popen([sys.executable, "-m", "hangforensics", "scan", str(fleet), "--db", str(db), "--jobs", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not Path(f"{db}.wal").exists() and not db.exists():
        time.sleep(0.05)
    time.sleep(1.5)
    interrupted = proc.poll() is None          # on a very fast machine the scan may already be done
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    res = scan(fleet, db, jobs=1)
    assert counts(db) == clean
    with Store(db) as st:
        finished = st.scalar("SELECT count(*) FROM scans WHERE finished_at IS NOT NULL")
        assert finished == (1 if interrupted else 2)
        dup = st.scalar("SELECT count(*) FROM (SELECT engine, path, line FROM batches GROUP BY ALL HAVING count(*) > 1)")
        assert dup == 0
    assert res.ingest.files_read + res.ingest.files_skipped == 30


def test_a_second_scan_waits_or_says_why(tmp_path: Path):
    fleet = small_fleet(tmp_path)
    db = tmp_path / "h.duckdb"
    with ScanLock(db):
        p = hf("scan", str(fleet), "--db", str(db))
        assert p.returncode == 2 and "another scan is running" in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
        with pytest.raises(DatabaseBusyError):
            scan(fleet, db, wait_s=0.3)
    waiter = subprocess.Popen([sys.executable, "-m", "hangforensics", "scan", str(fleet), "--db", str(db),
                               "--wait", "30"], stderr=subprocess.PIPE, text=True)
    with ScanLock(db):
        time.sleep(1.0)                               # the waiter polls while we hold the lock
    _, err = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, err


def test_sql_while_a_scan_writes_says_busy(tmp_path: Path):
    fleet = small_fleet(tmp_path)
    db = tmp_path / "h.duckdb"
    scan(fleet, db)
    ok = hf("sql", "SELECT count(*) AS n FROM incidents", "--db", str(db), "--format", "json")
    assert ok.returncode == 0 and json.loads(ok.stdout)[0]["n"] >= 1
    with Store(db):                                   # a writer holds the database, as a running scan does
        p = hf("sql", "SELECT count(*) FROM incidents", "--db", str(db))
    assert p.returncode == 2 and "busy" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_fail_on_for_alerting(tmp_path: Path):
    fleet = small_fleet(tmp_path)
    assert hf("scan", str(fleet), "--db", str(tmp_path / "a.duckdb"), "--fail-on", "critical").returncode == 1
    quiet = tmp_path / "quiet"
    LogWriter().startup().traffic(10, 100).write(quiet / "gpu9")
    assert hf("scan", str(quiet), "--db", str(tmp_path / "b.duckdb"), "--fail-on", "warning").returncode == 0


def test_parallel_and_serial_scans_agree(tmp_path: Path):
    fleet = tmp_path / "fleet"
    subprocess.run([sys.executable, str(REPO / "bench" / "generate.py"), "fleet", str(fleet), "--engines", "12",
                    "--mb-per-engine", "6"], check=True)
    scan(fleet, tmp_path / "serial.duckdb", jobs=1)
    res = scan(fleet, tmp_path / "parallel.duckdb", jobs=2)
    assert res.ingest.files_read == 12
    assert counts(tmp_path / "serial.duckdb") == counts(tmp_path / "parallel.duckdb")
    assert os.path.exists(tmp_path / "parallel.duckdb")


def _copied_dump_fleet(tmp_path: Path) -> Path:
    """A stalled engine whose gdb dump was saved twice under two names (the same bytes)."""
    fleet = small_fleet(tmp_path)
    dump = (REPO / "tests" / "data" / "stacks" / "gdb_bt_one_thread.txt").read_bytes()
    for name in ("gdb-tp0.txt", "gdb-tp0-again.txt"):
        (fleet / "gpu1-stalled" / name).write_bytes(dump)
    return fleet


def _manifest(db: Path) -> list[tuple]:
    with Store(db) as st:
        return [tuple(r.values()) for r in st.query("SELECT path, kind, status FROM sources ORDER BY path, status")]


def test_a_file_recorded_as_a_copy_stays_one_on_a_rescan_and_after_a_stopped_scan(tmp_path: Path):
    """A file with another file's content is recorded as a copy and not read.  An unchanged rescan reads
    nothing and re-analyses nothing (the copy is not read as a file of its own then), and a scan stopped after
    it recorded the copy but before it loaded the original leaves one copy row, not two, once completed."""
    fleet = _copied_dump_fleet(tmp_path)
    db = tmp_path / "f.duckdb"
    scan(fleet, db, jobs=1)
    first = _manifest(db)
    assert sum(1 for _, _, status in first if status.startswith("duplicate of")) == 1
    again = scan(fleet, db, jobs=1)
    assert again.ingest.files_read == 0 and again.analyzed == []
    assert _manifest(db) == first
    # as a scan killed after recording the copy, before loading its original: the original's row and rows gone
    from hangforensics.ingest.load import forget_source
    with Store(db) as st:
        original = st.query("SELECT * FROM sources WHERE source_id = (SELECT source_id FROM sources "
                            "WHERE path LIKE '%gdb-tp0%' AND status = 'ok')")[0]
        with st.transaction():
            forget_source(st, original)
            st.con.execute("DELETE FROM sources WHERE source_id = ?", [original["source_id"]])
    done = scan(fleet, db, jobs=1)
    assert done.ingest.files_read == 1
    assert _manifest(db) == first


def test_after_load_passes_a_stopped_ingest_owed_run_at_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The passes after loading (here: a two-node engine's clocks aligned) run for the engines an ingest
    changed; stopped between its loads and those passes, the next ingest (which finds the files unchanged)
    still runs them, and its findings are those of a scan never stopped."""
    from hangforensics.ingest import pipeline

    fleet = REPO / "tests" / "data" / "variants" / "fleet"
    clean = tmp_path / "clean.duckdb"
    clean_doc = scan(fleet, clean, jobs=1).document
    db = tmp_path / "stopped.duckdb"
    run = pipeline.after_load

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "after_load", stopped)
    with pytest.raises(KeyboardInterrupt):
        scan(fleet, db, jobs=1)
    monkeypatch.setattr(pipeline, "after_load", run)
    res = scan(fleet, db, jobs=1)
    assert res.ingest.files_read == 0
    assert res.document["findings"] == clean_doc["findings"]
    with Store(db) as st, Store(clean) as cl:
        offsets = "SELECT path, clock_offset_s FROM sources ORDER BY path"
        assert st.query(offsets) == cl.query(offsets)
        assert any(r["clock_offset_s"] for r in st.query(offsets))
        assert st.scalar("SELECT count(*) FROM meta WHERE key = 'after_load_owed'") == 0


def _tables(db: Path) -> dict[str, list[tuple]]:
    """The evidence and the judgement of a scan, row for row (file ids and times of the run left out)."""
    with Store(db) as st:
        return {t: [tuple(r) for r in st.con.execute(
                    f"SELECT * EXCLUDE ({drop}) FROM {t} ORDER BY ALL").fetchall()]
                for t, drop in (("batches", "collected_ts"), ("http_requests", "collected_ts"),
                                ("events", "collected_ts"), ("stacks", "ts"), ("unparsed", "engine"),
                                ("sources", "source_id, ingested_at, mtime"), ("findings", "finding_id"),
                                ("incidents", "first_seen_scan, last_seen_scan"))}


def test_large_files_parsed_while_planning_give_the_rows_of_a_parse_after(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """A fleet scan parses large files as soon as planning has looked at them (``parallel.EarlyParse``); the
    plan that reads a file as probed takes that parse, one planned otherwise (here a copy of another file) does
    not: the database is the one a scan that parses after planning writes."""
    import shutil

    from hangforensics.ingest import parallel, pipeline

    fleet = tmp_path / "fleet"
    shutil.copytree(REPO / "tests" / "data" / "variants" / "fleet", fleet)
    subprocess.run([sys.executable, str(REPO / "bench" / "generate.py"), "fleet", str(tmp_path / "busy"),
                    "--engines", "4", "--mb-per-engine", "1.5"], check=True)
    for engine in (tmp_path / "busy").iterdir():
        shutil.move(engine, fleet / engine.name)
    engine = next(p for p in sorted(fleet.iterdir()) if (p / "server.log").stat().st_size > 1024 * 1024)
    shutil.copy(engine / "server.log", engine / "server-copy.log")
    taken: list[bool] = []
    take = parallel.EarlyParse.take

    def counted(self, job):
        fut = take(self, job)
        taken.append(fut is not None)
        return fut

    monkeypatch.setattr(parallel.EarlyParse, "take", counted)
    early = scan(fleet, tmp_path / "early.duckdb", jobs=2)
    assert sum(taken) >= 3
    monkeypatch.setattr(pipeline.LocalExecutor, "early_parse", lambda self: None)
    after = scan(fleet, tmp_path / "after.duckdb", jobs=2)
    assert early.ingest.files_read == after.ingest.files_read
    with Store(tmp_path / "early.duckdb") as st:
        assert st.scalar("SELECT count(*) FROM sources WHERE status LIKE 'duplicate of%'") == 1
    assert _tables(tmp_path / "early.duckdb") == _tables(tmp_path / "after.duckdb")


def test_the_fleet_index_lists_engines_with_nothing_found_where_a_process_died_or_the_evidence_is_thin(
        tmp_path: Path):
    """Never silent: a real torchrun job whose rank was killed (no hang), the same job pasted into a ticket
    (died, and thin: in the died list only), and an engine of GPU samples alone (thin) are each listed with
    their own verdict in the index, not among the incidents."""
    import shutil

    from conftest import DATA

    fleet = tmp_path / "fleet"
    for name in ("rank_dies", "pasted"):
        shutil.copytree(DATA / "torch_jobs" / name, fleet / name)
    (fleet / "gpu-only").mkdir()
    shutil.copy(DATA / "hostile" / "fleet" / "damaged-stall" / "gpu" / "smi.csv", fleet / "gpu-only" / "smi.csv")
    out = tmp_path / "out"
    scan(fleet, tmp_path / "fleet.duckdb", out=out)
    html = (out / "index.html").read_text()
    died = html[html.index('<section id="died">'):html.index('<section id="thin">')]
    thin = html[html.index('<section id="thin">'):]
    thin = thin[:thin.index("</section>")]
    assert "rank_dies" in died and "killed by SIGKILL" in died
    assert "pasted" in died and "SIGABRT" in died and "pasted" not in thin
    assert "gpu-only" in thin and "Nothing that shows a hang" in thin and "gpu-only" not in died
