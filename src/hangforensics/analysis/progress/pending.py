"""Why a silence is a stall: the reasons a judge (``stalls`` for SGLang and torch jobs, ``vllm_stalls`` for
vLLM) collects, in words, with the lines they rest on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Judgement:
    """Why a silence is a stall: reasons in words, the lines they rest on, and whether any is hard
    (a watchdog or a timeout: the engine itself says it is stuck)."""

    reasons: list[str] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    hard: bool = False

    def add(self, reason: str, path: str | None, line: int | None, hard: bool = False) -> None:
        self.reasons.append(reason)
        if path:
            self.evidence.append({"file": path, "line": line})
        self.hard = self.hard or hard
