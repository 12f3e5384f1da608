"""Loading parsed batches into the store with the file's manifest row, in transactions that a killed
ingest can resume from."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..readers.layout import EvidenceFile
from ..readers.logfile import HELD_BACK_NOTE
from ..store import LOADED_TABLES, SOURCE_KEYED, Store, physical
from .fragments import unjoin_engine
from .jobs import CHECKPOINT, FileOutcome, batch_to_arrow, with_result
from .plan import Plan

# A large log commits every COMMIT_BYTES (a killed ingest resumes from the last commit).  Not less: a
# transaction that appends fewer than about 150 000 rows to a table leaves them to the checkpoint to
# compress, where a larger one writes them out compressed as it goes; measured on a 445 MB batch-heavy log,
# committing every 64 MB cost a 1.2 s checkpoint at the end, 5 s more CPU in all and a 68 MB database,
# every 256 MB none of that (44 MB database) with the writer's peak RSS 390 MB (it spills beyond its
# memory limit).  Not more either: the writer's peak RSS grows with the transaction (496 MB for the 445 MB
# log in one commit; 902 MB for a 2 GB log committed every 1 GB).  What a second commit used to cost at
# close (0.3 s: the checkpoint's vacuum recompressed the access lines' text) no checkpoint pays now (``Store``
# turns the vacuum off).
COMMIT_BYTES = 256 * 1024 * 1024

# Small files share a transaction (``LoadGroup``): a commit, a manifest row, an engine bump and an insert per
# table cost the writer a few milliseconds each, which a fleet of small engines paid per file (measured on 216
# engines, 333 files: 60 ms of writer time per file, the scan's critical path).  A group commits after
# GROUP_BYTES of input or GROUP_FILES files; a killed scan loses the open group only, which the next scan
# reads again (its files have no manifest row yet).  A file larger than GROUP_FILE_MAX keeps its own
# transactions (``load_file``: partial commits of a large log).
#
# A group's rows are inserted every INSERT_BYTES of its input (one insert per table for many files), so that
# the inserting goes on while workers parse, and committed at GROUP_BYTES: as with COMMIT_BYTES, a
# transaction of a row group or more per table writes its rows out compressed as it goes, where a smaller
# one writes them to the WAL at its commit and leaves them to the checkpoint after the load.  Measured on
# the 202-engine fleet of every kind (bench/generate.py mixed): committing every 32 MB cost the writer
# 0.36 s of WAL writes and a 0.32 s checkpoint after the load (the scan's serial tail); every 128 MB,
# 0.19 s and 0.10 s.
GROUP_BYTES = 128 * 1024 * 1024
INSERT_BYTES = 16 * 1024 * 1024
GROUP_FILES = 256
GROUP_FILE_MAX = 16 * 1024 * 1024


def load_file(store: Store, p: Plan, batches: Iterator[tuple[str, Any]]) -> FileOutcome:
    """Load one file's batches with its manifest row.  A small file is one transaction; a large log is
    committed every ``COMMIT_BYTES`` at a record boundary with its manifest row marked ``partial``
    (a killed scan resumes there: memory stays bounded and nothing is read twice).  A file that
    fails to read is rolled back to its last commit and recorded, never sinking the whole ingest."""
    store.con.execute("BEGIN TRANSACTION")
    try:
        if p.action == "read" and p.prev is not None:
            forget_source(store, p.prev)
        result: list[FileOutcome] = []
        committed_at = p.job().start_offset
        sid = _source_id(store, p)
        for table, rows in with_result(batches, result):
            if table == CHECKPOINT:
                if rows.read_bytes - committed_at >= COMMIT_BYTES:
                    _finish_source(store, p, rows, sid, status="partial")
                    store.con.execute("COMMIT")
                    store.con.execute("BEGIN TRANSACTION")
                    committed_at = rows.read_bytes
                continue
            arrow = batch_to_arrow(rows)
            if arrow is not None:
                store.append(table, arrow, source_id=sid)
        outcome = result[0] or FileOutcome()
        _finish_source(store, p, outcome, sid)
        bump_engine(store, p.file.engine)
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
                    forget_source(store, p.prev)
                _record_source(store, p.file, "unreadable", p.st, p.head_hash, p.compressed, 0, 0, 0,
                               status=f"error: {e}")
            bump_engine(store, p.file.engine)
        return FileOutcome(status=f"error: {e}")


def _source_id(store: Store, p: Plan) -> int:
    """The source_id the file's rows and manifest row take: the row it resumes, else its own row (the first
    commit of a large log), else a new one."""
    if p.prev is not None and p.action in ("resume", "rename"):
        return p.prev["source_id"]
    sid = store.scalar("SELECT source_id FROM sources WHERE abs_path = ?", [str(p.file.abs_path)])
    return sid if sid is not None else store.scalar("SELECT COALESCE(MAX(source_id), 0) + 1 FROM sources")


def _finish_source(store: Store, p: Plan, outcome: FileOutcome, sid: int, status: str | None = None) -> None:
    """Write the file's manifest row: counts so far (continuing the row it resumes), resume point, status."""
    prev = p.prev if p.action in ("resume", "rename") else None
    lines, unparsed = outcome.lines, outcome.unparsed
    if prev is not None:
        lines += prev["lines"] or 0
        unparsed += prev["unparsed_lines"] or 0
    store.con.execute("DELETE FROM sources WHERE source_id = ?", [sid])
    notes = outcome.notes.summary()
    if prev is not None and prev.get("note"):     # a resumed read: earlier notes stand, a held tail is done
        notes = [n for n in prev["note"].split("; ") if not n.startswith(HELD_BACK_NOTE)
                 and n not in notes] + notes
    _record_source(store, p.file, p.kind, p.st, p.head_hash, p.compressed, lines, unparsed,
                   max(outcome.read_bytes, prev["read_bytes"] or 0) if prev else outcome.read_bytes,
                   status=status or outcome.status, source_id=sid,
                   release_hint=outcome.release or (prev or {}).get("release_hint"), note="; ".join(notes) or None,
                   envelope=outcome.envelope or (prev or {}).get("envelope") or _envelope_name(p), dating=p)


