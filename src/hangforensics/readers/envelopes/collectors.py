"""Collector envelopes: kubectl ``--timestamps``, containerd / CRI-O pod files, docker json-file,
journald (short, short-iso, json), syslog (RFC 5424, RFC 3164), Fluent Bit and Vector JSON lines."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import TYPE_CHECKING

from .layers import _Items, _JoiningLayer, _Layer, _PrefixLayer
from .times import _ISO, _MON, _ZONE, _any_ts, _iso_ts

if TYPE_CHECKING:
    from .unwrap import Unwrapper


class _Kubectl(_PrefixLayer):
    """``kubectl logs --timestamps``, with ``--prefix`` (several pods or containers in one stream) each
    line first names its source: ``[pod/sglang-1/sglang] 2026-05-24T03:44:45.123Z ...``."""

    name = "kubectl"
    rx = re.compile(r"^(?:\[pod/[^\s\]]+\] )?" + _ISO + _ZONE + r"(?: |$)", re.ASCII)

    def prefix(self) -> str:
        return r"(?:\[pod/[^\s\]]+\] )?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d) "

    def run(self, it: _Items, final: bool) -> _Items:
        # the hot path of the commonest envelope: inlined (no method call per line)
        match, conv, iso = self.rx.match, _iso_ts, datetime.fromisoformat
        txt: list[str] = []
        tss: list[datetime | None] = []
        at, ats = txt.append, tss.append
        for s, t in zip(it.txt, it.ts, strict=True):
            m = match(s)
            if m is None:
                at(s)
                ats(t)
                continue
            at(s[m.end():])
            base, frac, zone = m.groups()
            if zone == "Z":                  # UTC, as kubectl prints it: the C parser directly
                try:
                    ats(iso(f"{base}.{frac[:6].ljust(6, '0')}" if frac else base))
                except ValueError:
                    ats(t)
                continue
            v = conv(base, frac, zone)
            ats(t if v is None else v)
        return _Items(txt, it.ln, it.sp, tss)


class _Cri(_JoiningLayer):
    name = "cri"
    rx = re.compile(r"^" + _ISO + r"(Z|z|[+-]\d\d:?\d\d) (stdout|stderr) ([PF])(?: |$)", re.ASCII)

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


class _DockerJson(_JoiningLayer):
    name = "docker_json"
    # the driver's own key order ({"log":"...","stream":"...","time":"..."}); anything else: json.loads
    tail = re.compile(r'","stream":"(\w+)","time":"' + _ISO + _ZONE + r'"\}$', re.ASCII)

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


class _JsonLines(_JoiningLayer):
    """journald ``-o json``, Fluent Bit and Vector: one JSON object per line, payload in one key."""

    def __init__(self, param: str, u: Unwrapper) -> None:
        super().__init__(param, u)
        key, _, tkey = param.partition("\t")
        self.key = key or "log"
        self.tkey = tkey

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



class _Fluentbit(_JsonLines):
    name = "fluentbit"


class _Vector(_JsonLines):
    name = "vector"

