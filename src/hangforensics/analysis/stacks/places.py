"""Where the ranks of a capture stand when no rule fired on their stacks: the places they wait in (the rank
classes' leaves of the latest capture, with their innermost frames), and the ranks whose several dumps of
one moment show them in different places (running, not stuck).  For the summary's verdict, facts and advice
when the evidence is stack dumps alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...ranks import rank_key
from ...store import Store
from .stackclasses import compact_ranks

# Dumps of one rank this close to its latest are one moment's (the rank classes' capture window)
SAME_MOMENT_S = 300


@dataclass
class Place:
    ranks: list[str]
    frames: list[str]             # innermost first, the place's own frames below what it shares with others


@dataclass
class Places:
    places: list[Place] = field(default_factory=list)     # the latest capture's, most ranks first
    moved: dict[str, list[str]] = field(default_factory=dict)   # rank -> the innermost Python functions of its dumps

    def words(self, states: set[str]) -> str | None:
        """Where the ranks stand, in words: 'all 4 ranks at one point outside any collective: A ← B ← C (idle)'."""
        if not self.places:
            return None
        state = ""
        if len(states) == 1:
            st = next(iter(states)) or ""
            state = (f" ({st}: on a CPU when dumped, not waiting)" if st.startswith("active")
                     else f" ({st}: waiting)" if st == "idle" else f" ({st})" if st else "")
        if len(self.places) == 1:
            p = self.places[0]
            who = f"all {len(p.ranks)} ranks at one point" if len(p.ranks) > 1 else f"{p.ranks[0]}"
            return f"{who} outside any collective: {' ← '.join(p.frames[:3])}{state}"
        shown = "; ".join(f"{compact_ranks(p.ranks)} in {' ← '.join(p.frames[:2])}" for p in self.places[:3])
        more = f"; {len(self.places) - 3} more" if len(self.places) > 3 else ""
        return f"{sum(len(p.ranks) for p in self.places)} ranks in {len(self.places)} places outside any collective: " \
               f"{shown}{more}"

    def moved_words(self) -> list[str]:
        return [f"{rank}'s dumps show it in {len(fns)} places ({', '.join(fns[:3])}): it was running between them, "
                f"not stuck." for rank, fns in sorted(self.moved.items(), key=lambda kv: rank_key(kv[0]))]


def own_frames(nodes: dict[Any, dict[str, Any]], leaf: dict[str, Any]) -> list[str]:
    """A rank class's own frames, innermost first: the leaf's chain of ``rank_classes`` nodes (by class_id) up
    to the node it shares with ranks outside the class."""
    frames, n = [], leaf
    while n is not None and len(n["ranks"]) == len(leaf["ranks"]):
        frames.append(n["frame"])
        n = nodes.get(n["parent_id"]) if n["parent_id"] is not None else None
    return frames


def gather_all(store: Store, engines: list[str]) -> dict[str, Places]:
    """The places of every engine of ``engines``: two queries, whatever their number."""
    out = {e: Places() for e in engines}
    nodes: dict[str, dict[int, dict[str, Any]]] = {}
    for r in store.query(
            """SELECT engine, class_id, parent_id, frame, is_leaf, ranks FROM (
                 SELECT *, max(capture) OVER (PARTITION BY engine) AS latest FROM rank_classes
                 WHERE list_contains(?, engine)) WHERE capture = latest ORDER BY engine, class_id""", [engines]):
        nodes.setdefault(r["engine"], {})[r["class_id"]] = r
    for e, tree in nodes.items():
        for leaf in (n for n in tree.values() if n["is_leaf"]):
            out[e].places.append(Place(list(leaf["ranks"]), own_frames(tree, leaf)))
        out[e].places.sort(key=lambda p: (-len(p.ranks), p.frames))
    # a rank's dumps of one moment, by the innermost Python frame of their main thread
    for r in store.query(
            f"""WITH innermost AS (
                  -- the bare name: py-spy prints qualified names, gdb and older Pythons the bare one
                  SELECT dump_id, thread_id, regexp_extract(arg_min(function, depth), '([^.]+)$', 1) AS fn FROM frames
                  WHERE NOT COALESCE(native, false)
                    AND dump_id IN (SELECT dump_id FROM stacks WHERE list_contains($1, engine)) GROUP BY ALL),
                d AS (
                  SELECT s.engine, s.rank, s.ts, i.fn, max(s.ts) OVER (PARTITION BY s.engine, s.rank) AS last
                  FROM stacks s JOIN innermost i ON i.dump_id = s.dump_id AND i.thread_id = s.thread_id
                  WHERE list_contains($1, s.engine) AND s.rank <> '' AND s.thread_name = 'MainThread')
                SELECT engine, rank, list(DISTINCT fn ORDER BY fn) AS fns FROM d
                WHERE ts IS NULL OR last IS NULL OR epoch(last) - epoch(ts) <= {SAME_MOMENT_S}
                GROUP BY ALL HAVING count(DISTINCT fn) > 1 ORDER BY ALL""", [engines]):
        out[r["engine"]].moved[r["rank"]] = list(r["fns"])
    return out
