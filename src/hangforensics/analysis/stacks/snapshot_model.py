"""What the snapshot analysis works on: one rank's rounds of a capture (``snapshots`` classifies them,
``snapshot_text`` words them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .stackclasses import PER_ITERATION_SITES, RankStack, path_of


@dataclass
class Snap:
    """One rank at one round: its /proc facts and its main-thread dump, either of which may be missing."""

    round: int
    ts: datetime | None
    facts: dict[str, Any] | None = None
    stack: RankStack | None = None

    @property
    def frames(self) -> tuple[str, ...] | None:
        return tuple(path_of(self.stack)) if self.stack is not None else None


@dataclass
class RankSeries:
    capture_id: str
    pid: int
    rank: str
    snaps: list[Snap] = field(default_factory=list)


def per_iteration(coll: str | None, site: str | None) -> bool:
    return bool(coll) and bool(PER_ITERATION_SITES.search(site or ""))
