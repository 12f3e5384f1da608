"""torch ProcessGroupNCCL timeouts read whatever wraps them, and compared per process group.

interface.md §1 ("Evidence arrives wrapped"): the same evidence gives the same findings whatever its envelope,
and every envelope layer (a launcher's '<host> [stderr] ' prefix, a Ray tag in colour codes that lost their
ESC, a terminal's fixed-width wrap, a viewer's time column at any precision) is found from the lines' shape.
The watchdog's message is read wherever torch prints it: its glog line, the 'what():' text of the exception
std::terminate reports, Ray's C++ logger line around that exception.  §3 ("Partial evidence still speaks"):
ProcessGroupNCCL lines of one group that disagree on SeqNum are a desync, the minority being the odd ranks,
and with no majority every disagreeing rank is named.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from conftest import by_rule

from hangforensics.analysis.findings import run_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.readers.envelopes import detect
from hangforensics.store import Store

NUMEL = "NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000"


def timeout(rank: int, seq: int, t: str = "10:00:00.123456789", pg_prefix: bool = False,
            guid: str = "0(default_pg)") -> list[str]:
    """One rank's watchdog lines as torch 2.4+ prints them: the timeout (naming only '[Rank N]', or, in the
    later form, its group too), then the group's status line."""
    head = f"[rank{rank}]:[E1204 {t} ProcessGroupNCCL.cpp:632]"
    who = f"[PG ID 0 PG GUID {guid} Rank {rank}]" if pg_prefix else f"[Rank {rank}]"
    return [f"{head} {who} Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
            f"{NUMEL}) ran for 600007 milliseconds before timing out.",
            f"[rank{rank}]:[E1204 {t} ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID {guid} Rank {rank}]  failure "
            f"detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, "
            f"last completed work: {seq - 1}"]


