"""Judging partial and repeated evidence (interface.md §3): episodes, probes by behaviour, stall versus
idle by cadence, watchdog-only group freezes, per-process-group collectives, torch ranks across nodes.

Each test builds a small log and asserts the exact findings (count, ts, ts_end, ranks), negatives too.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from conftest import LogWriter, analyze_folder, by_rule
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

T0 = datetime(2026, 5, 1, 10, 0, 0)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def glog(rank: int, s: float, body: str, src: str = "ProcessGroupNCCL.cpp:616") -> str:
    t = at(s)
    return f"[rank{rank}]:[E{t.month}{t.day:02d} {t:%H:%M:%S}.{int(s * 1e9) % 10**9:09d} {src}] {body}"


def torch_timeout(rank: int, s: float, seq: int, op: str = "ALLREDUCE", pg: str = "PG ID 2 PG GUID 1(tp:0)",
                  pg_rank: int | None = None) -> list[str]:
    """The two lines a ProcessGroupNCCL watchdog prints for one timed-out collective."""
    r = rank if pg_rank is None else pg_rank
    return [glog(rank, s, f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                          f"OpType={op}, NumelIn=40960, NumelOut=40960, Timeout(ms)=600000) ran for 600081 "
                          f"milliseconds before timing out."),
            glog(rank, s, f"[{pg} Rank {r}] Exception (either an error or timeout) detected by watchdog at work: "
                          f"{seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.")]


# -- episodes: a repeated signal is one finding ------------------------------------------------------
def test_soft_watchdog_firing_every_timeout_is_one_episode(tmp_path: Path, log: LogWriter):
    log.startup().traffic(10, 120, ranks=("TP0",)).posts(122, 2000, every=20)
    for k in range(6):                                   # every 300 s while the stall lasts
        log.watchdog(420 + 300 * k, "TP0", soft=True).watchdog(420 + 300 * k, "TP1", soft=True)
    f = by_rule(analyze_folder(log.write(tmp_path / "soft")))
    (kill,) = f["watchdog-kill"]
    assert kill["count"] == 6 and kill["ts"] == at(420) and kill["ts_end"] == at(1920)
    assert kill["ranks"] == ["TP0", "TP1"] and kill["title"].startswith("Soft")
    (busy,) = f.get("busy-leak-report", [None])         # the dump's pool text: one red herring, not six
    assert busy is None or busy["count"] == 6


def test_progress_between_firings_starts_a_new_episode(tmp_path: Path, log: LogWriter):
    log.startup().traffic(10, 120).watchdog(420, "TP0", soft=True)
    log.traffic(430, 600).posts(602, 1100, every=20).watchdog(900, "TP0", soft=True)
    f = by_rule(analyze_folder(log.write(tmp_path / "two")))
    kills = sorted(f["watchdog-kill"], key=lambda k: k["ts"])
    assert [(k["ts"], k["count"]) for k in kills] == [(at(420), 1), (at(900), 1)]


def test_idle_leak_warned_at_every_idle_check_is_one_leak(tmp_path: Path, log: LogWriter):
    log.startup()
    for k in range(5):                                   # busy, then an idle check that warns, again and again
        a = 10 + 120 * k
        log.traffic(a, a + 60)
        for r in ("TP0", "TP1", "TP2", "TP3")[: 4 if k != 2 else 3]:
            log.line(a + 70, "token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens=226498, "
                             "available_size=194411, evictable_size=32026, protected_size=0, session_held=0", r)
    f = by_rule(analyze_folder(log.write(tmp_path / "leak")))
    assert set(f) == {"idle-memory-leak"}
    (leak,) = f["idle-memory-leak"]
    assert leak["count"] == 5 and leak["ts"] == at(80) and leak["ts_end"] == at(560)
    assert leak["ranks"] == ["TP0", "TP1", "TP2", "TP3"]


def test_a_leak_after_a_restart_is_another_leak(tmp_path: Path, log: LogWriter):
    log.startup().traffic(10, 60).line(70, "token_to_kv_pool_allocator memory leak detected! "
                                           "self.max_total_num_tokens=100, available_size=90, evictable_size=0, "
                                           "protected_size=0, session_held=0", "TP0")
    log.startup(400).traffic(410, 460).line(470, "token_to_kv_pool_allocator memory leak detected! "
                                                 "self.max_total_num_tokens=100, available_size=80, evictable_size=0, "
                                                 "protected_size=0, session_held=0", "TP0")
    leaks = by_rule(analyze_folder(log.write(tmp_path / "restart")))["idle-memory-leak"]
    assert sorted(x["ts"] for x in leaks) == [at(70), at(470)]


# -- liveness probes by behaviour -------------------------------------------------------------------------
def _stall_with_gets(log: LogWriter, path: str, every: float, jitter: bool = False) -> LogWriter:
    log.startup().traffic(10, 120).posts(122, 500, every=5)
    s, k = 125.0, 0
    while s <= 500:
        log.access(s, path)
        k += 1
        s += every + ((k * 7) % 13 if jitter else 0)
    return log


def test_a_probe_is_recognised_by_its_behaviour_whatever_the_path(tmp_path: Path, log: LogWriter):
    f = by_rule(analyze_folder(_stall_with_gets(log, "/get_model_info", 15).write(tmp_path / "gmi")))
    (blind,) = f["health-check-blind"]
    assert blind["ts"] == at(125) and blind["ts_end"] == at(500) and blind["count"] == 26
    assert "/get_model_info" in blind["title"]


def test_a_metrics_scrape_and_irregular_gets_are_not_probes(tmp_path: Path):
    f = by_rule(analyze_folder(_stall_with_gets(LogWriter(), "/metrics", 15).write(tmp_path / "metrics")))
    assert "stall-onset" in f and "health-check-blind" not in f
    f = by_rule(analyze_folder(_stall_with_gets(LogWriter(), "/v1/models", 3, jitter=True).write(tmp_path / "irr")))
    assert "stall-onset" in f and "health-check-blind" not in f


# -- stall versus idle, by cadence and running work ------------------------------------------------------
def test_dozens_running_that_never_complete_is_a_stall_without_new_requests(tmp_path: Path, log: LogWriter):
    log.startup()
    for s in range(10, 121):
        log.batch(s, running=40)
    log.probes(125, 600)                                 # only probes after: no request arrives
    f = by_rule(analyze_folder(log.write(tmp_path / "running")))
    (stall,) = f["stall-onset"]
    assert stall["ts"] == at(120) and "40 requests were running" in stall["detail"]
    assert f["health-check-blind"][0]["ts"] == at(125)


def test_a_workload_tailing_off_to_a_few_is_idle(tmp_path: Path, log: LogWriter):
    log.startup()
    for i, s in enumerate(range(10, 60)):
        log.batch(s, running=max(2, 30 - i))
    for s in range(60, 64):
        log.access(s, "/v1/chat/completions", 200, "POST")   # the last ones complete
    log.probes(70, 900)
    assert analyze_folder(log.write(tmp_path / "tail")) == []


def test_running_requests_that_visibly_complete_are_not_a_stall(tmp_path: Path, log: LogWriter):
    log.startup()
    for s in range(10, 60):
        log.batch(s, running=12)
    for s in range(60, 72):
        log.access(s, "/generate", 200, "POST")          # twelve completions right after the last line
    log.probes(75, 900)
    assert analyze_folder(log.write(tmp_path / "done")) == []


def test_a_slow_prefill_gap_followed_by_progress_is_not_a_stall(tmp_path: Path, log: LogWriter):
    log.startup().traffic(10, 100)
    log.batch(170, kind="Prefill", running=20)            # a 70 s chunked prefill, then progress again
    log.traffic(171, 260).probes(100, 260)
    assert analyze_folder(log.write(tmp_path / "slow")) == []


# -- watchdog fire times alone show a group freeze -----------------------------------------------------
def test_watchdogs_within_a_second_across_a_clock_second_froze_together(tmp_path: Path):
    lines = []
    for r, t in (("TP0", "10:04:59.900"), ("TP1", "10:04:59.950"), ("TP2", "10:05:00.100"), ("TP3", "10:05:00.200")):
        lines.append(f"[2026-05-01 {t} {r}] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)")
    (tmp_path / "wd").mkdir()
    (tmp_path / "wd" / "paste.txt").write_text("\n".join(lines) + "\n")
    f = by_rule(analyze_folder(tmp_path / "wd"))
    (frozen,) = f["all-ranks-frozen"]
    assert frozen["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert frozen["ts_basis"] == "inferred" and frozen["ts"] == datetime(2026, 5, 1, 9, 59, 59, 900000)
    # interface.md: ts = the first rank's stop, ts_end = the last's (each its timeout before its firing)
    assert frozen["ts_end"] == datetime(2026, 5, 1, 10, 0, 0, 200000)
    (kill,) = f["watchdog-kill"]
    assert kill["count"] == 1 and kill["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert "first-rank-stopped" not in f and "collective-desync" not in f


def test_one_rank_watchdog_alone_claims_no_freeze(tmp_path: Path):
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "wd.txt").write_text(
        "[2026-09-25 10:55:58 PP1 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)\n")
    f = by_rule(analyze_folder(tmp_path / "one"))
    assert [k["ranks"] for k in f["watchdog-kill"]] == [["PP1 TP0"]]
    assert "all-ranks-frozen" not in f and "first-rank-stopped" not in f


# -- ProcessGroupNCCL records: compared per process group -------------------------------------------------
def _torch_paste(tmp_path: Path, name: str, lines: list[str]) -> Path:
    (tmp_path / name).mkdir()
    (tmp_path / name / "stderr.txt").write_text("\n".join(lines) + "\n")
    return tmp_path / name


def test_ranks_disagreeing_on_seqnum_in_one_group_is_a_desync_naming_the_minority(tmp_path: Path):
    lines = torch_timeout(0, 10, 5001) + torch_timeout(1, 10.2, 5000, "BROADCAST") + torch_timeout(2, 10.4, 5000, "BROADCAST")
    f = by_rule(analyze_folder(_torch_paste(tmp_path, "desync", lines)))
    (desync,) = f["collective-desync"]
    assert desync["ranks"] == ["rank0"]
    assert "SeqNum=5001" in desync["detail"] and "rank 0 is past SeqNum=5000" in desync["detail"]
    sigs = [s for s in f["known-signature"] if s["signature"] == "nccl-collective-timeout"]
    assert len(sigs) == 2                                 # once per collective: SeqNum 5000 and 5001


def test_torch_timeouts_alone_name_the_stopped_ranks_of_the_stall(tmp_path: Path):
    """No SGLang line, so no SGLang rank: the stall's ranks are the torch ranks whose collectives timed out."""
    lines = torch_timeout(0, 10, 5000) + torch_timeout(2, 10.3, 5000) + torch_timeout(3, 10.1, 5000)
    f = by_rule(analyze_folder(_torch_paste(tmp_path, "agree", lines)))
    (stall,) = f["stall-onset"]
    assert stall["ranks"] == ["rank0", "rank2", "rank3"]
    assert stall["ts_basis"] == "inferred" and stall["ts"] == at(10) - timedelta(seconds=600.081)


