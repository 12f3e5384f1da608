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
