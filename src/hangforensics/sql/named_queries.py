"""Named queries: ready SQL for the questions SREs ask often, one ``queries/<name>.sql`` file each.

A file opens with a header of ``-- key: value`` comment lines (like a dbt model's or a Sigma
rule's metadata); ``title`` and ``description`` are required, a line indented after ``--``
continues the previous value.  The rest of the file is one read-only SQL query.  Adding a
query is adding a file; ``hangforensics queries`` lists them and ``hangforensics sql NAME``
runs one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import QueryError
from ..resources import data_dir

REQUIRED = ("title", "description")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_HEADER_RE = re.compile(r"^--\s?([a-z_]+):\s*(.*)$")
_CONTINUATION_RE = re.compile(r"^--\s{2,}(\S.*)$")


@dataclass(frozen=True)
class NamedQuery:
    name: str               # the file stem: what ``hangforensics sql NAME`` takes
    title: str
    description: str
    sql: str
    path: Path
    meta: dict[str, str]    # every header key, title and description included


def queries_dir() -> Path:
    """``queries/`` of a source checkout, else the copy installed inside the package (as for rules)."""
    found = data_dir("queries", "*.sql")
    if found is None:
        raise QueryError("no named queries found (expected queries/*.sql beside the package)")
    return found


def load_named_query(path: Path) -> NamedQuery:
    """Parse one query file: its header comment, then its SQL."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise QueryError(f"{path.name}: {e.strerror or e}") from e
    if not NAME_RE.match(path.stem):
        raise QueryError(f"{path.name}: a query name is lower-case letters, digits and dashes")
    meta: dict[str, str] = {}
    lines = text.splitlines()
    body_start = len(lines)
    last_key = None
    for i, line in enumerate(lines):
        if m := _HEADER_RE.match(line):
            last_key = m.group(1)
            meta[last_key] = m.group(2).strip()
        elif last_key and (m := _CONTINUATION_RE.match(line)):
            meta[last_key] = f"{meta[last_key]} {m.group(1).strip()}".strip()
        elif line.strip() in ("", "--"):
            last_key = None
        else:
            body_start = i
            break
    missing = [k for k in REQUIRED if not meta.get(k)]
    if missing:
        raise QueryError(f"{path.name}: header misses {', '.join(missing)} (-- title: ..., -- description: ...)")
    sql = "\n".join(lines[body_start:]).strip()
    if not sql:
        raise QueryError(f"{path.name}: no SQL after the header")
    return NamedQuery(name=path.stem, title=meta["title"], description=meta["description"], sql=sql,
                      path=path, meta=meta)


def load_named_queries(directory: Path | None = None) -> list[NamedQuery]:
    """Every shipped named query, sorted by name."""
    d = directory or queries_dir()
    return [load_named_query(p) for p in sorted(d.glob("*.sql"))]


def find_named_query(name: str, directory: Path | None = None) -> NamedQuery | None:
    """The named query called exactly ``name`` (surrounding blanks ignored), or None."""
    name = name.strip()
    if not NAME_RE.match(name):
        return None
    path = (directory or queries_dir()) / f"{name}.sql"
    return load_named_query(path) if path.is_file() else None


def looks_like_a_name(text: str) -> bool:
    """A bare word with a dash or in lower case: probably a mistyped query name rather than SQL."""
    return bool(NAME_RE.match(text.strip()))
