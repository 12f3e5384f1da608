"""A compiled scanner for the bulk of an SGLang log: batch and access lines, read from the chunk's bytes.

The general parser (``sglang_log``) types lines with polars expressions, about 30 of them per batch line;
a busy log is mostly batch lines, so that cost is the ingest's.  This scanner (numba, compiled once and
cached) walks each line's bytes once and takes only lines it can read with certainty:

* an ASCII line that starts with a plain SGLang prefix ``[YYYY-MM-DD HH:MM:SS( RANKS)*]`` with a valid
  time and no other record's prefix after its first character (no interleaving);
* whose message is a batch line (``(Prefill|Decode) batch( [N])?[.,] ``) or an access line that the
  access regex reads (``LEVEL:  client - "METHOD path HTTP/x" status``);
* or an ASCII access line without a prefix, maybe after a vLLM process's tag, as BARE_ACCESS and the access
  regex both read it (``ACCESS_BARE``: no time; it is dated by the record before it, ``sglang_fast``).

Every value is found exactly as the general parser's regexes find it (the first ``, key: value`` of
each column's keys, leftmost-first like the regex); a value it cannot type with certainty (not a plain
decimal) marks the line, which the general extraction then types.  Anything else is left to the
general parser: kind 0, or ``DATED`` for a line with such a prefix and another message (a dated record start
for the general parser too: where chunks may be read together, ``sglang_fast.ScanGroup``).
"""

from __future__ import annotations

import numpy as np
from numba import njit as _numba_njit

from .scan_layout import (  # noqa: F401
    ACCESS,
    ACCESS_BARE,
    BATCH,
    BATCH_SLOW,
    DATED,
    FLOAT_COLS,
    INT_COLS,
    MAX_RANKS,
    NFLOAT,
    NINT,
    NPEND,
    REST,
)
from .sglang_patterns import ACCESS_LEVELS, BATCH_FLOAT_KEYS, BATCH_HEADS, BATCH_INT_KEYS, PENDING_KEYS

# Whether the compiled code is cached on disk (beside this file, or in NUMBA_CACHE_DIR / the user's cache).
# Where no cache directory is writable, numba refuses ``cache=True``: the functions are then declared
# without it, and ``sglang_fast`` leaves this module unused (compiling afresh in every process, some 10-20 s,
# costs more than the general parser saves).
CACHED = True


def njit(**options):
    """numba's ``njit(cache=True, **options)``, or without the cache where numba has nowhere to write it."""
    def declare(f):
        global CACHED
        if CACHED:
            try:
                return _numba_njit(cache=True, **options)(f)
            except RuntimeError:                # "cannot cache function ...: no locator available"
                CACHED = False
        return _numba_njit(**options)(f)
    return declare

# Key table: (key, column slot).  Slots: ints 0..5 (BATCH_INT_KEYS order), floats 6..11
# (BATCH_FLOAT_KEYS order), graph 12, pending keys 13.. (PENDING_KEYS order).
GRAPH_SLOT = len(INT_COLS) + len(FLOAT_COLS)
PD_SLOT = GRAPH_SLOT + 1
NSLOTS = PD_SLOT + len(PENDING_KEYS)


def _key_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keys: list[tuple[str, int]] = []
    for s, col in enumerate(INT_COLS):
        keys += [(k, s) for k in BATCH_INT_KEYS[col]]
    for s, col in enumerate(FLOAT_COLS):
        keys += [(k, len(INT_COLS) + s) for k in BATCH_FLOAT_KEYS[col]]
    keys += [(f"{d} graph", GRAPH_SLOT) for d in ("cuda", "cpu", "npu", "musa", "xpu", "hpu")]
    keys += [(k, PD_SLOT + s) for s, k in enumerate(PENDING_KEYS)]
    blob = "".join(k for k, _ in keys).encode()
    offs = np.zeros(len(keys) + 1, np.int64)
    for j, (k, _) in enumerate(keys):
        offs[j + 1] = offs[j] + len(k.encode())
    return np.frombuffer(blob, np.uint8).copy(), offs, np.array([s for _, s in keys], np.int64)


KEY_BYTES, KEY_OFFS, KEY_SLOTS = _key_table()


