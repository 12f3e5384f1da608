"""The envelope stage of ingest (readers/payload.py): every envelope end to end through ``ingest``, the
line accounting in physical lines, collected times, access lines dated through their envelope, the kind of
wrapped dumps, resuming a grown CRI file, years, and the envelope invariance of findings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

import pytest
from conftest import DATA, LogWriter, analyze_folder
from envelope_wrappers import TIMED, WRAP_WIDTH, WRAPPERS, w_cri, w_kubectl, wrap
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hangforensics.ingest.pipeline as ingest
from hangforensics.ingest import load, parallel
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.readers.kinds import detect_kind
from hangforensics.store import Store

UTC8 = timedelta(hours=8)          # the payload prints local time (UTC+8), collectors UTC


# -- scenarios: test logs whose findings must not depend on their envelope -------------------------------
def stall() -> LogWriter:
    """Stalled with requests arriving, /health still 200, both ranks' hard watchdogs in one second."""
    w = LogWriter(tp=2)
    w.startup().traffic(10, 200).posts(202, 560).probes(205, 560)
    for r in range(2):
        w.watchdog(520, f"TP{r}")
    return w


def idle_leak() -> LogWriter:
    w = LogWriter(tp=2)
    w.startup().traffic(10, 120).probes(125, 200)
    w.idle_leak(201, "TP0").idle_leak(201, "TP1")
    return w


def nccl_timeout() -> LogWriter:
    """torch NCCL timeouts from three of four ranks after the batch lines stop."""
    w = LogWriter(tp=4)
    w.startup().traffic(10, 120).probes(130, 400, status=503)
    for r in (3, 1, 0):
        w.nccl_timeout(362, r)
    return w


def staggered() -> LogWriter:
    w = LogWriter(tp=4)
    w.startup().traffic(10, 100, ranks=("TP0", "TP1", "TP2", "TP3"))
    w.traffic(101, 106, ranks=("TP0", "TP1", "TP3"))
    w.posts(108, 400).probes(110, 400, status=503)
    return w


def vllm_hung() -> LogWriter:
    """A vLLM engine (year-less times) whose generation stopped while /health kept answering."""
    w = LogWriter(start="2026-05-01 10:00:00")
    for s in range(0, 130, 10):
        gen = 845.0 if s < 120 else 0.0
        w.raw(f"(APIServer pid=3164) INFO 05-01 10:{s // 60:02d}:{s % 60:02d} [loggers.py:259] Engine 000: Avg "
              f"prompt throughput: 512.3 tokens/s, Avg generation throughput: {gen} tokens/s, Running: 12 reqs, "
              f"Waiting: 0 reqs, GPU KV cache usage: 31.4%, Prefix cache hit rate: 12.0%")
    for m in range(3, 9):
        w.raw(f"(EngineCore_DP0 pid=3300) WARNING 05-01 10:{m:02d}:50 [shm_broadcast.py:466] No available shared "
              f"memory broadcast block found in 60 seconds. This typically happens when some processes are hanging "
              f"or doing some time-consuming work.")
        w.raw(f'(APIServer pid=3164) INFO:     127.0.0.1:{40000 + m} - "GET /health HTTP/1.1" 200 OK')
    return w


SCENARIOS = {"stall": stall, "idle_leak": idle_leak, "nccl_timeout": nccl_timeout, "staggered": staggered,
             "vllm_hung": vllm_hung}


