"""Incidents: the findings of one engine grouped by stall episode (one run of the server).

An incident is one engine and one segment (a run between two server starts)
that has findings: its onset (the stall's last progress, else its first
finding), the findings that explain it, and how it ended (a restart, a
watchdog kill, or the end of the evidence).  Incident ids are stable across
scans (engine and onset), so a nightly scan can say which incidents are new.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import datetime
from typing import Any

from ...store import Store
from ..progress.segments import Segment, runs_all, segment_of
from ..rules import SEVERITY_RANK


def incident_id(engine: str, onset: datetime | None, segment: int) -> str:
    key = f"{engine}|{onset.isoformat() if onset else segment}"
    return f"{engine}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def build(store: Store, engine: str, scan_id: int) -> list[dict[str, Any]]:
    """The incidents of one engine (as stored before this scan, for first_seen_scan)."""
    return build_many(store, [engine], scan_id)[engine]


def build_many(store: Store, engines: list[str], scan_id: int) -> dict[str, list[dict[str, Any]]]:
    """The incidents of each of ``engines``: four queries whatever their number, then each engine's
    grouping over its own rows."""
    if not engines:
        return {}
    runs = runs_all(store, engines)
    # finding_id breaks ties of ts as the storage order did when each engine was read on its own
    findings: dict[str, list[dict]] = defaultdict(list)
    for r in store.query("SELECT * FROM findings WHERE list_contains(?, engine) "
                         "ORDER BY engine, ts NULLS LAST, finding_id", [engines]):
        findings[r["engine"]].append(r)
    stalls: dict[str, dict[int, dict]] = defaultdict(dict)
    for r in store.query("SELECT * FROM stalls WHERE list_contains(?, engine)", [engines]):
        stalls[r["engine"]][r["segment"]] = r
    known: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in store.query("SELECT engine, incident_id, first_seen_scan FROM incidents "
                         "WHERE list_contains(?, engine)", [engines]):
        known[r["engine"]][r["incident_id"]] = r
    return {e: _build(e, runs[e], findings.get(e, []), stalls.get(e, {}), known.get(e, {}), scan_id)
            for e in engines}


def _build(engine: str, segs: list[Segment], findings: list[dict], stalls: dict[int, dict],
           known: dict[str, dict], scan_id: int) -> list[dict[str, Any]]:
    if not findings:
        return []
    groups: dict[int, list[dict]] = {}
    for f in findings:
        seg = segment_of(segs, f["ts"])
        # findings without a time (an absent rank) belong with the stall they explain
        if f["ts"] is None and stalls:
            seg = max(stalls)
        groups.setdefault(seg, []).append(f)
    out = []
    for seg, fs in sorted(groups.items()):
        stall = stalls.get(seg)
        onset = stall["onset"] if stall else min((f["ts"] for f in fs if f["ts"]), default=None)
        nxt = next((s for s in segs if s.index == seg + 1), None)
        rules = sorted({f["rule"] for f in fs})
        hard_kill = any(f["rule"] == "watchdog-kill" and "took the engine down" in (f["title"] or "") for f in fs)
        if nxt is not None and nxt.start is not None:
            ended, how = nxt.start, "restart"
        elif hard_kill:
            ended = max((f["ts"] for f in fs if f["rule"] == "watchdog-kill" and f["ts"]), default=None)
            how = "watchdog kill"
        else:
            ended, how = (stall["evidence_end"] if stall else max((f["ts"] for f in fs if f["ts"]), default=None),
                          "evidence ends")
        severity = min((f["severity"] for f in fs), key=lambda s: SEVERITY_RANK[s])
        kind = "stall" if stall else ("leak" if "idle-memory-leak" in rules else rules[0])
        iid = incident_id(engine, onset, seg)
        health = next((f for f in fs if f["rule"] == "health-check-blind"), None)
        out.append({
            "incident_id": iid, "engine": engine, "segment": seg, "kind": kind, "onset": onset, "ended": ended,
            "end_reason": how, "severity": severity, "rules": rules,
            "signatures": sorted({f["signature"] for f in fs if f["signature"]}),
            "n_findings": len(fs), "watchdog_kills": sum(f["count"] or 1 for f in fs if f["rule"] == "watchdog-kill"),
            "health_blind_s": (health["ts_end"] - health["ts"]).total_seconds() if health else None,
            "ranks": sorted({r for f in fs if f["rule"] in ("stall-onset", "all-ranks-frozen") for r in f["ranks"]}),
            "first_seen_scan": known[iid]["first_seen_scan"] if iid in known else scan_id,
            "last_seen_scan": scan_id,
            "title": next((f["title"] for f in fs if f["severity"] == severity), fs[0]["title"]),
        })
    return out


def rebuild(store: Store, engines: list[str], scan_id: int) -> list[dict[str, Any]]:
    """Recompute the incidents of ``engines``; incidents keep the scan that first saw them."""
    unique = list(dict.fromkeys(engines))
    built = build_many(store, unique, scan_id)           # reads the stored incidents before they go
    if unique:
        store.con.execute("DELETE FROM incidents WHERE list_contains(?, engine)", [unique])
    store.append("incidents", [r for e in unique for r in built[e]])
    return [r for e in engines for r in built[e]]       # an engine listed twice was built twice, alike
