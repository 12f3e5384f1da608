"""Unwrapping: the stack of layers applied to a file fed chunk by chunk, payload lines out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from typing import Any

from .collectors import _Cri, _DockerJson, _Fluentbit, _Journald, _Kubectl, _Syslog, _Vector
from .columnar import columnar_layer, unwrap_column
from .layers import PAYLOAD_HEAD, _Items, _Layer
from .pastes import (
    _Ansi,
    _Compose,
    _HardWrap,
    _Indent,
    _InlineRecords,
    _Launcher,
    _Markdown,
    _ProcTag,
    _TimeOfDay,
    _ViewerLineno,
    _ViewerTs,
)
from .times import _Years

_LAYERS: dict[str, type[_Layer]] = {
    cls.name: cls for cls in (_Kubectl, _Cri, _DockerJson, _Journald, _Syslog, _Compose, _Ansi, _Markdown,
                              _ViewerLineno, _ViewerTs, _HardWrap, _Fluentbit, _Vector, _ProcTag, _Indent,
                              _Launcher, _TimeOfDay, _InlineRecords)
}
# Every layer name detect() can return.
LAYER_NAMES = tuple(_LAYERS)


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
    layers = Unwrapper(stack).layers
    head = (layers[-1].head() if layers else None) or PAYLOAD_HEAD
    return re.compile(b"\n" + prefix.encode("ascii", "backslashreplace") + head.encode("ascii"))


NONE = EnvelopeStack()


# -- unwrapping -----------------------------------------------------------------------------------
@dataclass
class Unwrapped:
    """The payload of one fed chunk (lines carried over from earlier chunks included)."""

    payload: Any = field(default_factory=list)             # envelope stripped, split records rejoined: a list
                                                           # of str (a column fed: a polars String Series)
    line: list[int] = field(default_factory=list)          # physical 1-based line of its first physical line
    span: list[int] = field(default_factory=list)          # physical lines it stands for (0: a further line
                                                           # of one JSON message that held several)
    collected_ts: Any = field(default_factory=list)        # the envelope's time (naive, UTC when the
                                                           # envelope gave a zone), None without one (a column
                                                           # fed: a polars Datetime Series)
    dropped: list[tuple[int, str]] = field(default_factory=list)       # (physical line, original text) of
                                                           # envelope-only and prose lines
    identity: bool = False                                 # payload is the input list itself (stack 'none')
    joined: dict[int, list[int]] = field(default_factory=dict)         # physical lines of a payload line
                                                           # (by its line) when not line, line+1, ... (streams)

    def physical(self, i: int) -> list[int]:
        """The physical lines payload line ``i`` stands for (those of its JSON message when span is 0)."""
        ln = self.line[i]
        got = self.joined.get(ln)
        if got is not None:
            return got
        return list(range(ln, ln + max(self.span[i], 1)))


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
        # a layer that unwraps a polars column of lines at once (``columnar``), or None
        self.columnar = columnar_layer(stack.layers, stack.params)

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

    def original(self, p: int) -> str:
        """The text of physical line ``p`` as the file has it (a line of the last feed, or one carried into it)."""
        i = p - self._orig_first
        return self._orig[i] if 0 <= i < len(self._orig) else ""

    def carried_from(self) -> int | None:
        """First physical line held back for the next chunk (None: nothing is): a safe resume point
        is the start of that line."""
        firsts = [p for p in (layer.pending_first() for layer in self.layers) if p is not None]
        return min(firsts) if firsts else None

    def feed(self, lines: Any, first_line: int, final: bool = False) -> Unwrapped:
        """The payload of the next lines (``lines``: a list of str, or a polars String Series: unwrapped as a
        column where the stack's layer can be, with nothing held back from an earlier chunk)."""
        if not isinstance(lines, list):
            if self.columnar is not None and self.carried_from() is None:
                got = unwrap_column(self.columnar, lines, self.years)
                if got is not None:
                    self._orig, self._orig_first = lines, first_line
                    n = len(lines)
                    return Unwrapped(got[0], list(range(first_line, first_line + n)), [1] * n, got[1], [])
            lines = lines.to_list()
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
        joined: dict[int, list[int]] = {}
        if self._phys:
            # joined lines handed on now, and those still held for the next chunk
            joined = {k: v for k, v in self._phys.items() if keep is None or k < keep}
            self._phys = {k: v for k, v in self._phys.items() if keep is not None and k >= keep}
        return Unwrapped(it.txt, it.ln, it.sp, it.ts, dropped, joined=joined)
