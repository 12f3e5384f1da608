"""The SGLang server log (with PyTorch-NCCL glog, NCCL debug and vLLM lines mixed in).

Formats: ../shared/reference/sglang-formats.md (their regexes: ``sglang_patterns``).  The volume of a
log is batch and access lines, so classification and field extraction are polars expressions over a
whole chunk of lines; only the rare multi-line records (watchdog dumps, py-spy bodies, tracebacks,
torch watchdog messages) are walked in Python (``sglang_records``).

A record starts at a line with a recognised envelope (SGLang prefix, glog, NCCL debug, vLLM, uvicorn);
unprefixed lines that follow belong to it when its kind can continue (tracebacks, dumps, multi-line
messages), blank lines always do, and anything else is kept in ``unparsed``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from ..linemap import LineMap
from ..torch_jobs.torch_job import CHILD_FAILED_ALWAYS
from ..vllm import vllm_log
from .sglang_batches import batch_rows
from .sglang_patterns import (
    ACCESS,
    ACCESS_HEAD,
    BARE_LEAK,
    BARE_LEAK_WEAK,
    BARE_TRACEBACK,
    CONTINUABLE,
    DETAILED,
    INTERLEAVED,
    MESSAGE_KINDS,
    NON_PREFIXED_KINDS,
    PREFIX_HEAD,
    RELEASE_ORDER,
    RELEASE_TRAITS,
    TORCH_WHAT,
    newest_release,
)
from .sglang_records import Record, RecordRows, handle, leading_dump


@dataclass
class FileContext:
    engine: str
    path: str                      # as reported in evidence (relative)
    default_year: int              # for glog / vLLM timestamps that carry no year (when no reference)
    last_ts: datetime | None = None  # carried across chunks
    # when the file has no dated line of its own: its modification time (year-less lines take the year
    # that puts them at or before it: a December glog line in a file saved in January is last year's).
    # A line's envelope time (collected_ts), when it has one, is the better reference (the nearest year).
    reference: datetime | None = None
    prev_ts: datetime | None = None  # timestamp of the previous chunk's last dated record, in file order
    record_ts: datetime | None = None  # time of the last dated record of earlier chunks (any format), in file order
    release: str | None = None     # the release the file's earlier chunks point at


@dataclass
class Parsed:
    """Rows produced from one chunk, ready for the store."""

    tables: dict[str, pl.DataFrame | list[dict[str, Any]]] = field(default_factory=dict)
    lines: int = 0
    unparsed: int = 0
    release: str | None = None     # the SGLang release family the formats point at
    interleaved: int = 0           # lines cut into by another record (the inner record is parsed)
    backwards: int = 0             # records dated more than BACKWARDS_S before the record above them
    largest_back: tuple[float, int] = (0.0, 0)   # (seconds, line) of the largest such step
    dated_by_previous: int = 0     # access lines without a time of their own, dated by the record before them
    dated_by_envelope: int = 0     # access lines without a time of their own, left to their envelope's time
    starts: pl.DataFrame | None = None   # parse_chunk(whole=False): the records' line, ts_dt, msg, ranks




# Interleaved processes disorder their lines by milliseconds; a step back larger than this is a clock
# that went backwards (NTP step, a container restart on another clock, lines pasted out of order).
BACKWARDS_S = 2.0
# The release traits are looked for in each chunk's first this many records (a bound on the regexes' work).
RELEASE_RECORDS = 20000
# Ranks printed PP before TP: only from 0.5.10 on.
PP_FIRST = r" PP\d+.* TP\d+"



def release_of(msgs: pl.Series, known: str | None = None) -> str | None:
    """The newest release family whose traits appear in these messages (None: no trait seen); with
    ``known``, only releases newer than it are looked for."""
    for release, rx in RELEASE_TRAITS:
        if release == known:
            break
        if msgs.str.contains(rx).any():
            return release
    return None


def _ts_expr(col: str) -> pl.Expr:
    ts = pl.col(col).str.replace(",", ".").str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False)
    # polars parses year 0000, which no Python datetime can hold (the rows are read back in Python): unknown
    return pl.when(ts.dt.year() >= 1).then(ts)


def _kind_chain(col: pl.Expr, table: list[tuple[str, str]], default: str | None) -> pl.Expr:
    expr = pl.when(col.str.contains(table[0][1])).then(pl.lit(table[0][0]))
    for name, rx in table[1:]:
        expr = expr.when(col.str.contains(rx)).then(pl.lit(name))
    return expr.otherwise(pl.lit(default, dtype=pl.String))


# An SGLang prefix at the start of the line, without fraction: its time and ranks are cut by position.
_FAST_PREFIX = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[\] ]"
_RANKS = re.compile(r"(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*")
_BATCH_HEAD = r"^(?:Prefill|Decode) batch(?: \[\d+\])?[.,] "


def _on_rows(df: pl.DataFrame, mask: pl.Expr, exprs: list[pl.Expr], dtype: pl.DataType) -> pl.DataFrame:
    """``exprs`` (of type ``dtype``) evaluated on the rows of ``df`` where ``mask`` holds (few rows: the
    costly expressions run only there), as full-height columns, null on the other rows."""
    sub = df.filter(mask)
    names = [e.meta.output_name() for e in exprs]
    if not sub.height:                  # nothing to evaluate (nor regexes to compile)
        return pl.DataFrame([pl.repeat(None, df.height, dtype=dtype, eager=True).alias(n) for n in names])
    sub = sub.select("i", *exprs)
    cols = []
    for name in names:
        full = pl.repeat(None, df.height, dtype=dtype, eager=True).alias(name)
        cols.append(full.scatter(sub.get_column("i"), sub.get_column(name)))
    return pl.DataFrame(cols)


def _prefix(df: pl.DataFrame) -> pl.DataFrame:
    """ts and ranks of the prefix of each line's body: cut by position where the line starts with a plain
    SGLang prefix (the bulk), by the anchored regex PREFIX_HEAD elsewhere."""
    body = pl.col("body")
    close = body.str.find("]", literal=True)
    df = df.with_columns((body.str.contains(_FAST_PREFIX) & close.is_not_null()).alias("_fast"), close.alias("_close"))
    df = df.with_columns(pl.when(pl.col("_fast")).then(body.str.slice(20, pl.col("_close") - 20)).alias("ranks"))
    # a ranks field the prefix grammar refuses (the regex would not match there either): the regex decides
    bad = [r for r in df.get_column("ranks").drop_nulls().unique().to_list() if not _RANKS.fullmatch(r)]
    if bad:
        df = df.with_columns((pl.col("_fast") & ~pl.col("ranks").is_in(bad)).alias("_fast"))
    fast = pl.col("_fast")
    df = df.with_columns(pl.when(fast).then(body.str.slice(1, 19)).alias("ts"),
                         pl.when(fast).then(pl.col("ranks")).alias("ranks"))
    head = body.str.extract_groups(PREFIX_HEAD)
    slow = _on_rows(df, ~fast, [head.struct.field("1").alias("_ts"), head.struct.field("2").alias("_ranks")],
                    pl.String)
    return df.with_columns(pl.coalesce(pl.col("ts"), slow.get_column("_ts")).alias("ts"),
                           pl.coalesce(pl.col("ranks"), slow.get_column("_ranks")).alias("ranks"))


def classify(texts: list[str] | pl.Series, head_what: bool = False) -> pl.DataFrame:
    """One row per line: line prefix fields (ts, ranks, msg), record kind, record id and role.  ``head_what``:
    the lines are no file's head (torch lines a dump or report left over): a 'what():' first starts a record.

    Batch and access lines, the bulk of a log, are recognised by cheap anchored tests and their prefix is
    cut by position; the costly regexes (interleaving, the long list of message kinds, other prefixes)
    run only on the few lines that may need them.
    """
    col = texts if isinstance(texts, pl.Series) else pl.Series(texts, dtype=pl.String)
    df = pl.DataFrame({"text": col.rename("text")}).with_row_index("i")
    # only a line with a '[' after its first character can hold another record's prefix
    brackets = pl.col("text").str.count_matches("[", literal=True)
    maybe = (brackets >= 2) | ((brackets == 1) & ~pl.col("text").str.starts_with("["))
    inner = _on_rows(df, maybe, [pl.col("text").str.extract(INTERLEAVED, 1).alias("_inner")],
                     pl.String).get_column("_inner")
    df = df.with_columns(inner.is_not_null().alias("interleaved"), pl.coalesce(inner, pl.col("text")).alias("body"))
    df = _prefix(df)
    df = df.with_columns(
        pl.when(pl.col("ts").is_not_null())
        .then(pl.col("body").str.slice(pl.col("_close") + 1).str.strip_prefix(" "))
        .otherwise(None).alias("msg")).drop("_fast", "_close")
    msg = pl.col("msg")
    fast = (
        pl.when(pl.col("ts").is_null()).then(pl.lit(None, dtype=pl.String))
        .when(msg.str.contains(_BATCH_HEAD)).then(pl.lit("batch"))
        .when(msg.str.contains(ACCESS_HEAD)).then(pl.lit("access"))
        .otherwise(pl.lit("?"))
    )
    df = df.with_columns(fast.alias("kind"))
    rest = _on_rows(df, pl.col("kind") == "?", [_kind_chain(pl.col("msg"), MESSAGE_KINDS, "log").alias("k2")],
                    pl.String)
    bare = _on_rows(df, pl.col("ts").is_null() & (pl.col("body").str.len_bytes() > 0),
                    [_kind_chain(pl.col("body"), NON_PREFIXED_KINDS, None).alias("k3")], pl.String)
    df = df.with_columns(pl.coalesce(rest.get_column("k2"), pl.when(pl.col("kind") != "?").then(pl.col("kind")),
                                     bare.get_column("k3")).alias("kind"))
    df = _bare_traceback_start(df)
    df = _one_failure_summary(df)
    blank = _on_rows(df, pl.col("kind").is_null(), [(pl.col("body").str.strip_chars() == "").alias("blank")],
                     pl.Boolean)
    df = _roles(df.with_columns(blank.get_column("blank").fill_null(False)))
    return _what_starts(_bare_leak_starts(df), head_what)


def _what_starts(df: pl.DataFrame, head: bool = False) -> pl.DataFrame:
    """The torch watchdog's message printed only as the text of its exception (``TORCH_WHAT``: std::terminate's
    '  what():  [PG 1 Rank 7] Process group watchdog thread terminated with exception: ...', the glog line and its
    time not in the evidence) starts a ``torch_nccl`` record of its own after another kind of record.  Inside a
    torch record (after the watchdog's glog line, whose message it repeats) it stays that record's
    continuation, and so does it before a file's first record: that head continues the last record of the
    part before it (a paste split into files, its glog line at the end of the first)."""
    body = pl.col("body")
    pre = df.filter(pl.col("kind").is_null() & body.str.contains("what():", literal=True))
    if not pre.height:
        return df
    made = pre.filter(body.str.contains(TORCH_WHAT) & ((pl.col("rec") > 0) | head)
                      & (pl.col("rec_kind").fill_null("") != "torch_nccl")).get_column("i").to_list()
    if not made:
        return df
    df = df.with_columns(pl.when(pl.col("i").is_in(made)).then(pl.lit("torch_nccl"))
                         .otherwise(pl.col("kind")).alias("kind"))
    return _roles(df.drop("start", "rec", "rec_kind", "role"))


def _roles(df: pl.DataFrame) -> pl.DataFrame:
    """Each line's record (``rec``, its kind ``rec_kind``) and role: start, continuation or unparsed."""
    df = df.with_columns(pl.col("kind").is_not_null().alias("start"))
    df = df.with_columns(pl.col("start").cast(pl.Int64).cum_sum().alias("rec"))
    # kind of the record each line belongs to
    df = df.with_columns(pl.col("kind").forward_fill().alias("rec_kind"))
    cont_ok = pl.col("rec_kind").is_in(list(CONTINUABLE))
    return df.with_columns(
        pl.when(pl.col("start")).then(pl.lit("start"))
        .when(pl.col("rec") == 0).then(pl.lit("unparsed"))
        .when(pl.col("blank") | cont_ok).then(pl.lit("cont"))
        .otherwise(pl.lit("unparsed")).alias("role")
    )


# Records a prefix-less leak line may follow and still start its own record: Python's warnings go to stderr
# between log records, and one check may print several (the token pool's, then the request pool's).
_LEAK_AFTER = {"log", "mem_leak_warning"}


def _bare_leak_starts(df: pl.DataFrame) -> pl.DataFrame:
    """An idle leak check printed without a log prefix (``BARE_LEAK``: a Python warning line, a ValueError line
    whose traceback was cut, the message alone, older releases' wordings) starts a ``mem_leak_warning`` record
    where no record takes the line, or after a plain log record or another such warning; inside a traceback it
    stays the traceback's exception line (the traceback's frames say in which context the check ran).
    ``BARE_LEAK_WEAK`` (2024's second line) starts one only where nothing takes it."""
    body = pl.col("body")
    pre = df.filter(pl.col("kind").is_null() & (body.str.contains("leak detected!", literal=True)
                                                | body.str.contains("available_size=", literal=True)))
    if not pre.height:
        return df
    pre = pre.with_columns(body.str.contains(BARE_LEAK).alias("_full"), body.str.contains(BARE_LEAK_WEAK).alias("_weak"))
    made: list[tuple[int, int]] = []                  # (line index, record it was in)
    for r in pre.filter(pl.col("_full") | pl.col("_weak")).iter_rows(named=True):
        if made and made[-1][1] == r["rec"]:         # in the record a leak line before it now starts
            kind, role = "mem_leak_warning", "cont"
        else:
            kind, role = r["rec_kind"], r["role"]
        if role == "unparsed" or (r["_full"] and kind in _LEAK_AFTER):
            made.append((r["i"], r["rec"]))
    if not made:
        return df
    df = df.with_columns(pl.when(pl.col("i").is_in([i for i, _ in made])).then(pl.lit("mem_leak_warning"))
                         .otherwise(pl.col("kind")).alias("kind"))
    return _roles(df.drop("start", "rec", "rec_kind", "role"))


def _bare_traceback_start(df: pl.DataFrame) -> pl.DataFrame:
    """A traceback before the first record (pasted without the 'Scheduler hit an exception' line that
    introduced it) is an undated exception record of its own; inside a record it stays a continuation."""
    first = df.filter(pl.col("kind").is_not_null()).get_column("i").min()
    lead = df if first is None else df.filter(pl.col("i") < first)
    tb = lead.filter(pl.col("body").str.contains(BARE_TRACEBACK)).get_column("i")
    if not tb.len():
        return df
    return df.with_columns(pl.when(pl.col("i") == tb.min()).then(pl.lit("scheduler_exception"))
                           .otherwise(pl.col("kind")).alias("kind"))


def _one_failure_summary(df: pl.DataFrame) -> pl.DataFrame:
    """torchrun's failure summary is one record wherever a paste of it starts: a header inside it (its title,
    'Failures:', 'Root Cause (first observed failure):') continues it; only its exception line
    (``ChildFailedError:``) always starts one (two summaries in a row are two)."""
    summary = pl.col("kind") == "child_failed"
    if not df.select(summary.fill_null(False).any()).item():
        return df
    inside = pl.col("kind").forward_fill().shift(1) == "child_failed"
    always = pl.col("body").str.contains(CHILD_FAILED_ALWAYS)
    return df.with_columns(pl.when(summary & inside & ~always).then(pl.lit(None, dtype=pl.String))
                           .otherwise(pl.col("kind")).alias("kind"))


def parse_chunk(lines: list[str] | pl.Series, first_line: int, ctx: FileContext,
                line_numbers: list[int] | None = None, collected_ts: list[datetime | None] | None = None,
                whole: bool = True, head_what: bool = False) -> Parsed:
    """Parse a chunk of complete records; line numbers start at ``first_line``.

    The payload of an envelope gives ``line_numbers``, the physical line of each line (not consecutive
    where the envelope joined split records or dropped lines), and ``collected_ts``, the envelope's time
    of each line: rows are numbered by the first and carry the second.  ``whole=False``: the lines are
    part of a chunk (``sglang_fast``): the chunk-level facts (release, clock steps, last time) are left to
    the caller, which gets the records' line, time, message and ranks in ``Parsed.starts``.  ``head_what``:
    the lines are not a file's head (``classify``).
    """
    df = classify(lines, head_what)
    df = df.with_columns((pl.col("i").cast(pl.Int64) + first_line).alias("line"))
    if collected_ts is not None:
        df = df.with_columns(pl.Series("collected_ts", collected_ts, dtype=pl.Datetime("us")))
    out = Parsed(lines=len(lines), interleaved=int(df.get_column("interleaved").sum()))
    starts = _record_starts(df, ctx)
    batches = _batch_rows(starts, ctx)
    if batches is not None:
        out.tables["batches"] = batches
    events, others = _event_rows(starts, ctx)
    stats = vllm_log.stats_rows(events)
    if stats is not None:
        out.tables["vllm_stats"] = stats
    rows = _detailed_rows(others, df.get_column("text"), ctx)
    lead = _leading_dump(df, starts, first_line, rows)
    events = _apply_record_rows(events, rows)
    out.tables["events"] = events
    access = _access_rows(starts, ctx)
    if access is not None:
        out.tables["http_requests"] = _date_bare_access(access, batches, events, ctx, out)
    out.tables["leak_reports"] = rows.leaks
    out.tables["stacks"] = rows.stacks
    out.tables["frames"] = rows.frames
    out.tables["collective_records"] = rows.collective_records
    unparsed = pl.col("role") == "unparsed"
    if lead:
        unparsed = unparsed & ~pl.col("i").is_in(lead)
    un = df.filter(unparsed).select(
        pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), pl.col("line"), pl.col("text"))
    if rows.unparsed:
        un = pl.concat([un, pl.DataFrame(rows.unparsed, schema=un.schema)])
    out.tables["unparsed"] = un
    out.unparsed = un.height
    if whole:
        chunk_facts(starts.select("line", "ts_dt", "msg", "ranks"), ctx, out)
    else:
        out.starts = starts.select("line", "ts_dt", "msg", "ranks")
    if line_numbers is not None:
        lm = LineMap(first_line, line_numbers, collected_ts)
        _renumber(out, lm, ctx)
        if out.starts is not None:
            out.starts = lm.frame(out.starts)
    return out


