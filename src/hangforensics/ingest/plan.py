"""Planning an ingest against the ``sources`` manifest: skip, read, resume, rename, duplicate, vanished.

An unchanged file costs a stat; a file that grew is resumed from where the last ingest stopped; known
content under a new name (rotation, compression) keeps its rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..errors import InputError
from ..readers.envelopes import EnvelopeStack
from ..readers.kinds import ContentProbe, probe_content
from ..readers.layout import EvidenceFile
from ..readers.logfile import HEAD_BYTES, head_hash
from ..store import Store
from .bundles import is_snapshot_file
from .jobs import FileJob


@dataclass
class Plan:
    file: EvidenceFile
    action: str                  # skip, read, resume, rename, duplicate, unreadable
    kind: str
    st: os.stat_result
    head_hash: str
    compressed: bool
    prev: dict | None = None     # the manifest row this file continues or replaces
    duplicate_of: str | None = None
    hold_live_tail: bool = True  # False: take a last line without newline as final (one-shot report)
    envelope: EnvelopeStack | None = None   # the envelope sniffed from the file's head (None: not sniffed)
    last_dated: float | None = None     # the latest full date of the file's head and tail (sources.last_dated)
    year_near: float | None = None      # the engine's dated evidence its year-less lines are dated near

    def job(self) -> FileJob:
        resume = self.action in ("resume", "rename") and self.prev is not None
        live = self.kind == "server_log" and not self.compressed
        return FileJob(self.file.engine, self.file.abs_path, self.file.rel_path, self.kind,
                       (self.prev["read_bytes"] or 0) if resume else 0,
                       ((self.prev["lines"] or 0) + 1) if resume else 1, self.st.st_mtime,
                       end_offset=self.st.st_size if live else None,
                       hold_partial=live and self.hold_live_tail and is_live(self.st), envelope=self.envelope,
                       year_near=self.year_near)


# A log written to in the last LIVE_SECONDS may be mid-line: its unfinished last line is left for the
# next ingest.  An older file is final, and its last line is read even without a newline.
LIVE_SECONDS = 300.0


def is_live(st: os.stat_result) -> bool:
    return time.time() - st.st_mtime < LIVE_SECONDS


# Kinds whose identical content does not mean the same evidence (two captures that both failed alike; two
# ranks' Flight Recorder dumps, which name their rank only in the file name).
NO_IDENTITY = ("unknown", "capture_error", "binary", "flight_recorder")


# -- planning --------------------------------------------------------------------------------------
# Files whose content planning must look at (new, changed or grown): from this many on, with a pool's fork
# server running, their heads are read by the parser workers as well as here (``parallel.EarlyParse.probes``).
PARALLEL_PROBE_MIN = 64

Probes = Callable[[list[Path]], Iterator[ContentProbe]]


def plan_files(store: Store, files: list[EvidenceFile], vanish_engines: list[str],
               hold_live_tail: bool = True, on_work: Callable[[], None] | None = None,
               on_probe: Callable[[Plan], None] | None = None, probes: Probes | None = None) -> list[Plan]:
    """Decide per file: skip (unchanged), read, resume (grew), rename (known content under a new name,
    e.g. rotation or compression), duplicate (the same content is read elsewhere) or unreadable; and
    which manifest rows of ``vanish_engines`` vanished.  ``on_work`` is called once, at the first file
    that is new, changed or grew (before the rest is planned); ``on_probe`` with each file whose content
    is looked at, as the plan to read it would be (it is decided after all are probed).

    A file's stat decides an unchanged one; the others' content is probed (kind, envelope, head hash), in
    file order, by ``probes`` when there are PARALLEL_PROBE_MIN of them or more (``on_work`` is then called
    before: it starts the processes that help), else here one by one."""
    planner = _Planner(store, files, hold_live_tail)
    stated = [planner.by_stat(f) for f in files]
    unknown = [f.abs_path for f, st in zip(files, stated, strict=True) if not isinstance(st, Plan)]
    if probes is not None and len(unknown) >= PARALLEL_PROBE_MIN:
        if on_work is not None:
            on_work()
            on_work = None
        probed = probes(unknown)
    else:
        probed = map(probe_content, unknown)
    pending = []
    # each engine's latest full date so far; the files probed without one of their own, offered once
    # their engine's files are all probed (dated as ``date_engines`` will date them: an engine's files are
    # listed together)
    dated: dict[str, float] = {}
    for st in stated:
        if isinstance(st, Plan) and st.last_dated is not None:
            _later(dated, st.file.engine, st.last_dated)
    held: list[Plan] = []
    for f, st in zip(files, stated, strict=True):
        if held and held[0].file.engine != f.engine:
            _offer_held(held, dated, on_probe)
        if isinstance(st, Plan):
            planner.plans.append(st)
            continue
        content = next(probed)
        if content.dated is not None:
            _later(dated, f.engine, content.dated)
        probe = planner.plan_probed(f, st, content)
        if probe is not None:
            pending.append(probe)
        if on_work is not None and (probe is not None or planner.plans[-1].action in ("read", "resume")):
            on_work()                           # (no probe: plan_probed planned the file)
            on_work = None
        if on_probe is not None and probe is not None and probe.kind != "unreadable":
            read = probe.plan("read", None)
            read.hold_live_tail = hold_live_tail
            if read.last_dated is None:
                held.append(read)
            else:
                on_probe(read)
    _offer_held(held, dated, on_probe)
    # Files whose path is new (or whose content under the same path changed): is the content known?
    renamed = planner.claim_renames(pending)
    planner.plan_new(pending, renamed)
    planner.plan_vanished(vanish_engines)
    for p in planner.plans:
        p.hold_live_tail = hold_live_tail
    if date_engines(planner.plans) and on_work is not None:
        on_work()
    return planner.plans


# -- dating year-less lines by their engine --------------------------------------------------------
# Kinds that may hold lines printed without a year (torch's glog, vLLM's, torchrun's, a syslog envelope's)
YEARLESS_KINDS = frozenset({"server_log", "pyspy_dump", "gdb_dump", "faulthandler_dump", "native_trace",
                            "nccl_ras", "fr_trace"})
# A file read near one moment of its engine's dated evidence is read again when that moment moves by more
# than this: a year-less line's year can change only when it moves (and barely, within a month).
REDATE_S = 30 * 86400.0
_NOT_EVIDENCE = ("vanished", "forget", "unreadable")


def date_engines(plans: list[Plan]) -> bool:
    """Give each file the moment of its engine's dated evidence its year-less lines are dated near
    (interface.md §3 "Dates": the nearest dated evidence of the same engine, before the file's envelope and
    its modification time): its own latest full date (``last_dated``), else the latest of the engine's
    files.  An unchanged file with no date of its own, read near another moment (or near none), is read
    again; whether any is."""
    latest: dict[str, float] = {}
    for p in plans:
        if p.last_dated is not None and p.action not in _NOT_EVIDENCE:
            _later(latest, p.file.engine, p.last_dated)
    again = False
    for p in plans:
        if p.action in _NOT_EVIDENCE:
            continue
        p.year_near = p.last_dated if p.last_dated is not None else latest.get(p.file.engine)
        if p.action == "skip" and p.prev is not None and p.last_dated is None and p.kind in YEARLESS_KINDS \
                and not p.prev["status"].startswith("duplicate") and _moved(_epoch(p.prev.get("year_near")), p.year_near):
            p.action = "read"                   # its year-less lines were dated near another moment
            again = True
    return again


def _later(dated: dict[str, float], engine: str, ts: float) -> None:
    dated[engine] = max(dated.get(engine, ts), ts)


def _offer_held(held: list[Plan], dated: dict[str, float], on_probe: Callable[[Plan], None] | None) -> None:
    """Offer the files held back for their engine's date (``plan_files``), dated by it."""
    if on_probe is not None:
        for read in held:
            read.year_near = dated.get(read.file.engine)
            on_probe(read)
    held.clear()


