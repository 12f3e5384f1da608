"""A process tree shaped like a torchrun job, for tests/test_capture_torch_job.py (run as a script).

    python torch_job_targets.py launcher N READY_DIR     titled like ``torchrun``: starts N ranks
    python torch_job_targets.py rank READY_DIR           one rank (RANK etc. set by the launcher)

The launcher sets what torchrun's elastic agent sets in each rank's environment (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_RUN_ID``).
Rank 0 also forks a helper (a DataLoader-style worker) that inherits its environment, and the last rank
is started with ``--rank N`` on its command line and no ``RANK`` (a launcher that passes it that way).
Every rank blocks in ``recvmsg`` on a Unix socket; the tree is killed by the test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import setproctitle


def rank(ready: Path) -> None:
    me = os.environ.get("RANK") or sys.argv[sys.argv.index("--rank") + 1]
    if os.environ.get("RANK") == "0" and os.fork() == 0:
        setproctitle.setproctitle("pt_data_worker")          # inherits RANK=0: a helper, not rank 0 again
        time.sleep(3600)
        os._exit(0)
    a, _b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    (ready / f"rank{me}").write_text(str(os.getpid()))
    a.recvmsg(16, socket.CMSG_LEN(4))


def launcher(n: int, ready: Path) -> None:
    setproctitle.setproctitle(f"{sys.executable} -m torch.distributed.run --nnodes=1 --node-rank=0 "
                              f"--nproc-per-node={n} train.py")
    procs = []
    for r in range(n):
        env = {**os.environ, "LOCAL_RANK": str(r), "WORLD_SIZE": str(n), "GROUP_RANK": "0",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job-1"}
        args = [sys.executable, __file__, "rank", str(ready), "train.py"]
        if r == n - 1:
            args += ["--rank", str(r)]
        else:
            env["RANK"] = str(r)
        procs.append(subprocess.Popen(args, env=env))
    (ready / "launcher").write_text(str(os.getpid()))
    for p in procs:
        p.wait()


if __name__ == "__main__":
    if sys.argv[1] == "launcher":
        launcher(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        rank(Path(sys.argv[2]))
