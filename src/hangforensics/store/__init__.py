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

from ..errors import DatabaseBusyError, DatabaseError

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
        key VARCHAR PRIMARY KEY,        -- fact name, e.g. schema_version
        value VARCHAR                   -- fact value, as text
    """,
    "sources": """
        source_id INTEGER PRIMARY KEY,  -- row id of the file in this database
        path VARCHAR NOT NULL,          -- relative to the ingest root, begins with the engine folder for fleets
        abs_path VARCHAR NOT NULL,      -- absolute path the file was read from (a temporary folder for bundles)
        engine VARCHAR NOT NULL,        -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        kind VARCHAR NOT NULL,          -- from content: server_log, pyspy_dump, pyspy_json, gdb_dump, faulthandler_dump, native_trace, capture_error, gpu_samples, empty, binary, unreadable, unknown
        bytes BIGINT,                   -- bytes on disk (compressed size for .gz)
        lines BIGINT,                   -- lines read so far
        parsed_lines BIGINT,            -- lines represented by a typed row of a parsed view
        unparsed_lines BIGINT,          -- lines kept verbatim in unparsed (lines = parsed_lines + unparsed_lines)
        read_bytes BIGINT,              -- decompressed bytes consumed so far (resume point)
        head_hash VARCHAR,              -- hash of the first 64 KiB: identity across renames
        mtime DOUBLE,                   -- file modification time, seconds since the epoch
        compressed BOOLEAN,             -- true for a .gz file (read decompressed)
        rotation INTEGER,               -- 0 = live file, 1 = server.log.1, ...
        node VARCHAR,                   -- file stem when an engine has one log per node
        clock_offset_s DOUBLE,          -- seconds added to align this file to the main log's clock
        release_hint VARCHAR,           -- SGLang release family the formats point at
        status VARCHAR,                 -- ok, vanished
        ingested_at TIMESTAMP,          -- when this file was last read (local time of the ingesting machine)
        note VARCHAR                    -- what was odd about the file and how it was handled (binary, truncated, ...)
    """,
    "events": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        path VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- first line of the record in that file, from 1
        line_end BIGINT,                -- last line of a multi-line record (continuations attached)
        ts TIMESTAMP,                   -- when it was printed, on the clock of the engine's main log (aligned by clock_offset_s)
        rank VARCHAR,                   -- as SGLang writes it: 'TP3', 'DP1 TP1 EP1', '' for the main process
        kind VARCHAR,                   -- what the record is: server_args, watchdog, pyspy_header, torch_nccl, exception, vllm_stats, log, ...
        message VARCHAR,                -- first line of the record, without its prefix
        attrs JSON                      -- kind-specific fields (pid, timeout, seq, ...)
    """,
    "batches": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        path VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- line number in that file, from 1
        ts TIMESTAMP,                   -- when it was printed, on the clock of the engine's main log (aligned by clock_offset_s)
        rank VARCHAR,                   -- rank that printed the batch line (usually the first TP rank of each DP group)
        batch_kind VARCHAR,             -- Prefill / Decode
        forward_iter BIGINT,            -- forward pass counter, where the release prints one
        new_seq BIGINT,                 -- Prefill: '#new-seq', prompts started in this batch
        new_token BIGINT,               -- Prefill: '#new-token', prompt tokens computed
        cached_token BIGINT,            -- Prefill: '#cached-token', prompt tokens served from the prefix cache
        running_req BIGINT,             -- '#running-req': requests in the running batch
        queue_req BIGINT,               -- '#queue-req': requests waiting to be scheduled
        num_token BIGINT,               -- '#token' or '#full token'
        token_usage DOUBLE,             -- 'token usage' or 'full token usage'
        swa_token_usage DOUBLE,         -- sliding-window-attention KV pool usage (0-1), hybrid models
        mamba_usage DOUBLE,             -- Mamba state pool usage (0-1), hybrid models
        gen_throughput DOUBLE,          -- Decode: 'gen throughput (token/s)'
        input_throughput DOUBLE,        -- Prefill: 'input throughput (token/s)'
        graph BOOLEAN,                  -- cuda/cpu/npu/musa graph
        accept_len DOUBLE,              -- speculative decoding: mean accepted draft length
        pending_req BIGINT              -- PD queues: prealloc + transfer + inflight + bootstrap (+ older names)
    """,
    "http_requests": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        file VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- line number in that file, from 1
        ts TIMESTAMP,                   -- when it was printed, on the clock of the engine's main log (aligned by clock_offset_s); an access line is written when the response starts
        client VARCHAR,                 -- client address:port
        method VARCHAR,                 -- HTTP method (GET, POST, ...)
        path VARCHAR,                   -- URL path (the file is in 'file')
        status INTEGER                  -- HTTP status code answered
    """,
    "stacks": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        dump_id VARCHAR,                -- one stack dump (one process at one time); joins frames
        thread_id VARCHAR,              -- thread within the dump (joins frames with dump_id)
        ts TIMESTAMP,                   -- when the dump was taken, on the main log's clock (a standalone file's mtime when it has no time)
        rank VARCHAR,                   -- rank the dumped process serves, from its title or the log prefix
        pid BIGINT,                     -- process id of the dumped process
        thread_name VARCHAR,            -- thread name, e.g. MainThread
        thread_state VARCHAR,           -- idle, active, gil or as the dumper printed it
        path VARCHAR,                   -- file holding the dump, relative to the ingest root
        line BIGINT,                    -- line where the thread's section starts in that file
        process_title VARCHAR,          -- process title line, e.g. 'sglang::scheduler_TP3'
        capture VARCHAR,                -- embedded (in a log) or standalone
        format VARCHAR,                 -- pyspy_text, pyspy_json, gdb, gdb_pybt, faulthandler, trace
        garbled BOOLEAN                 -- interleaved output: only the certain frames were kept
    """,
    "frames": """
        dump_id VARCHAR,                -- the dump (joins stacks)
        thread_id VARCHAR,              -- the thread (joins stacks)
        depth INTEGER,                  -- 0 = innermost
        function VARCHAR,               -- function name (qualified where the dumper printed it)
        file VARCHAR,                   -- source file of the frame (Python file, or empty for native frames without one)
        line BIGINT,                    -- line in that source file
        native BOOLEAN,                 -- true for a native (C/C++/CUDA/NCCL) frame
        library VARCHAR                 -- shared object of a native frame, when printed
    """,
    "leak_reports": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        path VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- line number in that file, from 1
        ts TIMESTAMP,                   -- when it was printed, on the clock of the engine's main log (aligned by clock_offset_s)
        rank VARCHAR,                   -- rank that printed the report
        context VARCHAR,                -- idle / busy / watchdog
        form VARCHAR,                   -- radix, pool, mamba, hybrid_swa, req_pool, busy_assert
        leaked_full_pages BIGINT,       -- number of pages listed, NULL when printed as None / absent
        leaked_mamba_pages BIGINT,      -- Mamba pages listed as leaked, NULL when printed as None / absent
        total_size BIGINT,              -- pool size in tokens (max_total_num_tokens)
        available_size BIGINT,          -- free tokens in the pool
        evictable_size BIGINT,          -- tokens held by the radix cache that can be evicted
        protected_size BIGINT,          -- tokens locked by running requests in the radix cache
        shortfall BIGINT,               -- total - (available + evictable + protected [+ session_held])
        in_flight_batch_size BIGINT,    -- cur_batch.batch_size() printed beside it, when any
        message VARCHAR                 -- the report's first line, as printed
    """,
    "incidents": """
        incident_id VARCHAR,            -- stable across scans: engine and onset
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        segment INTEGER,                -- run of the server (a server_args line starts the next)
        kind VARCHAR,                   -- stall, leak, or the rule of a lone finding
        onset TIMESTAMP,                -- when it began: the stall onset or the first finding
        ended TIMESTAMP,                -- when it ended (see end_reason)
        end_reason VARCHAR,             -- restart, watchdog kill, evidence ends
        severity VARCHAR,               -- most severe finding in it
        rules VARCHAR[],                -- rules that fired in it
        signatures VARCHAR[],           -- catalogued signatures matched
        n_findings INTEGER,             -- findings grouped into it
        watchdog_kills INTEGER,         -- scheduler watchdog kills in it
        health_blind_s DOUBLE,          -- seconds /health answered 200 during the stall
        ranks VARCHAR[],                -- ranks its findings name
        first_seen_scan INTEGER,        -- scan_id of the scan that first saw it
        last_seen_scan INTEGER,         -- scan_id of the latest scan that saw it
        title VARCHAR                   -- one line for a human
    """,
    "scans": """
        scan_id INTEGER,                -- scan number, from 1
        root VARCHAR,                   -- fleet folder scanned
        started_at TIMESTAMP,           -- when the scan started
        finished_at TIMESTAMP,          -- NULL: the scan was interrupted
        files_read INTEGER,             -- files read (new or grown)
        files_unchanged INTEGER,        -- files skipped because unchanged
        files_vanished INTEGER,         -- files gone since the last scan
        engines_changed INTEGER,        -- engines with new data (re-analyzed)
        bytes_read BIGINT               -- bytes read by this scan
    """,
    "engine_state": """
        engine VARCHAR PRIMARY KEY,     -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        data_version INTEGER,           -- bumped in the same transaction as any change to the engine's rows
        analyzed_version INTEGER        -- data_version the findings were computed from
    """,
    "gpu_samples": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        path VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- line number in that file, from 1
        ts TIMESTAMP,                   -- when it was printed, on the clock of the engine's main log (aligned by clock_offset_s)
        gpu_index INTEGER,              -- GPU index on the node, as nvidia-smi numbers it
        util_pct DOUBLE,                -- GPU utilisation, percent
        power_w DOUBLE,                 -- power draw, watts
        mem_mib DOUBLE                  -- memory used, MiB
    """,
    "unparsed": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        path VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- line number in that file, from 1
        text VARCHAR                    -- the line verbatim
    """,
    "findings": """
        finding_id INTEGER,             -- row id
        rule VARCHAR,                   -- rule id (hangforensics rules lists them)
        severity VARCHAR,               -- critical, warning or info
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        ranks VARCHAR[],                -- ranks the finding names, [] when not rank-specific
        ts TIMESTAMP,                   -- when (interface.md §3), on the main log's clock; NULL when unknown
        ts_end TIMESTAMP,               -- end of the span it covers, NULL for a moment
        title VARCHAR,                  -- one line for a human
        detail VARCHAR,                 -- the reasoning, with the numbers
        evidence STRUCT(file VARCHAR, line BIGINT)[], -- supporting lines, each {file, line}, file relative to the ingest root
        signature VARCHAR               -- signature id on known-signature findings, else NULL
    """,
    # Derived models, rebuilt by analyze (see analysis.py).
    "rank_stops": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        segment INTEGER,                -- run of the server: 0 for the first, a server_args line starts the next
        rank VARCHAR,                   -- the rank
        stopped_at TIMESTAMP,           -- last progress of this rank; NULL when unknown
        source VARCHAR,                 -- batch_lines, watchdog, torch_nccl, absent_from_nccl
        path VARCHAR,                   -- file of the evidence for the stop
        line BIGINT                     -- line of that evidence
    """,
    "stalls": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        segment INTEGER,                -- run of the server: 0 for the first, a server_args line starts the next
        onset TIMESTAMP,                -- last forward progress
        evidence_end TIMESTAMP,         -- last evidence of the run (any line)
        silent_s DOUBLE,                -- seconds from onset to evidence_end
        pending VARCHAR,                -- why work was pending
        ranks VARCHAR[],                -- every rank seen in the segment
        path VARCHAR,                   -- the last batch line
        line BIGINT,                    -- line of the last batch line
        evidence STRUCT(file VARCHAR, line BIGINT)[] -- supporting lines, each {file, line}, file relative to the ingest root
    """,
    "rank_classes": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        capture INTEGER,                -- dumps of one engine taken within 5 minutes of each other
        class_id INTEGER,               -- node of the prefix tree of main-thread stacks (outermost first)
        parent_id INTEGER,              -- class_id of the parent node, NULL at the root
        depth INTEGER,                  -- depth in the tree, 0 = outermost frame
        frame VARCHAR,                  -- function of the frame at this node
        ranks VARCHAR[],                -- ranks whose stack passes through this node
        label VARCHAR,                  -- compact rank set, e.g. TP0-2,5
        is_leaf BOOLEAN,                -- a leaf is one equivalence class: ranks sharing the whole path
        ts TIMESTAMP                    -- time of the capture's first dump
    """,
    "rank_collectives": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        capture INTEGER,                -- capture: stack dumps of one engine taken within 5 minutes of each other, numbered from 0
        rank VARCHAR,                   -- the rank
        ts TIMESTAMP,                   -- when its dump was taken
        collective VARCHAR,             -- innermost collective frame (all_reduce, broadcast, recv, ...), NULL if none
        call_site VARCHAR,              -- first caller that is not a wrapper
        thread_state VARCHAR,           -- state of its main thread
        dump_id VARCHAR,                -- the dump (joins stacks and frames)
        path VARCHAR,                   -- file holding the dump
        line BIGINT                     -- line where the thread starts
    """,
    "desyncs": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        capture INTEGER,                -- capture: stack dumps of one engine taken within 5 minutes of each other, numbered from 0
        ts TIMESTAMP,                   -- time of the capture
        odd_ranks VARCHAR[],            -- the minority: ranks in a different collective or call site
        majority_ranks VARCHAR[],       -- ranks in the common collective or call site
        detail VARCHAR,                 -- the reasoning, with the frames
        evidence STRUCT(file VARCHAR, line BIGINT)[] -- supporting lines, each {file, line}, file relative to the ingest root
    """,
    "signature_matches": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        signature VARCHAR,              -- signature id (rules/signatures)
        title VARCHAR,                  -- the signature's title
        ts TIMESTAMP,                   -- when the evidence was seen
        ranks VARCHAR[],                -- ranks whose evidence matches
        detail VARCHAR,                 -- what matched
        evidence STRUCT(file VARCHAR, line BIGINT)[] -- supporting lines, each {file, line}, file relative to the ingest root
    """,
    "freezes": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        segment INTEGER,                -- run of the server: 0 for the first, a server_args line starts the next
        verdict VARCHAR,                -- together (shared deadlock), staggered or absent (a first rank)
        ts TIMESTAMP,                   -- first rank's stop
        ts_end TIMESTAMP,               -- last rank's stop
        ranks VARCHAR[],                -- ranks it covers
        source VARCHAR,                 -- batch_lines, watchdog, torch_nccl
        detail VARCHAR,                 -- the reasoning, with the times
        evidence STRUCT(file VARCHAR, line BIGINT)[] -- supporting lines, each {file, line}, file relative to the ingest root
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
    "progress": "Forward progress, one row per progress line: SGLang Prefill/Decode batch lines and vLLM stats "
                "lines whose generation throughput moved. The last row of a rank is where it stopped.",
    "gpu_rank_samples": "gpu_samples with the rank each GPU serves (from server_args base_gpu_id / gpu_id_step).",
    "engine_facts": "One row per engine: what it runs, as its logs show it (model, parallelism, flags, versions).",
    "nccl_progress": "torch ProcessGroupNCCL progress per rank and process group, compared within the group: "
                     "a rank behind the group's furthest completed collective is the suspect.",
}

