"""Runs of a server without their start line in the evidence (analysis/progress/segments.py): a restart is
inferred where the batch lines' rank labels change form, or where server logs resume in other files long
after the earlier ones ended.  Each test asserts the runs and what the rules then say, negatives too: a
silence inside one file, rotated files, one run's node logs on another clock, overlapping forms."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import LogWriter, analyze_folder, by_rule
from envelope_wrappers import WRAPPERS

from hangforensics.analysis.progress.segments import LOG_GAP_S, segments_all
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

DP4 = tuple(f"DP{i} TP{i} EP{i}" for i in range(4))
DP2 = tuple(f"DP{i} TP{i}" for i in range(2))


def runs_of(folder: Path) -> list[tuple[datetime | None, datetime | None]]:
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        (segs,) = segments_all(st, [folder.name]).values()
    return [(s.start, s.end) for s in segs]


def frozen(log: LogWriter, a: float, b: float, ranks: tuple[str, ...], end: float = 0) -> LogWriter:
    """Serving from a to b on ``ranks``, then every rank stops at once while requests keep arriving (and the
    health probe keeps answering) until ``end``."""
    end = end or b + 600
    return log.traffic(a, b, ranks=ranks).posts(b + 2, end, every=7).probes(b + 5, end)


def test_labels_of_another_parallelism_in_one_paste_are_another_run(tmp_path: Path):
    """A ticket pastes the previous pod's tail (TP ranks, its start cut) and the new pod's log (data-parallel
    attention, its start cut too): the old pod's TP0 is not the rank that stopped first."""
    old = LogWriter().traffic(0, 100, ranks=("TP0", "TP1", "TP2", "TP3")).probes(101, 130)
    new = frozen(LogWriter(start="2026-05-01 10:05:00"), 20, 300, DP4)
    text = ("Previous pod (`kubectl logs --previous`):\n\n```\n" + "\n".join(old.lines) + "\n```\n\n"
            "After the restart it hung again:\n\n```log\n" + "\n".join(new.lines) + "\n```\n")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "ticket.md").write_text(text)
    restart = datetime(2026, 5, 1, 10, 5, 20)                 # the new pod's first line: its first batch
    assert runs_of(tmp_path / "e") == [(None, restart), (restart, None)]
    f = by_rule(analyze_folder(tmp_path / "e"))
    assert "first-rank-stopped" not in f
    (fz,) = f["all-ranks-frozen"]
    assert fz["ranks"] == list(DP4) and fz["ts"] == datetime(2026, 5, 1, 10, 10, 0)
    (st,) = f["stall-onset"]
    assert st["ts"] == datetime(2026, 5, 1, 10, 10, 0) and not set(st["ranks"]) & {"TP0", "TP1", "TP2", "TP3"}


def test_the_new_run_begins_after_the_longest_silence_between_the_two_forms(tmp_path: Path):
    """Between the old form's last batch line and the new form's first, the old server's access lines
    go on a little and the new one's startup lines come before its first batch: the run begins after the
    silence between them."""
    log = LogWriter().traffic(0, 60, ranks=("TP0", "TP1")).probes(61, 100)          # old run, then idle
    log.line(400, "Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16", "DP0 TP0")   # new, start cut
    log.line(401, "Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16", "DP1 TP1")
    log.traffic(420, 500, ranks=DP2)
    runs = runs_of(log.write(tmp_path / "e"))
    restart = log.t0 + timedelta(seconds=400)
    assert runs == [(None, restart), (restart, None)]


def test_same_labels_resuming_months_later_in_another_file_are_another_run(tmp_path: Path):
    """The server log of a March run (dp 4, ranks DP0-DP3) beside May's log of the same deployment (dp 2, its
    start rotated away) that hung: March's DP2 and DP3 did not stop first in May."""
    march = LogWriter(start="2026-03-02 10:00:00").startup().traffic(10, 300, ranks=tuple(f"DP{i} TP{i}" for i in range(4)))
    may = frozen(LogWriter(start="2026-05-19 16:00:00"), 0, 200, DP2)
    march.write(tmp_path / "e", "server-0302.log")
    may.write(tmp_path / "e", "server.log")
    restart = datetime(2026, 5, 19, 16, 0, 0)
    assert runs_of(tmp_path / "e") == [(None, restart), (restart, None)]
    f = by_rule(analyze_folder(tmp_path / "e"))
    assert "first-rank-stopped" not in f
    (fz,) = f["all-ranks-frozen"]
    assert fz["ranks"] == list(DP2)