def chunk_facts(starts: pl.DataFrame, ctx: FileContext, out: Parsed) -> None:
    """What a chunk's records (line, ts_dt, msg, ranks; in file order) say as a whole: the release their
    formats point at (only releases newer than the one the file is known to be: an older one cannot change
    the file's), the last time, and the clock's steps backwards."""
    known = RELEASE_ORDER.index(ctx.release) if ctx.release in RELEASE_ORDER else len(RELEASE_ORDER)
    pp_first = known > RELEASE_ORDER.index("0.5.10") and \
        starts.get_column("ranks").drop_nulls().str.contains(PP_FIRST).any()
    out.release = newest_release(release_of(starts.get_column("msg").drop_nulls().head(RELEASE_RECORDS), ctx.release),
                                 "0.5.10" if pp_first else None)
    last = starts.get_column("ts_dt").drop_nulls()
    if last.len():
        ctx.last_ts = last.max()  # type: ignore[assignment]
        _count_backwards(starts.select("line", "ts_dt").drop_nulls(), ctx, out)


def _leading_dump(df: pl.DataFrame, starts: pl.DataFrame, first_line: int, rows: RecordRows) -> list[int]:
    """Offsets of a headerless py-spy part before the chunk's first record (only a file's first chunk has
    lines before a record start), parsed into ``rows``."""
    head = df.filter(pl.col("rec") == 0)
    if not head.height:
        return []
    dated = starts.get_column("ts_dt").drop_nulls()
    return sorted(leading_dump(head.get_column("body").to_list(), first_line,
                               dated[0] if dated.len() else None, rows))