def _key_lut() -> tuple[np.ndarray, np.ndarray]:
    """First key of each (first byte, second byte), and the next key with the same two."""
    lut = np.full((128, 128), -1, np.int64)
    nxt = np.full(len(KEY_SLOTS), -1, np.int64)
    for j in range(len(KEY_SLOTS) - 1, -1, -1):
        a, b = KEY_BYTES[KEY_OFFS[j]], KEY_BYTES[KEY_OFFS[j] + 1]
        assert KEY_OFFS[j + 1] - KEY_OFFS[j] >= 2 and a < 128 and b < 128 and b": " not in KEY_BYTES[KEY_OFFS[j]:KEY_OFFS[j + 1]].tobytes()
        nxt[j], lut[a, b] = lut[a, b], j
    return lut, nxt


KEY_LUT, KEY_NEXT = _key_lut()
_LEVELS = np.frombuffer("|".join(ACCESS_LEVELS).encode(), np.uint8).copy()
_BARE_LEVELS = np.frombuffer(b"INFO|WARNING|ERROR", np.uint8).copy()
_ATTN_CP = np.frombuffer(b"ATTN_CP", np.uint8).copy()
_MOE_DP = np.frombuffer(b"MOE_DP", np.uint8).copy()
_PREFILL, _DECODE = (np.frombuffer(head.encode(), np.uint8).copy() for head in BATCH_HEADS)
_TRUE_FALSE = np.frombuffer(b"True|False", np.uint8).copy()
_HTTP = np.frombuffer(b" HTTP/", np.uint8).copy()
_POW10 = np.array([10.0 ** k for k in range(23)])      # exact doubles


# The byte tests below are branch-free (``&``, ``&=``, no early return from a loop, no chained comparison):
# numba compiled the short-circuit forms into code some three times slower (a timestamp check took 75 ns),
# and the scanner's time per line fell by a quarter without them.  ``_batch`` and ``_access`` are inlined
# into ``_line``: a call per line passing a dozen arrays cost their reference counts (inlining ``_line`` and
# ``_plain`` into ``scan`` as well ran 6 % faster but made the first compile 21 s instead of 12).  Those two are
# compiled without numba's reference counting (``_nrt=False``: they allocate nothing): each call counted a
# reference up and down on every array it was passed, two atomic operations per array and line, which were a
# fifth of a parser worker's CPU (``py-spy --native``: NRT_incref, NRT_decref); the scan of 64 MB of a busy
# log took 0.19 s with them, 0.12 s without (the same output).
@njit(inline="always")
def _digit(c: int) -> bool:
    return (c ^ 48) < 10                        # '0'..'9' are 0x30..0x39: any other byte gives 10 or more


@njit(inline="always")
def _space(c: int) -> bool:
    return (c == 32) | ((c >= 9) & (c <= 13))


@njit(inline="always")
def _digits(buf, p: int, n: int) -> bool:
    ok = True
    for k in range(n):
        ok &= _digit(buf[p + k])
    return ok


@njit(inline="always")
def _num(buf, p: int, n: int) -> int:
    v = 0
    for k in range(n):
        v = v * 10 + (buf[p + k] - 48)
    return v


@njit(inline="always")
def _stamp(buf, p: int, end: int) -> bool:
    """``\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d`` at ``p``."""
    if p + 19 > end:
        return False
    return (_digits(buf, p, 4) and buf[p + 4] == 45 and _digits(buf, p + 5, 2) and buf[p + 7] == 45
            and _digits(buf, p + 8, 2) and buf[p + 10] == 32 and _digits(buf, p + 11, 2) and buf[p + 13] == 58
            and _digits(buf, p + 14, 2) and buf[p + 16] == 58 and _digits(buf, p + 17, 2))


@njit(inline="always")
def _micros(buf, p: int) -> int:
    """The stamp at ``p`` in microseconds since 1970 (naive), or -1 where polars would not read it."""
    y, m, d = _num(buf, p, 4), _num(buf, p + 5, 2), _num(buf, p + 8, 2)
    hh, mi, ss = _num(buf, p + 11, 2), _num(buf, p + 14, 2), _num(buf, p + 17, 2)
    if y < 1 or m < 1 or m > 12 or d < 1 or hh > 23 or mi > 59 or ss > 59:
        return -1
    leap = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
    dim = 29 if (m == 2 and leap) else (28 if m == 2 else (30 if m in (4, 6, 9, 11) else 31))
    if d > dim:
        return -1
    yy = y - 1 if m <= 2 else y                 # days from civil (Howard Hinnant)
    era = (yy if yy >= 0 else yy - 399) // 400
    yoe = yy - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    return (days * 86400 + hh * 3600 + mi * 60 + ss) * 1000000