def _moved(before: float | None, now: float | None) -> bool:
    if before is None or now is None:
        return before is not now
    return abs(now - before) > REDATE_S


def _epoch(ts: object) -> float | None:
    """A manifest TIMESTAMP (a naive datetime, local time as the probe read it) as epoch seconds."""
    return ts.timestamp() if isinstance(ts, datetime) else None


@dataclass
class _Probe:
    """A file whose content must be looked at: its kind, head hash and compression."""

    file: EvidenceFile
    st: os.stat_result
    kind: str
    hhash: str
    compressed: bool
    envelope: EnvelopeStack | None = None
    dated: float | None = None

    def plan(self, action: str, prev: dict | None, duplicate_of: str | None = None) -> Plan:
        return Plan(self.file, action, self.kind, self.st, self.hhash, self.compressed, prev, duplicate_of,
                    envelope=self.envelope, last_dated=self.dated, year_near=self.dated)


class _Planner:
    def __init__(self, store: Store, files: list[EvidenceFile], hold_live_tail: bool) -> None:
        self.store = store
        self.hold_live_tail = hold_live_tail
        self.rows = {r["abs_path"]: r for r in store.query(
            "SELECT * FROM sources WHERE status NOT LIKE 'duplicate%'")}
        # files recorded as copies of another (their rows hold no data)
        self.duplicates = {r["abs_path"]: r for r in store.query(
            "SELECT * FROM sources WHERE status LIKE 'duplicate%'")}
        self.current = {str(f.abs_path) for f in files}
        self.claimed: set[str] = set()          # abs_paths of manifest rows a current file continues
        self.plans: list[Plan] = []
        # the manifest rows by what their content is (engine, head hash, kind), in the manifest's order: a new
        # file's twin is looked up, not searched for among every row (a rescan of thousands of files)
        self.by_content: dict[tuple[str, str, str], list[dict]] = {}
        for r in self.rows.values():
            self.by_content.setdefault((r["engine"], r["head_hash"], r["kind"]), []).append(r)

    def by_stat(self, f: EvidenceFile) -> Plan | os.stat_result:
        """The plan of a file its stat decides (unchanged since the manifest row of its path), else its stat:
        its content must be probed (``plan_probed``)."""
        try:
            st = f.abs_path.stat()
        except OSError as e:
            raise InputError(f"cannot read {f.rel_path}: {e.strerror or e}") from e
        prev = self.rows.get(str(f.abs_path))
        dup = self.duplicates.get(str(f.abs_path)) if prev is None else None
        if dup is not None and _unchanged(dup, st) and self._original_here(dup):
            # a copy, unchanged, of a file still here: a copy still (read, its rows would count twice)
            return Plan(f, "skip", dup["kind"], st, dup["head_hash"], bool(dup["compressed"]), dup,
                        last_dated=_epoch(dup.get("last_dated")))
        if prev is not None and prev["status"] in ("ok", "vanished") and _unchanged(prev, st) \
                and not _tail_due(prev, st, self.hold_live_tail):
            # same size and mtime as when it was read: a stat is all an unchanged file costs
            self.claimed.add(prev["abs_path"])
            if prev["status"] == "vanished":       # back again: the manifest says so, nothing to read
                self.store.con.execute("UPDATE sources SET status = 'ok' WHERE source_id = ?", [prev["source_id"]])
            return Plan(f, "skip", prev["kind"], st, prev["head_hash"], bool(prev["compressed"]), prev,
                        last_dated=_epoch(prev.get("last_dated")))
        return st

    def plan_probed(self, f: EvidenceFile, st: os.stat_result, content: ContentProbe) -> _Probe | None:
        """Plan a file the manifest knows under its path, from its probed content; else return its probe for
        the later passes."""
        probe = _Probe(f, st, *content)
        prev = self.rows.get(str(f.abs_path))
        if prev is None or prev["kind"] != probe.kind or not _same_start(prev, probe):
            return probe
        self.claimed.add(prev["abs_path"])
        if prev["status"] == "partial":
            action = "resume"                                   # an interrupted read
        elif _unchanged(prev, st) and not _tail_due(prev, st, self.hold_live_tail):
            action = "skip"
        elif probe.kind == "server_log" and not probe.compressed and (
                st.st_size > (prev["bytes"] or 0) or _tail_due(prev, st, self.hold_live_tail)):
            action = "resume"
        else:
            action = "read"
        self.plans.append(probe.plan(action, prev))
        return None

    def _original_here(self, dup: dict) -> bool:
        """Whether the file a copy was recorded as a copy of is among the files planned now, with the head it had
        then (or not loaded yet: an ingest stopped before it loaded)."""
        root = dup["abs_path"][:len(dup["abs_path"]) - len(dup["path"])]
        original = root + dup["status"].removeprefix("duplicate of ")
        row = self.rows.get(original)
        return original in self.current and (row is None or row["head_hash"] == dup["head_hash"])

    def claim_renames(self, pending: list[_Probe]) -> dict[int, dict]:
        """Renames (rotation, compression) claim the manifest rows whose content they continue."""
        renamed: dict[int, dict] = {}
        for idx, pr in enumerate(pending):
            if pr.kind in NO_IDENTITY or pr.kind == "unreadable" or not pr.hhash:
                continue
            twin = next((r for r in self.by_content.get((pr.file.engine, pr.hhash, pr.kind), ())
                         if r["abs_path"] not in self.claimed
                         and (r["abs_path"] not in self.current or _changed_on_disk(r))), None)
            if twin is not None and not _snapshot(pr):
                self.claimed.add(twin["abs_path"])
                renamed[idx] = twin
        return renamed

    def plan_new(self, pending: list[_Probe], renamed: dict[int, dict]) -> None:
        """Everything else is read, unless the same content is being read under another name."""
        seen_hash: dict[tuple[str, str], str] = {}
        for idx, pr in enumerate(pending):
            # (a copy recorded before is its row: replaced, not left beside a new one)
            old = self.rows.get(str(pr.file.abs_path)) or self.duplicates.get(str(pr.file.abs_path))
            if old is not None and (old["abs_path"] in self.claimed and renamed.get(idx) is not old):
                old = None                 # its rows moved with a rename: nothing of this name to forget
            if idx in renamed:
                self.plans.append(pr.plan("rename", renamed[idx]))
                if old is not None and old is not renamed[idx]:
                    self.plans.append(pr.plan("forget", old))
                continue
            if pr.kind == "unreadable":
                self.plans.append(pr.plan("unreadable", old))
                continue
            key = (pr.file.engine, pr.hhash)
            same = next((r for r in self.by_content.get((pr.file.engine, pr.hhash, pr.kind), ())
                         if r["abs_path"] in self.current and r["abs_path"] not in self.claimed
                         and r["abs_path"] != str(pr.file.abs_path)), None)
            if pr.hhash and pr.kind not in NO_IDENTITY and (same is not None or key in seen_hash) and not _snapshot(pr):
                other = same["path"] if same is not None else seen_hash[key]
                self.plans.append(pr.plan("duplicate", old, duplicate_of=other))
                continue
            seen_hash[key] = pr.file.rel_path
            self.plans.append(pr.plan("read", old))

    def plan_vanished(self, vanish_engines: list[str]) -> None:
        for r in self.rows.values():
            if r["engine"] in vanish_engines and r["abs_path"] not in self.current \
                    and r["abs_path"] not in self.claimed and r["status"] != "vanished":
                ef = EvidenceFile(r["engine"], Path(r["abs_path"]), r["path"], r["rotation"] or 0, r["node"] or "")
                self.plans.append(Plan(ef, "vanished", r["kind"], os.stat_result((0,) * 10), r["head_hash"],
                                       bool(r["compressed"]), r))


