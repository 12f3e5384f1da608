"""Files of a ``hangforensics capture`` bundle: which bundle a file belongs to, and what its manifest says.

A bundle is a folder holding a capture ``manifest.json`` (interface.md §6): the engine folder of a
``report BUNDLE.tar.gz``, a subfolder of an engine, or an engine of a fleet.  Every path the manifest
names is relative to that folder; the ingest stage knows a file by its path relative to the ingest
root, so the folder's own path (``node3/`` in a fleet) is stripped before asking the manifest.

Manifests are read once per process (ingest may run in worker processes) and re-read when they change.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..capture.errors import ManifestError
from ..capture.manifest import MANIFEST_NAME, DumpRecord, Manifest, read_manifest
from ..parsers.capture import capture_files
from ..readers.logfile import iter_chunks
from .jobs import FileOutcome

# (folder, mtime_ns, size) -> the manifest, or None for a folder without a usable one
_CACHE: dict[tuple[str, int, int], Manifest | None] = {}
_CACHE_MAX = 256


@dataclass(frozen=True, slots=True)
class BundleRef:
    manifest: Manifest
    capture_id: str          # the manifest's path relative to the ingest root: one capture
    member: str              # the file's path inside the bundle folder, as the manifest names it


def _manifest_in(folder: Path) -> Manifest | None:
    path = folder / MANIFEST_NAME
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(folder), st.st_mtime_ns, st.st_size)
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        try:
            _CACHE[key] = read_manifest(folder)
        except ManifestError:
            # the manifest file itself says why, as its own source's note; its dumps fall back to mtimes
            _CACHE[key] = None
    return _CACHE[key]


def bundle_of(abs_path: Path, rel_path: str) -> BundleRef | None:
    """The capture bundle holding a file: the nearest folder above it, up to the ingest root, with a
    readable capture manifest; None when there is none."""
    rel = PurePosixPath(rel_path.replace("\\", "/"))
    folder = Path(abs_path).parent
    parts = rel.parts[:-1]
    for depth in range(len(parts), -1, -1):
        manifest = _manifest_in(folder)
        if manifest is not None:
            inside = "/".join(rel.parts[depth:])
            cid = "/".join((*parts[:depth], MANIFEST_NAME))
            return BundleRef(manifest, cid, inside)
        folder = folder.parent
    return None


def capture_dump(abs_path: Path, rel_path: str) -> tuple[BundleRef, DumpRecord] | None:
    """The bundle and the manifest's record of a dump (or of py-spy's error output), if the file is one."""
    ref = bundle_of(abs_path, rel_path)
    if ref is None:
        return None
    rec = ref.manifest.dump_for(ref.member)
    return (ref, rec) if rec is not None else None


def is_snapshot_file(abs_path: Path, rel_path: str) -> bool:
    """A file of one snapshot round of a bundle (a dump, its error output, a round's /proc facts).

    Rounds of a stuck engine are byte-identical on purpose: that sameness is the evidence, so such a
    file is never set aside as a duplicate of the previous round's."""
    ref = bundle_of(abs_path, rel_path)
    if ref is None:
        return False
    return ref.manifest.dump_for(ref.member) is not None or \
        any(r.proc_file == ref.member for r in ref.manifest.rounds)


def parse_bundle_json(engine: str, abs_path: Path, rel_path: str, kind: str,
                      out: FileOutcome) -> Iterator[tuple[str, list[dict]]]:
    """Rows of a bundle's ``manifest.json`` (kind capture_manifest) or ``proc/round<k>.json`` (process_facts).

    A document that parses is one record: all its lines are parsed.  One that does not (cut short,
    edited, a newer shape) is kept whole in ``unparsed``, and the file's note says why."""
    lines: list[str] = []
    for chunk in iter_chunks(abs_path, notes=out.notes):
        lines.extend(chunk.lines)
        out.read_bytes = chunk.end_offset
    out.lines = len(lines)
    text = "\n".join(lines)
    try:
        if kind == "capture_manifest":
            tables = capture_files.parse_manifest(text, engine, rel_path)
        else:
            ref = bundle_of(abs_path, rel_path)
            tables = {"process_facts": capture_files.parse_process_facts(
                text, engine, rel_path, ref.capture_id if ref else None)}
    except (ValueError, KeyError, TypeError, IndexError, RecursionError) as e:
        # a cut-off JSON document holds no record this release can trust: its lines are kept verbatim
        out.unparsed = len(lines)
        out.notes.extra.append(f"capture {'manifest' if kind == 'capture_manifest' else 'facts'} not read "
                               f"({type(e).__name__}: {str(e)[:160]}): its {len(lines)} line(s) kept in unparsed")
        yield "unparsed", [{"engine": engine, "path": rel_path, "line": i + 1, "text": s}
                           for i, s in enumerate(lines)]
        return
    yield from tables.items()
