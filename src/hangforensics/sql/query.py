"""Read-only ad hoc SQL over a hangforensics database (the ``sql`` command).

Two locks keep a query from changing anything: an allow-list of statement kinds checked before
DuckDB runs anything (so the refusal is ours and says what was refused), and a read-only connection
with external access off (so no file is read or written, whatever slips past the first).
Results stream in Arrow batches: a table shows the first rows and counts the rest, exports of
any size are written batch by batch.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
import re
import shutil
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DatabaseBusyError, DatabaseError, InputError, QueryError
from ..store import check_readable
from .named_queries import find_named_query, looks_like_a_name

FORMATS = ("table", "csv", "json", "parquet")
DEFAULT_MAX_ROWS = 50
BATCH_ROWS = 10_000

# Pragmas that only report: everything else (profiling, checkpoints, import_database, settings) is refused.
READ_ONLY_PRAGMAS = frozenset({
    "table_info", "show", "show_tables", "show_tables_expanded", "show_databases", "database_list",
    "database_size", "storage_info", "metadata_info", "version", "platform", "user_agent", "collations",
    "functions", "extension_versions",
})
# Table functions a CALL may name: the pragma ones above and the catalog listings.
READ_ONLY_CALLS = frozenset({f"pragma_{p}" for p in READ_ONLY_PRAGMAS} | {
    "duckdb_tables", "duckdb_views", "duckdb_columns", "duckdb_constraints", "duckdb_databases",
    "duckdb_schemas", "duckdb_indexes", "duckdb_functions", "duckdb_types", "duckdb_settings",
    "duckdb_keywords", "duckdb_extensions", "duckdb_sequences", "duckdb_dependencies",
})

_LEADING_COMMENTS = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)
_EXPLAIN = re.compile(r"^EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Kinds whose object makes the refusal clearer ("CREATE TABLE refused", "DROP VIEW refused").
_WITH_OBJECT = {"CREATE", "DROP", "ALTER", "EXPORT", "IMPORT", "COPY"}
_SKIP_WORDS = {"OR", "REPLACE", "TEMP", "TEMPORARY", "PERSISTENT", "UNIQUE", "IF", "NOT", "EXISTS"}


def _strip_comments(sql: str) -> str:
    return _LEADING_COMMENTS.sub("", sql, count=1)


def _what(statement: str) -> str:
    """The statement's leading keyword(s), as the refusal names them: 'INSERT', 'CREATE TABLE'."""
    words = [w.upper() for w in _WORD.findall(_strip_comments(statement))[:8]]
    if not words:
        return "this statement"
    if words[0] in _WITH_OBJECT:
        rest = [w for w in words[1:] if w not in _SKIP_WORDS]
        if rest and rest[0] in {"TABLE", "VIEW", "MACRO", "FUNCTION", "SCHEMA", "SEQUENCE", "INDEX", "TYPE",
                                "SECRET", "DATABASE", "COLUMN"}:
            return f"{words[0]} {rest[0]}"
    return words[0]


def _refuse(what: str) -> QueryError:
    return QueryError(f"only read-only queries are allowed: {what} refused")


