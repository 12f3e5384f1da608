"""Small process trees that hang the way SGLang scheduler ranks do, for tests/test_capture.py.

Run as a script (never imported by the tests):

    python capture_targets.py tree MODE INFO_JSON READY_DIR     the "server": a TCP listener and 4 ranks
    python capture_targets.py rank MODE N READY_DIR             one rank, titled sglang::scheduler_TP<N>

MODE ``symm``: every rank blocks for ever in ``recvmsg`` on a Unix socket inside the symmetric-memory
registration path (the seed incident: no peer ever answers).  MODE ``desync``: TP2 sits in an all-reduce
of the HiCache abort path (``_all_reduce_attn_groups``, here a ``time.sleep``) while the other ranks wait
in the per-iteration ``recv_requests`` broadcast (a ``recvmsg``): ranks in different collectives.

MODE ``rendezvous``: every rank blocks for ever in ``recvmsg`` while exchanging shared-memory fds at start-up
(``ShmBroadcastRendezvous.exchange_shm_fds``), outside any collective: the hang of shared/formats'
``recvmsg_all_ranks``.

MODE ``idle``: TP0 loops in ``on_idle`` (a little CPU each turn, so it moves between snapshots) and never comes
back to the ``recv_requests`` broadcast the other ranks wait in: one snapshot cannot tell this from a starving
idle loop; repeated snapshots show TP1-3 unchanged while TP0 never returns (reference/incidents.md §2).

With ``CAPTURE_VICTIM=TP<N>`` and ``CAPTURE_EXIT_FLAG=PATH`` that rank exits by itself as soon as PATH
exists: a process that dies in the middle of a capture.  The server reaps its ranks (a thread per rank
waits on it), so no zombie is left behind.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import setproctitle

SERVER_TITLE = ("python3 -m sglang.launch_server --model-path /models/fake-70b --tp-size 4 --enable-symm-mem "
                "--api-key sk-test-secret-123 --port {port}")

BATCH_LINE = ("Decode batch, #running-req: 12, #token: 8400, token usage: 0.05, cuda graph: True, "
              "gen throughput (token/s): 512.40, #queue-req: 0")


def log(rank: str, msg: str) -> None:
    prefix = time.strftime("%Y-%m-%d %H:%M:%S") + (f" {rank}" if rank else "")
    sys.stdout.write(f"[{prefix}] {msg}\n")
    sys.stdout.flush()


# -- the rank's call paths: function names are what py-spy shows and the rules key on -----------------

def register_segments(sock: socket.socket) -> None:
    sock.recvmsg(1024, socket.CMSG_LEN(4 * 4))          # the fd exchange whose message never comes


class SymmetricMemoryContext:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def __enter__(self) -> SymmetricMemoryContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self._register_segments_for_comm()

    def _register_segments_for_comm(self) -> None:
        register_segments(self.sock)


def broadcast(sock: socket.socket) -> None:
    sock.recvmsg(1024)                                  # waits for the leader's next iteration


def broadcast_pyobj(sock: socket.socket) -> None:
    broadcast(sock)


def all_reduce(seconds: float) -> None:
    time.sleep(seconds)                                 # the collective no other rank entered


class HiCacheController:
    def _all_reduce_attn_groups(self) -> None:
        all_reduce(3600)

    def abort_prefetch(self) -> None:
        self._all_reduce_attn_groups()


def _recv_fds(sock: socket.socket) -> None:
    sock.recvmsg(1024, socket.CMSG_LEN(4 * 4))          # every peer's fd: the rendezvous never replies


class ShmBroadcastRendezvous:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def exchange_shm_fds(self) -> None:
        _recv_fds(self.sock)


def init_shm_broadcast(sock: socket.socket) -> None:
    ShmBroadcastRendezvous(sock).exchange_shm_fds()


class ModelRunner:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def forward(self) -> None:
        with SymmetricMemoryContext(self.sock):
            pass


class Scheduler:
    def __init__(self, rank: int, mode: str, ready: Path) -> None:
        self.rank, self.mode, self.ready = rank, mode, ready
        self.sock, self.peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def signal_ready(self) -> None:
        (self.ready / f"TP{self.rank}").touch()

    def run_batch(self) -> None:
        ModelRunner(self.sock).forward()

    def recv_requests(self) -> None:
        broadcast_pyobj(self.sock)

    def abort_timed_out_prefetch(self) -> None:
        HiCacheController().abort_prefetch()

    def process_batch_result(self) -> None:
        self.abort_timed_out_prefetch()

    def event_loop_normal(self) -> None:
        for _ in range(3):
            log(f"TP{self.rank}", BATCH_LINE)
        self.signal_ready()
        self.run_batch()

    def on_idle(self) -> None:
        # ~40 % of a core: it runs, it is not blocked (and stays clearly above a blocked rank's CPU under load)
        busy_until = time.monotonic() + 0.004
        while time.monotonic() < busy_until:
            pass
        time.sleep(0.006)

    def event_loop_idle(self) -> None:
        log(f"TP{self.rank}", BATCH_LINE)
        self.signal_ready()
        if self.rank == 0:
            while True:
                self.on_idle()
        self.recv_requests()

    def init_rendezvous(self) -> None:
        log(f"TP{self.rank}", "Init torch distributed ends. elapsed=3.1 s, mem usage=0.7 GB")
        self.signal_ready()
        init_shm_broadcast(self.sock)

    def event_loop_overlap(self) -> None:
        log(f"TP{self.rank}", BATCH_LINE)
        self.signal_ready()
        if self.rank == 2:
            self.process_batch_result()
        else:
            self.recv_requests()


class HealthPoller(threading.Thread):
    """A helper thread that stays healthy (idle in poll) while the main thread hangs."""

    def __init__(self) -> None:
        super().__init__(name="HealthPoller", daemon=True)
        self.r, self.w = os.pipe()

    def run(self) -> None:
        p = select.poll()
        p.register(self.r, select.POLLIN)
        while True:
            p.poll(1000)


def exit_when_flagged(flag: Path) -> None:
    while not flag.exists():
        time.sleep(0.01)
    os._exit(0)


def run_rank(mode: str, rank: int, ready: Path) -> None:
    setproctitle.setproctitle(f"sglang::scheduler_TP{rank}")
    HealthPoller().start()
    if os.environ.get("CAPTURE_VICTIM") == f"TP{rank}":
        threading.Thread(target=exit_when_flagged, args=(Path(os.environ["CAPTURE_EXIT_FLAG"]),),
                         daemon=True).start()
    s = Scheduler(rank, mode, ready)
    if mode == "symm":
        s.event_loop_normal()
    elif mode == "idle":
        s.event_loop_idle()
    elif mode == "rendezvous":
        s.init_rendezvous()
    else:
        s.event_loop_overlap()


def serve_forever(srv: socket.socket) -> None:
    while True:
        time.sleep(0.2)


def run_tree(mode: str, info: Path, ready: Path) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    setproctitle.setproctitle(SERVER_TITLE.format(port=srv.getsockname()[1]))
    ranks = {}
    for n in range(4):
        child = subprocess.Popen([sys.executable, __file__, "rank", mode, str(n), str(ready)])
        ranks[f"TP{n}"] = child.pid
        threading.Thread(target=child.wait, daemon=True).start()
    tmp = info.with_suffix(".tmp")
    tmp.write_text(json.dumps({"parent": os.getpid(), "port": srv.getsockname()[1], "ranks": ranks}))
    tmp.rename(info)
    log("", "The server is fired up and ready to roll!")
    serve_forever(srv)


if __name__ == "__main__":
    if sys.argv[1] == "tree":
        run_tree(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        run_rank(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
