"""The fast path of a plain SGLang log chunk (or of the payload behind a collector's prefix, one payload line
per physical line: ``ScanGroup``): the compiled scanner (``sglang_scan``) takes the bulk (batch and access
lines it reads with certainty), the general parser (``sglang_log.parse_chunk``) everything else.

The general parser sees every line that is not bulk, and every bulk line next to one (the first and the
last of each run of bulk lines, and the chunk's first and last line).  That keeps what it derives from
a line's neighbours exact: a record's continuation lines end at the next start, a record without a time
takes its year from the nearest dated record before or after it, an access line without a time is dated
by the record above it.  Rows are numbered by the file's lines.

The rows are those of the general path, which reads the same chunks (the reader's, cut at the same places)
one ``parse_chunk`` each.  A group of chunks read by one call of the general parser gives the same rows
where each chunk meets the one before at a line with a plain SGLang prefix on both sides of the cut (a
dated record ends the one, another starts the next: nothing of a record, its time or its neighbours' dates
crosses the cut).  Elsewhere the group ends before the chunk (``ScanGroup.add``): the head of a chunk that
is no record start (a line the reader took for one, a last line without its newline) stays unparsed as in
the general path, where in one call the line above would have continued it.  The chunk-level facts (the
release traits in a chunk's first records, clock steps backwards, the last time) are each chunk's in turn,
over all its records in file order.  Access lines without a time (a vLLM API server's, uvicorn's) are bulk
too: each is dated by the dated record before it in the file, over the group's rows, as the general path
dates them chunk by chunk.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ..datetimes import from_micros, micros_of
from . import sglang_log
from .sglang_log import BACKWARDS_S, SMALL_ROWS, FileContext, Parsed, parse_chunk
from .sglang_patterns import RELEASE_ORDER, newest_release
from .sglang_releases import bulk_release, release_in

# Below this many bytes a read uses the general parser alone where the scanner is not loaded yet: its start-up
# (numba, its compiled code loaded from the cache: about 0.5-1 s of CPU per process) would cost more than it
# saves.  A parser worker has it loaded (``warm_scanner``): it reads every plain log with it.
SCAN_MIN_BYTES = 16 * 1024 * 1024


class _Off(Exception):
    """The scanner is off in this process."""


def scan_min_bytes() -> int:
    """SCAN_MIN_BYTES, or HANGFORENSICS_SCAN_MIN_BYTES (the tests run every corpus through the scanner).
    0 in a process whose scanner is warm already (a parser worker forked from a fork server that loaded it):
    its start-up is paid, and it reads a log of any size with the general parser's rows for less CPU."""
    env = os.environ.get("HANGFORENSICS_SCAN_MIN_BYTES")
    if env is not None:
        return int(env)
    return 0 if _warm else SCAN_MIN_BYTES


_scanner: Any = None       # the scanner once loaded (``scanner``); False: unusable in this process
_warm = False              # its compiled code is loaded (warm_scanner ran)


def scanner() -> Any:
    """The compiled scanner, or None where it cannot run well.  The module built ahead of time (``scan_aot``:
    imported in a millisecond, built on first use); where it cannot be built, numba's JIT-compiled
    ``sglang_scan`` with its code cached on disk; neither where numba is missing or broken, or has no writable
    cache for its code (every process would compile it afresh).  The reason is logged once per process; the
    general parser then reads every line, with the same result."""
    global _scanner
    if _scanner is None:
        try:
            _scanner = _ahead_of_time()
        except Exception:                   # noqa: BLE001 (said where it failed: the JIT's code then)
            try:
                from . import envelope_cut, sglang_scan
                if not sglang_scan.CACHED:
                    raise RuntimeError("no writable cache directory for numba (NUMBA_CACHE_DIR)")
                # (one module, as the one built ahead of time is)
                sglang_scan.envelope_cut, sglang_scan.docker_cut, sglang_scan.yearless_cut = \
                    envelope_cut.envelope_cut, envelope_cut.docker_cut, envelope_cut.yearless_cut
                _scanner = sglang_scan
            except Exception as e:              # noqa: BLE001 (an optional accelerator: any failure means "without")
                _disable(e)
    return _scanner or None


def _ahead_of_time() -> Any:
    """The scanner built ahead of time, with the kinds its callers compare with."""
    from types import SimpleNamespace

    from . import scan_aot, scan_layout

    module = scan_aot.load_or_build()
    return SimpleNamespace(bounds=module.bounds, scan=module.scan, gather=module.gather,
                           envelope_cut=module.envelope_cut, docker_cut=module.docker_cut,
                           yearless_cut=module.yearless_cut, REST=scan_layout.REST,
                           BATCH=scan_layout.BATCH, ACCESS=scan_layout.ACCESS, BATCH_SLOW=scan_layout.BATCH_SLOW,
                           DATED=scan_layout.DATED, ACCESS_BARE=scan_layout.ACCESS_BARE, built_ahead=True)


def _disable(e: BaseException) -> None:
    global _scanner
    _scanner = False
    logging.getLogger(__name__).warning("the compiled log scanner is off (%s: %s); large logs are read by the "
                                        "general parser, more slowly", type(e).__name__, e)


def warm_scanner() -> None:
    """Load the scanner's compiled code (numba reads it from its cache on the first call: some 0.4 s) with
    the argument types ``ScanGroup`` passes."""
    sc = scanner()
    if sc is None:
        return
    raw = b"[2025-01-01 00:00:00] Decode batch. #running-req: 1\n"
    buf = np.frombuffer(raw, np.uint8)
    try:
        starts, ends, brackets = sc.bounds(buf)
        sc.scan(buf, starts, ends, brackets, raw.isascii())
        sc.gather(buf, np.zeros(1, np.int64), np.ones(1, np.int64))
    except Exception as e:                  # noqa: BLE001 (as in ScanGroup.add: the general parser then)
        _disable(e)
        return
    global _warm
    _warm = True


