"""The fleet scan's costs grow with rows, not with engines: the analysis runs a fixed number of queries
whatever the number of engines judged; small files share transactions without changing what is stored;
the after-load passes skip only engines they have nothing to do for."""

from __future__ import annotations

import re
import shutil
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import DATA, LogWriter

from hangforensics.analysis.findings import run_rules
from hangforensics.analysis.summaries import incidents
from hangforensics.ingest import load, pipeline
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.report.html import render_incident, render_incidents
from hangforensics.store import Store

# One engine of each kind of evidence the families corpus holds: Flight Recorder, NCCL RAS, torch timeouts
# pasted, idle, vLLM, restart, a fleet-wide signature, a torch job, a stall with stacks.
KINDS = ["ams3-llama70b-fr-07", "dal5-llama70b-ras-41", "fra5-mixtral-tna-15", "hkg2-llama8b-idle-19",
         "lhr4-llama70b-vhb-10", "icn1-glm45-rsw-02", "pdx3-llama70b-fcg-22", "iad3-sft-mixtral-tnm-04",
         "bos1-llama8b-tnd-29", "waw1-qwen72b-fr-35", "sjc3-qwen32b-wsr-05", "ord2-llama70b-wgf-12"]


def _fleet(tmp: Path, copies: int) -> Path:
    fleet = tmp / f"fleet{copies}"
    for k in range(copies):
        for name in KINDS:
            shutil.copytree(DATA / "families" / "fleet" / name, fleet / f"c{k}-{name}")
        _restarted_twice().write(fleet / f"c{k}-restarted-twice")
    return fleet


def _restarted_twice() -> LogWriter:
    """An engine that stalls, is restarted, and stalls again: an incident in each of its two runs."""
    log = LogWriter(tp=2)
    for a in (0, 2000):
        log.startup(a).traffic(a + 10, a + 200).posts(a + 202, a + 560).probes(a + 205, a + 560)
        for r in range(2):
            log.watchdog(a + 520, f"TP{r}")
    return log


class _Counting:
    """A DuckDB connection that counts the statements run through it.  A statement reading a Python variable
    (DuckDB's replacement scan looks in the calling frame) runs in a frame holding the caller's variables."""

    def __init__(self, con) -> None:
        self._con, self.n = con, 0

    def _run(self, method: str, a, k):
        self.n += 1
        caller = sys._getframe(2)
        scope = {**caller.f_globals, **caller.f_locals, "_hf_call": getattr(self._con, method), "_hf_a": a, "_hf_k": k}
        return eval("_hf_call(*_hf_a, **_hf_k)", scope, scope)

    def execute(self, *a, **k):
        return self._run("execute", a, k)

    def sql(self, *a, **k):
        return self._run("sql", a, k)

    def __getattr__(self, name):
        return getattr(self._con, name)


def _analysis_statements(tmp: Path, copies: int) -> tuple[Path, int, int]:
    """(the database, statements run by the analysis, findings) of a fleet holding ``copies`` of every kind of
    engine."""
    db = tmp / f"db{copies}.duckdb"
    with Store(db) as st:
        ingest_paths(st, [_fleet(tmp, copies)], mode="fleet")
        engines = [r["engine"] for r in st.query("SELECT DISTINCT engine FROM sources ORDER BY 1")]
        counting = _Counting(st.con)
        st.con = counting
        found = run_rules(st, engines=engines)
        with st.transaction():
            incidents.rebuild(st, engines, 1)
        st.con = counting._con
        return db, counting.n, len(found)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> dict[int, tuple[Path, int, int]]:
    """The fleets of one and of three copies of every kind, ingested and analysed (statements counted)."""
    tmp = tmp_path_factory.mktemp("setwise")
    return {copies: _analysis_statements(tmp, copies) for copies in (1, 3)}


def test_the_analysis_runs_as_many_statements_for_three_times_the_engines(analysed):
    (_, one, found_one), (_, three, found_three) = analysed[1], analysed[3]
    assert found_one > len(KINDS) // 2 and found_three == 3 * found_one      # the engines are judged alike
    # a query per engine would add len(KINDS) * 2 statements or more for each one
    assert three == one, f"{one} statements for {len(KINDS)} engines, {three} for {3 * len(KINDS)}"


