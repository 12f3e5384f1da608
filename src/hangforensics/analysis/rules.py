"""Rules: one TOML file per rule in ``rules/``, metadata plus SQL logic (like a Sigma rule).

A rule's SQL returns one row per finding with the columns
``engine, ranks, ts, ts_end, title, detail, evidence`` and optionally
``signature``; the runner adds the rule id and severity.  Adding a rule is
adding a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from ..errors import RuleError
from ..resources import data_dir

SEVERITIES = ("critical", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
REQUIRED = ("id", "severity", "title", "description", "logic")


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    title: str
    description: str
    logic: str                       # 'sql'
    sql: str
    path: Path
    references: tuple[str, ...] = ()
    false_positives: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    tags: tuple[str, ...] = field(default=())


def rules_dir() -> Path:
    """``rules/`` of a source checkout, else the copy installed inside the package."""
    found = data_dir("rules", "*.toml")
    if found is None:
        raise RuleError("no rules directory found (expected rules/*.toml beside the package)")
    return found


def load_rule(path: Path) -> Rule:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise RuleError(f"{path.name}: {e}") from e
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise RuleError(f"{path.name}: missing {', '.join(missing)}")
    if data["severity"] not in SEVERITIES:
        raise RuleError(f"{path.name}: severity must be one of {', '.join(SEVERITIES)}")
    if data["logic"] != "sql" or not data.get("sql", "").strip():
        raise RuleError(f"{path.name}: logic = 'sql' with a non-empty sql = '''...''' is required")
    if path.stem != data["id"]:
        raise RuleError(f"{path.name}: file name must be the rule id ({data['id']}.toml)")
    return Rule(
        id=data["id"], severity=data["severity"], title=data["title"], description=" ".join(data["description"].split()),
        logic=data["logic"], sql=data["sql"], path=path,
        references=tuple(data.get("references", [])), false_positives=tuple(data.get("false_positives", [])),
        inputs=tuple(data.get("inputs", [])), tags=tuple(data.get("tags", [])),
    )


def load_rules(directory: Path | None = None) -> list[Rule]:
    d = directory or rules_dir()
    paths = sorted(d.glob("*.toml"))
    # every incident report reads the rules: parsed again only when a file changed
    key = tuple((str(p), st.st_mtime_ns, st.st_size) for p in paths for st in [p.stat()])
    if key not in _PARSED:
        _PARSED.clear()
        _PARSED[key] = _load(paths)
    return list(_PARSED[key])


_PARSED: dict[tuple, list[Rule]] = {}


def _load(paths: list[Path]) -> list[Rule]:
    rules = [load_rule(p) for p in paths]
    ids = [r.id for r in rules]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise RuleError(f"duplicate rule ids: {', '.join(sorted(dup))}")
    return sorted(rules, key=lambda r: (SEVERITY_RANK[r.severity], r.id))
