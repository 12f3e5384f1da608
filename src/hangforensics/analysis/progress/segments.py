"""Runs of a server: a start line (SGLang's ``server_args``, vLLM's version or engine config line) starts a
new one.  Every stall, freeze and episode is judged
within one run, so a restart never joins two runs' evidence."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
    starts = [r["ts"] for r in store.query(
        "SELECT ts FROM events WHERE engine = ? AND kind IN ('server_args', 'vllm_start') AND ts IS NOT NULL "
        "ORDER BY ts", [engine])]
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
