"""The node clocks of many engines aligned at once are those aligned engine by engine."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import DATA

from hangforensics.ingest import pipeline
from hangforensics.ingest.clock import align_engine_clocks, align_engine_clocks_all
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

# logs of several nodes: with and without milestones, a main node by its access lines, and by nothing
ENGINES = {"families": ["fra4-dsv3-wsr-17", "gru1-qwen72b-tnd-50", "sea2-gptoss-tnd-11", "hkg2-llama8b-idle-19"],
           "variants": ["sea1-dsv3-2node-03"]}


def _offsets(st: Store) -> list[tuple]:
    return st.con.execute("SELECT engine, path, node, clock_offset_s FROM sources ORDER BY ALL").fetchall()


def test_node_clocks_aligned_together_or_one_engine_at_a_time_agree(tmp_path: Path, monkeypatch):
    for corpus, names in ENGINES.items():
        for name in names:
            shutil.copytree(DATA / corpus / "fleet" / name, tmp_path / "fleet" / f"{corpus}-{name}")
    monkeypatch.setattr(pipeline, "after_load", lambda store, engines: None)
    with Store(tmp_path / "a.duckdb") as st:
        ingest_paths(st, [tmp_path / "fleet"], mode="fleet")
        engines = [r[0] for r in st.con.execute("SELECT DISTINCT engine FROM sources ORDER BY 1").fetchall()]
    shutil.copy(tmp_path / "a.duckdb", tmp_path / "b.duckdb")
    with Store(tmp_path / "a.duckdb") as st:
        one = {e: align_engine_clocks(st, e) for e in engines}
        one_rows = _offsets(st)
    with Store(tmp_path / "b.duckdb") as st:
        together = align_engine_clocks_all(st, engines)
        together_rows = _offsets(st)
    assert together == one and together_rows == one_rows
    assert any(v for offsets in one.values() for v in offsets.values())          # a node whose clock is off
    assert sum(1 for offsets in one.values() if offsets) >= 3
