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
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from ..datetimes import datetime_lit, datetime_series
from ..kind_table import KindTable
from ..linemap import LineMap
from ..torch_jobs import train_steps
from ..torch_jobs.torch_job import CHILD_FAILED_ALWAYS
from ..vllm import vllm_log
from .sglang_batches import batch_rows
from .sglang_patterns import (
    ACCESS,
    ACCESS_HEAD,
    ACTOR_TAG,
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
    TAGGED_HEAD,
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
    # when the file has no dated line of its own: the engine's dated evidence (``reference_nearest``: year-less
    # lines take the year nearest it), else its modification time (the year that puts them at or before it: a
    # December glog line in a file saved in January is last year's).  A line's envelope time (collected_ts),
    # when it has one, is the better reference (the nearest year).
    reference: datetime | None = None
    prev_ts: datetime | None = None  # timestamp of the previous chunk's last dated record, in file order
    record_ts: datetime | None = None  # time of the last dated record of earlier chunks (any format), in file order
    release: str | None = None     # the release the file's earlier chunks point at
    reference_nearest: bool = False  # ``reference`` is dated evidence of the engine, not a modification time

    @classmethod
    def of_file(cls, engine: str, path: str, mtime: float, year_near: float | None = None) -> FileContext:
        """The context of a file read from its start: dated near ``year_near`` (epoch seconds: the engine's
        dated evidence, ``ingest.jobs.FileJob.year_near``), else by its modification time ``mtime``."""
        ref = datetime.fromtimestamp(mtime if year_near is None else year_near)
        return cls(engine=engine, path=path, default_year=ref.year, reference=ref,
                   reference_nearest=year_near is not None)


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
    interleaved_rows: list[int] | None = None   # parse_chunk(whole=False): the chunk's lines cut into (indices)




# Interleaved processes disorder their lines by milliseconds; a step back larger than this is a clock
# that went backwards (NTP step, a container restart on another clock, lines pasted out of order).
BACKWARDS_S = 2.0
# The release traits are looked for in each chunk's first this many records (a bound on the regexes' work: a
# batch line's traits are its format's, on every one), and in every record that is not a batch or access
# line (a watchdog's wording, a debug dump: rare, anywhere in the file).
RELEASE_RECORDS = 20000
_BULK = ["batch", "access"]


def rare_records(records: pl.DataFrame) -> pl.DataFrame:
    """The records of ``records`` (msg, kind, ...) with a message that are not batch or access lines."""
    return records.filter(~pl.col("kind").is_in(_BULK) & pl.col("msg").is_not_null())


def rare_messages(records: pl.DataFrame) -> pl.Series:
    """The messages of ``records`` (msg, kind) that are not batch or access lines."""
    return rare_records(records).get_column("msg")
# Ranks printed PP before TP: only from 0.5.10 on.
PP_FIRST = r" PP\d+.* TP\d+"



_TRAIT_SEARCHES: dict[int, list[pl.Expr]] = {}      # release_of's searches of the first n releases


def release_of(msgs: pl.Series, known: str | None = None) -> str | None:
    """The newest release family whose traits appear in these messages (None: no trait seen); with
    ``known``, only releases newer than it are looked for."""
    looked = RELEASE_TRAITS[:RELEASE_ORDER.index(known) if known in RELEASE_ORDER else None]
    if msgs.null_count() == msgs.len():         # (no message: no trait)
        return None
    if msgs.len() <= SMALL_ROWS:        # one query (a fixed cost each): every release's search at once
        if not looked:
            return None
        if len(looked) not in _TRAIT_SEARCHES:
            _TRAIT_SEARCHES[len(looked)] = [pl.col("m").str.contains(rx).any().alias(r) for r, rx in looked]
        seen = msgs.to_frame("m").select(_TRAIT_SEARCHES[len(looked)]).row(0)
        return next((r for (r, _), hit in zip(looked, seen, strict=True) if hit), None)
    head = msgs.head(SMALL_ROWS)
    for release, rx in looked:
        # a release's traits are on its batch lines, the bulk: when they are there, the head shows them (the
        # newer releases before it are looked for in every message all the same)
        if head.str.contains(rx).any() or msgs.str.contains(rx).any():
            return release
    return None


# An SGLang prefix at the start of the line, without fraction: its time and ranks are cut by position.
_FAST_PREFIX = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[\] ]"
_RANKS = re.compile(r"(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*")
_BATCH_HEAD = r"^(?:Prefill|Decode) batch(?: \[\d+\])?[.,] "

# Each polars operation, and each expression in it, costs microseconds whatever its height: a small chunk's
# cost is their number.  So steps run fused in one query (``_collect``), a step is skipped where a cheap test
# shows it has nothing to do, and up to SMALL_ROWS lines per-line expressions run on all lines under their
# mask (the same values; a larger chunk runs the costly ones on the lines that need them: ``_on_rows``) and
# columns are put together in Python.
SMALL_ROWS = 1024
_NO_OPT = pl.QueryOptFlags.none()


def _collect(lf: pl.LazyFrame) -> pl.DataFrame:
    """A chain of eager steps run as one query (on the engine eager operations use, as written)."""
    return lf.collect(engine="in-memory", optimizations=_NO_OPT)


def _nulls(name: str, n: int, dtype: pl.DataType) -> pl.Series:
    return pl.Series(name, [None] * n, dtype=dtype) if n <= SMALL_ROWS else \
        pl.repeat(None, n, dtype=dtype, eager=True).alias(name)


def _on_rows(df: pl.DataFrame, mask: pl.Expr, exprs: list[pl.Expr], dtype: pl.DataType,
             pre: pl.Expr | None = None) -> list[pl.Expr | pl.Series]:
    """``exprs`` (of type ``dtype``) evaluated on the rows of ``df`` where ``mask`` holds, null on the other
    rows, as columns for ``df.with_columns``: on a small frame the expressions under the mask, on a larger one
    full-height Series (the costly expressions run on the few masked rows only).  ``pre``: a cheaper test
    the rows where the expressions give a value pass (then always the larger frame's way: the expressions
    are costly on some lines)."""
    if df.height <= SMALL_ROWS and pre is None:
        return [pl.when(mask).then(e).alias(e.meta.output_name()) for e in exprs]
    names = [e.meta.output_name() for e in exprs]
    lf = df.lazy().filter(mask)
    sub = _collect((lf if pre is None else lf.filter(pre)).select("i", *exprs))
    if not sub.height:
        return [_nulls(n, df.height, dtype) for n in names]
    return [_scatter(n, df.height, sub.get_column("i"), sub.get_column(n), dtype) for n in names]


