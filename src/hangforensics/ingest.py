"""Ingest: evidence files -> DuckDB tables, incrementally, one transaction per file.

The ``sources`` manifest makes re-ingest idempotent: an unchanged file costs a
stat and a head hash; a file that grew is read from where the last ingest
stopped; a file whose start changed is read again from scratch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import polars as pl

from . import faulthandler, gdb, gpu, native_trace, pyspy
from .capture_errors import capture_error_reason
from .clock import align_engine_clocks
from .errors import InputError
from .evidence import STACK_KINDS, EvidenceFile, Workspace, detect_kind
from .logfile import detect_compose, head_hash, head_text, is_gzip, iter_chunks
from .progress import Progress
from .sglang_log import FileContext, Parsed, last_record_start, parse_chunk
from .stackrows import dump_rows, rank_from_place, ranks_from_pids
from .store import LOADED_TABLES, Store, physical


@dataclass
class IngestResult:
    root: Path
    engines: list[str] = field(default_factory=list)
    files_read: int = 0
    files_skipped: int = 0
    lines: int = 0
    unparsed: int = 0
    bytes: int = 0


def ingest_paths(store: Store, paths: list[Path], mode: str = "auto", progress: Progress | None = None,
                 workspace: Workspace | None = None) -> list[IngestResult]:
    """Ingest each PATH (engine folder, fleet folder, single file or archive) into ``store``."""
    own = workspace is None
    ws = workspace or Workspace()
    try:
        results = []
        for p in paths:
            root, files = ws.resolve(Path(p), mode)
            results.append(ingest_files(store, root, files, progress))
        return results
    finally:
        if own:
            ws.close()


def ingest_files(store: Store, root: Path, files: list[EvidenceFile], progress: Progress | None = None) -> IngestResult:
    res = IngestResult(root=root)
    prog = progress or Progress(enabled=False)
    total = sum(_size(f.abs_path) for f in files)
    prog.start("ingest", total_bytes=total, total_items=len(files))
    for f in files:
        if f.engine not in res.engines:
            res.engines.append(f.engine)
        read = _ingest_one(store, f, prog)
        if read is None:
            res.files_skipped += 1
        else:
            res.files_read += 1
            res.lines += read[0]
            res.unparsed += read[1]
        res.bytes += _size(f.abs_path)
        prog.item_done(_size(f.abs_path))
    for engine in res.engines:
        ranks_from_pids(store, engine)
        align_engine_clocks(store, engine)
    prog.finish(f"{res.files_read} files read, {res.files_skipped} unchanged, {res.lines} lines")
    return res


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _ingest_one(store: Store, f: EvidenceFile, prog: Progress) -> tuple[int, int] | None:
    """Read one file; None when the manifest says it is unchanged."""
    try:
        st = f.abs_path.stat()
    except OSError as e:
        raise InputError(f"cannot read {f.rel_path}: {e.strerror or e}") from e
    kind = detect_kind(f.abs_path)
    hhash = head_hash(f.abs_path) if kind not in ("unreadable",) else ""
    compressed = kind != "unreadable" and is_gzip(f.abs_path)
    prev = store.query("SELECT * FROM sources WHERE abs_path = ?", [str(f.abs_path)])
    prev_row = prev[0] if prev else None
    start_offset, start_line = 0, 1
    if prev_row is not None:
        same_head = prev_row["head_hash"] == hhash
        if same_head and prev_row["bytes"] == st.st_size and abs((prev_row["mtime"] or 0) - st.st_mtime) < 1e-6:
            return None
        if same_head and not compressed and st.st_size > (prev_row["bytes"] or 0) and kind == "server_log":
            start_offset, start_line = prev_row["read_bytes"] or 0, (prev_row["lines"] or 0) + 1
        else:
            _forget(store, prev_row)
            prev_row = None
    else:
        dup = store.query(
            "SELECT path FROM sources WHERE engine = ? AND head_hash = ? AND status = 'ok' AND kind = ?",
            [f.engine, hhash, kind])
        if dup and kind != "unknown":
            # The same content under another name (a rotated or compressed copy): never read twice.
            _record_source(store, f, kind, st, hhash, compressed, 0, 0, 0, status=f"duplicate of {dup[0]['path']}")
            return None

    try:
        with store.transaction():
            return _read_into_store(store, f, kind, st, hhash, compressed, prev_row, start_offset, start_line)
    except InputError as e:
        # One unreadable file (truncated gzip, vanished mid-read) must not sink the whole ingest:
        # its rows are rolled back and the manifest says why.
        if prev_row is not None:
            _forget(store, prev_row)
        _record_source(store, f, "unreadable", st, hhash, compressed, 0, 0, 0, status=f"error: {e}")
        return 0, 0


def _read_into_store(store: Store, f: EvidenceFile, kind: str, st, hhash: str, compressed: bool,
                     prev_row: dict | None, start_offset: int, start_line: int) -> tuple[int, int]:
    """Parse one file's (new) lines into the tables and update its manifest row; returns (lines, unparsed) read."""
    hint = None
    status = "ok"
    if kind == "server_log":
        lines, unparsed, read_bytes, hint = _ingest_log(store, f, start_offset, start_line)
    elif kind in STACK_KINDS:
        lines, unparsed = _ingest_stacks(store, f, kind, st.st_mtime)
        read_bytes = st.st_size
    elif kind == "capture_error":
        lines, unparsed, status = _ingest_capture_error(store, f)
        read_bytes = st.st_size
    elif kind == "gpu_samples":
        lines, unparsed, read_bytes = _ingest_gpu(store, f)
    elif kind == "unknown":
        lines, unparsed, read_bytes = _ingest_unknown(store, f)
    else:  # binary: recorded, not read
        lines = unparsed = read_bytes = 0
    total_lines, total_unparsed = lines, unparsed
    if prev_row is not None:
        total_lines += prev_row["lines"] or 0
        total_unparsed += prev_row["unparsed_lines"] or 0
        store.con.execute("DELETE FROM sources WHERE source_id = ?", [prev_row["source_id"]])
    _record_source(store, f, kind, st, hhash, compressed, total_lines, total_unparsed, read_bytes, status=status,
                   release_hint=hint, source_id=prev_row["source_id"] if prev_row else None)
    return lines, unparsed


