#!/usr/bin/env python3
"""Generate examples/seed-incident/: the bundled sample evidence of the seed incident.

The seed incident (reference/incidents.md §1): an SGLang 0.5.23 engine with
``--tp 8 --enable-symm-mem`` serves traffic, goes idle for a few minutes, then
a burst arrives.  A few seconds into the burst the largest extend batch of the
run grows the symmetric-memory pool; every TP rank enters NCCL window
registration (``ncclCommWindowRegister``) from the forward pass and blocks for
ever in ``recvmsg``.  Nothing is logged; /health keeps answering 200
(SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0); 312 s later every rank's hard
scheduler watchdog fires in the same second, dumps its debug info (with the
misleading pool "leak"), py-spy --native, and SIGQUITs the server.

Output (deterministic: fixed seed, no clock, no environment; re-running gives
byte-identical files):

    seed-incident/server.log                 combined stdout/stderr of the engine
    seed-incident/captures/*.txt             two operator py-spy dumps (plain), taken ~1 min into the hang
    seed-incident/README.md                  what the bundle shows and the expected conclusions
    seed-incident/expected.json              the same expectations in the truth.json format

Python 3.11+ standard library only.  Usage::

    python3 examples/make_seed_incident.py [--out DIR]
"""

from __future__ import annotations

import argparse
import calendar
import json
import math
import os
import random
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

SEED = 20261118
ENGINE = "seed-incident"

# ----------------------------------------------------------------------------- deployment constants
T0 = datetime(2026, 11, 18, 9, 41, 7)  # log clock: local time, no zone (SGLang datefmt)
HOST = "gpu-h100-r12-n07"
MODEL = "meta-llama/Llama-3.3-70B-Instruct"
TP = 8
MAIN_PID = 1874
SCHED_PIDS = [2143, 2144, 2146, 2147, 2149, 2150, 2152, 2153]  # TP0..TP7 (spawn order)
BUS_IDS = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"]
MAX_TOTAL = 1148936
CHUNKED_PREFILL = 16384
MAX_PREFILL = 16384
MAX_RUNNING = 2048
CONTEXT_LEN = 131072
DECODE_LOG_INTERVAL = 40
WATCHDOG_TIMEOUT = 300
CUDA_GRAPH_BS = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160]

# traffic timeline, seconds after T0
TRAFFIC_START = 121.0      # first client request (server ready at ~115 s)
TRAFFIC_END = 845.0        # last request of the morning traffic (then idle)
BURST_START = 1065.5       # the batch job starts (after ~3.5 min of idle)
NORMAL_RESUME = 1093.0     # interactive traffic resumes (already after the stall)
WATCHDOG_AFTER = 312       # watchdog fires this many seconds after the last batch line's second
CAPTURE_OFFSETS = (63.4, 78.9)  # operator py-spy captures, seconds after the stall onset

# clients
LB_IP = "10.0.0.12"            # load balancer health probe, every 10 s
PROM_IP = "10.0.3.40"          # Prometheus, every 15 s
DASH_IP = "10.0.3.41"          # dashboard polling /server_info every 60 s (round-trips to the scheduler)
GATEWAYS = ["10.40.3.17", "10.40.3.18"]   # chat API gateway pods (streaming /v1/chat/completions)
RAG_IP = "10.22.9.41"          # internal RAG service (non-streaming /generate)
BATCH_IP = "10.40.5.201"       # the batch job that produces the burst (streaming chat)

# Llama 3 chat-template token ids
BOS, SH, EH, EOT = 128000, 128006, 128007, 128009
ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, NL2 = 9125, 882, 78191, 271


# ----------------------------------------------------------------------------- helpers
def stamp(t: float) -> str:
    return (T0 + timedelta(seconds=math.floor(t))).strftime("%Y-%m-%d %H:%M:%S")


def iso(t: float) -> str:
    return (T0 + timedelta(seconds=math.floor(t))).strftime("%Y-%m-%dT%H:%M:%S")


class Log:
    """Lines with a float time; sorted stably at the end (records keep their embedded newlines)."""

    def __init__(self) -> None:
        self.items: list[tuple[float, int, str]] = []
        self.seq = 0

    def add(self, t: float, text: str) -> None:
        self.items.append((t, self.seq, text))
        self.seq += 1

    def sched(self, t: float, rank: int, msg: str) -> None:
        self.add(t, f"[{stamp(t)} TP{rank}] {msg}")

    def main(self, t: float, msg: str) -> None:
        self.add(t, f"[{stamp(t)}] {msg}")

    def access(self, t: float, ip: str, port: int, method: str, path: str, status: str = "200 OK") -> None:
        self.add(t, f'[{stamp(t)}] INFO:     {ip}:{port} - "{method} {path} HTTP/1.1" {status}')

    def raw(self, t: float, text: str) -> None:
        self.add(t, text)

    def render(self) -> list[str]:
        out: list[str] = []
        for _, _, text in sorted(self.items, key=lambda x: (x[0], x[1])):
            out.extend(text.split("\n"))
        return out


