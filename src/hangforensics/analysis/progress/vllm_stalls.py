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
from .segments import Segment, fmt

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


def is_vllm(store: Store, engine: str) -> bool:
    """The engine logs like vLLM: its stats lines, or its hang and start messages."""
    return bool(store.scalar(
        "SELECT EXISTS (SELECT 1 FROM vllm_stats WHERE engine = $1) "
        "OR EXISTS (SELECT 1 FROM events WHERE engine = $1 AND kind LIKE 'vllm%')", [engine]))


@dataclass
class Series:
    """One progress series: the engine, or one engine core of a data-parallel deployment."""

    label: str                     # '' (the engine) or 'DP1'
    interval: float                # seconds between its stats lines (the logger's timer)
    last: dict[str, Any]           # its last stats line
    progress: dict[str, Any] | None = None   # its last line with generation throughput
    active: datetime | None = None           # its last line with any throughput (prefill counts)
    stale: dict[str, Any] | None = None      # a later 0 tokens/s line still counting requests
    zero: list[dict[str, Any]] = field(default_factory=list)   # its trailing lines at 0 tokens/s counting requests
    judgement: Judgement = field(default_factory=Judgement)

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
        if any((z["running"] or 0) > 0 for z in self.zero):
            return covered >= max(ZERO_INTERVALS * self.interval, ZERO_MIN_S)
        before = (self.progress or {}).get("waiting") or 0
        return (self.progress is not None and covered >= 0.9 * self.interval
                and (self.zero[-1]["waiting"] or 0) >= max(before, 1))


def series_of(store: Store, seg: Segment) -> list[Series]:
    w, p = seg.where()
    rows = store.query(
        f"""WITH s AS (
              SELECT *, epoch(ts) - epoch(lag(ts) OVER (PARTITION BY series ORDER BY ts, line)) AS gap,
                     row_number() OVER (PARTITION BY series ORDER BY ts DESC, line DESC) AS k
              FROM vllm_series WHERE engine = ? {w} AND ts IS NOT NULL)
            SELECT series, median(gap) FILTER (WHERE gap > 0) AS interval,
                   max(ts) FILTER (WHERE gen_tps > 0 OR prompt_tps > 0) AS active
            FROM s GROUP BY series""", [seg.engine, *p])
    last = _rows_by_series(store, seg, "TRUE")
    progress = _rows_by_series(store, seg, "gen_tps > 0")
    out = []
    for r in sorted(rows, key=lambda r: rank_key(r["series"])):
        s = Series(r["series"], min(float(r["interval"] or DEFAULT_INTERVAL_S), MAX_INTERVAL_S),
                   last[r["series"]], progress.get(r["series"]), r["active"])
        if s.progress is not None:
            stale = store.query(
                f"""SELECT ts, path, line, running, waiting, kv_usage FROM vllm_series
                    WHERE engine = ? AND series = ? AND ts > ? AND gen_tps = 0 AND (running > 0 OR waiting > 0) {w}
                    ORDER BY ts, line LIMIT 1""", [seg.engine, s.label, s.progress["ts"], *p])
            s.stale = stale[0] if stale else None
        s.zero = _zero_run(store, seg, s)
        out.append(s)
    return out


def _zero_run(store: Store, seg: Segment, s: Series) -> list[dict[str, Any]]:
    """The series' trailing stats lines at 0 tokens/s (prompt and generation) that still count running or
    waiting requests, oldest first: after its last line with any throughput, up to its last line."""
    w, p = seg.where()
    rows = store.query(
        f"""SELECT ts, path, line, running, waiting, kv_usage, COALESCE(prompt_tps, 0) + COALESCE(gen_tps, 0) AS tps
            FROM vllm_series WHERE engine = ? AND series = ? {w} AND ts IS NOT NULL AND ts > ?
            ORDER BY ts, line""", [seg.engine, s.label, s.active or datetime.min, *p])
    run: list[dict[str, Any]] = []
    for r in rows:
        run = [*run, r] if r["tps"] == 0 and ((r["running"] or 0) > 0 or (r["waiting"] or 0) > 0) else []
    return run


def _rows_by_series(store: Store, seg: Segment, cond: str) -> dict[str, dict[str, Any]]:
    w, p = seg.where()
    rows = store.query(
        f"""SELECT * FROM vllm_series WHERE engine = ? {w} AND ts IS NOT NULL AND {cond}
            QUALIFY row_number() OVER (PARTITION BY series ORDER BY ts DESC, line DESC) = 1""", [seg.engine, *p])
    return {r["series"]: r for r in rows}