def check_read_only(query: str) -> str:
    """Return ``query``'s single statement when it only reads; raise QueryError naming what was refused.

    Allowed: SELECT (WITH, FROM-first, VALUES, DESCRIBE, SHOW, SUMMARIZE parse as SELECT), EXPLAIN of
    those, the reporting pragmas of READ_ONLY_PRAGMAS and CALLs of READ_ONLY_CALLS.
    """
    try:
        statements = duckdb.extract_statements(query)
        kinds = [s.type.name for s in statements]
    except ValueError:
        # DuckDB parsed it but the Python enum has no name for its kind (e.g. UPDATE EXTENSIONS): not a query
        raise _refuse(_what(query)) from None
    except duckdb.Error as e:
        raise QueryError(f"cannot parse query: {_first_line(e)}") from e
    if not statements:
        raise QueryError("empty query: give one SQL statement")
    if len(statements) > 1:
        found = ", ".join(_what(s.query) for s in statements)
        raise QueryError(f"give one statement at a time: {len(statements)} found ({found})")
    stmt, kind = statements[0], kinds[0]
    text = _strip_comments(stmt.query)
    if kind == "SELECT":
        return stmt.query
    if kind == "EXPLAIN":
        # EXPLAIN ANALYZE runs its statement: only a query may follow
        inner = _EXPLAIN.sub("", text, count=1)
        try:
            inner_kinds = [s.type.name for s in duckdb.extract_statements(inner)]
        except (duckdb.Error, ValueError):
            inner_kinds = []
        if inner_kinds != ["SELECT"]:
            raise _refuse(f"EXPLAIN of {_what(inner)}")
        return stmt.query
    if kind == "PRAGMA":
        m = re.match(r"PRAGMA\s+([A-Za-z_]\w*)", text, re.IGNORECASE)
        if m and m.group(1).lower() in READ_ONLY_PRAGMAS:
            return stmt.query
        raise _refuse(f"PRAGMA {m.group(1).lower()}" if m else _what(text))
    if kind == "CALL":
        m = re.match(r"CALL\s+([A-Za-z_]\w*)\s*\(", text, re.IGNORECASE)
        if m and m.group(1).lower() in READ_ONLY_CALLS:
            return stmt.query
        raise _refuse(f"CALL {m.group(1).lower()}" if m else _what(text))
    raise _refuse(_what(text))


@dataclass(frozen=True)
class _Result:
    """A running query: its columns, their DuckDB types, and its rows as Arrow batches."""
    columns: list[str]
    types: list[str]
    schema: pa.Schema
    batches: Iterator[pa.RecordBatch]


def resolve_query(query: str) -> tuple[str, str | None]:
    """(SQL, title): a named query's when ``query`` is exactly its name, else ``query`` itself."""
    named = find_named_query(query)
    if named is not None:
        return named.sql, named.title
    return query, None


def run_query(db: Path, query: str, fmt: str = "table", out: Path | None = None,
              max_rows: int = DEFAULT_MAX_ROWS, width: int | None = None) -> str | None:
    """Run one read-only query (or the named query called ``query``) over the database at ``db``.

    Returns the rendering (``table``, ``csv`` or ``json``), or None when it was written to ``out``;
    ``parquet`` needs ``out``. A table shows at most ``max_rows`` rows (0: all) and fits ``width``
    columns (default: the terminal's, or $COLUMNS).
    """
    if fmt not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)}")
    if fmt == "parquet" and out is None:
        raise InputError("--format parquet needs -o FILE")
    if max_rows < 0:
        raise InputError("--max-rows must be 0 (all) or more")
    sql, title = resolve_query(query)
    try:
        sql = check_read_only(sql)
    except QueryError as e:
        if title is None and looks_like_a_name(query) and str(e).startswith("cannot parse"):
            raise QueryError(f"no named query called {query.strip()!r} (list them with 'hangforensics queries'), "
                             f"and it is not SQL either") from e
        raise
    if not Path(db).exists():
        raise InputError(f"no database at {db}")
    con = _connect(db)
    try:
        result = _execute(con, sql)
        if fmt == "parquet":
            _write_parquet(result, Path(out))  # type: ignore[arg-type]
            return None
        if fmt == "table":
            text = _render_table(result, max_rows, width or shutil.get_terminal_size((120, 24)).columns, title)
            return _deliver(text, out)
        if out is None:
            buf = io.StringIO()
            _write_text_format(result, fmt, buf)
            return buf.getvalue()
        try:
            with Path(out).open("w", encoding="utf-8", newline="") as f:
                _write_text_format(result, fmt, f)
        except OSError as e:
            raise InputError(f"cannot write {out}: {e.strerror or e}") from e
        return None
    except duckdb.PermissionException as e:
        raise QueryError(f"reading or writing files is disabled in queries: they see only the database "
                         f"({_first_line(e)})") from e
    except duckdb.Error as e:
        raise QueryError(_first_line(e)) from e
    finally:
        con.close()


