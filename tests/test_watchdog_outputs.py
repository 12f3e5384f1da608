"""Issue 26: a scheduler watchdog firing is recognised from any of its outputs (debug-info block, batch record,
py-spy record or its failure) when its timeout line is not in the evidence, as one firing per rank and dump;
and every release's wording of the idle leak check, printed without a log prefix, is one leak report."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from conftest import LogWriter, by_rule

from hangforensics.analysis.findings import run_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store


def at(s: float) -> datetime:
    return LogWriter().t0 + timedelta(seconds=s)


def run(folder: Path, *queries: str) -> tuple[dict[str, list[dict]], list[list[dict[str, Any]]]]:
    """Findings by rule, and the rows of each query, for one folder ingested as one engine."""
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        findings = run_rules(st)
        return by_rule(findings), [st.query(q) for q in queries]


FIRES = "SELECT rank, fired_at, attrs FROM watchdog_fires ORDER BY fired_at NULLS LAST, rank"


def debug_info(log: LogWriter, s: float, rank: str) -> LogWriter:
    """A 0.5.10 watchdog dump's debug-info block alone (its py-spy record and timeout line cut off)."""
    log.line(s, "Scheduler debug info:", rank)
    log.raw("scheduler.cur_batch.batch_size()=6")
    log.raw("scheduler.cur_batch.reqs=[Req(rid=abc, input_ids=[1, 2, 3], output_ids=[4, 5])]")
    return log.raw("")


def batch_record(log: LogWriter, s: float, rank: str) -> LogWriter:
    """0.4.6's one-line watchdog batch record."""
    return log.line(s, "self.cur_batch.batch_size()=1, self.cur_batch.reqs=[Req(rid=713801, input_ids=[0, 671], "
                       "output_ids=[11111])], self.token_to_kv_pool_allocator.available_size()=191715, "
                       "self.tree_cache.evictable_size()=0, ", rank)


def pyspy_record(log: LogWriter, s: float, rank: str, pid: int = 231813, title: str | None = None) -> LogWriter:
    log.line(s, f"Pyspy dump for PID {pid}:", rank)
    log.raw(f"Process {pid}: {title or 'sglang::scheduler_' + rank.replace(' ', '_')}")
    log.raw("Python v3.10.12 (/usr/bin/python3.10)")
    log.raw("")
    log.raw(f'Thread {pid} (active): "MainThread"')
    log.raw("    draft (eagle_worker.py:397)")
    return log.raw("    run_batch (scheduler.py:1573)")


# -- watchdog firings read from their other outputs ------------------------------------------------------------


def test_debug_info_blocks_alone_are_firings_feeding_kill_freeze_and_stall(tmp_path, log: LogWriter):
    log.startup().traffic(10, 120).posts(122, 430)
    for r in (2, 0, 3, 1):
        debug_info(log, 425, f"TP{r}")
    f, (fires,) = run(log.write(tmp_path / "e"), FIRES)
    assert [r["rank"] for r in fires] == ["TP0", "TP1", "TP2", "TP3"]
    assert all(json.loads(r["attrs"])["inferred_from"] == "debug info block" for r in fires)
    assert all(json.loads(r["attrs"])["timeout"] == 300 for r in fires)       # from the server args
    (kill,) = f["watchdog-kill"]
    assert kill["ranks"] == ["TP0", "TP1", "TP2", "TP3"] and kill["ts"] == at(425) and kill["count"] == 1
    assert "debug info block" in kill["detail"] and "took the engine down" not in kill["title"]
    (frozen,) = f["all-ranks-frozen"]
    assert frozen["ranks"] == ["TP0", "TP1", "TP2", "TP3"] and frozen["ts"] == at(120)
    (stall,) = f["stall-onset"]
    assert stall["ts"] == at(120)


def test_outputs_of_one_dump_are_one_firing_per_rank(tmp_path, log: LogWriter):
    # 0.4.6: batch records of two ranks in one second, then one rank's py-spy record, no timeout line
    batch_record(log, 0, "DP3 TP6")
    batch_record(log, 0, "DP2 TP5")
    pyspy_record(log, 0, "DP3 TP6")
    log.line(1, "Pyspy failed to dump PID 231814. Error: /bin/sh: 1: py-spy: not found", "DP3 TP6")
    f, (fires,) = run(log.write(tmp_path / "e"), FIRES)
    assert [(r["rank"], json.loads(r["attrs"])["inferred_from"]) for r in fires] == [
        ("DP2 TP5", "batch record"), ("DP3 TP6", "batch record and py-spy failure line and py-spy record")]
    (kill,) = f["watchdog-kill"]
    assert kill["ranks"] == ["DP2 TP5", "DP3 TP6"] and kill["count"] == 1 and kill["ts"] == at(0)
    (frozen,) = f["all-ranks-frozen"]
    assert frozen["ranks"] == ["DP2 TP5", "DP3 TP6"]
    assert frozen["ts"] is None and frozen["ts_basis"] == "inferred"        # no timeout: onset unknown
    (stall,) = f["stall-onset"]
    assert stall["ts"] is None and stall["ts_basis"] == "inferred" and "not known" in stall["detail"]