# The scanner reads a chunk this many lines at a time: its per-line arrays (some 300 bytes a line) stay small.
SLICE_LINES = 1 << 16
# The general parser reads the lines the scanner leaves of this many bytes of chunks at once: its fixed
# cost per call (some 22 ms of building and compiling expressions, whatever the few lines it gets) is
# paid once per group, while the group's rows (some 0.75 bytes of Arrow per byte of log) wait.  Measured
# on a 2 GB log, the PSS of all processes together: 32 MB groups 921 MB, 64 MB groups 1000 MB (time alike).
GROUP_BYTES = 32 * 1024 * 1024


class ScanGroup:
    """Consecutive chunks of a plain log (``raw``: whole records, valid UTF-8) read as ``parse_chunk`` reads
    them: the compiled scanner types each chunk's bulk lines as it comes (``add``), the general parser reads
    the other lines of the whole group at once (``flush``, or ``add`` once GROUP_BYTES have come).  Each
    returns the group's ``Parsed``: the bulk lines' tables as Arrow tables (their repeated text
    dictionary-encoded), in line order with the general parser's rows.

    The payload of a log behind an envelope that leaves one payload line per physical line (a collector's
    prefix, ``readers.envelopes.columnar``) is read so too, with the envelope's time of each line
    (``collected``): as ``parse_chunk`` reads such a payload, the general parser's lines are read with theirs
    and every row carries its line's (``collected_ts``); an unparsed row quotes the file's own line
    (``original``, envelope included), kept for the general parser's lines only (no bulk line is unparsed)."""

    def __init__(self, ctx: FileContext, group_bytes: int | None = None) -> None:
        self.ctx = ctx
        self.group_bytes = GROUP_BYTES if group_bytes is None else group_bytes
        self.split: int | None = None       # the lines the last chunk given was split into (None: it was not)
        self._start()

    def _start(self) -> None:
        self.slices: list[_Slice] = []
        self.keep_text: list[pa.LargeStringArray] = []      # the lines the general parser reads, in order
        self.keep_lines: list[np.ndarray] = []
        self.first_line: int | None = None
        self.chunks: list[int] = []                         # the first line of each chunk of the group
        self.collected: list[pl.Series] = []                # each chunk's envelope times (none: a plain log)
        self.originals: list[pl.Series] = []                # ... and the file's own text of its kept lines
        self.last_dated = False                             # the last chunk's last line is a dated record start
        self.lines = self.bytes = 0

    def add(self, raw: bytes, first_line: int, collected: pl.Series | None = None, original: pl.Series | None = None
            ) -> tuple[list[Parsed], list[Parsed]]:
        """Scan one chunk (the reader's, as the general path reads it); returns (before, done): ``before``
        the group so far, parsed when this chunk cannot join it (see the module's doc), and ``done`` the
        group with this chunk when it is full, or this chunk read by the general parser alone (where the
        scanner cannot run, or it found no batch or access line in a chunk that starts a group).
        ``collected``, ``original``: behind an envelope, its time (an envelope without times: none) and the
        file's own text of each line of ``raw``."""
        buf = np.frombuffer(raw, np.uint8)
        sc = scanner()
        text = _Text(sc, buf)
        self.split = None
        try:
            if sc is None:
                raise _Off
            starts, ends, brackets = sc.bounds(buf)
            self.split = len(starts)
            if not len(starts):
                return [], []
            slices, keep, keep_text = self._slices(sc, text, starts, ends, brackets, raw.isascii(), first_line)
        except Exception as e:              # noqa: BLE001 (compiling or caching failed: the general parser)
            if sc is not None:
                _disable(e)
            return self.flush(), [_alone(_lines(raw), first_line, self.ctx, collected, original)]
        return self._join(slices, keep, keep_text, first_line, len(starts), len(raw), collected,
                          (lambda: original.gather(keep)) if original is not None else None,
                          (lambda: original) if original is not None else None)

    def add_cut(self, raw: bytes, first_line: int, layers: np.ndarray, timed: bool, years: Any = None
                ) -> tuple[list[Parsed], list[Parsed]] | None:
        """``add`` of a chunk of a log behind an envelope whose prefixes ``envelope_cut`` cuts (``layers``;
        ``timed``: the outermost gives each line its time), read from the file's own bytes: each line's
        payload is where the scanner reads it, as ``add`` reads the payload the envelope's column gives
        (docker's JSON: its texts unescaped by ``docker_cut`` into bytes of their own; a year-less time:
        ``yearless_cut``'s fields, the year by ``years``, the file's ``times._Years``, moved on only when the
        chunk is read so).  None (nothing done) where the column must unwrap the chunk (FALLBACK, a step of half
        a year), or the scanner finds no bulk line in it: the caller then reads it as before
        (``parse._scan_payload``), the same rows either way."""
        from ...readers.envelopes.columnar import yearless_times
        from .scan_layout import DOCKER_JSON, JOURNALD_SHORT, NO_TIME, OK, SYSLOG_3164

        sc = scanner()
        if sc is None:
            return None
        buf = np.frombuffer(raw, np.uint8)
        own = _Text(sc, buf)
        self.split = None
        try:
            starts, ends, brackets = sc.bounds(buf)
            n = self.split = len(starts)
            if not n:
                return None
            fields = None
            if layers[0] == DOCKER_JSON:
                out, times, status = sc.docker_cut(buf, starts, ends)
                if status != OK:
                    return None
                text, size = _Text(sc, out), len(out)
                pstarts, pends, brackets = sc.bounds(out)
                ascii_all = bytes(out).isascii()
            else:
                if layers[0] in (JOURNALD_SHORT, SYSLOG_3164):
                    pstarts, fields, status = sc.yearless_cut(buf, starts, ends, bool(layers[0] == SYSLOG_3164))
                else:
                    pstarts, times, status = sc.envelope_cut(buf, starts, ends, layers)
                if status != OK:
                    return None
                # (the payload's bytes as ``parse._payload_bytes`` joins them: the group's size counts those)
                text, pends, size, ascii_all = own, ends, int((ends - pstarts).sum()) + n, raw.isascii()
            slices, keep, keep_text = self._slices(sc, text, pstarts, pends, brackets, ascii_all, first_line)
        except Exception:                   # noqa: BLE001 (the column's way, whose failure ``add`` handles)
            return None
        if not any(s.bulk for s in slices):
            return None
        if fields is not None:
            times = yearless_times(fields, years)
            if times is None:
                return None
        collected = None
        if timed:
            at = pl.Series("collected_ts", times)
            collected = pl.select(pl.when(at != NO_TIME).then(at).cast(pl.Datetime("us"))).to_series()
        return self._join(slices, keep, keep_text, first_line, n, size, collected,
                          lambda: own.series(starts[keep], ends[keep]), lambda: own.series(starts, ends))

    def _slices(self, sc: Any, text: _Text, starts: np.ndarray, ends: np.ndarray, brackets: np.ndarray,
                ascii_all: bool, first_line: int) -> tuple[list[_Slice], np.ndarray, pa.LargeStringArray]:
        """The chunk's lines through the scanner, a slice at a time: the slices, the lines the general parser
        reads (indices) and their text."""
        n = len(starts)
        line_of = np.arange(first_line, first_line + n, dtype=np.int64)
        head = _release_records(self.ctx)                   # bulk messages still looked at for the release
        slices: list[_Slice] = []
        for a in range(0, n, SLICE_LINES):
            slices.append(_Slice(sc, text, starts, ends, a, min(a + SLICE_LINES, n), brackets, ascii_all,
                                 line_of, self.ctx, head))
            head -= slices[-1].messages
        keep = np.concatenate([s.keep for s in slices])
        return slices, keep, text.arrow(starts[keep], ends[keep])

    def _join(self, slices: list[_Slice], keep: np.ndarray, keep_text: pa.LargeStringArray, first_line: int,
              n: int, size: int, collected: pl.Series | None, kept_original: Callable[[], pl.Series] | None,
              original: Callable[[], pl.Series] | None) -> tuple[list[Parsed], list[Parsed]]:
        """``add``'s chunk, scanned, joined to the group (or read alone): ``n`` lines of ``size`` bytes;
        ``kept_original``, ``original``: the file's own text of the kept lines, of every line."""
        before: list[Parsed] = []
        if self.first_line is None or not (self.last_dated and slices[0].first_dated):
            before = self.flush()
            if not any(s.bulk for s in slices):     # nothing for the scanner: the general path's own reading
                lines = pl.from_arrow(keep_text)
                assert isinstance(lines, pl.Series)
                return before, [_alone(lines, first_line, self.ctx, collected,
                                       original() if original is not None else None)]
        self.keep_text.append(keep_text)
        self.keep_lines.append(np.arange(first_line, first_line + n, dtype=np.int64)[keep])
        if collected is not None:
            self.collected.append(collected)
        if kept_original is not None:
            self.originals.append(kept_original())
        for s in slices:
            s.chunk = len(self.chunks)
        self.slices += slices
        self.chunks.append(first_line)
        self.last_dated = slices[-1].last_dated
        self.first_line = first_line if self.first_line is None else self.first_line
        self.lines += n
        self.bytes += size
        return before, (self.flush() if self.bytes >= self.group_bytes else [])

    def flush(self) -> list[Parsed]:
        """The ``Parsed`` of the chunks added since the last one (none: nothing)."""
        if self.first_line is None:
            return []
        ctx, slices = self.ctx, self.slices
        keep = pl.from_arrow(pa.chunked_array(self.keep_text, pa.large_string()))
        assert isinstance(keep, pl.Series)
        keep_lines = np.concatenate(self.keep_lines)
        collected = pl.concat(self.collected) if self.collected else None
        # (access lines without a time are dated below, by the rows of the whole group: the general parser
        # does not see every record before them)
        out = parse_chunk(keep, self.first_line, ctx, line_numbers=keep_lines.tolist(), whole=False,
                          collected_ts=None if collected is None else collected.gather(keep_lines - self.first_line),
                          date_access=False)
        # the rows of every bulk line come from the scanner: the general parser's of those it saw are dropped
        seen = pl.Series(np.concatenate([s.seen for s in slices]))
        for table in ("batches", "http_requests"):
            rows = [s.tables[table] for s in slices if s.tables.get(table) is not None]
            if rows:
                bulk = _concat(rows) if collected is None else _with_collected(_concat(rows), collected,
                                                                                self.first_line)
                out.tables[table] = _in_line_order(out.tables.get(table), seen, bulk)
        if self.originals:
            _quote_originals(out, pl.concat(self.originals), keep_lines)
        assert out.starts is not None
        _chunk_facts(out.starts, ctx, out, slices, self.chunks)
        out.starts = None
        _date_access(out, ctx)
        out.lines = self.lines
        self._start()
        return [out]