def test_logs_resuming_after_a_shorter_silence_are_the_same_run(tmp_path: Path):
    """Rotated during a hang: the last batch line with work pending closes server.log.1, the probes and
    requests go on in server.log after a silence under LOG_GAP_S.  One run: its stall is found."""
    before = LogWriter().startup().traffic(10, 120, ranks=("TP0", "TP1")).posts(122, 200, every=5)
    after = LogWriter().posts(LOG_GAP_S - 600, LOG_GAP_S - 100, every=5).probes(LOG_GAP_S - 595, LOG_GAP_S - 100)
    before.write(tmp_path / "e", "server.log.1")
    after.write(tmp_path / "e", "server.log")
    assert runs_of(tmp_path / "e") == [(None, None)]
    (st,) = by_rule(analyze_folder(tmp_path / "e"))["stall-onset"]
    assert st["ts"] == before.t0 + timedelta(seconds=120)


def test_a_long_silence_inside_one_file_is_not_a_restart(tmp_path: Path):
    """A night without traffic in one log, then a hang where TP1 stops 5 s after TP0: one run, and TP0 is
    the rank that stopped first (the night's silence is not mistaken for a stop)."""
    log = LogWriter(tp=2).startup().traffic(10, 100, ranks=("TP0", "TP1"))
    day = LOG_GAP_S * 2
    log.traffic(day, day + 100, ranks=("TP0", "TP1")).traffic(day + 101, day + 105, ranks=("TP1",))
    log.posts(day + 107, day + 700, every=7)
    assert runs_of(log.write(tmp_path / "e")) == [(None, None)]
    (first,) = by_rule(analyze_folder(tmp_path / "e"))["first-rank-stopped"]
    assert first["ranks"] == ["TP0"] and first["ts"] == log.t0 + timedelta(seconds=day + 100)


def test_an_access_log_spanning_the_silence_joins_the_logs(tmp_path: Path):
    """The scheduler logs of one run eight hours apart, the HTTP server's log answering all along."""
    a = LogWriter().startup().traffic(10, 100, ranks=("TP0",))
    b = LogWriter().traffic(8 * 3600, 8 * 3600 + 100, ranks=("TP0",))
    access = LogWriter()
    for s in range(0, 8 * 3600 + 200, 600):
        access.access(s)
    a.write(tmp_path / "e", "scheduler-0.log")
    b.write(tmp_path / "e", "scheduler-1.log")
    access.write(tmp_path / "e", "access.log")
    assert runs_of(tmp_path / "e") == [(None, None)]


def test_node_logs_on_another_clock_are_not_another_run(tmp_path: Path):
    """Two nodes of one run, the second logging eight hours ahead (another time zone, no startup milestone to
    align by): their ranks differ entirely, so the silence between the two spans is not a restart."""
    node0 = LogWriter().traffic(0, 300, ranks=("TP0",)).line(301, "Decode out of memory happened.", "TP1")
    node1 = LogWriter(start="2026-05-01 18:00:00").line(0, "KV cache pool is full. Retract requests.", "TP2")
    node1.line(300, "Decode out of memory happened.", "TP3")
    node0.write(tmp_path / "e", "node0.log")
    node1.write(tmp_path / "e", "node1.log")
    assert runs_of(tmp_path / "e") == [(None, None)]


def test_forms_that_overlap_in_time_are_not_a_restart(tmp_path: Path):
    """Two forms of labels interleaved (two servers' logs in one folder): no run is inferred from them."""
    log = LogWriter().traffic(0, 100, ranks=("TP0",))
    log.traffic(50, 150, ranks=("DP0 TP0",))
    assert runs_of(log.write(tmp_path / "e")) == [(None, None)]


