"""Shared test helpers: paths, a tiny SGLang log writer for rule scenarios, and an analyze helper."""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from hangforensics.analysis.findings import run_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SHARED = Path(os.environ.get("HANGFORENSICS_SHARED", REPO.parent / "shared"))
EXAMPLES = SHARED / "examples"


def requires_shared() -> pytest.MarkDecorator:
    return pytest.mark.skipif(not (EXAMPLES / "fleet").is_dir() and not os.environ.get("CI"),
                              reason="../shared is not beside the repository")


class LogWriter:
    """Writes SGLang 0.5.10-style server logs for rule scenarios (seconds relative to a start time)."""

    def __init__(self, start: str = "2026-05-01 10:00:00", tp: int = 4) -> None:
        self.t0 = datetime.strptime(start, "%Y-%m-%d %H:%M:%S")
        self.lines: list[str] = []
        self.tp = tp
        self.port = 40000

    def ts(self, s: float) -> str:
        return (self.t0 + timedelta(seconds=s)).strftime("%Y-%m-%d %H:%M:%S")

    def raw(self, text: str) -> LogWriter:
        self.lines.append(text)
        return self

    def line(self, s: float, msg: str, rank: str = "") -> LogWriter:
        self.lines.append(f"[{self.ts(s)}{' ' + rank if rank else ''}] {msg}")
        return self

    def startup(self, s: float = 0, **args: object) -> LogWriter:
        kv = {"model_path": "'Qwen/Qwen2.5-72B-Instruct'", "tp_size": self.tp, "watchdog_timeout": 300,
              "enable_symm_mem": False, **{k: repr(v) if isinstance(v, str) else v for k, v in args.items()}}
        self.line(s, "server_args=ServerArgs(" + ", ".join(f"{k}={v}" for k, v in kv.items()) + ")")
        for r in range(self.tp):
            self.line(s + 1, "Init torch distributed ends. elapsed=3.1 s, mem usage=0.7 GB", f"TP{r}")
        self.line(s + 2, "The server is fired up and ready to roll!")
        return self

    def batch(self, s: float, rank: str = "TP0", kind: str = "Decode", running: int = 4, queue: int = 0,
              extra: str = "") -> LogWriter:
        if kind == "Decode":
            body = (f"#running-req: {running}, #token: {running * 700}, token usage: 0.02, {extra}cuda graph: True, "
                    f"gen throughput (token/s): 512.40, #queue-req: {queue}")
        else:
            body = (f"#new-seq: 1, #new-token: 512, #cached-token: 0, token usage: 0.02, #running-req: {running}, "
                    f"#queue-req: {queue}, {extra}cuda graph: False, input throughput (token/s): 4100.20")
        return self.line(s, f"{kind} batch, {body}", rank)

    def access(self, s: float, path: str = "/health", status: int = 200, method: str = "GET") -> LogWriter:
        self.port += 1
        phrase = {200: "OK", 503: "Service Unavailable"}.get(status, "")
        return self.line(s, f'INFO:     10.1.2.3:{self.port} - "{method} {path} HTTP/1.1" {status} {phrase}'.rstrip())

    def traffic(self, a: float, b: float, ranks: tuple[str, ...] = ("TP0",), step: float = 1.0) -> LogWriter:
        """Busy serving from a to b: batch lines per logging rank, POSTs and probes."""
        s = a
        while s <= b:
            for r in ranks:
                self.batch(s, r)
            if int(s) % 2 == 0:
                self.access(s, "/v1/chat/completions", 200, "POST")
            if int(s) % 10 == 0:
                self.access(s, "/health")
            s += step
        return self

    def posts(self, a: float, b: float, every: float = 3.0) -> LogWriter:
        s = a
        while s <= b:
            self.access(s, "/generate", 200, "POST")
            s += every
        return self

    def probes(self, a: float, b: float, status: int = 200, every: float = 10.0) -> LogWriter:
        s = a
        while s <= b:
            if status != 200:
                self.line(s, "Health check failed. Server couldn't get a response from detokenizer for last 20 "
                             "seconds. tic start time: 10:00:00. last_heartbeat time: 10:00:00")
            self.access(s, "/health", status)
            s += every
        return self

    def watchdog(self, s: float, rank: str, soft: bool = False, batch_size: int = 6, pyspy_s: float = 0.0
                 ) -> LogWriter:
        """A 0.5.10 watchdog dump fired at ``s``; its timeout line follows ``pyspy_s`` later (py-spy's run)."""
        self.line(s, "Scheduler debug info:", rank)
        self.raw(f"scheduler.cur_batch.batch_size()={batch_size}")
        self.raw("scheduler.cur_batch.reqs=[Req(rid=abc, input_ids=[1, 2, 3], output_ids=[4, 5])]")
        self.raw("self.max_total_num_tokens=372965, available_size=261871, evictable_size=105150, "
                 "protected_size=0, session_held=0")
        self.line(s, "Pyspy dump for PID 1004:", rank)
        self.raw(f"Process 1004: sglang::scheduler_{rank.replace(' ', '_')}")
        self.raw("Python v3.12.3 (/usr/bin/python3.12)")
        self.raw("")
        self.raw('Thread 1004 (idle): "MainThread"')
        self.raw("    recvmsg (libc.so.6)")
        self.raw("    ncclCommWindowRegister (libnccl.so.2)")
        self.raw("    _register_segments_for_comm (sglang/srt/distributed/device_communicators/pynccl_allocator.py:417)")
        self.raw("    Scheduler.event_loop_overlap (sglang/srt/managers/scheduler.py:1052)")
        self.line(s + pyspy_s, f"Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft={soft})", rank)
        self.raw("")
        return self

    def idle_leak(self, s: float, rank: str) -> LogWriter:
        self.line(s, "Scheduler hit an exception: Traceback (most recent call last):", rank)
        self.raw('  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2730, in run_scheduler_process')
        self.raw("    scheduler.event_loop_overlap()")
        self.raw('  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler_runtime_checker_mixin.py", line 150, in self_check_during_idle')
        self.raw("    raise ValueError(msg)")
        self.raw("ValueError: token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens=295566, "
                 "available_size=290000, evictable_size=0, protected_size=0, session_held=0")
        self.raw("")
        return self

    def nccl_timeout(self, s: float, rank: int, seq: int = 1558546) -> LogWriter:
        t = self.t0 + timedelta(seconds=s)
        stamp = f"E{t.month}{t.day:02d} {t:%H:%M:%S}.634054422"
        self.raw(f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:709] [Rank {rank}] Watchdog caught collective "
                 f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=387072, NumelOut=387072, "
                 f"Timeout(ms)=240000) ran for 240119 milliseconds before timing out.")
        self.raw(f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:1493] [PG ID 4 PG GUID 7 Rank {rank}]  failure detected "
                 f"by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last completed work: {seq - 1}")
        return self

    def write(self, folder: Path, name: str = "server.log") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("\n".join(self.lines) + "\n", encoding="utf-8")
        return folder


