"""Envelopes (readers/envelopes.py): detection from content, stripping, rejoining split records,
collected times, lossless accounting and chunk-by-chunk streaming."""

from __future__ import annotations

import os
import re
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from envelope_wrappers import (
    T0,
    TIMED,
    WRAP_WIDTH,
    WRAPPERS,
    times,
    w_compose,
    w_cri,
    w_docker,
    w_fenced,
    w_journald_json,
    w_kubectl,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hangforensics.readers.envelopes import (
    LAYER_NAMES,
    EnvelopeStack,
    Unwrapped,
    Unwrapper,
    detect,
    unwrap_all,
)

DATA = Path(__file__).parent / "data" / "envelopes"
SHARED = Path(os.environ.get("HANGFORENSICS_SHARED", Path(__file__).resolve().parents[2] / "shared"))
EXPECTED_ONLY = {"cri_req.txt", "hard_wrap_glog.orig"}        # expected outputs, not inputs


def read(name: str | Path) -> list[str]:
    """Lines as the chunk reader hands them on: split on \\n only, the CR of CRLF removed."""
    path = name if isinstance(name, Path) else DATA / name
    lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [s[:-1] if s.endswith("\r") else s for s in lines]


def check_accounting(lines: list[str], u: Unwrapped, first_line: int = 1) -> None:
    """Every physical line is in exactly one payload line's span or in dropped (with its text)."""
    assert len(u.payload) == len(u.line) == len(u.span) == len(u.collected_ts)
    assert sum(u.span) + len(u.dropped) == len(lines)
    assert all(s >= 0 for s in u.span)
    seen = [p for p, _ in u.dropped]
    assert len(set(seen)) == len(seen)
    for p, text in u.dropped:
        assert text == lines[p - first_line]
    assert all(first_line <= ln < first_line + len(lines) for ln in u.line)
    assert not set(seen) & {ln for ln, sp in zip(u.line, u.span, strict=True) if sp == 1}


def feed_in_chunks(stack: EnvelopeStack, lines: list[str], cuts: list[int],
                   year_hint: int | date | None = None) -> Unwrapped:
    """Feed ``lines`` cut at ``cuts`` (then a final empty feed) and concatenate what comes out."""
    u = Unwrapper(stack, year_hint)
    out = Unwrapped()
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(lines)}), len(lines)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        part = u.feed(lines[a:b], a + 1)
        out.payload += part.payload
        out.line += part.line
        out.span += part.span
        out.collected_ts += part.collected_ts
        out.dropped += part.dropped
    last = u.feed([], len(lines) + 1, final=True)
    out.payload += last.payload
    out.line += last.line
    out.span += last.span
    out.collected_ts += last.collected_ts
    out.dropped += last.dropped
    assert u.carried_from() is None
    return out


def same(a: Unwrapped, b: Unwrapped) -> None:
    assert a.payload == b.payload
    assert a.line == b.line
    assert a.span == b.span
    assert a.collected_ts == b.collected_ts
    assert sorted(a.dropped) == sorted(b.dropped)


def dt(s: str) -> datetime:
    return datetime.fromisoformat(s)


INPUTS = sorted(p.name for p in DATA.iterdir() if p.name not in EXPECTED_ONLY)


# -- every file: accounting, and the same result whatever the chunking --------------------------------
@pytest.mark.parametrize("name", INPUTS)
def test_accounting_and_chunking(name: str) -> None:
    lines = read(name)
    stack, whole = unwrap_all(lines, year_hint=2026)
    check_accounting(lines, whole)
    for step in (1, 2, 3, 7):
        same(feed_in_chunks(stack, lines, list(range(step, len(lines), step)), 2026), whole)


EXPECTED_STACKS = {
    "ansi_tty.log": "ansi",
    "compose_kubectl.log": "compose+kubectl",
    "cri_split.log": "cri",
    "docker_json.log": "docker_json+ansi",
    "fluentbit.log": "fluentbit",
    "hard_wrap_glog.txt": "hard_wrap",
    "journald_json.log": "journald",
    "journald_newyear.log": "journald",
    "journald_short_iso.log": "journald",
    "kubectl.log": "kubectl",
    "markdown_paste.md": "markdown+compose",
    "neg_gdb.txt": "none",
    "neg_json_lines.log": "none",
    "neg_numbers.log": "none",
    "neg_pyspy.txt": "none",
    "plain_sglang.log": "none",
    "syslog_3164.log": "syslog",
    "syslog_5424.log": "syslog",
    "vector.log": "vector",
    "viewer_bracket.txt": "viewer_lineno",
    "viewer_colon.txt": "viewer_lineno",
    "viewer_pipe.txt": "viewer_lineno",
    "viewer_tab.txt": "viewer_lineno",
    "viewer_ts.txt": "viewer_ts",
}


def test_every_input_has_an_expected_stack() -> None:
    assert sorted(EXPECTED_STACKS) == INPUTS


