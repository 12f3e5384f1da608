"""Small whole server logs read several at a time: the files of a batch parsed by one call of the parsers.

A call of the general parser costs some 45 polars queries whatever its lines: measured on a fleet's logs of
15-300 KB, 12 ms of fixed cost per file against 12-30 ms per MB, so a fleet of small engines spent most of
its parse time there.  A batch concatenates the payload lines of files that cannot change what each other
says (each file's lines numbered after the files before it), reads them once, and splits the rows back by
those line ranges.  Plain logs are read as ``sglang_fast.ScanGroup`` reads each alone: the compiled scanner
types their bulk lines in slices of each file, the general parser reads the lines it leaves of all the files
in one call (``_scan_together``); logs behind an envelope, or where the scanner cannot run, go to the general
parser whole (``_parse_together``).  Files cannot change what each other says because:

- no record spans two files: the parser gives each file its own head (``parse_chunk(files=)``), the lines
  before its first record, which start or continue no record of the file before, as when the file is read
  alone (a paste that starts inside a traceback, a headerless py-spy part, a bare leak warning);
- no time is carried from one to the other: the parser fills times (glog's year, an undated record's, a
  dump's) from the nearest dated record of the same file, else from that file's modification time, and dates
  an access line without a time by a record of its own file (``parse_chunk(files=, references=)``);

and what the parser says of a chunk as a whole (its release, the clock's steps back, the lines cut into by
another record, the access lines it dated) is worked out file by file.  An error of the joint read leaves
every file to be read as usual.  The rows are those each file's own parse gives (``tests/test_batch_parse.py``
compares them over every corpus, through the scanner and without it).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

from ..readers.logfile import CHUNK_BYTES, iter_chunks
from ..readers.payload import Payload, PayloadReader
from ..store.schema import LOADED_TABLES
from .jobs import CHECKPOINT, FileJob, FileOutcome
from .parse import _counted, _unparsed_frame
from .worker import parse_to_ipc, to_manifest

# A whole log this small may share a parse (``batchable``); a batch holds at most BATCH_BYTES of them (the
# general parser's memory grows with its chunk: a batch is one chunk at most) and BATCH_FILES.
BATCH_FILE_BYTES = 1024 * 1024
BATCH_BYTES = CHUNK_BYTES
BATCH_FILES = 32
# A plain log (no envelope) shares a parse up to one chunk of its own, and a batch of them holds up to
# PLAIN_BATCH_BYTES: the compiled scanner reads each file's bulk lines in slices of its own, and the general
# parser only the lines it leaves, a few per thousand (a fleet whose every engine logs busily: 216 logs of
# 1.5 MB each, 26 ms a parse alone, some 8 ms of it the general parser's and the chunk's fixed costs).  Where
# the scanner cannot run, the general parser reads them together only BATCH_BYTES at a time.
PLAIN_BATCH_FILE_BYTES = CHUNK_BYTES
PLAIN_BATCH_BYTES = 4 * CHUNK_BYTES

# the engine and path the joint parse writes on its rows, each file's own put in their place after
_ENGINE, _PATH = "\x00engine", "\x00path"
_ID = f"{_ENGINE}:{_PATH}:"                 # the start of a dump id the joint parse builds (engine:path:line)


@dataclass
class _Ready:
    """A file read and unwrapped, waiting for the joint parse."""

    job: FileJob
    out: FileOutcome
    pay: Payload                    # (a plain log read by the scanner: its lines made a column only if needed)
    ctx: Any                        # its FileContext
    physical: int                   # its physical lines: file k's line n is line bases[k] + n of the batch
    raw: bytes | None = None        # a plain log's bytes, valid UTF-8 (for the compiled scanner)
    # its last line when it has no newline: a chunk of its own after the rest (``iter_chunks``), and where the
    # rest ends (the resume point between them)
    tail: Payload | None = None
    rest_bytes: int = 0
    # its tail is more than a line no record takes (``_plain_tails``): parsed after the rest, with the context
    # the rest left, as ``parse._parse_log`` parses a second chunk (a payload behind an envelope only)
    tail_parsed: bool = False

    @property
    def count(self) -> int:
        """Its payload lines."""
        return _count(self.pay)

    def with_lines(self) -> _Ready:
        """Itself with its payload's lines as a column (a plain log read by the scanner has none yet)."""
        if self.pay.lines is None:
            from ..parsers.sglang.sglang_fast import _lines

            assert self.raw is not None
            self.pay.lines = _lines(self.raw)
        return self


