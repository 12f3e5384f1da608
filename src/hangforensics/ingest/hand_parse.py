"""Rows of a file a reporter wrote by hand (``hand_summary``) or a ``/metrics`` excerpt (``metrics_text``):
see ``parsers/stacks/hand_summary.py``.

Each rank of a hand-abbreviated stack is one process (``stacks`` row, one thread, ``format`` =
``hand_summary``, no pid, no time: a person's summary was not taken at a moment the evidence gives) with its
frames; tables, timelines and Prometheus samples are ``events`` rows of their own kinds (``reporter_table``,
``reporter_timeline``, ``metrics_sample``) with what they say in ``attrs``.  The file is read as written: the
rank labels and the prose that introduces a block are part of what is read (a Markdown envelope would drop
them), so the quote markers and fences are handled by the parser; every line it does not use (prose, fences)
is kept in ``unparsed``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..parsers.stacks import hand_summary
from ..readers.envelopes import NONE
from ..readers.payload import read_payload

if TYPE_CHECKING:
    from ..readers.envelopes import EnvelopeStack
    from ..readers.layout import EvidenceFile
    from .jobs import FileOutcome


def parse_reporter_file(f: EvidenceFile, kind: str, out: FileOutcome,
                        envelope: EnvelopeStack | None = None) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    pay, out.read_bytes = read_payload(f.abs_path, out.notes, NONE, None)
    out.envelope = envelope.name if envelope is not None else pay.stack_name
    reading = hand_summary.read(list(pay.lines))
    stacks, frames, events = stack_rows(reading, f.engine, f.rel_path), [], event_rows(reading, f.engine, f.rel_path)
    for k, s in enumerate(reading.stacks):
        did = stacks[k]["dump_id"]
        frames += [{"dump_id": did, "thread_id": "0", "depth": d, "function": fr.function, "file": fr.file,
                    "line": fr.line, "native": fr.native, "library": None} for d, fr in enumerate(s.frames)]
    un = pay.unparsed_rows(f.engine, f.rel_path, [i + 1 for i in range(len(pay.lines)) if i not in reading.consumed])
    out.lines, out.unparsed = pay.physical, len(un)
    if reading.stacks:
        ranks = ", ".join(dict.fromkeys(s.label for s in reading.stacks))
        out.notes.extra.append(f"stacks summarised by hand ({ranks}): a person's few function names per rank, "
                               f"not a capture (no thread, no time, frames left out)")
    if kind == "hand_summary" and any(r.kind != "metrics_sample" for r in reading.rows):
        out.notes.extra.append("a table or timeline a reporter made: read as facts for the summary, not as "
                               "log records")
    if un:
        out.notes.extra.append(f"{len(un)} line(s) of prose or markup around it kept in unparsed")
    yield "stacks", stacks
    yield "frames", frames
    if events:
        yield "events", events
    yield "unparsed", un


def stack_rows(reading: hand_summary.Reading, engine: str, path: str) -> list[dict[str, Any]]:
    """One ``stacks`` row per rank (a label ``TP1-3`` is three processes)."""
    return [{
        "engine": engine, "dump_id": f"{engine}:{path}#hand{k}", "thread_id": "0", "ts": None, "rank": s.rank,
        "pid": None, "thread_name": None, "thread_state": None, "path": path, "line": s.line + 1,
        "process_title": f"{s.label} (summarised by hand)", "capture": "standalone", "format": hand_summary.FORMAT,
        "garbled": False, "ts_basis": None, "line_end": s.line_end + 1, "fragment": None,
    } for k, s in enumerate(reading.stacks)]


def event_rows(reading: hand_summary.Reading, engine: str, path: str) -> list[dict[str, Any]]:
    """Tables, timelines and Prometheus samples: undated (a reporter's clock column has no date, a scrape's
    time is not printed), rank '' (a table's ranks are in ``attrs``)."""
    return [{"engine": engine, "path": path, "line": r.line + 1, "line_end": (r.line_end or r.line) + 1, "ts": None,
             "rank": "", "kind": r.kind, "message": r.message[:2000], "attrs": json.dumps(r.attrs)}
            for r in reading.rows]
