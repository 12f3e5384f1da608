"""The schema document (docs/schema.md): every table, view and column with its meaning."""

from __future__ import annotations

from .schema import (
    CLOCKED,
    NARROW_COLUMNS,
    SCHEMA_VERSION,
    SOURCE_KEYED,
    TABLES,
    ddl_columns,
    physical,
    physical_ddl,
)
from .views import VIEWS

VIEW_NOTES = {
    "meta": "Key/value facts about the database; `schema_version` is the schema's version.",
    "sources": "One row per ingested file: the manifest that makes re-ingest incremental.",
    "events": "Recognised log records other than batch and access lines (kind says which).",
    "batches": "One row per Prefill/Decode batch line; keys parsed by name, never by position.",
    "http_requests": "One row per uvicorn access line.",
    "stacks": "One row per thread in a stack dump (embedded in a log or a standalone capture).",
    "frames": "One row per frame of a thread, depth 0 innermost.",
    "stack_joins": "Written by ingest: a dump pasted in pieces across files, put back together. The continuation's "
                   "headerless frames were appended to the first part's last thread (from `depth` on) and its other "
                   "threads moved into that dump; its `'?'` row (fragment joined) keeps where the part was read.",
    "process_samples": "One row per process or thread of a `top` / `ps` snapshot (kind process_snapshot): state, "
                       "CPU, wait channel, rank from the process title. Its times are as printed, on the snapshot "
                       "host's clock: a time of day alone (top) or another zone or day is never aligned with the "
                       "logs.",
    "leak_reports": "Memory-check / leak reports with the context they were printed in.",
    "unparsed": "Every line no parser recognised, verbatim.",
    "findings": "What the rules found (interface.md §3).",
    "rank_stops": "Derived by analyze: per-rank evidence of when each rank stopped.",
    "runs": "Derived by analyze: the runs of each engine's server, what every stall, freeze and episode is judged "
            "within (a restart never joins two runs' evidence). A start line begins one; so does a restart whose "
            "start line is not in the evidence (a paste cut after it, a log rotated away) where the evidence "
            "shows one: the batch lines' rank labels change form, or server logs resume in other files long "
            "after the earlier ones ended.",
    "stalls": "Derived by analyze: one row per run of the server that stalled.",
    "freezes": "Derived by analyze: how tightly the ranks of a stalled run froze.",
    "rank_classes": "Derived by analyze: STAT-style prefix tree of each capture's main-thread stacks.",
    "rank_collectives": "Derived by analyze: the collective and call site each rank waits in.",
    "desyncs": "Derived by analyze: captures whose ranks wait in different collectives (kind desync), or whose odd ranks never enter the collective the others wait in (kind absent).",
    "signature_matches": "Derived by analyze: catalogued hang signatures the evidence matches.",
    "gpu_samples": "One row per nvidia-smi CSV sample (view gpu_rank_samples adds the rank).",
    "incidents": "Written by scan: findings grouped by engine and stall episode.",
    "scans": "Written by scan: one row per scan; finished_at is NULL for an interrupted one.",
    "engine_state": "Whether an engine's findings are up to date with its data (incremental scans).",
    "progress": "Forward progress, one row per progress line: SGLang Prefill/Decode batch lines and vLLM stats "
                "lines whose generation throughput moved (from vllm_stats). The last row of a rank is where it "
                "stopped.",
    "vllm_stats": "One row per vLLM stats line (V0 'Avg prompt throughput: ..., Running, Swapped, Pending, GPU/CPU "
                  "KV cache usage'; V1 'Engine 000: ..., Running, Waiting, GPU KV cache usage, Prefix cache hit "
                  "rate', or 'N Engines Aggregated:'), its fields typed and found by name; the same line is also "
                  "an events row of kind vllm_stats.",
    "vllm_series": "vllm_stats with each line's progress series: 'DP<i>' for engine core i of a data-parallel "
                   "deployment that prints one line per engine core, '' for the engine as a whole.",
    "gpu_rank_samples": "gpu_samples with the rank each GPU serves (from server_args base_gpu_id / gpu_id_step).",
    "engine_facts": "One row per engine: what it runs, as its logs show it (model, parallelism, flags, versions).",
    "collective_records": "Collective records read from PyTorch Flight Recorder dumps (one file per rank, "
                          "pickle or JSON, loaded without running anything), NCCL RAS output (ncclras) and "
                          "PyTorch desync-debug reports (TORCH_NCCL_DESYNC_DEBUG lines of a ProcessGroupNCCL "
                          "timeout); the collectives view adds torch ProcessGroupNCCL lines.",
    "probes": "Derived by analyze: liveness probes recognised by behaviour (one client, one GET path, a steady "
              "interval) or by a well-known probe path.",
    "collective_verdicts": "Derived by analyze: each process group's collective records compared, one "
                           "source at a time, by one matcher (analysis/collectives/collective_match.py): the majority of "
                           "ranks is the reference, the minority is named (desync), a member missing or dead is "
                           "named (absent), a tie names nobody (split). A desync report is tied to its group's "
                           "verdict and says whether it agrees.",
    "engine_summaries": "Derived by analyze: one row per engine read, also when no rule fired: the verdict, what "
                        "was read and what to capture next (interface.md §5).",
    "collectives": "One row per (engine, source, rank, process group, sequence number, op) as reported: torch "
                   "ProcessGroupNCCL timeouts, Flight Recorder entries, NCCL RAS counts, desync-report statements. "
                   "Majorities count ranks, "
                   "not rows; SeqNums of different process groups are never compared.",
    "progress_marks": "What ends a silence: progress lines and server starts. A repeated signal's episode is "
                      "the last mark before it.",
    "nccl_progress": "torch ProcessGroupNCCL progress per rank and process group, compared within the group: "
                     "a rank behind the group's furthest completed collective is the suspect.",
    "watchdog_fires": "One row per scheduler watchdog firing, with when it fired. A firing with its timeout line: "
                      "that line, fired when the first line of the same rank's dump before it was printed (py-spy "
                      "runs for seconds between the two). A firing whose timeout line is not in the evidence is "
                      "read from the watchdog's other outputs (a rank's debug-info block, batch record, py-spy "
                      "record or py-spy failure, which only a firing watchdog prints, with no timeout line of that "
                      "rank within 60 s and no progress of that rank within watchdog_timeout before): one row per "
                      "rank and dump, attrs.inferred_from naming the outputs.",
}
VIEW_NOTES.update({
    "captures": "One row per `hangforensics capture` bundle read (its manifest.json): host, command, options, "
                "tools, rounds taken.",
    "capture_processes": "Every process of the captured engine tree, from the bundle's manifest: role, rank, title.",
    "capture_dumps": "Every py-spy run of a capture, from its manifest: round, process, when the stack was read "
                     "(end_ts: the time the dump's stacks rows carry, ts_basis 'manifest'), or why it failed.",
    "capture_failures": "What a capture could not collect, and why (py-spy missing, no permission, a process gone, "
                        "a timeout, no nvidia-smi), plus what it skipped on purpose.",
    "process_facts": "Per capture round and process: /proc state, CPU time, main-thread wchan and syscall, threads "
                     "(from proc/round<k>.json, and the manifest's copy with source 'manifest').",
    "snapshot_facts": "Derived by analyze: per capture and rank, what repeated snapshots show: stuck (frames, state, "
                      "wchan and CPU time unchanged) since when, spinning, moved (slow, not stuck), or one snapshot's "
                      "state. Feeds collective-desync (a rank that never returns to the per-iteration broadcast), the "
                      "signatures' 'blocked' test and the rules stuck-across-snapshots / moved-between-snapshots.",
})