def parse_batch_to_ipc(jobs: list[FileJob], prefix: str) -> list[tuple[list[tuple[str, Any]], FileOutcome]]:
    """Worker: the files of ``jobs`` (small whole logs), each result as ``parse_to_ipc`` gives it; those that
    can be are parsed together (the plain ones, and those behind an envelope with or without times of its
    own: their rows have the same columns), the others alone."""
    scanning = _scanner() is not None
    ready: list[_Ready | None] = []
    for job in jobs:
        try:
            ready.append(_prepared(job, lazy=scanning))
        except Exception:       # noqa: BLE001 (its own parse says what is wrong with it, as for a file alone)
            ready.append(None)
    tails = [k for k, r in enumerate(ready) if r is not None and r.tail is not None]
    for k, plain in zip(tails, _plain_tails([ready[k].tail for k in tails]), strict=True):  # type: ignore[union-attr]
        r = ready[k]
        assert r is not None
        if plain:
            continue
        if r.pay.plain:     # (a plain log alone reads its tail with the scanner's group: it is read alone)
            ready[k] = None
        else:
            r.tail_parsed = True
    groups: dict[tuple[bool, bool, bool], list[int]] = {}
    for k, r in enumerate(ready):
        if r is not None:
            groups.setdefault((r.pay.plain, r.pay.collected_ts is None, scanning and r.raw is not None), []).append(k)
    done: dict[int, list[tuple[str, Any]]] = {}
    for (_, _, scanned), members in groups.items():
        try:
            _read_together(members, scanned, ready, done)
        except Exception:       # noqa: BLE001 (each file read again alone: it fails, or not, as it would alone)
            for k in members:
                if k not in done:
                    ready[k] = None
    out = []
    for k, (job, r) in enumerate(zip(jobs, ready, strict=True)):
        if r is None:
            out.append(parse_to_ipc(job, f"{prefix}-{k}"))
            continue
        try:
            batches = done[k] if k in done else _alone(r.with_lines())
        except Exception:       # noqa: BLE001 (read again as usual: it fails, or not, as it would alone)
            out.append(parse_to_ipc(job, f"{prefix}-{k}"))
            continue
        out.append((to_manifest(batches, f"{prefix}-{k}"), r.out))
    return out


class _LeftTooMuch(Exception):
    """The scanner leaves the general parser more than BATCH_BYTES of a batch's lines (logs of few batch or
    access lines): its memory grows with them, so it reads them BATCH_BYTES of files at a time instead."""


def _read_together(members: list[int], scanned: bool, ready: list[_Ready | None],
                   done: dict[int, list[tuple[str, Any]]]) -> None:
    """The batches of the files ``members`` (indices into ``ready``, read alike) into ``done``: read by the
    scanner and the general parser together (``scanned``), else by the general parser BATCH_BYTES at a time."""
    if len(members) < 2:
        return
    if scanned:
        try:
            done.update(zip(members, _scan_together([r for k in members if (r := ready[k]) is not None]),
                            strict=True))
            return
        except _LeftTooMuch:
            pass
    for part in _chunked(members, ready):
        if len(part) > 1:
            done.update(zip(part, _parse_together([r for k in part if (r := ready[k]) is not None]), strict=True))


def _count(pay: Payload) -> int:
    """A payload's lines (a plain log's read lazily: its physical lines, one payload line each)."""
    return pay.physical if pay.lines is None else len(pay.lines)


