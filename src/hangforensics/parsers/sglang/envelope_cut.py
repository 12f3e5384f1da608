"""A collector's line prefixes cut from a chunk's bytes, for the compiled scanner (``sglang_scan``).

Behind kubectl ``--timestamps``, CRI, docker compose or a process's tag, a large log was decoded into a
column of lines, unwrapped by ``readers.envelopes.columnar`` (a regex over every line) and joined back into
bytes for the scanner: a third of its parse.  Here each line's payload start, and the collector's time, are
read from the bytes in one pass, as ``columnar.unwrap_column`` reads them (the same patterns, matched as
their leftmost-first regexes match: a line without the prefix is kept whole, with no time; a time that is no
valid date is none).  Where that reading could differ from the column's, or the column would not unwrap the
chunk at all (a CRI partial ``P`` line, a payload that ends in CR, a process tag after a colour escape's
remnant, or one before a vLLM record that the column rewrites), the chunk is left to the column (``FALLBACK``).
"""

from __future__ import annotations

import numpy as np

from ..datetimes import FIRST_US, LAST_US
from .scan_layout import COMPOSE, CRI, FALLBACK, JOURNALD, KUBECTL, NO_TIME, OK, SYSLOG
from .sglang_scan import _digit, _digits, _micros, _num, _tag_char, _word_char, njit


@njit(inline="always")
def _fraction9(buf, q: int, end: int):
    """``(?:[.,](\\d{1,9}))?`` at ``q``, as a collector's pattern reads a fraction of a second: (where it ends,
    its digits to the microsecond); (q, 0) without one; (-1, 0) where a separator has no digit or ten (nothing
    after it could then match)."""
    if q >= end or (buf[q] != 46 and buf[q] != 44):
        return q, 0
    frac = 0
    r = q + 1
    while r < end and r - q <= 9 and _digit(buf[r]):
        if r - q <= 6:
            frac = frac * 10 + (buf[r] - 48)
        r += 1
    n = r - q - 1
    if n == 0 or n > 9:
        return -1, 0
    for _ in range(min(n, 6), 6):
        frac *= 10
    return r, frac


@njit(inline="always")
def _iso_time(buf, p: int, end: int):
    """``ISO ZONE`` at ``p`` (``columnar._ISO``, ``_ZONE``): (where it ends, its time in microseconds since
    1970 moved to UTC or NO_TIME where ``columnar._collected_time`` gives none), or (-1, NO_TIME)."""
    return _iso(buf, p, end, False)


@njit(inline="always")
def _iso_time_zone_optional(buf, p: int, end: int):
    """``ISO ZONE?`` at ``p`` (RFC 5424's time: without a zone, as UTC)."""
    return _iso(buf, p, end, True)


@njit(inline="always")
def _iso(buf, p: int, end: int, zone_optional: bool):
    """``_iso_time``, the zone optional or not."""
    if p + (19 if zone_optional else 20) > end or not (
            _digits(buf, p, 4) and buf[p + 4] == 45 and _digits(buf, p + 5, 2) and buf[p + 7] == 45
            and _digits(buf, p + 8, 2) and buf[p + 10] == 84 and _digits(buf, p + 11, 2) and buf[p + 13] == 58
            and _digits(buf, p + 14, 2) and buf[p + 16] == 58 and _digits(buf, p + 17, 2)):
        return -1, NO_TIME
    q, frac = _fraction9(buf, p + 19, end)
    if q < 0:
        return -1, NO_TIME
    east = 0
    c = buf[q] if q < end else 0
    if c == 90 or c == 122:                     # Z, z
        q += 1
    elif (c == 43 or c == 45) and q + 3 <= end and _digits(buf, q + 1, 2):     # [+-]\d{2}:?\d{2}
        r = q + 3
        if r < end and buf[r] == 58:
            r += 1
        if r + 2 <= end and _digits(buf, r, 2):
            east = _num(buf, q + 1, 2) * 60 + _num(buf, r, 2)
            if c == 45:
                east = -east
            q = r + 2
        elif not zone_optional:
            return -1, NO_TIME
    elif not zone_optional:
        return -1, NO_TIME
    # (the base as ``python_datetime`` reads it: a 'T' in place of the space _micros expects is not looked at)
    us = _micros(buf, p)
    if us == -1:                                # (-1: no valid date; a valid one is whole seconds)
        return q, NO_TIME
    us = us + frac - east * 60_000_000
    if us < FIRST_US or us > LAST_US:
        return q, NO_TIME
    return q, us


