"""faulthandler output of several processes written into one file at once.

Every rank of a torch.distributed job registers ``faulthandler.register(SIGUSR1, file=shared, all_threads=True)``
and all are signalled together: faulthandler writes each line in several write() calls, so the ranks' pieces
interleave mid-line.  The samples (tests/data/stacks/faulthandler_interleaved, README there) are real output
of tests/realjobs; the property test interleaves real clean dumps at the same piece boundaries CPython uses.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from conftest import DATA

from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.parsers.stacks import faulthandler
from hangforensics.parsers.stacks.pyspy import Dump
from hangforensics.readers.kinds import detect_kind
from hangforensics.store import Store

SAMPLES = DATA / "stacks" / "faulthandler_interleaved"
INTERLEAVED = ["op_mismatch_heavy.txt", "op_mismatch_mild.txt", "overlap_worker_heavy.txt",
               "overlap_worker_glued_names.txt", "two_groups.txt", "busy_rank.txt"]
CLEAN = ["clean_op_mismatch.txt", "clean_overlap_worker.txt"]
CASES = 600

C10D = "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
JOB = "/srv/realjobs/job.py"
MAIN_THREAD = ["wait", "get", "resolve_last_batch_result", "overlap_worker", "main", "<module>"]
WORKER = ["wrapper", "forward_thread_func", "run", "_bootstrap_inner", "_bootstrap"]


def _lines(name: str) -> list[str]:
    return (SAMPLES / name).read_text().splitlines()


def _parse(name: str) -> Dump:
    return faulthandler.parse_faulthandler(_lines(name), 1)


def _threads(d: Dump) -> list[tuple[str, str | None, bool, list[str]]]:
    return [(t.thread_id, t.state, t.garbled, [f.function for f in t.frames]) for t in d.threads]


def _accounting(d: Dump, n: int) -> None:
    assert d.consumed | set(d.unmatched) == set(range(n)), "every line is parsed or kept as unparsed"
    assert not d.consumed & set(d.unmatched) and len(set(d.unmatched)) == len(d.unmatched)


@pytest.mark.parametrize("name", INTERLEAVED + CLEAN)
def test_interleaved_output_is_a_faulthandler_dump(name: str) -> None:
    assert detect_kind(SAMPLES / name) == "faulthandler_dump"


def test_two_ranks_at_once_then_two_alone() -> None:
    """Both ranks' headers on line 1-2 ('Current thread 0xCurrent thread 0x<id><id>'), their frames glued
    pairwise on lines 3-12; the last two ranks wrote alone.  The two interleaved threads keep their ids (each
    a whole 16-digit write) and no frame: which rank each frame piece is from is not certain."""
    d = _parse("op_mismatch_heavy.txt")
    _accounting(d, 24)
    assert _threads(d) == [
        ("0x7f0978451b80", "current", True, []),
        ("0x7f0a9c9c3b80", "current", True, []),
        ("0x7fbd2ca14b80", "current", False, ["all_reduce", "wrapper", "op_mismatch", "main", "<module>"]),
        ("0x7f85f22a9b80", "current", False, ["broadcast", "wrapper", "op_mismatch", "main", "<module>"]),
    ]
    assert [len(p.threads) for p in d.processes] == [1, 1, 1, 1]
    assert sorted(d.unmatched) == list(range(2, 12))                  # the glued frame lines
    assert d.notes == ["interleaved faulthandler output (several processes writing at once) of 4 thread(s): "
                       "2 kept whole, 0 with only their certain frames, 2 with their id only, 0 unidentified"]
    f = d.threads[3].frames[0]
    assert (f.file, f.line, f.function, f.at) == (C10D, 3151, "broadcast", 20)


def test_nothing_but_interleaved_pieces(tmp_path: Path) -> None:
    """Two ranks' whole output written at once (the first 12 lines of op_mismatch_heavy.txt): no line is
    intact, yet the pieces say what the file is; both threads are counted and identified, no frame is kept."""
    path = tmp_path / "stderr.txt"
    lines = _lines("op_mismatch_heavy.txt")[:12]
    path.write_text("\n".join(lines) + "\n")
    assert detect_kind(path) == "faulthandler_dump"
    d = faulthandler.parse_faulthandler(lines, 1)
    _accounting(d, 12)
    assert _threads(d) == [("0x7f0978451b80", "current", True, []), ("0x7f0a9c9c3b80", "current", True, [])]
    assert "of 2 thread(s): 0 kept whole, 0 with only their certain frames, 2 with their id only" in d.notes[0]


def test_a_header_begun_inside_another_ranks_last_frame() -> None:
    """'  File ".../job.py", line 265 in Current thread 0x<module>': the first rank's last frame is broken
    (its other frames stay), the second rank's header completes on the next line: its frames after it are
    certain, its header line was touched (garbled)."""
    d = _parse("op_mismatch_mild.txt")
    _accounting(d, 24)
    assert _threads(d) == [
        ("0x7f6ca4c69b80", "current", True, ["all_reduce", "wrapper", "op_mismatch", "main"]),
        ("0x7fae3fa47b80", "current", True, ["all_reduce", "wrapper", "op_mismatch", "main", "<module>"]),
        ("0x7fc78002db80", "current", False, ["all_reduce", "wrapper", "op_mismatch", "main", "<module>"]),
        ("0x7fc13f3efb80", "current", False, ["broadcast", "wrapper", "op_mismatch", "main", "<module>"]),
    ]
    assert d.unmatched == [5]
    assert d.threads[1].line == 7 and d.threads[1].frames[0].at == 8


def test_processes_with_two_threads() -> None:
    """A worker thread and the main thread per process: the two processes written at once give their four
    ids only; the two written alone keep both threads whole, each pair one process."""
    d = _parse("overlap_worker_heavy.txt")
    _accounting(d, 60)
    assert _threads(d) == [
        ("0x7f2dd28266c0", None, True, []),
        ("0x7ffb77fff6c0", None, True, []),
        ("0x7f2df37d8b80", None, True, []),
        ("0x7ffb9d2acb80", None, True, []),
        ("0x7fba189266c0", None, False, ["all_reduce", *WORKER]),
        ("0x7fba3983ab80", "current", False, MAIN_THREAD),
        ("0x7f2118e266c0", None, False, ["broadcast", *WORKER]),
        ("0x7f2139bddb80", "current", False, MAIN_THREAD),
    ]
    assert [[t.thread_id for t in p.threads] for p in d.processes][-2:] == [
        ["0x7fba189266c0", "0x7fba3983ab80"], ["0x7f2118e266c0", "0x7f2139bddb80"]]
    assert "of 8 thread(s): 4 kept whole, 0 with only their certain frames, 4 with their id only" in d.notes[0]
    # the frame before the clean processes is one of the interleaved ranks' (which one is not certain)
    assert 29 in d.unmatched


def test_a_name_seen_only_glued_leaves_the_rest_uncertain() -> None:
    """'broadcastwait': one rank's 'broadcast' (seen nowhere whole) and another's 'wait', or one name?  Not
    certain, so from there on no writer is known to have finished its line: the threads after it keep their
    ids only, even the last one written alone."""
    d = _parse("overlap_worker_glued_names.txt")
    _accounting(d, 60)
    assert _threads(d)[:3] == [
        ("0x7f412bfff6c0", None, False, ["all_reduce", *WORKER]),
        ("0x7f41515f1b80", "current", False, MAIN_THREAD),
        ("0x7f6d037fe6c0", None, True, ["all_reduce", *WORKER[:-1]]),   # its last frame went into a broken line
    ]
    assert all(not t.frames for t in d.threads[3:])
    assert "0x7f1a237bcb80" in {t.thread_id for t in d.threads}          # its header is intact: its id is kept
    assert d.notes[0].startswith("interleaved faulthandler output (several processes writing at once) of 8 thread")


@pytest.mark.parametrize("name, whole", [("two_groups.txt", 2), ("busy_rank.txt", 2)])
def test_the_last_two_ranks_at_once(name: str, whole: int) -> None:
    d = _parse(name)
    _accounting(d, len(_lines(name)))
    assert [t.garbled for t in d.threads][:whole] == [False] * whole
    assert all(t.garbled and not t.frames for t in d.threads[whole:])
    assert f"of 4 thread(s): {whole} kept whole" in d.notes[0]


@pytest.mark.parametrize("name", CLEAN)
def test_dumps_one_after_another_read_as_any_dump(name: str) -> None:
    d = _parse(name)
    assert not d.unmatched and not d.notes and not any(t.garbled for t in d.threads)
    assert len(d.threads) == {"clean_op_mismatch.txt": 4, "clean_overlap_worker.txt": 8}[name]


def test_ingested(tmp_path: Path) -> None:
    """The file as `report` reads it: kind, line accounting, rows, and the count of threads as a note."""
    root = tmp_path / "incident"
    (root / "logs").mkdir(parents=True)
    shutil.copyfile(SAMPLES / "op_mismatch_heavy.txt", root / "logs" / "stderr-ranks.txt")
    with Store(":memory:") as st:
        ingest_paths(st, [root], mode="engine")
        src = st.query("SELECT * FROM sources")[0]
        assert (src["kind"], src["lines"], src["parsed_lines"], src["unparsed_lines"]) == (
            "faulthandler_dump", 24, 14, 10)
        assert "of 4 thread(s): 2 kept whole" in src["note"]
        rows = st.query("SELECT thread_id, garbled, rank FROM stacks ORDER BY line, thread_id")
        assert [(r["thread_id"], r["garbled"]) for r in rows] == [
            ("0x7f0978451b80", True), ("0x7f0a9c9c3b80", True), ("0x7fbd2ca14b80", False), ("0x7f85f22a9b80", False)]
        assert {r["rank"] for r in rows} <= {None, ""}                    # faulthandler names no rank
        assert st.scalar("SELECT count(*) FROM frames") == 10
        assert st.scalar("SELECT count(*) FROM unparsed") == 10


# -- the property: interleavings of real clean dumps at faulthandler's write() boundaries ----------------

def _processes(name: str) -> list[list[str]]:
    """A clean file's dumps, one per process (a process's threads are separated by a blank line)."""
    out: list[list[str]] = []
    prev = ""
    for line in _lines(name):
        if faulthandler.HEADER_RE.match(line) and (not out or prev.strip()):
            out.append([])
        out[-1].append(line)
        prev = line
    return out


def _writes(lines: list[str]) -> list[str]:
    """The write() calls faulthandler makes for these lines (CPython Python/traceback.c)."""
    out: list[str] = []
    for line in lines:
        if m := faulthandler.HEADER_RE.match(line):             # write_thread_id
            out += [f"{m.group('cur')} 0x", m.group("tid")[2:], " (most recent call first):\n"]
        elif m := faulthandler.FRAME_RE.match(line):           # dump_frame
            out += ["  File ", '"', m.group("file"), '"', ", line ", m.group("line"), " in ", m.group("name"), "\n"]
        else:                                                   # the blank line between threads
            assert not line.strip()
            out.append("\n")
    return out


def _interleave(rng: random.Random, writers: list[list[str]]) -> list[tuple[str, int]]:
    """One schedule of the writers' write() calls: (piece, writer)."""
    pending = [_writes(w) for w in writers]
    mode = rng.choice(["any", "bursts", "lockstep", "alone first"])
    out: list[tuple[str, int]] = []
    if mode == "alone first":
        k = rng.randint(0, len(pending[0]))
        out += [(p, 0) for p in pending[0][:k]]
        pending[0] = pending[0][k:]
    turn = 0
    while any(pending):
        live = [w for w, p in enumerate(pending) if p]
        if mode == "lockstep":
            turn = (turn + 1) % len(pending)
            w, burst = turn, 1
        else:
            w, burst = rng.choice(live), 1 if mode in ("any", "alone first") else rng.randint(1, 12)
        for _ in range(burst):
            if pending[w]:
                out.append((pending[w].pop(0), w))
    if rng.random() < 0.25:                                     # a cut at any write
        out = out[:rng.randint(0, len(out))]
    return out


