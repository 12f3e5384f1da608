"""Each rule's positive case and the negatives that make it hard (idle, slow, healthy, cut-off log, real leak)."""

from __future__ import annotations

from datetime import datetime

from conftest import LogWriter, analyze_folder, by_rule

from hangforensics.analysis.findings import run_rules
from hangforensics.analysis.rules import load_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

T = "2026-05-01 10:00:00"


def at(s: float) -> datetime:
    from datetime import timedelta

    return datetime.strptime(T, "%Y-%m-%d %H:%M:%S") + timedelta(seconds=s)


def test_every_required_rule_exists_with_metadata():
    rules = {r.id: r for r in load_rules()}
    for rid in ("stall-onset", "all-ranks-frozen", "first-rank-stopped", "busy-leak-report", "idle-memory-leak",
                "health-check-blind", "watchdog-kill"):
        r = rules[rid]
        assert r.description and r.references and r.false_positives and r.sql.strip()
    assert rules["stall-onset"].severity == "critical"
    assert rules["busy-leak-report"].severity == "info"


def test_stall_with_requests_arriving_is_a_stall_and_health_is_blind(tmp_path, log: LogWriter):
    log.startup().traffic(10, 120).posts(122, 600).probes(125, 600)
    f = by_rule(analyze_folder(log.write(tmp_path / "eng")))
    (stall,) = f["stall-onset"]
    assert stall["ts"] == at(120)
    assert stall["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert "requests arrived after the last batch" in stall["detail"]
    (blind,) = f["health-check-blind"]
    assert blind["ts"] == at(125) and blind["ts_end"] == at(595)
    assert blind["ranks"] == []
    assert {e["file"] for e in blind["evidence"]} == {"server.log"}


def test_idle_engine_whose_traffic_ended_is_not_stalled(tmp_path, log: LogWriter):
    # The last Decode line still says #running-req: 3 (decode lines are printed every 40 steps), then nothing.
    log.startup().traffic(10, 120)
    log.batch(121, running=3).access(121, "/v1/chat/completions", 200, "POST")
    log.probes(130, 1300)
    assert analyze_folder(log.write(tmp_path / "idle")) == []


def test_slow_step_followed_by_progress_is_not_a_stall(tmp_path, log: LogWriter):
    log.startup().traffic(10, 100)
    log.posts(101, 170).probes(105, 170)        # a 70 s chunked prefill: requests wait, then progress resumes
    log.batch(171, kind="Prefill", running=1, queue=2).traffic(172, 260)
    assert analyze_folder(log.write(tmp_path / "slow")) == []


def test_healthy_busy_engine_has_no_findings(tmp_path, log: LogWriter):
    log.startup().traffic(10, 400)
    assert analyze_folder(log.write(tmp_path / "busy")) == []


def test_log_cut_off_shortly_after_last_batch_is_not_judged(tmp_path, log: LogWriter):
    log.startup().traffic(10, 120).posts(122, 140)
    assert analyze_folder(log.write(tmp_path / "cut")) == []


def test_queued_work_in_last_batch_line_is_pending_work(tmp_path, log: LogWriter):
    # PD decode waiting on KV transfers: no new requests arrive, but the last line counts waiting work.
    log.startup().traffic(10, 60)
    log.batch(61, running=1, extra="pre-allocated usage: 0.05, #prealloc-req: 1, #transfer-req: 45, #retracted-req: 0, ")
    log.probes(65, 300)
    f = by_rule(analyze_folder(log.write(tmp_path / "pd")))
    assert [x["ts"] for x in f["stall-onset"]] == [at(61)]
    assert "45 waiting" in f["stall-onset"][0]["detail"] or "46 waiting" in f["stall-onset"][0]["detail"]


def test_watchdogs_in_the_same_second_mean_all_ranks_froze_at_last_progress(tmp_path, log: LogWriter):
    log.startup().traffic(10, 120).posts(122, 430).probes(125, 430)
    for r in (2, 0, 3, 1):
        log.watchdog(425, f"TP{r}")
    log.line(430, "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=None. It usually means one child failed.")
    f = by_rule(analyze_folder(log.write(tmp_path / "wd")))
    (frozen,) = f["all-ranks-frozen"]
    assert frozen["ts"] == frozen["ts_end"] == at(120)
    assert frozen["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    (kill,) = f["watchdog-kill"]
    assert kill["ts"] == at(425) and kill["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert "took the engine down" in kill["title"]
    (herring,) = f["busy-leak-report"]
    assert herring["ts"] == at(425) and len(herring["ranks"]) == 4
    assert "5944" in herring["detail"]                   # the shortfall is quoted
    assert "first-rank-stopped" not in f and "idle-memory-leak" not in f


def test_the_red_herring_quotes_one_decode_line_of_its_second_whatever_the_rows_order(tmp_path, log: LogWriter):
    # two Decode lines in the last second before the stall: the report quotes the first printed however the
    # rows are stored (in the order the files loaded, which a fleet's parallel load varies: the join had two
    # answers and gave one by that order)
    log.startup().traffic(10, 119).batch(120, running=5).batch(120, running=7).posts(122, 430)
    for r in range(4):
        log.watchdog(425, f"TP{r}")
    details = []
    with Store(":memory:") as st:
        ingest_paths(st, [log.write(tmp_path / "wd")], mode="auto")
        for order in ("ASC", "DESC"):
            st.con.execute(f"CREATE OR REPLACE TABLE t_batches AS SELECT * FROM t_batches ORDER BY line {order}")
            (herring,) = by_rule(run_rules(st))["busy-leak-report"]
            details.append(herring["detail"])
    assert all("held 3500 tokens for 5 running requests" in d for d in details), details


def test_watchdogs_fire_at_their_dump_not_at_the_timeout_line_py_spy_delays(tmp_path, log: LogWriter):
    # only watchdog dumps: all four fired at 425 (their debug info), but py-spy --native took 0-3 s per rank
    # before each timeout line; the freeze and the fire time are the dumps', not the timeout lines'
    for r, spy in ((2, 3), (0, 0), (3, 2), (1, 1)):
        log.watchdog(425, f"TP{r}", pyspy_s=spy)
    f = by_rule(analyze_folder(log.write(tmp_path / "spy")))
    (frozen,) = f["all-ranks-frozen"]
    assert frozen["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    (kill,) = f["watchdog-kill"]
    assert kill["ts"] == at(425) and kill["count"] == 1


def test_watchdogs_at_different_seconds_do_not_claim_a_freeze(tmp_path, log: LogWriter):
    log.startup().traffic(10, 120).posts(122, 600).probes(125, 600)
    log.watchdog(425, "TP0").watchdog(431, "TP1").watchdog(437, "TP2")
    f = by_rule(analyze_folder(log.write(tmp_path / "wd2")))
    assert "all-ranks-frozen" not in f and "first-rank-stopped" not in f
    assert len(f["watchdog-kill"]) == 1                   # one event: fires within 10 s of each other


def test_soft_watchdog_is_reported_as_soft(tmp_path, log: LogWriter):
    log.startup().traffic(10, 120).posts(122, 430)
    log.watchdog(425, "TP0", soft=True)
    (kill,) = by_rule(analyze_folder(log.write(tmp_path / "soft")))["watchdog-kill"]
    assert kill["title"].startswith("Soft")


def test_per_rank_batch_lines_staggered_name_the_first_rank(tmp_path):
    log = LogWriter(tp=4)
    log.startup().traffic(10, 100, ranks=("TP0", "TP1", "TP2", "TP3"))
    log.traffic(101, 106, ranks=("TP0", "TP1", "TP3"))      # TP2 stops 6 s before the others
    log.posts(108, 400).probes(110, 400, status=503)
    f = by_rule(analyze_folder(log.write(tmp_path / "stag")))
    (first,) = f["first-rank-stopped"]
    assert first["ranks"] == ["TP2"] and first["ts"] == at(100)
    assert "all-ranks-frozen" not in f
    assert f["stall-onset"][0]["ts"] == at(106)
    assert "health-check-blind" not in f                  # the probes answered 503


def test_per_rank_batch_lines_within_a_second_are_a_shared_freeze(tmp_path):
    log = LogWriter(tp=2)
    log.startup().traffic(10, 100, ranks=("TP0", "TP1")).batch(101, "TP1")
    log.posts(103, 300)
    f = by_rule(analyze_folder(log.write(tmp_path / "both")))
    (frozen,) = f["all-ranks-frozen"]
    assert (frozen["ts"], frozen["ts_end"]) == (at(100), at(101))


def test_rank_absent_from_nccl_timeouts_is_the_suspect(tmp_path, log: LogWriter):
    log.startup().traffic(10, 120).probes(130, 400, status=503)
    for r in (3, 1, 0):
        log.nccl_timeout(362, r)
    f = by_rule(analyze_folder(log.write(tmp_path / "nccl")))
    (first,) = f["first-rank-stopped"]
    assert first["ranks"] == ["TP2"] and first["ts"] is None
    assert "SeqNum=1558546" in first["detail"]
    assert f["stall-onset"][0]["ts"] == at(120)


def test_idle_leak_is_real_and_not_a_red_herring(tmp_path, log: LogWriter):
    log.startup().traffic(10, 120).probes(125, 200)
    log.idle_leak(201, "TP0").idle_leak(201, "TP1")
    log.line(202, "SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=None. It usually means one child failed.")
    f = by_rule(analyze_folder(log.write(tmp_path / "leak")))
    assert set(f) == {"idle-memory-leak"}
    (leak,) = f["idle-memory-leak"]
    assert leak["ranks"] == ["TP0", "TP1"] and leak["ts"] == at(201)
    assert "5566" in leak["detail"]                       # 295566 - 290000 unaccounted


def test_findings_point_at_file_and_line(tmp_path, log: LogWriter):
    log.startup().traffic(10, 120).posts(122, 600)
    folder = log.write(tmp_path / "eng")
    (stall,) = by_rule(analyze_folder(folder))["stall-onset"]
    lines = (folder / "server.log").read_text().splitlines()
    first = stall["evidence"][0]
    assert "batch" in lines[first["line"] - 1] and at(120).strftime("%H:%M:%S") in lines[first["line"] - 1]


def test_glog_lines_in_another_zone_are_aligned_to_the_log(tmp_path):
    # torch prints its glog lines in UTC while SGLang prints local time (here UTC+8)
    log = LogWriter(tp=4)
    log.startup().traffic(10, 120).probes(130, 400, status=503)
    utc = LogWriter(start="2026-05-01 02:00:00")
    for r in (3, 1, 0):
        utc.nccl_timeout(362, r)
    for line in utc.lines:
        log.raw(line)
    log.probes(401, 420, status=503)
    f = by_rule(analyze_folder(log.write(tmp_path / "utc")))
    (first,) = f["first-rank-stopped"]
    assert first["ranks"] == ["TP2"]
    from hangforensics.ingest.pipeline import ingest_paths
    from hangforensics.store import Store

    with Store(":memory:") as st:
        ingest_paths(st, [tmp_path / "utc"])
        row = st.query("SELECT ts, attrs FROM events WHERE kind = 'torch_nccl' LIMIT 1")[0]
        assert row["ts"].hour == 10 and '"clock_shift_s": 28800' in row["attrs"]


def _vllm_log(folder, hung: bool):
    lines = []
    for s in range(0, 120, 10):
        lines.append(f"(APIServer pid=3164) INFO 05-01 10:{s // 60:02d}:{s % 60:02d} [loggers.py:259] Engine 000: "
                     f"Avg prompt throughput: 512.3 tokens/s, Avg generation throughput: 845.0 tokens/s, "
                     f"Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 31.4%, Prefix cache hit rate: 12.0%")
    running = 12 if hung else 0
    lines.append(f"(APIServer pid=3164) INFO 05-01 10:02:00 [loggers.py:259] Engine 000: Avg prompt throughput: "
                 f"0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: {running} reqs, Waiting: 0 reqs, "
                 f"GPU KV cache usage: 31.4%, Prefix cache hit rate: 12.0%")
    for m in range(3, 9):
        if hung:
            lines.append(f"(EngineCore_DP0 pid=3300) WARNING 05-01 10:{m:02d}:50 [shm_broadcast.py:466] No available "
                         f"shared memory broadcast block found in 60 seconds. This typically happens when some "
                         f"processes are hanging or doing some time-consuming work.")
        lines.append(f'(APIServer pid=3164) INFO 05-01 10:{m:02d}:55 [logger.py:10] heartbeat ok')
    folder.mkdir(parents=True)
    (folder / "vllm.log").write_text("\n".join(lines) + "\n")
    return folder


def test_vllm_engine_stall_is_found_from_its_stats_and_shm_waits(tmp_path):
    f = by_rule(analyze_folder(_vllm_log(tmp_path / "vllm-hung", hung=True)))
    (stall,) = f["stall-onset"]
    assert stall["ts"].strftime("%H:%M:%S") == "10:01:50"
    assert "shared-memory broadcast" in stall["detail"] and "0 tokens/s" in stall["detail"]


def test_vllm_engine_that_went_quiet_is_idle(tmp_path):
    assert analyze_folder(_vllm_log(tmp_path / "vllm-idle", hung=False)) == []


def test_rules_run_together_give_each_rule_its_rows_and_a_broken_one_is_named(tmp_path, log: LogWriter):
    """The rules run in one statement: each finding is its own rule's, as run alone; a rule whose SQL fails
    makes the analysis fail naming it (the rules then run one by one)."""
    import dataclasses

    import pytest

    from hangforensics.analysis import findings as F
    from hangforensics.errors import RuleError
    from hangforensics.store import Store

    db = _watchdog_stall_db(tmp_path, log)
    with Store(db) as store:
        F.run_rules(store)
    rules = load_rules()
    with Store(db) as store:
        engines = [r["engine"] for r in store.query("SELECT DISTINCT engine FROM sources")]
        together = F._all_rule_rows(store, rules, engines)
        assert [r.id for r, _ in together] == [r.id for r in rules]
        for rule, rows in together:
            alone = F._rule_rows(store, rule, engines)
            assert sorted(map(repr, (sorted((k, v) for k, v in r.items() if v is not None) for r in rows))) == \
                sorted(map(repr, (sorted((k, v) for k, v in r.items() if v is not None) for r in alone))), rule.id
        assert any(rows for _, rows in together)
        broken = dataclasses.replace(rules[1], sql="SELECT engine, no_such_column FROM sources")
        with pytest.raises(RuleError, match=broken.id):
            F._all_rule_rows(store, [rules[0], broken, *rules[2:]], engines)


def test_a_model_built_beside_that_fails_stops_the_analysis_and_the_next_one_redoes_it(tmp_path, log: LogWriter,
                                                                                      monkeypatch):
    """The collectives' and stacks' models are built on a second connection while the progress models are: an
    error there is the analysis's error, no finding is written and the engines stay stale, and the next
    analysis gives what an analysis that never failed gives."""
    import pytest

    from hangforensics.analysis import findings as F
    from hangforensics.analysis.stacks import stackclasses
    from hangforensics.store import Store

    with Store(_watchdog_stall_db(tmp_path, log)) as store:
        first = F.run_rules(store)
        assert first
        store.con.execute("UPDATE engine_state SET data_version = data_version + 1")     # new data came
        stale = store.query("SELECT engine, data_version, analyzed_version FROM engine_state ORDER BY 1")
        kept = store.query("SELECT * FROM findings ORDER BY finding_id")

        def boom(*args, **kwargs):
            raise RuntimeError("rank classes failed")

        with monkeypatch.context() as m:
            m.setattr(stackclasses, "rebuild", boom)
            with pytest.raises(RuntimeError, match="rank classes failed"):
                F.run_rules(store)
        assert store.query("SELECT engine, data_version, analyzed_version FROM engine_state ORDER BY 1") == stale
        assert store.query("SELECT * FROM findings ORDER BY finding_id") == kept
        again = F.run_rules(store)
        assert [(f["rule"], f["title"], f["ts"]) for f in again] == [(f["rule"], f["title"], f["ts"]) for f in first]
        assert not store.query("SELECT * FROM engine_state WHERE analyzed_version < data_version")


def test_rules_that_read_only_what_every_connection_sees_run_beside_with_the_same_findings(tmp_path, log: LogWriter,
                                                                                        monkeypatch):
    """Rules that read neither a view the analysis reads once into its own temporary tables nor the signatures
    it has just written (not even through a view) run on a second connection: the findings are those of every
    rule run on the analysis's own connection."""
    import dataclasses

    from hangforensics.analysis import findings as F
    from hangforensics.store import Store, views

    rule = load_rules()[0]
    assert F._may_run_beside(dataclasses.replace(rule, sql="SELECT engine FROM stalls"))
    assert not F._may_run_beside(dataclasses.replace(rule, sql="select engine from watchdog_fires"))
    assert not F._may_run_beside(dataclasses.replace(rule, sql="SELECT * FROM x JOIN signature_matches s USING (engine)"))
    assert not F._may_run_beside(dataclasses.replace(      # a CTE that shadows the table it reads
        rule, sql="WITH signature_matches AS (SELECT * FROM signature_matches) SELECT * FROM signature_matches"))
    monkeypatch.setitem(views.VIEWS, "fires_again", "SELECT engine FROM watchdog_fires")
    assert not F._may_run_beside(dataclasses.replace(rule, sql="WITH a AS (SELECT * FROM fires_again) SELECT * FROM a"))
    monkeypatch.delitem(views.VIEWS, "fires_again")
    assert {r.id for r in load_rules() if not F._may_run_beside(r)} >= {"watchdog-kill", "known-signature"}

    with Store(_watchdog_stall_db(tmp_path, log)) as store:
        beside = F.run_rules(store)
        monkeypatch.setattr(F, "_may_run_beside", lambda rule: False)
        here = F.run_rules(store)
    assert len({f["rule"] for f in beside}) >= 3
    assert [dict(f, finding_id=None) for f in beside] == [dict(f, finding_id=None) for f in here]


def _watchdog_stall_db(tmp_path, log: LogWriter):
    """A database of one engine whose four ranks' watchdogs fire in a stall while requests arrive."""
    from hangforensics.ingest.pipeline import ingest_paths
    from hangforensics.store import Store

    log.startup().traffic(10, 120).posts(122, 430).probes(125, 430)
    for r in range(4):
        log.watchdog(425, f"TP{r}")
    folder = log.write(tmp_path / "e1")
    db = tmp_path / "f.duckdb"
    with Store(db) as store:
        ingest_paths(store, [folder])
    return db
