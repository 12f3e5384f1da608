"""``capture`` of a torch.distributed job: ranks named by what the launcher put in their environment.

The tree (tests/torch_job_targets.py) is shaped like a torchrun job: a launcher titled like
``torch.distributed.run`` and plain ``python`` ranks, one named only by ``--rank N``, one with a forked
helper that inherits its rank's environment.  Found from the launcher, from a rank's pid and by
``--match``, every rank is labelled ``rankN`` and the launcher's facts are kept.  The real torchrun jobs
of tests/test_realjobs.py check the same on real torch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from hangforensics.capture.discover import find_engine, launch_facts

TARGETS = Path(__file__).with_name("torch_job_targets.py")
N = 3


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    ready = tmp_path_factory.mktemp("torchjob")
    # started through a shell that exits at once: the job is no descendant of this test process, which
    # capture never takes for part of the engine
    p = subprocess.Popen(["sh", "-c", f'"{sys.executable}" "{TARGETS}" launcher {N} "{ready}" &'],
                         start_new_session=True)
    p.wait()
    deadline = time.monotonic() + 30
    want = {"launcher", *(f"rank{r}" for r in range(N))}
    while time.monotonic() < deadline and not want <= {f.name for f in ready.iterdir()}:
        time.sleep(0.1)
    pids = {f.name: int(f.read_text()) for f in ready.iterdir()}
    try:
        assert want <= set(pids), pids
        yield pids
    finally:
        os.killpg(p.pid, signal.SIGKILL)              # the shell's session: the launcher and its ranks


def _hf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangforensics", *args], capture_output=True, text=True,
                          timeout=120)


def test_launch_facts_from_environment_and_argv() -> None:
    env = {"RANK": "5", "LOCAL_RANK": "1", "GROUP_RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "node0",
           "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}
    f = launch_facts(env, "python train.py")
    assert (f.rank, f.rank_source, f.launcher, f.local_rank, f.group_rank, f.world_size, f.master_addr,
            f.master_port) == (5, "env", "torchrun", 1, 1, 8, "node0", 29500)
    slurm = launch_facts({"SLURM_PROCID": "7", "SLURM_LOCALID": "3", "SLURM_NODEID": "1", "SLURM_NTASKS": "16",
                          "SLURM_JOB_ID": "42"}, "python train.py")
    assert (slurm.rank, slurm.launcher, slurm.local_rank, slurm.group_rank, slurm.world_size) == (7, "slurm", 3, 1, 16)
    argv = launch_facts({}, "python train.py --node-rank 1 --local-rank=2 --rank 9")
    assert (argv.rank, argv.rank_source, argv.local_rank) == (9, "argv", 2)
    # a node's or a local rank is not the global rank
    assert launch_facts({"LOCAL_RANK": "2"}, "python train.py --node-rank 1").rank is None
    assert launch_facts({"PATH": "/usr/bin"}, "python serve.py") is None


@pytest.mark.parametrize("how", ["launcher", "rank", "match"])
def test_the_whole_job_is_found_and_every_rank_labelled(job: dict[str, int], how: str) -> None:
    if how == "launcher":
        tree = find_engine(pid=job["launcher"])
    elif how == "rank":
        tree = find_engine(pid=job["rank1"])                 # walked up through the launcher
    else:
        tree = find_engine(match=r"torch_job_targets\.py rank")
    assert tree.root_pid == job["launcher"] and tree.family == "torch"
    by_rank = {p.rank: p for p in tree.processes if p.rank}
    assert sorted(by_rank) == [f"rank{r}" for r in range(N)]
    for r in range(N):
        assert by_rank[f"rank{r}"].pid == job[f"rank{r}"] and by_rank[f"rank{r}"].role == "rank"
    assert by_rank[f"rank{N - 1}"].launch.rank_source == "argv"
    assert by_rank["rank0"].launch.rank_source == "env" and by_rank["rank0"].launch.local_rank == 0
    helper = [p for p in tree.processes if p.ppid == job["rank0"]]
    assert helper and helper[0].rank is None and helper[0].role == "other"   # inherited RANK=0: not rank0
    assert tree.processes[0].pid == job["launcher"] and tree.processes[0].role == "launcher"


def test_capture_bundle_labels_ranks_and_keeps_the_launchers_facts(job: dict[str, int], tmp_path: Path) -> None:
    bundle = tmp_path / "job.tar.gz"
    p = _hf("capture", "--pid", str(job["rank2"]), "-o", str(bundle))
    assert p.returncode == 0, p.stderr
    assert f"{N} rank(s)" in p.stderr
    with tarfile.open(bundle) as t:
        m = json.load(t.extractfile(next(x for x in t if x.name.endswith("manifest.json"))))
    procs = {p["rank"]: p for p in m["processes"] if p["rank"]}
    assert sorted(procs) == [f"rank{r}" for r in range(N)]
    assert procs["rank1"]["launcher"] == "torchrun" and procs["rank1"]["world_size"] == N
    assert procs["rank1"]["master_addr"] == "127.0.0.1" and procs["rank1"]["master_port"] == 29500
    assert m["target"]["family"] == "torch"
    (r1,) = m["rounds"]
    assert {d["label"] for d in r1["dumps"] if d["ok"]} >= {f"rank{r}" for r in range(N)}
    # the report compares the ranks under those labels
    js = tmp_path / "f.json"
    r = _hf("report", str(bundle), "-o", str(tmp_path / "r.html"), "--json", str(js))
    assert r.returncode == 0, r.stderr
    doc = json.loads(js.read_text())
    assert doc["engines"][0]["ranks"] == [f"rank{r}" for r in range(N)], doc["engines"][0]
    for pid in job.values():
        assert psutil.pid_exists(pid)                   # read-only: nothing was killed or stopped
