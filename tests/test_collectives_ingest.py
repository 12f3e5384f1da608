"""Collective evidence end to end: files in an engine folder -> kinds -> ingest -> the matcher -> findings.

Flight Recorder dumps are written here (pickle and JSON, plain types, as torch writes them), NCCL RAS
outputs in the 2.24, 2.26+ and dead-process layouts, and server logs with ProcessGroupNCCL timeouts and
a TORCH_NCCL_DESYNC_DEBUG report.  File names carry no meaning except a dump's rank suffix.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from conftest import DATA, LogWriter, by_rule

from hangforensics.analysis.findings import run_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.readers.kinds import detect_kind
from hangforensics.store import Store

RAS = DATA / "collectives" / "ras"
T0 = datetime(2026, 5, 1, 2, 0, 0, tzinfo=timezone.utc)          # 10:00 at UTC+8, the LogWriter's clock
C10D = "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py"
SGL = "/usr/lib/python3/dist-packages/sglang/srt"
FRAMES = {
    "all_reduce": [("all_reduce", C10D, 2806), ("tensor_model_parallel_all_reduce", f"{SGL}/communication_op.py", 14),
                   ("forward", f"{SGL}/models/llama.py", 312), ("event_loop_overlap", f"{SGL}/scheduler.py", 1042)],
    "broadcast": [("broadcast", C10D, 2711), ("broadcast_pyobj", f"{SGL}/utils.py", 1120),
                  ("recv_requests", f"{SGL}/scheduler.py", 1187), ("event_loop_overlap", f"{SGL}/scheduler.py", 1042)],
}


def ns(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def entry(i: int, pg: str, desc: str, seq: int, state: str, t: datetime, op: str = "all_reduce",
          tokens: int | None = None) -> dict:
    """One ring-buffer entry as torch records it (2.10 fields)."""
    size = [[tokens if tokens is not None else 64 + seq % 50, 8192]] if op == "all_reduce" else [[1]]
    return {"frames": [{"name": n, "filename": f, "line": ln} for n, f, ln in FRAMES[op]],
            "record_id": i, "pg_id": int(pg), "process_group": (pg, desc), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"nccl:{op}", "time_created_ns": ns(t),
            "input_sizes": size, "input_dtypes": ["Float"], "output_sizes": size, "output_dtypes": ["Float"],
            "state": state, "time_discovered_started_ns": ns(t) + 50_000 if state != "scheduled" else None,
            "time_discovered_completed_ns": ns(t) + 900_000 if state == "completed" else None,
            "retired": state == "completed", "timeout_ms": 240000, "is_p2p": False,
            "thread_id": "140230000000000", "thread_name": "sglang::schedul"}


def history(pg: str, desc: str, last: int, state: str, t_end: datetime, n: int = 6) -> list[dict]:
    """The last ``n`` collectives of one group up to ``last`` (``state``), every one before it completed."""
    return [entry(0, pg, desc, s, state if s == last else "completed", t_end - timedelta(milliseconds=40 * (last - s)))
            for s in range(last - n + 1, last + 1)]


def dump(entries: list[dict], groups: dict[str, tuple[str, list[int]]]) -> dict:
    for i, e in enumerate(entries):
        e["record_id"] = i
    return {"version": "2.10", "comm_lib_version": "2.27.5",
            "pg_config": {g: {"name": g, "desc": d, "ranks": str(rs)} for g, (d, rs) in groups.items()},
            "pg_status": {}, "entries": entries}


def write_dump(folder: Path, name: str, d: dict, form: str = "pickle") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    if form == "pickle":
        p.write_bytes(pickle.dumps(d, protocol=2))
    else:                               # the JSON form: no frames, unknown times 0
        j = {**d, "entries": [{**{k: (v if v is not None else 0) for k, v in e.items()}, "frames": None}
                              for e in d["entries"]]}
        for e in j["entries"]:
            del e["frames"]
        p.write_text(json.dumps(j))
    return p


def analyze(folder: Path) -> tuple[list[dict], Store]:
    st = Store(":memory:")
    ingest_paths(st, [folder], mode="engine")
    return run_rules(st), st


TP = ("0", "tp:0", list(range(6)))


# -- Flight Recorder --------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["pickle", "json"])
def test_fr_one_rank_behind_is_the_desync(tmp_path: Path, form: str) -> None:
    eng = tmp_path / "hel2-fr"
    t = T0 + timedelta(minutes=3)
    for r in range(6):
        last, state = (1041, "completed") if r == 4 else (1042, "started")
        write_dump(eng / "dumps", f"trace_{r}", dump(history("0", "tp:0", last, state, t), {"0": TP[1:]}), form)
    assert detect_kind(eng / "dumps" / "trace_4") == "flight_recorder"
    found, st = analyze(eng)
    f = by_rule(found)
    assert set(f) == {"collective-desync"}                    # once, from the matcher, not from stack classes
    (desync,) = f["collective-desync"]
    assert desync["ranks"] == ["rank4"]
    assert "rank 4 finished #1041 and never joined #1042: one collective behind" in desync["detail"]
    assert "UTC" in desync["detail"]                           # no log to align the dumps' clock with
    src = st.query("SELECT kind, lines, parsed_lines, unparsed_lines FROM sources ORDER BY path")
    assert {r["kind"] for r in src} == {"flight_recorder"} and all(r["lines"] == 6 for r in src)
    assert all(r["lines"] == r["parsed_lines"] + r["unparsed_lines"] for r in src)
    if form == "pickle":                                       # the recorded stacks join the rank classes
        assert st.scalar("SELECT count(DISTINCT rank) FROM rank_collectives") == 6
        assert st.scalar("SELECT count(*) FROM rank_classes") > 0
    assert st.scalar("SELECT count(*) FROM desyncs") == 0
    st.close()


def test_fr_missing_dump_in_a_known_group_is_first_rank_stopped(tmp_path: Path) -> None:
    eng = tmp_path / "fr-missing"
    groups = {"0": ("tp:0", list(range(8)))}
    for r in (0, 1, 2, 3, 4, 6, 7):                           # rank 5 left no dump
        write_dump(eng, f"nccl_trace_rank_{r}", dump(history("0", "tp:0", 300, "started", T0), groups))
    found, st = analyze(eng)
    f = by_rule(found)
    assert "collective-desync" not in f
    (first,) = f["first-rank-stopped"]
    assert first["ranks"] == ["rank5"] and first["ts"] is None
    assert "rank 5 is missing: no Flight Recorder dump from it" in first["detail"]
    assert "all_reduce #300" in first["detail"]
    st.close()


def test_fr_groups_at_unrelated_sequence_numbers_are_not_compared(tmp_path: Path) -> None:
    eng = tmp_path / "fr-two-groups"
    groups = {"0": ("tp:0", [0, 1, 2, 3]), "3": ("ep:0", [0, 1, 2, 3])}
    for r in range(4):
        es = history("0", "tp:0", 120, "started", T0) + history("3", "ep:0", 98765, "completed", T0, n=3)
        write_dump(eng, f"nccl_trace_rank_{r}", dump(es, groups))
    found, st = analyze(eng)
    assert found == []
    verdicts = st.query("SELECT pg, verdict, seq FROM collective_verdicts ORDER BY pg")
    assert [(v["pg"], v["verdict"]) for v in verdicts] == [("0(tp:0)", "agree"), ("3(ep:0)", "agree")]
    assert verdicts[0]["seq"] == 120
    st.close()


def test_fr_other_sizes_named(tmp_path: Path) -> None:
    eng = tmp_path / "fr-sizes"
    for r in range(4):
        es = history("0", "tp:0", 50, "started", T0)
        es[-1] = entry(0, "0", "tp:0", 50, "started", T0, tokens=7 if r == 2 else 321)
        write_dump(eng, f"nccl_trace_rank_{r}", dump(es, {"0": ("tp:0", [0, 1, 2, 3])}))
    found, st = analyze(eng)
    (desync,) = by_rule(found)["collective-desync"]
    assert desync["ranks"] == ["rank2"] and "input sizes [[7, 8192]] at #50, not [[321, 8192]]" in desync["detail"]
    st.close()


def test_fr_times_aligned_to_the_log_clock(tmp_path: Path) -> None:
    """The engine's ProcessGroupNCCL timeout of the same collective is on the log clock (UTC+8 here)."""
    eng = tmp_path / "fr-aligned"
    log = LogWriter(tp=4)
    log.startup().traffic(10, 120).probes(130, 400, status=503)
    for r in range(4):
        log.nccl_timeout(362, r, seq=43)                       # 10:06:02 local, 240 s after 10:02:02
    log.write(eng)
    started = T0 + timedelta(seconds=122)                      # 02:02:02 UTC
    for r in range(4):
        es = history("7", "", 43, "started", started)
        for e in es:
            e["process_group"] = ("7", "undefined")
        write_dump(eng / "fr", f"nccl_trace_rank_{r}", dump(es, {"7": ("undefined", [0, 1, 2, 3])}))
    found, st = analyze(eng)
    row = st.query("SELECT ts FROM collectives WHERE source = 'flight_recorder' AND seq = 43 AND rank = 0")[0]
    assert row["ts"] == datetime(2026, 5, 1, 10, 2, 2)           # 02:02:02 UTC + 8 h
    note = st.scalar("SELECT note FROM sources WHERE kind = 'flight_recorder' LIMIT 1")
    assert "aligned to the log clock by +8:00 h" in note and "SeqNum=43" in note
    assert st.scalar("SELECT max(clock_offset_s) FROM sources WHERE kind = 'flight_recorder'") == 8 * 3600
    stack_ts = st.scalar("SELECT max(ts) FROM stacks WHERE format = 'flight_recorder'")
    assert stack_ts.hour == 10                                 # the stacks view moves them too
    assert "collective-desync" not in by_rule(found)
    st.close()


