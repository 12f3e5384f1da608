"""The known-signature catalogue: one TOML file per signature in ``rules/signatures/``.

A signature says what it keys on in a ``[match]`` table; every key is optional
and all given keys must hold:

* ``frames``: regexes searched in the function names of each rank's main-thread
  stack (names, never package paths: vendored and renamed packages are common);
* ``min_fraction`` / ``max_fraction`` / ``min_ranks``: how many ranks of the
  capture must match;
* ``blocked``: the matching ranks are stuck, i.e. the engine stalled (stalls
  table), or a capture bundle's /proc facts show the rank blocked (state S with
  a kernel wait, or D; unchanged across repeated snapshots when there are
  several), or, without such facts, the matching thread is idle in the dump (a
  healthy busy dump that merely passes through the frame is not the hang; a
  rank spinning at 100 % CPU, state R, is not blocked whatever py-spy's flag);
* ``stalled``: the engine's log shows a stall (for frames a healthy engine also sits in: a pipeline
  stage's receive, a CUDA graph replay);
* ``others_in_collective``: the ranks that do not match wait in a collective;
* ``others_not_in_collective``: the matching ranks wait in a collective (not at the per-iteration sync
  point) while at least one peer of their group (a rank with a TP number: not an engine core) is in none;
* ``with_desync``: the capture's ranks wait in different collectives (desyncs);
* ``framework``: the engine must be of this family (``vllm``: its log or its stacks are vLLM's);
* ``gpu_util_max`` / ``gpu_util_min``: when nvidia-smi samples cover the stall, their mean
  utilisation must lie within these bounds (0 % idle in a host rendezvous vs a 100 % device spin);
* ``log``: regexes on event messages (``log_kinds`` restricts the event kinds);
  a log match alone is enough when no ``frames`` are given, and is supporting
  evidence otherwise;
* ``per_collective``: one match per timed-out collective (process group and SeqNum of the
  ``collectives`` view), not per engine: the signal is the collective, however many ranks report it.

Adding a signature is adding a file.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import tomllib

from ...errors import RuleError
from ...ranks import rank_numbers
from ...store import Store
from ..rules import rules_dir
from .snapshots import snapshot_status_of
from .stackclasses import PER_ITERATION_SITES, captures, compact_ranks, main_stacks_of, path_of


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    description: str
    evidence: str
    remediation: str
    references: tuple[str, ...]
    false_positives: tuple[str, ...]
    match: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


def load_signatures(directory: Path | None = None) -> list[Signature]:
    d = directory or (rules_dir() / "signatures")
    out = []
    for p in sorted(d.glob("*.toml")):
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise RuleError(f"signatures/{p.name}: {e}") from e
        for k in ("id", "title", "description", "evidence", "remediation", "match"):
            if k not in data:
                raise RuleError(f"signatures/{p.name}: missing {k}")
        if data["id"] != p.stem:
            raise RuleError(f"signatures/{p.name}: file name must be the signature id")
        m = data["match"]
        for key in ("frames", "log"):
            for rx in m.get(key, []):
                try:
                    re.compile(rx)
                except re.error as e:
                    raise RuleError(f"signatures/{p.name}: bad regex {rx!r}: {e}") from e
        out.append(Signature(
            id=data["id"], title=data["title"], description=" ".join(data["description"].split()),
            evidence=" ".join(data["evidence"].split()), remediation=" ".join(data["remediation"].split()),
            references=tuple(data.get("references", [])), false_positives=tuple(data.get("false_positives", [])),
            match=m, path=p))
    return out


def _frame_hits(frames: list[dict], patterns: tuple[str, ...]) -> list[str]:
    return [f["function"] for f in frames if _frame_matches(patterns, f["function"])]


@lru_cache(maxsize=1 << 16)
def _frame_matches(patterns: tuple[str, ...], function: str) -> bool:
    """Whether any of a signature's frame regexes is found in ``function`` (names repeat across ranks)."""
    return any(re.search(p, function) for p in patterns)


@dataclass
class EngineEvidence:
    """What every signature of one engine is evaluated against, queried once."""

    stalled: bool
    caps: list            # captures of main-thread stacks
    desync_caps: set[int]
    colls: dict
    proc: dict = field(default_factory=dict)     # dump_id -> snapshot status (snapshot_facts)
    framework: str = "sglang"                     # vllm when its log or its stacks are vLLM's
    gpu: tuple[float, int] | None = None          # mean GPU utilisation while stalled, samples (none: no samples)
    logs: dict[str, list[dict]] | None = None     # signature id -> its log matches (None: read when evaluated)

    def blocked(self, s: Any) -> bool:
        """A rank stuck where its dump shows it: by the capture's /proc facts when there are any."""
        status = self.proc.get(s.dump_id)
        if status in ("stuck", "driver_wait", "blocked"):
            return True
        if status in ("spinning", "running", "moved", "gone"):
            return False
        return s.state == "idle"


