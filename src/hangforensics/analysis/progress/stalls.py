"""Stalls: a run of the server whose forward progress stopped for good while work was pending.

The logic follows interface.md §3 "Progress and pending work":

* progress is a Prefill/Decode batch line (the view ``progress``; vLLM engines, whose progress is a stats
  line with generation throughput, are judged in their own terms by ``vllm_stalls``);
* a silence is judged against the engine's own cadence: the median gap between its progress lines.
  Another line was *due* by ``onset + max(CADENCE_FACTOR x cadence, MIN_SILENCE_S)``; a silence shorter
  than that, or one followed by more progress, is a slow step, not a stall;
* the silence is a stall when something waited on the engine past that point: requests still arriving
  (not merely the last few completing), failing health checks, a watchdog (armed only with a batch in
  flight), an NCCL timeout, queued / transferring requests, or a sizeable running batch in the last line
  whose requests never completed.  A few running requests plausibly finished before the next line was
  due: the end of a workload, idle;
* with no progress line at all (a paste of the watchdog lines, torch timeouts alone) a hard signal still
  makes a stall, its onset inferred from the signal's time minus its timeout (``ts_basis`` inferred).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from ...parsers.vllm.vllm_patterns import HANG_KINDS
from ...ranks import rank_key
from ...store import Store
from . import vllm_stalls
from .pending import Judgement
from .probes import NON_WORK_PATHS
from .segments import Segment, fmt, segments_of

MIN_SILENCE_S = 30.0          # floor of a silence that can be a stall
CADENCE_FACTOR = 10.0         # a silence this many usual gaps long means the next line was due
MAX_CADENCE_S = 60.0          # cap on the cadence estimate (a nearly idle engine logs rarely)
REQUEST_GRACE_S = 2.0         # access lines this soon after the last batch line are its requests completing
MIN_LATE_REQUESTS = 2
RUNNING_STALL = 8             # a last line with this many running requests cannot finish unseen; fewer
                              # plausibly finished within the steps before the next line was due


def stall_of(store: Store, seg: Segment) -> dict | None:
    """The stall of one run, or None (idle, slow, or healthy to the end of the evidence)."""
    w, p = seg.where()
    e = seg.engine
    last = store.query(
        f"SELECT ts, path, line, rank, running_req FROM progress WHERE engine = ? {w} AND ts IS NOT NULL "
        f"ORDER BY ts DESC, line DESC LIMIT 1", [e, *p])
    end = store.scalar(
        f"""SELECT max(ts) FROM (
              SELECT ts FROM events WHERE engine = ? {w}
              UNION ALL SELECT ts FROM http_requests WHERE engine = ? {w}
              UNION ALL SELECT ts FROM progress WHERE engine = ? {w})""", [e, *p, e, *p, e, *p])
    if not last:
        return _inferred_stall(store, seg, end)
    onset: datetime = last[0]["ts"]
    cadence = _cadence(store, seg)
    due = onset + timedelta(seconds=max(CADENCE_FACTOR * cadence, MIN_SILENCE_S))
    silent = (end - onset).total_seconds() if end else 0.0
    j = Judgement(evidence=[{"file": last[0]["path"], "line": last[0]["line"]}])
    _late_requests(store, seg, onset, cadence, due, j)
    _signals_after(store, seg, onset, j)
    _waiting_in_last_lines(store, seg, end, cadence, j)
    if not j.reasons or (end is None or end < due) and not j.hard:
        return None
    return {
        "engine": e, "segment": seg.index, "onset": onset, "evidence_end": end, "silent_s": silent,
        "pending": "; ".join(j.reasons), "ranks": _ranks(store, seg), "path": last[0]["path"],
        "line": last[0]["line"], "evidence": j.evidence, "ts_basis": "read", "cadence_s": cadence,
        "running_req": last[0]["running_req"], "waiting_req": None, "kv_usage": None, "framework": "sglang",
    }


def _cadence(store: Store, seg: Segment) -> float:
    """The usual gap between one rank's progress lines (median over the run), capped."""
    w, p = seg.where()
    gap = store.scalar(
        f"""SELECT median(g) FROM (
              SELECT epoch(ts) - epoch(lag(ts) OVER (PARTITION BY rank ORDER BY ts, line)) AS g
              FROM progress WHERE engine = ? {w} AND ts IS NOT NULL) WHERE g > 0""", [seg.engine, *p])
    return min(float(gap), MAX_CADENCE_S) if gap else MAX_CADENCE_S / 4


