"""Run a real torch.distributed job (``job.py``) under torchrun, capture it live while it hangs, keep what
it writes as the software writes it, and lay it out as an SRE's incident folder::

    <incident>/logs/job.log            torchrun's output: every rank's logging and tracebacks, the
                                       launcher's own lines and its ChildFailedError summary
    <incident>/logs/stderr-ranks.txt   faulthandler of every rank at once (SIGUSR1), interleaved
    <incident>/fr/nccl_trace_rank_<r>  Flight Recorder dumps the ranks wrote when their collective failed
    <incident>/capture.tar.gz          ``hangforensics capture --pid <torchrun> --repeat 2``

Used by tests/test_realjobs.py and runnable by hand to look at a scenario's evidence::

    python tests/realjobs/harness.py op_mismatch /tmp/incidents
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil

JOB = Path(__file__).with_name("job.py")
STEP_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ \[rank(\d+)\] (step \d+ done|entering )")


@dataclass
class JobRun:
    scenario: str
    incident: Path
    returncode: int | None
    last_progress: datetime | None           # the newest "step N done" line of any rank
    progress_by_rank: dict[int, datetime]
    capture_started: datetime | None         # local wall clock, as the job's log prints it
    capture_rc: int | None = None
    capture_stderr: str = ""
    notes: list[str] = field(default_factory=list)


def _log_progress(log: Path) -> tuple[dict[int, datetime], set[int]]:
    progress: dict[int, datetime] = {}
    entered: set[int] = set()
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return progress, entered
    for line in text.splitlines():
        m = STEP_RE.match(line)
        if not m:
            continue
        rank = int(m.group(2))
        if m.group(3).startswith("entering"):
            entered.add(rank)
        else:
            progress[rank] = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return progress, entered


def _ranks(launcher: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(launcher).children(recursive=True)
                if "job.py" in " ".join(p.cmdline())]
    except psutil.Error:
        return []


def run_job(scenario: str, root: Path, nproc: int = 4, capture: bool = True, timeout_s: float = 15.0,
            hang_after_s: float = 1.5, name: str | None = None, odd_rank: int | None = None) -> JobRun:
    """Run one scenario to its end (a hang runs into gloo's timeout), capturing it once every rank said
    ``entering`` (when ``capture``).  ``name``: the incident folder's (default the scenario's); ``odd_rank``:
    the rank the scenario singles out, where it has one."""
    incident = root / (name or scenario)
    shutil.rmtree(incident, ignore_errors=True)
    (incident / "logs").mkdir(parents=True, exist_ok=True)
    (incident / "fr").mkdir(exist_ok=True)
    log = incident / "logs" / "job.log"
    env = {**os.environ, "FR_DIR": str(incident / "fr"), "TORCH_FR_BUFFER_SIZE": "2000",
           "FAULTHANDLER_FILE": str(incident / "logs" / "stderr-ranks.txt"), "JOB_TIMEOUT_S": str(timeout_s),
           "JOB_DIR": str(incident), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1", **({"JOB_ODD_RANK": str(odd_rank)} if odd_rank is not None else {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(JOB), scenario]
    run = JobRun(name or scenario, incident, None, None, {}, None)
    with log.open("wb") as out:
        job = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            if capture:
                _capture_when_entered(job, run, log, nproc, hang_after_s)
            run.returncode = job.wait(timeout=timeout_s + 90)
        except subprocess.TimeoutExpired:
            run.notes.append("job did not end: killed")
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                run.returncode = job.wait()
            _kill_leftovers(run)
    run.progress_by_rank, _ = _log_progress(log)
    run.last_progress = max(run.progress_by_rank.values(), default=None)
    fifo = incident / "checkpoint.fifo"
    if fifo.exists():
        fifo.unlink()                          # not evidence: the scenario's own plumbing
    return run


def _capture_when_entered(job: subprocess.Popen, run: JobRun, log: Path, nproc: int, settle_s: float) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and job.poll() is None:
        _, entered = _log_progress(log)
        if len(entered) >= nproc:
            break
        time.sleep(0.2)
    else:
        run.notes.append("ranks never all entered the fault phase: no capture")
        return
    time.sleep(settle_s)                       # let every rank block where it will
    run.capture_started = datetime.now()
    p = subprocess.run([sys.executable, "-m", "hangforensics", "capture", "--pid", str(job.pid),
                        "--repeat", "2", "--interval", "1", "-o", str(run.incident / "capture.tar.gz")],
                       capture_output=True, text=True, timeout=120)
    run.capture_rc, run.capture_stderr = p.returncode, p.stderr
    # faulthandler of every rank at the same moment, into the one file they share
    ranks = _ranks(job.pid)
    for r in ranks:
        with contextlib.suppress(psutil.Error):
            r.send_signal(signal.SIGUSR1)


def _kill_leftovers(run: JobRun) -> None:
    """torchrun starts every rank in a session of its own: a rank that outlives its launcher (killed
    from outside) is found by its command line and killed, so no job outlives its test."""
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = p.info["cmdline"] or []
            if str(JOB) in cmd and (p.info["environ"] or {}).get("JOB_DIR") == str(run.incident):
                p.kill()
                run.notes.append(f"rank pid {p.pid} outlived its launcher: killed")
        except psutil.Error:
            continue


def manifest(run: JobRun) -> dict | None:
    bundle = run.incident / "capture.tar.gz"
    if not bundle.exists():
        return None
    with tarfile.open(bundle) as t:
        for m in t:
            if m.name.endswith("manifest.json"):
                f = t.extractfile(m)
                return json.loads(f.read()) if f else None
    return None


def report(run: JobRun) -> dict:
    """``hangforensics report <incident> --json``, as an SRE runs it: the findings document."""
    out = run.incident.parent / f"{run.scenario}.json"
    p = subprocess.run([sys.executable, "-m", "hangforensics", "report", str(run.incident), "-o",
                        str(run.incident.parent / f"{run.scenario}.html"), "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"report failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(out.read_text())


if __name__ == "__main__":
    name, where = sys.argv[1], Path(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    r = run_job(name, where, nproc=n, capture=name not in ("size_mismatch", "rank_dies", "healthy"))
    print(r)
    doc = report(r)
    for e in doc["engines"]:
        print(e["engine"], "|", e.get("verdict"))
    for f in doc["findings"]:
        print(f["rule"], f["ranks"], f["ts"], "|", f["title"])
