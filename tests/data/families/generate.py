#!/usr/bin/env python3
"""Generate the hangforensics *families corpus*: held-out twins of the ticket-style fragment families of
shared/examples (fragments.tar.gz), each engine a different realistic variation of its family, plus
healthy and idle engines that must produce nothing, and the expected findings (truth.json).

    python3 tests/data/families/generate.py [--out DIR]

Python 3.11 standard library only.  Every random choice comes from one fixed seed, so a re-run writes
byte-identical files.  The script deletes and rewrites ``fleet/`` and ``truth.json`` under DIR (default:
next to itself) and sets each file's modification time: file times are evidence here (a year-less glog or
vLLM line takes its year from them) and a git checkout does not keep them, so a test regenerates the
corpus into a temporary folder before scoring it.

Formats follow shared/reference/sglang-formats.md (SGLang 0.4.6-0.5.23, torch ProcessGroupNCCL glog
lines of torch 2.0-2.8, vLLM V0/V1) and collective-formats.md (Flight Recorder pickles and JSON, NCCL RAS
text).  Expected timestamps are derived from the generated events themselves, on the clock of the
engine's main evidence, following shared/interface.md §3 (never from what the product reports).
"""

# Log templates keep the `%`-style of the upstream format strings they copy.
# ruff: noqa: UP031

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import os
import pickle
import random
import shutil
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261203
RULES = [
    "stall-onset",
    "all-ranks-frozen",
    "first-rank-stopped",
    "busy-leak-report",
    "idle-memory-leak",
    "health-check-blind",
    "collective-desync",
    "watchdog-kill",
    "known-signature",
]
PHRASE = {200: "200 OK", 404: "404 Not Found", 503: "503 Service Unavailable"}
OLD = ("0.4.6", "0.5.2")  # `Prefill batch. ` / `Decode batch. ` heads
TRAILING = ("0.5.2", "0.5.5")  # batch lines end with `, `
NEW = ("0.5.10", "0.5.23")
NCCL_TIMEOUT_SIG = "nccl-collective-timeout"
SITE = "/usr/local/lib/python3.12/dist-packages"


