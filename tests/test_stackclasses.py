"""STAT-style rank classes and collective desync on the real captures in ../shared/formats."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import SHARED, LogWriter, analyze_folder, by_rule

from hangforensics.analysis.findings import run_rules
from hangforensics.analysis.stacks.stackclasses import compact_ranks
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

FORMATS = SHARED / "formats"
pytestmark = pytest.mark.skipif(not FORMATS.is_dir(), reason="../shared/formats not beside the repository")


def _engine(tmp_path: Path, scenario: str, pattern: str) -> Path:
    eng = tmp_path / scenario
    eng.mkdir()
    for f in sorted((FORMATS / scenario).glob(pattern)):
        shutil.copy(f, eng / f.name)
    return eng


def test_compact_rank_sets():
    assert compact_ranks(["TP0", "TP1", "TP2", "TP5"]) == "TP0-2,5"
    assert compact_ranks(["DP1 TP1 EP1", "DP0 TP0 EP0", "DP3 TP3 EP3"]) == "TP0-1,3"
    assert compact_ranks(["TP7"]) == "TP7"
    assert compact_ranks(["rank1", "rank0", "rank3"]) == "rank0-1,3"
    # torch ranks beside SGLang ones (a paste of both) and labels without a TP number are all kept
    assert compact_ranks(["TP0", "TP2", "TP3", "rank6", "rank7"]) == "TP0,2-3, rank6-7"
    assert compact_ranks(["DP0", "DP1"]) == "DP0, DP1"


def test_collective_desync_classes_table(tmp_path: Path):
    eng = _engine(tmp_path, "collective_desync", "rank?.plain.txt")
    with Store(":memory:") as st:
        ingest_paths(st, [eng])
        found = by_rule(run_rules(st))
        leaves = {r["label"]: r["frame"] for r in st.query("SELECT label, frame FROM rank_classes WHERE is_leaf")}
        assert leaves == {"TP0-1": "all_reduce", "TP2": "all_reduce", "TP3": "broadcast"}
        # the tree: one root path shared by all, splitting under Scheduler.event_loop_overlap
        split = st.query("SELECT p.frame, count(*) AS n FROM rank_classes c JOIN rank_classes p "
                         "ON c.parent_id = p.class_id AND c.capture = p.capture GROUP BY p.class_id, p.frame HAVING count(*) > 1")
        assert split == [{"frame": "Scheduler.event_loop_overlap", "n": 3}]
        colls = {r["rank"]: (r["collective"], r["call_site"]) for r in st.query("SELECT * FROM rank_collectives")}
        assert colls["TP2"] == ("all_reduce", "HiCacheController._all_reduce_attn_groups")
        assert colls["TP3"] == ("broadcast", "broadcast_pyobj")
    (desync,) = found["collective-desync"]
    assert desync["ranks"] == ["TP2"]                    # the culprit, not TP3 waiting on its leader
    assert "_all_reduce_attn_groups" in desync["detail"] and "TP3" in desync["detail"]
    assert [f["signature"] for f in found["known-signature"]] == ["hicache-collective-desync"]


def test_shared_deadlock_is_not_a_desync(tmp_path: Path):
    eng = _engine(tmp_path, "recvmsg_all_ranks", "rank?.plain.txt")
    found = by_rule(analyze_folder(eng))
    assert "collective-desync" not in found
    # blocked in a Unix-socket recvmsg, but not NCCL window registration: not the symm-mem signature
    assert "known-signature" not in found


def test_healthy_busy_dump_has_no_stack_findings(tmp_path: Path):
    eng = _engine(tmp_path, "healthy_busy", "rank0.plain*.txt")
    assert analyze_folder(eng) == []


def test_idle_rank_beside_broadcast_is_not_a_desync(tmp_path: Path):
    # decode side of incident 2: TP0 in on_idle, TP1 waits in the recv_requests broadcast
    eng = tmp_path / "decode"
    eng.mkdir()
    (eng / "a.txt").write_text(
        'Process 11: sglang::scheduler_TP0\nPython v3.12.3 (/usr/bin/python3.12)\n\nThread 11 (active): "MainThread"\n'
        "    Scheduler.on_idle (sglang/srt/managers/scheduler.py:1400)\n"
        "    Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)\n"
        "    run_scheduler_process (sglang/srt/managers/scheduler.py:4414)\n    <module> (<string>:1)\n")
    (eng / "b.txt").write_text(
        'Process 12: sglang::scheduler_TP1\nPython v3.12.3 (/usr/bin/python3.12)\n\nThread 12 (idle): "MainThread"\n'
        "    broadcast (torch/distributed/distributed_c10d.py:2829)\n"
        "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)\n"
        "    broadcast_pyobj (sglang/srt/utils/common.py:1243)\n"
        "    Scheduler.recv_requests (sglang/srt/managers/scheduler.py:1238)\n"
        "    Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)\n"
        "    run_scheduler_process (sglang/srt/managers/scheduler.py:4414)\n    <module> (<string>:1)\n")
    assert "collective-desync" not in by_rule(analyze_folder(eng))


def test_symm_mem_signature_needs_a_stuck_rank(tmp_path: Path):
    frames = ("    _register_segments_for_comm (vendored_sgl/srt/distributed/device_communicators/pynccl_allocator.py:417)\n"
              "    SymmetricMemoryContext.__exit__ (vendored_sgl/srt/distributed/device_communicators/pynccl_allocator.py:388)\n"
              "    RowParallelLinear.forward (vendored_sgl/srt/layers/linear.py:1294)\n    <module> (<string>:1)\n")

    def dumps(folder: Path, state: str) -> None:
        for r in range(2):
            (folder / f"cap{r}.txt").write_text(
                f"Process {50 + r}: sglang::scheduler_TP{r}\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
                f'Thread {50 + r} ({state}): "MainThread"\n' + frames)

    busy = tmp_path / "busy"
    LogWriter(tp=2).startup().traffic(10, 300).write(busy)
    dumps(busy, "active")
    assert "known-signature" not in by_rule(analyze_folder(busy))   # near miss: healthy, passing through
    stuck = tmp_path / "stuck"
    LogWriter(tp=2).startup().traffic(10, 120).posts(122, 500).write(stuck)
    dumps(stuck, "active")                                            # py-spy 'active' is not progress
    (sig,) = by_rule(analyze_folder(stuck))["known-signature"]
    assert sig["signature"] == "symm-mem-window-register" and sig["ranks"] == ["TP0", "TP1"]


def test_a_dump_that_names_no_process_counts_only_alone(tmp_path: Path):
    """The tail of one scheduler's py-spy dump, pasted without its 'Process N:' line: the overlap scheduler's
    forward thread sits in ncclCommWindowRegister while MainThread (cut above) waits for it.  Alone it is the
    engine's only stack and matches the signature, in that thread, naming no rank; beside labelled dumps it
    is taken for a piece of one of them and adds no rank."""
    tail = ("    event_loop_overlap (scheduler.py:1052)\n    run_scheduler_process (scheduler.py:2612)\n"
            "    <module> (<string>:1)\n"
            'Thread 4113894 (idle): "Thread-2 (forward_thread_func)"\n'
            "    ncclCommWindowRegister (pynccl_wrapper.py:540)\n    register_comm_window_raw (pynccl.py:308)\n"
            "    __exit__ (pynccl_allocator.py:122)\n    forward (vocab_parallel_embedding.py:476)\n"
            "    forward_thread_func_ (tp_worker_overlap_thread.py:170)\n    run (threading.py:1012)\n")
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "paste.txt").write_text(tail)
    (sig,) = by_rule(analyze_folder(alone))["known-signature"]
    assert sig["signature"] == "symm-mem-window-register" and sig["ranks"] == []
    assert "in thread 'Thread-2 (forward_thread_func)'" in sig["detail"] and "unlabelled" in sig["detail"]
    beside = tmp_path / "beside"
    beside.mkdir()
    (beside / "paste.txt").write_text(tail)
    for r in range(2):
        (beside / f"tp{r}.txt").write_text(
            f"Process {50 + r}: sglang::scheduler_TP{r}\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
            f'Thread {50 + r} (idle): "MainThread"\n    recv_requests (scheduler.py:1238)\n'
            "    event_loop_overlap (scheduler.py:1052)\n    <module> (<string>:1)\n")
    found = analyze_folder(beside)
    assert "known-signature" not in by_rule(found) and "collective-desync" not in by_rule(found)
