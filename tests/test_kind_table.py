"""Kind tables (parsers/kind_table.py): the table's first pattern a text contains names its kind, whichever
way the table is searched: as one regex, or with its ``common`` kinds told first, each by its own pattern."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl

from hangforensics.parsers.kind_table import FEW, KindTable
from hangforensics.parsers.sglang.sglang_patterns import BARE_ACCESS, NON_PREFIXED_KINDS

DATA = Path(__file__).resolve().parent / "data"


def _first_match(table: list[tuple[str, str]], default: str | None, texts: list[str]) -> list[str | None]:
    """The chain's answer, one pattern at a time (what the table means)."""
    import re

    return [next((name for name, rx in table if re.search(rx, t)), default) for t in texts]


def _corpus_lines(n: int, seed: int) -> list[str]:
    """Lines of the test corpora's logs, bare access lines among them (a vLLM log's bulk)."""
    lines: list[str] = []
    for log in sorted(DATA.glob("*/fleet/*/*.log"))[:40]:
        lines += log.read_text(errors="replace").splitlines()[:300]
    r = random.Random(seed)
    lines += [f'INFO:     10.0.0.{r.randint(1, 9)}:5000 - "POST /v1/completions HTTP/1.1" 200 OK' for _ in range(n)]
    lines += [f'(APIServer pid=7) WARNING:  10.0.0.1:1 - "GET /health HTTP/1.0" {r.choice([200, 503])} x'
              for _ in range(n // 4)]
    r.shuffle(lines)
    return lines


def test_the_common_kind_told_first_gives_the_tables_answer() -> None:
    texts = _corpus_lines(3000, 1)
    assert len(texts) > FEW
    plain, common = KindTable(NON_PREFIXED_KINDS, None), KindTable(NON_PREFIXED_KINDS, None, common=("access",))
    series = pl.Series(texts, dtype=pl.String)
    got = common.kinds(series)
    assert list(got) == list(plain.kinds(series))
    assert list(got).count("access") >= 3000


def test_a_pattern_before_the_common_one_still_wins() -> None:
    """Texts of the common kind that an earlier pattern matches too are that pattern's (the table's order)."""
    table = [("health", r'"GET /health'), ("access", BARE_ACCESS), ("post", r"POST")]
    texts = _corpus_lines(1000, 2) + [None]         # (a null value: the default)
    series = pl.Series(texts, dtype=pl.String)
    got = list(KindTable(table, "other", common=("access",)).kinds(series))
    assert got == [*_first_match(table, "other", texts[:-1]), "other"]
    assert "health" in got and "access" in got and "post" in got


def test_several_common_kinds_told_in_turn_give_the_tables_answer() -> None:
    """A training job's step lines and a server's access lines, each kind told in turn by its own pattern on
    the texts the kinds before it left: the table's answer, also where a pattern between the two, or before
    the first, matches a step line first."""
    r = random.Random(3)
    steps = [f"2026-12-04 10:00:{k % 60:02d},{k % 1000:03d} INFO [rank{k % 8}] step {k} done" for k in range(2000)]
    posts = [f"2026-12-04 10:00:00,000 POST step {k}" for k in range(300)]
    texts = _corpus_lines(1500, 4) + steps + posts
    r.shuffle(texts)
    table = [("health", r'"GET /health'), ("access", BARE_ACCESS), ("post", r"POST"), ("step", r"\bstep \d+")]
    series = pl.Series(texts, dtype=pl.String)
    got = list(KindTable(table, "other", common=("access", "step")).kinds(series))
    assert got == _first_match(table, "other", texts)
    assert got.count("step") >= 2000 and got.count("post") >= 300 and got.count("access") >= 1500
    real = list(KindTable(NON_PREFIXED_KINDS, None, common=("access", "train_step")).kinds(series))
    assert real == list(KindTable(NON_PREFIXED_KINDS, None).kinds(series)) and real.count("train_step") >= 2000
