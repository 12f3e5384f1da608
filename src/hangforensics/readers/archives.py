"""Incident bundles (.tar.gz, .zip) unpacked safely: nothing escapes the folder, no links or devices,
no decompression bombs."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from ..errors import InputError

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


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


BUNDLE_CACHE = "hangforensics-bundles"
CACHE_KEEP_S = 7 * 86400          # unpacked bundles not used for a week are removed


def stable_unpack(archive: Path) -> tuple[Path, Path]:
    """Unpack ``archive`` (as :func:`unpack_archive`) into a folder named after the archive's path, size and
    modification time, reused while the archive is unchanged; returns (the unpack folder's top entry, the
    engine folder inside it).

    The same unchanged bundle unpacks to the same place on every run, so a second ``report`` / ``scan``
    into one database sees the same files and re-reads nothing (a fresh temporary folder each time made
    every member a new file).  Folders unused for ``CACHE_KEEP_S`` are removed."""
    st = archive.stat()
    key = hashlib.sha1(f"{archive.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:20]
    cache = Path(tempfile.gettempdir()) / BUNDLE_CACHE
    final = cache / key
    marker = final / ".unpacked"
    if marker.is_file():
        inner = final / marker.read_text(encoding="utf-8").strip()
        if inner.is_dir():
            os.utime(final)
            return final / inner.relative_to(final).parts[0], inner
    cache.mkdir(parents=True, exist_ok=True)
    _prune(cache)
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
    try:
        inner = unpack_archive(archive, work / "x")
        (work / ".unpacked").write_text(inner.relative_to(work).as_posix(), encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)         # a stale or half-written one
        try:
            os.rename(work, final)
        except OSError:
            if not marker.is_file():                    # another process's unpack did not win either
                raise
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    inner = final / marker.read_text(encoding="utf-8").strip()
    return final / inner.relative_to(final).parts[0], inner


def _prune(cache: Path) -> None:
    now = time.time()
    for d in cache.iterdir():
        try:
            if now - d.stat().st_mtime > CACHE_KEEP_S:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            continue
