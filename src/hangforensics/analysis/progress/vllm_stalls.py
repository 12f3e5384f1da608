"""vLLM stalls, judged from the stats lines (``vllm_series``) the way an engineer reads them.

vLLM prints a stats line on a timer (``VLLM_LOG_STATS_INTERVAL``, 10 s by default; early V1 5 s), using
the last scheduler stats the engine core sent, and demotes it to DEBUG when this interval and the one
before both had zero throughput.  So:

* progress is a stats line with non-zero generation throughput; each engine core of a data-parallel
  deployment (``Engine 001:``) is its own series;
* a series stopped when no such line came for ``DUE_INTERVALS`` intervals (at least ``MIN_SILENCE_S``)
  while the evidence goes on; a line with prompt throughput only (a long prefill) still counts as the
  engine working, so the silence is measured from it;
* a stopped series stalled when work was pending: a later line still counting running or waiting
  requests at 0 tokens/s (the engine core stopped reporting: its numbers are stale), the last line
  counting requests with no line after it (a working engine keeps printing), requests arriving and
  never served, the engine's own hang messages (shared-memory broadcast waits, RPC timeouts, a dead
  engine core or worker, an input dump);
* it went idle when its last lines count no running and no waiting request: quiet is what vLLM does
  when idle, whatever else the log says (V0 workers warn about shared-memory waits while idle too);
* with no progress line at all, the engine's hang messages still date a stall: a shared-memory wait
  reports how long it has waited, an RPC timeout fires ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` after
  its call (``ts_basis`` inferred);
* a run of stats lines at 0.0 tokens/s, prompt and generation, that still count running or waiting
  requests is silence with work pending (interface.md §3), whatever the lines' own cadence: the engine
  served no token while requests were in it.  It is a stall once it covers ``ZERO_INTERVALS`` intervals
  (at least ``ZERO_MIN_S``) with a request running; with none running and requests waiting (a V0 engine
  steps, schedules nothing and logs), one whole interval after progress is enough when the queue did not
  drain.  With no progress line at all, the run dates the stall itself: its first line already covers
  the interval before it (``ts_basis`` inferred).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ...ranks import rank_key
from ...store import Store
from .pending import Judgement
from .probes import NON_WORK_PATHS
from .segments import SEGS, Segment, drop_temp, fmt, in_seg, segments_table, temp_table

DEFAULT_INTERVAL_S = 10.0     # VLLM_LOG_STATS_INTERVAL's default
MAX_INTERVAL_S = 60.0
DUE_INTERVALS = 5             # a working engine prints a line every interval: this many missing ones ...
MIN_SILENCE_S = 60.0          # ... and at least this long is a silence worth judging
MIN_LATE_REQUESTS = 2
RPC_TIMEOUT_S = 300.0         # VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS' default
ZERO_INTERVALS = 3            # stats lines at 0 tokens/s counting a running request: this many intervals ...
ZERO_MIN_S = 30.0             # ... and at least this long, with no token served, is a stall
# Processes that read the shared-memory broadcast (workers): their waits are also printed while idle
WORKER_TAG = r"^(?:TP|PP|DP|EP)\d|Worker|RayWorker"


Key = tuple[str, int]         # (engine, segment)
FIRST = "(e.ts, e.path, e.line)"   # the first of several records of one clock second: by file and line
VP = "_hf_vllm_series"        # the moving series being judged, and their onset, arrival and last-line times
TAIL = "_hf_vllm_tail"        # each run's last dated record, where the probes' count after it starts


@dataclass
class Series:
    """One progress series: the engine, or one engine core of a data-parallel deployment."""

    label: str                     # '' (the engine) or 'DP1'
    interval: float                # seconds between its stats lines (the logger's timer)
    last: dict[str, Any]           # its last stats line
    progress: dict[str, Any] | None = None   # its last line with generation throughput
    active: datetime | None = None           # its last line with any throughput (prefill counts)
    stale: dict[str, Any] | None = None      # a later 0 tokens/s line still counting requests
    # its trailing lines at 0 tokens/s counting requests: the first and the last (one when alone), how
    # many, and whether any counted a running request
    zero: list[dict[str, Any]] = field(default_factory=list)
    zero_n: int = 0
    zero_running: bool = False
    judgement: Judgement = field(default_factory=Judgement)
    k: int = -1                    # its row in the judged series' parameters (VP)

    @property
    def idle(self) -> bool:
        return not (self.last["running"] or 0) and not (self.last["waiting"] or 0)

    def due(self) -> datetime:
        start = max(t for t in (self.progress["ts"], self.active) if t is not None)  # type: ignore[index]
        return start + timedelta(seconds=max(DUE_INTERVALS * self.interval, MIN_SILENCE_S))

    def zero_start(self) -> datetime | None:
        """Since when the trailing zero run says no token was served: its last active line, else (no line
        with throughput at all) one interval before its first line, which reports the interval before it."""
        if not self.zero:
            return None
        return self.active or self.zero[0]["ts"] - timedelta(seconds=self.interval)

    @property
    def zero_stall(self) -> bool:
        """The trailing zero run is a stall in itself (see the module's notes)."""
        start = self.zero_start()
        if start is None:
            return False
        covered = (self.zero[-1]["ts"] - start).total_seconds()
        if self.zero_running:
            return covered >= max(ZERO_INTERVALS * self.interval, ZERO_MIN_S)
        before = (self.progress or {}).get("waiting") or 0
        return (self.progress is not None and covered >= 0.9 * self.interval
                and (self.zero[-1]["waiting"] or 0) >= max(before, 1))


def series_all(store: Store, engines: list[str]) -> dict[Key, list[Series]]:
    """The progress series of every run of ``engines`` (its runs in the temporary table SEGS), in one query:
    per series its interval (median gap), last line, last line with generation, the first later line still
    counting requests at 0 tokens/s, and its trailing run of such lines after its last active line."""
    rows = store.query(
        f"""WITH v AS (
              SELECT v.engine, s.seg, v.series, v.ts, v.line, v.gen_tps, v.prompt_tps, v.running, v.waiting,
                     {{'ts': v.ts, 'path': v.path, 'line': v.line, 'running': v.running, 'waiting': v.waiting,
                      'kv_usage': v.kv_usage}} AS r
              FROM vllm_series v JOIN {SEGS} s ON s.engine = v.engine AND {in_seg('v.ts')}
              WHERE list_contains(?, v.engine) AND v.ts IS NOT NULL),
            w AS (
              SELECT *, epoch(ts) - epoch(lag(ts) OVER (PARTITION BY engine, seg, series ORDER BY ts, line)) AS gap,
                     max(ts) FILTER (WHERE gen_tps > 0 OR prompt_tps > 0) OVER k AS active,
                     max(ts) FILTER (WHERE gen_tps > 0) OVER k AS progress_ts,
                     COALESCE(prompt_tps, 0) + COALESCE(gen_tps, 0) = 0
                       AND (COALESCE(running, 0) > 0 OR COALESCE(waiting, 0) > 0) AS zero
              FROM v WINDOW k AS (PARTITION BY engine, seg, series)),
            z AS (
              -- the trailing run: lines after the active one, after the last of them that is not at 0 tokens/s
              -- counting requests
              SELECT *, (active IS NULL OR ts > active) AND zero AND (broken IS NULL OR (ts, line) > broken) AS run
              FROM (SELECT *, max((ts, line)) FILTER (WHERE (active IS NULL OR ts > active) AND NOT zero)
                                OVER (PARTITION BY engine, seg, series) AS broken FROM w))
            SELECT engine, seg, series, median(gap) FILTER (WHERE gap > 0) AS interval, any_value(active) AS active,
                   arg_max(r, (ts, line)) AS last, arg_max(r, (ts, line)) FILTER (WHERE gen_tps > 0) AS progress,
                   arg_min(r, (ts, line)) FILTER (WHERE ts > progress_ts AND gen_tps = 0
                                                  AND (running > 0 OR waiting > 0)) AS stale,
                   count(*) FILTER (WHERE run) AS zero_n, arg_min(r, (ts, line)) FILTER (WHERE run) AS zero_first,
                   arg_max(r, (ts, line)) FILTER (WHERE run) AS zero_last,
                   bool_or(COALESCE(running, 0) > 0) FILTER (WHERE run) AS zero_running
            FROM z GROUP BY ALL""", [engines])
    out: dict[Key, list[Series]] = {}
    for r in sorted(rows, key=lambda r: rank_key(r["series"])):
        zero = [] if not r["zero_n"] else [r["zero_first"]] if r["zero_n"] == 1 else [r["zero_first"], r["zero_last"]]
        out.setdefault((r["engine"], r["seg"]), []).append(Series(
            r["series"], min(float(r["interval"] or DEFAULT_INTERVAL_S), MAX_INTERVAL_S), r["last"], r["progress"],
            r["active"], r["stale"], zero, r["zero_n"], bool(r["zero_running"])))
    return out


def _probed_tails(store: Store, segs: list[Segment]) -> dict[Key, tuple[float, int, float]]:
    """Per run, seconds the liveness probes went on after the engine's last dated record, judged by their
    count and their own interval: uvicorn's access lines carry no time, so those printed after the last
    dated line all take its time, and only the probes' steady cadence says how long the engine stayed up.
    Returns (seconds, probes, interval)."""
    engines = sorted({s.engine for s in segs})
    if not engines:
        return {}
    keys = {(s.engine, s.index) for s in segs}
    last = [r for r in store.query(
        f"""SELECT s.engine, s.seg, e.path, e.line, e.ts FROM events e JOIN {SEGS} s ON s.engine = e.engine
              AND {in_seg('e.ts')}
            WHERE list_contains(?, e.engine) AND e.ts IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY s.engine, s.seg ORDER BY e.ts DESC, e.line DESC) = 1""",
        [engines]) if (r["engine"], r["seg"]) in keys]
    temp_table(store, TAIL, {"engine": ("VARCHAR", [r["engine"] for r in last]),
                             "seg": ("INTEGER", [r["seg"] for r in last]),
                             "lpath": ("VARCHAR", [r["path"] for r in last]),
                             "lline": ("BIGINT", [r["line"] for r in last]),
                             "lts": ("TIMESTAMP", [r["ts"] for r in last])})
    rows = store.query(
        f"""WITH r AS (
              SELECT h.*, regexp_replace(COALESCE(h.client, ''), ':\\d+$', '') AS host FROM http_requests h
              WHERE list_contains(?, h.engine) AND h.method IN ('GET', 'HEAD') AND h.status = 200),
            g AS (SELECT *, epoch(ts) - epoch(lag(ts) OVER (PARTITION BY engine, host, path ORDER BY file, line)) AS gap
                  FROM r)
            SELECT t.engine, t.seg, g.host, g.path,
                   count(*) FILTER (WHERE g.file = t.lpath AND g.line > t.lline AND g.ts <= t.lts) AS n,
                   median(g.gap) FILTER (WHERE g.gap > 0) AS interval
            FROM g JOIN probes p ON p.engine = g.engine AND p.method = g.method AND p.path = g.path
                 AND p.client = g.host
            JOIN {TAIL} t ON t.engine = g.engine
            GROUP BY t.engine, t.seg, g.host, g.path""", [sorted({r["engine"] for r in last})])
    best: dict[Key, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["host"], r["path"])):
        key = (r["engine"], r["seg"])
        if key not in best or r["n"] > best[key]["n"]:
            best[key] = r
    out = {}
    for key, r in best.items():
        if r["n"] and r["interval"]:
            n, interval = r["n"], min(float(r["interval"]), MAX_INTERVAL_S * 5)
            out[key] = (n * interval, n, interval)
    return out


