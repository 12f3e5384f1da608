"""A torch.distributed job's own lines (tests/data/torch_jobs, real torchrun logs): gloo and c10d errors,
torchrun's elastic agent and its failure summary become records, whatever envelope they arrive in, and the
engine's verdict says which rank died and how (interface.md §3 engines[], §4 events)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import cache
from pathlib import Path

import duckdb
import pytest
from conftest import DATA
from envelope_wrappers import wrap

from hangforensics import api
from hangforensics.parsers.sglang.sglang_log import classify
from hangforensics.parsers.torch_jobs import torch_job

JOBS = DATA / "torch_jobs"
HANG_RULES = {"collective-desync", "first-rank-stopped", "all-ranks-frozen", "stall-onset", "stuck-across-snapshots"}


def _report(folder: Path, out: Path) -> tuple[dict, duckdb.DuckDBPyConnection]:
    out.mkdir(parents=True, exist_ok=True)
    db = out / "x.duckdb"
    api.report(folder, out / "r.html", json_out=out / "r.json", db=db)
    return json.loads((out / "r.json").read_text()), duckdb.connect(str(db), read_only=True)


def _events(con: duckdb.DuckDBPyConnection, kind: str) -> list[dict]:
    cur = con.execute("SELECT path, line, line_end, ts, rank, message, attrs FROM events WHERE kind = ? "
                      "ORDER BY path, line", [kind])
    cols = [d[0] for d in cur.description]
    return [{**dict(zip(cols, r, strict=True)), "attrs": json.loads(r[-1] or "{}")} for r in cur.fetchall()]


def _no_hang(doc: dict) -> None:
    findings = doc["findings"]
    assert not [f for f in findings if f["rule"] in HANG_RULES], findings
    assert not [f for f in findings if f["severity"] in ("critical", "warning")], findings


def _all_lines_accounted(con: duckdb.DuckDBPyConnection) -> None:
    for path, lines, parsed, unparsed in con.execute(
            "SELECT path, lines, parsed_lines, unparsed_lines FROM sources").fetchall():
        assert lines == parsed + unparsed, path
        assert unparsed == con.execute("SELECT count(*) FROM unparsed WHERE path = ?", [path]).fetchone()[0]


# -- the launcher's account: one death per rank --------------------------------------------------------------


def test_torchrun_summary_and_agent_lines_are_deaths_per_rank(tmp_path: Path) -> None:
    doc, con = _report(JOBS / "rank_dies", tmp_path)
    exits = _events(con, "rank_exit")
    summary = {e["rank"]: e for e in exits if e["attrs"].get("source") == "torchrun_summary"}
    got = {r: (e["attrs"]["exit_code"], e["attrs"].get("signal"), e["attrs"]["pid"], e["attrs"]["local_rank"],
               e["attrs"]["root_cause"]) for r, e in summary.items()}
    assert got == {"rank0": (-15, "SIGTERM", 5360, 0, False), "rank1": (-15, "SIGTERM", 5361, 1, False),
                   "rank2": (-9, "SIGKILL", 5362, 2, True), "rank3": (-15, "SIGTERM", 5363, 3, False)}
    # each death is its entry's lines ('[0]:' .. 'traceback :'), dated by its 'time' field
    r2 = summary["rank2"]
    assert (r2["line"], r2["line_end"], r2["ts"]) == (66, 72, datetime(2026, 12, 4, 15, 48, 28))
    assert r2["attrs"]["host"] == "localhost" and "Signal 9 (SIGKILL)" in r2["attrs"]["traceback"]
    # the elastic agent's line: the first observed failure by local rank and pid (no global rank), glog-dated
    (agent,) = [e for e in exits if e["attrs"].get("source") == "elastic_agent"]
    assert agent["rank"] == "" and agent["line"] == 20
    assert agent["ts"] == datetime(2026, 12, 4, 15, 48, 28, 693000)
    assert {k: agent["attrs"][k] for k in ("exit_code", "signal", "local_rank", "pid")} == \
        {"exit_code": -9, "signal": "SIGKILL", "local_rank": 2, "pid": 5362}
    closing = _events(con, "torch_elastic")
    assert [(e["attrs"]["event"], e["attrs"]["pid"], e["attrs"]["signal"]) for e in closing] == \
        [("closing_signal", 5360, "SIGTERM"), ("closing_signal", 5361, "SIGTERM"), ("closing_signal", 5363, "SIGTERM")]
    # the summary is one record from its exception line to its last line, whatever headers it holds
    (summ,) = _events(con, "child_failed")
    assert (summ["line"], summ["line_end"]) == (38, 73)
    assert summ["attrs"] == {"title": "/work/main/tests/realjobs/job.py", "failures": 4, "root_cause_rank": 2}
    _all_lines_accounted(con)
    # nothing of the launcher's is left unparsed (only the job's own progress lines may be)
    assert con.execute("SELECT count(*) FROM unparsed WHERE line > 16").fetchone()[0] == 0
    assert doc["engines"][0]["ranks"] == ["rank0", "rank1", "rank2", "rank3"]


def test_rank_killed_by_sigkill_is_named_with_its_signal(tmp_path: Path) -> None:
    doc, _ = _report(JOBS / "rank_dies", tmp_path)
    _no_hang(doc)
    (eng,) = doc["engines"]
    assert eng["verdict"] == ("The job died: rank2 was killed by SIGKILL (exit code -9) at 15:48:28; the launcher "
                              "then stopped rank0, rank1 and rank3 (SIGTERM).")
    assert any("dmesg" in c and "pid 5362" in c for c in eng["capture_next"]), eng["capture_next"]


def test_gloo_abort_is_the_aborted_ranks_cause(tmp_path: Path) -> None:
    doc, con = _report(JOBS / "size_mismatch", tmp_path)
    (err,) = _events(con, "c10d_error")
    # std::terminate's lines carry no '[rankN]:' prefix; 'what():' belongs to the record
    assert (err["line"], err["line_end"], err["rank"]) == (17, 18, "")
    assert err["attrs"] == {
        "exception": "gloo::EnforceNotMet", "abort": True, "backend": "gloo", "src": "pair.cc:456",
        "error": "size_mismatch", "received_bytes": 2048, "expected_bytes": 512,
        "reason": "Received data size doesn't match expected size (2048 bytes received, 512 expected)"}
    _no_hang(doc)
    (eng,) = doc["engines"]
    # the only rank that aborted is the one whose terminate it was
    assert eng["verdict"].startswith(
        "The job died: rank2 aborted (SIGABRT, exit code -6) at 15:48:37 on gloo::EnforceNotMet: Received data "
        "size doesn't match expected size"), eng["verdict"]
    assert eng["verdict"].endswith("; the launcher then stopped rank0, rank1 and rank3 (SIGTERM).")
    _all_lines_accounted(con)


def test_each_ranks_gloo_error_is_its_own_record(tmp_path: Path) -> None:
    """Ranks 1-3 time out in gloo, rank 0 fails on the closed connection; each '[rankN]:' traceback and
    exception line is that rank's record.  A gloo timeout names no SeqNum: no collectives row, no desync."""
    doc, con = _report(JOBS / "op_mismatch", tmp_path)
    errs = {e["rank"]: e for e in _events(con, "c10d_error")}
    assert sorted(errs) == ["rank0", "rank1", "rank2", "rank3"]
    for r in ("rank1", "rank2", "rank3"):
        a = errs[r]["attrs"]
        assert (a["event"], a["error"], a["op"], a["timeout_ms"], a["src"], a["backend"]) == \
            ("collective_timeout", "timeout", "recv", 15000, "unbound_buffer.cc:78", "gloo"), (r, a)
    a0 = errs["rank0"]["attrs"]
    assert (a0["error"], a0["peer"], a0["src"]) == ("connection_closed", "[127.0.0.1]:29100", "pair.cc:553")
    assert "event" not in a0
    tbs = _events(con, "rank_traceback")
    assert [(t["rank"], t["line"]) for t in tbs] == [("rank2", 17), ("rank0", 30), ("rank1", 43), ("rank3", 56)]
    for t in tbs:                                   # the exception line right after its traceback
        assert errs[t["rank"]]["line"] == t["line_end"] + 1
    assert con.execute("SELECT count(*) FROM collectives").fetchone()[0] == 0
    # the log alone: every rank's steps stop together, then their collectives time out: a shared freeze,
    # and nothing in it names an odd rank (the gloo timeouts name no SeqNum)
    hang = {f["rule"]: f for f in doc["findings"] if f["rule"] in HANG_RULES}
    assert set(hang) == {"all-ranks-frozen", "stall-onset"}, hang
    assert hang["all-ranks-frozen"]["ranks"] == ["rank0", "rank1", "rank2", "rank3"]
    assert doc["engines"][0]["verdict"].startswith("Stalled at 15:48:46; all 4 ranks froze together")
    facts = " ".join(doc["engines"][0]["facts"])
    assert "gloo: Timed out waiting 15000ms for recv operation to complete (rank1, rank2, rank3)" in facts
    _all_lines_accounted(con)


