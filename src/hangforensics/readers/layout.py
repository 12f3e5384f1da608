"""Evidence layout (interface.md §1): engines and fleets, the files of each, rotation order.

A file's kind is detected from its content (``kinds``); bundles are unpacked by ``archives``.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .archives import ARCHIVE_SUFFIXES, stable_unpack
from .kinds import detect_kind

ROTATION_RE = re.compile(r"^(?P<base>.+?)\.(?P<n>\d+)(?:\.gz)?$")


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


def _is_evidence_file(p: Path) -> bool:
    return p.is_file() and not p.name.startswith(".") and not p.name.endswith(".duckdb")


def _files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if _is_evidence_file(p)
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def _holds_server_log(folder: Path) -> bool:
    """A server log anywhere below ``folder`` (its kind sniffed from content, as ingest will)."""
    return any(detect_kind(f) == "server_log" for f in _files_under(folder))


def is_fleet(path: Path) -> bool:
    """Plainly a folder of engines (interface.md §1): no evidence file of its own, and two or more of its
    immediate subfolders each hold a server log of their own.  An operator's incident folder
    (``logs/``, ``pyspy/``, ``fr/``, a bundle beside them) is one engine, and so is a folder with a
    single subfolder."""
    own = [p for p in path.iterdir() if _is_evidence_file(p)]
    if own:
        return False
    with_logs = 0
    for d in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if _holds_server_log(d):
            with_logs += 1
            if with_logs >= 2:
                return True
    return False


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
                _, inner = stable_unpack(path)
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
                files.extend(self._engine_files(d.name, d, path))
        else:
            files.extend(self._engine_files(path.resolve().name, path, path))
        if not files:
            raise InputError(f"no evidence files under {path}")
        return path, order_files(files)

    def _engine_files(self, engine: str, folder: Path, root: Path) -> list[EvidenceFile]:
        """An engine's files; a bundle (``.tar.gz``, ``.zip``) among them, such as a ``capture`` bundle
        saved beside the logs, is unpacked and its files read as the engine's (interface.md §1).

        A bundle's files are named ``<bundle path>/<member path>``: the unpack folder stands for the
        bundle file, so a manifest found above a member (``ingest.bundles``) maps back to the same
        relative names.  A bundle that cannot be unpacked safely stays one file, read as what it is."""
        out: list[EvidenceFile] = []
        for f in _files_under(folder):
            if not f.name.endswith(ARCHIVE_SUFFIXES):
                out.append(self._file(engine, f, root))
                continue
            try:
                unpacked, _ = stable_unpack(f)                 # 'x', or renamed after the archive
            except InputError:
                out.append(self._file(engine, f, root))
                continue
            rel = f.relative_to(root).as_posix() if f.is_relative_to(root) else f.name
            for inner in _files_under(unpacked):
                base, rot = rotation_of(inner.name)
                out.append(EvidenceFile(engine, inner.resolve(),
                                        f"{rel}/{inner.relative_to(unpacked).as_posix()}", rot, base))
        return out

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
