#!/usr/bin/env python3
"""Generate the hangforensics *variant corpus*: a small fleet of synthetic but
realistic SGLang engine logs that carries the real-world variation the sample
fleet (shared/examples) leaves out, plus the expected findings (truth.json).

    python3 tests/data/variants/generate.py

Python 3.11 standard library only.  Every random choice comes from one fixed
seed, so a re-run rewrites byte-identical files (gzip headers carry mtime 0).
The script deletes and rewrites ``fleet/`` and ``truth.json`` next to itself
and touches nothing else.

Line formats follow shared/reference/sglang-formats.md (releases 0.4.6, 0.5.2,
0.5.5, 0.5.10, 0.5.23; PyTorch ProcessGroupNCCL; uvicorn access lines) and the
py-spy text grammar of shared/formats/README.md.  Expected timestamps are
derived from the generated events themselves (never typed in by hand), on the
clock of the engine's main server log.
"""

# The log templates below keep the `%`-style of the upstream format strings they copy
# (Python logging, SGLang f-strings rendered the same way), so UP031 is off here.
# ruff: noqa: UP031

from __future__ import annotations

import gzip
import io
import json
import math
import os
import random
import re
import shutil
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLEET = HERE / "fleet"
TRUTH = HERE / "truth.json"
SEED = 20261130
INF = float("inf")

RULES = [
    "stall-onset",
    "all-ranks-frozen",
    "first-rank-stopped",
    "busy-leak-report",
    "idle-memory-leak",
    "health-check-blind",
    "watchdog-kill",
]
PHRASE = {200: "200 OK", 400: "400 Bad Request", 404: "404 Not Found", 503: "503 Service Unavailable"}
OLD = ("0.4.6", "0.5.2")  # `Prefill batch. ` / `Decode batch. ` heads
TRAILING = ("0.5.2", "0.5.5")  # batch lines end with `, `
NEW = ("0.5.10", "0.5.23")  # prefill lines carry graph + input throughput


