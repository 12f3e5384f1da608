"""Aligning one engine's per-node logs to the clock of its main log, and lines without a time of their
own to their file's payload clock through their envelope's time.

Startup milestones (``Init torch distributed ends``, ``Load weight end``,
``Capture ... graph end``, ``Memory pool end``) end on every rank within about
a second of each other, because the ranks meet in collectives there.  The
median difference of the first such milestone on the main node and on another
node is that node's clock offset.  Rows keep the time the file printed; the
interface views add ``sources.clock_offset_s``.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..store import Store

MILESTONES = [
    "Init torch distributed ends", "Load weight end", "Memory pool end", "Capture cuda graph end",
    "Init torch distributed begin", "Load weight begin", "KV Cache is allocated",
]


def align_engine_clocks(store: Store, engine: str) -> dict[str, float]:
    """Set clock_offset_s for every node log of ``engine``; return {node: offset_s}."""
    return align_engine_clocks_all(store, [engine])[engine]


def align_engine_clocks_all(store: Store, engines: list[str]) -> dict[str, dict[str, float]]:
    """``align_engine_clocks`` of every engine of ``engines``: the milestones of all their logs, and the nodes
    of all their logs with each node's claim to be the main one, read in one query each (a query per engine
    scanned every access line of the fleet: 1.3 s of a 216-engine scan whose engines hold node logs)."""
    firsts: dict[tuple[str, str, str], Any] = {
        (r[0], r[1], r[2]): r[3] for r in store.con.execute(
            "SELECT e.engine, e.path, m.m, min(e.ts) FROM t_events e JOIN (SELECT unnest(?) AS m) m "
            "ON starts_with(e.message, m.m) WHERE list_contains(?, e.engine) GROUP BY ALL",
            [MILESTONES, engines]).fetchall()}
    nodes: dict[str, list[dict[str, Any]]] = {}
    for row in store.query(_NODES, [engines]):
        nodes.setdefault(row["engine"], []).append(row)
    out = {engine: _align_nodes(engine, nodes.get(engine, []), firsts) for engine in engines}
    # every node's offset, the main node's 0 too (a node that was another's before keeps no old offset)
    aligned = [(engine, node, offset) for engine, offsets in out.items() for node, offset in offsets.items()]
    if aligned:
        engine_col, node_col, offset_col = (list(c) for c in zip(*aligned, strict=True))
        store.con.execute(
            "UPDATE sources AS s SET clock_offset_s = u.o FROM (SELECT unnest($1) AS e, unnest($2) AS n, "
            "unnest($3::DOUBLE[]) AS o) u WHERE s.engine = u.e AND s.node = u.n", [engine_col, node_col, offset_col])
    return out


# Each server-log node of the engines in $1 (by name: the main node among equal scores is the first), its logs'
# paths, and its claim to be the main node: its access lines and the server arguments its logs print.
_NODES = """
    WITH s AS (SELECT source_id, engine, node, path, COALESCE(node, chr(0)) AS n FROM sources
               WHERE list_contains($1, engine) AND kind = 'server_log' AND status = 'ok'),
    access AS (SELECT s.engine, s.n, count(*) AS c FROM t_http_requests h JOIN s USING (source_id) GROUP BY ALL),
    args AS (SELECT f.engine, f.n, count(*) AS c FROM t_events e
             JOIN (SELECT DISTINCT engine, n, path FROM s) f ON e.engine = f.engine AND e.path = f.path
             WHERE e.kind = 'server_args' GROUP BY ALL),
    per_node AS (SELECT engine, n, any_value(node) AS node, list(path ORDER BY path) AS paths
                 FROM s GROUP BY engine, n)
    SELECT p.engine, p.node, p.paths, COALESCE(a.c, 0) + COALESCE(g.c, 0) AS main_score
    FROM per_node p LEFT JOIN access a USING (engine, n) LEFT JOIN args g USING (engine, n)
    ORDER BY p.engine, p.n"""


def _align_nodes(engine: str, nodes: list[dict[str, Any]], firsts: dict[tuple[str, str, str], Any]) -> dict[str, float]:
    """The offsets of ``engine``'s ``nodes`` (``_NODES``' rows) from its main node's milestones (the highest
    score, the first by name among equals: ``max`` keeps the first)."""
    if len(nodes) < 2:
        return {}
    main = max(nodes, key=lambda r: r["main_score"])
    offsets: dict[str, float] = {main["node"]: 0.0}
    main_ms = _milestones(firsts, engine, main["paths"])
    for node in nodes:
        if node is main:
            continue
        other = _milestones(firsts, engine, node["paths"])
        diffs = [(main_ms[k] - other[k]).total_seconds() for k in main_ms.keys() & other.keys()]
        offsets[node["node"]] = float(round(statistics.median(diffs))) if diffs else 0.0
    return offsets


def _milestones(firsts: dict[tuple[str, str, str], Any], engine: str, paths: list[str]) -> dict:
    """Each milestone's first time in the files ``paths`` of ``engine``."""
    out = {}
    for m in MILESTONES:
        times = [t for p in set(paths) if (t := firsts.get((engine, p, m))) is not None]
        if times:
            out[m] = min(times)
    return out


