"""What repeated snapshots say, in words, and the desyncs only they can show (see ``snapshots``).

Ranks with the same fact are one sentence: ``TP0-3: same main-thread frames (…), same wchan
(unix_stream_read_generic), state S, CPU time flat, unchanged across 3 snapshots since 10:02:11``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from ...ranks import rank_key
from ...store import Store
from .snapshot_model import RankSeries, per_iteration
from .stackclasses import collective_of, compact_ranks, path_of

STATE_WORDS = {"S": "S (sleeping)", "D": "D (uninterruptible: a driver wait)", "R": "R (on a CPU)",
               "T": "T (stopped)", "t": "t (traced)", "Z": "Z (zombie)"}


def _hms(t: Any) -> str:
    return t.strftime("%H:%M:%S") if t is not None else "?"


def _group_key(r: dict[str, Any]) -> tuple:
    if r["status"] == "moved":
        return (r["capture_id"], "moved", tuple(r["changed"]))
    # the round the run began in, not its clock second: one round dumps rank after rank, and a round that
    # straddles a second boundary is still one moment for the sentence
    return (r["capture_id"], r["status"], r["frame"], r["wchan"], r["state"], r["unchanged"], r["frames_same"],
            (r.get("rounds") or [None])[0])


def sentence(rows: list[dict[str, Any]]) -> str:
    """One fact about a group of ranks that the snapshots show alike."""
    r = rows[0]
    who = compact_ranks([x["rank"] for x in rows])
    st = r["status"]
    wait = f"wchan {r['wchan']}" if r["wchan"] else "no kernel wait"
    if st == "gone":
        return f"{who} exited during the capture."
    if st == "moved":
        what = ", ".join(r["changed"]) or "its snapshots differ"
        return f"{who} moved between snapshots ({what}): slow, not stuck."
    if st in ("blocked", "running", "driver_wait", "unknown") and r["unchanged"] <= 1:
        state = STATE_WORDS.get(r["state"] or "", r["state"] or "not read")
        where = f" in {r['frame']}" if r["frame"] else ""
        return (f"{who}: one snapshot: state {state}, {wait}{where}; one snapshot cannot tell stuck from slow "
                f"(capture --repeat 3 can).")
    frames = {True: f"same main-thread frames ({r['frame']})", None: "no two dumps to compare frames",
              False: "frames changed"}[r["frames_same"]]
    span = f" over {r['span_s']:.0f} s" if r["span_s"] else ""
    since = min((x["since"] for x in rows if x["since"] is not None), default=None)
    across = f"across {r['unchanged']} snapshots since {_hms(since)}{span}"
    if st == "spinning":
        rate = (r["cpu_delta_s"] or 0.0) / r["span_s"] * 100 if r["span_s"] else None
        cpu = f"CPU time rising ({rate:.0f} % of a core)" if rate is not None else "CPU time rising"
        return f"{who}: {frames}, {cpu}, {across}: spinning in place, not blocked."
    state = STATE_WORDS.get(r["state"] or "", r["state"] or "state not read")
    flat = "CPU time flat" if r["cpu_delta_s"] is not None else "CPU time not read"
    how = "stuck in a driver wait" if st == "driver_wait" else "stuck, not slow"
    return f"{who}: {frames}, same {wait}, state {state}, {flat}, unchanged {across}: {how}."


def fill_details(rows: list[dict[str, Any]]) -> None:
    """Set each row's ``detail`` to the sentence of its group (ranks whose snapshots say the same)."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[_group_key(r)].append(r)
    for members in groups.values():
        text = sentence(sorted(members, key=lambda x: rank_key(x["rank"])))
        for r in members:
            r["detail"] = text


def facts_in_words(rows: list[dict[str, Any]]) -> list[str]:
    """The distinct sentences of ``snapshot_facts`` rows, stuck ones first (for verdicts and summaries)."""
    order = {"stuck": 0, "driver_wait": 0, "spinning": 1, "moved": 2, "gone": 3}
    seen: dict[str, int] = {}
    for r in rows:
        seen.setdefault(r["detail"], order.get(r["status"], 4))
    return sorted(seen, key=lambda d: seen[d])


# -- desyncs only repeated snapshots can show ---------------------------------------------------------

def _absent(series: list[RankSeries], waiters: set[str], rounds: set[int]) -> dict[str, list]:
    """Ranks with two or more dumps in the rounds the waiters waited through, none in a per-iteration collective."""
    out = {}
    for s in series:
        if s.rank in waiters:
            continue
        stacks = [x.stack for x in s.snaps if x.stack is not None and x.round in rounds]
        if len(stacks) >= 2 and not any(per_iteration(*collective_of(st)) for st in stacks):
            out[s.rank] = stacks
    return out


def round_desyncs(store: Store, engine: str, rows: list[dict[str, Any]], series: list[RankSeries]) -> None:
    """Per capture: ranks stuck in the per-iteration broadcast while another rank never came back to it."""
    found = RoundDesyncs.read(store, [engine])
    found.judge(engine, rows, series)
    found.write(store)