def _connect(db: Path) -> duckdb.DuckDBPyConnection:
    try:
        # external access off: no file reads (read_csv, read_text, 'x.parquet'), no COPY, no extension downloads
        con = duckdb.connect(str(db), read_only=True, config={
            "enable_external_access": False, "autoinstall_known_extensions": False, "lock_configuration": True})
    except duckdb.IOException as e:
        if "lock" in str(e).lower():
            raise DatabaseBusyError(f"database {db} is busy: a scan or ingest is writing it; try again when it ends") from e
        raise DatabaseError(f"cannot open database {db}: {_first_line(e)}") from e
    except duckdb.Error as e:
        raise DatabaseError(f"cannot open database {db}: {_first_line(e)}") from e
    try:
        check_readable(con, str(db))
    except DatabaseError:
        con.close()
        raise
    return con


def _execute(con: duckdb.DuckDBPyConnection, sql: str) -> _Result:
    rel = con.sql(sql)
    if rel is None:  # a statement with no result set
        return _Result([], [], pa.schema([]), iter(()))
    reader = rel.to_arrow_reader(BATCH_ROWS)
    return _Result(list(rel.columns), [str(t) for t in rel.types], reader.schema, iter(reader))


def _deliver(text: str, out: Path | None) -> str | None:
    if out is None:
        return text
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {out}: {e.strerror or e}") from e
    return None


# -- exports -----------------------------------------------------------------------------------------

def _write_parquet(result: _Result, out: Path) -> None:
    try:
        with pq.ParquetWriter(out, result.schema) as writer:
            for batch in result.batches:
                writer.write_batch(batch)
    except OSError as e:
        raise InputError(f"cannot write {out}: {e.strerror or e}") from e


def _rows(result: _Result) -> Iterator[tuple[Any, ...]]:
    for batch in result.batches:
        yield from _rows_of(batch)


def _write_text_format(result: _Result, fmt: str, f: IO[str]) -> None:
    json_cols = [t == "JSON" for t in result.types]
    if fmt == "csv":
        w = csv.writer(f, lineterminator="\n")
        w.writerow(result.columns)
        for row in _rows(result):
            w.writerow([_csv_value(v) for v in row])
        return
    # json: one array of objects, written row by row so an export of any size streams
    f.write("[")
    for i, row in enumerate(_rows(result)):
        obj = {name: _json_cell(v, is_json) for name, v, is_json in zip(result.columns, row, json_cols, strict=True)}
        f.write(("\n" if i == 0 else ",\n") + json.dumps(obj, ensure_ascii=False, allow_nan=False))
    f.write("\n]\n")


def _json_cell(v: Any, is_json: bool) -> Any:
    # a JSON column (events.attrs) is embedded as the object it holds, not as a string of JSON
    if is_json and isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return _jsonable(v)


def _jsonable(v: Any) -> Any:
    """Python value of an Arrow cell -> plain JSON: ISO times, seconds for durations, null for NaN."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


def _csv_value(v: Any) -> Any:
    """CSV cannot hold lists or structs: they become JSON text; NULL is an empty field."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(_jsonable(v), ensure_ascii=False)
    j = _jsonable(v)
    return "" if j is None else j


# -- terminal tables ---------------------------------------------------------------------------------

