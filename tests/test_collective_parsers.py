"""Collective-level evidence: Flight Recorder dumps, NCCL RAS reports, the desync-debug report, and the
cross-rank matcher over their rows.

Test data: ``tests/data/collectives/fr`` is written by ``generate.py`` beside it (see its docstring for
what each set holds); ``ras/`` holds hand-written ``ncclras`` outputs in the 2.24, 2.26+, healthy and
dead-process shapes.  Hostile pickles are built here, in a temporary folder.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import pickletools
import random
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from conftest import SHARED

from hangforensics.analysis.collectives.collective_match import (
    Relation,
    VerdictKind,
    compare_process_groups,
)
from hangforensics.parsers.collectives import desync_report, flight_recorder, nccl_ras, torch_nccl
from hangforensics.parsers.collectives.collective_rows import (
    CollectiveRow,
    format_ranks,
    op_key,
    parse_rank_list,
    rank_position,
    ts_from_ns,
)
from hangforensics.parsers.collectives.safe_pickle import (
    DamagedPickle,
    PickleTooLarge,
    RefusedPickleGlobal,
    safe_loads,
    salvage_loads,
)
from hangforensics.parsers.stacks import stackrows

DATA = Path(__file__).resolve().parent / "data" / "collectives"
FR = DATA / "fr"
RAS = DATA / "ras"
T0_NS = 1773480419 * 1_000_000_000  # 2026-03-14 09:26:59 UTC, the generator's clock


def _lines(p: Path) -> list[str]:
    return p.read_text(encoding="utf-8").removesuffix("\n").split("\n")


def _fr_rows(folder: str) -> list[CollectiveRow]:
    rows: list[CollectiveRow] = []
    for p in sorted((FR / folder).iterdir()):
        rows.extend(flight_recorder.collective_rows(flight_recorder.read_flight_recorder(p)))
    return rows


# -- small helpers -----------------------------------------------------------------------------------


def test_rank_helpers() -> None:
    assert format_ranks([7, 0, 1, 2, 4, 5, 6]) == "0-2,4-7"
    assert format_ranks([3]) == "3"
    assert parse_rank_list("[0, 1, 2, 3]") == (0, 1, 2, 3)
    assert parse_rank_list("0-2, 8") == (0, 1, 2, 8)
    assert parse_rank_list("[]") is None
    assert parse_rank_list("__import__('os').system('x')") is None  # read as text, never evaluated
    assert op_key("nccl:all_reduce") == op_key("ALLREDUCE") == op_key("AllReduce") == "allreduce"
    assert op_key("_all_gather_base") == op_key("all_gather_into_tensor") == "allgather"
    assert op_key("send 1->2") == "send"
    assert ts_from_ns(T0_NS) == datetime(2026, 3, 14, 9, 26, 59)
    assert ts_from_ns(0) is None and ts_from_ns(None) is None


# -- Flight Recorder: sniffing and names -------------------------------------------------------------


def test_looks_like_flight_recorder() -> None:
    for p in (FR / "sglang_tp8_behind").iterdir():
        assert flight_recorder.looks_like_flight_recorder(p.read_bytes()[:4096])
    assert flight_recorder.looks_like_flight_recorder(
        (FR / "vllm_tp2pp2_json/nccl_trace_rank_0.json").read_bytes()[:4096]
    )
    assert not flight_recorder.looks_like_flight_recorder(pickle.dumps([1, 2, 3], protocol=2))
    assert not flight_recorder.looks_like_flight_recorder(pickle.dumps({"version": "1.0"}, protocol=4))
    assert not flight_recorder.looks_like_flight_recorder(
        b'[{"thread_id": 1, "frames": []}]'
    )  # py-spy --json
    assert not flight_recorder.looks_like_flight_recorder(b'Thread 0x7f (idle): "MainThread"\n')


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("nccl_trace_rank_5", 5),
        ("/tmp/nccl_trace_rank_12", 12),
        ("fr_dump7", 7),
        ("x_rank_5.json", 5),
        ("trainjob-node3_nccl_trace_rank_2", 2),
        ("nccl_trace_rank_3.pkl", 3),
        ("dir/rank9/nccl_trace", None),
        ("nccl_trace_rank_", None),
        ("dump_20260314092659", None),
    ],
)
def test_rank_from_filename(name: str, rank: int | None) -> None:
    assert flight_recorder.rank_from_filename(name) == rank


# -- Flight Recorder: parsing ------------------------------------------------------------------------


def test_parse_pickle_210_fields() -> None:
    d = flight_recorder.read_flight_recorder(FR / "sglang_tp8_behind" / "nccl_trace_rank_0")
    assert (d.rank, d.form, d.version, d.nccl_version, d.comm_lib_version) == (
        0,
        "pickle",
        "2.10",
        "2.27.3",
        "2.27.3",
    )
    assert (d.records, d.skipped, d.complete, d.notes) == (20, 0, True, ())
    assert d.groups["1"] == flight_recorder.FrGroup("1", "tp:0", tuple(range(8)))
    assert d.groups["0"].desc == "default_pg"
    # pg_status is keyed by the process-local PG ID; the entries tie ID 2 to group "1"
    assert d.status["2"] == flight_recorder.FrStatus("2", "1", 4019, 4019, 4018)
    assert d.status["0"] == flight_recorder.FrStatus("0", "0", 2, 2, 2)
    first, last = d.entries[0], d.entries[-1]
    # 22 entries were recorded, the ring buffer of 20 kept the newest: the first barrier is gone
    assert (first.record_id, first.pg_name, first.collective_seq_id, first.op) == (1, "0", 2, "barrier")
    assert last.index == 19 and last.record_id == 20
    assert (last.pg_id, last.pg_name, last.pg_desc) == (2, "1", "tp:0")  # PG ID 2, GUID 1
    assert (last.collective_seq_id, last.p2p_seq_id, last.op_id, last.op, last.is_p2p) == (
        4019,
        0,
        4019,
        "all_reduce",
        False,
    )
    assert (last.state, last.retired, last.timeout_ms) == ("started", False, 600000)
    assert (
        last.time_created_ns is not None
        and T0_NS + 18 * 17_300_000 <= last.time_created_ns <= T0_NS + 18 * 17_300_000 + 400_000
    )
    assert (
        last.time_discovered_started_ns is not None and last.time_discovered_started_ns > last.time_created_ns
    )
    assert last.time_discovered_completed_ns is None
    assert (
        last.input_sizes == last.output_sizes
        and len(last.input_sizes) == 1
        and last.input_sizes[0][1] == 8192
    )
    assert (last.input_dtypes, last.output_dtypes) == (("Float",), ("Float",))
    assert (last.thread_id, last.thread_name) == ("140230000000000", "sglang::schedul")
    assert [f.name for f in last.frames][:5] == [
        "all_reduce",
        "wrapper",
        "_all_reduce_out_place",
        "all_reduce",
        "tensor_model_parallel_all_reduce",
    ]
    assert (
        last.frames[0].filename.endswith("torch/distributed/distributed_c10d.py")
        and last.frames[0].line == 2806
    )
    assert last.frames[-1].name == "run_scheduler_process"


def test_parse_json_27_form() -> None:
    d = flight_recorder.read_flight_recorder(FR / "vllm_tp2pp2_json" / "nccl_trace_rank_2.json")
    assert (d.rank, d.form, d.version, d.nccl_version, d.comm_lib_version, d.notes) == (
        2,
        "json",
        "2.7",
        "2.21.5",
        None,
        (),
    )
    assert d.groups["2"] == flight_recorder.FrGroup("2", None, (2, 3))  # desc 'undefined' = none
    assert d.status["1"] == flight_recorder.FrStatus("1", "2", 77, 77, 76)  # written as text in JSON
    assert d.status["4"].pg == "3"  # rank 2's PP group: PG ID 4, name "3"
    recv = d.entries[0]
    assert (recv.op, recv.is_p2p, recv.p2p_seq_id, recv.collective_seq_id, recv.seq) == (
        "recv 2<-0",
        True,
        1,
        0,
        1,
    )
    last = d.entries[-1]
    assert (last.collective_seq_id, last.op, last.state, last.frames) == (77, "all_reduce", "started", ())
    assert last.time_discovered_completed_ns is None  # 0 in the file: unknown
    rows = flight_recorder.collective_rows(d)
    assert [(r.pg, r.seq_kind, r.seq, r.op, r.state) for r in rows] == [
        ("2", "collective", 74, "all_reduce", "completed"),
        ("2", "collective", 75, "all_reduce", "completed"),
        ("2", "collective", 76, "all_reduce", "completed"),
        ("2", "collective", 77, "all_reduce", "started"),
        ("3", "p2p", 1, "recv 2<-0", "completed"),
        ("3", "p2p", 2, "recv 2<-0", "completed"),
        ("3", "p2p", 3, "recv 2<-0", "completed"),
    ]
    assert rows[3].pg_ranks == (2, 3) and rows[4].pg_ranks == (0, 2)


def test_parse_v24_without_newer_keys() -> None:
    d = flight_recorder.read_flight_recorder(FR / "train_v24_opmismatch" / "trainjob-node3_nccl_trace_rank_2")
    assert (d.rank, d.version, d.nccl_version, d.notes) == (2, "2.4", None, ())
    last = d.entries[-1]
    assert (last.collective_seq_id, last.op, last.state, last.thread_id, last.thread_name) == (
        310,
        "broadcast",
        "started",
        None,
        None,
    )
    assert last.frames[-1] == flight_recorder.FrFrame("<module>", "/workspace/sft/train.py", 402)


def test_rows_of_one_dump() -> None:
    d = flight_recorder.read_flight_recorder(FR / "sglang_tp8_behind" / "nccl_trace_rank_5")
    rows = flight_recorder.collective_rows(d)
    assert [(r.pg, r.seq, r.op, r.state) for r in rows[:2]] == [
        ("0", 1, "broadcast", "completed"),
        ("0", 2, "barrier", "completed"),
    ]
    last = rows[-1]
    assert (last.source, last.rank, last.pg, last.pg_desc, last.seq, last.op, last.state, last.records) == (
        "flight_recorder",
        5,
        "1",
        "tp:0",
        4018,
        "broadcast",
        "completed",
        1,
    )
    assert (last.seq_kind, last.input_sizes, last.line, last.pg_ranks) == (
        "collective",
        ((1,),),
        20,
        tuple(range(8)),
    )
    assert last.ts is not None and last.ts.date().isoformat() == "2026-03-14"
    assert last.view_row("hel1")["engine"] == "hel1" and last.view_row("hel1")["seq"] == 4018
    assert {r.seq for r in rows if r.pg == "1"} == set(range(4001, 4019))


def test_pg_status_of_a_truncated_dump_keeps_the_rank_in_step() -> None:
    # the newest entries are lost, but pg_status (written before them) says how far rank 0 got
    data = (FR / "sglang_tp8_behind" / "nccl_trace_rank_0").read_bytes()
    d = flight_recorder.parse_flight_recorder(data[: len(data) * 2 // 3], "nccl_trace_rank_0")
    assert max(e.collective_seq_id or 0 for e in d.entries) < 4018
    from_status = [r for r in flight_recorder.collective_rows(d) if r.records == 0]
    assert [(r.pg, r.seq, r.op, r.state, r.ts) for r in from_status] == [
        ("1", 4018, "", "completed", None),
        ("1", 4019, "", "started", None),
    ]
    rows = [r for r in _fr_rows("sglang_tp8_behind") if r.rank != 0] + flight_recorder.collective_rows(d)
    tp = [v for v in compare_process_groups(rows) if v.pg == "1"]
    assert [(v.kind, v.odd_ranks) for v in tp] == [(VerdictKind.DESYNC, (5,))]


def test_pg_status_tied_to_groups_only_when_the_dump_allows() -> None:
    # rank 6: no default_pg entry left and PG IDs differ from names (tp:0 is ID 2, name "1"):
    # its pg_status "0" cannot be placed, and is not guessed
    d6 = flight_recorder.read_flight_recorder(FR / "sglang_tp8_behind" / "nccl_trace_rank_6")
    assert {e.pg_name for e in d6.entries} == {"1"} and d6.status["0"].pg is None
    assert any("pg_status of PG ID 0 names no group" in n for n in d6.notes)
    assert [r for r in flight_recorder.collective_rows(d6) if r.pg == "0"] == []
    # healthy dumps: IDs equal names, so default_pg's status stands in for its pushed-out entries
    dh = flight_recorder.read_flight_recorder(FR / "healthy_v210" / "nccl_trace_rank_1.pkl")
    rows = [r for r in flight_recorder.collective_rows(dh) if r.pg == "0"]
    assert [(r.seq, r.state, r.records, r.pg_desc) for r in rows] == [(1, "completed", 0, "default_pg")]


def test_coalesced_entries_merge_into_one_row() -> None:
    def e(i: int, op: str, state: str) -> dict:
        return {
            "record_id": i,
            "pg_id": 0,
            "process_group": ("0", "default_pg"),
            "collective_seq_id": 9,
            "p2p_seq_id": 0,
            "op_id": 9,
            "profiling_name": f"nccl:{op}",
            "state": state,
            "time_created_ns": T0_NS + i,
            "is_p2p": False,
        }

    dump = {
        "version": "2.10",
        "entries": [
            e(0, "all_reduce", "completed"),
            e(1, "all_reduce", "started"),
            e(2, "coalesced", "started"),
        ],
    }
    rows = flight_recorder.collective_rows(flight_recorder.parse_flight_recorder(pickle.dumps(dump), "r_3"))
    assert [(r.seq, r.op, r.state, r.records, r.line) for r in rows] == [
        (9, "all_reduce", "started", 2, 1),
        (9, "coalesced", "started", 1, 3),
    ]


# -- Flight Recorder: hostile, broken and odd files ---------------------------------------------------


class _Reduce:
    """Pickles as a call of ``fn(*args)``: what a hostile dump would carry."""

    def __init__(self, fn: object, args: tuple) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple:
        return self.fn, self.args


def _hostile(payload: object, protocol: int = 2) -> bytes:
    return pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [payload]}, protocol=protocol)


def _globals_in(data: bytes) -> list[str]:
    return [
        op.name for op, _, _ in pickletools.genops(data) if op.name in ("GLOBAL", "STACK_GLOBAL", "REDUCE")
    ]


def test_hostile_pickle_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    data = _hostile(_Reduce(os.system, (f"touch {marker}",)))
    assert "GLOBAL" in _globals_in(data) and "REDUCE" in _globals_in(data)
    path = tmp_path / "nccl_trace_rank_3"
    path.write_bytes(data)
    with pytest.raises(RefusedPickleGlobal) as err:
        safe_loads(data, label="flight recorder dump rank3")
    msg = str(err.value)
    assert msg == f"flight recorder dump rank3: refused pickle global {os.system.__module__}.system"
    assert "\n" not in msg
    with pytest.raises(RefusedPickleGlobal):
        salvage_loads(data)
    d = flight_recorder.read_flight_recorder(path)
    assert d.entries == () and d.notes == (msg,)
    assert not marker.exists()
    # Positive control: the same bytes under plain pickle.load do run the command.
    subprocess.run(
        [sys.executable, "-c", "import pickle, sys; pickle.loads(open(sys.argv[1], 'rb').read())", str(path)],
        check=False,
        capture_output=True,
        timeout=60,
    )
    assert marker.exists()


def test_hostile_pickle_handwritten_os_system(tmp_path: Path) -> None:
    marker = tmp_path / "pwned0"
    data = (
        b"(dp0\nVversion\np1\nV2.10\np2\nsVentries\np3\n(lp4\ncos\nsystem\np5\n(V"
        + f"touch {marker}".encode()
        + b"\ntRp6\nas."
    )
    d = flight_recorder.parse_flight_recorder(data, "nccl_trace_rank_3")
    assert d.notes == ("flight recorder dump rank3: refused pickle global os.system",)
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload",
    [
        _Reduce(subprocess.call, (["touch", "/nonexistent/never"],)),
        _Reduce(eval, ("1+1",)),
        _Reduce(__import__, ("os",)),
    ],
    ids=["subprocess.call", "builtins.eval", "builtins.__import__"],
)
@pytest.mark.parametrize("protocol", [2, 4])
def test_hostile_globals_refused(payload: object, protocol: int) -> None:
    data = _hostile(payload, protocol)
    d = flight_recorder.parse_flight_recorder(data, "nccl_trace_rank_1")
    assert len(d.notes) == 1 and "refused pickle global" in d.notes[0] and "\n" not in d.notes[0]
    assert d.entries == ()


def test_copyreg_reconstructor_refused() -> None:
    # how protocols 0 and 1 rebuild any object: copyreg._reconstructor(cls, base, state)
    data = b"ccopyreg\n_reconstructor\n(cbuiltins\nobject\nc__builtin__\nobject\nNtR."
    with pytest.raises(RefusedPickleGlobal, match="refused pickle global copyreg._reconstructor$"):
        safe_loads(data)
    with pytest.raises(RefusedPickleGlobal, match="copyreg._reconstructor"):
        salvage_loads(data)


def test_size_bound() -> None:
    data = (FR / "sglang_tp8_behind" / "nccl_trace_rank_0").read_bytes()
    with pytest.raises(PickleTooLarge):
        safe_loads(data, max_bytes=1000)
    d = flight_recorder.parse_flight_recorder(data, "nccl_trace_rank_0", max_bytes=1000)
    assert d.entries == () and "over the 1000-byte bound" in d.notes[0]


@pytest.mark.parametrize(
    "path", ["sglang_tp8_behind/nccl_trace_rank_1", "vllm_tp2pp2_json/nccl_trace_rank_0.json"]
)
def test_truncated_dump_keeps_the_complete_entries(path: str) -> None:
    data = (FR / path).read_bytes()
    full = flight_recorder.parse_flight_recorder(data, Path(path).name)
    assert full.complete and len(full.entries) > 5
    seen_partial = False
    for cut in range(1, len(data) - 1, 97):
        d = flight_recorder.parse_flight_recorder(data[:cut], Path(path).name)
        assert d.entries == full.entries[: len(d.entries)]  # a prefix, each entry intact
        assert not d.complete and any("truncated" in n for n in d.notes)
        seen_partial = seen_partial or 0 < len(d.entries) < len(full.entries)
    assert seen_partial
    d = flight_recorder.parse_flight_recorder(data[: len(data) * 2 // 3], Path(path).name)
    assert 0 < len(d.entries) < len(full.entries) and d.groups == full.groups


def test_corrupt_bytes_never_raise() -> None:
    data = bytearray((FR / "sglang_tp8_behind" / "nccl_trace_rank_2").read_bytes())
    rng = random.Random(7)
    for _ in range(60):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            bad[rng.randrange(2, len(bad))] = rng.randrange(256)
        d = flight_recorder.parse_flight_recorder(bytes(bad), "nccl_trace_rank_2")
        assert isinstance(d.entries, tuple)
    for junk in (b"", b"\x80", b"\x80\x02", b"{", b'{"entries": 5}', b"not a dump", b"\x80\x02]q\x00."):
        d = flight_recorder.parse_flight_recorder(junk, "nccl_trace_rank_0")
        assert d.entries == () and d.notes


def test_wrong_types_are_dropped_with_a_note() -> None:
    dump = {
        "version": 2.1,
        "pg_config": {"1": {"name": "1", "desc": "tp:0", "ranks": 42}},
        "pg_status": {"1": {"last_enqueued_collective": "many", "last_completed_collective": "11"}},
        "entries": [
            {
                "collective_seq_id": "abc",
                "profiling_name": "nccl:all_reduce",
                "process_group": ("1", "tp:0"),
                "state": 5,
                "input_sizes": "big",
                "frames": "nope",
                "time_created_ns": "yesterday",
                "is_p2p": "maybe",
            },
            "not a dict",
            {
                "collective_seq_id": "12",
                "profiling_name": "nccl:all_reduce",
                "process_group": ["1", "tp:0"],
                "state": "started",
                "frames": [{"name": "f", "filename": "x.py", "line": "7"}, 3],
            },
            {"collective_seq_id": True, "profiling_name": "nccl:broadcast", "process_group": ("1", "tp:0")},
        ],
    }
    d = flight_recorder.parse_flight_recorder(pickle.dumps(dump, protocol=2), "nccl_trace_rank_4")
    assert d.version == "2.1" and d.groups["1"].ranks is None
    assert d.status["1"] == flight_recorder.FrStatus("1", "1", None, None, 11)
    assert (d.records, d.skipped, len(d.entries)) == (4, 1, 3)
    e0, e2, e3 = d.entries
    assert (e0.collective_seq_id, e0.state, e0.input_sizes, e0.frames, e0.time_created_ns, e0.is_p2p) == (
        None,
        None,
        (),
        (),
        None,
        False,
    )
    assert (e2.collective_seq_id, e2.state, e2.frames) == (
        12,
        "started",
        (flight_recorder.FrFrame("f", "x.py", 7),),
    )
    assert e3.collective_seq_id is None
    assert any(
        n.startswith("flight recorder dump rank4: 11 values of the wrong type ignored") for n in d.notes
    )
    assert any("2 entries name no process group or sequence number" in n for n in d.notes)
    rows = flight_recorder.collective_rows(d)
    assert [(r.seq, r.op, r.state, r.records) for r in rows] == [(12, "all_reduce", "started", 1)]


# -- Flight Recorder: stacks -------------------------------------------------------------------------


def test_stack_dump_one_thread_per_group_at_the_ranks_position() -> None:
    d5 = flight_recorder.read_flight_recorder(FR / "sglang_tp8_behind" / "nccl_trace_rank_5")
    dump = flight_recorder.stack_dump(d5)
    assert dump.format == "flight_recorder" and len(dump.processes) == 1
    proc = dump.processes[0]
    assert (proc.rank, proc.pid) == ("rank5", None)
    assert [t.name for t in proc.threads] == [
        "sglang::schedul: broadcast #4018 in pg 1(tp:0), completed",
        "sglang::schedul: barrier #2 in pg 0(default_pg), completed",
    ]
    top = proc.threads[0]
    assert (top.thread_id, top.line, top.state) == ("fr20", 20, "completed")
    assert [f.function for f in top.frames][:4] == [
        "broadcast",
        "wrapper",
        "broadcast_pyobj",
        "recv_requests",
    ]
    assert not any(f.native for f in top.frames)
    d0 = flight_recorder.read_flight_recorder(FR / "sglang_tp8_behind" / "nccl_trace_rank_0")
    first = flight_recorder.stack_dump(d0).processes[0].threads[0]
    assert first.name == "sglang::schedul: all_reduce #4019 in pg 1(tp:0), started"  # the waiting one first
    assert len(flight_recorder.stack_dump(d0, all_entries=True).threads) == 20
    stacks: list[dict] = []
    frames: list[dict] = []
    stackrows.dump_rows(
        dump, "fr-5", "hel1", "hel1/nccl_trace_rank_5", None, "", "standalone", stacks, frames
    )
    assert [(s["rank"], s["thread_id"], s["format"]) for s in stacks] == [
        ("rank5", "fr20", "flight_recorder"),
        ("rank5", "fr2", "flight_recorder"),
    ]
    assert (frames[0]["depth"], frames[0]["function"]) == (0, "broadcast")


# -- the matcher on Flight Recorder dumps --------------------------------------------------------------


def test_fr_one_rank_behind_named_healthy_traps_not_blamed() -> None:
    verdicts = compare_process_groups(_fr_rows("sglang_tp8_behind"))
    by_pg = {v.pg: v for v in verdicts}
    assert [(v.pg, v.kind) for v in verdicts] == [("0", VerdictKind.AGREE), ("1", VerdictKind.DESYNC)]
    tp = by_pg["1"]
    assert tp.odd_ranks == (5,) and tp.odd[0].relation == Relation.BEHIND
    assert (tp.reference_seq, tp.reference_op, tp.reference_ranks) == (
        4019,
        "all_reduce",
        (0, 1, 2, 3, 4, 6, 7),
    )
    assert tp.detail == (
        "in pg 1(tp:0) (ranks 0-7), ranks 0-4,6-7 are at all_reduce #4019 (started); "
        "rank 5 finished #4018 and never joined #4019: one collective behind"
    )
    assert tp.ts is not None and tp.ts.isoformat().startswith("2026-03-14T09:26:59")
    assert "nothing is stuck" in by_pg["0"].detail


def test_fr_all_started_agree_p2p_groups_not_compared() -> None:
    verdicts = compare_process_groups(_fr_rows("vllm_tp2pp2_json"))
    assert [(v.pg, v.kind, v.reference_seq, v.odd_ranks) for v in verdicts] == [
        ("1", VerdictKind.AGREE, 77, ()),
        ("2", VerdictKind.AGREE, 77, ()),
    ]
    assert verdicts[0].detail.startswith(
        "in pg 1 (ranks 0-1), both ranks are at all_reduce #77 (started): they agree"
    )


def test_fr_other_op_and_missing_dump() -> None:
    verdicts = compare_process_groups(_fr_rows("train_v24_opmismatch"))
    # the reporters disagree: the missing dump is said in the desync's detail, not a verdict of its own
    assert [(v.kind, v.odd_ranks) for v in verdicts] == [(VerdictKind.DESYNC, (2,))]
    (desync,) = verdicts
    assert desync.odd[0].relation == Relation.OTHER_OP
    assert desync.detail.endswith(
        "ranks 0-1 are at all_reduce #310 (started); rank 2 is at broadcast #310 instead; "
        "rank 3 left no record here (no Flight Recorder dump from it)"
    )
    (dumped,) = compare_process_groups(_fr_rows("train_v24_opmismatch"), {"flight_recorder": [3]})
    assert "left no record" not in dumped.detail  # rank 3 dumped, just nothing of this group


def test_fr_healthy_all_completed() -> None:
    verdicts = compare_process_groups(_fr_rows("healthy_v210"))
    assert [(v.pg, v.kind, v.odd) for v in verdicts] == [
        ("0", VerdictKind.AGREE, ()),
        ("1", VerdictKind.AGREE, ()),
    ]
    assert verdicts[1].detail == (
        "in pg 1(tp:0) (ranks 0-3), every rank finished its last collective (#512) and "
        "none waits in one: nothing is stuck in this group"
    )


# -- the matcher on rows -----------------------------------------------------------------------------


def row(
    rank: int | None,
    seq: int | None,
    state: str | None,
    op: str = "all_reduce",
    pg: str = "1",
    desc: str | None = "tp:0",
    members: tuple[int, ...] | None = (0, 1, 2, 3),
    source: str = "flight_recorder",
    sizes: tuple[tuple[int, ...], ...] = ((8, 4096),),
    kind: str = "collective",
    reason: str | None = None,
    ts: datetime | None = None,
) -> CollectiveRow:
    return CollectiveRow(
        source,
        rank,
        pg,
        seq,
        op,
        state,
        ts,
        pg_desc=desc,
        pg_ranks=members,
        seq_kind=kind,
        input_sizes=sizes,
        output_sizes=sizes,
        reason=reason,
    )


def test_completed_n_versus_started_n_plus_1_is_behind() -> None:
    rows = (
        [row(r, 11, "started") for r in (0, 1, 3)]
        + [row(r, 10, "completed") for r in range(4)]
        + [row(2, 9, "completed")]
    )
    (v,) = compare_process_groups(rows)
    assert (v.kind, v.odd_ranks, v.odd[0].relation, v.odd[0].seq, v.reference_seq) == (
        VerdictKind.DESYNC,
        (2,),
        Relation.BEHIND,
        10,
        11,
    )
    assert v.detail == (
        "in pg 1(tp:0) (ranks 0-3), ranks 0-1,3 are at all_reduce #11 (started); "
        "rank 2 finished #10 and never joined #11: one collective behind"
    )


def test_two_behind_by_several() -> None:
    rows = [row(r, 20, "started") for r in (0, 1, 2, 4, 5)] + [row(3, 17, "started"), row(6, 17, "started")]
    (v,) = compare_process_groups(rows)
    assert v.odd_ranks == (3, 6)
    assert v.detail.endswith(
        "ranks 3,6 are still in all_reduce #17 (started) and never joined #20: 3 collectives behind"
    )


def test_all_started_at_the_same_seq_agree() -> None:
    (v,) = compare_process_groups([row(r, 11, "started") for r in range(4)])
    assert (v.kind, v.odd, v.reference_seq, v.reference_op) == (VerdictKind.AGREE, (), 11, "all_reduce")
    assert "all 4 ranks are at all_reduce #11 (started): they agree" in v.detail


def test_watchdog_lag_and_host_ahead_are_not_blamed() -> None:
    rows = [row(r, 11, "started") for r in range(4)]
    rows += [row(1, 10, "started"), row(0, 10, "completed"), row(2, 10, "completed"), row(3, 10, "completed")]
    rows += [row(3, 12, "scheduled")]  # enqueued behind the stuck one
    rows += [row(4, 10, "started"), row(4, 11, "scheduled")]  # its start of #11 not seen yet either
    (v,) = compare_process_groups(rows)
    assert (v.kind, v.odd, v.reference_seq, v.reference_ranks) == (VerdictKind.AGREE, (), 11, (0, 1, 2, 3, 4))


def test_process_groups_are_never_compared_with_each_other() -> None:
    rows = [row(r, 11, "started", pg="1") for r in range(4)]
    rows += [row(r, 90210, "started", pg="5", desc="ep:0") for r in (0, 1, 3)] + [
        row(2, 90209, "completed", pg="5")
    ]
    verdicts = compare_process_groups(rows)
    assert [(v.pg, v.kind, v.odd_ranks, v.reference_seq) for v in verdicts] == [
        ("1", VerdictKind.AGREE, (), 11),
        ("5", VerdictKind.DESYNC, (2,), 90210),
    ]
    assert "pg 5(ep:0)" in verdicts[1].detail


def test_healthy_dumps_taken_at_different_moments_agree() -> None:
    rows = [
        row(0, 20, "completed"),
        row(1, 21, "completed"),
        row(2, 21, "completed"),
        row(3, 21, "completed"),
    ]
    (v,) = compare_process_groups(rows)
    assert (v.kind, v.odd) == (VerdictKind.AGREE, ())
    assert "(#20 to #21)" in v.detail and "nothing is stuck" in v.detail


def test_completed_mismatch_is_still_a_desync() -> None:
    # mismatched collectives of the same size can complete (with garbage): nothing waits, yet ops differ
    rows = [row(r, 30, "completed") for r in (0, 1, 2)] + [row(3, 30, "completed", op="broadcast")]
    (v,) = compare_process_groups(rows)
    assert (v.kind, v.odd_ranks, v.odd[0].relation) == (VerdictKind.DESYNC, (3,), Relation.OTHER_OP)


def test_tie_is_undecided_not_a_desync() -> None:
    rows = [row(0, 11, "started"), row(1, 11, "started"), row(2, 12, "started"), row(3, 12, "started")]
    (v,) = compare_process_groups(rows)
    assert (v.kind, v.odd, v.reference_seq) == (VerdictKind.UNDECIDED, (), None)
    assert v.detail == (
        "in pg 1(tp:0) (ranks 0-3), no majority: ranks 0-1 at #11; ranks 2-3 at #12: "
        "cannot tell which side is out of step, so no rank is named"
    )


def test_single_rank_is_undecided_and_says_nothing_of_the_others() -> None:
    # one dump of four says nothing about the other three: they may simply not have been collected
    verdicts = compare_process_groups([row(2, 11, "started")])
    assert [(v.kind, v.odd_ranks) for v in verdicts] == [(VerdictKind.UNDECIDED, ())]


def test_missing_dump_named_when_most_members_agree() -> None:
    rows = [row(r, 11, "started") for r in (0, 1, 3)]
    verdicts = compare_process_groups(rows)
    assert [(v.kind, v.odd_ranks) for v in verdicts] == [(VerdictKind.AGREE, ()), (VerdictKind.ABSENT, (2,))]
    assert verdicts[1].detail == "in pg 1(tp:0) (ranks 0-3), rank 2 is missing: no Flight Recorder dump from it"
    # members known only from the caller (torch lines and the engine's world size)
    torch = [row(r, 7, "timeout", source="torch_nccl", members=None, desc=None) for r in (0, 1, 3)]
    assert [v.kind for v in compare_process_groups(torch)] == [VerdictKind.AGREE]
    given = compare_process_groups(torch, members={("torch_nccl", "1"): range(4)})
    assert [(v.kind, v.odd_ranks) for v in given] == [(VerdictKind.AGREE, ()), (VerdictKind.ABSENT, (2,))]


def test_other_op_at_the_same_seq() -> None:
    rows = [row(r, 11, "started") for r in (0, 1, 2)] + [row(3, 11, "started", op="broadcast", sizes=((1,),))]
    (v,) = compare_process_groups(rows)
    assert (v.kind, v.odd_ranks, v.odd[0].relation, v.odd[0].op) == (
        VerdictKind.DESYNC,
        (3,),
        Relation.OTHER_OP,
        "broadcast",
    )
    assert v.detail.endswith("ranks 0-2 are at all_reduce #11 (started); rank 3 is at broadcast #11 instead")


def test_other_sizes_only_where_sizes_must_match() -> None:
    rows = [row(r, 11, "started") for r in (0, 2, 3)] + [row(1, 11, "started", sizes=((7, 4096),))]
    (v,) = compare_process_groups(rows)
    assert (v.odd_ranks, v.odd[0].relation) == ((1,), Relation.OTHER_SIZES)
    assert v.detail.endswith("rank 1 has input sizes [[7, 4096]] at #11, not [[8, 4096]]")
    a2a = [row(r, 11, "started", op="all_to_all", sizes=((r + 1, 4096),)) for r in range(4)]
    assert compare_process_groups(a2a)[0].kind == VerdictKind.AGREE


def test_a_rank_past_the_others_is_ahead() -> None:
    rows = [row(r, 11, "started") for r in (0, 1, 2)] + [
        row(3, 11, "completed"),
        row(3, 12, "started", op="broadcast"),
    ]
    (v,) = compare_process_groups(rows)
    assert (v.odd_ranks, v.odd[0].relation) == ((3,), Relation.AHEAD)
    assert v.detail.endswith(
        "rank 3 is past #11, waiting in broadcast #12 (started), which the others never joined"
    )


def test_absent_and_dead_rows() -> None:
    rows = [row(r, 11, "started", source="nccl_ras", kind="all", op="ALL") for r in (0, 1)]
    rows += [
        row(2, None, "dead", source="nccl_ras", op="ALL", reason="process 51234 on node 10.20.4.13"),
        row(3, None, "missing", source="nccl_ras", op="ALL"),
    ]
    verdicts = compare_process_groups(rows)
    assert [(v.kind, v.odd_ranks) for v in verdicts] == [
        (VerdictKind.AGREE, ()),
        (VerdictKind.ABSENT, (2, 3)),
    ]
    assert [o.relation for o in verdicts[1].odd] == [Relation.DEAD, Relation.MISSING]
    assert verdicts[1].detail.endswith("rank 2 is dead: process 51234 on node 10.20.4.13; rank 3 is missing")


def test_p2p_rows_and_unnamed_ranks_are_not_compared() -> None:
    rows = [
        row(0, 3, "completed", op="send 0->2", kind="p2p", members=(0, 2)),
        row(2, 1, "started", op="recv 2<-0", kind="p2p", members=(0, 2)),
        row(None, 5, "launched", source="nccl_ras", kind="all"),
    ]
    assert compare_process_groups(rows) == []


def test_torch_nccl_timeouts_disagreeing() -> None:
    rows = [
        row(r, 5, "timeout", op="ALLREDUCE", source="torch_nccl", members=None, desc=None) for r in (0, 1, 2)
    ]
    rows.append(row(3, 4, "timeout", op="ALLREDUCE", source="torch_nccl", members=None, desc=None))
    (v,) = compare_process_groups(rows)
    assert (v.kind, v.odd_ranks, v.ranks) == (VerdictKind.DESYNC, (3,), (0, 1, 2, 3))
    assert v.detail == (
        "in pg 1 (ranks 0-3), ranks 0-2 are at ALLREDUCE SeqNum=5 (timeout); rank 3 is still in "
        "ALLREDUCE SeqNum=4 (timeout) and never joined SeqNum=5: one collective behind"
    )


def test_torch_lines_of_releases_that_print_no_time() -> None:
    # torch 2.2: '[rankN]:' but no time; torch 2.0: no time, no '[rankN]:', no NumelIn/NumelOut
    ctx = datetime(2024, 7, 9, 1, 0)
    g = torch_nccl.parse_glog("[rank2]:[E ProcessGroupNCCL.cpp:523] [Rank 2] Watchdog caught collective operation "
                              "timeout: WorkNCCL(SeqNum=50404, OpType=GATHER, NumelIn=8000, NumelOut=0, "
                              "Timeout(ms)=600000) ran for 600327 milliseconds before timing out.", ctx)
    assert g is not None and g["ts"] is None
    assert (g["global_rank"], g["seq"], g["op_type"], g["ran_ms"], g["event"]) == (2, 50404, "GATHER", 600327,
                                                                                   "collective_timeout")
    g = torch_nccl.parse_glog("[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective operation timeout: "
                              "WorkNCCL(SeqNum=64088, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25625251 "
                              "milliseconds before timing out.", ctx)
    assert g is not None and (g["ts"], g["global_rank"], g["seq"], g["timeout_ms"]) == (None, 7, 64088, 1800000)
    g = torch_nccl.parse_glog("[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire "
                              "process down.", ctx)
    assert g is not None and g["event"] == "taking_down" and g["global_rank"] is None
    assert torch_nccl.parse_glog("[E something went wrong] nope", ctx) is None


def test_rank_position_semantics() -> None:
    assert rank_position([]) is None
    p = rank_position([row(0, 10, "started"), row(0, 11, "started"), row(0, 12, "scheduled")])
    assert p is not None and (p.seq, p.pending, p.enqueued) == (11, True, 12)
    p = rank_position([row(0, 10, "completed"), row(0, 11, "scheduled"), row(0, 12, "scheduled")])
    assert p is not None and (p.seq, p.pending, p.enqueued) == (11, True, 12)
    p = rank_position([row(0, 10, "completed"), row(0, 9, "completed")])
    assert p is not None and (p.seq, p.pending, p.enqueued) == (10, False, 10)


# -- NCCL RAS ----------------------------------------------------------------------------------------


def _ras(name: str) -> tuple[list[str], nccl_ras.RasReport]:
    lines = _lines(RAS / name)
    return lines, nccl_ras.parse_nccl_ras(lines)


@pytest.mark.parametrize("name", ["v2.24_mismatch.txt", "v2.26_mismatch.txt", "healthy.txt", "dead_rank.txt"])
def test_ras_every_line_accounted(name: str) -> None:
    lines, rep = _ras(name)
    assert nccl_ras.looks_like_nccl_ras(lines)
    assert rep.unmatched == () and rep.consumed == frozenset(range(len(lines)))


def test_ras_not_detected_in_nccl_debug_log() -> None:
    log = [
        "node3:412007:412007 [2] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "node3:412007:412100 [2] NCCL INFO Channel 00/24 : 0 1 2 3 4 5 6 7",
        "Job summary of the week",
    ]
    assert not nccl_ras.looks_like_nccl_ras(log)


def test_ras_224_total_count_mismatch() -> None:
    _, rep = _ras("v2.24_mismatch.txt")
    assert (rep.nccl_version, rep.cuda_version, rep.cuda_runtime, rep.cuda_driver) == (
        "2.24.3",
        "12.6",
        12060,
        12040,
    )
    assert rep.jobs == (nccl_ras.RasJob(2, 4, 1, 8, 8, line=9),)
    assert [(g.group, g.comms, g.ranks_per_comm, g.status, g.errors) for g in rep.comm_groups] == [
        (0, 1, 8, "RUNNING", ("MISMATCH",)),
        (1, 2, 4, "RUNNING", ("OK",)),
    ]
    (issue,) = rep.issues
    assert (issue.section, issue.title, issue.comm_hash, issue.group, issue.comm_index, issue.line) == (
        "warnings",
        "MISMATCH",
        "5c1a4fae5a0bd7a8",
        0,
        0,
        25,
    )
    assert issue.counts == (
        nccl_ras.RasCount("ALL", 48213, 7, (), None, 27),
        nccl_ras.RasCount("ALL", 48212, 1, (5,), "GPU 1 managed by process 77120 on node 10.20.4.12", 28),
    )
    (odd,) = rep.odd_ranks
    assert (odd.rank, odd.relation, odd.op, odd.count, odd.node, odd.pid, odd.gpu) == (
        5,
        "lagging",
        "ALL",
        48212,
        "10.20.4.12",
        77120,
        1,
    )
    assert odd.reason == "launched up to operation 48212, behind the 7 ranks at 48213 by 1"
    assert [(r.rank, r.seq, r.op, r.state, r.inferred, r.seq_kind) for r in rep.rows] == [
        (5, 48212, "ALL", "launched", False, "all")
    ] + [(r, 48213, "ALL", "launched", True, "all") for r in (0, 1, 2, 3, 4, 6, 7)]
    (v,) = compare_process_groups(rep.rows)
    assert (v.kind, v.odd_ranks, v.pg) == (VerdictKind.DESYNC, (5,), "5c1a4fae5a0bd7a8")
    assert v.detail == (
        "in communicator 5c1a4fae5a0bd7a8 (#0-0, its ranks 0-7), ranks 0-4,6-7 are at operation 48213 "
        "(launched); rank 5 launched up to operation 48212, not operation 48213: one operation behind"
    )
    assert not rep.healthy


def test_ras_226_per_type_counts() -> None:
    _, rep = _ras("v2.26_mismatch.txt")
    assert rep.nccl_version == "2.26.2"
    assert [(o.rank, o.relation, o.op, o.count) for o in rep.odd_ranks] == [
        (2, "lagging", "AllReduce", 733119),
        (6, "ahead", "AllReduce", 733121),
        (2, "lagging", "Broadcast", 20417),
    ]
    assert {(r.rank, r.seq) for r in rep.rows if r.op == "AllReduce" and r.inferred} == {
        (r, 733120) for r in (0, 1, 3, 4, 5, 7)
    }
    verdicts = compare_process_groups(rep.rows)
    assert [(v.seq_kind, v.odd_ranks, [o.relation for o in v.odd]) for v in verdicts] == [
        ("AllReduce", (2, 6), [Relation.BEHIND, Relation.AHEAD]),
        ("Broadcast", (2,), [Relation.BEHIND]),
    ]
    assert "rank 6 launched up to operation 733121: one AllReduce operation ahead" in verdicts[0].detail


def test_ras_healthy() -> None:
    _, rep = _ras("healthy.txt")
    assert rep.healthy and rep.issues == () and rep.odd_ranks == () and rep.rows == ()
    assert rep.jobs[0] == nccl_ras.RasJob(4, 8, 1, 32, 32, line=9)
    assert [(g.group, g.comms, g.ranks_per_comm) for g in rep.comm_groups] == [
        (0, 8, 4),
        (1, 4, 8),
        (2, 1, 32),
    ]


def test_ras_dead_and_missing() -> None:
    _, rep = _ras("dead_rank.txt")
    assert [(i.section, i.title, i.comm_hash) for i in rep.issues] == [
        ("errors", "DEAD", None),
        ("errors", "INCOMPLETE", "3f7d9a0c5e21b844"),
        ("warnings", "TIMEOUT", None),
    ]
    assert rep.issues[0].processes == (nccl_ras.RasProcess(51234, "10.20.4.13", (2,), 23),)
    assert rep.issues[1].missing_ranks == (6,)
    # the one dead process is why the communicator misses its one rank: it is that rank
    assert [(o.rank, o.relation, o.pid) for o in rep.odd_ranks] == [
        (6, "dead", 51234),
        (6, "missing", None),
        (None, "unresponsive", 51231),
    ]
    assert [(r.rank, r.pg, r.seq, r.state) for r in rep.rows] == [
        (6, nccl_ras.JOB_PG, None, "dead"),
        (6, "3f7d9a0c5e21b844", None, "missing"),
    ]
    assert rep.rows[1].pg_ranks == tuple(range(8))
    verdicts = compare_process_groups(rep.rows)
    assert [(v.kind, v.odd_ranks, v.odd[0].relation) for v in verdicts] == [
        (VerdictKind.ABSENT, (6,), Relation.DEAD),
        (VerdictKind.ABSENT, (6,), Relation.MISSING),
    ]


def test_ras_unknown_lines_are_returned() -> None:
    lines = _lines(RAS / "v2.24_mismatch.txt")
    lines.insert(0, "$ ncclras -t 5")
    lines.append("  Communicator 0 exploded in a way nobody documented")
    rep = nccl_ras.parse_nccl_ras(lines, first_line=101)
    assert rep.unmatched == (0, len(lines) - 1)
    assert rep.consumed == frozenset(range(1, len(lines) - 1))
    assert rep.odd_ranks[0].line == 129  # file line numbers follow first_line


# -- desync-debug report -----------------------------------------------------------------------------

DESYNC = [
    "[rank0]:[E710 18:00:32.426302794 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 1(tp:0) Rank 0] "
    "Timeout at NCCL work: 43, last enqueued NCCL work: 43, last completed NCCL work: 42.",
    "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
    "\t     [3] finished collective #42, but didn't join collective #43 (count from 1)",
    "\t - Snapshot of ranks' latest states:",
    "\t   #42 finished ranks:",
    "\t     [3] finished ALLREDUCE",
    "\t   #43 started ranks:",
    "\t     [0, 1, 2] started ALLREDUCE",
]

NEVER = [
    "\t - To our best knowledge, ranks [5, 7] are the lagging ranks that caused this timeout. "
    "They never joined any collectives",
    "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
    "\t   - [1] joined but didn't finish collective #9 (count from 1)",
]


def test_desync_report_facts() -> None:
    rep = desync_report.parse_desync_report(DESYNC, first_line=40)
    assert rep.unmatched == (0,)  # the glog record is torch_nccl's line
    assert rep.consumed == frozenset(range(1, 8))
    assert rep.facts == (
        desync_report.DesyncFact("finished_not_joined", (3,), 42, 43, None, 42),
        desync_report.DesyncFact("finished", (3,), 42, None, "ALLREDUCE", 45),
        desync_report.DesyncFact("started", (0, 1, 2), 43, None, "ALLREDUCE", 47),
    )
    assert rep.lagging_ranks == (3,)
    assert all(desync_report.is_desync_line(t) for t in DESYNC[1:]) and not desync_report.is_desync_line(
        DESYNC[0]
    )
    rows = desync_report.desync_rows(rep, pg="1", pg_desc="tp:0", pg_ranks=(0, 1, 2, 3))
    assert [(r.source, r.rank, r.seq, r.op, r.state, r.records) for r in rows] == [
        ("torch_nccl", 0, 43, "ALLREDUCE", "started", 1),
        ("torch_nccl", 1, 43, "ALLREDUCE", "started", 1),
        ("torch_nccl", 2, 43, "ALLREDUCE", "started", 1),
        ("torch_nccl", 3, 42, "ALLREDUCE", "completed", 2),
    ]
    (v,) = compare_process_groups(rows)
    assert (v.kind, v.odd_ranks, v.odd[0].relation) == (VerdictKind.DESYNC, (3,), Relation.BEHIND)


def test_desync_report_never_joined() -> None:
    rep = desync_report.parse_desync_report(NEVER)
    assert rep.unmatched == ()
    assert [(f.relation, f.ranks, f.collective) for f in rep.facts] == [
        ("never_joined", (5, 7), None),
        ("joined_not_finished", (1,), 9),
    ]
    assert rep.lagging_ranks == (1, 5, 7)
    rows = desync_report.desync_rows(rep, pg="0", pg_desc="default_pg")
    assert [(r.rank, r.seq, r.state) for r in rows] == [
        (1, 9, "started"),
        (5, None, "absent"),
        (7, None, "absent"),
    ]
    absent = [v for v in compare_process_groups(rows) if v.kind == VerdictKind.ABSENT]
    assert absent[0].odd_ranks == (5, 7)
    assert "never joined any collective" in absent[0].detail


def test_json_dump_written_by_generator_is_valid_json() -> None:
    # the generator's JSON form is what the parser's JSON path is tested on: keep it honest
    doc = json.loads((FR / "vllm_tp2pp2_json" / "nccl_trace_rank_0.json").read_text())
    assert "frames" not in doc["entries"][0] and doc["pg_status"]["1"]["last_completed_collective"] == "76"
    assert doc["entries"][-1]["time_discovered_completed_ns"] == 0


# -- robustness regressions and real-shaped captures ----------------------------------------------------


def test_unpickler_refuses_globals_on_its_own(tmp_path: Path) -> None:
    # the opcode pre-scan refuses first; the Unpickler's find_class is the second lock
    from hangforensics.parsers.collectives.safe_pickle import _RefusingUnpickler

    marker = tmp_path / "pwned2"
    data = _hostile(_Reduce(os.system, (f"touch {marker}",)))
    with pytest.raises(RefusedPickleGlobal, match=r"^refused pickle global \w+\.system$"):
        _RefusingUnpickler(io.BytesIO(data)).load()
    assert not marker.exists()


def test_flipped_memo_index_does_not_exhaust_memory() -> None:
    # Bug: one corrupt byte in a LONG_BINPUT index made the C unpickler size its memo table by it
    # (gigabytes, ~50 s).  The opcode pre-scan now sends such a file to the salvage reader.
    data = bytearray(pickle.dumps({"version": "2.10", "entries": [{"collective_seq_id": 1}] * 3}, protocol=2))
    data[data.index(b"q\x00")] = ord("r")  # BINPUT 0 -> LONG_BINPUT 0x...
    data[data.index(b"r\x00") + 1 : data.index(b"r\x00") + 5] = b"\xf0\xff\xff\x7f"
    with pytest.raises(DamagedPickle, match="memo index 2147483632 out of order"):
        safe_loads(bytes(data))  # refused before the C unpickler sees it
    started = datetime.now()
    d = flight_recorder.parse_flight_recorder(bytes(data), "nccl_trace_rank_0")
    assert (datetime.now() - started).total_seconds() < 5
    assert d.entries == () and any("damaged" in n for n in d.notes)


FRAGMENTS = SHARED / "examples" / "fragments.tar.gz"


@pytest.mark.skipif(
    not FRAGMENTS.is_file(), reason="../shared/examples/fragments.tar.gz is not beside the repository"
)
def test_real_shaped_captures() -> None:
    import tarfile

    rows: list[CollectiveRow] = []
    ras_lines: list[str] = []
    with tarfile.open(FRAGMENTS) as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m) if m.isfile() else None
            if f is None:
                continue
            if "/hel1-gptoss-node18/nccl_trace_rank_" in m.name:
                d = flight_recorder.parse_flight_recorder(f.read(), m.name)
                assert d.notes == () and d.version == "2.10" and d.records > 0
                rows.extend(flight_recorder.collective_rows(d))
            elif m.name.endswith("dal4-llama70b-27/ncclras-output.txt"):
                ras_lines = f.read().decode().removesuffix("\n").split("\n")
    assert {r.rank for r in rows} == set(range(8))
    desync = [v for v in compare_process_groups(rows) if v.kind == VerdictKind.DESYNC]
    assert [(v.pg_desc, v.odd_ranks, v.odd[0].relation) for v in desync] == [("tp:0", (3,), Relation.BEHIND)]
    rep = nccl_ras.parse_nccl_ras(ras_lines)
    assert nccl_ras.looks_like_nccl_ras(ras_lines) and rep.unmatched == ()
    assert [(o.rank, o.relation, o.op) for o in rep.odd_ranks] == [(3, "lagging", "AllReduce")]


def test_ras_status_mismatch_and_dead_process_named_by_pid() -> None:
    lines = [
        "Errors",
        "======",
        "",
        "DEAD",
        "  1 job process is considered dead (unreachable via the RAS network)",
        "  Process 412007 on node 10.15.83.92 managing GPU 2",
        "",
        "#0-0 (9e0f2d41c8b7a613) MISMATCH",
        "  Communicator ranks have different status",
        "  7 ranks have status RUNNING",
        "  Rank 2 has status ABORT -- GPU 2 managed by process 412007 on node 10.15.83.92",
    ]
    rep = nccl_ras.parse_nccl_ras(lines)
    assert rep.unmatched == ()
    assert [(o.rank, o.relation, o.pid, o.reason) for o in rep.odd_ranks] == [
        (2, "dead", 412007, "process 412007 on node 10.15.83.92 (GPU 2): dead"),  # pid -> rank from the block
        (2, "status", 412007, "rank 2 has status ABORT"),
    ]
    # no counts: only the dead process, a job-level absent row of the rank its pid names
    assert [(r.rank, r.pg, r.seq, r.state) for r in rep.rows] == [(2, nccl_ras.JOB_PG, None, "dead")]


def test_ras_outlier_groups_listed_one_rank_per_line() -> None:
    # NCCL lists each rank of a small outlier group on its own line (client_support.cc), and counts ranks
    # that launched nothing apart; the majority stays unnamed
    lines = [
        "Warnings",
        "========",
        "",
        "#0-0 (0badc0ffee123456) MISMATCH",
        "  Communicator ranks have different AllReduce operation counts",
        "  5 ranks have launched up to operation 900",
        "  2 ranks have launched up to operation 899",
        "  Rank 3 -- GPU 3 managed by process 1003 on node n1",
        "  Rank 6 -- GPU 6 managed by process 1006 on node n1",
        "  Rank 7 has not launched any operations -- GPU 7 managed by process 1007 on node n1",
    ]
    rep = nccl_ras.parse_nccl_ras(lines)
    assert rep.unmatched == ()
    assert [(o.rank, o.relation, o.count, o.pid) for o in rep.odd_ranks] == [
        (3, "lagging", 899, 1003),
        (6, "lagging", 899, 1006),
        (7, "lagging", 0, 1007),
    ]
    # no communicators table (a cut paste): the counts add up to the communicator's 8 ranks
    inferred = sorted(r.rank for r in rep.rows if r.inferred)
    assert inferred == [0, 1, 2, 4, 5]
    (v,) = compare_process_groups(rep.rows)
    assert (v.kind, v.odd_ranks, v.reference_seq) == (VerdictKind.DESYNC, (3, 6, 7), 900)


def test_ras_incomplete_communicator_and_dead_process_tied_to_its_rank() -> None:
    lines = [
        "Errors",
        "======",
        "",
        "DEAD",
        "  1 job process is considered dead (unreachable via the RAS network)",
        "  Process 51234 on node 10.20.4.13 managing GPU 2",
        "",
        "#0-0 (3f7d9a0c5e21b844) INCOMPLETE",
        "  Missing communicator data from 1 rank",
        "  Rank 6 -- [process information not found]",
    ]
    rep = nccl_ras.parse_nccl_ras(lines)
    assert rep.unmatched == ()
    dead = [o for o in rep.odd_ranks if o.relation == "dead"]
    assert [(o.rank, o.pid) for o in dead] == [(6, 51234)]
    assert "the one rank a communicator misses" in dead[0].reason
    assert sorted((r.rank, r.state, r.pg) for r in rep.rows) == [
        (6, "dead", nccl_ras.JOB_PG), (6, "missing", "3f7d9a0c5e21b844")]
    verdicts = compare_process_groups(rep.rows)
    assert {(v.kind, v.odd_ranks) for v in verdicts} == {(VerdictKind.ABSENT, (6,))}
    assert any(o.relation == Relation.DEAD for v in verdicts for o in v.odd)
