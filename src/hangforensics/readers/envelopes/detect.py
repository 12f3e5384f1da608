"""Detecting a file's envelope stack from the first lines of its content, outermost layer first."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from itertools import pairwise

from ...ranks import RANK_TAG_RE
from .collectors import _Cri, _Journald, _json_obj, _Kubectl, _Syslog
from .layers import EVIDENCE, PAYLOAD_HEAD
from .pastes import (
    _FENCE,
    _INDENT,
    _LINENO,
    _TAG,
    _VLLM_RECORD,
    _VTS,
    TIME_OF_DAY,
    _Compose,
    _Launcher,
    _ProcTag,
    _wrap_continues,
    holds_inline_record,
)
from .unwrap import NONE, EnvelopeStack, Unwrapped, Unwrapper


# -- detection -------------------------------------------------------------------------------------
class _Sample(list):
    """A sample's lines (``_sample``), whose non-blank ones are worked out once: each of the detectors reads
    them, some several times (13 tests of one sample)."""

    nonblank: list[str] | None = None


def _nonblank(lines: list[str]) -> list[str]:
    if isinstance(lines, _Sample):
        if lines.nonblank is None:
            lines.nonblank = [s for s in lines if s.strip()]
        return lines.nonblank
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
    # (most files have no prefix: the test stops once too few lines are left to make the share)
    least, misses, n = need * len(ne), 0, len(ne)
    for s in ne:
        if not rx.match(s):
            misses += 1
            if n - misses < least:
                return False
    return need >= MAJORITY or n - misses >= 3


# A terminal's colour or erase sequence; other control characters on a line mean binary data, where an
# ESC or CR byte is no terminal's (a pickle's opcodes, say).
_TTY_SEQ = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\))")
_OTHER_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f]")


def _detect_ansi(lines: list[str], need: float) -> str | None:
    hits = sum(1 for s in lines if (("\x1b" in s and _TTY_SEQ.search(s)) or "\r" in s.rstrip("\r"))
               and not _OTHER_CONTROL.search(s))
    return "" if hits else None


def _detect_hard_wrap(lines: list[str], need: float) -> str | None:
    ne = _nonblank(lines)
    if len(ne) < 6:
        return None
    w = max(len(s) for s in lines)
    if w < 60:
        return None
    if _wraps_at(lines, w):
        return str(w)
    # the width of the terminal's rows, wider rows being only a paste's own marks on one (an inline backtick
    # or a quote marker the person put before the first row): the commonest width of rows that continue
    widths: dict[int, int] = {}
    for i in range(len(lines) - 1):
        if len(lines[i]) >= 60 and _continues(lines, i):
            widths[len(lines[i])] = widths.get(len(lines[i]), 0) + 1
    for cand, n in sorted(widths.items(), key=lambda kv: -kv[1]):
        if n >= 3 and cand < w <= cand + 2 and _wraps_at(lines, cand):
            return str(cand)
    return _variable_wrap(lines)


VAR_WRAP_MIN = 100      # a row narrower than this is no terminal's (or viewer's) full row


def _variable_wrap(lines: list[str]) -> str | None:
    """A wrap at widths that differ from row to row ('v<W>', W the narrowest): every row that begins nothing
    follows a long row it continues mid-token (no space on either side of the cut: 'WorkNCCL(S' / 'eqNum=...',
    '.../python' / '3.10/site-packages/...'), at least twice.  A row that begins nothing after a short row, or
    at a space, is some other text (a message's own second line, prose): then this is not a wrap."""
    cuts = [i for i in range(len(lines) - 1) if lines[i + 1] and _continues(lines, i)]
    if len(cuts) < 2 or any(len(lines[i]) < VAR_WRAP_MIN or lines[i][-1].isspace() or lines[i + 1][0].isspace()
                            for i in cuts):
        return None
    return "v" + str(min(len(lines[i]) for i in cuts))


def _continues(lines: list[str], i: int) -> bool:
    # a continuation begins unlike a line does: lines of one width each followed by a line that starts as
    # they do ('80004:[2026-...', ' 2026-05-01 13:00:00 [...') are an envelope's records of equal length
    return _wrap_continues(lines[i + 1]) and _shape(lines[i + 1]) != _shape(lines[i])


def _wraps_at(lines: list[str], w: int) -> bool:
    """Rows of width ``w`` (at least 3 different ones) mostly continue on the next row."""
    at_w = [i for i in range(len(lines) - 1) if len(lines[i]) == w]   # the sample's last line may be cut
    if len({lines[i] for i in at_w}) < 3:
        return False
    cont = sum(1 for i in at_w if _continues(lines, i))
    return cont >= 3 and cont >= 0.6 * len(at_w)


_DIGITS = re.compile(r"\d")


def _shape(s: str) -> str:
    """How a line begins, digits alike: '80004:[20' and '80005:[20' have one shape."""
    return _DIGITS.sub("9", s[:8])


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


def _detect_launcher(lines: list[str], need: float) -> str | None:
    """A launcher's '<host> [stderr] ' on the share of rows a prefix needs (its messages' wrapped rows aside),
    with evidence behind it."""
    rows: list[str] = []                  # the rows that begin a message (wrapped rows joined away)
    relayed = False
    for s in _nonblank(lines):
        m = _Launcher.rx.match(s)
        if m is None and relayed and _wrap_continues(s):
            continue
        relayed = m is not None
        rows.append(s)
    ms = [m for m in map(_Launcher.rx.match, rows) if m]
    if len(ms) < 2 or sum(1 for m in ms if EVIDENCE.match(m.string, m.end())) < 0.5 * len(ms):
        return None
    return "" if _share(rows, _Launcher.rx, need) else None


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


# A viewer may show another layer's lines: a compose service prefix between its column and the record.
_INNER_PREFIX = re.compile(r"[\w.-]{1,80} *\| ?", re.ASCII)


def _record_at(s: str, pos: int) -> bool:
    """Whether a payload record head starts at ``pos``, directly or behind a compose prefix."""
    if _HEAD_RX.match(s, pos):
        return True
    m = _INNER_PREFIX.match(s, pos)
    return m is not None and _HEAD_RX.match(s, m.end()) is not None


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
        if _record_at(m.string, m.end()):
            heads += 1
            seps[m.group(4)] = seps.get(m.group(4), 0) + 1
    # the payload behind the column has its own record heads (SGLang, glog, vLLM): else the 'column'
    # is the payload's own time (a '2026-05-24 03:44:45 INFO ...' log keeps it)
    if heads < 2 or heads < 0.3 * len(ms) or not seps:
        return None
    return max(seps, key=lambda k: seps[k])


def _detect_proc_tag(lines: list[str], need: float) -> str | None:
    """A process tag on most lines, before lines that are not mostly vLLM records (a vLLM log reads its
    own tags: it is left as it is)."""
    ne = _nonblank(lines)
    ms = [m for m in map(_ProcTag.rx.match, ne) if m]
    if len(ms) < 2 or len(ms) < max(need, 0.5) * len(ne):
        return None
    if sum(1 for m in ms if _VLLM_RECORD.match(m.string, m.end())) >= 0.5 * len(ms):
        return None
    return ""


# what an indented block of evidence holds: record heads, dump headers, traceback heads
_INDENTED_HEAD = re.compile(PAYLOAD_HEAD + r"|Thread (?:0x[0-9a-fA-F]+|\d+) |Process \d+: |Traceback \(|"
                            r"Fatal Python error|Current thread 0x", re.ASCII)


def _detect_indent(lines: list[str], need: float) -> str | None:
    """Whitespace every non-blank line begins with (at least two columns), with evidence behind it."""
    ne = _nonblank(lines)
    if len(ne) < 2:
        return None
    ms = [m.group(1) for m in map(_INDENT.match, ne) if m]
    if len(ms) < len(ne):
        return None
    ws = min(ms, key=len)
    if len(ws) < 2 or any(not m.startswith(ws) for m in ms):
        return None
    heads = sum(1 for s in ne if _INDENTED_HEAD.match(s, len(ws)))
    if heads < 2 or heads < 0.3 * len(ne):
        return None
    return ws.replace("\t", "\\t").replace(" ", "s")


_TIME_OF_DAY = re.compile("^" + TIME_OF_DAY, re.ASCII)


def _detect_time_of_day(lines: list[str], need: float) -> str | None:
    """SGLang's 2024 head with the time of day alone, on a share of the lines (its access lines, tracebacks
    and dumps have none), two of them at least with what only SGLang prints: a rank in the head, a batch line."""
    ne = _nonblank(lines)
    ms = [m for s in ne if (m := _TIME_OF_DAY.match(s))]
    sglang = sum(1 for m in ms if RANK_TAG_RE.search(m.group(4))
                 or m.string.startswith(("Prefill batch", "Decode batch"), m.end()))
    if len(ms) < 2 or len(ms) < 0.3 * len(ne) or sglang < 2:
        return None
    return ""


# Tried in this order at each level, outermost envelope first.
def _detect_inline_records(lines: list[str], need: float) -> str | None:
    """A vLLM record inside a line of the sample (quoted in prose, glued after another): one is enough."""
    return "" if any(holds_inline_record(s) for s in _nonblank(lines)) else None


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
    ("launcher", _detect_launcher),
    ("viewer_ts", _detect_viewer_ts),
    ("proc_tag", _detect_proc_tag),
    ("indent", _detect_indent),
    ("time_of_day", _detect_time_of_day),
    ("inline_records", _detect_inline_records),
]
MAX_LAYERS = 4
SAMPLE_LINES = 200


