"""The exact ``hangforensics capture`` command to run at the next hang (interface.md §5 "capture next").

Pure: facts the evidence knows in, one shell command line out.  The engine summaries' capture-next
list calls it with what an engine's evidence says (``server_args`` port and model path, a previous
capture's selector and log paths); ``analysis/summaries/capture_advice.py`` gathers those facts from the store.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

# Regex metacharacters: a model path is matched literally ('.' in 'Qwen2.5' must not match any character).
_META = re.compile(r"([.^$*+?{}\[\]\\|()])")


def literal_pattern(text: str) -> str:
    """``text`` as a regex matching exactly it, escaping only what must be ('/models/Qwen2\\.5-72B')."""
    return _META.sub(r"\\\1", text)


def capture_command(*, port: int | None = None, model_path: str | None = None, match: str | None = None,
                    pid: int | None = None, native: bool = True, repeat: int = 3, interval_s: float = 5.0,
                    logs: Sequence[str] = (), name: str | None = None, output: str | None = None) -> str:
    """The ``hangforensics capture`` command line that collects, at the next hang, what the evidence lacked.

    The engine is named the way that survives a restart (the next hang is a new process tree): its
    listening ``port`` first (``server_args`` port); else ``match``, a regex a previous capture used;
    else ``model_path`` as a literal ``--match`` (the server's command line carries it); else ``pid``,
    right only while that process still hangs; else nothing (capture then takes the one engine on the
    host).  ``native`` adds C/C++ frames (NCCL, CUDA waits; capture falls back to Python frames when
    unwinding fails); ``repeat`` > 1 takes that many rounds ``interval_s`` apart, so the report can tell
    stuck from slow; ``logs`` are files or folders to tail (without them capture finds the files the
    engine's stdout/stderr go to); ``name`` the engine folder of the bundle; ``output`` the bundle path.

    >>> capture_command(port=30000, logs=["/var/log/sglang"])
    'hangforensics capture --port 30000 --native --repeat 3 --interval 5 --logs /var/log/sglang'
    """
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    if interval_s < 0:
        raise ValueError("interval_s must not be negative")
    args = ["hangforensics", "capture"]
    if port is not None:
        args += ["--port", str(int(port))]
    elif match:
        args += ["--match", match]
    elif model_path:
        # the model path ends an argument: '/models/x' must not also match '/models/x-draft'
        args += ["--match", literal_pattern(model_path) + r"(\s|$)"]
    elif pid is not None:
        args += ["--pid", str(int(pid))]
    if native:
        args.append("--native")
    if repeat > 1:
        args += ["--repeat", str(repeat), "--interval", f"{interval_s:g}"]
    for path in logs:
        args += ["--logs", str(path)]
    if name:
        args += ["--name", name]
    if output:
        args += ["-o", output]
    return shlex.join(args)