def end_of(w: LogWriter) -> datetime:
    """The last time a scenario's lines show (its file is saved shortly after)."""
    stamps = [m.group(1) for s in w.lines if (m := re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", s))]
    return datetime.fromisoformat(stamps[-1]) if stamps else w.t0 + timedelta(minutes=10)


def write_engine(folder: Path, lines: list[str], mtime: datetime, name: str = "server.log") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.utime(path, (mtime.timestamp(), mtime.timestamp()))
    return folder


def key(findings: list[dict]) -> list[tuple]:
    return sorted((f["rule"], tuple(f["ranks"]), f["ts"], f["ts_end"]) for f in findings)


@cache
def plain_findings(scenario: str, tmp: str) -> list[tuple]:
    w = SCENARIOS[scenario]()
    return key(analyze_folder(write_engine(Path(tmp) / "plain" / scenario, w.lines, end_of(w) + timedelta(hours=1))))


def collector_clock(w: LogWriter) -> list[datetime]:
    """The collector stamps each line in UTC when it is written: the line's own time (SGLang, vLLM, glog), or
    for a line without one (a continuation, a bare access line) the last time before it."""
    out, now = [], w.t0
    for s in w.lines:
        if m := re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", s):
            now = datetime.fromisoformat(m.group(1))
        elif m := re.search(r"(?:INFO|WARNING) (\d\d)-(\d\d) (\d\d:\d\d:\d\d) ", s):
            now = datetime.fromisoformat(f"{w.t0.year}-{m.group(1)}-{m.group(2)} {m.group(3)}")
        elif m := re.match(r"\[rank\d+\]:\[[EWI](\d+)(\d\d) (\d\d:\d\d:\d\d)", s):
            now = datetime.fromisoformat(f"{w.t0.year}-{int(m.group(1)):02d}-{m.group(2)} {m.group(3)}")
        out.append(now - UTC8)
    return out


def wrapped_findings(scenario: str, envelope: str, tmp: Path) -> list[tuple]:
    w = SCENARIOS[scenario]()
    assert all(len(s) != WRAP_WIDTH for s in w.lines)     # a line of exactly the width would be a wrap
    lines = wrap(w.lines, envelope, collector_clock(w))
    folder = write_engine(tmp / envelope / scenario, lines, end_of(w) + timedelta(hours=1))
    return key(analyze_folder(folder))


# -- envelope invariance: the same evidence gives the same findings whatever its envelope -----------------
@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("plain"))


@pytest.mark.parametrize("envelope", list(WRAPPERS))
def test_every_envelope_gives_the_findings_of_the_plain_log(envelope: str, tmp_path: Path, plain_dir: str) -> None:
    # every envelope once, the scenarios in turn (the hypothesis test below mixes them further)
    scenario = list(SCENARIOS)[list(WRAPPERS).index(envelope) % len(SCENARIOS)]
    plain = plain_findings(scenario, plain_dir)
    assert plain, scenario                          # a scenario with findings to keep
    assert wrapped_findings(scenario, envelope, tmp_path) == plain


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scenario=st.sampled_from(list(SCENARIOS)), envelope=st.sampled_from(list(WRAPPERS)))
def test_property_envelope_invariance(scenario: str, envelope: str, tmp_path_factory: pytest.TempPathFactory,
                                      plain_dir: str) -> None:
    tmp = tmp_path_factory.mktemp("inv")
    assert wrapped_findings(scenario, envelope, tmp) == plain_findings(scenario, plain_dir)


# -- each envelope end to end: kind, envelope, accounting, collected times --------------------------------
def file_lines(path: Path) -> list[str]:
    """The file's physical lines as the reader numbers them (split on newlines only, CR of CRLF removed)."""
    return [s[:-1] if s.endswith("\r") else s for s in path.read_bytes().decode("utf-8").split("\n")]


