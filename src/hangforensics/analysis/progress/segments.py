"""Runs of a server: a start line (SGLang's ``server_args``, vLLM's version or engine config line) starts a
new one.  So does a restart whose start line is not in the evidence (a paste cut after it, a log rotated
away), where the evidence shows one: the ranks' batch lines change their labelling (another parallelism,
so another process), or the server logs resume in other files long after the earlier ones ended.  Every
stall, freeze and episode is judged within one run, so a restart never joins two runs' evidence."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import duckdb

from ...ranks import RANK_TAGS
from ...store import Store

# Two server_args lines this close are one start (every DP worker may print its own).
SAME_START_S = 60


@dataclass
class Segment:
    engine: str
    index: int
    start: datetime | None
    end: datetime | None          # start of the next segment (exclusive) or None
    started_by: str | None = None  # what began it (runs.started_by): None for the first run

    def where(self, col: str = "ts") -> tuple[str, list[Any]]:
        """An SQL condition (starting with AND) keeping ``col`` inside this run, and its parameters."""
        cond, params = [], []
        if self.start is not None:
            cond.append(f"{col} >= ?")
            params.append(self.start)
        if self.end is not None:
            cond.append(f"{col} < ?")
            params.append(self.end)
        return (" AND " + " AND ".join(cond)) if cond else "", params

    def holds(self, ts: datetime | None) -> bool:
        return ts is not None and (self.start is None or ts >= self.start) and (self.end is None or ts < self.end)


def segments_of(store: Store, engine: str) -> list[Segment]:
    return segments_all(store, [engine])[engine]


# What began a run (runs.started_by)
START_LINE, LABELS, LOGS_RESUMED = "start line", "labels changed", "logs resumed"


def segments_all(store: Store, engines: list[str]) -> dict[str, list[Segment]]:
    """The runs of every engine of ``engines`` as the evidence shows them, read in a fixed number of queries."""
    starts: dict[str, list[tuple[datetime, str]]] = {e: [] for e in engines}
    for r in store.query(
            "SELECT engine, ts FROM events WHERE list_contains(?, engine) AND kind IN ('server_args', 'vllm_start') "
            "AND ts IS NOT NULL ORDER BY engine, ts", [engines]):
        starts[r["engine"]].append((r["ts"], START_LINE))
    for e, t, why in inferred_starts(store, engines):
        starts[e].append((t, why))
    return {e: _segments(e, sorted(ts)) for e, ts in starts.items()}


def runs_all(store: Store, engines: list[str]) -> dict[str, list[Segment]]:
    """The runs of ``engines`` as their last analysis stored them (``runs``; what its findings were judged
    on), those of an engine it holds none of (a database analysed by an older release) as the evidence shows
    them."""
    out: dict[str, list[Segment]] = {e: [] for e in engines}
    for r in store.query("SELECT * FROM runs WHERE list_contains(?, engine) ORDER BY engine, segment", [engines]):
        out[r["engine"]].append(Segment(r["engine"], r["segment"], r["start_ts"], r["end_ts"], r["started_by"]))
    missing = [e for e, segs in out.items() if not segs]
    if missing:
        out.update(segments_all(store, missing))
    return out


def store_runs(store: Store, segs: dict[str, list[Segment]]) -> None:
    """Replace the stored runs of the engines of ``segs`` with them."""
    store.con.execute("DELETE FROM runs WHERE list_contains(?, engine)", [list(segs)])
    store.append("runs", [{"engine": s.engine, "segment": s.index, "start_ts": s.start, "end_ts": s.end,
                           "started_by": s.started_by} for ss in segs.values() for s in ss])


def _segments(engine: str, starts: list[tuple[datetime, str]]) -> list[Segment]:
    """Runs from the sorted (time, what) starts.  Evidence before the first start line belongs to the first
    run (its own start rotated away, or lines a moment early on another clock); an inferred start always
    begins a run, for it is inferred from evidence on both sides of it.  Starts this close are one."""
    bounds: list[list] = []
    for t, why in starts:
        if not bounds or (t - bounds[-1][0]).total_seconds() > SAME_START_S:
            bounds.append([t, {why}])
        else:
            bounds[-1][1].add(why)
    splits = [(t, START_LINE if START_LINE in whys else min(whys))
              for i, (t, whys) in enumerate(bounds) if i > 0 or whys != {START_LINE}]
    edges: list[datetime | None] = [None, *(t for t, _ in splits), None]
    whys: list[str | None] = [None, *(w for _, w in splits)]
    return [Segment(engine, i, edges[i], edges[i + 1], whys[i]) for i in range(len(edges) - 1)]


# Server logs that resume this long after every earlier one of the engine ended are another run: the
# process that wrote them was started since.  A silence inside one file is not a restart (a stall, or no
# traffic), however long.
LOG_GAP_S = 6 * 3600
# The rank labels SGLang prints; their form is the label without its numbers.
SGLANG_LABEL = re.compile(rf"^(?:{RANK_TAGS})\d")


def inferred_starts(store: Store, engines: list[str]) -> list[tuple[str, datetime, str]]:
    """(engine, time, LOGS_RESUMED or LABELS) where a run begins without a start line in the evidence:

    * the first line of a server log beginning more than LOG_GAP_S after every earlier log of the engine
      ended (files by the span of their dated lines; a file spanning the gap, an access log say, joins
      them).  Not when the ranks on the two sides differ entirely: those are one run's per-node logs on
      clocks that were not aligned (another time zone), not two runs;
    * where the batch lines' rank labels change form ('TP0' to 'DP0 TP0 EP0'): every rank of a run prints
      the same prefix, so a form that begins after every earlier one ended is another process.  The run
      begins at the first line after the longest silence between the two forms' lines.

    One query reads the span of every (file, rank) (aggregated on the stored rows, the file's clock offset
    added to the aggregates); the rules then walk each engine's few spans."""
    spans: dict[str, list[dict[str, Any]]] = {}
    for r in store.query(_SPANS, [engines]):
        spans.setdefault(r["engine"], []).append(r)
    out: list[tuple[str, datetime, str]] = []
    changes: list[tuple[str, datetime, datetime]] = []
    for e, rows in spans.items():
        gaps = _log_gaps(rows)
        out += [(e, t, LOGS_RESUMED) for t in gaps]
        # a change of form across a log gap is split there already
        changes += [(e, old_end, new_start) for old_end, new_start in _form_changes(rows)
                    if not any(old_end < t <= new_start for t in gaps)]
    if changes:
        out += [(r["engine"], r["ts"], LABELS) for r in store.query(
            """WITH w AS (SELECT unnest($2::VARCHAR[]) AS engine, unnest($3::TIMESTAMP[]) AS old_end,
                                 unnest($4::TIMESTAMP[]) AS new_start),
                x AS (SELECT engine, ts FROM events WHERE list_contains($1, engine) AND ts IS NOT NULL
                      UNION ALL SELECT engine, ts FROM batches WHERE list_contains($1, engine) AND ts IS NOT NULL
                      UNION ALL SELECT engine, ts FROM http_requests WHERE list_contains($1, engine) AND ts IS NOT NULL),
                p AS (SELECT w.engine, w.new_start, x.ts,
                             epoch(x.ts) - epoch(lag(x.ts) OVER (PARTITION BY w.engine, w.new_start ORDER BY x.ts)) AS g
                      FROM w JOIN x ON x.engine = w.engine AND x.ts BETWEEN w.old_end AND w.new_start)
              SELECT engine, arg_max(ts, g) AS ts FROM p WHERE g IS NOT NULL GROUP BY engine, new_start""",
            [sorted({c[0] for c in changes}), *map(list, zip(*changes, strict=True))])]
    return out