class LoadGroup:
    """Loads small files several to a transaction: their rows are gathered per table and inserted every
    INSERT_BYTES of input, one insert per table, and committed with their manifest rows and one bump per
    engine.  Only files
    whose batches are known whole and error-free (parsed elsewhere, or in memory) join a group."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.open = False
        self.rows: dict[str, list[Any]] = {}
        self.sources: list[dict[str, Any]] = []
        self.bumps: dict[str, int] = {}
        self.bytes = 0
        self.gathered = 0                               # input bytes of the rows not inserted yet
        self.files = 0
        self.next_id = 0
        self.known_ids: dict[str, int] | None = None    # abs_path -> source_id of the manifest as the group began

    @staticmethod
    def takes(p: Plan) -> bool:
        """A new file read from its start, small enough to be one of a group."""
        return p.action == "read" and p.st.st_size <= GROUP_FILE_MAX

    def load(self, p: Plan, batches: Iterator[tuple[str, Any]]) -> FileOutcome:
        """Add one file (``takes(p)``) to the open group, committing the group when it is full."""
        store = self.store
        if not self.open:
            store.con.execute("BEGIN TRANSACTION")
            self.open = True
            self.next_id = store.scalar("SELECT COALESCE(MAX(source_id), 0) + 1 FROM sources")
            self.known_ids = {r[0]: r[1] for r in store.con.execute(
                "SELECT abs_path, source_id FROM sources").fetchall()}
        try:
            if p.prev is not None:
                forget_source(store, p.prev)
                self.known_ids.pop(p.prev["abs_path"], None)
            sid = self.known_ids.pop(str(p.file.abs_path), None)
            if sid is not None:
                store.con.execute("DELETE FROM sources WHERE source_id = ?", [sid])
            else:
                sid, self.next_id = self.next_id, self.next_id + 1
            result: list[FileOutcome] = []
            for table, rows in with_result(batches, result):
                if table == CHECKPOINT:
                    continue
                arrow = batch_to_arrow(rows)
                if arrow is not None:
                    self.rows.setdefault(table, []).append(_keyed(table, arrow, sid))
            outcome = result[0] or FileOutcome()
            self.sources.append(_source_row(
                p.file, p.kind, p.st, p.head_hash, p.compressed, outcome.lines, outcome.unparsed,
                outcome.read_bytes, status=outcome.status, source_id=sid, release_hint=outcome.release,
                note="; ".join(outcome.notes.summary()) or None, envelope=outcome.envelope or _envelope_name(p),
                dating=p))
        except BaseException:
            self.rollback()
            raise
        self.bumps[p.file.engine] = self.bumps.get(p.file.engine, 0) + 1
        self.bytes += p.st.st_size
        self.gathered += p.st.st_size
        self.files += 1
        if self.bytes >= GROUP_BYTES or self.files >= GROUP_FILES:
            self.commit()
        elif self.gathered >= INSERT_BYTES:
            self._insert_gathered()
        return outcome

    def _insert_gathered(self) -> None:
        """Insert the rows gathered so far (the transaction stays open)."""
        try:
            for table, tables in self.rows.items():
                for t in _concatenated(tables):
                    self.store.append(table, t)
        except BaseException:
            self.rollback()
            raise
        self.rows, self.gathered = {}, 0

    def commit(self) -> None:
        """Insert the group's rows, manifest rows and engine bumps; commit."""
        if not self.open:
            return
        store = self.store
        self._insert_gathered()
        try:
            store.append("sources", self.sources)
            bump_engines(store, self.bumps)
            store.con.execute("COMMIT")
        except BaseException:
            self.rollback()
            raise
        self._reset()

    def rollback(self) -> None:
        """Drop the open group (its files have no manifest row: the next ingest reads them)."""
        if self.open:
            self.store.rollback()
        self._reset()

    def _reset(self) -> None:
        self.open = False
        self.rows, self.sources, self.bumps = {}, [], {}
        self.bytes = self.gathered = self.files = 0
        self.known_ids = None