@pytest.mark.parametrize("name", INPUTS)
def test_detected_stack(name: str) -> None:
    assert detect(read(name)).name == EXPECTED_STACKS[name]


# -- collectors ------------------------------------------------------------------------------------
def test_kubectl() -> None:
    stack, u = unwrap_all(read("kubectl.log"))
    assert stack == EnvelopeStack(("kubectl",), ("",))
    assert u.payload[1] == '[2026-05-24 11:44:46] INFO:     127.0.0.1:52210 - "GET /health HTTP/1.1" 200 OK'
    assert u.payload[3:7] == ["Process 4121: sglang::scheduler_TP0", "", 'Thread 4121 (active): "MainThread"',
                              "    Scheduler.run_batch (scheduler.py:2120)"]
    assert u.line == list(range(1, 9)) and u.span == [1] * 8 and u.dropped == []
    # envelope on UTC (payload on the pod's +8 h clock), nanoseconds cut to µs, Go's trimmed zeros
    assert u.collected_ts[:4] == [dt("2026-05-24 03:44:45.123456"), dt("2026-05-24 03:44:46.500000"),
                                  dt("2026-05-24 03:44:47"), dt("2026-05-24 03:44:47.000100")]
    assert u.collected_ts[7] == dt("2026-05-24 03:44:48")


def test_compose_around_kubectl() -> None:
    lines = read("compose_kubectl.log")
    _, u = unwrap_all(lines)
    assert u.payload[0] == "Attaching to llm-1"                     # not compose: kept whole
    assert u.payload[2:7] == ["[2025-12-24 02:45:01 TP0] Pyspy dump for PID 1807354:",
                              "Process 1807354: sglang::scheduler_TP0", "",
                              'Thread 1807354 (idle): "MainThread"',
                              "    all_reduce (torch/distributed/distributed_c10d.py:3252)"]
    assert u.payload[7] == "[router] no healthy worker for model meta-llama/Llama-3.1-70B-Instruct"
    assert u.collected_ts[0] is None and u.collected_ts[4] is None   # prefix-only line: blank, no time
    assert u.collected_ts[1] == dt("2025-12-23 18:44:52.593685")
    assert u.collected_ts[7] == dt("2025-12-23 18:45:02.500000")


def test_cri_rejoins_a_16k_split_line_across_interleaved_streams() -> None:
    lines = read("cri_split.log")
    req = read("cri_req.txt")[0]
    assert [len(lines[2]), len(lines[4])] == [len("2026-09-26T05:48:56.419652576+00:00 stderr P ") + 16384] * 2
    _, u = unwrap_all(lines)
    assert u.payload[2] == req                                      # P, P, F: one payload line
    assert (u.line[2], u.span[2]) == (3, 3)                         # physical lines 3, 5, 6
    assert u.collected_ts[2] == dt("2026-09-26 05:48:56.419652")   # time of the first part
    # the stdout line written between the parts comes after the joined line, in file order
    assert u.payload[3].startswith("[2026-09-26 13:48:56] INFO:") and u.line[3] == 4
    assert u.line == [1, 2, 3, 4, 7, 8, 9] and sum(u.span) == 9
    assert u.payload[5] == ""                                       # 'stderr F ' with nothing after it
    assert u.collected_ts[6] == dt("2026-09-26 05:48:57.100000")


def test_cri_partial_run_straddles_chunks() -> None:
    lines = read("cri_split.log")
    stack = detect(lines)
    u = Unwrapper(stack)
    a = u.feed(lines[:3], 1)                    # ends inside the P run
    assert a.payload[-1] == "scheduler.cur_batch.batch_size()=6"
    assert u.carried_from() == 3
    b = u.feed(lines[3:5], 4)                   # the stdout line waits for the run (file order)
    assert b.payload == [] and u.carried_from() == 3
    c = u.feed(lines[5:], 6, final=True)
    assert c.payload[0] == read("cri_req.txt")[0] and c.line[:2] == [3, 4]
    assert u.carried_from() is None


def test_cri_unfinished_run_is_flushed_at_the_end() -> None:
    lines = read("cri_split.log")[:5]           # the file ends before the F record
    _, u = unwrap_all(lines)
    check_accounting(lines, u)
    assert (u.line[2], u.span[2]) == (3, 2)
    assert u.payload[2] == read("cri_req.txt")[0][:32768]


def test_docker_json() -> None:
    lines = read("docker_json.log")
    _, u = unwrap_all(lines)
    assert u.payload[0] == '[2026-04-29 03:37:51] INFO:     10.1.2.3:5000 - "POST /generate HTTP/1.1" 200 OK'
    assert u.payload[3] == "scheduler.cur_batch.reqs=[Req(rid=a620, input_ids=[1, 2, 3, 4, 5], output_ids=[6])]"
    assert (u.line[3], u.span[3]) == (4, 2)                         # partial + its end (stderr), 4 and 6
    assert u.line[4] == 5                                           # the stdout line between them
    assert u.payload[5] == '    wait (threading.py:359)\tTab\\"quoted\\" caf\u00e9'   # JSON escapes undone
    assert u.payload[6] == ""
    assert u.payload[7] == lines[8]                                 # a cut JSON line: kept whole
    assert u.collected_ts[7] is None
    assert u.collected_ts[:3] == [dt("2026-04-29 03:37:51.430602"), dt("2026-04-29 03:37:52.041022"),
                                  dt("2026-04-29 03:37:53")]
    assert u.collected_ts[3] == dt("2026-04-29 03:37:53.000100")


