"""Envelopes a terminal or a person added: docker compose prefixes, ANSI escapes and ``\\r`` redraws, Markdown
pastes (quotes, fences, details tags, prose), a viewer's line numbers and timestamp column, hard wrapping."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

from ...parsers.vllm import vllm_patterns as vllm
from ...parsers.vllm.vllm_patterns import unnamed
from ...ranks import RANK_TAGS
from .layers import EVIDENCE, LINE_START, PAYLOAD_HEAD, _Items, _Layer, _PrefixLayer
from .times import _ZONE, _iso_ts

if TYPE_CHECKING:
    from .unwrap import Unwrapper


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
            if self.fenced and self.fence is None and \
                    (not (EVIDENCE.match(s) or holds_inline_record(s)) if s.strip() else not quoted):
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


# A viewer's column at any precision: minutes ('2025-02-18 12:54'), seconds, fractions; a zone or none.
_VTS = r"[ \t]?(\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?)(?:[.,](\d{1,9}))?" + _ZONE + "?"


class _ViewerTs(_PrefixLayer):
    """A viewer's own timestamp column before each line: its time is kept as the collected time."""

    name = "viewer_ts"

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.sep = param or " "
        self.rx = re.compile("^" + _VTS + "(?:" + re.escape(self.sep) + "|[ \t]*$)", re.ASCII)

    def prefix(self) -> str:
        return r"[ \t]?\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?(?:Z|z|[+-]\d\d:?\d\d)?" + re.escape(self.sep)

    def ts_of(self, m: re.Match[str]) -> datetime | None:
        return _iso_ts(*m.group(1, 2, 3))


# SGLang's 2024 releases printed the time of day alone: '[04:40:55 TP0] Decode batch. #running-req: 2, ...'.
TIME_OF_DAY = rf"\[(\d\d):(\d\d):(\d\d)((?:[.,]\d{{1,6}})?(?: (?:{RANK_TAGS})\d+)*\] )"
# a step back larger than this is the next day (lines out of order by less are not)
_NEW_DAY_S = 3600
_HALF_DAY_S = 12 * 3600


class _TimeOfDay(_Layer):
    """SGLang lines whose head has the time of day and no date: the date is put in (the payload is the head
    of a dated SGLang line).  Behind a collector that times its lines, the date of the line's collected time
    (the day that puts the time of day nearest it: the two clocks may be hours apart, not half a day); else
    from the file's modification time: a line later in the day than it is of the day before, and a step back
    by more than an hour from the last line is the next day."""

    name = "time_of_day"

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.rx = re.compile("^" + TIME_OF_DAY, re.ASCII)
        self.day: date | None = None
        self.last = 0

    def head(self) -> str:
        return TIME_OF_DAY

    def _first_day(self, secs: int) -> date:
        hint = self.u.years.hint
        if isinstance(hint, datetime):
            at = hint.hour * 3600 + hint.minute * 60 + hint.second
            return hint.date() - timedelta(days=1) if secs > at + 60 else hint.date()
        if isinstance(hint, date):
            return hint
        return date(hint if isinstance(hint, int) else 1970, 1, 1)

    def run(self, it: _Items, final: bool) -> _Items:
        match = self.rx.match
        txt: list[str] = []
        for s, t in zip(it.txt, it.ts, strict=True):
            m = match(s)
            if m is None:
                txt.append(s)
                continue
            secs = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
            if t is not None:
                # (seconds from the collected time to the line's time of day on the collected day)
                apart = secs - (t.hour * 3600 + t.minute * 60 + t.second)
                self.day = t.date() + timedelta(days=-1 if apart > _HALF_DAY_S else 1 if apart < -_HALF_DAY_S else 0)
            elif self.day is None:
                self.day = self._first_day(secs)
            elif secs < self.last - _NEW_DAY_S:
                self.day += timedelta(days=1)
            self.last = secs
            txt.append(f"[{self.day.isoformat()} {s[1:]}")
        return _Items(txt, it.ln, it.sp, it.ts)


def _wrap_continues(s: str) -> bool:
    """Whether a line can be the continuation of one a terminal wrapped."""
    return bool(s) and LINE_START.match(s) is None