# The span of each (file, rank) of the engines $1, and whether the rows are batch lines.  Grouped on the
# stored rows by file first (a source-keyed table holds no engine or path), so no view is expanded row by row.
_SPANS = """
    WITH src AS (SELECT source_id, engine, path, kind, CAST(COALESCE(clock_offset_s, 0) * 1e6 AS BIGINT) AS off
                 FROM sources WHERE list_contains($1, engine)),
    by_path AS (SELECT engine, path, min(source_id) AS source_id FROM src GROUP BY ALL),
    raw AS (
      SELECT source_id, rank, true AS batch, min(ts) AS lo, max(ts) AS hi, min(line) AS first_line,
             arg_min(ts, line) AS first_ts FROM t_batches
      WHERE source_id IN (SELECT source_id FROM src) AND ts IS NOT NULL GROUP BY ALL
      UNION ALL SELECT source_id, NULL, false, min(ts), max(ts), min(line), arg_min(ts, line) FROM t_http_requests
      WHERE source_id IN (SELECT source_id FROM src) AND ts IS NOT NULL GROUP BY ALL
      UNION ALL SELECT source_id, NULL, false, min(ts), max(ts), min(line), arg_min(ts, line) FROM t_vllm_stats
      WHERE source_id IN (SELECT source_id FROM src) AND ts IS NOT NULL GROUP BY ALL
      UNION ALL SELECT p.source_id, e.rank, false, min(e.ts), max(e.ts), min(e.line), arg_min(e.ts, e.line)
      FROM t_events e JOIN by_path p ON p.engine = e.engine AND p.path = e.path WHERE e.ts IS NOT NULL GROUP BY ALL)
    SELECT s.engine, s.path, s.kind, r.rank, r.batch, make_timestamp(epoch_us(r.lo) + s.off) AS lo,
           make_timestamp(epoch_us(r.hi) + s.off) AS hi, r.first_line,
           make_timestamp(epoch_us(r.first_ts) + s.off) AS first_ts
    FROM raw r JOIN src s USING (source_id) ORDER BY s.engine, lo, hi"""


