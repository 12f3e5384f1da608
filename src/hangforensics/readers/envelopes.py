"""Envelopes: how a collector or a person wrapped the evidence, detected per file and stripped.

interface.md §1 ("Evidence arrives wrapped") and sglang-formats.md §12.  This stage runs before any
parser: :func:`detect` reads the head of a file and returns an :class:`EnvelopeStack` (the layers,
outermost first); an :class:`Unwrapper` then takes the file chunk by chunk and hands on payload lines
with their physical line numbers, how many physical lines each stands for, and the envelope's time.

Layers (names go to ``sources.envelope``, joined with ``+``):

- collectors: ``kubectl`` (``--timestamps``), ``cri`` (containerd / CRI-O pod files, ``P``/``F``
  partial records rejoined), ``docker_json`` (json-file driver, partial records rejoined),
  ``journald`` (``short``, ``short-iso``, ``json``), ``syslog`` (RFC 5424, RFC 3164),
  ``fluentbit`` / ``vector`` (JSON lines), ``ansi`` (TTY escapes, ``\\r`` redraws), ``compose``;
- pastes: ``markdown`` (``> `` quotes, fences, ``<details>``, prose between fenced blocks),
  ``viewer_lineno``, ``viewer_ts``, ``hard_wrap``.

Nothing is lost: every physical line ends up in exactly one payload line (``span`` counts them) or in
``dropped`` (fence and tag lines, prose), with its original text.  Pure Python, no DuckDB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache
from itertools import pairwise

# -- payload record heads (sglang-formats.md §1, §8.1, §9.1) ----------------------------------------
# A line that starts a payload record: SGLang prefix, torch glog, vLLM.  Chunks are cut before one.
PAYLOAD_HEAD = (r"(?:\(\w+ pid=\d+[^)\n]*\)\s*)?"
                r"(?:\[(?:\d{4}-\d\d-\d\d |rank\d+\]:\[|[IWEF]\d{3,4} )|(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d )")

# A physical line that begins something (a record, an envelope prefix, a dump line, a blank line), as
# opposed to the continuation of a line a terminal wrapped.  Indented lines count as beginnings (dump
# frames, tracebacks): a wrap continues with one space at most, so a wrap at a space is left unjoined.
LINE_START = re.compile(
    r"(?:\s*$|[ \t]{2}|\t"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d|<\d{1,3}>|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\{\"|[\w.-]+ +\||>"
    r"|\[|\(\w+ pid=\d+|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)[: ]|\w*(?:Error|Exception|Warning)\b"
    r"|Traceback |Thread (?:0x[0-9a-fA-F]+|\d+) |Process \d+|Current thread |Fatal Python |File \""
    r"|frame #\d+|#\d+ |terminate called|Environment: |[\w.-]+:\d+:\d+ \[\d+\] NCCL)",
    re.ASCII)

# Outside the fences of a paste: a line that looks like evidence (else it is prose, not evidence).
EVIDENCE = re.compile(
    r"(?:[ \t]+\S|\d{4}-\d\d-\d\d[T ]\d\d:\d\d|<\d{1,3}>|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\{\""
    r"|[\w.-]+ +\| |\[(?:\d{4}-\d\d-\d\d|rank\d+\]|[IWEF]\d{3,4} |\d+\] )|\(\w+ pid=\d+"
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)[: ]|\w*(?:Error|Exception)\b:|Traceback \(|"
    r"Thread (?:0x[0-9a-fA-F]+|\d+) |Process \d+: |Python v\d|Current thread 0x|Fatal Python error"
    r"|frame #\d+|#\d+ +0x|terminate called|  what\(\)|Exception raised from|Environment: \S+="
    r"|[\w.-]+:\d+:\d+ \[\d+\] NCCL|\w+(?:\.\w+)*(?:\(\))?=\S)",
    re.ASCII)

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_MON = r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_ISO = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?"      # base, fraction
_ZONE = r"(Z|z|[+-]\d\d:?\d\d)"
_EPOCH = datetime(1970, 1, 1)

# -- time helpers -----------------------------------------------------------------------------------
_SEC_CACHE: dict[str, datetime] = {}      # 'YYYY-MM-DDTHH:MM:SS' -> datetime: one parse per second of log
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
        dt = _SEC_CACHE.get(base)
        if dt is None:
            dt = datetime(int(base[0:4]), int(base[5:7]), int(base[8:10]),
                          int(base[11:13]), int(base[14:16]), int(base[17:19]))
            if len(_SEC_CACHE) > 200_000:
                _SEC_CACHE.clear()
            _SEC_CACHE[base] = dt
        if frac:
            dt = dt.replace(microsecond=int(frac[:6].ljust(6, "0")))
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
            args = (_MONTHS[mon], int(day), int(h), int(m), int(s), int(frac[:6].ljust(6, "0")) if frac else 0)
            if self.year is None:
                self.year = self._first_year(args)
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

    def _first_year(self, args: tuple[int, ...]) -> int:
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


# -- the items flowing through the layers ---------------------------------------------------------
class _Items:
    """Parallel lists: text, first physical line, physical lines spanned, collected time."""

    __slots__ = ("txt", "ln", "sp", "ts")

    def __init__(self, txt: list[str] | None = None, ln: list[int] | None = None, sp: list[int] | None = None,
                 ts: list[datetime | None] | None = None) -> None:
        self.txt = [] if txt is None else txt
        self.ln = [] if ln is None else ln
        self.sp = [] if sp is None else sp
        self.ts = [] if ts is None else ts

    def add(self, t: str, ln: int, sp: int, ts: datetime | None) -> None:
        self.txt.append(t)
        self.ln.append(ln)
        self.sp.append(sp)
        self.ts.append(ts)

    def add_lines(self, t: str, ln: int, sp: int, ts: datetime | None) -> None:
        """A message that holds several lines (a JSON collector's): one payload line each, the
        further ones with span 0 (they come out of the same physical lines)."""
        if "\n" not in t:
            self.add(t, ln, sp, ts)
            return
        for k, part in enumerate(t.split("\n")):
            self.add(part[:-1] if part.endswith("\r") else part, ln, sp if k == 0 else 0, ts)

    def __iter__(self) -> Iterator[tuple[str, int, int, datetime | None]]:
        return zip(self.txt, self.ln, self.sp, self.ts, strict=True)


class _Layer:
    """One envelope: ``run`` strips it from the items of a chunk (outermost layer first)."""

    name = ""

    def __init__(self, param: str, u: Unwrapper) -> None:
        self.param = param
        self.u = u

    def prefix(self) -> str:
        """Regex of the prefix this layer puts before a payload line (for cutting chunks)."""
        return ""

    def run(self, it: _Items, final: bool) -> _Items:
        return it

    def pending_first(self) -> int | None:
        """First physical line of what this layer holds back for the next chunk."""
        return None


class _PrefixLayer(_Layer):
    """A prefix on every line, stripped where it matches (a line without it is kept whole)."""

    rx: re.Pattern[str]
    has_ts = True

    def ts_of(self, m: re.Match[str]) -> datetime | None:
        return None

    def run(self, it: _Items, final: bool) -> _Items:
        match, ts_of = self.rx.match, self.ts_of
        if not self.has_ts:
            return _Items([s[m.end():] if (m := match(s)) else s for s in it.txt], it.ln, it.sp, it.ts)
        txt: list[str] = []
        tss: list[datetime | None] = []
        at, ats = txt.append, tss.append
        for s, t in zip(it.txt, it.ts, strict=True):
            m = match(s)
            if m is None:
                at(s)
                ats(t)
            else:
                at(s[m.end():])
                v = ts_of(m)
                ats(t if v is None else v)
        return _Items(txt, it.ln, it.sp, tss)


# -- collectors -------------------------------------------------------------------------------------
class _Kubectl(_PrefixLayer):
    name = "kubectl"
    rx = re.compile(r"^" + _ISO + _ZONE + r"(?: |$)", re.ASCII)

    def prefix(self) -> str:
        return r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d) "

    def run(self, it: _Items, final: bool) -> _Items:
        # the hot path of the commonest envelope: inlined (no method call per line)
        match, conv = self.rx.match, _iso_ts
        txt: list[str] = []
        tss: list[datetime | None] = []
        at, ats = txt.append, tss.append
        for s, t in zip(it.txt, it.ts, strict=True):
            m = match(s)
            if m is None:
                at(s)
                ats(t)
            else:
                at(s[m.end():])
                v = conv(*m.groups())
                ats(t if v is None else v)
        return _Items(txt, it.ln, it.sp, tss)


class _Joiner:
    """Rejoins lines a collector split into partial records (CRI ``P``, docker and journald partials).

    Parts join per stream (stdout and stderr interleave); output keeps file order by the first part's
    line, so lines after an unfinished record wait for it (carried to the next chunk if need be).
    """

    def __init__(self, u: Unwrapper) -> None:
        self.u = u
        self.slots: list[list] = []      # [parts, first line, span, ts, physical lines, done, multi-line]
        self.open: dict[str, list] = {}

    def add(self, out: _Items, text: str, ln: int, sp: int, ts: datetime | None, key: str, partial: bool,
            multi: bool = False) -> None:
        if not self.slots and not partial:
            if multi:
                out.add_lines(text, ln, sp, ts)
            else:
                out.add(text, ln, sp, ts)
            return
        slot = self.open.get(key)
        if slot is None:
            slot = [[text], ln, sp, ts, self.u.phys(ln, sp), False, multi]
            self.slots.append(slot)
        else:
            slot[0].append(text)
            slot[2] += sp
            slot[4].extend(self.u.phys(ln, sp))
            slot[6] = slot[6] or multi
        if partial:
            self.open[key] = slot
        else:
            self.open.pop(key, None)
            slot[5] = True
            if slot is self.slots[0]:
                self.flush(out)

    def add_whole(self, out: _Items, text: str, ln: int, sp: int, ts: datetime | None) -> None:
        """A line that is not a record of this envelope: kept as it is, in its place."""
        if not self.slots:
            out.add(text, ln, sp, ts)
        else:
            self.slots.append([[text], ln, sp, ts, self.u.phys(ln, sp), True, False])

    def flush(self, out: _Items, everything: bool = False) -> None:
        i = 0
        slots = self.slots
        while i < len(slots) and (everything or slots[i][5]):
            parts, ln, sp, ts, phys, _, multi = slots[i]
            if sp > 1:
                self.u.register(ln, phys)
            if multi:
                out.add_lines("".join(parts), ln, sp, ts)
            else:
                out.add("".join(parts), ln, sp, ts)
            i += 1
        del slots[:i]
        if everything:
            self.open.clear()

    def pending_first(self) -> int | None:
        return min(self.slots[0][4]) if self.slots else None


class _Cri(_Layer):
    name = "cri"
    rx = re.compile(r"^" + _ISO + r"(Z|z|[+-]\d\d:?\d\d) (stdout|stderr) ([PF])(?: |$)", re.ASCII)

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.j = _Joiner(u)

    def prefix(self) -> str:
        return r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) [PF] "

    def run(self, it: _Items, final: bool) -> _Items:
        out = _Items()
        match, j = self.rx.match, self.j
        for s, ln, sp, t in it:
            m = match(s)
            if m is None:
                j.add_whole(out, s, ln, sp, t)
                continue
            base, frac, zone, stream, tag = m.groups()
            v = _iso_ts(base, frac, zone)
            if tag == "F" and not j.slots:          # the common case, no partial pending
                out.add(s[m.end():], ln, sp, t if v is None else v)
            else:
                j.add(out, s[m.end():], ln, sp, t if v is None else v, stream, tag == "P")
        if final:
            j.flush(out, everything=True)
        return out

    def pending_first(self) -> int | None:
        return self.j.pending_first()


def _json_obj(s: str) -> dict | None:
    if not s.startswith("{"):
        s = s.lstrip()
        if not s.startswith("{"):
            return None
    try:
        d = json.loads(s)
    except (ValueError, RecursionError):
        return None
    return d if isinstance(d, dict) else None


class _DockerJson(_Layer):
    name = "docker_json"
    # the driver's own key order ({"log":"...","stream":"...","time":"..."}); anything else: json.loads
    tail = re.compile(r'","stream":"(\w+)","time":"' + _ISO + _ZONE + r'"\}$', re.ASCII)

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.j = _Joiner(u)

    def prefix(self) -> str:
        return r'\{"log":"'

    def run(self, it: _Items, final: bool) -> _Items:
        out = _Items()
        tail, j = self.tail.match, self.j
        otxt, oln, osp, ots = out.txt, out.ln, out.sp, out.ts
        for s, ln, sp, t in it:
            k = s.rfind('","stream":"') if s.startswith('{"log":"') else -1
            m = tail(s, k) if k > 0 else None
            if m is not None:
                stream, base, frac, zone = m.groups()
                v = _iso_ts(base, frac, zone)
                if s.find("\\", 8, k - 2) < 0 and s.endswith("\\n", 8, k):
                    if not j.slots:             # the common case: a whole line, nothing pending
                        otxt.append(s[8:k - 2])
                        oln.append(ln)
                        osp.append(sp)
                        ots.append(t if v is None else v)
                        continue
                    text, partial = s[8:k - 2], False
                else:
                    body = s[8:k]
                    try:
                        text = json.loads('"' + body + '"')
                    except ValueError:
                        j.add_whole(out, s, ln, sp, t)
                        continue
                    partial = not text.endswith("\n")
                    if not partial:
                        text = text[:-1]
            else:
                d = _json_obj(s)
                text = d.get("log") if d is not None else None
                if not isinstance(text, str):
                    j.add_whole(out, s, ln, sp, t)
                    continue
                stream = str(d.get("stream", ""))
                v = _any_ts(d.get("time"))
                partial = not text.endswith("\n")
                if not partial:
                    text = text[:-1]
            if not partial and text.endswith("\r"):
                text = text[:-1]
            j.add(out, text, ln, sp, t if v is None else v, stream, partial, multi=True)
        if final:
            j.flush(out, everything=True)
        return out

    def pending_first(self) -> int | None:
        return self.j.pending_first()


def _message_text(v: object) -> str | None:
    """journald MESSAGE: a string, or a list of byte values when it is not valid UTF-8."""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        try:
            return bytes(v).decode("utf-8", errors="replace")
        except (ValueError, TypeError):
            return None
    return None


class _JsonLines(_Layer):
    """journald ``-o json``, Fluent Bit and Vector: one JSON object per line, payload in one key."""

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        key, _, tkey = param.partition("\t")
        self.key = key or "log"
        self.tkey = tkey
        self.j = _Joiner(u)

    def prefix(self) -> str:
        return r'\{[^\n]*?"' + re.escape(self.key) + r'": ?"'

    def run(self, it: _Items, final: bool) -> _Items:
        out = _Items()
        j, key, tkey = self.j, self.key, self.tkey
        journal = self.name == "journald"
        for s, ln, sp, t in it:
            d = _json_obj(s)
            text = None if d is None else (_message_text(d.get(key)) if journal else d.get(key))
            if not isinstance(text, str):
                j.add_whole(out, s, ln, sp, t)
                continue
            assert d is not None
            raw = d.get(tkey) if tkey else None
            if journal and isinstance(raw, str) and raw.isdigit():
                v = _any_ts(int(raw))                # __REALTIME_TIMESTAMP: µs since the epoch
            else:
                v = _any_ts(raw) if raw is not None else None
            partial = False
            if journal:
                partial = d.get("_LINE_BREAK") == "line-max"    # journald split a too long line
                stream = str(d.get("_PID", ""))
            else:
                stream = str(d.get("stream", ""))
                if text.endswith("\n"):
                    text = text[:-1]
            if text.endswith("\r"):
                text = text[:-1]
            j.add(out, text, ln, sp, t if v is None else v, stream, partial, multi=True)
        if final:
            j.flush(out, everything=True)
        return out

    def pending_first(self) -> int | None:
        return self.j.pending_first()


class _Journald(_Layer):
    """journald text: ``short-iso`` (zone) or ``short`` (no year), and JSON (``-o json``)."""

    name = "journald"
    iso = re.compile(r"^" + _ISO + _ZONE + r" \S+ [^\s\[\]:]+(?:\[\d+\])?:(?: |$)", re.ASCII)
    short = re.compile(r"^" + _MON + r" {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
                       r" (?:\S+ )?[^\s\[\]:]+(?:\[\d+\])?:(?: |$)", re.ASCII)

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.inner: _Layer
        if param == "json":
            self.inner = _JsonLines("MESSAGE\t__REALTIME_TIMESTAMP", u)
            self.inner.name = "journald"
        else:
            self.inner = _YearlessOrIso(param or "short", u, self.iso, self.short)

    def prefix(self) -> str:
        if self.param == "json":
            return self.inner.prefix()
        if self.param == "short-iso":
            return r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d) \S+ [^\s\[\]:]+(?:\[\d+\])?: "
        return r"[A-Z][a-z]{2} {1,2}\d{1,2} \d\d:\d\d:\d\d(?:[.,]\d+)? (?:\S+ )?[^\s\[\]:]+(?:\[\d+\])?: "

    def run(self, it: _Items, final: bool) -> _Items:
        return self.inner.run(it, final)

    def pending_first(self) -> int | None:
        return self.inner.pending_first()


class _YearlessOrIso(_PrefixLayer):
    """Prefix with an ISO time and zone (``short-iso``) or a year-less syslog time (``short``, 3164)."""

    def __init__(self, param: str, u: Unwrapper, iso: re.Pattern[str], short: re.Pattern[str]) -> None:
        super().__init__(param, u)
        self.is_iso = param.endswith("iso") or param == "5424"
        self.rx = iso if self.is_iso else short
        self.years = u.years

    def ts_of(self, m: re.Match[str]) -> datetime | None:
        if self.is_iso:
            return _iso_ts(*m.group(1, 2, 3))
        return self.years.resolve(*m.group(1, 2, 3, 4, 5, 6))


class _Syslog(_Layer):
    """RFC 5424 (``<PRI>1 TS HOST APP PROCID MSGID SD MSG``) and RFC 3164 (``<PRI>May 24 03:44:45 host app[pid]: msg``)."""

    name = "syslog"
    r5424 = re.compile(r"^<\d{1,3}>1 (?:-|" + _ISO + _ZONE + r"?) \S+ \S+ \S+ \S+ "
                       r"(?:-|(?:\[(?:[^\]\\\"]|\\.|\"(?:[^\"\\]|\\.)*\")*\])+)(?: \ufeff?|$)", re.ASCII)
    r3164 = re.compile(r"^<\d{1,3}>" + _MON + r" {1,2}(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
                       r" (?:\S+ )?[^\s\[\]:]+(?:\[\d+\])?:(?: |$)", re.ASCII)

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.inner = _YearlessOrIso(param or "5424", u, self.r5424, self.r3164)

    def prefix(self) -> str:
        if self.param == "3164":
            return r"<\d{1,3}>[A-Z][a-z]{2} {1,2}\d{1,2} \d\d:\d\d:\d\d(?:[.,]\d+)? (?:\S+ )?[^\s\[\]:]+(?:\[\d+\])?: "
        return r"<\d{1,3}>1 \S+ \S+ \S+ \S+ \S+ (?:-|(?:\[[^\]\n]*\])+) "

    def run(self, it: _Items, final: bool) -> _Items:
        return self.inner.run(it, final)


class _Compose(_PrefixLayer):
    name = "compose"
    has_ts = False
    rx = re.compile(r"^[\w.-]{1,80} *\|(?: |$)", re.ASCII)

    def prefix(self) -> str:
        return r"[\w.-]+ *\| ?"


_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[()][0-9A-Za-z]|[@-Z\\-_]|)")


def _strip_ansi(s: str) -> str:
    if "\x1b" in s:
        s = _ANSI.sub("", s)
    if "\r" in s:
        parts = s.split("\r")
        s = next((p for p in reversed(parts) if p), "")      # what the terminal shows last
    return s


class _Ansi(_Layer):
    name = "ansi"

    def prefix(self) -> str:
        # escapes, and whatever a \r redraw hides (each part ends at its \r: no runaway backtracking)
        return r"(?:\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\n]*\x07|[^\n\r]*\r)*"

    def run(self, it: _Items, final: bool) -> _Items:
        txt = [_strip_ansi(s) if ("\x1b" in s or "\r" in s) else s for s in it.txt]
        return _Items(txt, it.ln, it.sp, it.ts)


# -- pastes -----------------------------------------------------------------------------------------
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_TAG = re.compile(r"^\s*(?:</?details\b[^>]*>|<summary\b.*</summary>|</?pre>|</?code>)\s*$", re.IGNORECASE)


class _Markdown(_Layer):
    """A ticket paste: ``> `` quote markers, code fences, HTML details tags, prose between fences.

    A quote marker is markdown outside a fence, and inside a fence opened within a quote; inside a
    fence opened outside one, a leading ``>`` is payload (a REPL's ``>>>``).  ``>`` alone is a blank
    payload line; ``> `` removes the marker and one space, so a dump keeps its indentation.  When the
    paste has fences (``fenced``), lines outside them that do not look like evidence are prose.
    """

    name = "markdown"

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.fenced = "fenced" in param.split(",")
        self.fence: tuple[str, int, bool] | None = None        # (char, length, quoted) of the open fence

    def prefix(self) -> str:
        return r"(?:> ?)?"

    def run(self, it: _Items, final: bool) -> _Items:
        out = _Items()
        drop = self.u.drop
        for s, ln, sp, t in it:
            quoted = s[:1] == ">" and (self.fence is None or self.fence[2])
            if quoted:
                s = s[2:] if s[1:2] == " " else s[1:]
            if "`" in s[:6] or "~" in s[:6]:
                f = _FENCE.match(s)
                if f is not None and (f.group(1)[0] == "~" or "`" not in f.group(2)):
                    self._fence(f.group(1), f.group(2), quoted)
                    drop(ln, sp)
                    continue
            if "<" in s[:4] and _TAG.match(s):
                drop(ln, sp)
                continue
            if self.fenced and self.fence is None and (not EVIDENCE.match(s) if s.strip() else not quoted):
                drop(ln, sp)                 # prose, or a blank line between blocks, outside the fences
                continue
            out.add(s, ln, sp, t)
        return out

    def _fence(self, marks: str, info: str, quoted: bool) -> None:
        if self.fence is None:
            self.fence = (marks[0], len(marks), quoted)
        elif marks[0] == self.fence[0] and len(marks) >= self.fence[1] and not info.strip():
            self.fence = None
        # else: a fence line inside a fence (say a new language tag): dropped, still inside


_LINENO = {
    "bracket": r"\[(\d+)\](?: |$)",
    "pipe": r" *(\d+) ?(?:\||\u2502)(?: |$)",
    "colon": r" *(\d+):",
    "colon_space": r" *(\d+):(?: |$)",
    "tab": r" *(\d+)\t",
}


class _ViewerLineno(_PrefixLayer):
    name = "viewer_lineno"
    has_ts = False

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.rx = re.compile("^" + _LINENO.get(param, _LINENO["bracket"]), re.ASCII)

    def prefix(self) -> str:
        return _LINENO.get(self.param, _LINENO["bracket"]).replace("(\\d+)", "\\d+").replace("|$", "")


_VTS = r"[ \t]?(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?" + _ZONE + "?"


class _ViewerTs(_PrefixLayer):
    """A viewer's own timestamp column before each line: its time is kept as the collected time."""

    name = "viewer_ts"

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.sep = param or " "
        self.rx = re.compile("^" + _VTS + "(?:" + re.escape(self.sep) + "|[ \t]*$)", re.ASCII)

    def prefix(self) -> str:
        return r"[ \t]?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?" + re.escape(self.sep)

    def ts_of(self, m: re.Match[str]) -> datetime | None:
        return _iso_ts(*m.group(1, 2, 3))


def _wrap_continues(s: str) -> bool:
    """Whether a line can be the continuation of one a terminal wrapped."""
    return bool(s) and LINE_START.match(s) is None


class _HardWrap(_Layer):
    """Terminal hard wrapping at a fixed width W: a line of exactly W characters continues on the next
    line unless that one begins something (a record, a prefix, an indented dump line)."""

    name = "hard_wrap"

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        try:
            self.width = int(param)
        except ValueError:
            self.width = 0
        self.held: list | None = None               # [parts, ln, span, ts, physical lines]

    def run(self, it: _Items, final: bool) -> _Items:
        w = self.width
        if w <= 0:                                  # no width, no wrap
            return it
        out = _Items()
        held = self.held
        emit = self._emit
        for s, ln, sp, t in it:
            if held is not None:
                if _wrap_continues(s):
                    held[0].append(s)
                    held[2] += sp
                    held[4].extend(self.u.phys(ln, sp))
                    if len(s) == w:
                        continue
                    emit(out, held)
                    held = None
                    continue
                emit(out, held)
                held = None
            if len(s) == w:
                held = [[s], ln, sp, t, self.u.phys(ln, sp)]
            else:
                out.add(s, ln, sp, t)
        if held is not None and final:
            emit(out, held)
            held = None
        self.held = held
        return out

    def _emit(self, out: _Items, held: list) -> None:
        parts, ln, sp, t, phys = held
        if len(parts) > 1:
            self.u.register(ln, phys)
        out.add("".join(parts), ln, sp, t)

    def pending_first(self) -> int | None:
        return self.held[1] if self.held is not None else None


_LAYERS: dict[str, type[_Layer]] = {
    cls.name: cls for cls in (_Kubectl, _Cri, _DockerJson, _Journald, _Syslog, _Compose, _Ansi, _Markdown,
                              _ViewerLineno, _ViewerTs, _HardWrap)
}


class _Fluentbit(_JsonLines):
    name = "fluentbit"


class _Vector(_JsonLines):
    name = "vector"


_LAYERS["fluentbit"] = _Fluentbit
_LAYERS["vector"] = _Vector

# Every layer name detect() can return.
LAYER_NAMES = tuple(_LAYERS)


# -- detection -------------------------------------------------------------------------------------
def _nonblank(lines: list[str]) -> list[str]:
    return [s for s in lines if s.strip()]


MAJORITY = 0.8          # share of non-blank sample lines a collector prefix must be on
QUOTE_MAJORITY = 0.6    # a paste's quote markers (people leave some lines unquoted)
# Inside a paste a collector's prefix may cover one fenced block only (prose and a quoted dump beside
# it): behind a markdown layer, a specific prefix on this share of the lines (and 3 of them) will do.
PASTE_SHARE = 0.3


def _share(lines: list[str], rx: re.Pattern[str], need: float = MAJORITY) -> bool:
    """Whether the prefix ``rx`` is on at least ``need`` of the non-blank lines (and on 3 when relaxed)."""
    ne = _nonblank(lines)
    if not ne:
        return False
    hits = sum(1 for s in ne if rx.match(s))
    return hits >= need * len(ne) and (need >= MAJORITY or hits >= 3)


def _detect_ansi(lines: list[str], need: float) -> str | None:
    hits = sum(1 for s in lines if ("\x1b" in s and _ANSI.search(s)) or "\r" in s.rstrip("\r"))
    return "" if hits else None


def _detect_hard_wrap(lines: list[str], need: float) -> str | None:
    ne = _nonblank(lines)
    if len(ne) < 6:
        return None
    w = max(len(s) for s in lines)
    if w < 60:
        return None
    at_w = [i for i in range(len(lines) - 1) if len(lines[i]) == w]   # the sample's last line may be cut
    if len({lines[i] for i in at_w}) < 3:
        return None
    cont = sum(1 for i in at_w if _wrap_continues(lines[i + 1]))
    return str(w) if cont >= 3 and cont >= 0.6 * len(at_w) else None


DOCKER_KEYS = {"log", "stream", "time", "attrs"}
TIME_KEYS = ("date", "timestamp", "@timestamp", "time", "ts", "_time", "datetime")
PAYLOAD_KEYS = ("log", "message", "msg", "MESSAGE", "text", "line", "event", "_raw")
_HEAD_RX = re.compile(PAYLOAD_HEAD, re.ASCII)


def _detect_json(lines: list[str], need: float) -> tuple[str, str] | None:
    ne = _nonblank(lines)
    if not ne:
        return None
    objs = [d for d in map(_json_obj, ne) if d is not None]
    if len(objs) < MAJORITY * len(ne):
        return None
    n = len(objs)

    def share(pred: Callable[[dict], bool]) -> float:
        return sum(1 for d in objs if pred(d)) / n

    if share(lambda d: isinstance(d.get("log"), str) and "time" in d and "stream" in d
             and set(d) <= DOCKER_KEYS) >= MAJORITY:
        return "docker_json", ""
    if share(lambda d: "MESSAGE" in d and "__REALTIME_TIMESTAMP" in d) >= MAJORITY:
        return "journald", "json"
    keys: dict[str, int] = {}
    for d in objs:
        for k, v in d.items():
            if isinstance(v, str) and k not in TIME_KEYS and k != "stream":
                keys[k] = keys.get(k, 0) + 1
    cands = [k for k, c in keys.items() if c >= MAJORITY * n]
    if not cands:
        return None

    def score(k: str) -> tuple[float, bool, float]:
        vals = [d[k] for d in objs if isinstance(d.get(k), str)]
        heads = sum(1 for v in vals if _HEAD_RX.match(v) or EVIDENCE.match(v)) / len(vals)
        return heads, k in PAYLOAD_KEYS, sum(map(len, vals)) / len(vals)

    key = max(cands, key=score)
    tkey = next((k for k in TIME_KEYS if share(lambda d, k=k: k in d) >= MAJORITY), "")
    return ("fluentbit" if key == "log" else "vector"), key + "\t" + tkey


def _detect_cri(lines: list[str], need: float) -> str | None:
    return "" if _share(lines, _Cri.rx, need) else None


def _detect_journald(lines: list[str], need: float) -> str | None:
    if _share(lines, _Journald.iso, need):
        return "short-iso"
    if _share(lines, _Journald.short, need):
        return "short"
    return None


def _detect_syslog(lines: list[str], need: float) -> str | None:
    if _share(lines, _Syslog.r5424, need):
        return "5424"
    if _share(lines, _Syslog.r3164, need):
        return "3164"
    return None


def _detect_kubectl(lines: list[str], need: float) -> str | None:
    return "" if _share(lines, _Kubectl.rx, need) else None


def _detect_compose(lines: list[str], need: float) -> str | None:
    if need < MAJORITY:      # in a paste: one service's prefix on evidence, not '404 | not found' lines
        ms = [m for m in map(_Compose.rx.match, _nonblank(lines)) if m]
        names = {m.group(0).split("|")[0].strip() for m in ms}
        rests = [m.string[m.end():] for m in ms]
        if len(names) > 4 or sum(1 for r in rests if not r.strip() or EVIDENCE.match(r)) < 0.8 * len(ms):
            return None
    return "" if _share(lines, _Compose.rx, need) else None


def _detect_markdown(lines: list[str], need: float) -> str | None:
    ne = _nonblank(lines)
    if not ne:
        return None
    quoted = sum(1 for s in ne if s.startswith(">")) / len(ne)
    flags = []
    if quoted >= QUOTE_MAJORITY:
        flags.append("quote")
    fences = early = 0
    seen = 0
    inside = False
    outside: list[str] = []
    for s in lines:
        quoted = s.startswith(">")
        if quoted:
            s = s[2:] if s[1:2] == " " else s[1:]
        if not s.strip():
            continue
        seen += 1
        f = _FENCE.match(s)
        if f is not None and (f.group(1)[0] == "~" or "`" not in f.group(2)):
            fences += 1
            early += seen <= 20
            inside = not inside
        elif _TAG.match(s):
            fences += 1
            early += seen <= 20
        elif not inside and not quoted:
            outside.append(s)
    # a paste frames evidence in fences (or quotes) between prose; a log with a stray fence (a logged
    # prompt) has records outside it, and they must not be taken for prose
    framed = not outside or sum(1 for s in outside if EVIDENCE.match(s)) < 0.5 * len(outside)
    if (fences >= 2 or early) and framed:
        flags.append("fenced")
    return ",".join(flags) if flags else None


def _detect_viewer_lineno(lines: list[str], need: float) -> str | None:
    ne = _nonblank(lines)
    if len(ne) < 3:
        return None
    best: tuple[int, str] | None = None
    for style, pat in _LINENO.items():
        rx = re.compile("^" + pat, re.ASCII)
        ms = [m for m in map(rx.match, ne) if m]
        nums = [int(m.group(1)) for m in ms]
        if len(nums) < MAJORITY * len(ne) or len(nums) < 3:
            continue
        # numbered lines of evidence, not a numbered list (a Rust backtrace's '  3: py_spy::dump')
        rests = [r[1:] if r[:1] == " " else r for r in (m.string[m.end():] for m in ms)]
        if sum(1 for r in rests if EVIDENCE.match(r)) < 0.3 * len(ms):
            continue
        pairs = list(pairwise(nums))
        step1 = sum(1 for a, b in pairs if b == a + 1)
        up = sum(1 for a, b in pairs if b > a)
        if step1 >= 0.6 * len(pairs) and up >= 0.9 * len(pairs) and (best is None or len(nums) > best[0]):
            best = (len(nums), style)
    if best is None:
        return None
    style = best[1]
    if style == "colon":            # '1234: [2026-...' or grep -n's '1234:[2026-...'
        rx = re.compile(r"^ *\d+:( ?)(.*)$")
        spaced = [m.group(1) == " " for m in map(rx.match, ne) if m and _HEAD_RX.match(m.group(2))]
        if spaced and sum(spaced) >= 0.9 * len(spaced):
            style = "colon_space"
    return style


def _detect_viewer_ts(lines: list[str], need: float) -> str | None:
    ne = _nonblank(lines)
    if len(ne) < 3:
        return None
    rx = re.compile("^" + _VTS + r"([ \t]+(?:\| )?|$)", re.ASCII)
    ms = [m for m in map(rx.match, ne) if m]
    if len(ms) < MAJORITY * len(ne):
        return None
    seps: dict[str, int] = {}
    heads = 0
    for m in ms:
        if _HEAD_RX.match(m.string, m.end()):
            heads += 1
            seps[m.group(4)] = seps.get(m.group(4), 0) + 1
    # the payload behind the column has its own record heads (SGLang, glog, vLLM): else the 'column'
    # is the payload's own time (a '2026-05-24 03:44:45 INFO ...' log keeps it)
    if heads < 2 or heads < 0.3 * len(ms) or not seps:
        return None
    return max(seps, key=lambda k: seps[k])


# Tried in this order at each level, outermost envelope first.
_DETECTORS: list[tuple[str, Callable[[list[str], float], str | tuple[str, str] | None]]] = [
    ("ansi", _detect_ansi),
    ("hard_wrap", _detect_hard_wrap),
    ("json", _detect_json),
    ("cri", _detect_cri),
    ("journald", _detect_journald),
    ("syslog", _detect_syslog),
    ("kubectl", _detect_kubectl),
    ("viewer_lineno", _detect_viewer_lineno),
    ("markdown", _detect_markdown),
    ("compose", _detect_compose),
    ("viewer_ts", _detect_viewer_ts),
]
MAX_LAYERS = 4
SAMPLE_LINES = 200


@dataclass(frozen=True)
class EnvelopeStack:
    """What :func:`detect` found: the layers, outermost first, and each one's variant."""

    layers: tuple[str, ...] = ()
    params: tuple[str, ...] = ()     # per layer: its variant ('' for the default one)

    @property
    def name(self) -> str:
        """'none', 'kubectl', 'markdown+compose+kubectl', ... (``sources.envelope``)."""
        return "+".join(self.layers) or "none"

    def param(self, i: int) -> str:
        return self.params[i] if i < len(self.params) else ""

    def prefix_pattern(self) -> str:
        """Regex (str, unanchored) of everything the stack puts before a payload line."""
        u = Unwrapper(self)
        return "".join(layer.prefix() for layer in u.layers)

    def record_start(self) -> re.Pattern[bytes]:
        """A line that starts a payload record behind this envelope, with its leading newline: the
        chunk reader cuts chunks just before one (so multi-line records stay whole)."""
        return _record_start(self)


@lru_cache(maxsize=64)
def _record_start(stack: EnvelopeStack) -> re.Pattern[bytes]:
    prefix = stack.prefix_pattern().replace("\\u2502", "\\xe2\\x94\\x82")   # '│' as its UTF-8 bytes
    return re.compile(b"\n" + prefix.encode("ascii", "backslashreplace") + PAYLOAD_HEAD.encode("ascii"))


NONE = EnvelopeStack()


def _sample(lines: list[str]) -> list[str]:
    out: list[str] = []
    seen = 0
    for s in lines:
        out.append(s)
        seen += bool(s.strip())
        if seen >= SAMPLE_LINES:
            break
    return out


def detect(sample_lines: list[str]) -> EnvelopeStack:
    """The envelope of a file, from its first lines (split on ``\\n`` only, CR of CRLF removed).

    Layer by layer, outermost first: a layer must be on a clear majority of the sample's non-blank
    lines (markdown and ansi by their own marks); the sample is stripped of it and looked at again,
    up to MAX_LAYERS deep.  A plain log gives ``none``.
    """
    try:
        cur = _sample(list(sample_lines))
        layers: list[str] = []
        params: list[str] = []
        for _ in range(MAX_LAYERS):
            hit: tuple[str, str] | None = None
            need = PASTE_SHARE if "markdown" in layers else MAJORITY
            for name, fn in _DETECTORS:
                r = fn(cur, need)
                if r is None:
                    continue
                found = r if isinstance(r, tuple) else (name, r)
                if found[0] not in layers:
                    hit = found
                    break
            if hit is None:
                break
            layers.append(hit[0])
            params.append(hit[1])
            one = Unwrapper(EnvelopeStack((hit[0],), (hit[1],)), year_hint=2000)
            cur = _sample(one.feed(cur, 1, final=True).payload)
        return EnvelopeStack(tuple(layers), tuple(params))
    except Exception:          # detection must never stop an ingest: an unknown envelope is 'none'
        return NONE


# -- unwrapping -----------------------------------------------------------------------------------
@dataclass
class Unwrapped:
    """The payload of one fed chunk (lines carried over from earlier chunks included)."""

    payload: list[str] = field(default_factory=list)       # envelope stripped, split records rejoined
    line: list[int] = field(default_factory=list)          # physical 1-based line of its first physical line
    span: list[int] = field(default_factory=list)          # physical lines it stands for (0: a further line
                                                           # of one JSON message that held several)
    collected_ts: list[datetime | None] = field(default_factory=list)   # the envelope's time (naive, UTC
                                                           # when the envelope gave a zone), None without one
    dropped: list[tuple[int, str]] = field(default_factory=list)       # (physical line, original text) of
                                                           # envelope-only and prose lines
    identity: bool = False                                 # payload is the input list itself (stack 'none')


class Unwrapper:
    """Strips an :class:`EnvelopeStack` from a file fed chunk by chunk.

    ``feed`` takes consecutive physical lines (``first_line`` is the 1-based number of ``lines[0]``)
    and returns the payload it can complete; what may continue in the next chunk (a CRI ``P`` run, a
    docker partial, a wrapped line) is held back until then, and ``final=True`` flushes everything.
    ``year_hint`` dates year-less envelope times (journald ``short``, RFC 3164): an int is the year of
    the first line, a date or datetime a moment near the file's lines (dated payload, file mtime).
    """

    def __init__(self, stack: EnvelopeStack, year_hint: int | date | None = None) -> None:
        self.stack = stack
        self.years = _Years(year_hint)
        self._orig: list[str] = []
        self._orig_first = 1
        self._phys: dict[int, list[int]] = {}
        self._dropped: list[tuple[int, str]] = []
        self.layers: list[_Layer] = []
        for i, name in enumerate(stack.layers):
            cls = _LAYERS.get(name)
            if cls is not None:
                self.layers.append(cls(stack.param(i), self))

    # services for the layers
    def phys(self, ln: int, sp: int) -> list[int]:
        got = self._phys.get(ln)
        return list(got) if got is not None else list(range(ln, ln + sp))

    def register(self, ln: int, lines: list[int]) -> None:
        """Physical lines of a joined item, when they are not ln, ln+1, ... (interleaved streams)."""
        if lines != list(range(ln, ln + len(lines))):
            self._phys[ln] = lines

    def drop(self, ln: int, sp: int) -> None:
        first, orig = self._orig_first, self._orig
        for p in self._phys.pop(ln, None) or range(ln, ln + sp):
            i = p - first
            self._dropped.append((p, orig[i] if 0 <= i < len(orig) else ""))

    def carried_from(self) -> int | None:
        """First physical line held back for the next chunk (None: nothing is): a safe resume point
        is the start of that line."""
        firsts = [p for p in (layer.pending_first() for layer in self.layers) if p is not None]
        return min(firsts) if firsts else None

    def feed(self, lines: list[str], first_line: int, final: bool = False) -> Unwrapped:
        n = len(lines)
        if not self.layers:         # 'none': the input itself, no per-line work
            return Unwrapped(lines, list(range(first_line, first_line + n)), [1] * n, [None] * n, [],
                             identity=True)
        keep = self.carried_from()
        if keep is None or not self._orig:
            self._orig, self._orig_first = lines, first_line
        else:
            self._orig = self._orig[max(0, keep - self._orig_first):] + lines
            self._orig_first = max(keep, self._orig_first)
        it = _Items(lines, list(range(first_line, first_line + n)), [1] * n, [None] * n)
        for layer in self.layers:
            it = layer.run(it, final)
        dropped, self._dropped = self._dropped, []
        dropped.sort()
        keep = self.carried_from()
        if self._phys:
            self._phys = {k: v for k, v in self._phys.items() if keep is not None and k >= keep}
        return Unwrapped(it.txt, it.ln, it.sp, it.ts, dropped)


def unwrap_all(lines: list[str], stack: EnvelopeStack | None = None,
               year_hint: int | date | None = None) -> tuple[EnvelopeStack, Unwrapped]:
    """Detect (unless given) and strip the envelope of a whole file's lines in one go."""
    stack = detect(lines) if stack is None else stack
    return stack, Unwrapper(stack, year_hint).feed(lines, 1, final=True)