def test_torchs_own_collective_check_names_the_odd_rank(tmp_path: Path) -> None:
    """The same branch under TORCH_DISTRIBUTED_DEBUG=DETAIL (a real job): torch's ProcessGroupWrapper checks
    every collective's fingerprint before it runs and each rank raises 'Detected mismatch between collectives
    on ranks': ranks 0-2 run ALLREDUCE #3 against rank 3's BROADCAST, rank 3 against rank 0's.  Torch's own
    verdict: one collective-desync naming rank 3 (the minority), each rank's statement a collectives row."""
    doc, con = _report(JOBS / "op_mismatch_detail", tmp_path)
    errs = {e["rank"]: e["attrs"] for e in _events(con, "c10d_error")}
    assert sorted(errs) == ["rank0", "rank1", "rank2", "rank3"]
    assert all(a["error"] == "collective_mismatch" for a in errs.values())
    assert [(f["rank"], f["seq"], f["op"]) for f in errs["rank3"]["fingerprints"]] == [(3, 3, "BROADCAST"),
                                                                                      (0, 3, "ALLREDUCE")]
    rows = con.execute("SELECT rank, seq, op, records FROM collectives WHERE source = 'mismatch_check' "
                       "ORDER BY rank").fetchall()
    assert rows == [(0, 3, "ALLREDUCE", 2), (1, 3, "ALLREDUCE", 1), (2, 3, "ALLREDUCE", 1), (3, 3, "BROADCAST", 4)]
    (desync,) = [f for f in doc["findings"] if f["rule"] == "collective-desync"]
    assert desync["ranks"] == ["rank3"]
    assert "rank0-2 run ALLREDUCE #3 of 64 Float; rank3 runs BROADCAST #3" in desync["detail"]
    assert not [f for f in doc["findings"] if f["rule"] in HANG_RULES - {"collective-desync"}], doc["findings"]
    assert doc["engines"][0]["verdict"].startswith("Rank3 out of step")
    _all_lines_accounted(con)


