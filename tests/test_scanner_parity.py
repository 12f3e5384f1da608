"""The compiled scanner (``sglang_fast``) against the general parser, table by table: a plain log ingested
both ways stores the same rows in every table (and the same ``sources`` row, but for when it was read).

The general path reads a log in the reader's chunks, one ``parse_chunk`` each; the scanner path reads the
same chunks but has the general parser read the lines it leaves of several chunks at once.  What depends on
where a chunk starts must come out the same: the head of a chunk that is no record start (a last line
without its newline, a line the reader takes for a record start and the parser does not) is unparsed, not a
continuation of the record above it; the release traits are looked for in each chunk's first records; the
clock's steps back, the last time and the record bare access lines are dated by carry over from chunk to
chunk.  And the lines the general parser reads of a group are renumbered to the file's: so are the ids of
py-spy threads named by their line.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from hangforensics import api
from hangforensics.ingest import parse
from hangforensics.parsers.sglang import sglang_fast, sglang_log
from hangforensics.readers.logfile import RECORD_START, iter_chunks

REPO = Path(__file__).resolve().parents[1]
PASTES = REPO / "tests" / "data" / "real_pastes"
TABLES = ("events", "batches", "http_requests", "vllm_stats", "stacks", "frames", "leak_reports",
          "collective_records", "unparsed")
CLOCKED = {"events", "batches", "http_requests", "vllm_stats", "stacks", "leak_reports"}
CUT: list[int] = []         # the chunks ``ScanGroup.add_cut`` read from the file's own bytes (``_both_ways``)


def _tables(db: Path) -> dict[str, list[tuple]]:
    """Every loaded table's rows (sources without its row id and read time, its release hint first), in a
    canonical order."""
    out = {}
    with duckdb.connect(str(db), read_only=True) as con:
        for name in (*TABLES, "sources"):
            table = f"t_{name}" if name in CLOCKED else name
            cols = "release_hint, * EXCLUDE (source_id, ingested_at, release_hint)" if name == "sources" else "*"
            # NaN spelled out: a NaN equals no other in Python's comparison of rows
            out[name] = [tuple("NaN" if v != v else v for v in row)
                         for row in con.execute(f"SELECT {cols} FROM {table} ORDER BY ALL").fetchall()]
    return out


def _both_ways(paths: list[Path], tmp: Path, monkeypatch: pytest.MonkeyPatch, mode: str = "engine",
               strict: bool = True) -> tuple[dict[str, list[tuple]], dict[str, list[tuple]]]:
    """``paths`` ingested through the scanner (however small the log) and through the general parser alone:
    every table's rows, the first way and the second.  The scanner must have read something (``strict``;
    else the first way is empty when it read nothing)."""
    scanned: list[int] = []
    CUT.clear()
    add, add_cut = sglang_fast.ScanGroup.add, sglang_fast.ScanGroup.add_cut

    def counted(self: sglang_fast.ScanGroup, raw: bytes, first_line: int, *timed: object) -> tuple[list, list]:
        scanned.append(len(raw))
        return add(self, raw, first_line, *timed)

    def counted_cut(self: sglang_fast.ScanGroup, raw: bytes, *args: object) -> tuple[list, list] | None:
        got = add_cut(self, raw, *args)
        if got is not None:                 # (None: the chunk goes to ``add`` after all)
            scanned.append(len(raw))
            CUT.append(len(raw))
        return got

    monkeypatch.setattr(sglang_fast.ScanGroup, "add", counted)
    monkeypatch.setattr(sglang_fast.ScanGroup, "add_cut", counted_cut)
    got = []
    for scan_min in ("0", str(1 << 40)):
        monkeypatch.setenv("HANGFORENSICS_SCAN_MIN_BYTES", scan_min)
        db = tmp / f"{scan_min}.duckdb"
        api.ingest(paths, db, mode=mode)
        got.append(_tables(db))
        if scan_min == "0":
            assert scanned or not strict, "the scanner read nothing"
    if not scanned:
        return {}, {}
    return got[0], got[1]


def _assert_same(fast: dict[str, list[tuple]], general: dict[str, list[tuple]]) -> None:
    bad = []
    for name in fast:
        a, b = fast[name], general[name]
        if a != b:
            only_a = [r for r in a if r not in b][:3]
            only_b = [r for r in b if r not in a][:3]
            bad.append(f"{name}: scanner {len(a)} rows, general {len(b)}\n  only scanner: {only_a}\n"
                       f"  only general: {only_b}")
    assert not bad, "\n".join(bad)


# -- a last line without its newline: the reader makes it a chunk of its own --------------------------------
@pytest.mark.parametrize("paste", ["vllm-12314-steady-one-request", "sglang-36081-pool-leak-swa-traceback",
                                   "vllm-3053-sigsegv-graph-capture"])
def test_a_last_line_cut_short_is_read_alike(tmp_path, monkeypatch: pytest.MonkeyPatch, paste: str) -> None:
    """Pastes cut mid-line at the end (a vLLM stats line, a traceback's frame, a faulthandler frame): the
    last line, without its newline, is a chunk of its own; not a record start, it stays unparsed both ways
    (in one call of the general parser it would continue the record above it)."""
    log = PASTES / paste / "description.md"
    assert not log.read_bytes().endswith(b"\n")
    fast, general = _both_ways([PASTES / paste], tmp_path, monkeypatch)
    _assert_same(fast, general)
    last = log.read_bytes().count(b"\n") + 1
    assert [r for r in general["unparsed"] if r[2] == last], "the cut line is kept in unparsed"


# -- a chunk cut before a line the reader takes for a record start and the parser does not --------------------
_T0 = datetime(2026, 3, 1, 10, 0, 0)


def _stamp(t: float) -> str:
    return (_T0 + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")


def _vllm_stamp(t: float) -> str:
    return (_T0 + timedelta(seconds=t)).strftime("%m-%d %H:%M:%S")


def _mixed_log(r: random.Random, n: int) -> list[str]:
    """An SGLang log with vLLM and glog lines, tracebacks, dumps, bare access lines, clock steps back, and
    lines the reader may cut a chunk before that start no record (a vLLM head cut short, a rank the prefix
    grammar refuses), each kind dense in some stretches."""
    t = 0.0
    lines: list[str] = []
    weights = [r.random() for _ in range(14)]
    for _ in range(n):
        t += r.choice([0, 0.5, 1, 2]) if r.random() > 0.01 else -r.randint(3, 600)
        rank = r.choice(["", " TP0", " TP1", " DP0 TP0", " PP0 TP1"])
        k = r.choices(range(14), weights)[0]
        lines += [
            [f"[{_stamp(t)}{rank}] Decode batch, #running-req: {r.randint(1, 40)}, #token: 8, token usage: 0.01, "
             f"gen throughput (token/s): 1.5, #queue-req: 0"],
            [f'[{_stamp(t)}] INFO:     10.0.0.{r.randint(1, 9)}:5000 - "POST /generate HTTP/1.1" 200 OK'],
            [f'INFO:     10.0.0.{r.randint(1, 9)}:5000 - "GET /health HTTP/1.1" 200 OK'],
            [f"INFO {_vllm_stamp(t)} metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation "
             f"throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: "
             f"2.0%, CPU KV cache usage: 0.0%."],
            [f"INFO {_vllm_stamp(t)} me"],
            [f"[{_stamp(t)} XX1] a rank the prefix grammar refuses"],
            [f"I{_vllm_stamp(t)[:5].replace('-', '')} {_vllm_stamp(t)[6:]}.123456 812 ProcessGroupNCCL.cpp:1234] "
             f"[PG 0 Rank 1] Watchdog caught collective operation timeout"],
            [f"[{_stamp(t)} TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1815, in event_loop',
             "    self.on_idle()",
             "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=1, protected_size=0, "
             "self.max_total_num_tokens=2"][:r.randint(1, 4)],
            ['  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1815, in event_loop'],
            [""],
            [f"[{_stamp(t)} TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"],
            [f"[{_stamp(t)} TP0] Scheduler debug info:", "scheduler.cur_batch.batch_size()=6"],
            # (a thread header cut short: the frames after it are an unknown thread's, named by its line)
            [f"[{_stamp(t)} TP0] Pyspy dump for PID 1000:", "Process 1000: sglang::scheduler_TP0", "",
             'Thread 1000 (idle): "MainThread"', "    recvmsg (libc.so.6)",
             "    Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)", "Thread 10",
             "    run_scheduler_process (sglang/srt/managers/scheduler.py:2410)"],
            [f"[{_stamp(t)}{rank}] Prefill batch, #new-seq: 1, #new-token: {r.randint(1, 3000)}, #cached-token: 0, "
             f"token usage: 0.01, #running-req: 1, #queue-req: 0, accept rate: 0.5"],
        ][k]
    return lines


def _chunk_heads(log: Path) -> list[str]:
    """The first line of each chunk the reader cuts ``log`` into (at the chunk size in force)."""
    return [c.lines[0] for c in iter_chunks(log, records=True, chunk_bytes=parse.CHUNK_BYTES)]


@pytest.mark.parametrize("seed", [3, 4])
def test_chunks_cut_anywhere_are_read_alike(tmp_path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Small chunks (many cuts, some before a line that starts no record), the scanner's groups of several
    chunks and slices, the release traits looked for in a chunk's first few records: the same rows."""
    monkeypatch.setattr(parse, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(sglang_fast, "GROUP_BYTES", 64 * 1024)
    monkeypatch.setattr(sglang_fast, "SLICE_LINES", 300)
    monkeypatch.setattr(sglang_log, "RELEASE_RECORDS", 30)
    r = random.Random(seed)
    log = tmp_path / "e" / "server.log"
    log.parent.mkdir()
    log.write_text("\n".join(_mixed_log(r, 2500)) + "\n")
    heads = _chunk_heads(log)
    assert len(heads) > 50
    assert any(RECORD_START.match(b"\n" + h.encode()) and (" me" in h or "XX1" in h) for h in heads), \
        "no chunk starts at a line the parser starts no record at"
    fast, general = _both_ways([log.parent], tmp_path, monkeypatch)
    _assert_same(fast, general)
    assert len(fast["batches"]) > 100 and fast["unparsed"]
    assert any(str(r[2]).startswith("?") and str(r[2])[1:].isdigit() for r in fast["stacks"])   # thread_id


# -- a log behind a collector's prefix: its payload through the scanner, with the envelope's times -------------
def _wrapped(key: str, lines: list[str], r: random.Random, split: bool = True) -> list[str]:
    """``lines`` behind ``key``'s prefix (times east and west of UTC, fractions of a second); a few lines
    without it (kept whole), and (``split``) for CRI a line split in partial parts (its chunk is read line by
    line) and a payload line ending in CR."""
    out = []
    for i, s in enumerate(lines):
        t = (_T0 + timedelta(milliseconds=357 * i)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:r.choice([26, 23, 21])]
        short = (_T0 + timedelta(milliseconds=357 * i)).strftime("%b %d %H:%M:%S.%f")[:r.choice([15, 19, 22])]
        prefix = {"kubectl": f"{t}+05:30 ", "cri": f"{t}-01:00 stderr F ", "syslog": f"<14>1 {t}Z h sglang 7 - - ",
                  "journald": f"{t}+0100 h sglang[7]: ", "journald-short": f"{short} h sglang[7]: ",
                  "cri+proc_tag": f"{t}-01:00 stderr F (SGLangEngine pid=7) ",
                  "compose+kubectl": f"sglang-1  | {t}+05:30 ",
                  "proc_tag": "(SGLangEngine pid=7) ", "compose": "sglang-1  | ",
                  "ansi": "", "docker_json": "", "ansi+proc_tag": "\x1b[36m(SGLangEngine pid=7)\x1b[0m "}[key]
        if key == "ansi":           # a colour around the start of some lines, a redraw in a few
            k = r.randint(0, 8)
            s = r.choice(["", "\x1b[32m" + s[:k] + "\x1b[0m" + s[k:], "\x1b[1;36m" + s, "junk\r" + s])
        if key == "docker_json":    # the driver's entry, Go's escapes of HTML's characters in it
            body = json.dumps(s + "\n", ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")
            s = '{"log":' + body + ',"stream":"stderr","time":"' + t + 'Z"}'
        if r.random() < 0.01 and key != "docker_json":
            out.append(s)
        elif split and key == "cri" and i % 700 == 350 and len(s) > 20:
            out += [f"{t}-01:00 stderr P {s[:10]}", f"{t}-01:00 stderr F {s[10:]}"]
        else:
            out.append(prefix + s + ("\r\r" if split and i == 1234 else ""))   # (a payload ending in CR: ditto)
    return out


@pytest.mark.parametrize("key", ["kubectl", "cri", "syslog", "journald", "journald-short", "docker_json", "proc_tag",
                                 "compose", "ansi", "ansi+proc_tag", "cri+proc_tag", "compose+kubectl"])
def test_a_log_behind_a_collectors_prefix_is_read_alike(tmp_path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """The payload of a log behind kubectl, CRI, syslog, journald or docker's JSON (with their times), or a process tag,
    docker compose's column or a terminal's colours (without), unwrapped as a column, goes through the
    scanner in the reader's chunks and groups: the same rows as the general parser's (bare access lines dated
    by their envelope's time where it has one), the envelope's time on each, unparsed rows quoting the file's
    own lines, envelope included."""
    monkeypatch.setattr(parse, "CHUNK_BYTES", 8192)
    monkeypatch.setattr(sglang_fast, "GROUP_BYTES", 64 * 1024)
    monkeypatch.setattr(sglang_fast, "SLICE_LINES", 300)
    r = random.Random(7)
    log = tmp_path / "e" / "server.log"
    log.parent.mkdir()
    lines = _mixed_log(r, 2500)
    # a stretch of several chunks without a batch or access line (each read by the general parser alone), of
    # vLLM lines whose year comes from their envelope's time
    lines[1200:1200] = [f"INFO {_vllm_stamp(i)} metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation "
                        f"throughput: {i}.5 tokens/s, Running: 1 reqs, Pending: 0 reqs" for i in range(400)]
    log.write_text("\n".join(_wrapped(key, lines, r)) + "\n")
    fast, general = _both_ways([log.parent], tmp_path, monkeypatch)
    _assert_same(fast, general)
    # behind the prefixes ``envelope_cut`` reads, the scanner read most chunks from the file's own bytes (the
    # others, a CRI record split in P parts, a payload ending in CR, went the column's way: the same rows)
    cut = key in ("kubectl", "cri", "proc_tag", "compose", "cri+proc_tag", "docker_json", "syslog", "journald",
                  "journald-short", "compose+kubectl")
    assert (len(CUT) > 10) if cut else not CUT, CUT
    with duckdb.connect(str(tmp_path / "0.duckdb"), read_only=True) as con:
        assert con.execute("SELECT envelope FROM sources").fetchone()[0] == key.split("-")[0]
        untimed = key in ("proc_tag", "compose", "ansi", "ansi+proc_tag")
        for table in ("t_batches", "t_http_requests"):
            n, timed = con.execute(f"SELECT count(*), count(collected_ts) FROM {table}").fetchone()
            assert n > 100 and (timed == 0 if untimed else timed > 0.95 * n), table
        first = {"kubectl": "2026-", "cri": "2026-", "syslog": "<14>1 ", "journald": "2026-", "journald-short": "Mar ",
                 "cri+proc_tag": "2026-", "compose+kubectl": "sglang-1  | 2026-",
                 "docker_json": '{"log":',
                 "proc_tag": "(SGLangEngine pid=7) ", "compose": "sglang-1  | ", "ansi": "\x1b[",
                 "ansi+proc_tag": "\x1b[36m(SGLangEngine"}[key]
        assert con.execute("SELECT count(*) FROM unparsed WHERE starts_with(text, ?)", [first]).fetchone()[0] > 5


def test_the_corpora_logs_behind_a_collectors_prefix_read_alike(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every plain log of the test corpora (SGLang releases and variants, vLLM, torch jobs, hostile files) behind
    one of the eight envelopes in turn: through the scanner and through the general parser, the same rows in
    every table."""
    from hangforensics.readers.payload import head_lines, sniff

    logs = [p for p in sorted((REPO / "tests" / "data").rglob("*.log")) if p.stat().st_size < 2_000_000
            and not sniff(head_lines(p.read_bytes()[:65536].decode("utf-8", "replace")))[0].layers]
    assert len(logs) > 40
    r = random.Random(11)
    scanned = sglang = 0
    for k, log in enumerate(logs):
        key = ("kubectl", "cri", "syslog", "journald", "docker_json", "proc_tag", "compose", "ansi")[k % 8]
        folder = tmp_path / f"e{k}"
        folder.mkdir()
        lines = log.read_bytes().decode("utf-8", "replace").split("\n")
        sglang += any(re.match(r"(?:\([^)]*\)\s*)?\[\d{4}-", s) for s in lines)
        (folder / "server.log").write_text("\n".join(_wrapped(key, lines, r, split=False)))
        (tmp_path / f"db{k}").mkdir()
        fast, general = _both_ways([folder], tmp_path / f"db{k}", monkeypatch, strict=False)
        scanned += bool(fast)
        _assert_same(fast, general)
    # (of the logs with an SGLang record, whose payload goes to the scanner; the others are no server log behind
    # that envelope alone, a faulthandler dump, an nginx log, an empty file, a log whose own process tags make
    # a second layer)
    assert sglang > 25 and scanned > 0.9 * sglang, f"the scanner read {scanned} of {sglang} wrapped SGLang logs"


@pytest.mark.parametrize("form", ["rsyslog-5424", "rsyslog-traditional"])
def test_rsyslogs_own_output_reads_alike(tmp_path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """What rsyslogd itself wrote (RFC 5424 with its structured data; its traditional year-less format; blank
    messages: tests/data/real_envelopes), in small chunks: the same rows through the scanner and the general
    parser."""
    monkeypatch.setattr(parse, "CHUNK_BYTES", 16 * 1024)
    folder = tmp_path / "e"
    folder.mkdir()
    shutil.copy(REPO / "tests" / "data" / "real_envelopes" / form / "server.log", folder / "server.log")
    (tmp_path / "db").mkdir()
    fast, general = _both_ways([folder], tmp_path / "db", monkeypatch)
    _assert_same(fast, general)
    assert fast["batches"] and fast["stacks"] and all(r[-1] is not None for r in fast["batches"])


# -- the release traits in a later chunk's first records ------------------------------------------------------
def test_release_traits_are_looked_for_in_each_chunks_first_records(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 0.5.10 trait (the watchdog's 'self.soft=False') past the file's first RELEASE_RECORDS records but
    among a later chunk's first ones points at 0.5.10 both ways (the general path looks at each chunk's
    first records: a group of chunks read at once is looked at chunk by chunk too)."""
    monkeypatch.setattr(parse, "CHUNK_BYTES", 16 * 1024)
    monkeypatch.setattr(sglang_log, "RELEASE_RECORDS", 40)
    log = tmp_path / "e" / "server.log"
    log.parent.mkdir()

    def batch(i: int) -> str:
        return f"[{_stamp(i)} TP0] Decode batch, #running-req: {i % 40:2d}, #token: 8, token usage: 0.01, " \
               f"accept rate: 0.5, #queue-req: 0"

    lines = [batch(i) for i in range(1000)]
    log.write_text("\n".join(lines) + "\n")
    # every line of one length: the cuts stay where they are when one line is replaced by another as long
    firsts = [c.first_line for c in iter_chunks(log, records=True, chunk_bytes=parse.CHUNK_BYTES)]
    at = firsts[3] + 5                                   # the 6th record of the 4th chunk
    trait = f"[{_stamp(at)} TP0] Scheduler watchdog timeout (self.soft=False)"
    lines[at - 1] = trait + " " * (len(lines[at - 1]) - len(trait))
    log.write_text("\n".join(lines) + "\n")
    assert [c.first_line for c in iter_chunks(log, records=True, chunk_bytes=parse.CHUNK_BYTES)] == firsts
    assert at > 40
    fast, general = _both_ways([log.parent], tmp_path, monkeypatch)
    _assert_same(fast, general)
    assert [r[0] for r in general["sources"]] == ["0.5.10"]


def test_a_rare_records_release_trait_is_seen_anywhere_in_a_chunk(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A watchdog's 0.5.10 wording far past a chunk's first RELEASE_RECORDS records (one chunk: the log is
    small) points at 0.5.10 both ways: the traits of records that are no batch or access line are looked for
    in all of them, wherever the chunks were cut; a batch line's trait (accept rate: 0.5.5) in the first ones."""
    monkeypatch.setattr(sglang_log, "RELEASE_RECORDS", 40)
    log = tmp_path / "e" / "server.log"
    log.parent.mkdir()
    lines = [f"[{_stamp(i)} TP0] Decode batch, #running-req: 3, #token: 8, token usage: 0.01, accept rate: 0.5, "
             f"#queue-req: 0" for i in range(300)]
    lines.insert(250, f"[{_stamp(250)} TP0] Scheduler watchdog timeout (self.soft=False)")
    log.write_text("\n".join(lines) + "\n")
    assert len(list(iter_chunks(log, records=True, chunk_bytes=parse.CHUNK_BYTES))) == 1
    fast, general = _both_ways([log.parent], tmp_path, monkeypatch)
    _assert_same(fast, general)
    assert [r[0] for r in general["sources"]] == ["0.5.10"]
    lines[250] = lines[251]                             # no watchdog: the batch lines' own release
    log.write_text("\n".join(lines) + "\n")
    (tmp_path / "again").mkdir()
    fast, general = _both_ways([log.parent], tmp_path / "again", monkeypatch)
    assert [r[0] for r in general["sources"]] == ["0.5.5"]


# -- a generated busy log of a few MB ---------------------------------------------------------------------------
def test_a_generated_stalled_engine_is_read_alike(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/generate.py's stalled engine of 4 MB (two chunks, the stall's watchdog and dump in the second,
    whose first records point at 0.5.10) at the reader's own chunk size: the same rows, the same release."""
    spec = importlib.util.spec_from_file_location("bench_generate", REPO / "bench" / "generate.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.write_engine(tmp_path / "e", "stalled", 4.0, 2)
    fast, general = _both_ways([tmp_path / "e"], tmp_path, monkeypatch)
    _assert_same(fast, general)
    assert [r[0] for r in general["sources"]] == ["0.5.10"]


# -- a release printing milliseconds (SGLANG_LOG_MS=1): '[2026-09-01 12:00:00.123 PP1 TP4 EP4]' -----------------
def test_a_log_printed_with_fractions_of_a_second_is_read_alike_and_by_the_scanner(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang 0.5.10 and later print milliseconds after the time when SGLANG_LOG_MS=1 (sglang-formats.md §1.1):
    the scanner types those batch and access lines too (the general parser reads PREFIX_HEAD's
    ``[.,]\\d{1,6}``), with the same rows, times to the microsecond; a fraction PREFIX_HEAD refuses (no digit,
    seven digits) starts no record either way."""
    r = random.Random(7)
    lines = []
    for k in range(3000):
        t = (_T0 + timedelta(seconds=k // 3)).strftime("%Y-%m-%d %H:%M:%S")
        frac = r.choice([".123", ".5", ",25", ".000001", ".999999", ".040"]) if k % 50 else r.choice([".", ".1234567"])
        rank = r.choice(["", " TP0", " DP0 TP0 EP0", " PP1 TP4 EP4"])
        lines.append(r.choice([
            f"[{t}{frac}{rank}] Decode batch, #running-req: {r.randint(1, 40)}, #token: 8, token usage: 0.01, "
            f"cuda graph: True, gen throughput (token/s): 1.5, #queue-req: 0",
            f'[{t}{frac}] INFO:     10.0.0.{r.randint(1, 9)}:5000 - "POST /generate HTTP/1.1" 200 OK',
            f"[{t}{frac}{rank}] Prefill batch, #new-seq: 1, #new-token: {r.randint(1, 3000)}, #cached-token: 0, "
            f"token usage: 0.01, #running-req: 1, #queue-req: 0"]))
    log = tmp_path / "e" / "server.log"
    log.parent.mkdir()
    log.write_text("\n".join(lines) + "\n")
    general_read: list[int] = []
    parse_chunk = sglang_fast.parse_chunk

    def counted(texts, *args, **kw):         # the lines the scanner leaves to the general parser
        general_read.append(len(texts))
        return parse_chunk(texts, *args, **kw)

    monkeypatch.setattr(sglang_fast, "parse_chunk", counted)
    fast, general = _both_ways([log.parent], tmp_path, monkeypatch)
    _assert_same(fast, general)
    refused = sum(1 for line in lines if line.startswith("[") and (". " in line[:24] or "4567" in line[:30]))
    assert 0 < sum(general_read) < 4 * refused + 10, (sum(general_read), refused)
    micros = {row[2].microsecond for row in fast["batches"]} | {row[2].microsecond for row in fast["http_requests"]}
    assert {123000, 500000, 250000, 1, 999999, 40000} <= micros

# -- records relayed by Ray's log monitor: '(SGLangEngine pid=41820) [2026-03-22 13:53:37 TP0] Decode batch, ...' --
def test_a_ray_actors_tag_is_part_of_the_prefix_read_alike_and_by_the_scanner(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's tag before an SGLang prefix is part of it (PREFIX_HEAD, sglang-formats.md §1.2): the record is
    read as without the tag, through the scanner too, and no line counts as cut into by another process's
    record (the tag was taken for the fragment of one).  A tag PREFIX_HEAD refuses (three words) is such a
    fragment; one the scanner does not read alike (two 'pid=') is left to the general parser; a record cut
    into after a tag still is one."""
    r = random.Random(11)
    common = ["(SGLangEngine pid=41820) ", "(SchedulerActor pid=7, ip=10.0.0.12) ", "(A_1 pid=3)", "(pid=5) ",
              "(MegatronPolicyWorker[rank=8] pid=3294808, ip=10.109.19.209)   ", "(Two words pid=1) "]
    odd = ["(A B C pid=1) ", "(x pid=1 pid=2) ", ""]
    lines = []
    for k in range(3000):
        t = (_T0 + timedelta(seconds=k // 3)).strftime("%Y-%m-%d %H:%M:%S")
        tag = r.choice(common) if k % 40 or k < 1000 else r.choice(odd)     # (the odd past the sniffed head)
        rank = r.choice(["", " TP0", " DP0 TP0 EP0"])
        lines.append(tag + r.choice([
            f"[{t}{rank}] Decode batch, #running-req: {r.randint(1, 40)}, #token: 8, token usage: 0.01, "
            f"cuda graph: True, gen throughput (token/s): 1.5, #queue-req: 0",
            f'[{t}] INFO:     10.0.0.{r.randint(1, 9)}:5000 - "POST /generate HTTP/1.1" 200 OK',
            f"[{t}{rank}] Prefill batch, #new-seq: 1, #new-token: {r.randint(1, 3000)}, #cached-token: 0, "
            f"token usage: 0.01, #running-req: 1, #queue-req: 0"]))
    lines[1501] = "(SGLangEngine pid=41820) " + lines[1501][lines[1501].index("["):][:40] \
        + f"[{_stamp(500)} TP1] Decode batch, #running-req: 1, #token: 8"
    log = tmp_path / "e" / "server.log"
    log.parent.mkdir()
    log.write_text("\n".join(lines) + "\n")
    general_read: list[int] = []
    parse_chunk = sglang_fast.parse_chunk

    def counted(texts, *args, **kw):
        general_read.append(len(texts))
        return parse_chunk(texts, *args, **kw)

    monkeypatch.setattr(sglang_fast, "parse_chunk", counted)
    fast, general = _both_ways([log.parent], tmp_path, monkeypatch)
    _assert_same(fast, general)
    declined = sum(1 for line in lines if line.startswith(tuple(odd[:2]))) + 1
    assert 0 < sum(general_read) < 4 * declined + 10, (sum(general_read), declined)
    assert len(fast["batches"]) + len(fast["http_requests"]) == 3000
    with duckdb.connect(str(tmp_path / "0.duckdb"), read_only=True) as con:
        note = con.execute("SELECT note FROM sources").fetchall()[0][0] or ""
    cut = sum(1 for line in lines if line.startswith(odd[0])) + 1
    assert f"{cut} line(s) cut into by another process's record" in note, note


# -- a busy vLLM API server: access lines without a time, '(APIServer pid=3164) INFO:     10.0.0.1:5000 - "POST ...' --
def _vllm_server_log(r: random.Random, n: int) -> list[str]:
    """A vLLM V1 server's log (sglang-formats.md §9): uvicorn's access lines without a time behind the API
    server's tag (or none), its stats lines, workers' and the engine core's records, a traceback, blank lines;
    access lines the scanner leaves to the general parser (DEBUG, which BARE_ACCESS does not read; a Ray tag
    with its address; two spaces after the tag; a client-less line); stretches of only stats lines or only
    access lines; an SGLang record now and then (a dated record of the file's clock)."""
    lines: list[str] = []
    t = 0.0
    for k in range(n):
        t += 0.02
        stretch = (k // 700) % 3                    # 0: mixed, 1: no access line, 2: only access lines
        tag = r.choice(["(APIServer pid=3164) ", "(APIServer_1 pid=3170) ", ""])
        access = f'INFO:     10.0.{r.randint(0, 9)}.{r.randint(1, 250)}:{r.randint(30000, 60000)} - ' \
                 f'"POST /v1/chat/completions HTTP/1.1" {r.choice([200, 200, 200, 503])} OK'
        if stretch == 2 or (stretch == 0 and r.random() < 0.8):
            odd = r.random()
            lines.append(tag + access if odd > 0.03 else r.choice([
                '(APIServer pid=3164) DEBUG:    10.0.0.1:5000 - "GET /metrics HTTP/1.1" 200 OK',
                "(RayWorkerWrapper pid=9, ip=10.0.0.2) " + access, "(APIServer pid=3164)  " + access,
                'INFO:      - "GET /health HTTP/1.1" 200 OK']))
            continue
        lines += r.choice([
            [f"(APIServer pid=3164) INFO {_vllm_stamp(t)} [loggers.py:259] Engine 000: Avg prompt throughput: "
             f"{r.uniform(0, 900):.1f} tokens/s, Avg generation throughput: 41.7 tokens/s, Running: "
             f"{r.randint(0, 40)} reqs, Waiting: 0 reqs, GPU KV cache usage: 2.0%, Prefix cache hit rate: 0.0%"],
            [f"(Worker_TP1 pid=3301) WARNING {_vllm_stamp(t)} [shm_broadcast.py:466] No available shared memory "
             f"broadcast block found in 60 seconds."],
            [f"(EngineCore_DP0 pid=3200) ERROR {_vllm_stamp(t)} [core.py:710] EngineCore encountered a fatal error.",
             "(EngineCore_DP0 pid=3200) Traceback (most recent call last):",
             '(EngineCore_DP0 pid=3200)   File "/usr/lib/python3/vllm/v1/engine/core.py", line 701, in run',
             "(EngineCore_DP0 pid=3200) TimeoutError: RPC call to sample_tokens timed out."],
            [""],
            [f"[{_stamp(t)}] a dated SGLang record in the same file"],
        ])
    return lines


@pytest.mark.parametrize("key", ["plain", "kubectl", "proc_tag"])
def test_a_vllm_servers_access_lines_without_a_time_are_read_alike_and_by_the_scanner(
        tmp_path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """A busy vLLM API server's log is mostly uvicorn's access lines without a time: the scanner types them
    (ACCESS_BARE) and they are dated by the dated record before them over the whole group of chunks, as the
    general parser dates them chunk by chunk (``ctx.record_ts`` across chunks, also across chunks without an
    access line); behind kubectl each keeps its envelope's time instead.  Lines BARE_ACCESS reads otherwise
    are the general parser's.  The same rows both ways, and the same counts of lines dated so."""
    monkeypatch.setattr(parse, "CHUNK_BYTES", 8192)
    monkeypatch.setattr(sglang_fast, "GROUP_BYTES", 64 * 1024)
    monkeypatch.setattr(sglang_fast, "SLICE_LINES", 300)
    r = random.Random(5)
    lines = _vllm_server_log(r, 6000)
    log = tmp_path / "e" / "server.log"
    log.parent.mkdir()
    log.write_text("\n".join(lines if key == "plain" else _wrapped(key, lines, r, split=False)) + "\n")
    bare: list[int] = []
    slice_init = sglang_fast._Slice.__init__

    def counted(self, sc, *args, **kw) -> None:     # the access lines without a time the scanner typed
        slice_init(self, sc, *args, **kw)
        rows = self.tables["http_requests"]
        bare.append(0 if rows is None else rows.column("ts").null_count)

    monkeypatch.setattr(sglang_fast._Slice, "__init__", counted)
    fast, general = _both_ways([log.parent], tmp_path, monkeypatch)
    _assert_same(fast, general)
    access = sum(1 for line in lines if " - \"" in line)
    assert sum(bare) > 0.8 * access, (sum(bare), access)
    assert len(fast["http_requests"]) > 0.95 * access
    with duckdb.connect(str(tmp_path / "0.duckdb"), read_only=True) as con:
        note = con.execute("SELECT note FROM sources").fetchall()[0][0] or ""
        undated, enveloped = con.execute("SELECT count(*) FILTER (ts IS NULL), count(collected_ts) "
                                         "FROM t_http_requests").fetchone()
    assert undated < 20                     # (only those before the file's first dated record)
    by = "their envelope's time" if key == "kubectl" else "the record before them"
    said = re.search(rf"(\d+) access line\(s\) without a time of their own: dated by {by}", note)
    assert said and int(said.group(1)) > 0.8 * access, note
    assert (enveloped > 0.95 * access) if key == "kubectl" else not enveloped


def test_real_vllm_pastes_access_lines_read_alike(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real threads' vLLM pastes with uvicorn's access lines (tests/data/real_pastes): the same rows through
    the scanner and the general parser, and the scanner types some of those lines itself."""
    pastes = [d for d in sorted(PASTES.iterdir()) if d.is_dir() and d.name.startswith("vllm-") and any(
        re.search(r'^(?:\(\w+ pid=\d+\) )?(?:INFO|WARNING|ERROR):\s+\S* - "[A-Z]+ ', s, re.M)
        for s in (f.read_text(errors="replace") for f in d.iterdir() if f.suffix == ".md"))]
    assert len(pastes) >= 4
    bare: list[int] = []
    slice_init = sglang_fast._Slice.__init__

    def counted(self, sc, *args, **kw) -> None:
        slice_init(self, sc, *args, **kw)
        rows = self.tables["http_requests"]
        bare.append(0 if rows is None else rows.column("ts").null_count)

    monkeypatch.setattr(sglang_fast._Slice, "__init__", counted)
    for k, paste in enumerate(pastes):
        (tmp_path / f"db{k}").mkdir()
        fast, general = _both_ways([paste], tmp_path / f"db{k}", monkeypatch, strict=False)
        _assert_same(fast, general)
    assert sum(bare) > 0


def test_an_access_line_without_a_time_is_dated_by_the_last_dated_record_of_the_chunks_before(tmp_path) -> None:
    """The general path, chunk by chunk: an access line without a time at the top of a chunk takes the time of
    the dated record furthest down the chunks before it, also of a chunk that printed no access line."""
    ctx = sglang_log.FileContext(engine="e", path="server.log", default_year=2026)
    sglang_log.parse_chunk([f"[{_stamp(0)}] Load weight begin", 'INFO:     1.2.3.4:5 - "GET /health HTTP/1.1" 200 OK'],
                           1, ctx)
    sglang_log.parse_chunk([f"[{_stamp(60)} TP0] Decode batch, #running-req: 1, #token: 8, token usage: 0.01, "
                            "gen throughput (token/s): 1.5, #queue-req: 0"], 3, ctx)
    out = sglang_log.parse_chunk(['INFO:     1.2.3.4:5 - "GET /health HTTP/1.1" 200 OK'], 4, ctx)
    rows = out.tables["http_requests"]
    assert rows.get_column("ts").to_list() == [_T0 + timedelta(seconds=60)] and out.dated_by_previous == 1


# -- where the scanner runs ---------------------------------------------------------------------------------------
def test_a_process_with_the_scanner_loaded_reads_every_plain_log_with_it() -> None:
    """Loading numba and the scanner's code costs about a second: a process that has not (the CLI reading a
    small input itself) keeps the size threshold; one that has (a parser worker: ``worker.warm_up`` in its
    fork server) reads a plain log of any size with the scanner."""
    import os
    import subprocess
    import sys

    code = ("from hangforensics.parsers.sglang import sglang_fast as f\n"
            "from hangforensics.ingest.worker import warm_up\n"
            "print(f.scan_min_bytes() == f.SCAN_MIN_BYTES > 0)\n"
            "warm_up()\n"
            "print(f.scanner() is not None and f.scan_min_bytes() == 0)\n")
    env = {k: v for k, v in os.environ.items() if k != "HANGFORENSICS_SCAN_MIN_BYTES"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True"]


@pytest.mark.parametrize(("logs", "scanner"), [(["plain_sglang.log"], True), (["kubectl.log", "cri_split.log"], False)])
def test_the_parser_pool_loads_the_scanner_where_a_plain_log_is_read(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                                     logs: list[str], scanner: bool) -> None:
    """A pool that reads a plain server log, however small, has its workers forked with the scanner loaded;
    one that reads only logs behind a collector's envelope (never scanned) does not load it."""
    import shutil

    from hangforensics.ingest import fork_server, pipeline
    from hangforensics.store import Store

    asked: list[bool] = []
    context = fork_server.context

    def recorded(scanner: bool) -> object:
        asked.append(scanner)
        return context(scanner)

    monkeypatch.delenv("HANGFORENSICS_SCAN_MIN_BYTES", raising=False)
    monkeypatch.setattr(fork_server, "context", recorded)
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_BYTES", 1024)
    for k, name in enumerate(logs):
        (tmp_path / "fleet" / f"e{k}").mkdir(parents=True)
        shutil.copy(REPO / "tests" / "data" / "envelopes" / name, tmp_path / "fleet" / f"e{k}" / "server.log")
    (tmp_path / "fleet" / "dump").mkdir()
    shutil.copy(REPO / "tests" / "data" / "envelopes" / "neg_pyspy.txt", tmp_path / "fleet" / "dump" / "pyspy.txt")
    with Store(tmp_path / "x.duckdb") as st:
        pipeline.ingest_paths(st, [tmp_path / "fleet"], mode="fleet", jobs=2)
        assert st.scalar("SELECT count(*) FROM sources WHERE status = 'ok'") == len(logs) + 1
    assert asked == [scanner]


def test_the_general_parser_reads_a_dated_line_without_its_neighbours(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Of a busy log, the general parser reads what the scanner leaves: a line that may continue a record (no
    plain prefix: a traceback's lines) with the bulk lines around it, and a line with a plain prefix and a valid
    time (another message, a batch line it cannot type) alone, as the record start it is: its neighbours stay
    the scanner's (a real log's other messages cost the general parser three lines each before).  The rows are
    the general parser's alone."""
    t0 = datetime(2026, 3, 1, 12)
    lines = []
    for i in range(400):
        ts = (t0 + timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"[{ts} TP0] Decode batch, #running-req: {i}, #token: {8 * i}, token usage: 0.05, "
                     f"gen throughput (token/s): 12.5, #queue-req: 0")
        if i == 100:
            lines.append(f"[{ts} TP0] Cache flushed successfully!")
        if i == 200:
            lines.append(f"[{ts} TP0] Decode batch, #running-req: x, #token: 8, token usage: 0.05, #queue-req: 0")
        if i == 300:
            lines += [f"[{ts} TP0] Scheduler hit an exception: Traceback (most recent call last):",
                      '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1815, in loop',
                      "RuntimeError: boom"]
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "server.log").write_text("\n".join(lines) + "\n")
    read: list[str] = []
    parse_chunk = sglang_fast.parse_chunk

    def seen(texts, *args, **kw):
        read.extend(texts.to_list() if hasattr(texts, "to_list") else texts)
        return parse_chunk(texts, *args, **kw)

    monkeypatch.setattr(sglang_fast, "parse_chunk", seen)
    fast, general = _both_ways([tmp_path / "e"], tmp_path, monkeypatch)
    _assert_same(fast, general)
    assert read, "the general parser read nothing of the scanned log"
    at = {text: k for k, text in enumerate(lines)}
    got = sorted(at[t] for t in read if t in at)
    flushed, untyped, exception = (next(k for k, t in enumerate(lines) if mark in t)
                                   for mark in ("Cache flushed", "#running-req: x", "Scheduler hit"))
    assert flushed in got and flushed - 1 not in got and flushed + 1 not in got
    assert untyped in got and untyped - 1 not in got and untyped + 1 not in got
    # the traceback's lines, and the batch lines before and after them
    assert set(range(exception + 1, exception + 3)) <= set(got) and exception + 3 in got


@pytest.mark.parametrize("where", ["head", "past_small_rows", "past_head", "access_path", "nowhere"])
def test_a_newer_releases_trait_on_bulk_lines_points_at_it_as_the_general_path_reads_it(
        tmp_path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """A 0.5.23 trait on one line the scanner reads (a batch line's 'fwd occupancy:', an access line's path)
    of a 0.5.5 log: among a later chunk's first records (past the first few the search looks at before the
    rest), or past them (not looked at): the same release both ways.  The scanner's bulk messages are then
    not cut out unless their bytes hold the trait (sglang_releases)."""
    monkeypatch.setattr(parse, "CHUNK_BYTES", 16 * 1024)
    monkeypatch.setattr(sglang_log, "RELEASE_RECORDS", 60)
    monkeypatch.setattr(sglang_log, "SMALL_ROWS", 8)
    monkeypatch.setattr(sglang_fast, "SMALL_ROWS", 8)
    log = tmp_path / "e" / "server.log"
    log.parent.mkdir()

    def line(i: int, tail: str = "", path: str = "/generate") -> str:
        if i % 3 == 2:
            return f'[{_stamp(i)}] INFO:     10.0.0.1:5000 - "POST {path} HTTP/1.1" 200 OK'
        return f"[{_stamp(i)} TP0] Decode batch, #running-req: {i % 40:2d}, #token: 8, token usage: 0.01, " \
               f"accept rate: 0.5, #queue-req: 0{tail}"

    lines = [line(i) for i in range(1500)]
    log.write_text("\n".join(lines) + "\n")
    firsts = [c.first_line for c in iter_chunks(log, records=True, chunk_bytes=parse.CHUNK_BYTES)]
    chunk = firsts[4] - 1                                # (0-based) the 5th chunk's first line
    at = {"head": chunk + 3, "past_small_rows": chunk + 30, "past_head": chunk + 80, "access_path": chunk + 30,
          "nowhere": None}[where]
    while at is not None and (at % 3 == 2) != (where == "access_path"):
        at += 1
    assert firsts[5] - firsts[4] > 90                    # (past_head lies in the same chunk)
    if at is not None:
        lines[at] = line(at, path="/cur_batch_for_debug") if where == "access_path" else \
            line(at, ", fwd occupancy: 0.93")
        assert ("INFO" in lines[at]) == (where == "access_path")
    log.write_text("\n".join(lines) + "\n")
    fast, general = _both_ways([log.parent], tmp_path, monkeypatch)
    _assert_same(fast, general)
    assert [r[0] for r in general["sources"]] == ["0.5.5" if where in ("past_head", "nowhere") else "0.5.23"]


def test_a_read_group_leaves_nothing_of_its_chunks_behind(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a group of chunks is read (its rows, its facts: the release searched over its bulk messages), no
    reference cycle keeps its chunks' bytes alive until the garbage collector happens to run: a parser worker
    reading a large log's ranges one after another grew by each group it read (60 MB a 32 MB range)."""
    import gc
    import weakref

    log = tmp_path / "server.log"
    log.write_text("\n".join(
        f"[{_stamp(i)} TP0] Decode batch, #running-req: {i % 40}, #token: 8, token usage: 0.01, accept rate: 0.5, "
        f"#queue-req: 0" if i % 3 else f'[{_stamp(i)}] INFO:     10.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK'
        for i in range(3000)) + "\n")
    texts: list[weakref.ref] = []

    class Text(sglang_fast._Text):
        def __init__(self, *args: object) -> None:
            super().__init__(*args)
            texts.append(weakref.ref(self))

    monkeypatch.setattr(sglang_fast, "_Text", Text)
    ctx = sglang_log.FileContext(engine="e", path="server.log", default_year=2026, reference=datetime(2026, 1, 1))
    group = sglang_fast.ScanGroup(ctx, group_bytes=64 * 1024)
    gc.disable()
    try:
        parsed = 0
        for chunk in iter_chunks(log, records=True, column="raw", chunk_bytes=16 * 1024):
            before, done = group.add(chunk.raw, chunk.first_line)
            parsed += len(before) + len(done)
        parsed += len(group.flush())
        del group, before, done
        assert parsed > 3 and len(texts) > 10
        assert [t for t in texts if t() is not None] == []
    finally:
        gc.enable()
