"""Naive Python datetimes as polars values, the same as polars makes them but without its fixed cost (some
40 us for each literal or column of datetimes: a parser's small chunk has several)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:                  # polars is imported where values are made: planning does not need it
    import polars as pl

_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)


# Python's datetime range in microseconds since 1970: 0001-01-01 to 9999-12-31 23:59:59.999999
FIRST_US = -62_135_596_800_000_000
LAST_US = 253_402_300_799_999_999


def micros_of(value: datetime) -> int:
    """A naive datetime as microseconds since 1970 (polars' ``Datetime("us")`` value)."""
    return (value - _EPOCH) // _US


def from_micros(value: int) -> datetime:
    """``micros_of``'s inverse."""
    return _EPOCH + value * _US


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


def micros(fraction: str | None) -> int:
    """The digits after a second's point to the microsecond (truncated, padded: '5' is 500000), 0 without."""
    return int(fraction[:6].ljust(6, "0")) if fraction else 0


def micros_expr(fraction: pl.Expr) -> pl.Expr:
    """``micros`` of a column of digit strings (null: 0)."""
    import polars as pl

    return fraction.str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int64, strict=False).fill_null(0)


def python_datetime(stamp: pl.Expr, fmt: str) -> pl.Expr:
    """``stamp`` ('YYYY-MM-DD?HH:MM:SS', 'T' or ' ' between) read by ``fmt`` as Python's ``datetime`` reads it:
    polars' reader also takes a leap second (as the next minute's first) and year 0, which Python refuses, so
    those are null (microseconds)."""
    import polars as pl

    return pl.when((stamp.str.slice(17, 2) != "60") & (stamp.str.slice(0, 4) != "0000")) \
        .then(stamp.str.to_datetime(fmt, time_unit="us", strict=False))