@pytest.mark.parametrize(("scenario", "odd"), [("missing_collective_detail", "rank2"),
                                              ("extra_collective_detail", "rank1"), ("two_groups_detail", "rank3"),
                                              ("overlap_worker_detail", "rank3")])
def test_the_collective_check_of_other_branches(tmp_path: Path, scenario: str, odd: str) -> None:
    """Rank 2 skips an all_reduce; rank 1 issues one more (the others' check prints compact fingerprints,
    'SequenceNumber=3OpType=BARRIER', and rank 1's as the check's own gather); in a group of ranks 1-3 the
    check's 'Rank 2' is global rank 3 (each reporter's '[rankN]:' maps its own number); the forward thread
    broadcasts: the odd rank is named by its global rank."""
    doc, con = _report(JOBS / scenario, tmp_path)
    (desync,) = [f for f in doc["findings"] if f["rule"] == "collective-desync"]
    assert desync["ranks"] == [odd]
    assert not [f for f in doc["findings"] if f["rule"] in HANG_RULES - {"collective-desync"}], doc["findings"]
    _all_lines_accounted(con)


def test_a_rank_that_never_reaches_the_monitored_barrier_stopped_first(tmp_path: Path) -> None:
    """Rank 2 spins in Python under TORCH_DISTRIBUTED_DEBUG=DETAIL: the check's monitored barrier times out,
    rank 0 (its coordinator) names rank 2, ranks 1 and 3 say they arrived and point at rank 0's log.  Rank 2
    stopped first (not rank 0, whose exit the launcher saw first); the glog lines or the tracebacks alone say
    it."""
    doc, con = _report(JOBS / "busy_rank_detail", tmp_path)
    (first,) = [f for f in doc["findings"] if f["rule"] == "first-rank-stopped"]
    assert first["ranks"] == ["rank2"] and "monitored barrier" in first["title"]
    assert "8000 ms" in first["detail"]
    assert doc["engines"][0]["verdict"].startswith("Rank2 stopped first")
    # the report's panel: one column (the barrier, numbered by nothing), rank 2's row flagged and empty
    html = (tmp_path / "r.html").read_text()
    panel = html[html.index('data-source="monitored_barrier"'):]
    panel = panel[:panel.index("</table>")]
    assert "monitoredBarrier" in panel and "<strong>a monitored barrier</strong>" in panel
    assert "rank2 monitoredBarrier absent" in panel and panel.count(">c<") == 3
    _all_lines_accounted(con)
    lines = (JOBS / "busy_rank_detail" / "logs" / "job.log").read_text().splitlines()
    only_tracebacks = tmp_path / "tracebacks" / "job.log"
    only_tracebacks.parent.mkdir()
    only_tracebacks.write_text("\n".join(s for s in lines if "ProcessGroupGloo.cpp" not in s) + "\n")
    doc2, _ = _report(only_tracebacks.parent, tmp_path / "r2")
    assert [f["ranks"] for f in doc2["findings"] if f["rule"] == "first-rank-stopped"] == [["rank2"]]


