"""NCCL RAS reports: the text the ``ncclras`` client prints (NCCL 2.24+, ``src/ras/client_support.cc``).

Layout (shared/reference/collective-formats.md, prior-art.md A3)::

    NCCL version 2.29.3 compiled with CUDA 13.0
    CUDA runtime version 13000, driver version 13000

    Job summary
    ===========

      Nodes  Processes         GPUs  Processes     GPUs
    (total)   per node  per process    (total)  (total)
          1          4            1          4        4

    Communicators... (2.03s)
    =============

    Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
        #  in group  per comm  per node  per comm  in group
        0         1         1         4         4         4   RUNNING  MISMATCH

    Errors
    ======

    DEAD
      1 job process is considered dead (unreachable via the RAS network)
      Process 3208490 on node 10.15.83.92 managing GPU 5

    #0-0 (cf264af53edbe986) INCOMPLETE
      Missing communicator data from 1 rank
      The missing rank: 5

    Warnings
    ========

    #0-0 (e67acb20fcda67a5) MISMATCH
      Communicator ranks have different AllReduce operation counts
      3 ranks have launched up to operation 1589905
      Rank 3 has launched up to operation 1589904 -- GPU 3 managed by process 3208488 on node 10.15.83.92

2.24/2.25 compare one total count (``… different collective operation counts``), 2.26+ each
collective type.  NCCL names a rank individually only when its count is an outlier; the others
are a count of ranks.  A rank here is the rank within the communicator (``#<group>-<index>``
with its hash), which is the global rank only for a communicator spanning the whole job.

Every input line is consumed or reported unmatched (offsets into ``lines``), as the stack
parsers do; recognised lines of unknown meaning inside a block are kept unmatched too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .collective_rows import CollectiveRow, parse_rank_list

SOURCE = "nccl_ras"
JOB_PG = "(job)"            # the 'pg' of a process NCCL reports dead or missing from the whole job

VERSION_RE = re.compile(r"^NCCL version (?P<nccl>\S+)(?: compiled with CUDA (?P<cuda>\S+))?\s*$")
CUDA_RE = re.compile(r"^CUDA runtime version (?P<runtime>\d+), driver version (?P<driver>\d+)\s*$")
UNDERLINE_RE = re.compile(r"^=+\s*$")
JOB_TITLE_RE = re.compile(r"^Job summary\s*$")
COMMS_TITLE_RE = re.compile(r"^Communicators\.\.\.(?: \((?P<secs>[\d.]+)s\))?\s*$")
SECTION_RE = re.compile(r"^(?P<name>Errors|Warnings)\s*$")
JOB_HEAD_RE = re.compile(r"^\s*Nodes\s+Processes\s+GPUs\s+Processes\s+GPUs\s*$"
                         r"|^\(total\)\s+per node\s+per process")
JOB_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")
COMMS_HEAD_RE = re.compile(r"^Group\s+Comms\s+Nodes\s+Ranks|^\s*#\s+in group\s+per comm")
COMMS_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+"
                          r"(?P<status>[A-Z_]+)\s+(?P<errors>\S.*?)\s*$")
COMM_BLOCK_RE = re.compile(r"^#(?P<group>\d+)-(?P<index>\d+) \((?P<hash>[0-9a-fA-F]+)\) (?P<flags>\S.*?)\s*$")
PLAIN_BLOCK_RE = re.compile(r"^(?P<title>[A-Z][A-Z_ -]*[A-Z])\s*$")
# Lines inside a block (two-space indented).
DIFF_COUNTS_RE = re.compile(r"^Communicator ranks have different (?P<op>\S+) operation counts$")
DIFF_OTHER_RE = re.compile(r"^Communicator ranks have different (?P<what>.+)$")
GROUP_COUNT_RE = re.compile(r"^(?P<n>\d+) ranks? ha(?:ve|s) (?:launched up to operation (?P<count>\d+)"
                            r"|not launched any operations)$")
RANK_COUNT_RE = re.compile(r"^Rank (?P<rank>\d+) has (?:launched up to operation (?P<count>\d+)"
                           r"|not launched any operations)(?: -- (?P<where>.*))?$")
# 'Rank 5 -- GPU 2 managed by process 77120 on node 10.20.4.12': one of the ranks the line above counts
# (NCCL lists them one by one when the group is an outlier of more than one rank)
RANK_LISTED_RE = re.compile(r"^Rank (?P<rank>\d+) -- (?P<where>.*)$")
GROUP_STATUS_RE = re.compile(r"^(?P<n>\d+) ranks? (?:ha(?:ve|s) status|reported) (?P<what>.+)$")
MISSING_FROM_RE = re.compile(r"^Missing communicator data from (?P<n>\d+) "
                             r"(?P<what>ranks?|job process(?:es)?)$")
MISSING_RANKS_RE = re.compile(r"^The missing ranks?: (?P<ranks>.+)$")
PROCESS_RE = re.compile(r"^Process (?P<pid>\d+) on node (?P<node>\S+) managing GPUs? (?P<gpus>[\d, -]+)$")
# "1 job process is considered dead (unreachable via the RAS network)": the processes follow
PROCESS_COUNT_RE = re.compile(r"^(?:.* )?(?P<n>\d+) job process(?:es)?\b.*$")
RANK_OTHER_RE = re.compile(r"^Rank (?P<rank>\d+) (?P<what>.+?)(?: -- (?P<where>.*))?$")
GROUP_OTHER_RE = re.compile(r"^(?P<n>\d+) ranks? ha(?:ve|s) (?P<what>.+)$")
WHERE_RE = re.compile(r"GPU (?P<gpu>\d+) managed by process (?P<pid>\d+) on node (?P<node>\S+)")


@dataclass(frozen=True, slots=True)
class RasJob:
    nodes: int
    processes_per_node: int
    gpus_per_process: int
    processes: int
    gpus: int
    line: int


@dataclass(frozen=True, slots=True)
class RasCommGroup:
    """A row of the communicators table: communicators of the same shape are one group."""

    group: int
    comms: int
    nodes_per_comm: int
    ranks_per_node: int
    ranks_per_comm: int
    ranks_in_group: int
    status: str                         # INIT | RUNNING | FINALIZE | ABORT
    errors: tuple[str, ...]             # ('OK',) or flags: MISMATCH, INCOMPLETE, ERROR
    line: int


@dataclass(frozen=True, slots=True)
class RasProcess:
    pid: int
    node: str
    gpus: tuple[int, ...]
    line: int


@dataclass(frozen=True, slots=True)
class RasCount:
    """'3 ranks have launched up to operation 1589905' (ranks unnamed) or 'Rank 3 has …' (named)."""

    op: str                             # 'ALL' (2.24/2.25 total) or the collective type (AllReduce)
    count: int
    n_ranks: int
    ranks: tuple[int, ...]              # the named rank(s), () for an unnamed group
    where: str | None                   # 'GPU 3 managed by process 3208488 on node 10.15.83.92'
    line: int


@dataclass(frozen=True, slots=True)
class RasIssue:
    """One block of the Errors or Warnings section."""

    section: str                        # errors | warnings
    title: str                          # DEAD, TIMEOUT, … or the flags of a communicator block
    comm_hash: str | None
    group: int | None
    comm_index: int | None
    messages: tuple[str, ...]           # every line of the block, stripped
    processes: tuple[RasProcess, ...]
    counts: tuple[RasCount, ...]
    missing_ranks: tuple[int, ...]
    line: int


@dataclass(frozen=True, slots=True)
class RasOddRank:
    rank: int | None                    # None: a process NCCL names by host and pid only
    comm_hash: str | None
    relation: str                       # lagging | ahead | missing | dead | unresponsive | status | error
    reason: str
    op: str | None = None
    count: int | None = None
    node: str | None = None
    pid: int | None = None
    gpu: int | None = None
    line: int | None = None


@dataclass(frozen=True, slots=True)
class RasReport:
    nccl_version: str | None
    cuda_version: str | None            # the CUDA NCCL was compiled with
    cuda_runtime: int | None
    cuda_driver: int | None
    jobs: tuple[RasJob, ...]
    comm_groups: tuple[RasCommGroup, ...]
    issues: tuple[RasIssue, ...]
    odd_ranks: tuple[RasOddRank, ...]
    rows: tuple[CollectiveRow, ...]
    consumed: frozenset[int]            # offsets into the given lines
    unmatched: tuple[int, ...]

    @property
    def healthy(self) -> bool:
        """Every communicator OK and nothing under Errors / Warnings."""
        return not self.issues and all(g.errors == ("OK",) for g in self.comm_groups)


_MARKERS = (VERSION_RE, JOB_TITLE_RE, COMMS_TITLE_RE, COMMS_HEAD_RE, COMM_BLOCK_RE)


def looks_like_nccl_ras(lines: list[str]) -> bool:
    """The ``ncclras`` client's text: two of its landmarks (version line, section titles, the
    communicators table header, a ``#0-0 (hash) FLAGS`` block) in the first 80 lines."""
    found = set()
    for text in lines[:80]:
        t = text.rstrip("\r\n")
        for i, rx in enumerate(_MARKERS):
            if rx.match(t):
                found.add(i)
    return len(found) >= 2