def small_fleet(tmp_path: Path) -> Path:
    """Two engines: one stalls (hard watchdogs fire on both ranks in one second), one serves to the end."""
    fleet = tmp_path / "fleet"
    stalled = LogWriter(tp=2)
    stalled.startup().traffic(10, 200).posts(202, 560).probes(205, 560)
    for r in range(2):
        stalled.watchdog(520, f"TP{r}")
    stalled.write(fleet / "gpu1-stalled")
    LogWriter(start="2026-05-01 11:00:00").startup().traffic(10, 300).write(fleet / "gpu2-healthy")
    return fleet


def analyze_folder(folder: Path, mode: str = "auto") -> list[dict]:
    """Ingest a folder into an in-memory store and return the findings."""
    with Store(":memory:") as st:
        ingest_paths(st, [folder], mode=mode)
        return run_rules(st)


def by_rule(findings: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in findings:
        out.setdefault(f["rule"], []).append(f)
    return out


@pytest.fixture
def log() -> LogWriter:
    return LogWriter()


CHROMIUM = os.environ.get("HANGFORENSICS_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="session")
def open_in_chromium():
    """Open an HTML file in headless Debian Chromium (offline); return (page, what it saw): dialogs, console
    errors and warnings, page errors, and network requests ('request: URL').  Fails, not skips, in CI."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("playwright is not installed")
    executable = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if not executable:
        if os.environ.get("CI"):
            pytest.fail("Chromium is required in CI (apt-get install chromium)")
        pytest.skip("chromium is not installed")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])

        def open_(html: Path):
            page = browser.new_page(viewport={"width": 1280, "height": 1600})
            seen: list[str] = []
            page.on("dialog", lambda d: (seen.append(f"dialog: {d.message}"), d.dismiss()))
            page.on("console", lambda m: seen.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: seen.append(f"pageerror: {e}"))
            page.on("request", lambda r: seen.append(f"request: {r.url}") if not r.url.startswith("file:") else None)
            page.goto(html.resolve().as_uri())
            page.wait_for_load_state("load")
            return page, seen

        yield open_
        browser.close()


@pytest.fixture(scope="session")
def ray_cluster():
    """One single-node Ray (2 CPUs) for the whole test session: starting one costs seconds.  Yields its
    address (for ``--ray-address``); a RayExecutor in this process uses the connection as it is."""
    from hangforensics.fleet.ray_executor import ray_connection

    # the s3:// staging test talks to a loopback server only: the AWS SDK must not ask the EC2 metadata
    # address for credentials or a region (set before Ray starts, so its workers inherit it)
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    with ray_connection(num_cpus=2) as ray:
        yield ray.get_runtime_context().gcs_address
