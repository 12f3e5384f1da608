"""Never silent (interface.md §3 engines[], §4 engine_summaries, §5): every engine read is summarised
with a true verdict and what to capture next; request text is redacted in every output."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from conftest import LogWriter
from test_report_safety import PROMPT, TOKEN, _payload_engine, open_page, quoting_rules  # noqa: F401 (fixtures)

from hangforensics import api
from hangforensics.fleet.scan import scan


def _doc(folder: Path, tmp_path: Path, **kw) -> dict:
    res = api.report(folder, tmp_path / f"{folder.name}.html", json_out=tmp_path / f"{folder.name}.json", **kw)
    return json.loads(res.json.read_text())


def test_an_idle_engine_with_no_finding_still_gets_a_true_verdict_and_capture_next(tmp_path: Path):
    log = LogWriter()
    log.startup().traffic(10, 200).probes(210, 900)
    doc = _doc(log.write(tmp_path / "quiet"), tmp_path)
    assert doc["findings"] == []
    (eng,) = doc["engines"]
    assert eng["engine"] == "quiet"
    assert eng["verdict"].startswith("Idle since 10:03:20")          # the last batch line
    assert eng["span"] == ["2026-05-01T10:00:00", "2026-05-01T10:15:00"]
    assert eng["files"] == {"server_log": 1} and eng["unparsed_lines"] == 0
    assert "TP0" in eng["ranks"] and eng["capture_next"]
    assert eng["died"] is False


def test_torch_timeouts_from_half_the_ranks_ask_for_the_missing_ranks(tmp_path: Path):
    log = LogWriter(tp=8)
    log.startup().traffic(10, 120).posts(122, 800)
    for r in (0, 1, 2, 3):                                       # one node's stderr only
        log.nccl_timeout(720, r)
    doc = _doc(log.write(tmp_path / "half"), tmp_path)
    rules = {f["rule"] for f in doc["findings"]}
    assert "first-rank-stopped" not in rules                     # four absent of eight: not "one stopped first"
    (eng,) = doc["engines"]
    assert any("timeout lines of ranks 4, 5, 6, 7" in c for c in eng["capture_next"])


def test_two_timed_out_collectives_say_their_signature_once_and_keep_every_rank_family(tmp_path: Path):
    """Two known-signature findings (one per timed-out SeqNum) are one clause of the verdict and one sentence
    of the report; torch ranks beside SGLang-labelled stacks all stay in the report's rank list."""
    from test_judging import torch_timeout

    (tmp_path / "two").mkdir()
    lines = torch_timeout(0, 10, 5001) + torch_timeout(1, 10.2, 5000) + torch_timeout(2, 10.4, 5000)
    (tmp_path / "two" / "stderr.txt").write_text("\n".join(lines) + "\n")
    doc = _doc(tmp_path / "two", tmp_path)
    assert len([f for f in doc["findings"] if f["rule"] == "known-signature"]) == 2
    (eng,) = doc["engines"]
    assert eng["verdict"].count("matches the known signature nccl-collective-timeout") == 1
    html = (tmp_path / "two.html").read_text()
    assert html.count("matches the known hang signature &#39;nccl-collective-timeout&#39;") == 1


def test_a_watchdog_only_paste_shows_the_group_freeze_and_asks_for_stacks_and_the_log(tmp_path: Path, open_page):  # noqa: F811
    eng = tmp_path / "wd-only"
    eng.mkdir()
    (eng / "wd.txt").write_text("".join(
        f"[2025-08-06 13:19:59 TP{r}] Watchdog timeout (self.watchdog_timeout=300)\n\n" for r in range(8)))
    res = api.report(eng, tmp_path / "wd.html", json_out=tmp_path / "wd.json")
    doc = json.loads(res.json.read_text())
    assert {f["rule"] for f in doc["findings"]} >= {"all-ranks-frozen", "watchdog-kill"}
    (summary,) = doc["engines"]
    assert "all 8 ranks froze together" in summary["verdict"]
    nxt = " ".join(summary["capture_next"])
    assert "py-spy dump --native of every scheduler rank" in nxt and "server log from before the watchdog" in nxt
    page, _ = open_page(tmp_path / "wd.html")
    assert "froze together" in page.locator("#verdict p.headline").inner_text()
    items = page.locator("ol[data-capture-next] li")
    assert items.count() >= 2 and "py-spy" in items.all_inner_texts()[0] + items.all_inner_texts()[1]


def _canary_everywhere(tmp_path: Path, show: bool) -> list[str]:
    """Every output of a report run, as text: the findings document, the findings and summaries tables."""
    db = tmp_path / ("shown.duckdb" if show else "redacted.duckdb")
    doc = _doc(_payload_engine(tmp_path / ("s" if show else "r")), tmp_path, db=db, show_payloads=show)
    con = duckdb.connect(str(db), read_only=True)
    tables = [str(con.execute(f"SELECT * FROM {t}").fetchall()) for t in ("findings", "engine_summaries")]
    evidence = str(con.execute("SELECT message FROM events WHERE message LIKE 'Receive:%'").fetchall())
    con.close()
    return [json.dumps(doc), *tables, evidence]


