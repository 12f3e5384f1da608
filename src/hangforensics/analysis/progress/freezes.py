"""How tightly the ranks of a stalled run froze: per-rank stop times and the verdict.

Per-rank stop times come, in order of preference, from per-rank batch lines (several ranks log them; not
vLLM's stats lines, which one process prints on a timer for every engine core) and
from the scheduler watchdogs' fire times: each rank's watchdog fires ``watchdog_timeout`` after that
rank's own last progress, so ranks whose watchdogs fired within ``TOGETHER_S`` of each other (not "in
the same clock second") froze together.  Fire times further apart are not judged: each rank's dump
(py-spy of every scheduler) delays its line by seconds, so their order says little.  A rank missing from
the collective records all its peers produced is judged by ``collectives``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ...ranks import rank_key
from ...store import Store
from .segments import WDF, Segment, drop_temp, fmt, in_seg, segments_table

TOGETHER_S = 1.0


@dataclass
class Freeze:
    engine: str
    segment: int
    verdict: str                  # together, staggered
    ts: datetime | None
    ts_end: datetime | None
    ranks: list[str]
    source: str
    detail: str
    evidence: list[dict[str, Any]] = field(default_factory=list)
    ts_basis: str = "read"


Key = tuple[str, int]         # (engine, segment)
FZ = "_hf_freeze_runs"        # the runs judged by their watchdogs, and since when a firing counts


def rank_stops_all(store: Store, segs: list[Segment], stalls: dict[Key, dict | None],
                   prog: dict[Key, list[dict]]) -> dict[Key, tuple[list[dict], Freeze | None]]:
    """Per run: its per-rank stop rows and its freeze verdict (None when the evidence cannot say).
    ``prog``: each run's per-rank progress rows (stalls._progress_by_rank); the watchdog firings are read
    from the temporary table WDF in one query."""
    out: dict[Key, tuple[list[dict], Freeze | None]] = {}
    rest = []
    for seg in segs:
        key = (seg.engine, seg.index)
        stall = stalls.get(key)
        if stall is not None:
            stops, fz = _from_batch_lines(seg, stall, prog.get(key, []))
            if fz is not None:
                out[key] = (stops, fz)
                continue
        rest.append(seg)
    fired = _fired(store, rest, stalls)
    for seg in rest:
        key = (seg.engine, seg.index)
        out[key] = _from_watchdogs(seg, stalls.get(key), fired.get(key, []), prog.get(key, []))
    return out


def _from_batch_lines(seg: Segment, stall: dict, ranks: list[dict]) -> tuple[list[dict], Freeze | None]:
    e = seg.engine
    # ties (several lines in one clock second) broken by file and line: the same evidence however loaded
    per_rank = sorted(({"rank": r["rank"], "stopped_at": r["stopped_at"], "path": r["stop_path"],
                        "line": r["stop_line"], "steps": r["steps"]} for r in ranks if r["n_batch"]),
                      key=lambda r: (r["stopped_at"], r["path"], r["line"]))
    if len(per_rank) < 2:
        return [], None
    # a torch job's own step lines, else SGLang's batch lines
    source, what = ("step_lines", "step") if all(r["steps"] for r in per_rank) else ("batch_lines", "batch")
    rows = [{"engine": e, "segment": seg.index, "rank": r["rank"], "stopped_at": r["stopped_at"],
             "source": source, "path": r["path"], "line": r["line"]} for r in per_rank]
    first, last = per_rank[0]["stopped_at"], per_rank[-1]["stopped_at"]
    spread = (last - first).total_seconds()
    ev = [{"file": r["path"], "line": r["line"]} for r in per_rank]
    if spread <= TOGETHER_S:
        return rows, Freeze(e, seg.index, "together", first, last, stall["ranks"], source,
                            f"The {len(per_rank)} ranks that log {what} lines all stopped within {spread:.1f} s "
                            f"({fmt(first)} to {fmt(last)}): a shared deadlock (collective, rendezvous or "
                            f"registration), not one slow rank.", ev)
    early = [r for r in per_rank if (r["stopped_at"] - first).total_seconds() <= TOGETHER_S]
    nxt = next(r for r in per_rank if r not in early)
    gap = (nxt["stopped_at"] - first).total_seconds()
    return rows, Freeze(e, seg.index, "staggered", first, None, [r["rank"] for r in early], source,
                        f"{', '.join(r['rank'] for r in early)} printed its last {what} line at {fmt(first)}, "
                        f"{gap:.0f} s before the next rank ({nxt['rank']} at {fmt(nxt['stopped_at'])}); the "
                        f"others kept making progress until {fmt(last)}. The earliest rank to stop is the "
                        f"prime suspect.", ev[: len(early)] + [{"file": nxt["path"], "line": nxt["line"]}])


def _fired(store: Store, segs: list[Segment], stalls: dict[Key, dict | None]) -> dict[Key, list[dict]]:
    """Per run, each rank's first scheduler-watchdog firing of the run's first episode (after the stall's
    onset, when read), in firing order."""
    after = []
    for seg in segs:
        stall = stalls.get((seg.engine, seg.index))
        after.append(stall["onset"] if stall and stall.get("ts_basis") == "read" else datetime.min)
    segments_table(store, FZ, segs, after=("TIMESTAMP", after))
    try:
        rows = store.query(
            f"""WITH wd AS (
                  SELECT q.engine, q.seg, w.rank, w.fired_at AS ts, w.path, w.line,
                         TRY_CAST(json_extract_string(w.attrs, '$.timeout') AS DOUBLE) AS timeout
                  FROM {WDF} w JOIN {FZ} q ON q.engine = w.engine AND w.fired_at > q.after AND {in_seg('w.ts', 'q')}
                  WHERE w.rank <> '' AND coalesce(json_extract_string(w.attrs, '$.who'), 'Scheduler') = 'Scheduler')
                SELECT engine, seg, rank, min(ts) AS fired_at, arg_min(path, (ts, path, line)) AS path,
                       arg_min(line, (ts, path, line)) AS line, max(timeout) AS timeout
                FROM wd GROUP BY ALL""")
    finally:
        drop_temp(store, FZ)
    out: dict[Key, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["fired_at"], r["path"], r["line"])):
        out.setdefault((r["engine"], r["seg"]), []).append(r)
    return out


def _from_watchdogs(seg: Segment, stall: dict | None, fired: list[dict],
                    progress: list[dict]) -> tuple[list[dict], Freeze | None]:
    """Each rank's first scheduler-watchdog firing of the run's first episode (before progress resumed)."""
    e = seg.engine
    if len(fired) < 2:
        return [], None
    first, last = fired[0]["fired_at"], fired[-1]["fired_at"]
    if stall is None and any(r["last"] is not None and r["last"] > first for r in progress):
        return [], None                 # progress resumed after the watchdogs fired: slow, not frozen
    spread = (last - first).total_seconds()
    ev = [{"file": r["path"], "line": r["line"]} for r in fired]
    ranks = sorted({r["rank"] for r in fired}, key=rank_key)
    timeout = fired[0]["timeout"]
    if stall is not None and stall.get("ts_basis") == "read":
        onset, basis = stall["onset"], "read"
    elif timeout:
        onset, basis = first - timedelta(seconds=timeout), "inferred"
    else:
        onset, basis = None, "inferred"
    rows = [{"engine": e, "segment": seg.index, "rank": r["rank"],
             "stopped_at": (r["fired_at"] - timedelta(seconds=r["timeout"])) if r["timeout"] else None,
             "source": "watchdog", "path": r["path"], "line": r["line"]} for r in fired]
    if spread <= TOGETHER_S:
        # stuck together since the group's last progress, read: every rank stopped then; inferred, each rank
        # stopped its own timeout before its watchdog fired (the first of them is the onset)
        end = onset
        for r in rows:
            if basis == "read" or r["stopped_at"] is None:
                r["stopped_at"] = onset
            elif onset is not None:
                end = max(end, r["stopped_at"])
        since = (f"the group's last progress at {fmt(onset)}" if basis == "read" else
                 f"about {fmt(onset)} (fire time minus the {timeout:.0f} s watchdog timeout: inferred, no "
                 f"progress line is in the evidence)" if onset else "before the watchdog timeout")
        return rows, Freeze(e, seg.index, "together", onset, end, ranks, "watchdog",
                            f"The scheduler watchdogs of {len(ranks)} ranks fired within {spread:.1f} s of each "
                            f"other ({fmt(first)} to {fmt(last)}), so every rank had been stuck since {since}: "
                            f"they froze together.", ev, basis)
    return rows, None


def freeze_row(fz: Freeze) -> dict[str, Any]:
    return {"engine": fz.engine, "segment": fz.segment, "verdict": fz.verdict, "ts": fz.ts, "ts_end": fz.ts_end,
            "ranks": fz.ranks, "source": fz.source, "detail": fz.detail, "evidence": fz.evidence,
            "ts_basis": fz.ts_basis}

