"""The ``hangforensics`` command: a thin layer, one library call per command.

Exit codes (interface.md §2): 0 done, 1 findings at or above --fail-on,
2 bad input or usage (one line on stderr, never a traceback).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from . import DEFAULT_DB, __version__
from .analysis.rules import SEVERITY_RANK
from .errors import HangforensicsError
from .terminal_progress import ProgressBar

app = typer.Typer(
    add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
    help="Forensics for hung multi-GPU inference engines: logs and stack dumps into DuckDB, hang rules, "
         "one HTML incident report.",
)



def _mode(engine: bool, fleet: bool) -> str:
    if engine and fleet:
        raise HangforensicsError("--engine and --fleet exclude each other")
    return "engine" if engine else "fleet" if fleet else "auto"


def _fail_on_exit(doc: dict, fail_on: str | None) -> None:
    if fail_on is None:
        return
    if fail_on not in SEVERITY_RANK:
        raise HangforensicsError(f"--fail-on must be one of {', '.join(SEVERITY_RANK)}")
    limit = SEVERITY_RANK[fail_on]
    if any(SEVERITY_RANK[f["severity"]] <= limit for f in doc["findings"]):
        raise typer.Exit(1)


@app.command()
def report(
    path: Annotated[Path, typer.Argument(help="Engine folder, fleet folder, file or .tar.gz/.zip bundle.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="HTML report to write.")] = Path(
        "hangforensics-report.html"),
    db: Annotated[Path | None, typer.Option("--db", help="Keep the DuckDB database here (default: temporary).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the findings document.")] = None,
    engine: Annotated[bool, typer.Option("--engine", help="Treat PATH as one engine.")] = False,
    fleet: Annotated[bool, typer.Option("--fleet", help="Treat PATH as a fleet of engines.")] = False,
    fail_on: Annotated[str | None, typer.Option("--fail-on", help="Exit 1 on a finding this severe or worse.")] = None,
    show_payloads: Annotated[bool, typer.Option(
        "--show-payloads", help="Show request payloads (prompts, token ids) in the HTML (default: redacted).",
    )] = False,
) -> None:
    """Postmortem in one step: ingest PATH, run every rule, write one self-contained HTML report."""
    from . import api

    res = api.report(path, output, db=db, json_out=json_out, mode=_mode(engine, fleet), progress=ProgressBar(),
                     show_payloads=show_payloads)
    n = len(res.document["findings"])
    crit = sum(1 for f in res.document["findings"] if f["severity"] == "critical")
    typer.echo(f"{res.html}: {n} finding(s), {crit} critical", err=True)
    _fail_on_exit(res.document, fail_on)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Engine folders, fleet folders, files or bundles.")],
    db: Annotated[Path, typer.Option("--db", help="DuckDB file.")] = DEFAULT_DB,
    engine: Annotated[bool, typer.Option("--engine", help="Treat each PATH as one engine.")] = False,
    fleet: Annotated[bool, typer.Option("--fleet", help="Treat each PATH as a fleet.")] = False,
    jobs: Annotated[int | None, typer.Option("--jobs", help="Parser processes (default: every core).")] = None,
) -> None:
    """Load evidence into the database; unchanged files add nothing, grown files are read from where they left off."""
    from . import api

    results = api.ingest(paths, db, mode=_mode(engine, fleet), progress=ProgressBar(), jobs=jobs or os.cpu_count() or 1)
    for r in results:
        typer.echo(f"{r.root}: {len(r.engines)} engine(s), {r.files_read} file(s) read, {r.files_skipped} unchanged, "
                   f"{r.lines} lines ({r.unparsed} unparsed)", err=True)


@app.command()
def analyze(
    db: Annotated[Path, typer.Option("--db", help="DuckDB file.")] = DEFAULT_DB,
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings document on stdout.")] = False,
    fail_on: Annotated[str | None, typer.Option("--fail-on", help="Exit 1 on a finding this severe or worse.")] = None,
    show_payloads: Annotated[bool, typer.Option(
        "--show-payloads", help="Keep request payloads (prompts, token ids) in findings and summaries "
                                "(default: redacted).")] = False,
) -> None:
    """Run every rule over what is ingested and store the findings and engine summaries."""
    from . import api

    doc = api.analyze(db, show_payloads=show_payloads)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        for f in doc["findings"]:
            ranks = ",".join(f["ranks"]) if f["ranks"] else "-"
            typer.echo(f"{f['severity']:<8} {f['rule']:<20} {f['engine']:<28} {f['ts'] or '-':<19} {ranks}  {f['title']}")
        for e in doc["engines"]:
            typer.echo(f"{'summary':<8} {'':<20} {e['engine']:<28} {'':<19} -  {e['verdict']}")
    _fail_on_exit(doc, fail_on)


@app.command()
def scan(
    root: Annotated[Path, typer.Argument(help="Fleet folder: each immediate subfolder is one engine.")],
    db: Annotated[Path, typer.Option("--db", help="DuckDB file kept between scans.")] = DEFAULT_DB,
    out: Annotated[Path | None, typer.Option("--out", help="Write index.html and one report per incident here.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the findings document with incidents.")] = None,
    fail_on: Annotated[str | None, typer.Option("--fail-on", help="Exit 1 on a finding this severe or worse.")] = None,
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for a running scan of the same database.")] = 0.0,
    jobs: Annotated[int | None, typer.Option("--jobs", help="Parser processes (default: every core).")] = None,
    show_payloads: Annotated[bool, typer.Option(
        "--show-payloads", help="Show request payloads (prompts, token ids) in the HTML (default: redacted).",
    )] = False,
    executor: Annotated[str, typer.Option(
        "--executor", help="Where changed files are parsed: local (processes here) or ray (a Ray cluster).")] = "local",
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", help="Ray cluster to run on (HEAD:6379, auto); default: a single-node Ray started "
                              "for the scan.")] = None,
    staging: Annotated[str | None, typer.Option(
        "--staging", help="With --executor ray: where tasks write Parquet batches, a path or URI (s3://, gs://) "
                          "every node reaches; default: a temporary folder (single-node only).")] = None,
) -> None:
    """The nightly fleet job: incremental ingest of every engine under ROOT, rules, incidents, reports."""
    from .fleet.scan import scan as run_scan

    if fail_on is not None and fail_on not in SEVERITY_RANK:
        raise HangforensicsError(f"--fail-on must be one of {', '.join(SEVERITY_RANK)}")
    res = run_scan(root, db, out=out, json_out=json_out, wait_s=wait, jobs=jobs, progress=ProgressBar(),
                   show_payloads=show_payloads, executor=executor, ray_address=ray_address, staging=staging)
    ing = res.ingest
    failed = f", {len(ing.failed)} could not be read (sources.status)" if ing.failed else ""
    typer.echo(f"scan {res.scan_id}: {len(ing.engines)} engine(s), {ing.files_read} file(s) read "
               f"({ing.bytes_read / 1e6:.1f} MB){failed}, {ing.files_skipped} unchanged, {ing.files_vanished} "
               f"vanished; {len(res.analyzed)} engine(s) re-analyzed; {len(res.incidents)} incident(s), "
               f"{len(res.new_incidents)} new; {res.seconds:.1f} s", err=True)
    _fail_on_exit(res.document, fail_on)


@app.command()
def sql(
    query: Annotated[str, typer.Argument(
        help="One read-only SQL query over the views (sources, events, batches, ...), or the name of a "
             "named query (see 'hangforensics queries').")],
    db: Annotated[Path, typer.Option("--db", help="DuckDB file.")] = DEFAULT_DB,
    fmt: Annotated[str, typer.Option("--format", help="table, csv, json or parquet.")] = "table",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here instead of stdout.")] = None,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Rows a table shows (0: all); exports hold all.")] = 50,
) -> None:
    """Read-only ad hoc SQL: SELECT, EXPLAIN, DESCRIBE/SHOW/SUMMARIZE and reporting pragmas.

    DML, DDL, COPY, ATTACH, INSTALL/LOAD, SET and writing pragmas are refused, and queries cannot read files.

    When QUERY is exactly the name of a named query (e.g. 'last-progress'), that query runs.

    A table fits the terminal ($COLUMNS); csv, json and parquet (-o needed) export every row.
    """
    from .sql.query import run_query

    text = run_query(db, query, fmt, output, max_rows=max_rows)
    if text is not None:
        sys.stdout.write(text)


@app.command("queries")
def queries_cmd() -> None:
    """List the named queries 'hangforensics sql NAME' runs: name, title and what each answers."""
    import shutil
    import textwrap

    from .sql.named_queries import load_named_queries

    width = max(shutil.get_terminal_size((100, 24)).columns, 60)
    for q in load_named_queries():
        typer.echo(f"{q.name:<26}{q.title}")
        typer.echo(textwrap.fill(q.description, width, initial_indent=" " * 26, subsequent_indent=" " * 26))


@app.command()
def migrate(db: Annotated[Path, typer.Option("--db", help="DuckDB file.")] = DEFAULT_DB) -> None:
    """Upgrade a database written by an older hangforensics to this release's schema, in place."""
    from . import api

    before, after = api.migrate(db)
    typer.echo(f"{db}: schema version {after}" + (f" (was {before})" if before != after else ", nothing to do"),
               err=True)


