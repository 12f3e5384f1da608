"""Ingest: evidence files -> DuckDB tables, incrementally, one transaction per file.

The stages: ``plan`` (against the sources manifest), ``parse`` (per kind, in ``parallel`` for large
inputs), ``load`` (into the store); then per engine: dump parts joined across files (``fragments``), pid -> rank
mapping and clock alignment (``clock``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from ..errors import InputError
from ..parsers.stacks.pyspy import CONTINUATION_TID
from ..parsers.stacks.stackrows import ranks_from_pids
from ..readers.layout import EvidenceFile, Workspace
from ..store import Store
from ..store.database import beside
from ..terminal_progress import ProgressBar
from . import fork_server
from .clock import (
    TORCH_JOB_TIMELESS,
    align_engine_clocks,
    align_engine_clocks_all,
    align_envelope_times,
    align_envelope_times_all,
)
from .collective_clock import align_flight_recorder, align_flight_recorder_all
from .fragments import join_parts, rank_snapshots
from .jobs import FileOutcome, IngestResult, with_result
from .load import LoadGroup, apply_renames, bump_engine, forget_source, load_file, record_plan_only
from .parallel import PARALLEL_MIN_BYTES, WHOLE_WINDOW, EarlyParse, parse_cost, parse_in_pool, splittable
from .parse import parse_file
from .plan import Plan, plan_files


class Executor(Protocol):
    """Parses the files planned for reading and loads them, yielding each plan with its outcome in the order
    loaded.  Planning before and the per-engine passes after stay in ``ingest_files``: executors differ only
    in where parsing runs (``LocalExecutor`` here, ``fleet.ray_executor.RayExecutor`` on a Ray cluster)."""

    tasks: int      # parse tasks handed to other processes (0: parsed in this one)

    def run(self, store: Store, work: list[Plan], prog: ProgressBar) -> Iterator[tuple[Plan, FileOutcome]]: ...


class LocalExecutor:
    """This host: in this process, or in a pool of ``jobs`` processes when the input is large."""

    def __init__(self, jobs: int = 1) -> None:
        self.jobs = jobs
        self.tasks = 0
        self.early: EarlyParse | None = None

    def early_parse(self) -> EarlyParse | None:
        """Large files parsed while planning goes on (``ingest_files`` offers them and closes it after ``run``)."""
        if self.jobs > 1:
            self.early = EarlyParse(self.jobs, WHOLE_WINDOW * self.jobs)
        return self.early

    def run(self, store: Store, work: list[Plan], prog: ProgressBar) -> Iterator[tuple[Plan, FileOutcome]]:
        # (what parsing costs: the bytes, and a fixed cost per file: 180 small engines of 42 MB in all took 3.8 s
        # here, 2.4 s in a pool)
        big = sum(parse_cost(p) for p in work if p.action != "rename") > PARALLEL_MIN_BYTES
        # (a pool made while planning serves the parse: it parses what it began, or probed files' heads)
        early = self.early if self.early is not None and self.early.pool is not None else None
        if self.jobs > 1 and ((early is not None and early.pending()) or (big and (len(work) > 1 or splittable(work[0])))):
            with _loader_settings(store):
                yield from parse_in_pool(store, work, self.jobs, prog, counter=self, early=early)
        else:
            fork_server.stop()      # one started early for a pool (a fleet scan) is not needed
            group = LoadGroup(store)
            try:
                for p in work:
                    whole = parsed_whole(p) if group.takes(p) else None
                    if whole is not None:
                        yield p, group.load(p, whole)
                        continue
                    group.commit()
                    yield p, load_file(store, p, parse_file(p.job()))
                group.commit()
            finally:
                group.rollback()


def parsed_whole(p: Plan) -> Iterator[tuple[str, Any]] | None:
    """A small file's batches, parsed here in full (for a ``LoadGroup``); None when reading it fails (it is
    then loaded on its own, which records why)."""
    result: list[FileOutcome] = []
    try:
        batches = list(with_result(parse_file(p.job()), result))
    except InputError:
        return None
    return replay(batches, result[0] or FileOutcome())


def replay(batches: list[tuple[str, Any]], outcome: FileOutcome) -> Iterator[tuple[str, Any]]:
    yield from batches
    return outcome


# DuckDB's memory while parser processes run beside it (a file database: its blocks go to disk): measured on
# a 2 GB log, the tree's peak RSS 1030 MB with 128 MB (half the default cap), 961 MB with 64 MB, CPU alike;
# 32 MiB (445 MB log, 256 MB commits) saved 25 MB in the writer but was slower in 3 paired runs of 4.
LOADER_MEMORY = "64MiB"


@contextlib.contextmanager
def _loader_settings(store: Store) -> Iterator[None]:
    """While parser processes have the cores and most of the memory, DuckDB appends on one thread (a second
    costs CPU and gains no time) within LOADER_MEMORY (an in-memory database keeps its cap: it has nowhere
    to spill); the caller's settings are restored after (a test may pin one thread).

    The load ends with a checkpoint, which leaves the row groups as they were written (``Store`` turns
    the vacuum off: merging the partial row groups at the commits' seams compressed the access lines' text
    again, 0.3 s of a 5.5 s ingest of a 445 MB log)."""
    limit = store.scalar("SELECT current_setting('memory_limit')")
    threads = store.scalar("SELECT current_setting('threads')")
    threshold = store.scalar("SELECT current_setting('checkpoint_threshold')")
    store.con.execute("SET threads = 1")
    if store.path != ":memory:":
        store.con.execute("SET memory_limit = ?", [LOADER_MEMORY])
        # no checkpoint at a commit meanwhile (on this one thread); the one at the end has every thread
        store.con.execute("SET checkpoint_threshold = '1TB'")
    clean = False
    try:
        yield
        clean = True
    finally:
        store.con.execute(f"SET threads = {int(threads)}")
        store.con.execute("SET memory_limit = ?", [limit])
        store.con.execute("SET checkpoint_threshold = ?", [threshold])
        if clean and store.path != ":memory:":
            store.con.execute("CHECKPOINT")     # (no vacuum: Store's setting)


# The per-engine passes after loading, in order, each with the query that finds (over all the changed engines
# at once) the engines it has anything to do for: an engine of one plain log needs none of them, and a pass
# run per engine costs some 5 ms of queries even when it finds nothing (a fleet of thousands of engines).
# Each pass touches only its own engine's rows, so running one pass over every engine before the next is the
# same as running every pass engine by engine.
# The stacks' passes (stacks, frames, process samples) and the clocks' (sources' offsets, the times of events
# and access lines printed without one): two chains, each in its order, neither reading what the other writes.
_STACK_PASSES = [
    # before ranks: moved threads take the first part's pid
    (join_parts, f"""SELECT engine FROM t_stacks WHERE thread_id = '{CONTINUATION_TID}'
                     AND fragment = 'continuation' AND pid IS NULL AND COALESCE(process_title, '') = ''
                     UNION SELECT engine FROM stack_joins"""),
    (ranks_from_pids, "SELECT engine FROM t_stacks WHERE rank = '' AND capture = 'standalone' AND pid IS NOT NULL"),
    (rank_snapshots, "SELECT engine FROM process_samples WHERE rank IS NULL"),
]
_CLOCK_PASSES = [
    (align_engine_clocks, """SELECT engine FROM sources WHERE kind = 'server_log' AND status = 'ok'
                             GROUP BY engine HAVING count(DISTINCT COALESCE(node, chr(0))) >= 2"""),
    (align_envelope_times, f"""SELECT engine FROM t_http_requests JOIN sources USING (source_id) WHERE ts IS NULL
                               UNION SELECT engine FROM t_events WHERE ts IS NULL AND (kind = 'torch_nccl'
                                 OR kind IN {TORCH_JOB_TIMELESS} AND collected_ts IS NOT NULL)"""),
    # after the logs: it aligns to their clock
    (align_flight_recorder, "SELECT engine FROM sources WHERE kind = 'flight_recorder'"),
]


# Passes that take all their engines at once (one statement per step, not per engine; the node clocks: their
# milestones read at once, the main node chosen per engine).
_SETWISE = {align_envelope_times: align_envelope_times_all, align_engine_clocks: align_engine_clocks_all,
            align_flight_recorder: align_flight_recorder_all}


def after_load(store: Store, engines: list[str]) -> None:
    """Join dump parts, map pids to ranks, align clocks: each pass for the engines it has work in.  The two
    chains (the stacks' passes, the clocks') touch different tables and read nothing the other writes: they
    run at once, the clocks on a second connection (``beside``: 0.15 -> 0.10 s of a 300 MB fleet's scan)."""
    if not engines:
        return
    with beside(store, lambda other: _passes(other, _CLOCK_PASSES, engines)):
        _passes(store, _STACK_PASSES, engines)


def _passes(store: Store, passes: list[tuple[Callable[..., Any], str]], engines: list[str]) -> None:
    for step, needs in passes:
        todo = {r[0] for r in store.con.execute(
            f"SELECT DISTINCT engine FROM ({needs}) WHERE list_contains(?, engine)", [engines]).fetchall()}
        if step in _SETWISE:
            if todo:
                _SETWISE[step](store, [e for e in engines if e in todo])
            continue
        for engine in engines:
            if engine in todo:
                step(store, engine)


# meta: the engines whose after-load passes an ingest owes (a JSON list)
AFTER_LOAD_OWED = "after_load_owed"


def _owed_after_load(store: Store) -> set[str]:
    value = store.scalar("SELECT value FROM meta WHERE key = ?", [AFTER_LOAD_OWED])
    return set(json.loads(value)) if value else set()


def _owe_after_load(store: Store, engines: set[str]) -> None:
    if engines:
        store.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [AFTER_LOAD_OWED, json.dumps(sorted(engines))])
    else:
        store.con.execute("DELETE FROM meta WHERE key = ?", [AFTER_LOAD_OWED])


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
                 jobs: int = 1, vanish_engines: list[str] | None = None, hold_live_tail: bool = True,
                 executor: Executor | None = None, on_work: Callable[[], None] | None = None) -> IngestResult:
    """Plan every file against the manifest, parse what changed (in ``jobs`` processes, or by ``executor``),
    load it.  ``on_work`` is called once, as soon as planning finds a file to read.

    ``vanish_engines``: engines whose manifest rows missing from ``files`` are marked vanished (a scan
    of a whole fleet knows every file of its engines; a single-file ingest does not).
    """
    res = IngestResult(root=root)
    prog = progress or ProgressBar(enabled=False)
    for f in files:
        if f.engine not in res.engines:
            res.engines.append(f.engine)
    executor = executor or LocalExecutor(jobs)
    # large files are parsed as soon as planning has looked at them (LocalExecutor: parallel.EarlyParse)
    early = getattr(executor, "early_parse", lambda: None)()
    with early or contextlib.nullcontext():
        return _ingest_planned(store, files, res, prog, vanish_engines, hold_live_tail, executor, on_work, early)


