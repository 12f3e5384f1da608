"""Rank labels as SGLang writes them in its log prefix ('TP3', 'DP1 TP1 EP1', 'PP1 TP4'), and torch's
global ranks ('rank3') where the evidence knows only those (ProcessGroupNCCL lines, Flight Recorder)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# the rank names SGLang's prefix may hold
RANK_TAGS = "DP|PP|ATTN_CP|MOE_DP|TP|EP"
RANK_TAG_RE = re.compile(rf"({RANK_TAGS})(\d+)")
TORCH_RANK_RE = re.compile(r"^rank(\d+)$")


def rank_numbers(label: str) -> dict[str, int]:
    """'DP1 TP3 EP3' -> {'DP': 1, 'TP': 3, 'EP': 3}; 'rank5' -> {'rank': 5}."""
    m = TORCH_RANK_RE.match(label or "")
    if m:
        return {"rank": int(m.group(1))}
    return {t: int(n) for t, n in RANK_TAG_RE.findall(label or "")}


def rank_key(label: str) -> tuple:
    """Sort key: DP, then PP, then TP number (so TP10 follows TP9); torch ranks by number."""
    n = rank_numbers(label)
    return (n.get("DP", 0), n.get("PP", 0), n.get("TP", n.get("rank", 0)), label)


def label_global_rank(rank: int, labels: Iterable[str]) -> str:
    """The label to name torch global rank ``rank`` by: the engine's SGLang label whose TP number it is
    (plain tensor parallelism: global rank = TP rank; a PP/DP engine's numbering is not known, so its
    labels are used only when exactly one carries that TP number), else 'rankN'."""
    same = [lbl for lbl in labels if rank_numbers(lbl).get("TP") == rank]
    return same[0] if len(same) == 1 else f"rank{rank}"