def test_journald_short_across_new_year() -> None:
    lines = read("journald_newyear.log")
    expect = [dt("2025-12-31 23:59:58"), dt("2025-12-31 23:59:59")] + [dt("2026-01-01 00:00:01")] * 5 + [
        dt("2026-01-01 00:00:03")]
    stack = detect(lines)
    # the year of the first line, a file mtime in January, a dated payload line: all the same dates
    for hint in (2025, date(2026, 1, 2), datetime(2026, 1, 1, 9, 30), datetime(2025, 12, 31, 23, 0)):
        u = Unwrapper(stack, hint).feed(lines, 1, final=True)
        assert u.collected_ts == expect, hint
    assert u.payload[4] == "" and u.payload[6] == "    Scheduler.run_batch (scheduler.py:2120)"
    assert u.payload[7] == "sglang.service: Main process exited, code=killed, status=9/KILL"
    assert Unwrapper(stack).feed(lines, 1, final=True).collected_ts == [None] * 8    # no hint: no date


def test_journald_year_steps_and_late_lines() -> None:
    lines = [f"{d} gpu-07 python3[1]: line {i}" for i, d in enumerate(
        ["Nov 30 10:00:00", "Dec 31 23:59:59", "Jan  1 00:00:01", "Dec 31 23:59:58", "Mar  1 08:00:00",
         "Jun  1 08:00:00", "Feb  1 08:00:00", "Sep  1 08:00:00", "Feb  1 08:00:00"])]
    u = Unwrapper(detect(lines), 2024).feed(lines, 1, final=True)
    # back by more than half a year: a new year; less: out of order, the same year; Dec 31 after
    # Jan 1: a late line of the year before
    assert [t.year for t in u.collected_ts] == [2024, 2024, 2025, 2024, 2025, 2025, 2025, 2025, 2026]


def test_journald_short_iso_and_json() -> None:
    _, u = unwrap_all(read("journald_short_iso.log"))
    assert u.collected_ts == [dt("2026-05-24 03:44:45"), dt("2026-05-24 03:44:46.250000"),
                              dt("2026-05-24 03:44:47"), dt("2026-05-24 03:44:48")]
    assert u.payload[2] == "    Scheduler.run_batch (scheduler.py:2120)"
    assert u.payload[3] == "NVRM: Xid (PCI:0000:18:00): 79, pid=4121, GPU has fallen off the bus."
    lines = read("journald_json.log")
    _, u = unwrap_all(lines)
    assert u.payload[1] == "[2026-05-24 03:44:46 TP0] bad byte: \ufffdA"      # MESSAGE as byte values
    assert u.payload[2] == "scheduler.cur_batch.reqs=[Req(rid=a620, input_ids=[1, 2, 3], output_ids=[4])]"
    assert (u.line[2], u.span[2]) == (3, 2)                                   # _LINE_BREAK=line-max
    assert u.payload[3] == lines[4] and u.collected_ts[3] is None            # MESSAGE null: kept whole
    assert u.payload[4:] == ["Traceback (most recent call last):",
                             '  File "/usr/lib/python3.12/threading.py", line 359, in wait']
    assert u.line[4:] == [6, 6] and u.span[4:] == [1, 0]                     # one record, two lines
    assert u.collected_ts[0] == dt("2026-05-24 03:44:45.123456")


def test_syslog() -> None:
    _, u = unwrap_all(read("syslog_5424.log"))
    assert u.payload[1] == '[2026-01-12 06:25:11] INFO:     127.0.0.1:43537 - "GET /health HTTP/1.1" 200 OK'
    assert u.payload[2] == 'Thread 623 (idle): "MainThread"'                   # BOM removed
    assert u.payload[3] == "    all_reduce (torch/distributed/distributed_c10d.py:3252)"
    assert u.collected_ts == [dt("2026-01-12 06:25:10.522959"), dt("2026-01-12 06:25:11.500000"), None,
                              dt("2026-01-12 06:25:12")]
    lines = read("syslog_3164.log")
    u = Unwrapper(detect(lines), 2026).feed(lines, 1, final=True)
    assert u.payload[2] == "    Scheduler.run_batch (scheduler.py:2120)"
    assert u.collected_ts == [dt("2026-05-24 03:44:45"), dt("2026-05-04 03:44:46"), dt("2026-05-04 03:44:46")]


