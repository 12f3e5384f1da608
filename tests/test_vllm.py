"""vLLM engines (issue 18): V0 and V1 server logs read into typed stats rows, stalls judged from them the way
vLLM prints them (a timer, demoted to DEBUG when idle), probes that stay 200, worker stacks, summaries in
vLLM's terms.  The logs are tests/data/vllm/ (make_logs.py wrote them; its comments say what each shows)."""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from conftest import DATA, analyze_folder, by_rule
from envelope_wrappers import wrap

from hangforensics.analysis.findings import run_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.parsers.stacks.pyspy import rank_from_title
from hangforensics.parsers.vllm.vllm_patterns import rank_of_process
from hangforensics.redaction import redact_payloads
from hangforensics.store import Store

VLLM = DATA / "vllm"
VLLM_TS = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)")


def engine(tmp_path: Path, name: str, lines: list[str] | None = None, extra: dict[str, str] | None = None) -> Path:
    """A copy of tests/data/vllm/<name> (its server.log replaced by ``lines`` when given, ``extra`` files added),
    saved a day after its last line: year-less vLLM times take their year from the file's time."""
    folder = tmp_path / name
    shutil.copytree(VLLM / name, folder)
    log = folder / "server.log"
    if lines is not None:
        log.write_text("\n".join(lines) + "\n")
    for fname, src in (extra or {}).items():
        shutil.copy(VLLM / "stacks" / src, folder / fname)
    year = 2026
    last = max(VLLM_TS.findall(log.read_text()))
    saved = datetime.strptime(f"{year}-{last}", "%Y-%m-%d %H:%M:%S") + timedelta(days=1)
    for f in folder.iterdir():
        os.utime(f, (saved.timestamp(), saved.timestamp()))
    return folder


def lines_of(name: str) -> list[str]:
    return (VLLM / name / "server.log").read_text().splitlines()


def summary(folder: Path) -> tuple[list[dict], dict]:
    with Store(":memory:") as st:
        ingest_paths(st, [folder])
        found = run_rules(st)
        return found, st.query("SELECT * FROM engine_summaries")[0]


def shape(findings: list[dict]) -> list[tuple]:
    return sorted((f["rule"], f["ts"].strftime("%Y-%m-%dT%H:%M:%S") if f["ts"] else None,
                   f["ts_end"].strftime("%Y-%m-%dT%H:%M:%S") if f["ts_end"] else None, tuple(f["ranks"]))
                  for f in findings)


# -- reading ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "rank"), [
    ("VllmWorker TP1", "TP1"), ("Worker_TP3", "TP3"), ("Worker_DP1_TP0", "DP1 TP0"), ("VllmWorker PP1_TP0", "PP1 TP0"),
    ("VllmWorker rank=2", "TP2"), ("VllmWorker-5", "TP5"), ("EngineCore_DP0", None), ("APIServer", None),
    ("VllmWorkerProcess", None), ("RayWorkerWrapper", None),
])
def test_process_tags_name_the_worker_rank(name: str, rank: str | None):
    assert rank_of_process(name) == rank


@pytest.mark.parametrize(("title", "rank"), [
    ("VLLM::Worker_TP1", "TP1"), ("VLLM::Worker_DP1_TP2", "DP1 TP2"), ("VLLM::EngineCore_DP0", "EngineCore_DP0"),
    ("VLLM::EngineCore", "EngineCore"), ("ACME::Worker_PP1_TP3", "PP1 TP3"), ("VLLM::APIServer", None),
    ("ray::RayWorkerWrapper.execute_method", None), ("sglang::scheduler_DP0_TP3", "DP0 TP3"),
])
def test_process_titles_name_ranks_and_engine_cores(title: str, rank: str | None):
    assert rank_from_title(title) == rank