def _gpus(text: str) -> tuple[int, ...]:
    return parse_rank_list(text) or ()


class _Block:
    def __init__(self, section: str, title: str, line: int, m: re.Match[str] | None) -> None:
        self.section, self.title, self.line = section, title, line
        self.comm_hash = m.group("hash").lower() if m else None
        self.group = int(m.group("group")) if m else None
        self.index = int(m.group("index")) if m else None
        self.messages: list[str] = []
        self.processes: list[RasProcess] = []
        self.counts: list[RasCount] = []
        self.missing: list[int] = []
        self.rank_facts: list[tuple[int, str, str | None, int]] = []   # rank, what, where, line
        self.subject: str | None = None          # 'collective' / 'AllReduce' counts, 'status', …
        self.listing: str | None = None          # what a following 'Rank N -- …' line belongs to
        self.listed_where: dict[int, str] = {}   # rank -> 'GPU g managed by process p on node h'

    def issue(self) -> RasIssue:
        return RasIssue(self.section, self.title, self.comm_hash, self.group, self.index,
                        tuple(self.messages), tuple(self.processes), tuple(self.counts), tuple(self.missing),
                        self.line)


def _block_line(b: _Block, t: str, n: int) -> bool:
    """Read one stripped line of a block into it; False when its meaning is unknown."""
    b.messages.append(t)
    if m := DIFF_COUNTS_RE.match(t):
        b.subject = "ALL" if m.group("op").lower() == "collective" else m.group("op")
    elif m := DIFF_OTHER_RE.match(t):
        b.subject = m.group("what")
    elif m := GROUP_COUNT_RE.match(t):
        b.counts.append(RasCount(b.subject or "ALL", int(m.group("count") or 0), int(m.group("n")), (), None, n))
        b.listing = "count"
    elif m := RANK_COUNT_RE.match(t):
        b.counts.append(RasCount(b.subject or "ALL", int(m.group("count") or 0), 1, (int(m.group("rank")),),
                                 m.group("where"), n))
        b.listing = None
    elif m := RANK_LISTED_RE.match(t):
        return _listed_rank(b, int(m.group("rank")), m.group("where"), n)
    elif m := MISSING_FROM_RE.match(t):
        b.listing = "missing" if m.group("what").startswith("rank") else None   # the ranks follow
    elif PROCESS_COUNT_RE.match(t):
        pass                                    # the count; the processes follow
    elif m := GROUP_STATUS_RE.match(t):
        b.listing = "status " + m.group("what")         # '2 ranks have status INIT': the ranks may follow
    elif m := MISSING_RANKS_RE.match(t):
        b.missing.extend(parse_rank_list(m.group("ranks")) or ())
    elif m := PROCESS_RE.match(t):
        b.processes.append(RasProcess(int(m.group("pid")), m.group("node"), _gpus(m.group("gpus")), n))
    elif m := RANK_OTHER_RE.match(t):
        b.rank_facts.append((int(m.group("rank")), m.group("what"), m.group("where"), n))
    elif GROUP_OTHER_RE.match(t):
        pass                                    # '7 ranks have status RUNNING': the reference side
    else:
        return False
    return True


