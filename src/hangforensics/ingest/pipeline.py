"""Ingest: evidence files -> DuckDB tables, incrementally, one transaction per file.

The ``sources`` manifest makes re-ingest idempotent: an unchanged file costs a
stat and a head hash; a file that grew is read from where the last ingest
stopped; a file whose start changed is read again from scratch.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..parsers import faulthandler, gdb, gpu, native_trace, pyspy
from ..parsers.capture_errors import capture_error_reason
from ..parsers.stackrows import dump_rows, rank_from_place, ranks_from_pids
from ..readers.evidence import STACK_KINDS, EvidenceFile, Workspace, detect_kind
from ..readers.logfile import (
    HEAD_BYTES,
    RECORD_START,
    ReadNotes,
    detect_compose,
    head_hash,
    head_text,
    is_gzip,
    iter_chunks,
)
from ..store import LOADED_TABLES, Store, physical
from ..terminal_progress import ProgressBar
from .clock import align_engine_clocks


@dataclass
class IngestResult:
    root: Path
    engines: list[str] = field(default_factory=list)
    files_read: int = 0
    files_skipped: int = 0
    files_renamed: int = 0
    files_vanished: int = 0
    lines: int = 0
    unparsed: int = 0
    bytes: int = 0
    bytes_read: int = 0
    changed_engines: list[str] = field(default_factory=list)


@dataclass
class FileJob:
    """What to read of one file: a pure description a worker process can act on."""

    engine: str
    abs_path: Path
    rel_path: str
    kind: str
    start_offset: int = 0
    start_line: int = 1
    mtime: float = 0.0
    end_offset: int | None = None       # read up to here: the size planned (a file may grow meanwhile)
    hold_partial: bool = False          # a live log's unfinished last line waits for the next ingest


@dataclass
class FileOutcome:
    lines: int = 0
    unparsed: int = 0
    read_bytes: int = 0
    status: str = "ok"
    release: str | None = None
    notes: ReadNotes = field(default_factory=ReadNotes)


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

    def job(self) -> FileJob:
        resume = self.action in ("resume", "rename") and self.prev is not None
        live = self.kind == "server_log" and not self.compressed
        return FileJob(self.file.engine, self.file.abs_path, self.file.rel_path, self.kind,
                       (self.prev["read_bytes"] or 0) if resume else 0,
                       ((self.prev["lines"] or 0) + 1) if resume else 1, self.st.st_mtime,
                       end_offset=self.st.st_size if live else None,
                       hold_partial=live and self.hold_live_tail and is_live(self.st))


# A log written to in the last LIVE_SECONDS may be mid-line: its unfinished last line is left for the
# next ingest.  An older file is final, and its last line is read even without a newline.
LIVE_SECONDS = 300.0


def is_live(st: os.stat_result) -> bool:
    return time.time() - st.st_mtime < LIVE_SECONDS


def ingest_paths(store: Store, paths: list[Path], mode: str = "auto", progress: ProgressBar | None = None,
                 workspace: Workspace | None = None, jobs: int = 1, hold_live_tail: bool = True) -> list[IngestResult]:
    """Ingest each PATH (engine folder, fleet folder, single file or archive) into ``store``.

    ``hold_live_tail``: leave the unfinished last line of a log written to moments ago for the next
    ingest (incremental use); a one-shot report reads it as it is."""
    own = workspace is None
    ws = workspace or Workspace()
    try:
        results = []
        for p in paths:
            root, files = ws.resolve(Path(p), mode)
            results.append(ingest_files(store, root, files, progress, jobs=jobs, hold_live_tail=hold_live_tail))
        return results
    finally:
        if own:
            ws.close()


def ingest_files(store: Store, root: Path, files: list[EvidenceFile], progress: ProgressBar | None = None,
                 jobs: int = 1, vanish_engines: list[str] | None = None, hold_live_tail: bool = True) -> IngestResult:
    """Plan every file against the manifest, parse what changed (in ``jobs`` processes), load it.

    ``vanish_engines``: engines whose manifest rows missing from ``files`` are marked vanished (a scan
    of a whole fleet knows every file of its engines; a single-file ingest does not).
    """
    res = IngestResult(root=root)
    prog = progress or ProgressBar(enabled=False)
    for f in files:
        if f.engine not in res.engines:
            res.engines.append(f.engine)
    plans = plan_files(store, files, vanish_engines or [], hold_live_tail)
    res.files_vanished = sum(1 for p in plans if p.action == "vanished")
    work = [p for p in plans if p.action in ("read", "resume", "rename")]
    res.bytes = sum(p.st.st_size for p in plans if p.action != "vanished")
    prog.start("ingest", total_bytes=sum(p.st.st_size for p in work), total_items=len(work))
    changed: set[str] = {p.file.engine for p in plans if p.action in ("duplicate", "vanished", "unreadable")}
    for p in plans:
        if p.action == "skip":
            res.files_skipped += 1
        elif p.action in ("duplicate", "unreadable", "vanished"):
            _record_plan_only(store, p)
        elif p.action == "forget":                 # a renamed file's name held other, older content
            with store.transaction():
                _forget(store, p.prev)
                _bump(store, p.file.engine)
    _apply_renames(store, [p for p in plans if p.action == "rename"])
    big = sum(p.st.st_size for p in work if p.action != "rename") > PARALLEL_MIN_BYTES
    if jobs > 1 and big and (len(work) > 1 or _splittable(work[0])):
        outcomes = _parse_in_pool(store, work, jobs, prog)
    else:
        outcomes = (( p, _load_file(store, p, parse_file(p.job()))) for p in work)
    for p, outcome in outcomes:
        prog.item_done(p.st.st_size)
        changed.add(p.file.engine)
        res.files_read += 1
        res.files_renamed += p.action == "rename"
        res.lines += outcome.lines
        res.unparsed += outcome.unparsed
        res.bytes_read += max(outcome.read_bytes - (p.job().start_offset), 0)
    for engine in sorted(changed):
        ranks_from_pids(store, engine)
        align_engine_clocks(store, engine)
    res.changed_engines = sorted(changed)
    prog.finish(f"{res.files_read} files read, {res.files_skipped} unchanged, {res.lines} lines")
    return res


PARALLEL_MIN_BYTES = 64 * 1024 * 1024
# Kinds whose identical content does not mean the same evidence (two captures that both failed alike).
NO_IDENTITY = ("unknown", "capture_error", "binary")


# -- planning --------------------------------------------------------------------------------------
def plan_files(store: Store, files: list[EvidenceFile], vanish_engines: list[str],
               hold_live_tail: bool = True) -> list[Plan]:
    """Decide per file: skip (unchanged), read, resume (grew), rename (known content under a new name,
    e.g. rotation or compression), duplicate (the same content is read elsewhere) or unreadable; and
    which manifest rows of ``vanish_engines`` vanished."""
    plans: list[Plan] = []
    rows = {r["abs_path"]: r for r in store.query("SELECT * FROM sources WHERE status NOT LIKE 'duplicate%'")}
    current = {str(f.abs_path) for f in files}
    claimed: set[str] = set()          # abs_paths of manifest rows a current file continues
    pending: list[tuple[EvidenceFile, os.stat_result, str, str, bool]] = []
    for f in files:
        try:
            st = f.abs_path.stat()
        except OSError as e:
            raise InputError(f"cannot read {f.rel_path}: {e.strerror or e}") from e
        prev = rows.get(str(f.abs_path))
        if prev is not None and prev["status"] in ("ok", "vanished") and prev["bytes"] == st.st_size \
                and abs((prev["mtime"] or 0) - st.st_mtime) < 1e-6 and not _tail_due(prev, st, hold_live_tail):
            # same size and mtime as when it was read: a stat is all an unchanged file costs
            claimed.add(prev["abs_path"])
            if prev["status"] == "vanished":       # back again: the manifest says so, nothing to read
                store.con.execute("UPDATE sources SET status = 'ok' WHERE source_id = ?", [prev["source_id"]])
            plans.append(Plan(f, "skip", prev["kind"], st, prev["head_hash"], bool(prev["compressed"]), prev))
            continue
        kind = detect_kind(f.abs_path)
        try:
            hhash = head_hash(f.abs_path) if kind != "unreadable" else ""
            compressed = kind != "unreadable" and is_gzip(f.abs_path)
        except (InputError, OSError, EOFError):
            kind, hhash, compressed = "unreadable", "", False
        prev = rows.get(str(f.abs_path))
        same_start = prev is not None and prev["head_hash"] == hhash
        if prev is not None and not same_start and kind == prev["kind"] and hhash \
                and 0 < (prev["read_bytes"] or 0) < HEAD_BYTES:
            # a small file that grew: what was read is a prefix of it (the stored hash covers only that)
            same_start = head_hash(f.abs_path, prev["read_bytes"]) == prev["head_hash"]
        if prev is not None and same_start and prev["kind"] == kind:
            claimed.add(prev["abs_path"])
            unchanged = prev["bytes"] == st.st_size and abs((prev["mtime"] or 0) - st.st_mtime) < 1e-6
            if prev["status"] == "partial":
                plans.append(Plan(f, "resume", kind, st, hhash, compressed, prev))   # an interrupted read
            elif unchanged and not _tail_due(prev, st, hold_live_tail):
                plans.append(Plan(f, "skip", kind, st, hhash, compressed, prev))
            elif kind == "server_log" and not compressed and (st.st_size > (prev["bytes"] or 0)
                                                               or _tail_due(prev, st, hold_live_tail)):
                plans.append(Plan(f, "resume", kind, st, hhash, compressed, prev))
            else:
                plans.append(Plan(f, "read", kind, st, hhash, compressed, prev))
            continue
        pending.append((f, st, kind, hhash, compressed))
    # Files whose path is new (or whose content under the same path changed): is the content known?
    # Pass 1: renames (rotation, compression) claim the manifest rows they continue.
    renamed: dict[int, dict] = {}
    for idx, (f, _st, kind, hhash, _compressed) in enumerate(pending):
        if kind in NO_IDENTITY or kind == "unreadable" or not hhash:
            continue
        twin = next((r for r in rows.values() if r["engine"] == f.engine and r["head_hash"] == hhash
                     and r["kind"] == kind and r["abs_path"] not in claimed
                     and (r["abs_path"] not in current or _changed_on_disk(r))), None)
        if twin is not None:
            claimed.add(twin["abs_path"])
            renamed[idx] = twin
    # Pass 2: everything else is read, unless the same content is being read under another name.
    seen_hash: dict[tuple[str, str], str] = {}
    for idx, (f, st, kind, hhash, compressed) in enumerate(pending):
        old = rows.get(str(f.abs_path))
        if old is not None and (old["abs_path"] in claimed and renamed.get(idx) is not old):
            old = None                 # its rows moved with a rename: nothing of this name to forget
        if idx in renamed:
            plans.append(Plan(f, "rename", kind, st, hhash, compressed, renamed[idx]))
            if old is not None and old is not renamed[idx]:
                plans.append(Plan(f, "forget", kind, st, hhash, compressed, old))
            continue
        if kind == "unreadable":
            plans.append(Plan(f, "unreadable", kind, st, hhash, compressed, old))
            continue
        key = (f.engine, hhash)
        same = next((r for r in rows.values() if r["engine"] == f.engine and r["head_hash"] == hhash
                     and r["kind"] == kind and r["abs_path"] in current and r["abs_path"] not in claimed
                     and r["abs_path"] != str(f.abs_path)), None)
        if hhash and kind not in NO_IDENTITY and (same is not None or key in seen_hash):
            other = same["path"] if same is not None else seen_hash[key]
            plans.append(Plan(f, "duplicate", kind, st, hhash, compressed, old, duplicate_of=other))
            continue
        seen_hash[key] = f.rel_path
        plans.append(Plan(f, "read", kind, st, hhash, compressed, old))
    for r in rows.values():
        if r["engine"] in vanish_engines and r["abs_path"] not in current and r["abs_path"] not in claimed \
                and r["status"] != "vanished":
            ef = EvidenceFile(r["engine"], Path(r["abs_path"]), r["path"], r["rotation"] or 0, r["node"] or "")
            plans.append(Plan(ef, "vanished", r["kind"], os.stat_result((0,) * 10), r["head_hash"],
                              bool(r["compressed"]), r))
    for p in plans:
        p.hold_live_tail = hold_live_tail
    return plans


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


def _record_plan_only(store: Store, p: Plan) -> None:
    """Manifest-only outcomes: duplicates, unreadable files, vanished files (their data is kept)."""
    with store.transaction():
        if p.action == "vanished":
            store.con.execute("UPDATE sources SET status = 'vanished' WHERE source_id = ?", [p.prev["source_id"]])
        else:
            if p.prev is not None:
                _forget(store, p.prev)
            status = f"duplicate of {p.duplicate_of}" if p.action == "duplicate" else "error: cannot read"
            _record_source(store, p.file, p.kind, p.st, p.head_hash, p.compressed, 0, 0, 0, status=status,
                           note=_unreadable_reason(p.file.abs_path) if p.action == "unreadable" else None)
        _bump(store, p.file.engine)


def _unreadable_reason(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    return "cannot read"


def _bump(store: Store, engine: str) -> None:
    """The engine's data changed: its findings are stale until analyze runs (same transaction as the change)."""
    store.con.execute(
        "INSERT INTO engine_state VALUES (?, 1, 0) ON CONFLICT (engine) DO UPDATE SET "
        "data_version = engine_state.data_version + 1", [engine])


