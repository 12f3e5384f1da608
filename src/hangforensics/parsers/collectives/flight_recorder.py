"""PyTorch Flight Recorder dumps: one file per rank, a pickle (or JSON) of one dict.

Written by ProcessGroupNCCL on a watchdog timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT=1``) to
``${TORCH_NCCL_DEBUG_INFO_TEMP_FILE}<rank>`` (default ``/tmp/nccl_trace_rank_<rank>``): the rank
is named only by the file name.  Layout (pytorch ``FlightRecorder.hpp`` / ``FlightRecorderDetail.hpp``;
shared/reference/collective-formats.md)::

    {"version": "2.10", "comm_lib_version": "2.28.9",          # "nccl_version" from 2.7
     "pg_config": {"5": {"name": "5", "desc": "tp:0", "ranks": "[0, 1, 2, 3]"}},
     "pg_status": {"5": {"last_enqueued_collective": 216068, "last_started_collective": 216068,
                         "last_completed_collective": 216067}},
     "entries": [{"record_id": 32, "pg_id": 5, "process_group": ("5", "tp:0"),
                  "collective_seq_id": 216068, "p2p_seq_id": 0, "op_id": 216068,
                  "profiling_name": "nccl:all_reduce", "is_p2p": False,
                  "input_sizes": [[321, 8192]], "input_dtypes": ["Float"], "output_sizes": ...,
                  "output_dtypes": ...,
                  "state": "started", "time_created_ns": 1736464273782881536,
                  "time_discovered_started_ns": 1736464273783687664, "time_discovered_completed_ns": None,
                  "retired": False, "timeout_ms": 300000, "thread_id": "1394…",
                  "thread_name": "sglang::schedul",
                  "frames": [{"name": "all_reduce", "filename": ".../distributed_c10d.py", "line": 2746},
                             ...]}]}

``pg_config`` is keyed by group name (GUID, the same on every rank), ``pg_status`` by the
process-local PG ID (``pg_id``; equal to the name only when groups were made in order, and not
in every dump: ``PG ID 2 PG GUID 1(tp:0)``), so it is tied to a group through the entries.
The JSON form has no ``frames``, writes unknown times as 0 and ``pg_status`` values as strings.
Pickles are loaded by :mod:`.safe_pickle` (no global is ever imported); a truncated or damaged
file yields the entries before the break plus a note, and a value of the wrong type is dropped
with a note: :func:`parse_flight_recorder` never raises.  For this binary evidence, ``records``
(the number of entries) plays the part of a text file's line count.

The typed records are in :mod:`.flight_recorder_model`; rows for the ``collectives`` view and the
dump's stacks are built in :mod:`.flight_recorder_rows` (both re-exported here).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..lenient import Problems, as_bool, as_int, as_ns, as_sizes, as_str, as_strs, short_repr
from .collective_rows import parse_rank_list
from .flight_recorder_model import SOURCE, FlightRecorderDump, FrEntry, FrFrame, FrGroup, FrStatus, _label
from .flight_recorder_rows import collective_rows, position_entries, stack_dump
from .safe_pickle import MAX_PICKLE_BYTES, PickleTooLarge, RefusedPickleGlobal, safe_loads, salvage_loads

_KEYS = (b"pg_config", b"pg_status", b"entries", b"version", b"collective_seq_id", b"profiling_name",
         b"comm_lib_version", b"nccl_version")
_P2P_OPS = {"send", "recv", "isend", "irecv"}
# How protocol 0/1 pickles begin: a MARK, an empty dict or list, or a GLOBAL 'module\nname\n'.
_OLD_PICKLE_RE = re.compile(rb"[(}\]]|c[\w.]+\n\w+\n")


def looks_like_flight_recorder(head: bytes) -> bool:
    """A Flight Recorder dump: a pickle header (protocol 2-5) or a JSON object, naming two of its keys.

    ``head`` is the start of the file (a few KiB): the top-level keys come first in both forms.
    """
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return sum(k in head for k in _KEYS) >= 2
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{"):
        return sum(b'"' + k + b'"' in text for k in _KEYS) >= 2
    return False


_NAME_RANK_RE = re.compile(r"(?<!\d)(\d{1,6})$")       # longer digit runs are dates, not ranks


def rank_from_filename(name: str) -> int | None:
    """The global rank PyTorch appends to the dump prefix: 'nccl_trace_rank_5', 'fr_dump12', 'x_rank_5.json'.

    Only the trailing digits of the file's own name count (a folder's name says nothing); None
    when the name does not end in a number.
    """
    base = re.split(r"[\\/]", name)[-1]
    for ext in (".json", ".pkl", ".pickle"):
        if base.lower().endswith(ext):
            base = base[: -len(ext)]
            break
    m = _NAME_RANK_RE.search(base)
    return int(m.group(1)) if m else None


# -- loading -------------------------------------------------------------------------------------------


def read_flight_recorder(path: str | Path, max_bytes: int = MAX_PICKLE_BYTES) -> FlightRecorderDump:
    """Read and parse one dump file; an oversized or unreadable file gives an empty dump with a note."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            return _empty(p.name, rank_from_filename(p.name), "unknown",
                          f"{size} bytes is over the {max_bytes}-byte bound; not read")
        data = p.read_bytes()
    except OSError as e:
        return _empty(p.name, rank_from_filename(p.name), "unknown", f"cannot be read ({e.strerror or e})")
    return parse_flight_recorder(data, p.name, max_bytes=max_bytes)


