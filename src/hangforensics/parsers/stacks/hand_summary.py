"""What reporters write by hand (issue 26): stacks abbreviated to a few function names per rank, Markdown
tables of ranks or of metrics over time, a timeline made from their own logs; and ``/metrics`` excerpts
(Prometheus text) pasted beside them.

Hand-abbreviated stacks are told by a **rank label** and **function-like names**, never by prose alone::

    TP0: event_loop_overlap -> _all_reduce_attn_groups -> all_reduce     (inline; '->' caller to callee)
    rank 2: all_reduce <- _all_reduce_attn_groups                        ('<-': innermost first)
    TP1-3:                                                               (a label line, then one frame a line,
        broadcast (torch/distributed/distributed_c10d.py:2974)            innermost first as py-spy prints them)
        broadcast_pyobj (utils/common.py:1437)
    TP0 stuck forever in:                                                (prose ending in ':' naming one rank
    ```                                                                   label, then a fenced or indented block
    all_reduce (torch/distributed/distributed_c10d.py:3075)               of frames)
    ```
    | rank | frame |                                                     (a table: a column of rank labels and a
    | TP0  | all_reduce <- _all_reduce_attn_groups |                      column of frames)

A label is ``TPn`` / ``DPn TPm`` / ``PPn`` / ``EPn`` / ``rank n`` / ``ranks n-m`` (a range expands: ``TP1-3`` is
TP1, TP2, TP3; one process each).  A name is an identifier, dotted or ``::`` name, with an optional ``()`` and
an optional ``(file:line)``; a rank's stack needs one name that cannot be a plain word (an underscore, a dot,
``::``, ``()``, a file, camelCase or a collective's name) so ``rank 2: OK`` and ``TP0: the server hangs`` are
not stacks.  The order is innermost first (py-spy's), unless arrows say otherwise or only the last frame is a
collective (a list written outermost first).

Tables and timelines become :class:`Row` records (events ``reporter_table`` / ``reporter_timeline``), Prometheus
samples ``metrics_sample`` rows: facts for the engine's summary, never a rule's input (a person's table is a
claim, not a capture).  Everything else (prose, fences) is left unconsumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import product
from math import prod
from typing import Any

FORMAT = "hand_summary"

# -- rank labels ------------------------------------------------------------------------------------
_TAG = r"(?:DP|PP|TP|EP|CP)"
_ONE = rf"{_TAG} ?\d+(?: ?[-–] ?(?:{_TAG})?\d+)?"
_TORCH = r"[Rr]anks? ?\d+(?: ?[-–] ?\d+)?"
LABEL = rf"(?:{_ONE}(?:[ _]{_ONE})*|{_TORCH})"
GROUP = rf"{LABEL}(?: ?(?:,|/|&|and) ?{LABEL})*"
_LABEL_PART = re.compile(rf"(?P<tag>{_TAG}|[Rr]anks?) ?(?P<a>\d+)(?: ?[-–] ?(?:{_TAG})?(?P<b>\d+))?")
# a label as a word of prose (not part of a longer word: 'STP0', 'TP0x', a path 'tp0/')
_LABEL_WORD = re.compile(rf"(?<![\w/.-])(?P<g>{GROUP})(?![\w/]|-\d)")
MAX_RANGE = 1024

# -- frames -----------------------------------------------------------------------------------------
_NAME = r"(?:<module>|<lambda>|[A-Za-z_]\w*(?:(?:\.|::)(?:[A-Za-z_~]\w*|<locals>|<lambda>|<module>|<listcomp>))*)"
FRAME_RE = re.compile(rf"^(?P<name>{_NAME})(?P<call>\(\))?"
                      r"(?:\s*[(\[](?P<file>[^()\[\]\s]+?)(?::(?P<line>\d+))?[)\]]|\s+at\s+(?P<file2>\S+?):(?P<line2>\d+))?$")
ARROW_RE = re.compile(r"\s*(->|→|⟶|=>|<-|←|⟵)\s*")
INWARD = {"<-", "←", "⟵"}           # 'a <- b': a is called by b (innermost first)
BULLET_RE = re.compile(r"^(?:[-*+]|\d{1,2}[.)])\s+")
# Collectives and waits a reporter names by their bare name (a lone 'broadcast' is a function, not a word).
COLLECTIVE_NAMES = {
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "barrier", "monitored_barrier", "send", "recv", "isend", "irecv", "all_to_all", "all_to_all_single", "gather",
    "scatter", "reduce", "broadcast_object_list", "all_gather_object", "broadcast_pyobj", "ncclAllReduce",
    "ncclBroadcast", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv", "ncclCommWindowRegister",
    "_register_segments_for_comm", "_all_gather_base", "_reduce_scatter_base", "allreduce", "allgather",
}
OUTERMOST = {"<module>", "main", "run", "_bootstrap", "spawn_main", "_main", "run_scheduler_process"}

# -- tables, timelines, Prometheus text -------------------------------------------------------------
_CELL_SEP = re.compile(r"(?<!\\)\|")
_RULE_CELL = re.compile(r"^:?-{3,}:?$")
NUMBER_RE = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\s*(?:%|[kKMG]|tok/s|tokens/s|/s|s|ms|GiB|GB|MB)?$")
TIME_RE = re.compile(r"^(?:\d{4}-\d\d-\d\d[ T])?\d{1,2}:\d\d(?::\d\d(?:\.\d+)?)?$|^[Tt]?\s?[+]\s?\d+\s?(?:s|min|m|h)$")
METRIC_HEAD = re.compile(r"running|waiting|pending|queue|swapped|throughput|tok(?:en)?s?\s*/\s*s|tok/s|tps|"
                         r"kv|cache|usage|requests?|reqs?|latency|ttft|tpot|util", re.I)
TIMELINE_RE = re.compile(r"^(?P<time>(?:\d{4}-\d\d-\d\d[ T])?\d{1,2}:\d\d:\d\d(?:[.,]\d+)?)\s+(?P<text>\S.*)$")
ELLIPSIS_RE = re.compile(r"^(?:\.{3}|…)(?:\s*\S.*?)?\s*(?:\.{3}|…)?$")
PROM_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*(?<!:))(?:\{(?P<labels>[^{}]*)\})?\s+"
                         r"(?P<value>[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|NaN|[+-]?Inf))"
                         r"(?:\s+(?P<ts>-?\d+))?$")
PROM_META = re.compile(r"^# (?:HELP|TYPE|UNIT|EOF)\b")
PROM_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


@dataclass
class Frame:
    function: str
    file: str | None = None
    line: int | None = None

    @property
    def native(self) -> bool:
        return "::" in self.function


@dataclass
class HandStack:
    """One rank's stack as a person wrote it (innermost first)."""

    rank: str                      # 'TP1' (a range is already expanded)
    label: str                     # the label as written: 'TP1-3'
    frames: list[Frame]
    line: int                      # offset of the line naming the rank
    line_end: int                  # offset of the stack's last line
    form: str                      # inline / block / table


