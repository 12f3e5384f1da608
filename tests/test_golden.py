"""Golden test: every view of the test corpora, re-ingested and analysed, equals its snapshot exactly.

The snapshots (tests/data/golden/*.parquet) were written by tests/data/golden/generate.py before the
fast ingest path existed; any change of parsing shows up here as the first differing row of a view.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DATA

from hangforensics.ingest import parallel, pipeline

GOLDEN = DATA / "golden"
_spec = importlib.util.spec_from_file_location("golden_generate", GOLDEN / "generate.py")
assert _spec is not None and _spec.loader is not None
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


@cache
def golden(view: str) -> pa.Table:
    return pq.read_table(GOLDEN / f"{view}.parquet")


def expected(corpus: str) -> dict[str, pa.Table]:
    out = {}
    for path in sorted(GOLDEN.glob("*.parquet")):
        t = golden(path.stem)
        rows = t.filter(pa.compute.equal(t.column("corpus"), corpus)).drop_columns(["corpus"])
        out[path.stem] = rows.combine_chunks()
    return out


def first_difference(got: pa.Table, want: pa.Table) -> str:
    if got.schema != want.schema:
        return f"schema differs:\n got  {got.schema}\n want {want.schema}"
    if got.num_rows != want.num_rows:
        return f"{got.num_rows} rows, want {want.num_rows}"
    for i, (a, b) in enumerate(zip(got.to_pylist(), want.to_pylist(), strict=True)):
        if a != b:
            cols = [k for k in a if a[k] != b[k]]
            return f"row {i} differs in {cols}:\n got  {[a[k] for k in cols]}\n want {[b[k] for k in cols]}"
    return "equal"


def assert_same(got: dict[str, pa.Table], want: dict[str, pa.Table]) -> None:
    assert sorted(got) == sorted(want), "the set of views changed: regenerate the golden snapshots on purpose"
    bad = {v: first_difference(got[v].combine_chunks(), want[v]) for v in want
           if not got[v].combine_chunks().equals(want[v], check_metadata=False)}
    assert not bad, "\n".join(f"{v}: {d}" for v, d in bad.items())


def test_golden_fixtures_cover_the_hot_path() -> None:
    """The snapshots hold what the fast path must keep: batch and access rows of every corpus family,
    events, stacks, unparsed lines and findings."""
    for view, least in (("batches", 50000), ("http_requests", 20000), ("events", 1000), ("stacks", 100),
                        ("unparsed", 100), ("findings", 50), ("sources", 100)):
        assert golden(view).num_rows >= least, view
    corpora = set(golden("sources").column("corpus").to_pylist())
    assert corpora == set(gen.CORPORA)


@pytest.mark.parametrize("corpus", list(gen.CORPORA))
def test_views_equal_golden(corpus: str) -> None:
    assert_same(gen.snapshot_corpus(corpus), expected(corpus))


@pytest.mark.parametrize("corpus", list(gen.CORPORA))
def test_scanner_views_equal_golden(corpus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every plain log read through the compiled scanner (sglang_fast), however small, gives the same views."""
    monkeypatch.setenv("HANGFORENSICS_SCAN_MIN_BYTES", "0")
    assert_same(gen.snapshot_corpus(corpus), expected(corpus))