# Records whose lines print no time of their own: access lines (uvicorn's default format, vLLM's API
# server) and torch ProcessGroupNCCL lines of torch < 2.3 ('[rank2]:[E ProcessGroupNCCL.cpp:523] ...').
# Over all the engines in $1 at once: each engine's offsets come from its own rows only.
_BOTH_CLOCKS = """
    WITH src AS (SELECT source_id, engine, path FROM sources WHERE list_contains($1, engine)),
    both_clocks AS (
        SELECT src.engine AS e, src.path AS f, epoch_us(ts) - epoch_us(collected_ts) AS d
        FROM t_batches JOIN src USING (source_id) WHERE ts IS NOT NULL AND collected_ts IS NOT NULL
        UNION ALL
        SELECT engine, path, epoch_us(ts) - epoch_us(collected_ts) FROM t_events
        WHERE list_contains($1, engine) AND ts IS NOT NULL AND collected_ts IS NOT NULL
        UNION ALL
        SELECT src.engine, src.path, epoch_us(ts) - epoch_us(collected_ts)
        FROM t_http_requests JOIN src USING (source_id) WHERE ts IS NOT NULL AND collected_ts IS NOT NULL),
    per_file AS (SELECT e, f, median(d) AS d FROM both_clocks GROUP BY e, f),
    per_engine AS (SELECT e, median(d) AS d FROM both_clocks GROUP BY e),
    -- each file's offset: its own median, else its engine's
    offsets AS (SELECT src.source_id, src.engine, src.path, COALESCE(pf.d, pe.d) AS d FROM src
                LEFT JOIN per_file pf ON pf.e = src.engine AND pf.f = src.path
                LEFT JOIN per_engine pe ON pe.e = src.engine)"""


# A torch.distributed job's records that print no time (parsers/torch_jobs/torch_job.py).
TORCH_JOB_TIMELESS = "('c10d_error', 'rank_traceback')"


def _align_table(store: Store, engines: list[str], table: str, only: str) -> None:
    if table == "t_http_requests":      # source-keyed: each row's file is a source
        store.con.execute(
            _BOTH_CLOCKS + f"""
            UPDATE {table} AS h SET ts = h.collected_ts + to_microseconds(CAST(o.d AS BIGINT))
            FROM offsets o
            WHERE o.source_id = h.source_id AND o.d IS NOT NULL AND h.ts IS NULL AND h.collected_ts IS NOT NULL
              AND {only}""",
            [engines])
        return
    store.con.execute(
        _BOTH_CLOCKS + f"""
        UPDATE {table} AS h
        SET ts = h.collected_ts + to_microseconds(CAST(COALESCE(
                (SELECT d FROM per_file WHERE e = h.engine AND f = h.path),
                (SELECT d FROM per_engine WHERE e = h.engine)) AS BIGINT))
        WHERE list_contains($1, h.engine) AND h.ts IS NULL AND h.collected_ts IS NOT NULL AND {only}
          AND (EXISTS (SELECT 1 FROM per_file WHERE e = h.engine AND f = h.path)
               OR (SELECT d FROM per_engine WHERE e = h.engine) IS NOT NULL)""",
        [engines])


