"""``hangforensics sql``: read-only protection, terminal tables, exports, named queries, the user schema doc."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from conftest import REPO, SHARED

from hangforensics.analysis.findings import run_rules
from hangforensics.errors import InputError, QueryError
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.sql.named_queries import load_named_queries
from hangforensics.sql.query import render_rows, run_query
from hangforensics.store import CONTRACT_COLUMNS, Store, schema_markdown

SEED = REPO / "examples" / "seed-incident"
REFUSED = "only read-only queries are allowed"


@pytest.fixture(scope="module")
def seed_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real database: the bundled seed incident ingested and analyzed."""
    db = tmp_path_factory.mktemp("seed") / "seed.duckdb"
    with Store(db) as st:
        ingest_paths(st, [SEED])
        run_rules(st)
    return db


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _direct(db: Path, sql: str) -> tuple[list[str], list[tuple]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute(sql)
        return [d[0] for d in cur.description], cur.fetchall()
    finally:
        con.close()


# -- refusals -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("query", "what"), [
    ("INSERT INTO meta VALUES ('x', 'y')", "INSERT"),
    ("UPDATE meta SET value = '9' WHERE key = 'schema_version'", "UPDATE"),
    ("DELETE FROM batches", "DELETE"),
    ("CREATE TABLE t (a INTEGER)", "CREATE TABLE"),
    ("CREATE OR REPLACE VIEW v AS SELECT 1", "CREATE VIEW"),
    ("CREATE MACRO m(a) AS a + 1", "CREATE MACRO"),
    ("DROP TABLE batches", "DROP TABLE"),
    ("ALTER TABLE sources ADD COLUMN x INTEGER", "ALTER TABLE"),
    ("COPY batches TO '/tmp/hf-test-out.csv'", "COPY"),
    ("COPY meta FROM '/etc/passwd'", "COPY"),
    ("EXPORT DATABASE '/tmp/hf-test-export'", "EXPORT DATABASE"),
    ("IMPORT DATABASE '/tmp/hf-test-export'", "IMPORT DATABASE"),
    ("ATTACH '/tmp/hf-test-other.duckdb' AS other", "ATTACH"),
    ("DETACH other", "DETACH"),
    ("USE memory", "USE"),
    ("INSTALL httpfs", "INSTALL"),
    ("LOAD httpfs", "LOAD"),
    ("SET threads = 1", "SET"),
    ("RESET threads", "RESET"),
    ("CHECKPOINT", "CHECKPOINT"),
    ("VACUUM", "VACUUM"),
    ("PRAGMA enable_profiling", "PRAGMA enable_profiling"),
    ("PRAGMA force_checkpoint", "PRAGMA force_checkpoint"),
    ("PRAGMA memory_limit = '1GB'", "PRAGMA"),
    ("CALL force_checkpoint()", "CALL force_checkpoint"),
    ("EXPLAIN ANALYZE DELETE FROM batches", "EXPLAIN of DELETE"),
    ("BEGIN TRANSACTION", "BEGIN"),
    ("/* sneaky */ -- comment\n DELETE FROM batches", "DELETE"),
])
def test_writing_statements_are_refused_by_name(seed_db: Path, query: str, what: str):
    before = _digest(seed_db)
    with pytest.raises(QueryError) as e:
        run_query(seed_db, query)
    assert str(e.value) == f"{REFUSED}: {what} refused"
    assert _digest(seed_db) == before


def test_several_statements_are_refused_even_when_the_first_reads(seed_db: Path):
    before = _digest(seed_db)
    with pytest.raises(QueryError, match=r"one statement at a time: 2 found \(SELECT, DROP TABLE\)"):
        run_query(seed_db, "SELECT 1; DROP TABLE batches")
    assert _digest(seed_db) == before
    assert run_query(seed_db, "SELECT count(*) AS n FROM batches", "json") != "[\n]\n"


@pytest.mark.parametrize("query", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_parquet('/etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
])
def test_queries_cannot_read_files(seed_db: Path, query: str):
    with pytest.raises(QueryError) as e:
        run_query(seed_db, query)
    msg = str(e.value)
    assert msg.startswith("reading or writing files is disabled in queries") and "\n" not in msg
    assert "root:" not in msg


