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
``torchrun``, ``torch.distributed.run``  ``launcher``
a process a launcher started    ``rank``          ``rank3`` (``RANK=3``, ``--rank 3``)
anything else                   ``other`` (the tree's root: ``main``)
==============================  ================  =============================

A torch.distributed job (torchrun, Ray Train, SLURM) titles nothing: a rank is a plain ``python
train.py``.  Its global rank is what its launcher put in its environment (``RANK``, else
``SLURM_PROCID``), else a ``--rank N`` argument, and is labelled ``rankN`` (interface.md §6);
``LOCAL_RANK``, ``GROUP_RANK``, ``WORLD_SIZE`` and ``MASTER_ADDR`` are facts about the process, not its
label.  A process that inherited its rank's environment (a DataLoader worker, a compile worker) is not
that rank again.  The launcher (``torchrun`` / its elastic agent) is the job's root: a capture by any
rank's pid walks up to it and takes the whole job.

Only /proc is read (through psutil): nothing here signals or attaches to a process.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import psutil

from ..parsers.stacks.pyspy import TITLE_RANK_RE, rank_from_title
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
    (r"(?:^|/|\s)torchrun(?:\s|$)|\btorch\.distributed\.(?:run|launch)\b|(?:^|/|\s)torchx\s+run\b",
     "launcher", "torch"),
)]
RANK_ROLES = ("scheduler", "worker", "engine_core", "rank")
# What an engine's root or one of its ranks looks like: what --match defaults to when nothing is given.
DEFAULT_SEARCH = ("sglang::scheduler_*, sglang::detokenizer, sglang.launch_server / sglang serve, "
                  "VLLM::EngineCore*, VLLM::Worker*, VLLM::APIServer, vllm serve, torchrun / "
                  "torch.distributed.run")
# A rank given on the command line (``--rank 3``, ``--rank=3``); ``--node-rank`` / ``--local-rank`` are not it.
ARGV_RANK_RE = re.compile(r"(?:^|\s)--rank(?:=|\s+)(\d+)(?=\s|$)")
ARGV_LOCAL_RANK_RE = re.compile(r"(?:^|\s)--local[-_]rank(?:=|\s+)(\d+)(?=\s|$)")
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
    launch: LaunchFacts | None = None   # what a launcher's environment says of the process


@dataclass(frozen=True, slots=True)
class LaunchFacts:
    """The launcher's few variables of a process (nothing else of its environment is kept)."""
    rank: int | None              # global rank: RANK, else SLURM_PROCID, else --rank N
    rank_source: str | None       # env or argv
    launcher: str | None          # torchrun, slurm; None when no launcher is known
    local_rank: int | None = None
    group_rank: int | None = None
    world_size: int | None = None
    master_addr: str | None = None
    master_port: int | None = None


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


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None and value.strip() != "" else None
    except ValueError:
        return None


def launch_facts(environ: dict[str, str], title: str) -> LaunchFacts | None:
    """The global rank and node facts a launcher gave a process, from its environment and command line.

    >>> launch_facts({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "TORCHELASTIC_RUN_ID": "x"}, "python t.py")
    LaunchFacts(rank=3, rank_source='env', launcher='torchrun', local_rank=1, group_rank=None, world_size=8, master_addr=None, master_port=None)
    """
    env = environ or {}
    slurm = "SLURM_PROCID" in env or "SLURM_JOB_ID" in env
    launcher = "torchrun" if any(k.startswith("TORCHELASTIC_") for k in env) else ("slurm" if slurm else None)
    rank, source = _int(env.get("RANK")), "env"
    if rank is None and slurm:
        rank = _int(env.get("SLURM_PROCID"))
    if rank is None:
        m = ARGV_RANK_RE.search(title)
        rank, source = (int(m.group(1)), "argv") if m else (None, None)
    local = _int(env.get("LOCAL_RANK")) if "LOCAL_RANK" in env else _int(env.get("SLURM_LOCALID"))
    if local is None:
        m = ARGV_LOCAL_RANK_RE.search(title)
        local = int(m.group(1)) if m else None
    facts = LaunchFacts(rank, source, launcher, local,
                        _int(env.get("GROUP_RANK")) if "GROUP_RANK" in env else _int(env.get("SLURM_NODEID")),
                        _int(env.get("WORLD_SIZE")) if "WORLD_SIZE" in env else _int(env.get("SLURM_NTASKS")),
                        env.get("MASTER_ADDR") or None, _int(env.get("MASTER_PORT")))
    if facts == LaunchFacts(None, None, launcher):
        return None
    return facts


def _environ(p: psutil.Process) -> dict[str, str]:
    try:
        return p.environ()
    except (psutil.Error, OSError):
        return {}                    # another user's process without root, or gone: no rank from it


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
    launch = None
    if role == "other":
        # no engine title: a torch.distributed rank is named by what its launcher set
        launch = launch_facts(_environ(p), title)
        if launch is not None and launch.rank is not None:
            role, family, rank = "rank", "torch", f"rank{launch.rank}"
    if role == "other" and p.pid == root_pid:
        role = "main"             # the root of the tree is its main process, whatever launched it
    return ProcInfo(p.pid, ppid, redact(title), name, exe, create, role, family, rank,
                    rank if role == "rank" else label_of(role, rank, title), _is_python(p, exe), launch)


def _inherited_ranks(infos: list[ProcInfo]) -> list[ProcInfo]:
    """A process whose rank came from an environment it inherited from an ancestor of the same rank (a
    DataLoader or compile worker forked by the rank) is a helper of that rank, not the rank again."""
    by_pid = {i.pid: i for i in infos}
    out = []
    for i in infos:
        parent = by_pid.get(i.ppid) if i.ppid is not None else None
        while parent is not None and i.role == "rank":
            if parent.role == "rank" and parent.rank == i.rank:
                i = ProcInfo(i.pid, i.ppid, i.title, i.name, i.exe, i.create_time, "other", i.family, None,
                             "other", i.python, i.launch)
                break
            parent = by_pid.get(parent.ppid) if parent.ppid is not None else None
        out.append(i)
    return out


def _engine_like(p: psutil.Process) -> bool:
    """A process that belongs to an engine or a torch job: an engine title, a launcher, or a rank a
    launcher named."""
    title = _title(p)
    role, family, _ = classify(title)
    if family != "unknown" or role != "other":
        return True
    launch = launch_facts(_environ(p), title)
    return launch is not None and launch.rank is not None


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
            if not _engine_like(parent):
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
    infos = _inherited_ranks([i for i in (describe(p, root_pid) for p in members if p.pid not in mine)
                              if i is not None])
    if not infos:
        raise NoEngineError(f"the engine's processes under pid {root_pid} exited before they could be "
                            f"captured")
    families = [i.family for i in infos if i.family != "unknown"]
    family = max(set(families), key=families.count) if families else "unknown"
    order = {"main": 0, "launcher": 0, "api_server": 1, "dp_controller": 2, "engine_core": 3, "scheduler": 4,
             "worker": 4, "rank": 4, "tokenizer": 5, "detokenizer": 6, "other": 7}

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