def _scatter(name: str, height: int, where: pl.Series, values: pl.Series, dtype: pl.DataType) -> pl.Series:
    """``values`` at the rows ``where`` (row indices), null on the others: a column of ``height`` rows."""
    if height > SMALL_ROWS:
        return _nulls(name, height, dtype).scatter(where, values)
    out: list[Any] = [None] * height
    for j, v in zip(where.to_list(), values.to_list(), strict=True):
        out[j] = v
    return pl.Series(name, out, dtype=dtype)


_MESSAGE_TABLE = KindTable(MESSAGE_KINDS, "log")
_NON_PREFIXED_TABLE = KindTable(NON_PREFIXED_KINDS, None, common=("access", "train_step"))

_TEXT = pl.col("text")
_BODY = pl.col("body")
# the line as its own record starts: without the Ray actor's tag its prefix may start with (``_own``)
_OWN = pl.col("own")
# only a line with a '[' after its first character can hold another record's prefix
_BRACKETS = _OWN.str.count_matches("[", literal=True)
_MAYBE_INNER = (_BRACKETS >= 2) | ((_BRACKETS == 1) & ~_OWN.str.starts_with("["))
_INNER = [_OWN.str.extract(INTERLEAVED, 1).alias("_inner")]
# INTERLEAVED's inner prefix after the first character (a literal-led search: cheap on a long line, where
# INTERLEAVED's own search is not: a small chunk with such a line takes a larger one's way)
LONG_LINE = 4096
_INNER_PREFIX = _OWN.str.slice(1).str.contains(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_CUT = [pl.col("_inner").is_not_null().alias("interleaved"), pl.coalesce(pl.col("_inner"), _OWN).alias("body")]
_NO_CUT = [pl.lit(False).alias("interleaved"), _OWN.alias("body")]
_CLOSE = _BODY.str.find("]", literal=True).alias("_close")
_FAST = (_BODY.str.contains(_FAST_PREFIX) & pl.col("_close").is_not_null()).alias("_fast")
_FAST_RANKS = pl.when(pl.col("_fast")).then(_BODY.str.slice(20, pl.col("_close") - 20)).alias("ranks")
_HEAD = _BODY.str.extract_groups(PREFIX_HEAD)
_SLOW = [_HEAD.struct.field("1").alias("_ts"), _HEAD.struct.field("2").alias("_ranks")]
_TS_RANKS = [pl.coalesce(pl.when(pl.col("_fast")).then(_BODY.str.slice(1, 19)), pl.col("_ts")).alias("ts"),
             pl.coalesce(pl.when(pl.col("_fast")).then(pl.col("ranks")), pl.col("_ranks")).alias("ranks")]
_PREFIXED_MSG = _BODY.str.slice(pl.col("_close") + 1).str.strip_prefix(" ").alias("msg")
_MSG = pl.when(pl.col("ts").is_not_null()).then(_PREFIXED_MSG).otherwise(None).alias("msg")
_PREFIXED_KIND = (
    pl.when(pl.col("msg").str.contains(_BATCH_HEAD)).then(pl.lit("batch"))
    .when(pl.col("msg").str.contains(ACCESS_HEAD)).then(pl.lit("access"))
    .otherwise(pl.lit("?")).alias("kind")
)
_FAST_KIND = pl.when(pl.col("ts").is_null()).then(pl.lit(None, dtype=pl.String)).otherwise(_PREFIXED_KIND).alias("kind")
# the lines the kind tables type: a prefixed message the cheap tests left open ('?'), a line without prefix
_BARE = (pl.col("ts").is_null() & (_BODY.str.len_bytes() > 0)).alias("_bare")
# lines the rare passes may take (_bare_leak_starts, _what_starts): a cheap test of all lines at once
# What marks such a line: a prefix-less leak check, a torch watchdog's exception text.  A line that holds one
# may start a record or continue one by what the record before it is (``ingest.batch_parse`` reads them so).
LEAK_MARKS, WHAT_MARK = ("leak detected!", "available_size="), "what():"
_RARE = [(_BODY.str.contains(LEAK_MARKS[0], literal=True)
          | _BODY.str.contains(LEAK_MARKS[1], literal=True)).alias("_leak"),
         _BODY.str.contains(WHAT_MARK, literal=True).alias("_what")]
_BLANK = [(_BODY.str.strip_chars() == "").alias("blank")]


def _own(lines: pl.Series) -> pl.Series:
    """Each line as its own record starts: a Ray actor's tag before a whole SGLang prefix left out (the tag is
    part of the prefix, PREFIX_HEAD: not a fragment of a record another process's cut into), and a process's
    tag before any other line as the ``proc_tag`` envelope strips it (``columnar._untagged``: a vLLM record
    keeps it): Ray relays every line of the process with it, the torch lines and stack dumps of a hang too,
    in a log whose SGLang lines made it read as plain.  The lines themselves where none starts with one (a
    cheap test)."""
    from ...readers.envelopes.columnar import _untagged

    if not lines.str.starts_with("(").any():
        return lines
    return pl.select(pl.when(lines.str.contains(TAGGED_HEAD)).then(lines.str.replace(ACTOR_TAG, ""))
                     .otherwise(_untagged(lines))).to_series()


def _maybe_inner(text: str | None) -> bool:
    """``_MAYBE_INNER`` of one line."""
    if text is None:
        return False
    n = text.count("[")
    return n >= 2 or (n == 1 and not text.startswith("["))


def classify(texts: list[str] | pl.Series, head_what: bool = False) -> pl.DataFrame:
    """One row per line: line prefix fields (ts, ranks, msg), record kind, record id and role.  ``head_what``:
    the lines are no file's head (torch lines a dump or report left over): a 'what():' first starts a record.

    Batch and access lines, the bulk of a log, are recognised by cheap anchored tests and their prefix is
    cut by position; the costly regexes (interleaving, the long list of message kinds, other prefixes)
    run only on the few lines that may need them.
    """
    return _classify(texts, head_what)


def _classify(texts: list[str] | pl.Series, head_what: bool = False, first_line: int | None = None,
              collected_ts: list[datetime | None] | None = None, files: list[int] | None = None) -> pl.DataFrame:
    """``classify``; with ``first_line`` also each line's number (``line``) and with ``collected_ts`` its
    envelope time (``collected_ts``).  ``files``: each line's file (``_FILE``), the lines of several files one
    after the other: each file has its own head (the lines before its first record), as if classified alone."""
    col = texts if isinstance(texts, pl.Series) else pl.Series(texts, dtype=pl.String)
    own = _own(col)
    df = pl.DataFrame({"text": col.rename("text"), "own": own.rename("own")}).with_row_index("i")
    if files is not None:
        df = df.with_columns(pl.Series(_FILE, files, dtype=pl.Int32))
    maybe = [len(t) for t in own.to_list() if _maybe_inner(t)] if df.height <= SMALL_ROWS else None
    if maybe is None or max(maybe, default=0) > LONG_LINE:
        inner = _on_rows(df, _MAYBE_INNER, _INNER, pl.String, _INNER_PREFIX)
    elif maybe:
        inner = _on_rows(df, _MAYBE_INNER, _INNER, pl.String)
    else:
        inner = None
    # (no line that can hold another record's prefix: none is cut)
    lf = df.lazy().with_columns(_NO_CUT).drop("own") if inner is None else \
        df.lazy().with_columns(*inner).with_columns(_CUT).drop("_inner", "own")
    df = _collect(lf.with_columns(_CLOSE).with_columns(_FAST).with_columns(_FAST_RANKS))
    df = _prefix(df)
    kind = _kinds(df)
    file = df.get_column(_FILE) if files is not None else None
    kind = _bare_traceback_start(kind, df.get_column("body"), file)
    kind = _one_failure_summary(kind, df.get_column("body"), file)
    df.replace_column(df.get_column_index("kind"), kind)
    if not kind.null_count():              # every line starts a record: what _with_roles gives then
        lf = df.lazy().with_columns(_ALL_STARTS)
    else:
        lf = _with_roles(df.lazy().with_columns(*_on_rows(df, pl.col("kind").is_null(), _BLANK, pl.Boolean))
                         .with_columns(pl.col("blank").fill_null(False)))
    if first_line is not None:
        lf = lf.with_columns((pl.col("i").cast(pl.Int64) + first_line).alias("line"))
    if collected_ts is not None:
        lf = lf.with_columns(datetime_series("collected_ts", collected_ts))
    df = _collect(lf)
    leak, what = df.drop_in_place("_leak"), df.drop_in_place("_what")
    return _what_starts(_bare_leak_starts(df, leak), what, head_what)


def _prefix(df: pl.DataFrame) -> pl.DataFrame:
    """ts, ranks and msg of each line's body (and its kind where cheap tests tell it: ``_FAST_KIND``): cut by
    position where the line starts with a plain SGLang prefix (the bulk, ``_fast`` and its ``ranks`` given),
    by the anchored regex PREFIX_HEAD elsewhere."""
    # a ranks field the prefix grammar refuses (the regex would not match there either): the regex decides
    ranks = df.get_column("ranks")
    seen = set(ranks.to_list()) if df.height <= SMALL_ROWS else ranks.drop_nulls().unique().to_list()
    bad = [r for r in seen if r is not None and not _RANKS.fullmatch(r)]
    fast = (pl.col("_fast") & ~pl.col("ranks").is_in(bad)) if bad else pl.col("_fast")
    if not bad and df.get_column("_fast").all():          # every line cut by position (_fast: no null)
        return _collect(df.lazy().with_columns(_BODY.str.slice(1, 19).alias("ts")).with_columns(_PREFIXED_MSG)
                        .drop("_fast", "_close").with_columns(_PREFIXED_KIND)
                        .with_columns(pl.lit(False).alias("_bare"), *_RARE))
    if df.height <= SMALL_ROWS and not df.get_column("_fast").any():    # no line cut by position: the regex's
        return _collect(df.lazy().with_columns(_HEAD.alias("_head"))
                        .with_columns(pl.col("_head").struct.field("2").alias("ranks"))
                        .with_columns(pl.col("_head").struct.field("1").alias("ts")).drop("_head").with_columns(_MSG)
                        .drop("_fast", "_close").with_columns(_FAST_KIND).with_columns(_BARE, *_RARE))
    lf = df.lazy().with_columns(*_on_rows(df, ~fast, _SLOW, pl.String))
    if bad:
        lf = lf.with_columns(fast.alias("_fast"))
    # (ts after ranks, as the columns were added)
    return _collect(lf.with_columns(_TS_RANKS[1]).with_columns(_TS_RANKS[0]).drop("_ts", "_ranks").with_columns(_MSG)
                    .drop("_fast", "_close").with_columns(_FAST_KIND).with_columns(_BARE, *_RARE))


def _kinds(df: pl.DataFrame) -> pl.Series:
    """Each line's record kind: the cheap tests' where they tell it, else the kind tables' (a prefixed message
    by MESSAGE_KINDS, default 'log'; a line without prefix by NON_PREFIXED_KINDS, default none)."""
    kind = df.get_column("kind")
    rest = kind == "?"
    bare = df.drop_in_place("_bare")
    i = df.get_column("i")
    msgs, bodies = df.get_column("msg").filter(rest), df.get_column("body").filter(bare)
    k2 = _MESSAGE_TABLE.kinds(msgs) if msgs.len() else None
    k3 = _NON_PREFIXED_TABLE.kinds(bodies) if bodies.len() else None
    if df.height <= SMALL_ROWS:
        out = kind.to_list()
        for mask, k in ((bare, k3), (rest, k2)):
            if k is not None:
                for j, v in zip(i.filter(mask).to_list(), k, strict=True):
                    out[j] = v
        return pl.Series("kind", out, dtype=pl.String)
    full2, full3 = _nulls("k2", df.height, pl.String), _nulls("k3", df.height, pl.String)
    if k2 is not None:
        full2 = full2.scatter(i.filter(rest), pl.Series(k2, dtype=pl.String))
    if k3 is not None:
        full3 = full3.scatter(i.filter(bare), pl.Series(k3, dtype=pl.String))
    return df.select(pl.coalesce(pl.lit(full2), pl.when(pl.col("kind") != "?").then(pl.col("kind")),
                                 pl.lit(full3)).alias("kind")).to_series()


def _what_starts(df: pl.DataFrame, what: pl.Series, head: bool = False) -> pl.DataFrame:
    """The torch watchdog's message printed only as the text of its exception (``TORCH_WHAT``: std::terminate's
    '  what():  [PG 1 Rank 7] Process group watchdog thread terminated with exception: ...', the glog line and its
    time not in the evidence) starts a ``torch_nccl`` record of its own after another kind of record.  Inside a
    torch record (after the watchdog's glog line, whose message it repeats) it stays that record's
    continuation, and so does it before a file's first record: that head continues the last record of the
    part before it (a paste split into files, its glog line at the end of the first).  ``what``: the lines
    that hold 'what():'."""
    if not what.any():
        return df
    pre = df.filter(df.get_column("kind").is_null() & what)
    if not pre.height:
        return df
    made = pre.filter(_BODY.str.contains(TORCH_WHAT) & (~_in_head(df) | head)
                      & (pl.col("rec_kind").fill_null("") != "torch_nccl")).get_column("i").to_list()
    if not made:
        return df
    df = df.with_columns(pl.when(pl.col("i").is_in(made)).then(pl.lit("torch_nccl"))
                         .otherwise(pl.col("kind")).alias("kind"))
    return _roles(df)


_START = pl.col("kind").is_not_null().alias("start")
# each line's record (a running count of starts) and the kind of that record
_REC = [pl.col("start").cast(pl.Int64).cum_sum().alias("rec"), pl.col("kind").forward_fill().alias("rec_kind")]
_ROLE = (pl.when(pl.col("start")).then(pl.lit("start"))
         .when(pl.col("rec") == 0).then(pl.lit("unparsed"))
         .when(pl.col("blank") | pl.col("rec_kind").is_in(sorted(CONTINUABLE))).then(pl.lit("cont"))
         .otherwise(pl.lit("unparsed")).alias("role"))


_ALL_STARTS = [pl.lit(False).alias("blank"), pl.lit(True).alias("start"),
               (pl.col("i").cast(pl.Int64) + 1).alias("rec"), pl.col("kind").alias("rec_kind"),
               pl.lit("start").alias("role")]


# parse_chunk(files=, references=, nearest=): each line's file, its reference time and whether that is dated
# evidence of the engine (FileContext.reference_nearest)
_FILE, _REF, _NEAR = "_file", "_ref", "_near"

# Several files' lines (``_FILE``): each file's head (``_FILE_HEAD``: its lines before its first record start) is
# its own, as the head of a file classified alone: its lines start no record of the file before and continue
# none; a record ends with its file (a file's first line counts as a new record, ``rec``, whether it starts
# one or not: record ids stay unique across the files).
_FIRST = pl.col(_FILE) != pl.col(_FILE).shift(1, fill_value=-1)
_FILE_HEAD = "_file_head"
_REC_FILES = [(pl.col("start") | _FIRST).cast(pl.Int64).cum_sum().alias("rec"),
              pl.col("kind").forward_fill().over(_FILE).alias("rec_kind"),
              (pl.col("start").cast(pl.Int64).cum_sum().over(_FILE) == 0).alias(_FILE_HEAD)]
_ROLE_FILES = (pl.when(pl.col("start")).then(pl.lit("start"))
               .when(pl.col(_FILE_HEAD)).then(pl.lit("unparsed"))
               .when(pl.col("blank") | pl.col("rec_kind").is_in(sorted(CONTINUABLE))).then(pl.lit("cont"))
               .otherwise(pl.lit("unparsed")).alias("role"))
_ROLE_COLUMNS = ("start", "rec", "rec_kind", "role", _FILE_HEAD)


def _with_roles(lf: pl.LazyFrame) -> pl.LazyFrame:
    if _FILE in lf.collect_schema().names():
        return lf.with_columns(_START).with_columns(_REC_FILES).with_columns(_ROLE_FILES)
    return lf.with_columns(_START).with_columns(_REC).with_columns(_ROLE)


def _roles(df: pl.DataFrame) -> pl.DataFrame:
    """Each line's record (``rec``, its kind ``rec_kind``) and role: start, continuation or unparsed (the
    roles it had, if any, worked out again)."""
    return _collect(_with_roles(df.drop([c for c in _ROLE_COLUMNS if c in df.columns]).lazy()))


def _in_head(df: pl.DataFrame) -> pl.Expr:
    """Whether a line is in its file's head, before the file's first record (of a frame with roles)."""
    return pl.col(_FILE_HEAD) if _FILE_HEAD in df.columns else pl.col("rec") == 0


# Records a prefix-less leak line may follow and still start its own record: Python's warnings go to stderr
# between log records, and one check may print several (the token pool's, then the request pool's).
_LEAK_AFTER = {"log", "mem_leak_warning"}


def _bare_leak_starts(df: pl.DataFrame, leak: pl.Series) -> pl.DataFrame:
    """An idle leak check printed without a log prefix (``BARE_LEAK``: a Python warning line, a ValueError line
    whose traceback was cut, the message alone, older releases' wordings) starts a ``mem_leak_warning`` record
    where no record takes the line, or after a plain log record or another such warning; inside a traceback it
    stays the traceback's exception line (the traceback's frames say in which context the check ran).
    ``BARE_LEAK_WEAK`` (2024's second line) starts one only where nothing takes it.  ``leak``: the lines that
    hold 'leak detected!' or 'available_size='."""
    if not leak.any():
        return df
    pre = df.filter(df.get_column("kind").is_null() & leak)
    if not pre.height:
        return df
    pre = pre.with_columns(_BODY.str.contains(BARE_LEAK).alias("_full"), _BODY.str.contains(BARE_LEAK_WEAK).alias("_weak"))
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
    return _roles(df)


def _bare_traceback_start(kind: pl.Series, body: pl.Series, file: pl.Series | None = None) -> pl.Series:
    """A traceback before the first record (pasted without the 'Scheduler hit an exception' line that
    introduced it) is an undated exception record of its own; inside a record it stays a continuation.
    ``file``: each line's file (several files' lines): before each file's first record."""
    if not kind.len() or not kind.is_null().any() or (file is None and kind[0] is not None):
        return kind                                 # no line before a file's first record
    if file is not None:
        head = pl.col("kind").is_not_null().cast(pl.Int32).cum_sum().over(_FILE) == 0
        tb = head & pl.col("body").str.contains(BARE_TRACEBACK)
        first_tb = tb & (tb.cast(pl.Int32).cum_sum().over(_FILE) == 1)
        return pl.DataFrame([kind, body, file]).select(
            pl.when(first_tb).then(pl.lit("scheduler_exception")).otherwise(pl.col("kind")).alias("kind")).to_series()
    known = kind.is_not_null()
    first = known.arg_max() if known.any() else kind.len()
    tb = body.head(first).str.contains(BARE_TRACEBACK)
    if not tb.any():
        return kind
    return kind.clone().scatter(tb.arg_max(), "scheduler_exception")


def _one_failure_summary(kind: pl.Series, body: pl.Series, file: pl.Series | None = None) -> pl.Series:
    """torchrun's failure summary is one record wherever a paste of it starts: a header inside it (its title,
    'Failures:', 'Root Cause (first observed failure):') continues it; only its exception line
    (``ChildFailedError:``) always starts one (two summaries in a row are two).  ``file``: each line's file
    (several files' lines): a summary ends with its file."""
    if not (kind == "child_failed").any():
        return kind
    summary = pl.col("kind") == "child_failed"
    inside = pl.col("kind").forward_fill().shift(1)
    inside = (inside if file is None else inside.over(_FILE)) == "child_failed"
    always = _BODY.str.contains(CHILD_FAILED_ALWAYS)
    frame = pl.DataFrame([kind, body] if file is None else [kind, body, file])
    return frame.select(pl.when(summary & inside & ~always).then(pl.lit(None, dtype=pl.String))
                        .otherwise(pl.col("kind")).alias("kind")).to_series()


def parse_chunk(lines: list[str] | pl.Series, first_line: int, ctx: FileContext,
                line_numbers: list[int] | None = None, collected_ts: list[datetime | None] | None = None,
                whole: bool = True, head_what: bool = False, files: list[int] | None = None,
                references: list[datetime] | None = None, date_access: bool = True,
                nearest: list[bool] | None = None) -> Parsed:
    """Parse a chunk of complete records; line numbers start at ``first_line``.

    The payload of an envelope gives ``line_numbers``, the physical line of each line (not consecutive
    where the envelope joined split records or dropped lines), and ``collected_ts``, the envelope's time
    of each line: rows are numbered by the first and carry the second.  ``whole=False``: the lines are
    part of a chunk (``sglang_fast``): the chunk-level facts (release, clock steps, last time) are left to
    the caller, which gets the records' line, time, message and ranks in ``Parsed.starts``.  ``head_what``:
    the lines are not a file's head (``classify``).  ``files``: the lines are several files' (each line's
    file, ``ingest.batch_parse``), each read as if alone: its head (the lines before its first record) its
    own, no record running into the next file, times filled from the nearest dated record of the same file,
    else from that file's ``references`` (``nearest``: which are dated evidence of the engine, the others
    modification times; FileContext.reference_nearest).  ``date_access=False``: access lines without
    a time of their own are left undated (their caller sees records this call does not: ``sglang_fast``).
    """
    df = _classify(lines, head_what, first_line, collected_ts, files)
    if files is not None and references is not None:
        df = df.with_columns(pl.lit(datetime_series(_REF, references)).gather(pl.col(_FILE)).alias(_REF),
                             pl.lit(pl.Series(_NEAR, nearest or [False] * len(references), dtype=pl.Boolean))
                             .gather(pl.col(_FILE)).alias(_NEAR))
    out = Parsed(lines=len(lines), interleaved=int(df.get_column("interleaved").sum()))
    if not whole and out.interleaved:
        out.interleaved_rows = df.filter(pl.col("interleaved")).get_column("i").to_list()
    starts = _record_starts(df, ctx)
    kinds = starts.get_column("kind")
    present = set((kinds if kinds.len() <= SMALL_ROWS else kinds.unique()).to_list())
    batches = _batch_rows(starts, ctx) if "batch" in present else None
    if batches is not None:
        out.tables["batches"] = batches
    events, others = _event_rows(starts, ctx, present)
    # (stats lines are vLLM records: with_vllm_fields types them)
    stats = vllm_log.stats_rows(events) if "vllm" in present else None
    if stats is not None:
        out.tables["vllm_stats"] = stats
    rows = _detailed_rows(others, df.get_column("body"), ctx)     # (continuations without a process tag too)
    lead = _leading_dump(df, starts, first_line, rows, files)
    events = _apply_record_rows(events, rows)
    out.tables["events"] = events
    if "access" in present:
        access = _access_rows(starts, ctx)
        out.tables["http_requests"] = access if not date_access else _date_bare_access(
            access, batches, events, ctx, out, None if files is None else (first_line, files))
    elif date_access and files is None:
        ctx.record_ts = last_record_ts([batches, events], ctx.record_ts)
    out.tables["leak_reports"] = rows.leaks
    out.tables["stacks"] = rows.stacks
    out.tables["frames"] = rows.frames
    out.tables["collective_records"] = rows.collective_records
    un = _unparsed(df, lead, ctx)
    if rows.unparsed:
        un = pl.concat([un, pl.DataFrame(rows.unparsed, schema=un.schema)])
    out.tables["unparsed"] = un
    out.unparsed = un.height
    if whole:
        chunk_facts(starts[_FACTS], ctx, out)
    else:
        out.starts = starts[_FACTS]
    if line_numbers is not None:
        lm = LineMap(first_line, line_numbers, collected_ts)
        _renumber(out, lm, ctx)
        if out.starts is not None:
            out.starts = lm.frame(out.starts)
    return out


_FACTS = ["line", "ts_dt", "msg", "ranks", "kind"]     # what chunk_facts reads of each record
_UNPARSED = {"engine": pl.String, "path": pl.String, "line": pl.Int64, "text": pl.String}


def _unparsed(df: pl.DataFrame, lead: list[int], ctx: FileContext) -> pl.DataFrame:
    """The lines no record takes (but the leading dump's ``lead``)."""
    if not (df.get_column("role") == "unparsed").any():
        return pl.DataFrame(schema=_UNPARSED)
    unparsed = pl.col("role") == "unparsed"
    if lead:
        unparsed = unparsed & ~pl.col("i").is_in(lead)
    return _collect(df.lazy().filter(unparsed).select(
        pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), pl.col("line"), pl.col("text")))