def test_v1_stats_lines_become_typed_rows(tmp_path: Path):
    folder = engine(tmp_path, "v1-hung")
    stats = [ln for ln in lines_of("v1-hung") if "Avg prompt throughput" in ln]
    with Store(":memory:") as st:
        ingest_paths(st, [folder])
        rows = st.query("SELECT * FROM vllm_stats ORDER BY ts, line")
        assert len(rows) == len(stats) == st.scalar("SELECT count(*) FROM events WHERE kind = 'vllm_stats'")
        last = rows[-1]
        assert (last["ts"], last["process"], last["engine_index"], last["format"]) == \
            (datetime(2026, 5, 16, 11, 20, 40), "APIServer", 0, "v1")
        assert (last["prompt_tps"], last["gen_tps"], last["running"], last["waiting"], last["kv_usage"],
                last["prefix_hit"], last["swapped"]) == (0.0, 0.0, 41, 57, 99.4, 22.3, None)
        # progress is the stats lines with generation, one series for the engine
        assert st.scalar("SELECT count(*) FROM progress WHERE rank = ''") == len(rows) - 1
        # the start lines' settings; the shm waits and the death keep who printed them, with its pid
        assert st.query("SELECT tp_size, model FROM engine_facts")[0] == \
            {"tp_size": 4, "model": "meta-llama/Llama-3.1-70B-Instruct"}
        shm = st.query("SELECT rank, attrs FROM events WHERE kind = 'vllm_shm_wait' LIMIT 1")[0]
        assert shm["rank"] == "EngineCore_DP0" and '"pid": 3001' in shm["attrs"] and '"waited_s": 60' in shm["attrs"]
        kinds = {r["kind"] for r in st.query("SELECT DISTINCT kind FROM events")}
        assert {"vllm_start", "vllm_input_dump", "vllm_engine_dead"} <= kinds
        workers = {r["rank"] for r in st.query("SELECT rank FROM events WHERE message LIKE 'rank % in world size%'")}
        assert workers == {"TP0", "TP1", "TP2", "TP3"}


def test_v0_formats_with_and_without_brackets(tmp_path: Path):
    with Store(":memory:") as st:
        ingest_paths(st, [engine(tmp_path, "v0-idle"), engine(tmp_path, "v0-quiet-hung")])
        v0 = st.query("SELECT engine, format, swapped, cpu_kv_usage, prefix_hit FROM vllm_stats")
        assert {r["format"] for r in v0} == {"v0"} and {r["swapped"] for r in v0} == {0}
        assert {r["cpu_kv_usage"] for r in v0} == {0.0} and {r["prefix_hit"] for r in v0} == {None}
        assert {r["engine"] for r in v0} == {"v0-idle", "v0-quiet-hung"}       # 'metrics.py:345]' and '[metrics.py:455]'
        kinds = {r["kind"]: r["n"] for r in st.query(
            "SELECT kind, count(*) AS n FROM events WHERE engine = 'v0-idle' GROUP BY kind")}
        assert kinds["vllm_request"] == 2 * kinds["vllm_request_done"]          # Received + Added, then Finished
        assert kinds["vllm_shm_wait"] > 0 and kinds["vllm_start"] == 2
        idle_wait = st.query("SELECT rank, attrs FROM events WHERE engine = 'v0-idle' AND kind = 'vllm_shm_wait' LIMIT 1")
        assert idle_wait[0]["rank"] == "VllmWorkerProcess" and idle_wait[0]["attrs"] == '{"waited_s": 60}'
        assert st.scalar("SELECT sum(unparsed_lines) FROM sources") == 0


_STD_RECORD = re.compile(r"^(\([^)]*pid=\d+[^)]*\)\s*)?(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)"
                         r"(?:[.,]\d+)? \[?([^\]\s:]+)\.py:\d+\] (.*)$")


def _under_logging_format(line: str, year: int) -> str:
    """A vLLM record as a user's own Python logging format prints it: '%(asctime)s - %(name)s - %(levelname)s -
    %(message)s' (the logger named after the module), behind the process tag vLLM's workers print."""
    m = _STD_RECORD.match(line)
    if m is None:
        return line
    tag, level, ts, module, msg = m.groups()
    return f"{tag or ''}{year}-{ts},417 - vllm.{module} - {level} - {msg}"