_PENDING = f"""
    SELECT (SELECT count(*) FROM t_http_requests JOIN sources USING (source_id)
            WHERE list_contains($1, engine) AND ts IS NULL)
         + (SELECT count(*) FROM t_events WHERE list_contains($1, engine) AND ts IS NULL AND kind = 'torch_nccl')
         + (SELECT count(*) FROM t_events WHERE list_contains($1, engine) AND ts IS NULL
            AND kind IN {TORCH_JOB_TIMELESS} AND collected_ts IS NOT NULL)"""


def align_envelope_times(store: Store, engine: str) -> int:
    """``align_envelope_times_all`` of one engine."""
    return align_envelope_times_all(store, [engine])


def align_envelope_times_all(store: Store, engines: list[str]) -> int:
    """Date the records that print no time of their own but carry an envelope time (kubectl, CRI,
    journald, a viewer's column, ...): ``ts = collected_ts + offset``, the offset being the file's median of
    ``ts - collected_ts`` over its records that carry both (a collector in UTC beside a pod's local
    time differs by hours; a viewer's clock by anything), else the engine's (the same collector's other
    files).  A timeless torch line without an envelope time is dated by the dated record before it in
    its file (an estimate: it was printed at or after that).  Returns the number of rows dated.

    Each step runs once over all ``engines`` (an engine's offsets read its own rows only), in the order an
    engine needs them: a step's medians include the rows the step before dated."""
    pending = store.scalar(_PENDING, [engines])
    if not pending:
        return 0
    _align_table(store, engines, "t_http_requests", "TRUE")
    _align_table(store, engines, "t_events", "h.kind = 'torch_nccl'")
    # a torch job's timeless error lines take their envelope's time only: the record before them says
    # little (a gloo timeout is printed its whole timeout after the job's last line)
    _align_table(store, engines, "t_events", f"h.kind IN {TORCH_JOB_TIMELESS}")
    _date_by_record_before(store, engines)
    return pending - store.scalar(_PENDING, [engines])


def _date_by_record_before(store: Store, engines: list[str]) -> None:
    """Timeless torch lines with no envelope time: the time of the nearest dated record above them."""
    store.con.execute(
        """WITH src AS (SELECT source_id, engine, path FROM sources WHERE list_contains($1, engine)),
           dated AS (
               SELECT engine, path, line, ts FROM t_events WHERE list_contains($1, engine) AND ts IS NOT NULL
               UNION ALL SELECT src.engine, src.path, line, ts FROM t_batches JOIN src USING (source_id)
               WHERE ts IS NOT NULL
               UNION ALL SELECT src.engine, src.path, line, ts FROM t_http_requests JOIN src USING (source_id)
               WHERE ts IS NOT NULL),
           bare AS (SELECT engine, path, line FROM t_events
                    WHERE list_contains($1, engine) AND ts IS NULL AND kind = 'torch_nccl' AND collected_ts IS NULL),
           prev AS (SELECT b.engine, b.path, b.line, d.ts FROM bare b
                    ASOF JOIN dated d ON d.engine = b.engine AND d.path = b.path AND d.line < b.line)
           UPDATE t_events AS e SET ts = prev.ts FROM prev
           WHERE e.engine = prev.engine AND e.path = prev.path AND e.line = prev.line AND e.ts IS NULL""",
        [engines])