@njit(inline="always")
def _fraction(buf, p: int, end: int):
    """(where the prefix goes on, microseconds) after the stamp, at ``p``: the fraction of a second a release
    prints with ``SGLANG_LOG_MS=1`` ('.123'), as PREFIX_HEAD reads it: ``[.,]\\d{1,6}`` (its digits to the
    microsecond); (p, 0) without one; (-1, 0) where the prefix cannot go on (no digit, or more than six)."""
    if p >= end or (buf[p] != 46 and buf[p] != 44):
        return p, 0
    q = p + 1
    v = 0
    while q < end and q - p <= 7 and _digit(buf[q]):
        v = v * 10 + (buf[q] - 48)
        q += 1
    n = q - p - 1
    if n == 0 or n > 6 or q >= end:
        return -1, 0
    while n < 6:
        v *= 10
        n += 1
    return q, v


@njit(inline="always")
def _word_char(c: int) -> bool:
    """``\\w`` (ASCII)."""
    return _digit(c) | ((c >= 65) & (c <= 90)) | ((c >= 97) & (c <= 122)) | (c == 95)


@njit(inline="always")
def _tag_char(c: int) -> bool:
    """A character of a word of a Ray tag's name: ``[\\w.:\\[\\]=-]`` (ASCII)."""
    return _word_char(c) | (c == 46) | (c == 58) | (c == 91) | (c == 93) | (c == 61) | (c == 45)


@njit(inline="always")
def _pid_at(buf, p: int, end: int) -> bool:
    return p + 4 < end and buf[p] == 112 and buf[p + 1] == 105 and buf[p + 2] == 100 and buf[p + 3] == 61


@njit(inline="always")
def _actor_end(buf, s: int, end: int) -> int:
    """Where the prefix goes on after the Ray process's tag at ``s``, as PREFIX_HEAD reads one:
    ``\\((?:W(?: W)? )?pid=\\d+(?:, ip=[\\w.:-]+)?\\)\\s*`` (W: ``[\\w.:\\[\\]=-]+``; ASCII, as every line the
    scanner reads); ``s`` where there is none, or where the tag reads otherwise than as its first 'pid=' after
    at most two words says (the general parser then reads the line)."""
    p = s + 1
    words = 0
    while not _pid_at(buf, p, end):
        if words == 2:
            return s
        q = p
        while p < end and _tag_char(buf[p]):
            p += 1
        if p == q or p >= end or buf[p] != 32:
            return s
        p += 1
        words += 1
    p += 4
    q = p
    while p < end and _digit(buf[p]):
        p += 1
    if p == q or p >= end:
        return s
    if buf[p] == 44:                                            # ', ip=' and the address
        if not (p + 5 < end and buf[p + 1] == 32 and buf[p + 2] == 105 and buf[p + 3] == 112 and buf[p + 4] == 61):
            return s
        p += 5
        q = p
        while p < end and _tag_char(buf[p]) and buf[p] != 91 and buf[p] != 93 and buf[p] != 61:   # [\w.:-]
            p += 1
        if p == q or p >= end:
            return s
    if buf[p] != 41:                                            # ')'
        return s
    p += 1
    while p < end and _space(buf[p]):
        p += 1
    return p


@njit(inline="always")
def _bare_tag_end(buf, s: int, end: int) -> int:
    """Where the line goes on after BARE_ACCESS's process tag ``\\(\\w+ pid=\\d+\\) `` at ``s`` (vLLM's
    ``(APIServer pid=N) ``: one word, one space after it), or -1."""
    p = s + 1
    while p < end and _word_char(buf[p]):
        p += 1
    if p == s + 1 or p >= end or buf[p] != 32 or not _pid_at(buf, p + 1, end):
        return -1
    p += 5
    q = p
    while p < end and _digit(buf[p]):
        p += 1
    if p == q or p + 1 >= end or buf[p] != 41 or buf[p + 1] != 32:
        return -1
    return p + 2


@njit(inline="always")
def _word(buf, p: int, end: int, words) -> int:
    """Length of the first of ``words`` ('|'-separated) at ``p``, or 0."""
    a = 0
    nw = len(words)
    while a < nw:
        b = a
        while b < nw and words[b] != 124:
            b += 1
        n = b - a
        if p + n <= end and buf[p] == words[a]:
            ok = True
            for k in range(n):
                ok &= buf[p + k] == words[a + k]
            if ok:
                return n
        a = b + 1
    return 0