def _late_requests(store: Store, seg: Segment, onset: datetime, cadence: float, due: datetime,
                   j: Judgement) -> None:
    """Work requests still arriving after the last progress: pending work.  The access lines right after
    the last batch line are its last requests completing; arrivals go on past the time the next line
    was due."""
    ws, ps = seg.where()
    grace = timedelta(seconds=max(REQUEST_GRACE_S, 3 * cadence))
    late = store.query(
        f"""SELECT count(*) AS n, min(ts) AS first, max(ts) AS last, arg_min(file, ts) AS file,
                   arg_min(line, ts) AS line
            FROM http_requests WHERE engine = ? AND ts > ? {ws}
            AND NOT list_contains(?, path) AND method IN ('POST', 'PUT')""",
        [seg.engine, onset + grace, *ps, list(NON_WORK_PATHS)])[0]
    if late["n"] >= MIN_LATE_REQUESTS and late["last"] is not None and late["last"] >= due:
        j.add(f"{late['n']} requests arrived after the last batch line (first at {fmt(late['first'])}, "
              f"last at {fmt(late['last'])}) and none was scheduled", late["file"], late["line"])


# Signals after the last progress that say the engine had work: (event kind, extra condition, words, hard)
SIGNALS = [
    ("health_check_failed", "", "health checks failed", False),
    ("watchdog_timeout", "", "the scheduler watchdog fired (it is armed only with a batch in flight)", True),
    ("torch_nccl", "AND json_extract_string(attrs, '$.event') = 'collective_timeout'",
     "torch NCCL watchdog reported a collective timeout", True),
    # a torch.distributed job's own errors: a gloo collective or a c10d store wait timed out
    ("c10d_error", "AND (json_extract_string(attrs, '$.event') = 'collective_timeout' OR "
                   "(json_extract_string(attrs, '$.error') = 'store' AND message ILIKE '%timeout%'))",
     "a collective or a rendezvous wait of the job timed out", True),
    ("torch_nccl", "AND message LIKE '%[c10d]%' AND message ILIKE '%timed out%'",
     "a c10d store wait timed out", True),
]
# Kinds whose records print no time of their own (a rank's Python exception under torchrun's prefix): one
# later in the same file than the last progress line came after it.
UNDATED_SIGNALS = {"c10d_error"}


def _signals_after(store: Store, seg: Segment, onset: datetime, j: Judgement) -> None:
    ws, ps = seg.where()
    for kind, extra, words, hard in SIGNALS:
        if kind in UNDATED_SIGNALS:
            # an undated record counts when its file printed it after that file's last progress line at the onset
            hit = store.query(
                f"SELECT count(*) AS n, min(ts) AS first, arg_min(path, (ts IS NULL, ts, line)) AS path, "
                f"arg_min(line, (ts IS NULL, ts, line)) AS line FROM events e "
                f"WHERE engine = ? AND kind = ? AND ((ts > ? {ws}) OR (ts IS NULL AND line > ("
                f"SELECT max(p.line) FROM progress p WHERE p.engine = e.engine AND p.path = e.path AND p.ts >= ?))) "
                f"{extra}", [seg.engine, kind, onset, *ps, onset])[0]
        else:
            hit = store.query(
                f"SELECT count(*) AS n, min(ts) AS first, arg_min(path, ts) AS path, arg_min(line, ts) AS line "
                f"FROM events WHERE engine = ? AND kind = ? AND ts > ? {extra} {ws}",
                [seg.engine, kind, onset, *ps])[0]
        if hit["n"]:
            when = f", first at {fmt(hit['first'])}" if hit["first"] is not None else ", after the last progress line"
            j.add(f"{words} ({hit['n']} time(s){when})", hit["path"], hit["line"], hard)
    # a watchdog firing whose timeout line is not in the evidence: read from its other outputs (watchdog_fires)
    hit = store.query(
        f"SELECT count(*) AS n, min(ts) AS first, arg_min(path, ts) AS path, arg_min(line, ts) AS line, "
        f"string_agg(DISTINCT rank, ', ') AS ranks FROM watchdog_fires WHERE engine = ? AND ts > ? {ws} "
        f"AND json_extract_string(attrs, '$.inferred_from') IS NOT NULL", [seg.engine, onset, *ps])[0]
    if hit["n"]:
        j.add(f"the scheduler watchdog of {hit['ranks']} fired (it is armed only with a batch in flight; read from "
              f"its dump, its timeout line is not in the evidence; {hit['n']} time(s), first at "
              f"{fmt(hit['first'])})", hit["path"], hit["line"], True)


