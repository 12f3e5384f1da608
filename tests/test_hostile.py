"""Hostile and broken evidence: nothing crashes, nothing is lost, every oddity is noted.

The corpus in tests/data/hostile (see its generate.py) goes through ``report`` and ``scan`` as a user
runs them; the cases too large or too dynamic to commit (a 50 MB line, a file that grows while it is
read) are made here.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from conftest import DATA, SHARED, LogWriter

from hangforensics.ingest import pipeline as ingest_mod
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.readers import logfile
from hangforensics.readers.logfile import ReadNotes, iter_chunks
from hangforensics.store import Store

HOSTILE = DATA / "hostile" / "fleet"

# file -> what its sources.note must say (the file's oddity, in words a person can act on)
EXPECTED_NOTES = {
    "damaged-stall/server.log": ["NUL bytes inside lines removed", "invalid UTF-8", "cut into by another process",
                                 "timestamps go backwards"],
    "damaged-stall/server.log.1.gz": ["gzip data ends early"],
    "damaged-stall/captures/pyspy-tp0.txt": ["outside the dump grammar"],
    "damaged-stall/captures/pyspy-both.txt": ["interleaved dump output"],
    "damaged-stall/captures/gdb-tp1.txt": ["outside the dump grammar"],
    "junk/core.4101": ["binary content"],
    "junk/empty.log": ["empty file"],
    "junk/only-nuls.bin": ["empty file"],
    "junk/nginx-access.log": ["no known evidence format"],
    "copytruncated/server.log": ["starts with 70000 NUL bytes"],
}


def hf(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangforensics", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def physical_lines(path: Path) -> int:
    """Lines a reader can get from the file, counted independently of the product's reader."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = zlib.decompressobj(wbits=31).decompress(raw)      # what a damaged gzip still holds
    raw = raw.lstrip(b"\x00")
    return raw.count(b"\n") + (1 if raw and not raw.endswith(b"\n") else 0)


def assert_complete_accounting(db: Path) -> list[dict]:
    with Store(db, read_only=True) as st:
        rows = st.query("SELECT * FROM sources ORDER BY path")
        for r in rows:
            assert r["lines"] == r["parsed_lines"] + r["unparsed_lines"], r
            if r["kind"] not in ("binary", "empty"):
                assert r["lines"] == physical_lines(Path(r["abs_path"])), r
            kept = st.scalar("SELECT count(*) FROM unparsed WHERE engine = ? AND path = ?", [r["engine"], r["path"]])
            assert kept == r["unparsed_lines"], r
            dup = st.scalar("SELECT count(*) - count(DISTINCT line) FROM unparsed WHERE engine = ? AND path = ?",
                            [r["engine"], r["path"]])
            assert dup == 0, r
    return rows


def assert_clean_exit(p: subprocess.CompletedProcess) -> None:
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr


def test_corpus_is_what_its_generator_writes(tmp_path: Path):
    """The committed corpus is reproducible (a reviewer can read generate.py instead of bytes)."""
    import shutil

    copy = tmp_path / "hostile"
    shutil.copytree(DATA / "hostile", copy, ignore=shutil.ignore_patterns("fleet"))
    subprocess.run([sys.executable, str(copy / "generate.py")], check=True)
    for f in HOSTILE.rglob("*"):
        if f.is_file():
            assert (copy / "fleet" / f.relative_to(HOSTILE)).read_bytes() == f.read_bytes(), f


