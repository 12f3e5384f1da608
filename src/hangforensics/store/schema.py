"""The DuckDB schema: every table with its columns' meanings, the tables that keep a file's own clock, and
the migrations from older schema versions.

Columns named in interface.md §4 are the stable contract; the rest are additions documented in
docs/schema.md (generated from this file: ``python -m hangforensics.store > docs/schema.md``).
"""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 9

# How to bring an older database up to SCHEMA_VERSION: the statements that take version N to N + 1.
# Writing commands apply them (in one transaction) when they open an older database; read-only
# commands say how (``hangforensics migrate``).
MIGRATIONS: dict[int, list[Any]] = {      # SQL statements, or functions of the connection
    1: ["ALTER TABLE sources ADD COLUMN IF NOT EXISTS note VARCHAR"],
    # 3: collector envelopes (sources.envelope, collected_ts), episodes (findings.count / ts_basis),
    # stall cadence; the new tables (collective_records, probes, ...) are created by their DDL.
    2: ["ALTER TABLE sources ADD COLUMN IF NOT EXISTS envelope VARCHAR",
        *[f"ALTER TABLE t_{t} ADD COLUMN IF NOT EXISTS collected_ts TIMESTAMP"
          for t in ("events", "batches", "http_requests", "stacks")],
        "ALTER TABLE findings ADD COLUMN IF NOT EXISTS count INTEGER",
        "ALTER TABLE findings ADD COLUMN IF NOT EXISTS ts_basis VARCHAR",
        "ALTER TABLE stalls ADD COLUMN IF NOT EXISTS ts_basis VARCHAR",
        "ALTER TABLE stalls ADD COLUMN IF NOT EXISTS cadence_s DOUBLE",
        "ALTER TABLE stalls ADD COLUMN IF NOT EXISTS running_req BIGINT",
        "ALTER TABLE freezes ADD COLUMN IF NOT EXISTS ts_basis VARCHAR",
        "ALTER TABLE t_stacks ADD COLUMN IF NOT EXISTS ts_basis VARCHAR",
        # fragments: dumps cut into parts (stack_joins and process_samples are created by their DDL)
        "ALTER TABLE t_stacks ADD COLUMN IF NOT EXISTS line_end BIGINT",
        "ALTER TABLE t_stacks ADD COLUMN IF NOT EXISTS fragment VARCHAR"],
    # 4: vLLM stats lines as typed rows (filled from the events already read), vLLM stalls in their terms
    3: ["ALTER TABLE stalls ADD COLUMN IF NOT EXISTS framework VARCHAR",
        "ALTER TABLE stalls ADD COLUMN IF NOT EXISTS waiting_req BIGINT",
        "ALTER TABLE stalls ADD COLUMN IF NOT EXISTS kv_usage DOUBLE",
        ],
    # 5: a rank that never reached the collective its peers wait in, from stack dumps (desyncs.kind)
    4: ["ALTER TABLE desyncs ADD COLUMN IF NOT EXISTS kind VARCHAR"],
    # 6: where a scan's time went (ingest, analysis, reports)
    5: [f"ALTER TABLE scans ADD COLUMN IF NOT EXISTS {c} DOUBLE" for c in ("ingest_s", "analyze_s", "report_s")],
}