def evidence_end(store: Store, seg: Segment) -> datetime | None:
    w, p = seg.where()
    e = seg.engine
    return store.scalar(
        f"""SELECT max(ts) FROM (
              SELECT ts FROM events WHERE engine = ? {w}
              UNION ALL SELECT ts FROM http_requests WHERE engine = ? {w})""", [e, *p, e, *p])


def probed_tail_s(store: Store, seg: Segment) -> tuple[float, int, float]:
    """Seconds the liveness probes went on after the engine's last dated record, judged by their count and
    their own interval: uvicorn's access lines carry no time, so those printed after the last dated line
    all take its time, and only the probes' steady cadence says how long the engine stayed up.  Returns
    (seconds, probes, interval)."""
    w, p = seg.where()
    last = store.query(f"SELECT path, line, ts FROM events WHERE engine = ? {w} AND ts IS NOT NULL "
                       f"ORDER BY ts DESC, line DESC LIMIT 1", [seg.engine, *p])
    if not last:
        return 0.0, 0, 0.0
    rows = store.query(
        """WITH r AS (
              SELECT h.*, regexp_replace(COALESCE(h.client, ''), ':\\d+$', '') AS host FROM http_requests h
              WHERE h.engine = ? AND h.method IN ('GET', 'HEAD') AND h.status = 200),
            g AS (SELECT *, epoch(ts) - epoch(lag(ts) OVER (PARTITION BY host, path ORDER BY file, line)) AS gap FROM r)
            SELECT count(*) FILTER (WHERE g.file = ? AND g.line > ? AND g.ts <= ?) AS n,
                   median(g.gap) FILTER (WHERE g.gap > 0) AS interval
            FROM g JOIN probes p ON p.engine = g.engine AND p.method = g.method AND p.path = g.path
                 AND p.client = g.host
            GROUP BY g.host, g.path ORDER BY n DESC LIMIT 1""",
        [seg.engine, last[0]["path"], last[0]["line"], last[0]["ts"]])
    if not rows or not rows[0]["n"] or not rows[0]["interval"]:
        return 0.0, 0, 0.0
    n, interval = rows[0]["n"], min(float(rows[0]["interval"]), MAX_INTERVAL_S * 5)
    return n * interval, n, interval


