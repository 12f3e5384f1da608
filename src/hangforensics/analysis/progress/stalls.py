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
from dataclasses import dataclass
from datetime import datetime, timedelta

from ...parsers.vllm.vllm_patterns import HANG_KINDS
from ...ranks import rank_key
from ...store import Store
from ..order_keys import LINE_BITS, PATH_BITS, PATH_RANKS, earliest_first, latest_first, order_key
from . import vllm_stalls
from .pending import Judgement
from .probes import NON_WORK_PATHS
from .segments import (
    SEGS,
    WDF,
    Segment,
    drop_temp,
    fmt,
    in_seg,
    segments_all,
    segments_table,
    store_runs,
    temp_table,
)

MIN_SILENCE_S = 30.0          # floor of a silence that can be a stall
CADENCE_FACTOR = 10.0         # a silence this many usual gaps long means the next line was due
MAX_CADENCE_S = 60.0          # cap on the cadence estimate (a nearly idle engine logs rarely)
REQUEST_GRACE_S = 2.0         # access lines this soon after the last batch line are its requests completing
MIN_LATE_REQUESTS = 2
RUNNING_STALL = 8             # a last line with this many running requests cannot finish unseen; fewer
                              # plausibly finished within the steps before the next line was due


Key = tuple[str, int]         # (engine, segment)
SP = "_hf_stall_runs"         # the judged runs with a progress line, and their onset, grace and due times
FIN = "_hf_stall_finish"      # ranks whose running batch may have completed unseen


def rebuild(store: Store, engines: list[str] | None = None) -> None:
    """Recompute runs, stalls, rank_stops and freezes for ``engines`` (default: all), set-wise: a fixed number of
    queries over every run of every engine, each run's own parameters (onset, due time, cadence) joined from
    small temporary tables; the judgement itself runs in Python over the rows they return."""
    from .freezes import freeze_row, rank_stops_all

    if engines is None:
        engines = [r["engine"] for r in store.query("SELECT DISTINCT engine FROM sources ORDER BY 1")]
    for t in ("stalls", "rank_stops", "freezes"):
        store.con.execute(f"DELETE FROM {t} WHERE list_contains(?, engine)", [engines])
    segs = segments_all(store, engines)
    store_runs(store, segs)
    try:
        segments_table(store, SEGS, [s for e in engines for s in segs[e]])
        # the view is costly (several self-joins): read once for every engine
        store.con.execute(f"CREATE OR REPLACE TEMP TABLE {WDF} AS SELECT * FROM watchdog_fires "
                          f"WHERE list_contains(?, engine)", [engines])
        ends = _ends(store, engines)
        cands, vllm, holes = _candidates(store, engines, ends)
        # the gaps between progress lines: the cadence of the candidates' runs, and whether an engine whose
        # lines left a gap of MIN_SILENCE_S open is a candidate after all
        gaps, cadence = _progress_gaps(store, sorted(set(cands) | holes))
        cands = sorted(set(cands) | {e for e in holes if gaps.get(e, 0.0) >= MIN_SILENCE_S})
        judged = [s for e in cands for s in segs[e]]
        prog = _progress_by_rank(store, cands)
        found = _sglang_stalls(store, [s for s in judged if s.engine not in vllm], prog, cadence, ends)
        found.update(vllm_stalls.stalls_of(store, [s for s in judged if s.engine in vllm], ends))
        stops = rank_stops_all(store, judged, found, prog)
    finally:
        drop_temp(store, SEGS, WDF, SP, FIN)
    stalls, rows, freezes = [], [], []
    for seg in judged:
        st = found[(seg.engine, seg.index)]
        seg_stops, fz = stops[(seg.engine, seg.index)]
        if st is not None:
            stalls.append(st)
        rows += seg_stops
        if fz is not None:
            freezes.append(freeze_row(fz))
    store.append("stalls", stalls)
    store.append("rank_stops", rows)
    store.append("freezes", freezes)