def parse_flight_recorder(data: bytes, name: str = "", rank: int | None = None,
                          max_bytes: int = MAX_PICKLE_BYTES) -> FlightRecorderDump:
    """Parse a dump's bytes; ``rank`` defaults to :func:`rank_from_filename` of ``name``.  Never raises."""
    rank = rank if rank is not None else rank_from_filename(name)
    stripped = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    form = "pickle" if data[:1] == b"\x80" else "json" if stripped[:1] in (b"{", b"[") else "unknown"
    if len(data) > max_bytes:
        return _empty(name, rank, form, f"{len(data)} bytes is over the {max_bytes}-byte bound; not read")
    notes: list[str] = []
    cut: frozenset[int] = frozenset()
    complete = True
    obj: object = None
    if form == "pickle":
        try:
            obj = safe_loads(data, max_bytes=max_bytes)
        except (RefusedPickleGlobal, PickleTooLarge) as e:
            # a pickle that tries to import anything is hostile or not ours: nothing in it is used
            return _empty(name, rank, form, str(e))
        except Exception as first:                      # truncated / damaged: keep what precedes the break
            try:
                sv = salvage_loads(data, max_bytes=max_bytes)
            except RefusedPickleGlobal as e:
                return _empty(name, rank, form, str(e))
            obj, cut, complete = sv.value, sv.cut, sv.complete
            why = sv.error or " ".join(str(first).split()) or type(first).__name__
            notes.append(f"truncated or damaged pickle ({why}): read what precedes the break")
    elif form == "json":
        obj, complete, error = _load_json(stripped)
        if not complete:
            notes.append(f"truncated or damaged JSON ({error}): read what precedes the break")
    elif not _OLD_PICKLE_RE.match(data):
        return _empty(name, rank, form, "neither a pickle nor a JSON object")
    else:
        # torch writes protocol 2, but a protocol 0/1 pickle has no header: read it (safely) all the same,
        # so that a hostile one is named as such
        try:
            obj = safe_loads(data, max_bytes=max_bytes)
            form = "pickle"
        except (RefusedPickleGlobal, PickleTooLarge) as e:
            return _empty(name, rank, "pickle", str(e))
        except Exception:
            return _empty(name, rank, form, "neither a pickle nor a JSON object")
    if not isinstance(obj, dict):
        return _empty(name, rank, form, f"top level is {type(obj).__name__}, not a dict", *notes)
    return _build(obj, name, rank, form, cut, complete, notes)


