"""The line formats of an SGLang server log and what is mixed into it (torch glog, NCCL debug, vLLM,
uvicorn): polars / Rust regex syntax, one table per record family.  Formats:
../shared/reference/sglang-formats.md."""

from __future__ import annotations

from ..torch_jobs.torch_job import C10D_ERROR, CHILD_FAILED, ELASTIC, RANK_TRACEBACK, WORKER_FAILED
from ..torch_jobs.train_steps import STEP_LINE
from ..vllm.vllm_patterns import VLLM_LINE

# -- line prefixes ("envelopes" of the payload: SGLang, glog, NCCL debug, vLLM, uvicorn) --------
# torch before 2.3 prints no time: '[rank2]:[E ProcessGroupNCCL.cpp:523] ...', '[E ProcessGroupNCCL.cpp:475] ...'
GLOG = (
    r"^(?:\[rank(?P<grank>\d+)\]:)?\[(?P<lvl>[IWEF])(?:(?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d)\.(?P<frac>\d+) "
    r"(?:\d+ )?| )(?P<src>[\w./-]+):(?P<srcline>\d+)\] (?P<gmsg>.*)$"
)
NCCL_DEBUG = r"^[\w.-]+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|ERROR|TRACE|ABORT)"
VLLM = VLLM_LINE          # vLLM V0/V1 records: vllm_patterns
ACCESS = (
    r'^(?:INFO|WARNING|ERROR|DEBUG|TRACE|CRITICAL):\s+(?P<client>\S*) - "(?P<method>[A-Z]+) (?P<upath>\S+)'
    r' HTTP/[\d.]+" (?P<status>\d{3})'
)
BARE_ACCESS = r"^(?:\(\w+ pid=\d+\) )?(?:INFO|WARNING|ERROR):\s+\S* - \"[A-Z]+ \S+ HTTP/[\d.]+\" \d{3}"
ENVIRONMENT = r"^Environment: \S+="
BATCH = r"^(?P<bkind>Prefill|Decode) batch(?: \[(?P<iter>\d+)\])?[.,] (?P<bbody>.*)$"
# How the messages start that the compiled scanner reads as bulk lines (``sglang_scan``): a batch line's head,
# an access line's level.  A release trait anchored at a message's start that starts otherwise never matches
# one of them (``sglang_log.bulk_prefilter``).
BATCH_HEADS = ("Prefill batch", "Decode batch")
ACCESS_LEVELS = ("INFO", "WARNING", "ERROR", "DEBUG", "TRACE", "CRITICAL")

# Message kinds of SGLang-prefixed records: (kind, regex on the message).  First match wins.
MESSAGE_KINDS: list[tuple[str, str]] = [
    ("server_args", r"^server_args=ServerArgs\("),
    ("server_ready", r"^The server is fired up and ready to roll!"),
    ("health_check_failed", r"^Health check failed\."),
    ("watchdog_debug_info", r"^\w+ debug info:\s*$"),
    ("watchdog_timeout", r"^(?:\w+ )?[Ww]atchdog timeout \(self\.watchdog_timeout="),
    ("pyspy_dump", r"^Pyspy dump for PID \d+"),
    ("pyspy_failed", r"^(?:Pyspy failed|All pyspy dump attempts failed)"),
    ("watchdog_batch_info", r"^(?:self|scheduler)\.cur_batch(?:_for_debug)?\.batch_size\(\)="),
    ("sigquit", r"^(?:SIGQUIT received\.|Received sigquit from a child process)"),
    ("scheduler_exception", r"^(?:Scheduler|DataParallelController|TokenizerManager|DetokenizerManager) hit an exception"),
    ("subprocess_crashed", r"^(?:Subprocess .* crashed with exit code|Scheduler or DataParallelController \d+ terminated)"),
    ("mem_check_busy", r"^\[Mem Check \(BUSY\)\]"),
    ("mem_leak_busy", r"(?:Full Pool |SWA Pool )?Mem Leak Detected!"),
    ("mem_leak_warning", r"memory leak detected!"),
    ("kv_retract", r"^(?:KV cache pool is full\. Retract requests|Decode out of memory happened)"),
    ("symm_mem", r"(?:[Ss]ymmetric memory|symm_mem|SymmMem)"),
    ("scheduler_ready", r"^max_total_num_tokens=\d+"),
    ("startup", r"^(?:Init torch distributed|Load weight (?:begin|end)|Capture .*graph (?:begin|end)|Memory pool end|KV Cache is allocated|Mamba Cache is allocated|(?:INFO:\s+)?Uvicorn running)"),
    ("pd_transfer_failed", r"^(?:Prefill|Decode) transfer failed|timed out after .* in KVPoll\."),
    ("client_disconnected", r"Request is disconnected from the client side"),
]