def _chunked(members: list[int], ready: list[_Ready | None]) -> list[list[int]]:
    """``members`` (indices into ``ready``) in runs of at most BATCH_BYTES of the files' bytes, in order: what
    the general parser reads in one call."""
    parts: list[list[int]] = [[]]
    size = 0
    for k in members:
        r = ready[k]
        n = r.out.read_bytes if r is not None else 0
        if parts[-1] and size + n > BATCH_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(k)
        size += n
    return parts


def _prepared(job: FileJob, lazy: bool = False) -> _Ready | None:
    """``job``'s file read and unwrapped as ``parse._parse_log`` reads it, when it is one chunk of payload
    (None: it is parsed as usual).  ``lazy``: a plain log's lines are not made a column (the compiled scanner
    reads its bytes; ``_Ready.with_lines`` makes them when another way of reading needs them)."""
    from ..parsers.sglang.sglang_fast import _lines
    from ..parsers.sglang.sglang_log import FileContext

    if job.kind != "server_log" or job.start_offset:
        return None
    path = Path(job.abs_path)
    out = FileOutcome()
    mtime = path.stat().st_mtime
    reader = PayloadReader.for_file(path, mtime, job.envelope, year_near=job.year_near)
    out.envelope = reader.stack.name
    plain = reader.unwrapper is None
    pays: list[Payload] = []
    raws: list[bytes | None] = []
    ends: list[int] = []
    physical = 0
    # (a plain log's bytes as the scanner reads them, the lines as one column: ``_parse_log`` reads it so)
    # (a live log's unfinished last line is left for the next ingest, as ``_parse_log`` leaves it; a split
    # record the envelope carries at the end makes the file a parse of its own, which holds it back)
    for chunk in iter_chunks(path, 0, 1, records=True, end_offset=job.end_offset, notes=out.notes,
                             hold_partial=job.hold_partial, record_start=reader.record_start(),
                             column="raw" if plain else False,
                             chunk_bytes=CHUNK_BYTES):
        raw = chunk.raw
        if plain and raw is not None and lazy:
            pays.append(Payload(None, chunk.first_line, physical=chunk.count))
        else:
            lines = (_lines(raw) if raw is not None else chunk.column) if plain else chunk.lines
            pays.append(reader.feed(lines, chunk.first_line))
        if pays[-1].source is not None:
            # (the text of its unparsed lines is read back from the envelope's state after this chunk)
            pays[-1].source = copy.copy(pays[-1].source)
        raws.append(raw)
        ends.append(chunk.end_offset)
        out.read_bytes = chunk.end_offset
        physical = chunk.first_line + chunk.count - 1
    tail = None
    if len(pays) == 2 and pays[1].physical == 1 and _count(pays[1]) <= 1:
        tail = pays.pop()           # the last line without its newline, a chunk of its own (``_plain_tails``)
        if tail.lines is None:
            tail.lines = _lines(raws[-1])       # type: ignore[arg-type]
        physical -= 1
    if len(pays) != 1 or reader.carried_from() is not None or not _count(pays[0]):
        return None
    ctx = FileContext.of_file(job.engine, job.rel_path, mtime, job.year_near)
    return _Ready(job, out, pays[0], ctx, physical, raws[0], tail, ends[0])


def _plain_tails(tails: list[Payload]) -> list[bool]:
    """Whether each file's last line without its newline (``_Ready.tail``), read as a chunk of its own, is only
    a line no record takes (or one its envelope dropped): it then adds one unparsed row and nothing else
    (``_tail``), as its own parse gives.
    One that starts a record, is cut into by one or is a py-spy dump's part (a record in a chunk's head) is
    read with its file's context: behind an envelope it is parsed after the joint parse, with the context that
    left (``_Ready.tail_parsed``); a plain log is parsed alone.  All the lines classified by one call, each
    with a head of its own."""
    from ..parsers.sglang.sglang_log import _classify
    from ..parsers.sglang.sglang_records import dump_like

    # (a line the envelope dropped, Markdown's prose, leaves no payload: unparsed, nothing else)
    texts = [str(t.lines[0]) for t in tails if len(t.lines)]
    alone: dict[str, bool] = {}
    if texts:
        df = _classify(texts, files=list(range(len(texts))))
        lone = (df.get_column("kind").is_null() & (df.get_column("role") == "unparsed")
                & ~df.get_column("interleaved")).to_list()
        alone = {text: ok and not dump_like([text]) for text, ok in zip(texts, lone, strict=True)}
    return [not len(t.lines) or alone[str(t.lines[0])] for t in tails]