@njit(inline="always")
def _after_space(buf, q: int, end: int) -> int:
    """``(?: |$)`` at ``q``: where it ends, or -1."""
    if q == end:
        return q
    return q + 1 if buf[q] == 32 else -1


@njit(inline="always")
def _kubectl(buf, s: int, end: int):
    """``columnar.PATTERNS['kubectl']`` at ``s``: (payload start, time), (s, NO_TIME) where it does not match."""
    p = s
    if p + 5 < end and buf[p] == 91 and buf[p + 1] == 112 and buf[p + 2] == 111 and buf[p + 3] == 100 \
            and buf[p + 4] == 47:              # '[pod/' NAME '] ' (else the time at the line's start, a '[')
        q = p + 5
        while q < end and buf[q] != 93 and buf[q] != 32 and not (9 <= buf[q] <= 13):
            q += 1
        if q > p + 5 and q + 1 < end and buf[q] == 93 and buf[q + 1] == 32:
            p = q + 2
    q, us = _iso_time(buf, p, end)
    if q < 0:
        return s, NO_TIME
    q = _after_space(buf, q, end)
    if q < 0:
        return s, NO_TIME
    return q, us


@njit(inline="always")
def _cri(buf, s: int, end: int):
    """``columnar.PATTERNS['cri']`` at ``s``: (payload start, time, a partial 'P' line)."""
    q, us = _iso_time(buf, s, end)
    if q < 0 or q + 9 > end or buf[q] != 32:
        return s, NO_TIME, False
    q += 1
    std = buf[q] == 115 and buf[q + 1] == 116 and buf[q + 2] == 100      # 'std'
    out = buf[q + 3] == 111 and buf[q + 4] == 117 and buf[q + 5] == 116   # 'out'
    err = buf[q + 3] == 101 and buf[q + 4] == 114 and buf[q + 5] == 114   # 'err'
    if not (std and (out or err)) or buf[q + 6] != 32:
        return s, NO_TIME, False
    tag = buf[q + 7]
    if tag != 80 and tag != 70:                                           # P, F
        return s, NO_TIME, False
    r = _after_space(buf, q + 8, end)
    if r < 0:
        return s, NO_TIME, False
    return r, us, tag == 80


@njit(inline="always")
def _not_space(c: int) -> bool:
    """``\\S`` under re.ASCII (``columnar._NOT_SPACE``)."""
    return c != 32 and not (9 <= c <= 13)


@njit(inline="always")
def _field_end(buf, p: int, end: int) -> int:
    """Where ``\\S+ `` at ``p`` ends (after its space), or -1."""
    q = p
    while q < end and _not_space(buf[q]):
        q += 1
    return q + 1 if q > p and q < end and buf[q] == 32 else -1


@njit(inline="always")
def _tag_end_at(buf, r: int, end: int) -> int:
    """``columnar._TAG`` then ``(?: |$)`` at ``r`` (``name[pid]:`` and a space, or the line's end): where it
    ends, or -1."""
    q = r
    while q < end and _not_space(buf[q]) and buf[q] != 91 and buf[q] != 93 and buf[q] != 58:
        q += 1
    if q == r or q >= end:
        return -1
    if buf[q] == 91:
        t = q + 1
        while t < end and _digit(buf[t]):
            t += 1
        if t == q + 1 or t + 1 >= end or buf[t] != 93 or buf[t + 1] != 58:
            return -1
        q = t + 1
    if buf[q] != 58:
        return -1
    return _after_space(buf, q + 1, end)


@njit(inline="always")
def _journald(buf, s: int, end: int):
    """``columnar.PATTERNS['journald']`` (``short-iso``: ``ISO ZONE host tag[pid]: ``) at ``s``: (payload start,
    time), (s, NO_TIME) where it does not match."""
    q, us = _iso_time(buf, s, end)
    if q < 0 or q >= end or buf[q] != 32:
        return s, NO_TIME
    q = _field_end(buf, q + 1, end)
    if q < 0:
        return s, NO_TIME
    r = _tag_end_at(buf, q, end)
    return (s, NO_TIME) if r < 0 else (r, us)


