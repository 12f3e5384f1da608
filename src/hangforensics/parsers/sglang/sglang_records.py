"""The rare multi-line records of a server log, walked in Python: torch watchdog messages with their C++
stack, faulthandler and py-spy dumps embedded in the log, watchdog debug info with its leak text,
server settings.  Each kind has one handler; the bulk of a log (batch and access lines) never gets here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..collectives import desync_report, torch_nccl
from ..collectives.collective_rows import BARRIER_PG, BARRIER_SOURCE, MISMATCH_PG, MISMATCH_SOURCE
from ..stacks import faulthandler, native_trace, pyspy, stackrows
from ..torch_jobs import torch_job, train_steps
from . import leaks
from .sglang_patterns import SERVER_ARG_KEYS


@dataclass
class Record:
    """One detailed record: its first line and the continuation lines that belong to it."""

    kind: str
    line: int                      # file line of the first line
    body: str                      # the first line
    msg: str                       # the message after the SGLang prefix (else the body)
    cont: list[str]                # continuation lines
    rank: str
    ts: datetime | None
    ctx_ts: datetime               # the nearest dated line (year context for glog)
    next_ts: datetime | None       # the next dated line
    ctx_dated: bool = True         # ctx_ts is a dated line of the file (else an envelope time or the mtime)
    ctx_mtime: bool = False        # ctx_ts is the file's modification time (its lines are at or before it)


@dataclass
class RecordRows:
    """What the detailed records of one chunk add: event fixes by line, and rows of other tables."""

    engine: str
    path: str
    attrs: dict[int, str] = field(default_factory=dict)
    ts: dict[int, datetime] = field(default_factory=dict)
    rank: dict[int, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    leaks: list[dict[str, Any]] = field(default_factory=list)
    stacks: list[dict[str, Any]] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)
    unparsed: list[dict[str, Any]] = field(default_factory=list)
    collective_records: list[dict[str, Any]] = field(default_factory=list)
    fixes: Any = None       # event fixes of many records read at once: line, _attrs, _ts, _rank (polars)

    def dump(self, dump: pyspy.Dump, rec: Record, ts: datetime | None, rank: str, first_line: int,
             texts: list[str]) -> None:
        """Rows of a dump embedded at ``rec``; its lines outside the grammar go to unparsed."""
        stackrows.dump_rows(dump, f"{self.engine}:{self.path}:{rec.line}", self.engine, self.path, ts, rank,
                            "embedded", self.stacks, self.frames)
        for off in dump.unmatched:
            self.unparsed.append({"engine": self.engine, "path": self.path, "line": first_line + off,
                                  "text": texts[off]})


def _torch_nccl(rec: Record, out: RecordRows) -> dict[str, Any]:
    g = torch_nccl.parse_glog(rec.body, rec.ctx_ts)
    ts = rec.ts
    if g and g.pop("full_date", False):
        ts = out.ts[rec.line] = g.pop("ts")      # a full date of its own (Ray's logger): as read
    elif g and g["ts"] is None:
        g.pop("ts")            # no time printed: ingest dates it (its envelope's time, else the record before)
    elif g and rec.ctx_mtime:
        g["ts"] = torch_nccl.at_or_before(g["ts"], rec.ctx_ts)
    if g and "ts" in g:
        # beside dated log lines, glog may be on another clock (UTC); alone, it is the only clock
        ts = torch_nccl.align_to_log(g, rec.ctx_ts, rec.next_ts) if rec.ctx_dated else g.pop("ts")
        out.ts[rec.line] = ts
    if g and g.get("global_rank") is not None and not rec.rank:
        out.rank[rec.line] = f"rank{g['global_rank']}"
    # torch's C++ stack of the failing watchdog ('Exception raised from ...', 'frame #N: ...')
    if any(x.startswith("frame #") for x in rec.cont):
        dump = native_trace.parse_trace(rec.cont, rec.line + 1)
        for th in dump.threads:
            th.name = "c10d watchdog"
        grank = g.get("global_rank") if g else None
        stackrows.dump_rows(dump, f"{out.engine}:{out.path}:{rec.line}", out.engine, out.path, ts,
                            rec.rank or (f"TP{grank}" if grank is not None else ""), "embedded",
                            out.stacks, out.frames)
    if g and any(desync_report.is_desync_line(_PREFIX_RE.sub("", x)) for x in rec.cont):
        out.collective_records.extend(_desync_records(rec, g, ts, out))
    if g and g.get("event") == "monitored_barrier":
        out.collective_records.extend(_barrier_records(rec, g, ts, out))
    return g or {}


def _barrier_records(rec: Record, g: dict[str, Any], ts: datetime | None, rr: RecordRows) -> list[dict[str, Any]]:
    """A monitored barrier's message as ``collectives`` rows: the ranks that never arrived (absent), and the
    rank that says it arrived or named them (completed)."""
    reporter = g.get("global_rank")
    states = [(r, "absent") for r in g.get("barrier_failed", [])]
    if "barrier_failed" in g and reporter is not None:
        states.append((reporter, "completed"))
    if "barrier_reached" in g:
        # (the coordinator it waited for is no row: whether it ran the barrier is its own message's to say)
        states.append((g["barrier_reached"], "completed"))
    attrs = json.dumps({k: v for k, v in {"seq_kind": "collective",
                                          "reporter": reporter if reporter is not None else g.get("barrier_reached"),
                                          "coordinator": g.get("barrier_coordinator"),
                                          "timeout_ms": g.get("barrier_timeout_ms")}.items() if v is not None})
    return [{"engine": rr.engine, "path": rr.path, "line": rec.line, "source": BARRIER_SOURCE, "rank": r,
             "pg": BARRIER_PG, "pg_desc": None, "pg_ranks": None, "seq": None, "op": "monitoredBarrier",
             "state": state, "ts": ts, "attrs": attrs} for r, state in states]


_PREFIX_RE = re.compile(r"^\[rank\d+\]:")          # torchrun's per-line prefix on a message's continuation lines
_DESYNC_STATE = {"never_joined": "absent", "joined_not_finished": "started", "finished_not_joined": "completed",
                 "started": "started", "finished": "completed"}


def _desync_records(rec: Record, g: dict[str, Any], ts: datetime | None, rr: RecordRows) -> list[dict[str, Any]]:
    """The TORCH_NCCL_DESYNC_DEBUG report a ProcessGroupNCCL record carries, one row per (statement, rank).

    ``seq`` is the report's collective number, which is the group's SeqNum (both count its collectives
    from 1).  The report's ranks are ranks within the group: global ranks for the default group, and
    taken as global when the reporting rank's group rank equals its global rank (a group of ranks
    0 .. n-1); otherwise ``rank`` stays NULL and ``attrs.pg_rank`` keeps the number.
    """
    lines = [_PREFIX_RE.sub("", x) for x in rec.cont]
    report = desync_report.parse_desync_report(lines, rec.line + 1)
    pg = (f"{g['pg_guid']}" if g.get("pg_guid") else f"PG {g['pg_id']}" if g.get("pg_id") is not None else "?")
    if pg != "?" and g.get("pg_desc"):
        pg += f"({g['pg_desc']})"
    reporter = g.get("global_rank")
    default = g.get("pg_id") in (None, 0) or g.get("pg_desc") == "default_pg" or g.get("pg_guid") == "0"
    global_ranks = default or (reporter is not None and reporter == g.get("pg_rank"))
    out = []
    for f in report.facts:
        for r in f.ranks:
            attrs = {"seq_kind": "collective", "relation": f.relation, "next_collective": f.next_collective,
                     "reporter": reporter, "timeout_seq": g.get("seq"),
                     "pg_rank": None if global_ranks else r}
            out.append({"engine": rr.engine, "path": rr.path, "line": f.line, "source": "desync_report",
                        "rank": r if global_ranks else None, "pg": pg, "pg_desc": g.get("pg_desc"),
                        "pg_ranks": None, "seq": f.collective, "op": f.op or "", "state": _DESYNC_STATE[f.relation],
                        "ts": ts, "attrs": json.dumps({k: v for k, v in attrs.items() if v is not None})})
    return out


def _faulthandler(rec: Record, out: RecordRows) -> dict[str, Any]:
    texts = [rec.body, *rec.cont]
    dump = faulthandler.parse_faulthandler(texts, rec.line)
    out.dump(dump, rec, rec.ts or rec.ctx_ts, rec.rank, rec.line, texts)
    return {"threads": len(dump.threads), "garbled": any(t.garbled for t in dump.threads)}


def _pyspy_dump(rec: Record, out: RecordRows) -> dict[str, Any]:
    m = re.search(r"PID (\d+)", rec.msg)
    dump = pyspy.parse_dump(rec.cont, rec.line + 1)
    out.dump(dump, rec, rec.ts, rec.rank, rec.line + 1, rec.cont)
    frames = [fr for p in dump.processes for th in p.threads for fr in th.frames]
    return {"pid": int(m.group(1)) if m else None,
            "threads": sum(len(p.threads) for p in dump.processes),
            # 0.5.10 runs --native without saying so in the header: the frames tell
            "native": "--native" in rec.msg or any(fr.native for fr in frames)}


def dump_like(texts: list[str]) -> bool:
    """Whether lines read as a py-spy dump's part: at least half of those with text are its frames or thread
    lines (``leading_dump`` parses such a part before a chunk's first record)."""
    body = [t for t in texts if t.strip()]
    grammar = [t for t in body if pyspy.frame_of(t) is not None or pyspy.THREAD_RE.match(t)]
    return bool(grammar) and len(grammar) * 2 >= len(body)


def leading_dump(texts: list[str], first_line: int, ts: datetime | None, out: RecordRows) -> set[int]:
    """A py-spy dump's later part at the very start of a log, before its first record (a watchdog dump
    pasted in two pieces: the second piece starts mid-thread).  Parsed headerless; returns the offsets
    it consumed (the rest stays unparsed).  ``ts``: the first dated line after it (the dump was printed
    just before it)."""
    if not dump_like(texts):
        return set()
    dump = pyspy.parse_dump(texts, first_line)
    if not dump.threads:
        return set()
    stackrows.dump_rows(dump, f"{out.engine}:{out.path}:{first_line}", out.engine, out.path, ts, "",
                        "embedded", out.stacks, out.frames)
    return dump.consumed


def _health_check_failed(rec: Record, out: RecordRows) -> dict[str, Any]:
    m = re.search(r"last_heartbeat time: (\d\d:\d\d:\d\d)", rec.msg)
    t = re.search(r"tic start time: (\d\d:\d\d:\d\d)", rec.msg)
    return {"last_heartbeat": m.group(1) if m else None, "tic_start": t.group(1) if t else None}


def _watchdog_timeout(rec: Record, out: RecordRows) -> dict[str, Any]:
    m = re.search(r"watchdog_timeout=([\d.]+)(?:, self\.soft=(True|False))?", rec.msg)
    who = re.match(r"^(\w+) watchdog timeout", rec.msg)
    return {"timeout": float(m.group(1)) if m else None,
            "soft": (m.group(2) == "True") if m and m.group(2) else False,
            "who": who.group(1) if who else "Scheduler"}


def _subprocess_crashed(rec: Record, out: RecordRows) -> dict[str, Any]:
    m = re.search(r"exit code (-?\d+)", rec.msg)
    return {"exit_code": int(m.group(1)) if m else None}


def _leak_text(rec: Record, out: RecordRows) -> dict[str, Any]:
    """Watchdog debug info, batch info, scheduler exceptions and leak warnings: the memory-check text
    they carry (with its context: idle, busy, watchdog) and what else the dump says."""
    attrs: dict[str, Any] = {}
    rep = leaks.leak_from_record(rec.kind, [rec.msg, *rec.cont])
    if rep is not None:
        rep.update(engine=out.engine, path=out.path, line=rec.line, ts=rec.ts, rank=rec.rank)
        out.leaks.append(rep)
        attrs["leak_context"] = rep["context"]
    if rec.kind == "watchdog_debug_info":
        for off, s in enumerate(rec.cont):
            m = re.match(r"^symmetric-memory registration in progress: comm=(\d+) group=(\S+)", s)
            if m:
                out.events.append({
                    "engine": out.engine, "path": out.path, "line": rec.line + 1 + off,
                    "line_end": rec.line + 1 + off, "ts": rec.ts, "rank": rec.rank,
                    "kind": "symm_mem_registration", "message": s[:2000],
                    "attrs": json.dumps({"comm": m.group(1), "group": m.group(2)}),
                })
            m = re.match(r"^(?:scheduler|self)\.cur_batch(?:_for_debug)?\.batch_size\(\)=(\d+)", s)
            if m:
                attrs["batch_size"] = int(m.group(1))
    if rec.kind == "scheduler_exception":
        exc = [s for s in rec.cont if re.match(r"^[\w.]+(?:Error|Exception|Interrupt)\b", s)]
        attrs["exception"] = exc[-1][:500] if exc else None
    return attrs


def _set_rank(rec: Record, out: RecordRows, rank: int | None) -> None:
    """A torch global rank the record names ('[rankN]:'), where no SGLang prefix gave one."""
    if rank is not None and not rec.rank:
        out.rank[rec.line] = f"rank{rank}"


def _c10d_error(rec: Record, out: RecordRows) -> dict[str, Any]:
    attrs = torch_job.error_attrs(rec.body, rec.cont)
    rank = attrs.pop("global_rank", None)
    _set_rank(rec, out, rank)
    if attrs.get("error") == "collective_mismatch":
        out.collective_records.extend(_mismatch_records(rec, attrs, rank, out))
        fps = attrs["fingerprints"]
        if rank is not None and fps and fps[0]["rank"] != rank:
            attrs["reason"] += f" (ranks numbered within the checked group; rank{fps[0]['rank']} there is rank{rank})"
    if attrs.get("event") == "monitored_barrier":
        out.collective_records.extend(_barrier_records(rec, {**attrs, "global_rank": rank}, rec.ts, out))
    return attrs


def _mismatch_records(rec: Record, attrs: dict[str, Any], global_rank: int | None,
                      rr: RecordRows) -> list[dict[str, Any]]:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL's mismatch, one ``collectives`` row per rank it names: the collective
    each runs (``seq`` torch's SequenceNumber, where printed), as the reporting rank's check saw it.  The check
    numbers ranks within its group: where the reporter's own number is not its global rank (torchrun's
    '[rankN]:' prefix), the group is not the default one: the reporter's row takes its global rank, the other
    rank's keeps only its group rank (``attrs.pg_rank``; rank NULL)."""
    out = []
    fps = attrs["fingerprints"]
    grouped = global_rank is not None and bool(fps) and fps[0]["rank"] != global_rank
    for k, f in enumerate(fps):
        rank = (global_rank if k == 0 else None) if grouped else f["rank"]
        extra = {"seq_kind": "collective", "reporter": fps[0]["rank"], "peer": k > 0,
                 "pg_rank": f["rank"] if grouped else None,
                 "input_sizes": [f["shape"]] if f["shape"] is not None else None,
                 "input_dtypes": [f["dtype"]] if f["dtype"] else None, "differ": attrs.get("differ")}
        out.append({"engine": rr.engine, "path": rr.path, "line": rec.line, "source": MISMATCH_SOURCE,
                    "rank": rank, "pg": MISMATCH_PG, "pg_desc": None, "pg_ranks": None, "seq": f["seq"],
                    "op": f["op"] or "", "state": "started", "ts": rec.ts,
                    "attrs": json.dumps({k2: v for k2, v in extra.items() if v is not None})})
    return out


def _rank_traceback(rec: Record, out: RecordRows) -> dict[str, Any]:
    """A rank's Python traceback under torchrun's prefix: its exception line, when it is not a record of its
    own (a gloo / c10d error is), from the same rank's lines (ranks' tracebacks interleave)."""
    rank, _ = torch_job.strip_rank(rec.body)
    _set_rank(rec, out, rank)
    exc = None
    for s in rec.cont:
        r, text = torch_job.strip_rank(s)
        if r == rank and torch_job.EXCEPTION_LINE_RE.match(text):
            exc = text[:500]
    return {"exception": exc} if exc else {}


def _elastic_time(rec: Record, m: re.Match[str] | None, out: RecordRows) -> None:
    """The glog time of an elastic agent line (no year: the nearest dated line's, as for torch's C++ glog)."""
    if m is None:
        return
    ts = torch_nccl._glog_time(m, rec.ctx_ts)
    if ts is None:
        return
    if rec.ctx_mtime:
        ts = torch_nccl.at_or_before(ts, rec.ctx_ts)
    elif rec.ctx_dated:
        ts = torch_nccl.align_to_log({"ts": ts}, rec.ctx_ts, rec.next_ts)
    out.ts[rec.line] = ts


def _torch_elastic(rec: Record, out: RecordRows) -> dict[str, Any]:
    """torchrun's elastic agent: a worker that failed (rank_exit: its exit code, local rank and pid; the
    agent names no global rank), a worker it stopped, a signal it received."""
    a = torch_job.elastic_line(rec.body)
    if a is None:
        return {}
    _elastic_time(rec, a.pop("_time"), out)
    _set_rank(rec, out, a.pop("global_rank", None))
    return a


def _child_failed(rec: Record, out: RecordRows) -> dict[str, Any]:
    """torchrun's failure summary: one rank_exit event per failed rank (its entry's lines), the summary's
    own fields on its event."""
    lines = [rec.body, *rec.cont]
    summary, entries = torch_job.failure_entries(lines)
    for e in entries:
        attrs = {"source": "torchrun_summary", "root_cause": e["root_cause"],
                 **{k: e.get(k) for k in ("exit_code", "signal", "pid", "local_rank", "host", "error_file",
                                          "traceback", "error")}}
        rank = e.get("rank")
        out.events.append({
            "engine": out.engine, "path": out.path, "line": rec.line + e["offset"],
            "line_end": rec.line + e["offset_end"], "ts": e.get("ts"),
            "rank": rec.rank or (f"rank{rank}" if rank is not None else ""), "kind": "rank_exit",
            "message": re.sub(r"\s+", " ", " ".join(lines[e["offset"]:e["offset_end"] + 1])).strip()[:2000],
            "attrs": json.dumps({k: v for k, v in attrs.items() if v is not None}, default=str),
        })
    times = [e["ts"] for e in entries if e.get("ts") is not None]
    if times and rec.ts is None:
        out.ts[rec.line] = min(times)
    return summary


def _train_step(rec: Record, out: RecordRows) -> dict[str, Any]:
    """A job's own progress line: its time (the line's own, a full date), its rank, its step number."""
    ts, rank, attrs = train_steps.step_line(rec.body)
    if ts is not None and rec.ts is None:
        out.ts[rec.line] = ts
    _set_rank(rec, out, rank)
    return attrs


HANDLERS: dict[str, Callable[[Record, RecordRows], dict[str, Any]]] = {
    "torch_nccl": _torch_nccl,
    "faulthandler": _faulthandler,
    "pyspy_dump": _pyspy_dump,
    "server_args": lambda rec, out: parse_server_args(rec.msg),
    "environment": lambda rec, out: dict(re.findall(r"(\w+)=(\S*)", rec.msg)),
    "health_check_failed": _health_check_failed,
    "watchdog_timeout": _watchdog_timeout,
    "subprocess_crashed": _subprocess_crashed,
    "watchdog_debug_info": _leak_text,
    "watchdog_batch_info": _leak_text,
    "scheduler_exception": _leak_text,
    "mem_leak_warning": _leak_text,
    "mem_leak_busy": _leak_text,
    "c10d_error": _c10d_error,
    "rank_traceback": _rank_traceback,
    "rank_exit": _torch_elastic,
    "torch_elastic": _torch_elastic,
    "child_failed": _child_failed,
    "train_step": _train_step,
}


def handle(rec: Record, out: RecordRows) -> None:
    """Run the handler of ``rec.kind``; its attributes become the event's ``attrs``."""
    handler = HANDLERS.get(rec.kind)
    attrs = handler(rec, out) if handler else {}
    if attrs:
        out.attrs[rec.line] = json.dumps(attrs, default=str)


def parse_server_args(msg: str) -> dict[str, Any]:
    """Pick the forensically relevant settings out of a ``server_args=ServerArgs(...)`` line."""
    out: dict[str, Any] = {}
    for key in SERVER_ARG_KEYS:
        m = re.search(rf"[(,\s]{key}=('(?:[^'\\]|\\.)*'|[^,)]+)", msg)
        if not m:
            continue
        v = m.group(1).strip()
        if v.startswith("'"):
            out[key] = v[1:-1]
        elif v in ("True", "False"):
            out[key] = v == "True"
        elif v == "None":
            out[key] = None
        else:
            try:
                out[key] = float(v) if "." in v else int(v)
            except ValueError:
                out[key] = v
    return out
