"""Safe reports: hostile log text is shown as text and never runs; request payloads are redacted by default.

Every hostile string below reaches the page through a real path: log lines read back as evidence excerpts,
engine folder and file names, py-spy function names in the stack tree, finding titles and details.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, REPO, LogWriter

from hangforensics import api
from hangforensics.analysis import findings as findings_mod
from hangforensics.report.html import REPORT_CSP, _env, incident_filename, incident_href, script_csp

SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=1">'
SVG = "<svg onload=window.__pwned=1>"
JS_URL = "javascript:window.__pwned=1"
HOSTILE_ENGINE = IMG                                   # a legal Linux folder name
HOSTILE_FILE = f"{SVG}.log"
PROMPT = "PROMPT-SECRET-7f3a tell me the launch codes"
TOKEN = "987654321"
REQ_LINE = (f"self.cur_batch.batch_size()=2, self.cur_batch.reqs=[Req(rid=5f1c2a9e, input_ids=[128000, {TOKEN}, "
            f"271], output_ids=[791], self.grammar=None, self.sampling_params=<sglang.srt.sampling.sampling_params."
            f"SamplingParams object at 0x7ff1bb980100>)], available_size=261871, evictable_size=105150, ")
RECEIVE_LINE = (f"Receive: obj=GenerateReqInput(rid='5f1c2a9e', text='{PROMPT} {SCRIPT}', input_ids=None, "
                f"sampling_params={{'max_new_tokens': 64}}, stream=False)")


@pytest.fixture(scope="module")
def open_page(open_in_chromium):
    """Open a file in Chromium: (page, dialogs, console errors/warnings, page errors and network requests)."""

    def open_(html: Path):
        page, seen = open_in_chromium(html)
        page.wait_for_timeout(200)                 # onerror/onload handlers of injected elements would fire by now
        return page, seen

    return open_


def hostile_engine(folder: Path, tp: int = 2) -> Path:
    """A stalled engine (hard watchdogs on every rank) whose evidence carries markup where it reaches the page."""
    log = LogWriter(tp=tp)
    log.startup().traffic(10, 200, ranks=("TP0",))
    # the last batch line becomes the stall-onset excerpt
    log.batch(201, "TP0", extra=f"{SCRIPT} {IMG} {SVG} <a href=\"{JS_URL}\">x</a>, ")
    log.line(202, RECEIVE_LINE)
    log.posts(203, 560).probes(205, 560)
    for r in range(tp):
        log.line(519, REQ_LINE, f"TP{r}")              # 0.5.2-style watchdog batch info, with the prompt's token ids
        log.watchdog(520, f"TP{r}")
    log.write(folder, name=HOSTILE_FILE)
    cap = folder / f"captures {JS_URL}"
    cap.mkdir()
    (cap / f"{IMG}.txt").write_text(
        "Process 1004: sglang::scheduler_TP0\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
        'Thread 1004 (idle): "MainThread"\n    recvmsg (libc.so.6)\n'
        f"    {SCRIPT} (evil{IMG}.py:1)\n"
        f"    {SVG} (sglang/srt/managers/scheduler.py:1052)\n", encoding="utf-8")
    return folder


def hostile_fleet(root: Path) -> Path:
    hostile_engine(root / HOSTILE_ENGINE)
    hostile_engine(root / JS_URL)
    return root


def assert_inert(page, seen: list[str], own_scripts: list[str]) -> None:
    """No script but the template's own ran or exists, and nothing in the DOM could run one."""
    assert seen == [], seen
    assert page.evaluate("typeof window.__pwned") == "undefined"
    scripts = page.eval_on_selector_all("script", "els => els.map(e => e.textContent)")
    assert scripts == own_scripts
    bad = page.evaluate("""() => {
        const out = [];
        for (const el of document.querySelectorAll('*')) {
            for (const a of el.attributes) {
                const v = a.value.trim().toLowerCase();
                if (a.name.toLowerCase().startsWith('on')) out.push(el.tagName + ' ' + a.name);
                if (['href', 'src', 'xlink:href', 'action', 'formaction', 'data'].includes(a.name.toLowerCase())
                    && (v.startsWith('javascript:') || v.includes(':'))) out.push(el.tagName + ' ' + a.name + '=' + v);
            }
        }
        return out;
    }""")
    assert bad == [], bad
    assert page.locator("img, iframe, object, embed, a[href^='javascript'], svg:not(.timeline)").count() == 0
    csp = page.locator('meta[http-equiv="Content-Security-Policy"]')
    assert csp.count() == 1 and csp.get_attribute("content").startswith(REPORT_CSP)


