"""Engine summaries in vLLM's terms (interface.md §3 ``engines``, §5): stats lines, running and waiting
requests, KV-cache usage, the engine core and its workers, and what to capture next from a vLLM engine.

``summaries`` calls these for an engine whose log or stacks are vLLM's; everything else it says stays
the same for both engines.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...store import Store
from ..stacks.stackclasses import RankStack, collective_of, compact_ranks, path_of

# Where a vLLM process is, by the files and functions of its main thread (a dump often names no process).
WORKER_FILES = ("vllm/worker/", "vllm/v1/worker/", "vllm/model_executor/", "vllm/distributed/communication_op")
ENGINE_CORE_FILES = ("vllm/v1/engine/core.py",)
WAITING_FOR_WORK = ("dequeue", "acquire_read", "worker_busy_loop", "start_worker_execution_loop")


@dataclass
class StackFact:
    """Where one dumped vLLM process is: its role, its label (a worker's rank, 'EngineCore_DP0', or '' when
    the dump names none), the collective it waits in, and its innermost telling frame."""

    role: str
    label: str
    collective: str | None
    call_site: str | None
    frame: str
    path: str
    ts: datetime | None

    @property
    def who(self) -> str:
        if self.label:
            return self.label
        return f"a {self.role.replace('_', ' ')} (its dump, {self.path}, names no process)"

    @property
    def waits_for_work(self) -> bool:
        return self.collective is None and self.frame.split(".")[-1] in WAITING_FOR_WORK


@dataclass
class VllmFacts:
    last: dict[str, Any] | None            # the last stats line of the engine (any series; an undated one, a
                                           # message pasted without its head, only when no other is dated)
    stats_lines: int
    interval: float | None
    series: list[str]
    stacks: list[StackFact] = field(default_factory=list)
    world: int | None = None               # workers per engine core (tp x pp), from the start lines
    quiet_after_stall: bool = False        # no stats line after the stall's first zero line


def is_vllm(store: Store, engine: str) -> bool:
    """The engine's log is vLLM's, or its stacks are of vLLM processes."""
    return engine in vllm_engines(store, [engine])


def vllm_engines(store: Store, engines: list[str]) -> set[str]:
    """The engines of ``engines`` whose log is vLLM's, or whose stacks are of vLLM processes."""
    return {r["engine"] for r in store.query(
        "SELECT engine FROM vllm_stats WHERE list_contains($1, engine) "
        "UNION SELECT engine FROM events WHERE list_contains($1, engine) AND kind LIKE 'vllm%' "
        "UNION SELECT s.engine FROM frames f JOIN stacks s ON s.dump_id = f.dump_id AND s.thread_id = f.thread_id "
        "      WHERE list_contains($1, s.engine) AND f.file LIKE '%vllm/%'", [engines])}


def gather(store: Store, engine: str, stall: dict[str, Any] | None) -> VllmFacts:
    return gather_all(store, [engine], {engine: stall})[engine]


def gather_all(store: Store, engines: list[str], stalls: dict[str, dict[str, Any] | None]) -> dict[str, VllmFacts]:
    """``gather`` of every engine of ``engines`` (``stalls``: each one's stall, or None) in a fixed number of
    queries."""
    last = {r["engine"]: r for r in store.query(
        "SELECT * EXCLUDE (n) FROM (SELECT *, row_number() OVER (PARTITION BY engine ORDER BY ts DESC NULLS LAST, "
        "line DESC) AS n FROM vllm_series WHERE list_contains(?, engine)) WHERE n = 1", [engines])}
    agg = {r["engine"]: r for r in store.query(
        """SELECT engine, count(*) AS n, list(DISTINCT series) AS series, median(g) FILTER (WHERE g > 0) AS interval
           FROM (SELECT engine, series,
                        epoch(ts) - epoch(lag(ts) OVER (PARTITION BY engine, series ORDER BY ts, line)) AS g
                 FROM vllm_series WHERE list_contains(?, engine))
           GROUP BY engine""", [engines])}
    world = {r["engine"]: r["w"] for r in store.query(
        "SELECT engine, max(TRY_CAST(json_extract_string(attrs, '$.tp_size') AS INTEGER) * COALESCE(TRY_CAST("
        "json_extract_string(attrs, '$.pp_size') AS INTEGER), 1)) AS w FROM events WHERE list_contains(?, engine) "
        "AND kind = 'vllm_start' GROUP BY engine", [engines])}
    stacks = stack_facts_all(store, engines)
    out: dict[str, VllmFacts] = {}
    for e in engines:
        a = agg.get(e, {})
        out[e] = VllmFacts(last.get(e), a.get("n") or 0, a.get("interval"), sorted(s for s in a.get("series") or []),
                           stacks.get(e, []), world.get(e))
    # stats lines after each stall's onset: one query over (engine, onset) pairs
    onsets = [(e, st["onset"]) for e, st in stalls.items() if st is not None and e in out]
    if onsets:
        after = {r["engine"]: r["n"] for r in store.query(
            "SELECT v.engine, count(*) AS n FROM vllm_stats v JOIN (SELECT unnest($1) AS engine, unnest($2) AS onset) p "
            "ON v.engine = p.engine AND v.ts > p.onset GROUP BY v.engine",
            [[e for e, _ in onsets], [o for _, o in onsets]])}
        for e, _ in onsets:
            out[e].quiet_after_stall = after.get(e, 0) <= 1
    return out


