"""PyTorch ProcessGroupNCCL watchdog lines (glog envelope), sglang-formats.md §8."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from ..datetimes import micros

# The time is optional: torch before 2.3 printed '[rank2]:[E ProcessGroupNCCL.cpp:523] ...' (2.2) or
# '[E ProcessGroupNCCL.cpp:475] ...' (2.1 and older, no [rankN]: either).
GLOG_RE = re.compile(
    r"^(?:\[rank(?P<grank>\d+)\]:)?\[(?P<lvl>[IWEF])(?:(?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d)\.(?P<frac>\d+) "
    r"(?:\d+ )?| )(?P<src>[\w./-]+):(?P<srcline>\d+)\] (?P<msg>.*)$"
)
# The watchdog's message printed without a glog head, as the text of the exception it throws: std::terminate's
# '  what():  [PG 1 Rank 7] Process group watchdog thread terminated with exception: ...' (a '[rankN]:' prefix
# possible), or Ray's C++ logger line '[2025-02-03 10:34:03,841 E 4954 6881] logging.cc:101: Unhandled
# exception: N3c1016DistBackendErrorE. what(): [PG ID 0 ...] ...' (its own full date).  Only a ProcessGroupNCCL
# message ('[PG ...' / '[Rank N]' first) is one.
WHAT_RE = re.compile(
    r"^(?:\[rank(?P<grank>\d+)\]:)?(?:\[(?P<date>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[,.](?P<frac>\d{1,6}) "
    r"(?P<lvl>[IWEFC]) \d+ \d+\] (?P<src>[\w./-]+):(?P<srcline>\d+): .*?)?\s*what\(\):\s+"
    r"(?P<msg>\[(?:PG (?:ID )?\d+|Rank \d+)[\] ].*)$"
)
# '[PG ID 2 PG GUID 1(tp:0) Rank 4]' (torch 2.5+), '[PG 130 Rank 1]' / '[PG 3 (tp) Rank 1]' (2.3-2.4)
PG_RE = re.compile(r"\[PG (?:ID )?(?P<pgid>\d+)(?: PG GUID (?P<guid>[^\s(\]]+))?(?: ?\((?P<desc>[^)]*)\))? "
                   r"Rank (?P<rank>\d+)\]")
WORK_RANK_RE = re.compile(r"^\[Rank (\d+)\] ")
# torch 2.0 and older print no NumelIn / NumelOut
TIMEOUT_RE = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)(?:, NumelIn=(-?\d+), "
    r"NumelOut=(-?\d+))?, Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds"
)
STATUS_RE = re.compile(r"last enqueued (?:NCCL )?work: (\d+), last completed (?:NCCL )?work: (-?\d+)")
# the collective's SeqNum as the follow-up lines print it, across torch releases
SEQ_RE = re.compile(r"(?:failure detected by watchdog at work sequence id|detected by watchdog at work|"
                    r"Timeout at NCCL work): (\d+)")

EVENTS = [
    ("collective_timeout", "Watchdog caught collective operation timeout"),
    ("failure_detected", "failure detected by watchdog"),
    ("failure_detected", "detected by watchdog at work"),
    ("failure_detected", "Timeout at NCCL work"),
    ("dump_signal", "Received a dump signal"),
    ("first_to_dump", "First PG on this rank to signal dumping"),
    ("observed_dump", "Observed flight recorder dump signal"),
    ("taking_down", "taking the entire process down"),
    ("watchdog_terminated", "Process group watchdog thread terminated"),
    ("watchdog_stuck", "watchdog got stuck for"),
    ("heartbeat_timeout", "Heartbeat monitor timed out"),
    ("async_error", "raised the following async exception"),
    ("work_update", "NCCL Work update periodically"),
    ("some_failed", "Some NCCL operations have failed or timed out"),
]


# torch's monitored barrier (``dist.monitored_barrier``; TORCH_DISTRIBUTED_DEBUG=DETAIL runs one when a group
# is made): rank 0 waits for every rank and names those that never arrived ('[Rank 0]: Ranks 2 failed to pass
# monitoredBarrier in 8000 ms'; 'Rank 2 failed ...' for the first of them), the others say they arrived and
# point at rank 0's log ('Rank 1 successfully reached monitoredBarrier, but received errors while waiting for
# send/recv from rank 0. Please check rank 0 logs for faulty rank.').  ProcessGroupGloo.cpp, torch 1.10+.
BARRIER_FAILED_RE = re.compile(r"Ranks? (\d+(?:, ?\d+)*) failed to pass monitoredBarrier in (\d+) ms")
BARRIER_REACHED_RE = re.compile(r"Rank (\d+) successfully reached monitoredBarrier, but received errors while "
                                r"waiting for send/recv from rank (\d+)")


def barrier_facts(msg: str) -> dict[str, Any]:
    """What a monitored barrier's message says: the ranks that never arrived (and the timeout), or the rank
    that arrived and the coordinator it blames; {} for another message."""
    f = BARRIER_FAILED_RE.search(msg)
    if f:
        return {"event": "monitored_barrier", "barrier_failed": [int(x) for x in re.findall(r"\d+", f.group(1))],
                "barrier_timeout_ms": int(f.group(2))}
    r = BARRIER_REACHED_RE.search(msg)
    if r:
        return {"event": "monitored_barrier", "barrier_reached": int(r.group(1)),
                "barrier_coordinator": int(r.group(2))}
    return {}


def parse_glog(line: str, context: datetime) -> dict[str, Any] | None:
    """Parse one glog line; ``context`` is the nearest dated log line (glog prints no year).  ``ts`` is None
    when the line prints no time (torch < 2.3): its envelope or the records around it date it."""
    m = GLOG_RE.match(line)
    if m:
        ts = _glog_time(m, context)
        if ts is None and m.group("md"):
            return None
        src = f"{m.group('src')}:{m.group('srcline')}"
    else:
        m = WHAT_RE.match(line)
        if not m:
            return None
        ts = _full_time(m)
        src = f"{m.group('src')}:{m.group('srcline')}" if m.group("src") else "what()"
    msg = m.group("msg")
    out: dict[str, Any] = {
        "ts": ts, "level": m.group("lvl") or "E",
        "global_rank": int(m.group("grank")) if m.group("grank") else None,
        "src": src,
        "event": next((name for name, needle in EVENTS if needle in msg), "other"),
    }
    if "monitoredBarrier" in msg:
        out.update(barrier_facts(msg))
    if m.re is WHAT_RE and ts is not None:
        out["full_date"] = True      # Ray's logger prints the year: the time is read as it is, never re-dated
    pg = PG_RE.search(msg)
    if pg:
        out.update(pg_id=int(pg.group("pgid")), pg_guid=pg.group("guid"), pg_desc=pg.group("desc"),
                   pg_rank=int(pg.group("rank")))
    else:
        wr = WORK_RANK_RE.match(msg)
        if wr:
            out["pg_rank"] = int(wr.group(1))
    t = TIMEOUT_RE.search(msg)
    if t:
        out.update(seq=int(t.group(1)), op_type=t.group(2), timeout_ms=int(t.group(5)), ran_ms=int(t.group(6)))
    s = SEQ_RE.search(msg)
    if s:
        out["seq"] = int(s.group(1))
    st = STATUS_RE.search(msg)
    if st:
        out.update(last_enqueued=int(st.group(1)), last_completed=int(st.group(2)))
    if out.get("global_rank") is None and out.get("pg_rank") is not None and out.get("pg_id") in (None, 0):
        out["global_rank"] = out["pg_rank"]
    return out


def _full_time(m: re.Match[str]) -> datetime | None:
    """The full date of Ray's logger line around a what() (None without one)."""
    if not m.group("date"):
        return None
    try:
        return datetime.strptime(f"{m.group('date')}.{(m.group('frac') + '000000')[:6]}", "%Y-%m-%d %H:%M:%S.%f")
    except ValueError:
        return None