@njit(inline="always")
def _sd_end(buf, p: int, end: int) -> int:
    """Where RFC 5424's structured data (``-``, or ``[...]`` elements with quoted, escaped values) at ``p``
    ends, as ``columnar.PATTERNS['syslog']`` reads it, or -1."""
    if p < end and buf[p] == 45:
        return p + 1
    q = p
    while q < end and buf[q] == 91:             # an element: up to its first ']' outside quotes and escapes
        q += 1
        while True:
            if q >= end:
                return -1
            c = buf[q]
            if c == 93:
                q += 1
                break
            if c == 92:                         # \. (any character after it)
                if q + 1 >= end:
                    return -1
                q += 2
            elif c == 34:                       # "..." with \. inside
                q += 1
                while q < end and buf[q] != 34:
                    q += 2 if buf[q] == 92 else 1
                if q >= end:
                    return -1
                q += 1
            else:
                q += 1
    return q if q > p else -1


@njit(inline="always")
def _syslog(buf, s: int, end: int):
    """``columnar.PATTERNS['syslog']`` (RFC 5424) at ``s``: (payload start, time), (s, NO_TIME) where it does
    not match."""
    if s >= end or buf[s] != 60:
        return s, NO_TIME
    q = s + 1
    while q < end and q - s <= 3 and _digit(buf[q]):
        q += 1
    if q == s + 1 or q + 2 >= end or buf[q] != 62 or buf[q + 1] != 49 or buf[q + 2] != 32:  # '>1 '
        return s, NO_TIME
    q += 3
    us = np.int64(NO_TIME)                      # (typed as the times are: numba's ahead-of-time build wants it)
    if q < end and buf[q] == 45:                # '-': no time
        q += 1
    else:
        q, us = _iso_time_zone_optional(buf, q, end)
        if q < 0:
            return s, NO_TIME
    if q >= end or buf[q] != 32:
        return s, NO_TIME
    q += 1
    for _ in range(4):                          # host, app, procid, msgid
        q = _field_end(buf, q, end)
        if q < 0:
            return s, NO_TIME
    q = _sd_end(buf, q, end)
    if q < 0:
        return s, NO_TIME
    if q == end:
        return q, us
    if buf[q] != 32:
        return s, NO_TIME
    q += 1
    if q + 3 <= end and buf[q] == 0xEF and buf[q + 1] == 0xBB and buf[q + 2] == 0xBF:     # U+FEFF
        q += 3
    return q, us


@njit(inline="always")
def _compose(buf, s: int, end: int) -> int:
    """Where the payload starts after ``columnar.COMPOSE`` at ``s`` (``s``: none)."""
    q = s
    while q < end and q - s < 81 and (_word_char(buf[q]) or buf[q] == 46 or buf[q] == 45):
        q += 1
    n = q - s
    if n == 0 or n > 80:
        return s
    while q < end and buf[q] == 32:
        q += 1
    if q >= end or buf[q] != 124:
        return s
    r = _after_space(buf, q + 1, end)
    return s if r < 0 else r


@njit(inline="always")
def _remnant_end(buf, s: int, end: int) -> int:
    """Where ``columnar._REMNANT`` (`` ?\\x1B?\\[[0-9]{1,3}(?:;[0-9]{1,3})*m``) at ``s`` ends, or -1."""
    p = s
    if p < end and buf[p] == 32:
        p += 1
    if p < end and buf[p] == 27:
        p += 1
    if p >= end or buf[p] != 91:
        return -1
    p += 1
    while True:
        q = p
        while p < end and p - q < 3 and _digit(buf[p]):
            p += 1
        if p == q or p >= end or _digit(buf[p]):
            return -1
        if buf[p] == 109:                       # 'm'
            return p + 1
        if buf[p] != 59:                        # ';'
            return -1
        p += 1


@njit(inline="always")
def _pid_end(buf, p: int, end: int) -> int:
    """``pid=[0-9]+(?:, ip=(?:W|[.:-])+)?\\)`` at ``p``: where it ends, or -1."""
    if not (p + 4 < end and buf[p] == 112 and buf[p + 1] == 105 and buf[p + 2] == 100 and buf[p + 3] == 61):
        return -1
    p += 4
    q = p
    while p < end and _digit(buf[p]):
        p += 1
    if p == q or p >= end:
        return -1
    if buf[p] == 44:
        if not (p + 5 < end and buf[p + 1] == 32 and buf[p + 2] == 105 and buf[p + 3] == 112 and buf[p + 4] == 61):
            return -1
        p += 5
        q = p
        while p < end and (_word_char(buf[p]) or buf[p] == 46 or buf[p] == 58 or buf[p] == 45):
            p += 1
        if p == q or p >= end:
            return -1
    return p + 1 if buf[p] == 41 else -1