def _tail(r: _Ready, rest: Any) -> Any:
    """The ``Parsed`` of a file's last line without its newline: one unparsed row (``_plain_tails``), else
    (``_Ready.tail_parsed``) its own parse with the context the rest of the file (``rest``: its ``Parsed``)
    left, as ``parse._parse_log`` parses a second chunk: the rest's last time and release (the joint parse's
    facts and ``_counted``), and the dated record furthest down it, which dates an access line without a time."""
    from ..parsers.sglang.sglang_log import Parsed, last_record_ts
    from .parse import _parse_payload

    pay = r.tail
    assert pay is not None
    if r.tail_parsed:
        r.ctx.record_ts = last_record_ts([rest.tables.get(t) for t in ("http_requests", "batches", "events")],
                                         r.ctx.record_ts)
        return _parse_payload(pay, r.ctx)
    if pay.plain:
        rows, lines = [{"engine": r.job.engine, "path": r.job.rel_path, "line": pay.first_line,
                        "text": pay.lines[0]}], 1
    else:                           # (as ``parse._parse_payload``: with the envelope's own unparsed lines)
        rows, lines = pay.unparsed_rows(r.job.engine, r.job.rel_path, pay.line[:1]), pay.physical  # type: ignore[index]
    un = _unparsed_frame(rows)
    return Parsed(tables={"unparsed": un}, lines=lines, unparsed=un.height)


def _alone(r: _Ready) -> list[tuple[str, Any]]:
    """A prepared file's batches from a parse of its own (``parse._parse_payload``, as ``_parse_log`` parses a
    file of one chunk: the general parser, which gives the compiled scanner's rows)."""
    from .parse import _parse_payload

    return list(_batches(_parse_payload(r.pay, r.ctx), r))


def _parse_together(ready: list[_Ready]) -> list[list[tuple[str, Any]]]:
    """The files' (table, rows) batches, as ``parse._parse_log`` yields them for each alone, from one call of
    the general parser."""
    import numpy as np
    import polars as pl

    from ..parsers.sglang import sglang_fast
    from ..parsers.sglang.sglang_log import FileContext, parse_chunk

    ready = [r.with_lines() for r in ready]
    bases = list(accumulate((r.physical for r in ready), initial=0))
    counts = list(accumulate((len(r.pay.lines) for r in ready), initial=0))
    files = np.repeat(np.arange(len(ready), dtype=np.int32), np.diff(counts)).tolist()
    refs, near = [r.ctx.reference for r in ready], [r.ctx.reference_nearest for r in ready]
    ctx = FileContext(engine=_ENGINE, path=_PATH, default_year=ready[0].ctx.default_year, reference=refs[0])
    if ready[0].pay.plain:
        parsed = parse_chunk(pl.concat([r.pay.lines.rename("text") for r in ready]), 1, ctx, whole=False,
                             files=files, references=refs, nearest=near)
    else:
        lines = [s for r in ready for s in r.pay.lines]
        numbers = [n + b for r, b in zip(ready, bases, strict=False) for n in r.pay.line]    # type: ignore[union-attr]
        collected = None if ready[0].pay.collected_ts is None else \
            [t for r in ready for t in r.pay.collected_ts]      # type: ignore[union-attr]
        parsed = parse_chunk(lines, 1, ctx, numbers, collected, whole=False, files=files, references=refs,
                             nearest=near)
    cut = np.searchsorted(np.asarray(counts[1:]), np.asarray(parsed.interleaved_rows or [], dtype=np.int64),
                          side="right")

    def own(k: int, r: _Ready, p: Any) -> None:
        if not r.pay.plain:                 # lines and unparsed rows of the file's envelope, as _parse_payload
            un = p.tables.get("unparsed")
            firsts_un = un.get_column("line").to_list() if un is not None else []
            p.tables["unparsed"] = _unparsed_frame(r.pay.unparsed_rows(r.job.engine, r.job.rel_path, firsts_un))
            p.lines, p.unparsed = r.pay.physical, p.tables["unparsed"].height

    def facts(starts: Any, outs: list[Any]) -> None:        # chunk_facts of each file's records (all here)
        sglang_fast.files_facts(starts, [[] for _ in ready], [r.ctx for r in ready], outs)

    return _per_file(ready, parsed, bases, cut, own, facts)