def _snapshot(pr: _Probe) -> bool:
    # a capture round identical to the previous one is the stuck-rank evidence, not a copy of it
    return is_snapshot_file(pr.file.abs_path, pr.file.rel_path)


def _unchanged(prev: dict, st: os.stat_result) -> bool:
    return prev["bytes"] == st.st_size and abs((prev["mtime"] or 0) - st.st_mtime) < 1e-6


def _same_start(prev: dict, pr: _Probe) -> bool:
    """The file starts as the manifest row's content did (so it is that content, perhaps grown)."""
    if prev["head_hash"] == pr.hhash:
        return True
    # a small file that grew: what was read is a prefix of it (the stored hash covers only that)
    return bool(pr.hhash) and 0 < (prev["read_bytes"] or 0) < HEAD_BYTES \
        and head_hash(pr.file.abs_path, prev["read_bytes"]) == prev["head_hash"]


def _tail_due(prev: dict, st: os.stat_result, hold_live_tail: bool) -> bool:
    """An unfinished last line was left for later, and the file is now final (or the caller wants all)."""
    return (prev["kind"] == "server_log" and not prev["compressed"] and (prev["read_bytes"] or 0) < st.st_size
            and (not hold_live_tail or not is_live(st)))


def _changed_on_disk(row: dict) -> bool:
    """A manifest row whose file now holds other content (the live log after a rotation)."""
    try:
        return head_hash(Path(row["abs_path"])) != row["head_hash"]
    except (InputError, OSError, EOFError):
        return True
