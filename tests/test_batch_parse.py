"""Small logs parsed several at a time (``ingest.batch_parse``) give each file exactly the rows and outcome of
its own parse: over every corpus of real and generated evidence, and in the cases where a file could take
something from the file before it (a record, a time, the record that dates an access line)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import DATA, EXAMPLES, SHARED
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hangforensics.ingest import batch_parse, parallel
from hangforensics.ingest.jobs import rows_inline
from hangforensics.ingest.plan import Plan, plan_files
from hangforensics.ingest.worker import parse_to_ipc
from hangforensics.parsers.sglang import sglang_log
from hangforensics.readers.layout import Workspace
from hangforensics.readers.payload import TIMED_LAYERS
from hangforensics.store import Store


def _rows(manifest: list[tuple[str, Any]]) -> dict[str, list]:
    """A result's tables as row dicts (spilled ones read back), in order; its resume points as they are."""
    out: dict[str, list] = {}
    for table, v in manifest:
        if table == "__checkpoint__":
            out.setdefault(table, []).append(v)
            continue
        t = rows_inline(v) if isinstance(v, bytes) else pa.ipc.open_file(v).read_all()
        out.setdefault(table, []).extend(t.to_pylist())
    return out


def _plans(root: Path, tmp: Path, hold_live_tail: bool = False) -> list[Plan]:
    db = tmp / f"plan-{abs(hash(root))}.duckdb"
    mode = "fleet" if root.is_dir() and all(p.is_dir() for p in root.iterdir()) else "auto"
    with Workspace() as ws, Store(db) as store:
        _, files = ws.resolve(root, mode)
        return [p for p in plan_files(store, files, [], hold_live_tail) if p.action == "read"]


def _compare(jobs: list, tmp: Path) -> int:
    """Each job's result from a batch against its own parse; returns how many files shared a parse."""
    joined: list[int] = []
    ways = {name: getattr(batch_parse, name) for name in ("_parse_together", "_scan_together")}

    def counting(together: Any) -> Any:
        def counted(ready: list) -> list:
            parts = together(ready)
            joined.append(len(ready))
            return parts
        return counted

    for name, together in ways.items():
        setattr(batch_parse, name, counting(together))
    try:
        got = batch_parse.parse_batch_to_ipc(jobs, str(tmp / "batch"))
    finally:
        for name, together in ways.items():
            setattr(batch_parse, name, together)
    for job, (manifest, outcome) in zip(jobs, got, strict=True):
        alone, alone_outcome = parse_to_ipc(job, str(tmp / "alone"))
        assert _rows(manifest) == _rows(alone), job.rel_path
        assert dataclasses.asdict(outcome) == dataclasses.asdict(alone_outcome), job.rel_path
    return sum(joined)


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "general parser"])
def test_every_corpus_small_log_gets_its_own_rows_from_a_shared_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      scanner: bool) -> None:
    """Plain logs are read together by the compiled scanner and the general parser (``_scan_together``), or,
    where the scanner cannot run, by the general parser alone (``_parse_together``)."""
    if not scanner:
        monkeypatch.setattr(batch_parse, "_scanner", lambda: None)
    roots = [d for d in sorted(DATA.iterdir()) if d.is_dir() and d.name != "golden"]
    roots += [d for d in (EXAMPLES / "fleet", SHARED / "formats") if d.is_dir()]
    assert len(roots) > 10
    shared = files = 0
    for root in roots:
        plans = [p for p in _plans(root, tmp_path) if parallel.batchable(p)]
        plans.sort(key=lambda p: p.st.st_size, reverse=True)
        for task in parallel.batched(plans):
            if isinstance(task, list):
                files += len(task)
                shared += _compare([p.job() for p in task], tmp_path)
    # most small logs of the corpora share a parse: the comparison is of something
    print(f"{files} small logs in batches, {shared} parsed together")
    assert files > 100 and shared > files // 3, (files, shared)


def _log(path: Path, lines: list[str], mtime: float | None = None) -> Path:
    path.write_text("\n".join(lines) + "\n")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


_DECODE = ("[2026-01-01 00:00:0{k} TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, "
           "gen throughput (token/s): 5.00, #queue-req: 0")


def _engine(tmp: Path, monkeypatch: pytest.MonkeyPatch, scanner: bool) -> Path:
    """An engine folder for a test's logs, read with the compiled scanner or without it."""
    if not scanner:
        monkeypatch.setattr(batch_parse, "_scanner", lambda: None)
    logs = tmp / "engine"
    logs.mkdir()
    return logs


def _jobs(tmp: Path, files: list[Path]) -> list:
    plans = _plans(tmp, tmp / "..")
    by_name = {p.file.abs_path.name: p for p in plans}
    return [by_name[f.name].job() for f in files]