# -- parsing (pure: files in, row batches out) ------------------------------------------------------
def parse_file(job: FileJob) -> Iterator[tuple[str, Any]]:
    """Yield (table, rows) batches for one file; the generator's return value is a FileOutcome."""
    import polars as pl  # parsing needs polars; planning an unchanged fleet does not
    f = EvidenceFile(job.engine, Path(job.abs_path), job.rel_path, 0, "")
    out = FileOutcome()
    if job.kind == "server_log":
        for parsed in _parse_log(f, job.start_offset, job.start_line, out, job.end_offset, job.hold_partial):
            for table in LOADED_TABLES:
                rows = parsed.tables.get(table)
                if rows is not None and (rows.height if isinstance(rows, pl.DataFrame) else rows):
                    yield table, rows
            yield CHECKPOINT, FileOutcome(out.lines, out.unparsed, out.read_bytes)    # whole records so far
    elif job.kind in STACK_KINDS:
        yield from _parse_stacks(f, job.kind, job.mtime, out)
    elif job.kind == "capture_error":
        yield from _parse_capture_error(f, out)
    elif job.kind == "gpu_samples":
        yield from _parse_gpu(f, out)
    elif job.kind == "unknown":
        yield from _parse_unknown(f, out)
        out.notes.extra.append(f"no known evidence format (not an SGLang/vLLM/torch log, stack dump or "
                               f"nvidia-smi CSV): its {out.lines} line(s) are kept in unparsed")
    elif job.kind == "binary":
        out.notes.extra.append(f"binary content ({job.abs_path.stat().st_size} bytes): not read as text")
    elif job.kind == "empty":
        out.notes.extra.append("empty file")
    return out