def test_report_of_the_hostile_corpus_is_complete(tmp_path: Path):
    db, js = tmp_path / "h.duckdb", tmp_path / "f.json"
    p = hf("report", str(HOSTILE), "-o", str(tmp_path / "r.html"), "--db", str(db), "--json", str(js))
    assert_clean_exit(p)
    rows = assert_complete_accounting(db)
    notes = {r["path"]: r["note"] or "" for r in rows}
    assert set(notes) == {p.relative_to(HOSTILE).as_posix() for p in HOSTILE.rglob("*") if p.is_file()}
    for path, wanted in EXPECTED_NOTES.items():
        for w in wanted:
            assert w in notes[path], (path, w, notes[path])
    # the damage did not hide the stall: the engine's story is still told in full
    doc = json.loads(js.read_text())
    rules = {(f["engine"], f["rule"]) for f in doc["findings"]}
    assert {("damaged-stall", "stall-onset"), ("damaged-stall", "health-check-blind"),
            ("damaged-stall", "all-ranks-frozen")} <= rules
    assert not any(e in ("junk", "copytruncated") for e, _ in rules)
    with Store(db, read_only=True) as st:
        # the log after the NUL hole and the invalid bytes still parses (the copytruncated log entirely)
        assert st.scalar("SELECT count(*) FROM batches WHERE engine = 'copytruncated'") == 60
        assert st.scalar("SELECT count(*) FROM unparsed WHERE engine = 'copytruncated'") == 0
        # the line cut into by the main process: its inner access line is parsed
        assert st.scalar("SELECT count(*) FROM http_requests WHERE engine = 'damaged-stall' AND client LIKE '%49999'") \
            == 1
        # interleaved py-spy output: threads kept as garbled, no frame attributed to the wrong rank
        garbled = st.query("SELECT garbled, (SELECT count(*) FROM frames f WHERE f.dump_id = s.dump_id) AS n "
                           "FROM stacks s WHERE path LIKE '%pyspy-both.txt'")
        assert garbled and all(r["garbled"] and r["n"] == 0 for r in garbled)


def test_scan_of_the_hostile_corpus_is_complete_and_rescans_nothing(tmp_path: Path):
    db, out = tmp_path / "h.duckdb", tmp_path / "out"
    assert_clean_exit(hf("scan", str(HOSTILE), "--db", str(db), "--out", str(out)))
    assert_complete_accounting(db)
    assert (out / "index.html").is_file()
    again = hf("scan", str(HOSTILE), "--db", str(db), "--json", str(tmp_path / "s.json"))
    assert_clean_exit(again)
    assert "0 file(s) read" in again.stderr


def test_a_fifty_megabyte_line(tmp_path: Path):
    eng = tmp_path / "eng"
    w = LogWriter(tp=2).startup()
    w.traffic(10, 100)
    w.raw("[2026-05-01 10:01:41 TP0] Dumping " + "x" * (50 * 1024 * 1024))
    w.traffic(102, 200).posts(202, 500)
    w.write(eng)
    db, js = tmp_path / "h.duckdb", tmp_path / "f.json"
    assert_clean_exit(hf("report", str(eng), "-o", str(tmp_path / "r.html"), "--db", str(db), "--json", str(js)))
    rows = assert_complete_accounting(db)
    assert "over 1 MB, longest 52.4 MB" in rows[0]["note"]
    assert "stall-onset" in {f["rule"] for f in json.loads(js.read_text())["findings"]}
    with Store(db, read_only=True) as st:
        # the record is represented by its row (messages are stored capped; the file keeps the rest)
        line = st.scalar("SELECT line FROM events WHERE message LIKE 'Dumping xxx%'")
    assert line == 1 + next(i for i, s in enumerate(w.lines) if s.startswith("[2026-05-01 10:01:41 TP0] Dumping"))


def test_a_line_beyond_the_limit_keeps_its_start_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(logfile, "MAX_LINE_BYTES", 1024 * 1024)
    f = tmp_path / "x.log"
    f.write_bytes(b"first\n" + b"y" * (3 * 1024 * 1024 + 5) + b"\nlast\n")
    notes = ReadNotes()
    lines = [s for c in iter_chunks(f, chunk_bytes=256 * 1024, notes=notes) for s in c.lines]
    assert lines[0] == "first" and lines[2] == "last" and len(lines) == 3
    assert len(lines[1]) == 1024 * 1024
    assert notes.cut_bytes == 2 * 1024 * 1024 + 5
    assert "not kept" in "; ".join(notes.summary())