# A torch.distributed job's own records (torch_job): a rank's exit as torchrun's elastic agent reports it, the
# agent's other lines, torchrun's failure summary, a rank's '[rankN]:' traceback, a gloo / c10d error.
TORCH_JOB_KINDS = [("rank_exit", WORKER_FAILED), ("torch_elastic", ELASTIC), ("child_failed", CHILD_FAILED),
                   ("rank_traceback", RANK_TRACEBACK), ("c10d_error", C10D_ERROR)]

# Kinds whose following unprefixed lines belong to them.
CONTINUABLE = {
    "log", "watchdog_debug_info", "pyspy_dump", "pyspy_failed", "watchdog_batch_info", "sigquit",
    "scheduler_exception", "mem_leak_warning", "mem_leak_busy", "mem_check_busy", "torch_nccl", "vllm",
    "server_args", "subprocess_crashed", "symm_mem", "watchdog_timeout", "pd_transfer_failed", "faulthandler",
    "vllm_engine_dead", "vllm_worker_died", "vllm_rpc_timeout", *(k for k, _ in TORCH_JOB_KINDS),
}
# Kinds walked in Python for attributes, dumps and leak text.
DETAILED = {
    "server_args", "health_check_failed", "watchdog_debug_info", "watchdog_timeout", "pyspy_dump",
    "watchdog_batch_info", "scheduler_exception", "mem_leak_warning", "mem_leak_busy", "torch_nccl",
    "environment", "subprocess_crashed", "pyspy_failed", "faulthandler", *(k for k, _ in TORCH_JOB_KINDS),
    "train_step",
}

# Batch-line keys -> column.  Keys are matched verbatim after ', ' (never by position).
BATCH_INT_KEYS: dict[str, list[str]] = {
    "new_seq": ["#new-seq"],
    "new_token": ["#new-token"],
    "cached_token": ["#cached-token"],
    "running_req": ["#running-req"],
    "queue_req": ["#queue-req"],
    "num_token": ["#token", "#full token"],
}
BATCH_FLOAT_KEYS: dict[str, list[str]] = {
    "token_usage": ["token usage", "full token usage"],
    "swa_token_usage": ["swa token usage"],
    "mamba_usage": ["mamba usage"],
    "gen_throughput": ["gen throughput (token/s)"],
    "input_throughput": ["input throughput (token/s)"],
    "accept_len": ["accept len"],
}
# Requests waiting on something other than compute (PD queues), summed into pending_req.
PENDING_KEYS = ["#prealloc-req", "#transfer-req", "#inflight-req", "#bootstrap-req",
                "#unbootstrapped-req", "#transferring-req", "#host-receive-req"]




# Format traits that date a log (sglang-formats.md), newest first: (release family, message regex).
RELEASE_TRAITS = [
    ("0.5.23", r"#pending-token: |cur_batch_for_debug|^symmetric-memory registration in progress|fwd occupancy: "),
    ("0.5.10", r"self\.soft=(?:True|False)\)|est\. (?:prefill|decode) TFLOPS|^Scheduler debug info:"),
    ("0.5.5", r"^(?:Prefill|Decode) batch(?: \[\d+\])?, .*, $|accept rate: |^self\.cur_batch\.batch_size\(\)=\d+$"),
    ("0.5.2", r"^Decode batch\. .*, $|^Prefill batch\. .*#queue-req: \d+, $"),
    ("0.4.6", r"^(?:Prefill|Decode) batch\. "),
]

RELEASE_ORDER = [r for r, _ in RELEASE_TRAITS]


def newest_release(*releases: str | None) -> str | None:
    """The newest of the release families named (None: none named)."""
    known = [r for r in releases if r]
    return min(known, key=RELEASE_ORDER.index) if known else None