EPOCH = datetime(1970, 1, 1)


def _epoch(ts: datetime) -> float:
    """DuckDB's epoch(ts): microseconds since 1970 over 1e6, in a double (so the comparisons agree)."""
    return ((ts - EPOCH) // timedelta(microseconds=1)) / 1e6


def _progress_gaps(store: Store, engines: list[str]) -> tuple[dict[str, float], dict[Key, float | None]]:
    """One sort of the progress lines of ``engines``: per engine the longest gap between two lines of one
    rank, and per run the median gap between one rank's lines (its cadence).  Only the gaps between a rank's
    distinct times count (lines of one clock second are 0 s apart: no gap, and no cadence, which is of gaps
    over 0 s), so the sort is of a rank's distinct times, not of its lines: a busy log prints several a second
    (measured on a fleet of 216 busy engines: 1.46 million lines, 0.23 -> 0.09 s)."""
    rows = store.query(
        f"""WITH p AS (
              SELECT DISTINCT p.engine, s.seg, p.rank, p.ts FROM progress p JOIN {SEGS} s ON s.engine = p.engine
                AND {in_seg('p.ts')}
              WHERE list_contains(?, p.engine) AND p.ts IS NOT NULL),
            w AS (
              -- each run's lines of one rank are consecutive in time: a gap within the run has its
              -- previous line in the same run
              SELECT *, epoch(ts) - epoch(lag(ts) OVER k) AS g, lag(seg) OVER k AS prev_seg FROM p
              WINDOW k AS (PARTITION BY engine, rank ORDER BY ts))
            SELECT engine, seg, max(g) AS gap, median(g) FILTER (WHERE prev_seg = seg AND g > 0) AS cadence
            FROM w GROUP BY ALL""", [engines])
    gaps: dict[str, float] = {}
    for r in rows:
        if r["gap"] is not None:
            gaps[r["engine"]] = max(gaps.get(r["engine"], r["gap"]), r["gap"])
    return gaps, {(r["engine"], r["seg"]): r["cadence"] for r in rows}


def _ends(store: Store, engines: list[str]) -> dict[Key, datetime]:
    """The last dated event or access line of each run."""
    rows = store.query(
        f"""SELECT s.engine, s.seg, max(x.ts) AS e FROM (
              SELECT engine, ts FROM events WHERE list_contains($1, engine) AND ts IS NOT NULL
              UNION ALL SELECT engine, ts FROM http_requests WHERE list_contains($1, engine) AND ts IS NOT NULL) x
            JOIN {SEGS} s ON s.engine = x.engine AND {in_seg('x.ts')} GROUP BY ALL""", [engines])
    return {(r["engine"], r["seg"]): r["e"] for r in rows}


def _candidates(store: Store, engines: list[str], ends: dict[Key, datetime]) -> tuple[list[str], set[str], set[str]]:
    """Engines that may hold a stall: a silence of MIN_SILENCE_S after the last progress line or between
    two of them, or a hard signal (watchdog, NCCL timeout, failing health check, vLLM hang messages).  A
    busy engine that logged progress to the end is ruled out without sorting its lines: when every 15 s of
    a rank's span holds one of its lines, no two of them are MIN_SILENCE_S apart.  Returns the candidates,
    those of all the engines that log like vLLM (their stats lines, or their hang and start messages: judged
    by ``vllm_stalls``), and the engines whose gaps must be measured to tell."""
    rows = store.query(
        """SELECT engine, rank, max(last_b) AS last_b, count(*) < max(b) - min(b) + 1 AS holes FROM (
             SELECT engine, rank, floor(epoch_us(ts) / 15000000) AS b, max(ts) AS last_b
             FROM progress WHERE list_contains(?, engine) AND ts IS NOT NULL GROUP BY ALL)
           GROUP BY ALL""", [engines])
    first_stop: dict[str, datetime] = {}
    for r in rows:
        first_stop[r["engine"]] = min(first_stop.get(r["engine"], r["last_b"]), r["last_b"])
    end: dict[str, datetime] = {}
    for (e, _), t in ends.items():
        end[e] = max(end.get(e, t), t)
    out = {e for e, t in first_stop.items() if e in end and _epoch(end[e]) - _epoch(t) >= MIN_SILENCE_S}
    flags = store.query(
        f"""SELECT engine, bool_or(hard) AS hard, bool_or(vllm) AS vllm FROM (
              SELECT engine, kind IN ('watchdog_timeout', 'torch_nccl', 'c10d_error', 'health_check_failed')
                     OR list_contains($2, kind) AS hard, kind LIKE 'vllm%' AS vllm
              FROM events WHERE list_contains($1, engine)
              -- a watchdog firing read from its other outputs (its timeout line not in the evidence)
              UNION ALL SELECT engine, true, false FROM {WDF}
              -- vLLM access lines print no time: a silence after the last stats line may show only in their count
              UNION ALL SELECT engine, true, true FROM vllm_stats WHERE list_contains($1, engine))
            GROUP BY engine""", [engines, list(HANG_KINDS)])
    out |= {r["engine"] for r in flags if r["hard"]}
    holes = {r["engine"] for r in rows if r["holes"]} - out
    return sorted(out), {r["engine"] for r in flags if r["vllm"]}, holes


def _progress_by_rank(store: Store, engines: list[str]) -> dict[Key, list[dict]]:
    """Per run and rank: its last progress line (the numbers it printed), its last line of the run's
    evidence (ties broken by line), its last batch or step line for ``freezes``, and whether it logs batch or
    step lines at all (the run's ranks)."""
    # several lines in the rank's last clock second: the first of them by file and line (what the per-run
    # queries' arg_max kept: the first the view read, in practice the file's order)
    path, line = "COALESCE(r.pr, 0)", "p.line"
    latest = latest_first("p.ts", path, line)
    top = order_key("-epoch_us(p.ts)", (f"{2 ** LINE_BITS - 1} - {line}", LINE_BITS), (path, PATH_BITS))  # (-ts, -line, path)
    first = earliest_first("p.ts", path, line)
    dated = "FILTER (WHERE p.ts IS NOT NULL)"
    batch = "FILTER (WHERE p.ts IS NOT NULL AND p.batch_kind <> 'vllm')"
    rows = store.query(
        f"""SELECT s.engine, s.seg, p.rank, max(p.ts) AS last,
                   arg_min(p.running_req, {latest}) {dated} AS running,
                   arg_min(p.queue_req, {latest}) {dated} AS q,
                   arg_min(p.pending_req, {latest}) {dated} AS pend,
                   arg_min(p.path, {latest}) {dated} AS path, arg_min(p.line, {latest}) {dated} AS line,
                   arg_min({{'ts': p.ts, 'path': p.path, 'line': p.line, 'running_req': p.running_req}},
                           {top}) {dated} AS top,
                   count(*) {batch} AS n_batch, max(p.ts) {batch} AS stopped_at,
                   arg_max(p.path, {first}) {batch} AS stop_path,
                   arg_max(p.line, {first}) {batch} AS stop_line,
                   bool_and(p.batch_kind = 'step') {batch} AS steps,
                   -- SGLang's batch lines (Prefill / Decode) and a job's step lines, not vLLM's stats lines
                   bool_or(p.batch_kind IS DISTINCT FROM 'vllm') AS listed
            FROM progress p JOIN {SEGS} s ON s.engine = p.engine AND {in_seg('p.ts')}
            LEFT JOIN {PATH_RANKS} r ON r.path = p.path
            WHERE list_contains(?, p.engine) GROUP BY ALL""", [engines])
    out: dict[Key, list[dict]] = {}
    for r in rows:
        out.setdefault((r["engine"], r["seg"]), []).append(r)
    return out


def _sglang_stalls(store: Store, segs: list[Segment], prog: dict[Key, list[dict]],
                   cadences: dict[Key, float | None], ends: dict[Key, datetime]) -> dict[Key, dict | None]:
    """The stall of each run (SGLang, torch jobs), or None (idle, slow, or healthy to the end of the evidence)."""
    out: dict[Key, dict | None] = {}
    if not segs:
        return out
    runs: list[_Run] = []
    for seg in segs:
        key = (seg.engine, seg.index)
        dated = [r for r in prog.get(key, []) if r["last"] is not None]
        end = max([t for t in (ends.get(key), *(r["last"] for r in dated)) if t is not None], default=None)
        if not dated:
            runs.append(_Run(seg, end, None, 0.0, dated))
            continue
        last = max((r["top"] for r in dated), key=lambda t: (t["ts"], t["line"]))
        gap = cadences.get(key)
        runs.append(_Run(seg, end, last, min(float(gap), MAX_CADENCE_S) if gap else MAX_CADENCE_S / 4, dated))
    moving = [r for r in runs if r.last is not None]
    segments_table(store, SP, [r.seg for r in moving],
                   onset=("TIMESTAMP", [r.last["ts"] for r in moving]),       # type: ignore[index]
                   after=("TIMESTAMP", [r.last["ts"] + r.grace for r in moving]))   # type: ignore[index]
    late = _late_requests(store, sorted({r.seg.engine for r in moving}))
    signals = _signals_after(store, sorted({r.seg.engine for r in moving}))
    finished = _finished(store, moving)
    ranks = _event_ranks(store, [s.engine for s in segs])
    for run in moving:
        key = (run.seg.engine, run.seg.index)
        out[key] = _judge(run, late.get(key), signals.get(key, {}), finished, ranks.get(key, {}), prog)
    still = [r for r in runs if r.last is None]
    first, undated = _inferred_signals(store, sorted({r.seg.engine for r in still}))
    for run in still:
        key = (run.seg.engine, run.seg.index)
        out[key] = _inferred_stall(run, first.get(key), undated.get(key), ranks.get(key, {}), prog)
    return out


@dataclass
class _Run:
    """One run being judged: its segment, evidence end, last progress line (None: none), cadence and the
    last lines of its ranks."""

    seg: Segment
    end: datetime | None
    last: dict | None
    cadence: float
    ranks: list[dict]

    @property
    def due(self) -> datetime:
        """When the next progress line was due after the last one."""
        assert self.last is not None
        return self.last["ts"] + timedelta(seconds=max(CADENCE_FACTOR * self.cadence, MIN_SILENCE_S))

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=max(REQUEST_GRACE_S, 3 * self.cadence))

    def rank_due(self, r: dict) -> datetime:
        """When the next progress line of the rank whose last line is ``r`` was due."""
        return r["last"] + timedelta(seconds=max(CADENCE_FACTOR * self.cadence, MIN_SILENCE_S))


