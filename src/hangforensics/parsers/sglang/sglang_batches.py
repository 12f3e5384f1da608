"""Prefill/Decode batch lines -> ``batches`` rows: the bulk of a busy log, so the fields are typed with as
few passes over the lines as possible.

A release prints its batch lines from a few fixed templates (the same keys in the same order).  The keys
of one line are read in Python and turned into one anchored regex whose groups are the values; one
``extract_groups`` then types every line of that template, and the lines it does not match try the next
template.  What no template takes (unusual keys, a key twice, empty values) goes through the general
extraction, one search per key (``_generic``).  Both give the same values: a template is used only where
every comma of the line separates its fields, so each ``, key: value`` the general search would find is
one of the template's fields.
"""

from __future__ import annotations

import re
from functools import lru_cache

import polars as pl

from .sglang_patterns import BATCH_FLOAT_KEYS, BATCH_INT_KEYS, PENDING_KEYS

HEAD = r"^(?:Prefill|Decode) batch(?: \[\d+\])?[.,] ?"
_HEAD_GROUPS = r"^(?P<bkind>Prefill|Decode) batch(?: \[(?P<iter>\d+)\])?[.,] ?"
GRAPH_KEYS = {f"{d} graph" for d in ("cuda", "cpu", "npu", "musa", "xpu", "hpu")}
MAX_TEMPLATES = 6        # more distinct templates in one chunk: the rest take the general path
# A template's values: printable ASCII without comma or blank, so that stripping them changes nothing (a
# value with a blank or a non-ASCII character takes the general path).
VALUE = r"[\x21-\x2b\x2d-\x7e]+"
_VALUE = re.compile(VALUE)
_PD = r", #(?:prealloc|transfer|inflight|bootstrap|unbootstrapped|transferring|host-receive)-req: "


def _key_regex(keys: list[str]) -> str:
    """Value of the first of ``keys`` in a batch body that starts with ', '."""
    alt = "|".join(re.escape(k) for k in keys)
    return rf", (?:{alt}): ([^,]+)"


def template(msg: str) -> tuple[str, list[str]] | None:
    """(regex, keys) of the template of one batch line, or None when the line does not fit one (a key
    without a value, a comma inside a field, a key twice, two keys for one column)."""
    m = re.match(HEAD, msg)
    if m is None:
        return None
    body = msg[m.end():].rstrip(", ")
    if not body:
        return None
    keys = []
    for field in body.split(", "):
        key, sep, value = field.partition(": ")
        if not sep or not _VALUE.fullmatch(value):
            return None
        keys.append(key)
    if len(set(keys)) != len(keys):
        return None
    for alts in [*BATCH_INT_KEYS.values(), *BATCH_FLOAT_KEYS.values(), GRAPH_KEYS]:
        if sum(k in alts for k in keys) > 1:
            return None
    fields = ", ".join(f"{re.escape(k)}: (?P<f{j}>{VALUE})" for j, k in enumerate(keys))
    return f"{_HEAD_GROUPS}{fields}[, ]*$", keys


def _value(keys: list[str], alts: list[str] | set[str]) -> pl.Expr | None:
    j = next((j for j, k in enumerate(keys) if k in alts), None)
    return None if j is None else pl.col(f"f{j}")


def _collect(lf: pl.LazyFrame) -> pl.DataFrame:
    """Steps run as one query (a polars operation's fixed cost is most of a few lines' cost)."""
    return lf.collect(engine="in-memory", optimizations=pl.QueryOptFlags.none())


