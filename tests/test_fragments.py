"""Evidence in pieces (issue 11, item 2): a dump cut into parts and joined across files, a last line cut
mid-token, blank lines inside a stack, faulthandler output interleaved character by character, and
``top`` / ``ps`` snapshots pasted beside the logs.

The data (tests/data/fragments, see its README.md) is payload text: the collector and paste envelopes
are another stage's job, stripped before any parser runs.
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pytest
from conftest import DATA

from hangforensics.ingest.fragments import unjoin_engine
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.parsers.capture import process_snapshot
from hangforensics.parsers.sglang import sglang_log
from hangforensics.parsers.stacks import faulthandler, pyspy
from hangforensics.readers.kinds import detect_kind
from hangforensics.store import Store

FRAG = DATA / "fragments"
SNAP = FRAG / "snapshots"


def _lines(p: Path) -> list[str]:
    return p.read_text(encoding="utf-8").removesuffix("\n").split("\n")


def _functions(t: pyspy.Thread) -> list[str]:
    return [f.function for f in t.frames]


def _ingest(root: Path, files: dict[str, Path | str]) -> Store:
    for rel, src in files.items():
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(src, Path):
            shutil.copyfile(src, dst)
        else:
            dst.write_text(src, encoding="utf-8")
    st = Store(":memory:")
    ingest_paths(st, [root], mode="engine")
    return st


def _stack(st: Store, thread_id: str) -> dict:
    rows = st.query("SELECT * FROM stacks WHERE thread_id = ?", [thread_id])
    assert len(rows) == 1, rows
    return rows[0]


def _frames(st: Store, dump_id: str, thread_id: str) -> list[str]:
    return [r["function"] for r in st.query(
        "SELECT function FROM frames WHERE dump_id = ? AND thread_id = ? ORDER BY depth", [dump_id, thread_id])]


def _accounted(st: Store) -> None:
    for s in st.query("SELECT * FROM sources"):
        assert s["lines"] == s["parsed_lines"] + s["unparsed_lines"], s["path"]
        assert s["unparsed_lines"] == st.scalar("SELECT count(*) FROM unparsed WHERE path = ?", [s["path"]])


# -- py-spy parts, parsed alone -----------------------------------------------------------------------

def test_a_part_without_its_headers_is_a_continuation_not_unparsed():
    d = pyspy.parse_dump(_lines(FRAG / "three_parts/capture-2.txt"), 1)
    assert d.unmatched == [] and d.consumed == set(range(6))
    [proc] = d.processes
    assert (proc.pid, proc.title) == (None, "")
    [t] = proc.threads
    assert (t.thread_id, t.state, t.name, t.fragment, t.line, t.line_end) == ("?", None, None, "continuation", 1, 6)
    assert _functions(t) == ["wait", "all_gather_into_tensor", "wrapper", "all_gather", "forward", "forward"]
    assert [f.at for f in t.frames] == [1, 2, 3, 4, 5, 6]


def test_a_part_starting_mid_thread_keeps_the_threads_after_it():
    d = pyspy.parse_dump(_lines(FRAG / "three_parts/capture-3.txt"), 1)
    assert d.unmatched == []
    cont, reader = d.threads
    assert (cont.thread_id, cont.fragment, len(cont.frames)) == ("?", "continuation", 10)
    assert (cont.frames[-1].function, cont.frames[-1].native, cont.frames[-1].library) == (
        "0x7f3e1c229d90", True, "libc.so.6")
    assert (reader.thread_id, reader.state, reader.name, reader.fragment) == (
        "90477", "idle", "Thread-2 (_read_thread)", None)
    assert _functions(reader)[0] == "read" and len(reader.frames) == 8


def test_a_native_frame_cut_inside_its_cpp_name_is_not_a_frame():
    """'...>(bool (*)': the last ' (' leaves a "file" '*', no library; the frames before it stay."""
    lines = _lines(FRAG / "three_parts/capture-1.txt")
    d = pyspy.parse_dump(lines, 1)
    [t] = d.threads
    assert _functions(t) == ["pthread_cond_timedwait", "c10d::ProcessGroupNCCL::WorkNCCL::synchronizeStream",
                             "c10d::ProcessGroupNCCL::WorkNCCL::wait"]
    assert d.unmatched == [7]
    assert (t.fragment, t.line_end) == ("cut", 8)


def test_a_frame_cut_mid_token_is_kept_out():
    d = pyspy.parse_dump(_lines(FRAG / "pyspy_cut_frame.txt"), 1)
    [t] = d.threads
    assert _functions(t) == ["0x7f31d0ff258a"]              # never 'draft', a frame named after a fragment
    assert d.unmatched == [5] and t.fragment == "cut"


def test_a_thread_header_cut_mid_token_closes_the_thread_above():
    d = pyspy.parse_dump(_lines(FRAG / "pyspy_cut_header.txt"), 1)
    [main] = d.threads                                    # 'Thread 3361 (act' names no thread
    assert (main.thread_id, main.fragment, main.line_end) == ("3305", None, 8)
    assert _functions(main) == ["_register_segments_for_comm", "__exit__", "forward", "event_loop_overlap"]
    assert d.unmatched == [8]


def test_frames_after_a_cut_header_are_not_the_thread_above():
    d = pyspy.parse_dump(["Process 7: sglang::scheduler_TP0", 'Thread 7 (idle): "MainThread"',
                          "    f (a.py:1)", "Thread 31 (id", "    g (b.py:2)"], 1)
    main, unknown = d.threads
    assert _functions(main) == ["f"] and main.fragment is None
    assert (unknown.thread_id, unknown.fragment, _functions(unknown)) == ("?5", "joined", ["g"])
    assert d.unmatched == [3]


def test_blank_lines_inside_a_stack_do_not_end_the_thread():
    """A compose prefix on every line leaves prefix-only lines blank once the envelope is stripped."""
    d = pyspy.parse_dump(_lines(FRAG / "pyspy_blank_lines.txt"), 1)
    assert d.unmatched == []
    main, poller = d.threads
    assert _functions(main) == ["_recv_fds", "exchange_shm_fds", "init_shm_broadcast", "run_worker_process"]
    assert _functions(poller) == ["HealthPoller.run", "Thread._bootstrap_inner", "Thread._bootstrap"]
    assert main.fragment is None and poller.fragment is None


def test_two_pastes_in_one_file_are_joined_by_the_parser():
    """The first paste ends mid-token, a line of prose, the second paste goes on with the same thread."""
    d = pyspy.parse_dump(_lines(FRAG / "pyspy_two_pastes.txt"), 1)
    main, other = d.threads
    assert _functions(main) == ["_wait_for_peer", "broadcast_pyobj", "event_loop_normal", "run_scheduler_process",
                                "run", "_bootstrap", "_main", "spawn_main", "<module>"]
    assert (main.fragment, main.line_end) == ("joined", 16)
    assert other.fragment is None and _functions(other)[0] == "wait"
    assert d.unmatched == [6, 8]                          # the cut line and the prose


def test_a_log_starting_with_the_rest_of_a_dump():
    lines = _lines(FRAG / "watchdog_split/part2.log")
    out = sglang_log.parse_chunk(lines, 1, sglang_log.FileContext(engine="e", path="part2.log", default_year=2026))
    assert out.unparsed == 0
    cont, wd = out.tables["stacks"]
    assert (cont["thread_id"], cont["fragment"], cont["line"], cont["rank"], cont["capture"]) == (
        "?", "continuation", 1, "", "embedded")
    # the dump was printed just before the first dated line after it
    assert cont["ts"] == wd["ts"] == datetime(2026, 10, 14, 3, 17, 44)
    assert (wd["thread_id"], wd["thread_name"], wd["line"], wd["line_end"]) == (
        "2718664", "Thread-4 (_watchdog_thread)", 2, 11)
    assert [f["function"] for f in out.tables["frames"] if f["thread_id"] == "?"] == ["_bootstrap"]
    assert "watchdog_timeout" in set(out.tables["events"]["kind"])


# -- joined across files ------------------------------------------------------------------------------

def test_a_watchdog_dump_split_over_two_logs_is_joined(tmp_path: Path):
    st = _ingest(tmp_path / "wd", {"part1.log": FRAG / "watchdog_split/part1.log",
                                    "part2.log": FRAG / "watchdog_split/part2.log"})
    _accounted(st)
    assert [r["kind"] for r in st.query("SELECT kind FROM sources ORDER BY path")] == ["server_log", "server_log"]
    assert st.query("SELECT line, text FROM unparsed") == [{"line": 31, "text": "    _bootstrap_inner (thre"}]
    first = _stack(st, "2718519")
    assert (first["path"], first["line"], first["line_end"], first["fragment"]) == ("part1.log", 27, 31, "cut")
    # the continuation's frame is appended to the first part's last thread
    assert _frames(st, first["dump_id"], "2718519") == ["wait", "get", "run", "_bootstrap"]
    # the continuation's other threads join the first part's dump and process, each keeping its own line
    wd = _stack(st, "2718664")
    assert (wd["dump_id"], wd["rank"], wd["pid"], wd["process_title"]) == (
        first["dump_id"], "TP2", 2718282, "sglang::scheduler_TP2")
    assert (wd["path"], wd["line"], wd["line_end"]) == ("part2.log", 2, 11)
    assert len(_frames(st, wd["dump_id"], "2718664")) == 9
    cont = _stack(st, "?")
    assert (cont["path"], cont["line"], cont["fragment"]) == ("part2.log", 1, "joined")
    assert _frames(st, cont["dump_id"], "?") == []
    [j] = st.query("SELECT * FROM stack_joins")
    assert (j["dump_id"], j["thread_id"], j["depth"], j["from_dump_id"], j["basis"]) == (
        first["dump_id"], "2718519", 3, cont["dump_id"], "cut")
    assert st.scalar("SELECT count(DISTINCT dump_id) FROM stacks WHERE fragment IS DISTINCT FROM 'joined'") == 1


def test_both_parts_pasted_into_one_log_are_joined_by_the_parser(tmp_path: Path):
    text = (FRAG / "watchdog_split/part1.log").read_text() + (FRAG / "watchdog_split/part2.log").read_text()
    st = _ingest(tmp_path / "wd", {"server.log": text})
    _accounted(st)
    first = _stack(st, "2718519")
    assert (first["fragment"], first["line_end"]) == ("joined", 32)
    assert _frames(st, first["dump_id"], "2718519") == ["wait", "get", "run", "_bootstrap"]
    assert _stack(st, "2718664")["dump_id"] == first["dump_id"]
    assert st.scalar("SELECT count(*) FROM stack_joins") == 0
    assert st.query("SELECT line FROM unparsed") == [{"line": 31}]


def test_the_second_part_alone_stays_a_continuation(tmp_path: Path):
    st = _ingest(tmp_path / "wd", {"part2.log": FRAG / "watchdog_split/part2.log"})
    _accounted(st)
    assert st.scalar("SELECT unparsed_lines FROM sources") == 0
    cont = _stack(st, "?")
    assert (cont["fragment"], cont["rank"], cont["pid"]) == ("continuation", "", None)
    assert _frames(st, cont["dump_id"], "?") == ["_bootstrap"]
    assert st.scalar("SELECT count(*) FROM stack_joins") == 0


def test_the_first_part_arriving_later_is_joined_then(tmp_path: Path):
    root = tmp_path / "wd"
    root.mkdir()
    shutil.copyfile(FRAG / "watchdog_split/part2.log", root / "part2.log")
    with Store(":memory:") as st:
        ingest_paths(st, [root], mode="engine")
        assert st.scalar("SELECT count(*) FROM stack_joins") == 0
        shutil.copyfile(FRAG / "watchdog_split/part1.log", root / "part1.log")
        ingest_paths(st, [root], mode="engine")
        first = _stack(st, "2718519")
        assert _frames(st, first["dump_id"], "2718519") == ["wait", "get", "run", "_bootstrap"]
        assert st.scalar("SELECT count(*) FROM stack_joins") == 1


def test_a_changed_part_is_unjoined_before_it_is_read_again(tmp_path: Path):
    """A file read again drops its rows; the join is undone first (no frame of it left on the other
    part's thread, none lost there) and made again after."""
    root = tmp_path / "wd"
    root.mkdir()
    for name in ("part1.log", "part2.log"):
        shutil.copyfile(FRAG / "watchdog_split" / name, root / name)
    with Store(":memory:") as st:
        ingest_paths(st, [root], mode="engine")
        before = st.scalar("SELECT count(*) FROM frames")
        text = (root / "part2.log").read_text().replace("_communicate (subprocess.py:2115)",
                                                        "_communicate (subprocess.py:2116)")
        (root / "part2.log").write_text(text)
        ingest_paths(st, [root], mode="engine")
        assert st.scalar("SELECT count(*) FROM frames") == before
        assert st.scalar("SELECT count(*) FROM stack_joins") == 1
        first = _stack(st, "2718519")
        assert _frames(st, first["dump_id"], "2718519") == ["wait", "get", "run", "_bootstrap"]
        assert st.scalar("SELECT line FROM frames WHERE function = '_communicate'") == 2116
        # the first part changes: the second part's rows go back to its own dump, then join again
        text = (root / "part1.log").read_text().replace("get (queue.py:180)", "get (queue.py:181)")
        (root / "part1.log").write_text(text)
        ingest_paths(st, [root], mode="engine")
        assert st.scalar("SELECT count(*) FROM frames") == before
        first = _stack(st, "2718519")
        assert _frames(st, first["dump_id"], "2718519") == ["wait", "get", "run", "_bootstrap"]
        assert _stack(st, "2718664")["dump_id"] == first["dump_id"]


def _rows_of(st: Store, path: str) -> list[tuple]:
    stacks = st.query("SELECT dump_id, thread_id, rank, pid, process_title, line, line_end, fragment FROM stacks "
                      "WHERE path = ? ORDER BY line", [path])
    return [(*s.values(), _frames(st, s["dump_id"], s["thread_id"])) for s in stacks]


def test_unjoining_gives_back_the_parts_as_parsed(tmp_path: Path):
    parts = FRAG / "three_parts"
    files = {"a.txt": parts / "capture-1.txt", "b.txt": parts / "capture-2.txt", "c.txt": parts / "capture-3.txt"}
    alone = {name: _rows_of(_ingest(tmp_path / name / "e", {name: src}), name) for name, src in files.items()}
    st = _ingest(tmp_path / "all" / "e", files)
    assert st.scalar("SELECT count(*) FROM stack_joins") == 2
    with st.transaction():
        unjoin_engine(st, "e")
    assert st.scalar("SELECT count(*) FROM stack_joins") == 0
    for name in files:
        assert _rows_of(st, name) == alone[name]


def test_a_dump_over_three_files_joins_in_order_whatever_the_names(tmp_path: Path):
    """Names carry no meaning: the parts are named here so that name order is the reverse of theirs.
    A complete dump of another rank sits beside them (its stack reaches <module>: nothing continues it)."""
    parts = FRAG / "three_parts"
    st = _ingest(tmp_path / "e", {"c.txt": parts / "capture-1.txt", "b.txt": parts / "capture-2.txt",
                                   "a.txt": parts / "capture-3.txt", "other/tp4.txt": parts / "other/tp4.txt"})
    _accounted(st)
    assert {r["kind"] for r in st.query("SELECT kind FROM sources")} == {"pyspy_dump"}
    main = _stack(st, "90211")
    frames = _frames(st, main["dump_id"], "90211")
    assert frames[:4] == ["pthread_cond_timedwait", "c10d::ProcessGroupNCCL::WorkNCCL::synchronizeStream",
                          "c10d::ProcessGroupNCCL::WorkNCCL::wait", "wait"]
    assert frames[7:10] == ["forward", "forward", "forward_extend"]
    assert frames[-2:] == ["<module>", "0x7f3e1c229d90"] and len(frames) == 19
    joins = st.query("SELECT * FROM stack_joins ORDER BY seq")
    assert [(j["from_dump_id"].rsplit(":", 1)[1], j["depth"], j["basis"]) for j in joins] == [
        ("b.txt", 3, "cut"), ("a.txt", 9, "only")]
    reader = _stack(st, "90477")
    assert (reader["dump_id"], reader["rank"], reader["path"]) == (main["dump_id"], "DP1 TP5 EP5", "a.txt")
    other = _stack(st, "90210")
    assert len(_frames(st, other["dump_id"], "90210")) == 18 and other["dump_id"] != main["dump_id"]


def test_a_standalone_part_says_it_starts_mid_dump(tmp_path: Path):
    st = _ingest(tmp_path / "e", {"b.txt": FRAG / "three_parts/capture-2.txt"})
    assert "starts mid-dump" in st.scalar("SELECT note FROM sources")
    assert st.scalar("SELECT unparsed_lines FROM sources") == 0


def test_two_open_first_parts_are_not_guessed_between(tmp_path: Path):
    """Two ranks' dumps both cut mid-thread and one continuation: either could be its first part."""
    tp2 = (FRAG / "three_parts/capture-1.txt").read_text().replace("90211", "90212").replace("TP5_EP5", "TP6_EP6")
    st = _ingest(tmp_path / "e", {"x.txt": FRAG / "three_parts/capture-1.txt", "y.txt": tp2,
                                   "z.txt": FRAG / "three_parts/capture-2.txt"})
    assert st.scalar("SELECT count(*) FROM stack_joins") == 0
    cont = _stack(st, "?")
    assert cont["fragment"] == "continuation" and len(_frames(st, cont["dump_id"], "?")) == 6
    for tid in ("90211", "90212"):
        assert len(_frames(st, _stack(st, tid)["dump_id"], tid)) == 3


def test_a_first_part_ending_in_a_cut_thread_header_leaves_no_thread_open(tmp_path: Path):
    """The continuation's frames are the cut header's thread's, whose id is lost: not the thread above."""
    st = _ingest(tmp_path / "e", {"a.txt": FRAG / "pyspy_cut_header.txt",
                                   "b.txt": FRAG / "three_parts/capture-2.txt"})
    assert st.scalar("SELECT count(*) FROM stack_joins") == 0
    assert len(_frames(st, _stack(st, "3305")["dump_id"], "3305")) == 4


def test_a_continuation_of_another_rank_is_not_joined(tmp_path: Path):
    """The continuation's folder names rank TP3; the only open dump is TP5's."""
    st = _ingest(tmp_path / "e", {"tp5.txt": FRAG / "three_parts/capture-1.txt",
                                   "tp3/rest.txt": FRAG / "three_parts/capture-2.txt"})
    assert st.scalar("SELECT count(*) FROM stack_joins") == 0
    assert _stack(st, "?")["rank"] == "TP3"


def test_a_part_with_its_own_process_header_is_not_a_continuation(tmp_path: Path):
    """Frames after a 'Process' line whose thread header is missing: an unnamed thread of that process."""
    text = "Process 90211: sglang::scheduler_DP1_TP5_EP5\n" + (FRAG / "three_parts/capture-2.txt").read_text()
    st = _ingest(tmp_path / "e", {"a.txt": FRAG / "three_parts/capture-1.txt", "b.txt": text})
    assert st.scalar("SELECT count(*) FROM stack_joins") == 0
    row = st.query("SELECT * FROM stacks WHERE path = 'b.txt'")[0]
    assert (row["thread_id"], row["pid"], row["rank"]) == ("?", 90211, "DP1 TP5 EP5")


# -- faulthandler -------------------------------------------------------------------------------------

def test_faulthandler_interleaved_by_characters_keeps_only_what_is_certain(tmp_path: Path):
    """Two ranks' bus errors written at once (tests/data/fragments/generate.py): the first rank's
    preamble, header and first frame went out alone; from the second rank's first character on, no
    line is certainly one writer's."""
    lines = _lines(FRAG / "faulthandler_chars.txt")
    d = faulthandler.parse_faulthandler(lines, 1)
    [t] = d.threads
    assert (t.thread_id, t.garbled, _functions(t)) == ("0x7e5b972ba640", True, ["select"])
    assert d.processes[0].title == "Fatal Python error: Bus error"
    assert sorted(d.consumed) == [0, 1, 2, 3, 5, 14, 18, 24, 26]    # the preamble, the first frame, blank lines
    st = _ingest(tmp_path / "e", {"stderr.txt": FRAG / "faulthandler_chars.txt"})
    assert st.scalar("SELECT kind FROM sources") == "faulthandler_dump"
    _accounted(st)
    assert "interleaved dump output" in st.scalar("SELECT note FROM sources")


def test_faulthandler_header_with_an_intact_id_records_its_thread():
    """'(most recent cetall first)': another writer's characters in the literal, the id whole."""
    lines = ["Fatal Python error: Bus error", "",
             'Thread 0x00007e5b/python3.12/selectors.py", line 468 i972ba4640 (most recent call first):',
             "  File n select",
             "Current thread 0x00007e8cfe679640 (most recent cetall first):",
             '  File "/usr/lib/python3.12/threading.py", line 1073 in _bootstrap_inner',
             "",
             "Current thread 0x00007e5a38bab4c0 (most recent call first):",
             '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", '
             "line 650 in replay"]
    d = faulthandler.parse_faulthandler(lines, 1)
    assert [(t.thread_id, t.state, t.garbled, _functions(t)) for t in d.threads] == [
        ("0x7e8cfe679640", "current", True, []), ("0x7e5a38bab4c0", "current", True, [])]
    # two current threads: two processes
    assert len(d.processes) == 2
    # the broken header gave its thread a row: it is read, not also kept in unparsed (counted once)
    assert d.unmatched == [2, 3, 5, 8]


def test_faulthandler_cut_last_line_is_not_interleaving():
    d = faulthandler.parse_faulthandler(_lines(FRAG / "faulthandler_cut.txt"), 1)
    [t] = d.threads
    assert (t.thread_id, t.garbled, t.fragment, t.line_end) == ("0x7f19c2ffd640", False, "cut", 6)
    assert _functions(t) == ["all_reduce", "_all_reduce_out_place", "all_reduce", "forward"]
    assert d.unmatched == [5]


def test_faulthandler_part_without_its_header():
    lines = _lines(FRAG / "faulthandler_cut.txt")[1:5] + ["", "Current thread 0x00007f19c3fff740 "
                                                          "(most recent call first):",
                                                          '  File "<string>", line 1 in <module>']
    d = faulthandler.parse_faulthandler(lines, 1)
    cont, cur = d.threads
    assert (cont.thread_id, cont.fragment, len(cont.frames), cont.garbled) == ("?", "continuation", 4, False)
    assert (cur.thread_id, _functions(cur)) == ("0x7f19c3fff740", ["<module>"])


def test_faulthandler_frame_after_the_outermost_one_is_another_writers():
    lines = ["Thread 0x00007f3b2c7fe6c0 (most recent call first):",
             '  File "/usr/lib/python3.11/threading.py", line 331 in wait',
             '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap',
             '  File "/srv/app.py", line 12 in main']
    d = faulthandler.parse_faulthandler(lines, 1)
    [t] = d.threads
    assert _functions(t) == ["wait", "_bootstrap"] and t.garbled
    assert d.unmatched == [3]


def test_kinds_of_fragments(tmp_path: Path):
    garbled = ('  File "/usr/liFatal Python error: Bus error\n\n'
               'Thread 0x00007e5b/python3.12/selectors.py", line 468 i972ba4640 (most recent call first):\n'
               "  File n select\n"
               '  File "/usr/lib/"python3.12/asyncio/base_events.py", line 1952 in _run_once\n'
               '  File thon3.12/queue.py", line 171 in get\n')
    (tmp_path / "g.txt").write_text(garbled)
    assert detect_kind(tmp_path / "g.txt") == "faulthandler_dump"      # no header intact at all
    assert detect_kind(FRAG / "faulthandler_chars.txt") == "faulthandler_dump"
    assert detect_kind(FRAG / "faulthandler_cut.txt") == "faulthandler_dump"
    for name in ("capture-1.txt", "capture-2.txt", "capture-3.txt"):
        assert detect_kind(FRAG / "three_parts" / name) == "pyspy_dump"
    assert detect_kind(FRAG / "watchdog_split/part2.log") == "server_log"   # its log lines matter more
    for p in sorted(SNAP.iterdir()):
        assert detect_kind(p) == "process_snapshot", p.name
    # a Python traceback has 'File "' lines too: not a faulthandler dump
    (tmp_path / "tb.txt").write_text('Traceback (most recent call last):\n  File "/srv/a.py", line 3, in <module>\n'
                                     '  File "/srv/b.py", line 9, in f\nValueError: boom\n')
    assert detect_kind(tmp_path / "tb.txt") != "faulthandler_dump"


# -- top / ps snapshots -------------------------------------------------------------------------------

def _rows(name: str) -> list[dict]:
    snap = process_snapshot.parse_snapshot(_lines(SNAP / name), 1)
    return snap.rows


def _pick(rows: list[dict], *keys: str) -> list[tuple]:
    return [tuple(r[k] for k in keys) for r in rows]


def test_top_batch_snapshot():
    rows = _rows("top_b.txt")
    assert _pick(rows, "line", "pid", "state", "cpu_pct", "mem_pct", "rank", "activity") == [
        (8, 2718281, "R", 299.7, 2.0, "TP1", "spinning"), (9, 2718282, "D", 0.0, 2.0, "TP2", "uninterruptible"),
        (10, 2718280, "S", 0.3, 2.0, "TP0", "sleeping"), (11, 2718100, "S", 0.7, 0.2, None, "sleeping")]
    # a time of day and nothing more: never a timestamp
    assert {(r["tool"], r["ts_printed"], r["ts"], r["clock"], r["snapshot"]) for r in rows} == {
        ("top", "14:02:11", None, "time_of_day", 0)}
    assert rows[3]["command"] == "python3 -m sglang.launch_server --model-path /models/qwen --tp 4"   # '--tp 4' is no rank


def test_top_threads_snapshot():
    rows = _rows("top_threads.txt")
    assert _pick(rows, "tool", "pid", "tid", "command", "activity") == [
        ("top -H", None, 2718281, "sglang::schedul", "spinning"), ("top -H", None, 2718330, "pt_autograd_0", "spinning"),
        ("top -H", None, 2718331, "cuda-EvtHandlr", "sleeping")]
    assert {r["rank"] for r in rows} == {None}            # top cuts names to 15 characters


def test_ps_aux_with_a_date_line():
    snap = process_snapshot.parse_snapshot(_lines(SNAP / "ps_aux.txt"), 1)
    assert snap.unmatched == [0]                          # the shell prompt
    assert _pick(snap.rows, "pid", "state", "cpu_pct", "rank", "activity") == [
        (2718280, "R", 98.7, "TP0", "spinning"), (2718281, "R", 99.1, "TP1", "spinning"),
        (2718282, "D", 97.9, "TP2", "uninterruptible"), (2718283, "S", 0.4, "TP3", "sleeping"),
        (2719950, "S", 0.0, None, "sleeping")]
    assert {(r["tool"], r["ts"], r["clock"], r["ts_printed"]) for r in snap.rows} == {
        ("ps aux", datetime(2026, 10, 14, 5, 19, 2), "dated", "Wed Oct 14 05:19:02 UTC 2026")}


def test_ps_threads_and_wait_channels():
    rows = _rows("ps_eLf.txt")
    assert _pick(rows, "tool", "pid", "tid", "ppid", "cpu_pct", "state", "rank") == [
        ("ps -eLf", 2718282, 2718282, 2718100, 97.0, None, "TP2"),
        ("ps -eLf", 2718282, 2718330, 2718100, 0.0, None, "TP2"),
        ("ps -eLf", 2718282, 2718401, 2718100, 12.0, None, "TP2")]
    rows = _rows("ps_o_wchan.txt")
    assert _pick(rows, "tool", "pid", "state", "wchan", "rank", "activity") == [
        ("ps -o", 2718280, "S", "futex_wait_queue", "TP0", "sleeping"), ("ps -o", 2718281, "R", "-", "TP1", "spinning"),
        ("ps -o", 2718282, "D", "os_wait_on_event", "TP2", "uninterruptible"),
        ("ps -o", 2718283, "S", "do_epoll_wait", "TP3", "sleeping")]


def test_ps_rows_pasted_without_their_header():
    rows = _rows("ps_grep_headerless.txt")
    assert _pick(rows, "tool", "pid", "user", "cpu_pct", "rank", "activity") == [
        ("ps aux", 41872, "root", 0.0, None, "sleeping"), ("ps aux", 41990, "root", 100.0, "TP0", "spinning"),
        ("ps aux", 41991, "root", 99.8, "TP1", "spinning")]


@pytest.mark.parametrize(("command", "rank"), [
    ("sglang::scheduler_DP0_TP3_EP3", "DP0 TP3 EP3"), ("sglang::scheduler_PP1_TP0", "PP1 TP0"),
    ("VLLM::Worker_TP1", "TP1"), ("VllmWorker-2", "TP2"), ("VllmWorker rank=5", "TP5"),
    ("ray::RayWorkerWrapper.execute_method", None), ("sglang::schedul", None), ("sglang::detokenizer", None),
    ("python3 -m sglang.launch_server --tp 8 --model /m/TP_8", None), ("/usr/bin/python rank_3.py", None)])
def test_rank_from_a_process_title(command: str, rank: str | None):
    assert process_snapshot.rank_from_command(command) == rank


def test_two_snapshots_in_one_file():
    text = _lines(SNAP / "top_b.txt") + [""] + _lines(SNAP / "top_b.txt")[:7] + [
        _lines(SNAP / "top_b.txt")[7].replace("R 299.7", "S   0.0")]
    snap = process_snapshot.parse_snapshot(text, 1)
    assert [r["snapshot"] for r in snap.rows] == [0, 0, 0, 0, 1]
    assert snap.rows[-1]["activity"] == "sleeping" and snap.unmatched == []


def test_snapshot_ingest_rows_ranks_and_accounting(tmp_path: Path):
    """A top -H thread row takes the rank of the py-spy dump that lists its thread id; a process row
    whose title is cut takes the rank its pid has in other evidence."""
    dump = ("Process 2718281: sglang::scheduler_TP1\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
            'Thread 2718281 (active+gil): "MainThread"\n    event_loop_normal (managers/scheduler.py:774)\n'
            'Thread 2718330 (idle): "Thread-2"\n    wait (threading.py:359)\n')
    st = _ingest(tmp_path / "e", {"top_threads.txt": SNAP / "top_threads.txt", "ps_aux.txt": SNAP / "ps_aux.txt",
                                   "tp1.pyspy": dump})
    _accounted(st)
    kinds = {r["path"]: r["kind"] for r in st.query("SELECT path, kind FROM sources")}
    assert kinds == {"top_threads.txt": "process_snapshot", "ps_aux.txt": "process_snapshot", "tp1.pyspy": "pyspy_dump"}
    top = st.query("SELECT tid, rank FROM process_samples WHERE path = 'top_threads.txt' ORDER BY line")
    assert [(r["tid"], r["rank"]) for r in top] == [(2718281, "TP1"), (2718330, "TP1"), (2718331, None)]
    assert st.scalar("SELECT count(*) FROM process_samples WHERE path = 'ps_aux.txt'") == 5
    assert st.query("SELECT line FROM unparsed WHERE path = 'ps_aux.txt'") == [{"line": 1}]
    assert "time of day only" in st.scalar("SELECT note FROM sources WHERE path = 'top_threads.txt'")