def _empty(name: str, rank: int | None, form: str, *notes: str) -> FlightRecorderDump:
    return FlightRecorderDump(name, rank, form, None, None, None, {}, {}, (), 0, 0, False,
                              tuple(f"{_label(name, rank)}: {n}" for n in notes))


def _load_json(data: bytes) -> tuple[object, bool, str | None]:
    text = data.decode("utf-8", errors="replace")
    try:
        return json.loads(text), True, None
    except (ValueError, RecursionError) as e:
        error = " ".join(str(e).split())
    # Salvage: each top-level value on its own, then the entries one by one up to the break.
    dec = json.JSONDecoder()
    obj: dict[str, object] = {}
    for key in ("version", "nccl_version", "comm_lib_version", "pg_config", "pg_status"):
        m = re.search(rf'"{key}"\s*:\s*', text)
        if m:
            try:
                obj[key] = dec.raw_decode(text, m.end())[0]
            except (ValueError, RecursionError):
                continue
    m = re.search(r'"entries"\s*:\s*\[', text)
    if m:
        entries: list[object] = []
        ws = re.compile(r"[\s,]*")
        pos = ws.match(text, m.end()).end()
        while pos < len(text) and text[pos] != "]":
            try:
                item, pos = dec.raw_decode(text, pos)
            except (ValueError, RecursionError):
                break
            entries.append(item)
            pos = ws.match(text, pos).end()
        obj["entries"] = entries
    return (obj if obj else None), False, error


# -- typed records -----------------------------------------------------------------------------------


def _frames(v: object, where: str, bad: Problems) -> tuple[FrFrame, ...]:
    if v is None:
        return ()
    if not isinstance(v, (list, tuple)):
        bad.add(where, "frames", v)
        return ()
    out = []
    for f in v:
        if not isinstance(f, dict):
            bad.add(where, "frame", f)
            continue
        out.append(FrFrame(as_str(f.get("name"), where, "frame name", bad) or "",
                           as_str(f.get("filename"), where, "frame filename", bad),
                           as_int(f.get("line"), where, "frame line", bad)))
    return tuple(out)


def _entry(raw: dict, index: int, bad: Problems) -> FrEntry:
    where = f"entry {index}"
    g = raw.get
    pg = g("process_group")
    pg_name = pg_desc = None
    if isinstance(pg, (list, tuple)) and pg:
        pg_name = as_str(pg[0], where, "process_group name", bad, numbers=True)
        pg_desc = as_str(pg[1], where, "process_group desc", bad) if len(pg) > 1 else None
    elif pg is not None:
        pg_name = as_str(pg, where, "process_group", bad, numbers=True)
    if pg_desc == "undefined":                               # torch's placeholder for "no description"
        pg_desc = None
    prof = as_str(g("profiling_name"), where, "profiling_name", bad) or ""
    backend_m = re.match(r"^([A-Za-z]+):", prof)
    op = prof[backend_m.end():] if backend_m else prof
    p2p = as_bool(g("is_p2p"), where, "is_p2p", bad)
    if p2p is None:                                          # dumps before is_p2p: the op name tells
        p2p = op.split(" ", 1)[0] in _P2P_OPS
    state = as_str(g("state"), where, "state", bad)
    seq = g("collective_seq_id", g("seq_id"))                # 'seq_id' in the earliest versions
    return FrEntry(
        index=index,
        record_id=as_int(g("record_id"), where, "record_id", bad),
        pg_id=as_int(g("pg_id"), where, "pg_id", bad),
        pg_name=pg_name, pg_desc=pg_desc,
        collective_seq_id=as_int(seq, where, "collective_seq_id", bad),
        p2p_seq_id=as_int(g("p2p_seq_id"), where, "p2p_seq_id", bad),
        op_id=as_int(g("op_id"), where, "op_id", bad),
        op=op, is_p2p=p2p,
        input_sizes=as_sizes(g("input_sizes"), where, "input_sizes", bad),
        output_sizes=as_sizes(g("output_sizes"), where, "output_sizes", bad),
        input_dtypes=as_strs(g("input_dtypes"), where, "input_dtypes", bad),
        output_dtypes=as_strs(g("output_dtypes"), where, "output_dtypes", bad),
        state=state.lower() if state else None,
        time_created_ns=as_ns(g("time_created_ns"), where, "time_created_ns", bad),
        time_discovered_started_ns=as_ns(g("time_discovered_started_ns"), where,
                                         "time_discovered_started_ns", bad),
        time_discovered_completed_ns=as_ns(g("time_discovered_completed_ns"), where,
                                         "time_discovered_completed_ns", bad),
        timeout_ms=as_int(g("timeout_ms"), where, "timeout_ms", bad),
        retired=as_bool(g("retired"), where, "retired", bad),
        thread_id=as_str(g("thread_id"), where, "thread_id", bad, numbers=True),
        thread_name=as_str(g("thread_name"), where, "thread_name", bad),
        frames=_frames(g("frames"), where, bad),
        backend=backend_m.group(1).lower() if backend_m else None,
    )