def _scanner() -> Any:
    from ..parsers.sglang.sglang_fast import scanner

    return scanner()


def _scan_together(ready: list[_Ready]) -> list[list[tuple[str, Any]]]:
    """``_parse_together`` for plain logs, as ``sglang_fast.ScanGroup`` reads each alone: the compiled scanner
    types the bulk lines (batch and access lines, each file's own slices, so rows and the release's budget of
    messages are the file's), the general parser reads the other lines of all the files in one call."""
    import numpy as np
    import polars as pl

    from ..parsers.sglang import sglang_fast as fast
    from ..parsers.sglang.sglang_log import FileContext, parse_chunk

    sc = fast.scanner()
    # (a one-line file may end without its newline: the next file's first line must not be glued to it)
    raw = b"".join(r.raw if r.raw.endswith(b"\n") else r.raw + b"\n" for r in ready if r.raw is not None)
    buf = np.frombuffer(raw, np.uint8)
    text = fast._Text(sc, buf)
    starts, ends, brackets = sc.bounds(buf)
    counts = list(accumulate((r.count for r in ready), initial=0))
    if len(starts) != counts[-1]:
        raise ValueError("the scanner's lines are not the reader's")
    # each line's number in its file (the slices' rows), and in the batch (the general parser's): counts[k] + n
    local = np.arange(counts[-1], dtype=np.int64) + 1 - np.repeat(np.asarray(counts[:-1]), np.diff(counts))
    ascii_all = raw.isascii()
    slices: list[list[Any]] = []
    for k, r in enumerate(ready):
        head, mine = fast._release_records(r.ctx), []
        for a in range(counts[k], counts[k + 1], fast.SLICE_LINES):
            # (access lines without a time are the general parser's: it dates them by their own file's records)
            mine.append(fast._Slice(sc, text, starts, ends, a, min(a + fast.SLICE_LINES, counts[k + 1]), brackets,
                                    ascii_all, local, r.ctx, head, bare=False))
            head -= mine[-1].messages
        slices.append(mine)
    keep = np.concatenate([s.keep for mine in slices for s in mine])
    if int((ends[keep] - starts[keep]).sum()) > BATCH_BYTES:
        raise _LeftTooMuch
    kept = pl.from_arrow(text.arrow(starts[keep], ends[keep]))
    files = (np.searchsorted(np.asarray(counts[1:]), keep, side="right")).tolist()
    refs, near = [r.ctx.reference for r in ready], [r.ctx.reference_nearest for r in ready]
    ctx = FileContext(engine=_ENGINE, path=_PATH, default_year=ready[0].ctx.default_year, reference=refs[0])
    parsed = parse_chunk(kept, 1, ctx, line_numbers=(keep + 1).tolist(), whole=False, files=files, references=refs,
                         nearest=near)
    cut = np.asarray(files, dtype=np.int64)[np.asarray(parsed.interleaved_rows or [], dtype=np.int64)]

    def own(k: int, r: _Ready, p: Any) -> None:
        # the bulk rows with the general parser's of the same table, as ``ScanGroup.flush`` puts them
        seen = pl.Series(np.concatenate([s.seen for s in slices[k]]))
        for table in ("batches", "http_requests"):
            rows = [s.tables[table] for s in slices[k] if s.tables.get(table) is not None]
            if rows:
                p.tables[table] = fast._in_line_order(p.tables.get(table), seen, fast._concat(rows))

    def facts(starts: Any, outs: list[Any]) -> None:        # chunk_facts of each file's records
        fast.files_facts(starts, slices, [r.ctx for r in ready], outs)

    return _per_file(ready, parsed, counts, cut, own, facts)