@pytest.mark.parametrize("name", ["v0-quiet-hung", "v1-hung", "v1-dp-one-stops", "v1-healthy-idle"])
def test_vllm_under_a_users_logging_format_is_read_as_vllm(tmp_path: Path, name: str):
    """The same engine's records under Python logging's common format (a year of their own: 2025, not the
    file time's 2026): the same rows, the same findings, a year earlier."""
    plain = engine(tmp_path / "plain", name)
    converted = [_under_logging_format(ln, 2025) for ln in lines_of(name)]
    assert sum(a != b for a, b in zip(converted, lines_of(name), strict=True)) > 10
    logged = tmp_path / "logged" / name
    shutil.copytree(plain, logged)
    (logged / "server.log").write_text("\n".join(converted) + "\n")
    saved = (plain / "server.log").stat().st_mtime                 # (the file time the plain one is read with)
    os.utime(logged / "server.log", (saved, saved))
    (want, want_summary), (got, got_summary) = summary(plain), summary(logged)
    year_back = [(r, *(t.replace("2026", "2025", 1) if t else t for t in ts), ranks) for r, *ts, ranks in shape(want)]
    assert shape(got) == year_back and got_summary["verdict"] == want_summary["verdict"]
    with Store(":memory:") as st:
        ingest_paths(st, [logged])
        assert st.scalar("SELECT sum(unparsed_lines) FROM sources WHERE kind = 'server_log'") == 0
        assert st.scalar("SELECT count(*) FROM vllm_stats") == \
            sum("Avg prompt throughput" in ln for ln in lines_of(name))


def test_chunks_of_a_plain_vllm_log_end_before_a_record(tmp_path: Path):
    """A chunk never ends inside a record: the engine core's traceback stays with its first line."""
    from hangforensics.readers.logfile import iter_chunks

    log = VLLM / "v1-hung" / "server.log"
    data = log.read_bytes()
    first = data.index(b"(EngineCore_DP0 pid=3001) ERROR 05-16 11:25:40 [core.py:710]")
    inside = data.index(b"TimeoutError: RPC call", first)
    chunks = list(iter_chunks(log, records=True, chunk_bytes=inside + 10))
    assert chunks[1].lines[0].startswith("(EngineCore_DP0 pid=3001) ERROR 05-16 11:25:40 [core.py:710]")


