"""Collective records compared per process group: one matcher for every source.

The ``collectives`` view holds one row per (engine, source, rank, process group, sequence number, op):
torch ProcessGroupNCCL timeouts, Flight Recorder entries, NCCL RAS counts.  Each engine's rows go
through :func:`~hangforensics.analysis.collectives.collective_match.compare_process_groups`, which compares ranks
only within one (source, process group, counter), takes the majority of ranks as the reference and
names the minority (behind, ahead, in another op, with other sizes) or the members that are missing
or dead.  This module adds what only the store knows: the engine's rank labels and world size (a torch
group's members), the Flight Recorder dumps that exist (a rank that dumped is not missing), evidence
lines, the clock the times are on, and the desync-debug report as a fact on the same collective
(:mod:`.desync_facts`).  The verdicts fill ``collective_verdicts``, which the rules
``collective-desync`` and ``first-rank-stopped`` read.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

from ...parsers.collectives.collective_rows import BARRIER_SOURCE, MISMATCH_SOURCE, CollectiveRow
from ...parsers.collectives.flight_recorder import rank_from_filename
from ...parsers.collectives.nccl_ras import JOB_PG
from ...ranks import label_global_rank, rank_key
from ...store import Store
from ...store.views import TP_SIZES
from ..stacks.stackclasses import compact_ranks
from .collective_match import Verdict, VerdictKind, compare_process_groups
from .desync_facts import attach_reports, bare_pg, tie_reports

# A group whose name the lines do not print: its ranks are compared only within this many SeqNums
# (different groups' counters are unrelated and usually far apart).
UNNAMED_GROUP_MAX_GAP = 3
UNNAMED = "a process group the lines do not name"
WHY = {
    VerdictKind.DESYNC: "Ranks of one group must issue the same collectives in the same order: the minority is "
                        "out of step.",
    VerdictKind.ABSENT: "The peers were waiting for it: the absent rank stopped first (its stop time is not in "
                        "the evidence).",
}


def rebuild(store: Store, engines: list[str]) -> None:
    store.con.execute("DELETE FROM collective_verdicts WHERE list_contains(?, engine)", [engines])
    store.append("collective_verdicts", judge_engines(store, engines))


class EngineContext:
    """What the rest of an engine's evidence says about its ranks: SGLang labels and the world size."""

    def __init__(self, labels: list[str], world: int | None, pure_tp: bool) -> None:
        self.labels, self.world, self.pure_tp = labels, world, pure_tp

    @classmethod
    def of(cls, store: Store, engine: str) -> EngineContext:
        return cls.of_many(store, [engine])[engine]

    @classmethod
    def of_many(cls, store: Store, engines: list[str]) -> dict[str, EngineContext]:
        """The context of each of ``engines``: three queries whatever their number."""
        labels: dict[str, list[str]] = {e: [] for e in engines}
        if not engines:
            return {}
        for r in store.query(
                "SELECT DISTINCT engine, rank FROM batches WHERE list_contains($e, engine) UNION "
                "SELECT DISTINCT engine, rank FROM events WHERE list_contains($e, engine) AND rank <> '' "
                "AND rank NOT LIKE 'rank%' AND kind NOT LIKE 'vllm%'", {"e": engines}):
            if r["rank"]:
                labels[r["engine"]].append(r["rank"])
        tp: dict[str, Any] = {}
        for r in store.query(TP_SIZES, [engines]):
            tp.setdefault(r["engine"], r["tp_size"])          # the first row, as a per-engine f[0] took
        pp = {r["engine"]: r["pp"] for r in store.query(
            "SELECT engine, max(TRY_CAST(json_extract_string(attrs, '$.pp_size') AS INTEGER)) AS pp FROM events "
            "WHERE list_contains(?, engine) AND kind = 'server_args' GROUP BY engine", [engines])}
        out = {}
        for e in engines:
            t, p = tp.get(e), pp.get(e) or 1
            out[e] = cls(labels[e], t * p if t else None, bool(t) and p == 1)
        return out

    def label(self, rank: int) -> str:
        if self.pure_tp and self.world and rank < self.world:
            return f"TP{rank}"
        return label_global_rank(rank, self.labels)


def judge_engine(store: Store, engine: str) -> list[dict[str, Any]]:
    """The ``collective_verdicts`` rows of one engine."""
    return judge_engines(store, [engine])


