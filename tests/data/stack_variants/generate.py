#!/usr/bin/env python3
"""Generate the hangforensics *stack-variant corpus*: a small fleet whose engines
carry stack evidence in every format an operator (or SGLang itself) produces,
with the expected `collective-desync` / `known-signature` findings and the
stall rules that apply (truth.json, same format as shared/examples/truth.json).

    python3 tests/data/stack_variants/generate.py

Python 3.10+ standard library only.  Every random choice comes from one fixed
seed, so a re-run rewrites byte-identical files (and the same mtimes).  The
script deletes and rewrites ``fleet/`` and ``truth.json`` next to itself and
touches nothing else.

Formats follow shared/formats/README.md (py-spy 0.4.3 text, --native, --locals,
--json, --subprocesses; gdb 13 ``thread apply all bt``), CPython's faulthandler
(``Fatal Python error: Aborted``, ``Timeout (H:MM:SS)!``), PyTorch's
ProcessGroupNCCL (glog envelope, FlightRecorder ``#N func from file:line``,
c10::Error ``frame #N:``) and shared/reference/sglang-formats.md (SGLang
0.5.5 / 0.5.10 / 0.5.23 logs, uvicorn access lines).  Expected timestamps are
derived from the generated events (never typed in), on the engine log's clock.
Some engines run a renamed SGLang package (``myco_sgl``, ``simsgl``) so that a
detector has to match function names, not paths.
"""

# Log and stack templates keep the %-style of the upstream format strings they copy.
# ruff: noqa: UP031, E501

from __future__ import annotations

import json
import math
import os
import random
import shutil
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLEET = HERE / "fleet"
TRUTH = HERE / "truth.json"
SEED = 20261201
INF = float("inf")

STALL_RULES = [
    "stall-onset",
    "all-ranks-frozen",
    "first-rank-stopped",
    "busy-leak-report",
    "idle-memory-leak",
    "health-check-blind",
    "watchdog-kill",
]
ALL_RULES = STALL_RULES + ["collective-desync", "known-signature"]
FORMATS: dict[str, list[str]] = {}  # scenario -> evidence formats (for README.md, not truth.json)
PHRASE = {200: "200 OK", 503: "503 Service Unavailable"}