@dataclass
class Row:
    """A record a reporter made: an events row of ``kind`` (reporter_table, reporter_timeline, metrics_sample)."""

    kind: str
    line: int
    message: str
    attrs: dict[str, Any] = field(default_factory=dict)
    line_end: int | None = None


@dataclass
class Reading:
    stacks: list[HandStack] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    consumed: set[int] = field(default_factory=set)


# -- labels -----------------------------------------------------------------------------------------
def expand_label(text: str) -> list[str]:
    """'TP1-3' -> ['TP1', 'TP2', 'TP3']; 'DP0 TP1' -> ['DP0 TP1']; 'ranks 0-2' -> ['rank0', 'rank1', 'rank2'];
    'TP0, TP2' -> ['TP0', 'TP2']; [] when a range is backwards or absurdly long."""
    out: list[str] = []
    for one in re.split(r" ?(?:,|/|&|\band\b) ?", text.strip()):
        parts = []
        for m in _LABEL_PART.finditer(one):
            tag = m.group("tag")
            tag = "rank" if tag.lower().startswith("rank") else tag.upper()
            a = int(m.group("a"))
            b = int(m.group("b")) if m.group("b") is not None else a
            if b < a or b - a > MAX_RANGE:
                return []
            parts.append([f"{tag}{n}" for n in range(a, b + 1)])
        if not parts or len(out) + prod(len(p) for p in parts) > MAX_RANGE:
            return []
        out += [" ".join(p) for p in product(*parts)]
    return list(dict.fromkeys(out))