def engine_evidence(store: Store, engine: str) -> EngineEvidence:
    return engines_evidence(store, [engine])[engine]


def engines_evidence(store: Store, engines: list[str],
                     main_stacks: dict[str, list[Any]] | None = None) -> dict[str, EngineEvidence]:
    """:func:`engine_evidence` of every engine of ``engines``, each table read once for them all
    (``main_stacks``: ``main_stacks_of`` of these engines or more, read already)."""
    def engine_set(sql: str) -> set[str]:
        return {r["engine"] for r in store.query(sql, [engines])}

    stalled = engine_set("SELECT DISTINCT engine FROM stalls WHERE list_contains(?, engine)")
    stacks = main_stacks if main_stacks is not None else main_stacks_of(store, engines)
    desync: dict[str, set[int]] = defaultdict(set)
    for r in store.query("SELECT engine, capture FROM desyncs WHERE list_contains(?, engine) "
                         "AND kind IS DISTINCT FROM 'absent'", [engines]):
        desync[r["engine"]].add(r["capture"])
    colls: dict[str, dict] = defaultdict(dict)
    for r in store.query("SELECT engine, capture, rank, collective FROM rank_collectives "
                         "WHERE list_contains(?, engine)", [engines]):
        colls[r.pop("engine")][(r["capture"], r["rank"])] = r
    vllm = engine_set(
        "SELECT DISTINCT engine FROM events WHERE list_contains($1, engine) AND kind LIKE 'vllm%' UNION "
        "SELECT DISTINCT s.engine FROM frames f JOIN stacks s USING (dump_id, thread_id) "
        "WHERE list_contains($1, s.engine) AND f.file LIKE '%/vllm/%'")
    proc = snapshot_status_of(store, engines)
    gpu = _gpu_during_stall(store, engines)
    out = {}
    for e in engines:
        caps = captures(stacks.get(e, []))
        out[e] = EngineEvidence(e in stalled, caps, desync.get(e, set()), colls.get(e, {}) if caps else {},
                                proc.get(e, {}) if caps else {}, "vllm" if e in vllm else "sglang", gpu.get(e))
    return out


def _log_rows(store: Store, engines: list[str], sig: Signature) -> dict[str, list[dict]]:
    """engine -> the events ``sig``'s log regexes match, by time then line (ties in the order read)."""
    kinds = sig.match.get("log_kinds")
    rx = "|".join(f"(?:{x})" for x in sig.match["log"])
    out: dict[str, list[dict]] = {}
    for r in store.query(
            "SELECT engine, ts, rank, path, line, message FROM events WHERE list_contains(?, engine) "
            "AND regexp_matches(message, ?)" + (" AND list_contains(?, kind)" if kinds else ""),
            [engines, rx, kinds] if kinds else [engines, rx]):
        out.setdefault(r.pop("engine"), []).append(r)
    for rows in out.values():        # ORDER BY ts, line: NULLs last
        rows.sort(key=lambda r: (r["ts"] is None, r["ts"] or datetime.min, r["line"] is None, r["line"] or 0))
    return out


