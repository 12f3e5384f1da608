"""Find a serving engine's process tree and name each process's role and rank.

An engine is one serving process tree: its root (SGLang's ``sglang.launch_server`` / ``sglang serve``,
vLLM's ``vllm serve``) and every descendant.  Roles come from process titles, which both engines set
with ``setproctitle`` (reference/sglang-formats.md §1.2, §9.1):

==============================  ================  =============================
title / command line            role              rank label
==============================  ================  =============================
``sglang::scheduler_DP0_TP3``   ``scheduler``     ``DP0 TP3`` (label ``DP0_TP3``)
``sglang::detokenizer``         ``detokenizer``
``sglang::data_parallel_...``   ``dp_controller``
``... -m sglang.launch_server``  ``main``
``VLLM::EngineCore_DP0``        ``engine_core``   ``DP0``
``VLLM::Worker_TP1``            ``worker``        ``TP1``
``VLLM::APIServer``, vllm serve ``api_server`` / ``main``
anything else                   ``other`` (the tree's root: ``main``)
==============================  ================  =============================

Only /proc is read (through psutil): nothing here signals or attaches to a process.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import psutil

from ..parsers.pyspy import TITLE_RANK_RE, rank_from_title
from ..ranks import rank_key
from .errors import CaptureError, NoEngineError

# (pattern over the title, role, family); the first match wins.
ROLE_RULES: list[tuple[re.Pattern[str], str, str]] = [(re.compile(p), role, fam) for p, role, fam in (
    (r"^sglang::scheduler", "scheduler", "sglang"),
    (r"^sglang::detokenizer", "detokenizer", "sglang"),
    (r"^sglang::(?:data_parallel_controller|dp_controller)", "dp_controller", "sglang"),
    (r"^sglang::tokenizer", "tokenizer", "sglang"),
    (r"^sglang::", "other", "sglang"),
    (r"\bsglang[./]launch_server\b|(?:^|/|\s)sglang\s+serve\b", "main", "sglang"),
    (r"(?i)^(?:vllm::)?EngineCore(?:_DP\d+)?\b", "engine_core", "vllm"),
    (r"(?i)^(?:vllm::)?(?:Vllm)?Worker(?:[_-]\w+)?\b", "worker", "vllm"),
    (r"(?i)^(?:vllm::)?APIServer\b", "api_server", "vllm"),
    (r"(?:^|/|\s)vllm\s+serve\b|\bvllm\.entrypoints\.", "main", "vllm"),
)]
RANK_ROLES = ("scheduler", "worker", "engine_core")
# What an engine's root or one of its ranks looks like: what --match defaults to when nothing is given.
DEFAULT_SEARCH = ("sglang::scheduler_*, sglang::detokenizer, sglang.launch_server / sglang serve, "
                  "VLLM::EngineCore*, VLLM::Worker*, VLLM::APIServer, vllm serve")
# Secrets that engines take on their command line: never copied into a bundle.
SECRET_OPT_RE = re.compile(r"(?i)(--?[\w-]*(?:api[-_]?key|token|secret|password|passwd)[\w-]*)(=|\s+)(\S+)")
PYTHON_EXE_RE = re.compile(r"^(?:python|pypy)[\d.]*[a-z]*$")


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int | None
    title: str                    # /proc/PID/cmdline joined by spaces (secrets masked)
    name: str                     # comm, at most 15 characters
    exe: str | None
    create_time: float | None     # epoch seconds: tells a process from a later one reusing its pid
    role: str
    family: str                   # sglang, vllm or unknown
    rank: str | None
    label: str
    python: bool


@dataclass(frozen=True, slots=True)
class EngineTree:
    root_pid: int
    family: str
    selector: str                 # pid, port, match or auto
    value: str | None
    processes: tuple[ProcInfo, ...]   # root first, then by role (ranks in rank order) and pid

    @property
    def ranks(self) -> list[ProcInfo]:
        return [p for p in self.processes if p.rank]


def redact(text: str) -> str:
    """``--api-key sk-123`` -> ``--api-key ***``: bundles are handed around, keys must not go with them."""
    return SECRET_OPT_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)


def classify(title: str) -> tuple[str, str, str | None]:
    """(role, family, rank) of a process from its title / command line.

    >>> classify("sglang::scheduler_DP0_TP3_EP3")
    ('scheduler', 'sglang', 'DP0 TP3 EP3')
    """
    for pattern, role, family in ROLE_RULES:
        if pattern.search(title):
            rank = None
            if role == "scheduler":
                rank = rank_from_title(title)
            elif role in ("worker", "engine_core"):
                tags = TITLE_RANK_RE.findall(title.split("::", 1)[-1])
                rank = " ".join(tags) or None
            return role, family, rank
    return "other", "unknown", None


def label_of(role: str, rank: str | None, title: str) -> str:
    """A file-name label: the rank with '_' for spaces ('DP0_TP3'), else the role."""
    if rank and role in ("scheduler", "worker"):
        return rank.replace(" ", "_")
    if role == "engine_core":
        return "EngineCore" + (f"_{rank.replace(' ', '_')}" if rank else "")
    return role


def _title(p: psutil.Process) -> str:
    try:
        parts = [a for a in p.cmdline() if a]
    except (psutil.ZombieProcess, psutil.AccessDenied):
        parts = []
    if parts:
        return " ".join(parts)
    try:
        return f"[{p.name()}]"
    except psutil.Error:
        return ""


def _is_python(p: psutil.Process, exe: str | None) -> bool:
    if exe and PYTHON_EXE_RE.match(os.path.basename(exe.removesuffix(" (deleted)"))):
        return True
    # an embedded interpreter (a custom launcher binary) still maps libpython
    try:
        with open(f"/proc/{p.pid}/maps", encoding="utf-8", errors="replace") as fh:
            return any("libpython" in line for line in fh)
    except OSError:
        return False


def describe(p: psutil.Process, root_pid: int | None = None) -> ProcInfo | None:
    """The process's identity and role; None when it has already exited."""
    try:
        with p.oneshot():
            ppid = p.ppid()
            create = p.create_time()
            name = p.name()
            title = _title(p)
            try:
                exe = p.exe() or None
            except (psutil.AccessDenied, psutil.ZombieProcess):
                exe = None
    except psutil.NoSuchProcess:
        return None
    role, family, rank = classify(title)
    if role == "other" and p.pid == root_pid:
        role = "main"             # the root of the tree is its main process, whatever launched it
    return ProcInfo(p.pid, ppid, redact(title), name, exe, create, role, family, rank,
                    label_of(role, rank, title), _is_python(p, exe))


