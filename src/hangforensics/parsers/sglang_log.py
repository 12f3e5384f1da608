"""The SGLang server log (with PyTorch-NCCL glog, NCCL debug and vLLM lines mixed in).

Formats: ../shared/reference/sglang-formats.md.  The volume of a log is batch
and access lines, so classification and field extraction are polars
expressions over a whole chunk of lines; only the rare multi-line records
(watchdog dumps, py-spy bodies, tracebacks, torch watchdog messages) are
walked in Python.

A record starts at a line with a recognised envelope (SGLang prefix, glog,
NCCL debug, vLLM, uvicorn); unprefixed lines that follow belong to it when its
kind can continue (tracebacks, dumps, multi-line messages), blank lines always
do, and anything else is kept in ``unparsed``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from ..ranks import rank_numbers  # noqa: F401  (re-exported for older imports)
from ..readers.logfile import COMPOSE_RE
from . import faulthandler, leaks, native_trace, pyspy, stackrows, torch_nccl

# -- envelopes (polars / Rust regex syntax) -----------------------------------
GLOG = (
    r"^(?:\[rank(?P<grank>\d+)\]:)?\[(?P<lvl>[IWEF])(?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d)\.(?P<frac>\d+) "
    r"(?:\d+ )?(?P<src>[\w./-]+):(?P<srcline>\d+)\] (?P<gmsg>.*)$"
)
NCCL_DEBUG = r"^[\w.-]+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|ERROR|TRACE|ABORT)"
VLLM = (
    r"^(?:\((?P<vproc>\w+) pid=(?P<vpid>\d+)\) )?(?P<vlvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<vts>\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[(?P<vsrc>[^\]:]+):(?P<vline>\d+)\] (?P<vmsg>.*)$"
)
ACCESS = (
    r'^(?:INFO|WARNING|ERROR|DEBUG|TRACE|CRITICAL):\s+(?P<client>\S*) - "(?P<method>[A-Z]+) (?P<upath>\S+)'
    r' HTTP/[\d.]+" (?P<status>\d{3})'
)
BARE_ACCESS = r"^(?:\(\w+ pid=\d+\) )?(?:INFO|WARNING|ERROR):\s+\S* - \"[A-Z]+ \S+ HTTP/[\d.]+\" \d{3}"
ENVIRONMENT = r"^Environment: \S+="
BATCH = r"^(?P<bkind>Prefill|Decode) batch(?: \[(?P<iter>\d+)\])?[.,] (?P<bbody>.*)$"

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

# Kinds whose following unprefixed lines belong to them.
CONTINUABLE = {
    "log", "watchdog_debug_info", "pyspy_dump", "pyspy_failed", "watchdog_batch_info", "sigquit",
    "scheduler_exception", "mem_leak_warning", "mem_leak_busy", "mem_check_busy", "torch_nccl", "vllm",
    "server_args", "subprocess_crashed", "symm_mem", "watchdog_timeout", "pd_transfer_failed", "faulthandler",
    "vllm_engine_dead", "vllm_worker_died", "vllm_rpc_timeout",
}
# Kinds walked in Python for attributes, dumps and leak text.
DETAILED = {
    "server_args", "health_check_failed", "watchdog_debug_info", "watchdog_timeout", "pyspy_dump",
    "watchdog_batch_info", "scheduler_exception", "mem_leak_warning", "mem_leak_busy", "torch_nccl",
    "environment", "subprocess_crashed", "pyspy_failed", "faulthandler",
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



@dataclass
class FileContext:
    engine: str
    path: str                      # as reported in evidence (relative)
    default_year: int              # for glog / vLLM timestamps that carry no year
    compose: bool = False
    last_ts: datetime | None = None  # carried across chunks
    prev_ts: datetime | None = None  # timestamp of the previous chunk's last dated record, in file order


@dataclass
class Parsed:
    """Rows produced from one chunk, ready for the store."""

    tables: dict[str, pl.DataFrame | list[dict[str, Any]]] = field(default_factory=dict)
    lines: int = 0
    unparsed: int = 0
    release: str | None = None     # the SGLang release family the formats point at
    interleaved: int = 0           # lines cut into by another record (the inner record is parsed)
    backwards: int = 0             # records dated more than BACKWARDS_S before the record above them
    largest_back: tuple[float, int] = (0.0, 0)   # (seconds, line) of the largest such step


# Interleaved processes disorder their lines by milliseconds; a step back larger than this is a clock
# that went backwards (NTP step, a container restart on another clock, lines pasted out of order).
BACKWARDS_S = 2.0


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
    known = [r for r in releases if r]
    return min(known, key=RELEASE_ORDER.index) if known else None


def release_of(msgs: pl.Series) -> str | None:
    """The newest release family whose traits appear in these messages (None: no trait seen)."""
    for release, rx in RELEASE_TRAITS:
        if msgs.str.contains(rx).any():
            return release
    return None


def _key_regex(keys: list[str]) -> str:
    """Value of the first of ``keys`` in a batch body that starts with ', '."""
    alt = "|".join(re.escape(k) for k in keys)
    return rf", (?:{alt}): ([^,]+)"


def _ts_expr(col: str) -> pl.Expr:
    ts = pl.col(col).str.replace(",", ".").str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False)
    # polars parses year 0000, which no Python datetime can hold (the rows are read back in Python): unknown
    return pl.when(ts.dt.year() >= 1).then(ts)


# The prefix without its message: validated by one anchored regex (cheap: it fails at the first byte of
# most non-prefixed lines), while the message is cut with a literal find, not a capture of '.*'.
PREFIX_HEAD = (
    r"^(?:\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*)?"
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?)((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\]"
)
# Two processes writing one file at once: a line cut into by another record's full line.  The last
# prefix on the line starts the complete record; the fragment before it is noted, not parsed.
INTERLEAVED = (
    r"^.+?((?:\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*)?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?"
    r"(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*\] .*)$"
)
ACCESS_HEAD = r"^(?:INFO|WARNING|ERROR|DEBUG|TRACE|CRITICAL):\s+\S* - \""


def _kind_chain(col: pl.Expr, table: list[tuple[str, str]], default: str | None) -> pl.Expr:
    expr = pl.when(col.str.contains(table[0][1])).then(pl.lit(table[0][0]))
    for name, rx in table[1:]:
        expr = expr.when(col.str.contains(rx)).then(pl.lit(name))
    return expr.otherwise(pl.lit(default, dtype=pl.String))


# vLLM (sglang-formats.md §9): stats lines and the messages of a hung or dead engine.
VLLM_KINDS = [
    ("vllm_stats", r"Avg prompt throughput: |Avg generation throughput: "),
    ("vllm_shm_wait", r"No available shared memory broadcast block found"),
    ("vllm_rpc_timeout", r"RPC call to \w+ timed out"),
    ("vllm_engine_dead", r"EngineCore encountered|EngineDeadError"),
    ("vllm_worker_died", r"died unexpectedly"),
]
FAULTHANDLER_START = r"^(?:Fatal Python error: |Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!$)"
NON_PREFIXED_KINDS = [("torch_nccl", GLOG), ("nccl_debug", NCCL_DEBUG), ("vllm", VLLM), ("access", BARE_ACCESS),
                      ("environment", ENVIRONMENT), ("faulthandler", FAULTHANDLER_START)]


def classify(texts: list[str], compose: bool) -> pl.DataFrame:
    """One row per line: envelope fields (ts, ranks, msg), record kind, record id and role.

    Batch and access lines, the bulk of a log, are recognised by cheap anchored
    tests; the long list of message kinds runs only on the few other records.
    """
    df = pl.DataFrame({"text": pl.Series(texts, dtype=pl.String)}).with_row_index("i")
    src = pl.col("text")
    if compose:
        src = src.str.replace(COMPOSE_RE.pattern, "")
    df = df.with_columns(src.alias("body"))
    inner = pl.col("body").str.extract(INTERLEAVED, 1)
    df = df.with_columns(inner.is_not_null().alias("interleaved"), pl.coalesce(inner, pl.col("body")).alias("body"))
    head = pl.col("body").str.extract_groups(PREFIX_HEAD)
    df = df.with_columns(head.struct.field("1").alias("ts"), head.struct.field("2").alias("ranks"))
    close = pl.col("body").str.find("]", literal=True)
    df = df.with_columns(
        pl.when(pl.col("ts").is_not_null())
        .then(pl.col("body").str.slice(close + 1).str.strip_prefix(" "))
        .otherwise(None).alias("msg"))
    msg = pl.col("msg")
    fast = (
        pl.when(pl.col("ts").is_null()).then(pl.lit(None, dtype=pl.String))
        .when((msg.str.starts_with("Prefill batch") | msg.str.starts_with("Decode batch")) & msg.str.contains(BATCH))
        .then(pl.lit("batch"))
        .when(msg.str.contains(ACCESS_HEAD)).then(pl.lit("access"))
        .otherwise(pl.lit("?"))
    )
    df = df.with_columns(fast.alias("kind"))
    rest = df.filter(pl.col("kind") == "?").select(
        "i", _kind_chain(pl.col("msg"), MESSAGE_KINDS, "log").alias("k2"))
    bare = df.filter(pl.col("ts").is_null() & (pl.col("body").str.len_bytes() > 0)).select(
        "i", _kind_chain(pl.col("body"), NON_PREFIXED_KINDS, None).alias("k3"))
    df = (df.join(rest, on="i", how="left").join(bare, on="i", how="left")
          .with_columns(pl.coalesce(pl.col("k2"), pl.when(pl.col("kind") != "?").then(pl.col("kind")), pl.col("k3"))
                        .alias("kind"))
          .drop("k2", "k3").sort("i"))
    df = df.with_columns(
        pl.col("kind").is_not_null().alias("start"),
        (pl.col("body").str.strip_chars() == "").alias("blank"),
    )
    df = df.with_columns(pl.col("start").cast(pl.Int64).cum_sum().alias("rec"))
    # kind of the record each line belongs to
    df = df.with_columns(pl.col("kind").forward_fill().alias("rec_kind"))
    cont_ok = pl.col("rec_kind").is_in(list(CONTINUABLE))
    df = df.with_columns(
        pl.when(pl.col("start")).then(pl.lit("start"))
        .when(pl.col("rec") == 0).then(pl.lit("unparsed"))
        .when(pl.col("blank") | cont_ok).then(pl.lit("cont"))
        .otherwise(pl.lit("unparsed")).alias("role")
    )
    return df


def parse_chunk(lines: list[str], first_line: int, ctx: FileContext) -> Parsed:
    """Parse a chunk of complete records; line numbers start at ``first_line``."""
    df = classify(lines, ctx.compose)
    df = df.with_columns((pl.col("i").cast(pl.Int64) + first_line).alias("line"))
    out = Parsed(lines=len(lines), interleaved=int(df.get_column("interleaved").sum()))

    # Record extents: last line of each record (its continuation lines).
    ext = (
        df.filter(pl.col("role") != "unparsed")
        .group_by("rec").agg(pl.col("line").max().alias("line_end"))
    )
    starts = df.filter(pl.col("start")).join(ext, on="rec", how="left")

    # Year context for envelopes without a year (glog, vLLM): the nearest SGLang timestamp.
    ts_parsed = _ts_expr("ts")
    starts = starts.with_columns(ts_parsed.alias("ts_dt"))
    # Nearest SGLang timestamp before each record (then after it), for envelopes printed without a year.
    carried = ctx.last_ts or datetime(ctx.default_year, 1, 1)
    starts = starts.with_columns(
        pl.col("ts_dt").forward_fill().backward_fill().fill_null(carried).alias("ctx_ts"),
        pl.col("ts_dt").backward_fill().alias("next_ts"))

    # -- batches (vectorised) --------------------------------------------------
    b = starts.filter(pl.col("kind") == "batch")
    if b.height:
        head = pl.col("msg").str.extract(r"^(?:Prefill|Decode) batch(?: \[\d+\])?[.,] ?", 0)
        # ', ' in front of the body lets every key be found by a literal ', key: ' (fast), never by position
        b = b.with_columns(
            pl.col("msg").str.slice(0, 7).str.strip_chars_end().alias("bkind"),
            pl.col("msg").str.extract(r"^\w+ batch \[(\d+)\]", 1).alias("iter"),
            (pl.lit(", ") + pl.col("msg").str.slice(head.str.len_chars()).str.strip_chars_end(", ")).alias("bbody"),
        )
        cols: list[pl.Expr] = [
            pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), pl.col("line"),
            pl.col("ts_dt").alias("ts"), pl.col("ranks").str.strip_chars().alias("rank"),
            pl.col("bkind").alias("batch_kind"), pl.col("iter").cast(pl.Int64, strict=False).alias("forward_iter"),
        ]
        body = pl.col("bbody")
        for col, keys in BATCH_INT_KEYS.items():
            cols.append(body.str.extract(_key_regex(keys), 1).str.strip_chars()
                        .cast(pl.Int64, strict=False).alias(col))
        for col, keys in BATCH_FLOAT_KEYS.items():
            cols.append(body.str.extract(_key_regex(keys), 1).str.strip_chars()
                        .cast(pl.Float64, strict=False).alias(col))
        cols.append(body.str.extract(r", (?:cuda|cpu|npu|musa|xpu|hpu) graph: (True|False)", 1)
                    .eq("True").alias("graph"))
        bt = b.select(cols)
        # PD queue counters appear only on disaggregated engines: extract them on those lines alone.
        pd_lines = b.filter(body.str.contains(r", #(?:prealloc|transfer|inflight|bootstrap|unbootstrapped|"
                                              r"transferring|host-receive)-req: "))
        if pd_lines.height:
            pend = [body.str.extract(_key_regex([k]), 1).str.strip_chars().cast(pl.Int64, strict=False)
                    for k in PENDING_KEYS]
            pd_sum = pd_lines.select(pl.col("line"), pl.sum_horizontal(pend).alias("pending_req"))
            bt = bt.join(pd_sum, on="line", how="left")
        else:
            bt = bt.with_columns(pl.lit(None, dtype=pl.Int64).alias("pending_req"))
        out.tables["batches"] = bt

    # -- access lines ----------------------------------------------------------
    a = starts.filter(pl.col("kind") == "access").with_columns(
        pl.coalesce(pl.col("msg"), pl.col("body").str.replace(r"^\(\w+ pid=\d+\) ", "")).alias("amsg")
    ).with_columns(pl.col("amsg").str.extract_groups(ACCESS).alias("ag")).unnest("ag")
    if a.height:
        out.tables["http_requests"] = a.select(
            pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("file"), pl.col("line"),
            pl.col("ts_dt").alias("ts"), pl.col("client"), pl.col("method"),
            pl.col("upath").alias("path"), pl.col("status").cast(pl.Int32, strict=False),
        )

    # -- other records -> events ----------------------------------------------
    ev = starts.filter(~pl.col("kind").is_in(["batch", "access"]))
    # vLLM records: 'MM-DD HH:MM:SS' with no year (taken from the nearest dated line), the process name
    # as rank-like context, and the hang messages of sglang-formats.md §9.3 as their own kinds.
    vllm = pl.col("body").str.extract_groups(VLLM)
    ev = ev.with_columns(
        pl.when(pl.col("kind") == "vllm").then(vllm.struct.field("vts")).alias("_vts"),
        pl.when(pl.col("kind") == "vllm").then(vllm.struct.field("vmsg")).alias("_vmsg"),
        pl.when(pl.col("kind") == "vllm").then(vllm.struct.field("vproc")).alias("_vproc"),
    ).with_columns(
        pl.concat_str([pl.col("ctx_ts").dt.year().cast(pl.String), pl.lit("-"), pl.col("_vts")])
        .str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False).alias("_vdt"),
        pl.when(pl.col("kind") != "vllm").then(pl.col("kind"))
        .otherwise(_kind_chain(pl.col("_vmsg").fill_null(""), VLLM_KINDS, "vllm")).alias("kind"),
    )
    events = ev.select(
        pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), pl.col("line"),
        pl.col("line_end"), pl.coalesce(pl.col("ts_dt"), pl.col("_vdt")).alias("ts"),
        pl.coalesce(pl.col("ranks").str.strip_chars(), pl.col("_vproc")).fill_null("").alias("rank"),
        pl.col("kind"),
        pl.coalesce(pl.col("msg"), pl.col("_vmsg"), pl.col("body")).str.slice(0, 2000).alias("message"),
        pl.lit(None, dtype=pl.String).alias("attrs"),
    )

    # -- detailed records (Python, rare) ---------------------------------------
    detailed_ids = ev.filter(pl.col("kind").is_in(list(DETAILED)))
    extra_unparsed: list[dict[str, Any]] = []
    attrs_by_line: dict[int, str] = {}
    ts_by_line: dict[int, datetime] = {}
    rank_by_line: dict[int, str] = {}
    extra_events: list[dict[str, Any]] = []
    leak_rows: list[dict[str, Any]] = []
    stack_rows: list[dict[str, Any]] = []
    frame_rows: list[dict[str, Any]] = []
    if detailed_ids.height:
        body_list = _BodyLines(lines, ctx.compose)
        for rec in detailed_ids.iter_rows(named=True):
            i0 = rec["i"]
            i1 = i0 + (rec["line_end"] - rec["line"]) if rec["line_end"] is not None else i0
            cont = body_list[i0 + 1: i1 + 1]
            kind = rec["kind"]
            line = rec["line"]
            rank = (rec["ranks"] or "").strip()
            ts = rec["ts_dt"]
            msg = rec["msg"] if rec["msg"] is not None else rec["body"]
            attrs: dict[str, Any] = {}
            if kind == "torch_nccl":
                g = torch_nccl.parse_glog(rec["body"], rec["ctx_ts"])
                if g:
                    ts = torch_nccl.align_to_log(g, rec["ctx_ts"], rec["next_ts"])
                    ts_by_line[line] = ts
                    if g.get("global_rank") is not None and not rank:
                        rank_by_line[line] = f"rank{g['global_rank']}"
                    attrs = g
                # torch's C++ stack of the failing watchdog ('Exception raised from ...', 'frame #N: ...')
                if any(x.startswith("frame #") for x in cont):
                    dump = native_trace.parse_trace(cont, line + 1)
                    for th in dump.threads:
                        th.name = "c10d watchdog"
                    grank = g.get("global_rank") if g else None
                    stackrows.dump_rows(dump, f"{ctx.engine}:{ctx.path}:{line}", ctx.engine, ctx.path, ts,
                                        rank or (f"TP{grank}" if grank is not None else ""), "embedded",
                                        stack_rows, frame_rows)
            elif kind == "faulthandler":
                dump = faulthandler.parse_faulthandler([rec["body"], *cont], line)
                stackrows.dump_rows(dump, f"{ctx.engine}:{ctx.path}:{line}", ctx.engine, ctx.path, ts or rec["ctx_ts"],
                                    rank, "embedded", stack_rows, frame_rows)
                for off in dump.unmatched:
                    extra_unparsed.append({"engine": ctx.engine, "path": ctx.path, "line": line + off,
                                           "text": ([rec["body"], *cont])[off]})
                attrs = {"threads": len(dump.threads), "garbled": any(t.garbled for t in dump.threads)}
            elif kind == "server_args":
                attrs = parse_server_args(msg)
            elif kind == "environment":
                attrs = dict(re.findall(r"(\w+)=(\S*)", msg))
            elif kind == "health_check_failed":
                m = re.search(r"last_heartbeat time: (\d\d:\d\d:\d\d)", msg)
                t = re.search(r"tic start time: (\d\d:\d\d:\d\d)", msg)
                attrs = {"last_heartbeat": m.group(1) if m else None, "tic_start": t.group(1) if t else None}
            elif kind == "watchdog_timeout":
                m = re.search(r"watchdog_timeout=([\d.]+)(?:, self\.soft=(True|False))?", msg)
                who = re.match(r"^(\w+) watchdog timeout", msg)
                attrs = {"timeout": float(m.group(1)) if m else None,
                         "soft": (m.group(2) == "True") if m and m.group(2) else False,
                         "who": who.group(1) if who else "Scheduler"}
            elif kind == "subprocess_crashed":
                m = re.search(r"exit code (-?\d+)", msg)
                attrs = {"exit_code": int(m.group(1)) if m else None}
            elif kind == "pyspy_dump":
                m = re.search(r"PID (\d+)", msg)
                attrs = {"pid": int(m.group(1)) if m else None, "native": "--native" in msg}
                dump = pyspy.parse_dump(cont, line + 1)
                dump_id = f"{ctx.engine}:{ctx.path}:{line}"
                stackrows.dump_rows(dump, dump_id, ctx.engine, ctx.path, ts, rank, "embedded", stack_rows, frame_rows)
                for off in dump.unmatched:
                    extra_unparsed.append({"engine": ctx.engine, "path": ctx.path,
                                           "line": line + 1 + off, "text": cont[off]})
                attrs["threads"] = sum(len(p.threads) for p in dump.processes)
                # 0.5.10 runs --native without saying so in the header: the frames tell
                attrs["native"] = attrs["native"] or any(fr.native for p in dump.processes
                                                         for th in p.threads for fr in th.frames)
            if kind in ("watchdog_debug_info", "watchdog_batch_info", "scheduler_exception",
                        "mem_leak_warning", "mem_leak_busy"):
                text_lines = [msg, *cont]
                rep = leaks.leak_from_record(kind, text_lines)
                if rep is not None:
                    rep.update(engine=ctx.engine, path=ctx.path, line=line, ts=ts, rank=rank)
                    leak_rows.append(rep)
                    attrs["leak_context"] = rep["context"]
                if kind == "watchdog_debug_info":
                    for off, s in enumerate(cont):
                        m = re.match(r"^symmetric-memory registration in progress: comm=(\d+) group=(\S+)", s)
                        if m:
                            extra_events.append({
                                "engine": ctx.engine, "path": ctx.path, "line": line + 1 + off,
                                "line_end": line + 1 + off, "ts": ts, "rank": rank,
                                "kind": "symm_mem_registration", "message": s[:2000],
                                "attrs": json.dumps({"comm": m.group(1), "group": m.group(2)}),
                            })
                        m = re.match(r"^(?:scheduler|self)\.cur_batch(?:_for_debug)?\.batch_size\(\)=(\d+)", s)
                        if m:
                            attrs["batch_size"] = int(m.group(1))
                if kind == "scheduler_exception":
                    exc = [s for s in cont if re.match(r"^[\w.]+(?:Error|Exception|Interrupt)\b", s)]
                    attrs["exception"] = exc[-1][:500] if exc else None
            if attrs:
                attrs_by_line[line] = json.dumps(attrs, default=str)

    if attrs_by_line or ts_by_line or rank_by_line:
        fix = pl.DataFrame({
            "line": list(set(attrs_by_line) | set(ts_by_line) | set(rank_by_line)),
        }, schema={"line": pl.Int64})
        fix = fix.with_columns(
            pl.col("line").replace_strict(attrs_by_line, default=None, return_dtype=pl.String).alias("_attrs"),
            pl.col("line").replace_strict(ts_by_line, default=None, return_dtype=pl.Datetime("us")).alias("_ts"),
            pl.col("line").replace_strict(rank_by_line, default=None, return_dtype=pl.String).alias("_rank"),
        )
        events = events.join(fix, on="line", how="left").with_columns(
            pl.coalesce("_attrs", "attrs").alias("attrs"),
            pl.coalesce(pl.col("ts").cast(pl.Datetime("us")), "_ts").alias("ts"),
            pl.when(pl.col("rank") == "").then(pl.col("_rank").fill_null("")).otherwise(pl.col("rank")).alias("rank"),
        ).drop("_attrs", "_ts", "_rank")
    if extra_events:
        events = pl.concat([events.with_columns(pl.col("ts").cast(pl.Datetime("us"))),
                            pl.DataFrame(extra_events, schema=events.schema | {"ts": pl.Datetime("us")})],
                           how="vertical_relaxed")
    out.tables["events"] = events
    out.tables["leak_reports"] = leak_rows
    out.tables["stacks"] = stack_rows
    out.tables["frames"] = frame_rows

    # -- unparsed ------------------------------------------------------------------
    un = df.filter(pl.col("role") == "unparsed").select(
        pl.lit(ctx.engine).alias("engine"), pl.lit(ctx.path).alias("path"), pl.col("line"),
        pl.col("text"),
    )
    if extra_unparsed:
        un = pl.concat([un, pl.DataFrame(extra_unparsed, schema=un.schema)])
    out.tables["unparsed"] = un
    out.unparsed = un.height
    # ranks printed PP before TP exist only from 0.5.10 on
    pp_first = starts.get_column("ranks").drop_nulls().str.contains(r" PP\d+.* TP\d+").any()
    out.release = newest_release(release_of(starts.get_column("msg").drop_nulls().head(20000)),
                                 "0.5.10" if pp_first else None)
    last = starts.get_column("ts_dt").drop_nulls()
    if last.len():
        ctx.last_ts = last.max()  # type: ignore[assignment]
        _count_backwards(starts.select("line", "ts_dt").drop_nulls(), ctx, out)
    return out


def _count_backwards(dated: pl.DataFrame, ctx: FileContext, out: Parsed) -> None:
    """Count records dated well before the record above them (a clock that went backwards)."""
    prev = pl.col("ts_dt").shift(1)
    if ctx.prev_ts is not None:
        prev = prev.fill_null(pl.lit(ctx.prev_ts))
    steps = dated.with_columns((prev - pl.col("ts_dt")).dt.total_milliseconds().alias("back_ms")) \
        .filter(pl.col("back_ms") > BACKWARDS_S * 1000)
    ctx.prev_ts = dated.get_column("ts_dt")[-1]
    if steps.height:
        out.backwards = steps.height
        top = steps.sort("back_ms", descending=True).row(0, named=True)
        out.largest_back = (top["back_ms"] / 1000, top["line"])


class _BodyLines:
    """Lazy view of a chunk's lines without compose prefixes (only dump/traceback records are read)."""

    def __init__(self, lines: list[str], compose: bool) -> None:
        self.lines, self.compose = lines, compose

    def __getitem__(self, sl: slice) -> list[str]:
        part = self.lines[sl]
        return [COMPOSE_RE.sub("", x, count=1) for x in part] if self.compose else part




SERVER_ARG_KEYS = [
    "tp_size", "dp_size", "pp_size", "ep_size", "enable_symm_mem", "watchdog_timeout",
    "soft_watchdog_timeout", "enable_dp_attention", "disaggregation_mode", "enable_hierarchical_cache",
    "decode_log_interval", "enable_metrics_for_all_schedulers", "base_gpu_id", "gpu_id_step",
    "model_path", "dist_timeout", "enable_nccl_nvls", "nnodes", "node_rank", "served_model_name",
]


def parse_server_args(msg: str) -> dict[str, Any]:
    """Pick the forensically relevant settings out of a ``server_args=ServerArgs(...)`` line."""
    out: dict[str, Any] = {}
    for key in SERVER_ARG_KEYS:
        m = re.search(rf"[(,\s]{key}=('(?:[^'\\]|\\.)*'|[^,)]+)", msg)
        if not m:
            continue
        v = m.group(1).strip()
        if v.startswith("'"):
            out[key] = v[1:-1]
        elif v in ("True", "False"):
            out[key] = v == "True"
        elif v == "None":
            out[key] = None
        else:
            try:
                out[key] = float(v) if "." in v else int(v)
            except ValueError:
                out[key] = v
    return out