def report(tmp_path: Path, files: dict[str, list[str]]) -> tuple[list[dict], list[dict]]:
    eng = tmp_path / "eng"
    eng.mkdir()
    for name, lines in files.items():
        (eng / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    with Store(":memory:") as st:
        ingest_paths(st, [eng], mode="engine")
        found = run_rules(st)
        sources = st.query("SELECT path, kind, envelope, lines, parsed_lines, unparsed_lines FROM sources")
    for s in sources:
        assert s["lines"] == s["parsed_lines"] + s["unparsed_lines"], s
    return found, sources


def signatures(found: list[dict]) -> list[dict]:
    return [f for f in by_rule(found).get("known-signature", []) if f["signature"] == "nccl-collective-timeout"]


# -- SeqNum disagreement within one process group ----------------------------------------------------------------
@pytest.mark.parametrize("pg_prefix", [False, True], ids=["rank-only", "pg-prefix"])
def test_two_ranks_one_seqnum_apart_are_a_desync_naming_both(tmp_path: Path, pg_prefix: bool) -> None:
    lines = timeout(3, 5730, "10:00:00.123456789", pg_prefix) + timeout(5, 5729, "10:00:00.987654321", pg_prefix)
    found, _ = report(tmp_path, {"job.log": lines})
    (d,) = by_rule(found)["collective-desync"]
    assert d["ranks"] == ["rank3", "rank5"]                  # no majority: every disagreeing rank
    assert "SeqNum=5729" in d["detail"] and "SeqNum=5730" in d["detail"]
    assert d["ts"].strftime("%m-%d %H:%M:%S.%f") == "12-04 10:00:00.123456"     # the earliest disagreeing record
    assert len(signatures(found)) == 2                        # two collectives timed out: two episodes


@pytest.mark.parametrize("pg_prefix", [False, True], ids=["rank-only", "pg-prefix"])
def test_the_minority_one_seqnum_behind_is_the_odd_rank(tmp_path: Path, pg_prefix: bool) -> None:
    lines = [s for r in (0, 1, 2) for s in timeout(r, 5730, f"10:00:0{r}.100000000", pg_prefix)]
    lines += timeout(3, 5729, "10:00:04.100000000", pg_prefix)
    found, _ = report(tmp_path, {"job.log": lines})
    (d,) = by_rule(found)["collective-desync"]
    assert d["ranks"] == ["rank3"]
    assert "never joined SeqNum=5730" in d["detail"]


def test_seqnums_of_different_groups_are_never_compared(tmp_path: Path) -> None:
    lines = timeout(0, 5730, pg_prefix=True) + timeout(1, 5730, pg_prefix=True) \
        + timeout(2, 1200, pg_prefix=True, guid="3(tp:0)") + timeout(3, 1200, pg_prefix=True, guid="3(tp:0)")
    found, _ = report(tmp_path, {"job.log": lines})
    assert "collective-desync" not in by_rule(found)
    assert len(signatures(found)) == 2


def test_ranks_that_agree_are_no_desync(tmp_path: Path) -> None:
    found, _ = report(tmp_path, {"job.log": timeout(0, 5730) + timeout(1, 5730)})
    assert "collective-desync" not in by_rule(found)
    (sig,) = signatures(found)
    assert sig["ranks"] == ["rank0", "rank1"]


# -- the same timeouts, wrapped ---------------------------------------------------------------------------------
PLAIN = timeout(0, 88) + timeout(1, 88, "10:00:00.323456789")


def wrapped(how: str) -> list[str]:
    """The two ranks' timeout lines (SeqNum 88 of the default group) as each wrapper prints them."""
    what = ("Process group watchdog thread terminated with exception: [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, " + NUMEL + ") ran for 600007 milliseconds "
            "before timing out.")
    frames = ["Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632 "
              "(most recent call first):",
              "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3b6d41df86 in "
              "/usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)"]
    if how == "terminate":           # only std::terminate's report: no glog head, no time
        return [s for r in (0, 1) for s in ["terminate called after throwing an instance of 'c10::DistBackendError'",
                                            f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {r}] " + what.format(r=r),
                                            *frames]]
    if how == "after_log":           # the same in a server log, after its own records
        return [f"[2024-12-04 09:5{r}:00 TP{r}] Decode batch. #running-req: 3, #token: 900, token usage: 0.01, "
                f"gen throughput (token/s): 80.00, #queue-req: 0" for r in (0, 1)] + wrapped("terminate")
    if how == "ray_logging":         # Ray's C++ logger line around the exception, behind the actor's tag
        return [f"(Worker pid=41{r}, ip=10.0.0.{r}) {s}" for r in (0, 1) for s in [
            f"[2025-02-03 10:34:0{r},841 E 41{r} 6881] logging.cc:101: Unhandled exception: N3c1016DistBackendErrorE. "
            f"what(): [PG ID 0 PG GUID 0(default_pg) Rank {r}] " + what.format(r=r), *frames]]
    if how == "launcher":            # '<host> [stderr] ' on a message's first row, the rest of it wrapped
        out = []
        for s in PLAIN:
            cut = s.find("WorkNCCL(")
            out += [f"train-nodes.cn-d004 [stderr] {s[:cut]}", s[cut:]] if cut > 0 else \
                [f"train-nodes.cn-d004 [stderr] {s}"]
        return out
    if how == "ray_colour":          # a Ray tag in colour codes whose ESC became a space
        return [f" [36m(RayWorkerVllm pid=50{k // 2}) [0m {s}" for k, s in enumerate(PLAIN)]
    if how == "hard_wrap":           # a terminal 120 columns wide; the first row behind an inline backtick
        rows = [s[i:i + 120] for s in PLAIN for i in range(0, len(s), 120)]
        return ["`" + rows[0], *rows[1:]]
    if how == "viewer_minutes":      # a viewer's time column at minute precision, another zone than the log
        return [f" 2024-12-04 02:{10 + k} {s}" for k, s in enumerate(PLAIN)]
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["terminate", "after_log", "ray_logging", "launcher", "ray_colour", "hard_wrap",
                                 "viewer_minutes"])
