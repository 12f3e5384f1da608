"""Parsing one file (pure: a read job in, row batches out), dispatched by the file's kind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ..parsers import faulthandler, gdb, gpu, native_trace, process_snapshot, pyspy
from ..parsers.capture_errors import capture_error_reason
from ..parsers.stackrows import dump_rows, rank_from_place
from ..readers.kinds import CAPTURE_KINDS, STACK_KINDS
from ..readers.layout import EvidenceFile
from ..readers.logfile import detect_compose, head_text, iter_chunks
from ..store import LOADED_TABLES
from . import collective_parse
from .jobs import CHECKPOINT, FileJob, FileOutcome


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
    elif job.kind in CAPTURE_KINDS:
        from .bundles import parse_bundle_json
        yield from parse_bundle_json(f.engine, f.abs_path, f.rel_path, job.kind, out)
    elif job.kind == "flight_recorder":
        yield from collective_parse.parse_flight_recorder_file(f, out)
    elif job.kind == "nccl_ras":
        yield from collective_parse.parse_ras_file(f, out)
    elif job.kind == "process_snapshot":
        yield from _parse_process_snapshot(f, out)
    elif job.kind == "unknown":
        yield from _parse_unknown(f, out)
        out.notes.extra.append(f"no known evidence format (not an SGLang/vLLM/torch log, stack dump or "
                               f"nvidia-smi CSV): its {out.lines} line(s) are kept in unparsed")
    elif job.kind == "binary":
        out.notes.extra.append(f"binary content ({job.abs_path.stat().st_size} bytes): not read as text")
    elif job.kind == "empty":
        out.notes.extra.append("empty file")
    return out


def _parse_log(f: EvidenceFile, start_offset: int, start_line: int, out: FileOutcome,
               end_offset: int | None = None, hold_partial: bool = False) -> Iterator[Any]:
    """Parse a server log chunk by chunk; chunks end at record starts, so each one is whole records and
    ``out`` (read_bytes, lines) is a resume point after every yield."""
    head = head_text(f.abs_path).splitlines()
    from ..parsers.sglang_log import FileContext, newest_release, parse_chunk

    ctx = FileContext(engine=f.engine, path=f.rel_path,
                      default_year=datetime.fromtimestamp(f.abs_path.stat().st_mtime).year,
                      reference=datetime.fromtimestamp(f.abs_path.stat().st_mtime),
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
    # captures carry no time of their own: a bundle's manifest says when each was taken, else the file's mtime
    from .bundles import dump_time
    ts = dump_time(f.abs_path, f.rel_path)
    ts_basis = "manifest" if ts is not None else "mtime"
    ts = ts or datetime.fromtimestamp(mtime)
    stacks: list[dict] = []
    frames: list[dict] = []
    # The file's place may name the rank (pyspy/rank3.txt) when the dump is of one process and
    # its title does not (JSON, gdb and faulthandler dumps carry no process title).
    one_process = len({p.pid for p in dump.processes}) <= 1 and not any(p.parent_pid for p in dump.processes)
    place_rank = (rank_from_place(f.rel_path, f.engine) or "") if one_process else ""
    dump_rows(dump, f"{f.engine}:{f.rel_path}", f.engine, f.rel_path, ts, place_rank, "standalone", stacks, frames,
              ts_basis=ts_basis)
    # Accounting by construction: a line is parsed only if the parser consumed it.
    un = [{"engine": f.engine, "path": f.rel_path, "line": i + 1, "text": text_lines[i]}
          for i in range(len(text_lines)) if i not in dump.consumed]
    out.lines, out.unparsed = len(text_lines), len(un)
    if un:
        out.notes.extra.append(f"{len(un)} line(s) outside the dump grammar (cut off or interleaved output?) "
                               f"kept in unparsed")
    if any(s.get("garbled") for s in stacks):
        out.notes.extra.append("interleaved dump output: only frames that are certain were kept")
    if any(s.get("fragment") == "continuation" for s in stacks):
        out.notes.extra.append("starts mid-dump (a later part, no header): its first frames are an unknown "
                               "thread's until joined with the part before it (stack_joins)")
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


def _parse_process_snapshot(f: EvidenceFile, out: FileOutcome) -> Iterator[tuple[str, list[dict]]]:
    """A top / ps snapshot: one process_samples row per process or thread row; times kept as printed."""
    text_lines = _read_lines(f, out)
    snap = process_snapshot.parse_snapshot(text_lines, 1)
    rows = [{"engine": f.engine, "path": f.rel_path, **r} for r in snap.rows]
    un = [{"engine": f.engine, "path": f.rel_path, "line": i + 1, "text": text_lines[i]} for i in snap.unmatched]
    out.lines, out.unparsed = len(text_lines), len(un)
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
