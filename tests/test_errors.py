"""Errors a person can act on: one line on stderr, exit 2, and what to do about it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import LogWriter

from hangforensics.store import SCHEMA_VERSION, Store


def hf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangforensics", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def one_line(p: subprocess.CompletedProcess, *words: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture()
def engine(tmp_path: Path) -> Path:
    return LogWriter(tp=2).startup().traffic(10, 60).posts(62, 400).write(tmp_path / "node1")


@pytest.fixture()
def db(tmp_path: Path, engine: Path) -> Path:
    path = tmp_path / "h.duckdb"
    assert hf("ingest", str(engine), "--db", str(path)).returncode == 0
    return path


def make_version_1(db: Path) -> None:
    """What a hangforensics of schema version 1 wrote: no sources.note."""
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE sources DROP COLUMN note")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.close()


def test_a_missing_path_names_it(tmp_path: Path):
    one_line(hf("report", str(tmp_path / "nowhere")), "no such file or directory", "nowhere")
    one_line(hf("scan", str(tmp_path / "nowhere"), "--db", str(tmp_path / "x.duckdb")), "nowhere")


@pytest.mark.parametrize("command", [["ingest", "ENGINE"], ["analyze"], ["scan", "FLEET"], ["migrate"]])
def test_a_database_held_by_a_running_writer_says_busy(db: Path, engine: Path, command: list[str]):
    args = [str(engine) if a == "ENGINE" else str(engine.parent) if a == "FLEET" else a for a in command]
    with Store(db):                       # a scan in progress holds DuckDB's write lock
        one_line(hf(*args, "--db", str(db)), "busy")


def test_an_older_schema_is_migrated_or_the_fix_is_named(db: Path, engine: Path):
    make_version_1(db)
    # read-only commands cannot migrate: they say how
    one_line(hf("sql", "SELECT count(*) FROM sources", "--db", str(db)), "schema version 1",
             f"hangforensics migrate --db {db}")
    p = hf("migrate", "--db", str(db))
    assert p.returncode == 0 and f"schema version {SCHEMA_VERSION} (was 1)" in p.stderr, p.stderr
    q = hf("sql", "SELECT count(*) AS n FROM sources WHERE note IS NULL", "--db", str(db), "--format", "csv")
    assert q.returncode == 0 and q.stdout.splitlines()[1] != "0", q.stderr
    assert "nothing to do" in hf("migrate", "--db", str(db)).stderr


def test_a_writing_command_migrates_an_older_database_in_place(db: Path, engine: Path):
    make_version_1(db)
    (engine / "server.log").open("a").write("[2026-05-01 10:09:00] one more line\n")
    assert hf("ingest", str(engine), "--db", str(db)).returncode == 0
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert "note" in {r[0] for r in con.execute("DESCRIBE sources").fetchall()}
    con.close()


def test_a_newer_or_foreign_database_is_refused(tmp_path: Path, db: Path):
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    one_line(hf("analyze", "--db", str(db)), "schema version 99", "upgrade hangforensics")
    one_line(hf("sql", "SELECT 1", "--db", str(db)), "schema version 99")
    foreign = tmp_path / "other.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    one_line(hf("analyze", "--db", str(foreign)), "not a hangforensics one")
    not_db = tmp_path / "server.log.duckdb"
    not_db.write_text("this is a log, not a database\n")
    one_line(hf("analyze", "--db", str(not_db)), "cannot open database")


def test_a_version_without_a_migration_path_says_reingest(db: Path):
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    con.close()
    one_line(hf("ingest", str(db.parent / "node1"), "--db", str(db)), "cannot migrate", "re-ingest")


@pytest.fixture()
def small_disk(tmp_path: Path):
    """A 1 MB tmpfs: writes to it run out of space (needs root to mount, as in CI)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot mount a tmpfs for the disk-full test: {p.stderr.strip()}")
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_is_one_line(small_disk: Path, tmp_path: Path):
    fleet = tmp_path / "fleet"
    for i in range(3):
        LogWriter(tp=4).startup().traffic(10, 4000, ranks=("TP0", "TP1", "TP2", "TP3")).posts(4002, 4300) \
            .write(fleet / f"node{i}")
    one_line(hf("ingest", str(fleet), "--db", str(small_disk / "h.duckdb")), "no space left on device")
    one_line(hf("scan", str(fleet), "--db", str(small_disk / "s.duckdb")), "no space left on device")
    # the report itself onto the full disk, the database elsewhere
    filler = small_disk / "filler"
    with filler.open("wb") as f, contextlib.suppress(OSError):
        f.write(b"\0" * (2 * 1024 * 1024))
    one_line(hf("report", str(fleet / "node0"), "-o", str(small_disk / "r.html")), "no space left on device", "cannot write", "r.html")
    shutil.rmtree(fleet)
