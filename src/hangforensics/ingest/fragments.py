"""Evidence in pieces, put back together per engine after its files are loaded.

A py-spy (or faulthandler) dump pasted in two pieces arrives as two files, or as two parts of one file.
Within one file the parser joins them itself (frames after a cut line stay with their thread,
``fragment = 'joined'``).  Across files no parser can: each file is parsed alone (in another process,
perhaps in another scan) and a part's file may arrive after the first part was loaded.  So the second
part is stored as parsed, its headerless frames on an unknown thread ``'?'`` marked ``continuation``,
and this pass joins it to its first part over the stored ``stacks`` / ``frames``:

- the first part is the last thread of another file of the same engine and format, left open at the end
  of its file (cut mid-token, or nothing after it; its stack not reaching its outermost frame); the join
  is made only when one such thread qualifies, or one whose last line was cut mid-token that no other
  continuation could take (else the continuation is left as it is: a guess would put a frame on the
  wrong rank);
- the continuation's frames are appended to that thread (depth after its own frames), the
  continuation's other threads move into the first part's dump (taking its rank, pid and title); each
  row keeps its own file and line, and the ``'?'`` row stays as the record of where the frames came
  from (``fragment = 'joined'``);
- every join is written to ``stack_joins`` with what undoes it: a file read again (content changed) is
  forgotten only after the engine's joins are undone (``unjoin_engine``), and every pass starts from the
  parts as parsed, so the joins always follow the engine's current files.

Process snapshot rows (``top``/``ps``) whose title names no rank take the rank other evidence of the
engine gives their pid (``rank_snapshots``).
"""

from __future__ import annotations

from typing import Any

from ..parsers.stacks.pyspy import CONTINUATION_TID
from ..store import Store

# Typed rows that a dump's end must not be followed by (unparsed lines may: fences, prose, a cut remainder)
_AFTER = (("t_events", "COALESCE(line_end, line)", "path"), ("batches", "line", "path"),
          ("http_requests", "line", "file"), ("t_stacks", "line", "path"), ("t_leak_reports", "line", "path"),
          ("process_samples", "line", "path"))


def unjoin_engine(store: Store, engine: str) -> None:
    """Undo the engine's joins, newest first, so that every file's rows are again as its parser gave them
    (caller's transaction).  Moved threads get back their own dump and rank, no pid and no title (a
    continuation has no process header of its own)."""
    for j in store.query("SELECT * FROM stack_joins WHERE engine = ? ORDER BY seq DESC", [engine]):
        cpath = store.scalar("SELECT path FROM t_stacks WHERE engine = ? AND dump_id = ? AND thread_id = ?",
                             [engine, j["from_dump_id"], CONTINUATION_TID])
        store.con.execute(
            "UPDATE frames SET dump_id = ?, thread_id = ?, depth = depth - ? "
            "WHERE dump_id = ? AND thread_id = ? AND depth >= ?",
            [j["from_dump_id"], CONTINUATION_TID, j["depth"], j["dump_id"], j["thread_id"], j["depth"]])
        store.con.execute(
            "UPDATE frames SET dump_id = ? WHERE dump_id = ? AND thread_id IN "
            "(SELECT thread_id FROM t_stacks WHERE engine = ? AND dump_id = ? AND path = ?)",
            [j["from_dump_id"], j["dump_id"], engine, j["dump_id"], cpath])
        store.con.execute(
            "UPDATE t_stacks SET dump_id = ?, rank = ?, pid = NULL, process_title = '' "
            "WHERE engine = ? AND dump_id = ? AND path = ?",
            [j["from_dump_id"], j["from_rank"] or "", engine, j["dump_id"], cpath])
        store.con.execute("UPDATE t_stacks SET fragment = 'continuation' WHERE engine = ? AND dump_id = ? "
                          "AND thread_id = ?", [engine, j["from_dump_id"], CONTINUATION_TID])
        store.con.execute("DELETE FROM stack_joins WHERE engine = ? AND seq = ?", [engine, j["seq"]])


def join_parts(store: Store, engine: str) -> int:
    """Join the engine's headerless dump parts to their first parts; returns the number of joins made.

    A continuation joins the one open dump end it can follow.  Most constrained first: a dump over three
    files joins its second part before its third (the third could also follow the first, the second
    only the first).  Between several ends, one whose last line was cut mid-token wins when no other
    continuation could take it."""
    made = 0
    with store.transaction():
        unjoin_engine(store, engine)        # from scratch: a file that grew or arrived may change the answer
        while True:
            conts = _continuations(store, engine)
            cands = {c["dump_id"]: _candidates(store, engine, c) for c in conts}
            claims: dict[str, int] = {}
            for cs in cands.values():
                for c in cs:
                    claims[c["path"]] = claims.get(c["path"], 0) + 1
            pick = next(((cont, *choice) for cont in conts
                         if (choice := _choose(cands[cont["dump_id"]], claims)) is not None), None)
            if pick is None:
                return made
            _join(store, engine, *pick)
            made += 1