def _clean(text: str) -> str:
    """A line without quote markers, list bullets, emphasis and inline backticks around the whole."""
    s = text.strip()
    while s.startswith(">"):
        s = s[1:].strip()
    s = BULLET_RE.sub("", s)
    return s.replace("**", "").strip() if "**" in s else s


def _strip_ticks(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == "`" and s[-1] == "`":
        s = s[1:-1].strip()
    return s.rstrip(",;").strip()


# -- frames -----------------------------------------------------------------------------------------
def parse_frame(text: str) -> Frame | None:
    """One function-like name (with an optional '()' and '(file:line)'), else None."""
    s = _strip_ticks(text)
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1]
    m = FRAME_RE.match(s)
    if m is None:
        return None
    file = m.group("file") or m.group("file2")
    line = m.group("line") or m.group("line2")
    return Frame(m.group("name"), file, int(line) if line else None)


def is_strong(fr: Frame) -> bool:
    """A name no plain word is: an underscore, a dot, '::', '<module>', camelCase, a file, or a collective's."""
    n = fr.function
    return bool(fr.file or re.search(r"[_.]|::|^<", n) or re.match(r"^[a-z]+[A-Z]\w*$", n) or n in COLLECTIVE_NAMES)


def _leaf(fn: str) -> str:
    return re.split(r"\.|::", fn)[-1]


def _is_collective(fr: Frame) -> bool:
    return _leaf(fr.function) in COLLECTIVE_NAMES


def parse_chain(text: str) -> list[Frame] | None:
    """'a -> b -> c' (caller to callee) or 'c <- b <- a' as frames innermost first; a single name as one frame;
    None unless every part is a name, one of them strong, and the arrows agree."""
    s = _strip_ticks(text)
    parts = ARROW_RE.split(s)
    names, arrows = parts[0::2], parts[1::2]
    if len({a in INWARD for a in arrows}) > 1:
        return None
    frames = [parse_frame(n) for n in names]
    if not frames or any(f is None for f in frames):
        return None
    out: list[Frame] = [f for f in frames if f is not None]
    if not any(is_strong(f) for f in out):
        return None
    if arrows and arrows[0] not in INWARD:
        out.reverse()                               # caller -> callee: the callee is the innermost
    if len(out) > 1 and _is_collective(out[-1]) and not _is_collective(out[0]):
        out.reverse()                               # the collective a rank waits in is its innermost frame
    return out


def _orient_block(frames: list[Frame]) -> list[Frame]:
    """One name a line: innermost first (py-spy, faulthandler), unless the list plainly runs outermost first."""
    if len(frames) > 1 and ((_is_collective(frames[-1]) and not _is_collective(frames[0]))
                            or (frames[0].function in OUTERMOST and frames[-1].function not in OUTERMOST)):
        return frames[::-1]
    return frames


# -- the reader -------------------------------------------------------------------------------------
@dataclass
class _Line:
    i: int
    text: str           # quote markers removed
    fence: bool         # a fence marker line
    inside: int         # id of the fenced block the line is in (0: outside any)
    indent: int


