"""The store: documented schema, interface views, schema version, incremental manifest."""

from __future__ import annotations

from conftest import REPO

from hangforensics.store import SCHEMA_VERSION, Store, schema_markdown

INTERFACE_VIEWS = {
    "sources": ["path", "engine", "kind", "bytes", "lines", "parsed_lines", "unparsed_lines"],
    "events": ["engine", "path", "line", "ts", "rank", "kind", "message"],
    "batches": ["engine", "ts", "rank", "batch_kind", "running_req", "queue_req", "token_usage", "gen_throughput"],
    "http_requests": ["engine", "ts", "method", "path", "status"],
    "stacks": ["engine", "dump_id", "ts", "rank", "pid", "thread_name", "thread_state"],
    "frames": ["dump_id", "thread_id", "depth", "function", "file", "line", "native"],
    "leak_reports": ["engine", "ts", "rank", "context", "leaked_full_pages", "leaked_mamba_pages"],
    "findings": ["rule", "severity", "engine", "ranks", "ts", "ts_end", "title", "detail", "evidence", "signature"],
    "unparsed": ["engine", "path", "line", "text"],
}


def test_interface_views_and_key_columns_exist():
    with Store(":memory:") as st:
        for view, cols in INTERFACE_VIEWS.items():
            have = {r["column_name"] for r in st.query(f"DESCRIBE {view}")}
            assert set(cols) <= have, (view, set(cols) - have)
        assert st.scalar("SELECT value FROM meta WHERE key = 'schema_version'") == str(SCHEMA_VERSION)


def test_schema_doc_is_generated_from_the_ddl():
    assert (REPO / "docs" / "schema.md").read_text() == schema_markdown(), \
        "docs/schema.md is stale: python -m hangforensics.store > docs/schema.md"


def test_clock_offset_is_applied_by_the_views(tmp_path):
    db = tmp_path / "x.duckdb"
    with Store(db) as st:
        st.append("sources", [{"source_id": 1, "path": "node1.log", "abs_path": "/x", "engine": "e", "kind": "server_log",
                               "clock_offset_s": -37.0, "status": "ok"}])
        st.append("batches", [{"engine": "e", "path": "node1.log", "line": 1, "ts": "2026-01-01 10:00:40",
                               "rank": "TP8", "batch_kind": "Decode"}])
        assert str(st.scalar("SELECT ts FROM batches")) == "2026-01-01 10:00:03"
        assert str(st.scalar("SELECT ts FROM t_batches")) == "2026-01-01 10:00:40"
    with Store(db) as st:  # reopening keeps the data and the version
        assert st.scalar("SELECT count(*) FROM batches") == 1


def test_an_appended_arrow_table_is_let_go_before_the_transaction_ends(tmp_path):
    """A large log is loaded in transactions of 256 MB of spilled batches: DuckDB must not keep each
    appended table alive until the commit (a registered view did: the writer's memory grew by them all)."""
    import gc

    import pyarrow as pa

    with Store(tmp_path / "db.duckdb") as st:
        st.append("sources", [{"source_id": 1, "path": "e/x.log", "abs_path": "/x", "engine": "e",
                               "kind": "server_log", "status": "ok"}])
        base = pa.total_allocated_bytes()
        with st.transaction():
            for _ in range(3):
                rows = pa.table({"engine": pa.array(["e"] * 200_000), "path": pa.array(["e/x.log"] * 200_000),
                                 "line": pa.array(range(200_000), pa.int64())})
                assert st.append("batches", rows) == 200_000
                del rows
                gc.collect()
                assert pa.total_allocated_bytes() - base < 1_000_000, "the appended table is still held"
        assert st.scalar("SELECT count(*) FROM batches") == 600_000


def _two_engines(st: Store) -> None:
    """A vLLM engine (stats and access lines) and an SGLang one (batch lines), each with its 'server.log'."""
    from hangforensics.ingest.pipeline import ingest_paths

    ingest_paths(st, [REPO / "tests/data/vllm/v1-hung", REPO / "tests/data/variants/fleet/ams9-qwen25-72b-memchk-44"])


def test_bulk_rows_name_their_file_by_source_id(tmp_path):
    """Batches, access lines and vLLM stats lines store their file's source_id, not its engine and path
    text; their views take both from sources.  Rows that name no ingested file are refused."""
    import pytest

    from hangforensics.store import SOURCE_KEYED, physical

    with Store(tmp_path / "h.duckdb") as st:
        _two_engines(st)
        for name, path in SOURCE_KEYED.items():
            stored = {r["column_name"] for r in st.query(f"DESCRIBE {physical(name)}")}
            assert "source_id" in stored and not {"engine", path} & stored, name
            assert st.scalar(f"SELECT count(*) FROM {name}") > 0, name
            # every row's engine and path are those of the file it was read from
            assert st.scalar(f"""SELECT count(*) FROM {name} v ANTI JOIN sources s
                                 ON s.engine = v.engine AND s.path = v.{path}""") == 0
        assert {r["engine"] for r in st.query("SELECT DISTINCT engine FROM vllm_stats")} == {"v1-hung"}
        with pytest.raises(ValueError, match="not in sources"):
            st.append("batches", [{"engine": "v1-hung", "path": "other.log", "line": 1}])