def stall_of(store: Store, seg: Segment) -> dict[str, Any] | None:
    """The stall of one run of a vLLM engine, or None (idle, slow, or serving to the end of the evidence)."""
    end = evidence_end(store, seg)
    series = series_of(store, seg)
    moving = [s for s in series if s.progress is not None]
    if not moving:
        return _inferred(store, seg, end, series) or _zero_only(seg, end, series)
    tail_s, n_probes, every_s = probed_tail_s(store, seg)
    judged_end = end + timedelta(seconds=tail_s) if end is not None else None
    stalled = []
    every = all(_stopped(s, judged_end) for s in moving)
    for s in moving:
        if not _stopped(s, judged_end) and not _hard_after(store, seg, s) and not s.zero_stall:
            continue
        _judge(store, seg, s, judged_end, engine_wide=every or len(moving) == 1)
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
    how = (f"{len(s.zero)} stats line(s) from {fmt(first['ts'])} to {fmt(last['ts'])} counted {last['running']} "
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


def _judge(store: Store, seg: Segment, s: Series, end: datetime | None, engine_wide: bool) -> None:
    """Why a stopped series had work pending (``s.judgement``); nothing when it went idle."""
    j = s.judgement
    last = s.last
    if s.stale is not None and not s.idle:
        st = s.stale
        j.add(f"the stats line at {fmt(st['ts'])} still counted {st['running']} running and {st['waiting']} "
              f"waiting request(s) at 0 tokens/s: numbers the engine core last reported, it sent no more",
              st["path"], st["line"])
    elif not s.idle and end is not None and not _finished(store, seg, last):
        j.add(f"the last stats line ({fmt(last['ts'])}) counted {last['running']} running and {last['waiting']} "
              f"waiting request(s) and none followed in the {(end - last['ts']).total_seconds():.0f} s after it, "
              f"though vLLM prints one every {s.interval:.0f} s while it has work", last["path"], last["line"])
    if engine_wide:
        _arrivals(store, seg, s, j)
    _signals(store, seg, s, j)


def _finished(store: Store, seg: Segment, last: dict[str, Any]) -> bool:
    """The requests of the last stats line visibly completed after it ('Finished request' lines)."""
    w, p = seg.where()
    done = store.scalar(
        f"SELECT count(*) FROM events WHERE engine = ? AND kind = 'vllm_request_done' AND ts >= ? {w}",
        [seg.engine, last["ts"], *p])
    return bool(done) and done >= (last["running"] or 0) + (last["waiting"] or 0)


def _arrivals(store: Store, seg: Segment, s: Series, j: Judgement) -> None:
    """Work requests still arriving after the last progress, past the time a line was due: none was
    served (a served request generates tokens, and a stats line shows them)."""
    w, p = seg.where()
    ws, ps = seg.where("h.ts")
    onset = s.progress["ts"]                                               # type: ignore[index]
    after = onset + timedelta(seconds=max(2.0, 3 * s.interval))
    row = store.query(
        f"""SELECT count(*) AS n, min(ts) AS first, max(ts) AS last, arg_min(file, ts) AS file,
                   arg_min(line, ts) AS line FROM (
              SELECT h.ts, h.file, h.line FROM http_requests h WHERE h.engine = ? AND h.ts > ? {ws}
                AND h.method IN ('POST', 'PUT') AND NOT list_contains(?, split_part(h.path, '?', 1))
              UNION ALL
              SELECT ts, path, line FROM events WHERE engine = ? AND ts > ? AND kind = 'vllm_request' {w})""",
        [seg.engine, after, *ps, list(NON_WORK_PATHS), seg.engine, after, *p])[0]
    if row["n"] >= MIN_LATE_REQUESTS and row["last"] >= s.due():
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


def _signals(store: Store, seg: Segment, s: Series, j: Judgement) -> None:
    """Hang messages after the series' last progress: for one engine core of several, those of its own
    processes (``EngineCore_DP1``, ``DP1 TP0`` for series DP1) and of processes that name no core (the API
    server); for the engine as a whole, any.  Waits printed by workers (readers of the broadcast) are
    also printed while idle: they count only while requests were running or waiting."""
    w, p = seg.where()
    onset = s.progress["ts"]                                               # type: ignore[index]
    own = (f"AND (regexp_matches(rank, '(?:^|_| ){s.label}(?:$|_| )') "
           f"OR NOT regexp_matches(rank, '(?:^|_| )DP\\d+(?:$|_| )'))") if s.label else ""
    for kind, words, hard in SIGNALS:
        readers = kind == "vllm_shm_wait" and s.idle
        hit = store.query(
            f"""SELECT count(*) AS n, min(ts) AS first, arg_min(path, ts) AS path, arg_min(line, ts) AS line,
                       bool_or(NOT regexp_matches(rank, ?)) AS writer
                FROM events WHERE engine = ? AND kind = ? AND ts > ? {own} {w}""",
            [WORKER_TAG, seg.engine, kind, onset, *p])[0]
        if not hit["n"] or (readers and not hit["writer"]):
            continue
        j.add(f"{words} ({hit['n']} time(s), first at {fmt(hit['first'])})", hit["path"], hit["line"],
              hard and (kind != "vllm_shm_wait" or bool(hit["writer"])))


def _hard_after(store: Store, seg: Segment, s: Series) -> bool:
    """A hard message (RPC timeout, a dead engine core or worker) after the series' last progress: the
    engine says it is stuck before the silence is long enough to tell."""
    w, p = seg.where()
    return bool(store.scalar(
        f"SELECT count(*) FROM events WHERE engine = ? AND ts > ? {w} "
        f"AND kind IN ('vllm_rpc_timeout', 'vllm_engine_dead', 'vllm_worker_died')",
        [seg.engine, s.progress["ts"], *p]))                               # type: ignore[index]


def _inferred(store: Store, seg: Segment, end: datetime | None, series: list[Series]) -> dict[str, Any] | None:
    """No stats line with generation in the run: a shared-memory wait (it says how long it waited) from the
    engine core, or with requests counted, still dates a stall; so does an RPC timeout."""
    w, p = seg.where()
    counted = any(not s.idle for s in series)
    rows = store.query(
        f"""SELECT kind, ts, path, line, TRY_CAST(json_extract_string(attrs, '$.waited_s') AS DOUBLE) AS waited,
                   NOT regexp_matches(rank, ?) AS writer
            FROM events WHERE engine = ? {w} AND ts IS NOT NULL AND kind IN ('vllm_shm_wait', 'vllm_rpc_timeout')
            ORDER BY ts, line""", [WORKER_TAG, seg.engine, *p])
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