def test_hostile_engine_report_shows_markup_as_text_and_runs_nothing(tmp_path: Path, open_page):
    engine = hostile_engine(tmp_path / HOSTILE_ENGINE)
    out = tmp_path / "report.html"
    api.report(engine, out)
    page, seen = open_page(out)
    assert_inert(page, seen, own_scripts=[])
    assert page.locator('meta[http-equiv="Content-Security-Policy"]').get_attribute("content") == REPORT_CSP
    text = page.locator("body").inner_text()
    for s in (SCRIPT, IMG, SVG, f'<a href="{JS_URL}">x</a>'):          # the last batch line's excerpt
        assert s in text, s
    assert HOSTILE_ENGINE in page.locator("h2").first.inner_text()
    assert f"{HOSTILE_FILE}:" in text                                   # evidence file names, details
    assert "stopped making forward progress" in page.locator("#verdict").inner_text()
    tree = "\n".join(page.locator(".stack-tree").all_inner_texts())      # py-spy function names
    assert SCRIPT in tree and SVG in tree
    sources = page.locator("table.sources").inner_text()
    assert f"captures {JS_URL}/{IMG}.txt" in sources


def test_hostile_fleet_index_links_stay_relative_and_run_only_its_own_script(tmp_path: Path, open_page):
    from hangforensics.fleet.scan import scan

    res = scan(hostile_fleet(tmp_path / "fleet"), tmp_path / "s.duckdb", out=tmp_path / "out")
    assert len(res.incidents) == 2
    own = _env().get_template("fleet.js").render()
    page, seen = open_page(res.index)
    assert_inert(page, seen, own_scripts=[own])
    assert page.locator('meta[http-equiv="Content-Security-Policy"]').get_attribute("content") == script_csp(own)
    text = page.locator("#incidents").inner_text()
    assert HOSTILE_ENGINE in text and JS_URL in text
    links = page.locator("#incidents tbody a")
    assert links.count() == 2
    for i in range(2):
        href = links.nth(i).get_attribute("href")
        assert href.startswith("incidents/") and "<" not in href and ":" not in href, href
        assert (tmp_path / "out" / href).is_file()
    # the sortable tables (the inline script, allowed by its hash) still work
    page.locator("#incidents th", has_text="engine").click()
    assert page.locator("#incidents th.asc").count() == 1
    page.locator("#filter").fill("javascript")
    assert page.locator("#incidents tbody tr:visible").count() == 1
    page.locator("#incidents tbody tr:visible a").click()
    page.wait_for_load_state("load")
    assert "stopped making forward progress" in page.locator("#verdict").inner_text()
    assert JS_URL in page.locator("h2").first.inner_text()
    for inc in res.incidents:                                            # every incident report is inert too
        p2, seen2 = open_page(tmp_path / "out" / "incidents" / incident_filename(inc["incident_id"]))
        assert_inert(p2, seen2, own_scripts=[])
        assert SCRIPT in p2.locator("body").inner_text()


def test_incident_file_names_are_sanitised_and_distinct():
    assert incident_filename("gpu1-stalled-1a2b3c4d") == "gpu1-stalled-1a2b3c4d.html"
    names = {incident_filename(x) for x in (f"{IMG}-1a2b", f"{SCRIPT}-1a2b", "a b-1", "a_b-1", "..-1", ".hidden")}
    assert len(names) == 6
    for n in names:
        assert n.endswith(".html") and not n.startswith(".")
        assert all(c.isalnum() or c in "._-" for c in n), n
    assert incident_href(f"{JS_URL}-1a2b").startswith("incidents/javascript_window.__pwned_1-1a2b-")
    assert len(incident_filename("x" * 300)) < 200


def test_autoescape_is_on_for_every_template():
    env = _env()
    for name in ("report.html.j2", "fleet.html.j2"):
        src = (REPO / "reports" / "templates" / name).read_text()
        assert "|safe" not in src.replace(" ", "") and "Markup" not in src
    assert env.from_string("{{ x }}").render(x=SCRIPT) == "&lt;script&gt;window.__pwned=1&lt;/script&gt;"


# ---- payload redaction -------------------------------------------------------------------------------------------

QUOTING_RULE_SQL = """
SELECT w.engine, [w.rank] AS ranks, w.ts, NULL::TIMESTAMP AS ts_end,
       'request in flight: ' || left(r.message, 120) AS title, 'log: ' || left(w.message, 300) AS detail,
       [{'file': w.path, 'line': w.line}, {'file': r.path, 'line': r.line}] AS evidence
FROM (SELECT * FROM events WHERE kind = 'watchdog_batch_info' QUALIFY row_number() OVER (PARTITION BY engine
      ORDER BY line) = 1) w
JOIN (SELECT * FROM events WHERE starts_with(message, 'Receive: obj=') QUALIFY row_number() OVER (PARTITION BY
      engine ORDER BY line) = 1) r USING (engine)
"""


@pytest.fixture
def quoting_rules(monkeypatch):
    """Today's rules cite no payload-bearing line; add one that quotes and cites the request lines, the way
    signature findings quote log messages, to prove the report redacts whatever a rule brings."""
    from hangforensics.analysis.rules import Rule

    real = findings_mod.load_rules
    extra = Rule(id="request-in-flight", severity="critical", title="A request was in flight",
                 description="test rule quoting request lines", logic="sql", sql=QUOTING_RULE_SQL, path=Path("t"))
    monkeypatch.setattr(findings_mod, "load_rules", lambda: [*real(), extra])


