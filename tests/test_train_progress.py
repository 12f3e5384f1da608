"""A torch.distributed job's own step lines are its forward progress (interface.md §3): dated lines with a
step or iteration number, in any of the shapes jobs log them, judged like SGLang's batch lines: the ranks'
last steps time a freeze, a slow job is not stuck, and a line with no time is left alone."""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
from conftest import analyze_folder, by_rule

from hangforensics import api
from hangforensics.parsers.torch_jobs.train_steps import step_fixes, step_line

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


def _step_lines(r: random.Random, n: int) -> list[str]:
    """Progress lines in the shapes jobs log them, with what makes each field absent or odd: no rank, a
    rank in words ('rank12'), leading zeros, a time polars and strptime refuse (Feb 30, hour 24, year 0),
    fractions of 1-9 digits, 'Iteration'/'STEP'/'iter' and a step word that is part of another ('steps')."""
    out = []
    for _ in range(n):
        date = r.choice(["2026-12-04", "2024-02-29", "2026-02-30", "0000-01-01", "2025-13-01"])
        time = r.choice(["15:46:59", "00:00:00", "24:00:00", "23:59:60", "08:05:01"])
        frac = r.choice(["", ",316", ".5", ".123456789", ",000001"])
        pre = r.choice(["", "[rank0]:", "[rank17]: ", "["])
        rank = r.choice(["", "[rank1] ", "rank12 ", "[rank007] ", "worker-rank3 "])
        word = r.choice(["step", "Step:", "STEP=", "iteration", "Iteration #", "iter", "steps", "stepping"])
        num = r.choice(["3", "0", "007", "120", "99999999999999999999"])
        sep = r.choice([" ", "T"])
        close = "]" if pre.endswith("[") else ""
        out.append(f"{pre}{date}{sep}{time}{frac}{close} INFO {rank}{word} {num}/100 loss={r.random():.3f}")
    return out


def test_many_step_lines_read_at_once_as_one_by_one() -> None:
    """``step_fixes`` (a job's step lines read at once, polars) gives each line what ``step_line`` gives it
    (Python's ``re`` and ``strptime``): its time, where the record has none; its rank as 'rankN', where the
    record has none; its step as the event's attrs."""
    r = random.Random(4)
    lines = _step_lines(r, 3000)
    ranks = [r.choice([None, "", " TP0"]) for _ in lines]
    dated = [r.random() < 0.1 for _ in lines]
    got = step_fixes(pl.DataFrame({"line": range(len(lines)), "body": lines, "ranks": ranks,
                                   "ts_dt": [None] * len(lines)}).with_columns(
        pl.when(pl.Series(dated)).then(pl.lit(None, dtype=pl.Datetime("us")).fill_null(pl.datetime(2020, 1, 1)))
        .alias("ts_dt")))
    want = []
    for k, (line, rank) in enumerate(zip(lines, ranks, strict=True)):
        ts, n, attrs = step_line(line)
        want.append((k, json.dumps(attrs) if attrs else None, None if dated[k] else ts,
                     f"rank{n}" if n is not None and not (rank or "").strip() else None))
    assert got.rows() == want
    assert sum(1 for w in want if w[1]) > 1000 and sum(1 for w in want if w[2]) > 500


def test_real_torchrun_jobs_step_lines_read_at_once_as_one_by_one() -> None:
    """Every step line real torchrun jobs wrote (tests/data/torch_jobs: torch 2.13 CPU, gloo, 4 ranks):
    ``step_fixes`` gives each what ``step_line`` gives it."""
    import re

    from hangforensics.parsers.torch_jobs.train_steps import STEP_LINE

    data = Path(__file__).resolve().parent / "data" / "torch_jobs"
    lines = [s for log in sorted(data.rglob("*.log")) for s in log.read_text(errors="replace").splitlines()
             if re.search(STEP_LINE, s)]
    assert len(lines) > 100
    got = step_fixes(pl.DataFrame({"line": range(len(lines)), "body": lines, "ranks": [None] * len(lines),
                                   "ts_dt": pl.Series([None] * len(lines), dtype=pl.Datetime("us"))}))
    want = []
    for k, line in enumerate(lines):
        ts, n, attrs = step_line(line)
        want.append((k, json.dumps(attrs) if attrs else None, ts, None if n is None else f"rank{n}"))
    assert got.rows() == want and all(w[1] and w[2] and w[3] for w in want)


def test_a_long_jobs_step_lines_read_at_once_are_its_progress(tmp_path: Path) -> None:
    """A job's log of thousands of step lines (read at once, not line by line): each is progress, with its
    rank, time and step, as a short log's few are."""
    lines = [f"2026-12-04 10:{k // 600:02d}:{k // 10 % 60:02d},{k % 10}00 INFO [rank{k % 4}] step {k // 4} done"
             for k in range(6000)]
    db = tmp_path / "h.duckdb"
    api.ingest([_job(tmp_path, lines)], db=db)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT rank, ts, attrs FROM events WHERE kind = 'train_step' ORDER BY line").fetchall()
        progress = con.execute("SELECT count(*) FROM progress WHERE batch_kind = 'step'").fetchone()[0]
    assert len(rows) == 6000 and progress == 6000
    assert rows[4001] == ("rank1", datetime(2026, 12, 4, 10, 6, 40, 100000), '{"step": 1000}')


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
