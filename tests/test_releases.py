"""Per-release parser fixtures: one realistic server.log per SGLang release, checked against a hand-written oracle.

Each ``tests/data/releases/<release>/server.log`` is written in exactly that release's formats
(sglang-formats.md §1-§5); ``expected.json`` next to it holds the rows derived by reading the fixture
and the formats reference (never by running the parser).  Every expected row and column is asserted
against the interface views, and nothing else may appear in them.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hangforensics.ingest.pipeline import ingest_paths
from hangforensics.store import Store

DATA = Path(__file__).parent / "data" / "releases"
RELEASES = ["0.4.6", "0.5.2", "0.5.5", "0.5.10", "0.5.23"]

BATCH_COLUMNS = [
    "line", "ts", "rank", "batch_kind", "forward_iter", "new_seq", "new_token", "cached_token", "running_req",
    "queue_req", "num_token", "token_usage", "swa_token_usage", "mamba_usage", "gen_throughput",
    "input_throughput", "graph", "accept_len", "pending_req",
]
FLOAT_COLUMNS = {"token_usage", "swa_token_usage", "mamba_usage", "gen_throughput", "input_throughput", "accept_len"}
HTTP_COLUMNS = ["line", "ts", "client", "method", "path", "status"]
EVENT_COLUMNS = ["line", "line_end", "ts", "rank", "kind"]
LEAK_COLUMNS = [
    "line", "rank", "context", "form", "leaked_full_pages", "leaked_mamba_pages", "total_size", "available_size",
    "evictable_size", "protected_size", "shortfall", "in_flight_batch_size",
]
STACK_COLUMNS = ["line", "rank", "pid", "thread_name", "thread_state"]

_CACHE: dict[str, tuple[Store, dict[str, Any]]] = {}


def _ts(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _loaded(release: str) -> tuple[Store, dict[str, Any]]:
    if release not in _CACHE:
        folder = DATA / release
        store = Store(":memory:")
        ingest_paths(store, [folder / "server.log"])
        expected = json.loads((folder / "expected.json").read_text())
        _CACHE[release] = (store, expected)
    return _CACHE[release]


@pytest.fixture(params=RELEASES)
def release(request: pytest.FixtureRequest) -> tuple[str, Store, dict[str, Any]]:
    store, expected = _loaded(request.param)
    return request.param, store, expected


def _rows(store: Store, sql: str) -> dict[int, dict[str, Any]]:
    rows = store.query(sql)
    by_line: dict[int, dict[str, Any]] = {}
    for r in rows:
        assert r["line"] not in by_line, f"two rows for line {r['line']}: {r}"
        by_line[r["line"]] = r
    return by_line


def _check_rows(table: str, got: dict[int, dict[str, Any]], want: list[dict[str, Any]], columns: list[str]) -> None:
    want_by_line = {w["line"]: w for w in want}
    assert sorted(got) == sorted(want_by_line), f"{table}: lines differ"
    problems = []
    for line, w in sorted(want_by_line.items()):
        g = got[line]
        for col in columns:
            exp = w[col]
            act = g[col]
            if col == "ts":
                exp = _ts(exp)
            if col in FLOAT_COLUMNS and exp is not None and act is not None:
                ok = act == pytest.approx(exp)
            else:
                ok = act == exp and (act is None) == (exp is None)
            if not ok:
                problems.append(f"{table} line {line} {col}: got {act!r}, want {exp!r}")
    assert not problems, "\n".join(problems)


def test_batches(release: tuple[str, Store, dict[str, Any]]) -> None:
    _, store, expected = release
    got = _rows(store, f"SELECT {', '.join(BATCH_COLUMNS)} FROM batches")
    _check_rows("batches", got, expected["batches"], BATCH_COLUMNS)


def test_http_requests(release: tuple[str, Store, dict[str, Any]]) -> None:
    _, store, expected = release
    got = _rows(store, f"SELECT {', '.join(HTTP_COLUMNS)} FROM http_requests")
    _check_rows("http_requests", got, expected["http_requests"], HTTP_COLUMNS)


def test_events(release: tuple[str, Store, dict[str, Any]]) -> None:
    _, store, expected = release
    got = _rows(store, f"SELECT {', '.join(EVENT_COLUMNS)}, attrs FROM events")
    _check_rows("events", got, expected["events"], EVENT_COLUMNS)
    # kind-specific attributes the rules read (watchdog timeout/soft/who, server_args, ...): the listed keys only
    problems = []
    for w in expected["events"]:
        if "attrs" not in w:
            continue
        attrs = json.loads(got[w["line"]]["attrs"] or "{}")
        for key, value in w["attrs"].items():
            if key not in attrs or attrs[key] != value:
                problems.append(f"events line {w['line']} attrs.{key}: got {attrs.get(key, '<absent>')!r}, want {value!r}")
    assert not problems, "\n".join(problems)


def test_leak_reports(release: tuple[str, Store, dict[str, Any]]) -> None:
    _, store, expected = release
    got = _rows(store, f"SELECT {', '.join(LEAK_COLUMNS)} FROM leak_reports")
    _check_rows("leak_reports", got, expected["leak_reports"], LEAK_COLUMNS)


def test_stacks(release: tuple[str, Store, dict[str, Any]]) -> None:
    _, store, expected = release
    got = _rows(store, f"SELECT {', '.join(STACK_COLUMNS)} FROM stacks")
    _check_rows("stacks", got, expected["stacks"], STACK_COLUMNS)
    # every embedded thread is dated by the record that carried its dump
    assert store.scalar("SELECT count(*) FROM stacks WHERE ts IS NULL OR capture <> 'embedded'") == 0


def test_unparsed(release: tuple[str, Store, dict[str, Any]]) -> None:
    _, store, expected = release
    got = [r["line"] for r in store.query("SELECT line FROM unparsed ORDER BY line")]
    assert got == sorted(expected["unparsed"])


def test_sources_count_every_line(release: tuple[str, Store, dict[str, Any]]) -> None:
    name, store, expected = release
    physical = len((DATA / name / "server.log").read_bytes().splitlines())
    assert physical == expected["lines"]
    src = store.query("SELECT kind, lines, parsed_lines, unparsed_lines FROM sources")
    assert len(src) == 1
    s = src[0]
    assert s["kind"] == "server_log"
    assert s["lines"] == s["parsed_lines"] + s["unparsed_lines"] == physical
    assert s["unparsed_lines"] == len(expected["unparsed"])


def test_oracle_names_every_batch_and_access_line(release: tuple[str, Store, dict[str, Any]]) -> None:
    """Guards the hand-written oracle itself: no batch or access line of the fixture is forgotten."""
    name, _, expected = release
    text = (DATA / name / "server.log").read_text().splitlines()
    batch_lines = [i for i, s in enumerate(text, 1) if "] Prefill batch" in s or "] Decode batch" in s]
    access_lines = [i for i, s in enumerate(text, 1) if ' HTTP/1.1" ' in s]
    assert batch_lines == [b["line"] for b in expected["batches"]]
    assert access_lines == [h["line"] for h in expected["http_requests"]]


@pytest.mark.parametrize("release", RELEASES)
def test_release_is_recognised_from_the_formats(release: str):
    """The manifest names the release family the log's formats point at (the fleet view compares it)."""
    with Store(":memory:") as st:
        ingest_paths(st, [DATA / release / "server.log"])
        assert st.scalar("SELECT release_hint FROM sources") == release
        assert st.scalar("SELECT release_hint FROM engine_facts") == release


