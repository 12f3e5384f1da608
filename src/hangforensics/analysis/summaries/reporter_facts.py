"""What a reporter's own summary says, for the engine summary (interface.md §3 "Never silent", ``engines[].facts``):
stacks abbreviated by hand, tables (ranks -> values, metrics over time), a timeline made from their logs, and a
``/metrics`` excerpt.  These are facts and words of the verdict only: a person's table is a claim about the
evidence, not the evidence, so no rule fires on it (hand stacks are the exception: they take part in rank
classes and desync like any stack, and the findings say they are a person's summary)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ...store import Store
from ..stacks.stackclasses import HAND_FORMAT, compact_ranks

# Gauges and counters of a /metrics excerpt that say whether work waits (vLLM, SGLang spellings).
RUNNING = re.compile(r"(?:^|:)(?:num_requests_running|num_running_reqs)$")
WAITING = re.compile(r"(?:^|:)(?:num_requests_waiting|num_queue_reqs|num_requests_swapped)$")
PROGRESS = re.compile(r"(?:^|:)(?:generation_tokens_total|generation_tokens|request_success_total|"
                      r"num_requests_total|prompt_tokens_total)$")


@dataclass
class ReporterFacts:
    hand_ranks: list[str] = field(default_factory=list)          # ranks whose stack a person summarised
    hand_labels: list[str] = field(default_factory=list)         # the labels as written ('TP1-3')
    rank_tables: list[list[dict[str, Any]]] = field(default_factory=list)     # rows of each ranks -> values table
    time_tables: list[list[dict[str, Any]]] = field(default_factory=list)     # rows of each metrics-over-time table
    timeline: list[dict[str, Any]] = field(default_factory=list)              # entries of a reporter's timeline
    metrics: list[dict[str, Any]] = field(default_factory=list)               # Prometheus samples

    def __bool__(self) -> bool:
        return bool(self.hand_ranks or self.rank_tables or self.time_tables or self.timeline or self.metrics)


def gather(store: Store, engine: str) -> ReporterFacts:
    return gather_all(store, [engine])[engine]


def gather_all(store: Store, engines: list[str]) -> dict[str, ReporterFacts]:
    """``gather`` of every engine of ``engines`` in two queries."""
    hand: dict[str, list[dict[str, Any]]] = {}
    # the stored rows (no times needed), so that the ranks of one line keep their written order
    for r in store.query("SELECT engine, rank, process_title FROM t_stacks WHERE list_contains(?, engine) "
                         "AND format = ? ORDER BY engine, path, line, rowid", [engines, HAND_FORMAT]):
        hand.setdefault(r["engine"], []).append(r)
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in store.query("SELECT engine, path, line, kind, message, attrs FROM events WHERE list_contains(?, engine) "
                         "AND kind IN ('reporter_table', 'reporter_timeline', 'metrics_sample') "
                         "ORDER BY engine, path, line", [engines]):
        rows.setdefault(r["engine"], []).append(r)
    return {e: _facts(hand.get(e, []), rows.get(e, [])) for e in engines}


def _facts(hand: list[dict[str, Any]], rows: list[dict[str, Any]]) -> ReporterFacts:
    """One engine's reporter facts from its hand-summarised stacks and its reporter events (by file, line)."""
    rf = ReporterFacts()
    rf.hand_ranks = list(dict.fromkeys(r["rank"] for r in hand if r["rank"]))
    rf.hand_labels = list(dict.fromkeys((r["process_title"] or "").removesuffix(" (summarised by hand)") for r in hand))
    table: list[dict[str, Any]] = []
    last: tuple[str, int] | None = None
    for r in rows:
        attrs = json.loads(r["attrs"]) if r["attrs"] else {}
        if r["kind"] == "reporter_timeline":
            rf.timeline.append({**attrs, "message": r["message"]})
        elif r["kind"] == "metrics_sample":
            rf.metrics.append(attrs)
        else:
            if "header" in attrs or last is None or last[0] != r["path"] or r["line"] != last[1] + 1:
                table = []
                (rf.rank_tables if attrs.get("table") == "ranks" else rf.time_tables).append(table)
            table.append(attrs)
            last = (r["path"], r["line"])
    return rf


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:g}"


