"""Each catalogued signature: a realistic positive and a near-miss negative (frame names, never paths)."""

from __future__ import annotations

from pathlib import Path

from conftest import LogWriter, analyze_folder, by_rule

from hangforensics.analysis.stacks.signatures import load_signatures

TAIL = ("    Scheduler.event_loop_overlap (vendor_sgl/srt/managers/scheduler.py:1052)\n"
        "    run_scheduler_process (vendor_sgl/srt/managers/scheduler.py:4414)\n    <module> (<string>:1)\n")
ALL_REDUCE = ("    all_reduce (torch/distributed/distributed_c10d.py:2940)\n"
              "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)\n"
              "    GroupCoordinator.all_reduce (vendor_sgl/srt/distributed/parallel_state.py:512)\n"
              "    Scheduler.run_batch (vendor_sgl/srt/managers/scheduler.py:1591)\n")


def _engine(tmp_path: Path, name: str, stacks: dict[str, tuple[str, str]], stalled: bool = True,
            extra_log: list[str] | None = None) -> Path:
    """An engine whose log stalls (or keeps serving) and whose ranks were dumped: rank -> (state, frames)."""
    log = LogWriter(tp=len(stacks))
    if stalled:
        log.startup().traffic(10, 120).posts(122, 500)
    else:
        log.startup().traffic(10, 500)
    for line in extra_log or []:
        log.raw(line)
    eng = log.write(tmp_path / name)
    for i, (rank, (state, frames)) in enumerate(stacks.items()):
        (eng / f"cap-{i}.txt").write_text(
            f"Process {900 + i}: sglang::scheduler_{rank.replace(' ', '_')}\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
            f'Thread {900 + i} ({state}): "MainThread"\n' + frames + TAIL)
    return eng


def _signatures(eng: Path) -> list[str]:
    return sorted(f["signature"] for f in by_rule(analyze_folder(eng)).get("known-signature", []))


def test_catalogue_files_are_complete():
    sigs = {s.id: s for s in load_signatures()}
    assert set(sigs) >= {"symm-mem-window-register", "hicache-collective-desync", "pp-stage-recv-wait",
                         "scheduler-exited", "jit-compile-straggler", "cuda-graph-replay-stall",
                         "nccl-collective-timeout"}
    for s in sigs.values():
        assert s.description and s.evidence and s.remediation and s.references is not None and s.match


HICACHE = ("    all_reduce (torch/distributed/distributed_c10d.py:2940)\n"
           "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)\n"
           "    HiRadixCache._all_reduce_attn_groups (vendor_sgl/srt/mem_cache/hiradix_cache.py:180)\n"
           "    HiRadixCache.terminate_prefetch (vendor_sgl/srt/mem_cache/hiradix_cache.py:808)\n")
BROADCAST = ("    broadcast (torch/distributed/distributed_c10d.py:2829)\n"
             "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)\n"
             "    broadcast_pyobj (vendor_sgl/srt/utils/common.py:1243)\n"
             "    Scheduler.recv_requests (vendor_sgl/srt/managers/scheduler.py:1238)\n")


def test_hicache_desync_positive_and_agreement_step_negative(tmp_path: Path):
    pos = _engine(tmp_path, "pos", {"TP0": ("idle", HICACHE), "TP1": ("idle", BROADCAST),
                                    "TP2": ("idle", BROADCAST), "TP3": ("idle", BROADCAST)})
    assert "hicache-collective-desync" in _signatures(pos)
    # every rank in the HiCache all-reduce together: the normal agreement step of a stuck group, no desync
    neg = _engine(tmp_path, "neg", {f"TP{r}": ("idle", HICACHE) for r in range(4)})
    assert "hicache-collective-desync" not in _signatures(neg)


PP_RECV = ("    recv (torch/distributed/distributed_c10d.py:2510)\n"
           "    _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)\n"
           "    recv_object (vendor_sgl/srt/distributed/parallel_state.py:1320)\n"
           "    recv_tensor_dict (vendor_sgl/srt/distributed/parallel_state.py:1402)\n"
           "    Scheduler._pp_recv_proxy_tensors (vendor_sgl/srt/managers/scheduler_pp_mixin.py:210)\n")
MOE = ("    FusedMoE.forward (vendor_sgl/srt/layers/moe/fused_moe_triton/layer.py:740)\n"
       "    Scheduler.run_batch (vendor_sgl/srt/managers/scheduler.py:1591)\n")


def test_pp_stage_recv_wait_positive_and_healthy_pipeline_negative(tmp_path: Path):
    stacks = {"PP0 TP0": ("active", MOE), "PP0 TP1": ("active", MOE),
              "PP1 TP0": ("idle", PP_RECV), "PP1 TP1": ("idle", PP_RECV)}
    assert "pp-stage-recv-wait" in _signatures(_engine(tmp_path, "pos", stacks))
    # a healthy pipeline sampled while stage 1 waits for its next micro-batch: not stuck
    assert "pp-stage-recv-wait" not in _signatures(_engine(tmp_path, "neg", stacks, stalled=False))