class _HardWrap(_Layer):
    """Terminal hard wrapping at a fixed width W: a line of exactly W characters continues on the next
    line unless that one begins something (a record, a prefix, an indented dump line).

    ``v<W>``: a wrap at widths that differ from row to row (W the narrowest seen), always mid-token: a line of
    at least W characters not ending in a space continues on the next line when that one begins nothing and
    not with a space."""

    name = "hard_wrap"

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.var = param.startswith("v")
        try:
            self.width = int(param[1:] if self.var else param)
        except ValueError:
            self.width = 0
        self.held: list | None = None               # [parts, ln, span, ts, physical lines]

    def _wraps(self, s: str) -> bool:
        """Whether row ``s`` may continue on the next one."""
        if self.var:
            return len(s) >= self.width and not s[-1].isspace()
        return len(s) == self.width

    def _continues(self, s: str) -> bool:
        return _wrap_continues(s) and not (self.var and s[0].isspace())

    def run(self, it: _Items, final: bool) -> _Items:
        w = self.width
        if w <= 0:                                  # no width, no wrap
            return it
        out = _Items()
        held = self.held
        emit = self._emit
        wraps, continues = self._wraps, self._continues
        for s, ln, sp, t in it:
            if held is not None:
                if continues(s):
                    held[0].append(s)
                    held[2] += sp
                    held[4].extend(self.u.phys(ln, sp))
                    if wraps(s):
                        continue
                    emit(out, held)
                    held = None
                    continue
                emit(out, held)
                held = None
            if wraps(s):
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


# -- a multi-node launcher's '<host> [stderr] ' before every line it relays ---------------------------------
class _Launcher(_Layer):
    """A launcher that relays each node's output with the node and the stream before it ('dinov2-giant-nodes.
    cn-d004 [stderr] [rank14]:[E909 ...'), on a message's first row only: a row without it that begins
    nothing (``_wrap_continues``) right after a relayed row is the rest of that message, wrapped, and is
    joined to it as it was printed (no character added)."""

    name = "launcher"
    rx = re.compile(r"^[\w.-]{1,80} \[(?:stderr|stdout)\](?: |$)", re.ASCII)

    def prefix(self) -> str:
        return r"[\w.-]+ \[(?:stderr|stdout)\] ?"

    def run(self, it: _Items, final: bool) -> _Items:
        out = _Items()
        match = self.rx.match
        relayed = False                              # the last item is a relayed row (it may continue)
        for s, ln, sp, t in it:
            m = match(s)
            if m is not None:
                out.add(s[m.end():], ln, sp, t)
                relayed = True
            elif relayed and _wrap_continues(s):
                k = len(out.txt) - 1
                first = out.ln[k]
                self.u.register(first, self.u.phys(first, out.sp[k]) + self.u.phys(ln, sp))
                out.txt[k] += s
                out.sp[k] += sp
            else:
                out.add(s, ln, sp, t)
                relayed = False
        return out


# -- a process tag before every line (Ray actors, multiprocessing workers) ----------------------------
# '(RayWorkerWrapper pid=4009) ', '(RayWorkerWrapper pid=270291, ip=10.175.94.190) ',
# '(MegatronPolicyWorker[rank=8] pid=3294808, ip=10.109.19.209) ', '(pid=4121) ', also inside the remnants
# of the colour escapes around it whose ESC byte a paste lost, or turned into a space ('[36m(RayWorkerWrapper
# pid=4009) ', ' [36m(RayWorkerVllm pid=5085) [0m ').
PROC_TAG = (r"(?: ?\x1b?\[\d{1,3}(?:;\d{1,3})*m)?\((?:[\w.:\[\]=-]+(?: [\w.:\[\]=-]+)? )?pid=\d+"
            r"(?:, ip=[\w.:-]+)?\)(?: ?\x1b?\[0m)?(?: |$)")
# vLLM reads its own tag (a worker's tag is its rank label): a vLLM record keeps it.
_VLLM_RECORD = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d")
_COLOUR_REMNANT = re.compile(r" ?\x1b?\[\d{1,3}(?:;\d{1,3})*m")


class _ProcTag(_Layer):
    """A process tag Ray (or a launcher) puts before every line a worker prints, whatever the line is:
    torch glog, a faulthandler dump, a traceback.  Stripped, except before a vLLM record, whose parser
    takes the worker's rank from it (only a lost colour escape's remnant goes there)."""

    name = "proc_tag"
    rx = re.compile("^" + PROC_TAG, re.ASCII)

    def prefix(self) -> str:
        return PROC_TAG.replace("(?: |$)", " ?")

    def run(self, it: _Items, final: bool) -> _Items:
        match, vllm = self.rx.match, _VLLM_RECORD.match
        txt: list[str] = []
        for s in it.txt:
            m = match(s)
            if m is None:
                txt.append(s)
            elif vllm(s, m.end()):           # the tag without its colour remnants, then the record
                tag = s[:m.end()]
                txt.append(_COLOUR_REMNANT.sub("", tag).strip() + " " + s[m.end():]
                           if _COLOUR_REMNANT.search(tag) else s)
            else:
                txt.append(s[m.end():])
        return _Items(txt, it.ln, it.sp, it.ts)