def _keyed(table: str, arrow: Any, sid: int) -> Any:
    """A SOURCE_KEYED table's rows with their file as a ``source_id`` column (files share a group's insert)."""
    if table not in SOURCE_KEYED:
        return arrow
    import numpy as np
    import pyarrow as pa

    drop = [c for c in ("engine", SOURCE_KEYED[table]) if c in arrow.column_names]
    return arrow.drop_columns(drop).append_column("source_id", pa.array(np.full(arrow.num_rows, sid, np.int32)))


def _concatenated(tables: list[Any]) -> list[Any]:
    """The group's batches of one table as few Arrow tables as their types allow, in order (a column missing
    from a batch is NULL, as an insert that omits it; types that do not merge stay apart)."""
    import pyarrow as pa

    if len(tables) == 1:
        return tables
    try:
        return [pa.concat_tables(tables, promote_options="permissive")]
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return tables


def record_plan_only(store: Store, p: Plan) -> None:
    """Manifest-only outcomes: duplicates, unreadable files, vanished files (their data is kept)."""
    with store.transaction():
        if p.action == "vanished":
            store.con.execute("UPDATE sources SET status = 'vanished' WHERE source_id = ?", [p.prev["source_id"]])
        else:
            if p.prev is not None:
                forget_source(store, p.prev)
            status = f"duplicate of {p.duplicate_of}" if p.action == "duplicate" else "error: cannot read"
            _record_source(store, p.file, p.kind, p.st, p.head_hash, p.compressed, 0, 0, 0, status=status,
                           note=_unreadable_reason(p.file.abs_path) if p.action == "unreadable" else None,
                           envelope=_envelope_name(p), dating=p)
        bump_engine(store, p.file.engine)


