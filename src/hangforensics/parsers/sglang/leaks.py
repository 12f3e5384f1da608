"""Memory-check / leak text of every release (sglang-formats.md §4), with the context it was printed in.

The context decides what the numbers mean: the idle-path check is a real
invariant; the same check run from a watchdog dump (a batch in flight) counts
the in-flight batch's own pages as "leaked" (§4.4).
"""

from __future__ import annotations

import re
from typing import Any

PAIR_RE = re.compile(r"([A-Za-z_][\w.()\[\]]*)=(\{[^}]*\}|None|-?\d+(?:\.\d+)?)(?=[,\s)]|$)")
LEAK_MARKERS = ("memory leak detected", "leaked_full_pages", "leaked_mamba_pages", "Mem Leak Detected",
                "[full] total=", "full_leaked=", "KV cache pool leak detected")

# normalised key (last dotted part, no '()') -> column
KEYMAP = {
    "max_total_num_tokens": "total_size", "max_total_num_token": "total_size", "total": "total_size",
    "total_size": "total_size",
    "size": "total_size", "full_tokens_per_layer": "total_size",
    "available_size": "available_size", "available": "available_size", "full_available_size": "available_size",
    "evictable_size": "evictable_size", "evictable": "evictable_size", "full_evictable_size": "evictable_size",
    "protected_size": "protected_size", "protected": "protected_size", "full_protected_size": "protected_size",
    "full_protected": "protected_size",
    "session_held": "session_held", "session_held_full": "session_held",
    "batch_size": "in_flight_batch_size",
}
WATCHDOG_FRAMES = ("dump_info", "_watchdog", "watchdog_thread", "WatchdogRaw")


def _count(v: str) -> int | None:
    if v == "None":
        return None
    if v.startswith("{"):
        return len(re.findall(r"-?\d+", v))
    return None


_PART_RE = re.compile(r"\.(available_size|evictable_size)\(\)=(\d+)")


def _sum_of_parts(lines: list[str], vals: dict[str, Any]) -> None:
    """0.4.6's check prints ``available_size`` as the allocator's free tokens *plus* the tree's evictable ones,
    then each part on a line of its own (``self.token_to_kv_pool_allocator.available_size()=A``,
    ``self.tree_cache.evictable_size()=E``).  Where the printed figure is exactly that sum, the free tokens
    are the allocator's part (the evictable ones are not counted twice)."""
    parts = dict(m.groups() for s in lines[1:] for m in _PART_RE.finditer(s) if "cur_batch" not in s)
    if "available_size" in parts and "evictable_size" in parts and vals.get("available_size") is not None \
            and int(parts["available_size"]) + int(parts["evictable_size"]) == vals["available_size"] \
            and int(parts["evictable_size"]) > 0:
        vals["available_size"] = int(parts["available_size"])
        vals["evictable_size"] = int(parts["evictable_size"])


def leak_from_record(kind: str, lines: list[str]) -> dict[str, Any] | None:
    """A leak_reports row (without engine/path/line/ts/rank) or None when the record holds no check."""
    text = "\n".join(lines)
    vals: dict[str, Any] = {}
    leaked: dict[str, int | None] = {}
    for s in lines:
        if "cur_batch.reqs=" in s or "Req(" in s:
            continue
        for k, v in PAIR_RE.findall(s):
            norm = k.split(".")[-1].replace("()", "")
            if norm in ("leaked_full_pages", "leaked_mamba_pages"):
                leaked.setdefault(norm, _count(v))
                continue
            col = KEYMAP.get(norm)
            if col and col not in vals and not v.startswith("{") and v != "None":
                vals[col] = int(float(v))
    _sum_of_parts(lines, vals)
    marked = any(m in text for m in LEAK_MARKERS)
    if not marked and not ("total_size" in vals and "available_size" in vals):
        return None
    if kind in ("watchdog_debug_info", "watchdog_batch_info"):
        context = "watchdog"
    elif kind == "mem_leak_busy":
        context = "busy"
    elif kind == "scheduler_exception":
        if not marked:
            return None
        if any(f in text for f in WATCHDOG_FRAMES):
            context = "watchdog"
        elif "Mem Leak Detected" in text or "self_check_during_busy" in text:
            context = "busy"
        else:
            context = "idle"
    else:  # mem_leak_warning: the non-strict idle check logs instead of raising
        context = "idle"
    # The form is read from the check's own lines, not from traceback paths (swa_radix_cache.py, ...).
    text = "\n".join(s for s in lines if not s.startswith(("  File ", "    ")))
    # not req_to_token_pool's (the literal test first: the search alone scans a watchdog dump's long lines)
    if "[full] total=" in text or ("pool memory leak" in text and re.search(r"(?<![\w-])pool memory leak", text)):
        form = "pool"
    elif leaked or "mamba" in text:
        form = "mamba"
    elif "swa" in text:
        form = "hybrid_swa"
    elif "req_to_token_pool" in text:
        form = "req_pool"
    elif "Mem Leak Detected" in text:
        form = "busy_assert"
    else:
        form = "radix"
    total = vals.get("total_size")
    shortfall = None
    if total is not None and "available_size" in vals:
        shortfall = total - (vals.get("available_size", 0) + vals.get("evictable_size", 0)
                             + vals.get("protected_size", 0) + vals.get("session_held", 0))
    msg = next((s for s in lines if any(m in s for m in LEAK_MARKERS)), None) or next(
        (s for s in lines if "available" in s), lines[0])
    return {
        "context": context, "form": form,
        "leaked_full_pages": leaked.get("leaked_full_pages"),
        "leaked_mamba_pages": leaked.get("leaked_mamba_pages"),
        "total_size": total, "available_size": vals.get("available_size"),
        "evictable_size": vals.get("evictable_size"), "protected_size": vals.get("protected_size"),
        "shortfall": shortfall, "in_flight_batch_size": vals.get("in_flight_batch_size"),
        "message": msg[:1000],
    }
