"""Evidence layout (interface.md §1): engines and fleets, the files of each, rotation order.

A file's kind is detected from its content (``kinds``); bundles are unpacked by ``archives``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .archives import ARCHIVE_SUFFIXES, unpack_archive

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


def is_fleet(path: Path) -> bool:
    """A folder with no evidence file of its own whose subfolders hold evidence."""
    own = [p for p in path.iterdir() if _is_evidence_file(p)]
    if own:
        return False
    return any(d.is_dir() and _files_under(d) for d in path.iterdir())


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
