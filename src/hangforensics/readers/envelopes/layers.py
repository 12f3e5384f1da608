"""What every layer shares: the payload heads, the items flowing through the layers, the layer base
classes, and the joiner that rejoins records a collector split."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .unwrap import Unwrapper

# -- payload record heads (sglang-formats.md §1, §8.1, §9.1) ----------------------------------------
# A line that starts a payload record: SGLang prefix, torch glog, vLLM.  Chunks are cut before one.
# vLLM's tags: '(VllmWorker TP1 pid=N)', '(pid=N)'; Ray's: '(MegatronPolicyWorker[rank=8] pid=N, ip=...)'
PAYLOAD_HEAD = (r"(?:\([\w .=:\[\]-]*pid=\d+[^)\n]*\)\s*)?"
                r"(?:\[(?:\d{4}-\d\d-\d\d |rank\d+\]:\[|[IWEF]\d{3,4} |[IWEF] \w+\.\w+:\d+\] )"
                r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d )")

# torch.distributed's Python log lines in glog form (torchrun's elastic agent) and the lines of torchrun's
# failure summary that no other head covers (parsers/torch_jobs/torch_job.py).
TORCH_JOB_HEAD = (r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] |torch\.distributed\.[\w.]+(?:Error|Exception):"
                  r"|\S*[./]\S* FAILED$|Failures:$|Root Cause \(first observed failure\):$|\[\d+\]:$")

# A physical line that begins something (a record, an envelope prefix, a dump line, a blank line), as
# opposed to the continuation of a line a terminal wrapped.  Indented lines count as beginnings (dump
# frames, tracebacks): a wrap continues with one space at most, so a wrap at a space is left unjoined.
LINE_START = re.compile(
    r"(?:\s*$|[ \t]{2}|\t"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d|<\d{1,3}>|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\{\"|[\w.-]+ +\||>"
    r"|\[|\(\w+ pid=\d+|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)[: ]|\w*(?:Error|Exception|Warning)\b"
    r"|Traceback |Thread (?:0x[0-9a-fA-F]+|\d+) |Process \d+|Current thread |Fatal Python |File \""
    r"|frame #\d+|#\d+ |terminate called|Environment: |[\w.-]+:\d+:\d+ \[\d+\] NCCL"
    r"|" + TORCH_JOB_HEAD + r")",
    re.ASCII)

# Outside the fences of a paste: a line that looks like evidence (else it is prose, not evidence).
EVIDENCE = re.compile(
    r"(?:[ \t]+\S|\d{4}-\d\d-\d\d[T ]\d\d:\d\d|<\d{1,3}>|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\{\""
    r"|[\w.-]+ +\| |\[(?:\d{4}-\d\d-\d\d|rank\d+\]|[IWEF]\d{3,4} |[IWEF] \w+\.\w+:\d+\] |\d+\] )|\(\w+ pid=\d+"
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)[: ]|\w*(?:Error|Exception)\b:|Traceback \(|"
    r"Thread (?:0x[0-9a-fA-F]+|\d+) |Process \d+: |Python v\d|Current thread 0x|Fatal Python error"
    r"|frame #\d+|#\d+ +0x|terminate called|  what\(\)|Exception raised from|Environment: \S+="
    r"|[\w.-]+:\d+:\d+ \[\d+\] NCCL|\w+(?:\.\w+)*(?:\(\))?=\S|" + TORCH_JOB_HEAD + r")",
    re.ASCII)


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

    def head(self) -> str | None:
        """Regex of a record's head as the file has it, where this innermost layer rewrites it (else the
        payload's own head, PAYLOAD_HEAD)."""
        return None

    def run(self, it: _Items, final: bool) -> _Items:
        return it

    def pending_first(self) -> int | None:
        """First physical line of what this layer holds back for the next chunk."""
        return None


class _JoiningLayer(_Layer):
    """A collector that splits long lines into parts (CRI ``P``/``F`` tags, docker's 16 KiB pieces, JSON
    lines' partial flags): its ``_Joiner`` holds a line's parts until the last one arrives."""

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        self.j = _Joiner(u)

    def pending_first(self) -> int | None:
        return self.j.pending_first()


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