# --------------------------------------------------------------------------- clock and documents
class Clock:
    """The payload's wall clock: base datetime + seconds; `tz` = hours ahead of UTC (for collectors)."""

    def __init__(self, base: datetime, *, ms: bool = False, tz: float = 0.0):
        self.base, self.ms, self.tz = base, ms, tz

    def dt(self, t: float) -> datetime:
        return self.base + timedelta(seconds=t)

    def stamp(self, t: float, ms: bool | None = None) -> str:
        d = self.dt(t)
        s = d.strftime("%Y-%m-%d %H:%M:%S")
        if self.ms if ms is None else ms:
            s += ".%03d" % (d.microsecond // 1000)
        return s

    def iso(self, t: float, ms: bool = False) -> str:
        d = self.dt(t)
        return d.strftime("%Y-%m-%dT%H:%M:%S") + (".%03d" % (d.microsecond // 1000) if ms else "")

    def hms(self, t: float) -> str:
        return self.dt(t).strftime("%H:%M:%S")

    def utc(self, t: float) -> datetime:
        return self.dt(t) - timedelta(hours=self.tz)


Line = tuple[float, str]  # (time of the record the physical line belongs to, text)


class Doc:
    """Records of one payload (time, order, lines), rendered in time order."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.ev: list[tuple[float, int, list[str]]] = []

    def raw(self, t: float, lines: str | list[str]) -> None:
        self.ev.append((t, len(self.ev), [lines] if isinstance(lines, str) else list(lines)))

    def rec(self, t: float, msg: str, rank: str | None = None, ms: bool | None = None) -> None:
        """A Python logging record with SGLang's prefix on its first line only."""
        parts = msg.split("\n")
        parts[0] = "[%s%s] %s" % (self.clock.stamp(t, ms), " " + rank if rank else "", parts[0])
        self.raw(t, parts)

    def uvicorn(self, t: float, client: str, method: str, path: str, code: int) -> None:
        """uvicorn's own formatter: no milliseconds even with SGLANG_LOG_MS=1."""
        self.raw(
            t,
            '[%s] INFO:     %s - "%s %s HTTP/1.1" %s'
            % (self.clock.stamp(t, False), client, method, path, PHRASE[code]),
        )

    def lines(self) -> list[Line]:
        out: list[Line] = []
        for t, _, g in sorted(self.ev, key=lambda e: (e[0], e[1])):
            out += [(t + k * 1e-6, x) for k, x in enumerate(g)]
        return out


# --------------------------------------------------------------------------- helpers
def poisson(rng: random.Random, t0: float, t1: float, rate: float) -> list[float]:
    out, t = [], t0
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= t1:
            break
        out.append(t)
    return out


def ticks(rng: random.Random, t0: float, t1: float, period: float, jitter: float = 0.3) -> list[float]:
    out, t = [], t0 + rng.uniform(0, period)
    while t < t1:
        out.append(t + rng.uniform(-jitter, jitter))
        t += period
    return out


def hexid(rng: random.Random, n: int = 32) -> str:
    return "%0*x" % (n, rng.getrandbits(4 * n))


def addr(rng: random.Random) -> str:
    return "0x7f%010x" % rng.getrandbits(40)


def frac_at(t: float, frac: float) -> float:
    """t moved within its whole second to the given fraction."""
    return math.floor(t) + frac


# --------------------------------------------------------------------------- SGLang batch lines
def head(kind: str, rel: str, it: int | None) -> str:
    return "%s batch%s%s " % (kind, " [%d]" % it if it is not None else "", "." if rel in OLD else ",")


def prefill_msg(
    rel: str,
    *,
    n_seq: int,
    new: int,
    cached: int,
    usage: float,
    running: int,
    queue: int,
    it: int | None = None,
    in_tp: float = 0.0,
) -> str:
    s = head("Prefill", rel, it) + "#new-seq: %d, #new-token: %d, #cached-token: %d, " % (n_seq, new, cached)
    s += "token usage: %.2f, " % usage
    if rel == "0.4.6":
        return s + "#running-req: %d, #queue-req: %d" % (running, queue)
    if rel in TRAILING:
        return s + "#running-req: %d, #queue-req: %d, " % (running, queue)
    if rel == "0.5.10":
        return s + "#running-req: %d, #queue-req: %d, cuda graph: False, input throughput (token/s): %.2f" % (
            running,
            queue,
            in_tp,
        )
    return s + (
        "#running-req: %d, #queue-req: %d, #pending-token: 0, cuda graph: False, "
        "input throughput (token/s): %.2f" % (running, queue, in_tp)
    )


def decode_msg(
    rel: str,
    *,
    running: int,
    tokens: int,
    usage: float,
    gen_tp: float,
    queue: int,
    it: int | None = None,
    spec: tuple[float, float] | None = None,
) -> str:
    s = head("Decode", rel, it) + "#running-req: %d, #token: %d, token usage: %.2f, " % (
        running,
        tokens,
        usage,
    )
    if spec is not None:
        s += (
            ("accept len: %.2f, " % spec[0])
            if rel in OLD
            else ("accept len: %.2f, accept rate: %.2f, " % spec)
        )
    s += "cuda graph: True, gen throughput (token/s): %.2f, #queue-req: %d" % (gen_tp, queue)
    return s + (", " if rel in TRAILING else "")


class Req:
    __slots__ = ("t", "inp", "out", "gen", "stream", "path", "ip")

    def __init__(self, t: float, inp: int, out: int, stream: bool, path: str, ip: str):
        self.t, self.inp, self.out, self.gen, self.stream, self.path, self.ip = (
            t,
            inp,
            out,
            0,
            stream,
            path,
            ip,
        )


class Engine:
    """One engine: its rng, payload clock, main document, the files it becomes and the facts truth uses."""

    def __init__(self, name: str, rel: str, base: datetime, *, ms: bool = False, tz: float = 0.0):
        self.name, self.rel = name, rel
        self.rng = random.Random(SEED * 1_000_003 + zlib.crc32(name.encode()))
        self.clock = Clock(base, ms=ms, tz=tz)
        self.doc = Doc(self.clock)
        self.ports: dict[str, int] = {}
        self.files: dict[str, bytes] = {}
        self.mtimes: dict[str, datetime] = {}
        self.probe_ok: list[float] = []  # times of liveness-probe 200s

    def iso(self, t: float, ms: bool = False) -> str:
        return self.clock.iso(t, ms)

    def client(self, ip: str) -> str:
        p = self.ports.get(ip) or self.rng.randint(33000, 58000)
        p = p + self.rng.randint(1, 37)
        if p > 60999:
            p = 32768 + p % 2000
        self.ports[ip] = p
        return "%s:%d" % (ip, p)

    def access(self, t: float, ip: str, method: str, path: str, code: int, *, probe: bool = False) -> None:
        self.doc.uvicorn(t, self.client(ip), method, path, code)
        if probe and code == 200:
            self.probe_ok.append(t)

    def probe(self, t0: float, t1: float, path: str, period: float, ip: str, code: int = 200) -> None:
        """A liveness probe: one client, one GET path, a steady interval."""
        for t in ticks(self.rng, t0, t1, period, jitter=0.25):
            self.access(t, ip, "GET", path, code, probe=True)

    def write(self, rel: str, lines: list[str], *, crlf: bool = False, end: bool = True) -> None:
        eol = "\r\n" if crlf else "\n"
        text = eol.join(lines) + (eol if end else "")
        self.files[rel] = text.encode("utf-8", "surrogateescape")

    def gzip(self, rel: str) -> None:
        """Compress a written file (``rel`` + .gz, the header's mtime 0: re-runs stay byte-identical)."""
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
            f.write(self.files.pop(rel))
        self.files[rel + ".gz"] = buf.getvalue()

    def stamp_file(self, rel: str, when: datetime) -> None:
        """The file's modification time (UTC): when the person saved the paste or the tool wrote it."""
        self.mtimes[rel] = when


class Traffic:
    """Batch-logging ranks serving Poisson arrivals: a Prefill line per admitted request, a Decode line at
    every 40th decode step while requests run, access lines (streaming at arrival, others at completion).
    `stall` freezes everything at that time; arrivals keep coming (only streaming ones get a line)."""

    def __init__(
        self,
        E: Engine,
        ranks: list[str],
        *,
        max_tokens: int,
        step_ms: tuple[float, float] = (20.0, 0.5),
        in_len: tuple[int, int] = (200, 4000),
        out_len: tuple[int, int] = (60, 900),
        spec: bool = False,
        iters: bool = False,
        clients: tuple[str, ...] = ("10.22.12.149", "10.22.80.231"),
        paths: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions", "/generate"),
    ):
        self.E, self.ranks, self.max_tokens = E, ranks, max_tokens
        self.step_ms, self.in_len, self.out_len = step_ms, in_len, out_len
        self.spec, self.iters, self.clients, self.paths = spec, iters, list(clients), list(paths)
        self.active: list[Req] = []
        self.fct = E.rng.randint(2000, 90000)
        self.last: dict[str, float] = {}
        self.last_running = 0
        self.last_decode: float | None = None
        self.prev_prefill: float | None = None

    def emit(self, t: float, msg: str) -> None:
        for i, r in enumerate(self.ranks):
            self.E.doc.rec(t + i * 0.0031, msg, r)
            self.last[r] = t + i * 0.0031

    def tokens(self) -> int:
        return sum(r.inp + r.gen for r in self.active)

    def new_req(self, t: float, p_stream: float) -> Req:
        rng = self.E.rng
        inp = int(math.exp(rng.uniform(math.log(self.in_len[0]), math.log(self.in_len[1]))))
        out = int(math.exp(rng.uniform(math.log(self.out_len[0]), math.log(self.out_len[1]))))
        return Req(t, inp, out, rng.random() < p_stream, rng.choice(self.paths), rng.choice(self.clients))

    def admit(
        self, ta: float, tp: float, p_stream: float, req: Req | None = None, new_token: int | None = None
    ) -> None:
        rng, E = self.E.rng, self.E
        req = req or self.new_req(ta, p_stream)
        if req.stream:
            E.access(ta + rng.uniform(0.004, 0.04), req.ip, "POST", req.path, 200)
        cached = rng.randint(0, req.inp // 2) if rng.random() < 0.4 else 0
        new = new_token if new_token is not None else req.inp - cached
        gap = tp - self.prev_prefill if self.prev_prefill is not None else 1.0
        self.active.append(req)
        self.fct += 1
        self.emit(
            tp,
            prefill_msg(
                E.rel,
                n_seq=1,
                new=new,
                cached=cached,
                usage=self.tokens() / self.max_tokens,
                running=len(self.active) - 1,
                queue=0,
                it=self.fct if self.iters else None,
                in_tp=new / max(min(gap, 30.0), 0.05),
            ),
        )
        self.prev_prefill = tp

    def plan(self, t: float) -> tuple:
        """40 decode steps from t (fewer when the batch empties first): when the Decode line is due."""
        rng = self.E.rng
        st = (self.step_ms[0] + self.step_ms[1] * len(self.active)) / 1000.0 * rng.uniform(0.93, 1.07)
        acc = rng.uniform(2.2, 2.9) if self.spec else 1.0
        need = [(max(1, math.ceil((r.out - r.gen) / acc)), r) for r in self.active]
        counted = [r for n, r in need if n >= 40]
        steps = 40 if counted else max(n for n, _ in need)
        return t + steps * st, st, acc, need, counted, steps

    def commit(self, t: float, plan: tuple) -> None:
        rng, E = self.E.rng, self.E
        w, st, acc, need, counted, steps = plan
        gen = 0
        for n, r in need:
            g = min(int(steps * acc), r.out - r.gen)
            r.gen += g
            gen += g
            if n <= 40 or not counted:
                self.active.remove(r)
                if not r.stream:
                    E.access(t + n * st + rng.uniform(0.001, 0.02), r.ip, "POST", r.path, 200)
        self.fct += steps
        if counted:
            since = (
                w - self.last_decode if self.last_decode is not None and w - self.last_decode < 30 else w - t
            )
            tok = sum(r.inp + r.gen for r in counted)
            self.emit(
                w,
                decode_msg(
                    E.rel,
                    running=len(counted),
                    tokens=tok,
                    usage=tok / self.max_tokens,
                    gen_tp=gen / max(since, 0.05),
                    queue=0,
                    it=self.fct if self.iters else None,
                    spec=(acc, (acc - 1) / 3.0) if self.spec else None,
                ),
            )
            self.last_decode = w
            self.last_running = len(counted)

    def pending(self, times: list[float], p_stream: float) -> None:
        """Arrivals the stuck scheduler never serves: streaming ones get their 200 at once (headers first)."""
        for ta in times:
            req = self.new_req(ta, p_stream)
            if req.stream:
                self.E.access(ta + self.E.rng.uniform(0.004, 0.04), req.ip, "POST", req.path, 200)

    def run(
        self,
        t0: float,
        t1: float,
        rate: float,
        *,
        p_stream: float = 0.5,
        stall: float | None = None,
        drain: bool = True,
    ) -> float:
        """Serve arrivals in [t0, t1).  With `stall`, no batch line and no completion from then on (arrivals
        keep coming).  Without `drain`, stop at t1 with requests in flight.  Returns the time reached."""
        rng = self.E.rng
        arr = poisson(rng, t0, t1, rate)
        ai, t = 0, t0
        while True:
            if not self.active:
                if ai >= len(arr):
                    return t
                ta = arr[ai]
                ai += 1
                tp = max(t, ta) + rng.uniform(0.03, 0.2)
                if stall is not None and tp >= stall:
                    self.pending([ta] + arr[ai:], p_stream)
                    return stall
                self.admit(ta, tp, p_stream)
                t = tp
                continue
            if t >= t1 and not drain:
                return t
            plan = self.plan(t)
            w = plan[0]
            if stall is not None and w >= stall:
                while ai < len(arr) and arr[ai] < stall - 0.3:
                    ta = arr[ai]
                    ai += 1
                    self.admit(ta, ta + rng.uniform(0.03, 0.25), p_stream)
                self.pending(arr[ai:], p_stream)
                return stall
            self.commit(t, plan)
            while ai < len(arr) and arr[ai] < w:
                ta = arr[ai]
                ai += 1
                self.admit(ta, max(ta, t) + rng.uniform(0.03, 0.25), p_stream)
            t = w

    def last_progress(self) -> float:
        return max(self.last.values())

    def reqs_repr(self, nids: int = 24) -> str:
        rng = self.E.rng
        parts = []
        for r in self.active:
            ids = ", ".join(str(rng.randint(11, 151000)) for _ in range(nids))
            outs = ", ".join(str(rng.randint(11, 151000)) for _ in range(min(12, r.gen)))
            parts.append("Req(rid=%s, input_ids=[%s], output_ids=[%s])" % (hexid(rng), ids, outs))
        return "[" + ", ".join(parts) + "]"


# --------------------------------------------------------------------------- collector envelopes (per line, timed)
def go_nano(d: datetime, extra: int) -> str:
    """Go's RFC3339Nano in UTC: nanoseconds with trailing zeros trimmed."""
    frac = ("%06d%03d" % (d.microsecond, extra % 1000)).rstrip("0")
    return d.strftime("%Y-%m-%dT%H:%M:%S") + ("." + frac if frac else "") + "Z"


def collected(E: Engine, t: float, lag: float = 0.0008) -> datetime:
    """When the collector read the line: the payload time in UTC plus the pipe's lag."""
    return E.clock.utc(t) + timedelta(seconds=lag)


def w_kubectl(E: Engine, lines: list[Line]) -> list[Line]:
    return [(t, "%s %s" % (go_nano(collected(E, t), i * 7919), s)) for i, (t, s) in enumerate(lines)]


def w_cri(E: Engine, lines: list[Line], limit: int = 16384) -> list[Line]:
    """containerd's pod log file: a line longer than the runtime's limit becomes P records and one F."""
    out = []
    for i, (t, s) in enumerate(lines):
        ts = go_nano(collected(E, t), i * 104729)
        parts = [s[k : k + limit] for k in range(0, len(s), limit)] or [""]
        out += [
            (t, "%s stderr %s %s" % (ts, "F" if k == len(parts) - 1 else "P", p)) for k, p in enumerate(parts)
        ]
    return out


def w_docker(E: Engine, lines: list[Line], limit: int = 16384) -> list[Line]:
    out = []
    for i, (t, s) in enumerate(lines):
        parts = [s[k : k + limit] for k in range(0, len(s), limit)] or [""]
        for k, p in enumerate(parts):
            log = p + ("\n" if k == len(parts) - 1 else "")
            out.append(
                (
                    t,
                    json.dumps(
                        {"log": log, "stream": "stderr", "time": go_nano(collected(E, t), i * 31)},
                        separators=(",", ":"),
                    ),
                )
            )
    return out


def w_journald_short(E: Engine, lines: list[Line], host: str, pid: int, precise: bool = False) -> list[Line]:
    """`journalctl -o short` (`short-precise`: with microseconds): the host's local time, no year."""
    out = []
    for t, s in lines:
        d = E.clock.dt(t)
        hms = d.strftime("%H:%M:%S") + (".%06d" % d.microsecond if precise else "")
        out.append((t, "%s %2d %s %s python3[%d]: %s" % (d.strftime("%b"), d.day, hms, host, pid, s)))
    return out


def w_journald_iso(E: Engine, lines: list[Line], host: str, pid: int) -> list[Line]:
    sign = "+" if E.clock.tz >= 0 else "-"
    zone = "%s%02d%02d" % (sign, abs(int(E.clock.tz)), int(abs(E.clock.tz) * 60) % 60)
    return [
        (t, "%s%s %s python3[%d]: %s" % (E.clock.dt(t).strftime("%Y-%m-%dT%H:%M:%S"), zone, host, pid, s))
        for t, s in lines
    ]


def w_vector(E: Engine, lines: list[Line], pod: str) -> list[Line]:
    return [
        (
            t,
            json.dumps(
                {
                    "file": "/var/log/pods/llm_%s_7f3e/sglang/0.log" % pod,
                    "host": "gpu-node-07",
                    "kubernetes": {"pod_name": pod, "container_name": "sglang"},
                    "message": s,
                    "source_type": "kubernetes_logs",
                    "stream": "stderr",
                    "timestamp": go_nano(collected(E, t), i),
                },
                separators=(",", ":"),
            ),
        )
        for i, (t, s) in enumerate(lines)
    ]


def w_fluentbit(E: Engine, lines: list[Line], pod: str) -> list[Line]:
    epoch = datetime(1970, 1, 1)
    return [
        (
            t,
            json.dumps(
                {
                    "date": round((collected(E, t) - epoch).total_seconds(), 6),
                    "log": s + "\n",
                    "stream": "stderr",
                    "kubernetes": {"pod_name": pod, "namespace_name": "train"},
                }
            ),
        )
        for t, s in lines
    ]


def w_ansi(lines: list[Line]) -> list[Line]:
    """A TTY capture: uvicorn colours its level and status, a progress bar redraws with \\r."""
    out = []
    for t, s in lines:
        s = s.replace("INFO:", "\x1b[32mINFO\x1b[0m:").replace('" 200 OK', '" \x1b[32m200 OK\x1b[0m')
        out.append((t, s))
    return out


# --------------------------------------------------------------------------- paste envelopes (people)
def p_compose(lines: list[Line], service: str) -> list[Line]:
    return [(t, "%s  | %s" % (service, s) if s else "%s  | " % service) for t, s in lines]


def p_quote(lines: list[Line]) -> list[Line]:
    return [(t, "> " + s if s else ">") for t, s in lines]


def p_fence(
    lines: list[Line], lang: str, before: list[str], after: list[str], fence: str = "```"
) -> list[Line]:
    t0 = lines[0][0] if lines else 0.0
    t1 = lines[-1][0] if lines else 0.0
    return [(t0, x) for x in before] + [(t0, fence + lang)] + lines + [(t1, fence)] + [(t1, x) for x in after]


def p_lineno(lines: list[Line], fmt: str, first: int) -> list[Line]:
    out = []
    for i, (t, s) in enumerate(lines):
        x = fmt % (first + i, s)
        out.append((t, x.rstrip(" ") if not s else x))
    return out


def p_viewer_ts(E: Engine, lines: list[Line], shift_h: float) -> list[Line]:
    """A log viewer's own time column (its clock: the viewer's zone, a little after the line was written)."""
    return [
        (
            t,
            " %s %s"
            % ((E.clock.dt(t) + timedelta(hours=shift_h, seconds=0.9)).strftime("%Y-%m-%d %H:%M:%S"), s),
        )
        for t, s in lines
    ]


def p_hard_wrap(lines: list[Line], width: int) -> list[Line]:
    return [(t, s[k : k + width]) for t, s in lines for k in range(0, max(len(s), 1), width)]


def cut_mid_token(lines: list[Line], keep: float) -> list[Line]:
    """The paste ends inside its last line."""
    t, s = lines[-1]
    return lines[:-1] + [(t, s[: max(8, int(len(s) * keep))])]


def texts(lines: list[Line]) -> list[str]:
    return [s for _, s in lines]


# --------------------------------------------------------------------------- stacks
SPAWN_TAIL = [
    "BaseProcess.run (multiprocessing/process.py:108)",
    "BaseProcess._bootstrap (multiprocessing/process.py:314)",
    "_main (multiprocessing/spawn.py:135)",
    "spawn_main (multiprocessing/spawn.py:122)",
    "<module> (<string>:1)",
]


def pyspy(pid: int, title: str, threads: list[tuple[int, str, str, list[str]]], pyver: str = "3.12.3") -> str:
    out = ["Process %d: %s" % (pid, title), "Python v%s (/usr/bin/python3.12)" % pyver, ""]
    for tid, state, name, frames in threads:
        out.append('Thread %d (%s): "%s"' % (tid, state, name))
        out += ["    " + f for f in frames]
    return "\n".join(out)


def main_stack(rng: random.Random, where: str, native: bool) -> list[str]:
    """The scheduler's main thread while the batch hangs (py-spy frame text)."""
    nat = ["%s (libcuda.so.1)" % addr(rng), "%s (libcuda.so.1)" % addr(rng)] if native else []
    loop = [
        "Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:%d)" % rng.randint(1000, 1200),
        "decorate_context (torch/utils/_contextlib.py:120)",
        "run_scheduler_process (sglang/srt/managers/scheduler.py:%d)" % rng.randint(2900, 3200),
    ] + SPAWN_TAIL
    if where == "eagle":
        return (
            nat
            + [
                "EAGLEWorker.draft (sglang/srt/speculative/eagle_worker.py:%d)" % rng.randint(380, 420),
                "EAGLEWorker.forward_batch_speculative_generation (sglang/srt/speculative/eagle_worker.py:326)",
                "Scheduler.run_batch (sglang/srt/managers/scheduler.py:%d)" % rng.randint(1900, 2100),
            ]
            + loop
        )
    if where == "allreduce":
        return (
            (["%s (libnccl.so.2)" % addr(rng), "ncclAllReduce (libnccl.so.2)"] if native else [])
            + [
                "GroupCoordinator._all_reduce_out_place (sglang/srt/distributed/parallel_state.py:512)",
                "GroupCoordinator.all_reduce (sglang/srt/distributed/parallel_state.py:468)",
                "tensor_model_parallel_all_reduce (sglang/srt/distributed/communication_op.py:14)",
                "RowParallelLinear.forward (sglang/srt/layers/linear.py:1385)",
                "DeepseekV2MLP.forward (sglang/srt/models/deepseek_v2.py:%d)" % rng.randint(200, 260),
                "ModelRunner.forward_decode (sglang/srt/model_executor/model_runner.py:1823)",
                "Scheduler.run_batch (sglang/srt/managers/scheduler.py:%d)" % rng.randint(1900, 2100),
            ]
            + loop
        )
    return (
        nat
        + [
            "cudaEventSynchronize (libcudart.so.12)",
            "Event.synchronize (torch/cuda/streams.py:231)",
            "SchedulerOutputProcessorMixin.process_batch_result_decode "
            "(sglang/srt/managers/scheduler_output_processor_mixin.py:251)",
            "Scheduler.process_batch_result (sglang/srt/managers/scheduler.py:2290)",
        ]
        + loop
    )


def helper_threads(rng: random.Random, pid: int, dump_site: str) -> list[tuple[int, str, str, list[str]]]:
    return [
        (
            pid + rng.randint(300, 600),
            "idle",
            "Thread-1",
            [
                "Condition.wait (threading.py:359)",
                "Event.wait (threading.py:655)",
                "TMonitor.run (tqdm/_monitor.py:60)",
                "Thread._bootstrap_inner (threading.py:1073)",
                "Thread._bootstrap (threading.py:1030)",
            ],
        ),
        (
            pid + rng.randint(601, 900),
            "active",
            "Thread-3 (_watchdog_thread)",
            [
                "_communicate (subprocess.py:2115)",
                "Popen.communicate (subprocess.py:1209)",
                "run (subprocess.py:550)",
                "pyspy_dump_schedulers (%s)" % dump_site,
                "WatchdogRaw._watchdog_once (sglang/srt/utils/watchdog.py:152)",
                "WatchdogRaw._watchdog_thread (sglang/srt/utils/watchdog.py:108)",
                "Thread.run (threading.py:1010)",
                "Thread._bootstrap_inner (threading.py:1073)",
                "Thread._bootstrap (threading.py:1030)",
            ],
        ),
    ]


# --------------------------------------------------------------------------- the scheduler watchdog, per release
def watchdog_fire(
    E: Engine,
    doc: Doc,
    t: float,
    rank: str,
    pid: int,
    *,
    batch: int,
    reqs: str,
    total: int,
    inflight: int,
    evictable: int,
    where: str = "eagle",
    soft: bool = False,
    timeout: str = "300",
    dump: bool = True,
    spy_fails: bool = False,
) -> tuple[float, float]:
    """One rank's watchdog record(s) as its release prints them (``spy_fails``: py-spy is refused in the
    container, 0.5.23's failure records instead of a dump).  Returns (first line's time, timeout line's)."""
    rng, rel = E.rng, E.rel
    avail = total - evictable - inflight
    title = "sglang::scheduler_" + rank.replace(" ", "_")
    native = rel in NEW
    stack = pyspy(
        pid,
        title,
        [(pid, "active", "MainThread", main_stack(rng, where, native))]
        + helper_threads(rng, pid, "sglang/srt/utils/common.py:%d" % rng.randint(2180, 2490)),
    )
    # py-spy runs between the debug record and the timeout line: --native unwinding takes seconds
    t_dump = t + rng.uniform(0.05, 0.3)
    t_out = t_dump + (rng.uniform(0.6, 2.6) if native else rng.uniform(0.15, 0.9))
    if not dump:
        t_out = t + rng.uniform(0.45, 0.7)
    if rel in OLD:
        pool = (
            "self.token_to_kv_pool_allocator.available_size()=%d, self.tree_cache.evictable_size()=%d, "
            if rel == "0.4.6"
            else "available_size=%d, evictable_size=%d, "
        ) % (avail, evictable)
        if dump:
            doc.rec(
                t, "self.cur_batch.batch_size()=%d, self.cur_batch.reqs=%s, %s" % (batch, reqs, pool), rank
            )
            doc.rec(t_dump, "Pyspy dump for PID %d:\n%s\n" % (pid, stack), rank)
        doc.rec(t_out, "Watchdog timeout (self.watchdog_timeout=%s)" % timeout, rank)
        return (t if dump else t_out), t_out
    if rel == "0.5.5":
        if dump:
            doc.rec(
                t,
                "self.cur_batch.batch_size()=%d\nself.cur_batch.reqs=%s\nself.max_total_num_tokens=%d, "
                "available_size=%d, evictable_size=%d, protected_size=0"
                % (batch, reqs, total, avail, evictable),
                rank,
            )
            doc.rec(t_dump, "Pyspy dump for PID %d:\n%s\n" % (pid, stack), rank)
        doc.rec(t_out, "Watchdog timeout (self.watchdog_timeout=%s)" % timeout, rank)
        return (t if dump else t_out), t_out
    if rel == "0.5.10":
        block = (
            "Scheduler debug info:\nscheduler.cur_batch.batch_size()=%d\nscheduler.cur_batch.reqs=%s\n"
            "self.max_total_num_tokens=%d, available_size=%d, evictable_size=%d, protected_size=0, "
            "session_held=0" % (batch, reqs, total, avail, evictable)
        )
        head_pyspy = "Pyspy dump for PID %d:\n" % pid
    else:
        block = (
            "Scheduler debug info:\nscheduler.cur_batch_for_debug.batch_size()=%d\n"
            "scheduler.cur_batch_for_debug.reqs=%s\n[full] total=%d, available=%d, evictable=%d, "
            "protected=0, session_held=0, uncached=0" % (batch, reqs, total, avail, evictable)
        )
        head_pyspy = "Pyspy dump for PID %d (py-spy dump --native --pid %d):\n" % (pid, pid)
    if dump:
        doc.rec(t, block, rank)
        if spy_fails and rel == "0.5.23":
            err = (
                "Permission Denied: Try running again with elevated permissions by going 'sudo env "
                '"PATH=$PATH" !!\''
            )
            doc.rec(t_dump, "Pyspy failed (py-spy dump --native --pid %d). Error: %s" % (pid, err), rank)
            doc.rec(t_dump + 0.2, "Pyspy failed (py-spy dump --pid %d). Error: %s" % (pid, err), rank)
            doc.rec(t_dump + 0.21, "All pyspy dump attempts failed for PID %d." % pid, rank)
            t_out = t_dump + rng.uniform(0.25, 0.5)
        else:
            doc.rec(t_dump, head_pyspy + stack + "\n", rank)
    doc.rec(
        t_out, "Scheduler watchdog timeout (self.watchdog_timeout=%s, self.soft=%s)" % (timeout, soft), rank
    )
    doc.raw(t_out + 0.001, ["", ""])
    return (t if dump else t_out), t_out


def sigquit(doc: Doc, t: float, rel: str) -> None:
    if rel == "0.4.6":
        doc.rec(t, "Received sigquit from a child process. It usually means the child failed.")
    else:
        doc.rec(
            t,
            "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=<frame at 0x7f2720b7e25b, file "
            "'/usr/lib/python3.12/selectors.py', line 468, code select>. It usually means one child failed.",
        )


# --------------------------------------------------------------------------- torch ProcessGroupNCCL lines
class Torch:
    """The ProcessGroupNCCL timeout sequence of one torch release, for one rank.

    `version`: "2.0" (no time, no [rankN]:, no NumelIn/NumelOut), "2.1" (no time, no [rankN]:, `[Rank R]`
    only), "2.2" ([rankN]: but no time), "2.4"
    (`[PG <id> Rank R]`), "2.6" (`[PG ID <id> PG GUID <guid>(<desc>) Rank R]`), "2.8" (2.6's prefix,
    `failure detected by watchdog` and Watchdog::runLoop frames)."""

    SRC = {  # source lines of the messages, per release (they move between builds)
        "2.0": {"timeout": 458, "some": 472, "down": 478, "term": 828},
        "2.1": {"timeout": 475, "some": 489, "down": 495, "term": 916},
        "2.2": {"timeout": 523, "some": 537, "down": 543, "term": 1182},
        "2.4": {"timeout": 607, "exc": 1664, "at": 1709, "some": 621, "down": 627, "term": 1515},
        "2.6": {"timeout": 616, "exc": 1785, "at": 1834, "some": 630, "down": 636, "term": 1595},
        "2.8": {"timeout": 684, "fail": 2395, "trace": 2402, "some": 2181, "down": 2187, "term": 2060},
    }

    def __init__(self, version: str, clock: Clock, rng: random.Random, *, rank_prefix: bool = True):
        self.v, self.clock, self.rng, self.rank_prefix = version, clock, rng, rank_prefix

    def glog(self, t: float, grank: int, src: int, msg: str, lvl: str = "E") -> str:
        pre = "[rank%d]:" % grank if self.rank_prefix and self.v not in ("2.0", "2.1") else ""
        if self.v in ("2.0", "2.1", "2.2"):
            return "%s[%s ProcessGroupNCCL.cpp:%d] %s" % (pre, lvl, src, msg)
        d = self.clock.dt(t)
        ns = d.microsecond * 1000 + (grank * 7919 + src * 31) % 1000
        return "%s[%s%d%02d %s.%09d ProcessGroupNCCL.cpp:%d] %s" % (
            pre,
            lvl,
            d.month,
            d.day,
            d.strftime("%H:%M:%S"),
            ns,
            src,
            msg,
        )

    def pg(self, pgid: int, guid: str, desc: str, prank: int) -> str:
        if self.v in ("2.0", "2.1", "2.2"):
            return "[Rank %d]" % prank
        if self.v == "2.4":
            return "[PG %d Rank %d]" % (pgid, prank)
        return "[PG ID %d PG GUID %s%s Rank %d]" % (pgid, guid, "(%s)" % desc if desc else "", prank)

    def work(self, seq: int, op: str, numel: int, timeout_ms: int) -> str:
        if self.v == "2.0":
            return "WorkNCCL(SeqNum=%d, OpType=%s, Timeout(ms)=%d)" % (seq, op, timeout_ms)
        return "WorkNCCL(SeqNum=%d, OpType=%s, NumelIn=%d, NumelOut=%d, Timeout(ms)=%d)" % (
            seq,
            op,
            numel,
            numel,
            timeout_ms,
        )

    def frames(self, where: str) -> list[str]:
        rng, lib = self.rng, "%s/torch/lib/" % SITE
        top = (
            (
                "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:%d "
                "(most recent call first):" % (self.SRC[self.v]["timeout"] + 2)
            )
            if where == "check"
            else (
                "Exception raised from ncclCommWatchdog at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:%d "
                "(most recent call first):" % (self.SRC[self.v]["term"] + 6)
            )
        )
        loop = (
            [
                "frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0xe58 (%s in %slibtorch_cuda.so)"
                % (addr(rng), lib),
                "frame #3: c10d::ProcessGroupNCCL::Watchdog::run() + 0xda (%s in %slibtorch_cuda.so)"
                % (addr(rng), lib),
            ]
            if self.v == "2.8"
            else [
                "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x329 (%s in %slibtorch_cuda.so)"
                % (addr(rng), lib),
                "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x137 (%s in %slibtorch_cuda.so)"
                % (addr(rng), lib),
            ]
        )
        if where != "check":
            return [
                top,
                "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (%s in %slibc10.so)"
                % (addr(rng), lib),
                "frame #1: <unknown function> + 0xe83b14 (%s in %slibtorch_cuda.so)" % (addr(rng), lib),
                "frame #2: <unknown function> + 0xd6df4 (%s in /lib/x86_64-linux-gnu/libstdc++.so.6)"
                % addr(rng),
                "frame #3: <unknown function> + 0x94ac3 (%s in /lib/x86_64-linux-gnu/libc.so.6)" % addr(rng),
                "frame #4: clone + 0x3f (%s in /lib/x86_64-linux-gnu/libc.so.6)" % addr(rng),
            ]
        return (
            [
                top,
                "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (%s in %slibc10.so)"
                % (addr(rng), lib),
                "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
                "std::ratio<1l, 1000l> > >) + 0x2b8 (%s in %slibtorch_cuda.so)" % (addr(rng), lib),
            ]
            + loop
            + [
                "frame #4: <unknown function> + 0xd6df4 (%s in /lib/x86_64-linux-gnu/libstdc++.so.6)"
                % addr(rng),
                "frame #5: <unknown function> + 0x94ac3 (%s in /lib/x86_64-linux-gnu/libc.so.6)" % addr(rng),
                "frame #6: clone + 0x3f (%s in /lib/x86_64-linux-gnu/libc.so.6)" % addr(rng),
            ]
        )

    def timeout_lines(
        self,
        t: float,
        grank: int,
        prank: int,
        pgid: int,
        guid: str,
        desc: str,
        seq: int,
        op: str,
        numel: int,
        timeout_ms: int,
        enq: int,
        done: int,
    ) -> list[tuple[float, list[str]]]:
        """The first report of a timed-out collective: (time, lines) records."""
        src, w = self.SRC[self.v], self.work(seq, op, numel, timeout_ms)
        ran = timeout_ms + self.rng.randint(5, 130)
        out = [
            (
                t,
                [
                    self.glog(
                        t,
                        grank,
                        src["timeout"],
                        "[Rank %d] Watchdog caught collective operation timeout: %s "
                        "ran for %d milliseconds before timing out." % (prank, w, ran),
                    )
                ],
            )
        ]
        pre = self.pg(pgid, guid, desc, prank)
        if "exc" in src:
            out.append(
                (
                    t + 0.0004,
                    [
                        self.glog(
                            t + 0.0004,
                            grank,
                            src["exc"],
                            "%s Exception (either an error or timeout) "
                            "detected by watchdog at work: %d, last enqueued NCCL work: %d, last "
                            "completed NCCL work: %d." % (pre, seq, enq, done),
                        )
                    ],
                )
            )
            out.append(
                (
                    t + 0.0005,
                    [
                        self.glog(
                            t + 0.0005,
                            grank,
                            src["at"],
                            "%s Timeout at NCCL work: %d, last "
                            "enqueued NCCL work: %d, last completed NCCL work: %d." % (pre, seq, enq, done),
                        )
                    ],
                )
            )
        if "fail" in src:
            out.append(
                (
                    t + 0.0004,
                    [
                        self.glog(
                            t + 0.0004,
                            grank,
                            src["fail"],
                            "%s  failure detected by watchdog at "
                            "work sequence id: %d PG status: last enqueued work: %d, last completed "
                            "work: %d" % (pre, seq, enq, done),
                        )
                    ],
                )
            )
            out.append(
                (
                    t + 0.0005,
                    [
                        self.glog(
                            t + 0.0005,
                            grank,
                            src["trace"],
                            "Stack trace of the failed collective "
                            "not found, potentially because FlightRecorder is disabled. You can "
                            "enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
                        )
                    ],
                )
            )
        self._last = (pre, w, ran, prank)
        return out

    def teardown_lines(self, t: float, grank: int) -> list[tuple[float, list[str]]]:
        """What follows 1-2 s later: the process is taken down (follows timeout_lines of the same rank)."""
        src = self.SRC[self.v]
        pre, w, ran, prank = self._last
        msg = (
            "[Rank %d] Watchdog caught collective operation timeout: %s ran for %d milliseconds before timing out."
            % (prank, w, ran)
        )
        head_ = (
            "[Rank %d] NCCL watchdog thread terminated with exception: " % prank
            if self.v in ("2.0", "2.1", "2.2")
            else ("%s Process group watchdog thread terminated with exception: " % pre)
        )
        what = "std::runtime_error" if self.v in ("2.0", "2.1") else "c10::DistBackendError"
        some = (
            "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
            "subsequent GPU operations might run on corrupted/incomplete data."
        )
        down = "To avoid data inconsistency, we are taking the entire process down."
        if self.v not in ("2.0", "2.1"):
            some, down = "[Rank %d] %s" % (prank, some), "[Rank %d] %s" % (prank, down)
        lines = [
            self.glog(t, grank, src["some"], some),
            self.glog(t + 0.0001, grank, src["down"], down),
            self.glog(t + 0.002, grank, src["term"], head_ + msg),
        ]
        lines += (
            self.frames("check")
            + ["", "terminate called after throwing an instance of '%s'" % what, "  what():  " + head_ + msg]
            + self.frames("check")
            + self.frames("watchdog")
        )
        lines += [""]
        return [(t, lines)]


# --------------------------------------------------------------------------- vLLM
def vllm_v1(clock: Clock, t: float, proc: str, pid: int, src: str, msg: str, lvl: str = "INFO") -> str:
    return "(%s pid=%d) %s %s [%s] %s" % (proc, pid, lvl, clock.dt(t).strftime("%m-%d %H:%M:%S"), src, msg)


def vllm_v0(clock: Clock, t: float, src: str, msg: str, lvl: str = "INFO") -> str:
    """vLLM before the bracketed file info: `INFO 03-02 09:14:05 metrics.py:351] ...`."""
    return "%s %s %s] %s" % (lvl, clock.dt(t).strftime("%m-%d %H:%M:%S"), src, msg)


def v1_stats(prompt: float, gen: float, running: int, waiting: int, kv: float, hit: float) -> str:
    return (
        "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d "
        "reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%"
        % (prompt, gen, running, waiting, kv, hit)
    )


def v0_stats(prompt: float, gen: float, running: int, pending: int, kv: float) -> str:
    return (
        "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, "
        "Swapped: 0 reqs, Pending: %d reqs, GPU KV cache usage: %.1f%%, CPU KV cache usage: 0.0%%."
        % (prompt, gen, running, pending, kv)
    )


SHM_V1 = (
    "No available shared memory broadcast block found in 60 seconds. This typically happens when some "
    "processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization)."
)


# --------------------------------------------------------------------------- faulthandler
def faulthandler_text(header: str, threads: list[tuple[str, bool, list[tuple[str, int, str]]]]) -> list[str]:
    out = ["Fatal Python error: %s" % header, ""]
    for tid, current, frames in threads:
        out.append("%s 0x%s (most recent call first):" % ("Current thread" if current else "Thread", tid))
        out += ['  File "%s", line %d in %s' % f for f in frames]
        out.append("")
    return out


def garble(rng: random.Random, streams: list[list[str]]) -> list[str]:
    """Several processes writing one stderr without line buffering: their bytes interleave in runs."""
    bufs = ["\n".join(s) + "\n" for s in streams]
    pos = [0] * len(bufs)
    out = []
    while any(p < len(b) for p, b in zip(pos, bufs, strict=True)):
        k = rng.choice([i for i, (p, b) in enumerate(zip(pos, bufs, strict=True)) if p < len(b)])
        n = rng.choice([3, 7, 12, 19, 26, 40, 64, 90])
        out.append(bufs[k][pos[k] : pos[k] + n])
        pos[k] += n
    return "".join(out).rstrip("\n").split("\n")


# --------------------------------------------------------------------------- Flight Recorder (pickle / JSON)
C10D = "%s/torch/distributed/distributed_c10d.py" % SITE
FR_FRAMES = {
    "all_reduce": [
        ("all_reduce", C10D, 2806),
        ("wrapper", "%s/torch/distributed/c10d_logger.py" % SITE, 81),
        ("_all_reduce_out_place", "%s/sglang/srt/distributed/parallel_state.py" % SITE, 512),
        ("all_reduce", "%s/sglang/srt/distributed/parallel_state.py" % SITE, 468),
        ("forward", "%s/sglang/srt/layers/linear.py" % SITE, 1385),
        ("event_loop_normal", "%s/sglang/srt/managers/scheduler.py" % SITE, 968),
    ],
    "broadcast": [
        ("broadcast", C10D, 2711),
        ("wrapper", "%s/torch/distributed/c10d_logger.py" % SITE, 81),
        ("broadcast_pyobj", "%s/sglang/srt/utils/common.py" % SITE, 1120),
        ("recv_requests", "%s/sglang/srt/managers/scheduler.py" % SITE, 1187),
        ("event_loop_normal", "%s/sglang/srt/managers/scheduler.py" % SITE, 960),
    ],
}


def fr_entry(
    rng: random.Random,
    *,
    rid: int,
    pgid: int,
    pg: tuple[str, str],
    seq: int,
    op: str,
    state: str,
    created: int,
    version: str,
    frames: bool,
    numel: int,
) -> dict:
    started = created + rng.randint(40_000, 400_000) if state in ("started", "completed") else None
    completed = started + rng.randint(500_000, 3_000_000) if state == "completed" and started else None
    size = [[1]] if op == "broadcast" else [[numel, 8192]]
    e = {
        "frames": [{"name": n, "filename": f, "line": ln} for n, f, ln in FR_FRAMES[op]] if frames else [],
        "record_id": rid,
        "pg_id": pgid,
        "process_group": pg,
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "nccl:%s" % op,
        "time_created_ns": created,
        "duration_ms": None,
        "input_sizes": size,
        "input_dtypes": ["BFloat16"],
        "output_sizes": size,
        "output_dtypes": ["BFloat16"],
        "state": state,
        "time_discovered_started_ns": started,
        "time_discovered_completed_ns": completed,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": False,
    }
    if version == "2.10":
        e["thread_id"] = str(140230000000000 + rng.randint(0, 4096))
        e["thread_name"] = "sglang::schedul"
    return e


def fr_status(enq: int, started: int, done: int, as_text: bool = False) -> dict:
    d = {
        "last_enqueued_collective": enq,
        "last_started_collective": started,
        "last_completed_collective": done,
    }
    return {k: str(v) for k, v in d.items()} if as_text else d


# --------------------------------------------------------------------------- NCCL RAS
def ras_text(
    version: str,
    cuda: str,
    nodes: int,
    per_node: int,
    groups: list[tuple[int, int, int, int, int, int, str, str]],
    errors: list[str],
    warnings: list[str],
    secs: float,
) -> list[str]:
    """`ncclras` output: header, job summary, communicators table, Errors and Warnings."""
    total = nodes * per_node
    out = [
        "NCCL version %s compiled with CUDA %s" % (version, cuda),
        "CUDA runtime version %s, driver version %s"
        % (cuda.replace(".", "0") + "0", cuda.replace(".", "0") + "0"),
        "",
        "Job summary",
        "===========",
        "",
        "  Nodes  Processes         GPUs  Processes     GPUs",
        "(total)   per node  per process    (total)  (total)",
        "%7d %10d %12d %10d %8d" % (nodes, per_node, 1, total, total),
        "",
        "Communicators... (%.2fs)" % secs,
        "=============",
        "",
        "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
        "    #  in group  per comm  per node  per comm  in group",
    ]
    for g, comms, nn, rpn, rpc, rig, status, err in groups:
        out.append("%5d%10d%10d%10d%10d%10d%10s  %6s" % (g, comms, nn, rpn, rpc, rig, status, err))
    out += (
        ["", "Errors", "======", ""]
        + errors
        + ([""] if errors else [])
        + ["Warnings", "========", ""]
        + warnings
    )
    return out


# --------------------------------------------------------------------------- truth helpers
def item(
    rule: str,
    ts: str | None,
    ranks,
    why: str,
    *,
    ts_end: str | None = None,
    ranks_alt=None,
    ts_alt=None,
    signature: str | None = None,
) -> dict:
    d = {"rule": rule, "ts": ts, "ts_end": ts_end, "ranks": list(ranks), "signature": signature}
    if ts_alt:
        d["ts_alt"] = list(ts_alt)
    if ranks_alt:
        d["ranks_alt"] = [list(x) for x in ranks_alt]
    d["why"] = why
    return d


def entry(scenario: str, expect: list[dict], allow: tuple[str, ...] = (), variation: str = "") -> dict:
    """Every scored rule neither expected nor allowed is forbidden (a signature-only allow keeps the rule
    forbidden for other signatures, as score.py reads it)."""
    exp = {x["rule"] for x in expect}
    forbid = [r for r in RULES if r not in exp and r not in allow]
    return {
        "scenario": scenario,
        "variation": variation,
        "expect": expect,
        "allow": list(allow),
        "forbid": forbid,
    }


def blind(E: Engine, onset: float, why: str) -> dict:
    """health-check-blind: first probe 200 after the onset (in a later second) to the last one."""
    after = sorted(t for t in E.probe_ok if math.floor(t) > math.floor(onset))
    return item("health-check-blind", E.iso(after[0]), [], why, ts_end=E.iso(after[-1]))


# =========================================================================== engines
# Each returns (Engine, truth entry).  Times are seconds from the engine's base datetime.


def fire_group(
    E: Engine, doc: Doc, t0: float, ranks: list[str], spread: float, pids: dict[str, int], **kw
) -> dict[str, tuple[float, float]]:
    """Every rank's watchdog fires within `spread` seconds of t0 (shuffled order); ranks in `spy_fail` cannot
    run py-spy."""
    rng = E.rng
    order = ranks[:]
    rng.shuffle(order)
    offs = sorted(rng.uniform(0, spread) for _ in order)
    fail = kw.pop("spy_fail", ())
    return {
        r: watchdog_fire(E, doc, t0 + o, r, pids[r], spy_fails=r in fail, **kw)
        for r, o in zip(order, offs, strict=True)
    }


def wgf_minute_straddle() -> tuple[Engine, dict]:
    """Only the timeout lines (grep -A2), 0.5.10 with SGLANG_LOG_MS=1, TP4 firing across a full hour."""
    E = Engine("ord2-llama70b-wgf-12", "0.5.10", datetime(2026, 3, 3, 14, 54, 40), ms=True)
    ranks = ["TP0", "TP1", "TP2", "TP3"]
    t0 = 319.1  # the four timeout lines fall between 14:59:59.5 and 15:00:00.5
    fired = fire_group(
        E,
        E.doc,
        t0,
        ranks,
        0.75,
        {r: 61200 + i for i, r in enumerate(ranks)},
        batch=9,
        reqs="",
        total=0,
        inflight=0,
        evictable=0,
        dump=False,
    )
    first = min(f for f, _ in fired.values())
    assert E.clock.dt(first).minute == 59 and E.clock.dt(max(o for _, o in fired.values())).minute == 0
    sigquit(E.doc, max(o for _, o in fired.values()) + 5.02, E.rel)
    body = cut_mid_token(E.doc.lines(), 0.55)
    numbered = p_lineno(body, "%d:%s", 118204)
    half = len(numbered) // 2
    lines = (
        ["We lost the whole TP group on ord2-gpu12 right at 15:00. grep for the watchdog:", "", "```text"]
        + texts(numbered[:half])
        + ["```", "", "and the rest of the same grep (after the restart notice):", "", "```"]
        + texts(numbered[half:])
        + ["```", "", "Any idea what to capture next?"]
    )
    E.write("issue-comment.md", lines)
    E.stamp_file("issue-comment.md", E.clock.utc(t0) + timedelta(hours=7, minutes=12))
    ranks_all = sorted(fired)
    return E, entry(
        "watchdog-group-freeze",
        [
            item(
                "all-ranks-frozen",
                None,
                ranks_all,
                "every rank's watchdog fired within 1 s (14:59:59.6 to "
                "15:00:00.3: together, though the clock second and minute differ)",
            ),
            item(
                "watchdog-kill",
                E.iso(first, True),
                ranks_all,
                "hard scheduler watchdog (0.5.10 text) on all four",
            ),
        ],
        allow=("stall-onset",),
        variation="0.5.10 timeout lines only, ms, firing across 14:59:59/15:00:00, "
        "colon line numbers in two fenced blocks with prose between, last line cut",
    )


def wgf_journald_quote() -> tuple[Engine, dict]:
    """0.5.2 TP8 EP8: every rank's one-line debug record, py-spy and `Watchdog timeout`, journald short-iso
    (UTC+8) pasted in a Markdown quote."""
    E = Engine("bom3-qwen235b-wgf-31", "0.5.2", datetime(2025, 11, 21, 4, 17, 5), tz=8.0)
    ranks = ["TP%d EP%d" % (i, i) for i in range(8)]
    S = Traffic(E, [], max_tokens=731_000)
    S.active = [S.new_req(0, 0.5) for _ in range(14)]
    for r in S.active:
        r.gen = E.rng.randint(20, 300)
    t0 = 83.45  # fires from :28.45 to :29.3: two clock seconds
    fired = fire_group(
        E,
        E.doc,
        t0,
        ranks,
        0.8,
        {r: 90411 + i for i, r in enumerate(ranks)},
        batch=len(S.active),
        reqs=S.reqs_repr(6),
        total=S.max_tokens,
        inflight=S.tokens(),
        evictable=41_230,
    )
    end = max(o for _, o in fired.values())
    sigquit(E.doc, end + 5.1, E.rel)
    # the person pasted seven of the eight dumps (TP5's scrolled away): drop that rank's records
    E.doc.ev = [
        e for e in E.doc.ev if "TP5 EP5]" not in e[2][0] and "scheduler_TP5_EP5" not in "".join(e[2][:2])
    ]
    visible = [r for r in ranks if r != "TP5 EP5"]
    fired = {r: v for r, v in fired.items() if r in visible}
    body = w_journald_iso(E, E.doc.lines(), "bom3-gpu31", 90400)
    lines = [
        "Pod bom3-qwen235b-31 went unresponsive, `journalctl -u sglang -o short-iso` around the time:",
        "",
    ]
    lines += texts(p_quote(body))
    lines += ["", "(nothing before that but normal traffic)"]
    E.write("journal-excerpt.txt", lines)
    E.stamp_file("journal-excerpt.txt", E.clock.utc(end) + timedelta(hours=2, minutes=3))
    first_rank = min(fired, key=lambda r: fired[r][0])
    return E, entry(
        "watchdog-group-freeze",
        [
            item(
                "all-ranks-frozen",
                None,
                visible,
                "the seven visible watchdogs fired within 1 s, across two clock seconds",
            ),
            item(
                "watchdog-kill",
                E.iso(fired[first_rank][0]),
                visible,
                "0.5.2 watchdog: debug record, py-spy, timeout",
                ts_alt=[E.iso(fired[first_rank][1])],
            ),
        ],
        allow=("stall-onset", "busy-leak-report"),
        variation="0.5.2 `TPn EPn` tags, one-line debug record with pool "
        "sizes, seven of eight ranks pasted (the missing one is not judged), journald short-iso in a Markdown quote",
    )


def wgf_cri_pp() -> tuple[Engine, dict]:
    """0.5.23 PP2 x TP4 (`PP1 TP3 EP3`), dumps with Req lines longer than CRI's 16 KiB (P/F records)."""
    E = Engine("hel2-dsv3-wgf-08", "0.5.23", datetime(2026, 7, 30, 22, 40, 11), ms=True, tz=3.0)
    ranks = ["PP%d TP%d EP%d" % (p, t, t) for p in range(2) for t in range(4)]
    S = Traffic(E, [], max_tokens=402_000)
    S.active = [S.new_req(0, 0.5) for _ in range(40)]
    for r in S.active:
        r.gen = E.rng.randint(50, 400)
    fired = fire_group(
        E,
        E.doc,
        12.3,
        ranks,
        0.85,
        {r: 7700 + i for i, r in enumerate(ranks)},
        batch=40,
        reqs=S.reqs_repr(90),
        total=S.max_tokens,
        inflight=S.tokens(),
        evictable=22_511,
        where="allreduce",
        spy_fail=("PP1 TP2 EP2", "PP0 TP3 EP3"),
    )
    end = max(o for _, o in fired.values())
    sigquit(E.doc, end + 5.3, E.rel)
    E.doc.rec(end + 5.31, "Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
    lines = w_cri(E, E.doc.lines())
    assert any(" stderr P " in s for _, s in lines)
    E.write(
        "0.log",
        ["From /var/log/pods/llm_dsv3-0_3c1f/sglang/0.log on hel2-gpu08 (both PP stages):", "", "```"]
        + texts(lines)
        + ["```", "", "The pod was restarted by the liveness probe afterwards."],
    )
    E.stamp_file("0.log", E.clock.utc(end + 10.4))
    first_rank = min(fired, key=lambda r: fired[r][0])
    return E, entry(
        "watchdog-group-freeze",
        [
            item(
                "all-ranks-frozen",
                None,
                ranks,
                "eight ranks (two PP stages) fired within 1 s; all in the same all_reduce",
            ),
            item(
                "watchdog-kill",
                E.iso(fired[first_rank][0], True),
                ranks,
                "0.5.23 hard watchdog on every rank",
                ts_alt=[E.iso(fired[first_rank][1], True)],
            ),
        ],
        allow=("stall-onset", "busy-leak-report"),
        variation="0.5.23 `PPp TPt EPt` tags, CRI pod-file lines with P/F "
        "records (Req lines > 16 KiB) pasted in a fence between prose, ms, main threads in all_reduce, py-spy "
        "refused on two ranks",
    )


def wsr_split_viewers() -> tuple[Engine, dict]:
    """0.5.5 TP5 of TP8 EP8 alone; batch lines of TP0 before; split in two pastes from two viewers."""
    E = Engine("fra4-dsv3-wsr-17", "0.5.5", datetime(2026, 2, 17, 9, 2, 0))
    S = Traffic(E, ["TP0 EP0"], max_tokens=612_000, step_ms=(30, 0.6))
    t = S.run(0, 200, 1.2, p_stream=0.6, drain=False)
    stall = t + 3.0
    S.run(t, stall + 60, 1.2, p_stream=0.6, stall=stall)
    onset = S.last_progress()
    rank = "TP5 EP5"
    first, tout = watchdog_fire(
        E,
        E.doc,
        onset + 300 + 171.4,
        rank,
        81225,
        batch=max(1, len(S.active)),
        reqs=S.reqs_repr(30),
        total=S.max_tokens,
        inflight=S.tokens(),
        evictable=30_077,
    )
    sigquit(E.doc, tout + 5.2, E.rel)
    body = E.doc.lines()
    start = max(0, [i for i, (tt, _) in enumerate(body) if tt >= onset - 40][0])
    body = body[start:]
    k = [i for i, (_, s) in enumerate(body) if s.startswith("Thread ")][
        0
    ] + 6  # part 1 ends inside the py-spy text
    part1 = cut_mid_token(body[:k], 0.6)
    part2 = body[k + 4 :]  # what the second screenful began with (a few lines lost between)
    E.write("watchdog_tp5.part1.txt", texts(p_lineno(part1, "[%d] %s", 40212)))
    E.write("watchdog_tp5.part2.txt", texts(p_lineno(part2, "%d:%s", 40212 + k + 4)))
    E.stamp_file("watchdog_tp5.part1.txt", E.clock.utc(tout) + timedelta(hours=3, minutes=1))
    E.stamp_file("watchdog_tp5.part2.txt", E.clock.utc(tout) + timedelta(hours=3, minutes=2))
    return E, entry(
        "watchdog-single-rank",
        [
            item(
                "watchdog-kill",
                E.iso(first),
                [rank],
                "one rank's 0.5.5 watchdog record, py-spy and timeout",
                ts_alt=[E.iso(tout)],
            ),
        ],
        allow=("stall-onset", "busy-leak-report"),
        variation="0.5.5 three-line record, `TP5 EP5`, TP0 batch lines "
        "before, two parts from two viewers ([N] and N:), part 1 cut mid-token, lines lost between",
    )


def wsr_midnight_compose() -> tuple[Engine, dict]:
    """0.5.23 TP3 alone, firing at 23:59:59.6; the timeout line is printed on the next day."""
    E = Engine("sjc3-qwen32b-wsr-05", "0.5.23", datetime(2026, 12, 31, 23, 58, 0), ms=True)
    S = Traffic(E, [], max_tokens=520_000)
    S.active = [S.new_req(0, 0.5) for _ in range(6)]
    for r in S.active:
        r.gen = E.rng.randint(10, 90)
    rng = E.rng
    first = 119.62
    stack = pyspy(
        48113,
        "sglang::scheduler_TP3",
        [(48113, "active", "MainThread", main_stack(rng, "sync", True))]
        + helper_threads(rng, 48113, "sglang/srt/utils/cudacore_pyspy_dump_utils.py:88"),
    )
    E.doc.rec(
        first,
        "Scheduler debug info:\nscheduler.cur_batch_for_debug.batch_size()=6\n"
        "scheduler.cur_batch_for_debug.reqs=%s\n[full] total=%d, available=%d, evictable=%d, "
        "protected=0, session_held=0, uncached=0"
        % (S.reqs_repr(40), S.max_tokens, S.max_tokens - S.tokens() - 9_310, 9_310),
        "TP3",
    )
    E.doc.rec(
        first + 0.31, "Pyspy dump for PID 48113 (py-spy dump --native --pid 48113):\n" + stack + "\n", "TP3"
    )
    tout = first + 0.55
    E.doc.rec(tout, "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "TP3")
    E.doc.raw(tout + 0.001, ["", ""])
    assert E.clock.dt(first).day == 31 and E.clock.dt(tout).day == 1
    sigquit(E.doc, tout + 5.03, E.rel)
    body = cut_mid_token(p_compose(E.doc.lines(), "sglang-1"), 0.7)
    lines = ["New year's eve page: sjc3 32B server died, compose logs of the one rank that complained:", ""]
    lines += texts(p_quote(body))
    E.write("page.md", lines)
    E.stamp_file("page.md", E.clock.utc(tout) + timedelta(minutes=38))
    return E, entry(
        "watchdog-single-rank",
        [
            item(
                "watchdog-kill",
                E.iso(first, True),
                ["TP3"],
                "TP3's 0.5.23 watchdog; fired 23:59:59.6, timeout line on the next day",
                ts_alt=[E.iso(tout, True)],
            ),
        ],
        allow=("stall-onset", "busy-leak-report"),
        variation="0.5.23, one rank of TP8, across midnight into a new "
        "year, compose prefix in a Markdown quote, last line cut",
    )


def wsr_viewer_ts_pp() -> tuple[Engine, dict]:
    """0.5.10 `PP1 TP2` alone after PP0 TP0's batch lines, shown in a viewer with its own time column."""
    E = Engine("gru2-llama70b-wsr-36", "0.5.10", datetime(2025, 10, 8, 17, 20, 3))
    S = Traffic(E, ["PP0 TP0"], max_tokens=288_000, step_ms=(26, 0.5))
    t = S.run(0, 150, 1.6, p_stream=0.7, drain=False)
    stall = t + 2.2
    S.run(t, stall + 200, 1.6, p_stream=0.7, stall=stall)
    onset = S.last_progress()
    first, tout = watchdog_fire(
        E,
        E.doc,
        onset + 300 + 84.2,
        "PP1 TP2",
        55102,
        batch=max(1, len(S.active)),
        reqs=S.reqs_repr(20),
        total=S.max_tokens,
        inflight=S.tokens(),
        evictable=11_904,
    )
    sigquit(E.doc, tout + 5.1, E.rel)
    body = [x for x in E.doc.lines() if x[0] >= onset - 25]
    E.write("grafana-export.log", texts(p_viewer_ts(E, body, 1.0)))
    E.stamp_file("grafana-export.log", E.clock.utc(tout) + timedelta(hours=1))
    return E, entry(
        "watchdog-single-rank",
        [
            item(
                "watchdog-kill",
                E.iso(first),
                ["PP1 TP2"],
                "PP1 TP2's 0.5.10 watchdog (debug info, py-spy, timeout)",
                ts_alt=[E.iso(tout)],
            ),
        ],
        allow=("stall-onset", "busy-leak-report"),
        variation="0.5.10 `PP1 TP2`, PP0 TP0 batch lines and streaming "
        "POSTs before, a viewer's time column one hour ahead",
    )


def stall_run(
    S: Traffic,
    t0: float,
    busy: float,
    rate: float,
    after: float,
    *,
    p_stream: float = 0.6,
    min_running: int = 20,
    after_rate: float = 0.25,
) -> tuple[float, float]:
    """Serve `busy` seconds, then freeze with at least `min_running` requests in the batch; arrivals go on for
    `after` seconds.  Returns (last batch line, end of the evidence)."""
    t = S.run(t0, t0 + busy, rate, p_stream=p_stream, drain=False)
    while S.last_running < min_running:  # keep serving until the batch is big (the rng decides how long)
        t = S.run(t, t + 5, rate, p_stream=p_stream, drain=False)
    stall = t + S.E.rng.uniform(0.4, 1.2)
    S.run(t, stall + 1, rate, p_stream=p_stream, stall=stall)
    S.pending(poisson(S.E.rng, stall + 1, stall + after, after_rate), p_stream)  # fewer: clients back off
    return S.last_progress(), stall + after


def lts_lb_viewer_ts() -> tuple[Engine, dict]:
    """0.5.2 TP2 stalls with ~40 running; a load balancer keeps asking /get_model_info every 15 s."""
    E = Engine("lax1-llama8b-lts-03", "0.5.2", datetime(2025, 9, 2, 6, 11, 30), tz=-7.0)
    S = Traffic(E, ["TP0"], max_tokens=980_000, step_ms=(11, 0.25), out_len=(100, 1000))
    onset, end = stall_run(S, 0, 150, 4.0, 330, p_stream=0.75, min_running=30, after_rate=0.4)
    E.probe(0, end, "/get_model_info", 15.0, "10.0.3.7")
    body = [x for x in E.doc.lines() if x[0] >= onset - 60]
    lines = p_viewer_ts(E, p_compose(body, "llm-8b-1"), 2.0)
    E.write("lax1-export.txt", texts(lines))
    E.stamp_file("lax1-export.txt", E.clock.utc(end) + timedelta(minutes=17))
    return E, entry(
        "log-tail-stall",
        [
            item(
                "stall-onset",
                E.iso(onset),
                [],
                "last batch line (#running-req %d) at the normal cadence, then "
                "nothing for %.0f s while requests keep arriving" % (S.last_running, end - onset),
            ),
            blind(E, onset, "the load balancer's /get_model_info probe (every 15 s) kept answering 200"),
        ],
        variation="0.5.2 `Decode batch. ` with trailing `, `, LB probe on /get_model_info, compose prefix under a "
        "viewer's time column (two hours ahead)",
    )


def lts_dp_metrics_kubectl() -> tuple[Engine, dict]:
    """0.5.23 DP attention, four DP leaders stop together; Prometheus scrapes /metrics; hard watchdog later."""
    E = Engine("ams2-qwen3moe-lts-21", "0.5.23", datetime(2026, 5, 19, 16, 3, 12), ms=True, tz=2.0)
    ranks = ["DP%d TP%d EP%d" % (i, i, i) for i in range(4)]
    leaders = [
        Traffic(
            E,
            [r],
            max_tokens=1_204_000,
            step_ms=(14, 0.3),
            out_len=(100, 900),
            clients=("10.31.0.%d" % (10 + i),),
        )
        for i, r in enumerate(ranks)
    ]
    ts = []
    for S in leaders:
        t = S.run(0, 120, 1.6, p_stream=0.8, drain=False)
        while S.last_running < 12:
            t = S.run(t, t + 5, 1.6, p_stream=0.8, drain=False)
        ts.append(t)
    stall = max(ts) + 0.3
    for S, t in zip(leaders, ts, strict=True):
        S.run(t, stall + 1, 1.6, p_stream=0.8, stall=stall)
        S.pending(poisson(E.rng, stall + 1, stall + 420, 0.05), 0.8)
    lasts = [S.last_progress() for S in leaders]
    onset = max(lasts)
    pids = {r: 20410 + i for i, r in enumerate(ranks)}
    S = max(leaders, key=lambda x: len(x.active))
    fired = fire_group(
        E,
        E.doc,
        onset + 300 + 133.2,
        ranks,
        0.6,
        pids,
        batch=max(1, len(S.active)),
        reqs=S.reqs_repr(16),
        total=S.max_tokens,
        inflight=S.tokens(),
        evictable=51_023,
    )
    end = max(o for _, o in fired.values()) + 5.4
    sigquit(E.doc, end, E.rel)
    E.probe(0, end - 1, "/metrics", 15.0, "10.31.255.4")
    body = [x for x in E.doc.lines() if x[0] >= onset - 45]
    lines = texts(w_kubectl(E, body))
    out = [
        "Decode cluster ams2 stopped serving; `kubectl logs --timestamps` of the leader pod:",
        "",
        "```log",
    ]
    out += lines + ["```", "", "It never recovered, we deleted the pod after the watchdog fired."]
    E.write("kubectl-logs.md", out)
    E.stamp_file("kubectl-logs.md", E.clock.utc(end) + timedelta(minutes=44))
    first_rank = min(fired, key=lambda r: fired[r][0])
    return E, entry(
        "log-tail-stall",
        [
            item(
                "stall-onset",
                E.iso(onset, True),
                [],
                "all four DP leaders' batch lines stop within %.2f s with "
                "requests running" % (max(lasts) - min(lasts)),
                ts_alt=[E.iso(min(lasts), True)],
            ),
            item(
                "watchdog-kill",
                E.iso(fired[first_rank][0], True),
                ranks,
                "hard watchdog on all four ranks",
                ts_alt=[E.iso(fired[first_rank][1], True)],
            ),
        ],
        allow=("all-ranks-frozen", "busy-leak-report", "health-check-blind"),
        variation="0.5.23 DP attention (four `DPi TPi EPi` leaders print batch lines), a Prometheus /metrics scrape "
        "as the only steady GET (a liveness probe by behaviour, or not one: health-check-blind allowed, not "
        "required), kubectl --timestamps in a fenced block",
    )


def lts_journald_pipe() -> tuple[Engine, dict]:
    """0.5.10 TP8 stalls at 07:59:59.9; /health 200 every 5 s; journald short, numbered by a viewer, cut."""
    E = Engine("nrt2-kimik2-lts-44", "0.5.10", datetime(2026, 1, 8, 7, 54, 10), ms=True, tz=9.0)
    S = Traffic(E, ["TP0"], max_tokens=1_502_000, step_ms=(18, 0.35), out_len=(100, 1000))
    t = S.run(0, 200, 3.5, p_stream=0.7, drain=False)
    while S.last_running < 25:
        t = S.run(t, t + 5, 3.5, p_stream=0.7, drain=False)
    # the first window planned after 349.5 s (07:59:59.5) is the last one printed
    while True:
        plan_end = S.plan(t)[0]
        if plan_end >= 349.5:
            break
        t = S.run(t, plan_end, 3.5, p_stream=0.7, drain=False)
    end = t + 600
    S.run(t, t + 1, 3.5, p_stream=0.7, stall=t + 0.05)
    S.pending(poisson(E.rng, t + 1, end, 0.3), 0.7)
    onset = S.last_progress()
    E.probe(0, end, "/health", 5.0, "127.0.0.1")
    body = [x for x in E.doc.lines() if x[0] >= onset - 50]
    lines = p_lineno(w_journald_short(E, body, "nrt2-gpu44", 3120), " %6d | %s", 207715)
    lines = cut_mid_token(lines, 0.4)
    t_first, first = lines[0]
    lines[0] = (t_first, first[len(first) * 2 // 3 :])  # the selection began inside a line
    E.write("journal.txt", texts(lines))
    E.stamp_file("journal.txt", E.clock.utc(end) + timedelta(minutes=5))
    return E, entry(
        "log-tail-stall",
        [
            item(
                "stall-onset",
                E.iso(onset, True),
                [],
                "last Decode line (#running-req %d), then only /health and "
                "streaming POSTs for ten minutes" % S.last_running,
            ),
            blind(E, onset, "/health (generation off) kept answering 200 every 5 s"),
        ],
        variation="0.5.10 ms, stall at the turn of a minute, journald short (no year) under viewer `N | ` numbers, "
        "first line begun mid-line, last line cut",
    )


def lti_tail_compose_fence() -> tuple[Engine, dict]:
    """0.5.10 MTP: traffic ends, running tails off to a few, then /health every 5 s for six minutes."""
    E = Engine("sin3-qwen3-lti-09", "0.5.10", datetime(2026, 2, 9, 6, 31, 2), tz=8.0)
    S = Traffic(
        E, ["TP0"], max_tokens=890_000, step_ms=(16, 0.3), spec=True, paths=("/generate",), out_len=(80, 900)
    )
    t = S.run(0, 200, 5.0, p_stream=0.2, drain=True)
    last = S.last_progress()
    end = t + 370
    E.probe(0, end, "/health", 5.0, "10.0.1.216")
    body = [x for x in E.doc.lines() if x[0] >= last - 90]
    lines = p_fence(p_compose(body, "inference-1"), "python", [], [])
    E.write("paste.txt", texts(lines))
    E.stamp_file("paste.txt", E.clock.utc(end) + timedelta(minutes=33))
    return E, entry(
        "log-tail-idle",
        [],
        variation="0.5.10 MTP decode lines, running tails off with non-streaming "
        "completions logged, then only /health; compose prefix in a ```python fence",
    )


def lti_slow_prefill_quote() -> tuple[Engine, dict]:
    """0.5.23 a 131072-token prefill takes 74 s (probes and POSTs go on), progress resumes, traffic ends."""
    E = Engine("cdg1-llama70b-lti-27", "0.5.23", datetime(2026, 6, 22, 13, 40, 55), ms=True, tz=2.0)
    S = Traffic(E, ["TP0"], max_tokens=640_000, step_ms=(22, 0.5), iters=True)
    t = S.run(0, 120, 1.5, p_stream=0.6, drain=False)
    big = S.new_req(t + 0.1, 0.0)
    big.inp, big.out = 131_072, 300
    slow = 74.3
    # the prefill line prints when the forward finishes (0.5.10+): nothing at all for 74 s before it
    for ta in poisson(E.rng, t + 0.5, t + slow - 1, 0.05):
        E.access(ta + 0.02, "10.8.0.33", "POST", "/v1/chat/completions", 200)
    gap_start = S.last_progress()
    S.admit(t + 0.1, t + slow, 0.0, req=big, new_token=131_072)
    t = S.run(t + slow + 0.2, t + slow + 160, 1.3, p_stream=0.6, drain=True)
    end = t + 300
    E.probe(0, end, "/v1/models", 10.0, "10.8.0.2")
    body = [x for x in E.doc.lines() if x[0] >= gap_start - 70]
    lines = ["Is this a hang? There was a ~75 s gap with nothing but probes, then it continued.", ""]
    lines += texts(p_quote(w_journald_iso(E, body, "cdg1-gpu27", 18822)))
    E.write("question.md", lines)
    E.stamp_file("question.md", E.clock.utc(end) + timedelta(hours=1, minutes=8))
    return E, entry(
        "log-tail-idle",
        [],
        variation="0.5.23 `Prefill batch [N], ` with #pending-token, a 74 s "
        "131072-token prefill (slow, not stalled) then progress and an idle tail with /v1/models probes; "
        "journald short-iso in a Markdown quote",
    )


def lti_ping_wrapped() -> tuple[Engine, dict]:
    """0.4.6 TP2 goes idle; an ALB health-checks /ping every 30 s; a tmux capture wrapped at 120 columns,
    then numbered by a viewer."""
    E = Engine("yyz1-gptoss-lti-14", "0.4.6", datetime(2025, 5, 14, 20, 2, 44), tz=-4.0)
    S = Traffic(
        E, ["TP0"], max_tokens=330_000, step_ms=(25, 0.6), paths=("/generate", "/v1/chat/completions")
    )
    t = S.run(0, 200, 2.5, p_stream=0.4, drain=True)
    last = S.last_progress()
    end = t + 720
    E.probe(0, end, "/ping", 30.0, "10.0.0.147")
    body = [x for x in E.doc.lines() if x[0] >= last - 80]
    wrapped = p_hard_wrap(body, 120)
    assert sum(1 for _, s in wrapped if len(s) == 120) >= 10
    E.write("tmux-capture.txt", texts(p_lineno(wrapped, "%6d\t%s", 5521)))
    E.stamp_file("tmux-capture.txt", E.clock.utc(end) + timedelta(minutes=2))
    return E, entry(
        "log-tail-idle",
        [],
        variation="0.4.6 `Decode batch. ` without trailing comma, SageMaker-style "
        "/ping every 30 s from the load balancer, lines hard-wrapped at 120 columns, viewer tab "
        "numbers",
    )


def soft_reps(
    E: Engine,
    doc: Doc,
    first: float,
    period: float,
    reps: int,
    ranks: list[str],
    pids: dict[str, int],
    S: Traffic,
    timeout: str,
) -> list[dict[str, tuple[float, float]]]:
    """A soft watchdog re-arms and dumps again every ~timeout while the batch stays stuck."""
    out, t = [], first
    for k in range(reps):
        spread = 0.9 if k % 2 else 0.5
        out.append(
            fire_group(
                E,
                doc,
                t,
                ranks,
                spread,
                pids,
                batch=max(1, len(S.active)),
                reqs=S.reqs_repr(8),
                total=S.max_tokens,
                inflight=S.tokens(),
                evictable=31_877,
                soft=True,
                timeout=timeout,
            )
        )
        t += period + E.rng.uniform(0.2, 2.5)
    return out


def rsw_vector() -> tuple[Engine, dict]:
    """0.5.23 TP4, soft watchdog at 120 s repeats six times; Vector JSON lines."""
    E = Engine("pdx2-qwen3moe-rsw-33", "0.5.23", datetime(2026, 8, 11, 2, 47, 30), ms=True)
    S = Traffic(E, ["MOE_DP0 TP0 EP0"], max_tokens=850_000, step_ms=(15, 0.3), out_len=(100, 900))
    onset, _ = stall_run(S, 0, 120, 2.0, 30, p_stream=0.8, min_running=10, after_rate=0.1)
    ranks = ["MOE_DP%d TP%d EP%d" % (i // 2, i, i) for i in range(4)]  # --moe-dp-size 2 (0.5.10+ tag order)
    pids = {r: 1185480 + i for i, r in enumerate(ranks)}
    reps = soft_reps(E, E.doc, onset + 120 + 71.3, 120.0, 6, ranks, pids, S, "120.0")
    end = max(o for _, o in reps[-1].values()) + 3
    S.pending(poisson(E.rng, onset + 31, end, 0.03), 0.8)
    E.probe(0, onset - 0.5, "/health_generate", 10.0, "127.0.0.1")  # after the stall it never answers
    body = [x for x in E.doc.lines() if x[0] >= onset - 40]
    E.write("vector-sglang.jsonl", texts(w_vector(E, body, "sglang-qwen3moe-0")))
    E.stamp_file("vector-sglang.jsonl", E.clock.utc(end) + timedelta(minutes=20))
    first_rank = min(reps[0], key=lambda r: reps[0][r][0])
    return E, entry(
        "repeated-soft-watchdog",
        [
            item(
                "stall-onset",
                E.iso(onset, True),
                [],
                "last batch line (#running-req %d); the soft watchdog then "
                "fires while armed" % S.last_running,
            ),
            item(
                "watchdog-kill",
                E.iso(reps[0][first_rank][0], True),
                ranks,
                "first soft-watchdog dump; the %d later "
                "ones (every ~120 s, no progress between) are the same episode" % (len(reps) - 1),
                ts_alt=[E.iso(reps[0][first_rank][1], True)],
            ),
        ],
        allow=("busy-leak-report", "all-ranks-frozen"),
        variation="0.5.23 `MOE_DPm TPt EPt` tags, soft watchdog with a 120.0 s timeout, six "
        "repetitions, /health_generate answered only before the stall, Vector JSON lines",
    )


def rsw_quote_compose_pp() -> tuple[Engine, dict]:
    """0.5.10 PP2 x TP2 (`PP1 TP0`), soft watchdog every 300 s, five repetitions; compose in a quote."""
    E = Engine("icn1-glm45-rsw-02", "0.5.10", datetime(2026, 4, 3, 22, 9, 41), ms=True, tz=9.0)
    S = Traffic(E, ["PP0 TP0", "PP1 TP0"], max_tokens=410_000, step_ms=(24, 0.4), out_len=(100, 900))
    onset, _ = stall_run(S, 0, 100, 1.6, 20, p_stream=0.7, min_running=12, after_rate=0.1)
    ranks = ["PP%d TP%d" % (p, t) for p in range(2) for t in range(2)]
    pids = {r: 3301 + i for i, r in enumerate(ranks)}
    reps = soft_reps(E, E.doc, onset + 300 + 188.0, 300.0, 5, ranks, pids, S, "300")
    end = max(o for _, o in reps[-1].values()) + 2
    S.pending(poisson(E.rng, onset + 21, end, 0.01), 0.7)
    body = [x for x in E.doc.lines() if x[0] >= onset - 30]
    lines = ["Soft watchdog keeps dumping on icn1-glm45-02 but nothing restarts it:", ""]
    lines += texts(p_quote(p_compose(body, "sglang-glm-1")))
    E.write("soft-watchdog.md", lines)
    E.stamp_file("soft-watchdog.md", E.clock.utc(end) + timedelta(hours=2))
    first_rank = min(reps[0], key=lambda r: reps[0][r][0])
    return E, entry(
        "repeated-soft-watchdog",
        [
            item(
                "stall-onset",
                E.iso(onset, True),
                [],
                "both PP stages' batch lines stop; the soft watchdog fires while armed",
            ),
            item(
                "watchdog-kill",
                E.iso(reps[0][first_rank][0], True),
                ranks,
                "first soft-watchdog dump of the four ranks; four repetitions follow, one episode",
                ts_alt=[E.iso(reps[0][first_rank][1], True)],
            ),
        ],
        allow=("busy-leak-report", "all-ranks-frozen"),
        variation="0.5.10 `PPp TPt` tags, both PP stage leaders "
        "log batch lines, soft=True every 300 s, compose prefix inside a Markdown quote",
    )


def idle_cycles(E: Engine, S: Traffic, cycles: int, warn) -> list[float]:
    """Busy periods, each followed by idle time in which the non-strict idle check warns (once or twice)."""
    t, firsts = 0.0, []
    for _ in range(cycles):
        t = S.run(t, t + E.rng.uniform(40, 90), E.rng.uniform(1.0, 2.5), p_stream=0.5, drain=True)
        t_idle = t + E.rng.uniform(0.05, 0.4)
        firsts.append(t_idle)
        warn(t_idle)
        if E.rng.random() < 0.6:
            warn(t_idle + E.rng.uniform(35, 80))
        t = t_idle + E.rng.uniform(90, 140)
    return firsts


def rilw_issue_fence() -> tuple[Engine, dict]:
    """0.5.10 TP2: the non-strict idle check warns at every idle period between busy ones."""
    E = Engine("nrt3-qwen72b-rilw-19", "0.5.10", datetime(2026, 6, 30, 8, 15, 0), ms=True, tz=9.0)
    S = Traffic(E, ["TP0"], max_tokens=226_498, step_ms=(28, 0.6), out_len=(40, 500))
    leaked = 1_587
    ranks = ["TP0", "TP1"]

    def warn(t: float) -> None:
        evict = E.rng.randint(20_000, 60_000)
        for i, r in enumerate(ranks):
            E.doc.rec(
                t + i * 0.011 + E.rng.uniform(0, 0.01),
                "token_to_kv_pool_allocator memory leak detected! "
                "self.max_total_num_tokens=%d, available_size=%d, evictable_size=%d, protected_size=0, "
                "session_held=0" % (S.max_tokens, S.max_tokens - evict - leaked, evict),
                r,
            )

    firsts = idle_cycles(E, S, 4, warn)
    end = firsts[-1] + 60
    lines = [
        "**Environment**: sglang 0.5.10, `SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE=0`, TP2",
        "",
        "The warning below shows up every time traffic stops. Log excerpt:",
        "",
        "```text",
    ]
    lines += texts(E.doc.lines()) + ["```", "", "Is this a real leak?"]
    E.write("issue.md", lines, crlf=True)
    E.stamp_file("issue.md", E.clock.utc(end) + timedelta(hours=5))
    first = min(t for t, _, g in E.doc.ev if "leak detected" in g[0])
    return E, entry(
        "repeated-idle-leak-warning",
        [
            item(
                "idle-memory-leak",
                E.iso(first, True),
                ranks,
                "the non-strict idle check reports the same %d-token "
                "shortfall on both ranks at every idle period: one leak" % leaked,
            ),
        ],
        variation="0.5.10 `memory leak detected!` warning with session_held, four busy/idle cycles, ms, an issue "
        "body with a ```text fence, CRLF",
    )


def rilw_kubectl_subset() -> tuple[Engine, dict]:
    """0.5.23 TP4: only TP0 and TP2 leak; `pool memory leak detected! [full] ...` at each idle period."""
    E = Engine("mxp1-qwen235b-rilw-26", "0.5.23", datetime(2026, 11, 4, 19, 30, 4), ms=True, tz=-6.0)
    S = Traffic(E, ["TP0"], max_tokens=1_104_320, step_ms=(19, 0.4), out_len=(40, 500), iters=True)
    leaked = {"TP0": 96, "TP2": 160}

    def warn(t: float) -> None:
        evict = E.rng.randint(60_000, 200_000)
        for i, (r, n) in enumerate(leaked.items()):
            E.doc.rec(
                t + i * 0.017,
                "pool memory leak detected! [full] total=%d, available=%d, evictable=%d, "
                "protected=0, session_held=0, uncached=0" % (S.max_tokens, S.max_tokens - evict - n, evict),
                r,
            )

    firsts = idle_cycles(E, S, 3, warn)
    end = firsts[-1] + 50
    E.write("sglang-0.log", texts(w_kubectl(E, E.doc.lines())))
    E.stamp_file("sglang-0.log", E.clock.utc(end) + timedelta(minutes=3))
    return E, entry(
        "repeated-idle-leak-warning",
        [
            item(
                "idle-memory-leak",
                E.iso(firsts[0], True),
                ["TP0", "TP2"],
                "TP0 and TP2 (only) report the same pool shortfall at every idle check: one leak, two ranks",
            ),
        ],
        variation="0.5.23 `pool memory leak detected! [full] ...` warning, two of four ranks, forward iters, "
        "kubectl --timestamps",
    )


def torch_report(
    doc: Doc,
    tv: Torch,
    t: float,
    grank: int,
    prank: int,
    pgid: int,
    guid: str,
    desc: str,
    seq: int,
    op: str,
    numel: int,
    timeout_ms: int,
    enq: int,
    done: int,
    teardown: float,
) -> None:
    for tt, lines in tv.timeout_lines(
        t, grank, prank, pgid, guid, desc, seq, op, numel, timeout_ms, enq, done
    ):
        doc.raw(tt, lines)
    for tt, lines in tv.teardown_lines(t + teardown, grank):
        doc.raw(tt, lines)


def nccl_warn(doc: Doc, rng: random.Random, t: float, host: str, pid: int, dev: int, peer: int) -> None:
    tid = pid + rng.randint(300, 2000)
    doc.raw(
        t,
        [
            "",
            "%s:%d:%d [%d] proxy.cc:1556 NCCL WARN [Service thread] Could not receive type from localRank %d, "
            "res=3, closed=1" % (host, pid, tid, dev, peer),
            "%s:%d:%d [%d] NCCL INFO [Service thread] Connection closed by localRank %d"
            % (host, pid, tid, dev, peer),
            "%s:%d:%d [%d] NCCL INFO misc/socket.cc:42 -> 3" % (host, pid, tid, dev),
        ],
    )


def tna_two_nodes_kubectl() -> tuple[Engine, dict]:
    """torch 2.8 lines, TP16 over two nodes, every rank at the same SeqNum; one kubectl log per node."""
    E = Engine("ord5-llama405b-tna-06", "0.5.23", datetime(2026, 10, 22, 11, 41, 0), ms=True)
    tv = Torch("2.8", E.clock, E.rng)
    docs = [E.doc, Doc(E.clock)]
    seq, t0 = 884_213, 59.62
    times = {}
    for g in range(16):
        t = t0 + E.rng.uniform(0, 0.3) + (0.25 if g >= 8 else 0.0) + E.rng.uniform(0, 0.4)
        times[g] = t
        torch_report(
            docs[g // 8],
            tv,
            t,
            g,
            g,
            2,
            "5",
            "tp:0",
            seq,
            "ALLREDUCE",
            2_097_152,
            600_000,
            seq + 1,
            seq - 1,
            1.4 + E.rng.uniform(0, 0.6),
        )
    for n, d in enumerate(docs):
        nccl_warn(d, E.rng, t0 + 2.6, "ord5-node%d" % n, 61000 + n, 0, 3)
    # `kubectl logs -l app=sglang-405b --prefix --timestamps`: both pods' lines in one stream, by time
    merged = sorted(
        [
            (t, n, k, "[pod/sglang-405b-%d/sglang] %s" % (n, s))
            for n, d in enumerate(docs)
            for k, (t, s) in enumerate(w_kubectl(E, d.lines()))
        ]
    )
    E.write("kubectl-logs.txt", [s for *_, s in merged])
    E.stamp_file("kubectl-logs.txt", E.clock.utc(t0 + 900))
    first = min(times.values())
    assert E.clock.dt(first).second == 59 and E.clock.dt(max(times.values())).minute == 42
    return E, entry(
        "torch-nccl-agree",
        [
            item(
                "known-signature",
                E.iso(first, True),
                [],
                "torch 2.8 ProcessGroupNCCL timeouts: all 16 ranks (two "
                "nodes) at SeqNum %d ALLREDUCE in tp:0, they agree" % seq,
                signature=NCCL_TIMEOUT_SIG,
            ),
        ],
        allow=("stall-onset", "watchdog-kill", "all-ranks-frozen"),
        variation="torch 2.8 (`failure detected by "
        "watchdog`, Watchdog::runLoop frames), `[PG ID 2 PG GUID 5(tp:0) Rank N]`, 16 ranks over two nodes (pods), "
        "one `kubectl logs --prefix --timestamps` stream of both (the only year), across a minute",
    )


def tna_timeless_journald() -> tuple[Engine, dict]:
    """torch 2.2 lines carry no time: journald short-iso dates them; SGLang 0.4.6 stalled 120 s before."""
    E = Engine("fra5-mixtral-tna-15", "0.4.6", datetime(2025, 3, 12, 13, 20, 7), tz=1.0)
    S = Traffic(E, ["TP0"], max_tokens=420_000, step_ms=(21, 0.4), out_len=(100, 900))
    onset, _ = stall_run(S, 0, 100, 2.2, 1, p_stream=0.6, min_running=12)
    tv = Torch("2.2", E.clock, E.rng)
    seq = 391_772
    t_first = onset + 120.0 + 0.37
    times = []
    for g in range(4):
        t = t_first + (0 if g == 2 else E.rng.uniform(0.05, 0.6))
        times.append(t)
        torch_report(
            E.doc,
            tv,
            t,
            g,
            g,
            0,
            "0",
            "default_pg",
            seq,
            "_ALLGATHER_BASE",
            262_144,
            120_000,
            seq,
            seq - 1,
            1.1 + E.rng.uniform(0, 0.5),
        )
    S.pending(poisson(E.rng, onset + 2, max(times) + 3, 0.08), 0.6)
    body = [x for x in E.doc.lines() if x[0] >= onset - 35]
    E.write("journal-sglang.txt", texts(w_journald_iso(E, body, "fra5-h100-15", 77012)))
    E.stamp_file("journal-sglang.txt", E.clock.utc(max(times)) + timedelta(hours=1))
    return E, entry(
        "torch-nccl-agree",
        [
            item(
                "stall-onset",
                E.iso(onset),
                [],
                "last batch line (#running-req %d), then only the torch timeout 120 s later" % S.last_running,
            ),
            item(
                "known-signature",
                E.iso(min(times)),
                [],
                "torch 2.2 timeouts (no time of their own; journald's "
                "time): all four ranks at SeqNum %d" % seq,
                signature=NCCL_TIMEOUT_SIG,
            ),
        ],
        allow=("watchdog-kill", "all-ranks-frozen"),
        variation="torch 2.2 `[rankN]:[E ProcessGroupNCCL.cpp:523]` "
        "without a time, dated by journald short-iso (UTC+1), SGLang 0.4.6 batch lines before the stall",
    )


def tnd_split_console() -> tuple[Engine, dict]:
    """torch 2.6, 8 ranks in tp:0; rank 5 one SeqNum behind; pasted in two parts, each in a console fence."""
    E = Engine("sea2-gptoss-tnd-11", "0.5.10", datetime(2025, 4, 2, 18, 20, 0))
    tv = Torch("2.6", E.clock, E.rng)
    s = 1_402_118
    t0 = 47.3
    for g in [5] + [x for x in range(8) if x != 5]:
        behind = g == 5
        t = t0 + (0 if behind else 1.6 + E.rng.uniform(0, 0.9))
        torch_report(
            E.doc,
            tv,
            t,
            g,
            g,
            2,
            "1",
            "tp:0",
            s if behind else s + 1,
            "ALLREDUCE",
            40_960 if behind else 230_400,
            1_800_000,
            s if behind else s + 2,
            s - 1 if behind else s,
            1.5 + E.rng.uniform(0, 0.4),
        )
    body = texts(E.doc.lines())
    k = int(len(body) * 0.45)
    k = next(i for i in range(k, len(body)) if body[i].startswith("frame #3"))
    E.write("stderr-1.txt", ["```console"] + body[:k] + ["```"])
    E.write("stderr-2.txt", ["```console"] + body[k + 1 :] + ["```"])
    E.stamp_file("stderr-1.txt", E.clock.utc(t0) + timedelta(minutes=48))
    E.stamp_file("stderr-2.txt", E.clock.utc(t0) + timedelta(minutes=47))
    return E, entry(
        "torch-nccl-desync",
        [
            item(
                "collective-desync",
                None,
                ["rank5"],
                "in tp:0 rank 5 times out at SeqNum %d while the other seven "
                "report %d: rank 5 is the odd one out" % (s, s + 1),
            ),
        ],
        allow=(
            "known-signature:" + NCCL_TIMEOUT_SIG,
            "stall-onset",
            "watchdog-kill",
            "first-rank-stopped",
            "all-ranks-frozen",
        ),
        variation="torch 2.6 `[PG ID 2 PG GUID 1(tp:0) Rank N]`, split in two files "
        "inside one frame block, ```console fences, year from the file time",
    )


def tnd_opmismatch_wrapped() -> tuple[Engine, dict]:
    """torch 2.0: no time, no [rankN]:, no Numel; rank 2 in BROADCAST at the SeqNum where the others ALLREDUCE;
    wrapped at 160 columns by the terminal and pasted in a quote."""
    E = Engine("bos1-llama8b-tnd-29", "0.4.6", datetime(2024, 11, 5, 3, 0, 0))
    tv = Torch("2.0", E.clock, E.rng, rank_prefix=False)
    s = 88
    for g in (2, 0, 3, 1):
        op = "BROADCAST" if g == 2 else "ALLREDUCE"
        torch_report(
            E.doc,
            tv,
            10 + g * 0.01,
            g,
            g,
            0,
            "0",
            "default_pg",
            s,
            op,
            1 if g == 2 else 1_048_576,
            1_800_000,
            s,
            s - 1,
            0.5,
        )
    lines = ["Training hangs at step 88 every time, then this (copied from the terminal):", ""]
    lines += texts(p_quote(p_hard_wrap(E.doc.lines(), 160)))
    E.write("hang.md", lines)
    E.stamp_file("hang.md", datetime(2024, 11, 5, 9, 41, 12))
    return E, entry(
        "torch-nccl-desync",
        [
            item(
                "collective-desync",
                None,
                ["rank2"],
                "SeqNum 88: rank 2 in BROADCAST, ranks 0, 1, 3 in ALLREDUCE",
            ),
        ],
        allow=(
            "known-signature:" + NCCL_TIMEOUT_SIG,
            "stall-onset",
            "watchdog-kill",
            "first-rank-stopped",
            "all-ranks-frozen",
        ),
        variation="torch 2.0 `[E ProcessGroupNCCL.cpp:458] [Rank N]` (no time, no "
        "`[rankN]:`, no NumelIn/NumelOut), OpType mismatch, hard-wrapped at 160 columns inside a Markdown quote",
    )


def tnd_fluentbit_two_behind() -> tuple[Engine, dict]:
    """torch 2.4 `[PG 2 Rank N]`, 8 ranks on two nodes; ranks 3 and 7 one SeqNum behind; Fluent Bit JSON."""
    E = Engine("gru1-qwen72b-tnd-50", "0.5.2", datetime(2025, 12, 30, 21, 5, 0))
    tv = Torch("2.4", E.clock, E.rng)
    docs = [E.doc, Doc(E.clock)]
    s = 66_590
    for g in (3, 7, 0, 1, 2, 4, 5, 6):
        behind = g in (3, 7)
        t = 20.0 + (E.rng.uniform(0, 0.4) if behind else 1.2 + E.rng.uniform(0, 0.8))
        torch_report(
            docs[g // 4],
            tv,
            t,
            g,
            g,
            2,
            "",
            "",
            s if behind else s + 1,
            "ALLREDUCE",
            524_288,
            600_000,
            s if behind else s + 1,
            s - 1 if behind else s,
            1.3,
        )
    for n, d in enumerate(docs):
        rel = "node-%s.json" % "ab"[n]
        E.write(rel, texts(w_fluentbit(E, d.lines(), "qwen72b-%d" % n)))
        E.stamp_file(rel, E.clock.utc(1800))
    return E, entry(
        "torch-nccl-desync",
        [
            item(
                "collective-desync",
                None,
                ["rank3", "rank7"],
                "in PG 2 ranks 3 and 7 report SeqNum %d, the other six %d" % (s, s + 1),
            ),
        ],
        allow=(
            "known-signature:" + NCCL_TIMEOUT_SIG,
            "stall-onset",
            "watchdog-kill",
            "first-rank-stopped",
            "all-ranks-frozen",
        ),
        variation="torch 2.4 `[PG 2 Rank N]`, two minority ranks, one Fluent Bit JSON file per node",
    )


def tnm_training_compose() -> tuple[Engine, dict]:
    """torch 2.6 training job, 16 ranks: an ep group and a dp_shard group time out at their own SeqNums."""
    E = Engine("iad3-sft-mixtral-tnm-04", "0.5.10", datetime(2025, 7, 19, 4, 12, 0))
    tv = Torch("2.6", E.clock, E.rng)
    times = []
    reporters = [
        (9, 1, 5, "9", "ep:2", 40_411, "ALLTOALL_BASE", 47_104),
        (10, 2, 5, "9", "ep:2", 40_411, "ALLTOALL_BASE", 47_104),
        (1, 0, 3, "6", "dp_shard:1", 912, "_ALLGATHER_BASE", 389_120),
        (5, 1, 3, "6", "dp_shard:1", 912, "_ALLGATHER_BASE", 389_120),
    ]
    for g, pr, pgid, guid, desc, seq, op, numel in reporters:
        t = 33.0 + E.rng.uniform(0, 0.08)
        times.append(t)
        torch_report(
            E.doc,
            tv,
            t,
            g,
            pr,
            pgid,
            guid,
            desc,
            seq,
            op,
            numel,
            300_000,
            seq,
            seq - 1,
            1.8 + E.rng.uniform(0, 0.9),
        )
    body = texts(p_compose(E.doc.lines(), "trainer-1"))
    lines = [
        "Job 8812 hung at step ~40k. Only these ranks printed anything before the pod restarted:",
        "",
        "<details>",
        "<summary>trainer logs (compose)</summary>",
        "",
        "~~~text",
    ]
    lines += body + ["~~~", "</details>", "", "(the other 12 ranks printed nothing)"]
    E.write("ticket.md", lines)
    E.stamp_file("ticket.md", E.clock.utc(33) + timedelta(hours=3))
    return E, entry(
        "torch-nccl-multi-pg",
        [
            item(
                "known-signature",
                E.iso(min(times), True),
                [],
                "ProcessGroupNCCL timeouts in two process groups "
                "(ep:2 SeqNum 40411, dp_shard:1 SeqNum 912); reporters agree within each group",
                signature=NCCL_TIMEOUT_SIG,
            ),
        ],
        allow=("stall-onset", "watchdog-kill", "all-ranks-frozen"),
        variation="torch 2.6 training job, "
        "`[PG ID 5 PG GUID 9(ep:2) Rank 1]` and `(dp_shard:1)`, in-group ranks differ from global ones, compose "
        "prefix in a ~~~text fence inside <details>",
    )


def tnm_same_pgid_quote() -> tuple[Engine, dict]:
    """torch 2.6, SGLang PP2 x TP4: tp:0 and tp:1 both have PG ID 2 on their members but differ by GUID and
    SeqNum; a quote with viewer [N] numbers."""
    E = Engine("lhr3-llama70b-tnm-38", "0.5.23", datetime(2026, 1, 26, 10, 3, 0))
    tv = Torch("2.6", E.clock, E.rng)
    times = []
    for g in (0, 1, 2, 3, 4, 5, 6, 7):
        stage = g // 4
        seq = 77_120 if stage == 0 else 77_118
        t = 14.0 + stage * 0.9 + E.rng.uniform(0, 0.3)
        times.append(t)
        torch_report(
            E.doc,
            tv,
            t,
            g,
            g % 4,
            2,
            "34"[stage],
            "tp:%d" % stage,
            seq,
            "ALLREDUCE",
            65_536,
            600_000,
            seq,
            seq - 1,
            1.2,
        )
    lines = ["From the on-call channel, pasted by @mk:", ""]
    lines += texts(p_quote(p_lineno(E.doc.lines(), "[%d] %s", 551)))
    E.write("oncall.md", lines)
    E.stamp_file("oncall.md", E.clock.utc(20) + timedelta(minutes=25))
    return E, entry(
        "torch-nccl-multi-pg",
        [
            item(
                "known-signature",
                E.iso(min(times)),
                [],
                "tp:0 (GUID 3, SeqNum 77120) and tp:1 (GUID 4, SeqNum 77118) "
                "each agree; the same local PG ID 2 names two different groups",
                signature=NCCL_TIMEOUT_SIG,
            ),
        ],
        allow=("stall-onset", "watchdog-kill", "all-ranks-frozen"),
        variation="torch 2.6, two TP groups of a PP2 "
        "engine with the same PG ID and different GUIDs/SeqNums, Markdown quote with viewer [N] numbers",
    )


PY = "/usr/lib/python3.12"
VENV = "/opt/venv/lib/python3.12/site-packages"


def fh_threads(rng: random.Random, crash_site: str) -> list[tuple[str, bool, list[tuple[str, int, str]]]]:
    """One scheduler's faulthandler output: helper threads, then the current (crashing) thread."""
    helper = [
        ("%s/threading.py" % PY, 359, "wait"),
        ("%s/queue.py" % PY, 171, "get"),
        ("%s/torch/_inductor/compile_worker/subproc_pool.py" % VENV, 196, "_read_thread"),
        ("%s/threading.py" % PY, 1010, "run"),
        ("%s/threading.py" % PY, 1073, "_bootstrap_inner"),
        ("%s/threading.py" % PY, 1030, "_bootstrap"),
    ]
    sel = [
        ("%s/selectors.py" % PY, 468, "select"),
        ("%s/asyncio/base_events.py" % PY, 1952, "_run_once"),
        ("%s/asyncio/base_events.py" % PY, 641, "run_forever"),
    ]
    if crash_site == "moe":
        cur = [
            (
                "%s/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py" % VENV,
                1634,
                "invoke_fused_moe_kernel",
            ),
            ("%s/sglang/srt/layers/moe/fused_moe_triton/layer.py" % VENV, 712, "forward"),
            ("%s/sglang/srt/model_executor/model_runner.py" % VENV, 1560, "forward_decode"),
        ]
    else:
        cur = [
            ("%s/torch/cuda/graphs.py" % VENV, 88, "replay"),
            ("%s/sglang/srt/model_executor/cuda_graph_runner.py" % VENV, 650, "replay"),
            ("%s/sglang/srt/model_executor/model_runner.py" % VENV, 1560, "forward_decode"),
        ]
    cur += [
        ("%s/sglang/srt/managers/scheduler.py" % VENV, 1893, "run_batch"),
        ("%s/sglang/srt/managers/scheduler.py" % VENV, 1042, "event_loop_overlap"),
    ]
    return [
        ("%012x" % rng.getrandbits(44), False, helper),
        ("%012x" % rng.getrandbits(44), False, sel),
        ("%012x" % rng.getrandbits(44), True, cur),
    ]


def fcg_kubectl() -> tuple[Engine, dict]:
    """Two TP ranks' faulthandler output (Segmentation fault) interleaved, under kubectl --timestamps."""
    E = Engine("pdx3-llama70b-fcg-22", "0.5.10", datetime(2026, 4, 18, 19, 40, 2))
    streams = [faulthandler_text("Segmentation fault", fh_threads(E.rng, "graph")) for _ in range(2)]
    lines = garble(E.rng, streams)
    E.doc.raw(3.0, lines)
    E.write("previous.log", texts(w_kubectl(E, E.doc.lines())))
    E.stamp_file("previous.log", E.clock.utc(600))
    return E, entry(
        "faulthandler-crash-garbled",
        [],
        variation="two ranks' faulthandler (Segmentation fault) "
        "interleaved in runs of bytes, kubectl --timestamps",
    )


def fcg_compose_fence() -> tuple[Engine, dict]:
    """Three ranks abort at once after startup; their faulthandler bytes interleave; compose in a fence."""
    E = Engine("sjc4-dsv3-fcg-13", "0.5.23", datetime(2026, 9, 1, 7, 15, 20), ms=True)
    for i, msg in enumerate(
        [
            "Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.07 GB, "
            "mem usage=57.52 GB.",
            "Capture cuda graph end. Time elapsed: 41.88 s. mem usage=3.12 GB. avail mem=17.71 GB.",
        ]
    ):
        for r in range(3):
            E.doc.rec(i * 40 + r * 0.07, msg, "TP%d" % r)
    E.doc.rec(85.2, "The server is fired up and ready to roll!")
    streams = [faulthandler_text("Aborted", fh_threads(E.rng, "moe")) for _ in range(3)]
    E.doc.raw(140.0, garble(E.rng, streams))
    body = texts(p_compose(E.doc.lines(), "inference-1"))
    lines = ["Crash right after startup (first request), compose logs:", "", "```"] + body + ["```"]
    E.write("crash.md", lines)
    E.stamp_file("crash.md", E.clock.utc(3600))
    return E, entry(
        "faulthandler-crash-garbled",
        [],
        variation="three ranks' faulthandler (Aborted) interleaved "
        "after SGLang startup lines, compose prefix inside a fence",
    )


def fr_dumps(
    E: Engine,
    nranks: int,
    version: str,
    seq: int,
    last: dict[int, tuple[int, str, str]],
    pgs: dict,
    pgid: int,
    pg: tuple[str, str],
    t0: int,
    *,
    as_json: bool = False,
    skip: tuple[int, ...] = (),
) -> None:
    """One dump per rank: 18 completed collectives, then the rank's last ones as `last[rank]` says
    ((last seq, its state, its op)); ranks in `skip` left no dump."""
    for rank in range(nranks):
        if rank in skip:
            continue
        rng = random.Random(zlib.crc32(("%s/%d" % (E.name, rank)).encode()))
        lseq, lstate, lop = last.get(rank, (seq, "started", "all_reduce"))
        entries = []
        for k, s in enumerate(range(seq - 18, lseq + 1)):
            state = "completed" if s < lseq else lstate
            op = lop if s == lseq else ("broadcast" if s % 9 == 0 else "all_reduce")
            created = t0 + (s - seq) * 21_000_000 + rng.randint(0, 300_000)
            entries.append(
                fr_entry(
                    rng,
                    rid=k,
                    pgid=pgid,
                    pg=pg,
                    seq=s,
                    op=op,
                    state=state,
                    created=created,
                    version=version,
                    frames=not as_json,
                    numel=random.Random(s).randint(1, 512),
                )
            )
        started = lseq if lstate != "scheduled" else lseq - 1
        done = lseq if lstate == "completed" else lseq - 1
        dump = {
            "version": version,
            "pg_config": pgs,
            "pg_status": {str(pgid): fr_status(lseq, started, done, as_text=as_json)},
            "entries": entries,
        }
        if version == "2.10":
            dump["comm_lib_version"] = "2.27.7"
        elif version == "2.7":
            dump["nccl_version"] = "2.21.5"
        if as_json:
            for e in entries:
                del e["frames"]
                for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
                    e[k] = e[k] or 0
            rel = "nccl_trace_rank_%d.json" % rank
            E.files[rel] = json.dumps(dump).encode()
        else:
            rel = "nccl_trace_rank_%d" % rank if version != "2.10" else "nccl_trace_rank_%d.pkl" % rank
            E.files[rel] = pickle.dumps(dump, protocol=2)
        E.stamp_file(
            rel,
            datetime.fromtimestamp(t0 / 1e9, tz=timezone.utc).replace(tzinfo=None)
            + timedelta(seconds=600 + rank * 0.3),
        )


def fr_one_behind() -> tuple[Engine, dict]:
    E = Engine("hel3-gptoss-fr-16", "0.5.10", datetime(2025, 6, 3, 11, 0, 0))
    t0 = int(datetime(2025, 6, 3, 8, 44, 17, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
    cfg = {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
        "1": {"name": "1", "desc": "tp:0", "ranks": "[0, 1, 2, 3]"},
    }
    fr_dumps(E, 4, "2.7", 51_230, {2: (51_229, "completed", "all_reduce")}, cfg, 1, ("1", "tp:0"), t0)
    return E, entry(
        "flight-recorder",
        [
            item(
                "collective-desync",
                None,
                ["rank2"],
                "ranks 0, 1, 3 started all_reduce #51230; rank 2's last entry is "
                "the completed #51229: one collective behind",
            ),
        ],
        allow=("stall-onset", "first-rank-stopped", "known-signature:" + NCCL_TIMEOUT_SIG),
        variation="Flight Recorder 2.7 pickles (nccl_version), TP4, one rank behind",
    )


def fr_op_mismatch() -> tuple[Engine, dict]:
    E = Engine("ams3-llama70b-fr-07", "0.5.23", datetime(2026, 8, 20, 2, 0, 0))
    t0 = int(datetime(2026, 8, 20, 0, 12, 41, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
    ranks = "[0, 1, 2, 3, 4, 5, 6, 7]"
    cfg = {
        "0": {"name": "0", "desc": "default_pg", "ranks": ranks},
        "2": {"name": "1", "desc": "tp:0", "ranks": ranks},
    }
    fr_dumps(E, 8, "2.10", 7_302, {6: (7_302, "started", "broadcast")}, cfg, 2, ("1", "tp:0"), t0)
    return E, entry(
        "flight-recorder",
        [
            item(
                "collective-desync",
                None,
                ["rank6"],
                "at #7302 rank 6 is in broadcast, the other seven in all_reduce",
            ),
        ],
        allow=("stall-onset", "first-rank-stopped", "known-signature:" + NCCL_TIMEOUT_SIG),
        variation="Flight Recorder 2.10 `.pkl` dumps (comm_lib_version, thread fields), TP8, OpType mismatch, PG ID 2 "
        "names group `1`",
    )


def fr_missing_json() -> tuple[Engine, dict]:
    E = Engine("waw1-qwen72b-fr-35", "0.5.5", datetime(2025, 12, 9, 15, 0, 0))
    t0 = int(datetime(2025, 12, 9, 14, 37, 5, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
    cfg = {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
        "1": {"name": "1", "desc": "undefined", "ranks": "[0, 1, 2, 3]"},
    }
    fr_dumps(E, 4, "2.7", 3_410, {}, cfg, 1, ("1", "undefined"), t0, as_json=True, skip=(1,))
    return E, entry(
        "flight-recorder",
        [
            item(
                "first-rank-stopped",
                None,
                ["rank1"],
                "ranks 0, 2, 3 dumped and agree (all_reduce #3410 started); rank 1 of the group left no dump",
            ),
        ],
        allow=("stall-onset", "known-signature:" + NCCL_TIMEOUT_SIG),
        variation="Flight Recorder JSON form (2.7, no frames, text pg_status), one rank's dump missing",
    )


def ras_per_type() -> tuple[Engine, dict]:
    E = Engine("dal5-llama70b-ras-41", "0.5.23", datetime(2026, 5, 21, 17, 0, 0))
    body = ras_text(
        "2.26.6",
        "12.9",
        1,
        8,
        [(0, 1, 1, 8, 8, 8, "RUNNING", "MISMATCH"), (1, 1, 1, 8, 8, 8, "RUNNING", "OK")],
        [],
        [
            "#0-0 (b7e3a0c52d91f604) MISMATCH",
            "  Communicator ranks have different AllReduce operation counts",
            "  7 ranks have launched up to operation 2210467",
            "  Rank 6 has launched up to operation 2210466 -- GPU 6 managed by process 880146 on node 10.15.90.41",
        ],
        0.31,
    )
    lines = ["`ncclras` on dal5-gpu41 while the server was hung:", "", "```"] + body + ["```"]
    E.write("ras.md", lines)
    E.stamp_file("ras.md", datetime(2026, 5, 21, 17, 16, 10))
    return E, entry(
        "nccl-ras",
        [
            item(
                "collective-desync",
                None,
                ["rank6"],
                "RAS MISMATCH: rank 6's AllReduce count lags the other seven",
            ),
        ],
        allow=("first-rank-stopped", "stall-onset"),
        variation="NCCL 2.26 per-collective-type MISMATCH, TP8 on one node, in a fenced paste",
    )


def ras_two_nodes() -> tuple[Engine, dict]:
    E = Engine("ord6-dsv3-ras-20", "0.5.10", datetime(2025, 10, 14, 3, 0, 0))
    body = ras_text(
        "2.24.3",
        "12.6",
        2,
        8,
        [(0, 1, 2, 8, 16, 16, "RUNNING", "MISMATCH"), (1, 2, 1, 8, 8, 16, "RUNNING", "OK")],
        [],
        [
            "#0-0 (0c93aa51fe2b8d77) MISMATCH",
            "  Communicator ranks have different collective operation counts",
            "  15 ranks have launched up to operation 301554",
            "  Rank 11 has launched up to operation 301553 -- GPU 3 managed by process 40977 on node 10.20.7.12",
        ],
        1.02,
    )
    E.write("ncclras.txt", body, crlf=True)
    E.stamp_file("ncclras.txt", datetime(2025, 10, 14, 3, 31, 44))
    return E, entry(
        "nccl-ras",
        [
            item(
                "collective-desync",
                None,
                ["rank11"],
                "RAS MISMATCH: rank 11 (node 2, GPU 3) one operation behind the other fifteen",
            ),
        ],
        allow=("first-rank-stopped", "stall-onset"),
        variation="NCCL 2.24 total-count MISMATCH, 16 ranks on two nodes, CRLF",
    )


def ras_dead_quote() -> tuple[Engine, dict]:
    E = Engine("lax2-qwen72b-ras-18", "0.5.10", datetime(2026, 2, 2, 12, 0, 0))
    body = ras_text(
        "2.25.1",
        "12.8",
        1,
        4,
        [(0, 1, 1, 3, 4, 3, "RUNNING", "INCOMPLETE")],
        [
            "DEAD",
            "  1 job process is considered dead (unreachable via the RAS network)",
            "  Process 207731 on node 10.4.1.18 managing GPU 2",
            "",
            "#0-0 (5d21c0e94aa7b318) INCOMPLETE",
            "  Missing communicator data from 1 rank",
            "  The missing rank: 2",
        ],
        [
            "TIMEOUT",
            "  Timeout waiting for data from 1 job process",
            "  Process 207729 on node 10.4.1.18 managing GPU 0",
        ],
        5.00,
    )
    lines = ["ncclras says one process is dead:", ""] + texts(p_quote([(0.0, x) for x in body]))
    E.write("ras-dead.md", lines)
    E.stamp_file("ras-dead.md", datetime(2026, 2, 2, 12, 48, 3))
    return E, entry(
        "nccl-ras",
        [
            item(
                "first-rank-stopped",
                None,
                ["rank2"],
                "RAS: the process of rank 2 is dead; the communicator misses its data",
            ),
        ],
        allow=("stall-onset",),
        variation="NCCL 2.25 DEAD process and INCOMPLETE communicator, TP4, in a Markdown quote",
    )


class VllmLoad:
    """A vLLM engine's load as its stats logger sees it: running and waiting requests, throughputs."""

    def __init__(self, rng: random.Random, running: int, capacity: int):
        self.rng, self.running, self.waiting, self.capacity = rng, running, 0, capacity
        self.kv = 40.0

    def step(self, interval: float, *, arrivals: float, served: bool) -> tuple[float, float, int, int, float]:
        rng = self.rng
        new = int(arrivals * interval * rng.uniform(0.6, 1.4))
        if served:
            done = int(self.running * rng.uniform(0.15, 0.3))
            self.running = max(0, self.running - done)
            admit = min(self.waiting + new, self.capacity - self.running)
            self.waiting = self.waiting + new - admit
            self.running += admit
            prompt = admit * rng.uniform(300, 1500) / interval
            gen = self.running * rng.uniform(18, 30) if self.running else 0.0
            self.kv = min(99.6, max(0.0, self.running / self.capacity * 95 + rng.uniform(-3, 3)))
            return prompt, gen, self.running, self.waiting, self.kv
        self.waiting += new
        return 0.0, 0.0, self.running, self.waiting, self.kv


def dated_by_previous(lines: list[tuple[float | None, str]]) -> list[float | None]:
    """A line without a time of its own takes the time of the nearest timestamped line before it."""
    out, last = [], None
    for t, _ in lines:
        last = t if t is not None else last
        out.append(last)
    return out


def vhb_v1_kubectl() -> tuple[Engine, dict]:
    """vLLM V1 (APIServer / EngineCore tags), TP4: the last stats line with throughput, one stale line at
    0.0 tokens/s, then only /health 200 (no time: kubectl dates it) and shm-broadcast warnings."""
    E = Engine("lhr4-llama70b-vhb-10", "0.5.23", datetime(2026, 7, 14, 9, 20, 0))
    api, core = 30118, 30561
    L = VllmLoad(E.rng, 20, 48)
    t, onset = 3.4, None
    for k in range(30):
        served = k < 24
        pr, gen, run, wait, kv = L.step(10.0, arrivals=1.0, served=served)
        if not served and k > 24:
            break  # two idle intervals: the stats line drops to DEBUG
        E.doc.raw(
            t,
            vllm_v1(
                E.clock,
                t,
                "APIServer",
                api,
                "loggers.py:259",
                v1_stats(pr, gen, run, wait, kv, E.rng.uniform(5, 60)),
            ),
        )
        if served:
            onset = t
        t += 10.0 + E.rng.uniform(-0.02, 0.02)
    assert onset is not None
    for ta in poisson(E.rng, 0, onset + 400, 1.1):
        E.doc.raw(
            ta,
            '(APIServer pid=%d) INFO:     %s - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            % (api, E.client("10.44.1.%d" % E.rng.randint(2, 9))),
        )
    for k in range(1, 7):
        ts = onset + 60 * k + E.rng.uniform(0.5, 9.5)
        E.doc.raw(ts, vllm_v1(E.clock, ts, "EngineCore_DP0", core, "shm_broadcast.py:466", SHM_V1))
    end = onset + 400
    for th in ticks(E.rng, 0, end, 8.0, 0.2):
        E.doc.raw(
            th,
            '(APIServer pid=%d) INFO:     %s - "GET /health HTTP/1.1" 200 OK' % (api, E.client("127.0.0.1")),
        )
        E.probe_ok.append(th)
    body = [x for x in E.doc.lines() if x[0] >= onset - 90]
    E.write("vllm-0.log", texts(w_kubectl(E, body)))
    E.gzip("vllm-0.log")
    E.stamp_file("vllm-0.log.gz", E.clock.utc(end) + timedelta(minutes=11))
    return E, entry(
        "vllm-health-blind",
        [
            item(
                "stall-onset",
                E.iso(onset),
                [],
                "last stats line with non-zero generation throughput; the next says "
                "0.0 tokens/s with requests still running, then the stats stop",
            ),
            blind(
                E, onset, "/health kept answering 200 (its lines carry no time; kubectl's time dates them)"
            ),
        ],
        variation="vLLM V1 with `(APIServer pid=N)` / `(EngineCore_DP0 pid=N)` tags and `[loggers.py:259]`, "
        "kubectl --timestamps (the only year), gzipped",
    )


def vhb_v0_pipe() -> tuple[Engine, dict]:
    """vLLM V0 (no process tags, `metrics.py:351]` without brackets), stats every 5 s stop; /health stays 200."""
    E = Engine("sjc6-qwen7b-vhb-24", "0.5.2", datetime(2025, 3, 2, 9, 10, 0))
    L = VllmLoad(E.rng, 14, 256)
    lines: list[tuple[float | None, float, str]] = []  # (own time or None, sort time, text)
    t, onset = 2.2, 0.0
    for _ in range(40):
        pr, gen, run, wait, kv = L.step(5.0, arrivals=3.0, served=True)
        lines.append((t, t, vllm_v0(E.clock, t, "metrics.py:351", v0_stats(pr, gen, run, wait, kv))))
        onset = t
        t += 5.0 + E.rng.uniform(-0.01, 0.01)
    end = onset + 330
    for k in range(1, 6):
        ts = onset + 60 * k + E.rng.uniform(0.2, 1.5)
        lines.append(
            (
                ts,
                ts,
                vllm_v0(
                    E.clock, ts, "shm_broadcast.py:404", "No available block found in 60 second. ", "WARNING"
                ),
            )
        )
    for ta in poisson(E.rng, 0, end, 0.8):
        lines.append(
            (None, ta, 'INFO:     %s - "POST /v1/completions HTTP/1.1" 200 OK' % E.client("10.70.3.18"))
        )
    for th in ticks(E.rng, 0, end, 10.0, 0.2):
        lines.append((None, th, 'INFO:     %s - "GET /health HTTP/1.1" 200 OK' % E.client("127.0.0.1")))
    lines.sort(key=lambda x: x[1])
    lines = [x for x in lines if x[1] >= onset - 70]
    dated = dated_by_previous([(a, c) for a, _, c in lines])
    health = [d for (_, _, c), d in zip(lines, dated, strict=True) if "GET /health" in c]
    after = [d for (_, s, c), d in zip(lines, dated, strict=True) if "GET /health" in c and s > onset]
    numbered = p_lineno([(s, c) for _, s, c in lines], " %5d | %s", 11807)
    E.write("api_server.out", texts(numbered))
    E.stamp_file("api_server.out", E.clock.utc(end) + timedelta(hours=2, minutes=40))
    assert health and after
    return E, entry(
        "vllm-health-blind",
        [
            item(
                "stall-onset",
                E.iso(onset),
                [],
                "last V0 stats line (throughput > 0, Running %d); no stats and no "
                "completion after it, only shm-broadcast waits" % L.running,
            ),
            item(
                "health-check-blind",
                E.iso(after[0]),
                [],
                "/health kept answering 200 (access lines without time, "
                "dated by the preceding timestamped line)",
                ts_end=E.iso(after[-1]),
            ),
        ],
        variation="vLLM V0 `INFO MM-DD HH:MM:SS metrics.py:351]` (no tags, no brackets, no year: the file time), "
        "`No available block found in 60 second.`, viewer `N | ` numbers",
    )


def ok_busy_kubectl() -> tuple[Engine, dict]:
    E = Engine("iad4-qwen235b-ok-01", "0.5.23", datetime(2026, 9, 9, 16, 0, 0), ms=True, tz=-4.0)
    S = Traffic(E, ["TP0 EP0"], max_tokens=1_630_000, step_ms=(17, 0.3), out_len=(100, 900), iters=True)
    S.run(0, 240, 3.0, p_stream=0.6, drain=False)
    end = S.last_progress() + 0.05
    E.probe(0, end - 1, "/health", 10.0, "10.9.0.3")
    lines = texts(w_kubectl(E, [x for x in E.doc.lines() if x[0] <= end]))
    cut = len(lines) * 3 // 5  # size-based rotation: the older part is .1
    E.write("sglang-leader.log.1", lines[:cut])
    E.write("sglang-leader.log", lines[cut:])
    E.stamp_file("sglang-leader.log.1", E.clock.utc(end) - timedelta(seconds=90))
    E.stamp_file("sglang-leader.log", E.clock.utc(end) + timedelta(seconds=2))
    return E, entry(
        "healthy",
        [],
        variation="0.5.23 TP8 EP8 (`TP0 EP0`), busy to the last line, /health every "
        "10 s, kubectl, rotated into .1 and the live file",
    )


def idle_vllm_cri() -> tuple[Engine, dict]:
    """vLLM V1 traffic ends: Running falls to 0, two zero lines, the stats stop; /health goes on."""
    E = Engine("sin4-llama8b-idle-12", "0.5.23", datetime(2026, 3, 27, 23, 50, 0), tz=8.0)
    api = 611
    L = VllmLoad(E.rng, 6, 64)
    t = 1.0
    for _ in range(12):
        pr, gen, run, wait, kv = L.step(10.0, arrivals=1.5, served=True)
        E.doc.raw(
            t, vllm_v1(E.clock, t, "APIServer", api, "loggers.py:259", v1_stats(pr, gen, run, wait, kv, 31.0))
        )
        t += 10.0
    run = L.running
    while run > 0:  # no more arrivals: the running requests finish a few at a time
        run = max(0, run - E.rng.randint(1, 3))
        gen = run * E.rng.uniform(18, 26) + E.rng.uniform(5, 40)
        E.doc.raw(
            t,
            vllm_v1(
                E.clock,
                t,
                "APIServer",
                api,
                "loggers.py:259",
                v1_stats(0.0, gen, run, 0, run / 64 * 90, 31.0),
            ),
        )
        t += 10.0
    E.doc.raw(
        t + 10, vllm_v1(E.clock, t + 10, "APIServer", api, "loggers.py:259", v1_stats(0, 0, 0, 0, 0.0, 31.0))
    )
    for ta in poisson(E.rng, 0, 120, 1.2):
        E.doc.raw(
            ta,
            '(APIServer pid=%d) INFO:     %s - "POST /v1/chat/completions HTTP/1.1" 200 OK'
            % (api, E.client("10.2.0.8")),
        )
    end = t + 300
    for th in ticks(E.rng, 0, end, 10.0, 0.2):
        E.doc.raw(
            th,
            '(APIServer pid=%d) INFO:     %s - "GET /health HTTP/1.1" 200 OK' % (api, E.client("127.0.0.1")),
        )
    E.write("0.log", texts(w_cri(E, E.doc.lines())))
    E.stamp_file("0.log", E.clock.utc(end))
    return E, entry(
        "idle",
        [],
        variation="vLLM V1 going idle: Running tails to 0, stats stop, /health 200 continues; CRI pod file",
    )


def ok_ras_fr() -> tuple[Engine, dict]:
    E = Engine("fra6-qwen32b-ok-30", "0.5.10", datetime(2026, 1, 13, 10, 0, 0))
    body = ras_text(
        "2.27.5",
        "12.9",
        1,
        4,
        [(0, 1, 1, 4, 4, 4, "RUNNING", "OK"), (1, 1, 1, 4, 4, 4, "RUNNING", "OK")],
        [],
        [],
        0.00,
    )
    E.write("ncclras.txt", body)
    E.stamp_file("ncclras.txt", datetime(2026, 1, 13, 10, 2, 51))
    t0 = int(datetime(2026, 1, 13, 10, 1, 30, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
    cfg = {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
        "1": {"name": "1", "desc": "tp:0", "ranks": "[0, 1, 2, 3]"},
    }
    fr_dumps(
        E,
        4,
        "2.10",
        90_112,
        {r: (90_112, "completed", "all_reduce") for r in range(4)},
        cfg,
        1,
        ("1", "tp:0"),
        t0,
    )
    return E, entry(
        "healthy",
        [],
        variation="an on-demand Flight Recorder dump (everything completed, TP4) and an "
        "all-OK NCCL RAS report",
    )


def ok_torch_warnings_plain() -> tuple[Engine, dict]:
    """0.4.6 TP4 busy; benign torch W-lines and NCCL INFO at startup; a load balancer on /get_model_info."""
    E = Engine("bom4-llama70b-ok-45", "0.4.6", datetime(2025, 8, 19, 5, 30, 0), tz=5.5)
    tv = Torch("2.6", E.clock, E.rng)
    for g in range(4):
        E.doc.raw(
            0.5 + g * 0.01,
            tv.glog(
                0.5 + g * 0.01,
                g,
                4561,
                "[PG ID 0 PG GUID 0 Rank %d]  using GPU %d to "
                "perform barrier as devices used by this process are currently unknown. "
                "This can potentially cause a hang if this rank to GPU mapping is "
                "incorrect. Specify device_ids in barrier() to force use of a particular "
                "device, or call init_process_group() with a device_id." % (g, g),
                "W",
            ),
        )
        E.doc.raw(
            0.9 + g * 0.01,
            "bom4-gpu45:%d:%d [%d] NCCL INFO ncclCommInitRank comm 0x%x rank %d nranks 4 "
            "cudaDev %d busId %x000 commId 0x%x - Init COMPLETE"
            % (7100 + g, 7300 + g, g, E.rng.getrandbits(40), g, g, 0x18 + g * 16, E.rng.getrandbits(56)),
        )
    E.doc.rec(30.0, "The server is fired up and ready to roll!")
    S = Traffic(E, ["TP0"], max_tokens=510_000, step_ms=(24, 0.5), out_len=(100, 900))
    S.run(40, 260, 1.8, p_stream=0.5, drain=False)
    end = S.last_progress() + 0.05
    E.probe(30, end - 1, "/get_model_info", 20.0, "10.12.0.250")
    E.write("server.log", texts([x for x in E.doc.lines() if x[0] <= end]))
    E.stamp_file("server.log", E.clock.utc(end) + timedelta(seconds=1))
    return E, entry(
        "healthy",
        [],
        variation="0.4.6 busy to the last line, torch W-level barrier warnings and NCCL "
        "INFO at startup, a load balancer probing /get_model_info every 20 s, no envelope",
    )


def lts_prefill_last_503() -> tuple[Engine, dict]:
    """0.5.5: the last batch line is a Prefill (logged before its forward, which hangs); /health generates,
    so every probe fails with `Health check failed` and 503; docker json-file."""
    E = Engine("sea3-qwen32b-lts-52", "0.5.5", datetime(2025, 12, 2, 3, 30, 0), tz=0.0)
    S = Traffic(E, ["TP0"], max_tokens=700_000, step_ms=(20, 0.4), out_len=(100, 900))
    t = S.run(0, 120, 2.5, p_stream=0.7, drain=False)
    while S.last_running < 15:
        t = S.run(t, t + 5, 2.5, p_stream=0.7, drain=False)
    prev = S.last_progress()
    S.admit(prev + 0.05, prev + 0.21, 0.7)  # its forward never returns
    onset = S.last_progress()
    end = onset + 420
    S.pending(poisson(E.rng, onset + 0.5, end, 0.15), 0.7)
    E.probe(0, onset - 1, "/health", 10.0, "10.244.7.1")
    for tp in ticks(E.rng, onset + 2, end - 25, 10.0, 0.2):
        done = tp + 20.0 + E.rng.uniform(0.02, 0.3)
        E.doc.rec(
            done,
            "Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. "
            "tic start time: %s. last_heartbeat time: %s" % (E.clock.hms(tp), E.clock.hms(onset)),
        )
        E.access(done + 0.001, "10.244.7.1", "GET", "/health", 503)
    body = [x for x in E.doc.lines() if x[0] >= onset - 40]
    E.write("container-json.log", texts(w_docker(E, body)))
    E.stamp_file("container-json.log", E.clock.utc(end) + timedelta(minutes=1))
    return E, entry(
        "log-tail-stall",
        [
            item(
                "stall-onset",
                E.iso(onset),
                [],
                "the last batch line is a Prefill (0.5.5 logs it before the forward "
                "that hangs); %d requests were running" % S.last_running,
                ts_alt=[E.iso(prev)],
            ),
        ],
        variation="0.5.5 `Prefill batch, ... , ` last, generation-based /health failing with `Health check "
        "failed` and 503 (not blind), docker json-file",
    )


def rsw_grep_dp_kubectl() -> tuple[Engine, dict]:
    """0.5.23 DP2 x TP4 attention: only the soft watchdog's timeout lines (a grep of kubectl logs), every
    ~180 s, five times."""
    E = Engine("lhr5-qwen3moe-rsw-48", "0.5.23", datetime(2026, 10, 1, 5, 58, 0), ms=True)
    ranks = ["DP0 TP0 EP0", "DP0 TP1 EP1", "DP1 TP2 EP2", "DP1 TP3 EP3"]
    pids = {r: 66100 + i for i, r in enumerate(ranks)}
    reps = []
    t = 50.4
    for k in range(5):
        reps.append(
            fire_group(
                E,
                E.doc,
                t,
                ranks,
                0.7 if k % 2 else 0.35,
                pids,
                batch=7,
                reqs="",
                total=0,
                inflight=0,
                evictable=0,
                soft=True,
                timeout="180.0",
                dump=False,
            )
        )
        t += 180 + E.rng.uniform(0.5, 2.0)
    lines = texts(w_kubectl(E, [x for x in E.doc.lines() if x[1]]))
    out = ["`kubectl logs --timestamps sglang-qwen3-0 | grep -i watchdog`:", "", "```"] + lines + ["```"]
    E.write("grep-watchdog.md", out)
    E.stamp_file("grep-watchdog.md", E.clock.utc(t) + timedelta(minutes=6))
    first_rank = min(reps[0], key=lambda r: reps[0][r][0])
    return E, entry(
        "repeated-soft-watchdog",
        [
            item(
                "watchdog-kill",
                E.iso(reps[0][first_rank][0], True),
                ranks,
                "first round of the soft watchdog on the "
                "four ranks; four more rounds every ~180 s are one episode",
            ),
        ],
        allow=("stall-onset", "all-ranks-frozen", "busy-leak-report"),
        variation="0.5.23 DP attention `DPd TPt EPt`, "
        "soft=True with a 180.0 s timeout, timeout lines only (grep), kubectl --timestamps in a fence",
    )


def rilw_dp_journald() -> tuple[Engine, dict]:
    """0.5.10 DP attention (four DP leaders serve); at every idle period all four ranks warn of a leak."""
    E = Engine("sin5-dsv3-rilw-61", "0.5.10", datetime(2026, 3, 12, 1, 4, 0), tz=8.0)
    ranks = ["DP%d TP%d EP%d" % (i, i, i) for i in range(4)]
    leaders = [
        Traffic(
            E,
            [r],
            max_tokens=640_000,
            step_ms=(24, 0.5),
            out_len=(40, 400),
            clients=("10.61.0.%d" % (20 + i),),
        )
        for i, r in enumerate(ranks)
    ]
    t, firsts = 0.0, []
    for _ in range(3):
        ends = [S.run(t, t + E.rng.uniform(40, 70), 0.6, p_stream=0.5, drain=True) for S in leaders]
        t_idle = max(ends) + E.rng.uniform(0.05, 0.4)
        firsts.append(t_idle)
        for k in range(1 + (E.rng.random() < 0.5)):
            tw = t_idle + k * E.rng.uniform(40, 70)
            evict = E.rng.randint(30_000, 90_000)
            for i, r in enumerate(ranks):
                E.doc.rec(
                    tw + i * 0.013,
                    "token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens="
                    "%d, available_size=%d, evictable_size=%d, protected_size=0, session_held=0"
                    % (640_000, 640_000 - evict - 2_048, evict),
                    r,
                )
        t = t_idle + E.rng.uniform(100, 150)
    end = t
    E.write(
        "journal-sglang.txt", texts(w_journald_short(E, E.doc.lines(), "sin5-h20-61", 7011, precise=True))
    )
    E.stamp_file("journal-sglang.txt", E.clock.utc(end) + timedelta(hours=4))
    return E, entry(
        "repeated-idle-leak-warning",
        [
            item(
                "idle-memory-leak",
                E.iso(firsts[0]),
                ranks,
                "every DP rank reports the same 2048-token shortfall at "
                "each idle period: one leak on four ranks",
            ),
        ],
        variation="0.5.10 DP attention (four `DPi TPi EPi` leaders print batch lines), the warning on all four, "
        "journald short-precise",
    )


def vhb_early_v1_quote() -> tuple[Engine, dict]:
    """Early vLLM V1 (no process tags, stats every 5 s), hung: one 0.0 line, then only /health and the
    shm-broadcast warning; a quote with viewer [N] numbers, no year but the file time."""
    E = Engine("ams4-qwen14b-vhb-33", "0.5.10", datetime(2025, 6, 11, 10, 0, 0))
    L = VllmLoad(E.rng, 10, 40)
    t, onset = 1.7, 0.0
    for k in range(40):
        served = k < 36
        pr, gen, run, wait, kv = L.step(5.0, arrivals=1.0, served=served)
        E.doc.raw(
            t,
            "INFO %s [loggers.py:116] %s"
            % (
                E.clock.dt(t).strftime("%m-%d %H:%M:%S"),
                v1_stats(pr, gen, run, wait, kv, E.rng.uniform(10, 50)),
            ),
        )
        if served:
            onset = t
        else:
            break
        t += 5.0 + E.rng.uniform(-0.01, 0.01)
    end = onset + 300
    for k in range(1, 5):
        ts = onset + 60 * k + E.rng.uniform(0.3, 4.0)
        E.doc.raw(
            ts,
            "WARNING %s [shm_broadcast.py:386] No available shared memory broadcast block found in 60 "
            "second." % E.clock.dt(ts).strftime("%m-%d %H:%M:%S"),
        )
    for ta in poisson(E.rng, 0, end, 0.4):
        E.doc.raw(ta, 'INFO:     %s - "POST /v1/chat/completions HTTP/1.1" 200 OK' % E.client("10.33.8.4"))
    for th in ticks(E.rng, 0, end, 10.0, 0.2):
        E.doc.raw(th, 'INFO:     %s - "GET /health HTTP/1.1" 200 OK' % E.client("10.244.3.1"))
    body = [x for x in E.doc.lines() if x[0] >= onset - 50]
    dated = dated_by_previous([(tt if not s.startswith("INFO:") else None, s) for tt, s in body])
    after = [d for (tt, s), d in zip(body, dated, strict=True) if "GET /health" in s and tt > onset]
    lines = ["vLLM 0.8 pod stuck, /health fine the whole time:", ""] + texts(
        p_quote(p_lineno(body, "[%d] %s", 3310))
    )
    E.write("vllm-stuck.md", lines)
    E.stamp_file("vllm-stuck.md", E.clock.utc(end) + timedelta(hours=9))
    return E, entry(
        "vllm-health-blind",
        [
            item(
                "stall-onset",
                E.iso(onset),
                [],
                "last stats line with generation throughput; one more at 0.0 tokens/s "
                "with Running > 0, then none",
            ),
            item(
                "health-check-blind",
                E.iso(after[0]),
                [],
                "the kubelet's /health kept answering 200 (no time on the "
                "lines: dated by the timestamped line before)",
                ts_end=E.iso(after[-1]),
            ),
        ],
        variation="early vLLM V1 (`INFO MM-DD HH:MM:SS [loggers.py:116]`, no process tags, 5 s stats), `found in 60 "
        "second.`, Markdown quote around viewer [N] numbers, year from the file time",
    )


def idle_health_generate() -> tuple[Engine, dict]:
    """0.5.10 idle after traffic; the load balancer's /health_generate runs a 1-token request every 15 s,
    each a Prefill line (progress) and a 200."""
    E = Engine("hkg2-llama8b-idle-19", "0.5.10", datetime(2026, 7, 7, 12, 0, 0), ms=True, tz=8.0)
    S = Traffic(E, ["TP0"], max_tokens=450_000, step_ms=(12, 0.3), out_len=(60, 700))
    t = S.run(0, 150, 2.0, p_stream=0.5, drain=True)
    end = t + 600
    for tp in ticks(E.rng, 0, end, 15.0, 0.3):
        if tp > t:
            done = tp + E.rng.uniform(0.02, 0.06)
            E.doc.rec(
                done,
                prefill_msg(
                    E.rel, n_seq=1, new=1, cached=0, usage=0.0, running=0, queue=0, in_tp=E.rng.uniform(6, 40)
                ),
                "TP0",
            )
            E.access(done + 0.003, "10.7.0.250", "GET", "/health_generate", 200, probe=True)
        else:
            E.access(tp, "10.7.0.250", "GET", "/health_generate", 200, probe=True)
    E.write("server.log", texts(w_ansi([x for x in E.doc.lines() if x[0] >= t - 90])))
    E.stamp_file("server.log", E.clock.utc(end))
    return E, entry(
        "idle",
        [],
        variation="0.5.10 idle; /health_generate every 15 s adds a 1-token Prefill line "
        "each time (progress, not a stall); a TTY capture with ANSI colours",
    )


def tna_utc_glog_beside_local() -> tuple[Engine, dict]:
    """SGLang 0.5.10 TP8 prints local time (UTC+9); the torch 2.6 lines of the same processes print UTC.
    The batch lines stop; 600 s later every rank reports the same ALLREDUCE timeout."""
    E = Engine("nrt4-llama70b-tna-27", "0.5.10", datetime(2026, 2, 20, 9, 40, 0), ms=True, tz=9.0)
    S = Traffic(E, ["TP0"], max_tokens=390_000, step_ms=(22, 0.45), out_len=(100, 900))
    onset, _ = stall_run(S, 0, 120, 2.4, 1, p_stream=0.6, min_running=14)
    utc = Clock(E.clock.base - timedelta(hours=9), ms=True)
    tv = Torch("2.6", utc, E.rng)
    seq = 2_048_771
    first = onset + 600.0 + 0.31
    times = []
    for g in (6, 0, 3, 1, 7, 2, 5, 4):
        t = first + (0 if g == 6 else E.rng.uniform(0.02, 0.7))
        times.append(t)
        torch_report(
            E.doc,
            tv,
            t,
            g,
            g,
            2,
            "1",
            "tp:0",
            seq,
            "ALLREDUCE",
            327_680,
            600_000,
            seq + 1,
            seq - 1,
            1.3 + E.rng.uniform(0, 0.5),
        )
    S.pending(poisson(E.rng, onset + 2, max(times) + 3, 0.05), 0.6)
    E.probe(0, max(times) + 3, "/health", 10.0, "10.9.4.1", code=200)
    body = [x for x in E.doc.lines() if x[0] >= onset - 30]
    E.write("sglang-tp8.log", texts(body))
    E.stamp_file("sglang-tp8.log", E.clock.utc(max(times)) + timedelta(minutes=30))
    return E, entry(
        "torch-nccl-agree",
        [
            item(
                "stall-onset",
                E.iso(onset, True),
                [],
                "last batch line (#running-req %d); the torch watchdog reports "
                "the collective 600 s later" % S.last_running,
            ),
            item(
                "known-signature",
                E.iso(min(times), True),
                [],
                "all eight ranks time out at SeqNum %d ALLREDUCE in "
                "tp:0; their glog lines print UTC, nine hours behind the SGLang lines" % seq,
                signature=NCCL_TIMEOUT_SIG,
            ),
            blind(E, onset, "/health (generation off) kept answering 200 every 10 s"),
        ],
        allow=("watchdog-kill", "all-ranks-frozen"),
        variation="torch 2.6 glog lines in UTC beside SGLang 0.5.10 "
        "lines in local time (UTC+9) in one plain file, a /health probe at 200 throughout",
    )


def rilw_dp_replica_idle_while_other_busy() -> tuple[Engine, dict]:
    """0.5.10 plain DP2 x TP2 (router in front, independent replicas): replica DP1 goes idle and warns of a
    leak on both its TP ranks while replica DP0 keeps serving; DP0 never warns."""
    E = Engine("bos2-llama70b-rilw-15", "0.5.10", datetime(2026, 4, 21, 15, 0, 0), ms=True, tz=-4.0)
    busy = Traffic(
        E, ["DP0 TP0"], max_tokens=300_000, step_ms=(25, 0.5), out_len=(60, 600), clients=("10.15.0.5",)
    )
    spot = Traffic(
        E, ["DP1 TP0"], max_tokens=300_000, step_ms=(25, 0.5), out_len=(60, 400), clients=("10.15.0.6",)
    )
    busy.run(0, 600, 1.2, p_stream=0.5, drain=False)
    t, warns = 0.0, []
    for _ in range(3):  # DP1 serves a burst, goes idle, warns, stays idle a while
        t = spot.run(t, t + E.rng.uniform(30, 60), 0.8, p_stream=0.5, drain=True)
        tw = t + E.rng.uniform(0.05, 0.3)
        evict = E.rng.randint(20_000, 60_000)
        for i in range(2):
            E.doc.rec(
                tw + i * 0.009,
                "token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens="
                "300000, available_size=%d, evictable_size=%d, protected_size=0, session_held=0"
                % (300_000 - evict - 512, evict),
                "DP1 TP%d" % i,
            )
        warns.append(tw)
        t = tw + E.rng.uniform(60, 110)
    end = min(t, 590.0)
    E.probe(0, end, "/health", 10.0, "10.15.0.1")
    E.write("sglang.log", texts([x for x in E.doc.lines() if x[0] <= end]))
    E.stamp_file("sglang.log", E.clock.utc(end) + timedelta(minutes=20))
    return E, entry(
        "repeated-idle-leak-warning",
        [
            item(
                "idle-memory-leak",
                E.iso(warns[0], True),
                ["DP1 TP0", "DP1 TP1"],
                "replica DP1's own scheduler is "
                "idle when it warns (replica DP0's batches do not make DP1 busy): a real leak on DP1",
            ),
        ],
        variation="0.5.10 plain data parallelism (`DPd TPt`, independent replicas): one replica leaks at its "
        "idle periods while the other keeps serving",
    )


ENGINES = [
    wgf_minute_straddle,
    wgf_journald_quote,
    wgf_cri_pp,
    wsr_split_viewers,
    wsr_midnight_compose,
    wsr_viewer_ts_pp,
    lts_lb_viewer_ts,
    lts_dp_metrics_kubectl,
    lts_journald_pipe,
    lts_prefill_last_503,
    lti_tail_compose_fence,
    lti_slow_prefill_quote,
    lti_ping_wrapped,
    rsw_vector,
    rsw_quote_compose_pp,
    rsw_grep_dp_kubectl,
    rilw_issue_fence,
    rilw_kubectl_subset,
    rilw_dp_journald,
    rilw_dp_replica_idle_while_other_busy,
    tna_two_nodes_kubectl,
    tna_timeless_journald,
    tna_utc_glog_beside_local,
    tnd_split_console,
    tnd_opmismatch_wrapped,
    tnd_fluentbit_two_behind,
    tnm_training_compose,
    tnm_same_pgid_quote,
    fcg_kubectl,
    fcg_compose_fence,
    fr_one_behind,
    fr_op_mismatch,
    fr_missing_json,
    ras_per_type,
    ras_two_nodes,
    ras_dead_quote,
    vhb_v1_kubectl,
    vhb_v0_pipe,
    vhb_early_v1_quote,
    ok_busy_kubectl,
    idle_vllm_cri,
    ok_ras_fr,
    ok_torch_warnings_plain,
    idle_health_generate,
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE, help="folder to write fleet/ and truth.json into")
    out = ap.parse_args().out
    fleet = out / "fleet"
    if fleet.exists():
        shutil.rmtree(fleet)
    truth: dict = {"engines": {}}
    for fn in ENGINES:
        E, t = fn()
        for rel, data in sorted(E.files.items()):
            p = fleet / E.name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            when = E.mtimes[rel]  # every file has one: file times are evidence
            ts = math.floor(when.replace(tzinfo=timezone.utc).timestamp())
            os.utime(p, (ts, ts))
        truth["engines"][E.name] = t
    truth["engines"] = dict(sorted(truth["engines"].items()))
    (out / "truth.json").write_text(json.dumps(truth, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
