"""The collective-timeline panel of the report: per process group, ranks x sequence number.

Each panel is one (source, process group) the matcher compared: a row per rank (every member the
evidence knows, so a silent one shows as an empty row), a column per sequence number (the last few
around where the group stands, plus wherever an odd rank stands), a cell per collective the rank's
records show, coloured by its state.  The ranks the verdict names are highlighted.  Plain HTML and CSS:
the report runs no script and loads nothing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..analysis.collectives.collectives import EngineContext, group_label
from ..parsers.collectives.collective_rows import BARRIER_SOURCE
from ..ranks import rank_key
from .data import ReportData

LAST_N = 8              # sequence numbers shown per panel around the group's newest
MAX_COLUMNS = 14
MAX_PANELS = 12
MAX_RANKS = 64
MARKS = {"completed": "c", "started": "s", "scheduled": "q", "timeout": "t", "timed_out": "t", "launched": "l"}
NOUN = {"torch_nccl": "ProcessGroupNCCL timeouts", "flight_recorder": "Flight Recorder dumps",
        "nccl_ras": "NCCL RAS operation counts", "fr_trace": "torch's fr_trace analyzer output",
        "desync_report": "the desync report (TORCH_NCCL_DESYNC_DEBUG)",
        "mismatch_check": "torch's collective check (TORCH_DISTRIBUTED_DEBUG=DETAIL)",
        "monitored_barrier": "torch's monitored barrier"}
# the one column of a monitored barrier (its records number nothing: arrived or not)
UNNUMBERED = -1


def collective_panels(data: ReportData, engine: str) -> list[dict[str, Any]]:
    """The panels of one engine, the groups with a verdict naming ranks first."""
    rows = data.collectives.get(engine, [])
    if not rows:
        return []
    verdicts = data.verdicts.get(engine, [])
    by_group: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        by_group[(r["source"], group_label(r["source"], r["pg"], r["pg_desc"]))].append(r)
    ctx = data.contexts[engine]
    panels = []
    for (source, pg), rs in by_group.items():
        vs = [v for v in verdicts if v["source"] == source and v["pg"] == pg]
        panels.append(_panel(source, pg, rs, vs, ctx))
    panels.sort(key=lambda p: (not p["odd"], p["source"], p["pg"]))
    return panels[:MAX_PANELS]


def _panel(source: str, pg: str, rs: list[dict], vs: list[dict], ctx: EngineContext) -> dict[str, Any]:
    odd = {lbl for v in vs if v["verdict"] in ("desync", "absent") for lbl in (v["ranks"] or [])}
    absent = {lbl for v in vs if v["verdict"] == "absent" for lbl in (v["ranks"] or [])}
    cells: dict[int, dict[int, dict]] = defaultdict(dict)
    members: set[int] = set()
    # a monitored barrier has one column, reached or not; elsewhere a record without a number (a member RAS
    # reports missing) has no cell: its row shows it absent
    unnumbered = source == BARRIER_SOURCE
    for r in rs:
        rank = r["rank"] if r["rank"] is not None else r["pg_rank"]
        if rank is None:
            continue
        members.update(r["pg_ranks"] or [])
        if unnumbered and r["state"]:
            members.add(rank)
            cells[rank][UNNUMBERED] = r
            continue
        if r["seq"] is None:
            continue
        members.add(rank)
        cells[rank][r["seq"]] = r
    top = max((s for c in cells.values() for s in c), default=None)
    if top is None:
        cols: list[int] = []
    else:
        window = sorted({s for c in cells.values() for s in c if s > top - LAST_N})
        stands = {max(c) for c in cells.values() if c}             # where each rank got to
        cols = sorted(set(window) | stands)[-MAX_COLUMNS:]
    table = []
    for rank in sorted(members, key=lambda m: rank_key(ctx.label(m)))[:MAX_RANKS]:
        lbl = ctx.label(rank)
        row_cells = []
        for seq in cols:
            r = cells.get(rank, {}).get(seq)
            state = (r["state"] or "unknown") if r else "none"
            at = "" if seq == UNNUMBERED else f" #{seq}"
            what = f"{lbl} {r['op'] or ''}{at} {state}".replace("  ", " ") if r else f"{lbl}: no record of{at or ' it'}"
            row_cells.append({"state": state, "mark": MARKS.get(state, "?" if r else ""), "title": what})
        table.append({"label": lbl, "odd": lbl in odd,
                      "absent": lbl in absent or not cells.get(rank) or cells[rank].get(UNNUMBERED, {}).get("state") == "absent",
                      "cells": row_cells})
    main = next((v for v in vs if v["verdict"] in ("desync", "absent")), vs[0] if vs else None)
    kind = rs[0]["seq_kind"] or "collective"
    return {"source": source, "pg": pg, "noun": NOUN.get(source, source), "odd": sorted(odd, key=rank_key),
            "verdict": main["verdict"] if main else "none", "detail": main["detail"] if main else "",
            "columns": [{"seq": c, "label": (rs[0]["op"] or "record") if c == UNNUMBERED else f"#{c}"} for c in cols],
            "rows": table,
            "counter": "operations launched" if source == "nccl_ras" else "the barrier, reached or not"
            if unnumbered else
            ("SeqNum" if source == "torch_nccl" else f"{kind} sequence id")}