def _alone(lines: pl.Series, first_line: int, ctx: FileContext, collected: pl.Series | None,
           original: pl.Series | None) -> Parsed:
    """A chunk read by the general parser alone (behind an envelope: with its text of each line, and its time
    where it has one)."""
    if original is None:
        return parse_chunk(lines, first_line, ctx)
    out = parse_chunk(lines, first_line, ctx, list(range(first_line, first_line + len(lines))), collected)
    _quote_originals(out, original, np.arange(first_line, first_line + len(lines)))
    return out


def _quote_originals(out: Parsed, original: pl.Series, lines: np.ndarray) -> None:
    """The unparsed rows of ``out`` quoting the file's own text of their line (``original``: of ``lines``,
    ascending), as an envelope's unparsed rows do (``Payload.unparsed``)."""
    un = out.tables.get("unparsed")
    if un is not None and un.height:
        at = np.searchsorted(lines, un.get_column("line").to_numpy())
        out.tables["unparsed"] = un.with_columns(original.gather(at).alias("text"))


def _with_collected(rows: pa.Table, collected: pl.Series, first_line: int) -> pa.Table:
    """Bulk rows with the envelope's time of their line (``collected``: of the group's lines from
    ``first_line``)."""
    at = pc.subtract(rows.column("line"), first_line)
    return rows.append_column("collected_ts", collected.to_arrow().cast(pa.timestamp("us")).take(at))