CHECKPOINT = "__checkpoint__"


def _with_result(gen: Iterator[tuple[str, Any]], result: list) -> Iterator[tuple[str, Any]]:
    """Iterate a batch generator; its return value (the FileOutcome) is appended to ``result``."""
    result.append((yield from gen))
COMMIT_BYTES = 64 * 1024 * 1024


def _load_file(store: Store, p: Plan, batches: Iterator[tuple[str, Any]]) -> FileOutcome:
    """Load one file's batches with its manifest row.  A small file is one transaction; a large log is
    committed every ``COMMIT_BYTES`` at a record boundary with its manifest row marked ``partial``
    (a killed scan resumes there: memory stays bounded and nothing is read twice).  A file that
    fails to read is rolled back to its last commit and recorded, never sinking the whole ingest."""
    store.con.execute("BEGIN TRANSACTION")
    try:
        if p.action == "read" and p.prev is not None:
            _forget(store, p.prev)
        result: list[FileOutcome] = []
        committed_at = p.job().start_offset
        for table, rows in _with_result(batches, result):
            if table == CHECKPOINT:
                if rows.read_bytes - committed_at >= COMMIT_BYTES:
                    _finish_source(store, p, rows, status="partial")
                    store.con.execute("COMMIT")
                    store.con.execute("BEGIN TRANSACTION")
                    committed_at = rows.read_bytes
                continue
            _append(store, table, rows)
        outcome = result[0] or FileOutcome()
        _finish_source(store, p, outcome)
        _bump(store, p.file.engine)
        store.con.execute("COMMIT")
        return outcome
    except BaseException as e:
        store.rollback()
        if not isinstance(e, InputError):
            raise
        with store.transaction():
            row = store.query("SELECT * FROM sources WHERE abs_path = ?", [str(p.file.abs_path)])
            if row and row[0]["status"] == "partial":      # keep what was committed, say why it stopped
                store.con.execute("UPDATE sources SET status = ? WHERE source_id = ?",
                                  [f"error: {e}", row[0]["source_id"]])
            else:
                if p.prev is not None and p.action == "read":
                    _forget(store, p.prev)
                _record_source(store, p.file, "unreadable", p.st, p.head_hash, p.compressed, 0, 0, 0,
                               status=f"error: {e}")
            _bump(store, p.file.engine)
        return FileOutcome(status=f"error: {e}")


