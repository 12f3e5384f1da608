"""A Flight Recorder dump as rows: the ``collectives`` view's and, for its recorded call stacks, ``stacks``.

Split from :mod:`.flight_recorder` (which re-exports these): that module reads a dump into typed
records, this one decides what each rank's records say about the collectives it stands at.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..stacks import pyspy
from .collective_rows import CollectiveRow, rank_position, ts_from_ns
from .flight_recorder_model import _STATE_ORDER, SOURCE, FlightRecorderDump, FrEntry, FrFrame

_NATIVE_EXT = (".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".cuh")


def collective_rows(dump: FlightRecorderDump) -> list[CollectiveRow]:
    """One row per (pg, counter, seq, op) of the dump's rank.

    Entries sharing them (the ops of one coalesced group) merge into one row: its ``records`` counts
    them, its ``state`` is the least advanced one and ``ts`` (the enqueue time, naive UTC) the
    earliest.  Send/recv rows use ``p2p_seq_id`` with ``seq_kind='p2p'``.  ``line`` is the
    1-based record number of the first entry.  Where ``pg_status`` is ahead of the entries, rows
    with ``records == 0`` carry what it says (see :func:`_status_rows`).
    """
    merged: dict[tuple[str, str, int, str], list[FrEntry]] = {}
    for e in dump.entries:
        pg, seq = e.group, e.seq
        if pg is None or seq is None:
            continue
        merged.setdefault((pg, "p2p" if e.is_p2p else "collective", seq, e.op), []).append(e)
    rows = []
    for (pg, kind, seq, op), es in merged.items():
        first = es[0]
        group = dump.groups.get(pg)
        known = [e.state for e in es if e.state in _STATE_ORDER]
        state = min(known, key=_STATE_ORDER.__getitem__) if known else first.state
        created = [e.time_created_ns for e in es if e.time_created_ns]
        rows.append(CollectiveRow(
            SOURCE, dump.rank, pg, seq, op, state, ts_from_ns(min(created)) if created else None, len(es),
            pg_desc=first.pg_desc or (group.desc if group else None),
            pg_ranks=group.ranks if group else None, seq_kind=kind,
            input_sizes=first.input_sizes, output_sizes=first.output_sizes,
            input_dtypes=first.input_dtypes, output_dtypes=first.output_dtypes, line=first.index + 1))
    if records_no_lifecycle(dump):
        rows = _newest_pending(dump, rows)
    rows.extend(_status_rows(dump, rows))
    rows.sort(key=lambda r: (r.pg, r.seq_kind, r.seq or 0, r.line or 0))
    return rows


def records_no_lifecycle(dump: FlightRecorderDump) -> bool:
    """The dump's states say nothing about progress: every entry is ``scheduled`` and none has a start or
    completion time, while the backend is gloo (``gloo:`` profiling names) or entries were retired
    still ``scheduled`` (ProcessGroupNCCL retires an entry only once it has completed).

    ProcessGroupGloo (torch 2.13) records an entry when the work is enqueued and never updates its
    state; after the work runs it retires it and sets ``last_completed`` to its sequence number even
    when it failed or timed out.  So neither state nor ``pg_status`` tells a finished collective from
    the one the rank is stuck in.
    """
    if not dump.entries:
        return False
    if any(e.state not in (None, "scheduled") or e.time_discovered_started_ns or e.time_discovered_completed_ns
           for e in dump.entries):
        return False
    return any(e.backend == "gloo" for e in dump.entries) or any(e.retired for e in dump.entries)


def _newest_pending(dump: FlightRecorderDump, rows: list[CollectiveRow]) -> list[CollectiveRow]:
    """Where states say nothing (see :func:`records_no_lifecycle`), a thread stands at its newest entry:
    a collective returns before the next one on that thread is enqueued, so its older entries, of any
    group, were left behind.  Those rows are marked ``completed``, with the reason.  Entries without a
    thread id are taken per group and counter."""
    newest: dict[object, FrEntry] = {}
    for e in dump.entries:
        if e.seq is None or e.group is None:
            continue
        key = e.thread_id or (e.group, e.is_p2p)
        if key not in newest or (e.time_created_ns or 0, e.index) >= (newest[key].time_created_ns or 0,
                                                                      newest[key].index):
            newest[key] = e
    standing = {(e.group, "p2p" if e.is_p2p else "collective", e.seq) for e in newest.values()}
    return [r if r.seq is None or (r.pg, r.seq_kind, r.seq) in standing else
            replace(r, state="completed",
                    reason="the backend records no completion: a later collective on its thread was entered")
            for r in rows]


def _status_rows(dump: FlightRecorderDump, rows: list[CollectiveRow]) -> list[CollectiveRow]:
    """Rows from ``pg_status`` for what the entries no longer show (``records`` = 0, op unknown).

    The ring buffer keeps the last N entries of all groups together, so a quiet group's entries are
    pushed out, and a truncated file loses the newest ones; ``pg_status`` (before the entries in the
    file) still says how far the rank got in each group.  Without it such a rank would look behind.
    """
    newest: dict[str, int] = {}
    for r in rows:
        if r.seq_kind == "collective" and r.seq is not None:
            newest[r.pg] = max(newest.get(r.pg, 0), r.seq)
    out = []
    for st in dump.status.values():
        pg = st.pg
        if pg is None:
            continue
        group = dump.groups.get(pg)
        marks = [(st.last_completed, "completed"), (st.last_started, "started"),
                 (st.last_enqueued, "scheduled")]
        seen = newest.get(pg, 0)
        for seq, state in marks:
            if seq is not None and seq > seen:
                seen = seq
                out.append(CollectiveRow(
                    SOURCE, dump.rank, pg, seq, "", state, None, 0, pg_desc=group.desc if group else None,
                    pg_ranks=group.ranks if group else None,
                    reason="from pg_status: no entry of it is left in the dump"))
    return out


def position_entries(dump: FlightRecorderDump) -> list[FrEntry]:
    """Per process group, the entry the rank stands at (see :func:`collective_rows.rank_position`).

    The newest group first when the rank is waiting somewhere: a pending entry before completed ones.
    """
    rows = [r for r in collective_rows(dump) if not r.p2p]
    by_pg: dict[str, list[CollectiveRow]] = {}
    for r in rows:
        by_pg.setdefault(r.pg, []).append(r)
    chosen: list[tuple[bool, int, FrEntry]] = []
    for pg, pg_rows in by_pg.items():
        pos = rank_position(pg_rows)
        if pos is None:
            continue
        at = [e for e in dump.entries
              if not e.is_p2p and e.group == pg and e.collective_seq_id == pos.seq]
        if at:
            e = at[-1]                                  # a coalesced group ends with its 'coalesced' entry
            chosen.append((pos.pending, e.time_created_ns or 0, e))
    chosen.sort(key=lambda c: (not c[0], -c[1]))
    return [e for _, _, e in chosen]


def _native(f: FrFrame) -> bool:
    fn = f.filename or ""
    return fn.endswith(_NATIVE_EXT) or fn in ("", "??") or ("::" in f.name and not fn.endswith(".py"))


def stack_dump(dump: FlightRecorderDump, all_entries: bool = False) -> pyspy.Dump:
    """The entries' recorded call stacks as a stack dump (one process, ``rank`` = 'rankN').

    By default one thread per process group: the stack of the entry the rank stands at
    (:func:`position_entries`), so rank classes compare each rank's current collective and its
    call site, as they do for py-spy captures; ``all_entries`` gives one thread per entry (the
    history).  Thread ids are ``fr<record number>``; a thread's name says which collective it is.
    """
    chosen: Iterable[FrEntry] = dump.entries if all_entries else position_entries(dump)
    threads = []
    for e in chosen:
        pg = e.group or "?"
        what = f"{e.op or '?'} #{e.seq if e.seq is not None else '?'} in pg {pg}" + \
            (f"({e.pg_desc})" if e.pg_desc else "") + (f", {e.state}" if e.state else "")
        threads.append(pyspy.Thread(
            thread_id=f"fr{e.index + 1}", state=e.state, name=f"{e.thread_name or 'thread'}: {what}",
            line=e.index + 1,
            frames=[pyspy.Frame(f.name, f.filename, f.line, _native(f)) for f in e.frames]))
    proc = pyspy.Process(pid=None, title=f"flight recorder {dump.name}".strip(), line=0, threads=threads,
                         rank=f"rank{dump.rank}" if dump.rank is not None else None)
    return pyspy.Dump([proc], consumed=set(), unmatched=[], format="flight_recorder")
