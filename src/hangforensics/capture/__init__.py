"""``hangforensics capture``: snapshot a hung engine's process tree into a bundle ``report`` reads.

Stages, one module each: :mod:`.discover` (the process tree, roles and ranks), :mod:`.snapshot`
(one round: /proc facts, then py-spy on every process at once), :mod:`.collect` (rounds, GPU
samples, log tails, tool versions), :mod:`.bundle` (the archive layout), :mod:`.manifest` (the
manifest's records, writer and :func:`read_manifest` for the ingest stage) and :mod:`.advice`
(the exact ``hangforensics capture`` command to run next time).

The names below load on first use: the ingest stage imports :mod:`.manifest` alone and must not
pay for the process-tree machinery (psutil, py-spy lookup) on every report.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "CaptureRequest": "collect", "CaptureResult": "collect", "capture_engine": "collect",
    "CaptureError": "errors", "ManifestError": "errors", "NoEngineError": "errors",
    "DumpRecord": "manifest", "Failure": "manifest", "LogTail": "manifest", "Manifest": "manifest",
    "ProcessEntry": "manifest", "ProcessFacts": "manifest", "Round": "manifest", "ToolInfo": "manifest",
    "read_manifest": "manifest", "capture_command": "advice",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value          # later lookups skip this function
    return value