def test_request_text_is_redacted_in_json_and_tables_unless_show_payloads(tmp_path: Path, quoting_rules):  # noqa: F811
    doc, findings, summaries, evidence = _canary_everywhere(tmp_path, show=False)
    assert "request-in-flight" in doc                             # the quoting rule fired ...
    for out in (doc, findings, summaries):                        # ... and nothing it quoted leaks
        assert PROMPT not in out and TOKEN not in out
    assert "payload redacted" in doc
    assert PROMPT in evidence                                     # the evidence views keep what the files say
    doc, findings, summaries, _ = _canary_everywhere(tmp_path, show=True)
    assert PROMPT in doc and PROMPT in findings


HEARTBEAT = ("[rank{r}]:[E608 14:09:10.21013{r}079 ProcessGroupNCCL.cpp:1484] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
             "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
             "collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog.")


def test_torchs_heartbeat_monitor_alone_is_said_in_its_own_words(tmp_path: Path):
    """Only the heartbeat monitor's lines (the watchdog thread itself blocked): what it means, on which ranks,
    since when; not the raw glog lines quoted as a death."""
    eng = tmp_path / "beat"
    eng.mkdir()
    (eng / "stderr.txt").write_text("\n".join(HEARTBEAT.format(r=r) for r in (0, 1)) + "\n")
    (e,) = _doc(eng, tmp_path)["engines"]
    assert e["verdict"] == ("Torch's heartbeat monitor took the process down on rank0, rank1 at 14:09:10: "
                            "ProcessGroupNCCL's own watchdog thread was stuck for 480 s (a CUDA or NCCL call blocked "
                            "it: the GPU or NCCL hung under it), but no progress line or stack says where the ranks "
                            "stopped.")
    assert e["died"] is True


def test_a_death_beside_the_heartbeat_quotes_the_lines_without_their_glog_prefix(tmp_path: Path):
    eng = tmp_path / "died"
    eng.mkdir()
    (eng / "log.txt").write_text("ERROR 10-30 11:56:48 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 198 "
                                 "died, exit code: -6\n" + HEARTBEAT.format(r=0).replace("E608 14:09:10", "E1030 11:56:49") + "\n")
    (e,) = _doc(eng, tmp_path)["engines"]
    assert e["verdict"].startswith("A process of the engine died or was killed (Worker VllmWorkerProcess pid 198 died")
    assert "ProcessGroupNCCL's watchdog got stuck for 480 seconds" in e["verdict"] and "[rank0]:[E1030" not in e["verdict"]
    assert e["died"] is True


def _scheduler_died(folder: Path, at: float, error: str) -> Path:
    """An engine serving to 10:03:20, then TP0's scheduler raising at ``at`` seconds, its traceback ending in
    ``error``."""
    log = LogWriter()
    log.startup().traffic(10, 200)
    log.line(at, "Scheduler hit an exception: Traceback (most recent call last):", "TP0")
    log.raw('  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2660, in run_scheduler_process\n'
            "    scheduler.event_loop_overlap()\n" + error)
    return log.write(folder)


def _died_after(tmp_path: Path, name: str, at: float, error: str) -> dict:
    (e,) = _doc(_scheduler_died(tmp_path / name, at, error), tmp_path)["engines"]
    assert e["died"] is True                            # nothing found, but a process died
    return e


def test_a_process_that_died_with_nothing_found_is_neither_healthy_nor_a_hang(tmp_path: Path, open_page):  # noqa: F811
    """No rule fires on a scheduler's exception after its last batch line: not a hang. The engine's report frames
    its verdict as a warning, not in the green of a healthy engine; the findings document's ``died`` says so for
    an alert; the nightly scan's fleet index lists the engine under "Nothing found, but a process died" (no
    incident report is written for it), and an idle engine in none of these."""
    fleet = tmp_path / "fleet"
    _scheduler_died(fleet / "crashed", 500, "RuntimeError: NCCL communicator was aborted on rank 0.")
    LogWriter().startup().traffic(10, 200).probes(210, 900).write(fleet / "quiet")
    res = scan(fleet, tmp_path / "fleet.duckdb", out=tmp_path / "out", json_out=tmp_path / "scan.json", jobs=1)
    assert res.document["findings"] == []
    assert {e["engine"]: e["died"] for e in res.document["engines"]} == {"crashed": True, "quiet": False}
    page, _ = open_page(res.index)
    died = page.eval_on_selector_all("#died tr td.mono", "cells => cells.map(c => c.textContent)")
    thin = page.eval_on_selector_all("#thin tr td.mono", "cells => cells.map(c => c.textContent)")
    assert died == ["crashed"] and "crashed" not in thin
    assert "a process of the engine died" in page.inner_text("#died")
    colours = {}
    for name in ("crashed", "quiet"):
        html = tmp_path / f"{name}.html"
        api.report(fleet / name, html)
        page, _ = open_page(html)
        colours[name] = page.eval_on_selector("#verdict", "v => getComputedStyle(v).borderLeftColor")
    assert colours == {"crashed": "rgb(154, 103, 0)", "quiet": "rgb(46, 125, 50)"}    # --warn, --ok


