"""Stack dumps alone, no rule fired (analysis/stacks/places.py): the summary says where the ranks stand
(one shared point, or several places, outside any collective, and whether they were waiting or on a CPU),
that a rank whose dumps of one moment differ was running, and asks for repeated dumps only when one moment
cannot tell stuck from slow."""

from __future__ import annotations

from pathlib import Path

from hangforensics.analysis.findings import run_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

RENDEZVOUS = ["_recv_fds (simsgl/srt/distributed/fd_exchange.py:25)",
              "ShmBroadcastRendezvous.exchange_shm_fds (simsgl/srt/distributed/fd_exchange.py:43)",
              "init_shm_broadcast (simsgl/srt/distributed/fd_exchange.py:70)",
              "run_worker_process (simsgl/srt/distributed/fd_exchange.py:80)"]
SPAWN = ["BaseProcess.run (multiprocessing/process.py:108)", "BaseProcess._bootstrap (multiprocessing/process.py:314)",
         "_main (multiprocessing/spawn.py:135)", "spawn_main (multiprocessing/spawn.py:122)", "<module> (<string>:1)"]


def pyspy(pid: int, rank: int, frames: list[str], state: str = "idle") -> str:
    """A py-spy 0.4 ``dump`` of a scheduler process, its main thread in ``frames`` (innermost first)."""
    return "\n".join([f"Process {pid}: sglang::scheduler_TP{rank}", "Python v3.11.7 (/usr/local/bin/python3.11)", "",
                      f'Thread {pid} ({state}): "MainThread"', *(f"    {f}" for f in frames + SPAWN),
                      f'Thread {pid + 50} (idle): "HealthPoller"', "    HealthPoller.run (simsgl/srt/health.py:60)",
                      "    Thread._bootstrap_inner (threading.py:1045)", "    Thread._bootstrap (threading.py:1002)", ""])


def summary(folder: Path) -> dict:
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode="engine")
        run_rules(st)
        (row,) = st.query("SELECT verdict, facts, capture_next FROM engine_summaries")
    return row


def test_every_rank_at_one_point_outside_any_collective_is_said_with_its_frames(tmp_path: Path):
    for r in range(4):
        (tmp_path / f"rank{r}.txt").write_text(pyspy(8180 + r, r, RENDEZVOUS))
    s = summary(tmp_path)
    where = ("all 4 ranks at one point outside any collective: _recv_fds ← ShmBroadcastRendezvous.exchange_shm_fds "
             "← init_shm_broadcast (idle: waiting)")
    assert s["verdict"] == f"Only stack dumps: {where}; no log to say when progress stopped."
    assert f"{where[0].upper()}{where[1:]}." in s["facts"]
    # one moment of each rank, Python frames only: native frames, repeated, to tell stuck from slow
    assert any(c.startswith("py-spy dump --native repeated a few seconds apart") for c in s["capture_next"])


def test_ranks_in_several_places_are_named_per_place(tmp_path: Path):
    for r in range(3):
        (tmp_path / f"rank{r}.txt").write_text(pyspy(8180 + r, r, RENDEZVOUS))
    (tmp_path / "rank3.txt").write_text(pyspy(8183, 3, ["HealthPoller.wait (simsgl/srt/health.py:41)", *RENDEZVOUS[1:]]))
    s = summary(tmp_path)
    # each place by its own frames, below the ones the places share
    assert s["verdict"] == ("Only stack dumps: 4 ranks in 2 places outside any collective: TP0-2 in _recv_fds; TP3 "
                            "in HealthPoller.wait; no log to say when progress stopped.")


def test_a_rank_whose_dumps_of_one_moment_differ_was_running(tmp_path: Path):
    """Three py-spy samples of a busy rank a second apart: in the forward pass twice, then in the sampler."""
    forward = ["ModelRunner.forward (simsgl/busy_worker.py:16)", "event_loop_normal (simsgl/busy_worker.py:40)"]
    sample = ["sample_tokens (simsgl/busy_worker.py:26)", "event_loop_normal (simsgl/busy_worker.py:41)"]
    for k, (frames, state) in enumerate([(forward, "active"), (forward, "active"), (sample, "active+gil")]):
        (tmp_path / f"rank0.{k}.txt").write_text(pyspy(8756, 0, frames, state))
    s = summary(tmp_path)
    assert "TP0 in different places in dumps minutes apart at most: running, not stuck" in s["verdict"]
    assert ("TP0's dumps show it in 2 places (forward, sample_tokens): it was running between them, not stuck."
            in s["facts"])
    assert not any("repeated" in c for c in s["capture_next"])
    # the same rank in one place, three times: stuck or slow cannot be told from one moment
    for k in range(3):
        (tmp_path / f"rank0.{k}.txt").write_text(pyspy(8756, 0, forward, "active"))
    s = summary(tmp_path)
    assert "different places" not in s["verdict"] and "(active: on a CPU when dumped, not waiting)" in s["verdict"]
    assert any(c.startswith("py-spy dump --native repeated a few seconds apart") for c in s["capture_next"])


def test_native_dumps_of_one_moment_ask_only_for_a_second_round(tmp_path: Path):
    for r in range(2):
        (tmp_path / f"rank{r}.txt").write_text(pyspy(8180 + r, r, ["recvmsg (libc.so.6)", *RENDEZVOUS]))
    s = summary(tmp_path)
    assert "all 2 ranks at one point outside any collective: recvmsg ← _recv_fds ←" in s["verdict"]
    nxt = [c for c in s["capture_next"] if "repeated" in c or "--native (" in c]
    assert len(nxt) == 1 and nxt[0].startswith("the dumps repeated a few seconds apart")