def test_fr_truncated_dump_keeps_what_was_read_and_counts_records(tmp_path: Path) -> None:
    eng = tmp_path / "fr-cut"
    data = pickle.dumps(dump(history("0", "tp:0", 77, "started", T0, n=12), {"0": ("tp:0", [0, 1])}), protocol=2)
    eng.mkdir()
    (eng / "nccl_trace_rank_1").write_bytes(data[: len(data) * 2 // 3])
    write_dump(eng, "nccl_trace_rank_0", dump(history("0", "tp:0", 77, "started", T0, n=12), {"0": ("tp:0", [0, 1])}))
    _, st = analyze(eng)
    cut = st.query("SELECT * FROM sources WHERE path LIKE '%rank_1'")[0]
    assert cut["kind"] == "flight_recorder" and 0 < cut["parsed_lines"] < 12
    assert cut["lines"] == cut["parsed_lines"] + cut["unparsed_lines"]
    assert st.scalar("SELECT count(*) FROM unparsed WHERE path LIKE '%rank_1'") == cut["unparsed_lines"]
    assert "truncated" in cut["note"]
    assert st.scalar("SELECT count(*) FROM collective_records WHERE path LIKE '%rank_1'") > 0
    st.close()


def _hostile(marker: Path) -> bytes:
    """A pickle with Flight Recorder keys whose loading would run ``touch marker``."""
    return (b"\x80\x02}q\x00(X\x07\x00\x00\x00versionq\x01X\x04\x00\x00\x002.10q\x02X\t\x00\x00\x00pg_configq\x03}q\x04"
            b"X\x07\x00\x00\x00entriesq\x05]q\x06cos\nsystem\nq\x07X" + len(f"touch {marker}").to_bytes(4, "little")
            + f"touch {marker}".encode() + b"q\x08\x85q\tRq\naX\t\x00\x00\x00pg_statusq\x0b}q\x0cu.")


def test_hostile_pickle_through_the_report_cli(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    eng = tmp_path / "evil"
    eng.mkdir()
    data = _hostile(marker)
    (eng / "nccl_trace_rank_3").write_bytes(data)
    (eng / "notes.bin").write_bytes(data.replace(b"pg_config", b"xx_config").replace(b"entries", b"xxtries"))
    write_dump(eng, "nccl_trace_rank_0", dump(history("0", "tp:0", 9, "started", T0), {"0": ("tp:0", [0, 3])}))
    out = tmp_path / "r.html"
    p = subprocess.run([sys.executable, "-m", "hangforensics", "report", str(eng), "-o", str(out), "--json",
                        str(tmp_path / "f.json"), "--db", str(tmp_path / "x.duckdb")],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert p.returncode in (0, 2), p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 1
    assert not marker.exists()
    with Store(tmp_path / "x.duckdb", read_only=True) as st:
        row = st.query("SELECT kind, status, note, lines FROM sources WHERE path LIKE '%rank_3'")[0]
        assert row["kind"] == "flight_recorder" and row["lines"] == 0
        assert row["status"] == "refused: refused pickle global os.system"
        assert "\n" not in row["note"] and "refused pickle global os.system" in row["note"]
        assert st.scalar("SELECT count(*) FROM collective_records WHERE path LIKE '%rank_3'") == 0
    assert "refused pickle global os.system" in out.read_text()
    # rank 3 dumped (refused, but there): it is not "missing" from its group
    assert "first-rank-stopped" not in out.read_text()
    # positive control: the same bytes under plain pickle.load do run the command
    subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.loads(open(sys.argv[1], 'rb').read())",
                    str(eng / "nccl_trace_rank_3")], capture_output=True, timeout=60, check=False)
    assert marker.exists()


# -- NCCL RAS ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sample", "ranks"), [("v2.24_mismatch.txt", ["rank5"]),
                                                ("v2.26_mismatch.txt", ["rank2", "rank6"])])
