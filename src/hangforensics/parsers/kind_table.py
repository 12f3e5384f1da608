"""A table of record kinds (name, regex; the first regex a text contains names its kind) searched as one regex.

The parsers type records by such tables (``sglang_patterns.MESSAGE_KINDS``, ``NON_PREFIXED_KINDS``,
``vllm_patterns.KINDS``).  A chain of ``when(contains(regex))`` per pattern costs a regex per pattern: polars
keeps only the last 32 regexes it compiled (per thread), fewer than a chunk of a log uses with the tables'
patterns apart, so every chunk compiled most of them again (the bulk of a small chunk's cost).  Here the
table is one regex: alternative j is 'any text, then pattern j' with an empty marker group ``k<j>`` at its
end.  It matches at the text's start, and of the alternatives that match there the first wins (leftmost-first:
the one a backtracking engine would take), so the marker set is that of the table's first pattern the text
contains: the chain's answer.
"""

from __future__ import annotations

import re

import polars as pl

# up to this many texts, the kinds are read off the markers in Python (fewer polars operations)
FEW = 256
# a named group of a pattern, made a plain group (names must be unique in the one regex; its markers are named)
_GROUP_NAME = re.compile(r"(?<!\\)\(\?P?<(?![=!])\w+>")


def first_match_regex(table: list[tuple[str, str]]) -> str:
    alts = (f"{'' if _anchored(rx) else '(?s:.*?)'}(?:{_GROUP_NAME.sub('(?:', rx)})(?P<k{j}>)"
            for j, (_, rx) in enumerate(table))
    return "^(?:" + "|".join(alts) + ")"


def _anchored(rx: str) -> bool:
    """Whether every match of ``rx`` starts at the text's start (its alternative then needs no 'any text'
    before it: a long text that does not start so is passed at once): it starts with '^' and has no '|'
    outside a group or class.  (No in doubt: the 'any text' is always right.)"""
    if not rx.startswith("^") or "(?m" in rx:
        return False
    depth, i, in_class = 0, 1, False
    while i < len(rx):
        ch = rx[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
            elif ch == "[":             # a nested class, set operations: not worth reading
                return False
        elif ch == "[":
            in_class = True
            i += 1 + rx.startswith("^", i + 1)
            i += rx.startswith("]", i)          # a ']' first in a class is itself
            continue
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            return False
        i += 1
    return True


class KindTable:
    """A kind table (name, pattern) in order, with the kind of a text none of its patterns matches.

    ``common``: the kinds most texts have (a vLLM log's bare access lines, a training job's step lines), each
    told in turn by its own pattern and those before it in the table, two tests without captures: the one
    regex's groups cost some 2 us a text (measured on a 40 MB vLLM log: 0.85 s of its 2.3 s parse).  A text
    that matches a kind's pattern and none before it is of that kind, the table's answer by construction; the
    others go through the one regex."""

    def __init__(self, table: list[tuple[str, str]], default: str | None, common: tuple[str, ...] = ()) -> None:
        self.table, self.default = table, default
        self.regex = first_match_regex(table)
        self.common: list[tuple[str, str, str | None]] = []
        for kind in common:
            j = next(j for j, (name, _) in enumerate(table) if name == kind)
            self.common.append((kind, table[j][1], first_match_regex(table[:j]) if j else None))

    def kinds(self, values: pl.Series) -> pl.Series | list[str | None]:
        """Each value's kind (a null value: the default): a list for few values, else a String Series."""
        n = values.len()
        at, rest = None, values                     # the values not typed yet (at: their places; None: all)
        out = None
        for name, rx, before in self.common:
            if rest.len() <= FEW:
                break
            hit = rest.str.contains(rx).fill_null(False)
            if before is not None and hit.any():
                hit = hit & ~rest.str.contains(before).fill_null(False)
            if not hit.any():
                continue
            places = pl.Series(range(n), dtype=pl.Int64) if at is None else at
            out = (pl.repeat(None, n, dtype=pl.String, eager=True) if out is None else out) \
                .scatter(places.filter(hit), name)
            at, rest = places.filter(~hit), rest.filter(~hit)
        if out is None:
            return self._table_kinds(values)
        if rest.len():
            assert at is not None
            out = out.scatter(at, pl.Series(self._table_kinds(rest), dtype=pl.String))
        return out

    def _table_kinds(self, values: pl.Series) -> pl.Series | list[str | None]:
        marks = values.str.extract_groups(self.regex).struct.unnest()
        n = values.len()
        # the kinds some value has (a text has one marker set, or none)
        found = [(f"k{j}", name) for j, (name, _) in enumerate(self.table) if marks.get_column(f"k{j}").null_count() < n]
        if n > FEW:
            if not found:
                return pl.Series([self.default] * n, dtype=pl.String)
            pick = pl.when(pl.col(found[0][0]).is_not_null()).then(pl.lit(found[0][1]))
            for col, name in found[1:]:
                pick = pick.when(pl.col(col).is_not_null()).then(pl.lit(name))
            return marks.select(pick.otherwise(pl.lit(self.default, dtype=pl.String))).to_series()
        kinds = [self.default] * n
        for col, name in reversed(found):           # (the first of the table last: it wins)
            for r, mark in enumerate(marks.get_column(col).to_list()):
                if mark is not None:
                    kinds[r] = name
        return kinds
