"""Repeated snapshots of a capture bundle: stuck, spinning or slow, per rank (interface.md §6).

``hangforensics capture --repeat N`` dumps every rank N times and reads /proc before each round
(state, main-thread ``wchan``, CPU time).  The rank classes keep only each rank's latest dump; this
model compares a rank's rounds with each other:

* **stuck**: the same main-thread frames, the same state and ``wchan``, CPU time flat: it did not move
  between snapshots, so it has been where it is since at least the first of them;
* **driver_wait**: stuck in state ``D`` (uninterruptible sleep: a driver, a GPU ioctl);
* **spinning**: the same frames while CPU time rises (often state ``R``): busy in one place, not blocked;
* **moved**: the frames or the kernel wait changed, or it ran in between: slow, not stuck.

One snapshot still says something (state ``S`` with a ``wchan`` is a rank blocked in the kernel,
``R`` one on a CPU) but cannot tell stuck from slow.

Repeated snapshots also settle the case one snapshot cannot (reference/incidents.md §2): ranks
blocked, unchanged, in the per-iteration broadcast while another rank is never seen in it are waiting
for an iteration that never comes: a desync, and that rank is the odd one out.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ...ranks import rank_key
from ...store import Store
from .snapshot_model import RankSeries, Snap
from .snapshot_text import RoundDesyncs, fill_details
from .stackclasses import RankStack, collective_of, main_stacks_of, path_of

FLAT_CPU_S = 0.05          # CPU seconds a blocked rank may still show between two rounds (clock ticks, signals)
FLAT_CPU_RATE = 0.02       # ... plus this share of the seconds between them (a helper thread's wake-ups)
SPIN_RATE = 0.5            # without dumps to compare: CPU seconds per second that make a rank spinning
INTERNAL = ("changed", "rounds")     # row keys the model uses and the table does not keep


def _cpu(f: dict[str, Any] | None, main: bool) -> float | None:
    if f is None:
        return None
    if main:
        return f["main_cpu_s"]
    if f["cpu_user_s"] is None or f["cpu_system_s"] is None:
        return None
    return f["cpu_user_s"] + f["cpu_system_s"]


def compare(a: Snap, b: Snap) -> dict[str, Any]:
    """How rank snapshot ``b`` differs from the earlier ``a``: kind unchanged / spinning / moved, and why."""
    fa, fb = a.facts, b.facts
    frames_same = None if a.stack is None or b.stack is None else a.frames == b.frames
    facts_same = None if not fa or not fb else (fa["state"], fa["wchan"]) == (fb["state"], fb["wchan"])
    main = fa is not None and fb is not None and fa["main_cpu_s"] is not None and fb["main_cpu_s"] is not None
    ca, cb = _cpu(fa, main), _cpu(fb, main)
    ta = (fa or {}).get("taken") or a.ts
    tb = (fb or {}).get("taken") or b.ts
    dt = max((tb - ta).total_seconds(), 0.0) if ta and tb else 0.0
    delta = None if ca is None or cb is None else max(cb - ca, 0.0)
    flat = delta is None or delta <= FLAT_CPU_S + FLAT_CPU_RATE * dt
    rate = delta / dt if delta is not None and dt > 0 else 0.0
    both_r = bool(fa and fb and fa["state"] == "R" and fb["state"] == "R")
    if frames_same is not False and facts_same is not False and flat and (frames_same or facts_same):
        kind = "unchanged"
    elif not flat and (frames_same or frames_same is None and (both_r or rate >= SPIN_RATE)):
        kind = "spinning"            # in one place while using CPU: a loop, not a wait
    else:
        kind = "moved"
    changed = []
    if frames_same is False:
        changed.append(f"frames {_leaf(a.frames)} → {_leaf(b.frames)}" if _leaf(a.frames) != _leaf(b.frames)
                       else "frames")
    if facts_same is False:
        if fa["wchan"] != fb["wchan"]:
            changed.append(f"wchan {fa['wchan'] or 'none'} → {fb['wchan'] or 'none'}")
        if fa["state"] != fb["state"]:
            changed.append(f"state {fa['state']} → {fb['state']}")
    if not flat and kind == "moved":
        changed.append(f"CPU +{delta:.2f} s")
    return {"kind": kind, "frames_same": frames_same, "delta": delta, "dt": dt, "rate": rate,
            "cpu_basis": "main thread" if main else "process", "changed": changed}


def _leaf(frames: tuple[str, ...] | None) -> str:
    return frames[-1] if frames else "?"


def classify(series: RankSeries) -> dict[str, Any]:
    """A ``snapshot_facts`` row (without its group sentence) for one rank's snapshots, oldest first."""
    snaps = series.snaps
    last = snaps[-1]
    lf = last.facts or {}
    stack = next((s.stack for s in reversed(snaps) if s.stack is not None), None)
    coll, site = collective_of(stack) if stack is not None else (None, None)
    row: dict[str, Any] = {
        "capture_id": series.capture_id, "rank": series.rank, "pid": series.pid, "snapshots": len(snaps),
        "first_ts": snaps[0].ts, "last_ts": last.ts, "state": lf.get("state"), "wchan": lf.get("wchan"),
        "syscall": lf.get("syscall"), "frame": _leaf(tuple(path_of(stack))) if stack is not None else None,
        "collective": coll, "call_site": site, "dump_id": stack.dump_id if stack is not None else None,
        "unchanged": 1, "since": last.ts, "span_s": 0.0, "cpu_delta_s": None, "cpu_basis": None,
        "frames_same": None, "changed": [], "rounds": [last.round],
    }
    if lf.get("gone"):
        return {**row, "status": "gone"}
    pairs = [compare(a, b) for a, b in zip(snaps, snaps[1:], strict=False)]
    if not pairs:
        single = {"D": "driver_wait", "R": "running"}.get(lf.get("state") or "")
        blocked = lf.get("state") == "S" and lf.get("wchan") or not lf and stack is not None and \
            stack.state == "idle"
        return {**row, "status": single or ("blocked" if blocked else "unknown")}
    kind = pairs[-1]["kind"]
    if kind == "moved":
        return {**row, "status": "moved", "changed": pairs[-1]["changed"], "cpu_delta_s": pairs[-1]["delta"],
                "cpu_basis": pairs[-1]["cpu_basis"], "frames_same": pairs[-1]["frames_same"]}
    run = 0
    while run < len(pairs) and pairs[-1 - run]["kind"] == kind:
        run += 1
    first = snaps[-1 - run]
    deltas = [p["delta"] for p in pairs[-run:] if p["delta"] is not None]
    status = "spinning" if kind == "spinning" else ("driver_wait" if lf.get("state") == "D" else "stuck")
    return {**row, "status": status, "unchanged": run + 1, "since": first.ts,
            "rounds": [s.round for s in snaps[-1 - run:]],
            "span_s": (last.ts - first.ts).total_seconds() if last.ts and first.ts else None,
            "cpu_delta_s": sum(deltas) if deltas else None, "cpu_basis": pairs[-1]["cpu_basis"],
            "frames_same": all(p["frames_same"] for p in pairs[-run:]) if all(
                p["frames_same"] is not None for p in pairs[-run:]) else None}