def _lines(raw: bytes) -> pl.Series:
    """The lines of ``raw`` (without their LF or CRLF) as one column, split by numpy (the scanner is off)."""
    buf = np.frombuffer(raw, np.uint8)
    nl = np.flatnonzero(buf == 10)
    n = len(nl) + (1 if len(buf) and buf[-1] != 10 else 0)
    offsets = np.r_[np.r_[0, nl + 1][:n], len(buf)].astype(np.int64)
    lines = pl.from_arrow(pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw)))
    assert isinstance(lines, pl.Series)
    return lines.str.strip_suffix("\n").str.strip_suffix("\r")


class _Slice:
    """One slice of a chunk's lines through the scanner: the rows of its bulk lines (``tables``), the lines
    the general parser reads (``keep``: indices in the chunk; every line that is not bulk, and every bulk
    line next to one or at the slice's ends), the bulk lines it reads too (``seen``: line numbers), and the
    records it does not read, for the chunk's facts (``fact_lines``, ``fact_ts``: their lines and times in
    microseconds, _NO_TIME for none; ``said_lines``: the first ``head`` with a message, whose bytes are
    ``text``'s [``said_begin``, ``said_end``), their lines' starts ``said_starts``).
    ``bare``: access lines without a time are bulk too (their rows undated: the caller dates them,
    ``_date_access``), else the general parser's."""

    def __init__(self, sc: Any, text: _Text, starts: np.ndarray, ends: np.ndarray, a: int, b: int,
                 brackets: np.ndarray, ascii_all: bool, line_of: np.ndarray, ctx: FileContext, head: int,
                 bare: bool = True) -> None:
        lo, hi = np.searchsorted(brackets, [starts[a], ends[b - 1]])
        kind, ts, rank, ival, ist, fval, fst, graph, flags, spans, mstart, rid, uranks = sc.scan(
            text.buf, starts[a:b], ends[a:b], brackets[lo:hi], ascii_all)
        undated = kind == sc.ACCESS_BARE
        if not bare:
            kind[undated] = sc.REST
            undated[:] = False
        dated = (kind == sc.BATCH) | (kind == sc.ACCESS)
        bulk = dated | undated
        self.bulk = bool(bulk.any())
        # a plain SGLang prefix with a valid time (any message): a dated record start for the general parser
        self.first_dated, self.last_dated = (bool(kind[k] != sc.REST and not undated[k]) for k in (0, -1))
        self.chunk = 0                                  # which chunk of its group (ScanGroup.add)
        # the bulk lines next to a line that may continue a record, or be continued (no plain prefix of its
        # own): the general parser reads them with it.  A line with a plain prefix and a valid time starts a
        # record of its own whatever is around it (its neighbours are the scanner's).
        loose = kind == sc.REST
        near = np.zeros(len(kind), np.bool_)
        near[1:] |= loose[:-1]
        near[:-1] |= loose[1:]
        near[0] = near[-1] = True
        fast = bulk & ~near
        lines = line_of[a:b]
        self.keep = np.flatnonzero(~fast) + a
        self.seen = lines[bulk & near]
        ranks = _Ranks(text, np.flatnonzero(dated), rank, rid, uranks)     # (a bare line has none)
        self.rank_names = ranks.names
        rows = _Bulk(ctx, text, np.flatnonzero(bulk), kind == sc.BATCH, lines, ts, undated, spans, ranks)
        self.tables = {"batches": rows.batches(ival, ist, fval, fst, graph, flags), "http_requests": rows.access()}
        fi = np.flatnonzero(fast)
        told = ~undated[fi]                             # (a bare access line is a record without a message)
        said = np.flatnonzero(told)[:max(head, 0)]
        self.messages = len(said)
        self.fact_lines = lines[fi]
        self.fact_ts = np.where(told, ts[fi], _NO_TIME)
        self.said_lines = self.fact_lines[said]
        # their messages' bytes, and their lines' starts: cut out only when a search needs them (``_Said``)
        self.text = text
        self.said_begin, self.said_end = mstart[fi[said]], ends[a:b][fi[said]]
        self.said_starts = starts[a:b][fi[said]]