def test_truncated_and_corrupt_gzip_yield_what_they_hold(tmp_path: Path):
    text = b"".join(b"line %d\n" % i for i in range(50000))
    gz = gzip.compress(text, mtime=0)
    for name, data, damage in (("cut.gz", gz[: len(gz) // 2], "ends early"),
                               ("bad.gz", gz[: len(gz) // 2] + b"\xff" * 64 + gz[len(gz) // 2:], "corrupt"),
                               ("two.gz", gz + gzip.compress(b"more\n", mtime=0), None)):
        f = tmp_path / name
        f.write_bytes(data)
        notes = ReadNotes()
        lines = [s for c in iter_chunks(f, notes=notes) for s in c.lines]
        if damage is None:
            assert lines[-1] == "more" and len(lines) == 50001 and notes.damage is None
            continue
        assert damage in (notes.damage or "")
        assert lines[0] == "line 0" and len(lines) > 1000
        if name == "cut.gz":     # a cut stream: every whole line before the cut is exact
            assert all(s == f"line {i}" for i, s in enumerate(lines[:-1]))


def test_a_file_that_grows_while_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Ingest reads what was there when it planned; a line still being written waits; the next ingest
    completes it, and line numbers stay those of the file."""
    eng = tmp_path / "eng"
    w = LogWriter(tp=2).startup().traffic(10, 60)
    log = w.write(eng) / "server.log"
    batch_line = "[2026-05-01 10:01:01 TP0] Decode batch, #running-req: 4, #token: 2800, token usage: 0.02, " \
                 "cuda graph: True, gen throughput (token/s): 512.40, #queue-req: 0\n"
    with log.open("a") as f:
        f.write(batch_line[:50])                              # the writer is mid-line
    planned = log.stat().st_size
    real_plan = ingest_mod.plan_files

    def plan_then_grow(*a, **kw):                             # the writer goes on after the stat
        plans = real_plan(*a, **kw)
        with log.open("a") as f:
            f.write(batch_line[50:] + batch_line.replace("10:01:01", "10:01:02"))
        return plans

    monkeypatch.setattr(ingest_mod, "plan_files", plan_then_grow)
    db = tmp_path / "h.duckdb"
    with Store(db) as st:
        ingest_paths(st, [eng])
        row = st.query("SELECT * FROM sources")[0]
        complete_lines = log.read_bytes()[:planned].count(b"\n")
        assert row["bytes"] == planned and row["lines"] == complete_lines
        assert row["read_bytes"] == planned - 50 and "last line unfinished" in row["note"]
    monkeypatch.setattr(ingest_mod, "plan_files", real_plan)
    with Store(db) as st:
        ingest_paths(st, [eng])
        row = st.query("SELECT * FROM sources")[0]
        assert row["lines"] == physical_lines(log) and row["read_bytes"] == log.stat().st_size
        assert "last line unfinished" not in (row["note"] or "")
        last = st.query("SELECT line, ts FROM batches ORDER BY line DESC LIMIT 2")
        assert [r["line"] for r in last] == [physical_lines(log), physical_lines(log) - 1]
        assert st.scalar("SELECT count(*) FROM unparsed") == 0


def test_an_old_file_ending_mid_line_is_read_whole(tmp_path: Path):
    eng = tmp_path / "eng"
    log = LogWriter(tp=2).startup().traffic(10, 30).write(eng) / "server.log"
    with log.open("a") as f:
        f.write("[2026-05-01 10:00:31] The last words of a killed process")
    old = time.time() - 3600
    os.utime(log, (old, old))
    with Store(tmp_path / "h.duckdb") as st:
        ingest_paths(st, [eng])
        row = st.query("SELECT * FROM sources")[0]
        assert row["lines"] == physical_lines(log) and row["read_bytes"] == log.stat().st_size
        assert st.scalar("SELECT count(*) FROM events WHERE message LIKE 'The last words%'") == 1


def test_a_held_back_tail_is_read_once_the_file_is_final(tmp_path: Path):
    eng = tmp_path / "eng"
    log = LogWriter(tp=2).startup().traffic(10, 30).write(eng) / "server.log"
    with log.open("a") as f:
        f.write("[2026-05-01 10:00:31] The last words")
    db = tmp_path / "h.duckdb"
    with Store(db) as st:
        ingest_paths(st, [eng])
        assert st.scalar("SELECT lines FROM sources") == physical_lines(log) - 1
    old = time.time() - 3600
    os.utime(log, (old, old))                     # nobody wrote to it since: the tail is final
    with Store(db) as st:
        ingest_paths(st, [eng])
        assert st.scalar("SELECT lines FROM sources") == physical_lines(log)
        assert st.scalar("SELECT count(*) FROM events WHERE message = 'The last words'") == 1


@pytest.mark.parametrize("name,body", [
    ("crlf-nul-utf8.log", b"\x00\x00\x00first\r\nsec\x00ond\r\n\xff\xfe bad bytes\nla\xc3\xa9st without newline"),
    ("plain.log", b"".join(b"line %d\n" % k for k in range(1, 3001))),
    ("blank-lines.log", b"\n\n\nx\n\n"),
    ("rotated.log.gz", gzip.compress(b"".join(b"[2025-01-01 00:00:00] Decode batch. #%d\r\n" % k
                                             for k in range(1, 500)))),
])
def test_reading_some_lines_back_gives_what_the_reader_numbered_and_cleaned(tmp_path: Path, monkeypatch, name, body):
    """Excerpts read only the lines quoted (``read_lines``): the same numbers and text as ``iter_chunks`` gives
    them, whatever the file holds, at any chunk size."""
    path = tmp_path / name
    path.write_bytes(body)
    monkeypatch.setattr(logfile, "CHUNK_BYTES", 7)          # lines across many reads
    every = [s for c in iter_chunks(path, chunk_bytes=7) for s in c.lines]
    wanted = {1, 2, 3, 5, len(every), len(every) + 1, 0}    # (past the end, or none: absent)
    got = logfile.read_lines(path, wanted)
    assert got == {n: every[n - 1] for n in wanted if 1 <= n <= len(every)}
    assert logfile.read_lines(path, set(range(1, len(every) + 1))) == dict(enumerate(every, 1))


def test_reading_lines_back_from_real_programs_output_gives_what_the_reader_gave(monkeypatch):
    """Every file real programs wrote (py-spy, gdb and faulthandler captures of hung ranks; torch jobs run on
    gloo; pasted issue threads): each of its lines read back alone is the reader's line."""
    monkeypatch.setattr(logfile, "CHUNK_BYTES", 4096)
    roots = [SHARED / "formats", DATA / "torch_jobs", DATA / "real_pastes"]
    files = sorted(p for r in roots for p in r.rglob("*") if p.is_file())
    assert len(files) > 80
    for path in files:
        every = [s for c in iter_chunks(path, chunk_bytes=4096) for s in c.lines]
        assert logfile.read_lines(path, set(range(1, len(every) + 1))) == dict(enumerate(every, 1)), path
        sparse = {len(every) // 3 + 1, len(every)}                  # (reads between them hold none)
        assert logfile.read_lines(path, sparse) == {n: every[n - 1] for n in sparse if n >= 1}, path


def test_reading_a_line_back_from_a_monstrous_line_keeps_its_start(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(logfile, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(logfile, "CHUNK_BYTES", 7)
    path = tmp_path / "long.log"
    path.write_bytes(b"a" * 1000 + b"\nnext\n" + b"b" * 500)
    every = [s for c in iter_chunks(path, chunk_bytes=7) for s in c.lines]
    assert every[0] == "a" * 100 and every[1] == "next"
    assert logfile.read_lines(path, {1, 2, 3}) == dict(enumerate(every, 1))
    # the reads that hold no quoted line are counted, not searched: a monstrous line among them still counts once
    assert logfile.read_lines(path, {2}) == {2: "next"}
    assert logfile.read_lines(path, {3}) == {3: every[2]}
