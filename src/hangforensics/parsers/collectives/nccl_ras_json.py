"""NCCL RAS reports in JSON: what ``ncclras --format json`` (``-f json``, NCCL 2.28+) prints.

The layout, as NCCL writes it (``src/ras/client_support.cc``: ``jsonWriteHeader``, ``jsonStartCommunicator``,
``jsonWriteRankData``, ``jsonWriteMissingRank``, ``jsonWriteFooter``; only the document, no job summary)::

    {
      "nccl_version": "2.28.7",
      "cuda_runtime_version": 12090,
      "cuda_driver_version": 12090,
      "timestamp": "2026-03-14 09:27:05",
      "communicators_count": 1,
      "communicators": [
        {
          "hash": "0x9e0f2d41c8b7a613",               (%lx: no leading zeros; the text prints %016lx)
          "secondary_hash": "0x…:0x…",
          "size": 8,
          "ranks_count": 7,
          "missing_ranks_count": 1,
          "ranks": [
            {"rank": 0, "host": "10.15.83.92", "pid": 412005, "cuda_dev": 0, "nvml_dev": 0,
             "status": {"init_state": 0, "async_error": 0, "finalize_called": false, "destroy_flag": false,
                        "abort_flag": false},
             "collective_counts": {"Broadcast": 20418, "Reduce": 0, "AllGather": 0, "ReduceScatter": 0,
                                   "AllReduce": 733120}},
            …
          ],
          "missing_ranks": [
            {"rank": 6, "host": "10.20.4.13", "pid": 51234, "cuda_dev": 2, "nvml_dev": 2,
             "status": {"unresponsive": true, "considered_dead": true}}
          ]
        }
      ],
      "ras": {"collection_time_sec": 0.420, "timeouts_count": 0}
    }

The text form reports what NCCL concludes from the same data (``rasClientRunComms``); the JSON gives the data.
Read so that the same situation gives the same records (:mod:`.nccl_ras`):

* a collective type whose counts differ between a communicator's ranks (the text's ``MISMATCH`` block,
  ``Communicator ranks have different AllReduce operation counts``) gives a ``launched`` row per rank,
  op = the type, seq = its count; types every rank agrees on give none, as the text prints none;
* a missing rank (the text's ``INCOMPLETE`` block, ``The missing rank: 6``, and its process under ``DEAD``)
  gives a row in state ``dead`` when NCCL considers its process dead, else ``missing`` when it did not
  answer; a rank whose process answered but holds no such communicator (destroyed or aborted: the text's
  ``NOCOMM`` status mismatch) gets no row, as the text gives none, only a fact;
* an initialisation or asynchronous error, or a status apart from the others (abort, finalize), is a
  fact about the rank (the text's ``ERROR`` block and status lines), not a row.

``pg`` is the communicator hash as the text prints it (16 hex digits), ``pg_desc`` the communicator's
place in the document (``comm 0``: the JSON has no ``#group-index``), ``pg_ranks`` 0 .. size-1; ranks are
the communicator's own, global only for a communicator spanning the job.  Each row and fact points at
the line of its rank's ``"rank":`` key (the document's layout is NCCL's fixed indentation; a document
reformatted onto fewer lines points at the communicator's line, or the first).
"""

from __future__ import annotations

import json
import re
from collections import Counter

from .collective_rows import CollectiveRow
from .nccl_ras import SOURCE, RasOddRank, RasReport

NCCL_IN_PROGRESS = 7                            # ncclInProgress: neither success nor an error
MAX_RANKS = 1 << 20                             # a communicator size beyond any job's: not believed
START_RE = re.compile(r"^\s*\{\s*$")
VERSION_KEY_RE = re.compile(r'^\s*"nccl_version"\s*:\s*"[^"]*"\s*,?\s*$')
COMMS_KEY_RE = re.compile(r'^\s*"communicators(?:_count)?"\s*:')
HASH_KEY_RE = re.compile(r'^\s*"hash"\s*:\s*"(?P<hash>0x[0-9a-fA-F]+)"')
RANK_KEY_RE = re.compile(r'^\s*"rank"\s*:\s*(?P<rank>-?\d+)\s*,?\s*$')
MISSING_KEY_RE = re.compile(r'^\s*"missing_ranks"\s*:\s*\[')


def looks_like_nccl_ras_json(lines: list[str]) -> bool:
    """``ncclras -f json``: a JSON object opening with its ``nccl_version`` key, with ``communicators``
    within the first lines."""
    head = [s for s in lines[:60] if s.strip()]
    for i, s in enumerate(head):
        if START_RE.match(s) or s.strip().startswith('{"nccl_version"'):
            rest = head[i:i + 12] if START_RE.match(s) else [s]
            return any(VERSION_KEY_RE.match(x) or '"nccl_version"' in x for x in rest[:3]) and \
                any(COMMS_KEY_RE.match(x) or '"communicators"' in x for x in rest)
    return False