def _judge(run: _Run, late: dict | None, signals: dict, finished: dict, ranks: dict,
           prog: dict[Key, list[dict]]) -> dict | None:
    seg, end, last = run.seg, run.end, run.last
    assert last is not None
    onset: datetime = last["ts"]
    due = run.due
    silent = (end - onset).total_seconds() if end else 0.0
    j = Judgement(evidence=[{"file": last["path"], "line": last["line"]}])
    # work requests still arriving after the last progress: pending work.  The access lines right after
    # the last batch line are its last requests completing; arrivals go on past the time the next line
    # was due.
    if late is not None and late["n"] >= MIN_LATE_REQUESTS and late["last"] is not None and late["last"] >= due:
        j.add(f"{late['n']} requests arrived after the last batch line (first at {fmt(late['first'])}, "
              f"last at {fmt(late['last'])}) and none was scheduled", late["file"], late["line"])
    for i, (_, _, words, hard) in enumerate(SIGNALS):
        hit = signals.get(i)
        if hit and hit["n"]:
            when = f", first at {fmt(hit['first'])}" if hit["first"] is not None else ", after the last progress line"
            j.add(f"{words} ({hit['n']} time(s){when})", hit["path"], hit["line"], hard)
    hit = signals.get("wd")
    if hit and hit["n"]:
        j.add(f"the scheduler watchdog of {hit['ranks']} fired (it is armed only with a batch in flight; read from "
              f"its dump, its timeout line is not in the evidence; {hit['n']} time(s), first at "
              f"{fmt(hit['first'])})", hit["path"], hit["line"], True)
    _waiting_in_last_lines(run, finished, j)
    if not j.reasons or (end is None or end < due) and not j.hard:
        return None
    return {
        "engine": seg.engine, "segment": seg.index, "onset": onset, "evidence_end": end, "silent_s": silent,
        "pending": "; ".join(j.reasons), "ranks": _ranks(seg, ranks, prog), "path": last["path"],
        "line": last["line"], "evidence": j.evidence, "ts_basis": "read", "cadence_s": run.cadence,
        "running_req": last["running_req"], "waiting_req": None, "kv_usage": None, "framework": "sglang",
    }