def test_an_inferred_restart_splits_even_without_any_start_line(tmp_path: Path):
    """No server_args at all, and the one before the gap: both give two runs (a start line is not needed on
    either side of an inferred restart)."""
    a = LogWriter(start="2026-03-02 10:00:00").traffic(0, 100, ranks=("TP0",))
    b = LogWriter(start="2026-03-03 10:00:00").traffic(0, 100, ranks=("TP0",))
    a.write(tmp_path / "e", "a.log")
    b.write(tmp_path / "e", "b.log")
    day2 = datetime(2026, 3, 3, 10, 0, 0)
    assert runs_of(tmp_path / "e") == [(None, day2), (day2, None)]
    b2 = LogWriter(start="2026-03-03 10:00:00").startup().traffic(10, 100, ranks=("TP0",))
    b2.write(tmp_path / "f", "b.log")
    a.write(tmp_path / "f", "a.log")
    assert runs_of(tmp_path / "f") == [(None, day2), (day2, None)]


def test_runs_are_stored_and_a_signal_repeated_across_an_inferred_restart_is_two_episodes(tmp_path: Path):
    """The soft watchdog of a March run fired once; in May (the log's start rotated away) it fires again
    before any batch line: two episodes in two runs, not one firing seen twice.  ``runs`` says why each run
    began."""
    from hangforensics.analysis.findings import run_rules

    march = LogWriter(start="2026-03-02 10:00:00").startup().traffic(10, 100, ranks=("TP0",))
    march.posts(102, 800, every=10).watchdog(400, "TP0", soft=True)
    may = LogWriter(start="2026-05-19 16:00:00").posts(0, 600, every=10).watchdog(300, "TP0", soft=True)
    march.write(tmp_path / "e", "server.log.1")
    may.write(tmp_path / "e", "server.log")
    with Store(":memory:") as st:
        ingest_paths(st, [tmp_path / "e"], mode="engine")
        kills = by_rule(run_rules(st))["watchdog-kill"]
        runs = st.con.execute("SELECT segment, start_ts, end_ts, started_by FROM runs ORDER BY segment").fetchall()
        (facts,) = st.con.execute("SELECT facts FROM engine_summaries").fetchone()
    assert [f for f in facts if f.startswith("Another run")] == [
        "Another run of the server from 2026-05-19 16:00:00, its start line not in the evidence (its logs begin "
        "more than 6 h after every earlier log ended): each run is judged on its own."]
    restart = datetime(2026, 5, 19, 16, 0, 0)
    assert runs == [(0, None, restart, None), (1, restart, None, "logs resumed")]
    assert sorted((k["ts"], k["count"]) for k in kills) == [
        (march.t0 + timedelta(seconds=400), 1), (restart + timedelta(seconds=300), 1)]


def test_a_year_guessed_wrong_is_not_another_run(tmp_path: Path):
    """A ticket's paste of TP2's stderr: torch lines print no year, and the file's modification time (set by
    an archive, months before the incident) makes them a year early.  The silence of a year between it and
    the server log is a wrong guess, not a restart."""
    import os

    timeout = ("[rank{r}]:[E1105 16:39:14.5117{k}4149 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
               "collective operation timeout: WorkNCCL(SeqNum=577582, OpType=ALLREDUCE, NumelIn=196608, "
               "NumelOut=196608, Timeout(ms)=240000) ran for 240011 milliseconds before timing out.")
    # the server log holds its own ranks' timeouts (dated by its lines), the paste TP2's
    log = LogWriter(start="2026-11-05 16:30:00").startup().traffic(10, 300, ranks=("TP0",)).posts(302, 600)
    for r in (0, 1, 2, 3):
        log.raw(timeout.format(r=r, k=1))
    log.write(tmp_path / "e")
    paste = tmp_path / "e" / "tp2-stderr.txt"
    paste.write_text("".join(timeout.format(r=2, k=k) + "\n" for k in range(3)))
    june = datetime(2026, 6, 1, 12, 0, 0).timestamp()
    os.utime(paste, (june, june))
    assert runs_of(tmp_path / "e") == [(None, None)]
    # the same paste dated by a later modification time: the same run too
    os.utime(paste, (june + 200 * 86400, june + 200 * 86400))
    assert runs_of(tmp_path / "e") == [(None, None)]


