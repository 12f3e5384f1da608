"""Times as envelopes print them: ISO 8601 with a zone, epoch numbers, and year-less syslog stamps."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from ...parsers.datetimes import micros

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_MON = r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_ISO = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?"      # base, fraction
_ZONE = r"(Z|z|[+-]\d\d:?\d\d)"
_EPOCH = datetime(1970, 1, 1)

# -- time helpers -----------------------------------------------------------------------------------
_ZONE_CACHE: dict[str, timedelta] = {}


def _zone_offset(zone: str) -> timedelta:
    off = _ZONE_CACHE.get(zone)
    if off is None:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        off = sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        _ZONE_CACHE[zone] = off
    return off


def _iso_ts(base: str | None, frac: str | None, zone: str | None) -> datetime | None:
    """'YYYY-MM-DDTHH:MM:SS' + fraction digits + zone -> naive datetime, in UTC when a zone is given."""
    if not base:
        return None
    try:
        # the C parser of the isoformat() shape: several times faster than building it field by field
        dt = datetime.fromisoformat(f"{base}.{frac[:6].ljust(6, '0')}" if frac else base)
        if zone and zone not in ("Z", "z"):
            dt = dt - _zone_offset(zone)
        return dt
    except (ValueError, OverflowError, IndexError):
        return None


_ISO_STR = re.compile(r"\s*(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?\s*(Z|z|[+-]\d\d:?\d\d)?\s*$",
                      re.ASCII)


def _any_ts(v: object) -> datetime | None:
    """A time as JSON collectors write it: ISO 8601 text, or epoch seconds / ms / µs / ns."""
    try:
        if isinstance(v, str):
            m = _ISO_STR.match(v)
            if m:
                return _iso_ts(*m.groups())
            v = float(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        if v > 1e17:
            return _EPOCH + timedelta(microseconds=int(v) // 1000)
        if v > 1e14:
            return _EPOCH + timedelta(microseconds=int(v))
        if v > 1e11:
            return _EPOCH + timedelta(milliseconds=v)
        return _EPOCH + timedelta(seconds=v)
    except (ValueError, OverflowError, TypeError):
        return None


def clock_fields(mon: str, day: str, h: str, m: str, s: str, frac: str | None) -> tuple[int, ...]:
    """A year-less stamp's month, day, hours, minutes, seconds and microseconds (KeyError: no month)."""
    return _MONTHS[mon], int(day), int(h), int(m), int(s), micros(frac)


class _Years:
    """Years for envelope times printed without one (journald ``short``, RFC 3164).

    The first dated line takes its year from the hint (an int: that year; a date: the year that puts
    the line nearest to it, so ``Dec 31`` beside a January hint is the year before).  Then a step
    back by more than half a year from the latest time so far is a new year, and a line more than
    half a year ahead of it belongs to the year before (lines around New Year out of order).
    """

    HALF_YEAR = timedelta(days=183)

    def __init__(self, hint: int | date | None) -> None:
        self.hint = hint
        self.year: int | None = None
        self.last: datetime | None = None

    def resolve(self, mon: str, day: str, h: str, m: str, s: str, frac: str | None) -> datetime | None:
        if self.hint is None:
            return None
        try:
            args = clock_fields(mon, day, h, m, s, frac)
            if self.year is None:
                self.year = self.first_year(args)
            dt = self._at(self.year, args)
            if self.last is not None and dt is not None:
                if dt < self.last - self.HALF_YEAR:
                    self.year += 1
                    dt = self._at(self.year, args)
                elif dt > self.last + self.HALF_YEAR:
                    return self._at(self.year - 1, args)      # a late line from the year before
            if dt is not None and (self.last is None or dt > self.last):
                self.last = dt                        # the latest time so far: out-of-order lines do not move it
            return dt
        except (KeyError, ValueError, OverflowError):
            return None

    @staticmethod
    def _at(year: int, args: tuple[int, ...]) -> datetime | None:
        try:
            return datetime(year, *args)
        except ValueError:                      # Feb 29 in a year without one
            return None

    def first_year(self, args: tuple[int, ...]) -> int:
        """The year of the file's first dated line (``args``: its month, day, hours, minutes, seconds and
        microseconds), from the hint."""
        hint = self.hint
        if isinstance(hint, int):
            return hint
        assert hint is not None
        ref = hint if isinstance(hint, datetime) else datetime(hint.year, hint.month, hint.day)
        best, gap = ref.year, None
        for y in (ref.year - 1, ref.year, ref.year + 1):
            dt = self._at(y, args)
            if dt is not None and (gap is None or abs(dt - ref) < gap):
                best, gap = y, abs(dt - ref)
        return best

