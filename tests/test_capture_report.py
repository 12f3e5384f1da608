"""``capture`` then ``report`` end to end on real process trees (tests/capture_targets.py), real py-spy, the CLI.

Each tree is captured with ``--repeat 2 --interval 1`` and the bundle reported: dumps dated by the manifest
(its member times are moved days away first), the bundle's JSON files read as tables, the "unchanged
across snapshots since …" facts, state and wchan per rank in the HTML (headless Chromium), and the verdicts.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest
from test_capture import PYSPY, hf, spawn_tree

from hangforensics.capture import read_manifest
from hangforensics.store import Store

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="capture reads /proc"),
    pytest.mark.skipif(PYSPY is None, reason="py-spy is not installed (pip install -e '.[test]')"),
    pytest.mark.filterwarnings("ignore"),
]
DAYS_OFF = 2


def capture(tree, out: Path, *args: str) -> Path:
    p = hf("capture", "--pid", str(tree.parent), "-o", str(out), *args)
    assert p.returncode == 0, p.stderr
    return out


def shift_member_times(bundle: Path, out: Path) -> Path:
    """The same bundle with every member's time moved DAYS_OFF days back (a copy that lost its file times)."""
    with tarfile.open(bundle) as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            m.mtime -= DAYS_OFF * 86400
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    return out


def report(bundle: Path, where: Path) -> tuple[dict[str, list[dict]], Path, Path]:
    js, html, db = where / f"{bundle.stem}.json", where / f"{bundle.stem}.html", where / f"{bundle.stem}.duckdb"
    r = hf("report", str(bundle), "-o", str(html), "--json", str(js), "--db", str(db))
    assert r.returncode == 0, r.stderr
    found: dict[str, list[dict]] = {}
    for f in json.loads(js.read_text())["findings"]:
        found.setdefault(f["rule"], []).append(f)
    return found, html, db


def manifest_of(bundle: Path, where: Path):
    with tarfile.open(bundle) as t:
        t.extractall(where, filter="data")
    (engine,) = where.iterdir()
    return read_manifest(engine)