# --------------------------------------------------------------------------- clock and log
class Clock:
    """Wall clock of one log file: base datetime + offset seconds (another node's skew)."""

    def __init__(self, base: datetime, offset: float = 0.0, ms: bool = False):
        self.base, self.offset, self.ms = base, offset, ms

    def dt(self, t: float) -> datetime:
        return self.base + timedelta(seconds=t + self.offset)

    def stamp(self, t: float, ms: bool | None = None) -> str:
        d = self.dt(t)
        s = d.strftime("%Y-%m-%d %H:%M:%S")
        if self.ms if ms is None else ms:
            s += ".%03d" % (d.microsecond // 1000)
        return s

    def iso(self, t: float) -> str:
        return self.dt(t).strftime("%Y-%m-%dT%H:%M:%S")

    def hms(self, t: float) -> str:
        return self.dt(t).strftime("%H:%M:%S")

    def sec(self, t: float) -> int:
        """Whole second of t as printed on this clock (for same-second comparisons)."""
        return int((self.dt(t) - datetime(2000, 1, 1)).total_seconds() // 1)


class Log:
    """Events (time, seq, lines) of one log file; rendered in time order."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.ev: list[tuple[float, int, list[str]]] = []

    def raw(self, t: float, lines) -> None:
        if isinstance(lines, str):
            lines = [lines]
        self.ev.append((t, len(self.ev), list(lines)))

    def rec(self, t: float, msg: str, rank: str | None = None) -> None:
        """A Python logging record: prefix on the first line only."""
        parts = msg.split("\n")
        parts[0] = "[%s%s] %s" % (self.clock.stamp(t), (" " + rank) if rank else "", parts[0])
        self.raw(t, parts)

    def uvicorn(self, t: float, msg: str) -> None:
        """uvicorn's own formatter: no milliseconds even with SGLANG_LOG_MS=1."""
        self.raw(t, "[%s] INFO:     %s" % (self.clock.stamp(t, ms=False), msg))

    def groups(self) -> list[list[str]]:
        return [lines for _, _, lines in sorted(self.ev, key=lambda e: (e[0], e[1]))]

    def lines(self) -> list[str]:
        return [x for g in self.groups() for x in g]


def render(lines: list[str], *, crlf: bool = False, prefix: str = "") -> bytes:
    eol = "\r\n" if crlf else "\n"
    text = "".join(prefix + x + eol for x in lines)
    return text.encode("utf-8", "surrogateescape")


def gz(data: bytes, name: str = "") -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename=name, mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


# --------------------------------------------------------------------------- helpers
def poisson(rng: random.Random, t0: float, t1: float, rate: float) -> list[float]:
    out, t = [], t0
    if rate <= 0:
        return out
    while True:
        t += rng.expovariate(rate)
        if t >= t1:
            return out
        out.append(t)


def hexid(rng: random.Random, n: int = 32) -> str:
    return "%0*x" % (n, rng.getrandbits(4 * n))


def addr(rng: random.Random) -> str:
    return "0x7f%010x" % rng.getrandbits(40)


def loguni(rng: random.Random, lo: float, hi: float) -> int:
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def ticks(rng: random.Random, t0: float, t1: float, period: float, jitter: float = 0.4) -> list[float]:
    out, t = [], t0 + rng.uniform(0, period)
    while t < t1:
        out.append(t + rng.uniform(-jitter, jitter))
        t += period
    return out


def same_second(t: float, lo: float = 0.05, hi: float = 0.85) -> float:
    """t moved to the same whole second with a fraction in [lo, hi]."""
    return math.floor(t) + lo + (t - math.floor(t)) * (hi - lo)


def occupancy(rng: random.Random) -> tuple[float, float]:
    fwd = rng.uniform(78, 97)
    return fwd, fwd + rng.uniform(0.5, 99.8 - fwd)


def usage_prefill(kind: str, full: float, other: float) -> str:
    if kind == "swa":
        return "full token usage: %.2f, swa token usage: %.2f, " % (full, other)
    if kind == "mamba":
        return "full token usage: %.2f, mamba usage: %.2f, " % (full, other)
    return "token usage: %.2f, " % full


def head(kind: str, rel: str, it: int | None) -> str:
    return "%s batch%s%s " % (kind, " [%d]" % it if it is not None else "", "." if rel in OLD else ",")


def prefill_msg(
    rel, *, n_seq, new, cached, usage, running, queue, it=None, pending=0, in_tp=0.0, mfu=None, occ=None
) -> str:
    s = head("Prefill", rel, it) + "#new-seq: %d, #new-token: %d, #cached-token: %d, " % (n_seq, new, cached)
    s += usage
    if rel == "0.4.6":
        s += "#running-req: %d, #queue-req: %d" % (running, queue)
    elif rel in TRAILING:
        s += "#running-req: %d, #queue-req: %d, " % (running, queue)
    elif rel == "0.5.10":
        s += "#running-req: %d, #queue-req: %d, cuda graph: False, input throughput (token/s): %.2f" % (
            running,
            queue,
            in_tp,
        )
        if mfu is not None:
            s += ", est. prefill TFLOPS/s (per GPU): %.2f" % mfu
    else:
        s += (
            "#running-req: %d, #queue-req: %d, #pending-token: %d, cuda graph: False, "
            "input throughput (token/s): %.2f" % (running, queue, pending, in_tp)
        )
        if occ is not None:
            s += ", fwd occupancy: %.1f%%, fwd+idle occupancy: %.1f%%" % occ
    return s


def decode_msg(
    rel, *, running, tok_part, gen_tp, queue, it=None, spec=None, pd=None, mfu=None, occ=None
) -> str:
    s = head("Decode", rel, it) + "#running-req: %d, " % running + tok_part
    if spec is not None:
        s += (
            ("accept len: %.2f, " % spec[0])
            if rel in OLD
            else ("accept len: %.2f, accept rate: %.2f, " % spec)
        )
    if pd is not None:
        if rel == "0.4.6":
            s += "pre-allocated usage: %.2f, " % pd["usage"]
        elif rel == "0.5.2":
            s += "pre-allocated usage: %.2f, #retracted-req: %d, " % (pd["usage"], pd["retracted"])
        else:
            s += "pre-allocated usage: %.2f, #prealloc-req: %d, #transfer-req: %d, " % (
                pd["usage"],
                pd["prealloc"],
                pd["transfer"],
            )
            if rel == "0.5.23":
                s += "#host-receive-req: %d, " % pd["host"]
            s += "#retracted-req: %d, " % pd["retracted"]
    s += "cuda graph: True, gen throughput (token/s): %.2f, #queue-req: %d" % (gen_tp, queue)
    if rel in TRAILING:
        s += ", "
    if mfu is not None and rel in NEW:
        s += (
            ", est. decode TFLOPS/s (per GPU): %.2f, est. read BW (GB/s per GPU): %.2f, "
            "est. write BW (GB/s per GPU): %.2f" % mfu
        )
    if occ is not None and rel == "0.5.23":
        s += ", fwd occupancy: %.1f%%, fwd+idle occupancy: %.1f%%" % occ
    return s


def server_args(rel: str, model: str, **kw) -> str:
    d = dict(
        model_path=model,
        tokenizer_path=model,
        tokenizer_mode="auto",
        skip_tokenizer_init=False,
        load_format="auto",
        trust_remote_code=False,
        dtype="auto",
        kv_cache_dtype="auto",
        quantization=None,
        context_length=None,
        device="cuda",
        served_model_name=model,
        chat_template=None,
        is_embedding=False,
        revision=None,
        host="0.0.0.0",
        port=30000,
        mem_fraction_static=0.85,
        max_running_requests=None,
        max_total_tokens=None,
        chunked_prefill_size=8192,
        max_prefill_tokens=16384,
        schedule_policy="fcfs",
        schedule_conservativeness=1.0,
        page_size=1,
        tp_size=1,
        pp_size=1,
        stream_interval=1,
        stream_output=False,
        random_seed=0,
        watchdog_timeout=300,
        dist_timeout=None,
        download_dir=None,
        base_gpu_id=0,
        gpu_id_step=1,
        log_level="info",
        log_level_http=None,
        log_requests=False,
        log_requests_level=0,
        show_time_cost=False,
        enable_metrics=True,
        decode_log_interval=40,
        api_key=None,
        dp_size=1,
        load_balance_method="round_robin",
        ep_size=1,
        dist_init_addr=None,
        nnodes=1,
        node_rank=0,
        json_model_override_args="{}",
        attention_backend=None,
        sampling_backend="flashinfer",
        grammar_backend="xgrammar",
        speculative_algorithm=None,
        enable_dp_attention=False,
        enable_torch_compile=False,
        cuda_graph_max_bs=None,
        disable_cuda_graph=False,
        disable_radix_cache=False,
        disable_overlap_schedule=False,
        enable_mixed_chunk=False,
        enable_nccl_nvls=False,
        disable_custom_all_reduce=False,
        enable_hierarchical_cache=False,
        disaggregation_mode="null",
    )
    if rel != "0.4.6":
        d["enable_metrics_for_all_schedulers"] = False
        d["enable_symm_mem"] = False
    if rel in NEW:
        d["soft_watchdog_timeout"] = None
    d.update(kw)
    return "server_args=ServerArgs(%s)" % ", ".join("%s=%r" % kv for kv in d.items())


SPAWN_TAIL = [
    "BaseProcess.run (multiprocessing/process.py:108)",
    "BaseProcess._bootstrap (multiprocessing/process.py:314)",
    "_main (multiprocessing/spawn.py:135)",
    "spawn_main (multiprocessing/spawn.py:122)",
    "<module> (<string>:1)",
]
MOD = [
    "Module._call_impl (torch/nn/modules/module.py:1786)",
    "Module._wrapped_call_impl (torch/nn/modules/module.py:1775)",
]
NOISE_TEXT = [
    "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:63: FutureWarning: The pynvml package is "
    "deprecated. Please install nvidia-ml-py instead. If you did not install pynvml directly, please report "
    "this to the maintainers of the package that installed pynvml for you.",
    "  import pynvml  # type: ignore[import]",
    "Loading safetensors checkpoint shards:  47% Completed | 15/32 [00:11<00:12,  1.37it/s]",
    "Loading safetensors checkpoint shards: 100% Completed | 32/32 [00:24<00:00,  1.31it/s]",
    "[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3",
    "Fetching 12 files: 100%|##########| 12/12 [00:00<00:00, 1402.21it/s]",
    "  warnings.warn(",
    "ninja: no work to do.",
    "Exception ignored in: <function _after_fork at 0x7f3d2c1e8ae0>",
    "tokenizer_config.json: 100%|##########| 9.73k/9.73k [00:00<00:00, 41.2MB/s]",
    "%% heartbeat from sidecar: ok",
    "WARN  log-shipper: dropped 3 lines (buffer full)",
    "b'\\x1b[0m'",
    "curl: (7) Failed to connect to localhost port 30000 after 0 ms: Couldn't connect to server",
]


class Engine:
    """One engine's generation context: rng, clock, main log, per-rank logs, clients."""

    def __init__(self, name: str, rel: str, base: datetime, *, ms: bool = False):
        self.name, self.rel = name, rel
        self.rng = random.Random(SEED * 1_000_003 + zlib.crc32(name.encode()))
        self.clock = Clock(base, ms=ms)
        self.log = Log(self.clock)
        self.rank_logs: dict[str, Log] = {}
        self.ports: dict[str, int] = {}
        self.health_ok: list[float] = []
        self.files: dict[str, bytes] = {}
        self.mtimes: dict[str, datetime] = {}
        self.quiet: list[tuple[float, float]] = []  # windows where noise must not land

    # -- logs
    def L(self, rank: str | None) -> Log:
        return self.rank_logs.get(rank, self.log) if rank else self.log

    def rec(self, t: float, msg: str, rank: str | None = None) -> None:
        self.L(rank).rec(t, msg, rank)

    def main(self, t: float, msg: str) -> None:
        self.log.rec(t, msg)

    def iso(self, t: float) -> str:
        return self.clock.iso(t)

    # -- http
    def client(self, ip: str) -> str:
        p = self.ports.get(ip) or self.rng.randint(33000, 58000)
        p += self.rng.randint(1, 37)
        if p > 60999:
            p = 32768 + p % 2000
        self.ports[ip] = p
        return "%s:%d" % (ip, p)

    def access(self, t: float, ip: str, method: str, path: str, code: int) -> None:
        self.log.uvicorn(t, '%s - "%s %s HTTP/1.1" %s' % (self.client(ip), method, path, PHRASE[code]))
        if path == "/health" and code == 200:
            self.health_ok.append(t)

    def probes(
        self,
        t0: float,
        t1: float,
        *,
        health: float | None = 10.0,
        metrics: float | None = 15.0,
        health_ip: str = "10.0.5.126",
        metrics_ip: str = "10.0.5.84",
        skip: tuple[tuple[float, float], ...] = (),
    ) -> None:
        """Liveness probes answered 200 at once, and Prometheus scrapes."""
        if health:
            for t in ticks(self.rng, t0, t1, health):
                if not any(a <= t <= b for a, b in skip):
                    self.access(t, health_ip, "GET", "/health", 200)
        if metrics:
            for t in ticks(self.rng, t0, t1, metrics):
                self.access(t, metrics_ip, "GET", "/metrics", 200)

    def health_fail(
        self, t0: float, t1: float, period: float, last_heartbeat: float, ip: str = "10.0.5.126"
    ) -> None:
        """Generation-based /health on a stuck scheduler: 20 s wait, log line, 503."""
        for t in ticks(self.rng, t0, t1, period, jitter=0.3):
            end = t + 20.0 + self.rng.uniform(0.02, 0.4)
            self.main(
                end,
                "Health check failed. Server couldn't get a response from detokenizer for last 20 "
                "seconds. tic start time: %s. last_heartbeat time: %s"
                % (self.clock.hms(t), self.clock.hms(last_heartbeat)),
            )
            self.access(end + 0.001, ip, "GET", "/health", 503)

    # -- noise
    def noise(
        self,
        t0: float,
        t1: float,
        n: int,
        *,
        log: Log | None = None,
        host: str = "gpu-node-01",
        pid: int = 4242,
        ndev: int = 4,
        kinds: tuple[str, ...] = ("text", "nccl", "blank"),
    ) -> None:
        rng, log = self.rng, log or self.log
        for _ in range(n):
            t = rng.uniform(t0, t1)
            if any(a <= t <= b for a, b in self.quiet):
                continue
            k = rng.choice(kinds)
            if k == "blank":
                line = ""
            elif k == "nccl":
                dev = rng.randrange(ndev)
                line = "%s:%d:%d [%d] NCCL INFO %s" % (
                    host,
                    pid + dev,
                    pid + dev + rng.randint(40, 900),
                    dev,
                    rng.choice(nccl_msgs(rng, dev, ndev)),
                )
            elif k == "bad":
                line = "Loading chat template from /models/templates/r\udce9sum\udce9-chat.jinja (fallback)"
            else:
                line = rng.choice(NOISE_TEXT)
            log.raw(t, line)


def nccl_msgs(rng: random.Random, dev: int, n: int) -> list[str]:
    comm = "0x%x" % (0x55D000000000 + rng.getrandbits(32))
    return [
        "Bootstrap : Using eth0:10.%d.%d.%d<0>"
        % (rng.randint(1, 60), rng.randint(0, 255), rng.randint(2, 250)),
        "NCCL version 2.27.3+cuda12.9",
        "Channel %02d/24 :    0   1   2   3" % rng.randrange(24),
        "Connected all rings, use ring PXN 0 GDR 1",
        "comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %x000 commId 0x%x - Init COMPLETE"
        % (
            comm,
            dev,
            n,
            dev,
            dev,
            rng.choice([0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]),
            rng.getrandbits(60),
        ),
        "NVLS multicast support is available on dev %d (NVLS_NCHANNELS 16)" % dev,
        "P2P Chunksize set to 524288",
        "CC Off, workFifoBytes 1048576",
        "ncclCommInitRankConfig comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %x000 commId 0x%x - Init START"
        % (comm, dev, n, dev, dev, rng.choice([0x18, 0x2A, 0x3A, 0x5D]), rng.getrandbits(60)),
    ]


# --------------------------------------------------------------------------- scheduler simulation
class Req:
    __slots__ = ("rid", "t", "inp", "cached", "out", "gen", "stream", "path", "ip")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


class Sched:
    """A batch-logging scheduler group (TP0, a DP leader, or every TP rank with
    --enable-metrics-for-all-schedulers).  Requests arrive (Poisson), are
    prefilled, decode in windows of decode_log_interval=40 steps; a Decode line is
    printed at the 40th step if the batch is still non-empty."""

    def __init__(
        self,
        E: Engine,
        ranks: list[str],
        *,
        max_tokens: int,
        kind: str = "plain",
        step: tuple[float, float] = (22.0, 0.4),
        in_len=(120, 5000),
        out_len=(40, 700),
        spec: bool = False,
        iters: bool = False,
        pd: bool = False,
        mfu: bool = False,
        occ: bool = False,
        log_prefill: bool = True,
        clients=("10.22.12.149", "10.22.80.231"),
        swa_pool: int = 0,
        mamba_pool: int = 0,
        rank_gap: float = 0.004,
        on_window=None,
    ):
        self.E, self.ranks, self.max_tokens, self.kind = E, ranks, max_tokens, kind
        self.step, self.in_len, self.out_len = step, in_len, out_len
        self.spec, self.iters, self.pd, self.mfu, self.occ = spec, iters, pd, mfu, occ
        self.log_prefill, self.clients = log_prefill, list(clients)
        self.swa_pool, self.mamba_pool, self.rank_gap, self.on_window = (
            swa_pool,
            mamba_pool,
            rank_gap,
            on_window,
        )
        self.active: list[Req] = []
        self.pending: list[Req] = []  # arrived after the stall
        self.fct = E.rng.randint(40, 400)  # forward counter after warmup
        self.stop: dict[str, float] = {}  # rank -> time after which it prints no batch line
        self.last: dict[str, float] = {}  # rank -> time of its last batch line
        self.last_decode = None
        self.last_prefill = None
        self.evictable = int(max_tokens * E.rng.uniform(0.04, 0.1))
        self.retracted = 0

    # -- output
    def emit(self, t: float, msg: str) -> None:
        for i, r in enumerate(self.ranks):
            tr = t + i * self.rank_gap
            if tr >= self.stop.get(r, INF):
                continue
            self.E.rec(tr, msg, r)
            self.last[r] = tr

    def tokens(self, reqs) -> int:
        return sum(r.inp + r.gen for r in reqs)

    def usage(self, reqs) -> tuple[float, float, int]:
        tok = self.tokens(reqs)
        full = tok / self.max_tokens
        if self.kind == "swa":
            swa = sum(min(r.inp + r.gen, 128) for r in reqs)
            return full, swa / self.swa_pool, swa
        if self.kind == "mamba":
            return full, len(reqs) / self.mamba_pool, len(reqs)
        return full, 0.0, 0

    def tok_part(self, reqs) -> str:
        tok = self.tokens(reqs)
        full, other, n = self.usage(reqs)
        if self.kind == "swa":
            return "#full token: %d, full token usage: %.2f, #swa token: %d, swa token usage: %.2f, " % (
                tok,
                full,
                n,
                other,
            )
        if self.kind == "mamba":
            return "#full token: %d, full token usage: %.2f, mamba num: %d, mamba usage: %.2f, " % (
                tok,
                full,
                n,
                other,
            )
        return "#token: %d, token usage: %.2f, " % (tok, full)

    # -- requests
    def new_req(self, t: float, p_stream: float) -> Req:
        rng = self.E.rng
        inp = loguni(rng, *self.in_len)
        stream = rng.random() < p_stream
        if stream:
            path = "/v1/chat/completions" if rng.random() < 0.85 else "/generate"
        else:
            path = rng.choice(["/generate", "/generate", "/v1/chat/completions", "/v1/completions"])
        cached = rng.randint(inp // 5, inp * 4 // 5) if rng.random() < 0.35 else 0
        return Req(
            rid=hexid(rng),
            t=t,
            inp=inp,
            cached=cached,
            out=loguni(rng, *self.out_len),
            gen=0,
            stream=stream,
            path=path,
            ip=rng.choice(self.clients),
        )

    def admit(self, ta: float, tp: float, p_stream: float, req: Req | None = None, queue: int = 0) -> Req:
        rng = self.E.rng
        req = req or self.new_req(ta, p_stream)
        if req.stream:
            self.E.access(ta + rng.uniform(0.004, 0.04), req.ip, "POST", req.path, 200)
        if self.log_prefill:
            new = req.inp - req.cached
            gap = tp - self.last_prefill if self.last_prefill is not None else 1.0
            in_tp = new / max(min(gap, 30.0), 0.05)
            full, other, _ = self.usage(self.active + [req])
            it = (self.fct + 1) if self.iters else None
            self.emit(
                tp,
                prefill_msg(
                    self.E.rel,
                    n_seq=1,
                    new=new,
                    cached=req.cached,
                    usage=usage_prefill(self.kind, full, other),
                    running=len(self.active),
                    queue=queue,
                    it=it,
                    in_tp=in_tp,
                    mfu=round(new * 0.012 + rng.uniform(5, 40), 2) if self.mfu else None,
                    occ=occupancy(rng) if self.occ else None,
                ),
            )
            self.last_prefill = tp
        self.fct += 1
        self.active.append(req)
        return req

    def stalled_arrivals(self, times, p_stream: float) -> None:
        """Requests after the stall: streaming ones get their access line at once
        (headers go out before the first token), the others never complete."""
        for ta in times:
            req = self.new_req(ta, p_stream)
            if req.stream:
                self.E.access(ta + self.E.rng.uniform(0.004, 0.04), req.ip, "POST", req.path, 200)
            self.pending.append(req)

    def window(self, t: float):
        rng = self.E.rng
        st = (self.step[0] + self.step[1] * len(self.active)) / 1000.0 * rng.uniform(0.95, 1.05)
        acc = rng.uniform(2.3, 2.9) if self.spec else 1.0
        need = [(max(1, math.ceil((r.out - r.gen) / acc)), r) for r in self.active]
        counted = [r for n, r in need if n >= 40]
        steps = 40 if counted else max(n for n, _ in need)
        return t + steps * st, st, acc, need, counted, steps

    def commit(self, t: float, plan) -> None:
        rng, E = self.E.rng, self.E
        w, st, acc, need, counted, steps = plan
        gen = 0
        for _, r in need:
            g = min(int(steps * acc), r.out - r.gen)
            r.gen += g
            gen += g
        self.fct += steps
        if counted:
            since = (
                w - self.last_decode if self.last_decode is not None and w - self.last_decode < 30 else w - t
            )
            full, _, _ = self.usage(counted)
            pd = None
            if self.pd:
                pd = dict(
                    usage=rng.uniform(0.0, 0.06),
                    prealloc=rng.choice([0, 0, 0, 1, 2]),
                    transfer=rng.choice([0, 0, 1, 1, 2, 3]),
                    host=0,
                    retracted=self.retracted,
                )
            self.emit(
                w,
                decode_msg(
                    E.rel,
                    running=len(counted),
                    tok_part=self.tok_part(counted),
                    gen_tp=gen / max(since, 0.05),
                    queue=0,
                    it=self.fct if self.iters else None,
                    spec=(acc, (acc - 1) / 3.0) if self.spec else None,
                    pd=pd,
                    mfu=(rng.uniform(90, 260), rng.uniform(900, 2400), rng.uniform(2, 12))
                    if self.mfu
                    else None,
                    occ=occupancy(rng) if self.occ else None,
                ),
            )
            self.last_decode = w
            self.retracted = 0
        for n, r in need:
            if n <= 40 or not counted:
                self.active.remove(r)
                self.evictable = min(int(self.max_tokens * 0.45), self.evictable + r.inp + r.gen)
                if not r.stream:
                    E.access(t + n * st + rng.uniform(0.001, 0.02), r.ip, "POST", r.path, 200)
        if self.on_window:
            self.on_window(self, t, w)

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
        """Serve arrivals in [t0, t1).  With `stall`, no batch line at or after that
        time; arrivals keep coming.  Without `drain`, return at t1 leaving requests
        in flight.  Returns the simulation time reached."""
        rng = self.E.rng
        arr = poisson(rng, t0, t1, rate)
        ai, t = 0, t0
        while True:
            if stall is not None and t >= stall:
                self.stalled_arrivals(arr[ai:], p_stream)
                return t
            if not self.active:
                if ai >= len(arr):
                    return t
                ta = arr[ai]
                ai += 1
                t = max(t, ta)
                tp = t + rng.uniform(0.03, 0.25)
                if stall is not None and tp >= stall:
                    self.stalled_arrivals([ta], p_stream)
                    t = stall
                    continue
                self.admit(ta, tp, p_stream)
                t = tp
                continue
            if t >= t1 and not drain:
                return t
            plan = self.window(t)
            w = plan[0]
            lim = w if stall is None else min(w, stall)
            newcomers = []
            while ai < len(arr) and arr[ai] < lim:
                ta = arr[ai]
                ai += 1
                tp = max(ta, t) + rng.uniform(0.03, 0.3)
                if stall is not None and tp >= stall:
                    self.stalled_arrivals([ta], p_stream)
                else:
                    newcomers.append((ta, tp))
            if stall is not None and w >= stall:
                for ta, tp in newcomers:
                    self.admit(ta, tp, p_stream)
                t = stall
                continue
            self.commit(t, plan)
            for ta, tp in newcomers:
                self.admit(ta, tp, p_stream)
            t = w

    def prep_close(self, t: float):
        """Plan one more Decode window after the last request line (a healthy capture ends on progress)."""
        if not any(r.out - r.gen >= 120 for r in self.active):
            req = self.new_req(t, 1.0)
            req.out = req.gen + 400
            self.admit(t, t + 0.12, 1.0, req=req)
            t += 0.12
        return t, self.window(t)

    def close(self, t: float) -> float:
        t, plan = self.prep_close(t)
        self.commit(t, plan)
        return plan[0]

    def reqs_repr(self, reqs, nids: int = 36) -> str:
        rng = self.E.rng
        parts = []
        for r in reqs:
            ids = ", ".join(str(rng.randint(11, 151000)) for _ in range(nids))
            outs = ", ".join(str(rng.randint(11, 151000)) for _ in range(min(10, r.gen)))
            parts.append("Req(rid=%s, input_ids=[%s], output_ids=[%s])" % (r.rid, ids, outs))
        return "[" + ", ".join(parts) + "]"


# --------------------------------------------------------------------------- startup sequences
def boot(
    E: Engine,
    t: float,
    ranks: list[str],
    *,
    log_rank: str,
    kv_tokens: int,
    cls: str,
    weight_s: float,
    mem_gb: float,
    context_len: int,
    chunked: int = 8192,
    max_running: int = 128,
    symm: bool = False,
    mamba: bool = False,
    dtype: str = "torch.bfloat16",
    skip_init: bool = False,
) -> float:
    """Per-rank startup lines.  Milestones (`Init torch distributed ends`,
    `Load weight end`, `Capture ... end`) land in one second on every rank.
    Returns the time the scheduler side is ready."""
    rng, rel = E.rng, E.rel
    if rel != "0.5.23" and not skip_init:
        for r in ranks:
            E.rec(t + rng.uniform(0.0, 0.6), "Init torch distributed begin.", r)
        t = math.floor(t + rng.uniform(3.2, 6.5))
        for r in ranks:
            m = rng.uniform(0.4, 0.95)
            if rel == "0.5.10":
                msg = "Init torch distributed ends. elapsed=%.2f s, mem usage=%.2f GB" % (
                    rng.uniform(2, 9),
                    m,
                )
            else:
                msg = "Init torch distributed ends. mem usage=%.2f GB" % m
            E.rec(t + rng.uniform(0.1, 0.8), msg, r)
        t += 1
    for r in ranks:
        E.rec(t + rng.uniform(0.0, 0.5), "Load weight begin. avail mem=%.2f GB" % rng.uniform(77.0, 78.3), r)
    t = math.floor(t + weight_s)
    avail = {}
    for r in ranks:
        avail[r] = 78.0 - mem_gb - rng.uniform(0.2, 0.9)
        if rel in NEW:
            msg = (
                "Load weight end. elapsed=%.2f s, type=%s, dtype=%s, avail mem=%.2f GB, mem usage=%.2f GB."
                % (weight_s, cls, dtype, avail[r], mem_gb)
            )
        else:
            msg = "Load weight end. type=%s, dtype=%s, avail mem=%.2f GB, mem usage=%.2f GB." % (
                cls,
                dtype,
                avail[r],
                mem_gb,
            )
        E.rec(t + rng.uniform(0.1, 0.8), msg, r)
    t += 1
    for r in ranks:
        if symm:
            E.rec(t + rng.uniform(0.0, 0.3), "Pre-allocating symmetric memory pool with 4 GiB", r)
        if mamba:
            E.rec(
                t + rng.uniform(0.3, 0.5),
                "Mamba Cache is allocated. max_mamba_cache_size: 199, conv_state "
                "size: 0.33GB, ssm_state size: 11.75GB ",
                r,
            )
        elif rel != "0.5.23":
            kv = (78.0 - mem_gb - 12.0) / 2
            E.rec(
                t + rng.uniform(0.3, 0.5),
                "KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB" % (kv_tokens, kv, kv),
                r,
            )
        avail[r] = rng.uniform(8.5, 13.5)
        E.rec(t + rng.uniform(0.5, 0.9), "Memory pool end. avail mem=%.2f GB" % avail[r], r)
    t += 1
    cap = rng.uniform(14, 29)
    bs = "[1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256]"
    for r in ranks:
        if rel == "0.5.23":
            msg = (
                "Capture target decode cuda graph begin. backend=flashinfer, num_tokens_per_req=1, avail mem=%.2f GB"
                % (avail[r])
            )
        else:
            msg = (
                "Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB" % avail[r]
            )
        E.rec(t + rng.uniform(0.0, 0.4), msg, r)
    t = math.floor(t + cap)
    for r in ranks:
        used = rng.uniform(0.9, 1.9)
        if rel == "0.5.23":
            msg = (
                "Capture target decode cuda graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB."
                % (bs, cap, used, avail[r] - used)
            )
        else:
            msg = "Capture cuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB." % (
                cap,
                used,
                avail[r] - used,
            )
        E.rec(t + rng.uniform(0.1, 0.8), msg, r)
    t += 1
    msg = (
        "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, max_running_requests=%d, "
        "context_len=%d" % (kv_tokens, chunked, max(16384, chunked), max_running, context_len)
    )
    if rel not in OLD:
        msg += ", available_gpu_mem=%.2f GB" % rng.uniform(6.5, 10.5)
    E.rec(t + 0.3, msg, log_rank)
    return t + 0.5


def serve_up(E: Engine, t: float, S: Sched | None, pid: int) -> float:
    """uvicorn start, warmup request, ready line."""
    E.log.uvicorn(t + 0.1, "Started server process [%d]" % pid)
    E.log.uvicorn(t + 0.12, "Waiting for application startup.")
    E.log.uvicorn(t + 0.15, "Application startup complete.")
    E.log.uvicorn(t + 0.17, "Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    E.access(t + 1.1, "127.0.0.1", "GET", "/get_model_info", 200)
    if S is not None and S.log_prefill:
        full, other, _ = S.usage([])
        S.emit(
            t + 1.3,
            prefill_msg(
                E.rel,
                n_seq=1,
                new=6,
                cached=0,
                usage=usage_prefill(S.kind, full, other),
                running=0,
                queue=0,
                it=S.fct if S.iters else None,
                in_tp=0.0,
                occ=(0.0, 0.0) if S.occ else None,
            ),
        )
    E.access(t + 1.9, "127.0.0.1", "POST", "/generate", 200)
    E.main(t + 1.95, "The server is fired up and ready to roll!")
    return t + 2.5


# --------------------------------------------------------------------------- py-spy stacks
def pyspy(pid: int, title: str, threads, pyver: str = "3.12.3", exe: str = "/usr/bin/python3.12") -> str:
    out = ["Process %d: %s" % (pid, title), "Python v%s (%s)" % (pyver, exe), ""]
    for tid, state, name, frames in threads:
        out.append('Thread %d (%s): "%s"' % (tid, state, name))
        out += ["    " + f for f in frames]
    return "\n".join(out)


def plain(frames: list[str]) -> list[str]:
    """What `py-spy dump` without --native shows: Python frames only."""
    return [f for f in frames if re.search(r":\d+\)$", f)]


def model_frames(model: str) -> list[str]:
    if model == "qwen3moe":
        return (
            ["FusedMoE.forward (sglang/srt/layers/moe/fused_moe_triton/layer.py:1080)"]
            + MOD
            + ["Qwen3MoeSparseMoeBlock.forward (sglang/srt/models/qwen3_moe.py:262)"]
            + MOD
            + ["Qwen3MoeDecoderLayer.forward (sglang/srt/models/qwen3_moe.py:689)"]
            + MOD
            + ["Qwen2MoeModel.forward (sglang/srt/models/qwen2_moe.py:618)"]
            + MOD
            + ["Qwen3MoeForCausalLM.forward (sglang/srt/models/qwen3_moe.py:893)"]
        )
    return (
        ["RowParallelLinear.forward (sglang/srt/layers/linear.py:1294)"]
        + MOD
        + ["LlamaMLP.forward (sglang/srt/models/llama.py:104)"]
        + MOD
        + ["LlamaDecoderLayer.forward (sglang/srt/models/llama.py:287)"]
        + MOD
        + ["LlamaModel.forward (sglang/srt/models/llama.py:366)"]
        + MOD
        + ["LlamaForCausalLM.forward (sglang/srt/models/llama.py:481)"]
    )


def symm_stack(rng: random.Random, model: str, named: bool) -> list[str]:
    """0.5.23 MainThread blocked in NCCL window registration (recvmsg)."""
    return (
        [
            "recvmsg (libc.so.6)",
            "ncclIpcSocketRecvMsg (libnccl.so.2)",
            "ncclProxyCallBlockingUDS (libnccl.so.2)",
            "ncclProxyClientGetFdBlocking (libnccl.so.2)",
            "symMemoryImportAndMapSegmentHandle (libnccl.so.2)" if named else "%s (libnccl.so.2)" % addr(rng),
            "ncclCommWindowRegister (libnccl.so.2)",
            "nccl_allocator_register_segments_with_comm (nccl_allocator.so)",
            "%s (libffi.so.8)" % addr(rng),
            "ffi_call (libffi.so.8)",
            "_ctypes_callproc (_ctypes.cpython-312-x86_64-linux-gnu.so)",
            "PyCFuncPtr_call (_ctypes.cpython-312-x86_64-linux-gnu.so)",
            "_register_segments_for_comm (sglang/srt/distributed/device_communicators/pynccl_allocator.py:417)",
            "SymmetricMemoryContext.__exit__ (sglang/srt/distributed/device_communicators/pynccl_allocator.py:388)",
        ]
        + model_frames(model)
        + [
            "decorate_context (torch/utils/_contextlib.py:120)",
            "ModelRunner.forward_decode (sglang/srt/model_executor/model_runner.py:2096)",
            "ModelRunner._forward_raw (sglang/srt/model_executor/model_runner.py:2728)",
            "ModelRunner.forward (sglang/srt/model_executor/model_runner.py:2559)",
            "TpModelWorker.forward_batch_generation (sglang/srt/managers/tp_worker.py:331)",
            "Scheduler.run_batch (sglang/srt/managers/scheduler.py:1591)",
            "Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)",
            "decorate_context (torch/utils/_contextlib.py:120)",
            "dispatch_event_loop (sglang/srt/managers/scheduler.py:4778)",
            "Scheduler.run_event_loop (sglang/srt/managers/scheduler.py:1782)",
            "run_scheduler_process (sglang/srt/managers/scheduler.py:4414)",
        ]
        + SPAWN_TAIL
        + ["%s (libc.so.6)" % addr(rng)]
    )


def helper_threads(
    rng: random.Random,
    pid: int,
    *,
    watchdog: str | None,
    native: bool = True,
    dump_file: str = "sglang/srt/utils/cudacore_pyspy_dump_utils.py:104",
) -> list:
    tail = [
        "Thread.run (threading.py:1010)",
        "Thread._bootstrap_inner (threading.py:1073)",
        "Thread._bootstrap (threading.py:1030)",
        "%s (libc.so.6)" % addr(rng),
        "%s (libc.so.6)" % addr(rng),
    ]
    th = [
        (
            pid + rng.randint(600, 900),
            "idle",
            "Thread-1 (_read_thread)",
            [
                "read (libc.so.6)",
                "_recv_msg (torch/_inductor/compile_worker/subproc_pool.py:61)",
                "SubprocPool._read_thread (torch/_inductor/compile_worker/subproc_pool.py:191)",
            ]
            + tail,
        ),
        (
            pid + rng.randint(901, 1200),
            "idle",
            "tqdm_monitor",
            [
                "%s (libc.so.6)" % addr(rng),
                "%s (libc.so.6)" % addr(rng),
                "PyThread_acquire_lock_timed (python3.12)",
                "Condition.wait (threading.py:359)",
                "Event.wait (threading.py:655)",
                "TMonitor.run (tqdm/_monitor.py:60)",
            ]
            + tail[1:],
        ),
    ]
    if watchdog == "sleep":
        th.append(
            (
                pid + rng.randint(1201, 1500),
                "idle",
                "Thread-3 (_watchdog_thread)",
                [
                    "clock_nanosleep (libc.so.6)",
                    "WatchdogRaw._watchdog_thread (sglang/srt/utils/watchdog.py:123)",
                ]
                + tail,
            )
        )
    elif watchdog == "dump":
        th.append(
            (
                pid + rng.randint(1201, 1500),
                "idle",
                "Thread-3 (_watchdog_thread)",
                [
                    "poll (libc.so.6)",
                    "_PollLikeSelector.select (selectors.py:415)",
                    "Popen._communicate (subprocess.py:2115)",
                    "Popen.communicate (subprocess.py:1209)",
                    "run (subprocess.py:550)",
                    "pyspy_dump_schedulers (%s)" % dump_file,
                    "WatchdogRaw._watchdog_once (sglang/srt/utils/watchdog.py:147)",
                    "WatchdogRaw._watchdog_thread (sglang/srt/utils/watchdog.py:121)",
                ]
                + tail,
            )
        )
    if not native:
        th = [(a, b, c, plain(f)) for a, b, c, f in th]
    return th


# --------------------------------------------------------------------------- glog (torch ProcessGroupNCCL)
def glog(clock: Clock, t: float, rank: int, src: int, msg: str, lvl: str = "E") -> str:
    d = clock.dt(t)
    return "[rank%d]:[%s%d%02d %s.%09d ProcessGroupNCCL.cpp:%d] %s" % (
        rank,
        lvl,
        d.month,
        d.day,
        d.strftime("%H:%M:%S"),
        d.microsecond * 1000 + (rank * 7919 + 311) % 1000,
        src,
        msg,
    )


def cpp_frames(rng: random.Random) -> list[str]:
    lib = "/usr/local/lib/python3.12/dist-packages/torch/lib/"
    return [
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1515 "
        "(most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (%s in %slibc10.so)"
        % (addr(rng), lib),
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        "std::ratio<1l, 1000l> > >) + 0x2b0 (%s in %slibtorch_cuda.so)" % (addr(rng), lib),
        "frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0xe58 (%s in %slibtorch_cuda.so)"
        % (addr(rng), lib),
        "frame #3: c10d::ProcessGroupNCCL::Watchdog::run() + 0xda (%s in %slibtorch_cuda.so)"
        % (addr(rng), lib),
        "frame #4: <unknown function> + 0xdc253 (%s in /lib/x86_64-linux-gnu/libstdc++.so.6)" % addr(rng),
        "frame #5: <unknown function> + 0x94ac3 (%s in /lib/x86_64-linux-gnu/libc.so.6)" % addr(rng),
        "frame #6: <unknown function> + 0x126850 (%s in /lib/x86_64-linux-gnu/libc.so.6)" % addr(rng),
        "",
    ]


# --------------------------------------------------------------------------- truth helpers
def item(rule, ts, ranks, why, *, ts_end=None, ranks_alt=None, ts_alt=None) -> dict:
    d = {"rule": rule, "ts": ts, "ts_end": ts_end, "ranks": list(ranks), "signature": None}
    if ranks_alt:
        d["ranks_alt"] = [list(x) for x in ranks_alt]
    if ts_alt:
        d["ts_alt"] = list(ts_alt)
    d["why"] = why
    return d


def entry(scenario: str, expect: list, allow=(), forbid=None) -> dict:
    exp_rules = {x["rule"] for x in expect}
    if forbid is None:
        forbid = [r for r in RULES if r not in exp_rules and r not in allow]
    return {"scenario": scenario, "expect": expect, "allow": list(allow), "forbid": list(forbid)}


def health_blind(E: Engine, onset: float, why: str) -> dict:
    after = [t for t in sorted(E.health_ok) if E.iso(t) > E.iso(onset)]
    return item("health-check-blind", E.iso(after[0]), [], why, ts_end=E.iso(after[-1]))


# =========================================================================== engines
def e01_symm_deadlock_compose() -> tuple[Engine, dict]:
    """0.5.23 symm-mem deadlock, TP4, docker-compose prefix + CRLF, hard watchdog."""
    E = Engine("fra3-llama33-70b-11", "0.5.23", datetime(2026, 10, 14, 8, 52, 10))
    rng = E.rng
    ranks = ["TP0", "TP1", "TP2", "TP3"]
    model = "meta-llama/Llama-3.3-70B-Instruct"
    pids = {r: 311 + i for i, r in enumerate(ranks)}
    E.log.raw(
        0.0,
        [
            "+ export SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0",
            "+ export SGLANG_ENABLE_METRICS_DEVICE_TIMER=1",
            "+ exec python3 -m sglang.launch_server --model-path %s --tp 4 --enable-symm-mem "
            "--enable-nccl-nvls --host 0.0.0.0 --port 30000" % model,
        ],
    )
    E.main(
        3.2,
        "Symmetric memory is enabled, setting symmetric memory prealloc size to 4GB as default.Use "
        "environment variable SGLANG_SYMM_MEM_PREALLOC_GB_SIZE to change the prealloc size.",
    )
    E.main(
        3.3,
        server_args(
            "0.5.23",
            model,
            tp_size=4,
            enable_symm_mem=True,
            enable_nccl_nvls=True,
            random_seed=883412290,
            attention_backend="flashinfer",
            cuda_graph_max_bs=256,
        ),
    )
    E.log.raw(
        9.0,
        [
            "Emitting ninja build file /tmp/symm_allocator/build.ninja...",
            "Building extension module nccl_allocator...",
            "Allowing ninja to set a default number of workers... (overridable by setting the environment "
            "variable MAX_JOBS=N)",
            "ninja: no work to do.",
            "Loading extension module nccl_allocator...",
        ],
    )
    t = boot(
        E,
        10.0,
        ranks,
        log_rank="TP0",
        kv_tokens=611660,
        cls="LlamaForCausalLM",
        weight_s=41.3,
        mem_gb=33.9,
        context_len=131072,
        symm=True,
    )
    S = Sched(
        E,
        ["TP0"],
        max_tokens=611660,
        step=(23.0, 0.35),
        occ=True,
        clients=("10.41.7.23", "10.41.7.88", "10.41.9.140"),
    )
    t = serve_up(E, t, S, 96)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 400, 0.7, p_stream=0.55, drain=False)
    t = S.run(t, t + 90, 0.5, p_stream=1.0, drain=True)  # traffic tails off: idle gap follows
    t_burst = t + rng.uniform(230, 260)  # burst after the idle gap grows the pool
    stall = t_burst + 21.4
    S.run(t_burst, stall + 40, 3.2, p_stream=0.6, stall=stall)
    onset = S.last["TP0"]
    active = S.active
    w = same_second(onset + 300 + rng.uniform(40, 120), 0.1, 0.2)  # every rank fires in this second
    tq = w + 5.2 + rng.uniform(0, 0.3)
    S.run(stall + 40, tq, 0.9, p_stream=0.7, stall=stall)  # clients keep sending, slower
    total, evict = S.max_tokens, S.evictable
    inflight = S.tokens(active)
    reqs = S.reqs_repr(active)
    for i, r in enumerate(rng.sample(ranks, 4)):
        tw = w + i * 0.03
        comm = 94000000000000 + rng.getrandbits(36)
        E.rec(
            tw,
            "Scheduler debug info:\nsymmetric-memory registration in progress: comm=%d group=tp:0\n"
            "scheduler.cur_batch_for_debug.batch_size()=%d\nscheduler.cur_batch_for_debug.reqs=%s\n"
            "[full] total=%d, available=%d, evictable=%d, protected=0, session_held=0, uncached=0"
            % (comm, len(active), reqs, total, total - evict - inflight, evict),
            r,
        )
        pid = pids[r]
        E.rec(
            tw + 0.35,
            "Pyspy dump for PID %d (py-spy dump --native --pid %d):\n" % (pid, pid)
            + pyspy(
                pid,
                "sglang::scheduler_%s" % r,
                [(pid, "idle", "MainThread", symm_stack(rng, "llama", named=i % 2 == 0))]
                + helper_threads(rng, pid, watchdog="dump"),
            )
            + "\n",
            r,
        )
        E.rec(tw + 0.55, "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", r)
        E.log.raw(tw + 0.56, ["", ""])
    E.quiet.append((w - 2, w + 15))
    E.probes(t_traffic - 1.5, tq, health=10.0, metrics=15.0)
    E.main(
        tq,
        "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=<frame at 0x7f4426eb4a7d, file "
        "'/usr/lib/python3.12/selectors.py', line 468, code select>. It usually means one child failed.",
    )
    E.main(tq + 0.01, "Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
    for i, r in enumerate(ranks):
        pid = pids[r]
        E.main(
            tq + 5.1 + i * 0.6,
            "Pyspy dump for PID %d (py-spy dump --native --pid %d):\n" % (pid, pid)
            + pyspy(
                pid,
                "sglang::scheduler_%s" % r,
                [(pid, "idle", "MainThread", symm_stack(rng, "llama", named=True))]
                + helper_threads(rng, pid, watchdog=None),
            )
            + "\n",
        )
    end = tq + 8.0
    E.log.raw(end, "sglang-1 exited with code 137")
    E.noise(20, end - 30, 6, kinds=("text", "blank"))
    body = E.log.lines()
    # docker compose prefixes every line of the container, not its own exit notice
    lines = [x if x.startswith("sglang-1 exited") else "sglang-1  | " + x for x in body]
    E.files["compose-sglang.log"] = render(lines, crlf=True)
    E.mtimes["compose-sglang.log"] = E.clock.dt(end)
    why_v = "0.5.23 formats, docker-compose `sglang-1  | ` prefix on every line, CRLF line endings, fwd occupancy suffix"
    truth = entry(
        "symm-mem-deadlock: 0.5.23, docker-compose prefix, CRLF",
        [
            item(
                "stall-onset",
                E.iso(onset),
                ranks,
                "last batch line before the freeze; POSTs keep arriving, hard watchdog later (%s)" % why_v,
                ranks_alt=[["TP0"]],
            ),
            item(
                "all-ranks-frozen",
                E.iso(onset),
                ranks,
                "every TP rank's hard watchdog fired in the same second: "
                "they froze together at the group's last progress (symm-mem registration is collective)",
                ts_end=E.iso(onset),
            ),
            item(
                "watchdog-kill",
                E.iso(w),
                ranks,
                "0.5.23 hard scheduler watchdog (self.soft=False) fired on every rank, SIGQUIT follows",
            ),
            item(
                "busy-leak-report",
                E.iso(w),
                ranks,
                "`[full] total=... uncached=0` pool text inside the 0.5.23 "
                "`Scheduler debug info:` block: the shortfall is the in-flight batch's pages",
            ),
            health_blind(
                E,
                onset,
                "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0: /health kept answering 200 after the stall",
            ),
        ],
        allow=["known-signature"],
    )
    return E, truth


def e02_staggered_rotated() -> tuple[Engine, dict]:
    """0.5.5 --enable-metrics-for-all-schedulers, TP4 EP4, TP2 stops first; rotated + gz."""
    E = Engine("ord4-qwen3-30b-ep-05", "0.5.5", datetime(2025, 11, 18, 21, 3, 41))
    rng = E.rng
    ranks = ["TP0 EP0", "TP1 EP1", "TP2 EP2", "TP3 EP3"]
    model = "Qwen/Qwen3-30B-A3B-Instruct-2507"
    pids = {r: 1187 + i for i, r in enumerate(ranks)}
    E.main(
        0.4,
        server_args(
            "0.5.5",
            model,
            tp_size=4,
            ep_size=4,
            enable_metrics_for_all_schedulers=True,
            random_seed=1077216338,
            attention_backend="fa3",
            chunked_prefill_size=16384,
            max_prefill_tokens=16384,
        ),
    )
    E.main(2.1, "Using default HuggingFace chat template with detected content format: string")
    t = boot(
        E,
        4.0,
        ranks,
        log_rank="TP0 EP0",
        kv_tokens=1284302,
        cls="Qwen3MoeForCausalLM",
        weight_s=18.7,
        mem_gb=14.3,
        context_len=262144,
        chunked=16384,
    )
    S = Sched(
        E,
        ranks,
        max_tokens=1284302,
        step=(14.0, 0.22),
        iters=True,
        in_len=(150, 7000),
        out_len=(40, 900),
        clients=("10.8.1.17", "10.8.1.18"),
        rank_gap=0.011,
    )
    t = serve_up(E, t, S, 1120)
    t_traffic = t + 3
    t = S.run(t_traffic, t_traffic + 560, 0.42, p_stream=0.5, drain=False)
    t2 = t + rng.uniform(20, 40)
    S.stop["TP2 EP2"] = t2  # TP2's batch lines stop first
    stall = t2 + 6.0
    S.run(t, stall + 30, 1.1, p_stream=0.6, stall=stall)  # a busy minute: the others keep printing
    first = S.last["TP2 EP2"]
    onset = max(S.last.values())
    assert 5.0 <= onset - first <= 7.0, onset - first
    beat = S.last["TP0 EP0"]
    w = same_second(first + 300 + rng.uniform(8, 20), 0.05, 0.25)
    tq = w + 5.3
    S.run(stall + 30, tq, 0.45, p_stream=0.6, stall=stall)
    # liveness: generation-based /health; no probe straddles the stagger window
    E.probes(t_traffic - 1.5, first - 2, health=15.0, metrics=None)
    E.probes(t_traffic - 1.5, tq, health=None, metrics=20.0)
    E.health_fail(onset + 4, tq - 20.5, 15.0, beat)
    active = S.active
    total, evict = S.max_tokens, S.evictable
    reqs = S.reqs_repr(active, nids=24)
    fired = {}
    for r in ["TP2 EP2", "TP0 EP0", "TP3 EP3", "TP1 EP1"]:
        tw = w if r == "TP2 EP2" else w + 1.0 + rng.uniform(0, 0.1)
        fired[r] = tw
        pid = pids[r]
        E.rec(
            tw,
            "self.cur_batch.batch_size()=%d\nself.cur_batch.reqs=%s\nself.max_total_num_tokens=%d, "
            "available_size=%d, evictable_size=%d, protected_size=0"
            % (len(active), reqs, total, total - evict - S.tokens(active), evict),
            r,
        )
        main = [
            "Event.synchronize (torch/cuda/streams.py:231)",
            "SchedulerOutputProcessorMixin.process_batch_result_decode "
            "(sglang/srt/managers/scheduler_output_processor_mixin.py:228)",
            "Scheduler.process_batch_result (sglang/srt/managers/scheduler.py:2078)",
            "Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1009)",
            "decorate_context (torch/utils/_contextlib.py:120)",
            "run_scheduler_process (sglang/srt/managers/scheduler.py:2973)",
        ] + SPAWN_TAIL
        wd = [
            (
                pid + 902,
                "idle",
                "Thread-3 (watchdog_thread)",
                [
                    "_PollLikeSelector.select (selectors.py:415)",
                    "Popen._communicate (subprocess.py:2115)",
                    "Popen.communicate (subprocess.py:1209)",
                    "run (subprocess.py:550)",
                    "pyspy_dump_schedulers (sglang/srt/utils/common.py:2190)",
                    "SchedulerRuntimeCheckerMixin.watchdog_thread "
                    "(sglang/srt/managers/scheduler_runtime_checker_mixin.py:301)",
                    "Thread.run (threading.py:1010)",
                    "Thread._bootstrap_inner (threading.py:1073)",
                    "Thread._bootstrap (threading.py:1030)",
                ],
            )
        ]
        E.rec(
            tw + 0.4,
            "Pyspy dump for PID %d:\n" % pid
            + pyspy(
                pid, "sglang::scheduler_%s" % r.replace(" ", "_"), [(pid, "idle", "MainThread", main)] + wd
            )
            + "\n",
            r,
        )
        E.rec(tw + 0.6, "Watchdog timeout (self.watchdog_timeout=300)", r)
    E.main(
        tq,
        "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=<frame at 0x7fb1c02e1a40, file "
        "'/usr/lib/python3.12/selectors.py', line 468, code select>. It usually means one child failed.",
    )
    evs = sorted(E.log.ev, key=lambda e: (e[0], e[1]))
    groups = [g for _, _, g in evs]
    # size-based rotation (copytruncate) at record boundaries: .2.gz oldest, .1, then the live file,
    # which starts a few minutes before the first rank stops
    c2 = next(i for i, e in enumerate(evs) if e[0] >= first - 200)
    c1 = c2 * 3 // 5
    parts = {"server.log.2.gz": groups[:c1], "server.log.1": groups[c1:c2], "server.log": groups[c2:]}
    for name, gs in parts.items():
        data = render([x for g in gs for x in g])
        E.files[name] = gz(data, "server.log.2") if name.endswith(".gz") else data
    E.mtimes.update(
        {
            "server.log.2.gz": E.clock.dt(first - 900),
            "server.log.1": E.clock.dt(first - 400),
            "server.log": E.clock.dt(tq + 1),
        }
    )
    why_v = (
        "0.5.5 `Prefill batch [N], ` with SGLANG_LOG_FORWARD_ITERS, trailing `, `, `TP2 EP2` tags, "
        "--enable-metrics-for-all-schedulers, rotated server.log.2.gz + server.log.1 + server.log"
    )
    all_ranks = ["TP2 EP2", "TP0 EP0", "TP3 EP3", "TP1 EP1"]
    truth = entry(
        "staggered-stop: 0.5.5 all-scheduler metrics, [iter], rotated .2.gz + .1",
        [
            item(
                "first-rank-stopped",
                E.iso(first),
                ["TP2 EP2"],
                "TP2's batch lines (every rank prints them with "
                "--enable-metrics-for-all-schedulers) stop ~6 s before the other ranks'",
            ),
            item(
                "stall-onset",
                E.iso(onset),
                [],
                "engine-level last progress (alt: the first rank's stop); POSTs "
                "keep arriving, /health turns 503 (%s)" % why_v,
                ts_alt=[E.iso(first)],
            ),
            item(
                "watchdog-kill",
                E.iso(w),
                all_ranks,
                "0.5.5 `Watchdog timeout (self.watchdog_timeout=300)` on "
                "every rank: TP2 first, the others one second later",
                ts_alt=[E.iso(w + 1.0)],
            ),
            item(
                "busy-leak-report",
                E.iso(w),
                all_ranks,
                "0.5.5 three-line watchdog record: the pool text "
                "(available+evictable short of max_total_num_tokens) is the in-flight batch",
                ts_alt=[E.iso(w + 1.0)],
            ),
        ],
        allow=["collective-desync", "known-signature"],
    )
    return E, truth


def e03_idle_leak_046() -> tuple[Engine, dict]:
    """0.4.6 idle real leak, TP2, server log named notes.txt, noise."""
    E = Engine("sjc5-qwen25-32b-31", "0.4.6", datetime(2025, 6, 10, 13, 58, 2))
    rng = E.rng
    ranks = ["TP0", "TP1"]
    model = "Qwen/Qwen2.5-32B-Instruct"
    E.main(0.2, server_args("0.4.6", model, tp_size=2, random_seed=510233871, attention_backend="flashinfer"))
    E.log.raw(1.0, NOISE_TEXT[0:2])
    t = boot(
        E,
        3.0,
        ranks,
        log_rank="TP0",
        kv_tokens=798213,
        cls="Qwen2ForCausalLM",
        weight_s=22.4,
        mem_gb=30.6,
        context_len=32768,
    )
    E.noise(3.0, t, 12, host="sjc5-a100-31", pid=2201, ndev=2, kinds=("nccl",))
    S = Sched(E, ["TP0"], max_tokens=798213, step=(17.0, 0.3), clients=("172.16.4.21", "172.16.4.35"))
    t = serve_up(E, t, S, 2188)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 450, 0.8, p_stream=0.5, drain=False)
    t = S.run(t, t + 120, 0.5, p_stream=1.0, drain=True)
    last = max(S.last.values())
    leak = t + rng.uniform(0.05, 0.3)  # first idle iteration after the last request finished
    if E.clock.sec(leak) == E.clock.sec(last):
        leak = math.floor(last) + 1.2
    leak = same_second(leak, 0.1, 0.4)
    avail = S.max_tokens - S.evictable - rng.randint(300, 2400)
    for i, r in enumerate(["TP1", "TP0"]):
        E.rec(
            leak + i * 0.02,
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 2339, in '
            "run_scheduler_process\n    scheduler.event_loop_overlap()\n"
            '  File "/usr/local/lib/python3.10/dist-packages/torch/utils/_contextlib.py", line 116, in '
            "decorate_context\n    return func(*args, **kwargs)\n"
            '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 683, in '
            "event_loop_overlap\n    self.check_memory()\n"
            '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 1249, in '
            "check_memory\n    raise ValueError(msg)\n"
            "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=%d, protected_size=0, "
            "self.max_total_num_tokens=%d\nself.token_to_kv_pool_allocator.available_size()=%d\n"
            "self.tree_cache.evictable_size()=%d\n" % (avail, S.max_tokens, avail, S.evictable),
            r,
        )
    E.main(leak + 0.3, "Received sigquit from a child process. It usually means the child failed.")
    E.quiet.append((leak - 3, leak + 2))
    E.probes(t_traffic - 1.5, leak, health=10.0, metrics=None, health_ip="172.16.0.9")
    E.log.raw(
        leak + 1.0,
        "/usr/lib/python3.10/multiprocessing/resource_tracker.py:224: UserWarning: "
        "resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown",
    )
    E.log.raw(leak + 1.01, "  warnings.warn('resource_tracker: There appear to be %d '")
    E.noise(
        t_traffic,
        leak - 5,
        25,
        kinds=("text", "blank", "nccl", "text"),
        host="sjc5-a100-31",
        pid=2201,
        ndev=2,
    )
    E.noise(t_traffic + 100, leak - 100, 1, kinds=("bad",))
    E.files["notes.txt"] = render(E.log.lines())
    E.mtimes["notes.txt"] = E.clock.dt(leak + 2)
    why_v = (
        "0.4.6 formats (`Prefill batch. ` no trailing comma, 0.4.6 leak message with continuation lines, "
        "launch-phase sigquit text), log named notes.txt, noise lines, a non-UTF-8 byte"
    )
    truth = entry(
        "idle-leak: 0.4.6, log named notes.txt, noise, non-UTF-8 byte",
        [
            item(
                "idle-memory-leak",
                E.iso(leak),
                ["TP0", "TP1"],
                "check_memory() on the idle path raised "
                "`token_to_kv_pool_allocator memory leak detected!` after traffic ended: a real leak (%s)"
                % why_v,
            )
        ],
    )
    return E, truth


def e04_healthy_pp_ms() -> tuple[Engine, dict]:
    """0.5.10 healthy busy, SGLANG_LOG_MS=1, PP2 TP4 EP4 tags, MFU suffix."""
    E = Engine("iad6-qwen3-235b-pp-07", "0.5.10", datetime(2026, 3, 9, 7, 40, 15), ms=True)
    ranks = ["PP%d TP%d EP%d" % (p, i, i) for p in (0, 1) for i in range(4)]
    model = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    E.main(
        0.3,
        server_args(
            "0.5.10",
            model,
            tp_size=4,
            pp_size=2,
            ep_size=4,
            random_seed=90422117,
            attention_backend="fa3",
            enable_mfu_metrics=True,
        ),
    )
    t = boot(
        E,
        3.0,
        ranks,
        log_rank="PP0 TP0 EP0",
        kv_tokens=702341,
        cls="Qwen3MoeForCausalLM",
        weight_s=63.2,
        mem_gb=32.2,
        context_len=262144,
        dtype="torch.bfloat16",
    )
    S = Sched(
        E,
        ["PP0 TP0 EP0", "PP1 TP0 EP0"],
        max_tokens=702341,
        step=(33.0, 0.42),
        mfu=True,
        clients=("10.60.3.4", "10.60.3.5", "10.60.3.6"),
        rank_gap=0.037,
    )
    t = serve_up(E, t, S, 77)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 360, 0.55, p_stream=0.5, drain=False)
    S.close(t)  # the capture ends mid-traffic, on a batch line
    end = max(S.last.values())
    E.probes(t_traffic - 1.5, end - 1, health=10.0, metrics=15.0)
    E.files["server.log"] = render(E.log.lines())
    E.mtimes["server.log"] = E.clock.dt(end)
    # Carries: 0.5.10 with SGLANG_LOG_MS=1 (ms on scheduler and main lines, none on uvicorn lines), 0.5.10
    # tag order `PP1 TP3 EP3`, both PP stages print batch lines, MFU `est. ... TFLOPS/s` suffixes
    return E, entry("healthy-busy: 0.5.10 SGLANG_LOG_MS, PP/TP/EP tags, MFU", [])


def e05_idle_gz_swa() -> tuple[Engine, dict]:
    """0.5.2 idle engine, SWA token parts, whole log gzip-compressed."""
    E = Engine("sin2-gptoss-120b-19", "0.5.2", datetime(2025, 9, 30, 16, 12, 44))
    rng = E.rng
    ranks = ["TP0", "TP1"]
    model = "openai/gpt-oss-120b"
    E.main(
        0.5,
        server_args(
            "0.5.2", model, tp_size=2, random_seed=7781223, attention_backend="triton", quantization="mxfp4"
        ),
    )
    t = boot(
        E,
        3.0,
        ranks,
        log_rank="TP0",
        kv_tokens=2104180,
        cls="GptOssForCausalLM",
        weight_s=27.8,
        mem_gb=32.6,
        context_len=131072,
    )
    S = Sched(
        E,
        ["TP0"],
        max_tokens=2104180,
        kind="swa",
        swa_pool=526045,
        step=(11.0, 0.2),
        clients=("10.3.14.2", "10.3.14.9"),
    )
    t = serve_up(E, t, S, 1311)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 600, 0.9, p_stream=0.5, drain=False)
    t = S.run(t, t + 150, 0.6, p_stream=1.0, drain=False)  # last minutes: streaming clients only
    assert all(r.stream for r in S.active)
    # traffic ends; the last Decode line still counts 3 requests, which finish
    # within the next 40 steps (no further Decode line): idle, not stalled
    while True:
        t = S.run(t, t + 1, 0.0, drain=False)
        if len(S.active) <= 3:
            break
        plan = S.window(t)
        S.commit(t, plan)
        t = plan[0]
    while len(S.active) < 3:
        req = S.new_req(t, 1.0)
        req.out = 400
        S.admit(t + 0.1, t + 0.2, 1.0, req=req)
        t += 0.3
    for r in S.active:
        r.out = r.gen + rng.randint(60, 79)  # finish 40-79 steps out: one more Decode line, then none
    plan = S.window(t)
    S.commit(t, plan)
    t = plan[0]
    assert len(S.active) == 3 and all(r.stream for r in S.active)
    plan = S.window(t)
    S.commit(t, plan)  # all three finish before step 40: no line
    assert not S.active
    end = t + 20 * 60
    E.probes(t_traffic - 1.5, end, health=10.0, metrics=15.0, health_ip="10.3.0.250")
    E.files["server.log.gz"] = gz(render(E.log.lines()), "server.log")
    E.mtimes["server.log.gz"] = E.clock.dt(end)
    # Carries: 0.5.2 formats (`Decode batch. ` with trailing `, `, hybrid SWA `#swa token` parts), whole log
    # gzip-compressed as server.log.gz; last Decode says `#running-req: 3`, then 20 min of /health 200 only
    return E, entry("idle-quiet: 0.5.2 SWA, gzip log, last Decode #running-req 3", [])


def e06_slow_prefill_iters() -> tuple[Engine, dict]:
    """0.5.23 slow-but-fine: 70 s chunked prefill gap, [forward_iter] in batch lines."""
    E = Engine("nrt4-qwen3-coder-480b-23", "0.5.23", datetime(2026, 11, 2, 10, 5, 9))
    rng = E.rng
    ranks = ["TP%d" % i for i in range(8)]
    model = "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"
    E.log.raw(0.0, "Environment: SGLANG_LOG_FORWARD_ITERS=1 SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0")
    E.main(
        0.6,
        server_args(
            "0.5.23",
            model,
            tp_size=8,
            random_seed=3310098,
            chunked_prefill_size=65536,
            max_prefill_tokens=65536,
            attention_backend="fa3",
        ),
    )
    t = boot(
        E,
        3.0,
        ranks,
        log_rank="TP0",
        kv_tokens=1420019,
        cls="Qwen3MoeForCausalLM",
        weight_s=96.4,
        mem_gb=61.7,
        context_len=262144,
        chunked=65536,
    )
    S = Sched(
        E,
        ["TP0"],
        max_tokens=1420019,
        step=(36.0, 0.5),
        iters=True,
        in_len=(300, 20000),
        out_len=(60, 1500),
        clients=("10.77.0.31", "10.77.0.32"),
    )
    t = serve_up(E, t, S, 61)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 300, 0.45, p_stream=0.6, drain=False)
    # a 98k-token prompt: chunk 1 (65536 tokens) takes 70 s, chunk 2 another 38 s
    ta = t + 0.2
    big = S.new_req(ta, 1.0)
    big.inp, big.cached, big.out = 98304, 0, 700
    E.access(ta + 0.01, big.ip, "POST", big.path, 200)
    cur = t + 0.4
    queued = []
    before = max(S.last.values())
    for n, sec in ((65536, 70.3), (32768, 38.1)):
        end = cur + sec
        queued += [S.new_req(tq, 0.8) for tq in poisson(rng, cur, end, 0.5)]
        S.fct += 1
        full, _, _ = S.usage(S.active + [big])
        S.emit(
            end,
            prefill_msg(
                "0.5.23",
                n_seq=1,
                new=n,
                cached=0,
                usage=usage_prefill("plain", full, 0),
                running=len(S.active),
                queue=len(queued),
                it=S.fct,
                pending=98304 - (65536 if n == 65536 else 98304),
                in_tp=n / sec,
            ),
        )
        cur = end
    big.gen = 1
    S.active.append(big)
    for i, q in enumerate(queued):  # admit() writes streaming access lines at arrival
        S.admit(q.t, cur + 0.2 + 0.15 * i, 1.0, req=q, queue=len(queued) - i - 1)
    S.last_prefill = cur
    t = S.run(cur + 0.2 + 0.15 * len(queued), cur + 300, 0.45, p_stream=0.6, drain=False)
    S.close(t)
    end = max(S.last.values())
    E.probes(t_traffic - 1.5, end - 1, health=10.0, metrics=15.0)
    E.files["server.log"] = render(E.log.lines())
    E.mtimes["server.log"] = E.clock.dt(end)
    # Carries: 0.5.23 `Prefill batch [N], ` / `Decode batch [N], ` (SGLANG_LOG_FORWARD_ITERS=1),
    # `#pending-token`; a 70 s gap before the `#new-token: 65536` chunk while POSTs and /health 200
    # continue, then progress resumes
    assert cur - 38.1 - before > 69.0
    return E, entry("slow-prefill: 0.5.23 [iter], 70 s chunked prefill", [])