# -- reading the store -------------------------------------------------------------------------------

def series_of(store: Store, engine: str) -> list[RankSeries]:
    """Every rank of every capture bundle of ``engine``, with its snapshots round by round."""
    return series_of_all(store, [engine]).get(engine, [])


def series_of_all(store: Store, engines: list[str]) -> dict[str, list[RankSeries]]:
    """:func:`series_of` of every engine of ``engines`` in a fixed number of queries (engines without a
    capture bundle are missing)."""
    procs: dict[str, dict[tuple, dict]] = defaultdict(dict)
    for r in store.query("SELECT engine, capture_id, pid, rank, label FROM capture_processes "
                         "WHERE list_contains(?, engine) AND rank IS NOT NULL", [engines]):
        procs[r["engine"]][(r["capture_id"], r["pid"])] = r
    if not procs:
        return {}
    bundled = list(procs)
    facts: dict[str, list[dict]] = defaultdict(list)
    for f in store.query(
            """SELECT * FROM process_facts WHERE list_contains(?, engine) AND capture_id IS NOT NULL
               QUALIFY row_number() OVER (PARTITION BY engine, capture_id, round, pid
                                          ORDER BY source = 'proc' DESC) = 1""", [bundled]):
        facts[f["engine"]].append(f)
    dumps: dict[str, list[dict]] = defaultdict(list)
    for d in store.query("SELECT engine, capture_id, round, pid, file, end_ts, round_started FROM capture_dumps "
                         "WHERE list_contains(?, engine) AND ok", [bundled]):
        dumps[d.pop("engine")].append(d)
    stacks = main_stacks_of(store, bundled)
    return {e: _series(procs[e], facts[e], dumps[e], stacks.get(e, [])) for e in bundled}