def test_a_scheduler_that_died_minutes_after_its_last_progress_line_is_not_called_idle(tmp_path: Path):
    """The last batch line, five minutes with none, then the scheduler's exception: the engine was not idle
    after its last requests completed, and nothing in between says whether it was stuck until then."""
    e = _died_after(tmp_path, "died-late", 500, "RuntimeError: NCCL communicator was aborted on rank 0.")
    # (the traceback's last line, a c10d error, is a record of its own: the death is said in its words)
    assert e["verdict"] == ("The last progress line at 10:03:20 had 4 requests running; 5 min later (10:08:20) a "
                            "process of the engine died (RuntimeError: NCCL communicator was aborted on rank 0., TP0); "
                            "no watchdog, timeout or stack says whether it was stuck or idle until then.")


def test_a_scheduler_that_died_while_busy_is_not_called_busy_to_the_end(tmp_path: Path):
    e = _died_after(tmp_path, "died-busy", 202, "KeyError: 'rid-42'")
    assert e["verdict"] == ("The last progress line at 10:03:20 had 4 requests running; 2 s later (10:03:22) a "
                            "process of the engine died (KeyError: 'rid-42', TP0).")


def test_a_live_files_unfinished_last_line_left_for_the_next_scan_is_said(tmp_path: Path):
    """A paste copied in just before the scan, its last line without a newline: the scan leaves that line for
    the next one (the file may still be growing) and the engine's summary says so; once the file is older, the
    next scan reads it and the fact is gone."""
    import os

    from hangforensics.fleet.scan import scan

    log = LogWriter()
    log.startup().traffic(10, 200)
    log.line(500, "Scheduler hit an exception: Traceback (most recent call last):", "TP0")
    path = log.write(tmp_path / "fleet" / "eng") / "server.log"
    path.write_text(path.read_text().rstrip("\n"))             # pasted without its last newline

    def engine() -> dict:
        (e,) = scan(tmp_path / "fleet", tmp_path / "s.duckdb").document["engines"]
        return e

    first = engine()
    said = [f for f in first["facts"] if f.startswith("The last line of")]
    assert said == ["The last line of eng/server.log has no newline and the file was written in the last 5 minutes: "
                    "it may still be growing, so that line is left for the next ingest or scan (a one-shot "
                    "`hangforensics report` reads the file as it is)."]
    old = path.stat().st_mtime - 3600
    os.utime(path, (old, old))
    then = engine()
    assert not [f for f in then["facts"] if f.startswith("The last line of")]
    assert "Scheduler hit an exception" not in first["verdict"] and "Scheduler hit an exception" in then["verdict"]


@pytest.mark.parametrize("envelope", ["kubectl", "docker_json", "journald", "paste"])
def test_a_scheduler_death_reads_the_same_behind_every_envelope(tmp_path: Path, envelope: str):
    """The traceback's last line, a c10d error read as a record of its own, takes a collector's time behind
    one: its words are found by where it stands (right after the traceback, with no rank of its own)."""
    plain = _died_after(tmp_path, "plain", 500, "RuntimeError: NCCL communicator was aborted on rank 0.")
    lines = (tmp_path / "plain" / "server.log").read_text().splitlines()
    at = [f"2026-05-01T10:{i // 60 % 60:02d}:{i % 60:02d}.000000000Z" for i in range(len(lines))]
    wrapped = {
        "kubectl": [f"{t} {s}" for t, s in zip(at, lines, strict=True)],
        "docker_json": [json.dumps({"log": s + "\n", "stream": "stderr", "time": t}) for t, s in zip(at, lines, strict=True)],
        "journald": [f"May 01 10:{i // 60 % 60:02d}:{i % 60:02d} node1 python3[4242]: {s}" for i, s in enumerate(lines)],
        "paste": ["The server hung, here is the log:", "", "```", *lines, "```", "", "Any idea?"],
    }[envelope]
    eng = tmp_path / envelope
    eng.mkdir()
    (eng / "server.log").write_text("\n".join(wrapped) + "\n")
    (e,) = _doc(eng, tmp_path)["engines"]
    assert "NCCL communicator was aborted" in plain["verdict"] and e["verdict"] == plain["verdict"]
    assert e["died"] is True                            # flagged behind every envelope, as without one