def _waiting_in_last_lines(store: Store, seg: Segment, end: datetime | None, cadence: float,
                           j: Judgement) -> None:
    """Each logging rank's last progress line: queued or transferring requests are pending work; a
    sizeable running batch is too when no further line came long after one was due and the count was
    not tailing off (a workload's last few requests finish between two lines)."""
    w, p = seg.where()
    rows = store.query(
        f"""SELECT rank, arg_max(running_req, ts) AS running,
                   arg_max(queue_req, ts) AS q, arg_max(pending_req, ts) AS pend, max(ts) AS last,
                   arg_max(path, ts) AS path, arg_max(line, ts) AS line
            FROM progress WHERE engine = ? {w} AND ts IS NOT NULL GROUP BY rank""", [seg.engine, *p])
    for r in sorted(rows, key=lambda r: rank_key(r["rank"] or "")):
        who = r["rank"] or "the engine"
        if (r["q"] or 0) > 0 or (r["pend"] or 0) > 0:
            j.add(f"the last batch line of {who} still had {r['q'] or 0} queued and {r['pend'] or 0} waiting "
                  f"(PD) requests", r["path"], r["line"])
            return
    for r in sorted(rows, key=lambda r: rank_key(r["rank"] or "")):
        running = r["running"] or 0
        due = r["last"] + timedelta(seconds=max(CADENCE_FACTOR * cadence, MIN_SILENCE_S))
        if end is None or end < due or running < RUNNING_STALL or _finished(store, seg, r["last"], due, running):
            continue
        j.add(f"{running} requests were running at the last batch line of {r['rank'] or 'the engine'} "
              f"({fmt(r['last'])}) and none completed in the {(end - r['last']).total_seconds():.0f} s that "
              f"follow (the engine logs a progress line every {cadence:.1f} s)", r["path"], r["line"])
        return


def _finished(store: Store, seg: Segment, last: datetime, due: datetime, running: int) -> bool:
    """The running requests visibly completed: as many completions logged before the next line was due."""
    done = store.scalar(
        "SELECT count(*) FROM http_requests WHERE engine = ? AND ts >= ? AND ts <= ? AND status = 200 "
        "AND method IN ('POST', 'PUT') AND NOT list_contains(?, path)",
        [seg.engine, last, due, list(NON_WORK_PATHS)])
    return done >= running


