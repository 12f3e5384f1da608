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
    dumps = store.query("SELECT source_id, note FROM sources WHERE engine = ? AND kind = 'flight_recorder'",
                        [engine])
    if not dumps:
        return None
    found = _from_timeouts(store, engine) or _from_progress(store, engine)
    offset, why = found if found else (0.0, "are UTC as the dumps record them (epoch ns): nothing in this "
                                            "engine's evidence aligns them to the log clock")
    for d in dumps:
        notes = [n for n in (d["note"] or "").split("; ") if n and not n.startswith(NOTE_PREFIX)]
        notes.append(NOTE_PREFIX + why)
        store.con.execute("UPDATE sources SET clock_offset_s = ?, note = ? WHERE source_id = ?",
                          [offset, "; ".join(notes), d["source_id"]])
    return offset if found else None


def _zone(diff_s: float, slack_s: float) -> float | None:
    """The whole number of quarter hours ``diff_s`` is, when it is one give or take ``slack_s``."""
    q = round(diff_s / QUARTER_S) * QUARTER_S
    return float(q) if abs(diff_s - q) <= slack_s else None


def _offset_text(offset: float) -> str:
    sign = "+" if offset >= 0 else "-"
    h, m = divmod(int(abs(offset)) // 60, 60)
    return f"{sign}{h}:{m:02d} h" if offset else "0 (the log is on UTC)"


def _from_timeouts(store: Store, engine: str) -> tuple[float, str] | None:
    pairs = store.query(
        """SELECT t.ts AS log_ts, t.ran_ms, f.ts AS fr_ts, f.pg, f.seq
           FROM collectives t JOIN collective_records f
             ON f.engine = t.engine AND f.source = 'flight_recorder' AND f.rank = t.rank AND f.seq = t.seq
            AND (t.pg = '?' OR regexp_replace(t.pg, '\\(.*\\)$', '') = f.pg)
            AND COALESCE(json_extract_string(f.attrs, '$.seq_kind'), 'collective') = 'collective'
           WHERE t.engine = ? AND t.source = 'torch_nccl' AND t.ts IS NOT NULL AND f.ts IS NOT NULL""", [engine])
    diffs = [((p["log_ts"] - p["fr_ts"]).total_seconds() - (p["ran_ms"] or 0) / 1000) for p in pairs]
    if not diffs:
        return None
    diff = statistics.median(diffs)
    offset = _zone(diff, TIMEOUT_SLACK_S)
    p = pairs[0]
    src = f"the ProcessGroupNCCL timeout of pg {p['pg']} SeqNum={p['seq']}" + \
        (f" and {len(pairs) - 1} more" if len(pairs) > 1 else "")
    if offset is None:                          # not a zone: another clock; the measured difference, then
        return float(round(diff)), f"aligned to the log clock by {round(diff):+d} s (measured on {src})"
    return offset, f"aligned to the log clock by {_offset_text(offset)} (the zone, from {src})"


def _from_progress(store: Store, engine: str) -> tuple[float, str] | None:
    last: datetime | None = store.scalar("SELECT max(ts) FROM progress WHERE engine = ?", [engine])
    newest: datetime | None = store.scalar(
        "SELECT max(ts) FROM collective_records WHERE engine = ? AND source = 'flight_recorder' "
        "AND state = 'completed'", [engine])
    if last is None or newest is None:
        return None
    offset = _zone((last - newest).total_seconds(), PROGRESS_SLACK_S)
    if offset is None:
        return None
    return offset, (f"aligned to the log clock by {_offset_text(offset)} (the zone: the newest completed entry "
                    f"lies just before the last progress line, {last:%H:%M:%S})")
