"""Derived models the rules read: run segments, stalls, per-rank stops and freeze verdicts.

This is the one place where reasoning needs Python rather than SQL (the rules
in ``rules/`` are SQL over these tables and the interface views).  The logic
follows interface.md §3 "Progress and pending work":

* progress is a Prefill/Decode batch line (or a vLLM stats line with generation throughput above 0:
  the view ``progress``);
* a *segment* is one run of the server (a ``server_args`` line starts a new one);
* a segment *stalls* when its last progress is never followed by more progress,
  the silence lasts at least ``MIN_SILENCE_S`` (or a hard signal such as a
  watchdog or NCCL timeout follows), and something was still waiting on the
  engine: requests arriving after the last batch, failing health checks, a
  watchdog (armed only with a batch in flight), an NCCL timeout, or queued /
  transferring requests in the last batch line.  Without pending work the
  engine is idle; with more progress later it was slow;
* per-rank stop times come, in order of preference, from per-rank batch lines,
  torch ProcessGroupNCCL timeouts (a rank absent from its peers' reports is the
  suspect) and scheduler watchdog lines (fired within the same second: frozen
  together at the group's last progress).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..ranks import rank_numbers
from ..store import Store

MIN_SILENCE_S = 60.0
REQUEST_GRACE_S = 2.0
MIN_LATE_REQUESTS = 2
TOGETHER_S = 1.0
PROBE_PATHS = ("/health", "/health_generate", "/ping", "/healthz", "/readiness", "/liveness")
NON_WORK_PATHS = PROBE_PATHS + ("/metrics", "/get_model_info", "/get_server_info", "/server_info",
                                "/v1/models", "/flush_cache", "/get_load", "/version")


@dataclass
class Segment:
    engine: str
    index: int
    start: datetime | None
    end: datetime | None          # start of the next segment (exclusive) or None


@dataclass
class Freeze:
    engine: str
    segment: int
    verdict: str                  # together, staggered, absent
    ts: datetime | None
    ts_end: datetime | None
    ranks: list[str]
    source: str
    detail: str
    evidence: list[dict[str, Any]] = field(default_factory=list)


def _rank_sort_key(label: str) -> tuple:
    n = rank_numbers(label)
    return (n.get("DP", 0), n.get("PP", 0), n.get("TP", 0), label)


def _fmt(ts: datetime | None) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S") if ts else "?"


def segments_of(store: Store, engine: str) -> list[Segment]:
    starts = [r["ts"] for r in store.query(
        "SELECT ts FROM events WHERE engine = ? AND kind = 'server_args' AND ts IS NOT NULL ORDER BY ts", [engine])]
    bounds: list[datetime] = []
    for t in starts:
        if not bounds or (t - bounds[-1]).total_seconds() > 60:
            bounds.append(t)
    if not bounds:
        return [Segment(engine, 0, None, None)]
    segs = []
    # Evidence before the first server_args (a rotated-away start) belongs to segment 0.
    for i, t in enumerate(bounds):
        segs.append(Segment(engine, i, None if i == 0 else t, bounds[i + 1] if i + 1 < len(bounds) else None))
    return segs


def _in_seg(seg: Segment, col: str = "ts") -> tuple[str, list[Any]]:
    cond, params = [], []
    if seg.start is not None:
        cond.append(f"{col} >= ?")
        params.append(seg.start)
    if seg.end is not None:
        cond.append(f"{col} < ?")
        params.append(seg.end)
    return (" AND " + " AND ".join(cond)) if cond else "", params


def analyze_engine(store: Store, engine: str) -> tuple[list[dict], list[dict], list[Freeze]]:
    stalls: list[dict] = []
    stops: list[dict] = []
    freezes: list[Freeze] = []
    for seg in segments_of(store, engine):
        st = _stall(store, seg)
        if st is None:
            continue
        stalls.append(st)
        seg_stops, fz = _rank_stops(store, seg, st)
        stops.extend(seg_stops)
        if fz is not None:
            freezes.append(fz)
    return stalls, stops, freezes


def _stall(store: Store, seg: Segment) -> dict | None:
    e = seg.engine
    w, p = _in_seg(seg)
    last = store.query(
        f"SELECT ts, path, line, rank, queue_req, pending_req, running_req FROM progress "
        f"WHERE engine = ? {w} ORDER BY ts DESC, line DESC LIMIT 1", [e, *p])
    if not last:
        return None
    onset = last[0]["ts"]
    end = store.scalar(
        f"""SELECT max(ts) FROM (
              SELECT ts FROM events WHERE engine = ? {w}
              UNION ALL SELECT ts FROM http_requests WHERE engine = ? {w}
              UNION ALL SELECT ts FROM progress WHERE engine = ? {w})""", [e, *p, e, *p, e, *p])
    silent = (end - onset).total_seconds() if end else 0.0
    ws, ps = _in_seg(seg)
    reasons: list[str] = []
    evidence: list[dict[str, Any]] = [{"file": last[0]["path"], "line": last[0]["line"]}]
    hard = False

    # requests for work arriving after the last progress
    late = store.query(
        f"""SELECT count(*) AS n, min(ts) AS first, arg_min(file, ts) AS file, arg_min(line, ts) AS line
            FROM http_requests WHERE engine = ? AND ts > ? {ws}
            AND NOT list_contains(?, path) AND method IN ('POST', 'PUT')""",
        [e, onset + timedelta(seconds=REQUEST_GRACE_S), *ps, list(NON_WORK_PATHS)])[0]
    if late["n"] >= MIN_LATE_REQUESTS:
        reasons.append(f"{late['n']} requests arrived after the last batch (first at {_fmt(late['first'])})")
        evidence.append({"file": late["file"], "line": late["line"]})

    def first_event(kind: str, extra: str = "") -> dict | None:
        rows = store.query(
            f"SELECT count(*) AS n, min(ts) AS first, arg_min(path, ts) AS path, arg_min(line, ts) AS line "
            f"FROM events WHERE engine = ? AND kind = ? AND ts > ? {extra} {ws}", [e, kind, onset, *ps])
        return rows[0] if rows and rows[0]["n"] else None

    hc = first_event("health_check_failed")
    if hc:
        reasons.append(f"{hc['n']} health checks failed (first at {_fmt(hc['first'])})")
        evidence.append({"file": hc["path"], "line": hc["line"]})
    wd = first_event("watchdog_timeout")
    if wd:
        hard = True
        reasons.append(f"the scheduler watchdog fired at {_fmt(wd['first'])} (it is armed only with a batch in flight)")
        evidence.append({"file": wd["path"], "line": wd["line"]})
    nccl = first_event("torch_nccl", "AND json_extract_string(attrs, '$.event') = 'collective_timeout'")
    if nccl:
        hard = True
        reasons.append(f"torch NCCL watchdog reported a collective timeout at {_fmt(nccl['first'])}")
        evidence.append({"file": nccl["path"], "line": nccl["line"]})
    # vLLM: its engine hangs show as shared-memory broadcast waits, RPC timeouts, a dead engine core,
    # and a last stats line with 0 tokens/s but requests still running (sglang-formats.md §9)
    for kind, what in (("vllm_shm_wait", "vLLM workers waited for a shared-memory broadcast block"),
                       ("vllm_rpc_timeout", "a vLLM RPC to the workers timed out"),
                       ("vllm_engine_dead", "the vLLM engine core died")):
        hit = first_event(kind)
        if hit:
            hard = True
            reasons.append(f"{what} ({hit['n']} time(s), first at {_fmt(hit['first'])})")
            evidence.append({"file": hit["path"], "line": hit["line"]})
    stale = first_event("vllm_stats", "AND TRY_CAST(regexp_extract(message, 'Running: (\\d+) reqs', 1) AS INT) > 0")
    if stale:
        reasons.append(f"vLLM stats after the last progress still counted running requests at 0 tokens/s "
                       f"({_fmt(stale['first'])})")
        evidence.append({"file": stale["path"], "line": stale["line"]})
    # queued / transferring work in each logging rank's last batch line
    lasts = store.query(
        f"""SELECT rank, arg_max(queue_req, ts) AS q, arg_max(pending_req, ts) AS pend,
                   arg_max(path, ts) AS path, arg_max(line, ts) AS line
            FROM progress WHERE engine = ? {w} GROUP BY rank""", [e, *p])
    waiting = [r for r in lasts if (r["q"] or 0) > 0 or (r["pend"] or 0) > 0]
    if waiting:
        r = waiting[0]
        reasons.append(f"the last batch line of {r['rank'] or 'the engine'} still had "
                       f"{r['q'] or 0} queued and {r['pend'] or 0} waiting (PD) requests")
    if not reasons or (silent < MIN_SILENCE_S and not hard):
        return None
    ranks = sorted({r["rank"] for r in store.query(
        f"""SELECT DISTINCT rank FROM batches WHERE engine = ? {w}
            UNION SELECT DISTINCT rank FROM events WHERE engine = ? {w} AND rank <> '' AND rank NOT LIKE 'rank%'""",
        [e, *p, e, *p]) if r["rank"]}, key=_rank_sort_key)
    return {
        "engine": e, "segment": seg.index, "onset": onset, "evidence_end": end, "silent_s": silent,
        "pending": "; ".join(reasons), "ranks": ranks, "path": last[0]["path"], "line": last[0]["line"],
        "evidence": evidence,
    }


def _rank_stops(store: Store, seg: Segment, stall: dict) -> tuple[list[dict], Freeze | None]:
    e = seg.engine
    w, p = _in_seg(seg)
    onset: datetime = stall["onset"]
    rows: list[dict] = []

    per_rank = store.query(
        f"""SELECT rank, max(ts) AS stopped_at, arg_max(path, ts) AS path, arg_max(line, ts) AS line
            FROM progress WHERE engine = ? {w} GROUP BY rank ORDER BY stopped_at""", [e, *p])
    wd = store.query(
        f"""SELECT rank, min(ts) AS fired_at, arg_min(path, ts) AS path, arg_min(line, ts) AS line
            FROM events WHERE engine = ? AND kind = 'watchdog_timeout' AND ts > ? AND rank <> '' {w}
            AND coalesce(json_extract_string(attrs, '$.who'), 'Scheduler') = 'Scheduler'
            GROUP BY rank ORDER BY fired_at""", [e, onset, *p])
    nccl = store.query(
        f"""SELECT json_extract(attrs, '$.global_rank')::INT AS grank, json_extract(attrs, '$.seq')::BIGINT AS seq,
                   min(ts) AS at, arg_min(path, ts) AS path, arg_min(line, ts) AS line
            FROM events WHERE engine = ? AND kind = 'torch_nccl' AND ts > ? {w}
            AND json_extract_string(attrs, '$.event') = 'collective_timeout' GROUP BY ALL""", [e, onset, *p])
    all_ranks = stall["ranks"]

    if len(per_rank) >= 2:
        for r in per_rank:
            rows.append({"engine": e, "segment": seg.index, "rank": r["rank"], "stopped_at": r["stopped_at"],
                         "source": "batch_lines", "path": r["path"], "line": r["line"]})
        first, last = per_rank[0]["stopped_at"], per_rank[-1]["stopped_at"]
        spread = (last - first).total_seconds()
        ev = [{"file": r["path"], "line": r["line"]} for r in per_rank]
        if spread <= TOGETHER_S:
            return rows, Freeze(e, seg.index, "together", first, last, all_ranks, "batch_lines",
                                f"The {len(per_rank)} ranks that log batch lines all stopped within {spread:.0f} s "
                                f"({_fmt(first)} to {_fmt(last)}): a shared deadlock (collective, rendezvous or "
                                f"registration), not one slow rank.", ev)
        early = [r for r in per_rank if (r["stopped_at"] - first).total_seconds() <= TOGETHER_S]
        nxt = next(r for r in per_rank if r not in early)
        gap = (nxt["stopped_at"] - first).total_seconds()
        return rows, Freeze(e, seg.index, "staggered", first, None, [r["rank"] for r in early], "batch_lines",
                            f"{', '.join(r['rank'] for r in early)} printed its last batch line at {_fmt(first)}, "
                            f"{gap:.0f} s before the next rank ({nxt['rank']} at {_fmt(nxt['stopped_at'])}); "
                            f"the others kept making progress until {_fmt(last)}. The earliest rank to stop is "
                            f"the prime suspect.", ev[: len(early)] + [{"file": nxt["path"], "line": nxt["line"]}])

    if nccl:
        by_seq: dict[int, list[dict]] = {}
        for r in nccl:
            by_seq.setdefault(r["seq"], []).append(r)
        seq, reports = max(by_seq.items(), key=lambda kv: len(kv[1]))
        reporting = {r["grank"] for r in reports}
        known = {rank_numbers(lbl).get("TP") for lbl in all_ranks} - {None}
        if len(known) <= 1:
            tp = store.scalar("SELECT max(json_extract(attrs, '$.tp_size')::INT) FROM events "
                              "WHERE engine = ? AND kind = 'server_args'", [e])
            known = set(range(tp)) if tp else known
        absent = sorted(known - reporting)
        for r in reports:
            rows.append({"engine": e, "segment": seg.index, "rank": f"TP{r['grank']}", "stopped_at": None,
                         "source": "torch_nccl", "path": r["path"], "line": r["line"]})
        if absent and len(absent) < len(known):
            labels = [lbl for lbl in all_ranks if rank_numbers(lbl).get("TP") in absent] or [f"TP{a}" for a in absent]
            for lbl in labels:
                rows.append({"engine": e, "segment": seg.index, "rank": lbl, "stopped_at": None,
                             "source": "absent_from_nccl", "path": None, "line": None})
            ev = [{"file": r["path"], "line": r["line"]} for r in sorted(reports, key=lambda r: r["grank"])]
            return rows, Freeze(e, seg.index, "absent", None, None, labels, "torch_nccl",
                                f"Ranks {', '.join(f'TP{g}' for g in sorted(reporting))} each reported the "
                                f"collective with SeqNum={seq} timed out; {', '.join(labels)} never did. The peers "
                                f"were waiting for the absent rank, which stopped first (its stop time is not in "
                                f"the evidence).", ev)

    if len(wd) >= 2:
        for r in wd:
            rows.append({"engine": e, "segment": seg.index, "rank": r["rank"], "stopped_at": None,
                         "source": "watchdog", "path": r["path"], "line": r["line"]})
        first, last = wd[0]["fired_at"], wd[-1]["fired_at"]
        if (last - first).total_seconds() <= TOGETHER_S:
            for r in rows:
                r["stopped_at"] = onset
            ranks = sorted({r["rank"] for r in wd}, key=_rank_sort_key)
            return rows, Freeze(e, seg.index, "together", onset, onset, ranks, "watchdog",
                                f"All {len(ranks)} scheduler watchdogs fired in the same second ({_fmt(first)}), so "
                                f"every rank had been stuck since the group's last progress at {_fmt(onset)}: "
                                f"they froze together.", [{"file": r["path"], "line": r["line"]} for r in wd])
    return rows, None


def candidates(store: Store, engines: list[str]) -> list[str]:
    """Engines that may hold a stall, found set-wise: a silence of MIN_SILENCE_S after the last batch
    line or between two of them, or a hard signal (watchdog, NCCL timeout, failing health check).
    A busy engine that logged progress to the end is ruled out without per-engine queries."""
    rows = store.query(
        f"""WITH b AS (
              SELECT engine, ts, lead(ts) OVER (PARTITION BY engine ORDER BY ts) AS nxt
              FROM progress WHERE list_contains($1, engine)),
            gaps AS (SELECT engine, max(ts) AS last_b, max(epoch(nxt) - epoch(ts)) AS gap FROM b GROUP BY engine),
            ends AS (
              SELECT engine, max(ts) AS e FROM (
                SELECT engine, ts FROM events WHERE list_contains($1, engine)
                UNION ALL SELECT engine, ts FROM http_requests WHERE list_contains($1, engine)) GROUP BY engine),
            hard AS (
              SELECT DISTINCT engine FROM events WHERE list_contains($1, engine)
              AND kind IN ('watchdog_timeout', 'torch_nccl', 'health_check_failed', 'vllm_shm_wait',
                         'vllm_rpc_timeout', 'vllm_engine_dead'))
            SELECT g.engine FROM gaps g LEFT JOIN ends USING (engine)
            WHERE g.gap >= {MIN_SILENCE_S} OR epoch(ends.e) - epoch(g.last_b) >= {MIN_SILENCE_S}
               OR g.engine IN (SELECT engine FROM hard)""", [engines])
    return sorted(r["engine"] for r in rows)


def rebuild(store: Store, engines: list[str] | None = None) -> None:
    """Recompute stalls, rank_stops and freezes for ``engines`` (default: all)."""
    if engines is None:
        engines = [r["engine"] for r in store.query("SELECT DISTINCT engine FROM sources ORDER BY 1")]
    for t in ("stalls", "rank_stops", "freezes"):
        store.con.execute(f"DELETE FROM {t} WHERE list_contains(?, engine)", [engines])
    for e in candidates(store, engines):
        stalls, stops, freezes = analyze_engine(store, e)
        store.append("stalls", stalls)
        store.append("rank_stops", stops)
        store.append("freezes", [asdict(f) for f in freezes])