@pytest.mark.parametrize(("scenario", "first"), [("socket_recv_detail", "rank0"), ("rank_dies_detail", "rank2")])
def test_the_monitored_barrier_names_who_never_arrived(tmp_path: Path, scenario: str, first: str) -> None:
    """Rank 0 blocks before the collective: the others reach the barrier and wait for it, its coordinator,
    which prints nothing of it (it never ran the barrier); a killed rank is named by rank 0."""
    doc, con = _report(JOBS / scenario, tmp_path)
    assert [f["ranks"] for f in doc["findings"] if f["rule"] == "first-rank-stopped"] == [[first]]
    assert doc["engines"][0]["verdict"].startswith(f"{first.capitalize()} stopped first")
    _all_lines_accounted(con)


def test_monitored_barrier_messages() -> None:
    from hangforensics.parsers.collectives.torch_nccl import barrier_facts

    assert barrier_facts("[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 1800000 ms") == {
        "event": "monitored_barrier", "barrier_failed": [1, 3], "barrier_timeout_ms": 1800000}
    assert barrier_facts("[Rank 0]: Rank 2 failed to pass monitoredBarrier in 8000 ms")["barrier_failed"] == [2]
    assert barrier_facts("Rank 1 successfully reached monitoredBarrier, but received errors while waiting for "
                         "send/recv from rank 0. Please check rank 0 logs for faulty rank.") == {
        "event": "monitored_barrier", "barrier_reached": 1, "barrier_coordinator": 0}
    assert barrier_facts("Rank 1 entered the barrier") == {}


