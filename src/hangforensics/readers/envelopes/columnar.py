"""The commonest collector prefixes stripped from a chunk's lines as one polars column: kubectl
``--timestamps``, CRI pod files (a chunk without partial ``P`` lines), RFC 5424 syslog, journald's
``short-iso``; and without a time of their own a process's tag (Ray's, a launcher's: a vLLM log relayed by
Ray carries one on every line), docker compose's service column and a terminal's colour escapes.

The same payload text and collector times as those layers' per-line code (``collectors``), with no Python
object per line: behind kubectl a large log spent a third of its parse on a regex match and a datetime per
line.  The patterns are the layers' own, spelt for polars' regex engine (Rust): ``\\d``, ``\\s`` and ``\\S``
as ASCII classes (Python reads them so under ``re.ASCII``; Rust's are Unicode), the same leftmost-first
alternation, so a line matches, and is cut, where the layer's own pattern matches and cuts it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...parsers.datetimes import FIRST_US, LAST_US, from_micros, micros_expr, micros_of, python_datetime

if TYPE_CHECKING:
    import polars as pl

_D = "[0-9]"
_NOT_SPACE = r"[^\t\n\x0B\x0C\r ]"           # \S under re.ASCII
_TAG = r"[^\t\n\x0B\x0C\r \[\]:]+(?:\[[0-9]+\])?:"    # a syslog tag: 'sglang[123]:'
_ISO = (rf"(?P<base>{_D}{{4}}-{_D}{{2}}-{_D}{{2}}T{_D}{{2}}:{_D}{{2}}:{_D}{{2}})"
        rf"(?:[.,](?P<frac>{_D}{{1,9}}))?")
_ZONE = rf"(?P<zone>Z|z|[+-]{_D}{{2}}:?{_D}{{2}})"

# layer name (and variant) -> the whole prefix as group ``pre``, the time's parts; CRI's tag as ``tag``
PATTERNS = {
    "kubectl": rf"^(?P<pre>(?:\[pod/[^\t\n\x0B\x0C\r \]]+\] )?{_ISO}{_ZONE}(?: |$))",
    "cri": rf"^(?P<pre>{_ISO}{_ZONE} (?:stdout|stderr) (?P<tag>[PF])(?: |$))",
    "syslog": (rf"^(?P<pre><{_D}{{1,3}}>1 (?:-|{_ISO}{_ZONE}?) {_NOT_SPACE}+ {_NOT_SPACE}+ {_NOT_SPACE}+ "
               rf'{_NOT_SPACE}+ (?:-|(?:\[(?:[^\]\\"]|\\.|"(?:[^"\\]|\\.)*")*\])+)(?: \x{{FEFF}}?|$))'),
    "journald": rf"^(?P<pre>{_ISO}{_ZONE} {_NOT_SPACE}+ {_TAG}(?: |$))",
}
# the variants of those layers read as a column
VARIANTS = {"syslog": ("", "5424"), "journald": ("short-iso",)}
# ... and those whose time has no year (journald's default ``short``, RFC 3164): the year is the file's
# (``times._Years``), read as a column where no line steps half a year from the latest before it
_MON = "(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_YEARLESS_TIME = (rf"{_MON} {{1,2}}(?P<day>{_D}{{1,2}}) (?P<clock>{_D}{{2}}:{_D}{{2}}:{_D}{{2}})"
                  rf"(?:[.,](?P<frac>{_D}{{1,9}}))? (?:{_NOT_SPACE}+ )?{_TAG}(?: |$)")
_JOURNALD_SHORT = rf"^(?P<pre>{_YEARLESS_TIME})"
YEARLESS = {("journald", ""): _JOURNALD_SHORT, ("journald", "short"): _JOURNALD_SHORT,
            ("syslog", "3164"): rf"^(?P<pre><{_D}{{1,3}}>{_YEARLESS_TIME})"}

# docker's json-file driver, an entry per line in the driver's own key order, its text a whole line with the
# escapes Go's encoder writes in a line's text (HTML's <, > and &, ESC, the line separators) and no newline
# but its last: a chunk with any other entry is read line by line (which joins partial entries and reads
# JSON in any form)
_JSON_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\/": "/", "\\b": "\b", "\\f": "\f", "\\r": "\r", "\\t": "\t",
                 "\\u003c": "<", "\\u003e": ">", "\\u0026": "&", "\\u001b": "\x1b", "\\u2028": "\u2028",
                 "\\u2029": "\u2029"}
DOCKER_JSON = (r'^\{"log":"(?:[^\\"\x00-\x1F]|\\(?:["\\/bfrt]|u003c|u003e|u0026|u001b|u2028|u2029))*'
               r'\\n","stream":"[0-9A-Za-z_]+","time":"' + _ISO.replace("?P<base>", "").replace("?P<frac>", "")
               + _ZONE.replace("?P<zone>", "") + r'"\}$')
_DOCKER_TIME = rf'"time":"{_ISO}{_ZONE}"\}}$'
_STREAM = '","stream":"'                # (a quote in the text is escaped: the first one ends the text)

# A process tag (``pastes.PROC_TAG``: Ray, launchers), a prefix without a time: stripped, but before a vLLM
# record, which keeps it (its parser reads the worker's rank there) without a lost colour escape's remnants.
_W = "[0-9A-Za-z_]"                                  # \w under re.ASCII
_NAME = rf"(?:{_W}|[.:\[\]=-])+"
_REMNANT = r" ?\x1B?\[[0-9]{1,3}(?:;[0-9]{1,3})*m"
PROC_TAG = (rf"^(?P<pre>(?:{_REMNANT})?\((?:{_NAME}(?: {_NAME})? )?pid=[0-9]+(?:, ip=(?:{_W}|[.:-])+)?\)"
            r"(?: ?\x1B?\[0m)?(?: |$))")
_VLLM_RECORD = "^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) [0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
# docker compose's service column ('sglang-1  | '), stripped (``pastes._Compose``)
COMPOSE = r"^(?P<pre>[0-9A-Za-z_.-]{1,80} *\|(?: |$))"
# a terminal's escapes (``pastes._ANSI``: CSI, OSC, charset, two-byte), removed; then of a line a carriage
# return redrew, what the terminal shows last (its last part that is not empty)
ANSI = r"\x1B(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1B]*(?:\x07|\x1B\\)?|[()][0-9A-Za-z]|[@-Z\\-_]|)"
# the layers without a time of their own read as a column (each stripped by _STRIP's function)
UNTIMED = ("proc_tag", "compose", "ansi")


def columnar_layer(layers: tuple[str, ...], params: tuple[str, ...]) -> str | None:
    """The key that unwraps this stack as a column, else None: one layer of PATTERNS in one of its VARIANTS
    (syslog's RFC 5424, journald's ``short-iso``), a YEARLESS one ('journald:short', 'syslog:3164') or docker's
    JSON; layers without times of their own (UNTIMED: one, or several one after the other, 'ansi+proc_tag');
    or a layer with times and such layers inside it ('cri+proc_tag': a Ray pod's log as its node keeps it)."""
    if not layers:
        return None
    inner = layers[1:]
    if inner and not (all(n in UNTIMED for n in inner) and not any(params[1:])):
        return None
    if all(n in UNTIMED for n in layers) and not any(params):      # each one line for one: one after the other
        return "+".join(layers)
    name, param = layers[0], (params[0] if params else "")
    if name == "docker_json" and not param:
        head = name
    elif (name, param) in YEARLESS:
        head = f"{name}:{param or 'short'}"
    elif name in PATTERNS and param in VARIANTS.get(name, (param,)):
        head = name
    else:
        return None
    return "+".join((head, *inner))


def unwrap_column(key: str, lines: pl.Series, years: Any = None) -> tuple[pl.Series, pl.Series] | None:
    """(payload, collected time) of ``lines`` behind the ``key`` layers, outermost first: a line without a
    prefix is kept whole with no time; a time that is no valid date is none.  None when the column cannot be
    unwrapped alone (a CRI line split into partial ``P`` parts: the layer rejoins them line by line; a
    year-less time that steps half a year: ``years``, the file's ``times._Years``, dates those line by
    line)."""
    import polars as pl

    head, *inner = key.split("+")
    if head in UNTIMED:
        payload, times, inner = lines, pl.repeat(None, len(lines), dtype=pl.Datetime("us"), eager=True), [head, *inner]
    else:
        got = _timed(head, lines, years)
        if got is None:
            return None
        payload, times = got
    for k in inner:                 # each layer on the payload of the one outside it (Ray's console: colours, tag)
        payload = _STRIP[k](payload)
    return payload.alias(lines.name), times


def _timed(key: str, lines: pl.Series, years: Any) -> tuple[pl.Series, pl.Series] | None:
    """``unwrap_column`` of one layer with times of its own."""
    import polars as pl

    if ":" in key:                                  # a year-less variant: 'journald:short', 'syslog:3164'
        name, param = key.split(":")
        return _yearless(lines, YEARLESS[(name, param)], years)
    if key == "docker_json":
        return _docker_entries(lines)
    parts = _prefixed(lines, PATTERNS[key])
    if key == "cri" and (parts.get_column("tag") == "P").any():
        return None
    out = parts.select(_after_prefix(pl.col("line"), pl.col("pre")).alias("payload"),
                       _collected_time(pl.col("base"), pl.col("frac"), pl.col("zone")).alias("collected_ts"))
    return out.get_column("payload").alias(lines.name), out.get_column("collected_ts")


def _prefixed(lines: pl.Series, pattern: str) -> pl.DataFrame:
    """``lines`` (column ``line``) with the groups of ``pattern`` (``pre``: the whole prefix), null where it
    does not match."""
    import polars as pl

    return lines.rename("line").to_frame().select(
        pl.col("line"), pl.col("line").str.extract_groups(pattern).alias("m")).unnest("m")


def _after_prefix(line: Any, pre: Any) -> Any:
    """``line`` without its prefix ``pre`` (expressions or Series); the whole line where there is none."""
    import polars as pl

    return pl.when(pre.is_null()).then(line).otherwise(line.str.slice(pre.str.len_chars()))


def _yearless(lines: pl.Series, pattern: str, years: Any) -> tuple[pl.Series, pl.Series] | None:
    """``unwrap_column`` of a year-less prefix: the times as ``years.resolve`` gives them line after line,
    where that is one year for every line (the first line's, or the file's so far) and the latest time so far
    moves no line by a year (none steps back or ahead of it by more than half a year: a log that crosses New
    Year, or holds such a jump, is read line by line); ``years`` carries on as after those lines."""
    import polars as pl

    from .times import _MONTHS, clock_fields

    parts = _prefixed(lines, pattern)
    payload = parts.select(_after_prefix(pl.col("line"), pl.col("pre"))).to_series().alias(lines.name)
    matched = parts.filter(pl.col("pre").is_not_null())
    if years is None or years.hint is None or not matched.height:      # (no year to give: no time, as resolve)
        return payload, pl.repeat(None, len(lines), dtype=pl.Datetime("us"), eager=True)
    year = years.year
    if year is None:        # the first line's year, from the hint (as ``resolve`` takes it)
        first = matched.row(0, named=True)
        year = years.first_year(clock_fields(first["mon"], first["day"], *first["clock"].split(":"), first["frac"]))
    month = pl.col("mon").replace_strict(_MONTHS, return_dtype=pl.Int64)
    stamp = pl.format("{}-{}-{} {}", pl.lit(f"{year:04d}"), month.cast(pl.String).str.pad_start(2, "0"),
                      pl.col("day").str.pad_start(2, "0"), pl.col("clock"))
    # (as ``_Years._at`` makes them: a date or second that does not exist has none)
    ts = python_datetime(stamp, "%Y-%m-%d %H:%M:%S") + pl.duration(microseconds=micros_expr(pl.col("frac")))
    times = parts.select(ts.alias("t")).to_series()
    latest = times.cum_max().forward_fill().shift(1)        # the latest time before each line (nulls skipped)
    if years.last is not None:
        latest = pl.select(pl.max_horizontal(latest, pl.lit(years.last))).to_series()
    half = years.HALF_YEAR
    if pl.select(((times < latest - half) | (times > latest + half)).any()).item():
        return None
    years.year = year
    top = times.max()
    if top is not None and (years.last is None or top > years.last):
        years.last = top
    return payload, times.alias("collected_ts")


def yearless_times(fields: Any, years: Any) -> Any:
    """``_yearless``'s times from a year-less prefix's fields as the compiled scanner's side reads them from the
    bytes (``envelope_cut.yearless_cut``: rows month (0: no prefix), day, hours, minutes, seconds,
    microseconds; a column per line): microseconds since 1970 (``NO_TIME``: none), by the same rule (the
    chunk's one year, the latest time carried), ``years`` moved on as ``_yearless`` moves it; None where a line
    steps half a year (the chunk is read line by line, ``years`` untouched)."""
    from datetime import datetime, timedelta

    import numpy as np

    from ...parsers.sglang.scan_layout import NO_TIME

    mon, day, hh, mi, ss, us = (fields[k] for k in range(6))
    n = len(mon)
    out = np.full(n, NO_TIME, np.int64)
    matched = np.flatnonzero(mon > 0)
    if years is None or years.hint is None or not len(matched):
        return out
    year = years.year
    if year is None:
        first = int(matched[0])
        year = years.first_year(tuple(int(fields[k][first]) for k in range(6)))
    if not 1 <= year <= 9999:                   # (a date Python has no datetime for: the column's to say)
        return None
    # (as ``python_datetime`` reads 'YYYY-MM-DD HH:MM:SS': a date or second that does not exist has none)
    leap = (year % 4 == 0 and year % 100 != 0) or year % 400 == 0
    dim = np.array([0, 31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)
    ok = (mon > 0) & (day >= 1) & (day <= dim[mon]) & (hh <= 23) & (mi <= 59) & (ss <= 59)
    start = micros_of(datetime(year, 1, 1)) // 86_400_000_000     # the year's first day, in days since 1970
    first_of_month = np.array([0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334], np.int64)
    first_of_month[3:] += int(leap)
    days = start + first_of_month[mon] + day - 1
    out[ok] = (days * 86400 + hh * 3600 + mi * 60 + ss)[ok] * 1_000_000 + us[ok]
    # the latest time before each line (its own excluded; the carried one first): a step of half a year from it
    # is a new year or a late line, which the line-by-line reading decides
    latest = np.maximum.accumulate(np.where(ok, out, NO_TIME))
    before = np.empty(n, np.int64)
    before[0] = NO_TIME
    before[1:] = latest[:-1]
    if years.last is not None:
        before = np.maximum(before, micros_of(years.last))
    half = years.HALF_YEAR // timedelta(microseconds=1)
    known = ok & (before != NO_TIME)
    if ((out[known] < before[known] - half) | (out[known] > before[known] + half)).any():
        return None
    years.year = year
    if ok.any():
        top = from_micros(int(out[ok].max()))
        if years.last is None or top > years.last:
            years.last = top
    return out


def _untagged(lines: pl.Series) -> pl.Series:
    """``lines`` without the process tag before them (``pastes._ProcTag``): one before a vLLM record is kept,
    rid of a lost colour escape's remnants."""
    import polars as pl

    line, pre = pl.col("line"), pl.col("pre")
    rest = line.str.slice(pre.str.len_chars())
    out = lines.rename("line").to_frame().select(
        line, line.str.extract(PROC_TAG, 1).alias("pre")).select(
        pl.when(pre.is_null()).then(line)
        .when(rest.str.contains(_VLLM_RECORD))
        .then(pl.when(pre.str.contains(_REMNANT))
              .then(pre.str.replace_all(_REMNANT, "").str.strip_chars() + pl.lit(" ") + rest).otherwise(line))
        .otherwise(rest).alias("payload"))
    return out.get_column("payload").alias(lines.name)


def _docker_entries(lines: pl.Series) -> tuple[pl.Series, pl.Series] | None:
    """(text, time) of each entry docker's json-file driver wrote (``collectors._DockerJson``), where every line
    is one in DOCKER_JSON's form (None: read line by line)."""
    import polars as pl

    # (tested without captures, then cut: the regex's captures over a whole line cost 3 us a line)
    if not lines.str.contains(DOCKER_JSON).fill_null(False).all():
        return None
    line = pl.col("line")
    parts = lines.rename("line").to_frame().select(
        line.str.split_exact(_STREAM, 1).struct.field("field_0").str.strip_prefix('{"log":"')
        .str.strip_suffix("\\n").alias("body"),
        line.str.extract_groups(_DOCKER_TIME).alias("m")).unnest("m")
    text = pl.col("body").str.replace_many(list(_JSON_ESCAPES), list(_JSON_ESCAPES.values()))
    out = parts.select(
        pl.when(text.str.ends_with("\r")).then(text.str.slice(0, text.str.len_chars() - 1)).otherwise(text)
        .alias("payload"),
        _collected_time(pl.col("base"), pl.col("frac"), pl.col("zone")).alias("collected_ts"))
    return out.get_column("payload").alias(lines.name), out.get_column("collected_ts")


def _uncomposed(lines: pl.Series) -> pl.Series:
    """``lines`` without docker compose's service column (a line without one kept whole)."""
    import polars as pl

    return pl.select(_after_prefix(lines, lines.str.extract(COMPOSE, 1))).to_series()


def _uncoloured(lines: pl.Series) -> pl.Series:
    """``lines`` as a terminal shows them (``pastes._strip_ansi``): escapes removed, then of a line with a
    carriage return its last part that is not empty."""
    import polars as pl

    text = lines.str.replace_all(ANSI, "")
    last = text.str.split("\r").list.eval(pl.element().filter(pl.element() != "")).list.last().fill_null("")
    return pl.select(pl.when(text.str.contains("\r", literal=True)).then(last).otherwise(text)).to_series()


# what each layer of UNTIMED does to a line
_STRIP = {"proc_tag": _untagged, "compose": _uncomposed, "ansi": _uncoloured}


def _collected_time(base: Any, frac: Any, zone: Any) -> Any:
    """``times._iso_ts`` as an expression: base + fraction (to the microsecond, truncated) as a naive time,
    moved to UTC by the zone; null where ``datetime.fromisoformat`` refuses it or the move leaves its range
    (in microseconds since 1970, as integers: some 3x less than adding durations)."""
    import polars as pl

    t = python_datetime(base, "%Y-%m-%dT%H:%M:%S").cast(pl.Int64)
    micro = micros_expr(frac)
    digits = zone.str.replace(":", "", literal=True)            # '+0530', '-01:00' (Z, z: no digits)
    minutes = digits.str.slice(1, 2).cast(pl.Int64, strict=False) * 60 \
        + digits.str.slice(3, 2).cast(pl.Int64, strict=False)
    east = pl.when(zone.str.starts_with("-")).then(-minutes).otherwise(minutes).fill_null(0)
    us = t + micro - east * 60_000_000
    return pl.when(us.is_between(FIRST_US, LAST_US)).then(us).cast(pl.Datetime("us"))

