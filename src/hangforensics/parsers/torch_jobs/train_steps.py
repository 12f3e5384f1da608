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
from typing import TYPE_CHECKING, Any

from ..datetimes import micros, micros_expr, python_datetime

if TYPE_CHECKING:
    import polars as pl

# The record start (Rust regex and Python ``re`` alike): an optional torchrun prefix, a date and a time at
# the line's start (bracketed or not), then a step or iteration number on the same line.
STEP_LINE = (r"^(?:\[rank\d+\]: ?)?\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?[ |]"
             r".*?\b(?:[Ss]tep|STEP|[Ii]ter(?:ation)?|ITER(?:ATION)?)\b\s*[:=#]?\s*\d+")

# (Rust regex and Python ``re`` alike: ``step_fixes`` reads them with polars, ``step_line`` with ``re``)
_TIME = r"^(?:\[rank\d+\]: ?)?\[?(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d+))?"
_STEP = r"\b(?:step|iter(?:ation)?)\b\s*[:=#]?\s*(\d+)"
# the global rank the line names: torchrun's prefix, or a logging format's '[rank3]' / 'rank3'
_RANK = r"\[rank(\d+)\]|\brank(\d+)\b"
_TIME_RE, _STEP_RE, _RANK_RE = re.compile(_TIME), re.compile(_STEP, re.I), re.compile(_RANK)


def step_line(text: str) -> tuple[datetime | None, int | None, dict[str, Any]]:
    """(time, global rank, attrs with ``step``) of a progress line."""
    ts = None
    m = _TIME_RE.match(text)
    if m:
        try:
            ts = datetime.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H:%M:%S").replace(
                microsecond=micros(m.group(3)))
        except ValueError:
            ts = None
    r = _RANK_RE.search(text)
    rank = int(r.group(1) or r.group(2)) if r else None
    s = _STEP_RE.search(text[m.end():] if m else text)
    attrs: dict[str, Any] = {"step": int(s.group(1))} if s else {}
    return ts, rank, attrs


def step_fixes(records: pl.DataFrame) -> pl.DataFrame:
    """``step_line`` of many records at once, as the fixes of their events (a job's log is mostly step lines:
    read one by one in Python they cost some 40 us each, 3 MB/s): line, ``_attrs`` (``{"step": N}``), ``_ts``
    (the line's own time, where the record has none: ``ts_dt``) and ``_rank`` (``rankN``, where the record has
    no rank of its own: ``ranks``), null where ``step_line`` gives nothing.  ``records`` (line, body, ts_dt,
    ranks) must be ASCII: Python's ``\\d`` and ``int`` read other digits, which polars' casts do not."""
    import polars as pl

    body, head = pl.col("body"), pl.col("_head")
    matched = head.struct.field("1")
    ts = python_datetime(pl.concat_str([head.struct.field("2"), pl.lit(" "), head.struct.field("3")]),
                         "%Y-%m-%d %H:%M:%S") + pl.duration(microseconds=micros_expr(head.struct.field("4")))
    rest = pl.when(matched.is_not_null()).then(body.str.slice(matched.str.len_chars())).otherwise(body)
    step = rest.str.extract("(?i)" + _STEP, 1)
    rank = pl.coalesce(pl.col("_named").struct.field("1"), pl.col("_named").struct.field("2"))

    def number(digits: pl.Expr) -> pl.Expr:             # int()'s text of ASCII digits: no leading zero
        return digits.str.replace(r"^0+(\d)", "${1}")

    # (each regex once: the struct of its groups is a column, not an expression repeated per field)
    return records.select(
        "line", "ts_dt", "ranks", "body", body.str.extract_groups(f"^({_TIME[1:]})").alias("_head"),  # (+ m.group(0))
        body.str.extract_groups(_RANK).alias("_named")).select(
        pl.col("line"),
        pl.concat_str([pl.lit('{"step": '), number(step), pl.lit("}")]).alias("_attrs"),
        pl.when(pl.col("ts_dt").is_null()).then(ts).alias("_ts"),
        pl.when(pl.col("ranks").fill_null("").str.strip_chars() == "")
        .then(pl.lit("rank") + number(rank)).alias("_rank"))