def test_a_file_takes_times_and_dates_its_access_lines_from_its_own_records(tmp_path: Path) -> None:
    """The second file starts with an access line without a time and a torch glog line without a year, before
    its first SGLang-dated line: its own parse leaves the first undated (no record before it) and gives the
    second the year of its own later record; a shared parse must not take either from the first file's
    records (a year earlier)."""
    logs = tmp_path / "engine"
    logs.mkdir()
    first = _log(logs / "a.log", [
        "[2024-12-30 23:59:58 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, "
        "gen throughput (token/s): 5.00, #queue-req: 0",
        "[2024-12-30 23:59:59 TP0] Decode batch, #running-req: 1, #token: 11, token usage: 0.01, "
        "gen throughput (token/s): 5.00, #queue-req: 0",
    ])
    second = _log(logs / "b.log", [
        'INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK',
        "[rank0]:[E101 00:00:05.000000000 ProcessGroupNCCL.cpp:1] [PG 0 Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
        "for 600001 milliseconds before timing out.",
        "[2026-01-01 00:00:10 TP0] Decode batch, #running-req: 1, #token: 12, token usage: 0.01, "
        "gen throughput (token/s): 5.00, #queue-req: 0",
    ])
    jobs = _jobs(logs, [first, second])
    assert all(parallel.batchable(p) for p in _plans(logs, tmp_path))
    assert _compare(jobs, tmp_path) == 2          # parsed together, and each as it is alone


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "general parser"])
def test_each_file_of_a_shared_parse_keeps_its_own_release_and_clock_steps(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        scanner: bool) -> None:
    """What the records say of a file as a whole is worked out for all the files of a batch at once: each
    file's release (its own traits, its PP-before-TP ranks) and its clock's steps back, none taken from the
    file before or after it."""
    if not scanner:
        monkeypatch.setattr(batch_parse, "_scanner", lambda: None)
    logs = tmp_path / "engine"
    logs.mkdir()

    def decode(t: str, sep: str = ",", extra: str = "", ranks: str = "TP0") -> str:
        return (f"[2026-01-01 00:00:{t} {ranks}] Decode batch{sep} #running-req: 1, #token: 10, token usage: 0.01, "
                f"{extra}gen throughput (token/s): 5.00, #queue-req: 0")

    newest = _log(logs / "a.log", [decode(f"0{k}", extra="#pending-token: 0, ") for k in range(4)])
    stepped = _log(logs / "b.log", [decode("10", "."), decode("11", "."), decode("05", "."), decode("06", ".")])
    pp_first = _log(logs / "c.log", [decode(f"2{k}", ranks="PP0 TP1") for k in range(4)])
    jobs = _jobs(logs, [newest, stepped, pp_first])
    assert _compare(jobs, tmp_path) == 3          # parsed together, each outcome as alone
    got = batch_parse.parse_batch_to_ipc(jobs, str(tmp_path / "batch"))
    outcomes = [o for _, o in got]
    assert [o.release for o in outcomes] == ["0.5.23", "0.4.6", "0.5.10"]
    assert [o.notes.backwards for o in outcomes] == [0, 1, 0]
    assert outcomes[1].notes.largest_back == (6.0, 3)