def test_ras_mismatch_names_the_odd_ranks(tmp_path: Path, sample: str, ranks: list[str]) -> None:
    eng = tmp_path / "ras"
    eng.mkdir()
    (eng / "output.log").write_text(RAS.joinpath(sample).read_text() + "this line is no part of it\n")
    assert detect_kind(eng / "output.log") == "nccl_ras"
    found, st = analyze(eng)
    f = by_rule(found)
    assert set(f) == {"collective-desync"}
    (desync,) = f["collective-desync"]
    assert desync["ranks"] == ranks and "communicator" in desync["title"]
    assert "behind" in desync["detail"]
    src = st.query("SELECT lines, parsed_lines, unparsed_lines FROM sources")[0]
    assert src["unparsed_lines"] == 1 and src["lines"] == src["parsed_lines"] + 1
    facts = st.query("SELECT rank, attrs FROM events WHERE kind = 'nccl_ras' ORDER BY line")
    assert ranks[0] in [x["rank"] for x in facts] and '"relation": "lagging"' in facts[0]["attrs"]
    st.close()


def test_ras_dead_process_is_first_rank_stopped(tmp_path: Path) -> None:
    text = RAS.joinpath("dead_rank.txt").read_text().replace(
        "  The missing rank: 6", "  Rank 6 -- GPU 2 managed by process 51234 on node 10.20.4.13")
    eng = tmp_path / "ras-dead"
    eng.mkdir()
    (eng / "a.txt").write_text(text)
    found, st = analyze(eng)
    f = by_rule(found)
    assert "collective-desync" not in f
    (first,) = f["first-rank-stopped"]
    assert first["ranks"] == ["rank6"] and "dead" in first["title"]
    assert "process 51234 on node 10.20.4.13" in first["detail"]
    st.close()