def facts(rf: ReporterFacts) -> list[str]:
    out: list[str] = []
    if rf.hand_ranks:
        out.append(f"Stacks of {compact_ranks(rf.hand_ranks)} summarised by hand ({', '.join(rf.hand_labels[:4])}): "
                   f"a person's few function names per rank, not a capture.")
    for t in rf.rank_tables:
        cols = list(dict.fromkeys(k for row in t for k in row.get("values", {})))
        what = ", ".join(cols[:3]) or "values"
        cells = "; ".join(f"{row.get('label')} " + ", ".join(_num(v) for v in row.get("values", {}).values())
                          for row in t[:6])
        out.append(f"A reporter's table of {what} per rank: {cells}.")
    for t in rf.time_tables:
        cols = list(dict.fromkeys(k for row in t for k in row.get("values", {})))
        trend = ", ".join(f"{c} {_num(t[0]['values'].get(c))} -> {_num(t[-1]['values'].get(c))}" for c in cols[:4])
        out.append(f"A reporter's table over time ({len(t)} rows, {t[0].get('time')} to {t[-1].get('time')}): {trend}.")
    if rf.timeline:
        said = "; ".join(f"{e['time']} {e['text']}" if "time" in e else f"... {e.get('gap')} ..."
                         for e in rf.timeline[:6])
        out.append(f"A reporter's timeline (their summary of the logs, not log lines): {_clip(said, 400)}.")
    if rf.metrics:
        out.append(metrics_words(rf)[0].upper() + metrics_words(rf)[1:] + ".")
    return out


def metrics_words(rf: ReporterFacts) -> str:
    """What a /metrics excerpt shows: the gauges of waiting work, else that it has none."""
    names = list(dict.fromkeys(m["metric"] for m in rf.metrics))
    running = [m for m in rf.metrics if RUNNING.search(m["metric"])]
    waiting = [m for m in rf.metrics if WAITING.search(m["metric"])]
    progress = [m for m in rf.metrics if PROGRESS.search(m["metric"])]
    head = f"a /metrics excerpt (Prometheus text, {len(rf.metrics)} samples of {len(names)} series)"
    if running or waiting:
        said = ", ".join(f"{m['metric']} {_num(m['value'])}" for m in (running + waiting + progress)[:5])
        return (f"{head}: {said}; one scrape cannot tell stuck from busy (a counter such as "
                f"generation_tokens_total standing still across two scrapes with requests running would)")
    counts = [m for m in rf.metrics if m["metric"].endswith("_count")]
    served = f", {counts[0]['metric']} {_num(counts[0]['value'])}" if counts else ""
    return f"{head}{served}: no running or waiting gauge in it, so it shows no work pending"


def quiet_words(rf: ReporterFacts) -> str | None:
    """The verdict when no rule fired and the engine's evidence is a reporter's summary."""
    parts: list[str] = []
    if rf.time_tables:
        t = rf.time_tables[0]
        parts.append(f"a reporter's table of metrics over time ({len(t)} rows, {t[0].get('time')} to "
                     f"{t[-1].get('time')}), not log lines: no rule judges a person's table")
    if rf.rank_tables:
        cols = list(dict.fromkeys(k for row in rf.rank_tables[0] for k in row.get("values", {})))
        labels = ", ".join(str(r.get("label")) for r in rf.rank_tables[0][:4])
        parts.append(f"a reporter's table of {', '.join(cols[:2]) or 'values'} per rank ({labels}), not a capture")
    if rf.timeline:
        timed = [e for e in rf.timeline if "time" in e]
        parts.append(f"a reporter's timeline ({len(timed)} entries, {timed[0]['time']} to {timed[-1]['time']}), "
                     f"their summary of the logs rather than the log lines" if timed else "a reporter's timeline")
    if rf.metrics:
        parts.append(metrics_words(rf))
    return "; ".join(parts) if parts else None


def capture_next(rf: ReporterFacts) -> list[str]:
    out: list[str] = []
    if rf.hand_ranks:
        out.append("the py-spy dumps themselves (py-spy dump --native of every rank, whole), not a summary: a "
                   "summary leaves out the threads and frames that would confirm where each rank waits")
    if rf.rank_tables or rf.time_tables or rf.timeline:
        out.append("the log lines the table or timeline was made from, unedited and with their prefixes (times, "
                   "ranks), so that each fact can be read where it was printed")
    if rf.metrics:
        out.append("two /metrics scrapes a minute apart during the hang (num_requests_running / waiting and "
                   "generation_tokens_total), or the server log's own stats lines")
    return out


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + "…"
