"""Parsing one file (pure: a read job in, row batches out), dispatched by the file's kind."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ..capture.manifest import ingest_rank
from ..parsers import gpu
from ..parsers.capture import process_snapshot
from ..parsers.capture.capture_errors import capture_error_reason
from ..parsers.linemap import LineMap
from ..parsers.stacks import faulthandler, gdb, native_trace, pyspy
from ..parsers.stacks.stackrows import dump_rows, rank_from_place
from ..readers.envelopes import EnvelopeStack
from ..readers.kinds import CAPTURE_KINDS, REPORTER_KINDS, STACK_KINDS
from ..readers.layout import EvidenceFile
from ..readers.logfile import CHUNK_BYTES, HELD_BACK_NOTE, iter_chunks
from ..readers.payload import TIMED_LAYERS, Payload, PayloadReader, hold_point, read_payload
from ..store.schema import LOADED_TABLES
from . import collective_parse
from .jobs import CHECKPOINT, FileJob, FileOutcome
from .torch_lines import torch_records


# -- parsing (pure: files in, row batches out) ------------------------------------------------------
def parse_file(job: FileJob) -> Iterator[tuple[str, Any]]:
    """Yield (table, rows) batches for one file; the generator's return value is a FileOutcome."""
    import polars as pl  # parsing needs polars; planning an unchanged fleet does not
    f = EvidenceFile(job.engine, Path(job.abs_path), job.rel_path, 0, "")
    out = FileOutcome()
    if job.kind == "server_log":
        for parsed, resumable in _parse_log(f, job, out):
            for table in LOADED_TABLES:
                rows = parsed.tables.get(table)
                if rows is not None and (rows.height if isinstance(rows, pl.DataFrame) else rows):
                    yield table, rows
            if resumable:                     # whole records so far, nothing held back by the envelope
                yield CHECKPOINT, FileOutcome(out.lines, out.unparsed, out.read_bytes)
    elif job.kind in STACK_KINDS:
        yield from _parse_stacks(f, job.kind, job.mtime, out, job.envelope, job.year_near)
    elif job.kind in REPORTER_KINDS:
        from .hand_parse import parse_reporter_file
        yield from parse_reporter_file(f, job.kind, out, job.envelope)
    elif job.kind == "capture_error":
        yield from _parse_capture_error(f, out, job.envelope)
    elif job.kind == "gpu_samples":
        yield from _parse_gpu(f, out, job.envelope)
    elif job.kind in CAPTURE_KINDS:
        from .bundles import parse_bundle_json
        yield from parse_bundle_json(f.engine, f.abs_path, f.rel_path, job.kind, out)
    elif job.kind == "flight_recorder":
        yield from collective_parse.parse_flight_recorder_file(f, out)
    elif job.kind == "nccl_ras":
        yield from collective_parse.parse_ras_file(f, out, job.envelope, job.year_near)
    elif job.kind == "fr_trace":
        yield from collective_parse.parse_fr_trace_file(f, out, job.envelope, job.year_near)
    elif job.kind == "process_snapshot":
        yield from _parse_process_snapshot(f, out, job.envelope)
    elif job.kind == "unknown":
        out.envelope = job.envelope.name if job.envelope is not None else None
        yield from _parse_unknown(f, out)
        out.notes.extra.append(f"no known evidence format (not an SGLang/vLLM/torch log, stack dump or "
                               f"nvidia-smi CSV): its {out.lines} line(s) are kept in unparsed")
    elif job.kind == "binary":
        out.notes.extra.append(f"binary content ({job.abs_path.stat().st_size} bytes): not read as text")
    elif job.kind == "empty":
        out.notes.extra.append("empty file")
    return out


