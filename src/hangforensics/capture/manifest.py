"""The capture bundle's ``manifest.json`` (interface.md §6): typed records, their JSON form, and the reader.

``capture`` writes one manifest per bundle, in the engine folder beside the dumps; the ingest stage
reads it back with :func:`read_manifest` to date each dump by the moment it was taken (not by its
file's modification time) and to read the per-round process facts (state, CPU time, ``wchan``).

Shape (format_version 1), abridged::

    {"format": "hangforensics-capture", "format_version": 1, "engine": "gpu7-41235",
     "host": {"hostname": "gpu7", "kernel": "6.8.0", "machine": "x86_64", "euid": 0, "ptrace_scope": null},
     "command": ["hangforensics", "capture", "--pid", "41235"], "hangforensics_version": "0.1.0",
     "started": "2026-11-30T10:22:13.120451+01:00", "finished": "...",
     "target": {"selector": "pid", "value": "41235", "root_pid": 41235, "family": "sglang"},
     "options": {"native": false, "repeat": 1, "interval_s": 3.0, "timeout_s": 120.0, "log_lines": 20000},
     "tools": [{"name": "py-spy", "version": "0.4.3", "path": "/usr/bin/py-spy", "note": null}, ...],
     "processes": [{"pid": 41300, "ppid": 41235, "title": "sglang::scheduler_TP3", "role": "scheduler",
                    "rank": "TP3", "label": "TP3", "state": "S", "wchan": "unix_stream_read_generic", ...},
                   {"pid": 51302, "ppid": 51290, "title": "python -u train.py", "role": "rank",
                    "rank": "rank3", "label": "rank3", "rank_source": "env", "launcher": "torchrun",
                    "local_rank": 3, "group_rank": 0, "world_size": 8, "master_addr": "node0",
                    "master_port": 29500, ...}],
     "rounds": [{"index": 1, "started": "...", "finished": "...", "proc_file": "proc/round1.json",
                 "dumps": [{"pid": 41300, "label": "TP3", "file": "pyspy/round1/TP3-41300.txt",
                            "start": "...", "end": "...", "ok": true, ...}],
                 "facts": [{"pid": 41300, "state": "S", "cpu_user_s": 12.5, "wchan": "...", ...}]}],
     "gpu_file": null, "logs": [{"source": "/var/log/sglang.log", "file": "logs/sglang.log", ...}],
     "failures": [{"what": "gpu", "reason": "nvidia-smi not found on PATH: no GPU samples", ...}],
     "skipped": []}

Every file path in the manifest is relative to the engine folder (the manifest's own folder), with
``/`` separators: the same ``rel_path`` ingest gives a file of that engine.  Times are ISO-8601 with
the capture host's zone offset.

Compatibility: fields are only ever added, with defaults, so a manifest written before them (no
``rank_source``, ``launcher``, ``local_rank``, ... on a process) still reads, and keys a newer writer
adds are ignored.  ``format_version`` changes only when an older reader would misread a bundle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .errors import ManifestError

FORMAT = "hangforensics-capture"
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
# Roles whose processes are ranks (a collective's participants); "rank" is a torch.distributed rank
# (torchrun, SLURM, Ray Train ...) named by its environment or command line, not by a title.
RANK_ROLES = ("scheduler", "worker", "engine_core", "rank")


def ingest_rank(rank: str | None, role: str | None, pid: int | None) -> str | None:
    """The rank label ingest gives a bundle's process: its manifest rank; for a torch rank the capture
    could not name (its environment unreadable, no ``--rank`` argument) ``pid<pid>``, so its dumps are
    still compared with the other ranks' (interface.md §3); None for a process that is not a rank."""
    if rank:
        return rank
    if role == "rank" and pid is not None:
        return f"pid{pid}"
    return None


def _ts(value: datetime | None) -> str | None:
    return value.isoformat(timespec="microseconds") if value is not None else None