def physical_lines(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def assert_accounting(st: Store) -> list[dict]:
    rows = st.query("SELECT * FROM sources ORDER BY path")
    for r in rows:
        assert r["lines"] == r["parsed_lines"] + r["unparsed_lines"] == physical_lines(Path(r["abs_path"])), r
        kept = st.query("SELECT line, text FROM unparsed WHERE engine = ? AND path = ? ORDER BY line",
                        [r["engine"], r["path"]])
        assert len(kept) == r["unparsed_lines"] == len({k["line"] for k in kept}), r
        if r["kind"] != "binary":           # unparsed keeps the file's own text, envelope included
            text = file_lines(Path(r["abs_path"]))
            assert all(text[k["line"] - 1] == k["text"] for k in kept), r
    return rows


@pytest.mark.parametrize("envelope", list(WRAPPERS))
def test_each_envelope_through_ingest(envelope: str, tmp_path: Path) -> None:
    w = stall()
    folder = write_engine(tmp_path / "eng", wrap(w.lines, envelope, w.t0 - UTC8), end_of(w))
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        (src,) = assert_accounting(st)
        # (Ray's tag before a head of SGLang records only, as this log's: the parser reads it, PREFIX_HEAD)
        expect = "none" if envelope == "ray" else WRAPPERS[envelope][1]
        assert (src["kind"], src["envelope"]) == ("server_log", expect)
        n = sum(1 for s in w.lines if " batch, " in s)
        assert st.scalar("SELECT count(*) FROM batches") == n
        assert st.scalar("SELECT count(*) FROM http_requests WHERE ts IS NOT NULL") == \
            sum(1 for s in w.lines if "HTTP/1.1" in s)
        timed = set(WRAPPERS[envelope][1].split("+")) & TIMED
        for table in ("batches", "http_requests", "events"):
            got = st.scalar(f"SELECT count(collected_ts) FROM {table}")
            assert (got == st.scalar(f"SELECT count(*) FROM {table}")) if timed else got == 0, table
        assert st.scalar("SELECT count(*) FROM stacks WHERE collected_ts IS NOT NULL") == (2 * bool(timed))
        # rows point at the physical line that holds their record
        text = file_lines(folder / "server.log")
        for r in st.query("SELECT line FROM batches"):
            assert "batch" in text[r["line"] - 1]
        if envelope in ("fenced", "details", "fenced+compose+kubectl"):     # prose and fences: unparsed
            assert src["unparsed_lines"] >= 4


def test_kubectl_collected_time_is_the_envelope_clock_and_ts_the_payload_clock(tmp_path: Path) -> None:
    w = LogWriter(tp=1).startup().traffic(10, 30)
    folder = write_engine(tmp_path / "eng", w_kubectl(w.lines, w.t0 - UTC8), end_of(w))
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        row = st.query("SELECT ts, collected_ts FROM batches ORDER BY line LIMIT 1")[0]
        assert row["ts"] == w.t0 + timedelta(seconds=10)                            # the payload's own time
        assert abs(row["collected_ts"] + UTC8 - w.t0) < timedelta(seconds=30)      # the collector's, in UTC
        assert st.scalar("SELECT envelope FROM sources") == "kubectl"


# -- accounting of split records --------------------------------------------------------------------------
LONG_REQ = "scheduler.cur_batch.reqs=[" + ", ".join(f"Req(rid={i:032x}, input_ids=[{i}])" for i in range(700)) + "]"


def cri_lines(lines: list[str], t0: datetime, limit: int = 16384) -> list[str]:
    """A pod log file: lines longer than ``limit`` split into P records, an F record ending each line."""
    out = []
    for i, s in enumerate(lines):
        ts = (t0 + timedelta(milliseconds=10 * i)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123+00:00"
        parts = [s[k:k + limit] for k in range(0, len(s), limit)] or [""]
        out += [f"{ts} stderr {'F' if k == len(parts) - 1 else 'P'} {p}" for k, p in enumerate(parts)]
    return out


def test_a_split_record_counts_its_physical_lines_parsed_or_unparsed(tmp_path: Path) -> None:
    w = LogWriter(tp=2)
    w.raw("x" * 40000)                          # no record: unparsed, one row per physical line (3 parts)
    w.startup().traffic(10, 60)
    w.line(61, "Scheduler debug info:", "TP0").raw("scheduler.cur_batch.batch_size()=6").raw(LONG_REQ)
    w.raw("self.max_total_num_tokens=372965, available_size=261871, evictable_size=105150, protected_size=0, "
          "session_held=0").traffic(62, 70).posts(72, 400)
    lines = cri_lines(w.lines, w.t0 - UTC8)
    assert sum(1 for s in lines if " stderr P " in s) == 2 + 2
    folder = write_engine(tmp_path / "eng", lines, end_of(w))
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        (src,) = assert_accounting(st)
        assert src["envelope"] == "cri" and src["lines"] == len(lines)
        assert [r["line"] for r in st.query("SELECT line FROM unparsed ORDER BY line")] == [1, 2, 3]
        # the 3-part Req line belongs to the debug-info record: parsed, the leak text read through it
        (leak,) = st.query("SELECT line, in_flight_batch_size FROM leak_reports")
        assert lines[leak["line"] - 1].endswith("Scheduler debug info:") and leak["in_flight_batch_size"] == 6
        debug = st.query("SELECT line, line_end FROM events WHERE kind = 'watchdog_debug_info'")[0]
        assert debug["line_end"] > debug["line"] + 3          # its continuation spans the split line's parts


def test_resume_of_a_grown_cri_file_waits_for_the_end_of_a_split_record(tmp_path: Path) -> None:
    w = LogWriter(tp=2)
    w.startup().traffic(10, 60)
    w.line(61, "Scheduler debug info:", "TP0").raw("scheduler.cur_batch.batch_size()=6").raw(LONG_REQ)
    w.raw("self.max_total_num_tokens=372965, available_size=261871, evictable_size=105150, protected_size=0, "
          "session_held=0").traffic(62, 70).posts(72, 400)
    lines = cri_lines(w.lines, w.t0 - UTC8)
    cut = next(i for i, s in enumerate(lines) if " stderr P " in s) + 2      # ends after the P records
    assert " stderr P " in lines[cut - 1] and " stderr F " in lines[cut]
    eng = tmp_path / "eng"
    eng.mkdir()
    log = eng / "server.log"
    log.write_text("\n".join(lines[:cut]) + "\n")            # a live file (written just now)
    with Store(tmp_path / "db.duckdb") as st:
        ingest_paths(st, [eng], mode="engine")
        src = st.query("SELECT * FROM sources")[0]
        assert src["lines"] == cut - 2 and src["read_bytes"] == len(("\n".join(lines[:cut - 2]) + "\n").encode())
        assert f"lines from {cut - 1} on are left for the next ingest" in src["note"]
        assert st.scalar("SELECT count(*) FROM unparsed") == 0
        with log.open("a") as f:                              # the file grows: the F part and more
            f.write("\n".join(lines[cut:]) + "\n")
        res = ingest_paths(st, [eng], mode="engine")
        assert res[0].files_read == 1
        (src,) = assert_accounting(st)
        grown = st.query("SELECT kind, line, line_end FROM events ORDER BY line")
        assert st.scalar("SELECT count(*) FROM leak_reports") == 1
        assert st.scalar("SELECT count(*) - count(DISTINCT line) FROM batches") == 0
        assert st.scalar("SELECT count(*) FROM unparsed") == 0
    with Store(":memory:") as whole:                           # the same as reading the final file at once
        ingest_paths(whole, [eng], mode="engine")
        assert whole.query("SELECT kind, line, line_end FROM events ORDER BY line") == grown


# -- access lines without a time of their own ---------------------------------------------------------------
def bare_access_log() -> tuple[LogWriter, list[float]]:
    """Batch lines with a time, access lines in uvicorn's default format (no time): their true times."""
    w = LogWriter(tp=1).startup()
    when = []
    for s in range(10, 100):
        w.batch(s)
        if s % 3 == 0:
            w.raw(f'INFO:     10.1.2.3:{40000 + s} - "POST /generate HTTP/1.1" 200 OK')
            when.append(s + 0.5)
    return w, when


def test_bare_access_lines_take_their_envelope_time_aligned_to_the_payload_clock(tmp_path: Path) -> None:
    w, when = bare_access_log()
    # the collector stamps every line at its true time, in UTC
    lines, k = [], 0
    for s in w.lines:
        m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", s)
        t = datetime.fromisoformat(m.group(1)) if m else w.t0 + timedelta(seconds=when[k])
        k += not m
        lines.append(w_kubectl([s], t - UTC8)[0])
    folder = write_engine(tmp_path / "eng", lines, end_of(w))
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        got = [r["ts"] for r in st.query("SELECT ts FROM http_requests ORDER BY line")]
        assert got == [w.t0 + timedelta(seconds=s) for s in when]        # on the payload clock, not UTC
        assert "dated by their envelope's time" in st.scalar("SELECT note FROM sources")


def test_a_file_without_dated_lines_takes_the_offset_of_its_engine(tmp_path: Path) -> None:
    w, _ = bare_access_log()
    t = w.t0 - UTC8
    main = w_kubectl(w.lines, collector_clock(w))
    # the API server's own file: an environment line and access lines, none with a time of its own
    api = ["Environment: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0",
           *(f'INFO:     127.0.0.1:{50000 + s} - "GET /health HTTP/1.1" 200 OK' for s in range(3))]
    api = [w_kubectl([s], t + timedelta(seconds=100 + i))[0] for i, s in enumerate(api)]
    write_engine(tmp_path / "eng", main, end_of(w))
    write_engine(tmp_path / "eng", api, end_of(w), "api.log")
    with Store(":memory:") as st:
        ingest_paths(st, [tmp_path / "eng"], mode="engine")
        got = st.query("SELECT ts, collected_ts FROM http_requests WHERE file LIKE '%api.log' ORDER BY line")
        assert [r["ts"] for r in got] == [w.t0 + timedelta(seconds=100 + i) for i in (1, 2, 3)]


def test_bare_access_lines_behind_a_viewer_column_use_the_same_alignment(tmp_path: Path) -> None:
    w, when = bare_access_log()
    lines, k = [], 0
    for s in w.lines:
        m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", s)
        t = datetime.fromisoformat(m.group(1)) if m else w.t0 + timedelta(seconds=when[k])
        k += not m
        lines.append(f" {t + timedelta(hours=3):%Y-%m-%d %H:%M:%S} {s}")     # the viewer's own clock
    folder = write_engine(tmp_path / "eng", lines, end_of(w))
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        assert st.scalar("SELECT envelope FROM sources") == "viewer_ts"
        got = [r["ts"] for r in st.query("SELECT ts FROM http_requests ORDER BY line")]
        # whole seconds: the viewer column prints no fraction
        assert got == [w.t0 + timedelta(seconds=int(s)) for s in when]


def test_bare_access_lines_without_an_envelope_are_dated_by_the_record_before_them(tmp_path: Path) -> None:
    w, when = bare_access_log()
    folder = write_engine(tmp_path / "eng", w.lines, end_of(w))
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        got = [r["ts"] for r in st.query("SELECT ts FROM http_requests ORDER BY line")]
        assert got == [w.t0 + timedelta(seconds=int(s)) for s in when]    # the batch line just before
        assert st.scalar("SELECT count(*) FROM http_requests WHERE collected_ts IS NOT NULL") == 0
        assert f"{len(when)} access line(s) without a time of their own: dated by the record before them" in \
            st.scalar("SELECT note FROM sources")


def test_vllm_bare_access_lines_are_dated_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hangforensics.readers import logfile
    monkeypatch.setattr(logfile, "CHUNK_BYTES", 600)                  # the dated line is in an earlier chunk
    w = vllm_hung()
    folder = write_engine(tmp_path / "eng", w.lines, end_of(w) + timedelta(days=1))
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        got = [r["ts"] for r in st.query("SELECT ts FROM http_requests ORDER BY line")]
        assert got == [datetime(2026, 5, 1, 10, m, 50) for m in range(3, 9)]


# -- the kind of wrapped dumps ------------------------------------------------------------------------------
PYSPY = ["Process 4121: sglang::scheduler_TP3", "Python v3.12.3 (/usr/bin/python3.12)", "",
         'Thread 4121 (idle): "MainThread"', "    ncclCommWindowRegister (libnccl.so.2)",
         "    _register_segments_for_comm (sglang/srt/distributed/device_communicators/pynccl_allocator.py:417)",
         "    Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)", "",
         'Thread 4190 (idle): "Thread-2"', "    wait (threading.py:359)"]


STACKS = ("SELECT thread_name, rank, line, (SELECT count(*) FROM frames f WHERE f.dump_id = s.dump_id AND "
          "f.thread_id = s.thread_id) AS n FROM stacks s ORDER BY line")


@pytest.mark.parametrize("envelope", ["quote", "compose", "fenced", "lineno_bracket", "lineno_pipe", "kubectl",
                                      "details", "quote+lineno", "quote+compose"])
@pytest.mark.parametrize("dump, kind", [("pyspy", "pyspy_dump"), ("faulthandler_fatal.txt", "faulthandler_dump"),
                                        ("torch_cpp_trace.txt", "native_trace")])
def test_a_wrapped_dump_is_read_as_the_dump_it_is(envelope: str, dump: str, kind: str, tmp_path: Path) -> None:
    plain = PYSPY if dump == "pyspy" else (DATA / "stacks" / dump).read_text().splitlines()
    folder = write_engine(tmp_path / "eng", wrap(plain, envelope), datetime(2026, 5, 1, 12), "notes.txt")
    assert detect_kind(folder / "notes.txt") == kind
    write_engine(tmp_path / "plain", plain, datetime(2026, 5, 1, 12), "notes.txt")
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        (src,) = assert_accounting(st)
        assert (src["kind"], src["envelope"]) == (kind, WRAPPERS[envelope][1])
        got = st.query(STACKS)
    with Store(":memory:") as st:
        ingest_paths(st, [tmp_path / "plain"], mode="engine")
        want = st.query(STACKS)
    assert [{k: r[k] for k in ("thread_name", "rank", "n")} for r in got] == \
        [{k: r[k] for k in ("thread_name", "rank", "n")} for r in want] and want
    # each thread at the physical line holding what the plain dump holds at its line
    text = file_lines(folder / "notes.txt")
    assert all(text[g["line"] - 1].endswith(plain[w["line"] - 1]) for g, w in zip(got, want, strict=True))


def test_wrapped_gpu_samples_and_capture_errors(tmp_path: Path) -> None:
    csv = ["timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]",
           *(f"2026/05/01 10:00:{s:02d}.000, {g}, 0 %, 71.52 W, 61234 MiB" for s in range(5) for g in range(2))]
    write_engine(tmp_path / "eng", wrap(csv, "fenced"), datetime(2026, 5, 1, 12), "gpu.txt")
    write_engine(tmp_path / "eng", wrap(["Error: Failed to get process executable name. Check that the process "
                                         "is running.", "exit status: 1"], "quote"), datetime(2026, 5, 1, 12),
                 "tp3.txt")
    with Store(":memory:") as st:
        ingest_paths(st, [tmp_path / "eng"], mode="engine")
        rows = {Path(r["path"]).name: r for r in assert_accounting(st)}
        assert (rows["gpu.txt"]["kind"], rows["gpu.txt"]["envelope"]) == ("gpu_samples", "markdown")
        assert st.scalar("SELECT count(*) FROM gpu_samples") == 10
        assert st.scalar("SELECT min(line) FROM gpu_samples") == 5                # behind prose and a fence
        assert (rows["tp3.txt"]["kind"], rows["tp3.txt"]["envelope"]) == ("capture_error", "markdown")
        assert "could not find the target process" in rows["tp3.txt"]["status"]


# -- years -------------------------------------------------------------------------------------------------
GLOG = ("[rank0]:[E{md} {hms}.634054422 ProcessGroupNCCL.cpp:709] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600119 "
        "milliseconds before timing out.")


def glog_years(tmp_path: Path, lines: list[str], mtime: datetime) -> list[int]:
    folder = write_engine(tmp_path / "eng", lines, mtime)
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        return [r["ts"].year for r in st.query("SELECT ts FROM events WHERE kind = 'torch_nccl' ORDER BY line")]


def test_glog_year_from_the_file_time_is_at_or_before_it(tmp_path: Path) -> None:
    # March lines in a file saved in December: this year; December lines saved in January: last year
    assert glog_years(tmp_path / "a", [GLOG.format(md="0315", hms="10:00:00")], datetime(2026, 12, 2)) == [2026]
    assert glog_years(tmp_path / "b", [GLOG.format(md="1231", hms="23:59:00")], datetime(2027, 1, 2)) == [2026]


def test_year_less_lines_take_the_year_from_their_journald_envelope(tmp_path: Path) -> None:
    # journald 'short' prints no year either: the file's time dates the envelope, the envelope the glog
    lines = [f"Dec 31 23:59:{s:02d} gpu-07 python3[41]: " + GLOG.format(md="1231", hms=f"23:59:{s:02d}")
             for s in range(50, 56)]
    lines += [f"Jan  1 00:00:0{s} gpu-07 python3[41]: " + GLOG.format(md="0101", hms=f"00:00:0{s}")
              for s in range(3)]
    assert glog_years(tmp_path, lines, datetime(2027, 3, 1)) == [2026] * 6 + [2027] * 3


def test_vllm_year_from_a_kubectl_envelope_is_the_nearest(tmp_path: Path) -> None:
    # pod on UTC-8: its 16:30 on Dec 31 is 00:30 on Jan 1 UTC; the file was saved months later
    vllm = ("(APIServer pid=1) INFO 12-31 16:30:{s:02d} [loggers.py:259] Engine 000: Avg prompt throughput: 1.0 "
            "tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs")
    lines = [f"2027-01-01T00:30:{s:02d}.000000000Z " + vllm.format(s=s) for s in range(5)]
    folder = write_engine(tmp_path / "eng", lines, datetime(2027, 6, 1))
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        assert {r["ts"].year for r in st.query("SELECT ts FROM events WHERE kind = 'vllm_stats'")} == {2026}


# torch < 2.3 prints no time: '[rank2]:[E ProcessGroupNCCL.cpp:523] [Rank 2] Watchdog caught ...'
TIMELESS = ("[rank{r}]:[E ProcessGroupNCCL.cpp:523] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=391772, OpType=_ALLGATHER_BASE, NumelIn=262144, NumelOut=262144, Timeout(ms)=120000) "
            "ran for 120311 milliseconds before timing out.")


def timeless_torch_times(tmp_path: Path, lines: list[str]) -> list[datetime | None]:
    folder = write_engine(tmp_path / "eng", lines, datetime(2026, 5, 1, 12))
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        return [r["ts"] for r in st.query("SELECT ts FROM events WHERE kind = 'torch_nccl' ORDER BY line")]


def test_timeless_torch_lines_take_their_envelope_time_on_the_payload_clock(tmp_path: Path) -> None:
    # journald short-iso in the host's zone (+0200), SGLang lines in local time: glog times from journald
    w = LogWriter(tp=1).startup().traffic(10, 40)
    lines = [f"{(datetime.fromisoformat(s[1:20]) if s.startswith('[') else w.t0):%Y-%m-%dT%H:%M:%S}+0200 gpu-3 "
             f"python3[77]: {s}" for s in w.lines]
    lines += [f"{w.t0 + timedelta(seconds=160):%Y-%m-%dT%H:%M:%S}+0200 gpu-3 python3[77]: " + TIMELESS.format(r=r)
              for r in (2, 0)]
    assert timeless_torch_times(tmp_path, lines) == [w.t0 + timedelta(seconds=160)] * 2


def test_timeless_torch_lines_without_an_envelope_take_the_record_before(tmp_path: Path) -> None:
    w = LogWriter(tp=1).startup().traffic(10, 40)
    lines = [*w.lines, TIMELESS.format(r=1), *LogWriter(tp=1).traffic(41, 42).lines, TIMELESS.format(r=3)]
    assert timeless_torch_times(tmp_path, lines) == [w.t0 + timedelta(seconds=40), w.t0 + timedelta(seconds=42)]
    assert timeless_torch_times(tmp_path / "alone", [TIMELESS.format(r=1)]) == [None]     # nothing dates it


# -- large wrapped logs on every core ----------------------------------------------------------------------
def test_parallel_split_of_a_wrapped_log_equals_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain.log"
    subprocess.run([sys.executable, str(Path(__file__).parents[1] / "bench" / "generate.py"), "big", str(plain),
                    "--mb", "2"], check=True)
    lines = plain.read_text().split("\n")[:-1]
    eng = tmp_path / "eng"
    write_engine(eng, w_cri(lines, datetime(2026, 5, 1)), datetime(2026, 5, 2))
    query = ("SELECT (SELECT count(*) FROM batches), (SELECT count(DISTINCT line) FROM batches), "
             "(SELECT sum(line) FROM http_requests), (SELECT count(collected_ts) FROM batches), "
             "(SELECT lines FROM sources), (SELECT unparsed_lines FROM sources), (SELECT envelope FROM sources)")
    with Store(tmp_path / "serial.duckdb") as st:
        ingest.ingest_paths(st, [eng], jobs=1)
        serial = st.con.execute(query).fetchall()
    assert serial[0][4] == physical_lines(eng / "server.log") and serial[0][6] == "cri"
    monkeypatch.setattr(ingest, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 1024)
    monkeypatch.setattr(load, "COMMIT_BYTES", 256 * 1024)
    with Store(tmp_path / "parallel.duckdb") as st:
        ingest.ingest_paths(st, [eng], jobs=2)
        assert st.con.execute(query).fetchall() == serial


# -- hostile wrapped input: never a traceback, every physical line accounted for -----------------------------
PIECES = ["2026-05-01T02:00:00.123456789Z ", " stderr P ", " stdout F ", "sglang-1  | ", "> ", "```", "<details>",
          '{"log":"', '\\n","stream":"stderr","time":"2026-05-01T02:00:00Z"}', "May  1 02:00:00 gpu-07 python3[1]: ",
          "<14>1 - - - - - - ", "[80746] ", " 1234 | ", "\x1b[32m", "\r", "[2026-05-01 10:00:00 TP0] ", "\t", "    "]


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(envelope=st.sampled_from(list(WRAPPERS)), data=st.data())
def test_property_mutated_wrapped_logs_are_accounted_for(envelope: str, data: st.DataObject) -> None:
    import tempfile

    lines = wrap(stall().lines[:80], envelope)
    for _ in range(data.draw(st.integers(0, 8))):
        i = data.draw(st.integers(0, len(lines) - 1))
        op = data.draw(st.sampled_from(["cut", "drop", "dup", "insert"]))
        if op == "cut":
            lines[i] = lines[i][:data.draw(st.integers(0, len(lines[i])))]
        elif op == "drop" and len(lines) > 1:
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        else:
            lines.insert(i, "".join(data.draw(st.lists(st.sampled_from(PIECES), max_size=4))))
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_engine(Path(tmp) / "eng", lines, datetime(2026, 5, 1, 12))
        with Store(":memory:") as st_:
            ingest_paths(st_, [folder], mode="engine")
            assert_accounting(st_)