def e07_mamba_idle_leak() -> tuple[Engine, dict]:
    """0.5.23 Mamba idle leak, SGLANG_LOG_MS=1, meaningless log name, NCCL noise."""
    E = Engine("hkg1-qwen3next-80b-40", "0.5.23", datetime(2026, 12, 1, 2, 11, 37), ms=True)
    rng = E.rng
    ranks = ["TP0", "TP1"]
    model = "Qwen/Qwen3-Next-80B-A3B-Instruct"
    E.main(
        0.4,
        server_args(
            "0.5.23",
            model,
            tp_size=2,
            trust_remote_code=True,
            random_seed=66120945,
            attention_backend="fa3",
            mamba_ssm_dtype="float32",
        ),
    )
    E.main(4.1, "Using default HuggingFace chat template with detected content format: string")
    t = boot(
        E,
        5.0,
        ranks,
        log_rank="TP0",
        kv_tokens=350593,
        cls="Qwen3NextForCausalLM",
        weight_s=58.8,
        mem_gb=60.1,
        context_len=262144,
        mamba=True,
        max_running=48,
    )
    E.noise(5.0, t, 16, host="hkg1-h100-40", pid=512, ndev=2, kinds=("nccl",))
    S = Sched(
        E,
        ["TP0"],
        max_tokens=350593,
        kind="mamba",
        mamba_pool=199,
        step=(15.0, 0.25),
        clients=("10.15.153.148", "10.15.153.150"),
    )
    t = serve_up(E, t, S, 38)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 320, 0.6, p_stream=0.5, drain=False)
    t = S.run(t, t + 150, 0.4, p_stream=1.0, drain=True)
    last = max(S.last.values())
    leak = t + rng.uniform(0.02, 0.2)
    if E.clock.sec(leak) == E.clock.sec(last):
        leak = math.floor(last) + 1.1
    leak = same_second(leak, 0.1, 0.3)
    total, avail = S.max_tokens, S.max_tokens - S.evictable
    for i, r in enumerate(ranks):
        E.rec(
            leak + i * 0.013,
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 5140, in '
            "run_scheduler_process\n    scheduler.run_event_loop()\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1747, in '
            "run_event_loop\n    dispatch_event_loop(self)\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 5020, in '
            "dispatch_event_loop\n    scheduler.event_loop_overlap()\n"
            '  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in '
            "decorate_context\n    return func(*args, **kwargs)\n           ^^^^^^^^^^^^^^^^^^^^^\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1176, in '
            "event_loop_overlap\n    self.on_idle()\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1862, in '
            "on_idle\n    self.invariant_checker.check_idle_invariants()\n"
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler_components/'
            'invariant_checker.py", line 371, in check_idle_invariants\n    self._check_all_pools(pool_stats)\n'
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler_components/'
            'invariant_checker.py", line 381, in _check_all_pools\n    self._report_leak(violations)\n'
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler_components/'
            'invariant_checker.py", line 415, in _report_leak\n    raise_error_or_warn(\n'
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/utils/common.py", line 4741, in '
            "raise_error_or_warn\n    raise ValueError(message)\n"
            "ValueError: pool memory leak detected! [full] total=%d, available=%d, evictable=%d, protected=0, "
            "session_held=0, uncached=0\n[mamba] total=199, available=190, evictable=8, protected=0, "
            "session_held=0, uncached=0, leaked_full_pages=None, leaked_mamba_pages={180}\n"
            % (total, avail, S.evictable),
            r,
        )
    tq = leak + 0.2
    E.main(
        tq,
        "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=<frame at 0x7fd60ede9c49, file "
        "'/usr/lib/python3.12/selectors.py', line 468, code select>. It usually means one child failed.",
    )
    E.main(tq + 0.01, "Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
    for i in range(len(ranks)):
        pid = 204 + i
        for cmd in ("py-spy dump --native --pid %d" % pid, "py-spy dump --pid %d" % pid):
            E.main(
                tq + 5.1 + i * 0.2,
                "Pyspy failed (%s). Error: Error: Failed to get process executable name. "
                "Check that the process is running.\n\nCaused by:\n    0: No such file or "
                "directory (os error 2)\n    1: No such file or directory (os error 2)\n" % cmd,
            )
        E.main(tq + 5.15 + i * 0.2, "All pyspy dump attempts failed for PID %d." % pid)
    E.quiet.append((leak - 3, tq + 7))
    E.probes(t_traffic - 1.5, leak, health=10.0, metrics=15.0)
    E.noise(t_traffic, leak, 10, host="hkg1-h100-40", pid=512, ndev=2, kinds=("nccl", "blank"))
    E.files["sglang_stdout.log"] = render(E.log.lines())
    E.mtimes["sglang_stdout.log"] = E.clock.dt(tq + 6)
    why_v = (
        "0.5.23 with SGLANG_LOG_MS=1, hybrid Mamba token parts (`mamba num`, `mamba usage`), 0.5.23 "
        "`pool memory leak detected!` with a `[mamba] ... leaked_mamba_pages={180}` continuation line, log "
        "named sglang_stdout.log, NCCL INFO noise, failing crash-time py-spy"
    )
    return E, entry(
        "idle-leak: 0.5.23 Mamba, SGLANG_LOG_MS, odd log name",
        [
            item(
                "idle-memory-leak",
                E.iso(leak),
                ranks,
                "on_idle() invariant check on an idle scheduler "
                "failed (`Scheduler hit an exception`): a real leak (%s)" % why_v,
            )
        ],
    )


def e08_torch_nccl_timeout() -> tuple[Engine, dict]:
    """0.5.2 torch ProcessGroupNCCL timeout on TP0/1/3; TP2 absent."""
    E = Engine("lhr5-llama31-70b-14", "0.5.2", datetime(2025, 9, 23, 13, 58, 20))
    rng = E.rng
    ranks = ["TP0", "TP1", "TP2", "TP3"]
    model = "meta-llama/Llama-3.1-70B-Instruct"
    E.main(
        0.3,
        server_args(
            "0.5.2", model, tp_size=4, dist_timeout=240, random_seed=19920417, attention_backend="flashinfer"
        ),
    )
    t = boot(
        E,
        3.0,
        ranks,
        log_rank="TP0",
        kv_tokens=921344,
        cls="LlamaForCausalLM",
        weight_s=38.2,
        mem_gb=33.9,
        context_len=131072,
    )
    S = Sched(E, ["TP0"], max_tokens=921344, step=(24.0, 0.33), clients=("10.4.220.235", "10.16.94.185"))
    t = serve_up(E, t, S, 2310)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 450, 0.7, p_stream=0.5, drain=False)
    stall = t + rng.uniform(10, 30)
    S.run(t, stall + 420, 0.45, p_stream=0.5, stall=stall)
    onset = S.last["TP0"]
    E.probes(t_traffic - 1.5, onset - 3, health=20.0, metrics=None, health_ip="10.0.6.180")
    E.probes(t_traffic - 1.5, stall + 420, health=None, metrics=30.0)
    E.health_fail(onset + 6, stall + 420, 20.0, onset + 0.4, ip="10.0.6.180")
    seq = rng.randint(900000, 2000000)
    ran = 240000 + rng.randint(60, 130)
    tn = onset + ran / 1000.0
    numel = 8192 * rng.choice([32, 47, 52, 64])
    wn = "WorkNCCL(SeqNum=%d, OpType=ALLREDUCE, NumelIn=%d, NumelOut=%d, Timeout(ms)=240000)" % (
        seq,
        numel,
        numel,
    )
    for k, rk in enumerate([3, 1, 0]):
        t0 = tn + k * 0.11
        pg = "[PG ID 2 PG GUID 3 Rank %d] " % rk
        lines = [
            glog(
                E.clock,
                t0,
                rk,
                709,
                "[Rank %d] Watchdog caught collective operation timeout: %s ran for %d "
                "milliseconds before timing out." % (rk, wn, ran - k * 17),
            ),
            glog(
                E.clock,
                t0 + 2e-5,
                rk,
                1493,
                pg + " failure detected by watchdog at work sequence id: %d PG "
                "status: last enqueued work: %d, last completed work: %d" % (seq, seq, seq - 1),
            ),
            glog(
                E.clock,
                t0 + 4e-5,
                rk,
                1070,
                pg + "Stack trace of the failed collective not found, potentially "
                "because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE "
                "to a non-zero value.",
            ),
            glog(
                E.clock,
                t0 + 1e-4,
                rk,
                1814 if k == 0 else 852,
                "[PG ID 0 PG GUID 0(default_pg) Rank %d] " % rk
                + (
                    "First PG on this rank to signal dumping."
                    if k == 0
                    else "Observed flight recorder dump signal from another rank via TCPStore."
                ),
            ),
            glog(
                E.clock,
                t0 + 2e-4,
                rk,
                828,
                pg + "Received a dump signal due to a collective timeout from %s "
                "and we will try our best to dump the debug info. Last enqueued NCCL work: %d, last completed "
                "NCCL work: %d.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes "
                "used across ranks, the order of collectives is not same for all ranks or the scheduled "
                "collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock or "
                "other reasons such as network errors or bugs in the communications library (e.g. NCCL), etc. "
                % ("this local rank" if k == 0 else " rank 3", seq, seq - 1),
            ),
        ]
        E.log.raw(t0, lines)
        t1 = t0 + 2.0 + rng.uniform(0, 1.5)
        exc = (
            "[Rank %d] Watchdog caught collective operation timeout: %s ran for %d milliseconds before timing "
            "out." % (rk, wn, ran - k * 17)
        )
        E.log.raw(
            t1,
            [
                glog(
                    E.clock,
                    t1,
                    rk,
                    960,
                    "[Rank %d] Some NCCL operations have failed or timed out. Due to "
                    "the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                    "corrupted/incomplete data." % rk,
                ),
                glog(
                    E.clock,
                    t1 + 1e-5,
                    rk,
                    734,
                    "[Rank %d] To avoid data inconsistency, we are taking the entire process down." % rk,
                ),
                glog(
                    E.clock,
                    t1 + 5e-4,
                    rk,
                    1000,
                    pg + "Process group watchdog thread terminated with "
                    "exception: " + exc.split(" ran for")[0],
                ),
            ]
            + cpp_frames(rng)
            + [
                "terminate called after throwing an instance of 'c10::DistBackendError'",
                "  what():  " + pg + "Process group watchdog thread terminated with exception: " + exc,
            ]
            + cpp_frames(rng),
        )
    E.quiet.append((tn - 2, tn + 6))
    E.noise(t_traffic, onset - 10, 8, kinds=("text", "blank"))
    E.files["server.log"] = render(E.log.lines())
    E.mtimes["server.log"] = E.clock.dt(stall + 420)
    why_v = (
        "0.5.2 formats, torch glog envelope `[rankN]:[E923 ...]` (month not zero-padded), TP2 absent from "
        "the NCCL watchdog reports of SeqNum %d, generation-based /health 503" % seq
    )
    truth = entry(
        "torch-nccl-timeout: 0.5.2, glog E923, TP2 absent",
        [
            item(
                "stall-onset",
                E.iso(onset),
                [],
                "last batch line; requests keep arriving, /health fails (%s)" % why_v,
            ),
            item(
                "first-rank-stopped",
                None,
                ["TP2"],
                "ranks 0, 1, 3 report the ALLREDUCE timeout of SeqNum %d; "
                "TP2 never does: it never entered the collective" % seq,
            ),
        ],
        allow=["all-ranks-frozen", "watchdog-kill", "collective-desync", "known-signature"],
        forbid=["busy-leak-report", "idle-memory-leak", "health-check-blind"],
    )
    return E, truth


