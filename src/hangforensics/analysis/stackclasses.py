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

from ..ranks import rank_key, rank_numbers
from ..store import Store

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
}
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


FR_PENDING = ("started", "scheduled")


def dumped_threads(store: Store, engine: str, where: str = "TRUE") -> dict[str, list[dict]]:
    """Each dump's threads of ``engine`` (rows of ``stacks`` matching ``where`` on ``s``), each with its
    frames innermost first, grouped by dump_id."""
    rows = store.query(
        f"""SELECT s.dump_id, s.thread_id, s.rank, s.ts, s.thread_state, s.thread_name, s.pid, s.process_title,
                   s.path, s.line, s.format,
                   list({{'function': f.function, 'file': f.file, 'line': f.line, 'native': f.native}}
                        ORDER BY f.depth) AS frames
            FROM stacks s JOIN frames f ON f.dump_id = s.dump_id AND f.thread_id = s.thread_id
            WHERE s.engine = ? AND ({where}) GROUP BY ALL""", [engine])
    by_dump: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_dump[r["dump_id"]].append(r)
    return by_dump


def main_stacks(store: Store, engine: str) -> list[RankStack]:
    by_dump = dumped_threads(store, engine, "s.rank <> ''")
    out = []
    for threads in by_dump.values():
        fr = [t for t in threads if t["format"] == "flight_recorder"]
        # a dump's entry the rank waits in (its newest such), else its newest one
        main = sorted(fr, key=lambda t: (t["thread_state"] in FR_PENDING, t["line"] or 0), reverse=True)[:1] or \
               [t for t in threads if t["thread_name"] == "MainThread"] or \
               [t for t in threads if t["pid"] is not None and str(t["pid"]) == str(t["thread_id"])] or \
               [t for t in threads if t["frames"] and t["frames"][-1]["function"] == "<module>"] or \
               (threads if len(threads) == 1 and not threads[0]["thread_name"] else [])
        if not main:
            continue
        t = main[0]
        out.append(RankStack(t["rank"], t["dump_id"], t["ts"], t["thread_state"] or "", t["frames"], t["path"],
                             t["line"], t["pid"], bool(fr)))
    return out


def captures(stacks: list[RankStack]) -> list[list[RankStack]]:
    """Group dumps taken close together; within a capture keep the latest dump per rank.  Flight Recorder
    stacks are captures of their own (another rank naming, and another kind of snapshot)."""
    stacks = sorted(stacks, key=lambda s: (s.flight_recorder, s.ts or datetime.min))
    groups: list[list[RankStack]] = []
    for s in stacks:
        if groups and groups[-1][0].flight_recorder == s.flight_recorder and (
                s.ts is None or groups[-1][0].ts is None
                or (s.ts - groups[-1][0].ts) <= timedelta(seconds=CAPTURE_WINDOW_S)):
            groups[-1].append(s)
        else:
            groups.append([s])
    out = []
    for g in groups:
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
        if name in COLLECTIVES and not f["native"] or name.startswith("nccl") and name in COLLECTIVES:
            for g in frames[i + 1:]:
                gname = g["function"]
                if leaf_name(gname) in COLLECTIVES or WRAPPERS.search(gname) or ADDRESS_RE.match(gname):
                    continue
                return name, gname
            return name, None
    return None, None


def build(store: Store, engine: str) -> tuple[list[dict], list[dict], list[dict]]:
    """Rows for rank_classes, rank_collectives and desyncs."""
    class_rows: list[dict] = []
    coll_rows: list[dict] = []
    desyncs: list[dict] = []
    for ci, cap in enumerate(captures(main_stacks(store, engine))):
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
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for r in waiting:
            groups[(r["collective"], r["call_site"])].append(r)
        if len(groups) < 2:
            continue
        ordered = sorted(groups.items(), key=lambda kv: (len(kv[1]),
                                                        bool(PER_ITERATION_SITES.search(kv[0][1] or ""))))
        majority_key, majority = max(groups.items(), key=lambda kv: (len(kv[1]),
                                                                     bool(PER_ITERATION_SITES.search(kv[0][1] or ""))))
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
                + (f" ({', '.join(others)} in no collective: not counted.)" if others else "")),
            "evidence": [{"file": r["path"], "line": r["line"]} for r in odd + majority[:2]],
        })
    return class_rows, coll_rows, desyncs


def rebuild(store: Store, engines: list[str]) -> None:
    for e in engines:
        for t in ("rank_classes", "rank_collectives", "desyncs"):
            store.con.execute(f"DELETE FROM {t} WHERE engine = ?", [e])
        classes, colls, desyncs = build(store, e)
        store.append("rank_classes", classes)
        store.append("rank_collectives", colls)
        store.append("desyncs", desyncs)