def chunk_facts(starts: pl.DataFrame, ctx: FileContext, out: Parsed) -> None:
    """What a chunk's records (``_FACTS``, in file order) say as a whole: the release their formats point at
    (only releases newer than the one the file is known to be: an older one cannot change the file's), the
    last time, and the clock's steps backwards."""
    known = RELEASE_ORDER.index(ctx.release) if ctx.release in RELEASE_ORDER else len(RELEASE_ORDER)
    # ranks printed PP before TP exist only from 0.5.10 on
    ranks = starts.get_column("ranks")
    pp_first = known > RELEASE_ORDER.index("0.5.10") and ranks.null_count() < ranks.len() and \
        ranks.str.contains(PP_FIRST).any()
    msgs = starts.get_column("msg")
    if msgs.len() > RELEASE_RECORDS:    # (fewer: all of them; a null matches no trait)
        msgs = pl.concat([msgs.drop_nulls().head(RELEASE_RECORDS), rare_messages(starts)])
    out.release = newest_release(release_of(msgs, ctx.release), "0.5.10" if pp_first else None)
    ts = starts.get_column("ts_dt")
    if ts.null_count() < ts.len():
        ctx.last_ts = ts.max()  # type: ignore[assignment]
        dated = starts[["line", "ts_dt"]]
        _count_backwards(dated.drop_nulls() if ts.null_count() else dated, ctx, out)