def test_timeouts_of_several_process_groups_are_never_compared(tmp_path: Path):
    lines = (torch_timeout(13, 10, 2132, "ALLTOALL_BASE", "PG 130", 1) + torch_timeout(7, 10, 2132, "ALLTOALL_BASE", "PG 130", 0)
             + torch_timeout(8, 10, 1772, "_ALLGATHER_BASE", "PG 320", 3)
             + torch_timeout(1, 10, 1772, "_ALLGATHER_BASE", "PG 320", 1))
    f = by_rule(analyze_folder(_torch_paste(tmp_path, "multi", lines)))
    assert "collective-desync" not in f and "first-rank-stopped" not in f
    sigs = sorted(s["detail"].split(" of ")[1].split(" timed")[0] for s in f["known-signature"])
    assert len(sigs) == 2 and any("PG 130" in s for s in sigs) and any("PG 320" in s for s in sigs)


def test_agreeing_peers_and_a_known_group_size_name_exactly_the_absent_rank(tmp_path: Path, log: LogWriter):
    log.startup().traffic(10, 120).posts(122, 800)
    for r in (0, 1, 3):
        log.nccl_timeout(720, r)
    f = by_rule(analyze_folder(log.write(tmp_path / "absent")))
    (first,) = f["first-rank-stopped"]
    assert first["ranks"] == ["TP2"] and first["ts"] is None
    assert "collective-desync" not in f


