"""The ``TORCH_NCCL_DESYNC_DEBUG=1`` report a ProcessGroupNCCL timeout appends (pytorch ``TraceUtils.h``,
``retrieveDesyncReport``): tab-indented continuation lines of the watchdog's error message::

    [rank0]:[E710 18:00:32.426302794 ProcessGroupNCCL.cpp:1234] [PG ID 0 PG GUID 0(default_pg) Rank 0] …
    \t - To our best knowledge, ranks [3] are the lagging ranks that caused this timeout. They never joined
      any collectives                                       (one line in the log)
    \t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:
    \t   - [1] joined but didn't finish collective #42 (count from 1)
    \t     [3] finished collective #42, but didn't join collective #43 (count from 1)
    \t - Snapshot of ranks' latest states:
    \t   #42 started ranks:
    \t     [1] started ALLREDUCE
    \t   #43 started ranks:
    \t     [0, 2] started ALLREDUCE

Collectives are numbered from 1 per process group, as ``WorkNCCL(SeqNum=…)`` numbers them, so
``#42`` and ``SeqNum=42`` of the same group are the same collective.  The ranks are the ranks
within the group the report is about (its line's ``[PG … Rank R]`` prefix names it): global
ranks for the default group.  The first line (the glog record itself) is the torch_nccl
parser's; this module reads the continuation lines, envelope already stripped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from .collective_rows import CollectiveRow, parse_rank_list

SOURCE = "torch_nccl"

_RANKS = r"\[(?P<ranks>[\d,\s-]*)\]"
NEVER_JOINED_RE = re.compile(r"^(?:- )?To our best knowledge, ranks " + _RANKS +
                             r" are the lagging ranks that caused this timeout\.? ?"
                             r"(?:They never joined any collectives)?")
LAGGING_HEAD_RE = re.compile(r"^(?:- )?To our best knowledge, the lagging/dead/mismatched ranks that caused "
                             r"the desync are:?$")
NOT_FINISHED_RE = re.compile(r"^(?:- )?" + _RANKS + r" joined but didn't finish collective #(?P<n>\d+)"
                             r"(?: \(count from 1\))?$")
NOT_JOINED_RE = re.compile(r"^(?:- )?" + _RANKS + r" finished collective #(?P<n>\d+), "
                           r"but didn't join collective #(?P<m>\d+)(?: \(count from 1\))?$")
SNAPSHOT_HEAD_RE = re.compile(r"^(?:- )?Snapshot of ranks' latest states:$")
SNAPSHOT_SEQ_RE = re.compile(r"^(?:- )?#(?P<n>\d+) (?P<what>started|finished) ranks:$")
SNAPSHOT_RANKS_RE = re.compile(r"^(?:- )?" + _RANKS + r" (?P<what>started|finished) (?P<op>\S+)$")


@dataclass(frozen=True, slots=True)
class DesyncFact:
    """One statement of the report.

    ``relation``: ``never_joined`` (the ranks never joined any collective: dead or never started),
    ``joined_not_finished`` (inside ``#collective``), ``finished_not_joined`` (finished
    ``#collective``, never joined ``#next_collective``), ``started`` / ``finished`` (snapshot:
    the ranks' latest state, with the op).
    """

    relation: str
    ranks: tuple[int, ...]
    collective: int | None
    next_collective: int | None
    op: str | None
    line: int


@dataclass(frozen=True, slots=True)
class DesyncReport:
    facts: tuple[DesyncFact, ...]
    consumed: frozenset[int]            # offsets into the given lines
    unmatched: tuple[int, ...]

    @property
    def lagging_ranks(self) -> tuple[int, ...]:
        """The ranks the report blames (never joined, or stuck at / stopped after the lowest collective)."""
        blamed = {r for f in self.facts if f.relation in ("never_joined", "joined_not_finished",
                                                           "finished_not_joined") for r in f.ranks}
        return tuple(sorted(blamed))


def _clean(line: str) -> str:
    return line.rstrip("\r\n").strip()


def is_desync_line(line: str) -> bool:
    """A line of the report (any of its shapes), leading tabs / spaces allowed."""
    t = _clean(line)
    return any(rx.match(t) for rx in (NEVER_JOINED_RE, LAGGING_HEAD_RE, NOT_FINISHED_RE, NOT_JOINED_RE,
                                      SNAPSHOT_HEAD_RE, SNAPSHOT_SEQ_RE, SNAPSHOT_RANKS_RE))


def _ranks(m: re.Match[str]) -> tuple[int, ...]:
    return parse_rank_list(m.group("ranks")) or ()


def parse_desync_report(lines: list[str], first_line: int = 1) -> DesyncReport:
    """Facts from the report's lines; lines of another shape are returned unmatched (offsets)."""
    facts: list[DesyncFact] = []
    consumed: set[int] = set()
    unmatched: list[int] = []
    snapshot_seq: int | None = None
    for i, raw in enumerate(lines):
        t = _clean(raw)
        n = first_line + i
        if not t or LAGGING_HEAD_RE.match(t):
            consumed.add(i)
        elif SNAPSHOT_HEAD_RE.match(t):
            snapshot_seq = None
            consumed.add(i)
        elif m := NEVER_JOINED_RE.match(t):
            facts.append(DesyncFact("never_joined", _ranks(m), None, None, None, n))
            consumed.add(i)
        elif m := NOT_FINISHED_RE.match(t):
            facts.append(DesyncFact("joined_not_finished", _ranks(m), int(m.group("n")), None, None, n))
            consumed.add(i)
        elif m := NOT_JOINED_RE.match(t):
            facts.append(DesyncFact("finished_not_joined", _ranks(m), int(m.group("n")), int(m.group("m")),
                                    None, n))
            consumed.add(i)
        elif m := SNAPSHOT_SEQ_RE.match(t):
            snapshot_seq = int(m.group("n"))
            consumed.add(i)
        elif (m := SNAPSHOT_RANKS_RE.match(t)) and snapshot_seq is not None:
            facts.append(DesyncFact(m.group("what"), _ranks(m), snapshot_seq, None, m.group("op"), n))
            consumed.add(i)
        else:
            unmatched.append(i)
    return DesyncReport(tuple(facts), frozenset(consumed), tuple(unmatched))


def desync_rows(report: DesyncReport | Iterable[DesyncFact], pg: str, pg_desc: str | None = None,
                pg_ranks: tuple[int, ...] | None = None, ts: datetime | None = None) -> list[CollectiveRow]:
    """Rows for the ``collectives`` view (source ``torch_nccl``), one per (rank, collective).

    ``pg`` / ``pg_desc`` come from the record the report continues (its ``PG GUID 1(tp:0)``).
    A rank stuck inside #N is ``started`` at N, one that finished #N ``completed`` at N; facts on
    the same rank and collective merge (the snapshot adds the op).  A rank that never joined any
    collective gets an ``absent`` row (seq None).
    """
    facts = report.facts if isinstance(report, DesyncReport) else tuple(report)
    merged: dict[tuple[int, int], dict] = {}
    absent: dict[int, DesyncFact] = {}
    for f in facts:
        if f.relation == "never_joined":
            for r in f.ranks:
                absent.setdefault(r, f)
            continue
        if f.collective is None:
            continue
        state = "started" if f.relation in ("joined_not_finished", "started") else "completed"
        for r in f.ranks:
            row = merged.setdefault((r, f.collective),
                                    {"state": state, "op": None, "records": 0, "line": f.line})
            row["records"] += 1
            row["op"] = row["op"] or f.op
            if state == "started":                  # 'inside it' is the stronger statement
                row["state"] = "started"
    rows = [CollectiveRow(SOURCE, r, pg, seq, v["op"] or "", v["state"], ts, v["records"], pg_desc=pg_desc,
                          pg_ranks=pg_ranks, line=v["line"]) for (r, seq), v in sorted(merged.items())]
    why = "never joined any collective (TORCH_NCCL_DESYNC_DEBUG report)"
    rows.extend(CollectiveRow(SOURCE, r, pg, None, "", "absent", ts, 1, pg_desc=pg_desc, pg_ranks=pg_ranks,
                              reason=why, line=f.line) for r, f in sorted(absent.items()))
    return rows
