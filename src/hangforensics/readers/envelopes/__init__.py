"""Envelopes: how a collector or a person wrapped the evidence, detected per file and stripped.

interface.md §1 ("Evidence arrives wrapped") and sglang-formats.md §12.  This stage runs before any
parser: :func:`detect` reads the head of a file and returns an :class:`EnvelopeStack` (the layers,
outermost first); an :class:`Unwrapper` then takes the file chunk by chunk and hands on payload lines
with their physical line numbers, how many physical lines each stands for, and the envelope's time.

Layers (names go to ``sources.envelope``, joined with ``+``):

- collectors: ``kubectl`` (``--timestamps``), ``cri`` (containerd / CRI-O pod files, ``P``/``F``
  partial records rejoined), ``docker_json`` (json-file driver, partial records rejoined),
  ``journald`` (``short``, ``short-iso``, ``json``), ``syslog`` (RFC 5424, RFC 3164),
  ``fluentbit`` / ``vector`` (JSON lines), ``ansi`` (TTY escapes, ``\\r`` redraws), ``compose``;
- pastes: ``markdown`` (``> `` quotes, fences, ``<details>``, prose between fenced blocks),
  ``viewer_lineno``, ``viewer_ts`` (a viewer's time column, any precision), ``hard_wrap`` (a fixed width, or
  ``v<W>``: varying widths, cut mid-token), ``launcher`` (a multi-node launcher's ``<host> [stderr] `` on a
  message's first row, its wrapped rows joined), ``proc_tag``, ``indent``;
- a release's head: ``time_of_day`` (SGLang 2024: ``[04:40:55 TP0]``, the date put in from the file's time).

Nothing is lost: every physical line ends up in exactly one payload line (``span`` counts them) or in
``dropped`` (fence and tag lines, prose), with its original text.  Pure Python, no DuckDB.

Modules: ``detect`` (the stack from a file's head), ``unwrap`` (:class:`Unwrapper`), ``collectors`` and
``pastes`` (one class per layer), ``layers`` (what layers share), ``times`` (envelope clocks).
"""

from .detect import MAJORITY, detect, unwrap_all
from .layers import EVIDENCE, LINE_START, PAYLOAD_HEAD
from .unwrap import LAYER_NAMES, NONE, EnvelopeStack, Unwrapped, Unwrapper

__all__ = ["EVIDENCE", "LAYER_NAMES", "LINE_START", "MAJORITY", "NONE", "PAYLOAD_HEAD", "EnvelopeStack", "Unwrapped",
           "Unwrapper", "detect", "unwrap_all"]