@app.command()
def capture(
    pid: Annotated[int | None, typer.Option(
        "--pid", help="Any pid of the engine's tree (walked up to its root).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="A TCP port the engine listens on.")] = None,
    match: Annotated[str | None, typer.Option(
        "--match", help="Regex over process titles / command lines.")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Bundle to write (default: "
                                                "hangforensics-capture-<host>-<UTC time>.tar.gz).")] = None,
    repeat: Annotated[int, typer.Option("--repeat", help="Snapshot rounds (stuck vs slow).")] = 1,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between rounds.")] = 3.0,
    native: Annotated[bool, typer.Option("--native", help="py-spy --native: C/C++ frames too.")] = False,
    logs: Annotated[list[Path] | None, typer.Option(
        "--logs", help="A log file or folder to tail (repeatable); default: the files the engine's "
                       "stdout/stderr go to.")] = None,
    log_lines: Annotated[int, typer.Option(
        "--log-lines", help="Lines kept from the end of each log.")] = 20000,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds the rounds may take in all.")] = 120.0,
    name: Annotated[str | None, typer.Option(
        "--name", help="Engine folder name (default <host>-<root pid>).")] = None,
    pyspy: Annotated[str | None, typer.Option(
        "--py-spy", help="py-spy executable (default: $HANGFORENSICS_PYSPY, PATH, then the one installed "
                         "with hangforensics).")] = None,
) -> None:
    """On the host of a hung engine: snapshot every process of its tree at the same moment into one bundle.

    py-spy dumps of every process in parallel, state, CPU time, kernel wait (wchan), GPU samples, log tails.

    Read-only on the target. What could not be captured is said, one line each; the bundle is still written.

    Runbook: capture, then restart the engine, then 'hangforensics report BUNDLE'.
    """
    from . import api

    res = api.capture(pid=pid, port=port, match=match, output=output, repeat=repeat, interval_s=interval,
                      native=native, logs=logs, log_lines=log_lines, timeout_s=timeout, name=name,
                      pyspy=pyspy, argv=["hangforensics", *sys.argv[1:]])
    m = res.manifest
    for f in m.failures:
        typer.echo(f"hangforensics: not captured: {f.reason}", err=True)
    ranks = sum(1 for p in m.processes if p.rank)
    spread = "" if res.max_spread_s is None else f", dumps started within {res.max_spread_s * 1000:.0f} ms"
    typer.echo(f"{res.path}: {len(m.processes)} process(es), {ranks} rank(s), {len(m.rounds)} round(s), "
               f"{res.dumps_ok}/{res.dumps_total} dump(s){spread}, {len(m.logs)} log(s), {res.seconds:.1f} s"
               f"{f'; {len(m.failures)} thing(s) not captured' if m.failures else ''}", err=True)
    typer.echo(str(res.path))


@app.command("rules")
def rules_cmd() -> None:
    """List the rules with their ids, severities and one-line descriptions."""
    from . import api

    for r in api.rules():
        typer.echo(f"{r.id:<22} {r.severity:<9} {r.title}")


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"hangforensics {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True,
                                          help="Print the version.")] = False,
) -> None:
    pass


