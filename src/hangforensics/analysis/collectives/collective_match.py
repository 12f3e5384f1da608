"""Cross-rank matching of collective records: which ranks of a process group are out of step.

A pure function over :class:`~hangforensics.parsers.collectives.collective_rows.CollectiveRow` rows from any
source (Flight Recorder, ProcessGroupNCCL timeouts, NCCL RAS, the desync-debug report).  Rows are
compared only within one (source, process group, counter): sequence numbers of different groups
count different things, and so do a RAS communicator's per-type operation counts.

Each rank's :func:`~hangforensics.parsers.collectives.collective_rows.rank_position` votes; the position held
by the most ranks (ranks, not rows) is the reference.  Against it a rank is

* ``behind``: it never reached the reference collective (its highest sequence number is lower):
  the classic culprit, e.g. it *completed* #N while the others *started* #N+1;
* ``ahead``: it is past the reference (waiting in a later collective the others never joined);
* ``other_op`` / ``other_sizes``: at the reference collective with another op, or other input
  sizes / dtypes for an op whose inputs must match (all_reduce, broadcast, all_gather, …).

What does *not* make a rank odd, so that a healthy rank is not blamed (fr_trace's known
weakness): being host-side ahead (entries merely ``scheduled`` beyond the reference), an older
entry still marked ``started`` because its watchdog had not seen it finish, or a different state
at the same collective.  Ranks that all stand in the same collective *agree*: the hang is outside
them (a missing peer, NCCL, the GPU).  When no rank waits in anything (every collective
completed) at different numbers, the group agrees: nothing is stuck there, the dumps were just
taken at different moments (at the same number, ops and sizes are still compared: mismatched
collectives of one size can complete).  A tie between positions is ``undecided``, never a desync, except
between ProcessGroupNCCL timeouts: each rank's own watchdog says which collective it waits in, so ranks of
one group timed out at different SeqNums are in different collectives, and with no majority every
disagreeing rank is named.

A separate ``absent`` verdict names members that left no record, or were reported missing / dead
(NCCL RAS, the desync report's "never joined any collectives").  A member with no record at all (no
Flight Recorder dump, no ProcessGroupNCCL line) is named only when the evidence knows the group's
members (Flight Recorder ``pg_config``, a RAS communicator's size, or ``members`` given by the caller,
e.g. the engine's world size for torch lines), most of them reported (at least two, and more than half:
one dump of eight says nothing about the other seven, and one node's dumps of a two-node job say
nothing about the other node) and the reporters agree: when they already disagree, a silent member is
no clearer a suspect than the named minority (then the desync's detail says who left no record), and
only in a group where some rank waits (where nothing is stuck, nobody waits for the silent member).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import TypeVar

from ...parsers.collectives.collective_rows import (
    ABSENT_STATES,
    CollectiveRow,
    Position,
    format_ranks,
    op_key,
    rank_position,
)
from ...parsers.collectives.nccl_ras import JOB_PG

T = TypeVar("T")

# Sources in which every member reports for itself: a member with no row there is a fact.
SELF_REPORTING = {"flight_recorder": "no Flight Recorder dump from it",
                  "torch_nccl": "no ProcessGroupNCCL record from it",
                  "fr_trace": "fr_trace had no Flight Recorder dump from it"}
# Ops whose inputs are the same on every rank (all_to_all, gather, scatter legitimately differ).
SIZE_INVARIANT = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "barrier"}


class VerdictKind(str, Enum):
    DESYNC = "desync"          # ranks of one group stand at different collectives
    AGREE = "agree"            # they stand at the same one (or nothing waits)
    UNDECIDED = "undecided"    # no majority, or a single rank: nothing to compare
    ABSENT = "absent"          # members that left no record, or were reported missing / dead


class Relation(str, Enum):
    BEHIND = "behind"
    AHEAD = "ahead"
    OTHER_OP = "other_op"
    OTHER_SIZES = "other_sizes"
    MISSING = "missing"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class OddRank:
    rank: int
    relation: Relation
    seq: int | None            # where the rank stands (None for an absent rank)
    op: str | None
    state: str | None
    reason: str                # the clause of the detail sentence, without the rank


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: VerdictKind
    source: str
    pg: str
    pg_desc: str | None
    seq_kind: str              # the counter compared ('collective', a RAS op type); '' for absent
    ranks: tuple[int, ...]     # the group's members: listed by the evidence, else those seen
    odd: tuple[OddRank, ...]
    reference_seq: int | None
    reference_op: str | None
    reference_ranks: tuple[int, ...]
    ts: datetime | None        # the earliest record of an odd rank, else None
    detail: str

    @property
    def odd_ranks(self) -> tuple[int, ...]:
        return tuple(o.rank for o in self.odd)


def compare_process_groups(rows: Iterable[CollectiveRow],
                           reporting_ranks: Mapping[str, Iterable[int]] | None = None,
                           members: Mapping[tuple[str, str], Iterable[int]] | None = None) -> list[Verdict]:
    """Verdicts per (source, pg): one per counter compared, plus one ``absent`` when members are missing.

    ``reporting_ranks`` (source -> ranks) names ranks that produced evidence of that source even
    with no row (an empty Flight Recorder dump), so their absence from a group reads right;
    ranks with any row of the source count anyway.  ``members`` ((source, pg) -> ranks) gives a
    group's members where its rows list none (torch lines: the engine's world size).
    """
    rows = [r for r in rows if r.rank is not None]
    reporters: dict[str, set[int]] = defaultdict(set)
    for r in rows:
        reporters[r.source].add(r.rank)                      # type: ignore[arg-type]
    for source, ranks in (reporting_ranks or {}).items():
        reporters[source].update(ranks)
    groups: dict[tuple[str, str], list[CollectiveRow]] = defaultdict(list)
    for r in rows:
        groups[(r.source, r.pg)].append(r)
    judged = []
    for (source, pg), grows in sorted(groups.items()):
        known = _members(grows) or tuple(sorted(set((members or {}).get((source, pg), ()))))
        desc = next((r.pg_desc for r in grows if r.pg_desc), None)
        ctx = _Group(source, pg, desc, known or tuple(sorted({r.rank for r in grows if r.rank is not None})),
                     bool(known))
        numbered = [r for r in grows if r.seq is not None and r.state not in ABSENT_STATES]
        compared = [_compare(ctx, kind, [r for r in numbered if r.seq_kind == kind])
                    for kind in sorted({r.seq_kind for r in numbered if r.seq_kind != "p2p"})]
        judged.append((ctx, grows, numbered, compared))
    # A missing dump (or timeout line) is a fact about a rank, not a group: beside a desync anywhere in the
    # same source it is said in the desync's detail, not made a suspect of its own.
    desynced = {c.source for c, _, _, vs in judged if any(v.kind == VerdictKind.DESYNC for v in vs)}
    verdicts: list[Verdict] = []
    for ctx, grows, numbered, compared in judged:
        silent = _silent(ctx, grows, reporters.get(ctx.source, set()))
        if ctx.source in desynced and silent and ctx.source in SELF_REPORTING:
            note = f"; {_ranks_text(silent)} left no record here ({SELF_REPORTING[ctx.source]})"
            compared = [replace(v, detail=v.detail + note) if v.kind == VerdictKind.DESYNC else v for v in compared]
        verdicts.extend(compared)
        # ...and only where the others wait: in a group where nothing is stuck nobody waits for it
        infer = ctx.source not in desynced and _waiting(numbered)
        absent = _absent(ctx, grows, reporters.get(ctx.source, set()), infer)
        if absent:
            verdicts.append(absent)
    return verdicts


def _waiting(rows: list[CollectiveRow]) -> bool:
    """Some rank of the group waits in a collective (its position is pending)."""
    by_rank: dict[int, list[CollectiveRow]] = defaultdict(list)
    for r in rows:
        if r.seq_kind != "p2p":
            by_rank[r.rank].append(r)                       # type: ignore[index]
    return any((p := rank_position(rs)) is not None and p.pending for rs in by_rank.values())


def _silent(g: _Group, rows: list[CollectiveRow], reporters: set[int]) -> list[int]:
    """Listed members with no row and no evidence of the group's source at all."""
    seen = {r.rank for r in rows if r.rank is not None}
    return [m for m in g.members if g.listed and m not in seen and m not in reporters]