def _choose(cands: list[dict[str, Any]], claims: dict[str, int]) -> tuple[str, str, str] | None:
    """(dump_id, thread_id, basis) of the end a continuation follows, when only one can be it."""
    if len(cands) == 1:
        c = cands[0]
    else:
        cut = [c for c in cands if c["fragment"] == "cut" and claims[c["path"]] == 1]
        if len(cut) != 1:
            return None
        c = cut[0]
    if c["target"] is None:
        return None                                     # a part not joined itself yet: wait for it
    return c["target"][0], c["target"][1], "cut" if c["fragment"] == "cut" else "only"


def _continuations(store: Store, engine: str) -> list[dict[str, Any]]:
    # only a part with no process header of its own: after a 'Process' line the thread is merely unnamed
    return store.query(
        "SELECT * FROM t_stacks WHERE engine = ? AND thread_id = ? AND fragment = 'continuation' "
        "AND pid IS NULL AND COALESCE(process_title, '') = '' ORDER BY path, line", [engine, CONTINUATION_TID])


def _file_ends(store: Store, engine: str, path: str) -> int:
    """The last line of a file that starts a typed row."""
    parts = " UNION ALL ".join(f"SELECT max({col}) AS l FROM {t} WHERE engine = ? AND {pcol} = ?"
                               for t, col, pcol in _AFTER)
    return store.scalar(f"SELECT COALESCE(max(l), 0) FROM ({parts})", [engine, path] * len(_AFTER))


def _candidates(store: Store, engine: str, cont: dict[str, Any]) -> list[dict[str, Any]]:
    """The open dump ends ``cont`` could follow: in another file of the engine, of the same format, the
    file's last thread, with nothing typed after it, its stack not complete, not continued already, and
    nothing saying it is of another process.  Each with ``target``: the (dump_id, thread_id) its frames
    are on now (None: itself a continuation not joined yet)."""
    finals = store.query(
        """SELECT * FROM t_stacks WHERE engine = ? AND format = ? AND path <> ?
           QUALIFY row_number() OVER (PARTITION BY path ORDER BY line DESC, line_end DESC) = 1""",
        [engine, cont["format"], cont["path"]])
    out = []
    for row in finals:
        end = row["line_end"] or row["line"]
        if end < _file_ends(store, engine, row["path"]) or (row["fragment"] != "cut" and store.scalar(
                "SELECT count(*) FROM unparsed WHERE engine = ? AND path = ? AND line > ?", [engine, row["path"], end])):
            continue        # something follows it (a record, a cut thread header): that thread is complete
        target = _target_of(store, engine, row)
        if target is False or (isinstance(target, tuple) and (_complete(store, *target)
                                                             or not _compatible(store, engine, cont, target))):
            continue
        out.append(dict(row, target=target))
    return out


def _target_of(store: Store, engine: str, row: dict[str, Any]) -> tuple[str, str] | None | bool:
    """The thread a final row's frames are on now: itself, or for a joined '?' row the thread it joined;
    None for a continuation not joined yet; False when another part already continues it."""
    if row["thread_id"] == CONTINUATION_TID:
        if row["fragment"] == "continuation":
            return None
        j = store.query("SELECT * FROM stack_joins WHERE engine = ? AND from_dump_id = ?", [engine, row["dump_id"]])
        if not j:
            return False
        target, seq = (j[0]["dump_id"], j[0]["thread_id"]), j[0]["seq"]
    else:
        target, seq = (row["dump_id"], row["thread_id"]), -1
    later = store.scalar("SELECT count(*) FROM stack_joins WHERE engine = ? AND dump_id = ? AND thread_id = ? "
                         "AND seq > ?", [engine, target[0], target[1], seq])
    return False if later else target


def _complete(store: Store, dump_id: str, thread_id: str) -> bool:
    """The thread's stack reaches its outermost Python frame (a script's ``<module>``, threading's
    ``_bootstrap``): nothing can continue it."""
    last = store.query("SELECT function, file FROM frames WHERE dump_id = ? AND thread_id = ? AND NOT native "
                       "ORDER BY depth DESC LIMIT 1", [dump_id, thread_id])
    if not last:
        return False
    fn, file = last[0]["function"], last[0]["file"] or ""
    return fn in ("<module>", "_run_module_as_main") or (
        fn.rsplit(".", 1)[-1] == "_bootstrap" and file.rsplit("/", 1)[-1] == "threading.py")


