"""What an engine's evidence knows about how to capture it next time, for ``capture.advice.capture_command``.

The engine summaries' capture-next list (interface.md §5) asks for the exact command; the facts come
from the evidence: the server's ``server_args`` (port, model path), a previous capture bundle of the
same engine (how it named the engine, which logs it was given), and what that evidence lacked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...capture.advice import capture_command
from ...store import Store


@dataclass
class CaptureFacts:
    """What the evidence says about capturing ``engine`` (every field optional)."""

    engine: str
    port: int | None = None
    model_path: str | None = None
    match: str | None = None              # the regex a previous capture named the engine with
    logs: list[str] = field(default_factory=list)   # log files a previous capture was given
    has_native: bool = False              # some dump already holds native frames
    snapshots: int = 0                    # most rounds of one capture bundle (0: no bundle)

    def command(self, repeat: int = 3, interval_s: float = 5.0) -> str:
        """The ``hangforensics capture`` command for the next hang of this engine."""
        return capture_command(port=self.port, model_path=self.model_path, match=self.match, native=True,
                               repeat=repeat, interval_s=interval_s, logs=self.logs, name=self.engine)


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def capture_facts(store: Store, engine: str) -> CaptureFacts:
    """Gather what the store knows about capturing ``engine``."""
    return capture_facts_all(store, [engine])[engine]


def capture_facts_all(store: Store, engines: list[str],
                      native: dict[str, int] | None = None) -> dict[str, CaptureFacts]:
    """``capture_facts`` of every engine of ``engines`` in a fixed number of queries; ``native`` (engine -> its
    native frames), when the caller has counted them already, saves one."""
    out = {e: CaptureFacts(e) for e in engines}
    # SGLang's server_args line holds both; vLLM's start lines split them (non-default args: port, model;
    # the engine's config line: model): the latest start's values, each from the line that states it
    for a in store.query(
            "SELECT engine, arg_max(json_extract_string(attrs, '$.port'), ts) FILTER (WHERE "
            "json_extract_string(attrs, '$.port') IS NOT NULL) AS port, arg_max(json_extract_string(attrs, "
            "'$.model_path'), ts) FILTER (WHERE json_extract_string(attrs, '$.model_path') IS NOT NULL) AS model "
            "FROM events WHERE list_contains(?, engine) AND kind IN ('server_args', 'vllm_start') "
            "AND ts IS NOT NULL GROUP BY engine", [engines]):
        out[a["engine"]].port, out[a["engine"]].model_path = _int(a["port"]), a["model"]
    for c in store.query("SELECT engine, selector, target, logs, rounds FROM captures WHERE list_contains(?, engine) "
                         "ORDER BY engine, started, rowid", [engines]):
        facts = out[c["engine"]]
        if c["selector"] == "port" and facts.port is None:
            facts.port = _int(c["target"])
        elif c["selector"] == "match" and not facts.match:
            facts.match = c["target"]
        facts.snapshots = max(facts.snapshots, c["rounds"] or 0)
        for tail in json.loads(c["logs"] or "[]"):
            # logs found through the engine's stdout are found again; ones given by hand must be given again
            if isinstance(tail, dict) and tail.get("origin") == "--logs" and tail.get("source") not in facts.logs:
                facts.logs.append(tail["source"])
    if native is None:
        native = native_frames(store, engines)
    for e, facts in out.items():
        facts.has_native = bool(native.get(e))
    return out


def native_frames(store: Store, engines: list[str]) -> dict[str, int]:
    """Engine -> how many native frames its dumps hold (engines with none are missing)."""
    return {r["engine"]: r["n"] for r in store.query(
        "SELECT s.engine, count(*) AS n FROM frames f JOIN stacks s ON s.dump_id = f.dump_id "
        "AND s.thread_id = f.thread_id WHERE list_contains(?, s.engine) AND f.native GROUP BY s.engine", [engines])}


def next_capture_command(store: Store, engine: str) -> str:
    """The exact ``hangforensics capture`` command that would collect, at the next hang, what ``engine``'s
    evidence lacked: every rank at once with native frames, repeated rounds (stuck or slow), its logs."""
    return capture_facts(store, engine).command()


def next_capture_commands(store: Store, engines: list[str],
                          native: dict[str, int] | None = None) -> dict[str, str]:
    """``next_capture_command`` of every engine of ``engines``, set-wise."""
    return {e: f.command() for e, f in capture_facts_all(store, engines, native).items()}
