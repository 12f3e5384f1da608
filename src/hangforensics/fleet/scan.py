"""The nightly fleet scan: incremental ingest of every engine, rules, incidents, reports.

Safe from cron: one scan per database at a time (an advisory lock beside the
database file; a second scan waits up to ``wait_s`` or stops with a clear
message); every file is loaded in its own transaction and an engine's
findings are recomputed whenever its data changed since they were computed
(``engine_state``), so a scan killed halfway is completed by the next one
without duplicates.  When nothing changed nothing is parsed, and rules and
reports are not recomputed.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DatabaseBusyError, InputError, translate_disk_errors
from ..ingest import fork_server
from ..terminal_progress import ProgressBar

if TYPE_CHECKING:
    from ..ingest.pipeline import Executor, IngestResult


@dataclass
class ScanResult:
    scan_id: int
    ingest: IngestResult
    analyzed: list[str]
    incidents: list[dict[str, Any]]
    document: dict[str, Any]
    reports_written: int = 0
    seconds: float = 0.0
    index: Path | None = None
    new_incidents: list[str] = field(default_factory=list)


class ScanLock:
    """An exclusive advisory lock on ``<db>.lock``, holding the owner's pid for the message."""

    def __init__(self, db: Path, wait_s: float = 0.0) -> None:
        self.path = Path(f"{db}.lock")
        self.wait_s = wait_s
        self.fd: int | None = None

    def __enter__(self) -> ScanLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise InputError(f"cannot create lock file {self.path}: {e.strerror or e}") from e
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    owner = os.pread(self.fd, 200, 0).decode(errors="replace").strip() or "another process"
                    os.close(self.fd)
                    self.fd = None
                    raise DatabaseBusyError(
                        f"another scan is running on {self.path.with_suffix('')} ({owner}); "
                        f"it was not disturbed (use --wait SECONDS to wait for it)") from None
                time.sleep(0.2)
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"pid {os.getpid()}, started {datetime.now():%Y-%m-%d %H:%M:%S}".encode(), 0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


@translate_disk_errors
def scan(root: Path, db: Path, out: Path | None = None, json_out: Path | None = None, wait_s: float = 0.0,
         jobs: int | None = None, progress: ProgressBar | None = None, show_payloads: bool = False,
         executor: str | Executor = "local", ray_address: str | None = None, staging: str | None = None) -> ScanResult:
    """Scan the fleet at ``root`` (its immediate subfolders are engines) into ``db``.

    Reports redact request payloads unless ``show_payloads``.  ``executor``: where changed files are
    parsed: ``local`` (``jobs`` processes), ``ray`` (tasks on the Ray cluster at ``ray_address``, or a
    connection this process has, or a single-node Ray started for the scan; row batches staged under
    ``staging``, a path or ``pyarrow.fs`` URI), or an ``Executor``.  Planning, loading, rules and
    reports run here either way.
    """
    t0 = time.monotonic()
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root} is not a folder of engines")
    jobs = jobs or os.cpu_count() or 1
    local = executor == "local"
    # before the lock: a bad option fails at once (the local executor itself is made once the fork server is
    # started: it imports the ingest)
    if local:
        _no_ray_options(ray_address, staging)
    ex = None if local else make_executor(executor, jobs, ray_address, staging)
    # The parsers' fork server loads (some 0.9 s) while the scan goes on: a first scan starts it before DuckDB
    # and the ingest are imported, the database opened and every file planned; a later one as soon as planning
    # finds a file to read (an unchanged rescan never starts it: 0.6 s of CPU beside its planning)
    pool_jobs = jobs if local else 1
    with ScanLock(db, wait_s), fork_server.started_early_for(pool_jobs, now=not Path(db).exists()):
        return _scan(root, db, out, json_out, jobs, pool_jobs, progress, show_payloads, executor,
                     ex or make_executor("local", jobs), t0)