@njit(inline="always")
def _rank_name(buf, q: int, end: int) -> int:
    """Length of the rank name (DP|PP|ATTN_CP|MOE_DP|TP|EP) at ``q``, or 0 (each starts with its own letter)."""
    if q + 2 > end:
        return 0
    c = buf[q]
    if buf[q + 1] == 80 and (c == 68 or c == 80 or c == 84 or c == 69):
        return 2
    if c == 65:
        return _word(buf, q, end, _ATTN_CP)
    if c == 77:
        return _word(buf, q, end, _MOE_DP)
    return 0


@njit(inline="always")
def _ranks_end(buf, p: int, end: int) -> int:
    """End of ``(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\\d+)*`` at ``p`` when a ']' follows it, else -1."""
    while p < end and buf[p] == 32:
        n = _rank_name(buf, p + 1, end)
        if n == 0:
            return -1
        q = p + 1 + n
        if q >= end or not _digit(buf[q]):
            return -1
        while q < end and _digit(buf[q]):
            q += 1
        p = q
    return p if p < end and buf[p] == 93 else -1


@njit(inline="always")
def _strip(buf, a: int, b: int):
    """``buf[a:b]`` without its surrounding spaces, as (start, end)."""
    while a < b and _space(buf[a]):
        a += 1
    while b > a and _space(buf[b - 1]):
        b -= 1
    return a, b


@njit(inline="always")
def _int(buf, a: int, b: int):
    """(value, status) of a stripped value: status 1 read, 0 empty (null), 2 not a plain integer."""
    a, b = _strip(buf, a, b)
    if a == b:
        return 0, 0
    neg = buf[a] == 45
    p = a + 1 if neg else a
    if p == b or b - p > 18 or not _digits(buf, p, b - p):
        return 0, 2
    v = _num(buf, p, b - p)
    return (-v if neg else v), 1


@njit(inline="always")
def _float(buf, a: int, b: int):
    """(value, status) as ``_int``: plain decimals of at most 15 digits, read exactly (one correctly
    rounded division of two exact doubles, as polars' parser rounds)."""
    a, b = _strip(buf, a, b)
    if a == b:
        return 0.0, 0
    neg = buf[a] == 45
    p = a + 1 if neg else a
    mant, nd, frac, dot = 0, 0, 0, False
    for q in range(p, b):
        c = buf[q]
        if _digit(c):
            mant = mant * 10 + (c - 48)
            nd += 1
            if dot:
                frac += 1
        elif c == 46 and not dot and q > p and q < b - 1:
            dot = True
        else:
            return 0.0, 2
    if nd == 0 or nd > 15 or frac > 22:
        return 0.0, 2
    v = float(mant) / _POW10[frac]
    return (-v if neg else v), 1


