"""The JSON files of a capture bundle (interface.md §6): ``manifest.json`` and ``proc/round<k>.json``.

Both are written by ``hangforensics capture``: the manifest (host, command, tools, processes, per round
the times of every dump, failures) and one file of /proc facts per snapshot round (state, CPU time,
``wchan`` of every process and thread).  Their rows go to the ``captures``, ``capture_processes``,
``capture_dumps``, ``capture_failures`` and ``process_facts`` tables.

Accounting: a JSON document is one record.  When it parses and has the shape this release reads,
every line is represented by the rows built from it (each row cites the line its object starts
on); when it does not (cut short, edited, a newer shape), every line is kept in ``unparsed``.

Times: the manifest's are ISO-8601 with the capture host's zone.  They are stored as that host's wall
clock without the zone (``10:02:11.250`` of ``10:02:11.250+01:00``), which is the clock the engine's
own log on that host prints, so dumps line up with the log they were taken beside.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

MANIFEST_RE = re.compile(r'^\s*\{[^\[\]]{0,400}?"format"\s*:\s*"hangforensics-capture"', re.S)
FACTS_RE = re.compile(r'^\s*\{\s*"round"\s*:\s*\d+\s*,(?:\s*"started"\s*:\s*"[^"]*"\s*,)?\s*"processes"\s*:\s*\[')


def looks_like_manifest(head: str) -> bool:
    """A capture bundle's ``manifest.json``: a JSON object whose format is ``hangforensics-capture``."""
    return bool(MANIFEST_RE.match(head))


def looks_like_process_facts(head: str) -> bool:
    """A bundle's ``proc/round<k>.json``: ``{"round": k, "started": ..., "processes": [...]}`` with /proc facts."""
    return bool(FACTS_RE.match(head)) and '"pid"' in head and ('"state"' in head or '"gone"' in head)


def wall_clock(value: Any) -> datetime | None:
    """An ISO-8601 time as the capture host's wall clock (its zone dropped, not converted); None if absent."""
    if not value:
        return None
    try:
        t = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return t.replace(tzinfo=None)


def utc_offset_s(value: Any) -> int | None:
    try:
        off = datetime.fromisoformat(str(value)).utcoffset() if value else None
    except ValueError:
        return None
    return int(off.total_seconds()) if off is not None else None


def container_lines(text: str) -> dict[tuple, int]:
    """Line (from 1) on which each object or array of a JSON text opens, by its path of keys and indexes:
    ``("rounds", 0, "dumps", 2)`` -> 57.  The text is assumed valid JSON (parse it first)."""
    out: dict[tuple, int] = {(): 1}
    stack: list[list[Any]] = []        # [kind, current key or index, expecting a key]
    line, i, n = 1, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if stack and stack[-1][0] == "{" and stack[-1][2]:
                stack[-1][1], stack[-1][2] = json.loads(text[i:j + 1]), False
            i = j + 1
            continue
        elif c in "{[":
            path = tuple(s[1] for s in stack)
            out.setdefault(path, line)
            stack.append([c, 0 if c == "[" else None, c == "{"])
        elif c in "}]":
            stack.pop()
        elif c == "," and stack:
            if stack[-1][0] == "[":
                stack[-1][1] += 1
            else:
                stack[-1][2] = True
        i += 1
    return out


class ShapeError(ValueError):
    """The JSON parsed but is not the shape this release reads."""