def _parse_log(f: EvidenceFile, job: FileJob, out: FileOutcome) -> Iterator[tuple[Any, bool]]:
    """Parse a server log chunk by chunk behind its envelope (``readers.payload``): chunks end at record starts
    behind it, so each one is whole records; yields (parsed, resumable): ``out`` (read_bytes, lines) is a
    resume point after a resumable one.  At the end of a live file, lines the envelope holds back (a CRI
    ``P`` run without its ``F``) are left for the next read, which resumes where they begin."""
    from ..parsers.sglang.sglang_fast import (  # (numba: only for a large read)
        ScanGroup,
        _lines,
        scan_min_bytes,
        scanner,
    )
    from ..parsers.sglang.sglang_log import FileContext

    mtime = f.abs_path.stat().st_mtime
    reader = PayloadReader.for_file(f.abs_path, mtime, job.envelope, resumed=job.start_offset > 0,
                                    year_near=job.year_near)
    out.envelope = reader.stack.name
    ctx = FileContext.of_file(f.engine, f.rel_path, mtime, job.year_near)
    out.read_bytes = job.start_offset
    starts: list[tuple[int, int]] = []       # (first line, byte offset) of each chunk
    next_line = job.start_line
    plain = reader.unwrapper is None         # a plain log's lines stay one polars column, never Python strings,
    column = plain or reader.columnar()      # and so do those behind an envelope unwrapped as a column
    # a plain read (a large one where the scanner is not loaded yet), or one behind an envelope unwrapped as a
    # column: the compiled scanner takes batch and access lines (sglang_fast).  It reads the same chunks as
    # the general parser (CHUNK_BYTES, cut at the same places): what a chunk's records say depends on where
    # it starts (its head, its first records).
    # behind prefixes the scanner's side cuts (``envelope_cut``: kubectl, CRI, compose, a process's tag...) the
    # chunk's own bytes are read, not its lines decoded, unwrapped and joined again (also where the column
    # cannot read them: a time inside an untimed layer, whose lines are otherwise read one by one)
    cut = None if plain else _cut_layers(reader)
    scan = (column or cut is not None) and _read_size(job) >= scan_min_bytes() and scanner() is not None
    group = ScanGroup(ctx) if scan else None
    cut = cut if scan else None
    for chunk in iter_chunks(f.abs_path, job.start_offset, job.start_line, records=True, end_offset=job.end_offset,
                             notes=out.notes, hold_partial=job.hold_partial, record_start=reader.record_start(),
                             column=("raw" if scan and (plain or cut is not None) else column),
                             chunk_bytes=CHUNK_BYTES):
        starts.append((chunk.first_line, max(out.read_bytes, out.notes.leading_nul_bytes)))
        if group is not None and (chunk.raw is not None or not plain):
            if plain:                                           # the scanner splits the bytes itself
                before, done = group.add(chunk.raw, chunk.first_line)
                if group.split is not None:                     # (and counts the lines: the reader need not)
                    chunk.counted(group.split)
            else:                                               # the payload's, behind the envelope
                got = group.add_cut(chunk.raw, chunk.first_line, cut, reader.timed, reader.unwrapper.years) \
                    if cut is not None and chunk.raw is not None and reader.carried_from() is None else None
                if got is not None:
                    before, done = got
                    if group.split is not None:
                        chunk.counted(group.split)
                    reader.passed(chunk.first_line + chunk.count - 1)
                else:
                    lines = chunk.column if chunk.raw is None else _lines(chunk.raw)
                    before, done = _scan_payload(group, reader.feed(lines, chunk.first_line), lines, ctx)
            # the group before this chunk (it could not join it): a resume point where this chunk begins
            yield from _counted(before, ctx, out, reader.carried_from() is None)
        else:                                                   # (a group so far comes first)
            done = group.flush() if group is not None else []
            done.append(_parse_payload(reader.feed(chunk.column if column else chunk.lines, chunk.first_line), ctx))
        out.read_bytes = chunk.end_offset
        next_line = chunk.first_line + chunk.count
        yield from _counted(done, ctx, out, reader.carried_from() is None)
    if group is not None:
        yield from _counted(group.flush(), ctx, out, True)
    held = hold_point(f.abs_path, reader, starts) if job.hold_partial and reader.can_hold() else None
    if held is not None:
        out.read_bytes = held
        out.notes.extra.append(f"{HELD_BACK_NOTE} behind the {reader.stack.name} envelope (a split record "
                               f"without its end): lines from {reader.carried_from()} on are left for the next ingest")
    elif reader.carried_from() is not None:
        yield from _counted([_parse_payload(reader.feed([], next_line, final=True), ctx)], ctx, out, True)