def _renumber(out: Parsed, lm: LineMap, ctx: FileContext) -> None:
    """Rows numbered by payload line -> physical lines, each with its line's envelope time."""
    t = out.tables
    for name in ("batches", "http_requests", "events", "vllm_stats"):
        if isinstance(t.get(name), pl.DataFrame):
            t[name] = lm.frame(t[name], ("line", "line_end"), collected=True)   # type: ignore[arg-type]
    t["unparsed"] = lm.frame(t["unparsed"])     # type: ignore[arg-type]
    prefix = f"{ctx.engine}:{ctx.path}:"
    lm.dicts(t["stacks"], ("line", "line_end"), collected=True, id_prefix=prefix)  # type: ignore[arg-type]
    lm.dicts(t["frames"], (), id_prefix=prefix)                 # type: ignore[arg-type]
    lm.dicts(t["leak_reports"])                                 # type: ignore[arg-type]
    lm.dicts(t.get("collective_records") or [])                 # type: ignore[arg-type]
    if out.largest_back[1]:
        out.largest_back = (out.largest_back[0], lm.line(out.largest_back[1]) or 0)


def _record_starts(df: pl.DataFrame, ctx: FileContext) -> pl.DataFrame:
    """One row per record: its first line, its last line (continuations) and the dated lines around it
    (glog and vLLM print no year: they take it from the nearest SGLang timestamp, else from the line's
    envelope time, else from the file's modification time)."""
    # a record's lines are consecutive and its start is kept: its last kept line and row are those carried
    # forward to the record's last row (no grouping: records are runs)
    kept = pl.col("role") != "unparsed"
    ends = df.select(pl.when(kept).then(pl.col("line")).forward_fill().alias("line_end"),
                     pl.when(kept).then(pl.col("i")).forward_fill().alias("i_end"),
                     (pl.col("start").shift(-1, fill_value=True) & (pl.col("rec") > 0)).alias("_last"))
    ext = ends.filter(pl.col("_last")).drop("_last")
    starts = pl.concat([df.filter(pl.col("start")), ext], how="horizontal").with_columns(_ts_expr("ts").alias("ts_dt"))
    dated = pl.col("ts_dt").forward_fill().backward_fill()
    if ctx.last_ts is not None:
        dated = dated.fill_null(pl.lit(ctx.last_ts, dtype=pl.Datetime("us")))
    enveloped = pl.col("collected_ts") if "collected_ts" in starts.columns else pl.lit(None, dtype=pl.Datetime("us"))
    ref = ctx.reference or datetime(ctx.default_year, 1, 1)
    return starts.with_columns(
        dated.fill_null(enveloped).fill_null(pl.lit(ref, dtype=pl.Datetime("us"))).alias("ctx_ts"),
        dated.is_not_null().alias("ctx_dated"),
        (dated.is_null() & enveloped.is_null()).alias("ctx_mtime"),
        pl.col("ts_dt").backward_fill().alias("next_ts"))