def _late_requests(store: Store, engines: list[str]) -> dict[Key, dict]:
    """Per judged run (SP): work requests after its onset plus grace; of several in one clock second the
    first is the first by file and line."""
    rows = store.query(
        f"""SELECT q.engine, q.seg, count(*) AS n, min(h.ts) AS first, max(h.ts) AS last,
                   arg_min(h.file, (h.ts, h.file, h.line)) AS file, arg_min(h.line, (h.ts, h.file, h.line)) AS line
            FROM http_requests h JOIN {SP} q ON q.engine = h.engine AND h.ts > q.after AND {in_seg('h.ts', 'q')}
            WHERE list_contains(?, h.engine) AND NOT list_contains(?, h.path) AND h.method IN ('POST', 'PUT')
            GROUP BY ALL""", [engines, list(NON_WORK_PATHS)])
    return {(r["engine"], r["seg"]): r for r in rows}


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


def _signals_after(store: Store, engines: list[str]) -> dict[Key, dict]:
    """Per judged run (SP) and signal of SIGNALS (by index, and 'wd': a watchdog firing whose timeout line
    is not in the evidence, read from its other outputs): how many came after the onset, the first when and
    where."""
    undated = store.query(
        "SELECT DISTINCT engine, path FROM events WHERE list_contains(?, engine) AND list_contains(?, kind) "
        "AND ts IS NULL", [engines, list(UNDATED_SIGNALS)])
    # an undated record counts when its file printed it after that file's last progress line at the onset
    pl = (f"""LEFT JOIN (
                SELECT q.engine, q.seg, p.path, max(p.line) AS maxline
                FROM progress p JOIN {SP} q ON q.engine = p.engine
                JOIN (SELECT DISTINCT engine, path FROM events WHERE list_contains($1, engine)
                      AND list_contains($3, kind) AND ts IS NULL) u ON u.engine = p.engine AND u.path = p.path
                WHERE list_contains($1, p.engine) AND p.ts >= q.onset GROUP BY ALL) pl
              ON pl.engine = q.engine AND pl.seg = q.seg AND pl.path = e.path""" if undated
          else "LEFT JOIN (SELECT NULL::BIGINT AS maxline) pl ON false")
    aggs = []
    for i, (kind, extra, _, _) in enumerate(SIGNALS):
        if kind in UNDATED_SIGNALS:
            cond = (f"e.kind = '{kind}' AND ((e.ts > q.onset AND {in_seg('e.ts', 'q')}) "
                    f"OR (e.ts IS NULL AND e.line > pl.maxline)) {extra}")
            order = "(e.ts IS NULL, e.ts, e.line, e.path)"
        else:
            cond = f"e.kind = '{kind}' AND e.ts > q.onset {extra} AND {in_seg('e.ts', 'q')}"
            order = "(e.ts, e.path, e.line)"
        aggs.append(f"count(*) FILTER (WHERE {cond}) AS n{i}, min(e.ts) FILTER (WHERE {cond}) AS first{i}, "
                    f"arg_min(e.path, {order}) FILTER (WHERE {cond}) AS path{i}, "
                    f"arg_min(e.line, {order}) FILTER (WHERE {cond}) AS line{i}")
    rows = store.query(
        f"""SELECT q.engine, q.seg, {', '.join(aggs)}
            FROM events e JOIN {SP} q ON q.engine = e.engine {pl}
            WHERE list_contains($1, e.engine) AND list_contains($2, e.kind) GROUP BY ALL""",
        [engines, sorted({k for k, _, _, _ in SIGNALS}), *([list(UNDATED_SIGNALS)] if undated else [])])
    out: dict[Key, dict] = {}
    for r in rows:
        out[(r["engine"], r["seg"])] = {i: {"n": r[f"n{i}"], "first": r[f"first{i}"], "path": r[f"path{i}"],
                                            "line": r[f"line{i}"]} for i in range(len(SIGNALS))}
    # a watchdog firing whose timeout line is not in the evidence: read from its other outputs (watchdog_fires)
    # (its ranks in name order: the per-run query's DISTINCT left them in hash order)
    for r in store.query(
            f"""SELECT q.engine, q.seg, count(*) AS n, min(w.ts) AS first,
                       arg_min(w.path, (w.ts, w.path, w.line)) AS path, arg_min(w.line, (w.ts, w.path, w.line)) AS line,
                       string_agg(DISTINCT w.rank, ', ' ORDER BY w.rank) AS ranks
                FROM {WDF} w JOIN {SP} q ON q.engine = w.engine AND w.ts > q.onset AND {in_seg('w.ts', 'q')}
                WHERE json_extract_string(w.attrs, '$.inferred_from') IS NOT NULL GROUP BY ALL"""):
        out.setdefault((r["engine"], r["seg"]), {})["wd"] = r
    return out