@njit(inline="always")
def _tag_end(buf, s: int, end: int) -> int:
    """Where ``columnar.PROC_TAG``'s prefix (without a remnant before it) at ``s`` ends, or -1: the regex's
    ``\\((?:NAME(?: NAME)? )?pid=...\\)``, tried as it tries it (the 'pid=' after two words, then after one,
    then at once; each word a whole run of NAME's characters, a single space after it), then the colour reset
    and a space or the line's end."""
    if s >= end or buf[s] != 40:
        return -1
    words = np.empty(3, np.int64)               # where each word after '(' starts
    nw = 0
    p = s + 1
    while nw < 3:
        q = p
        while p < end and _tag_char(buf[p]):
            p += 1
        if p == q:
            break
        words[nw] = q
        nw += 1
        if p >= end or buf[p] != 32:
            break
        p += 1
    close = -1
    for k in range(min(nw, 3) - 1, -1, -1):
        # a word k is where 'pid=' may start only if each word before it is followed by one space (so all are)
        close = _pid_end(buf, words[k], end)
        if close >= 0:
            break
    if close < 0:
        return -1
    q = close                                   # (?: ?\x1B?\[0m)? then (?: |$)
    r = q
    if r < end and buf[r] == 32:
        r += 1
    if r < end and buf[r] == 27:
        r += 1
    if r + 3 <= end and buf[r] == 91 and buf[r + 1] == 48 and buf[r + 2] == 109:
        after = _after_space(buf, r + 3, end)
        if after >= 0:
            return after
    return _after_space(buf, q, end)


@njit(inline="always")
def _vllm_record(buf, p: int, end: int) -> bool:
    """``columnar._VLLM_RECORD`` at ``p``: INFO, WARNING, ERROR, DEBUG or CRITICAL, then 'MM-DD HH:MM:SS'."""
    q = p
    while q < end and 65 <= buf[q] <= 90:
        q += 1
    if q >= end or buf[q] != 32 or not _level(buf, p, q - p):
        return False
    q += 1
    return q + 14 <= end and _digits(buf, q, 2) and buf[q + 2] == 45 and _digits(buf, q + 3, 2) \
        and buf[q + 5] == 32 and _digits(buf, q + 6, 2) and buf[q + 8] == 58 and _digits(buf, q + 9, 2) \
        and buf[q + 11] == 58 and _digits(buf, q + 12, 2)


@njit(inline="always")
def _is(buf, p: int, word) -> bool:
    same = True
    for k in range(len(word)):
        same &= buf[p + k] == word[k]
    return same


_INFO = np.frombuffer(b"INFO", np.uint8)
_WARNING = np.frombuffer(b"WARNING", np.uint8)
_ERROR = np.frombuffer(b"ERROR", np.uint8)
_DEBUG = np.frombuffer(b"DEBUG", np.uint8)
_CRITICAL = np.frombuffer(b"CRITICAL", np.uint8)


@njit(inline="always")
def _level(buf, p: int, n: int) -> bool:
    """The ``n`` capitals at ``p`` are one of vLLM's levels."""
    if n == 4:
        return _is(buf, p, _INFO)
    if n == 7:
        return _is(buf, p, _WARNING)
    if n == 5:
        return _is(buf, p, _ERROR) or _is(buf, p, _DEBUG)
    return n == 8 and _is(buf, p, _CRITICAL)