def _parse_ts(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError as e:
        raise ManifestError(f"{where}: not an ISO-8601 time: {value!r}") from e


@dataclass(frozen=True, slots=True)
class HostInfo:
    hostname: str
    kernel: str
    machine: str
    euid: int | None
    ptrace_scope: str | None      # /proc/sys/kernel/yama/ptrace_scope; None without Yama


@dataclass(frozen=True, slots=True)
class TargetInfo:
    selector: str                 # pid, port, match or auto
    value: str | None             # what the user gave (the pid, port or pattern)
    root_pid: int
    family: str                   # sglang, vllm, torch or unknown


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    native: bool
    repeat: int
    interval_s: float
    timeout_s: float
    log_lines: int


@dataclass(frozen=True, slots=True)
class ToolInfo:
    name: str                     # py-spy, nvidia-smi, sglang, vllm
    version: str | None
    path: str | None
    note: str | None = None       # how it was found, or why it is missing


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """One process as /proc showed it at the start of a round (read before py-spy attached)."""

    pid: int
    taken: datetime | None
    gone: bool = False            # the process had exited (or its pid was reused) at this round
    state: str | None = None      # /proc/PID/stat letter: R, S, D, Z, T, t, I
    cpu_user_s: float | None = None
    cpu_system_s: float | None = None
    wchan: str | None = None      # kernel function the main thread sleeps in; None while running
    syscall: str | None = None    # main thread's syscall (name on x86_64, else number), 'running'
    threads: int | None = None
    thread_states: dict[str, int] = field(default_factory=dict)   # state letter -> threads
    thread_wchans: dict[str, int] = field(default_factory=dict)   # wchan -> threads
    main_cpu_s: float | None = None   # the main thread's own CPU time (user + system); None in older manifests

    @property
    def cpu_s(self) -> float | None:
        if self.cpu_user_s is None or self.cpu_system_s is None:
            return None
        return self.cpu_user_s + self.cpu_system_s


@dataclass(frozen=True, slots=True)
class ProcessEntry:
    """One process of the engine tree, with the facts of the first round."""

    pid: int
    ppid: int | None
    title: str                    # /proc/PID/cmdline joined by spaces, as py-spy's header prints it
    role: str                     # main, scheduler, detokenizer, dp_controller, tokenizer, engine_core,
                                  # worker, api_server, rank (a torch.distributed rank), other
    rank: str | None              # 'DP0 TP3 EP3', as SGLang's log prefix writes it; 'rank3' (torch global
                                  # rank); None when not a rank or when nothing names it
    label: str                    # file-name label: 'TP3', 'DP0_TP3', 'rank3', 'main', 'detokenizer'
    exe: str | None
    python: bool                  # py-spy can read it (a Python interpreter)
    create_time: datetime | None
    state: str | None = None
    cpu_user_s: float | None = None
    cpu_system_s: float | None = None
    wchan: str | None = None
    threads: int | None = None
    # Where the rank label came from and the launcher's facts about the process (its node), read from
    # the few variables a launcher sets (RANK, LOCAL_RANK, GROUP_RANK, WORLD_SIZE, MASTER_ADDR/PORT,
    # SLURM_*); no other variable of the environment is kept.  None in older manifests / when unknown.
    rank_source: str | None = None    # title, env (RANK / SLURM_PROCID) or argv (--rank N)
    launcher: str | None = None       # torchrun, slurm; None when no launcher is known
    local_rank: int | None = None     # LOCAL_RANK (SLURM_LOCALID)
    group_rank: int | None = None     # GROUP_RANK: the node's rank among the job's nodes (SLURM_NODEID)
    world_size: int | None = None     # WORLD_SIZE (SLURM_NTASKS)
    master_addr: str | None = None    # MASTER_ADDR: the rendezvous host
    master_port: int | None = None    # MASTER_PORT


@dataclass(frozen=True, slots=True)
class DumpRecord:
    """One py-spy run: what it targeted, when, and where its output is."""

    round: int
    pid: int
    label: str
    rank: str | None
    role: str
    ok: bool
    file: str | None              # the dump (engine-relative), None when py-spy produced none
    error_file: str | None        # py-spy's stderr when it failed (kind capture_error)
    start: datetime | None        # wall clock just before py-spy started
    end: datetime | None          # wall clock when it had exited (the stack was read in between)
    native: bool
    exit_code: int | None = None
    reason: str | None = None     # one line, why it failed
    note: str | None = None       # e.g. --native failed and a plain dump was taken instead

    @property
    def time(self) -> datetime | None:
        """The capture time a dump is dated by: when py-spy had the stack (its end)."""
        return self.end or self.start


@dataclass(frozen=True, slots=True)
class Round:
    index: int                    # 1-based
    started: datetime | None
    finished: datetime | None
    proc_file: str | None         # proc/round<k>.json: the same facts plus every thread
    dumps: tuple[DumpRecord, ...]
    facts: tuple[ProcessFacts, ...]

    @property
    def start_spread_s(self) -> float | None:
        """Seconds between the first and the last dump's start in this round (the ranks' skew)."""
        starts = [d.start for d in self.dumps if d.start is not None]
        return (max(starts) - min(starts)).total_seconds() if starts else None


@dataclass(frozen=True, slots=True)
class Failure:
    what: str                     # pyspy, process, gpu, log, tool, engine-version, round
    reason: str                   # one line for a human
    pid: int | None = None
    round: int | None = None
    file: str | None = None


@dataclass(frozen=True, slots=True)
class LogTail:
    source: str                   # the path read on the capture host
    file: str                     # engine-relative member, logs/<name>
    origin: str                   # '--logs', or 'stdout of pid 41235' when found through /proc/PID/fd
    bytes: int
    lines: int | None             # None for a compressed file copied whole
    complete: bool                # the whole file, not a tail
    mtime: datetime | None        # the source file's modification time (kept on the member too)


@dataclass(frozen=True, slots=True)
class Manifest:
    format_version: int
    engine: str
    host: HostInfo
    command: tuple[str, ...]
    hangforensics_version: str
    started: datetime | None
    finished: datetime | None
    target: TargetInfo
    options: CaptureOptions
    tools: tuple[ToolInfo, ...]
    processes: tuple[ProcessEntry, ...]
    rounds: tuple[Round, ...]
    gpu_file: str | None
    logs: tuple[LogTail, ...]
    failures: tuple[Failure, ...]
    skipped: tuple[Failure, ...] = ()   # not attempted on purpose (a non-Python process of the tree)

    # -- lookups the ingest stage needs ---------------------------------------------------------------

    def dumps_by_file(self) -> dict[str, DumpRecord]:
        """Engine-relative path -> its dump record, for dumps and saved py-spy errors alike."""
        out: dict[str, DumpRecord] = {}
        for r in self.rounds:
            for d in r.dumps:
                for f in (d.file, d.error_file):
                    if f:
                        out[f] = d
        return out

    def dump_for(self, rel_path: str) -> DumpRecord | None:
        """The dump record of an engine-relative file path (``pyspy/round1/TP3-41300.txt``), if any."""
        return self.dumps_by_file().get(rel_path.replace("\\", "/").lstrip("/"))

    def process(self, pid: int) -> ProcessEntry | None:
        return next((p for p in self.processes if p.pid == pid), None)

    def facts_of(self, pid: int) -> list[tuple[int, ProcessFacts]]:
        """(round, facts) of one process, round by round."""
        return [(r.index, f) for r in self.rounds for f in r.facts if f.pid == pid]

    def tool(self, name: str) -> ToolInfo | None:
        return next((t for t in self.tools if t.name == name), None)

    # -- JSON ----------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": self.format_version, "engine": self.engine,
            "host": _plain(self.host), "command": list(self.command),
            "hangforensics_version": self.hangforensics_version,
            "started": _ts(self.started), "finished": _ts(self.finished),
            "target": _plain(self.target), "options": _plain(self.options),
            "tools": [_plain(t) for t in self.tools],
            "processes": [_plain(p) for p in self.processes],
            "rounds": [{
                "index": r.index, "started": _ts(r.started), "finished": _ts(r.finished),
                "start_spread_s": r.start_spread_s, "proc_file": r.proc_file,
                "dumps": [_plain(d) for d in r.dumps], "facts": [_plain(f) for f in r.facts],
            } for r in self.rounds],
            "gpu_file": self.gpu_file,
            "logs": [_plain(x) for x in self.logs],
            "failures": [_plain(x) for x in self.failures],
            "skipped": [_plain(x) for x in self.skipped],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: Any, where: str = MANIFEST_NAME) -> Manifest:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ManifestError(f"{where}: not a hangforensics capture manifest")
        version = data.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
            raise ManifestError(f"{where}: format_version {version!r} is not one this release reads "
                                f"(1..{FORMAT_VERSION}): upgrade hangforensics")
        try:
            rounds = tuple(Round(
                index=int(r["index"]), started=_parse_ts(r.get("started"), where),
                finished=_parse_ts(r.get("finished"), where), proc_file=r.get("proc_file"),
                dumps=tuple(_build(DumpRecord, d, where) for d in r.get("dumps", [])),
                facts=tuple(_build(ProcessFacts, f, where) for f in r.get("facts", [])),
            ) for r in data.get("rounds", []))
            return cls(
                format_version=version, engine=str(data["engine"]),
                host=_build(HostInfo, data["host"], where),
                command=tuple(str(a) for a in data.get("command", [])),
                hangforensics_version=str(data.get("hangforensics_version", "")),
                started=_parse_ts(data.get("started"), where),
                finished=_parse_ts(data.get("finished"), where),
                target=_build(TargetInfo, data["target"], where),
                options=_build(CaptureOptions, data["options"], where),
                tools=tuple(_build(ToolInfo, t, where) for t in data.get("tools", [])),
                processes=tuple(_build(ProcessEntry, p, where) for p in data.get("processes", [])),
                rounds=rounds, gpu_file=data.get("gpu_file"),
                logs=tuple(_build(LogTail, x, where) for x in data.get("logs", [])),
                failures=tuple(_build(Failure, x, where) for x in data.get("failures", [])),
                skipped=tuple(_build(Failure, x, where) for x in data.get("skipped", [])),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ManifestError(f"{where}: malformed ({type(e).__name__}: {e})") from e


_TIME_FIELDS = {"taken", "create_time", "start", "end", "mtime"}


def _plain(obj: Any) -> dict[str, Any]:
    """A record as JSON-ready values (times as ISO-8601 strings)."""
    out: dict[str, Any] = {}
    for name in obj.__dataclass_fields__:
        value = getattr(obj, name)
        out[name] = _ts(value) if isinstance(value, datetime) else value
    return out


def _build(cls: type, data: Any, where: str) -> Any:
    """A record from its JSON object; keys this release does not know are ignored (a newer minor writer)."""
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: {cls.__name__} is not an object")
    known = cls.__dataclass_fields__
    kwargs = {k: (_parse_ts(v, where) if k in _TIME_FIELDS else v) for k, v in data.items() if k in known}
    return cls(**kwargs)


def read_manifest(engine_dir: Path) -> Manifest | None:
    """The manifest of a capture bundle's engine folder; None when the folder holds no ``manifest.json``.

    Raises :class:`ManifestError` when the file exists but cannot be used (not JSON, not a capture
    manifest, a newer format version): the caller decides whether that stops it or becomes a note.
    """
    path = Path(engine_dir) / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"{path}: cannot read: {e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from e
    return Manifest.from_dict(data, str(path))
