"""What the reports of many engines read from the store, read set-wise: a fixed number of queries over all
of them (``list_contains($e, engine)``, windows partitioned by engine), whatever their number, then the rows
grouped by engine in Python.  Each engine's rows keep the order its own query gave them (the per-engine
ORDER BY after the engine; storage order where that query had none), so a report built from them is the
report its engine's own queries would have built."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..analysis.collectives.collectives import EngineContext
from ..analysis.progress.probes import PROBE_PATHS
from ..analysis.progress.segments import Segment, in_seg
from ..store import Store
from ..store.database import beside

Rows = list[dict[str, Any]]


def _by(rows: Rows, *keys: str, drop: bool = True) -> dict[Any, Rows]:
    """Rows grouped by the value (a tuple for several) of ``keys``, in their order; ``drop`` removes the key
    columns that only the set-wise query selected."""
    out: dict[Any, Rows] = defaultdict(list)
    for r in rows:
        k = tuple(r[c] for c in keys) if len(keys) > 1 else r[keys[0]]
        if drop:
            r = {c: v for c, v in r.items() if c not in keys}
        out[k].append(r)
    return out


@dataclass
class Window:
    """One report's timeline axis: ``engine``'s evidence from ``t0`` to ``t1`` in buckets of ``bucket_s``."""
    engine: str
    t0: datetime
    t1: datetime
    bucket_s: float


# the windows of many reports as a relation (i, engine, t0, t1, bucket_s), joined instead of one query each
_WINDOWS = ("WITH w AS (SELECT unnest($i::INTEGER[]) AS i, unnest($e::VARCHAR[]) AS engine, "
            "unnest($t0::TIMESTAMP[]) AS t0, unnest($t1::TIMESTAMP[]) AS t1, unnest($s::DOUBLE[]) AS bucket_s) ")


@dataclass
class ReportData:
    """Every row the reports of ``engines`` show that does not depend on a report's run or findings."""
    stalls: dict[str, Rows]              # ORDER BY onset DESC
    freezes: dict[str, Rows]             # ORDER BY ts DESC NULLS LAST
    sources: dict[str, Rows]             # ORDER BY path
    config: dict[str, Rows]              # server_args / environment events, ORDER BY ts
    rank_classes: dict[str, Rows]        # ORDER BY capture, class_id
    procs: dict[str, dict[tuple[int, str], dict[str, Any]]]
    basis: dict[str, dict[int, set[str]]]
    summaries: dict[str, dict[str, Any]]
    snapshot_facts: dict[str, Rows]      # storage order
    captures: dict[str, Rows]            # ORDER BY started, capture_id
    rounds: dict[tuple[str, Any], Rows]
    failures: dict[tuple[str, Any], Rows]
    collectives: dict[str, Rows]         # ORDER BY source, pg, seq
    verdicts: dict[str, Rows]            # storage order
    contexts: dict[str, EngineContext]   # engines with collectives only
    spans: dict[str, tuple[datetime, datetime]]
    progress_kinds: dict[str, dict[str, str]]
    # of the runs ``read`` was given (an engine's run other than its only one): its evidence's span and the
    # ranks that log progress in it
    run_spans: dict[tuple[str, int], tuple[datetime, datetime]] = dataclasses.field(default_factory=dict)
    run_ranks: dict[tuple[str, int], set[str]] = dataclasses.field(default_factory=dict)

    @classmethod
    def read(cls, store: Store, engines: list[str], runs: Sequence[Segment] = ()) -> ReportData:
        e = {"e": list(dict.fromkeys(engines))}
        where = "list_contains($e, engine)"
        # what reads the progress lines and the collectives (the costliest reads), on a second connection
        # while this one reads the rest
        beside_read: dict[str, Any] = {}
        with beside(store, lambda other: beside_read.update(_progress_and_collectives(other, e, runs))):
            data = cls._read(store, e, where)
        return dataclasses.replace(data, **beside_read)

    @classmethod
    def _read(cls, store: Store, e: dict[str, list[str]], where: str) -> ReportData:
        procs: dict[str, dict[tuple[int, str], dict[str, Any]]] = defaultdict(dict)
        # per engine: (rank-class capture, rank) -> the /proc facts of the round its dump was taken in, and
        # its snapshot status; a repeated key keeps the later row, as the per-engine dict did
        for r in store.query(
                """SELECT rc.engine, rc.capture, rc.rank, f.state, f.wchan, f.syscall, sf.status, sf.unchanged,
                          sf.detail
                   FROM rank_collectives rc
                   JOIN capture_dumps d ON d.engine = rc.engine AND d.file = rc.path
                   LEFT JOIN (SELECT * FROM process_facts WHERE list_contains($e, engine)
                              QUALIFY row_number() OVER (PARTITION BY engine, capture_id, round, pid
                                                         ORDER BY source = 'proc' DESC) = 1) f
                     ON f.engine = d.engine AND f.capture_id = d.capture_id AND f.round = d.round AND f.pid = d.pid
                   LEFT JOIN snapshot_facts sf ON sf.engine = rc.engine AND sf.capture_id = d.capture_id
                                              AND sf.pid = d.pid
                   WHERE list_contains($e, rc.engine)""", e):
            engine = r.pop("engine")
            procs[engine][(r["capture"], r["rank"])] = r
        basis: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
        for r in store.query("""SELECT DISTINCT rc.engine, rc.capture, s.ts_basis FROM rank_collectives rc
                                JOIN stacks s ON s.dump_id = rc.dump_id WHERE list_contains($e, rc.engine)""", e):
            basis[r["engine"]][r["capture"]].add(r["ts_basis"] or "record")
        summaries: dict[str, dict[str, Any]] = {}
        for r in store.query(f"SELECT * FROM engine_summaries WHERE {where}", e):
            summaries.setdefault(r["engine"], r)        # the first row, as rows[0] took
        return cls(
            stalls=_by(store.query(f"SELECT * FROM stalls WHERE {where} ORDER BY engine, onset DESC", e),
                       "engine", drop=False),
            freezes=_by(store.query(f"SELECT * FROM freezes WHERE {where} ORDER BY engine, ts DESC NULLS LAST", e),
                        "engine", drop=False),
            sources=_by(store.query(
                "SELECT engine, path, kind, bytes, lines, parsed_lines, unparsed_lines, clock_offset_s, status "
                f"FROM sources WHERE {where} ORDER BY engine, path", e), "engine"),
            config=_by(store.query(f"SELECT engine, attrs FROM events WHERE {where} "
                                   "AND kind IN ('server_args', 'environment') ORDER BY engine, ts", e), "engine"),
            rank_classes=_by(store.query(
                f"SELECT * FROM rank_classes WHERE {where} ORDER BY engine, capture, class_id", e),
                "engine", drop=False),
            procs=procs, basis=basis, summaries=summaries,
            snapshot_facts=_by(store.query(f"SELECT * FROM snapshot_facts WHERE {where}", e), "engine", drop=False),
            captures=_by(store.query(f"SELECT * FROM captures WHERE {where} ORDER BY engine, started, capture_id",
                                     e), "engine", drop=False),
            rounds=_by(store.query(
                """SELECT engine, capture_id, round, min(round_started) AS started, count(*) AS dumps,
                          count(*) FILTER (WHERE ok) AS ok, epoch(max(start_ts) - min(start_ts)) AS spread_s
                   FROM capture_dumps WHERE list_contains($e, engine) GROUP BY engine, capture_id, round
                   ORDER BY engine, capture_id, round""", e), "engine", "capture_id"),
            failures=_by(store.query(
                f"SELECT engine, capture_id, what, reason, file, skipped FROM capture_failures WHERE {where} "
                "ORDER BY engine, capture_id, skipped, line", e), "engine", "capture_id"),
            collectives={}, contexts={}, spans={}, progress_kinds={},      # (read beside: read())
            verdicts=_by(store.query(f"SELECT * FROM collective_verdicts WHERE {where}", e), "engine", drop=False),
        )


