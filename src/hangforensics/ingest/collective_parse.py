"""Collective-level evidence files as row batches: PyTorch Flight Recorder dumps and NCCL RAS reports.

Both go to ``collective_records`` (the ``collectives`` view); a dump's recorded call stacks also go to
``stacks``/``frames``, and what RAS singles out about a rank (lagging, dead, missing, an error) becomes an
``events`` row of kind ``nccl_ras`` on the line that says it.  Every record or line is either represented
by a row or kept in ``unparsed``, so ``lines = parsed_lines + unparsed_lines`` holds; for a dump a
"line" is one ring-buffer entry (interface.md §1: for a binary file, ``lines`` counts records).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..parsers.collectives import flight_recorder as fr
from ..parsers.collectives import fr_trace_text, nccl_ras, nccl_ras_json
from ..parsers.collectives.collective_rows import CollectiveRow, ts_from_ns
from ..parsers.collectives.safe_pickle import MAX_PICKLE_BYTES
from ..parsers.linemap import LineMap
from ..parsers.stacks.stackrows import dump_rows
from ..readers.envelopes import EnvelopeStack
from ..readers.layout import EvidenceFile
from ..readers.logfile import open_binary
from ..readers.payload import read_payload
from .jobs import FileOutcome
from .torch_lines import torch_records


def record_row(engine: str, path: str, r: CollectiveRow, **extra: Any) -> dict[str, Any]:
    """A ``collective_records`` row: the view's key columns, the rest in ``attrs``."""
    attrs = {"seq_kind": r.seq_kind, "records": r.records}
    if r.input_sizes:
        attrs.update(input_sizes=[list(s) for s in r.input_sizes], input_dtypes=list(r.input_dtypes),
                     output_sizes=[list(s) for s in r.output_sizes], output_dtypes=list(r.output_dtypes))
    if r.inferred:
        attrs["inferred"] = True
    if r.reason:
        attrs["reason"] = r.reason
    attrs.update({k: v for k, v in extra.items() if v is not None})
    return {"engine": engine, "path": path, "line": r.line, "source": r.source, "rank": r.rank, "pg": r.pg,
            "pg_desc": r.pg_desc, "pg_ranks": list(r.pg_ranks) if r.pg_ranks is not None else None,
            "seq": r.seq, "op": r.op, "state": r.state, "ts": r.ts, "attrs": json.dumps(attrs)}


# -- Flight Recorder ------------------------------------------------------------------------------------


def parse_flight_recorder_file(f: EvidenceFile, out: FileOutcome) -> Iterator[tuple[str, list[dict]]]:
    """One rank's dump (pickle or JSON): its entries, its stacks, and a note for whatever was odd.

    A refused pickle (it names a global: hostile, or not a dump) loads nothing and runs nothing; the
    file's status and note say so in one line.
    """
    with open_binary(f.abs_path) as fh:            # a gzipped dump reads as the dump
        data = fh.read(MAX_PICKLE_BYTES + 1)
    name = f.abs_path.name[:-3] if f.abs_path.name.endswith(".gz") else f.abs_path.name
    dump = fr.parse_flight_recorder(data, name)
    out.read_bytes = len(data)
    refused = next((n for n in dump.notes if "refused pickle global" in n), None)
    if refused is not None:
        out.status = "refused: " + refused.split(": ", 1)[-1]
    timeouts = {e.timeout_ms for e in dump.entries if e.timeout_ms}
    records = [record_row(f.engine, f.rel_path, r, clock="utc", form=dump.form,
                          timeout_ms=max(timeouts) if timeouts else None) for r in fr.collective_rows(dump)]
    stacks: list[dict] = []
    frames: list[dict] = []
    sd = fr.stack_dump(dump)
    if sd.threads:
        newest = max((e.time_created_ns or 0 for e in dump.entries), default=0)
        # the dump's own time: its newest entry (UTC; the stacks view adds the file's clock offset)
        dump_rows(sd, f"{f.engine}:{f.rel_path}", f.engine, f.rel_path, ts_from_ns(newest),
                  sd.processes[0].rank or "", "standalone", stacks, frames)
    used = {e.index for e in dump.entries}
    unparsed = [{"engine": f.engine, "path": f.rel_path, "line": i + 1,
                 "text": f"(entry {i + 1} of the dump: cut off or not a record, not read)"}
                for i in range(dump.records) if i not in used]
    out.lines, out.unparsed = dump.records, len(unparsed)
    out.notes.extra.extend(n.split(": ", 1)[-1] for n in dump.notes)
    if dump.rank is None and dump.entries:
        out.notes.extra.append("the file name ends in no rank number: its entries name no rank")
    yield "collective_records", records
    yield "stacks", stacks
    yield "frames", frames
    yield "unparsed", unparsed


# -- NCCL RAS -----------------------------------------------------------------------------------------