class Ports:
    """Ephemeral source ports per client, increasing with wrap-around like a Linux client."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.cur: dict[str, int] = {}

    def next(self, ip: str) -> int:
        p = self.cur.get(ip)
        if p is None:
            p = self.rng.randint(33000, 58000)
        p += self.rng.randint(1, 37)
        if p > 60999:
            p = 32768 + (p - 61000)
        self.cur[ip] = p
        return p


def token_ids(rng: random.Random, n: int) -> list[int]:
    """Plausible Llama-3 token ids: mostly common (small) ids, a tail up to the vocab size."""
    out = []
    for _ in range(n):
        u = rng.random()
        if u < 0.55:
            out.append(rng.randint(11, 9999))
        elif u < 0.88:
            out.append(rng.randint(10000, 49999))
        else:
            out.append(rng.randint(50000, 127999))
    return out


# ----------------------------------------------------------------------------- requests
@dataclass
class Req:
    rid: str
    t_arr: float
    client: str
    path: str
    stream: bool
    prefix: str | None          # shared system/few-shot prefix id (radix-cache hits)
    prefix_len: int
    prompt_len: int              # total input tokens (prefix included)
    out_target: int
    kind: str = "normal"         # normal | burst
    cached: int = 0
    out: int = 0
    t_done: float | None = None
    port: int = 0

    def held(self) -> int:
        return self.prompt_len + self.out


PREFIXES = {  # id -> (length, owner)
    "app-support": 412,
    "app-sql": 96,
    "app-rag": 233,
    "rag-fewshot": 640,
}


def lognormal_int(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, int(round(median * math.exp(rng.gauss(0.0, sigma))))))


def make_rid(rng: random.Random) -> str:
    return f"{rng.getrandbits(128):032x}"


def normal_rate(t: float) -> float:
    """Requests per second of the interactive traffic (a slow swell and a lull)."""
    x = (t - TRAFFIC_START) / (TRAFFIC_END - TRAFFIC_START)
    return 0.55 + 0.45 * math.sin(math.pi * x) ** 2 + 0.2 * math.sin(7.1 * x)


def gen_normal_requests(rng: random.Random, t_from: float, t_to: float, scale: float = 1.0) -> list[Req]:
    reqs = []
    t = t_from
    while True:
        lam = max(0.05, normal_rate(min(max(t, TRAFFIC_START), TRAFFIC_END)) * scale)
        t += rng.expovariate(lam)
        if t >= t_to:
            break
        u = rng.random()
        if u < 0.72:
            app = rng.choices(["app-support", "app-sql", "app-rag"], [5, 2, 3])[0]
            user = lognormal_int(rng, 170 if app != "app-rag" else 520, 0.75, 12, 1150)
            reqs.append(Req(make_rid(rng), t, rng.choice(GATEWAYS), "/v1/chat/completions", True, app,
                            PREFIXES[app], PREFIXES[app] + user + 10, lognormal_int(rng, 150, 0.7, 8, 900)))
        else:
            user = lognormal_int(rng, 420, 0.6, 40, 1400)
            reqs.append(Req(make_rid(rng), t, RAG_IP, "/generate", False, "rag-fewshot",
                            PREFIXES["rag-fewshot"], PREFIXES["rag-fewshot"] + user,
                            lognormal_int(rng, 60, 0.6, 4, 260)))
    return reqs


def gen_burst_requests(rng: random.Random) -> list[Req]:
    """The batch job: waves of growing fan-out, unique documents (no shared prefix)."""
    reqs = []
    t = BURST_START
    for size in [2, 3, 4, 6, 8, 8]:
        for _ in range(size):
            ta = t + rng.uniform(0.0, 0.006)  # asyncio.gather fan-out: the wave lands within a few ms
            doc = lognormal_int(rng, 560, 0.22, 330, 900)
            reqs.append(Req(make_rid(rng), ta, BATCH_IP, "/v1/chat/completions", True, None, 0, doc + 10,
                            lognormal_int(rng, 260, 0.3, 120, 480), kind="burst"))
        t += rng.uniform(1.1, 1.4)
    reqs.sort(key=lambda r: r.t_arr)
    return reqs


# ----------------------------------------------------------------------------- scheduler simulation
@dataclass
class Hang:
    t: float                 # when the hung forward was launched
    batch: list[Req]         # new requests of the hung (mixed) extend batch
    running: list[Req]       # running requests mixed into it
    new_tokens: int
    evictable: int
    last_batch_t: float
    last_batch_line: str
    last_decode_tokens: int
    last_decode_running: int
    prior_max_new: int
    steps_since_log: int     # decode steps between the last Decode line and the hung batch


@dataclass
class SimState:
    running: list[Req] = field(default_factory=list)
    waiting: list[Req] = field(default_factory=list)
    tree: set[str] = field(default_factory=set)
    evictable: int = 0
    fct_decode: int = 0
    last_decode_log: float = 0.0
    gen_since: int = 0
    last_prefill_log: float = 0.0
    max_new: int = 0
    last_batch_t: float = 0.0
    last_batch_line: str = ""
    last_decode_tokens: int = 0
    last_decode_running: int = 0
    last_decode_fct: int = 0


def fmt_usage(tokens: int) -> str:
    return "%.2f" % (tokens / MAX_TOTAL)


def simulate(log: Log, rng: random.Random, reqs: list[Req]) -> tuple[Hang, list[Req]]:
    """Run the TP0 scheduler until the hang; returns the hang and every request that never finished."""
    st = SimState()
    st.last_decode_log = TRAFFIC_START - 5.0
    st.last_prefill_log = TRAFFIC_START - 5.0
    st.evictable = 9  # the warmup request
    arr = sorted(reqs, key=lambda r: r.t_arr)
    ai = 0
    now = TRAFFIC_START
    while True:
        while ai < len(arr) and arr[ai].t_arr + 0.004 <= now:
            st.waiting.append(arr[ai])
            ai += 1
        if not st.waiting and not st.running:
            if ai >= len(arr):
                raise RuntimeError("traffic ended without a hang")
            now = arr[ai].t_arr + 0.004
            continue
        if st.waiting:
            batch, new_tokens, cached = [], 0, 0
            while st.waiting:
                r = st.waiting[0]
                c = r.prefix_len if (r.prefix and r.prefix in st.tree) else 0
                if batch and new_tokens + (r.prompt_len - c) > MAX_PREFILL:
                    break
                st.waiting.pop(0)
                r.cached = c
                batch.append(r)
                new_tokens += r.prompt_len - c
                cached += c
            # the pool-growing batch: the largest extend of the run, a few seconds into the burst
            if (now >= BURST_START + 4.0 and all(r.kind == "burst" for r in batch) and len(batch) >= 5
                    and new_tokens > st.max_new and st.running):
                hang = Hang(now, batch, list(st.running), new_tokens, st.evictable, st.last_batch_t,
                            st.last_batch_line, st.last_decode_tokens, st.last_decode_running, st.max_new,
                            st.fct_decode - st.last_decode_fct)
                pending = st.running + batch + st.waiting + arr[ai:]
                return hang, pending
            dur = 0.021 + new_tokens / 23500.0 + 0.00035 * len(st.running) + rng.uniform(0.0, 0.004)
            now += dur
            n_running_before = len(st.running)
            for r in st.running:  # mixed chunk: the running requests decode one token in the same batch
                r.out += 1
                st.gen_since += 1
            for r in batch:
                r.out = 1
                if r.prefix:
                    st.tree.add(r.prefix)
            st.running.extend(batch)
            used = sum(r.held() for r in st.running)
            gap = max(now - st.last_prefill_log, 1e-3)
            line = (f"Prefill batch, #new-seq: {len(batch)}, #new-token: {new_tokens}, #cached-token: {cached}, "
                    f"token usage: {fmt_usage(used)}, #running-req: {n_running_before}, "
                    f"#queue-req: {len(st.waiting)}, #pending-token: 0, cuda graph: False, "
                    f"input throughput (token/s): {new_tokens / gap:.2f}")
            log.sched(now, 0, line)
            st.last_prefill_log = now
            st.max_new = max(st.max_new, new_tokens)
            st.last_batch_t, st.last_batch_line = now, line
        else:
            bs = len(st.running)
            tok = sum(r.held() for r in st.running)
            now += 0.0102 + 0.00017 * bs + tok * 1.1e-8 + rng.uniform(0.0, 0.0009)
            for r in st.running:
                r.out += 1
            st.gen_since += bs
            st.fct_decode += 1
            if st.fct_decode % DECODE_LOG_INTERVAL == 0:
                tok = sum(r.held() for r in st.running)
                gap = max(now - st.last_decode_log, 1e-3)
                line = (f"Decode batch, #running-req: {bs}, #token: {tok}, token usage: {fmt_usage(tok)}, "
                        f"cuda graph: {bs <= CUDA_GRAPH_BS[-1]}, gen throughput (token/s): {st.gen_since / gap:.2f}, "
                        f"#queue-req: {len(st.waiting)}")
                log.sched(now, 0, line)
                st.last_decode_log, st.gen_since = now, 0
                st.last_batch_t, st.last_batch_line = now, line
                st.last_decode_tokens, st.last_decode_running = tok, bs
                st.last_decode_fct = st.fct_decode
        # finished requests leave the batch; their KV stays in the radix tree (evictable)
        still = []
        for r in st.running:
            if r.out >= r.out_target:
                r.t_done = now
                st.evictable += r.prompt_len + r.out - r.cached
                if not r.stream:
                    log.access(now + rng.uniform(0.001, 0.004), r.client, r.port, "POST", r.path)
            else:
                still.append(r)
        st.running = still


# ----------------------------------------------------------------------------- startup
SERVER_ARGS = (
    "server_args=ServerArgs(model_path='{m}', tokenizer_path='{m}', tokenizer_mode='auto', "
    "tokenizer_worker_num=1, skip_tokenizer_init=False, load_format='auto', model_loader_extra_config='{{}}', "
    "trust_remote_code=False, context_length=None, is_embedding=False, enable_multimodal=None, revision=None, "
    "model_impl='auto', host='0.0.0.0', port=30000, grpc_mode=False, skip_server_warmup=False, warmups=None, "
    "nccl_port=None, checkpoint_engine_wait_weights_before_ready=False, dtype='auto', quantization=None, "
    "quantization_param_path=None, kv_cache_dtype='auto', enable_fp32_lm_head=False, modelopt_quant=None, "
    "mem_fraction_static=0.85, max_running_requests=None, max_queued_requests=None, max_total_tokens=None, "
    "chunked_prefill_size={cp}, enable_dynamic_chunking=False, max_prefill_tokens={mp}, schedule_policy='fcfs', "
    "enable_priority_scheduling=False, schedule_conservativeness=1.0, page_size=1, hybrid_kvcache_ratio=None, "
    "swa_full_tokens_ratio=0.8, disable_hybrid_swa_memory=False, radix_eviction_policy='lru', device='cuda', "
    "tp_size={tp}, pp_size=1, pp_max_micro_batch_size=None, stream_interval=1, stream_output=False, "
    "random_seed=613490275, constrained_json_whitespace_pattern=None, watchdog_timeout={wd}, "
    "soft_watchdog_timeout=None, dist_timeout=None, download_dir=None, base_gpu_id=0, gpu_id_step=1, "
    "sleep_on_idle=False, log_level='info', log_level_http=None, log_requests=False, log_requests_level=2, "
    "crash_dump_folder=None, show_time_cost=False, enable_metrics=True, enable_metrics_for_all_schedulers=False, "
    "tokenizer_metrics_custom_labels_header='x-custom-labels', bucket_time_to_first_token=None, "
    "bucket_inter_token_latency=None, bucket_e2e_request_latency=None, collect_tokens_histogram=False, "
    "prompt_tokens_buckets=None, generation_tokens_buckets=None, gc_warning_threshold_secs=0.0, "
    "decode_log_interval={dli}, enable_request_time_stats_logging=False, kv_events_config=None, "
    "enable_trace=False, otlp_traces_endpoint='localhost:4317', api_key=None, served_model_name='{m}', "
    "weight_version='default', chat_template=None, completion_template=None, file_storage_path='sglang_storage', "
    "enable_cache_report=False, reasoning_parser=None, tool_call_parser='llama3', tool_server=None, "
    "sampling_defaults='model', dp_size=1, load_balance_method='round_robin', dist_init_addr=None, nnodes=1, "
    "node_rank=0, json_model_override_args='{{}}', preferred_sampling_params=None, enable_lora=None, "
    "max_lora_rank=None, lora_paths=None, max_loaded_loras=None, max_loras_per_batch=8, lora_backend='csgmv', "
    "attention_backend='fa3', decode_attention_backend=None, prefill_attention_backend=None, "
    "sampling_backend='flashinfer', grammar_backend='xgrammar', mm_attention_backend=None, "
    "speculative_algorithm=None, ep_size=1, moe_a2a_backend='none', moe_runner_backend='auto', "
    "enable_eplb=False, enable_hierarchical_cache=False, hicache_ratio=2.0, hicache_size=0, "
    "hicache_write_policy='write_through', enable_lmcache=False, disable_radix_cache=False, "
    "cuda_graph_max_bs={gbs}, cuda_graph_bs={gbl}, disable_cuda_graph=False, disable_cuda_graph_padding=False, "
    "enable_profile_cuda_graph=False, enable_cudagraph_gc=False, enable_nccl_nvls=False, enable_symm_mem=True, "
    "disable_flashinfer_cutlass_moe_fp4_allgather=False, enable_tokenizer_batch_encode=False, "
    "disable_outlines_disk_cache=False, disable_custom_all_reduce=False, enable_mscclpp=False, "
    "enable_torch_symm_mem=False, disable_overlap_schedule=False, enable_mixed_chunk=True, "
    "enable_dp_attention=False, enable_dp_lm_head=False, enable_two_batch_overlap=False, "
    "enable_torch_compile=False, torch_compile_max_bs=32, torchao_config='', enable_nan_detection=False, "
    "enable_p2p_check=False, triton_attention_reduce_in_fp32=False, num_continuous_decode_steps=1, "
    "delete_ckpt_after_loading=False, enable_memory_saver=False, allow_auto_truncate=False, "
    "enable_custom_logit_processor=False, flashinfer_mla_disable_ragged=False, disable_shared_experts_fusion=False, "
    "disable_chunked_prefix_cache=False, disable_fast_image_processor=False, keep_mm_feature_on_device=False, "
    "enable_return_hidden_states=False, scheduler_recv_interval=1, numa_node=None, "
    "enable_deterministic_inference=False, debug_tensor_dump_output_folder=None, "
    "disaggregation_mode='null', disaggregation_transfer_backend='mooncake', disaggregation_bootstrap_port=8998, "
    "custom_weight_loader=[], weight_loader_disable_mmap=False, enable_pdmux=False, "
    "sm_group_num=8, mm_max_concurrent_calls=32, mm_per_request_timeout=10.0)"
)

LAUNCH_CMD = (
    f"+ exec python3 -m sglang.launch_server --model-path {MODEL} --tp 8 --enable-symm-mem "
    f"--enable-mixed-chunk --chunked-prefill-size {CHUNKED_PREFILL} --cuda-graph-max-bs 160 "
    "--tool-call-parser llama3 --enable-metrics --host 0.0.0.0 --port 30000"
)


def comm_ptr(rng: random.Random) -> int:
    return 0x55D000000000 + rng.randrange(0x0, 0x3FFFFFFFF) * 16


def startup(log: Log, rng: random.Random, comms: list[int]) -> float:
    """Launch lines up to 'fired up'; returns the time the server became ready."""
    t = 0.0
    for line in ["+ export NCCL_DEBUG=INFO", "+ export NCCL_DEBUG_SUBSYS=INIT",
                 "+ export SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0", "+ export TOKENIZERS_PARALLELISM=false",
                 LAUNCH_CMD]:
        log.raw(t, line)
        t += 0.01
    t = 9.3
    log.main(t, "Symmetric memory is enabled, setting symmetric memory prealloc size to 4GB as default."
                "Use environment variable SGLANG_SYMM_MEM_PREALLOC_GB_SIZE to change the prealloc size.")
    log.main(t + 0.2, SERVER_ARGS.format(m=MODEL, cp=CHUNKED_PREFILL, mp=MAX_PREFILL, tp=TP, wd=WATCHDOG_TIMEOUT,
                                         dli=DECODE_LOG_INTERVAL, gbs=CUDA_GRAPH_BS[-1], gbl=CUDA_GRAPH_BS))
    log.main(t + 1.6, "Using default HuggingFace chat template with detected content format: string")
    order = list(range(TP))
    # --- torch distributed + NCCL init
    t_dist = 17.2
    dist_order = order[:]
    rng.shuffle(dist_order)
    for k, r in enumerate(dist_order):
        log.sched(t_dist + 0.05 * k, r, "Init torch distributed begin.")
    t_n = 19.4
    p0 = SCHED_PIDS[0]
    log.raw(t_n, f"{HOST}:{p0}:{p0} [0] NCCL INFO Bootstrap: Using eth0:10.12.7.33<0>")
    log.raw(t_n + 0.001, f"{HOST}:{p0}:{p0} [0] NCCL INFO cudaDriverVersion 12090")
    log.raw(t_n + 0.002, f"{HOST}:{p0}:{p0} [0] NCCL INFO NCCL version 2.29.7+cuda12.9")
    log.raw(t_n + 0.003, f"{HOST}:{p0}:{p0} [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 1.")
    for r in order:
        pid = SCHED_PIDS[r]
        log.raw(t_n + 0.6 + 0.01 * r, f"{HOST}:{pid}:{pid} [{r}] NCCL INFO NVLS multicast support is available "
                                      f"on dev {r} (NVLS_NCHANNELS 16)")
    comm_id = rng.getrandbits(64)
    for r in order:
        pid = SCHED_PIDS[r]
        log.raw(t_n + 1.3 + 0.013 * ((r * 5) % 8),
                f"{HOST}:{pid}:{pid} [{r}] NCCL INFO ncclCommInitRank comm {comms[r]:#x} rank {r} nranks {TP} "
                f"cudaDev {r} nvmlDev {r} busId {BUS_IDS[r]} commId {comm_id:#018x} - Init COMPLETE")
    log.raw(t_n + 1.42, f"{HOST}:{p0}:{p0} [0] NCCL INFO Init timings - ncclCommInitRank: rank 0 nranks {TP} "
                        "total 0.91 (kernels 0.24, alloc 0.06, bootstrap 0.10, allgathers 0.02, topo 0.22, "
                        "graphs 0.03, connections 0.19, rest 0.05)")
    log.sched(t_n + 1.6, 0, "sglang is using nccl==2.29.7")
    t_end = 22.3
    for k, r in enumerate(dist_order):
        log.sched(t_end + 0.04 * k, r, f"Init torch distributed ends. elapsed={t_end - t_dist + rng.uniform(0.1, 0.7):.2f} s, "
                                       f"mem usage={rng.uniform(0.88, 1.07):.2f} GB")
    # --- weights
    t_w = 23.1
    avail0 = []
    for k, r in enumerate(dist_order):
        a = 78.21 - rng.uniform(0.0, 0.35)
        avail0.append((r, a))
        log.sched(t_w + 0.02 * k, r, f"Load weight begin. avail mem={a:.2f} GB")
    shards = 30
    t_s = t_w + 0.9
    log.raw(t_s, f"Loading safetensors checkpoint shards:   0% Completed | 0/{shards} [00:00<?, ?it/s]")
    el = 0.0
    for i in range(1, shards + 1):
        el += rng.uniform(1.05, 1.55)
        rate = el / i
        rem = rate * (shards - i)
        pct = int(100 * i / shards)
        log.raw(t_s + el, f"Loading safetensors checkpoint shards: {pct:3d}% Completed | {i}/{shards} "
                          f"[{int(el) // 60:02d}:{int(el) % 60:02d}<{int(rem) // 60:02d}:{int(rem) % 60:02d}, "
                          f"{rate:5.2f}s/it]")
    log.raw(t_s + el + 0.01, "")
    t_we = t_s + el + 0.4
    mem_w = 16.43
    avail1 = {}
    for k, (r, a) in enumerate(avail0):
        b = a - mem_w
        avail1[r] = b
        log.sched(t_we + 0.11 * k + rng.uniform(0, 0.08), r,
                  f"Load weight end. elapsed={t_we - t_w + 0.11 * k:.2f} s, type=LlamaForCausalLM, "
                  f"dtype=torch.bfloat16, avail mem={b:.2f} GB, mem usage={mem_w:.2f} GB.")
    # --- symmetric memory pool (first use JIT-builds the allocator plugin on TP0; the others wait, then load)
    t_p = t_we + 1.2
    for k, r in enumerate(dist_order):
        log.sched(t_p + 0.01 * k, r, "Pre-allocating symmetric memory pool with 4 GiB")
    torch_inc = "/usr/local/lib/python3.12/dist-packages/torch/include"
    jit = [
        "Emitting ninja build file /tmp/symm_allocator/build.ninja...",
        "Building extension module nccl_allocator...",
        "Allowing ninja to set a default number of workers... (overridable by setting the environment variable MAX_JOBS=N)",
        "[1/2] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=nccl_allocator -DTORCH_API_INCLUDE_EXTENSION_H "
        f"-isystem {torch_inc} -isystem {torch_inc}/torch/csrc/api/include -isystem /usr/local/cuda/include "
        "-isystem /usr/include/python3.12 -fPIC -std=c++20 "
        "-I/usr/local/lib/python3.12/dist-packages/nvidia/nccl/include -c /tmp/symm_allocator/main.cpp -o main.o",
        "[2/2] c++ main.o -shared -L/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib -lnccl "
        "-L/usr/local/lib/python3.12/dist-packages/torch/lib -lc10 -lc10_cuda -ltorch_cpu -ltorch_cuda -ltorch "
        "-ltorch_python -L/usr/local/cuda/lib64 -lcudart -o nccl_allocator.so",
    ]
    tj = t_p + 0.3
    for i, line in enumerate(jit):
        tj += [0.01, 0.02, 0.01, 21.7, 1.9][i]
        log.raw(tj, line)
    tj += 0.2
    load_order = order[:]
    rng.shuffle(load_order)
    for k, _ in enumerate(load_order):
        log.raw(tj + 0.03 * k, "Loading extension module nccl_allocator...")
    # --- KV pool, graphs
    t_m = tj + 1.9
    avail2 = {}
    for k, r in enumerate(dist_order):
        avail2[r] = avail1[r] - 4.29 - 41.92 - rng.uniform(0.0, 0.3)
        log.sched(t_m + 0.03 * k, r, f"Memory pool end. avail mem={avail2[r]:.2f} GB")
    t_c = t_m + 0.7
    bs_list = ", ".join(str(b) for b in CUDA_GRAPH_BS)
    for k, r in enumerate(dist_order):
        log.sched(t_c + 0.02 * k, r, f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
                                     f"bs=[{bs_list}], avail mem={avail2[r] - 0.06:.2f} GB")
    t_ce = t_c + 19.6
    final_avail = {}
    for k, r in enumerate(dist_order):
        use = rng.uniform(1.11, 1.29)
        final_avail[r] = avail2[r] - 0.06 - use
        log.sched(t_ce + 0.02 * k, r, f"Capture target decode CUDA graph end. elapsed={19.6 + 0.02 * k:.2f} s, "
                                      f"mem usage={use:.2f} GB, avail mem={final_avail[r]:.2f} GB.")
    t_r = t_ce + 0.9
    log.sched(t_r, 0, f"max_total_num_tokens={MAX_TOTAL}, chunked_prefill_size={CHUNKED_PREFILL}, "
                      f"max_prefill_tokens={MAX_PREFILL}, max_running_requests={MAX_RUNNING}, "
                      f"context_len={CONTEXT_LEN}, available_gpu_mem={final_avail[0]:.2f} GB")
    # --- HTTP server and warmup
    t_u = t_r + 1.4
    log.main(t_u, f"INFO:     Started server process [{MAIN_PID}]")
    log.main(t_u + 0.001, "INFO:     Waiting for application startup.")
    log.main(t_u + 0.002, "INFO:     Application startup complete.")
    log.main(t_u + 0.003, "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    return t_u


# ----------------------------------------------------------------------------- py-spy bodies
LIBS = {  # offsets of the frames we print as bare addresses
    "nccl_sym_import": 0x1B62A9,
    "ffi_tramp": 0x7D56,
    "libc_main": 0x2A1CA,
    "libc_start_thread": 0x9CA94,
    "libc_clone3": 0x129C3C,
}


@dataclass
class RankProc:
    rank: int
    pid: int
    comm: int
    tid_tmon: int
    tid_wd: int
    nccl_base: int
    ffi_base: int
    libc_base: int
    sp_addr: int


def lib_base(rng: random.Random) -> int:
    """A page-aligned mmap address in the usual x86-64 user range (0x7fxx_xxxx_x000)."""
    return 0x7F0000000000 + (rng.randrange(0x100, 0xFFF) << 28) + (rng.randrange(0x100, 0xFFFF) << 12)


def mk_rankprocs(rng: random.Random, comms: list[int]) -> list[RankProc]:
    procs = []
    for r in range(TP):
        pid = SCHED_PIDS[r]
        procs.append(RankProc(
            rank=r, pid=pid, comm=comms[r],
            tid_tmon=pid + 611 + rng.randint(0, 40),
            tid_wd=pid + 1290 + rng.randint(0, 60),
            nccl_base=lib_base(rng),
            ffi_base=lib_base(rng),
            libc_base=lib_base(rng),
            sp_addr=lib_base(rng) + rng.randrange(0x10000, 0xFFFFF) * 0x10,
        ))
    return procs


PY_MAIN_FRAMES = [
    ("_register_segments_for_comm", "sglang/srt/distributed/device_communicators/pynccl_allocator.py", 417),
    ("SymmetricMemoryContext.__exit__", "sglang/srt/distributed/device_communicators/pynccl_allocator.py", 388),
    ("RowParallelLinear.forward", "sglang/srt/layers/linear.py", 1418),
    ("Module._call_impl", "torch/nn/modules/module.py", 1786),
    ("Module._wrapped_call_impl", "torch/nn/modules/module.py", 1775),
    ("LlamaAttention.forward", "sglang/srt/models/llama.py", 213),
    ("Module._call_impl", "torch/nn/modules/module.py", 1786),
    ("Module._wrapped_call_impl", "torch/nn/modules/module.py", 1775),
    ("LlamaDecoderLayer.forward", "sglang/srt/models/llama.py", 318),
    ("Module._call_impl", "torch/nn/modules/module.py", 1786),
    ("Module._wrapped_call_impl", "torch/nn/modules/module.py", 1775),
    ("LlamaModel.forward", "sglang/srt/models/llama.py", 452),
    ("Module._call_impl", "torch/nn/modules/module.py", 1786),
    ("Module._wrapped_call_impl", "torch/nn/modules/module.py", 1775),
    ("LlamaForCausalLM.forward", "sglang/srt/models/llama.py", 541),
    ("decorate_context", "torch/utils/_contextlib.py", 120),
    ("ModelRunner.forward_extend", "sglang/srt/model_executor/model_runner.py", 2284),
    ("ModelRunner._forward_raw", "sglang/srt/model_executor/model_runner.py", 2709),
    ("ModelRunner.forward", "sglang/srt/model_executor/model_runner.py", 2611),
    ("TpModelWorker.forward_batch_generation", "sglang/srt/managers/tp_worker.py", 421),
    ("Scheduler.run_batch", "sglang/srt/managers/scheduler.py", 2347),
    ("Scheduler.event_loop_overlap", "sglang/srt/managers/scheduler.py", 1226),
    ("decorate_context", "torch/utils/_contextlib.py", 120),
    ("run_scheduler_process", "sglang/srt/managers/scheduler.py", 3528),
    ("BaseProcess.run", "multiprocessing/process.py", 108),
    ("BaseProcess._bootstrap", "multiprocessing/process.py", 314),
    ("_main", "multiprocessing/spawn.py", 135),
    ("spawn_main", "multiprocessing/spawn.py", 122),
    ("<module>", "<string>", 1),
]


def capture_manifest(procs: list[RankProc], captures: list[tuple[str, int, float]]) -> str:
    """A capture manifest (format hangforensics-capture 1) dating the operator's py-spy dumps: one round per
    dump, on the log's clock (the host's wall clock, written with its zone as capture writes it)."""
    def iso(t: float) -> str:
        return (T0 + timedelta(seconds=t)).isoformat(timespec="microseconds") + "+00:00"

    first, last = captures[0][2], captures[-1][2]
    rounds, processes = [], []
    for k, (name, rank, t) in enumerate(captures, start=1):
        p = procs[rank]
        processes.append({"pid": p.pid, "ppid": None, "title": f"sglang::scheduler_TP{rank}", "role": "scheduler",
                          "rank": f"TP{rank}", "label": f"TP{rank}", "exe": "/usr/bin/python3.12", "python": True,
                          "create_time": None, "state": None, "cpu_user_s": None, "cpu_system_s": None,
                          "wchan": None, "threads": None})
        rounds.append({"index": k, "started": iso(t - 0.6), "finished": iso(t), "proc_file": None,
                       "dumps": [{"round": k, "pid": p.pid, "label": f"TP{rank}", "rank": f"TP{rank}",
                                  "role": "scheduler", "ok": True, "file": name, "error_file": None,
                                  "start": iso(t - 0.6), "end": iso(t), "native": False}],
                       "facts": []})
    doc = {
        "format": "hangforensics-capture", "format_version": 1, "engine": "seed-incident",
        "host": {"hostname": "gpu-node-07", "kernel": "6.8.0-51-generic", "machine": "x86_64", "euid": 0,
                 "ptrace_scope": "1"},
        "command": ["py-spy", "dump", "--pid", "(each rank, by hand)"], "hangforensics_version": "",
        "started": iso(first - 0.6), "finished": iso(last),
        "target": {"selector": "pid", "value": None, "root_pid": procs[0].pid, "family": "sglang"},
        "options": {"native": False, "repeat": len(captures), "interval_s": round(last - first, 1),
                    "timeout_s": 120.0, "log_lines": 0},
        "tools": [{"name": "py-spy", "version": "0.4.0", "path": "/usr/local/bin/py-spy", "note": None}],
        "processes": processes, "rounds": rounds, "gpu_file": None, "logs": [], "failures": [], "skipped": [],
    }
    return json.dumps(doc, indent=2) + "\n"


def pyspy_body(p: RankProc, native: bool, watchdog_dumping: bool) -> str:
    L = [f"Process {p.pid}: sglang::scheduler_TP{p.rank}", "Python v3.12.3 (/usr/bin/python3.12)", "",
         f'Thread {p.pid} (idle): "MainThread"']
    if native:
        L += [
            "    recvmsg (libc.so.6)",
            "    ncclIpcSocketRecvMsg (libnccl.so.2)",
            "    ncclProxyCallBlockingUDS (libnccl.so.2)",
            "    ncclProxyClientGetFdBlocking (libnccl.so.2)",
            f"    {p.nccl_base + LIBS['nccl_sym_import']:#x} (libnccl.so.2)",
            "    ncclCommWindowRegister (libnccl.so.2)",
            "    nccl_allocator_register_segments_with_comm (nccl_allocator.so)",
            f"    {p.ffi_base + LIBS['ffi_tramp']:#x} (libffi.so.8)",
            "    ffi_call (libffi.so.8)",
            "    _ctypes_callproc (_ctypes.cpython-312-x86_64-linux-gnu.so)",
            "    PyCFuncPtr_call (_ctypes.cpython-312-x86_64-linux-gnu.so)",
        ]
    L += [f"    {fn} ({f}:{ln})" for fn, f, ln in PY_MAIN_FRAMES]
    if native:
        L.append(f"    {p.libc_base + LIBS['libc_main']:#x} (libc.so.6)")
    tail = [f"    {p.libc_base + LIBS['libc_start_thread']:#x} (libc.so.6)",
            f"    {p.libc_base + LIBS['libc_clone3']:#x} (libc.so.6)"] if native else []
    # tqdm's monitor thread (left over from the weight-loading progress bar)
    L.append(f'Thread {p.tid_tmon} (idle): "Thread-1"')
    if native:
        L += [f"    {p.libc_base + 0x98D71:#x} (libc.so.6)", f"    {p.libc_base + 0x9B2BE:#x} (libc.so.6)",
              "    PyThread_acquire_lock_timed (python3.12)"]
    L += ["    Condition.wait (threading.py:359)", "    Event.wait (threading.py:655)",
          "    TMonitor.run (tqdm/_monitor.py:60)", "    Thread._bootstrap_inner (threading.py:1073)",
          "    Thread._bootstrap (threading.py:1030)"] + tail
    L.append(f'Thread {p.tid_wd} (idle): "Thread-3 (_watchdog_thread)"')
    if watchdog_dumping:
        if native:
            L.append("    poll (libc.so.6)")
        L += ["    _PollLikeSelector.select (selectors.py:415)",
              "    Popen._communicate (subprocess.py:2115)",
              "    Popen.communicate (subprocess.py:1209)",
              "    run (subprocess.py:550)",
              "    _run_pyspy (sglang/srt/utils/cudacore_pyspy_dump_utils.py:58)",
              "    pyspy_dump_schedulers (sglang/srt/utils/cudacore_pyspy_dump_utils.py:97)",
              "    WatchdogRaw._watchdog_once (sglang/srt/utils/watchdog.py:152)",
              "    WatchdogRaw._watchdog_thread (sglang/srt/utils/watchdog.py:126)"]
    else:
        if native:
            L += ["    clock_nanosleep (libc.so.6)", "    0x5b1f4e (python3.12)"]
        L += ["    WatchdogRaw._watchdog_thread (sglang/srt/utils/watchdog.py:119)"]
    L += ["    Thread.run (threading.py:1010)", "    Thread._bootstrap_inner (threading.py:1073)",
          "    Thread._bootstrap (threading.py:1030)"] + tail
    return "\n".join(L) + "\n"


def req_repr(r: Req, sp_addr: int) -> str:
    rr = random.Random(r.rid)
    if r.prefix is None:
        ids = [BOS, SH, ROLE_USER, EH, NL2] + token_ids(rr, r.prompt_len - 10) + [EOT, SH, ROLE_ASSISTANT, EH, NL2]
    else:
        pr = random.Random(r.prefix)
        ids = [BOS, SH, ROLE_SYSTEM, EH, NL2] + token_ids(pr, r.prefix_len - 5) + token_ids(rr, r.prompt_len - r.prefix_len)
    out = token_ids(random.Random(r.rid + ":out"), r.out)
    assert len(ids) == r.prompt_len
    return (f"Req(rid={r.rid}, input_ids={ids}, output_ids={out}, self.grammar=None, "
            f"self.sampling_params=<sglang.srt.sampling.sampling_params.SamplingParams object at {sp_addr:#x}>)")


# ----------------------------------------------------------------------------- main build
def build(out_dir: Path) -> dict:
    rng = random.Random(SEED)
    log = Log()
    ports = Ports(random.Random(SEED + 1))
    comms = [comm_ptr(rng) for _ in range(TP)]
    procs = mk_rankprocs(rng, comms)

    t_u = startup(log, rng, comms)
    # warmup, probes during warmup, ready
    log.access(t_u + 0.9, "127.0.0.1", ports.next("127.0.0.1"), "GET", "/get_model_info")
    log.sched(t_u + 1.2, 0, "Prefill batch, #new-seq: 1, #new-token: 9, #cached-token: 0, token usage: 0.00, "
                            "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
                            "input throughput (token/s): 0.00")
    log.access(t_u + 1.5, "127.0.0.1", ports.next("127.0.0.1"), "POST", "/generate")
    t_ready = t_u + 1.6
    log.main(t_ready, "The server is fired up and ready to roll!")
    assert t_ready < TRAFFIC_START - 3.0, t_ready

    # ---- requests
    reqs = gen_normal_requests(rng, TRAFFIC_START, TRAFFIC_END)
    burst = gen_burst_requests(rng)
    late = gen_normal_requests(rng, NORMAL_RESUME, NORMAL_RESUME + 400.0, scale=0.8)
    for r in reqs + burst + late:
        r.port = ports.next(r.client)
    hang, pending = simulate(log, rng, reqs + burst + late)

    onset = hang.last_batch_t
    onset_s = math.floor(onset)
    fire_s = onset_s + WATCHDOG_AFTER
    sigquit_t = fire_s + 5.4
    end_t = sigquit_t + 0.01

    # ---- access lines of requests that arrive (streaming: at arrival; non-streaming: at completion)
    all_reqs = reqs + burst + late
    for r in all_reqs:
        if r.t_arr > end_t:
            continue
        if r.stream:
            log.access(r.t_arr + rng.uniform(0.002, 0.009), r.client, r.port, "POST", r.path)

    # ---- after the hang: clients time out and retry; disconnected /generate callers are logged by the tokenizer
    hung_ids = {id(r) for r in pending}
    retries = []
    for r in all_reqs:
        if id(r) not in hung_ids or r.t_arr > end_t:
            continue
        timeout = 120.0 if r.kind == "burst" else 60.0
        t_retry = r.t_arr
        for _ in range(2):
            t_retry = t_retry + timeout + rng.uniform(0.05, 1.5)
            if t_retry >= end_t:
                break
            if r.stream:
                log.access(t_retry, r.client, ports.next(r.client), "POST", r.path)
            else:
                retries.append(t_retry)
        if not r.stream:
            t_dc = r.t_arr + 60.0 + rng.uniform(0.3, 4.0)
            if t_dc < end_t:
                log.main(t_dc, "[http_server] Error: Request is disconnected from the client side (type 1). "
                               f"Abort request obj.rid='{r.rid}'")
    for t_retry in retries:  # retried /generate calls hang as well: no access line, only their disconnect later
        t_dc = t_retry + 60.0 + rng.uniform(0.3, 4.0)
        if t_dc < end_t:
            log.main(t_dc, "[http_server] Error: Request is disconnected from the client side (type 1). "
                           f"Abort request obj.rid='{make_rid(rng)}'")

    # ---- probes: /health every 10 s (LB), /metrics every 15 s, /server_info every 60 s until it hangs
    health_ts = []
    t = t_u + 0.37
    first = True
    while t < end_t:
        if first:
            log.access(t, LB_IP, ports.next(LB_IP), "GET", "/health", "503 Service Unavailable")
            first = False
        elif t < sigquit_t:
            log.access(t, LB_IP, ports.next(LB_IP), "GET", "/health")
            health_ts.append(t)
        t += 10.0 + rng.uniform(-0.01, 0.01)
    t = t_ready + 6.81
    while t < sigquit_t:
        log.access(t, PROM_IP, ports.next(PROM_IP), "GET", "/metrics")
        t += 15.0 + rng.uniform(-0.02, 0.02)
    t = t_ready + 31.2
    while t < onset:
        log.access(t + 0.004, DASH_IP, ports.next(DASH_IP), "GET", "/server_info")
        t += 60.0 + rng.uniform(-0.05, 0.05)

    # ---- the watchdog fires on every rank in the same second
    batch_reqs = hang.running + hang.batch
    shortfall = sum(r.held() for r in batch_reqs)
    evictable = hang.evictable
    available = MAX_TOTAL - evictable - shortfall
    dbg_order = list(range(TP))
    rng.shuffle(dbg_order)
    tw = fire_s + 0.012
    for r in dbg_order:
        p = procs[r]
        reqs_txt = ", ".join(req_repr(q, p.sp_addr + 0x1A0 * i) for i, q in enumerate(batch_reqs))
        rec = "\n".join([
            f"[{stamp(tw)} TP{r}] Scheduler debug info:",
            f"symmetric-memory registration in progress: comm={p.comm} group=tp:0",
            f"scheduler.cur_batch_for_debug.batch_size()={len(batch_reqs)}",
            f"scheduler.cur_batch_for_debug.reqs=[{reqs_txt}]",
            f"[full] total={MAX_TOTAL}, available={available}, evictable={evictable}, protected=0, "
            f"session_held=0, uncached=0",
        ])
        log.raw(tw, rec)
        tw += rng.uniform(0.004, 0.02)
    spy_order = list(range(TP))
    rng.shuffle(spy_order)
    ts = fire_s + 0.35
    pending_timeouts: list[int] = []
    for k, r in enumerate(spy_order):
        p = procs[r]
        body = pyspy_body(p, native=True, watchdog_dumping=True)
        log.raw(ts, f"[{stamp(ts)} TP{r}] Pyspy dump for PID {p.pid} (py-spy dump --native --pid {p.pid}):\n{body}")
        ts += rng.uniform(0.01, 0.05)
        pending_timeouts.append(r)
        # a rank's timeout line sometimes lands after the next rank's dump
        if len(pending_timeouts) == 2 or k == len(spy_order) - 1 or rng.random() < 0.5:
            for q in pending_timeouts:
                log.raw(ts, f"[{stamp(ts)} TP{q}] Scheduler watchdog timeout "
                            f"(self.watchdog_timeout={WATCHDOG_TIMEOUT}, self.soft=False)\n\n")
                ts += rng.uniform(0.005, 0.02)
            pending_timeouts = []
    assert ts < fire_s + 1.0, "watchdog records must stay within one second"
    log.main(sigquit_t, "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=<frame at 0x7f5e1c3a2d40, "
                        "file '/usr/lib/python3.12/asyncio/runners.py', line 118, code run>. "
                        "It usually means one child failed.")
    log.main(sigquit_t + 0.002, "Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")

    lines = log.render()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "server.log").write_text("\n".join(lines) + "\n", encoding="utf-8", newline="\n")

    # ---- operator captures, ~1 min into the hang (plain py-spy, the watchdog thread is still sleeping)
    cap_dir = out_dir / "captures"
    if cap_dir.exists():
        shutil.rmtree(cap_dir)
    cap_dir.mkdir()
    captures = []
    for (rank, name), off in zip([(3, "tp3-pyspy-0412.txt"), (6, "scratch-b.txt")], CAPTURE_OFFSETS, strict=True):
        path = cap_dir / name
        path.write_text(pyspy_body(procs[rank], native=False, watchdog_dumping=False), encoding="utf-8",
                        newline="\n")
        t_cap = onset + off
        epoch = calendar.timegm((T0 + timedelta(seconds=t_cap)).timetuple())
        os.utime(path, (epoch, epoch))
        captures.append((name, rank, t_cap))
    # a clone's file times are the clone's: the captures are dated by a capture manifest beside them
    # (interface.md §3 "Dates", §6), the way `hangforensics capture` writes one
    (cap_dir / "manifest.json").write_text(capture_manifest(procs, captures), encoding="utf-8", newline="\n")

    # ---- facts for README / expected.json (read back from the rendered log)
    health_after = [h for h in health_ts if math.floor(h) > onset_s]
    facts = {
        "onset": onset, "onset_line": hang.last_batch_line, "fire_s": fire_s, "sigquit": sigquit_t,
        "first_health": health_after[0], "last_health": health_after[-1], "n_health": len(health_after),
        "batch_size": len(batch_reqs), "n_running": len(hang.running), "n_new": len(hang.batch),
        "new_tokens": hang.new_tokens, "prior_max_new": hang.prior_max_new,
        "running_tokens": sum(r.held() for r in hang.running),
        "last_decode_tokens": hang.last_decode_tokens, "last_decode_running": hang.last_decode_running,
        "steps_since_log": hang.steps_since_log,
        "shortfall": shortfall, "available": available, "evictable": evictable,
        "dbg_order": dbg_order, "captures": captures, "n_lines": len(lines),
        "burst_start": BURST_START, "traffic_end": TRAFFIC_END,
    }
    return facts


def check_log(out_dir: Path, facts: dict) -> None:
    """Read the log back and verify the facts the README states."""
    lines = (out_dir / "server.log").read_text(encoding="utf-8").split("\n")
    batch = [ln for ln in lines if " TP0] Prefill batch," in ln or " TP0] Decode batch," in ln]
    assert batch[-1].endswith(facts["onset_line"]) and batch[-1].startswith(f"[{stamp(facts['onset'])} TP0]")
    assert "#running-req: 0," not in batch[-1]
    # no POST between the end of the morning traffic and the burst: a true idle gap
    idle_from, idle_to = stamp(facts["traffic_end"] + 60), stamp(facts["burst_start"] - 1)
    for ln in lines:
        if ln[1:20] > idle_from and ln[1:20] < idle_to:
            assert '"POST' not in ln and " batch," not in ln, ln
    wd = [ln for ln in lines if "Scheduler watchdog timeout" in ln]
    assert len(wd) == TP and len({ln[1:20] for ln in wd}) == 1 and wd[0][1:20] == stamp(facts["fire_s"])
    assert not any("/get_server_info" in ln for ln in lines)
    onset_s = stamp(facts["onset"])
    after = [ln for ln in lines if ln[:1] == "[" and ln[1:20] > onset_s]
    assert not any(" batch," in ln for ln in after)
    assert any('"POST /v1/chat/completions' in ln for ln in after)
    assert facts["fire_s"] - math.floor(facts["onset"]) in range(300, 331)
    assert facts["new_tokens"] > facts["prior_max_new"]


def write_docs(out_dir: Path, facts: dict) -> None:
    onset, fire = facts["onset"], facts["fire_s"]
    fh, lh = facts["first_health"], facts["last_health"]
    blind_min = (math.floor(lh) - math.floor(onset)) / 60.0
    all_ranks = [f"TP{r}" for r in range(TP)]
    wd_ranks = [f"TP{r}" for r in facts["dbg_order"]]
    expected = {
        "engines": {
            ENGINE: {
                "scenario": "symm-mem-deadlock",
                "expect": [
                    {"rule": "stall-onset", "ts": iso(onset), "ts_end": None, "ranks": all_ranks,
                     "signature": None, "ranks_alt": [["TP0"]],
                     "why": "last batch line (TP0, #running-req > 0); POSTs keep arriving, every watchdog fires"},
                    {"rule": "all-ranks-frozen", "ts": iso(onset), "ts_end": iso(onset), "ranks": all_ranks,
                     "signature": None, "ranks_alt": [["TP0"]],
                     "why": "all 8 watchdogs fire in the same second: the ranks froze together at the last progress"},
                    {"rule": "watchdog-kill", "ts": iso(fire), "ts_end": None, "ranks": wd_ranks,
                     "signature": None, "why": "hard scheduler watchdog fired on every rank, then SIGQUIT"},
                    {"rule": "busy-leak-report", "ts": iso(fire), "ts_end": None, "ranks": wd_ranks,
                     "signature": None,
                     "why": "pool text inside the watchdog dump: the shortfall is the in-flight batch's own KV"},
                    {"rule": "known-signature", "ts": None, "ts_end": None, "ranks": [],
                     "signature": "symm-mem-window-register",
                     "why": "every MainThread blocked in ncclCommWindowRegister -> recvmsg under "
                            "_register_segments_for_comm; 'symmetric-memory registration in progress'"},
                    {"rule": "health-check-blind", "ts": iso(fh), "ts_end": iso(lh), "ranks": [],
                     "signature": None, "why": "/health kept answering 200 after the stall"},
                ],
                "allow": [],
                "forbid": ["first-rank-stopped", "idle-memory-leak", "collective-desync"],
            }
        }
    }
    (out_dir / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8", newline="\n")

    caps = "\n".join(
        f"| `captures/{name}` | operator `py-spy dump --pid {SCHED_PIDS[rank]}` (plain) of TP{rank}, taken at "
        f"{stamp(t)} (onset + {t - onset:.0f} s), dated by `captures/manifest.json` |"
        for name, rank, t in facts["captures"]) + (
        "\n| `captures/manifest.json` | a capture manifest (as `hangforensics capture` writes one) saying when "
        "each dump was taken: a clone's file times are the clone's, so the dumps are dated by it, not by "
        "their modification times |")
    finished = facts["last_decode_running"] - facts["n_running"]
    since = (f"{facts['steps_since_log']} decode steps after the last Decode line, which counted "
             f"{facts['last_decode_running']} requests / {facts['last_decode_tokens']} tokens"
             + (f"; {finished} of them had finished since" if finished else ""))
    readme = f"""# seed-incident: symmetric-memory registration deadlock (all ranks freeze together)