@njit(inline="always")
def _batch(buf, ms: int, end: int, ival, ist, fval, fst, graph, flags, row: int) -> int:
    """Fields of the batch message at ``ms`` into row ``row`` (ival/ist: forward_iter, INT_COLS, PENDING_KEYS;
    fval/fst: FLOAT_COLS; status 1 read, 0 null, 2 for the general extraction; graph -1 null); returns
    BATCH, BATCH_SLOW (a value it cannot type), or REST (not a batch head)."""
    if _word(buf, ms, end, _PREFILL) == 13:
        flags[0, row] = 1
        p = ms + 13
    elif _word(buf, ms, end, _DECODE) == 12:
        p = ms + 12
    else:
        return REST
    status = BATCH
    if p + 1 < end and buf[p] == 32 and buf[p + 1] == 91:      # ' [N]'
        q = p + 2
        while q < end and _digit(buf[q]):
            q += 1
        if q == p + 2 or q >= end or buf[q] != 93:
            return REST
        v, st = _int(buf, p + 2, q)
        ival[0, row], ist[0, row] = v, st
        if st == 2:
            status = BATCH_SLOW
        p = q + 1
    if p + 1 >= end or (buf[p] != 44 and buf[p] != 46) or buf[p + 1] != 32:
        return REST
    head = p + 2
    rse = end                                   # the body without trailing ', ' characters
    while rse > head and (buf[rse - 1] == 44 or buf[rse - 1] == 32):
        rse -= 1
    graph[row] = -1
    done = 0                                    # bit per slot: its value was taken
    c = head
    while c < rse:                              # each field start: after the head, or after ', '
        slot, e = _known_key(buf, c, rse)       # a column's key and the ': ' after it
        n = -1                                  # the next ', ' (found on the way)
        if slot < 0:                            # another key: its first ': ', and any ', ' before it
            e = c
            while e + 1 < rse:
                ch = buf[e]
                if ch == 58:
                    if buf[e + 1] == 32:
                        break
                elif ch == 44 and n < 0 and buf[e + 1] == 32:
                    n = e
                e += 1
        else:
            if slot >= PD_SLOT:
                flags[1, row] = 1               # a PD queue counter: pending_req is their sum
            if not (done >> slot) & 1:
                v0 = e + 2
                v1 = v0
                while v1 < rse and buf[v1] != 44:
                    v1 += 1
                if v1 + 1 < rse and buf[v1 + 1] == 32:
                    n = v1                      # no ',' between ': ' and v1: the next ', ' is there
                st = 0
                if slot == GRAPH_SLOT:
                    if _word(buf, v0, rse, _TRUE_FALSE) > 0:
                        graph[row] = 1 if buf[v0] == 84 else 0
                        done |= 1 << slot
                elif v1 > v0:                   # an empty value: the regex looks further on
                    done |= 1 << slot
                    if slot < NINT:
                        v, st = _int(buf, v0, v1)
                        ival[1 + slot, row], ist[1 + slot, row] = v, st
                    elif slot < GRAPH_SLOT:
                        f, st = _float(buf, v0, v1)
                        fval[slot - NINT, row], fst[slot - NINT, row] = f, st
                    else:
                        v, st = _int(buf, v0, v1)
                        ival[1 + NINT + slot - PD_SLOT, row], ist[1 + NINT + slot - PD_SLOT, row] = v, st
                if st == 2:
                    status = BATCH_SLOW
        if n < 0:                               # the next field starts after the next ', '
            n = e
            while n + 1 < rse and not (buf[n] == 44 and buf[n + 1] == 32):
                n += 1
        if n + 1 >= rse:
            break
        c = n + 2
    return status


@njit(inline="always")
def _known_key(buf, c: int, rse: int):
    """(slot, end) of the column key at ``c`` when ': ' follows it (the key then ends at the first ': ' from
    ``c``, as the regex reads it: no key holds one), else (-1, c).  Keys are found by their first two bytes,
    without a pass over the field to its ': ' first."""
    if c + 1 >= rse or buf[c] >= 128 or buf[c + 1] >= 128:
        return -1, c
    j = KEY_LUT[buf[c], buf[c + 1]]
    while j >= 0:
        ka, kb = KEY_OFFS[j], KEY_OFFS[j + 1]
        e = c + kb - ka
        if e + 1 < rse and buf[e] == 58 and buf[e + 1] == 32:
            same = True
            for k in range(2, kb - ka):
                same &= buf[c + k] == KEY_BYTES[ka + k]
            if same:
                return KEY_SLOTS[j], e
        j = KEY_NEXT[j]
    return -1, c


@njit(inline="always")
def _access(buf, ms: int, end: int, spans, row: int) -> int:
    """The access regex on the message at ``ms`` (greedy path only; anything else is left to it)."""
    n = _word(buf, ms, end, _LEVELS)
    if n == 0:
        return REST
    p = ms + n
    if p >= end or buf[p] != 58:
        return REST
    p += 1
    w = p
    while w < end and _space(buf[w]):
        w += 1
    if w == p:
        return REST
    c = w
    while c < end and not _space(buf[c]):
        c += 1
    if c == w or c + 3 >= end or buf[c] != 32 or buf[c + 1] != 45 or buf[c + 2] != 32 or buf[c + 3] != 34:
        return REST
    m0 = c + 4
    m1 = m0
    while m1 < end and 65 <= buf[m1] <= 90:
        m1 += 1
    if m1 == m0 or m1 >= end or buf[m1] != 32:
        return REST
    u0 = m1 + 1
    u1 = u0
    while u1 < end and not _space(buf[u1]):
        u1 += 1
    if u1 == u0 or _word(buf, u1, end, _HTTP) != 6:
        return REST
    h = u1 + 6
    h1 = h
    while h1 < end and (_digit(buf[h1]) or buf[h1] == 46):
        h1 += 1
    if h1 == h or h1 + 5 > end or buf[h1] != 34 or buf[h1 + 1] != 32 or not _digits(buf, h1 + 2, 3):
        return REST
    spans[0, row], spans[1, row] = w, c
    spans[2, row], spans[3, row] = m0, m1
    spans[4, row], spans[5, row] = u0, u1
    spans[6, row] = _num(buf, h1 + 2, 3)
    return ACCESS



