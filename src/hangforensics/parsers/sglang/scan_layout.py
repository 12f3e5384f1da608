"""What the compiled scanner (``sglang_scan``) and its callers share, without numba: the kinds it gives each
line and the order of its value columns (the scanner built ahead of time, ``scan_aot``, is used without
importing numba at all)."""

from __future__ import annotations

from .sglang_patterns import BATCH_FLOAT_KEYS, BATCH_INT_KEYS, PENDING_KEYS

REST, BATCH, ACCESS, BATCH_SLOW, DATED = 0, 1, 2, 3, 4   # DATED: a plain prefix, a valid time, another message
ACCESS_BARE = 5     # an access line printed without a time (uvicorn's own format: vLLM's API server, SGLang's)

INT_COLS = list(BATCH_INT_KEYS)
FLOAT_COLS = list(BATCH_FLOAT_KEYS)
NINT = len(INT_COLS)
NFLOAT = len(FLOAT_COLS)
NPEND = len(PENDING_KEYS)

# At most this many distinct rank prefixes per chunk are interned (a log prints a handful: TP0, DP0 TP0, ...);
# a chunk with more leaves its ranks to be cut out line by line.
MAX_RANKS = 1024

# ``envelope_cut``: the collector layers it cuts from a line (``columnar``'s names, outermost first; a timed one
# only outermost; docker's JSON alone, unescaped into bytes of its own: ``docker_cut``), a line without a time, and what it says of a chunk (OK, or FALLBACK: the column's to unwrap)
KUBECTL, CRI, COMPOSE, PROC_TAG, DOCKER_JSON, JOURNALD, SYSLOG = 1, 2, 3, 4, 5, 6, 7
JOURNALD_SHORT, SYSLOG_3164 = 8, 9          # year-less: ``yearless_cut`` alone, the year ``columnar``'s rule
LAYER_CODES = {"kubectl": KUBECTL, "cri": CRI, "compose": COMPOSE, "proc_tag": PROC_TAG, "docker_json": DOCKER_JSON,
               "journald": JOURNALD, "syslog": SYSLOG, "journald:short": JOURNALD_SHORT, "syslog:3164": SYSLOG_3164}
ALONE = (DOCKER_JSON, JOURNALD_SHORT, SYSLOG_3164)     # layers cut only alone (no layer inside them)
NO_TIME = -(2 ** 63)
OK, FALLBACK = 0, 1