def _finished(store: Store, runs: list[_Run]) -> dict[tuple[str, int, int], bool]:
    """For each rank (by its place in its run's list) whose last line counted a sizeable running batch and
    whose next line was long due: its running requests visibly completed, as many completions logged before
    the next line was due."""
    want = [(run, i, r) for run in runs for i, r in enumerate(run.ranks)
            if run.end is not None and (r["running"] or 0) >= RUNNING_STALL and run.end >= run.rank_due(r)]
    if not want:
        return {}
    temp_table(store, FIN, {"k": ("INTEGER", list(range(len(want)))),
                            "engine": ("VARCHAR", [run.seg.engine for run, _, _ in want]),
                            "t0": ("TIMESTAMP", [r["last"] for _, _, r in want]),
                            "t1": ("TIMESTAMP", [run.rank_due(r) for run, _, r in want])})
    done = {r["k"]: r["n"] for r in store.query(
        f"""SELECT f.k, count(*) AS n FROM http_requests h JOIN {FIN} f ON f.engine = h.engine
              AND h.ts >= f.t0 AND h.ts <= f.t1
            WHERE list_contains(?, h.engine) AND h.status = 200 AND h.method IN ('POST', 'PUT')
              AND NOT list_contains(?, h.path) GROUP BY f.k""",
        [sorted({run.seg.engine for run, _, _ in want}), list(NON_WORK_PATHS)])}
    return {(run.seg.engine, run.seg.index, i): done.get(k, 0) >= (r["running"] or 0)
            for k, (run, i, r) in enumerate(want)}