def _listed_rank(b: _Block, rank: int, where: str, n: int) -> bool:
    """A 'Rank N -- GPU g managed by process p on node h' line: a member of what the line above counted."""
    if b.listing == "count" and b.counts and len(b.counts[-1].ranks) < b.counts[-1].n_ranks:
        c = b.counts[-1]
        # the group's ranks, one per line: each is named (and the process that manages it known)
        b.counts[-1] = RasCount(c.op, c.count, c.n_ranks, (*c.ranks, rank), c.where, c.line)
        b.listed_where[rank] = where
    elif b.listing == "missing":
        b.missing.append(rank)
        b.listed_where[rank] = where
    elif b.listing and b.listing.startswith("status "):
        b.rank_facts.append((rank, b.listing.split(" ", 1)[1], where, n))
    else:
        return False
    return True


def parse_nccl_ras(lines: list[str], first_line: int = 1) -> RasReport:
    """Parse ``ncclras`` output; ``first_line`` is the file line number of ``lines[0]``.

    ``rows`` are for the ``collectives`` view (``pg`` = communicator hash, ``seq`` = operation
    count, ``op`` = collective type or 'ALL', ``state`` 'launched', or 'missing' / 'dead' with
    ``seq`` None); ``odd_ranks`` are the ranks NCCL singles out, with the reason.
    """
    version = cuda = None
    runtime = driver = None
    jobs: list[RasJob] = []
    groups: list[RasCommGroup] = []
    blocks: list[_Block] = []
    consumed: set[int] = set()
    unmatched: list[int] = []
    section = "header"
    block: _Block | None = None
    for i, raw in enumerate(lines):
        text = raw.rstrip("\r\n")
        t = text.strip()
        n = first_line + i
        ok = True
        if not t or UNDERLINE_RE.match(t):
            block = None if not t else block
        elif m := VERSION_RE.match(text):
            version, cuda = m.group("nccl"), m.group("cuda")
        elif m := CUDA_RE.match(text):
            runtime, driver = int(m.group("runtime")), int(m.group("driver"))
        elif JOB_TITLE_RE.match(text):
            section, block = "job", None
        elif COMMS_TITLE_RE.match(text):
            section, block = "comms", None
        elif m := SECTION_RE.match(text):
            section, block = m.group("name").lower(), None
        elif section == "job" and JOB_HEAD_RE.match(text):
            pass
        elif section == "job" and (m := JOB_ROW_RE.match(text)):
            jobs.append(RasJob(*(int(x) for x in m.groups()), line=n))
        elif section == "comms" and COMMS_HEAD_RE.match(text):
            pass
        elif section == "comms" and (m := COMMS_ROW_RE.match(text)):
            nums = [int(x) for x in m.groups()[:6]]
            flags = tuple(f for f in re.split(r"[\s,]+", m.group("errors")) if f)
            groups.append(RasCommGroup(*nums, status=m.group("status"), errors=flags, line=n))
        elif section in ("errors", "warnings") and (m := COMM_BLOCK_RE.match(text)):
            block = _Block(section, m.group("flags"), n, m)
            blocks.append(block)
        elif section in ("errors", "warnings") and not text.startswith(" ") and \
                (m := PLAIN_BLOCK_RE.match(text)):
            block = _Block(section, m.group("title"), n, None)
            blocks.append(block)
        elif block is not None and text.startswith(" "):
            ok = _block_line(block, t, n)
        else:
            ok = False
        (consumed.add if ok else unmatched.append)(i)
    issues = tuple(b.issue() for b in blocks)
    odd, rows = _derive(blocks, {g.group: g for g in groups}, jobs)
    return RasReport(version, cuda, runtime, driver, tuple(jobs), tuple(groups), issues, tuple(odd),
                     tuple(rows), frozenset(consumed), tuple(unmatched))