def stalls_of(store: Store, segs: list[Segment], ends: dict[Key, datetime]) -> dict[Key, dict[str, Any] | None]:
    """The stall of each run of a vLLM engine, or None (idle, slow, or serving to the end of the evidence).
    ``ends``: each run's last dated event or access line; its runs are in the temporary table SEGS."""
    if not segs:
        return {}
    engines = sorted({s.engine for s in segs})
    try:
        series = series_all(store, engines)
        moving = {(s.engine, s.index): [x for x in series.get((s.engine, s.index), []) if x.progress is not None]
                  for s in segs}
        tails = _probed_tails(store, [s for s in segs if moving[(s.engine, s.index)]])
        judged = [(s, x) for s in segs for x in moving[(s.engine, s.index)]]
        for k, (_, x) in enumerate(judged):
            x.k = k
        onsets = [x.progress["ts"] for _, x in judged]                                  # type: ignore[index]
        segments_table(store, VP, [s for s, _ in judged],
                       k=("INTEGER", list(range(len(judged)))),
                       label=("VARCHAR", [x.label for _, x in judged]),
                       onset=("TIMESTAMP", onsets),
                       # arrivals count once the requests of the last progress had time to complete
                       after=("TIMESTAMP", [t + timedelta(seconds=max(2.0, 3 * x.interval))
                                            for t, (_, x) in zip(onsets, judged, strict=True)]),
                       last_ts=("TIMESTAMP", [x.last["ts"] for _, x in judged]))
        facts = _series_facts(store, engines)
        still = sorted({s.engine for s in segs if not moving[(s.engine, s.index)]})
        hang = _hang_messages(store, still)
    finally:
        drop_temp(store, VP, TAIL)
    out: dict[Key, dict[str, Any] | None] = {}
    for seg in segs:
        key = (seg.engine, seg.index)
        if not moving[key]:
            out[key] = (_inferred(seg, ends.get(key), series.get(key, []), hang.get(key, []))
                        or _zero_only(seg, ends.get(key), series.get(key, [])))
        else:
            out[key] = _stall_of(seg, ends.get(key), moving[key], tails.get(key, (0.0, 0, 0.0)), facts)
    return out