def _forget(store: Store, row: dict) -> None:
    """Drop everything read from a source whose content changed under the same name."""
    with store.transaction():
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
                   source_id: int | None = None) -> None:
    if source_id is None:
        source_id = store.scalar("SELECT COALESCE(MAX(source_id), 0) + 1 FROM sources")
    store.append("sources", [{
        "source_id": source_id, "path": f.rel_path, "abs_path": str(f.abs_path), "engine": f.engine,
        "kind": kind, "bytes": st.st_size, "lines": lines, "parsed_lines": lines - unparsed,
        "unparsed_lines": unparsed, "read_bytes": read_bytes, "head_hash": hhash, "mtime": st.st_mtime,
        "compressed": compressed, "rotation": f.rotation, "node": f.node, "clock_offset_s": 0.0,
        "release_hint": release_hint, "status": status, "ingested_at": datetime.now(),
    }])


def _append_parsed(store: Store, parsed: Parsed) -> None:
    for table in LOADED_TABLES:
        rows = parsed.tables.get(table)
        if rows is None:
            continue
        if isinstance(rows, pl.DataFrame):
            if rows.height:
                store.append(table, rows.to_arrow())
        elif rows:
            store.append(table, rows)


def _ingest_log(store: Store, f: EvidenceFile, start_offset: int, start_line: int) -> tuple[int, int, int, str | None]:
    head = head_text(f.abs_path).splitlines()
    ctx = FileContext(engine=f.engine, path=f.rel_path,
                      default_year=datetime.fromtimestamp(f.abs_path.stat().st_mtime).year,
                      compose=detect_compose(head))
    lines = unparsed = 0
    end_offset = start_offset
    held: list[str] = []
    held_first = start_line
    for chunk in iter_chunks(f.abs_path, start_offset, start_line):
        block = held + chunk.lines
        first = held_first
        cut = last_record_start(block, ctx.compose)
        # Hold the last (possibly unfinished) record back so continuation lines stay with it.
        if cut > 0:
            body, held = block[:cut], block[cut:]
            held_first = first + cut
        else:
            body, held = block, []
            held_first = first + len(block)
        if body:
            parsed = parse_chunk(body, first, ctx)
            _append_parsed(store, parsed)
            lines += parsed.lines
            unparsed += parsed.unparsed
        end_offset = chunk.end_offset
    if held:
        parsed = parse_chunk(held, held_first, ctx)
        _append_parsed(store, parsed)
        lines += parsed.lines
        unparsed += parsed.unparsed
    return lines, unparsed, end_offset, None