def e09_multinode_soft() -> tuple[Engine, dict]:
    """0.5.10 TP16 over two nodes (node1 clock +37 s), soft watchdog on every rank."""
    E = Engine("sea1-dsv3-2node-03", "0.5.10", datetime(2026, 2, 17, 18, 20, 5))
    rng = E.rng
    skew = 37.0
    node1 = Log(Clock(E.clock.base, offset=skew))
    ranks = ["TP%d" % i for i in range(16)]
    for r in ranks[8:]:
        E.rank_logs[r] = node1
    model = "deepseek-ai/DeepSeek-V3-0324"
    common = dict(
        tp_size=16,
        nnodes=2,
        dist_init_addr="10.50.1.11:5757",
        trust_remote_code=True,
        random_seed=55120873,
        watchdog_timeout=1800.0,
        soft_watchdog_timeout=300,
        speculative_algorithm="EAGLE",
        attention_backend="fa3",
    )
    E.log.raw(0.0, "Environment: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 NCCL_DEBUG=INFO NCCL_IB_HCA=mlx5")
    E.main(0.4, server_args("0.5.10", model, node_rank=0, **common))
    node1.rec(1.1, server_args("0.5.10", model, node_rank=1, **common))
    t = boot(
        E,
        5.0,
        ranks,
        log_rank="TP0",
        kv_tokens=488211,
        cls="DeepseekV3ForCausalLM",
        weight_s=142.6,
        mem_gb=42.8,
        context_len=163840,
        dtype="torch.bfloat16",
    )
    E.noise(5.0, 20.0, 20, host="sea1-h200-0117", pid=3301, ndev=8, kinds=("nccl",))
    E.noise(5.0, 20.0, 20, log=node1, host="sea1-h200-0118", pid=2988, ndev=8, kinds=("nccl",))
    S = Sched(
        E,
        ["TP0"],
        max_tokens=488211,
        step=(41.0, 0.55),
        spec=True,
        in_len=(200, 8000),
        out_len=(80, 2500),
        clients=("10.50.9.3", "10.50.9.4"),
    )
    t = serve_up(E, t, S, 1840)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 500, 0.5, p_stream=0.6, drain=False)
    stall = t + rng.uniform(5, 15)
    S.run(t, stall + 20, 0.55, p_stream=0.6, stall=stall)
    onset = S.last["TP0"]
    w = same_second(onset + 300 + rng.uniform(30, 140), 0.05, 0.15)
    end = w + rng.uniform(80, 110)
    S.run(stall + 20, end, 0.55, p_stream=0.6, stall=stall)
    active = S.active
    total, evict = S.max_tokens, S.evictable
    reqs = S.reqs_repr(active, nids=20)
    for i, r in enumerate(rng.sample(ranks, 16)):
        tw = w + i * 0.03
        pid = (3301 if int(r[2:]) < 8 else 2988 - 8) + int(r[2:])
        E.rec(
            tw,
            "Scheduler debug info:\nscheduler.cur_batch.batch_size()=%d\nscheduler.cur_batch.reqs=%s\n"
            "self.max_total_num_tokens=%d, available_size=%d, evictable_size=%d, protected_size=0, "
            "session_held=0" % (len(active), reqs, total, total - evict - S.tokens(active), evict),
            r,
        )
        main = (
            [
                "%s (libcuda.so.1)" % addr(rng),
                "%s (libcuda.so.1)" % addr(rng),
                "cudaEventSynchronize (libcudart.so.12)",
                "THPEvent_synchronize (libtorch_python.so)",
                "Event.synchronize (torch/cuda/streams.py:231)",
                "SchedulerOutputProcessorMixin.process_batch_result_decode "
                "(sglang/srt/managers/scheduler_output_processor_mixin.py:251)",
                "Scheduler.process_batch_result (sglang/srt/managers/scheduler.py:2290)",
                "Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1094)",
                "decorate_context (torch/utils/_contextlib.py:120)",
                "run_scheduler_process (sglang/srt/managers/scheduler.py:3161)",
            ]
            + SPAWN_TAIL
            + ["%s (libc.so.6)" % addr(rng)]
        )
        E.rec(
            tw + 0.2,
            "Pyspy dump for PID %d:\n" % pid
            + pyspy(
                pid,
                "sglang::scheduler_%s" % r,
                [(pid, "idle", "MainThread", main)]
                + helper_threads(rng, pid, watchdog="dump", dump_file="sglang/srt/utils/common.py:2393"),
            )
            + "\n",
            r,
        )
        E.rec(tw + 0.3, "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)", r)
        E.L(r).raw(tw + 0.31, ["", ""])
    assert len({E.clock.sec(w + i * 0.03 + d) for i in range(16) for d in (0, 0.3)}) == 1
    E.probes(t_traffic - 1.5, end, health=10.0, metrics=15.0, health_ip="10.50.0.2")
    E.noise(t_traffic, end, 12, host="sea1-h200-0117", pid=3301, ndev=8, kinds=("nccl", "text", "blank"))
    E.noise(t_traffic, end, 12, log=node1, host="sea1-h200-0118", pid=2988, ndev=8, kinds=("nccl", "blank"))
    E.files["node0.log"] = render(E.log.lines())
    E.files["node1.log"] = render(node1.lines())
    E.mtimes["node0.log"] = E.clock.dt(end)
    E.mtimes["node1.log"] = node1.clock.dt(end)
    why_v = (
        "0.5.10 multi-node: node0.log (main process + TP0-7) and node1.log (TP8-15, clock 37 s ahead; "
        "align on `Init torch distributed ends` / `Load weight end` / `Capture cuda graph end`), only TP0 "
        "prints batch lines, MTP `accept len`/`accept rate`, soft watchdog (self.soft=True, hard at 1800.0)"
    )
    truth = entry(
        "multi-node-freeze: 0.5.10 node0/node1 logs (+37 s), soft watchdog",
        [
            item(
                "stall-onset",
                E.iso(onset),
                ranks,
                "TP0's last batch line; POSTs keep arriving, the soft "
                "watchdog later shows a batch in flight (%s)" % why_v,
                ranks_alt=[["TP0"]],
            ),
            item(
                "all-ranks-frozen",
                E.iso(onset),
                ranks,
                "all 16 soft watchdogs (8 on node1's skewed clock) fire "
                "in one second: the ranks froze together at the group's last progress",
                ts_end=E.iso(onset),
            ),
            item(
                "watchdog-kill",
                E.iso(w),
                ranks,
                "0.5.10 soft scheduler watchdog (self.soft=True) fired on all 16 "
                "ranks; node1's lines read %s on its own clock" % node1.clock.iso(w),
            ),
            item(
                "busy-leak-report",
                E.iso(w),
                ranks,
                "0.5.10 pool text `self.max_total_num_tokens=..., "
                "available_size=..., session_held=...` inside `Scheduler debug info:`: the in-flight batch",
            ),
            health_blind(
                E, onset, "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0: /health 200 throughout the freeze"
            ),
        ],
        allow=["collective-desync", "known-signature"],
    )
    return E, truth