def test_the_report_shows_a_member_ras_reports_dead_as_an_empty_row(tmp_path: Path) -> None:
    """A RAS member reported dead or missing has no operation count: its row in the collectives panel is
    flagged and empty, with no column of its own (a monitored barrier's records, numbered by nothing, are the
    one panel with a column for them)."""
    import re

    from hangforensics import api

    eng = tmp_path / "ras-dead"
    eng.mkdir()
    (eng / "a.txt").write_text(RAS.joinpath("dead_rank.txt").read_text())
    api.report(eng, tmp_path / "r.html", db=tmp_path / "x.duckdb")
    panels = re.findall(r'<div class="coll-panel" data-source="nccl_ras".*?</table>', (tmp_path / "r.html").read_text(),
                        re.S)
    assert panels and not [p for p in panels if re.search(r'<th class="seq">(?!#\d)', p)]   # no 'ALL' column
    assert any('class="coll-rank odd absent" data-rank="rank6"' in p for p in panels)


def test_unnamed_group_op_mismatch_at_one_seqnum_is_a_desync(tmp_path: Path) -> None:
    # torch 2.0 lines name no process group (and print no time): at SeqNum 88 rank 2 is in BROADCAST while
    # ranks 0, 1, 3 are in ALLREDUCE; one group out of step, not two groups with equal counters
    eng = tmp_path / "opmismatch"
    eng.mkdir()
    (eng / "paste.txt").write_text("".join(
        f"[E ProcessGroupNCCL.cpp:458] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, "
        f"OpType={'BROADCAST' if r == 2 else 'ALLREDUCE'}, Timeout(ms)=1800000) ran for 1800047 milliseconds before "
        f"timing out.\n" for r in (0, 1, 2, 3)))
    found, st = analyze(eng)
    (desync,) = by_rule(found)["collective-desync"]
    assert desync["ranks"] == ["rank2"] and desync["ts"] is None
    st.close()