@pytest.fixture(scope="module")
def symm_report(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("symm-report")
    with spawn_tree(tmp / "tree", "symm") as tree:
        raw = capture(tree, tmp / "raw.tar.gz", "--repeat", "2", "--interval", "1")
    bundle = shift_member_times(raw, tmp / "symm.tar.gz")
    return manifest_of(raw, tmp / "x"), *report(bundle, tmp)


def test_symm_bundle_dates_dumps_by_the_manifest_and_reads_every_file(symm_report):
    m, _, _, db = symm_report
    with Store(db, read_only=True) as st:
        sources = st.query("SELECT * FROM sources")
        stacks = st.query("SELECT DISTINCT path, ts, ts_basis FROM stacks")
        basis = st.query("SELECT DISTINCT cpu_basis FROM snapshot_facts")
    kinds = {s["path"]: s["kind"] for s in sources}
    assert kinds["manifest.json"] == "capture_manifest"
    assert kinds["proc/round1.json"] == kinds["proc/round2.json"] == "process_facts"
    assert "unknown" not in kinds.values()
    for s in sources:
        assert s["lines"] == s["parsed_lines"] + s["unparsed_lines"] and s["status"] == "ok", s
    assert basis == [{"cpu_basis": "main thread"}]          # the main thread's own CPU, not its helpers'
    dumps = {d.file: d for r in m.rounds for d in r.dumps if d.ok}
    assert {s["path"] for s in stacks} == set(dumps) and len(dumps) == 10
    for s in stacks:
        assert s["ts_basis"] == "manifest"
        assert s["ts"] == dumps[s["path"]].time.replace(tzinfo=None)             # the capture host's clock
        member_time = dumps[s["path"]].time - timedelta(days=DAYS_OFF)
        assert abs((s["ts"] - member_time.replace(tzinfo=None)).total_seconds()) > 86400


def test_symm_bundle_verdicts_and_stuck_since(symm_report):
    m, found, _, _ = symm_report
    (sig,) = found["known-signature"]
    assert sig["signature"] == "symm-mem-window-register" and sig["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    (stuck,) = found["stuck-across-snapshots"]
    since = min(d.time for d in m.rounds[0].dumps if d.rank).strftime("%H:%M:%S")
    assert stuck["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert f"unchanged across 2 snapshots since {since}" in stuck["title"]
    assert "same wchan unix_stream" in stuck["title"] and "CPU time flat" in stuck["title"]
    assert "collective-desync" not in found and "moved-between-snapshots" not in found
    if shutil.which("nvidia-smi") is None:                # no GPU samples: said, not hidden
        (gap,) = found["capture-incomplete"]
        assert "nvidia-smi not found on PATH" in gap["detail"] and gap["evidence"][0]["file"] == "manifest.json"


def test_symm_report_shows_state_and_wchan_per_rank_in_chromium(symm_report, open_in_chromium):
    _, _, html, _ = symm_report
    page, seen = open_in_chromium(html)
    assert seen == []                    # no console error, no network request
    for rank in ("TP0", "TP1", "TP2", "TP3"):
        chip = page.locator(f".stack-tree .proc[data-rank='{rank}']")
        assert chip.count() == 1 and chip.is_visible()
        text = chip.inner_text()
        assert text.startswith(f"{rank}: S · unix_stream_") and "stuck ×2" in text, text
        assert page.locator(f"table.capture-ranks tr[data-rank='{rank}'][data-status='stuck']").count() == 1
    assert "The capture's snapshots: TP0-3: same main-thread frames" in page.locator("#verdict").inner_text()
    assert "dated by the capture manifest" in page.locator(".stack-capture .legend").first.inner_text()
    if shutil.which("nvidia-smi") is None:
        failures = page.locator(".capture-failures li.not-captured")
        assert any("nvidia-smi" in failures.nth(i).inner_text() for i in range(failures.count()))


def test_desync_tree_names_tp2_and_repeated_snapshots_confirm_it(tmp_path: Path):
    with spawn_tree(tmp_path / "tree", "desync") as tree:
        bundle = capture(tree, tmp_path / "desync.tar.gz", "--repeat", "2", "--interval", "1")
    found, _, _ = report(bundle, tmp_path)
    (desync,) = found["collective-desync"]
    assert desync["ranks"] == ["TP2"] and "_all_reduce_attn_groups" in desync["detail"]
    assert "Repeated snapshots confirm it: TP0-1,3 stayed in broadcast" in desync["detail"]
    stuck = {tuple(f["ranks"]): f["title"] for f in found["stuck-across-snapshots"]}
    assert set(stuck) == {("TP0", "TP1", "TP3"), ("TP2",)}
    assert "unchanged across 2 snapshots" in stuck[("TP2",)] and "hrtimer_nanosleep" in stuck[("TP2",)]
    assert any(f["signature"] == "hicache-collective-desync" for f in found["known-signature"])


def test_a_rank_looping_in_on_idle_is_not_stuck_and_only_repeated_snapshots_call_the_desync(tmp_path: Path):
    with spawn_tree(tmp_path / "tree", "idle") as tree:
        twice = capture(tree, tmp_path / "twice.tar.gz", "--repeat", "2", "--interval", "1")
        once = capture(tree, tmp_path / "once.tar.gz")
    found, _, _ = report(twice, tmp_path)
    (desync,) = found["collective-desync"]
    assert desync["ranks"] == ["TP0"] and "never came back" in desync["title"]
    assert "Scheduler.on_idle" in desync["detail"]
    assert [f["ranks"] for f in found["stuck-across-snapshots"]] == [["TP1", "TP2", "TP3"]]
    (ran,) = found["moved-between-snapshots"]
    assert ran["ranks"] == ["TP0"]
    assert "spinning in place, not blocked" in ran["title"] or "slow, not stuck" in ran["title"], ran["title"]
    # one snapshot of the same tree: TP0 in on_idle, the others in the broadcast, and no verdict either way
    found, _, _ = report(once, tmp_path)
    assert "collective-desync" not in found and "stuck-across-snapshots" not in found