def _cut_layers(reader: PayloadReader) -> Any:
    """The codes of the layers the scanner's side cuts from the file's bytes (``reader``'s column key, or its
    stack's line-for-line layers with one time among them), or None where one of them is not (a terminal's
    colours; docker's JSON or a year-less time around another layer; a paste's layers)."""
    import numpy as np

    from ..parsers.sglang.scan_layout import ALONE, LAYER_CODES

    if reader.unwrapper is None:
        return None
    key = reader.unwrapper.columnar
    if key is None:             # (a stack the column cannot read: its layers by name, each one line for one)
        stack = reader.stack
        if any(stack.params) or not set(stack.layers) <= LINE_FOR_LINE or \
                sum(n in TIMED_LAYERS for n in stack.layers) != 1:
            return None
        key = "+".join(stack.layers)
    if any(k not in LAYER_CODES for k in key.split("+")):
        return None
    codes = np.array([LAYER_CODES[k] for k in key.split("+")], np.int64)
    return None if len(codes) > 1 and codes[0] in ALONE else codes


# layers that turn each line into one payload line, whatever lines surround it, whose composition the scanner's
# side cuts from the bytes though the column does not read it (a time inside an untimed layer: compose's
# column around kubectl's times)
LINE_FOR_LINE = frozenset({"kubectl", "cri", "compose", "proc_tag"})


def _scan_payload(group: Any, pay: Payload, lines: Any, ctx: Any) -> tuple[list[Any], list[Any]]:
    """``ScanGroup.add`` of a chunk's payload behind an envelope unwrapped as a column (``lines``: the chunk's
    own), with the envelope's times; a chunk the envelope could not unwrap as a column (one payload line per
    physical line) is read by the general parser after the group so far.  Returns (before, done) as ``add``."""
    import polars as pl

    # (a payload of no SGLang or access line, torch's glog lines behind kubectl: nothing for the scanner, whose
    # pass over it cost some 11 % more; either may start with a process's tag, which the scanner reads)
    raw = _payload_bytes(pay) if isinstance(pay.lines, pl.Series) and pay.lines.str.contains(_SCANNABLE_HEAD).any() \
        else None
    if raw is None:
        return group.flush(), [_parse_payload(pay, ctx)]
    return group.add(raw, pay.first_line, pay.collected_ts, lines)


# a line the scanner may read: an SGLang record's prefix or an access line without one (a vLLM API server's),
# maybe after a process's tag (a cheap anchored test)
_SCANNABLE_HEAD = r"^(?:\([^)]*\)\s*)?(?:\[[0-9]{4}-|(?:INFO|WARNING|ERROR):\s)"


def _payload_bytes(pay: Payload) -> bytes | None:
    """A payload unwrapped as a column as the scanner reads a plain chunk: its lines, each ended by a newline
    (None: not a column, or a line ending in CR, which the scanner would take for a CRLF's).  Its times are
    a column too, or none (an envelope without times of its own)."""
    import polars as pl

    lines = pay.lines
    if not isinstance(lines, pl.Series) or not (pay.collected_ts is None or isinstance(pay.collected_ts, pl.Series)) \
            or not len(lines) or lines.str.ends_with("\r").any():
        return None
    return (lines.str.join("\n").item() + "\n").encode()