def _glog_time(m: re.Match[str], context: datetime) -> datetime | None:
    """The line's time, its year from ``context``; None when the line prints no time (torch < 2.3) or an
    impossible one."""
    md = m.group("md")
    if not md:
        return None
    month, day = int(md[:-2]), int(md[-2:])
    year = context.year
    if month - context.month > 6:        # December glog line beside a January log line
        year -= 1
    elif context.month - month > 6:
        year += 1
    hh, mi, ss = m.group("hms").split(":")
    try:        # (what strptime's '%Y-%m-%d %H:%M:%S.%f' reads of these digits, at a tenth of its cost)
        return datetime(year, month, day, int(hh), int(mi), int(ss), micros(m.group("frac")))
    except ValueError:
        return None


def at_or_before(ts: datetime, reference: datetime) -> datetime:
    """A year-less time dated by a file's modification time: the year that puts it at or before it (a
    line from March in a file saved in December is this year's, not next year's)."""
    if ts <= reference + timedelta(days=1):
        return ts
    try:
        return ts.replace(year=ts.year - 1)
    except ValueError:                 # Feb 29
        return ts - timedelta(days=365)


def align_to_log(g: dict[str, Any], before: datetime, after: datetime | None) -> datetime:
    """The glog time on the log's clock.  glog prints the process's own zone (often UTC) while SGLang
    prints local time: a glog line far outside the dated lines around it is shifted by the whole
    number of quarter hours that puts it between them, and ``clock_shift_s`` records the shift."""
    ts: datetime = g.pop("ts")
    slack = timedelta(seconds=120)
    try:
        upper = (after or before + timedelta(hours=3)) + slack
        if before - slack <= ts <= upper or abs(ts - before) < timedelta(minutes=30):
            return ts
        quarters = round((ts - before).total_seconds() / 900)
        shifted = ts - timedelta(seconds=quarters * 900)
    except OverflowError:
        return ts                    # dates at the edge of the calendar (year 1 or 9999): left as printed
    if before - slack <= shifted <= upper:
        g["clock_shift_s"] = -quarters * 900
        return shifted
    return ts