def stack_facts(store: Store, engine: str) -> list[StackFact]:
    """One fact per dumped vLLM process of the latest dumps (its main thread), ranked or not."""
    return stack_facts_all(store, [engine]).get(engine, [])


def stack_facts_all(store: Store, engines: list[str]) -> dict[str, list[StackFact]]:
    """``stack_facts`` of every engine of ``engines`` (engines with none are missing), in one query."""
    # each dump's threads (not Flight Recorder's), frames innermost first: dumped_threads over many engines
    rows = store.query(
        """SELECT s.engine, s.dump_id, s.thread_id, s.rank, s.ts, s.thread_state, s.thread_name, s.pid,
                  s.process_title, s.path, s.line, s.format,
                  list({'function': f.function, 'file': f.file, 'line': f.line, 'native': f.native}
                       ORDER BY f.depth) AS frames, min(f.rowid) AS first_frame
           FROM stacks s JOIN frames f ON f.dump_id = s.dump_id AND f.thread_id = s.thread_id
           WHERE list_contains(?, s.engine) AND (s.format <> 'flight_recorder') GROUP BY ALL
           ORDER BY s.engine, first_frame""", [engines])
    by_engine: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_engine[r["engine"]][r["dump_id"]].append(r)
    return {e: _stack_facts(by_dump) for e, by_dump in by_engine.items()}


def _stack_facts(by_dump: dict[str, list[dict]]) -> list[StackFact]:
    out: dict[tuple, StackFact] = {}
    for threads in by_dump.values():
        main = ([t for t in threads if t["thread_name"] == "MainThread"]
                or [t for t in threads if t["pid"] is not None and str(t["pid"]) == str(t["thread_id"])]
                or (threads if len(threads) == 1 else [t for t in threads if _role(t) is not None]))
        if not main:
            continue
        t = main[0]
        role = _role(t)
        if role is None:
            continue
        st = RankStack(t["rank"] or "", t["dump_id"], t["ts"], t["thread_state"] or "", t["frames"], t["path"],
                       t["line"], t["pid"])
        coll, site = collective_of(st)
        fact = StackFact(role, t["rank"] or "", coll, site, (path_of(st) or ["?"])[-1], t["path"], t["ts"])
        key = (fact.label, t["pid"]) if fact.label else (t["dump_id"],)
        if key not in out or (fact.ts or datetime.min) >= (out[key].ts or datetime.min):
            out[key] = fact
    return sorted(out.values(), key=lambda f: (f.role != "worker", f.label, f.path))


def _role(t: dict[str, Any]) -> str | None:
    label, title = t["rank"] or "", t["process_title"] or ""
    files = [f["file"] or "" for f in t["frames"]]
    if "TP" in label or "Worker" in title or any(w in f for f in files for w in WORKER_FILES):
        return "worker"
    if label.startswith("EngineCore") or any(e in f for f in files for e in ENGINE_CORE_FILES):
        return "engine_core"
    if any("vllm/entrypoints/" in f for f in files):
        return "api_server"
    if any("/vllm/" in f for f in files):
        return "engine"
    return None


def stall_words(stall: dict[str, Any]) -> str:
    """'stalled at 14:15:42 with 34 requests running and 73 waiting (KV cache 99.6 %)', in the engine
    core's last report; a data-parallel stall names its engine cores."""
    who = f"engine core{'s' if len(stall['ranks']) > 1 else ''} {', '.join(stall['ranks'])} " if stall["ranks"] else ""
    words = f"{who}stalled at {stall['onset']:%H:%M:%S}" + (" (inferred)" if stall.get("ts_basis") == "inferred" else "")
    if stall.get("running_req") is not None:
        words += f" with {stall['running_req']} request{'s' if stall['running_req'] != 1 else ''} running"
        words += f" and {stall.get('waiting_req') or 0} waiting"
        if stall.get("kv_usage") is not None:
            words += f" (KV cache {stall['kv_usage']:.1f} %)"
    return words


def collective_words(vf: VllmFacts) -> list[str]:
    """'a worker (...) waits in all_reduce (from tensor_model_parallel_all_reduce)', per collective."""
    waiting: dict[tuple, list[StackFact]] = defaultdict(list)
    for f in vf.stacks:
        if f.role == "worker" and f.collective:
            waiting[(f.collective, f.call_site)].append(f)
    return [f"{_who(fs)} wait{'s' if len(fs) == 1 else ''} in {coll}" + (f" (from {site})" if site else "")
            for (coll, site), fs in waiting.items()]


