"""A torch.distributed job's own step lines are its forward progress (interface.md §3): dated lines with a
step or iteration number, in any of the shapes jobs log them, judged like SGLang's batch lines: the ranks'
last steps time a freeze, a slow job is not stuck, and a line with no time is left alone."""

from __future__ import annotations

from pathlib import Path

import duckdb
from conftest import analyze_folder, by_rule

from hangforensics import api
from hangforensics.parsers.torch_jobs.train_steps import step_line

TIMEOUT = ("[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
           "Timed out waiting 20000ms for recv operation to complete")


def _job(tmp_path: Path, lines: list[str]) -> Path:
    eng = tmp_path / "job"
    eng.mkdir()
    (eng / "train.log").write_text("\n".join(lines) + "\n")
    return eng


def test_step_lines_in_the_shapes_jobs_log_them() -> None:
    ts, rank, attrs = step_line("2026-12-04 15:46:59,316 INFO [rank1] step 3 done loss=0.2500")
    assert (ts.isoformat(), rank, attrs) == ("2026-12-04T15:46:59.316000", 1, {"step": 3})
    ts, rank, attrs = step_line("[2024-05-03 10:12:11] iteration       10/     100 | consumed samples: 640")
    assert (ts.isoformat(), rank, attrs) == ("2024-05-03T10:12:11", None, {"step": 10})
    ts, rank, attrs = step_line("[rank0]: 2025-01-07 08:00:01.250 | INFO | train:77 - Step: 120, loss 1.73")
    assert (ts.isoformat(), rank, attrs) == ("2025-01-07T08:00:01.250000", 0, {"step": 120})


def test_step_lines_become_progress_and_undated_ones_do_not(tmp_path: Path) -> None:
    eng = _job(tmp_path, [
        "2026-12-04 10:00:00,100 INFO [rank0] step 0 done loss=1.0",
        "2026-12-04 10:00:00,120 INFO [rank1] step 0 done loss=1.0",
        "INFO:__main__:step 1 done",                       # no time: says nothing about when
        "2026-12-04 10:00:01,100 INFO [rank0] entering eval",   # dated, but no step: not progress
    ])
    db = tmp_path / "h.duckdb"
    api.ingest([eng], db=db)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT rank, ts, batch_kind FROM progress ORDER BY ts").fetchall()
        acc = con.execute("SELECT sum(lines), sum(parsed_lines) + sum(unparsed_lines) FROM sources").fetchone()
    assert [(r, k) for r, _, k in rows] == [("rank0", "step"), ("rank1", "step")]
    assert acc[0] == acc[1]


def test_ranks_whose_steps_stop_together_with_a_timeout_froze_together(tmp_path: Path) -> None:
    lines = []
    for step in range(3):
        for r in range(4):
            lines.append(f"2026-12-04 10:00:0{step},{100 + 10 * r} INFO [rank{r}] step {step} done")
    lines += [TIMEOUT.format(r=r) for r in range(4)]
    found = by_rule(analyze_folder(_job(tmp_path, lines)))
    (frozen,) = found["all-ranks-frozen"]
    assert frozen["ranks"] == ["rank0", "rank1", "rank2", "rank3"]
    assert (frozen["ts"].isoformat(), frozen["ts_end"].isoformat()) == \
        ("2026-12-04T10:00:02.100000", "2026-12-04T10:00:02.130000") and "step lines" in frozen["title"]
    (stall,) = found["stall-onset"]
    assert stall["ts"].isoformat() == "2026-12-04T10:00:02.130000"


def test_a_rank_that_stopped_stepping_seconds_before_the_others_stopped_first(tmp_path: Path) -> None:
    lines = []
    for step in range(6):
        for r in range(3):
            if r == 2 and step > 2:
                continue                                   # rank 2 stops after step 2
            lines.append(f"2026-12-04 10:00:{10 + 2 * step:02d},500 INFO [rank{r}] step {step} done")
    lines += [TIMEOUT.format(r=r) for r in range(2)]
    found = by_rule(analyze_folder(_job(tmp_path, lines)))
    (first,) = found["first-rank-stopped"]
    assert first["ranks"] == ["rank2"] and first["ts"].isoformat() == "2026-12-04T10:00:14.500000"
    assert "all-ranks-frozen" not in found


def test_a_job_that_keeps_stepping_is_not_stalled(tmp_path: Path) -> None:
    lines = [f"2026-12-04 10:{m:02d}:00,000 INFO [rank{r}] step {m} done" for m in range(20) for r in range(2)]
    found = by_rule(analyze_folder(_job(tmp_path, lines)))
    assert not {"stall-onset", "all-ranks-frozen", "first-rank-stopped"} & set(found)