def _log_gaps(spans: list[dict[str, Any]]) -> list[datetime]:
    """The first rule of ``inferred_starts`` over one engine's spans (sorted by start).  Files are cut into
    stretches at every silence of LOG_GAP_S that no file spans, by the span of their lines; a new stretch
    begins at the first line of its earliest file (a line whose time went backwards inside a file does not
    move the restart before the file's start)."""
    files: dict[str, dict[str, Any]] = {}
    for r in spans:
        if r["kind"] == "server_log":
            f = files.setdefault(r["path"], {"lo": r["lo"], "hi": r["hi"], "ranks": set(),
                                             "first": (r["first_line"], r["first_ts"])})
            f["hi"] = max(f["hi"], r["hi"])
            f["first"] = min(f["first"], (r["first_line"], r["first_ts"]))
            if r["rank"] is not None:
                f["ranks"].add(r["rank"])
    stretches: list[dict[str, Any]] = []
    for f in files.values():                       # in order of their earliest line
        if not stretches or (f["lo"] - stretches[-1]["hi"]).total_seconds() > LOG_GAP_S:
            stretches.append({"lo": f["lo"], "hi": f["hi"], "ranks": set(f["ranks"]), "start": f["first"][1]})
        else:
            st = stretches[-1]
            st["hi"], st["start"] = max(st["hi"], f["hi"]), min(st["start"], f["first"][1])
            st["ranks"] |= f["ranks"]
    return [b["start"] for a, b in zip(stretches, stretches[1:], strict=False)
            if not (a["ranks"] and b["ranks"] and a["ranks"].isdisjoint(b["ranks"])) and not _year_apart(a, b)]