def test_torch_global_ranks_of_two_nodes_name_only_the_absent_one(tmp_path: Path):
    """TP16 over two nodes: each node's log has its own ranks' timeout lines; rank 11 never reports."""
    eng = tmp_path / "two-node"
    for node, ranks in (("node0.log", range(0, 8)), ("node1.log", range(8, 16))):
        log = LogWriter(tp=16)
        if node == "node0.log":
            log.startup().traffic(10, 120).posts(122, 900)
        else:
            log.line(1, "Init torch distributed ends. elapsed=3.1 s, mem usage=0.7 GB", "TP8")
        for r in ranks:
            if r != 11:
                log.nccl_timeout(720 + r * 0.01, r)
        log.write(eng, node)
    f = by_rule(analyze_folder(eng))
    (first,) = f["first-rank-stopped"]
    assert first["ranks"] == ["TP11"]


# -- the cadence and the longest silence, measured set-wise ----------------------------------------------
def _gaps_by_definition(rows: list[tuple]) -> tuple[dict, dict]:
    """(engine -> longest gap, (engine, run) -> cadence) from every progress line (engine, run, rank, ts): each
    rank's lines in time order, a gap to the line before; the cadence the median of a run's gaps over 0 s whose
    line before is in the same run."""
    import statistics
    from collections import defaultdict

    by_rank: dict[tuple, list] = defaultdict(list)
    for engine, seg, rank, ts in rows:
        by_rank[(engine, rank)].append((ts, seg))
    gap: dict[tuple, float] = {}
    within: dict[tuple, list] = defaultdict(list)
    runs = {(engine, seg) for engine, seg, _, _ in rows}
    for (engine, _), lines in by_rank.items():
        lines.sort(key=lambda x: x[0])
        for (before, seg_before), (ts, seg) in zip(lines, lines[1:], strict=False):
            g = (ts - before).total_seconds()
            gap[(engine, seg)] = max(gap.get((engine, seg), g), g)
            if g > 0 and seg_before == seg:
                within[(engine, seg)].append(g)
    longest: dict[str, float] = {}
    for (engine, _), g in gap.items():
        longest[engine] = max(longest.get(engine, g), g)
    return longest, {run: statistics.median(within[run]) if within[run] else None for run in runs}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.tuples(st.integers(0, 2), st.floats(0, 400)), min_size=1, max_size=60),
       restart=st.one_of(st.none(), st.integers(100, 300)))
