"""torch ProcessGroupNCCL lines inside a file of another kind (a native trace, an NCCL RAS report): read by the
server-log parser as the log records they are.  Shared by the stack and collective readers."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ..parsers.collectives import torch_nccl
from ..readers.layout import EvidenceFile
from ..readers.payload import Payload

# Where a dump's or a report's own grammar leaves a torch ProcessGroupNCCL line (glog, or the message as an
# exception's 'what():' text), the line is a log record all the same.
TORCH_LINE = re.compile(torch_nccl.GLOG_RE.pattern + "|" + torch_nccl.WHAT_RE.pattern.replace("(?P<", "(?P<w_"))


def torch_records(pay: Payload, runs: list[list[int]], f: EvidenceFile, mtime: float | None,
                  year_near: float | None = None) -> tuple[dict[str, Any], set[int]]:
    """The log records in ``runs`` (runs of consecutive payload lines of a file of another kind, each read from
    its first torch ProcessGroupNCCL line on), read by the server-log parser as a log of their own: its tables
    (rows numbered by the file's lines) and the payload lines its records took.  Their year-less times are
    dated near ``year_near`` (the engine's dated evidence), else by ``mtime``."""
    runs = [r[k:] for r in runs if (k := next((j for j, i in enumerate(r) if TORCH_LINE.match(pay.lines[i])), -1)) >= 0]
    if not runs:
        return {}, set()
    from ..parsers.sglang.sglang_log import FileContext, parse_chunk

    idx = [i for r in runs for i in r]
    ctx = FileContext.of_file(f.engine, f.rel_path, mtime if mtime is not None else datetime.now().timestamp(),
                              year_near)
    collected = [pay.collected_ts[i] for i in idx] if pay.collected_ts is not None else [None] * len(idx)
    parsed = parse_chunk([pay.lines[i] for i in idx], 1, ctx, [pay.at(i) for i in idx], collected, head_what=True)
    tables = {k: v for k, v in parsed.tables.items() if k != "unparsed"}
    left = set(parsed.tables["unparsed"].get_column("line").to_list())
    return tables, {i for i in idx if pay.at(i) not in left}