def _where(where: str | None) -> tuple[str | None, int | None, int | None]:
    m = WHERE_RE.search(where or "")
    return (m.group("node"), int(m.group("pid")), int(m.group("gpu"))) if m else (None, None, None)


def _process_rank(p: RasProcess, pid_rank: dict[int, set[int]], blocks: list[_Block], jobs: list[RasJob],
                  groups: dict[int, RasCommGroup]) -> tuple[int | None, str | None]:
    """The rank of a process NCCL names by host and pid only, and how it was found (None: not printed).

    Its pid on a rank's line elsewhere in the report; else the one rank a communicator misses when one
    process is gone (that process is why its data is missing); else, on a one-node job with one GPU per
    process whose communicator spans every GPU, its GPU index.
    """
    ranks = pid_rank.get(p.pid, set())
    if len(ranks) == 1:
        return next(iter(ranks)), None
    gone = [q for b in blocks if not b.comm_hash for q in b.processes]
    dead = [q for b in blocks if not b.comm_hash and "DEAD" in b.title.upper() for q in b.processes]
    missing = {r for b in blocks if b.comm_hash for r in b.missing}
    if len(dead or gone) == 1 and (dead or gone)[0] is p and len(missing) == 1:
        return next(iter(missing)), "the one rank a communicator misses"
    job = jobs[0] if len(jobs) == 1 else None
    if job and job.nodes == 1 and job.gpus_per_process == 1 and len(p.gpus) == 1 and \
            any(g.ranks_per_comm == job.gpus for g in groups.values()):
        return p.gpus[0], "one node, one GPU per process: its GPU index"
    return None, None