def _per_file(ready: list[_Ready], parsed: Any, bases: list[int], cut: Any,
              own: Callable[[int, _Ready, Any], None], facts: Callable[[Any, list[Any]], None],
              ) -> list[list[tuple[str, Any]]]:
    """The joint parse's result cut back into each file's batches (``bases``: where each file's lines start in
    the batch's numbering; ``cut``: the file of each line cut into by another record); ``own`` adds to each
    file's result what the way of reading keeps per file, ``facts`` what each file's records say of it as a
    whole (from the records of all the files: _file, and the lines each file's own)."""
    import numpy as np
    import polars as pl

    from ..parsers.sglang.sglang_log import Parsed

    starts = parsed.starts
    assert starts is not None
    of = np.searchsorted(np.asarray(bases[1:], dtype=np.int64), starts.get_column("line").to_numpy(), side="left")
    tables = _split(parsed.tables, bases, [(r.job.engine, r.job.rel_path) for r in ready])
    outs = [Parsed(tables=tables[k], lines=r.count, interleaved=int((cut == k).sum()))
            for k, r in enumerate(ready)]
    starts = starts.with_columns(pl.Series("_file", of.astype(np.int32)),
                                 pl.col("line") - pl.Series(bases[:-1], dtype=pl.Int64).gather(of))
    _dated_access(starts, parsed.tables.get("http_requests"), bases, outs)
    facts(starts, outs)
    out: list[list[tuple[str, Any]]] = []
    for k, (r, p) in enumerate(zip(ready, outs, strict=True)):
        un = tables[k].get("unparsed")
        p.unparsed = un.height if un is not None else 0
        own(k, r, p)
        out.append(list(_batches(p, r)))
    return out


def _batches(p: Any, r: _Ready) -> Iterator[tuple[str, Any]]:
    """What ``parse._parse_log`` yields for a file of one chunk (and its last line without a newline): each
    chunk's tables, then the resume point after it."""
    yield from _chunk_batches(p, r, r.rest_bytes if r.tail is not None else r.out.read_bytes)
    if r.tail is not None:              # (parsed once the rest is counted: it reads the release the rest left)
        yield from _chunk_batches(_tail(r, p), r, r.out.read_bytes)


def _chunk_batches(part: Any, r: _Ready, end: int) -> Iterator[tuple[str, Any]]:
    """One chunk's tables, counted into the file's outcome, then the resume point ``end`` after it."""
    import polars as pl

    for _ in _counted([part], r.ctx, r.out, True):
        for table in LOADED_TABLES:
            rows = part.tables.get(table)
            if rows is not None and (rows.height if isinstance(rows, pl.DataFrame) else rows):
                yield table, rows
        yield CHECKPOINT, FileOutcome(r.out.lines, r.out.unparsed, end)


