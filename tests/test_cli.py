"""The command line end to end, as a user runs it (subprocess, real files, real exit codes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LogWriter

pytestmark = pytest.mark.filterwarnings("ignore")


def hf(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangforensics", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    log = LogWriter()
    log.startup().traffic(10, 120).posts(122, 430).probes(125, 430)
    for r in range(4):
        log.watchdog(425, f"TP{r}")
    return log.write(tmp_path / "node3-decode")


def test_report_writes_html_and_findings_document(engine: Path, tmp_path: Path):
    out, js = tmp_path / "r.html", tmp_path / "f.json"
    p = hf("report", str(engine), "-o", str(out), "--json", str(js))
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""                                  # stdout carries only what was asked for
    doc = json.loads(js.read_text())
    assert doc["tool"] == "hangforensics" and doc["version"]
    rules = {f["rule"] for f in doc["findings"]}
    assert {"stall-onset", "all-ranks-frozen", "watchdog-kill", "busy-leak-report", "health-check-blind"} <= rules
    for f in doc["findings"]:
        assert set(f) >= {"rule", "severity", "engine", "ranks", "ts", "ts_end", "title", "detail", "evidence"}
        assert f["engine"] == "node3-decode"
        assert all(e["file"] == "server.log" and e["line"] >= 1 for e in f["evidence"])
    html = out.read_text()
    assert "<script src" not in html and "http://" not in html.split("</style>")[1].split("<main>")[0]


def test_report_fail_on(engine: Path, tmp_path: Path):
    p = hf("report", str(engine), "-o", str(tmp_path / "r.html"), "--fail-on", "critical")
    assert p.returncode == 1


def test_ingest_is_idempotent_and_grows(engine: Path, tmp_path: Path):
    db = tmp_path / "h.duckdb"
    assert hf("ingest", str(engine), "--db", str(db)).returncode == 0
    q = "SELECT (SELECT count(*) FROM batches) b, (SELECT count(*) FROM http_requests) h, (SELECT count(*) FROM events) e"
    first = json.loads(hf("sql", q, "--db", str(db), "--format", "json").stdout)
    assert hf("ingest", str(engine), "--db", str(db)).returncode == 0
    again = json.loads(hf("sql", q, "--db", str(db), "--format", "json").stdout)
    assert first == again
    with (engine / "server.log").open("a") as f:
        f.write("[2026-05-01 10:08:00 TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, "
                "cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0\n")
    assert hf("ingest", str(engine), "--db", str(db)).returncode == 0
    grown = json.loads(hf("sql", q, "--db", str(db), "--format", "json").stdout)
    assert grown[0]["b"] == first[0]["b"] + 1 and grown[0]["h"] == first[0]["h"]
    src = json.loads(hf("sql", "SELECT lines, parsed_lines, unparsed_lines FROM sources", "--db", str(db),
                        "--format", "json").stdout)[0]
    assert src["lines"] == len((engine / "server.log").read_text().splitlines())
    assert src["lines"] == src["parsed_lines"] + src["unparsed_lines"]


def test_analyze_json_and_table(engine: Path, tmp_path: Path):
    db = tmp_path / "h.duckdb"
    hf("ingest", str(engine), "--db", str(db))
    p = hf("analyze", "--db", str(db), "--json")
    assert p.returncode == 0
    doc = json.loads(p.stdout)
    assert any(f["rule"] == "stall-onset" for f in doc["findings"])
    stored = json.loads(hf("sql", "SELECT rule, ranks FROM findings ORDER BY rule", "--db", str(db),
                           "--format", "json").stdout)
    assert {r["rule"] for r in stored} == {f["rule"] for f in doc["findings"]}
    assert "critical" in hf("analyze", "--db", str(db)).stdout


def test_sql_formats_and_refusals(engine: Path, tmp_path: Path):
    db = tmp_path / "h.duckdb"
    hf("ingest", str(engine), "--db", str(db))
    csv = hf("sql", "SELECT rank, count(*) AS n FROM batches GROUP BY rank", "--db", str(db), "--format", "csv")
    assert csv.returncode == 0 and csv.stdout.splitlines()[0] == "rank,n"
    pq = tmp_path / "b.parquet"
    assert hf("sql", "SELECT * FROM batches", "--db", str(db), "--format", "parquet", "-o", str(pq)).returncode == 0
    assert pq.stat().st_size > 0
    for bad in ("DELETE FROM batches", "DROP TABLE batches", "COPY batches TO '/tmp/x.csv'",
                "ATTACH '/tmp/other.duckdb'", "INSTALL httpfs", "SELECT 1; SELECT 2",
                "SELECT * FROM read_csv('/etc/passwd')"):
        p = hf("sql", bad, "--db", str(db))
        assert p.returncode == 2, bad
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, bad
    assert hf("sql", "SELECT count(*) FROM batches", "--db", str(db)).returncode == 0


def test_rules_lists_every_rule():
    p = hf("rules")
    assert p.returncode == 0
    for rid in ("stall-onset", "all-ranks-frozen", "first-rank-stopped", "busy-leak-report", "idle-memory-leak",
                "health-check-blind", "watchdog-kill"):
        assert rid in p.stdout


@pytest.mark.parametrize("args", [
    ["report", "/no/such/engine"],
    ["ingest", "/no/such/engine"],
    ["analyze", "--db", "/no/such.duckdb"],
    ["sql", "SELECT 1", "--db", "/no/such.duckdb"],
    ["report"],
    ["bogus-command"],
    ["sql", "SELECT 1", "--format", "xml"],
])
def test_bad_input_is_one_line_exit_2(args: list[str], tmp_path: Path):
    p = hf(*args, cwd=tmp_path)
    assert p.returncode == 2, (args, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_truncated_gzip_keeps_what_it_holds_and_the_rest_is_analyzed(engine: Path, tmp_path: Path):
    import gzip
    import zlib

    data = gzip.compress(("[2026-05-01 09:00:00] old line\n" * 200000).encode())
    cut = data[: len(data) // 2]                                              # cut mid-stream
    (engine / "server.log.1.gz").write_bytes(cut)
    recoverable = zlib.decompressobj(wbits=31).decompress(cut)
    db = tmp_path / "h.duckdb"
    p = hf("report", str(engine), "-o", str(tmp_path / "r.html"), "--db", str(db))
    assert p.returncode == 0, p.stderr
    rows = json.loads(hf("sql", "SELECT path, kind, lines, status, note FROM sources ORDER BY path", "--db", str(db),
                         "--format", "json").stdout)
    bad = [r for r in rows if r["path"] == "server.log.1.gz"][0]
    assert bad["kind"] == "server_log" and bad["status"] == "ok"
    assert "gzip data ends early" in bad["note"]
    assert bad["lines"] == recoverable.count(b"\n") + (not recoverable.endswith(b"\n"))
    assert hf("sql", "SELECT count(*) FROM findings", "--db", str(db)).returncode == 0


def test_tar_bundle_is_unpacked_safely(engine: Path, tmp_path: Path):
    import tarfile

    good = tmp_path / "bundle.tar.gz"
    with tarfile.open(good, "w:gz") as t:
        t.add(engine, arcname="node3-decode")
    js = tmp_path / "f.json"
    assert hf("report", str(good), "-o", str(tmp_path / "r.html"), "--json", str(js)).returncode == 0
    assert {f["engine"] for f in json.loads(js.read_text())["findings"]} == {"node3-decode"}
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as t:
        t.add(engine / "server.log", arcname="../../escaped.log")
    p = hf("report", str(evil), "-o", str(tmp_path / "r2.html"))
    assert p.returncode == 2 and "escapes" in p.stderr


@pytest.mark.parametrize("during_ctrl_c", [True, False])
def test_an_error_of_clean_up_after_ctrl_c_reports_the_interrupt(during_ctrl_c: bool, monkeypatch, capsys):
    """Clean-up that fails while a Ctrl-C unwinds (a memory map still viewed, say) must not turn the user's
    interrupt into an "internal error"; the same error without a Ctrl-C is one."""
    from hangforensics import cli

    def command(**kwargs):
        try:
            if during_ctrl_c:
                raise KeyboardInterrupt
        finally:
            raise BufferError("cannot close exported pointers exist")

    monkeypatch.setattr(cli, "app", command)
    with pytest.raises(SystemExit) as stop:
        cli.main()
    err = capsys.readouterr().err
    if during_ctrl_c:
        assert (stop.value.code, err) == (130, "hangforensics: interrupted\n")
    else:
        assert stop.value.code == 3 and err.startswith("hangforensics: internal error: BufferError")