# -- the desync-debug report ------------------------------------------------------------------------


def _desync_log(folder: Path, with_server: bool, laggard_timed_out: bool = False) -> Path:
    log = LogWriter(tp=4)
    (log.startup() if with_server else log).traffic(10, 120)
    for r in (0, 1, 2, 3) if laggard_timed_out else (0, 1, 2):
        log.raw(f"[rank{r}]:[E501 10:06:02.634054422 ProcessGroupNCCL.cpp:709] [PG ID 0 PG GUID 0(default_pg) "
                f"Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=43, OpType=ALLREDUCE, "
                f"NumelIn=387072, NumelOut=387072, Timeout(ms)=240000) ran for 240119 milliseconds before timing out.")
    log.raw("[rank0]:[E501 10:06:02.700000000 ProcessGroupNCCL.cpp:1380] [PG ID 0 PG GUID 0(default_pg) Rank 0] ")
    for t in ("\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
              "\t   - [3] finished collective #42, but didn't join collective #43 (count from 1)",
              "\t - Snapshot of ranks' latest states:", "\t   #43 started ranks:", "\t     [0, 1, 2] started ALLREDUCE"):
        log.raw(t)
    return log.write(folder)


def test_desync_report_agrees_with_the_timeouts(tmp_path: Path) -> None:
    found, st = analyze(_desync_log(tmp_path / "agree", with_server=True))
    f = by_rule(found)
    (first,) = f["first-rank-stopped"]                        # the timeouts name TP3 absent; the report agrees
    assert first["ranks"] == ["TP3"]
    assert "desync report (rank 0's, TORCH_NCCL_DESYNC_DEBUG) names TP3 as lagging; the ProcessGroupNCCL " \
           "SeqNums agree" in first["detail"]
    assert "collective-desync" not in f                       # one fact, one finding
    rows = st.query("SELECT rank, seq, state, attrs FROM collective_records WHERE source = 'desync_report' "
                    "ORDER BY rank")
    assert (rows[-1]["rank"], rows[-1]["seq"], rows[-1]["state"]) == (3, 42, "completed")
    assert '"timeout_seq": 43' not in rows[-1]["attrs"]        # the report's own record names no SeqNum
    st.close()


def test_desync_report_speaks_when_the_timeouts_cannot(tmp_path: Path) -> None:
    found, st = analyze(_desync_log(tmp_path / "alone", with_server=False))
    (desync,) = by_rule(found)["collective-desync"]
    assert desync["ranks"] == ["rank3"] and "(desync report)" in desync["title"]
    assert "#N is SeqNum=N" in desync["detail"]
    assert "the ProcessGroupNCCL SeqNums agree" in desync["detail"] and "reported no timeout" in desync["detail"]
    st.close()