def _check(writers: list[list[str]], schedule: list[tuple[str, int]]) -> tuple[bool, int]:
    """Nothing crashes, every line is accounted for, every thread id is a real one, and every frame kept is
    one a writer wrote, whole, on a line of no other writer (not one glued from several writers' pieces).
    Returns whether the text was read as interleaved output, and how many frames were kept after its first
    line of several writers."""
    truth = {(m.group("file"), int(m.group("line")), m.group("name")) for w in writers for line in w
             if (m := faulthandler.FRAME_RE.match(line))}
    ids = {faulthandler._norm_tid(m.group("tid")) for w in writers for line in w
           if (m := faulthandler.HEADER_RE.match(line))}
    text = "".join(p for p, _ in schedule)
    owners: list[set[int]] = [set()]
    for piece, w in schedule:
        for c in piece:
            if c == "\n":
                owners.append(set())
            else:
                owners[-1].add(w)
    lines = text.removesuffix("\n").split("\n") if text else []
    d = faulthandler.parse_faulthandler(lines, 1)
    _accounting(d, len(lines))
    first_mixed = next((i for i, o in enumerate(owners) if len(o) > 1), len(lines))
    kept_after = 0
    for t in d.threads:
        assert t.thread_id in ids, t.thread_id
        for f in t.frames:
            assert (f.file, f.line, f.function) in truth, (f, lines[f.at - 1])
            assert len(owners[f.at - 1]) == 1, ("glued from several writers", lines[f.at - 1])
            kept_after += f.at - 1 > first_mixed
    return bool(d.notes), kept_after


