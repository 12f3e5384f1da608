"""Read-only ad hoc SQL over a hangforensics database (the ``sql`` command)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import duckdb
import polars as pl

from .errors import DatabaseBusyError, DatabaseError, InputError, QueryError
from .store import check_readable

FORMATS = ("table", "csv", "json", "parquet")


def _check_statement(query: str) -> None:
    try:
        stmts = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise QueryError(f"cannot parse query: {str(e).splitlines()[0]}") from e
    if len(stmts) != 1:
        raise QueryError("give exactly one statement")
    kind = str(stmts[0].type).rsplit(".", 1)[-1].upper()
    if kind not in ("SELECT", "EXPLAIN"):
        raise QueryError(f"only read-only queries are allowed ({kind} refused)")


def run_query(db: Path, query: str, fmt: str = "table", out: Path | None = None) -> str | None:
    """Run ``query``; return its text rendering, or None when written to ``out``."""
    if fmt not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)}")
    if fmt == "parquet" and out is None:
        raise InputError("--format parquet needs -o FILE")
    if not Path(db).exists():
        raise InputError(f"no database at {db}")
    _check_statement(query)
    try:
        con = duckdb.connect(str(db), read_only=True, config={"enable_external_access": False})
    except duckdb.IOException as e:
        if "lock" in str(e).lower():
            raise DatabaseBusyError(f"database {db} is busy: a scan or ingest is writing it; try again when it ends") from e
        raise DatabaseError(f"cannot open database {db}: {str(e).splitlines()[0]}") from e
    except duckdb.Error as e:
        raise DatabaseError(f"cannot open database {db}: {str(e).splitlines()[0]}") from e
    try:
        check_readable(con, str(db))
    except DatabaseError:
        con.close()
        raise
    try:
        df = pl.from_arrow(con.sql(query).to_arrow_table())
    except duckdb.Error as e:
        raise QueryError(str(e).strip().splitlines()[0]) from e
    finally:
        con.close()
    if fmt == "parquet":
        df.write_parquet(out)
        return None
    if fmt == "csv":
        text = _flatten(df).write_csv()
    elif fmt == "json":
        text = json.dumps(df.to_dicts(), default=str, indent=1) + "\n"
    else:
        with pl.Config(tbl_rows=200, tbl_cols=30, fmt_str_lengths=80, tbl_width_chars=200):
            buf = io.StringIO()
            buf.write(str(df))
            text = buf.getvalue() + "\n"
    if out is not None:
        Path(out).write_text(text, encoding="utf-8")
        return None
    return text


def _flatten(df: pl.DataFrame) -> pl.DataFrame:
    """CSV cannot hold lists or structs: render them as JSON text."""
    cols = []
    for name, dtype in df.schema.items():
        if isinstance(dtype, (pl.List, pl.Struct, pl.Array)):
            cols.append(pl.col(name).map_elements(lambda v: json.dumps(v, default=str), return_dtype=pl.String))
        else:
            cols.append(pl.col(name))
    return df.select(cols)