def _without_time(html: str) -> str:
    return re.sub(r"generated [^<]*", "generated", html)


def test_incident_reports_written_together_read_a_fixed_number_of_statements(analysed, monkeypatch):
    from hangforensics.report import html as html_mod

    statements, reports = {}, {}
    for copies, (db, _, _) in analysed.items():
        with Store(db) as st:
            incs = st.query("SELECT * FROM incidents ORDER BY onset DESC NULLS LAST, engine")
            counting = _Counting(st.con)
            st.con = counting
            together = list(render_incidents(st, incs))
            st.con = counting._con
            statements[copies], reports[copies] = counting.n, len(together)
            if copies == 3:     # engines alike but for their names: each report holds its own engine's rows
                assert sum(i["engine"] == "c1-restarted-twice" for i in incs) == 2      # one per run
                for inc, html in together:
                    assert inc["engine"] in html
                    assert _without_time(html) == _without_time(render_incident(st, inc)), inc["incident_id"]
                # read in batches of a few reports (a fleet of thousands of incidents): the same pages
                monkeypatch.setattr(html_mod, "REPORT_BATCH", 5)
                batched = [(i["incident_id"], _without_time(h)) for i, h in render_incidents(st, incs)]
                assert batched == [(i["incident_id"], _without_time(h)) for i, h in together]
    assert reports[1] > len(KINDS) // 2 and reports[3] == 3 * reports[1]
    # one engine's report alone reads some 20; one each would add that much per report
    assert statements[3] == statements[1] < 40, statements