def _compatible(store: Store, engine: str, cont: dict[str, Any], target: tuple[str, str]) -> bool:
    """Nothing says the two parts are of different processes: the same rank when both name one, and no
    thread of the continuation already in the first part's dump (a thread is dumped once)."""
    rank = store.scalar("SELECT rank FROM t_stacks WHERE engine = ? AND dump_id = ? AND thread_id = ?",
                        [engine, target[0], target[1]]) or ""
    if cont["rank"] and rank and cont["rank"] != rank:
        return False
    return not store.scalar(
        "SELECT count(*) FROM t_stacks a JOIN t_stacks b ON a.thread_id = b.thread_id "
        "WHERE a.engine = ? AND b.engine = ? AND a.dump_id = ? AND b.dump_id = ? AND a.thread_id <> ?",
        [engine, engine, cont["dump_id"], target[0], CONTINUATION_TID])


def _join(store: Store, engine: str, cont: dict[str, Any], dump_id: str, thread_id: str, basis: str) -> None:
    depth = store.scalar("SELECT count(*) FROM frames WHERE dump_id = ? AND thread_id = ?", [dump_id, thread_id])
    head = store.query("SELECT rank, pid, process_title FROM t_stacks WHERE engine = ? AND dump_id = ? "
                       "AND thread_id = ?", [engine, dump_id, thread_id])[0]
    seq = store.scalar("SELECT COALESCE(max(seq), 0) + 1 FROM stack_joins WHERE engine = ?", [engine])
    src = cont["dump_id"]
    store.con.execute("UPDATE frames SET dump_id = ?, thread_id = ?, depth = depth + ? WHERE dump_id = ? "
                      "AND thread_id = ?", [dump_id, thread_id, depth, src, CONTINUATION_TID])
    store.con.execute("UPDATE frames SET dump_id = ? WHERE dump_id = ? AND thread_id <> ?",
                      [dump_id, src, CONTINUATION_TID])
    store.con.execute(
        "UPDATE t_stacks SET dump_id = ?, rank = ?, pid = ?, process_title = ? "
        "WHERE engine = ? AND dump_id = ? AND thread_id <> ?",
        [dump_id, head["rank"] or cont["rank"] or "", head["pid"], head["process_title"] or "", engine, src,
         CONTINUATION_TID])
    store.con.execute("UPDATE t_stacks SET fragment = 'joined' WHERE engine = ? AND dump_id = ? AND thread_id = ?",
                      [engine, src, CONTINUATION_TID])
    store.append("stack_joins", [{"engine": engine, "seq": seq, "dump_id": dump_id, "thread_id": thread_id,
                                  "depth": depth, "from_dump_id": src, "from_rank": cont["rank"] or "",
                                  "basis": basis}])


def rank_snapshots(store: Store, engine: str) -> int:
    """Give ``top``/``ps`` rows that name no rank the rank the engine's other evidence gives their id: a
    process's pid (a py-spy title, a dump under a rank prefix, a log record carrying the pid), or for a
    thread row (``top -H``) its thread id as a stack dump lists it.  Only an id that maps to exactly one
    rank is used (a pid reused across restarts names nothing).  Returns the number of rows updated."""
    before = store.scalar("SELECT count(*) FROM process_samples WHERE engine = ? AND rank IS NULL", [engine])
    if not before:
        return 0
    store.con.execute(
        """UPDATE process_samples AS s SET rank = k.rank
           FROM (SELECT id, min(rank) AS rank FROM (
                     SELECT pid AS id, rank FROM t_stacks WHERE engine = ? AND rank <> ''
                     UNION ALL
                     SELECT TRY_CAST(thread_id AS BIGINT), rank FROM t_stacks
                     WHERE engine = ? AND rank <> '' AND format IN ('pyspy_text', 'pyspy_json', 'gdb')
                     UNION ALL
                     SELECT TRY_CAST(json_extract_string(attrs, '$.pid') AS BIGINT), rank FROM t_events
                     WHERE engine = ? AND rank <> '' AND rank NOT LIKE 'rank%' AND attrs IS NOT NULL)
                 WHERE id IS NOT NULL GROUP BY id HAVING count(DISTINCT rank) = 1) AS k
           WHERE s.engine = ? AND s.rank IS NULL AND COALESCE(s.pid, s.tid) = k.id""",
        [engine, engine, engine, engine])
    after = store.scalar("SELECT count(*) FROM process_samples WHERE engine = ? AND rank IS NULL", [engine])
    return before - after