def _parse_payload(pay: Payload, ctx: Any) -> Any:
    """Parse one payload batch of a log (counted by ``_counted``: physical lines)."""
    from ..parsers.sglang.sglang_log import Parsed, parse_chunk

    if pay.plain:
        return parse_chunk(pay.lines, pay.first_line, ctx)
    parsed = parse_chunk(pay.lines, pay.first_line, ctx, pay.line, pay.collected_ts) if len(pay.lines) else Parsed()
    un = parsed.tables.get("unparsed")
    firsts = un.get_column("line").to_list() if un is not None else []
    parsed.tables["unparsed"] = _unparsed_frame(pay.unparsed_rows(ctx.engine, ctx.path, firsts))
    parsed.lines, parsed.unparsed = pay.physical, parsed.tables["unparsed"].height
    return parsed


def _counted(done: list[Any], ctx: Any, out: FileOutcome, resumable: bool) -> Iterator[tuple[Any, bool]]:
    """Parsed batches with their counts and notes added to ``out``, as ``_parse_log`` yields them: only the
    last may be a resume point (``out.read_bytes`` is past them all)."""
    from ..parsers.sglang.sglang_patterns import newest_release

    for k, parsed in enumerate(done):
        out.release = ctx.release = newest_release(out.release, parsed.release)
        out.lines += parsed.lines
        out.unparsed += parsed.unparsed
        notes = out.notes
        notes.interleaved += parsed.interleaved
        notes.dated_by_previous += parsed.dated_by_previous
        notes.dated_by_envelope += parsed.dated_by_envelope
        if parsed.backwards:
            notes.backwards += parsed.backwards
            notes.largest_back = max(notes.largest_back, parsed.largest_back)
        yield parsed, resumable and k == len(done) - 1


def _read_size(job: FileJob) -> int:
    end = job.end_offset if job.end_offset is not None else job.abs_path.stat().st_size
    return end - job.start_offset


def _unparsed_frame(rows: list[dict]) -> Any:
    import polars as pl

    return pl.DataFrame(rows, schema={"engine": pl.String, "path": pl.String, "line": pl.Int64, "text": pl.String})


# Parser of each stack-dump kind (see evidence.detect_kind); each returns a pyspy.Dump.
STACK_PARSERS: dict[str, Callable[[list[str], int], pyspy.Dump]] = {
    "pyspy_dump": pyspy.parse_dump,
    "pyspy_json": pyspy.parse_json,
    "gdb_dump": gdb.parse_gdb,
    "faulthandler_dump": faulthandler.parse_faulthandler,
    "native_trace": native_trace.parse_trace,
}


