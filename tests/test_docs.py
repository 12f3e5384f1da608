"""The manual in docs/ covers every command, rule and hang signature, its generated parts are current, the
README stays a front page whose links resolve, and its test command is the one .ci/run runs."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from hangforensics.analysis.rules import load_rules
from hangforensics.analysis.stacks.signatures import load_signatures
from hangforensics.cli import app
from hangforensics.docs_gen import BEGIN, GENERATED, with_generated

REPO = Path(__file__).parents[1]
DOCS = REPO / "docs"


def _headings(text: str) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{2,4} (.+)$", text, re.M)}


def test_every_command_has_its_section() -> None:
    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="hangforensics")
    heads = _headings((DOCS / "commands.md").read_text())
    names = group.list_commands(ctx)
    assert {"report", "ingest", "analyze", "scan", "sql", "rules", "capture"} <= set(names)
    assert {f"hangforensics {n}" for n in names} <= heads


def test_every_rule_and_signature_has_its_section() -> None:
    heads = _headings((DOCS / "rules.md").read_text())
    assert {r.id for r in load_rules()} <= heads
    assert {s.id for s in load_signatures()} <= heads


def test_generated_sections_are_current() -> None:
    for name, make in GENERATED.items():
        text = (DOCS / name).read_text()
        assert BEGIN in text, name
        assert text == with_generated(text, make()), f"docs/{name} is stale: python -m hangforensics.docs_gen"


def test_readme_is_a_front_page_whose_links_resolve() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        assert (REPO / target).exists(), target
    for target in re.findall(r"\]\(([^)#]+)\)", (DOCS / "index.md").read_text()):
        assert (DOCS / target).exists(), target


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert ".venv/bin/pip install -e '.[test]'" in readme and ".venv/bin/pip install -q -e '.[test]'" in ci
    assert ".venv/bin/python -m pytest" in readme and "\n.venv/bin/python -m pytest" in ci
    # the editable install byte-compiled, as a regular install is (PYTHONDONTWRITEBYTECODE would otherwise make
    # every command compile the modules it imports)
    assert ".venv/bin/python -m compileall -q src" in readme and "\n.venv/bin/python -m compileall -q src" in ci