@njit(inline="always")
def _bare(buf, s: int, end: int, spans, row: int) -> int:
    """An access line without a prefix at ``s`` (``ACCESS_BARE``), as the general parser types one: BARE_ACCESS
    (its tag, one of its levels) and the access regex after the tag (``_access``); else REST."""
    p = s
    if p < end and buf[p] == 40:
        p = _bare_tag_end(buf, s, end)
        if p < 0:
            return REST
    n = _word(buf, p, end, _BARE_LEVELS)
    if n == 0 or p + n >= end or buf[p + n] != 58:
        return REST
    return ACCESS_BARE if _access(buf, p, end, spans, row) == ACCESS else REST


@njit(nogil=True)
def scan(buf, starts, ends, brackets, ascii_all):
    """Per line [starts[i], ends[i]) of ``buf`` (the line ending excluded): kind, time (us) and stripped
    rank span of bulk lines, the typed fields of batch lines, the field spans of access lines, and where
    the message starts (``ACCESS_BARE``: spans only).  ``brackets``: the offsets of every '[' in ``buf``;
    ``ascii_all``: ``buf`` is ASCII (no line needs its own test).  The rank spans of bulk lines are also interned: ``rid`` numbers
    each line's rank text in ``uranks`` (spans of its first occurrence; -1 on every line: too many)."""
    n = len(starts)
    # values are read only where their line's kind or status says they were set: left unwritten elsewhere
    # (no pass to zero them, no page touched in vain).  A value per line in a row of its own (column-major:
    # its caller gathers each column of the bulk lines, 7x faster from contiguous memory)
    kind = np.zeros(n, np.int8)
    ts = np.empty(n, np.int64)
    rank = np.empty((2, n), np.int64)
    ival = np.empty((1 + NINT + NPEND, n), np.int64)
    ist = np.zeros((1 + NINT + NPEND, n), np.int8)
    fval = np.empty((NFLOAT, n), np.float64)
    fst = np.zeros((NFLOAT, n), np.int8)
    graph = np.zeros(n, np.int8)
    flags = np.zeros((2, n), np.int8)          # Prefill, PD line
    spans = np.empty((7, n), np.int64)         # client, method, path (start, end), status
    mstart = np.empty(n, np.int64)
    rid = np.full(n, -1, np.int32)
    uranks = np.zeros((MAX_RANKS, 2), np.int64)
    nu = 0
    last = -1
    b = 0
    for row in range(n):
        s0 = s = starts[row]
        e = ends[row]
        if buf[s] == 40:                        # '(': a Ray actor's tag may lead the prefix
            s = _actor_end(buf, s, e)
        while b < len(brackets) and brackets[b] <= s:
            b += 1
        if _plain(buf, s, e, brackets, b, ascii_all):
            k = _line(buf, s, e, row, ts, rank, ival, ist, fval, fst, graph, flags, spans, mstart)
            if k == REST:
                k = _bare(buf, s0, e, spans, row)
            kind[row] = k
            if (k == BATCH or k == ACCESS) and nu >= 0:  # noqa: SIM109 (numba: plain comparisons)
                ra, rb = rank[0, row], rank[1, row]
                if last >= 0 and _same(buf, ra, rb, uranks[last, 0], uranks[last, 1]):
                    rid[row] = last
                    continue
                j = 0
                while j < nu and not _same(buf, ra, rb, uranks[j, 0], uranks[j, 1]):
                    j += 1
                if j == nu:
                    if nu == MAX_RANKS:
                        nu = -1
                        continue
                    uranks[nu, 0], uranks[nu, 1] = ra, rb
                    nu += 1
                rid[row] = last = j
    if nu < 0:
        rid[:] = -1
        nu = 0
    return kind, ts, rank, ival, ist, fval, fst, graph, flags, spans, mstart, rid, uranks[:nu].copy()