def test_each_incident_report_shows_its_own_runs_ranks_and_time(tmp_path: Path):
    """An engine whose March run (TP ranks) and May run (data-parallel ranks, its start cut) both stalled: two
    incidents, and each report's timeline holds its own run's ranks within that run's time, not the other's."""
    import re

    from hangforensics.fleet.scan import scan

    march = LogWriter(start="2026-03-02 10:00:00", tp=2).startup().traffic(10, 200, ranks=("TP0", "TP1"))
    march = frozen(march, 201, 205, ("TP0", "TP1"))
    may = frozen(LogWriter(start="2026-05-19 16:00:00"), 0, 200, DP2)
    march.write(tmp_path / "fleet" / "e", "server.log.1")
    may.write(tmp_path / "fleet" / "e", "server.log")
    from hangforensics.api import report

    def timeline(html: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        span = re.search(r"Progress lines per logging rank \((\d\d:\d\d:\d\d) to (\d\d:\d\d:\d\d)\)", html)
        assert span is not None
        return tuple(sorted(set(re.findall(r'class="rank-row" data-rank="([^"]+)"', html)))), span.groups()

    scan(tmp_path / "fleet", tmp_path / "db.duckdb", out=tmp_path / "out", jobs=1)
    pages = dict(timeline(p.read_text()) for p in (tmp_path / "out" / "incidents").glob("*.html"))
    # each window: from its run's first line (under 10 min before the stall) to the end of the run's evidence
    assert pages == {("TP0", "TP1"): ("10:00:00", "10:13:22"), DP2: ("16:00:00", "16:13:17")}
    # the engine's report: the run of its latest stall
    report(tmp_path / "fleet" / "e", tmp_path / "e.html")
    assert timeline((tmp_path / "e.html").read_text()) == (DP2, ("16:00:00", "16:13:17"))


def test_garbled_years_and_undated_files_infer_nothing_and_break_nothing(tmp_path: Path):
    """Lines dated year 0001 (a garbled clock) in one file and 0001 plus a day in another, and a file without a
    single dated line: the runs are still read, and no restart comes of the undated file."""
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "a.log").write_text(
        "[0001-01-01 10:00:00 TP0] Decode batch, #running-req: 1, #token: 700, token usage: 0.02, cuda graph: True, "
        "gen throughput (token/s): 512.40, #queue-req: 0\n")
    (tmp_path / "e" / "b.log").write_text(
        "[0001-01-02 10:00:00 TP0] Decode batch, #running-req: 1, #token: 700, token usage: 0.02, cuda graph: True, "
        "gen throughput (token/s): 512.40, #queue-req: 0\n")
    (tmp_path / "e" / "c.log").write_text("Decode batch, #running-req: 1, #token: 700, token usage: 0.02\n")
    day2 = datetime(1, 1, 2, 10, 0, 0)
    assert runs_of(tmp_path / "e") == [(None, day2), (day2, None)]


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_the_runs_and_findings_are_the_same_behind_every_envelope(tmp_path: Path, name: str):
    """The March log beside May's log of another parallelism (its start cut), May's as a collector or a person
    handed it over: the same runs, the same findings as the plain file."""
    march = LogWriter(start="2026-03-02 10:00:00").startup().traffic(10, 300, ranks=("TP0", "TP1"))
    may = frozen(LogWriter(start="2026-05-19 16:00:00"), 0, 200, DP2)

    def judged(folder: Path, lines: list[str]) -> tuple[list, list]:
        march.write(folder, "server-0302.log")
        (folder / "may.log").write_text("\n".join(lines) + "\n")
        found = sorted((f["rule"], f["ts"], tuple(f["ranks"])) for f in analyze_folder(folder))
        return runs_of(folder), found

    wrappers, _ = WRAPPERS[name]
    lines = may.lines
    for w in wrappers:
        lines = w(lines)
    plain = judged(tmp_path / "plain" / "e", may.lines)
    restart = datetime(2026, 5, 19, 16, 0, 0)
    assert plain[0] == [(None, restart), (restart, None)]
    assert judged(tmp_path / name / "e", lines) == plain