KEY_LINE_RE = re.compile(r'^\s*"[^"\n]*"\s*:')
VALUE_END = tuple('0123456789"el}]')


def _repaired(lines: list[str]) -> list[str]:
    """The lines with the commas NCCL 2.28.9 leaves out inside ``missing_ranks`` put back: a line ending in a
    value followed by a line opening with a key (a line's length is kept but for the comma)."""
    out = list(lines)
    for i in range(len(out) - 1):
        s = out[i].rstrip()
        if s.endswith(VALUE_END) and KEY_LINE_RE.match(out[i + 1]):
            out[i] = s + ","
    return out


def _document(lines: list[str]) -> tuple[int, int, dict] | None:
    """The offsets of the document's first and last line (from its opening brace to the line where the JSON
    decoder says it ends) and the document; a document missing commas between lines is read repaired."""
    for i, s in enumerate(lines):
        if START_RE.match(s) or s.strip().startswith('{"nccl_version"'):
            for candidate in (lines[i:], _repaired(lines[i:])):
                text = "\n".join(candidate)
                try:
                    doc, end = json.JSONDecoder().raw_decode(text)
                except ValueError:
                    continue
                return (i, i + text.count("\n", 0, end), doc) if isinstance(doc, dict) else None
            return None
    return None


def _hash(h: str) -> str:
    """'0x9e0f2d41c8b7a613' -> '9e0f2d41c8b7a613', as the text prints it (%016lx)."""
    return h.lower().removeprefix("0x").zfill(16)


def _lines_of(lines: list[str], start: int, end: int, first_line: int) -> list[tuple[int, list[int], list[int]]]:
    """Per communicator in document order: the line of its hash, its ranks' lines, its missing ranks' lines."""
    out: list[tuple[int, list[int], list[int]]] = []
    in_missing = False
    for i in range(start, end + 1):
        s = lines[i]
        if HASH_KEY_RE.match(s):
            out.append((first_line + i, [], []))
            in_missing = False
        elif MISSING_KEY_RE.match(s):
            in_missing = True
        elif out and RANK_KEY_RE.match(s):
            out[-1][2 if in_missing else 1].append(first_line + i)
    return out


def parse_nccl_ras_json(lines: list[str], first_line: int = 1) -> RasReport:
    """Read the JSON document among ``lines`` (prose around it is returned unmatched); ``first_line`` is the
    file line number of ``lines[0]``.  A document that does not decode is returned whole as unmatched."""
    found = _document(lines)
    if found is None:
        return RasReport(None, None, None, None, (), (), (), (), (), frozenset(), tuple(range(len(lines))))
    start, end, doc = found
    where = _lines_of(lines, start, end, first_line)
    odd: list[RasOddRank] = []
    rows: list[CollectiveRow] = []
    comms = doc.get("communicators") if isinstance(doc.get("communicators"), list) else []
    for ci, comm in enumerate(c for c in comms if isinstance(c, dict)):
        at = where[ci] if ci < len(where) else (first_line + start, [], [])
        o, r = _communicator(ci, comm, at)
        odd += o
        rows += r
    timeouts = (doc.get("ras") or {}).get("timeouts_count") if isinstance(doc.get("ras"), dict) else None
    if timeouts:
        odd.append(RasOddRank(None, None, "timeout", f"{timeouts} communication timeout(s) while gathering the "
                              f"communicator data", line=first_line + end))
    consumed = frozenset(range(start, end + 1))
    unmatched = tuple(i for i in range(len(lines)) if i not in consumed and lines[i].strip())
    blank = frozenset(i for i in range(len(lines)) if not lines[i].strip() and i not in consumed)
    runtime, driver = doc.get("cuda_runtime_version"), doc.get("cuda_driver_version")
    return RasReport(str(doc.get("nccl_version")) if doc.get("nccl_version") is not None else None, None,
                     runtime if isinstance(runtime, int) else None, driver if isinstance(driver, int) else None,
                     (), (), (), tuple(odd), tuple(rows), consumed | blank, unmatched)