def test_fluentbit_and_vector() -> None:
    stack, u = unwrap_all(read("fluentbit.log"))
    assert stack.params == ("log\tdate",)
    assert u.payload[2:5] == ["[2026-05-24 03:44:47 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                              '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2268, '
                              "in run_scheduler_process",
                              "    scheduler.event_loop_normal()"]
    assert u.line == [1, 2, 3, 3, 3, 4] and u.span == [1, 1, 1, 0, 0, 1]
    assert u.collected_ts[1] == dt("2026-05-24 03:44:46.500000")
    lines = read("vector.log")
    stack, u = unwrap_all(lines)
    assert stack.params == ("message\ttimestamp",)
    assert u.payload[2] == "" and u.payload[3] == lines[3] and u.collected_ts[3] is None
    assert u.collected_ts[0] == dt("2026-05-24 03:44:45.123456")


def test_ansi() -> None:
    lines = read("ansi_tty.log")
    assert "\r" in lines[2]
    _, u = unwrap_all(lines)
    assert u.payload[:4] == [
        "[2026-10-06 12:56:07] INFO:     Started server process [916327]",
        "[2026-10-06 12:56:07] INFO:     Uvicorn running on http://0.0.0.0:30010 (Press CTRL+C to quit)",
        "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:02<00:00,  1.9it/s]",
        '[2026-10-06 12:56:08] INFO:     127.0.0.1:41500 - "GET /get_model_info HTTP/1.1" 200 OK']
    assert u.payload[5] == "[2026-10-06 12:56:10 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"
    assert u.collected_ts == [None] * 6


# -- pastes ----------------------------------------------------------------------------------------
def test_markdown_paste_with_prose_fences_quotes_and_compose() -> None:
    lines = read("markdown_paste.md")
    stack, u = unwrap_all(lines)
    assert stack.layers == ("markdown", "compose")
    assert u.payload == [
        "[2026-04-14 10:40:33 TP0] Pyspy dump for PID 1185480:",
        "Process 1185480: sglang::scheduler_TP0",
        "",
        'Thread 1185480 (active): "MainThread"',
        "    EAGLEWorker.draft (speculative/eagle_worker.py:414)",
        "[2026-04-14 10:40:34 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        "Process 1185480: sglang::scheduler_TP0",          # the quoted py-spy dump, indentation kept
        "Python v3.12.3 (/usr/bin/python3.12)",
        "",
        'Thread 1185480 (active): "MainThread"',
        "    0x7f48ec6f595f (libcuda.so.1)",
        "    Scheduler.run_batch (scheduler.py:2120)",
        ">>> torch.cuda.synchronize()",                     # '>' inside an unquoted fence is payload
    ]
    assert u.line == [8, 9, 10, 11, 12, 13, 19, 20, 21, 22, 23, 24, 27]
    assert [p for p, _ in u.dropped] == [1, 2, 3, 4, 5, 6, 7, 14, 15, 16, 17, 18, 25, 26, 28, 29]
    assert u.dropped[0] == (1, "Hi team, the decode server hung again last night around 10:40.")
    assert (7, "```text") in u.dropped and (15, "</details>") in u.dropped


def test_markdown_fence_state_carries_across_chunks() -> None:
    lines = ["Prose before.", "```", "[2026-04-14 10:40:34 TP0] x", "Not prose inside a fence.", "```",
             "Prose after.", "[2026-04-14 10:40:35 TP0] evidence outside a fence"]
    stack = detect(lines)
    assert stack.name == "markdown"
    for cut in range(1, len(lines)):
        u = feed_in_chunks(stack, lines, [cut])
        assert u.payload == [lines[2], lines[3], lines[6]] and u.line == [3, 4, 7]


def test_a_log_with_a_stray_fence_is_not_a_paste() -> None:
    # a logged prompt that holds a fenced block: the records around it are not prose
    lines = [*PLAIN[:10], "```python", "print('hi')", "```", "[mamba] total=199, available=191, evictable=7",
             *PLAIN[10:]]
    stack, u = unwrap_all(lines)
    assert stack.name == "none" and u.payload == lines


def test_a_log_with_its_own_leading_time_is_not_a_viewer_column() -> None:
    lines = [f"2026-05-24 03:44:{s:02d} INFO launcher: rank {s % 8} heartbeat ok" for s in range(20)]
    assert detect(lines).name == "none"
    lines = [f"2026-05-24 03:44:{s:02d},123 - sglang.launch - INFO - [2026-05-24 03:44:{s:02d}] child says hi"
             for s in range(20)]
    assert detect(lines).name == "none"


def test_quote_only_paste_keeps_everything_but_the_markers() -> None:
    lines = ["> Attaching what I could grab before the pod was restarted.", ">",
             "> [rank13]:[E709 01:45:38.253416776 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective",
             ">   what():  [PG 130 Rank 0] Process group watchdog thread terminated",
             "> Thread 0x00007f62890d74c0 (most recent call first):", ">   <no Python frame>"]
    stack, u = unwrap_all(lines)
    assert stack.name == "markdown"
    assert u.payload == [s[2:] for s in lines] and u.dropped == []     # no fences: no prose call