def _scan(root: Path, db: Path, out: Path | None, json_out: Path | None, jobs: int, pool_jobs: int,
          progress: ProgressBar | None, show_payloads: bool, executor: str | Executor, ex: Executor,
          t0: float) -> ScanResult:
    """``scan`` under its lock; ``pool_jobs``: the parser processes of a local pool (1: none)."""
    from ..ingest.pipeline import ingest_files
    from ..readers.layout import Workspace
    from ..store import Store

    with Workspace() as ws, Store(db) as store:
        _, files = ws.resolve(root, "fleet")
        scan_id = (store.scalar("SELECT COALESCE(max(scan_id), 0) FROM scans") or 0) + 1
        started = datetime.now()
        store.append("scans", [{"scan_id": scan_id, "root": str(root.resolve()), "started_at": started}])
        if executor == "ray":               # the staging folder of this scan names it
            ex.run_name = f"scan-{scan_id}-{uuid.uuid4().hex[:8]}"     # type: ignore[attr-defined]
        # engines under ROOT now, and engines read from ROOT before whose folder is gone: their files vanished
        prefix = str(root.resolve()).rstrip("/") + "/"
        engines = sorted({f.engine for f in files} | {r["engine"] for r in store.query(
            "SELECT DISTINCT engine FROM sources WHERE starts_with(abs_path, ?)", [prefix])})
        res = ingest_files(store, root, files, progress, jobs=jobs, vanish_engines=engines, executor=ex,
                           on_work=lambda: _on_work(pool_jobs))
        t_ingest = time.monotonic()
        from ..analysis import findings as findings_mod  # rules and models load only when something changed
        from ..analysis.summaries import incidents as incidents_mod

        stale = [r["engine"] for r in store.query(
            "SELECT s.engine FROM (SELECT DISTINCT engine FROM sources) s LEFT JOIN engine_state e USING (engine) "
            "WHERE e.engine IS NULL OR e.analyzed_version < e.data_version ORDER BY 1")]
        if findings_mod.payloads_mode(store) not in (None, "shown" if show_payloads else "redacted"):
            # the stored findings were written with the other payload setting: every engine is rewritten
            stale = [r["engine"] for r in store.query("SELECT DISTINCT engine FROM sources ORDER BY 1")]
        if stale:
            findings_mod.run_rules(store, engines=stale, show_payloads=show_payloads)
            with store.transaction():
                incidents_mod.rebuild(store, stale, scan_id)
        t_analyze = time.monotonic()
        found = findings_mod.stored_findings(store)
        doc = findings_mod.document(found, findings_mod.stored_summaries(store))
        incidents = store.query("SELECT * FROM incidents ORDER BY onset DESC NULLS LAST, engine")
        doc["incidents"] = [_incident_json(i, scan_id) for i in incidents]
        written = 0
        index = None
        if out is not None:
            from ..report.html import incident_filename, render_fleet_index, render_incidents

            out = Path(out)
            (out / "incidents").mkdir(parents=True, exist_ok=True)
            # reports written with the other payload setting are rewritten, so a default run never leaves
            # payloads a --show-payloads run wrote
            mode_file = out / ".payloads"
            mode = "shown" if show_payloads else "redacted"
            mode_changed = not mode_file.exists() or mode_file.read_text().strip() != mode
            todo = [inc for inc in incidents if inc["engine"] in stale or mode_changed
                    or not (out / "incidents" / incident_filename(inc["incident_id"])).exists()]
            # all the reports' rows in a fixed number of queries, whatever the number of reports
            for inc, html in render_incidents(store, todo, show_payloads=show_payloads):
                _write(out / "incidents" / incident_filename(inc["incident_id"]), html)
                written += 1
            index = out / "index.html"
            if stale or written or mode_changed or not index.exists():
                _write(index, render_fleet_index(store, scan_id, show_payloads=show_payloads))
            _write(mode_file, mode + "\n")
        store.con.execute(
            "UPDATE scans SET finished_at = ?, files_read = ?, files_unchanged = ?, files_vanished = ?, "
            "engines_changed = ?, bytes_read = ?, ingest_s = ?, analyze_s = ?, report_s = ? WHERE scan_id = ?",
            [datetime.now(), res.files_read, res.files_skipped, res.files_vanished, len(stale), res.bytes_read,
             t_ingest - t0, t_analyze - t_ingest, time.monotonic() - t_analyze, scan_id])
    if json_out is not None:
        _write(Path(json_out), json.dumps(doc, indent=2) + "\n")
    return ScanResult(scan_id, res, stale, incidents, doc, written, time.monotonic() - t0, index,
                      [i["incident_id"] for i in incidents if i["first_seen_scan"] == scan_id])


def _on_work(pool_jobs: int) -> None:
    """Planning found a file to read: the parsers' fork server starts, and the analysis and the reports will
    run after the load, so their modules load now, while the server loads (some 0.05 s less in the scan's
    serial tail; an unchanged rescan loads neither)."""
    fork_server.start_for(pool_jobs)
    from ..analysis import findings
    from ..analysis.summaries import incidents  # noqa: F401
    from ..report import html  # noqa: F401

    findings.load_rules()
    findings.load_models()


def make_executor(kind: str | Executor, jobs: int, ray_address: str | None = None,
                  staging: str | None = None) -> Executor:
    """The executor named ``kind`` (``local`` or ``ray``), or ``kind`` itself when it is one."""
    if not isinstance(kind, str):
        return kind
    if kind == "local":
        _no_ray_options(ray_address, staging)
        from ..ingest.pipeline import LocalExecutor

        return LocalExecutor(jobs)
    if kind == "ray":
        from .ray_executor import RayExecutor, require_ray  # Ray itself is imported only when there is work

        require_ray()
        return RayExecutor(address=ray_address, staging=staging, num_cpus=jobs)
    raise InputError(f"--executor must be local or ray, not {kind!r}")


def _no_ray_options(ray_address: str | None, staging: str | None) -> None:
    if ray_address is not None or staging is not None:
        raise InputError("--ray-address and --staging go with --executor ray")


def _incident_json(i: dict[str, Any], scan_id: int) -> dict[str, Any]:
    from ..analysis.findings import iso
    from ..report.html import incident_filename

    return {
        "id": i["incident_id"], "engine": i["engine"], "kind": i["kind"], "severity": i["severity"],
        "onset": iso(i["onset"]), "ended": iso(i["ended"]), "end_reason": i["end_reason"], "rules": i["rules"],
        "signatures": i["signatures"], "findings": i["n_findings"], "watchdog_kills": i["watchdog_kills"],
        "health_blind_s": i["health_blind_s"], "new": i["first_seen_scan"] == scan_id,
        "report": f"incidents/{incident_filename(i['incident_id'])}", "title": i["title"],
    }


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)                       # readers never see half a report
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from e
