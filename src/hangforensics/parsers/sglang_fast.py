"""The fast path of a plain SGLang log chunk: the compiled scanner (``sglang_scan``) takes the bulk (batch
and access lines it reads with certainty), the general parser (``sglang_log.parse_chunk``) everything else.

The general parser sees every line that is not bulk, and every bulk line next to one (the first and the
last of each run of bulk lines, and the chunk's first and last line).  That keeps what it derives from
a line's neighbours exact: a record's continuation lines end at the next start, a record without a time
takes its year from the nearest dated record before or after it, an access line without a time is dated
by the record above it.  The chunk-level facts (release traits, clock steps backwards, the last time)
are computed over all records in file order.  Rows are numbered by the file's lines.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from .sglang_log import FileContext, Parsed, chunk_facts, parse_chunk
from .sglang_patterns import RELEASE_ORDER

# Below this many bytes a read uses the general parser alone: the scanner's start-up (numba, its compiled
# code loaded from the cache: about 0.5 s of CPU per process) would cost more than it saves.
SCAN_MIN_BYTES = 16 * 1024 * 1024


class _Off(Exception):
    """The scanner is off in this process."""


def scan_min_bytes() -> int:
    """SCAN_MIN_BYTES, or HANGFORENSICS_SCAN_MIN_BYTES (the tests run every corpus through the scanner)."""
    return int(os.environ.get("HANGFORENSICS_SCAN_MIN_BYTES", SCAN_MIN_BYTES))


_scanner: Any = None       # the sglang_scan module once imported; False: unusable in this process


def scanner() -> Any:
    """The compiled scanner (``sglang_scan``), or None where it cannot run well: numba missing or broken,
    or no writable cache for its compiled code (every process would compile it afresh).  The reason is
    logged once per process; the general parser then reads every line, with the same result."""
    global _scanner
    if _scanner is None:
        try:
            from . import sglang_scan
            if not sglang_scan.CACHED:
                raise RuntimeError("no writable cache directory for numba (NUMBA_CACHE_DIR)")
            _scanner = sglang_scan
        except Exception as e:              # noqa: BLE001 (an optional accelerator: any failure means "without")
            _disable(e)
    return _scanner or None


def _disable(e: BaseException) -> None:
    global _scanner
    _scanner = False
    logging.getLogger(__name__).warning("the compiled log scanner is off (%s: %s); large logs are read by the "
                                        "general parser, more slowly", type(e).__name__, e)


def warm_scanner() -> None:
    """Load the scanner's compiled code (numba reads it from its cache on the first call: some 0.4 s) with
    the argument types ``parse_plain_chunk`` passes."""
    sc = scanner()
    if sc is None:
        return
    raw = b"[2025-01-01 00:00:00] Decode batch. #running-req: 1\n"
    buf = np.frombuffer(raw, np.uint8)
    try:
        sc.scan(buf, np.zeros(1, np.int64), np.array([len(raw) - 1], np.int64), np.flatnonzero(buf == 91),
                raw.isascii())
    except Exception as e:                  # noqa: BLE001 (as in parse_plain_chunk: the general parser then)
        _disable(e)


def parse_plain_chunk(raw: bytes, first_line: int, ctx: FileContext) -> Parsed:
    """Parse the lines of a plain log chunk (``raw``: its bytes, valid UTF-8) as ``parse_chunk`` does."""
    buf = np.frombuffer(raw, np.uint8)
    nl = np.flatnonzero(buf == 10)
    n = len(nl) + (1 if len(buf) and buf[-1] != 10 else 0)
    if not n:
        return Parsed()
    starts = np.r_[0, nl + 1][:n].astype(np.int64)
    ends = np.r_[nl, len(buf)][:n].astype(np.int64)
    ends -= (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)          # CRLF
    # every line as a string view over the bytes, its line ending included (sliced where used)
    lines = pl.from_arrow(pa.LargeStringArray.from_buffers(n, pa.py_buffer(np.r_[starts, len(buf)]),
                                                           pa.py_buffer(raw)))
    assert isinstance(lines, pl.Series)
    sc = scanner()
    try:
        if sc is None:
            raise _Off
        kind, ts, rank, ival, ist, fval, fst, graph, flags, spans, mstart = sc.scan(
            buf, starts, ends, np.flatnonzero(buf == 91), raw.isascii())
    except Exception as e:                  # noqa: BLE001 (compiling or caching failed: the general parser)
        if sc is not None:
            _disable(e)
        return parse_chunk(lines.str.strip_suffix("\n").str.strip_suffix("\r"), first_line, ctx)
    bulk = (kind == sc.BATCH) | (kind == sc.ACCESS)
    other = ~bulk
    near = np.zeros(n, np.bool_)
    near[1:] |= other[:-1]
    near[:-1] |= other[1:]
    near[0] = near[-1] = True
    fast = bulk & ~near
    keep = np.flatnonzero(~fast)
    line_of = np.arange(first_line, first_line + n, dtype=np.int64)
    text = lines.gather(keep).str.strip_suffix("\n").str.strip_suffix("\r")
    out = parse_chunk(text, first_line, ctx, line_numbers=line_of[keep].tolist(), whole=False)
    rank = rank - starts[:, None]
    spans = spans.copy()
    spans[:, :6] -= starts[:, None]
    fi = np.flatnonzero(fast)
    ranks = _strings(lines.gather(fi), rank[fi, 0], rank[fi, 1])
    is_batch = kind[fi] == sc.BATCH
    fb, fa = fi[is_batch], fi[~is_batch]
    for table, rows in _bulk_frames(ctx, lines, fb, fa, ranks.filter(pl.Series(is_batch)), line_of, ts, ival, ist,
                                    fval, fst, graph, flags, spans).items():
        have = out.tables.get(table)
        if rows.height:
            out.tables[table] = rows if have is None or not have.height else \
                pl.concat([have, rows], how="vertical_relaxed").sort("line")
    assert out.starts is not None
    chunk_facts(_all_starts(out.starts, ctx, lines, fi, line_of, ts, mstart - starts, ends - starts, ranks), ctx, out)
    out.starts = None
    _record_time(out, ctx)
    out.lines = n
    return out


def _all_starts(rest: pl.DataFrame, ctx: FileContext, lines: pl.Series, fi: np.ndarray, line_of: np.ndarray,
                ts: np.ndarray, msg_at: np.ndarray, end_at: np.ndarray, ranks: pl.Series) -> pl.DataFrame:
    """The records of the whole chunk in file order (line, ts_dt, msg, ranks) for ``chunk_facts``: the
    general parser's and the bulk lines'.  Messages are cut only where the release traits are looked
    for: the first 20000 records, and not once the file is known to be of the newest release."""
    want = 0 if ctx.release == RELEASE_ORDER[0] else min(len(fi), 20000)
    head = fi[:want]
    msgs = _strings(lines.gather(head), msg_at[head], end_at[head])
    bulk = pl.DataFrame({
        "line": line_of[fi], "ts_dt": pl.Series(ts[fi]).cast(pl.Datetime("us")),
        "msg": pl.concat([msgs, pl.repeat(None, len(fi) - want, dtype=pl.String, eager=True)]),
        # as the prefix printed them: ' TP0' (the grammar's items each start with a blank)
        "ranks": pl.DataFrame({"r": ranks}).select(
            pl.when(pl.col("r") != "").then(pl.lit(" ") + pl.col("r")).otherwise(pl.lit(""))).to_series(),
    })
    return pl.concat([rest.with_columns(pl.col("ts_dt").cast(pl.Datetime("us"))), bulk]).sort("line")


def _record_time(out: Parsed, ctx: FileContext) -> None:
    """The dated record furthest down the chunk (access lines without a time of their own in the next chunk
    are dated by it), when the chunk has access lines (as ``_date_bare_access`` keeps it)."""
    access = out.tables.get("http_requests")
    if not isinstance(access, pl.DataFrame) or not access.height:
        return
    frames = [f for f in (access, out.tables.get("batches"), out.tables.get("events"))
              if isinstance(f, pl.DataFrame) and f.height]
    last = [f.filter(pl.col("ts").is_not_null()).select(pl.col("line").max(), pl.col("ts").sort_by("line").last())
            .row(0) for f in frames]
    last = [r for r in last if r[0] is not None]
    if last:
        ctx.record_ts = max(last)[1]


def _strings(texts: pl.Series, begin: np.ndarray, end: np.ndarray) -> pl.Series:
    """Substrings [begin, end) of ASCII lines (bulk lines are ASCII: bytes are characters)."""
    return pl.DataFrame({"t": texts, "a": begin, "n": end - begin}).select(
        pl.col("t").str.slice(pl.col("a"), pl.col("n"))).to_series()


def _masked(values: np.ndarray, status: np.ndarray) -> pa.Array:
    return pa.array(values, mask=status != 1)


def _bulk_frames(ctx: FileContext, lines: pl.Series, fb: np.ndarray, fa: np.ndarray, ranks: pl.Series,
                 line_of: np.ndarray, ts: np.ndarray, ival: np.ndarray, ist: np.ndarray, fval: np.ndarray,
                 fst: np.ndarray, graph: np.ndarray, flags: np.ndarray, spans: np.ndarray) -> dict[str, pl.DataFrame]:
    """``batches`` and ``http_requests`` rows of the bulk lines the general parser does not see."""
    from .sglang_scan import FLOAT_COLS, INT_COLS, NINT

    out: dict[str, pl.DataFrame] = {}
    if len(fb):
        pend, pst = ival[fb, 1 + NINT:], ist[fb, 1 + NINT:]
        cols: dict[str, pa.Array] = {
            "line": pa.array(line_of[fb]), "ts": pa.array(ts[fb]).cast(pa.timestamp("us")),
            "forward_iter": _masked(ival[fb, 0], ist[fb, 0])}
        for k, c in enumerate(INT_COLS):
            cols[c] = _masked(ival[fb, 1 + k], ist[fb, 1 + k])
        for k, c in enumerate(FLOAT_COLS):
            cols[c] = _masked(fval[fb, k], fst[fb, k])
        cols["graph"] = pa.array(graph[fb] == 1, mask=graph[fb] < 0)
        # PD lines: the sum of the counters read (none read: 0, as polars' sum_horizontal)
        cols["pending_req"] = pa.array(np.where(pst == 1, pend, 0).sum(axis=1), mask=flags[fb, 1] != 1)
        out["batches"] = pl.from_arrow(pa.table(cols)).select(
            pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), "line", "ts", ranks.alias("rank"),
            pl.Series("batch_kind", np.where(flags[fb, 0] == 1, "Prefill", "Decode")).cast(pl.String),
            "forward_iter", *INT_COLS, *FLOAT_COLS, "graph", "pending_req")
    if len(fa):
        t = lines.gather(fa)
        sp = spans[fa]
        out["http_requests"] = pl.DataFrame({
            "engine": pl.repeat(ctx.engine, len(fa), eager=True), "file": pl.repeat(ctx.path, len(fa), eager=True),
            "line": line_of[fa], "ts": pl.Series(ts[fa]).cast(pl.Datetime("us")),
            "client": _strings(t, sp[:, 0], sp[:, 1]), "method": _strings(t, sp[:, 2], sp[:, 3]),
            "path": _strings(t, sp[:, 4], sp[:, 5]), "status": pl.Series(sp[:, 6]).cast(pl.Int32),
        })
    return out