def _members(rows: list[CollectiveRow]) -> tuple[int, ...]:
    """The members the rows list (Flight Recorder pg_config, a RAS communicator's size); () when none do."""
    return tuple(sorted({m for r in rows if r.pg_ranks for m in r.pg_ranks}))


@dataclass(frozen=True, slots=True)
class _Group:
    source: str
    pg: str
    desc: str | None
    members: tuple[int, ...]
    listed: bool = False       # the members come from the evidence (not merely the ranks seen)

    @property
    def where(self) -> str:
        ranks = f"ranks {format_ranks(self.members)}" if self.members else ""
        if self.source == "nccl_ras" and self.pg == JOB_PG:
            return "among the job's processes"
        if self.source == "nccl_ras":          # a communicator's own ranks, printed by hash and block
            return f"in communicator {self.pg}" + (f" ({self.desc}, its {ranks})" if ranks else "")
        label = f"{self.pg}({self.desc})" if self.desc and self.desc != self.pg and \
            not self.pg.endswith(f"({self.desc})") else self.pg
        return f"in pg {label}" + (f" ({ranks})" if ranks else "")

    def n(self, seq: int) -> str:
        """A sequence number as the source prints it: 'SeqNum=5' (torch lines), 'operation 5' (RAS counts
        operations launched), else '#5'."""
        return {"torch_nccl": f"SeqNum={seq}", "nccl_ras": f"operation {seq}"}.get(self.source, f"#{seq}")

    def at(self, op: str, seq: int) -> str:
        return f"{op} {self.n(seq)}" if op and op != "ALL" else self.n(seq)     # pg_status rows know no op

    def verdict(self, kind: VerdictKind, seq_kind: str, odd: list[OddRank], ref_seq: int | None,
                ref_op: str | None, ref_ranks: Iterable[int], ts: datetime | None, detail: str) -> Verdict:
        return Verdict(kind, self.source, self.pg, self.desc, seq_kind, self.members, tuple(odd), ref_seq,
                       ref_op, tuple(sorted(ref_ranks)), ts, f"{self.where}, {detail}")