def e10_symm_operator_dumps() -> tuple[Engine, dict]:
    """0.5.23 symm-mem hang, no watchdog; operator py-spy captures with meaningless names; noise."""
    E = Engine("bom2-qwen3-235b-symm-09", "0.5.23", datetime(2026, 7, 21, 4, 47, 55))
    rng = E.rng
    ranks = ["TP%d EP%d" % (i, i) for i in range(4)]
    model = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    pids = {r: 5120 + 3 * i for i, r in enumerate(ranks)}
    E.log.raw(
        0.0,
        "Environment: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,REG",
    )
    E.main(
        2.9,
        "Symmetric memory is enabled, setting symmetric memory prealloc size to 4GB as default.Use "
        "environment variable SGLANG_SYMM_MEM_PREALLOC_GB_SIZE to change the prealloc size.",
    )
    E.main(
        3.0,
        server_args(
            "0.5.23",
            model,
            tp_size=4,
            ep_size=4,
            enable_symm_mem=True,
            random_seed=40411,
            watchdog_timeout=1800.0,
            attention_backend="fa3",
        ),
    )
    E.log.raw(
        8.0,
        [
            "Emitting ninja build file /tmp/symm_allocator/build.ninja...",
            "Building extension module nccl_allocator...",
            "ninja: no work to do.",
            "Loading extension module nccl_allocator...",
        ],
    )
    t = boot(
        E,
        9.0,
        ranks,
        log_rank="TP0 EP0",
        kv_tokens=1002114,
        cls="Qwen3MoeForCausalLM",
        weight_s=71.5,
        mem_gb=60.3,
        context_len=262144,
        symm=True,
    )
    E.noise(9.0, t, 24, host="bom2-b200-09", pid=5120, ndev=4, kinds=("nccl",))
    S = Sched(
        E,
        ["TP0 EP0"],
        max_tokens=1002114,
        step=(26.0, 0.38),
        in_len=(150, 9000),
        clients=("10.30.66.64", "10.30.66.71"),
    )
    t = serve_up(E, t, S, 4407)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 420, 0.75, p_stream=0.6, drain=False)
    stall = t + rng.uniform(6, 18)
    end = stall + rng.uniform(400, 420)
    S.run(t, end, 0.9, p_stream=0.7, stall=stall)
    onset = S.last["TP0 EP0"]
    E.probes(t_traffic - 1.5, end, health=10.0, metrics=15.0, health_ip="10.0.5.193")
    E.noise(
        t_traffic, end, 40, host="bom2-b200-09", pid=5120, ndev=4, kinds=("nccl", "text", "blank", "text")
    )
    E.noise(t_traffic + 60, onset - 60, 1, kinds=("bad",))
    E.log.raw(end - 3.0, "\udcff\udcfe<binary garbage from a crashed log shipper>\udc80")
    E.files["sglang.out"] = render(E.log.lines())
    E.mtimes["sglang.out"] = E.clock.dt(end)
    names = {
        "TP0 EP0": "ops/capture-0412.out",
        "TP1 EP1": "ops/capture-0413.out",
        "TP2 EP2": "ops/pyspy_b.log",
        "TP3 EP3": "ops/tp3",
    }
    tc = onset + rng.uniform(235, 250)
    for i, r in enumerate(ranks):
        pid = pids[r]
        native = r != "TP3 EP3"
        main = symm_stack(rng, "qwen3moe", named=True)
        threads = [(pid, "idle", "MainThread", main if native else plain(main))] + helper_threads(
            rng, pid, watchdog="sleep", native=native
        )
        E.files[names[r]] = (
            pyspy(pid, "sglang::scheduler_%s" % r.replace(" ", "_"), threads) + "\n"
        ).encode()
        E.mtimes[names[r]] = E.clock.dt(tc + 4.5 * i)
    E.files["ops/oncall-notes.md"] = (
        b"# bom2-qwen3-235b-symm-09\n\n- paged: p99 TTFT alert, LB still green\n"
        b"- py-spy dumped each scheduler (capture-0412 = first one I grabbed)\n"
        b"- restarting the container after this\n"
    )
    E.mtimes["ops/oncall-notes.md"] = E.clock.dt(end + 30)
    why_v = (
        "0.5.23 `TP0 EP0` tags, no watchdog (watchdog_timeout=1800.0, operator restarted), operator py-spy "
        "captures in ops/ with meaningless names (capture-0412.out, pyspy_b.log, tp3 without --native), server "
        "log named sglang.out, NCCL INFO lines, blank lines, garbage and non-UTF-8 bytes"
    )
    truth = entry(
        "symm-mem-deadlock: 0.5.23 operator py-spy files, no watchdog, noise",
        [
            item(
                "stall-onset",
                E.iso(onset),
                ranks,
                "last batch line; POSTs keep arriving; every rank's stack sits "
                "in ncclCommWindowRegister/recvmsg (%s)" % why_v,
                ranks_alt=[["TP0 EP0"]],
            ),
            health_blind(
                E, onset, "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0: /health 200 until the restart"
            ),
        ],
        allow=["all-ranks-frozen", "known-signature", "collective-desync"],
        forbid=["watchdog-kill", "busy-leak-report", "idle-memory-leak", "first-rank-stopped"],
    )
    return E, truth