def test_a_wrapped_timeout_gives_the_plain_one_s_signature(tmp_path: Path, how: str) -> None:
    found, sources = report(tmp_path, {"paste.md": wrapped(how)})
    (src,) = sources
    assert src["kind"] in ("server_log", "native_trace"), src
    (sig,) = signatures(found)
    assert "SeqNum 88 ALLREDUCE" in sig["detail"]
    assert "collective-desync" not in by_rule(found)
    if how != "hard_wrap":           # (the first rank's wrapped head is behind the backtick: its line is cut)
        assert sig["ranks"] == ["rank0", "rank1"]


def test_a_what_line_after_the_glog_line_it_repeats_is_not_read_twice(tmp_path: Path) -> None:
    glog = "[rank0]:[E1204 10:00:00.123456789 ProcessGroupNCCL.cpp:1994] [PG ID 0 PG GUID 0(default_pg) Rank 0] " \
           "Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation " \
           f"timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, {NUMEL}) ran for 600007 milliseconds before timing out."
    what = "  what():  " + glog.split("] ", 1)[1]
    with Store(":memory:") as st:
        eng = tmp_path / "eng"
        eng.mkdir()
        (eng / "job.log").write_text("\n".join([glog, "terminate called after throwing an instance of "
                                                "'c10::DistBackendError'", what]) + "\n")
        ingest_paths(st, [eng], mode="engine")
        assert st.scalar("SELECT count(*) FROM events WHERE kind = 'torch_nccl'") == 1
        assert st.scalar("SELECT records FROM collectives") == 1


def test_layers_are_found_from_the_lines_shape() -> None:
    assert detect(wrapped("launcher")).name == "launcher"
    assert detect(wrapped("ray_colour")).name == "proc_tag"
    assert detect(wrapped("hard_wrap")).layers == ("hard_wrap",)
    assert detect(wrapped("viewer_minutes")).name == "viewer_ts"


# -- a viewer's time column at minute precision -----------------------------------------------------------------
def test_a_viewer_minute_column_is_stripped_and_kept_as_collected_time(tmp_path: Path) -> None:
    batch = "Decode batch. #running-req: 12, #token: 20480, token usage: 0.31, gen throughput (token/s): {g}, " \
            "#queue-req: 3"
    lines = []
    for t, g in (("20:54:01", 410.2), ("20:54:05", 402.1), ("20:54:09", 398.7)):
        for r in (0, 1):
            lines.append(f" 2025-02-18 12:54 [2025-02-18 {t} TP{r}] " + batch.format(g=g + r))
    lines += [f" 2025-02-18 13:04 [rank{r}]:[E218 21:04:09.{r}23456789 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
              f"caught collective operation timeout: WorkNCCL(SeqNum=5730, OpType=ALLREDUCE, {NUMEL}) ran for "
              f"600007 milliseconds before timing out." for r in (0, 1)]
    assert detect(lines).name == "viewer_ts"
    eng = tmp_path / "eng"
    eng.mkdir()
    (eng / "grafana.txt").write_text("\n".join(lines) + "\n")
    with Store(":memory:") as st:
        ingest_paths(st, [eng], mode="engine")
        (src,) = st.query("SELECT kind, envelope, unparsed_lines FROM sources")
        assert (src["kind"], src["envelope"], src["unparsed_lines"]) == ("server_log", "viewer_ts", 0)
        rows = st.query("SELECT ts, collected_ts FROM batches ORDER BY line")
        assert [str(r["ts"]) for r in rows[::2]] == ["2025-02-18 20:54:01", "2025-02-18 20:54:05", "2025-02-18 20:54:09"]
        assert {str(r["collected_ts"]) for r in rows} == {"2025-02-18 12:54:00"}     # the viewer's own clock
        found = run_rules(st)
    rules = by_rule(found)
    assert rules["stall-onset"][0]["ts"] == datetime(2025, 2, 18, 20, 54, 9)
    assert [s["ranks"] for s in signatures(found)] == [["rank0", "rank1"]]
