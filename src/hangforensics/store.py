"""The DuckDB store: schema, views, and batched Arrow loading.

Every table the parsers fill and every view SREs query is declared here, so the
schema lives in one place.  Tables carry a leading underscore-free name and are
exposed unchanged as the interface views of ``interface.md`` §4; derived models
(``rank_stops``, ``stalls``) are rebuilt by ``analyze``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from .errors import DatabaseBusyError, DatabaseError

SCHEMA_VERSION = 2

# How to bring an older database up to SCHEMA_VERSION: the statements that take version N to N + 1.
# Writing commands apply them (in one transaction) when they open an older database; read-only
# commands say how (``hangforensics migrate``).
MIGRATIONS: dict[int, list[str]] = {
    1: ["ALTER TABLE sources ADD COLUMN IF NOT EXISTS note VARCHAR"],
}

# Table DDL.  Columns named in interface.md §4 are the stable contract; the rest
# are additions documented in docs/schema.md.
TABLES: dict[str, str] = {
    "meta": """
        key VARCHAR PRIMARY KEY,
        value VARCHAR
    """,
    "sources": """
        source_id INTEGER PRIMARY KEY,
        path VARCHAR NOT NULL,          -- relative to the ingest root, begins with the engine folder for fleets
        abs_path VARCHAR NOT NULL,
        engine VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,          -- server_log, pyspy_dump, unknown, unreadable
        bytes BIGINT,                   -- bytes on disk (compressed size for .gz)
        lines BIGINT,
        parsed_lines BIGINT,
        unparsed_lines BIGINT,
        read_bytes BIGINT,              -- decompressed bytes consumed so far (resume point)
        head_hash VARCHAR,              -- hash of the first 64 KiB: identity across renames
        mtime DOUBLE,
        compressed BOOLEAN,
        rotation INTEGER,               -- 0 = live file, 1 = server.log.1, ...
        node VARCHAR,                   -- file stem when an engine has one log per node
        clock_offset_s DOUBLE,          -- seconds added to align this file to the main log's clock
        release_hint VARCHAR,           -- SGLang release family the formats point at
        status VARCHAR,                 -- ok, vanished
        ingested_at TIMESTAMP,
        note VARCHAR                    -- what was odd about the file and how it was handled (binary, truncated, ...)
    """,
    "events": """
        engine VARCHAR,
        path VARCHAR,
        line BIGINT,
        line_end BIGINT,                -- last line of a multi-line record (continuations attached)
        ts TIMESTAMP,
        rank VARCHAR,                   -- as SGLang writes it: 'TP3', 'DP1 TP1 EP1', '' for the main process
        kind VARCHAR,
        message VARCHAR,                -- first line of the record, without its prefix
        attrs JSON                      -- kind-specific fields (pid, timeout, seq, ...)
    """,
    "batches": """
        engine VARCHAR,
        path VARCHAR,
        line BIGINT,
        ts TIMESTAMP,
        rank VARCHAR,
        batch_kind VARCHAR,             -- Prefill / Decode
        forward_iter BIGINT,
        new_seq BIGINT,
        new_token BIGINT,
        cached_token BIGINT,
        running_req BIGINT,
        queue_req BIGINT,
        num_token BIGINT,               -- '#token' or '#full token'
        token_usage DOUBLE,             -- 'token usage' or 'full token usage'
        swa_token_usage DOUBLE,
        mamba_usage DOUBLE,
        gen_throughput DOUBLE,
        input_throughput DOUBLE,
        graph BOOLEAN,                  -- cuda/cpu/npu/musa graph
        accept_len DOUBLE,
        pending_req BIGINT              -- PD queues: prealloc + transfer + inflight + bootstrap (+ older names)
    """,
    "http_requests": """
        engine VARCHAR,
        file VARCHAR,
        line BIGINT,
        ts TIMESTAMP,
        client VARCHAR,
        method VARCHAR,
        path VARCHAR,                   -- URL path (the file is in 'file')
        status INTEGER
    """,
    "stacks": """
        engine VARCHAR,
        dump_id VARCHAR,
        thread_id VARCHAR,
        ts TIMESTAMP,
        rank VARCHAR,
        pid BIGINT,
        thread_name VARCHAR,
        thread_state VARCHAR,
        path VARCHAR,
        line BIGINT,
        process_title VARCHAR,
        capture VARCHAR,                -- embedded (in a log) or standalone
        format VARCHAR,                 -- pyspy_text, pyspy_json, gdb, gdb_pybt, faulthandler, trace
        garbled BOOLEAN                 -- interleaved output: only the certain frames were kept
    """,
    "frames": """
        dump_id VARCHAR,
        thread_id VARCHAR,
        depth INTEGER,                  -- 0 = innermost
        function VARCHAR,
        file VARCHAR,
        line BIGINT,
        native BOOLEAN,
        library VARCHAR                 -- shared object of a native frame, when printed
    """,
    "leak_reports": """
        engine VARCHAR,
        path VARCHAR,
        line BIGINT,
        ts TIMESTAMP,
        rank VARCHAR,
        context VARCHAR,                -- idle / busy / watchdog
        form VARCHAR,                   -- radix, pool, mamba, hybrid_swa, req_pool, busy_assert
        leaked_full_pages BIGINT,       -- number of pages listed, NULL when printed as None / absent
        leaked_mamba_pages BIGINT,
        total_size BIGINT,
        available_size BIGINT,
        evictable_size BIGINT,
        protected_size BIGINT,
        shortfall BIGINT,               -- total - (available + evictable + protected [+ session_held])
        in_flight_batch_size BIGINT,    -- cur_batch.batch_size() printed beside it, when any
        message VARCHAR
    """,
    "incidents": """
        incident_id VARCHAR,            -- stable across scans: engine and onset
        engine VARCHAR,
        segment INTEGER,                -- run of the server (a server_args line starts the next)
        kind VARCHAR,                   -- stall, leak, or the rule of a lone finding
        onset TIMESTAMP,
        ended TIMESTAMP,
        end_reason VARCHAR,             -- restart, watchdog kill, evidence ends
        severity VARCHAR,
        rules VARCHAR[],
        signatures VARCHAR[],
        n_findings INTEGER,
        watchdog_kills INTEGER,
        health_blind_s DOUBLE,          -- seconds /health answered 200 during the stall
        ranks VARCHAR[],
        first_seen_scan INTEGER,
        last_seen_scan INTEGER,
        title VARCHAR
    """,
    "scans": """
        scan_id INTEGER,
        root VARCHAR,
        started_at TIMESTAMP,
        finished_at TIMESTAMP,          -- NULL: the scan was interrupted
        files_read INTEGER,
        files_unchanged INTEGER,
        files_vanished INTEGER,
        engines_changed INTEGER,
        bytes_read BIGINT
    """,
    "engine_state": """
        engine VARCHAR PRIMARY KEY,
        data_version INTEGER,           -- bumped in the same transaction as any change to the engine's rows
        analyzed_version INTEGER        -- data_version the findings were computed from
    """,
    "gpu_samples": """
        engine VARCHAR,
        path VARCHAR,
        line BIGINT,
        ts TIMESTAMP,
        gpu_index INTEGER,
        util_pct DOUBLE,
        power_w DOUBLE,
        mem_mib DOUBLE
    """,
    "unparsed": """
        engine VARCHAR,
        path VARCHAR,
        line BIGINT,
        text VARCHAR
    """,
    "findings": """
        finding_id INTEGER,
        rule VARCHAR,
        severity VARCHAR,
        engine VARCHAR,
        ranks VARCHAR[],
        ts TIMESTAMP,
        ts_end TIMESTAMP,
        title VARCHAR,
        detail VARCHAR,
        evidence STRUCT(file VARCHAR, line BIGINT)[],
        signature VARCHAR
    """,
    # Derived models, rebuilt by analyze (see analysis.py).
    "rank_stops": """
        engine VARCHAR,
        segment INTEGER,
        rank VARCHAR,
        stopped_at TIMESTAMP,           -- last progress of this rank; NULL when unknown
        source VARCHAR,                 -- batch_lines, watchdog, torch_nccl, absent_from_nccl
        path VARCHAR,
        line BIGINT
    """,
    "stalls": """
        engine VARCHAR,
        segment INTEGER,
        onset TIMESTAMP,                -- last forward progress
        evidence_end TIMESTAMP,
        silent_s DOUBLE,
        pending VARCHAR,                -- why work was pending
        ranks VARCHAR[],                -- every rank seen in the segment
        path VARCHAR,                   -- the last batch line
        line BIGINT,
        evidence STRUCT(file VARCHAR, line BIGINT)[]
    """,
    "rank_classes": """
        engine VARCHAR,
        capture INTEGER,                -- dumps of one engine taken within 5 minutes of each other
        class_id INTEGER,               -- node of the prefix tree of main-thread stacks (outermost first)
        parent_id INTEGER,
        depth INTEGER,
        frame VARCHAR,
        ranks VARCHAR[],                -- ranks whose stack passes through this node
        label VARCHAR,                  -- compact rank set, e.g. TP0-2,5
        is_leaf BOOLEAN,                -- a leaf is one equivalence class: ranks sharing the whole path
        ts TIMESTAMP
    """,
    "rank_collectives": """
        engine VARCHAR,
        capture INTEGER,
        rank VARCHAR,
        ts TIMESTAMP,
        collective VARCHAR,             -- innermost collective frame (all_reduce, broadcast, recv, ...), NULL if none
        call_site VARCHAR,              -- first caller that is not a wrapper
        thread_state VARCHAR,
        dump_id VARCHAR,
        path VARCHAR,
        line BIGINT
    """,
    "desyncs": """
        engine VARCHAR,
        capture INTEGER,
        ts TIMESTAMP,
        odd_ranks VARCHAR[],            -- the minority: ranks in a different collective or call site
        majority_ranks VARCHAR[],
        detail VARCHAR,
        evidence STRUCT(file VARCHAR, line BIGINT)[]
    """,
    "signature_matches": """
        engine VARCHAR,
        signature VARCHAR,
        title VARCHAR,
        ts TIMESTAMP,
        ranks VARCHAR[],
        detail VARCHAR,
        evidence STRUCT(file VARCHAR, line BIGINT)[]
    """,
    "freezes": """
        engine VARCHAR,
        segment INTEGER,
        verdict VARCHAR,                -- together (shared deadlock), staggered or absent (a first rank)
        ts TIMESTAMP,
        ts_end TIMESTAMP,
        ranks VARCHAR[],
        source VARCHAR,                 -- batch_lines, watchdog, torch_nccl
        detail VARCHAR,
        evidence STRUCT(file VARCHAR, line BIGINT)[]
    """,
}

# Tables whose timestamps are stored as the file printed them: the interface view of
# the same name adds the file's clock offset (sources.clock_offset_s), so evidence
# from another node's clock lines up with the main log without rewriting rows.
CLOCKED = {"events": "path", "batches": "path", "http_requests": "file", "stacks": "path", "leak_reports": "path",
           "gpu_samples": "path"}

# Views over the tables, for questions SREs ask often.
VIEWS = {
    # Forward progress: SGLang batch lines, and vLLM stats lines whose generation throughput moved.
    "progress": """
        SELECT engine, path, line, ts, rank, batch_kind, running_req, queue_req, pending_req FROM batches
        UNION ALL
        SELECT engine, path, line, ts, rank, 'vllm' AS batch_kind,
               TRY_CAST(regexp_extract(message, 'Running: (\\d+) reqs', 1) AS BIGINT) AS running_req,
               TRY_CAST(regexp_extract(message, 'Waiting: (\\d+) reqs', 1) AS BIGINT) AS queue_req,
               NULL::BIGINT AS pending_req
        FROM events
        WHERE kind = 'vllm_stats'
          AND TRY_CAST(regexp_extract(message, 'Avg generation throughput: ([0-9.]+)', 1) AS DOUBLE) > 0
    """,
    # GPU index -> local rank via base_gpu_id / gpu_id_step (server_args), labelled like the log prefix.
    "gpu_rank_samples": """
        SELECT g.*, 'TP' || CAST((g.gpu_index - COALESCE(a.base, 0)) // COALESCE(NULLIF(a.step, 0), 1) AS VARCHAR)
               AS rank
        FROM gpu_samples g LEFT JOIN (
            SELECT engine, max(TRY_CAST(json_extract_string(attrs, '$.base_gpu_id') AS INTEGER)) AS base,
                   max(TRY_CAST(json_extract_string(attrs, '$.gpu_id_step') AS INTEGER)) AS step
            FROM events WHERE kind = 'server_args' GROUP BY engine) a ON a.engine = g.engine
    """,
    # What an engine runs, as its logs show it: the configuration facts a fleet view compares.
    "engine_facts": """
        WITH a AS (
            SELECT engine, arg_max(attrs, ts) AS attrs FROM events WHERE kind = 'server_args' GROUP BY engine),
        env AS (
            SELECT engine, string_agg(message, ' ') AS env FROM events WHERE kind = 'environment' GROUP BY engine),
        nccl AS (
            SELECT engine, max(regexp_extract(message, 'NCCL version:? ?([0-9][0-9.]+[0-9])', 1)) AS v
            FROM events WHERE message LIKE '%NCCL version%' GROUP BY engine),
        torch AS (
            SELECT engine, max(regexp_extract(message, 'torch(?:==| version:? ?)([0-9][0-9.]+[0-9][^ ,]*)', 1)) AS v
            FROM events WHERE message LIKE '%torch%version%' OR message LIKE '%torch==%' GROUP BY engine)
        SELECT s.engine,
               json_extract_string(a.attrs, '$.model_path') AS model,
               TRY_CAST(json_extract_string(a.attrs, '$.tp_size') AS INTEGER) AS tp_size,
               TRY_CAST(json_extract_string(a.attrs, '$.dp_size') AS INTEGER) AS dp_size,
               TRY_CAST(json_extract_string(a.attrs, '$.enable_symm_mem') AS BOOLEAN) AS enable_symm_mem,
               TRY_CAST(json_extract_string(a.attrs, '$.enable_dp_attention') AS BOOLEAN) AS enable_dp_attention,
               TRY_CAST(json_extract_string(a.attrs, '$.enable_hierarchical_cache') AS BOOLEAN) AS enable_hicache,
               json_extract_string(a.attrs, '$.disaggregation_mode') AS disaggregation_mode,
               TRY_CAST(json_extract_string(a.attrs, '$.watchdog_timeout') AS DOUBLE) AS watchdog_timeout,
               CASE WHEN env.env LIKE '%SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0%'
                      OR env.env LIKE '%SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false%' THEN false END
                 AS health_generation,
               NULLIF(nccl.v, '') AS nccl_version, NULLIF(torch.v, '') AS torch_version,
               max(s.release_hint) AS release_hint
        FROM sources s LEFT JOIN a USING (engine) LEFT JOIN env USING (engine) LEFT JOIN nccl USING (engine)
             LEFT JOIN torch USING (engine)
        GROUP BY ALL
    """,
    # torch ProcessGroupNCCL progress per rank and process group, compared within the group:
    # ranks stuck on the same SeqNum agree; a rank behind the group's furthest, or absent, is the suspect.
    "nccl_progress": """
        WITH r AS (
            SELECT engine, COALESCE(json_extract_string(attrs, '$.pg_guid'), json_extract_string(attrs, '$.pg_id'), '?') AS pg,
                   TRY_CAST(json_extract_string(attrs, '$.global_rank') AS INTEGER) AS global_rank,
                   max(TRY_CAST(json_extract_string(attrs, '$.last_enqueued') AS BIGINT)) AS last_enqueued,
                   max(TRY_CAST(json_extract_string(attrs, '$.last_completed') AS BIGINT)) AS last_completed,
                   max(TRY_CAST(json_extract_string(attrs, '$.seq') AS BIGINT)) AS timeout_seq,
                   min(ts) AS first_report, count(*) AS lines
            FROM events WHERE kind = 'torch_nccl' AND json_extract_string(attrs, '$.pg_rank') IS NOT NULL
              AND json_extract_string(attrs, '$.pg_id') IS NOT NULL AND json_extract_string(attrs, '$.pg_id') <> '0'
            GROUP BY ALL)
        SELECT *, max(last_completed) OVER (PARTITION BY engine, pg) AS group_max_completed,
               last_completed < max(last_completed) OVER (PARTITION BY engine, pg) AS behind,
               count(*) OVER (PARTITION BY engine, pg) AS reporting_ranks
        FROM r
    """,
}

# Rank labels are compared by their numbers; these macros keep SQL short.
MACROS = [
    "CREATE OR REPLACE MACRO rank_num(label, tag) AS "
    "TRY_CAST(regexp_extract(label, '(?:^| )' || tag || '(\\d+)', 1) AS INTEGER)",
]

# Parsed tables appended by ingest, in load order.
LOADED_TABLES = ("events", "batches", "http_requests", "stacks", "frames", "leak_reports", "gpu_samples", "unparsed")


def physical(name: str) -> str:
    """Table that stores ``name``'s rows (raw clock for CLOCKED tables)."""
    return f"t_{name}" if name in CLOCKED else name


def _ddl() -> list[str]:
    stmts = [f"CREATE TABLE IF NOT EXISTS {physical(name)} ({cols})" for name, cols in TABLES.items()]
    for name, file_col in CLOCKED.items():
        stmts.append(
            f"CREATE OR REPLACE VIEW {name} AS SELECT r.* REPLACE ("
            f"r.ts + to_microseconds(CAST(COALESCE(o.offset_s, 0) * 1e6 AS BIGINT)) AS ts) "
            f"FROM t_{name} r LEFT JOIN (SELECT engine, path, max(clock_offset_s) AS offset_s FROM sources "
            f"GROUP BY ALL) o ON o.engine = r.engine AND o.path = r.{file_col}"
        )
    for name, body in VIEWS.items():
        stmts.append(f"CREATE OR REPLACE VIEW {name} AS {body}")
    return stmts


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
        for stmt in _ddl() + MACROS:
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
                    self.con.execute(stmt)
            self.con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])

    # -- loading ---------------------------------------------------------------
    def append(self, table: str, rows: pa.Table | Sequence[dict[str, Any]]) -> int:
        """Append rows (an Arrow table or dicts) to ``table``, matching columns by name."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table}")
        if not isinstance(rows, pa.Table):
            if not rows:
                return 0
            rows = pa.Table.from_pylist(list(rows))
        if rows.num_rows == 0:
            return 0
        cols = [c for c in rows.column_names]
        self.con.register("_incoming", rows)
        try:
            col_list = ", ".join(f'"{c}"' for c in cols)
            self.con.execute(f"INSERT INTO {physical(table)} ({col_list}) SELECT {col_list} FROM _incoming")
        finally:
            self.con.unregister("_incoming")
        return rows.num_rows

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


VIEW_NOTES = {
    "meta": "Key/value facts about the database; `schema_version` is the schema's version.",
    "sources": "One row per ingested file: the manifest that makes re-ingest incremental.",
    "events": "Recognised log records other than batch and access lines (kind says which).",
    "batches": "One row per Prefill/Decode batch line; keys parsed by name, never by position.",
    "http_requests": "One row per uvicorn access line.",
    "stacks": "One row per thread in a stack dump (embedded in a log or a standalone capture).",
    "frames": "One row per frame of a thread, depth 0 innermost.",
    "leak_reports": "Memory-check / leak reports with the context they were printed in.",
    "unparsed": "Every line no parser recognised, verbatim.",
    "findings": "What the rules found (interface.md §3).",
    "rank_stops": "Derived by analyze: per-rank evidence of when each rank stopped.",
    "stalls": "Derived by analyze: one row per run of the server that stalled.",
    "freezes": "Derived by analyze: how tightly the ranks of a stalled run froze.",
    "rank_classes": "Derived by analyze: STAT-style prefix tree of each capture's main-thread stacks.",
    "rank_collectives": "Derived by analyze: the collective and call site each rank waits in.",
    "desyncs": "Derived by analyze: captures whose ranks wait in different collectives.",
    "signature_matches": "Derived by analyze: catalogued hang signatures the evidence matches.",
    "gpu_samples": "One row per nvidia-smi CSV sample (view gpu_rank_samples adds the rank).",
    "incidents": "Written by scan: findings grouped by engine and stall episode.",
    "scans": "Written by scan: one row per scan; finished_at is NULL for an interrupted one.",
    "engine_state": "Whether an engine's findings are up to date with its data (incremental scans).",
}


def schema_markdown() -> str:
    """docs/schema.md, generated from TABLES so the documentation cannot drift from the DDL."""
    out = [
        "# Database schema",
        "",
        f"Schema version {SCHEMA_VERSION}. Generated from `src/hangforensics/store.py` "
        "(`python -m hangforensics.store > docs/schema.md`).",
        "",
        "Timestamps are local time without zone, on the clock of the engine's main log: the views "
        f"{', '.join(f'`{n}`' for n in CLOCKED)} add `sources.clock_offset_s` to the time each file printed "
        "(their rows are stored in `t_<name>` tables). Rank labels are written as SGLang writes them in its "
        "log prefix (`TP3`, `DP1 TP1 EP1`); the macro `rank_num(label, 'TP')` extracts a number.",
        "",
    ]
    for name, cols in TABLES.items():
        out += [f"## `{name}`", "", VIEW_NOTES.get(name, ""), "", "| column | type | notes |", "| --- | --- | --- |"]
        for raw in cols.strip().splitlines():
            body, _, note = raw.partition("--")
            body = body.strip().rstrip(",")
            if not body:
                continue
            col, _, typ = body.partition(" ")
            out.append(f"| `{col}` | {typ.strip()} | {note.strip()} |")
        out.append("")
    out += ["## Convenience views", ""]
    for name, body in VIEWS.items():
        out += [f"### `{name}`", "", "```sql", "\n".join(x[8:] if x.startswith(" " * 8) else x
                                                     for x in body.strip("\n").splitlines()), "```", ""]
    return "\n".join(out)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


if __name__ == "__main__":
    print(schema_markdown(), end="")