def files_releases(looked: pl.DataFrame | pl.LazyFrame, n: int) -> list[str | None]:
    """The newest release whose traits appear in each of ``n`` files' messages (``looked``: _file, msg), by
    one query (None: no trait seen)."""
    traits = _collect(looked.lazy().group_by("_file").agg(
        [pl.col("msg").str.contains(rx).any().alias(r) for r, rx in RELEASE_TRAITS]))
    release: list[str | None] = [None] * n
    for row in traits.iter_rows():
        release[row[0]] = next((r for (r, _), hit in zip(RELEASE_TRAITS, row[1:], strict=True) if hit), None)
    return release


def _leading_dump(df: pl.DataFrame, starts: pl.DataFrame, first_line: int, rows: RecordRows,
                  files: list[int] | None = None) -> list[int]:
    """Offsets of a headerless py-spy part before the chunk's first record (only a file's first chunk has
    lines before a record start), parsed into ``rows``; ``files``: each line's file, a part before each
    file's first record."""
    if not df.height or (files is None and df.get_column("rec")[0] != 0):   # (rec counts the starts so far)
        return []
    heads = df.filter(_in_head(df) & ~pl.col("start"))
    if not heads.height:
        return []
    # each file's lines, and its first dated record (starts are numbered from first_line, as the lines)
    of = pl.Series(_FILE, files if files is not None else [0] * df.height, dtype=pl.Int32)
    first_ts = dict(starts.select(pl.lit(of).gather(pl.col("line") - first_line), "ts_dt").drop_nulls()
                    .group_by(_FILE, maintain_order=True).agg(pl.col("ts_dt").first()).iter_rows())
    lead: list[int] = []
    for (k,), head in heads.select("i", "body", of.gather(heads.get_column("i"))).partition_by(
            _FILE, as_dict=True, maintain_order=True).items():
        i0 = head.get_column("i")[0]
        lead += [i0 + o for o in leading_dump(head.get_column("body").to_list(), first_line + i0,
                                              first_ts.get(k), rows)]
    return sorted(lead)


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