# Columns of the convenience views (VIEWS): what each means.  The types come from the views themselves.
VIEW_COLUMNS: dict[str, dict[str, str]] = {
    "collectives": {
        "engine": "the engine", "source": "torch_nccl, flight_recorder, nccl_ras, fr_trace, desync_report, mismatch_check or monitored_barrier",
        "rank": "global rank ('[rankN]:' prefix, a Flight Recorder dump's file-name suffix, RAS 'Rank N' of its "
                "communicator, the desync report's ranks where they are global)",
        "pg_rank": "rank within the process group (torch lines' 'Rank N'), when no global rank is printed",
        "pg": "the process group as printed: GUID with its description ('1(tp:0)'), 'PG 130' for older torch, "
              "a Flight Recorder group name, a RAS communicator hash; '?' when no line names it",
        "pg_desc": "the group's description (tp:0, default_pg; RAS: the block, e.g. #0-0)",
        "pg_ranks": "the group's members when the evidence lists them (Flight Recorder pg_config, a RAS "
                    "communicator's size)",
        "seq": "collective sequence number (SeqNum; the desync report's #N, which is SeqNum=N; RAS: operations "
               "launched); NULL for a rank reported absent",
        "seq_kind": "the counter seq belongs to: collective, p2p (per-rank send/recv count, never compared), a RAS "
                    "collective type (AllReduce) or all (the RAS 2.24/2.25 total); ranks are compared within one",
        "op": "the collective (ALLREDUCE, all_reduce, AllReduce, ...)",
        "state": "timed_out (torch timeout), scheduled / started / completed (Flight Recorder, desync report), "
                 "launched (RAS), missing, dead, unresponsive, absent (a rank reported absent)",
        "ts": "first record's time, on the main log's clock (a Flight Recorder dump's UTC moved by its file's "
              "clock offset when the evidence aligns it; see sources.note)",
        "records": "lines or entries merged into the row",
        "timeout_ms": "the collective's timeout", "ran_ms": "how long it ran before timing out (torch)",
        "path": "file of the first record", "line": "its line (a Flight Recorder dump: the entry's number)",
        "attrs": "collective_records.attrs of the first record: sizes, dtypes, reason, the desync report's "
                 "relation and reporting rank, ...",
    },
    "progress_marks": {
        "engine": "the engine", "ts": "when",
        "mark": "progress (a progress line) or start (a server_args line, a vLLM version or engine config line, "
                "or a restart the evidence shows without one: runs.started_by)",
    },
    "vllm_series": {
        "series": "'DP1' for the lines of engine core 1 when the engine prints one line per engine core, else ''",
    },
    "progress": {
        "engine": "the engine", "path": "file of the progress line", "line": "line number in that file",
        "ts": "when it was printed, on the main log's clock",
        "rank": "rank that printed it ('TP0'); vLLM: the engine core's series ('DP1'), '' for the whole engine",
        "batch_kind": "Prefill, Decode, vllm for a vLLM stats line, or step for a job's own step line (events of kind train_step)",
        "running_req": "requests running (SGLang '#running-req', vLLM 'Running: N reqs')",
        "queue_req": "requests waiting (SGLang '#queue-req', vLLM 'Waiting: N reqs', V0 'Pending: N reqs')",
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
    "watchdog_fires": {
        "engine": "the engine", "path": "file of the timeout line (else of the firing's first other output)",
        "line": "its line",
        "ts": "when that line was printed, on the main log's clock (NULL: an output copied without its prefix)",
        "rank": "the rank whose watchdog fired",
        "attrs": "the timeout line's attributes (timeout, soft, who); a firing read from other outputs: "
                 "inferred_from (which), timeout (the engine's, from another timeout line or the server args), "
                 "soft NULL (not known)",
        "fired_at": "when the watchdog fired: the first line of the rank's dump before the timeout line (debug "
                    "info, batch info or py-spy record, within 60 s), else the timeout line's time; a firing read "
                    "from other outputs: its first output's time",
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
    "collectives": ("engine", "source", "rank", "pg", "seq", "op", "state", "ts", "records"),
    "engine_summaries": ("engine", "verdict", "span_start", "span_end", "ranks", "files", "unparsed_lines",
                         "capture_next"),
}


def table_columns(name: str, ddl: str | None = None) -> list[tuple[str, str, str]]:
    """(column, type, meaning) of a table, read from its DDL (``ddl``, else TABLES')."""
    return ddl_columns(ddl or TABLES[name])


# vllm_series is vllm_stats (SELECT *) plus its series: the table's columns keep their meaning.
VIEW_COLUMNS["vllm_series"] = {**{c: n for c, _, n in table_columns("vllm_stats")}, **VIEW_COLUMNS["vllm_series"]}


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
        f"Schema version {SCHEMA_VERSION}. Generated from `src/hangforensics/store/` "
        "(`python -m hangforensics.store > docs/schema.md`). Query it read-only with `hangforensics sql` "
        "(see [sql.md](sql.md) for the ready named queries).",
        "",
        "Timestamps are local time without zone, on the clock of the engine's main log: the views "
        f"{', '.join(f'`{n}`' for n in CLOCKED)} add `sources.clock_offset_s` to the time each file printed "
        "(their rows are stored in `t_<name>` tables, with the times as printed). The tables of the bulk of a "
        f"log's lines ({', '.join(f'`t_{n}`' for n in SOURCE_KEYED)}) name their file by `source_id` in place "
        "of the engine and path text: their views take both from `sources`. Rank labels are written as "
        "SGLang writes them in its log prefix (`TP3`, `DP1 TP1 EP1`); the macro `rank_num(label, 'TP')` "
        "extracts a number.",
        "",
        "Columns with *stable* = yes are the key columns of interface.md §4: every release keeps their "
        "names and meaning. Every relation below exists in every database.",
        "",
    ]
    for name in TABLES:
        if name in SOURCE_KEYED:
            out += [f"## `{name}`", "", VIEW_NOTES[name], ""] + _column_table(name, table_columns(name))
            out += [f"### `{physical(name)}`", "", f"The rows of `{name}`, as stored: `source_id` in place of "
                    f"`engine` and `{SOURCE_KEYED[name]}` (the view takes them from `sources`), times as printed."
                    + (f" {', '.join(f'`{c}`' for c in NARROW_COLUMNS[name])} are stored as INTEGER (the view "
                       "shows BIGINT; a count beyond INTEGER's range is stored NULL; a database made before "
                       "keeps BIGINT)." if name in NARROW_COLUMNS else ""),
                    ""] + _column_table(physical(name), table_columns(name, physical_ddl(name)))
            continue
        heading = f"## `{name}` (view over `{physical(name)}`)" if name in CLOCKED else f"## `{name}`"
        out += [heading, "", VIEW_NOTES[name], ""] + _column_table(name, table_columns(name))
    out += ["## Convenience views", "",
            "Views over the tables above for questions asked often.", ""]
    from .database import Store

    with Store(":memory:") as st:  # the views' column types, as DuckDB derives them
        for name, body in VIEWS.items():
            types = {r["column_name"]: r["column_type"] for r in st.query(f"DESCRIBE {name}")}
            cols = [(c, types[c], note) for c, note in VIEW_COLUMNS[name].items()]
            sql = "\n".join(x[8:] if x.startswith(" " * 8) else x for x in body.strip("\n").splitlines())
            out += [f"### `{name}`", "", VIEW_NOTES[name], ""] + _column_table(name, cols)
            out += ["<details><summary>SQL</summary>", "", "```sql", sql, "```", "", "</details>", ""]
    return "\n".join(out)