def test_a_version_6_database_is_rekeyed(tmp_path):
    """Migration 6 -> 7 rewrites the bulk tables of an older database (engine and path text on every row)
    with their files' source_id: the views show the same rows as before."""
    from hangforensics.store import SOURCE_KEYED, TABLES, physical
    from hangforensics.store.schema import keyed_columns

    db = tmp_path / "h.duckdb"
    with Store(db) as st:
        _two_engines(st)
        want = {n: sorted(st.con.execute(f"SELECT * FROM {n}").fetchall(), key=repr) for n in SOURCE_KEYED}
        for name, path in SOURCE_KEYED.items():            # back to schema 6's tables
            t = physical(name)
            rest = [c for c in keyed_columns(name) if c not in ("engine", path)]
            st.con.execute(f"CREATE TABLE {t}_v6 ({TABLES[name]})")
            st.con.execute(f"INSERT INTO {t}_v6 (engine, {path}, {', '.join(rest)}) SELECT s.engine, s.path, "
                           f"{', '.join('r.' + c for c in rest)} FROM {t} r JOIN sources s USING (source_id)")
            st.con.execute(f"DROP VIEW {name}")
            st.con.execute(f"DROP TABLE {t}")
            st.con.execute(f"ALTER TABLE {t}_v6 RENAME TO {t}")
        st.con.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    with Store(db) as st:
        assert st.opened_at_version == 6
        got = {n: sorted(st.con.execute(f"SELECT * FROM {n}").fetchall(), key=repr) for n in SOURCE_KEYED}
        assert got == want
        assert "engine" not in {r["column_name"] for r in st.query("DESCRIBE t_batches")}


def test_batch_counts_are_stored_narrow_and_shown_wide(tmp_path):
    """A batch line's counts are stored as INTEGER and shown as BIGINT by the view; a count beyond INTEGER's
    range is stored NULL and costs its file nothing (its line's other values stay, the file reads as ok); a
    database whose table still has BIGINT there takes the same rows."""
    from hangforensics.api import ingest
    from hangforensics.store import physical
    from hangforensics.store.schema import NARROW_COLUMNS

    log = tmp_path / "eng" / "server.log"
    log.parent.mkdir()
    log.write_text(
        "[2026-03-01 00:00:00 TP0] Decode batch, #running-req: 10, #token: 3000000000, token usage: 0.01, "
        "cuda graph: True, gen throughput (token/s): 416.50, #queue-req: 0\n"
        "[2026-03-01 00:00:01 TP0] Prefill batch, #new-seq: 2, #new-token: 8192, #cached-token: 7, "
        "token usage: 0.02, #running-req: 11, #queue-req: 3\n")
    rows = "SELECT line, running_req, num_token, queue_req, new_token, token_usage FROM batches ORDER BY line"
    want = [(1, 10, None, 0, None, 0.01), (2, 11, None, 3, 8192, 0.02)]
    db = tmp_path / "h.duckdb"
    ingest([log.parent], db)
    with Store(db) as st:
        assert st.con.execute(rows).fetchall() == want
        assert st.scalar("SELECT status FROM sources") == "ok"
        view = {r["column_name"]: r["column_type"] for r in st.query("DESCRIBE batches")}
        table = {r["column_name"]: r["column_type"] for r in st.query(f"DESCRIBE {physical('batches')}")}
        for col in NARROW_COLUMNS["batches"]:
            assert (view[col], table[col]) == ("BIGINT", "INTEGER"), col
        assert table["forward_iter"] == "BIGINT"
        for col in NARROW_COLUMNS["batches"]:        # as a database made before keeps them
            st.con.execute(f"ALTER TABLE {physical('batches')} ALTER {col} TYPE BIGINT")
    log.unlink()
    log.with_name("server.1.log").write_text("".join(
        f"[2026-03-01 00:00:0{k} TP0] Decode batch, #running-req: {k}, #token: 5, token usage: 0.0{k}, "
        f"#queue-req: 4\n" for k in range(2, 4)))
    ingest([log.parent], db)
    with Store(db) as st:
        assert st.con.execute(
            "SELECT running_req, num_token, queue_req FROM batches WHERE path LIKE '%server.1.log' ORDER BY line"
        ).fetchall() == [(2, 5, 4), (3, 5, 4)]