def test_the_last_chunk_of_a_log_ends_at_its_end(tmp_path: Path):
    """The bytes after the last cut are one chunk, not cut before their last record (a chunk of that record
    alone cost a parser call per file); a last line without its newline is a chunk of its own."""
    from hangforensics.readers.logfile import iter_chunks

    log = VLLM / "v1-hung" / "server.log"
    data = log.read_bytes()
    assert data.endswith(b"\n")
    whole = list(iter_chunks(log, records=True))
    assert len(whole) == 1 and len(whole[0].lines) == data.count(b"\n")
    cut = tmp_path / "server.log"
    cut.write_bytes(data + b"(EngineCore_DP0 pid=3001) ERROR 05-16 11:25:4")
    chunks = list(iter_chunks(cut, records=True))
    assert [len(c.lines) for c in chunks] == [data.count(b"\n"), 1]
    # a byte range read to its end, in two chunks: the second is what is left after the first cut
    half = list(iter_chunks(log, records=True, chunk_bytes=len(data) // 2 + 100, end_offset=len(data)))
    assert sum(len(c.lines) for c in half) == data.count(b"\n") and len(half) == 2


def test_data_parallel_engine_cores_are_series(tmp_path: Path):
    with Store(":memory:") as st:
        ingest_paths(st, [engine(tmp_path, "v1-dp-one-stops"), engine(tmp_path, "v1-dp-aggregated-hung")])
        series = {(r["engine"], r["series"], r["engines"]) for r in st.query(
            "SELECT DISTINCT engine, series, engines FROM vllm_series")}
        assert series == {("v1-dp-one-stops", "DP0", None), ("v1-dp-one-stops", "DP1", None),
                          ("v1-dp-aggregated-hung", "", 2)}


def test_a_version_3_database_gets_its_stats_rows_back(tmp_path: Path):
    db = tmp_path / "h.duckdb"
    with Store(db) as st:
        ingest_paths(st, [engine(tmp_path, "v1-hung")])
        want = st.query("SELECT * EXCLUDE (collected_ts) FROM vllm_stats ORDER BY line")
    con = duckdb.connect(str(db))
    con.execute("DROP VIEW vllm_series")
    con.execute("DROP VIEW progress")
    con.execute("DROP VIEW progress_marks")
    con.execute("DROP VIEW vllm_stats")
    con.execute("DROP TABLE t_vllm_stats")
    for col in ("framework", "waiting_req", "kv_usage"):
        con.execute(f"ALTER TABLE stalls DROP COLUMN {col}")
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.close()
    with Store(db) as st:
        assert st.query("SELECT * EXCLUDE (collected_ts) FROM vllm_stats ORDER BY line") == want
        assert by_rule(run_rules(st))["stall-onset"][0]["ts"] == datetime(2026, 5, 16, 11, 20, 35)


# -- judging ----------------------------------------------------------------------------------------------
def test_hung_v1_engine_with_shm_waits_and_health_200(tmp_path: Path):
    found = analyze_folder(engine(tmp_path, "v1-hung"))
    assert shape(found) == [
        ("health-check-blind", "2026-05-16T11:20:40", "2026-05-16T11:24:40", ()),
        ("stall-onset", "2026-05-16T11:20:35", None, ()),
    ]
    stall = by_rule(found)["stall-onset"][0]
    assert stall["title"].endswith("with work pending (41 running, 57 waiting, KV cache 99.4 %)")
    for words in ("every 5.0 s, VLLM_LOG_STATS_INTERVAL", "still counted 41 running and 57 waiting",
                  "shared-memory broadcast", "the engine core died", "request(s) arrived after it"):
        assert words in stall["detail"], words
    health = by_rule(found)["health-check-blind"][0]
    assert health["count"] == 30 and "EngineDeadError gives 503" in health["detail"]


def test_quiet_v0_engine_is_stalled_by_its_last_counts_and_the_requests_after(tmp_path: Path):
    """V0 hung inside a step: no stats line at all after the last one, requests and probes go on."""
    found = analyze_folder(engine(tmp_path, "v0-quiet-hung"))
    assert shape(found) == [
        ("health-check-blind", "2026-02-03T14:11:49", "2026-02-03T14:21:37", ()),
        ("stall-onset", "2026-02-03T14:11:40", None, ()),
    ]
    detail = by_rule(found)["stall-onset"][0]["detail"]
    assert "counted 30 running and 9 waiting request(s) and none followed" in detail
    assert "162 request(s) arrived after it" in detail


def test_quiet_v0_engine_with_only_access_lines_after_is_judged_by_its_probes(tmp_path: Path):
    """Without any dated line after the stall, the /health answers (no time of their own) still say how
    long the server stayed up: their count times their interval."""
    lines = [ln for ln in lines_of("v0-quiet-hung") if "Added request" not in ln]
    found = analyze_folder(engine(tmp_path, "v0-quiet-hung", lines))
    assert shape(found) == [
        ("health-check-blind", "2026-02-03T14:11:40", "2026-02-03T14:11:40", ()),
        ("stall-onset", "2026-02-03T14:11:40", None, ()),
    ]
    f = by_rule(found)
    assert f["health-check-blind"][0]["count"] == 60
    assert "60 liveness probe(s) answered 200 after the last dated line, about every 10 s: the server stayed up " \
           "about 10.0 min more" in f["stall-onset"][0]["detail"]


def test_quiet_v0_engine_whose_last_line_counts_nothing_is_idle(tmp_path: Path):
    lines = lines_of("v0-quiet-hung")
    last = max(i for i, ln in enumerate(lines) if "Avg prompt throughput" in ln)
    lines[last] = re.sub(r"(Running|Pending): \d+ reqs", r"\1: 0 reqs", lines[last])
    lines = lines[:last + 1] + [ln for ln in lines[last + 1:] if "/health" in ln]
    assert analyze_folder(engine(tmp_path, "v0-quiet-hung", lines)) == []


def test_one_data_parallel_engine_core_stops_while_the_other_serves(tmp_path: Path):
    found = analyze_folder(engine(tmp_path, "v1-dp-one-stops"))
    assert shape(found) == [
        ("health-check-blind", "2026-07-21T16:40:30", "2026-07-21T16:52:00", ()),
        ("stall-onset", "2026-07-21T16:40:20", None, ("DP1",)),
    ]
    assert "DP1: the stats line at 2026-07-21 16:40:30 still counted 19 running" in found[0]["detail"] + \
        found[1]["detail"]


def _dp_lines(engine0_until: str, engine1: dict[str, str]) -> list[str]:
    """The data-parallel log with Engine 000's stats lines cut after ``engine0_until`` (then one stale line)
    and Engine 001's lines after 16:40:20 replaced by ``engine1`` (time -> stats)."""
    out = []
    for ln in lines_of("v1-dp-one-stops"):
        t = VLLM_TS.search(ln)
        hms = t.group(1)[6:] if t else ""
        if "Engine 000:" in ln and hms > engine0_until:
            if hms == "16:40:30":
                ln = re.sub(r"Avg prompt throughput: .*", "Avg prompt throughput: 0.0 tokens/s, Avg generation "
                            "throughput: 0.0 tokens/s, Running: 12 reqs, Waiting: 3 reqs, GPU KV cache usage: "
                            "55.0%, Prefix cache hit rate: 20.0%", ln)
            else:
                continue
        if "Engine 001:" in ln and hms > "16:40:20":
            if hms not in engine1:
                continue
            ln = re.sub(r"Avg prompt throughput: .*", engine1[hms], ln)
        out.append(ln.replace("EngineCore_DP1", "EngineCore_DP0").replace("pid=3002", "pid=3001"))
    return out


def test_one_engine_core_hangs_while_the_other_went_idle(tmp_path: Path):
    """The traffic ends; Engine 000 hangs (its core's shm waits), Engine 001 serves its last requests after
    that and goes idle: the stall is Engine 000's, at its own last progress; the idle core is no part of it."""
    idle = {"16:40:30": "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 150.2 tokens/s, Running: "
                        "0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 20.0%",
            "16:40:40": "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: "
                        "0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 20.0%"}
    lines = _dp_lines("16:40:20", idle)
    end = next(i for i, ln in enumerate(lines) if "16:40:30 [loggers.py" in ln)
    lines = lines[:end] + [ln for ln in lines[end:] if "POST" not in ln]
    found = analyze_folder(engine(tmp_path, "v1-dp-one-stops", lines))
    (stall,) = by_rule(found)["stall-onset"]
    assert (stall["ts"], stall["ranks"]) == (datetime(2026, 7, 21, 16, 40, 20), ["DP0"])
    assert {f["rule"] for f in found} == {"stall-onset", "health-check-blind"}


def test_both_engine_cores_stopping_is_one_stall(tmp_path: Path):
    stale = {"16:40:30": "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: "
                         "19 reqs, Waiting: 7 reqs, GPU KV cache usage: 66.1%, Prefix cache hit rate: 30.2%"}
    found = analyze_folder(engine(tmp_path, "v1-dp-one-stops", _dp_lines("16:40:10", stale)))
    assert shape(found) == [
        ("health-check-blind", "2026-07-21T16:40:30", "2026-07-21T16:50:30", ()),
        ("stall-onset", "2026-07-21T16:40:20", None, ("DP0", "DP1")),
    ]


def test_aggregated_data_parallel_stats_stall_as_one_engine(tmp_path: Path):
    assert shape(analyze_folder(engine(tmp_path, "v1-dp-aggregated-hung"))) == [
        ("health-check-blind", "2026-08-02T02:15:00", "2026-08-02T02:20:11", ()),
        ("stall-onset", "2026-08-02T02:15:00", None, ()),
    ]


@pytest.mark.parametrize(("name", "verdict"), [
    ("v1-healthy-idle", "Idle since 09:19:32: its last stats line counts no running and no waiting request"),
    ("v0-idle", "Idle since 10:06:18: its last stats line counts no running and no waiting request"),
    ("v1-slow-long-prompt", "Serving to the end of the evidence: the last stats line (13:25:10) shows 11234.5 prompt "
                            "and 0.0 generation tokens/s with 3 running and 4 waiting"),
])
def test_healthy_idle_and_slow_engines_have_no_finding(tmp_path: Path, name: str, verdict: str):
    found, s = summary(engine(tmp_path, name))
    assert found == []
    assert s["verdict"].startswith(verdict)


def test_a_restart_after_the_hang_keeps_the_hung_run(tmp_path: Path):
    """vLLM's start lines begin a new run: the restarted engine's progress does not hide the stall."""
    hung = lines_of("v1-hung")
    later = [_shifted(ln, timedelta(days=2, hours=3)) for ln in lines_of("v1-healthy-idle")]
    found = analyze_folder(engine(tmp_path, "v1-hung", hung + later))
    assert [(f["rule"], f["ts"]) for f in found if f["rule"] == "stall-onset"] == \
        [("stall-onset", datetime(2026, 5, 16, 11, 20, 35))]


def _shifted(line: str, by: timedelta) -> str:
    def move(m: re.Match) -> str:
        t = datetime.strptime(f"2026-{m.group(1)}", "%Y-%m-%d %H:%M:%S") + by
        return m.group(0).replace(m.group(1), t.strftime("%m-%d %H:%M:%S"))
    return VLLM_TS.sub(move, line)


def _collector_clock(lines: list[str]) -> list[datetime]:
    """A collector's time for each line: the payload's own time 8 h behind (UTC), the lines without one a
    few milliseconds after the line before them."""
    out, prev = [], datetime(2026, 1, 1)
    for ln in lines:
        m = VLLM_TS.search(ln)
        prev = (datetime.strptime(f"2026-{m.group(1)}", "%Y-%m-%d %H:%M:%S") - timedelta(hours=8)) if m \
            else prev + timedelta(milliseconds=5)
        out.append(prev)
    return out


@pytest.mark.parametrize("envelope", ["kubectl", "quote", "lineno_bracket"])
@pytest.mark.parametrize("name", ["v1-hung", "v0-quiet-hung", "v1-dp-one-stops"])
def test_a_wrapped_log_gives_the_same_findings(tmp_path: Path, name: str, envelope: str):
    plain = analyze_folder(engine(tmp_path / "plain", name))
    lines = lines_of(name)
    wrapped = analyze_folder(engine(tmp_path / "wrapped", name, wrap(lines, envelope, _collector_clock(lines))))
    assert [(f["rule"], f["ranks"]) for f in wrapped] == [(f["rule"], f["ranks"]) for f in plain]
    for a, b in zip(plain, wrapped, strict=True):
        for key in ("ts", "ts_end"):
            assert (a[key] is None) == (b[key] is None)
            assert a[key] is None or abs((a[key] - b[key]).total_seconds()) <= 1.0, (a, b)


def test_the_input_dump_is_kept_in_the_evidence_and_redacted_in_what_is_shown(tmp_path: Path):
    found, s = summary(engine(tmp_path, "v1-hung"))
    shown = " ".join([s["verdict"], *s["facts"], *s["capture_next"]] + [f["title"] + f["detail"] for f in found])
    assert "128006" not in shown
    with Store(":memory:") as st:
        ingest_paths(st, [engine(tmp_path / "again", "v1-hung")])
        dump = st.scalar("SELECT message FROM events WHERE message LIKE 'Dumping scheduler output%'")
    assert "prompt_token_ids=[128000, 128006" in dump                    # the evidence keeps what the file says
    out = redact_payloads(dump)
    assert "128006" not in out and "9906" not in out
    assert "req_id=chatcmpl-5d2e" in out and "sampling_params=SamplingParams(n=1, temperature=0.6" in out
    assert "new_token_ids=‹payload redacted: 14 chars›" in out


# -- stacks -----------------------------------------------------------------------------------------------
def _one_sided_log() -> list[str]:
    """The hung V1 log until its engine core gives up, with worker TP3's exception at the stall."""
    lines = lines_of("v1-hung")
    lines = lines[:next(i for i, ln in enumerate(lines) if "Dumping input data" in ln)]
    stale = next(i for i, ln in enumerate(lines) if "Avg generation throughput: 0.0" in ln)
    tag = "(Worker_TP3 pid=3123) ERROR 05-16 11:20:37 [multiproc_executor.py:596] "
    exc = [tag + "WorkerProc hit an exception.", tag + "Traceback (most recent call last):",
           tag + "RuntimeError: CUDA error: an illegal memory access was encountered"]
    return lines[:stale] + exc + lines[stale:]


def test_workers_in_all_reduce_while_a_peer_waits_for_work_is_a_one_sided_collective(tmp_path: Path):
    folder = engine(tmp_path, "v1-hung", _one_sided_log(), {"pyspy.txt": "pyspy-enginecore.txt"})
    with Store(":memory:") as st:
        ingest_paths(st, [folder])
        found = by_rule(run_rules(st))
        assert {r["rank"] for r in st.query("SELECT DISTINCT rank FROM stacks")} == \
            {"EngineCore_DP0", "TP0", "TP1", "TP2", "TP3"}
        verdict = st.scalar("SELECT verdict FROM engine_summaries")
    (sig,) = found["known-signature"]
    assert sig["signature"] == "one-sided-collective" and sig["ranks"] == ["TP3"]
    assert "TP0-2 (3 of 5 ranks in this capture) show GroupCoordinator.all_reduce, all_reduce" in sig["detail"]
    assert "their peer(s) TP3 are in no collective (in MessageQueue.acquire_read)" in sig["detail"]
    assert "matches the known signature one-sided-collective" in verdict
    assert not found.get("collective-desync") and not found.get("first-rank-stopped")


def test_every_worker_in_the_collective_is_no_one_sided_collective(tmp_path: Path):
    text = (VLLM / "stacks" / "pyspy-enginecore.txt").read_text()
    tp3 = text.index("Process 3123: VLLM::Worker_TP3")
    tp2 = text.index("Process 3122: VLLM::Worker_TP2")
    peer = text[tp2:].replace("3122", "3123").replace("Worker_TP2", "Worker_TP3")
    (tmp_path / "all.txt").write_text(text[:tp3] + peer + "\n--------------------------------------------------"
                                      "------------------------------\n" + text[tp2:])
    folder = engine(tmp_path, "v1-hung", _one_sided_log())
    shutil.copy(tmp_path / "all.txt", folder / "pyspy.txt")
    found = by_rule(analyze_folder(folder))
    assert "known-signature" not in found and found["stall-onset"]


def test_one_workers_stack_is_stated_and_its_peers_are_asked_for(tmp_path: Path):
    """One worker's faulthandler dump (no process named): no signature, but the summary says where it
    waits and capture-next asks for every worker and the engine core together."""
    found, s = summary(engine(tmp_path, "v1-hung", extra={"faulthandler.txt": "faulthandler-worker.txt"}))
    assert "known-signature" not in by_rule(found)
    assert s["verdict"] == ("Stalled at 11:20:35 with 41 requests running and 57 waiting (KV cache 99.4 %); a worker "
                            "(dump naming no rank: faulthandler.txt) waits in all_reduce (from "
                            "tensor_model_parallel_all_reduce).")
    first = s["capture_next"][0]
    assert first.startswith("py-spy dump --native of the EngineCore (VLLM::EngineCore*) and every worker")
    assert "not one process" in first and "never joined" in first and "--port 8000" in first
    assert any(c.startswith("a generation probe (a 1-token /v1/completions") for c in s["capture_next"])


def test_the_same_pattern_on_sglang_ranks_is_left_to_sglang_signatures(tmp_path: Path):
    text = (VLLM / "stacks" / "pyspy-enginecore.txt").read_text()
    text = text.replace("vllm/", "sglang/srt/").replace("VLLM::Worker_", "sglang::scheduler_")
    folder = tmp_path / "sglang-engine"
    folder.mkdir()
    (folder / "pyspy.txt").write_text(text)
    sigs = [f for f in analyze_folder(folder) if f["rule"] == "known-signature"]
    assert all(f["signature"] != "one-sided-collective" for f in sigs)


def test_the_report_draws_each_engine_core_as_a_progress_row(tmp_path: Path):
    from hangforensics import api

    res = api.report(engine(tmp_path, "v1-dp-one-stops"), tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert res.document["findings"] and ">DP0<" in html and ">DP1<" in html
    assert "vLLM stats lines with generation throughput" in html