class _Said:
    """The bulk messages a group's release is looked for in: each slice's first ``counts[i]`` (``said_*``),
    cut out of its chunk's bytes only when a search needs them (``_SaidTogether``)."""

    PIECE = 4096            # messages per piece of the bytes around them (a search of one long string is slow)

    def __init__(self, slices: list[_Slice], counts: np.ndarray) -> None:
        self.parts = [(s, int(k)) for s, k in zip(slices, counts, strict=True) if k]
        self._cut: dict[int, pl.Series] = {}

    def pieces(self) -> list[pa.LargeStringArray]:
        """The bytes around the messages, cut at their lines' starts every PIECE messages."""
        out = []
        for s, k in self.parts:
            cuts = np.r_[s.said_starts[:k:self.PIECE], s.said_end[k - 1]]
            out.append(pa.LargeStringArray.from_buffers(
                len(cuts) - 1, pa.py_buffer(cuts - cuts[0]), pa.py_buffer(s.text.buf[cuts[0]:cuts[-1]])))
        return out

    def matches(self, rx: str) -> bool:
        """Whether ``rx`` matches one of the messages: the first SMALL_ROWS looked at first."""
        return any(self._messages(n).str.contains(rx).any() for n in (SMALL_ROWS, None)
                   if n is None or n < self._total())

    def _total(self) -> int:
        return sum(k for _, k in self.parts)

    def _messages(self, n: int | None) -> pl.Series:
        """The first ``n`` messages (None: all), cut out once."""
        key = -1 if n is None else n
        if key not in self._cut:
            got, left = [], self._total() if n is None else n
            for s, k in self.parts:
                take = min(k, left)
                if take <= 0:
                    break
                got.append(s.text.series(s.said_begin[:take], s.said_end[:take]))
                left -= take
            self._cut[key] = pl.concat(got) if got else pl.Series(dtype=pl.String)
        return self._cut[key]


class _SaidTogether:
    """The bulk messages of several files (or of one: ``_Said`` each), the bytes around them searched for all
    of them at once, each pattern one search: which files it may match in.  ``file(k)``: the k-th file's,
    as ``sglang_releases.BulkMessages``."""

    def __init__(self, said: list[_Said]) -> None:
        self.said = said
        self._around: pl.Series | None = None
        self._of: np.ndarray | None = None              # each piece's file
        self._hits: dict[str, np.ndarray] = {}

    def file(self, k: int) -> _OneFileSaid:
        return _OneFileSaid(self, k)

    def may_match(self, pattern: str) -> np.ndarray:
        if pattern not in self._hits:
            if self._around is None:
                pieces = [p.pieces() for p in self.said]
                self._of = np.repeat(np.arange(len(pieces)), [sum(len(a) for a in mine) for mine in pieces])
                try:
                    around = pl.from_arrow(pa.chunked_array([a for mine in pieces for a in mine], pa.large_string()))
                except Exception:   # noqa: BLE001 (bytes around them that are no text: look at each message)
                    around = None
                self._around = around if isinstance(around, pl.Series) else pl.Series(dtype=pl.String)
                if around is None:
                    self._of = None
            if self._of is None:
                self._hits[pattern] = np.ones(len(self.said), np.bool_)
            else:
                hit = self._around.str.contains(pattern).fill_null(False).to_numpy()
                self._hits[pattern] = np.bincount(self._of[hit], minlength=len(self.said)) > 0
        return self._hits[pattern]


class _OneFileSaid:
    """One file's bulk messages of a ``_SaidTogether`` (``sglang_releases.BulkMessages``).  (The files hold no
    reference back to what searches them: no cycle keeps a group's chunks alive after it is read.)"""

    def __init__(self, together: _SaidTogether, k: int) -> None:
        self.together, self.k = together, k

    def may_match(self, pattern: str) -> bool:
        return bool(self.together.may_match(pattern)[self.k])

    def matches(self, rx: str) -> bool:
        return self.together.said[self.k].matches(rx)


def files_facts(starts: pl.DataFrame, slices: list[list[_Slice]], ctxs: list[FileContext], outs: list[Parsed]
                ) -> None:
    """``sglang_log.chunk_facts`` of files read together (``ingest.batch_parse``), each file one chunk, by a
    fixed number of queries for all of them: its records are the general parser's (``starts``: _file, line (the
    file's own), ts_dt, msg, ranks, kind) and, read through the scanner, its slices' bulk lines the general
    parser did not see (``slices``: each file's; none where the general parser read every line).  As
    ``_chunk_facts`` reads a chunk, in numpy over all the files at once; the release file by file, the bulk
    messages cut out only where a search needs them (``sglang_releases``).  The contexts must be new, as
    every file's first chunk's."""
    assert all(c.release is None and c.prev_ts is None for c in ctxs)
    n = len(ctxs)
    flat = [s for mine in slices for s in mine]
    sizes = [sum(len(s.fact_lines) for s in mine) for mine in slices]
    r_file = starts.get_column("_file").to_numpy().astype(np.int64)
    file = np.concatenate([r_file, np.repeat(np.arange(n, dtype=np.int64), sizes)])
    lines = np.concatenate([starts.get_column("line").to_numpy()] + [s.fact_lines for s in flat])
    ts = np.concatenate([starts.get_column("ts_dt").cast(pl.Datetime("us")).to_physical().fill_null(_NO_TIME)
                         .to_numpy()] + [s.fact_ts for s in flat])
    _files_release(starts, r_file, slices, outs)
    dated = ts != _NO_TIME
    order = np.lexsort((lines[dated], file[dated]))
    file, lines, ts = file[dated][order], lines[dated][order], ts[dated][order]
    if not len(ts):
        return
    first = np.r_[True, file[1:] != file[:-1]]              # each file's first dated record
    prev = np.r_[_NO_TIME, ts[:-1]]
    back = (prev - ts) // 1000                              # milliseconds
    step = ~first & (back > BACKWARDS_S * 1000)
    for k in np.unique(file[step]):
        mine = np.flatnonzero(step & (file == k))
        top = mine[np.argmax(back[mine])]                   # (the first of equal ones)
        outs[k].backwards = len(mine)
        outs[k].largest_back = (int(back[top]) / 1000, int(lines[top]))
    ends = np.r_[np.flatnonzero(first)[1:], len(ts)]
    for k, a, b in zip(file[first].tolist(), np.flatnonzero(first).tolist(), ends.tolist(), strict=True):
        ctxs[k].last_ts, ctxs[k].prev_ts = from_micros(int(ts[a:b].max())), from_micros(int(ts[b - 1]))