def test_a_newer_releases_trait_on_a_files_bulk_lines_is_that_files_alone(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A 0.5.23 trait on a batch line (or an access line's path) amid a file's bulk lines, among its first
    RELEASE_RECORDS messages or past them (not looked at), in files read together: each file's release is its
    own, as read alone (the bulk messages are searched without being cut out: ``sglang_releases``)."""
    monkeypatch.setattr(sglang_log, "RELEASE_RECORDS", 12)

    def line(k: int, extra: str = "", path: str = "/generate") -> str:
        if k % 3 == 2:
            return f'[2026-01-01 00:00:{k:02d}] INFO:     10.0.0.1:5000 - "POST {path} HTTP/1.1" 200 OK'
        return (f"[2026-01-01 00:00:{k:02d} TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, "
                f"accept rate: 0.5, gen throughput (token/s): 5.00, #queue-req: 0{extra}")

    logs = tmp_path / "engine"
    logs.mkdir()
    plain = [line(k) for k in range(30)]
    early, late, access = list(plain), list(plain), list(plain)
    early[6] = line(6, ", fwd occupancy: 0.9")
    late[25] = line(25, ", fwd occupancy: 0.9")                     # past the first 12 messages
    access[8] = line(8, path="/cur_batch_for_debug")
    files = [_log(logs / f"{name}.log", lines)
             for name, lines in (("a", early), ("b", plain), ("c", late), ("d", access))]
    jobs = _jobs(logs, files)
    assert _compare(jobs, tmp_path) == 4          # parsed together, each outcome as alone
    outcomes = [o for _, o in batch_parse.parse_batch_to_ipc(jobs, str(tmp_path / "batch"))]
    assert [o.release for o in outcomes] == ["0.5.23", "0.5.5", "0.5.5", "0.5.23"]


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "general parser"])
def test_files_whose_first_lines_would_continue_the_record_before_share_a_parse_with_their_own_heads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scanner: bool) -> None:
    """A file that starts with no record (a paste cut inside a traceback, a py-spy dump's later part, a bare
    leak warning, a stray line, a torchrun summary's header) after a file that ends inside a record
    that would take those lines: each file's head is its own, read as when the file is read alone (unparsed
    lines, or the records a head makes: a bare traceback's, a headerless dump's, a leak warning's, a summary's),
    and every file shares the parse."""
    logs = _engine(tmp_path, monkeypatch, scanner)

    def dated(k: int, msg: str) -> str:
        return f"[2026-01-01 00:00:{k:02d} TP0] {msg}"

    decode = "Decode batch, #running-req: 1, #token: 10, token usage: 0.01, gen throughput (token/s): 5.00, " \
        "#queue-req: 0"
    tb_open = dated(0, "Scheduler hit an exception: Traceback (most recent call last):")
    frame = '  File "/usr/lib/python3/site-packages/sglang/srt/managers/scheduler.py", line 9, in event_loop'
    glog = ("[rank0]:[E101 00:00:05.000000000 ProcessGroupNCCL.cpp:1] [PG 0 Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
            "ran for 600001 milliseconds before timing out.")
    summary = ["[rank0]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
               "============================================================", "job.py FAILED",
               "------------------------------------------------------------", "Failures:", "  <NO_OTHER_FAILURES>"]
    leak = ("/sgl/python/sglang/srt/managers/scheduler.py:1326: UserWarning: token_to_kv_pool memory leak "
            "detected! available_size=10, max_total_num_tokens=20")
    files = [
        _log(logs / "a.log", [dated(1, decode), tb_open, frame]),
        _log(logs / "b.log", ["Traceback (most recent call last):", frame, "ValueError: b", dated(2, decode)]),
        _log(logs / "c.log", [dated(3, decode), tb_open, frame]),
        _log(logs / "d.log", ["    forward (sglang/srt/models/llama.py:300)",
                              "    run_batch (sglang/srt/managers/scheduler.py:900)",
                              'Thread 0x7F00AA (idle): "Thread-1"', "    wait (threading.py:320)",
                              dated(4, decode), tb_open]),
        _log(logs / "e.log", [leak, "  warnings.warn(", dated(5, decode), glog]),
        _log(logs / "f.log", ["", "    at the end of the paste above", dated(6, decode), *summary]),
        _log(logs / "g.log", ["Root Cause (first observed failure):", "[0]:", "  rank      : 0 (local_rank: 0)",
                              "  exitcode  : -9 (pid: 5362)  (SIGKILL)", dated(7, decode),
                              dated(8, "Load weight begin."), leak]),
        # (2024's second leak line starts a warning only where nothing takes it: a head)
        _log(logs / "h.log", ["KV cache pool leak detected!", dated(9, decode)]),
    ]
    jobs = _jobs(logs, files)
    assert _compare(jobs, tmp_path) == len(files)     # all parsed together, each as it is alone
    got = {job.rel_path.rsplit("/", 1)[-1]: _rows(manifest) for job, (manifest, _) in
           zip(jobs, batch_parse.parse_batch_to_ipc(jobs, str(tmp_path / "batch")), strict=True)}
    # the heads made records of their own (not the tails of the file before's)
    assert [e["line"] for e in got["b.log"]["events"] if e["kind"] == "scheduler_exception"] == [1]
    assert {s["line"] for s in got["d.log"]["stacks"]} == {1, 3}
    assert [e["line"] for e in got["e.log"]["events"] if e["kind"] == "mem_leak_warning"] == [1]
    assert [e["line"] for e in got["g.log"]["events"] if e["kind"] == "child_failed"] == [1]
    assert [e["line"] for e in got["h.log"]["events"] if e["kind"] == "mem_leak_warning"] == [1]
    assert [u["line"] for u in got["f.log"]["unparsed"]] == [1, 2]      # before any record: no record's


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "general parser"])
def test_live_logs_share_a_parse_and_leave_their_unfinished_last_line(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      scanner: bool) -> None:
    """A fleet copied in just before the scan is all live (written minutes ago): its small logs still share a
    parse, and each leaves what its own parse leaves for the next ingest, a last line without its newline
    (plain, or behind a collector's envelope), with the same bytes read and notes."""
    if not scanner:
        monkeypatch.setattr(batch_parse, "_scanner", lambda: None)
    logs = tmp_path / "engine"
    logs.mkdir()

    def decode(k: int) -> str:
        return (f"[2026-01-01 00:00:{k:02d} TP0] Decode batch, #running-req: 1, #token: {k}, token usage: 0.01, "
                "gen throughput (token/s): 5.00, #queue-req: 0")

    def docker(line: str) -> str:
        return json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-01-01T00:00:00.000000000Z"})

    whole = _log(logs / "a.log", [decode(k) for k in range(3)])
    unfinished = logs / "b.log"
    unfinished.write_text("\n".join(decode(k) for k in range(3, 6)) + "\n" + decode(6)[:40])
    wrapped = _log(logs / "c.log", [docker(decode(k)) for k in range(7, 10)])
    wrapped_unfinished = logs / "d.log"
    wrapped_unfinished.write_text("\n".join(docker(decode(k)) for k in range(10, 30)) + "\n" + docker(decode(30))[:50])
    files = [whole, unfinished, wrapped, wrapped_unfinished]
    plans = {p.file.abs_path.name: p for p in _plans(logs, tmp_path, hold_live_tail=True)}
    assert all(parallel.batchable(p) and p.job().hold_partial for p in plans.values())
    jobs = [plans[f.name].job() for f in files]
    assert _compare(jobs, tmp_path) == 4          # parsed together, each as alone
    got = batch_parse.parse_batch_to_ipc(jobs, str(tmp_path / "batch"))
    assert [o.read_bytes for _, o in got] == [f.stat().st_size - len(f.read_bytes().rpartition(b"\n")[2])
                                              for f in files]
    assert [o.notes.held_back > 0 for _, o in got] == [False, True, False, True]
    assert [len(_rows(m)["batches"]) for m, _ in got] == [3, 3, 3, 20]


def test_tasks_batch_only_small_whole_logs_and_start_with_the_costliest(tmp_path: Path) -> None:
    logs = tmp_path / "fleet"
    for k in range(5):
        (logs / f"e{k}").mkdir(parents=True)
        _log(logs / f"e{k}" / "server.log", ["[2026-01-01 00:00:00 TP0] Load weight begin."] * (k + 1))
    line = "[2026-01-01 00:00:00 TP0] Load weight begin.\n"
    # a plain log beyond BATCH_FILE_BYTES, within PLAIN_BATCH_FILE_BYTES: the scanner reads it in a batch too
    mid = logs / "e1" / "mid.log"
    mid.write_text(line * (2 * batch_parse.BATCH_FILE_BYTES // len(line)))
    big = logs / "e0" / "big.log"                                              # beyond PLAIN_BATCH_FILE_BYTES
    big.write_text(line * (batch_parse.PLAIN_BATCH_FILE_BYTES // len(line) + 10))
    # behind kubectl's prefix, beyond BATCH_FILE_BYTES: alone
    wrapped = logs / "e2" / "pod.log"
    wrapped.write_text(("2026-01-01T00:00:00.123456789Z " + line) * (2 * batch_parse.BATCH_FILE_BYTES // len(line)))
    plans = _plans(logs, tmp_path)
    tasks = parallel.batched(sorted(plans, key=parallel._read_cost, reverse=True))
    singles = [t for t in tasks if not isinstance(t, list)]
    batches = [t for t in tasks if isinstance(t, list)]
    assert sorted(p.file.abs_path for p in singles) == sorted([big, wrapped])
    assert len(batches) == 1 and len(batches[0]) == 6 and mid in [p.file.abs_path for p in batches[0]]
    ordered = sorted(tasks, key=parallel._task_cost, reverse=True)
    assert ordered[0] is batches[0] or ordered[0] is singles[0]
    assert parallel._task_cost(batches[0]) > 5 * parallel.FILE_COST


# Lines whose record depends on what comes before them (a head of its own, or the tail of the record above):
# dated records of each kind, the lines that continue them, and those a file's head makes records of.
_LINES = [
    "[2026-01-01 00:00:0{k} TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, "
    "gen throughput (token/s): 5.00, #queue-req: 0",
    "[2026-01-01 00:00:0{k} TP1] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/usr/lib/python3/site-packages/sglang/srt/managers/scheduler.py", line {k}, in event_loop',
    "Traceback (most recent call last):", "ValueError: b", "", "    at the end of the paste above",
    "    forward (sglang/srt/models/llama.py:30{k})", 'Thread 0x7F00AA (idle): "Thread-{k}"',
    "/sgl/python/sglang/srt/managers/scheduler.py:1326: UserWarning: token_to_kv_pool memory leak detected! "
    "available_size=10, max_total_num_tokens=20", "KV cache pool leak detected!",
    "[rank0]:[E101 00:00:0{k}.000000000 ProcessGroupNCCL.cpp:1] [PG 0 Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
    "for 600001 milliseconds before timing out.",
    "  what():  [PG 0 Rank 0] Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught "
    "collective operation timeout",
    "[rank0]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "Root Cause (first observed "
    "failure):", "[0]:", "  exitcode  : -9 (pid: 5362)  (SIGKILL)",
    "INFO 01-01 00:00:0{k} [metrics.py:345] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 "
    "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, CPU KV cache usage: 0.0%",
    'INFO:     127.0.0.1:4000{k} - "GET /health HTTP/1.1" 200 OK',
]
_FIRSTS = [0, 1]                # a file begins with a dated record, so that its kind is a server log


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.tuples(st.sampled_from(_FIRSTS), st.lists(st.tuples(st.integers(0, len(_LINES) - 1),
                                                                             st.integers(0, 9)), max_size=12),
                                st.booleans(), st.booleans()), min_size=2, max_size=6))
def test_property_any_files_share_a_parse_and_each_gets_its_own_rows(tmp_path: Path,
                                                                     files: list[tuple[int, list, bool, bool]]) -> None:
    """Small logs of lines whose records depend on the lines before them (and heads of every kind behind a
    first dated line, or cut off: ``headless``), some ending without a newline (``cut``), in any order: each
    file gets from a shared parse the rows and outcome its own parse gives."""
    logs = Path(tempfile.mkdtemp(dir=tmp_path))           # (an example may be tried twice)
    paths, alone = [], set()
    for k, (first, lines, headless, cut) in enumerate(files):
        text = [_LINES[i].format(k=d) for i, d in lines]
        body = text if headless and text else [_LINES[first].format(k=k), *text]
        path = logs / f"f{k}.log"
        data = "\n".join(body) + ("" if cut else "\n")
        path.write_text(data)
        if "\n" in data and not data.endswith("\n"):   # (its last line, without a newline, read after the rest:
            alone.add(path.name)                        # a plain file shares a parse only when no record takes it)
        paths.append(path)
    plans = {p.file.abs_path.name: p for p in _plans(logs, tmp_path)}
    jobs = [plans[f.name].job() for f in paths if f.name in plans and parallel.batchable(plans[f.name])]
    ways: dict[tuple[bool, bool], int] = {}     # (a file sniffed behind an envelope is read apart from plain ones)
    for job in jobs:
        # (a file whose envelope holds its last lines back, a hard wrap that may go on, is read as usual)
        if job.abs_path.name not in alone and batch_parse._prepared(job) is not None:
            way = (not job.envelope.layers, bool(set(job.envelope.layers) & TIMED_LAYERS))
            ways[way] = ways.get(way, 0) + 1
    if len(jobs) >= 2:
        assert _compare(jobs, tmp_path) >= sum(n for n in ways.values() if n > 1)


# envelopes a small log comes behind (a paste in a ticket, a collector's prefix with its own time or without)
_WRAPS = {
    "markdown": lambda k, lines: ["The scheduler stopped here:", "```", *lines],
    "kubectl": lambda k, lines: [f"2026-01-01T00:00:0{k}.{n:09d}Z {line}" for n, line in enumerate(lines)],
    "compose": lambda k, lines: [f"sglang-{k}  | {line}" for line in lines],
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.tuples(st.sampled_from(sorted(_WRAPS)), st.sampled_from(_FIRSTS),
                                st.lists(st.tuples(st.integers(0, len(_LINES) - 1), st.integers(0, 9)), max_size=10),
                                st.booleans()), min_size=2, max_size=6))
def test_property_logs_behind_an_envelope_whose_last_line_starts_a_record_share_a_parse(
        tmp_path: Path, files: list[tuple[str, int, list, bool]]) -> None:
    """Small logs behind an envelope (Markdown, kubectl's times, compose's prefix), some ending without a
    newline on any line (``cut``): a record's start, a record's continuation, a dump's line.  Each gets from a
    shared parse the rows and outcome its own parse gives: its last line is read after the rest, with the
    context the rest left."""
    logs = Path(tempfile.mkdtemp(dir=tmp_path))
    paths = []
    for k, (wrap, first, lines, cut) in enumerate(files):
        body = _WRAPS[wrap](k, [_LINES[first].format(k=k), *(_LINES[i].format(k=d) for i, d in lines)])
        path = logs / f"f{k}.{'md' if wrap == 'markdown' else 'log'}"
        path.write_text("\n".join(body) + ("" if cut else "\n"))
        paths.append(path)
    plans = {p.file.abs_path.name: p for p in _plans(logs, tmp_path)}
    jobs = [plans[f.name].job() for f in paths if f.name in plans and parallel.batchable(plans[f.name])]
    ways: dict[tuple[bool, bool], int] = {}     # the files read alike, which share one parse
    for job in jobs:
        r = batch_parse._prepared(job)
        # (one its envelope holds lines back is read as usual; a plain one whose last line starts a record too)
        if r is not None and not (r.pay.plain and r.tail is not None):
            way = (r.pay.plain, r.pay.collected_ts is None)
            ways[way] = ways.get(way, 0) + 1
    if len(jobs) >= 2:
        assert _compare(jobs, tmp_path) >= sum(n for n in ways.values() if n > 1)


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "general parser"])
def test_a_one_line_log_without_its_newline_shares_a_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          scanner: bool) -> None:
    """A log of one line without a newline (a one-line paste) is one chunk: it shares the parse, and the next
    file's first line is not glued to it (the scanner reads the files' bytes one after the other)."""
    logs = _engine(tmp_path, monkeypatch, scanner)
    line = _DECODE
    one = logs / "a.log"
    one.write_text(line.format(k=1))
    files = [one, _log(logs / "b.log", [line.format(k=2), line.format(k=3)])]
    jobs = _jobs(logs, files)
    assert _compare(jobs, tmp_path) == 2          # parsed together, each as alone
    got = batch_parse.parse_batch_to_ipc(jobs, str(tmp_path / "batch"))
    assert [len(_rows(m)["batches"]) for m, _ in got] == [1, 2]


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "general parser"])
def test_a_paste_whose_last_line_has_no_newline_shares_a_parse_when_no_record_takes_that_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scanner: bool) -> None:
    """A log's last line without its newline is a chunk of its own, read after the rest. When no record takes
    it (a line cut mid-word) it adds one unparsed row, and the file shares the parse: plain, or behind
    Markdown (whose unparsed lines keep their text, read back from the envelope as it was after the rest).
    One that starts a record is read with the context the rest left: behind an envelope it is parsed after
    the joint parse with that context (the rest's last time, release, and the record that dates an access
    line printed without a time); a plain log, whose own parse reads it with the compiled scanner's group,
    is parsed alone."""
    logs = _engine(tmp_path, monkeypatch, scanner)
    decode = _DECODE
    access = 'INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK'
    texts = {
        "a.log": [decode.format(k=1), "an odd line", '  File "/us'],
        "b.log": [decode.format(k=2), decode.format(k=3)],                # its last line is a record
        "c.md": ["It hangs here:", "```", decode.format(k=4), "some words", "```", "and then it stops wi"],
        "d.md": ["Again:", "```", decode.format(k=5), "more words", "```", "cut mid-wo"],
        "e.log": [decode.format(k=6), "a last line with its newline"],
        "f.md": ["Then:", "```", decode.format(k=7), access],            # a record, dated by the one before
        "g.md": ["And:", "```", decode.format(k=8), "```", decode.format(k=9)],
    }
    for name, lines in texts.items():
        (logs / name).write_text("\n".join(lines) + ("\n" if name == "e.log" else ""))
    plans = {p.file.abs_path.name: p for p in _plans(logs, tmp_path)}
    jobs = [plans[name].job() for name in texts]
    assert [batch_parse._prepared(j).tail is not None for j in jobs] == [True, True, True, True, False, True, True]
    assert _compare(jobs, tmp_path) == 6          # all but b.log, each as alone
    got = {j.rel_path: _rows(m) for j, (m, _) in zip(jobs, batch_parse.parse_batch_to_ipc(
        jobs, str(tmp_path / "batch")), strict=True)}
    assert [(u["line"], u["text"]) for u in got["c.md"]["unparsed"]] == [
        (1, "It hangs here:"), (2, "```"), (4, "some words"), (5, "```"), (6, "and then it stops wi")]
    assert len(got["b.log"]["batches"]) == 2
    assert [(r["line"], r["ts"].second) for r in got["f.md"]["http_requests"]] == [(4, 7)]
    assert [(r["line"], r["ts"].second) for r in got["g.md"]["batches"]] == [(3, 8), (5, 9)]


def test_a_batch_holds_logs_read_the_same_way_so_that_it_is_one_joint_parse(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain logs and logs behind an envelope (with its own times, or without) are parsed together only with
    their like: a batch of them all was three joint parses, each costing a parse's fixed queries; batched by
    the way planning says they are read, it is one each."""
    logs = tmp_path / "fleet"
    decode = "[2026-01-01 00:00:0{k} TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, " \
        "gen throughput (token/s): 5.00, #queue-req: 0"
    ways = {
        "plain": lambda t: t,
        "docker": lambda t: json.dumps({"log": t + "\n", "stream": "stderr", "time": "2026-01-01T00:00:00.5Z"}),
        "markdown": lambda t: t,
    }
    for k in range(12):
        way = list(ways)[k % 3]
        (logs / f"e{k}").mkdir(parents=True)
        lines = [ways[way](decode.format(k=j)) for j in range(k % 5 + 2)]
        if way == "markdown":
            lines = ["The scheduler hung:", "```", *lines, "```"]
        _log(logs / f"e{k}" / "server.log", lines)
    plans = _plans(logs, tmp_path)
    tasks = parallel.batched(sorted(plans, key=parallel._read_cost, reverse=True))
    batches = [t for t in tasks if isinstance(t, list)]
    assert sorted(len(b) for b in batches) == [4, 4, 4]
    assert all(len({p.envelope.name for p in b}) == 1 for b in batches)
    joined: list[int] = []
    def counting(together: Any) -> Any:
        def counted(ready: list) -> list:
            joined.append(len(ready))
            return together(ready)
        return counted

    for name in ("_parse_together", "_scan_together"):
        monkeypatch.setattr(batch_parse, name, counting(getattr(batch_parse, name)))
    for b in batches:
        batch_parse.parse_batch_to_ipc([p.job() for p in b], str(tmp_path / "batch"))
    assert joined == [4, 4, 4]


@pytest.mark.parametrize("limit, prefix", [("BATCH_FILES", ""), ("PLAIN_BATCH_BYTES", ""),
                                           ("BATCH_BYTES", "2026-01-01T00:00:00.123456789Z ")],
                         ids=["files", "bytes of plain logs", "bytes of logs behind kubectl"])
def test_a_batch_stays_within_its_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str,
                                         prefix: str) -> None:
    logs = tmp_path / "fleet"
    for k in range(7):
        (logs / f"e{k}").mkdir(parents=True)
        _log(logs / f"e{k}" / "server.log", [prefix + "[2026-01-01 00:00:00 TP0] Load weight begin."] * 50)
    plans = _plans(logs, tmp_path)
    size = plans[0].st.st_size
    monkeypatch.setattr(parallel, limit, 3 if limit == "BATCH_FILES" else 3 * size)
    tasks = parallel.batched(plans)
    assert [len(t) if isinstance(t, list) else 1 for t in tasks] == [3, 3, 1]


def test_a_batch_whose_joint_parse_fails_reads_each_file_as_usual(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An error in the joint parse (a bug of its own) costs no file: each is read again as it is alone."""
    logs = tmp_path / "engine"
    logs.mkdir()
    files = [_log(logs / f"{k}.log", [f"[2026-01-01 00:00:0{k} TP0] Load weight begin."] * 3) for k in range(3)]

    def broken(ready: list) -> tuple:
        raise RuntimeError("a bug of the joint parse")

    monkeypatch.setattr(batch_parse, "_parse_together", broken)
    monkeypatch.setattr(batch_parse, "_scan_together", broken)
    jobs = _jobs(logs, files)
    got = batch_parse.parse_batch_to_ipc(jobs, str(tmp_path / "batch"))
    for job, (manifest, outcome) in zip(jobs, got, strict=True):
        alone, alone_outcome = parse_to_ipc(job, str(tmp_path / "alone"))
        assert _rows(manifest) == _rows(alone) and outcome == alone_outcome
        assert _rows(manifest)["events"]


def test_the_first_report_of_a_collective_does_not_depend_on_which_file_loaded_first(tmp_path: Path) -> None:
    """Two files of one engine report the same timeout at the same time (a log and a paste of it): the
    ``collectives`` view names the first by file and line, whichever file was loaded first (parser workers
    finish files in any order, and batches change it)."""
    from conftest import LogWriter

    from hangforensics.ingest.pipeline import ingest_files
    from hangforensics.readers.layout import Workspace

    engine = tmp_path / "e1"
    LogWriter().startup().traffic(10, 60).nccl_timeout(300, 0).write(engine, "server.log")
    LogWriter().line(5, "pasted from the on-call channel").nccl_timeout(300, 0).write(engine, "a-paste.log")
    picked = []
    for order in (1, -1):
        with Workspace() as ws, Store(":memory:") as store:
            root, files = ws.resolve(engine, "engine")
            assert len(files) == 2
            ingest_files(store, root, files[::order])
            picked.append(store.query("SELECT path, line, records FROM collectives WHERE seq = 1558546"))
    assert picked[0] == picked[1] and picked[0][0]["path"].endswith("a-paste.log"), picked


def _busy_log(path: Path, mb: float, seed: int) -> Path:
    """A plain log of ``mb`` MB: batch and access lines, and now and then a line that starts or continues a
    record the general parser reads (``_LINES``)."""
    import random

    rng = random.Random(seed)
    out, size, t = [], 0, 0
    while size < mb * 1e6:
        t += 1
        stamp = f"2026-01-01 {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
        line = (f"[{stamp} TP{rng.randint(0, 3)}] Decode batch, #running-req: {rng.randint(1, 40)}, #token: "
                f"{rng.randint(100, 9000)}, token usage: 0.{rng.randint(10, 99)}, gen throughput (token/s): "
                f"{rng.uniform(10, 900):.2f}, #queue-req: {rng.randint(0, 5)}") if rng.random() < 0.7 else \
            f'[{stamp}] INFO:     10.0.0.{rng.randint(1, 250)}:{rng.randint(30000, 60000)} - "POST /generate HTTP/1.1" 200 OK'
        if rng.random() < 0.002:
            line = rng.choice(_LINES).format(k=rng.randint(0, 9))
        out.append(line)
        size += len(line) + 1
    return _log(path, out)


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "general parser"])
def test_plain_logs_of_megabytes_share_a_parse_and_each_gets_its_own_rows(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        scanner: bool) -> None:
    """Plain logs beyond BATCH_FILE_BYTES are batched (PLAIN_BATCH_FILE_BYTES): read together by the scanner;
    without it, the general parser reads them together only BATCH_BYTES at a time."""
    logs = _engine(tmp_path, monkeypatch, scanner)
    files = [_busy_log(logs / f"{k}.log", 1.5, k) for k in range(3)]
    plans = [p for p in _plans(logs, tmp_path / "..") if p.file.abs_path in files]
    assert all(parallel.batchable(p) for p in plans) and all(p.st.st_size > batch_parse.BATCH_FILE_BYTES
                                                            for p in plans)
    tasks = parallel.batched(plans)
    assert len(tasks) == 1 and isinstance(tasks[0], list) and len(tasks[0]) == 3
    monkeypatch.setattr(batch_parse, "BATCH_BYTES", 2 * plans[0].st.st_size + 1)
    assert _compare([p.job() for p in tasks[0]], tmp_path) == (3 if scanner else 2)


