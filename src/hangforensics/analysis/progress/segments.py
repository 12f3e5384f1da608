"""Runs of a server: a start line (SGLang's ``server_args``, vLLM's version or engine config line) starts a
new one.  Every stall, freeze and episode is judged
within one run, so a restart never joins two runs' evidence."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from ...store import Store

# Two server_args lines this close are one start (every DP worker may print its own).
SAME_START_S = 60


@dataclass
class Segment:
    engine: str
    index: int
    start: datetime | None
    end: datetime | None          # start of the next segment (exclusive) or None

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


def segments_all(store: Store, engines: list[str]) -> dict[str, list[Segment]]:
    """The runs of every engine of ``engines``, read in one query."""
    starts: dict[str, list[datetime]] = {e: [] for e in engines}
    for r in store.query(
            "SELECT engine, ts FROM events WHERE list_contains(?, engine) AND kind IN ('server_args', 'vllm_start') "
            "AND ts IS NOT NULL ORDER BY engine, ts", [engines]):
        starts[r["engine"]].append(r["ts"])
    return {e: _segments(e, ts) for e, ts in starts.items()}


def _segments(engine: str, starts: list[datetime]) -> list[Segment]:
    bounds: list[datetime] = []
    for t in starts:
        if not bounds or (t - bounds[-1]).total_seconds() > SAME_START_S:
            bounds.append(t)
    if not bounds:
        return [Segment(engine, 0, None, None)]
    # Evidence before the first server_args (a rotated-away start) belongs to segment 0.
    return [Segment(engine, i, None if i == 0 else t, bounds[i + 1] if i + 1 < len(bounds) else None)
            for i, t in enumerate(bounds)]


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