def parse_ras_file(f: EvidenceFile, out: FileOutcome, envelope: EnvelopeStack | None = None,
                   year_near: float | None = None) -> Iterator[tuple[str, list[dict]]]:
    """``ncclras`` output (pasted or wrapped too: the envelope is stripped first): per-communicator counts
    and absent ranks as collective records, what NCCL singles out about a rank as ``nccl_ras`` events,
    lines of no known meaning in ``unparsed`` (``year_near``: ``FileJob.year_near``)."""
    mtime = f.abs_path.stat().st_mtime
    pay, out.read_bytes = read_payload(f.abs_path, out.notes, envelope, mtime, year_near)
    out.envelope = pay.stack_name
    lines = pay.lines
    as_json = nccl_ras_json.looks_like_nccl_ras_json(lines)      # ncclras -f json (NCCL 2.28+)
    rep = nccl_ras_json.parse_nccl_ras_json(lines, 1) if as_json else nccl_ras.parse_nccl_ras(lines, 1)
    # the job's size says whether a communicator's ranks are global ones (a communicator of every GPU)
    where = {"nccl_version": rep.nccl_version, "job_gpus": rep.jobs[0].gpus if len(rep.jobs) == 1 else None}
    records = [record_row(f.engine, f.rel_path, r, **where) for r in rep.rows]
    events = [_odd_rank_event(f, o, lines, rep) for o in rep.odd_ranks]
    if as_json:                                  # a JSON line says less than the fact
        for e, o in zip(events, rep.odd_ranks, strict=True):
            e["message"] = o.reason
    # torch's own lines pasted beside the report (a rank's ProcessGroupNCCL timeout): read as the log they are
    torch, taken = torch_records(pay, _runs(rep.unmatched), f, mtime, year_near)
    unparsed = pay.unparsed_rows(f.engine, f.rel_path, [pay.at(i) for i in rep.unmatched if i not in taken])
    if not pay.plain:                            # payload lines -> the file's physical lines
        assert pay.line is not None
        remap = LineMap(1, pay.line, pay.collected_ts)
        remap.dicts(records)
        remap.dicts(events, ("line", "line_end"))
    out.lines, out.unparsed = pay.physical, len(unparsed)
    if rep.healthy and not rep.rows and not rep.odd_ranks:
        out.notes.extra.append("NCCL RAS: every communicator OK, nothing under Errors or Warnings")
    yield "collective_records", records
    yield "events", events
    yield from torch.items()
    yield "unparsed", unparsed


def _runs(idx: list[int]) -> list[list[int]]:
    """Sorted line indexes as runs of consecutive ones."""
    out: list[list[int]] = []
    for i in sorted(idx):
        if out and out[-1][-1] == i - 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _odd_rank_event(f: EvidenceFile, o: nccl_ras.RasOddRank, lines: list[str],
                    rep: nccl_ras.RasReport) -> dict[str, Any]:
    line = o.line or 1
    attrs = {"relation": o.relation, "rank": o.rank, "comm": o.comm_hash, "reason": o.reason, "op": o.op,
             "count": o.count, "node": o.node, "pid": o.pid, "gpu": o.gpu, "nccl_version": rep.nccl_version}
    return {"engine": f.engine, "path": f.rel_path, "line": line, "line_end": line, "ts": None,
            "rank": f"rank{o.rank}" if o.rank is not None else "", "kind": "nccl_ras",
            "message": lines[line - 1].strip()[:2000] if 0 < line <= len(lines) else o.reason,
            "attrs": json.dumps({k: v for k, v in attrs.items() if v is not None})}


# -- torch's fr_trace analyzer output ------------------------------------------------------------------


def parse_fr_trace_file(f: EvidenceFile, out: FileOutcome, envelope: EnvelopeStack | None = None,
                        year_near: float | None = None) -> Iterator[tuple[str, list[dict]]]:
    """The text of torch's Flight Recorder analyzer (pasted or wrapped: the envelope is stripped first): the
    collectives it reports on as collective records (source ``fr_trace``), lines of no known meaning in
    ``unparsed`` (``year_near``: ``FileJob.year_near``)."""
    pay, out.read_bytes = read_payload(f.abs_path, out.notes, envelope, f.abs_path.stat().st_mtime, year_near)
    out.envelope = pay.stack_name
    rep = fr_trace_text.parse_fr_trace(pay.lines, 1)
    records = [record_row(f.engine, f.rel_path, r, clock="utc" if r.ts is not None else None) for r in rep.rows]
    unparsed = pay.unparsed_rows(f.engine, f.rel_path, [pay.at(i) for i in rep.unmatched])
    if not pay.plain:                            # payload lines -> the file's physical lines
        assert pay.line is not None
        LineMap(1, pay.line, pay.collected_ts).dicts(records)
    out.lines, out.unparsed = pay.physical, len(unparsed)
    out.notes.extra.extend(f"fr_trace: {n}" for n in rep.notes)
    if rep.no_dump:
        out.notes.extra.append(f"fr_trace had no Flight Recorder dump from ranks {list(rep.no_dump)}")
    yield "collective_records", records
    yield "unparsed", unparsed
