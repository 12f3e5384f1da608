"""What moves between the ingest stages: a file's read job, its outcome, a run's result."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..readers.envelopes import EnvelopeStack
from ..readers.logfile import ReadNotes
from .fork_server import SPLIT_MIN_BYTES  # noqa: F401 (defined where the lightest module can read it)


@dataclass
class IngestResult:
    root: Path
    engines: list[str] = field(default_factory=list)
    files_read: int = 0
    files_skipped: int = 0
    files_renamed: int = 0
    files_vanished: int = 0
    lines: int = 0
    unparsed: int = 0
    bytes: int = 0
    bytes_read: int = 0
    changed_engines: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)     # "path: error: ..." of each file that could not be read
    parse_tasks: int = 0                                 # handed to worker processes or Ray (0: parsed in-process)


@dataclass
class FileJob:
    """What to read of one file: a pure description a worker process can act on."""

    engine: str
    abs_path: Path
    rel_path: str
    kind: str
    start_offset: int = 0
    start_line: int = 1
    mtime: float = 0.0
    end_offset: int | None = None       # read up to here: the size planned (a file may grow meanwhile)
    hold_partial: bool = False          # a live log's unfinished last line waits for the next ingest
    envelope: EnvelopeStack | None = None   # the file's envelope, as planning sniffed it (None: sniff again)
    # the nearest dated evidence of the engine (epoch seconds): the latest full date of the file's own head and tail, else the
    # engine's latest; lines printed without a year take the year nearest it (None: the file's mtime bounds them)
    year_near: float | None = None


@dataclass
class FileOutcome:
    lines: int = 0
    unparsed: int = 0
    read_bytes: int = 0
    status: str = "ok"
    release: str | None = None
    notes: ReadNotes = field(default_factory=ReadNotes)
    envelope: str | None = None         # sources.envelope: the envelope stack's name ('none' when plain)


CHECKPOINT = "__checkpoint__"


def with_result(gen: Iterator[tuple[str, Any]], result: list) -> Iterator[tuple[str, Any]]:
    """Iterate a batch generator; its return value (the FileOutcome) is appended to ``result``."""
    result.append((yield from gen))


def inline_rows(table: Any) -> bytes:
    """A small batch's Arrow table as the bytes of one Arrow IPC stream, to travel back in a task's result:
    pickling the table itself pickles each of its buffers and columns as objects, some 0.3 ms a table there
    and back (measured on the 202-engine fleet: 845 small tables, 268 ms of pickling and unpickling against
    121 ms written as streams, pickled as bytes and read)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def rows_inline(data: bytes) -> Any:
    """The Arrow table of ``inline_rows``'s bytes."""
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all()


def batch_to_arrow(rows: Any) -> Any:
    """A parsed batch (a polars frame, an Arrow table or row dicts) as the Arrow table that is loaded or
    spilled; None when it has no row.  Row dicts are read by every key any of them has (pyarrow's
    ``from_pylist`` keeps the first row's keys only)."""
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        table = rows
    elif hasattr(rows, "to_arrow"):             # a polars DataFrame
        table = rows.to_arrow()
    else:
        rows = list(rows)
        if not rows:
            return None
        keys = dict.fromkeys(k for r in rows for k in r)
        table = pa.Table.from_pydict({k: [r.get(k) for r in rows] for k in keys})
    return table if table.num_rows else None