def _progress_and_collectives(store: Store, e: dict[str, list[str]], runs: Sequence[Segment] = ()) -> dict[str, Any]:
    """``ReportData``'s collectives, engine contexts, time spans and progress kinds (and those of ``runs``)."""
    where = "list_contains($e, engine)"
    collectives = _by(store.query(
        "SELECT engine, source, rank, pg_rank, pg, pg_desc, pg_ranks, seq, seq_kind, op, state, ts "
        f"FROM collectives WHERE {where} AND source <> 'desync_report' AND seq_kind <> 'p2p' "
        "ORDER BY engine, source, pg, seq", e), "engine")
    kinds: dict[str, dict[str, str]] = defaultdict(dict)
    for r in store.query(f"SELECT engine, rank, max(batch_kind) AS k FROM progress WHERE {where} "
                         "GROUP BY engine, rank", e):
        kinds[r["engine"]][r["rank"]] = r["k"]
    return {
        "collectives": collectives,
        "contexts": EngineContext.of_many(store, list(collectives)),
        "spans": {r["engine"]: (r["a"], r["b"]) for r in store.query(
            "SELECT engine, min(ts) AS a, max(ts) AS b FROM ("
            f"SELECT engine, ts FROM progress WHERE {where} UNION ALL "
            f"SELECT engine, ts FROM http_requests WHERE {where} UNION ALL "
            f"SELECT engine, ts FROM events WHERE {where}) GROUP BY engine", e) if r["a"] is not None},
        "progress_kinds": kinds,
        **_of_runs(store, runs),
    }


