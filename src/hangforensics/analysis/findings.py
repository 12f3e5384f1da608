"""Running the rules and building the findings document (interface.md §3)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import duckdb

from .. import __version__
from ..errors import RuleError
from ..ranks import rank_key
from ..store import Store
from .rules import SEVERITY_RANK, Rule, load_rules


def iso(ts: datetime | None) -> str | None:
    if ts is None:
        return None
    return ts.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ts.microsecond // 1000:03d}" if ts.microsecond else "")


def run_rules(store: Store, rules: list[Rule] | None = None, engines: list[str] | None = None) -> list[dict[str, Any]]:
    """Rebuild the derived models, run every rule, store and return the findings."""
    rules = rules if rules is not None else load_rules()
    if engines is None:
        engines = [r["engine"] for r in store.query("SELECT DISTINCT engine FROM sources ORDER BY 1")]
    # the models: imported here so that importing the findings module stays cheap
    from . import collectives, probes, signatures, snapshots, stackclasses, stalls

    with store.transaction():
        probes.rebuild(store, engines)
        stalls.rebuild(store, engines)
        collectives.rebuild(store, engines)
        stackclasses.rebuild(store, engines)
        snapshots.rebuild(store, engines)          # after the rank classes: it confirms or adds desyncs
        signatures.rebuild(store, engines)
        found: list[dict[str, Any]] = []
        for rule in rules:
            try:
                rows = store.query(f"SELECT * FROM ({rule.sql}) WHERE list_contains(?, engine)", [engines])
            except duckdb.Error as e:
                raise RuleError(f"rule {rule.id} failed: {str(e).splitlines()[0]}") from e
            for r in rows:
                evidence = [ev for ev in (r.get("evidence") or []) if ev and ev.get("file")]
                seen = set()
                uniq = []
                for ev in evidence:
                    k = (ev["file"], ev.get("line"))
                    if k not in seen:
                        seen.add(k)
                        uniq.append({"file": ev["file"], "line": ev.get("line")})
                found.append({
                    "rule": rule.id, "severity": rule.severity, "engine": r["engine"],
                    "ranks": sorted(set(r.get("ranks") or []), key=rank_key),
                    "ts": r.get("ts"), "ts_end": r.get("ts_end"),
                    "title": r.get("title") or rule.title, "detail": r.get("detail") or "",
                    "evidence": uniq, "signature": r.get("signature"),
                    "count": int(r.get("count") or 1), "ts_basis": r.get("ts_basis") or "read",
                })
        found.sort(key=lambda f: (f["engine"], SEVERITY_RANK[f["severity"]], f["ts"] or datetime.max, f["rule"]))
        store.con.execute("DELETE FROM findings WHERE list_contains(?, engine)", [engines])
        base = store.scalar("SELECT COALESCE(MAX(finding_id), 0) FROM findings")
        store.append("findings", [dict(f, finding_id=base + i + 1) for i, f in enumerate(found)])
        # the findings now reflect the engines' data as of this transaction
        store.con.execute("UPDATE engine_state SET analyzed_version = data_version WHERE list_contains(?, engine)",
                          [engines])
    return found


def stored_findings(store: Store) -> list[dict[str, Any]]:
    rows = store.query("SELECT * EXCLUDE (finding_id) FROM findings ORDER BY engine, finding_id")
    return rows


def document(findings: list[dict[str, Any]]) -> dict[str, Any]:
    """The findings document: JSON-ready, ts as ISO-8601 without zone."""
    out = []
    for f in findings:
        out.append({
            "rule": f["rule"], "severity": f["severity"], "engine": f["engine"], "ranks": list(f["ranks"] or []),
            "ts": iso(f["ts"]), "ts_end": iso(f["ts_end"]), "title": f["title"], "detail": f["detail"],
            "evidence": [{"file": e["file"], "line": e["line"]} for e in (f["evidence"] or [])],
            "signature": f.get("signature"), "count": int(f.get("count") or 1),
            "ts_basis": f.get("ts_basis") or "read",
        })
    return {"tool": "hangforensics", "version": __version__, "findings": out}