_KEPT = pl.col("role") != "unparsed"
# a record's lines are consecutive and its start is kept: its last kept line and row are those carried
# forward to the record's last row, and from there back to its start (no grouping: records are runs)
_LAST = pl.col("start").shift(-1, fill_value=True) & (pl.col("rec") > 0)
_ENDS = [pl.when(_LAST).then(pl.when(_KEPT).then(pl.col("line")).forward_fill()).backward_fill().alias("line_end"),
         pl.when(_LAST).then(pl.when(_KEPT).then(pl.col("i")).forward_fill()).backward_fill().alias("i_end")]
# (several files' lines: the head of the file after a record is never kept, so the record's last kept line is
# its own file's)
_ONE_LINE = [pl.col("line").alias("line_end"), pl.col("i").alias("i_end")]
_TS_DT = pl.col("ts").str.replace(",", ".", literal=True).str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False) \
    .alias("ts_dt")
# polars parses year 0000, which no Python datetime can hold (the rows are read back in Python): unknown
_TS_YEAR = pl.when(pl.col("ts_dt").dt.year() >= 1).then(pl.col("ts_dt")).alias("ts_dt")
_NO_TS = pl.lit(None, dtype=pl.Datetime("us")).alias("ts_dt")
_DATED = pl.col("ts_dt").forward_fill().backward_fill()




