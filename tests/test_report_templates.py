"""The report templates' compiled code is kept between runs, and a cache that cannot be written costs
nothing but the compile."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

from hangforensics.report import html


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the templates jinja compiles from source (a cached one is not)."""
    seen: list[str] = []
    real = jinja2.Environment.compile

    def compile(self, source, name=None, filename=None, raw=False, defer_init=False):  # noqa: A001
        seen.append(name)
        return real(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(jinja2.Environment, "compile", compile)
    return seen


def _fresh_env(monkeypatch: pytest.MonkeyPatch, folder: Path) -> jinja2.Environment:
    monkeypatch.setattr(html, "_template_cache", lambda: html._TemplateCache(str(folder)))
    html._env.cache_clear()
    return html._env()


def test_a_second_run_reads_the_templates_compiled_code_from_the_cache(tmp_path, monkeypatch, compiles):
    try:
        first = _fresh_env(monkeypatch, tmp_path).get_template("fleet.js").render()
        assert compiles == ["fleet.js"] and list(tmp_path.iterdir())
        second = _fresh_env(monkeypatch, tmp_path).get_template("fleet.js").render()
        assert compiles == ["fleet.js"] and second == first       # not compiled again
    finally:
        html._env.cache_clear()


def test_a_cache_that_cannot_be_written_only_costs_the_compile(tmp_path, monkeypatch, compiles):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    try:
        for _ in range(2):
            page = _fresh_env(monkeypatch, not_a_folder).get_template("fleet.js").render()
            assert page
        assert compiles == ["fleet.js", "fleet.js"]
    finally:
        html._env.cache_clear()


def test_a_cache_file_cut_short_is_compiled_afresh(tmp_path, monkeypatch, compiles):
    try:
        first = _fresh_env(monkeypatch, tmp_path).get_template("fleet.js").render()
        for f in tmp_path.iterdir():
            f.write_bytes(f.read_bytes()[:40])
        again = _fresh_env(monkeypatch, tmp_path).get_template("fleet.js").render()
        assert again == first and compiles == ["fleet.js", "fleet.js"]
    finally:
        html._env.cache_clear()