def _inferred_stall(store: Store, seg: Segment, end: datetime | None) -> dict | None:
    """No progress line in the evidence: a scheduler watchdog or a torch collective timeout still says
    the engine was stuck since (fire time - timeout)."""
    w, p = seg.where()
    rows = store.query(
        f"""SELECT kind, ts, path, line, attrs, rank FROM (
                SELECT engine, 'watchdog_timeout' AS kind, fired_at AS ts, path, line, attrs, rank
                FROM watchdog_fires
                UNION ALL
                SELECT engine, kind, ts, path, line, attrs, rank FROM events
                WHERE kind = 'torch_nccl' AND json_extract_string(attrs, '$.event') = 'collective_timeout')
            WHERE engine = ? {w} AND ts IS NOT NULL ORDER BY ts, line LIMIT 1""", [seg.engine, *p])
    if not rows:
        return _undated_watchdog_stall(store, seg, end)
    r = rows[0]
    attrs = json.loads(r["attrs"] or "{}")
    if r["kind"] == "watchdog_timeout":
        secs, how = attrs.get("timeout"), "the scheduler watchdog fired at {at} after {secs:.0f} s without progress"
        if not secs:
            return _watchdog_stall_unknown_onset(store, seg, end, r)
    else:
        secs = (attrs.get("ran_ms") or attrs.get("timeout_ms") or 0) / 1000 or None
        how = "a torch collective timed out at {at} after running {secs:.0f} s"
    if not secs:
        return None
    onset = r["ts"] - timedelta(seconds=float(secs))
    reason = how.format(at=fmt(r["ts"]), secs=float(secs))
    return {
        "engine": seg.engine, "segment": seg.index, "onset": onset, "evidence_end": end,
        "silent_s": (end - onset).total_seconds() if end else None,
        "pending": f"{reason}; no progress line is in the evidence, so the onset is inferred: "
                   f"{fmt(r['ts'])} minus {float(secs):.0f} s",
        "ranks": _ranks(store, seg) or _timed_out_ranks(store, seg), "path": r["path"], "line": r["line"],
        "evidence": [{"file": r["path"], "line": r["line"]}], "ts_basis": "inferred", "cadence_s": None,
        "running_req": None, "waiting_req": None, "kv_usage": None, "framework": "sglang",
    }


def _watchdog_stall_unknown_onset(store: Store, seg: Segment, end: datetime | None, r: dict) -> dict:
    """No progress line and a watchdog firing whose timeout the evidence does not give (its timeout line is
    cut off and no server args were read): the engine was stuck with a batch in flight, since at least
    watchdog_timeout before the firing; the onset is unknown (null), the firing's time an upper bound."""
    attrs = json.loads(r["attrs"] or "{}")
    read_from = f" (read from its {attrs['inferred_from']}: its timeout line is not in the evidence)" \
        if attrs.get("inferred_from") else ""
    return _stall_without_onset(
        store, seg, end, r,
        f"the scheduler watchdog of {r['rank']} fired at {fmt(r['ts'])}{read_from}, so progress had stopped at "
        f"least watchdog_timeout (300 s by default, not in the evidence) before, with a batch in flight; no "
        f"progress line is in the evidence, so the onset is not known")


def _undated_watchdog_stall(store: Store, seg: Segment, end: datetime | None) -> dict | None:
    """A watchdog firing with no time at all (its py-spy record copied without its log prefix): the engine
    was stuck with a batch in flight, when is not known."""
    w, p = seg.where()
    rows = store.query(
        f"""SELECT path, line, attrs, rank FROM watchdog_fires WHERE engine = ? {w} AND fired_at IS NULL
              AND json_extract_string(attrs, '$.inferred_from') IS NOT NULL ORDER BY path, line LIMIT 1""",
        [seg.engine, *p])
    if not rows:
        return None
    r = rows[0]
    attrs = json.loads(r["attrs"] or "{}")
    return _stall_without_onset(
        store, seg, end, r,
        f"the scheduler watchdog of {r['rank']} fired (read from its {attrs.get('inferred_from')}, which only "
        f"a firing watchdog prints; undated: copied without its log prefix), so progress had stopped with a "
        f"batch in flight; no time and no progress line are in the evidence, so the onset is not known")


def _stall_without_onset(store: Store, seg: Segment, end: datetime | None, r: dict, reason: str) -> dict:
    return {
        "engine": seg.engine, "segment": seg.index, "onset": None, "evidence_end": end, "silent_s": None,
        "pending": reason, "ranks": _ranks(store, seg) or _timed_out_ranks(store, seg), "path": r["path"],
        "line": r["line"], "evidence": [{"file": r["path"], "line": r["line"]}], "ts_basis": "inferred",
        "cadence_s": None, "running_req": None, "waiting_req": None, "kv_usage": None, "framework": "sglang",
    }


def _ranks(store: Store, seg: Segment) -> list[str]:
    w, p = seg.where()
    rows = store.query(
        f"""SELECT DISTINCT rank FROM batches WHERE engine = ? {w}
            UNION SELECT DISTINCT rank FROM progress WHERE engine = ? {w} AND batch_kind = 'step'
            UNION SELECT DISTINCT rank FROM events WHERE engine = ? {w} AND rank <> '' AND rank NOT LIKE 'rank%'
              AND kind NOT LIKE 'vllm%'""", [seg.engine, *p, seg.engine, *p, seg.engine, *p])
    return sorted({r["rank"] for r in rows if r["rank"]}, key=rank_key)


