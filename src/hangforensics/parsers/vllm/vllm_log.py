"""vLLM records inside a server log (V0 and V1 engines): their prefix, year-less time, process, message kind
and attributes, and the stats lines as typed ``vllm_stats`` rows.

Called by the server-log parser (``sglang_log``) on the records it classified as vLLM; the batch and
access lines never get here.  Formats: ``vllm_patterns`` (sglang-formats.md §9).
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from ..kind_table import KindTable
from .vllm_patterns import KINDS, START_KEYS, VERSION_RE, VLLM_LINE, is_unique_process, label_of_process

_KINDS = KindTable(KINDS, "vllm")
FEW = 256                   # up to this many records: a few steps in Python instead of polars operations
_IS_VLLM = pl.col("kind") == "vllm"
_FIELDS = [pl.col("_vparts").struct.field(f).alias(n)
           for f, n in (("vproc", "_vproc"), ("vpid", "_vpid"), ("vyear", "_vyear"))] + [
    pl.coalesce(pl.col("_vparts").struct.field(a), pl.col("_vparts").struct.field(b)).alias(n)
    for a, b, n in (("vts", "vts2", "_vts"), ("vmsg", "vbare", "_vmsg"))]
_VDT = pl.concat_str([pl.coalesce(pl.col("_vyear"), pl.col("ctx_ts").dt.year().cast(pl.String)), pl.lit("-"),
                      pl.col("_vts")]).str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False).alias("_vdt")
# a year-less time beside a dated line or an envelope time: the nearest year; with only the file's
# modification time: the date at or before it (a time printed with its year: as printed)
_VDT_YEAR = (
    pl.when(pl.col("_vyear").is_not_null()).then(pl.col("_vdt"))
    .when(pl.col("ctx_mtime") & (pl.col("_vdt") > pl.col("ctx_ts") + pl.duration(days=1)))
    .then(pl.col("_vdt").dt.offset_by("-1y"))
    .when(~pl.col("ctx_mtime") & (pl.col("_vdt") > pl.col("ctx_ts") + pl.duration(days=183)))
    .then(pl.col("_vdt").dt.offset_by("-1y"))
    .when(~pl.col("ctx_mtime") & (pl.col("_vdt") < pl.col("ctx_ts") - pl.duration(days=183)))
    .then(pl.col("_vdt").dt.offset_by("1y"))
    .otherwise(pl.col("_vdt")).alias("_vdt")
)


def with_vllm_fields(ev: pl.DataFrame) -> pl.DataFrame:
    """``ev`` (record starts of a chunk) with the vLLM fields of its vLLM records: ``_vdt`` (the time, its
    year from the nearest dated evidence: ``ctx_ts``), ``_vmsg``, ``_vrank`` (a worker's rank label, else
    the process name), ``_vattrs`` (JSON) and ``kind`` refined (``vllm_stats``, ``vllm_shm_wait``, ...)."""
    ev = ev.lazy().with_columns(pl.when(_IS_VLLM).then(pl.col("body").str.extract_groups(VLLM_LINE)).alias("_vparts")) \
        .with_columns(_FIELDS).drop("_vparts").with_columns(_VDT).with_columns(_VDT_YEAR).drop("_vyear") \
        .collect(engine="in-memory", optimizations=pl.QueryOptFlags.none())
    kind = ev.get_column("kind")
    is_vllm = kind == "vllm"
    if is_vllm.any():
        msgs = ev.get_column("_vmsg").filter(is_vllm)
        refined = _KINDS.kinds(msgs.fill_null("") if msgs.null_count() else msgs)
        if isinstance(refined, list):
            kinds = kind.to_list()
            for j, k in zip(is_vllm.arg_true().to_list(), refined, strict=True):
                kinds[j] = k
            kind = pl.Series("kind", kinds, dtype=pl.String)
        else:
            kind = kind.clone().scatter(is_vllm.arg_true(), refined)
        ev.replace_column(ev.get_column_index("kind"), kind)
    proc = ev.get_column("_vproc")
    few = proc.len() <= FEW
    names = [n for n in (set(proc.to_list()) if few else proc.unique().to_list()) if n]
    labels = {n: label_of_process(n) for n in names}
    ev = ev.with_columns(pl.Series("_vrank", [labels.get(n) for n in proc.to_list()], dtype=pl.String) if few
                         else proc.replace_strict(labels, default=None, return_dtype=pl.String).alias("_vrank"))
    return ev.with_columns(_attrs(ev, labels).alias("_vattrs"))


def _attrs(ev: pl.DataFrame, labels: dict[str, str]) -> pl.Series:
    """JSON attributes of the vLLM records: the pid of a process that is one rank or engine core (so a
    stack dump of that pid can be named by it), a request id, a start line's settings, the seconds a
    shared-memory wait reports."""
    unique = [n for n, lbl in labels.items() if is_unique_process(lbl)]
    kind = ev.get_column("kind")
    present = set(kind.to_list() if kind.len() <= FEW else kind.unique().to_list())
    parts = []                  # (a part that is null on every row is left out: the same join)
    if unique:
        parts.append(pl.when(pl.col("_vproc").is_in(unique)).then(
            pl.concat_str([pl.lit('"pid": '), pl.col("_vpid"), pl.lit(', "process": "'), pl.col("_vproc"), pl.lit('"')])))
    if present & {"vllm_request", "vllm_request_done"}:
        parts.append(pl.when(pl.col("kind").is_in(["vllm_request", "vllm_request_done"])).then(
            pl.concat_str([pl.lit('"request": "'), pl.col("_vmsg").str.extract(r"request ([\w.-]+)", 1), pl.lit('"')])))
    if "vllm_shm_wait" in present:
        parts.append(pl.when(pl.col("kind") == "vllm_shm_wait").then(
            pl.concat_str([pl.lit('"waited_s": '), pl.col("_vmsg").str.extract(r"found in (\d+) second", 1)])))
    if parts:
        body = pl.concat_list(parts).list.drop_nulls().list.join(", ")
        attrs = ev.select(pl.when(body.str.len_bytes() > 0).then(pl.concat_str([pl.lit("{"), body, pl.lit("}")]))
                          .alias("a")).get_column("a")
    else:
        attrs = pl.Series("a", [None] * ev.height, dtype=pl.String)
    starts = kind == "vllm_start"
    if not starts.any():
        return attrs
    fixed = attrs.to_list()
    for r, msg in zip(starts.arg_true().to_list(), ev.get_column("_vmsg").filter(starts).to_list(), strict=True):
        fixed[r] = json.dumps({**json.loads(fixed[r] or "{}"), **start_facts(msg or "")})
    return pl.Series("a", fixed, dtype=pl.String)


def start_facts(msg: str) -> dict[str, Any]:
    """Settings a start line states, named as engine_facts names them: the version, tp/pp/dp sizes, model,
    port (``non-default args: {'model': ..., 'tensor_parallel_size': 4}`` or ``... with config:
    model='...', tensor_parallel_size=4, ...``)."""
    import re

    out: dict[str, Any] = {}
    m = VERSION_RE.search(msg)
    if m:
        out["version"] = m.group(1)
    for key, name in START_KEYS.items():
        m = re.search(rf"(?<![\w.])'?{key}'?\s*[:=]\s*'?([^',}}\s)]+)", msg)
        if m:
            v = m.group(1)
            out[name] = int(v) if v.isdigit() else v
    return out


def _num(rx: str, dtype: type[pl.DataType]) -> pl.Expr:
    return pl.col("message").str.extract(rx, 1).cast(dtype, strict=False)


def stats_rows(events: pl.DataFrame) -> pl.DataFrame | None:
    """One typed row per stats line (V0 ``Avg prompt throughput: ..., Running: N reqs, Swapped: M reqs,
    Pending: P reqs, GPU KV cache usage: x%, CPU KV cache usage: y%.``; V1 ``Engine 000: ..., Running: N
    reqs, Waiting: M reqs, GPU KV cache usage: x%, Prefix cache hit rate: y%``, or ``N Engines
    Aggregated: ...``).  Keys are found by name, never by position (later releases add optional parts)."""
    s = events.filter(pl.col("kind") == "vllm_stats")
    if not s.height:
        return None
    v0 = pl.col("message").str.contains(r"(?:Pending|Swapped): \d+ reqs")
    return s.select(
        "engine", "path", "line", pl.col("ts").cast(pl.Datetime("us")),
        pl.col("rank").alias("process"),
        _num(r"^Engine (\d+): ", pl.Int64).alias("engine_index"),
        _num(r"^(\d+) Engines Aggregated: ", pl.Int64).alias("engines"),
        pl.when(v0).then(pl.lit("v0")).otherwise(pl.lit("v1")).alias("format"),
        _num(r"Avg prompt throughput: ([\d.]+)", pl.Float64).alias("prompt_tps"),
        _num(r"Avg generation throughput: ([\d.]+)", pl.Float64).alias("gen_tps"),
        _num(r"Running: (\d+) reqs", pl.Int64).alias("running"),
        _num(r"(?:Waiting|Pending): (\d+) reqs", pl.Int64).alias("waiting"),
        _num(r"Swapped: (\d+) reqs", pl.Int64).alias("swapped"),
        _num(r"KV cache usage: ([\d.]+)%", pl.Float64).alias("kv_usage"),
        pl.when(v0).then(_num(r", CPU KV cache usage: ([\d.]+)%", pl.Float64)).alias("cpu_kv_usage"),
        _num(r"Prefix cache hit rate: (?:GPU: )?([\d.]+)%", pl.Float64).alias("prefix_hit"),
    )
