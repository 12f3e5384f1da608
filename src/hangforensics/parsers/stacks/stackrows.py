"""Rows of the ``stacks`` and ``frames`` tables from a parsed stack dump of any format.

Every stack parser (py-spy text and JSON, gdb, faulthandler, numbered native traces) returns a
:class:`pyspy.Dump`; this turns it into rows, with the columns the embedded-dump row builder in
``sglang_log`` does not fill: ``stacks.format``, ``stacks.garbled``, ``stacks.fragment`` and ``frames.library``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...store import Store
from . import pyspy


def rank_from_place(rel_path: str, engine: str) -> str | None:
    """A rank spelled by the file's name or its folder below the engine ('pyspy/rank3.txt', 'tp3/x')."""
    parts = list(PurePosixPath(rel_path).parts)
    if parts and parts[0] == engine and len(parts) > 1:
        parts = parts[1:]                           # the engine's own name (e.g. '...-tp8') is its size, not a rank
    for candidate in reversed(parts[-2:]):          # the file's name, then its folder
        rank = pyspy.rank_from_name(candidate)
        if rank:
            return rank
    return None


def dump_rows(dump: pyspy.Dump, dump_id: str, engine: str, path: str, ts: datetime | None, rank: str,
              capture: str, stack_rows: list[dict[str, Any]], frame_rows: list[dict[str, Any]],
              ts_basis: str | None = None) -> None:
    """Append one ``stacks`` row per thread and one ``frames`` row per frame.

    ``ts_basis`` says where ``ts`` came from (``stacks.ts_basis``): by default the record that embeds
    the dump, for an embedded one, else the file's modification time.

    A dump with several process blocks (``--subprocesses``, repeated faulthandler dumps, gdb
    printing a process twice) gets one dump_id per block: ``<dump_id>#<n>``.  A block's rank comes
    from its process title (``sglang::scheduler_DP0_TP3``), else from a rank the dump states
    (torch's ``[rank3]:`` prefix), else ``rank`` (the caller's fallback).
    """
    for p_idx, proc in enumerate(dump.processes):
        prank = pyspy.rank_from_title(proc.title) if proc.title else None
        prank = prank or proc.rank or rank or ""
        did = dump_id if len(dump.processes) == 1 else f"{dump_id}#{p_idx}"
        basis = ts_basis or ("record" if capture == "embedded" else "mtime")
        for th in proc.threads:
            stack_rows.append({
                "engine": engine, "dump_id": did, "thread_id": th.thread_id, "ts": ts, "rank": prank,
                "pid": proc.pid, "thread_name": th.name, "thread_state": th.state or None, "path": path,
                "line": th.line, "process_title": proc.title, "capture": capture,
                "format": th.format or dump.format, "garbled": th.garbled, "ts_basis": basis,
                "line_end": th.line_end if th.line_end is not None else th.line, "fragment": th.fragment,
            })
            for depth, fr in enumerate(th.frames):
                frame_rows.append({
                    "dump_id": did, "thread_id": th.thread_id, "depth": depth, "function": fr.function,
                    "file": fr.file, "line": fr.line, "native": fr.native, "library": fr.library,
                })


def ranks_from_pids(store: Store, engine: str) -> int:
    """Give standalone dumps that name no rank the rank the engine's other evidence gives their pid.

    A gdb or JSON capture names no rank, but a py-spy dump of the same process (its title), a dump
    embedded in the log (its prefix) or a log record carrying the pid does.  Only a pid that maps
    to exactly one rank is used, so a pid reused across restarts names nothing.  Returns the number
    of rows updated.
    """
    before = store.scalar("SELECT count(*) FROM t_stacks WHERE engine = ? AND rank = ''", [engine])
    store.con.execute(
        """UPDATE t_stacks AS s SET rank = k.rank
           FROM (SELECT pid, min(rank) AS rank FROM (
                     SELECT pid, rank FROM t_stacks WHERE engine = ? AND rank <> '' AND pid IS NOT NULL
                     UNION ALL
                     SELECT TRY_CAST(json_extract_string(attrs, '$.pid') AS BIGINT) AS pid, rank FROM t_events
                     WHERE engine = ? AND rank <> '' AND rank NOT LIKE 'rank%' AND attrs IS NOT NULL)
                 WHERE pid IS NOT NULL GROUP BY pid HAVING count(DISTINCT rank) = 1) AS k
           WHERE s.engine = ? AND s.rank = '' AND s.capture = 'standalone' AND s.pid = k.pid""",
        [engine, engine, engine])
    after = store.scalar("SELECT count(*) FROM t_stacks WHERE engine = ? AND rank = ''", [engine])
    return before - after
