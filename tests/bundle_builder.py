"""Capture bundles written by hand, the way ``hangforensics capture`` lays them out (no process, no py-spy).

For scenarios a live process tree cannot make deterministic: a rank that alternates between two
functions, a driver wait in state D, a 100 % spin, the incident of reference/incidents.md §2.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hangforensics.capture.manifest import (
    CaptureOptions,
    DumpRecord,
    Failure,
    HostInfo,
    Manifest,
    ProcessEntry,
    ProcessFacts,
    Round,
    TargetInfo,
    ToolInfo,
)

ZONE = timezone(timedelta(hours=5, minutes=30))     # not the test machine's: the wall clock must be the host's
T0 = datetime(2026, 11, 30, 10, 2, 11, 250000, tzinfo=ZONE)

# call paths, outermost first (py-spy prints innermost first)
BROADCAST = ["<module>", "run_scheduler_process", "Scheduler.event_loop_overlap", "Scheduler.recv_requests",
             "broadcast_pyobj", "broadcast"]
ON_IDLE = ["<module>", "run_scheduler_process", "Scheduler.event_loop_overlap", "Scheduler.on_idle"]
SELF_CHECK = [*ON_IDLE, "Scheduler.self_check_during_idle"]
SYMM = ["<module>", "run_scheduler_process", "Scheduler.event_loop_normal", "ModelRunner.forward",
        "SymmetricMemoryContext.__exit__", "SymmetricMemoryContext._register_segments_for_comm"]


@dataclass
class At:
    """One rank at one round: where its main thread is and what /proc says."""

    frames: list[str] | None            # None: no dump this round (py-spy failed)
    state: str = "S"
    wchan: str | None = "unix_stream_read_generic"
    cpu: float = 1.0                    # main-thread CPU seconds so far
    idle: bool = True                   # py-spy's flag


@dataclass
class Bundle:
    ranks: dict[str, list[At]]          # rank -> one At per round
    interval_s: float = 5.0
    engine: str = "gpu7-decode"
    failures: list[Failure] = field(default_factory=list)
    proc_files: bool = True
    rank_gap_ms: int = 1                # one round reads rank after rank: how far apart

    def write(self, where: Path) -> Path:
        """Write the bundle's engine folder under ``where``; return it."""
        eng = where / self.engine
        n_rounds = max(len(v) for v in self.ranks.values())
        pids = {rank: 4100 + i for i, rank in enumerate(self.ranks)}
        rounds = []
        for k in range(1, n_rounds + 1):
            started = T0 + timedelta(seconds=self.interval_s * (k - 1))
            dumps, facts, rows = [], [], []
            for i, (rank, ats) in enumerate(self.ranks.items()):
                if k > len(ats):
                    continue
                at, pid = ats[k - 1], pids[rank]
                taken = started + timedelta(milliseconds=2 + i * self.rank_gap_ms)
                facts.append(ProcessFacts(pid, taken, state=at.state, cpu_user_s=at.cpu + 3.0, cpu_system_s=0.5,
                                          wchan=at.wchan, syscall="recvmsg" if at.wchan else "running",
                                          threads=2, main_cpu_s=at.cpu))
                rows.append({"pid": pid, "label": rank, "role": "scheduler", "rank": rank,
                             "taken": taken.isoformat(), "gone": False, "state": at.state,
                             "cpu_user_s": at.cpu + 3.0, "cpu_system_s": 0.5, "main_cpu_s": at.cpu,
                             "wchan": at.wchan, "threads": 2, "thread_states": {at.state: 1, "S": 1},
                             "thread_wchans": {at.wchan or "-": 1}, "thread_list": [
                                 {"tid": pid, "comm": "sglang::schedul", "state": at.state, "wchan": at.wchan,
                                  "cpu_s": at.cpu}]})
                gap = i * self.rank_gap_ms
                start, end = started + timedelta(milliseconds=20 + gap), started + timedelta(milliseconds=90 + gap)
                rel = f"pyspy/round{k}/{rank}-{pid}.txt"
                if at.frames is None:
                    dumps.append(DumpRecord(k, pid, rank, rank, "scheduler", False, None, None, start, end, False,
                                            1, reason=f"py-spy dump of pid {pid} ({rank}) failed"))
                    continue
                dumps.append(DumpRecord(k, pid, rank, rank, "scheduler", True, rel, None, start, end, False, 0))
                self._dump(eng / rel, pid, rank, at, end)
            if self.proc_files:
                proc = eng / f"proc/round{k}.json"
                proc.parent.mkdir(parents=True, exist_ok=True)
                proc.write_text(json.dumps({"round": k, "started": started.isoformat(), "processes": rows},
                                           indent=2) + "\n")
            rounds.append(Round(k, started, started + timedelta(milliseconds=200),
                                f"proc/round{k}.json" if self.proc_files else None, tuple(dumps), tuple(facts)))
        manifest = Manifest(
            1, self.engine, HostInfo("gpu7", "6.8.0", "x86_64", 0, "1"),
            ("hangforensics", "capture", "--port", "30000", "--repeat", str(n_rounds)), "0.1.0", T0,
            T0 + timedelta(seconds=self.interval_s * n_rounds), TargetInfo("port", "30000", 4000, "sglang"),
            CaptureOptions(False, n_rounds, self.interval_s, 120.0, 20000),
            (ToolInfo("py-spy", "0.4.3", "/usr/bin/py-spy"), ToolInfo("nvidia-smi", None, None, "not on PATH")),
            tuple(ProcessEntry(pid, 4000, f"sglang::scheduler_{rank}", "scheduler", rank, rank, "/usr/bin/python3",
                               True, T0 - timedelta(hours=1)) for rank, pid in pids.items()),
            tuple(rounds), None, (), tuple(self.failures))
        (eng / "manifest.json").write_text(manifest.to_json())
        return eng

    @staticmethod
    def _dump(path: Path, pid: int, rank: str, at: At, taken: datetime) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"Process {pid}: sglang::scheduler_{rank}", "Python v3.12.3 (/usr/bin/python3.12)", "",
                 f'Thread {pid} ({"idle" if at.idle else "active"}): "MainThread"']
        lines += [f"    {fn} (sglang/srt/managers/scheduler.py:{100 + i})" for i, fn in enumerate(reversed(at.frames))]
        path.write_text("\n".join(lines) + "\n")
        # a file time far from the capture: only the manifest may date the dump
        old = (taken - timedelta(days=3)).timestamp()
        os.utime(path, (old, old))