def stack_words(vf: VllmFacts) -> list[str]:
    """Where the dumped workers and the engine core are, one sentence each."""
    out = collective_words(vf)
    idle = [f for f in vf.stacks if f.role == "worker" and f.waits_for_work]
    if idle:
        out.append(f"{_who(idle)} wait{'s' if len(idle) == 1 else ''} for work in the shared-memory broadcast "
                   f"({idle[0].frame})")
    for f in vf.stacks:
        if f.role == "engine_core":
            out.append(f"{f.label or 'the engine core'} is in {f.frame}"
                       + (" (waiting for the workers' results)" if f.frame.split(".")[-1] in WAITING_FOR_WORK else ""))
    return out


def _who(fs: list[StackFact]) -> str:
    labels = [f.label for f in fs if f.label]
    named = compact_ranks(labels) if labels else ""
    unnamed = [f for f in fs if not f.label]
    if not unnamed:
        return named
    one = "a worker" if len(unnamed) == 1 else f"{len(unnamed)} workers"
    what = f"{one} (dump{'s' if len(unnamed) > 1 else ''} naming no rank: {', '.join(f.path for f in unnamed[:3])})"
    return f"{named} and {what}" if named else what


def quiet_verdict(vf: VllmFacts, span_end: datetime | None) -> str | None:
    """No rule fired: what the stats lines show."""
    if vf.last is None:
        return None
    last = vf.last
    counts = (f"{last['prompt_tps'] or 0:.1f} prompt and {last['gen_tps'] or 0:.1f} generation tokens/s with "
              f"{last['running']} running and {last['waiting']} waiting")
    if last["ts"] is None or vf.stats_lines <= 1:       # one moment (a line quoted in a ticket): no trend
        when = "pasted without its time" if last["ts"] is None else f"at {last['ts']:%H:%M:%S}"
        return (f"one moment of serving: the only vLLM stats line, {when}, shows {counts} (one line cannot show "
                f"a stall: the log around it, with its times, can)")
    if not (last["running"] or 0) and not (last["waiting"] or 0):
        return (f"idle since {last['ts']:%H:%M:%S}: its last stats line counts no running and no waiting request "
                f"(vLLM then prints its stats at DEBUG only)")
    return f"serving to the end of the evidence: the last stats line ({last['ts']:%H:%M:%S}) shows {counts}"


def facts(vf: VllmFacts) -> list[str]:
    out = [s[0].upper() + s[1:] + "." for s in stack_words(vf)]
    if vf.last is not None and vf.interval:
        n = len(vf.series)
        out.append(f"{vf.stats_lines} vLLM stats lines, one every {vf.interval:.0f} s"
                   + (f" per engine core ({', '.join(vf.series)})" if n > 1 else "") + ".")
    return out


def capture_next(vf: VllmFacts, hang: bool, stall: dict[str, Any] | None, probes: list[str], cmd: str,
                 native_frames: int, gpu_samples: int, nccl_debug: int) -> list[str]:
    """What would settle a vLLM hang next time, specific to what this evidence lacks."""
    out: list[str] = []
    workers = [f for f in vf.stacks if f.role == "worker"]
    core = [f for f in vf.stacks if f.role == "engine_core"]
    everyone = "the EngineCore (VLLM::EngineCore*) and every worker (VLLM::Worker_TP*, or Ray's RayWorkerWrapper)"
    if hang and not vf.stacks:
        out.append(f"py-spy dump --native of {everyone} at the same moment, repeated to tell stuck from slow: {cmd}")
    elif vf.stacks and (not core or not vf.world or len({f.label for f in workers if f.label}) < vf.world):
        have = "; ".join(stack_words(vf)) or "the dumps in the evidence"
        out.append(f"py-spy dump --native of {everyone} at the same moment, not one process: {have}; only all of "
                   f"them together show which worker never joined ({cmd})")
    elif vf.stacks and not native_frames:
        out.append(f"py-spy dump --native (only Python frames were captured; native frames show the NCCL / CUDA "
                   f"wait): {cmd}")
    if stall is not None and vf.quiet_after_stall:
        out.append("VLLM_LOGGING_LEVEL=DEBUG: vLLM demotes its stats line to DEBUG after two intervals without "
                   "throughput, so a stuck engine's last counts stop at INFO; at DEBUG they go on being printed")
    if vf.stats_lines == 0:
        out.append("the stats lines (a server started without --disable-log-stats): without them no stall can be "
                   "dated from progress")
    if probes and (stall is not None or hang):
        out.append(f"a generation probe (a 1-token /v1/completions request with a short timeout) instead of "
                   f"{probes[0]}: vLLM answers /health with 200 while the engine core lives, hung or not")
    if hang and not nccl_debug and any(f.collective for f in workers):
        out.append("NCCL_DEBUG=INFO output, and TORCH_NCCL_TRACE_BUFFER_SIZE=2000 with TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
                   "for Flight Recorder dumps of every worker")
    if hang and not gpu_samples:
        out.append("nvidia-smi samples during the hang (0 % utilisation is a host-side wait, 100 % SM at ~150 W "
                   "a device spin)")
    if not out:
        out.append(f"if it hangs: py-spy dump --native of {everyone}, repeated, with nvidia-smi samples and the "
                   f"server log in one bundle ({cmd})")
    return out