def _batch_rows(starts: pl.DataFrame, ctx: FileContext) -> pl.DataFrame | None:
    """Prefill/Decode batch lines, every key found by a literal ', key: ' (never by position)."""
    b = starts.filter(pl.col("kind") == "batch")
    if not b.height:
        return None
    return batch_rows(b, [pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), pl.col("line"),
                          pl.col("ts_dt").alias("ts"), pl.col("ranks").str.strip_chars().alias("rank")])


def _access_rows(starts: pl.DataFrame, ctx: FileContext) -> pl.DataFrame | None:
    a = starts.filter(pl.col("kind") == "access").with_columns(
        pl.coalesce(pl.col("msg"), pl.col("body").str.replace(r"^\(\w+ pid=\d+\) ", "")).alias("amsg")
    ).with_columns(pl.col("amsg").str.extract_groups(ACCESS).alias("ag")).unnest("ag")
    if not a.height:
        return None
    return a.select(
        pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("file"), pl.col("line"),
        pl.col("ts_dt").alias("ts"), pl.col("client"), pl.col("method"),
        pl.col("upath").alias("path"), pl.col("status").cast(pl.Int32, strict=False),
        *([pl.col("collected_ts")] if "collected_ts" in a.columns else []),
    )


def _date_bare_access(access: pl.DataFrame, batches: pl.DataFrame | None, events: pl.DataFrame, ctx: FileContext,
                      out: Parsed) -> pl.DataFrame:
    """Access lines printed without a time of their own (uvicorn's default format, vLLM's API server).

    One with an envelope time is left for its envelope (ingest aligns it to the payload clock through the
    file's lines that carry both); one without is dated by the dated record before it in the file, an
    estimate (the line was printed at or after that time).  ``ctx.record_ts`` carries that record across
    chunks."""
    frames = [f for f in (access, batches, events) if f is not None and f.height]
    bare = pl.col("ts").is_null()
    if "collected_ts" in access.columns:
        out.dated_by_envelope = access.select((bare & pl.col("collected_ts").is_not_null()).sum()).item()
        bare = bare & pl.col("collected_ts").is_null()
    if access.select(bare.sum()).item():
        dated = pl.concat([f.select("line", pl.col("ts").cast(pl.Datetime("us")).alias("_prev")) for f in frames]) \
            .drop_nulls().sort("line")
        prev = access.select("line").join_asof(dated, on="line", strategy="backward").get_column("_prev")
        if ctx.record_ts is not None:
            prev = prev.fill_null(ctx.record_ts)
        access = access.with_columns(prev)
        out.dated_by_previous = access.select((bare & pl.col("_prev").is_not_null()).sum()).item()
        access = access.with_columns(pl.when(bare).then(pl.col("_prev")).otherwise(pl.col("ts")).alias("ts")) \
            .drop("_prev")
    last = [f.filter(pl.col("ts").is_not_null()).select(pl.col("line").max(), pl.col("ts").sort_by("line").last())
            .row(0) for f in frames]
    last = [r for r in last if r[0] is not None]
    if last:
        ctx.record_ts = max(last)[1]                 # the dated record furthest down the file
    return access