def test_outputs_beside_their_timeout_line_are_that_firing_whatever_the_order(tmp_path, log: LogWriter):
    # 0.4.8 printed the timeout line first, then the batch record; 0.5.10 the dump first, then the line
    log.line(0, "Watchdog timeout (self.watchdog_timeout=300)", "TP3")
    batch_record(log, 0, "TP3")
    debug_info(log, 5, "TP1")
    log.line(8, "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "TP1")
    f, (fires,) = run(log.write(tmp_path / "e"), FIRES)
    assert [(r["rank"], r["fired_at"]) for r in fires] == [("TP3", at(0)), ("TP1", at(5))]
    assert not any("inferred_from" in json.loads(r["attrs"]) for r in fires)
    (kill,) = f["watchdog-kill"]
    assert kill["count"] == 1 and "No timeout line" not in kill["detail"]


def test_a_dump_right_after_the_ranks_progress_is_not_its_watchdog(tmp_path, log: LogWriter):
    # the watchdog fires only after watchdog_timeout without progress: a py-spy record 2 s after the rank's own
    # batch line is something else (the engine kept serving)
    log.startup().traffic(10, 60)
    pyspy_record(log, 62, "TP0")
    log.traffic(63, 80)
    f, (fires,) = run(log.write(tmp_path / "e"), FIRES)
    assert fires == [] and "watchdog-kill" not in f and "stall-onset" not in f


def test_a_rankless_dump_of_another_process_is_not_a_scheduler_watchdog(tmp_path, log: LogWriter):
    # the DataParallelController's own soft watchdog dumps its own process: no rank prefix, no scheduler title
    log.startup().traffic(10, 60, ranks=("DP12 TP12",))
    pyspy_record(log, 61, "", pid=10366, title="sglang::data_parallel_controller")
    f, (fires,) = run(log.write(tmp_path / "e"), FIRES)
    assert fires == [] and "watchdog-kill" not in f


def test_a_pyspy_record_copied_without_its_prefix_is_an_undated_firing(tmp_path):
    folder = tmp_path / "e"
    folder.mkdir()
    (folder / "comment.md").write_text(
        "After the downgrade I got:\n\n```bash\n\nPyspy dump for PID 30960:\nProcess 30960: sglang::scheduler_DP2_TP0\n"
        "Python v3.12.9 (/usr/bin/python3.12)\n\n"
        'Thread 30960 (idle): "MainThread"\n    wait (threading.py:355)\n    get (queue.py:171)\n'
        "    resolve_batch_result (tp_worker_overlap_thread.py:172)\n```\n")
    f, (fires, un, src) = run(folder, FIRES, "SELECT text FROM unparsed", "SELECT kind FROM sources")
    assert src == [{"kind": "pyspy_dump"}]
    assert [r["text"] for r in un if "Pyspy" in r["text"]] == []           # the header line is read
    assert [(r["rank"], r["fired_at"]) for r in fires] == [("DP2 TP0", None)]
    (kill,) = f["watchdog-kill"]
    assert kill["ranks"] == ["DP2 TP0"] and kill["ts"] is None
    (stall,) = f["stall-onset"]
    assert stall["ts"] is None and stall["ranks"] == ["DP2 TP0"]


def test_a_prefixless_0523_record_may_be_the_main_process_crash_dump(tmp_path):
    # 0.5.23's main process dumps every scheduler on SIGQUIT with the same header: not a watchdog firing
    folder = tmp_path / "e"
    folder.mkdir()
    (folder / "dump.txt").write_text(
        "Pyspy dump for PID 4242 (py-spy dump --native --pid 4242):\nProcess 4242: sglang::scheduler_TP0\n"
        "Python v3.12.3 (/usr/bin/python3.12)\n\n"
        'Thread 4242 (active): "MainThread"\n    forward (sglang/srt/models/llama.py:400)\n')
    f, (fires, un) = run(folder, FIRES, "SELECT text FROM unparsed")
    assert fires == [] and "watchdog-kill" not in f
    assert un == []


def test_one_inferred_firing_beside_timeout_lines_takes_their_timeout(tmp_path, log: LogWriter):
    # DP0 TP3's timeout line is beyond the cut; DP0 TP2's and DP1 TP5's are there
    for rank in ("DP0 TP2", "DP1 TP5"):
        batch_record(log, 0, rank)
        log.line(0, "Watchdog timeout (self.watchdog_timeout=300)", rank)
    batch_record(log, 0, "DP0 TP3")
    f, (fires,) = run(log.write(tmp_path / "e"), FIRES)
    assert len(fires) == 3
    (kill,) = f["watchdog-kill"]
    assert kill["ranks"] == ["DP0 TP2", "DP0 TP3", "DP1 TP5"] and "took the engine down" in kill["title"]
    (frozen,) = f["all-ranks-frozen"]
    assert frozen["ts"] == at(-300) and frozen["ts_basis"] == "inferred"


# -- leak checks without a log prefix ----------------------------------------------------------------------------


LEAKS = ("SELECT line, context, form, total_size, available_size, evictable_size, shortfall FROM leak_reports "
         "ORDER BY line")


def write(tmp_path: Path, text: str, name: str = "description.md") -> Path:
    folder = tmp_path / "e"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return folder


def test_userwarning_leak_lines_are_two_pools_idle(tmp_path):
    folder = write(tmp_path, (
        "### Describe the bug\n\n"
        "/sgl/python/sglang/srt/managers/scheduler.py:1326: UserWarning: token_to_kv_pool_allocator memory leak "
        "detected! available_size=961586, protected_size=0, self.max_total_num_tokens=961593\n"
        "self.token_to_kv_pool_allocator.available_size()=961586\nself.tree_cache.evictable_size()=0\n\n"
        "  warnings.warn(msg)\n"
        "/sgl/python/sglang/srt/managers/scheduler.py:1336: UserWarning: req_to_token_pool memory leak "
        "detected!available_size=3756, total_size=3757\n\n  warnings.warn(msg)\n"))
    f, (leaks, src) = run(folder, LEAKS, "SELECT kind, unparsed_lines FROM sources")
    assert src == [{"kind": "server_log", "unparsed_lines": 2}]            # the heading and a blank line
    assert [(r["line"], r["context"], r["form"], r["shortfall"]) for r in leaks] == [
        (3, "idle", "radix", 7), (8, "idle", "req_pool", 1)]
    assert len(f["idle-memory-leak"]) == 2 and "busy-leak-report" not in f


def test_the_2024_wording_is_one_report(tmp_path):
    folder = write(tmp_path, " UserWarning: Warning: available_size=35244, max_total_num_token=42308\n"
                             "KV cache pool leak detected!\n", "description.txt")
    f, (leaks,) = run(folder, LEAKS)
    assert [(r["total_size"], r["available_size"], r["shortfall"]) for r in leaks] == [(42308, 35244, 7064)]
    (leak,) = f["idle-memory-leak"]
    assert leak["ranks"] == [] and leak["count"] == 1


def test_a_046_surplus_counts_the_evictable_tokens_once(tmp_path):
    # 0.4.6 prints available_size = allocator free + tree evictable, then both parts: 2864304 + 325120 = 3189424
    folder = write(tmp_path, (
        "Running log:\n```\nValueError: token_to_kv_pool_allocator memory leak detected! available_size=3189424, "
        "protected_size=0, self.max_total_num_tokens=3185200\nself.token_to_kv_pool_allocator.available_size()="
        "2864304\nself.tree_cache.evictable_size()=325120\n\n\n[2025-06-06 01:56:27] Received sigquit from a child "
        "process. It usually means the child failed.\n"))
    f, (leaks,) = run(folder, LEAKS)
    assert [(r["available_size"], r["evictable_size"], r["shortfall"]) for r in leaks] == [(2864304, 325120, -4224)]
    (leak,) = f["idle-memory-leak"]
    assert "Surplus: 4224 tokens" in leak["detail"]


def test_parts_that_do_not_sum_to_the_printed_figure_are_left_as_printed(tmp_path):
    folder = write(tmp_path, (
        "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=411000, protected_size=0, "
        "self.max_total_num_tokens=412000\nself.token_to_kv_pool_allocator.available_size()=411000\n"
        "self.tree_cache.evictable_size()=744\n"))
    _, (leaks,) = run(folder, LEAKS)
    assert [(r["available_size"], r["evictable_size"], r["shortfall"]) for r in leaks] == [(411000, 744, 256)]


def test_an_inline_backticked_valueerror_line_is_read(tmp_path):
    folder = write(tmp_path, (
        "### Describe the bug\n\n`ValueError: token_to_kv_pool_allocator memory leak detected! "
        "self.max_total_num_tokens=270331, available_size=644, evictable_size=269628, protected_size=0\n`\n"
        "A clear and reproducible memory leak.\n"))
    f, (leaks, src) = run(folder, LEAKS, "SELECT kind FROM sources")
    assert src == [{"kind": "server_log"}]
    assert [(r["context"], r["shortfall"]) for r in leaks] == [("idle", 59)]
    assert f["idle-memory-leak"][0]["ranks"] == []


def test_a_leak_line_inside_a_traceback_stays_the_tracebacks(tmp_path, log: LogWriter):
    # the watchdog's dump_info frames above the exception line say in which context the check ran
    log.line(0, "Scheduler hit an exception: Traceback (most recent call last):", "TP0")
    log.raw('  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2730, in dump_info')
    log.raw("    self._check_radix_cache_memory()")
    log.raw("ValueError: token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens=295566, "
            "available_size=290000, evictable_size=0, protected_size=0")
    f, (leaks, ev) = run(log.write(tmp_path / "e"), LEAKS, "SELECT kind FROM events")
    assert [r["context"] for r in leaks] == ["watchdog"]
    assert [r["kind"] for r in ev] == ["scheduler_exception"]
    assert "idle-memory-leak" not in f