def _record_starts(df: pl.DataFrame, ctx: FileContext) -> pl.DataFrame:
    """One row per record: its first line, its last line (continuations) and the dated lines around it
    (glog and vLLM print no year: they take it from the nearest SGLang timestamp, else from the line's
    envelope time, else from the file's modification time)."""
    several = _FILE in df.columns
    dated = _DATED.over(_FILE) if several else _DATED
    if ctx.last_ts is not None:
        dated = dated.fill_null(datetime_lit(ctx.last_ts))
    ref = pl.col(_REF) if several else datetime_lit(ctx.reference or datetime(ctx.default_year, 1, 1))
    by_mtime = ~pl.col(_NEAR) if several else pl.lit(not ctx.reference_nearest)
    d = pl.col("_dated")
    if "collected_ts" in df.columns:        # else no envelope time: null
        ctx_ts = d.fill_null(pl.col("collected_ts")).fill_null(ref)
        mtime = d.is_null() & pl.col("collected_ts").is_null() & by_mtime
    else:
        ctx_ts, mtime = d.fill_null(ref), d.is_null() & by_mtime
    if df.get_column("start").all():        # every line a record's start: each record that line
        lf = df.lazy().with_columns(_ONE_LINE)
    else:
        lf = df.lazy().with_columns(_ENDS).filter(pl.col("start"))
    ts = df.get_column("ts")
    lf = lf.with_columns(_NO_TS) if ts.null_count() == ts.len() else lf.with_columns(_TS_DT).with_columns(_TS_YEAR)
    return _collect(lf
                    .with_columns(dated.alias("_dated")).with_columns(
                        ctx_ts.alias("ctx_ts"), d.is_not_null().alias("ctx_dated"), mtime.alias("ctx_mtime"),
                        (pl.col("ts_dt").backward_fill().over(_FILE) if several else pl.col("ts_dt").backward_fill())
                        .alias("next_ts")).drop("_dated", *([_FILE, _REF, _NEAR] if several else []))
                    .drop(_FILE_HEAD, strict=False))