def test_the_collective_check_of_older_releases() -> None:
    """The check's message across releases (quoted from torch's PRs and issues): 1.10-1.11 name one rank's
    fingerprint ('running inconsistent collective'), 1.12-2.0 the other rank's op alone, 2.1+ both full
    fingerprints with sequence numbers and the aspects that differ; a paste may cut the second."""
    old = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running inconsistent collective: "
           "CollectiveFingerPrint(OpType=BROADCAST, TensorShape=[34112], TensorDtypes=Float, TensorDeviceTypes="
           "TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (default), "
           "pinned_memory=false (default), memory_format=(nullopt))")
    mid = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
           "CollectiveFingerPrint(OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float), but Rank 1 is running "
           "collective: REDUCE.")
    new = ("[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
           "CollectiveFingerPrint(SequenceNumber=3104, OpType=ALLREDUCE, TensorShape=[195812480], TensorDtypes=BFloat16, "
           "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)), but Rank 0 is running collective: "
           "CollectiveFingerPrint(SequenceNumber=3104, OpType=ALLREDUCE, TensorShape=[51123456], TensorDtypes=BFloat16, "
           "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)).Collectives differ in the following "
           "aspects: \t Tensor Tensor shapes: 195812480vs 51123456")
    assert classify([old, mid, new]).get_column("kind").to_list() == ["c10d_error"] * 3
    fps = [torch_job.error_attrs(s, [])["fingerprints"] for s in (old, mid, new)]
    assert [(f["rank"], f["seq"], f["op"], f["shape"]) for f in fps[0]] == [(0, None, "BROADCAST", [34112])]
    assert [(f["rank"], f["op"], f["shape"]) for f in fps[1]] == [(0, "ALLREDUCE", [20, 10]), (1, "REDUCE", None)]
    assert [(f["rank"], f["seq"], f["shape"], f["dtype"]) for f in fps[2]] == [(1, 3104, [195812480], "BFloat16"),
                                                                             (0, 3104, [51123456], "BFloat16")]
    assert torch_job.error_attrs(new, [])["differ"] == "Tensor Tensor shapes: 195812480vs 51123456"


