"""What reporters write by hand (issue 26): stacks abbreviated to a few function names per rank, tables of
ranks or of metrics over time, a timeline made from their logs, and /metrics excerpts.  Hand stacks become
``stacks`` / ``frames`` rows (format ``hand_summary``, one process per rank) that take part in rank classes and
desync; tables, timelines and Prometheus samples become facts of the engine's summary.  Prose and log lines
are never taken for a stack summary (the near misses below); vLLM stats at 0.0 tokens/s that keep counting
requests are a stall (interface.md §3, vLLM progress)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from hangforensics import api
from hangforensics.parsers.stacks import hand_summary as hs
from hangforensics.readers.kinds import detect_kind


def _doc(folder: Path, tmp_path: Path) -> tuple[dict, Path]:
    db = tmp_path / f"{folder.name}.duckdb"
    res = api.report(folder, tmp_path / f"{folder.name}.html", json_out=tmp_path / f"{folder.name}.json", db=db)
    return json.loads(res.json.read_text()), db


def _engine(tmp_path: Path, name: str, text: str, file: str = "comment.md") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / file).write_text(text)
    return d


def _read(text: str) -> hs.Reading:
    return hs.read(text.split("\n"))


def _stacks(text: str) -> dict[str, list[str]]:
    return {s.rank: [f.function for f in s.frames] for s in _read(text).stacks}


# -- the parser ---------------------------------------------------------------------------------------
PROSE_LABELS = """We hit the same deadlock. TP0 stuck forever in:
```
all_reduce (torch/distributed/distributed_c10d.py:3075)
  _all_reduce_attn_groups (hiradix_cache.py:196)
  check_prefetch_progress (hiradix_cache.py:1373)
```
while TP1-3 had already moved on, waiting in:
```
broadcast (torch/distributed/distributed_c10d.py:2974)
  broadcast_pyobj (utils/common.py:1437)
```
Verified via py-spy.
"""


def test_prose_labels_before_fences_and_a_range_expand_to_one_process_per_rank():
    r = hs.read(PROSE_LABELS.split("\n"))
    got = {s.rank: s for s in r.stacks}
    assert sorted(got) == ["TP0", "TP1", "TP2", "TP3"]
    assert [f.function for f in got["TP0"].frames] == ["all_reduce", "_all_reduce_attn_groups",
                                                       "check_prefetch_progress"]
    assert got["TP0"].frames[0].file == "torch/distributed/distributed_c10d.py" and got["TP0"].frames[0].line == 3075
    assert got["TP2"].label == "TP1-3" and got["TP2"].frames[1].function == "broadcast_pyobj"
    assert {0, 6} <= r.consumed                                    # the lines naming the ranks are read ...
    assert 11 not in r.consumed and 1 not in r.consumed           # ... the prose around and the fences are not


@pytest.mark.parametrize("text, want", [
    ("TP0: event_loop_overlap -> _all_reduce_attn_groups -> all_reduce",
     {"TP0": ["all_reduce", "_all_reduce_attn_groups", "event_loop_overlap"]}),
    ("rank 2: all_reduce <- _all_reduce_attn_groups", {"rank2": ["all_reduce", "_all_reduce_attn_groups"]}),
    ("- **TP3**: `broadcast_pyobj → broadcast`", {"TP3": ["broadcast", "broadcast_pyobj"]}),
    ("ranks 0-2: barrier", {"rank0": ["barrier"], "rank1": ["barrier"], "rank2": ["barrier"]}),
    ("the TP0 and TP1 ranks both wait in:\n```\nall_reduce\n```", {"TP0": ["all_reduce"], "TP1": ["all_reduce"]}),
    ("DP0 TP1-2: recv_requests -> broadcast_pyobj",
     {"DP0 TP1": ["broadcast_pyobj", "recv_requests"], "DP0 TP2": ["broadcast_pyobj", "recv_requests"]}),
    ("TP0:\n    all_gather_into_tensor\n    _gather_logits\n    forward\n\nTP1:\n    recv_requests()\n",
     {"TP0": ["all_gather_into_tensor", "_gather_logits", "forward"], "TP1": ["recv_requests"]}),
    # one name a line, outermost first: the collective is the innermost frame
    ("TP5:\n  run_scheduler_process\n  event_loop_normal\n  all_reduce\n",
     {"TP5": ["all_reduce", "event_loop_normal", "run_scheduler_process"]}),
    ("| rank | where |\n|---|---|\n| TP0 | all_reduce <- _all_reduce_attn_groups |\n"
     "| TP1-2 | broadcast <- broadcast_pyobj |\n",
     {"TP0": ["all_reduce", "_all_reduce_attn_groups"], "TP1": ["broadcast", "broadcast_pyobj"],
      "TP2": ["broadcast", "broadcast_pyobj"]}),
])
def test_hand_stack_forms(text: str, want: dict):
    assert _stacks(text) == want


@pytest.mark.parametrize("text", [
    "TP0: the server hangs after 10 minutes",                                 # prose after a label
    "rank 2: OK",                                                               # one plain word
    "rank 0: done\nrank 1: hang",
    "Rank 3: Completed store-based barrier for key:store_based_barrier_key:2",
    "[2025-01-01 10:00:00 TP0] Decode batch. #running-req: 3, #token: 100",   # a log line
    "[rank0]: Traceback (most recent call last):",
    "[rank1]:[E909 09:55:29.307 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout",
    "Logs from TP0:\n```\n[2025-01-01 10:00:00 TP0] Prefill batch. #new-seq: 1\n```",  # a label, then no frames
    "On rank 0 we ran:\n```\npython -m sglang.launch_server --tp 8\n```",
    "TP0:\n  all_reduce\n  this is where it hangs\n",                        # a block with prose in it
    "TP0 looked fine, but TP1 waits in:\n```\nall_reduce\n```",               # two labels: whose stack?
    "STP0: foo_bar",                                                           # no label (a longer word)
    "04:04:46 rank=0: EXITED clip_grad_norm gnorm=3861.279541",               # a timeline entry
    "- paged: p99 TTFT alert, LB still green\n- py-spy dumped each scheduler (capture-0412 = first)",
    "The first capture showed rank 0 stalled in `_prepare_dflash_inputs_kernel` while rank 1 waited in "
    "`nccl:_all_gather_base`.",                                                # prose naming ranks and frames
])
def test_near_misses_are_not_stacks(text: str):
    assert _stacks(text) == {}


def test_label_expansion():
    assert hs.expand_label("TP1-3") == ["TP1", "TP2", "TP3"]
    assert hs.expand_label("TP1–TP2") == ["TP1", "TP2"]
    assert hs.expand_label("rank0–6")[-1] == "rank6"
    assert hs.expand_label("TP0, TP2") == ["TP0", "TP2"]
    assert hs.expand_label("TP3-1") == [] and hs.expand_label("rank 0-99999") == []


def test_tables_timelines_and_metrics_are_rows():
    r = _read("""| ranks | NumelIn |