def _batch_rows(starts: pl.DataFrame, ctx: FileContext) -> pl.DataFrame | None:
    """Prefill/Decode batch lines, every key found by a literal ', key: ' (never by position)."""
    b = starts.filter(pl.col("kind") == "batch")
    if not b.height:
        return None
    return batch_rows(b, [pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), pl.col("line"),
                          pl.col("ts_dt").alias("ts"), pl.col("ranks").str.strip_chars().alias("rank")])


_AMSG = pl.coalesce(pl.col("msg"), _BODY.str.replace(r"^\(\w+ pid=\d+\) ", "")).alias("amsg")


def _access_rows(starts: pl.DataFrame, ctx: FileContext) -> pl.DataFrame:
    """The access records (the chunk has some) as ``http_requests`` rows."""
    return _collect(starts.lazy().filter(pl.col("kind") == "access").with_columns(_AMSG)
                    .with_columns(pl.col("amsg").str.extract_groups(ACCESS).alias("ag")).unnest("ag").select(
        pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("file"), pl.col("line"),
        pl.col("ts_dt").alias("ts"), pl.col("client"), pl.col("method"),
        pl.col("upath").alias("path"), pl.col("status").cast(pl.Int32, strict=False),
        *([pl.col("collected_ts")] if "collected_ts" in starts.columns else []),
    ))


def _date_bare_access(access: pl.DataFrame, batches: pl.DataFrame | None, events: pl.DataFrame, ctx: FileContext,
                      out: Parsed, files: tuple[int, list[int]] | None = None) -> pl.DataFrame:
    """Access lines printed without a time of their own (uvicorn's default format, vLLM's API server).

    One with an envelope time is left for its envelope (ingest aligns it to the payload clock through the
    file's lines that carry both); one without is dated by the dated record before it in the file, an
    estimate (the line was printed at or after that time).  ``ctx.record_ts`` carries that record across
    chunks.  ``files``: (first line, each line's file) of several files' lines (``parse_chunk``): a record
    dates the access lines of its own file only."""
    frames = [f for f in (access, batches, events) if f is not None and f.height]
    by: list[pl.Expr] = []
    if files is not None:
        by = [pl.lit(pl.Series(files[1], dtype=pl.Int32)).gather(pl.col("line") - files[0]).alias(_FILE)]
    bare = pl.col("ts").is_null()
    if "collected_ts" in access.columns:
        out.dated_by_envelope, n_bare = access.select((bare & pl.col("collected_ts").is_not_null()).sum().alias("a"),
                                                      (bare & pl.col("collected_ts").is_null()).sum().alias("b")).row(0)
        bare = bare & pl.col("collected_ts").is_null()
    else:
        n_bare = access.get_column("ts").null_count()
    if n_bare:
        dated = pl.concat([f.select("line", pl.col("ts").cast(pl.Datetime("us")).alias("_prev"), *by) for f in frames]) \
            .drop_nulls().sort("line")
        # (both sorted by line, so within each file too: polars cannot check that with 'by')
        prev = access.select("line", *by).join_asof(dated, on="line", strategy="backward", by=_FILE if by else None,
                                                     check_sortedness=not by).get_column("_prev")
        if ctx.record_ts is not None:
            prev = prev.fill_null(ctx.record_ts)
        access = access.with_columns(prev)
        out.dated_by_previous = access.select((bare & pl.col("_prev").is_not_null()).sum()).item()
        access = access.with_columns(pl.when(bare).then(pl.col("_prev")).otherwise(pl.col("ts")).alias("ts")) \
            .drop("_prev")
    ctx.record_ts = last_record_ts(frames, ctx.record_ts)
    return access


def last_record_ts(frames: list[Any], before: datetime | None) -> datetime | None:
    """The time of the dated row furthest down ``frames`` (tables with line and ts: polars or Arrow), or
    ``before`` where none has one: the record the next chunk's access lines without a time are dated by."""
    last = []
    for f in frames:
        if f is None or not len(f):
            continue
        if not isinstance(f, pl.DataFrame):
            f = pl.from_arrow(f.select(["line", "ts"]))
            assert isinstance(f, pl.DataFrame)
        last.append(f.filter(pl.col("ts").is_not_null()).select(pl.col("line").max(),
                                                                 pl.col("ts").sort_by("line").last()).row(0))
    last = [r for r in last if r[0] is not None]
    return max(last)[1] if last else before     # (by line: the dated record furthest down the file)


_DETAILED = sorted(DETAILED)