@pytest.mark.parametrize("query", [
    "SELECT count(*) FROM batches",
    "WITH b AS (SELECT * FROM batches) SELECT rank, count(*) FROM b GROUP BY rank",
    "FROM sources SELECT path",
    "EXPLAIN SELECT * FROM batches",
    "EXPLAIN ANALYZE SELECT count(*) FROM batches",
    "DESCRIBE batches",
    "SHOW TABLES",
    "SUMMARIZE batches",
    "PRAGMA table_info('batches')",
    "PRAGMA show_tables",
    "PRAGMA database_size",
    "PRAGMA version",
    "CALL pragma_version()",
    "CALL duckdb_tables()",
    "-- leading comment\nSELECT 1 AS one;",
])
def test_read_only_statements_run(seed_db: Path, query: str):
    before = _digest(seed_db)
    rows = json.loads(run_query(seed_db, query, "json"))
    assert rows, query
    assert _digest(seed_db) == before


def test_refusals_from_the_command_line_are_one_line_exit_2(seed_db: Path):
    for bad in ("DROP TABLE batches", "SELECT * FROM read_text('/etc/passwd')", "last-progres"):
        p = subprocess.run([sys.executable, "-m", "hangforensics", "sql", bad, "--db", str(seed_db)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and p.stdout == "", bad
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, bad


# -- terminal tables ------------------------------------------------------------------------------------

def test_table_cuts_long_cells_and_fits_the_width(seed_db: Path):
    text = run_query(seed_db, "SELECT repeat('x', 10000) AS long, 42 AS n, NULL AS nothing, ['TP0', 'TP1'] AS ranks",
                     width=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines[:3]) <= 80
    assert "…" in lines[2] and "x" * 100 not in text
    assert lines[0].split() == ["long", "n", "nothing", "ranks"]
    assert "NULL" in lines[2] and "[TP0, TP1]" in lines[2]
    assert lines[-1] == "1 row"


def test_table_says_how_many_rows_and_where_it_was_cut(seed_db: Path):
    (n,) = _direct(seed_db, "SELECT count(*) FROM batches")[1][0]
    text = run_query(seed_db, "SELECT ts, rank FROM batches ORDER BY ts", max_rows=7, width=120)
    lines = text.splitlines()
    assert len(lines) == 2 + 7 + 1
    assert lines[-1] == f"{n:,} rows, showing the first 7 (--max-rows N shows more, 0 all)"
    full = run_query(seed_db, "SELECT ts, rank FROM batches ORDER BY ts", max_rows=0, width=120)
    assert full.splitlines()[-1] == f"{n:,} rows" and len(full.splitlines()) == 2 + n + 1
    assert run_query(seed_db, "SELECT * FROM batches WHERE false").splitlines()[-1] == "0 rows"


def test_table_keeps_times_whole_and_hides_columns_that_cannot_fit():
    cols = ["ts", "message", *[f"c{i}" for i in range(30)]]
    rows = [["2026-11-18 09:58:57", "m" * 500, *["v" * 10] * 30]]
    text = render_rows(cols, rows, 1, 60, squeezable=[False] + [True] * 31)
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines[:3])
    assert lines[2].startswith("2026-11-18 09:58:57  mmm")
    assert re.search(r"\(\d+ more columns not shown: .*c29", text)


def test_table_neutralises_terminal_escapes_and_newlines(seed_db: Path):
    text = run_query(seed_db, "SELECT 'red' || chr(27) || '[31m' || chr(10) || 'next' AS s", width=100)
    assert "\x1b" not in text and "\\x1b[31m\\nnext" in text


# -- exports --------------------------------------------------------------------------------------------

FINDINGS_SQL = "SELECT finding_id, rule, ranks, ts, ts_end, evidence, signature FROM findings ORDER BY finding_id"


def test_csv_export_matches_duckdb(seed_db: Path, tmp_path: Path):
    out = tmp_path / "f.csv"
    assert run_query(seed_db, FINDINGS_SQL, "csv", out) is None
    got = list(csv.DictReader(io.StringIO(out.read_text())))
    cols, rows = _direct(seed_db, FINDINGS_SQL)
    assert len(got) == len(rows) and list(got[0]) == cols
    for g, r in zip(got, rows, strict=True):
        want = dict(zip(cols, r, strict=True))
        assert int(g["finding_id"]) == want["finding_id"] and g["rule"] == want["rule"]
        assert json.loads(g["ranks"]) == want["ranks"]                      # lists as JSON text
        assert json.loads(g["evidence"]) == want["evidence"]                # structs as JSON text
        assert g["ts"] == want["ts"].isoformat()
        assert g["ts_end"] == (want["ts_end"].isoformat() if want["ts_end"] else "")   # NULL: empty field
        assert g["signature"] == (want["signature"] or "")


def test_json_export_matches_duckdb(seed_db: Path):
    doc = json.loads(run_query(seed_db, FINDINGS_SQL, "json"))
    cols, rows = _direct(seed_db, FINDINGS_SQL)
    assert isinstance(doc, list) and len(doc) == len(rows)
    for g, r in zip(doc, rows, strict=True):
        want = dict(zip(cols, r, strict=True))
        assert g["ranks"] == want["ranks"] and g["evidence"] == want["evidence"]
        assert g["ts"] == want["ts"].isoformat()
        assert g["ts_end"] == (want["ts_end"].isoformat() if want["ts_end"] else None)
    attrs = json.loads(run_query(seed_db, "SELECT attrs FROM events WHERE kind = 'server_args'", "json"))
    assert attrs[0]["attrs"]["tp_size"] == 8                                # a JSON column is embedded


def test_json_export_of_nothing_is_an_empty_array(seed_db: Path):
    assert json.loads(run_query(seed_db, "SELECT * FROM batches WHERE false", "json")) == []


def test_parquet_export_matches_duckdb(seed_db: Path, tmp_path: Path):
    out = tmp_path / "b.parquet"
    sql = "SELECT * FROM batches ORDER BY line"
    assert run_query(seed_db, sql, "parquet", out) is None
    table = pq.read_table(out)
    cols, rows = _direct(seed_db, sql)
    assert table.column_names == cols
    assert [tuple(r.values()) for r in table.to_pylist()] == rows
    with pytest.raises(InputError, match="needs -o"):
        run_query(seed_db, sql, "parquet")


def test_export_to_an_unwritable_place_is_a_clear_error(seed_db: Path, tmp_path: Path):
    with pytest.raises(InputError, match="cannot write"):
        run_query(seed_db, "SELECT 1", "csv", tmp_path / "no" / "such" / "dir" / "x.csv")


# -- named queries --------------------------------------------------------------------------------------

SHIPPED = {"last-progress", "health-blind", "ranks-by-stack-class", "leak-reports-by-context", "unparsed-by-file",
           "findings", "sources-with-notes", "stalls", "collective-waits"}


def test_named_queries_have_titles_and_descriptions():
    queries = {q.name: q for q in load_named_queries()}
    assert set(queries) >= SHIPPED
    for q in queries.values():
        assert q.title and q.description and q.sql.strip()
        assert not q.sql.lstrip().startswith("--"), q.name        # the header is not part of the SQL


def test_every_named_query_runs_on_the_seed(seed_db: Path):
    for q in load_named_queries():
        rows = json.loads(run_query(seed_db, q.name, "json"))
        cols, direct = _direct(seed_db, q.sql)
        assert len(rows) == len(direct) and (not rows or list(rows[0]) == cols), q.name


def _named(db: Path, name: str) -> list[dict]:
    return json.loads(run_query(db, name, "json"))


def test_named_queries_return_what_the_seed_implies(seed_db: Path):
    # README of the seed: TP0 logs the batch lines, the last at 09:58:57
    [last] = _named(seed_db, "last-progress")
    assert (last["engine"], last["rank"], last["last_progress"]) == ("seed-incident", "TP0", "2026-11-18T09:58:57")
    # /health answered 200 32 times from 09:59:00 to 10:04:10 after the onset
    [blind] = _named(seed_db, "health-blind")
    assert blind["engine"] == "seed-incident" and blind["probes_200"] == 32
    assert (blind["first_200"], blind["last_200"]) == ("2026-11-18T09:59:00", "2026-11-18T10:04:10")
    # every rank's watchdog dump printed the pool text: a watchdog report, not an idle leak
    [leak] = _named(seed_db, "leak-reports-by-context")
    assert leak["context"] == "watchdog" and leak["reports"] == 8 and leak["max_shortfall"] == 10816
    assert leak["ranks"] == [f"TP{i}" for i in range(8)]
    # the watchdog capture: all eight ranks in one class, blocked in recvmsg under window registration
    classes = _named(seed_db, "ranks-by-stack-class")
    first = [c for c in classes if c["capture"] == 0]
    assert len(first) == 1 and first[0]["ranks"] == "TP0-7" and first[0]["leaf_frame"] == "recvmsg"
    assert "ncclCommWindowRegister" in first[0]["innermost_frames"]
    # README.md and expected.json of the bundle are files no parser understands
    odd = {r["path"] for r in _named(seed_db, "sources-with-notes")}
    assert {"README.md", "expected.json"} <= odd and "server.log" not in odd
    findings = _named(seed_db, "findings")
    assert findings[0]["severity"] == "critical" and findings[-1]["severity"] == "info"
    assert {"stall-onset", "health-check-blind", "busy-leak-report"} <= {f["rule"] for f in findings}


def test_a_named_query_table_starts_with_its_title(seed_db: Path):
    assert run_query(seed_db, "health-blind", width=200).splitlines()[0] == \
        "Engines whose /health stayed 200 during a stall"


def test_an_unknown_name_falls_through_to_sql_with_a_clear_error(seed_db: Path):
    with pytest.raises(QueryError, match=r"no named query called 'last-progres' .*hangforensics queries"):
        run_query(seed_db, "last-progres")
    with pytest.raises(QueryError, match="cannot parse query"):
        run_query(seed_db, "SELEC * FROM batches")


def test_queries_command_lists_every_named_query():
    p = subprocess.run([sys.executable, "-m", "hangforensics", "queries"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    for q in load_named_queries():
        assert re.search(rf"^{re.escape(q.name)}\s+{re.escape(q.title)}$", p.stdout, re.MULTILINE), q.name


def test_sql_command_runs_a_named_query_by_name(seed_db: Path):
    p = subprocess.run([sys.executable, "-m", "hangforensics", "sql", "health-blind", "--db", str(seed_db),
                        "--format", "json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[0]["engine"] == "seed-incident"


def test_sql_md_shows_every_named_query():
    text = (REPO / "docs" / "sql.md").read_text()
    for q in load_named_queries():
        assert f"`{q.name}`" in text, q.name


# -- the user schema document against a real database -----------------------------------------------------

def _doc_relations(markdown: str) -> dict[str, dict[str, str]]:
    """{relation: {column: meaning}} from docs/schema.md: headings name relations, tables their columns."""
    out: dict[str, dict[str, str]] = {}
    current: list[str] = []
    for line in markdown.splitlines():
        if line.startswith("#"):
            current = re.findall(r"`([a-z_]+)`", line) if line.startswith(("## `", "### `")) else []
            for name in current:
                out[name] = {}
        elif current and (m := re.match(r"^\| `(\w+)` \| ([^|]*) \| ([^|]*) \| (.*) \|$", line)):
            for name in current:
                out[name][m.group(1)] = m.group(4).strip()
    return out


def test_schema_doc_lists_exactly_the_relations_and_columns_of_a_real_database(seed_db: Path):
    doc = _doc_relations((REPO / "docs" / "schema.md").read_text())
    _, rows = _direct(seed_db, "SELECT table_name, column_name FROM information_schema.columns "
                               "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position")
    real: dict[str, list[str]] = {}
    for table, col in rows:
        real.setdefault(table, []).append(col)
    assert set(doc) == set(real), (set(real) - set(doc), set(doc) - set(real))
    for name, cols in real.items():
        assert list(doc[name]) == cols, name
        empty = [c for c, meaning in doc[name].items() if not meaning]
        assert not empty, (name, empty)


def _interface_section_4() -> dict[str, list[str]] | None:
    path = SHARED / "interface.md"
    if not path.is_file():
        return None
    section = path.read_text().split("## 4.", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        if m := re.match(r"^\| `(\w+)` \| [^|]* \| (.*) \|$", line):
            out[m.group(1)] = re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", m.group(2)))
    return out


def test_interface_views_and_key_columns_are_in_the_database_and_the_doc(seed_db: Path):
    contract = {k: list(v) for k, v in CONTRACT_COLUMNS.items()}
    spec = _interface_section_4()
    if spec is not None:   # the contract in store.py is interface.md §4's (findings: "the fields of §3")
        assert set(spec) == set(contract)
        for view, cols in spec.items():
            assert set(cols) <= set(contract[view]), view
    doc = _doc_relations((REPO / "docs" / "schema.md").read_text())
    _, rows = _direct(seed_db, "SELECT table_name, column_name FROM information_schema.columns")
    real = {(t, c) for t, c in rows}
    for view, cols in contract.items():
        for col in cols:
            assert (view, col) in real, (view, col)
            assert doc[view].get(col), (view, col)
    assert schema_markdown() == (REPO / "docs" / "schema.md").read_text()