def _sample(lines: list[str]) -> _Sample:
    out = _Sample()
    seen = 0
    for s in lines:
        out.append(s)
        seen += bool(s.strip())
        if seen >= SAMPLE_LINES:
            break
    return out


def _plain_records(lines: list[str]) -> bool:
    """Every non-blank line of the sample begins a payload record, and none holds an escape or a CR: no
    layer can be around it (a shortcut for the commonest file, a plain log; a prefix, a quote, a fence
    or a wrapped line's continuation would not begin a record)."""
    head = _HEAD_RX.match
    return bool(lines) and all(head(s) and "\x1b" not in s and "\r" not in s and not _foreign_tag(s)
                               for s in lines if s.strip())


_TAG_READERS = re.compile(r"\s*(?:\[\d{4}-\d\d-\d\d |(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d )", re.ASCII)


def _foreign_tag(s: str) -> bool:
    """A process tag before a record whose parser does not read one (SGLang and vLLM records do; torch
    glog behind a Ray actor's tag does not): the tag is an envelope there."""
    m = _ProcTag.rx.match(s)
    return m is not None and _TAG_READERS.match(s, m.end()) is None


def detect(sample_lines: list[str]) -> EnvelopeStack:
    """The envelope of a file, from its first lines (split on ``\\n`` only, CR of CRLF removed).

    Layer by layer, outermost first: a layer must be on a clear majority of the sample's non-blank
    lines (markdown and ansi by their own marks); the sample is stripped of it and looked at again,
    up to MAX_LAYERS deep.  A plain log gives ``none``.
    """
    try:
        cur = _sample(list(sample_lines))
        if _plain_records(cur):
            return NONE
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


def unwrap_all(lines: list[str], stack: EnvelopeStack | None = None,
               year_hint: int | date | None = None) -> tuple[EnvelopeStack, Unwrapped]:
    """Detect (unless given) and strip the envelope of a whole file's lines in one go."""
    stack = detect(lines) if stack is None else stack
    return stack, Unwrapper(stack, year_hint).feed(lines, 1, final=True)
