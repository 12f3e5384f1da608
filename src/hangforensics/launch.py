"""The ``hangforensics`` command's entry point: for an ingest of a large log, the parsers' fork server is started
before the command line interface itself is imported (typer and click, the commands' module: some 0.1 s),
so that it loads while everything else does; then the CLI runs as usual.

The arguments are only looked at, never judged: whatever this reads wrong, the CLI says so, and the API starts
or stops the server as it always does (``fork_server.started_early``: a server it does not need is stopped)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

# The commands that ingest, and their options that take a value (the value is not a path to read).
_INGESTING = ("ingest", "report")
_VALUED = ("--db", "--jobs", "-o", "--output", "--json", "--fail-on")


def main() -> None:
    """Start the parsers early where a large log is to be read, then run the CLI."""
    # only a head start: whatever goes wrong here, the ingest starts the server itself if it needs it
    with contextlib.suppress(Exception):
        _start_parsers_early(sys.argv[1:])
    from .cli import main as cli_main

    cli_main()


def _start_parsers_early(args: list[str]) -> None:
    if not args or args[0] not in _INGESTING or "--help" in args:
        return
    paths: list[Path] = []
    jobs = os.cpu_count() or 1
    rest = iter(args[1:])
    for a in rest:
        name, eq, value = a.partition("=")
        if name in _VALUED:
            value = value if eq else next(rest, "")
            if name == "--jobs":
                jobs = int(value)
        elif not a.startswith("-"):
            paths.append(Path(a))
    from .ingest import fork_server

    if jobs > 1 and any(fork_server.large_plain_log(p) for p in paths):
        fork_server.start_for(jobs)
