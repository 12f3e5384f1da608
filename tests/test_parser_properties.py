"""Property-based tests of the parsers (issue 5, item 3): no exception on any input, and the line accounting holds.

Two kinds of input: arbitrary text (NUL, control characters, CR, unicode without surrogates, very long
lines), and grammar-aware lines built from real fragments of every format (SGLang log lines, py-spy, gdb,
faulthandler, torch traces, nvidia-smi CSV) and then mutated: truncated, fields replaced by huge or negative
numbers or random text, prefixes duplicated or two lines spliced mid-line, timestamps out of range.

Accounting (what ``ingest`` relies on): a log chunk's ``unparsed`` rows are exactly its unparsed count, each
a distinct line of the chunk; a stack parser's ``consumed`` and ``unmatched`` offsets split the lines it was
given (every line is one or the other), and every thread it returns starts on a consumed line.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from datetime import datetime

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from hangforensics.parsers import gpu
from hangforensics.parsers.capture import capture_errors, process_snapshot
from hangforensics.parsers.collectives import torch_nccl
from hangforensics.parsers.sglang import leaks, sglang_log
from hangforensics.parsers.stacks import faulthandler, gdb, native_trace, pyspy, stackrows
from hangforensics.readers import kinds

# derandomize: CI and a laptop run the same examples; sizes keep the whole file well under a minute on 2 cores
FAST = settings(deadline=None, max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(deadline=None, max_examples=120, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

# -- real fragments (from examples/seed-incident, tests/data and ../shared/formats) ---------------------------
LOG = [
    "[2026-11-20 10:22:13 TP3] Decode batch, #running-req: 11, #token: 8038, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 961.83, #queue-req: 0",
    "[2026-11-18 09:58:56 TP0] Prefill batch, #new-seq: 3, #new-token: 1706, #cached-token: 0, token usage: 0.01, "
    "#running-req: 9, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 1473.05",
    "[2026-05-01 10:00:00 DP1 TP3 EP3] Decode batch [812], #running-req: 4, #token: 100, token usage: 0.00, "
    "#prealloc-req: 0, #transfer-req: 2, ",
    '[2026-11-18 10:04:08] INFO:     10.0.3.40:56116 - "GET /metrics HTTP/1.1" 200 OK',
    '[2026-11-18 10:04:10] INFO:     10.0.0.12:41234 - "GET /health HTTP/1.1" 200 OK',
    'INFO:     10.0.0.12:41234 - "GET /health HTTP/1.1" 503 Service Unavailable',
    "[2026-11-18 10:04:09 TP4] Scheduler debug info:",
    "symmetric-memory registration in progress: comm=94353084751536 group=tp:0",
    "scheduler.cur_batch_for_debug.batch_size()=15",
    "[full] total=1148936, available=831931, evictable=306189, protected=0, session_held=0, uncached=0",
    "[2026-11-18 10:04:09 TP4] Pyspy dump for PID 2145 (py-spy dump --native --pid 2145):",
    "[2026-11-18 10:04:09 TP4] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    "[2026-11-18 10:04:14] SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=None. It usually means one child failed.",
    "[2026-05-01 10:00:00 TP0] max_total_num_tokens=1148936, chunked_prefill_size=16384, max_prefill_tokens=16384",
    "[2026-05-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=8, enable_symm_mem=True, watchdog_timeout=300)",
    "[2026-05-01 10:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):",
    "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=10, protected_size=0, "
    "evictable_size=5, max_total_num_tokens=100, leaked_full_pages={1, 2, 3}, leaked_mamba_pages=None",
    "[rank3]:[E923 14:11:31.266266068 ProcessGroupNCCL.cpp:709] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1974636, OpType=ALLREDUCE, NumelIn=385024, NumelOut=385024, Timeout(ms)=240000) "
    "ran for 240110 milliseconds before timing out.",
    "[rank3]:[E923 14:11:31.266286068 ProcessGroupNCCL.cpp:1493] [PG ID 2 PG GUID 3 Rank 3]  failure detected by "
    "watchdog at work sequence id: 1974636 PG status: last enqueued work: 1974636, last completed work: 1974635",
    "bom2-b200-09:5123:5481 [3] NCCL INFO ncclCommInitRankConfig comm 0x55d0f2053e89 rank 3 nranks 4 - Init START",
    "(EngineCore_DP0 pid=123) INFO 11-05 16:39:14 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 12.5 tokens/s, Running: 3 reqs, Waiting: 0 reqs",
    "Environment: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0",
    "Fatal Python error: Aborted",
    "Timeout (0:05:00)!",
    "Traceback (most recent call last):",
    "+ export NCCL_DEBUG=INFO",
    "Loading safetensors checkpoint shards:  10% Completed | 3/30 [00:04<00:36,  1.37s/it]",
]
PYSPY = [
    "Process 2147: sglang::scheduler_TP3",
    "Python v3.12.3 (/usr/bin/python3.12)",
    'Thread 2147 (idle): "MainThread"',
    'Thread 0x7F1C2A3B4740 (active+gil): "MainThread"',
    "Thread 3489 (idle)",
    "    all_reduce (torch/distributed/distributed_c10d.py:2501)",
    "    _register_segments_for_comm (sglang/srt/distributed/device_communicators/pynccl_allocator.py:417)",
    "    recvmsg (libc.so.6)",
    "    sock_recvmsg (socketmodule.c:4036)",
    "        Arguments:",
    "            self: <Scheduler at 0x7f1c2a3b4740>",
    "Parent Process 1874: python3 -m sglang.launch_server",
    "-" * 60,
]
PYSPY_JSON = [
    "[", "  {", '    "pid": 8754,', '    "thread_id": 140702054872768,', '    "thread_name": "ResultConsumer",',
    '    "os_thread_id": 8763,', '    "active": false,', '    "owns_gil": false,', '    "frames": [', "      {",
    '        "name": "Condition.wait",', '        "filename": "/usr/lib/python3.11/threading.py",',
    '        "module": null,', '        "short_filename": "threading.py",', '        "line": 327', "      }",
    "    ]", "  },", "  }", "]", '[{"pid": 1, "thread_id": 7, "frames": [{"name": "f", "line": 3}]}]',
]
GDB = [
    "[New LWP 8758]",
    "[Thread debugging using libthread_db enabled]",
    'Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".',
    "0x00007ff7efeed545 in __GI___clock_nanosleep (clock_id=clock_id@entry=1, flags=flags@entry=1) at "
    "../sysdeps/unix/sysv/linux/clock_nanosleep.c:48",
    "48\t../sysdeps/unix/sysv/linux/clock_nanosleep.c: No such file or directory.",
    'Thread 14 (Thread 0x7f8153fff6c0 (LWP 6114) "pt_gloo_runloop"):',
    "Thread 1 (process 2147):",
    "#0  __futex_abstimed_wait_common64 (private=0, cancel=true) at ./nptl/futex-internal.c:57",
    "#3  0x00007f81708a741d in ncclCommWindowRegister (comm=0x55d0, buff=0x7f00, size=4096, win=0x7ffd, "
    'flags=0) from /usr/lib/libnccl.so.2',
    "#1  0x00007f81779d62a1 in ?? () from /opt/venv/lib/python3.11/site-packages/pyzmq.libs/libzmq.so.5",
    '#4  0x0000 in f (s=0x1 "a)b\\"c") at x.c:1',
    "Traceback (most recent call first):",
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce',
    "    work = group.allreduce([tensor], opts)",
    "  <built-in method recvmsg of socket object at remote 0x7f1c>",
    "  Waiting for the GIL",
    "No locals.",
    "        i = 3",
    "[Inferior 1 (process 2147) detached]",
    "Attaching to process 2147",
    "--Type <RET> for more, q to quit, c to continue without paging--",
]
FAULTHANDLER = [
    "Fatal Python error: Segmentation fault",
    "Timeout (0:05:00)!",
    "Thread 0x00007f2e4a7fc700 (most recent call first):",
    "Current thread 0x00007f3b4e1ff740 [MainThread] (most recent call first):",
    "Stack (most recent call first):",
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501 in all_reduce',
    '  File "<string>", line ??? in <module>',
    "  <no Python frame>",
    "Current thread's C stack trace (most recent call first):",
    '  Binary file "/usr/lib/libpython3.14.so.1.0", at _Py_DumpStack+0x4c [0x7f0000001234]',
    "Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)",
    '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 1418 in run_baFatal '
    "Python error: Aborted",
    "tch",
]
NATIVE = [
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception",
    "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:688 (most recent call "
    "first):",
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f8e1b5b3446 in /opt/torch/lib/libc10.so)",
    "frame #4: <unknown function> + 0xdc253 (0x7f8e68cb0253 in /lib/x86_64-linux-gnu/libstdc++.so.6)",
    "frame #5: /lib/libc.so.6(+0x8f1ca) [0x7f0000008f1ca]",
    "C++ CapturedTraceback:",
    "#7 c10d::ProcessGroupNCCL::watchdogHandler() from ProcessGroupNCCL.cpp:1721",
    "#5 c10::Error::Error(c10::SourceLocation, std::string) from ??:0",
    "[rank3]:frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f8e1c890fc0 in /opt/libtorch_cuda.so)",
]
GPU = [
    "timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]",
    "2026/04/02 12:16:01.123, 3, 0 %, 71.52 W, 61234 MiB",
    "2026/04/02 12:16:02.123, 7, 100 %, 699.10 W, 80000 MiB",
    "2026/13/45 99:99:99.123, -1, -5 %, nan W, 1e308 MiB",
]
CAPTURE_ERRORS = [
    "Error: Failed to get process executable name. Check that the process is running.",
    "Caused by:", "exit status: 0", "exit status: 1", "ptrace: No such process.",
    "ptrace: Operation not permitted.", "Permission Denied: Try running again with elevated permissions",
    "warning: process 2147 is already traced by process 99",
]
SNAPSHOT = [
    "top - 14:02:11 up 12 days,  3:04,  1 user,  load average: 8.12, 8.05, 7.98",
    "Threads: 1290 total,   2 running, 1288 sleeping,   0 stopped,   0 zombie",
    "%Cpu(s): 10.3 us,  2.1 sy,  0.0 ni, 87.4 id,  0.0 wa,  0.0 hi,  0.2 si,  0.0 st",
    "MiB Mem : 2063937.+total, 1523456.1 free, 401234.5 used, 139246.6 buff/cache",
    "    PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND",
    "2718281 sglang    20   0  118.2g  41.6g   2.1g R 299.7   2.0  12345:01 sglang::scheduler_TP1",
    "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND",
    "sglang   2718282 97.9  2.0 124059392 43724800 ?   Dl   Oct13 1190:37 sglang::scheduler_TP2",
    "UID          PID    PPID     LWP  C NLWP STIME TTY          TIME CMD",
    "sglang   2718282 2718100 2718330  0  187 Oct13 ?        00:00:41 sglang::scheduler_TP2",
    "    PID STAT %CPU WCHAN                            CMD",
    "2718282 Dl   97.9 os_wait_on_event                 sglang::scheduler_TP2",
    "  PID STARTED                  CMD",
    "  123 Thu Sep 25 10:48:46 2026 VllmWorker-3",
    "Wed Oct 14 05:19:02 UTC 2026",
    "2026-10-14T05:19:02+00:00",
    "$ ps aux | grep sglang",
]
ALL = LOG + PYSPY + PYSPY_JSON + GDB + FAULTHANDLER + NATIVE + GPU + CAPTURE_ERRORS + SNAPSHOT

# -- strategies -----------------------------------------------------------------------------------------------
# A line as the log reader yields it: no '\n' (it splits there); '\r' only mid-line (a trailing CR is stripped).
chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n")
random_text = st.text(chars, max_size=80)
long_line = st.builds(lambda s, n: (s or "x") * n, st.text(chars, max_size=8), st.integers(500, 5000))
numbers = st.one_of(st.integers(-10**30, 10**30).map(str), st.sampled_from(["-1", "0", "nan", "1e999", "9" * 40]))
bad_stamps = st.sampled_from(["0000-01-01 00:00:00", "2026-13-01 10:00:00", "2026-02-30 25:61:61",
                              "9999-12-31 23:59:59", "0001-01-01 00:00:00", "2026-11-18 10:04:09.9999999"])
PREFIX_RE = re.compile(r"^\[[^\]]*\]")
STAMP_RE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


@st.composite
def mutated(draw: st.DrawFn, pool: list[str]) -> str:
    line = draw(st.sampled_from(pool))
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["truncate", "number", "text", "prefix", "splice", "stamp", "none"]))
        if how == "truncate":
            line = line[:draw(st.integers(0, len(line)))]
        elif how == "number":
            nums = list(re.finditer(r"\d+(?:\.\d+)?", line))
            if nums:
                m = draw(st.sampled_from(nums))
                line = line[:m.start()] + draw(numbers) + line[m.end():]
        elif how == "text":
            i = draw(st.integers(0, len(line)))
            j = draw(st.integers(i, len(line)))
            line = line[:i] + draw(random_text) + line[j:]
        elif how == "prefix":                # the rank prefix written twice, or in the middle of the line
            m = PREFIX_RE.match(line)
            if m:
                i = draw(st.integers(0, len(line)))
                line = line[:i] + m.group(0) + " " + line[i:]
        elif how == "splice":                # two writers interleaved mid-line
            other = draw(st.sampled_from(pool))
            line = line[:draw(st.integers(0, len(line)))] + other[draw(st.integers(0, len(other))):]
        elif how == "stamp":
            line = STAMP_RE.sub(draw(bad_stamps), line, count=1)
    return line


def lines_of(pool: list[str], max_size: int = 40) -> st.SearchStrategy[list[str]]:
    line = st.one_of(mutated(pool), mutated(pool), mutated(ALL), random_text, long_line)
    return st.lists(line, max_size=max_size)


# -- the SGLang log --------------------------------------------------------------------------------------------
def check_chunk(lines: list[str], first_line: int, renumber: bool) -> None:
    """``renumber``: the chunk is an envelope's payload, its lines at physical lines with gaps (joined or
    dropped lines), as ``line_numbers`` gives them."""
    ctx = sglang_log.FileContext(engine="e", path="server.log", default_year=2026)
    phys = [first_line + 3 * i + (i % 2) for i in range(len(lines))] if renumber else None
    out = sglang_log.parse_chunk(lines, first_line, ctx, line_numbers=phys)
    at = dict(zip(phys, range(len(lines)), strict=True)) if phys else {first_line + i: i for i in range(len(lines))}
    assert out.lines == len(lines)
    assert 0 <= out.unparsed <= len(lines)
    un = out.tables["unparsed"]
    un_lines = list(un["line"]) if hasattr(un, "columns") else [r["line"] for r in un]
    assert len(un_lines) == out.unparsed
    assert len(set(un_lines)) == len(un_lines), "a line is counted unparsed twice"
    assert all(n in at for n in un_lines)
    # the texts kept are the lines' own
    texts = list(un["text"]) if hasattr(un, "columns") else [r["text"] for r in un]
    for n, text in zip(un_lines, texts, strict=True):
        assert lines[at[n]] == text
    # rows of the typed tables point into the chunk, and never at a line also kept as unparsed
    for table in ("batches", "http_requests", "events", "leak_reports", "stacks"):
        rows = out.tables.get(table)
        if rows is None:
            continue
        got = list(rows["line"]) if hasattr(rows, "columns") else [r["line"] for r in rows]
        assert all(n in at for n in got), table
        assert not set(got) & set(un_lines), f"{table} row on a line also kept as unparsed"


@SLOW
@given(lines_of(LOG), st.integers(1, 10**7), st.booleans())
# regressions: year 0000 parsed by polars but no Python datetime (crashed the chunk); a glog line dated
# from a year-0001 line (clock alignment overflowed)
@example(["[0000-01-01 00:00:00 TP3] Decode batch, #running-req: 1, #token: 8, token usage: 0.01"], 1, False)
@example(["[0001-01-01 00:00:00 TP0] Scheduler debug info:", "[rank0]:[E0101 00:00:00.1 x.cpp:1] m"], 1, False)
def test_log_chunk_accounting_on_log_fragments(lines: list[str], first_line: int, renumber: bool) -> None:
    check_chunk(lines, first_line, renumber)


@SLOW
@given(lines_of(ALL), st.integers(1, 10**7), st.booleans())
def test_log_chunk_accounting_on_any_fragments(lines: list[str], first_line: int, renumber: bool) -> None:
    # a log holding embedded dumps: the dump grammars appear as continuation lines
    check_chunk(lines, first_line, renumber)


@SLOW
@given(st.lists(st.one_of(random_text, long_line), max_size=30), st.booleans())
def test_log_chunk_accounting_on_random_text(lines: list[str], renumber: bool) -> None:
    check_chunk(lines, 1, renumber)


# -- stack dumps -----------------------------------------------------------------------------------------------
STACK_PARSERS = {
    "pyspy_text": (pyspy.parse_dump, PYSPY),
    "pyspy_json": (pyspy.parse_json, PYSPY_JSON),
    "gdb": (gdb.parse_gdb, GDB),
    "faulthandler": (faulthandler.parse_faulthandler, FAULTHANDLER),
    "trace": (native_trace.parse_trace, NATIVE),
}


def check_dump(parse: Callable[[list[str], int], pyspy.Dump], lines: list[str], first_line: int) -> None:
    dump = parse(lines, first_line)
    everything = set(range(len(lines)))
    assert dump.consumed <= everything
    assert set(dump.unmatched) <= everything
    assert len(set(dump.unmatched)) == len(dump.unmatched)
    # every line is either part of the dump or kept as unparsed, never both, never neither
    assert not dump.consumed & set(dump.unmatched)
    assert dump.consumed | set(dump.unmatched) == everything
    for p in dump.processes:
        for t in p.threads:
            if dump.format == "pyspy_json" or t.garbled or t.fragment is not None:
                # a complete thread object on a line shared with a broken tail is kept, and the line too
                # (in unparsed): the JSON parser's documented choice; a header read from a broken or cut
                # line (its id intact) likewise: so only the range is checked
                assert t.line - first_line in everything
            else:
                assert t.line - first_line in dump.consumed, f"thread {t.thread_id} starts on an unconsumed line"
    stacks: list[dict] = []
    frames: list[dict] = []
    stackrows.dump_rows(dump, "e:f", "e", "f", None, "", "standalone", stacks, frames)
    assert len(stacks) == len(dump.threads)
    assert len(frames) == sum(len(t.frames) for t in dump.threads)


def _stack_test(name: str) -> tuple[Callable[..., None], Callable[..., None]]:
    parse, pool = STACK_PARSERS[name]

    @FAST
    @given(lines_of(pool), st.integers(1, 10**6))
    def grammar(lines: list[str], first_line: int) -> None:
        check_dump(parse, lines, first_line)

    @FAST
    @given(st.lists(st.one_of(random_text, long_line, mutated(ALL)), max_size=30))
    def anything(lines: list[str]) -> None:
        check_dump(parse, lines, 1)

    return grammar, anything


test_pyspy_text_grammar, test_pyspy_text_any = _stack_test("pyspy_text")
test_pyspy_json_grammar, test_pyspy_json_any = _stack_test("pyspy_json")
test_gdb_grammar, test_gdb_any = _stack_test("gdb")
test_faulthandler_grammar, test_faulthandler_any = _stack_test("faulthandler")
test_trace_grammar, test_trace_any = _stack_test("trace")


@FAST
@given(st.lists(st.sampled_from(PYSPY_JSON), max_size=40).map(lambda ls: [" ".join(ls)]))
def test_pyspy_json_on_one_line(lines: list[str]) -> None:
    # py-spy may print a whole --json dump on one line; a truncated one must still account for it
    check_dump(pyspy.parse_json, lines, 1)


# -- dumps cut at any line, and in parts ------------------------------------------------------------------
# Frame lines of real captures (../shared/formats, sglang-formats.md §3.3), C++ names with their own
# parentheses included: a cut inside one must never leave a frame named after the fragment.
PYSPY_FRAMES = [
    "    all_reduce (torch/distributed/distributed_c10d.py:2501)",
    "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
    "    Scheduler.event_loop_overlap (simsgl/srt/managers/scheduler.py:106)",
    "    <module> (<string>:1)",
    "    pthread_cond_wait (libc.so.6)",
    "    0x7ff7d8be5661 (zmq/backend/cython/_zmq.cpython-311-x86_64-linux-gnu.so)",
    "    sock_recvmsg (socketmodule.c:4036)",
    "    c10d::Work::wait (libtorch_cpu.so)",
    "    pybind11::cpp_function::initialize<pybind11::cpp_function::cpp_function<bool, c10d::Work, "
    "std::chrono::duration<long, std::ratio<(long)1, (long)1000> >, pybind11::name>(bool (*)(c10d::Work*, "
    "std::chrono::duration<long, std::ratio<(long)1, (long)1000> >), pybind11::name const)::{lambda(pybind11::"
    "detail::function_call&)#1}::_FUN (libtorch_python.so)",
    "    std::_Function_handler<void (), c10d::ProcessGroupNCCL::ncclCommWatchdog()::{lambda()#1}>::_M_invoke "
    "(libtorch_cuda.so)",
]
PYSPY_HEADS = ['Thread 2147 (idle): "MainThread"', "Thread 3489 (active+gil)", 'Thread 0x7F1C2A3B4740 (active): "w"',
               'Thread 2201 (idle): "Thread-6 (_watchdog_thread)"']
FAULT_FRAMES = [
    '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501 in all_reduce',
    '  File "/usr/lib/python3.11/threading.py", line 331 in wait',
    '  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 1418 in run_batch',
    '  File "<string>", line 1 in <module>',
]
FAULT_HEADS = ["Thread 0x00007f2e4a7fc700 (most recent call first):",
               "Current thread 0x00007f3b4e1ff740 (most recent call first):"]


@st.composite
def pyspy_dumps(draw: st.DrawFn) -> list[str]:
    """A well-formed py-spy text dump: a process header (or none: a later part), threads, frames, blanks."""
    lines = ["Process 2147: sglang::scheduler_TP3", "Python v3.12.3 (/usr/bin/python3.12)", ""] \
        if draw(st.booleans()) else []
    if draw(st.booleans()):
        lines += draw(st.lists(st.sampled_from(PYSPY_FRAMES), min_size=1, max_size=4))     # headerless frames
    for head in draw(st.lists(st.sampled_from(PYSPY_HEADS), min_size=0, max_size=3, unique=True)):
        lines.append(head)
        for fr in draw(st.lists(st.sampled_from(PYSPY_FRAMES), min_size=0, max_size=5)):
            lines.append(fr)
            if draw(st.integers(0, 5)) == 0:
                lines.append("")                        # a prefix-only line, unwrapped
    return lines


def _frames_by_line(dump: pyspy.Dump) -> list[tuple[str, str, int | None]]:
    return [(t.thread_id, f.function, f.at) for t in dump.threads for f in t.frames]


@FAST
@given(pyspy_dumps(), st.data())
def test_pyspy_dump_cut_at_any_line_keeps_exactly_the_frames_before_it(lines: list[str], data: st.DataObject) -> None:
    full = pyspy.parse_dump(lines, 1)
    k = data.draw(st.integers(0, len(lines)))
    cut = lines[:k]
    partial = k < len(lines) and data.draw(st.booleans())
    if partial:                                          # the last line cut mid-token
        cut.append(lines[k][:data.draw(st.integers(0, max(len(lines[k]) - 1, 0)))])
    got = pyspy.parse_dump(cut, 1)
    check_dump(pyspy.parse_dump, cut, 1)
    want = [x for x in _frames_by_line(full) if x[2] is not None and x[2] <= k]
    assert _frames_by_line(got) == want
    if partial and cut[-1].strip():
        assert len(cut) - 1 in got.unmatched or len(cut) - 1 in got.consumed and not pyspy.FRAME_RE.match(cut[-1])


@st.composite
def faulthandler_dumps(draw: st.DrawFn) -> list[str]:
    lines = ["Fatal Python error: Segmentation fault", ""] if draw(st.booleans()) else []
    heads = draw(st.lists(st.sampled_from(["0x00007f2e4a7fc700", "0x00007f2e4b7fd700", "0x00007f3b4e1ff740"]),
                          min_size=1, max_size=3, unique=True))
    for n, tid in enumerate(heads):
        if n:
            lines.append("")
        lines.append(f"{'Current thread' if n == len(heads) - 1 else 'Thread'} {tid} (most recent call first):")
        lines += draw(st.lists(st.sampled_from(FAULT_FRAMES[:3]), min_size=0, max_size=4))
    return lines


@FAST
@given(faulthandler_dumps(), st.data())
def test_faulthandler_dump_cut_at_any_line_keeps_the_frames_before_it(lines: list[str], data: st.DataObject) -> None:
    full = faulthandler.parse_faulthandler(lines, 1)
    k = data.draw(st.integers(0, len(lines)))
    cut = lines[:k]
    partial = k < len(lines) and data.draw(st.booleans())
    if partial:
        cut.append(lines[k][:data.draw(st.integers(0, max(len(lines[k]) - 1, 0)))])
    got = faulthandler.parse_faulthandler(cut, 1)
    check_dump(faulthandler.parse_faulthandler, cut, 1)
    assert not any(t.garbled for t in got.threads), "a cut is not an interleaving"
    before = [x for x in _frames_by_line(got) if x[2] is not None and x[2] <= k]
    assert before == [x for x in _frames_by_line(full) if x[2] is not None and x[2] <= k]
    extra = [x for x in _frames_by_line(got) if x not in before]
    # faulthandler ends a frame line with the function's name: a cut inside it reads as a shorter name
    # (the one thing a cut can leave undetected), never as another thread's or line's frame
    assert len(extra) <= 1 and all(x[2] == k + 1 and partial for x in extra)
    if extra:
        true = next(x for x in _frames_by_line(full) if x[2] == k + 1)
        assert true[0] == extra[0][0] and true[1].startswith(extra[0][1])


# Two or three processes' fatal dumps written to one stream at once: (thread id -> true frames) per writer.
WRITERS = [
    ("Bus error", [("0x00007e5b972ba640", False, [("/usr/lib/python3.12/selectors.py", 468, "select"),
                                                ("/usr/lib/python3.12/threading.py", 1030, "_bootstrap")]),
                   ("0x00007e8cfe679640", True, [("/opt/venv/sglang/srt/layers/linear.py", 1398, "forward"),
                                               ("/opt/venv/sglang/srt/managers/scheduler.py", 1962, "run_batch")])]),
    ("Bus error", [("0x00007ec20e7c3640", False, [("/usr/lib/python3.12/threading.py", 359, "wait"),
                                                ("/usr/lib/python3.12/queue.py", 171, "get")]),
                   ("0x00007e5a38bab4c0", True, [("/opt/venv/sglang/srt/model_executor/runner.py", 650, "replay"),
                                               ("/opt/venv/sglang/srt/managers/scheduler.py", 1960, "run_batch")])]),
    ("Aborted", [("0x00007f9a01c4b740", True, [("/opt/venv/sglang/srt/utils.py", 1120, "broadcast_pyobj"),
                                             ("<string>", 1, "<module>")])]),
]


def _writer_text(msg: str, threads: list) -> str:
    out = [f"Fatal Python error: {msg}", ""]
    for n, (tid, current, frames) in enumerate(threads):
        if n:
            out.append("")
        out.append(f"{'Current thread' if current else 'Thread'} {tid} (most recent call first):")
        out += [f'  File "{f}", line {ln} in {name}' for f, ln, name in frames]
    out += ["", "Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)"]
    return "\n".join(out) + "\n"


@SLOW
@given(st.integers(2, 3), st.lists(st.tuples(st.integers(0, 2), st.integers(1, 12)), min_size=1, max_size=400),
       st.integers(0, 300))
@example(2, [(1, 5)], 60)
def test_interleaved_faulthandler_never_attributes_a_frame_to_another_thread(
        n: int, steps: list[tuple[int, int]], alone: int) -> None:
    """Writers interleaved a few characters at a time (the first one alone for a while): every frame kept
    is its thread's frame at that depth, made of that writer's characters (another writer's stray
    preamble characters aside), and every thread kept is a real one."""
    texts = [_writer_text(*WRITERS[w]) for w in range(n)]
    pos = [min(alone, len(texts[0]))] + [0] * (n - 1)
    chars: list[tuple[str, int]] = [(c, 0) for c in texts[0][:pos[0]]]
    for w, size in [*steps, *[(w, 10**6) for w in range(n)]]:
        w %= n
        chunk = texts[w][pos[w]:pos[w] + size]
        chars += [(c, w) for c in chunk]
        pos[w] += len(chunk)
    stream = "".join(c for c, _ in chars)
    lines = stream.removesuffix("\n").split("\n")
    owners: list[list[int]] = [[]]
    for c, w in chars:
        if c == "\n":
            owners.append([])
        else:
            owners[-1].append(w)
    dump = faulthandler.parse_faulthandler(lines, 1)
    check_dump(faulthandler.parse_faulthandler, lines, 1)
    truth = {tid: (w, frames) for w in range(n) for tid, _, frames in WRITERS[w][1]}
    for t in dump.threads:
        assert t.thread_id in {faulthandler._norm_tid(x) for x in truth} | {"?"}, t.thread_id
        if not t.frames:
            continue
        w, frames = next(v for k, v in truth.items() if faulthandler._norm_tid(k) == t.thread_id)
        for depth, fr in enumerate(t.frames):
            i = fr.at - 1
            own = "".join(c for c, o in zip(lines[i], owners[i], strict=True) if o == w)
            f, ln, name = frames[depth]
            assert own == f'  File "{f}", line {ln} in {name}', (t.thread_id, depth, lines[i])


LOG_WITH_DUMP = [
    "[2026-10-14 03:12:42 TP2] Decode batch, #running-req: 9, #token: 14380, token usage: 0.05, cuda graph: True, "
    "gen throughput (token/s): 449.87, #queue-req: 0",
    "[2026-10-14 03:17:44 TP2] Pyspy dump for PID 2718282 (py-spy dump --native --pid 2718282):",
    "Process 2718282: sglang::scheduler_TP2", "Python v3.12.3 (/usr/bin/python3.12)", "",
    'Thread 2718282 (idle): "MainThread"', *PYSPY_FRAMES[4:], *PYSPY_FRAMES[:4],
    'Thread 2718519 (idle): "Thread-1"', *PYSPY_FRAMES[1:3],
]


@FAST
@given(st.integers(0, len(LOG_WITH_DUMP)), st.integers(0, 300))
def test_embedded_dump_cut_at_any_line_keeps_the_frames_before_it(k: int, c: int) -> None:
    ctx = sglang_log.FileContext(engine="e", path="server.log", default_year=2026)
    full = sglang_log.parse_chunk(LOG_WITH_DUMP, 1, ctx).tables["frames"]
    cut = LOG_WITH_DUMP[:k] + ([LOG_WITH_DUMP[k][:c % max(len(LOG_WITH_DUMP[k]), 1)]] if k < len(LOG_WITH_DUMP) else [])
    check_chunk(cut, 1, False)
    out = sglang_log.parse_chunk(cut, 1, sglang_log.FileContext(engine="e", path="server.log", default_year=2026))
    n = sum(1 for s in LOG_WITH_DUMP[:k] if pyspy.FRAME_RE.match(s))
    assert [(f["thread_id"], f["function"]) for f in out.tables["frames"]] == \
        [(f["thread_id"], f["function"]) for f in full][:n]


# -- the other parsers -----------------------------------------------------------------------------------------
@FAST
@given(lines_of(GPU), st.integers(1, 10**6))
def test_gpu_samples_accounting(lines: list[str], first_line: int) -> None:
    samples, bad = gpu.parse_samples(lines, first_line, "e", "gpu.csv")
    got, kept = set(samples["line"]), list(bad["line"])
    span = range(first_line, first_line + len(lines))
    assert samples.height == len(got) and len(set(kept)) == len(kept)
    assert not got & set(kept)
    assert all(n in span for n in got | set(kept))
    # what is neither a sample nor unparsed is blank or the header
    for n in set(span) - got - set(kept):
        text = lines[n - first_line]
        assert not text.strip() or (n == first_line and gpu.HEADER_RE.match(text))


@FAST
@given(lines_of(SNAPSHOT), st.integers(1, 10**6))
def test_process_snapshot_accounting(lines: list[str], first_line: int) -> None:
    snap = process_snapshot.parse_snapshot(lines, first_line)
    everything = set(range(len(lines)))
    assert snap.consumed | set(snap.unmatched) == everything
    assert not snap.consumed & set(snap.unmatched) and len(set(snap.unmatched)) == len(snap.unmatched)
    got = [r["line"] - first_line for r in snap.rows]
    assert len(set(got)) == len(got) and set(got) <= snap.consumed
    for r in snap.rows:
        assert r["state"] is None or r["state"] in "RSDZTtWXIKP"
        assert r["activity"] in (None, "spinning", "running", "sleeping", "uninterruptible", "stopped", "zombie")
        assert r["ts"] is None or r["clock"] == "dated"


@FAST
@given(st.lists(st.one_of(random_text, long_line, mutated(ALL)), max_size=30))
def test_process_snapshot_on_anything(lines: list[str]) -> None:
    snap = process_snapshot.parse_snapshot(lines, 1)
    assert snap.consumed | set(snap.unmatched) == set(range(len(lines)))
    assert not snap.consumed & set(snap.unmatched)


LEAK_KINDS = ["watchdog_debug_info", "watchdog_batch_info", "scheduler_exception", "mem_leak_warning",
              "mem_leak_busy"]


@FAST
@given(st.sampled_from(LEAK_KINDS), st.lists(st.one_of(mutated(LOG), random_text), min_size=1, max_size=12))
def test_leak_reports_never_raise(kind: str, lines: list[str]) -> None:
    rep = leaks.leak_from_record(kind, lines)
    if rep is not None:
        assert rep["context"] in ("idle", "busy", "watchdog")
        assert rep["form"] in ("radix", "pool", "mamba", "hybrid_swa", "req_pool", "busy_assert")
        assert isinstance(rep["message"], str) and len(rep["message"]) <= 1000


@FAST
@given(st.lists(st.one_of(mutated(CAPTURE_ERRORS), random_text), max_size=10))
def test_capture_error_reason_is_one_line(lines: list[str]) -> None:
    reason = capture_errors.capture_error_reason(lines)
    assert reason.startswith("capture ")
    assert "\n" not in reason


@FAST
@given(mutated([s for s in LOG if s.startswith("[rank")] + ["[W1231 23:59:59.000001 x.cpp:1] m"]),
       st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
       st.one_of(st.none(), st.datetimes()))
@example("[rank0]:[E0101 00:00:00.1 x.cpp:1] m", datetime(1, 1, 1), None)
@example("[rank0]:[E1231 23:59:59.1 x.cpp:1] m", datetime(9999, 12, 31, 23, 59), None)
def test_glog_lines_never_raise(line: str, context: datetime, after: datetime | None) -> None:
    g = torch_nccl.parse_glog(line, context)
    if g is not None:
        ts = torch_nccl.align_to_log(g, context, after)
        assert isinstance(ts, datetime)


KINDS = set(kinds.KINDS)


@FAST
@given(st.one_of(st.binary(max_size=600),
                 lines_of(ALL, 15).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
                 lines_of(ALL, 15).map(lambda ls: "\r\n".join(ls).encode("latin-1", "replace"))))
def test_detect_kind_on_any_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("kind") / "evidence.txt"
    path.write_bytes(data)
    assert kinds.detect_kind(path) in KINDS


def test_fragment_pools_are_printable() -> None:
    # a fragment with a newline would be two lines: the strategies would not mean what they say
    assert not [s for s in ALL if "\n" in s or set(s) - set(string.printable) - {"…"}]


# -- the byte reader under every parser (logfile.iter_chunks, GzipStream) -------------------------------------
BYTES_WITH_LINES = st.lists(
    st.one_of(st.binary(max_size=80), st.sampled_from([b"\n", b"\r\n", b"\x00" * 9, b"\xff\xfe", b"[2026-11-20 10:22:13 TP3] x\n"])),
    max_size=60).map(b"".join)


@FAST
@given(data=BYTES_WITH_LINES, chunk=st.integers(min_value=1, max_value=64), records=st.booleans(),
       gz=st.booleans(), cut=st.integers(min_value=0, max_value=40), raw_bytes=st.booleans())
def test_reader_yields_every_line_once(tmp_path_factory: pytest.TempPathFactory, data: bytes, chunk: int,
                                       records: bool, gz: bool, cut: int, raw_bytes: bool) -> None:
    """Chunked reading (any chunk size, record-aligned or not, plain or gzip, whole or cut, as lines or as the
    bytes a parser splits itself, their lines counted only when asked) gives the file's lines in order, each
    once: what a reader that loads the whole file would give."""
    import gzip as gzip_mod
    import zlib

    from hangforensics.readers.logfile import ReadNotes, iter_chunks

    assume(gz or not data.startswith(b"\x1f\x8b"))      # gzip is recognised by its magic bytes
    path = tmp_path_factory.mktemp("reader") / "f"
    raw = data
    if gz:
        packed = gzip_mod.compress(data, mtime=0)
        packed = packed[: max(len(packed) - cut, 0)] if cut else packed
        path.write_bytes(packed)
        raw = zlib.decompressobj(wbits=31).decompress(packed) if packed else b""
    else:
        path.write_bytes(data)
    notes = ReadNotes()
    got = []
    next_line = 1
    for c in iter_chunks(path, chunk_bytes=chunk, records=records, notes=notes, column="raw" if raw_bytes else False):
        assert c.first_line == next_line
        next_line += c.count
        assert c.count == len(c.lines)
        got += c.lines
    body = raw.lstrip(b"\x00").replace(b"\x00", b"")
    want = body.decode("utf-8", errors="replace").split("\n")
    if want and want[-1] == "":
        want.pop()
    want = [s[:-1] if s.endswith("\r") else s for s in want]
    if not gz or not cut:
        assert got == want
    else:                                   # a cut stream: what it holds, never more
        assert got == want[: len(got)] or got[:-1] == want[: len(got) - 1]


@FAST
@given(st.lists(st.sampled_from([b"\n", b"\r\n", b"\r", b"[", b"a", b"[2026-01-01 00:00:00] x", b"\xc3\xa9", b" "]),
                max_size=60))
def test_the_scanners_line_bounds_split_as_python_does(parts: list[bytes]) -> None:
    """``sglang_scan.bounds`` (one compiled pass over a chunk) cuts the same lines as Python's split: LF ends a
    line, a CR before it is not part of the line, a last line without LF counts; and it finds every '['."""
    import numpy as np

    from hangforensics.parsers.sglang import sglang_scan

    raw = b"".join(parts)
    starts, ends, brackets = sglang_scan.bounds(np.frombuffer(raw, np.uint8))
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    want = [line[:-1] if line.endswith(b"\r") else line for line in lines]   # (a last line without LF too)
    assert [raw[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)] == want
    assert brackets.tolist() == [i for i, c in enumerate(raw) if c == ord("[")]


@pytest.mark.parametrize("raw", [b"\n" * 20000, b"[" * 20000 + b"\nx", b"a\r\n" * 9000 + b"[]", b"[\n" * 12000],
                         ids=["blank lines", "brackets", "short CRLF lines", "both"])
def test_the_scanners_line_bounds_of_text_denser_than_its_first_guess(raw: bytes) -> None:
    """More lines or '[' than ``bounds`` makes room for at first (one per 8 bytes): the same cut as Python's."""
    import numpy as np

    from hangforensics.parsers.sglang import sglang_scan

    starts, ends, brackets = sglang_scan.bounds(np.frombuffer(raw, np.uint8))
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    want = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    assert [raw[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)] == want
    assert brackets.tolist() == [i for i, c in enumerate(raw) if c == ord("[")]