def _event_rows(starts: pl.DataFrame, ctx: FileContext) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every other record as an event; also returns the records whose kind needs the Python walk.

    vLLM records ('MM-DD HH:MM:SS' with no year, a process tag, their own message kinds and attributes)
    are read by ``vllm_log``."""
    ev = vllm_log.with_vllm_fields(starts.filter(~pl.col("kind").is_in(["batch", "access"])))
    events = ev.select(
        pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), pl.col("line"),
        pl.col("line_end"), pl.coalesce(pl.col("ts_dt"), pl.col("_vdt")).alias("ts"),
        pl.coalesce(pl.col("ranks").str.strip_chars(), pl.col("_vrank")).fill_null("").alias("rank"),
        pl.col("kind"),
        pl.coalesce(pl.col("msg"), pl.col("_vmsg"), pl.col("body")).str.slice(0, 2000).alias("message"),
        pl.col("_vattrs").alias("attrs"),
    )
    return events, ev.filter(pl.col("kind").is_in(list(DETAILED)))


def _detailed_rows(records: pl.DataFrame, lines: pl.Series, ctx: FileContext) -> RecordRows:
    """Walk the rare multi-line records in Python (``sglang_records``)."""
    rows = RecordRows(ctx.engine, ctx.path)
    if not records.height:
        return rows
    for r in records.iter_rows(named=True):
        i0 = r["i"]
        i1 = r["i_end"] if r["i_end"] is not None else i0
        handle(Record(kind=r["kind"], line=r["line"], body=r["body"],
                      msg=r["msg"] if r["msg"] is not None else r["body"], cont=lines.slice(i0 + 1, i1 - i0).to_list(),
                      rank=(r["ranks"] or "").strip(), ts=r["ts_dt"], ctx_ts=r["ctx_ts"], next_ts=r["next_ts"],
                      ctx_dated=r["ctx_dated"], ctx_mtime=r["ctx_mtime"]),
               rows)
    return rows


def _apply_record_rows(events: pl.DataFrame, rows: RecordRows) -> pl.DataFrame:
    """The events with what the detailed records found: attrs, glog times and torch ranks, extra events."""
    if rows.attrs or rows.ts or rows.rank:
        fix = pl.DataFrame({"line": list(set(rows.attrs) | set(rows.ts) | set(rows.rank))},
                           schema={"line": pl.Int64})
        fix = fix.with_columns(
            pl.col("line").replace_strict(rows.attrs, default=None, return_dtype=pl.String).alias("_attrs"),
            pl.col("line").replace_strict(rows.ts, default=None, return_dtype=pl.Datetime("us")).alias("_ts"),
            pl.col("line").replace_strict(rows.rank, default=None, return_dtype=pl.String).alias("_rank"),
        )
        events = events.join(fix, on="line", how="left").with_columns(
            pl.coalesce("_attrs", "attrs").alias("attrs"),
            pl.coalesce(pl.col("ts").cast(pl.Datetime("us")), "_ts").alias("ts"),
            pl.when(pl.col("rank") == "").then(pl.col("_rank").fill_null("")).otherwise(pl.col("rank")).alias("rank"),
        ).drop("_attrs", "_ts", "_rank")
    if rows.events:
        events = pl.concat([events.with_columns(pl.col("ts").cast(pl.Datetime("us"))),
                            pl.DataFrame(rows.events, schema=events.schema | {"ts": pl.Datetime("us")})],
                           how="vertical_relaxed")
    return events


def _count_backwards(dated: pl.DataFrame, ctx: FileContext, out: Parsed) -> None:
    """Count records dated well before the record above them (a clock that went backwards)."""
    prev = pl.col("ts_dt").shift(1)
    if ctx.prev_ts is not None:
        prev = prev.fill_null(pl.lit(ctx.prev_ts))
    steps = dated.with_columns((prev - pl.col("ts_dt")).dt.total_milliseconds().alias("back_ms")) \
        .filter(pl.col("back_ms") > BACKWARDS_S * 1000)
    ctx.prev_ts = dated.get_column("ts_dt")[-1]
    if steps.height:
        out.backwards = steps.height
        top = steps.sort("back_ms", descending=True).row(0, named=True)
        out.largest_back = (top["back_ms"] / 1000, top["line"])
