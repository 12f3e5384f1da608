"""Never silent: one summary per engine read, true also when no rule fired (interface.md §3 ``engines``,
§4 ``engine_summaries``, §5).

A summary says what was read (files by kind, ranks, time span, unparsed lines), the verdict in one
sentence, the strongest facts, and what to capture next time: the evidence that would have settled what
this evidence could not, specific to what is missing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from ...ranks import rank_key, rank_numbers
from ...readers.kinds import STACK_KINDS as DUMP_KINDS
from ...redaction import redact_payloads
from ...store import Store
from ..stacks.snapshot_text import facts_in_words
from ..stacks.stackclasses import compact_ranks
from . import rank_deaths, reporter_facts, vllm_summary
from .capture_advice import next_capture_command

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

    def rules(self) -> set[str]:
        return {f["rule"] for f in self.findings}

    def of(self, rule: str) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["rule"] == rule]


def rebuild(store: Store, engines: list[str], show_payloads: bool = False) -> list[dict[str, Any]]:
    """Fill ``engine_summaries`` for ``engines`` and return the rows."""
    rows = [summarise(gather(store, e), show_payloads) for e in engines]
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
    ("thin", pa.bool_()),
])


def gather(store: Store, engine: str) -> Evidence:
    files = {r["kind"]: r["n"] for r in store.query(
        "SELECT kind, count(*)::INTEGER AS n FROM sources WHERE engine = ? GROUP BY kind ORDER BY n DESC, kind",
        [engine])}
    unparsed = store.scalar("SELECT COALESCE(sum(unparsed_lines), 0) FROM sources WHERE engine = ?", [engine])
    span = store.query(
        """SELECT min(ts) AS a, max(ts) AS b FROM (
             SELECT ts FROM events WHERE engine = $1 UNION ALL SELECT ts FROM batches WHERE engine = $1
             UNION ALL SELECT ts FROM http_requests WHERE engine = $1
             UNION ALL SELECT ts FROM stacks WHERE engine = $1 AND capture = 'embedded')""", [engine])[0]
    ranks = [r["rank"] for r in store.query(
        """SELECT DISTINCT rank FROM (
             SELECT rank FROM batches WHERE engine = $1
             UNION ALL SELECT rank FROM events WHERE engine = $1 AND kind NOT LIKE 'vllm%'
             UNION ALL SELECT rank FROM stacks WHERE engine = $1
             UNION ALL SELECT 'rank' || rank FROM collectives WHERE engine = $1 AND rank IS NOT NULL)
           WHERE rank IS NOT NULL AND rank <> ''""", [engine])]
    ev = Evidence(engine, files, int(unparsed or 0), (span["a"], span["b"]), _dedupe_ranks(ranks),
                  store.query("SELECT * FROM findings WHERE engine = ? ORDER BY ts NULLS LAST", [engine]))
    ev.n_progress = store.scalar("SELECT count(*) FROM progress WHERE engine = ?", [engine]) or 0
    last = store.query("SELECT ts, rank, running_req, queue_req FROM progress WHERE engine = ? AND ts IS NOT NULL "
                       "ORDER BY ts DESC LIMIT 1", [engine])
    ev.last_progress = last[0] if last else None
    stalls = store.query("SELECT * FROM stalls WHERE engine = ? ORDER BY onset DESC", [engine])
    ev.stall = stalls[0] if stalls else None
    ev.watchdogs = store.query(
        "SELECT rank, min(fired_at) AS ts FROM watchdog_fires WHERE engine = ? AND rank <> '' "
        "GROUP BY rank ORDER BY ts", [engine])
    ev.torch = store.query(
        "SELECT pg, seq, any_value(op) AS op, list(DISTINCT rank ORDER BY rank) AS ranks, min(ts) AS ts "
        "FROM collectives WHERE engine = ? AND source = 'torch_nccl' GROUP BY pg, seq ORDER BY ts", [engine])
    ev.stacks = store.query(
        "SELECT rank, collective, call_site, thread_state FROM rank_collectives WHERE engine = ? "
        "AND capture = (SELECT max(capture) FROM rank_collectives WHERE engine = ?)", [engine, engine])
    ev.native_frames = store.scalar(
        "SELECT count(*) FROM frames f JOIN stacks s USING (dump_id, thread_id) WHERE s.engine = ? AND f.native",
        [engine]) or 0
    ev.gpu_samples = store.scalar("SELECT count(*) FROM gpu_samples WHERE engine = ?", [engine]) or 0
    ev.probes = store.query("SELECT path, n, basis FROM probes WHERE engine = ? ORDER BY n DESC", [engine])
    ev.nccl_debug = store.scalar("SELECT count(*) FROM events WHERE engine = ? AND kind = 'nccl_debug'", [engine]) or 0
    facts = store.query("SELECT tp_size, model FROM engine_facts WHERE engine = ?", [engine])
    ev.world = facts[0]["tp_size"] if facts else None
    ev.capture_cmd = next_capture_command(store, engine)
    ev.snapshots = facts_in_words(store.query(
        "SELECT * FROM snapshot_facts WHERE engine = ? AND status <> 'unknown'", [engine]))
    ev.deaths = store.query(
        # a traceback pasted without its log line speaks through its exception line
        """SELECT kind, rank, ts,
                  CASE WHEN regexp_matches(message, '^(Traceback|  File )') THEN COALESCE(attrs->>'exception', message)
                       ELSE message END AS message
           FROM events WHERE engine = ? AND (kind IN (SELECT unnest(?))
             OR (kind = 'torch_nccl' AND regexp_matches(message, 'Heartbeat monitor timed out|watchdog got stuck')))
           ORDER BY ts NULLS LAST, line LIMIT 3""", [engine, list(DEATH_KINDS)])
    ev.job = rank_deaths.gather(store, engine, ranks)
    ev.reporter = reporter_facts.gather(store, engine)
    if vllm_summary.is_vllm(store, engine):
        ev.vllm = vllm_summary.gather(store, engine, ev.stall)
    return ev


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
    verdict = _verdict(ev)
    if not show_payloads:
        verdict, facts = redact_payloads(verdict), [redact_payloads(f) for f in facts]
    return {
        "engine": ev.engine, "verdict": verdict, "span_start": ev.span[0], "span_end": ev.span[1],
        "ranks": ev.ranks, "files": ev.files, "unparsed_lines": ev.unparsed,
        "capture_next": capture_next(ev), "facts": facts,
        "thin": not ev.findings and (not ev.n_progress or not _known_files(ev)),
    }


def _known_files(ev: Evidence) -> int:
    return sum(n for k, n in ev.files.items() if k not in ("unknown", "empty", "binary", "unreadable"))


def _hm(ts: datetime | None) -> str:
    return ts.strftime("%H:%M:%S") if ts else "?"


def _verdict(ev: Evidence) -> str:
    """One sentence: the incident when a rule fired, else what the evidence shows."""
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
        return _sentence([*parts, killed] if killed else parts)
    died = rank_deaths.words(ev.job)
    if died:
        return _sentence([f"the job died: {died}"])
    return _sentence([_quiet_verdict(ev)])


def _quiet_verdict(ev: Evidence) -> str:
    """No rule fired: what the evidence does show."""
    end = ev.span[1]
    quiet = vllm_summary.quiet_verdict(ev.vllm, end) if ev.vllm else None
    if quiet:
        return quiet
    if ev.last_progress is not None:
        last = ev.last_progress["ts"]
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
        return f"only stack dumps: {len(ev.stacks)} rank(s), {what}; no log to say when progress stopped"
    reporter = reporter_facts.quiet_words(ev.reporter)
    if reporter:
        return reporter
    if any(k in ev.files for k in STACK_KINDS):
        return "only stack dumps, of threads outside any collective; no log to say when progress stopped"
    if not _known_files(ev):
        return f"no evidence this tool reads: {sum(ev.files.values())} file(s) of no known format"
    if ev.deaths:
        said = "; ".join(_clip((d["message"] or d["kind"]).strip(), 100)
                         + (f" ({d['rank']})" if d["rank"] else "") + (f" at {_hm(d['ts'])}" if d["ts"] else "")
                         for d in ev.deaths)
        return (f"a process of the engine died or was killed ({said}), but no progress line, watchdog or stack "
                f"says when or where it stopped")
    return "nothing that shows a hang: no progress lines, watchdogs, timeouts or stacks"


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
    if ev.last_progress is not None and not ev.stall:
        lp = ev.last_progress
        facts.append(f"Last progress line at {lp['ts']:%Y-%m-%d %H:%M:%S}"
                     + (f" ({lp['rank']})" if lp["rank"] else "")
                     + (f" with {lp['running_req']} running" if lp["running_req"] is not None else "") + ".")
    if ev.torch:
        for t in ev.torch[:3]:
            ranks = [r for r in t["ranks"] if r is not None]
            facts.append(f"ProcessGroupNCCL timeout of SeqNum={t['seq']} in {t['pg']} reported by "
                         f"{len(ranks)} rank(s): {', '.join(f'rank{r}' for r in ranks)}.")
    if ev.vllm:
        facts += vllm_summary.facts(ev.vllm)
    elif ev.stacks:
        colls = Counter((s["collective"] or "no collective", s["call_site"] or "") for s in ev.stacks)
        for (c, site), n in colls.most_common(2):
            facts.append(f"{n} rank(s) wait in {c}" + (f" from {site}" if site and c != "no collective" else "") + ".")
    facts += rank_deaths.facts(ev.job)[:8]
    facts += reporter_facts.facts(ev.reporter)
    facts += [f"Capture snapshots: {s}" for s in ev.snapshots[:3]]
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
    elif have_stacks and not ev.native_frames and not ev.reporter.hand_ranks:
        out.append(f"py-spy dump --native (only Python frames were captured; native frames show the NCCL / CUDA "
                   f"wait): {cmd}")
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
    }