def _ranks_text(ranks: Iterable[int]) -> str:
    rs = sorted(set(ranks))
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {format_ranks(rs)}"


def _clauses(odd: Iterable[OddRank]) -> str:
    """'rank 3 is …; ranks 5,6 are …': odd ranks with the same reason share one clause."""
    by_reason: dict[str, list[int]] = defaultdict(list)
    for o in odd:
        by_reason[o.reason].append(o.rank)
    out = []
    for why, rs in by_reason.items():
        if len(rs) > 1:
            for one, many in (("is ", "are "), ("has ", "have ")):
                if why.startswith(one):
                    why = many + why[len(one):]
        out.append(f"{_ranks_text(rs)} {why}")
    return "; ".join(out)


def _count(n: int, noun: str) -> str:
    return f"one {noun}" if n == 1 else f"{n} {noun}s"


def _ops_at(rows: list[CollectiveRow], seq: int) -> str | None:
    ops = sorted({r.op for r in rows if r.seq == seq})
    return "+".join(ops) if ops else None                    # a coalesced group: every op at that number


def _plurality(values: Iterable[T]) -> T | None:
    top = Counter(values).most_common(2)
    if not top or (len(top) > 1 and top[0][1] == top[1][1]):
        return None
    return top[0][0]


def _state_text(positions: Iterable[Position]) -> str:
    states = sorted({p.row.state or "state unknown" for p in positions})
    return ", ".join(states)