def _dated_access(starts: Any, access: Any, bases: list[int], outs: list[Any]) -> None:
    """The access lines each file printed without a time, as the parse of the file alone counts them: left to
    their envelope's time, or dated by a record before them in the file (those without one stay undated).
    ``starts``: the records of all the files (_file, their own lines); ``access``: the joint parse's rows."""
    import numpy as np
    import polars as pl

    if access is None or not access.height:
        return
    bare = starts.filter((pl.col("kind") == "access") & pl.col("ts_dt").is_null())
    if not bare.height:
        return
    lines = bare.get_column("line") + pl.Series(bases[:-1], dtype=pl.Int64).gather(bare.get_column("_file"))
    rows = access.filter(pl.col("line").is_in(lines.implode()))
    rows = rows.with_columns(pl.Series("_file", np.searchsorted(np.asarray(bases[1:], dtype=np.int64),
                                                                 rows.get_column("line").to_numpy(), side="left")))
    envelope = "collected_ts" in rows.columns
    counts = rows.group_by("_file").agg(
        (pl.col("collected_ts").is_not_null() if envelope else pl.lit(False)).sum().alias("env"),
        ((pl.col("collected_ts").is_null() if envelope else pl.lit(True)) & pl.col("ts").is_not_null())
        .sum().alias("prev"))
    for k, env, prev in counts.iter_rows():
        if envelope:
            outs[k].dated_by_envelope = env
        outs[k].dated_by_previous = prev


# the line columns of a row (the physical lines of the file)
_LINES = ("line", "line_end")
# the columns the placeholders of engine and path are in (http_requests names its file 'file': its 'path' is
# the request's)
_OWNER = {"engine": 0, "path": 1, "file": 1}


def _split(tables: dict[str, Any], bases: list[int], owners: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The joint parse's tables cut into each file's (``owners``: its engine and path): rows by their line (a
    frame by its dump's id), line numbers and dump ids back to the file's own, the placeholders replaced."""
    import numpy as np
    import polars as pl

    out: list[dict[str, Any]] = [{} for _ in owners]
    edges = np.asarray(bases[1:], dtype=np.int64)
    # (each table's lines and owners made its files' in one pass over all of them, then cut by file)
    base = pl.Series(bases[:-1], dtype=pl.Int64)
    names = [pl.Series([o[w] for o in owners], dtype=pl.String) for w in (0, 1)]
    dumps: dict[str, int] = {}                  # the file of each dump (its stacks come before its frames)
    for name, rows in tables.items():
        if isinstance(rows, pl.DataFrame):
            if not rows.height:
                continue
            of = pl.Series("_of", np.searchsorted(edges, rows.get_column("line").to_numpy(), side="left"))
            fixed = [(pl.col(c) - base.gather(of)).alias(c) for c in _LINES if c in rows.columns]
            fixed += [pl.when(pl.col(c) == (_ENGINE, _PATH)[w]).then(names[w].gather(of)).otherwise(pl.col(c))
                      .alias(c) for c, w in _OWNER.items() if c in rows.columns]
            for (k,), part in rows.with_columns(fixed).with_columns(of).partition_by(
                    "_of", as_dict=True, maintain_order=True, include_key=False).items():
                out[int(k)][name] = part
        elif rows:
            for row in rows:
                frame = name == "frames"            # (its line is the source code's: a frame goes by its dump)
                k = dumps[row["dump_id"]] if frame else int(np.searchsorted(edges, row["line"], side="left"))
                if name == "stacks":
                    dumps[row["dump_id"]] = k
                _own(row, bases[k], owners[k], lines=not frame)
                out[k].setdefault(name, []).append(row)
    return out


def _own(row: dict[str, Any], base: int, owner: tuple[str, str], lines: bool = True) -> None:
    """A row dict of the joint parse made its file's: its ``lines``, dump id, a cut thread's id, engine and
    path."""
    for c in _LINES if lines else ():
        if isinstance(row.get(c), int):
            row[c] -= base
    did = row.get("dump_id")
    if isinstance(did, str) and did.startswith(_ID):
        num, sep, rest = did[len(_ID):].partition("#")
        row["dump_id"] = f"{owner[0]}:{owner[1]}:{int(num) - base}{sep}{rest}"
    tid = row.get("thread_id")
    if isinstance(tid, str) and tid[:1] == "?" and tid[1:].isdigit():
        row["thread_id"] = f"?{int(tid[1:]) - base}"
    for c, w in _OWNER.items():
        if row.get(c) == (_ENGINE, _PATH)[w]:
            row[c] = owner[w]