def _int(v: object, default: int | None = None) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _communicator(ci: int, comm: dict, at: tuple[int, list[int], list[int]]) -> tuple[list[RasOddRank],
                                                                                      list[CollectiveRow]]:
    comm_line, rank_lines, missing_lines = at
    pg = _hash(str(comm.get("hash", f"0x{ci:x}")))
    desc = f"comm {ci}"
    size = _int(comm.get("size"))
    ranks = [r for r in comm.get("ranks") or [] if isinstance(r, dict) and _int(r.get("rank")) is not None]
    missing = [r for r in comm.get("missing_ranks") or [] if isinstance(r, dict) and _int(r.get("rank")) is not None]
    members = tuple(range(size)) if size and 0 < size <= MAX_RANKS else \
        tuple(sorted({_int(r["rank"]) for r in ranks + missing}))  # type: ignore[misc]
    odd: list[RasOddRank] = []
    rows: list[CollectiveRow] = []
    line_of = {id(r): (rank_lines[i] if i < len(rank_lines) else comm_line) for i, r in enumerate(ranks)}
    mline_of = {id(r): (missing_lines[i] if i < len(missing_lines) else comm_line) for i, r in enumerate(missing)}
    # per collective type: the counts, and whether the ranks disagree (the text's MISMATCH for that type)
    ops: dict[str, dict[int, int]] = {}
    for r in ranks:
        counts = r.get("collective_counts") if isinstance(r.get("collective_counts"), dict) else {}
        for op, n in counts.items():
            if _int(n) is not None:
                ops.setdefault(op, {})[r["rank"]] = n
    for op, by_rank in ops.items():
        if len(set(by_rank.values())) < 2:
            continue
        ref, top = Counter(by_rank.values()).most_common(1)[0]
        tie = sum(1 for v in Counter(by_rank.values()).values() if v == top) > 1
        for r in ranks:
            n = by_rank.get(r["rank"])
            if n is None:
                continue
            where = _where(r)
            rows.append(CollectiveRow(SOURCE, r["rank"], pg, n, op, "launched", pg_desc=desc, pg_ranks=members,
                                      seq_kind=op, reason=where, line=line_of[id(r)]))
            if not tie and n != ref:
                rel = "lagging" if n < ref else "ahead"
                odd.append(RasOddRank(
                    r["rank"], pg, rel, f"launched up to {op} operation {n}, {'behind' if rel == 'lagging' else 'ahead of'} "
                    f"the {top} ranks at {ref} by {abs(ref - n)}", op, n, _str(r.get("host")), _int(r.get("pid")),
                    _int(r.get("cuda_dev")), line_of[id(r)]))
    for r in missing:
        st = r.get("status") if isinstance(r.get("status"), dict) else {}
        dead, unresponsive = bool(st.get("considered_dead")), bool(st.get("unresponsive"))
        where = _where(r)
        line = mline_of[id(r)]
        if not dead and not unresponsive:
            odd.append(RasOddRank(r["rank"], pg, "status", f"rank {r['rank']} answered but reports no such "
                                  f"communicator (destroyed or aborted) -- {where}", node=_str(r.get("host")),
                                  pid=_int(r.get("pid")), gpu=_int(r.get("cuda_dev")), line=line))
            continue
        state = "dead" if dead else "missing"
        why = (f"its process {r.get('pid')} on node {r.get('host')} is considered dead (unreachable via the RAS "
               f"network)" if dead else f"no communicator data from it ({where})")
        rows.append(CollectiveRow(SOURCE, r["rank"], pg, None, "ALL", state, pg_desc=desc, pg_ranks=members,
                                  seq_kind="all", reason=f"NCCL RAS: {why}", line=line))
        odd.append(RasOddRank(r["rank"], pg, "dead" if dead else "missing", f"NCCL RAS: {why}",
                              node=_str(r.get("host")), pid=_int(r.get("pid")), gpu=_int(r.get("cuda_dev")), line=line))
    for r in ranks:
        st = r.get("status") if isinstance(r.get("status"), dict) else {}
        said = []
        for key, what in (("init_state", "initialization error"), ("async_error", "asynchronous error")):
            v = _int(st.get(key), 0)
            if v not in (0, NCCL_IN_PROGRESS):
                said.append(f"{what} {v}")
        if st.get("abort_flag"):
            said.append("aborted")
        elif st.get("finalize_called") or st.get("destroy_flag"):
            said.append("finalizing")
        if said:
            odd.append(RasOddRank(r["rank"], pg, "error" if any("error" in s for s in said) else "status",
                                  f"rank {r['rank']} {', '.join(said)} -- {_where(r)}", node=_str(r.get("host")),
                                  pid=_int(r.get("pid")), gpu=_int(r.get("cuda_dev")), line=line_of[id(r)]))
    return odd, rows


def _str(v: object) -> str | None:
    return v if isinstance(v, str) and v and v != "unknown" else None


def _where(r: dict) -> str:
    """'GPU 3 managed by process 3208488 on node 10.15.83.92', as the text's rank lines say it."""
    return f"GPU {r.get('cuda_dev')} managed by process {r.get('pid')} on node {r.get('host')}"


__all__ = ["looks_like_nccl_ras_json", "parse_nccl_ras_json"]