def judge_engines(store: Store, engines: list[str]) -> list[dict[str, Any]]:
    """The ``collective_verdicts`` rows of ``engines``, in their order: the store is read by a fixed number
    of queries over all of them, then each engine is judged from its own rows."""
    if not engines:
        return []
    views: dict[str, list[dict]] = defaultdict(list)
    # (ties broken to the last column: the rows come in one order on any number of DuckDB threads)
    for r in store.query("SELECT * FROM collectives WHERE list_contains(?, engine) "
                         "ORDER BY engine, source, pg, rank, seq, seq_kind, op, state, ts, path, line", [engines]):
        views[r["engine"]].append(r)
    dead = _unranked_dead_facts(store, engines)
    judged = [e for e in dict.fromkeys(engines) if views.get(e)]
    ctxs = EngineContext.of_many(store, judged)
    # per engine its Flight Recorder dumps (paths) and the clock their times are on
    fr = {r["engine"]: r for r in (store.query(
        "SELECT engine, list(path) AS paths, max(clock_offset_s) AS off, max(note) AS note FROM sources "
        "WHERE list_contains(?, engine) AND kind = 'flight_recorder' GROUP BY engine", [judged]) if judged else [])}
    out: list[dict[str, Any]] = []
    for engine in engines:
        view = views.get(engine)
        if not view:
            out.extend(_unranked_dead(engine, dead.get(engine, [])))
            continue
        out.extend(_judge(engine, view, ctxs[engine], fr.get(engine), dead.get(engine, [])))
    return out


def _judge(engine: str, view: list[dict], ctx: EngineContext, fr: dict | None,
           dead: list[dict]) -> list[dict[str, Any]]:
    """One engine's verdicts from its view rows (ordered by source, pg, rank, seq) and prefetched facts."""
    rows, where = _matcher_rows([r for r in view if r["source"] not in ("desync_report", MISMATCH_SOURCE,
                                                                          BARRIER_SOURCE)])
    # a rank whose dump exists is not missing, even when nothing of a group is left in it (or it was refused)
    dumps = fr["paths"] if fr else []
    reporters = {"flight_recorder": [r for d in dumps if (r := rank_from_filename(d)) is not None]}
    verdicts = compare_process_groups(rows, reporters, _torch_members(rows, ctx))
    clock = _fr_clock(fr) if any(r.source == "flight_recorder" for r in rows) else ""
    out = _verdict_rows(engine, verdicts, where, ctx, clock)
    reports = tie_reports([r for r in view if r["source"] == "desync_report"],
                          [r for r in view if r["source"] == "torch_nccl"])
    out = attach_reports(out, reports, ctx.label)
    out += _mismatch_verdicts(engine, [r for r in view if r["source"] == MISMATCH_SOURCE], ctx.label)
    out += _barrier_verdicts(engine, [r for r in view if r["source"] == BARRIER_SOURCE], ctx.label)
    if not any(v["source"] == "nccl_ras" and v["verdict"] == "absent" for v in out):
        out += _unranked_dead(engine, dead)          # a named absent rank says more than an unnamed process
    return out