def _parse_stacks(f: EvidenceFile, kind: str, mtime: float, out: FileOutcome,
                  envelope: EnvelopeStack | None = None, year_near: float | None = None
                  ) -> Iterator[tuple[str, list[dict]]]:
    """A standalone stack dump: threads and frames; every line it does not consume is kept in ``unparsed``
    (``year_near``: ``FileJob.year_near``, for the year-less lines around it)."""
    pay, out.read_bytes = read_payload(f.abs_path, out.notes, envelope, mtime, year_near)
    out.envelope = pay.stack_name
    dump = STACK_PARSERS[kind](pay.lines, 1)
    # captures carry no time of their own: a bundle's manifest says when each was taken, else the file's mtime
    from .bundles import capture_dump
    found = capture_dump(f.abs_path, f.rel_path)
    record = found[1] if found is not None else None
    ts = record.time.replace(tzinfo=None) if record is not None and record.time is not None else None
    ts_basis = "manifest" if ts is not None else "mtime"
    ts = ts or datetime.fromtimestamp(mtime)
    stacks: list[dict] = []
    frames: list[dict] = []
    # The process's rank when its title does not say it (JSON, gdb and faulthandler dumps carry no
    # title; a torch rank's title is a plain command line): the capture manifest's label (its RANK), else
    # the file's place (pyspy/rank3.txt) when the dump is of one process.
    one_process = len({p.pid for p in dump.processes}) <= 1 and not any(p.parent_pid for p in dump.processes)
    place_rank = ""
    if record is not None and one_process:
        place_rank = ingest_rank(record.rank, record.role, record.pid) or ""
    if not place_rank and one_process:
        place_rank = rank_from_place(f.rel_path, f.engine) or ""
    dump_rows(dump, f"{f.engine}:{f.rel_path}", f.engine, f.rel_path, ts, place_rank, "standalone", stacks, frames,
              ts_basis=ts_basis)
    events = _pyspy_headers(pay.lines, dump, f) if kind == "pyspy_dump" else []
    if not pay.plain:                            # payload lines -> the file's physical lines
        assert pay.line is not None
        LineMap(1, pay.line, pay.collected_ts).dicts(stacks, ("line", "line_end"), collected=True)
        LineMap(1, pay.line, pay.collected_ts).dicts(events, ("line", "line_end"), collected=True)
    # a torch C++ exception trace's header holds the watchdog's message ('  what():  [PG 1 Rank 7] ...'): the
    # same evidence as the glog line it repeats, read as that record (its line stays the dump's)
    what = [[i] for i, s in enumerate(pay.lines) if "what()" in s] if kind == "native_trace" else []
    torch, _ = torch_records(pay, what, f, mtime, year_near)
    # Accounting by construction: a line is parsed only if the parser consumed it.
    un = pay.unparsed_rows(f.engine, f.rel_path, [pay.at(i) for i in range(len(pay.lines)) if i not in dump.consumed])
    out.lines, out.unparsed = pay.physical, len(un)
    if un:
        out.notes.extra.append(f"{len(un)} line(s) outside the dump grammar (cut off or interleaved output?) "
                               f"kept in unparsed")
    if any(s.get("garbled") for s in stacks):
        out.notes.extra.append("interleaved dump output: only frames that are certain were kept")
    out.notes.extra.extend(dump.notes)          # what the parser knows of the file that its rows cannot hold
    if any(s.get("fragment") == "continuation" for s in stacks):
        out.notes.extra.append("starts mid-dump (a later part, no header): its first frames are an unknown "
                               "thread's until joined with the part before it (stack_joins)")
    yield "stacks", stacks
    yield "frames", frames
    if events:
        yield "events", events
    yield from torch.items()
    yield "unparsed", un


# The record SGLang's watchdog logs before a py-spy dump of its own process (sglang-formats.md §3.3), copied
# without its log prefix: 'Pyspy dump for PID N:' (0.4.6-0.5.10), 'Pyspy dump for PID N (py-spy dump ...):'.
PYSPY_HEADER_RE = re.compile(r"^Pyspy dump for PID (\d+)( \(.*\))?:\s*$")


def _pyspy_headers(lines: list[str], dump: pyspy.Dump, f: EvidenceFile) -> list[dict[str, Any]]:
    """The 'Pyspy dump for PID N:' lines of a dump file, as the ``pyspy_dump`` events they are (consumed:
    parsed, not unparsed).  Undated (the file's time is not when the line was printed).  Its rank is the one
    that printed it: in the old form only the scheduler's own watchdog printed it, on its own pid, so the
    rank is the dumped process's title's; the 0.5.23 form (the command in parentheses) is also printed by
    the main process for every scheduler on a crash, so its printer is not known (no rank)."""
    titles = {p.pid: p.title for p in dump.processes if p.pid is not None}
    out = []
    for i, text in enumerate(lines):
        m = PYSPY_HEADER_RE.match(text)
        if m is None or i in dump.consumed:
            continue
        pid = int(m.group(1))
        title = titles.get(pid)
        rank = (pyspy.rank_from_title(title) or "") if title and m.group(2) is None else ""
        dump.consumed.add(i)
        out.append({"engine": f.engine, "path": f.rel_path, "line": i + 1, "line_end": i + 1, "ts": None,
                    "rank": rank, "kind": "pyspy_dump", "message": text.strip()[:2000],
                    "attrs": json.dumps({"pid": pid, "native": "--native" in text, "capture": "standalone"})})
    return out