class RoundDesyncs:
    """The desyncs repeated snapshots show, judged for many engines over what the store holds, read once:
    each engine's rank_collectives (a capture bundle's dumps -> the rank classes' capture index) and the
    desyncs the rank classes found.  A confirmation appends its words to every desync row of that capture,
    as an UPDATE would, to the rows stored and to the ones found before it here; :meth:`write` stores both."""

    def __init__(self, captures: dict[str, list[tuple[int, str]]], existing: Counter) -> None:
        self.captures = captures            # engine -> (capture, dump_id) of rank_collectives
        self.existing = existing            # (engine, capture) -> stored desyncs of a kind other than absent
        self.suffixes: dict[tuple[str, int], str] = {}     # words appended to the stored rows
        self.added: list[dict[str, Any]] = []

    @classmethod
    def read(cls, store: Store, engines: list[str]) -> RoundDesyncs:
        captures: dict[str, list[tuple[int, str]]] = defaultdict(list)
        existing: Counter = Counter()
        if engines:
            for r in store.query("SELECT engine, capture, dump_id FROM rank_collectives "
                                 "WHERE list_contains(?, engine) AND dump_id IS NOT NULL", [engines]):
                captures[r["engine"]].append((r["capture"], r["dump_id"]))
            for r in store.query("SELECT engine, capture, count(*) AS n FROM desyncs WHERE list_contains(?, engine) "
                                 "AND kind IS DISTINCT FROM 'absent' GROUP BY ALL", [engines]):
                existing[(r["engine"], r["capture"])] = r["n"]
        return cls(captures, existing)

    def _capture_index(self, engine: str, dump_ids: list[str]) -> int | None:
        wanted = set(dump_ids)
        return max((c for c, d in self.captures.get(engine, []) if d in wanted), default=None)

    def judge(self, engine: str, rows: list[dict[str, Any]], series: list[RankSeries]) -> None:
        """Per capture of ``engine``: ranks stuck in the per-iteration broadcast while another rank never
        came back to it."""
        by_capture: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            by_capture[r["capture_id"]].append(r)
        for cid, crows in by_capture.items():
            waiting = [r for r in crows if r["status"] == "stuck" and r["unchanged"] >= 2
                       and per_iteration(r["collective"], r["call_site"])]
            if not waiting:
                continue
            (coll, site), _ = Counter((r["collective"], r["call_site"]) for r in waiting).most_common(1)[0]
            waiting = [r for r in waiting if (r["collective"], r["call_site"]) == (coll, site)]
            since = min(r["since"] for r in waiting)
            rounds = set.intersection(*(set(r["rounds"]) for r in waiting))     # rounds every waiter sat through
            absent = _absent([s for s in series if s.capture_id == cid], {r["rank"] for r in waiting}, rounds)
            if not absent:
                continue
            odd = sorted(absent, key=rank_key)
            w_label, o_label = compact_ranks([r["rank"] for r in waiting]), compact_ranks(odd)
            n = min(r["unchanged"] for r in waiting)
            idx = self._capture_index(engine, [r["dump_id"] for r in crows if r["dump_id"]])
            if idx is not None and (self.existing[(engine, idx)]
                                    or any(a["engine"] == engine and a["capture"] == idx for a in self.added)):
                words = (f" Repeated snapshots confirm it: {w_label} stayed in {coll} from {site}, unchanged across "
                         f"{n} snapshots since {_hms(since)}, and {o_label} never came back to it.")
                self.suffixes[(engine, idx)] = self.suffixes.get((engine, idx), "") + words
                for a in self.added:
                    if a["engine"] == engine and a["capture"] == idx:
                        a["detail"] += words
                continue
            where = sorted({path_of(st)[-1] for sts in absent.values() for st in sts if path_of(st)})
            wchans = sorted({r["wchan"] for r in waiting if r["wchan"]})
            detail = (
                f"{o_label} never came back to the per-iteration {coll} (from {site}): in every snapshot while the "
                f"others waited it was in {' / '.join(where) or 'no collective'}, while {w_label} stayed blocked in "
                f"that {coll}, unchanged across {n} snapshots since {_hms(since)}"
                + (f" ({', '.join(wchans)}, CPU time flat)" if wchans else "")
                + f". They wait for an iteration {o_label} never starts: the ranks are out of step. One snapshot "
                  "could not tell this from a starving idle loop; repeated ones can. Collectives have no recovery "
                  "once ranks diverge: the group must be restarted.")
            evidence = [{"file": st.path, "line": st.line} for r in odd for st in absent[r][-2:]]
            evidence += [e for r in waiting[:2] for e in r["evidence"][:2]]
            self.added.append({
                "engine": engine, "capture": idx if idx is not None else 0, "ts": since, "odd_ranks": odd,
                "majority_ranks": sorted((r["rank"] for r in waiting), key=rank_key), "detail": detail,
                "evidence": evidence})

    def write(self, store: Store) -> None:
        """Confirmations first (to the stored rows only), then the desyncs found here."""
        if self.suffixes:
            keys = list(self.suffixes)
            store.con.execute(
                """UPDATE desyncs SET detail = desyncs.detail || u.words
                   FROM (SELECT unnest($1) AS engine, unnest($2) AS capture, unnest($3) AS words) u
                   WHERE desyncs.engine = u.engine AND desyncs.capture = u.capture""",
                [[k[0] for k in keys], [k[1] for k in keys], [self.suffixes[k] for k in keys]])
        store.append("desyncs", self.added)