def _waiting_in_last_lines(run: _Run, finished: dict[tuple[str, int, int], bool], j: Judgement) -> None:
    """Each logging rank's last progress line: queued or transferring requests are pending work; a
    sizeable running batch is too when no further line came long after one was due and the count was
    not tailing off (a workload's last few requests finish between two lines)."""
    end, cadence = run.end, run.cadence
    rows = sorted(enumerate(run.ranks), key=lambda ir: rank_key(ir[1]["rank"] or ""))
    for _, r in rows:
        who = r["rank"] or "the engine"
        if (r["q"] or 0) > 0 or (r["pend"] or 0) > 0:
            j.add(f"the last batch line of {who} still had {r['q'] or 0} queued and {r['pend'] or 0} waiting "
                  f"(PD) requests", r["path"], r["line"])
            return
    for i, r in rows:
        running = r["running"] or 0
        due = run.rank_due(r)
        if (end is None or end < due or running < RUNNING_STALL
                or finished[(run.seg.engine, run.seg.index, i)]):
            continue
        j.add(f"{running} requests were running at the last batch line of {r['rank'] or 'the engine'} "
              f"({fmt(r['last'])}) and none completed in the {(end - r['last']).total_seconds():.0f} s that "
              f"follow (the engine logs a progress line every {cadence:.1f} s)", r["path"], r["line"])
        return


