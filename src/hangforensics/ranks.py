"""Rank labels as SGLang writes them in its log prefix ('TP3', 'DP1 TP1 EP1', 'PP1 TP4')."""

from __future__ import annotations

import re

RANK_TAG_RE = re.compile(r"(DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d+)")


def rank_numbers(label: str) -> dict[str, int]:
    """'DP1 TP3 EP3' -> {'DP': 1, 'TP': 3, 'EP': 3}."""
    return {t: int(n) for t, n in RANK_TAG_RE.findall(label or "")}


def rank_key(label: str) -> tuple:
    """Sort key: DP, then PP, then TP number (so TP10 follows TP9)."""
    n = rank_numbers(label)
    return (n.get("DP", 0), n.get("PP", 0), n.get("TP", 0), label)