def _parse_capture_error(f: EvidenceFile, out: FileOutcome,
                         envelope: EnvelopeStack | None = None) -> Iterator[tuple[str, list[dict]]]:
    """A failed capture: its text is kept verbatim (in ``unparsed``: it holds no stack), the reason in status."""
    pay, out.read_bytes = read_payload(f.abs_path, out.notes, envelope, None)
    out.envelope = pay.stack_name
    un = pay.unparsed_rows(f.engine, f.rel_path, [pay.at(i) for i in range(len(pay.lines))])
    out.lines, out.unparsed = pay.physical, len(un)
    out.status = capture_error_reason(pay.lines)
    yield "unparsed", un


def _parse_gpu(f: EvidenceFile, out: FileOutcome, envelope: EnvelopeStack | None = None) -> Iterator[tuple[str, Any]]:
    reader = PayloadReader.for_file(f.abs_path, f.abs_path.stat().st_mtime, envelope)
    out.envelope = reader.stack.name
    header: str | None = None
    next_line = 1
    for chunk in iter_chunks(f.abs_path, notes=out.notes):
        out.read_bytes = chunk.end_offset
        next_line = chunk.first_line + len(chunk.lines)
        header = yield from _gpu_batch(f, reader.feed(chunk.lines, chunk.first_line), header, out)
    yield from _gpu_batch(f, reader.feed([], next_line, final=True), header, out)


def _gpu_batch(f: EvidenceFile, pay: Payload, header: str | None,
               out: FileOutcome) -> Generator[tuple[str, Any], None, str | None]:
    """Samples of one payload batch; returns the CSV header (later batches have the same columns)."""
    lines, first = pay.lines, pay.first_line
    if not lines and not pay.dropped:
        return header
    lm = None if pay.line is None else LineMap(first, pay.line)
    if header is None and lines:
        header = lines[0] if gpu.HEADER_RE.match(lines[0]) else ""
    elif header and lines:
        lines, first = [header, *lines], first - 1
        lm = lm and LineMap(first, [0, *lm.lines])
    samples, unparsed = gpu.parse_samples(lines, first, f.engine, f.rel_path)
    if lm is not None:                        # payload lines -> the file's physical lines
        samples = lm.frame(samples)
        firsts = lm.frame(unparsed).get_column("line").to_list()
        unparsed = _unparsed_frame(pay.unparsed_rows(f.engine, f.rel_path, firsts))
    out.lines += pay.physical
    out.unparsed += unparsed.height
    yield "gpu_samples", samples
    yield "unparsed", unparsed
    return header


def _parse_process_snapshot(f: EvidenceFile, out: FileOutcome,
                            envelope: EnvelopeStack | None = None) -> Iterator[tuple[str, list[dict]]]:
    """A top / ps snapshot: one process_samples row per process or thread row; times kept as printed."""
    pay, out.read_bytes = read_payload(f.abs_path, out.notes, envelope, f.abs_path.stat().st_mtime)
    out.envelope = pay.stack_name
    snap = process_snapshot.parse_snapshot(pay.lines, 1)
    rows = [{"engine": f.engine, "path": f.rel_path, **r} for r in snap.rows]
    if not pay.plain:                            # payload lines -> the file's physical lines
        assert pay.line is not None
        LineMap(1, pay.line, pay.collected_ts).dicts(rows)
    un = pay.unparsed_rows(f.engine, f.rel_path, [pay.at(i) for i in snap.unmatched])
    out.lines, out.unparsed = pay.physical, len(un)
    if any(r["clock"] == "time_of_day" for r in rows):
        out.notes.extra.append("process snapshot dated by a time of day only (top's header): not aligned "
                               "with the logs, its day and zone are unknown")
    yield "process_samples", rows
    yield "unparsed", un


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
