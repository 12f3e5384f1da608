"""Incidents: the findings of one engine grouped by stall episode (one run of the server).

An incident is one engine and one segment (a run between two server starts)
that has findings: its onset (the stall's last progress, else its first
finding), the findings that explain it, and how it ended (a restart, a
watchdog kill, or the end of the evidence).  Incident ids are stable across
scans (engine and onset), so a nightly scan can say which incidents are new.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from ...store import Store
from ..progress.segments import segment_of, segments_of
from ..rules import SEVERITY_RANK


def incident_id(engine: str, onset: datetime | None, segment: int) -> str:
    key = f"{engine}|{onset.isoformat() if onset else segment}"
    return f"{engine}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def build(store: Store, engine: str, scan_id: int) -> list[dict[str, Any]]:
    segs = segments_of(store, engine)
    findings = store.query("SELECT * FROM findings WHERE engine = ? ORDER BY ts NULLS LAST", [engine])
    if not findings:
        return []
    stalls = {r["segment"]: r for r in store.query("SELECT * FROM stalls WHERE engine = ?", [engine])}
    groups: dict[int, list[dict]] = {}
    for f in findings:
        seg = segment_of(segs, f["ts"])
        # findings without a time (an absent rank) belong with the stall they explain
        if f["ts"] is None and stalls:
            seg = max(stalls)
        groups.setdefault(seg, []).append(f)
    known = {r["incident_id"]: r for r in store.query(
        "SELECT incident_id, first_seen_scan FROM incidents WHERE engine = ?", [engine])}
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
    rows = []
    for e in engines:
        new = build(store, e, scan_id)
        store.con.execute("DELETE FROM incidents WHERE engine = ?", [e])
        store.append("incidents", new)
        rows += new
    return rows