def _timed_out_ranks(store: Store, seg: Segment) -> list[str]:
    """Evidence with no SGLang rank prefix (torch's lines alone): the ranks whose collectives timed out, as
    torch names them; each was stuck in one."""
    w, p = seg.where()
    rows = store.query(
        f"""SELECT DISTINCT rank FROM events WHERE engine = ? {w} AND kind = 'torch_nccl' AND rank <> ''
            AND json_extract_string(attrs, '$.event') = 'collective_timeout'""", [seg.engine, *p])
    return sorted({r["rank"] for r in rows if r["rank"]}, key=rank_key)


def candidates(store: Store, engines: list[str]) -> list[str]:
    """Engines that may hold a stall, found set-wise: a silence of MIN_SILENCE_S after the last progress
    line or between two of them, or a hard signal (watchdog, NCCL timeout, failing health check, vLLM
    hang messages).  A busy engine that logged progress to the end is ruled out without per-engine queries."""
    rows = store.query(
        f"""WITH b AS (
              SELECT engine, rank, ts, lead(ts) OVER (PARTITION BY engine, rank ORDER BY ts) AS nxt
              FROM progress WHERE list_contains($1, engine) AND ts IS NOT NULL),
            per_rank AS (SELECT engine, rank, max(ts) AS last_b, max(epoch(nxt) - epoch(ts)) AS gap
                         FROM b GROUP BY engine, rank),
            gaps AS (SELECT engine, min(last_b) AS last_b, max(gap) AS gap FROM per_rank GROUP BY engine),
            ends AS (
              SELECT engine, max(ts) AS e FROM (
                SELECT engine, ts FROM events WHERE list_contains($1, engine)
                UNION ALL SELECT engine, ts FROM http_requests WHERE list_contains($1, engine)) GROUP BY engine),
            hard AS (
              SELECT DISTINCT engine FROM events WHERE list_contains($1, engine)
              AND (kind IN ('watchdog_timeout', 'torch_nccl', 'c10d_error', 'health_check_failed') OR list_contains($2, kind))
              -- a watchdog firing read from its other outputs (its timeout line not in the evidence)
              UNION SELECT DISTINCT engine FROM watchdog_fires WHERE list_contains($1, engine))
            SELECT g.engine FROM gaps g LEFT JOIN ends USING (engine)
            WHERE g.gap >= {MIN_SILENCE_S} OR epoch(ends.e) - epoch(g.last_b) >= {MIN_SILENCE_S}
            UNION SELECT engine FROM hard
            -- vLLM access lines print no time: a silence after the last stats line may show only in their count
            UNION SELECT DISTINCT engine FROM vllm_stats WHERE list_contains($1, engine)""",
        [engines, list(HANG_KINDS)])
    return sorted(r["engine"] for r in rows)


def rebuild(store: Store, engines: list[str] | None = None) -> None:
    """Recompute stalls, rank_stops and freezes for ``engines`` (default: all)."""
    from .freezes import freeze_row, rank_stops

    if engines is None:
        engines = [r["engine"] for r in store.query("SELECT DISTINCT engine FROM sources ORDER BY 1")]
    for t in ("stalls", "rank_stops", "freezes"):
        store.con.execute(f"DELETE FROM {t} WHERE list_contains(?, engine)", [engines])
    stalls, stops, freezes = [], [], []
    for e in candidates(store, engines):
        judge = vllm_stalls.stall_of if vllm_stalls.is_vllm(store, e) else stall_of
        for seg in segments_of(store, e):
            st = judge(store, seg)
            seg_stops, fz = rank_stops(store, seg, st)
            if st is not None:
                stalls.append(st)
            stops += seg_stops
            if fz is not None:
                freezes.append(freeze_row(fz))
    store.append("stalls", stalls)
    store.append("rank_stops", stops)
    store.append("freezes", freezes)