def e11_pd_decode_dp_retract() -> tuple[Engine, dict]:
    """0.5.23 PD-decode engine with DP attention (DP0 TP0 EP0 ...), KV retraction: healthy."""
    E = Engine("lhr7-qwen3-235b-pd02-decode", "0.5.23", datetime(2026, 8, 11, 12, 30, 0))
    rng = E.rng
    ranks = ["DP%d TP%d EP%d" % (i, i, i) for i in range(4)]
    model = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    E.main(
        0.5,
        server_args(
            "0.5.23",
            model,
            tp_size=4,
            dp_size=4,
            ep_size=4,
            enable_dp_attention=True,
            disaggregation_mode="decode",
            disaggregation_transfer_backend="mooncake",
            random_seed=872201,
            attention_backend="fa3",
        ),
    )
    t = boot(
        E,
        4.0,
        ranks,
        log_rank="DP0 TP0 EP0",
        kv_tokens=1650422,
        cls="Qwen3MoeForCausalLM",
        weight_s=68.9,
        mem_gb=61.2,
        context_len=262144,
    )
    scheds = [
        Sched(
            E,
            [r],
            max_tokens=1650422,
            step=(29.0, 0.3),
            pd=True,
            occ=True,
            log_prefill=False,
            in_len=(400, 9000),
            out_len=(60, 1200),
            clients=("10.70.0.5",),
        )
        for r in ranks
    ]
    t = serve_up(E, t, None, 52)
    t_traffic = t + 2
    closing = []
    retract_at = t_traffic + rng.uniform(120, 180)
    for i, S in enumerate(scheds):
        tt = S.run(t_traffic, retract_at if i == 2 else t_traffic + 240, 0.28, p_stream=0.4, drain=False)
        if i == 2:
            S.E.rec(
                tt + 0.01,
                "KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: "
                "%d, #new_token_ratio: 0.4312 -> 0.7000" % rng.randint(3000, 9000),
                S.ranks[0],
            )
            S.retracted = 2
            tt = S.run(tt + 0.02, t_traffic + 240, 0.28, p_stream=0.4, drain=False)
        closing.append(S.prep_close(tt))
    # the capture ends with every DP leader's Decode line in the same second (no false stagger)
    common = max(plan[0] for _, plan in closing)
    common = math.floor(common) + 1.1
    for i, (S, (tt, plan)) in enumerate(zip(scheds, closing, strict=True)):
        S.commit(tt, (common + 0.05 * i,) + plan[1:])
    ends = [max(S.last.values()) for S in scheds]
    end = min(ends)
    E.probes(t_traffic - 1.5, end - 1, health=10.0, metrics=15.0)
    E.files["server.log"] = render(E.log.lines())
    E.mtimes["server.log"] = E.clock.dt(max(ends))
    # Carries: 0.5.23 PD-decode Decode lines (`pre-allocated usage`, `#prealloc-req`, `#transfer-req`,
    # `#host-receive-req`, `#retracted-req`), DP attention prefix `DP1 TP1 EP1` (four DP leaders log), no
    # Prefill lines, a `KV cache pool is full. Retract requests.` warning
    return E, entry("healthy-busy: 0.5.23 PD-decode, DP attention, KV retraction", [])