def _derive(blocks: list[_Block], groups: dict[int, RasCommGroup],
            jobs: list[RasJob]) -> tuple[list[RasOddRank], list[CollectiveRow]]:
    odd: list[RasOddRank] = []
    rows: list[CollectiveRow] = []
    pid_rank: dict[int, set[int]] = {}             # a dead process is named by pid: map it back to a rank
    for b in blocks:
        for c in b.counts:
            _, pid, _ = _where(c.where)
            if pid is not None and c.ranks:
                pid_rank.setdefault(pid, set()).update(c.ranks)
        for rank, where in [(r, w) for r, _, w, _ in b.rank_facts] + list(b.listed_where.items()):
            _, pid, _ = _where(where)
            if pid is not None:
                pid_rank.setdefault(pid, set()).add(rank)
    for b in blocks:
        g = groups.get(b.group) if b.group is not None else None
        members = tuple(range(g.ranks_per_comm)) if g and b.comm_hash else None   # ranks of one communicator
        where = f"#{b.group}-{b.index} {b.title}" if b.comm_hash else b.title
        by_op: dict[str, list[RasCount]] = {}
        for c in b.counts:
            by_op.setdefault(c.op, []).append(c)
        for op, counts in by_op.items():
            o, r = _counts(b, op, counts, members, where)
            odd.extend(o)
            rows.extend(r)
        for rank in b.missing:
            odd.append(RasOddRank(rank, b.comm_hash, "missing", f"NCCL RAS has no data from it ({where})",
                                  line=b.line))
            if b.comm_hash:
                rows.append(CollectiveRow(SOURCE, rank, b.comm_hash, None, "ALL", "missing",
                                          pg_desc=where.split()[0], pg_ranks=members, seq_kind="all",
                                          reason=f"NCCL RAS: missing communicator data ({where})",
                                          line=b.line))
        relation = "dead" if "DEAD" in b.title.upper() else \
            "unresponsive" if b.title.upper() in ("UNRESPONSIVE", "TIMEOUT") else "missing"
        for p in b.processes:
            rank, how = _process_rank(p, pid_rank, blocks, jobs, groups)
            gpus = ",".join(map(str, p.gpus))
            why = f"process {p.pid} on node {p.node} (GPU {gpus}): {b.title.lower()}" + (f" ({how})" if how else "")
            odd.append(RasOddRank(rank, b.comm_hash, relation, why, node=p.node, pid=p.pid,
                                  gpu=p.gpus[0] if len(p.gpus) == 1 else None, line=p.line))
            if rank is not None and not b.comm_hash:
                job = tuple(range(jobs[0].gpus)) if jobs else None
                rows.append(CollectiveRow(SOURCE, rank, JOB_PG, None, "ALL", relation, pg_desc="job processes",
                                          pg_ranks=job, seq_kind="all", reason=f"NCCL RAS: {why}", line=p.line))
        for rank, what, wh, n in b.rank_facts:
            node, pid, gpu = _where(wh)
            subject = (b.subject or "").lower()
            rel = "status" if "status" in subject or what.startswith("has status") else "error"
            odd.append(RasOddRank(rank, b.comm_hash, rel, f"rank {rank} {what}", node=node, pid=pid, gpu=gpu,
                                  line=n))
    return odd, rows


