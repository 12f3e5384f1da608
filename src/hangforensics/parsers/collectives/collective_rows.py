"""Rows of the ``collectives`` view (interface.md §4), shared by every collective-level parser.

One :class:`CollectiveRow` stands for one (rank, process group, sequence number, op) as one source
reports it: several records about the same collective on the same rank are merged into one row and
counted in ``records``.  The parsers do not know the engine; :meth:`CollectiveRow.view_row` adds it.

    >>> CollectiveRow("flight_recorder", 3, "5", 216067, "all_reduce", "completed").view_row("node18")["seq"]
    216067
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

SOURCES = ("torch_nccl", "flight_recorder", "nccl_ras")
# TORCH_DISTRIBUTED_DEBUG=DETAIL's collective check ('Detected mismatch between collectives on ranks'), which
# does not print the group it checked
MISMATCH_SOURCE = "mismatch_check"
MISMATCH_PG = "a process group (unnamed)"
# torch's monitored barrier (rank 0 names the ranks that never arrived)
BARRIER_SOURCE = "monitored_barrier"
BARRIER_PG = "a monitored barrier"

# Row states.  Pending: the rank entered the collective and it has not finished there.
PENDING_STATES = frozenset({"scheduled", "started", "timeout", "launched"})
DONE_STATES = frozenset({"completed"})
# A rank that should be in the group but is not there at all (seq is None on these rows).
ABSENT_STATES = frozenset({"missing", "dead", "unresponsive", "absent"})

EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class CollectiveRow:
    """One row of the ``collectives`` view, without its engine.

    ``seq_kind`` names the counter ``seq`` belongs to: ``collective`` (torch's per-group collective
    sequence number), ``p2p`` (per-rank send/recv count: not comparable across ranks), or, for NCCL
    RAS 2.26+, the collective type whose launch count ``seq`` is (``AllReduce``), ``all`` for the
    2.24/2.25 total.  Rows are only ever compared within one (source, pg, seq_kind).
    """

    source: str                                  # torch_nccl | flight_recorder | nccl_ras
    rank: int | None                             # global rank (see the parser's notes); None = unnamed
    pg: str                                      # group name / GUID / communicator hash as printed
    seq: int | None                              # None on absent-rank rows
    op: str                                      # as the source spells it: all_reduce, ALLREDUCE, AllReduce
    state: str | None                            # scheduled/started/completed/timeout/launched; missing/dead…
    ts: datetime | None = None                   # naive, on the source's clock (FR: UTC)
    records: int = 1
    pg_desc: str | None = None                   # 'tp:0', 'default_pg'
    pg_ranks: tuple[int, ...] | None = None      # members as the evidence lists them
    seq_kind: str = "collective"
    input_sizes: tuple[tuple[int, ...], ...] = ()
    output_sizes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    output_dtypes: tuple[str, ...] = ()
    inferred: bool = False                       # rank deduced (RAS: the unnamed majority), not printed
    reason: str | None = None                    # why an absent row is absent, or a source's remark
    line: int | None = None                      # 1-based line (text) or record number (binary)

    @property
    def p2p(self) -> bool:
        return self.seq_kind == "p2p"

    @property
    def pg_label(self) -> str:
        """'5(tp:0)', as ProcessGroupNCCL prints a group; the bare name without a description."""
        return f"{self.pg}({self.pg_desc})" if self.pg_desc and self.pg_desc != self.pg else self.pg

    def view_row(self, engine: str) -> dict[str, Any]:
        """The row as the ``collectives`` view stores it (key columns first, then the extras)."""
        return {
            "engine": engine, "source": self.source, "rank": self.rank, "pg": self.pg, "seq": self.seq,
            "op": self.op, "state": self.state, "ts": self.ts, "records": self.records,
            "pg_desc": self.pg_desc, "pg_ranks": list(self.pg_ranks) if self.pg_ranks is not None else None,
            "seq_kind": self.seq_kind, "input_sizes": [list(s) for s in self.input_sizes],
            "output_sizes": [list(s) for s in self.output_sizes], "input_dtypes": list(self.input_dtypes),
            "output_dtypes": list(self.output_dtypes), "inferred": self.inferred, "reason": self.reason,
            "line": self.line,
        }


def ts_from_ns(ns: int | None) -> datetime | None:
    """Epoch nanoseconds (UTC) -> naive UTC datetime (microseconds); None for unknown (None / 0)."""
    if not ns or ns < 0:
        return None
    try:
        return EPOCH + timedelta(microseconds=ns // 1000)
    except OverflowError:
        return None


def op_key(op: str) -> str:
    """One spelling per collective across sources, for comparing them with each other.

    'nccl:all_reduce', 'ALLREDUCE', 'AllReduce' -> 'allreduce'; '_all_gather_base',
    'all_gather_into_tensor', '_ALLGATHER_BASE' -> 'allgather'; 'send 1->2' -> 'send'.
    """
    s = op.strip().split(" ", 1)[0]
    s = re.sub(r"^[a-z]+:", "", s, flags=re.I).lower()
    for suffix in ("_into_tensor", "_base", "_tensor", "_single"):
        s = s.removesuffix(suffix)
    return s.replace("_", "")


def format_ranks(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 4, 5, 6, 7] -> '0-2,4-7'."""
    rs = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(parts)