def _of_runs(store: Store, runs: Sequence[Segment]) -> dict[str, Any]:
    """The span of each run's evidence and the ranks that log progress in it: one query for all of ``runs``."""
    if not runs:
        return {}
    spans: dict[tuple[str, int], tuple[datetime, datetime]] = {}
    ranks: dict[tuple[str, int], set[str]] = defaultdict(set)
    for r in store.query(
            f"""WITH r AS (SELECT unnest($1::VARCHAR[]) AS engine, unnest($2::INTEGER[]) AS seg,
                                  unnest($3::TIMESTAMP[]) AS seg_start, unnest($4::TIMESTAMP[]) AS seg_end),
                x AS (SELECT engine, ts, rank, true AS progress FROM progress WHERE list_contains($5, engine)
                      UNION ALL SELECT engine, ts, NULL, false FROM http_requests WHERE list_contains($5, engine)
                      UNION ALL SELECT engine, ts, NULL, false FROM events WHERE list_contains($5, engine))
              SELECT r.engine, r.seg, x.rank, x.progress, min(x.ts) AS a, max(x.ts) AS b
              FROM x JOIN r ON r.engine = x.engine AND {in_seg('x.ts', 'r')} AND x.ts IS NOT NULL
              GROUP BY ALL""",
            [[s.engine for s in runs], [s.index for s in runs], [s.start for s in runs], [s.end for s in runs],
             sorted({s.engine for s in runs})]):
        key = (r["engine"], r["seg"])
        a, b = spans.get(key, (r["a"], r["b"]))
        spans[key] = (min(a, r["a"]), max(b, r["b"]))
        if r["progress"]:
            ranks[key].add(r["rank"])
    return {"run_spans": spans, "run_ranks": dict(ranks)}


def _window_params(windows: list[Window | None]) -> dict[str, list[Any]]:
    kept = [(i, w) for i, w in enumerate(windows) if w is not None]
    # ``engines`` again as a filter of the evidence views, which a join condition would not push into them
    return {"i": [i for i, _ in kept], "e": [w.engine for _, w in kept], "t0": [w.t0 for _, w in kept],
            "t1": [w.t1 for _, w in kept], "s": [w.bucket_s for _, w in kept],
            "engines": sorted({w.engine for _, w in kept})}


def timeline_rows(store: Store, windows: list[Window | None]) -> tuple[list[Rows], list[Rows]]:
    """Per window (None: no timeline): its progress counts per (rank, bucket), ORDER BY rank, bucket, and its
    health probes, ORDER BY ts (then file and line).  Two queries for all the windows."""
    counts: list[Rows] = [[] for _ in windows]
    probes: list[Rows] = [[] for _ in windows]
    p = _window_params(windows)
    if not p["i"]:
        return counts, probes
    for r in store.query(
            _WINDOWS + "SELECT w.i, g.rank, CAST(floor(epoch(g.ts - w.t0) / w.bucket_s) AS INTEGER) AS b, "
            "count(*) AS n FROM progress g JOIN w ON g.engine = w.engine AND g.ts >= w.t0 AND g.ts <= w.t1 "
            "WHERE list_contains($engines, g.engine) GROUP BY ALL ORDER BY w.i, g.rank, b", p):
        counts[r.pop("i")].append(r)
    for r in store.query(
            _WINDOWS + "SELECT w.i, h.ts, h.status, h.path FROM http_requests h "
            "JOIN w ON h.engine = w.engine AND h.ts >= w.t0 AND h.ts <= w.t1 "
            "WHERE list_contains($engines, h.engine) AND list_contains($paths, h.path) "
            # (probes of one second in the order logged: the same page on any number of threads)
            "ORDER BY w.i, h.ts, h.file, h.line",
            {**p, "paths": list(PROBE_PATHS)}):
        probes[r.pop("i")].append(r)
    return counts, probes


def dump_records(store: Store, wanted: dict[tuple[str, str], set[int]]) -> dict[tuple[str, str, int], Rows]:
    """The Flight Recorder records at the (engine, path) -> lines of ``wanted``, in storage order: one query."""
    if not wanted:
        return {}
    out: dict[tuple[str, str, int], Rows] = defaultdict(list)
    for r in store.query(
            "SELECT engine, path, line, pg, pg_desc, seq, op, state, json_extract_string(attrs, '$.seq_kind') AS kind, "
            "json_extract(attrs, '$.input_sizes') AS sizes FROM collective_records WHERE list_contains($e, engine) "
            "AND list_contains($p, path) AND list_contains($l, line)",
            {"e": sorted({e for e, _ in wanted}), "p": sorted({p for _, p in wanted}),
             "l": sorted({n for lines in wanted.values() for n in lines})}):
        if r["line"] in wanted.get((r["engine"], r["path"]), ()):     # the lists above select a superset
            out[(r["engine"], r["path"], r["line"])].append(r)
    return out