@lru_cache(maxsize=64)
def _typed(keys: tuple[str, ...]) -> list[pl.Expr]:
    """The batches columns of template rows (values in columns f0, f1, ...), cast as ``_generic`` casts
    (without its strip: a template's values hold no blank)."""
    cols: list[pl.Expr] = [pl.col(c) for c in CTX] + [pl.col("bkind").alias("batch_kind"),
                           pl.col("iter").cast(pl.Int64, strict=False).alias("forward_iter")]
    for col, alts in BATCH_INT_KEYS.items():
        v = _value(keys, alts)
        cols.append((pl.lit(None, dtype=pl.Int64) if v is None
                     else v.cast(pl.Int64, strict=False)).alias(col))
    for col, alts in BATCH_FLOAT_KEYS.items():
        v = _value(keys, alts)
        cols.append((pl.lit(None, dtype=pl.Float64) if v is None else v.cast(pl.Float64, strict=False)).alias(col))
    g = _value(keys, GRAPH_KEYS)
    # the general search reads '(True|False)' right after the key: a value that starts with either
    cols.append((pl.lit(None, dtype=pl.Boolean) if g is None
                 else pl.when(g.str.starts_with("True")).then(True)
                 .when(g.str.starts_with("False")).then(False)).alias("graph"))
    pend = [_value(keys, [k]) for k in PENDING_KEYS]
    if any(v is not None for v in pend):
        cols.append(pl.sum_horizontal([pl.lit(None, dtype=pl.Int64) if v is None
                                       else v.cast(pl.Int64, strict=False) for v in pend])
                    .alias("pending_req"))
    else:
        cols.append(pl.lit(None, dtype=pl.Int64).alias("pending_req"))
    return cols


CTX = ("engine", "path", "line", "ts", "rank")


def batch_rows(b: pl.DataFrame, ctx_cols: list[pl.Expr]) -> pl.DataFrame:
    """``batches`` rows of the batch records ``b`` (columns msg, line, ...); ``ctx_cols``: the leading
    columns (CTX: engine, path, line, ts, rank) as expressions over ``b``."""
    parts: list[pl.DataFrame] = []
    rest = b
    for _ in range(MAX_TEMPLATES):
        if not rest.height:
            break
        t = template(rest.get_column("msg")[0])
        if t is None:
            break
        regex, keys = t
        got = _collect(rest.lazy().select(*ctx_cols, pl.col("msg").str.extract_groups(regex).alias("_g")).unnest("_g"))
        missed = got.get_column("bkind").null_count()
        if missed == got.height:
            break
        if not missed:                  # (every line of this template)
            parts.append(_collect(got.lazy().select(_typed(tuple(keys)))))
            rest = rest.clear()
            break
        hit = got.get_column("bkind").is_not_null()
        parts.append(_collect(got.lazy().filter(hit).select(_typed(tuple(keys)))))
        rest = rest.filter(~hit)
    if rest.height:
        parts.append(_generic(rest, ctx_cols))
    out = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical_relaxed").sort("line")
    return out


def _generic(b: pl.DataFrame, ctx_cols: list[pl.Expr]) -> pl.DataFrame:
    """Every key found by a literal ', key: ' (never by position): any batch line, whatever its keys."""
    head = pl.col("msg").str.extract(HEAD, 0)
    b = b.with_columns(
        pl.col("msg").str.slice(0, 7).str.strip_chars_end().alias("bkind"),
        pl.col("msg").str.extract(r"^\w+ batch \[(\d+)\]", 1).alias("iter"),
        (pl.lit(", ") + pl.col("msg").str.slice(head.str.len_chars()).str.strip_chars_end(", ")).alias("bbody"),
    )
    body = pl.col("bbody")
    cols: list[pl.Expr] = [*ctx_cols, pl.col("bkind").alias("batch_kind"),
                           pl.col("iter").cast(pl.Int64, strict=False).alias("forward_iter")]
    for col, keys in BATCH_INT_KEYS.items():
        cols.append(body.str.extract(_key_regex(keys), 1).str.strip_chars().cast(pl.Int64, strict=False).alias(col))
    for col, keys in BATCH_FLOAT_KEYS.items():
        cols.append(body.str.extract(_key_regex(keys), 1).str.strip_chars()
                    .cast(pl.Float64, strict=False).alias(col))
    cols.append(body.str.extract(r", (?:cuda|cpu|npu|musa|xpu|hpu) graph: (True|False)", 1).eq("True").alias("graph"))
    bt = b.select(cols)
    # PD queue counters appear only on disaggregated engines: extract them on those lines alone.
    pd_lines = b.filter(body.str.contains(_PD))
    if not pd_lines.height:
        return bt.with_columns(pl.lit(None, dtype=pl.Int64).alias("pending_req"))
    pend = [body.str.extract(_key_regex([k]), 1).str.strip_chars().cast(pl.Int64, strict=False)
            for k in PENDING_KEYS]
    pd_sum = pd_lines.select(pl.col("line"), pl.sum_horizontal(pend).alias("pending_req"))
    return bt.join(pd_sum, on="line", how="left", maintain_order="left")
