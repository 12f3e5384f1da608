"""Never silent: one summary per engine read, true also when no rule fired (interface.md §3 ``engines``,
§4 ``engine_summaries``, §5).

A summary says what was read (files by kind, ranks, time span, unparsed lines), the verdict in one
sentence, the strongest facts, and what to capture next time: the evidence that would have settled what
this evidence could not, specific to what is missing.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from ...ingest.plan import LIVE_SECONDS
from ...parsers.collectives import torch_nccl
from ...ranks import rank_key, rank_numbers
from ...readers.kinds import STACK_KINDS as DUMP_KINDS
from ...readers.logfile import HELD_BACK_NOTE
from ...readers.payload import DATING_LAYERS
from ...redaction import redact_payloads
from ...store import Store
from ...store.views import TP_SIZES
from ..order_keys import PATH_RANKS, latest_first
from ..progress.segments import LABELS, LOG_GAP_S, LOGS_RESUMED
from ..stacks import places as places_mod
from ..stacks.snapshot_text import facts_in_words
from ..stacks.stackclasses import compact_ranks
from . import capture_advice, rank_deaths, reporter_facts, vllm_summary

STACK_KINDS = (*DUMP_KINDS, "flight_recorder")
GENERATION_PROBES = ("/health_generate", "/generate", "/v1/completions", "/v1/chat/completions")


@dataclass
class Evidence:
    """What one engine's evidence holds, queried once."""

    engine: str
    files: dict[str, int]
    unparsed: int
    span: tuple[datetime | None, datetime | None]
    ranks: list[str]
    findings: list[dict[str, Any]]
    n_progress: int = 0
    last_progress: dict | None = None
    stall: dict | None = None
    watchdogs: list[dict] = field(default_factory=list)
    torch: list[dict] = field(default_factory=list)
    stacks: list[dict] = field(default_factory=list)
    native_frames: int = 0
    gpu_samples: int = 0
    probes: list[dict] = field(default_factory=list)
    nccl_debug: int = 0
    world: int | None = None
    capture_cmd: str = ""
    snapshots: list[str] = field(default_factory=list)   # what repeated capture snapshots show, in words
    vllm: vllm_summary.VllmFacts | None = None            # a vLLM engine's facts in its own terms
    deaths: list[dict] = field(default_factory=list)      # lines saying a process died, or hung and was killed
    job: rank_deaths.JobDeaths = field(default_factory=rank_deaths.JobDeaths)  # torchrun's worker exits, c10d errors
    reporter: reporter_facts.ReporterFacts = field(default_factory=reporter_facts.ReporterFacts)  # a person's summary
    restarts: list[dict] = field(default_factory=list)    # runs begun without a start line in the evidence (runs)
    # files whose lines print no year, dated by the engine's other evidence: paths and that evidence's moment
    dated_by_engine: dict | None = None
    held_tails: list[str] = field(default_factory=list)   # files whose unfinished last line waits for the next read
    places: places_mod.Places = field(default_factory=places_mod.Places)   # where the ranks of the dumps stand

    def rules(self) -> set[str]:
        return {f["rule"] for f in self.findings}

    def place_words(self) -> str | None:
        """Where the dumped ranks stand (``places.Places.words``), when none of them is in a collective."""
        if not self.stacks or any(s["collective"] for s in self.stacks):
            return None
        return self.places.words({s["thread_state"] for s in self.stacks})

    def of(self, rule: str) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["rule"] == rule]