def _obj(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise ShapeError(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ShapeError(f"{what} is not a list")
    return value


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def fact_row(f: dict, base: dict[str, Any], line: int, source: str, rnd: int | None) -> dict[str, Any]:
    """A ``process_facts`` row from one process's facts (a manifest round's or a proc file's entry)."""
    threads = f.get("thread_list")
    return {
        **base, "line": line, "source": source, "round": rnd, "pid": _int(f.get("pid")),
        "label": _text(f.get("label")), "role": _text(f.get("role")), "rank": _text(f.get("rank")),
        "taken": wall_clock(f.get("taken")), "gone": bool(f.get("gone")), "state": _text(f.get("state")),
        "cpu_user_s": _float(f.get("cpu_user_s")), "cpu_system_s": _float(f.get("cpu_system_s")),
        "main_cpu_s": _float(f.get("main_cpu_s")), "wchan": _text(f.get("wchan")),
        "syscall": _text(f.get("syscall")), "threads": _int(f.get("threads")),
        "thread_states": json.dumps(f.get("thread_states") or {}),
        "thread_wchans": json.dumps(f.get("thread_wchans") or {}),
        "thread_list": json.dumps(threads) if isinstance(threads, list) else None,
    }


def parse_process_facts(text: str, engine: str, path: str, capture_id: str | None) -> list[dict[str, Any]]:
    """``process_facts`` rows of a ``proc/round<k>.json`` file; raises ValueError when it cannot be read."""
    data = _obj(json.loads(text), "the file")
    rnd = _int(data.get("round"))
    if rnd is None:
        raise ShapeError("no round number")
    lines = container_lines(text)
    base = {"engine": engine, "capture_id": capture_id, "path": path}
    return [fact_row(_obj(p, "a process"), base, lines.get(("processes", i), 1), "proc", rnd)
            for i, p in enumerate(_list(data.get("processes"), "processes"))]


def _rel(prefix: str, member: Any) -> str | None:
    """An engine-relative member of the manifest as a path relative to the ingest root."""
    return f"{prefix}{str(member).lstrip('/')}" if member else None


def parse_manifest(text: str, engine: str, path: str) -> dict[str, list[dict[str, Any]]]:
    """Rows of every table a manifest fills, keyed by table; raises ValueError when it cannot be read.

    ``path`` is the manifest's own path relative to the ingest root; it is the capture's id, and the
    folder it sits in is the prefix of every file the manifest names.
    """
    data = _obj(json.loads(text), "the manifest")
    if data.get("format") != "hangforensics-capture":
        raise ShapeError("not a hangforensics capture manifest")
    lines = container_lines(text)
    prefix = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
    base = {"engine": engine, "capture_id": path, "path": path}
    rounds = _list(data.get("rounds"), "rounds")
    out: dict[str, list[dict[str, Any]]] = {
        "captures": [_capture_row(data, base, prefix, rounds)],
        "capture_processes": [], "capture_dumps": [], "capture_failures": [], "process_facts": []}
    for i, p in enumerate(_list(data.get("processes"), "processes")):
        p = _obj(p, "a process")
        out["capture_processes"].append({
            **base, "line": lines.get(("processes", i), 1), "pid": _int(p.get("pid")), "ppid": _int(p.get("ppid")),
            "title": _text(p.get("title")), "role": _text(p.get("role")), "rank": _text(p.get("rank")),
            "label": _text(p.get("label")), "exe": _text(p.get("exe")), "python": bool(p.get("python")),
            "create_time": wall_clock(p.get("create_time"))})
    for ri, r in enumerate(rounds):
        r = _obj(r, "a round")
        idx = _int(r.get("index"))
        for di, d in enumerate(_list(r.get("dumps"), "dumps")):
            out["capture_dumps"].append(_dump_row(_obj(d, "a dump"), base, prefix, r, idx,
                                                  lines.get(("rounds", ri, "dumps", di), 1)))
        for fi, f in enumerate(_list(r.get("facts"), "facts")):
            out["process_facts"].append(fact_row(_obj(f, "a fact"), base,
                                                 lines.get(("rounds", ri, "facts", fi), 1), "manifest", idx))
    for key, skipped in (("failures", False), ("skipped", True)):
        for i, f in enumerate(_list(data.get(key), key)):
            f = _obj(f, "a failure")
            out["capture_failures"].append({
                **base, "line": lines.get((key, i), 1), "what": _text(f.get("what")),
                "reason": _text(f.get("reason")), "pid": _int(f.get("pid")), "round": _int(f.get("round")),
                "file": _rel(prefix, f.get("file")), "skipped": skipped})
    return out


def _capture_row(data: dict, base: dict, prefix: str, rounds: list) -> dict[str, Any]:
    host = _obj(data.get("host") or {}, "host")
    target = _obj(data.get("target") or {}, "target")
    opts = _obj(data.get("options") or {}, "options")
    spreads = [s for r in rounds if isinstance(r, dict) and (s := _float(r.get("start_spread_s"))) is not None]
    return {
        **base, "line": 1, "format_version": _int(data.get("format_version")),
        "host": _text(host.get("hostname")), "kernel": _text(host.get("kernel")),
        "machine": _text(host.get("machine")), "euid": _int(host.get("euid")),
        "ptrace_scope": _text(host.get("ptrace_scope")),
        "command": [str(a) for a in _list(data.get("command"), "command")],
        "hangforensics_version": _text(data.get("hangforensics_version")),
        "started": wall_clock(data.get("started")), "finished": wall_clock(data.get("finished")),
        "utc_offset_s": utc_offset_s(data.get("started")),
        "selector": _text(target.get("selector")), "target": _text(target.get("value")),
        "root_pid": _int(target.get("root_pid")), "family": _text(target.get("family")),
        "native": bool(opts.get("native")), "repeat": _int(opts.get("repeat")),
        "interval_s": _float(opts.get("interval_s")), "timeout_s": _float(opts.get("timeout_s")),
        "log_lines": _int(opts.get("log_lines")), "rounds": len(rounds),
        "max_spread_s": max(spreads) if spreads else None,
        "tools": json.dumps(_list(data.get("tools"), "tools")),
        "gpu_file": _rel(prefix, data.get("gpu_file")),
        "logs": json.dumps([{**x, "file": _rel(prefix, x.get("file"))} if isinstance(x, dict) else x
                            for x in _list(data.get("logs"), "logs")]),
    }


def _dump_row(d: dict, base: dict, prefix: str, r: dict, idx: int | None, line: int) -> dict[str, Any]:
    return {
        **base, "line": line, "round": idx, "round_started": wall_clock(r.get("started")),
        "pid": _int(d.get("pid")), "label": _text(d.get("label")), "rank": _text(d.get("rank")),
        "role": _text(d.get("role")), "ok": bool(d.get("ok")), "file": _rel(prefix, d.get("file")),
        "error_file": _rel(prefix, d.get("error_file")), "start_ts": wall_clock(d.get("start")),
        "end_ts": wall_clock(d.get("end")), "native": bool(d.get("native")),
        "exit_code": _int(d.get("exit_code")), "reason": _text(d.get("reason")), "note": _text(d.get("note")),
    }