# Columns of the convenience views (VIEWS): what each means.  The types come from the views themselves.
VIEW_COLUMNS: dict[str, dict[str, str]] = {
    "progress": {
        "engine": "the engine", "path": "file of the progress line", "line": "line number in that file",
        "ts": "when it was printed, on the main log's clock",
        "rank": "rank that printed it ('TP0'; '' for vLLM's main process)",
        "batch_kind": "Prefill, Decode, or vllm for a vLLM stats line",
        "running_req": "requests running (SGLang '#running-req', vLLM 'Running: N reqs')",
        "queue_req": "requests waiting (SGLang '#queue-req', vLLM 'Waiting: N reqs')",
        "pending_req": "PD disaggregation queues (batches.pending_req); NULL for vLLM",
    },
    "gpu_rank_samples": {
        "engine": "the engine", "path": "nvidia-smi CSV file", "line": "line number in that file",
        "ts": "sample time, on the main log's clock", "gpu_index": "GPU index on the node",
        "util_pct": "GPU utilisation, percent", "power_w": "power draw, watts", "mem_mib": "memory used, MiB",
        "rank": "rank served by that GPU, labelled like the log prefix ('TP3')",
    },
    "engine_facts": {
        "engine": "the engine", "model": "server_args model_path (the latest run's)",
        "tp_size": "tensor-parallel size", "dp_size": "data-parallel size",
        "enable_symm_mem": "NCCL symmetric memory enabled (--enable-symm-mem)",
        "enable_dp_attention": "DP attention enabled", "enable_hicache": "hierarchical KV cache enabled",
        "disaggregation_mode": "prefill, decode or null (no PD disaggregation)",
        "watchdog_timeout": "scheduler watchdog timeout, seconds",
        "health_generation": "false when SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is off (a blind /health); "
                             "NULL when not seen",
        "nccl_version": "NCCL version the log prints, when it does", "torch_version": "torch version the log prints",
        "release_hint": "SGLang release family the log formats point at",
    },
    "nccl_progress": {
        "engine": "the engine", "pg": "process group (PG GUID, else PG ID)",
        "global_rank": "global rank of the reporting process",
        "last_enqueued": "highest 'last enqueued work' sequence number it reported",
        "last_completed": "highest 'last completed work' sequence number it reported",
        "timeout_seq": "SeqNum of the collective that timed out", "first_report": "its first torch NCCL line",
        "lines": "torch NCCL lines it printed", "group_max_completed": "the group's furthest last_completed",
        "behind": "true when this rank completed less than the group's furthest",
        "reporting_ranks": "ranks of the group that reported",
    },
}