Sample evidence bundled with hangforensics. It reproduces the seed incident
(`shared/reference/incidents.md` §1, SGLang issue #36943): an SGLang 0.5.23 engine
(`{MODEL}`, `--tp 8 --enable-symm-mem`, NCCL 2.29.7, 8x H100) on which every
TP rank blocks for ever inside NCCL window registration (`ncclCommWindowRegister`
-> fd exchange over a Unix socket -> `recvmsg`), called from the forward pass
when a burst after an idle gap grows the symmetric-memory pool.

Everything here is **synthetic**, written by `examples/make_seed_incident.py`
(stdlib only, fixed seed; re-running it gives byte-identical files). The line
formats follow `shared/reference/sglang-formats.md` (0.5.23 prefixes, batch
templates, watchdog dump, pool text, uvicorn access lines) and the py-spy
grammar in `shared/formats/README.md`. Regenerate with:

    python3 examples/make_seed_incident.py

## Files

| file | what it is |
| --- | --- |
| `server.log` | combined stdout/stderr of the engine: launch wrapper (`set -x`), main process, 8 scheduler ranks, NCCL INFO and torch JIT noise, uvicorn access lines ({facts['n_lines']} lines) |
{caps}
| `expected.json` | the findings a correct analysis produces, in the format of `shared/examples/truth.json` |

The capture file names carry no meaning; the rank is in the dump's first line
(`Process <pid>: sglang::scheduler_TP<n>`).

## Story (log clock: local time, no zone)

- {stamp(0)}: launch. `server_args` shows `tp_size=8`, `enable_symm_mem=True`,
  `watchdog_timeout=300`, `enable_mixed_chunk=True`; the wrapper exports
  `SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0`. Every rank pre-allocates the
  4 GiB symmetric-memory pool; TP0 JIT-builds the `nccl_allocator` plugin.
- ~{stamp(TRAFFIC_START)} to ~{stamp(facts['traffic_end'])}: interactive traffic (streaming
  `/v1/chat/completions` from two gateways, non-streaming `/generate` from a RAG
  service), `/health` every 10 s from the load balancer, `/metrics` every 15 s,
  `/server_info` every 60 s from a dashboard.
- Then about {(facts['burst_start'] - facts['traffic_end']) / 60:.1f} minutes of idle: no POST and no batch line, only probes.
  This gap is **idle, not a hang**.
- {stamp(facts['burst_start'])}: a batch job starts (client `{BATCH_IP}`), fanning out waves of
  streaming chat requests.
- **{stamp(onset)}: last batch line (stall onset)**, from TP0:
  `{facts['onset_line']}`.
  The next batch is a mixed extend batch of {facts['n_new']} new prompts ({facts['new_tokens']} new tokens,
  the largest extend of the run; the previous maximum was {facts['prior_max_new']}) plus the
  {facts['n_running']} running requests. It grows the symmetric-memory pool and every rank
  enters window registration. No line is logged by anyone: no error, no NCCL WARN,
  no torch watchdog message.
- After the onset only the main process speaks: streaming POSTs keep arriving
  and get `200 OK` (the access line is written when the SSE stream starts),
  clients retry after their timeouts, the non-streaming `/generate` callers get
  no access line at all and show up only as `[http_server] Error: Request is
  disconnected from the client side (type 1)` when they give up, `/server_info`
  stops appearing, `/get_server_info` never appears, and **`/health` keeps
  answering `200 OK`** (first after the onset: **{stamp(fh)}**, last: **{stamp(lh)}**,
  {facts['n_health']} probes).
- **{stamp(fire)}: every rank's hard scheduler watchdog fires in the same second**
  ({WATCHDOG_AFTER} s after the last batch line). For each of TP0..TP7, in interleaved order:
  `Scheduler debug info:` with `symmetric-memory registration in progress: comm=<ptr> group=tp:0`,
  the in-flight batch (`batch_size()={facts['batch_size']}` and its requests), and the pool text
  `[full] total={MAX_TOTAL}, available={facts['available']}, evictable={facts['evictable']}, protected=0, session_held=0, uncached=0`;
  then `Pyspy dump for PID ... (py-spy dump --native ...)` with MainThread in
  `recvmsg` <- `ncclIpcSocketRecvMsg` <- `ncclProxyCallBlockingUDS` <-
  `ncclProxyClientGetFdBlocking` <- ... <- `ncclCommWindowRegister` <-
  `nccl_allocator_register_segments_with_comm` <- `_register_segments_for_comm`
  <- `SymmetricMemoryContext.__exit__` <- `RowParallelLinear.forward` <- ... <-
  `Scheduler.event_loop_overlap`; then `Scheduler watchdog timeout
  (self.watchdog_timeout=300, self.soft=False)`.
- {stamp(facts['sigquit'])}: the main process logs `SIGQUIT received. ... It usually means one
  child failed.` and `Sleeping 5 seconds before crash diagnostics ...`; the log
  ends there (the orchestrator restarted the container).

## Key timestamps

| what | when |
| --- | --- |
| last batch line = stall onset | {stamp(onset)} |
| first `/health` 200 after the onset | {stamp(fh)} |
| last `/health` 200 | {stamp(lh)} |
| watchdog fires (all 8 ranks, same second) | {stamp(fire)} |
| SIGQUIT in the main process | {stamp(facts['sigquit'])} |

## What a correct analysis concludes

1. **Stall onset at {stamp(onset)}**: forward progress stopped with work pending
   (the last line has `#running-req` > 0, POSTs keep arriving, the watchdog fires).
   The idle gap before the burst is not a stall.
2. **All 8 ranks froze within the same second**: only TP0 logs batch lines, but
   all eight watchdogs fired at {stamp(fire)}, and a watchdog is armed only
   with a batch in flight, so every rank stopped at the group's last progress
   ({stamp(onset)}). A shared deadlock, not one bad rank: no `first-rank-stopped`, and the
   stacks agree (same frame on every rank), so no `collective-desync`.
3. **`/health` was blind for {blind_min:.1f} minutes** ({stamp(fh)} to {stamp(lh)}):
   health-endpoint generation was disabled, so the probe never touched the
   scheduler and the load balancer kept routing to a dead replica.
4. **Watchdog kill at {stamp(fire)}**: hard watchdog (`self.soft=False`) on TP0..TP7, then SIGQUIT.
5. **The "leak" is a red herring**: the pool text in the dump is short by
   `{MAX_TOTAL} - {facts['available']} - {facts['evictable']} = {facts['shortfall']}` tokens, which is exactly the KV
   of the {facts['batch_size']} in-flight requests printed above it (sum of
   `len(input_ids) + len(output_ids)`: {facts['running_tokens']} for the {facts['n_running']} requests that were
   decoding, plus {facts['new_tokens']} for the {facts['n_new']} new prompts being prefilled). The hung batch came
   {since}. The check is valid only on an idle scheduler; no `idle-memory-leak`.
6. **Signature `symm-mem-window-register`**: MainThread blocked in
   `ncclCommWindowRegister` -> `recvmsg` under `_register_segments_for_comm` on
   every rank (watchdog dumps and both operator captures), and the 0.5.23 dump
   says `symmetric-memory registration in progress`.

`expected.json` encodes 1-6 (`known-signature` included) and forbids
`first-rank-stopped`, `idle-memory-leak` and `collective-desync`. Score a run with:

    hangforensics report examples/seed-incident --json /tmp/seed.json
    python3 ../shared/examples/score.py examples/seed-incident/expected.json /tmp/seed.json
"""
    (out_dir / "README.md").write_text(readme, encoding="utf-8", newline="\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / ENGINE))
    a = ap.parse_args()
    out = Path(a.out)
    facts = build(out)
    check_log(out, facts)
    write_docs(out, facts)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({facts['n_lines']} log lines, {size / 1e6:.2f} MB); onset {stamp(facts['onset'])}, "
          f"watchdog {stamp(facts['fire_s'])}, /health 200 {stamp(facts['first_health'])}..{stamp(facts['last_health'])}")


if __name__ == "__main__":
    main()
