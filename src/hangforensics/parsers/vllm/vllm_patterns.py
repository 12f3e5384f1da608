"""vLLM's line formats and process names (V0 and V1 engines), free of polars so that planning and the stack
parsers can use them.  Formats: ../shared/reference/sglang-formats.md §9, collective-formats.md "vLLM".

Every vLLM record starts with ``LEVEL MM-DD HH:MM:SS [file.py:N] `` (no year), older releases without the
brackets (``INFO 05-01 10:00:05 metrics.py:345] ``), and since 2025 often behind a process tag naming who
printed it: ``(APIServer pid=N)``, ``(EngineCore_DP0 pid=N)``, ``(VllmWorker TP1 pid=N)``,
``(VllmWorker rank=1 pid=N)``, ``(Worker_PP1_TP0 pid=N)``, V0's ``(VllmWorkerProcess pid=N)``, a Ray
actor's ``(RayWorkerWrapper pid=N, ip=10.0.0.2)``.
"""

from __future__ import annotations

import re

# The process tag: a name (one word, or a word and a rank suffix such as 'TP1' or 'rank=1'), the pid, and
# the node's address on Ray.  Rust-regex and Python syntax alike (polars runs it).
PROC_TAG = r"\((?:(?P<vproc>[A-Za-z_][\w.-]*(?: [\w=.-]+)?) )?pid=(?P<vpid>\d+)(?:, ip=[\d.]+)?\)\s*"
# vLLM's records under a user's own logging format (VLLM_CONFIGURE_LOGGING=0 and a framework's handler, or
# a logging config): Python logging's '%(asctime)s - %(name)s - %(levelname)s - %(message)s', the logger one
# of vLLM's modules ('2024-12-23 18:28:10 - vllm.engine.metrics - INFO - Avg prompt throughput: ...').
# Dated in full: the year is its own.
PYLOG_HEAD = (r"(?P<vyear>\d{4})-(?P<vts2>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? - (?P<vlogger>vllm(?:\.[\w.]+)?) - "
              r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - ")
# A stats line's message pasted without its head (a reporter's inline code): a record with no time.
STATS_MESSAGE = r"(?:Engine \d+: )?Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: "
# vLLM's own record head: level, time without a year, source file and line
RECORD_HEAD = (r"(?P<vlvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<vts>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? "
               r"\[?(?P<vsrc>[^\]\s:]+):(?P<vline>\d+)\] ")
VLLM_LINE = rf"^(?:{PROC_TAG})?(?:(?:{RECORD_HEAD}|{PYLOG_HEAD})(?P<vmsg>.*)|(?P<vbare>{STATS_MESSAGE}.*))$"


def unnamed(rx: str) -> str:
    """``rx`` with its named groups made plain ones (to be a part of another pattern with names of its own)."""
    return re.sub(r"\(\?P<\w+>", "(?:", rx)

# Message kinds of vLLM records (first match wins): stats lines, the messages of a hung or dead engine,
# request arrivals and completions (``--enable-log-requests``), a server start.
KINDS: list[tuple[str, str]] = [
    ("vllm_stats", r"Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: "),
    # V1 'No available shared memory broadcast block found in 60 seconds', V0 'No available block found in 60 second.'
    ("vllm_shm_wait", r"No available (?:shared memory broadcast )?block found in \d+ second"),
    ("vllm_rpc_timeout", r"RPC call to \S+ timed out|RayChannelTimeoutError|didn't reply within \d+ ?ms"),
    ("vllm_input_dump", r"^Dumping (?:input data|scheduler output|scheduler stats|model input)|"
                        r"^V[01] LLM engine \(v[^)]*\) with config: |^Batch info: requests_count=|"
                        r"^Errored Batch request #"),
    ("vllm_engine_dead", r"EngineCore encountered|EngineDeadError|AsyncEngineDeadError|MQEngineDeadError|"
                         r"Background loop has errored|Engine core proc \S+ died unexpectedly"),
    ("vllm_worker_died", r"died unexpectedly|^Worker \S+ pid \d+ died|actor died"),
    ("vllm_worker_error", r"^WorkerProc (?:hit an exception|failed)"),
    ("vllm_request", r"^(?:Received|Added) request \S"),
    ("vllm_request_done", r"^(?:Finished|Aborted) request \S"),
    ("vllm_start", r"^vLLM API server version |^Initializing an? (?:V[01] )?LLM engine \(v|^non-default args: "),
]
# vLLM kinds the stall model treats as the engine saying it is stuck or dead (hard signals).
HANG_KINDS = ("vllm_shm_wait", "vllm_rpc_timeout", "vllm_engine_dead", "vllm_worker_died", "vllm_input_dump")

# Settings worth keeping from a start line: 'tensor_parallel_size': 4 (non-default args) or
# tensor_parallel_size=4 (the engine's config line); key -> engine_facts name.
START_KEYS = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
              "data_parallel_size": "dp_size", "port": "port", "model": "model_path"}
