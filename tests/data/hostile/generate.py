"""Generate the hostile / broken evidence corpus (deterministic): ``python generate.py``.

Evidence comes from machines that were failing.  Each file here is one way it arrives broken; the
engine ``damaged-stall`` is a real stall (stall-onset, watchdog, /health blind) whose files carry the
damage, so a test can check that the result for the rest stays complete.
"""

from __future__ import annotations

import gzip
import random
import shutil
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLEET = HERE / "fleet"
T0 = datetime(2026, 11, 20, 9, 50, 0)


def ts(s: float) -> str:
    return (T0 + timedelta(seconds=s)).strftime("%Y-%m-%d %H:%M:%S")


def batch(s: float, rank: str, running: int = 6) -> str:
    return (f"[{ts(s)} {rank}] Decode batch, #running-req: {running}, #token: {running * 700}, token usage: 0.03, "
            f"cuda graph: True, gen throughput (token/s): 480.12, #queue-req: 0")


def access(s: float, port: int, path: str = "/health", status: int = 200, method: str = "GET") -> str:
    phrase = {200: "OK", 503: "Service Unavailable"}[status]
    return f'[{ts(s)}] INFO:     10.1.2.3:{port} - "{method} {path} HTTP/1.1" {status} {phrase}'


def damaged_stall() -> dict[str, bytes]:
    """A TP2 engine that serves, then freezes with work pending; its log carries every kind of damage."""
    lines: list[str] = [f"[{ts(0)}] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tp_size=2, "
                        f"watchdog_timeout=300)",
                        f"[{ts(1)} TP0] Init torch distributed ends. elapsed=3.1 s, mem usage=0.7 GB",
                        f"[{ts(1)} TP1] Init torch distributed ends. elapsed=3.1 s, mem usage=0.7 GB",
                        f"[{ts(2)}] The server is fired up and ready to roll!"]
    port = 50000
    for s in range(10, 300, 2):
        lines.append(batch(s, "TP0"))
        port += 1
        lines.append(access(s, port, "/generate", 200, "POST"))
        if s % 10 == 0:
            port += 1
            lines.append(access(s, port))
    # a clock that stepped back (NTP): three minutes of lines dated an hour earlier, then back again
    for s in range(300, 310, 2):
        lines.append(batch(s - 3600, "TP0"))
    # interleaved output of two processes: a rank's batch line cut into by the main process's access line
    lines.append(batch(310, "TP0")[:60] + access(310, 49999, "/generate", 200, "POST"))
    lines.append(batch(312, "TP0"))
    # markup and a prompt in log text: shown as text, redacted in reports
    lines.append(f"[{ts(313)}] Receive: obj=GenerateReqInput(rid='r-77', text='<script>window.__pwned=1</script> "
                 f"summarise the patient record of Jane Doe', sampling_params={{'max_new_tokens': 64}})")
    for s in range(314, 330, 2):
        lines.append(batch(s, "TP0"))
    # the freeze: requests keep arriving, /health keeps answering 200, no batch line follows
    for s in range(332, 700, 3):
        port += 1
        lines.append(access(s, port, "/generate", 200, "POST"))
        if s % 10 == 0:
            port += 1
            lines.append(access(s, port))
    for rank in ("TP0", "TP1"):
        lines += [f"[{ts(640)} {rank}] Scheduler debug info:",
                  "scheduler.cur_batch.batch_size()=6",
                  "scheduler.cur_batch.reqs=[Req(rid=r-77, input_ids=[101, 2023, 2003], output_ids=[1])]",
                  f"[{ts(640)} {rank}] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)",
                  ""]
    text = "\n".join(lines) + "\n"
    raw = text.encode()
    # a run of NUL bytes in the middle (a crash left a hole), and bytes that are not UTF-8
    cut = raw.index(b"\n", len(raw) // 3) + 1
    raw = raw[:cut] + b"\x00" * 4096 + raw[cut:]
    cut = raw.index(b"\n", 2 * len(raw) // 3) + 1
    raw = raw[:cut] + f"[{ts(200)} TP0] Decode batch, ".encode() + b"\xff\xfe\xc3\x28 junk\n" + raw[cut:]
    # CRLF on a stretch of lines (a Windows copy of part of the log)
    crlf_from = raw.index(b"\n", len(raw) // 2) + 1
    crlf_to = raw.index(b"\n", crlf_from + 2000) + 1
    raw = raw[:crlf_from] + raw[crlf_from:crlf_to].replace(b"\n", b"\r\n") + raw[crlf_to:]

    older = "\n".join(batch(s - 86400, "TP0") for s in range(0, 4000, 2)) + "\n"
    gz = gzip.compress(older.encode(), mtime=0)
    files = {
        "server.log": raw,
        "server.log.1.gz": gz[: len(gz) * 2 // 3],            # the rotation copy was cut off
        # py-spy dump of TP0 cut mid-thread (and mid-line)
        "captures/pyspy-tp0.txt": (
            b"Process 4101: sglang::scheduler_TP0\nPython v3.12.3 (/usr/bin/python3.12)\n\n"
            b'Thread 4101 (idle): "MainThread"\n    recvmsg (libc.so.6)\n'
            b"    ncclCommWindowRegister (libnccl.so.2)\n"
            b"    _register_segments_for_comm (sglang/srt/distributed/device_communicators/pynccl_allo"),
        # two ranks' py-spy dumps written to one file at once, line by line
        "captures/pyspy-both.txt": _interleaved_dumps(),
        # gdb cut off mid-frame
        "captures/gdb-tp1.txt": (
            b"[New LWP 4102]\n[Thread debugging using libthread_db enabled]\n"
            b'Thread 1 (Thread 0x7f00 (LWP 4102) "python3"):\n'
            b"#0  0x00007f0e in recvmsg () from /lib/x86_64-linux-gnu/libc.so.6\n"
            b"#1  0x00007f0f in ncclCommWindowRegister () from /usr/lib/libnccl.so.2\n#2  0x00007f1"),
        # nvidia-smi samples with junk rows
        "gpu/smi.csv": (
            "timestamp, index, utilization.gpu [%], power.draw [W], memory.used [MiB]\n"
            f"{(T0 + timedelta(seconds=400)):%Y/%m/%d %H:%M:%S}.000, 0, 0 %, 61.20 W, 70000 MiB\n"
            f"{(T0 + timedelta(seconds=400)):%Y/%m/%d %H:%M:%S}.000, 1, [N/A], [Not Supported], 70000 MiB\n"
            "garbage,,,\n"
            f"{(T0 + timedelta(seconds=401)):%Y/%m/%d %H:%M:%S}.000, 0, 999999999999 %, -5 W, x MiB\n").encode(),
    }
    return files


def _interleaved_dumps() -> bytes:
    a = ['Process 4101: sglang::scheduler_TP0', 'Python v3.12.3 (/usr/bin/python3.12)', '',
         'Thread 4101 (idle): "MainThread"', '    all_reduce (torch/distributed/distributed_c10d.py:2501)',
         '    Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)']
    b = ['Process 4102: sglang::scheduler_TP1', 'Python v3.12.3 (/usr/bin/python3.12)', '',
         'Thread 4102 (idle): "MainThread"', '    broadcast (torch/distributed/distributed_c10d.py:2700)',
         '    Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)']
    out = []
    for x, y in zip(a, b, strict=True):
        out += [x, y]
    return ("\n".join(out) + "\n").encode()


def junk() -> dict[str, bytes]:
    """An engine folder of things that are not evidence at all."""
    rnd = random.Random(5)
    nginx = "\n".join(f'10.0.0.{i} - - [20/Nov/2026:10:00:{i:02d} +0000] "GET /index.html HTTP/1.1" 200 612 "-" '
                      f'"<img src=x onerror=alert(1)>"' for i in range(40)) + "\n"
    return {
        "core.4101": bytes(rnd.getrandbits(8) for _ in range(4096)),
        "empty.log": b"",
        "nginx-access.log": nginx.encode(),
        "only-nuls.bin": b"\x00" * 2048,
    }


def copytruncated() -> dict[str, bytes]:
    """logrotate copytruncate while the writer kept its offset: the live file starts with a NUL hole."""
    lines = [batch(s, "TP0") for s in range(0, 120, 2)]
    return {"server.log": b"\x00" * 70000 + ("\n".join(lines) + "\n").encode()}


def main() -> None:
    if FLEET.exists():
        shutil.rmtree(FLEET)
    for engine, files in (("damaged-stall", damaged_stall()), ("junk", junk()), ("copytruncated", copytruncated())):
        for rel, data in files.items():
            p = FLEET / engine / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)


if __name__ == "__main__":
    main()