@pytest.mark.parametrize("name, first", [
    ("viewer_bracket.txt", "[2026-04-24 14:13:12 TP0] Decode batch"),
    ("viewer_pipe.txt", '[2026-10-03 02:09:56] INFO:     10.3.58.117:52015 - "POST'),
    ("viewer_colon.txt", "    _bootstrap (threading.py:1030)"),
    ("viewer_tab.txt", '[2026-09-25 10:48:46] INFO:     10.18.119.218:46638 - "POST'),
])
def test_viewer_line_numbers(name: str, first: str) -> None:
    lines = read(name)
    _, u = unwrap_all(lines)
    assert u.payload[0].startswith(first)
    assert u.line == list(range(1, len(lines) + 1)) and u.dropped == []
    assert "" in u.payload                                  # a numbered blank line is a blank payload line
    assert not any(re.match(r"\[?\s*\d{4,}[]\t|:]", p) for p in u.payload)


def test_viewer_line_number_styles_exactly() -> None:
    assert unwrap_all(read("viewer_colon.txt"))[1].payload[1] == 'Thread 3171947 (active): "Thread-6 (_watchdog_thread)"'
    assert unwrap_all(read("viewer_tab.txt"))[1].payload[5] == "    0x7f31d0ff258a (libcuda.so.1)"
    assert unwrap_all(read("viewer_pipe.txt"))[1].payload[4] == "    wait (threading.py:359)"
    assert unwrap_all(read("viewer_bracket.txt"))[1].payload[5] == "    draft (speculative/eagle_worker.py:389)"


def test_quote_around_viewer_line_numbers() -> None:
    lines = ["> [22547] (APIServer pid=272698) INFO:     10.20.254.191:48110 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
             "> [22548] (APIServer pid=272698) INFO 04-24 14:13:12 [loggers.py:251] Engine 000: Avg prompt throughput: 1.0",
             "> [22549] (EngineCore_DP0 pid=273149) INFO 04-24 14:16:44 [shm_broadcast.py:466] No available shared memory"]
    stack, u = unwrap_all(lines)
    assert stack.name == "markdown+viewer_lineno"
    assert u.payload == [s[10:] for s in lines]


def test_viewer_timestamp_column() -> None:
    lines = read("viewer_ts.txt")
    stack, u = unwrap_all(lines)
    assert stack.params == (" ",)
    assert u.payload[0].startswith("[2025-02-18 20:54:05 TP0] Decode batch")   # the payload keeps its own time
    assert u.payload[3] == "" and u.payload[5] == "    Scheduler.run_batch (scheduler.py:2120)"
    assert u.collected_ts[0] == dt("2025-02-18 12:54:07")                     # the viewer's clock
    assert u.collected_ts[1:6] == [dt("2025-02-18 12:54:08")] * 5


def test_hard_wrapped_glog() -> None:
    lines = read("hard_wrap_glog.txt")
    stack, u = unwrap_all(lines)
    assert stack == EnvelopeStack(("hard_wrap",), ("124",))
    assert lines[0].endswith("WorkNCCL(S") and lines[1].startswith("eqNum=1191868")
    assert u.payload == read("hard_wrap_glog.orig")
    assert u.line == [1, 4, 6, 8, 11, 12, 14] and u.span == [3, 2, 2, 3, 1, 2, 3]


def test_hard_wrap_carries_across_chunks() -> None:
    lines = read("hard_wrap_glog.txt")
    stack = detect(lines)
    u = Unwrapper(stack)
    a = u.feed(lines[:1], 1)
    assert a.payload == [] and u.carried_from() == 1
    rest = u.feed(lines[1:], 2, final=True)
    assert rest.payload == read("hard_wrap_glog.orig")


def test_a_log_of_exact_width_lines_is_not_hard_wrapped() -> None:
    # access lines of one length, each followed by a record: a width, not a wrap
    lines = [f'[2026-06-13 14:13:{s:02d}] INFO:     10.38.63.192:6{s:04d} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
             for s in range(20)]
    assert len({len(s) for s in lines}) == 1
    assert detect(lines).name == "none"


# -- negatives -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["plain_sglang.log", "neg_pyspy.txt", "neg_gdb.txt", "neg_numbers.log",
                                  "neg_json_lines.log"])
def test_plain_evidence_has_no_envelope(name: str) -> None:
    lines = read(name)
    stack, u = unwrap_all(lines)
    assert stack.name == "none"
    assert u.identity and u.payload is lines and u.dropped == []
    assert u.collected_ts == [None] * len(lines) and u.span == [1] * len(lines)


def test_none_is_free() -> None:
    lines = read("plain_sglang.log")
    u = Unwrapper(EnvelopeStack()).feed(lines, 101)
    assert u.payload is lines and u.line == list(range(101, 101 + len(lines)))


@pytest.mark.skipif(not (SHARED / "formats").is_dir(), reason="../shared is not beside the repository")
def test_real_stack_dumps_have_no_envelope() -> None:
    for path in sorted((SHARED / "formats").rglob("*")):
        if path.is_file() and path.suffix in (".txt", ".json"):
            assert detect(read(path)).name == "none", path