def _compare(g: _Group, seq_kind: str, rows: list[CollectiveRow]) -> Verdict:
    noun = "collective" if seq_kind == "collective" else \
        ("operation" if seq_kind.lower() == "all" else f"{seq_kind} operation")
    by_rank: dict[int, list[CollectiveRow]] = defaultdict(list)
    for r in rows:
        by_rank[r.rank].append(r)                             # type: ignore[index]
    pos = {rank: p for rank, rs in sorted(by_rank.items()) if (p := rank_position(rs)) is not None}
    if len(pos) == 1:
        (rank, p), = pos.items()
        return g.verdict(VerdictKind.UNDECIDED, seq_kind, [], p.seq, p.row.op, [rank], None,
                         f"only rank {rank} reported (at {g.at(p.row.op, p.seq)}, {p.row.state}): "
                         f"nothing to compare")
    lo, hi = min(p.seq for p in pos.values()), max(p.seq for p in pos.values())
    idle = not any(p.pending for p in pos.values())
    idle_text = f"every rank finished its last {noun} ({g.n(lo)}{f' to {g.n(hi)}' if hi > lo else ''}) and " \
                f"none waits in one: nothing is stuck in this group"
    if idle and lo != hi:
        # nothing waits: the dumps were taken at different moments of a running group
        return g.verdict(VerdictKind.AGREE, seq_kind, [], None, None, pos, None, idle_text)
    votes = Counter(p.seq for p in pos.values()).most_common()
    if len(votes) > 1 and votes[0][1] == votes[1][1]:
        sides = "; ".join(f"{_ranks_text(r for r, p in pos.items() if p.seq == s)} at {g.n(s)}"
                          for s, n in votes if n == votes[0][1])
        if all(p.row.state == "timeout" for p in pos.values()):
            return _timeouts_apart(g, seq_kind, pos, hi)
        return g.verdict(VerdictKind.UNDECIDED, seq_kind, [], None, None, [], None,
                         f"no majority: {sides}: cannot tell which side is out of step, so no rank is named")
    ref = votes[0][0]
    odd, ref_op = _odd_ranks(g, noun, ref, pos, by_rank)
    odd_set = {o.rank for o in odd}
    ref_ranks = [rank for rank in pos if rank not in odd_set]
    op_name = f"{ref_op} " if ref_op and ref_op != "ALL" else ""      # RAS 2.24: a total, not one op
    at_ref = f"{op_name}{g.n(ref)} ({_state_text(pos[r] for r in ref_ranks)})"
    if not odd and idle:
        return g.verdict(VerdictKind.AGREE, seq_kind, [], ref, ref_op, ref_ranks, None, idle_text)
    if not odd:
        every = "both" if len(ref_ranks) == 2 else f"all {len(ref_ranks)}"
        return g.verdict(VerdictKind.AGREE, seq_kind, [], ref, ref_op, ref_ranks, None,
                         f"{every} ranks are at {at_ref}: they agree, so the hang is not a desync among them "
                         f"(look for a peer outside this evidence, NCCL or the GPU)")
    first = [p.row.ts for rank, p in pos.items() if rank in odd_set and p.row.ts is not None]
    are = "is" if len(ref_ranks) == 1 else "are"
    return g.verdict(VerdictKind.DESYNC, seq_kind, odd, ref, ref_op, ref_ranks,
                     min(first) if first else None, f"{_ranks_text(ref_ranks)} {are} at {at_ref}; {_clauses(odd)}")


def _timeouts_apart(g: _Group, seq_kind: str, pos: dict[int, Position], hi: int) -> Verdict:
    """Timeouts of one group at different SeqNums with no majority: each rank's own watchdog says which
    collective it waits in, so the ranks are in different collectives (a desync) even though no side is the
    minority: every disagreeing rank is named, none taken as the reference."""
    odd = [OddRank(rank, Relation.AHEAD if p.seq == hi else Relation.BEHIND, p.seq, p.row.op, p.row.state,
                   f"timed out in {g.at(p.row.op, p.seq)}") for rank, p in pos.items()]
    first = [p.row.ts for p in pos.values() if p.row.ts is not None]
    return g.verdict(VerdictKind.DESYNC, seq_kind, odd, None, None, [], min(first) if first else None,
                     f"no majority, the ranks' watchdogs timed out in different collectives: {_clauses(odd)}; "
                     f"no side is the minority, so every disagreeing rank is named")


