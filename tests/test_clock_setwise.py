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


def _node_log(start: str, lines: int = 3) -> str:
    # a node's log: its server arguments, and its ranks' milestones from ``start`` (HH:MM:SS) on
    out = [f"[2026-03-02 {start}] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B', tp_size=16)"]
    out += [f"[2026-03-02 {start} TP{r}] Init torch distributed ends. mem usage=0.7 GB" for r in range(lines)]
    return "\n".join(out) + "\n"


def test_of_two_nodes_with_equal_claims_the_first_by_name_is_the_clock_the_other_is_set_to(tmp_path: Path):
    # neither node prints access lines, both print their server arguments once: equal claims.  node-b's clock
    # is 7 s behind node-a's; whichever order the files are read in, node-a is the main node
    offsets = []
    for order in (("node-a", "node-b"), ("node-b", "node-a")):
        fleet = tmp_path / "-".join(order) / "fleet"
        for name in order:              # (written, and so read and numbered, in this order)
            (fleet / "ord9-qwen72b-2node-01").mkdir(parents=True, exist_ok=True)
            (fleet / "ord9-qwen72b-2node-01" / f"{name}.log").write_text(
                _node_log("10:00:07" if name == "node-a" else "10:00:00"))
        with Store(tmp_path / f"{order[0]}.duckdb") as st:
            ingest_paths(st, [fleet], mode="fleet")
            offsets.append(st.con.execute(
                "SELECT node, clock_offset_s FROM sources WHERE kind = 'server_log' ORDER BY node").fetchall())
    assert offsets[0] == offsets[1] == [("node-a.log", 0.0), ("node-b.log", 7.0)]


def test_the_node_clocks_of_three_times_the_engines_take_as_many_statements(tmp_path: Path, monkeypatch):
    from test_setwise import _Counting

    monkeypatch.setattr(pipeline, "after_load", lambda store, engines: None)
    counts = []
    for engines in (2, 6):
        fleet = tmp_path / f"fleet{engines}"
        for k in range(engines):
            for name, start in (("node-a", "10:00:07"), ("node-b", "10:00:00")):
                (fleet / f"ord9-qwen72b-2node-{k:02d}").mkdir(parents=True, exist_ok=True)
                (fleet / f"ord9-qwen72b-2node-{k:02d}" / f"{name}.log").write_text(_node_log(start))
        with Store(tmp_path / f"{engines}.duckdb") as st:
            ingest_paths(st, [fleet], mode="fleet")
            names = [r[0] for r in st.con.execute("SELECT DISTINCT engine FROM sources ORDER BY 1").fetchall()]
            st.con = counting = _Counting(st.con)
            offsets = align_engine_clocks_all(st, names)
            st.con = counting._con
        assert all(o == {"node-a.log": 0.0, "node-b.log": 7.0} for o in offsets.values()) and len(offsets) == engines
        counts.append(counting.n)
    assert counts[0] == counts[1], f"{counts[0]} statements for 2 engines, {counts[1]} for 6"


def test_a_node_that_becomes_the_main_one_keeps_no_offset_of_before(tmp_path: Path):
    # node-a prints more access lines at first (the main node; node-b is 7 s behind it); node-b's log then grows
    # with more: it is the main node, at 0, and node-a is 7 s ahead of it
    engine = tmp_path / "fleet" / "ord9-qwen72b-2node-01"
    engine.mkdir(parents=True)
    access = '[2026-03-02 10:05:00] INFO:     10.1.2.3:4000 - "GET /health HTTP/1.1" 200 OK\n'
    (engine / "node-a.log").write_text(_node_log("10:00:07") + access)
    (engine / "node-b.log").write_text(_node_log("10:00:00"))
    with Store(tmp_path / "db.duckdb") as st:
        query = "SELECT node, clock_offset_s FROM sources WHERE kind = 'server_log' ORDER BY node"
        ingest_paths(st, [tmp_path / "fleet"], mode="fleet", hold_live_tail=False)
        assert st.con.execute(query).fetchall() == [("node-a.log", 0.0), ("node-b.log", 7.0)]
        with (engine / "node-b.log").open("a") as f:
            f.write(access * 3)
        ingest_paths(st, [tmp_path / "fleet"], mode="fleet", hold_live_tail=False)
        assert st.con.execute(query).fetchall() == [("node-a.log", -7.0), ("node-b.log", 0.0)]