def test_plain_logs_the_scanner_leaves_mostly_to_the_general_parser_are_read_by_it_a_batch_bytes_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain logs with few batch or access lines (tracebacks, dumps, messages): the scanner leaves the general
    parser nearly every line, and its memory grows with them, so a batch whose lines left exceed BATCH_BYTES is
    read by the general parser BATCH_BYTES of files at a time, each file still getting its own rows."""
    logs = _engine(tmp_path, monkeypatch, scanner=True)
    files = []
    for k in range(3):
        lines = [_LINES[0].format(k=k)]             # (a dated record first: a server log)
        lines += [_LINES[j % len(_LINES)].format(k=j % 10) for j in range(1, 3000) if j % len(_LINES)]
        files.append(_log(logs / f"{k}.log", lines))
    plans = [p for p in _plans(logs, tmp_path / "..") if p.file.abs_path in files]
    tasks = parallel.batched(plans)
    assert len(tasks) == 1 and len(tasks[0]) == 3
    size = plans[0].st.st_size
    monkeypatch.setattr(batch_parse, "BATCH_BYTES", 2 * size + 1000)
    read: list[int] = []
    together = batch_parse._parse_together

    def general(ready: list) -> list:
        read.append(sum(r.out.read_bytes for r in ready))
        return together(ready)

    monkeypatch.setattr(batch_parse, "_parse_together", general)
    assert _compare([p.job() for p in tasks[0]], tmp_path) == 2            # two files together, one alone
    assert read and max(read) <= batch_parse.BATCH_BYTES


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "general parser"])
def test_a_small_rotated_log_compressed_shares_a_parse_and_a_large_one_is_read_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scanner: bool) -> None:
    """A rotated log compressed (``server.log.1.gz``) shares a parse with the plain ones when what it may hold
    (its bytes times GZIP_EXPANSION) is within a batch's file limit; its rows are those of its own parse, a
    damaged one's too.  One that may hold more is a task of its own."""
    import gzip

    logs = _engine(tmp_path, monkeypatch, scanner)
    _log(logs / "server.log", [_DECODE.format(k=k) for k in range(3)])
    body = ("\n".join(_DECODE.format(k=k) for k in range(3, 8)) + "\n").encode()
    (logs / "server.log.1.gz").write_bytes(gzip.compress(body))
    (logs / "server.log.2.gz").write_bytes(gzip.compress(body)[:-12])       # cut short: damaged
    big = logs / "server.log.3.gz"          # (random text compresses little: its bytes are over the limit)
    lines = [f"[2026-01-01 00:00:09 TP0] Load weight begin. {os.urandom(48).hex()}" for _ in range(6000)]
    big.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert big.stat().st_size * parallel.GZIP_EXPANSION > batch_parse.PLAIN_BATCH_FILE_BYTES
    plans = {p.file.abs_path.name: p for p in _plans(logs, tmp_path)}
    assert plans["server.log.1.gz"].compressed and parallel.batchable(plans["server.log.1.gz"])
    assert plans["server.log.3.gz"].kind == "server_log" and not parallel.batchable(plans["server.log.3.gz"])
    tasks = parallel.batched([plans[n] for n in ("server.log", "server.log.1.gz", "server.log.2.gz")])
    assert len(tasks) == 1 and isinstance(tasks[0], list)
    assert _compare([p.job() for p in tasks[0]], tmp_path) == 3