def _event_rows(starts: pl.DataFrame, ctx: FileContext, present: set[str]) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Every other record as an event; also returns the records whose kind needs the Python walk (None: no
    such record).  ``present``: the kinds of the records.

    vLLM records ('MM-DD HH:MM:SS' with no year, a process tag, their own message kinds and attributes)
    are read by ``vllm_log``."""
    lf = starts.lazy()
    if present & {"batch", "access"}:
        lf = lf.filter(~pl.col("kind").is_in(["batch", "access"]))
    head = [pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), pl.col("line"), pl.col("line_end")]
    if "vllm" in present:
        events = vllm_log.with_vllm_fields(_collect(lf)).select(
            *head, pl.coalesce(pl.col("ts_dt"), pl.col("_vdt")).alias("ts"),
            pl.coalesce(pl.col("ranks").str.strip_chars(), pl.col("_vrank")).fill_null("").alias("rank"),
            pl.col("kind"),
            pl.coalesce(pl.col("msg"), pl.col("_vmsg"), pl.col("body")).str.slice(0, 2000).alias("message"),
            pl.col("_vattrs").alias("attrs"))
    else:                   # (what the vLLM fields give where none is set)
        events = _collect(lf.select(*head, pl.col("ts_dt").alias("ts"), _RANK, pl.col("kind"), _MESSAGE,
                                    pl.lit(None, dtype=pl.String).alias("attrs")))
    # (vLLM's records are of none of these kinds, before with_vllm_fields types them and after)
    return events, starts.filter(pl.col("kind").is_in(_DETAILED)) if present & DETAILED else None


_RANK = pl.col("ranks").str.strip_chars().fill_null("").alias("rank")
_MESSAGE = pl.coalesce(pl.col("msg"), pl.col("body")).str.slice(0, 2000).alias("message")


def _detailed_rows(records: pl.DataFrame | None, lines: pl.Series, ctx: FileContext) -> RecordRows:
    """Walk the rare multi-line records in Python (``sglang_records``)."""
    rows = RecordRows(ctx.engine, ctx.path)
    if records is None or not records.height:
        return rows
    # a job's step lines (its log is mostly those): read at once, as ``train_steps.step_line`` reads each
    steps = (pl.col("kind") == "train_step") & pl.col("body").str.contains(r"^[\x00-\x7f]*$")
    if records.select(steps.any()).item():
        rows.fixes = train_steps.step_fixes(records.filter(steps))
        records = records.filter(~steps)
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
    fixes = rows.fixes
    if fixes is not None and fixes.height <= SMALL_ROWS:     # a few: as the other records' (dicts)
        for line, attrs, ts, rank in fixes.iter_rows():
            for found, value in ((rows.attrs, attrs), (rows.ts, ts), (rows.rank, rank)):
                if value is not None:
                    found[line] = value
        fixes = None
    if (rows.attrs or rows.ts or rows.rank) and fixes is None and events.height <= SMALL_ROWS \
            and all(t is None or t.tzinfo is None for t in rows.ts.values()):
        events = _fixed_few(events, rows)
    elif rows.attrs or rows.ts or rows.rank or fixes is not None:
        fix = pl.DataFrame({"line": list(set(rows.attrs) | set(rows.ts) | set(rows.rank))},
                           schema={"line": pl.Int64})
        fix = fix.with_columns(
            pl.col("line").replace_strict(rows.attrs, default=None, return_dtype=pl.String).alias("_attrs"),
            pl.col("line").replace_strict(rows.ts, default=None, return_dtype=pl.Datetime("us")).alias("_ts"),
            pl.col("line").replace_strict(rows.rank, default=None, return_dtype=pl.String).alias("_rank"),
        )
        if fixes is not None:
            fix = pl.concat([fix, fixes.cast({"line": pl.Int64, "_ts": pl.Datetime("us")})])
        events = _collect(events.lazy().join(fix.lazy(), on="line", how="left").with_columns(
            pl.coalesce("_attrs", "attrs").alias("attrs"),
            pl.coalesce(pl.col("ts").cast(pl.Datetime("us")), "_ts").alias("ts"),
            pl.when(pl.col("rank") == "").then(pl.col("_rank").fill_null("")).otherwise(pl.col("rank")).alias("rank"),
        ).drop("_attrs", "_ts", "_rank"))
    if rows.events:
        events = _collect(pl.concat([events.lazy().with_columns(pl.col("ts").cast(pl.Datetime("us"))),
                                     pl.DataFrame(rows.events, schema=events.schema | {"ts": pl.Datetime("us")}).lazy()],
                                    how="vertical_relaxed"))
    return events


def _fixed_few(events: pl.DataFrame, rows: RecordRows) -> pl.DataFrame:
    """``_apply_record_rows``' join of the records' attrs, times and ranks into a few events, in Python."""
    attrs, ts, rank = [], [], []
    for line, a, t, r in zip(*(events.get_column(c).to_list() for c in ("line", "attrs", "ts", "rank")), strict=True):
        found = rows.attrs.get(line)
        attrs.append(found if found is not None else a)
        ts.append(t if t is not None else rows.ts.get(line))
        rank.append((rows.rank.get(line) or "") if r == "" else r)
    return events.with_columns(pl.Series("attrs", attrs, dtype=pl.String), datetime_series("ts", ts),
                               pl.Series("rank", rank, dtype=pl.String))


def _count_backwards(dated: pl.DataFrame, ctx: FileContext, out: Parsed) -> None:
    """Count records dated well before the record above them (a clock that went backwards)."""
    ts = dated.get_column("ts_dt")
    if ts.len() <= SMALL_ROWS and not _steps_back(ts.to_list(), ctx.prev_ts):
        ctx.prev_ts = ts[-1]
        return
    prev = pl.col("ts_dt").shift(1)
    if ctx.prev_ts is not None:
        prev = prev.fill_null(datetime_lit(ctx.prev_ts))
    steps = _collect(dated.lazy().with_columns((prev - pl.col("ts_dt")).dt.total_milliseconds().alias("back_ms"))
                     .filter(pl.col("back_ms") > BACKWARDS_S * 1000))
    ctx.prev_ts = dated.get_column("ts_dt")[-1]
    if steps.height:
        out.backwards = steps.height
        top = steps.sort("back_ms", descending=True).row(0, named=True)
        out.largest_back = (top["back_ms"] / 1000, top["line"])


_BACKWARDS = timedelta(seconds=BACKWARDS_S)


def _steps_back(ts: list[datetime | None], prev: datetime | None) -> bool:
    """Whether a time of ``ts`` is more than BACKWARDS_S before the one above it (``prev`` above the first),
    in whole milliseconds as ``_count_backwards`` measures (a few times: cheaper in Python)."""
    ms = timedelta(milliseconds=1)
    for t in ts:
        if prev is not None and t is not None and (prev - t) // ms > _BACKWARDS // ms:
            return True
        prev = t
    return False