def _interrupted(e: BaseException) -> bool:
    """A Ctrl-C that reached DuckDB in the middle of a statement (it ends the statement with this error
    instead of letting KeyboardInterrupt through), or an error of clean-up code run while a Ctrl-C unwound
    (its ``__context__`` chain holds the KeyboardInterrupt): the user stopped the command, nothing broke."""
    seen: set[int] = set()
    at: BaseException | None = e
    while at is not None and id(at) not in seen:
        if isinstance(at, KeyboardInterrupt) or type(at).__name__ == "InterruptException":
            return True
        if isinstance(at, RuntimeError) and str(at).startswith("Query interrupted"):
            return True
        seen.add(id(at))
        at = at.__context__
    return False


def main() -> None:
    try:
        rc = app(standalone_mode=False)
        if rc == 130:                 # typer turns Ctrl-C into this exit code, silently
            raise KeyboardInterrupt
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except HangforensicsError as e:
        sys.stderr.write(f"hangforensics: error: {e}\n")
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.stderr.write("hangforensics: aborted\n")
        sys.exit(130)
    except KeyboardInterrupt:
        sys.stderr.write("hangforensics: interrupted\n")
        sys.exit(130)
    except Exception as e:  # click usage errors and anything unexpected: one line, never a traceback
        if _interrupted(e):
            sys.stderr.write("hangforensics: interrupted\n")
            sys.exit(130)
        # typer vendors click: its usage errors carry format_message() and an exit code
        if hasattr(e, "format_message") and isinstance(getattr(e, "exit_code", None), int):
            if e.format_message().strip():
                sys.stderr.write(f"hangforensics: error: {e.format_message()} (see hangforensics --help)\n")
            sys.exit(2)
        if os.environ.get("HANGFORENSICS_DEBUG"):
            raise
        sys.stderr.write(f"hangforensics: internal error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
                         f"(set HANGFORENSICS_DEBUG=1 for a traceback)\n")
        sys.exit(3)