def test_a_real_torchrun_jobs_log_rotated_by_gzip_shares_a_parse_and_dies_as_it_did(tmp_path: Path) -> None:
    """Real torchrun output (tests/data/torch_jobs: rank 2 SIGKILLed, the launcher stopping the others),
    rotated and compressed by the gzip program as logrotate does: the compressed log shares a parse with the
    live plain log beside it and gets its own parse's rows; alone, it gives the engine the plain log's verdict
    (the job died: ``died``)."""
    import shutil
    import subprocess

    from hangforensics import api

    real = DATA / "torch_jobs" / "rank_dies" / "logs" / "job.log"
    plain, rotated, both = tmp_path / "plain" / "e", tmp_path / "rotated" / "e", tmp_path / "both" / "e"
    for d in (plain, rotated, both):
        d.mkdir(parents=True)
        shutil.copy(real, d / ("job.log" if d is plain else "job.log.1"))
        if d is not plain:
            subprocess.run(["gzip", "-9", str(d / "job.log.1")], check=True)
    _log(both / "job.log", [_DECODE.format(k=k) for k in range(3)])          # the live log beside it
    plans = {p.file.abs_path.name: p for p in _plans(both, tmp_path)}
    assert plans["job.log.1.gz"].compressed and plans["job.log.1.gz"].kind == "server_log"
    tasks = parallel.batched([plans["job.log"], plans["job.log.1.gz"]])
    assert len(tasks) == 1 and isinstance(tasks[0], list)
    assert _compare([p.job() for p in tasks[0]], tmp_path) == 2
    said = {}
    for name, d in (("plain", plain), ("rotated", rotated)):
        res = api.report(d, tmp_path / f"{name}.html", json_out=tmp_path / f"{name}.json")
        (eng,) = json.loads(res.json.read_text())["engines"]
        said[name] = (eng["verdict"], eng["died"])
    assert said["plain"][0].startswith("The job died: rank2 was killed by SIGKILL") and said["plain"][1] is True
    assert said["rotated"] == said["plain"]
