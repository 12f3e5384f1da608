"""Real incident pastes from public issues (tests/data/real_pastes, README there): every folder is reported by
the CLI as an SRE would run it, and checked against the expectations judged by hand in
``<folder>.expected.json`` (rule ids, ranks, times, signatures, file kinds and envelopes, rules that must
not fire, at most how many findings of a rule), and against what holds for any input: no crash, exit 0,
every line parsed or kept in ``unparsed``, a verdict and something to capture next."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).parent / "data" / "real_pastes"
CASES = sorted(p.name for p in ROOT.iterdir() if p.is_dir())


def _expected(name: str) -> dict:
    return json.loads((ROOT / f"{name}.expected.json").read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each paste reported once: exit code, stderr, findings document, sources rows."""
    out: dict[str, dict] = {}
    base = tmp_path_factory.mktemp("real_pastes")
    for name in CASES:
        js, db = base / f"{name}.json", base / f"{name}.duckdb"
        p = subprocess.run([sys.executable, "-m", "hangforensics", "report", str(ROOT / name), "-o",
                            str(base / f"{name}.html"), "--json", str(js), "--db", str(db)],
                           capture_output=True, text=True, timeout=300)
        doc = json.loads(js.read_text()) if js.exists() else None
        with duckdb.connect(str(db), read_only=True) as con:
            cols = ["path", "kind", "envelope", "lines", "parsed_lines", "unparsed_lines", "note"]
            sources = [dict(zip(cols, r, strict=True)) for r in con.execute(f"SELECT {', '.join(cols)} FROM sources").fetchall()]
        out[name] = {"rc": p.returncode, "stderr": p.stderr, "doc": doc, "sources": sources}
    return out


def test_every_paste_has_expectations():
    assert len(CASES) >= 10
    for name in CASES:
        assert (ROOT / f"{name}.expected.json").exists(), name


@pytest.mark.parametrize("name", CASES)
def test_never_crashes_and_loses_no_line(reports: dict, name: str):
    r = reports[name]
    assert r["rc"] == 0 and "Traceback" not in r["stderr"], r["stderr"]
    assert r["doc"] is not None
    for s in r["sources"]:
        assert s["lines"] == s["parsed_lines"] + s["unparsed_lines"], s
    (eng,) = r["doc"]["engines"]
    assert eng["verdict"] and eng["capture_next"]


@pytest.mark.parametrize("name", CASES)
def test_kinds_and_envelopes(reports: dict, name: str):
    exp = _expected(name)
    got = {s["path"].split("/")[-1]: s for s in reports[name]["sources"]}
    for f, kind in exp.get("kinds", {}).items():
        if exp.get("xfail") and kind != got[f]["kind"]:
            pytest.xfail(exp["xfail"])
        assert got[f]["kind"] == kind, (f, got[f])
    for f, env in exp.get("envelope", {}).items():
        assert got[f]["envelope"] == env, (f, got[f])


@pytest.mark.parametrize("name", [n for n in CASES if "note_lacks" in _expected(n)])
def test_what_the_sources_notes_do_not_say(reports: dict, name: str):
    """A note that would mislead on this paste (``note_lacks``: text no source's note may hold)."""
    for s in reports[name]["sources"]:
        for text in _expected(name)["note_lacks"]:
            assert text not in (s["note"] or ""), (s["path"], s["note"])


def _matches(f: dict, want: dict) -> bool:
    if f["rule"] != want["rule"]:
        return False
    if "signature" in want and f.get("signature") != want["signature"]:
        return False
    if "ranks" in want and sorted(f["ranks"]) != sorted(want["ranks"]):
        return False
    if "ts_end" in want and not (f.get("ts_end") or "").startswith(want["ts_end"]):
        return False
    return not ("ts" in want and not (f["ts"] or "").startswith(want["ts"]))


@pytest.mark.parametrize("name", CASES)
def test_expected_findings(reports: dict, name: str):
    exp = _expected(name)
    doc = reports[name]["doc"]
    findings = doc["findings"]
    missing = [w for w in exp["findings"] if not any(_matches(f, w) for f in findings)]
    if missing and exp.get("xfail"):
        pytest.xfail(exp["xfail"])
    assert not missing, (missing, [(f["rule"], f["ranks"], f["ts"], f.get("signature")) for f in findings])
    rules = [f["rule"] for f in findings]
    if exp["findings"] == [] and not exp.get("absent"):
        assert not [r for r in rules if r != "known-signature"], rules
    for rule in exp.get("absent", []):
        assert rule not in rules, findings
    for rule, n in exp.get("at_most", {}).items():
        assert rules.count(rule) <= n, [f for f in findings if f["rule"] == rule]
    verdict = doc["engines"][0]["verdict"].lower()
    for word in exp.get("verdict_contains", []):
        assert word.lower() in verdict, verdict
    advice = " ".join(doc["engines"][0]["capture_next"]).lower()
    for words in exp.get("capture_next_contains", []):
        assert words.lower() in advice, advice


@pytest.mark.parametrize("name", CASES)
def test_no_signal_repeated_as_many_findings(reports: dict, name: str):
    """The same rule (and signature) on the same ranks at the same time, saying the same, is one finding
    (timeouts of different SeqNums of one rank, with no time printed, are different collectives)."""
    keys = [(f["rule"], f.get("signature"), tuple(f["ranks"]), f["ts"], f["detail"])
            for f in reports[name]["doc"]["findings"]]
    assert len(keys) == len(set(keys)), keys
