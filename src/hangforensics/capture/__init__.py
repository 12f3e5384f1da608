"""``hangforensics capture``: snapshot a hung engine's process tree into a bundle ``report`` reads.

Stages, one module each: :mod:`.discover` (the process tree, roles and ranks), :mod:`.snapshot`
(one round: /proc facts, then py-spy on every process at once), :mod:`.collect` (rounds, GPU
samples, log tails, tool versions), :mod:`.bundle` (the archive layout) and :mod:`.manifest` (the
manifest's records, writer and :func:`read_manifest` for the ingest stage).
"""

from __future__ import annotations

from .collect import CaptureRequest, CaptureResult, capture_engine
from .errors import CaptureError, ManifestError, NoEngineError
from .manifest import (
    DumpRecord,
    Failure,
    LogTail,
    Manifest,
    ProcessEntry,
    ProcessFacts,
    Round,
    ToolInfo,
    read_manifest,
)

__all__ = [
    "CaptureError", "CaptureRequest", "CaptureResult", "DumpRecord", "Failure", "LogTail", "Manifest",
    "ManifestError", "NoEngineError", "ProcessEntry", "ProcessFacts", "Round", "ToolInfo", "capture_engine",
    "read_manifest",
]