def _ingest_planned(store: Store, files: list[EvidenceFile], res: IngestResult, prog: ProgressBar,
                    vanish_engines: list[str] | None, hold_live_tail: bool, executor: Executor,
                    on_work: Callable[[], None] | None, early: EarlyParse | None) -> IngestResult:
    """``ingest_files`` once its executor is chosen."""
    plans = plan_files(store, files, vanish_engines or [], hold_live_tail, on_work,
                       None if early is None else early.offer, None if early is None else early.probes)
    res.files_vanished = sum(1 for p in plans if p.action == "vanished")
    work = [p for p in plans if p.action in ("read", "resume", "rename")]
    res.bytes = sum(p.st.st_size for p in plans if p.action != "vanished")
    prog.start("ingest", total_bytes=sum(p.st.st_size for p in work), total_items=len(work))
    changed: set[str] = {p.file.engine for p in plans if p.action in ("duplicate", "vanished", "unreadable")}
    # the engines whose after-load passes this ingest owes, recorded before their files load: an ingest
    # killed before the passes ran leaves them owed, and the next one runs them (its files are unchanged then)
    owed = _owed_after_load(store)
    touched = {p.file.engine for p in plans if p.action != "skip"}
    if touched - owed:
        _owe_after_load(store, owed | touched)
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
    # closing: an executor's clean-up (workers, staged files) runs even when loading stops on an error
    with contextlib.closing(executor.run(store, work, prog)) as outcomes:
        for p, outcome in outcomes:
            prog.item_done(p.st.st_size)
            changed.add(p.file.engine)
            res.files_read += 1
            res.files_renamed += p.action == "rename"
            res.lines += outcome.lines
            res.unparsed += outcome.unparsed
            res.bytes_read += max(outcome.read_bytes - (p.job().start_offset), 0)
            if outcome.status.startswith("error"):
                res.failed.append(f"{p.file.rel_path}: {outcome.status}")
    res.parse_tasks = executor.tasks
    after_load(store, sorted(changed | owed))
    if owed | touched:
        _owe_after_load(store, set())
    res.changed_engines = sorted(changed)
    prog.finish(f"{res.files_read} files read, {res.files_skipped} unchanged, {res.lines} lines")
    return res