# A Ray process's tag before a record its log monitor relays ('(SGLangEngine pid=41820) [2026-03-22 ...'):
# part of the record's prefix (sglang-formats.md §1.2), not a fragment of another record cut into.  Ray's
# tags as the proc_tag envelope reads them ('(pid=4121)', '(SchedulerActor pid=7, ip=10.0.0.12)',
# '(MegatronPolicyWorker[rank=8] pid=3294808, ip=10.109.19.209)'), which leaves them to this prefix before
# an SGLang record.
_ACTOR = r"\((?:[\w.:\[\]=-]+(?: [\w.:\[\]=-]+)? )?pid=\d+(?:, ip=[\w.:-]+)?\)\s*"
_STAMP_RANKS = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?)((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\]"
# The prefix without its message: validated by one anchored regex (cheap: it fails at the first byte of
# most non-prefixed lines), while the message is cut with a literal find, not a capture of '.*'.
PREFIX_HEAD = f"^(?:{_ACTOR})?{_STAMP_RANKS}"
ACTOR_TAG = f"^{_ACTOR}"
TAGGED_HEAD = f"^{_ACTOR}{_STAMP_RANKS}"           # a prefix that starts with an actor's tag
# Two processes writing one file at once: a line cut into by another record's full line.  The last
# prefix on the line starts the complete record; the fragment before it is noted, not parsed.
INTERLEAVED = (
    rf"^.+?((?:{_ACTOR})?\[\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{{1,6}})?"
    r"(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*\] .*)$"
)
ACCESS_HEAD = r"^(?:INFO|WARNING|ERROR|DEBUG|TRACE|CRITICAL):\s+\S* - \""



# A Python traceback pasted without the log line that introduced it (its top may be cut: it then starts at a
# frame). Python's frames read 'File "...", line N, in f'; faulthandler's have no comma ('line N in f').
BARE_TRACEBACK = (r'^(?:Traceback \(most recent call last\):'
                  r'|  File "[^"]*/(?:sglang|vllm|torch)/[^"]*", line \d+, in \S)')
FAULTHANDLER_START = r"^(?:Fatal Python error: |Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!$)"
# An idle leak check printed without a log prefix, in any release's wording (sglang-formats.md §4.2): Python's
# warning line ('.../scheduler.py:1326: UserWarning: ...'), the ValueError line of a traceback cut above it, the
# message alone (in inline backticks too), 2024's 'Warning: available_size=N, max_total_num_token=M'.  A start
# of its own only where no traceback holds it (sglang_log._bare_leak_starts).
LEAK_TEXT = (r"\s*`?(?:\S+\.py:\d+: UserWarning: |UserWarning: |ValueError: )?"
             r"(?:(?:[\w.-]+ )?memory leak detected!|Warning: available_size=\d+, max_total_num_tokens?=\d+)")
BARE_LEAK = "^" + LEAK_TEXT
# The second line of 2024's warning: a start only where nothing else takes it (the first line was cut).
BARE_LEAK_WEAK = r"^\s*`?KV cache pool leak detected!"
# The torch watchdog's message as the text of the exception it throws (torch_nccl.WHAT_RE): Ray's C++ logger line
# around it is a dated line of its own, a start like any record's; std::terminate's '  what():  [PG ...' line
# starts a record only where no torch record holds it (sglang_log._what_starts: after the watchdog's own glog
# line it repeats that line).
RAY_WHAT = (r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d{1,6} [IWEFC] \d+ \d+\] [\w./-]+:\d+: .*what\(\):\s+"
            r"\[(?:PG (?:ID )?\d+|Rank \d+)[\] ]")
TORCH_WHAT = r"^(?:\[rank\d+\]:)?\s*what\(\):\s+\[(?:PG (?:ID )?\d+|Rank \d+)[\] ]"
NON_PREFIXED_KINDS = [("torch_nccl", GLOG), ("torch_nccl", RAY_WHAT), ("nccl_debug", NCCL_DEBUG), ("vllm", VLLM), ("access", BARE_ACCESS),
                      ("environment", ENVIRONMENT), ("faulthandler", FAULTHANDLER_START), *TORCH_JOB_KINDS,
                      ("train_step", STEP_LINE)]



SERVER_ARG_KEYS = [
    "tp_size", "dp_size", "pp_size", "ep_size", "enable_symm_mem", "watchdog_timeout",
    "soft_watchdog_timeout", "enable_dp_attention", "disaggregation_mode", "enable_hierarchical_cache",
    "decode_log_interval", "enable_metrics_for_all_schedulers", "base_gpu_id", "gpu_id_step",
    "model_path", "dist_timeout", "enable_nccl_nvls", "nnodes", "node_rank", "served_model_name", "port", "host",
]

