"""Naive Python datetimes as polars values, the same as polars makes them but without its fixed cost (some
40 us for each literal or column of datetimes: a parser's small chunk has several)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:                  # polars is imported where values are made: planning does not need it
    import polars as pl

_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)


def datetime_lit(value: datetime) -> pl.Expr:
    """``pl.lit(value, dtype=pl.Datetime("us"))``."""
    import polars as pl

    if value.tzinfo is not None:
        return pl.lit(value, dtype=pl.Datetime("us"))
    return pl.lit((value - _EPOCH) // _US, dtype=pl.Int64).cast(pl.Datetime("us"))


def datetime_series(name: str, values: list[datetime | None] | pl.Series) -> pl.Series:
    """``pl.Series(name, values, dtype=pl.Datetime("us"))`` (a Series of them: itself, renamed)."""
    import polars as pl

    if isinstance(values, pl.Series):
        return values.alias(name).cast(pl.Datetime("us"))
    if any(v is not None and v.tzinfo is not None for v in values):
        return pl.Series(name, values, dtype=pl.Datetime("us"))
    return pl.Series(name, [None if v is None else (v - _EPOCH) // _US for v in values], dtype=pl.Int64) \
        .cast(pl.Datetime("us"))
