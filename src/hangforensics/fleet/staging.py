"""Staged row batches: what a parse task on another host hands to the loader, as Parquet files.

A task parses its files (``parse_group``) and writes every row batch under the staging location,
partitioned by engine and day::

    <staging>/<run>/engine=<engine>/day=<YYYY-MM-DD|unknown>/<table>-f<file>-p<part>-b<batch>.parquet

and returns a small manifest per file (``StagedPart``): the batches in parse order (each the Parquet
files of its rows; checkpoints as counts) and the file's outcome.  The driver replays a manifest as the
same ``(table, rows)`` batches ``parse_file`` yields (``read_staged``), so loading is ``load_file`` as in
every other path.  The location is any ``pyarrow.fs`` URI (a local or shared path, ``file://``,
``s3://``, ``gs://``, ...); every task opens it itself, so it must be reachable from every node.
Pure functions of pyarrow: nothing here imports Ray.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import InputError
from ..ingest.jobs import CHECKPOINT, FileJob, FileOutcome, batch_to_arrow, with_result

ROW = "__row"          # a batch cut into several days keeps its order through this column


@dataclass
class StagedPart:
    """The manifest of one file (or one byte range of a large log): its batches in parse order, each a
    table with its Parquet files or a checkpoint; the outcome; or why the task failed."""

    file_no: int
    part_no: int
    engine: str
    path: str
    batches: list[tuple[str, list[str] | FileOutcome]] = field(default_factory=list)
    outcome: FileOutcome = field(default_factory=FileOutcome)
    error: str | None = None
    rows: int = 0
    files_written: int = 0


def open_staging(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and base path of a staging location: a plain path (made absolute) or a URI."""
    if "://" not in uri:
        uri = str(Path(uri).expanduser().resolve())
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, ValueError, OSError) as e:
        raise InputError(f"cannot use staging location {uri}: {str(e).splitlines()[0]}") from e


def partition_dir(base: str, run: str, engine: str, day: str) -> str:
    # engine folder names may hold anything a file name can: quoted, as hive partitions are
    return f"{base.rstrip('/')}/{run}/engine={quote(engine, safe='')}/day={day}"


def parse_group(jobs: list[tuple[int, int, FileJob]], staging: str, run: str,
                parse: Callable[[FileJob], Iterator[tuple[str, Any]]] | None = None) -> list[StagedPart]:
    """A parse task: parse each (file_no, part_no, job) in turn (with ``parse``, default ``parse_file``) and
    stage its batches.  A file that cannot be read is its part's outcome (as in-process); anything else
    raises, for the executor to retry."""
    fs, base = open_staging(staging)
    return [stage_file(fs, base, run, file_no, part_no, job, parse) for file_no, part_no, job in jobs]


def stage_file(fs: pafs.FileSystem, base: str, run: str, file_no: int, part_no: int, job: FileJob,
               parse: Callable[[FileJob], Iterator[tuple[str, Any]]] | None = None) -> StagedPart:
    # imported here: planning an unchanged fleet needs neither Parquet nor the parsers
    import pyarrow.parquet as pq

    from ..ingest.parse import parse_file

    parse = parse or parse_file
    part = StagedPart(file_no, part_no, job.engine, job.rel_path)
    result: list[FileOutcome] = []
    made: set[str] = set()
    try:
        for table, rows in with_result(parse(job), result):
            if table == CHECKPOINT:
                part.batches.append((CHECKPOINT, rows))
                continue
            arrow = batch_to_arrow(rows)
            if arrow is None:
                continue
            paths = []
            for day, piece in split_by_day(arrow):
                folder = partition_dir(base, run, job.engine, day)
                if folder not in made:
                    fs.create_dir(folder, recursive=True)
                    made.add(folder)
                path = f"{folder}/{table}-f{file_no}-p{part_no}-b{len(part.batches)}.parquet"
                with fs.open_output_stream(path) as out:
                    pq.write_table(piece, out)
                paths.append(path)
            part.batches.append((table, paths))
            part.rows += arrow.num_rows
            part.files_written += len(paths)
    except InputError as e:
        return StagedPart(file_no, part_no, job.engine, job.rel_path, outcome=FileOutcome(status=f"error: {e}"),
                          files_written=part.files_written)
    part.outcome = result[0]
    return part


def split_by_day(table: pa.Table) -> list[tuple[str, pa.Table]]:
    """The batch's rows per day of their ``ts`` (rows without one, and tables without it: ``unknown``).
    A batch over several days is cut, each piece numbering its rows so the loader restores their order."""
    import pyarrow.compute as pc

    if "ts" not in table.column_names or not pa.types.is_timestamp(table.schema.field("ts").type):
        return [("unknown", table)]
    days = pc.fill_null(pc.strftime(table["ts"], format="%Y-%m-%d"), "unknown")
    unique = sorted(d.as_py() for d in pc.unique(days))
    if len(unique) == 1:
        return [(unique[0], table)]
    numbered = table.append_column(ROW, pa.array(range(table.num_rows), pa.int64()))
    return [(d, numbered.filter(pc.equal(days, d))) for d in unique]


def read_staged(fs: pafs.FileSystem, part: StagedPart) -> Iterator[tuple[str, Any]]:
    """Replay a staged part as ``parse_file``'s batches (returning its FileOutcome); each Parquet file is
    deleted once read, so staging holds only what is not loaded yet.  A failed part raises InputError, which
    ``load_file`` records on the file's ``sources`` row."""
    if part.error is not None:
        raise InputError(part.error)
    if part.outcome.status.startswith("error:"):
        raise InputError(part.outcome.status[len("error: "):])
    for table, item in part.batches:
        if table == CHECKPOINT:
            yield table, item
            continue
        yield table, read_batch(fs, item)
    return part.outcome


def read_batch(fs: pafs.FileSystem, paths: list[str]) -> pa.Table:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    pieces = []
    for path in paths:
        with fs.open_input_file(path) as f:      # a file, not a dataset: no partition columns are added
            pieces.append(pq.read_table(f))
        with contextlib.suppress(OSError):
            fs.delete_file(path)
    if len(pieces) == 1:
        return pieces[0]
    joined = pa.concat_tables(pieces)
    return joined.take(pc.sort_indices(joined[ROW])).drop_columns([ROW])


def remove_run(staging: str, run: str) -> None:
    """Remove a run's staging folder (what a failed or interrupted load left too)."""
    fs, base = open_staging(staging)
    with contextlib.suppress(OSError, FileNotFoundError):
        fs.delete_dir(f"{base.rstrip('/')}/{run}")


def staged_files(staging: str, run: str | None = None) -> list[str]:
    """Every file under the staging location (or one run of it): what a finished scan must not leave."""
    fs, base = open_staging(staging)
    root = f"{base.rstrip('/')}/{run}" if run else base
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return []
    return [i.path for i in infos if i.type == pafs.FileType.File]
