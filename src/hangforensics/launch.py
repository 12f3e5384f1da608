"""The ``hangforensics`` command's entry point: where parser processes will read, the parsers' fork server is
started before the command line interface itself is imported (typer and click, the commands' module: some
0.1 s), so that it loads while everything else does; then the CLI runs as usual.

The arguments are only looked at, never judged: whatever this reads wrong, the CLI says so, and the API starts
or stops the server as it always does (``fork_server.started_early``: a server it does not need is stopped)."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from pathlib import Path

from . import DEFAULT_DB

# The options that take a value (the value is not a path to read), of the commands that parse.
_VALUED = ("--db", "--jobs", "-o", "--output", "--json", "--fail-on", "--out", "--wait", "--executor",
           "--ray-address", "--staging")


# The cyclic collector's first threshold: a query's rows are thousands of dicts, each an allocation that counts
# towards a collection (at Python's default of 700: some 280 collections in a fleet scan).  Measured on the
# 202-engine fleet: the collector's time in the scan's process 0.088 -> 0.043 s, in a 445 MB log's ingest 0.074
# -> 0.050 s; the largest process the same.
GC_THRESHOLD = 10_000


def main() -> None:
    """Start the parsers early where they will be needed, then run the CLI."""
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    # only a head start: whatever goes wrong here, the command starts the server itself if it needs it
    with contextlib.suppress(Exception):
        _start_parsers_early(sys.argv[1:])
    from .cli import main as cli_main

    cli_main()


def _start_parsers_early(args: list[str]) -> None:
    """For an ingest (or report) naming a large plain log, and for the first scan of a database (every file
    is new), with parser processes: as the API and the scan start it (``fork_server.started_early``)."""
    if not args or args[0] not in ("ingest", "report", "scan") or "--help" in args:
        return
    paths: list[Path] = []
    options = {"--jobs": str(os.cpu_count() or 1), "--db": str(DEFAULT_DB), "--executor": "local"}
    rest = iter(args[1:])
    for a in rest:
        name, eq, value = a.partition("=")
        if name in _VALUED:
            options[name] = value if eq else next(rest, "")
        elif not a.startswith("-"):
            paths.append(Path(a))
    jobs = int(options["--jobs"])
    from .ingest import fork_server

    if args[0] == "scan":
        if jobs > 1 and options["--executor"] == "local" and not Path(options["--db"]).exists():
            fork_server.start_for(jobs)
    elif jobs > 1 and any(fork_server.large_plain_log(p) for p in paths):
        fork_server.start_for(jobs)