def _own_lineage() -> set[int]:
    """This process, its ancestors and descendants: never part of what is captured."""
    me = psutil.Process()
    pids = {me.pid}
    try:
        pids |= {a.pid for a in me.parents()}
        pids |= {c.pid for c in me.children(recursive=True)}
    except psutil.Error:
        pass
    return pids


def engine_root(pid: int) -> int:
    """Walk up from any process of an engine to its root: the highest ancestor that is still engine-like."""
    try:
        p = psutil.Process(pid)
        root = p.pid
        # nearest first; pid 1 too (a container whose entrypoint is the server)
        for parent in p.parents():
            role, family, _ = classify(_title(parent))
            if family == "unknown" and role == "other":
                break
            root = parent.pid
        return root
    except psutil.NoSuchProcess as e:
        raise NoEngineError(f"no process with pid {pid}") from e


def tree(root_pid: int, selector: str, value: str | None) -> EngineTree:
    """The engine tree under ``root_pid``: the root and every descendant, classified."""
    try:
        root = psutil.Process(root_pid)
        members = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess as e:
        raise NoEngineError(f"the engine's root process {root_pid} exited before it could be captured") from e
    mine = _own_lineage()
    infos = [i for i in (describe(p, root_pid) for p in members if p.pid not in mine) if i is not None]
    if not infos:
        raise NoEngineError(f"the engine's processes under pid {root_pid} exited before they could be "
                            f"captured")
    families = [i.family for i in infos if i.family != "unknown"]
    family = max(set(families), key=families.count) if families else "unknown"
    order = {"main": 0, "api_server": 1, "dp_controller": 2, "engine_core": 3, "scheduler": 4, "worker": 4,
             "tokenizer": 5, "detokenizer": 6, "other": 7}

    def key(i: ProcInfo) -> tuple:
        return (i.pid != root_pid, order.get(i.role, 9), rank_key(i.rank) if i.rank else (), i.pid)

    return EngineTree(root_pid, family, selector, value, tuple(sorted(infos, key=key)))