NULL_TEXT = "NULL"
ELLIPSIS = "…"
MIN_COL_WIDTH = 8
GAP = "  "
# Log text can hold escape sequences: a table shows them, it never lets them drive the terminal.
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
_CONTROL.update({0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r"})


def _cell(v: Any) -> str:
    """One value as a table shows it: NULL spelled out, lists and structs without quotes."""
    if v is None:
        return NULL_TEXT
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v.translate(_CONTROL)
    if isinstance(v, float):
        return repr(v) if len(repr(v)) <= 14 else f"{v:.10g}"
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, bytes):
        return "0x" + v.hex()
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_cell(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    return str(v).translate(_CONTROL)


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Columns ``text`` takes on a terminal (wide CJK characters count two)."""
    return sum(_char_width(c) for c in text) if not text.isascii() else len(text)


def _fit(text: str, width: int, right: bool = False) -> str:
    """``text`` padded to ``width`` columns, or cut with an ellipsis when longer."""
    w = display_width(text)
    if w > width:
        kept, used = [], 0
        for ch in text:
            cw = _char_width(ch)
            if used + cw > width - 1:
                break
            kept.append(ch)
            used += cw
        text, w = "".join(kept) + ELLIPSIS, used + 1
    pad = " " * (width - w)
    return pad + text if right else text + pad


def _column_widths(natural: list[int], width: int, squeezable: list[bool]) -> list[int]:
    """Widths for as many leading columns as fit in ``width``.  Text and list columns are narrowed
    first, widest first; times and numbers keep their width unless nothing else can give."""
    gap = len(GAP)
    shown, used = 0, 0
    for w, sq in zip(natural, squeezable, strict=True):
        need = (min(w, MIN_COL_WIDTH) if sq else w) + (gap if shown else 0)
        if shown and used + need > width:
            break
        used += need
        shown += 1
    cols, budget = natural[:shown], width - gap * (shown - 1)
    if sum(cols) <= budget:
        return cols
    flexible = squeezable[:shown]
    if sum(min(w, MIN_COL_WIDTH) if sq else w for w, sq in zip(cols, flexible, strict=True)) > budget:
        flexible = [True] * shown     # even narrowed text cannot make room: narrow everything
    # the largest cap such that every flexible column at min(natural, cap) fits
    lo, hi = 1, max(cols)
    while lo < hi:
        cap = (lo + hi + 1) // 2
        if sum(min(w, cap) if f else w for w, f in zip(cols, flexible, strict=True)) <= budget:
            lo = cap
        else:
            hi = cap - 1
    return [min(w, lo) if f else w for w, f in zip(cols, flexible, strict=True)]


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _is_squeezable(t: pa.DataType) -> bool:
    """Text, lists, structs: a cut cell still says something.  A cut time or number says nothing."""
    return not (_is_numeric(t) or pa.types.is_temporal(t) or pa.types.is_boolean(t))


def _render_table(result: _Result, max_rows: int, width: int, title: str | None = None) -> str:
    rows: list[list[str]] = []
    total = 0
    for batch in result.batches:
        total += batch.num_rows
        if max_rows == 0 or len(rows) < max_rows:
            take = batch.num_rows if max_rows == 0 else min(batch.num_rows, max_rows - len(rows))
            rows.extend([_cell(v) for v in r] for r in _rows_of(batch.slice(0, take)))
    types = [f.type for f in result.schema]
    return render_rows(result.columns, rows, total, width, title, numeric=[_is_numeric(t) for t in types],
                       squeezable=[_is_squeezable(t) for t in types])


def _rows_of(batch: pa.RecordBatch) -> Iterable[tuple[Any, ...]]:
    return zip(*[c.to_pylist() for c in batch.columns], strict=True)


def render_rows(columns: list[str], rows: list[list[str]], total: int, width: int, title: str | None = None,
                numeric: list[bool] | None = None, squeezable: list[bool] | None = None) -> str:
    """A plain-text table of already formatted cells fitting ``width`` columns, then how many rows
    there were (and how many are shown when the display was cut).  ``numeric`` columns are
    right-aligned; only ``squeezable`` ones are cut while others can be (default: all)."""
    out: list[str] = [title, ""] if title else []
    numeric = numeric or [False] * len(columns)
    squeezable = squeezable or [True] * len(columns)
    if columns:
        headers = [_cell(c) for c in columns]
        natural = [max([display_width(h)] + [display_width(r[i]) for r in rows]) for i, h in enumerate(headers)]
        widths = _column_widths(natural, max(width, MIN_COL_WIDTH), squeezable)
        n = len(widths)
        out.append(GAP.join(_fit(h, w, numeric[i]) for i, (h, w) in enumerate(zip(headers, widths, strict=False))).rstrip())
        out.append(GAP.join("-" * w for w in widths))
        for r in rows:
            out.append(GAP.join(_fit(r[i], w, numeric[i]) for i, w in enumerate(widths)).rstrip())
        if n < len(columns):
            hidden = columns[n:]
            out.append(f"({len(hidden)} more column{'s' if len(hidden) != 1 else ''} not shown: "
                       f"{', '.join(hidden)}; select fewer columns, widen the terminal or use --format csv)")
    plural = "s" if total != 1 else ""
    if len(rows) < total:
        out.append(f"{total:,} row{plural}, showing the first {len(rows):,} (--max-rows N shows more, 0 all)")
    else:
        out.append(f"{total:,} row{plural}")
    return "\n".join(out) + "\n"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
