"""Flight Recorder times (epoch ns, UTC) onto the clock of the engine's main log.

A dump's rows keep the time it recorded; the ``collectives`` and ``stacks`` views add the file's
``sources.clock_offset_s``, as they do for a log on another node.  The offset comes from the evidence:

1. the engine's ProcessGroupNCCL timeout lines (already on the log clock) of the same collective
   (rank, process group, SeqNum): the line's time minus its ``ran for N milliseconds`` is when the
   work started, the dump's entry says when it was enqueued (UTC);
2. else the engine's last progress line: a hang freezes the collectives right after the last forward
   step, so the dump's newest completed entry lies shortly before it.

The difference is a zone offset plus the small lag between enqueue and start (or the log cadence), so
it is rounded to whole quarter hours (zones are) and kept only when the rest is small.  Otherwise the
times stay UTC, and the dump's note says so.
"""

from __future__ import annotations

import statistics
from datetime import datetime

from ..store import Store

QUARTER_S = 900
TIMEOUT_SLACK_S = 300        # enqueue-to-start lag and watchdog discovery, within a timeout anchor
PROGRESS_SLACK_S = 120       # last progress line to the newest completed entry
NOTE_PREFIX = "times "


def align_flight_recorder(store: Store, engine: str) -> float | None:
    """Set clock_offset_s (and a note) on every Flight Recorder dump of ``engine``; return the offset or None."""
    return align_flight_recorder_all(store, [engine]).get(engine)


def align_flight_recorder_all(store: Store, engines: list[str]) -> dict[str, float | None]:
    """``align_flight_recorder`` for every engine of ``engines`` in a fixed number of queries (engine ->
    its offset, or None; engines without a dump are left out)."""
    dumps = store.query("SELECT engine, source_id, note FROM sources WHERE list_contains(?, engine) "
                        "AND kind = 'flight_recorder' ORDER BY engine, source_id", [engines])
    todo = sorted({d["engine"] for d in dumps})
    if not todo:
        return {}
    by_timeouts = _from_timeouts(store, todo)
    by_progress = _from_progress(store, [e for e in todo if e not in by_timeouts])
    out: dict[str, float | None] = {}
    ids, offsets, notes = [], [], []
    for d in dumps:
        e = d["engine"]
        found = by_timeouts.get(e) or by_progress.get(e)
        offset, why = found if found else (0.0, "are UTC as the dumps record them (epoch ns): nothing in this "
                                                "engine's evidence aligns them to the log clock")
        kept = [n for n in (d["note"] or "").split("; ") if n and not n.startswith(NOTE_PREFIX)]
        ids.append(d["source_id"])
        offsets.append(offset)
        notes.append("; ".join([*kept, NOTE_PREFIX + why]))
        out[e] = offset if found else None
    store.con.execute(
        "UPDATE sources SET clock_offset_s = u.offset, note = u.note FROM (SELECT unnest(?::BIGINT[]) AS id, "
        "unnest(?::DOUBLE[]) AS offset, unnest(?::VARCHAR[]) AS note) u WHERE sources.source_id = u.id",
        [ids, offsets, notes])
    return out


def _zone(diff_s: float, slack_s: float) -> float | None:
    """The whole number of quarter hours ``diff_s`` is, when it is one give or take ``slack_s``."""
    q = round(diff_s / QUARTER_S) * QUARTER_S
    return float(q) if abs(diff_s - q) <= slack_s else None


def _offset_text(offset: float) -> str:
    sign = "+" if offset >= 0 else "-"
    h, m = divmod(int(abs(offset)) // 60, 60)
    return f"{sign}{h}:{m:02d} h" if offset else "0 (the log is on UTC)"


def _from_timeouts(store: Store, engines: list[str]) -> dict[str, tuple[float, str]]:
    """Each engine's offset from its ProcessGroupNCCL timeout lines that a dump's entry matches (the first
    timeout line named in the note)."""
    pairs = store.query(
        """SELECT t.engine, t.ts AS log_ts, t.ran_ms, f.ts AS fr_ts, f.pg, f.seq
           FROM collectives t JOIN collective_records f
             ON f.engine = t.engine AND f.source = 'flight_recorder' AND f.rank = t.rank AND f.seq = t.seq
            AND (t.pg = '?' OR regexp_replace(t.pg, '\\(.*\\)$', '') = f.pg)
            AND COALESCE(json_extract_string(f.attrs, '$.seq_kind'), 'collective') = 'collective'
           WHERE list_contains(?, t.engine) AND t.source = 'torch_nccl' AND t.ts IS NOT NULL AND f.ts IS NOT NULL
           ORDER BY t.engine, t.ts, f.pg, f.seq, t.rank, f.ts""", [engines])
    by_engine: dict[str, list[dict]] = {}
    for p in pairs:
        by_engine.setdefault(p["engine"], []).append(p)
    out = {}
    for engine, mine in by_engine.items():
        diffs = [((p["log_ts"] - p["fr_ts"]).total_seconds() - (p["ran_ms"] or 0) / 1000) for p in mine]
        diff = statistics.median(diffs)
        offset = _zone(diff, TIMEOUT_SLACK_S)
        p = mine[0]
        src = f"the ProcessGroupNCCL timeout of pg {p['pg']} SeqNum={p['seq']}" + \
            (f" and {len(mine) - 1} more" if len(mine) > 1 else "")
        if offset is None:                      # not a zone: another clock; the measured difference, then
            out[engine] = float(round(diff)), f"aligned to the log clock by {round(diff):+d} s (measured on {src})"
        else:
            out[engine] = offset, f"aligned to the log clock by {_offset_text(offset)} (the zone, from {src})"
    return out


def _from_progress(store: Store, engines: list[str]) -> dict[str, tuple[float, str]]:
    """Each engine's offset from its last progress line and its dumps' newest completed entry."""
    if not engines:
        return {}
    rows = store.query(
        """SELECT l.engine, l.last, n.newest FROM
             (SELECT engine, max(ts) AS last FROM progress WHERE list_contains($1, engine) GROUP BY engine) l
           JOIN (SELECT engine, max(ts) AS newest FROM collective_records WHERE list_contains($1, engine)
                 AND source = 'flight_recorder' AND state = 'completed' GROUP BY engine) n USING (engine)""",
        [engines])
    out = {}
    for r in rows:
        last: datetime | None = r["last"]
        newest: datetime | None = r["newest"]
        if last is None or newest is None:
            continue
        offset = _zone((last - newest).total_seconds(), PROGRESS_SLACK_S)
        if offset is not None:
            out[r["engine"]] = offset, (
                f"aligned to the log clock by {_offset_text(offset)} (the zone: the newest completed entry "
                f"lies just before the last progress line, {last:%H:%M:%S})")
    return out