def _series(procs: dict[tuple, dict], facts: list[dict], dumps: list[dict],
            main: list[RankStack]) -> list[RankSeries]:
    """One engine's rank series from its capture processes, /proc facts, dumps and main stacks."""
    stacks = {s.path: s for s in main}
    snaps: dict[tuple[str, int], dict[int, Snap]] = defaultdict(dict)
    for f in facts:
        if (f["capture_id"], f["pid"]) in procs:
            snaps[(f["capture_id"], f["pid"])][f["round"]] = Snap(f["round"], f["taken"], facts=f)
    for d in dumps:
        key = (d["capture_id"], d["pid"])
        if key not in procs:
            continue
        snap = snaps[key].setdefault(d["round"], Snap(d["round"], d["end_ts"]))
        snap.stack = stacks.get(d["file"])
        snap.ts = d["end_ts"] or snap.ts           # the dump's own moment, when there is one
    out = []
    for (cid, pid), by_round in snaps.items():
        out.append(RankSeries(cid, pid, procs[(cid, pid)]["rank"], [by_round[k] for k in sorted(by_round)]))
    return sorted(out, key=lambda s: (s.capture_id, rank_key(s.rank)))


def _evidence(series: RankSeries, row: dict[str, Any]) -> list[dict[str, Any]]:
    ev = []
    for s in series.snaps[-max(row["unchanged"], 1):][:4]:
        if s.facts is not None:
            ev.append({"file": s.facts["path"], "line": s.facts["line"]})
        if s.stack is not None:
            ev.append({"file": s.stack.path, "line": s.stack.line})
    return ev


def build(store: Store, engine: str) -> tuple[list[dict[str, Any]], list[RankSeries]]:
    """``snapshot_facts`` rows of ``engine`` (group sentences filled) and the series they come from."""
    return build_from(engine, series_of(store, engine))


def build_from(engine: str, all_series: list[RankSeries]) -> tuple[list[dict[str, Any]], list[RankSeries]]:
    """:func:`build` of ``engine`` from its series, already read."""
    rows = []
    for series in all_series:
        row = classify(series)
        row.update(engine=engine, evidence=_evidence(series, row))
        rows.append(row)

    fill_details(rows)
    return rows, all_series


def rebuild(store: Store, engines: list[str]) -> None:
    """Refill ``snapshot_facts``; add or confirm ``desyncs`` that repeated snapshots show."""

    store.con.execute("DELETE FROM snapshot_facts WHERE list_contains(?, engine)", [engines])
    by_engine = series_of_all(store, engines)
    if not by_engine:
        return
    built = {e: build_from(e, by_engine[e]) for e in dict.fromkeys(engines) if e in by_engine}
    store.append("snapshot_facts", [{k: v for k, v in r.items() if k not in INTERNAL}
                                    for rows, _ in built.values() for r in rows])
    desyncs = RoundDesyncs.read(store, [e for e, (rows, _) in built.items() if rows])
    for e, (rows, all_series) in built.items():
        desyncs.judge(e, rows, all_series)
    desyncs.write(store)


def snapshot_status(store: Store, engine: str) -> dict[str, str]:
    """dump_id -> what the snapshots say of the rank whose latest dump it is (for the signatures' 'blocked')."""
    return snapshot_status_of(store, [engine]).get(engine, {})


def snapshot_status_of(store: Store, engines: list[str]) -> dict[str, dict[str, str]]:
    """:func:`snapshot_status` of every engine of ``engines`` (one query): engine -> dump_id -> status."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for r in store.query("SELECT engine, dump_id, status FROM snapshot_facts "
                         "WHERE list_contains(?, engine) AND dump_id IS NOT NULL", [engines]):
        out[r["engine"]][r["dump_id"]] = r["status"]
    return dict(out)