def _lines(lines: list[str]) -> list[_Line]:
    out: list[_Line] = []
    block, current = 0, 0
    for i, raw in enumerate(lines):
        s = raw.rstrip()
        while s.lstrip().startswith(">"):
            s = s.lstrip()[1:]
            s = s[1:] if s.startswith(" ") else s
        f = _FENCE.match(s)
        if f is not None:
            if current:
                current = 0
            else:
                block += 1
                current = block
            out.append(_Line(i, s, True, 0, 0))
            continue
        out.append(_Line(i, s, False, current, len(s) - len(s.lstrip())))
    return out


LABEL_LINE = re.compile(rf"^(?P<g>{GROUP})\s*:\s*(?P<rest>.*)$")


def _label_line(s: str) -> tuple[str, str] | None:
    """(label group, rest) of a line that starts with a rank label and a colon."""
    m = LABEL_LINE.match(_clean(s))
    if m is None or not expand_label(m.group("g")):
        return None
    return m.group("g"), m.group("rest").strip()


def _prose_label(s: str) -> str | None:
    """The one label group a prose line ending in ':' names ('TP0 stuck forever in:'), else None."""
    t = _clean(s).rstrip("*_ ")
    if not t.endswith(":") or len(t) > 300:
        return None
    found = [m.group("g") for m in _LABEL_WORD.finditer(t)]
    if len(found) != 1 or not expand_label(found[0]):
        return None
    return found[0]


def _block(ls: list[_Line], k: int, need_code: bool) -> tuple[list[Frame], int] | None:
    """The frames from ``ls[k]`` on (one name a line, or one chain), up to a blank line, a fence, a label line
    or a line that is no frame; with ``need_code`` only a fenced or indented block counts.  Returns (frames,
    index after the block) or None when no frame starts there."""
    frames: list[Frame] = []
    j = last = k
    chains = singles = 0
    start_inside = ls[k].inside if k < len(ls) else 0
    while j < len(ls):
        ln = ls[j]
        if ln.fence or ln.inside != start_inside:
            break
        t = _clean(ln.text)
        if not t:
            if not start_inside:
                break
            j += 1                                  # a fenced block is read whole: a blank line inside goes on
            continue
        if _label_line(ln.text) is not None:
            break
        if need_code and not ln.inside and ln.indent < 2:
            return None
        if ARROW_RE.search(t):
            chain = parse_chain(t)
            if chain is None:
                return None
            frames += chain
            chains += 1
        else:
            fr = parse_frame(t)
            if fr is None:
                return None
            frames.append(fr)
            singles += 1
        j += 1
        last = j
    if not frames or (chains and (chains > 1 or singles)) or not any(is_strong(f) for f in frames):
        return None                             # (one chain, or one name a line: never both)
    return (frames if chains else _orient_block(frames)), last


def read(lines: list[str]) -> Reading:
    """Hand stacks, tables, timelines and Prometheus samples in ``lines`` (offsets into them)."""
    ls = _lines(lines)
    out = Reading()
    _read_tables(ls, out)
    _read_stacks(ls, out)
    _read_timelines(ls, out)
    _read_prometheus(ls, out)
    return out


def _add_stack(out: Reading, group: str, frames: list[Frame], line: int, end: int, form: str) -> None:
    for rank in expand_label(group):
        out.stacks.append(HandStack(rank, group.strip(), list(frames), line, end, form))


def _read_stacks(ls: list[_Line], out: Reading) -> None:
    k = 0
    while k < len(ls):
        ln = ls[k]
        if ln.fence or ln.i in out.consumed:
            k += 1
            continue
        lab = _label_line(ln.text)
        if lab is not None:
            group, rest = lab
            if rest:
                chain = parse_chain(rest)
                if chain is not None:
                    _add_stack(out, group, chain, ln.i, ln.i, "inline")
                    out.consumed.add(ln.i)
                k += 1
                continue
            # 'TP0:' alone: the block below it (after blank lines or a fence opening)
            end = _take_block(out, ls, k, group, False)
            k = end if end is not None else k + 1
            continue
        group = _prose_label(ln.text) if not ln.inside else None
        end = _take_block(out, ls, k, group, True) if group is not None else None
        k = end if end is not None else k + 1