def _append(store: Store, table: str, rows: Any) -> None:
    if hasattr(rows, "to_arrow"):             # a polars DataFrame
        store.append(table, rows.to_arrow())
    else:
        store.append(table, rows)


def _finish_source(store: Store, p: Plan, outcome: FileOutcome, status: str | None = None) -> None:
    """Write the file's manifest row: counts so far (continuing the row it resumes), resume point, status."""
    prev = p.prev if p.action in ("resume", "rename") else None
    lines, unparsed = outcome.lines, outcome.unparsed
    if prev is not None:
        lines += prev["lines"] or 0
        unparsed += prev["unparsed_lines"] or 0
    sid = prev["source_id"] if prev else store.scalar("SELECT source_id FROM sources WHERE abs_path = ?",
                                                      [str(p.file.abs_path)])
    if sid is not None:
        store.con.execute("DELETE FROM sources WHERE source_id = ?", [sid])
    notes = outcome.notes.summary()
    if prev is not None and prev.get("note"):     # a resumed read: earlier notes stand, a held tail is done
        notes = [n for n in prev["note"].split("; ") if not n.startswith("last line unfinished")
                 and n not in notes] + notes
    _record_source(store, p.file, p.kind, p.st, p.head_hash, p.compressed, lines, unparsed,
                   max(outcome.read_bytes, prev["read_bytes"] or 0) if prev else outcome.read_bytes,
                   status=status or outcome.status, source_id=sid,
                   release_hint=outcome.release or (prev or {}).get("release_hint"), note="; ".join(notes) or None)