def evaluate(store: Store, engine: str, sig: Signature, ev: EngineEvidence | None = None) -> list[dict[str, Any]]:
    m = sig.match
    ev = ev or engine_evidence(store, engine)
    stalled = ev.stalled
    log_rows: list[dict] = []
    if m.get("log"):
        log_rows = (ev.logs.get(sig.id, []) if ev.logs is not None
                    else _log_rows(store, [engine], sig).get(engine, []))
    out: list[dict[str, Any]] = []
    if not m.get("frames"):
        if log_rows:
            ranks = sorted({r["rank"] for r in log_rows if r["rank"] and not r["rank"].startswith("rank")})
            out.append(_row(engine, sig, log_rows[0]["ts"], ranks,
                            f"{len(log_rows)} log line(s) match: {log_rows[0]['message'][:300]}",
                            [{"file": r["path"], "line": r["line"]} for r in log_rows[:8]]))
        return out
    patterns = tuple(m["frames"])
    desync_caps, colls = ev.desync_caps, ev.colls
    if m.get("framework", ev.framework) != ev.framework:
        return out
    for ci, cap in enumerate(ev.caps):
        hits = {s.rank: _frame_hits(s.frames, patterns) for s in cap}
        matched = [s for s in cap if hits[s.rank]]
        if m.get("stalled") and not stalled:
            continue
        if m.get("blocked"):
            matched = [s for s in matched if stalled or ev.blocked(s)]
        peers: list = []
        if m.get("others_not_in_collective"):
            matched, peers = _one_sided(cap, matched, colls, ci)
            if not peers:
                continue
        n, total = len(matched), len(cap)
        if n < m.get("min_ranks", 1) or not total:
            continue
        if n / total < m.get("min_fraction", 0.0) or n / total > m.get("max_fraction", 1.0):
            continue
        others = [s for s in cap if s not in matched]
        if m.get("others_in_collective") and (not others or not all(
                colls.get((ci, s.rank), {}).get("collective") for s in others)):
            continue
        if m.get("with_desync") and ci not in desync_caps:
            continue
        # a one-sided collective names the peer(s) that never joined: the odd ones out, as a desync does
        ranks = [s.rank for s in (peers or matched)]
        frames = sorted({f for s in matched for f in hits[s.rank]})
        threads = sorted({s.thread for s in matched})
        where = "on the main thread" if threads == [""] else \
            "in thread " + ", ".join(repr(t) if t else "MainThread" for t in threads[:3])
        who = compact_ranks([s.rank for s in matched if s.rank]) or "an unlabelled process (its dump names no rank)"
        detail = f"{who} ({n} of {total} ranks in this capture) show {', '.join(frames[:4])} {where}"
        if others and m.get("others_in_collective"):
            detail += f", while {compact_ranks([s.rank for s in others])} wait in a collective for them"
        if peers:
            where = sorted({(path_of(s) or ["?"])[-1] for s in peers})
            detail += (f", while their peer(s) {compact_ranks([s.rank for s in peers])} are in no collective "
                       f"(in {', '.join(where[:3])}): one side entered the collective, the other never joined")
        if log_rows:
            detail += f"; the log agrees: {log_rows[0]['message'][:200]}"
        if any(s.hand for s in matched):
            detail += " (in stacks a person summarised by hand, not a capture)"
        detail += f". {sig.description} Remediation: {sig.remediation}"
        gpu = ev.gpu
        if gpu is not None:
            mean, n_samples = gpu
            if mean > m.get("gpu_util_max", 101.0) or mean < m.get("gpu_util_min", -1.0):
                continue
            detail += f" GPU utilisation while stalled: {mean:.0f} % on average over {n_samples} nvidia-smi samples."
        ts = max((s.ts for s in matched if s.ts), default=None)
        cited = [{"file": s.path, "line": s.line} for s in matched[:8]]
        cited += [{"file": r["path"], "line": r["line"]} for r in log_rows[:2]]
        out.append(_row(engine, sig, ts, ranks, detail, cited))
    if not out and log_rows and m.get("log_alone", False):
        out.append(_row(engine, sig, log_rows[0]["ts"], [], f"log: {log_rows[0]['message'][:300]}",
                        [{"file": r["path"], "line": r["line"]} for r in log_rows[:8]]))
    return out[-1:] if m.get("latest_only", True) else out


def _one_sided(cap: list, matched: list, colls: dict, ci: int) -> tuple[list, list]:
    """(ranks waiting in a collective, their peers in none) of one capture, or ([], []).  Peers are ranks
    of the same data-parallel group with a TP number (a vLLM engine core or API server is no member of the
    group); a wait at the per-iteration sync point (V0 workers' broadcast_tensor_dict, SGLang's
    broadcast_pyobj) is waiting for work, not one side of a collective."""
    def waits(s: Any) -> bool:
        c = colls.get((ci, s.rank), {})
        return bool(c.get("collective")) and not PER_ITERATION_SITES.search(c.get("call_site") or "")

    inside = [s for s in matched if waits(s)]
    groups = {rank_numbers(s.rank).get("DP") for s in inside}
    peers = [s for s in cap if s not in inside and rank_numbers(s.rank).get("TP") is not None
             and rank_numbers(s.rank).get("DP") in groups]
    if not inside or not peers or any(waits(s) for s in peers):
        return [], []
    return inside, peers


def _gpu_during_stall(store: Store, engines: list[str]) -> dict[str, tuple[float, int]]:
    """engine -> mean GPU utilisation between stall onset and the end of the evidence, and the sample
    count (engines without samples are missing)."""
    return {r["engine"]: (r["mean"], r["n"]) for r in store.query(
        "SELECT g.engine, avg(g.util_pct) AS mean, count(*) AS n FROM gpu_samples g JOIN stalls s "
        "ON s.engine = g.engine AND g.ts > s.onset AND g.ts <= s.evidence_end "
        "WHERE list_contains(?, g.engine) GROUP BY g.engine", [engines]) if r["n"]}


def _row(engine: str, sig: Signature, ts, ranks: list[str], detail: str, evidence: list[dict]) -> dict[str, Any]:
    return {"engine": engine, "signature": sig.id, "title": sig.title, "ts": ts, "ranks": ranks,
            "detail": detail, "evidence": evidence}