def test_vllm_records_are_dated_and_named():
    """vLLM's envelope has no year: it comes from the file; hang messages get kinds of their own."""
    with Store(":memory:") as st:
        ingest_paths(st, [DATA.parent / "vllm" / "server.log"])
        rows = st.query("SELECT line, line_end, ts, rank, kind FROM events ORDER BY line")
        assert [r["kind"] for r in rows] == ["vllm_stats", "vllm_stats", "vllm_shm_wait", "vllm_engine_dead",
                                             "vllm_engine_dead"]
        assert rows[2]["rank"] == "EngineCore_DP0" and rows[3]["line_end"] == 7     # the traceback attached
        assert all(r["ts"] is not None and r["ts"].strftime("%m-%d %H:%M") >= "09-01 12:00" for r in rows)
        assert st.scalar("SELECT status FROM http_requests") == 503
        assert st.scalar("SELECT unparsed_lines FROM sources") == 0


@pytest.mark.parametrize("where", ["first", "last", "nowhere"])
def test_the_newest_release_wins_wherever_its_trait_is_in_a_large_chunk(where: str):
    """Many messages (the way a large chunk's release is looked for): an older release's trait on every batch
    line, a newer one's once, at either end or not at all."""
    import polars as pl

    from hangforensics.parsers.sglang.sglang_log import SMALL_ROWS, release_of

    older = "Decode batch, #running-req: 3, #token: 100, token usage: 0.10, accept rate: 0.81, "   # 0.5.5
    newer = "Scheduler debug info: {}"                                                           # 0.5.10
    msgs = [older] * (4 * SMALL_ROWS)
    if where == "first":
        msgs[0] = newer
    elif where == "last":
        msgs[-1] = newer
    assert release_of(pl.Series(msgs)) == ("0.5.5" if where == "nowhere" else "0.5.10")
    assert release_of(pl.Series(msgs), known="0.5.10") is None