def _apply_renames(store: Store, renames: list[Plan]) -> None:
    """Known content under a new name (server.log -> server.log.1 -> server.log.2.gz): keep its rows and
    point them at the new name, so evidence file:line stays true.  Two phases (through a temporary
    name) because a rotation renames several files at once, each onto a name another one leaves."""
    if not renames:
        return
    with store.transaction():
        for phase in (0, 1):
            for p in renames:
                tmp = f"\x00renamed:{p.prev['source_id']}"
                src, dst = (p.prev["path"], tmp) if phase == 0 else (tmp, p.file.rel_path)
                for table in LOADED_TABLES:
                    if table == "frames":
                        continue
                    col = "file" if table == "http_requests" else "path"
                    store.con.execute(f"UPDATE {physical(table)} SET {col} = ? WHERE engine = ? AND {col} = ?",
                                      [dst, p.file.engine, src])
        for p in renames:
            store.con.execute(
                "UPDATE sources SET path = ?, abs_path = ?, rotation = ?, node = ?, compressed = ? WHERE source_id = ?",
                [p.file.rel_path, str(p.file.abs_path), p.file.rotation, p.file.node, p.compressed,
                 p.prev["source_id"]])
            p.prev = dict(p.prev, path=p.file.rel_path, abs_path=str(p.file.abs_path))
            _bump(store, p.file.engine)


SPLIT_MIN_BYTES = 128 * 1024 * 1024


