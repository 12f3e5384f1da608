"""A training or inference job's own progress lines: a dated line that names a step or iteration number.

A torch.distributed job logs its progress its own way; what every such log has in common is a time at
the start of the line (Python ``logging``'s ``asctime``, a bracketed time, after torchrun's ``[rankN]:``
prefix or not) and a step / iteration number somewhere after it::

    2026-12-04 15:46:59,316 INFO [rank1] step 3 done loss=0.2500
    [2024-05-03 10:12:11] iteration       10/     100 | consumed samples: 640 | ...
    [rank0]: 2025-01-07 08:00:01.250 | INFO | train:77 - Step: 120, loss 1.73

These are forward progress for the job (interface.md §3: "its log's step lines advancing"): the view
``progress`` takes them beside SGLang's batch lines, so stalls, freezes and the snapshots' "stuck" are
judged on them.  A line without a time says nothing about when, and is left to the other readers.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

# The record start (Rust regex and Python ``re`` alike): an optional torchrun prefix, a date and a time at
# the line's start (bracketed or not), then a step or iteration number on the same line.
STEP_LINE = (r"^(?:\[rank\d+\]: ?)?\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?[ |]"
             r".*?\b(?:[Ss]tep|STEP|[Ii]ter(?:ation)?|ITER(?:ATION)?)\b\s*[:=#]?\s*\d+")

_TIME_RE = re.compile(r"^(?:\[rank\d+\]: ?)?\[?(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d+))?")
_STEP_RE = re.compile(r"\b(?:step|iter(?:ation)?)\b\s*[:=#]?\s*(\d+)", re.I)
# the global rank the line names: torchrun's prefix, or a logging format's '[rank3]' / 'rank3'
_RANK_RE = re.compile(r"\[rank(\d+)\]|\brank(\d+)\b")


def step_line(text: str) -> tuple[datetime | None, int | None, dict[str, Any]]:
    """(time, global rank, attrs with ``step``) of a progress line."""
    ts = None
    m = _TIME_RE.match(text)
    if m:
        frac = (m.group(3) or "")[:6].ljust(6, "0")
        try:
            ts = datetime.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H:%M:%S").replace(
                microsecond=int(frac))
        except ValueError:
            ts = None
    r = _RANK_RE.search(text)
    rank = int(r.group(1) or r.group(2)) if r else None
    s = _STEP_RE.search(text[m.end():] if m else text)
    attrs: dict[str, Any] = {"step": int(s.group(1))} if s else {}
    return ts, rank, attrs
