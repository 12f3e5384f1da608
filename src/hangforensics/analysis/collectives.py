"""Collective records compared per process group: who is behind, who is elsewhere, who is missing.

The ``collectives`` view holds one row per (engine, source, rank, process group, SeqNum, op): torch
ProcessGroupNCCL timeouts, Flight Recorder entries, NCCL RAS counts.  Within one group (never across
groups: SeqNums are per group) each rank's latest collective is taken; the majority of ranks is the
reference.  Ranks at another SeqNum or op are a desync (the minority is named); when every reporting
rank agrees, the hang is elsewhere: a member of the group that never reported is the rank the others
waited for (named only when the evidence knows the group's members).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from ..ranks import label_global_rank, rank_key
from ..store import Store

# A group whose name the lines do not print: its ranks are compared only within this many SeqNums
# (different groups' counters are unrelated and usually far apart).
UNNAMED_GROUP_MAX_GAP = 3


def rebuild(store: Store, engines: list[str]) -> None:
    store.con.execute("DELETE FROM collective_verdicts WHERE list_contains(?, engine)", [engines])
    rows = store.query(
        "SELECT * FROM collectives WHERE list_contains(?, engine) AND seq IS NOT NULL "
        "AND coalesce(rank, pg_rank) IS NOT NULL ORDER BY engine, source, pg, rank, seq", [engines])
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in rows:
        # an unnamed group ('?'): at least keep different ops apart
        pg = r["pg"] if r["pg"] != "?" else f"?{r['op'] or ''}"
        groups[(r["engine"], r["source"], pg)].append(r)
    out: list[dict[str, Any]] = []
    for (engine, source, pg), recs in groups.items():
        ctx = _EngineContext.of(store, engine)
        verdict = compare_group(engine, source, pg, recs, ctx)
        if verdict is not None:
            out.append(verdict)
    store.append("collective_verdicts", out)


class _EngineContext:
    """What the rest of an engine's evidence says about its ranks: SGLang labels and the world size."""

    def __init__(self, labels: list[str], world: int | None, pure_tp: bool) -> None:
        self.labels, self.world, self.pure_tp = labels, world, pure_tp

    @classmethod
    def of(cls, store: Store, engine: str) -> _EngineContext:
        labels = [r["rank"] for r in store.query(
            "SELECT DISTINCT rank FROM batches WHERE engine = ? UNION SELECT DISTINCT rank FROM events "
            "WHERE engine = ? AND rank <> '' AND rank NOT LIKE 'rank%' AND kind NOT LIKE 'vllm%'",
            [engine, engine]) if r["rank"]]
        f = store.query("SELECT tp_size, dp_size, enable_dp_attention FROM engine_facts WHERE engine = ?", [engine])
        pp = store.scalar("SELECT max(TRY_CAST(json_extract_string(attrs, '$.pp_size') AS INTEGER)) FROM events "
                          "WHERE engine = ? AND kind = 'server_args'", [engine]) or 1
        tp = f[0]["tp_size"] if f else None
        world = tp * pp if tp else None
        return cls(labels, world, bool(tp) and pp == 1)

    def label(self, rank: int) -> str:
        if self.pure_tp and self.world and rank < self.world:
            return f"TP{rank}"
        return label_global_rank(rank, self.labels)