def test_interleaved_real_dumps_never_give_a_frame_that_was_not_written() -> None:
    """Seeded random interleavings (and cuts) of two or three real processes' dumps at write() boundaries."""
    rng = random.Random(20261204)
    pools = [_processes(name) for name in CLEAN]
    interleaved = kept_after = 0
    for _ in range(CASES):
        procs = rng.choice(pools)
        writers = rng.sample(procs, rng.choice([2, 2, 3]))
        read, kept = _check(writers, _interleave(rng, writers))
        interleaved += read
        kept_after += kept
    # not vacuous: most cases are read as interleaved output, and frames after the first mixed line are kept
    assert interleaved > CASES // 2 and kept_after > CASES // 8, (interleaved, kept_after)


# Schedules (which writer's next write() comes next) that random search found to break a wrong reading:
# a name whose first part is a known name ('_bootstrap' + '_inner') read as two; a header literal inside a
# frame's quotes ('  File "Current thread 0x<id>/opt/..."') read as a file name.
SCHEDULES = [
    ('clean_op_mismatch.txt', [3, 2], "aaaaabbaaaaaaaaaaaaaa"),
    ('clean_overlap_worker.txt', [1, 0, 2],
     "aaabbbbbbbbbbbbbbaaacccaacccaaabaaaaaaaaaaaaacccccccccccaacaaaaacccbbbbbbbbbbbbbbbccccbbaaaaaaaa"
     "cccaaaaaacaaaaaaaaaaaaaaaaaabbbbbbbbbbbbbbccccccccccccccccccbbbbcacccccacbaaabbbbbbbbbbbbbbccccb"
     "bbbbbccbbbacccaaaaaaaaaaaaaaaaaaaabbbbcccccccccbbbbbbbcaaaaacaaacccccccccccccccccabbabcccccbbbaa"
     "aaaacccccccccccccccccccbbbbbbbaaabaaaaaaabbbbbbbbbbbbbbbb"),
]


