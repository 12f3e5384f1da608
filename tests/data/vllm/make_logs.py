"""The vLLM test logs of this folder (run once to regenerate them; the logs are committed): python3 make_logs.py"""
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
R = random.Random(18)


class Log:
    def __init__(self, start):
        self.t0 = datetime.strptime(start, "%Y-%m-%d %H:%M:%S")
        self.rows = []   # (seconds, order, text)
        self.n = 0

    def at(self, s, text):
        self.n += 1
        self.rows.append((s, self.n, text))

    def hms(self, s, fmt="%m-%d %H:%M:%S"):
        return (self.t0 + timedelta(seconds=s)).strftime(fmt)

    def write(self, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for _, _, t in sorted(self.rows):
            lines.extend(t.split("\n"))
        path.write_text("\n".join(lines) + "\n")


def v1(log, s, tag, lvl, src, msg):
    log.at(s, f"{tag}{lvl} {log.hms(s)} [{src}] {msg}")


def v0(log, s, tag, lvl, src, msg, brackets=False):
    where = f"[{src}]" if brackets else f"{src}]"
    log.at(s, f"{tag}{lvl} {log.hms(s)} {where} {msg}")


def access(log, s, tag, client, method, path, status=200):
    reason = {200: "OK", 503: "Service Unavailable"}[status]
    log.at(s, f'{tag}INFO:     {client} - "{method} {path} HTTP/1.1" {status} {reason}')


def v1_stats(prefix, prompt, gen, running, waiting, kv, hit):
    return (f"{prefix}Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, "
            f"Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv:.1f}%, "
            f"Prefix cache hit rate: {hit:.1f}%")


def v0_stats(prompt, gen, running, pending, kv, swapped=0, cpu=0.0):
    return (f"Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} tokens/s, "
            f"Running: {running} reqs, Swapped: {swapped} reqs, Pending: {pending} reqs, GPU KV cache usage: "
            f"{kv:.1f}%, CPU KV cache usage: {cpu:.1f}%.")


API = "(APIServer pid=2817) "
CLIENTS = ["10.20.4.17", "10.20.9.3", "10.31.0.88"]
V1_CONFIG = ("model='meta-llama/Llama-3.1-70B-Instruct', speculative_config=None, tokenizer='meta-llama/"
             "Llama-3.1-70B-Instruct', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
             "trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, "
             "load_format=auto, tensor_parallel_size={tp}, pipeline_parallel_size=1, data_parallel_size={dp}, "
             "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
             "device_config=cuda, seed=0, served_model_name=llama-70b, enable_prefix_caching=True, "
             "chunked_prefill_enabled=True")


def v1_startup(log, s, tp=4, dp=1, interval=None, worker="VllmWorker TP{r}"):
    v1(log, s, API, "INFO", "api_server.py:1805", "vLLM API server version 0.10.1.1")
    args = "{'model_tag': 'meta-llama/Llama-3.1-70B-Instruct', 'host': '0.0.0.0', 'port': 8000, "
    args += f"'model': 'meta-llama/Llama-3.1-70B-Instruct', 'tensor_parallel_size': {tp}"
    args += f", 'data_parallel_size': {dp}}}" if dp > 1 else "}"
    v1(log, s, API, "INFO", "utils.py:326", f"non-default args: {args}")
    v1(log, s + 7, API, "INFO", "__init__.py:711", "Resolved architecture: LlamaForCausalLM")
    for d in range(dp):
        core = f"(EngineCore_DP{d} pid={3001 + d}) "
        v1(log, s + 12, core, "INFO", "core.py:654", "Waiting for init message from front-end.")
        v1(log, s + 12, core, "INFO", "core.py:73",
           f"Initializing a V1 LLM engine (v0.10.1.1) with config: {V1_CONFIG.format(tp=tp, dp=dp)}")
        for r in range(tp):
            w = f"({worker.format(r=r)} pid={3120 + 10 * d + r}) "
            v1(log, s + 29, w, "INFO", "parallel_state.py:1134",
               f"rank {r} in world size {tp} is assigned as DP rank {d}, PP rank 0, TP rank {r}, EP rank {r}")
        v1(log, s + 98, f"({worker.format(r=0)} pid={3120 + 10 * d}) ", "INFO", "gpu_model_runner.py:1953",
           "Model loading took 32.88 GiB and 62.1 seconds")
        v1(log, s + 116, core, "INFO", "core.py:214",
           "init engine (profile, create kv cache, warmup model) took 16.20 seconds")
    v1(log, s + 119, API, "INFO", "api_server.py:1611", "Starting vLLM API server 0 on http://0.0.0.0:8000")


def probes(log, a, b, every, tag=API, status=200, port0=40100):
    s = a
    while s < b:
        access(log, s + 0.5, tag, f"127.0.0.1:{port0 + int(s) % 900}", "GET", "/health", status)
        s += every


def posts(log, a, b, every, tag=API, jitter=True):
    s = a
    while s < b:
        path = R.choice(["/v1/chat/completions", "/v1/completions"])
        access(log, s + 0.3, tag, f"{R.choice(CLIENTS)}:{R.randint(30000, 60000)}", "POST", path)
        s += every * (R.uniform(0.5, 1.5) if jitter else 1)


# -- A. V1, healthy with idle gaps ------------------------------------------------------------------------
def healthy_idle():
    log = Log("2026-05-14 08:58:02")
    v1_startup(log, 0, tp=2)
    t = 128
    for busy_until, idle_until in ((430, 1000), (1280, 1720)):
        while t < busy_until:
            v1(log, t, API, "INFO", "loggers.py:123", v1_stats("Engine 000: ", R.uniform(0, 2400), R.uniform(700, 1300),
                                                               R.randint(12, 30), R.randint(0, 3), R.uniform(30, 60),
                                                               R.uniform(10, 50)))
            t += 10
        v1(log, t, API, "INFO", "loggers.py:123", v1_stats("Engine 000: ", 0, 214.7, 0, 0, 0.4, 31.2))
        v1(log, t + 10, API, "INFO", "loggers.py:123", v1_stats("Engine 000: ", 0, 0, 0, 0, 0.0, 31.2))
        t = idle_until
    posts(log, 125, 420, 4)
    posts(log, 1000, 1270, 4)
    probes(log, 121, 1720, 15)
    log.write(OUT / "v1-healthy-idle" / "server.log")


# -- B. V1, slow engine with long prompts ----------------------------------------------------------------
def slow_long_prompt():
    log = Log("2026-05-15 13:00:00")
    v1_startup(log, 0, tp=8)
    t = 130
    prefill = 0
    while t < 1500:
        if prefill:
            gen, prompt = 0.0, R.uniform(8000, 14000)
            prefill -= 1
        else:
            gen, prompt = R.uniform(0.8, 4.5), R.uniform(3000, 9000)
            if R.random() < 0.15:
                prefill = R.randint(1, 3)
        v1(log, t, API, "INFO", "loggers.py:123",
           v1_stats("Engine 000: ", prompt, gen, R.randint(2, 3), R.randint(3, 5), R.uniform(70, 88), 2.0))
        t += 10
    # the evidence ends inside a long prefill: prompt throughput only
    for k in range(2):
        v1(log, t + 10 * k, API, "INFO", "loggers.py:123",
           v1_stats("Engine 000: ", 11234.5, 0.0, 3, 4, 86.2, 2.0))
    posts(log, 125, t + 15, 20)
    probes(log, 121, t + 16, 10)
    log.write(OUT / "v1-slow-long-prompt" / "server.log")


# -- C. V0 (bracket-less 0.6 format), idle with worker shm warnings --------------------------------------
def v0_idle():
    log = Log("2026-10-17 09:58:01")
    v0(log, 0, "", "INFO", "api_server.py:528", "vLLM API server version 0.6.3.post1")
    v0(log, 0, "", "INFO", "api_server.py:529", "args: Namespace(host=None, port=8000, model='Qwen/Qwen2.5-32B-Instruct', "
                                                "tensor_parallel_size=2, disable_log_requests=False)")
    v0(log, 3, "", "INFO", "llm_engine.py:237", "Initializing an LLM engine (v0.6.3.post1) with config: model='Qwen/"
                                                "Qwen2.5-32B-Instruct', tensor_parallel_size=2, pipeline_parallel_size=1")
    v0(log, 9, "(VllmWorkerProcess pid=4410) ", "INFO", "multiproc_worker_utils.py:215", "Worker ready; awaiting tasks")
    v0(log, 118, "", "INFO", "launcher.py:19", "Available routes are:")
    t = 122
    rid = 0
    while t < 480:
        for _ in range(R.randint(1, 3)):
            rid += 1
            s = t + R.uniform(0, 9)
            v0(log, s, "", "INFO", "logger.py:37", f"Received request chat-{rid:04x}: prompt: '<|im_start|>user\\n"
               f"Summarise ticket {rid}<|im_end|>', params: SamplingParams(n=1, temperature=0.7, max_tokens=512), "
               f"prompt_token_ids: [151644, 872, 198, {1000 + rid}], lora_request: None, prompt_adapter_request: None.")
            v0(log, s, "", "INFO", "engine.py:290", f"Added request chat-{rid:04x}.")
            access(log, s + 0.1, "", f"{R.choice(CLIENTS)}:{R.randint(30000, 60000)}", "POST", "/v1/chat/completions")
            v0(log, s + 7, "", "INFO", "engine.py:267", f"Finished request chat-{rid:04x}.")
        v0(log, t + 9.9, "", "INFO", "metrics.py:345", v0_stats(R.uniform(100, 900), R.uniform(60, 240),
                                                                 R.randint(1, 6), 0, R.uniform(2, 9)))
        t += 10
    v0(log, t + 5, "", "INFO", "metrics.py:345", v0_stats(0, 31.4, 0, 0, 0.0))
    v0(log, t + 15, "", "INFO", "metrics.py:345", v0_stats(0, 0, 0, 0, 0.0))
    s = t + 60
    while s < 1900:
        v0(log, s, "(VllmWorkerProcess pid=4410) ", "INFO", "shm_broadcast.py:236", "No available block found in 60 second. ")
        s += 60
    probes(log, 120, 1900, 30, tag="")
    log.write(OUT / "v0-idle" / "server.log")


# -- D. V1 hung: stale stats, shm waits, /health 200, then an RPC timeout kills the engine core -----------
def v1_hung():
    log = Log("2026-05-16 11:10:00")
    v1_startup(log, 0, tp=4, worker="Worker_TP{r}")
    t = 125
    while t <= 635:
        v1(log, t, API, "INFO", "loggers.py:123",
           v1_stats("Engine 000: ", R.uniform(0, 3000), R.uniform(600, 1400), R.randint(30, 44), R.randint(20, 60),
                    R.uniform(85, 99), R.uniform(5, 50)))
        t += 5
    v1(log, 640, API, "INFO", "loggers.py:123", v1_stats("Engine 000: ", 0, 0, 41, 57, 99.4, 22.3))
    core = "(EngineCore_DP0 pid=3001) "
    for k in range(4):
        v1(log, 700 + 60 * k, core, "WARNING", "shm_broadcast.py:466",
           "No available shared memory broadcast block found in 60 seconds. This typically happens when some "
           "processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).")
    v1(log, 940, core, "ERROR", "dump_input.py:69",
       "Dumping input data for V1 LLM engine (v0.10.1.1) with config: model='meta-llama/Llama-3.1-70B-Instruct', "
       "tensor_parallel_size=4, ")
    v1(log, 940, core, "ERROR", "dump_input.py:76",
       "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[NewRequestData("
       "req_id=chatcmpl-5d2e,prompt_token_ids=[128000, 128006, 882, 128007, 271, 7927, 374, 279, 3488, 30],"
       "mm_inputs=[],sampling_params=SamplingParams(n=1, temperature=0.6, max_tokens=256),block_ids=([881, 882],),"
       "num_computed_tokens=0,lora_request=None)], scheduled_cached_reqs=CachedRequestData(req_ids=['chatcmpl-41aa'],"
       " resumed_from_preemption=[false], new_token_ids=[[9906, 1917]], new_block_ids=[[[883]]], "
       "num_computed_tokens=[1872]), num_scheduled_tokens={chatcmpl-5d2e: 10, chatcmpl-41aa: 1}, "
       "total_num_scheduled_tokens=11)")
    v1(log, 940, core, "ERROR", "core.py:710", "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
       '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 701, in run_engine_core\n'
       "    engine_core.run_busy_loop()\n"
       '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 264, in collective_rpc\n'
       '    raise TimeoutError(f"RPC call to {method} timed out.") from e\n'
       "TimeoutError: RPC call to execute_model timed out.")
    v1(log, 941, API, "ERROR", "async_llm.py:420",
       "AsyncLLM output_handler failed.\nTraceback (most recent call last):\n"
       "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.")
    posts(log, 121, 940, 3)
    probes(log, 120, 940, 10)
    probes(log, 941, 1020, 10, status=503)
    log.write(OUT / "v1-hung" / "server.log")


# -- E. V0 (bracketed 0.7 format) that hangs inside a step and goes quiet --------------------------------
def v0_quiet_hung():
    log = Log("2026-02-03 14:00:00")
    v0(log, 0, "", "INFO", "api_server.py:840", "vLLM API server version 0.7.3", True)
    v0(log, 3, "", "INFO", "llm_engine.py:234", "Initializing a V0 LLM engine (v0.7.3) with config: model='mistralai/"
       "Mixtral-8x7B-Instruct-v0.1', tensor_parallel_size=4, pipeline_parallel_size=1", True)
    for r in (1, 2, 3):
        v0(log, 9, f"(VllmWorkerProcess pid={5100 + r}) ", "INFO", "multiproc_worker_utils.py:229",
           "Worker ready; awaiting tasks", True)
    t = 120
    while t <= 700:
        v0(log, t, "", "INFO", "metrics.py:455", v0_stats(R.uniform(200, 2000), R.uniform(300, 700),
                                                          R.randint(20, 34), R.randint(0, 14), R.uniform(60, 90)), True)
        t += 10
    for rid, s in enumerate(range(121, 1300, 7), start=1):
        v0(log, s, "", "INFO", "engine.py:275", f"Added request cmpl-{rid:05d}-0.", True)
        access(log, s + 0.2, "", f"{R.choice(CLIENTS)}:{R.randint(30000, 60000)}", "POST", "/v1/completions")
    probes(log, 119, 1300, 10)
    log.write(OUT / "v0-quiet-hung" / "server.log")


# -- F. V1 data parallel: Engine 001 stops, Engine 000 serves on ------------------------------------------
def dp_one_stops():
    log = Log("2026-07-21 16:30:00")
    v1_startup(log, 0, tp=2, dp=2)
    t = 130
    while t <= 1320:
        v1(log, t, API, "INFO", "loggers.py:123",
           v1_stats("Engine 000: ", R.uniform(0, 2000), R.uniform(400, 900), R.randint(10, 24), R.randint(0, 4),
                    R.uniform(40, 70), R.uniform(10, 40)))
        if t <= 620:
            v1(log, t, API, "INFO", "loggers.py:123",
               v1_stats("Engine 001: ", R.uniform(0, 2000), R.uniform(400, 900), R.randint(10, 24), R.randint(0, 4),
                        R.uniform(40, 70), R.uniform(10, 40)))
        elif t == 630:
            v1(log, t, API, "INFO", "loggers.py:123", v1_stats("Engine 001: ", 0, 0, 19, 7, 66.1, 30.2))
        t += 10
    for k in range(10):
        v1(log, 690 + 60 * k, "(EngineCore_DP1 pid=3002) ", "WARNING", "shm_broadcast.py:466",
           "No available shared memory broadcast block found in 60 seconds. This typically happens when some "
           "processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).")
    posts(log, 121, 1325, 3)
    probes(log, 120, 1325, 15)
    log.write(OUT / "v1-dp-one-stops" / "server.log")


# -- G. V1 data parallel, aggregated stats line: both engine cores hang -----------------------------------
def dp_aggregated_hung():
    log = Log("2026-08-02 02:00:00")
    v1_startup(log, 0, tp=4, dp=2, worker="Worker_DP{r}_TP0")
    t = 130
    while t <= 900:
        v1(log, t, API, "INFO", "loggers.py:171",
           v1_stats("2 Engines Aggregated: ", R.uniform(0, 4000), R.uniform(1500, 2600), R.randint(40, 64),
                    R.randint(0, 10), R.uniform(50, 80), R.uniform(10, 40)))
        t += 10
    v1(log, 910, API, "INFO", "loggers.py:171", v1_stats("2 Engines Aggregated: ", 0, 0, 58, 12, 79.5, 31.0))
    for d in (0, 1):
        for k in range(5):
            v1(log, 970 + 60 * k + d, f"(EngineCore_DP{d} pid={3001 + d}) ", "WARNING", "shm_broadcast.py:466",
               "No available shared memory broadcast block found in 60 seconds. This typically happens when some "
               "processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache "
               "quantization).")
    posts(log, 121, 1260, 5)
    probes(log, 120, 1260, 20)
    log.write(OUT / "v1-dp-aggregated-hung" / "server.log")


for f in (healthy_idle, slow_long_prompt, v0_idle, v1_hung, v0_quiet_hung, dp_one_stops, dp_aggregated_hung):
    f()