def compare_group(engine: str, source: str, pg: str, recs: list[dict], ctx: _EngineContext) -> dict | None:
    """The verdict on one process group's records (None when fewer than two ranks speak and no member
    is known to be missing)."""
    latest: dict[int, dict] = {}
    for r in recs:
        key = r["rank"] if r["rank"] is not None else r["pg_rank"]
        if key not in latest or (r["seq"], r["ts"] or datetime.min) > (latest[key]["seq"], latest[key]["ts"] or datetime.min):
            latest[key] = r
    votes = Counter((r["seq"], (r["op"] or "").upper()) for r in latest.values())
    (ref_seq, ref_op), n_ref = votes.most_common(1)[0]
    tie = len(votes) > 1 and list(votes.values()).count(n_ref) > 1
    odd = {k: r for k, r in latest.items() if (r["seq"], (r["op"] or "").upper()) != (ref_seq, ref_op)}
    if pg.startswith("?"):
        odd = {k: r for k, r in odd.items() if abs(r["seq"] - ref_seq) <= UNNAMED_GROUP_MAX_GAP}
    base = {"engine": engine, "source": source, "pg": pg, "seq": ref_seq, "op": ref_op or None,
            "majority_ranks": [ctx.label(k) for k in sorted(latest) if k not in odd]}
    where = f"process group {pg}" if not pg.startswith("?") else "an unnamed process group"
    if odd and not tie and len(latest) >= 2:
        return {**base, "verdict": "desync", **_desync(where, latest, odd, ref_seq, ref_op, ctx)}
    members = _members(recs, ctx)
    absent = sorted(members - set(latest)) if members else []
    # a missing member among agreeing peers is "the rank they waited for" only when it is a small minority
    # (half a group missing is evidence missing: one node's stderr, not a stopped rank)
    if absent and len(absent) <= max(1, len(members) // 4) and len(latest) >= 2 and set(latest) <= members:
        labels = [ctx.label(a) for a in absent]
        said = ", ".join(ctx.label(k) for k in sorted(latest))
        ev = [{"file": r["path"], "line": r["line"]} for _, r in sorted(latest.items())][:8]
        what = _what(source, ref_seq, ref_op)
        return {**base, "verdict": "absent", "ranks": labels, "ts": None, "ts_basis": "read",
                "detail": f"In {where} ({len(members)} members), {said} all {what}; "
                          f"{', '.join(labels)} never did. The peers were waiting for "
                          f"{'it' if len(labels) == 1 else 'them'}: the absent rank stopped first (its stop "
                          f"time is not in the evidence).", "evidence": ev}
    if len(latest) < 2:
        return None
    ts = min((r["ts"] for r in latest.values() if r["ts"]), default=None)
    detail = (f"In {where}, the {len(latest)} ranks that reported all {_what(source, ref_seq, ref_op)}: they "
              f"agree, so the collective waits on something outside these reports"
              + (" (no rank is known to be missing)." if not members else "."))
    if tie:
        detail = (f"In {where}, the reporting ranks split evenly between "
                  f"{' and '.join(f'SeqNum {s} {o}'.strip() for s, o in votes)}: no majority to name a minority.")
    return {**base, "verdict": "split" if tie else "agree", "ranks": [], "ts": ts, "ts_basis": "read",
            "detail": detail, "evidence": [{"file": r["path"], "line": r["line"]} for r in list(latest.values())[:4]]}


def _desync(where: str, latest: dict[int, dict], odd: dict[int, dict], ref_seq: int, ref_op: str,
            ctx: _EngineContext) -> dict[str, Any]:
    parts = []
    for k, r in sorted(odd.items()):
        delta = r["seq"] - ref_seq
        how = ("behind by " + str(-delta) if delta < 0 else "ahead by " + str(delta)) + " collective(s)" \
            if delta else f"in {r['op']} instead of {ref_op}"
        parts.append(f"{ctx.label(k)} at SeqNum={r['seq']} {r['op'] or ''}".rstrip() + f" ({how})")
    majority = [k for k in latest if k not in odd]
    ts = min((r["ts"] for r in odd.values() if r["ts"]), default=None)
    ev = [{"file": r["path"], "line": r["line"]} for _, r in sorted(odd.items())]
    ev += [{"file": latest[k]["path"], "line": latest[k]["line"]} for k in sorted(majority)[:3]]
    return {"ranks": sorted((ctx.label(k) for k in odd), key=rank_key), "ts": ts, "ts_basis": "read",
            "evidence": ev,
            "detail": f"In {where}, {len(majority)} of {len(latest)} reporting ranks are at SeqNum={ref_seq} "
                      f"{ref_op or ''}".rstrip() + f"; {'; '.join(parts)}. Ranks of one group must issue the "
                      f"same collectives in the same order: the minority is out of step."}


def _members(recs: list[dict], ctx: _EngineContext) -> set[int]:
    """The group's members when the evidence knows them: a listed member set, else the engine's world
    (tensor x pipeline parallel size) for a group that spans it."""
    listed = [r.get("pg_ranks") for r in recs if r.get("pg_ranks")]
    if listed:
        return set(listed[0])
    if ctx.world:
        ranks = {r["rank"] for r in recs if r["rank"] is not None}
        if ranks and max(ranks) < ctx.world:
            return set(range(ctx.world))
    return set()


def _what(source: str, seq: int, op: str | None) -> str:
    op = f" ({op})" if op else ""
    if source == "torch_nccl":
        return f"timed out waiting in collective SeqNum={seq}{op}"
    if source == "nccl_ras":
        return f"launched {seq} operations{op}"
    return f"reached collective #{seq}{op}"