@dataclass
class LoggedEvidence:
    """What the signatures read of the evidence alone (no model an analysis builds), for ``rebuild``:
    ``run_rules`` reads it on its second connection, beside the models."""
    with_stacks: list[str]                          # the engines with stacks
    logs: dict[str, dict[str, list[dict]]]          # signature id -> engine -> its log matches
    timed_out: list[dict[str, Any]]                 # the torch collective timeouts (for per_collective ones)


def read_logged(store: Store, engines: list[str]) -> LoggedEvidence:
    """The ``LoggedEvidence`` of ``engines``: every signature's log matches of every engine (one query each),
    the torch collective timeouts of the per-collective ones."""
    sigs = load_signatures()
    with_stacks = sorted({r["engine"] for r in store.query(
        "SELECT DISTINCT engine FROM stacks WHERE list_contains(?, engine)", [engines])})
    return LoggedEvidence(with_stacks, {sig.id: _log_rows(store, engines, sig) for sig in sigs if sig.match.get("log")},
                          _timed_out(store, engines) if any(sig.match.get("per_collective") for sig in sigs) else [])


def rebuild(store: Store, engines: list[str], main_stacks: dict[str, list[Any]] | None = None,
            logged: LoggedEvidence | None = None) -> None:
    """The signature matches of ``engines`` (``main_stacks``: their ``main_stacks_of``; ``logged``: their
    ``read_logged``; each read already, or read here)."""
    sigs = load_signatures()
    store.con.execute("DELETE FROM signature_matches WHERE list_contains(?, engine)", [engines])
    logged = logged if logged is not None else read_logged(store, engines)
    with_stacks, logs = logged.with_stacks, logged.logs
    # stack signatures where stacks exist, then log-only ones
    rows: list[dict[str, Any]] = []
    evidence = engines_evidence(store, with_stacks, main_stacks)
    for e in with_stacks:
        ev = evidence[e]
        ev.logs = {sid: by_engine.get(e, []) for sid, by_engine in logs.items()}
        rows += [r for sig in sigs if sig.match.get("frames") for r in evaluate(store, e, sig, ev)]
    for sig in sigs:
        if sig.match.get("per_collective"):
            rows += _per_collective(logged.timed_out, sig)
            continue
        if sig.match.get("frames") and not sig.match.get("log_alone"):
            continue
        if not sig.match.get("log"):
            continue
        for e, log_rows in logs[sig.id].items():
            if sig.match.get("frames") and any(r["engine"] == e and r["signature"] == sig.id for r in rows):
                continue
            log_only = Signature(**{**sig.__dict__, "match": {k: v for k, v in sig.match.items() if k != "frames"}})
            rows += evaluate(store, e, log_only, EngineEvidence(False, [], set(), {}, logs={sig.id: log_rows}))
    store.append("signature_matches", rows)


def _timed_out(store: Store, engines: list[str]) -> list[dict[str, Any]]:
    """The torch collective timeouts of ``engines``, one row per (engine, process group, SeqNum)."""
    return store.query(
        """SELECT engine, pg, seq, list(op ORDER BY rank NULLS LAST, op) FILTER (WHERE op IS NOT NULL) AS ops,
                  min(ts) AS ts, count(DISTINCT coalesce(rank, -1 - pg_rank)) AS n,
                  list(DISTINCT rank ORDER BY rank) AS ranks, list({'file': path, 'line': line} ORDER BY ts, path, line)[1:8] AS ev,
                  max(timeout_ms) AS timeout_ms
           FROM collectives WHERE list_contains(?, engine) AND source = 'torch_nccl'
           GROUP BY engine, pg, seq ORDER BY engine, ts""", [engines])


def _per_collective(rows: list[dict[str, Any]], sig: Signature) -> list[dict[str, Any]]:
    """One match per (engine, process group, SeqNum) of the torch collective timeouts (``_timed_out``)."""
    out = []
    for r in rows:
        # the op most ranks report (a rank in another collective at that SeqNum is the odd one out), the lowest
        # rank's among equals
        r["op"] = Counter(r["ops"]).most_common(1)[0][0] if r["ops"] else None
        ranks = ", ".join(str(x) for x in r["ranks"] if x is not None)
        where = f"process group {r['pg']}" if r["pg"] != "?" else "a process group the lines do not name"
        detail = (f"{r['n']} rank(s) ({ranks}) report that collective SeqNum {r['seq']} "
                  f"{r['op'] or ''} of {where} timed out"
                  + (f" after {r['timeout_ms'] / 1000:.0f} s" if r["timeout_ms"] else "")
                  + f". {sig.description} Remediation: {sig.remediation}")
        # the torch ranks that report it (global ranks: interface.md §3)
        out.append(_row(r["engine"], sig, r["ts"], [f"rank{x}" for x in r["ranks"] if x is not None], detail, r["ev"]))
    return out