def rebuild(store: Store, engines: list[str], show_payloads: bool = False,
            read: dict[str, Any] | None = None, gathered: dict[str, Evidence] | None = None,
            findings: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Fill ``engine_summaries`` for ``engines`` and return the rows (``read``: ``gather_evidence``'s, read
    already; ``gathered``: ``gather_all``'s without findings, read already, and ``findings`` the engines'
    findings as stored)."""
    evidence = gathered if gathered is not None else gather_all(store, engines, read)
    if gathered is not None:
        with_findings(evidence, findings or [])
    rows = [summarise(evidence[e], show_payloads) for e in engines]
    store.con.execute("DELETE FROM engine_summaries WHERE list_contains(?, engine)", [engines])
    if rows:
        # files is a MAP: Arrow needs it spelled as one (a dict would become a struct)
        table = pa.Table.from_pylist([{**r, "files": list(r["files"].items())} for r in rows], schema=SCHEMA)
        store.append("engine_summaries", table)
    return rows


SCHEMA = pa.schema([
    ("engine", pa.string()), ("verdict", pa.string()), ("span_start", pa.timestamp("us")),
    ("span_end", pa.timestamp("us")), ("ranks", pa.list_(pa.string())), ("files", pa.map_(pa.string(), pa.int32())),
    ("unparsed_lines", pa.int64()), ("capture_next", pa.list_(pa.string())), ("facts", pa.list_(pa.string())),
    ("thin", pa.bool_()), ("died", pa.bool_()),
])


def with_findings(evidence: dict[str, Evidence], findings: list[dict[str, Any]]) -> None:
    """Give each engine's Evidence its findings (``findings``: as stored, in their stored order), in the order
    ``gather_all`` reads them: by time, undated last, ties in stored order."""
    by: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        by.setdefault(f["engine"], []).append(f)
    for e, ev in evidence.items():
        ev.findings = sorted(by.get(e, []), key=lambda f: (f["ts"] is None, f["ts"] or datetime.min))


def gather(store: Store, engine: str) -> Evidence:
    """One engine's evidence (``gather_all`` for many: ``rebuild`` judges every engine at once)."""
    return gather_all(store, [engine])[engine]


def _by_engine(rows: list[dict[str, Any]], keep: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by their ``engine`` column (dropped unless ``keep``: a ``SELECT *`` of one engine has it),
    in row order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["engine"] if keep else r.pop("engine"), []).append(r)
    return out


def gather_evidence(store: Store, engines: list[str]) -> dict[str, Any]:
    """What ``gather_all`` reads of the evidence itself (no model an analysis builds: ``run_rules`` reads it
    beside the models), by name."""
    q = store.query
    files: dict[str, dict[str, int]] = {}
    for r in q("SELECT engine, kind, count(*)::INTEGER AS n FROM sources WHERE list_contains(?, engine) "
               "GROUP BY engine, kind ORDER BY engine, n DESC, kind", [engines]):
        files.setdefault(r["engine"], {})[r["kind"]] = r["n"]
    unparsed = {r["engine"]: r["n"] for r in q(
        "SELECT engine, sum(unparsed_lines) AS n FROM sources WHERE list_contains(?, engine) GROUP BY engine",
        [engines])}
    # the time span and the ranks, in one pass over each table: its first and last time per (engine, rank),
    # and whether that rank counts as one of the engine's (vLLM's events and http requests name none)
    span: dict[str, tuple[datetime | None, datetime | None]] = {}
    ranks: dict[str, list[str]] = {}
    for r in q("""SELECT engine, rank, min(a) AS a, max(b) AS b, bool_or(ranked) AS ranked FROM (
                    SELECT engine, rank, min(ts) AS a, max(ts) AS b, true AS ranked FROM batches
                    WHERE list_contains($1, engine) GROUP BY engine, rank
                    UNION ALL SELECT engine, rank, min(ts), max(ts), bool_or(kind NOT LIKE 'vllm%') FROM events
                    WHERE list_contains($1, engine) GROUP BY engine, rank
                    UNION ALL SELECT engine, NULL, min(ts), max(ts), false FROM http_requests
                    WHERE list_contains($1, engine) GROUP BY engine
                    UNION ALL SELECT engine, rank, min(ts) FILTER (WHERE capture = 'embedded'),
                                     max(ts) FILTER (WHERE capture = 'embedded'), true FROM stacks
                    WHERE list_contains($1, engine) GROUP BY engine, rank
                    UNION ALL SELECT engine, 'rank' || rank, NULL, NULL, true FROM collectives
                    WHERE list_contains($1, engine) AND rank IS NOT NULL GROUP BY engine, rank)
                  GROUP BY engine, rank""", [engines]):
        e = r["engine"]
        lo, hi = span.get(e, (None, None))
        span[e] = (r["a"] if lo is None or (r["a"] is not None and r["a"] < lo) else lo,
                   r["b"] if hi is None or (r["b"] is not None and r["b"] > hi) else hi)
        if r["ranked"] and r["rank"]:
            ranks.setdefault(e, []).append(r["rank"])
    # progress: its count and its last dated line per engine (the rows are many: aggregated in SQL); of lines
    # of the same last time, the first in its file
    n_progress: dict[str, int] = {}
    last_progress: dict[str, dict[str, Any]] = {}
    for r in q("SELECT engine, count(*) AS n, arg_min({'ts': ts, 'rank': rank, 'running_req': running_req, "
               f"'queue_req': queue_req}}, {latest_first('ts', 'COALESCE(r.pr, 0)', 'line')}) FILTER (WHERE ts IS "
               f"NOT NULL) AS last FROM progress p LEFT JOIN {PATH_RANKS} r USING (path) "
               "WHERE list_contains(?, engine) GROUP BY engine", [engines]):
        n_progress[r["engine"]] = r["n"]
        if r["last"] is not None:
            last_progress[r["engine"]] = r["last"]
    # ties (undated timeouts of a paste) by their lowest rank, then SeqNum: the order a rank's log prints them;
    # a SeqNum whose ranks name different ops: the lowest rank's
    torch = _by_engine(q(
        "SELECT engine, pg, seq, op, ranks, ts FROM (SELECT engine, pg, seq, any_value(op ORDER BY rank) AS op, "
        "list(DISTINCT rank ORDER BY rank) AS ranks, min(ts) AS ts, min(rank) AS first_rank FROM collectives "
        "WHERE list_contains(?, engine) AND source = 'torch_nccl' GROUP BY engine, pg, seq) "
        "ORDER BY engine, ts, first_rank, seq, pg", [engines]))
    native = capture_advice.native_frames(store, engines)
    gpu = {r["engine"]: r["n"] for r in q(
        "SELECT engine, count(*) AS n FROM gpu_samples WHERE list_contains(?, engine) GROUP BY engine", [engines])}
    nccl_debug = {r["engine"]: r["n"] for r in q(
        "SELECT engine, count(*) AS n FROM events WHERE list_contains(?, engine) AND kind = 'nccl_debug' "
        "GROUP BY engine", [engines])}
    world: dict[str, int | None] = {}
    for r in q(TP_SIZES, [engines]):
        world.setdefault(r["engine"], r["tp_size"])
    deaths = _by_engine(q(
        # a traceback pasted without its log line speaks through its exception line
        """SELECT engine, kind, rank, ts, message, event FROM (
             SELECT engine, kind, rank, ts, line, attrs->>'event' AS event,
                    CASE WHEN regexp_matches(message, '^(Traceback|  File )')
                         THEN COALESCE(attrs->>'exception', message)
                         -- ('Scheduler hit an exception: Traceback ...': its exception; else a c10d error line
                         -- right after its last line, with no prefix of its own (no rank): its traceback's last
                         -- line read as a record of its own (behind a collector it takes the collector's time,
                         -- so its time does not tell); else its own words)
                         WHEN regexp_matches(message, 'Traceback \\(most recent call last\\):?\\s*$')
                         THEN COALESCE(attrs->>'exception',
                                       CASE WHEN next_kind = 'c10d_error' AND next_line = COALESCE(line_end, line) + 1
                                                 AND COALESCE(next_rank, '') = '' THEN next_message END,
                                       regexp_replace(message, ':?\\s*Traceback \\(most recent call last\\):?\\s*$', ''))
                         ELSE message END AS message,
                    row_number() OVER (PARTITION BY engine ORDER BY ts NULLS LAST, line) AS n
             FROM (SELECT *, lead(kind) OVER w AS next_kind, lead(line) OVER w AS next_line,
                          lead(rank) OVER w AS next_rank, lead(message) OVER w AS next_message
                   FROM events WHERE list_contains($1, engine) WINDOW w AS (PARTITION BY engine, path ORDER BY line))
             WHERE kind IN (SELECT unnest($2))
               OR (kind = 'torch_nccl' AND regexp_matches(message, 'Heartbeat monitor timed out|watchdog got stuck')))
           WHERE n <= 3 ORDER BY engine, n""", [engines, list(DEATH_KINDS)]))
    return {"files": files, "unparsed": unparsed, "span": span, "ranks": ranks, "n_progress": n_progress,
            "last_progress": last_progress, "torch": torch, "native": native, "gpu": gpu, "nccl_debug": nccl_debug,
            "world": world, "deaths": deaths, "jobs": rank_deaths.gather_all(store, engines, ranks),
            "reporters": reporter_facts.gather_all(store, engines),
            "vllm_set": vllm_summary.vllm_engines(store, engines)}


def gather_all(store: Store, engines: list[str], evidence: dict[str, Any] | None = None,
               stored_findings: bool = True) -> dict[str, Evidence]:
    """Every engine's evidence, queried once for all of ``engines`` (a fixed number of queries, grouped by
    engine in Python): engine -> Evidence.  ``evidence``: what ``gather_evidence`` read already.  Ties of a
    sort key are broken by stored order (rowid) or file position, so that no order depends on DuckDB's
    threads.  ``stored_findings=False``: the findings are not read (the analysis gathers the rest while its
    rules run, and gives them after: ``with_findings``)."""
    q = store.query
    pre = evidence if evidence is not None else gather_evidence(store, engines)
    files, unparsed, span, ranks = pre["files"], pre["unparsed"], pre["span"], pre["ranks"]
    n_progress, last_progress, torch, native = pre["n_progress"], pre["last_progress"], pre["torch"], pre["native"]
    gpu, nccl_debug, world, deaths, jobs = pre["gpu"], pre["nccl_debug"], pre["world"], pre["deaths"], pre["jobs"]
    reporters, vllm_set = pre["reporters"], pre["vllm_set"]
    findings = _by_engine(q("SELECT * FROM findings WHERE list_contains(?, engine) ORDER BY engine, ts NULLS LAST, rowid",
                            [engines]), keep=True) if stored_findings else {}
    stalls = {e: rows[0] for e, rows in _by_engine(q(
        "SELECT * FROM stalls WHERE list_contains(?, engine) ORDER BY engine, onset DESC, rowid", [engines]),
        keep=True).items()}
    watchdogs = _by_engine(q(
        "SELECT engine, rank, min(fired_at) AS ts FROM watchdog_fires WHERE list_contains(?, engine) AND rank <> '' "
        "GROUP BY engine, rank ORDER BY engine, ts, rank", [engines]))
    stacks = _by_engine(q(
        "SELECT engine, rank, collective, call_site, thread_state FROM (SELECT *, rowid AS rid, max(capture) OVER "
        "(PARTITION BY engine) AS latest FROM rank_collectives WHERE list_contains(?, engine)) "
        "WHERE capture = latest ORDER BY rid", [engines]))
    probes = _by_engine(q("SELECT engine, path, n, basis FROM probes WHERE list_contains(?, engine) "
                          "ORDER BY engine, n DESC, rowid", [engines]))
    commands = capture_advice.next_capture_commands(store, engines, native)
    snapshots = _by_engine(q("SELECT * FROM snapshot_facts WHERE list_contains(?, engine) AND status <> 'unknown' "
                             "ORDER BY engine, rowid", [engines]), keep=True)
    restarts = _by_engine(q("SELECT engine, start_ts, started_by FROM runs WHERE list_contains(?, engine) "
                            "AND started_by IN (?, ?) ORDER BY engine, segment", [engines, LABELS, LOGS_RESUMED]))
    # (a file of no full date whose records were dated: their year is the engine's other evidence's, and a
    # log that prints the time of day alone takes its day from it too)
    dated_by_engine = {r["engine"]: r for r in q(
        "SELECT s.engine, list(s.path ORDER BY s.path) FILTER (WHERE NOT day) AS paths, "
        "list(s.path ORDER BY s.path) FILTER (WHERE day) AS day_paths, max(s.year_near) AS near FROM ("
        "  SELECT *, COALESCE(len(list_intersect(string_split(envelope, '+'), ?)) > 0, false) AS day FROM sources) s "
        "WHERE list_contains(?, s.engine) AND s.status = 'ok' AND s.last_dated IS NULL AND s.year_near IS NOT NULL "
        "AND (day OR EXISTS (SELECT 1 FROM events v WHERE v.engine = s.engine AND v.path = s.path "
        "AND v.ts IS NOT NULL AND v.collected_ts IS NULL)) GROUP BY s.engine", [sorted(DATING_LAYERS), engines])}
    # (a live file's last line without its newline is left for the next ingest: ``logfile.ReadNotes``)
    held_tails = {r["engine"]: r["paths"] for r in q(
        "SELECT engine, list(path ORDER BY path) AS paths FROM sources WHERE list_contains(?, engine) "
        "AND note LIKE ? GROUP BY engine", [engines, f"%{HELD_BACK_NOTE}%"])}
    places = places_mod.gather_all(store, engines)
    vllm = vllm_summary.gather_all(store, [e for e in engines if e in vllm_set],
                                   {e: stalls.get(e) for e in engines if e in vllm_set}) if vllm_set else {}
    out: dict[str, Evidence] = {}
    for e in engines:
        ev = Evidence(e, files.get(e, {}), int(unparsed.get(e) or 0), span.get(e, (None, None)),
                      _dedupe_ranks(ranks.get(e, [])), findings.get(e, []))
        ev.n_progress = n_progress.get(e) or 0
        ev.last_progress = last_progress.get(e)
        ev.stall = stalls.get(e)
        ev.watchdogs = watchdogs.get(e, [])
        ev.torch = torch.get(e, [])
        ev.stacks = stacks.get(e, [])
        ev.native_frames = native.get(e) or 0
        ev.gpu_samples = gpu.get(e) or 0
        ev.probes = probes.get(e, [])
        ev.nccl_debug = nccl_debug.get(e) or 0
        ev.world = world.get(e)
        ev.capture_cmd = commands[e]
        ev.snapshots = facts_in_words(snapshots.get(e, []))
        ev.deaths = deaths.get(e, [])
        ev.job = jobs[e]
        ev.reporter = reporters[e]
        ev.vllm = vllm.get(e)
        ev.restarts = restarts.get(e, [])
        ev.dated_by_engine = dated_by_engine.get(e)
        ev.held_tails = held_tails.get(e, [])
        ev.places = places[e]
        out[e] = ev
    return out


# Event kinds that say a serving process died (or hung until something killed it).
DEATH_KINDS = ("vllm_engine_dead", "vllm_worker_died", "vllm_rpc_timeout", "scheduler_exception", "subprocess_crashed")


def _dedupe_ranks(ranks: list[str]) -> list[str]:
    """Every rank once: an SGLang label stands for the torch rank of the same TP number."""
    labels = set(ranks)
    tp = {rank_numbers(r).get("TP") for r in labels if not r.startswith("rank")}
    keep = [r for r in labels if not (r.startswith("rank") and rank_numbers(r).get("rank") in tp)]
    return sorted(keep, key=rank_key)


def summarise(ev: Evidence, show_payloads: bool = False) -> dict[str, Any]:
    facts = _facts(ev)
    verdict, died = _verdict(ev)
    if not show_payloads:
        verdict, facts = redact_payloads(verdict), [redact_payloads(f) for f in facts]
    return {
        "engine": ev.engine, "verdict": verdict, "span_start": ev.span[0], "span_end": ev.span[1],
        "ranks": ev.ranks, "files": ev.files, "unparsed_lines": ev.unparsed,
        "capture_next": capture_next(ev), "facts": facts,
        "thin": not ev.findings and (not ev.n_progress or not _known_files(ev)),
        "died": died,
    }


def _known_files(ev: Evidence) -> int:
    return sum(n for k, n in ev.files.items() if k not in ("unknown", "empty", "binary", "unreadable"))


def _hm(ts: datetime | None) -> str:
    return ts.strftime("%H:%M:%S") if ts else "?"


class _Died(str):
    """A verdict with no finding behind it that says a process of the engine died or was killed: not a hang, nor
    healthy (``engine_summaries.died``: the report frames it as a warning, the fleet index lists it)."""


def _verdict(ev: Evidence) -> tuple[str, bool]:
    """One sentence: the incident when a rule fired, else what the evidence shows; and whether it says, with no
    finding, that a process died (``_Died``)."""
    parts: list[str] = []
    if ev.stall and ev.vllm:
        parts.append(vllm_summary.stall_words(ev.stall))
    elif ev.stall:
        running = ev.stall.get("running_req")
        # onset unknown: a watchdog fired whose timeout (or time) the evidence does not give
        parts.append((f"stalled at {_hm(ev.stall['onset'])}" + (" (inferred)" if ev.stall.get("ts_basis") == "inferred"
                                                                 else "")
                      if ev.stall["onset"] else "stalled (the scheduler watchdog fired; when progress stopped is "
                                                "not in the evidence)")
                     + (f" with {running} request{'s' if running != 1 else ''} running" if running else ""))
    if ev.vllm and not ev.of("known-signature"):
        parts += vllm_summary.collective_words(ev.vllm)
    for f in ev.of("all-ranks-frozen"):
        parts.append(f"all {len(f['ranks'])} ranks froze together")
    for f in ev.of("first-rank-stopped"):
        parts.append(f"{', '.join(f['ranks'])} stopped first")
    for f in ev.of("collective-desync"):
        parts.append(f"{', '.join(f['ranks'])} out of step with the other ranks (collective desync)")
    for f in ev.of("known-signature"):
        parts.append(f"matches the known signature {f['signature']}")
    for f in ev.of("idle-memory-leak"):
        parts.append("a real memory leak" + (f" on {compact_ranks(f['ranks'])}" if f["ranks"] else "")
                     + (f" (reported {f['count']} times)" if (f.get("count") or 1) > 1 else ""))
    if not parts and ev.of("watchdog-kill"):
        f = ev.of("watchdog-kill")[0]
        parts.append(f"the scheduler watchdog fired on {compact_ranks(f['ranks'])} at {_hm(f['ts'])}")
    if parts:
        killed = rank_deaths.culprit_words(ev.job)     # a rank a signal killed changes the story of a hang
        return _sentence([*parts, killed] if killed else parts), False
    died = rank_deaths.words(ev.job)
    if died:
        return _sentence([f"the job died: {died}"]), True
    quiet = _quiet_verdict(ev)
    return _sentence([quiet]), isinstance(quiet, _Died)


def _quiet_verdict(ev: Evidence) -> str:
    """No rule fired: what the evidence does show."""
    end = ev.span[1]
    quiet = vllm_summary.quiet_verdict(ev.vllm, end) if ev.vllm else None
    if quiet:
        return quiet
    if ev.last_progress is not None:
        last = ev.last_progress["ts"]
        died = _died_after(ev.last_progress, ev.deaths)
        if died:
            return _Died(died)
        idle_s = (end - last).total_seconds() if end and last else 0
        if idle_s < 60:
            return f"busy to the end of the evidence (last progress at {_hm(last)})"
        return (f"idle since {_hm(last)} after the last requests completed "
                f"(then {idle_s / 60:.0f} min of evidence with no work pending)")
    if len(ev.watchdogs) >= 2:
        spread = (ev.watchdogs[-1]["ts"] - ev.watchdogs[0]["ts"]).total_seconds()
        return (f"{len(ev.watchdogs)} ranks' watchdogs fired within {spread:.1f} s; no earlier log lines")
    if ev.watchdogs:
        return f"the watchdog of {ev.watchdogs[0]['rank']} fired at {_hm(ev.watchdogs[0]['ts'])}; no earlier log lines"
    if ev.torch:
        t = ev.torch[0]
        ranks = [r for r in t["ranks"] if r is not None]
        return (f"torch NCCL timeouts of collective SeqNum={t['seq']} {t['op'] or ''} from "
                f"{len(ranks)} rank(s) ({', '.join(map(str, ranks))}); no log of the serving engine").replace("  ", " ")
    timeouts = ev.job.timeouts()
    if timeouts:
        t = next(iter(timeouts.values()))
        named = sorted((r for r in timeouts if r), key=rank_key)
        return (f"{t.get('backend') or 'c10d'} collective timeouts on "
                f"{compact_ranks(named) if named else 'a rank the lines do not name'} ({t.get('reason')}); a "
                f"{t.get('backend') or 'c10d'} timeout names no collective sequence number, so not which collective "
                f"each rank waited in")
    if ev.snapshots:
        return f"no stall in the log; the capture's snapshots: {ev.snapshots[0]}"
    if ev.stacks:
        colls = Counter(s["collective"] or "no collective" for s in ev.stacks)
        what = ", ".join(f"{n} in {c}" for c, n in colls.most_common(3))
        if set(ev.reporter.hand_ranks) >= {s["rank"] for s in ev.stacks}:
            return (f"only stacks a person summarised by hand: {len(ev.stacks)} rank(s), {what}; no capture or log "
                    f"to confirm where they wait or say when progress stopped")
        where = ev.place_words()
        if where and ev.places.moved:
            return (f"only stack dumps: {where}; {compact_ranks(sorted(ev.places.moved, key=rank_key))} in different "
                    f"places in dumps minutes apart at most: running, not stuck")
        if where:
            return f"only stack dumps: {where}; no log to say when progress stopped"
        return f"only stack dumps: {len(ev.stacks)} rank(s), {what}; no log to say when progress stopped"
    reporter = reporter_facts.quiet_words(ev.reporter)
    if reporter:
        return reporter
    if any(k in ev.files for k in STACK_KINDS):
        return "only stack dumps, of threads outside any collective; no log to say when progress stopped"
    if not _known_files(ev):
        return f"no evidence this tool reads: {sum(ev.files.values())} file(s) of no known format"
    if ev.deaths:
        if all(d["kind"] == "torch_nccl" and d["event"] in HEARTBEAT_EVENTS for d in ev.deaths):
            # torch's heartbeat monitor, nothing else: its own words
            secs = next((m.group(1) for d in ev.deaths if (m := _STUCK_FOR.search(d["message"] or ""))), None)
            ranks = sorted({d["rank"] for d in ev.deaths if d["rank"]}, key=rank_key)
            first = min((d["ts"] for d in ev.deaths if d["ts"]), default=None)
            return _Died("torch's heartbeat monitor took the process down" + (f" on {', '.join(ranks)}" if ranks else "")
                         + (f" at {_hm(first)}" if first else "") + ": ProcessGroupNCCL's own watchdog thread was stuck"
                         + (f" for {secs} s" if secs else "") + " (a CUDA or NCCL call blocked it: the GPU or NCCL "
                         "hung under it), but no progress line or stack says where the ranks stopped")
        said = "; ".join(_death_words(d) + (f" ({d['rank']})" if d["rank"] else "") + (f" at {_hm(d['ts'])}" if d["ts"] else "")
                         for d in ev.deaths)
        return _Died(f"a process of the engine died or was killed ({said}), but no progress line, watchdog or stack "
                     f"says when or where it stopped")
    return "nothing that shows a hang: no progress lines, watchdogs, timeouts or stacks"


def _died_after(lp: dict[str, Any], deaths: list[dict[str, Any]]) -> str | None:
    """The last progress line, then a process of the engine that died at or after it (a scheduler's exception,
    a vLLM engine's death): its last line is not the end of a quiet run, and the time between is not known to
    be idle."""
    last = lp["ts"]
    after = [d for d in deaths if d["ts"] is not None and last is not None and d["ts"] >= last]
    if not after:
        return None
    d = after[0]
    gap = (d["ts"] - last).total_seconds()
    running = lp.get("running_req")
    return (f"the last progress line at {_hm(last)}"
            + (f" had {running} request{'s' if running != 1 else ''} running" if running else " had none running")
            + f"; {f'{gap / 60:.0f} min' if gap >= 60 else f'{gap:.0f} s'} later ({_hm(d['ts'])}) a process of the "
            + f"engine died ({_death_words(d)}" + (f", {d['rank']}" if d["rank"] else "") + ")"
            + ("; no watchdog, timeout or stack says whether it was stuck or idle until then" if gap >= 60 else ""))


def _death_words(d: dict[str, Any]) -> str:
    """A death's line in a few words: its message without its glog head, else its kind."""
    return _clip(_glog_words((d["message"] or d["kind"]).strip()) or d["kind"], 100)


# torch's heartbeat monitor: the watchdog thread itself blocked (sglang-formats.md §8.2, 8): the events
# torch_nccl names so, and how long it waited
HEARTBEAT_EVENTS = ("watchdog_stuck", "heartbeat_timeout")
_STUCK_FOR = re.compile(r"watchdog got stuck for (\d+) seconds")


def _glog_words(message: str) -> str:
    """A torch line's words, without its glog head and its process group's prefixes."""
    m = torch_nccl.GLOG_RE.match(message)
    text = m.group("msg") if m else message
    while (p := torch_nccl.PG_RE.match(text) or torch_nccl.WORK_RANK_RE.match(text)) is not None:
        text = text[p.end():].lstrip()
    return text


def _clip(text: str, limit: int) -> str:
    """``text`` cut at a word boundary within ``limit`` characters, marked with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(" ,;:") + "…"


def _sentence(parts: list[str]) -> str:
    text = "; ".join(dict.fromkeys(parts))          # two findings of one kind say it once (two timed-out SeqNums)
    return text[0].upper() + text[1:] + "."


def _facts(ev: Evidence) -> list[str]:
    """The strongest facts, one sentence each: the findings' titles, else what was read."""
    facts = [f["title"] for f in ev.findings if f["severity"] in ("critical", "warning")][:6]
    for r in ev.restarts[:3]:
        why = (f"its logs begin more than {LOG_GAP_S // 3600} h after every earlier log ended"
               if r["started_by"] == LOGS_RESUMED else "the batch lines' rank labels change form there")
        facts.append(f"Another run of the server from {r['start_ts']:%Y-%m-%d %H:%M:%S}, its start line not in the "
                     f"evidence ({why}): each run is judged on its own.")
    if ev.dated_by_engine is not None:
        d = ev.dated_by_engine
        for paths, what in ((d["paths"], "without a year"), (d["day_paths"], "with the time of day alone")):
            if paths:
                more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
                facts.append(f"Lines printed {what} ({paths[0]}{more}) are dated by the engine's other evidence, "
                             f"whose latest full date is {d['near']:%Y-%m-%d %H:%M:%S}, not by their file's time.")
    if ev.held_tails:
        more = f" and {len(ev.held_tails) - 1} more file(s)" if len(ev.held_tails) > 1 else ""
        facts.append(f"The last line of {ev.held_tails[0]}{more} has no newline and the file was written in the last "
                     f"{LIVE_SECONDS / 60:.0f} minutes: it may still be growing, so that line is left for the next "
                     f"ingest or scan (a one-shot `hangforensics report` reads the file as it is).")
    if ev.last_progress is not None and not ev.stall:
        lp = ev.last_progress
        facts.append(f"Last progress line at {lp['ts']:%Y-%m-%d %H:%M:%S}"
                     + (f" ({lp['rank']})" if lp["rank"] else "")
                     + (f" with {lp['running_req']} running" if lp["running_req"] is not None else "") + ".")
    if ev.torch:
        for t in ev.torch[:3]:
            ranks = [r for r in t["ranks"] if r is not None]
            where = f" in {t['pg']}" if t["pg"] not in (None, "", "?") else ""       # (a line naming no group)
            facts.append(f"ProcessGroupNCCL timeout of SeqNum={t['seq']}{where} reported by "
                         f"{len(ranks)} rank(s): {', '.join(f'rank{r}' for r in ranks)}.")
    if ev.vllm:
        facts += vllm_summary.facts(ev.vllm)
    elif ev.stacks:
        colls = Counter((s["collective"] or "no collective", s["call_site"] or "") for s in ev.stacks)
        where = ev.place_words()
        if where:
            colls.clear()
            facts.append(f"{where[0].upper()}{where[1:]}.")
        for (c, site), n in colls.most_common(2):
            facts.append(f"{n} rank(s) wait in {c}" + (f" from {site}" if site and c != "no collective" else "") + ".")
    facts += rank_deaths.facts(ev.job)[:8]
    facts += reporter_facts.facts(ev.reporter)
    facts += [f"Capture snapshots: {s}" for s in ev.snapshots[:3]]
    facts += ev.places.moved_words()[:3]
    probes = [p for p in ev.probes if p["basis"] == "behaviour"]
    if probes:
        facts.append(f"Liveness probe: {probes[0]['path']} ({probes[0]['n']} requests at a steady interval).")
    if ev.gpu_samples:
        facts.append(f"{ev.gpu_samples} nvidia-smi samples.")
    seen: set[str] = set()
    return [f for f in facts if not (f in seen or seen.add(f))]


def capture_next(ev: Evidence) -> list[str]:
    """Evidence that would have settled what this evidence could not, specific to what is missing."""
    out: list[str] = []
    cmd = ev.capture_cmd
    hang = bool(ev.stall or ev.watchdogs or ev.torch or ev.rules() & {"collective-desync", "known-signature"})
    have_stacks = any(k in ev.files for k in STACK_KINDS) or bool(ev.stacks)
    for f in ev.of("first-rank-stopped"):
        ranks = ", ".join(f["ranks"])
        out.append(f"py-spy dump --native of {ranks}, the rank that stopped first, while it hangs ({cmd})")
    if ev.torch and ev.world:
        seen = {r for t in ev.torch for r in t["ranks"] if r is not None}
        missing = sorted(set(range(ev.world)) - seen)
        if missing and seen:
            out.append(f"the ProcessGroupNCCL timeout lines of ranks {', '.join(map(str, missing))} "
                       f"(only ranks {', '.join(map(str, sorted(seen)))} are in the evidence)")
    elif ev.torch:
        out.append("the ProcessGroupNCCL timeout lines of every rank (each rank's stderr), and the group's size "
                   "(the server or launcher arguments)")
    for f in ev.of("idle-memory-leak"):
        if f["ts"] is None or not f["ranks"]:
            out.append("the server log around the failed memory check, with its line prefixes: when it failed, on "
                       "which rank, and the server arguments (which pools, which cache) of that run")
    out += rank_deaths.capture_next(ev.job)
    out += reporter_facts.capture_next(ev.reporter)
    if ev.deaths and not have_stacks and not ev.of("idle-memory-leak"):
        # a dead process cannot be dumped afterwards: the stacks must be taken while it hangs, before the
        # RPC timeout, the heartbeat monitor or the watchdog kills it
        out.append(f"next time, stacks taken while the engine hangs, before it is killed: py-spy dump --native of "
                   f"every rank as soon as progress stops ({cmd}); and each process's own stderr, whose "
                   f"traceback says why it died")
    if ev.vllm:
        liveness = [p["path"] for p in ev.probes if p["path"] not in GENERATION_PROBES]
        return out + vllm_summary.capture_next(ev.vllm, hang, ev.stall, liveness, cmd, ev.native_frames,
                                               ev.gpu_samples, ev.nccl_debug)
    if (ev.watchdogs or ev.torch or have_stacks) and not ev.n_progress:
        out.append("the server log from before the watchdog or timeout: its batch lines show when progress stopped "
                   "and which requests were running")
    if hang and not have_stacks:
        out.append(f"py-spy dump --native of every scheduler rank while it hangs, repeated to tell stuck from "
                   f"slow: {cmd}")
    else:
        native = have_stacks and not ev.native_frames and not ev.reporter.hand_ranks
        # stacks alone, one moment of each rank: the same frames seconds later (and the same CPU time) is stuck
        repeat = have_stacks and not ev.stall and not ev.snapshots and not ev.places.moved and ev.places.places
        if native and repeat:
            out.append(f"py-spy dump --native repeated a few seconds apart, with each process's state and CPU time "
                       f"(only Python frames were captured, of one moment: native frames show the NCCL / CUDA wait, "
                       f"and a second round tells stuck from slow): {cmd}")
        elif native:
            out.append(f"py-spy dump --native (only Python frames were captured; native frames show the NCCL / CUDA "
                       f"wait): {cmd}")
        elif repeat:
            out.append(f"the dumps repeated a few seconds apart, with each process's state and CPU time, to tell stuck "
                       f"from slow: {cmd}")
    liveness = [p["path"] for p in ev.probes if p["path"] not in GENERATION_PROBES]
    if (ev.stall or "health-check-blind" in ev.rules()) and liveness:
        out.append(f"a generation probe (/health_generate or a 1-token /generate) instead of {liveness[0]}, which "
                   f"kept answering while the scheduler was stuck")
    if hang and not ev.nccl_debug and (ev.torch or ev.rules() & {"collective-desync", "all-ranks-frozen"}
                                       or any(s["collective"] for s in ev.stacks)):
        out.append("NCCL_DEBUG=INFO output, and TORCH_NCCL_TRACE_BUFFER_SIZE=2000 with "
                   "TORCH_NCCL_DUMP_ON_TIMEOUT=1 for Flight Recorder dumps of every rank")
    if hang and not ev.gpu_samples:
        out.append("nvidia-smi samples during the hang (0 % utilisation is a host-side wait, 100 % SM at ~150 W "
                   "a device spin)")
    if not out:
        out.append(f"if it hangs: py-spy dump --native of every rank repeated, nvidia-smi samples and the server "
                   f"log in one bundle ({cmd})" if not hang else f"repeated snapshots of every rank: {cmd}")
    return out


def engine_json(row: dict[str, Any]) -> dict[str, Any]:
    """An ``engines[]`` entry of the findings document (interface.md §3)."""
    def iso(ts: datetime | None) -> str | None:
        return ts.strftime("%Y-%m-%dT%H:%M:%S") if ts else None

    return {
        "engine": row["engine"], "verdict": row["verdict"], "span": [iso(row["span_start"]), iso(row["span_end"])],
        "ranks": list(row["ranks"] or []), "files": dict(row["files"] or {}),
        "unparsed_lines": int(row["unparsed_lines"] or 0), "capture_next": list(row["capture_next"] or []),
        "facts": list(row.get("facts") or []),
        # nothing found, but a process died (a crash, not a hang): what a nightly alert keys on beside the findings
        "died": bool(row.get("died")),
    }
