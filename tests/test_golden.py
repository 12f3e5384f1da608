"""Golden test: every view of the test corpora, re-ingested and analysed, equals its snapshot exactly.

The snapshots (tests/data/golden/*.parquet) were written by tests/data/golden/generate.py before the
fast ingest path existed; any change of parsing shows up here as the first differing row of a view.
"""

from __future__ import annotations

import importlib.util
from functools import cache

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DATA

from hangforensics.ingest import parallel, pipeline

GOLDEN = DATA / "golden"
_spec = importlib.util.spec_from_file_location("golden_generate", GOLDEN / "generate.py")
assert _spec is not None and _spec.loader is not None
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


@cache
def golden(view: str) -> pa.Table:
    return pq.read_table(GOLDEN / f"{view}.parquet")


def expected(corpus: str) -> dict[str, pa.Table]:
    out = {}
    for path in sorted(GOLDEN.glob("*.parquet")):
        t = golden(path.stem)
        rows = t.filter(pa.compute.equal(t.column("corpus"), corpus)).drop_columns(["corpus"])
        out[path.stem] = rows.combine_chunks()
    return out


def first_difference(got: pa.Table, want: pa.Table) -> str:
    if got.schema != want.schema:
        return f"schema differs:\n got  {got.schema}\n want {want.schema}"
    if got.num_rows != want.num_rows:
        return f"{got.num_rows} rows, want {want.num_rows}"
    for i, (a, b) in enumerate(zip(got.to_pylist(), want.to_pylist(), strict=True)):
        if a != b:
            cols = [k for k in a if a[k] != b[k]]
            return f"row {i} differs in {cols}:\n got  {[a[k] for k in cols]}\n want {[b[k] for k in cols]}"
    return "equal"


def assert_same(got: dict[str, pa.Table], want: dict[str, pa.Table]) -> None:
    assert sorted(got) == sorted(want), "the set of views changed: regenerate the golden snapshots on purpose"
    bad = {v: first_difference(got[v].combine_chunks(), want[v]) for v in want
           if not got[v].combine_chunks().equals(want[v], check_metadata=False)}
    assert not bad, "\n".join(f"{v}: {d}" for v, d in bad.items())


def test_golden_fixtures_cover_the_hot_path() -> None:
    """The snapshots hold what the fast path must keep: batch and access rows of every corpus family,
    events, stacks, unparsed lines and findings."""
    for view, least in (("batches", 50000), ("http_requests", 20000), ("events", 1000), ("stacks", 100),
                        ("unparsed", 100), ("findings", 50), ("sources", 100)):
        assert golden(view).num_rows >= least, view
    corpora = set(golden("sources").column("corpus").to_pylist())
    assert corpora == set(gen.CORPORA)


@pytest.mark.parametrize("corpus", list(gen.CORPORA))
def test_views_equal_golden(corpus: str) -> None:
    assert_same(gen.snapshot_corpus(corpus), expected(corpus))


@pytest.mark.parametrize("corpus", list(gen.CORPORA))
def test_scanner_views_equal_golden(corpus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every plain log read through the compiled scanner (sglang_fast), however small, gives the same views."""
    monkeypatch.setenv("HANGFORENSICS_SCAN_MIN_BYTES", "0")
    assert_same(gen.snapshot_corpus(corpus), expected(corpus))


@pytest.mark.parametrize("scan_min", ["0", str(1 << 40)])
def test_split_log_equals_golden(monkeypatch: pytest.MonkeyPatch, scan_min: str) -> None:
    """The generated log cut into byte ranges parsed by worker processes (with the scanner and without)
    gives the same views as one process reading it whole."""
    monkeypatch.setenv("HANGFORENSICS_SCAN_MIN_BYTES", scan_min)
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 1024)
    assert_same(gen.snapshot_corpus("big", jobs=2), expected("big"))
