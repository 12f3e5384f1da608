"""nvidia-smi CSV samples: ``nvidia-smi --query-gpu=timestamp,index,utilization.gpu,power.draw,memory.used --format=csv``.

Header ``timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]`` (``noheader`` /
``nounits`` variants accepted when the column order is the default one); rows like
``2026/04/02 12:16:01.123, 3, 0 %, 71.52 W, 61234 MiB``.  Columns are found by name,
values are cast in polars expressions.  GPU index maps to a rank through
``base_gpu_id`` and ``gpu_id_step`` from server_args (the view ``gpu_rank_samples``).
"""

from __future__ import annotations

import re
from typing import Any

HEADER_RE = re.compile(r"^\s*timestamp\s*,\s*index\s*,", re.I)
ROW_RE = re.compile(r"^\s*\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s*,\s*\d+\s*,")
DEFAULT_COLUMNS = ["timestamp", "index", "utilization.gpu", "power.draw", "memory.used"]


def looks_like_nvidia_smi(head_lines: list[str]) -> bool:
    lines = [s for s in head_lines if s.strip()][:5]
    return bool(lines) and (bool(HEADER_RE.match(lines[0])) or all(ROW_RE.match(s) for s in lines))


def _columns(header: str) -> list[str]:
    return [re.sub(r"\s*\[.*?\]\s*$", "", c.strip()).lower() for c in header.split(",")]


def parse_samples(lines: list[str], first_line: int, engine: str, path: str) -> tuple[Any, Any]:
    """(samples, unparsed) polars frames for one chunk of a CSV file."""
    import polars as pl
    cols = DEFAULT_COLUMNS
    start = 0
    if lines and HEADER_RE.match(lines[0]):
        cols = _columns(lines[0])
        start = 1
    df = pl.DataFrame({"text": pl.Series(lines, dtype=pl.String)}).with_row_index("i").with_columns(
        (pl.col("i").cast(pl.Int64) + first_line).alias("line"))
    body = df.slice(start)
    parts = pl.col("text").str.split(",")
    fields = {name: parts.list.get(k, null_on_oob=True).str.strip_chars() for k, name in enumerate(cols)}

    def num(name: str) -> Any:
        e = fields.get(name)
        if e is None:
            return pl.lit(None, dtype=pl.Float64)
        return e.str.extract(r"^(-?[\d.]+)", 1).cast(pl.Float64, strict=False)

    ts = fields.get("timestamp", pl.lit(None, dtype=pl.String))
    parsed = body.with_columns(
        ts.str.to_datetime("%Y/%m/%d %H:%M:%S%.f", strict=False).alias("ts"),
        fields.get("index", pl.lit(None, dtype=pl.String)).cast(pl.Int32, strict=False).alias("gpu_index"),
        num("utilization.gpu").alias("util_pct"),
        num("power.draw").alias("power_w"),
        num("memory.used").alias("mem_mib"),
    )
    ok = pl.col("ts").is_not_null() & pl.col("gpu_index").is_not_null()
    samples = parsed.filter(ok).select(
        pl.lit(engine).alias("engine"), pl.lit(path).alias("path"), "line", "ts", "gpu_index", "util_pct",
        "power_w", "mem_mib")
    bad = parsed.filter(~ok & (pl.col("text").str.strip_chars() != "")).select(
        pl.lit(engine).alias("engine"), pl.lit(path).alias("path"), "line", "text")
    return samples, bad