@pytest.mark.skipif(not (SHARED / "examples" / "wrapped").is_dir(), reason="../shared is not beside the repository")
def test_wrapped_sample_fleet_unwraps_to_the_plain_fleet() -> None:
    """examples/wrapped/ is examples/fleet/ as collectors hand it over: unwrapping gives it back."""
    names = set()
    for engine in sorted((SHARED / "examples" / "wrapped" / "fleet").iterdir()):
        wrapped = read(engine / "server.log")
        plain = read(SHARED / "examples" / "fleet" / engine.name / "server.log")
        stack = detect(wrapped[:400])
        u = feed_in_chunks(stack, wrapped, list(range(997, len(wrapped), 997)), 2026)
        assert u.payload == plain, engine.name
        check_accounting(wrapped, u)
        if stack.layers and stack.layers != ("ansi",):
            assert all(t is not None for t in u.collected_ts), engine.name
        names.add(stack.name)
    assert {"kubectl", "cri", "docker_json", "journald", "syslog", "compose+kubectl", "ansi"} <= names


# -- invariance: the same evidence under every envelope unwraps to the same lines --------------------
PLAIN = read("plain_sglang.log")

def test_plain_sample_has_no_wrap_width_line() -> None:
    # a line of exactly the wrap width would be joined with the next by a terminal's wrap too
    assert all(len(s) != WRAP_WIDTH for s in PLAIN)


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_invariance(name: str) -> None:
    wrappers, expect = WRAPPERS[name]
    wrapped = PLAIN
    for wrap in wrappers:
        wrapped = wrap(wrapped)
    stack = detect(wrapped)
    assert stack.name == expect
    u = Unwrapper(stack, year_hint=2026).feed(wrapped, 1, final=True)
    check_accounting(wrapped, u)
    assert u.payload == PLAIN
    if set(stack.layers) & TIMED:
        assert all(t is not None for t in u.collected_ts)
        if "viewer_ts" not in stack.layers:      # (journald short and RFC 3164 print whole seconds)
            assert abs(u.collected_ts[0] - T0) < timedelta(seconds=1)
            assert abs(u.collected_ts[-1] - times(PLAIN)[-1]) < timedelta(seconds=1)
    same(feed_in_chunks(stack, wrapped, list(range(5, len(wrapped), 5)), 2026), u)


def test_fenced_paste_drops_exactly_the_prose_and_fences() -> None:
    wrapped = w_fenced(PLAIN)
    _, u = unwrap_all(wrapped)
    assert [t for _, t in u.dropped] == ["The decode server hung, log below:", "", "```log", "```", "",
                                         "Thanks for looking!"]


# -- record starts for the chunk reader ------------------------------------------------------------
def starts(stack: EnvelopeStack, lines: list[str]) -> list[int]:
    """1-based lines where the stack's record_start pattern cuts (it includes the newline before)."""
    data = ("\n" + "\n".join(lines) + "\n").encode()
    return [data.count(b"\n", 0, m.start()) + 1 for m in stack.record_start().finditer(data)]


RECORD_LINES = [i + 1 for i, s in enumerate(PLAIN) if re.match(r"\[(?:\d{4}-|rank\d+\]:\[)", s)]


@pytest.mark.parametrize("name", [n for n in WRAPPERS if n not in ("hard_wrap", "hard_wrap+kubectl", "cri",
                                                                    "docker_json", "journald_json",
                                                                    "fluentbit+cri", "fenced",
                                                                    "fenced+compose+kubectl", "details")])
def test_record_start_finds_the_records_behind_the_envelope(name: str) -> None:
    wrappers, _ = WRAPPERS[name]
    wrapped = PLAIN
    for wrap in wrappers:
        wrapped = wrap(wrapped)
    assert starts(detect(wrapped), wrapped) == RECORD_LINES


def test_record_start_of_joined_and_pasted_envelopes() -> None:
    for wrappers in ([w_cri], [w_docker], [w_journald_json], [w_fenced], [w_kubectl, w_compose, w_fenced]):
        wrapped = PLAIN
        for wrap in wrappers:
            wrapped = wrap(wrapped)
        stack = detect(wrapped)
        u = unwrap_all(wrapped, stack)[1]
        # the record heads' physical lines (a split record starts at its first part)
        want = [u.line[i] for i, s in enumerate(u.payload) if re.match(r"\[(?:\d{4}-|rank\d+\]:\[)", s)]
        assert starts(stack, wrapped) == want, stack.name