@pytest.mark.parametrize("scan_min", ["0", str(1 << 40)])
def test_split_log_equals_golden(monkeypatch: pytest.MonkeyPatch, scan_min: str) -> None:
    """The generated log cut into byte ranges parsed by worker processes (with the scanner and without)
    gives the same views as one process reading it whole."""
    monkeypatch.setenv("HANGFORENSICS_SCAN_MIN_BYTES", scan_min)
    monkeypatch.setattr(pipeline, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.setattr(parallel, "SPLIT_MIN_BYTES", 1024)
    assert_same(gen.snapshot_corpus("big", jobs=2), expected("big"))


def test_scanner_groups_of_chunks_and_slices_equal_golden(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated log scanned in many small chunks, each in several slices, the general parser reading
    the rest once per group of several chunks (``sglang_fast.ScanGroup``), gives the same views: the rows
    of a group come back in line order, and its facts (release, clock steps, last time) are its chunks' in
    turn."""
    from hangforensics.ingest import parse
    from hangforensics.parsers.sglang import sglang_fast

    monkeypatch.setenv("HANGFORENSICS_SCAN_MIN_BYTES", "0")
    monkeypatch.setattr(parse, "CHUNK_BYTES", 256 * 1024)
    monkeypatch.setattr(sglang_fast, "SLICE_LINES", 700)
    monkeypatch.setattr(sglang_fast, "GROUP_BYTES", 1024 * 1024)
    groups: list[int] = []
    flush = sglang_fast.ScanGroup.flush

    def counted(self: sglang_fast.ScanGroup) -> list:
        groups.append(len(self.slices))
        return flush(self)

    monkeypatch.setattr(sglang_fast.ScanGroup, "flush", counted)
    assert_same(gen.snapshot_corpus("big"), expected("big"))
    assert len([g for g in groups if g > 1]) >= 3        # several groups, each of several slices


def test_scanner_failure_falls_back_to_the_general_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scanner that fails when called (compiling or caching its code) is turned off for the process; the
    chunk and the rest are read by the general parser, with the same views."""
    from types import SimpleNamespace

    from hangforensics.parsers.sglang import sglang_fast

    def broken(*args: object) -> None:
        raise OSError("cannot write the numba cache")

    monkeypatch.setenv("HANGFORENSICS_SCAN_MIN_BYTES", "0")
    monkeypatch.setattr(sglang_fast, "_scanner", None)
    working = sglang_fast.scanner()
    assert working is not None
    monkeypatch.setattr(sglang_fast, "_scanner", SimpleNamespace(**{
        name: getattr(working, name) for name in ("bounds", "gather", "REST", "BATCH", "ACCESS")}, scan=broken))
    assert_same(gen.snapshot_corpus("variants"), expected("variants"))
    assert sglang_fast.scanner() is None


def test_scanner_off_without_a_numba_cache(tmp_path) -> None:
    """Where numba has no writable cache directory (it refuses ``cache=True``) and the scanner built ahead of
    time has none either, the scanner module still imports, reports itself uncached, and a large read takes
    the general parser: no crash, same rows."""
    import subprocess
    import sys
    import textwrap

    log = tmp_path / "server.log"
    log.write_text("".join(f"[2026-01-01 00:00:{i % 60:02d} TP0] Decode batch, #running-req: {i}, #token: 8, "
                           f"token usage: 0.01, gen throughput (token/s): 1.5, #queue-req: 0\n" for i in range(500)))
    code = textwrap.dedent(f"""
        import logging
        from numba.core import caching
        impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")
        impl._locator_classes = []                    # as with no writable directory anywhere
        logging.basicConfig()
        from hangforensics.parsers.sglang import sglang_fast, sglang_scan
        from hangforensics.store import Store
        from hangforensics.ingest.pipeline import ingest_paths
        assert sglang_scan.CACHED is False
        with Store(":memory:") as st:
            ingest_paths(st, [{str(log)!r}], mode="engine")
            print(st.scalar("SELECT count(*) FROM batches"), st.scalar("SELECT sum(running_req) FROM batches"))
        assert sglang_fast.scanner() is None
    """)
    # (nor one for the scanner built ahead of time: a folder below a file cannot be made)
    (tmp_path / "file").write_text("")
    env = {**os.environ, "HANGFORENSICS_SCAN_MIN_BYTES": "0", "HANGFORENSICS_SCANNER_DIR": str(tmp_path / "file" / "aot")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["500", str(sum(range(500)))]
    assert "compiled log scanner is off" in run.stderr


@pytest.mark.parametrize("distinct", [4, 1100])
def test_scanner_ranks_equal_the_general_parser(tmp_path, monkeypatch: pytest.MonkeyPatch, distinct: int) -> None:
    """The scanner interns each chunk's rank prefixes (up to ``MAX_RANKS``; past that they are cut out line by
    line): either way every batch and access row carries the rank text the general parser reads."""
    from hangforensics.parsers.sglang import sglang_scan

    assert distinct < sglang_scan.MAX_RANKS or distinct > sglang_scan.MAX_RANKS + 50
    log = tmp_path / "e" / "server.log"
    log.parent.mkdir()
    lines = []
    for i in range(2400):
        k = i % distinct
        prefix = f"[2026-01-01 00:{i // 60 % 60:02d}:{i % 60:02d} DP{k // 8} TP{k % 8}]" if k else \
            f"[2026-01-01 00:{i // 60 % 60:02d}:{i % 60:02d}]"
        lines.append(f"{prefix} Decode batch, #running-req: {i}, #token: 8, token usage: 0.01, "
                     f"gen throughput (token/s): 1.5, #queue-req: 0\n" if i % 3 else
                     f'{prefix} INFO:     10.0.0.{k % 250}:5{k % 10}00 - "POST /generate HTTP/1.1" 200 OK\n')
    log.write_text("".join(lines))
    fast, general = _read_both_ways(tmp_path, monkeypatch, {
        "batches": "SELECT line, rank, running_req FROM batches ORDER BY line",
        "http_requests": "SELECT line, client, method, path, status FROM http_requests ORDER BY line"})
    assert fast == general
    batches = fast["batches"].to_pylist()
    assert len(batches) == 1600 and fast["http_requests"].num_rows == 800
    assert len({r["rank"] for r in batches}) == min(distinct, 1100)
    assert batches[0]["rank"] == "DP0 TP1" and batches[0]["line"] == 2


def _read_both_ways(root, monkeypatch: pytest.MonkeyPatch,
                    queries: dict[str, str]) -> tuple[dict[str, pa.Table], dict[str, pa.Table]]:
    """``root/e`` ingested through the compiled scanner (however small) and through the general parser alone:
    each query's rows, the first way and the second."""
    from hangforensics import api
    from hangforensics.store import Store

    got = []
    for scan_min in ("0", str(1 << 40)):
        monkeypatch.setenv("HANGFORENSICS_SCAN_MIN_BYTES", scan_min)
        db = root / f"{scan_min}.duckdb"
        api.ingest([root / "e"], db)
        with Store(db, read_only=True) as st:
            got.append({name: st.con.sql(q).to_arrow_table() for name, q in queries.items()})
    return got[0], got[1]


# -- the scanner against the general parser, line by line, on generated batch, access and prefix variants --
_RANK_NAMES = ["DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP"]
_BAD_RANK_NAMES = ["ATTN_C", "MOE_D", "DQ", "T", "tp", "EPX", "AP", "MP", "E"]
_KEYS = ["#new-seq", "#new-token", "#cached-token", "#running-req", "#queue-req", "#token", "#full token",
         "token usage", "full token usage", "swa token usage", "mamba usage", "gen throughput (token/s)",
         "input throughput (token/s)", "accept len", "accept rate", "cuda graph", "cpu graph", "#prealloc-req",
         "#transfer-req", "#pending-token"]
_BAD_KEYS = ["#running-req ", "#token:", "token usage, x", "#queue", " #token", "Token usage", "#tokex", "token usagx",
             "#new-sex", "accept lem"]
_VALUES = ["0", "17", "-3", "007", "1.5", "0.04", "-0.5", "123456789012345", "True", "False"]
_BAD_VALUES = [" 12", "12 ", "", ".5", "5.", "1e5", "1/2", "9:9", "99999999999999999999", "1234567890123456",
               "Tru", "nan", "1,5", "0.0000000000000000000001", "12a", "\u0661\u0662", "+3", "--1", "0x1F", "1.2.3",
               "\x0b7", "7\x0e", "\t8", "9\x0c"]
_BAD_STAMP_BYTES = "/:;,.- a0`"            # the bytes next to the digits, and others


def _generated_line(r) -> str:
    """An SGLang batch, access or other line, each part right most of the time and now and then wrong in one
    way the scanner must notice (a byte next to a digit, a rank name it does not know, a value it cannot
    type, a key that is nearly one)."""
    def pick(good: list[str], bad: list[str], p_bad: float = 0.15) -> str:
        return r.choice(bad) if r.random() < p_bad else r.choice(good)

    stamp = f"{r.choice(['2026', '2024', '1999'])}-{r.randint(1, 12):02d}-{r.randint(1, 31):02d} " \
            f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"
    if r.random() < 0.1:
        k = r.randrange(len(stamp))
        stamp = stamp[:k] + r.choice(_BAD_STAMP_BYTES) + stamp[k + 1:]
    if r.random() < 0.03:
        stamp = r.choice(["2026-02-29 10:00:00", "2026-13-01 00:00:00", "2026-01-01 24:00:00", "0000-01-01 00:00:00"])
    ranks = "".join(f" {pick(_RANK_NAMES, _BAD_RANK_NAMES, 0.08)}{pick(['0', '3', '12'], ['', 'x'], 0.08)}"
                    for _ in range(r.choice([0, 1, 1, 1, 2, 3])))
    prefix = f"[{stamp}{ranks}]{r.choice([' '] * 12 + ['', '  '])}"
    kind = r.random()
    if kind < 0.6:
        head = r.choice(["Decode batch", "Prefill batch", "Decode batch [812]"] * 4 +
                        ["Decode batch []", "Prefill batch [x]", "Decode  batch", "Decode batch [12"])
        fields = [f"{pick(_KEYS, _BAD_KEYS, 0.05)}{r.choice([': '] * 20 + [':', ' : '])}{pick(_VALUES, _BAD_VALUES, 0.1)}"
                  for _ in range(r.randint(0, 9))]
        msg = head + r.choice([", "] * 6 + [". ", ",", " "]) + r.choice([", "] * 12 + [",", " ,"]).join(fields) + \
            r.choice(["", "", ", ", ",", " "])
    elif kind < 0.9:
        msg = (f"{pick(['INFO', 'WARNING', 'ERROR'], ['INF', 'info'], 0.05)}:{r.choice(['     '] * 6 + [' ', ''])}"
               f"10.0.{r.randint(0, 9)}.1:5{r.randint(0, 99)}{r.choice([' - '] * 12 + [' -'])}\""
               f"{pick(['GET', 'POST'], ['get', '', 'P0ST'], 0.05)} "
               f"{pick(['/health', '/v1/chat/completions', '/generate'], ['/a b', ''], 0.05)} "
               f"HTTP/{pick(['1.1', '2'], ['', 'x', '1.1a'], 0.05)}\" {pick(['200', '503'], ['20', '2000', 'abc'], 0.05)} OK")
    else:
        msg = r.choice(["Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "Load weight end.",
                        "x [2026-01-01 00:00:00 TP1] y", "Decode batch", "", "INFO: text"])
    line = prefix + msg
    if r.random() < 0.01:                       # another record's prefix after the start: an interleaving
        k = r.randrange(1, len(line) + 1)
        line = line[:k] + f"[2026-01-01 00:00:0{r.randint(0, 9)} TP1] " + line[k:]
    if r.random() < 0.005:
        line += "\u00e9"                         # not ASCII
    return line


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_scanner_reads_every_generated_line_as_the_general_parser_does(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                                           seed: int) -> None:
    """Both readings of the same lines give the same rows: the scanner takes a line only where it is certain,
    and types each value exactly as the general parser's regexes and casts do."""
    import random

    r = random.Random(seed)
    (tmp_path / "e").mkdir()
    # the reader ends a chunk before the last line that looks like a record start (a date after '['), which
    # the parser may take for none (a rank it does not know): the chunk's head, read alike both ways
    lines = [_generated_line(r) for _ in range(4000)]
    (tmp_path / "e" / "server.log").write_text("\n".join(lines) + "\n")
    fast, general = _read_both_ways(tmp_path, monkeypatch, {
        t: f"SELECT * EXCLUDE (engine) FROM {t} ORDER BY line" for t in ("batches", "http_requests", "events", "unparsed")})
    assert fast["batches"].num_rows > 500 and fast["http_requests"].num_rows > 300   # the scanner had work
    bad = {t: first_difference(_nan_named(fast[t]), _nan_named(general[t])) for t in fast}
    assert set(bad.values()) == {"equal"}, "\n".join(f"{t}: {d}" for t, d in bad.items() if d != "equal")


def _nan_named(t: pa.Table) -> pa.Table:
    """``t`` with NaN spelled "NaN" (a NaN equals nothing, itself included)."""
    import pyarrow.compute as pc

    for i, field in enumerate(t.schema):
        if pa.types.is_floating(field.type):
            col = t.column(i)
            t = t.set_column(i, field.name, pc.if_else(pc.is_nan(col), "NaN", pc.cast(col, pa.string())))
    return t
