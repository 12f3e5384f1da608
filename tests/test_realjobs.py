"""Real torch.distributed jobs (torch's CPU build, gloo, torchrun) hung, killed or run healthy on purpose,
captured live with ``hangforensics capture --repeat 2`` while they hang, then left to time out and write
their own evidence (tests/realjobs/harness.py).  Each incident folder is reported as an SRE would
(``hangforensics report <incident>``) and its verdict checked against what the scenario did:

* the rule and the odd rank(s) that interface.md §3 gives the failure family;
* the finding's time between the job's progress stopping and the capture;
* nothing else: no hang rule on a crash, nothing at all on a healthy or slow job;
* every rank of the job labelled ``rankN`` by the capture.

Nothing is mocked: every log line, Flight Recorder dump, py-spy dump and launcher summary is what torch,
gloo, torchrun and py-spy wrote.  The jobs take about 20 s each (gloo timeout 12 s).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from realjobs.harness import JobRun, manifest, report, run_job

HANG_RULES = {"collective-desync", "first-rank-stopped", "all-ranks-frozen", "stall-onset",
              "stuck-across-snapshots"}
TIMEOUT_S = 12.0


@dataclass(frozen=True)
class Scenario:
    name: str
    nproc: int
    rule: str | None                 # the finding the failure family gives; None: no hang finding
    ranks: tuple[str, ...] = ()      # its odd / absent / frozen ranks
    capture: bool = True
    job: str | None = None           # the scenario job.py runs, when the name is a variant's
    odd_rank: int | None = None      # the rank the scenario singles out, where it has one


SCENARIOS = [
    Scenario("op_mismatch", 4, "collective-desync", ("rank3",)),
    Scenario("extra_collective", 4, "collective-desync", ("rank1",)),
    Scenario("missing_collective", 3, "collective-desync", ("rank2",)),
    Scenario("overlap_worker", 4, "collective-desync", ("rank3",)),
    Scenario("two_groups", 4, "collective-desync", ("rank3",)),
    Scenario("busy_rank", 4, "first-rank-stopped", ("rank2",)),
    Scenario("io_blocked", 4, "first-rank-stopped", ("rank1",)),
    Scenario("socket_recv", 4, "first-rank-stopped", ("rank0",)),
    Scenario("p2p_no_recv", 2, "first-rank-stopped", ("rank1",)),
    Scenario("all_wait", 4, "all-ranks-frozen", ("rank0", "rank1", "rank2", "rank3")),
    Scenario("size_mismatch", 4, None, capture=False),
    Scenario("rank_dies", 4, None, capture=False),
    Scenario("healthy", 2, None, capture=False),
    Scenario("slow", 3, None),
    # the same families at other rank counts and with another odd rank: more ranks time out further apart,
    # and torchrun stops the slower ones before their own timeout writes a Flight Recorder dump
    Scenario("op_mismatch_6ranks_rank0", 6, "collective-desync", ("rank0",), job="op_mismatch", odd_rank=0),
    Scenario("busy_rank_3ranks", 3, "first-rank-stopped", ("rank1",), job="busy_rank", odd_rank=1),
]
DIED_RE = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\n\s*exitcode\s*:\s*(-?\d+)")


@pytest.fixture(scope="module")
def incidents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("realjobs")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _run(s: Scenario, root: Path) -> tuple[JobRun, dict]:
    run = run_job(s.job or s.name, root, nproc=s.nproc, capture=s.capture, timeout_s=TIMEOUT_S, name=s.name,
                  odd_rank=s.odd_rank)
    assert not [n for n in run.notes if "never all entered" in n], run.notes
    return run, report(run)


def _assert_capture_labels(run: JobRun, nproc: int) -> None:
    """``capture --pid <torchrun>`` found the whole job and labelled every rank by its RANK, with dumps
    of each in both rounds."""
    m = manifest(run)
    assert m is not None, run.capture_stderr
    ranks = sorted(p["rank"] for p in m["processes"] if p.get("rank"))
    assert ranks == [f"rank{i}" for i in range(nproc)], (ranks, run.capture_stderr)
    for r in m["rounds"]:
        assert {f"rank{i}" for i in range(nproc)} <= {d["label"] for d in r["dumps"] if d.get("ok")}


def _dead_ranks(run: JobRun) -> dict[str, int]:
    """The launcher's own account: rank -> exit code, of the ranks a signal killed other than its own
    SIGTERM (the peers that then failed on the closed connection exit with 1)."""
    text = (run.incident / "logs" / "job.log").read_text(errors="replace")
    return {f"rank{r}": int(code) for r, code in DIED_RE.findall(text) if int(code) < 0 and int(code) != -15}


@pytest.mark.parametrize("s", SCENARIOS, ids=lambda s: s.name)
def test_real_job_verdict(s: Scenario, incidents: Path) -> None:
    run, doc = _run(s, incidents)
    findings = doc["findings"]
    (engine,) = doc["engines"]                           # one incident folder is one engine
    assert engine["engine"] == s.name
    assert engine.get("verdict"), "never silent"
    hang = [f for f in findings if f["rule"] in HANG_RULES]
    if s.capture:
        _assert_capture_labels(run, s.nproc)
    if s.rule is None:
        assert not hang, [(f["rule"], f["ranks"], f["title"]) for f in hang]
        assert not [f for f in findings if f["severity"] in ("critical", "warning")], findings
        if s.name in ("size_mismatch", "rank_dies"):
            dead = _dead_ranks(run)
            assert dead, "the launcher named no rank that died"
            for rank in dead:
                assert rank in engine["verdict"], (rank, engine["verdict"])
            sig = {-6: "SIGABRT", -9: "SIGKILL"}
            assert any(sig.get(c, f"exit code {c}") in engine["verdict"] for c in dead.values()), engine["verdict"]
        return
    got = [f for f in findings if f["rule"] == s.rule]
    assert len(got) == 1, [(f["rule"], f["ranks"], f["title"]) for f in findings]
    (f,) = got
    assert tuple(f["ranks"]) == s.ranks, f
    # one signal, one finding: no other verdict rule repeats it (the snapshots' "stuck, not slow" is a fact
    # about the processes' state, read beside the verdict, as for SGLang captures)
    assert not [g for g in hang if g is not f and set(g["ranks"]) & set(s.ranks)
                and g["rule"] not in ("stall-onset", "stuck-across-snapshots")], \
        [(g["rule"], g["ranks"]) for g in hang]
    if f["ts"] is not None:
        ts = datetime.fromisoformat(f["ts"])
        stopped = min(run.progress_by_rank.values())
        assert run.capture_started is not None
        assert stopped - timedelta(seconds=1) <= ts <= run.capture_started + timedelta(seconds=5), \
            (ts, stopped, run.capture_started)
    else:
        assert s.rule == "first-rank-stopped", "only an absent rank's stop may be unknown"


def test_real_launcher_lines_saved_later_take_the_jobs_year(incidents: Path) -> None:
    """A real job's output split as a ticket would hold it: the ranks' dated lines in one file, torchrun's
    year-less glog lines and its failure summary in another, both saved 400 days after the job.  The launcher's
    lines take the year of the job's dated lines (its engine's evidence), not the one their file time gives."""
    from hangforensics.ingest.pipeline import ingest_paths
    from hangforensics.readers.kinds import FULL_DATE
    from hangforensics.store import Store

    run = run_job("rank_dies", incidents, nproc=4, capture=False, timeout_s=TIMEOUT_S, name="rank_dies_split")
    lines = (run.incident / "logs" / "job.log").read_text(errors="replace").splitlines()
    dated = [s for s in lines if FULL_DATE.search(s)]
    yearless = [s for s in lines if not FULL_DATE.search(s)]
    assert dated and any(re.match(r"^(?:\[\w+\]:)?[IWEF]\d{4} ", s) for s in yearless), lines[:20]
    ticket = incidents / "ticket" / "job"
    ticket.mkdir(parents=True)
    saved = (datetime.now() + timedelta(days=400)).timestamp()
    for name, part in (("ranks.log", dated), ("launcher.txt", yearless)):
        (ticket / name).write_text("\n".join(part) + "\n")
        os.utime(ticket / name, (saved, saved))
    with Store(":memory:") as st:
        ingest_paths(st, [ticket], mode="engine")
        own = st.query("SELECT min(ts) AS a, max(ts) AS b FROM events WHERE path = 'ranks.log'")[0]
        launcher = [r["ts"] for r in st.query("SELECT ts FROM events WHERE path = 'launcher.txt' AND ts IS NOT NULL")]
    assert launcher, "torchrun's lines gave no dated record"
    assert all(own["a"] - timedelta(days=1) <= t <= own["b"] + timedelta(days=1) for t in launcher), (own, launcher)
