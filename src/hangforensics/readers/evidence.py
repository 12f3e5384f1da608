"""Evidence layout (interface.md §1): engines, fleets, archives, rotation order, kinds from content."""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..parsers import faulthandler, gdb, native_trace, pyspy
from ..parsers.capture_errors import looks_like_capture_error
from ..parsers.gpu import looks_like_nvidia_smi
from .logfile import head_text

ROTATION_RE = re.compile(r"^(?P<base>.+?)\.(?P<n>\d+)(?:\.gz)?$")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")

LOG_SNIFF = re.compile(
    r"^(?:[\w.-]+(?:[-_]\d+)?\s*\| ?)?(?:"
    r"(?:\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*)?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"     # SGLang prefix
    r"|(?:\[rank\d+\]:)?\[[IWEF]\d{3,4} \d\d:\d\d:\d\d\.\d+"                       # torch glog
    r"|(?:\(\w+ pid=\d+\) )?(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d"  # vLLM
    r"|Environment: \S+="
    r")",
    re.M,
)


@dataclass(frozen=True)
class EvidenceFile:
    engine: str
    abs_path: Path
    rel_path: str          # as shown in evidence: relative to the PATH given to the command
    rotation: int          # 0 live, N for name.N / name.N.gz
    node: str              # base name without rotation suffix


def rotation_of(name: str) -> tuple[str, int]:
    """'server.log.2.gz' -> ('server.log', 2); 'server.log.gz' -> ('server.log', 0)."""
    m = ROTATION_RE.match(name)
    if m and not m.group("base").endswith(".tar"):
        return m.group("base"), int(m.group("n"))
    if name.endswith(".gz"):
        return name[:-3], 0
    return name, 0


STACK_KINDS = ("pyspy_dump", "pyspy_json", "gdb_dump", "faulthandler_dump", "native_trace")
# Every kind detect_kind can return (sources.kind).
KINDS = ("server_log", *STACK_KINDS, "capture_error", "gpu_samples", "empty", "binary", "unreadable", "unknown")


def detect_kind(path: Path) -> str:
    """The kind of an evidence file, from its content alone (its name carries no meaning).

    server_log; stack dumps: pyspy_dump (py-spy text), pyspy_json, gdb_dump (gdb ``thread apply
    all bt`` / ``py-bt``), faulthandler_dump, native_trace (numbered C++/gdb frames);
    capture_error (py-spy/gdb failure output); gpu_samples (nvidia-smi CSV); empty, binary,
    unreadable or unknown.
    """
    try:
        head = head_text(path)
    except InputError:
        return "unreadable"
    if not head:
        return "empty"
    if looks_binary(head):
        return "binary"
    head = head.replace("\x00", "")         # NUL runs in a text file (crash, copytruncate) are skipped
    lines = [s.rstrip("\r") for s in head.splitlines()]
    first = [s for s in lines if s.strip()][:5]
    if first and (pyspy.PROCESS_RE.match(first[0]) or pyspy.THREAD_RE.match(first[0])):
        return "pyspy_dump"
    if looks_like_nvidia_smi(lines):
        return "gpu_samples"
    if pyspy.looks_like_json(head):
        return "pyspy_json"
    if looks_like_capture_error(lines[:200]):
        return "capture_error"
    if gdb.looks_like_gdb(lines, strong_only=True):
        return "gdb_dump"
    # A dump's own first line wins over a stray log line or two later in the file (a log that
    # happens to start with a crash is still a log).
    few_log_lines = len(LOG_SNIFF.findall(head, 0, len(head))) < 3
    if few_log_lines and faulthandler.looks_like_faulthandler(lines, strong_only=True):
        return "faulthandler_dump"
    if few_log_lines and native_trace.looks_like_trace(lines, strong_only=True):
        return "native_trace"
    if LOG_SNIFF.search(head):
        return "server_log"
    if pyspy.looks_like_pyspy(lines):
        return "pyspy_dump"
    if gdb.looks_like_gdb(lines):
        return "gdb_dump"
    if faulthandler.looks_like_faulthandler(lines):
        return "faulthandler_dump"
    if native_trace.looks_like_trace(lines):
        return "native_trace"
    return "unknown"


# Undecodable bytes and control characters a text file does not hold (tab, newlines, form feed and the
# escape of ANSI colours are fine).
_NOT_TEXT = re.compile("[\x01-\x08\x0b\x0e-\x1a\x1c-\x1f\ufffd]")


def looks_binary(head: str) -> bool:
    """Binary content (a core file, a profile, random bytes) rather than text with a few bad bytes:
    more than 10 % of the first 8 KiB of non-NUL characters are undecodable or control characters."""
    sample = head.replace("\x00", "")[:8192]
    if not sample:
        return True                          # nothing but NUL bytes
    return len(_NOT_TEXT.findall(sample)) > 0.1 * len(sample)


def _is_evidence_file(p: Path) -> bool:
    return p.is_file() and not p.name.startswith(".") and not p.name.endswith(".duckdb")


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if _is_evidence_file(p)
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def is_fleet(path: Path) -> bool:
    """A folder with no evidence file of its own whose subfolders hold evidence."""
    own = [p for p in path.iterdir() if _is_evidence_file(p)]
    if own:
        return False
    return any(d.is_dir() and _files_under(d) for d in path.iterdir())


