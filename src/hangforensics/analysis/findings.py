"""Running the rules and building the findings document (interface.md §3)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import duckdb

from .. import __version__
from ..errors import RuleError
from ..ranks import rank_key
from ..redaction import redact_payloads
from ..store import Store
from ..store.database import beside
from .rules import SEVERITY_RANK, Rule, load_rules


def iso(ts: datetime | None) -> str | None:
    if ts is None:
        return None
    return ts.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ts.microsecond // 1000:03d}" if ts.microsecond else "")


def run_rules(store: Store, rules: list[Rule] | None = None, engines: list[str] | None = None,
              show_payloads: bool = False) -> list[dict[str, Any]]:
    """Rebuild the derived models, run every rule, store and return the findings, and summarise every
    engine (``engine_summaries``).  Request payloads in titles, details and summaries are redacted
    unless ``show_payloads`` (the evidence views keep what the files say)."""
    rules = rules if rules is not None else load_rules()
    if engines is None:
        engines = [r["engine"] for r in store.query("SELECT DISTINCT engine FROM sources ORDER BY 1")]
    collectives, probes, stalls, signatures, snapshots, stackclasses, summaries = load_models()

    read: dict[str, Any] = {}                   # what the later steps read of the evidence, read beside
    main_stacks: dict[str, Any] = {}
    logged: list[Any] = []                      # ... and what the signatures read of it

    def stacks_and_collectives(other: Store) -> None:
        with other.transaction(), _read_once(other, tuple(v for v in READ_ONCE if v in BESIDE_ONCE)):
            collectives.rebuild(other, engines)
            main_stacks.update(stackclasses.main_stacks_of(other, engines))
            stackclasses.rebuild(other, engines, main_stacks)
            snapshots.rebuild(other, engines)      # after the rank classes: it confirms or adds desyncs
            read.update(summaries.gather_evidence(other, engines))
            logged.append(signatures.read_logged(other, engines))

    with _read_once(store, _here_once()):
        # Two chains of models that read only the evidence, on two connections at once: the progress models
        # here, the collectives' and the stacks' beside them, and what the summaries read of the evidence
        # (DuckDB runs one chain's queries while the other's Python judges).  Each commits its own tables; the
        # findings and the engines' analyzed version are written after both, so an analysis that stops
        # half-way is done again in full by the next one.
        with beside(store, stacks_and_collectives), store.transaction():
            probes.rebuild(store, engines)      # (the vLLM stalls read the probes)
            stalls.rebuild(store, engines)
        with store.transaction():
            found = _judge(store, rules, engines, show_payloads, signatures, summaries, read, main_stacks, logged[0])
    return found


def _judge(store: Store, rules: list[Rule], engines: list[str], show_payloads: bool, signatures: Any,
           summaries: Any, read: dict[str, Any], main_stacks: dict[str, Any], logged: Any) -> list[dict[str, Any]]:
    """The signatures, every rule, the findings stored and the engines summarised (``run_rules``, after the
    models the rules read; ``read``, ``main_stacks``, ``logged``: what they read of the evidence, read already)."""
    # the rules that read only what every connection sees run beside the signatures and the other rules
    there = [rule for rule in rules if _may_run_beside(rule)]
    beside_rows: list[tuple[Rule, list[dict[str, Any]]]] = []
    with beside(store, lambda other: beside_rows.extend(_all_rule_rows(other, there, engines))):
        signatures.rebuild(store, engines, main_stacks, logged)
        here_rows = _all_rule_rows(store, [rule for rule in rules if rule not in there], engines)
        # what the summaries read besides the findings, while the rules beside still run (they read the
        # models and the signatures, written by now)
        gathered = summaries.gather_all(store, engines, read, stored_findings=False)
    rows_of = {id(rule): rows for rule, rows in here_rows + beside_rows}
    found = [_finding(rule, r, show_payloads) for rule in rules for r in rows_of[id(rule)]]
    # (what they say breaks the ties: two undated findings of one rule are numbered the same way on any
    # number of DuckDB threads)
    found.sort(key=lambda f: (f["engine"], SEVERITY_RANK[f["severity"]], f["ts"] or datetime.max, f["rule"],
                              f["title"], f["ranks"], f["detail"]))
    store.con.execute("DELETE FROM findings WHERE list_contains(?, engine)", [engines])
    base = store.scalar("SELECT COALESCE(MAX(finding_id), 0) FROM findings")
    stored = [dict(f, finding_id=base + i + 1) for i, f in enumerate(found)]
    store.append("findings", stored)
    summaries.rebuild(store, engines, show_payloads, read, gathered, stored)
    # the findings now reflect the engines' data as of this transaction
    store.con.execute("UPDATE engine_state SET analyzed_version = data_version WHERE list_contains(?, engine)",
                      [engines])
    store.con.execute("INSERT OR REPLACE INTO meta VALUES ('payloads', ?)", ["shown" if show_payloads else "redacted"])
    return found


def load_models() -> tuple[Any, ...]:
    """The modules of the models ``run_rules`` builds (imported on first use, so that importing the findings
    module stays cheap): collectives, probes, stalls, signatures, snapshots, stackclasses, summaries."""
    from .collectives import collectives
    from .progress import probes, stalls
    from .stacks import signatures, snapshots, stackclasses
    from .summaries import summaries

    return collectives, probes, stalls, signatures, snapshots, stackclasses, summaries


# Views of loaded evidence that several passes and rules read (each read computed the view afresh: the
# watchdog firings join events to themselves and to progress, some 40 ms on a 300 MB fleet): an analysis
# computes them once into a temporary table of the same name, which every statement of the analysis (and
# every view built on them) then reads in place of the view.  Only views of the evidence tables, which an
# analysis does not write.
READ_ONCE = ("watchdog_fires", "collectives")
# ... on the connection whose models read them several times: the collectives on the second one (the
# collectives' model, the summaries' evidence); here the signatures read that view once, as the view
BESIDE_ONCE = ("collectives",)


def _here_once() -> tuple[str, ...]:
    return tuple(v for v in READ_ONCE if v not in BESIDE_ONCE)


@contextlib.contextmanager
def _read_once(store: Store, views: tuple[str, ...]) -> Iterator[None]:
    """``views`` materialised as temporary tables of their own names (a temporary table shadows a view of the
    database) while the block runs; dropped after it."""
    from .progress.segments import drop_temp

    for v in views:
        store.con.execute(f"CREATE OR REPLACE TEMP TABLE {v} AS SELECT * FROM main.{v}")
    try:
        yield
    finally:
        drop_temp(store, *views)


def _all_rule_rows(store: Store, rules: list[Rule], engines: list[str]) -> list[tuple[Rule, list[dict[str, Any]]]]:
    """Every rule's rows, from one statement: DuckDB plans and runs the rules side by side (measured on the
    mixed fleet: 0.19 -> 0.14 s; each row keeps its rule's values and types, a column another rule has is
    NULL as a missing one reads).  When it fails, the rules run one by one, so that the failing one is named."""
    if not rules:
        return []
    union = " UNION ALL BY NAME ".join(
        f"(SELECT {k} AS _hf_rule, * FROM ({rule.sql}) WHERE list_contains($1, engine))" for k, rule in enumerate(rules))
    try:
        rows = store.query(union, [engines])
    except duckdb.Error:
        return [(rule, _rule_rows(store, rule, engines)) for rule in rules]
    by_rule: list[list[dict[str, Any]]] = [[] for _ in rules]
    for r in rows:
        by_rule[r.pop("_hf_rule")].append(r)
    return list(zip(rules, by_rule, strict=True))


def _may_run_beside(rule: Rule) -> bool:
    """Whether ``rule`` reads nothing a rule run on a second connection cannot (through the views it reads
    either): the views read once into this connection's temporary tables, and the model written in its
    transaction just before the rules."""
    return not (reads(rule.sql) & {*_here_once(), "signature_matches"})


def reads(sql: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """The tables and views ``sql`` reads, and those the views it reads read (a name its own CTEs take counts
    too: an over-estimate, never a miss: a CTE may shadow the table it reads)."""
    from ..store.views import VIEWS

    out: set[str] = set()
    for name in {n.lower() for n in re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", sql, re.I)} - seen:
        out.add(name)
        if name in VIEWS:
            out |= reads(VIEWS[name], seen | {name})
    return out


def _rule_rows(store: Store, rule: Rule, engines: list[str]) -> list[dict[str, Any]]:
    try:
        return store.query(f"SELECT * FROM ({rule.sql}) WHERE list_contains(?, engine)", [engines])
    except duckdb.Error as e:
        raise RuleError(f"rule {rule.id} failed: {str(e).splitlines()[0]}") from e


def _finding(rule: Rule, r: dict[str, Any], show_payloads: bool) -> dict[str, Any]:
    """One finding from a rule's row: evidence deduplicated, defaults for count and ts_basis, request
    payloads quoted in title or detail redacted."""
    seen: set[tuple] = set()
    uniq = []
    for ev in r.get("evidence") or []:
        if ev and ev.get("file") and (ev["file"], ev.get("line")) not in seen:
            seen.add((ev["file"], ev.get("line")))
            uniq.append({"file": ev["file"], "line": ev.get("line")})
    title, detail = r.get("title") or rule.title, r.get("detail") or ""
    if not show_payloads:
        title, detail = redact_payloads(title), redact_payloads(detail)
    return {
        "rule": rule.id, "severity": rule.severity, "engine": r["engine"],
        # (an unlabelled dump's "" is no rank: the finding is then not rank-specific)
        "ranks": sorted({x for x in r.get("ranks") or [] if x}, key=rank_key), "ts": r.get("ts"), "ts_end": r.get("ts_end"),
        "title": title, "detail": detail, "evidence": uniq, "signature": r.get("signature"),
        "count": int(r.get("count") or 1), "ts_basis": r.get("ts_basis") or "read",
    }


def payloads_mode(store: Store) -> str | None:
    """How the stored findings were written: 'shown' or 'redacted' (None before any analyze)."""
    return store.scalar("SELECT value FROM meta WHERE key = 'payloads'")


def stored_summaries(store: Store, engines: list[str] | None = None) -> list[dict[str, Any]]:
    rows = store.query("SELECT * FROM engine_summaries ORDER BY engine")
    rows = [r for r in rows if engines is None or r["engine"] in engines]
    for r in rows:
        r["files"] = dict(r["files"] or {})
    return rows


def stored_findings(store: Store) -> list[dict[str, Any]]:
    rows = store.query("SELECT * EXCLUDE (finding_id) FROM findings ORDER BY engine, finding_id")
    return rows


def document(findings: list[dict[str, Any]], engines: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The findings document: JSON-ready, ts as ISO-8601 without zone; ``engines`` are engine_summaries
    rows (one ``engines[]`` entry each)."""
    from .summaries.summaries import engine_json

    out = []
    for f in findings:
        out.append({
            "rule": f["rule"], "severity": f["severity"], "engine": f["engine"], "ranks": list(f["ranks"] or []),
            "ts": iso(f["ts"]), "ts_end": iso(f["ts_end"]), "title": f["title"], "detail": f["detail"],
            "evidence": [{"file": e["file"], "line": e["line"]} for e in (f["evidence"] or [])],
            "signature": f.get("signature"), "count": int(f.get("count") or 1),
            "ts_basis": f.get("ts_basis") or "read",
        })
    return {"tool": "hangforensics", "version": __version__, "findings": out,
            "engines": [engine_json(e) for e in engines or []]}