# Parser of each stack-dump kind (see evidence.detect_kind); each returns a pyspy.Dump.
STACK_PARSERS: dict[str, Callable[[list[str], int], pyspy.Dump]] = {
    "pyspy_dump": pyspy.parse_dump,
    "pyspy_json": pyspy.parse_json,
    "gdb_dump": gdb.parse_gdb,
    "faulthandler_dump": faulthandler.parse_faulthandler,
    "native_trace": native_trace.parse_trace,
}


def _read_lines(f: EvidenceFile) -> list[str]:
    return [s for chunk in iter_chunks(f.abs_path) for s in chunk.lines]


def _ingest_stacks(store: Store, f: EvidenceFile, kind: str, mtime: float) -> tuple[int, int]:
    """A standalone stack dump: threads and frames; every line it does not consume is kept in ``unparsed``."""
    text_lines = _read_lines(f)
    dump = STACK_PARSERS[kind](text_lines, 1)
    ts = datetime.fromtimestamp(mtime)           # captures carry no time of their own: the file's mtime
    stacks: list[dict] = []
    frames: list[dict] = []
    # The file's place may name the rank (pyspy/rank3.txt) when the dump is of one process and
    # its title does not (JSON, gdb and faulthandler dumps carry no process title).
    one_process = len({p.pid for p in dump.processes}) <= 1 and not any(p.parent_pid for p in dump.processes)
    place_rank = (rank_from_place(f.rel_path, f.engine) or "") if one_process else ""
    dump_rows(dump, f"{f.engine}:{f.rel_path}", f.engine, f.rel_path, ts, place_rank, "standalone", stacks, frames)
    store.append("stacks", stacks)
    store.append("frames", frames)
    # Accounting by construction: a line is parsed only if the parser consumed it.
    un = [{"engine": f.engine, "path": f.rel_path, "line": i + 1, "text": text_lines[i]}
          for i in range(len(text_lines)) if i not in dump.consumed]
    store.append("unparsed", un)
    return len(text_lines), len(un)


def _ingest_capture_error(store: Store, f: EvidenceFile) -> tuple[int, int, str]:
    """A failed capture: its text is kept verbatim (in ``unparsed``: it holds no stack) and the reason returned."""
    text_lines = _read_lines(f)
    store.append("unparsed", [{"engine": f.engine, "path": f.rel_path, "line": i + 1, "text": s}
                              for i, s in enumerate(text_lines)])
    return len(text_lines), len(text_lines), capture_error_reason(text_lines)


def _ingest_gpu(store: Store, f: EvidenceFile) -> tuple[int, int, int]:
    n = bad = end = 0
    header: str | None = None
    for chunk in iter_chunks(f.abs_path):
        lines = chunk.lines
        if header is None and lines:
            header = lines[0] if gpu.HEADER_RE.match(lines[0]) else ""
        elif header:
            lines = [header, *lines]                  # later chunks: the same columns
        samples, unparsed = gpu.parse_samples(lines, chunk.first_line - (1 if lines is not chunk.lines else 0),
                                              f.engine, f.rel_path)
        store.append("gpu_samples", samples.to_arrow())
        store.append("unparsed", unparsed.to_arrow())
        n += len(chunk.lines)
        bad += unparsed.height
        end = chunk.end_offset
    return n, bad, end


def _ingest_unknown(store: Store, f: EvidenceFile) -> tuple[int, int, int]:
    n = 0
    end = 0
    for chunk in iter_chunks(f.abs_path):
        df = pl.DataFrame({
            "engine": f.engine, "path": f.rel_path,
            "line": pl.int_range(chunk.first_line, chunk.first_line + len(chunk.lines), eager=True),
            "text": pl.Series(chunk.lines, dtype=pl.String),
        })
        store.append("unparsed", df.to_arrow())
        n += len(chunk.lines)
        end = chunk.end_offset
    return n, n, end


def now() -> float:
    return time.time()
