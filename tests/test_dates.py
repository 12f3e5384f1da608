"""Lines printed without a year (torch's glog, vLLM's, torchrun's) take it from the nearest dated evidence of
the same engine, else from their file's envelope, else from its modification time (interface.md §3 "Dates").

The case behind it: a ticket's torch stderr paste beside the server log of a hang a year ago, both written to
disk today.  Dated by its own file time, the watchdog's timeout lands a year after the stall it explains."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest
from conftest import LogWriter, by_rule

from hangforensics.analysis.findings import run_rules
from hangforensics.fleet.scan import scan
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.readers.kinds import last_full_date
from hangforensics.store import Store

TODAY = datetime(2026, 12, 7, 9, 0, 0).timestamp()      # when the ticket's files were saved


def glog(rank: int, md: str, hms: str, seq: int = 120) -> str:
    return (f"[rank{rank}]:[E{md} {hms}.{123456 + rank} {4000 + rank} ProcessGroupNCCL.cpp:616] [Rank {rank}] "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=4096, "
            f"NumelOut=4096, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.")


def hung_log(start: str) -> LogWriter:
    """Serving on TP0-TP3 for five minutes, then no batch line while requests keep arriving."""
    return LogWriter(start=start).traffic(0, 300, ranks=("TP0", "TP1", "TP2", "TP3")).posts(302, 1200, every=7) \
        .probes(305, 1200)


def write(path: Path, lines: list[str], mtime: float = TODAY) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    os.utime(path, (mtime, mtime))
    return path


def torch_times(st: Store) -> list[datetime]:
    return [r["ts"] for r in st.query("SELECT ts FROM events WHERE kind = 'torch_nccl' ORDER BY ts")]


def ingested(folder: Path, st: Store, mode: str = "engine") -> Store:
    ingest_paths(st, [folder], mode=mode)
    return st


@pytest.mark.parametrize("text, want", [
    ("[2025-11-05 10:12:45 TP0] Decode batch.", datetime(2025, 11, 5, 10, 12, 45)),
    ("2025-11-05T10:12:45.123456789Z stdout F [2025-11-05 ...", datetime(2025, 11, 5, 10, 12, 45)),   # kubectl, CRI
    ("2025/11/05 10:12:45.000, 0, 0 %, 61.20 W", datetime(2025, 11, 5, 10, 12, 45)),                  # nvidia-smi
    ("2024-12-23 18:28:10 - vllm.engine.metrics - INFO - Avg", datetime(2024, 12, 23, 18, 28, 10)),   # logging
    ("torch 2.5.0.dev20240915 E1105 10:12:45.1 [1105 10:12:45]", None),        # a version, glog: no full date
    ("2025-13-05 10:12:45 2025-11-32 10:12:45 2025-11-05 24:00:00", None),     # no such month, day or hour
    ("0.2025-11-05 10:12:45", None),                                            # inside a longer number
    ("1970-01-01 00:00:03 a clock never set", None),
])
def test_a_full_date_is_a_four_digit_year_with_month_day_and_time(text: str, want: datetime | None):
    got = last_full_date("noise before\n" + text)
    assert (datetime.fromtimestamp(got) if got is not None else None) == want


def test_a_torch_paste_takes_the_year_of_its_engines_server_log(tmp_path: Path):
    """The paste's year-less lines, saved today, are dated by the server log of last year's hang: the timeout
    and the stall are one incident, and the known signature is dated with the stall."""
    eng = tmp_path / "eng"
    log = hung_log("2025-11-05 10:00:00").lines
    write(eng / "server.log", log)
    write(eng / "torch_stderr.txt", [glog(r, "1105", "10:14:55") for r in range(4)])
    with Store(":memory:") as st:
        ingested(eng, st)
        assert {t.year for t in torch_times(st)} == {2025}
        (src,) = st.query("SELECT last_dated, year_near FROM sources WHERE path LIKE '%torch_stderr.txt'")
        last = datetime.strptime(log[-1][1:20], "%Y-%m-%d %H:%M:%S")        # the log's last line (its tail)
        assert src["last_dated"] is None and src["year_near"] == last
        f = by_rule(run_rules(st))
        (facts,) = [r["facts"] for r in st.query("SELECT facts FROM engine_summaries")]
    said = [s for s in facts if s.startswith("Lines printed without a year")]
    assert said == [f"Lines printed without a year (torch_stderr.txt) are dated by the engine's other evidence, whose "
                    f"latest full date is {last:%Y-%m-%d %H:%M:%S}, not by their file's time."]
    (stall,) = f["stall-onset"]
    (sig,) = f["known-signature"]
    assert stall["ts"].year == sig["ts"].year == 2025 and 0 < (sig["ts"] - stall["ts"]).total_seconds() < 600


def test_without_dated_evidence_of_its_engine_a_paste_is_dated_by_its_file_time(tmp_path: Path):
    """Alone (or beside another engine's log), the paste's lines are at or before the time its file was saved."""
    write(tmp_path / "other" / "server.log", hung_log("2025-11-05 10:00:00").lines)
    write(tmp_path / "eng" / "torch_stderr.txt", [glog(0, "1105", "10:14:55")])
    with Store(":memory:") as st:
        ingested(tmp_path, st, mode="fleet")
        (t,) = torch_times(st)
        run_rules(st)
        facts = [s for r in st.query("SELECT facts FROM engine_summaries") for s in r["facts"]]
    assert t == datetime(2026, 11, 5, 10, 14, 55, 123456)
    assert not [s for s in facts if s.startswith("Lines printed without a year")]


def day_less(hms: str, n: int) -> list[str]:
    """SGLang 2024's batch lines, the time of day alone in their head (``[04:40:55 TP0]``), one a second."""
    h, m, s = map(int, hms.split(":"))
    return [f"[{h:02d}:{m:02d}:{s + i:02d} TP0] Decode batch. #running-req: 1, #token: 100, token usage: 0.01, "
            f"gen throughput (token/s): 10.00, #queue-req: 0" for i in range(n)]


def test_a_log_printing_the_time_of_day_alone_takes_its_day_from_its_engines_dated_log(tmp_path: Path):
    """A 2024 release's log pasted today beside its engine's dated log of a year ago: its lines are on that
    log's day, not today, and the summary says what dated them; alone, its file time dates them."""
    eng = tmp_path / "eng"
    log = hung_log("2025-03-02 10:00:00").lines
    write(eng / "server.log", log)
    write(eng / "tp0_paste.log", day_less("04:40:55", 3))
    last = datetime.strptime(log[-1][1:20], "%Y-%m-%d %H:%M:%S")
    with Store(":memory:") as st:
        ingested(eng, st)
        days = {r["ts"].date() for r in st.query("SELECT ts FROM batches WHERE path = 'tp0_paste.log'")}
        run_rules(st)
        (facts,) = [r["facts"] for r in st.query("SELECT facts FROM engine_summaries")]
    assert days == {datetime(2025, 3, 2).date()}
    assert [s for s in facts if s.startswith("Lines printed")] == [
        f"Lines printed with the time of day alone (tp0_paste.log) are dated by the engine's other evidence, "
        f"whose latest full date is {last:%Y-%m-%d %H:%M:%S}, not by their file's time."]
    write(tmp_path / "alone" / "tp0_paste.log", day_less("04:40:55", 3))
    with Store(":memory:") as st:
        ingested(tmp_path / "alone", st)
        days = {r["ts"].date() for r in st.query("SELECT ts FROM batches")}
        run_rules(st)
        facts = [s for r in st.query("SELECT facts FROM engine_summaries") for s in r["facts"]]
    assert days == {datetime.fromtimestamp(TODAY).date()}
    assert not [s for s in facts if s.startswith("Lines printed")]


def test_a_head_dates_by_its_first_full_date_and_a_tail_by_its_last():
    head = "[2026-03-01 08:00:00 TP0] a\n[2026-03-01 09:00:00 TP0] b\n"
    tail = "[2026-12-05 10:00:00 TP0] c\n[2026-12-05 11:00:00 TP0] d\n[2026-12-05 10:30:00 TP0] e\n"
    assert datetime.fromtimestamp(last_full_date(head)) == datetime(2026, 3, 1, 8)
    assert datetime.fromtimestamp(last_full_date(head, tail)) == datetime(2026, 12, 5, 10, 30)
    assert datetime.fromtimestamp(last_full_date(tail, head)) == datetime(2026, 12, 5, 10)


def test_a_log_written_for_months_dates_its_engine_by_its_end(tmp_path: Path):
    """A server log begun in March and still written in December: a December glog line of its engine is this
    December's (its head alone would put it in the December before)."""
    eng = tmp_path / "eng"
    filler = [f"[2026-03-01 08:{i // 60 % 60:02d}:{i % 60:02d}] INFO:     127.0.0.1:5000 - \"GET /health HTTP/1.1\" 200 OK"
              for i in range(1200)]
    write(eng / "server.log", filler + hung_log("2026-12-05 10:00:00").lines)
    write(eng / "stderr.txt", [glog(0, "1205", "10:14:55")])
    with Store(":memory:") as st:
        (t,) = torch_times(ingested(eng, st))
    assert t.date() == datetime(2026, 12, 5).date()


def test_the_nearest_year_to_the_engines_evidence_not_the_latest(tmp_path: Path):
    """A December glog line beside a log of the January after: last year's December, though both files were
    saved in the year after that."""
    eng = tmp_path / "eng"
    write(eng / "server.log", hung_log("2025-01-03 08:00:00").lines, mtime=datetime(2026, 3, 1).timestamp())
    write(eng / "stderr.txt", [glog(0, "1231", "23:59:58")], mtime=datetime(2026, 3, 1).timestamp())
    with Store(":memory:") as st:
        (t,) = torch_times(ingested(eng, st))
    assert t.date() == datetime(2024, 12, 31).date()


def test_a_vllm_log_takes_the_year_of_its_engines_gpu_samples(tmp_path: Path):
    """vLLM prints no year; the GPU samples taken beside it do."""
    eng = tmp_path / "eng"
    stats = [f"INFO 11-05 10:{m:02d}:03 loggers.py:78] Avg prompt throughput: 0.0 tokens/s, Avg generation "
             f"throughput: 45.7 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.1%, "
             f"Prefix cache hit rate: 0.0%" for m in range(10, 20)]
    write(eng / "vllm.log", stats)
    write(eng / "gpu" / "smi.csv", ["timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]",
                                    *(f"2025/11/05 10:{m:02d}:40.000, 0, 0 %, 61.20 W, 70000 MiB" for m in range(10, 20))])
    with Store(":memory:") as st:
        years = {r["y"] for r in ingested(eng, st).query("SELECT DISTINCT year(ts) AS y FROM vllm_stats")}
    assert years == {2025}


def test_a_paste_read_before_its_engines_log_arrived_is_read_again_and_redated(tmp_path: Path):
    """An incremental ingest: the paste alone is dated by its file time; once the engine's log is there, the
    next ingest reads the paste again with the log's year (and its rows are not doubled); the one after that
    reads nothing."""
    eng = tmp_path / "eng"
    write(eng / "torch_stderr.txt", [glog(r, "1105", "10:14:55") for r in range(2)])
    db = tmp_path / "hf.duckdb"
    with Store(db) as st:
        ingested(eng, st)
        assert {t.year for t in torch_times(st)} == {2026}
    write(eng / "server.log", hung_log("2025-11-05 10:00:00").lines)
    with Store(db) as st:
        (res,) = ingest_paths(st, [eng], mode="engine")
        assert res.files_read == 2 and [t.year for t in torch_times(st)] == [2025, 2025]
    with Store(db) as st:
        (res,) = ingest_paths(st, [eng], mode="engine")
        assert res.files_read == 0 and [t.year for t in torch_times(st)] == [2025, 2025]


def test_a_fleet_scan_dates_each_engines_pastes_by_its_own_logs(tmp_path: Path):
    """Enough engines that planning probes files in the parser workers and small logs are parsed together:
    each engine's paste takes the year of its own log, whatever the others' are."""
    fleet = tmp_path / "fleet"
    years = {f"e{i:02d}": 2023 + i % 3 for i in range(40)}
    for name, year in years.items():
        write(fleet / name / "server.log", hung_log(f"{year}-11-05 10:00:00").lines)
        write(fleet / name / "torch_stderr.txt", [glog(r, "1105", "10:14:55") for r in range(2)])
    scan(fleet, tmp_path / "hf.duckdb", jobs=2)
    with Store(tmp_path / "hf.duckdb", read_only=True) as st:
        got = {r["engine"]: r["y"] for r in st.query(
            "SELECT engine, any_value(year(ts)) AS y FROM events WHERE kind = 'torch_nccl' GROUP BY engine "
            "HAVING count(DISTINCT year(ts)) = 1")}
    assert got == years


def test_a_database_of_schema_7_is_migrated_and_its_unchanged_files_stay_unread(tmp_path: Path):
    """Schema 7 had no last_dated / year_near: migrating adds them (NULL for the files read then), and the next
    ingest of the same files reads none of them again."""
    eng = tmp_path / "eng"
    write(eng / "server.log", hung_log("2025-11-05 10:00:00").lines)
    write(eng / "torch_stderr.txt", [glog(0, "1105", "10:14:55")])
    db = tmp_path / "hf.duckdb"
    with Store(db) as st:
        ingested(eng, st)
        st.con.execute("ALTER TABLE sources DROP COLUMN last_dated")
        st.con.execute("ALTER TABLE sources DROP COLUMN year_near")
        st.con.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    with Store(db) as st:
        assert st.opened_at_version == 7
        assert st.query("SELECT count(*) AS n FROM sources WHERE last_dated IS NULL")[0]["n"] == 2
        (res,) = ingest_paths(st, [eng], mode="engine")
        assert res.files_read == 0 and [t.year for t in torch_times(st)] == [2025]