def _take_block(out: Any, ls: list[_Line], k: int, group: Any, prose: bool) -> int | None:
    """The block of frames below the label on line ``k``, as that group's stack: the index after it, or
    None when no block follows."""
    j = _skip_to_block(ls, k + 1)
    got = _block(ls, j, prose) if j is not None else None
    if got is None:
        return None
    frames, end = got
    _add_stack(out, group, frames, ls[k].i, ls[end - 1].i, "block")
    out.consumed.update(ls[x].i for x in range(j, end))
    out.consumed.add(ls[k].i)
    return end


def _skip_to_block(ls: list[_Line], k: int) -> int | None:
    """The first line of the block a label introduces: past at most one blank line and one fence opening."""
    blanks = fences = 0
    while k < len(ls):
        ln = ls[k]
        if ln.fence:
            if ln.inside or fences:
                return None
            fences += 1
        elif not ln.text.strip():
            blanks += 1
            if blanks > 1:
                return None
        else:
            return k
        k += 1
    return None


# -- tables -----------------------------------------------------------------------------------------
def _cells(s: str) -> list[str] | None:
    t = _clean(s) if not s.strip().startswith("|") else s.strip()
    if not (t.startswith("|") and t.endswith("|")) or len(t) < 3:
        return None
    return [c.strip() for c in _CELL_SEP.split(t[1:-1])]


def _read_tables(ls: list[_Line], out: Reading) -> None:
    k = 0
    while k < len(ls) - 1:
        head = _cells(ls[k].text)
        rule = _cells(ls[k + 1].text)
        if head is None or rule is None or not all(_RULE_CELL.match(c.replace(" ", "")) for c in rule) \
                or len(rule) != len(head):
            k += 1
            continue
        rows: list[tuple[int, list[str]]] = []
        j = k + 2
        while j < len(ls) and (cells := _cells(ls[j].text)) is not None and len(cells) == len(head):
            rows.append((ls[j].i, cells))
            j += 1
        if rows and _table(head, rows, ls[k].i, ls[k + 1].i, out):
            out.consumed.update(ls[x].i for x in range(k, j))
        k = max(j, k + 1)


def _plain(c: str) -> str:
    return _strip_ticks(c.replace("**", "")).strip()


def _table(head: list[str], rows: list[tuple[int, list[str]]], head_line: int, rule_line: int,
           out: Reading) -> bool:
    """Read one table: ranks -> frames (stacks), ranks -> values, or times -> metrics (rows).  False when it is
    none of these (left unconsumed)."""
    cols = list(zip(*[c for _, c in rows], strict=True))
    names = [_plain(h) for h in head]
    rank_col = next((n for n, col in enumerate(cols) if all(expand_label(_plain(c)) and
                                                            re.fullmatch(GROUP, _plain(c)) for c in col)), None)
    if rank_col is not None:
        frame_col = next((n for n, col in enumerate(cols) if n != rank_col and
                          all(parse_chain(_plain(c)) is not None for c in col)), None)
        if frame_col is not None:
            for line, cells in rows:
                chain = parse_chain(_plain(cells[frame_col]))
                assert chain is not None
                _add_stack(out, _plain(cells[rank_col]), chain, line, line, "table")
            return True
        values = [n for n, col in enumerate(cols) if n != rank_col and all(_number(c) is not None for c in col)]
        if not values:
            return False
        for line, cells in rows:
            label = _plain(cells[rank_col])
            attrs = {"table": "ranks", "label": label, "ranks": expand_label(label),
                     "values": {names[n] or f"column{n + 1}": _number(cells[n]) for n in values}}
            out.rows.append(Row("reporter_table", line, " | ".join(_plain(c) for c in cells), attrs))
        out.rows[-len(rows)].attrs["header"] = names
        return True
    time_col = next((n for n, col in enumerate(cols) if all(TIME_RE.match(_plain(c)) for c in col)), None)
    if time_col is None or len(rows) < 2:
        return False
    metrics = [n for n, col in enumerate(cols) if n != time_col and METRIC_HEAD.search(names[n])
               and all(_number(c) is not None for c in col)]
    if not metrics:
        return False
    for line, cells in rows:
        attrs = {"table": "timeline", "time": _plain(cells[time_col]),
                 "values": {names[n]: _number(cells[n]) for n in metrics}}
        out.rows.append(Row("reporter_table", line, " | ".join(_plain(c) for c in cells), attrs))
    out.rows[-len(rows)].attrs["header"] = names
    return True