def _envelope_name(p: Plan) -> str | None:
    return p.envelope.name if p.envelope is not None else None


def _unreadable_reason(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    return "cannot read"


def bump_engine(store: Store, engine: str) -> None:
    """The engine's data changed: its findings are stale until analyze runs (same transaction as the change)."""
    bump_engines(store, {engine: 1})


def bump_engines(store: Store, bumps: dict[str, int]) -> None:
    """``bump_engine`` of each engine, ``n`` times, in one statement."""
    if not bumps:
        return
    store.con.execute(
        "INSERT INTO engine_state SELECT unnest(?), unnest(?), 0 ON CONFLICT (engine) DO UPDATE SET "
        "data_version = engine_state.data_version + excluded.data_version", [list(bumps), list(bumps.values())])


def apply_renames(store: Store, renames: list[Plan]) -> None:
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
                    if table == "frames" or table in SOURCE_KEYED:      # (their rows name the source by id)
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
            bump_engine(store, p.file.engine)


def forget_source(store: Store, row: dict) -> None:
    """Drop everything read from a source whose content changed under the same name (caller's transaction)."""
    unjoin_engine(store, row["engine"])     # its rows may hold another file's joined part: undone, joined again later
    for table in sorted(LOADED_TABLES, key=lambda t: t != "frames"):  # frames before their stacks
        col = "file" if table == "http_requests" else "path"
        if table == "frames":
            store.con.execute(
                "DELETE FROM frames WHERE dump_id IN (SELECT dump_id FROM t_stacks WHERE engine = ? AND path = ?)",
                [row["engine"], row["path"]])
            continue
        if table in SOURCE_KEYED:
            store.con.execute(f"DELETE FROM {physical(table)} WHERE source_id = ?", [row["source_id"]])
            continue
        store.con.execute(f"DELETE FROM {physical(table)} WHERE engine = ? AND {col} = ?",
                          [row["engine"], row["path"]])
    store.con.execute("DELETE FROM sources WHERE source_id = ?", [row["source_id"]])


def _record_source(store: Store, f: EvidenceFile, kind: str, st, hhash: str, compressed: bool, lines: int,
                   unparsed: int, read_bytes: int, status: str = "ok", release_hint: str | None = None,
                   source_id: int | None = None, note: str | None = None, envelope: str | None = None,
                   dating: Plan | None = None) -> None:
    if source_id is None:
        source_id = store.scalar("SELECT COALESCE(MAX(source_id), 0) + 1 FROM sources")
    store.append("sources", [_source_row(f, kind, st, hhash, compressed, lines, unparsed, read_bytes, status,
                                         release_hint, source_id, note, envelope, dating)])


def _source_row(f: EvidenceFile, kind: str, st, hhash: str, compressed: bool, lines: int, unparsed: int,
                read_bytes: int, status: str, release_hint: str | None, source_id: int, note: str | None,
                envelope: str | None, dating: Plan | None = None) -> dict[str, Any]:
    """The manifest row (``dating``: the plan whose last_dated and year_near it records)."""
    last_dated, year_near = (dating.last_dated, dating.year_near) if dating is not None else (None, None)
    return {
        "source_id": source_id, "path": f.rel_path, "abs_path": str(f.abs_path), "engine": f.engine,
        "kind": kind, "bytes": st.st_size, "lines": lines, "parsed_lines": lines - unparsed,
        "unparsed_lines": unparsed, "read_bytes": read_bytes, "head_hash": hhash, "mtime": st.st_mtime,
        "compressed": compressed, "rotation": f.rotation, "node": f.node, "clock_offset_s": 0.0,
        "release_hint": release_hint, "status": status, "ingested_at": datetime.now(), "note": note,
        "envelope": envelope, "last_dated": _local(last_dated), "year_near": _local(year_near),
    }


def _local(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch) if epoch is not None else None
