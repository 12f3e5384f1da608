"""Whole corpora: the shared sample fleet and our own variant corpus, scored; every line accounted for.

The truth files are read only by ../shared/examples/score.py, to judge the
findings the product produced without them.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, EXAMPLES, requires_shared

from hangforensics import api
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

ISSUE2_RULES = ("stall-onset,all-ranks-frozen,first-rank-stopped,busy-leak-report,idle-memory-leak,"
                "health-check-blind,watchdog-kill")
VARIANTS = DATA / "variants"
STACK_VARIANTS = DATA / "stack_variants"
FAMILIES = DATA / "families"
ALL_RULES = ISSUE2_RULES + ",collective-desync,known-signature"


def _score(fleet: Path, truth: Path, tmp_path: Path, rules: str = ISSUE2_RULES,
           minimum: float = 0.9) -> subprocess.CompletedProcess:
    docs = []
    for engine in sorted(p for p in fleet.iterdir() if p.is_dir()):
        res = api.report(engine, tmp_path / f"{engine.name}.html", json_out=tmp_path / f"{engine.name}.json")
        docs.append(res.document)
    all_json = tmp_path / "all.json"
    all_json.write_text(json.dumps(docs))
    return subprocess.run([sys.executable, str(EXAMPLES / "score.py"), str(truth), str(all_json), "--rules", rules,
                           "--min-recall", str(minimum), "--min-precision", str(minimum)],
                          capture_output=True, text=True, timeout=300)


@requires_shared()
def test_shared_sample_fleet_scores(tmp_path: Path):
    p = _score(EXAMPLES / "fleet", EXAMPLES / "truth.json", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    print(p.stdout.splitlines()[-1])


@requires_shared()
def test_shared_wrapped_fleet_scores_as_the_plain_one(tmp_path: Path):
    """examples/wrapped/ is examples/fleet/ as collectors hand it over (kubectl, CRI, docker json-file,
    journald, syslog, ANSI, compose): the envelope changes no finding."""
    p = _score(EXAMPLES / "wrapped" / "fleet", EXAMPLES / "wrapped" / "truth.json", tmp_path, ALL_RULES)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "recall=1.000 precision=1.000" in p.stdout.splitlines()[-1], p.stdout


@requires_shared()
@pytest.mark.skipif(not (VARIANTS / "truth.json").exists(), reason="variant corpus not generated")
def test_variant_corpus_scores(tmp_path: Path):
    p = _score(VARIANTS / "fleet", VARIANTS / "truth.json", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    print(p.stdout.splitlines()[-1])


@requires_shared()
def test_shared_sample_fleet_scores_on_every_rule(tmp_path: Path):
    p = _score(EXAMPLES / "fleet", EXAMPLES / "truth.json", tmp_path, ALL_RULES)
    assert p.returncode == 0, p.stdout + p.stderr


@requires_shared()
@pytest.mark.skipif(not (STACK_VARIANTS / "truth.json").exists(), reason="stack corpus not generated")
def test_stack_corpus_scores_on_every_rule(tmp_path: Path):
    """Dumps in every format (text, --native, --json, --subprocesses, gdb, faulthandler, traces), embedded and standalone."""
    p = _score(STACK_VARIANTS / "fleet", STACK_VARIANTS / "truth.json", tmp_path, ALL_RULES)
    assert p.returncode == 0, p.stdout + p.stderr
    print(p.stdout.splitlines()[-1])


@requires_shared()
def test_families_corpus_scores(tmp_path: Path):
    """Held-out twins of every fragment family (tests/data/families): other seeds, rank counts, releases,
    torch versions, envelopes, paste styles and cut points.  File times are evidence (a year-less line takes
    its year from them) and git keeps none, so the corpus is regenerated into tmp_path, and the committed
    fleet must be byte for byte what the generator writes."""
    out = tmp_path / "generated"
    subprocess.run([sys.executable, str(FAMILIES / "generate.py"), "--out", str(out)], check=True, timeout=300)
    made = sorted(p.relative_to(out / "fleet") for p in (out / "fleet").rglob("*") if p.is_file())
    kept = sorted(p.relative_to(FAMILIES / "fleet") for p in (FAMILIES / "fleet").rglob("*") if p.is_file())
    assert made == kept
    assert all((out / "fleet" / p).read_bytes() == (FAMILIES / "fleet" / p).read_bytes() for p in made)
    p = _score(out / "fleet", out / "truth.json", tmp_path, ALL_RULES, minimum=0.95)
    assert p.returncode == 0, p.stdout + p.stderr
    print(p.stdout.splitlines()[-1])


def _physical_lines(path: Path) -> int:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        data = f.read()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _corpus_roots() -> list[Path]:
    roots = [p for p in (DATA / "releases", VARIANTS / "fleet", STACK_VARIANTS / "fleet", DATA / "stacks",
                         FAMILIES / "fleet", DATA.parent.parent / "examples") if p.is_dir()]
    if (EXAMPLES / "fleet").is_dir():
        roots.append(EXAMPLES / "fleet")
    return roots


@pytest.mark.parametrize("root", _corpus_roots(), ids=lambda p: p.name)
def test_every_line_is_parsed_or_kept(root: Path):
    with Store(":memory:") as st:
        ingest_paths(st, [root], mode="engine" if root == DATA / "stacks" else "fleet")
        rows = st.query("SELECT abs_path, kind, lines, parsed_lines, unparsed_lines, status FROM sources")
        assert rows
        for r in rows:
            if r["kind"] in ("binary", "unreadable") or str(r["status"]).startswith("duplicate"):
                continue
            assert r["lines"] == r["parsed_lines"] + r["unparsed_lines"], r
            if r["kind"] != "flight_recorder":             # a dump's lines are its records (interface.md §1)
                assert r["lines"] == _physical_lines(Path(r["abs_path"])), r
            kept = st.scalar("SELECT count(*) FROM unparsed u JOIN sources s ON s.engine = u.engine AND s.path = u.path "
                             "WHERE s.abs_path = ?", [r["abs_path"]])
            assert kept == r["unparsed_lines"], r