def _odd_ranks(g: _Group, noun: str, ref: int, pos: dict[int, Position],
               by_rank: dict[int, list[CollectiveRow]]) -> tuple[list[OddRank], str | None]:
    """The ranks out of step with the reference collective ``ref``, and the reference op."""
    joined = {rank: by_rank[rank] for rank, p in pos.items() if p.enqueued >= ref and p.seq <= ref}
    ops = {rank: _ops_at(rs, ref) for rank, rs in joined.items()}
    ref_op = _plurality(o for o in ops.values() if o)
    sizes = {rank: next((r for r in rs if r.seq == ref and r.op == ref_op), None)
             for rank, rs in joined.items()}
    ref_in = _plurality(r.input_sizes for r in sizes.values() if r and r.input_sizes)
    ref_dt = _plurality(r.input_dtypes for r in sizes.values() if r and r.input_dtypes)
    check_sizes = ref_op is not None and op_key(ref_op) in SIZE_INVARIANT
    odd: list[OddRank] = []
    for rank, p in pos.items():
        st = p.row.state
        if p.enqueued < ref:
            if st == "launched":
                why = f"launched up to {g.n(p.seq)}, not {g.n(ref)}"
            elif p.pending:
                why = f"is still in {g.at(p.row.op, p.seq)} ({st}) and never joined {g.n(ref)}"
            else:
                why = f"finished {g.n(p.seq)} and never joined {g.n(ref)}"
            odd.append(OddRank(rank, Relation.BEHIND, p.seq, p.row.op, st,
                               f"{why}: {_count(ref - p.enqueued, noun)} behind"))
        elif p.seq > ref:
            if st == "launched":
                why = f"launched up to {g.n(p.seq)}: {_count(p.seq - ref, noun)} ahead"
            elif p.pending:
                why = f"is past {g.n(ref)}, waiting in {g.at(p.row.op, p.seq)} ({st}), which the others never joined"
            else:
                why = f"finished {g.n(p.seq)}, past {g.n(ref)}"
            odd.append(OddRank(rank, Relation.AHEAD, p.seq, p.row.op, st, why))
        elif ref_op and ops.get(rank) and ops[rank] != ref_op:
            odd.append(OddRank(rank, Relation.OTHER_OP, ref, ops[rank], st, f"is at {ops[rank]} {g.n(ref)} instead"))
        elif check_sizes and (r := sizes.get(rank)) is not None:
            if ref_in is not None and r.input_sizes and r.input_sizes != ref_in:
                why = f"has input sizes {_sizes(r.input_sizes)} at {g.n(ref)}, not {_sizes(ref_in)}"
                odd.append(OddRank(rank, Relation.OTHER_SIZES, ref, ref_op, st, why))
            elif ref_dt is not None and r.input_dtypes and r.input_dtypes != ref_dt:
                why = f"has dtypes {', '.join(r.input_dtypes)} at {g.n(ref)}, not {', '.join(ref_dt)}"
                odd.append(OddRank(rank, Relation.OTHER_SIZES, ref, ref_op, st, why))
    return odd, ref_op


def _sizes(sizes: tuple[tuple[int, ...], ...]) -> str:
    return "[" + ", ".join("[" + ", ".join(map(str, s)) + "]" for s in sizes) + "]"


def _absent(g: _Group, rows: list[CollectiveRow], reporters: set[int], infer: bool = True) -> Verdict | None:
    present = {r.rank for r in rows if r.state not in ABSENT_STATES and r.rank is not None}
    odd: dict[int, OddRank] = {}
    # a rank reported dead is named so before one merely reported missing
    for r in sorted(rows, key=lambda r: r.state != "dead"):
        if r.state in ABSENT_STATES and r.rank is not None and r.rank not in present and r.rank not in odd:
            relation = Relation.DEAD if r.state == "dead" else Relation.MISSING
            odd[r.rank] = OddRank(r.rank, relation, None, None, r.state,
                                  f"is {r.state}" + (f": {r.reason}" if r.reason else ""))
    silent = [m for m in g.members if m not in present and m not in odd and m not in reporters]
    # Only a member with no evidence of this source at all: a Flight Recorder ring buffer holds the last
    # N entries, so a dump without entries of a quiet group says nothing about that group.
    if infer and g.listed and g.source in SELF_REPORTING and silent and present <= set(g.members) \
            and len(present) >= 2 and 2 * len(present) > len(g.members):
        for m in silent:
            odd[m] = OddRank(m, Relation.MISSING, None, None, None, f"is missing: {SELF_REPORTING[g.source]}")
    if not odd:
        return None
    said = _clauses(sorted(odd.values(), key=lambda o: o.rank))
    # Flight Recorder entries are dated when enqueued; other sources' times are when the failure was seen
    since = _waiting_since(rows, present) if g.source == "flight_recorder" else None
    if since is not None:
        said += f"; the others wait since {since:%H:%M:%S.%f}"[:-3] + " (their earliest pending collective)"
    return g.verdict(VerdictKind.ABSENT, "", sorted(odd.values(), key=lambda o: o.rank), None, None,
                     sorted(present), since, said)


def _waiting_since(rows: list[CollectiveRow], present: set[int]) -> datetime | None:
    """When the reporting ranks entered the collective they wait in (its earliest record's time): from then
    on the group waited for the absent member.  None when no reporter waits or no time is recorded."""
    by_rank: dict[int, list[CollectiveRow]] = defaultdict(list)
    for r in rows:
        if r.rank in present and not r.p2p:
            by_rank[r.rank].append(r)
    times = [pos.row.ts for rs in by_rank.values()
             if (pos := rank_position(rs)) is not None and pos.pending and pos.row.ts is not None]
    return min(times, default=None)