SHUTDOWN = ("    _shutdown (threading.py:1553)\n")
EXEC_SHUTDOWN = ("    ThreadPoolExecutor.shutdown (concurrent/futures/thread.py:235)\n"
                 "    Scheduler.shutdown (vendor_sgl/srt/managers/scheduler.py:2901)\n")


def test_scheduler_exited_positive_and_executor_shutdown_negative(tmp_path: Path):
    exc = ["[2026-05-01 10:02:01 TP1] Scheduler hit an exception: Traceback (most recent call last):",
           '  File "/x/scheduler.py", line 2730, in run_scheduler_process', "RuntimeError: boom"]
    pos = _engine(tmp_path, "pos", {"TP0": ("idle", ALL_REDUCE), "TP1": ("idle", SHUTDOWN)}, extra_log=exc)
    (sig,) = [f for f in by_rule(analyze_folder(pos))["known-signature"] if f["signature"] == "scheduler-exited"]
    assert sig["ranks"] == ["TP1"] and "hit an exception" in sig["detail"]
    neg = _engine(tmp_path, "neg", {"TP0": ("idle", ALL_REDUCE), "TP1": ("idle", EXEC_SHUTDOWN)})
    assert "scheduler-exited" not in _signatures(neg)


JIT = ("    _jit_compile (torch/utils/cpp_extension.py:2044)\n"
       "    load_inline (torch/utils/cpp_extension.py:1751)\n"
       "    get_nccl_mem_pool (vendor_sgl/srt/distributed/device_communicators/pynccl_allocator.py:120)\n")


def test_jit_straggler_positive_and_everyone_compiling_negative(tmp_path: Path):
    pos = _engine(tmp_path, "pos", {"TP0": ("idle", ALL_REDUCE), "TP1": ("active", JIT),
                                    "TP2": ("idle", ALL_REDUCE), "TP3": ("idle", ALL_REDUCE)})
    found = by_rule(analyze_folder(pos))
    (sig,) = [f for f in found["known-signature"] if f["signature"] == "jit-compile-straggler"]
    assert sig["ranks"] == ["TP1"]
    assert "collective-desync" not in found          # a rank in no collective is not a desync
    neg = _engine(tmp_path, "neg", {f"TP{r}": ("active", JIT) for r in range(4)})
    assert "jit-compile-straggler" not in _signatures(neg)


REPLAY = ("    CUDAGraph.replay (torch/cuda/graphs.py:88)\n"
          "    CudaGraphRunner.replay (vendor_sgl/srt/model_executor/cuda_graph_runner.py:803)\n"
          "    ModelRunner.forward_decode (vendor_sgl/srt/model_executor/model_runner.py:2096)\n")


def test_cuda_graph_replay_positive_and_busy_decode_negative(tmp_path: Path):
    stacks = {f"TP{r}": ("active", REPLAY) for r in range(2)}
    assert "cuda-graph-replay-stall" in _signatures(_engine(tmp_path, "pos", stacks))
    # a busy decode engine sampled in replay (where it spends its time) while progress continues
    assert "cuda-graph-replay-stall" not in _signatures(_engine(tmp_path, "neg", stacks, stalled=False))


def test_nccl_timeout_positive_and_periodic_update_negative(tmp_path: Path):
    pos = LogWriter(tp=2)
    pos.startup().traffic(10, 120).probes(130, 400, status=503).nccl_timeout(362, 0).nccl_timeout(362, 1)
    assert "nccl-collective-timeout" in _signatures(pos.write(tmp_path / "pos"))
    neg = LogWriter(tp=2)
    neg.startup().traffic(10, 300)
    neg.raw("[rank0]:[I501 10:02:00.100000000 ProcessGroupNCCL.cpp:2101] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
            "NCCL Work update periodically: last enqueued NCCL work: 1558546, last completed NCCL work: 1558546.")
    assert _signatures(neg.write(tmp_path / "neg")) == []


def test_nccl_progress_view_compares_ranks(tmp_path: Path):
    from hangforensics.ingest.pipeline import ingest_paths
    from hangforensics.store import Store

    log = LogWriter(tp=4)
    log.startup().traffic(10, 120)
    for r in (0, 1, 3):
        log.nccl_timeout(362, r)
    log.raw("[rank2]:[E501 10:06:02.634054422 ProcessGroupNCCL.cpp:1493] [PG ID 4 PG GUID 7 Rank 2]  failure detected "
            "by watchdog at work sequence id: 1558540 PG status: last enqueued work: 1558541, last completed work: 1558539")
    eng = log.write(tmp_path / "nccl")
    with Store(":memory:") as st:
        ingest_paths(st, [eng])
        rows = {r["global_rank"]: r for r in st.query("SELECT * FROM nccl_progress")}
        assert set(rows) == {0, 1, 2, 3}
        assert rows[2]["behind"] and not rows[0]["behind"]
        assert rows[0]["last_completed"] == 1558545 and rows[2]["last_completed"] == 1558539
