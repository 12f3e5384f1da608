"""Ingest: evidence files -> DuckDB tables, incrementally, one transaction per file.

The stages: ``plan`` (against the sources manifest), ``parse`` (per kind, in ``parallel`` for large
inputs), ``load`` (into the store); then per engine: dump parts joined across files (``fragments``), pid -> rank
mapping and clock alignment (``clock``).
"""

from __future__ import annotations

from pathlib import Path

from ..parsers.stackrows import ranks_from_pids
from ..readers.layout import EvidenceFile, Workspace
from ..store import Store
from ..terminal_progress import ProgressBar
from .clock import align_engine_clocks, align_envelope_times
from .collective_clock import align_flight_recorder
from .fragments import join_parts, rank_snapshots
from .jobs import IngestResult
from .load import apply_renames, bump_engine, forget_source, load_file, record_plan_only
from .parallel import PARALLEL_MIN_BYTES, parse_in_pool, splittable
from .parse import parse_file
from .plan import plan_files


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
            record_plan_only(store, p)
        elif p.action == "forget":                 # a renamed file's name held other, older content
            with store.transaction():
                forget_source(store, p.prev)
                bump_engine(store, p.file.engine)
    apply_renames(store, [p for p in plans if p.action == "rename"])
    big = sum(p.st.st_size for p in work if p.action != "rename") > PARALLEL_MIN_BYTES
    limit = threads = None
    if jobs > 1 and big and (len(work) > 1 or splittable(work[0])):
        # the parser processes have the cores and most of the memory: DuckDB appends on one thread (a
        # second costs CPU and gains no time) within half its memory (measured: no slower)
        limit = store.scalar("SELECT current_setting('memory_limit')")
        threads = store.scalar("SELECT current_setting('threads')")
        store.con.execute("SET threads = 1")
        store.con.execute("SET memory_limit = ?", [_halved(limit)])
        outcomes = parse_in_pool(store, work, jobs, prog)
    else:
        outcomes = (( p, load_file(store, p, parse_file(p.job()))) for p in work)
    try:
        for p, outcome in outcomes:
            prog.item_done(p.st.st_size)
            changed.add(p.file.engine)
            res.files_read += 1
            res.files_renamed += p.action == "rename"
            res.lines += outcome.lines
            res.unparsed += outcome.unparsed
            res.bytes_read += max(outcome.read_bytes - (p.job().start_offset), 0)
    finally:
        if limit is not None:                  # as the caller had them (a test may pin one thread)
            store.con.execute(f"SET threads = {int(threads)}")
            store.con.execute("SET memory_limit = ?", [limit])
    for engine in sorted(changed):
        join_parts(store, engine)              # before ranks: moved threads take the first part's pid
        ranks_from_pids(store, engine)
        rank_snapshots(store, engine)
        align_engine_clocks(store, engine)
        align_envelope_times(store, engine)
        align_flight_recorder(store, engine)          # after the logs: it aligns to their clock
    res.changed_engines = sorted(changed)
    prog.finish(f"{res.files_read} files read, {res.files_skipped} unchanged, {res.lines} lines")
    return res


def _halved(limit: str) -> str:
    """Half of a DuckDB memory setting as DuckDB prints it ('256.0 MiB', '1.5 GiB'), in MiB."""
    number, _, unit = limit.partition(" ")
    mib = float(number) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "TiB": 1024 * 1024}.get(unit, 1)
    return f"{max(int(mib / 2), 64)}MiB"
