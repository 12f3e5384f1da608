"""``capture``: find the engine, take the snapshot rounds, tail the logs, write the bundle.

Bounded: the rounds stop at ``timeout_s`` (a round that cannot start in time is reported, not
taken), each py-spy run has its own timeout, logs are streamed, and the bundle is written whatever
failed.  Read-only on the target: nothing here sends it a signal.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .. import __version__
from . import discover, logtail, tools
from .bundle import Staging, default_output, engine_name, write_bundle
from .errors import CaptureError
from .manifest import (
    FORMAT_VERSION,
    CaptureOptions,
    Failure,
    HostInfo,
    LogTail,
    Manifest,
    ProcessEntry,
    ProcessFacts,
    Round,
    TargetInfo,
    ToolInfo,
)
from .procfs import STATE_NAMES
from .snapshot import RoundOutcome, take_round

PYSPY_TIMEOUT_S = 30.0            # one dump; --native symbolises big libraries (libtorch): seconds
MIN_ROUND_S = 1.0                 # a round is not started with less time than this left
ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")
TITLE_MAX = 1000                  # characters of a command line kept in the manifest


@dataclass(frozen=True, slots=True)
class CaptureRequest:
    pid: int | None = None
    port: int | None = None
    match: str | None = None
    output: Path | None = None
    repeat: int = 1
    interval_s: float = 3.0
    native: bool = False
    logs: tuple[Path, ...] = ()
    log_lines: int = 20000
    timeout_s: float = 120.0
    name: str | None = None
    pyspy: str | None = None      # py-spy executable; None: $HANGFORENSICS_PYSPY, PATH, then installed
    argv: tuple[str, ...] = ()    # the command line, recorded in the manifest


@dataclass(frozen=True, slots=True)
class CaptureResult:
    path: Path
    manifest: Manifest
    seconds: float

    @property
    def dumps_ok(self) -> int:
        return sum(1 for r in self.manifest.rounds for d in r.dumps if d.ok)

    @property
    def dumps_total(self) -> int:
        return sum(len(r.dumps) for r in self.manifest.rounds)

    @property
    def max_spread_s(self) -> float | None:
        spreads = [r.start_spread_s for r in self.manifest.rounds if r.start_spread_s is not None]
        return max(spreads) if spreads else None


def _validate(req: CaptureRequest) -> None:
    if req.repeat < 1:
        raise CaptureError("--repeat must be at least 1")
    if req.interval_s < 0:
        raise CaptureError("--interval must not be negative")
    if req.timeout_s <= 0:
        raise CaptureError("--timeout must be positive")
    if req.log_lines < 0:
        raise CaptureError("--log-lines must not be negative")
    if req.output is not None and Path(req.output).is_dir():
        raise CaptureError(f"-o {req.output} is a directory: give a file name (BUNDLE.tar.gz)")
    if req.output is not None and Path(req.output).exists():
        # an earlier capture is evidence too: never overwritten
        raise CaptureError(f"-o {req.output} already exists: give another name")


def _host() -> HostInfo:
    scope = None
    with contextlib.suppress(OSError):
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    return HostInfo(socket.gethostname(), platform.release(), platform.machine(), os.geteuid(), scope)


def capture_engine(req: CaptureRequest) -> CaptureResult:
    """Capture the engine ``req`` names into one bundle; see the package docstring for what is in it."""
    _validate(req)
    t0 = time.monotonic()
    deadline = t0 + req.timeout_s
    started = datetime.now().astimezone()
    tree = discover.find_engine(req.pid, req.port, req.match)
    host = _host()
    output = Path(req.output) if req.output else default_output(host.hostname)
    base, k = output, 2
    while req.output is None and output.exists():     # two captures in one second: keep both
        output = base.with_name(base.name.replace(".tar.gz", f"-{k}.tar.gz"))
        k += 1
    engine = engine_name(req.name, host.hostname, tree.root_pid)
    failures: list[Failure] = []
    skipped = [Failure("pyspy", f"not a Python process: pid {p.pid} ({p.title[:60]}, exe {p.exe}): "
                                f"no py-spy dump", p.pid) for p in tree.processes if not p.python]
    with Staging(output) as staging:
        pyspy = tools.find_pyspy(req.pyspy or os.environ.get(tools.PYSPY_ENV))
        if pyspy.path is None:
            failures.append(Failure("tool", pyspy.note))
        gpu_path = tools.nvidia_smi_path()
        if gpu_path is None:
            failures.append(Failure("gpu", "nvidia-smi not found on PATH: no GPU samples"))
        outcomes = _rounds(req, tree, pyspy, gpu_path, staging, deadline, failures)
        gpu_file = _gpu_file(outcomes, staging, failures)
        tool_infos = [pyspy.info, tools.nvidia_smi_info(gpu_path)] + _engine_tools(tree, failures)
        logs = _logs(req, tree, staging, failures)
        finished = datetime.now().astimezone()
        for o in outcomes:
            failures.extend(o.failures)
        manifest = Manifest(
            format_version=FORMAT_VERSION, engine=engine, host=host, command=tuple(req.argv),
            hangforensics_version=__version__, started=started, finished=finished,
            target=TargetInfo(tree.selector, tree.value, tree.root_pid, tree.family),
            options=CaptureOptions(req.native, req.repeat, req.interval_s, req.timeout_s, req.log_lines),
            tools=tuple(tool_infos), processes=tuple(_entries(tree, outcomes)),
            rounds=tuple(Round(o.index, o.started, o.finished, f"proc/round{o.index}.json", tuple(o.dumps),
                               tuple(o.facts)) for o in outcomes),
            gpu_file=gpu_file, logs=tuple(logs), failures=tuple(_ordered(failures)), skipped=tuple(skipped),
        )
        path = write_bundle(output, engine, staging, manifest)
    return CaptureResult(path, manifest, time.monotonic() - t0)


def _ordered(failures: list[Failure]) -> list[Failure]:
    order = {"tool": 0, "process": 1, "pyspy": 2, "round": 3, "gpu": 4, "engine-version": 5, "log": 6}
    return sorted(failures, key=lambda f: (order.get(f.what, 9), f.round or 0, f.pid or 0))


def _rounds(req: CaptureRequest, tree: discover.EngineTree, pyspy: tools.PySpy, gpu_path: str | None,
            staging: Staging, deadline: float, failures: list[Failure]) -> list[RoundOutcome]:
    outcomes: list[RoundOutcome] = []
    gone: set[int] = set()
    procs = list(tree.processes)
    last_start = None
    for k in range(1, req.repeat + 1):
        if last_start is not None:
            wait = last_start + req.interval_s - time.monotonic()
            if time.monotonic() + max(wait, 0) + MIN_ROUND_S > deadline:
                failures.append(Failure("round", f"rounds {k}..{req.repeat} not taken: --timeout "
                                                 f"{req.timeout_s:g} s reached", round=k))
                break
            if wait > 0:
                time.sleep(wait)
        last_start = time.monotonic()
        per_call = max(min(PYSPY_TIMEOUT_S, deadline - last_start), 0.5)
        o = take_round(k, procs, pyspy, req.native, per_call, staging.path, gpu_path, gone)
        _stage_proc(o, tree, staging)
        outcomes.append(o)
        if all(p.pid in gone for p in procs):
            if k < req.repeat:
                failures.append(Failure("round", f"rounds {k + 1}..{req.repeat} not taken: every process "
                                                 f"of the engine had exited", round=k + 1))
            break
    return outcomes


def _stage_proc(o: RoundOutcome, tree: discover.EngineTree, staging: Staging) -> None:
    by_pid = {p.pid: p for p in tree.processes}
    rows = []
    for f in o.facts:
        p = by_pid[f.pid]
        rows.append({"pid": f.pid, "label": p.label, "role": p.role, "rank": p.rank,
                     "taken": f.taken.isoformat() if f.taken else None, "gone": f.gone, "state": f.state,
                     "state_name": _state_name(f.state), "cpu_user_s": f.cpu_user_s,
                     "cpu_system_s": f.cpu_system_s, "main_cpu_s": f.main_cpu_s,
                     "wchan": f.wchan, "syscall": f.syscall, "threads": f.threads,
                     "thread_states": f.thread_states, "thread_wchans": f.thread_wchans,
                     "thread_list": o.thread_rows.get(f.pid, [])})
    staging.write_json(f"proc/round{o.index}.json",
                       {"round": o.index, "started": o.started.isoformat(), "processes": rows},
                       o.started.timestamp())


def _state_name(state: str | None) -> str | None:
    return STATE_NAMES.get(state or "", state)


def _gpu_file(outcomes: list[RoundOutcome], staging: Staging, failures: list[Failure]) -> str | None:
    rel = "gpu/nvidia-smi.csv"
    wrote = False
    for o in outcomes:
        if o.gpu_error:
            failures.append(Failure("gpu", o.gpu_error, round=o.index))
        if o.gpu_csv:
            lines = o.gpu_csv.splitlines(keepends=True)
            # one header for the whole file: later rounds append their rows only
            body = "".join(lines if not wrote else lines[1:])
            staging.append_text(rel, body, (o.finished or o.started).timestamp())
            wrote = True
    return rel if wrote else None


def _engine_tools(tree: discover.EngineTree, failures: list[Failure]) -> list[ToolInfo]:
    packages = [tree.family] if tree.family in ("sglang", "vllm", "torch") else ["sglang", "vllm"]
    probe = next((p for p in tree.processes if p.rank and p.python), None) or \
        next((p for p in tree.processes if p.python), None)
    if probe is None:
        failures.append(Failure("engine-version", "no Python process in the tree to read the engine's "
                                                  "version from"))
        return [ToolInfo(n, None, None, "no Python process in the tree") for n in packages]
    found, why = tools.engine_versions(probe.pid, probe.exe, packages)
    if why:
        failures.append(Failure("engine-version", why, probe.pid))
        return [ToolInfo(n, None, None, why) for n in packages]
    return [ToolInfo(n, v, probe.exe, None if v else f"not installed for {probe.exe}")
            for n, v in found.items()]


def _logs(req: CaptureRequest, tree: discover.EngineTree, staging: Staging,
          failures: list[Failure]) -> list[LogTail]:
    sources: list[tuple[Path, str, str]] = []           # (path to read, path to show, origin)
    for given in req.logs:
        p = Path(given)
        if p.is_dir():
            # a folder's logs, not the bundles or archives that may sit beside them
            sources += [(f, str(f), "--logs") for f in sorted(p.iterdir()) if f.is_file()
                        and not f.name.startswith(".") and not f.name.endswith(ARCHIVES)]
        elif p.is_file():
            sources.append((p, str(p), "--logs"))
        else:
            failures.append(Failure("log", f"log {p}: no such file"))
    if not req.logs:
        # nothing named: the files the engine's own stdout/stderr go to, when they are files
        sources = logtail.stdout_logs([p.pid for p in tree.processes])
    out: list[LogTail] = []
    taken: set[str] = set()
    seen: set[tuple[int, int]] = set()
    for src, shown, origin in sources:
        try:
            st = os.stat(src)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            tail = logtail.plan_tail(src, req.log_lines)
        except OSError as e:
            failures.append(Failure("log", f"log {shown}: cannot read: {e.strerror or e}"))
            continue
        member = f"logs/{logtail.unique_member(Path(shown.removesuffix(' (deleted)')).name, taken)}"
        try:
            n = logtail.copy_tail(tail, staging.path / member)
        except OSError as e:
            failures.append(Failure("log", f"log {shown}: cannot copy its tail: {e.strerror or e}",
                                    file=member))
            continue
        out.append(LogTail(shown, member, origin, n, tail.lines, tail.complete,
                           datetime.fromtimestamp(tail.mtime).astimezone()))
    return out


def _entries(tree: discover.EngineTree, outcomes: list[RoundOutcome]) -> list[ProcessEntry]:
    first: dict[int, ProcessFacts] = {f.pid: f for f in outcomes[0].facts} if outcomes else {}
    out = []
    for p in tree.processes:
        f = first.get(p.pid)
        lf = p.launch
        out.append(ProcessEntry(
            pid=p.pid, ppid=p.ppid, title=p.title[:TITLE_MAX], role=p.role, rank=p.rank, label=p.label,
            exe=p.exe, python=p.python,
            create_time=datetime.fromtimestamp(p.create_time).astimezone() if p.create_time else None,
            state=f.state if f else None, cpu_user_s=f.cpu_user_s if f else None,
            cpu_system_s=f.cpu_system_s if f else None, wchan=f.wchan if f else None,
            threads=f.threads if f else None,
            rank_source=("title" if p.rank and p.role != "rank" else lf.rank_source if lf and p.role == "rank" else None),
            launcher=lf.launcher if lf else None, local_rank=lf.local_rank if lf else None,
            group_rank=lf.group_rank if lf else None, world_size=lf.world_size if lf else None,
            master_addr=lf.master_addr if lf else None, master_port=lf.master_port if lf else None))
    return out