def _year_apart(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether stretch ``b`` moved back by a whole year or two lands on ``a`` (within LOG_GAP_S): the mark of a
    year guessed wrong, not of a restart.  glog and vLLM lines print no year; without a dated line near them
    they take it from the file's modification time, which a copy or an archive may have set before the
    incident."""
    gap = timedelta(seconds=LOG_GAP_S)
    for years in (1, 2):
        lo, hi = _years_back(b["lo"], years), _years_back(b["hi"], years)
        if lo <= a["hi"] + gap and hi >= a["lo"] - gap:
            return True
    return False


def _years_back(t: datetime, years: int) -> datetime:
    if t.year - years < datetime.min.year:         # a garbled year 0001
        return datetime.min
    try:
        return t.replace(year=t.year - years)
    except ValueError:                             # 29 February
        return t.replace(year=t.year - years, day=28)


def _form_changes(spans: list[dict[str, Any]]) -> list[tuple[datetime, datetime]]:
    """The second rule of ``inferred_starts``: (the last batch line of the forms before, the first of the new
    form) for each form of rank label that begins after every earlier one ended."""
    forms: dict[str, list[datetime]] = {}
    for r in spans:
        if r["batch"] and r["rank"] and SGLANG_LABEL.match(r["rank"]):
            lo_hi = forms.setdefault(re.sub(r"\d+", "", r["rank"]), [r["lo"], r["hi"]])
            lo_hi[1] = max(lo_hi[1], r["hi"])
    out, reach = [], None
    for lo, hi in sorted(forms.values()):
        if reach is not None and lo > reach:
            out.append((reach, lo))
        reach = hi if reach is None else max(reach, hi)
    return out


def segment_of(segs: list[Segment], ts: datetime | None) -> int:
    """The index of the run holding ``ts`` (the last run when ``ts`` is unknown)."""
    if ts is None:
        return segs[-1].index
    return next((s.index for s in segs if s.holds(ts)), segs[-1].index)


def fmt(ts: datetime | None) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S") if ts else "?"


def in_seg(col: str, s: str = "s") -> str:
    """SQL keeping ``col`` inside the run of the joined row ``s`` (columns seg_start, seg_end), with
    ``Segment.where``'s semantics: an unbounded run keeps undated rows too."""
    return f"({s}.seg_start IS NULL OR {col} >= {s}.seg_start) AND ({s}.seg_end IS NULL OR {col} < {s}.seg_end)"


def temp_table(store: Store, name: str, cols: dict[str, tuple[str, list[Any]]]) -> None:
    """(Re)create the temporary table ``name`` from parallel lists: {column: (SQL type, values)}, so that
    set-wise queries join their per-run or per-rank parameters instead of running once per run."""
    sel = ", ".join(f"unnest(${i + 1}::{typ}[]) AS {col}" for i, (col, (typ, _)) in enumerate(cols.items()))
    store.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {sel}", [v for _, v in cols.values()])


def segments_table(store: Store, name: str, segs: list[Segment], **extra: tuple[str, list[Any]]) -> None:
    """A temporary table of runs (engine, seg, seg_start, seg_end) and per-run ``extra`` columns."""
    temp_table(store, name, {"engine": ("VARCHAR", [s.engine for s in segs]),
                             "seg": ("INTEGER", [s.index for s in segs]),
                             "seg_start": ("TIMESTAMP", [s.start for s in segs]),
                             "seg_end": ("TIMESTAMP", [s.end for s in segs]), **extra})


def drop_temp(store: Store, *names: str) -> None:
    # after a failed statement the transaction is aborted: its rollback drops them, and the error is the first
    with contextlib.suppress(duckdb.TransactionException):
        for n in names:
            store.con.execute(f"DROP TABLE IF EXISTS temp.{n}")


# Temporary tables shared by the set-wise passes of one stalls.rebuild
SEGS = "_hf_segs"             # every run of the engines being judged (segments_table)
WDF = "_hf_wdf"               # their rows of the watchdog_fires view, read once