def test_the_signalled_rank_comes_before_the_launchers_root_cause(tmp_path: Path) -> None:
    """The launcher may observe a peer's exit 1 first (its root cause) while another rank was SIGKILLed: the
    signal is the cause, the exit 1 its consequence.  The real rank_dies summary, with rank 1's entry
    as torchrun prints a failed worker's and moved under 'Root Cause'."""
    text = (JOBS / "rank_dies" / "logs" / "job.log").read_text()
    entries = re.split(r"(?m)^(?=\[\d\]:$|-{10,}$|={10,}$)", text)
    r1 = next(e for e in entries if "rank      : 1 " in e)
    r2 = next(e for e in entries if "rank      : 2 " in e)
    exit1 = r1.replace("exitcode  : -15 (pid: 5361)  (SIGTERM)", "exitcode  : 1 (pid: 5361) ").replace(
        "Signal 15 (SIGTERM) received by PID 5361", "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    swapped = text.replace(r1, r2.replace("[0]:", "[2]:")).replace(r2, exit1.replace("[2]:", "[0]:"), 1)
    assert swapped.count("rank      : 1 ") == 1 and "Root Cause (first observed failure):\n[0]:" in swapped
    folder = tmp_path / "rank_dies_exit1_root" / "logs"
    folder.mkdir(parents=True)
    (folder / "job.log").write_text(swapped)
    doc, _ = _report(folder.parent, tmp_path / "out")
    v = doc["engines"][0]["verdict"]
    assert "rank2 was killed by SIGKILL (exit code -9)" in v and "rank1 then failed (exit code 1)" in v, v
    assert v.index("rank2 was killed") < v.index("rank1 then failed")
    assert "failed first" not in v
    _no_hang(doc)


# -- wherever the lines arrive ------------------------------------------------------------------------------


def _facts_of(folder: Path, out: Path) -> tuple[str, list, list, list]:
    doc, con = _report(folder, out)
    exits = sorted((e["rank"], e["attrs"]["exit_code"], e["attrs"].get("signal"), e["attrs"].get("source"))
                   for e in _events(con, "rank_exit"))
    errs = sorted((e["rank"], e["attrs"]["error"], e["attrs"].get("op"), e["attrs"].get("abort", False))
                  for e in _events(con, "c10d_error"))
    findings = sorted((f["rule"], f["ranks"]) for f in doc["findings"])
    _all_lines_accounted(con)
    return doc["engines"][0]["verdict"], exits, errs, findings


@cache
def _plain(scenario: str, tmp: str) -> tuple[str, list, list, list]:
    return _facts_of(JOBS / scenario, Path(tmp) / f"plain-{scenario}")


@pytest.mark.parametrize("envelope", ["kubectl", "cri", "docker_json", "journald_json", "fenced", "quote",
                                      "hard_wrap", "lineno_pipe", "compose+kubectl", "hard_wrap+kubectl"])
def test_same_deaths_and_errors_whatever_the_envelope(envelope: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.getbasetemp()
    # (torch's collective check and its monitored barrier too: the desync and the rank that stopped first)
    for scenario in ("size_mismatch", "op_mismatch", "op_mismatch_detail", "busy_rank_detail"):
        plain = _plain(scenario, str(base))
        assert plain[1] and plain[2]
        lines = (JOBS / scenario / "logs" / "job.log").read_text().splitlines()
        folder = base / f"{scenario}-{envelope}" / "job"
        (folder / "logs").mkdir(parents=True)
        (folder / "logs" / "job.log").write_text("\n".join(wrap(lines, envelope, datetime(2026, 12, 4, 15, 48))) + "\n")
        assert _facts_of(folder, base / f"out-{scenario}-{envelope}") == plain, (scenario, envelope)


def test_a_ticket_quoting_the_crash_says_the_same(tmp_path: Path) -> None:
    """The ticket quotes the gloo abort, the launcher's lines and its summary in a code fence between prose."""
    doc, con = _report(JOBS / "pasted", tmp_path)
    plain, _ = _report(JOBS / "size_mismatch", tmp_path / "plain")
    assert doc["engines"][0]["verdict"] == plain["engines"][0]["verdict"]
    assert con.execute("SELECT envelope, kind FROM sources").fetchall() == [("markdown", "server_log")]
    prose = {r[0] for r in con.execute("SELECT text FROM unparsed").fetchall()}
    assert any(t.startswith("Our 4-rank CPU job dies") for t in prose)
    assert not [t for t in prose if "FAILED" in t or "exitcode" in t or "gloo" in t], prose
    _no_hang(doc)


def test_a_summary_pasted_from_its_failures_header_is_still_read(tmp_path: Path) -> None:
    lines = (JOBS / "rank_dies" / "logs" / "job.log").read_text().splitlines()
    start = lines.index("Failures:")
    folder = tmp_path / "cut" / "job.txt"
    folder.parent.mkdir()
    folder.write_text("\n".join(lines[start:]) + "\n")
    doc, con = _report(folder.parent, tmp_path / "out")
    assert [e["rank"] for e in _events(con, "rank_exit")] == ["rank0", "rank1", "rank3", "rank2"]
    assert len(_events(con, "child_failed")) == 1            # 'Root Cause' inside it continues it
    assert "rank2 was killed by SIGKILL (exit code -9) at 15:48:28" in doc["engines"][0]["verdict"]
    _all_lines_accounted(con)
    assert con.execute("SELECT count(*) FROM unparsed").fetchone()[0] == 0


def test_a_ranks_own_stderr_without_the_prefix(tmp_path: Path) -> None:
    """torchrun --log-dir writes each rank's stderr to its own file, without the '[rankN]:' prefix: the gloo
    timeout is still a gloo timeout, of a rank no line names."""
    lines = (JOBS / "op_mismatch" / "logs" / "job.log").read_text().splitlines()
    own = [s[len("[rank2]: "):] for s in lines if s.startswith("[rank2]: ")]
    assert own[0].startswith("Traceback") and "Timed out waiting" in own[-1]
    (tmp_path / "attempt_0" / "2").mkdir(parents=True)
    (tmp_path / "attempt_0" / "2" / "stderr.log").write_text("\n".join(own) + "\n")
    doc, con = _report(tmp_path / "attempt_0", tmp_path / "out")
    (err,) = _events(con, "c10d_error")
    assert err["rank"] == "" and err["attrs"]["error"] == "timeout" and err["attrs"]["backend"] == "gloo"
    assert con.execute("SELECT count(*) FROM unparsed").fetchone()[0] == 0
    assert "collective timeouts on a rank the lines do not name" in doc["engines"][0]["verdict"]


# -- the grammar ----------------------------------------------------------------------------------------------


def test_error_lines_of_other_torch_releases_and_their_look_alikes() -> None:
    lines = [
        # torch 1.x / 2.0 gloo errors and elastic agent (logging's default format)
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.128.0.13]:16251",
        "RuntimeError: [/opt/conda/conda-bld/pytorch/work/third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error "
        "[10.0.0.3]:43562: Connection reset by peer",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 2810) of binary: "
        "/usr/bin/python3",
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 2809 closing signal SIGTERM",
        # look-alikes that are no c10d record: Python's own socket error, a stack frame naming gloo, a quote
        "ConnectionResetError: [Errno 104] Connection reset by peer",
        "    gloo::transport::tcp::UnboundBuffer::waitRecv (libtorch_cpu.so)",
        "  what():  [enforce fail at gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes.",
        "W1105 14:05:25.112000 9120 torch/_dynamo/convert_frame.py:964] [0/8] torch._dynamo hit config.recompile_limit (8)",
    ]
    kinds = classify(lines).get_column("kind").to_list()
    assert kinds[:5] == ["c10d_error", "c10d_error", "c10d_error", "rank_exit", "torch_elastic"]
    assert kinds[5:] == [None, None, None, None]
    a = [torch_job.error_attrs(s, []) for s in lines[:3]]
    assert (a[0]["error"], a[0]["peer"], a[0]["src"]) == ("connection_closed", "[10.128.0.13]:16251", "pair.cc:598")
    assert (a[1]["error"], a[1]["peer"], a[1]["backend"]) == ("connection_reset", "[10.0.0.3]:43562", "gloo")
    assert (a[2]["exception"], a[2]["backend"], a[2]["error"]) == ("torch.distributed.DistBackendError", "nccl",
                                                                 "nccl_error")
    agent = torch_job.elastic_line(lines[3])
    assert agent is not None and agent["_time"] is None
    assert (agent["event"], agent["exit_code"], agent["local_rank"], agent["pid"]) == ("worker_failed", 1, 0, 2810)
    assert torch_job.elastic_line(lines[4])["event"] == "closing_signal"


