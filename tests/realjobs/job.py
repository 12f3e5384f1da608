"""A real torch.distributed job (gloo, CPU) that hangs, dies or runs the way production jobs do.

Run under torchrun by :mod:`tests.realjobs.harness`: ``torchrun --nproc-per-node N job.py SCENARIO``.
Every rank logs its progress through Python ``logging`` (``[rankN] step K done``) to the launcher's
shared output, registers faulthandler on SIGUSR1 into one shared file (every rank writes it at once when
the harness signals them all), and, when a collective raises (gloo's timeout, a closed connection),
writes its own Flight Recorder dump to ``$FR_DIR/nccl_trace_rank_<rank>`` as NCCL's dump-on-timeout
names it (the CPU build has no gloo dump-on-timeout), then lets the exception kill the rank.

Before the scenario's fault each rank logs ``entering <phase>``: the harness captures once all ranks
have said it.  Nothing here knows what hangforensics expects.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
TIMEOUT_S = float(os.environ.get("JOB_TIMEOUT_S", "15"))
# the rank a scenario singles out, where it has one (JOB_ODD_RANK, else the scenario's own choice)
ODD = os.environ.get("JOB_ODD_RANK")


def odd(default: int) -> int:
    return int(ODD) % WORLD if ODD is not None else default
log = logging.getLogger("job")


def dump_flight_recorder() -> None:
    out = os.environ.get("FR_DIR")
    if not out:
        return
    data = torch._C._distributed_c10d._dump_fr_trace()
    with open(os.path.join(out, f"nccl_trace_rank_{RANK}"), "wb") as f:
        f.write(data)


def train_steps(n: int, group: dist.ProcessGroup | None = None, pause_s: float = 0.0) -> torch.Tensor:
    t = torch.ones(64)
    for step in range(n):
        dist.all_reduce(t, group=group)
        log.info("step %d done loss=%.4f", step, 1.0 / (step + 1))
        if pause_s:
            time.sleep(pause_s)
    return t


def entering(phase: str) -> None:
    log.info("entering %s", phase)


# -- scenarios: each ends in a hang, a death or a clean exit ------------------------------------------


def op_mismatch() -> None:
    """The last rank broadcasts where the others all-reduce (a branch taken on one rank only)."""
    t = train_steps(3)
    entering("eval sync")
    if odd(WORLD - 1) == RANK:
        dist.broadcast(t, src=(odd(WORLD - 1) + 1) % WORLD)
    else:
        dist.all_reduce(t)


def _spin(seconds: float) -> int:
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += sum(i * i for i in range(1000))
    return n


def busy_rank() -> None:
    """Rank 2 is stuck in Python (a runaway data-loading loop) and never reaches the all_reduce."""
    t = train_steps(3)
    entering("gradient sync")
    if odd(2) == RANK:
        _spin(3600)
    dist.all_reduce(t)


def io_blocked() -> None:
    """Rank 1 blocks reading a FIFO no one writes (a stuck network filesystem read)."""
    t = train_steps(3)
    fifo = os.path.join(os.environ["JOB_DIR"], "checkpoint.fifo")
    if RANK == 1 and not os.path.exists(fifo):
        os.mkfifo(fifo)
    entering("checkpoint load")
    if RANK == 1:
        with open(fifo, "rb") as f:            # blocks in open(2) until a writer appears: never
            f.read()
    dist.all_reduce(t)


def socket_recv() -> None:
    """Rank 0 blocks in recvmsg on a Unix socket, as NCCL's proxy fd exchange blocks (cuMem handles)."""
    t = train_steps(3)
    entering("buffer registration")
    if RANK == 0:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        a.recvmsg(16, socket.CMSG_LEN(4))      # the peer never sends its file descriptor
    dist.all_reduce(t)


def size_mismatch() -> None:
    """The last rank all-reduces a larger tensor (a shape bug on one rank): gloo aborts the process."""
    train_steps(3)
    entering("logits sync")
    dist.all_reduce(torch.ones(4096 if RANK == WORLD - 1 else 1024))


def extra_collective() -> None:
    """Rank 1 issues one all_reduce more than the others (a metric synced on one rank only), so at the
    next collective number it all-reduces while the others wait in the barrier."""
    t = train_steps(3)
    entering("epoch end")
    if RANK == 1:
        dist.all_reduce(t)
    dist.barrier()