def _tables(db: Path) -> dict[str, list[tuple]]:
    with Store(db) as st:
        names = [r["name"] for r in st.query(
            "SELECT table_name AS name FROM duckdb_tables() WHERE table_name NOT IN ('meta', 'scans')")]
        skip = {"sources": "abs_path, ingested_at, mtime"}
        return {t: st.con.execute(f"SELECT * EXCLUDE ({skip[t]}) FROM {t} ORDER BY ALL" if t in skip
                                  else f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in names}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    # fragments (dumps in parts joined across files, envelopes) and families (clocks, Flight Recorder)
    folder = tmp_path / "corpus"
    for name in KINDS[:6]:
        shutil.copytree(DATA / "families" / "fleet" / name, folder / name)
    shutil.copytree(DATA / "fragments", folder / "fragments")
    shutil.copytree(DATA / "fragments" / "three_parts", folder / "three_parts")
    return folder


def test_small_files_loaded_several_to_a_transaction_store_what_one_file_each_stores(corpus: Path, tmp_path: Path,
                                                                                        monkeypatch):
    grouped = tmp_path / "grouped.duckdb"
    with Store(grouped) as st:
        ingest_paths(st, [corpus], mode="fleet")
        files = st.scalar("SELECT count(*) FROM sources")
        versions = dict(st.con.execute("SELECT engine, data_version FROM engine_state").fetchall())
        per_engine = dict(st.con.execute("SELECT engine, count(*) FROM sources GROUP BY engine").fetchall())
    assert files > 20 and versions == per_engine           # one bump per file, as one transaction per file did
    monkeypatch.setattr(load, "GROUP_FILES", 1)            # every file its own transaction
    single = tmp_path / "single.duckdb"
    with Store(single) as st:
        ingest_paths(st, [corpus], mode="fleet")
    assert _tables(grouped) == _tables(single)


def test_a_groups_rows_are_inserted_as_it_goes_and_stored_as_one_transaction_per_file_stores(
        corpus: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(load, "INSERT_BYTES", 1)               # the rows of every file inserted at once
    monkeypatch.setattr(load, "GROUP_BYTES", 1 << 40)          # one transaction for the whole corpus
    monkeypatch.setattr(load, "GROUP_FILES", 1 << 20)
    calls = {"insert": 0, "commit": 0}
    real_insert, real_commit = load.LoadGroup._insert_gathered, load.LoadGroup.commit

    def insert(self):
        calls["insert"] += bool(self.rows)
        return real_insert(self)

    def commit(self):
        calls["commit"] += self.open
        return real_commit(self)

    monkeypatch.setattr(load.LoadGroup, "_insert_gathered", insert)
    monkeypatch.setattr(load.LoadGroup, "commit", commit)
    grouped = tmp_path / "grouped.duckdb"
    with Store(grouped) as st:
        ingest_paths(st, [corpus], mode="fleet")
        files = st.scalar("SELECT count(*) FROM sources")
    assert calls["commit"] <= 3 and calls["insert"] > files // 2        # inserted file by file, committed once
    monkeypatch.setattr(load, "GROUP_FILES", 1)
    single = tmp_path / "single.duckdb"
    with Store(single) as st:
        ingest_paths(st, [corpus], mode="fleet")
    assert _tables(grouped) == _tables(single)


@pytest.mark.parametrize("insert_bytes", [None, 1])
def test_a_file_that_fails_to_read_leaves_the_rest_of_its_group_loaded(corpus: Path, tmp_path: Path, monkeypatch,
                                                                       insert_bytes):
    if insert_bytes is not None:                               # (the group's rows inserted before the failure)
        monkeypatch.setattr(load, "INSERT_BYTES", insert_bytes)
    from hangforensics.errors import InputError

    real = pipeline.parse_file
    bad = sorted(p for p in corpus.rglob("*") if p.is_file())[3]

    def failing(job):
        if job.abs_path == bad:
            raise InputError(f"{bad.name}: damaged")
        return (yield from real(job))

    monkeypatch.setattr(pipeline, "parse_file", failing)
    with Store(tmp_path / "f.duckdb") as st:
        ingest_paths(st, [corpus], mode="fleet")
        status = dict(st.con.execute("SELECT abs_path, status FROM sources").fetchall())
        files = sum(1 for p in corpus.rglob("*") if p.is_file())
    assert status[str(bad)].startswith("error:") and "damaged" in status[str(bad)]
    assert sum(s == "ok" for s in status.values()) >= files - 2     # (a duplicate may be noted as such)
    assert len(status) == files


def test_the_after_load_passes_skip_only_engines_with_nothing_to_do(corpus: Path, tmp_path: Path, monkeypatch):
    found = tmp_path / "found.duckdb"
    with Store(found) as st:
        ingest_paths(st, [corpus], mode="fleet")
    for chain in ("_STACK_PASSES", "_CLOCK_PASSES"):
        monkeypatch.setattr(pipeline, chain, [(step, "SELECT engine FROM sources")
                                              for step, _ in getattr(pipeline, chain)])
    forced = tmp_path / "forced.duckdb"
    with Store(forced) as st:
        ingest_paths(st, [corpus], mode="fleet")
    assert _tables(found) == _tables(forced)
    with Store(found) as st:          # the corpus does give the passes work: joins, clocks, dated lines
        assert st.scalar("SELECT count(*) FROM stack_joins") > 0


def test_views_read_once_per_analysis_give_what_reading_the_views_gives(tmp_path: Path, monkeypatch):
    """The costly views an analysis reads several times are computed once into temporary tables of their
    names: the findings and every derived table are those of reading the views, and the views are themselves
    again after it (a later ingest shows in them)."""
    from hangforensics.analysis import findings

    fleet = tmp_path / "fleet"
    for name in KINDS:          # watchdog firings (timeout lines and other outputs), torch NCCL collectives
        shutil.copytree(DATA / "families" / "fleet" / name, fleet / name)
    _restarted_twice().write(fleet / "restarted-twice")
    dbs = {}
    for mode, views in (("once", findings.READ_ONCE), ("views", ())):
        monkeypatch.setattr(findings, "READ_ONCE", views)
        dbs[mode] = tmp_path / f"{mode}.duckdb"
        with Store(dbs[mode]) as st:
            ingest_paths(st, [fleet], mode="fleet")
            run_rules(st)
            if views:
                assert st.scalar("SELECT count(*) FROM watchdog_fires") > 0
                assert st.scalar("SELECT count(*) FROM collectives") > 0
                assert st.scalar("SELECT count(*) FROM duckdb_tables() WHERE temporary") == 0
    assert _tables(dbs["once"]) == _tables(dbs["views"])
    with Store(dbs["once"]) as st:              # the view again: new evidence shows in it
        before = st.scalar("SELECT count(*) FROM watchdog_fires")
        log = LogWriter(tp=2)
        log.startup(0).traffic(10, 200)
        for r in range(2):
            log.watchdog(520, f"TP{r}")
        log.write(tmp_path / "more" / "late-engine")
        ingest_paths(st, [tmp_path / "more"], mode="fleet")
        assert st.scalar("SELECT count(*) FROM watchdog_fires") > before


def test_views_read_once_read_no_table_an_analysis_writes():
    """A view computed once at the start of an analysis must not read what the analysis then writes."""
    from hangforensics.analysis import findings
    from hangforensics.store.schema import LOADED_TABLES
    from hangforensics.store.views import VIEWS

    def reads(view: str, seen: set[str]) -> set[str]:
        sql = VIEWS[view]
        ctes = set(re.findall(r"\b([a-z_0-9]+)\s+AS\s*\(", sql))
        names = set(re.findall(r"\b(?:FROM|JOIN)\s+([a-z_0-9]+)", sql)) - ctes
        out = set()
        for n in names - seen:
            out |= reads(n, seen | {n}) if n in VIEWS else {n}
        return out

    evidence = set(LOADED_TABLES) | {"sources"}     # written by the ingest (and its passes) only
    for view in findings.READ_ONCE:
        tables = reads(view, {view})
        assert tables and tables <= evidence, tables


def test_the_tensor_parallel_sizes_the_analysis_reads_are_engine_facts(tmp_path: Path):
    """The analysis reads only the tensor-parallel size of ``engine_facts`` (``TP_SIZES``, without the view's
    searches of every message): the same size for every engine (SGLang's server_args, vLLM's start line),
    none where the view has none."""
    from hangforensics.store.views import TP_SIZES

    fleet = tmp_path / "fleet"
    shutil.copytree(DATA / "variants" / "fleet", fleet)
    for name in ("v1-hung", "v0-idle", "v1-dp-one-stops"):
        shutil.copytree(DATA / "vllm" / name, fleet / name)
    shutil.copytree(DATA / "families" / "fleet" / KINDS[0], fleet / KINDS[0])     # no size logged
    with Store(tmp_path / "db.duckdb") as st:
        ingest_paths(st, [fleet], mode="fleet")
        engines = [r["engine"] for r in st.query("SELECT DISTINCT engine FROM sources ORDER BY 1")]
        view = {r["engine"]: r["tp_size"] for r in st.query("SELECT engine, tp_size FROM engine_facts")}
        read = {r["engine"]: r["tp_size"] for r in st.query(TP_SIZES, [engines])}
    sizes = {e: v for e, v in view.items() if v is not None}
    assert len(sizes) >= 12 and len(set(sizes.values())) > 1 and view[KINDS[0]] is None
    assert {e: read.get(e) for e in engines} == {e: view.get(e) for e in engines}


def test_probes_of_one_second_come_in_the_order_they_were_logged(tmp_path: Path):
    """A timeline's health probes of one second in the order of their files and lines, not in the order the
    rows were stored (which a fleet's parallel load varies): here the later file is loaded first."""
    from hangforensics.report.data import Window, timeline_rows

    late, early = LogWriter(tp=2), LogWriter(tp=2)
    late.startup(0).probes(10, 50, status=200)
    early.probes(10, 50, status=503)
    with Store(tmp_path / "db.duckdb") as st:
        ingest_paths(st, [late.write(tmp_path / "a" / "e1", "z-server.log").parent], mode="fleet")
        ingest_paths(st, [early.write(tmp_path / "b" / "e1", "a-server.log").parent], mode="fleet")
        _, probes = timeline_rows(st, [Window("e1", late.t0, late.t0 + timedelta(seconds=60), 1.0)])
    statuses = [(r["ts"], r["status"]) for r in probes[0]]
    assert len(statuses) == 10 and len({ts for ts, _ in statuses}) == 5
    assert statuses == sorted(statuses, key=lambda r: (r[0], r[1] != 503))   # a-server.log's before z-server.log's