def test_record_start_patterns_compile_for_every_layer() -> None:
    vllm = b"\n(APIServer pid=3164) INFO 09-01 12:00:05 [loggers.py:259] Engine 000: Avg"
    assert EnvelopeStack().record_start().search(vllm)
    assert EnvelopeStack().record_start().search(b"\n[I710 18:00:32.426302794 ProcessGroupNCCL.cpp:2395] x")
    params = {"journald": ["short", "short-iso", "json"], "syslog": ["5424", "3164"],
              "viewer_lineno": ["bracket", "pipe", "colon", "colon_space", "tab"], "fluentbit": ["log\tdate"],
              "vector": ["message\ttimestamp"], "hard_wrap": ["100"], "markdown": ["fenced"], "viewer_ts": [" "]}
    for name in LAYER_NAMES:
        for p in params.get(name, [""]):
            stack = EnvelopeStack((name,), (p,))
            assert isinstance(stack.record_start(), re.Pattern)
            assert isinstance(stack.prefix_pattern(), str)
    pipe = EnvelopeStack(("viewer_lineno",), ("pipe",)).record_start()
    assert pipe.search(" 12 \u2502 [2026-01-01 00:00:00] x".join(["\n", ""]).encode())


# -- hypothesis: never raises, always accounts, chunking never changes the result ---------------------
STACKS = [EnvelopeStack()] + [EnvelopeStack((n,), (p,)) for n, ps in {
    "kubectl": [""], "cri": [""], "docker_json": [""], "journald": ["short", "short-iso", "json"],
    "syslog": ["5424", "3164"], "fluentbit": ["log\tdate"], "vector": ["message\ttimestamp"], "ansi": [""],
    "compose": [""], "markdown": ["", "fenced", "quote,fenced"], "viewer_lineno": ["bracket", "pipe", "colon", "tab"],
    "viewer_ts": [" "], "hard_wrap": ["8", "20"], "time_of_day": [""], "inline_records": [""]}.items() for p in ps] + [
    EnvelopeStack(("markdown", "inline_records"), ("fenced", "")),
    EnvelopeStack(("markdown", "compose", "kubectl"), ("fenced", "", "")),
    EnvelopeStack(("hard_wrap", "markdown", "cri"), ("12", "fenced", "")),
    EnvelopeStack(("cri", "hard_wrap", "markdown"), ("", "10", "quote,fenced")),
    EnvelopeStack(("docker_json", "ansi", "hard_wrap", "markdown"), ("", "", "6", "fenced")),
]

# characters that make envelopes and their traps: prefixes, quotes, fences, escapes, JSON, digits
PIECES = ["2026-05-24T03:44:45.123456789Z ", " stderr P ", " stdout F ", "sglang-1  | ", "> ", ">", "```", "~~~",
          "<details>", '{"log":"', '\\n","stream":"stderr","time":"2026-05-24T03:44:45Z"}', '{"MESSAGE":[255,65],',
          '"__REALTIME_TIMESTAMP":"99999999999999999999"}', "May 24 03:44:45 gpu-07 python3[1]: ", "Feb 29 ",
          "<14>1 - - - - - - ", "<14>May 24 03:44:45 h a: ", "[2026-05-24 03:44:45 TP0] ", "[23:59:58 TP1] ", "[80746] ", " 1234 | ",
          "12:", " 34513\t", "\x1b[32m", "\x1b]0;t\x07", "\r", "\t", "    ", "\\", '"', "{", "}", "9999-99-99T99:99:99Z ",
          "0000-01-01T00:00:00+99:99 ", "INFO 05-01 10:00:05 [loggers.py:116] ", "(VllmWorker TP1 pid=4) ",
          "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: ", "Engine 000: ", "`"]
line_st = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=6).map("".join).map(
    lambda s: s.replace("\n", ""))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(line_st, max_size=30), stack_i=st.integers(0, len(STACKS) - 1),
       cuts=st.lists(st.integers(0, 30), max_size=5), hint=st.sampled_from([None, 2026, date(2026, 1, 1)]))
def test_property_any_input_any_stack(lines: list[str], stack_i: int, cuts: list[int],
                                      hint: int | date | None) -> None:
    stack = STACKS[stack_i]
    whole = Unwrapper(stack, hint).feed(lines, 1, final=True)
    check_accounting(lines, whole)
    same(feed_in_chunks(stack, lines, cuts, hint), whole)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from([n for n in INPUTS if n != "cri_split.log"]), data=st.data())
def test_property_mutated_files(name: str, data: st.DataObject) -> None:
    lines = read(name)
    for _ in range(data.draw(st.integers(0, 6))):
        if not lines:
            break
        i = data.draw(st.integers(0, len(lines) - 1))
        op = data.draw(st.sampled_from(["cut", "drop", "dup", "insert", "swap", "garble"]))
        s = lines[i]
        if op == "cut":
            lines[i] = s[:data.draw(st.integers(0, max(0, len(s))))]
        elif op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, s)
        elif op == "insert":
            lines.insert(i, data.draw(line_st))
        elif op == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            k = data.draw(st.integers(0, len(s)))
            lines[i] = s[:k] + data.draw(st.text(max_size=5)).replace("\n", "") + s[k:]
    stack = detect(lines)
    whole = Unwrapper(stack, 2026).feed(lines, 1, final=True)
    check_accounting(lines, whole)
    cuts = data.draw(st.lists(st.integers(0, len(lines)), max_size=6))
    same(feed_in_chunks(stack, lines, cuts, 2026), whole)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=400))