# -- a block indented as a whole (a Markdown indented code block, a paste indented by its author) ------
_INDENT = re.compile(r"^([ \t]+)")


class _Indent(_Layer):
    """Every line of the evidence indented by the same whitespace: that much is removed where present
    (a dump's own deeper indentation stays)."""

    name = "indent"

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.ws = param.replace("\\t", "\t").replace("s", " ")

    def prefix(self) -> str:
        return re.escape(self.ws)

    def run(self, it: _Items, final: bool) -> _Items:
        ws, n = self.ws, len(self.ws)
        if not ws:
            return it
        return _Items([s[n:] if s.startswith(ws) else s for s in it.txt], it.ln, it.sp, it.ts)


# -- vLLM records inside a line: quoted in prose or inline code, or glued into one paragraph -------------
# A vLLM record's head (its process tag with it), or a stats line's message pasted without one.
_INLINE_HEAD = re.compile(rf"{unnamed(f'(?:{vllm.PROC_TAG})?{vllm.RECORD_HEAD}')}|(?P<bare>{vllm.STATS_MESSAGE})",
                          re.ASCII)
_LEVEL_HINTS = ("INFO ", "WARNING ", "ERROR ", "DEBUG ", "CRITICAL ")
_INLINE_HINTS = (*_LEVEL_HINTS, "Avg prompt throughput: ")
# what closed the quote or the inline code around a record ('...0.0%".', '...0.0%`')
_CLOSING = re.compile(r"""\s*["'`]+[.,;:)]*\s*$""")
# a line that begins with a record of its own (a payload head; torchrun's glog; vLLM's under Python logging's format)
_OWN_HEAD = re.compile(rf"\s*(?:{PAYLOAD_HEAD}|[IWEF]\d{{4}} \d\d:|{unnamed(vllm.PYLOG_HEAD)})", re.ASCII)


def inline_heads(s: str) -> list[int]:
    """Where the vLLM records inside line ``s`` begin; [] without one.  A stats message without a head begins
    one only where no record began before it on the line (else it is that record's message)."""
    if not any(h in s for h in _INLINE_HINTS):
        return []
    starts: list[int] = []
    own = None
    for m in _INLINE_HEAD.finditer(s):
        if m.group("bare") is not None:
            if own is None:
                own = _OWN_HEAD.match(s) is not None
            if starts or own:
                continue
        starts.append(m.start())
    return starts


def holds_inline_record(s: str) -> bool:
    """Whether line ``s`` holds a vLLM record that is not its own start: quoted after prose, or a second one
    glued after the first."""
    if ".py:" not in s and "Avg prompt" not in s:       # (a vLLM head names its source file: most lines go here)
        return False
    own = _OWN_HEAD.match(s)
    if own is not None:         # (a log's every line: only another head after its own can make one; a cheap test)
        rest = s[own.end():]
        if not any(h in rest for h in _LEVEL_HINTS):
            return False
    starts = inline_heads(s)
    return bool(starts) and (starts[0] > 0 or len(starts) > 1)


class _InlineRecords(_Layer):
    """vLLM records inside a line: quoted in a reporter's prose ('stats show that "INFO 10-27 20:44:35
    llm_engine.py:624] Avg prompt throughput: ..."'), in inline code, a stats message pasted without its head,
    or several glued into one paragraph (a paste that lost its newlines).  Each record becomes a payload line
    of its own (the further ones from the same physical line, span 0); the prose before the first, and the
    quote or code mark closing one, are the envelope's.  A line that begins with a record of its own keeps it."""

    name = "inline_records"

    def run(self, it: _Items, final: bool) -> _Items:
        out = _Items()
        for s, ln, sp, t in it:
            starts = inline_heads(s)
            if not starts or (starts == [0]):
                out.add(s, ln, sp, t)
                continue
            if starts[0] > 0 and _OWN_HEAD.match(s):
                starts = [0, *starts]
            for k, a in enumerate(starts):
                piece = s[a:starts[k + 1]] if k + 1 < len(starts) else s[a:]
                out.add(_CLOSING.sub("", piece.rstrip()) if k or a else piece.rstrip(), ln, sp if k == 0 else 0, t)
        return out