def _splittable(p: Plan) -> bool:
    return p.kind == "server_log" and not p.compressed and p.st.st_size - p.job().start_offset >= SPLIT_MIN_BYTES


def split_job(job: FileJob, parts: int) -> list[FileJob]:
    """Cut a large uncompressed log into byte ranges that start at record starts, with the line number
    each range starts at (counting newlines is a memchr pass, far cheaper than parsing)."""
    size = job.end_offset if job.end_offset is not None else job.abs_path.stat().st_size
    step = max((size - job.start_offset) // parts, 1)
    bounds = [job.start_offset]
    with job.abs_path.open("rb") as f:
        for k in range(1, parts):
            f.seek(job.start_offset + k * step)
            window = f.read(4 * 1024 * 1024)
            m = RECORD_START.search(window)
            if m is None:
                continue
            cut = job.start_offset + k * step + m.start() + 1
            if cut > bounds[-1]:
                bounds.append(cut)
        bounds.append(size)
        jobs, line = [], job.start_line
        for a, b in zip(bounds, bounds[1:], strict=False):
            jobs.append(FileJob(job.engine, job.abs_path, job.rel_path, job.kind, a, line, job.mtime, b,
                                hold_partial=job.hold_partial and b == size))
            f.seek(a)
            remaining = b - a
            while remaining > 0:
                block = f.read(min(remaining, 16 * 1024 * 1024))
                if not block:
                    break
                line += block.count(b"\n")
                remaining -= len(block)
    return jobs


def _parse_in_pool(store: Store, work: list[Plan], jobs: int, prog: ProgressBar):
    """Parse files (and byte ranges of large logs) in worker processes, each spilling its row batches as
    Arrow IPC files; load them here in file order: DuckDB has one writer, and loading overlaps parsing."""
    tmp = Path(tempfile.mkdtemp(prefix="hangforensics-ingest-"))
    ctx = multiprocessing.get_context("spawn")     # polars' threads do not survive fork
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            submitted = []
            for i, p in enumerate(work):
                pieces = split_job(p.job(), jobs * 2) if _splittable(p) else [p.job()]
                submitted.append((p, [pool.submit(parse_to_ipc, j, str(tmp / f"f{i}-{k}"))
                                      for k, j in enumerate(pieces)]))
            # whole small files as they finish; the ranges of a split log in order
            pending = {futs[0]: (p, futs) for p, futs in submitted if len(futs) == 1}
            for fut in as_completed(pending):
                p, _ = pending[fut]
                manifest, outcome = fut.result()
                yield p, _load_file(store, p, _read_ipc(manifest, outcome))
            for p, futs in submitted:
                if len(futs) > 1:
                    yield p, _load_file(store, p, _read_ranges(futs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_ranges(futures: list) -> Iterator[tuple[str, Any]]:
    """The batches of a split log's ranges in file order, with checkpoints and totals made cumulative."""
    from ..parsers.sglang_log import newest_release

    done = FileOutcome()
    release = None
    for fut in futures:
        manifest, outcome = fut.result()
        result: list[FileOutcome] = []
        for table, rows in _with_result(_read_ipc(manifest, outcome), result):
            if table == CHECKPOINT:
                rows = FileOutcome(done.lines + rows.lines, done.unparsed + rows.unparsed, rows.read_bytes)
            yield table, rows
        last = result[0] or outcome
        notes = done.notes
        notes.merge(last.notes)
        done = FileOutcome(done.lines + last.lines, done.unparsed + last.unparsed, last.read_bytes, notes=notes)
        release = newest_release(release, last.release)
    done.release = release
    return done


def parse_to_ipc(job: FileJob, prefix: str) -> tuple[list[tuple[str, str]], FileOutcome]:
    """Worker: parse one file, spill each batch to an Arrow IPC file; errors travel back in the outcome."""
    import polars as pl

    manifest: list[tuple[str, str]] = []
    result: list[FileOutcome] = []
    try:
        for table, rows in _with_result(parse_file(job), result):
            if table == CHECKPOINT:
                manifest.append((table, json.dumps([rows.lines, rows.unparsed, rows.read_bytes])))
                continue
            df = rows if isinstance(rows, pl.DataFrame) else pl.DataFrame(rows, infer_schema_length=None)
            path = f"{prefix}-{len(manifest)}-{table}.arrow"
            df.write_ipc(path, compression="lz4")
            manifest.append((table, path))
    except InputError as e:
        return [], FileOutcome(status=f"error: {e}")
    return manifest, result[0] or FileOutcome()


def _read_ipc(manifest: list[tuple[str, str]], outcome: FileOutcome):
    if outcome.status.startswith("error:"):
        raise InputError(outcome.status[len("error: "):])
    for table, path in manifest:
        if table == CHECKPOINT:
            yield table, FileOutcome(*json.loads(path))
            continue
        import polars as pl

        yield table, pl.read_ipc(path)
        os.unlink(path)
    return outcome


def _forget(store: Store, row: dict) -> None:
    """Drop everything read from a source whose content changed under the same name (caller's transaction)."""
    for table in sorted(LOADED_TABLES, key=lambda t: t != "frames"):  # frames before their stacks
        col = "file" if table == "http_requests" else "path"
        if table == "frames":
            store.con.execute(
                "DELETE FROM frames WHERE dump_id IN (SELECT dump_id FROM t_stacks WHERE engine = ? AND path = ?)",
                [row["engine"], row["path"]])
            continue
        store.con.execute(f"DELETE FROM {physical(table)} WHERE engine = ? AND {col} = ?",
                          [row["engine"], row["path"]])
    store.con.execute("DELETE FROM sources WHERE source_id = ?", [row["source_id"]])


def _record_source(store: Store, f: EvidenceFile, kind: str, st, hhash: str, compressed: bool, lines: int,
                   unparsed: int, read_bytes: int, status: str = "ok", release_hint: str | None = None,
                   source_id: int | None = None, note: str | None = None) -> None:
    if source_id is None:
        source_id = store.scalar("SELECT COALESCE(MAX(source_id), 0) + 1 FROM sources")
    store.append("sources", [{
        "source_id": source_id, "path": f.rel_path, "abs_path": str(f.abs_path), "engine": f.engine,
        "kind": kind, "bytes": st.st_size, "lines": lines, "parsed_lines": lines - unparsed,
        "unparsed_lines": unparsed, "read_bytes": read_bytes, "head_hash": hhash, "mtime": st.st_mtime,
        "compressed": compressed, "rotation": f.rotation, "node": f.node, "clock_offset_s": 0.0,
        "release_hint": release_hint, "status": status, "ingested_at": datetime.now(), "note": note,
    }])


def _parse_log(f: EvidenceFile, start_offset: int, start_line: int, out: FileOutcome,
               end_offset: int | None = None, hold_partial: bool = False) -> Iterator[Any]:
    """Parse a server log chunk by chunk; chunks end at record starts, so each one is whole records and
    ``out`` (read_bytes, lines) is a resume point after every yield."""
    head = head_text(f.abs_path).splitlines()
    from ..parsers.sglang_log import FileContext, newest_release, parse_chunk

    ctx = FileContext(engine=f.engine, path=f.rel_path,
                      default_year=datetime.fromtimestamp(f.abs_path.stat().st_mtime).year,
                      compose=detect_compose(head))
    out.read_bytes = start_offset
    for chunk in iter_chunks(f.abs_path, start_offset, start_line, records=True, end_offset=end_offset,
                             notes=out.notes, hold_partial=hold_partial):
        parsed = parse_chunk(chunk.lines, chunk.first_line, ctx)
        out.release = newest_release(out.release, parsed.release)
        out.lines += parsed.lines
        out.unparsed += parsed.unparsed
        out.read_bytes = chunk.end_offset
        out.notes.interleaved += parsed.interleaved
        if parsed.backwards:
            out.notes.backwards += parsed.backwards
            out.notes.largest_back = max(out.notes.largest_back, parsed.largest_back)
        yield parsed


# Parser of each stack-dump kind (see evidence.detect_kind); each returns a pyspy.Dump.
STACK_PARSERS: dict[str, Callable[[list[str], int], pyspy.Dump]] = {
    "pyspy_dump": pyspy.parse_dump,
    "pyspy_json": pyspy.parse_json,
    "gdb_dump": gdb.parse_gdb,
    "faulthandler_dump": faulthandler.parse_faulthandler,
    "native_trace": native_trace.parse_trace,
}


def _read_lines(f: EvidenceFile, out: FileOutcome) -> list[str]:
    lines: list[str] = []
    for chunk in iter_chunks(f.abs_path, notes=out.notes):
        lines.extend(chunk.lines)
        out.read_bytes = chunk.end_offset
    return lines


def _parse_stacks(f: EvidenceFile, kind: str, mtime: float, out: FileOutcome) -> Iterator[tuple[str, list[dict]]]:
    """A standalone stack dump: threads and frames; every line it does not consume is kept in ``unparsed``."""
    text_lines = _read_lines(f, out)
    dump = STACK_PARSERS[kind](text_lines, 1)
    ts = datetime.fromtimestamp(mtime)           # captures carry no time of their own: the file's mtime
    stacks: list[dict] = []
    frames: list[dict] = []
    # The file's place may name the rank (pyspy/rank3.txt) when the dump is of one process and
    # its title does not (JSON, gdb and faulthandler dumps carry no process title).
    one_process = len({p.pid for p in dump.processes}) <= 1 and not any(p.parent_pid for p in dump.processes)
    place_rank = (rank_from_place(f.rel_path, f.engine) or "") if one_process else ""
    dump_rows(dump, f"{f.engine}:{f.rel_path}", f.engine, f.rel_path, ts, place_rank, "standalone", stacks, frames)
    # Accounting by construction: a line is parsed only if the parser consumed it.
    un = [{"engine": f.engine, "path": f.rel_path, "line": i + 1, "text": text_lines[i]}
          for i in range(len(text_lines)) if i not in dump.consumed]
    out.lines, out.unparsed = len(text_lines), len(un)
    if un:
        out.notes.extra.append(f"{len(un)} line(s) outside the dump grammar (cut off or interleaved output?) "
                               f"kept in unparsed")
    if any(s.get("garbled") for s in stacks):
        out.notes.extra.append("interleaved dump output: only frames that are certain were kept")
    yield "stacks", stacks
    yield "frames", frames
    yield "unparsed", un


def _parse_capture_error(f: EvidenceFile, out: FileOutcome) -> Iterator[tuple[str, list[dict]]]:
    """A failed capture: its text is kept verbatim (in ``unparsed``: it holds no stack), the reason in status."""
    text_lines = _read_lines(f, out)
    out.lines = out.unparsed = len(text_lines)
    out.status = capture_error_reason(text_lines)
    yield "unparsed", [{"engine": f.engine, "path": f.rel_path, "line": i + 1, "text": s}
                       for i, s in enumerate(text_lines)]


def _parse_gpu(f: EvidenceFile, out: FileOutcome) -> Iterator[tuple[str, Any]]:
    header: str | None = None
    for chunk in iter_chunks(f.abs_path, notes=out.notes):
        lines, first = chunk.lines, chunk.first_line
        if header is None and lines:
            header = lines[0] if gpu.HEADER_RE.match(lines[0]) else ""
        elif header:
            lines, first = [header, *lines], first - 1     # later chunks: the same columns
        samples, unparsed = gpu.parse_samples(lines, first, f.engine, f.rel_path)
        out.lines += len(chunk.lines)
        out.unparsed += unparsed.height
        out.read_bytes = chunk.end_offset
        yield "gpu_samples", samples
        yield "unparsed", unparsed


def _parse_unknown(f: EvidenceFile, out: FileOutcome) -> Iterator[tuple[str, Any]]:
    import polars as pl

    for chunk in iter_chunks(f.abs_path, notes=out.notes):
        yield "unparsed", pl.DataFrame({
            "engine": f.engine, "path": f.rel_path,
            "line": pl.int_range(chunk.first_line, chunk.first_line + len(chunk.lines), eager=True),
            "text": pl.Series(chunk.lines, dtype=pl.String),
        })
        out.lines += len(chunk.lines)
        out.unparsed += len(chunk.lines)
        out.read_bytes = chunk.end_offset