def test_failure_summary_fields_with_a_recorded_traceback() -> None:
    """A worker wrapped in @record leaves its traceback in the summary (torch's _FAILURE_FORMAT_TEMPLATE,
    indented by two); its exception line is the entry's error."""
    lines = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-12-04_15:47:18",
        "  host      : node7.example",
        "  rank      : 13 (local_rank: 5)",
        "  exitcode  : 1 (pid: 2810)",
        "  error_file: /tmp/torchelastic_x/attempt_0/5/error.json",
        "  traceback : Traceback (most recent call last):",
        "    File \"train.py\", line 10, in main",
        "      dist.all_reduce(t)",
        "  RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:1",
        "",
        "============================================================",
    ]
    summary, (e,) = torch_job.failure_entries(lines)
    assert summary == {"title": "train.py", "failures": 1, "root_cause_rank": 13}
    assert (e["rank"], e["local_rank"], e["exit_code"], e["pid"], e["host"], e["root_cause"]) == \
        (13, 5, 1, 2810, "node7.example", True)
    assert e["signal"] is None and e["ts"] == datetime(2026, 12, 4, 15, 47, 18)
    assert e["error"].startswith("RuntimeError: [../third_party/gloo") and e["offset_end"] == 17
    kinds = classify(lines).get_column("kind").to_list()
    assert kinds.count("child_failed") == 1 and "c10d_error" not in kinds     # indented: part of the summary