@example(lines=[(0, 0.0), (0, 10.0), (0, 10.5), (0, 101.0), (0, 103.0)], restart=100)   # (the gap across the restart)
def test_cadence_and_longest_silence_are_those_of_every_line_of_each_rank(tmp_path_factory, lines, restart):
    """Several lines of a rank in one clock second (a busy log), ranks interleaved, a restart: the set-wise
    measure gives each run's cadence and each engine's longest silence as every line, one by one, does."""
    from hangforensics.analysis.progress.segments import SEGS, segments_all, segments_table
    from hangforensics.analysis.progress.stalls import _progress_gaps
    from hangforensics.ingest.pipeline import ingest_paths
    from hangforensics.store import Store

    tmp = tmp_path_factory.mktemp("gaps")
    log = LogWriter(tp=3).startup(-10)
    for rank, s in sorted(lines, key=lambda x: x[1]):
        if restart is not None and s >= restart:        # a second run from the restart on
            log.startup(restart)
            restart = None
        log.batch(s, f"TP{rank}")
    (tmp / "fleet" / "e1").mkdir(parents=True)
    (tmp / "fleet" / "e1" / "server.log").write_text("\n".join(log.lines) + "\n")
    with Store(tmp / "db.duckdb") as store:
        ingest_paths(store, [tmp / "fleet"], mode="fleet")
        engines = ["e1"]
        segs = segments_all(store, engines)
        segments_table(store, SEGS, [s for e in engines for s in segs[e]])
        rows = store.con.execute(
            f"SELECT p.engine, s.seg, p.rank, p.ts FROM progress p JOIN {SEGS} s ON s.engine = p.engine "
            "AND (s.seg_start IS NULL OR p.ts >= s.seg_start) AND (s.seg_end IS NULL OR p.ts < s.seg_end) "
            "WHERE p.ts IS NOT NULL").fetchall()
        gaps, cadence = _progress_gaps(store, engines)
    longest, expected = _gaps_by_definition(rows)
    assert cadence == expected
    assert {e: g for e, g in gaps.items() if g} == {e: g for e, g in longest.items() if g}