VERSION_RE = re.compile(r"(?:version |engine \(v)(\d[\w.+-]*)")

# -- process names -> rank labels --------------------------------------------------------------------------
_TAG_RE = re.compile(r"(?:^|[_\s-])(DP|PP|TP|EP)(\d+)(?=$|[_\s-])")
_WORKER_RANK_RE = re.compile(r"^(?:Vllm)?Worker(?:Proc)?(?:[-\s]|\s*rank=)(\d+)$")
_WORKER_RE = re.compile(r"^(?:Vllm)?Worker", re.I)
_ENGINE_CORE_RE = re.compile(r"^EngineCore(?:_DP\d+)?$")


def rank_of_process(name: str | None) -> str | None:
    """The rank label of a vLLM worker from its process name, as SGLang would print it:
    'VllmWorker TP1', 'Worker_TP1', 'VLLM::Worker_DP0_TP1' -> 'TP1', 'DP0 TP1'; 'Worker_PP1_TP0' ->
    'PP1 TP0'; 'VllmWorker rank=2', 'VllmWorker-2' -> 'TP2' (a worker's global rank, which is its TP rank
    without pipeline stages).  None for a process that serves no single rank (APIServer, EngineCore,
    V0's unnumbered VllmWorkerProcess, a Ray actor)."""
    if not name:
        return None
    name = name.split("::", 1)[-1].strip()
    if not _WORKER_RE.match(name) and not name.startswith("EngineCore_"):
        return None
    m = _WORKER_RANK_RE.match(name)
    if m:
        return f"TP{int(m.group(1))}"
    tags = {t: int(n) for t, n in _TAG_RE.findall(name)}
    if "TP" not in tags and "PP" not in tags:
        return None                  # EngineCore_DP0 is the engine of DP rank 0, not one of its workers
    return " ".join(f"{t}{tags[t]}" for t in ("DP", "PP", "TP", "EP") if t in tags)


def label_of_process(name: str | None) -> str:
    """What to call the process that printed a line or was dumped: its worker rank label, else its name
    as vLLM prints it ('APIServer', 'EngineCore_DP0'), else ''."""
    if not name:
        return ""
    return rank_of_process(name) or name.split("::", 1)[-1].strip()


def rank_from_title(title: str) -> str | None:
    """The rank label of a process dumped by py-spy, from the title vLLM sets: 'VLLM::Worker_TP1' -> 'TP1',
    'VLLM::EngineCore_DP1' -> 'EngineCore_DP1', 'VLLM::EngineCore' -> 'EngineCore'.  None for a title that
    is not vLLM's (the prefix before '::' is configurable, so the name after it decides) or names no
    process of the engine (APIServer, a Ray actor: ``ray::RayWorkerWrapper``)."""
    if "::" not in title or title.startswith(("ray::", "sglang::")):
        return None
    name = title.split("::", 1)[1].strip().split()[0] if title.split("::", 1)[1].strip() else ""
    rank = rank_of_process(name)
    if rank:
        return rank
    return name if _ENGINE_CORE_RE.match(name) else None


def is_unique_process(label: str) -> bool:
    """A label that names one process of the engine (a worker rank, an engine core): a pid printed with it
    can name a dump's rank.  'APIServer', 'VllmWorkerProcess' or 'RayWorkerWrapper' name many."""
    return bool(label) and (rank_of_process(label) is not None or bool(_ENGINE_CORE_RE.match(label))
                            or bool(re.match(r"^(?:DP|PP|TP|EP)\d+(?: (?:DP|PP|TP|EP)\d+)*$", label)))
