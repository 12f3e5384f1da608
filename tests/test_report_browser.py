"""The HTML report in a real headless Chromium: it renders, the verdict shows, the timeline has its markers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import LogWriter

from hangforensics import api


@pytest.fixture(scope="module")
def page_of(open_in_chromium):
    """(page, console errors/warnings and page errors, network requests) of an opened report."""

    def open_report(html: Path):
        page, seen = open_in_chromium(html)
        return (page, [m for m in seen if not m.startswith("request: ")],
                [m[len("request: "):] for m in seen if m.startswith("request: ")])

    return open_report


def test_seed_style_report_renders_with_verdict_and_timeline(tmp_path: Path, page_of):
    log = LogWriter(tp=4)
    log.startup().traffic(10, 300, ranks=("TP0", "TP1"))
    log.posts(302, 640).probes(305, 640)
    log.raw("stray unprefixed text with <script>alert('x')</script> & friends")
    for r in (3, 1, 0, 2):
        log.watchdog(630, f"TP{r}")
    engine = log.write(tmp_path / "gpu7-<odd>&name")
    out = tmp_path / "report.html"
    api.report(engine, out)
    page, messages, requests = page_of(out)
    assert messages == [], messages
    assert requests == [], requests                       # self-contained: no network
    verdict = page.locator("#verdict")
    assert verdict.is_visible()
    assert "stopped making forward progress" in verdict.inner_text()
    assert "froze within the same second" in verdict.inner_text()
    rows = page.locator("svg.timeline g.rank-row")
    assert rows.count() == 2                               # one row per logging rank
    assert sorted(rows.nth(i).get_attribute("data-rank") for i in range(2)) == ["TP0", "TP1"]
    assert page.locator("svg.timeline g.onset-marker").count() == 1
    assert page.locator("svg.timeline rect.freeze-window").count() == 1
    onset_x = float(page.locator("g.onset-marker line").get_attribute("x1"))
    freeze = page.locator("rect.freeze-window")
    fx, fw = float(freeze.get_attribute("x")), float(freeze.get_attribute("width"))
    assert fx <= onset_x <= fx + fw                        # the freeze window sits at the onset
    assert page.locator("circle.probe.after-onset").count() > 10   # /health answers after onset are drawn
    box = page.locator("svg.timeline").bounding_box()
    assert box and box["width"] > 600 and box["height"] > 60
    assert page.locator("text=Red herring").first.is_visible()
    assert page.locator("details.finding").count() >= 5
    # log text is escaped, never executed
    assert "<odd>&name" in page.locator("h2").first.inner_text()
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)


def test_quiet_engine_report_says_no_hang(tmp_path: Path, page_of):
    log = LogWriter()
    log.startup().traffic(10, 200).probes(210, 900)
    out = tmp_path / "quiet.html"
    api.report(log.write(tmp_path / "quiet"), out)
    page, messages, _ = page_of(out)
    assert messages == []
    assert page.locator("#verdict p.headline").inner_text().startswith("Idle since 10:03:20")
    assert page.locator("svg.timeline g.onset-marker").count() == 0
    # never silent: what to capture next time ends the engine's section
    assert page.locator("ol[data-capture-next] li").count() >= 1


def test_stack_class_tree_folds_and_shows_classes_side_by_side(tmp_path: Path, page_of):
    from conftest import SHARED

    src = SHARED / "formats" / "collective_desync"
    if not src.is_dir():
        pytest.skip("../shared/formats not beside the repository")
    eng = tmp_path / "desync"
    eng.mkdir()
    for f in sorted(src.glob("rank?.plain.txt")):
        shutil.copy(f, eng / f.name)
    out = tmp_path / "desync.html"
    api.report(eng, out)
    page, messages, _ = page_of(out)
    assert messages == []
    root = page.locator(".stack-tree > details.stack-node").first
    assert root.get_attribute("data-ranks") == "TP0-3"
    children = root.locator(":scope > details.stack-node")
    assert sorted(children.nth(i).get_attribute("data-ranks") for i in range(children.count())) == \
        ["TP0-1", "TP2", "TP3"]
    odd = page.locator('details.stack-node[data-ranks="TP2"]')
    assert odd.is_visible() and "_all_reduce_attn_groups" in odd.inner_text()
    root.locator(":scope > summary").click()                  # fold the whole tree
    assert not odd.is_visible()
    root.locator(":scope > summary").click()
    assert odd.is_visible()
    headers = page.locator("table.stack-classes th")
    assert headers.count() == 3 and "TP0-1 (2)" in headers.first.inner_text()
    assert "collective-desync" in [page.locator("details.finding").nth(i).get_attribute("data-rule")
                                   for i in range(page.locator("details.finding").count())]


def _fleet_index_db(tmp_path: Path, engines: int) -> Path:
    """A database with ``engines`` engines and their incidents, as a nightly scan leaves it."""
    from datetime import datetime, timedelta

    from hangforensics.store import Store

    db = tmp_path / f"fleet{engines}.duckdb"
    t0 = datetime(2026, 4, 1)
    with Store(db) as st:
        st.append("scans", [{"scan_id": 1, "root": "/fleet", "started_at": t0, "finished_at": t0}])
        st.append("sources", [{"source_id": i + 1, "path": f"eng-{i:04d}/server.log", "abs_path": f"/x/{i}",
                               "engine": f"eng-{i:04d}", "kind": "server_log", "bytes": 1000 + i, "lines": 10 + i,
                               "parsed_lines": 10 + i, "unparsed_lines": 0, "status": "ok"} for i in range(engines)])
        st.append("incidents", [{
            "incident_id": f"eng-{i:04d}-x", "engine": f"eng-{i:04d}", "segment": 0, "kind": "stall",
            "onset": t0 + timedelta(minutes=7 * i), "ended": t0 + timedelta(minutes=7 * i + 6),
            "end_reason": "watchdog kill", "severity": ["critical", "warning", "info"][i % 3],
            "rules": ["stall-onset"], "signatures": ["symm-mem-window-register"] if i % 2 else [],
            "n_findings": 3, "watchdog_kills": i % 2, "health_blind_s": float(i % 17) * 60, "ranks": ["TP0"],
            "first_seen_scan": 1, "last_seen_scan": 1, "title": f"stall {i}"} for i in range(engines)])
    return db


def test_fleet_index_of_1000_engines_loads_and_sorts(tmp_path: Path, page_of):
    import time

    from hangforensics.report.html import render_fleet_index
    from hangforensics.store import Store

    with Store(_fleet_index_db(tmp_path, 1000)) as st:
        html = render_fleet_index(st, 1)
    out = tmp_path / "index.html"
    out.write_text(html)
    t = time.monotonic()
    page, messages, requests = page_of(out)
    load_s = time.monotonic() - t
    assert messages == [] and requests == []
    rows = page.locator("#incidents tbody tr")
    assert rows.count() == 1000
    assert "1000" in page.locator("#summary").inner_text()
    blind = page.locator("#incidents th", has_text="/health blind")
    blind.click()
    first = page.locator("#incidents tbody tr").first.locator("td").nth(6).inner_text()
    blind.click()
    top = page.locator("#incidents tbody tr").first.locator("td").nth(6).inner_text()
    assert float(top or 0) == 16.0 and float(first or 0) == 0.0      # ascending, then descending
    page.locator("#filter").fill("eng-0042")
    visible = page.locator("#incidents tbody tr:visible")
    assert visible.count() == 1
    assert load_s < 30                                               # loose: a usable page, not a benchmark


def test_scan_index_links_every_incident_report(tmp_path: Path, page_of):
    from conftest import small_fleet

    from hangforensics.fleet.scan import scan

    res = scan(small_fleet(tmp_path), tmp_path / "s.duckdb", out=tmp_path / "out")
    page, messages, _ = page_of(res.index)
    assert messages == []
    links = page.locator("#incidents tbody a")
    assert links.count() == len(res.incidents) == 1
    links.first.click()
    page.wait_for_load_state("load")
    assert "stopped making forward progress" in page.locator("#verdict").inner_text()


def test_collective_timeline_panel_highlights_the_odd_rank(tmp_path: Path, page_of):
    from test_collectives_ingest import T0, dump, history, write_dump

    eng = tmp_path / "fr-engine"
    for r in range(4):
        last, state = (511, "completed") if r == 2 else (512, "started")
        write_dump(eng, f"nccl_trace_rank_{r}", dump(history("0", "tp:0", last, state, T0), {"0": ("tp:0", [0, 1, 2, 3])}))
    out = tmp_path / "fr.html"
    api.report(eng, out)
    page, messages, requests = page_of(out)
    assert messages == [] and requests == []
    panel = page.locator('.coll-panel[data-pg="0(tp:0)"]')
    assert panel.is_visible() and panel.get_attribute("data-verdict") == "desync"
    rows = panel.locator("tr.coll-rank")
    assert [rows.nth(i).get_attribute("data-rank") for i in range(rows.count())] == ["rank0", "rank1", "rank2", "rank3"]
    odd = panel.locator("tr.coll-rank.odd")
    assert odd.count() == 1 and odd.get_attribute("data-rank") == "rank2"
    head = odd.locator("th")
    color = head.evaluate("e => getComputedStyle(e).backgroundColor")
    normal = panel.locator('tr.coll-rank[data-rank="rank0"] th').evaluate("e => getComputedStyle(e).backgroundColor")
    assert color != normal                                     # highlighted, visibly
    # rank 2 finished #511 and never started #512: its #512 cell is empty, the others' are started
    last = panel.locator("th.seq").last
    assert last.inner_text() == "#512"
    assert odd.locator("td.cell").last.get_attribute("class") == "cell none"
    assert panel.locator('tr.coll-rank[data-rank="rank0"] td.cell').last.get_attribute("class") == "cell started"
    # a binary dump's evidence is described by its entries, never shown as its bytes
    assert page.locator(".excerpt").first.inner_text().startswith("entry ")
    page.screenshot(path=str(tmp_path / "fr.png"), full_page=True)