# -- the release searched in bulk messages without cutting them out (sglang_releases) -------------------------
def test_a_regexs_top_alternatives_and_literal_head():
    from hangforensics.parsers.sglang.sglang_releases import alternatives, literal_head

    assert alternatives(r"a|(b|c)|[|x]|d\|e|") == ["a", "(b|c)", "[|x]", r"d\|e", ""]
    assert literal_head(r"self\.cur_batch\.batch_size\(\)=\d+$") == "self.cur_batch.batch_size()="
    assert literal_head("Scheduler debug info:") == "Scheduler debug info:"
    assert literal_head("ab*c") == "a" and literal_head("ab?c") == "a" and literal_head("ab{2}") == "a"
    assert literal_head("ab+c") == "ab"
    assert literal_head("(?:Prefill|Decode) batch") == "" and literal_head(r"\d+ x") == ""


def test_a_trait_anchored_where_no_bulk_message_starts_is_not_looked_for_in_them():
    from hangforensics.parsers.sglang.sglang_releases import bulk_prefilter

    assert bulk_prefilter("^Scheduler debug info:|^symmetric-memory registration") == ""
    assert bulk_prefilter("^Scheduler debug info:|fwd occupancy: ") == "(?:fwd occupancy: )"
    # anchored where a batch or access message may start, or anchored elsewhere: looked for in each message
    for rx in ("^Decode batch\\. ", "^Dec", "^INFO: x", "^(?:Prefill|Decode) batch", "x, $", "[^a]b", "a|^.*x"):
        assert bulk_prefilter(rx) is None, rx


def _bulk_lines() -> list[str]:
    """Batch and access lines of every release's fixture, and the same with each release's traits put into
    them (a batch field, an access path, a batch line's end)."""
    import re

    samples = ["#pending-token: 3", "cur_batch_for_debug", "fwd occupancy: 0.9", "self.soft=True)",
               "self.soft=False)", "est. prefill TFLOPS: 1.0", "est. decode TFLOPS: 2", "accept rate: 0.5",
               "symmetric-memory registration in progress", "Scheduler debug info:"]
    lines = []
    for release in RELEASES:
        for line in (DATA / release / "server.log").read_text().splitlines():
            m = re.match(r"^\[[^\]]*\] ((?:Prefill|Decode) batch|INFO|WARNING|ERROR)", line)
            if m:
                lines.append(line)
    grown = []
    for line in lines[::7]:
        for s in samples:
            if " batch" in line:
                grown += [line.replace(" batch, ", f" batch, {s}, ", 1), line + f", {s}", line + f", {s}, "]
            elif " HTTP/" in line and " " not in s:
                grown.append(re.sub(r'"([A-Z]+) (\S+)', rf'"\1 \2{s}', line, count=1))
    return lines + grown


def test_each_releases_search_around_bulk_messages_finds_every_one_its_trait_matches():
    """For every release: each batch or access message its trait matches (the fixtures' own, and ones its and
    the other releases' traits were put into) is found by its search of the lines around them; a release whose
    search is "" matches none of them."""
    import polars as pl

    from hangforensics.parsers.sglang.sglang_patterns import RELEASE_TRAITS
    from hangforensics.parsers.sglang.sglang_releases import BULK_PREFILTERS

    lines = pl.Series(_bulk_lines())
    messages = lines.str.replace(r"^\[[^\]]*\] ", "")
    assert BULK_PREFILTERS["0.5.23"] and BULK_PREFILTERS["0.5.10"]       # (the searches exist where it counts)
    for release, rx in RELEASE_TRAITS:
        search = BULK_PREFILTERS[release]
        if search is None:
            continue
        matched = messages.str.contains(rx)
        assert matched.sum() > 0 or search == "", release
        found = lines.str.contains(search) if search else pl.Series([False] * len(lines))
        assert not (matched & ~found).any(), (release, lines.filter(matched & ~found).head(3).to_list())