|---|---|
| rank7 | 161600 |
| rank0-6 | 145,440 |
""")
    assert [x.attrs["values"] for x in r.rows] == [{"NumelIn": 161600.0}, {"NumelIn": 145440.0}]
    assert r.rows[1].attrs["ranks"][0] == "rank0" and not r.stacks
    r = _read("| time | running | waiting | gen tok/s |\n|---|---|---|---|\n| 10:00 | 12 | 0 | 350.5 |\n"
                "| 10:05 | 12 | 7 | 0 |\n")
    assert [x.attrs["time"] for x in r.rows] == ["10:00", "10:05"] and r.rows[1].attrs["values"]["waiting"] == 7
    # a table of neither kind is left alone
    assert not _read("| option | meaning |\n|---|---|\n| --tp | tensor parallel |\n").rows
    r = _read("```\n04:04:46 rank=0: EXITED clip_grad_norm\n... 30 minutes of silence ...\n"
                "04:34:46 WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1) TIMEOUT\n```")
    assert [x.kind for x in r.rows] == ["reporter_timeline"] * 3 and r.consumed == {1, 2, 3}
    r = _read('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 12.0\n')
    assert r.rows[0].attrs == {"metric": "vllm:num_requests_running", "labels": {"engine": "0"}, "value": 12.0}
    # a job's own 'name value' lines and a dump's locals are no /metrics excerpt
    assert not _read("train_loss 0.53\nval_loss 0.61\nlearning_rate 0.0001\n").rows
    assert not _read("        dp_size: 2\n        tp_rank: 2\n        num_tokens: 0\n").rows


def test_kinds_from_content(tmp_path: Path):
    (tmp_path / "a.md").write_text(PROSE_LABELS)
    (tmp_path / "b.md").write_text("# bom2\n\n- paged: p99 TTFT alert\n- py-spy dumped each scheduler\n")
    (tmp_path / "c.txt").write_text('# HELP vllm:num_requests_running x\nvllm:num_requests_running{a="b"} 1\n')
    assert detect_kind(tmp_path / "a.md") == "hand_summary"
    assert detect_kind(tmp_path / "b.md") == "unknown"
    assert detect_kind(tmp_path / "c.txt") == "metrics_text"


# -- end to end -------------------------------------------------------------------------------------
def test_hand_stacks_in_different_collectives_are_a_desync_that_says_it_is_a_summary(tmp_path: Path):
    doc, db = _doc(_engine(tmp_path, "hicache", PROSE_LABELS), tmp_path)
    rules = {f["rule"]: f for f in doc["findings"]}
    assert rules["collective-desync"]["ranks"] == ["TP0"]
    assert "person's summary" in rules["collective-desync"]["detail"]
    assert rules["known-signature"]["signature"] == "hicache-collective-desync"
    assert "summarised by hand" in rules["known-signature"]["detail"]
    (eng,) = doc["engines"]
    assert eng["files"] == {"hand_summary": 1}
    assert any("summarised by hand" in f for f in eng["facts"])
    assert any("py-spy dumps themselves" in c for c in eng["capture_next"])
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*), min(format), count(DISTINCT dump_id) FROM stacks").fetchone() == \
            (4, "hand_summary", 4)
        lines, parsed, unparsed = con.execute("SELECT lines, parsed_lines, unparsed_lines FROM sources").fetchone()
        assert lines == parsed + unparsed and unparsed == 5           # the prose and the fences
        assert con.execute("SELECT count(*) FROM unparsed").fetchone()[0] == unparsed


def test_hand_stacks_in_one_collective_stay_quiet_and_say_what_they_are(tmp_path: Path):
    text = "All four ranks look the same:\n\nTP0-3: event_loop_overlap -> _all_reduce_attn_groups -> all_reduce\n"
    doc, _ = _doc(_engine(tmp_path, "same", text), tmp_path)
    assert not [f for f in doc["findings"] if f["rule"] in ("collective-desync", "all-ranks-frozen", "stall-onset")]
    assert "summarised by hand" in doc["engines"][0]["verdict"]


def test_a_reporter_metrics_table_is_facts_and_verdict_not_a_stall(tmp_path: Path):
    text = ("Metrics I scraped while it hung:\n\n| time | running | waiting | gen tok/s |\n|---|---|---|---|\n"
            "| 10:00 | 12 | 0 | 350 |\n| 10:05 | 12 | 3 | 0 |\n| 10:10 | 12 | 9 | 0 |\n")
    doc, _ = _doc(_engine(tmp_path, "table", text), tmp_path)
    assert doc["findings"] == []
    (eng,) = doc["engines"]
    assert "table of metrics over time" in eng["verdict"]
    assert any("10:00 to 10:10" in f and "waiting 0 -> 9" in f for f in eng["facts"])
    assert eng["files"] == {"hand_summary": 1}


def test_a_metrics_excerpt_says_its_gauges(tmp_path: Path):
    text = ("```\n# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 4.0\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="m"} 17.0\n```\n')
    doc, _ = _doc(_engine(tmp_path, "metrics", text, "metrics.txt"), tmp_path)
    assert doc["findings"] == []
    (eng,) = doc["engines"]
    assert "vllm:num_requests_waiting 17" in eng["verdict"] and "cannot tell stuck from busy" in eng["verdict"]
    assert any("/metrics scrapes" in c for c in eng["capture_next"])


# -- vLLM stats at 0.0 tokens/s ---------------------------------------------------------------------
def _v1(ts: str, gen: float, running: int, waiting: int, prompt: float = 0.0) -> str:
    return (f"INFO 05-11 {ts} [loggers.py:111] Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, Avg "
            f"generation throughput: {gen:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV "
            f"cache usage: 3.0%, Prefix cache hit rate: 0.0%")


def _vllm_rules(tmp_path: Path, name: str, lines: list[str]) -> set[str]:
    doc, _ = _doc(_engine(tmp_path, name, "\n".join(lines) + "\n", "server.log"), tmp_path)
    return {f["rule"] for f in doc["findings"]}


def test_stats_at_zero_with_a_request_running_are_a_stall(tmp_path: Path):
    lines = [_v1("18:07:04", 40.2, 2, 0)] + [_v1(f"18:07:{s}", 0.0, 2, 0) for s in (14, 24, 34, 44)]
    assert "stall-onset" in _vllm_rules(tmp_path, "zero", lines)
    # no progress line at all: the run still dates a stall (inferred)
    doc, _ = _doc(_engine(tmp_path, "only-zero", "\n".join(_v1(f"18:0{m}:{s}", 0.0, 1, 0) for m in (7, 8)
                                                             for s in ("04", "24", "44")) + "\n", "s.log"), tmp_path)
    (stall,) = [f for f in doc["findings"] if f["rule"] == "stall-onset"]
    # the first line covers the 20 s before it
    assert stall["ts"].endswith("-05-11T18:06:44") and stall["ts_basis"] == "inferred"


@pytest.mark.parametrize("name, lines", [
    # one line at 0.0 before a request generates (the first interval of a request)
    ("first-zero", [_v1("10:00:00", 0.0, 1, 0), _v1("10:00:10", 76.0, 1, 0), _v1("10:00:20", 77.0, 1, 0)]),
    # a prefill: prompt throughput is the engine working
    ("prefill", [_v1("10:00:00", 60.0, 4, 9)] + [_v1(f"10:00:{s}", 0.0, 4, 5, prompt=1032.0) for s in (10, 20, 30, 40)]),
    # idle: nothing running, nothing waiting
    ("idle", [_v1("10:00:00", 60.0, 1, 0)] + [_v1(f"10:00:{s}", 0.0, 0, 0) for s in (10, 20, 30, 40)]),
    # too short to tell: two intervals at 0.0
    ("short", [_v1("10:00:00", 60.0, 1, 0), _v1("10:00:10", 0.0, 1, 0), _v1("10:00:20", 0.0, 1, 0)]),
    # a queue draining with nothing running is being served
    ("draining", [_v1("10:00:00", 60.0, 0, 9), _v1("10:00:10", 0.0, 0, 4)]),
])
def test_zero_lines_that_are_not_a_stall(tmp_path: Path, name: str, lines: list[str]):
    assert "stall-onset" not in _vllm_rules(tmp_path, name, lines)