# =========================================================================== clock, log, engine
class Clock:
    def __init__(self, base: datetime):
        self.base = base

    def dt(self, t: float) -> datetime:
        return self.base + timedelta(seconds=t)

    def stamp(self, t: float) -> str:
        return self.dt(t).strftime("%Y-%m-%d %H:%M:%S")

    def iso(self, t: float) -> str:
        return self.dt(t).strftime("%Y-%m-%dT%H:%M:%S")

    def hms(self, t: float) -> str:
        return self.dt(t).strftime("%H:%M:%S")

    def sec(self, t: float) -> int:
        return int((self.dt(t) - datetime(2000, 1, 1)).total_seconds() // 1)


class Log:
    """Events (time, seq, lines) of one log file, rendered in time order."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.ev: list[tuple[float, int, list[str]]] = []

    def raw(self, t: float, lines) -> None:
        if isinstance(lines, str):
            lines = [lines]
        self.ev.append((t, len(self.ev), list(lines)))

    def rec(self, t: float, msg: str, rank: str | None = None) -> None:
        """A Python logging record: the prefix goes on the first line only."""
        parts = msg.split("\n")
        parts[0] = "[%s%s] %s" % (self.clock.stamp(t), (" " + rank) if rank else "", parts[0])
        self.raw(t, parts)

    def lines(self) -> list[str]:
        return [x for _, _, g in sorted(self.ev, key=lambda e: (e[0], e[1])) for x in g]


def render(lines: list[str]) -> bytes:
    return "".join(x + "\n" for x in lines).encode("utf-8")


def poisson(rng: random.Random, t0: float, t1: float, rate: float) -> list[float]:
    out, t = [], t0
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= t1:
            return out
        out.append(t)
    return out


def ticks(rng: random.Random, t0: float, t1: float, period: float, jitter: float = 0.3) -> list[float]:
    out, t = [], t0 + rng.uniform(0, period)
    while t < t1:
        out.append(t)
        t += period + rng.uniform(-jitter, jitter)
    return out


def loguni(rng: random.Random, lo: float, hi: float) -> int:
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def mmss(s: float) -> str:
    return "%02d:%02d" % (int(s) // 60, int(s) % 60)


def hexid(rng: random.Random, n: int = 32) -> str:
    return "%0*x" % (n, rng.getrandbits(4 * n))


class Engine:
    def __init__(self, name: str, rel: str, base: datetime):
        self.name, self.rel = name, rel
        self.rng = random.Random(SEED * 1_000_003 + zlib.crc32(name.encode()))
        self.clock = Clock(base)
        self.log = Log(self.clock)
        self.files: dict[str, bytes] = {}
        self.mtimes: dict[str, datetime] = {}
        self.health_ok: list[float] = []
        self.ports: dict[str, int] = {}
        self.py, self.pkg = "", ""

    def rec(self, t: float, msg: str, rank: str | None = None) -> None:
        self.log.rec(t, msg, rank)

    def iso(self, t: float) -> str:
        return self.clock.iso(t)

    def uvicorn(self, t: float, msg: str) -> None:
        self.log.raw(t, "[%s] INFO:     %s" % (self.clock.stamp(t), msg))

    def client(self, ip: str) -> str:
        p = self.ports.get(ip) or self.rng.randint(33000, 52000)
        p += self.rng.randint(1, 41)
        if p > 60999:
            p = 32768 + p % 2000
        self.ports[ip] = p
        return "%s:%d" % (ip, p)

    def access(self, t: float, ip: str, method: str, path: str, code: int) -> None:
        self.uvicorn(t, '%s - "%s %s HTTP/1.1" %s' % (self.client(ip), method, path, PHRASE[code]))
        if path == "/health" and code == 200:
            self.health_ok.append(t)

    def probes(self, t0: float, t1: float, *, health: float | None = 10.0, metrics: float | None = None,
               health_ip: str = "10.0.7.21", metrics_ip: str = "10.0.7.90") -> None:
        """Liveness probes answered 200 at once (no scheduler round trip), Prometheus scrapes."""
        if health:
            for t in ticks(self.rng, t0, t1, health):
                self.access(t, health_ip, "GET", "/health", 200)
        if metrics:
            for t in ticks(self.rng, t0, t1, metrics):
                self.access(t, metrics_ip, "GET", "/metrics", 200)

    def health_fail(self, t0: float, t1: float, period: float, last_heartbeat: float,
                    ip: str = "10.0.7.21") -> None:
        """Generation-based /health on a stuck scheduler: 20 s wait, log line, 503."""
        for t in ticks(self.rng, t0, t1, period):
            end = t + 20.0 + self.rng.uniform(0.02, 0.4)
            if end >= t1:
                break
            self.rec(end, "Health check failed. Server couldn't get a response from detokenizer for last 20 "
                          "seconds. tic start time: %s. last_heartbeat time: %s"
                     % (self.clock.hms(t), self.clock.hms(last_heartbeat)))
            self.access(end + 0.001, ip, "GET", "/health", 503)

    def put(self, rel: str, data: bytes | str, mtime: float) -> None:
        self.files[rel] = data.encode("utf-8") if isinstance(data, str) else data
        self.mtimes[rel] = self.clock.dt(mtime)


# =========================================================================== SGLang log lines
def server_args(model: str, **kw) -> str:
    d = dict(model_path=model, tokenizer_path=model, tokenizer_mode="auto", skip_tokenizer_init=False,
             load_format="auto", trust_remote_code=False, dtype="auto", kv_cache_dtype="auto",
             quantization=None, context_length=None, device="cuda", served_model_name=model,
             chat_template=None, is_embedding=False, revision=None, host="0.0.0.0", port=30000,
             mem_fraction_static=0.85, max_running_requests=None, max_total_tokens=None,
             chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy="fcfs",
             schedule_conservativeness=1.0, page_size=1, tp_size=1, pp_size=1, stream_interval=1,
             stream_output=False, random_seed=0, watchdog_timeout=300, soft_watchdog_timeout=None,
             dist_timeout=None, download_dir=None, base_gpu_id=0, gpu_id_step=1, log_level="info",
             log_level_http=None, log_requests=False, log_requests_level=0, show_time_cost=False,
             enable_metrics=True, enable_metrics_for_all_schedulers=False, decode_log_interval=40,
             api_key=None, dp_size=1, load_balance_method="round_robin", ep_size=1,
             dist_init_addr=None, nnodes=1, node_rank=0, json_model_override_args="{}",
             attention_backend="fa3", sampling_backend="flashinfer", grammar_backend="xgrammar",
             speculative_algorithm=None, enable_dp_attention=False, enable_torch_compile=False,
             cuda_graph_max_bs=None, disable_cuda_graph=False, disable_radix_cache=False,
             disable_overlap_schedule=False, enable_nccl_nvls=False, enable_symm_mem=False,
             disable_custom_all_reduce=False, enable_hierarchical_cache=False, hicache_ratio=2.0,
             disaggregation_mode="null", disaggregation_transfer_backend="mooncake")
    d.update(kw)
    return "server_args=ServerArgs(%s)" % ", ".join("%s=%r" % kv for kv in d.items())


def prefill_msg(rel: str, *, new: int, cached: int, usage: float, running: int, queue: int,
                in_tp: float, pd: tuple[int, int] | None = None, pending: int = 0) -> str:
    s = "Prefill batch, #new-seq: 1, #new-token: %d, #cached-token: %d, token usage: %.2f, " % (new, cached, usage)
    if rel == "0.5.5":
        s += "#running-req: %d, #queue-req: %d, " % (running, queue)
        if pd:
            s += "#prealloc-req: %d, #inflight-req: %d, input throughput (token/s): %.2f, " % (pd[0], pd[1], in_tp)
        return s
    s += "#running-req: %d, #queue-req: %d, " % (running, queue)
    if rel == "0.5.23":
        s += "#pending-token: %d, " % pending
        if pd:
            s += "#bootstrap-req: %d, #inflight-req: %d, #optimistic-req: 0, " % pd
    elif pd:
        s += "#prealloc-req: %d, #inflight-req: %d, " % pd
    return s + "cuda graph: False, input throughput (token/s): %.2f" % in_tp


def decode_msg(rel: str, *, running: int, tokens: int, usage: float, gen_tp: float, queue: int,
               pd: dict | None = None) -> str:
    s = "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, " % (running, tokens, usage)
    if pd:
        s += "pre-allocated usage: %.2f, #prealloc-req: %d, #transfer-req: %d, " % (
            pd["usage"], pd["prealloc"], pd["transfer"])
        if rel == "0.5.23":
            s += "#host-receive-req: 0, "
        s += "#retracted-req: 0, "
    s += "cuda graph: True, gen throughput (token/s): %.2f, #queue-req: %d" % (gen_tp, queue)
    return s + (", " if rel == "0.5.5" else "")


class Req:
    __slots__ = ("t", "inp", "cached", "out", "gen", "stream", "path", "ip", "rid")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


class Sim:
    """The batch-logging scheduler(s) of one group (TP0, a DP leader, both PP
    stage leaders).  Requests arrive (Poisson), are prefilled, then decode in
    windows of decode_log_interval=40 steps; a Decode line closes each window
    that still had a request with >= 40 steps to go.  ``mode``: plain, pd_prefill
    (no decode; requests leave after their KV transfer), pd_decode (no Prefill
    lines; PD fields in Decode lines)."""

    def __init__(self, E: Engine, ranks: list[str], *, max_tokens: int, mode: str = "plain",
                 step=(24.0, 0.35), in_len=(120, 4500), out_len=(40, 650), p_stream=0.5,
                 clients=("10.20.4.17", "10.20.9.133"), rank_gap=0.004):
        self.E, self.ranks, self.max_tokens, self.mode = E, ranks, max_tokens, mode
        self.step, self.in_len, self.out_len, self.p_stream = step, in_len, out_len, p_stream
        self.clients, self.rank_gap = list(clients), rank_gap
        self.active: list[Req] = []
        self.inflight: list[tuple[float, Req]] = []
        self.last: dict[str, float] = {}
        self.last_prefill = None
        self.last_decode = None
        self.draining = False  # no more hand-offs queued: PD-decode fields read 0
        self.evictable = int(max_tokens * E.rng.uniform(0.03, 0.08))

    def emit(self, t: float, msg: str) -> None:
        for i, r in enumerate(self.ranks):
            self.E.rec(t + i * self.rank_gap, msg, r)
            self.last[r] = t + i * self.rank_gap

    @property
    def onset(self) -> float:
        return max(self.last.values())

    def tokens(self, reqs) -> int:
        return sum(r.inp + r.gen for r in reqs)

    def new_req(self, t: float) -> Req:
        rng = self.E.rng
        inp = loguni(rng, *self.in_len)
        stream = rng.random() < self.p_stream
        if self.mode != "plain":
            path = "/generate"
        elif stream:
            path = "/v1/chat/completions" if rng.random() < 0.8 else "/generate"
        else:
            path = rng.choice(["/generate", "/v1/chat/completions", "/v1/completions"])
        cached = rng.randint(inp // 5, inp * 4 // 5) if rng.random() < 0.35 else 0
        return Req(t=t, inp=inp, cached=cached, out=loguni(rng, *self.out_len), gen=0, stream=stream,
                   path=path, ip=rng.choice(self.clients), rid=hexid(rng))

    def _retire_inflight(self, upto: float) -> None:
        keep = []
        for te, r in self.inflight:
            if te <= upto:
                if not r.stream:
                    self.E.access(te, r.ip, "POST", r.path, 200)
            else:
                keep.append((te, r))
        self.inflight = keep

    def admit(self, ta: float, tp: float, req: Req | None = None) -> None:
        rng = self.E.rng
        req = req or self.new_req(ta)
        if req.stream:
            self.E.access(ta + rng.uniform(0.004, 0.04), req.ip, "POST", req.path, 200)
        if self.mode == "pd_decode":
            self.active.append(req)
            return
        self._retire_inflight(tp)
        new = req.inp - req.cached
        gap = tp - self.last_prefill if self.last_prefill is not None else 1.0
        in_tp = new / max(min(gap, 30.0), 0.05)
        usage = (self.tokens(self.active) + req.inp) / self.max_tokens
        pd = None
        if self.mode == "pd_prefill":
            pd = (rng.choice([0, 0, 1, 1, 2]), len(self.inflight))
        self.emit(tp, prefill_msg(self.E.rel, new=new, cached=req.cached, usage=usage,
                                  running=len(self.active), queue=0, in_tp=in_tp, pd=pd))
        self.last_prefill = tp
        if self.mode == "pd_prefill":
            self.inflight.append((tp + rng.uniform(0.08, 0.9), req))
        else:
            self.active.append(req)

    def stalled(self, times) -> None:
        """Requests after the stall: streaming ones get their access line at once
        (headers go out before the first token), the others never complete."""
        for ta in times:
            req = self.new_req(ta)
            if req.stream and self.mode == "plain":
                self.E.access(ta + self.E.rng.uniform(0.004, 0.04), req.ip, "POST", req.path, 200)

    def window(self, t: float):
        rng = self.E.rng
        st = (self.step[0] + self.step[1] * len(self.active)) / 1000.0 * rng.uniform(0.95, 1.05)
        need = [(max(1, r.out - r.gen), r) for r in self.active]
        counted = [r for n, r in need if n >= 40]
        steps = 40 if counted else max(n for n, _ in need)
        return t + steps * st, st, need, counted, steps

    def commit(self, t: float, plan) -> None:
        rng, E = self.E.rng, self.E
        w, st, need, counted, steps = plan
        gen = 0
        for _, r in need:
            g = min(steps, r.out - r.gen)
            r.gen += g
            gen += g
        if counted:
            since = w - self.last_decode if self.last_decode is not None and w - self.last_decode < 30 else w - t
            pd = None
            if self.mode == "pd_decode" and self.draining:
                pd = dict(usage=0.0, prealloc=0, transfer=0)
            elif self.mode == "pd_decode":
                pd = dict(usage=rng.uniform(0.0, 0.05), prealloc=rng.choice([0, 0, 1, 2]),
                          transfer=rng.choice([0, 0, 1, 1, 2]))
            self.emit(w, decode_msg(E.rel, running=len(counted), tokens=self.tokens(counted),
                                    usage=self.tokens(counted) / self.max_tokens,
                                    gen_tp=gen / max(since, 0.05), queue=0, pd=pd))
            self.last_decode = w
        for n, r in need:
            if n <= steps:
                self.active.remove(r)
                self.evictable = min(int(self.max_tokens * 0.4), self.evictable + r.inp + r.gen)
                if not r.stream:
                    E.access(t + n * st + rng.uniform(0.001, 0.02), r.ip, "POST", r.path, 200)

    def run(self, t0: float, t1: float, rate: float, *, stall: float | None = None,
            arrivals: list[float] | None = None) -> float:
        """Serve arrivals in [t0, t1).  With ``stall``, no batch line at or after
        that time; arrivals keep coming.  Returns the simulation time reached
        (everything admitted before t1 is drained unless the stall comes first)."""
        rng = self.E.rng
        arr = arrivals if arrivals is not None else poisson(rng, t0, t1, rate)
        ai, t = 0, t0
        while True:
            if stall is not None and t >= stall:
                self.stalled(arr[ai:])
                return t
            if self.mode == "pd_prefill" or not self.active:
                if ai >= len(arr):
                    if self.mode == "pd_prefill":
                        self._retire_inflight(stall if stall is not None else INF)
                    return t
                ta = arr[ai]
                ai += 1
                t = max(t, ta)
                tp = t + rng.uniform(0.03, 0.25)
                if stall is not None and tp >= stall:
                    self.stalled([ta])
                    t = stall
                    continue
                self.admit(ta, tp)
                t = tp
                continue
            plan = self.window(t)
            w = plan[0]
            lim = w if stall is None else min(w, stall)
            newcomers = []
            while ai < len(arr) and arr[ai] < lim:
                ta = arr[ai]
                ai += 1
                tp = max(ta, t) + rng.uniform(0.03, 0.3)
                if stall is not None and tp >= stall:
                    self.stalled([ta])
                else:
                    newcomers.append((ta, tp))
            if stall is not None and w >= stall:
                for ta, tp in newcomers:
                    self.admit(ta, tp)
                t = stall
                continue
            self.commit(t, plan)
            for ta, tp in newcomers:
                self.admit(ta, tp)
            t = w

    def close(self, t: float) -> float:
        """A healthy capture ends on progress: one last streaming request whose
        Prefill/Decode lines follow its access line; drain everything."""
        req = self.new_req(t)
        req.stream, req.out, req.gen = True, 160, 0
        self.draining = True
        if self.mode == "pd_prefill":
            req.stream = False
        self.admit(t, t + 0.11, req=req)
        t += 0.11
        while self.active:
            plan = self.window(t)
            self.commit(t, plan)
            t = plan[0]
        if self.mode == "pd_prefill":
            self._retire_inflight(INF)
        return t


def boot(E: Engine, t: float, ranks: list[str], *, log_rank: str, kv_tokens: int, cls: str,
         weight_s: float, mem_gb: float, context_len: int, chunked: int = 8192, max_running: int = 128,
         symm: bool = False) -> float:
    """Per-rank startup lines; milestones land in one second on every rank."""
    rng, rel = E.rng, E.rel
    if rel != "0.5.23":
        for r in ranks:
            E.rec(t + rng.uniform(0.0, 0.6), "Init torch distributed begin.", r)
        t = math.floor(t + rng.uniform(3.2, 6.5))
        for r in ranks:
            m = rng.uniform(0.4, 0.95)
            if rel == "0.5.10":
                msg = "Init torch distributed ends. elapsed=%.2f s, mem usage=%.2f GB" % (rng.uniform(2, 7), m)
            else:
                msg = "Init torch distributed ends. mem usage=%.2f GB" % m
            E.rec(t + rng.uniform(0.1, 0.8), msg, r)
        t += 1
    for r in ranks:
        E.rec(t + rng.uniform(0.0, 0.5), "Load weight begin. avail mem=%.2f GB" % rng.uniform(77.0, 78.3), r)
    for pct in (25, 50, 75, 100):
        n = 16
        done = n * pct // 100
        E.log.raw(t + weight_s * pct / 100 - 0.3,
                  "Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [%s<%s,  %.2fit/s]"
                  % (pct, done, n, mmss(weight_s * pct / 100), mmss(weight_s * (100 - pct) / 100),
                     rng.uniform(0.3, 0.5)))
    t = math.floor(t + weight_s)
    for r in ranks:
        avail = 78.0 - mem_gb - rng.uniform(0.2, 0.9)
        if rel == "0.5.5":
            msg = "Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB." % (
                cls, avail, mem_gb)
        else:
            msg = ("Load weight end. elapsed=%.2f s, type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, "
                   "mem usage=%.2f GB." % (weight_s, cls, avail, mem_gb))
        E.rec(t + rng.uniform(0.1, 0.8), msg, r)
    t += 1
    avail = {}
    for r in ranks:
        if symm:
            E.rec(t + rng.uniform(0.0, 0.3), "Pre-allocating symmetric memory pool with 4 GiB", r)
        if rel != "0.5.23":
            kv = (78.0 - mem_gb - 12.0) / 2
            E.rec(t + rng.uniform(0.3, 0.5), "KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB"
                  % (kv_tokens, kv, kv), r)
        avail[r] = rng.uniform(8.5, 13.5)
        E.rec(t + rng.uniform(0.5, 0.9), "Memory pool end. avail mem=%.2f GB" % avail[r], r)
    t += 1
    cap = rng.uniform(14, 29)
    bs = "[1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256]"
    for r in ranks:
        if rel == "0.5.23":
            msg = ("Capture target decode cuda graph begin. backend=full, num_tokens_per_req=1, avail mem=%.2f GB"
                   % avail[r])
        else:
            msg = "Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB" % avail[r]
        E.rec(t + rng.uniform(0.0, 0.4), msg, r)
    t = math.floor(t + cap)
    for r in ranks:
        used = rng.uniform(0.9, 1.9)
        if rel == "0.5.23":
            msg = ("Capture target decode cuda graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, "
                   "avail mem=%.2f GB." % (bs, cap, used, avail[r] - used))
        else:
            msg = "Capture cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB." % (
                cap, used, avail[r] - used)
        E.rec(t + rng.uniform(0.1, 0.8), msg, r)
    t += 1
    E.rec(t + 0.3, "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, "
                   "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB"
          % (kv_tokens, chunked, max(16384, chunked), max_running, context_len, rng.uniform(6.5, 10.5)), log_rank)
    return t + 0.5


def serve_up(E: Engine, t: float, sims: list[Sim], pid: int, port: int = 30000) -> float:
    """uvicorn start, warmup request, ready line."""
    E.uvicorn(t + 0.1, "Started server process [%d]" % pid)
    E.uvicorn(t + 0.12, "Waiting for application startup.")
    E.uvicorn(t + 0.15, "Application startup complete.")
    E.uvicorn(t + 0.17, "Uvicorn running on http://0.0.0.0:%d (Press CTRL+C to quit)" % port)
    E.access(t + 1.1, "127.0.0.1", "GET", "/get_model_info", 200)
    for S in sims:
        if S.mode != "pd_decode":
            S.emit(t + 1.3, prefill_msg(E.rel, new=6, cached=0, usage=0.0, running=0, queue=0, in_tp=0.0,
                                        pd=(0, 0) if S.mode == "pd_prefill" else None))
            S.last_prefill = t + 1.3
    E.access(t + 1.9, "127.0.0.1", "POST", "/generate", 200)
    E.rec(t + 1.95, "The server is fired up and ready to roll!")
    return t + 2.5


# =========================================================================== stack model
class PyEnv:
    """Where an interpreter lives and the stdlib line numbers its frames carry
    (read from the CPython sources of that minor version)."""

    def __init__(self, ver: str, exe: str, stdlib: str, site: str, native_lib: str, lines: dict, libc: str,
                 qualname: bool):
        self.ver, self.exe, self.stdlib, self.site = ver, exe, stdlib, site
        self.native_lib, self.L, self.libc, self.qualname = native_lib, lines, libc, qualname


_L312 = dict(cond_wait=355, cond_wait_t=359, event_wait=655, thread_run=1010, bs_inner=1073, bs=1030,
             queue_get=171, queue_get_t=180, mp_run=108, mp_bs=314, mp_bs_shutdown=332, spawn_main_=135,
             spawn_main=122, shutdown=1623, try_wait=2004, wait_=2046, wait=1264, comm_wait=1201,
             sp_run=550, poll_select=415, comm_comm=1209, comm_select=2108, runners_run=118, aio_run=194,
             runpy_code=88, runpy_main=198, cf_worker=89)
_L311 = dict(_L312, cond_wait=321, cond_wait_t=331, event_wait=629, thread_run=982, bs_inner=1045, bs=1002,
             shutdown=1590, try_wait=2004, runners_run=118, aio_run=190, cf_worker=83)
_L310 = dict(_L312, cond_wait=320, cond_wait_t=324, event_wait=607, thread_run=953, bs_inner=1016, bs=973,
             mp_bs=314, mp_bs_shutdown=332, spawn_main_=129, spawn_main=116, shutdown=1567, try_wait=1917,
             wait_=1959, wait=1209, comm_wait=1146, sp_run=505, poll_select=416, comm_comm=1154,
             comm_select=2021, runners_run=44, aio_run=44, runpy_code=86, runpy_main=196, cf_worker=81)

PY312 = PyEnv("3.12.3", "/usr/bin/python3.12", "/usr/lib/python3.12", "/usr/local/lib/python3.12/dist-packages",
              "python3.12", _L312, "/usr/lib/x86_64-linux-gnu/libc.so.6", True)
PY311 = PyEnv("3.11.7", "/usr/local/python3.11.7/bin/python3.11", "/usr/local/python3.11.7/lib/python3.11",
              "/opt/venv/lib/python3.11/site-packages", "libpython3.11.so.1.0", _L311,
              "/usr/lib/x86_64-linux-gnu/libc.so.6", True)
PY310 = PyEnv("3.10.12", "/usr/bin/python3.10", "/usr/lib/python3.10", "/usr/local/lib/python3.10/dist-packages",
              "python3.10", _L310, "/usr/lib/x86_64-linux-gnu/libc.so.6", False)

STDLIB_TOP = {"threading.py", "queue.py", "subprocess.py", "selectors.py", "runpy.py", "socket.py",
              "multiprocessing", "asyncio", "concurrent"}

# the pybind11 dispatch lambda that sits under every c10d Work.wait() (py-spy --native, Python 3.12 build)
PYBIND_WAIT = (
    "pybind11::cpp_function::initialize<pybind11::cpp_function::cpp_function<bool, c10d::Work, std::chrono::duration<long, "
    "std::ratio<(long)1, (long)1000> >, pybind11::name, pybind11::is_method, pybind11::sibling, pybind11::arg_v, "
    "pybind11::call_guard<pybind11::gil_scoped_release>, char [654]>(pybind11::name const, pybind11::is_method, "
    "pybind11::sibling, pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, char [654])::{lambda(c10d::Work*, "
    "std::chrono::duration<long, std::ratio<(long)1, (long)1000> >)#1}, bool, c10d::Work*, std::chrono::duration<long, "
    "std::ratio<(long)1, (long)1000> >, pybind11::name, pybind11::is_method, pybind11::sibling, pybind11::arg_v, "
    "pybind11::call_guard<pybind11::gil_scoped_release>, char [654]>(pybind11::cpp_function::cpp_function<bool, c10d::Work, "
    "std::chrono::duration<long, std::ratio<(long)1, (long)1000> >, pybind11::name, pybind11::is_method, pybind11::sibling, "
    "pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, char [654]>(pybind11::name const, "
    "pybind11::is_method, pybind11::sibling, pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, "
    "char [654])::{lambda(c10d::Work*, std::chrono::duration<long, std::ratio<(long)1, (long)1000> >&&)#1}, bool "
    "(*)(c10d::Work*, std::chrono::duration<long, std::ratio<(long)1, (long)1000> >), pybind11::name, "
    "pybind11::is_method&, pybind11::sibling, pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, "
    "char [654])::{lambda(pybind11::detail::function_call&)#1}::_FUN"
)
PYBIND_REPLAY = (
    "pybind11::cpp_function::initialize<pybind11::cpp_function::initialize<void, at::cuda::CUDAGraph, , "
    "pybind11::name, pybind11::is_method, pybind11::sibling, pybind11::call_guard<pybind11::gil_scoped_release> >(void "
    "(at::cuda::CUDAGraph::*)(), pybind11::name const&, pybind11::is_method const&, pybind11::sibling const&, "
    "pybind11::call_guard<pybind11::gil_scoped_release> const&)::{lambda(at::cuda::CUDAGraph*)#1}, void, "
    "at::cuda::CUDAGraph*, pybind11::name, pybind11::is_method, pybind11::sibling, "
    "pybind11::call_guard<pybind11::gil_scoped_release> >(pybind11::cpp_function::initialize<void, at::cuda::CUDAGraph, , "
    "pybind11::name, pybind11::is_method, pybind11::sibling, pybind11::call_guard<pybind11::gil_scoped_release> >(void "
    "(at::cuda::CUDAGraph::*)(), pybind11::name const&, pybind11::is_method const&, pybind11::sibling const&, "
    "pybind11::call_guard<pybind11::gil_scoped_release> const&)::{lambda(at::cuda::CUDAGraph*)#1}&&, void "
    "(*)(at::cuda::CUDAGraph*), pybind11::name const&, pybind11::is_method const&, pybind11::sibling const&, "
    "pybind11::call_guard<pybind11::gil_scoped_release> const&)::{lambda(pybind11::detail::function_call&)#3}::_FUN"
)


def P(qual: str, file: str, line: int, locs=None) -> dict:
    """A Python frame: py-spy qualname, short filename, current line, optional
    --locals [(name, repr, is_arg)]."""
    return {"k": "py", "name": qual, "file": file, "line": line, "locals": locs}


def N(sym: str | None, lib: str, src: tuple[str, int] | None = None) -> dict:
    """A native frame (py-spy --native); sym None = unresolved (0x... address)."""
    return {"k": "nat", "name": sym, "lib": lib, "src": src}


def co_name(qual: str) -> str:
    return qual.rsplit(".", 1)[-1] if not qual.startswith("<") else qual


class Stacks:
    """Address / id source of one engine (deterministic from its rng)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.new_process()

    def new_process(self) -> None:
        """Per-process state: object reprs, library load addresses, thread stacks."""
        self.memo: dict = {}
        self.libs: dict = {}
        self.sites: dict = {}
        self.stack_top = 0x7F0000000000 | (self.rng.getrandbits(24) << 16)

    def addr(self) -> str:
        return "0x7f%02x%08x" % (self.rng.randint(0x00, 0xff), self.rng.getrandbits(32))

    def pthread(self, main: bool) -> int:
        if main:
            return 0x7F0000000000 | (self.rng.getrandbits(28) << 12) | 0xB80
        self.stack_top -= 0x800000 * self.rng.randint(1, 3)
        return self.stack_top | 0x6C0

    def site(self, lib: str, key) -> str:
        """The same return site in the same library has one address in a process."""
        if lib.startswith("python"):  # Debian/Ubuntu python3.x: a non-PIE static executable
            base = self.libs.setdefault(lib, 0x400000)
        else:
            base = self.libs.setdefault(lib, 0x7F0000000000 | (self.rng.getrandbits(24) << 16))
        if (lib, key) not in self.sites:
            self.sites[(lib, key)] = base + self.rng.randint(0x8000, 0x3FFFFF)
        return "0x%x" % self.sites[(lib, key)]

    def fill(self, frames: list[dict]) -> list[dict]:
        """Resolve unresolved native frames to concrete addresses, keyed by their
        place relative to the nearest named frame (so every thread that ends in
        start_thread/clone3 shows the same two libc addresses)."""
        out = []
        for i, f in enumerate(frames):
            if f["k"] == "nat" and f["name"] is None:
                key = None
                for j in range(i + 1, len(frames)):
                    if frames[j]["name"] is not None:
                        key = (frames[j]["name"], j - i)
                        break
                if key is None:
                    for j in range(i - 1, -1, -1):
                        if frames[j]["name"] is not None:
                            key = (frames[j]["name"], j - i)
                            break
                f = dict(f, name=self.site(f["lib"], key))
            out.append(f)
        return out


def full_path(env: PyEnv, file: str) -> str:
    if file.startswith("<") or file.startswith("/"):
        return file
    if file.split("/")[0] in STDLIB_TOP:
        return "%s/%s" % (env.stdlib, file)
    return "%s/%s" % (env.site, file)


def lib_path(env: PyEnv, lib: str) -> str:
    if lib.startswith("lib") and ("torch" in lib or lib.startswith("libc10")):
        return "%s/torch/lib/%s" % (env.site, lib)
    if lib in ("libc.so.6", "libstdc++.so.6.0.33", "libffi.so.8", "libcuda.so.1"):
        return "/usr/lib/x86_64-linux-gnu/%s" % lib
    if lib == "libnccl.so.2":
        return "%s/nvidia/nccl/lib/libnccl.so.2" % env.site
    if lib == "libcudart.so.12":
        return "%s/nvidia/cuda_runtime/lib/libcudart.so.12" % env.site
    if lib == env.native_lib:
        return env.exe if "/" not in lib and lib.startswith("python") else "/usr/local/python3.11.7/lib/" + lib
    if lib.startswith("_ctypes"):
        return "%s/lib-dynload/%s" % (env.stdlib, lib)
    if lib == "nccl_allocator.so":
        return "/tmp/symm_allocator/nccl_allocator.so"
    return "%s/%s" % (env.site, lib)


def fmt_value_frame(env: PyEnv, f: dict) -> str:
    """One py-spy text frame line (without indentation)."""
    if f["k"] == "nat":
        if f["src"]:
            return "%s (%s:%d)" % (f["name"], f["src"][0], f["src"][1])
        return "%s (%s)" % (f["name"], f["lib"])
    name = f["name"] if env.qualname else co_name(f["name"])
    return "%s (%s:%d)" % (name, f["file"], f["line"])


def pyspy_text(env: PyEnv, pid: int, title: str, threads: list[dict], *, native: bool = False,
               locals_: bool = False, parent: tuple[int, str] | None = None) -> list[str]:
    """py-spy dump text for one process.  threads: dicts with tid, state, name, frames."""
    out = ["Process %d: %s" % (pid, title), "Python v%s (%s)" % (env.ver, env.exe)]
    if parent:
        out.append("Parent Process %d: %s" % parent)
    out.append("")
    for th in threads:
        out.append('Thread %d (%s): "%s"' % (th["tid"], th["state"], th["name"]))
        for f in th["frames"]:
            if f["k"] == "nat" and not native:
                continue
            out.append("    " + fmt_value_frame(env, f))
            if locals_ and f["k"] == "py" and f["locals"] and f["name"] != "<module>":
                args = [x for x in f["locals"] if x[2]]
                locs = [x for x in f["locals"] if not x[2]]
                if args:
                    out.append("        Arguments:")
                    out += ["            %s: %s" % (n, v) for n, v, _ in args]
                if locs:
                    out.append("        Locals:")
                    out += ["            %s: %s" % (n, v) for n, v, _ in locs]
    return out


ENTRY_CALLERS = ("wrapper", "decorate_context", "Module._call_impl", "_call_impl", "Thread.run", "run",
                 "BaseProcess.run", "TypeBasedDispatcher.__call__", "__call__")


def pyspy_json(env: PyEnv, pid: int, threads: list[dict], *, native: bool = False, rng=None) -> str:
    """py-spy dump --json [--native]: newest thread first, MainThread last."""
    objs = []
    for th in reversed(threads):
        frames = [f for f in th["frames"] if native or f["k"] == "py"]
        fo = []
        for i, f in enumerate(frames):
            if f["k"] == "nat":
                mod = lib_path(env, f["lib"])
                fo.append({"name": f["name"], "filename": mod, "module": mod, "short_filename": f["lib"],
                           "line": 0, "locals": None, "is_entry": True, "is_shim_entry": True})
                continue
            caller = next((g for g in frames[i + 1:] if g["k"] == "py"), None)
            outer = caller is None
            entry = outer or caller["name"] in ENTRY_CALLERS
            locs = None
            if f["locals"] is not None:
                locs = [{"name": n, "addr": 0x7F0000000000 + (zlib.crc32((n + v + str(pid)).encode()) << 4),
                         "arg": a, "repr": v} for n, v, a in f["locals"]]
            name = f["name"] if env.qualname else co_name(f["name"])
            fo.append({"name": name, "filename": full_path(env, f["file"]), "module": None,
                       "short_filename": f["file"], "line": f["line"], "locals": locs, "is_entry": entry,
                       "is_shim_entry": outer and f["name"] in ("<module>", "Thread._bootstrap", "_bootstrap")})
        objs.append({"pid": pid, "thread_id": th["pthread"], "thread_name": th["name"],
                     "os_thread_id": th["tid"], "active": th["state"] != "idle",
                     "owns_gil": th["state"] == "active+gil", "frames": fo, "process_info": None})
    return json.dumps(objs, indent=2) + "\n"


def faulthandler_frags(env: PyEnv, threads: list[dict], current: int | None = None) -> list[str]:
    """faulthandler._Py_DumpTracebackThreads as the write() fragments CPython emits
    (newest thread first; 'Current thread' for the faulting one)."""
    out = []
    for i, th in enumerate(reversed(threads)):
        if i:
            out.append("\n")
        out.append("Current thread 0x" if th["pthread"] == current else "Thread 0x")
        out.append("%016x" % th["pthread"])
        out.append(" (most recent call first):\n")
        pyf = [f for f in th["frames"] if f["k"] == "py"]
        if not pyf:
            out.append("  <no Python frame>\n")
        for f in pyf:
            out += ["  File ", '"', full_path(env, f["file"]), '"', ", line ", str(f["line"]), " in ",
                    co_name(f["name"]), "\n"]
    return out


def numbered_trace(env: PyEnv, frames: list[dict]) -> list[str]:
    """FlightRecorder traceback: '#N co_name from /abs/file.py:line'."""
    return ["#%d %s from %s:%d" % (i, co_name(f["name"]), full_path(env, f["file"]), f["line"])
            for i, f in enumerate(x for x in frames if x["k"] == "py")]


# --------------------------------------------------------------------------- common frame groups
def spawn_tail(env: PyEnv, native: bool = True) -> list[dict]:
    L = env.L
    out = [P("BaseProcess.run", "multiprocessing/process.py", L["mp_run"]),
           P("BaseProcess._bootstrap", "multiprocessing/process.py", L["mp_bs"]),
           P("_main", "multiprocessing/spawn.py", L["spawn_main_"]),
           P("spawn_main", "multiprocessing/spawn.py", L["spawn_main"]),
           P("<module>", "<string>", 1)]
    return out + ([N(None, "libc.so.6")] if native else [])


def thread_tail(env: PyEnv, target: bool = True) -> list[dict]:
    L = env.L
    out = [P("Thread.run", "threading.py", L["thread_run"])] if target else []
    out += [P("Thread._bootstrap_inner", "threading.py", L["bs_inner"]),
            P("Thread._bootstrap", "threading.py", L["bs"])]
    if env.native_lib.startswith("libpython"):
        out.append(N("thread_run", env.native_lib))
    return out + [N(None, "libc.so.6"), N(None, "libc.so.6")]


def c10d_wait() -> list[dict]:
    return [N(None, "libc.so.6"), N("pthread_cond_wait", "libc.so.6"),
            N("std::condition_variable::wait", "libstdc++.so.6.0.33"), N("c10d::Work::wait", "libtorch_cpu.so"),
            N(PYBIND_WAIT, "libtorch_python.so"), N("pybind11::cpp_function::dispatcher", "libtorch_python.so")]


def lock_wait(env: PyEnv) -> list[dict]:
    return [N(None, "libc.so.6"), N(None, "libc.so.6"), N("PyThread_acquire_lock_timed", env.native_lib)]


MOD = [("Module._call_impl", "torch/nn/modules/module.py", 1786),
       ("Module._wrapped_call_impl", "torch/nn/modules/module.py", 1775)]


def modcall() -> list[dict]:
    return [P(*m) for m in MOD]


def helper_threads(S: Stacks, env: PyEnv, pid: int, pkg: str, rel: str, *, watchdog: str = "sleep",
                   extra: list[dict] | None = None) -> list[dict]:
    """The usual non-main threads of a scheduler process (creation order)."""
    L = env.L
    ths = [dict(tid=pid + S.rng.randint(300, 600), state="idle", name="tqdm_monitor",
                frames=lock_wait(env) + [P("Condition.wait", "threading.py", L["cond_wait_t"]),
                                         P("Event.wait", "threading.py", L["event_wait"]),
                                         P("TMonitor.run", "tqdm/_monitor.py", 60)] + thread_tail(env, target=False))]
    if rel == "0.5.5":
        wd_name = "Thread-2 (watchdog_thread)"
        wd = [N("clock_nanosleep", "libc.so.6"),
              P("Scheduler.watchdog_thread", "%s/srt/managers/scheduler_runtime_checker_mixin.py" % pkg, 236)]
    else:
        wd_name = "Thread-3 (_watchdog_thread)"
        wd = [N("clock_nanosleep", "libc.so.6"), P("WatchdogRaw._watchdog_thread", "%s/srt/utils/watchdog.py" % pkg, 121)]
    if watchdog == "dump":
        wd = [N("poll", "libc.so.6"), N(None, env.native_lib),
              P("_PollLikeSelector.select", "selectors.py", L["poll_select"]),
              P("Popen._communicate", "subprocess.py", L["comm_select"]),
              P("Popen.communicate", "subprocess.py", L["comm_comm"]),
              P("run", "subprocess.py", L["sp_run"]),
              P("pyspy_dump_schedulers", "%s/srt/utils/common.py" % pkg, 2393),
              P("WatchdogRaw._watchdog_once", "%s/srt/utils/watchdog.py" % pkg, 147),
              P("WatchdogRaw._watchdog_thread", "%s/srt/utils/watchdog.py" % pkg, 121)]
    ths.append(dict(tid=pid + S.rng.randint(601, 900), state="idle", name=wd_name, frames=wd + thread_tail(env)))
    ths += extra or []
    for th in ths:
        th["frames"] = S.fill(th["frames"])
        th["pthread"] = S.pthread(False)
    return ths


def main_thread(S: Stacks, pid: int, state: str, frames: list[dict]) -> dict:
    return dict(tid=pid, state=state, name="MainThread", frames=S.fill(frames), pthread=S.pthread(True))


def sched_loop(pkg: str, rel: str, loop: str, line: int, mixin: str | None = None) -> list[dict]:
    """event loop frame(s) down to run_scheduler_process."""
    owner = mixin or "Scheduler"
    f = [P("%s.%s" % (owner, loop), "%s/srt/%s" % (pkg, {
        "Scheduler": "managers/scheduler.py",
        "SchedulerDisaggregationPrefillMixin": "disaggregation/prefill.py",
        "SchedulerDisaggregationDecodeMixin": "disaggregation/decode.py",
        "SchedulerPPMixin": "managers/scheduler_pp_mixin.py"}[owner]), line),
         P("decorate_context", "torch/utils/_contextlib.py", 120)]
    if rel == "0.5.23":
        f += [P("dispatch_event_loop", "%s/srt/managers/scheduler.py" % pkg, 4778),
              P("Scheduler.run_event_loop", "%s/srt/managers/scheduler.py" % pkg, 1782),
              P("run_scheduler_process", "%s/srt/managers/scheduler.py" % pkg, 4414)]
    elif rel == "0.5.10":
        f += [P("run_scheduler_process", "%s/srt/managers/scheduler.py" % pkg, 3161)]
    else:
        f += [P("run_scheduler_process", "%s/srt/managers/scheduler.py" % pkg, 2908)]
    return f


def forward_chain(pkg: str, rel: str, kind: str = "decode") -> list[dict]:
    """ModelRunner.forward_* ... Scheduler.run_batch."""
    mr = "%s/srt/model_executor/model_runner.py" % pkg
    lines = {"0.5.5": (1721, 1806, 1773, 311, 1823), "0.5.10": (1898, 2012, 1979, 335, 1684),
             "0.5.23": (2096, 2728, 2559, 331, 1591)}[rel]
    fwd = "ModelRunner.forward_decode" if kind == "decode" else "ModelRunner.forward_extend"
    return [P("decorate_context", "torch/utils/_contextlib.py", 120),
            P(fwd, mr, lines[0] + (0 if kind == "decode" else 41)),
            P("ModelRunner._forward_raw", mr, lines[1]),
            P("ModelRunner.forward", mr, lines[2]),
            P("TpModelWorker.forward_batch_generation", "%s/srt/managers/tp_worker.py" % pkg, lines[3]),
            P("Scheduler.run_batch", "%s/srt/managers/scheduler.py" % pkg, lines[4])]


def llama_layers(pkg: str, model: str = "llama") -> list[dict]:
    m = "%s/srt/models/%s.py" % (pkg, model)
    cls = {"llama": "Llama", "qwen2": "Qwen2"}[model]
    return (modcall() + [P("%sMLP.forward" % cls, m, 104)] + modcall()
            + [P("%sDecoderLayer.forward" % cls, m, 287)] + modcall()
            + [P("%sModel.forward" % cls, m, 366)] + modcall() + [P("%sForCausalLM.forward" % cls, m, 481)])


def tp_all_reduce(pkg: str, env: PyEnv, native: bool, line: int = 2950) -> list[dict]:
    out = c10d_wait() if native else []
    return out + [P("all_reduce", "torch/distributed/distributed_c10d.py", line),
                  P("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
                  P("GroupCoordinator.all_reduce", "%s/srt/distributed/parallel_state.py" % pkg, 528),
                  P("tensor_model_parallel_all_reduce", "%s/srt/distributed/communication_op.py" % pkg, 13)]


# =========================================================================== truth helpers
def item(rule, ts, ranks, why, *, ts_end=None, ranks_alt=None, signature=None) -> dict:
    d = {"rule": rule, "ts": ts, "ts_end": ts_end, "ranks": list(ranks), "signature": signature}
    if ranks_alt:
        d["ranks_alt"] = [list(x) for x in ranks_alt]
    d["why"] = why
    return d


def sig(name: str, why: str) -> dict:
    return item("known-signature", None, [], why, signature=name)


def entry(scenario: str, expect: list, allow=(), formats=()) -> dict:
    """Every scored rule neither expected nor allowed is forbidden."""
    exp = {x["rule"] for x in expect}
    forbid = [r for r in ALL_RULES if r not in exp and r not in allow]
    FORMATS[scenario] = list(formats)
    return {"scenario": scenario, "expect": expect, "allow": list(allow), "forbid": forbid}


def health_blind(E: Engine, onset: float, why: str) -> dict:
    after = [t for t in sorted(E.health_ok) if E.clock.sec(t) > E.clock.sec(onset)]
    return item("health-check-blind", E.iso(after[0]), [], why, ts_end=E.iso(after[-1]))


def stall_item(E: Engine, S_list: list[Sim], all_ranks: list[str], why: str, alts=None) -> tuple[dict, float]:
    onset = max(S.onset for S in S_list)
    leaders = [r for S in S_list for r in S.ranks]
    alt = alts if alts is not None else ([leaders] if leaders != all_ranks else None)
    return item("stall-onset", E.iso(onset), all_ranks, why, ranks_alt=alt), onset


# =========================================================================== engines
def e01_hicache_desync_subprocesses():
    """PD prefill, TP4 EP4, HiCache: after a mass abort TP0/TP2/TP3 sit in the
    HiCache all_reduce, TP1 in the next recv_requests broadcast.  One operator
    `py-spy dump --subprocesses` of the launcher."""
    E = Engine("fra4-qwen3-235b-pd31-prefill", "0.5.10", datetime(2026, 5, 12, 14, 2, 7))
    rng, env, pkg = E.rng, PY312, "myco_sgl"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["TP%d EP%d" % (i, i) for i in range(4)]
    model = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    E.rec(0.4, server_args(model, tp_size=4, ep_size=4, quantization="fp8", port=30000, random_seed=88410367,
                           chunked_prefill_size=16384, enable_hierarchical_cache=True,
                           disaggregation_mode="prefill", disable_cuda_graph=True))
    t = boot(E, 3.0, ranks, log_rank="TP0 EP0", kv_tokens=1290432, cls="Qwen3MoeForCausalLM", weight_s=71.4,
             mem_gb=59.3, context_len=262144, chunked=16384)
    for r in ranks:
        E.rec(t - 0.2 + rng.uniform(0, 0.1), "Init Unified Radix Cache. Components: [device, host(hicache_ratio=2.0, "
                                            "write_policy=write_through)]", r)
    S = Sim(E, ["TP0 EP0"], max_tokens=1290432, mode="pd_prefill", in_len=(300, 12000), p_stream=0.0,
            clients=("10.31.0.5", "10.31.0.6"))
    t = serve_up(E, t, [S], 731204)
    t0 = t + 3
    t = S.run(t0, t0 + 230, 1.2)
    stall = t + rng.uniform(0.3, 0.9)
    t = S.run(t, stall + 1, 1.6, stall=stall)
    onset = S.onset
    for k in range(13):
        room = rng.getrandbits(62)
        E.rec(onset + 0.05 + k * 0.02, "Prefill transfer failed for request rank=0 req.rid='%s' req.bootstrap_room=%d "
                                        "with exception KVTransferError(bootstrap_room=%d): Aborted by AbortReq."
              % (hexid(rng), room, room), "TP0 EP0")
    cap = stall + rng.uniform(300, 340)
    end = cap + rng.uniform(50, 70)
    E.probes(t0 - 2, onset - 1.5, health=10.0, metrics=None)
    E.health_fail(onset + 1.5, end, 10.0, onset + 0.1)
    E.probes(t0 - 2, end, health=None, metrics=15.0)

    # --- py-spy dump --subprocesses --pid <launcher>
    main_pid = 731204
    main_cmd = ("/usr/bin/python3 -m %s.launch_server --model-path %s --tp 4 --ep-size 4 --quantization fp8 "
                "--disaggregation-mode prefill --enable-hierarchical-cache --chunked-prefill-size 16384 "
                "--host 0.0.0.0 --port 30000" % (pkg, model))
    L = env.L
    S_.new_process()
    blocks = [pyspy_text(env, main_pid, main_cmd, [main_thread(S_, main_pid, "idle", [
        P("Runner.run", "asyncio/runners.py", L["runners_run"]), P("run", "asyncio/runners.py", L["aio_run"]),
        P("Server.run", "uvicorn/server.py", 66), P("run", "uvicorn/main.py", 580),
        P("launch_server", "%s/srt/entrypoints/http_server.py" % pkg, 1457),
        P("<module>", "%s/launch_server.py" % pkg, 14), P("_run_code", "runpy.py", L["runpy_code"]),
        P("_run_module_as_main", "runpy.py", L["runpy_main"])])])]
    parent = (main_pid, main_cmd)
    procs = []
    procs.append((main_pid + 41, "/usr/bin/python3 -B -c from multiprocessing.resource_tracker import main;main(25)",
                  [main_thread(S_, main_pid + 41, "idle", [P("main", "multiprocessing/resource_tracker.py", 227),
                                                           P("<module>", "<string>", 1)])]))
    pids = {r: main_pid + 43 + i for i, r in enumerate(ranks)}
    ev = "SchedulerDisaggregationPrefillMixin"
    for r in ranks:
        pid = pids[r]
        S_.new_process()
        if r == "TP1 EP1":
            mf = [P("broadcast", "torch/distributed/distributed_c10d.py", 2829),
                  P("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
                  P("broadcast_pyobj", "%s/srt/utils/common.py" % pkg, 1243),
                  P("Scheduler.recv_requests", "%s/srt/managers/scheduler.py" % pkg, 1238)]
            mf += sched_loop(pkg, "0.5.10", "event_loop_overlap_disagg_prefill", 390, ev)
        else:
            mf = [P("all_reduce", "torch/distributed/distributed_c10d.py", 2950),
                  P("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
                  P("HiRadixCache._all_reduce_attn_groups", "%s/srt/mem_cache/hiradix_cache.py" % pkg, 180),
                  P("HiRadixCache.abort_prefetch", "%s/srt/mem_cache/hiradix_cache.py" % pkg, 812),
                  P("Scheduler.abort_request", "%s/srt/managers/scheduler.py" % pkg, 2739),
                  P("TypeBasedDispatcher.__call__", "%s/utils.py" % pkg, 495),
                  P("Scheduler.process_input_requests", "%s/srt/managers/scheduler.py" % pkg, 1116)]
            mf += sched_loop(pkg, "0.5.10", "event_loop_overlap_disagg_prefill", 396, ev)
        mf += spawn_tail(env)
        cc = "%s/srt/managers/cache_controller.py" % pkg
        extra = [dict(tid=pid + rng.randint(901, 1100), state="idle", name="Thread-4 (prefetch_thread_func)",
                      frames=lock_wait(env) + [P("Condition.wait", "threading.py", L["cond_wait_t"]),
                                               P("Queue.get", "queue.py", L["queue_get_t"]),
                                               P("HiCacheController.prefetch_thread_func", cc, 745)] + thread_tail(env)),
                 dict(tid=pid + rng.randint(1101, 1300), state="idle", name="Thread-5 (backup_thread_func)",
                      frames=lock_wait(env) + [P("Condition.wait", "threading.py", L["cond_wait_t"]),
                                               P("Queue.get", "queue.py", L["queue_get_t"]),
                                               P("HiCacheController.backup_thread_func", cc, 868)] + thread_tail(env))]
        ths = [main_thread(S_, pid, "idle", mf)] + helper_threads(S_, env, pid, pkg, "0.5.10", extra=extra)
        procs.append((pid, "sglang::scheduler_" + r.replace(" ", "_"), ths))
    dpid = main_pid + 48
    S_.new_process()
    procs.append((dpid, "sglang::detokenizer", [main_thread(S_, dpid, "idle", [
        P("Socket.recv_pyobj", "zmq/sugar/socket.py", 1033),
        P("DetokenizerManager.event_loop", "%s/srt/managers/detokenizer_manager.py" % pkg, 120),
        P("run_detokenizer_process", "%s/srt/managers/detokenizer_manager.py" % pkg, 288)] + spawn_tail(env))]))
    order = [0, 3, 5, 1, 4, 2]  # py-spy does not sort children by rank
    for k in order:
        pid, title, ths = procs[k]
        blocks.append(["", "-" * 80] + pyspy_text(env, pid, title, ths, parent=parent))
    E.put("oncall/survey.txt", "\n".join(x for b in blocks for x in b) + "\n", cap)
    E.put("server.log", render(E.log.lines()), end)
    st, onset = stall_item(E, [S], ranks, "last Prefill line; the mass abort is logged, then /health turns 503 "
                                          "(generation-based) while the router keeps sending")
    truth = entry("hicache-desync: py-spy --subprocesses, vendored package myco_sgl", [
        item("collective-desync", None, ["TP1 EP1"], "TP0/TP2/TP3 wait in all_reduce <- "
             "HiRadixCache._all_reduce_attn_groups <- abort_prefetch; TP1 alone waits in the recv_requests broadcast "
             "(broadcast_pyobj): the minority is TP1"),
        sig("hicache-collective-desync", "HiCache _all_reduce_attn_groups on some ranks vs the recv_requests "
            "broadcast on another, same TP group, after a mass abort"),
        st],
        allow=["all-ranks-frozen", "first-rank-stopped"],
        formats=["server.log 0.5.10 PD-prefill", "oncall/survey.txt: py-spy dump --subprocesses (plain, 7 processes, "
                 "children unsorted, launcher + resource tracker + detokenizer + 4 schedulers)"])
    return E, truth


# --------------------------------------------------------------------------- gdb
GDB_UBUNTU_PREAMBLE = [
    "This GDB supports auto-downloading debuginfo from the following URLs:",
    "  <https://debuginfod.ubuntu.com>",
    "Enable debuginfod for this session? (y or [n]) [answered N; input not from terminal]",
    "Debuginfod has been disabled.",
    "To make this setting permanent, add 'set debuginfod enabled off' to .gdbinit.",
]


class Gdb:
    """gdb -p PID -batch -ex 'thread apply all bt' on Ubuntu 24.04 (gdb 15, stripped
    python3.12 with its API symbols exported, no libc debug info)."""

    def __init__(self, rng: random.Random, env: PyEnv):
        self.rng, self.env = rng, env
        self.libbase = {}

    def a(self, lib: str | None, func: str = "??") -> str:
        """A return address: a named function sits at one place (calls return to a few
        offsets inside it); '??' frames are anywhere in the object."""
        if lib is None:  # main executable (non-PIE python3.12)
            lo, span = 0x420000, 0x2D0000
        else:
            lo = self.libbase.setdefault(lib, 0x7F0000000000 | (self.rng.getrandbits(24) << 16))
            span = 0x3F0000
        if func == "??":
            return "0x%016x" % (lo + self.rng.randint(0x1000, span))
        key = (lib, func)
        if key not in self.libbase:
            self.libbase[key] = lo + self.rng.randint(0x1000, span)
        return "0x%016x" % (self.libbase[key] + self.rng.choice((0x3F, 0x71, 0x9B, 0x1D4, 0x2E6)))

    def f(self, func: str, lib: str | None) -> str:
        return "%s in %s ()%s" % (self.a(lib, func), func, (" from " + lib) if lib else "")

    def interp(self, n: int) -> list[str]:
        """CPython frames between two C calls, as a stripped python3.12 shows them."""
        pat = ["_PyEval_EvalFrameDefault", "??", "PyObject_Call", "_PyEval_EvalFrameDefault", "??",
               "_PyObject_Call_Prepend", "??", "_PyObject_MakeTpCall", "_PyEval_EvalFrameDefault"]
        out = []
        while len(out) < n:
            out += [self.f(x, None) for x in pat]
        return out[:n]

    def dump(self, pid: int, threads: list[tuple[int, int, str, list[str]]]) -> str:
        """threads: (lwp, pthread, comm, frames) in creation order, main first."""
        out = list(GDB_UBUNTU_PREAMBLE)
        out += ["[New LWP %d]" % lwp for lwp, _, _, _ in threads[1:]]
        out += ["[Thread debugging using libthread_db enabled]",
                'Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".',
                threads[0][3][0]]
        n = len(threads)
        for k, (lwp, pt, comm, frames) in enumerate(reversed(threads)):
            out += ["", 'Thread %d (Thread 0x%x (LWP %d) "%s"):' % (n - k, pt, lwp, comm)]
            out += ["#%-3d%s" % (i, fr) for i, fr in enumerate(frames)]
        out.append("[Inferior 1 (process %d) detached]" % pid)
        return "\n".join(out) + "\n"

    def thread_end(self) -> list[str]:
        libc = "/lib/x86_64-linux-gnu/libc.so.6"
        return [self.f("??", libc), self.f("??", libc)]


def gdb_scheduler_threads(g: Gdb, pid: int, main_frames: list[str]) -> list[tuple[int, int, str, list[str]]]:
    rng = g.rng
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    cuda = "/lib/x86_64-linux-gnu/libcuda.so.1"
    nccl = "%s/nvidia/nccl/lib/libnccl.so.2" % g.env.site
    S = Stacks(rng)
    th = [(pid, S.pthread(True), "sglang::schedul", main_frames)]
    lwp = pid + rng.randint(20, 40)
    th.append((lwp, S.pthread(False), "cuda00001800007",
               [g.f("poll", libc)] + [g.f("??", cuda) for _ in range(3)] + g.thread_end()))
    lwp += rng.randint(1, 4)
    th.append((lwp, S.pthread(False), "cuda-EvtHandlr",
               [g.f("poll", libc)] + [g.f("??", cuda) for _ in range(3)] + g.thread_end()))
    lwp += rng.randint(200, 400)
    th.append((lwp, S.pthread(False), "sglang::schedul",
               [g.f("??", libc), g.f("??", libc), g.f("PyThread_acquire_lock_timed", None)]
               + g.interp(7) + [g.f("??", None)] + g.thread_end()))
    lwp += rng.randint(200, 400)
    th.append((lwp, S.pthread(False), "sglang::schedul",
               [g.f("clock_nanosleep", libc), g.f("??", libc), g.f("??", None)] + g.interp(6)
               + [g.f("??", None)] + g.thread_end()))
    for fn in ("ncclProxyService(void*)", "ncclProxyServiceUDS(void*)"):
        lwp += rng.randint(5, 60)
        th.append((lwp, S.pthread(False), "sglang::schedul", [g.f("poll", libc), g.f(fn, nccl)] + g.thread_end()))
    lwp += rng.randint(1, 9)
    th.append((lwp, S.pthread(False), "sglang::schedul",
               [g.f("??", libc), g.f("pthread_cond_wait", libc), g.f("ncclProxyProgress(void*)", nccl)]
               + g.thread_end()))
    return th


def e02_symm_gdb():
    """0.5.23 symm-mem registration deadlock, TP4; operator gdb captures per rank
    (rank only in the folder/file name, or via the py-spy capture of the same PID)."""
    E = Engine("ams7-qwen25-72b-symm-12", "0.5.23", datetime(2026, 8, 3, 21, 40, 12))
    rng, env, pkg = E.rng, PY312, "sglang"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["TP%d" % i for i in range(4)]
    model = "Qwen/Qwen2.5-72B-Instruct"
    E.rec(0.1, "Symmetric memory is enabled, setting symmetric memory prealloc size to 4GB as default.Use "
               "environment variable SGLANG_SYMM_MEM_PREALLOC_GB_SIZE to change the prealloc size.")
    E.rec(0.5, server_args(model, tp_size=4, port=30000, random_seed=19034471, watchdog_timeout=3600.0,
                           enable_symm_mem=True, enable_nccl_nvls=True, cuda_graph_max_bs=256))
    t = boot(E, 6.0, ranks, log_rank="TP0", kv_tokens=1512864, cls="Qwen2ForCausalLM", weight_s=44.8, mem_gb=36.4,
             context_len=32768, symm=True)
    S = Sim(E, ["TP0"], max_tokens=1512864, step=(21.0, 0.3), clients=("10.44.2.71", "10.44.2.72"))
    t = serve_up(E, t, [S], 402117)
    t0 = t + 2
    t = S.run(t0, t0 + 120, 1.0)
    gap_end = t + rng.uniform(80, 110)
    stall = gap_end + rng.uniform(3, 7)
    S.run(gap_end, stall + 400, 1.2, stall=stall)
    onset = S.onset
    cap = stall + rng.uniform(330, 370)
    end = cap + rng.uniform(30, 45)
    S.run(stall + 400, end, 0.4, stall=stall)
    E.probes(t0 - 3, end, health=10.0, metrics=15.0)
    E.put("server.log", render(E.log.lines()), end)

    # --- operator captures: gdb per rank, py-spy --native for one of them
    g = Gdb(rng, env)
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    nccl = "%s/nvidia/nccl/lib/libnccl.so.2" % env.site
    ffi = "/lib/x86_64-linux-gnu/libffi.so.8"
    ctypes_so = "/usr/lib/python3.12/lib-dynload/_ctypes.cpython-312-x86_64-linux-gnu.so"
    pids = {r: 402160 + 3 * i for i, r in enumerate(ranks)}
    where = {"TP0": "captures/rank0/gdb.txt", "TP1": "captures/rank1/gdb.txt", "TP2": "captures/tp2.gdb.txt",
             "TP3": "captures/misc/bt-1.txt"}
    same_pid = {}
    for i, r in enumerate(ranks):
        pid = pids[r]
        g.libbase = {}
        mf = [g.f("recvmsg", libc),
              g.f("ncclIpcSocketRecvMsg(ncclIpcSocket*, void*, int, int*)", nccl),
              g.f("ncclProxyCallBlockingUDS(ncclComm*, ncclProxyConnector*, int, void*, int, void*, int, int*, int*)", nccl),
              g.f("ncclProxyClientGetFdBlocking(ncclComm*, int, void*, int*)", nccl),
              g.f("symMemoryImportAndMapSegmentHandle(ncclComm*, int, ncclSymSegment*, void**)", nccl),
              g.f("??", nccl),
              g.f("ncclCommWindowRegister", nccl),
              g.f("nccl_allocator_register_segments_with_comm", "/tmp/symm_allocator/nccl_allocator.so"),
              g.f("??", ffi), g.f("??", ffi), g.f("ffi_call", ffi), g.f("??", ctypes_so), g.f("??", ctypes_so),
              g.f("_PyObject_MakeTpCall", None)]
        same_pid[r] = ("0x" + mf[5].split()[0][2:].lstrip("0"), "0x" + mf[8].split()[0][2:].lstrip("0"))
        mf += g.interp(31)
        mf += [g.f("PyEval_EvalCode", None), g.f("??", None), g.f("??", None), g.f("PyRun_StringFlags", None),
               g.f("PyRun_SimpleStringFlags", None), g.f("Py_RunMain", None), g.f("Py_BytesMain", None),
               g.f("??", libc), g.f("__libc_start_main", libc), g.f("_start", None)]
        threads = gdb_scheduler_threads(g, pid, mf)
        E.put(where[r], g.dump(pid, threads), cap + 2.0 * i + rng.uniform(0.2, 0.9))
    # py-spy --native of the process captures/misc/bt-1.txt was taken from (same PID, title names the rank)
    pid = pids["TP3"]
    S_.new_process()
    sm = "%s/srt/distributed/device_communicators/pynccl_allocator.py" % pkg
    mf = [N("recvmsg", "libc.so.6"), N("ncclIpcSocketRecvMsg", "libnccl.so.2"),
          N("ncclProxyCallBlockingUDS", "libnccl.so.2"), N("ncclProxyClientGetFdBlocking", "libnccl.so.2"),
          N("symMemoryImportAndMapSegmentHandle", "libnccl.so.2"), N(same_pid["TP3"][0], "libnccl.so.2"),
          N("ncclCommWindowRegister", "libnccl.so.2"),
          N("nccl_allocator_register_segments_with_comm", "nccl_allocator.so"), N(same_pid["TP3"][1], "libffi.so.8"),
          N("ffi_call", "libffi.so.8"), N("_ctypes_callproc", "_ctypes.cpython-312-x86_64-linux-gnu.so"),
          N("PyCFuncPtr_call", "_ctypes.cpython-312-x86_64-linux-gnu.so"),
          P("_register_segments_for_comm", sm, 417), P("SymmetricMemoryContext.__exit__", sm, 388),
          P("RowParallelLinear.forward", "%s/srt/layers/linear.py" % pkg, 1311)]
    mf += llama_layers(pkg, "qwen2") + forward_chain(pkg, "0.5.23", "decode")
    mf += sched_loop(pkg, "0.5.23", "event_loop_overlap", 1052) + spawn_tail(env)
    ths = [main_thread(S_, pid, "idle", mf)] + helper_threads(S_, env, pid, pkg, "0.5.23")
    E.put("captures/misc/pyspy-1.txt", "\n".join(pyspy_text(env, pid, "sglang::scheduler_TP3", ths, native=True)) + "\n",
          cap + 9.5)
    st, onset = stall_item(E, [S], ranks, "last Decode line of a burst after an idle gap; streaming POSTs keep "
                                          "arriving, /health 200 (generation off), no watchdog (3600 s)")
    truth = entry("symm-mem-deadlock: gdb thread apply all bt per rank (Ubuntu, stripped python)", [
        st,
        sig("symm-mem-window-register", "every rank's Thread 1: recvmsg <- ncclIpcSocketRecvMsg <- "
            "ncclProxyCallBlockingUDS <- ncclProxyClientGetFdBlocking <- ... <- ncclCommWindowRegister <- "
            "nccl_allocator_register_segments_with_comm; NCCL proxy threads idle in poll"),
        health_blind(E, onset, "/health answered 200 throughout (no scheduler round trip)")],
        allow=["all-ranks-frozen"],
        formats=["server.log 0.5.23, enable_symm_mem=True", "captures/rank0/gdb.txt, captures/rank1/gdb.txt, "
                 "captures/tp2.gdb.txt, captures/misc/bt-1.txt: gdb 15 `thread apply all bt` (comm "
                 "`sglang::schedul`, rank only from the path or from the PID)", "captures/misc/pyspy-1.txt: py-spy "
                 "--native of the same PID as bt-1.txt (title sglang::scheduler_TP3)"])
    return E, truth


def e03_symm_nearmiss_json():
    """Healthy busy 0.5.23 TP4 engine with --enable-symm-mem: py-spy --json shows
    MainThreads *active* inside pynccl_allocator / SymmetricMemoryContext.__exit__
    (a registration in progress, not blocked), and progress continues."""
    E = Engine("sjc6-llama33-70b-symm-02", "0.5.23", datetime(2026, 9, 14, 9, 11, 48))
    rng, env, pkg = E.rng, PY311, "sglang"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["TP%d" % i for i in range(4)]
    model = "meta-llama/Llama-3.3-70B-Instruct"
    E.rec(0.1, "Symmetric memory is enabled, setting symmetric memory prealloc size to 4GB as default.Use "
               "environment variable SGLANG_SYMM_MEM_PREALLOC_GB_SIZE to change the prealloc size.")
    E.rec(0.6, server_args(model, tp_size=4, port=30000, random_seed=61178203, enable_symm_mem=True,
                           enable_nccl_nvls=True, attention_backend="flashinfer"))
    t = boot(E, 5.0, ranks, log_rank="TP0", kv_tokens=1380224, cls="LlamaForCausalLM", weight_s=37.9, mem_gb=33.2,
             context_len=131072, symm=True)
    S = Sim(E, ["TP0"], max_tokens=1380224, step=(19.0, 0.28), clients=("10.60.1.14", "10.60.1.15", "10.60.3.2"))
    t = serve_up(E, t, [S], 55210)
    t0 = t + 2
    t = S.run(t0, t0 + 100, 0.9)
    gap_end = t + rng.uniform(40, 60)
    t = S.run(gap_end, gap_end + 100, 1.6)
    cap = gap_end + rng.uniform(4, 6)  # the burst after the idle gap grows the pool: registration round
    t = S.close(t + 1.5)
    end = t + rng.uniform(20, 30)
    E.probes(t0 - 3, end, health=10.0, metrics=15.0)
    E.put("server.log", render(E.log.lines()), end)

    sm = "%s/srt/distributed/device_communicators/pynccl_allocator.py" % pkg
    model_f = [P("RowParallelLinear.forward", "%s/srt/layers/linear.py" % pkg, 1311)] + llama_layers(pkg, "llama")
    tail = forward_chain(pkg, "0.5.23", "decode") + sched_loop(pkg, "0.5.23", "event_loop_overlap", 1052)
    so = "_ctypes.cpython-311-x86_64-linux-gnu.so"
    per_rank = {
        "TP0": ("active", [P("_register_segments_for_comm", sm, 417), P("SymmetricMemoryContext.__exit__", sm, 388)]
                + model_f + tail, False),
        "TP1": ("active", [N(None, "libcuda.so.1"), N(None, "libcuda.so.1"), N(None, "libcuda.so.1"),
                           N(None, "libnccl.so.2"), N("ncclCommWindowRegister", "libnccl.so.2"),
                           N("nccl_allocator_register_segments_with_comm", "nccl_allocator.so"),
                           N(None, "libffi.so.8"), N("ffi_call", "libffi.so.8"), N("_ctypes_callproc", so),
                           N("PyCFuncPtr_call", so), P("_register_segments_for_comm", sm, 417),
                           P("SymmetricMemoryContext.__exit__", sm, 388)] + model_f + tail, True),
        "TP2": ("active+gil", [P("SymmetricMemoryContext.__exit__", sm, 391)] + model_f + tail, False),
        "TP3": ("active", [P("_register_segments_for_comm", sm, 419), P("SymmetricMemoryContext.__exit__", sm, 388)]
                + model_f + tail, False),
    }
    for i, r in enumerate(ranks):
        pid = 55260 + 2 * i
        S_.new_process()
        state, mf, native = per_rank[r]
        ths = [main_thread(S_, pid, state, mf + spawn_tail(env))] + helper_threads(S_, env, pid, pkg, "0.5.23")
        E.put("pyspy-json/rank%d.json" % i, pyspy_json(env, pid, ths, native=native), cap + 0.4 * i)
    truth = entry("near-miss: healthy symm-mem engine, py-spy --json inside SymmetricMemoryContext.__exit__", [],
                  formats=["server.log 0.5.23, enable_symm_mem=True, busy until the end",
                           "pyspy-json/rank0..3.json: py-spy --json (rank1: --json --native, active inside "
                           "ncclCommWindowRegister -> libcuda, not recvmsg); no process title in JSON: the rank is "
                           "only in the file name"])
    return E, truth


def e04_pp_stage_recv():
    """0.5.10 PP2 x TP2 (Python 3.10: py-spy prints bare co_names).  Stage 1 ranks
    wait in a point-to-point recv for stage 0 (recv <- recv_object <-
    recv_tensor_dict <- _pp_recv_proxy_tensors); stage 0 ranks are busy in
    the MoE forward and never send."""
    E = Engine("iad7-qwen3-235b-pp2-08", "0.5.10", datetime(2026, 6, 23, 2, 17, 31))
    rng, env, pkg = E.rng, PY310, "simsgl"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1"]
    model = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    E.rec(0.5, server_args(model, tp_size=2, pp_size=2, quantization="fp8", port=30000, random_seed=5550127,
                           watchdog_timeout=1800.0, chunked_prefill_size=4096, attention_backend="flashinfer"))
    t = boot(E, 4.0, ranks, log_rank="PP0 TP0", kv_tokens=702448, cls="Qwen3MoeForCausalLM", weight_s=92.3,
             mem_gb=61.7, context_len=262144, chunked=4096)
    S = Sim(E, ["PP0 TP0", "PP1 TP0"], max_tokens=702448, step=(34.0, 0.5), in_len=(200, 6000), rank_gap=0.011,
            clients=("10.9.40.3", "10.9.40.4"))
    t = serve_up(E, t, [S], 88102)
    t0 = t + 2
    t = S.run(t0, t0 + 140, 0.8)
    stall = t + rng.uniform(20, 40)
    S.run(t, stall + 480, 0.6, stall=stall)
    onset = S.onset
    cap = stall + rng.uniform(400, 440)
    end = cap + rng.uniform(40, 60)
    S.run(stall + 480, end, 0.6, stall=stall)
    E.probes(t0 - 3, onset - 1.5, health=10.0, metrics=None)
    E.health_fail(onset + 1.5, end, 10.0, onset + 0.2)
    E.probes(t0 - 3, end, health=None, metrics=20.0)
    E.put("server.log", render(E.log.lines()), end)

    ps = "%s/srt/distributed/parallel_state.py" % pkg
    pp = "%s/srt/managers/scheduler_pp_mixin.py" % pkg
    loop = sched_loop(pkg, "0.5.10", "event_loop_pp", 139, "SchedulerPPMixin")
    recv = [P("recv", "torch/distributed/distributed_c10d.py", 2468),
            P("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
            P("GroupCoordinator.recv_object", ps, 1047), P("GroupCoordinator.recv_tensor_dict", ps, 1163),
            P("SchedulerPPMixin._pp_recv_proxy_tensors", pp, 612)] + loop
    qm = "%s/srt/models/qwen3_moe.py" % pkg
    moe = ([P("FusedMoE.forward", "%s/srt/layers/moe/fused_moe_triton/layer.py" % pkg, 1080)] + modcall()
           + [P("Qwen3MoeSparseMoeBlock.forward", qm, 262)] + modcall()
           + [P("Qwen3MoeDecoderLayer.forward", qm, 689)] + modcall()
           + [P("Qwen3MoeModel.forward", qm, 618)] + modcall() + [P("Qwen3MoeForCausalLM.forward", qm, 893)]
           + forward_chain(pkg, "0.5.10", "extend")[:-1]
           + [P("Scheduler.run_batch", "%s/srt/managers/scheduler.py" % pkg, 1684)] + loop)
    topk = "%s/srt/layers/moe/topk.py" % pkg
    fm = "%s/srt/layers/moe/fused_moe_triton/fused_moe.py" % pkg
    stacks = {
        "PP0 TP0": ("active+gil", [P("fused_topk", topk, 402), P("select_experts", topk, 702),
                                   P("TopK.forward", topk, 257)] + modcall()
                    + [P("Qwen3MoeSparseMoeBlock.forward", qm, 255)] + moe[len(modcall()) + 2:], False),
        "PP0 TP1": ("active", [P("fused_experts_impl", fm, 1390), P("fused_experts", fm, 1334)] + moe, False),
        "PP1 TP0": ("idle", recv, False),
        "PP1 TP1": ("idle", [N(None, "libc.so.6"), N("pthread_cond_wait", "libc.so.6"),
                             N("std::condition_variable::wait", "libstdc++.so.6.0.30"),
                             N("c10d::ProcessGroupGloo::RecvWork::wait", "libtorch_cpu.so"),
                             N(PYBIND_WAIT, "libtorch_python.so"),
                             N("pybind11::cpp_function::dispatcher", "libtorch_python.so")] + recv, True),
    }
    pids = {r: 88140 + 5 * i for i, r in enumerate(ranks)}
    names = {"PP1 TP1": "dumps/1.txt", "PP0 TP0": "dumps/2.txt", "PP1 TP0": "dumps/3.txt", "PP0 TP1": "dumps/4.txt"}
    for k, r in enumerate(["PP1 TP1", "PP0 TP0", "PP1 TP0", "PP0 TP1"]):
        pid = pids[r]
        S_.new_process()
        state, mf, native = stacks[r]
        ths = [main_thread(S_, pid, state, mf + spawn_tail(env, native))] + helper_threads(
            S_, env, pid, pkg, "0.5.10")
        if not native:
            for th in ths:
                th["frames"] = [f for f in th["frames"] if f["k"] == "py"]
        text = pyspy_text(env, pid, "sglang::scheduler_" + r.replace(" ", "_"), ths, native=native)
        E.put(names[r], "\n".join(text) + "\n", cap + 1.1 * k)
    # a second sample of stage 0, 40 s later: still busy, in another frame
    pid = pids["PP0 TP0"]
    mf = [P("fused_experts_impl", fm, 1412), P("fused_experts", fm, 1334)] + moe
    ths = [main_thread(S_, pid, "active", mf + spawn_tail(env, False))]
    E.put("dumps/5.txt", "\n".join(pyspy_text(env, pid, "sglang::scheduler_PP0_TP0", ths)) + "\n", cap + 41.0)
    st, onset = stall_item(E, [S], ranks, "last batch line of both PP stage leaders; /health 503 "
                                          "(generation-based) and POSTs keep arriving",
                           alts=[["PP0 TP0", "PP1 TP0"], ["PP0 TP0"], ["PP1 TP0"]])
    truth = entry("pp-stage-recv-wait: PP2 x TP2, Python 3.10 bare names, simsgl package", [
        st,
        sig("pp-stage-recv-wait", "both stage-1 ranks (PP1 TP0, PP1 TP1) wait in recv <- recv_object <- "
            "recv_tensor_dict <- _pp_recv_proxy_tensors for stage 0, whose ranks are busy (active) in the MoE "
            "forward")],
        allow=["all-ranks-frozen", "first-rank-stopped"],
        formats=["server.log 0.5.10 `PP1 TP0` tags, both stage leaders print batch lines",
                 "dumps/1..5.txt: py-spy text (Python 3.10 co_names; dumps/1.txt --native with gloo RecvWork::wait; "
                 "dumps/5.txt a second sample of PP0 TP0)"])
    return E, truth


SINGLETONS = {"Scheduler", "SpawnProcess", "ServerArgs", "PortArgs", "GroupCoordinator", "MetricsPusher"}


def obj(S: Stacks, typ: str, key: str | None = None) -> str:
    """py-spy's repr of an object: `<TypeName at 0x...>` (16-byte aligned heap address;
    one address per object, so a process's Scheduler is the same everywhere)."""
    k = (typ, key) if key is not None or typ in SINGLETONS else None
    if k is not None and k in S.memo:
        return S.memo[k]
    v = "<%s at 0x7f%02x%07x0>" % (typ, S.rng.randint(0x10, 0xfe), S.rng.getrandbits(28))
    if k is not None:
        S.memo[k] = v
    return v


def fill_locals(S: Stacks, frames: list[dict], pid: int, tp: int = 0, dp: int = 0) -> list[dict]:
    """py-spy --locals values for frames that carry none: `self` for methods, the
    usual arguments of the stdlib / multiprocessing frames."""
    out = []
    names = {f["name"] for f in frames}
    thread_cls = "TMonitor" if "TMonitor.run" in names else "Thread"
    for f in frames:
        if f["k"] != "py" or f["locals"] is not None or f["name"] == "<module>":
            out.append(f)
            continue
        n = f["name"]
        cls = n.split(".")[0] if "." in n and "<locals>" not in n else None
        if n.startswith("BaseProcess."):
            cls = "SpawnProcess"
        locs = []
        if n == "BaseProcess._bootstrap":
            locs = [("self", obj(S, cls), True), ("parent_sentinel", "7", True),
                    ("util", obj(S, "module"), False), ("context", obj(S, "module"), False)]
        elif n == "_main":
            locs = [("fd", "13", True), ("parent_sentinel", "7", True),
                    ("from_parent", obj(S, "_io.BufferedReader"), False),
                    ("preparation_data", '{"log_to_stderr": False, "authkey": %s, "name": "SpawnProcess-%d", ...}'
                     % (obj(S, "AuthenticationString"), tp + 1), False),
                    ("self", obj(S, "SpawnProcess"), False)]
        elif n == "spawn_main":
            locs = [("pipe_handle", "13", True), ("parent_pid", "None", True), ("tracker_fd", "6", True),
                    ("fd", "13", False), ("parent_sentinel", "7", False), ("resource_tracker", obj(S, "module"), False)]
        elif n == "Condition.wait":
            locs = [("self", obj(S, "Condition"), True), ("timeout", "1.0", True),
                    ("waiter", obj(S, "_thread.lock"), False), ("saved_state", "None", False),
                    ("gotit", "False", False)]
        elif n == "Event.wait":
            locs = [("self", obj(S, "Event"), True), ("timeout", "1.0", True), ("signaled", "False", False)]
        elif n in ("Thread._bootstrap_inner", "Thread._bootstrap", "Thread.run"):
            locs = [("self", obj(S, thread_cls, "thread-self"), True)]
        elif n == "TMonitor.run":
            locs = [("self", obj(S, "TMonitor", "thread-self"), True)]
        elif n == "decorate_context":
            locs = [("args", "(%s)" % obj(S, "Scheduler"), True), ("kwargs", "{}", True)]
        elif n == "run_scheduler_process":
            locs = [("server_args", obj(S, "ServerArgs"), True), ("port_args", obj(S, "PortArgs"), True),
                    ("gpu_id", str(tp), True), ("tp_rank", str(tp), True), ("moe_ep_rank", str(tp), True),
                    ("pp_rank", "0", True), ("dp_rank", str(dp), True), ("pipe_writer", obj(S, "Connection"), True),
                    ("prefix", '" DP%d TP%d EP%d"' % (dp, tp, tp), False),
                    ("parent_process", obj(S, "Process"), False), ("scheduler", obj(S, "Scheduler"), False)]
        elif n == "_exception_logger.<locals>.wrapper":
            locs = [("args", "(%s, %s)" % (obj(S, "Tensor"), obj(S, "Tensor")), False),
                    ("kwargs", '{"group": %s}' % obj(S, "torch._C._distributed_c10d.ProcessGroup"), False)]
        elif cls:
            locs = [("self", obj(S, cls), True)]
        out.append(dict(f, locals=locs))
    return out


def e05_scheduler_exited_locals():
    """0.5.5 DP-attention engine (dp 2, tp 4, ep 4).  DP1 TP3 EP3 raises in
    process_batch_result ('Scheduler hit an exception'); its SIGQUIT goes to the
    DataParallelController, which dies silently (no SubprocessWatchdog in 0.5.5).
    The crashed scheduler is stuck in threading._shutdown (a non-daemon thread of
    the vendored fork never ends); the others wait for it in the DP all-gather.
    Operator: one file of `py-spy dump --locals` for every scheduler pid."""
    E = Engine("ord5-qwen3-30b-dp2-19", "0.5.5", datetime(2026, 3, 30, 17, 5, 44))
    rng, env, pkg = E.rng, PY312, "myco_sgl"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["DP0 TP0 EP0", "DP0 TP1 EP1", "DP1 TP2 EP2", "DP1 TP3 EP3"]
    model = "Qwen/Qwen3-30B-A3B-Instruct-2507"
    E.rec(0.5, server_args(model, tp_size=4, dp_size=2, ep_size=4, enable_dp_attention=True, port=30000,
                           random_seed=7102291, watchdog_timeout=1800.0, grammar_backend="xgrammar"))
    t = boot(E, 4.0, ranks, log_rank="DP0 TP0 EP0", kv_tokens=2264512, cls="Qwen3MoeForCausalLM", weight_s=21.2,
             mem_gb=15.9, context_len=262144)
    S0 = Sim(E, ["DP0 TP0 EP0"], max_tokens=2264512, step=(17.0, 0.2), clients=("10.70.3.8", "10.70.3.9"))
    S1 = Sim(E, ["DP1 TP2 EP2"], max_tokens=2264512, step=(17.0, 0.2), clients=("10.70.3.8", "10.70.3.9"))
    t = serve_up(E, t, [S0, S1], 30419)
    t0 = t + 2
    ta = S0.run(t0, t0 + 130, 0.6)
    tb = S1.run(t0, t0 + 130, 0.6)
    t = max(ta, tb)
    exc = t + rng.uniform(15, 30)
    for Sx in (S0, S1):
        Sx.run(t, exc + 520, 0.3, stall=exc + 0.04)
    onset = max(S0.onset, S1.onset)
    sp = "/usr/local/lib/python3.12/dist-packages/%s/srt" % pkg
    tb_text = (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "%s/managers/scheduler.py", line 2905, in run_scheduler_process\n'
        "    scheduler.event_loop_overlap()\n"
        '  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in decorate_context\n'
        "    return func(*args, **kwargs)\n"
        "           ^^^^^^^^^^^^^^^^^^^^^\n"
        '  File "%s/managers/scheduler.py", line 1002, in event_loop_overlap\n'
        "    self.process_batch_result(tmp_batch, tmp_result)\n"
        '  File "%s/managers/scheduler.py", line 2214, in process_batch_result\n'
        "    self.process_batch_result_decode(batch, result, launch_done)\n"
        '  File "%s/managers/scheduler_output_processor_mixin.py", line 262, in process_batch_result_decode\n'
        "    req.grammar.accept_token(next_token_id)\n"
        '  File "%s/constrained/xgrammar_backend.py", line 71, in accept_token\n'
        '    raise ValueError(f"Tokens not accepted: {token}")\n'
        "ValueError: Tokens not accepted: 151645\n" % (sp, sp, sp, sp, sp))
    E.rec(exc, tb_text.rstrip("\n"), "DP1 TP3 EP3")
    cap = exc + rng.uniform(470, 500)
    end = cap + rng.uniform(20, 40)
    for Sx in (S0, S1):
        Sx.run(exc + 520, end, 0.3, stall=exc + 0.04)
    E.probes(t0 - 3, onset - 1.5, health=10.0)
    E.health_fail(onset + 1.5, end, 10.0, onset + 0.1)
    E.put("server.log", render(E.log.lines()), end)

    L = env.L
    sch = "%s/srt/managers/scheduler.py" % pkg
    pids = {r: 30466 + i for i, r in enumerate(ranks)}
    text = []
    for r in ranks:
        pid = pids[r]
        S_.new_process()
        if r == "DP1 TP3 EP3":
            mf = [P("_shutdown", "threading.py", L["shutdown"],
                    [("atexit_call", obj(S_, "function"), False), ("tlock", obj(S_, "_thread.lock"), False),
                     ("locks", "[%s]" % obj(S_, "_thread.lock"), False), ("lock", obj(S_, "_thread.lock"), False)]),
                  P("BaseProcess._bootstrap", "multiprocessing/process.py", L["mp_bs_shutdown"],
                    [("self", obj(S_, "SpawnProcess"), True), ("parent_sentinel", "7", True),
                     ("util", obj(S_, "module"), False), ("context", obj(S_, "module"), False),
                     ("exitcode", "0", False)]),
                  P("_main", "multiprocessing/spawn.py", L["spawn_main_"]),
                  P("spawn_main", "multiprocessing/spawn.py", L["spawn_main"]), P("<module>", "<string>", 1)]
            pusher = [P("Condition.wait", "threading.py", L["cond_wait_t"]), P("Event.wait", "threading.py", L["event_wait"]),
                      P("MetricsPusher._run", "%s/srt/observability/pusher.py" % pkg, 88,
                        [("self", obj(S_, "MetricsPusher"), True), ("interval", "15.0", False),
                         ("gateway", '"http://pushgw.ord5.internal:9091"', False)])] + thread_tail(env)
            extra = [dict(tid=pid + rng.randint(1000, 1200), state="idle", name="myco-metrics-pusher", frames=pusher)]
        else:
            mf = [P("all_gather_into_tensor", "torch/distributed/distributed_c10d.py", 3767,
                    [("output_tensor", obj(S_, "Tensor"), True), ("input_tensor", obj(S_, "Tensor"), True),
                     ("group", obj(S_, "torch._C._distributed_c10d.ProcessGroup"), True), ("async_op", "False", True),
                     ("relevant_args", "(%s)" % obj(S_, "Tensor"), False),
                     ("opts", obj(S_, "torch._C._distributed_c10d.AllgatherOptions"), False),
                     ("group_name", '"1"', False), ("work", obj(S_, "torch._C._distributed_c10d.Work"), False)]),
                  P("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
                  P("Scheduler.prepare_mlp_sync_batch_raw", sch, 1992,
                    [("local_batch", obj(S_, "ScheduleBatch") if r == "DP0 TP0 EP0" else "None", True),
                     ("dp_size", "2", True), ("attn_tp_size", "2", True), ("tp_group", obj(S_, "GroupCoordinator"), True),
                     ("get_idle_batch", obj(S_, "method"), True), ("disable_cuda_graph", "False", True),
                     ("spec_algorithm", obj(S_, "SpeculativeAlgorithm"), True), ("speculative_num_draft_tokens", "None", True),
                     ("num_tokens", "0", False), ("can_cuda_graph", "True", False),
                     ("local_info", obj(S_, "Tensor"), False), ("global_info", obj(S_, "Tensor"), False)]),
                  P("Scheduler.prepare_mlp_sync_batch", sch, 1931),
                  P("Scheduler.get_next_batch_to_run", sch, 1688),
                  P("Scheduler.event_loop_overlap", sch, 988,
                    [("self", obj(S_, "Scheduler"), True), ("result_queue", obj(S_, "collections.deque"), False),
                     ("recv_reqs", "[]", False), ("batch", "None", False)]),
                  P("decorate_context", "torch/utils/_contextlib.py", 120),
                  P("run_scheduler_process", sch, 2905)] + spawn_tail(env, False)
            extra = []
        tp, dp = ranks.index(r), ranks.index(r) // 2
        ths = [main_thread(S_, pid, "idle", fill_locals(S_, mf, pid, tp, dp))] + helper_threads(
            S_, env, pid, pkg, "0.5.5", extra=extra)
        for th in ths[1:]:
            S_.memo.pop(("Thread", "thread-self"), None)
            S_.memo.pop(("TMonitor", "thread-self"), None)
            th["frames"] = fill_locals(S_, th["frames"], pid, tp, dp)
        text += pyspy_text(env, pid, "sglang::scheduler_" + r.replace(" ", "_"), ths, locals_=True)
    E.put("debug/all-schedulers.txt", "\n".join(text) + "\n", cap)
    st, onset = stall_item(E, [S0, S1], ranks, "last batch lines of both DP leaders, at the exception; POSTs keep "
                                               "arriving and /health turns 503")
    truth = entry("scheduler-exited: 0.5.5 DP attention, py-spy --locals of every scheduler in one file", [
        st,
        sig("scheduler-exited", "DP1 TP3 EP3 logged `Scheduler hit an exception` and its MainThread sits in "
            "threading._shutdown (from BaseProcess._bootstrap, exitcode 0) waiting for a non-daemon thread; the "
            "others wait for it in all_gather_into_tensor")],
        allow=["all-ranks-frozen", "first-rank-stopped"],
        formats=["server.log 0.5.5 DP attention (`DP1 TP2 EP2` tags, two DP leaders print batch lines, trailing "
                 "`, `), a `Scheduler hit an exception` traceback", "debug/all-schedulers.txt: four `py-spy dump "
                 "--locals` outputs concatenated, no separators"])
    return E, truth


def mixtral_layers(pkg: str, line: int) -> list[dict]:
    m = "%s/srt/models/mixtral.py" % pkg
    return ([P("MixtralMoE.forward", m, line)] + modcall() + [P("MixtralDecoderLayer.forward", m, 252)] + modcall()
            + [P("MixtralModel.forward", m, 301)] + modcall() + [P("MixtralForCausalLM.forward", m, 343)])


def e06_jit_straggler():
    """0.5.5 TP4 Mixtral: a new prefill shape makes TP1 JIT-compile the fused-MoE
    Triton kernel (ptxas subprocess that never returns) while TP0/TP2/TP3 wait in
    the TP all_reduce after the MoE layer.  Operator py-spy per rank, mixed
    --native / plain."""
    E = Engine("hkg2-mixtral-8x22b-07", "0.5.5", datetime(2026, 2, 9, 11, 26, 3))
    rng, env, pkg = E.rng, PY312, "sglang"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["TP%d" % i for i in range(4)]
    model = "mistralai/Mixtral-8x22B-Instruct-v0.1"
    E.rec(0.4, server_args(model, tp_size=4, port=30000, random_seed=4412009, watchdog_timeout=1800.0,
                           attention_backend="flashinfer", chunked_prefill_size=8192))
    t = boot(E, 3.5, ranks, log_rank="TP0", kv_tokens=821760, cls="MixtralForCausalLM", weight_s=58.6, mem_gb=66.1,
             context_len=65536)
    S = Sim(E, ["TP0"], max_tokens=821760, step=(27.0, 0.4), in_len=(150, 7000), clients=("10.12.0.41", "10.12.0.42"))
    t = serve_up(E, t, [S], 19210)
    t0 = t + 2
    t = S.run(t0, t0 + 150, 0.8)
    # the request that hangs: a long prompt with a new M bucket for the fused-MoE kernel
    big = S.new_req(t + 4.0)
    big.inp, big.cached, big.stream = 31744, 0, True
    S.admit(t + 4.0, t + 4.2, req=big)
    stall = t + 4.3
    S.run(stall, stall + 300, 0.8, stall=stall)
    onset = S.onset
    cap = stall + rng.uniform(250, 280)
    end = cap + rng.uniform(40, 60)
    S.run(stall + 300, end, 0.8, stall=stall)
    E.probes(t0 - 3, onset - 1.5, health=10.0, metrics=15.0)
    E.health_fail(onset + 1.5, end, 10.0, onset + 0.1)
    E.probes(onset + 2, end, health=None, metrics=15.0)
    E.put("server.log", render(E.log.lines()), end)

    L = env.L
    fm = "%s/srt/layers/moe/fused_moe_triton/fused_moe.py" % pkg
    tail = forward_chain(pkg, "0.5.5", "extend") + sched_loop(pkg, "0.5.5", "event_loop_overlap", 1002)
    comp = [P("Popen._try_wait", "subprocess.py", L["try_wait"]), P("Popen._wait", "subprocess.py", L["wait_"]),
            P("Popen.wait", "subprocess.py", L["wait"]), P("Popen.communicate", "subprocess.py", L["comm_wait"]),
            P("run", "subprocess.py", L["sp_run"]),
            P("CUDABackend.make_cubin", "triton/backends/nvidia/compiler.py", 384),
            P("CUDABackend.add_stages.<locals>.<lambda>", "triton/backends/nvidia/compiler.py", 415),
            P("compile", "triton/compiler/compiler.py", 320),
            P("JITFunction.run", "triton/runtime/jit.py", 662),
            P("KernelInterface.__getitem__.<locals>.<lambda>", "triton/runtime/jit.py", 345),
            P("invoke_fused_moe_kernel", fm, 651), P("fused_experts_impl", fm, 1432),
            P("inplace_fused_experts", fm, 1199), P("OpOverloadPacket.__call__", "torch/_ops.py", 1158),
            P("fused_experts", fm, 1334),
            P("FusedMoE.forward", "%s/srt/layers/moe/fused_moe_triton/layer.py" % pkg, 1080)] + modcall()
    stacks = {
        "TP0": ("idle", tp_all_reduce(pkg, env, True) + mixtral_layers(pkg, 171) + tail, True),
        "TP1": ("idle", [N("wait4", "libc.so.6"), N(None, "python3.12")] + comp + mixtral_layers(pkg, 165) + tail, True),
        "TP2": ("idle", tp_all_reduce(pkg, env, False) + mixtral_layers(pkg, 171) + tail, False),
        "TP3": ("idle", tp_all_reduce(pkg, env, False) + mixtral_layers(pkg, 171) + tail, False),
    }
    for i, r in enumerate(["TP2", "TP0", "TP3", "TP1"]):
        pid = 19251 + 3 * ranks.index(r)
        S_.new_process()
        state, mf, native = stacks[r]
        ths = [main_thread(S_, pid, state, mf + spawn_tail(env, native))] + helper_threads(S_, env, pid, pkg, "0.5.5")
        text = pyspy_text(env, pid, "sglang::scheduler_" + r, ths, native=native)
        E.put("spy/py-spy-%d.txt" % pid, "\n".join(text) + "\n", cap + 1.7 * i)
    st, onset = stall_item(E, [S], ranks, "0.5.5 logs Prefill before the forward: the last line is the 31744-token "
                                          "prefill that never finished; POSTs keep arriving, /health 503")
    truth = entry("jit-compile-straggler: TP1 in Triton compile (ptxas subprocess), others in all_reduce", [
        st,
        sig("jit-compile-straggler", "TP1: Popen.wait <- subprocess.run <- CUDABackend.make_cubin <- "
            "triton compile <- JITFunction.run <- invoke_fused_moe_kernel; TP0/TP2/TP3 wait in all_reduce <- "
            "tensor_model_parallel_all_reduce after MixtralMoE")],
        allow=["all-ranks-frozen", "first-rank-stopped"],
        formats=["server.log 0.5.5 (Prefill logged before the forward, trailing `, `)",
                 "spy/py-spy-<pid>.txt: py-spy text per rank, TP0/TP1 --native (long pybind11 lambda, 0x... "
                 "frames), TP2/TP3 plain; collective-desync must not fire: TP1 is in no collective"])
    return E, truth


def garble(rng: random.Random, a: list[str], b: list[str]) -> str:
    """Two writers on one fd: runs of write() fragments interleave mid-line."""
    out, i, j = [], 0, 0
    while i < len(a) or j < len(b):
        take_a = j >= len(b) or (i < len(a) and rng.random() < 0.5)
        n = rng.randint(1, 7)
        if take_a:
            out += a[i:i + n]
            i += n
        else:
            out += b[j:j + n]
            j += n
    return "".join(out)


def e07_cuda_graph_faulthandler():
    """0.5.23 TP4: every rank stuck in CUDAGraph.replay (decode).  A site
    customization re-arms faulthandler.dump_traceback_later(600) every loop
    iteration and registers SIGUSR1; per-rank files faulthandler/tp<N>.log.  On
    TP3 the timer dump and an operator SIGUSR1 dump ran at the same moment and
    their write()s interleaved mid-line (garbled)."""
    E = Engine("sin3-llama31-70b-09", "0.5.23", datetime(2026, 10, 27, 6, 48, 50))
    rng, env, pkg = E.rng, PY311, "simsgl"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["TP%d" % i for i in range(4)]
    model = "meta-llama/Llama-3.1-70B-Instruct"
    E.rec(0.4, server_args(model, tp_size=4, port=30000, random_seed=30018833, watchdog_timeout=1800.0,
                           cuda_graph_max_bs=160))
    t = boot(E, 5.0, ranks, log_rank="TP0", kv_tokens=1288640, cls="LlamaForCausalLM", weight_s=35.1, mem_gb=33.6,
             context_len=131072)
    S = Sim(E, ["TP0"], max_tokens=1288640, step=(20.0, 0.3), clients=("10.80.5.20", "10.80.5.21"))
    t = serve_up(E, t, [S], 7740)
    t0 = t + 2
    t = S.run(t0, t0 + 140, 0.9)
    stall = t + rng.uniform(6, 14)
    S.run(t, stall + 620, 0.5, stall=stall)
    onset = S.onset
    fire = onset + 600.0 + rng.uniform(0.3, 0.8)
    end = fire + rng.uniform(50, 70)
    S.run(stall + 620, end, 0.5, stall=stall)
    E.probes(t0 - 3, onset - 1.5, health=10.0)
    E.health_fail(onset + 1.5, end, 10.0, onset + 0.1)
    E.put("server.log", render(E.log.lines()), end)

    mf = [P("CUDAGraph.replay", "torch/cuda/graphs.py", 88),
          P("CudaGraphRunner.replay", "%s/srt/model_executor/cuda_graph_runner.py" % pkg, 847)]
    mf += forward_chain(pkg, "0.5.23", "decode")[2:] + sched_loop(pkg, "0.5.23", "event_loop_overlap", 1052)
    mf += spawn_tail(env)
    for i, r in enumerate(ranks):
        pid = 7781 + i
        S_.new_process()
        ths = [main_thread(S_, pid, "active", mf)] + helper_threads(S_, env, pid, pkg, "0.5.23")
        timer = ["Timeout (0:10:00)!\n"] + faulthandler_frags(env, ths)
        if r == "TP3":
            usr1 = faulthandler_frags(env, ths, current=ths[0]["pthread"])
            data = garble(rng, timer, usr1)
        else:
            data = "".join(timer)
        E.put("faulthandler/tp%d.log" % i, data, fire + 0.05 * i)
    truth = entry("cuda-graph-replay-stall: faulthandler dump_traceback_later files, one garbled", [
        stall_item(E, [S], ranks, "last Decode line; streaming POSTs keep arriving, /health 503")[0],
        sig("cuda-graph-replay-stall", "every rank's MainThread: replay (torch/cuda/graphs.py) <- replay "
            "(cuda_graph_runner.py) <- _forward_raw <- forward <- forward_batch_generation <- run_batch; "
            "faulthandler prints bare co_names and absolute paths")],
        allow=["all-ranks-frozen", "first-rank-stopped"],
        formats=["server.log 0.5.23", "faulthandler/tp0..3.log: `Timeout (0:10:00)!` dumps (Python 3.11, venv "
                 "paths, simsgl package); tp3.log is two dumps (timer + SIGUSR1 with `Current thread`) interleaved "
                 "mid-line"])
    return E, truth


def glog(clock: Clock, t: float, rank: int, src: int, msg: str, lvl: str = "E") -> str:
    d = clock.dt(t)
    return "[rank%d]:[%s%d%02d %s.%09d ProcessGroupNCCL.cpp:%d] %s" % (
        rank, lvl, d.month, d.day, d.strftime("%H:%M:%S"), d.microsecond * 1000 + (rank * 7919 + 311) % 1000, src, msg)


def cpp_frames(S: Stacks, env: PyEnv) -> list[str]:
    lib = "%s/torch/lib/" % env.site
    return [
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 "
        "(most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (%s in %slibc10.so)" % (S.addr(), lib),
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        "std::ratio<1l, 1000l> > >) + 0x23d (%s in %slibtorch_cuda.so)" % (S.addr(), lib),
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0xc80 (%s in %slibtorch_cuda.so)" % (S.addr(), lib),
        "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (%s in %slibtorch_cuda.so)" % (S.addr(), lib),
        "frame #4: <unknown function> + 0x145c0 (%s in %slibtorch.so)" % (S.addr(), lib),
        "frame #5: <unknown function> + 0x9caa4 (%s in /lib/x86_64-linux-gnu/libc.so.6)" % S.addr(),
        "frame #6: <unknown function> + 0x129c3c (%s in /lib/x86_64-linux-gnu/libc.so.6)" % S.addr(),
        "",
    ]


EXT_MODULES = ("numpy._core._multiarray_umath, numpy.linalg._umath_linalg, torch._C, torch._C._dynamo.autograd_compiler, "
               "torch._C._dynamo.eval_frame, torch._C._dynamo.guards, torch._C._dynamo.utils, torch._C._fft, "
               "torch._C._linalg, torch._C._nested, torch._C._nn, torch._C._sparse, torch._C._special, "
               "charset_normalizer.md, requests.packages.charset_normalizer.md, yaml._yaml, "
               "sentencepiece._sentencepiece, psutil._psutil_linux, zmq.backend.cython._zmq, "
               "PIL._imaging, uvloop.loop, httptools.parser.parser, httptools.parser.url_parser, "
               "websockets.speedups, msgspec._core, setproctitle._setproctitle, pybase64._pybase64, "
               "regex._regex, cuda_utils, __triton_launcher, markupsafe._speedups (total: 61)")


def e08_nccl_timeout_glog():
    """0.5.10 TP4, --dist-timeout 240, TORCH_NCCL_TRACE_BUFFER_SIZE set: every
    rank's ProcessGroupNCCL watchdog times out the same ALLREDUCE.  The log has
    the glog envelope, the FlightRecorder `#N func from file:line` trace, the
    c10::Error `frame #N:` traces and, for the ranks that abort before the
    cleanup kills them, a faulthandler dump after `Fatal Python error: Aborted`.
    support/ holds an on-call paste of one rank's crash output."""
    E = Engine("lhr6-llama33-70b-nccl-15", "0.5.10", datetime(2026, 11, 5, 16, 31, 9))
    rng, env, pkg = E.rng, PY312, "sglang"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["TP%d" % i for i in range(4)]
    model = "meta-llama/Llama-3.3-70B-Instruct"
    E.rec(0.4, server_args(model, tp_size=4, port=30000, random_seed=90017352, dist_timeout=240,
                           disable_custom_all_reduce=True, attention_backend="flashinfer"))
    t = boot(E, 3.0, ranks, log_rank="TP0", kv_tokens=1380224, cls="LlamaForCausalLM", weight_s=36.8, mem_gb=33.2,
             context_len=131072)
    S = Sim(E, ["TP0"], max_tokens=1380224, step=(22.0, 0.33), clients=("10.4.220.235", "10.16.94.185"))
    t = serve_up(E, t, [S], 2310)
    t0 = t + 2
    t = S.run(t0, t0 + 140, 0.9)
    stall = t + rng.uniform(8, 20)
    S.run(t, stall + 1, 0.6, stall=stall)
    onset = S.onset
    E.probes(t0 - 3, onset - 1.5, health=10.0)

    seq = rng.randint(300000, 900000)
    ran = 240000 + rng.randint(60, 130)
    tn = onset + ran / 1000.0
    numel = 8192 * 24
    wn = "WorkNCCL(SeqNum=%d, OpType=ALLREDUCE, NumelIn=%d, NumelOut=%d, Timeout(ms)=240000)" % (seq, numel, numel)
    sp = env.site
    fr_frames = ([P("all_reduce", "torch/distributed/distributed_c10d.py", 2950),
                  P("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
                  P("GroupCoordinator._all_reduce_in_place", "%s/srt/distributed/parallel_state.py" % pkg, 561),
                  P("inplace_all_reduce", "%s/srt/distributed/parallel_state.py" % pkg, 118),
                  P("OpOverloadPacket.__call__", "torch/_ops.py", 1243),
                  P("GroupCoordinator.all_reduce", "%s/srt/distributed/parallel_state.py" % pkg, 528),
                  P("tensor_model_parallel_all_reduce", "%s/srt/distributed/communication_op.py" % pkg, 13),
                  P("RowParallelLinear.forward", "%s/srt/layers/linear.py" % pkg, 1345)]
                 + llama_layers(pkg, "llama") + forward_chain(pkg, "0.5.10", "decode")
                 + sched_loop(pkg, "0.5.10", "event_loop_overlap", 1094) + spawn_tail(env, False))
    numbered = numbered_trace(env, fr_frames)
    order = [2, 0, 3, 1]  # TP2 times out first (the others within ~0.3 s)
    abort_at = {}
    crash_text = {}
    for k, rk in enumerate(order):
        t1 = tn + k * 0.09 + rng.uniform(0, 0.03)
        pg = "[PG ID 2 PG GUID 3 Rank %d] " % rk
        lines = [
            glog(E.clock, t1, rk, 632, "[Rank %d] Watchdog caught collective operation timeout: %s ran for %d "
                                       "milliseconds before timing out." % (rk, wn, ran + k * 23)),
            glog(E.clock, t1 + 2e-5, rk, 2271, pg + " failure detected by watchdog at work sequence id: %d PG status: "
                                                    "last enqueued work: %d, last completed work: %d" % (seq, seq + 1, seq - 1)),
            glog(E.clock, t1 + 3e-3, rk, 670, "Stack trace of the failed collective: "),
        ] + numbered + [""] + [
            glog(E.clock, t1 + 4e-3, rk, 2106 if k == 0 else 1798,
                 "[PG ID 0 PG GUID 0(default_pg) Rank %d] " % rk + (
                     "First PG on this rank to signal dumping." if k == 0
                     else "Observed flight recorder dump signal from another rank via TCPStore.")),
            glog(E.clock, t1 + 0.31, rk, 1746, pg + "Received a dump signal due to a collective timeout from %s and we "
                 "will try our best to dump the debug info. Last enqueued NCCL work: %d, last completed NCCL work: "
                 "%d.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across "
                 "ranks, the order of collectives is not same for all ranks or the scheduled collective, for some "
                 "reason, didn't run. Additionally, this can be caused by GIL deadlock or other reasons such as "
                 "network errors or bugs in the communications library (e.g. NCCL), etc. "
                 % ("this local rank" if k == 0 else " rank 2", seq + 1, seq - 1)),
        ]
        E.log.raw(t1, lines)
        t2 = t1 + 1.2 + rng.uniform(0, 0.4)
        exc = "[Rank %d] Watchdog caught collective operation timeout: %s ran for %d milliseconds before timing out." % (
            rk, wn, ran + k * 23)
        down = [glog(E.clock, t2, rk, 681, "[Rank %d] Some NCCL operations have failed or timed out. Due to the "
                                           "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                                           "corrupted/incomplete data." % rk),
                glog(E.clock, t2 + 1e-5, rk, 695, "[Rank %d] To avoid data inconsistency, we are taking the entire "
                                                  "process down." % rk)]
        E.log.raw(t2, down)
        if rk in (2, 0):  # these two abort before the SIGQUIT cleanup reaches them
            t3 = t2 + 0.002
            crash = ([glog(E.clock, t3, rk, 1750, pg + "Process group watchdog thread terminated with exception: " + exc)]
                     + cpp_frames(S_, env)
                     + ["terminate called after throwing an instance of 'c10::DistBackendError'",
                        "  what():  " + pg + "Process group watchdog thread terminated with exception: " + exc]
                     + cpp_frames(S_, env))
            pid = 2351 + 2 * rk
            S_.new_process()
            ths = [main_thread(S_, pid, "active", [
                N(None, "libcuda.so.1"), N("cudaEventSynchronize", "libcudart.so.12"),
                P("Event.synchronize", "torch/cuda/streams.py", 231),
                P("SchedulerOutputProcessorMixin.process_batch_result_decode",
                  "%s/srt/managers/scheduler_output_processor_mixin.py" % pkg, 251),
                P("Scheduler.process_batch_result", "%s/srt/managers/scheduler.py" % pkg, 2290)]
                + sched_loop(pkg, "0.5.10", "event_loop_overlap", 1094) + spawn_tail(env))]
            ths += helper_threads(S_, env, pid, pkg, "0.5.10")
            fh = ["Fatal Python error: Aborted", ""] + "".join(faulthandler_frags(env, ths)).rstrip("\n").split("\n")
            fh += ["", "Extension modules: " + EXT_MODULES]
            E.log.raw(t3, crash + fh)
            abort_at[rk] = t3
            crash_text[rk] = [lines[0], lines[1]] + lines[2:3] + numbered + [""] + down + crash
    first_rank = min(abort_at, key=abort_at.get)
    qt = abort_at[first_rank] + rng.uniform(0.9, 1.4)
    E.rec(qt, "Subprocess scheduler_%d (pid=%d) crashed with exit code -6. Triggering SIGQUIT for cleanup..."
          % (first_rank, 2351 + 2 * first_rank))
    E.rec(qt + 0.01, "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=<frame at 0x7f3c2a1b5e40, file "
                     "'%s/uvloop/__init__.py', line 61, code run>. It usually means one child failed." % sp)
    end = qt + 0.6
    S.run(stall + 1, qt, 0.6, stall=stall)
    E.health_fail(onset + 1.5, qt, 10.0, onset + 0.1)
    E.put("server.log", render(E.log.lines()), end)
    paste = ["-- from #inc-4471, TP2 stderr (kubectl logs --previous), pasted by on-call --", ""] + crash_text[2]
    E.put("support/1f3a9c.txt", "\n".join(paste) + "\n", end + 1800)
    truth = entry("nccl-collective-timeout: glog envelope, FlightRecorder #N trace, frame #N, faulthandler in log", [
        stall_item(E, [S], ranks, "last Decode line; requests keep arriving and /health fails until the NCCL "
                                  "watchdog takes the ranks down 240 s later")[0],
        sig("nccl-collective-timeout", "all four ranks: `Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=%d, OpType=ALLREDUCE ...)`, FlightRecorder stack of the all_reduce, "
            "DistBackendError abort" % seq)],
        allow=["all-ranks-frozen", "first-rank-stopped", "watchdog-kill"],
        formats=["server.log 0.5.10 with `[rankN]:[E1105 ...]` glog lines, `Stack trace of the failed collective:` "
                 "+ `#N func from /abs/file.py:line`, `frame #N:` C++ traces, two `Fatal Python error: Aborted` "
                 "faulthandler dumps (no Current thread: the abort is on a C++ thread) with `Extension modules:`",
                 "support/1f3a9c.txt: an on-call paste of TP2's crash output (glog, #N trace, frame #N)"])
    return E, truth


def e09_idle_decode_negative():
    """0.5.23 PD decode engine, TP4 EP4, Python 3.10.  Traffic ends; an operator's
    routine survey (two rounds) finds TP0 spinning in on_idle / the decode event
    loop and TP1-TP3 waiting in the recv_requests broadcast from TP0: the normal
    idle picture, which one snapshot cannot tell from a hang.  The log shows an
    idle engine (last requests finished, /health 200)."""
    E = Engine("lhr9-qwen3-235b-pd44-decode", "0.5.23", datetime(2026, 4, 17, 23, 50, 36))
    rng, env, pkg = E.rng, PY310, "sglang"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["TP%d EP%d" % (i, i) for i in range(4)]
    model = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    E.rec(0.4, server_args(model, tp_size=4, ep_size=4, quantization="fp8", port=30001, random_seed=12240961,
                           disaggregation_mode="decode", cuda_graph_max_bs=256))
    t = boot(E, 4.0, ranks, log_rank="TP0 EP0", kv_tokens=1301120, cls="Qwen3MoeForCausalLM", weight_s=70.2,
             mem_gb=59.8, context_len=262144)
    S = Sim(E, ["TP0 EP0"], max_tokens=1301120, mode="pd_decode", step=(26.0, 0.3), p_stream=0.7,
            clients=("10.31.0.5", "10.31.0.6"))
    t = serve_up(E, t, [S], 66012, port=30001)
    t0 = t + 2
    t = S.run(t0, t0 + 160, 1.0)
    t = S.close(t + 2.0)
    idle = t
    r1 = idle + rng.uniform(140, 160)
    r2 = r1 + rng.uniform(100, 130)
    end = r2 + rng.uniform(150, 200)
    E.probes(t0 - 3, end, health=5.0, metrics=15.0, health_ip="10.31.0.2")
    E.put("server.log", render(E.log.lines()), end)

    sch = "%s/srt/managers/scheduler.py" % pkg
    dec = "SchedulerDisaggregationDecodeMixin"
    loop = sched_loop(pkg, "0.5.23", "event_loop_overlap_disagg_decode", 812, dec)
    bcast = [P("broadcast", "torch/distributed/distributed_c10d.py", 2829),
             P("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
             P("broadcast_pyobj", "%s/srt/utils/common.py" % pkg, 1243),
             P("Scheduler.recv_requests", sch, 1238)] + sched_loop(pkg, "0.5.23", "event_loop_overlap_disagg_decode",
                                                                  806, dec)
    tp0 = {1: ("active+gil", [P("Scheduler.is_fully_idle", sch, 2214), P("Scheduler.on_idle", sch, 2241)] + loop),
           2: ("active+gil", [P("SchedulerDisaggregationDecodeMixin.process_decode_queue",
                                "%s/srt/disaggregation/decode.py" % pkg, 905)]
               + sched_loop(pkg, "0.5.23", "event_loop_overlap_disagg_decode", 798, dec))}
    pids = {r: 66051 + i for i, r in enumerate(ranks)}
    for i, r in enumerate(ranks):
        pid = pids[r]
        S_.new_process()
        helpers = helper_threads(S_, env, pid, pkg, "0.5.23")
        main_pt = S_.pthread(True)
        for rnd, tc in ((1, r1), (2, r2)):
            state, mf = tp0[rnd] if i == 0 else ("idle", bcast)
            native = (rnd == 1 and i in (0, 3))
            locals_ = (rnd == 1 and i == 2)
            frames = ([N(None, "libc.so.6"), N("pthread_cond_wait", "libc.so.6"),
                       N("std::condition_variable::wait", "libstdc++.so.6.0.30"),
                       N("c10d::Work::wait", "libtorch_cpu.so"), N(PYBIND_WAIT, "libtorch_python.so"),
                       N("pybind11::cpp_function::dispatcher", "libtorch_python.so")] if i else []) + mf
            frames = frames + spawn_tail(env, native)
            ths = [dict(tid=pid, state=state, name="MainThread", frames=S_.fill(frames), pthread=main_pt)]
            ths += [dict(th) for th in helpers]
            if locals_:
                for th in ths:
                    S_.memo.pop(("Thread", "thread-self"), None)
                    S_.memo.pop(("TMonitor", "thread-self"), None)
                    th["frames"] = fill_locals(S_, th["frames"], pid, i, 0)
            text = pyspy_text(env, pid, "sglang::scheduler_" + r.replace(" ", "_"), ths, native=native,
                              locals_=locals_)
            E.put("snap/round%d/r%d.txt" % (rnd, i), "\n".join(text) + "\n", tc + 0.6 * i)
    truth = entry("idle-loop negative: decode engine idle, TP0 spinning in on_idle, TP1-3 in the recv_requests "
                  "broadcast", [],
                  formats=["server.log 0.5.23 PD-decode (no Prefill lines, `#host-receive-req`), idle for minutes "
                           "after the last request, /health 200 every 5 s",
                           "snap/round1, snap/round2: py-spy per rank (Python 3.10 co_names; round1 r0/r3 --native, "
                           "r2 --locals); TP0 `active+gil` in different idle-path frames in the two rounds"])
    return E, truth


def e10_shared_deadlock_watchdog():
    """0.5.10 TP4, hard watchdog: every rank blocked in the same all_reduce call
    site; all four watchdogs fire in one second and dump `py-spy --native`
    (embedded in the log, unprefixed continuation lines), the debug-info pool
    text, then SIGQUIT."""
    E = Engine("bom3-qwq-32b-21", "0.5.10", datetime(2026, 7, 8, 13, 3, 27))
    rng, env, pkg = E.rng, PY312, "myco_sgl"
    E.py, E.pkg = env.ver, pkg
    S_ = Stacks(rng)
    ranks = ["TP%d" % i for i in range(4)]
    model = "Qwen/QwQ-32B"
    E.rec(0.4, server_args(model, tp_size=4, port=30000, random_seed=2290481, disable_custom_all_reduce=True,
                           attention_backend="flashinfer"))
    t = boot(E, 3.0, ranks, log_rank="TP0", kv_tokens=1810432, cls="Qwen2ForCausalLM", weight_s=19.4, mem_gb=16.3,
             context_len=131072)
    S = Sim(E, ["TP0"], max_tokens=1810432, step=(14.0, 0.2), out_len=(200, 4000), clients=("10.2.8.91", "10.2.8.92"))
    t = serve_up(E, t, [S], 5123)
    t0 = t + 2
    t = S.run(t0, t0 + 130, 0.8)
    stall = t + rng.uniform(5, 15)
    S.run(t, stall + 1, 0.7, stall=stall)
    onset = S.onset
    active = list(S.active)
    w = math.floor(onset + 300 + rng.uniform(40, 140)) + 0.05
    E.probes(t0 - 3, onset - 1.5, health=10.0)
    evict = S.evictable
    total = S.max_tokens
    reqs = ", ".join("Req(rid=%s, input_ids=[%s], output_ids=[%s])" % (
        q.rid, ", ".join(str(rng.randint(11, 151000)) for _ in range(16)),
        ", ".join(str(rng.randint(11, 151000)) for _ in range(min(8, q.gen)))) for q in active)
    for i, r in enumerate(rng.sample(ranks, 4)):
        tw = w + i * 0.04
        pid = 5170 + 2 * ranks.index(r)
        S_.new_process()
        E.rec(tw, "Scheduler debug info:\nscheduler.cur_batch.batch_size()=%d\nscheduler.cur_batch.reqs=[%s]\n"
                  "self.max_total_num_tokens=%d, available_size=%d, evictable_size=%d, protected_size=0, "
                  "session_held=0" % (len(active), reqs, total, total - evict - S.tokens(active), evict), r)
        mf = (tp_all_reduce(pkg, env, True) + [P("RowParallelLinear.forward", "%s/srt/layers/linear.py" % pkg, 1345)]
              + llama_layers(pkg, "qwen2") + forward_chain(pkg, "0.5.10", "decode")
              + sched_loop(pkg, "0.5.10", "event_loop_overlap", 1094) + spawn_tail(env))
        ths = [main_thread(S_, pid, "idle", mf)] + helper_threads(S_, env, pid, pkg, "0.5.10", watchdog="dump")
        body = pyspy_text(env, pid, "sglang::scheduler_" + r, ths, native=True)
        E.rec(tw + 0.2, "Pyspy dump for PID %d:\n" % pid + "\n".join(body) + "\n", r)
        E.rec(tw + 0.3, "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", r)
        E.log.raw(tw + 0.31, ["", ""])
    assert len({E.clock.sec(w + i * 0.04 + d) for i in range(4) for d in (0, 0.3)}) == 1
    q = w + 5.0 + rng.uniform(0.05, 0.2)
    E.rec(q, "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=<frame at 0x7f61c03a2d40, file "
             "'%s/uvloop/__init__.py', line 61, code run>. It usually means one child failed." % env.site)
    end = q + 0.4
    S.run(stall + 1, q, 0.7, stall=stall)
    E.health_fail(onset + 1.5, q, 10.0, onset + 0.1)
    E.put("server.log", render(E.log.lines()), end)
    truth = entry("shared-deadlock negative: every rank in the same all_reduce, hard watchdog with embedded py-spy", [
        stall_item(E, [S], ranks, "last Decode line; streaming POSTs keep arriving, /health 503, watchdog later")[0],
        item("all-ranks-frozen", E.iso(onset), ranks, "the four hard watchdogs fire in the same second: the ranks "
             "froze together at the group's last progress", ts_end=E.iso(onset)),
        item("watchdog-kill", E.iso(w), ranks, "0.5.10 hard scheduler watchdog (self.soft=False) on every rank, "
             "then SIGQUIT"),
        item("busy-leak-report", E.iso(w), ranks, "pool text inside `Scheduler debug info:` while a batch is in "
             "flight: the shortfall is the in-flight batch's tokens")],
        formats=["server.log 0.5.10 with four watchdog records: `Scheduler debug info:` block, `Pyspy dump for PID "
                 "P:` + py-spy --native (long pybind11 frame, 0x... frames; the watchdog thread's own dumping "
                 "frames), `Scheduler watchdog timeout (...)`; vendored myco_sgl package"])
    return E, truth


# =========================================================================== README
README_HEAD = """# Stack-variant corpus

A small synthetic fleet (`fleet/<engine>/...`, about 1.5 MB) whose engines carry
**stack evidence in every format** an operator or SGLang itself produces, with the
expected findings in `truth.json` (same format as `shared/examples/truth.json`).
It exercises the stack rules -- `collective-desync` (ranks = the odd rank(s) out)
and `known-signature` (with its `signature` id) -- together with the stall rules
that apply to each scenario, and it contains near-miss negatives.

Regenerate (Python 3.10+, stdlib only, fixed seed; files, their mtimes and
`truth.json` are byte-identical on every re-run):

    python3 tests/data/stack_variants/generate.py

The script deletes and rewrites `fleet/`, `truth.json` and this README (the
table below is rendered from the same data as `truth.json`).  Expected
timestamps come from the generated events, on the clock of the engine's server
log.  Score a findings document with
`python3 <shared>/examples/score.py tests/data/stack_variants/truth.json findings.json`.
Tests must not read `truth.json` to decide what the product reports.

## Formats covered

| format | where |
| --- | --- |
| py-spy text, plain | `iad7.../dumps/2-5.txt`, `hkg2.../spy/py-spy-19257.txt`, `lhr9.../snap/*/r1.txt` |
| py-spy `--native` (long pybind11 lambda frames, bare `0x...` frames, `wait4`, gloo `RecvWork::wait`) | `hkg2.../spy/py-spy-19251.txt`, `-19254.txt`, `iad7.../dumps/1.txt`, `lhr9.../snap/round1/r0.txt`, `r3.txt`, `ams7.../captures/misc/pyspy-1.txt` |
| py-spy `--locals` | `ord5.../debug/all-schedulers.txt` (four dumps concatenated, no separator), `lhr9.../snap/round1/r2.txt` |
| py-spy `--json` / `--json --native` | `sjc6.../pyspy-json/rank0-3.json` (rank1 with `--native`); JSON has no process title: the rank is only in the file name |
| py-spy `dump --subprocesses` | `fra4.../oncall/survey.txt` (launcher, resource tracker, detokenizer, 4 schedulers, children unsorted) |
| gdb `thread apply all bt` (gdb 15, Ubuntu, stripped python3.12, debuginfod prompt) | `ams7.../captures/rank0/gdb.txt`, `rank1/gdb.txt`, `captures/tp2.gdb.txt`, `captures/misc/bt-1.txt` |
| faulthandler `Timeout (0:10:00)!` dumps (absolute paths, bare co_names) | `sin3.../faulthandler/tp0-3.log`; `tp3.log` is a timer dump and a SIGUSR1 dump (`Current thread`) interleaved mid-line |
| faulthandler after `Fatal Python error: Aborted` in the server log, with `Extension modules:` | `lhr6.../server.log` (two ranks) |
| FlightRecorder `#N func from /abs/file.py:line` | `lhr6.../server.log` (four ranks), `lhr6.../support/1f3a9c.txt` |
| c10::Error `frame #N:` C++ traces, glog `[rankN]:[E1105 ...]` envelope | `lhr6.../server.log`, `lhr6.../support/1f3a9c.txt` |
| py-spy `--native` embedded in the log by the scheduler watchdog (`Pyspy dump for PID P:`) | `bom3.../server.log` (four ranks, same second) |

Conventions worth knowing:

- Ranks are labelled as SGLang writes them (`TP3`, `TP1 EP1`, `DP1 TP3 EP3`,
  `PP1 TP0`); py-spy headers carry the process title `sglang::scheduler_<tags>`.
  gdb's `comm` is truncated to `sglang::schedul`, so a gdb dump carries its rank only
  through its place (`captures/rank0/`, `tp2.gdb.txt`) or, for
  `captures/misc/bt-1.txt`, through the py-spy capture of the same PID
  (`captures/misc/pyspy-1.txt`, title `sglang::scheduler_TP3`).  faulthandler
  and JSON dumps likewise carry the rank only in their file name.
- Frame paths use three package names: `sglang`, a vendored fork `myco_sgl`,
  and `simsgl`.  Detection has to key on function names, not paths.
- Python 3.10 dumps (`iad7...`, `lhr9...`) show bare `co_name`s (`recv_requests`,
  `_bootstrap`); 3.11/3.12 show qualnames (`Scheduler.recv_requests`).
  faulthandler and FlightRecorder always print bare names.
- Operator captures are dated by their mtime (set by the generator, the engine
  log's wall clock read as UTC).
- `lhr9.../snap/round2/r1.txt` is byte-identical to `round1/r1.txt`: an idle rank's
  stack does not change between two samples.

## Engines

Every scored rule that an engine neither expects nor allows is in its `forbid` list.

"""

README_TAIL = """
## Notes on the expectations

- `collective-desync` is expected only where ranks of one group wait in
  *different* collectives (`fra4`: three ranks in the HiCache all_reduce, TP1 in
  the recv_requests broadcast -- the minority is named).  It is forbidden where a
  rank sits in no collective (`hkg2` JIT compile, `ord5` exited scheduler, `lhr9`
  idle loop), where every rank waits in the same frame (`bom3`, `ams7`,
  `lhr6`), where the waiting stage and the busy stage are different groups
  (`iad7`), and on the healthy engine (`sjc6`).
- `known-signature` items leave `ranks` empty (not checked); the `why` names the
  ranks and frames that define the signature.  `lhr9`, `bom3` and `sjc6` forbid
  every signature: an idle loop, a generic shared all_reduce wait and an *active*
  registration that completes are not catalogued hangs.
- `stall-onset` is the last batch line (`ranks_alt` accepts the batch-logging
  rank(s) alone).  `all-ranks-frozen` / `first-rank-stopped` are allowed wherever only
  the batch-logging ranks' lines show when ranks stopped; `bom3` expects
  `all-ranks-frozen` because all four hard watchdogs fire in one second.
- `health-check-blind` is expected only on `ams7` (generation-based health off,
  `/health` 200 throughout); the other hung engines use generation-based health,
  which turns `/health` into 503 with `Health check failed` lines (pending work).
"""


def write_readme(engines: list, truth: dict) -> None:
    rows = ["| engine | release, Python, package | scenario | evidence | expect | allow |",
            "| --- | --- | --- | --- | --- | --- |"]
    for E in engines:
        t = truth["engines"][E.name]

        def lab(x):
            r = x["rule"] + ("(%s)" % x["signature"] if x.get("signature") else "")
            if x["rule"] == "collective-desync":
                r += " " + ", ".join(x["ranks"])
            return "`%s`" % r

        rows.append("| `%s` | %s, %s, `%s` | %s | %s | %s | %s |" % (
            E.name, E.rel, E.py, E.pkg, t["scenario"], "; ".join(FORMATS[t["scenario"]]),
            ", ".join(lab(x) for x in t["expect"]) or "nothing",
            ", ".join("`%s`" % a for a in t["allow"]) or "-"))
    (HERE / "README.md").write_text(README_HEAD + "\n".join(rows) + "\n" + README_TAIL)


# =========================================================================== main
ENGINES = [
    e01_hicache_desync_subprocesses,
    e02_symm_gdb,
    e03_symm_nearmiss_json,
    e04_pp_stage_recv,
    e05_scheduler_exited_locals,
    e06_jit_straggler,
    e07_cuda_graph_faulthandler,
    e08_nccl_timeout_glog,
    e09_idle_decode_negative,
    e10_shared_deadlock_watchdog,
]


def main() -> None:
    if FLEET.exists():
        shutil.rmtree(FLEET)
    truth = {"engines": {}}
    built = []
    for fn in ENGINES:
        E, t = fn()
        built.append(E)
        root = FLEET / E.name
        for rel in sorted(E.files):
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(E.files[rel])
            ts = E.mtimes[rel].replace(tzinfo=timezone.utc).timestamp()  # engine wall clock read as UTC
            os.utime(p, (ts, ts))
        truth["engines"][E.name] = t
    TRUTH.write_text(json.dumps(truth, indent=1) + "\n")
    write_readme(built, truth)


if __name__ == "__main__":
    main()
