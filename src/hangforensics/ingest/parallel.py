"""Parsing on every core: whole files and byte ranges of large logs in worker processes, spilled as Arrow
IPC and loaded by the one DuckDB writer in file order."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from itertools import accumulate
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..readers.kinds import ContentProbe, probe_content
from ..readers.payload import STATEFUL_PASTE, TIMED_LAYERS, PayloadReader
from ..store import Store
from ..terminal_progress import ProgressBar
from . import fork_server
from .batch_parse import (
    BATCH_BYTES,
    BATCH_FILE_BYTES,
    BATCH_FILES,
    PLAIN_BATCH_BYTES,
    PLAIN_BATCH_FILE_BYTES,
    parse_batch_to_ipc,
)
from .jobs import CHECKPOINT, SPLIT_MIN_BYTES, FileJob, FileOutcome, rows_inline, with_result
from .load import LoadGroup, load_file
from .plan import Plan
from .worker import parse_to_ipc, probe_paths

# Input that costs this much to parse (``parse_cost``: bytes and a fixed cost per file) goes to a pool of parser
# processes; less is parsed in this process (a pool's fork server costs some 0.6 s of CPU to start).
PARALLEL_MIN_BYTES = 64 * 1024 * 1024



def splittable(p: Plan) -> bool:
    # a paste's state (an open fence, a wrapped line) does not survive a cut: such files are read whole
    pasted = p.envelope is not None and bool(STATEFUL_PASTE & set(p.envelope.layers))
    return p.kind == "server_log" and not p.compressed and not pasted \
        and p.st.st_size - p.job().start_offset >= SPLIT_MIN_BYTES


def scanned(p: Plan) -> bool:
    """Read by the compiled scanner in a worker that has it loaded (any size: ``sglang_fast.scan_min_bytes``):
    a server log with no envelope (or none sniffed yet)."""
    return p.kind == "server_log" and (p.envelope is None or not p.envelope.layers)


def split_job(job: FileJob, parts: int) -> list[FileJob]:
    """Cut a large uncompressed log into byte ranges that start at record starts, with the line number
    each range starts at (counting newlines is a memchr pass, far cheaper than parsing)."""
    size = _end(job)
    step = max((size - job.start_offset) // parts, 1)
    pieces = _pieces(job, [job.start_offset + k * step for k in range(1, parts)])
    line = job.start_line
    for k, piece in enumerate(pieces):
        piece.start_line = line
        if k + 1 < len(pieces):
            line += count_lines(piece)
    return pieces


def _end(job: FileJob) -> int:
    return job.end_offset if job.end_offset is not None else job.abs_path.stat().st_size


def _pieces(job: FileJob, targets: list[int]) -> list[FileJob]:
    """The ranges of ``job`` cut at the first record start at or after each target offset; their start
    lines are left to the caller (``count_lines``)."""
    size = _end(job)
    record_start = PayloadReader(job.envelope).record_start() if job.envelope is not None \
        else PayloadReader.for_file(job.abs_path, None).record_start()
    bounds = [job.start_offset]
    with job.abs_path.open("rb") as f:
        for target in targets:
            f.seek(target)
            window = f.read(4 * 1024 * 1024)
            m = record_start.search(window)
            if m is None:
                continue
            cut = target + m.start() + 1
            if bounds[-1] < cut < size:
                bounds.append(cut)
    bounds.append(size)
    return [FileJob(job.engine, job.abs_path, job.rel_path, job.kind, a, job.start_line, job.mtime, b,
                    hold_partial=job.hold_partial and b == size, envelope=job.envelope)
            for a, b in zip(bounds, bounds[1:], strict=False)]


COUNT_WINDOW = 16 * 1024 * 1024


def count_lines(piece: FileJob) -> int:
    """Newlines in a range (where the next range's line numbers start): counted by numpy over the mapped
    file (half the CPU of ``bytes.count`` over reads, and no copies; the parent loads meanwhile)."""
    import mmap

    import numpy as np

    start, end = piece.start_offset, piece.end_offset or 0
    if end <= start:
        return 0
    with piece.abs_path.open("rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        lines, data = 0, np.frombuffer(mm, np.uint8)
        try:
            for at in range(start, end, COUNT_WINDOW):
                stop = min(at + COUNT_WINDOW, end)
                lines += int(np.count_nonzero(data[at:stop] == 10))
                # the window's pages leave this process (not the page cache): else its resident memory grows
                # by the whole log while counting (no madvise on Windows)
                if hasattr(mm, "madvise"):
                    mm.madvise(mmap.MADV_DONTNEED, at - at % mmap.PAGESIZE, stop - (at - at % mmap.PAGESIZE))
        finally:
            # a Ctrl-C inside the loop leaves a view in its traceback: closing then would raise BufferError
            # in place of the KeyboardInterrupt; the map is unmapped when the last view goes
            del data
            with contextlib.suppress(BufferError):
                mm.close()
    return lines


def parse_in_pool(store: Store, work: list[Plan], jobs: int, prog: ProgressBar, counter: Any = None,
                  early: EarlyParse | None = None):
    """Parse files (and byte ranges of large logs) in worker processes, each spilling its row batches as
    Arrow IPC files; load them here in file order: DuckDB has one writer, and loading overlaps parsing.
    A large log's ranges are submitted a few at a time (``_Ranges``): the spill stays bounded.
    ``counter.tasks`` (when given) counts the pieces handed to workers; ``early``: files whose parse began
    while planning (its pool is this one's)."""
    tmp = Path(tempfile.mkdtemp(prefix="hangforensics-ingest-"))
    pooled = contextlib.nullcontext(early.pool) if early is not None and early.pool is not None else \
        worker_pool(jobs, scanner=any(scanned(p) or splittable(p) for p in work))
    try:
        with pooled as pool, contextlib.closing(_Ranges(pool, tmp, window=jobs + 2)) as ranges:
            split = [(p, ranges.add(p, jobs)) for p in work if splittable(p)]
            # the largest first: the last files to finish are small ones, not a large log parsed while the other
            # workers have nothing left (files load as they finish, in any order); a file whose parse began while
            # planning is a task of its own
            whole_files = [p for p in work if not splittable(p)]
            begun = {id(p) for p in whole_files if early is not None and early.has(p.job())}
            tasks = [p for p in whole_files if id(p) in begun] + batched(
                sorted((p for p in whole_files if id(p) not in begun), key=_read_cost, reverse=True))
            whole = _Whole(pool, tmp, sorted(tasks, key=_task_cost, reverse=True), WHOLE_WINDOW * jobs, ranges,
                           early)
            with _workers_ignore_ctrl_c():         # workers start on submit: Ctrl-C is the parent's to handle
                whole.fill()
                ranges.fill()
            if counter is not None:
                counter.tasks += len(whole.todo) + len(ranges.todo)
            # whole small files as they finish (several to a transaction); the ranges of a split log in order
            group = LoadGroup(store)
            cores = _CoresWhenParsed(store, pool, jobs)
            try:
                for p, (manifest, outcome) in whole:
                    if group.takes(p) and not outcome.status.startswith("error:"):
                        yield p, group.load(p, cores.watching(_read_ipc(manifest, outcome)))
                        continue
                    group.commit()
                    yield p, load_file(store, p, cores.watching(_read_ipc(manifest, outcome)))
                group.commit()
            finally:
                group.rollback()
            for p, count in split:
                yield p, load_file(store, p, cores.watching(
                    join_ranges(_read_ipc(*f.result()) for f in ranges.take(count))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _CoresWhenParsed:
    """The loader appends on one DuckDB thread while the workers parse (``pipeline._loader_settings``); once
    they are done, what is left to load (the batches spilled ahead of it: the ingest's serial end) is
    appended on ``cores`` threads."""

    def __init__(self, store: Store, pool: _Pool, cores: int) -> None:
        self.store, self.pool, self.cores = store, pool, cores
        self.widened = cores < 2

    def watching(self, batches: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        """``batches`` (a generator returning its outcome), the threads widened before the first one the
        workers are done by."""
        while True:
            try:
                item = next(batches)
            except StopIteration as stop:
                return stop.value
            if not self.widened and self.pool.finished():
                self.store.con.execute(f"SET threads = {int(self.cores)}")
                self.widened = True
            yield item


# A compressed file's bytes cost its parser several times a plain file's (some five times as many to read).
COMPRESSED_COST = 5


def _read_cost(p: Plan) -> int:
    """What parsing a whole file costs, roughly: its bytes to read (a compressed file's several times)."""
    size = max(p.st.st_size - p.job().start_offset, 0)
    return size * COMPRESSED_COST if p.compressed else size


# What a file costs a worker whatever its size, in bytes of a plain log (some 10 ms: a batch of small logs
# costs its files' share of a parse, and more than its bytes say).
FILE_COST = 256 * 1024


def parse_cost(p: Plan) -> int:
    """What parsing a file costs, roughly, in bytes of a plain log: its bytes to read and FILE_COST."""
    return _read_cost(p) + FILE_COST


def _task_cost(task: Plan | list[Plan]) -> int:
    """What a task costs, roughly: the costliest go first, so that the last to finish are small (a batch of
    many small logs is not left to one worker at the end)."""
    return sum(parse_cost(p) for p in (task if isinstance(task, list) else [task]))


# Whole files in the workers' hands at once, per worker: their results (small row batches come back inline)
# wait in this process until loaded, so the window bounds its memory (all submitted at once, a fleet of 5000
# small engines piled up 1.3 GB of finished results while the loader caught up); a few per worker keep them busy.
WHOLE_WINDOW = 8


def batchable(p: Plan) -> bool:
    """A small log read whole from its start, which a worker may parse together with others
    (``batch_parse``); a live one too (written in the last minutes: a fleet copied in just before its scan
    is all live), whose unfinished last line the joint parse leaves as its own parse does; a small rotated
    one compressed (``server.log.1.gz``).  A plain log up to PLAIN_BATCH_FILE_BYTES, any other up to
    BATCH_FILE_BYTES, a compressed one by what it holds (``_batch_bytes``)."""
    job = p.job()
    limit = PLAIN_BATCH_FILE_BYTES if _reading(p) == _PLAIN else BATCH_FILE_BYTES
    return p.kind == "server_log" and not job.start_offset and _batch_bytes(p) <= limit


# What a compressed log holds per byte, at most as batching counts it (logs compress 8-15 times): a batch's
# bytes bound the joint parse's memory.  One that holds more than a chunk is parsed alone after all
# (``batch_parse._prepared``).
GZIP_EXPANSION = 16


def _batch_bytes(p: Plan) -> int:
    """A log's bytes as a batch counts them: what a compressed one may hold (GZIP_EXPANSION)."""
    return p.st.st_size * GZIP_EXPANSION if p.compressed else p.st.st_size


def batched(plans: list[Plan]) -> list[Plan | list[Plan]]:
    """``plans`` as the pool's tasks, in their order: a file, or a list of small logs that go to one worker
    together (up to BATCH_BYTES and BATCH_FILES a task).  The logs of a batch are read the same way, as far as
    planning knows (``_reading``): a batch is then one joint parse, not one per way of reading (each costs a
    parse's fixed queries)."""
    tasks: list[Plan | list[Plan]] = []
    ways: dict[tuple[bool | None, bool], list[Plan]] = {}
    for p in plans:
        if batchable(p):
            ways.setdefault(_reading(p), []).append(p)
        else:
            tasks.append(p)
    for way, same in ways.items():
        limit = PLAIN_BATCH_BYTES if way == _PLAIN else BATCH_BYTES
        batch: list[Plan] = []
        size = 0
        for p in same:
            if batch and (size + _batch_bytes(p) > limit or len(batch) >= BATCH_FILES):
                tasks.append(batch if len(batch) > 1 else batch[0])
                batch, size = [], 0
            batch.append(p)
            size += _batch_bytes(p)
        if batch:
            tasks.append(batch if len(batch) > 1 else batch[0])
    return tasks


# How a plain log is read (``_reading``): sniffed, no envelope
_PLAIN = (True, False)


def _reading(p: Plan) -> tuple[bool | None, bool]:
    """How a small log is read, as its sniffed envelope says (``batch_parse`` parses together the logs read
    alike): plain or behind an envelope (None: not sniffed), and with the envelope's times or not."""
    layers = set(p.envelope.layers) if p.envelope is not None else set()
    return (None if p.envelope is None else not layers, bool(layers & TIMED_LAYERS))


class _Whole:
    """Whole files parsed by the pool (a task is a file or a batch of small logs), at most ``window`` tasks at
    a time; iterating yields (plan, result) as they finish, submitting the next ones."""

    def __init__(self, pool: Any, tmp: Path, todo: list[Any], window: int, ranges: _Ranges,
                 early: EarlyParse | None = None) -> None:
        self.pool, self.tmp, self.todo, self.window, self.early = pool, tmp, todo, max(window, 1), early
        self.next = 0
        self.running: dict[Any, Any] = {}
        # the workers are let go once both have handed out their last task
        self.ranges, ranges.whole = ranges, self

    def fill(self) -> None:
        while len(self.running) < self.window and self.next < len(self.todo):
            task, prefix = self.todo[self.next], str(self.tmp / f"f{self.next}")
            fut = None if isinstance(task, list) or self.early is None else self.early.take(task.job())
            if fut is None:
                fut = self.pool.submit(parse_batch_to_ipc, [p.job() for p in task], prefix) \
                    if isinstance(task, list) else self.pool.submit(parse_to_ipc, task.job(), prefix)
            self.running[fut] = task
            self.next += 1
        if self.all_submitted() and self.ranges.all_submitted():
            self.pool.no_more_tasks()

    def all_submitted(self) -> bool:
        return self.next == len(self.todo)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        while self.running:
            done, _ = wait(self.running, return_when=FIRST_COMPLETED)
            for fut in done:
                task = self.running.pop(fut)
                self.fill()                 # the next task starts before this one loads
                if isinstance(task, list):
                    yield from zip(task, fut.result(), strict=True)
                else:
                    yield task, fut.result()


# A whole file this large is parsed as soon as planning has probed it (``EarlyParse``), alone, even a plain log
# that could share a parse (PLAIN_BATCH_FILE_BYTES): the workers start while planning goes on (a fleet whose
# every engine logs 1.5 MB: they started at 1.1 s, after planning, when those logs waited for their batches).
EARLY_MIN_BYTES = BATCH_FILE_BYTES


class EarlyParse:
    """Large whole files parsed while planning goes on.  Planning reads the head of every file (some 1 ms a
    file) and decides what to read only once all are probed, while the parser workers, up long before on a
    fleet, waited (measured on the 202-engine fleet: the first task 0.3 s after the fork server was ready).
    A file is parsed as its probe says it would be read (a new file is read, unless it turns out to copy
    another); the plan that reads it so takes the result (``take``: the same job, field for field), loaded
    where and when the pool's own would be; one planned otherwise only cost its parse.  The pool is made at
    the first file offered (an unchanged rescan makes none) and serves ``parse_in_pool`` after.

    The files are handed to the pool by a thread of their own: the first worker starts only once the fork
    server has loaded, and planning went on meanwhile (it waited 0.14 s for it on the 202-engine fleet)."""

    def __init__(self, jobs: int, limit: int) -> None:
        self.jobs, self.limit = jobs, limit
        self.pool: Any = None
        self.offered = 0
        # each file's job, and the future of its submission (whose result is the parse's future)
        self._futures: dict[str, tuple[FileJob, Any]] = {}
        self._stack = contextlib.ExitStack()
        self._tmp: Path | None = None
        self._submitter: ThreadPoolExecutor | None = None

    def __enter__(self) -> EarlyParse:
        return self

    def __exit__(self, *exc: Any) -> None:
        for _, submitted in self._futures.values():
            if not submitted.cancel() and submitted.done() and submitted.exception() is None:
                submitted.result().cancel()
        self._futures.clear()
        try:
            self._stack.__exit__(*exc)
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def offer(self, p: Plan) -> None:
        """``p``: a probed file as it would be read.  Only where a pool's fork server runs already (a fleet
        scan starts it at once, or at its first changed file): an ingest that would parse in this process stays
        so."""
        if len(self._futures) >= self.limit or p.st.st_size < EARLY_MIN_BYTES or splittable(p) \
                or not self._start_pool():
            return
        job = p.job()
        assert self._submitter is not None and self._tmp is not None
        self._futures[str(job.abs_path)] = (job, self._submitter.submit(
            self.pool.submit, parse_to_ipc, job, str(self._tmp / f"e{self.offered}")))
        self.offered += 1

    def _start_pool(self) -> bool:
        """Make the pool, where a pool's fork server runs already; whether there is one."""
        if self.pool is None:
            if self.jobs < 2 or not fork_server.running():
                return False
            self._tmp = Path(tempfile.mkdtemp(prefix="hangforensics-early-"))
            self.pool = self._stack.enter_context(worker_pool(self.jobs, scanner=True))
            # (exits before the pool: its submissions end before the pool shuts down)
            self._submitter = self._stack.enter_context(ThreadPoolExecutor(1, "hangforensics-early"))
        return True

    def probes(self, paths: list[Path]) -> Iterator[ContentProbe]:
        """``readers.kinds.probe_content`` of each of ``paths``, in order, read here and by the pool's workers.
        Planning probes every new file (some 1 ms each: 0.55 s of the writer's time for a fleet's 556 files,
        before its first load) while the workers, forked soon after, had nothing to parse yet.  The paths
        go in chunks: this process probes them from the first, the workers from the last (submitted
        last-first), and a chunk it reaches that no worker has begun it takes back and probes itself."""
        if not self._start_pool():
            yield from map(probe_content, paths)
            return
        chunks = [paths[i:i + PROBE_CHUNK] for i in range(0, len(paths), PROBE_CHUNK)]
        shared = _SharedChunks(len(chunks))
        assert self._submitter is not None
        self._submitter.submit(shared.hand_out, self.pool, chunks, self.jobs)
        for i, chunk in enumerate(chunks):
            fut = shared.take(i)
            if fut is None or fut.cancel():
                yield from map(probe_content, chunk)
                continue
            try:
                got = fut.result()
            except Exception:       # noqa: BLE001 (a worker lost: the chunk is probed here, as it would be alone)
                got = list(map(probe_content, chunk))
            yield from got

    def pending(self) -> bool:
        """Files parsed (or parsing) that no plan has taken yet."""
        return bool(self._futures)

    def has(self, job: FileJob) -> bool:
        """Whether ``job``'s parse began here (a plan that reads the file as probed: ``take`` gives it)."""
        got = self._futures.get(str(job.abs_path))
        return got is not None and got[0] == job

    def take(self, job: FileJob) -> Any:
        """The parse of ``job`` begun early (None: none, or of another job): its future, once submitted."""
        got = self._futures.get(str(job.abs_path))
        if got is None or got[0] != job:
            return None
        del self._futures[str(job.abs_path)]
        return got[1].result()


# Files a task of probing reads the heads of (some 1 ms each)
PROBE_CHUNK = 16


class _SharedChunks:
    """The chunks of paths ``EarlyParse.probes`` shares between this process and the pool's workers: the
    submitter thread hands them to the pool from the last, this process takes them from the first."""

    def __init__(self, n: int) -> None:
        self.futures: list[Any] = [None] * n
        self.taken = 0                  # chunks before this one are this process's, or handed out
        self.lock = threading.Lock()

    def hand_out(self, pool: Any, chunks: list[list[Path]], jobs: int) -> None:
        """(On the submitter thread.)  The workers are started first (a submission waits for the fork server
        until they are), then the chunks this process has not reached are submitted, the last first."""
        with contextlib.suppress(Exception):     # a pool that cannot take them: this process probes them all
            for _ in range(jobs):
                pool.submit(int)
            with self.lock:
                for i in range(len(chunks) - 1, self.taken - 1, -1):
                    self.futures[i] = pool.submit(probe_paths, chunks[i])
                self.taken = len(chunks)

    def take(self, i: int) -> Any:
        """Chunk ``i`` for this process: None when it is its own to probe, else the future of the pool's."""
        with self.lock:
            if i >= self.taken:         # not handed out (nor will it be)
                self.taken = i + 1
                return None
            return self.futures[i]


# A split log's ranges: small enough that loading the first overlaps parsing the next ones, large enough
# that a worker's fixed cost per range (the chunk at its start and end) stays small.  The first ones are
# smaller (FIRST_RANGE_BYTES, then doubling): the loader starts sooner; so are the last ones: the loader
# is the slower side, and what it has left when the workers are done is its serial end.  Measured on the
# 445 MB log (6 paired runs): ranges of 32 MB 3.33 s, of 64 MB 3.46 s (16 MB: 3.47 s).
RANGE_BYTES = 32 * 1024 * 1024
FIRST_RANGE_BYTES = 16 * 1024 * 1024


def range_targets(start: int, size: int, jobs: int) -> list[int]:
    """Where to cut ``size`` bytes from ``start``: ranges growing from FIRST_RANGE_BYTES to at most
    RANGE_BYTES, and at least ``2 * jobs`` of them (every worker busy); where the log is large enough, the
    last ones shrink again as the first grew."""
    step = min(RANGE_BYTES, max(size // max(jobs * 2, 1), 1))
    ramp, piece = [], min(FIRST_RANGE_BYTES, step)
    while piece < step:
        ramp.append(piece)
        piece *= 2
    middle = size - 2 * sum(ramp)
    if middle < step:                               # growing only
        targets, at, piece = [], start, min(FIRST_RANGE_BYTES, step)
        while at + piece < start + size:
            at += piece
            targets.append(at)
            piece = min(piece * 2, step)
        return targets
    n = -(-middle // step)                          # (none larger than step)
    sizes = ramp + [middle // n + (k < middle % n) for k in range(n)] + ramp[::-1]
    return list(accumulate(sizes[:-1], initial=start))[1:]


class _Ranges:
    """The byte ranges of split logs, submitted in file order with at most ``window`` of them parsed ahead
    of the loader (their spilled batches wait on disk).  The lines of each range, where the next one's line
    numbers start, are counted by a thread of their own from the start, off the loader's path (counted by the
    loader, before the first range's rows could be loaded, they held it back 0.1 s on a 445 MB log)."""

    def __init__(self, pool: _Pool, tmp: Path, window: int) -> None:
        self.pool, self.tmp, self.window = pool, tmp, window
        self.todo: list[FileJob] = []
        self.first: set[int] = set()            # indices of the first range of each log (its line is known)
        self.lines: dict[int, Any] = {}         # range index -> future of the lines of the range before it
        self.submitted: list[Any] = []          # futures not yet taken, in order
        self.next = 0
        self.counted = 0                        # ranges before this one have their first line
        self.whole: _Whole | None = None        # the whole files' tasks, handed out beside these
        self._counter: ThreadPoolExecutor | None = None

    def add(self, p: Plan, jobs: int) -> int:
        """Queue the ranges of one log (their lines counted meanwhile); return how many there are."""
        job = p.job()
        pieces = _pieces(job, range_targets(job.start_offset, _end(job) - job.start_offset, jobs))
        first = len(self.todo)
        self.first.add(first)
        self.todo += pieces
        if len(pieces) > 1 and self._counter is None:
            self._counter = ThreadPoolExecutor(1, "hangforensics-count")
        for k in range(first + 1, len(self.todo)):
            self.lines[k] = self._counter.submit(count_lines, self.todo[k - 1])  # type: ignore[union-attr]
        return len(pieces)

    def close(self) -> None:
        """Stop counting (what is being counted ends first: a window of the file)."""
        if self._counter is not None:
            self._counter.shutdown(wait=True, cancel_futures=True)

    def fill(self) -> None:
        while self.next < len(self.todo) and len(self.submitted) < self.window:
            k = self.next
            self.count(k)
            self.submitted.append(self.pool.submit(parse_to_ipc, self.todo[k], str(self.tmp / f"r{k}")))
            self.next += 1
        if self.next == len(self.todo) and (self.whole is None or self.whole.all_submitted()):
            self.pool.no_more_tasks()

    def all_submitted(self) -> bool:
        return self.next == len(self.todo)

    def count(self, upto: int) -> None:
        """The first lines of the ranges up to ``upto``."""
        while self.counted < upto:
            self.counted += 1
            if self.counted not in self.first:
                prev = self.todo[self.counted - 1]
                self.todo[self.counted].start_line = prev.start_line + self.lines.pop(self.counted).result()

    def take(self, count: int) -> Iterator[Any]:
        """The next ``count`` ranges' futures, in order, the window refilled as each is taken."""
        for _ in range(count):
            self.fill()
            fut = self.submitted.pop(0)
            yield fut
            self.fill()


class _Pool(ProcessPoolExecutor):
    """A process pool whose workers can be let go as soon as the last task is handed out: they exit when
    it is done, while the parent still loads their output (measured: 0.4 s less at the end of a large
    ingest), and are joined (or terminated) at the end all the same."""

    _let_go: tuple[list[Any], Any] | None = None

    def no_more_tasks(self) -> None:
        if self._let_go is None:
            self._let_go = (list((self._processes or {}).values()), self._executor_manager_thread)
            self.shutdown(wait=False)

    def finished(self) -> bool:
        """Every task handed out (``no_more_tasks``) and done: the workers have exited."""
        return self._let_go is not None and not any(proc.is_alive() for proc in self._let_go[0])

    def workers(self) -> tuple[list[Any], Any]:
        """The worker processes and the thread that manages them (after ``no_more_tasks`` too)."""
        if self._let_go is not None:
            return self._let_go
        return list((getattr(self, "_processes", None) or {}).values()), getattr(self, "_executor_manager_thread", None)


@contextlib.contextmanager
def worker_pool(jobs: int, scanner: bool = False) -> Iterator[_Pool]:
    """A pool of parser processes that leaves nothing behind: on success every worker is joined; on an
    error, Ctrl-C or an abandoned ingest the workers are terminated first; and the fork server and the
    resource tracker that it starts are stopped too (a nightly cron job must not leave processes).

    Workers are forked by the ``fork_server`` (``scanner``: with the compiled scanner loaded, for plain
    server logs), started here unless it runs already, so that it loads while the parent splits the logs."""
    with _workers_ignore_ctrl_c():          # the server's environment (polars' threads), which workers inherit
        ctx = fork_server.context(scanner)
    with _semaphores_outlive_the_tracker():
        pool = _Pool(max_workers=jobs, mp_context=ctx, initializer=fork_server.die_with_parent)
    clean = False
    try:
        yield pool
        clean = True
    finally:
        procs, manager = pool.workers()
        table = getattr(pool, "_processes", None) or {}     # (the executor's own: shutdown drops its name)
        if not clean:
            for proc in procs:
                with contextlib.suppress(Exception):
                    proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        while manager is not None and manager.is_alive():
            manager.join(0.2)
            if _lost_a_worker(pool, procs):
                _kill_all(procs, table)
        for proc in procs:
            proc.join()
        # the pool's queues hold named semaphores: release them before the tracker that watches them goes
        # (else it warns of "leaked semaphore objects" as it stops); the manager thread refers to them too
        for holder in (pool, manager):
            for name in ("_call_queue", "_result_queue", "_executor_manager_thread_wakeup", "call_queue",
                         "result_queue", "thread_wakeup"):
                if hasattr(holder, name):
                    setattr(holder, name, None)
        pool._let_go = None
        del procs, manager
        gc.collect()
        fork_server.stop()
        stop_resource_tracker()


def _lost_a_worker(pool: _Pool, procs: list[Any]) -> bool:
    """Whether a worker of ``pool`` died (an OOM killer's SIGKILL): the pool is broken."""
    return bool(getattr(pool, "_broken", False)) or any(proc.exitcode not in (None, 0) for proc in procs)


def _kill_all(procs: list[Any], table: dict[Any, Any]) -> None:
    """Kill every worker of a broken pool: the others may wait for ever on a queue lock the dead one held, and
    CPython's manager thread, which joins them, signals only those it knew of when it saw the death (not one
    it started as the death came: measured, a scan's pool that hung at its end)."""
    with contextlib.suppress(RuntimeError):             # (the manager thread may change the table meanwhile)
        procs = [*procs, *list(table.values())]
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.kill()


@contextlib.contextmanager
def _semaphores_outlive_the_tracker() -> Iterator[None]:
    """The pool's named semaphores, created in here, tolerate being unlinked before their finalizer runs.

    After Ctrl-C the interrupted frames still hold the pool's queues, so their semaphores outlive the
    resource tracker we stop; it unlinks them as it exits, and their finalizers at interpreter exit would
    print a FileNotFoundError traceback each (or, unregistering, start a new tracker)."""
    from multiprocessing import synchronize

    original = synchronize.SemLock.__dict__["_cleanup"]

    def cleanup(name: str) -> None:
        try:
            synchronize.sem_unlink(name)
        except FileNotFoundError:
            return                      # the stopped tracker unlinked it already
        from multiprocessing.resource_tracker import unregister

        unregister(name, "semaphore")

    synchronize.SemLock._cleanup = staticmethod(cleanup)  # type: ignore[method-assign]
    try:
        yield
    finally:
        synchronize.SemLock._cleanup = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _workers_ignore_ctrl_c() -> Iterator[None]:
    """Block SIGINT while worker processes start, with polars on one thread each.  Forked by the fork server,
    workers ignore SIGINT as it does (``fork_server``); spawned ones (no fork server) inherit the blocked
    signal: either way a Ctrl-C (sent to the whole process group) stops the parent alone, which then
    terminates them, and a Ctrl-C pressed meanwhile reaches the parent as soon as they have started."""
    with fork_server.one_polars_thread():
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def stop_resource_tracker() -> None:
    """Stop multiprocessing's resource tracker process (it would otherwise live as long as we do)."""
    from multiprocessing import resource_tracker

    tracker = getattr(resource_tracker, "_resource_tracker", None)
    stop = getattr(tracker, "_stop", None)
    if stop is not None:
        with contextlib.suppress(Exception):
            stop()


def join_ranges(ranges: Iterable[Iterator[tuple[str, Any]]]) -> Iterator[tuple[str, Any]]:
    """The batches of a split log's ranges (each a batch generator returning its FileOutcome) in file order,
    with checkpoints and totals made cumulative."""
    from ..parsers.sglang.sglang_patterns import newest_release  # (no polars: the loader needs none)

    done = FileOutcome()
    release = None
    for batches in ranges:
        result: list[FileOutcome] = []
        for table, rows in with_result(batches, result):
            if table == CHECKPOINT:
                rows = FileOutcome(done.lines + rows.lines, done.unparsed + rows.unparsed, rows.read_bytes)
            yield table, rows
        last = result[0]
        notes = done.notes
        notes.merge(last.notes)
        done = FileOutcome(done.lines + last.lines, done.unparsed + last.unparsed, last.read_bytes, notes=notes,
                           envelope=last.envelope)
        release = newest_release(release, last.release)
    done.release = release
    return done


def _read_ipc(manifest: list[tuple[str, str]], outcome: FileOutcome):
    if outcome.status.startswith("error:"):
        raise InputError(outcome.status[len("error: "):])
    import pyarrow as pa

    for table, path in manifest:
        if table == CHECKPOINT:
            yield table, FileOutcome(*json.loads(path))
            continue
        if isinstance(path, bytes):             # a small batch, returned inline
            yield table, rows_inline(path)
            continue
        source = pa.memory_map(path)            # the batch is read in place (zero-copy) and loaded
        rows = pa.ipc.open_file(source).read_all()
        yield table, rows
        del rows
        source.close()
        os.unlink(path)
    return outcome
