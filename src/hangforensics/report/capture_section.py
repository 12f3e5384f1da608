"""The report's view of capture bundles: what was captured and failed, what the snapshots show, and the
process state / ``wchan`` beside each rank of the stack-class tree (templates ``_capture.html.j2`` and
``report.html.j2``)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from ..analysis.stacks.snapshot_text import STATE_WORDS, facts_in_words
from ..ranks import rank_key
from ..store import Store

MAX_VERDICT_FACTS = 4
BASIS_WORDS = {"manifest": "dated by the capture manifest (when py-spy read each stack)",
               "mtime": "dated by the dump files' modification times (they carry no time of their own)",
               "record": "dated by the log records that embed them"}


def capture_sections(store: Store, engine: str) -> list[dict[str, Any]]:
    """Per capture bundle of ``engine``: host, command, rounds, what could not be captured, snapshot facts."""
    out = []
    for c in store.query("SELECT * FROM captures WHERE engine = ? ORDER BY started, capture_id", [engine]):
        cid = c["capture_id"]
        rounds = store.query(
            """SELECT round, min(round_started) AS started, count(*) AS dumps, count(*) FILTER (WHERE ok) AS ok,
                      epoch(max(start_ts) - min(start_ts)) AS spread_s
               FROM capture_dumps WHERE engine = ? AND capture_id = ? GROUP BY round ORDER BY round""",
            [engine, cid])
        failures = store.query("SELECT what, reason, file, skipped FROM capture_failures WHERE engine = ? AND "
                               "capture_id = ? ORDER BY skipped, line", [engine, cid])
        facts = store.query("SELECT * FROM snapshot_facts WHERE engine = ? AND capture_id = ?", [engine, cid])
        tools = [t for t in json.loads(c["tools"] or "[]") if isinstance(t, dict)]
        out.append({
            "capture_id": cid, "host": c["host"], "command": " ".join(c["command"] or []),
            "started": c["started"], "finished": c["finished"], "rounds": rounds, "repeat": c["repeat"],
            "interval_s": c["interval_s"], "native": c["native"],
            "tools": ", ".join(f"{t.get('name')} {t.get('version') or '(not found)'}" for t in tools),
            "failures": [f for f in failures if not f["skipped"]], "skipped": [f for f in failures if f["skipped"]],
            "sentences": facts_in_words(facts),
            "ranks": sorted(({**r, "state_words": STATE_WORDS.get(r["state"] or "", r["state"])} for r in facts),
                            key=lambda r: rank_key(r["rank"])),
        })
    return out


def with_snapshots(sentences: list[str], store: Store, engine: str) -> list[str]:
    """The verdict, with what a capture's snapshots show (state, wait, stuck since): the log may show no
    stall, and a bundle still says where the ranks were and whether they moved."""
    rows = store.query("SELECT * FROM snapshot_facts WHERE engine = ? AND status <> 'unknown'", [engine])
    if not rows:
        return sentences
    said = [f"The capture's snapshots: {s}" for s in facts_in_words(rows)][:MAX_VERDICT_FACTS]
    if not sentences or (len(sentences) == 1 and sentences[0].startswith("No hang found")):
        stuck = any(r["status"] in ("stuck", "driver_wait") and r["unchanged"] >= 2 for r in rows)
        lead = (f"No stall in {engine}'s log, but the processes were not moving when captured."
                if stuck else f"No stall in {engine}'s log; the capture shows where the ranks were.")
        return [lead] + said
    return sentences + said


def proc_by_rank(store: Store, engine: str) -> dict[tuple[int, str], dict[str, Any]]:
    """(rank-class capture, rank) -> the /proc facts of the round its dump was taken in, and its snapshot status."""
    rows = store.query(
        """SELECT rc.capture, rc.rank, f.state, f.wchan, f.syscall, sf.status, sf.unchanged, sf.detail
           FROM rank_collectives rc
           JOIN capture_dumps d ON d.engine = rc.engine AND d.file = rc.path
           LEFT JOIN (SELECT * FROM process_facts WHERE engine = ?
                      QUALIFY row_number() OVER (PARTITION BY capture_id, round, pid
                                                 ORDER BY source = 'proc' DESC) = 1) f
             ON f.capture_id = d.capture_id AND f.round = d.round AND f.pid = d.pid
           LEFT JOIN snapshot_facts sf ON sf.engine = rc.engine AND sf.capture_id = d.capture_id AND sf.pid = d.pid
           WHERE rc.engine = ?""", [engine, engine])
    return {(r["capture"], r["rank"]): r for r in rows}


def annotate_stacks(store: Store, engine: str, captures: list[dict[str, Any]]) -> None:
    """Add to the stack-class tree of each capture: how its dumps were dated, and per rank of each leaf and
    class its process state and kernel wait (``procs``)."""
    procs = proc_by_rank(store, engine)
    basis = defaultdict(set)
    for r in store.query("""SELECT DISTINCT rc.capture, s.ts_basis FROM rank_collectives rc
                            JOIN stacks s ON s.dump_id = rc.dump_id WHERE rc.engine = ?""", [engine]):
        basis[r["capture"]].add(r["ts_basis"] or "record")
    for cap in captures:
        kinds = sorted(basis.get(cap["capture"], ()))
        cap["dated"] = "; ".join(BASIS_WORDS.get(k, k) for k in kinds)

        def of(ranks: list[str], cap_i: int = cap["capture"]) -> list[dict[str, Any]]:
            found = [dict(procs[(cap_i, r)], rank=r) for r in sorted(ranks, key=rank_key) if (cap_i, r) in procs]
            return [p for p in found if p["state"] or p["wchan"] or p["status"]]

        def walk(node: dict[str, Any], of=of) -> None:
            node["procs"] = of(node["ranks"]) if not node["children"] else []
            for child in node["children"]:
                walk(child)

        for n in cap["tree"]:
            walk(n)
        for c in cap["classes"]:
            c["procs"] = of(c["ranks"])