def _mismatch_verdicts(engine: str, rows: list[dict], label: Any) -> list[dict[str, Any]]:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL's mismatch check is torch's own cross-rank verdict (each rank's collective
    fingerprint checked against the others' before it runs): a desync, whose odd ranks are those outside the
    fingerprint most ranks run; with no majority (two ranks, or the other rank's fingerprint cut from a paste)
    every rank it names is named."""
    if not rows:
        return []
    parsed = sorted(((r, json.loads(r["attrs"] or "{}")) for r in rows),
                    key=lambda ra: (ra[1].get("peer", False), ra[0]["line"] or 0))
    # a group other than the default one: the reporters' own rows say which global rank each group rank is
    to_global = {a["pg_rank"]: r["rank"] for r, a in parsed if not a.get("peer") and a.get("pg_rank") is not None
                 and r["rank"] is not None}
    prints: dict[Any, tuple] = {}
    for r, a in parsed:
        # (a rank's own statement first: what the rank itself runs)
        rank = r["rank"] if r["rank"] is not None else to_global.get(a.get("pg_rank"), ("pg", a.get("pg_rank")))
        prints.setdefault(rank, (r["seq"], r["op"] or "", tuple(map(tuple, a.get("input_sizes") or ())),
                                 tuple(a.get("input_dtypes") or ())))

    def name(r: Any) -> str:                # (a group rank no reporter maps: named as such)
        return f"group rank {r[1]}" if isinstance(r, tuple) else label(r)

    by_print: dict[tuple, list[int]] = defaultdict(list)
    for rank, fp in sorted(prints.items(), key=lambda kv: str(kv[0])):
        by_print[fp].append(rank)
    ranked = sorted(by_print.items(), key=lambda kv: -len(kv[1]))
    major = ranked[0][1] if len(ranked) > 1 and len(ranked[0][1]) > len(ranked[1][1]) else []
    odd = sorted((r for r in prints if r not in major), key=str)

    def says(fp: tuple, ranks: list[int]) -> str:
        seq, op, sizes, dtypes = fp
        what = (op or "a collective") + (f" #{seq}" if seq is not None else "")
        if sizes:
            what += f" of {'x'.join(map(str, sizes[0])) or 'scalar'}" + (f" {dtypes[0]}" if dtypes else "")
        return f"{compact_ranks([name(r) for r in ranks])} {'runs' if len(ranks) == 1 else 'run'} {what}"

    differ = next((a["differ"] for _, a in parsed if a.get("differ")), None)
    detail = ("torch's collective check (TORCH_DISTRIBUTED_DEBUG=DETAIL, before each collective) found the ranks "
              "running different collectives: " + "; ".join(says(fp, ranks) for fp, ranks in ranked)
              + (f" (torch: {differ})" if differ else "") + ". ")
    if major:
        detail += f"{compact_ranks([name(r) for r in odd])} {'is' if len(odd) == 1 else 'are'} the minority: out of step."
    elif len(prints) == 1:
        detail += ("The other rank's fingerprint is not in the evidence (cut from it): the rank the check names is "
                   "named.")
    else:
        detail += "No fingerprint is run by a majority: every rank the check names is named."
    detail += " Ranks of one group must issue the same collectives in the same order: the check raised there."
    fp0 = ranked[0][0] if major else (None, None, (), ())
    return [{"engine": engine, "source": MISMATCH_SOURCE, "pg": rows[0]["pg"], "verdict": "desync",
             "ranks": sorted((name(r) for r in odd), key=rank_key),
             "majority_ranks": sorted((name(r) for r in major), key=rank_key),
             "seq": fp0[0], "op": fp0[1] or None,
             "ts": min((r["ts"] for r in rows if r["ts"] is not None), default=None), "ts_basis": "read",
             "detail": detail,
             "evidence": [{"file": r["path"], "line": r["line"]} for r in sorted(rows, key=lambda r: r["line"] or 0)][:12]}]


def _barrier_verdicts(engine: str, rows: list[dict], label: Any) -> list[dict[str, Any]]:
    """torch's monitored barrier names the ranks that never arrived (its coordinator, rank 0, waited for them):
    torch's own verdict on who stopped first, an ``absent`` one; the ranks that arrived are the others.  Where
    the ranks that arrived waited for the coordinator and it said nothing of the barrier, it never ran it."""
    attrs = [json.loads(r["attrs"] or "{}") for r in rows]
    absent = sorted({r["rank"] for r in rows if r["state"] == "absent"})
    came = sorted({r["rank"] for r in rows if r["state"] != "absent"} - set(absent))
    reporters = {a.get("reporter") for a in attrs}
    silent = sorted({c for a in attrs if (c := a.get("coordinator")) is not None and c not in reporters})
    if not absent and silent:
        came = [r for r in came if r not in silent]
        return [_barrier_verdict(engine, rows, label, silent, came, None,
                                 f"{compact_ranks([label(r) for r in came])} reached torch's monitored barrier and "
                                 f"waited for its coordinator, {compact_ranks([label(r) for r in silent])}, which "
                                 "printed nothing of it: the coordinator never reached the barrier (it stopped first; "
                                 "a stack dump of it says where)")]
    if not absent:
        return []
    waited = next((a["timeout_ms"] for a in attrs if a.get("timeout_ms")), None)
    detail = ("torch's monitored barrier (monitored_barrier, or TORCH_DISTRIBUTED_DEBUG=DETAIL's check) "
              + (f"waited {waited} ms: " if waited else "timed out: ")
              + f"{compact_ranks([label(r) for r in absent])} never arrived"
              + (f", while {compact_ranks([label(r) for r in came])} did (the others' errors point at rank 0, "
                 "the barrier's coordinator, whose log names the ranks that failed)" if came else "")
              + ". The ranks that never arrived stopped first: a stack dump of them says where")
    return [_barrier_verdict(engine, rows, label, absent, came, "absent", detail)]


def _barrier_verdict(engine: str, rows: list[dict], label: Any, absent: list[int], came: list[int],
                     state: str | None, detail: str) -> dict[str, Any]:
    """An ``absent`` verdict of the monitored barrier; its evidence the lines of ``state`` (all: None)."""
    return {"engine": engine, "source": BARRIER_SOURCE, "pg": rows[0]["pg"], "verdict": "absent",
            "ranks": sorted((label(r) for r in absent), key=rank_key),
            "majority_ranks": sorted((label(r) for r in came), key=rank_key), "seq": None, "op": None,
            "ts": min((r["ts"] for r in rows if r["ts"] is not None), default=None), "ts_basis": "read",
            "detail": detail[:1].upper() + detail[1:] + ".",
            "evidence": [{"file": r["path"], "line": r["line"]} for r in sorted(rows, key=lambda r: r["line"] or 0)
                         if state is None or r["state"] == state][:12]}


def _unranked_dead_facts(store: Store, engines: list[str]) -> dict[str, list[dict]]:
    """Per engine, the NCCL RAS lines on dead, unresponsive or missing processes that name no rank."""
    out: dict[str, list[dict]] = defaultdict(list)
    for f in store.query("SELECT engine, path, line, message, json_extract_string(attrs, '$.relation') AS rel, "
                         "json_extract_string(attrs, '$.reason') AS reason FROM events "
                         "WHERE list_contains(?, engine) AND kind = 'nccl_ras' AND rank = '' "
                         "AND json_extract_string(attrs, '$.relation') IN ('dead', 'unresponsive', 'missing') "
                         "ORDER BY engine, line", [engines]):
        out[f["engine"]].append(f)
    return out


def _unranked_dead(engine: str, facts: list[dict]) -> list[dict[str, Any]]:
    """Processes NCCL RAS reports dead or unresponsive whose rank nothing in the report gives: still a
    fact (ranks [] names the whole group as suspect scope), with host, pid and GPU in the detail."""
    if not facts:
        return []
    said = "; ".join(f["reason"] or f["message"] for f in facts)
    return [{"engine": engine, "source": "nccl_ras", "pg": "the job's processes", "verdict": "absent", "ranks": [],
             "majority_ranks": [], "seq": None, "op": None, "ts": None, "ts_basis": "read",
             "detail": f"NCCL RAS reports {len(facts)} job process(es) dead, unreachable or missing, whose rank "
                       f"the report does not print: {said}. The other ranks wait for them in every collective they share: "
                       f"map the host and pid (or GPU) to its rank to name the one that stopped first.",
             "evidence": [{"file": f["path"], "line": f["line"]} for f in facts][:12]}]


# -- from the view to the matcher ----------------------------------------------------------------------


def _matcher_rows(view: list[dict]) -> tuple[list[CollectiveRow], dict[tuple, list[dict]]]:
    """CollectiveRows of the view's rows, and per (source, pg, rank) its rows (for evidence lines)."""
    rows: list[CollectiveRow] = []
    where: dict[tuple, list[dict]] = defaultdict(list)
    for r in _name_unnamed(view):
        rank = r["rank"] if r["rank"] is not None else r.get("pg_rank")
        attrs = json.loads(r["attrs"]) if r.get("attrs") else {}
        state = "timeout" if r["state"] == "timed_out" else r["state"]
        rows.append(CollectiveRow(
            r["source"], rank, r["pg"], r["seq"], r["op"] or "", state, r["ts"], int(r["records"] or 1),
            pg_desc=r.get("pg_desc"), pg_ranks=tuple(r["pg_ranks"]) if r.get("pg_ranks") else None,
            seq_kind=r.get("seq_kind") or "collective",
            input_sizes=tuple(tuple(x) for x in attrs.get("input_sizes", ())),
            output_sizes=tuple(tuple(x) for x in attrs.get("output_sizes", ())),
            input_dtypes=tuple(attrs.get("input_dtypes", ())), output_dtypes=tuple(attrs.get("output_dtypes", ())),
            inferred=bool(attrs.get("inferred")), reason=attrs.get("reason"), line=r["line"]))
        where[(r["source"], r["pg"], rank)].append(r)
    return rows, where


def _name_unnamed(view: list[dict]) -> list[dict]:
    """Torch lines that name no group ('?'): one group per op and per cluster of nearby SeqNums, since the
    counters of different groups are unrelated (usually far apart).  Clusters of different ops that share
    a SeqNum are one group: ranks at the same SeqNum in different ops are the op mismatch of one group
    (torch < 2.3 names no group at all), not two groups whose counters happen to be equal."""
    out = [r for r in view if r["pg"] != "?"]
    unnamed = [r for r in view if r["pg"] == "?"]
    by_op: dict[str, list[dict]] = defaultdict(list)
    for r in unnamed:
        by_op[(r["op"] or "").upper()].append(r)
    clusters: list[tuple[str, set[int], list[dict]]] = []          # (op, latest SeqNums, rows)
    for op, rs in by_op.items():
        latest: dict[Any, int] = {}
        for r in rs:
            k = r["rank"] if r["rank"] is not None else r.get("pg_rank")
            latest[k] = max(latest.get(k, r["seq"] or 0), r["seq"] or 0)
        cluster, prev, k = {}, None, 0
        for seq in sorted(set(latest.values())):
            if prev is not None and seq - prev > UNNAMED_GROUP_MAX_GAP:
                k += 1
            cluster[seq], prev = k, seq
        def key(r: dict) -> Any:
            return r["rank"] if r["rank"] is not None else r.get("pg_rank")

        for c in sorted(set(cluster.values())):
            seqs = {q for q, kk in cluster.items() if kk == c}
            clusters.append((op, seqs, [r for r in rs if cluster[latest[key(r)]] == c]))
    for name, members in _merge_on_shared_seq(clusters):
        out.extend({**r, "pg": name, "pg_desc": None} for r in members)
    return out


def _merge_on_shared_seq(clusters: list[tuple[str, set[int], list[dict]]]) -> list[tuple[str, list[dict]]]:
    """Per-op clusters merged when they share a SeqNum; each named '?<ops>#<n>'."""
    groups: list[tuple[set[str], set[int], list[dict]]] = []
    for op, seqs, members in clusters:
        hit = [g for g in groups if g[1] & seqs]
        ops, qs, rows = {op}, set(seqs), list(members)
        for g in hit:
            groups.remove(g)
            ops |= g[0]
            qs |= g[1]
            rows += g[2]
        groups.append((ops, qs, rows))
    count: dict[str, int] = defaultdict(int)
    named = []
    for ops, _, rows in groups:
        key = "/".join(sorted(ops))
        named.append((f"?{key}#{count[key]}", rows))
        count[key] += 1
    return named


def _torch_members(rows: list[CollectiveRow], ctx: EngineContext) -> dict[tuple[str, str], range]:
    """A torch group's members when the engine's world size covers it (tensor x pipeline parallel size):
    the lines list no members, but a group whose ranks all lie below the world size spans it."""
    if not ctx.world:
        return {}
    ranks: dict[tuple[str, str], set[int]] = defaultdict(set)
    for r in rows:
        if r.source == "torch_nccl" and r.rank is not None:
            ranks[(r.source, r.pg)].add(r.rank)
    return {k: range(ctx.world) for k, rs in ranks.items() if rs and max(rs) < ctx.world}


def _fr_clock(row: dict | None) -> str:
    """One sentence on the clock the Flight Recorder times are on (ingest/collective_clock.py set it), from
    the engine's max(clock_offset_s) and max(note) over its Flight Recorder sources (None: no such source)."""
    off = row["off"] if row else None
    note = next((n for n in ((row or {}).get("note") or "").split("; ") if n.startswith("times ")), "")
    if off:
        return f" Flight Recorder {note or f'times aligned to the log clock by {off:+.0f} s'}."
    return " Flight Recorder times are UTC as the dumps record them (epoch ns); no log line of this engine " \
           "aligns them to the log clock."


# -- from the matcher to collective_verdicts -------------------------------------------------------------


def _verdict_rows(engine: str, verdicts: list[Verdict], where: dict[tuple, list[dict]], ctx: EngineContext,
                  clock: str) -> list[dict[str, Any]]:
    agree = {(v.source, v.pg): v for v in verdicts if v.kind == VerdictKind.AGREE}
    out = []
    for v in verdicts:
        detail = v.detail
        if v.kind == VerdictKind.ABSENT and (v.source, v.pg) in agree and ", " in detail:
            # what the others agree on, then who never said it
            said = agree[(v.source, v.pg)].detail.split(": they agree")[0]
            said = re.sub(r"\b(?:all (\d+)|both) ranks are at", lambda m: f"the {m.group(1) or 2} ranks that reported "
                          f"are at", said)
            detail = f"{said}; {detail.split(', ', 1)[1]}"
        if v.pg.startswith("?"):
            detail = detail.replace(f"in pg {v.pg}", f"in {UNNAMED} ({v.pg[1:].split('#')[0] or 'op unknown'})")
        detail = detail[:1].upper() + detail[1:] + "."
        if v.kind in WHY:
            detail += " " + WHY[v.kind]
        named = {**{o.rank: ctx.label(o.rank) for o in v.odd}, **{r: ctx.label(r) for r in v.reference_ranks}}
        mapped = [f"rank {r} = {lbl}" for r, lbl in sorted(named.items()) if lbl != f"rank{r}"]
        if mapped:
            detail += f" ({'; '.join(mapped[:16])}.)"
        if v.source == "flight_recorder":
            detail += clock
        if v.source == "nccl_ras":
            detail += _communicator_ranks(v, where)
        kind = {VerdictKind.UNDECIDED: "undecided" if v.reference_ranks else "split"}.get(v.kind, v.kind.value)
        out.append({
            "engine": engine, "source": v.source, "pg": _pg_label(v), "verdict": kind,
            "ranks": sorted((ctx.label(o.rank) for o in v.odd), key=rank_key),
            "majority_ranks": sorted((ctx.label(r) for r in v.reference_ranks), key=rank_key),
            "seq": v.reference_seq, "op": v.reference_op, "ts": v.ts, "ts_basis": "read", "detail": detail,
            "evidence": _evidence(v, where)})
    return _merge_counters(out)


def _merge_counters(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One desync row per (source, group): a RAS communicator compares each collective type's count on its
    own, but a rank odd in any of them is odd in the communicator."""
    out: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["source"], r["pg"])
        if r["verdict"] != "desync" or key not in seen:
            out.append(r)
            if r["verdict"] == "desync":
                seen[key] = r
            continue
        first = seen[key]
        first["ranks"] = sorted(set(first["ranks"]) | set(r["ranks"]), key=rank_key)
        first["majority_ranks"] = sorted(set(first["majority_ranks"]) - set(first["ranks"]), key=rank_key)
        more = r["detail"].replace(" " + WHY[VerdictKind.DESYNC], "").split("), ", 1)[-1]
        first["detail"] = first["detail"].replace(" " + WHY[VerdictKind.DESYNC], "") + \
            f" {more[:1].upper()}{more[1:]} {WHY[VerdictKind.DESYNC]}"
        first["evidence"] = (first["evidence"] + r["evidence"])[:12]
        first["ts"] = min((t for t in (first["ts"], r["ts"]) if t is not None), default=None)
    return out


def _communicator_ranks(v: Verdict, where: dict[tuple, list[dict]]) -> str:
    """A RAS rank is the rank in its communicator: global only when the communicator spans every GPU."""
    attrs = [json.loads(r["attrs"]) for (src, pg, _), rs in where.items() if src == v.source and pg == v.pg
             for r in rs if r.get("attrs")]
    job = next((a["job_gpus"] for a in attrs if a.get("job_gpus")), None)
    if job and v.ranks and len(v.ranks) < job:
        return (f" The ranks are the communicator's own (it spans {len(v.ranks)} of the job's {job} GPUs), not "
                f"global ranks: the GPU, process and node on each rank's line say which process it is.")
    return ""


def _pg_label(v: Verdict) -> str:
    return group_label(v.source, v.pg, v.pg_desc)


def group_label(source: str, pg: str, desc: str | None) -> str:
    """How verdicts, findings and the report name a group: '1(tp:0)' as torch prints it, 'communicator
    <hash> (#0-0)' for NCCL RAS."""
    if pg.startswith("?"):
        return UNNAMED
    if source == "nccl_ras":
        return "the job's processes" if pg == JOB_PG else f"communicator {pg}" + (f" ({desc})" if desc else "")
    if desc and desc != pg and not pg.endswith(f"({desc})"):
        return f"{pg}({desc})"
    return pg


def _evidence(v: Verdict, where: dict[tuple, list[dict]]) -> list[dict[str, Any]]:
    """The odd ranks' records at the collective they stand at, then a few of the reference's."""
    def at(rank: int, seq: int | None) -> dict | None:
        rs = where.get((v.source, v.pg, rank), [])
        hit = [r for r in rs if seq is not None and r["seq"] == seq] or rs[-1:]
        return {"file": hit[0]["path"], "line": hit[0]["line"]} if hit else None

    ev = [at(o.rank, o.seq) for o in v.odd]
    ev += [at(r, v.reference_seq) for r in v.reference_ranks[:4]]
    return [e for e in ev if e is not None][:12]


__all__ = ["bare_pg", "group_label", "judge_engine", "judge_engines", "rebuild"]