def _alias_unnamed_group(groups: dict[str, FrGroup], entries: list[FrEntry]) -> dict[str, FrGroup]:
    """Tie a ``pg_config`` item to the entries' group when the names cannot: gloo's default group is
    keyed ``''`` in ``pg_config`` (torch 2.13) while its entries name it ``('0', 'default_pg')``.  Only
    a one-to-one leftover is tied (one config no entry names, one entry group no config names)."""
    named = {e.group for e in entries} - {None}
    spare_cfg = [k for k in groups if k not in named]
    spare_pg = sorted(n for n in named if n not in groups)
    if len(spare_cfg) != 1 or len(spare_pg) != 1:
        return groups
    cfg, pg = groups[spare_cfg[0]], spare_pg[0]
    desc = cfg.desc or next((e.pg_desc for e in entries if e.group == pg and e.pg_desc), None)
    return {**groups, pg: FrGroup(pg, desc, cfg.ranks)}

def _groups(raw: object, bad: Problems) -> dict[str, FrGroup]:
    if not isinstance(raw, dict):
        if raw is not None:
            bad.add("pg_config", "pg_config", raw)
        return {}
    out: dict[str, FrGroup] = {}
    for key, val in raw.items():
        where = f"pg_config[{short_repr(key)}]"
        if isinstance(val, dict):
            name = as_str(val.get("name", key), where, "name", bad, numbers=True) or str(key)
            desc = as_str(val.get("desc"), where, "desc", bad)
            desc = None if desc == "undefined" else desc
            ranks_raw = val.get("ranks")
        else:                                                # older layouts: the rank list itself
            name, desc, ranks_raw = str(key), None, val
        ranks: tuple[int, ...] | None = None
        if isinstance(ranks_raw, str):
            ranks = parse_rank_list(ranks_raw)
        elif isinstance(ranks_raw, (list, tuple)) and all(isinstance(r, int) and not isinstance(r, bool)
                                                          for r in ranks_raw):
            ranks = tuple(ranks_raw)
        elif ranks_raw is not None:
            bad.add(where, "ranks", ranks_raw)
        out[name] = FrGroup(name, desc, ranks)
    return out


def _status(raw: object, bad: Problems) -> dict[str, FrStatus]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, FrStatus] = {}
    for key, val in raw.items():
        if not isinstance(val, dict):
            bad.add("pg_status", "status", val)
            continue
        where = f"pg_status[{short_repr(key)}]"
        out[str(key)] = FrStatus(str(key), None,
                                 as_int(val.get("last_enqueued_collective"), where, "last_enqueued", bad),
                                 as_int(val.get("last_started_collective"), where, "last_started", bad),
                                 as_int(val.get("last_completed_collective"), where, "last_completed", bad))
    return out