def _payload_engine(tmp_path: Path) -> Path:
    log = LogWriter(tp=2)
    log.startup().traffic(10, 200).line(202, RECEIVE_LINE).posts(203, 560)
    for r in range(2):
        log.line(519, REQ_LINE, f"TP{r}")
        log.watchdog(520, f"TP{r}")
    return log.write(tmp_path / "prompted")


def _cli(*args: str) -> None:
    from typer.testing import CliRunner

    from hangforensics.cli import app

    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output


def test_payloads_are_redacted_by_default_and_shown_on_request(tmp_path: Path, open_page, quoting_rules):
    engine = _payload_engine(tmp_path)
    db = tmp_path / "kept.duckdb"
    _cli("report", str(engine), "-o", str(tmp_path / "default.html"), "--db", str(db))
    _cli("report", str(engine), "-o", str(tmp_path / "shown.html"), "--show-payloads")

    html = (tmp_path / "default.html").read_text()
    assert PROMPT not in html and TOKEN not in html
    page, seen = open_page(tmp_path / "default.html")
    assert seen == []
    text = page.locator("body").inner_text()
    assert PROMPT not in text and TOKEN not in text
    assert "rid='5f1c2a9e'" in text and "Req(rid=5f1c2a9e, input_ids=‹payload redacted" in text
    assert "request payloads redacted" in text
    finding = page.locator('details.finding[data-rule="request-in-flight"]')
    assert "‹payload redacted" in finding.locator("summary").inner_text()     # the title
    assert "‹payload redacted" in finding.locator(".detail").inner_text()     # the detail
    assert finding.locator(".excerpt").count() == 2
    for i in range(2):
        assert "‹payload redacted" in finding.locator(".excerpt").nth(i).inner_text()

    page, seen = open_page(tmp_path / "shown.html")
    assert seen == []
    text = page.locator("body").inner_text()
    assert PROMPT in text and TOKEN in text and SCRIPT in text             # shown, still as text
    assert "request payloads shown" in text
    assert page.evaluate("typeof window.__pwned") == "undefined"

    from hangforensics.store import Store

    with Store(db) as st:                                                  # the database keeps the original
        msgs = [r["message"] for r in st.query("SELECT message FROM events")]
        assert any(PROMPT in m and SCRIPT in m for m in msgs)
        assert any(f"input_ids=[128000, {TOKEN}, 271]" in m for m in msgs)
        assert not any("payload redacted" in m for m in msgs)


def test_scan_redacts_incident_reports_unless_asked_and_rewrites_them_when_the_setting_changes(
        tmp_path: Path, quoting_rules):
    fleet = tmp_path / "fleet"
    _payload_engine(fleet)
    db, out = tmp_path / "s.duckdb", tmp_path / "out"
    _cli("scan", str(fleet), "--db", str(db), "--out", str(out))
    (report,) = (out / "incidents").glob("*.html")
    assert TOKEN not in report.read_text() and "‹payload redacted" in report.read_text()
    _cli("scan", str(fleet), "--db", str(db), "--out", str(out), "--show-payloads")   # nothing changed but the flag
    assert TOKEN in report.read_text() and PROMPT in report.read_text()
    _cli("scan", str(fleet), "--db", str(db), "--out", str(out))
    assert TOKEN not in report.read_text() and PROMPT not in report.read_text()
    assert TOKEN not in (out / "index.html").read_text()


def test_seed_incident_report_is_redacted(tmp_path: Path, open_page):
    seed = REPO / "examples" / "seed-incident"
    if not seed.is_dir():
        seed = EXAMPLES / "seed-incident"
    out = tmp_path / "seed.html"
    api.report(seed, out)
    html = out.read_text()
    assert "input_ids=[128000" not in html and "output_ids=[4791" not in html
    page, seen = open_page(out)
    assert seen == []
    assert "stopped making forward progress" in page.locator("#verdict").inner_text()


def test_the_timelines_markup_built_in_python_escapes_every_value():
    """Bars and probe dots are markup built outside the template: each value is escaped as the template would."""
    from hangforensics.report.html import _bars_svg, _probes_svg

    dots = str(_probes_svg([(120.5, True, True, 200, "10:00:00", SVG), (130.0, False, False, 503, "10:00:10", "/health")],
                           42))
    assert SVG not in dots and "&lt;svg onload=window.__pwned=1&gt;" in dots
    assert dots.count("<circle") == 2 and 'class="probe after-onset" cx="120.5" cy="42" r="3.5"' in dots
    assert 'stroke="#b3261e"' in dots and 'fill="#b3261e" ><title>10:00:10 /health 503</title>' in dots
    bars = str(_bars_svg([(110.0, 40.5, 4.3, 12.0, 7)]))
    assert bars == ('<rect x="110.0" y="40.5" width="4.3" height="12.0" fill="#2e7d32">'
                    '<title>7 progress line(s)</title></rect>')
