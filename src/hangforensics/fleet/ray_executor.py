"""Parsing on a Ray cluster: the ``Executor`` of ``scan --executor ray``.

The driver keeps everything stateful: planning against the ``sources`` manifest (an unchanged fleet
schedules no task and does not even start Ray), loading, the per-engine passes, rules and reports.
What runs on the cluster is pure: each task gets ``FileJob``s (path, kind, start offset of a grown log,
line number) and stages its row batches as Parquet (``staging.py``).  Tasks are per engine (its files in
plan order, cut into groups of at most ``GROUP_BYTES``) and per byte range of a log too large for one
task (``parallel.split_job``, as the local pool cuts it).  The driver loads the staged batches in plan
order through ``load_file``, so line accounting, partial commits, notes, renames and release hints are
those of a local scan, and the database is the same.

Failures: Ray retries a task whose worker died or that raised (``max_retries``); a group that still
fails is run again one file per task, so only the file that fails is lost, and it is recorded on its
``sources`` row as ``error: parse task failed on Ray ...`` naming its engine and file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError
from ..ingest import parallel
from ..ingest.jobs import FileJob, FileOutcome
from ..ingest.load import load_file
from ..ingest.plan import Plan
from ..store import Store
from ..terminal_progress import ProgressBar
from . import staging as stg

RAY_MISSING = "--executor ray needs Ray: install hangforensics[ray] (pip install 'hangforensics[ray]')"
GROUP_BYTES = 64 * 1024 * 1024      # an engine's files per task at most: a large engine spreads over workers
LOCAL_OBJECT_STORE = 128 * 1024 * 1024   # tasks return small manifests: a local Ray needs little shared memory


def require_ray() -> None:
    """Fail early, with one line, when Ray is not installed (it is imported only when a scan has work)."""
    try:
        spec = importlib.util.find_spec("ray")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise InputError(RAY_MISSING)


@contextlib.contextmanager
def ray_connection(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """The ``ray`` module, connected.  A connection this process already has is used as it is (and left
    open); ``address`` joins a running cluster (left running, only this driver disconnects); otherwise a
    single-node Ray is started on loopback and shut down with every process it started."""
    host = _host_port(address)
    if address is None or (host is not None and _is_loopback(host[0])):
        # before Ray is imported: a single-node Ray stays on loopback (Ray's switch for laptops; without it
        # Ray also rewrites a 127.0.0.1 address to the host's network address) and sends no usage statistics
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if host is not None:
        _check_reachable(address, *host)
    try:
        import ray
    except ImportError as e:
        raise InputError(RAY_MISSING) from e
    if ray.is_initialized():
        yield ray
        return
    tmp = None
    try:
        if address is not None:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        else:
            tmp = tempfile.mkdtemp(prefix="hf-ray-")    # short: Ray's socket paths must fit in 107 bytes
            with _no_cloud_probe():
                ray.init(num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                         object_store_memory=LOCAL_OBJECT_STORE, _temp_dir=tmp, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        what = f"reach the Ray cluster at {address}" if address else "start a local Ray"
        raise InputError(f"cannot {what}: {str(e).strip().splitlines()[0]}") from e
    try:
        yield ray
    finally:
        ray.shutdown()          # a Ray this process started goes with every process of it
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _no_cloud_probe() -> Iterator[None]:
    """While a single-node Ray starts its processes (they inherit the environment): Ray's usage-stats process
    asks cloud metadata addresses (169.254.169.254, metadata.google.internal) which cloud it runs on, even
    with usage stats off.  Python's HTTP clients send that through a proxy on a closed loopback port, so
    nothing leaves the host.  HTTP_PROXY in upper case only: libcurl (pyarrow's S3 and GCS staging) and gRPC
    read the lower-case http_proxy, so staging and Ray's own traffic are not sent there."""
    added = {k: v for k, v in (("HTTP_PROXY", "http://127.0.0.1:9"), ("NO_PROXY", "127.0.0.1,localhost,::1"))
             if not any(n in os.environ for n in (k, k.lower()))}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


@dataclass
class _Task:
    items: list[tuple[int, int, FileJob]]      # (file_no, part_no, job)
    bytes: int = 0
    ref: Any = None


@dataclass
class RayExecutor:
    """Parse tasks on Ray, batches staged under ``staging`` (a path or ``pyarrow.fs`` URI every node
    reaches; default: a temporary folder, for a single-node Ray only), loaded here."""

    address: str | None = None
    staging: str | None = None
    num_cpus: int | None = None
    max_retries: int = 2
    run_name: str | None = None
    parse: Callable[[FileJob], Iterator[tuple[str, Any]]] | None = None    # each task's parser (None: parse_file)
    tasks: int = 0
    staged_files: int = 0
    _pending: dict[tuple[int, int], _Task] = field(default_factory=dict, repr=False)   # submitted, not collected
    _parked: dict[tuple[int, int], stg.StagedPart] = field(default_factory=dict, repr=False)   # collected, not loaded

    def __post_init__(self) -> None:
        if self.address is not None and self.staging is None:
            raise InputError("--ray-address needs --staging: a shared path or object store URI (s3://, gs://, ...) "
                             "that the driver and every worker can read and write")
        if self.staging is not None:
            stg.open_staging(self.staging)        # a bad URI fails before anything is planned

    def run(self, store: Store, work: list[Plan], prog: ProgressBar) -> Iterator[tuple[Plan, FileOutcome]]:
        if not work:
            return                                # an unchanged fleet: no task, Ray not even started
        run = self.run_name or f"run-{uuid.uuid4().hex[:12]}"
        with ray_connection(self.address, self.num_cpus) as ray, self._staging_location() as uri:
            fs, _ = stg.open_staging(uri)
            remote = ray.remote(num_cpus=1, max_retries=self.max_retries, retry_exceptions=True)(stg.parse_group)
            submit = self._submitter(remote, uri, run)
            try:
                parts = self._schedule(work, submit)
                for i, p in enumerate(work):
                    staged = [self._part(ray, submit, (i, k)) for k in range(parts[i])]
                    batches = (stg.read_staged(fs, staged[0]) if len(staged) == 1
                               else parallel.join_ranges(stg.read_staged(fs, s) for s in staged))
                    yield p, load_file(store, p, batches)
            finally:
                for task in {id(t): t for t in self._pending.values()}.values():
                    with contextlib.suppress(Exception):
                        ray.cancel(task.ref, force=True)
                self._pending.clear()
                self._parked.clear()
                stg.remove_run(uri, run)

    @contextlib.contextmanager
    def _staging_location(self) -> Iterator[str]:
        if self.staging is not None:
            yield self.staging
            return
        tmp = tempfile.mkdtemp(prefix="hangforensics-staging-")    # a single-node Ray: this host's disk
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _submitter(self, remote: Any, uri: str, run: str) -> Callable[[_Task], _Task]:
        def submit(task: _Task) -> _Task:
            task.ref = remote.remote(task.items, uri, run, self.parse)
            self.tasks += 1
            for file_no, part_no, _ in task.items:
                self._pending[(file_no, part_no)] = task
            return task
        return submit

    def _schedule(self, work: list[Plan], submit: Callable[[_Task], _Task]) -> list[int]:
        """Submit every task in plan order (Ray starts them roughly in that order, the loader reads in it);
        return how many parts each file has."""
        parts = [1] * len(work)
        tasks: list[_Task] = []
        groups: dict[str, _Task] = {}
        for i, p in enumerate(work):
            job = p.job()
            if parallel.splittable(p):
                size = (job.end_offset or p.st.st_size) - job.start_offset
                pieces = parallel.split_job(job, max(2, math.ceil(size / parallel.SPLIT_MIN_BYTES)))
                parts[i] = len(pieces)
                tasks += [_Task([(i, k, piece)]) for k, piece in enumerate(pieces)]
                continue
            group = groups.get(p.file.engine)
            if group is None or group.bytes >= GROUP_BYTES:
                group = groups[p.file.engine] = _Task([])
                tasks.append(group)
            group.items.append((i, 0, job))
            group.bytes += p.st.st_size
        for task in tasks:
            submit(task)
        return parts

    def _part(self, ray: Any, submit: Callable[[_Task], _Task], key: tuple[int, int]) -> stg.StagedPart:
        """The staged manifest of one file part, waiting for the task that has it."""
        while key not in self._parked:
            self._collect(ray, submit, self._pending[key])
        return self._parked.pop(key)

    def _collect(self, ray: Any, submit: Callable[[_Task], _Task], task: _Task) -> None:
        """Park a finished task's manifests.  A failed group's files are submitted again one per task (so
        one bad file does not take its engine's others with it); a file whose own task failed is parked
        as failed, naming its engine and file."""
        from ray.exceptions import RayError

        try:
            found = {(s.file_no, s.part_no): s for s in ray.get(task.ref)}
        except RayError as e:
            if len(task.items) > 1:
                for item in task.items:
                    submit(_Task([item]))
                return
            file_no, part_no, job = task.items[0]
            found = {(file_no, part_no): stg.StagedPart(file_no, part_no, job.engine, job.rel_path, error=(
                f"parse task failed on Ray after {self.max_retries + 1} attempt(s) (engine {job.engine}, "
                f"file {job.rel_path}): {_reason(e)}"))}
        for key, staged in found.items():
            del self._pending[key]
            self._parked[key] = staged
            self.staged_files += staged.files_written


def _host_port(address: str | None) -> tuple[str, int] | None:
    """HOST:PORT of a cluster address (None for none, ``auto`` or a ``ray://`` client address)."""
    if address is None or "://" in address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() else None


def _is_loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _check_reachable(address: str, host: str, port: int, timeout_s: float = 10.0) -> None:
    """Ray retries an unreachable head for many minutes: a nightly job says so at once instead."""
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise InputError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from e


def _reason(e: BaseException) -> str:
    cause = getattr(e, "cause", None)
    err = cause if isinstance(cause, BaseException) else e
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
