"""Rank equivalence classes (after LLNL STAT) and collective desync, from the stacks table.

Per engine and capture (dumps taken within ``CAPTURE_WINDOW_S`` of each other)
each rank's main-thread stack is reduced to the frames that describe where it
is (outermost first), merged into a prefix tree, and ranks that share a path
form a class.  Frames that are not the hang are left out: bare addresses, the
dumper's own frames (``pyspy_dump_schedulers``, ``subprocess.communicate``)
and libc/pthread plumbing under a collective's wait.

For each rank the *collective* it is blocked in (the innermost frame naming
one) and its *call site* (the first caller that is not a wrapper) are stored
in ``rank_collectives``; ranks of one engine waiting in different collectives
or call sites are a desync, and the minority class is named as the odd ranks.
A rank in no collective at all (idle path, spinning event loop) is never a
desync by itself: one snapshot cannot tell it from a slow iteration.

Flight Recorder dumps (format ``flight_recorder``) take part too: a rank's "main thread" is the entry
it stands at (the collective it waits in, else its newest), so its call site joins the classes.  They
form captures of their own (their ranks are torch's ``rankN``, not the log's labels) and never make a
desync here: one recorded call site per rank says less than the dumps' sequence numbers, which the
collective matcher (``collectives.py``) judges once, per process group.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ...ranks import rank_key, rank_numbers
from ...store import Store

CAPTURE_WINDOW_S = 300
ADDRESS_RE = re.compile(r"^(?:0x[0-9a-fA-F]+|\?\?)$")
DUMPER_RE = re.compile(r"pyspy_dump_schedulers|Popen\.communicate|Popen\._communicate|_watchdog_thread|"
                       r"dump_info|faulthandler\.dump_traceback")
COLLECTIVES = {
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "barrier", "monitored_barrier", "send", "recv", "isend", "irecv", "all_to_all", "all_to_all_single",
    "gather", "scatter", "reduce", "broadcast_object_list", "all_gather_object", "gather_object",
    "scatter_object_list", "send_object_list", "recv_object_list", "batch_isend_irecv",
    "ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv",
    # SGLang's object collectives and NCCL's collective registration (every rank must enter it together)
    "broadcast_pyobj", "ncclCommWindowRegister", "ncclCommRegister", "_register_segments_for_comm",
}
# NCCL's collective buffer registration, seen from Python (_register_segments_for_comm) or natively: every
# rank enters it together, so one collective whatever frame a dump shows of it (its call site says nothing:
# the allocator or the symmetric-memory context, cut at any depth).
REGISTRATION = {"ncclCommWindowRegister", "ncclCommRegister", "_register_segments_for_comm"}
REGISTRATION_NAME = "ncclCommWindowRegister"
# Collectives that are themselves the call site of the torch collective under them (SGLang's per-iteration
# request broadcast is told by this name).
SITE_COLLECTIVES = {"broadcast_pyobj"}
# Point-to-point operations: a rank blocked in one waits for its one peer, not for the group.
P2P_OPS = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list",
           "ncclSend", "ncclRecv"}
# gloo's native collectives (a gdb / py-spy --native stack of ProcessGroupGloo): 'gloo::allreduce(...)'
GLOO_NATIVE_RE = re.compile(r"\bgloo::(allreduce|allgather|allgatherv|broadcast|barrier|reduce|reduce_scatter|"
                            r"alltoall|alltoallv|gather|scatter)\b")
# Frames between a collective and its real caller.
WRAPPERS = re.compile(r"(^|\.)(wrapper|_exception_logger\.<locals>\.wrapper|decorate_context|inner|_fn|"
                      r"__call__|_call_impl|_wrapped_call_impl)$")
# Collectives every rank enters once per scheduler iteration: waiting there is the normal sync point.
# (vLLM V0 workers wait in broadcast_tensor_dict for the driver's next step.)
PER_ITERATION_SITES = re.compile(r"recv_requests|broadcast_pyobj|event_loop|broadcast_tensor_dict")


def short(fn: str) -> str:
    """A frame name fit for a tree node (pybind11 instantiations are kilobytes long)."""
    fn = fn.strip()
    if len(fn) > 100 and "::" in fn:
        base = re.sub(r"<.*>", "<…>", fn)
        return base[:100] + "…" if len(base) > 100 else base
    return fn


def leaf_name(fn: str) -> str:
    """'HiRadixCache._all_reduce_attn_groups' -> '_all_reduce_attn_groups'; 'c10d::Work::wait' -> 'wait'."""
    name = fn.split("(")[0].strip()
    for sep in ("::", "."):
        name = name.split(sep)[-1]
    return name


def compact_ranks(labels: list[str]) -> str:
    """['TP0','TP1','TP2','TP5'] -> 'TP0-2,5'; other tags (DP/EP) are summarised by their TP numbers;
    torch's ['rank0', 'rank1'] -> 'rank0-1'.  Mixed evidence keeps every family: 'TP0,2-5, rank6-7' (labels
    with neither number as they are)."""
    torch = {x for x in labels if rank_numbers(x).get("rank") is not None}
    sglang = {x for x in labels if x not in torch and rank_numbers(x).get("TP") is not None}
    parts = [_runs("TP", sglang), _runs("rank", torch)] + sorted(set(labels) - torch - sglang)
    return ", ".join(p for p in parts if p)


def _runs(tag: str, labels: set[str]) -> str:
    """The ``tag`` numbers of ``labels`` as runs: 'TP0-2,5' ('' for none)."""
    nums = sorted({rank_numbers(x)[tag] for x in labels})
    if not nums:
        return ""
    parts, start, prev = [], nums[0], nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(f"{start}-{prev}" if prev > start else f"{start}")
        if n is not None:
            start = prev = n
    return tag + ",".join(parts)


@dataclass
class RankStack:
    rank: str
    dump_id: str
    ts: datetime | None
    state: str
    frames: list[dict[str, Any]]        # innermost first, as stored
    path: str
    line: int
    pid: int | None = None
    flight_recorder: bool = False       # a Flight Recorder entry's recorded stack, not a live capture
    hand: bool = False                  # a stack a person summarised by hand (stacks.format hand_summary)
    thread: str = ""                    # the position thread's name where not the main thread ('' there)


FR_PENDING = ("started", "scheduled")


def dumped_threads(store: Store, engine: str, where: str = "TRUE") -> dict[str, list[dict]]:
    """Each dump's threads of ``engine`` (rows of ``stacks`` matching ``where`` on ``s``), each with its
    frames innermost first, grouped by dump_id."""
    return dumped_threads_of(store, [engine], where).get(engine, {})


def dumped_threads_of(store: Store, engines: list[str], where: str = "TRUE") -> dict[str, dict[str, list[dict]]]:
    """:func:`dumped_threads` of every engine of ``engines`` in one query: engine -> dump_id -> threads.
    Threads come by file, then in the order their frames were loaded (a file's order), so ties between dumps
    and threads resolve the same whichever engines are read together and in whatever order the files were
    loaded (parser workers finish them in any order)."""
    rows = store.query(
        f"""SELECT s.engine, s.dump_id, s.thread_id, s.rank, s.ts, s.thread_state, s.thread_name, s.pid,
                   s.process_title, s.path, s.line, s.format,
                   list({{'function': f.function, 'file': f.file, 'line': f.line, 'native': f.native}}
                        ORDER BY f.depth) AS frames
            FROM stacks s JOIN frames f ON f.dump_id = s.dump_id AND f.thread_id = s.thread_id
            WHERE list_contains(?, s.engine) AND ({where}) GROUP BY ALL ORDER BY s.path, min(f.rowid)""", [engines])
    out: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        out.setdefault(r.pop("engine"), {}).setdefault(r["dump_id"], []).append(r)
    return out


def _as_stack(t: dict, flight_recorder: bool = False, thread: str = "") -> RankStack:
    return RankStack(t["rank"], t["dump_id"], t["ts"], t["thread_state"] or "", t["frames"], t["path"],
                     t["line"], t["pid"], flight_recorder, t.get("format") == HAND_FORMAT, thread)


def _position_of(threads: list[dict]) -> tuple[dict | None, str]:
    """``position_thread`` and its name where it is not the process's main thread ('' where it is)."""
    t = position_thread(threads)
    return t, "" if t is None or t is _main_thread(threads) else (t["thread_name"] or f"thread {t['thread_id']}")


HAND_FORMAT = "hand_summary"


def hand_words(stacks: list[RankStack]) -> str:
    """' The stacks of TP0-3 are a person's summary ...' when any of ``stacks`` was summarised by hand, else ''."""
    hand = [s.rank for s in stacks if s.hand]
    if not hand:
        return ""
    return (f" The stacks of {compact_ranks(hand)} are a person's summary (a few function names per rank, written "
            f"by hand), not a capture: py-spy dumps of every rank would confirm where each one waits.")


def _main_thread(threads: list[dict]) -> dict | None:
    main = [t for t in threads if t["thread_name"] == "MainThread"] or \
           [t for t in threads if t["pid"] is not None and str(t["pid"]) == str(t["thread_id"])] or \
           [t for t in threads if t["frames"] and t["frames"][-1]["function"] == "<module>"] or \
           (threads if len(threads) == 1 and not threads[0]["thread_name"] else [])
    return main[0] if main else None


def position_thread(threads: list[dict]) -> dict | None:
    """The thread that says where a process stands (interface.md §3 "Where a rank is"): the one waiting in
    a collective, whichever thread that is (SGLang's overlap scheduler runs the forward pass and its
    collectives in ``forward_thread_func`` while MainThread waits on a queue), else its main thread.
    Of several threads in collectives the main thread wins, then the first dumped."""
    waiting = [t for t in threads if collective_of(_as_stack(t))[0] is not None]
    main = _main_thread(threads)
    if waiting:
        return main if main in waiting else waiting[0]
    return main


def main_stacks(store: Store, engine: str) -> list[RankStack]:
    """One stack per dumped process: where it stands (:func:`position_thread`).

    A process no label names (a py-spy dump of a plain ``python train.py``) still takes part, as
    ``pid<N>`` (interface.md §3), when it waits in a collective: a process that does not is no rank
    anyone compares (a tokenizer, the launcher)."""
    return main_stacks_of(store, [engine]).get(engine, [])


def main_stacks_of(store: Store, engines: list[str]) -> dict[str, list[RankStack]]:
    """:func:`main_stacks` of every engine of ``engines`` (one query): engine -> stacks (engines with
    none are missing)."""
    return {e: stacks for e, by_dump in dumped_threads_of(store, engines).items()
            if (stacks := _main_of_dumps(by_dump))}


def _main_of_dumps(by_dump: dict[str, list[dict]]) -> list[RankStack]:
    """Each dump's position; a dump that names neither its rank nor its process (the tail of a py-spy dump
    pasted without its 'Process N:' line) counts, unlabelled (``""``), only where no other dump does and it
    waits in a collective: it is then all there is of the engine's stacks (with labelled dumps beside it, it
    is likely a piece of one of them)."""
    out = []
    anonymous = []
    for threads in by_dump.values():
        if all(not t["rank"] and t["pid"] is None for t in threads):
            t, name = _position_of(threads)
            if t is not None and collective_of(_as_stack(t))[0] is not None:
                anonymous.append(_as_stack(t, thread=name))
            continue
        fr = [t for t in threads if t["format"] == "flight_recorder"]
        if fr:
            # a dump's entry the rank waits in (its newest such), else its newest one
            t = sorted(fr, key=lambda t: (t["thread_state"] in FR_PENDING, t["line"] or 0), reverse=True)[0]
            if t["rank"]:
                out.append(_as_stack(t, True))
            continue
        t, name = _position_of(threads)
        if t is None:
            continue
        if not t["rank"]:
            if t["pid"] is None or collective_of(_as_stack(t))[0] is None:
                continue
            t = {**t, "rank": f"pid{t['pid']}"}
        out.append(_as_stack(t, thread=name))
    return out or anonymous


def capture_groups(stacks: list[RankStack]) -> list[list[RankStack]]:
    """Dumps taken close together, every round kept (oldest first).  Flight Recorder stacks are groups of
    their own (another rank naming, and another kind of snapshot)."""
    stacks = sorted(stacks, key=lambda s: (s.flight_recorder, s.ts or datetime.min))
    groups: list[list[RankStack]] = []
    for s in stacks:
        if groups and groups[-1][0].flight_recorder == s.flight_recorder and (
                s.ts is None or groups[-1][0].ts is None
                or (s.ts - groups[-1][0].ts) <= timedelta(seconds=CAPTURE_WINDOW_S)):
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def captures(stacks: list[RankStack]) -> list[list[RankStack]]:
    """Group dumps taken close together; within a capture keep the latest dump per rank."""
    out = []
    for g in capture_groups(stacks):
        latest: dict[str, RankStack] = {}
        for s in g:
            latest[s.rank] = s
        out.append(sorted(latest.values(), key=lambda s: rank_key(s.rank)))
    return out


def path_of(stack: RankStack) -> list[str]:
    """Outermost-first frames that say where the rank is."""
    frames = [f["function"] for f in reversed(stack.frames)]
    kept = [short(f) for f in frames if not ADDRESS_RE.match(f) and not DUMPER_RE.search(f)]
    # libc / pthread plumbing under a wait adds nothing to the class
    while len(kept) > 1 and re.match(r"^(pthread_cond_\w+|__futex\w*|futex\w*|syscall|__GI_\w+|epoll_wait|poll)$",
                                     kept[-1]):
        kept.pop()
    return kept


def collective_of(stack: RankStack) -> tuple[str | None, str | None]:
    """(collective, call site) of the innermost collective frame, or (None, None)."""
    frames = stack.frames
    for i, f in enumerate(frames):
        name = leaf_name(f["function"])
        gloo = GLOO_NATIVE_RE.search(f["function"]) if f["native"] else None
        if name in REGISTRATION:
            return REGISTRATION_NAME, None
        if gloo:
            name = gloo.group(1)
        elif not (name in COLLECTIVES and (not f["native"] or name.startswith("nccl"))):
            continue
        for g in frames[i + 1:]:
            gname = g["function"]
            if leaf_name(gname) in COLLECTIVES - SITE_COLLECTIVES or WRAPPERS.search(gname) or ADDRESS_RE.match(gname) or \
                    (g["native"] and GLOO_NATIVE_RE.search(gname)):
                continue
            return name, gname
        return name, None
    return None, None


def build(store: Store, engine: str) -> tuple[list[dict], list[dict], list[dict]]:
    """Rows for rank_classes, rank_collectives and desyncs."""
    return build_from(engine, main_stacks(store, engine))


def build_from(engine: str, stacks: list[RankStack]) -> tuple[list[dict], list[dict], list[dict]]:
    """:func:`build` of ``engine`` from its main stacks, already read."""
    class_rows: list[dict] = []
    coll_rows: list[dict] = []
    desyncs: list[dict] = []
    groups_all = capture_groups(stacks)
    for ci, cap in enumerate(captures(stacks)):
        ts = max((s.ts for s in cap if s.ts), default=None)
        # prefix tree
        nodes: dict[tuple, dict] = {}
        next_id = 0
        for s in cap:
            parent = None
            key: tuple = ()
            for depth, fn in enumerate(path_of(s)):
                key = key + (fn,)
                node = nodes.get(key)
                if node is None:
                    node = {"engine": engine, "capture": ci, "class_id": next_id, "parent_id": parent,
                            "depth": depth, "frame": fn, "ranks": [], "ts": ts}
                    nodes[key] = node
                    next_id += 1
                node["ranks"].append(s.rank)
                parent = node["class_id"]
        children = Counter(n["parent_id"] for n in nodes.values())
        for n in nodes.values():
            n["is_leaf"] = children.get(n["class_id"], 0) == 0
            n["label"] = compact_ranks(n["ranks"])
            class_rows.append(n)
        # collectives
        per_rank = []
        for s in cap:
            coll, site = collective_of(s)
            row = {"engine": engine, "capture": ci, "rank": s.rank, "ts": s.ts, "collective": coll,
                   "call_site": site, "thread_state": s.state, "dump_id": s.dump_id, "path": s.path,
                   "line": s.line}
            coll_rows.append(row)
            per_rank.append(row)
        if any(s.flight_recorder for s in cap):
            continue                 # the dumps' desync is the collective matcher's, judged once per group
        waiting = [r for r in per_rank if r["collective"]]
        groups = _by_position(waiting)
        if len(groups) == 1:
            absent = _absent_from_collective(engine, ci, groups_all[ci], next(iter(groups)))
            if absent:
                desyncs.append(absent)
        if len(groups) < 2:
            continue
        ordered = sorted(groups.items(), key=lambda kv: (len(kv[1]),
                                                        bool(PER_ITERATION_SITES.search(kv[0][1] or ""))))
        majority_key, majority = max(groups.items(), key=lambda kv: (len(kv[1]),
                                                                     bool(PER_ITERATION_SITES.search(kv[0][1] or ""))))
        if not _decided(groups, majority_key):
            continue
        minority = [(k, rs) for k, rs in ordered if k != majority_key]
        # Ranks waiting at the per-iteration sync point (recv_requests broadcast) are usually waiting *for*
        # the odd rank's next iteration: name the other minority classes when there are any.
        culprits = [(k, rs) for k, rs in minority if not PER_ITERATION_SITES.search(k[1] or "")] or minority
        followers = [r["rank"] for k, rs in minority if (k, rs) not in culprits for r in rs]
        odd = [r for _, rs in culprits for r in rs]
        odd_sites = sorted({f"{k[0]} from {k[1]}" for k, _ in culprits})
        others = [r["rank"] for r in per_rank if not r["collective"]]
        desyncs.append({
            "engine": engine, "capture": ci, "ts": ts,
            "odd_ranks": sorted({r["rank"] for r in odd}, key=rank_key),
            "majority_ranks": sorted({r["rank"] for r in majority}, key=rank_key),
            "detail": (
                f"{compact_ranks([r['rank'] for r in odd])} wait in {', '.join(odd_sites)} while "
                f"{compact_ranks([r['rank'] for r in majority])} wait in {majority_key[0]} from "
                f"{majority_key[1]}. Collectives have no recovery once ranks diverge: the group must be restarted."
                + (f" {compact_ranks(followers)} wait at the per-iteration broadcast, for the odd ranks' next "
                   f"iteration." if followers else "")
                + (f" ({', '.join(others)} in no collective: not counted.)" if others else "")
                + hand_words(cap)),
            "evidence": [{"file": r["path"], "line": r["line"]} for r in odd + majority[:2]],
            "kind": "desync",
        })
    return class_rows, coll_rows, desyncs


def _by_position(waiting: list[dict]) -> dict[tuple, list[dict]]:
    """Ranks by (collective, call site).  A dump cut right above its collective names no call site: it joins
    the one class in that collective, where there is exactly one (a cut stack is no other position)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in waiting:
        groups[(r["collective"], r["call_site"])].append(r)
    for (coll, site) in [k for k in groups if k[1] is None]:
        same = [k for k in groups if k[0] == coll and k[1] is not None]
        if len(same) == 1:
            groups[same[0]].extend(groups.pop((coll, site)))
    return groups


def _decided(groups: dict[tuple, list[dict]], majority_key: tuple) -> bool:
    """A majority to measure the odd ranks against: the largest class, or, on a tie, the per-iteration
    broadcast (its ranks wait for the others' next iteration).  Another tie names nobody."""
    top = len(groups[majority_key])
    tied = [k for k, rs in groups.items() if len(rs) == top]
    if len(tied) == 1:
        return True
    per_iteration = [k for k in tied if PER_ITERATION_SITES.search(k[1] or "")]
    return len(per_iteration) == 1


def _absent_from_collective(engine: str, capture: int, rounds: list[RankStack],
                            where: tuple[str, str | None]) -> dict | None:
    """A rank that never reaches the collective its peers wait in: in every snapshot round of the capture
    the other ranks wait in the same collective, from the same call site, while it is in none (busy in
    Python, blocked in I/O or a socket).  Needs two rounds or more (one snapshot cannot tell a rank on its
    way to the collective from one that never comes), a majority waiting, and a collective other than the
    per-iteration broadcast (peers waiting there wait for the next request: ``desync``'s repeated-snapshot
    case).  Returned as a ``desyncs`` row of kind ``absent``: first-rank-stopped reads it."""
    coll, site = where
    if PER_ITERATION_SITES.search(site or ""):
        return None
    by_rank: dict[str, list[RankStack]] = defaultdict(list)
    for s in rounds:
        by_rank[s.rank].append(s)
    # a point-to-point send / recv waits for one peer only: one rank outside any collective is that peer,
    # whatever the count (a pipeline of two stages); a collective needs the others to be the majority
    p2p = coll in P2P_OPS
    if len(by_rank) < (2 if p2p else 3) or min(len(v) for v in by_rank.values()) < 2:
        return None
    there = {r for r, ss in by_rank.items() if all(collective_of(s) == where for s in ss)}
    outside = {r for r, ss in by_rank.items() if all(collective_of(s)[0] is None for s in ss)}
    if not outside or there | outside != set(by_rank):
        return None
    if not (len(there) > len(outside) or (p2p and len(outside) == 1)):
        return None
    odd = sorted(outside, key=rank_key)
    first = min((s for r in odd for s in by_rank[r]), key=lambda s: s.ts or datetime.max)
    doing = " ← ".join(leaf_name(f) for f in path_of(first)[::-1][:3]) or "?"
    n = min(len(by_rank[r]) for r in odd)
    return {
        "engine": engine, "capture": capture, "ts": min((s.ts for r in odd for s in by_rank[r] if s.ts),
                                                         default=None),
        "odd_ranks": odd, "majority_ranks": sorted(there, key=rank_key),
        "detail": (f"In all {n} snapshot rounds {compact_ranks(sorted(there))} wait in {coll}"
                   f"{f' from {site}' if site else ''} while {compact_ranks(odd)} never entered it "
                   f"({doing}): the others wait for {'it' if len(odd) == 1 else 'them'}."),
        "evidence": [{"file": s.path, "line": s.line} for r in odd for s in by_rank[r]][:4],
        "kind": "absent",
    }


def rebuild(store: Store, engines: list[str], stacks: dict[str, list[RankStack]] | None = None) -> None:
    """The rank classes, each rank's collective and the desyncs of ``engines`` (``stacks``: their
    ``main_stacks_of``, read already)."""
    for t in ("rank_classes", "rank_collectives", "desyncs"):
        store.con.execute(f"DELETE FROM {t} WHERE list_contains(?, engine)", [engines])
    stacks = stacks if stacks is not None else main_stacks_of(store, engines)
    classes: list[dict] = []
    colls: list[dict] = []
    desyncs: list[dict] = []
    for e in dict.fromkeys(engines):
        c, r, d = build_from(e, stacks.get(e, []))
        classes += c
        colls += r
        desyncs += d
    store.append("rank_classes", classes)
    store.append("rank_collectives", colls)
    store.append("desyncs", desyncs)
