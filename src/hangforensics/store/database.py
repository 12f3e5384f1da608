"""One DuckDB database file: opening (with schema checks and migration), transactions, Arrow loading."""

from __future__ import annotations

import contextlib
import copy
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ..errors import DatabaseBusyError, DatabaseError
from .schema import MIGRATIONS, SCHEMA_VERSION, SOURCE_KEYED, TABLES, physical, stored
from .views import MACROS, ddl_statements


def schema_version(con: duckdb.DuckDBPyConnection, path: str) -> int | None:
    """The database's schema version; None for a new, empty database.  Raises DatabaseError for a
    database this hangforensics cannot use (another tool's, or a newer schema)."""
    tables = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()}
    if not tables:
        return None
    if "meta" not in tables:
        raise DatabaseError(f"{path} is a DuckDB database but not a hangforensics one (no meta table)")
    rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    raw = rows[0][0] if rows else None
    try:
        version = int(raw)
    except (TypeError, ValueError):
        raise DatabaseError(f"database {path} records no readable schema version ({raw!r})") from None
    if version > SCHEMA_VERSION:
        raise DatabaseError(
            f"database {path} has schema version {version}, newer than this hangforensics "
            f"({SCHEMA_VERSION}); upgrade hangforensics")
    return version


def check_readable(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """For read-only use: the database must be at this schema version (an older one is migrated by any
    writing command, or by ``hangforensics migrate``)."""
    version = schema_version(con, path)
    if version is not None and version < SCHEMA_VERSION:
        raise DatabaseError(
            f"database {path} has schema version {version}, older than this hangforensics "
            f"({SCHEMA_VERSION}); run 'hangforensics migrate --db {path}' to upgrade it in place")


class Store:
    """One DuckDB database file (or ``:memory:``) holding ingested evidence."""

    def __init__(self, path: str | Path = ":memory:", read_only: bool = False) -> None:
        self.path = str(path)
        self.opened_at_version: int | None = None    # the schema version found on opening (None: new)
        try:
            # Bounded memory however large the evidence: DuckDB spills beyond this instead of growing.
            self.con = duckdb.connect(self.path, read_only=read_only,
                                      config={"memory_limit": os.environ.get("HANGFORENSICS_DB_MEMORY", "256MB")})
        except duckdb.IOException as e:
            if "lock" in str(e).lower():
                raise DatabaseBusyError(
                    f"database {self.path} is busy: another hangforensics process is writing it"
                ) from e
            raise DatabaseError(f"cannot open database {self.path}: {_first_line(e)}") from e
        except duckdb.Error as e:
            raise DatabaseError(f"cannot open database {self.path}: {_first_line(e)}") from e
        try:
            if not read_only:
                # No vacuum at checkpoints: it merges the partial row groups that each commit leaves, compressing
                # their columns again, and a scan's later checkpoints then redid what the load's had left as
                # written (measured on a 202-engine fleet: 0.4 s of a 7.9 s scan, a 60 MB database instead of
                # 42 MB).  Row groups whose rows are all deleted (a re-read file, re-analysed engines) are still
                # dropped and their blocks reused.
                self.con.execute("SET max_vacuum_tasks = 0")
                self._migrate()
            else:
                check_readable(self.con, self.path)
        except BaseException:
            self.con.close()
            raise

    def _migrate(self) -> None:
        version = self.opened_at_version = self.schema_version()
        if version is not None and version < SCHEMA_VERSION:
            self.upgrade(version)
        for stmt in ddl_statements() + MACROS:
            self.con.execute(stmt)
        if version is None:
            self.con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])

    def schema_version(self) -> int | None:
        return schema_version(self.con, self.path)

    def upgrade(self, version: int) -> None:
        """Apply MIGRATIONS from ``version`` to SCHEMA_VERSION in one transaction."""
        missing = [v for v in range(version, SCHEMA_VERSION) if v not in MIGRATIONS]
        if missing:
            raise DatabaseError(
                f"database {self.path} has schema version {version}, which this hangforensics cannot migrate; "
                f"re-ingest the evidence into a new database")
        with self.transaction():
            for v in range(version, SCHEMA_VERSION):
                for stmt in MIGRATIONS[v]:
                    stmt(self.con) if callable(stmt) else self.con.execute(stmt)
            self.con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])

    # -- loading ---------------------------------------------------------------
    def append(self, table: str, rows: pa.Table | Sequence[dict[str, Any]], source_id: int | None = None) -> int:
        """Append rows (an Arrow table or dicts) to ``table``, matching columns by name.  The rows of a
        SOURCE_KEYED table name their file by a ``source_id`` column, else by ``source_id`` (one file), else
        by their engine and path, which must be a file in ``sources``."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table}")
        if not isinstance(rows, pa.Table):
            if not rows:
                return 0
            rows = pa.Table.from_pylist(list(rows))
        if rows.num_rows == 0:
            return 0
        # read through DuckDB's replacement scan of this frame's variable, not register(): a registered view
        # is a catalog entry, and its old version keeps the table alive until the transaction ends (a large
        # log's 256 MB of spilled batches then stayed mapped in the writer, 200 MB more resident memory)
        _hf_incoming = rows  # noqa: F841 (read by name in the query)
        if table in SOURCE_KEYED:
            self._append_keyed(table, rows, source_id)
        else:
            col_list = ", ".join(f'"{c}"' for c in rows.column_names)
            self.con.execute(f"INSERT INTO {physical(table)} ({col_list}) SELECT {col_list} FROM _hf_incoming")
        return rows.num_rows

    def _append_keyed(self, table: str, _hf_incoming: pa.Table, source_id: int | None) -> None:
        """The INSERT of ``append`` into a SOURCE_KEYED table."""
        columns = _hf_incoming.column_names
        path = SOURCE_KEYED[table]
        cols = [c for c in columns if c not in ("engine", path, "source_id")]
        col_list = ", ".join(f'"{c}"' for c in cols)
        values = ", ".join(stored(table, c, f'"{c}"') for c in cols)
        into = f"INSERT INTO {physical(table)} (source_id{', ' if cols else ''}{col_list})"
        if "source_id" in columns or source_id is not None:
            key = "source_id" if "source_id" in columns else str(int(source_id))  # type: ignore[arg-type]
            self.con.execute(f"{into} SELECT {key}{', ' if cols else ''}{values} FROM _hf_incoming")
            return
        if "engine" not in columns or path not in columns:
            raise ValueError(f"rows of {table} name no file (source_id, or engine and {path})")
        unknown = self.con.execute(
            f"SELECT count(*) FROM _hf_incoming r ANTI JOIN sources s ON s.engine = r.engine AND s.path = r.{path}"
        ).fetchone()[0]
        if unknown:
            raise ValueError(f"{unknown} row(s) of {table} name a file that is not in sources")
        r_list = ", ".join(stored(table, c, f'r."{c}"') for c in cols)
        self.con.execute(
            f"{into} SELECT s.source_id{', ' if cols else ''}{r_list} "
            f"FROM _hf_incoming r JOIN (SELECT engine, path, min(source_id) AS source_id FROM sources GROUP BY ALL) s "
            f"ON s.engine = r.engine AND s.path = r.{path}")

    def sibling(self) -> Store:
        """The same database on a second connection: its own transactions, usable from another thread while
        this one works (``close`` it after)."""
        other = copy.copy(self)
        other.con = self.con.cursor()
        return other

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.rollback()
            raise
        else:
            self.con.execute("COMMIT")

    def rollback(self) -> None:
        """Roll back the open transaction, if any: a COMMIT that failed (disk full) has already ended it,
        and a second error must not hide the first."""
        with contextlib.suppress(duckdb.TransactionException):
            self.con.execute("ROLLBACK")

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """First column of the first row (None when no row); consumes the whole result."""
        rows = self.con.execute(sql, params or []).fetchall()
        return rows[0][0] if rows else None

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


@contextlib.contextmanager
def beside(store: Store, work: Callable[[Store], None]) -> Iterator[None]:
    """``work`` run on a second connection to the store's database (``Store.sibling``) in another thread while
    the block runs; its error, if any, raised once both are done."""
    other = store.sibling()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work(other)
        except BaseException as e:      # noqa: BLE001 (raised in the caller's thread)
            failed.append(e)

    thread = threading.Thread(target=run, name="hangforensics-beside")
    thread.start()
    try:
        yield
    finally:
        thread.join()
        other.close()
    if failed:
        raise failed[0]