# Table DDL.  Columns named in interface.md §4 are the stable contract; the rest

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
        kind VARCHAR NOT NULL,          -- from content: server_log, pyspy_dump, pyspy_json, gdb_dump, faulthandler_dump, native_trace, capture_error, gpu_samples, flight_recorder, nccl_ras, fr_trace, hand_summary (stacks a person abbreviated: rank labels and function names), metrics_text (a reporter's table or timeline of metrics, /metrics excerpts), capture_manifest, process_facts, process_snapshot, empty, binary, unreadable, unknown
        bytes BIGINT,                   -- bytes on disk (compressed size for .gz)
        lines BIGINT,                   -- physical lines read so far (of a collector's file: its records, split ones counted per part; of a Flight Recorder dump: its entries)
        parsed_lines BIGINT,            -- lines represented by a typed row of a parsed view
        unparsed_lines BIGINT,          -- lines kept verbatim in unparsed (lines = parsed_lines + unparsed_lines): dropped by the envelope (fences, prose), or part of a payload line no parser took
        read_bytes BIGINT,              -- decompressed bytes consumed so far (resume point)
        head_hash VARCHAR,              -- hash of the first 64 KiB: identity across renames
        mtime DOUBLE,                   -- file modification time, seconds since the epoch
        compressed BOOLEAN,             -- true for a .gz file (read decompressed)
        rotation INTEGER,               -- 0 = live file, 1 = server.log.1, ...
        node VARCHAR,                   -- file stem when an engine has one log per node
        clock_offset_s DOUBLE,          -- seconds added to align this file to the main log's clock (a Flight Recorder dump: UTC to the log's clock)
        release_hint VARCHAR,           -- SGLang release family the formats point at
        status VARCHAR,                 -- ok, vanished, partial, error: ..., refused: ... (a pickle naming a global: nothing loaded)
        ingested_at TIMESTAMP,          -- when this file was last read (local time of the ingesting machine)
        note VARCHAR,                   -- what was odd about the file and how it was handled (binary, truncated, ...)
        envelope VARCHAR,               -- how a collector or a paste wrapped the file (kubectl, cri, docker_json, journald, markdown, ...; layers joined by +), none when plain
        last_dated TIMESTAMP,           -- the latest time printed with its full date in the file's head and tail (its engine's dated evidence: a log's, GPU samples', a capture's; NULL none)
        year_near TIMESTAMP             -- what the file's lines printed without a year were dated near: its own last_dated, else the latest of its engine's files (NULL: none; its modification time bounds them)
    """,
    "events": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        path VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- first line of the record in that file, from 1
        line_end BIGINT,                -- last line of a multi-line record (continuations attached)
        ts TIMESTAMP,                   -- when it was printed, on the clock of the engine's main log (aligned by clock_offset_s)
        rank VARCHAR,                   -- as SGLang writes it: 'TP3', 'DP1 TP1 EP1', '' for the main process
        kind VARCHAR,                   -- what the record is: server_args, watchdog, pyspy_header, torch_nccl, exception, vllm_stats, nccl_ras (what a RAS report singles out about a rank), a torch.distributed job's rank_exit (a worker's exit as torchrun reports it: exit_code, signal, pid, local_rank, root_cause), child_failed (torchrun's failure summary), torch_elastic, rank_traceback, c10d_error (a gloo / c10d error: backend, error, op, timeout_ms, abort), train_step (a job's own dated step / iteration line: step; its forward progress), reporter_table / reporter_timeline / metrics_sample (what a reporter tabulated: facts only), log, ...
        message VARCHAR,                -- first line of the record, without its prefix
        attrs JSON,                     -- kind-specific fields (pid, timeout, seq, ...)
        collected_ts TIMESTAMP          -- the collector envelope's time of the record (kubectl, CRI, journald, ...), NULL without one
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
        pending_req BIGINT,             -- PD queues: prealloc + transfer + inflight + bootstrap (+ older names)
        collected_ts TIMESTAMP          -- the collector envelope's time of the record (kubectl, CRI, journald, ...), NULL without one
    """,
    "http_requests": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        file VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- line number in that file, from 1
        ts TIMESTAMP,                   -- when it was printed, on the clock of the engine's main log (aligned by clock_offset_s); an access line is written when the response starts; one printed without a time: its envelope time aligned to the payload clock, else the record before it (an estimate, said in sources.note)
        client VARCHAR,                 -- client address:port
        method VARCHAR,                 -- HTTP method (GET, POST, ...)
        path VARCHAR,                   -- URL path (the file is in 'file')
        status INTEGER,                 -- HTTP status code answered
        collected_ts TIMESTAMP          -- the collector envelope's time of the record (kubectl, CRI, journald, ...), NULL without one
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
        format VARCHAR,                 -- pyspy_text, pyspy_json, gdb, gdb_pybt, faulthandler, trace, flight_recorder (the call site a dump recorded for the collective a rank stands at, one thread per process group)
        garbled BOOLEAN,                -- interleaved output: only the certain frames were kept
        collected_ts TIMESTAMP,         -- the collector envelope's time of the record (kubectl, CRI, journald, ...), NULL without one
        ts_basis VARCHAR,               -- where ts comes from: record (the log record embedding the dump), manifest (a capture bundle's manifest: when py-spy read the stack), mtime (the file's modification time)
        line_end BIGINT,                -- last line of the thread's section in that file (its last frame, locals or cut line)
        fragment VARCHAR                -- NULL: whole as far as the text shows; cut: its section ends at a line cut mid-token (its later frames missing); continuation: headerless frames at the start of a dump's later part (thread_id '?'); joined: its frames go on after a cut or foreign line (two pastes in one file; thread_id '?<line>' when the header above them was cut), or, on a '?' row, its frames were appended to the thread stack_joins names
    """,
    "stack_joins": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        seq INTEGER,                    -- order of the joins within the engine (a dump over three files joins twice)
        dump_id VARCHAR,                -- the first part's dump: the continuation's threads now belong to it
        thread_id VARCHAR,              -- its last thread, whose frames the continuation's headerless frames extend
        depth INTEGER,                  -- depth of the first appended frame (the first part's frame count)
        from_dump_id VARCHAR,           -- the continuation's own dump; its '?' row (fragment joined) keeps its file and lines
        from_rank VARCHAR,              -- the continuation's rank before the join (it takes the first part's)
        basis VARCHAR                   -- cut (the first part's last line was cut mid-token, and no other part could follow it) or only (the engine's only dump left open at the end of its file)
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
    "vllm_stats": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        path VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- line number in that file, from 1 (its events row has the same path and line)
        ts TIMESTAMP,                   -- when it was printed, on the clock of the engine's main log (aligned by clock_offset_s)
        process VARCHAR,                -- who printed it, as its tag names it (APIServer, EngineCore_DP0), '' without a tag
        engine_index INTEGER,           -- V1 'Engine 001:' (a data-parallel engine core), NULL for V0 and aggregated lines
        engines INTEGER,                -- V1 'N Engines Aggregated:': the engine cores one line sums up, else NULL
        format VARCHAR,                 -- v0 (Running/Swapped/Pending) or v1 (Running/Waiting)
        prompt_tps DOUBLE,              -- 'Avg prompt throughput' (tokens/s) over the interval
        gen_tps DOUBLE,                 -- 'Avg generation throughput' (tokens/s): > 0 is forward progress
        running BIGINT,                 -- 'Running: N reqs' (stale when the engine core stopped reporting)
        waiting BIGINT,                 -- V1 'Waiting: N reqs', V0 'Pending: N reqs'
        swapped BIGINT,                 -- V0 'Swapped: N reqs'
        kv_usage DOUBLE,                -- 'GPU KV cache usage' in percent
        cpu_kv_usage DOUBLE,            -- V0 'CPU KV cache usage' (swap space) in percent
        prefix_hit DOUBLE,              -- V1 'Prefix cache hit rate' in percent
        collected_ts TIMESTAMP          -- the collector envelope's time of the record (kubectl, CRI, journald, ...), NULL without one
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
        segment INTEGER,                -- run of the server (runs.segment)
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
        bytes_read BIGINT,              -- bytes read by this scan
        ingest_s DOUBLE,                -- seconds spent planning, parsing and loading files
        analyze_s DOUBLE,               -- seconds spent on the changed engines' models, rules, summaries and incidents
        report_s DOUBLE                 -- seconds spent writing the findings document's rows and the HTML reports
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
    "process_samples": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        path VARCHAR,                   -- file the row was read from, relative to the ingest root
        line BIGINT,                    -- line of the row in that file
        snapshot INTEGER,               -- which snapshot of the file (one top iteration, one ps run), from 0
        tool VARCHAR,                   -- the layout recognised: top, top -H (threads), ps aux, ps -ef, ps -eLf, ps -o
        ts_printed VARCHAR,             -- the snapshot's time as printed: top's time of day ('14:02:11'), a date line beside it, NULL
        ts TIMESTAMP,                   -- that time when it carries a date, on the snapshot host's own clock and zone: never aligned to the log (another zone or day is common)
        clock VARCHAR,                  -- what ts_printed is: time_of_day (no date: ts NULL), dated (a date line), none
        pid BIGINT,                     -- process id (NULL on a top -H row: its id is a thread's, in tid)
        tid BIGINT,                     -- thread id of a thread row (top -H, ps -L: LWP / TID / SPID), NULL for a process row
        ppid BIGINT,                    -- parent process id, when printed
        user VARCHAR,                   -- USER or UID as printed
        state VARCHAR,                  -- kernel state letter: R running, S sleeping, D uninterruptible (usually a driver wait), Z, T, I
        cpu_pct DOUBLE,                 -- %CPU as printed: top's is over the last interval (100 = one core); ps's is the average over the process's life
        mem_pct DOUBLE,                 -- %MEM as printed
        wchan VARCHAR,                  -- kernel function the task waits in (ps -o wchan), '-' when running, NULL when not printed
        command VARCHAR,                -- command or thread name as printed (top cuts it to 15 characters without -c)
        rank VARCHAR,                   -- rank from the process title (sglang::scheduler_TP3, VLLM::Worker_TP1, VllmWorker-2) or from another dump of the same pid
        activity VARCHAR                -- state and CPU read together: spinning (R at 90 % or more), running, sleeping, uninterruptible, stopped, zombie
    """,
    "unparsed": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        path VARCHAR,                   -- file the row was read from, relative to the ingest root (begins with the engine folder for fleets)
        line BIGINT,                    -- line number in that file, from 1
        text VARCHAR                    -- the line verbatim, as the file has it (envelope included)
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
        signature VARCHAR,              -- signature id on known-signature findings, else NULL
        count INTEGER,                  -- how many repetitions of the same signal the finding stands for (an episode)
        ts_basis VARCHAR                -- read (a line says so) or inferred (derived: the detail says how)
    """,
    # Derived models, rebuilt by analyze (see analysis.py).
    "rank_stops": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        segment INTEGER,                -- run of the server (runs.segment): 0 for the first
        rank VARCHAR,                   -- the rank
        stopped_at TIMESTAMP,           -- last progress of this rank; NULL when unknown
        source VARCHAR,                 -- batch_lines, watchdog, torch_nccl, absent_from_nccl
        path VARCHAR,                   -- file of the evidence for the stop
        line BIGINT                     -- line of that evidence
    """,
    "runs": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        segment INTEGER,                -- 0 for the first run, then in time order
        start_ts TIMESTAMP,             -- where the run begins, on the main log's clock; NULL for the first (it holds the evidence before any start)
        end_ts TIMESTAMP,               -- where the next run begins (exclusive); NULL for the last
        started_by VARCHAR              -- what began it: start line (server_args, a vLLM version or engine config line), labels changed (the batch lines' rank labels changed form: another parallelism, another process), logs resumed (server logs resuming in other files more than 6 h after every earlier one ended, with ranks in common); NULL for the first run
    """,
    "stalls": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence (SGLang or vLLM), as named under the ingest root
        segment INTEGER,                -- run of the server (runs.segment): 0 for the first
        onset TIMESTAMP,                -- last forward progress
        evidence_end TIMESTAMP,         -- last evidence of the run (any line)
        silent_s DOUBLE,                -- seconds from onset to evidence_end (vLLM: to the end the liveness probes show when only access lines, which print no time, follow)
        pending VARCHAR,                -- why work was pending
        ranks VARCHAR[],                -- every rank seen in the segment
        path VARCHAR,                   -- the last batch line
        line BIGINT,                    -- line of the last batch line
        evidence STRUCT(file VARCHAR, line BIGINT)[], -- supporting lines, each {file, line}, file relative to the ingest root
        ts_basis VARCHAR,               -- read (the last progress line) or inferred (watchdog fire time minus its timeout, ...)
        cadence_s DOUBLE,               -- the engine's usual gap between progress lines before the stall (median)
        running_req BIGINT,             -- requests running in the last progress line (vLLM: its last stats line)
        framework VARCHAR,              -- sglang (batch lines) or vllm (stats lines)
        waiting_req BIGINT,             -- vLLM: requests waiting in the last stats line (V0 'Pending')
        kv_usage DOUBLE                 -- vLLM: GPU KV cache usage (percent) in the last stats line
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
        evidence STRUCT(file VARCHAR, line BIGINT)[], -- supporting lines, each {file, line}, file relative to the ingest root
        kind VARCHAR                    -- desync (ranks in different collectives) or absent (odd ranks in none, in every round, while the rest wait in one)
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
        segment INTEGER,                -- run of the server (runs.segment): 0 for the first
        verdict VARCHAR,                -- together (shared deadlock), staggered or absent (a first rank)
        ts TIMESTAMP,                   -- first rank's stop
        ts_end TIMESTAMP,               -- last rank's stop
        ranks VARCHAR[],                -- ranks it covers
        source VARCHAR,                 -- batch_lines, watchdog, torch_nccl
        detail VARCHAR,                 -- the reasoning, with the times
        evidence STRUCT(file VARCHAR, line BIGINT)[], -- supporting lines, each {file, line}, file relative to the ingest root
        ts_basis VARCHAR                -- read or inferred (see detail)
    """,
    "collective_records": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        path VARCHAR,                   -- file the record was read from, relative to the ingest root
        line BIGINT,                    -- line of the record in that file (for a Flight Recorder dump: the entry's number, from 1)
        source VARCHAR,                 -- flight_recorder (a rank's dump), nccl_ras (ncclras output, text or JSON), fr_trace (torch's Flight Recorder analyzer's text), desync_report (TORCH_NCCL_DESYNC_DEBUG lines of a ProcessGroupNCCL timeout) mismatch_check (TORCH_DISTRIBUTED_DEBUG=DETAIL's 'Detected mismatch between collectives', each rank it names) or monitored_barrier (torch's monitored barrier: the ranks that never arrived, absent, and those that did)
        rank INTEGER,                   -- global rank (a Flight Recorder dump's file-name suffix; RAS: the rank in the communicator, global when it spans the job); NULL when not printed
        pg VARCHAR,                     -- process group (name / GUID as printed, the desync report's that of its timeout line), NCCL communicator hash, or '(job)' for a RAS process of the whole job
        pg_desc VARCHAR,                -- the group's description (tp:0, default_pg, ...; RAS: the block, e.g. #0-0)
        pg_ranks INTEGER[],             -- the group's members when the evidence lists them (Flight Recorder pg_config; RAS: 0 .. ranks per communicator - 1)
        seq BIGINT,                     -- collective sequence number (Flight Recorder collective_seq_id or p2p_seq_id; desync report: collective #N, which is SeqNum=N; RAS: operations launched); NULL for a rank reported absent
        op VARCHAR,                     -- all_reduce, broadcast, ... (RAS: the collective type, or ALL for the 2.24/2.25 total)
        state VARCHAR,                  -- scheduled, started, completed (Flight Recorder, desync report); launched (RAS); missing, dead, unresponsive, absent (a rank reported absent)
        ts TIMESTAMP,                   -- when, as the file says it (Flight Recorder: epoch ns as UTC, the enqueue time; the collectives view adds the file's clock offset); NULL when unknown
        attrs JSON                      -- the rest: seq_kind (collective, p2p, a RAS collective type or all), records merged, sizes and dtypes, timeout_ms, clock (utc), reason, inferred (a rank RAS counts without naming), the desync report's relation and reporting rank
    """,
    "probes": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        client VARCHAR,                 -- client address without its port
        method VARCHAR,                 -- HTTP method (GET)
        path VARCHAR,                   -- the probed URL path, whatever it is (/health, /v1/models, ...)
        n BIGINT,                       -- requests in the series
        interval_s DOUBLE,              -- median interval between them
        first_ts TIMESTAMP,             -- first request
        last_ts TIMESTAMP,              -- last request
        basis VARCHAR                   -- behaviour (one client, one path, a steady interval) or path (a well-known probe path)
    """,
    "collective_verdicts": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        source VARCHAR,                 -- torch_nccl, flight_recorder, nccl_ras, fr_trace, desync_report, mismatch_check or monitored_barrier: one verdict never mixes sources
        pg VARCHAR,                     -- the process group compared (never compared across groups)
        verdict VARCHAR,                -- desync (ranks disagree), absent (a member missing or dead), agree, split (a tie: no majority) or undecided (one rank: nothing to compare)
        ranks VARCHAR[],                -- the odd ranks: the minority, or the absent members
        majority_ranks VARCHAR[],       -- the ranks that agree with the reference
        seq BIGINT,                     -- the reference sequence number (the majority's)
        op VARCHAR,                     -- the reference op
        ts TIMESTAMP,                   -- the earliest disagreeing record's time, on the main log's clock when it could be aligned (see detail)
        ts_basis VARCHAR,               -- read or inferred
        detail VARCHAR,                 -- the reasoning, with the numbers; says why, and what the desync report adds
        evidence STRUCT(file VARCHAR, line BIGINT)[] -- supporting lines, each {file, line}, file relative to the ingest root
    """,
    "engine_summaries": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        verdict VARCHAR,                -- one sentence, true also when no rule fired
        span_start TIMESTAMP,           -- first timestamp read
        span_end TIMESTAMP,             -- last timestamp read
        ranks VARCHAR[],                -- ranks seen in any evidence
        files MAP(VARCHAR, INTEGER),    -- files read, by kind
        unparsed_lines BIGINT,          -- lines no parser took
        capture_next VARCHAR[],         -- evidence to capture next time, specific to what is missing
        facts VARCHAR[],                -- the strongest facts seen, one sentence each
        thin BOOLEAN,                   -- nothing found, and the evidence could not have shown a hang (no progress line, or nothing this tool reads)
        died BOOLEAN                    -- nothing found, and the verdict says a process of the engine died or was killed (a scheduler's exception, a signal, torch's heartbeat monitor): not a hang, not healthy
    """,
}

# A `hangforensics capture` bundle (interface.md §6), read by ingest from its manifest.json and
# proc/round<k>.json, and the snapshot model analyze derives from them.  Times are the capture host's
# wall clock (the manifest's zone dropped): the clock the engine's log on that host prints.
CAPTURE_TABLES: dict[str, str] = {
    "captures": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        capture_id VARCHAR,             -- the bundle's manifest.json, relative to the ingest root: one capture
        path VARCHAR,                   -- file the row was read from (the manifest)
        line BIGINT,                    -- line of the record in that file (1: the whole manifest)
        format_version INTEGER,         -- manifest format version
        host VARCHAR,                   -- host name of the machine captured
        kernel VARCHAR,                 -- its kernel release
        machine VARCHAR,                -- its architecture (x86_64, aarch64)
        euid INTEGER,                   -- effective uid capture ran as (0: root, py-spy may attach to anything)
        ptrace_scope VARCHAR,           -- kernel.yama.ptrace_scope on that host, NULL without Yama
        command VARCHAR[],              -- the capture command line, as typed (secrets masked)
        hangforensics_version VARCHAR,  -- version of the hangforensics that captured
        started TIMESTAMP,              -- when the capture began (capture host's wall clock)
        finished TIMESTAMP,             -- when it ended
        utc_offset_s INTEGER,           -- the capture host's zone offset from UTC, seconds
        selector VARCHAR,               -- how the engine was named: pid, port, match or auto
        target VARCHAR,                 -- what was given (the pid, port or pattern)
        root_pid BIGINT,                -- pid of the engine's root process (the server)
        family VARCHAR,                 -- sglang, vllm or unknown
        native BOOLEAN,                 -- py-spy --native was asked for
        repeat INTEGER,                 -- snapshot rounds asked for (--repeat)
        interval_s DOUBLE,              -- seconds between rounds (--interval)
        timeout_s DOUBLE,               -- bound on the whole capture (--timeout)
        log_lines BIGINT,               -- lines kept from the end of each log (--log-lines)
        rounds INTEGER,                 -- rounds actually taken
        max_spread_s DOUBLE,            -- largest skew between the first and last dump start of one round
        tools JSON,                     -- tools found: [{name, version, path, note}] (py-spy, nvidia-smi, sglang, vllm)
        gpu_file VARCHAR,               -- the nvidia-smi samples file, relative to the ingest root; NULL without one
        logs JSON                       -- log tails copied: [{source, file, origin, bytes, lines, complete, mtime}]
    """,
    "capture_processes": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        capture_id VARCHAR,             -- the capture (captures.capture_id)
        path VARCHAR,                   -- file the row was read from (the manifest)
        line BIGINT,                    -- line where the process's entry starts
        pid BIGINT,                     -- process id
        ppid BIGINT,                    -- parent process id
        title VARCHAR,                  -- process title / command line (secrets masked)
        role VARCHAR,                   -- main, scheduler, detokenizer, dp_controller, tokenizer, engine_core, worker, api_server, other
        rank VARCHAR,                   -- rank label as SGLang's log prefix writes it ('DP0 TP3'); NULL when not a rank
        label VARCHAR,                  -- file-name label ('TP3', 'DP0_TP3', 'main')
        exe VARCHAR,                    -- executable
        python BOOLEAN,                 -- a Python interpreter (py-spy can read it)
        create_time TIMESTAMP           -- when the process started
    """,
    "capture_dumps": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        capture_id VARCHAR,             -- the capture (captures.capture_id)
        path VARCHAR,                   -- file the row was read from (the manifest)
        line BIGINT,                    -- line where the dump's record starts
        round INTEGER,                  -- snapshot round, from 1
        round_started TIMESTAMP,        -- when the round began (its /proc facts were read then)
        pid BIGINT,                     -- process dumped
        label VARCHAR,                  -- its file-name label ('TP3', 'main')
        rank VARCHAR,                   -- its rank label, NULL when not a rank
        role VARCHAR,                   -- its role (scheduler, main, ...)
        ok BOOLEAN,                     -- py-spy produced a dump
        file VARCHAR,                   -- the dump, relative to the ingest root (joins stacks.path); NULL when none
        error_file VARCHAR,             -- py-spy's error output, relative to the ingest root, when it failed
        start_ts TIMESTAMP,             -- just before py-spy started
        end_ts TIMESTAMP,               -- when py-spy had exited: the stack was read in between (the dump's time)
        native BOOLEAN,                 -- a --native dump
        exit_code INTEGER,              -- py-spy's exit status
        reason VARCHAR,                 -- why it failed, one line
        note VARCHAR                    -- e.g. --native failed and a plain dump was taken instead
    """,
    "capture_failures": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        capture_id VARCHAR,             -- the capture (captures.capture_id)
        path VARCHAR,                   -- file the row was read from (the manifest)
        line BIGINT,                    -- line where the failure's record starts
        what VARCHAR,                   -- pyspy, process, gpu, log, tool, engine-version, round
        reason VARCHAR,                 -- one line for a human: what was not captured and why
        pid BIGINT,                     -- the process concerned, when one
        round INTEGER,                  -- the round concerned, when one
        file VARCHAR,                   -- a file of the bundle that shows it (py-spy's error output), relative to the ingest root
        skipped BOOLEAN                 -- true: not attempted on purpose (a non-Python process), false: attempted and failed
    """,
    "process_facts": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        capture_id VARCHAR,             -- the capture (captures.capture_id); NULL for a facts file outside a bundle
        path VARCHAR,                   -- file the row was read from: proc/round<k>.json, or the manifest (which repeats the facts)
        line BIGINT,                    -- line where the process's entry starts in that file
        source VARCHAR,                 -- proc (proc/round<k>.json, with every thread) or manifest
        round INTEGER,                  -- snapshot round, from 1
        taken TIMESTAMP,                -- when /proc was read (just before the round's dumps)
        pid BIGINT,                     -- the process
        label VARCHAR,                  -- its file-name label ('TP3', 'main'); NULL in the manifest's copy
        role VARCHAR,                   -- its role; NULL in the manifest's copy
        rank VARCHAR,                   -- its rank label; NULL when not a rank or in the manifest's copy
        gone BOOLEAN,                   -- the process had exited (or become a zombie) by this round
        state VARCHAR,                  -- /proc/PID/stat state: R running, S sleeping, D uninterruptible (a driver wait), Z, T, t
        cpu_user_s DOUBLE,              -- user CPU seconds of the whole process so far
        cpu_system_s DOUBLE,            -- system CPU seconds of the whole process so far
        main_cpu_s DOUBLE,              -- CPU seconds of the main thread alone (user + system); NULL in older bundles
        wchan VARCHAR,                  -- kernel function the main thread sleeps in (unix_stream_read_generic, futex_wait_queue, ...); NULL while running
        syscall VARCHAR,                -- main thread's system call (recvmsg, futex, ...) or 'running'
        threads INTEGER,                -- thread count
        thread_states JSON,             -- state letter -> threads in that state
        thread_wchans JSON,             -- wchan -> threads waiting there ('-': none)
        thread_list JSON                -- every thread: [{tid, comm, state, wchan, cpu_s}] (proc files only)
    """,
    "snapshot_facts": """
        engine VARCHAR,                 -- the engine: folder of one server's evidence, as named under the ingest root
        capture_id VARCHAR,             -- the capture (captures.capture_id)
        rank VARCHAR,                   -- the rank
        pid BIGINT,                     -- its process
        snapshots INTEGER,              -- rounds in which it was seen (facts or a dump)
        first_ts TIMESTAMP,             -- its first snapshot
        last_ts TIMESTAMP,              -- its last snapshot
        status VARCHAR,                 -- stuck (same frames, state, wchan, CPU flat), driver_wait (stuck in state D), spinning (same frames, CPU rising), moved (frames or wait changed: slow, not stuck), gone; one snapshot: blocked, running, unknown
        unchanged INTEGER,              -- consecutive snapshots, ending with the last, that did not change (1 when it moved or was seen once)
        since TIMESTAMP,                -- the first of those unchanged snapshots: stuck since at least then
        span_s DOUBLE,                  -- seconds from since to the last snapshot
        state VARCHAR,                  -- process state letter at the last snapshot
        wchan VARCHAR,                  -- main thread's kernel wait at the last snapshot
        syscall VARCHAR,                -- main thread's system call at the last snapshot
        cpu_delta_s DOUBLE,             -- CPU seconds used over the unchanged span (main thread when known, else the process)
        cpu_basis VARCHAR,              -- main thread or process: what cpu_delta_s measures
        frames_same BOOLEAN,            -- the main-thread frames were identical in those snapshots; NULL without two dumps
        frame VARCHAR,                  -- innermost frame that says where it is, at the last dump
        collective VARCHAR,             -- collective it waits in at the last dump (rank_collectives), NULL if none
        call_site VARCHAR,              -- that collective's caller
        dump_id VARCHAR,                -- its last dump (joins stacks, rank_collectives)
        detail VARCHAR,                 -- the fact in words, shared by the ranks of one group ('TP0-3: same main-thread frames, ...')
        evidence STRUCT(file VARCHAR, line BIGINT)[] -- its facts and dumps, each {file, line}, file relative to the ingest root
    """,
}
TABLES.update(CAPTURE_TABLES)



def _num(rx: str, typ: str) -> str:
    return f"TRY_CAST(NULLIF(regexp_extract(message, '{rx}', 1), '') AS {typ})"


# A database of version 3 holds vLLM stats lines only as events: their typed rows, as the parser reads them
# (parsers/vllm_log.stats_rows), so that the progress view keeps seeing them without a re-ingest.
_V0 = r"regexp_matches(message, '(?:Pending|Swapped): \d+ reqs')"
_CPU_KV = _num(r", CPU KV cache usage: ([\d.]+)%", "DOUBLE")
_BACKFILL = [
    "engine", "path", "line", "ts", "rank",
    _num(r"^Engine (\d+): ", "INTEGER"), _num(r"^(\d+) Engines Aggregated: ", "INTEGER"),
    f"CASE WHEN {_V0} THEN 'v0' ELSE 'v1' END",
    _num(r"Avg prompt throughput: ([\d.]+)", "DOUBLE"), _num(r"Avg generation throughput: ([\d.]+)", "DOUBLE"),
    _num(r"Running: (\d+) reqs", "BIGINT"), _num(r"(?:Waiting|Pending): (\d+) reqs", "BIGINT"),
    _num(r"Swapped: (\d+) reqs", "BIGINT"), _num(r"KV cache usage: ([\d.]+)%", "DOUBLE"),
    f"CASE WHEN {_V0} THEN {_CPU_KV} END",
    _num(r"Prefix cache hit rate: (?:GPU: )?([\d.]+)%", "DOUBLE"), "collected_ts",
]


def _backfill_vllm_stats(con: Any) -> None:
    """Migration 3 -> 4: the stats rows of a database that has no t_vllm_stats yet (one that has the table,
    in whatever layout, keeps it as it is: its rows are there)."""
    if con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main' "
                   "AND table_name = 't_vllm_stats'").fetchone()[0]:
        return
    con.execute(f"CREATE TABLE t_vllm_stats ({TABLES['vllm_stats']})")
    con.execute(f"INSERT INTO t_vllm_stats SELECT {', '.join(_BACKFILL)} FROM t_events WHERE kind = 'vllm_stats'")


MIGRATIONS[3] += [_backfill_vllm_stats]

# Tables whose timestamps are stored as the file printed them: the interface view of
# the same name adds the file's clock offset (sources.clock_offset_s), so evidence
# from another node's clock lines up with the main log without rewriting rows.
CLOCKED = {"events": "path", "batches": "path", "http_requests": "file", "stacks": "path", "leak_reports": "path",
           "gpu_samples": "path", "vllm_stats": "path"}

# Parsed tables appended by ingest, in load order.
LOADED_TABLES = ("events", "batches", "http_requests", "vllm_stats", "stacks", "frames", "leak_reports", "gpu_samples",
                 "collective_records", "process_samples", "unparsed")
LOADED_TABLES += ("captures", "capture_processes", "capture_dumps", "capture_failures", "process_facts")


# The tables of the bulk of a log's lines name their file by ``source_id`` (sources.source_id), not by engine
# and path text repeated on every row: the writer inserted those two strings per row (a fifth of the insert of
# a batch line), and the views join ``sources`` for them (its few rows; the clock offset comes with them).
# Each maps to its path column in the view.
SOURCE_KEYED = {"batches": "path", "http_requests": "file", "vllm_stats": "path"}

# Columns a SOURCE_KEYED table stores as INTEGER that its view shows as BIGINT: a batch line's counts of
# requests and tokens.  The writer's insert of a busy log's batch lines cost some 7 % less CPU so (measured on
# the 445 MB log's rows alone: 1.74 -> 1.60 s; its whole ingest 3.91 -> 3.78 s, paired).  A count beyond
# INTEGER's range (a batch of 2^31 tokens: no such thing) is stored NULL; ``forward_iter``, a counter that
# grows for the server's life, stays BIGINT.  A database made before keeps BIGINT there (the same values).
NARROW_COLUMNS = {"batches": ("new_seq", "new_token", "cached_token", "running_req", "queue_req", "num_token",
                              "pending_req")}


def stored(name: str, col: str, value: str) -> str:
    """The SQL that stores ``value`` in column ``col`` of ``physical(name)`` (a NARROW_COLUMNS one: as INTEGER)."""
    return f"TRY_CAST({value} AS INTEGER)" if col in NARROW_COLUMNS.get(name, ()) else value


def physical(name: str) -> str:
    """Table that stores ``name``'s rows (raw clock for CLOCKED tables)."""
    return f"t_{name}" if name in CLOCKED else name


def ddl_columns(ddl: str) -> list[tuple[str, str, str]]:
    """(column, type, meaning) of a table's DDL, the meaning from the ``--`` comment on its line."""
    cols = []
    for raw in ddl.strip().splitlines():
        body, _, note = raw.partition("--")
        body = body.strip().rstrip(",")
        if body:
            col, _, typ = body.partition(" ")
            cols.append((col, typ.strip(), note.strip()))
    return cols


def physical_ddl(name: str) -> str:
    """The columns of ``physical(name)``: the view's, or for a SOURCE_KEYED table ``source_id`` in place of
    its engine and path columns."""
    if name not in SOURCE_KEYED:
        return TABLES[name]
    drop = {"engine", SOURCE_KEYED[name]}
    cols = [("source_id", "INTEGER", "the file the row was read from (sources.source_id: engine, path, clock offset)")]
    narrow = NARROW_COLUMNS.get(name, ())
    cols += [(col, "INTEGER" if col in narrow else typ, note) for col, typ, note in ddl_columns(TABLES[name])
             if col not in drop]
    # each comment after its comma; the last line ends with a newline (the caller's ')' outside the comment)
    return "".join(f"{col} {typ}{',' if k < len(cols) - 1 else ''} -- {note}\n"
                   for k, (col, typ, note) in enumerate(cols))


def keyed_columns(name: str) -> list[str]:
    """The columns of a SOURCE_KEYED table's view, in order (engine and path from sources)."""
    return [col for col, _, _ in ddl_columns(TABLES[name])]


def to_source_keys(con: Any) -> None:
    """Migration 6 -> 7: each SOURCE_KEYED table still holding engine and path text (a table the database
    has in that form) rewritten with the source_id of its rows' (engine, path)."""
    for name in SOURCE_KEYED:
        cols = {r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' AND table_name = ?",
            [physical(name)]).fetchall()}
        if "engine" in cols:
            for stmt in _to_source_keys(name):
                con.execute(stmt)


def _to_source_keys(name: str) -> list[str]:
    t, path = physical(name), SOURCE_KEYED[name]
    rest = [c for c in keyed_columns(name) if c not in ("engine", path)]
    return [
        f"CREATE TABLE {t}_keyed ({physical_ddl(name)})",
        f"INSERT INTO {t}_keyed (source_id, {', '.join(rest)}) "
        f"SELECT s.source_id, {', '.join(stored(name, c, 'r.' + c) for c in rest)} "
        f"FROM {t} r JOIN (SELECT engine, path, min(source_id) AS source_id FROM sources GROUP BY ALL) s "
        f"ON s.engine = r.engine AND s.path = r.{path}",
        f"DROP VIEW IF EXISTS {name}",
        f"DROP TABLE {t}",
        f"ALTER TABLE {t}_keyed RENAME TO {t}",
    ]


# 7: batches, access lines and vLLM stats lines name their file by source_id
MIGRATIONS[6] = [to_source_keys]
# 8: year-less lines dated by their engine's dated evidence (an older file's: NULL, read as it was)
MIGRATIONS[7] = [f"ALTER TABLE sources ADD COLUMN IF NOT EXISTS {c} TIMESTAMP" for c in ("last_dated", "year_near")]
# 9: an engine's summary says whether its verdict, with nothing found, is of a process that died (an older
# database's: NULL until its engines are analysed again)
MIGRATIONS[8] = ["ALTER TABLE engine_summaries ADD COLUMN IF NOT EXISTS died BOOLEAN"]
