"""vLLM records inside a line (readers/envelopes/pastes.py, ``inline_records``): quoted in a reporter's prose,
in inline code, a stats message pasted without its head, several glued into one paragraph by a paste that lost
its newlines.  Each is read as the record it is; a line that begins with a record of its own keeps it, and a
stats message after its own head (V1's 'Engine 000: Avg prompt throughput') stays that record's."""

from __future__ import annotations

from pathlib import Path

from hangforensics.analysis.findings import run_rules
from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.readers.envelopes import detect
from hangforensics.readers.envelopes.pastes import inline_heads
from hangforensics.store import Store


def stats(t: str, running: int, waiting: int, gen: float, tag: str = "") -> str:
    return (f"{tag}INFO 01-25 {t} llm_engine.py:706] Avg prompt throughput: 0.0 tokens/s, Avg generation "
            f"throughput: {gen} tokens/s, Running: {running} reqs, Swapped: 0 reqs, Pending: {waiting} reqs, "
            f"GPU KV cache usage: 0.4%, CPU KV cache usage: 0.0%")


def read(tmp_path: Path, text: str) -> tuple[list[dict], dict, list[dict]]:
    """The file's sources row, its vLLM stats rows and the engine's summary."""
    eng = tmp_path / "eng"
    eng.mkdir()
    (eng / "ticket.md").write_text(text)
    with Store(":memory:") as st:
        ingest_paths(st, [eng], mode="engine")
        run_rules(st)
        return (st.query("SELECT kind, lines, unparsed_lines, envelope FROM sources"),
                st.query("SELECT * FROM engine_summaries")[0],
                st.query("SELECT line, ts, running, waiting, gen_tps FROM vllm_stats ORDER BY line, ts"))


def test_records_glued_into_one_paragraph_are_each_read(tmp_path: Path):
    glued = " ".join(stats(f"11:27:{s:02d}", 1, 0, 70.0 + s, "(_AsyncLLMEngine pid=1974) ") for s in range(0, 30, 5))
    (src,), summary, rows = read(tmp_path, "I am getting this on terminal\n\n" + glued[1:] + "\n")
    assert src["kind"] == "server_log" and "inline_records" in src["envelope"]
    assert [r["gen_tps"] for r in rows] == [70.0 + s for s in range(0, 30, 5)] and {r["line"] for r in rows} == {3}
    assert src["lines"] == 3 and src["unparsed_lines"] == 2              # the prose and the blank line
    assert "76.4" not in summary["verdict"] and "(11:27:25)" in summary["verdict"]


def test_a_record_quoted_in_prose_is_read_and_one_line_shows_no_stall(tmp_path: Path):
    text = ('However, after 5-10 minutes the server hangs. Most recent stats show that "'
            + stats("20:44:35", 2, 20, 61.0) + '".\n\nAfter hanging happens, `v1/models` still works.\n')
    (src,), summary, rows = read(tmp_path, text)
    assert src["kind"] == "server_log"
    assert [(r["running"], r["waiting"], r["gen_tps"]) for r in rows] == [(2, 20, 61.0)]
    assert summary["verdict"].startswith("One moment of serving: the only vLLM stats line, at 20:44:35")


def test_a_stats_message_in_inline_code_is_read_undated(tmp_path: Path):
    text = ("Hi I use this:\n```\nserver_vllm.py \\\n  --port 8000\n```\nWhy is it slow?:\n"
            "`Avg prompt throughput: 102.2 tokens/s, Avg generation throughput: 2.2 tokens/s, Running: 1 reqs, "
            "Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.8%, CPU KV cache usage: 0.0%`\n")
    (src,), summary, rows = read(tmp_path, text)
    assert src["kind"] == "server_log" and src["envelope"] == "markdown+inline_records"
    assert [(r["ts"], r["running"], r["gen_tps"]) for r in rows] == [(None, 1, 2.2)]
    assert "pasted without its time" in summary["verdict"] and "2.2 generation tokens/s" in summary["verdict"]


def test_a_plain_vllm_log_is_no_inline_paste(tmp_path: Path):
    """V1's stats message follows its own head ('Engine 000: Avg prompt ...'): one record per line, no layer."""
    v1 = [f"DEBUG 05-11 18:07:{s:02d} [loggers.py:111] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg "
          f"generation throughput: 0.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%"
          for s in range(10, 60, 10)]
    assert detect(v1).name == "none" and all(inline_heads(s) == [0] for s in v1)
    (src,), _, rows = read(tmp_path, "\n".join(v1) + "\n")
    assert src["envelope"] == "none" and len(rows) == 5


def test_a_record_of_its_own_keeps_its_line_before_a_quoted_one():
    """An SGLang line whose message quotes a vLLM record: the SGLang record stays, the quoted one follows."""
    line = "[2026-01-25 11:27:00 TP0] Proxy saw: " + stats("11:26:58", 1, 0, 77.3)
    assert inline_heads(line) == [line.index("INFO 01-25")]
    from hangforensics.readers.envelopes import EnvelopeStack, Unwrapper
    u = Unwrapper(EnvelopeStack(("inline_records",), ("",))).feed([line], 1, final=True)
    assert u.payload == [line[:line.index("INFO 01-25")].rstrip(), stats("11:26:58", 1, 0, 77.3)]
    assert u.line == [1, 1] and u.span == [1, 0]