@pytest.mark.parametrize("name, procs, order", SCHEDULES)
def test_interleavings_that_broke_wrong_readings(name: str, procs: list[int], order: str) -> None:
    writers = [_processes(name)[i] for i in procs]
    pending = [_writes(w) for w in writers]
    schedule = [(pending["abc".index(c)].pop(0), "abc".index(c)) for c in order]
    _check(writers, schedule)


def test_a_name_left_for_later_is_not_glued_onto_another_frame() -> None:
    """Writer 0 ends its line with ' in ' (another writer's newline), writer 1 writes a whole frame of its own
    and writer 0's name lands in it ('in wrappermain'): that frame is not one anybody wrote, and is not kept
    though its line reads as a frame."""
    a = _writes(['Current thread 0x00007f0000000a00 (most recent call first):',
                 f'  File "{JOB}", line 257 in main'])
    b = _writes(['Current thread 0x00007f0000000b00 (most recent call first):',
                 f'  File "{C10D}", line 3252 in all_reduce',
                 '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper'])
    text = "".join([*a[:3], *b[:3], *a[3:10], *b[3:12], *b[12:20], a[10], b[20], a[11]])
    lines = text.removesuffix("\n").split("\n")
    assert lines[3].endswith(" in wrappermain") and faulthandler.FRAME_RE.match(lines[3])
    d = faulthandler.parse_faulthandler(lines, 1)
    _accounting(d, len(lines))
    assert "wrappermain" not in {f.function for t in d.threads for f in t.frames}
    assert d.threads[0].frames == [] and d.threads[1].garbled
