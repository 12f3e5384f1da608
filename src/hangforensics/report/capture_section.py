"""The report's view of capture bundles: what was captured and failed, what the snapshots show, and the
process state / ``wchan`` beside each rank of the stack-class tree (templates ``_capture.html.j2`` and
``report.html.j2``)."""

from __future__ import annotations

import json
from typing import Any

from ..analysis.stacks.snapshot_text import STATE_WORDS, facts_in_words
from ..ranks import rank_key
from .data import ReportData

MAX_VERDICT_FACTS = 4
BASIS_WORDS = {"manifest": "dated by the capture manifest (when py-spy read each stack)",
               "mtime": "dated by the dump files' modification times (they carry no time of their own)",
               "record": "dated by the log records that embed them"}


def capture_sections(data: ReportData, engine: str) -> list[dict[str, Any]]:
    """Per capture bundle of ``engine``: host, command, rounds, what could not be captured, snapshot facts."""
    out = []
    for c in data.captures.get(engine, []):
        cid = c["capture_id"]
        rounds = data.rounds.get((engine, cid), [])
        failures = data.failures.get((engine, cid), [])
        facts = [f for f in data.snapshot_facts.get(engine, []) if f["capture_id"] == cid]
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


def with_snapshots(sentences: list[str], data: ReportData, engine: str) -> list[str]:
    """The verdict, with what a capture's snapshots show (state, wait, stuck since): the log may show no
    stall, and a bundle still says where the ranks were and whether they moved."""
    # status <> 'unknown' in SQL: a NULL status is not kept either
    rows = [r for r in data.snapshot_facts.get(engine, []) if r["status"] is not None and r["status"] != "unknown"]
    if not rows:
        return sentences
    said = [f"The capture's snapshots: {s}" for s in facts_in_words(rows)][:MAX_VERDICT_FACTS]
    if not sentences or (len(sentences) == 1 and sentences[0].startswith("No hang found")):
        stuck = any(r["status"] in ("stuck", "driver_wait") and r["unchanged"] >= 2 for r in rows)
        lead = (f"No stall in {engine}'s log, but the processes were not moving when captured."
                if stuck else f"No stall in {engine}'s log; the capture shows where the ranks were.")
        return [lead] + said
    return sentences + said


def annotate_stacks(data: ReportData, engine: str, captures: list[dict[str, Any]]) -> None:
    """Add to the stack-class tree of each capture: how its dumps were dated, and per rank of each leaf and
    class its process state and kernel wait (``procs``: the /proc facts of the round its dump was taken in,
    and its snapshot status)."""
    procs = data.procs.get(engine, {})
    basis = data.basis.get(engine, {})
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