RANK_LIST_RE = re.compile(r"-?\d+(?:\s*-\s*\d+)?")


def parse_rank_list(text: str) -> tuple[int, ...] | None:
    """'[0, 1, 2, 3]' / '0-3, 8' / '5' -> ranks; None when the text holds no rank number.

    Never evaluates the text (fr_trace runs ``eval`` on it).
    """
    out: list[int] = []
    for m in RANK_LIST_RE.finditer(text):
        tok = m.group(0)
        if "-" in tok[1:]:
            a, b = (int(x) for x in tok.split("-", 1))
            if 0 <= a <= b and b - a <= 1_000_000:
                out.extend(range(a, b + 1))
        elif not tok.startswith("-"):
            out.append(int(tok))
    return tuple(out) if out else None


@dataclass(frozen=True, slots=True)
class Position:
    """Where one rank stands in one counter of one group.

    ``seq`` is the collective it is in (``pending``) or, when it waits in none, the last one it
    finished; ``enqueued`` the highest it reached at all (the host side runs ahead of the GPU);
    ``row`` the row at ``seq``.
    """

    seq: int
    pending: bool
    enqueued: int
    row: CollectiveRow


_ENTERED = frozenset({"started", "timeout", "launched"})


def rank_position(rows: Iterable[CollectiveRow]) -> Position | None:
    """The position of one rank from its rows of one (source, pg, seq_kind); None without numbered rows.

    A NCCL stream runs its collectives in order, so the GPU is in the *highest started* one: a
    lower entry still marked started was finished but not yet seen by the watchdog, and entries
    above it that are only ``scheduled`` are the host running ahead.  Without a started entry the
    rank waits in its lowest scheduled one (no start events recorded), else it waits in none and
    stands at its last finished one.
    """
    numbered = [r for r in rows if r.seq is not None and r.state not in ABSENT_STATES]
    if not numbered:
        return None
    enqueued = max(r.seq for r in numbered if r.seq is not None)
    entered = [r for r in numbered if r.state in _ENTERED]
    scheduled = [r for r in numbered if r.state == "scheduled"]
    if entered:
        row = max(entered, key=lambda r: r.seq or 0)
        return Position(row.seq or 0, True, enqueued, row)
    if scheduled:
        row = min(scheduled, key=lambda r: r.seq or 0)
        return Position(row.seq or 0, True, enqueued, row)
    row = max(numbered, key=lambda r: r.seq or 0)           # completed, or a state the source does not give
    return Position(row.seq or 0, row.state not in DONE_STATES, enqueued, row)