def _files_release(starts: pl.DataFrame, r_file: np.ndarray, slices: list[list[_Slice]], outs: list[Parsed]
                   ) -> None:
    """``files_facts``' release of each file: the traits in its first RELEASE_RECORDS messages (the general
    parser's and the bulk lines') and in its rare records, the bulk messages searched only for releases newer
    than the others show; 0.5.10 at least where ranks print PP before TP."""
    msg = starts.get_column("msg")
    told = np.flatnonzero(~msg.is_null().to_numpy())
    m_file = np.concatenate([r_file[told]] + [np.full(len(s.said_lines), k) for k, mine in enumerate(slices)
                                              for s in mine])
    m_lines = np.concatenate([starts.get_column("line").to_numpy()[told]]
                             + [s.said_lines for mine in slices for s in mine])
    order = np.lexsort((m_lines, m_file))
    of = m_file[order]
    looked = np.sort(order[np.arange(len(of)) - np.searchsorted(of, of, side="left") < sglang_log.RELEASE_RECORDS])
    mine = looked[looked < len(told)]
    rest = pl.concat([pl.DataFrame({"_file": r_file[told[mine]], "msg": msg.gather(told[mine])}),
                      sglang_log.rare_records(starts).select(pl.col("_file").cast(pl.Int64), "msg")])
    found = sglang_log.files_releases(rest, len(outs))
    firsts = np.cumsum([len(told)] + [len(s.said_lines) for mine in slices for s in mine])
    counts = np.diff(np.searchsorted(looked, firsts))
    at = 0
    names = pl.concat([starts.select("_file", "ranks").drop_nulls().select(pl.col("_file").cast(pl.Int64), "ranks"),
                       pl.DataFrame([(k, " " + r if r else "") for k, mine in enumerate(slices) for s in mine
                                     for r in s.rank_names], schema={"_file": pl.Int64, "ranks": pl.String},
                                    orient="row")])
    pp = set(names.filter(pl.col("ranks").str.contains(sglang_log.PP_FIRST)).get_column("_file").to_list())
    together = _SaidTogether([])
    for mine in slices:
        together.said.append(_Said(mine, counts[at:at + len(mine)]))
        at += len(mine)
    for k in range(len(slices)):
        outs[k].release = newest_release(bulk_release(found[k], together.file(k)), "0.5.10" if k in pp else None)


def _concat(tables: list[pa.Table]) -> pa.Table:
    """The bulk tables of a group's slices as one, not copied (each slice's ranks are a dictionary of their
    own: they are unified)."""
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables).unify_dictionaries()


class _Text:
    """Text cut out of the chunk's bytes by the scanner's ``gather``: Arrow strings without a pass over the
    lines nobody reads."""

    def __init__(self, sc: Any, buf: np.ndarray) -> None:
        self.sc, self.buf = sc, buf

    def arrow(self, begin: np.ndarray, end: np.ndarray) -> pa.LargeStringArray:
        offsets, data = self.sc.gather(self.buf, begin, end)
        return pa.LargeStringArray.from_buffers(len(begin), pa.py_buffer(offsets), pa.py_buffer(data))

    def series(self, begin: np.ndarray, end: np.ndarray) -> pl.Series:
        s = pl.from_arrow(self.arrow(begin, end))
        assert isinstance(s, pl.Series)
        return s


class _Ranks:
    """The rank text of each dated bulk line (``fi``) as dictionary indices (the scanner interns them; a chunk
    with too many distinct ones is cut out line by line and encoded here)."""

    def __init__(self, text: _Text, fi: np.ndarray, rank: np.ndarray, rid: np.ndarray, uranks: np.ndarray) -> None:
        ids = rid[fi]
        if len(fi) and (ids < 0).any():
            enc = text.arrow(rank[0][fi], rank[1][fi]).cast(pa.string()).dictionary_encode()
            self.ids, self.names = enc.indices.to_numpy(), enc.dictionary.to_pylist()
        else:
            self.ids = ids
            self.names = text.arrow(uranks[:, 0].copy(), uranks[:, 1].copy()).to_pylist()

    def column(self, rows: np.ndarray) -> pa.DictionaryArray:
        """The rank of the dated bulk lines ``rows`` (indices into them)."""
        return pa.DictionaryArray.from_arrays(pa.array(self.ids[rows], pa.int32()),
                                              pa.array(self.names, pa.string()), safe=False)


def _constant(value: str, n: int) -> pa.DictionaryArray:
    # (safe=False here and for the ranks and batch kinds: indices into the dictionary by construction, whose
    # check by Arrow cost up to 12 ms per 300,000 rows)
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value], pa.string()), safe=False)


