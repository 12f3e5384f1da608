"""Renumbering a parser's rows from payload lines to physical lines.

Parsers number the lines they are given consecutively (``first + i``).  Behind an envelope that joined
split records or dropped lines, payload line ``i`` is physical line ``lines[i]``: this maps every row's
line columns (and the stack dump ids built from them) to the physical lines, and gives each row the
envelope's time of its line (``collected_ts``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from .datetimes import datetime_series

if TYPE_CHECKING:                  # polars is imported where rows are renumbered: planning does not need it
    import polars as pl


FEW = 256               # up to this many rows, ``frame`` looks lines up in Python


class LineMap:
    """Payload line ``first + i`` -> physical line ``lines[i]`` and collected time ``collected[i]``."""

    def __init__(self, first: int, lines: list[int], collected: list[datetime | None] | None = None) -> None:
        self.first = first
        self.lines = lines
        self.collected = collected
        self._lines_s: pl.Series | None = None
        self._ts_s: pl.Series | None = None

    def line(self, v: int | None) -> int | None:
        if v is None:
            return None
        i = v - self.first
        return self.lines[i] if 0 <= i < len(self.lines) else v

    def ts(self, v: int | None) -> datetime | None:
        if v is None or self.collected is None:
            return None
        i = v - self.first
        return self.collected[i] if 0 <= i < len(self.collected) else None

    def frame(self, df: pl.DataFrame, cols: tuple[str, ...] = ("line",), collected: bool = False) -> pl.DataFrame:
        """``df`` with its line columns renumbered (and ``collected_ts`` by its ``line``)."""
        import polars as pl

        if not df.height:
            return df
        if df.height <= FEW:
            done = self._few(df, cols, collected)
            if done is not None:
                return done
        if self._lines_s is None:
            self._lines_s = pl.Series(self.lines, dtype=pl.Int64)
        idx = {c: (pl.col(c) - self.first) for c in cols if c in df.columns}
        exprs = []
        if collected and self.collected is not None:
            if self._ts_s is None:
                self._ts_s = pl.Series(self.collected, dtype=pl.Datetime("us"))
            exprs.append(pl.lit(self._ts_s).gather(idx["line"]).alias("collected_ts"))
        exprs += [pl.lit(self._lines_s).gather(e).alias(c) for c, e in idx.items()]
        return df.with_columns(exprs)

    def _few(self, df: pl.DataFrame, cols: tuple[str, ...], collected: bool) -> pl.DataFrame | None:
        """``frame`` of a few rows, looked up in Python (a polars operation costs more); None when a line is
        not in the map (``frame``'s polars lookup says what then)."""
        import polars as pl

        values = {c: df.get_column(c).to_list() for c in cols if c in df.columns}
        n = len(self.lines) if not collected or self.collected is None else min(len(self.lines), len(self.collected))
        if any(v is not None and not 0 <= v - self.first < n for vs in values.values() for v in vs):
            return None
        out = []
        if collected and self.collected is not None:
            ts = self.collected
            out.append(datetime_series("collected_ts", [None if v is None else ts[v - self.first] for v in values["line"]]))
        out += [pl.Series(c, [None if v is None else self.lines[v - self.first] for v in vs], dtype=pl.Int64)
                for c, vs in values.items()]
        return df.with_columns(out)

    def dicts(self, rows: list[dict[str, Any]], cols: tuple[str, ...] = ("line",), collected: bool = False,
              id_prefix: str | None = None) -> list[dict[str, Any]]:
        """Rows renumbered in place; ``id_prefix``: also the ``dump_id`` values built as prefix + line, and the
        ``thread_id`` of a thread whose header was cut (``?`` + its first line: ``pyspy.CONTINUATION_TID``)."""
        for r in rows:
            if collected and self.collected is not None:
                r["collected_ts"] = self.ts(r.get("line"))
            for c in cols:
                if c in r:
                    r[c] = self.line(r[c])
            if id_prefix is not None and isinstance(r.get("dump_id"), str):
                r["dump_id"] = self.dump_id(r["dump_id"], id_prefix)
            tid = r.get("thread_id") if id_prefix is not None else None
            if isinstance(tid, str) and tid[:1] == "?" and tid[1:].isdigit():
                r["thread_id"] = f"?{self.line(int(tid[1:]))}"
        return rows

    def dump_id(self, did: str, prefix: str) -> str:
        """``<prefix><line>[#n]`` with the line renumbered (the id of a dump embedded at that line)."""
        if not did.startswith(prefix):
            return did
        num, sep, rest = did[len(prefix):].partition("#")
        if not num.isdigit():
            return did
        return f"{prefix}{self.line(int(num))}{sep}{rest}"
