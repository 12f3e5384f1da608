"""Library entry points: one function per CLI command.  They raise HangforensicsError subclasses."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .analysis.rules import Rule, load_rules
from .errors import InputError, translate_disk_errors
from .ingest import fork_server
from .terminal_progress import ProgressBar

if TYPE_CHECKING:
    from .capture.collect import CaptureResult
    from .ingest.pipeline import IngestResult


@dataclass
class ReportResult:
    html: Path
    json: Path | None
    document: dict[str, Any]
    ingest: list[IngestResult]


@translate_disk_errors
def ingest(paths: list[Path], db: Path, mode: str = "auto", progress: ProgressBar | None = None,
           jobs: int = 1) -> list[IngestResult]:
    """Load evidence into the DuckDB file ``db`` (incremental); ``jobs`` parser processes for large inputs."""
    # the parsers' fork server loads while the rest of the ingest is imported here (DuckDB, polars: 0.5 s)
    with fork_server.started_early(paths, jobs):
        from .ingest.pipeline import ingest_paths
        from .store import Store

        with Store(db) as store:
            return ingest_paths(store, paths, mode=mode, progress=progress, jobs=jobs)


@translate_disk_errors
def analyze(db: Path, show_payloads: bool = False) -> dict[str, Any]:
    """Run every rule over the database; store and return the findings document (request payloads
    redacted in it and in the stored findings / summaries unless ``show_payloads``)."""
    if not Path(db).exists():
        raise InputError(f"no database at {db}: run 'hangforensics ingest' first")
    from .store import Store  # (DuckDB is imported where it is used: an ingest starts its parsers first)

    with Store(db) as store:
        from .analysis import findings as findings_mod  # the rules' modules: not for an ingest (0.2 s)

        found = findings_mod.run_rules(store, show_payloads=show_payloads)
        return findings_mod.document(found, findings_mod.stored_summaries(store))


@translate_disk_errors
def report(path: Path, out: Path, db: Path | None = None, json_out: Path | None = None, mode: str = "auto",
           progress: ProgressBar | None = None, show_payloads: bool = False) -> ReportResult:
    """Postmortem in one step: ingest PATH, run the rules, write the HTML (and the findings JSON).

    The HTML, the findings document and the findings / engine_summaries tables redact request payloads
    (prompts, token ids) unless ``show_payloads``; the evidence tables keep them.
    """
    from .analysis import findings as findings_mod
    from .report.html import render_report  # rendering stays in the report layer

    out = Path(out)
    if out.exists() and out.is_dir():
        raise InputError(f"--output {out} is a directory")
    jobs = os.cpu_count() or 1
    from .readers.layout import Workspace  # (its sniffers' regexes: not for an ingest before its fork server)

    with tempfile.TemporaryDirectory(prefix="hangforensics-") as tmp, Workspace() as ws, \
            fork_server.started_early([Path(path)], jobs):
        from .ingest.pipeline import ingest_paths
        from .store import Store

        db_path = Path(db) if db else Path(tmp) / "evidence.duckdb"
        with Store(db_path) as store:
            results = ingest_paths(store, [Path(path)], mode=mode, progress=progress, workspace=ws,
                                   jobs=jobs, hold_live_tail=False)
            engines = [e for r in results for e in r.engines]
            found = findings_mod.run_rules(store, engines=engines, show_payloads=show_payloads)
            doc = findings_mod.document(found, findings_mod.stored_summaries(store, engines))
            html = render_report(store, engines, found, title_path=str(path), show_payloads=show_payloads)
    _write_text(out, html)
    if json_out:
        _write_text(Path(json_out), json.dumps(doc, indent=2) + "\n")
    return ReportResult(out, Path(json_out) if json_out else None, doc, results)


@translate_disk_errors
def migrate(db: Path) -> tuple[int | None, int]:
    """Bring the database at ``db`` up to this release's schema version; return (from, to)."""
    from .store import SCHEMA_VERSION, Store

    if not Path(db).exists():
        raise InputError(f"no database at {db}")
    with Store(db) as store:
        return store.opened_at_version, SCHEMA_VERSION


@translate_disk_errors
def capture(pid: int | None = None, port: int | None = None, match: str | None = None,
            output: Path | None = None, repeat: int = 1, interval_s: float = 3.0, native: bool = False,
            logs: list[Path] | None = None, log_lines: int = 20000, timeout_s: float = 120.0,
            name: str | None = None, pyspy: str | None = None,
            argv: list[str] | None = None) -> CaptureResult:
    """Snapshot a hung engine's process tree (py-spy of every process at once, /proc facts, GPU samples, log
    tails) into one bundle ``report`` reads; read-only on the target.  What could not be captured is in the
    result's ``manifest.failures``, and the bundle is written anyway."""
    from .capture import CaptureRequest, capture_engine  # psutil and friends only for this command

    return capture_engine(CaptureRequest(
        pid=pid, port=port, match=match, output=output, repeat=repeat, interval_s=interval_s, native=native,
        logs=tuple(logs or ()), log_lines=log_lines, timeout_s=timeout_s, name=name, pyspy=pyspy,
        argv=tuple(argv or ())))


def rules() -> list[Rule]:
    return load_rules()


def _write_text(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from e