def _inferred_signals(store: Store, engines: list[str]) -> tuple[dict[Key, dict], dict[Key, dict]]:
    """Per run: its first dated scheduler watchdog firing or torch collective timeout, and its first
    undated watchdog firing read from its other outputs (for runs with no progress line)."""
    if not engines:
        return {}, {}
    first = store.query(
        f"""WITH x AS (
              SELECT engine, 'watchdog_timeout' AS kind, fired_at AS ts, path, line, attrs, rank FROM {WDF}
              UNION ALL
              SELECT engine, kind, ts, path, line, attrs, rank FROM events
              WHERE list_contains($1, engine) AND kind = 'torch_nccl'
                AND json_extract_string(attrs, '$.event') = 'collective_timeout')
            SELECT s.engine, s.seg, x.kind, x.ts, x.path, x.line, x.attrs, x.rank
            FROM x JOIN {SEGS} s ON s.engine = x.engine AND {in_seg('x.ts')}
            WHERE list_contains($1, s.engine) AND x.ts IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY s.engine, s.seg ORDER BY x.ts, x.line) = 1""", [engines])
    undated = store.query(
        f"""SELECT s.engine, s.seg, w.path, w.line, w.attrs, w.rank
            FROM {WDF} w JOIN {SEGS} s ON s.engine = w.engine AND {in_seg('w.ts')}
            WHERE list_contains(?, s.engine) AND w.fired_at IS NULL
              AND json_extract_string(w.attrs, '$.inferred_from') IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY s.engine, s.seg ORDER BY w.path, w.line) = 1""", [engines])
    return ({(r["engine"], r["seg"]): r for r in first}, {(r["engine"], r["seg"]): r for r in undated})


def _inferred_stall(run: _Run, r: dict | None, undated: dict | None, ranks: dict,
                    prog: dict[Key, list[dict]]) -> dict | None:
    """No progress line in the evidence: a scheduler watchdog or a torch collective timeout still says
    the engine was stuck since (fire time - timeout)."""
    seg, end = run.seg, run.end
    if r is None:
        return _undated_watchdog_stall(run, undated, ranks, prog)
    attrs = json.loads(r["attrs"] or "{}")
    if r["kind"] == "watchdog_timeout":
        secs, how = attrs.get("timeout"), "the scheduler watchdog fired at {at} after {secs:.0f} s without progress"
        if not secs:
            return _watchdog_stall_unknown_onset(run, r, ranks, prog)
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
        "ranks": _ranks(seg, ranks, prog) or _timed_out_ranks(ranks), "path": r["path"], "line": r["line"],
        "evidence": [{"file": r["path"], "line": r["line"]}], "ts_basis": "inferred", "cadence_s": None,
        "running_req": None, "waiting_req": None, "kv_usage": None, "framework": "sglang",
    }