def test_desync_report_disagreeing_with_the_timeouts_says_so(tmp_path: Path) -> None:
    found, st = analyze(_desync_log(tmp_path / "disagree", with_server=False, laggard_timed_out=True))
    (desync,) = by_rule(found)["collective-desync"]
    assert desync["ranks"] == ["rank3"]
    assert "the ProcessGroupNCCL SeqNums disagree: they put rank3 at SeqNum=43 with the others" in desync["detail"]
    st.close()


def test_fr_times_aligned_by_the_last_progress_line(tmp_path: Path) -> None:
    """No timeout line of the same collective: the dumps' newest completed entry sits just before the log's
    last batch line, so the whole quarter hours between them are the zone."""
    eng = tmp_path / "fr-progress"
    LogWriter(tp=4).startup().traffic(10, 120).probes(130, 300, status=503).write(eng)   # last batch 10:02:00
    for r in range(4):                                          # #88 completed at 02:01:59.960 UTC
        write_dump(eng / "fr", f"nccl_trace_rank_{r}",
                   dump(history("0", "tp:0", 89, "started", T0 + timedelta(seconds=120)), {"0": TP[1:]}))
    _, st = analyze(eng)
    assert st.scalar("SELECT max(clock_offset_s) FROM sources WHERE kind = 'flight_recorder'") == 8 * 3600
    assert "last progress line" in st.scalar("SELECT note FROM sources WHERE kind = 'flight_recorder' LIMIT 1")
    st.close()


def test_ras_dead_process_without_a_rank_still_speaks(tmp_path: Path) -> None:
    eng = tmp_path / "ras-unranked"
    eng.mkdir()
    (eng / "ras.txt").write_text("\n".join([
        "NCCL version 2.25.1 compiled with CUDA 12.8", "", "Job summary", "===========", "",
        "Errors", "======", "", "DEAD", "  1 job process is considered dead (unreachable via the RAS network)",
        "  Process 51234 on node 10.20.4.13 managing GPU 2", "", "Warnings", "========", ""]) + "\n")
    found, st = analyze(eng)
    (first,) = by_rule(found)["first-rank-stopped"]
    assert first["ranks"] == [] and "rank not printed" in first["title"]
    assert "process 51234 on node 10.20.4.13 (GPU 2)" in first["detail"]
    st.close()


def test_fr_tie_names_nobody_and_says_so(tmp_path: Path) -> None:
    eng = tmp_path / "fr-tie"
    for r in range(4):
        write_dump(eng, f"nccl_trace_rank_{r}",
                   dump(history("0", "tp:0", 10 if r < 2 else 11, "started", T0), {"0": ("tp:0", [0, 1, 2, 3])}))
    found, st = analyze(eng)
    assert found == []
    (v,) = st.query("SELECT verdict, ranks, detail FROM collective_verdicts")
    assert v["verdict"] == "split" and v["ranks"] == []
    assert "no majority: ranks 0-1 at #10; ranks 2-3 at #11" in v["detail"] and "no rank is named" in v["detail"]
    st.close()


def test_ras_sub_communicator_ranks_are_said_to_be_its_own(tmp_path: Path) -> None:
    text = RAS.joinpath("v2.24_mismatch.txt").read_text()
    text = text.replace("    0         1         2         4         8         8   RUNNING  MISMATCH",
                        "    0         2         1         4         4         8   RUNNING  MISMATCH")
    text = text.replace("7 ranks have launched up to operation 48213", "3 ranks have launched up to operation 48213")
    eng = tmp_path / "ras-sub"
    eng.mkdir()
    (eng / "r.txt").write_text(text.replace("Rank 5 has launched", "Rank 2 has launched"))
    found, st = analyze(eng)
    (desync,) = by_rule(found)["collective-desync"]
    assert desync["ranks"] == ["rank2"] and "spans 4 of the job's 8 GPUs), not global ranks" in desync["detail"]
    st.close()