def _search_all(pattern: re.Pattern[str] | None) -> tuple[list[psutil.Process], int]:
    """Processes whose title/command line (or comm) matches ``pattern`` (default: any engine role)."""
    mine = _own_lineage()
    found, seen = [], 0
    for p in psutil.process_iter():
        if p.pid in mine:
            continue
        seen += 1
        try:
            title = _title(p)
            name = p.name()
        except psutil.Error:
            continue
        if pattern is not None:
            if pattern.search(title) or pattern.search(name):
                found.append(p)
        elif classify(title)[0] != "other":
            found.append(p)
    return found, seen


def _one_root(found: list[psutil.Process], what: str) -> int:
    roots: dict[int, str] = {}
    for p in found:
        try:
            r = engine_root(p.pid)
            roots.setdefault(r, _title(psutil.Process(r))[:80])
        except (NoEngineError, psutil.Error):
            continue                         # exited while we looked
    if not roots:
        raise NoEngineError(f"no engine process found: {what}")
    if len(roots) > 1:
        listed = "; ".join(f"pid {r}: {t}" for r, t in sorted(roots.items()))
        raise NoEngineError(f"{what} matched {len(roots)} engines ({listed}): give --pid of one of them")
    return next(iter(roots))


def find_engine(pid: int | None = None, port: int | None = None, match: str | None = None) -> EngineTree:
    """The engine tree to capture, from exactly one of a pid (any process of the tree), a TCP port the
    engine listens on, or a regex over titles / command lines; with none given, the one engine of this
    host.  Raises :class:`NoEngineError` (one line, what was searched) when nothing or several match."""
    given = [x for x in (pid, port, match) if x is not None]
    if len(given) > 1:
        raise CaptureError("give only one of --pid, --port and --match")
    if not os.path.isdir("/proc/self"):
        raise CaptureError("capture reads /proc: it runs on the Linux host of the engine")
    if pid is not None:
        if pid <= 0 or not psutil.pid_exists(pid):
            raise NoEngineError(f"no process with pid {pid} on this host")
        return tree(engine_root(pid), "pid", str(pid))
    if port is not None:
        return tree(_listener(port), "port", str(port))
    if match is not None:
        try:
            rx = re.compile(match)
        except re.error as e:
            raise CaptureError(f"--match {match!r} is not a valid regex: {e}") from e
        found, seen = _search_all(rx)
        return tree(_one_root(found, f"--match {match!r} over the titles and command lines of {seen} "
                                     f"processes"), "match", match)
    found, seen = _search_all(None)
    return tree(_one_root(found, f"searched the titles and command lines of {seen} processes for "
                                 f"{DEFAULT_SEARCH}; give --pid, --port or --match"), "auto", None)


def _listener(port: int) -> int:
    """The engine root of the process listening on TCP ``port``."""
    if not 0 < port < 65536:
        raise CaptureError(f"--port {port} is not a TCP port")
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied as e:
        raise CaptureError(f"cannot list TCP listeners to find port {port}: run as root, or give "
                           f"--pid") from e
    listening = [c for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    if not listening:
        raise NoEngineError(f"no process listens on TCP port {port} on this host")
    pids = {c.pid for c in listening if c.pid}
    if not pids:
        raise NoEngineError(f"TCP port {port} is listened on, but its process is not visible to this user: "
                            f"run as root, or give --pid")
    found = [psutil.Process(p) for p in sorted(pids) if psutil.pid_exists(p)]
    return _one_root(found, f"the listeners of TCP port {port}")