# interface.md §4: the views and key columns users rely on (kept by every release; marked in the doc).
CONTRACT_COLUMNS: dict[str, tuple[str, ...]] = {
    "sources": ("path", "engine", "kind", "bytes", "lines", "parsed_lines", "unparsed_lines"),
    "events": ("engine", "path", "line", "ts", "rank", "kind", "message"),
    "batches": ("engine", "ts", "rank", "batch_kind", "running_req", "queue_req", "token_usage", "gen_throughput"),
    "http_requests": ("engine", "ts", "method", "path", "status"),
    "stacks": ("engine", "dump_id", "ts", "rank", "pid", "thread_name", "thread_state"),
    "frames": ("dump_id", "thread_id", "depth", "function", "file", "line", "native"),
    "leak_reports": ("engine", "ts", "rank", "context", "leaked_full_pages", "leaked_mamba_pages"),
    "findings": ("rule", "severity", "engine", "ranks", "ts", "ts_end", "title", "detail", "evidence", "signature"),
    "unparsed": ("engine", "path", "line", "text"),
}


def table_columns(name: str) -> list[tuple[str, str, str]]:
    """(column, type, meaning) of a table, read from its DDL and the ``--`` comment on each line."""
    cols = []
    for raw in TABLES[name].strip().splitlines():
        body, _, note = raw.partition("--")
        body = body.strip().rstrip(",")
        if body:
            col, _, typ = body.partition(" ")
            cols.append((col, typ.strip(), note.strip()))
    return cols