def _number(cell: str) -> float | None:
    s = _plain(cell)
    s = re.sub(r"\s*(?:=|≈|~).*$", "", s)          # '161600 = 16160 × 10': the value, then the reporter's arithmetic
    if not NUMBER_RE.match(s):
        return None
    num = re.match(r"^[-+]?[\d,]+(?:\.\d+)?", s)
    return float(num.group(0).replace(",", "")) if num else None


# -- timelines --------------------------------------------------------------------------------------
def _read_timelines(ls: list[_Line], out: Reading) -> None:
    """A fenced block of only 'HH:MM:SS text' lines (two or more) and '... N minutes of silence ...' lines:
    a timeline the reporter made from their logs."""
    blocks: dict[int, list[_Line]] = {}
    for ln in ls:
        if ln.inside and not ln.fence:
            blocks.setdefault(ln.inside, []).append(ln)
    for body in blocks.values():
        body = [b for b in body if b.text.strip()]
        if any(b.i in out.consumed for b in body):
            continue
        timed = [b for b in body if TIMELINE_RE.match(b.text.strip())]
        if len(timed) < 2 or any(not TIMELINE_RE.match(b.text.strip()) and not ELLIPSIS_RE.match(b.text.strip())
                                 for b in body):
            continue
        for b in body:
            t = b.text.strip()
            m = TIMELINE_RE.match(t)
            attrs = {"time": m.group("time"), "text": m.group("text")} if m else {"gap": t.strip(".… ")}
            out.rows.append(Row("reporter_timeline", b.i, t, attrs))
            out.consumed.add(b.i)


# -- Prometheus text --------------------------------------------------------------------------------
def _read_prometheus(ls: list[_Line], out: Reading) -> None:
    """``/metrics`` exposition lines: samples become rows, # HELP / # TYPE lines are consumed (they describe
    the samples).  Needs three samples or a # TYPE line, so a lone 'x 1' is nothing."""
    samples = [ln for ln in ls if not ln.fence and ln.i not in out.consumed and PROM_SAMPLE.match(ln.text.strip())
               and re.match(r"^[A-Za-z_:][\w:]*[_:]", ln.text.strip())]
    metas = [ln for ln in ls if not ln.fence and PROM_META.match(ln.text.strip())]
    shaped = any("{" in ln.text or ":" in ln.text.split()[0] for ln in samples)
    if not samples or not (metas or (len(samples) >= 3 and shaped)):
        return
    for ln in samples:
        m = PROM_SAMPLE.match(ln.text.strip())
        assert m is not None
        labels = dict(PROM_LABEL.findall(m.group("labels") or ""))
        value = float(m.group("value").replace("Inf", "inf"))
        out.rows.append(Row("metrics_sample", ln.i, ln.text.strip(),
                            {"metric": m.group("name"), "labels": labels, "value": value}))
        out.consumed.add(ln.i)
    out.consumed.update(ln.i for ln in metas)


# -- detection --------------------------------------------------------------------------------------
def kind_of(lines: list[str]) -> str | None:
    """``hand_summary`` (a stack, table or timeline a person wrote), ``metrics_text`` (a /metrics excerpt and
    nothing a person made), or None."""
    r = read(lines)
    if r.stacks or any(x.kind != "metrics_sample" for x in r.rows):
        return "hand_summary"
    if r.rows:
        return "metrics_text"
    return None
