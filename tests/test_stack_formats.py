"""Standalone stack-dump formats: every real capture in ../shared/formats is ingested without losing a
thread, a frame or a line; our own fixtures (tests/data/stacks) cover faulthandler and numbered traces.

File names are used here only to find a capture's twin (the same process captured another way);
the product never reads meaning into them, except a rank spelled in a name (``rank3``, ``tp3``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import DATA, SHARED

from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.parsers.stacks import faulthandler, gdb, native_trace, pyspy
from hangforensics.readers.kinds import detect_kind
from hangforensics.store import Store

FORMATS = SHARED / "formats"
STACKS = DATA / "stacks"
needs_formats = pytest.mark.skipif(not FORMATS.is_dir(), reason="../shared/formats is not beside the repository")

STACK_KINDS = {"pyspy_dump", "pyspy_json", "gdb_dump", "faulthandler_dump", "native_trace"}
VARIANT_RE = re.compile(r"^(?P<base>.+?)\.(?P<variant>plain|native|locals2?|subprocesses)(?:\.(?:\d+|gil|active))?\.txt$")


def _captures() -> list[Path]:
    if not FORMATS.is_dir():
        return []
    return sorted(p for p in FORMATS.rglob("*") if p.is_file() and p.suffix in (".txt", ".json")
                  and "errors" not in p.relative_to(FORMATS).parts)


def _rel(p: Path) -> str:
    return p.relative_to(FORMATS).as_posix()


def _lines(p: Path) -> list[str]:
    text = p.read_text(encoding="utf-8")
    return text.removesuffix("\n").split("\n") if text else []


@pytest.fixture(scope="module")
def formats_db():
    if not FORMATS.is_dir():
        pytest.skip("../shared/formats is not beside the repository")
    with Store(":memory:") as st:
        ingest_paths(st, [FORMATS], mode="engine")
        yield st


def _shape(st: Store, path: str) -> list[list[tuple[str, int]]]:
    """Per process block (dump_id), its threads (in file order) with their frame counts."""
    rows = st.query(
        """SELECT s.dump_id, s.thread_id, s.line, count(f.depth) AS n FROM stacks s
           LEFT JOIN frames f ON f.dump_id = s.dump_id AND f.thread_id = s.thread_id
           WHERE s.path = ? GROUP BY ALL ORDER BY s.dump_id, s.line""", [path])
    out: dict[str, list[tuple[str, int]]] = {}
    for r in rows:
        out.setdefault(r["dump_id"], []).append((r["thread_id"], r["n"]))
    return list(out.values())


def _original(st: Store, path: str) -> str:
    """The path whose rows stand for ``path`` (itself, or the file it duplicates byte for byte)."""
    status = st.scalar("SELECT status FROM sources WHERE path = ?", [path])
    return status.removeprefix("duplicate of ") if status.startswith("duplicate of ") else path


# -- every real capture ------------------------------------------------------------------------------

@needs_formats
@pytest.mark.parametrize("capture", _captures(), ids=_rel)
def test_capture_ingested_with_every_line_accounted_for(formats_db: Store, capture: Path):
    st = formats_db
    src = st.query("SELECT * FROM sources WHERE path = ?", [_rel(capture)])[0]
    expected_kind = ("pyspy_json" if capture.suffix == ".json" else
                     "gdb_dump" if ".gdb" in capture.name else "pyspy_dump")
    assert src["kind"] == expected_kind
    orig = _original(st, _rel(capture))
    if orig != _rel(capture):                      # byte-identical repeated sample: read once
        assert (FORMATS / orig).read_bytes() == capture.read_bytes()
        src = st.query("SELECT * FROM sources WHERE path = ?", [orig])[0]
    assert src["status"] == "ok"
    assert src["lines"] == len(_lines(capture))
    assert src["lines"] == src["parsed_lines"] + src["unparsed_lines"]
    assert src["unparsed_lines"] == 0, st.query("SELECT line, text FROM unparsed WHERE path = ?", [orig])
    assert st.scalar("SELECT count(*) FROM unparsed WHERE path = ?", [orig]) == 0
    stacks = st.query("SELECT * FROM stacks WHERE path = ?", [orig])
    assert stacks and all(s["capture"] == "standalone" and s["garbled"] is False for s in stacks)
    assert {s["format"] for s in stacks} <= {"pyspy_text", "pyspy_json", "gdb", "gdb_pybt"}


def _twins() -> list[tuple[Path, Path]]:
    pairs = []
    for p in _captures():
        m = VARIANT_RE.match(p.name)
        if not m:
            continue
        base, variant = m.group("base"), m.group("variant")
        names = {"native": [f"{base}.json_native.json"], "subprocesses": [f"{base}.subprocesses.json"],
                 "locals": [f"{base}.json_locals.json", f"{base}.json"],
                 "locals2": [f"{base}.json_locals.json", f"{base}.json"]}.get(variant, [f"{base}.json"])
        twin = next((p.parent / n for n in names if (p.parent / n).exists()), None)
        if twin is not None:
            pairs.append((p, twin))
    return pairs


@needs_formats
@pytest.mark.parametrize(("text", "twin"), _twins(), ids=lambda p: _rel(p))
def test_text_capture_matches_its_json_twin(formats_db: Store, text: Path, twin: Path):
    """Same threads and the same number of frames per thread; the parsers give them in the same order."""
    t_shape = [sorted(d) for d in _shape(formats_db, _original(formats_db, _rel(text)))]
    j_shape = [sorted(d) for d in _shape(formats_db, _original(formats_db, _rel(twin)))]
    t_order = [[t.thread_id for t in p.threads] for p in pyspy.parse_dump(_lines(text)).processes]
    j_order = [[t.thread_id for t in p.threads] for p in pyspy.parse_json(_lines(twin)).processes]
    if text.name.endswith(".subprocesses.txt"):
        # py-spy --subprocesses --json prints only the parent's threads (README): compare that block
        assert len(j_shape) == 1 and len(t_shape) > 1
        t_shape, t_order = t_shape[:1], t_order[:1]
    assert t_shape == j_shape
    assert t_order == j_order                 # JSON lists threads newest first; the parser restores text order


def test_twins_were_found():
    if FORMATS.is_dir():
        assert len(_twins()) >= 30


GDB_CAPTURES = [p for p in _captures() if p.name.endswith(".gdb.txt")]


@needs_formats
@pytest.mark.parametrize("capture", GDB_CAPTURES, ids=_rel)
def test_gdb_threads_and_frames_equal_its_headers(formats_db: Store, capture: Path):
    lines = _lines(capture)
    headers = [re.match(r'^Thread \d+ \(Thread 0x[0-9a-f]+ \(LWP (\d+)\) "(.*)"\):$', s) for s in lines]
    headers = [h for h in headers if h]
    per_thread: list[int] = []
    for s in lines:
        if s.startswith("Thread ") and s.endswith("):"):
            per_thread.append(0)
        elif re.match(r"^#\d+ ", s):
            per_thread[-1] += 1
    stacks = formats_db.query("SELECT * FROM stacks WHERE path = ? ORDER BY line", [_rel(capture)])
    assert len(stacks) == sum(1 for s in lines if re.match(r"^Thread \d+ \(", s)) == len(headers)
    assert [s["thread_id"] for s in stacks] == [h.group(1) for h in headers]       # LWP = py-spy's tid
    assert [s["thread_name"] for s in stacks] == [h.group(2) for h in headers]     # comm
    inferior = next(int(m.group(1)) for s in lines if (m := re.match(r"^\[Inferior 1 \(process (\d+)\)", s)))
    assert {s["pid"] for s in stacks} == {inferior}
    assert stacks[-1]["thread_id"] == str(inferior)                                 # Thread 1 = main, LWP = pid
    assert {s["format"] for s in stacks} == {"gdb"}
    shape = _shape(formats_db, _rel(capture))[0]
    assert [n for _tid, n in shape] == per_thread
    assert sum(per_thread) == sum(1 for s in lines if re.match(r"^#\d+ ", s))
    frames = formats_db.query(
        "SELECT f.* FROM frames f JOIN stacks s USING (dump_id, thread_id) WHERE s.path = ?", [_rel(capture)])
    assert frames and all(f["native"] for f in frames)
    froms = {m.group(1).rsplit("/", 1)[-1] for s in lines if (m := re.search(r"\) from (\S+)$", s))}
    assert {f["library"] for f in frames if f["library"]} == froms
    # every Python thread py-spy saw in the same process is one of gdb's threads
    twin = capture.with_name(capture.name.replace(".gdb.txt", ".plain.txt"))
    if twin.exists():
        seen = {t.thread_id for t in pyspy.parse_dump(_lines(twin)).threads}
        assert seen <= {s["thread_id"] for s in stacks}


@needs_formats
def test_gdb_py_bt_is_the_main_threads_python_stack(formats_db: Store):
    path = "collective_desync/rank2.gdb_pybt.txt"
    stacks = formats_db.query("SELECT * FROM stacks WHERE path = ?", [path])
    assert len(stacks) == 1
    s = stacks[0]
    assert (s["thread_id"], s["pid"], s["format"], s["rank"]) == ("5951", 5951, "gdb_pybt", "TP2")
    frames = formats_db.query("SELECT * FROM frames WHERE dump_id = ? ORDER BY depth", [s["dump_id"]])
    lines = _lines(FORMATS / path)
    assert len([f for f in frames if not f["native"]]) == sum(1 for x in lines if x.startswith('  File "'))
    assert frames[0]["function"] == "wait" and frames[0]["native"]                  # <built-in method wait ...>
    json_frames = pyspy.parse_json(_lines(FORMATS / "collective_desync/rank2.json")).threads[0].frames
    py = [f for f in frames if not f["native"]]
    # py-bt prints co_name and absolute paths; py-spy prints the qualname and the short path
    assert [(f["function"], f["line"]) for f in py] == [(j.function.rsplit(".", 1)[-1], j.line) for j in json_frames]
    assert all(f["file"].endswith(j.file) for f, j in zip(py, json_frames, strict=True))


@needs_formats
def test_subprocesses_get_one_dump_id_per_process(formats_db: Store):
    rows = formats_db.query("SELECT dump_id, pid, rank, process_title FROM stacks WHERE path = ? ORDER BY dump_id",
                            ["collective_desync/launcher.subprocesses.txt"])
    assert [r["dump_id"].rsplit("#", 1)[1] for r in rows] == [str(i) for i in range(6)]
    assert {r["pid"] for r in rows} == {5923, 5948, 5949, 5950, 5951, 5952}
    assert sorted(r["rank"] for r in rows) == ["", "", "TP0", "TP1", "TP2", "TP3"]


@needs_formats
def test_json_fields(formats_db: Store):
    rows = formats_db.query("SELECT * FROM stacks WHERE path = 'recvmsg_all_ranks/rank0.json_native.json' "
                            "ORDER BY line")
    assert [(r["thread_id"], r["thread_name"], r["thread_state"], r["pid"], r["rank"]) for r in rows] == [
        ("8208", "HealthPoller", "idle", 8180, "TP0"), ("8180", "MainThread", "idle", 8180, "TP0")]
    frames = formats_db.query("SELECT * FROM frames WHERE dump_id = ? AND thread_id = '8180' ORDER BY depth",
                              [rows[1]["dump_id"]])
    text = pyspy.parse_dump(_lines(FORMATS / "recvmsg_all_ranks/rank0.native.txt")).threads[0].frames
    assert [(f["function"], f["native"]) for f in frames] == [(t.function, t.native) for t in text]
    assert (frames[0]["function"], frames[0]["library"], frames[0]["line"]) == ("recvmsg", "libc.so.6", None)
    assert frames[1]["library"] == "_socket.cpython-311-x86_64-linux-gnu.so" and frames[1]["line"] == 921
    assert formats_db.scalar("SELECT thread_state FROM stacks WHERE path = 'healthy_busy/rank0.json'") == "active"


# -- failed captures ---------------------------------------------------------------------------------

ERRORS = sorted((FORMATS / "errors").glob("*")) if (FORMATS / "errors").is_dir() else []


@needs_formats
@pytest.mark.parametrize("capture", ERRORS, ids=lambda p: p.name)
def test_failed_captures_are_recognised(formats_db: Store, capture: Path):
    src = formats_db.query("SELECT * FROM sources WHERE path = ?", [_rel(capture)])[0]
    assert src["kind"] == "capture_error"
    status = src["status"]
    assert "\n" not in status and len(status) < 200
    assert status.startswith("capture failed: ") or status.startswith("capture exit status 0")
    if "exit status" not in capture.read_text():
        assert ("py-spy" in status) == ("gdb" not in capture.name)
    kept = formats_db.query("SELECT line, text FROM unparsed WHERE path = ? ORDER BY line", [_rel(capture)])
    assert [k["text"] for k in kept] == _lines(capture)                          # the text is kept verbatim
    assert src["lines"] == len(kept) == src["parsed_lines"] + src["unparsed_lines"]
    assert formats_db.scalar("SELECT count(*) FROM stacks WHERE path = ?", [_rel(capture)]) == 0


@needs_formats
def test_failed_capture_reasons(formats_db: Store):
    def status(name: str) -> str:
        return formats_db.scalar("SELECT status FROM sources WHERE path = ?", [f"errors/{name}"])
    assert status("non_python_process.stderr.txt") == (
        "capture failed: py-spy could not find a python version in the target (not a Python process, "
        "or a core py-spy cannot read)")
    assert status("core_from_gcore.rust_backtrace.stderr.txt") == status("non_python_process.stderr.txt")
    assert "could not find the target process" in status("nonexistent_pid.rust_backtrace.stderr.txt")
    assert status("gdb_nonexistent_pid.txt").startswith("capture failed: gdb could not attach: no such process")
    assert status("nonexistent_pid.rc.txt") == "capture failed: the capture command exited with status 1"


# -- our fixtures: faulthandler, numbered traces -----------------------------------------------------

def _ingest(tmp_path: Path, files: dict[str, Path | str], engine: str = "eng") -> Store:
    root = tmp_path / engine
    for rel, content in files.items():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, dest)
        else:
            dest.write_text(content, encoding="utf-8")
    st = Store(":memory:")
    ingest_paths(st, [root], mode="engine")
    return st


def _frames(st: Store, dump_id: str, thread_id: str) -> list[str]:
    return [r["function"] for r in st.query(
        "SELECT function FROM frames WHERE dump_id = ? AND thread_id = ? ORDER BY depth", [dump_id, thread_id])]


def test_garbled_faulthandler_keeps_only_certain_frames(tmp_path: Path):
    """Two ranks aborted at once into one stderr: their dumps interleave mid-line."""
    st = _ingest(tmp_path, {"crash/stderr.txt": STACKS / "faulthandler_garbled.txt"})
    src = st.query("SELECT * FROM sources")[0]
    assert src["kind"] == "faulthandler_dump"
    stacks = st.query("SELECT * FROM stacks ORDER BY line")
    assert [(s["thread_id"], s["thread_state"], s["garbled"], s["format"]) for s in stacks] == [
        ("0x7f3b4e1ff740", "current", True, "faulthandler"), ("0x7f9a01c4b740", "current", True, "faulthandler")]
    assert len({s["dump_id"] for s in stacks}) == 2                                # two processes' dumps
    # only the frames written before the second rank started (its 'Fatal Python error' on line 6): after
    # it both ranks write at once (the first rank's frames still come on lines 12 and 14), so the intact
    # frames under the second header (lines 10-11) could be either rank's
    assert _frames(st, stacks[0]["dump_id"], "0x7f3b4e1ff740") == ["all_reduce", "wrapper"]
    assert _frames(st, stacks[1]["dump_id"], "0x7f9a01c4b740") == []
    # the broken lines, and the intact frames that could belong to either rank, are kept, not guessed
    assert [r["line"] for r in st.query("SELECT line FROM unparsed ORDER BY line")] == [
        6, 8, 10, 11, 12, 13, 14, 15, 16]
    assert src["lines"] == 20 and src["unparsed_lines"] == 9 and src["parsed_lines"] == 11
    for f in st.query("SELECT function FROM frames"):
        assert re.fullmatch(r"[\w.<>]+", f["function"])


def test_faulthandler_fatal_error(tmp_path: Path):
    st = _ingest(tmp_path, {"tp1/faulthandler.log": STACKS / "faulthandler_fatal.txt"})
    assert st.scalar("SELECT kind FROM sources") == "faulthandler_dump"
    assert st.scalar("SELECT unparsed_lines FROM sources") == 0
    stacks = st.query("SELECT * FROM stacks ORDER BY line")
    assert [(s["thread_id"], s["thread_state"], s["garbled"], s["rank"]) for s in stacks] == [
        ("0x7f3b2c7fe6c0", None, False, "TP1"), ("0x7f3b2d7ff6c0", None, False, "TP1"),
        ("0x7f3b4e1ff740", "current", False, "TP1")]
    assert stacks[0]["process_title"] == "Fatal Python error: Segmentation fault"
    assert _frames(st, stacks[1]["dump_id"], "0x7f3b2d7ff6c0") == []                # <no Python frame>
    main = st.query("SELECT * FROM frames WHERE thread_id = '0x7f3b4e1ff740' ORDER BY depth")
    assert (main[0]["function"], main[0]["line"], main[0]["native"]) == ("_register_segments_for_comm", 417, False)
    assert main[-1]["function"] == "<module>" and len(main) == 9


def test_faulthandler_repeated_timeouts_are_separate_dumps(tmp_path: Path):
    st = _ingest(tmp_path, {"x.txt": STACKS / "faulthandler_timeout.txt"})
    rows = st.query("SELECT dump_id, thread_id FROM stacks ORDER BY line")
    assert [r["dump_id"].rsplit("#", 1)[1] for r in rows] == ["0", "0", "1", "1"]
    assert st.scalar("SELECT unparsed_lines FROM sources") == 0


def test_torch_cpp_trace(tmp_path: Path):
    st = _ingest(tmp_path, {"rank3/terminate.txt": STACKS / "torch_cpp_trace.txt"})
    src = st.query("SELECT * FROM sources")[0]
    assert (src["kind"], src["unparsed_lines"]) == ("native_trace", 0)
    stacks = st.query("SELECT * FROM stacks ORDER BY line")
    assert [(s["thread_id"], s["line"], s["format"], s["rank"]) for s in stacks] == [
        ("1", 1, "trace", "TP3"), ("2", 12, "trace", "TP3")]
    frames = st.query("SELECT * FROM frames WHERE thread_id = '1' ORDER BY depth")
    assert len(frames) == 7 and all(f["native"] for f in frames)
    assert (frames[2]["function"], frames[2]["library"]) == ("c10d::ProcessGroupNCCL::watchdogHandler()",
                                                             "libtorch_cuda.so")
    assert (frames[4]["function"], frames[4]["library"]) == ("0x7f8e68cb0253", "libstdc++.so.6")
    assert len(_frames(st, stacks[1]["dump_id"], "2")) == 5


def test_captured_traceback_and_single_gdb_bt(tmp_path: Path):
    st = _ingest(tmp_path, {"a.txt": STACKS / "captured_traceback.txt", "b.txt": STACKS / "gdb_bt_one_thread.txt"})
    assert {r["kind"] for r in st.query("SELECT kind FROM sources")} == {"native_trace"}
    assert st.scalar("SELECT sum(unparsed_lines) FROM sources") == 0
    a = st.query("SELECT f.* FROM frames f JOIN stacks s USING (dump_id, thread_id) WHERE s.path = 'a.txt' "
                 "ORDER BY depth")
    assert len(a) == 8
    assert (a[3]["function"], a[3]["file"], a[3]["line"]) == ("c10d::ProcessGroupNCCL::watchdogHandler()",
                                                              "ProcessGroupNCCL.cpp", 1721)
    assert (a[1]["file"], a[1]["line"]) == (None, None)                          # 'from ??:0'
    b = st.query("SELECT f.* FROM frames f JOIN stacks s USING (dump_id, thread_id) WHERE s.path = 'b.txt' "
                 "ORDER BY depth")
    assert [(f["function"], f["library"]) for f in b] == [
        ("__GI___poll", None), ("0x00007f81779d62a1", "libzmq-2f02442c.so.5.2.5"),
        ("zmq_msg_recv", "libzmq-2f02442c.so.5.2.5"), ("_PyEval_EvalFrameDefault", None), ("_start", None)]
    assert (b[0]["file"], b[0]["line"]) == ("../sysdeps/unix/sysv/linux/poll.c", 29)


def test_torch_rank_prefix_names_the_rank(tmp_path: Path):
    body = (STACKS / "torch_cpp_trace.txt").read_text().splitlines()
    st = _ingest(tmp_path, {"trace.txt": "".join(f"[rank5]:{s}\n" for s in body)})
    assert st.scalar("SELECT unparsed_lines FROM sources") == 0
    assert {r["rank"] for r in st.query("SELECT rank FROM stacks")} == {"TP5"}


# -- ranks, kinds from content ------------------------------------------------------------------------

@needs_formats
def test_rank_from_title_then_place(tmp_path: Path):
    st = _ingest(tmp_path, {
        "pyspy/rank7.txt": FORMATS / "recvmsg_all_ranks/rank1.plain.txt",    # title says TP1: the title wins
        "pyspy/dp1_tp5.json": FORMATS / "recvmsg_all_ranks/rank2.json",      # JSON has no title: the name
        "tp6/gdb.out": FORMATS / "recvmsg_all_ranks/rank1.gdb.txt",          # the folder
        "dump.json": FORMATS / "recvmsg_all_ranks/rank3.json",               # nothing says: ''
        "py3.12.txt": FORMATS / "python_versions/py3.12.gdb.txt",            # a version is no rank
    }, engine="qwen-72b-tp8")                                                # the engine's size is no rank
    ranks = {r["path"]: r["rank"] for r in st.query("SELECT DISTINCT path, rank FROM stacks")}
    assert ranks == {"pyspy/rank7.txt": "TP1", "pyspy/dp1_tp5.json": "DP1 TP5", "tp6/gdb.out": "TP6",
                     "dump.json": "", "py3.12.txt": ""}


@needs_formats
def test_rank_from_the_pid_other_evidence_names(tmp_path: Path):
    """gdb names no rank; a py-spy dump of the same pid (title sglang::scheduler_TP1) does."""
    st = _ingest(tmp_path, {"misc/bt-1.txt": FORMATS / "recvmsg_all_ranks/rank1.gdb.txt",
                            "misc/pyspy-1.txt": FORMATS / "recvmsg_all_ranks/rank1.plain.txt",
                            "misc/other.txt": FORMATS / "python_versions/py3.12.gdb.txt"})
    ranks = {r["path"]: r["rank"] for r in st.query("SELECT DISTINCT path, rank FROM stacks")}
    assert ranks == {"misc/bt-1.txt": "TP1", "misc/pyspy-1.txt": "TP1", "misc/other.txt": ""}


def test_gdb_debuginfod_preamble_is_consumed():
    lines = ["This GDB supports auto-downloading debuginfo from the following URLs:",
             "  <https://debuginfod.ubuntu.com>",
             "Enable debuginfod for this session? (y or [n]) [answered N; input not from terminal]",
             "Debuginfod has been disabled.",
             "To make this setting permanent, add 'set debuginfod enabled off' to .gdbinit.",
             "[New LWP 402206]",
             "[Thread debugging using libthread_db enabled]",
             'Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".',
             "0x00007fefd9f439b9 in recvmsg () from /lib/x86_64-linux-gnu/libc.so.6",
             "",
             'Thread 2 (Thread 0x7fab8fdc46c0 (LWP 402206) "cuda-EvtHandlr"):',
             "#0  0x00007fefd9fd73d7 in poll () from /lib/x86_64-linux-gnu/libc.so.6",
             "",
             'Thread 1 (Thread 0x7fefda5c5740 (LWP 402169) "sglang::schedul"):',
             "#0  0x00007fefd9f439b9 in recvmsg () from /lib/x86_64-linux-gnu/libc.so.6",
             "#1  0x00007fd9f81d7c1e in ncclIpcSocketRecvMsg () from /usr/lib/libnccl.so.2",
             "[Inferior 1 (process 402169) detached]"]
    assert gdb.looks_like_gdb(lines, strong_only=True)
    d = gdb.parse_gdb(lines)
    assert d.unmatched == []
    assert [(t.thread_id, t.name, len(t.frames)) for t in d.threads] == [
        ("402206", "cuda-EvtHandlr", 1), ("402169", "sglang::schedul", 2)]
    assert d.processes[0].pid == 402169 and d.threads[1].frames[1].library == "libnccl.so.2"


@needs_formats
def test_kind_comes_from_content_not_name(tmp_path: Path):
    cases = {"notes.json": FORMATS / "multithread/rank0.gdb.txt", "x.txt": FORMATS / "multithread/rank0.json",
             "a.log": STACKS / "faulthandler_fatal.txt", "b.json": STACKS / "torch_cpp_trace.txt",
             "c": FORMATS / "errors/non_python_process.stderr.txt", "d.txt": FORMATS / "README.md"}
    for name, src in cases.items():
        shutil.copyfile(src, tmp_path / name)
    kinds = {n: detect_kind(tmp_path / n) for n in cases}
    assert kinds == {"notes.json": "gdb_dump", "x.txt": "pyspy_json", "a.log": "faulthandler_dump",
                     "b.json": "native_trace", "c": "capture_error", "d.txt": "unknown"}


@needs_formats
def test_truncated_json_keeps_complete_threads(tmp_path: Path):
    lines = _lines(FORMATS / "multithread/rank0.json")
    st = _ingest(tmp_path, {"cut.json": "\n".join(lines[:150]) + "\n"})
    src = st.query("SELECT * FROM sources")[0]
    assert src["kind"] == "pyspy_json"
    # threads are listed newest first: ResultConsumer and ZmqRecvThread are complete, watchdog is cut
    assert sorted(r["thread_name"] for r in st.query("SELECT thread_name FROM stacks")) == [
        "ResultConsumer", "ZmqRecvThread"]
    first_cut = next(i for i, s in enumerate(lines) if s == "  {" and i > 100)       # the cut object's start
    assert [r["line"] for r in st.query("SELECT line FROM unparsed ORDER BY line")] == list(range(first_cut + 1, 151))
    assert src["lines"] == 150 == src["parsed_lines"] + src["unparsed_lines"]


@needs_formats
def test_reingest_adds_nothing(tmp_path: Path):
    root = tmp_path / "eng"
    shutil.copytree(FORMATS / "recvmsg_all_ranks", root)
    with Store(tmp_path / "db.duckdb") as st:
        ingest_paths(st, [root])
        n = st.scalar("SELECT count(*) FROM frames")
        res = ingest_paths(st, [root])[0]
        assert res.files_read == 0 and st.scalar("SELECT count(*) FROM frames") == n


# -- parser units --------------------------------------------------------------------------------------

def test_gdb_frame_parsed_from_the_right():
    f = gdb.gdb_frame("0x00007f8187e9a98b", 'PyRun_StringFlags (str=0x7f "spawn_main(tracker_fd=4, pipe_handle=11)\\n", '
                                           "start=257) at Python/pythonrun.c:1601")
    assert (f.function, f.file, f.line, f.library) == ("PyRun_StringFlags", "Python/pythonrun.c", 1601, None)
    f = gdb.gdb_frame("0x00007f", "c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >) () "
                                  "from /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so")
    assert f.function == "c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)"
    assert f.library == "libtorch_cpu.so"
    assert gdb.gdb_frame("0x5d64b4", "?? ()").function == "0x5d64b4"


def test_parsers_account_for_every_line():
    for parse, name in ((faulthandler.parse_faulthandler, "faulthandler_garbled.txt"),
                        (faulthandler.parse_faulthandler, "faulthandler_fatal.txt"),
                        (native_trace.parse_trace, "torch_cpp_trace.txt")):
        lines = _lines(STACKS / name)
        d = parse(lines, 1)
        assert d.consumed.isdisjoint(d.unmatched)
        assert d.consumed | set(d.unmatched) == set(range(len(lines)))


def test_gdb_bt_full_and_thread_apply_all_py_bt():
    lines = ['Thread 2 (Thread 0x7f3b2c7fe6c0 (LWP 9623) "python3.12"):',
             "#0  0x00007f61c26ed545 in __GI___clock_nanosleep (clock_id=1, flags=1) at clock_nanosleep.c:48",
             "        sc_cancel_oldtype = 0",
             "        r = <optimized out>",
             "#1  0x00007f61c2b64b62 in pysleep (timeout=<optimized out>) at ./Modules/timemodule.c:2182",
             "No locals.",
             "",
             'Thread 1 (Thread 0x7f61c2e55740 (LWP 9600) "python3.12"):',
             "#0  __libc_recv (fd=3, buf=0x7f61c24bbe90, len=1, flags=0) at ../sysdeps/unix/sysv/linux/recv.c:28",
             "        __arg1 = 3",
             "",
             'Thread 2 (Thread 0x7f3b2c7fe6c0 (LWP 9623) "python3.12"):',
             "Traceback (most recent call first):",
             "  <built-in method sleep of module object at remote 0x7f61c25eab60>",
             '  File "/srv/versions_probe.py", line 12, in watchdog',
             "    time.sleep(100)",
             "  Waiting for the GIL",
             "",
             'Thread 1 (Thread 0x7f61c2e55740 (LWP 9600) "python3.12"):',
             "Traceback (most recent call first):",
             "  (frame information optimized out)",
             '  File "/srv/versions_probe.py", line 30, in <module>',
             "[Inferior 1 (process 9600) detached]"]
    d = gdb.parse_gdb(lines)
    assert d.unmatched == []
    assert [[(t.thread_id, t.format, [f.function for f in t.frames]) for t in p.threads] for p in d.processes] == [
        [("9623", "gdb", ["__GI___clock_nanosleep", "pysleep"]), ("9600", "gdb", ["__libc_recv"])],
        [("9623", "gdb_pybt", ["sleep", "watchdog"]), ("9600", "gdb_pybt", ["<optimized out>", "<module>"])]]
    assert d.format == "gdb" and {p.pid for p in d.processes} == {9600}


def test_faulthandler_foreign_lines():
    fatal = _lines(STACKS / "faulthandler_fatal.txt")
    # the shell's line after the dump is not the dump's, and does not make it garbled
    d = faulthandler.parse_faulthandler([*fatal, "Aborted (core dumped)"])
    assert d.unmatched == [len(fatal)] and not any(t.garbled for t in d.threads)
    # a foreign line between two frames: the frame after it is not attributed, and the dump is garbled
    timeout = _lines(STACKS / "faulthandler_timeout.txt")
    d = faulthandler.parse_faulthandler([*timeout[:3], "INFO 05-12 14:10:08 loop tick", *timeout[3:]])
    assert d.unmatched == [3, 4]
    assert [(len(t.frames), t.garbled) for t in d.threads] == [(1, True), (2, True), (2, True), (2, True)]