@njit(nogil=True)
def envelope_cut(buf, starts, ends, layers):
    """Per line [starts[i], ends[i]) of ``buf``: where its payload starts behind ``layers`` (LAYER_CODES,
    outermost first; the next one cut from the payload of the one before), and the outermost layer's time
    (NO_TIME: none, or no timed layer); and OK, or FALLBACK where the chunk is the column's to unwrap."""
    n = len(starts)
    pstarts = np.empty(n, np.int64)
    times = np.full(n, NO_TIME, np.int64)
    for row in range(n):
        s = starts[row]
        e = ends[row]
        for k in range(len(layers)):
            layer = layers[k]
            if layer == KUBECTL:
                s, us = _kubectl(buf, s, e)
                times[row] = us
            elif layer == CRI:
                s, us, partial = _cri(buf, s, e)
                if partial:
                    return pstarts, times, FALLBACK
                times[row] = us
            elif layer == JOURNALD:
                s, us = _journald(buf, s, e)
                times[row] = us
            elif layer == SYSLOG:
                s, us = _syslog(buf, s, e)
                times[row] = us
            elif layer == COMPOSE:
                s = _compose(buf, s, e)
            else:
                r = _remnant_end(buf, s, e)
                if r >= 0:
                    if r < e and buf[r] == 40:  # a tag after a colour's remnant: the column's to rewrite
                        return pstarts, times, FALLBACK
                    continue
                t = _tag_end(buf, s, e)
                if t >= 0:
                    if _vllm_record(buf, t, e):
                        # the tag stays before a vLLM record; one with a remnant in it the column rewrites
                        for p in range(s, t):
                            if buf[p] == 91 or buf[p] == 27:
                                return pstarts, times, FALLBACK
                    else:
                        s = t
        if e > s and buf[e - 1] == 13:          # (a payload ending in CR: the scanner would take it for CRLF's)
            return pstarts, times, FALLBACK
        pstarts[row] = s
    return pstarts, times, OK


_LOG_KEY = np.frombuffer(b'{"log":"', np.uint8)
_STREAM_KEY = np.frombuffer(b'","stream":"', np.uint8)
_TIME_KEY = np.frombuffer(b'","time":"', np.uint8)


@njit(inline="always")
def _hex4(buf, p: int) -> int:
    """The code of a ``\\uXXXX`` escape's four hex digits at ``p`` that DOCKER_JSON allows (003c, 003e, 0026,
    001b, 2028, 2029), else -1."""
    a, b, c, d = buf[p], buf[p + 1], buf[p + 2], buf[p + 3]
    if a == 48 and b == 48:
        if c == 51 and d == 99:
            return 0x3C
        if c == 51 and d == 101:
            return 0x3E
        if c == 50 and d == 54:
            return 0x26
        if c == 49 and d == 98:
            return 0x1B
    elif a == 50 and b == 48 and c == 50 and (d == 56 or d == 57):
        return 0x2028 if d == 56 else 0x2029
    return -1


@njit(nogil=True)
def docker_cut(buf, starts, ends):
    """The payload of each line [starts[i], ends[i]) of ``buf`` written by docker's json-file driver in
    ``columnar.DOCKER_JSON``'s form, as ``columnar._docker_entries`` reads it: its text unescaped (a CR at its
    end dropped), each followed by a newline (the bytes ``parse._payload_bytes`` joins), and the driver's time;
    and OK, or FALLBACK where a line is in no such form (the column reads the chunk line by line) or its text
    still ends in CR."""
    n = len(starts)
    out = np.empty(len(buf) + n, np.uint8)
    times = np.full(n, NO_TIME, np.int64)
    w = 0
    for row in range(n):
        s = starts[row]
        e = ends[row]
        if e - s < 8 + 2 + 12 + 1 + 10 + 20 + 2 or not _is(buf, s, _LOG_KEY):
            return out[:0], times, FALLBACK
        p = s + 8
        begin = w
        while True:
            if p >= e:
                return out[:0], times, FALLBACK
            c = buf[p]
            if c == 92:                         # a backslash: an escape DOCKER_JSON allows, or the final \n
                if p + 1 >= e:
                    return out[:0], times, FALLBACK
                x = buf[p + 1]
                if x == 110:                    # \n: the text's end, the stream's key next
                    p += 2
                    break
                if x == 34 or x == 92 or x == 47:
                    out[w] = x
                elif x == 98:
                    out[w] = 8
                elif x == 102:
                    out[w] = 12
                elif x == 114:
                    out[w] = 13
                elif x == 116:
                    out[w] = 9
                elif x == 117 and p + 6 <= e:
                    code = _hex4(buf, p + 2)
                    if code < 0:
                        return out[:0], times, FALLBACK
                    if code < 0x80:
                        out[w] = code
                    else:                       # U+2028, U+2029 in UTF-8
                        out[w], out[w + 1], out[w + 2] = 0xE2, 0x80, 0xA8 if code == 0x2028 else 0xA9
                        w += 2
                    p += 4
                else:
                    return out[:0], times, FALLBACK
                w += 1
                p += 2
            elif c == 34 or c < 32:             # an unescaped quote or control character: no such entry
                return out[:0], times, FALLBACK
            else:
                out[w] = c
                w += 1
                p += 1
        if p + 12 > e or not _is(buf, p, _STREAM_KEY):
            return out[:0], times, FALLBACK
        p += 12
        q = p
        while p < e and _word_char(buf[p]):
            p += 1
        if p == q or p + 10 > e or not _is(buf, p, _TIME_KEY):
            return out[:0], times, FALLBACK
        q, us = _iso_time(buf, p + 10, e)
        if q < 0 or q + 2 != e or buf[q] != 34 or buf[q + 1] != 125:     # '"}' and the line's end
            return out[:0], times, FALLBACK
        times[row] = us
        if w > begin and out[w - 1] == 13:      # (the text's CR at its end dropped, as the column drops it)
            w -= 1
        if w > begin and out[w - 1] == 13:      # (a payload still ending in CR: ``_payload_bytes`` refuses it)
            return out[:0], times, FALLBACK
        out[w] = 10
        w += 1
    return out[:w], times, OK