# Decompression-bomb limits for incident bundles (override with HANGFORENSICS_MAX_UNPACK_BYTES).
MAX_UNPACK_BYTES = 20 * 1024**3
MAX_MEMBERS = 100_000
MAX_RATIO = 200                 # uncompressed / archive size, checked once a bundle is past RATIO_FLOOR
RATIO_FLOOR = 256 * 1024**2


def _check_bomb(archive: Path, total: int, members: int) -> None:
    limit = int(os.environ.get("HANGFORENSICS_MAX_UNPACK_BYTES", MAX_UNPACK_BYTES))
    size = max(archive.stat().st_size, 1)
    if members > MAX_MEMBERS:
        raise InputError(f"{archive}: refused, {members} members (more than {MAX_MEMBERS}): an archive bomb?")
    if total > limit:
        raise InputError(f"{archive}: refused, it unpacks to {total / 1e9:.1f} GB (limit {limit / 1e9:.1f} GB, "
                         f"HANGFORENSICS_MAX_UNPACK_BYTES): unpack it yourself and give the folder")
    if total > RATIO_FLOOR and total / size > MAX_RATIO:
        raise InputError(f"{archive}: refused, it unpacks to {total / 1e6:.0f} MB from {size / 1e6:.1f} MB "
                         f"(ratio {total / size:.0f}:1): a decompression bomb?")


def unpack_archive(archive: Path, dest: Path) -> Path:
    """Unpack a .tar.gz/.zip incident bundle safely; return the engine folder inside it.

    Refused, before anything is written: members that escape the folder (``../``, absolute paths),
    links and device files, and decompression bombs (sizes declared in the archive, checked against
    MAX_UNPACK_BYTES and MAX_RATIO).  Extraction itself is contained too (tar's ``data`` filter; a
    zip member's symlink bit is ignored, so it lands as a plain file)."""
    dest = dest.resolve()
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                infos = z.infolist()
                for info in infos:
                    target = (dest / info.filename).resolve()
                    if not target.is_relative_to(dest) or info.filename.startswith(("/", "\\")):
                        raise InputError(f"{archive}: member {info.filename!r} escapes the extraction folder")
                _check_bomb(archive, sum(i.file_size for i in infos), len(infos))
                z.extractall(dest)
        else:
            with tarfile.open(archive) as t:
                members = []
                total = 0
                for member in t:               # streams: a bomb is measured without being written
                    target = (dest / member.name).resolve()
                    if not target.is_relative_to(dest) or member.issym() or member.islnk() or member.isdev():
                        raise InputError(f"{archive}: member {member.name!r} is unsafe (escapes or links)")
                    members.append(member)
                    total += member.size
                    _check_bomb(archive, total, len(members))
                t.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise InputError(f"cannot unpack {archive}: {e}") from e
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    name = archive.name
    for suf in ARCHIVE_SUFFIXES:
        if name.endswith(suf):
            name = name[: -len(suf)]
            break
    named = dest.parent / name
    dest.rename(named)
    return named


class Workspace:
    """Resolves the PATH given to a command into engines and files; owns any temporary unpack folder."""

    def __init__(self) -> None:
        self._tmp: list[Path] = []

    def resolve(self, path: Path, mode: str = "auto") -> tuple[Path, list[EvidenceFile]]:
        """Return (root the evidence paths are relative to, files) for ``path``.

        mode: 'auto' (interface.md §1 guess), 'engine' or 'fleet'.
        """
        path = Path(path)
        if not path.exists():
            raise InputError(f"no such file or directory: {path}")
        if path.is_file():
            if path.name.endswith(ARCHIVE_SUFFIXES):
                tmp = Path(tempfile.mkdtemp(prefix="hangforensics-"))
                self._tmp.append(tmp)
                inner = unpack_archive(path, tmp / "x")
                return self.resolve(inner, mode)
            engine = path.resolve().parent.name
            return path.parent, [self._file(engine, path, path.parent)]
        try:
            fleet = is_fleet(path) if mode == "auto" else mode == "fleet"
        except OSError as e:
            raise InputError(f"cannot list {path}: {e.strerror or e}") from e
        files: list[EvidenceFile] = []
        if fleet:
            for d in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
                for f in _files_under(d):
                    files.append(self._file(d.name, f, path))
        else:
            engine = path.resolve().name
            for f in _files_under(path):
                files.append(self._file(engine, f, path))
        if not files:
            raise InputError(f"no evidence files under {path}")
        return path, order_files(files)

    @staticmethod
    def _file(engine: str, f: Path, root: Path) -> EvidenceFile:
        base, rot = rotation_of(f.name)
        rel = f.relative_to(root).as_posix() if f.is_relative_to(root) else f.name
        return EvidenceFile(engine, f.resolve(), rel, rot, base)

    def close(self) -> None:
        for t in self._tmp:
            shutil.rmtree(t, ignore_errors=True)
        self._tmp.clear()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def order_files(files: list[EvidenceFile]) -> list[EvidenceFile]:
    """Engine, folder, base name, then oldest rotation first (server.log.2, .1, live)."""
    return sorted(files, key=lambda f: (f.engine, str(Path(f.rel_path).parent), f.node, -f.rotation))