def _in_line_order(general: Any, seen: pl.Series, rows: pa.Table) -> pa.Table:
    """The bulk rows with the general parser's rows of the same table but of lines ``seen`` by both (few:
    lines the scanner cannot type), in line order, their text columns encoded as the bulk rows' are."""
    if isinstance(general, pl.DataFrame) and general.height:
        general = general.filter(~pl.col("line").is_in(seen.implode()))
    if not isinstance(general, pl.DataFrame) or not general.height:
        return rows
    them = general.to_arrow().select(rows.column_names).cast(rows.schema)
    both = pa.concat_tables([them, rows])
    return both.take(pc.sort_indices(both.column("line"))).combine_chunks()


class _Bulk:
    """The rows of the bulk lines (``fi``: their line indices; ``is_batch`` and ``undated``, the access lines
    without a time, over every line)."""

    def __init__(self, ctx: FileContext, text: _Text, fi: np.ndarray, is_batch: np.ndarray, line_of: np.ndarray,
                 ts: np.ndarray, undated: np.ndarray, spans: np.ndarray, ranks: _Ranks) -> None:
        self.ctx, self.text, self.line_of, self.ts, self.spans, self.ranks = ctx, text, line_of, ts, spans, ranks
        self.undated = undated
        which = is_batch[fi]
        self.batch_at = np.flatnonzero(which[~undated[fi]])     # the batch lines' places among the dated ones
        self.fb, self.fa = fi[which], fi[~which]

    def _head(self, rows: np.ndarray, file_col: str) -> dict[str, pa.Array]:
        n = len(rows)
        undated = self.undated[rows]
        ts = pa.array(self.ts[rows], mask=undated if undated.any() else None)    # (unset where undated)
        return {"engine": _constant(self.ctx.engine, n), file_col: _constant(self.ctx.path, n),
                "line": pa.array(self.line_of[rows]), "ts": ts.cast(pa.timestamp("us"))}

    def batches(self, ival: np.ndarray, ist: np.ndarray, fval: np.ndarray, fst: np.ndarray, graph: np.ndarray,
                flags: np.ndarray) -> pa.Table | None:
        """``batches`` rows, typed by the scanner."""
        from .scan_layout import FLOAT_COLS, INT_COLS, NINT

        fb = self.fb
        if not len(fb):
            return None
        # (a row, then its values: ``a[k][fb]`` takes them some 2.4x faster than ``a[k, fb]``, numpy's general
        # indexing)
        cols = self._head(fb, "path")
        cols["rank"] = self.ranks.column(self.batch_at)
        cols["batch_kind"] = pa.DictionaryArray.from_arrays(pa.array((flags[0][fb] != 1).astype(np.int32)),
                                                            pa.array(["Prefill", "Decode"], pa.string()), safe=False)
        cols["forward_iter"] = _masked(ival[0][fb], ist[0][fb])
        for k, c in enumerate(INT_COLS):
            cols[c] = _masked(ival[1 + k][fb], ist[1 + k][fb])
        for k, c in enumerate(FLOAT_COLS):
            cols[c] = _masked(fval[k][fb], fst[k][fb])
        cols["graph"] = pa.array(graph[fb] == 1, mask=graph[fb] < 0)
        # PD lines (few): the sum of the counters read (none read: 0, as polars' sum_horizontal)
        pd_line = flags[1][fb] == 1
        pending = np.zeros(len(fb), np.int64)
        if pd_line.any():
            pdr = fb[pd_line]
            pending[pd_line] = np.where(ist[1 + NINT:, pdr] == 1, ival[1 + NINT:, pdr], 0).sum(axis=0)
        cols["pending_req"] = pa.array(pending, mask=~pd_line)
        return pa.table(cols)

    def access(self) -> pa.Table | None:
        """``http_requests`` rows: the fields at the spans the scanner found."""
        fa = self.fa
        if not len(fa):
            return None
        cols = self._head(fa, "file")
        sp = self.spans
        for name, k in (("client", 0), ("method", 2), ("path", 4)):
            cols[name] = self.text.arrow(sp[k][fa], sp[k + 1][fa])
        cols["status"] = pa.array(sp[6][fa].astype(np.int32))
        return pa.table(cols)


def _release_records(ctx: FileContext) -> int:
    """How many bulk lines' messages of a chunk the release traits are looked for in: as ``chunk_facts``, a
    chunk's first RELEASE_RECORDS records, and none once the file is known to be of the newest release."""
    return 0 if ctx.release == RELEASE_ORDER[0] else sglang_log.RELEASE_RECORDS


_NO_TIME = np.iinfo(np.int64).min       # a record without a time, among times in microseconds