def e12_memcheck_busy() -> tuple[Engine, dict]:
    """0.5.23 healthy engine with SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY=2 ([Mem Check (BUSY)] lines)."""
    E = Engine("ams9-qwen25-72b-memchk-44", "0.5.23", datetime(2026, 5, 27, 19, 15, 31))
    ranks = ["TP0", "TP1"]
    model = "Qwen/Qwen2.5-72B-Instruct"
    E.log.raw(0.0, "Environment: SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY=2")
    E.main(0.4, server_args("0.5.23", model, tp_size=2, random_seed=2004, attention_backend="fa3"))

    def memcheck(S: Sched, t: float, w: float) -> None:
        inflight = S.tokens(S.active)
        for i, r in enumerate(ranks):
            avail = S.max_tokens - S.evictable - inflight
            E.rec(
                w + 0.002 + i * 0.003,
                "[Mem Check (BUSY)] [full] total=%d, available=%d, evictable=%d, "
                "protected=0, session_held=0, uncached=%d" % (S.max_tokens, avail, S.evictable, inflight),
                r,
            )

    t = boot(
        E,
        3.0,
        ranks,
        log_rank="TP0",
        kv_tokens=372965,
        cls="Qwen2ForCausalLM",
        weight_s=35.9,
        mem_gb=68.6,
        context_len=32768,
    )
    S = Sched(
        E,
        ["TP0"],
        max_tokens=372965,
        step=(21.0, 0.4),
        occ=True,
        on_window=memcheck,
        clients=("10.9.219.45", "10.22.80.231"),
    )
    t = serve_up(E, t, S, 839)
    t_traffic = t + 2
    t = S.run(t_traffic, t_traffic + 300, 0.6, p_stream=0.5, drain=False)
    S.close(t)
    end = max(S.last.values())
    E.probes(t_traffic - 1.5, end - 1, health=10.0, metrics=15.0)
    E.files["server.log"] = render(E.log.lines())
    E.mtimes["server.log"] = E.clock.dt(end + 0.5)
    # Carries: 0.5.23 busy-time memory check at level 2: a `[Mem Check (BUSY)] [full] total=... uncached=N`
    # line per rank per iteration whose numbers balance (uncached = in-flight tokens): routine, not a leak
    return E, entry("healthy-busy: 0.5.23 [Mem Check (BUSY)] lines", [])


ENGINES = [
    e01_symm_deadlock_compose,
    e02_staggered_rotated,
    e03_idle_leak_046,
    e04_healthy_pp_ms,
    e05_idle_gz_swa,
    e06_slow_prefill_iters,
    e07_mamba_idle_leak,
    e08_torch_nccl_timeout,
    e09_multinode_soft,
    e10_symm_operator_dumps,
    e11_pd_decode_dp_retract,
    e12_memcheck_busy,
]


def main() -> None:
    if FLEET.exists():
        shutil.rmtree(FLEET)
    truth = {"engines": {}}
    for fn in ENGINES:
        E, t = fn()
        for rel, data in sorted(E.files.items()):
            p = FLEET / E.name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            if rel in E.mtimes:
                ts = math.floor(E.mtimes[rel].replace(tzinfo=timezone.utc).timestamp())
                os.utime(p, (ts, ts))
        truth["engines"][E.name] = t
    truth["engines"] = dict(sorted(truth["engines"].items()))
    TRUTH.write_text(json.dumps(truth, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
