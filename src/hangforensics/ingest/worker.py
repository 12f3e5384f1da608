"""What a parser process runs: warming up, and parsing one file or byte range into Arrow IPC spill files.

Kept apart from ``parallel`` (the parent's side) so that the fork server the workers are forked from
(``fork_server``) imports only what parsing needs: not DuckDB, the store or the planner (measured: 0.3 s
less start-up)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..readers.kinds import ContentProbe, probe_content
from .jobs import CHECKPOINT, SPLIT_MIN_BYTES, FileJob, FileOutcome, batch_to_arrow, inline_rows, with_result
from .parse import parse_file


def warm_up() -> None:
    """Load what parsing a plain log needs (polars, pyarrow, the compiled scanner and its code): run by the
    fork server (``preload_scanner``), so that every worker forked from it has them (and reads plain logs of
    any size with the scanner: ``sglang_fast.scan_min_bytes``)."""
    import polars  # noqa: F401
    import pyarrow  # noqa: F401

    from ..parsers.sglang.sglang_fast import scan_min_bytes, scanner, warm_scanner
    if scan_min_bytes() <= SPLIT_MIN_BYTES and scanner() is not None:
        warm_scanner()


# A batch this small is returned in the task's result (pickled Arrow) instead of spilled to a file: a fleet of
# small engines spilled some four files per engine, each written, mapped and unlinked (measured on a
# 202-engine fleet: 1,181 files, 0.75 s of the loader's CPU to open them).
INLINE_BYTES = 1024 * 1024


def parse_to_ipc(job: FileJob, prefix: str) -> tuple[list[tuple[str, Any]], FileOutcome]:
    """Worker: parse one file, spill each batch to an Arrow IPC file (a small one travels back inline, as an
    Arrow table); errors travel back in the outcome."""
    result: list[FileOutcome] = []
    try:
        manifest = to_manifest(with_result(parse_file(job), result), prefix)
    except InputError as e:
        return [], FileOutcome(status=f"error: {e}")
    return manifest, result[0] or FileOutcome()


def probe_paths(paths: list[Path]) -> list[ContentProbe]:
    """Worker: the content probes of a chunk of files planning looks at (``parallel.EarlyParse.probes``)."""
    return [probe_content(p) for p in paths]


def to_manifest(batches: Iterable[tuple[str, Any]], prefix: str) -> list[tuple[str, Any]]:
    """A file's (table, rows) batches as the loader reads them back: small Arrow tables inline (as the bytes of
    an Arrow IPC stream: ``jobs.inline_rows``), larger ones spilled to Arrow IPC files named from ``prefix``,
    resume points as JSON."""
    import pyarrow as pa

    manifest: list[tuple[str, Any]] = []
    for table, rows in batches:
        if table == CHECKPOINT:
            manifest.append((table, json.dumps([rows.lines, rows.unparsed, rows.read_bytes])))
            continue
        arrow = batch_to_arrow(rows)
        if arrow is None:
            continue
        arrow = _dictionary_encoded(arrow)
        if arrow.nbytes <= INLINE_BYTES:        # travels back with the result: no file to write and map
            manifest.append((table, inline_rows(arrow)))
            continue
        path = f"{prefix}-{len(manifest)}-{table}.arrow"
        # uncompressed: the loader maps the file instead of decompressing it (its CPU is the bottleneck)
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, arrow.schema) as writer:
            writer.write_table(arrow)
        manifest.append((table, path))
    return manifest


# Repeated text columns (a file's engine and path on every row, a batch's kind and rank) spilled as Arrow
# dictionaries: DuckDB inserts them into VARCHAR columns for less CPU (measured: the loader's CPU -20 %
# on a batch-heavy log) and the spill is smaller.
DICTIONARY_COLUMNS = ("engine", "path", "file", "batch_kind", "rank", "kind")


def _dictionary_encoded(t: Any) -> Any:
    """``t`` with its DICTIONARY_COLUMNS encoded, chunk by chunk (a group's bulk table arrives in chunks: no
    copy of it), over one dictionary per column (as the IPC file format wants)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for name in DICTIONARY_COLUMNS:
        if name in t.column_names and t.num_rows and t.schema.field(name).type in (pa.string(), pa.large_string()):
            col = pc.dictionary_encode(t.column(name))
            t = t.set_column(t.column_names.index(name), pa.field(name, col.type), col)
    return t.unify_dictionaries()