def _chunk_facts(rest: pl.DataFrame, ctx: FileContext, out: Parsed, slices: list[_Slice], chunks: list[int]) -> None:
    """What ``chunk_facts`` says of each chunk of the group in turn (``chunks``: their first lines, as the
    general path reads them), computed at once over the group's records in file order: the general parser's
    (``rest``: line, ts_dt, msg, ranks) and the bulk lines it did not see (the slices' lines and times from
    the scanner's arrays; messages only where the release traits are looked for; ranks as their few distinct
    texts: only whether one prints PP before TP counts).  In numpy: the bulk lines are most of a busy log's
    records (as polars frames, merged, filtered and shifted, they cost a parser worker a tenth of its CPU).

    The release: the traits in each chunk's first RELEASE_RECORDS messages and in every record the general
    parser typed as no batch or access line (``rest`` has them all), all chunks' at once (chunk by
    chunk, only releases newer than the chunks before point at are looked for: the newest found is the
    same).  The clock's steps back: counted over the group, the largest of each chunk as its own sort
    picks it (the first of equal ones).  The last time: the latest of the last chunk with a dated record."""
    r_lines = rest.get_column("line").to_numpy()
    r_ts = rest.get_column("ts_dt").cast(pl.Datetime("us")).to_physical().fill_null(_NO_TIME).to_numpy()
    b_lines = np.concatenate([s.fact_lines for s in slices])
    # both in line order already (the slices' in turn), no line in both: the general parser's merged in
    at = np.searchsorted(b_lines, r_lines)
    lines = np.insert(b_lines, at, r_lines)
    ts = np.insert(np.concatenate([s.fact_ts for s in slices]), at, r_ts)
    bounds = np.asarray(chunks)
    known = RELEASE_ORDER.index(ctx.release) if ctx.release in RELEASE_ORDER else len(RELEASE_ORDER)
    ranks = pl.concat([rest.get_column("ranks").drop_nulls(),
                       pl.Series([" " + r if r else "" for s in slices for r in s.rank_names], dtype=pl.String)])
    pp_first = known > RELEASE_ORDER.index("0.5.10") and ranks.str.contains(sglang_log.PP_FIRST).any()
    msg = rest.get_column("msg")
    has = ~msg.is_null().to_numpy()
    told = np.flatnonzero(has)
    m_lines = np.concatenate([r_lines[told]] + [s.said_lines for s in slices])
    order = np.argsort(m_lines, kind="stable")
    of = np.searchsorted(bounds, m_lines[order], side="right") - 1     # each message's chunk (ascending)
    head = np.arange(len(of)) - np.searchsorted(of, of, side="left") < sglang_log.RELEASE_RECORDS
    looked = np.sort(order[head])
    # the general parser's messages looked at, and how many of each slice's (its first: in line order)
    mine = looked < len(told)
    rest_looked = msg.gather(told[looked[mine]])
    if not head.all():                                  # (else every message is looked at already)
        rest_looked = pl.concat([rest_looked, sglang_log.rare_messages(rest)])
    firsts = np.cumsum([len(told)] + [len(s.said_lines) for s in slices])
    counts = np.diff(np.searchsorted(looked, firsts))
    bulk = _SaidTogether([_Said(slices, counts)]).file(0)
    out.release = newest_release(release_in(rest_looked, bulk, ctx.release), "0.5.10" if pp_first else None)
    dated = ts != _NO_TIME
    if not dated.any():
        return
    ts, lines = ts[dated], lines[dated]
    prev = np.empty_like(ts)
    prev[1:] = ts[:-1]
    prev[0] = _NO_TIME if ctx.prev_ts is None else micros_of(ctx.prev_ts)
    step = (prev != _NO_TIME) & ((prev - ts) // 1000 > BACKWARDS_S * 1000)
    if step.any():
        back, at_line = (prev - ts)[step] // 1000, lines[step]
        chunk = np.searchsorted(bounds, at_line, side="right") - 1
        out.backwards = int(step.sum())
        tops = []
        for c in np.unique(chunk):
            mine = np.flatnonzero(chunk == c)
            k = mine[np.argmax(back[mine])]
            tops.append((int(back[k]) / 1000, int(at_line[k])))
        out.largest_back = max(tops)
    ctx.prev_ts = from_micros(int(ts[-1]))
    last = np.searchsorted(bounds, lines[-1], side="right") - 1
    first_of_last = np.searchsorted(lines, bounds[last])
    ctx.last_ts = from_micros(int(ts[first_of_last:].max()))


def _date_access(out: Parsed, ctx: FileContext) -> None:
    """The group's access rows without a time of their own (the scanner's, and the general parser's read
    undated) dated as ``sglang_log._date_bare_access`` dates a chunk's, by the rows of the whole group (the
    general parser did not see them all): by the dated record before each, else ``ctx.record_ts`` (the one
    furthest down the chunks before), which is then the group's furthest down; one with an envelope time is
    left for it.  Counted in ``out``."""
    t = out.tables
    access, batches, events = (t.get(name) for name in ("http_requests", "batches", "events"))
    if access is None or not len(access):
        ctx.record_ts = sglang_log.last_record_ts([batches, events], ctx.record_ts)
        return
    rows = _narrow(access, ["line", "ts", "collected_ts"])
    dated = sglang_log._date_bare_access(rows, _narrow(batches, ["line", "ts"]), _narrow(events, ["line", "ts"]),
                                         ctx, out).get_column("ts")
    if not rows.get_column("ts").null_count():
        return
    if isinstance(access, pl.DataFrame):
        t["http_requests"] = access.with_columns(dated.cast(access.schema["ts"]))
    else:
        at = access.schema.get_field_index("ts")
        t["http_requests"] = access.set_column(at, "ts", dated.to_arrow().cast(access.schema.field(at).type))


def _narrow(rows: Any, columns: list[str]) -> pl.DataFrame | None:
    """The ``columns`` ``rows`` has (polars or Arrow) as a polars frame, not copied; None for no rows."""
    if rows is None:
        return None
    names = rows.columns if isinstance(rows, pl.DataFrame) else rows.column_names
    have = [c for c in columns if c in names]
    if isinstance(rows, pl.DataFrame):
        return rows.select(have)
    out = pl.from_arrow(rows.select(have))
    assert isinstance(out, pl.DataFrame)
    return out


def _masked(values: np.ndarray, status: np.ndarray) -> pa.Array:
    return pa.array(values, mask=status != 1)