@njit(inline="always")
def _same(buf, a: int, b: int, c: int, d: int) -> bool:
    if b - a != d - c:
        return False
    same = True
    for k in range(b - a):
        same &= buf[a + k] == buf[c + k]
    return same


@njit(nogil=True, _nrt=False)
def _plain(buf, s: int, e: int, brackets, b: int, ascii_all: bool) -> bool:
    """An ASCII line with no other record's stamp '[YYYY-MM-DD HH:MM:SS' after its first character
    (``brackets[b:]``: the '[' after its start)."""
    while b < len(brackets) and brackets[b] < e:
        if _stamp(buf, brackets[b] + 1, e):
            return False
        b += 1
    if not ascii_all:
        for p in range(s, e):
            if buf[p] >= 128:
                return False
    return True


@njit(nogil=True, _nrt=False)
def _line(buf, s: int, e: int, row: int, ts, rank, ival, ist, fval, fst, graph, flags, spans, mstart) -> int:
    if e - s < 22 or buf[s] != 91 or not _stamp(buf, s + 1, e):
        return REST
    p, frac = _fraction(buf, s + 20, e)
    if p < 0 or (buf[p] != 93 and buf[p] != 32):
        return REST
    close = _ranks_end(buf, p, e)
    if close < 0:
        return REST
    us = _micros(buf, s + 1)
    if us < 0:
        return REST
    us += frac
    ms = close + 1
    if ms < e and buf[ms] == 32:
        ms += 1
    k = _batch(buf, ms, e, ival, ist, fval, fst, graph, flags, row)
    if k == REST:
        k = _access(buf, ms, e, spans, row)
    if k == REST:
        return DATED
    ts[row] = us
    mstart[row] = ms
    a, b = p, close
    while a < b and buf[a] == 32:
        a += 1
    rank[0, row], rank[1, row] = a, b
    return k


@njit(nogil=True)
def bounds(buf):
    """The lines of ``buf`` in one pass: their starts and ends (the line ending, LF or CRLF, excluded; a last
    line without LF included, a CR at its end excluded too) and the offsets of every '[' (for ``scan``).
    The arrays are allocated for one line and one '[' per 8 bytes and returned cut to what there is (a first
    pass to count them cost as much as this one); text denser in either is counted first."""
    n = len(buf)
    room = n // 8 + 4096
    starts = np.empty(room, np.int64)
    ends = np.empty(room, np.int64)
    brackets = np.empty(room, np.int64)
    k, b = _record_bounds(buf, starts, ends, brackets)
    if k < 0:
        lines = 0
        opening = 0
        for p in range(n):
            c = buf[p]
            if c == 10:
                lines += 1
            elif c == 91:
                opening += 1
        if n and buf[n - 1] != 10:
            lines += 1
        starts = np.empty(lines, np.int64)
        ends = np.empty(lines, np.int64)
        brackets = np.empty(opening, np.int64)
        k, b = _record_bounds(buf, starts, ends, brackets)
    return starts[:k], ends[:k], brackets[:b]


@njit(nogil=True)
def _record_bounds(buf, starts, ends, brackets):
    """``bounds``' lines and '[' recorded into the arrays: how many of each, or (-1, -1) where they do not fit."""
    n = len(buf)
    k = 0
    b = 0
    start = 0
    for p in range(n):
        c = buf[p]
        if c == 10:
            if k == len(starts):
                return -1, -1
            starts[k] = start
            ends[k] = p - 1 if p > start and buf[p - 1] == 13 else p
            k += 1
            start = p + 1
        elif c == 91:
            if b == len(brackets):
                return -1, -1
            brackets[b] = p
            b += 1
    if start < n:
        if k == len(starts):
            return -1, -1
        starts[k] = start
        ends[k] = n - 1 if buf[n - 1] == 13 else n
        k += 1
    return k, b


@njit(nogil=True)
def gather(buf, begin, end):
    """The byte ranges [begin[i], end[i]) of ``buf`` packed one after another, with their offsets: an Arrow
    large_string array's buffers (the text of the lines the general parser reads, the fields of the
    bulk lines)."""
    n = len(begin)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    for i in range(n):
        offsets[i + 1] = offsets[i] + (end[i] - begin[i])
    data = np.empty(offsets[n], np.uint8)
    for i in range(n):
        data[offsets[i]:offsets[i + 1]] = buf[begin[i]:end[i]]
    return offsets, data