def _counts(b: _Block, op: str, counts: list[RasCount], members: tuple[int, ...] | None,
            where: str) -> tuple[list[RasOddRank], list[CollectiveRow]]:
    """One op's counts in one block: the count most ranks share is the reference; named ranks away
    from it are lagging / ahead; the unnamed majority gets rows only when its ranks follow from the
    communicator's size (``inferred``)."""
    odd: list[RasOddRank] = []
    rows: list[CollectiveRow] = []
    per_count: dict[int, int] = {}
    for c in counts:
        per_count[c.count] = per_count.get(c.count, 0) + c.n_ranks
    ranked = sorted(per_count.items(), key=lambda kv: -kv[1])
    ref = ranked[0][0] if ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]) else None
    seq_kind = "all" if op == "ALL" else op
    noun = "operation" if op == "ALL" else f"{op} operation"
    named = {r for c in counts for r in c.ranks}
    if members is None and b.comm_hash and not b.missing:
        # no communicators table (a cut paste): every responding rank is counted once, so the counts
        # add up to the communicator's size and its ranks are 0 .. size-1
        members = tuple(range(sum(c.n_ranks for c in counts)))
    for c in counts:
        for rank in c.ranks:
            node, pid, gpu = _where(b.listed_where.get(rank, c.where))
            if ref is not None and c.count != ref:
                rel = "lagging" if c.count < ref else "ahead"
                gap = abs(ref - c.count)
                why = (f"launched up to {noun} {c.count}, {'behind' if rel == 'lagging' else 'ahead of'} the "
                       f"{per_count[ref]} ranks at {ref} by {gap}")
                odd.append(RasOddRank(rank, b.comm_hash, rel, why, op, c.count, node, pid, gpu, c.line))
            if b.comm_hash:
                rows.append(CollectiveRow(SOURCE, rank, b.comm_hash, c.count, op, "launched",
                                          pg_desc=where.split()[0], pg_ranks=members, seq_kind=seq_kind,
                                          reason=c.where, line=c.line))
    unnamed = [c for c in counts if not c.ranks]
    if b.comm_hash and members is not None and len(unnamed) == 1:
        rest = [m for m in members if m not in named]
        if len(rest) == unnamed[0].n_ranks:
            c = unnamed[0]
            rows.extend(CollectiveRow(SOURCE, m, b.comm_hash, c.count, op, "launched",
                                      pg_desc=where.split()[0], pg_ranks=members, seq_kind=seq_kind,
                                      inferred=True, line=c.line) for m in rest)
    for c in unnamed:
        if ref is not None and c.count != ref:
            odd.append(RasOddRank(None, b.comm_hash, "lagging" if c.count < ref else "ahead",
                                  f"{c.n_ranks} unnamed ranks launched up to {noun} {c.count}, "
                                  f"the {per_count[ref]} ranks at {ref} ({where})", op, c.count, line=c.line))
    return odd, rows