def test_property_arbitrary_bytes(raw: bytes) -> None:
    lines = raw.decode("utf-8", errors="replace").split("\n")
    stack = detect(lines)
    u = Unwrapper(stack, 2026).feed(lines, 1, final=True)
    check_accounting(lines, u)


@pytest.mark.parametrize("name", ["docker_json.log", "journald_json.log", "fluentbit.log", "vector.log"])
def test_a_short_excerpt_cut_mid_line_keeps_its_json_envelope(tmp_path: Path, name: str) -> None:
    """Three whole lines of a JSON collector's log and a fourth cut short (a paste, a live file mid-write):
    the cut line is no JSON, and one line in four fell short of the share a layer needs; it does not vote
    now, and the file is read behind its envelope, as the whole file is."""
    from hangforensics.readers.kinds import sniff_kind

    whole = [s for s in read(name) if s.strip()]
    full_kind, full_stack = sniff_kind(DATA / name)
    cut = tmp_path / name
    cut.write_text("\n".join(whole[:3]) + "\n" + whole[3][: len(whole[3]) // 2])
    assert sniff_kind(cut) == (full_kind, full_stack) and full_stack.layers


def _tod_decode(t: str) -> str:
    return (f"[{t} TP0] Decode batch. #running-req: 1, #token: 10, token usage: 0.00, "
            "gen throughput (token/s): 40.00, #queue-req: 0")


def _ingest_at(tmp_path: Path, lines: list[str], mtime: datetime) -> Any:
    """``lines`` as one engine's server.log last written at ``mtime``, ingested: the open store."""
    from hangforensics.api import ingest
    from hangforensics.store import Store

    log = tmp_path / "engine" / "server.log"
    log.parent.mkdir()
    log.write_text("\n".join(lines) + "\n")
    os.utime(log, (mtime.timestamp(), mtime.timestamp()))
    ingest([log.parent], db=tmp_path / "x.duckdb")
    return Store(tmp_path / "x.duckdb")


def test_sglang_2024_time_of_day_head_gets_its_date(tmp_path: Path) -> None:
    """SGLang's 2024 releases printed '[04:40:55 TP0] Decode batch. ...': the date is put in from the file's
    modification time (a line later in the day than it is of the day before), the next day after midnight;
    the file is then read as any SGLang log: its batch lines, access lines and traceback."""
    lines = [_tod_decode("23:59:58"), 'INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK',
             _tod_decode("23:59:59"), _tod_decode("00:00:01"),
             "[00:00:02 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "scheduler.py", line 1, in event_loop', "RuntimeError: boom"]
    assert detect(lines).name == "time_of_day"
    assert detect(["[12:00:01] Starting worker", "[12:00:02] Worker ready", "[12:00:03] Done"]).name == "none"
    rs = EnvelopeStack(("time_of_day",), ("",)).record_start()
    assert rs.match(b"\n[04:40:55 TP0] Decode") and not rs.match(b"\n  File x")
    with _ingest_at(tmp_path, lines, datetime(2024, 8, 31, 0, 5)) as st:
        assert st.scalar("SELECT envelope FROM sources") == "time_of_day"
        assert [r["ts"] for r in st.query("SELECT ts FROM batches ORDER BY line")] == [
            datetime(2024, 8, 30, 23, 59, 58), datetime(2024, 8, 30, 23, 59, 59), datetime(2024, 8, 31, 0, 0, 1)]
        assert st.scalar("SELECT count(*) FROM http_requests") == 1
        assert st.scalar("SELECT ts FROM events WHERE kind = 'scheduler_exception'") == datetime(2024, 8, 31, 0, 0, 2)
        assert st.scalar("SELECT sum(unparsed_lines) FROM sources") == 0


def test_time_of_day_behind_a_timed_collector_takes_its_date(tmp_path: Path) -> None:
    """Behind kubectl's timestamps the date is the collected time's (the day that puts the line's time of day
    nearest it, across midnight and with the collector on UTC hours away), not the file's modification time."""
    # local 23:59:59 and 00:00:01 collected at 21:59:59Z and 22:00:01Z (the payload two hours ahead of UTC)
    lines = [f"2024-08-30T{c}.000000000Z {_tod_decode(t)}" for c, t in
             [("21:59:59", "23:59:59"), ("22:00:01", "00:00:01"), ("22:00:02", "00:00:02")]]
    with _ingest_at(tmp_path, lines, datetime(2026, 12, 5, 12, 0)) as st:
        assert st.scalar("SELECT envelope FROM sources") == "kubectl+time_of_day"
        assert [r["ts"] for r in st.query("SELECT ts FROM batches ORDER BY line")] == [
            datetime(2024, 8, 30, 23, 59, 59), datetime(2024, 8, 31, 0, 0, 1), datetime(2024, 8, 31, 0, 0, 2)]