def _resolve_status(status: dict[str, FrStatus], entries: list[FrEntry],
                    groups: dict[str, FrGroup]) -> tuple[dict[str, FrStatus], list[str]]:
    """Tie each pg_status key (a PG ID) to a group name: through an entry with that ``pg_id``; else, when
    every entry of the dump has its ID equal to its name (groups made in order, no split), the key is
    taken as the name.  PG IDs are per-process numbering, so nothing else is assumed."""
    by_id = {str(e.pg_id): e.pg_name for e in entries if e.pg_id is not None and e.pg_name}
    ids_are_names = all(k == v for k, v in by_id.items())
    out: dict[str, FrStatus] = {}
    unresolved: list[str] = []
    for key, st in status.items():
        pg = by_id.get(key) or (key if ids_are_names and key in groups else None)
        if pg is None:
            unresolved.append(key)
        out[key] = FrStatus(key, pg, st.last_enqueued, st.last_started, st.last_completed)
    return out, unresolved


def _build(obj: dict, name: str, rank: int | None, form: str, cut: frozenset[int], complete: bool,
           notes: list[str]) -> FlightRecorderDump:
    bad = Problems()
    version = as_str(obj.get("version"), "top level", "version", bad, numbers=True)
    nccl = as_str(obj.get("nccl_version"), "top level", "nccl_version", bad, numbers=True)
    comm = as_str(obj.get("comm_lib_version"), "top level", "comm_lib_version", bad, numbers=True)
    groups = _groups(obj.get("pg_config"), bad)
    status = _status(obj.get("pg_status"), bad)
    raw_entries = obj.get("entries")
    entries: list[FrEntry] = []
    skipped = cut_off = unnumbered = 0
    if raw_entries is None:
        notes.append("no entries")
        raw_entries = []
    elif not isinstance(raw_entries, (list, tuple)):
        notes.append(f"entries is a {type(raw_entries).__name__}, not a list")
        raw_entries = []
    for i, raw in enumerate(raw_entries):
        if id(raw) in cut:
            cut_off += 1
        elif not isinstance(raw, dict):
            skipped += 1
            bad.add(f"entry {i}", "entry", raw)
        else:
            e = _entry(raw, i, bad)
            entries.append(e)
            if e.seq is None or not (e.pg_name or e.pg_id is not None):
                unnumbered += 1
    if cut_off:
        notes.append("the last entry was cut off and dropped" if cut_off == 1 else
                     f"{cut_off} entries were cut off and dropped")
    if unnumbered:
        notes.append(f"{unnumbered} entr{'y names' if unnumbered == 1 else 'ies name'} no process group or "
                     f"sequence number: kept, but in no collectives row")
    if bad.count:
        notes.append(f"{bad.count} value{'s' if bad.count > 1 else ''} of the wrong type ignored "
                     f"({'; '.join(bad.examples)}{'; …' if bad.count > len(bad.examples) else ''})")
    groups = _alias_unnamed_group(groups, entries)
    status, unresolved = _resolve_status(status, entries, groups)
    if unresolved:
        notes.append(f"pg_status of PG ID {', '.join(unresolved)} names no group this dump can tie it to: "
                     f"not used")
    if id(obj) in cut and "pg_config" not in obj:
        notes.append("pg_config was not reached: group members unknown")
    return FlightRecorderDump(name, rank, form, version, nccl or comm, comm, groups, status, tuple(entries),
                              len(raw_entries), skipped + cut_off, complete,
                              tuple(f"{_label(name, rank)}: {n}" for n in notes))

__all__ = ["SOURCE", "FlightRecorderDump", "FrEntry", "FrFrame", "FrGroup", "FrStatus", "collective_rows",
           "looks_like_flight_recorder", "parse_flight_recorder", "position_entries", "rank_from_filename",
           "read_flight_recorder", "stack_dump"]