def _column_table(name: str, cols: list[tuple[str, str, str]]) -> list[str]:
    stable = set(CONTRACT_COLUMNS.get(name, ()))
    out = ["| column | type | stable | meaning |", "| --- | --- | --- | --- |"]
    out += [f"| `{c}` | {t} | {'yes' if c in stable else ''} | {n.replace('|', '/')} |" for c, t, n in cols]
    return out + [""]


def schema_markdown() -> str:
    """docs/schema.md, generated from TABLES, VIEWS and their notes so the documentation cannot drift."""
    out = [
        "# Database schema",
        "",
        f"Schema version {SCHEMA_VERSION}. Generated from `src/hangforensics/store.py` "
        "(`python -m hangforensics.store > docs/schema.md`). Query it read-only with `hangforensics sql` "
        "(see [sql.md](sql.md) for the ready named queries).",
        "",
        "Timestamps are local time without zone, on the clock of the engine's main log: the views "
        f"{', '.join(f'`{n}`' for n in CLOCKED)} add `sources.clock_offset_s` to the time each file printed "
        "(their rows are stored in `t_<name>` tables, with the times as printed). Rank labels are written as "
        "SGLang writes them in its log prefix (`TP3`, `DP1 TP1 EP1`); the macro `rank_num(label, 'TP')` "
        "extracts a number.",
        "",
        "Columns with *stable* = yes are the key columns of interface.md §4: every release keeps their "
        "names and meaning. Every relation below exists in every database.",
        "",
    ]
    for name in TABLES:
        heading = f"## `{name}` (view over `{physical(name)}`)" if name in CLOCKED else f"## `{name}`"
        out += [heading, "", VIEW_NOTES[name], ""] + _column_table(name, table_columns(name))
    out += ["## Convenience views", "",
            "Views over the tables above for questions asked often.", ""]
    with Store(":memory:") as st:  # the views' column types, as DuckDB derives them
        for name, body in VIEWS.items():
            types = {r["column_name"]: r["column_type"] for r in st.query(f"DESCRIBE {name}")}
            cols = [(c, types[c], note) for c, note in VIEW_COLUMNS[name].items()]
            sql = "\n".join(x[8:] if x.startswith(" " * 8) else x for x in body.strip("\n").splitlines())
            out += [f"### `{name}`", "", VIEW_NOTES[name], ""] + _column_table(name, cols)
            out += ["<details><summary>SQL</summary>", "", "```sql", sql, "```", "", "</details>", ""]
    return "\n".join(out)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


if __name__ == "__main__":
    print(schema_markdown(), end="")