def _stall_of(seg: Segment, end: datetime | None, moving: list[Series], tail: tuple[float, int, float],
              facts: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    tail_s, n_probes, every_s = tail
    judged_end = end + timedelta(seconds=tail_s) if end is not None else None
    stalled = []
    every = all(_stopped(s, judged_end) for s in moving)
    for s in moving:
        f = facts.get(s.k, {})
        # a hard message (RPC timeout, a dead engine core or worker) after the series' last progress: the
        # engine says it is stuck before the silence is long enough to tell
        if not _stopped(s, judged_end) and not f.get("hard_after") and not s.zero_stall:
            continue
        _judge(s, judged_end, every or len(moving) == 1, f)
        j = s.judgement
        if j.reasons and (j.hard or _stopped(s, judged_end) or s.zero_stall):
            stalled.append(s)
    if any(not _stopped(s, end) and not s.judgement.hard for s in stalled):     # the probes' count decided it
        stalled[-1].judgement.reasons.append(
            f"{n_probes} liveness probe(s) answered 200 after the last dated line, about every {every_s:.0f} s: "
            f"the server stayed up about {tail_s / 60:.1f} min more (its access lines print no time of their own)")
    if not stalled:
        return None
    head = max(stalled, key=lambda s: (s.progress["ts"], s.progress["line"]))  # type: ignore[index]
    onset: datetime = head.progress["ts"]                                      # type: ignore[index]
    stale = head.stale or head.last
    many = len(moving) > 1
    return {
        "engine": seg.engine, "segment": seg.index, "onset": onset, "evidence_end": end,
        # the silence as judged: to the end of the dated evidence, or of the probes after it
        "silent_s": (judged_end - onset).total_seconds() if judged_end else 0.0,
        "pending": "; ".join((f"{s.label}: " if many else "") + "; ".join(s.judgement.reasons) for s in stalled),
        "ranks": [s.label for s in stalled if s.label], "path": head.progress["path"],   # type: ignore[index]
        "line": head.progress["line"],                                                     # type: ignore[index]
        "evidence": [{"file": head.progress["path"], "line": head.progress["line"]}]      # type: ignore[index]
                    + [e for s in stalled for e in s.judgement.evidence],
        "ts_basis": "read", "cadence_s": head.interval, "running_req": stale["running"],
        "waiting_req": stale["waiting"], "kv_usage": stale["kv_usage"], "framework": "vllm",
    }


def _zero_only(seg: Segment, end: datetime | None, series: list[Series]) -> dict[str, Any] | None:
    """No stats line with generation in the run, but a run of lines at 0 tokens/s counting requests long
    enough to be a stall: dated by its start (inferred: the first line covers the interval before it)."""
    zero = [s for s in series if s.zero_stall]
    if not zero:
        return None
    s = min(zero, key=lambda s: s.zero_start() or datetime.max)
    first, last = s.zero[0], s.zero[-1]
    onset = s.zero_start()
    assert onset is not None
    how = (f"{s.zero_n} stats line(s) from {fmt(first['ts'])} to {fmt(last['ts'])} counted {last['running']} "
           f"running and {last['waiting']} waiting request(s) at 0.0 tokens/s, prompt and generation: no token "
           f"served in {(last['ts'] - onset).total_seconds():.0f} s with requests in the engine")
    return {
        "engine": seg.engine, "segment": seg.index, "onset": onset, "evidence_end": end,
        "silent_s": (end - onset).total_seconds() if end else None,
        "pending": f"{how}; no stats line with generation throughput is in the evidence, so the onset is inferred: "
                   f"the first of them ({fmt(first['ts'])}) reports the {s.interval:.0f} s before it",
        "ranks": [s.label] if s.label and len(series) > 1 else [], "path": first["path"], "line": first["line"],
        "evidence": [{"file": first["path"], "line": first["line"]}, {"file": last["path"], "line": last["line"]}],
        "ts_basis": "inferred", "cadence_s": s.interval, "running_req": last["running"],
        "waiting_req": last["waiting"], "kv_usage": last["kv_usage"], "framework": "vllm",
    }


def _stopped(s: Series, end: datetime | None) -> bool:
    return end is not None and end >= s.due()


def _judge(s: Series, end: datetime | None, engine_wide: bool, f: dict[str, Any]) -> None:
    """Why a stopped series had work pending (``s.judgement``); nothing when it went idle."""
    j = s.judgement
    last = s.last
    # the requests of the last stats line visibly completed after it ('Finished request' lines)
    finished = bool(f.get("done")) and f["done"] >= (last["running"] or 0) + (last["waiting"] or 0)
    if s.stale is not None and not s.idle:
        st = s.stale
        j.add(f"the stats line at {fmt(st['ts'])} still counted {st['running']} running and {st['waiting']} "
              f"waiting request(s) at 0 tokens/s: numbers the engine core last reported, it sent no more",
              st["path"], st["line"])
    elif not s.idle and end is not None and not finished:
        j.add(f"the last stats line ({fmt(last['ts'])}) counted {last['running']} running and {last['waiting']} "
              f"waiting request(s) and none followed in the {(end - last['ts']).total_seconds():.0f} s after it, "
              f"though vLLM prints one every {s.interval:.0f} s while it has work", last["path"], last["line"])
    if engine_wide:
        _arrivals(s, j, f)
    _signals(s, j, f)


def _arrivals(s: Series, j: Judgement, f: dict[str, Any]) -> None:
    """Work requests still arriving after the last progress, past the time a line was due: none was
    served (a served request generates tokens, and a stats line shows them)."""
    row = f.get("arrivals")
    if row and row["n"] >= MIN_LATE_REQUESTS and row["last"] >= s.due():
        j.add(f"{row['n']} request(s) arrived after it (first at {fmt(row['first'])}, last at {fmt(row['last'])}) "
              f"and no stats line showed any served", row["file"], row["line"])


# The engine's own messages after the last progress: (kind, words, hard)
SIGNALS = [
    ("vllm_shm_wait", "the shared-memory broadcast of scheduler outputs to the workers found no free block", True),
    ("vllm_rpc_timeout", "an RPC to the workers timed out", True),
    ("vllm_engine_dead", "the engine core died", True),
    ("vllm_worker_died", "a worker process died", True),
    ("vllm_input_dump", "the engine core hit an exception and dumped its input", True),
]


def _signals(s: Series, j: Judgement, f: dict[str, Any]) -> None:
    """Hang messages after the series' last progress (``_series_facts``).  Waits printed by workers
    (readers of the broadcast) are also printed while idle: they count only while requests were running
    or waiting."""
    for i, (kind, words, hard) in enumerate(SIGNALS):
        readers = kind == "vllm_shm_wait" and s.idle
        hit = f.get("signals", {}).get(i)
        if not hit or not hit["n"] or (readers and not hit["writer"]):
            continue
        j.add(f"{words} ({hit['n']} time(s), first at {fmt(hit['first'])})", hit["path"], hit["line"],
              hard and (kind != "vllm_shm_wait" or bool(hit["writer"])))


def _series_facts(store: Store, engines: list[str]) -> dict[int, dict[str, Any]]:
    """Per judged series (VP), what followed its last progress within its run: hard messages, 'Finished
    request' lines after its last stats line, work requests arriving past the grace after it, and the
    engine's hang messages.  For one engine core of several, hang messages of its own processes
    (``EngineCore_DP1``, ``DP1 TP0`` for series DP1) and of processes that name no core (the API server);
    for the engine as a whole, any."""
    own = ("(q.label = '' OR regexp_matches(e.rank, '(?:^|_| )' || q.label || '(?:$|_| )') "
           "OR NOT regexp_matches(e.rank, '(?:^|_| )DP\\d+(?:$|_| )'))")
    arrival = "e.kind = 'vllm_request' AND e.ts > q.after"
    # of several records in one clock second, the first by file and line
    aggs = [f"count(*) FILTER (WHERE {arrival}) AS an, min(e.ts) FILTER (WHERE {arrival}) AS afirst, "
            f"max(e.ts) FILTER (WHERE {arrival}) AS alast, "
            f"arg_min(e.path, {FIRST}) FILTER (WHERE {arrival}) AS afile, "
            f"arg_min(e.line, {FIRST}) FILTER (WHERE {arrival}) AS aline"]
    for i, (kind, _, _) in enumerate(SIGNALS):
        c = f"e.kind = '{kind}' AND e.ts > q.onset AND {own}"
        aggs.append(f"count(*) FILTER (WHERE {c}) AS n{i}, min(e.ts) FILTER (WHERE {c}) AS first{i}, "
                    f"arg_min(e.path, {FIRST}) FILTER (WHERE {c}) AS path{i}, "
                    f"arg_min(e.line, {FIRST}) FILTER (WHERE {c}) AS line{i}, "
                    f"bool_or(NOT regexp_matches(e.rank, $2)) FILTER (WHERE {c}) AS writer{i}")
    rows = store.query(
        f"""SELECT q.k,
                   count(*) FILTER (WHERE e.ts > q.onset AND e.kind IN ('vllm_rpc_timeout', 'vllm_engine_dead',
                                                                          'vllm_worker_died')) AS hard_after,
                   count(*) FILTER (WHERE e.kind = 'vllm_request_done' AND e.ts >= q.last_ts) AS done,
                   {', '.join(aggs)}
            FROM events e JOIN {VP} q ON q.engine = e.engine AND {in_seg('e.ts', 'q')}
            WHERE list_contains($1, e.engine) GROUP BY q.k""", [engines, WORKER_TAG])
    http = {r["k"]: r for r in store.query(
        f"""SELECT q.k, count(*) AS n, min(h.ts) AS first, max(h.ts) AS last,
                   arg_min(h.file, (h.ts, h.file, h.line)) AS file, arg_min(h.line, (h.ts, h.file, h.line)) AS line
            FROM http_requests h JOIN {VP} q ON q.engine = h.engine AND h.ts > q.after AND {in_seg('h.ts', 'q')}
            WHERE list_contains(?, h.engine) AND h.method IN ('POST', 'PUT')
              AND NOT list_contains(?, split_part(h.path, '?', 1))
            GROUP BY q.k""", [engines, list(NON_WORK_PATHS)])}
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        out[r["k"]] = {
            "hard_after": bool(r["hard_after"]), "done": r["done"],
            "signals": {i: {"n": r[f"n{i}"], "first": r[f"first{i}"], "path": r[f"path{i}"], "line": r[f"line{i}"],
                            "writer": r[f"writer{i}"]} for i in range(len(SIGNALS))},
            "arrivals": {"n": r["an"], "first": r["afirst"], "last": r["alast"], "file": r["afile"],
                         "line": r["aline"]}}
    # the access lines and the 'Received request' lines together: the first of either (access lines first)
    for k, h in http.items():
        a = out.setdefault(k, {}).setdefault("arrivals", {"n": 0, "first": None, "last": None, "file": None,
                                                           "line": None})
        if a["first"] is None or (h["first"] is not None and h["first"] <= a["first"]):
            a["file"], a["line"] = h["file"], h["line"]
        a["n"] += h["n"]
        a["first"] = min((t for t in (a["first"], h["first"]) if t is not None), default=None)
        a["last"] = max((t for t in (a["last"], h["last"]) if t is not None), default=None)
    return out


def _hang_messages(store: Store, engines: list[str]) -> dict[Key, list[dict[str, Any]]]:
    """Per run of ``engines``: its dated shared-memory waits and RPC timeouts, in order."""
    if not engines:
        return {}
    out: dict[Key, list[dict[str, Any]]] = {}
    for r in store.query(
            f"""SELECT s.engine, s.seg, e.kind, e.ts, e.path, e.line,
                       TRY_CAST(json_extract_string(e.attrs, '$.waited_s') AS DOUBLE) AS waited,
                       NOT regexp_matches(e.rank, ?) AS writer
                FROM events e JOIN {SEGS} s ON s.engine = e.engine AND {in_seg('e.ts')}
                WHERE list_contains(?, e.engine) AND e.ts IS NOT NULL
                  AND e.kind IN ('vllm_shm_wait', 'vllm_rpc_timeout')
                ORDER BY s.engine, s.seg, e.ts, e.line""", [WORKER_TAG, engines]):
        out.setdefault((r["engine"], r["seg"]), []).append(r)
    return out


def _inferred(seg: Segment, end: datetime | None, series: list[Series],
              rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """No stats line with generation in the run: a shared-memory wait (it says how long it waited) from the
    engine core, or with requests counted, still dates a stall; so does an RPC timeout."""
    counted = any(not s.idle for s in series)
    first = next((r for r in rows if r["kind"] == "vllm_rpc_timeout"
                  or (r["kind"] == "vllm_shm_wait" and (r["writer"] or counted))), None)
    if first is None:
        return None
    if first["kind"] == "vllm_shm_wait":
        secs = first["waited"] or 60.0
        how = (f"the shared-memory broadcast found no free block for {secs:.0f} s at {fmt(first['ts'])}: the "
               f"workers stopped taking scheduler outputs {secs:.0f} s before")
    else:
        secs = RPC_TIMEOUT_S
        how = (f"an RPC to the workers timed out at {fmt(first['ts'])}, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS "
               f"({secs:.0f} s by default) after it was sent")
    onset = first["ts"] - timedelta(seconds=secs)
    return {
        "engine": seg.engine, "segment": seg.index, "onset": onset, "evidence_end": end,
        "silent_s": (end - onset).total_seconds() if end else None,
        "pending": f"{how}; no stats line with generation throughput is in the evidence, so the onset is "
                   f"inferred: {fmt(first['ts'])} minus {secs:.0f} s",
        "ranks": [], "path": first["path"], "line": first["line"],
        "evidence": [{"file": first["path"], "line": first["line"]}], "ts_basis": "inferred", "cadence_s": None,
        "running_req": series[0].last["running"] if series else None,
        "waiting_req": series[0].last["waiting"] if series else None,
        "kv_usage": series[0].last["kv_usage"] if series else None, "framework": "vllm",
    }