_MONTH_NAMES = np.frombuffer(b"JanFebMarAprMayJunJulAugSepOctNovDec", np.uint8)


@njit(nogil=True)
def yearless_cut(buf, starts, ends, pri):
    """Per line [starts[i], ends[i]) of ``buf``: where its payload starts behind a year-less prefix
    (``columnar.YEARLESS``: journald's ``short``, or with ``pri`` RFC 3164's ``<PRI>``), and its time's fields
    as the pattern reads them (rows: month 1-12, 0 where the prefix does not match; day; hours; minutes;
    seconds; microseconds): the year is the file's (``columnar.yearless_times``); and OK, or FALLBACK where a
    payload ends in CR."""
    n = len(starts)
    pstarts = np.empty(n, np.int64)
    fields = np.zeros((6, n), np.int64)
    for row in range(n):
        s = starts[row]
        e = ends[row]
        pstarts[row] = s
        p = s
        if pri:                                 # <\d{1,3}>
            if p >= e or buf[p] != 60:
                continue
            q = p + 1
            while q < e and q - p <= 3 and _digit(buf[q]):
                q += 1
            if q == p + 1 or q >= e or buf[q] != 62:
                continue
            p = q + 1
        if p + 15 > e:
            continue
        mon = 0
        for k in range(12):
            if buf[p] == _MONTH_NAMES[3 * k] and buf[p + 1] == _MONTH_NAMES[3 * k + 1] \
                    and buf[p + 2] == _MONTH_NAMES[3 * k + 2]:
                mon = k + 1
        if mon == 0 or buf[p + 3] != 32:        # the month, then ' {1,2}'
            continue
        q = p + 4
        if buf[q] == 32:
            q += 1
        d = q                                   # \d{1,2} and a space
        while q < e and q - d < 2 and _digit(buf[q]):
            q += 1
        if q == d or q >= e or buf[q] != 32:
            continue
        day = _num(buf, d, q - d)
        q += 1                                  # \d{2}:\d{2}:\d{2}
        if q + 8 > e or not (_digits(buf, q, 2) and buf[q + 2] == 58 and _digits(buf, q + 3, 2)
                             and buf[q + 5] == 58 and _digits(buf, q + 6, 2)):
            continue
        hh, mi, ss = _num(buf, q, 2), _num(buf, q + 3, 2), _num(buf, q + 6, 2)
        q, frac = _fraction9(buf, q + 8, e)
        if q < 0 or q >= e or buf[q] != 32:
            continue
        q += 1
        # (?:\S+ )?TAG(?: |$), tried as the regex tries it: with the host first, then without
        h = _field_end(buf, q, e)
        t = _tag_end_at(buf, h, e) if h >= 0 else -1
        if t < 0:
            t = _tag_end_at(buf, q, e)
        if t < 0:
            continue
        pstarts[row] = t
        fields[0, row], fields[1, row], fields[2, row] = mon, day, hh
        fields[3, row], fields[4, row], fields[5, row] = mi, ss, frac
    for row in range(n):
        if ends[row] > pstarts[row] and buf[ends[row] - 1] == 13:
            return pstarts, fields, FALLBACK
    return pstarts, fields, OK