def missing_collective() -> None:
    """Rank 2 skips one all_reduce (an empty batch on one rank) and goes on to the broadcast."""
    t = train_steps(3)
    entering("step 3")
    if RANK != 2:
        dist.all_reduce(t)
    dist.broadcast(t, src=0)


def p2p_no_recv() -> None:
    """Pipeline stage 0 sends activations; stage 1 waits on an event instead of posting its recv."""
    t = train_steps(3)
    entering("pipeline send")
    if RANK == 0:
        dist.send(t, dst=1)
    else:
        threading.Event().wait()


def forward_thread_func(q_in: queue.Queue, q_out: queue.Queue) -> None:
    while True:
        t = q_in.get()
        try:
            if RANK == WORLD - 1 and t[0] > 1e6:
                dist.broadcast(t, src=0)
            else:
                dist.all_reduce(t)
        except Exception as e:                  # handed to the main thread, which raises it
            dump_flight_recorder()
            q_out.put(e)
            return
        q_out.put(t)


def resolve_last_batch_result(q_out: queue.Queue) -> torch.Tensor:
    result = q_out.get()
    if isinstance(result, BaseException):
        raise result
    return result


def overlap_worker() -> None:
    """SGLang's overlap scheduler: collectives run in a worker thread (``forward_thread_func``) while the
    main thread waits for their result; on the last rank the worker takes another branch."""
    q_in: queue.Queue = queue.Queue()
    q_out: queue.Queue = queue.Queue()
    threading.Thread(target=forward_thread_func, args=(q_in, q_out), daemon=True).start()
    t = torch.ones(64)
    for step in range(3):
        q_in.put(t.clone())
        resolve_last_batch_result(q_out)
        log.info("step %d done", step)
    entering("overlap batch")
    q_in.put(torch.full((64,), 2e6))
    resolve_last_batch_result(q_out)


def two_groups() -> None:
    """Ranks 1-3 form a tensor-parallel group that desyncs (rank 3 broadcasts); rank 0 trains on alone."""
    tp = dist.new_group([1, 2, 3], timeout=timedelta(seconds=TIMEOUT_S))
    t = train_steps(2)
    if RANK == 0:
        entering("solo training")
        for step in range(2, 10_000):
            time.sleep(0.5)
            log.info("step %d done", step)
        return
    for step in range(2, 4):
        dist.all_reduce(t, group=tp)
        log.info("step %d done", step)
    entering("tp sync")
    if RANK == 3:
        dist.broadcast(t, src=1, group=tp)
    else:
        dist.all_reduce(t, group=tp)


def register_buffers(store: dist.Store) -> None:
    # every rank waits for a handle no rank publishes: a registration deadlock
    store.wait([f"buffer_handle_{(RANK + 1) % WORLD}"], timedelta(seconds=TIMEOUT_S))


def all_wait() -> None:
    """Every rank waits in the same rendezvous for a key no rank sets (a registration-like deadlock)."""
    t = train_steps(3)
    store = dist.distributed_c10d._get_default_store()
    entering("buffer registration")
    register_buffers(store)
    dist.all_reduce(t)


def rank_dies() -> None:
    """Rank 2 is killed (the OOM killer's SIGKILL) between steps; the others fail on the closed pair."""
    t = train_steps(3)
    entering("step 3")
    if RANK == 2:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(t)


def healthy() -> None:
    train_steps(8)
    dist.barrier()
    log.info("training finished")


def slow() -> None:
    """Progress every 1.5 s: slow, but not stuck."""
    train_steps(3)
    entering("slow epoch")
    train_steps(10, pause_s=1.5)
    log.info("training finished")


SCENARIOS = {f.__name__: f for f in (op_mismatch, busy_rank, io_blocked, socket_recv, size_mismatch,
                                     extra_collective, missing_collective, p2p_no_recv, overlap_worker,
                                     two_groups, all_wait, rank_dies, healthy, slow)}


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s [rank{RANK}] %(message)s")
    shared = os.environ.get("FAULTHANDLER_FILE")
    if shared:
        # one file every rank appends to, like a shared stderr: the harness signals all ranks at once
        faulthandler.register(signal.SIGUSR1, file=open(shared, "a"), all_threads=True)  # noqa: SIM115
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    try:
        SCENARIOS[sys.argv[1]]()
    except Exception:
        dump_flight_recorder()
        raise
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