def _watchdog_stall_unknown_onset(run: _Run, r: dict, ranks: dict, prog: dict[Key, list[dict]]) -> dict:
    """No progress line and a watchdog firing whose timeout the evidence does not give (its timeout line is
    cut off and no server args were read): the engine was stuck with a batch in flight, since at least
    watchdog_timeout before the firing; the onset is unknown (null), the firing's time an upper bound."""
    attrs = json.loads(r["attrs"] or "{}")
    read_from = f" (read from its {attrs['inferred_from']}: its timeout line is not in the evidence)" \
        if attrs.get("inferred_from") else ""
    return _stall_without_onset(
        run, r, ranks, prog,
        f"the scheduler watchdog of {r['rank']} fired at {fmt(r['ts'])}{read_from}, so progress had stopped at "
        f"least watchdog_timeout (300 s by default, not in the evidence) before, with a batch in flight; no "
        f"progress line is in the evidence, so the onset is not known")


def _undated_watchdog_stall(run: _Run, r: dict | None, ranks: dict, prog: dict[Key, list[dict]]) -> dict | None:
    """A watchdog firing with no time at all (its py-spy record copied without its log prefix): the engine
    was stuck with a batch in flight, when is not known."""
    if r is None:
        return None
    attrs = json.loads(r["attrs"] or "{}")
    return _stall_without_onset(
        run, r, ranks, prog,
        f"the scheduler watchdog of {r['rank']} fired (read from its {attrs.get('inferred_from')}, which only "
        f"a firing watchdog prints; undated: copied without its log prefix), so progress had stopped with a "
        f"batch in flight; no time and no progress line are in the evidence, so the onset is not known")


def _stall_without_onset(run: _Run, r: dict, ranks: dict, prog: dict[Key, list[dict]], reason: str) -> dict:
    seg = run.seg
    return {
        "engine": seg.engine, "segment": seg.index, "onset": None, "evidence_end": run.end, "silent_s": None,
        "pending": reason, "ranks": _ranks(seg, ranks, prog) or _timed_out_ranks(ranks), "path": r["path"],
        "line": r["line"], "evidence": [{"file": r["path"], "line": r["line"]}], "ts_basis": "inferred",
        "cadence_s": None, "running_req": None, "waiting_req": None, "kv_usage": None, "framework": "sglang",
    }


def _event_ranks(store: Store, engines: list[str]) -> dict[Key, dict]:
    """Per run: the ranks its events name (not torch's 'rank N' nor vLLM's processes), and the ranks whose
    torch collectives timed out."""
    rows = store.query(
        f"""SELECT s.engine, s.seg,
                   list(DISTINCT e.rank) FILTER (WHERE e.rank <> '' AND e.rank NOT LIKE 'rank%'
                                                 AND e.kind NOT LIKE 'vllm%') AS ranks,
                   list(DISTINCT e.rank) FILTER (WHERE e.kind = 'torch_nccl' AND e.rank <> ''
                       AND json_extract_string(e.attrs, '$.event') = 'collective_timeout') AS timed_out
            FROM events e JOIN {SEGS} s ON s.engine = e.engine AND {in_seg('e.ts')}
            WHERE list_contains(?, e.engine) GROUP BY ALL""", [sorted(set(engines))])
    return {(r["engine"], r["seg"]): r for r in rows}


def _ranks(seg: Segment, ranks: dict, prog: dict[Key, list[dict]]) -> list[str]:
    """The run's ranks: those that log batch or step lines, and those its events name."""
    names = [r["rank"] for r in prog.get((seg.engine, seg.index), []) if r["listed"]] + (ranks.get("ranks") or [])
    return sorted({r for r in names if r}, key=rank_key)


def _timed_out_ranks(ranks: dict) -> list[str]:
    """Evidence with no SGLang rank prefix (torch's lines alone): the ranks whose collectives timed out, as
    torch names them; each was stuck in one."""
    return sorted({r for r in ranks.get("timed_out") or [] if r}, key=rank_key)
