"""The capture bundle on disk: one ``.tar.gz`` holding one engine folder (interface.md §1, §6).

::

    <engine>/manifest.json                       what was captured, when, with what, and what failed
    <engine>/proc/round<k>.json                  /proc facts of every process, every thread, at round k
    <engine>/pyspy/round<k>/<label>-<pid>.txt    py-spy dump ('TP3-41300.txt', 'main-41235.txt')
    <engine>/pyspy/round<k>/<label>-<pid>.error.txt   py-spy's stderr when it failed
    <engine>/gpu/nvidia-smi.csv                  GPU samples, one block per round (when nvidia-smi exists)
    <engine>/logs/<name>                         log tails, with the source file's modification time

Files are staged in a hidden folder beside the output, then written as one archive to a temporary
name and renamed into place: a reader never sees half a bundle.  Member names are relative, built
from sanitised parts, and carry each file's own time (a dump's member time is when it was taken).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import CaptureError
from .manifest import MANIFEST_NAME, Manifest

SAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_part(text: str, fallback: str) -> str:
    """A path part that cannot escape or hide: 'gpu node/7' -> 'gpu-node-7'."""
    return SAFE_RE.sub("-", text).strip(".-")[:120] or fallback


def engine_name(name: str | None, host: str, root_pid: int) -> str:
    return safe_part(name, "engine") if name else safe_part(f"{host}-{root_pid}", "engine")


def default_output(host: str, when: datetime | None = None) -> Path:
    stamp = (when or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"hangforensics-capture-{safe_part(host, 'host')}-{stamp}.tar.gz")


class Staging:
    """A hidden folder beside the output where a capture's files are written before they are archived.

    Made first, so an output folder that cannot be written fails the capture before anything is run."""

    def __init__(self, output: Path) -> None:
        parent = output.resolve().parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.path = Path(tempfile.mkdtemp(prefix=".hangforensics-capture-", dir=parent))
        except OSError as e:
            raise CaptureError(f"cannot write the bundle into {parent}: {e.strerror or e}") from e

    def write_json(self, rel: str, data: Any, mtime: float) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.utime(p, (mtime, mtime))

    def append_text(self, rel: str, text: str, mtime: float) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a", encoding="utf-8") as fh:
            fh.write(text)
        os.utime(p, (mtime, mtime))

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _member_order(rel: str) -> tuple:
    # manifest first (a streaming reader learns the layout before the files), then facts, dumps, gpu, logs
    top = rel.split("/", 1)[0]
    rank = {"proc": 1, "pyspy": 2, "gpu": 3, "logs": 4}.get(top, 5)
    return (rank, [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", rel)])


def write_bundle(output: Path, engine: str, staging: Staging, manifest: Manifest) -> Path:
    """Archive the staged files and the manifest as ``output`` (atomically); return its path."""
    output = Path(output)
    files = sorted((p.relative_to(staging.path).as_posix() for p in staging.path.rglob("*") if p.is_file()),
                   key=_member_order)
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.resolve().parent)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tar:
            data = manifest.to_json().encode("utf-8")
            info = tarfile.TarInfo(f"{engine}/{MANIFEST_NAME}")
            info.size = len(data)
            info.mtime = (manifest.finished or datetime.now()).timestamp()
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
            for rel in files:
                src = staging.path / rel
                st = src.stat()
                info = tarfile.TarInfo(f"{engine}/{rel}")
                info.size = st.st_size
                info.mtime = st.st_mtime           # PAX keeps sub-second times
                info.mode = 0o644
                with open(src, "rb") as fh:
                    tar.addfile(info, fh)
        os.chmod(tmp, 0o644)
        os.replace(tmp, output)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise CaptureError(f"cannot write {output}: {e.strerror or e}") from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return output
