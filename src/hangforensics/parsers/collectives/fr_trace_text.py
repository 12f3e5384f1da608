"""The text torch's Flight Recorder analyzer prints (``python -m torch.distributed.flight_recorder.fr_trace DIR``,
``torchfrtrace``; pytorch ``torch/distributed/flight_recorder/components/{builder,utils,types}.py``), pasted
as text.

What it prints, and what each becomes (collective records of source ``fr_trace``)::

    Not all ranks joining collective, sequence number: 4019      (2.4-2.5: '... collective 5 at entry 4',
    internal record id: 20                                         an internal build: '...: sequence number: N')
    group info: 1:tp:0                                            <pg name>:<desc>, or the name alone
    collective: nccl:all_reduce
    missing ranks: {5}                                            ranks whose dump holds no entry #4019
    input sizes: [[273, 8192]]
    output sizes: [[273, 8192]]
    world size: 8
    expected ranks: {0, 1, 2, 3, 4, 5, 6, 7}                      (2.4: the count only)
    collective state: started
    collective stack trace:
     all_reduce at /…/torch/distributed/distributed_c10d.py:2806  the first rank's frames

    Collective sequence number: 4018 has errors                   ('Collective 39 at entry 38 errors')
    …
    error msg: Culprit rank 1; Error type: COLLECTIVE_STATE_MISMATCH, Expected state: 'completed' does not
      match found state: 'started'                                (one line; clauses joined by ', ')

A block is about one collective of one group, compared against the entry of the *first* rank fr_trace
happened to read (it never says which rank that was).  So:

* the ranks a block lists as expected, minus the missing ones, stand at #N in that op and state (the first
  rank's); a ``missing`` rank has a dump without #N: a row in state ``missing`` (seq None), which the
  matcher names absent unless other rows of the text put that rank somewhere in the group;
* in an ``errors`` block each culprit gets what its clause says it has (another op, other sizes or
  dtypes, another state) and the other members the first rank's entry; fr_trace's "culprit" is only
  "differs from the first rank": whether the culprits or the first rank are the odd ones out is the
  matcher's majority to decide (a state difference alone makes nobody odd).  When the error message is
  cut (a clause without its values), the other members are not assumed to match the first rank;
* "We cannot decide … missed FR dumps from ranks ({3})": those ranks left no dump: they get no row in
  the groups the blocks show, so the matcher treats them as the binary dumps' silent members; with no
  block at all they are absent from ``(fr_trace dumps)``;
* ``-j`` (``--just_print_entries``) prints the ranks' entries side by side (tabulate): with ``-v`` every
  cell names its sequence number, group, sizes and creation time, and is a row like a dump entry's;
  without ``-v`` a cell holds only the op, sizes and state, so rows are numbered by the table's row
  (``seq_kind`` ``entry``, group ``(fr_trace -j)``), and not compared at all when the table holds
  send/recv (their order differs between ranks);
* ``-v`` adds the Groups, Memberships, Collectives and NCCLCalls tables (or, without tabulate, their
  Python reprs): groups and members name the hashed group ids (``<name><hash of its ranks>``) back;
  every Collectives row is the collective on each expected rank (its mismatch entries for the ranks
  that differed); NCCLCalls repeat the Collectives rows rank by rank;
* the ``Match`` / ``MISMATCH`` tables of a coalesced group (columns of unnamed ranks) and the
  ``--print_stack_trace`` table say nothing a row can hold: their lines are returned unmatched.

Ops are spelled as the binary dumps' rows spell them (the profiling name without ``nccl:``), groups by
their name (``1``), with the description apart (``tp:0``).  The analyzer's own chatter ("loaded 4 files",
"built collectives, nccl_calls", table titles) is read as such; lines of no known shape are returned
unmatched.  Nothing here evaluates the text (fr_trace itself runs ``eval`` on rank lists).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from .collective_rows import CollectiveRow, parse_rank_list, ts_from_ns

SOURCE = "fr_trace"
NO_DUMP_PG = "(fr_trace dumps)"         # ranks fr_trace misses dumps from, when no block names their group
TABLE_PG = "(fr_trace -j)"              # a '-j' table without '-v': entries by row, every group together
P2P = frozenset({"send", "recv"})
MAX_RANKS = 1 << 20                     # a group size beyond any job's: not believed
_SETS = r"(?P<ranks>\{[\d,\s]*\}|set\(\)|\[[\d,\s]*\])"

LOGGER_PREFIX = re.compile(r"^(?:(?:INFO|DEBUG|WARNING|ERROR|CRITICAL):Flight Recorder:)")
NOT_JOINED_RE = re.compile(r"^Not all ranks joining collective(?:[,:]\s*sequence number:\s*(?P<seq>\d+)"
                           r"|\s+(?P<seq2>\d+) at entry (?P<rec>\d+))\s*$")
# torch 2.4's first analyzer: one print() line (its sizes, world size and state on the same line)
OLDEST_RE = re.compile(r"^Not all ranks joining collective for group (?P<group>\S+) collective (?P<op>\S+)\s+"
                       r"Missing ranks are " + _SETS + r"(?:\s+(?P<rest>.*?))?\s*$")
OLDEST_REST_RE = re.compile(r"^(?P<ins>\[.*?\])\s+(?P<outs>\[.*?\])\s+(?P<n>\d+)\s+(?P<state>\w+)$")
ERRORS_RE = re.compile(r"^Collective(?: sequence number:)? (?P<seq>\d+)(?: at entry (?P<rec>\d+))?"
                       r"(?: has)? errors\s*$")
IO_RE = re.compile(r"^Input/output mismatch in the collective(?: sequence number:)? (?P<seq>\d+)"
                   r"(?: at entry (?P<rec>\d+))?\s*$")
FIELD_RE = re.compile(r"^(?P<key>internal record id|group info|collective|missing ranks|total input numel|"
                      r"total output numel|input sizes|output sizes|world size|expected ranks|collective state|"
                      r"error msg|error message|collective stack traces?):\s?(?P<value>.*?)\s*$", re.I)
FRAME_RE = re.compile(r"^\s*(?P<name>\S.*?) at (?P<file>\S.*?):(?P<line>-?\d+)\s*$")
CANNOT_DECIDE_RE = re.compile(r"^We cannot decide what's wrong with this collective entry because we missed FR "
                              r"dumps from ranks \((?P<ranks>.*?)\) so we don't have enough information")
NO_ERRORS_RE = re.compile(r"^No errors found for this collective entry, There could be some other reasons why "
                          r"we see collective timeout\.?\s*$")
TOO_MANY_RE = re.compile(r"^Too many mismatches for process_group (?P<pg>\S+): (?P<desc>.*?) aborting\s*$")
RANK_NOTE_RE = re.compile(r"^Rank (?P<rank>\d+) (?:has an empty op list|does not have a coalesced end)\.\s*$")
CHATTER_RE = re.compile(r"^(?:tabulate is not installed\. Proceeding without it\.|loaded \d+ files in [\d.e-]+s"
                        r"|built groups, memberships|built collectives, nccl_calls|appending a non-matching "
                        r"collective|Non-matching collective inside coalesced group|Groups|Memberships|Collectives"
                        r"|NCCLCalls|Match|MISMATCH)\s*$")
DASHES_RE = re.compile(r"^\s*-+(?: {2}-+)*\s*$")
CLAUSE_SPLIT_RE = re.compile(r",\s*(?=Culprit rank \d+;)")
CLAUSE_RE = re.compile(r"^Culprit rank (?P<rank>\d+); Error type: (?P<type>[A-Z_]+)(?:, (?P<detail>.*))?$")
FOUND_TYPE_RE = re.compile(r"found collective type: '(?P<v>[^']+)'$")
FOUND_SIZES_RE = re.compile(r"^Expected (?:input|output) sizes: '.*?' does not match found "
                            r"(?P<which>input|output) sizes: '(?P<v>\[.*\])'$")
FOUND_STATE_RE = re.compile(r"found state: '(?P<v>\w+)'$")
FOUND_DTYPES_RE = re.compile(r"^Expected dtypes: '(?P<e>.*?)' does not match found dtype: '(?P<v>.*)'$")
NUMEL_RE = re.compile(r"^Found input numel '.*' does not match output numel '.*'$")
# an Op as str(Op) prints it: 'all_reduce(input_sizes=[[4]], state=completed)', with -v every field
OP_RE = re.compile(r"^(?P<type>\w+)\((?P<body>.*)\)$")
OP_FIELD_RE = re.compile(r"(?:^|, )(?:(?P<p2p>s=(?P<s>-?\d+|None) d=(?P<d>-?\d+|None))|(?P<key>[a-z_]+(?: \| "
                         r"p2p_seq_id)?)=(?P<val>\[\[.*?\]\]|\[.*?\]|[^,]*))")
# -v reprs without tabulate (and the cells of the Collectives table)
COLLECTIVE_REPR_RE = re.compile(r"(?:(?P<culprit>\d+): )?Collective\(id=(?P<id>\d+), group_id='(?P<group>[^']*)'")
GROUP_REPR_RE = re.compile(r"Group\(id='(?P<id>[^']*)', desc='(?P<desc>[^']*)', size=(?P<size>\d+)\)")
MEMBER_REPR_RE = re.compile(r"Membership\(group_id='(?P<id>[^']*)', global_rank=(?P<rank>\d+)\)")
NCCLCALL_REPR_RE = re.compile(r"^\[?NCCLCall\(id=\d+, ")
TABLE_HEADS = {
    "groups": ("id", "desc", "size"),
    "memberships": ("group_id", "global_rank"),
    "collectives": ("id", "group_id", "pass_check", "collective_seq_id"),
    "ncclcalls": ("id", "collective_id", "group_id", "global_rank"),
}
RANK_HEAD_RE = re.compile(r"^Rank \d+$")


@dataclass
class FrBlock:
    """One collective fr_trace reports on."""

    kind: str                                   # not_joined | errors | io_mismatch
    seq: int | None
    line: int
    record_id: int | None = None
    pg: str | None = None
    desc: str | None = None
    op: str | None = None
    missing: tuple[int, ...] = ()
    expected: tuple[int, ...] | None = None
    expected_count: int | None = None
    state: str | None = None
    input_sizes: tuple[tuple[int, ...], ...] = ()
    output_sizes: tuple[tuple[int, ...], ...] = ()
    culprits: list[Culprit] = field(default_factory=list)
    errors_line: int | None = None
    errors_complete: bool = False               # every clause of the error message read whole
    frames: list[str] = field(default_factory=list)
    total_numel: tuple[int | None, int | None] = (None, None)

    @property
    def members(self) -> tuple[int, ...] | None:
        if self.expected is not None:
            return self.expected
        if self.expected_count and self.desc == "default_pg" and self.expected_count <= MAX_RANKS:
            return tuple(range(self.expected_count))          # the world: ranks 0 .. n-1
        return None


@dataclass(frozen=True, slots=True)
class Culprit:
    rank: int
    error: str                                  # COLLECTIVE_TYPE_MISMATCH, SIZE_OR_SYNTAX_MISMATCH, …
    detail: str
    op: str | None = None
    state: str | None = None
    input_sizes: tuple[tuple[int, ...], ...] | None = None
    output_sizes: tuple[tuple[int, ...], ...] | None = None
    input_dtypes: tuple[str, ...] | None = None
    expected_dtypes: tuple[str, ...] | None = None      # the first rank's, as the dtype clause says them


@dataclass(frozen=True, slots=True)
class FrTraceReport:
    blocks: tuple[FrBlock, ...]
    rows: tuple[CollectiveRow, ...]
    no_dump: tuple[int, ...]                    # ranks fr_trace says it has no dump from
    notes: tuple[str, ...]                      # 'Too many mismatches …', 'Rank 3 has an empty op list.'
    consumed: frozenset[int]                    # offsets into the given lines
    unmatched: tuple[int, ...]


# -- detection ----------------------------------------------------------------------------------------


def _clean(text: str) -> str:
    return LOGGER_PREFIX.sub("", text.rstrip("\r\n"))


# What every head ``looks_like_fr_trace`` takes contains: its header, field-block and "cannot decide" lines
# all say "collective" (or "Collective"), and a table's line of dashes is as wide as its first column's head
# ("id", "group_id", "Rank 0"): two substring tests rule out most files (the planner sniffs every file: the
# line-by-line test of 400 lines cost some 0.6 ms a file).
_FR_TRACE_MARKS = ("ollective", "--")


def looks_like_fr_trace(lines: list[str]) -> bool:
    """fr_trace's output: a block header with one of its field lines, its "cannot decide" line, a ``-j``
    table (``Rank N`` columns over dashes with an op in a cell) or a ``-v`` Collectives table / repr."""
    text = "\n".join(lines[:400])
    if not any(m in text for m in _FR_TRACE_MARKS):
        return False
    head = [_clean(s) for s in lines[:400]]
    headers = fields = 0
    for i, t in enumerate(head):
        s = t.strip()
        if OLDEST_RE.match(s):                  # torch 2.4's one line says it all
            return True
        if NOT_JOINED_RE.match(s) or ERRORS_RE.match(s) or IO_RE.match(s):
            headers += 1
        elif (m := FIELD_RE.match(s)) and m.group("key").lower() in ("group info", "expected ranks",
                                                                      "collective state", "missing ranks"):
            fields += 1
        elif CANNOT_DECIDE_RE.match(s) or s.startswith("[Collective(id="):
            return True
        elif i + 2 < len(head) and DASHES_RE.match(head[i + 1]) and _table_kind(t.split()) is not None:
            cells = _split_row(head[i + 2], _spans(head[i + 1]))
            if _table_kind(t.split()) == "entries" and any(_op(c) for c in cells if c):
                return True
            if _table_kind(t.split()) == "collectives":
                return True
        if headers and fields >= 2:
            return True
    return False


# -- small readers --------------------------------------------------------------------------------------


def _ints(text: str) -> tuple[int, ...]:
    return parse_rank_list(text) or () if text.strip() not in ("set()", "None", "") else ()


def _sizes(text: str) -> tuple[tuple[int, ...], ...] | None:
    """'[[273, 8192], [4]]' -> ((273, 8192), (4,)); None unless the text is a list of int lists."""
    t = text.strip()
    if not (t.startswith("[") and t.endswith("]")):
        return None
    inner = t[1:-1].strip()
    if not inner:
        return ()
    parts = re.findall(r"\[([^\[\]]*)\]", inner)
    if not parts and inner:
        return None
    out = []
    for p in parts:
        nums = [x.strip() for x in p.split(",") if x.strip()]
        if not all(re.fullmatch(r"-?\d+", x) for x in nums):
            return None
        out.append(tuple(int(x) for x in nums))
    return tuple(out)


def _dtypes(text: str) -> tuple[str, ...]:
    return tuple(sorted(set(re.findall(r"'([^']*)'", text))))


def _bare(op: str) -> str:
    """'nccl:all_reduce' -> 'all_reduce' (the dump rows' spelling); 'nccl:send 0->1' -> 'send'."""
    name = op.split(":", 1)[1] if ":" in op else op
    return name.split(" ", 1)[0]


def _group(text: str) -> tuple[str, str | None]:
    """'1:tp:0' -> ('1', 'tp:0'); '3' (desc 'undefined' is not printed) -> ('3', None)."""
    pg, _, desc = text.strip().partition(":")
    return pg, (desc or None)


def _culprit(clause: str) -> Culprit | None:
    m = CLAUSE_RE.match(clause.strip())
    if not m:
        return None
    rank, err, detail = int(m.group("rank")), m.group("type"), (m.group("detail") or "").strip()
    detail = detail.removeprefix("Detail finding").strip()        # torch 2.5: 'Error type: X, Detail finding …'
    if err == "COLLECTIVE_TYPE_MISMATCH" and (v := FOUND_TYPE_RE.search(detail)):
        return Culprit(rank, err, detail, op=_bare(v.group("v")))
    if err == "COLLECTIVE_STATE_MISMATCH" and (v := FOUND_STATE_RE.search(detail)):
        return Culprit(rank, err, detail, state=v.group("v"))
    if err == "COLLECTIVE_DTYPE_MISMATCH" and (v := FOUND_DTYPES_RE.match(detail)):
        # found: '<first rank's output dtypes>/<its input dtypes>/<its output dtypes>'
        parts = v.group("v").split("/")
        return Culprit(rank, err, detail, input_dtypes=_dtypes(parts[1] if len(parts) == 3 else parts[0]),
                       expected_dtypes=_dtypes(v.group("e")))
    if err == "SIZE_OR_SYNTAX_MISMATCH" and (v := FOUND_SIZES_RE.match(detail)):
        sizes = _sizes(v.group("v"))
        if sizes is None:
            return None
        return Culprit(rank, err, detail, **{f"{v.group('which')}_sizes": sizes})
    if err == "SIZE_OR_SYNTAX_MISMATCH" and (NUMEL_RE.match(detail) or not detail):
        return Culprit(rank, err, detail)         # all_gather / reduce_scatter numel, or all_to_all totals
    if err in ("UNDECIDED", "FULLY_MATCHED"):
        return Culprit(rank, err, detail)
    return None                                    # a clause cut short: its values are not all there


def _error_clauses(block: FrBlock, msg: str) -> None:
    clauses = [c for c in CLAUSE_SPLIT_RE.split(msg.strip()) if c.strip()]
    read = [_culprit(c) for c in clauses]
    block.culprits = [c for c in read if c is not None]
    block.errors_complete = bool(clauses) and all(c is not None for c in read)
    if not block.errors_complete:                 # keep what the cut clause names: its rank is a culprit
        for c, r in zip(clauses, read, strict=True):
            if r is None and (m := re.match(r"^\s*Culprit rank (\d+)", c)):
                block.culprits.append(Culprit(int(m.group(1)), "CUT", c.strip()))


def _field(block: FrBlock, key: str, value: str) -> bool:
    key = key.lower()
    if key == "internal record id":
        block.record_id = int(value) if value.isdigit() else None
    elif key == "group info":
        block.pg, block.desc = _group(value)
    elif key == "collective":
        block.op = _bare(value) if value else None
    elif key == "missing ranks":
        block.missing = _ints(value)
    elif key in ("input sizes", "output sizes"):
        sizes = _sizes(value)
        if sizes is None:
            return False
        setattr(block, key.replace(" ", "_"), sizes)
    elif key == "world size":
        if value.isdigit() and block.expected_count is None:
            block.expected_count = int(value)
    elif key == "expected ranks":
        if value.isdigit():                        # 2.4/2.5: the count
            block.expected_count = int(value)
        else:
            block.expected = _ints(value)
            block.expected_count = len(block.expected)
    elif key == "collective state":
        block.state = value or None
    elif key in ("error msg", "error message"):
        _error_clauses(block, value)
    elif key in ("total input numel", "total output numel"):
        n = int(value) if value.isdigit() else None
        block.total_numel = (n, block.total_numel[1]) if "input" in key else (block.total_numel[0], n)
    return True


# -- tables (tabulate's 'simple' format) -------------------------------------------------------------------


def _spans(dashes: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]


def _split_row(line: str, spans: list[tuple[int, int]]) -> list[str]:
    """Cells of a row by the header's dash runs (a cell may run up to the next column's start)."""
    cells = []
    for i, (a, _) in enumerate(spans):
        b = spans[i + 1][0] if i + 1 < len(spans) else len(line)
        cells.append(line[a:b].strip())
    return cells


def _table_kind(heads: list[str]) -> str | None:
    if not heads:
        return None
    joined = " ".join(heads)
    if re.fullmatch(r"Rank \d+(?: Rank \d+)*", joined):
        return "entries"
    for kind, cols in TABLE_HEADS.items():
        if tuple(heads[:len(cols)]) == cols:
            return kind
    return None


def _op(cell: str) -> dict | None:
    """An Op's str(): its type and fields, or None."""
    m = OP_RE.match(cell.strip())
    if not m:
        return None
    out: dict = {"type": m.group("type")}
    body = m.group("body")
    pos = 0
    for f in OP_FIELD_RE.finditer(body):
        if f.start() != pos:
            return None
        pos = f.end()
        if f.group("p2p"):
            out["s"], out["d"] = f.group("s"), f.group("d")
        else:
            out[f.group("key").split(" ")[0]] = f.group("val").strip()
    if pos != len(body) or "state" not in out:
        return None
    return out


# -- the parser -----------------------------------------------------------------------------------------


@dataclass
class _Facts:
    blocks: list[FrBlock] = field(default_factory=list)
    cells: list[tuple[int, dict, int, int]] = field(default_factory=list)      # rank, op, row index, line
    tables: list[tuple[list[int], bool]] = field(default_factory=list)          # (lines, has p2p) per -j table
    table_of: dict[int, int] = field(default_factory=dict)                      # cell line -> table number
    collectives: list[dict] = field(default_factory=list)
    groups: dict[str, tuple[str, int]] = field(default_factory=dict)            # hashed id -> (desc, size)
    members: dict[str, set[int]] = field(default_factory=dict)                  # hashed id -> ranks
    no_dump: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def parse_fr_trace(lines: list[str], first_line: int = 1) -> FrTraceReport:
    """Read fr_trace's text; ``first_line`` is the file line number of ``lines[0]``."""
    facts = _Facts()
    consumed: set[int] = set()
    unmatched: list[int] = []
    block: FrBlock | None = None
    in_frames = False
    i = 0
    n_lines = len(lines)
    while i < n_lines:
        text = _clean(lines[i])
        t = text.strip()
        n = first_line + i
        ok = True
        if not t:
            in_frames = False
        elif in_frames and block is not None and (m := FRAME_RE.match(text)):
            block.frames.append(f"{m.group('name')} at {m.group('file')}:{m.group('line')}")
        elif in_frames and block is not None and t.startswith("[{") and t.endswith("]"):
            block.frames.append(t)                  # torch 2.4's frames as a list repr
        elif m := NOT_JOINED_RE.match(t):
            block = FrBlock("not_joined", int(m.group("seq") or m.group("seq2")), n,
                            record_id=int(m.group("rec")) if m.group("rec") else None)
            facts.blocks.append(block)
            in_frames = False
        elif m := ERRORS_RE.match(t):
            block = FrBlock("errors", int(m.group("seq")), n, record_id=int(m.group("rec")) if m.group("rec") else None)
            facts.blocks.append(block)
            in_frames = False
        elif m := IO_RE.match(t):
            block = FrBlock("io_mismatch", int(m.group("seq")), n,
                            record_id=int(m.group("rec")) if m.group("rec") else None)
            facts.blocks.append(block)
            in_frames = False
        elif m := OLDEST_RE.match(t):
            pg, desc = _group(m.group("group"))
            block = FrBlock("not_joined", None, n, pg=pg, desc=desc, op=_bare(m.group("op")),
                            missing=_ints(m.group("ranks")))
            if (rest := OLDEST_REST_RE.match(m.group("rest") or "")) is not None:
                block.input_sizes = _sizes(rest.group("ins")) or ()
                block.output_sizes = _sizes(rest.group("outs")) or ()
                block.expected_count, block.state = int(rest.group("n")), rest.group("state")
            facts.blocks.append(block)
            in_frames = False
        elif block is not None and (m := FIELD_RE.match(t)):
            key = m.group("key").lower()
            if key.startswith("collective stack trace"):
                in_frames = True
                if m.group("value"):
                    block.frames.append(m.group("value"))
            else:
                in_frames = False
                ok = _field(block, key, m.group("value"))
                if key in ("error msg", "error message"):
                    block.errors_line = n
        elif m := CANNOT_DECIDE_RE.match(t):
            facts.no_dump.update(_ints(m.group("ranks")))
            block, in_frames = None, False
        elif NO_ERRORS_RE.match(t) or CHATTER_RE.match(t):
            block, in_frames = None, False
        elif m := (TOO_MANY_RE.match(t) or RANK_NOTE_RE.match(t)):
            facts.notes.append(t)
            block, in_frames = None, False
        elif i + 1 < n_lines and DASHES_RE.match(_clean(lines[i + 1])) and \
                (kind := _table_kind(text.split())) is not None:
            used = _table(kind, lines, i, first_line, facts)
            block, in_frames = None, False
            if used:
                consumed.update(range(i, i + used))
                i += used
                continue
            ok = False
        elif t.startswith(("[Group(", "[Membership(", "[Collective(")) or NCCLCALL_REPR_RE.match(t):
            _reprs(t, n, facts)
            block, in_frames = None, False
        else:
            ok = False
            block, in_frames = None, False
        (consumed.add if ok else unmatched.append)(i)
        i += 1
    rows = _rows(facts)
    return FrTraceReport(tuple(facts.blocks), tuple(rows), tuple(sorted(facts.no_dump)), tuple(facts.notes),
                         frozenset(consumed), tuple(unmatched))


def _table(kind: str, lines: list[str], start: int, first_line: int, facts: _Facts) -> int:
    """Read one table from its header at ``start``; returns how many lines it spans (header and dashes
    included).  A row of another shape ends it."""
    head = _clean(lines[start])
    spans = _spans(_clean(lines[start + 1]))
    names = _split_row(head, spans)
    if kind == "entries" and not all(RANK_HEAD_RE.match(nm) for nm in names):
        return 0                                 # the header's columns do not sit over the dashes
    k = start + 2
    table_lines: list[int] = []
    p2p = False
    row_index = 0
    while k < len(lines):
        text = _clean(lines[k])
        if not text.strip() or DASHES_RE.match(text):
            break
        cells = _split_row(text, spans)
        n = first_line + k
        if kind == "entries":
            ops = [(_op(c) if c else {}) for c in cells]
            if any(o is None for o in ops) or not any(ops):
                break
            row_index += 1
            for name, o in zip(names, ops, strict=True):
                if o:
                    rank = int(name.split()[1])
                    facts.cells.append((rank, o, row_index, n))
                    facts.table_of[n] = len(facts.tables)
                    p2p = p2p or o["type"] in P2P
        elif kind == "groups":
            if len(cells) < 3 or not cells[2].isdigit():
                break
            facts.groups[cells[0]] = (cells[1], int(cells[2]))
        elif kind == "memberships":
            if len(cells) < 2 or not cells[1].isdigit():
                break
            facts.members.setdefault(cells[0], set()).add(int(cells[1]))
        elif kind == "collectives":
            if len(cells) < 4 or not cells[0].isdigit() or cells[2] not in ("True", "False"):
                break
            facts.collectives.append({**dict(zip(names, cells, strict=False)), "_line": n})
        elif kind == "ncclcalls" and (len(cells) < 4 or not cells[0].isdigit()):
            break
        table_lines.append(n)
        k += 1
    if kind == "entries":
        facts.tables.append((table_lines, p2p))
    return k - start


def _reprs(text: str, n: int, facts: _Facts) -> None:
    """The -v tables printed without tabulate: one line of namedtuple reprs each."""
    for m in GROUP_REPR_RE.finditer(text):
        facts.groups[m.group("id")] = (m.group("desc"), int(m.group("size")))
    for m in MEMBER_REPR_RE.finditer(text):
        facts.members.setdefault(m.group("id"), set()).add(int(m.group("rank")))
    if not text.startswith("[Collective("):
        return
    starts = [m for m in COLLECTIVE_REPR_RE.finditer(text) if not m.group("culprit")]
    for j, m in enumerate(starts):
        chunk = text[m.start(): starts[j + 1].start() if j + 1 < len(starts) else len(text)]
        facts.collectives.append({**_repr_fields(chunk), "_line": n})


def _repr_fields(chunk: str) -> dict:
    """The Collectives table's columns from one Collective repr (its mismatch_collectives kept whole)."""
    out: dict = {}
    for key in ("group_id", "pg_desc", "collective_name", "collective_state"):
        if m := re.search(rf"\b{key}='([^']*)'", chunk):
            out[key] = m.group(1)
    for key in ("pass_check",):
        if m := re.search(rf"\b{key}=(True|False)", chunk):
            out[key] = m.group(1)
    for key in ("collective_seq_id", "p2p_seq_id"):
        if m := re.search(rf"\b{key}=(\d+)", chunk):
            out[key] = m.group(1)
    for key in ("input_sizes", "output_sizes"):
        if m := re.search(rf"\b{key}=(\[\[.*?\]\]|\[\])", chunk):
            out[key] = m.group(1)
    if m := re.search(r"\bexpected_ranks=(\{[\d,\s]*\}|set\(\))", chunk):
        out["expected_ranks"] = m.group(1)
    if m := re.search(r"\bmissing_ranks=(\{[\d,\s]*\}|set\(\)|None)", chunk):
        out["missing_ranks"] = m.group(1)
    if m := re.search(r"\bmismatch_collectives=(\{.*)", chunk):
        out["mismatch_collectives"] = m.group(1)
    return out


# -- from the facts to collective records -------------------------------------------------------------------


class _Rows:
    """Rows keyed like the view: one per (rank, pg, seq_kind, seq, op); a repeated fact adds a record."""

    def __init__(self) -> None:
        self.rows: dict[tuple, CollectiveRow] = {}

    def add(self, r: CollectiveRow) -> None:
        key = (r.rank, r.pg, r.seq_kind, r.seq, r.op)
        old = self.rows.get(key)
        if old is None:
            self.rows[key] = r
            return
        self.rows[key] = replace(
            old, records=old.records + 1, state=old.state or r.state, ts=old.ts or r.ts,
            input_sizes=old.input_sizes or r.input_sizes, output_sizes=old.output_sizes or r.output_sizes,
            input_dtypes=old.input_dtypes or r.input_dtypes, output_dtypes=old.output_dtypes or r.output_dtypes,
            pg_ranks=old.pg_ranks or r.pg_ranks, pg_desc=old.pg_desc or r.pg_desc)


def _unhash(guid: str, facts: _Facts, size: int | None = None, desc: str | None = None) -> str:
    """fr_trace names a group ``<name><hash(frozenset(ranks))>`` in its -v output: the name back, where its
    ranks are known (its Memberships, a block's expected ranks of the same description, or 0 .. size-1)."""
    candidates: list[Iterable[int]] = []
    if guid in facts.members:
        candidates.append(facts.members[guid])
    candidates += [b.members for b in facts.blocks if b.members and (desc is None or b.desc == desc)]
    if size and size <= MAX_RANKS:
        candidates.append(range(size))
    for ranks in candidates:
        suffix = str(hash(frozenset(ranks)))
        if guid.endswith(suffix) and len(guid) > len(suffix):
            return guid[: -len(suffix)]
    return guid


def _rows(facts: _Facts) -> list[CollectiveRow]:
    out = _Rows()
    covered: set[int] = set()
    for b in facts.blocks:
        covered.update(_block_rows(b, facts.no_dump, out))
    for c in facts.collectives:
        _collective_rows(c, facts, out)
    _cell_rows(facts, out)
    left = sorted(facts.no_dump - covered)
    for rank in left:                            # no block names their group: still a fact about the rank
        out.add(CollectiveRow(SOURCE, rank, NO_DUMP_PG, None, "", "missing", pg_desc="the Flight Recorder dumps",
                              reason="fr_trace: no Flight Recorder dump from it ('we missed FR dumps from ranks')"))
    return sorted(out.rows.values(), key=lambda r: (r.pg, r.seq_kind, r.seq or -1, r.rank or -1))


def _block_rows(b: FrBlock, no_dump: set[int], out: _Rows) -> set[int]:
    """A block's rows; returns the members of its group (the ranks it covers)."""
    if b.pg is None:
        return set()
    members = b.members
    op = b.op or ""
    base = {"pg_desc": b.desc, "pg_ranks": members, "input_sizes": b.input_sizes, "output_sizes": b.output_sizes}
    where = f"#{b.seq} ({op})" if b.seq is not None else f"the collective ({op})"
    for r in b.missing:
        out.add(CollectiveRow(SOURCE, r, b.pg, None, "", "missing", pg_desc=b.desc, pg_ranks=members,
                              reason=f"fr_trace: not joining collective {where}: its dump holds no such entry",
                              line=b.line))
    if b.seq is None or members is None:
        return set(members or ())
    culprits = {c.rank: c for c in b.culprits}
    ref_dtypes = next((c.expected_dtypes for c in b.culprits if c.expected_dtypes), ())
    reference = [r for r in members if r not in b.missing and r not in culprits and r not in no_dump]
    if b.kind == "errors" and not b.errors_complete:
        # the message is cut: every member with a dump holds an entry #N (else fr_trace reports it missing),
        # but which of them match the first rank's is in the part that was cut
        for r in reference:
            out.add(CollectiveRow(SOURCE, r, b.pg, b.seq, "", None, pg_desc=b.desc, pg_ranks=members,
                                  reason=f"fr_trace: in #{b.seq}; whether its entry matches the first rank's is in "
                                         f"the part of the error message that was cut", line=b.line))
        reference = []
    for r in reference:
        out.add(CollectiveRow(SOURCE, r, b.pg, b.seq, op, b.state, input_dtypes=ref_dtypes, line=b.line, **base))
    for r, c in culprits.items():
        if r in b.missing:
            continue
        # what the clause does not give is the first rank's where the checks before it passed (fr_trace
        # compares op, input sizes, output sizes, dtypes, state in that order), else unknown
        unsized = c.error == "SIZE_OR_SYNTAX_MISMATCH" and c.input_sizes is None and c.output_sizes is None
        if c.error == "CUT" or c.op is not None or unsized:
            ins: tuple = ()
            outs: tuple = ()
        elif c.output_sizes is not None:
            ins, outs = b.input_sizes, c.output_sizes
        elif c.input_sizes is not None:
            ins, outs = c.input_sizes, ()
        else:
            ins, outs = b.input_sizes, b.output_sizes
        why = "cut short in the paste" if c.error == "CUT" else c.error + (f", {c.detail}" if c.detail else "")
        out.add(CollectiveRow(
            SOURCE, r, b.pg, b.seq, c.op or op, c.state or b.state, pg_desc=b.desc, pg_ranks=members,
            input_sizes=ins, output_sizes=outs, input_dtypes=c.input_dtypes or (ref_dtypes if ins else ()),
            reason=f"fr_trace culprit (differs from the first rank's entry): {why}", line=b.errors_line or b.line))
    return set(members)


def _collective_rows(c: dict, facts: _Facts, out: _Rows) -> None:
    """A row of the Collectives table (or its repr): the collective on every expected rank."""
    seq = c.get("collective_seq_id", "")
    if not str(seq).isdigit() or not c.get("group_id"):
        return
    pg = c["group_id"]
    desc = c.get("pg_desc") or None
    if desc and desc.startswith(f"{pg}:"):
        desc = desc[len(pg) + 1:]
    elif desc == pg:
        desc = None
    expected = _ints(c.get("expected_ranks", "")) or None
    missing = set(_ints(c.get("missing_ranks", "") or ""))
    op = _bare(c.get("collective_name", ""))
    sizes_in, sizes_out = _sizes(c.get("input_sizes", "")) or (), _sizes(c.get("output_sizes", "")) or ()
    culprits: dict[int, dict] = {}
    mism = c.get("mismatch_collectives") or ""
    for m in COLLECTIVE_REPR_RE.finditer(mism):
        if m.group("culprit"):
            nxt = mism.find("Collective(id=", m.end())
            culprits[int(m.group("culprit"))] = _repr_fields(mism[m.start(): nxt if nxt > 0 else len(mism)])
    line = c.get("_line")
    kind = "p2p" if op in P2P else "collective"
    for r in missing:
        out.add(CollectiveRow(SOURCE, r, pg, None, "", "missing", pg_desc=desc, pg_ranks=expected,
                              reason=f"fr_trace: not joining collective #{seq} ({op})", line=line))
    for r in expected or ():
        if r in missing or r in facts.no_dump:
            continue
        x = culprits.get(r)
        out.add(CollectiveRow(
            SOURCE, r, pg, int(seq), _bare(x.get("collective_name", op)) if x else op,
            (x.get("collective_state") if x else None) or c.get("collective_state"), pg_desc=desc,
            pg_ranks=expected, seq_kind=kind,
            input_sizes=(_sizes(x.get("input_sizes", "")) or ()) if x else sizes_in,
            output_sizes=(_sizes(x.get("output_sizes", "")) or ()) if x else sizes_out,
            reason="fr_trace: differs from the first rank's entry" if x else None, line=line))


def _cell_rows(facts: _Facts, out: _Rows) -> None:
    for rank, o, row_index, line in facts.cells:
        typ = o["type"]
        state = o.get("state")
        sizes_in = _sizes(o.get("input_sizes", "")) or ()
        if "collective_seq_id" in o:             # -v: the entry's own number, group and time
            desc = o.get("pg_description") or None
            size = int(o["pg_size"]) if o.get("pg_size", "").isdigit() else None
            pg = _unhash(o.get("pg_name", "?"), facts, size, desc)
            seq = int(o["collective_seq_id"]) if o["collective_seq_id"].isdigit() else None
            ts = ts_from_ns(int(o["timestamp_created"])) if o.get("timestamp_created", "").isdigit() else None
            members = next((tuple(sorted(ms)) for g, ms in facts.members.items() if _unhash(g, facts) == pg), None)
            if members is None and size and size <= MAX_RANKS and desc == "default_pg":
                members = tuple(range(size))
            out.add(CollectiveRow(
                SOURCE, rank, pg, seq, typ, state, ts, pg_desc=None if desc == "undefined" else desc,
                pg_ranks=members, seq_kind="p2p" if typ in P2P else "collective", input_sizes=sizes_in,
                output_sizes=_sizes(o.get("output_sizes", "")) or (), input_dtypes=_dtypes(o.get("input_dtypes", "")),
                output_dtypes=_dtypes(o.get("output_dtypes", "")), line=line))
        else:                                    # without -v: only the row of the side-by-side table
            table = facts.table_of.get(line, 0)
            p2p = facts.tables[table][1] if table < len(facts.tables) else False
            ranks = tuple(sorted({r for r, _, _, ln in facts.cells if facts.table_of.get(ln, 0) == table}))
            out.add(CollectiveRow(
                SOURCE, rank, TABLE_PG, row_index, typ, state, pg_ranks=ranks, seq_kind="p2p" if p2p else "entry", input_sizes=sizes_in,
                reason="fr_trace -j: the table's row, not a sequence number", line=line))


__all__ = ["NO_DUMP_PG", "SOURCE", "TABLE_PG", "FrBlock", "FrTraceReport", "looks_like_fr_trace", "parse_fr_trace"]
